/* test_ops.c: the reference interpreter, op by op, against values worked out by hand; dtype
 * rounding (bf16, f16, exact mode); error messages; memory release; the speed of a small graph.
 * Convention: tensors are written row-major as literals; f32 results are compared at 1e-6. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "harness.h"

#define F32_TOL 1e-6

/* ---- helpers ---- */

static void graph_ok(const sn_graph *g) {
    ck_assert_msg(!sn_graph_error(g), "graph error: %s", sn_graph_error(g));
}

/* An interpreter that keeps every value, so tests can read intermediates. */
static sn_interp *start(const sn_graph *g, bool exact) {
    graph_ok(g);
    sn_interp *it = sn_interp_new(g, exact);
    sn_interp_keep_all(it, true);
    return it;
}

static void feed(sn_interp *it, const sn_node *n, const float *v) {
    sn_err e;
    ck_assert_msg(sn_interp_set(it, n, v, &e) == SN_OK, "set: %s", e.msg);
}
#define FEED(it, n, ...) feed(it, n, (const float[]){__VA_ARGS__})

static void feed_i32(sn_interp *it, const sn_node *n, const int32_t *v) {
    sn_err e;
    ck_assert_msg(sn_interp_set_i32(it, n, v, &e) == SN_OK, "set_i32: %s", e.msg);
}
#define FEED_I32(it, n, ...) feed_i32(it, n, (const int32_t[]){__VA_ARGS__})

static void run_ok(sn_interp *it) {
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "run: %s", e.msg);
}

static void expect(const sn_interp *it, const sn_node *n, const double *want, size_t count,
                   double tol, const char *what) {
    ck_assert_msg(n, "%s: node is NULL", what);
    ck_assert_msg((size_t)sn_numel(n) == count, "%s: %lld elements, expected %zu", what,
                  (long long)sn_numel(n), count);
    const double *got = sn_interp_value(it, n);
    ck_assert_msg(got, "%s: no value", what);
    sn_check_close(what, got, want, count, tol, 1e-12);
}
#define EXPECT(it, n, tol, ...)                                                                    \
    expect(it, n, (const double[]){__VA_ARGS__},                                                   \
           sizeof((const double[]){__VA_ARGS__}) / sizeof(double), tol, #n)

static void expect_shape(const sn_node *n, sn_shape s) {
    char a[96], b[96];
    bool ok = n && n->rank == s.rank;
    for (int i = 0; ok && i < s.rank; i++) ok = n->shape[i] == s.d[i];
    ck_assert_msg(ok, "shape %s, expected %s",
                  n ? sn_shape_str(n->rank, n->shape, a, sizeof a) : "NULL",
                  sn_shape_str(s.rank, s.d, b, sizeof b));
}

static void expect_msg(sn_status st, const sn_err *e, const char *part) {
    ck_assert_msg(st != SN_OK, "expected a failure mentioning \"%s\"", part);
    ck_assert_msg(strstr(e->msg, part), "message \"%s\" lacks \"%s\"", e->msg, part);
}

/* ---- dtype rounding ---- */

START_TEST(test_round_bf16) {
    ck_assert(sn_dtype_round(SN_BF16, 1 + ldexp(1, -8)) == 1);     /* tie, to even */
    ck_assert(sn_dtype_round(SN_BF16, 1 + ldexp(1, -7)) == 1 + ldexp(1, -7)); /* representable */
    ck_assert(sn_dtype_round(SN_BF16, 1 + 3 * ldexp(1, -8)) == 1 + ldexp(1, -6)); /* tie, up */
    ck_assert(sn_dtype_round(SN_BF16, 1 + 1.1 * ldexp(1, -8)) == 1 + ldexp(1, -7)); /* above tie */
    ck_assert(sn_dtype_round(SN_BF16, -(1 + ldexp(1, -8))) == -1);
    ck_assert(sn_dtype_round(SN_BF16, 257) == 256);
    double bmax = (2 - ldexp(1, -7)) * ldexp(1, 127);
    ck_assert(sn_dtype_round(SN_BF16, bmax) == bmax);
    ck_assert(isinf(sn_dtype_round(SN_BF16, 3.4e38)) && sn_dtype_round(SN_BF16, 3.4e38) > 0);
    ck_assert(isinf(sn_dtype_round(SN_BF16, -3.4e38)) && sn_dtype_round(SN_BF16, -3.4e38) < 0);
    ck_assert(sn_dtype_round(SN_F32, 1 + ldexp(1, -24)) == 1);
    ck_assert(sn_dtype_round(SN_F32, 1 + ldexp(1, -23)) == 1 + ldexp(1, -23));
}
END_TEST

START_TEST(test_round_f16) {
    ck_assert(sn_dtype_round(SN_F16, 1 + ldexp(1, -11)) == 1);    /* tie, to even */
    ck_assert(sn_dtype_round(SN_F16, 1 + ldexp(1, -10)) == 1 + ldexp(1, -10));
    ck_assert(sn_dtype_round(SN_F16, 1 + 3 * ldexp(1, -11)) == 1 + ldexp(1, -9)); /* tie, up */
    ck_assert(sn_dtype_round(SN_F16, 65504) == 65504);  /* largest finite */
    ck_assert(sn_dtype_round(SN_F16, 65519) == 65504);  /* below the tie */
    ck_assert(isinf(sn_dtype_round(SN_F16, 65520)));    /* tie rounds to even: 2^16, overflow */
    ck_assert(sn_dtype_round(SN_F16, ldexp(1, -24)) == ldexp(1, -24)); /* smallest subnormal */
    ck_assert(sn_dtype_round(SN_F16, ldexp(1, -25)) == 0);             /* tie, to even (0) */
    ck_assert(sn_dtype_round(SN_F16, 3 * ldexp(1, -25)) == ldexp(1, -23)); /* tie, to even */
    ck_assert(sn_dtype_round(SN_I32, 7) == 7);
}
END_TEST

/* bf16 tensors round after each op and in the setters; exact mode does neither. */
START_TEST(test_bf16_ops_and_exact) {
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_input(g, "a", SN_BF16, SN_SHAPE(3));
    sn_node *b = sn_input(g, "b", SN_BF16, SN_SHAPE(3));
    sn_node *s = sn_add(g, a, b);
    sn_node *c = sn_input(g, "c", SN_BF16, SN_SHAPE(1));
    for (int exact = 0; exact <= 1; exact++) {
        sn_interp *it = start(g, exact);
        FEED(it, a, 1, 1, 1);
        FEED(it, b, 0x1p-8f, 0x1p-7f, 0x3p-8f);
        FEED(it, c, 1 + 0x1p-8f);
        run_ok(it);
        if (!exact) {
            EXPECT(it, s, 0, 1, 1 + 0x1p-7, 1 + 0x1p-6);
            EXPECT(it, c, 0, 1);
        } else {
            EXPECT(it, s, 0, 1 + 0x1p-8, 1 + 0x1p-7, 1 + 0x3p-8);
            EXPECT(it, c, 0, 1 + 0x1p-8);
        }
        sn_interp_free(it);
    }
    sn_graph_free(g);
}
END_TEST

START_TEST(test_f32_and_exact_mode) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(1));
    sn_node *q = sn_div(g, x, sn_scalar(g, SN_F32, 3));
    sn_node *h = sn_input(g, "h", SN_F16, SN_SHAPE(2));
    sn_node *hh = sn_scale(g, h, 2);
    sn_interp *it = start(g, false);
    FEED(it, x, 1);
    FEED(it, h, 65504, 1);
    run_ok(it);
    EXPECT(it, q, 0, (double)(1.0f / 3.0f));
    ck_assert(sn_interp_value(it, q)[0] != 1.0 / 3.0);
    ck_assert(isinf(sn_interp_value(it, hh)[0])); /* f16 overflow */
    ck_assert(sn_interp_value(it, hh)[1] == 2);
    sn_interp_free(it);
    it = start(g, true);
    sn_err e;
    ck_assert(sn_interp_set_f64(it, x, (const double[]){1}, &e) == SN_OK);
    FEED(it, h, 65504, 1);
    run_ok(it);
    ck_assert(sn_interp_value(it, q)[0] == 1.0 / 3.0);
    ck_assert(sn_interp_value(it, hh)[0] == 131008); /* no rounding, no overflow */
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- pointwise ---- */

START_TEST(test_binary_broadcast) {
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(2, 3));
    sn_node *r = sn_input(g, "r", SN_F32, SN_SHAPE(3));
    sn_node *s = sn_input(g, "s", SN_F32, SN_SCALAR);
    sn_node *c = sn_input(g, "c", SN_F32, SN_SHAPE(2, 1));
    sn_node *p = sn_input(g, "p", SN_F32, SN_SHAPE(2, 1, 3));
    sn_node *add = sn_add(g, a, r), *radd = sn_add(g, r, a), *sub = sn_sub(g, a, s);
    sn_node *ssub = sn_sub(g, s, a), *outer = sn_mul(g, c, r), *div = sn_div(g, a, c);
    sn_node *eq = sn_eq(g, a, sn_const(g, SN_F32, SN_SHAPE(3), (const float[]){1, 5, 3}));
    sn_node *p3 = sn_add(g, p, c); /* (2,1,3) + (2,1) -> (2,2,3) */
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(2, 3));
    sn_node *ieq = sn_eq(g, ids, sn_scalar(g, SN_I32, 3));
    sn_interp *it = start(g, false);
    FEED(it, a, 1, 2, 3, 4, 5, 6);
    FEED(it, r, 10, 20, 30);
    FEED(it, s, 2);
    FEED(it, c, 1, 2);
    FEED(it, p, 1, 2, 3, 4, 5, 6);
    FEED_I32(it, ids, 1, 2, 3, 4, 3, 6);
    run_ok(it);
    EXPECT(it, add, 0, 11, 22, 33, 14, 25, 36);
    EXPECT(it, radd, 0, 11, 22, 33, 14, 25, 36);
    EXPECT(it, sub, 0, -1, 0, 1, 2, 3, 4);
    EXPECT(it, ssub, 0, 1, 0, -1, -2, -3, -4);
    EXPECT(it, outer, 0, 10, 20, 30, 20, 40, 60);
    EXPECT(it, div, 0, 1, 2, 3, 2, 2.5, 3);
    EXPECT(it, eq, 0, 1, 0, 1, 0, 1, 0);
    expect_shape(p3, SN_SHAPE(2, 2, 3));
    EXPECT(it, p3, 0, 2, 3, 4, 3, 4, 5, 5, 6, 7, 6, 7, 8);
    ck_assert_int_eq(ieq->dtype, SN_I32);
    EXPECT(it, ieq, 0, 0, 0, 1, 0, 1, 0);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_unary) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3));
    sn_node *p = sn_input(g, "p", SN_F32, SN_SHAPE(3));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(3));
    sn_node *neg = sn_neg(g, x), *scale = sn_scale(g, x, 2.5f), *ex = sn_exp(g, x);
    sn_node *th = sn_tanh(g, x), *ge = sn_gelu(g, x), *si = sn_silu(g, x);
    sn_node *lg = sn_log(g, p), *sq = sn_sqrt(g, p), *rs = sn_rsqrt(g, p);
    sn_node *gb = sn_gelu_bwd(g, x, dy), *sb = sn_silu_bwd(g, x, dy);
    sn_interp *it = start(g, false);
    FEED(it, x, -1, 0.5f, 2);
    FEED(it, p, 0.25f, 4, 16);
    FEED(it, dy, 1, 2, -1);
    run_ok(it);
    EXPECT(it, neg, 0, 1, -0.5, -2);
    EXPECT(it, scale, 0, -2.5, 1.25, 5);
    EXPECT(it, ex, F32_TOL, 0.36787944117144233, 1.6487212707001282, 7.38905609893065);
    EXPECT(it, th, F32_TOL, -0.7615941559557649, 0.46211715726000974, 0.9640275800758169);
    EXPECT(it, ge, F32_TOL, -0.15880800939172324, 0.34571400982514394, 1.954597694087775);
    EXPECT(it, si, F32_TOL, -0.2689414213699951, 0.3112296656009273, 1.7615941559557646);
    EXPECT(it, lg, F32_TOL, -1.3862943611198906, 1.3862943611198906, 2.772588722239781);
    EXPECT(it, sq, 0, 0.5, 2, 4);
    EXPECT(it, rs, 0, 2, 0.5, 0.25);
    EXPECT(it, gb, F32_TOL, -0.08296408384578255, 1.7347398070692848, -1.0860992566236183);
    EXPECT(it, sb, F32_TOL, 0.07232948812851325, 1.4799223746053038, -1.0907842487848955);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_cast) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4));
    sn_node *i = sn_cast(g, x, SN_I32);
    sn_node *back = sn_cast(g, i, SN_F32);
    sn_node *b = sn_cast(g, x, SN_BF16);
    sn_node *n = sn_input(g, "n", SN_I32, SN_SHAPE(1));
    sn_node *ib = sn_cast(g, n, SN_BF16);
    sn_interp *it = start(g, false);
    FEED(it, x, -1.7f, 2.9f, -0.5f, 1 + 0x1p-8f);
    FEED_I32(it, n, 257);
    run_ok(it);
    EXPECT(it, i, 0, -1, 2, 0, 1); /* toward zero */
    EXPECT(it, back, 0, -1, 2, 0, 1);
    EXPECT(it, b, 0, -1.703125, 2.90625, -0.5, 1); /* bf16 keeps 8 significant bits */
    EXPECT(it, ib, 0, 256);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- reductions ---- */

START_TEST(test_reduce) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 3));
    sn_node *m = sn_input(g, "m", SN_F32, SN_SHAPE(2, 3));
    sn_node *x3 = sn_input(g, "x3", SN_F32, SN_SHAPE(2, 2, 2));
    sn_node *s0 = sn_sum(g, x, 0, false), *s1k = sn_sum(g, x, 1, true);
    sn_node *m1 = sn_mean(g, x, -1, false);
    sn_node *mx0 = sn_max(g, x, 0, false), *mx1 = sn_max(g, m, 1, true);
    sn_node *mid = sn_sum(g, x3, 1, true), *mid_m = sn_mean(g, x3, 1, false);
    sn_node *all = sn_sum(g, sn_sum(g, x, 1, false), 0, false);
    expect_shape(s0, SN_SHAPE(3));
    expect_shape(s1k, SN_SHAPE(2, 1));
    expect_shape(mx1, SN_SHAPE(2, 1));
    expect_shape(mid, SN_SHAPE(2, 1, 2));
    expect_shape(mid_m, SN_SHAPE(2, 2));
    expect_shape(all, SN_SCALAR);
    sn_interp *it = start(g, false);
    FEED(it, x, 1, 2, 3, 4, 5, 6);
    FEED(it, m, 3, -1, 2, -7, 0, -2);
    FEED(it, x3, 1, 2, 3, 4, 5, 6, 7, 8);
    run_ok(it);
    EXPECT(it, s0, 0, 5, 7, 9);
    EXPECT(it, s1k, 0, 6, 15);
    EXPECT(it, m1, 0, 2, 5);
    EXPECT(it, mx0, 0, 4, 5, 6);
    EXPECT(it, mx1, 0, 3, 0);
    EXPECT(it, mid, 0, 4, 6, 12, 14);
    EXPECT(it, mid_m, 0, 2, 3, 6, 7);
    EXPECT(it, all, 0, 21);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- row ops ---- */

START_TEST(test_softmax) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 3));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(1, 3));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(1, 3));
    sn_node *sm = sn_softmax(g, x), *bwd = sn_softmax_bwd(g, y, dy);
    sn_interp *it = start(g, true);
    double xv[6] = {1, 2, 3, 0, 0, log(3)}, yv[3] = {0.09003057317038046, 0.24472847105479764,
                                                      0.6652409557748218};
    sn_err e;
    ck_assert(sn_interp_set_f64(it, x, xv, &e) == SN_OK);
    ck_assert(sn_interp_set_f64(it, y, yv, &e) == SN_OK);
    FEED(it, dy, 1, 0, -1);
    run_ok(it);
    EXPECT(it, sm, 1e-12, 0.09003057317038046, 0.24472847105479764, 0.6652409557748218, 0.2, 0.2,
           0.6);
    EXPECT(it, bwd, 1e-12, 0.14181709360981215, 0.1407703574696301, -0.2825874510794423);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* Rows [1,1,3,3] and [3,3,1,1]: mean 2, variance 1; with eps 3, rstd = 1/2. */
START_TEST(test_layernorm) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 4));
    sn_node *w = sn_input(g, "w", SN_F32, SN_SHAPE(4));
    sn_node *b = sn_input(g, "b", SN_F32, SN_SHAPE(4));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(2, 4));
    sn_node *y = sn_layernorm(g, x, w, b, 3), *y0 = sn_layernorm(g, x, w, b, 0);
    sn_node *dx = sn_layernorm_bwd(g, x, w, dy, 3), *dw = sn_layernorm_bwd_w(g, x, dy, 3);
    expect_shape(dw, SN_SHAPE(4));
    sn_interp *it = start(g, false);
    FEED(it, x, 1, 1, 3, 3, 3, 3, 1, 1);
    FEED(it, w, 1, 2, 3, 4);
    FEED(it, b, 0.5f, 0, 0, -1);
    FEED(it, dy, 1, 0, 0, 1, 2, 2, 2, 2);
    run_ok(it);
    EXPECT(it, y, F32_TOL, 0, -1, 1.5, 1, 1, 1, -1.5, -3);
    EXPECT(it, y0, F32_TOL, -0.5, -2, 3, 3, 1.5, 2, -3, -5);
    EXPECT(it, dx, F32_TOL, -0.03125, -0.53125, -0.71875, 1.28125, -1.25, -0.25, 0.25, 1.25);
    EXPECT(it, dw, F32_TOL, 0.5, 1, -1, -0.5);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* Rows [1,1,3,3] and [3,-1,1,-3]: mean square 5; with eps 4, rstd = 1/3. */
START_TEST(test_rmsnorm) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 4));
    sn_node *w = sn_input(g, "w", SN_F32, SN_SHAPE(4));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(2, 4));
    sn_node *y = sn_rmsnorm(g, x, w, 4);
    sn_node *dx = sn_rmsnorm_bwd(g, x, w, dy, 4), *dw = sn_rmsnorm_bwd_w(g, x, dy, 4);
    expect_shape(dw, SN_SHAPE(4));
    sn_interp *it = start(g, false);
    FEED(it, x, 1, 1, 3, 3, 3, -1, 1, -3);
    FEED(it, w, 3, 6, 1, 3);
    FEED(it, dy, 1, 0, 0, 1, 1, 1, 1, 1);
    run_ok(it);
    EXPECT(it, y, F32_TOL, 1, 2, 1, 3, 3, -2, 1.0 / 3, -3);
    EXPECT(it, dx, F32_TOL, 8.0 / 9, -1.0 / 9, -1.0 / 3, 2.0 / 3, 41.0 / 36, 211.0 / 108,
           41.0 / 108, 31.0 / 36);
    EXPECT(it, dw, F32_TOL, 4.0 / 3, -1.0 / 3, 1.0 / 3, 0);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_causal_mask) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(1, 2, 3)); /* T=2 < S=3 */
    sn_node *sq = sn_input(g, "sq", SN_F32, SN_SHAPE(2, 2, 2));
    sn_node *m = sn_causal_mask_fill(g, x, -100);
    sn_node *inf = sn_causal_mask(g, sq);
    sn_interp *it = start(g, false);
    FEED(it, x, 1, 2, 3, 4, 5, 6);
    FEED(it, sq, 1, 2, 3, 4, 5, 6, 7, 8);
    run_ok(it);
    EXPECT(it, m, 0, 1, 2, -100, 4, 5, 6);
    const double *v = sn_interp_value(it, inf);
    const double want[8] = {1, -INFINITY, 3, 4, 5, -INFINITY, 7, 8};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(v[i] == want[i], "[%d] = %g, want %g", i, v[i], want[i]);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_cross_entropy) {
    sn_graph *g = sn_graph_new();
    sn_node *lg = sn_input(g, "logits", SN_F32, SN_SHAPE(3, 3));
    sn_node *tg = sn_input(g, "targets", SN_I32, SN_SHAPE(3));
    sn_node *dl = sn_input(g, "dloss", SN_F32, SN_SCALAR);
    sn_node *none = sn_input(g, "none", SN_I32, SN_SHAPE(3));
    sn_node *tg2 = sn_input(g, "targets2", SN_I32, SN_SHAPE(3));
    sn_node *loss = sn_cross_entropy(g, lg, tg, -1);
    sn_node *loss2 = sn_cross_entropy(g, lg, tg2, 2); /* ignore index inside the vocabulary */
    sn_node *empty = sn_cross_entropy(g, lg, none, -1);
    sn_node *d = sn_cross_entropy_bwd(g, lg, tg, dl, -1);
    sn_node *dempty = sn_cross_entropy_bwd(g, lg, none, dl, -1);
    expect_shape(loss, SN_SCALAR);
    sn_interp *it = start(g, false);
    FEED(it, lg, 1, 2, 3, 0, 0, 0, 2, 0, -1);
    FEED_I32(it, tg, 2, -1, 0);
    FEED(it, dl, 2);
    FEED_I32(it, none, -1, -1, -1);
    FEED_I32(it, tg2, 2, 1, 0);
    run_ok(it);
    /* rows 0 and 2 count: (0.4076059644443806 + 0.16984601955628564) / 2 */
    EXPECT(it, loss, F32_TOL, 0.2887259920003331);
    EXPECT(it, loss2, F32_TOL, 0.6342291541121977); /* rows 1 and 2: (log 3 + 0.1698..) / 2 */
    EXPECT(it, empty, 0, 0);
    /* (softmax - onehot) * 2 / 2; the ignored row is zero */
    EXPECT(it, d, F32_TOL, 0.09003057317038046, 0.24472847105479764, -0.3347590442251782, 0, 0, 0,
           -0.15620526551866054, 0.11419519938459449, 0.04201006613406605);
    EXPECT(it, dempty, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- matmul: A = [1 2 3; 4 5 6], B = [7 8; 9 10; 11 12], A @ B = [58 64; 139 154] ---- */

START_TEST(test_matmul) {
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(2, 3));
    sn_node *at = sn_input(g, "at", SN_F32, SN_SHAPE(3, 2));
    sn_node *b = sn_input(g, "b", SN_F32, SN_SHAPE(3, 2));
    sn_node *bt = sn_input(g, "bt", SN_F32, SN_SHAPE(2, 3));
    sn_node *ab = sn_matmul(g, a, b), *tab = sn_matmul_t(g, at, b, true, false);
    sn_node *atb = sn_matmul_t(g, a, bt, false, true), *tt = sn_matmul_t(g, at, bt, true, true);
    sn_interp *it = start(g, false);
    FEED(it, a, 1, 2, 3, 4, 5, 6);
    FEED(it, at, 1, 4, 2, 5, 3, 6);
    FEED(it, b, 7, 8, 9, 10, 11, 12);
    FEED(it, bt, 7, 9, 11, 8, 10, 12);
    run_ok(it);
    EXPECT(it, ab, 0, 58, 64, 139, 154);
    EXPECT(it, tab, 0, 58, 64, 139, 154);
    EXPECT(it, atb, 0, 58, 64, 139, 154);
    EXPECT(it, tt, 0, 58, 64, 139, 154);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_matmul_batched) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 2, 2));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(2, 2, 2));
    sn_node *x3 = sn_input(g, "x3", SN_F32, SN_SHAPE(2, 2, 3));
    sn_node *b = sn_input(g, "b", SN_F32, SN_SHAPE(3, 2));
    sn_node *bt = sn_input(g, "bt", SN_F32, SN_SHAPE(2, 3));
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(2, 3));
    sn_node *y3 = sn_input(g, "y3", SN_F32, SN_SHAPE(2, 3, 2));
    sn_node *xy = sn_matmul(g, x, y), *xty = sn_matmul_t(g, x, y, true, false);
    sn_node *shared_b = sn_matmul(g, x3, b), *shared_bt = sn_matmul_t(g, x3, bt, false, true);
    sn_node *shared_a = sn_matmul(g, a, y3);
    expect_shape(shared_b, SN_SHAPE(2, 2, 2));
    expect_shape(shared_a, SN_SHAPE(2, 2, 2));
    sn_interp *it = start(g, false);
    FEED(it, x, 1, 2, 3, 4, 5, 6, 7, 8);
    FEED(it, y, 1, 0, 0, 1, 0, 1, 1, 0); /* identity, swap */
    FEED(it, x3, 1, 2, 3, 4, 5, 6, -1, 0, 1, 2, 2, 2);
    FEED(it, b, 7, 8, 9, 10, 11, 12);
    FEED(it, bt, 7, 9, 11, 8, 10, 12);
    FEED(it, a, 1, 2, 3, 4, 5, 6);
    FEED(it, y3, 7, 8, 9, 10, 11, 12, 1, 1, 1, 1, 1, 1);
    run_ok(it);
    EXPECT(it, xy, 0, 1, 2, 3, 4, 6, 5, 8, 7);
    EXPECT(it, xty, 0, 1, 3, 2, 4, 7, 5, 8, 6);
    EXPECT(it, shared_b, 0, 58, 64, 139, 154, 4, 4, 54, 60);
    EXPECT(it, shared_bt, 0, 58, 64, 139, 154, 4, 4, 54, 60);
    EXPECT(it, shared_a, 0, 58, 64, 139, 154, 6, 6, 15, 15);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- layout ---- */

START_TEST(test_reshape_permute) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 3, 2, 2)); /* values 0..23 */
    sn_node *m = sn_input(g, "m", SN_F32, SN_SHAPE(2, 3));
    sn_node *heads = sn_permute(g, x, (const int[]){0, 2, 1, 3});
    sn_node *mixed = sn_permute(g, x, (const int[]){3, 1, 0, 2});
    sn_node *t = sn_transpose(g, m, 0, 1), *r = sn_reshape(g, m, SN_SHAPE(3, -1));
    expect_shape(heads, SN_SHAPE(2, 2, 3, 2));
    expect_shape(mixed, SN_SHAPE(2, 3, 2, 2));
    expect_shape(r, SN_SHAPE(3, 2));
    sn_interp *it = start(g, false);
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = (float)i;
    feed(it, x, v);
    FEED(it, m, 1, 2, 3, 4, 5, 6);
    run_ok(it);
    EXPECT(it, heads, 0, 0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11, 12, 13, 16, 17, 20, 21, 14, 15, 18,
           19, 22, 23);
    EXPECT(it, mixed, 0, 0, 2, 12, 14, 4, 6, 16, 18, 8, 10, 20, 22, 1, 3, 13, 15, 5, 7, 17, 19, 9,
           11, 21, 23);
    EXPECT(it, t, 0, 1, 4, 2, 5, 3, 6);
    EXPECT(it, r, 0, 1, 2, 3, 4, 5, 6);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_broadcast_slice_pad_concat) {
    sn_graph *g = sn_graph_new();
    sn_node *m = sn_input(g, "m", SN_F32, SN_SHAPE(2, 3));
    sn_node *r = sn_input(g, "r", SN_F32, SN_SHAPE(3));
    sn_node *c = sn_input(g, "c", SN_F32, SN_SHAPE(2, 1));
    sn_node *q = sn_input(g, "q", SN_F32, SN_SHAPE(2, 2));
    sn_node *row = sn_input(g, "row", SN_F32, SN_SHAPE(1, 3));
    sn_node *br = sn_broadcast(g, r, SN_SHAPE(2, 3)), *bc = sn_broadcast(g, c, SN_SHAPE(2, 2, 3));
    sn_node *s1 = sn_slice(g, m, 1, 1, 3), *s0 = sn_slice(g, m, 0, 1, 2);
    sn_node *p1 = sn_pad(g, m, 1, 1, 5), *p0 = sn_pad(g, m, 0, 2, 4);
    sn_node *c0 = sn_concat(g, 2, (sn_node *[]){m, row}, 0);
    sn_node *c1 = sn_concat(g, 3, (sn_node *[]){m, c, q}, -1);
    sn_node *parts[3];
    ck_assert_int_eq(sn_split(g, m, 1, 3, parts), 0);
    expect_shape(bc, SN_SHAPE(2, 2, 3));
    expect_shape(p1, SN_SHAPE(2, 5));
    expect_shape(c1, SN_SHAPE(2, 6));
    sn_interp *it = start(g, false);
    FEED(it, m, 1, 2, 3, 4, 5, 6);
    FEED(it, r, 1, 2, 3);
    FEED(it, c, 7, 8);
    FEED(it, q, 9, 10, 11, 12);
    FEED(it, row, -1, -2, -3);
    run_ok(it);
    EXPECT(it, br, 0, 1, 2, 3, 1, 2, 3);
    EXPECT(it, bc, 0, 7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8);
    EXPECT(it, s1, 0, 2, 3, 5, 6);
    EXPECT(it, s0, 0, 4, 5, 6);
    EXPECT(it, p1, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0);
    EXPECT(it, p0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6);
    EXPECT(it, c0, 0, 1, 2, 3, 4, 5, 6, -1, -2, -3);
    EXPECT(it, c1, 0, 1, 2, 3, 7, 9, 10, 4, 5, 6, 8, 11, 12);
    EXPECT(it, parts[2], 0, 3, 6);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- gather, leaves ---- */

START_TEST(test_embedding) {
    sn_graph *g = sn_graph_new();
    sn_node *table = sn_input(g, "table", SN_F32, SN_SHAPE(4, 2));
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(2, 2));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(2, 2, 2));
    sn_node *emb = sn_embedding(g, table, ids), *bwd = sn_embedding_bwd(g, ids, dy, 5);
    expect_shape(emb, SN_SHAPE(2, 2, 2));
    expect_shape(bwd, SN_SHAPE(5, 2));
    sn_interp *it = start(g, false);
    FEED(it, table, 0, 1, 10, 11, 20, 21, 30, 31);
    FEED_I32(it, ids, 3, 0, 3, 1); /* id 3 twice */
    FEED(it, dy, 1, 2, 3, 4, 5, 6, 7, 8);
    run_ok(it);
    EXPECT(it, emb, 0, 30, 31, 0, 1, 30, 31, 10, 11);
    EXPECT(it, bwd, 0, 3, 4, 7, 8, 0, 0, 6, 8, 0, 0); /* row 3 = dy[0] + dy[2] */
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_full_const) {
    sn_graph *g = sn_graph_new();
    sn_node *f = sn_full(g, SN_F32, SN_SHAPE(2, 2), 1.5f);
    sn_node *k = sn_const(g, SN_F32, SN_SHAPE(2, 3), (const float[]){1, -2, 3, 0.25f, 5, 6});
    sn_node *kb = sn_const(g, SN_BF16, SN_SHAPE(2), (const float[]){1 + 0x1p-8f, 3});
    sn_node *ki = sn_const(g, SN_I32, SN_SHAPE(2), (const float[]){4, -7});
    sn_node *sum = sn_add(g, k, sn_scalar(g, SN_F32, 1));
    sn_interp *it = start(g, false);
    run_ok(it);
    EXPECT(it, f, 0, 1.5, 1.5, 1.5, 1.5);
    EXPECT(it, k, 0, 1, -2, 3, 0.25, 5, 6);
    EXPECT(it, kb, 0, 1, 3);
    EXPECT(it, ki, 0, 4, -7);
    EXPECT(it, sum, 0, 2, -1, 4, 1.25, 6, 7);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_error_unset_input) {
    sn_graph *g = sn_graph_new();
    sn_node *t = sn_input(g, "table", SN_F32, SN_SHAPE(4, 2));
    sn_node *ids = sn_input(g, "idx", SN_I32, SN_SHAPE(2));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(2), SN_INIT_ONES, 0);
    sn_mul(g, sn_embedding(g, t, ids), w);
    sn_interp *it = start(g, false);
    sn_err e;
    FEED(it, t, 0, 1, 2, 3, 4, 5, 6, 7);
    expect_msg(sn_interp_run(it, &e), &e,
               "input 'idx' (%1) was not set: call sn_interp_set before sn_interp_run");
    ck_assert_int_eq(e.code, SN_ERR_INVALID);
    FEED_I32(it, ids, 0, 1);
    expect_msg(sn_interp_run(it, &e), &e, "param 'w' (%2) was not set");
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_error_bad_ids) {
    sn_graph *g = sn_graph_new();
    sn_node *t = sn_input(g, "table", SN_F32, SN_SHAPE(4, 2));
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(2, 2));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(2, 2, 2));
    sn_node *emb = sn_embedding(g, t, ids);
    sn_interp *it = start(g, false);
    sn_err e;
    FEED(it, t, 0, 1, 2, 3, 4, 5, 6, 7);
    FEED(it, dy, 0, 0, 0, 0, 0, 0, 0, 0);
    FEED_I32(it, ids, 0, 1, 4, 2);
    sn_status st = sn_interp_run(it, &e);
    expect_msg(st, &e, "embedding %3: id 4 at [1,0] of ids i32[2,2] is outside [0, 4)");
    ck_assert_int_eq(st, SN_ERR_INVALID);
    ck_assert_ptr_null(sn_interp_value(it, emb)); /* no half-run values */
    FEED_I32(it, ids, 0, 1, -1, 2);
    expect_msg(sn_interp_run(it, &e), &e, "id -1 at [1,0]");
    sn_interp_free(it);
    /* the scatter-add checks its ids too */
    sn_embedding_bwd(g, ids, dy, 3);
    it = start(g, false);
    FEED(it, t, 0, 1, 2, 3, 4, 5, 6, 7);
    FEED(it, dy, 1, 2, 3, 4, 5, 6, 7, 8);
    FEED_I32(it, ids, 0, 1, 2, 3); /* 3 is fine for the table, not for vocab 3 */
    expect_msg(sn_interp_run(it, &e), &e, "embedding_bwd %4: id 3 at [1,1] of ids i32[2,2] is "
               "outside [0, 3)");
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_error_bad_target) {
    sn_graph *g = sn_graph_new();
    sn_node *lg = sn_input(g, "logits", SN_F32, SN_SHAPE(2, 3));
    sn_node *tg = sn_input(g, "targets", SN_I32, SN_SHAPE(2));
    sn_node *dl = NULL;
    sn_cross_entropy(g, lg, tg, -1);
    sn_interp *it = start(g, false);
    sn_err e;
    FEED(it, lg, 0, 0, 0, 0, 0, 0);
    FEED_I32(it, tg, 2, 3);
    expect_msg(sn_interp_run(it, &e), &e, "cross_entropy %2: target 3 at [1] of targets i32[2] is "
               "outside the vocabulary [0, 3) and is not the ignore index -1");
    FEED_I32(it, tg, -2, -1);
    expect_msg(sn_interp_run(it, &e), &e, "target -2 at [0]");
    FEED_I32(it, tg, -1, -1);
    run_ok(it);
    sn_interp_free(it);
    sn_graph_free(g);
    g = sn_graph_new(); /* the backward alone checks its targets too */
    lg = sn_input(g, "logits", SN_F32, SN_SHAPE(2, 3));
    tg = sn_input(g, "targets", SN_I32, SN_SHAPE(2));
    dl = sn_input(g, "dl", SN_F32, SN_SCALAR);
    sn_cross_entropy_bwd(g, lg, tg, dl, -1);
    it = start(g, false);
    FEED(it, lg, 0, 0, 0, 0, 0, 0);
    FEED(it, dl, 1);
    FEED_I32(it, tg, 0, 7);
    expect_msg(sn_interp_run(it, &e), &e, "cross_entropy_bwd %3: target 7 at [1]");
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(test_error_setters) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2));
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(2));
    sn_node *y = sn_neg(g, x);
    sn_node *k = sn_full(g, SN_F32, SN_SHAPE(2), 1);
    sn_interp *it = start(g, false);
    sn_err e;
    expect_msg(sn_interp_set(it, y, (const float[]){1, 2}, &e), &e,
               "%2 is a neg node; only input and param nodes take values");
    expect_msg(sn_interp_set(it, k, (const float[]){1, 2}, &e), &e, "%3 is a full node");
    expect_msg(sn_interp_set(it, ids, (const float[]){1, 1.5f}, &e), &e,
               "input 'ids' (%1) is i32 but element [1] is 1.5, not an integer");
    expect_msg(sn_interp_set_f64(it, ids, (const double[]){3e9, 0}, &e), &e,
               "element [0] is 3e+09");
    ck_assert_int_eq(e.code, SN_ERR_INVALID);
    ck_assert(sn_interp_set(it, ids, (const float[]){-3, 4}, &e) == SN_OK);
    ck_assert(sn_interp_set_i32(it, x, (const int32_t[]){5, -6}, &e) == SN_OK);
    run_ok(it);
    EXPECT(it, ids, 0, -3, 4);
    EXPECT(it, y, 0, -5, 6);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- memory and reruns ---- */

START_TEST(test_memory) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(2), SN_INIT_ZEROS, 0);
    sn_node *e1 = sn_exp(g, x);
    sn_node *dead = sn_neg(g, e1);          /* read by nothing, not an output */
    sn_node *out = sn_mul(g, e1, w);
    sn_node *gw = sn_scale(g, x, 3);        /* stands in for w's gradient */
    sn_graph_add_output(g, out);
    w->grad = gw;
    graph_ok(g);
    sn_interp *it = sn_interp_new(g, false);
    FEED(it, x, 0, 1);
    FEED(it, w, 2, 3);
    run_ok(it);
    ck_assert_ptr_null(sn_interp_value(it, e1));
    ck_assert_ptr_null(sn_interp_value(it, dead));
    ck_assert_ptr_nonnull(sn_interp_value(it, x));
    EXPECT(it, out, F32_TOL, 2, 3 * M_E);
    EXPECT(it, gw, 0, 0, 3);
    sn_interp_keep_all(it, true);
    FEED(it, x, 1, 0); /* values persist until set again; a rerun recomputes */
    run_ok(it);
    EXPECT(it, e1, F32_TOL, M_E, 1);
    EXPECT(it, dead, F32_TOL, -M_E, -1);
    EXPECT(it, out, F32_TOL, 2 * M_E, 3);
    sn_interp_keep_all(it, false);
    run_ok(it);
    ck_assert_ptr_null(sn_interp_value(it, e1));
    EXPECT(it, out, F32_TOL, 2 * M_E, 3);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- a tiny GPT-2-like forward runs: 4 x 64 tokens, width 64, 4 heads, 4 layers.
 * Its time is printed, never asserted: speed targets live in bench/. ---- */

START_TEST(test_speed_small_model) {
    enum { N = 256, C = 64, H = 4, T = 64, L = 4 };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(N, C));
    sn_node *ones = sn_full(g, SN_F32, SN_SHAPE(C), 1), *zeros = sn_full(g, SN_F32, SN_SHAPE(C), 0);
    sn_node *params[4 * L];
    int np = 0;
    for (int l = 0; l < L; l++) {
        sn_node *wqkv = params[np++] = sn_param(g, "wqkv", SN_F32, SN_SHAPE(C, 3 * C), 0, 0);
        sn_node *wo = params[np++] = sn_param(g, "wo", SN_F32, SN_SHAPE(C, C), 0, 0);
        sn_node *w1 = params[np++] = sn_param(g, "w1", SN_F32, SN_SHAPE(C, 4 * C), 0, 0);
        sn_node *w2 = params[np++] = sn_param(g, "w2", SN_F32, SN_SHAPE(4 * C, C), 0, 0);
        sn_node *qkv = sn_matmul(g, sn_layernorm(g, x, ones, zeros, 1e-5f), wqkv);
        sn_node *part[3];
        sn_split(g, qkv, 1, 3, part);
        for (int i = 0; i < 3; i++) /* (B, T, H, D) -> (B, H, T, D) */
            part[i] = sn_permute(g, sn_reshape(g, part[i], SN_SHAPE(N / T, T, H, C / H)),
                                 (const int[]){0, 2, 1, 3});
        sn_node *scores = sn_scale(g, sn_matmul_t(g, part[0], part[1], false, true), 0.25f);
        sn_node *att = sn_softmax(g, sn_causal_mask(g, scores));
        sn_node *o = sn_permute(g, sn_matmul(g, att, part[2]), (const int[]){0, 2, 1, 3});
        x = sn_add(g, x, sn_matmul(g, sn_reshape(g, o, SN_SHAPE(N, C)), wo));
        sn_node *h = sn_gelu(g, sn_matmul(g, sn_layernorm(g, x, ones, zeros, 1e-5f), w1));
        x = sn_add(g, x, sn_matmul(g, h, w2));
    }
    sn_node *loss = sn_mean(g, sn_mean(g, sn_mul(g, x, x), 1, false), 0, false);
    sn_graph_add_output(g, loss);
    graph_ok(g);
    sn_interp *it = sn_interp_new(g, false);
    static float buf[4 * C * C]; /* the largest: x (N, C) and w1 (C, 4C) */
    for (int i = 0; i < N * C; i++) buf[i] = (float)sin(0.1 * i);
    feed(it, g->nodes[0], buf);
    for (int p = 0; p < np; p++) {
        for (int64_t i = 0; i < sn_numel(params[p]); i++)
            buf[i] = 0.02f * (float)cos(0.37 * (double)i + p);
        feed(it, params[p], buf);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_ok(it);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double mflop = (2.0 * N * C * C * 12 * L + 4.0 * N * T * C * L) / 1e6;
    fprintf(stderr, "test_ops: %d-node forward (%d layers, %d tokens, width %d, %.0f MFLOP) "
            "in %.1f ms\n",
            g->n_nodes, L, N, C, mflop, 1e3 * s);
    ck_assert(isfinite(sn_interp_value(it, loss)[0]) && sn_interp_value(it, loss)[0] > 0);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("interp");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_bf16);
    tcase_add_test(tc, test_round_f16);
    tcase_add_test(tc, test_bf16_ops_and_exact);
    tcase_add_test(tc, test_f32_and_exact_mode);
    tcase_add_test(tc, test_binary_broadcast);
    tcase_add_test(tc, test_unary);
    tcase_add_test(tc, test_cast);
    tcase_add_test(tc, test_reduce);
    tcase_add_test(tc, test_softmax);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_causal_mask);
    tcase_add_test(tc, test_cross_entropy);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_matmul_batched);
    tcase_add_test(tc, test_reshape_permute);
    tcase_add_test(tc, test_broadcast_slice_pad_concat);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_full_const);
    tcase_add_test(tc, test_error_unset_input);
    tcase_add_test(tc, test_error_bad_ids);
    tcase_add_test(tc, test_error_bad_target);
    tcase_add_test(tc, test_error_setters);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_speed_small_model);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
