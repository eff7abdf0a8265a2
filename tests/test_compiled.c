/* test_compiled.c: the compiled CPU program (fuse, memplan, LLVM-JIT kernels, GEMM library,
 * executor) against the reference interpreter on tiny GPT-2 with attention fused and the
 * vocabulary padded: the loss and every gradient, the measured arena peak against the plan,
 * and a few training steps through the trainer on both backends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../models/gpt2.h"
#include "../passes/pipeline.h"
#include "../runtime/device.h"
#include "../runtime/interp.h"
#include "../runtime/rng.h"
#include "../runtime/train.h"
#include "harness.h"

enum { B = 2, T = 24, VOCAB = 250 }; /* 250 pads to 256: padding is real */

static sn_graph *tiny_training_graph(void) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = VOCAB;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_pipeline_stats st;
    ck_assert_msg(sn_pipeline_run(&g, &o, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(st.attention_fused, c.n_layer);
    ck_assert_int_eq(st.vocab_padded, 1);
    return g;
}

static sn_node *input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    return NULL;
}

static void tokens(int32_t *x, int32_t *y, uint64_t seed) {
    sn_rng r = sn_rng_seed(seed);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)sn_rng_below(&r, VOCAB);
        y[i] = (int32_t)sn_rng_below(&r, VOCAB);
    }
}

START_TEST(program_matches_interpreter) {
    sn_graph *g = tiny_training_graph();
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_program *p;
    ck_assert_msg(sn_fuse(g, &p, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_memplan(p, &e) == SN_OK, "%s", e.msg);
    sn_exec *x;
    ck_assert_msg(sn_exec_new(d, p, &x, &e) == SN_OK, "%s", e.msg);
    sn_interp *it = sn_interp_new(g, false);

    int32_t ids[B * T], tg[B * T];
    tokens(ids, tg, 5);
    tg[3] = -1; /* an ignored target */
    sn_node *idx = input(g, "idx"), *targets = input(g, "targets");
    ck_assert_msg(!sn_exec_set(x, idx, ids, &e) && !sn_exec_set(x, targets, tg, &e), "%s", e.msg);
    ck_assert(!sn_interp_set_i32(it, idx, ids, &e) && !sn_interp_set_i32(it, targets, tg, &e));
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    for (int i = 0; i < np; i++) {
        float *w = malloc(sizeof(float) * (size_t)sn_numel(params[i]));
        sn_param_init(params[i], w, 3);
        ck_assert_msg(sn_exec_set(x, params[i], w, &e) == SN_OK, "%s", e.msg);
        ck_assert(sn_interp_set(it, params[i], w, &e) == SN_OK);
        free(w);
    }
    ck_assert_msg(sn_exec_run(x, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);

    float loss;
    ck_assert(sn_exec_get(x, g->loss, &loss, &e) == SN_OK);
    double want = sn_interp_value(it, g->loss)[0], got = loss;
    sn_check_close("loss", &got, &want, 1, 1e-4, 0);
    for (int i = 0; i < np; i++) {
        int64_t n = sn_numel(params[i]);
        float *gf = malloc(sizeof(float) * (size_t)n);
        double *gd = malloc(sizeof(double) * (size_t)n);
        ck_assert(sn_exec_get(x, params[i]->grad, gf, &e) == SN_OK);
        for (int64_t k = 0; k < n; k++) gd[k] = gf[k];
        char what[96];
        snprintf(what, sizeof what, "d loss / d %s", params[i]->name);
        sn_check_close(what, gd, sn_interp_value(it, params[i]->grad), (size_t)n, 1e-4, 1e-6);
        free(gf);
        free(gd);
    }
    sn_exec_stats st;
    sn_exec_stats_get(x, &st);
    ck_assert_int_eq(st.arena_peak_bytes, p->arena_bytes); /* the plan's peak is the real one */
    ck_assert(2 * p->arena_bytes <= p->sum_bytes);
    sn_interp_free(it);
    sn_exec_free(x);
    sn_program_free(p);
    sn_device_free(d);
    sn_graph_free(g);
}
END_TEST

/* Five AdamW steps on each backend: the losses agree to fp32 accuracy. */
START_TEST(trainer_on_both_backends) {
    double losses[2][5];
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    for (int backend = 0; backend < 2; backend++) {
        sn_graph *g = tiny_training_graph();
        sn_train_opts o;
        sn_train_opts_default(&o, 5);
        o.device = backend ? d : NULL;
        sn_trainer *t = sn_trainer_new(g, &o, &e);
        ck_assert_msg(t, "%s", e.msg);
        for (int s = 0; s < 5; s++) {
            int32_t x[B * T], y[B * T];
            tokens(x, y, 100); /* one batch: the loss must fall */
            sn_step_stats st;
            ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
            losses[backend][s] = st.loss;
        }
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    sn_check_close("losses, compiled vs interpreter", losses[1], losses[0], 5, 1e-4, 0);
    ck_assert(losses[0][4] < losses[0][0]);
    sn_device_free(d);
}
END_TEST

/* Small graphs whose kernels exercise fuse's accesses: concat parts, a padded view, a FULL
 * read by a concat; compiled vs interpreter. */
START_TEST(views_and_concat) {
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(2, 3)), *b = sn_input(g, "b", SN_F32, SN_SHAPE(4, 2));
    sn_node *parts[3] = {a, sn_transpose(g, b, 0, 1), sn_full(g, SN_F32, SN_SHAPE(2, 2), 0.5f)};
    sn_node *y = sn_exp(g, sn_concat(g, 3, parts, 1));                                     /* (2, 9) */
    sn_node *w = sn_mul(g, sn_pad(g, a, 1, 1, 5), sn_full(g, SN_F32, SN_SHAPE(2, 5), 2.0f)); /* (2, 5) */
    sn_graph_add_output(g, y);
    sn_graph_add_output(g, w);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_program *p;
    sn_exec *x;
    ck_assert_msg(!sn_fuse(g, &p, &e) && !sn_memplan(p, &e) && !sn_exec_new(d, p, &x, &e), "%s", e.msg);
    sn_interp *it = sn_interp_new(g, false);
    float av[6] = {1, 2, 3, 4, 5, 6}, bv[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
    ck_assert(!sn_exec_set(x, a, av, &e) && !sn_exec_set(x, b, bv, &e));
    ck_assert(!sn_interp_set(it, a, av, &e) && !sn_interp_set(it, b, bv, &e));
    ck_assert_msg(!sn_exec_run(x, &e) && !sn_interp_run(it, &e), "%s", e.msg);
    const sn_node *outs[2] = {y, w};
    for (int o = 0; o < 2; o++) {
        float got[18];
        double gd[18];
        ck_assert(!sn_exec_get(x, outs[o], got, &e));
        for (int i = 0; i < sn_numel(outs[o]); i++) gd[i] = got[i];
        sn_check_close(o ? "pad * 2" : "exp(concat)", gd, sn_interp_value(it, outs[o]),
                       (size_t)sn_numel(outs[o]), 1e-6, 1e-6);
    }
    sn_interp_free(it);
    sn_exec_free(x);
    sn_program_free(p);
    sn_device_free(d);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("compiled");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, views_and_concat);
    tcase_add_test(tc, program_matches_interpreter);
    tcase_add_test(tc, trainer_on_both_backends);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
