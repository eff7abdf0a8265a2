/* nf4.c: NF4 with double quantization (nf4.h): packing an f32 array and unpacking it.
 * Convention: as bitsandbytes does, a block's codes are chosen against its exact absmax; only
 * then are the absmaxes double-quantized, so the stored scale differs from the one the codes
 * were chosen for by at most half a group's step. Packing runs in parts a caller may run at
 * once (sn_nf4_quantize_on); only the mean of the absmax is summed in one place, in order. */
#include "nf4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* QLoRA appendix E / bitsandbytes' NF4 table: the quantiles of N(0, 1) at 8 points on each side,
 * normalized to [-1, 1], with 0 exact (an asymmetric 7 + 1 + 8). */
const float sn_nf4_levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

sn_nf4_layout sn_nf4_layout_of(int64_t n) {
    SN_ASSERT(n >= 1);
    sn_nf4_layout l = {.n = n};
    l.blocks = (n + SN_NF4_BLOCK - 1) / SN_NF4_BLOCK;
    l.groups = (l.blocks + SN_NF4_SCALE_GROUP - 1) / SN_NF4_SCALE_GROUP;
    l.off_steps = 4;
    l.off_scale_codes = l.off_steps + 4 * l.groups;
    l.off_codes = l.off_scale_codes + l.blocks;
    l.bytes = l.off_codes + (n + 1) / 2;
    return l;
}

/* Midpoint m between levels m and m + 1 (in double: no rounding). */
static double midpoint(int m) {
    return 0.5 * ((double)sn_nf4_levels[m] + (double)sn_nf4_levels[m + 1]);
}

int sn_nf4_nearest(float x) { /* the number of midpoints x is above (they increase) */
    int q = 0;
    for (int m = 0; m < 15; m++) q += (double)x > midpoint(m);
    return q;
}

static float get_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

static void put_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }

/* ---- quantizing: each block's absmax, their mean in block order, then each group packed ---- */

typedef struct {
    const float *w;
    int64_t n;
    sn_nf4_layout l;
    float *amax; /* [blocks]: NaN for a block holding a weight that is not finite */
    float mean;
    uint8_t *out;
    float above[15]; /* a float x is above midpoint m exactly when x > above[m] (the largest
                        float not above it) */
} quantize_job;

static void block_absmax(void *ctx, int64_t b0, int64_t b1) {
    quantize_job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        float a = 0;
        for (int64_t i = b * SN_NF4_BLOCK; i < j->n && i < (b + 1) * SN_NF4_BLOCK; i++) {
            if (!isfinite(j->w[i])) {
                a = NAN;
                break;
            }
            a = fmaxf(a, fabsf(j->w[i]));
        }
        j->amax[b] = a;
    }
}

/* Groups [g0, g1): their steps, scale codes and weights' codes (each group's bytes its own). */
static void pack_groups(void *ctx, int64_t g0, int64_t g1) {
    quantize_job *j = ctx;
    const sn_nf4_layout *l = &j->l;
    float mean = j->mean;
    for (int64_t g = g0; g < g1; g++) {
        int64_t b0 = g * SN_NF4_SCALE_GROUP, b1 = b0 + SN_NF4_SCALE_GROUP;
        if (b1 > l->blocks) b1 = l->blocks;
        double dev = 0;
        for (int64_t b = b0; b < b1; b++) dev = fmax(dev, fabs((double)j->amax[b] - mean));
        float step = (float)(dev / 127.0);
        put_f32(j->out + l->off_steps + 4 * g, step);
        int64_t end = b1 * SN_NF4_BLOCK < j->n ? b1 * SN_NF4_BLOCK : j->n + 1; /* odd n: + 1 */
        int64_t c0 = b0 * SN_NF4_BLOCK / 2, c1 = end / 2;
        memset(j->out + l->off_codes + c0, 0, (size_t)(c1 - c0));
        for (int64_t b = b0; b < b1; b++) {
            float a = j->amax[b];
            double c = step > 0 ? nearbyint(((double)a - mean) / step) : 0;
            c = fmin(127, fmax(-127, c));
            j->out[l->off_scale_codes + b] = (uint8_t)(int8_t)c;
            /* the codes against the exact absmax (0 for an all-zero block: level 7 is 0): each
               the number of midpoints w / a is above, sn_nf4_nearest's answer, the block's
               weights a vector at a time, branch-free (a binary search a weight mispredicted:
               19 ns a weight for gpt2-xl's shapes where this takes 10, one thread) */
            int64_t i0 = b * SN_NF4_BLOCK;
            int64_t len = j->n - i0 < SN_NF4_BLOCK ? j->n - i0 : SN_NF4_BLOCK;
            float x[SN_NF4_BLOCK];
            int32_t q[SN_NF4_BLOCK];
            for (int k = 0; k < SN_NF4_BLOCK; k++) { /* a short block's rest: 0, not stored */
                x[k] = a > 0 && k < len ? j->w[i0 + k] / a : 0;
                q[k] = 0;
            }
            for (int m = 0; m < 15; m++)
                for (int k = 0; k < SN_NF4_BLOCK; k++) q[k] += x[k] > j->above[m];
            for (int64_t k = 0; k < len; k++)
                j->out[l->off_codes + (i0 + k) / 2] |= (uint8_t)(k % 2 ? q[k] : q[k] << 4);
        }
    }
}

/* fn over [0, n) on the calling thread (sn_nf4_quantize's runner) */
static void in_order(void *runner, int64_t n, sn_nf4_range_fn fn, void *ctx) {
    (void)runner;
    fn(ctx, 0, n);
}

sn_status sn_nf4_quantize_on(const float *w, int64_t n, uint8_t *out, sn_nf4_run_fn run,
                             void *runner, sn_err *e) {
    quantize_job j = {.w = w, .n = n, .l = sn_nf4_layout_of(n), .out = out};
    if (!run) run = in_order;
    for (int m = 0; m < 15; m++) {
        float t = (float)midpoint(m);
        j.above[m] = (double)t > midpoint(m) ? nextafterf(t, -INFINITY) : t;
    }
    if (!(j.amax = sn_malloc(sizeof(float) * (size_t)j.l.blocks, "the NF4 blocks' absmax", e)))
        return SN_ERR_OOM;
    run(runner, j.l.blocks, block_absmax, &j);
    /* the mean needs every block's absmax: summed here, in block order (the bytes do not
       depend on the runner) */
    double sum = 0;
    for (int64_t b = 0; b < j.l.blocks; b++) {
        if (isnan(j.amax[b])) { /* the first weight that is not finite, by index */
            int64_t i = b * SN_NF4_BLOCK;
            while (isfinite(w[i])) i++;
            free(j.amax);
            return sn_fail(e, SN_ERR_NUMERIC, "nf4: weight %lld of %lld is %g: only finite "
                           "weights can be quantized", (long long)i, (long long)n, w[i]);
        }
        sum += j.amax[b];
    }
    j.mean = (float)(sum / (double)j.l.blocks);
    put_f32(out, j.mean);
    run(runner, j.l.groups, pack_groups, &j);
    free(j.amax);
    return SN_OK;
}

sn_status sn_nf4_quantize(const float *w, int64_t n, uint8_t *out, sn_err *e) {
    return sn_nf4_quantize_on(w, n, out, NULL, NULL, e);
}

float sn_nf4_block_scale(const uint8_t *q, int64_t n, int64_t b) {
    sn_nf4_layout l = sn_nf4_layout_of(n);
    SN_ASSERT(b >= 0 && b < l.blocks);
    float step = get_f32(q + l.off_steps + 4 * (b / SN_NF4_SCALE_GROUP));
    return fmaf((float)(int8_t)q[l.off_scale_codes + b], step, get_f32(q) /* the mean */);
}

void sn_nf4_dequantize(const uint8_t *q, int64_t n, float *out) {
    sn_nf4_layout l = sn_nf4_layout_of(n);
    for (int64_t b = 0; b < l.blocks; b++) {
        float s = sn_nf4_block_scale(q, n, b);
        for (int64_t i = b * SN_NF4_BLOCK; i < n && i < (b + 1) * SN_NF4_BLOCK; i++) {
            uint8_t byte = q[l.off_codes + i / 2];
            out[i] = sn_nf4_levels[i % 2 ? byte & 15 : byte >> 4] * s;
        }
    }
}
