/* peak.c: the FMA peak of peak.h: 16 independent accumulators per thread (more than latency x
 * ports on current cores), on the widest vectors the CPU has; each thread pinned to its own CPU
 * (best effort), all released together by a barrier. */
#include "peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "support/clock.h"

#define ACC16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* The two AVX-512 kernels: 16 accumulators a0..a15 updated by STEP from x and y, then summed. */
#define DECL512(i) __m512 a##i = _mm512_set1_ps(0.001f * (i + 1));
#define SUM512(i) s = _mm512_add_ps(s, a##i);
#define LOOP512(STEP)                                   \
    __m512 s = _mm512_setzero_ps();                     \
    for (long it = 0; it < iters; it++) { ACC16(STEP) } \
    ACC16(SUM512)                                       \
    return _mm512_reduce_add_ps(s);

/* Per iteration: 16 chains x 16 lanes x 2 flops. */
#define FMA512(i) a##i = _mm512_fmadd_ps(a##i, x, y);
__attribute__((target("avx512f"))) static float fma512(long iters) {
    ACC16(DECL512)
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    LOOP512(FMA512)
}

/* Per iteration: 16 chains x 16 lanes x 2 bf16 pairs x 2 flops. */
#define DPBF16(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16(long iters) {
    ACC16(DECL512)
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3a83), y = (__m512bh)_mm512_set1_epi16(0x3a83); /* ~1e-3 */
    LOOP512(DPBF16)
}

/* Per iteration: 12 chains x 8 lanes x 2 flops. 12, not 16: AVX2 has 16 ymm registers, and 16
 * accumulators plus x and y spilled to the stack (the peak read below what GEMMs reach); 12 still
 * covers FMA latency x ports (4-5 x 2). */
#define ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
__attribute__((target("avx2,fma"))) static float fma256(long iters) {
#define DECL(i) __m256 a##i = _mm256_set1_ps(0.001f * (i + 1));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    ACC12(DECL)
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f), s = _mm256_setzero_ps();
    for (long it = 0; it < iters; it++) { ACC12(STEP) }
    ACC12(SUM)
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
#undef DECL
#undef STEP
#undef SUM
}

typedef enum { K_FMA512, K_DPBF16, K_FMA256 } kernel;

static double flops_per_iter(kernel k) { return k == K_FMA512 ? 16 * 32 : k == K_DPBF16 ? 16 * 64 : 12 * 16; }

static float run_kernel(kernel k, long iters) {
    return k == K_FMA512 ? fma512(iters) : k == K_DPBF16 ? dpbf16(iters) : fma256(iters);
}

typedef struct {
    kernel k;
    long iters;
    int cpu;
    pthread_barrier_t *bar;
    double gflops;
    volatile float sink;
} job;

static void *run(void *arg) {
    job *j = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    pthread_barrier_wait(j->bar);
    double t0 = sn_clock_s();
    j->sink = run_kernel(j->k, j->iters);
    j->gflops = flops_per_iter(j->k) * (double)j->iters / (sn_clock_s() - t0) / 1e9;
    return NULL;
}

bool sn_bench_peak_supported(sn_bench_peak_dtype dt) {
    __builtin_cpu_init();
    if (dt == SN_PEAK_BF16) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    return __builtin_cpu_supports("avx512f") || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
}

enum { MAX_THREADS = 256 };

bool sn_bench_peak_measure(sn_bench_peak_dtype dt, int threads, int reps, sn_bench_peak *out) {
    memset(out, 0, sizeof *out);
    if (!sn_bench_peak_supported(dt)) return false;
    kernel k = dt == SN_PEAK_BF16 ? K_DPBF16 : __builtin_cpu_supports("avx512f") ? K_FMA512 : K_FMA256;
    out->isa = k == K_DPBF16 ? "avx512_bf16" : k == K_FMA512 ? "avx512f" : "avx2";
    out->instr = k == K_DPBF16 ? "avx512 vdpbf16ps" : k == K_FMA512 ? "avx512 vfmadd231ps" : "avx2 vfmadd231ps";

    int cpus[MAX_THREADS]; /* the CPUs this process may run on */
    int ncpu = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) CPU_SET(0, &set);
    for (int c = 0; c < CPU_SETSIZE && ncpu < MAX_THREADS; c++)
        if (CPU_ISSET(c, &set)) cpus[ncpu++] = c;
    if (threads <= 0 || threads > ncpu) threads = ncpu;
    out->threads = threads;

    long iters = 100000; /* calibrated so that one run takes about 0.2 s */
    double t0 = sn_clock_s();
    volatile float s = run_kernel(k, iters);
    (void)s;
    double dt_s = sn_clock_s() - t0;
    iters = (long)((double)iters * 0.2 / (dt_s > 1e-5 ? dt_s : 1e-5));

    job jobs[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job){.k = k, .iters = iters, .cpu = cpus[i], .bar = &bar};
            pthread_create(&ids[i], NULL, run, &jobs[i]);
        }
        double total = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(ids[i], NULL);
            total += jobs[i].gflops;
        }
        pthread_barrier_destroy(&bar);
        if (total > out->gflops) out->gflops = total, out->gflops_per_core = total / threads;
    }
    return true;
}

double sn_bench_fma_peak(int threads, int reps, const char **isa) {
    sn_bench_peak p;
    sn_bench_peak_measure(SN_PEAK_F32, threads, reps, &p);
    if (isa) *isa = p.isa ? p.isa : "none";
    return p.gflops;
}
