/* test_passes.c: the forward rewrites (attention, pad_vocab) and the pipeline that runs them:
 * the fused attention ops against the written-out pattern, GPT-2 with no (T, T) matrix left,
 * the tiny GPT-2's loss, logits and gradients unchanged by each pass, grouped-query k and v
 * read unrepeated (and a repeat of another head mapping kept), and text in, text out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/rewrite.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "train/train.h"
#include "harness.h"

static void fill(sn_interp *it, const sn_node *n, sn_rng *r) {
    int64_t m = sn_numel(n);
    double *v = malloc(sizeof(double) * (size_t)m);
    for (int64_t i = 0; i < m; i++) v[i] = sn_rng_normal(r);
    sn_err e;
    ck_assert_msg(sn_interp_set_f64(it, n, v, &e) == SN_OK, "%s", e.msg);
    free(v);
}

static void close_nodes(const char *what, sn_interp *it, const sn_node *got, const sn_node *want,
                        double tol) {
    ck_assert_int_eq(sn_numel(got), sn_numel(want));
    sn_check_close(what, sn_interp_value(it, got), sn_interp_value(it, want),
                   (size_t)sn_numel(got), tol, 1e-12);
}

/* ---- the fused ops against softmax(causal_mask(f q k^T)) v and its autodiff ---- */

START_TEST(attention_ops_match_written_out) {
    static const int64_t sizes[][2] = {{5, 5}, {3, 6}}; /* T, S */
    int64_t T = sizes[_i][0], S = sizes[_i][1];
    const float f = 0.45f;
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_param(g, "q", SN_F32, SN_SHAPE(2, 2, T, 4), SN_INIT_NORMAL, 1);
    sn_node *k = sn_param(g, "k", SN_F32, SN_SHAPE(2, 2, S, 4), SN_INIT_NORMAL, 1);
    sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(2, 2, S, 3), SN_INIT_NORMAL, 1);
    sn_node *dout = sn_param(g, "dout", SN_F32, SN_SHAPE(2, 2, T, 3), SN_INIT_NORMAL, 1);
    sn_node *s = sn_causal_mask(g, sn_scale(g, sn_matmul_t(g, q, k, false, true), f));
    sn_node *y = sn_matmul(g, sn_softmax(g, s), v); /* written out */
    sn_node *m = sn_max(g, s, -1, true);            /* lse = m + log sum exp(s - m) */
    sn_node *lse_ref = sn_add(g, sn_log(g, sn_sum(g, sn_exp(g, sn_sub(g, s, m)), -1, false)),
                              sn_reshape(g, m, SN_SHAPE(2, 2, T)));
    sn_node *lse = sn_attention_lse(g, q, k, f), *o = sn_attention(g, q, k, v, lse, f);
    sn_node *dq = sn_attention_bwd_q(g, q, k, v, o, dout, lse, f);
    sn_node *dk = sn_attention_bwd_k(g, q, k, v, o, dout, lse, f);
    sn_node *dv = sn_attention_bwd_v(g, q, k, v, o, dout, lse, f);
    /* d sum(y * dout) / d q, k, v: the written-out backward */
    sn_node *loss = sn_sum(g, sn_reshape(g, sn_mul(g, y, dout), SN_SHAPE(-1)), 0, false);
    sn_err e;
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    sn_interp *it = sn_interp_new(g, true);
    sn_interp_keep_all(it, true);
    sn_rng r = sn_rng_seed(42);
    sn_node *leaves[] = {q, k, v, dout};
    for (int i = 0; i < 4; i++) fill(it, leaves[i], &r);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    close_nodes("attention_lse", it, lse, lse_ref, 1e-12);
    close_nodes("attention", it, o, y, 1e-12);
    close_nodes("attention_bwd_q", it, dq, q->grad, 1e-12);
    close_nodes("attention_bwd_k", it, dk, k->grad, 1e-12);
    close_nodes("attention_bwd_v", it, dv, v->grad, 1e-12);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- GPT-2 124M: every block fused, no (T, T) matrix forward or backward ---- */

static sn_graph *gpt2_graph(const char *name, int vocab, int B, int T, const sn_pipeline_opts *o,
                            sn_pipeline_stats *st) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(name, &c));
    if (vocab) c.vocab = vocab;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_compile(g, o, NULL, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* Nodes holding a (T, T) matrix: trailing dimensions (T, T). When the head size D equals T,
 * the per-head tensors (B, H, T, D) look the same: the permutes to and from heads and the
 * attention ops' results are those, and are not counted. */
static int tt_nodes(const sn_graph *g, int64_t T, int64_t D) {
    int count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->rank < 2 || n->shape[n->rank - 2] != T || n->shape[n->rank - 1] != T) continue;
        if (D == T && (n->op == SN_OP_PERMUTE || sn_op_kind(n->op) == SN_K_ATTENTION)) continue;
        count++;
    }
    return count;
}

START_TEST(gpt2_has_no_tt_matrix) {
    const int T = _i ? 1024 : 64, D = 64;
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_pipeline_stats st;
    sn_graph *g = gpt2_graph("gpt2", 0, 1, T, &o, &st);
    ck_assert_int_eq(st.attention_fused, 12);
    ck_assert_int_eq(st.vocab_padded, 1);
    int lse = 0, att = 0, bwd = 0, softmax = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        sn_op op = g->nodes[i]->op;
        lse += op == SN_OP_ATTENTION_LSE;
        att += op == SN_OP_ATTENTION;
        bwd += op == SN_OP_ATTENTION_BWD_Q || op == SN_OP_ATTENTION_BWD_K || op == SN_OP_ATTENTION_BWD_V;
        softmax += op == SN_OP_SOFTMAX || op == SN_OP_SOFTMAX_BWD || op == SN_OP_CAUSAL_MASK;
    }
    ck_assert_int_eq(lse, 12);
    ck_assert_int_eq(att, 12);
    ck_assert_int_eq(bwd, 36);
    ck_assert_int_eq(softmax, 0);
    ck_assert_int_eq(tt_nodes(g, T, D), 0);
    sn_graph_free(g);

    o.fuse_attention = false; /* the count sees the written-out attention */
    g = gpt2_graph("gpt2", 0, 1, T, &o, &st);
    ck_assert_int_eq(st.attention_fused, 0);
    ck_assert_int_ge(tt_nodes(g, T, D), 12 * 6);
    sn_graph_free(g);
}
END_TEST

/* ---- the tiny GPT-2 computes the same with and without each pass ---- */

static const struct {
    const char *name;
    int vocab;
    bool fuse;
    int64_t pad;
} variants[] = {
    {"attention", 256, true, 0},
    {"pad 256 to 288", 256, false, 96},
    {"pad 250 to 256 (pow2)", 250, false, SN_PAD_VOCAB_POW2},
    {"attention + pad 250 to 320", 250, true, 80},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

static void set_params(sn_interp *it, const sn_graph *g) {
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    sn_err e;
    for (int i = 0; i < np; i++) {
        float *v = malloc(sizeof(float) * (size_t)sn_numel(params[i]));
        sn_param_init(params[i], v, 5);
        ck_assert_msg(sn_interp_set(it, params[i], v, &e) == SN_OK, "%s", e.msg);
        free(v);
    }
}

static void set_tokens(sn_interp *it, const sn_graph *g, int vocab) {
    sn_err e;
    for (int k = 0; k < 2; k++) {
        const sn_node *n = NULL;
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, k ? "targets" : "idx"))
                n = g->nodes[i];
        ck_assert_ptr_nonnull(n);
        int32_t ids[64];
        sn_rng r = sn_rng_seed(17 + (uint64_t)k);
        for (int64_t i = 0; i < sn_numel(n); i++) ids[i] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
        if (k) ids[3] = -1; /* an ignored target */
        ck_assert_msg(sn_interp_set_i32(it, n, ids, &e) == SN_OK, "%s", e.msg);
    }
}

/* Compares the first n values of rows of width w_got against rows of width n. */
static void close_rows(const char *what, const double *got, int64_t w_got, const double *want,
                       int64_t n, int64_t rows, double tol) {
    double *packed = malloc(sizeof(double) * (size_t)(n * rows));
    for (int64_t r = 0; r < rows; r++) memcpy(packed + r * n, got + r * w_got, sizeof(double) * (size_t)n);
    sn_check_close(what, packed, want, (size_t)(n * rows), tol, 1e-6);
    free(packed);
}

START_TEST(tiny_gpt2_unchanged_by_passes) {
    int v = _i / 2;
    bool exact = _i % 2 == 0;
    double tol = exact ? 1e-9 : 1e-5;
    const int B = 2, T = 16, V = variants[v].vocab;
    sn_pipeline_opts plain = {.backward = true}, with = plain;
    with.fuse_attention = variants[v].fuse;
    with.pad_vocab = variants[v].pad;
    sn_pipeline_stats st;
    sn_graph *g0 = gpt2_graph("tiny", V, B, T, &plain, NULL), *g1 = gpt2_graph("tiny", V, B, T, &with, &st);
    ck_assert_int_eq(st.attention_fused, variants[v].fuse ? 2 : 0);
    ck_assert_int_eq(st.vocab_padded, variants[v].pad ? 1 : 0);
    sn_interp *i0 = sn_interp_new(g0, exact), *i1 = sn_interp_new(g1, exact);
    set_params(i0, g0);
    set_params(i1, g1);
    set_tokens(i0, g0, V);
    set_tokens(i1, g1, V);
    sn_err e;
    ck_assert_msg(sn_interp_run(i0, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(i1, &e) == SN_OK, "%s", e.msg);
    char what[160];
    snprintf(what, sizeof what, "%s (%s): loss", variants[v].name, exact ? "exact" : "f32");
    sn_check_close(what, sn_interp_value(i1, g1->loss), sn_interp_value(i0, g0->loss), 1, tol, 1e-6);

    const sn_node *lg0 = g0->outputs[0], *lg1 = g1->outputs[0]; /* logits: (B, T, V or Vp) */
    int64_t Vp = lg1->shape[2];
    ck_assert_int_eq(Vp, variants[v].pad ? sn_pad_vocab_size(V, variants[v].pad) : V);
    snprintf(what, sizeof what, "%s: logits of the real classes", variants[v].name);
    close_rows(what, sn_interp_value(i1, lg1), Vp, sn_interp_value(i0, lg0), V, B * T, tol);

    sn_node *p0[64], *p1[64];
    int np = sn_graph_params(g0, p0, 64);
    ck_assert_int_eq(sn_graph_params(g1, p1, 64), np);
    for (int p = 0; p < np; p++) {
        ck_assert_str_eq(p0[p]->name, p1[p]->name);
        int64_t n0 = sn_numel(p0[p]), n1 = sn_numel(p1[p]), C = p0[p]->shape[p0[p]->rank - 1];
        const double *g = sn_interp_value(i1, p1[p]->grad);
        snprintf(what, sizeof what, "%s: d loss / d %s", variants[v].name, p0[p]->name);
        sn_check_close(what, g, sn_interp_value(i0, p0[p]->grad), (size_t)n0, tol, 1e-6);
        if (n1 == n0) continue;
        ck_assert_str_eq(p1[p]->name, "wte");
        ck_assert_int_eq(n1, Vp * C);
        float *w0 = malloc(sizeof(float) * (size_t)n0), *w1 = malloc(sizeof(float) * (size_t)n1);
        sn_param_init(p0[p], w0, 5); /* the padded table starts as the unpadded one */
        sn_param_init(p1[p], w1, 5);
        ck_assert(!memcmp(w0, w1, sizeof(float) * (size_t)n0));
        for (int64_t i = n0; i < n1; i++) /* padded rows: no gradient */
            ck_assert_msg(g[i] == 0, "%s: padded row %lld has gradient %g", what, (long long)(i / C), g[i]);
        free(w0);
        free(w1);
    }
    sn_interp_free(i0);
    sn_interp_free(i1);
    sn_graph_free(g0);
    sn_graph_free(g1);
}
END_TEST

/* ---- grouped-query attention: k and v repeated for groups of query heads ---- */

/* kv (B, Hkv, S, D) repeated for G query heads each as llama_repeat_kv writes it (head h reads
 * kv head h / G), or with `modulo` the other mapping (head h reads kv head h % Hkv). */
static sn_node *repeat_kv(sn_graph *g, sn_node *kv, int G, bool modulo) {
    int64_t B = kv->shape[0], H = kv->shape[1], S = kv->shape[2], D = kv->shape[3];
    sn_node *r = sn_reshape(g, kv, modulo ? SN_SHAPE(B, 1, H, S * D) : SN_SHAPE(B, H, 1, S * D));
    r = sn_broadcast(g, r, modulo ? SN_SHAPE(B, G, H, S * D) : SN_SHAPE(B, H, G, S * D));
    return sn_reshape(g, r, SN_SHAPE(B, H * G, S, D));
}

/* Causal attention written out over repeated k and v (2 kv heads, G query heads each, two
 * batches), loss sum(y * w), through the pipeline's graph passes with options o. */
static sn_graph *gqa_graph(int G, bool modulo, const sn_pipeline_opts *o, sn_pipeline_stats *st) {
    enum { B = 2, HKV = 2, T = 5, D = 4, DV = 3 };
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_param(g, "q", SN_F32, SN_SHAPE(B, HKV * G, T, D), SN_INIT_NORMAL, 1);
    sn_node *k = sn_param(g, "k", SN_F32, SN_SHAPE(B, HKV, T, D), SN_INIT_NORMAL, 1);
    sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(B, HKV, T, DV), SN_INIT_NORMAL, 1);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(B, HKV * G, T, DV), SN_INIT_NORMAL, 1);
    sn_node *kr = repeat_kv(g, k, G, modulo), *vr = repeat_kv(g, v, G, modulo);
    sn_node *s = sn_causal_mask(g, sn_scale(g, sn_matmul_t(g, q, kr, false, true), 0.6f));
    sn_node *y = sn_matmul(g, sn_softmax(g, s), vr);
    g->loss = sn_sum(g, sn_reshape(g, sn_mul(g, y, w), SN_SHAPE(-1)), 0, false);
    sn_graph_add_output(g, g->loss);
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_compile(g, o, NULL, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* How many broadcasts the forward part has (the backward broadcasts the loss's gradient). */
static int forward_broadcasts(const sn_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_forward; i++) n += g->nodes[i]->op == SN_OP_BROADCAST;
    return n;
}

/* The loss and every parameter's gradient of g1 against g0's (same parameters by name), on
 * the exact interpreter. */
static void same_loss_and_grads(const char *what, sn_graph *g1, sn_graph *g0) {
    sn_interp *i0 = sn_interp_new(g0, true), *i1 = sn_interp_new(g1, true);
    set_params(i0, g0);
    set_params(i1, g1);
    sn_err e;
    ck_assert_msg(sn_interp_run(i0, &e) == SN_OK && sn_interp_run(i1, &e) == SN_OK, "%s", e.msg);
    char label[160];
    snprintf(label, sizeof label, "%s: loss", what);
    sn_check_close(label, sn_interp_value(i1, g1->loss), sn_interp_value(i0, g0->loss), 1, 1e-9, 1e-12);
    sn_node *p0[8], *p1[8];
    int np = sn_graph_params(g0, p0, 8);
    ck_assert_int_eq(sn_graph_params(g1, p1, 8), np);
    for (int p = 0; p < np; p++) {
        ck_assert_str_eq(p0[p]->name, p1[p]->name);
        snprintf(label, sizeof label, "%s: d loss / d %s", what, p0[p]->name);
        sn_check_close(label, sn_interp_value(i1, p1[p]->grad), sn_interp_value(i0, p0[p]->grad),
                       (size_t)sn_numel(p0[p]), 1e-9, 1e-12);
    }
    sn_interp_free(i0);
    sn_interp_free(i1);
}

/* llama_repeat_kv's repeat (G = 1, 2, 4) is folded: the fused ops read k and v themselves, no
 * broadcast is left (nor its sum in the backward), and the loss and gradients are those of the
 * repeats kept and of the attention written out. */
START_TEST(gqa_repeats_folded) {
    static const int groups[] = {1, 2, 4};
    int G = groups[_i];
    sn_pipeline_opts plain = {.backward = true}, fold = plain, keep;
    fold.fuse_attention = true;
    keep = fold;
    keep.keep_kv_repeats = true;
    sn_pipeline_stats st;
    sn_graph *g1 = gqa_graph(G, false, &fold, &st);
    ck_assert_int_eq(st.attention_fused, 1);
    ck_assert_int_eq(st.kv_unrepeated, 1);
    ck_assert_int_eq(forward_broadcasts(g1), 0);
    for (int i = 0; i < g1->n_nodes; i++) { /* attention reads the parameters k and v */
        const sn_node *n = g1->nodes[i];
        if (n->op != SN_OP_ATTENTION) continue;
        ck_assert_int_eq(n->in[1]->op, SN_OP_PARAM);
        ck_assert_int_eq(n->in[2]->op, SN_OP_PARAM);
    }
    sn_graph *g0 = gqa_graph(G, false, &keep, &st);
    ck_assert_int_eq(st.attention_fused, 1);
    ck_assert_int_eq(st.kv_unrepeated, 0);
    ck_assert_int_eq(forward_broadcasts(g0), 2);
    sn_graph *gp = gqa_graph(G, false, &plain, &st);
    char what[64];
    snprintf(what, sizeof what, "G = %d, folded vs kept", G);
    same_loss_and_grads(what, g1, g0);
    snprintf(what, sizeof what, "G = %d, folded vs written out", G);
    same_loss_and_grads(what, g1, gp);
    sn_graph_free(g0);
    sn_graph_free(g1);
    sn_graph_free(gp);
}
END_TEST

/* A repeat that maps query head h to kv head h % Hkv (broadcast before the kv heads) is not
 * llama_repeat_kv's: it stays, the attention is fused over the copies, and the result is the
 * written-out one's. */
START_TEST(gqa_other_head_mapping_kept) {
    sn_pipeline_opts plain = {.backward = true}, fold = plain;
    fold.fuse_attention = true;
    sn_pipeline_stats st;
    sn_graph *g1 = gqa_graph(2, true, &fold, &st);
    ck_assert_int_eq(st.attention_fused, 1);
    ck_assert_int_eq(st.kv_unrepeated, 0);
    ck_assert_int_eq(forward_broadcasts(g1), 2);
    sn_graph *gp = gqa_graph(2, true, &plain, &st);
    same_loss_and_grads("h % Hkv mapping", g1, gp);
    sn_graph_free(g1);
    sn_graph_free(gp);
}
END_TEST

/* ---- nothing to do: the graph is copied unchanged ---- */

static char *rewrite(const sn_graph *g, bool attention, int64_t pad, int expect_n) {
    sn_graph *out;
    sn_err e;
    int n;
    sn_status s = attention ? sn_pass_attention(g, true, &out, &n, NULL, &e) : sn_pass_pad_vocab(g, pad, &out, &n, &e);
    ck_assert_msg(s == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, expect_n);
    ck_assert_msg(sn_verify(out, &e) == SN_OK, "%s", e.msg);
    char *text = sn_graph_to_string(out);
    sn_graph_free(out);
    return text;
}

START_TEST(no_pattern_no_change) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 4, 4));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(4, 4), SN_INIT_NORMAL, 0.1f);
    sn_node *p = sn_softmax(g, sn_causal_mask(g, sn_matmul_t(g, x, x, false, true)));
    sn_node *y = sn_matmul(g, p, sn_matmul(g, x, w)); /* attention, but p is also an output */
    sn_graph_add_output(g, p);
    sn_node *one = sn_full(g, SN_F32, SN_SHAPE(4), 1), *zero = sn_full(g, SN_F32, SN_SHAPE(4), 0);
    sn_graph_add_output(g, sn_layernorm(g, y, one, zero, 1e-5f));
    char *before = sn_graph_to_string(g);
    char *a = rewrite(g, true, 0, 0), *b = rewrite(g, false, 64, 0);
    ck_assert_str_eq(a, before);
    ck_assert_str_eq(b, before);
    free(a);
    free(b);
    free(before);
    sn_graph_free(g);

    sn_gpt2 m; /* tiny's vocabulary 256 is already a multiple of 64 and a power of two */
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    g = sn_graph_new();
    ck_assert(sn_gpt2_build(g, &c, 2, 8, &m, NULL) == SN_OK);
    before = sn_graph_to_string(g);
    a = rewrite(g, false, 64, 0);
    b = rewrite(g, false, SN_PAD_VOCAB_POW2, 0);
    ck_assert_str_eq(a, before);
    ck_assert_str_eq(b, before);
    free(a);
    free(b);
    free(before);
    sn_graph_free(g);
}
END_TEST

/* The rewrite helper's identity copy of a training graph: outputs, loss, grads and the
 * forward/backward split carry over. */
START_TEST(rewrite_copies_a_training_graph) {
    sn_pipeline_opts o = {.backward = true};
    sn_graph *g = gpt2_graph("tiny", 0, 2, 8, &o, NULL), *out;
    sn_rewrite r;
    ck_assert(sn_rewrite_begin(&r, g, NULL) == SN_OK);
    for (int i = 0; i < g->n_nodes; i++) sn_rewrite_copy(&r, g->nodes[i]);
    sn_err e;
    ck_assert_msg(sn_rewrite_end(&r, "copy", &out, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_verify(out, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(out->n_forward, g->n_forward);
    char *a = sn_graph_to_string(g), *b = sn_graph_to_string(out);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    sn_graph_free(out);

    ck_assert(sn_rewrite_begin(&r, g, NULL) == SN_OK); /* a pass that forgets the loss is told so */
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i] != g->loss) sn_rewrite_copy(&r, g->nodes[i]);
    ck_assert_int_eq(sn_rewrite_end(&r, "forgetful", &out, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "pass forgetful dropped node") && strstr(e.msg, "an output"),
                  "%s", e.msg);
    ck_assert_ptr_null(out);
    sn_graph_free(g);
}
END_TEST

START_TEST(pad_vocab_sizes) {
    ck_assert_int_eq(sn_pad_vocab_size(50257, 64), 50304);
    ck_assert_int_eq(sn_pad_vocab_size(50257, 128), 50304);
    ck_assert_int_eq(sn_pad_vocab_size(50257, SN_PAD_VOCAB_POW2), 65536);
    ck_assert_int_eq(sn_pad_vocab_size(256, 96), 288);
    ck_assert_int_eq(sn_pad_vocab_size(256, SN_PAD_VOCAB_POW2), 256);
}
END_TEST

/* ---- text in, text out ---- */

static void text_case(const char *in, bool attention, int64_t pad, int expect_n, const char *want) {
    sn_graph *g;
    sn_err e;
    ck_assert_msg(sn_graph_parse(in, &g, &e) == SN_OK, "%s", e.msg);
    char *got = rewrite(g, attention, pad, expect_n);
    ck_assert_str_eq(got, want);
    free(got);
    sn_graph_free(g);
}

START_TEST(attention_text) {
    text_case("graph {\n"
              "  %0 = input \"q\" : f32[1,2,4,16]\n"
              "  %1 = input \"k\" : f32[1,2,4,16]\n"
              "  %2 = input \"v\" : f32[1,2,4,8]\n"
              "  %3 = matmul %0, %1 ta=0 tb=1 : f32[1,2,4,4]\n"
              "  %4 = scale %3 f=0.25 : f32[1,2,4,4]\n"
              "  %5 = causal_mask %4 f=-inf : f32[1,2,4,4]\n"
              "  %6 = softmax %5 : f32[1,2,4,4]\n"
              "  %7 = matmul %6, %2 ta=0 tb=0 : f32[1,2,4,8]\n"
              "  %8 = neg %7 : f32[1,2,4,8]\n"
              "  output %8\n"
              "}\n",
              true, 0, 1,
              "graph {\n"
              "  %0 = input \"q\" : f32[1,2,4,16]\n"
              "  %1 = input \"k\" : f32[1,2,4,16]\n"
              "  %2 = input \"v\" : f32[1,2,4,8]\n"
              "  %3 = attention_lse %0, %1 f=0.25 : f32[1,2,4]\n"
              "  %4 = attention %0, %1, %2, %3 f=0.25 : f32[1,2,4,8]\n"
              "  %5 = neg %4 : f32[1,2,4,8]\n"
              "  output %5\n"
              "}\n");
}
END_TEST

START_TEST(pad_vocab_text) {
    text_case("graph {\n"
              "  %0 = input \"idx\" : i32[2,3]\n"
              "  %1 = input \"targets\" : i32[2,3]\n"
              "  %2 = param \"wte\" init=normal f=0.02 : f32[10,8]\n"
              "  %3 = embedding %2, %0 : f32[2,3,8]\n"
              "  %4 = matmul %3, %2 ta=0 tb=1 : f32[2,3,10]\n"
              "  %5 = cross_entropy %4, %1 ignore_index=-1 : f32[]\n"
              "  output %4\n"
              "  output %5\n"
              "  loss %5\n"
              "}\n",
              false, 8, 1,
              "graph {\n"
              "  %0 = input \"idx\" : i32[2,3]\n"
              "  %1 = input \"targets\" : i32[2,3]\n"
              "  %2 = param \"wte\" init=normal f=0.02 : f32[16,8]\n"
              "  %3 = embedding %2, %0 : f32[2,3,8]\n"
              "  %4 = matmul %3, %2 ta=0 tb=1 : f32[2,3,16]\n"
              "  %5 = cross_entropy %4, %1 start=0 end=10 ignore_index=-1 : f32[]\n"
              "  output %4\n"
              "  output %5\n"
              "  loss %5\n"
              "}\n");
}
END_TEST

/* ---- preconditions and the pipeline's options ---- */

START_TEST(errors_say_what_to_do) {
    sn_pipeline_opts o = {.backward = true};
    sn_graph *g = gpt2_graph("tiny", 0, 1, 8, &o, NULL), *out;
    sn_err e;
    int n;
    ck_assert_int_eq(sn_pass_attention(g, true, &out, &n, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "run the pass before autodiff"), "%s", e.msg);
    ck_assert_int_eq(sn_pass_pad_vocab(g, 64, &out, &n, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "run the pass before autodiff"), "%s", e.msg);
    ck_assert_int_eq(sn_pass_pad_vocab(g, 0, &out, &n, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "do not run the pass"), "%s", e.msg);
    sn_graph_free(g);

    static const struct {
        const char *pass, *msg;
    } bad[] = {{"fuse_attention", "unknown pass 'fuse_attention' (passes: frontend, pad_vocab, attention"},
               {"attention", "drop --no-fuse-attention"},
               {"pad_vocab", "give --pad-vocab a multiple, not 0"}};
    for (int i = 0; i < 3; i++) {
        sn_gpt2_config c;
        sn_gpt2 m;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        g = sn_graph_new();
        ck_assert(sn_gpt2_build(g, &c, 1, 8, &m, NULL) == SN_OK);
        sn_pipeline_opts po = {.dump_after = bad[i].pass};
        ck_assert_int_eq(sn_compile(g, &po, NULL, NULL, &e), SN_ERR_INVALID);
        ck_assert_msg(strstr(e.msg, bad[i].msg), "%s", e.msg);
        sn_graph_free(g);
    }
}
END_TEST

START_TEST(dump_after_attention) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.dump_after = "attention";
    o.dump = f;
    sn_graph *g = gpt2_graph("tiny", 0, 1, 8, &o, NULL);
    fclose(f);
    ck_assert_msg(strstr(buf, "# after pass attention\ngraph {\n"), "%s", buf);
    ck_assert_msg(strstr(buf, " = attention_lse ") && !strstr(buf, "softmax"), "%s", buf);
    free(buf);
    sn_graph_free(g);
}
END_TEST

/* ---- sink_views: the rotary embedding's backward, one pointwise kernel ---- */

/* x (2, 3, 5, 8) rotated as models/llama.c does it, its heads permuted back to (2, 5, 24), the
 * sum of its bf16 cast times w: the graph with its backward. f: the op under the pad (the
 * planted case: exp, whose value at a padded position is not 0, must keep its pad). */
static sn_graph *rotary_graph(sn_op f, sn_node **x_out) {
    sn_graph *g = sn_graph_new();
    float c[40], sv[40];
    for (int i = 0; i < 40; i++) c[i] = 0.1f * (float)(i % 7) - 0.3f, sv[i] = 0.05f * (float)(i % 5) + 0.2f;
    sn_node *cs = sn_const(g, SN_F32, SN_SHAPE(5, 8), c), *sn = sn_const(g, SN_F32, SN_SHAPE(5, 8), sv);
    sn_node *x = sn_param(g, "x", SN_F32, SN_SHAPE(2, 3, 5, 8), SN_INIT_NORMAL, 1);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(2, 5, 24), SN_INIT_NORMAL, 1);
    sn_node *xs = f == SN_OP_EXP ? sn_exp(g, x) : x;
    sn_node *halves[2] = {sn_slice(g, xs, -1, 4, 8), sn_slice(g, xs, -1, 0, 4)};
    sn_node *y = sn_add(g, sn_mul(g, xs, cs), sn_mul(g, sn_concat(g, 2, halves, -1), sn));
    y = sn_reshape(g, sn_permute(g, y, (const int[]){0, 2, 1, 3}), SN_SHAPE(2, 5, 24));
    if (f == SN_OP_EXP) y = sn_add(g, y, sn_pad(g, sn_exp(g, sn_slice(g, w, -1, 0, 12)), -1, 12, 24));
    sn_node *loss = sn_sum(g, sn_reshape(g, sn_mul(g, sn_cast(g, sn_cast(g, y, SN_BF16), SN_F32), w),
                                         SN_SHAPE(-1)), 0, false);
    sn_graph_set_loss(g, loss);
    sn_err e;
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    *x_out = x;
    return g;
}

/* The parameter of g named name (the test fails without one). */
static const sn_node *param_named(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    ck_abort_msg("no parameter %s", name);
    return NULL;
}

START_TEST(sink_views_rotary_backward) {
    sn_node *x;
    sn_graph *g0 = rotary_graph(SN_OP_COUNT, &x), *g1;
    int sunk;
    sn_err e;
    ck_assert_msg(sn_pass_sink_views(g0, &g1, &sunk, &e) == SN_OK, "%s", e.msg);
    ck_assert_ptr_nonnull(g1);
    ck_assert_int_gt(sunk, 4);
    /* the same gradient, bit for bit: the same ops on the same values in the same order */
    const sn_node *x1 = param_named(g1, "x");
    sn_interp *i0 = sn_interp_new(g0, false), *i1 = sn_interp_new(g1, false);
    sn_rng r0 = sn_rng_seed(7), r1 = sn_rng_seed(7);
    for (int i = 0, k = 0; i < g0->n_nodes; i++) /* the params in the same order in both */
        if (g0->nodes[i]->op == SN_OP_PARAM) {
            const sn_node *p1 = NULL;
            for (int j = 0, m = 0; j < g1->n_nodes; j++)
                if (g1->nodes[j]->op == SN_OP_PARAM && m++ == k) p1 = g1->nodes[j];
            fill(i0, g0->nodes[i], &r0);
            fill(i1, p1, &r1);
            k++;
        }
    ck_assert_msg(sn_interp_run(i0, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(i1, &e) == SN_OK, "%s", e.msg);
    const double *d0 = sn_interp_value(i0, x->grad), *d1 = sn_interp_value(i1, x1->grad);
    for (int64_t i = 0; i < sn_numel(x); i++)
        ck_assert_msg(d0[i] == d1[i], "dx[%lld]: %.17g sunk, %.17g before", (long long)i, d1[i], d0[i]);
    sn_interp_free(i0);
    sn_interp_free(i1);
    sn_graph_free(g1);
    /* compiled: x's gradient in one pointwise kernel, no copy of a view (the fuse pass's
       kernels: join_siblings, which would join others to it, kept off) */
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.keep_siblings = true;
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g0, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    x = (sn_node *)param_named(g0, "x"); /* the passes gave g0 new nodes */
    const sn_kernel *dx = NULL;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        ck_assert_msg(!strstr(ker->name, "permute") && !strstr(ker->name, "pad") &&
                      !strstr(ker->name, "slice"), "%s copies a view", ker->name);
        for (int o = 0; o < ker->n_out; o++)
            if (ker->args[o] == x->grad) dx = ker;
    }
    /* the rotation transposed from dy and the two tables alone, every view an access */
    ck_assert_ptr_nonnull(dx);
    ck_assert_msg(dx->kind == SN_KER_POINTWISE && dx->n_in <= 3 && dx->n_instr >= 5,
                  "%s: %d inputs, %d instructions", dx->name, dx->n_in, dx->n_instr);
    sn_program_free(p);
    sn_graph_free(g0);
    /* a pad never moves onto exp (exp(0) = 1): the planted case keeps that pad */
    sn_graph *g2 = rotary_graph(SN_OP_EXP, &x), *g3;
    ck_assert_msg(sn_pass_sink_views(g2, &g3, &sunk, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; g3 && i < g3->n_nodes; i++) {
        const sn_node *n = g3->nodes[i];
        ck_assert_msg(!(n->op == SN_OP_EXP && n->in[0]->op == SN_OP_PAD), "a pad moved onto exp");
    }
    if (g3) sn_graph_free(g3);
    sn_graph_free(g2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("passes");
    TCase *tc = tcase_create("passes");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, attention_ops_match_written_out, 0, 2);
    tcase_add_loop_test(tc, gpt2_has_no_tt_matrix, 0, 2);
    tcase_add_loop_test(tc, tiny_gpt2_unchanged_by_passes, 0, 2 * N_VARIANTS);
    tcase_add_loop_test(tc, gqa_repeats_folded, 0, 3);
    tcase_add_test(tc, gqa_other_head_mapping_kept);
    tcase_add_test(tc, no_pattern_no_change);
    tcase_add_test(tc, rewrite_copies_a_training_graph);
    tcase_add_test(tc, pad_vocab_sizes);
    tcase_add_test(tc, attention_text);
    tcase_add_test(tc, pad_vocab_text);
    tcase_add_test(tc, errors_say_what_to_do);
    tcase_add_test(tc, dump_after_attention);
    tcase_add_test(tc, sink_views_rotary_backward);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
