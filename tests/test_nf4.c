/* test_nf4.c: NF4 with double quantization (support/nf4.h) against references written here from
 * the format's definition: the levels from the paper's construction, every code against a
 * brute-force nearest-level search with the block's own absmax, the double-quantized scales
 * within half their 8-bit step, the packed layout read through its documented offsets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/nf4.h"
#include "support/rng.h"
#include "harness.h"

/* The table of QLoRA's appendix E (bitsandbytes' NF4 code), digits as published. */
static const double PAPER[16] = {
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
};

/* the standard normal's quantile function, by bisection on erfc */
static double ppf(double p) {
    double lo = -10, hi = 10;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* The levels are the paper's table, and that table is its construction: the N(0, 1) quantiles
 * at 8 evenly spaced probabilities from 0.9677083 down to (not including) 1/2 on the positive
 * side, 7 on the negative, 0, normalized by the largest. */
START_TEST(levels) {
    double built[16];
    int k = 0;
    const double off = 0.9677083;
    for (int i = 0; i < 7; i++) built[k++] = -ppf(off + (0.5 - off) * i / 7.0);
    built[k++] = 0;
    for (int i = 0; i < 8; i++) built[k++] = ppf(off + (0.5 - off) * i / 8.0);
    double top = ppf(off);
    for (int i = 0; i < 16; i++) {
        ck_assert_msg(sn_nf4_levels[i] == (float)PAPER[i], "level %d: %.17g, the paper's %.17g", i,
                      (double)sn_nf4_levels[i], PAPER[i]);
        /* sort: the negative side was built from the outside in */
        double want = i < 7 ? built[i] : i == 7 ? 0 : built[7 + (16 - i)];
        ck_assert_msg(fabs(want / top - PAPER[i]) <= 2e-7, "level %d: the construction gives %.9g, "
                      "the table %.9g", i, want / top, PAPER[i]);
    }
}
END_TEST

/* nearest level by trying all 16 (ties to the lower) */
static int brute_nearest(float x) {
    int best = 0;
    for (int j = 1; j < 16; j++)
        if (fabs((double)x - PAPER[j]) < fabs((double)x - PAPER[best])) best = j;
    return best;
}

START_TEST(nearest) {
    sn_rng r = sn_rng_seed(7);
    for (int i = 0; i < 200000; i++) {
        float x = (float)(2.4 * sn_rng_uniform(&r) - 1.2);
        ck_assert_msg(sn_nf4_nearest(x) == brute_nearest(x), "x = %.9g", (double)x);
    }
    for (int j = 0; j < 16; j++) ck_assert_int_eq(sn_nf4_nearest(sn_nf4_levels[j]), j);
}
END_TEST

/* The layout's sizes: 0.5 + 1/64 + 4/(64*256) bytes a weight, plus the mean. */
START_TEST(layout) {
    int64_t n = 3 * 64 * 256;
    sn_nf4_layout l = sn_nf4_layout_of(n);
    ck_assert_int_eq(l.blocks, 3 * 256);
    ck_assert_int_eq(l.groups, 3);
    ck_assert_int_eq(l.bytes, n / 2 + n / 64 + 4 * n / (64 * 256) + 4);
    l = sn_nf4_layout_of(65); /* two blocks, one short; 33 bytes of codes */
    ck_assert(l.blocks == 2 && l.groups == 1 && l.off_steps == 4 && l.off_scale_codes == 8);
    ck_assert(l.off_codes == 10 && l.bytes == 43);
}
END_TEST

/* The test's own reading of the packed buffer (nf4.h's layout, offsets computed here):
 * block b's scale and weight i's code; shift moves every weight into the next block's scale
 * (the planted off-by-one). */
static float ref_scale(const uint8_t *q, int64_t n, int64_t b) {
    int64_t blocks = (n + 63) / 64, groups = (blocks + 255) / 256;
    float mean, step;
    memcpy(&mean, q, 4);
    memcpy(&step, q + 4 + 4 * (b / 256), 4);
    return fmaf((float)(int8_t)q[4 + 4 * groups + b], step, mean);
}

static int ref_code(const uint8_t *q, int64_t n, int64_t i) {
    int64_t blocks = (n + 63) / 64, groups = (blocks + 255) / 256;
    uint8_t byte = q[4 + 4 * groups + blocks + i / 2];
    return i % 2 ? byte & 15 : byte >> 4;
}

/* weights where dequantized out differs bit for bit from the reference read with shift */
static int64_t mismatches(const uint8_t *q, int64_t n, const float *out, int64_t shift) {
    int64_t bad = 0, blocks = (n + 63) / 64;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = (i + shift) / 64;
        if (b >= blocks) b = blocks - 1;
        float want = (float)PAPER[ref_code(q, n, i)] * ref_scale(q, n, b);
        bad += memcmp(&want, &out[i], 4) != 0;
    }
    return bad;
}

/* Normal weights with a different spread in each block (so a weight read with its neighbour's
 * scale is wrong): every code is the nearest level of w / absmax(its block) (found by trying
 * all 16 levels), every scale within half its group's 8-bit step of the exact absmax, every
 * weight the level times that scale; so the error is the format's (the nearest level's) up to
 * the scale's 8-bit bound. The reference read with every block boundary one weight off fails. */
static void round_trip(int64_t n, uint64_t seed) {
    float *w = malloc(n * sizeof *w), *out = malloc(n * sizeof *out);
    sn_rng r = sn_rng_seed(seed);
    for (int64_t i = 0; i < n; i++) w[i] = (float)(0.02 * (1 + (i / 64) % 7) * sn_rng_normal(&r));
    sn_nf4_layout l = sn_nf4_layout_of(n);
    uint8_t *q = malloc(l.bytes);
    sn_err e;
    ck_assert_msg(sn_nf4_quantize(w, n, q, &e) == SN_OK, "%s", e.msg);
    sn_nf4_dequantize(q, n, out);

    /* the blocks' exact absmax, their mean, the groups' steps */
    double *amax = calloc(l.blocks, sizeof *amax), mean = 0;
    for (int64_t i = 0; i < n; i++) amax[i / 64] = fmax(amax[i / 64], fabs(w[i]));
    for (int64_t b = 0; b < l.blocks; b++) mean += amax[b] / l.blocks;
    float stored_mean;
    memcpy(&stored_mean, q, 4);
    ck_assert_msg(fabs(stored_mean - mean) <= 1e-6 * mean, "mean %g, want %g", stored_mean, mean);
    double err2 = 0, fmt_err2 = 0, ref2 = 0;
    for (int64_t b = 0; b < l.blocks; b++) {
        double dev = 0;
        for (int64_t c = b / 256 * 256; c < l.blocks && c < (b / 256 + 1) * 256; c++)
            dev = fmax(dev, fabs(amax[c] - stored_mean));
        double half = dev / 127 / 2, s = sn_nf4_block_scale(q, n, b);
        ck_assert_msg(fabs(s - amax[b]) <= half * (1 + 1e-5) + 1e-7 * amax[b],
                      "block %lld: scale %.9g, absmax %.9g, bound %.3g", (long long)b, s, amax[b], half);
        ck_assert(s == ref_scale(q, n, b));
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t b = i / 64;
        int want = brute_nearest((float)(w[i] / (float)amax[b]));
        ck_assert_msg(ref_code(q, n, i) == want, "weight %lld (%.6g, block absmax %.6g): code %d, "
                      "nearest level %d", (long long)i, w[i], amax[b], ref_code(q, n, i), want);
        double fmt = PAPER[want] * amax[b]; /* the format's value with the exact scale */
        err2 += (out[i] - w[i]) * (out[i] - w[i]);
        fmt_err2 += (fmt - w[i]) * (fmt - w[i]);
        ref2 += (double)w[i] * w[i];
    }
    ck_assert_int_eq(mismatches(q, n, out, 0), 0);
    if (l.blocks > 1) ck_assert_msg(mismatches(q, n, out, 1) > 0, "an off-by-one block passed");
    /* the double quantization adds little to the format's own error */
    double rel = sqrt(err2 / ref2), fmt_rel = sqrt(fmt_err2 / ref2);
    ck_assert_msg(rel <= fmt_rel * 1.02 + 1e-9 && rel >= fmt_rel * 0.98,
                  "relative RMS error %.5f, the format with exact scales %.5f", rel, fmt_rel);
    if (n > 10000) ck_assert_msg(fmt_rel > 0.05 && fmt_rel < 0.15, "NF4's error on normal "
                                 "weights in blocks of 64: %.4f", fmt_rel);
    free(w), free(out), free(q), free(amax);
}

START_TEST(round_trips) {
    round_trip(3 * 64 * 256 + 37, 1); /* three groups, a short last block, odd n */
    round_trip(64 * 256, 2);          /* one full group */
    round_trip(65, 3);
    round_trip(1, 4);
    round_trip(63, 5);
    round_trip(100 * 30, 6);          /* rows of 30: blocks straddle rows */
}
END_TEST

/* The scales' 8-bit bound when they spread over four decades, and exactness when equal. */
START_TEST(scales) {
    int64_t n = 64 * 300;
    float *w = calloc(n, sizeof *w), *out = malloc(n * sizeof *out);
    uint8_t *q = malloc(sn_nf4_layout_of(n).bytes);
    sn_err e;
    for (int64_t b = 0; b < 300; b++) w[b * 64 + b % 64] = (float)(b % 2 ? -1 : 1) * powf(10, (float)(b % 5) - 3);
    ck_assert(sn_nf4_quantize(w, n, q, &e) == SN_OK);
    float mean, step;
    memcpy(&mean, q, 4);
    memcpy(&step, q + 4, 4);
    for (int64_t b = 0; b < 256; b++) {
        double a = fabs(w[b * 64 + b % 64]);
        ck_assert_msg(fabs(sn_nf4_block_scale(q, n, b) - a) <= step / 2 * (1 + 1e-5), "block %lld", (long long)b);
    }
    /* every block the same absmax: the mean, exactly; an all-zero array: zeros */
    for (int64_t i = 0; i < n; i++) w[i] = i % 64 == 5 ? -0.75f : 0.25f;
    ck_assert(sn_nf4_quantize(w, n, q, &e) == SN_OK);
    sn_nf4_dequantize(q, n, out);
    for (int64_t i = 0; i < n; i++) ck_assert(out[i] == (float)PAPER[brute_nearest(w[i] / 0.75f)] * 0.75f);
    ck_assert(sn_nf4_block_scale(q, n, 299) == 0.75f);
    memset(w, 0, n * sizeof *w);
    ck_assert(sn_nf4_quantize(w, n, q, &e) == SN_OK);
    sn_nf4_dequantize(q, n, out);
    for (int64_t i = 0; i < n; i++) ck_assert(out[i] == 0);
    free(w), free(out), free(q);
}
END_TEST

START_TEST(refuses_non_finite) {
    float w[100] = {0};
    w[70] = NAN;
    uint8_t q[128];
    sn_err e;
    ck_assert(sn_nf4_quantize(w, 100, q, &e) == SN_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "weight 70 of 100") && strstr(e.msg, "finite"), "%s", e.msg);
    w[70] = INFINITY;
    ck_assert(sn_nf4_quantize(w, 100, q, &e) == SN_ERR_NUMERIC);
}
END_TEST

int main(void) {
    Suite *s = suite_create("nf4");
    TCase *t = tcase_create("nf4");
    tcase_add_test(t, levels);
    tcase_add_test(t, nearest);
    tcase_add_test(t, layout);
    tcase_add_test(t, round_trips);
    tcase_add_test(t, scales);
    tcase_add_test(t, refuses_non_finite);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
