/* test_fp8.c: the 8-bit floats (OCP FP8 E4M3 and E5M2, ir.h) against references written here
 * from the formats' bit layouts: every code decoded and kept by the rounding, the rounding of
 * many values against a brute-force nearest-code search (ties to the even code, saturation at
 * the largest finite value), pow2_scale against a search over the powers of two; then the IR's
 * rules for them (made by casts, read by casts, products and views) and the interpreter's amax,
 * pow2_scale and products of 8-bit operands. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "ir/ir.h"
#include "support/rng.h"
#include "harness.h"

/* ---- the formats from their bits ---- */

typedef struct {
    sn_dtype t;
    int ebits, mbits, bias;
    bool ieee; /* E5M2: an all-ones exponent is infinity or NaN; E4M3: only S.1111.111 is NaN */
} fmt;

static const fmt E4M3 = {SN_F8E4M3, 4, 3, 7, false}, E5M2 = {SN_F8E5M2, 5, 2, 15, true};

/* The value of code c (NAN for a NaN code, +-INFINITY for E5M2's infinities). */
static double decode(const fmt *f, int c) {
    int s = c >> 7, e = (c >> f->mbits) & ((1 << f->ebits) - 1), m = c & ((1 << f->mbits) - 1);
    int emax_field = (1 << f->ebits) - 1;
    double v;
    if (f->ieee && e == emax_field) v = m ? NAN : INFINITY;
    else if (!f->ieee && e == emax_field && m == (1 << f->mbits) - 1) v = NAN;
    else if (e == 0) v = ldexp(m, 1 - f->bias - f->mbits);
    else v = ldexp((1 << f->mbits) + m, e - f->bias - f->mbits);
    return s ? -v : v;
}

/* The nearest finite code's value to v by search (ties: the code with an even last bit); a NaN
 * gives NaN. Saturation needs no rule: beyond the largest finite code it is the nearest. */
static double nearest(const fmt *f, double v) {
    if (isnan(v)) return NAN;
    if (fabs(v) > 2 * sn_dtype_max(f->t)) /* far beyond: the distances below would not differ */
        v = copysign(2 * sn_dtype_max(f->t), v);
    double best = NAN, bd = INFINITY;
    int bc = 0;
    for (int c = 0; c < 256; c++) {
        double x = decode(f, c);
        if (!isfinite(x)) continue;
        double d = isinf(v) ? (signbit(v) == signbit(x) ? -fabs(x) : INFINITY) : fabs(x - v);
        if (d < bd || (d == bd && (c & 1) == 0 && (bc & 1))) best = x, bd = d, bc = c;
    }
    return best;
}

START_TEST(test_codes) {
    const fmt *fs[] = {&E4M3, &E5M2};
    const double maxes[] = {448, 57344};
    const int finite[] = {254, 248}, distinct[] = {253, 247}; /* +0 and -0 equal */
    for (int k = 0; k < 2; k++) {
        const fmt *f = fs[k];
        int n_finite = 0, n_distinct = 0;
        double seen[256], top = 0;
        for (int c = 0; c < 256; c++) {
            double x = decode(f, c);
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
    ck_assert(decode(&E4M3, 0x01) == ldexp(1, -9) && decode(&E5M2, 0x01) == ldexp(1, -16));
    ck_assert(isinf(decode(&E5M2, 0x7c)) && isnan(decode(&E4M3, 0x7f)) && decode(&E4M3, 0x7e) == 448);
}
END_TEST

/* Values to round: every code's neighbours and midpoints (and a hair either side), powers of
 * two across both ranges, random f32s over 40 binades, values beyond the largest finite one. */
START_TEST(test_rounding) {
    const fmt *fs[] = {&E4M3, &E5M2};
    sn_rng r = sn_rng_seed(8);
    for (int k = 0; k < 2; k++) {
        const fmt *f = fs[k];
        double vals[4096];
        int n = 0;
        for (int c = 0; c < 127 && n + 6 < 4096; c++) { /* positive codes: each and the next */
            double a = decode(f, c), b = decode(f, c + 1);
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

int main(void) {
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("fp8");
    tcase_add_test(tc, test_codes);
    tcase_add_test(tc, test_rounding);
    tcase_add_test(tc, test_pow2_scale);
    tcase_add_test(tc, test_rules);
    tcase_add_test(tc, test_interp_scaled_product);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
