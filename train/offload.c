/* offload.c: the host AdamW of offload.h. Convention: every intermediate is a float and each
 * line is one IEEE operation in the generated kernels' order; no FMA contraction happens on the
 * x86-64 baseline this is built for (a contracting build would differ in the last bit, within
 * the 1e-6 the offload tests allow). */
#include "offload.h"

#include <math.h>

#include "program/kernel.h"

static void adamw_range(const float *h, float wd, float *p, float *m, float *v, const float *g,
                        int64_t lo, int64_t hi) {
    float b1 = h[SN_OPT_BETA1], b2 = h[SN_OPT_BETA2], c1 = 1.0f - b1, c2 = 1.0f - b2;
    float inv = h[SN_OPT_INV_MICRO], scale = h[SN_OPT_SCALE], bc1 = h[SN_OPT_BC1];
    float bc2 = h[SN_OPT_BC2], eps = h[SN_OPT_EPS], lr = h[SN_OPT_LR];
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
        p[i] = p[i] - step;
        m[i] = mi;
        v[i] = vi;
    }
}

void sn_offload_adamw(const float *h, float *p, float *m, float *v, const float *g, int64_t n,
                      int64_t n_decay) {
    int64_t mid = n_decay < 0 ? 0 : n_decay > n ? n : n_decay;
    adamw_range(h, h[SN_OPT_WD], p, m, v, g, 0, mid);
    adamw_range(h, 0.0f, p, m, v, g, mid, n);
}

void sn_offload_acc(float *sum, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) sum[i] += g[i];
}
