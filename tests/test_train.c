/* test_train.c: the trainer: the learning-rate schedule, parameter initialisation, a tiny
 * GPT-2 overfitting one batch, and a diverging run reported without touching the weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../models/gpt2.h"
#include "../runtime/rng.h"
#include "../runtime/train.h"
#include "harness.h"

START_TEST(lr_schedule) {
    sn_train_opts o;
    sn_train_opts_default(&o, 100);
    ck_assert_int_eq(o.warmup, 10);
    ck_assert_float_eq_tol(sn_train_lr(&o, 0), o.lr / 10, 1e-9);
    ck_assert_float_eq_tol(sn_train_lr(&o, 9), o.lr, 1e-9);
    ck_assert_float_eq_tol(sn_train_lr(&o, 55), o.lr * (o.min_lr_frac + 1) / 2, 1e-6); /* half way */
    ck_assert_float_eq_tol(sn_train_lr(&o, 100), o.lr * o.min_lr_frac, 1e-9);
    for (int s = 10; s < 100; s++) ck_assert(sn_train_lr(&o, s + 1) <= sn_train_lr(&o, s));
}
END_TEST

START_TEST(param_init) {
    sn_graph *g = sn_graph_new();
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(100, 100), SN_INIT_NORMAL, 0.02f);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(100), SN_INIT_ONES, 0);
    float *v = malloc(sizeof(float) * 10000), *v2 = malloc(sizeof(float) * 10000);
    sn_param_init(w, v, 1);
    double sum = 0, sq = 0;
    for (int i = 0; i < 10000; i++) sum += v[i], sq += (double)v[i] * v[i];
    double mean = sum / 1e4, std = sqrt(sq / 1e4 - mean * mean);
    ck_assert_msg(fabs(std - 0.02) < 0.001 && fabs(mean) < 0.001, "mean %g std %g", mean, std);
    sn_param_init(w, v2, 1);
    ck_assert(!memcmp(v, v2, sizeof(float) * 10000)); /* reproducible */
    sn_param_init(w, v2, 2);
    ck_assert(memcmp(v, v2, sizeof(float) * 10000)); /* the seed matters */
    sn_param_init(b, v, 1);
    for (int i = 0; i < 100; i++) ck_assert_float_eq(v[i], 1.0f);
    free(v);
    free(v2);
    sn_graph_free(g);
}
END_TEST

/* The tiny model memorises one batch of random tokens: loss below 0.1 in a few hundred steps. */
START_TEST(overfit_one_batch) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    enum { B = 2, T = 16 };
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 300);
    o.lr = 1e-2f;
    o.weight_decay = 0;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(42);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, 64), y[i] = (int32_t)sn_rng_below(&r, 64);
    sn_step_stats st = {0};
    double first = 0;
    int step;
    for (step = 0; step < 300; step++) {
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        if (step == 0) first = st.loss;
        if (st.loss < 0.1) break;
    }
    ck_assert_msg(st.loss < 0.1, "loss %.4f after %d steps (first %.4f)", st.loss, step, first);
    ck_assert(fabs(first - log(64.0)) < 0.1);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

/* loss = sum(log(w)) with some w < 0: NaN; the step fails and the weights stay. */
START_TEST(nan_loss_is_reported) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "idx", SN_I32, SN_SHAPE(1, 2));
    sn_input(g, "targets", SN_I32, SN_SHAPE(1, 2));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(8), SN_INIT_NORMAL, 1.0f);
    sn_node *tab = sn_param(g, "tab", SN_F32, SN_SHAPE(4, 8), SN_INIT_NORMAL, 1.0f);
    sn_node *loss = sn_sum(g, sn_add(g, sn_log(g, w), sn_sum(g, sn_embedding(g, tab, x), 1, false)), -1, false);
    loss = sn_sum(g, loss, 0, false);
    sn_err e;
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t ids[2] = {1, 2};
    ck_assert_int_eq(sn_trainer_step(t, ids, ids, NULL, &e), SN_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "diverged") && strstr(e.msg, "unchanged"), "%s", e.msg);
    ck_assert_int_eq(sn_trainer_step_count(t), 0);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("trainer");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, lr_schedule);
    tcase_add_test(tc, param_init);
    tcase_add_test(tc, overfit_one_batch);
    tcase_add_test(tc, nan_loss_is_reported);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
