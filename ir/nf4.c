/* nf4.c: NF4 with double quantization (nf4.h): packing an f32 array and unpacking it.
 * Convention: as bitsandbytes does, a block's codes are chosen against its exact absmax; only
 * then are the absmaxes double-quantized, so the stored scale differs from the one the codes
 * were chosen for by at most half a group's step. */
#include "nf4.h"

#include <math.h>
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

int sn_nf4_nearest(float x) {
    /* the level above midpoint i is chosen when x > it: a binary search over the 15 midpoints */
    int lo = 0, hi = 15;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        double m = 0.5 * ((double)sn_nf4_levels[mid] + (double)sn_nf4_levels[mid + 1]);
        if (x > m) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static float get_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

static void put_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }

sn_status sn_nf4_quantize(const float *w, int64_t n, uint8_t *out, sn_err *e) {
    sn_nf4_layout l = sn_nf4_layout_of(n);
    memset(out, 0, (size_t)l.bytes);
    /* the mean of the blocks' absmax needs a pass over all of them first; each group's pass
     * below finds its blocks' absmax again (no scratch the size of the blocks) */
    double sum = 0;
    for (int64_t b = 0; b < l.blocks; b++) {
        float amax = 0;
        for (int64_t i = b * SN_NF4_BLOCK; i < n && i < (b + 1) * SN_NF4_BLOCK; i++) {
            if (!isfinite(w[i]))
                return sn_fail(e, SN_ERR_NUMERIC, "nf4: weight %lld of %lld is %g: only finite "
                               "weights can be quantized", (long long)i, (long long)n, w[i]);
            amax = fmaxf(amax, fabsf(w[i]));
        }
        sum += amax;
    }
    float mean = (float)(sum / (double)l.blocks);
    put_f32(out, mean);
    for (int64_t g = 0; g < l.groups; g++) {
        int64_t b0 = g * SN_NF4_SCALE_GROUP, b1 = b0 + SN_NF4_SCALE_GROUP;
        if (b1 > l.blocks) b1 = l.blocks;
        float amax[SN_NF4_SCALE_GROUP];
        double dev = 0;
        for (int64_t b = b0; b < b1; b++) {
            float a = 0;
            for (int64_t i = b * SN_NF4_BLOCK; i < n && i < (b + 1) * SN_NF4_BLOCK; i++)
                a = fmaxf(a, fabsf(w[i]));
            amax[b - b0] = a;
            dev = fmax(dev, fabs((double)a - mean));
        }
        float step = (float)(dev / 127.0);
        put_f32(out + l.off_steps + 4 * g, step);
        for (int64_t b = b0; b < b1; b++) {
            double c = step > 0 ? nearbyint(((double)amax[b - b0] - mean) / step) : 0;
            c = fmin(127, fmax(-127, c));
            out[l.off_scale_codes + b] = (uint8_t)(int8_t)c;
            /* the codes against the exact absmax (0 for an all-zero block: level 7 is 0) */
            float a = amax[b - b0];
            for (int64_t i = b * SN_NF4_BLOCK; i < n && i < (b + 1) * SN_NF4_BLOCK; i++) {
                int q = a > 0 ? sn_nf4_nearest(w[i] / a) : 7;
                out[l.off_codes + i / 2] |= (uint8_t)(i % 2 ? q : q << 4);
            }
        }
    }
    return SN_OK;
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
