/* test_gpt2.c: the GPT-2 model: published parameter counts, the full 124M forward+backward
 * graph, loss at initialisation, the whole tiny model's gradient against finite differences,
 * the IR round trip of a real training graph, and the logits it marks (what sampling and
 * generation read, carried by the IR text and every pass). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "train/train.h"
#include "harness.h"

static sn_graph *build(const char *name, int B, int T, int vocab, bool backward, sn_gpt2 *m) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(name, &c));
    if (vocab) c.vocab = vocab;
    sn_graph *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, m, &e) == SN_OK, "%s", e.msg);
    if (backward) ck_assert_msg(sn_backward(g, m->loss, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* The published sizes (tied head, vocab 50257, context 1024). */
START_TEST(parameter_counts) {
    static const struct {
        const char *name;
        long long params;
    } want[] = {{"gpt2", 124439808LL}, {"gpt2-medium", 354823168LL},
                {"gpt2-large", 774030080LL}, {"gpt2-xl", 1557611200LL}};
    sn_gpt2 m;
    sn_graph *g = build(want[_i].name, 1, 8, 0, false, &m);
    ck_assert_int_eq(sn_graph_param_count(g), want[_i].params);
    sn_graph_free(g);
}
END_TEST

/* The full 124M training graph builds, verifies, and every parameter gets a gradient of its
 * own shape; attention is still written out (a T x T softmax per layer). */
START_TEST(gpt2_backward_graph) {
    sn_gpt2 m;
    sn_graph *g = build("gpt2", 4, 1024, 0, true, &m);
    sn_node *params[200];
    int np = sn_graph_params(g, params, 200);
    ck_assert_int_eq(np, 2 + 12 * 12 + 2);
    for (int i = 0; i < np; i++) {
        ck_assert_ptr_nonnull(params[i]->grad);
        ck_assert_int_ne(params[i]->grad->op, SN_OP_FULL); /* every parameter is used */
        ck_assert_int_eq(sn_numel(params[i]->grad), sn_numel(params[i]));
    }
    int softmax = 0;
    for (int i = 0; i < g->n_forward; i++) softmax += g->nodes[i]->op == SN_OP_SOFTMAX;
    ck_assert_int_eq(softmax, 12);
    ck_assert_int_eq(m.logits->shape[2], 50257);
    sn_graph_free(g);
}
END_TEST

static void set_params(sn_interp *it, sn_graph *g, uint64_t seed) {
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    sn_err e;
    for (int i = 0; i < np; i++) {
        float *v = malloc(sizeof(float) * (size_t)sn_numel(params[i]));
        sn_param_init(params[i], v, seed);
        ck_assert_msg(sn_interp_set(it, params[i], v, &e) == SN_OK, "%s", e.msg);
        free(v);
    }
}

static void set_tokens(sn_interp *it, const sn_gpt2 *m, int vocab, uint64_t seed) {
    int64_t n = sn_numel(m->idx);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)n), *y = malloc(sizeof(int32_t) * (size_t)n);
    sn_rng r = sn_rng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
        y[i] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
    }
    sn_err e;
    ck_assert_msg(sn_interp_set_i32(it, m->idx, x, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_set_i32(it, m->targets, y, &e) == SN_OK, "%s", e.msg);
    free(x);
    free(y);
}

START_TEST(loss_at_init_is_log_vocab) {
    sn_gpt2 m;
    sn_graph *g = build("tiny", 4, 32, 0, false, &m);
    sn_interp *it = sn_interp_new(g, false);
    set_params(it, g, 7);
    set_tokens(it, &m, 256, 3);
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    double loss = sn_interp_value(it, m.loss)[0];
    ck_assert_msg(fabs(loss - log(256.0)) < 0.1, "loss at init %.4f, ln(256) = %.4f", loss, log(256.0));
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* d loss / d param of the whole tiny model against central differences, on a sample of three
 * elements of every parameter, in the exact interpreter. */
START_TEST(tiny_gpt2_gradient) {
    sn_gpt2 m;
    sn_graph *g = build("tiny", 2, 8, 32, true, &m);
    sn_interp *it = sn_interp_new(g, true);
    set_params(it, g, 11);
    set_tokens(it, &m, 32, 5);
    sn_err e;
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    sn_rng r = sn_rng_seed(99);
    int checked = 0;
    for (int p = 0; p < np; p++) {
        int64_t n = sn_numel(params[p]);
        double *v = malloc(sizeof(double) * (size_t)n);
        float *f = malloc(sizeof(float) * (size_t)n);
        sn_param_init(params[p], f, 11);
        for (int64_t i = 0; i < n; i++) v[i] = f[i];
        double analytic[3], numeric[3];
        ck_assert(sn_interp_run(it, &e) == SN_OK); /* gradients at the unperturbed point */
        const double *grad = sn_interp_value(it, params[p]->grad);
        int64_t at[3];
        for (int k = 0; k < 3; k++) {
            at[k] = (int64_t)sn_rng_below(&r, (uint64_t)n);
            analytic[k] = grad[at[k]];
        }
        for (int k = 0; k < 3; k++) {
            const double h = 1e-5;
            double keep = v[at[k]], up, down;
            v[at[k]] = keep + h;
            sn_interp_set_f64(it, params[p], v, &e);
            ck_assert(sn_interp_run(it, &e) == SN_OK);
            up = sn_interp_value(it, m.loss)[0];
            v[at[k]] = keep - h;
            sn_interp_set_f64(it, params[p], v, &e);
            ck_assert(sn_interp_run(it, &e) == SN_OK);
            down = sn_interp_value(it, m.loss)[0];
            v[at[k]] = keep;
            sn_interp_set_f64(it, params[p], v, &e);
            numeric[k] = (up - down) / (2 * h);
        }
        char label[128];
        snprintf(label, sizeof label, "tiny gpt2: d loss / d %s", params[p]->name);
        sn_check_close(label, analytic, numeric, 3, 1e-5, 1e-4);
        checked += 3;
        free(v);
        free(f);
    }
    ck_assert_int_eq(checked, 3 * np);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

START_TEST(training_graph_round_trips) {
    sn_gpt2 m;
    sn_graph *g = build("tiny", 2, 8, 0, true, &m);
    char *text = sn_graph_to_string(g);
    sn_graph *back;
    sn_err e;
    ck_assert_msg(sn_graph_parse(text, &back, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_verify(back, &e) == SN_OK, "%s", e.msg);
    char *again = sn_graph_to_string(back);
    ck_assert_str_eq(text, again);
    ck_assert(g->logits == m.logits && back->logits && back->logits->id == m.logits->id);
    char line[32];
    snprintf(line, sizeof line, "\n  logits %%%d\n", m.logits->id);
    ck_assert_msg(strstr(text, line), "%s", line);
    free(text);
    free(again);
    sn_graph_free(back);
    sn_graph_free(g);
}
END_TEST

/* The logits survive the pipeline's rewrites; a bad mark is the graph's error or refused. */
START_TEST(logits_marked) {
    sn_gpt2 m;
    sn_graph *g = build("tiny", 2, 8, 250, false, &m);
    sn_err e;
    sn_pipeline_opts o = sn_pipeline_defaults(); /* pads the vocabulary: a new logits node */
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert(g->logits && g->logits->rank == 3 && g->logits->shape[2] == 256); /* padded */
    bool out = false;
    for (int i = 0; i < g->n_outputs; i++) out = out || g->outputs[i] == g->logits;
    ck_assert(out);
    sn_graph_free(g);
    g = sn_graph_new();
    sn_graph_set_logits(g, sn_input(g, "v", SN_F32, SN_SHAPE(7)));
    ck_assert_msg(sn_graph_error(g) && strstr(sn_graph_error(g), "must be a float (.., V) value"),
                  "%s", sn_graph_error(g) ? sn_graph_error(g) : "no error");
    sn_graph_free(g);
    sn_graph *p = NULL;
    const char *text = "graph {\n  %0 = input \"x\" : f32[2,3]\n  logits %0\n}\n";
    ck_assert_int_eq(sn_graph_parse(text, &p, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, "the logits %0 are no output"), "%s", e.msg);
}
END_TEST

START_TEST(bad_sequence_length) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_int_eq(sn_gpt2_build(g, &c, 2, c.ctx + 1, &m, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "T <= ctx = 32"), "%s", e.msg);
    ck_assert(!sn_gpt2_config_find("gpt3", &c));
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gpt2");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, parameter_counts, 0, 4);
    tcase_add_test(tc, gpt2_backward_graph);
    tcase_add_test(tc, loss_at_init_is_log_vocab);
    tcase_add_test(tc, tiny_gpt2_gradient);
    tcase_add_test(tc, training_graph_round_trips);
    tcase_add_test(tc, logits_marked);
    tcase_add_test(tc, bad_sequence_length);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
