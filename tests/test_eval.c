/* test_eval.c: validation's evaluation program (train/runner.h sn_runner_eval): the training
 * graph's loss alone (passes.h sn_pass_eval_graph), compiled apart, reading the training
 * program's parameters and weight shadows in place and running in its arena.
 * Convention: every loss it gives is compared with the loss the training program computes on
 * the same batch and weights (the forward of a micro-batch), to the bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "runtime/device.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64 };

/* tiny GPT-2 (vocabulary 64) through the pipeline with its backward at precision p, the LM head
 * in chunks of `chunk` rows (0: whole) */
static sn_graph *tiny_chunked(sn_precision p, int64_t chunk) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    sn_graph_clear_outputs(g);
    sn_graph_add_output(g, g->loss);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    o.chunk_logits = chunk;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert(st.logits_chunks == (chunk ? B * T / chunk : 0));
    return g;
}

static sn_graph *tiny_at(sn_precision p) { return tiny_chunked(p, 0); }

static void batch(int32_t *x, int32_t *y, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % V);
        y[i] = (x[i] * 3 + 1) % V;
    }
}

/* The evaluation graph: the loss's forward, no backward node, every parameter by name. */
START_TEST(eval_graph_is_the_forward) {
    sn_graph *g = tiny_at(SN_PRECISION_BF16), *eg;
    sn_err e;
    ck_assert_msg(sn_pass_eval_graph(g, &eg, &e) == SN_OK, "%s", e.msg);
    ck_assert(g->has_backward && !eg->has_backward && eg->n_nodes < g->n_forward + 1);
    ck_assert(eg->n_outputs == 1 && eg->outputs[0] == eg->loss && !eg->logits);
    ck_assert_int_eq(sn_graph_param_count(eg), sn_graph_param_count(g));
    for (int i = 0; i < eg->n_nodes; i++) {
        const sn_node *n = eg->nodes[i];
        ck_assert_msg(!n->grad && n->op != SN_OP_CROSS_ENTROPY_BWD && n->op != SN_OP_ATTENTION_BWD_Q,
                      "%%%d %s in the evaluation graph", n->id, sn_op_name(n->op));
    }
    ck_assert_msg(sn_verify(eg, &e) == SN_OK, "%s", e.msg);
    sn_graph_free(eg);
    sn_graph *f = sn_graph_new(); /* a graph without a loss is refused, saying so */
    ck_assert(sn_pass_eval_graph(f, &eg, &e) == SN_ERR_INVALID && strstr(e.msg, "no loss"));
    sn_graph_free(f);
    sn_graph_free(g);
}
END_TEST

/* On device d (NULL: the interpreter), at precision _i (fp32, bf16, fp16): the evaluation's loss
 * equals the training program's on the same batch after AdamW steps (the shadows AdamW wrote),
 * after a parameter set from the host (the shadows made again before the evaluation), and the
 * pending micro-batch's gradients are left as they were. */
static void eval_matches(sn_device *d, sn_precision p, int64_t chunk) {
    sn_graph *g = tiny_chunked(p, chunk);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    o.lr = 1e-2f;
    o.device = d;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    for (int s = 0; s < 3; s++) {
        sn_step_stats st;
        batch(x, y, (uint64_t)s);
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
    }
    int w = sn_trainer_find_param(t, "h.0.attn.c_attn.w");
    ck_assert(w >= 0);
    int64_t n = sn_numel(sn_trainer_param_node(t, w));
    float *g0 = malloc(sizeof(float) * (size_t)n), *g1 = malloc(sizeof(float) * (size_t)n);
    ck_assert(g0 && g1);
    for (int round = 0; round < 2; round++) {
        double l0, l, la;
        batch(x, y, 200 + (uint64_t)round); /* first, before any training run this round */
        ck_assert_msg(sn_trainer_eval(t, x, y, &l0, &e) == SN_OK, "%s", e.msg);
        batch(x, y, 100);
        ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
        ck_assert(sn_trainer_get_param(t, w, SN_PARAM_GRAD, g0, &e) == SN_OK);
        batch(x, y, 200 + (uint64_t)round);
        ck_assert_msg(sn_trainer_eval(t, x, y, &l, &e) == SN_OK, "%s", e.msg);
        ck_assert(sn_trainer_get_param(t, w, SN_PARAM_GRAD, g1, &e) == SN_OK);
        ck_assert_msg(!memcmp(g0, g1, sizeof(float) * (size_t)n), "%s: the evaluation changed the "
                      "pending gradients", sn_precision_name(p));
        ck_assert_msg(sn_trainer_accumulate(t, x, y, &la, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(l0 == la && l == la && isfinite(l), "%s round %d: eval %.9g and %.9g, the "
                      "training program %.9g", sn_precision_name(p), round, l0, l, la);
        sn_step_stats st;
        ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
        /* the weights from the host: their shadows stale until a run makes them again */
        ck_assert(sn_trainer_get_param(t, w, SN_PARAM_WEIGHTS, g0, &e) == SN_OK);
        for (int64_t i = 0; i < n; i++) g0[i] *= 1.5f;
        ck_assert(sn_trainer_set_param(t, w, SN_PARAM_WEIGHTS, g0, &e) == SN_OK);
    }
    free(g0);
    free(g1);
    sn_trainer_free(t);
    sn_graph_free(g);
}

START_TEST(eval_is_the_training_forward) {
    static const sn_precision prec[] = {SN_PRECISION_FP32, SN_PRECISION_BF16, SN_PRECISION_FP16};
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    eval_matches(d, prec[_i], 0);
    if (_i == 1) eval_matches(d, prec[_i], 8); /* the LM head in 4 chunks: the loss's forward too */
    sn_device_free(d);
    if (_i == 0) eval_matches(NULL, SN_PRECISION_FP32, 0); /* the interpreter runs the graph whole */
}
END_TEST

/* The memory: the evaluation program's arena is smaller than the training program's and is
 * that arena (shared), its own persistent block holds no parameter nor shadow (only the ids,
 * the loss and constants), and it counts no gradient. */
START_TEST(eval_memory_is_shared) {
    sn_err e;
    sn_device *inner, *d;
    ck_assert_msg(sn_cpu_device_new(2, &inner, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_checked_device_new(inner, &d, &e) == SN_OK); /* no host access to device memory */
    sn_graph *g = tiny_at(SN_PRECISION_BF16);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    o.device = d;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    ck_assert(!sn_trainer_eval_exec(t));
    const sn_program *tp = sn_trainer_program(t), *ep = sn_trainer_eval_program(t, &e);
    ck_assert_msg(ep, "%s", e.msg);
    ck_assert_msg(ep->arena_bytes < tp->arena_bytes, "eval arena %lld, training %lld",
                  (long long)ep->arena_bytes, (long long)tp->arena_bytes);
    ck_assert(ep->n_kernels < tp->n_kernels && ep->layout.flat_n == 0);
    int32_t x[B * T], y[B * T];
    double l;
    batch(x, y, 7);
    ck_assert_msg(sn_trainer_eval(t, x, y, &l, &e) == SN_OK, "%s", e.msg);
    sn_exec_stats st, tst;
    sn_exec_stats_get(sn_trainer_eval_exec(t), &st);
    sn_exec_stats_get(sn_trainer_exec(t), &tst);
    int64_t io = 2 * 64 * ((4 * B * T + 63) / 64) + 64 * 8; /* ids, targets, the loss, constants */
    ck_assert_msg(st.arena_shared && st.persistent_bytes <= io && st.arena_peak_bytes <= ep->arena_bytes,
                  "shared %d, own persistent %lld bytes (ids and loss: %lld), peak %lld", st.arena_shared,
                  (long long)st.persistent_bytes, (long long)io, (long long)st.arena_peak_bytes);
    ck_assert(st.arena_peak_bytes == ep->arena_bytes); /* the plan's peak, measured */
    ck_assert_msg(ep->n_shadows > 0 && st.shadow_casts == 0, "%d shadows, %lld casts: the "
                  "training program's shadows are read in place", ep->n_shadows,
                  (long long)st.shadow_casts);
    /* another model's program does not share these parameters: refused, naming one */
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 2 * V;
    sn_graph *g2 = sn_graph_new(), *eg2;
    sn_gpt2 m;
    ck_assert_msg(sn_gpt2_build(g2, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pass_eval_graph(g2, &eg2, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts po = {.target = &d->target};
    sn_program *p2;
    ck_assert_msg(sn_pipeline_kernels(eg2, &po, &p2, NULL, &e) == SN_OK, "%s", e.msg);
    sn_exec *x2;
    ck_assert(sn_exec_new_sharing(d, p2, sn_trainer_exec(t), &x2, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "parameter wte") && strstr(e.msg, "not one of the owner's"), "%s", e.msg);
    sn_program_free(p2);
    sn_graph_free(eg2);
    sn_graph_free(g2);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("eval");
    TCase *tc = tcase_create("program");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, eval_graph_is_the_forward);
    tcase_add_loop_test(tc, eval_is_the_training_forward, 0, 3);
    tcase_add_test(tc, eval_memory_is_shared);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
