/* test_llama.c: the LLaMA-style example (examples/llama/llama.c, written against <sinter.h>
 * only) through the compiler: its written-out attention on rotated q and k with repeated
 * key/value heads is fused, its compiled CPU program matches the reference interpreter (loss
 * and every gradient), and the training session (api/session.h) reports a model's mistakes. */
#include <stdlib.h>
#include <string.h>

#include "examples/llama/llama.h"
#include <math.h>

#include "interp/interp.h"
#include "passes/pipeline.h"
#include "harness.h"
#include "tiny_gpt2.h"

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

/* 2 layers, 4 query heads sharing 2 key/value heads, head size 8. */
static llama_config tiny_config(int layers) {
    return (llama_config){.ctx = TINY_T, .n_layer = layers, .n_head = 4, .n_kv_head = 2, .dim = 32,
                          .hidden = 48, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
}

/* The training graph through the pipeline's graph passes (attention fused, autodiff), at
 * precision p. */
static sn_graph *llama_training_at(int layers, int B, int T, sn_pipeline_stats *st, sn_precision p) {
    llama_config c = tiny_config(layers);
    sn_graph *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(llama_build(g, B, T, TINY_VOCAB, &c, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = p;
    ck_assert_msg(sn_compile(g, &o, NULL, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *llama_training(int layers, int B, int T, sn_pipeline_stats *st) {
    return llama_training_at(layers, B, T, st, SN_PRECISION_FP32);
}

static int count_op(const sn_graph *g, sn_op op) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == op;
    return n;
}

/* Every layer's attention is fused (no softmax, no (T, T) matrix left) and reads its 2 key/value
 * heads unrepeated (no broadcast left), and the compiled program computes the interpreter's
 * loss and gradients. */
START_TEST(llama_matches_interpreter) {
    sn_pipeline_stats st = {0};
    sn_graph *g = llama_training(2, TINY_B, TINY_T, &st);
    ck_assert_int_eq(st.attention_fused, 2);
    ck_assert_int_eq(st.kv_unrepeated, 2); /* grouped-query: k and v read unrepeated */
    for (int i = 0; i < g->n_forward; i++) ck_assert_int_ne(g->nodes[i]->op, SN_OP_BROADCAST);
    ck_assert_int_eq(count_op(g, SN_OP_SOFTMAX), 0);
    ck_assert_int_eq(count_op(g, SN_OP_ATTENTION), 2);
    ck_assert_int_eq(count_op(g, SN_OP_RMSNORM), 5);
    ck_assert_int_eq(count_op(g, SN_OP_SILU_BWD), 2);
    tiny_check_compiled(g, 11, "llama, attention fused");
    sn_graph_free(g);
}
END_TEST

/* Whether x is a 16-bit value widened (autocast's rounded read). */
static bool widened_16(const sn_node *x) {
    return x->op == SN_OP_CAST && x->dtype == SN_F32 && x->in[0]->dtype == SN_BF16;
}

/* Mixed precision (bf16 products): the unrepeated k and v are cast once each, SwiGLU reads
 * gate and up rounded (as torch.autocast's linear layers return them; their GEMMs store bf16),
 * and the compiled program matches the interpreter's emulated rounding (test_autocast's
 * tolerance, 4 u). */
START_TEST(llama_bf16_matches_interpreter) {
    sn_pipeline_stats st = {0};
    sn_graph *g = llama_training_at(2, TINY_B, TINY_T, &st, SN_PRECISION_BF16);
    ck_assert_int_eq(st.kv_unrepeated, 2);
    int swiglu = 0;
    for (int i = 0; i < g->n_forward; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_MUL) continue;
        for (int j = 0; j < 2; j++)
            swiglu += n->in[j]->op == SN_OP_SILU && widened_16(n->in[j]->in[0]) &&
                      widened_16(n->in[1 - j]);
    }
    ck_assert_int_eq(swiglu, 2);
    /* q and k read rounded by the rotation (autocast), whose gradients' permutes back to
       (B, T, H, D) the rotation's backward kernels make (sink_views): the copies left are dv's */
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    int copies = 0, pairs = 0, chained = 0, silu_stored = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        for (int o = 0; o < ker->n_out; o++) silu_stored += ker->args[o]->op == SN_OP_SILU;
        const char *name = strchr(ker->name, '_');
        copies += name && !strcmp(name, "_permute");
        pairs += ker->kind == SN_KER_ROW && ker->row.pair;
        chained += ker->kind == SN_KER_GEMM && ker->gemm.accum && ker->args[0]->dtype == SN_BF16;
    }
    ck_assert_int_eq(copies, 2);
    /* the gradients of the normed x read by q, k, v (and by gate, up): lowrank_sum's chains,
       each GEMM after the first adding the one before as C and storing bf16 (3 a layer), so
       that every norm's backward reads a GEMM's bf16 output and pairs its dx with its weight
       gradient (kernel.h: the norm backward pair), the final norm's too */
    ck_assert_int_eq(st.lowrank_rounded, 4);
    ck_assert_int_eq(chained, 6);
    ck_assert_int_eq(pairs, 5);
    /* silu(gate) made again by the backward's kernel (the remat pass), never stored */
    ck_assert_int_eq(st.remade, 2);
    ck_assert_int_eq(silu_stored, 0);
    sn_program_free(p);
    tiny_check_compiled_tol(g, 11, "llama bf16, attention fused", 4 * 0x1p-9);
    sn_graph_free(g);
}
END_TEST

/* Kernels per layer: the difference between the 2- and 1-layer programs, by kind. */
START_TEST(llama_kernels_per_layer) {
    int per_kind[2][SN_KER_KIND_COUNT] = {{0}}, total[2] = {0};
    for (int l = 0; l < 2; l++) {
        sn_graph *g = llama_training(l + 1, TINY_B, TINY_T, NULL);
        sn_program *p;
        sn_err e;
        ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
        for (int i = 0; i < p->n_kernels; i++) per_kind[l][p->kernels[i]->kind]++;
        total[l] = p->n_kernels;
        sn_program_free(p);
        sn_graph_free(g);
    }
    int d[SN_KER_KIND_COUNT];
    for (int k = 0; k < SN_KER_KIND_COUNT; k++) d[k] = per_kind[1][k] - per_kind[0][k];
    printf("test_llama: one layer (forward and backward) is %d kernels: %d GEMM, %d pointwise, "
           "%d row, %d reduce, %d attention\n", total[1] - total[0], d[SN_KER_GEMM],
           d[SN_KER_POINTWISE], d[SN_KER_ROW], d[SN_KER_REDUCE], d[SN_KER_ATTENTION]);
    /* forward: lse + output (one kernel or two); backward: dq, dk with dv */
    ck_assert_int_ge(d[SN_KER_ATTENTION], 2);
    ck_assert_int_le(d[SN_KER_ATTENTION], 4);
    /* 7 weights: 7 forward products, 14 backward (dx and dw each) */
    ck_assert_int_eq(d[SN_KER_GEMM], 21);
}
END_TEST

/* Runs g on the interpreter with x (numel floats) fed; returns the value of y. */
static const double *run(sn_graph *g, sn_interp **it, sn_node *x, const float *xv, const sn_node *y) {
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_graph_add_output(g, (sn_node *)y);
    *it = sn_interp_new(g, false);
    ck_assert(*it);
    ck_assert_msg(sn_interp_set(*it, x, xv, &e) == SN_OK && sn_interp_run(*it, &e) == SN_OK, "%s", e.msg);
    return sn_interp_value(*it, y);
}

/* The rotation against its formula: y[i] = x[i] cos a - x[i+4] sin a, y[i+4] = x[i] sin a +
 * x[i+4] cos a, a = t theta^(-i/4), for every head and position. */
START_TEST(rope_rotates_pairs) {
    enum { H = 2, T = 5, D = 8 };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(1, H, T, D));
    sn_node *y = llama_rope(g, x, 100.0f);
    float xv[H * T * D];
    for (int i = 0; i < H * T * D; i++) xv[i] = (float)sin(1.7 * i + 0.3);
    sn_interp *it;
    const double *got = run(g, &it, x, xv, y);
    double want[H * T * D];
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D / 2; i++) {
                const float *r = xv + (h * T + t) * D;
                double a = t * pow(100.0, -i / (D / 2.0));
                want[(h * T + t) * D + i] = r[i] * cos(a) - r[i + D / 2] * sin(a);
                want[(h * T + t) * D + i + D / 2] = r[i] * sin(a) + r[i + D / 2] * cos(a);
            }
    sn_check_close("rope", got, want, H * T * D, 1e-6, 1e-6);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* Query head h reads key/value head h / groups (3 groups of 2 key/value heads). */
START_TEST(repeat_kv_maps_heads) {
    enum { B = 2, HKV = 2, G = 3, T = 3, D = 2, N = B * HKV * T * D };
    sn_graph *g = sn_graph_new();
    sn_node *kv = sn_input(g, "kv", SN_F32, SN_SHAPE(B, HKV, T, D));
    sn_node *r = llama_repeat_kv(g, kv, G);
    ck_assert_int_eq(r->shape[1], HKV * G);
    float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)i;
    sn_interp *it;
    const double *got = run(g, &it, kv, v, r);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HKV * G; h++)
            for (int j = 0; j < T * D; j++)
                ck_assert_msg(got[(b * HKV * G + h) * T * D + j] == v[(b * HKV + h / G) * T * D + j],
                              "batch %d head %d element %d", b, h, j);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

static sn_status no_loss(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    sn_node *idx = sn_input(g, "idx", SN_I32, SN_SHAPE(B, T));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(V, 8), SN_INIT_NORMAL, 0.02f);
    sn_graph_add_output(g, sn_embedding(g, w, idx));
    return SN_OK;
}

static sn_status bad_shape(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    sn_node *x = sn_input(g, "idx", SN_I32, SN_SHAPE(B, T));
    sn_matmul(g, sn_param(g, "a", SN_F32, SN_SHAPE(3, 4), SN_INIT_ZEROS, 0),
              sn_param(g, "b", SN_F32, SN_SHAPE(5, 6), SN_INIT_ZEROS, 0));
    (void)x;
    return SN_OK;
}

/* Inputs named as the trainer once wanted, but with no role. */
static sn_status no_roles(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    sn_node *idx = sn_input(g, "idx", SN_I32, SN_SHAPE(B, T));
    sn_node *tgt = sn_input(g, "targets", SN_I32, SN_SHAPE(B, T));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(V, V), SN_INIT_NORMAL, 0.02f);
    sn_node *logits = sn_embedding(g, w, idx);
    sn_graph_add_output(g, logits);
    sn_graph_set_loss(g, sn_cross_entropy(g, logits, tgt, -1));
    return SN_OK;
}

/* The model author's calls (sinter.h, opaque handles): a bad op's error read back through
 * sn_graph_error and sn_graph_status, with both shapes and the op; later constructors return
 * NULL and keep the first error; a second tokens input, a non-scalar loss and a helper's own
 * failure (sn_graph_fail) are errors by a call too; the accessors read a node. */
START_TEST(public_graph_errors) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input_tokens(g, "tokens", SN_SHAPE(2, 5));
    ck_assert_int_eq(sn_node_role(x), SN_ROLE_TOKENS);
    ck_assert_int_eq(sn_node_dtype(x), SN_I32);
    ck_assert_int_eq(sn_node_dim(x, -1), 5);
    ck_assert_int_eq(sn_node_dim(x, 0), 2);
    ck_assert_int_eq(sn_node_dim(x, 2), 0);
    ck_assert_str_eq(sn_node_name(x), "tokens");
    sn_node *a = sn_param(g, "a", SN_F32, SN_SHAPE(3, 4), SN_INIT_ZEROS, 0);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(5, 6), SN_INIT_ZEROS, 0);
    ck_assert_int_eq(sn_graph_status(g), SN_OK);
    ck_assert_ptr_null(sn_graph_error(g));
    ck_assert_ptr_null(sn_matmul(g, a, b));
    ck_assert_int_eq(sn_graph_status(g), SN_ERR_SHAPE);
    ck_assert_has(sn_graph_error(g), "matmul");
    ck_assert_has(sn_graph_error(g), "f32[3,4]");
    ck_assert_has(sn_graph_error(g), "f32[5,6]");
    ck_assert_ptr_null(sn_add(g, a, a)); /* later constructors: NULL, the first error kept */
    sn_graph_set_loss(g, NULL);
    ck_assert_int_eq(sn_graph_fail(g, SN_ERR_OOM, "later"), SN_ERR_SHAPE);
    ck_assert_has(sn_graph_error(g), "matmul");
    sn_graph_free(g);

    g = sn_graph_new();
    sn_input_tokens(g, "idx", SN_SHAPE(2, 5));
    ck_assert_ptr_null(sn_input_tokens(g, "tokens", SN_SHAPE(2, 5)));
    ck_assert_int_eq(sn_graph_status(g), SN_ERR_INVALID);
    ck_assert_has(sn_graph_error(g), "input \"tokens\" would be a second input of the role tokens "
                                     "(the first is \"idx\")");
    sn_graph_free(g);
    g = sn_graph_new();
    ck_assert_ptr_null(sn_input_role(g, "scale", SN_ROLE_LOSS_SCALE, SN_I32, SN_SCALAR));
    ck_assert_int_eq(sn_graph_status(g), SN_ERR_DTYPE);
    ck_assert_has(sn_graph_error(g), "input \"scale\" of the role loss_scale must be a float scalar");
    sn_graph_free(g);
    g = sn_graph_new();
    sn_graph_set_loss(g, sn_param(g, "w", SN_F32, SN_SHAPE(3), SN_INIT_ZEROS, 0));
    ck_assert_int_eq(sn_graph_status(g), SN_ERR_SHAPE);
    ck_assert_has(sn_graph_error(g), "sn_graph_set_loss: the loss %0 (param) is f32[3]; it must be a float scalar");
    sn_graph_free(g);
    g = sn_graph_new();
    ck_assert_int_eq(sn_graph_fail(g, SN_ERR_OOM, "rope: %d tables", 2), SN_ERR_OOM);
    ck_assert_str_eq(sn_graph_error(g), "rope: 2 tables");
    ck_assert_ptr_null(sn_input_tokens(g, "idx", SN_SHAPE(2)));
    sn_graph_free(g);
}
END_TEST

/* A session's errors say what is wrong with the model or the options. */
START_TEST(session_reports_model_mistakes) {
    sn_session_opts o = sn_session_defaults();
    o.data = sn_test_asset("tinyshakespeare.txt");
    o.device = SN_DEVICE_INTERP;
    o.batch = 2;
    sn_session *s = (sn_session *)&o;
    sn_err e;
    sn_model m = {.name = "noloss", .ctx = 8, .build = no_loss};
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_ptr_null(s);
    ck_assert_has(e.msg, "model noloss: its build set no loss: call sn_graph_set_loss");
    m = (sn_model){.name = "badshape", .ctx = 8, .build = bad_shape};
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_SHAPE);
    ck_assert_has(e.msg, "model badshape: ");
    ck_assert_has(e.msg, "matmul");
    m = (sn_model){.name = "noroles", .ctx = 8, .build = no_roles};
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "model noroles: its build made no input of the role tokens (sn_input_tokens)");
    llama_config c = tiny_config(1);
    m = (sn_model){.name = "llama", .ctx = c.ctx, .build = llama_build, .user = &c};
    o.device = (sn_device_kind)7;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "session: device 7: give SN_DEVICE_AUTO, SN_DEVICE_CUDA, SN_DEVICE_CPU or SN_DEVICE_INTERP");
    o.device = SN_DEVICE_INTERP;
    o.precision = SN_PRECISION_COUNT;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "session: precision 4: give SN_PRECISION_FP32, _BF16, _FP16 or _TF32");
    o.precision = SN_PRECISION_FP32;
    o.checkpoint_policy = (sn_checkpoint_policy)-1;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "session: checkpoint_policy -1: give SN_CHECKPOINT_AUTO");
    o.checkpoint_policy = SN_CHECKPOINT_AUTO;
    o.offload = SN_OFFLOAD_COUNT;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "session: offload 3: give SN_OFFLOAD_AUTO");
    o.offload = SN_OFFLOAD_OPTIMIZER;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "session: offload moves the optimizer state off a device and the interpreter has none");
    o.offload = SN_OFFLOAD_AUTO;
    o.seq = 200;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "llama: batch 2 x sequence 200: need B >= 1 and 1 <= T <= ctx = 24");
    o.seq = 0;
    o.tokens_per_step = 100;
    ck_assert_int_eq(sn_session_new(&m, &o, &s, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "--tokens-per-step 100 is not a multiple of batch x seq = 2 x 24 = 48: use 96 or 144");
}
END_TEST

/* Validation stops between batches once the session's stop flag is raised (a signal's, in
 * `sinter train`): -1, nothing run; lowered, the same loss as before. */
START_TEST(session_validation_stops_on_flag) {
    sn_session_opts o = sn_session_defaults();
    o.data = sn_test_asset("tinyshakespeare.txt");
    o.device = SN_DEVICE_INTERP;
    o.batch = 2;
    o.steps = 2;
    llama_config c = tiny_config(1);
    sn_model m = {.name = "llama", .ctx = c.ctx, .build = llama_build, .user = &c};
    sn_session *s;
    sn_err e;
    ck_assert_msg(sn_session_new(&m, &o, &s, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_session_step(s, NULL, &e) == SN_OK, "%s", e.msg);
    int stop = 0;
    sn_session_set_stop(s, &stop);
    double full = -1, cut = 0, again = -1;
    ck_assert_msg(sn_session_validate(s, &full, &e) == SN_OK, "%s", e.msg);
    ck_assert(full > 0);
    stop = 1;
    ck_assert_msg(sn_session_validate(s, &cut, &e) == SN_OK, "%s", e.msg);
    ck_assert(cut == -1);
    stop = 0;
    ck_assert_msg(sn_session_validate(s, &again, &e) == SN_OK, "%s", e.msg);
    ck_assert(again == full);
    sn_session_free(s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("llama");
    TCase *tc = tcase_create("llama");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, rope_rotates_pairs);
    tcase_add_test(tc, public_graph_errors);
    tcase_add_test(tc, repeat_kv_maps_heads);
    tcase_add_test(tc, llama_matches_interpreter);
    tcase_add_test(tc, llama_bf16_matches_interpreter);
    tcase_add_test(tc, llama_kernels_per_layer);
    tcase_add_test(tc, session_reports_model_mistakes);
    tcase_add_test(tc, session_validation_stops_on_flag);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
