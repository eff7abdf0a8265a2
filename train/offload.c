/* offload.c: the host AdamW of offload.h, split over a thread pool and vectorised.
 * Convention: every intermediate is a float and each line is one IEEE operation in the
 * generated kernels' order. The vector forms (SSE2, AVX2, AVX-512: one clone each, chosen at
 * run time by the CPU's features) do the same operations lane by lane, so they are bit-identical
 * to the scalar loop: this file is built with -ffp-contract=off (no FMA even where the clone's
 * target has one) and -fno-math-errno (sqrtf without the errno branch, so that it vectorises;
 * a negative v cannot occur, and NaN gives NaN either way); meson.build says so. */
#include "offload.h"

#include <math.h>
#include <string.h>

#include "program/kernel.h"

/* The step's scalars, read once. */
typedef struct {
    float b1, b2, c1, c2, inv, scale, bc1, bc2, eps, lr;
} adamw_scalars;

/* The clones: the one best for the CPU is picked at load time (an ifunc), so a binary built for
 * the x86-64 baseline still runs 512-bit vectors where the CPU has them. GCC builds without
 * ASan only (ifuncs under tools/sanitize are untried): elsewhere the baseline's vectors, the
 * same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* The bf16 bits of x, rounded to nearest even on the bits, NaN kept a NaN (the prelude's
 * sn_f32_to_bf16 and the CPU kernels' store): branch-free, so the loop vectorises. */
static inline uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t nan = (u >> 16) | 0x40u, r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

/* AdamW on [lo, hi) with weight decay wd; low16: the new weights' bf16 bits, or NULL. */
CLONES static void adamw_range(const adamw_scalars *s, float wd, float *restrict p,
                               float *restrict m, float *restrict v, const float *restrict g,
                               uint16_t *restrict low16, int64_t lo, int64_t hi) {
    const float b1 = s->b1, b2 = s->b2, c1 = s->c1, c2 = s->c2, inv = s->inv, scale = s->scale;
    const float bc1 = s->bc1, bc2 = s->bc2, eps = s->eps, lr = s->lr;
    for (int64_t i = lo; i < hi; i++) {
        float gi = g[i] * inv;
        gi = gi * scale;
        float ma = b1 * m[i], mb = c1 * gi;
        float mi = ma + mb;
        float g2 = gi * gi;
        float va = b2 * v[i], vb = c2 * g2;
        float vi = va + vb;
        float mhat = mi / bc1;
        float den = sqrtf(vi / bc2);
        den = den + eps;
        float q = mhat / den, d = wd * p[i];
        float upd = q + d;
        float step = lr * upd;
        float pn = p[i] - step;
        p[i] = pn;
        m[i] = mi;
        v[i] = vi;
        if (low16) low16[i] = bf16_bits(pn);
    }
}

/* The f16 copies (rare: fp16 targets): by the compiler's conversion, round to nearest even. */
static void f16_range(const float *p, uint16_t *low16, int64_t lo, int64_t hi) {
#ifdef __FLT16_MAX__
    for (int64_t i = lo; i < hi; i++) {
        _Float16 h = (_Float16)p[i];
        memcpy(&low16[i], &h, sizeof h);
    }
#else
    (void)p, (void)low16, (void)lo, (void)hi;
    SN_ASSERT(!"f16 weight shadows need a compiler with _Float16");
#endif
}

typedef struct {
    adamw_scalars s;
    float wd;
    float *p, *m, *v;
    const float *g;
    uint16_t *low16;
    sn_dtype low;
    int64_t n, mid;
} adamw_job;

enum { PART = 64 }; /* elements per pool item: parts start on whole cache lines of each array */

static void adamw_part(void *ctx, int64_t begin, int64_t end) {
    const adamw_job *j = ctx;
    int64_t lo = begin * PART, hi = end * PART < j->n ? end * PART : j->n;
    uint16_t *bf = j->low == SN_BF16 ? j->low16 : NULL;
    int64_t a = lo < j->mid ? lo : j->mid, b = hi < j->mid ? hi : j->mid; /* the decayed part */
    if (a < b) adamw_range(&j->s, j->wd, j->p, j->m, j->v, j->g, bf, a, b);
    a = lo > j->mid ? lo : j->mid;
    if (a < hi) adamw_range(&j->s, 0.0f, j->p, j->m, j->v, j->g, bf, a, hi);
    if (j->low == SN_F16) f16_range(j->p, j->low16, lo, hi);
}

static void run(sn_pool *pool, int64_t n, sn_pool_fn fn, void *ctx) {
    int64_t items = (n + PART - 1) / PART;
    if (pool && items > 1) sn_pool_run(pool, items, fn, ctx);
    else if (items) fn(ctx, 0, items);
}

void sn_offload_adamw(sn_pool *pool, const float *h, float *p, float *m, float *v, const float *g,
                      void *low, sn_dtype low_dtype, int64_t n, int64_t n_decay) {
    SN_ASSERT(low_dtype == SN_F32 || ((low_dtype == SN_BF16 || low_dtype == SN_F16) && low));
    float b1 = h[SN_OPT_BETA1], b2 = h[SN_OPT_BETA2];
    adamw_job j = {
        .s = {b1, b2, 1.0f - b1, 1.0f - b2, h[SN_OPT_INV_MICRO], h[SN_OPT_SCALE], h[SN_OPT_BC1],
              h[SN_OPT_BC2], h[SN_OPT_EPS], h[SN_OPT_LR]},
        .wd = h[SN_OPT_WD], .p = p, .m = m, .v = v, .g = g, .low16 = low, .low = low_dtype, .n = n,
        .mid = n_decay < 0 ? 0 : n_decay > n ? n : n_decay};
    run(pool, n, adamw_part, &j);
}

typedef struct {
    float *sum;
    const float *g;
    int64_t n;
} acc_job;

CLONES static void acc_range(float *restrict sum, const float *restrict g, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) sum[i] += g[i];
}

static void acc_part(void *ctx, int64_t begin, int64_t end) {
    const acc_job *j = ctx;
    acc_range(j->sum, j->g, begin * PART, end * PART < j->n ? end * PART : j->n);
}

void sn_offload_acc(sn_pool *pool, float *sum, const float *g, int64_t n) {
    acc_job j = {sum, g, n};
    run(pool, n, acc_part, &j);
}
