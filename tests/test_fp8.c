/* test_fp8.c: the 8-bit floats (OCP FP8 FP8_E4M3 and FP8_E5M2, ir.h) against references written here
 * from the formats' bit layouts: every code decoded and kept by the rounding, the rounding of
 * many values against a brute-force nearest-code search (ties to the even code, saturation at
 * the largest finite value), pow2_scale against a search over the powers of two; then the IR's
 * rules for them (made by casts, read by casts, products and views) and the interpreter's amax,
 * pow2_scale and products of 8-bit operands; the fp8 pass on a small GPT-2 (which products, their
 * operands' formats and layout, its loss and gradients beside the bf16 program's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "ir/ir.h"
#include "fp8_model.h"
#include "fp8_ref.h"
#include "support/rng.h"
#include "harness.h"

/* ---- the formats from their bits ---- */


/* The nearest finite code's value to v by search (ties: the code with an even last bit); a NaN
 * gives NaN. Saturation needs no rule: beyond the largest finite code it is the nearest. */
static double nearest(const fp8_fmt *f, double v) {
    if (isnan(v)) return NAN;
    if (fabs(v) > 2 * sn_dtype_max(f->t)) /* far beyond: the distances below would not differ */
        v = copysign(2 * sn_dtype_max(f->t), v);
    double best = NAN, bd = INFINITY;
    int bc = 0;
    for (int c = 0; c < 256; c++) {
        double x = fp8_decode(f, c);
        if (!isfinite(x)) continue;
        double d = isinf(v) ? (signbit(v) == signbit(x) ? -fabs(x) : INFINITY) : fabs(x - v);
        if (d < bd || (d == bd && (c & 1) == 0 && (bc & 1))) best = x, bd = d, bc = c;
    }
    return best;
}

START_TEST(test_codes) {
    const fp8_fmt *fs[] = {&FP8_E4M3, &FP8_E5M2};
    const double maxes[] = {448, 57344};
    const int finite[] = {254, 248}, distinct[] = {253, 247}; /* +0 and -0 equal */
    for (int k = 0; k < 2; k++) {
        const fp8_fmt *f = fs[k];
        int n_finite = 0, n_distinct = 0;
        double seen[256], top = 0;
        for (int c = 0; c < 256; c++) {
            double x = fp8_decode(f, c);
            if (isnan(x)) {
                ck_assert_msg(isnan(sn_dtype_round(f->t, x)), "%s: NaN kept", sn_dtype_name(f->t));
                continue;
            }
            if (isinf(x)) continue;
            n_finite++;
            top = fmax(top, x);
            double r = sn_dtype_round(f->t, x);
            ck_assert_msg(r == x && signbit(r) == signbit(x), "%s code 0x%02x: %g rounds to %g",
                          sn_dtype_name(f->t), c, x, r);
            bool dup = false;
            for (int i = 0; i < n_distinct; i++) dup |= seen[i] == x;
            if (!dup) seen[n_distinct++] = x;
        }
        ck_assert_int_eq(n_finite, finite[k]);
        ck_assert_int_eq(n_distinct, distinct[k]);
        ck_assert(top == maxes[k] && sn_dtype_max(f->t) == maxes[k]);
        ck_assert(sn_dtype_round(f->t, INFINITY) == maxes[k]); /* satfinite */
        ck_assert(sn_dtype_round(f->t, -INFINITY) == -maxes[k]);
    }
    ck_assert(fp8_decode(&FP8_E4M3, 0x01) == ldexp(1, -9) && fp8_decode(&FP8_E5M2, 0x01) == ldexp(1, -16));
    ck_assert(isinf(fp8_decode(&FP8_E5M2, 0x7c)) && isnan(fp8_decode(&FP8_E4M3, 0x7f)) && fp8_decode(&FP8_E4M3, 0x7e) == 448);
}
END_TEST

/* Values to round: every code's neighbours and midpoints (and a hair either side), powers of
 * two across both ranges, random f32s over 40 binades, values beyond the largest finite one. */
START_TEST(test_rounding) {
    const fp8_fmt *fs[] = {&FP8_E4M3, &FP8_E5M2};
    sn_rng r = sn_rng_seed(8);
    for (int k = 0; k < 2; k++) {
        const fp8_fmt *f = fs[k];
        double vals[4096];
        int n = 0;
        for (int c = 0; c < 127 && n + 6 < 4096; c++) { /* positive codes: each and the next */
            double a = fp8_decode(f, c), b = fp8_decode(f, c + 1);
            if (!isfinite(a) || !isfinite(b)) continue;
            double mid = 0.5 * (a + b);
            vals[n++] = mid, vals[n++] = -mid, vals[n++] = nextafter(mid, 0);
            vals[n++] = nextafter(mid, INFINITY), vals[n++] = a * 1.001 + 1e-30, vals[n++] = -b * 0.999;
        }
        for (int e = -30; e <= 20 && n < 4096; e++) vals[n++] = ldexp(1, e) * (e & 1 ? -1 : 1);
        const double big[] = {449, 464, 479.9, 480, 1e5, 57344, 61440, 61439, 65536, 1e30, -500};
        for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) vals[n++] = big[i];
        while (n < 4096) {
            double u = sn_rng_uniform(&r) * 2 - 1;
            vals[n++] = (double)(float)(u * ldexp(1, (int)(sn_rng_uniform(&r) * 40) - 24));
        }
        for (int i = 0; i < n; i++) {
            double want = nearest(f, vals[i]), got = sn_dtype_round(f->t, vals[i]);
            ck_assert_msg(got == want, "%s: %.17g rounds to %.17g, the nearest code is %.17g",
                          sn_dtype_name(f->t), vals[i], got, want);
        }
    }
}
END_TEST

/* The largest 2^k (k in [-126, 127]) with |x| 2^k <= f, by search; 1 for 0 and non-finite x. */
static double pow2_ref(double x, double f) {
    if (!isfinite(x) || x == 0) return 1;
    for (int k = 127; k > -126; k--)
        if (fabs(x) * ldexp(1, k) <= f) return ldexp(1, k);
    return ldexp(1, -126);
}

START_TEST(test_pow2_scale) {
    sn_rng r = sn_rng_seed(9);
    const double fs[] = {448, 57344, 1, 0.75, 3e-30};
    const double xs[] = {448, 447.99, 448.01, 1, 0.5, 1e-45, 1.4e-45, 1e-38, 3e38, 57344, 57345, -448};
    for (size_t j = 0; j < sizeof fs / sizeof fs[0]; j++) {
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
            double x = (double)(float)xs[i];
            ck_assert_msg(sn_pow2_scale_of(x, fs[j]) == pow2_ref(x, fs[j]), "pow2_scale(%g, %g) = %g, "
                          "want %g", x, fs[j], sn_pow2_scale_of(x, fs[j]), pow2_ref(x, fs[j]));
        }
        for (int i = 0; i < 2000; i++) {
            double x = (double)(float)(sn_rng_uniform(&r) * ldexp(1, (int)(sn_rng_uniform(&r) * 260) - 140));
            ck_assert_msg(sn_pow2_scale_of(x, fs[j]) == pow2_ref(x, fs[j]), "pow2_scale(%g, %g)", x, fs[j]);
        }
    }
    ck_assert(sn_pow2_scale_of(0, 448) == 1 && sn_pow2_scale_of(NAN, 448) == 1 && sn_pow2_scale_of(INFINITY, 448) == 1);
}
END_TEST

/* ---- the IR ---- */

#define ck_assert_has(msg, sub)                                                                    \
    ck_assert_msg(strstr((msg), (sub)), "message\n  \"%s\"\nlacks\n  \"%s\"", (msg), (sub))

START_TEST(test_rules) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, (sn_shape){2, {4, 8}});
    sn_node *w = sn_input(g, "w", SN_BF16, (sn_shape){2, {8, 3}});
    sn_node *x8 = sn_cast(g, x, SN_F8E4M3), *w8 = sn_cast(g, w, SN_F8E5M2);
    sn_node *y = sn_matmul(g, x8, w8);
    ck_assert_msg(y && y->dtype == SN_F32 && y->shape[1] == 3, "%s", sn_graph_error(g));
    ck_assert(sn_reshape(g, x8, (sn_shape){1, {32}})->dtype == SN_F8E4M3);
    ck_assert(sn_cast(g, x8, SN_BF16)->dtype == SN_BF16);
    ck_assert(sn_amax(g, x, 1, false)->rank == 1 && sn_pow2_scale(g, x, 448)->dtype == SN_F32);
    ck_assert_ptr_null(sn_graph_error(g));

    int nb = 0;
#define REFUSED(what, expr, sub)                                                                   \
    do {                                                                                           \
        sn_graph *h = sn_graph_new();                                                              \
        sn_node *a = sn_input(h, "a", SN_F32, (sn_shape){2, {4, 8}});                              \
        sn_node *a8 = sn_cast(h, a, SN_F8E4M3);                                                    \
        (void)a8;                                                                                  \
        (void)(expr);                                                                              \
        ck_assert_msg(sn_graph_error(h), "%s was accepted", what);                                 \
        ck_assert_has(sn_graph_error(h), sub);                                                     \
        nb++;                                                                                      \
        sn_graph_free(h);                                                                          \
    } while (0)
    REFUSED("an add of 8-bit floats", sn_add(h, a8, a8), "8-bit floats are read only by casts");
    REFUSED("an 8-bit and a 32-bit operand", sn_matmul_t(h, a8, a, false, true), "takes two of them");
    REFUSED("an 8-bit parameter", sn_param(h, "p", SN_F8E4M3, (sn_shape){1, {4}}, SN_INIT_ZEROS, 0),
            "made only by casts");
    REFUSED("an 8-bit input", sn_input(h, "i", SN_F8E5M2, (sn_shape){1, {4}}), "made only by casts");
    REFUSED("a pow2_scale bound of 0", sn_pow2_scale(h, a, 0), "must be positive");
    REFUSED("a softmax of 8-bit floats", sn_softmax(h, a8), "8-bit floats are read only");
    ck_assert_int_eq(nb, 6);
    sn_graph_free(g);
}
END_TEST

/* The interpreter: x scaled by pow2_scale(amax(x)), rounded to e4m3, times W rounded to e5m2
 * with its own scale, unscaled: against the same sums computed here from sn_dtype_round. */
START_TEST(test_interp_scaled_product) {
    enum { M = 5, K = 16, N = 7 };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, (sn_shape){2, {M, K}});
    sn_node *w = sn_input(g, "w", SN_F32, (sn_shape){2, {K, N}});
    sn_node *sx = sn_pow2_scale(g, sn_amax(g, sn_reshape(g, x, (sn_shape){1, {M * K}}), 0, false), 448);
    sn_node *sw = sn_pow2_scale(g, sn_amax(g, sn_reshape(g, w, (sn_shape){1, {K * N}}), 0, false), 57344);
    sn_node *x8 = sn_cast(g, sn_mul(g, x, sx), SN_F8E4M3), *w8 = sn_cast(g, sn_mul(g, w, sw), SN_F8E5M2);
    sn_node *y = sn_div(g, sn_matmul(g, x8, w8), sn_mul(g, sx, sw));
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_graph_add_output(g, y);
    sn_graph_add_output(g, sx);
    sn_graph_add_output(g, sw);

    float xv[M * K], wv[K * N];
    sn_rng r = sn_rng_seed(3);
    double ax = 0, aw = 0;
    for (int i = 0; i < M * K; i++) ax = fmax(ax, fabs(xv[i] = (float)(sn_rng_normal(&r) * 3e-3)));
    for (int i = 0; i < K * N; i++) aw = fmax(aw, fabs(wv[i] = (float)(sn_rng_normal(&r) * 40)));
    sn_err e = {0};
    sn_interp *it = sn_interp_new(g, false);
    ck_assert(it);
    ck_assert(sn_interp_set(it, x, xv, &e) == SN_OK && sn_interp_set(it, w, wv, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_interp_value(it, sx)[0] == pow2_ref(ax, 448) && sn_interp_value(it, sx)[0] > 1e4);
    ck_assert(sn_interp_value(it, sw)[0] == pow2_ref(aw, 57344));
    double s_x = pow2_ref(ax, 448), s_w = pow2_ref(aw, 57344);
    const double *got = sn_interp_value(it, y);
    double worst = 0, top = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0, exact = 0;
            for (int k = 0; k < K; k++) {
                acc += sn_dtype_round(SN_F8E4M3, xv[i * K + k] * s_x) *
                       sn_dtype_round(SN_F8E5M2, wv[k * N + j] * s_w);
                exact += (double)xv[i * K + k] * wv[k * N + j];
            }
            double want = (double)(float)((double)(float)acc / (s_x * s_w));
            ck_assert_msg(fabs(got[i * N + j] - want) <= 1e-6 * fabs(want), "y[%d,%d] = %.9g, want %.9g",
                          i, j, got[i * N + j], want);
            worst = fmax(worst, fabs(want - exact));
            top = fmax(top, fabs(exact));
        }
    worst /= top; /* e4m3 by e5m2: 2^-4 and 2^-3 relative a term, partly cancelling */
    ck_assert_msg(worst > 1e-3 && worst < 0.1, "the 8-bit product's error %g of the largest: not a "
                  "rounding's", worst);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- the fp8 pass ---- */

static int count_op(const sn_graph *g, sn_op op, int from, int to) {
    int c = 0;
    for (int i = from; i < to; i++) c += g->nodes[i]->op == op;
    return c;
}

/* Which products, in which formats and layout. */
START_TEST(test_pass_picks) {
    sn_pipeline_stats st;
    sn_graph *bf = fp8_small_graph(SN_FP8_OFF, &st);
    int products = count_op(bf, SN_OP_MATMUL, 0, bf->n_nodes);
    ck_assert_int_eq(st.fp8_products, 0);
    ck_assert_int_eq(products, 3 * (4 * FP8_SMALL.n_layer + 1)); /* 4 linear layers a block, the head */
    const sn_fp8_policy pols[] = {SN_FP8_HEAD, SN_FP8_LINEAR};
    const int want[] = {3, products};
    for (int k = 0; k < 2; k++) {
        sn_graph *g = fp8_small_graph(pols[k], &st);
        ck_assert_int_eq(st.fp8_products, want[k]);
        int eight = 0, e5 = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const sn_node *n = g->nodes[i];
            if (n->op != SN_OP_MATMUL || !sn_dtype_is_f8(n->in[0]->dtype)) continue;
            eight++;
            ck_assert_msg(!n->a.ta && n->a.tb, "%%%d: an 8-bit product with ta %d tb %d: both "
                          "operands must be K-major", n->id, n->a.ta, n->a.tb);
            bool bwd = i >= g->n_forward;
            int n5 = (n->in[0]->dtype == SN_F8E5M2) + (n->in[1]->dtype == SN_F8E5M2);
            ck_assert_msg(n5 == (bwd ? 1 : 0), "%%%d (%s): %d e5m2 operands", n->id,
                          bwd ? "backward" : "forward", n5);
            e5 += n5;
            for (int j = 0; j < 2; j++) /* each operand a cast of a scaled value */
                ck_assert(n->in[j]->op == SN_OP_CAST && n->in[j]->in[0]->op == SN_OP_MUL);
        }
        ck_assert_int_eq(eight, want[k]);
        ck_assert_int_eq(e5, want[k] * 2 / 3); /* two of each layer's three are backward */
        /* a scale per value and format, not per reader: the head's 3 products read x, W,
           dlogits (and x, W again transposed) */
        if (pols[k] == SN_FP8_HEAD) ck_assert_int_eq(count_op(g, SN_OP_POW2_SCALE, 0, g->n_nodes), 3);
        /* x's and W's amax in two steps each, |dloss|: no pass over dlogits (its bound) */
        if (pols[k] == SN_FP8_HEAD) ck_assert_int_eq(count_op(g, SN_OP_AMAX, 0, g->n_nodes), 5);
        sn_graph_free(g);
    }
    sn_graph_free(bf);
}
END_TEST

/* dlogits' e5m2 copies scaled from their bound (passes/fp8.c dlogits_bound: 2 |dloss| / count,
 * count the targets not ignored): no value saturates, and the largest lies within 4x of the
 * format's largest (at initialisation max(1 - p_target) is near 1). */
START_TEST(test_pass_dlogits_bound) {
    sn_graph *g = fp8_small_graph(SN_FP8_HEAD, NULL);
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    fp8_small_set(it, NULL, g, 5);
    sn_err e = {0};
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    int copies = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_CAST || n->dtype != SN_F8E5M2) continue;
        const double *v = sn_interp_value(it, n);
        double top = 0;
        for (int64_t k = 0; k < sn_numel(n); k++) top = fmax(top, fabs(v[k]));
        ck_assert_msg(top < 57344 && top > 57344 / 4.0, "%%%d: the largest e5m2 value %g: the "
                      "bound's scale %s", n->id, top, top >= 57344 ? "saturates" : "wastes range");
        copies++;
    }
    ck_assert_int_eq(copies, 2); /* dlogits for dx, and transposed for dW */
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* The 8-bit program against the bf16 one, same weights and batch: its loss within 1% and not
 * equal, each gradient close in direction (cosine above 0.99) and size (within 10%), and
 * different (the operands really were rounded to 8 bits). */
START_TEST(test_pass_tracks_bf16) {
    const sn_fp8_policy pols[] = {SN_FP8_HEAD, SN_FP8_LINEAR};
    sn_graph *bf = fp8_small_graph(SN_FP8_OFF, NULL);
    sn_interp *ib = sn_interp_new(bf, false);
    sn_err e = {0};
    fp8_small_set(ib, NULL, bf, 5);
    ck_assert_msg(sn_interp_run(ib, &e) == SN_OK, "%s", e.msg);
    double lb = sn_interp_value(ib, bf->loss)[0];
    const char *names[] = {"wte", "h.0.attn.c_attn.w", "h.1.mlp.c_fc.w", "h.1.mlp.c_proj.w"};
    for (int k = 0; k < 2; k++) {
        sn_graph *g = fp8_small_graph(pols[k], NULL);
        sn_interp *it = sn_interp_new(g, false);
        fp8_small_set(it, NULL, g, 5);
        ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
        double l8 = sn_interp_value(it, g->loss)[0];
        ck_assert_msg(fabs(l8 - lb) < 0.01 * lb && l8 != lb, "%s: loss %.9g, bf16's %.9g",
                      sn_fp8_policy_name(pols[k]), l8, lb);
        for (size_t q = 0; q < sizeof names / sizeof names[0]; q++) {
            const sn_node *pb = fp8_param(bf, names[q]), *p8 = fp8_param(g, names[q]);
            const double *gb = sn_interp_value(ib, pb->grad), *g8 = sn_interp_value(it, p8->grad);
            ck_assert(gb && g8);
            double dot = 0, nb = 0, n8 = 0, diff = 0;
            for (int64_t i = 0; i < sn_numel(pb); i++) {
                dot += gb[i] * g8[i], nb += gb[i] * gb[i], n8 += g8[i] * g8[i];
                diff += (gb[i] - g8[i]) * (gb[i] - g8[i]);
            }
            double cosine = dot / sqrt(nb * n8), ratio = sqrt(n8 / nb);
            bool touched = pols[k] == SN_FP8_LINEAR || q == 0; /* head: wte's products only */
            ck_assert_msg(cosine > 0.99 && fabs(ratio - 1) < 0.1, "%s: %s's gradient: cosine %g "
                          "with bf16's, norm ratio %g", sn_fp8_policy_name(pols[k]), names[q], cosine, ratio);
            if (touched) ck_assert_msg(diff > 1e-6 * nb, "%s: %s's gradient equals bf16's",
                                       sn_fp8_policy_name(pols[k]), names[q]);
            if (getenv("SN_TEST_WORST"))
                printf("%s %s: loss %.6f (bf16 %.6f), cosine %.6f, norm ratio %.4f\n",
                       sn_fp8_policy_name(pols[k]), names[q], l8, lb, cosine, ratio);
        }
        sn_interp_free(it);
        sn_graph_free(g);
    }
    sn_interp_free(ib);
    sn_graph_free(bf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("fp8");
    tcase_add_test(tc, test_codes);
    tcase_add_test(tc, test_rounding);
    tcase_add_test(tc, test_pow2_scale);
    tcase_add_test(tc, test_rules);
    tcase_add_test(tc, test_interp_scaled_product);
    tcase_add_test(tc, test_pass_picks);
    tcase_add_test(tc, test_pass_tracks_bf16);
    tcase_add_test(tc, test_pass_dlogits_bound);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
