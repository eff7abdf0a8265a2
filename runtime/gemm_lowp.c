/* gemm_lowp.c: matrix products with bf16 or f16 operands, f32 accumulation and f32 output (the
 * autocast pass's products) for the CPU device. Convention: bf16 goes through oneDNN's matmul
 * primitive (vdpbf16ps where the CPU has AVX-512 BF16); f16, and bf16 where oneDNN has no
 * kernel for this CPU, are widened to f32 (exactly) and multiplied by sn_gemm_f32. */
#include "gemm_lowp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

#ifdef SN_HAVE_DNNL
#include <dnnl.h>
#include <dnnl_debug.h>
#include <pthread.h>
#endif

/* f16 widened on the bits (exact): normals rebias the exponent, subnormals are m 2^-24 (an
 * integer's float times a power of two: no f32 subnormal arithmetic, whatever the thread's
 * flush-to-zero mode), NaN the quiet one of its sign. The CPU's F16C does the operands' bulk
 * (widen_f16c); ldexpf an element made an f16 GEMM on the CPU 17x a bf16 one (gpt2 B=1 T=128,
 * 2026-11-29). */
static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, u;
    if (em >= 0x7c00u) u = sign | (em > 0x7c00u ? 0x7fc00000u : 0x7f800000u);
    else if (em >= 0x0400u) u = sign | ((em << 13) + (112u << 23));
    else {
        float m = (float)em * 0x1p-24f; /* 0 and the subnormals */
        memcpy(&u, &m, sizeof u);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f32 rounded to f16 on the bits, to nearest even (sn_dtype_round's rounding): overflow from
 * 65520 to infinity, subnormals in steps of 2^-24, NaN 0x7e00. */
static inline uint16_t f16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7e00;
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* 65520 and up (infinity too) */
    if (a < 0x38800000u) { /* under 2^-14: a multiple of 2^-24, rounded to nearest even */
        float f;
        memcpy(&f, &a, sizeof f);
        return sign | (uint16_t)nearbyintf(f * 0x1p24f);
    }
    return sign | (uint16_t)((a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13);
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float sn_lowp_widen(sn_dtype t, uint16_t bits) {
    return t == SN_BF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
/* n f16 widened by the CPU's F16C (vcvtph2ps, 8 at a time: exact, subnormals at full speed,
 * where a scalar multiply of an f32 subnormal stalls); NaN stays NaN (its payload kept). */
__attribute__((target("avx,f16c"))) static void widen_f16c(const uint16_t *x, float *y, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + j))));
    for (; j < n; j++) y[j] = f16_to_f32(x[j]);
}
/* CPUID's AVX and F16C with the OS saving the YMM registers (XCR0 bits 1 and 2); clang 14's
 * __builtin_cpu_supports does not know "f16c". Idempotent: a race writes the same answer. */
static bool have_f16c(void) {
    static int known = -1;
    if (known < 0) {
        unsigned a, b, c, d, lo = 0, hi = 0;
        bool cpu = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) && (c & bit_F16C);
        if (cpu) __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        known = cpu && (lo & 6) == 6;
    }
    return known > 0;
}
#else
static void widen_f16c(const uint16_t *x, float *y, int64_t n) { (void)x, (void)y, (void)n; }
static bool have_f16c(void) { return false; }
#endif

/* rows x cols of a 16-bit matrix (leading dimension ld) widened into a packed f32 copy: this
 * thread's buffer `slot`, kept between calls up to KEEP_FLOATS (a fresh one a call cost its page
 * faults: gpt2 fp16 B=1 T=128 on 2 cores, 330 ms a step kept, 394 not); larger ones (the LM
 * head's operands at large batches) are freed after their product (release_large). */
enum { KEEP_FLOATS = 16 << 20 };
static _Thread_local struct { float *p; size_t n; } bufs[2];
static void release_large(void) {
    for (int i = 0; i < 2; i++)
        if (bufs[i].n > KEEP_FLOATS) {
            free(bufs[i].p);
            bufs[i].p = NULL;
            bufs[i].n = 0;
        }
}
static float *widen(sn_dtype t, const uint16_t *x, int64_t rows, int64_t cols, int64_t ld,
                    int slot, sn_err *e) {
    size_t n = (size_t)(rows * cols);
    if (bufs[slot].n < n) {
        free(bufs[slot].p);
        bufs[slot].n = 0;
        if (!(bufs[slot].p = sn_malloc(sizeof(float) * n, "an f32 copy of a 16-bit GEMM operand", e)))
            return NULL;
        bufs[slot].n = n;
    }
    float *y = bufs[slot].p;
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *xi = x + i * ld;
        float *yi = y + i * cols;
        if (t == SN_BF16)
#pragma omp simd
            for (int64_t j = 0; j < cols; j++) yi[j] = bf16_to_f32(xi[j]);
        else if (have_f16c())
            widen_f16c(xi, yi, cols);
        else
            for (int64_t j = 0; j < cols; j++) yi[j] = f16_to_f32(xi[j]);
    }
    return y;
}

static sn_status widened(sn_dtype t, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                         int64_t ldc, sn_err *e) {
    float *a = widen(t, A, ta ? K : M, ta ? M : K, lda, 0, e);
    float *b = a ? widen(t, B, tb ? N : K, tb ? K : N, ldb, 1, e) : NULL;
    sn_status s = !b ? SN_ERR_OOM
                     : sn_gemm_f32(ta, tb, M, N, K, a, ta ? M : K, b, tb ? K : N, 0, C, ldc, e);
    release_large();
    return s;
}

#ifdef SN_HAVE_DNNL
/* The calling thread's oneDNN engine and stream (each pool thread multiplies on its own). */
typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    bool failed;
} dnnl_ctx;

static _Thread_local dnnl_ctx tctx;

/* A thread's engine and stream go with the thread (a device's pool threads end with the device):
 * a pthread key's destructor, which C11's _Thread_local lacks, destroys them. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_key_once = PTHREAD_ONCE_INIT;
static bool ctx_key_ok;

static void ctx_end(void *p) {
    dnnl_ctx *c = p;
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->eng) dnnl_engine_destroy(c->eng);
    *c = (dnnl_ctx){.failed = true};
}

static void ctx_key_make(void) { ctx_key_ok = pthread_key_create(&ctx_key, ctx_end) == 0; }

static dnnl_ctx *ctx_get(void) {
    if (!tctx.eng && !tctx.failed) {
        pthread_once(&ctx_key_once, ctx_key_make);
        if (!ctx_key_ok || pthread_setspecific(ctx_key, &tctx) != 0 ||
            dnnl_engine_create(&tctx.eng, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&tctx.stream, tctx.eng, dnnl_stream_default_flags) != dnnl_success)
            tctx.failed = true;
    }
    return tctx.failed ? NULL : &tctx;
}

/* dnnl_unimplemented when oneDNN offers only its reference kernel for this CPU (no AVX-512: a
 * plain loop nest, ~100x slower than sgemm on the widened operands). */
static dnnl_status_t reference_only(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return dnnl_unimplemented;
    return strncmp(impl, "ref", 3) ? dnnl_success : dnnl_unimplemented;
}

/* C = op(A) op(B) with bf16 A, B through the matmul primitive (oneDNN caches primitives by
 * their description, so a shape seen before is not compiled again). dnnl_unimplemented when
 * this CPU has no bf16 matmul kernel. */
static dnnl_status_t matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                               int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc) {
    dnnl_ctx *c = ctx_get();
    if (!c) return dnnl_runtime_error;
    dnnl_dims_t ad = {M, K}, as = {ta ? 1 : lda, ta ? lda : 1};
    dnnl_dims_t bd = {K, N}, bs = {tb ? 1 : ldb, tb ? ldb : 1};
    dnnl_dims_t cd = {M, N}, cs = {ldc, 1};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    dnnl_exec_arg_t args[3];
    dnnl_status_t s;
    if ((s = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as)) ||
        (s = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs)) ||
        (s = dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs)) ||
        (s = dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd)) ||
        (s = dnnl_primitive_desc_create(&pd, &desc, NULL, c->eng, NULL)) ||
        (s = reference_only(pd)) ||
        (s = dnnl_primitive_create(&prim, pd)) ||
        (s = dnnl_memory_create(&mem[0], &amd, c->eng, (void *)A)) ||
        (s = dnnl_memory_create(&mem[1], &bmd, c->eng, (void *)B)) ||
        (s = dnnl_memory_create(&mem[2], &cmd, c->eng, C)))
        goto done;
    args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem[0]};
    args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem[1]};
    args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem[2]};
    if (!(s = dnnl_primitive_execute(prim, c->stream, 3, args))) s = dnnl_stream_wait(c->stream);
done:
    for (int i = 0; i < 3; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return s;
}
#endif

sn_status sn_gemm_lowp(sn_dtype t, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                       int64_t ldc, sn_err *e) {
    SN_ASSERT(t == SN_BF16 || t == SN_F16);
#ifdef SN_HAVE_DNNL
    if (t == SN_BF16) {
        dnnl_status_t s = matmul_bf16(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
        if (s == dnnl_success) return SN_OK;
        if (s != dnnl_unimplemented)
            return sn_fail(e, SN_ERR_DEVICE, "oneDNN bf16 matmul (%lld x %lld x %lld) failed: %s",
                           (long long)M, (long long)N, (long long)K, dnnl_status2str(s));
    }
#endif
    return widened(t, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, e);
}

sn_status sn_gemm_matmul_part_lowp(const sn_node *mm, const sn_gemm_view *view, float *c,
                                   const void *a, const void *b, const float *bias, int part,
                                   int parts, sn_err *e) {
    sn_gemm_part p;
    sn_gemm_part_of(mm, view, part, parts, &p);
    const uint16_t *a16 = (const uint16_t *)a + p.oa, *b16 = (const uint16_t *)b + p.ob;
    for (int64_t i = p.b0; i < p.b1 && p.r0 < p.r1 && p.c0 < p.c1; i++) {
        const uint16_t *ai = a16 + i * p.sa + (p.ta ? p.r0 : p.r0 * p.lda);
        const uint16_t *bi = b16 + i * p.sb + (p.tb ? p.c0 * p.ldb : p.c0);
        sn_status s = sn_gemm_lowp(mm->in[0]->dtype, p.ta, p.tb, p.r1 - p.r0, p.c1 - p.c0, p.K, ai,
                                   p.lda, bi, p.ldb, c + i * p.M * p.N + p.r0 * p.N + p.c0, p.N, e);
        if (s) return s;
        sn_gemm_part_bias(&p, c, bias, i); /* the bias epilogue (f32 output) */
    }
    return SN_OK;
}

/* bf16 on the bits: adding 0x7fff plus the kept part's last bit rounds the 16 dropped bits to
 * nearest even, carrying into the exponent on overflow (to infinity), as sn_dtype_round does,
 * for normals and subnormals alike; a GEMM's output is stored so, and the loop through the
 * double-based sn_dtype_round made a bf16 GEMM twice as slow as an f32 one. Inline, so that
 * the stores' loops vectorize. */
static inline uint16_t bf16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(v != v ? (u >> 16) | 0x40 : r);
}

uint16_t sn_lowp_round(sn_dtype t, float v) { return t == SN_BF16 ? bf16_round(v) : f16_round(v); }

void sn_gemm_store_lowp(sn_dtype t, void *y, const float *c, const void *bias, const void *acc,
                        int64_t N, int64_t r0, int64_t r1) {
    SN_ASSERT(t == SN_BF16 || t == SN_F16);
    uint16_t *y16 = y;
    const uint16_t *b16 = bias, *a16 = acc;
    if (t == SN_BF16) { /* the same sums, inline (vectorized) */
        for (int64_t r = r0; r < r1; r++) {
            const float *cr = c + r * N;
            uint16_t *yr = y16 + r * N;
            const uint16_t *ar = a16 ? a16 + r * N : NULL;
            if (b16 && ar)
#pragma omp simd
                for (int64_t j = 0; j < N; j++)
                    yr[j] = bf16_round((cr[j] + bf16_to_f32(b16[j])) + bf16_to_f32(ar[j]));
            else if (b16)
#pragma omp simd
                for (int64_t j = 0; j < N; j++) yr[j] = bf16_round(cr[j] + bf16_to_f32(b16[j]));
            else if (ar)
#pragma omp simd
                for (int64_t j = 0; j < N; j++) yr[j] = bf16_round(cr[j] + bf16_to_f32(ar[j]));
            else
#pragma omp simd
                for (int64_t j = 0; j < N; j++) yr[j] = bf16_round(cr[j]);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < N; j++) {
            int64_t i = r * N + j;
            float v = c[i];
            if (b16) v += f16_to_f32(b16[j]);
            if (a16) v += f16_to_f32(a16[i]); /* read before y[i]: acc may be y */
            y16[i] = f16_round(v);
        }
}
