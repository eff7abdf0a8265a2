/* interp_optim.c: the optimizer kernels of program/kernel.h written plainly in C: the oracle
 * the generated ones are tested against and what the trainer runs on the interpreter.
 * Convention: f32 arithmetic where the kernels store f32; the norm sums its partials and
 * AdamW divides in f64, as the convention allows. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "interp.h"
#include "program/kernel.h"

static void grad_acc(float *sum, const float *g, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) sum[i] += g[i];
}

static void sqnorm(const sn_kernel *k, float *part, const float *g, const float *scal, int64_t begin,
                   int64_t end) {
    float inv = scal[SN_OPT_INV_MICRO];
    for (int64_t b = begin; b < end; b++) {
        int64_t lo = b * SN_SQNORM_BLOCK, hi = lo + SN_SQNORM_BLOCK < k->opt.flat_n ? lo + SN_SQNORM_BLOCK : k->opt.flat_n;
        float s = 0;
        for (int64_t i = lo; i < hi; i++) {
            float x = g[i] * inv;
            s += x * x;
        }
        part[b] = s;
    }
}

static void clip(const sn_kernel *k, float *scal, const float *part) {
    int64_t nb = (k->opt.flat_n + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK;
    double sum = 0;
    for (int64_t b = 0; b < nb; b++) sum += part[b];
    double norm = sqrt(sum), c = scal[SN_OPT_CLIP];
    scal[SN_OPT_NORM] = (float)norm;
    scal[SN_OPT_SCALE] = (float)(c > 0 && norm > c ? c / norm : 1.0);
}

/* The bits of x in 16-bit dtype t, rounded to nearest even (sn_dtype_round; NaN stays NaN):
 * what the kernels' casts store. */
static uint16_t low_bits(sn_dtype t, float x) {
    double r = sn_dtype_round(t, x);
    if (t == SN_BF16) { /* r is an f32 whose low 16 bits are zero */
        float f = (float)r;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        return (uint16_t)(isnan(x) ? (u >> 16) | 0x40u : u >> 16);
    }
    SN_ASSERT(t == SN_F16);
    uint16_t sign = signbit(r) ? 0x8000u : 0;
    double a = fabs(r);
    if (isnan(r)) return 0x7e00u;
    if (isinf(a)) return sign | 0x7c00u;
    if (a < 0x1p-14) return sign | (uint16_t)(a * 0x1p24); /* subnormal (or zero): exact */
    int ex;
    double f = frexp(a, &ex); /* a = 2f 2^(ex-1), 1 <= 2f < 2 */
    return sign | (uint16_t)((ex - 1 + 15) << 10) | (uint16_t)((2 * f - 1) * 1024);
}

static void adamw(const sn_kernel *k, float *p, float *m, float *v, const float *g, const float *h,
                  uint16_t *low, int64_t begin, int64_t end) {
    float b1 = h[SN_OPT_BETA1], b2 = h[SN_OPT_BETA2], lr = h[SN_OPT_LR], eps = h[SN_OPT_EPS];
    double bc1 = h[SN_OPT_BC1], bc2 = h[SN_OPT_BC2];
    for (int64_t i = begin; i < end; i++) {
        float gi = g[i] * h[SN_OPT_INV_MICRO] * h[SN_OPT_SCALE];
        float wd = i < k->opt.flat_decay ? h[SN_OPT_WD] : 0;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mhat = m[i] / bc1, vhat = v[i] / bc2;
        p[i] -= (float)(lr * (mhat / (sqrt(vhat) + eps) + wd * p[i]));
        if (low) low[i] = low_bits(k->opt.flat_low, p[i]);
    }
}

void sn_interp_optim(const sn_kernel *k, void *const *bufs, int64_t begin, int64_t end) {
    switch (k->kind) {
    case SN_KER_GRAD_ACC: grad_acc(bufs[0], bufs[1], begin, end); return;
    case SN_KER_SQNORM: sqnorm(k, bufs[0], bufs[1], bufs[2], begin, end); return;
    case SN_KER_CLIP: clip(k, bufs[0], bufs[1]); return;
    case SN_KER_ADAMW:
        adamw(k, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], k->opt.flat_low == SN_F32 ? NULL : bufs[5],
              begin, end);
        return;
    default: SN_ASSERT(0);
    }
}
