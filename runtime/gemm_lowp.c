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

static float f16_to_f32(uint16_t h) {
    int s = h >> 15, ex = (h >> 10) & 31, m = h & 1023;
    float v = ex == 0 ? ldexpf((float)m, -24) : ex == 31 ? (m ? NAN : INFINITY)
                                                        : ldexpf((float)(m | 1024), ex - 25);
    return s ? -v : v;
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

/* rows x cols of a 16-bit matrix (leading dimension ld) widened into a packed f32 copy. */
static float *widen(sn_dtype t, const uint16_t *x, int64_t rows, int64_t cols, int64_t ld, sn_err *e) {
    float *y = sn_malloc(sizeof(float) * (size_t)(rows * cols), "an f32 copy of a 16-bit GEMM "
                         "operand", e);
    if (!y) return NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            y[i * cols + j] = t == SN_BF16 ? bf16_to_f32(x[i * ld + j]) : f16_to_f32(x[i * ld + j]);
    return y;
}

static sn_status widened(sn_dtype t, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                         int64_t ldc, sn_err *e) {
    float *a = widen(t, A, ta ? K : M, ta ? M : K, lda, e);
    float *b = a ? widen(t, B, tb ? N : K, tb ? K : N, ldb, e) : NULL;
    sn_status s = !b ? SN_ERR_OOM
                     : sn_gemm_f32(ta, tb, M, N, K, a, ta ? M : K, b, tb ? K : N, 0, C, ldc, e);
    free(a);
    free(b);
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

uint16_t sn_lowp_round(sn_dtype t, float v) {
    uint32_t u;
    if (t == SN_BF16) return bf16_round(v);
    float r = (float)sn_dtype_round(t, v);
    memcpy(&u, &r, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(r);
    if (isnan(v)) return 0x7e00;
    if (isinf(a) || a >= 65520.0f) return sign | 0x7c00;
    if (a < ldexpf(1, -14)) return sign | (uint16_t)(a * ldexpf(1, 24)); /* subnormal: exact */
    int ex;
    float m = frexpf(a, &ex); /* a = m 2^ex, m in [0.5, 1) */
    return sign | (uint16_t)((ex + 14) << 10) | (uint16_t)((m * 2048.0f) - 1024.0f);
}

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
            if (b16) v += sn_lowp_widen(t, b16[j]);
            if (a16) v += sn_lowp_widen(t, a16[i]); /* read before y[i]: acc may be y */
            y16[i] = sn_lowp_round(t, v);
        }
}
