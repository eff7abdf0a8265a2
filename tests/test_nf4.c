/* test_nf4.c: NF4 with double quantization (ir/nf4.h) against references written here from
 * the format's definition: the levels from the paper's construction, every code against a
 * brute-force nearest-level search with the block's own absmax, the double-quantized scales
 * within half their 8-bit step, the packed layout read through its documented offsets. Then the
 * IR's dequant_nf4 (shape rule, interpreter, autodiff, autocast) and the nf4 pass on a small
 * QLoRA model: its first loss is the dequantized base model's, its adapters' gradients agree
 * with finite differences through the dequantized weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/lora.h"
#include "interp/interp.h"
#include "ir/nf4.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/gemm_lowp.h"
#include "runtime/pool.h"
#include "support/hash.h"
#include "train/runner.h"
#include "support/rng.h"
#include "codegen_util.h"
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

static int ref_code(const uint8_t *q, int64_t n, int64_t i);

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
    /* at the midpoints, to the float: a block of absmax 1 (so the quantizer's w / absmax is w)
       holding the three floats nearest each midpoint gets brute_nearest's codes (the packing
       compares in float: its thresholds must round down) */
    float w[64] = {1.0f};
    for (int m = 0; m < 15; m++) {
        float t = (float)(0.5 * (PAPER[m] + PAPER[m + 1]));
        w[1 + 3 * m] = nextafterf(t, -2), w[2 + 3 * m] = t, w[3 + 3 * m] = nextafterf(t, 2);
    }
    uint8_t q[64];
    sn_err e;
    ck_assert(sn_nf4_quantize(w, 64, q, &e) == SN_OK);
    for (int i = 0; i < 46; i++) {
        ck_assert_int_eq(sn_nf4_nearest(w[i]), brute_nearest(w[i]));
        ck_assert_msg(ref_code(q, 64, i) == brute_nearest(w[i]), "weight %.9g: code %d, nearest "
                      "level %d", (double)w[i], ref_code(q, 64, i), brute_nearest(w[i]));
    }
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

/* A runner (nf4.h sn_nf4_run_fn) that calls fn on parts of 1, 2, 3, ... items, last part first. */
static void backwards(void *runner, int64_t n, sn_nf4_range_fn fn, void *ctx) {
    int64_t *calls = runner, cut[64], k = 0;
    for (int64_t at = 0, len = 1; at < n && k < 63; at += len++) cut[k++] = at;
    cut[k] = n;
    for (int64_t p = k - 1; p >= 0; p--, (*calls)++) fn(ctx, cut[p], p == k - 1 ? n : cut[p + 1]);
}

static void on_pool(void *pool, int64_t n, sn_nf4_range_fn fn, void *ctx) { sn_pool_run(pool, n, fn, ctx); }

/* Quantizing with the work split (sn_nf4_quantize_on: parts out of order, a pool of 3 threads)
 * writes sn_nf4_quantize's bytes into a poisoned buffer, and those are the bytes the format has
 * always had (an FNV-1a hash taken before the split: checkpoints' NF4 records stay valid); a
 * weight that is not finite is refused by its first index either way. */
START_TEST(quantize_split) {
    const int64_t sizes[] = {64 * 256 * 3 + 101, 1, 63, 64 * 256}; /* 4 groups, odd, short */
    const uint64_t golden = 0x68e02b680c2d496cull; /* sizes[0]'s bytes, hashed before the split */
    sn_pool *pool = sn_pool_new(3);
    ck_assert(pool);
    for (int si = 0; si < 4; si++) {
        int64_t n = sizes[si], bytes = sn_nf4_layout_of(n).bytes, calls = 0;
        float *w = malloc(n * sizeof *w);
        sn_rng r = sn_rng_seed(7);
        for (int64_t i = 0; i < n; i++) w[i] = (float)((i / 64 % 7 + 1) * 0.01 * sn_rng_normal(&r));
        uint8_t *want = malloc(bytes), *got = malloc(bytes);
        sn_err e;
        ck_assert(sn_nf4_quantize(w, n, want, &e) == SN_OK);
        if (si == 0)
            ck_assert_msg(sn_hash_bytes(SN_HASH_INIT, want, bytes) == golden, "the bytes of %lld "
                          "weights hash to 0x%016llx, not 0x%016llx as before", (long long)n,
                          (unsigned long long)sn_hash_bytes(SN_HASH_INIT, want, bytes),
                          (unsigned long long)golden);
        for (int how = 0; how < 2; how++) {
            memset(got, 0xaa, bytes);
            ck_assert(sn_nf4_quantize_on(w, n, got, how ? on_pool : backwards, how ? (void *)pool : &calls, &e) == SN_OK);
            for (int64_t i = 0; i < bytes; i++)
                ck_assert_msg(got[i] == want[i], "%lld weights, %s: byte %lld is 0x%02x, want 0x%02x",
                              (long long)n, how ? "a pool" : "parts backwards", (long long)i, got[i], want[i]);
        }
        ck_assert(n < 64 * 256 || calls > 4); /* the large ones were split */
        if (n > 1000) { /* two bad weights in different parts: the first is named */
            w[n - 7] = INFINITY;
            w[1000] = NAN;
            for (int how = 0; how < 3; how++) {
                sn_status s = how == 2 ? sn_nf4_quantize(w, n, got, &e)
                                       : sn_nf4_quantize_on(w, n, got, how ? on_pool : backwards,
                                                            how ? (void *)pool : &calls, &e);
                char want_msg[64];
                snprintf(want_msg, sizeof want_msg, "weight 1000 of %lld is nan", (long long)n);
                ck_assert_msg(s == SN_ERR_NUMERIC && strstr(e.msg, want_msg), "%s", e.msg);
            }
        }
        free(w), free(want), free(got);
    }
    sn_pool_free(pool);
}
END_TEST

/* ---- the dequant_nf4 op ---- */

/* quantizes n normal weights (std 0.05) into fresh bytes; *w gets the f32 weights (may be NULL) */
static uint8_t *packed_normal(int64_t n, uint64_t seed) {
    float *w = malloc(n * sizeof *w);
    sn_rng r = sn_rng_seed(seed);
    for (int64_t i = 0; i < n; i++) w[i] = (float)(0.05 * sn_rng_normal(&r));
    uint8_t *q = malloc(sn_nf4_layout_of(n).bytes);
    sn_err e;
    ck_assert(sn_nf4_quantize(w, n, q, &e) == SN_OK);
    free(w);
    return q;
}

static void set_bytes(sn_interp *it, const sn_node *p, const uint8_t *q) {
    int64_t n = sn_numel(p);
    double *d = malloc(n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = q[i];
    sn_err e;
    ck_assert_msg(sn_interp_set_f64(it, p, d, &e) == SN_OK, "%s", e.msg);
    free(d);
}

/* The interpreter's dequant_nf4 is sn_nf4_dequantize bit for bit in f32, rounded once in bf16. */
START_TEST(interp_dequant) {
    sn_graph *g = sn_graph_new();
    sn_node *w = sn_param_nf4(g, "w", SN_F32, SN_SHAPE(37, 50)); /* 1850 weights: a short block */
    ck_assert_msg(w, "%s", sn_graph_error(g));
    sn_node *packed = w->in[0], *wb = sn_dequant_nf4(g, packed, SN_BF16, SN_SHAPE(50, 37));
    ck_assert(packed->op == SN_OP_PARAM && packed->dtype == SN_U8 && packed->a.frozen);
    ck_assert_int_eq(sn_numel(packed), sn_nf4_layout_of(1850).bytes);
    sn_graph_add_output(g, w);
    sn_graph_add_output(g, wb);
    sn_err e;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    uint8_t *q = packed_normal(1850, 3);
    float want[1850];
    sn_nf4_dequantize(q, 1850, want);
    sn_interp *it = sn_interp_new(g, false);
    set_bytes(it, packed, q);
    ck_assert(sn_interp_run(it, &e) == SN_OK);
    const double *f = sn_interp_value(it, w), *b = sn_interp_value(it, wb);
    for (int i = 0; i < 1850; i++) {
        ck_assert_msg(f[i] == want[i], "weight %d: %.9g, want %.9g", i, f[i], (double)want[i]);
        ck_assert(b[i] == sn_dtype_round(SN_BF16, want[i]));
    }
    /* a byte out of range is refused */
    double bad[8] = {0, 1, 256};
    sn_node *small = sn_param_nf4(g, "s", SN_F32, SN_SHAPE(2)); /* 4 + 4 + 1 + 1 bytes */
    ck_assert_int_eq(sn_numel(small->in[0]), 10);
    sn_interp_free(it);
    it = sn_interp_new(g, false);
    ck_assert(sn_interp_set_f64(it, small->in[0], bad, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "is u8 but element") && strstr(e.msg, "256"), "%s", e.msg);
    sn_interp_free(it);
    sn_graph_free(g);
    free(q);
}
END_TEST

/* The shape rule: the byte count for the output's numel, u8 storage, frozen zeros. */
START_TEST(shape_rule) {
    sn_graph *g = sn_graph_new();
    sn_node *p = sn_param(g, "p", SN_U8, SN_SHAPE(69), SN_INIT_ZEROS, 0);
    ck_assert(!p);
    ck_assert_msg(strstr(sn_graph_error(g), "must be frozen"), "%s", sn_graph_error(g));
    sn_graph_free(g);
    g = sn_graph_new();
    sn_node *w = sn_param_nf4(g, "w", SN_F32, SN_SHAPE(3, 40)); /* 70 bytes */
    ck_assert(w && sn_numel(w->in[0]) == 70);
    ck_assert(!sn_dequant_nf4(g, w->in[0], SN_F32, SN_SHAPE(3, 41)));
    ck_assert_msg(strstr(sn_graph_error(g), "NF4 storage of 123 weights is u8[72]"), "%s", sn_graph_error(g));
    sn_graph_free(g);
    g = sn_graph_new();
    sn_node *f = sn_param(g, "f", SN_F32, SN_SHAPE(70), SN_INIT_ZEROS, 0);
    ck_assert(!sn_dequant_nf4(g, f, SN_F32, SN_SHAPE(3, 40)));
    ck_assert_msg(strstr(sn_graph_error(g), "packed is f32[70]"), "%s", sn_graph_error(g));
    sn_graph_free(g);
    g = sn_graph_new();
    w = sn_param_nf4(g, "w", SN_F32, SN_SHAPE(3, 40));
    ck_assert(!sn_dequant_nf4(g, w->in[0], SN_I32, SN_SHAPE(3, 40)));
    ck_assert_msg(strstr(sn_graph_error(g), "must be a float type"), "%s", sn_graph_error(g));
    sn_graph_free(g);
}
END_TEST

/* ---- a small QLoRA model ---- */

enum { QB = 4, QC = 64, QH = 96, QV = 10 };

/* x (QB, QC) -> gelu(x @ w1) @ w2 -> cross-entropy against 10 classes; w1 (QC, QH) and w2 (QH,
 * QV) frozen base weights, with LoRA adapters of rank 4 (alpha 8) when lora. */
static sn_graph *mlp(bool lora) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(QB, QC));
    sn_node *y = sn_input_targets(g, "y", SN_SHAPE(QB));
    sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(QC, QH), SN_INIT_NORMAL, 0.05f);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(QH, QV), SN_INIT_NORMAL, 0.05f);
    sn_lora l = {.rank = 4, .alpha = 8};
    sn_node *h = sn_matmul(g, x, w1);
    if (lora) h = sn_add(g, h, sn_lora_path(g, x, "w1", QC, QH, &l));
    h = sn_gelu(g, h);
    sn_node *logits = sn_matmul(g, h, w2);
    if (lora) logits = sn_add(g, logits, sn_lora_path(g, h, "w2", QH, QV, &l));
    sn_graph_set_loss(g, sn_cross_entropy(g, logits, y, -1));
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    if (lora) sn_lora_freeze_base(g);
    else {
        sn_param_freeze(w1);
        sn_param_freeze(w2);
    }
    return g;
}

static sn_node *find(const sn_graph *g, sn_op op, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == op && g->nodes[i]->name && !strcmp(g->nodes[i]->name, name))
            return g->nodes[i];
    ck_abort_msg("no %s '%s'", sn_op_name(op), name);
    return NULL;
}

/* Feeds x, y, the base weights (NF4 bytes into a u8 parameter, their dequantized values into an
 * f32 one) and the adapters (A normal, B zeros or normal). */
static void feed(sn_interp *it, const sn_graph *g, uint8_t *const q[2], bool b_zero) {
    sn_err e;
    sn_rng r = sn_rng_seed(11);
    float x[QB * QC];
    int32_t y[QB] = {3, 7, 0, 9};
    for (int i = 0; i < QB * QC; i++) x[i] = (float)sn_rng_normal(&r);
    ck_assert(sn_interp_set(it, find(g, SN_OP_INPUT, "x"), x, &e) == SN_OK);
    ck_assert(sn_interp_set_i32(it, find(g, SN_OP_INPUT, "y"), y, &e) == SN_OK);
    sn_node *scale = sn_graph_input(g, SN_ROLE_LOSS_SCALE); /* fp16's: 1, the loss unscaled */
    float s = 1;
    if (scale) ck_assert(sn_interp_set(it, scale, &s, &e) == SN_OK);
    const char *names[2] = {"w1", "w2"};
    int64_t n[2] = {QC * QH, QH * QV};
    for (int k = 0; k < 2; k++) {
        sn_node *p = find(g, SN_OP_PARAM, names[k]);
        if (p->dtype == SN_U8) {
            set_bytes(it, p, q[k]);
            continue;
        }
        float *w = malloc(n[k] * sizeof *w);
        sn_nf4_dequantize(q[k], n[k], w);
        ck_assert(sn_interp_set(it, p, w, &e) == SN_OK);
        free(w);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM || !sn_lora_is_adapter(p->name)) continue;
        bool b = strstr(p->name, ".lora_b") != NULL;
        double *v = malloc(sn_numel(p) * sizeof *v);
        for (int64_t j = 0; j < sn_numel(p); j++) v[j] = b && b_zero ? 0 : 0.3 * sn_rng_normal(&r);
        ck_assert(sn_interp_set_f64(it, p, v, &e) == SN_OK);
        free(v);
    }
}

static sn_graph *compiled(bool lora, bool nf4, sn_precision prec) {
    sn_graph *g = mlp(lora);
    sn_pipeline_opts o = {.nf4 = nf4, .precision = prec, .backward = true};
    sn_err e;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(st.nf4_stored, nf4 ? 2 : 0);
    return g;
}

/* The nf4 pass stores both base weights, the dequantized weights reach only the products (bf16
 * or f16 from autocast: no f32 copy, no cast), no gradient reaches the storage; the first loss (B
 * zeros) equals, bit for bit, the same LoRA model's with the dequantized weights as f32
 * parameters, in f32, bf16 and f16, and in f32 the base model's without adapters too (in 16 bits
 * the adapted layers' sums are rounded as PEFT's, autocast.c, so there the plain base differs). */
START_TEST(qlora_first_loss) {
    uint8_t *q[2] = {packed_normal(QC * QH, 21), packed_normal(QH * QV, 22)};
    for (int prec = 0; prec < 3; prec++) {
        sn_precision pr = (sn_precision[]){SN_PRECISION_FP32, SN_PRECISION_BF16, SN_PRECISION_FP16}[prec];
        sn_graph *g = compiled(true, true, pr), *base = compiled(true, false, pr);
        sn_graph *plain = prec ? NULL : compiled(false, false, pr);
        int dequants = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const sn_node *n = g->nodes[i];
            if (n->op == SN_OP_PARAM && n->dtype == SN_U8) ck_assert_msg(!n->grad, "%s has a gradient", n->name);
            if (n->op == SN_OP_PARAM && sn_lora_is_adapter(n->name)) ck_assert(n->grad);
            if (n->op != SN_OP_DEQUANT_NF4) continue;
            dequants++;
            ck_assert_int_eq(n->dtype, prec == 0 ? SN_F32 : prec == 1 ? SN_BF16 : SN_F16);
            int readers = 0;
            for (int j = i + 1; j < g->n_nodes; j++)
                for (int k = 0; k < g->nodes[j]->n_in; k++) {
                    if (g->nodes[j]->in[k] != n) continue;
                    ck_assert_msg(g->nodes[j]->op == SN_OP_MATMUL, "%%%d reads the dequantized "
                                  "weights: %s", j, sn_op_name(g->nodes[j]->op));
                    ck_assert_msg(j == i + 1, "%%%d's reader is %%%d, not the next node", i, j);
                    readers++;
                }
            ck_assert_int_eq(readers, 1);
        }
        /* w1 and w2 in the forward; w2 again for the gradient of gelu's output (x is an input:
           w1's product makes no gradient) */
        ck_assert_int_eq(dequants, 3);
        sn_interp *it = sn_interp_new(g, false), *ib = sn_interp_new(base, false);
        feed(it, g, q, true);
        feed(ib, base, q, true);
        sn_err e;
        ck_assert(sn_interp_run(it, &e) == SN_OK && sn_interp_run(ib, &e) == SN_OK);
        double l = sn_interp_value(it, g->loss)[0], lb = sn_interp_value(ib, base->loss)[0];
        ck_assert_msg(l == lb, "%s: QLoRA's first loss %.17g, LoRA's on the dequantized weights "
                      "%.17g", sn_precision_name(pr), l, lb);
        ck_assert_msg(l > 1 && l < 5, "%s: loss %g", sn_precision_name(pr), l);
        if (plain) {
            sn_interp *ip = sn_interp_new(plain, false);
            feed(ip, plain, q, true);
            ck_assert(sn_interp_run(ip, &e) == SN_OK);
            double lp = sn_interp_value(ip, plain->loss)[0];
            ck_assert_msg(l == lp, "QLoRA's first loss %.17g, the dequantized base's %.17g", l, lp);
            sn_interp_free(ip);
            sn_graph_free(plain);
        }
        sn_interp_free(it), sn_interp_free(ib);
        sn_graph_free(g), sn_graph_free(base);
    }
    free(q[0]), free(q[1]);
}
END_TEST

/* The adapters' gradients against central finite differences (exact interpreter, B not zero),
 * through the dequantized base weights. */
START_TEST(qlora_gradients) {
    uint8_t *q[2] = {packed_normal(QC * QH, 31), packed_normal(QH * QV, 32)};
    sn_graph *g = compiled(true, true, SN_PRECISION_FP32);
    sn_interp *it = sn_interp_new(g, true);
    feed(it, g, q, false);
    sn_err e;
    int checked = 0;
    for (int pi = 0; pi < g->n_nodes; pi++) {
        sn_node *p = g->nodes[pi];
        if (p->op != SN_OP_PARAM || !sn_lora_is_adapter(p->name)) continue;
        ck_assert(sn_interp_run(it, &e) == SN_OK);
        int64_t n = sn_numel(p), stride = n / 12 + 1;
        double *v = malloc(n * sizeof *v), an[16], fd[16];
        memcpy(v, sn_interp_value(it, p), n * sizeof *v);
        const double *grad = sn_interp_value(it, p->grad);
        int k = 0;
        for (int64_t i = 0; i < n && k < 16; i += stride) an[k++] = grad[i];
        k = 0;
        for (int64_t i = 0; i < n && k < 16; i += stride) {
            const double h = 1e-5, keep = v[i];
            v[i] = keep + h;
            ck_assert(!sn_interp_set_f64(it, p, v, &e) && !sn_interp_run(it, &e));
            double up = sn_interp_value(it, g->loss)[0];
            v[i] = keep - h;
            ck_assert(!sn_interp_set_f64(it, p, v, &e) && !sn_interp_run(it, &e));
            double down = sn_interp_value(it, g->loss)[0];
            v[i] = keep;
            ck_assert(!sn_interp_set_f64(it, p, v, &e));
            fd[k++] = (up - down) / (2 * h);
        }
        double mx = 0;
        for (int j = 0; j < k; j++) mx = fmax(mx, fabs(an[j]));
        ck_assert_msg(mx > 1e-4, "%s: gradient %g is about zero: the check would prove nothing", p->name, mx);
        sn_check_close(p->name, an, fd, (size_t)k, 1e-6, 1e-3);
        checked++;
        free(v);
    }
    ck_assert_int_eq(checked, 4);
    sn_interp_free(it);
    sn_graph_free(g);
    free(q[0]), free(q[1]);
}
END_TEST

/* The pass leaves trained weights, embeddings and tables read otherwise alone. In the program
 * each dequantize is a kernel of its own right before the GEMM that reads it, its weights an
 * arena value live over those two steps only, or (a product of few rows) inside the few-row
 * product's kernel, with no value; the packed storage is persistent, its size the
 * layout's. */
START_TEST(pass_scope_and_program) {
    sn_graph *g = mlp(false);
    sn_node *w1 = find(g, SN_OP_PARAM, "w1");
    w1->a.frozen = 0; /* trained: stays f32 */
    sn_graph *out;
    int n;
    sn_err e;
    ck_assert(sn_pass_nf4(g, &out, &n, &e) == SN_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(find(out, SN_OP_PARAM, "w1")->dtype, SN_F32);
    ck_assert_int_eq(find(out, SN_OP_PARAM, "w2")->dtype, SN_U8);
    sn_graph_free(out);
    sn_graph_free(g);
    g = mlp(true);
    sn_pipeline_opts o = {.nf4 = true, .precision = SN_PRECISION_BF16, .backward = true};
    sn_program *p;
    ck_assert_msg(sn_compile(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    int dequants = 0, fused = 0, transposed = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *d = p->kernels[k];
        if (d->kind == SN_KER_GEMV) { /* the products of QB = 4 rows read their packed bytes
                                         (kernel.h), the backward's transposed one too: no
                                         unpacked value */
            ck_assert(d->anchor->in[1]->op == SN_OP_DEQUANT_NF4);
            transposed += d->anchor->a.tb;
            ck_assert_int_eq(p->value_of[d->anchor->in[1]->id], -1);
            fused++;
        }
        if (d->kind != SN_KER_DEQUANT) continue;
        dequants++;
        ck_assert(d->anchor->op == SN_OP_DEQUANT_NF4 && d->n_out == 1 && d->n_in == 1);
        ck_assert_int_eq(d->n_items, (sn_numel(d->anchor) + 63) / 64);
        const sn_kernel *gemm = p->kernels[k + 1];
        ck_assert_msg(gemm->kind == SN_KER_GEMM, "kernel %d after %s is %s", k + 1, d->name,
                      sn_kernel_kind_name(gemm->kind));
        bool reads = false;
        for (int a = gemm->n_out; a < gemm->n_out + gemm->n_in; a++) reads |= gemm->args[a] == d->args[0];
        ck_assert(reads);
        const sn_value *w = &p->values[p->value_of[d->args[0]->id]];
        const sn_value *q = &p->values[p->value_of[d->args[1]->id]];
        ck_assert(!w->persistent && w->first == k && w->last == k + 1);
        ck_assert_int_eq(w->bytes, 2 * sn_numel(d->anchor)); /* bf16 */
        ck_assert(q->persistent && q->bytes == sn_nf4_layout_of(sn_numel(d->anchor)).bytes);
    }
    ck_assert_int_eq(fused, 3);      /* x @ w1, h @ w2, dlogits @ w2^T */
    ck_assert_int_eq(transposed, 1); /* dlogits @ w2^T */
    ck_assert_int_eq(dequants, 0);
    sn_program_free(p);
    sn_graph_free(g);
    /* the storage keeps its weight's init rule (the trainer draws the weights by it, then
       quantizes: test_qlora), and the runner takes it */
    g = mlp(true);
    sn_runner *run;
    o = (sn_pipeline_opts){.nf4 = true, .backward = true};
    ck_assert(sn_pipeline_graph(g, &o, NULL, &e) == SN_OK);
    sn_node *q1 = find(g, SN_OP_PARAM, "w1");
    ck_assert(q1->dtype == SN_U8 && q1->a.init == SN_INIT_NORMAL && q1->a.f == 0.05f);
    ck_assert_msg(sn_runner_new(g, NULL, &o, false, &run, &e) == SN_OK, "%s", e.msg);
    sn_runner_free(run);
    sn_graph_free(g);
}
END_TEST


/* LLaMA's untied LM head (lm_head.weight) keeps its dtype under the nf4 pass, as bitsandbytes
 * keeps it in 16 bits (the product that makes the logits); every other linear weight is NF4. */
START_TEST(untied_head_keeps_its_dtype) {
    sn_llama_config c;
    ck_assert(sn_llama_config_find("llama-tiny", &c));
    ck_assert(!c.tie_word_embeddings);
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    ck_assert_msg(sn_llama_build(g, &c, 1, 8, &m, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM) sn_param_freeze(g->nodes[i]);
    sn_graph *out;
    int n;
    ck_assert_msg(sn_pass_nf4(g, &out, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, 7 * c.n_layer); /* q, k, v, o, gate, up, down */
    const sn_node *head = find(out, SN_OP_PARAM, "lm_head.weight");
    ck_assert_msg(head && head->dtype == SN_F32, "lm_head.weight is %s",
                  head ? sn_dtype_name(head->dtype) : "gone");
    ck_assert_int_eq(find(out, SN_OP_PARAM, "model.layers.1.mlp.down_proj.weight")->dtype, SN_U8);
    sn_graph_free(out);
    sn_graph_free(g);
}
END_TEST

/* ---- the CPU kernel (codegen/llvm/llvm_dequant.c) ---- */

/* The dequantize kernel against sn_nf4_dequantize bit for bit, in f32 and rounded once to bf16
 * and f16 (sn_lowp_round: nearest even), for a short last block (even and odd n), several
 * groups of scales, normal weights and random bytes (f16's subnormals and infinities); run whole and in three uneven parts
 * into NaN-poisoned outputs. */
START_TEST(llvm_dequant) {
    if (!have_jit("nf4")) return;
    sn_jit *j = new_jit(0);
    /* 29 blocks, the last short; 900 full blocks in 4 groups; 30 blocks, the last of 31 (odd) */
    const int64_t sizes[][2] = {{37, 50}, {300, 192}, {37, 51}};
    const sn_dtype dts[] = {SN_F32, SN_BF16, SN_F16};
    int overflowed = 0, subnormal = 0;
    for (int si = 0; si < 3; si++)
        for (int wide = 0; wide < 2; wide++)
            for (int di = 0; di < 3; di++) {
                sn_dtype dt = dts[di];
                int64_t n = sizes[si][0] * sizes[si][1];
                sn_graph *g = sn_graph_new();
                sn_node *w = sn_param_nf4(g, "w", dt, SN_SHAPE(sizes[si][0], sizes[si][1]));
                ck_assert(w);
                sn_kernel k = {.kind = SN_KER_DEQUANT, .id = w->id, .n_out = 1, .n_in = 1, .anchor = w};
                snprintf(k.name, sizeof k.name, "k%d_dequant_nf4", w->id);
                k.args[0] = w;
                k.args[1] = w->in[0];
                sn_kernel_work(&k, &k.n_items, &k.serial);
                ck_assert_int_eq(k.n_items, (n + 63) / 64);
                sn_cpu_kernel_fn fn = compile_one(j, &k);
                uint8_t *q = wide ? sn_test_nf4_random(n, 50 + si) : packed_normal(n, 40 + si);
                float *want = malloc(n * sizeof *want);
                sn_nf4_dequantize(q, n, want);
                void *out = malloc(n * 4);
                void *bufs[2] = {out, q};
                int64_t cuts[][3] = {{0, k.n_items, k.n_items}, {0, k.n_items / 3, k.n_items - 1}};
                for (int c = 0; c < 2; c++) {
                    memset(out, 0xff, n * 4); /* NaN in f32, bf16 and f16 */
                    fn(bufs, cuts[c][0], cuts[c][1]);
                    fn(bufs, cuts[c][1], cuts[c][2]);
                    fn(bufs, cuts[c][2], k.n_items);
                    for (int64_t i = 0; i < n; i++) {
                        uint32_t rb, got;
                        memcpy(&rb, &want[i], 4);
                        if (dt != SN_F32) rb = sn_lowp_round(dt, want[i]);
                        got = dt == SN_F32 ? ((uint32_t *)out)[i] : ((uint16_t *)out)[i];
                        ck_assert_msg(got == rb, "%s, %lld weights (%s), split %d: weight %lld is "
                                      "0x%08x, want 0x%08x (%.9g)", sn_dtype_name(dt), (long long)n,
                                      wide ? "random bytes" : "normal weights", c, (long long)i, got, rb,
                                      (double)want[i]);
                        overflowed += dt == SN_F16 && (rb & 0x7fff) == 0x7c00;
                        subnormal += dt == SN_F16 && (rb & 0x7c00) == 0 && (rb & 0x3ff);
                    }
                }
                free(out), free(want), free(q);
                sn_graph_free(g);
            }
    ck_assert_msg(overflowed > 0 && subnormal > 0, "the random bytes reached f16's infinity %d "
                  "times and its subnormals %d times: both should be tested", overflowed, subnormal);
    sn_jit_free(j);
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
    tcase_add_test(t, quantize_split);
    tcase_add_test(t, interp_dequant);
    tcase_add_test(t, shape_rule);
    tcase_add_test(t, qlora_first_loss);
    tcase_add_test(t, qlora_gradients);
    tcase_add_test(t, pass_scope_and_program);
    tcase_add_test(t, untied_head_keeps_its_dtype);
    tcase_add_test(t, llvm_dequant);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
