/* test_grad.c: every differentiable op's gradient rule against central finite differences.
 * Convention: each case builds a small graph whose trainable inputs are PARAMs; the harness
 * reduces the op's output to a scalar with random weights (so no gradient is trivially
 * uniform), runs autodiff, and compares with finite differences in the exact (fp64) interpreter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "harness.h"

/* A parameter named "pos..." gets values in [0.5, 2] (for log, sqrt, div); others N(0, 1). */
static sn_node *P(sn_graph *g, const char *name, sn_shape s) {
    return sn_param(g, name, SN_F32, s, SN_INIT_NORMAL, 1.0f);
}

static void fill_param(const sn_node *p, double *v, sn_rng *r) {
    bool pos = !strncmp(p->name, "pos", 3);
    for (int64_t i = 0; i < sn_numel(p); i++)
        v[i] = pos ? 0.5 + 1.5 * sn_rng_uniform(r) : sn_rng_normal(r);
}

typedef sn_node *(*build_fn)(sn_graph *g, sn_node **ints);

/* Integer inputs are INPUT nodes filled from int_data: ints[0] (ids) with -1 replaced by 0,
 * ints[1] (targets) as is, so one target is ignored. Values stay below 5. */
static const int32_t int_data[] = {1, 4, 0, 2, 4, -1, 3, 1};

static double run_loss(sn_interp *it, const sn_node *loss) {
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    return sn_interp_value(it, loss)[0];
}

/* Builds the case, adds loss = sum(out * R), checks every parameter element. */
static void gradcheck(const char *what, build_fn build, double tol) {
    sn_graph *g = sn_graph_new();
    sn_node *ints[2] = {NULL, NULL};
    sn_node *out = build(g, ints);
    ck_assert_msg(out && !sn_graph_error(g), "%s: %s", what, sn_graph_error(g));
    sn_rng r = sn_rng_seed(1234);
    int64_t n = sn_numel(out);
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = (float)sn_rng_normal(&r);
    sn_node *flat = sn_reshape(g, out, SN_SHAPE(n));
    sn_node *loss = sn_sum(g, sn_mul(g, flat, sn_const(g, SN_F32, SN_SHAPE(n), w)), 0, false);
    free(w);
    sn_err e;
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s: %s", what, e.msg);
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s: %s", what, e.msg);

    sn_interp *it = sn_interp_new(g, true);
    for (int k = 0; k < 2; k++)
        if (ints[k]) {
            int32_t v[64];
            for (int64_t i = 0; i < sn_numel(ints[k]); i++)
                v[i] = int_data[i % 8] < 0 && k == 0 ? 0 : int_data[i % 8];
            ck_assert_msg(sn_interp_set_i32(it, ints[k], v, &e) == SN_OK, "%s", e.msg);
        }
    sn_node *params[16];
    int np = sn_graph_params(g, params, 16);
    ck_assert_int_gt(np, 0);
    double *vals[16];
    for (int p = 0; p < np; p++) {
        vals[p] = malloc(sizeof(double) * (size_t)sn_numel(params[p]));
        fill_param(params[p], vals[p], &r);
        ck_assert_msg(sn_interp_set_f64(it, params[p], vals[p], &e) == SN_OK, "%s", e.msg);
    }
    for (int p = 0; p < np; p++) {
        int64_t m = sn_numel(params[p]);
        run_loss(it, loss); /* gradients at the unperturbed point (the previous loop moved it) */
        const double *gv = sn_interp_value(it, params[p]->grad);
        ck_assert_msg(gv, "%s: gradient of %s not kept", what, params[p]->name);
        double *analytic = malloc(sizeof(double) * (size_t)m), *numeric = malloc(sizeof(double) * (size_t)m);
        memcpy(analytic, gv, sizeof(double) * (size_t)m);
        const double h = 1e-5;
        for (int64_t i = 0; i < m; i++) {
            double keep = vals[p][i];
            vals[p][i] = keep + h;
            sn_interp_set_f64(it, params[p], vals[p], &e);
            double up = run_loss(it, loss);
            vals[p][i] = keep - h;
            sn_interp_set_f64(it, params[p], vals[p], &e);
            double down = run_loss(it, loss);
            vals[p][i] = keep;
            sn_interp_set_f64(it, params[p], vals[p], &e);
            numeric[i] = (up - down) / (2 * h);
        }
        char label[128];
        snprintf(label, sizeof label, "%s: d loss / d %s", what, params[p]->name);
        sn_check_close(label, analytic, numeric, (size_t)m, tol, 1e-3);
        free(analytic);
        free(numeric);
    }
    for (int p = 0; p < np; p++) free(vals[p]);
    sn_interp_free(it);
    sn_graph_free(g);
}

/* ---- cases: each returns the op's output ---- */

#define CASE(name) static sn_node *build_##name(sn_graph *g, sn_node **ints)
#define X23 P(g, "x", SN_SHAPE(2, 3))
#define POS23 P(g, "pos_x", SN_SHAPE(2, 3))

CASE(add) { (void)ints; return sn_add(g, X23, P(g, "b", SN_SHAPE(3))); }
CASE(add_bcast_col) { (void)ints; return sn_add(g, P(g, "a", SN_SHAPE(2, 1)), P(g, "b", SN_SHAPE(1, 3))); }
CASE(sub) { (void)ints; return sn_sub(g, P(g, "s", SN_SCALAR), X23); }
CASE(mul) { (void)ints; return sn_mul(g, X23, P(g, "b", SN_SHAPE(2, 1))); }
CASE(div) { (void)ints; return sn_div(g, X23, P(g, "pos_b", SN_SHAPE(3))); }
CASE(tied) { (void)ints; sn_node *x = X23; return sn_mul(g, x, sn_add(g, x, x)); }
CASE(neg) { (void)ints; return sn_neg(g, X23); }
CASE(scale) { (void)ints; return sn_scale(g, X23, -1.75f); }
CASE(exp) { (void)ints; return sn_exp(g, X23); }
CASE(log) { (void)ints; return sn_log(g, POS23); }
CASE(tanh) { (void)ints; return sn_tanh(g, X23); }
CASE(sqrt) { (void)ints; return sn_sqrt(g, POS23); }
CASE(rsqrt) { (void)ints; return sn_rsqrt(g, POS23); }
CASE(gelu) { (void)ints; return sn_gelu(g, X23); }
CASE(silu) { (void)ints; return sn_silu(g, X23); }
CASE(cast) { (void)ints; return sn_cast(g, sn_cast(g, X23, SN_BF16), SN_F32); }
CASE(sum) { (void)ints; return sn_sum(g, P(g, "x", SN_SHAPE(2, 3, 4)), 1, false); }
CASE(sum_keep) { (void)ints; return sn_sum(g, X23, 0, true); }
CASE(mean) { (void)ints; return sn_mean(g, P(g, "x", SN_SHAPE(2, 3, 4)), -1, false); }
CASE(max) { (void)ints; return sn_max(g, P(g, "x", SN_SHAPE(3, 4)), 1, true); }
CASE(softmax) { (void)ints; return sn_softmax(g, P(g, "x", SN_SHAPE(2, 5))); }
CASE(layernorm) {
    (void)ints;
    return sn_layernorm(g, P(g, "x", SN_SHAPE(2, 3, 4)), P(g, "w", SN_SHAPE(4)), P(g, "b", SN_SHAPE(4)), 1e-5f);
}
CASE(rmsnorm) {
    (void)ints;
    return sn_rmsnorm(g, P(g, "x", SN_SHAPE(3, 5)), P(g, "w", SN_SHAPE(5)), 1e-5f);
}
CASE(causal_mask) {
    (void)ints; /* finite fill: the masked entries feed softmax, as in attention */
    return sn_softmax(g, sn_causal_mask(g, P(g, "x", SN_SHAPE(2, 3, 4))));
}
CASE(cross_entropy) {
    ints[1] = sn_input(g, "targets", SN_I32, SN_SHAPE(2, 3)); /* one target is -1: ignored */
    return sn_cross_entropy(g, P(g, "x", SN_SHAPE(2, 3, 5)), ints[1], -1);
}
CASE(matmul) { (void)ints; return sn_matmul(g, P(g, "a", SN_SHAPE(3, 4)), P(g, "b", SN_SHAPE(4, 2))); }
CASE(matmul_ta) {
    (void)ints;
    return sn_matmul_t(g, P(g, "a", SN_SHAPE(4, 3)), P(g, "b", SN_SHAPE(4, 2)), true, false);
}
CASE(matmul_tb_batched) {
    (void)ints;
    return sn_matmul_t(g, P(g, "a", SN_SHAPE(2, 3, 4)), P(g, "b", SN_SHAPE(2, 5, 4)), false, true);
}
CASE(matmul_ta_tb_batched) {
    (void)ints;
    return sn_matmul_t(g, P(g, "a", SN_SHAPE(2, 4, 3)), P(g, "b", SN_SHAPE(2, 5, 4)), true, true);
}
CASE(matmul_shared_weight) {
    (void)ints;
    return sn_matmul(g, P(g, "a", SN_SHAPE(2, 3, 4)), P(g, "w", SN_SHAPE(4, 5)));
}
CASE(matmul_shared_weight_tb) {
    (void)ints;
    return sn_matmul_t(g, P(g, "a", SN_SHAPE(2, 3, 4)), P(g, "w", SN_SHAPE(5, 4)), false, true);
}
CASE(matmul_shared_weight_ta) {
    (void)ints;
    return sn_matmul_t(g, P(g, "a", SN_SHAPE(2, 4, 3)), P(g, "w", SN_SHAPE(4, 5)), true, false);
}
CASE(matmul_shared_left) {
    (void)ints;
    return sn_matmul(g, P(g, "w", SN_SHAPE(3, 4)), P(g, "b", SN_SHAPE(2, 4, 5)));
}
CASE(reshape) { (void)ints; return sn_mul(g, sn_reshape(g, X23, SN_SHAPE(3, 2)), P(g, "b", SN_SHAPE(3, 2))); }
CASE(permute) { (void)ints; return sn_permute(g, P(g, "x", SN_SHAPE(2, 3, 4, 2)), (const int[]){0, 2, 3, 1}); }
CASE(transpose) { (void)ints; return sn_transpose(g, X23, 0, 1); }
CASE(broadcast) { (void)ints; return sn_broadcast(g, P(g, "x", SN_SHAPE(3, 1)), SN_SHAPE(2, 3, 4)); }
CASE(slice) { (void)ints; return sn_slice(g, P(g, "x", SN_SHAPE(2, 6)), 1, 1, 4); }
CASE(pad) { (void)ints; return sn_pad(g, X23, 0, 1, 4); }
CASE(concat) {
    (void)ints;
    sn_node *xs[3] = {X23, P(g, "y", SN_SHAPE(2, 1)), P(g, "z", SN_SHAPE(2, 2))};
    return sn_concat(g, 3, xs, 1);
}
CASE(split) {
    (void)ints;
    sn_node *part[3];
    sn_split(g, P(g, "x", SN_SHAPE(2, 6)), 1, 3, part);
    return sn_mul(g, part[0], part[2]);
}
CASE(embedding) {
    ints[0] = sn_input(g, "ids", SN_I32, SN_SHAPE(2, 4)); /* repeated ids accumulate */
    return sn_embedding(g, P(g, "table", SN_SHAPE(5, 3)), ints[0]);
}
CASE(tied_embedding) {
    ints[0] = sn_input(g, "ids", SN_I32, SN_SHAPE(2, 3));
    sn_node *wte = P(g, "wte", SN_SHAPE(5, 4));
    sn_node *x = sn_embedding(g, wte, ints[0]);
    return sn_matmul_t(g, x, wte, false, true);
}

/* Fused attention, through lse = attention_lse(q, k) as the attention pass builds it. */
CASE(attention) {
    (void)ints;
    sn_node *q = P(g, "q", SN_SHAPE(1, 2, 3, 4)), *k = P(g, "k", SN_SHAPE(1, 2, 3, 4));
    return sn_causal_attention(g, q, k, P(g, "v", SN_SHAPE(1, 2, 3, 5)), 0.7f);
}
CASE(attention_more_keys) { /* S > T: query i sees keys j <= i + S - T */
    (void)ints;
    sn_node *q = P(g, "q", SN_SHAPE(2, 2, 3)), *k = P(g, "k", SN_SHAPE(2, 4, 3));
    return sn_causal_attention(g, q, k, P(g, "v", SN_SHAPE(2, 4, 2)), -1.3f);
}
CASE(attention_lse) {
    (void)ints;
    return sn_attention_lse(g, P(g, "q", SN_SHAPE(2, 3, 4)), P(g, "k", SN_SHAPE(2, 5, 4)), 0.5f);
}
CASE(attention_lse_read_twice) { /* lse read by attention and by a mul: both adjoints count */
    (void)ints;
    sn_node *q = P(g, "q", SN_SHAPE(2, 3, 2)), *k = P(g, "k", SN_SHAPE(2, 3, 2));
    sn_node *lse = sn_attention_lse(g, q, k, 0.9f);
    sn_node *o = sn_attention(g, q, k, P(g, "v", SN_SHAPE(2, 3, 2)), lse, 0.9f);
    return sn_mul(g, o, sn_reshape(g, lse, SN_SHAPE(2, 3, 1)));
}

/* Grouped-query attention: k and v with Hkv heads for q's H, G = H / Hkv query heads per kv
 * head (G = 1 is `attention`); two batches, so the kv slice of query slice bq is bq / G across
 * the batch too. dk and dv sum the group's heads. */
static sn_node *gqa(sn_graph *g, int H, int Hkv, int T, int S) {
    sn_node *q = P(g, "q", SN_SHAPE(2, H, T, 3)), *k = P(g, "k", SN_SHAPE(2, Hkv, S, 3));
    return sn_causal_attention(g, q, k, P(g, "v", SN_SHAPE(2, Hkv, S, 2)), 0.8f);
}
CASE(dropout) { /* a fixed mask: piecewise linear, its gradient the same mask */
    (void)ints;
    sn_node *seed = sn_const(g, SN_F32, SN_SCALAR, (float[]){12345});
    return sn_gelu(g, sn_dropout(g, P(g, "x", SN_SHAPE(4, 8)), seed, 0.3f, 2));
}
CASE(attention_gqa2) {
    (void)ints;
    return gqa(g, 4, 2, 3, 3);
}
CASE(attention_gqa4) { /* and S > T */
    (void)ints;
    return gqa(g, 4, 1, 2, 3);
}
CASE(attention_lse_gqa) { /* lse read by attention and by a mul: its rule with grouped k */
    (void)ints;
    sn_node *q = P(g, "q", SN_SHAPE(3, 2, 2)), *k = P(g, "k", SN_SHAPE(1, 2, 2));
    sn_node *lse = sn_attention_lse(g, q, k, 0.9f);
    sn_node *o = sn_attention(g, q, k, P(g, "v", SN_SHAPE(1, 2, 3)), lse, 0.9f);
    return sn_mul(g, o, sn_reshape(g, lse, SN_SHAPE(3, 2, 1)));
}

static const struct {
    const char *name;
    build_fn build;
    sn_op covers; /* the op whose rule the case exercises first */
} cases[] = {
#define C(name, op) {#name, build_##name, SN_OP_##op}
    C(add, ADD), C(add_bcast_col, ADD), C(sub, SUB), C(mul, MUL), C(div, DIV), C(tied, ADD),
    C(neg, NEG), C(scale, SCALE), C(exp, EXP), C(log, LOG), C(tanh, TANH), C(sqrt, SQRT),
    C(rsqrt, RSQRT), C(gelu, GELU), C(silu, SILU), C(cast, CAST), C(sum, SUM), C(sum_keep, SUM),
    C(mean, MEAN), C(max, MAX), C(softmax, SOFTMAX), C(layernorm, LAYERNORM), C(rmsnorm, RMSNORM),
    C(causal_mask, CAUSAL_MASK), C(cross_entropy, CROSS_ENTROPY), C(matmul, MATMUL),
    C(matmul_ta, MATMUL), C(matmul_tb_batched, MATMUL), C(matmul_ta_tb_batched, MATMUL),
    C(matmul_shared_weight, MATMUL), C(matmul_shared_weight_tb, MATMUL),
    C(matmul_shared_weight_ta, MATMUL), C(matmul_shared_left, MATMUL), C(reshape, RESHAPE),
    C(permute, PERMUTE), C(transpose, PERMUTE), C(broadcast, BROADCAST), C(slice, SLICE),
    C(pad, PAD), C(concat, CONCAT), C(split, SLICE), C(embedding, EMBEDDING),
    C(tied_embedding, EMBEDDING), C(attention, ATTENTION), C(attention_more_keys, ATTENTION),
    C(attention_lse, ATTENTION_LSE), C(attention_lse_read_twice, ATTENTION_LSE),
    C(attention_gqa2, ATTENTION), C(attention_gqa4, ATTENTION), C(attention_lse_gqa, ATTENTION_LSE),
    C(dropout, DROPOUT),
#undef C
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(op_gradient) {
    /* bf16 round trips make the cast case's forward a step function: the exact interpreter
     * keeps it smooth, which is what the rule (identity through the cast) assumes. */
    gradcheck(cases[_i].name, cases[_i].build, 1e-6);
}
END_TEST

/* Every op with a gradient rule is exercised by at least one case. */
START_TEST(every_differentiable_op_covered) {
    for (int op = 0; op < SN_OP_COUNT; op++) {
        if (!sn_op_has_grad((sn_op)op) || sn_op_kind((sn_op)op) == SN_K_LEAF) continue;
        bool found = false;
        for (int i = 0; i < N_CASES; i++) found |= (int)cases[i].covers == op;
        ck_assert_msg(found, "op %s has a gradient rule but no gradient check", sn_op_name((sn_op)op));
    }
}
END_TEST

START_TEST(loss_must_be_scalar) {
    sn_graph *g = sn_graph_new();
    sn_node *x = P(g, "x", SN_SHAPE(2, 3));
    sn_err e;
    ck_assert_int_eq(sn_backward(g, sn_exp(g, x), &e), SN_ERR_SHAPE);
    ck_assert_msg(strstr(e.msg, "must be a float scalar") && strstr(e.msg, "f32[2,3]"), "%s", e.msg);
    sn_graph_free(g);
}
END_TEST

START_TEST(double_backward_unsupported) {
    sn_graph *g = sn_graph_new();
    sn_node *x = P(g, "x", SN_SHAPE(3));
    sn_node *d = sn_gelu_bwd(g, x, x);
    sn_err e;
    ck_assert_int_eq(sn_backward(g, sn_sum(g, d, 0, false), &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "gelu_bwd") && strstr(e.msg, "not supported yet"), "%s", e.msg);
    sn_graph_free(g);
}
END_TEST

START_TEST(unused_param_gets_zero_grad) {
    sn_graph *g = sn_graph_new();
    sn_node *x = P(g, "x", SN_SHAPE(3)), *unused = P(g, "u", SN_SHAPE(2, 2));
    sn_err e;
    ck_assert_int_eq(sn_backward(g, sn_sum(g, x, 0, false), &e), SN_OK);
    ck_assert_ptr_nonnull(unused->grad);
    ck_assert_int_eq(unused->grad->op, SN_OP_FULL);
    ck_assert_int_eq(unused->grad->rank, 2);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("grad");
    TCase *tc = tcase_create("finite differences");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, op_gradient, 0, N_CASES);
    tcase_add_test(tc, every_differentiable_op_covered);
    tcase_add_test(tc, loss_must_be_scalar);
    tcase_add_test(tc, double_backward_unsupported);
    tcase_add_test(tc, unused_param_gets_zero_grad);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
