/* gemm_libs.c: which CPU GEMM library should sinter call? Times oneDNN, BLIS and OpenBLAS on the
 * GEMMs of one GPT-2 124M training step (B=4, T=256) and measures this machine's FMA peak.
 * Convention: row-major C(m,n) = op(A)(m,k) @ op(B)(k,n), beta = 0; transa 'T' means A is stored
 * (k,m), transb 'T' means B is stored (n,k). Each library runs in a worker process (this binary
 * re-executed with --worker) so that per-process knobs (OPENBLAS_CORETYPE, BLIS_ARCH_TYPE) are
 * compared in one interleaved run. stdout: one JSON object per line; stderr: a summary table.
 * Results and the choice they led to: docs/gemm.md. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef SN_HAVE_DNNL
#include <dnnl.h>
#include <dnnl_debug.h>
#endif
#ifdef SN_HAVE_BLIS
#include <blis.h>
#endif
#ifdef SN_HAVE_OPENMP
#include <omp.h>
#endif
#ifdef SN_HAVE_OPENBLAS
/* Declared here, not through OpenBLAS's cblas.h: blis.h declares the same cblas_* names. */
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int n);
extern int openblas_get_parallel(void);
#endif

#define DIE(...) (fprintf(stderr, "gemm_libs: " __VA_ARGS__), fputc('\n', stderr), exit(1))

/* ---- shapes: GPT-2 124M, B=4, T=256 -------------------------------------------------------- */

enum { BT = 4 * 256, C1 = 768, VP = 50304, NLAYER = 12 };

typedef struct {
    const char *pass, *op;
    int m, n, k;
    char ta, tb;
    int per_step; /* how many times one training step runs it */
} Shape;

static const Shape shapes[] = {
    /* forward: y(BT,N) = x(BT,K) @ W(K,N); LM head: logits(BT,Vp) = x(BT,C) @ wte(Vp,C)^T */
    {"fwd", "qkv", BT, 3 * C1, C1, 'N', 'N', NLAYER},
    {"fwd", "attn_proj", BT, C1, C1, 'N', 'N', NLAYER},
    {"fwd", "fc", BT, 4 * C1, C1, 'N', 'N', NLAYER},
    {"fwd", "fc_proj", BT, C1, 4 * C1, 'N', 'N', NLAYER},
    {"fwd", "lm_head", BT, VP, C1, 'N', 'T', 1},
    /* backward, data: dx(BT,K) = dy(BT,N) @ W(K,N)^T; LM head: dx(BT,C) = dlogits(BT,Vp) @ wte(Vp,C) */
    {"bwd_dx", "qkv", BT, C1, 3 * C1, 'N', 'T', NLAYER},
    {"bwd_dx", "attn_proj", BT, C1, C1, 'N', 'T', NLAYER},
    {"bwd_dx", "fc", BT, C1, 4 * C1, 'N', 'T', NLAYER},
    {"bwd_dx", "fc_proj", BT, 4 * C1, C1, 'N', 'T', NLAYER},
    {"bwd_dx", "lm_head", BT, C1, VP, 'N', 'N', 1},
    /* backward, weights: dW(K,N) = x(BT,K)^T @ dy(BT,N); LM head: dwte(Vp,C) = dlogits^T @ x */
    {"bwd_dw", "qkv", C1, 3 * C1, BT, 'T', 'N', NLAYER},
    {"bwd_dw", "attn_proj", C1, C1, BT, 'T', 'N', NLAYER},
    {"bwd_dw", "fc", C1, 4 * C1, BT, 'T', 'N', NLAYER},
    {"bwd_dw", "fc_proj", 4 * C1, C1, BT, 'T', 'N', NLAYER},
    {"bwd_dw", "lm_head", VP, C1, BT, 'T', 'N', 1},
};
enum { NSHAPE = sizeof shapes / sizeof shapes[0] };

static int is_lm_head(const Shape *s) { return strcmp(s->op, "lm_head") == 0; }
/* The fused bias+GELU epilogue is timed on the per-layer forward GEMMs (what a Linear computes). */
static int takes_epilogue(const Shape *s) { return strcmp(s->pass, "fwd") == 0 && !is_lm_head(s); }

/* ---- variants: one library entry point each; groups share a worker process ------------------ */

typedef struct {
    const char *group, *api;
    int bf16;     /* A and B in bf16, accumulation and C in fp32 */
    int epilogue; /* C = gelu_tanh(A@B + bias) fused */
} Variant;

static const Variant variants[] = {
    {"onednn", "sgemm", 0, 0},            /* dnnl_sgemm */
    {"onednn", "matmul", 0, 0},           /* matmul primitive, plain strided layouts */
    {"onednn", "matmul+bias+gelu", 0, 1}, /* same, with bias and an eltwise gelu_tanh post-op */
    {"onednn", "matmul", 1, 0},
    {"onednn", "matmul+bias+gelu", 1, 1},
    {"blis", "bli_sgemm", 0, 0},
    {"openblas", "cblas_sgemm", 0, 0},
};
enum { NVAR = sizeof variants / sizeof variants[0] };

/* A worker: a group of variants in one process, with one environment setting. The variable named
 * in `knob` is removed from the inherited environment, then `env` (if any) is set; env NULL thus
 * means the library's own CPU detection, whatever the caller's environment says. */
typedef struct {
    const char *group, *knob, *env;
    int in_quick;
} WorkerSpec;

static const WorkerSpec worker_specs[] = {
    {"onednn", NULL, NULL, 1},
    {"blis", "BLIS_ARCH_TYPE", "BLIS_ARCH_TYPE=skx", 1},
    {"blis", "BLIS_ARCH_TYPE", "BLIS_ARCH_TYPE=zen3", 0}, /* AVX2 kernels */
    {"blis", "BLIS_ARCH_TYPE", NULL, 0},
    {"openblas", "OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE=SKYLAKEX", 1},
    {"openblas", "OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE=COOPERLAKE", 1},
    {"openblas", "OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE=HASWELL", 0}, /* AVX2 kernels */
    {"openblas", "OPENBLAS_CORETYPE", NULL, 0},
};
enum { NSPEC = sizeof worker_specs / sizeof worker_specs[0] };

static int group_compiled(const char *group)
{
#ifdef SN_HAVE_DNNL
    if (strcmp(group, "onednn") == 0) return 1;
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(group, "blis") == 0) return 1;
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(group, "openblas") == 0) return 1;
#endif
    (void)group;
    return 0;
}

/* ---- small helpers --------------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void loadavg(char *buf, size_t len) /* "1.23 0.80 0.50": other work competing for the cores */
{
    snprintf(buf, len, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, (int)len, f)) snprintf(buf, len, "?");
        fclose(f);
        int spaces = 0;
        for (char *p = buf; *p; p++)
            if (*p == '\n' || (*p == ' ' && ++spaces == 3)) *p = 0;
    }
}

static double cpu_ms(void) /* all threads of this process */
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void sleep_ms(double ms)
{
    struct timespec t = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static float rng_uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) * (2.0 / (1 << 24)) - 1.0); }

static uint16_t f32_to_bf16(float f) /* round to nearest even; inputs here are finite */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double gelu_tanh(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static void json_str(FILE *f, const char *key, const char *s)
{
    fprintf(f, "\"%s\":\"", key);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
        else if ((unsigned char)*s < 0x20) fputc(' ', f);
        else fputc(*s, f);
    }
    fputc('"', f);
}

typedef struct { double ms, share; } Sample; /* share: CPU time / (wall time x threads) */

static int cmp_sample(const void *a, const void *b)
{
    double x = ((const Sample *)a)->ms, y = ((const Sample *)b)->ms;
    return (x > y) - (x < y);
}

/* ---- FMA peak: one pinned thread per core, independent accumulator chains -------------------- */

#define ACC16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* 16 chains of vfmadd (latency ~4 cycles, 2 pipes): 16 x 16 lanes x 2 flops per iteration. */
__attribute__((target("avx512f"))) static float fma_avx512(long iters)
{
#define DECL(i) __m512 a##i = _mm512_set1_ps(0.001f * (i + 1));
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    ACC16(DECL)
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f), s = _mm512_setzero_ps();
    for (long it = 0; it < iters; it++) { ACC16(STEP) }
    ACC16(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

/* 16 chains of vdpbf16ps: 16 x 16 lanes x 2 pairs x 2 flops per iteration. */
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_avx512(long iters)
{
#define DECL(i) __m512 a##i = _mm512_set1_ps(0.001f * (i + 1));
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    ACC16(DECL)
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3a83), y = (__m512bh)_mm512_set1_epi16(0x3a83); /* ~1e-3 */
    __m512 s = _mm512_setzero_ps();
    for (long it = 0; it < iters; it++) { ACC16(STEP) }
    ACC16(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

/* AVX2 fallback for machines without AVX-512: 8 lanes. */
__attribute__((target("avx2,fma"))) static float fma_avx2(long iters)
{
#define DECL(i) __m256 a##i = _mm256_set1_ps(0.001f * (i + 1));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    ACC16(DECL)
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f), s = _mm256_setzero_ps();
    for (long it = 0; it < iters; it++) { ACC16(STEP) }
    ACC16(SUM)
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
#undef DECL
#undef STEP
#undef SUM
}

typedef enum { PEAK_FMA512, PEAK_DPBF16, PEAK_FMA256 } PeakKind;

static double peak_flops_per_iter(PeakKind k)
{
    return k == PEAK_FMA512 ? 16 * 32 : k == PEAK_DPBF16 ? 16 * 64 : 16 * 16;
}

static float peak_kernel(PeakKind k, long iters)
{
    return k == PEAK_FMA512 ? fma_avx512(iters) : k == PEAK_DPBF16 ? dpbf16_avx512(iters) : fma_avx2(iters);
}

typedef struct {
    PeakKind kind;
    long iters;
    int cpu;
    pthread_barrier_t *bar;
    double gflops;
    float sink;
} PeakThread;

static void *peak_thread(void *arg)
{
    PeakThread *t = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    pthread_barrier_wait(t->bar);
    double t0 = now_ms();
    t->sink = peak_kernel(t->kind, t->iters);
    t->gflops = peak_flops_per_iter(t->kind) * t->iters / ((now_ms() - t0) * 1e6);
    return NULL;
}

/* Best total GFLOP/s of `nthreads` pinned threads running concurrently, over `reps` runs. */
static double measure_peak(PeakKind kind, int nthreads, int reps, double *per_core)
{
    int cpus[64], ncpu = 0;
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    for (int c = 0; c < CPU_SETSIZE && ncpu < 64; c++)
        if (CPU_ISSET(c, &set)) cpus[ncpu++] = c;
    if (ncpu < nthreads) nthreads = ncpu;
    long iters = 100000;
    double t0 = now_ms();
    volatile float sink = peak_kernel(kind, iters);
    (void)sink;
    double dt = now_ms() - t0;
    iters = (long)(iters * 200.0 / (dt > 0.01 ? dt : 0.01)); /* ~200 ms per run */
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
        PeakThread th[64];
        pthread_t id[64];
        for (int i = 0; i < nthreads; i++) {
            th[i] = (PeakThread){kind, iters, cpus[i], &bar, 0, 0};
            pthread_create(&id[i], NULL, peak_thread, &th[i]);
        }
        double total = 0;
        for (int i = 0; i < nthreads; i++) pthread_join(id[i], NULL), total += th[i].gflops;
        pthread_barrier_destroy(&bar);
        if (total > best) best = total, *per_core = total / nthreads;
    }
    return best;
}

/* Prints one line per (dtype, thread count) and raises *f32 and *bf16 to this run's peak: the larger
 * of the concurrent total and threads x one core alone (a neighbour on a shared machine depresses
 * the concurrent run more often than the lone one). */
static void measure_peaks(const char *when, int threads, int has512, int hasbf16, double *f32, double *bf16)
{
    PeakKind kinds[2] = {has512 ? PEAK_FMA512 : PEAK_FMA256, PEAK_DPBF16};
    for (int kk = 0; kk < (hasbf16 ? 2 : 1); kk++)
        for (int nt = 1; nt <= threads; nt += threads > 1 ? threads - 1 : 1) {
            double per_core = 0, total = measure_peak(kinds[kk], nt, 5, &per_core);
            const char *what = kinds[kk] == PEAK_FMA512   ? "avx512 vfmadd231ps"
                               : kinds[kk] == PEAK_DPBF16 ? "avx512 vdpbf16ps"
                                                          : "avx2 vfmadd231ps";
            printf("{\"bench\":\"peak\",\"when\":\"%s\",\"dtype\":\"%s\",\"instr\":\"%s\",\"threads\":%d,"
                   "\"reps\":5,\"gflops_per_core\":%.1f,\"gflops\":%.1f}\n",
                   when, kk ? "bf16" : "f32", what, nt, per_core, total);
            double *pk = kk ? bf16 : f32;
            if (nt == 1 && total * threads > *pk) *pk = total * threads;
            if (nt == threads && total > *pk) *pk = total;
        }
}

/* ---- GEMM problems and the reference check --------------------------------------------------- */

typedef struct {
    int m, n, k;
    char ta, tb;
    float *a, *b, *bias, *c;  /* a: (m,k) or (k,m); b: (k,n) or (n,k); bias: (n); c: (m,n) */
    uint16_t *abf, *bbf;      /* bf16 copies of a and b (bf16 variants only) */
} Gemm;

static double a_at(const Gemm *g, int bf, int i, int p)
{
    size_t x = g->ta == 'N' ? (size_t)i * g->k + p : (size_t)p * g->m + i;
    return bf ? bf16_to_f32(g->abf[x]) : g->a[x];
}
static double b_at(const Gemm *g, int bf, int p, int j)
{
    size_t x = g->tb == 'N' ? (size_t)p * g->n + j : (size_t)j * g->k + p;
    return bf ? bf16_to_f32(g->bbf[x]) : g->b[x];
}

/* Error of one entry against a double-precision dot product over the same (bf16-rounded) inputs,
 * normalized by the sum of |products| so it is scale-free; NaN when C is NaN. */
static double entry_err(const Gemm *g, const Variant *v, int i, int j)
{
    double dot = 0, mag = 0;
    for (int p = 0; p < g->k; p++) {
        double t = a_at(g, v->bf16, i, p) * b_at(g, v->bf16, p, j);
        dot += t, mag += fabs(t);
    }
    if (v->epilogue) dot = gelu_tanh(dot + g->bias[j]), mag += fabs(g->bias[j]);
    double got = g->c[(size_t)i * g->n + j];
    return fabs(got - dot) / (mag + 1e-30);
}

/* ---- library plans: created once per (variant, shape), run many times ------------------------ */

typedef struct {
    int var;
    Gemm g;
#ifdef SN_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t mem[4]; /* src, weights, bias, dst */
#endif
#ifdef SN_HAVE_OPENBLAS
    void (*cblas_sgemm)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c, int ldc);
#endif
} Plan;

#ifdef SN_HAVE_DNNL
static dnnl_engine_t dnnl_eng;
static dnnl_stream_t dnnl_str;
#define DNNL_TRY(call)                                                                          \
    do {                                                                                        \
        dnnl_status_t st_ = (call);                                                             \
        if (st_ != dnnl_success) {                                                              \
            snprintf(msg, msglen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, dnnl_status2str(st_)); \
            return -1;                                                                          \
        }                                                                                       \
    } while (0)

static int dnnl_plan(Plan *p, const Variant *v, char *impl, size_t impllen, char *msg, size_t msglen)
{
    const Gemm *g = &p->g;
    if (strcmp(v->api, "sgemm") == 0) {
        snprintf(impl, impllen, "dnnl_sgemm isa=%s", dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
        return 0;
    }
    dnnl_data_type_t dt = v->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t ad = {g->m, g->k}, as = {g->ta == 'N' ? g->k : 1, g->ta == 'N' ? 1 : g->m};
    dnnl_dims_t bd = {g->k, g->n}, bs = {g->tb == 'N' ? g->n : 1, g->tb == 'N' ? 1 : g->k};
    dnnl_dims_t cd = {g->m, g->n}, cs = {g->n, 1}, biasd = {1, g->n}, biass = {g->n, 1};
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt, as));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt, bs));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&biasmd, 2, biasd, dnnl_f32, biass));
    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init(&desc, &amd, &bmd, v->epilogue ? &biasmd : NULL, &cmd));
    dnnl_primitive_attr_t attr;
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    if (v->epilogue) {
        dnnl_post_ops_t po;
        DNNL_TRY(dnnl_post_ops_create(&po));
        DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f));
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, dnnl_eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    DNNL_TRY(st);
    const char *info = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &info);
    snprintf(impl, impllen, "%s", info);
    st = dnnl_primitive_create(&p->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    DNNL_TRY(st);
    DNNL_TRY(dnnl_memory_create(&p->mem[0], &amd, dnnl_eng, v->bf16 ? (void *)g->abf : (void *)g->a));
    DNNL_TRY(dnnl_memory_create(&p->mem[1], &bmd, dnnl_eng, v->bf16 ? (void *)g->bbf : (void *)g->b));
    DNNL_TRY(dnnl_memory_create(&p->mem[2], &biasmd, dnnl_eng, g->bias));
    DNNL_TRY(dnnl_memory_create(&p->mem[3], &cmd, dnnl_eng, g->c));
    return 0;
}
#endif

/* Returns 0, or -1 with msg filled (an unsupported combination, a library error). */
static int plan_new(Plan *p, int var, const Gemm *g, char *impl, size_t impllen, char *msg, size_t msglen)
{
    const Variant *v = &variants[var];
    memset(p, 0, sizeof *p);
    p->var = var, p->g = *g;
    snprintf(impl, impllen, "?");
#ifdef SN_HAVE_DNNL
    if (strcmp(v->group, "onednn") == 0) return dnnl_plan(p, v, impl, impllen, msg, msglen);
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(v->group, "blis") == 0) {
        snprintf(impl, impllen, "%s", bli_arch_string(bli_arch_query_id()));
        return 0;
    }
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(v->group, "openblas") == 0) {
        /* Look cblas_sgemm up inside libopenblas itself: BLIS exports the same name. */
        Dl_info di;
        void *h = NULL;
        if (dladdr((void *)openblas_get_config, &di) && di.dli_fname) h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (h) *(void **)&p->cblas_sgemm = dlsym(h, "cblas_sgemm");
        if (!p->cblas_sgemm) {
            snprintf(msg, msglen, "cblas_sgemm not found in libopenblas (%s)", dlerror());
            return -1;
        }
        snprintf(impl, impllen, "%s", openblas_get_corename());
        return 0;
    }
#endif
    (void)v, (void)msglen;
    snprintf(msg, msglen, "library not compiled in");
    return -1;
}

static void plan_run(Plan *p)
{
    const Variant *v = &variants[p->var];
    Gemm *g = &p->g;
#ifdef SN_HAVE_DNNL
    if (strcmp(v->group, "onednn") == 0) {
        if (!p->prim) {
            int lda = g->ta == 'N' ? g->k : g->m, ldb = g->tb == 'N' ? g->n : g->k;
            dnnl_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, lda, g->b, ldb, 0.0f, g->c, g->n);
            return;
        }
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->mem[0]}, {DNNL_ARG_WEIGHTS, p->mem[1]},
                                   {DNNL_ARG_DST, p->mem[3]}, {DNNL_ARG_BIAS, p->mem[2]}};
        dnnl_primitive_execute(p->prim, dnnl_str, v->epilogue ? 4 : 3, args);
        dnnl_stream_wait(dnnl_str);
        return;
    }
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(v->group, "blis") == 0) {
        float one = 1, zero = 0;
        inc_t rsa = g->ta == 'N' ? g->k : 1, csa = g->ta == 'N' ? 1 : g->m;
        inc_t rsb = g->tb == 'N' ? g->n : 1, csb = g->tb == 'N' ? 1 : g->k;
        bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, g->m, g->n, g->k, &one, g->a, rsa, csa, g->b, rsb, csb,
                  &zero, g->c, g->n, 1);
        return;
    }
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(v->group, "openblas") == 0) {
        enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* the CBLAS enum values */
        int lda = g->ta == 'N' ? g->k : g->m, ldb = g->tb == 'N' ? g->n : g->k;
        p->cblas_sgemm(ROW_MAJOR, g->ta == 'N' ? NO_TRANS : TRANS, g->tb == 'N' ? NO_TRANS : TRANS, g->m, g->n, g->k,
                       1.0f, g->a, lda, g->b, ldb, 0.0f, g->c, g->n);
        return;
    }
#endif
    (void)v, (void)g;
}

static void plan_free(Plan *p)
{
#ifdef SN_HAVE_DNNL
    if (p->prim) dnnl_primitive_destroy(p->prim);
    for (int i = 0; i < 4; i++)
        if (p->mem[i]) dnnl_memory_destroy(p->mem[i]);
#endif
    memset(p, 0, sizeof *p);
}

/* ---- worker process: owns one library group, answers timing requests on a pipe --------------- */

typedef struct { int32_t var, shape, check; } Req; /* var < 0: exit */
typedef struct {
    double ms, cpu_ms, err; /* cpu_ms: CPU time of the whole worker process during the call */
    int32_t ok;
    char impl[96], msg[200];
} Resp;
typedef struct {
    int32_t nvar, var[NVAR], ok[NVAR];
    char info[400];
} Hello;

static const double SLOW_FACTOR = 8; /* see --slow-ms */
static const double TOL = 1e-4; /* normalized error; a wrong GEMM is > 1e-3 on these shapes */

static void write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) exit(1);
        p += w, n -= (size_t)w;
    }
}
static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

/* Sets threads and reads the library's own description of itself into info. */
static void group_init(const char *group, int threads, char *info, size_t len)
{
    snprintf(info, len, "?");
#ifdef SN_HAVE_OPENMP
    omp_set_num_threads(threads);
#endif
#ifdef SN_HAVE_DNNL
    if (strcmp(group, "onednn") == 0) {
        const dnnl_version_t *ver = dnnl_version();
        if (dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) != dnnl_success) DIE("oneDNN: no CPU engine");
        if (dnnl_stream_create(&dnnl_str, dnnl_eng, dnnl_stream_default_flags) != dnnl_success)
            DIE("oneDNN: cannot create a stream");
        snprintf(info, len, "oneDNN %d.%d.%d (%s), cpu_runtime=%s, omp_set_num_threads(%d), max isa %s", ver->major,
                 ver->minor, ver->patch, ver->hash, ver->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "not OpenMP",
                 threads, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    }
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(group, "blis") == 0) {
        /* BLIS 0.9 reads BLIS_ARCH_TYPE as a number at bli_init(); accept a sub-config name too. */
        const char *want = getenv("BLIS_ARCH_TYPE");
        if (want && (*want < '0' || *want > '9')) {
            for (int id = 0; id < BLIS_NUM_ARCHS; id++)
                if (strcmp(bli_arch_string((arch_t)id), want) == 0) {
                    char num[16];
                    snprintf(num, sizeof num, "%d", id);
                    setenv("BLIS_ARCH_TYPE", num, 1);
                }
        }
        bli_init();
        bli_thread_set_num_threads(threads);
        snprintf(info, len, "BLIS %s, sub-config %s, threading %s, bli_thread_set_num_threads(%d)",
                 bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()),
                 bli_info_get_enable_openmp() ? "OpenMP" : bli_info_get_enable_pthreads() ? "pthreads" : "none",
                 threads);
    }
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(group, "openblas") == 0) {
        openblas_set_num_threads(threads);
        int par = openblas_get_parallel();
        snprintf(info, len, "%s; core %s; threading %s, openblas_set_num_threads(%d)", openblas_get_config(),
                 openblas_get_corename(), par == 1 ? "pthreads" : par == 2 ? "OpenMP" : "sequential", threads);
    }
#endif
    (void)group, (void)threads;
}

static size_t max_of(int which) /* 0: A, 1: B, 2: C elements over all shapes */
{
    size_t best = 0;
    for (int i = 0; i < NSHAPE; i++) {
        const Shape *s = &shapes[i];
        size_t e = which == 0 ? (size_t)s->m * s->k : which == 1 ? (size_t)s->k * s->n : (size_t)s->m * s->n;
        if (e > best) best = e;
    }
    return best;
}

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) DIE("out of memory allocating %zu bytes", bytes);
    return p;
}

static void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(&s);
}

static const char *env_label(const WorkerSpec *w) { return w->env ? w->env : w->knob ? "autodetect" : "default"; }

/* Full comparison with the reference on a small odd shape, for all four transpose pairs. */
static int small_check(int var, int threads, const char *env)
{
    enum { SM = 37, SN = 29, SK = 53 };
    static float a[SM * SK], b[SK * SN], bias[SN], c[SM * SN];
    static uint16_t abf[SM * SK], bbf[SK * SN];
    fill(a, SM * SK, 11), fill(b, SK * SN, 12), fill(bias, SN, 13);
    for (int i = 0; i < SM * SK; i++) abf[i] = f32_to_bf16(a[i]);
    for (int i = 0; i < SK * SN; i++) bbf[i] = f32_to_bf16(b[i]);
    const Variant *v = &variants[var];
    int all_ok = 1;
    for (int t = 0; t < 4; t++) {
        Gemm g = {SM, SN, SK, t & 1 ? 'T' : 'N', t & 2 ? 'T' : 'N', a, b, bias, c, abf, bbf};
        Plan p;
        char impl[96], msg[200] = "";
        double err = NAN;
        memset(c, 0xff, sizeof c); /* NaN: a call that writes nothing fails */
        if (plan_new(&p, var, &g, impl, sizeof impl, msg, sizeof msg) == 0) {
            plan_run(&p);
            err = 0;
            for (int i = 0; i < SM; i++)
                for (int j = 0; j < SN; j++) {
                    double e = entry_err(&g, v, i, j);
                    if (!(e <= err)) err = e; /* keeps NaN */
                }
            plan_free(&p);
        }
        int ok = err <= TOL;
        all_ok &= ok;
        printf("{\"bench\":\"check\",");
        json_str(stdout, "lib", v->group), putchar(','), json_str(stdout, "api", v->api), putchar(',');
        json_str(stdout, "env", env), putchar(',');
        printf("\"dtype\":\"%s\",\"epilogue\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"transa\":\"%c\",\"transb\":\"%c\","
               "\"threads\":%d,\"max_err\":%.3g,\"tol\":%g,\"ok\":%s",
               v->bf16 ? "bf16" : "f32", v->epilogue ? "bias+gelu_tanh" : "none", SM, SN, SK, g.ta, g.tb, threads,
               isnan(err) ? -1.0 : err, TOL, ok ? "true" : "false");
        if (msg[0]) putchar(','), json_str(stdout, "error", msg);
        printf("}\n");
    }
    fflush(stdout);
    return all_ok;
}

static int worker_main(const char *group, const char *env, int threads, int rfd, int wfd, int measure_ref)
{
    Hello hello;
    memset(&hello, 0, sizeof hello);
    group_init(group, threads, hello.info, sizeof hello.info);
    for (int v = 0; v < NVAR; v++)
        if (strcmp(variants[v].group, group) == 0) {
            hello.var[hello.nvar] = v;
            hello.ok[hello.nvar++] = small_check(v, threads, env);
        }

    int any_bf16 = 0;
    for (int i = 0; i < hello.nvar; i++) any_bf16 |= variants[hello.var[i]].bf16;
    size_t na = max_of(0), nb = max_of(1), nc = max_of(2), nbias = 0;
    for (int i = 0; i < NSHAPE; i++)
        if ((size_t)shapes[i].n > nbias) nbias = (size_t)shapes[i].n;
    float *a = xalloc(na * 4), *b = xalloc(nb * 4), *c = xalloc(nc * 4), *bias = xalloc(nbias * 4);
    uint16_t *abf = NULL, *bbf = NULL;
    fill(a, na, 1), fill(b, nb, 2), fill(bias, nbias, 3);
    memset(c, 0, nc * 4);
    if (any_bf16) {
        abf = xalloc(na * 2), bbf = xalloc(nb * 2);
        for (size_t i = 0; i < na; i++) abf[i] = f32_to_bf16(a[i]);
        for (size_t i = 0; i < nb; i++) bbf[i] = f32_to_bf16(b[i]);
    }
    write_all(wfd, &hello, sizeof hello);

    static Plan plans[NVAR][NSHAPE];
    static char impls[NVAR][NSHAPE][96];
    static int state[NVAR][NSHAPE]; /* 0: none, 1: planned, -1: failed */
    Req rq;
    while (read_all(rfd, &rq, sizeof rq) == 0 && rq.var >= 0) {
        Resp rs;
        memset(&rs, 0, sizeof rs);
        int v = rq.var, si = rq.shape;
        const Shape *s = &shapes[si];
        Plan *p = &plans[v][si];
        if (state[v][si] == 0) {
            Gemm g = {s->m, s->n, s->k, s->ta, s->tb, a, b, bias, c, abf, bbf};
            state[v][si] = plan_new(p, v, &g, impls[v][si], sizeof impls[v][si], rs.msg, sizeof rs.msg) == 0 ? 1 : -1;
            if (state[v][si] == 1 && !measure_ref && strncmp(impls[v][si], "ref", 3) == 0) {
                snprintf(rs.msg, sizeof rs.msg, "reference (unoptimized) implementation; not timed (--measure-ref)");
                state[v][si] = -1;
            }
        }
        snprintf(rs.impl, sizeof rs.impl, "%s", impls[v][si]);
        if (state[v][si] == 1) {
            if (rq.check) memset(c, 0xff, (size_t)s->m * s->n * 4);
            double t0 = now_ms(), c0 = cpu_ms();
            plan_run(p);
            rs.ms = now_ms() - t0, rs.cpu_ms = cpu_ms() - c0;
            rs.ok = 1;
            if (rq.check) { /* 48 sampled entries against a double-precision dot product */
                uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(si * 131 + v);
                for (int t = 0; t < 48; t++) {
                    int i = (int)(rng_next(&seed) % (uint64_t)s->m), j = (int)(rng_next(&seed) % (uint64_t)s->n);
                    double e = entry_err(&p->g, &variants[v], i, j);
                    if (!(e <= rs.err)) rs.err = e;
                }
                rs.ok = rs.err <= TOL;
                if (!rs.ok) snprintf(rs.msg, sizeof rs.msg, "wrong result: normalized error %.3g > %g", rs.err, TOL);
            }
        }
        write_all(wfd, &rs, sizeof rs);
    }
    return 0;
}

/* ---- parent: spawn workers, interleave requests, print ------------------------------------- */

typedef struct {
    const WorkerSpec *spec;
    pid_t pid;
    int rfd, wfd, alive;
    Hello hello;
} Worker;

static int spawn_worker(Worker *w, const char *self, int threads, int measure_ref)
{
    int to_child[2], to_parent[2];
    if (pipe2(to_child, O_CLOEXEC) || pipe2(to_parent, O_CLOEXEC)) DIE("pipe: %s", strerror(errno));
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) DIE("fork: %s", strerror(errno));
    if (pid == 0) {
        fcntl(to_child[0], F_SETFD, 0), fcntl(to_parent[1], F_SETFD, 0);
        if (w->spec->knob) unsetenv(w->spec->knob);
        if (w->spec->env) putenv((char *)w->spec->env);
        char rfd[16], wfd[16], th[16];
        snprintf(rfd, sizeof rfd, "%d", to_child[0]), snprintf(wfd, sizeof wfd, "%d", to_parent[1]);
        snprintf(th, sizeof th, "%d", threads);
        const char *argv[] = {self, "--worker", w->spec->group, env_label(w->spec), rfd, wfd, th,
                              measure_ref ? "1" : "0", NULL};
        execv(self, (char *const *)argv);
        _exit(127);
    }
    close(to_child[0]), close(to_parent[1]);
    w->pid = pid, w->wfd = to_child[1], w->rfd = to_parent[0];
    w->alive = read_all(w->rfd, &w->hello, sizeof w->hello) == 0;
    return w->alive ? 0 : -1;
}

typedef struct { /* one (worker, variant) column of the results */
    Worker *w;
    int var, ok;
    double best[NSHAPE], median[NSHAPE], err[NSHAPE], share[NSHAPE];
    int reps[NSHAPE], measured[NSHAPE];
    char impl[NSHAPE][96];
} Slot;

static void usage(void)
{
    fprintf(stderr,
            "usage: gemm_libs [--reps N] [--quick] [--threads N] [--gap-ms MS] [--slow-ms MS] [--no-peak]\n"
            "                 [--only onednn,blis,openblas] [--measure-ref]\n"
            "  --reps N      timed repetitions per (shape, library), interleaved; best and median printed (5)\n"
            "  --quick       2 reps, no LM-head shapes, no autodetect or AVX2 settings of BLIS/OpenBLAS\n"
            "  --threads N   threads each library is set to use (2)\n"
            "  --gap-ms MS   pause before each timed call so idle pool threads stop spinning (30;\n"
            "                OpenBLAS gets 120 more: its idle threads spin ~2^28 cycles)\n"
            "  --slow-ms MS  a call slower than this on its warm-up (or 8x slower than the fastest\n"
            "                library's warm-up on that shape) is timed only once (3000)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 8 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argv[2], argv[3], atoi(argv[6]), atoi(argv[4]), atoi(argv[5]), atoi(argv[7]));

    int reps = 5, quick = 0, threads = 2, peak = 1, measure_ref = 0, reps_set = 0;
    double gap = 30, slow = 3000;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--reps") && i + 1 < argc) reps = atoi(argv[++i]), reps_set = 1;
        else if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--gap-ms") && i + 1 < argc) gap = atof(argv[++i]);
        else if (!strcmp(a, "--slow-ms") && i + 1 < argc) slow = atof(argv[++i]);
        else if (!strcmp(a, "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(a, "--no-peak")) peak = 0;
        else if (!strcmp(a, "--measure-ref")) measure_ref = 1;
        else usage();
    }
    if (quick && !reps_set) reps = 2;
    if (reps < 1 || threads < 1) usage();
    signal(SIGPIPE, SIG_IGN);

    /* machine */
    char model[128] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
                model[strcspn(model, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f"), hasbf16 = has512 && __builtin_cpu_supports("avx512bf16");
    char load[64];
    loadavg(load, sizeof load);
    printf("{\"bench\":\"machine\",");
    json_str(stdout, "cpu", model), putchar(','), json_str(stdout, "loadavg", load);
    printf(",\"online_cpus\":%ld,\"avx512f\":%s,\"avx512_bf16\":%s,\"threads\":%d,\"reps\":%d,\"quick\":%s}\n",
           sysconf(_SC_NPROCESSORS_ONLN), has512 ? "true" : "false", hasbf16 ? "true" : "false", threads, reps,
           quick ? "true" : "false");

    /* peak: measured before the workers start and again after they finish (they sleep in read()
     * by then); the larger counts, since neighbours on a shared machine only ever lower it */
    double peak_f32 = 0, peak_bf16 = 0;
    if (peak) measure_peaks("start", threads, has512, hasbf16, &peak_f32, &peak_bf16);

    /* workers */
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) DIE("cannot find my own executable: %s", strerror(errno));
    self[sl] = 0;
    Worker workers[NSPEC];
    int nworker = 0;
    static Slot slots[NVAR * NSPEC];
    int nslot = 0;
    for (int i = 0; i < NSPEC; i++) {
        const WorkerSpec *ws = &worker_specs[i];
        if (!group_compiled(ws->group) || (quick && !ws->in_quick) || (only && !strstr(only, ws->group))) continue;
        Worker *w = &workers[nworker];
        memset(w, 0, sizeof *w);
        w->spec = ws;
        if (spawn_worker(w, self, threads, measure_ref) != 0) {
            fprintf(stderr, "gemm_libs: worker %s [%s] died during start-up; skipped\n", ws->group, env_label(ws));
            continue;
        }
        nworker++;
        printf("{\"bench\":\"lib\",");
        json_str(stdout, "lib", ws->group), putchar(','), json_str(stdout, "env", env_label(ws)), putchar(',');
        json_str(stdout, "info", w->hello.info);
        printf("}\n");
        for (int j = 0; j < w->hello.nvar; j++) {
            Slot *s = &slots[nslot++];
            memset(s, 0, sizeof *s);
            s->w = w, s->var = w->hello.var[j], s->ok = w->hello.ok[j];
            if (!s->ok)
                fprintf(stderr, "gemm_libs: %s %s [%s] FAILED the small-shape check; not timed\n", ws->group,
                        variants[s->var].api, env_label(ws));
        }
    }
    if (nworker == 0)
        fprintf(stderr, "gemm_libs: no GEMM library to measure (none compiled in, or all failed to start)\n");

    /* measurements: per shape, warm-up + check, then `reps` rounds over all slots in rotating order */
    Sample *samples = malloc(sizeof(Sample) * (size_t)reps * NVAR * NSPEC);
    for (int si = 0; si < NSHAPE && nslot; si++) {
        const Shape *sh = &shapes[si];
        if (quick && is_lm_head(sh)) continue;
        int act[NVAR * NSPEC], nact = 0, slow_once[NVAR * NSPEC] = {0};
        for (int j = 0; j < nslot; j++) {
            Slot *s = &slots[j];
            const Variant *v = &variants[s->var];
            if (s->ok && s->w->alive && (!v->epilogue || takes_epilogue(sh))) act[nact++] = j;
        }
        double prev_gap = gap, warm[NVAR * NSPEC] = {0};
        for (int round = -1; round < reps; round++) {
            if (round == 0) { /* far slower than the best on its warm-up: timed once more, not `reps` times */
                double fastest = 0;
                for (int q = 0; q < nact; q++)
                    if (slots[act[q]].measured[si] && (fastest == 0 || warm[act[q]] < fastest)) fastest = warm[act[q]];
                for (int q = 0; q < nact; q++)
                    slow_once[act[q]] = warm[act[q]] > slow || warm[act[q]] > SLOW_FACTOR * fastest;
            }
            for (int q = 0; q < nact; q++) {
                int j = act[(q + (round < 0 ? 0 : round)) % nact];
                Slot *s = &slots[j];
                if (!s->w->alive || (round >= 0 && (!s->measured[si] || (slow_once[j] && round > 0)))) continue;
                Req rq = {s->var, si, round < 0};
                Resp rs;
                sleep_ms(prev_gap);
                write_all(s->w->wfd, &rq, sizeof rq);
                if (read_all(s->w->rfd, &rs, sizeof rs) != 0) {
                    fprintf(stderr, "gemm_libs: worker %s [%s] died on %s %s; its remaining results are lost\n",
                            s->w->spec->group, env_label(s->w->spec), sh->pass, sh->op);
                    s->w->alive = 0;
                    continue;
                }
                prev_gap = gap + (strcmp(s->w->spec->group, "openblas") == 0 ? 120 : 0);
                snprintf(s->impl[si], sizeof s->impl[si], "%s", rs.impl);
                if (round < 0) {
                    s->err[si] = rs.err;
                    s->measured[si] = rs.ok;
                    if (!rs.ok) {
                        printf("{\"bench\":\"gemm\",\"pass\":\"%s\",\"op\":\"%s\",", sh->pass, sh->op);
                        json_str(stdout, "lib", s->w->spec->group), putchar(',');
                        json_str(stdout, "api", variants[s->var].api), putchar(',');
                        json_str(stdout, "env", env_label(s->w->spec)), putchar(',');
                        json_str(stdout, "impl", rs.impl), putchar(',');
                        printf("\"dtype\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"transa\":\"%c\",\"transb\":\"%c\","
                               "\"ok\":false,",
                               variants[s->var].bf16 ? "bf16" : "f32", sh->m, sh->n, sh->k, sh->ta, sh->tb);
                        json_str(stdout, "error", rs.msg);
                        printf("}\n");
                    }
                    warm[j] = rs.ms;
                } else {
                    samples[(size_t)j * reps + (size_t)round] = (Sample){rs.ms, rs.cpu_ms / (rs.ms * threads)};
                }
            }
        }
        for (int q = 0; q < nact; q++) {
            int j = act[q];
            Slot *s = &slots[j];
            if (!s->measured[si]) continue;
            int nr = slow_once[j] ? 1 : reps;
            Sample *x = &samples[(size_t)j * reps];
            qsort(x, (size_t)nr, sizeof *x, cmp_sample);
            s->best[si] = x[0].ms, s->share[si] = x[0].share, s->reps[si] = nr;
            s->median[si] = nr % 2 ? x[nr / 2].ms : 0.5 * (x[nr / 2 - 1].ms + x[nr / 2].ms);
        }
    }
    free(samples);

    if (peak && nslot) sleep_ms(gap + 200), measure_peaks("end", threads, has512, hasbf16, &peak_f32, &peak_bf16);
    if (peak)
        printf("{\"bench\":\"peak_used\",\"threads\":%d,\"f32_gflops\":%.1f,\"bf16_gflops\":%.1f,"
               "\"note\":\"denominator of frac_of_peak: max over start and end of max(concurrent total, "
               "threads x one core alone)\"}\n",
               threads, peak_f32, peak_bf16);

    for (int si = 0; si < NSHAPE; si++) {
        const Shape *sh = &shapes[si];
        for (int j = 0; j < nslot; j++) {
            Slot *s = &slots[j];
            if (!s->measured[si]) continue;
            int nr = s->reps[si];
            const Variant *v = &variants[s->var];
            double gf = 2.0 * sh->m * sh->n * sh->k / (s->best[si] * 1e6);
            double pk = v->bf16 ? peak_bf16 : peak_f32;
            printf("{\"bench\":\"gemm\",\"pass\":\"%s\",\"op\":\"%s\",", sh->pass, sh->op);
            json_str(stdout, "lib", s->w->spec->group), putchar(',');
            json_str(stdout, "api", v->api), putchar(',');
            json_str(stdout, "env", env_label(s->w->spec)), putchar(',');
            json_str(stdout, "impl", s->impl[si]), putchar(',');
            printf("\"dtype\":\"%s\",\"out\":\"f32\",\"epilogue\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,"
                   "\"transa\":\"%c\",\"transb\":\"%c\",\"threads\":%d,\"reps\":%d,\"ms\":%.3f,\"median_ms\":%.3f,"
                   "\"gflops\":%.1f,",
                   v->bf16 ? "bf16" : "f32", v->epilogue ? "bias+gelu_tanh" : "none", sh->m, sh->n, sh->k, sh->ta,
                   sh->tb, threads, nr, s->best[si], s->median[si], gf);
            if (pk > 0) printf("\"frac_of_peak\":%.3f,", gf / pk);
            else printf("\"frac_of_peak\":null,");
            printf("\"cpu_share\":%.2f,\"max_err\":%.2g,\"ok\":true}\n", s->share[si], s->err[si]);
        }
    }

    /* per training step: sum over the shapes of count x best ms (fused-epilogue variants: forward
     * layer GEMMs only, against the plain matmul of the same dtype) */
    double best_step = 0;
    double step_ms[NVAR * NSPEC];
    for (int j = 0; j < nslot; j++) {
        Slot *s = &slots[j];
        const Variant *v = &variants[s->var];
        double ms = 0, flop = 0;
        int complete = s->ok;
        for (int si = 0; si < NSHAPE; si++) {
            const Shape *sh = &shapes[si];
            if ((quick && is_lm_head(sh)) || (v->epilogue && !takes_epilogue(sh))) continue;
            if (!s->measured[si]) complete = 0;
            ms += sh->per_step * s->best[si], flop += sh->per_step * 2.0 * sh->m * sh->n * sh->k;
        }
        step_ms[j] = complete ? ms : -1;
        if (!complete) continue;
        if (!v->epilogue && !v->bf16 && (best_step == 0 || ms < best_step)) best_step = ms;
        printf("{\"bench\":\"step\",");
        json_str(stdout, "lib", s->w->spec->group), putchar(',');
        json_str(stdout, "api", v->api), putchar(',');
        json_str(stdout, "env", env_label(s->w->spec)), putchar(',');
        printf("\"dtype\":\"%s\",\"epilogue\":\"%s\",\"scope\":\"%s\",\"ms\":%.1f,\"gflops\":%.1f}\n",
               v->bf16 ? "bf16" : "f32", v->epilogue ? "bias+gelu_tanh" : "none",
               v->epilogue ? "forward layer GEMMs x12"
                           : quick ? "all layer GEMMs x12 (no LM head)" : "all GEMMs of one step (12 layers + LM head)",
               ms, flop / (ms * 1e6));
    }

    /* stderr: a table of GFLOP/s, one column per slot */
    if (nslot) {
        fprintf(stderr, "\nGFLOP/s (best of %d, %d threads; peak f32 %.0f, bf16 %.0f GFLOP/s)\n", reps, threads,
                peak_f32, peak_bf16);
        fprintf(stderr, "%-18s %-16s", "shape", "m n k ta tb");
        for (int j = 0; j < nslot; j++) fprintf(stderr, " %6s%d", "col", j);
        fprintf(stderr, "\n");
        for (int si = 0; si < NSHAPE; si++) {
            const Shape *sh = &shapes[si];
            if (quick && is_lm_head(sh)) continue;
            char name[40], dims[40];
            snprintf(name, sizeof name, "%s.%s", sh->pass, sh->op);
            snprintf(dims, sizeof dims, "%d %d %d %c%c", sh->m, sh->n, sh->k, sh->ta, sh->tb);
            fprintf(stderr, "%-18s %-16s", name, dims);
            for (int j = 0; j < nslot; j++) {
                if (!slots[j].measured[si]) fprintf(stderr, " %7s", "-");
                else fprintf(stderr, " %7.1f", 2.0 * sh->m * sh->n * sh->k / (slots[j].best[si] * 1e6));
            }
            fprintf(stderr, "\n");
        }
        fprintf(stderr, "%-35s", "ms per step (sum count x best)");
        for (int j = 0; j < nslot; j++) {
            if (step_ms[j] > 0) fprintf(stderr, " %7.0f", step_ms[j]);
            else fprintf(stderr, " %7s", "-");
        }
        fprintf(stderr, "\ncolumns:\n");
        for (int j = 0; j < nslot; j++) {
            const Variant *v = &variants[slots[j].var];
            fprintf(stderr, "  col%d %s %s %s%s [%s]", j, slots[j].w->spec->group, v->api, v->bf16 ? "bf16" : "f32",
                    v->epilogue ? " (fwd layers only)" : "", env_label(slots[j].w->spec));
            if (step_ms[j] > 0 && best_step > 0 && !v->epilogue)
                fprintf(stderr, "  %.2fx the fastest f32", step_ms[j] / best_step);
            fprintf(stderr, "\n");
        }
    }

    loadavg(load, sizeof load);
    printf("{\"bench\":\"end\",");
    json_str(stdout, "loadavg", load);
    printf("}\n");
    for (int i = 0; i < nworker; i++) {
        Req quit = {-1, 0, 0};
        if (workers[i].alive) write_all(workers[i].wfd, &quit, sizeof quit);
        close(workers[i].wfd), close(workers[i].rfd);
        waitpid(workers[i].pid, NULL, 0);
    }
    return 0;
}
