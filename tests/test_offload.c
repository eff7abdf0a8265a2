/* test_offload.c: the optimizer state in host memory (sn_train_opts.offload, train/offload.c):
 * tiny GPT-2 trained with offload (through the checked device, whose pointers fault on the host)
 * has the losses, norms, weights and moments of the run without, bit for bit; its device and
 * host bytes are the plan's; a checkpoint saved with offload resumes with or without it.
 * Convention: "the same" is ==/memcmp, never a tolerance (offload.h: the CPU's AdamW is the
 * generated kernel's f32 arithmetic). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "runtime/device.h"
#include "train/checkpoint.h"
#include "train/plan.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64, STEPS = 12 };

static sn_test_tiny_shape tiny_shape = {V, T};

/* tiny GPT-2 at micro-batch b with its backward */
static sn_graph *tiny(int b) {
    sn_graph *g;
    sn_err e;
    ck_assert_msg(sn_test_tiny_loss_graph(&tiny_shape, b, &g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, g->loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

static void batch(int32_t *x, int32_t *y, int n, uint64_t seed) { sn_test_lcg_batch(x, y, n, V, seed); }

/* steps [from, to): every third of two micro-batches with an evaluation between them, so that
 * the gradient sums go through the host */
static void train(sn_trainer *t, int from, int to, double *loss, double *norm) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int s = from; s < to; s++) {
        batch(x, y, B * T, (uint64_t)s);
        ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
        if (s % 3 == 2) {
            double l;
            batch(x, y, B * T, 1000 + (uint64_t)s);
            ck_assert_msg(sn_trainer_eval(t, x, y, &l, &e) == SN_OK, "%s", e.msg);
            ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
        }
        sn_step_stats st;
        ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
        loss[s] = st.loss;
        norm[s] = st.grad_norm;
    }
}

static sn_trainer *trainer(sn_graph *g, sn_device *d, bool offload, const sn_pipeline_opts *po) {
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.device = d;
    o.offload = offload;
    o.compile = po;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

static sn_device *cpu(void) {
    sn_device *d;
    sn_err e;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

static void same_curves(const double *la, const double *na, const double *lb, const double *nb,
                        int from, int to) {
    for (int s = from; s < to; s++) {
        ck_assert_msg(la[s] == lb[s] && na[s] == nb[s], "step %d: loss %.9g vs %.9g, norm %.9g "
                      "vs %.9g", s, la[s], lb[s], na[s], nb[s]);
        ck_assert(isfinite(la[s]));
    }
}

START_TEST(offload_trains_the_same) {
    sn_err e;
    sn_device *plain = cpu(), *checked;
    ck_assert(sn_checked_device_new(cpu(), &checked, &e) == SN_OK);
    sn_graph *g1 = tiny(B), *g2 = tiny(B);
    sn_trainer *a = trainer(g1, plain, false, NULL), *b = trainer(g2, checked, true, NULL);
    ck_assert_int_eq(sn_trainer_host_state_bytes(a), 0);
    double la[STEPS], lb[STEPS], na[STEPS], nb[STEPS];
    train(a, 0, STEPS, la, na);
    train(b, 0, STEPS, lb, nb);
    same_curves(la, na, lb, nb, 0, STEPS);
    ck_assert_msg(la[STEPS - 1] < la[0] - 0.3, "loss %g -> %g: not learning", la[0], la[STEPS - 1]);
    sn_test_same_state(a, b);
    /* the device keeps the scalars only: m, v and the sums (3 N floats) left it */
    int64_t n3 = sn_trainer_state_bytes(a) - sn_trainer_state_bytes(b);
    ck_assert_int_gt(n3, 0);
    ck_assert_int_eq(n3 % 12, 0);
    ck_assert_int_ge(sn_trainer_host_state_bytes(b), n3 / 3 * 4); /* masters, m, v, sums */
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(plain);
    sn_device_free(checked);
}
END_TEST

/* The plan (offloaded, at precision prec) is what the trainer holds after a step with
 * accumulation: the device's arena peak + persistent block + buffers = the plan's total, the
 * host arrays its host figure. */
static void plan_is_the_trainer(sn_precision prec) {
    sn_err e;
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.precision = prec;
    sn_plan_opts o = {.batch = 2 * B, .micro_batch = B, .policy = SN_RECOMPUTE_NONE, .compile = &po,
                      .offload = SN_PLAN_OFFLOAD_ALWAYS};
    sn_plan pl, on_device;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e) == SN_OK, "%s", e.msg);
    o.offload = SN_PLAN_OFFLOAD_NEVER;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &on_device, &e) == SN_OK, "%s", e.msg);
    ck_assert(pl.offload && !on_device.offload);
    ck_assert_int_eq(pl.precision, prec);
    ck_assert_int_eq(pl.accum, 2);
    ck_assert_int_lt(pl.opt_device, on_device.opt_device);
    ck_assert_int_eq(on_device.total - pl.total, on_device.opt_device - pl.opt_device);
    sn_graph *g;
    ck_assert(sn_test_tiny_loss_graph(&tiny_shape, B, &g, &e) == SN_OK);
    po.backward = true;
    ck_assert_msg(sn_compile(g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_device *d = cpu();
    sn_trainer *t = trainer(g, d, true, &po);
    int32_t x[B * T], y[B * T];
    batch(x, y, B * T, 3);
    for (int k = 0; k < pl.accum; k++)
        ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    sn_step_stats st;
    ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_trainer_state_bytes(t), pl.opt_device);
    ck_assert_int_eq(sn_trainer_host_state_bytes(t), pl.opt_host);
    sn_exec_stats xs;
    sn_exec_stats_get(sn_trainer_exec(t), &xs);
    ck_assert_int_eq(xs.arena_peak_bytes + xs.persistent_bytes + xs.buffer_bytes + sn_test_eval_bytes(t), pl.total);
    sn_trainer_free(t);
    sn_device_free(d);
    sn_graph_free(g);
}

START_TEST(offload_plan_is_the_trainer) { plan_is_the_trainer(SN_PRECISION_FP32); }
END_TEST

/* bf16 (the autocast pass in the plan's compile, as in the session's): 16-bit activations where
 * autocast put them, fp32 weights; the plan is still the trainer's, and its arena is the 16-bit
 * program's, not fp32's (for tiny GPT-2 the casts' temporaries make it larger: 166400 against
 * 164352 bytes; for gpt2 B=4 T=256 it is 6% smaller) */
START_TEST(bf16_plan_is_the_trainer) {
    plan_is_the_trainer(SN_PRECISION_BF16);
    sn_err e;
    sn_pipeline_opts p32 = sn_pipeline_defaults(), p16 = p32;
    p16.precision = SN_PRECISION_BF16;
    sn_plan_opts o = {.batch = B, .policy = SN_RECOMPUTE_NONE, .compile = &p32};
    sn_plan a, b;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &a, &e) == SN_OK, "%s", e.msg);
    o.compile = &p16;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &b, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(a.weights, b.weights);
    ck_assert_int_eq(a.grads, b.grads);
    ck_assert_int_ne(b.arena, a.arena);
}
END_TEST

/* Saved with offload after half the steps and resumed with offload and without: the second
 * half's losses and the final state are the uninterrupted run's; in fp32 (_i 0) and bf16 (1:
 * the saved weights are the masters, the device's f32 lagging where only shadows went up). */
START_TEST(offload_resumes) {
    sn_err e;
    char path[] = "/tmp/sn_offload_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_device *d = cpu();
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.precision = SN_PRECISION_BF16;
    po.backward = true;
    const sn_pipeline_opts *pp = _i ? &po : NULL;
    sn_graph *g[3];
    for (int k = 0; k < 3; k++) {
        if (!_i) {
            g[k] = tiny(B);
            continue;
        }
        ck_assert(sn_test_tiny_loss_graph(&tiny_shape, B, &g[k], &e) == SN_OK);
        ck_assert_msg(sn_compile(g[k], &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    }
    sn_trainer *full = trainer(g[0], d, true, pp);
    double l[3][STEPS], n[3][STEPS];
    train(full, 0, STEPS / 2, l[0], n[0]);
    sn_run_state r = {0};
    ck_assert_msg(sn_checkpoint_save(path, full, &r, &e) == SN_OK, "%s", e.msg);
    train(full, STEPS / 2, STEPS, l[0], n[0]);
    for (int k = 1; k < 3; k++) {
        sn_trainer *t = trainer(g[k], d, k == 1, pp);
        sn_run_state rk = {0};
        ck_assert_msg(sn_checkpoint_load(path, t, &rk, &e) == SN_OK, "%s", e.msg);
        ck_assert_int_eq(sn_trainer_step_count(t), STEPS / 2);
        train(t, STEPS / 2, STEPS, l[k], n[k]);
        same_curves(l[0], n[0], l[k], n[k], STEPS / 2, STEPS);
        sn_test_same_state(full, t);
        sn_trainer_free(t);
        sn_run_state_free(&rk);
    }
    sn_run_state_free(&r);
    unlink(path);
    sn_trainer_free(full);
    for (int k = 0; k < 3; k++) sn_graph_free(g[k]);
    sn_device_free(d);
}
END_TEST

/* bf16 (the autocast pass: the linear layers read their weights through 16-bit shadows): with
 * offload the weights read only through their shadows go up as the shadows' bits (the host
 * AdamW's, offload.h sn_offload_segments), the rest in f32; the losses, norms, masters and
 * moments are the device-resident run's bit for bit (evaluations included: they keep the
 * shadows shared), and on the device the f32 weights of the first are never updated (what
 * proves the bits went up) while wte's, which the embedding's gather reads, are. */
START_TEST(bf16_weights_go_up_as_shadows) {
    sn_err e;
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.precision = SN_PRECISION_BF16;
    po.backward = true;
    sn_graph *g[2];
    sn_trainer *t[2];
    sn_device *d = cpu();
    double l[2][STEPS], n[2][STEPS];
    for (int i = 0; i < 2; i++) {
        ck_assert(sn_test_tiny_loss_graph(&tiny_shape, B, &g[i], &e) == SN_OK);
        ck_assert_msg(sn_compile(g[i], &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
        t[i] = trainer(g[i], d, i == 1, &po);
        train(t[i], 0, STEPS, l[i], n[i]);
    }
    same_curves(l[0], n[0], l[1], n[1], 0, STEPS);
    sn_test_same_state(t[0], t[1]);
    int stale = 0, wte = -1;
    for (int i = 0; i < sn_trainer_param_count(t[1]); i++) {
        const sn_node *p = sn_trainer_param_node(t[1], i);
        size_t k = (size_t)sn_numel(p);
        float *dev = malloc(4 * k), *master = malloc(4 * k);
        ck_assert(dev && master);
        ck_assert(sn_exec_get(sn_trainer_exec(t[1]), p, dev, &e) == SN_OK);
        ck_assert(sn_trainer_get_param(t[1], i, SN_PARAM_WEIGHTS, master, &e) == SN_OK);
        bool same = !memcmp(dev, master, 4 * k);
        stale += !same;
        if (!strcmp(p->name, "wte")) wte = same;
        free(dev);
        free(master);
    }
    ck_assert_msg(stale >= 4, "%d parameters went up as their shadows only", stale);
    ck_assert_msg(wte == 1, "wte's f32 weights on the device are not the masters (%d)", wte);
    for (int i = 0; i < 2; i++) {
        sn_trainer_free(t[i]);
        sn_graph_free(g[i]);
    }
    sn_device_free(d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("offload");
    tcase_add_test(tc, offload_trains_the_same);
    tcase_add_test(tc, offload_plan_is_the_trainer);
    tcase_add_test(tc, bf16_plan_is_the_trainer);
    tcase_add_loop_test(tc, offload_resumes, 0, 2);
    tcase_add_test(tc, bf16_weights_go_up_as_shadows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
