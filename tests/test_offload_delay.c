/* test_offload_delay.c: the delayed parameter update (sn_train_opts.offload_delay, runner.c):
 * on the CPU device, where the host's AdamW of step k runs at step k+1's update (the latest
 * point the order allows, so an input it shares with the next step shows), the steps read the
 * weights one update old: the losses, norms and the final state are those of the same
 * schedule written out by hand with a trainer without the delay (delay_ref.h), bit for bit.
 * Convention: "the same" is ==/memcmp, never a tolerance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "runtime/device.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "delay_ref.h"
#include "harness.h"
#include "run_copies_check.h"

enum { B = 2, T = 16, V = 64, STEPS = 10 };

static sn_test_tiny_shape tiny_shape = {V, T};

/* po: compiled with these options, the backward included (NULL: the backward alone) */
static sn_graph *tiny_with(const sn_pipeline_opts *po) {
    sn_graph *g;
    sn_err e;
    ck_assert_msg(sn_test_tiny_loss_graph(&tiny_shape, B, &g, &e) == SN_OK, "%s", e.msg);
    if (po) ck_assert_msg(sn_compile(g, po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    else ck_assert_msg(sn_backward(g, g->loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *tiny(void) { return tiny_with(NULL); }

/* clip: the global norm's bound (small enough that the tiny model's steps are clipped) */
static sn_trainer *trainer_with(sn_graph *g, sn_device *d, bool offload, bool delay, float clip,
                                const sn_pipeline_opts *po) {
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.grad_clip = clip;
    o.device = d;
    o.offload = offload;
    o.offload_delay = delay;
    o.compile = po;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

static sn_trainer *trainer(sn_graph *g, sn_device *d, bool offload, bool delay, float clip) {
    return trainer_with(g, d, offload, delay, clip, NULL);
}

static sn_device *cpu(void) {
    sn_device *d;
    sn_err e;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

/* one step on batch `seed`: its loss */
static double step(sn_trainer *t, uint64_t seed) {
    int32_t x[B * T], y[B * T];
    sn_test_lcg_batch(x, y, B * T, V, seed);
    sn_step_stats st;
    sn_err e;
    ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert(isfinite(st.loss));
    return st.loss;
}

/* Step 1 and step 2 read the initial weights w0 (the first update is in flight during step 2),
 * step 3 the weights after the first update w1 = AdamW(w0, g(w0, b1)): the delayed run's
 * losses on b1, b2, b3 are a fresh run's first loss on b1 and on b2 and, at step 2, the loss
 * of a run on b1 then b3. */
START_TEST(steps_read_the_weights_one_update_old) {
    sn_device *d = cpu();
    sn_graph *g[4] = {tiny(), tiny(), tiny(), tiny()};
    sn_trainer *dpu = trainer(g[0], d, true, true, 1.0f);
    double l1 = step(dpu, 1), l2 = step(dpu, 2), l3 = step(dpu, 3);
    sn_trainer *a = trainer(g[1], d, false, false, 1.0f), *b = trainer(g[2], d, false, false, 1.0f);
    sn_trainer *c = trainer(g[3], d, false, false, 1.0f);
    double a1 = step(a, 1), b2 = step(b, 2), c1 = step(c, 1), c3 = step(c, 3);
    ck_assert_msg(l1 == a1 && c1 == a1, "step 1: %.9g vs %.9g", l1, a1);
    ck_assert_msg(l2 == b2, "step 2 read other weights than w0: %.9g vs %.9g", l2, b2);
    ck_assert_msg(l3 == c3, "step 3 read other weights than w1: %.9g vs %.9g", l3, c3);
    ck_assert_msg(l2 != step(a, 2), "a run without the delay would not tell"); /* a reads w1 */
    for (int i = 0; i < 4; i++) sn_graph_free(g[i]);
    sn_trainer_free(dpu), sn_trainer_free(a), sn_trainer_free(b), sn_trainer_free(c);
    sn_device_free(d);
}
END_TEST

/* The schedule of delay_ref.h (accumulation every third step, an evaluation between two
 * micro-batches of step 5, steps clipped) with the delay, through the checked device (whose
 * pointers fault on the host), against the same written out: every loss, norm, the
 * evaluation's loss, and after a drain every weight and moment bit for bit; in fp32 (_i 0) and
 * bf16 (1: the linear layers' weights go up as their shadows' bits); and (2, fp32) on the CPU
 * device wrapped to copy at once (run_copies_check.h), where the update runs on its thread and
 * the gradients come down during each run, each chunk right after its last writer. */
START_TEST(delay_is_the_schedule_written_out) {
    sn_err e;
    sn_device *plain = cpu(), *checked;
    if (_i == 2) checked = sn_test_copy_at_once(cpu());
    else ck_assert(sn_checked_device_new(cpu(), &checked, &e) == SN_OK);
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.precision = SN_PRECISION_BF16;
    po.backward = true;
    const sn_pipeline_opts *pp = _i == 1 ? &po : NULL;
    sn_graph *g1 = tiny_with(pp), *g2 = tiny_with(pp);
    float clip = 0.5f;
    sn_trainer *dpu = trainer_with(g1, checked, true, true, clip, pp);
    sn_trainer *r = trainer_with(g2, plain, false, false, clip, pp);
    sn_test_delay ref;
    sn_test_delay_new(&ref, r);
    double la[STEPS], na[STEPS], lb[STEPS], nb[STEPS], ea = 0, eb = 1;
    sn_test_delay_run(dpu, NULL, STEPS, B * T, V, 4, la, na, &ea);
    sn_test_delay_run(r, &ref, STEPS, B * T, V, 4, lb, nb, &eb);
    int clipped = 0;
    for (int s = 0; s < STEPS; s++) {
        ck_assert_msg(la[s] == lb[s] && na[s] == nb[s], "step %d: loss %.9g vs %.9g, norm %.9g "
                      "vs %.9g", s + 1, la[s], lb[s], na[s], nb[s]);
        clipped += na[s] > clip;
    }
    ck_assert_msg(ea == eb, "evaluation %.9g vs %.9g", ea, eb);
    ck_assert_msg(clipped >= 3, "%d steps clipped: too few to test the clip", clipped);
    ck_assert_msg(la[STEPS - 1] < la[0] - 0.3, "loss %g -> %g: not learning", la[0], la[STEPS - 1]);
    sn_exec_stats xs;
    sn_exec_stats_get(sn_trainer_exec(dpu), &xs);
    ck_assert_int_eq(xs.copies_in_run > 0, _i == 2); /* the checked CPU copies after the run */
    ck_assert_msg(sn_trainer_drain(dpu, &e) == SN_OK, "%s", e.msg);
    sn_test_delay_drain(&ref);
    sn_test_same_state(dpu, r);
    sn_test_delay_free(&ref);
    sn_trainer_free(dpu);
    sn_trainer_free(r);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(plain);
    sn_device_free(checked);
}
END_TEST

/* A drain (here: reading a weight) finishes the update in flight and puts it on the device: the
 * step after it reads w1, as a run without the delay does; and what is read is w1. */
START_TEST(a_drain_makes_the_next_step_read_the_newest_weights) {
    sn_err e;
    sn_device *d = cpu();
    sn_graph *g1 = tiny(), *g2 = tiny();
    sn_trainer *dpu = trainer(g1, d, true, true, 1.0f), *a = trainer(g2, d, false, false, 1.0f);
    step(dpu, 1);
    step(a, 1);
    int n = (int)sn_numel(sn_trainer_param_node(a, 0));
    float *x = malloc(4 * (size_t)n), *y = malloc(4 * (size_t)n);
    ck_assert(sn_trainer_get_param(dpu, 0, SN_PARAM_WEIGHTS, x, &e) == SN_OK);
    ck_assert(sn_trainer_get_param(a, 0, SN_PARAM_WEIGHTS, y, &e) == SN_OK);
    ck_assert_msg(!memcmp(x, y, 4 * (size_t)n), "the weights read are not w1");
    ck_assert(step(dpu, 2) == step(a, 2));
    free(x);
    free(y);
    sn_trainer_free(dpu);
    sn_trainer_free(a);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(d);
}
END_TEST

/* Saved mid-run (the save drains) and resumed with the delay: the resumed run's steps are the
 * uninterrupted run's (whose step after the save reads the drained weights too). */
START_TEST(delay_resumes) {
    sn_err e;
    char path[] = "/tmp/sn_offload_delay_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_device *d = cpu();
    sn_graph *g1 = tiny(), *g2 = tiny();
    sn_trainer *full = trainer(g1, d, true, true, 1.0f);
    for (int s = 0; s < 3; s++) step(full, (uint64_t)s);
    sn_run_state rs = {0};
    ck_assert_msg(sn_checkpoint_save(path, full, &rs, &e) == SN_OK, "%s", e.msg);
    sn_trainer *t = trainer(g2, d, true, true, 1.0f);
    sn_run_state rk = {0};
    ck_assert_msg(sn_checkpoint_load(path, t, &rk, &e) == SN_OK, "%s", e.msg);
    for (int s = 3; s < 7; s++) {
        double a = step(full, (uint64_t)s), b = step(t, (uint64_t)s);
        ck_assert_msg(a == b, "step %d: %.9g vs %.9g", s + 1, a, b);
    }
    sn_test_same_state(full, t);
    sn_run_state_free(&rs);
    sn_run_state_free(&rk);
    unlink(path);
    sn_trainer_free(full);
    sn_trainer_free(t);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(d);
}
END_TEST

/* The run's downloads (device.h sn_exec_run_copies), chunks of 64 gradients: on the CPU device
 * (_i 0) after the run, none during it, so that even one queued a kernel early lands the run's
 * gradients; on the CPU device copying at once (1), during the run, each right after the last
 * kernel that writes it, which lands the run's gradients too, while one kernel early lands other
 * bytes (run_copies_check.h). The chunks are ready at several points, most before the end. */
START_TEST(gradients_come_down_after_their_last_writer) {
    sn_device *d = _i ? sn_test_copy_at_once(cpu()) : cpu();
    sn_graph *g = tiny();
    sn_trainer *t = trainer(g, d, false, false, 1.0f);
    sn_test_run_copies r;
    sn_test_run_copies_check(t, 64, B * T, V, &r);
    ck_assert_int_eq(r.during, _i ? r.chunks : 0);
    if (_i) ck_assert_msg(r.early_differ > 0, "no chunk copied a kernel early differs");
    else ck_assert_int_eq(r.early_differ, 0);
    ck_assert_msg(r.points > 4 && 2 * r.before_last > r.chunks, "%d chunks ready at %d points, "
                  "%d before the last kernel", r.chunks, r.points, r.before_last);
    printf("test_offload_delay: %s: %d chunks of gradients, %d copied during the run, ready after "
           "%d kernels, %d before the last; one kernel early, %d of the %d written differ\n",
           d->name, r.chunks, r.during, r.points, r.before_last, r.early_differ, r.written);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

typedef struct {
    sn_device *d;
    const sn_exec_run_copy *c; /* the list given */
    bool *seen;                /* [n]: ready called for upload i */
    int calls, launches, uploads; /* at the first call */
    int last_after;            /* the kernel of the last call's upload */
    bool out_of_order;         /* a call for an earlier kernel than the call before */
} ready_seen;

static sn_status ready(void *arg, int i, sn_err *e) {
    (void)e;
    ready_seen *r = arg;
    if (!r->calls++) {
        int early;
        r->launches = sn_test_upload_order_launches(r->d);
        sn_test_upload_order_count(r->d, &r->uploads, &early);
    } else {
        r->out_of_order |= r->c[i].after < r->last_after;
    }
    ck_assert_msg(!r->seen[i], "ready called twice for upload %d", i);
    r->seen[i] = true;
    r->last_after = r->c[i].after;
    return SN_OK;
}

/* A run's uploads (device.h sn_exec_run_uploads), chunks of 64 of the trained weights, each
 * bringing the bytes the device holds (so the run's numbers stay), on the device that records
 * the order (run_copies_check.h): each queued after the event of the last kernel that uses its
 * bytes, none early; the host's ready called once an upload, each before it, in the order of
 * their kernels, the first after every kernel of the run was queued; the same micro-batch's
 * gradients as without them; the list gone after the run. Planted: queued one kernel early,
 * every chunk some kernel uses is early. */
START_TEST(uploads_follow_the_last_use) {
    sn_device *d = sn_test_upload_order(cpu());
    sn_graph *g = tiny();
    sn_trainer *t = trainer(g, d, false, false, 1.0f);
    step(t, 1);
    sn_exec *x = sn_trainer_exec(t);
    const sn_program *p = sn_trainer_program(t);
    int64_t flat_n = p->layout.flat_n, chunk = 64;
    int k = (int)((flat_n + chunk - 1) / chunk), used = 0, uploads, early;
    sn_err e;
    float *host = sn_exec_host_alloc(x, 4 * flat_n, &e), *want = malloc(4 * (size_t)flat_n),
          *got = malloc(4 * (size_t)flat_n);
    sn_exec_run_copy *c = calloc((size_t)k, sizeof *c);
    ck_assert(host && want && got && c);
    sn_exec_ref params = sn_exec_block_ref(p->layout.params), grads = sn_exec_block_ref(p->layout.grads);
    ck_assert(sn_exec_download(x, host, params, 4 * flat_n, &e) == SN_OK);
    for (int i = 0; i < k; i++) {
        int64_t lo = i * chunk, len = flat_n - lo < chunk ? flat_n - lo : chunk;
        sn_exec_ref r = sn_exec_block_ref(p->layout.params + 4 * lo);
        c[i] = (sn_exec_run_copy){sn_exec_free_after(x, r, 4 * len), r, host + lo, 4 * len};
        ck_assert(c[i].after >= -1 && c[i].after < p->n_kernels);
        used += c[i].after >= 0;
    }
    int32_t xb[B * T], yb[B * T];
    sn_test_lcg_batch(xb, yb, B * T, V, 7);
    ck_assert(sn_trainer_accumulate(t, xb, yb, NULL, &e) == SN_OK); /* without uploads */
    ck_assert(sn_exec_download(x, want, grads, 4 * flat_n, &e) == SN_OK);
    for (int plant = 0; plant < 2; plant++) {
        for (int i = 0; plant && i < k; i++) c[i].after -= c[i].after >= 0;
        bool *seen = calloc((size_t)k, 1);
        ck_assert(seen);
        ready_seen rs = {.d = d, .c = c, .seen = seen};
        sn_test_upload_order_count(d, &uploads, &early);
        int before = sn_test_upload_order_launches(d);
        ck_assert_msg(sn_exec_run_uploads(x, c, k, ready, &rs, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_trainer_accumulate(t, xb, yb, NULL, &e) == SN_OK, "%s", e.msg);
        sn_test_upload_order_count(d, &uploads, &early);
        ck_assert_int_eq(rs.calls, k); /* once an upload, each before it, by their kernels */
        ck_assert(!rs.out_of_order);
        ck_assert_int_eq(rs.launches - before, p->n_kernels);
        ck_assert_int_eq(rs.uploads, 0);
        free(seen);
        ck_assert_int_eq(uploads, k);
        ck_assert_int_eq(early, plant ? used : 0);
        sn_exec_stats st;
        sn_exec_stats_get(x, &st);
        ck_assert_int_eq(st.uploads_in_run, k);
        ck_assert(sn_exec_download(x, got, grads, 4 * flat_n, &e) == SN_OK);
        ck_assert_msg(!memcmp(got, want, 4 * (size_t)flat_n), "the run's gradients changed");
    }
    ck_assert(sn_trainer_accumulate(t, xb, yb, NULL, &e) == SN_OK); /* the list is gone */
    sn_test_upload_order_count(d, &uploads, &early);
    ck_assert_int_eq(uploads, 0);
    printf("test_offload_delay: %d chunks of weights go up during a run, %d of them after a kernel "
           "that uses them; queued one kernel early, %d early\n", k, used, used);
    sn_exec_host_free(x, host);
    free(want);
    free(got);
    free(c);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

/* The delayed update where the device copies asynchronously (the order-recording CPU device:
 * the host's AdamW on its own thread), fp32 (_i 0) and bf16 (1: the linear layers' weights go up
 * as their shadows' bits), evaluations (drains) after steps 3 and 7: each step but the first
 * and those after an evaluation, its update's predecessor goes
 * up during the step's run (sn_trainer_step: the step's last micro-batch), none of it early, with
 * the losses of the CPU device's delayed run (its updates run at the next update, its weights go
 * up there), bit for bit; the last update's weights go up at the drain that ends the run. */
START_TEST(the_weights_go_up_during_the_last_run) {
    sn_device *d[2] = {cpu(), sn_test_upload_order(cpu())};
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.precision = SN_PRECISION_BF16;
    po.backward = true;
    const sn_pipeline_opts *pp = _i ? &po : NULL; /* bf16: the weights up as their shadows' bits */
    sn_graph *g[2];
    sn_trainer *t[2];
    double l[2][STEPS], ev[2][STEPS] = {{0}};
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int i = 0; i < 2; i++) {
        g[i] = tiny_with(pp);
        t[i] = trainer_with(g[i], d[i], true, true, 0.5f, pp);
        for (int s = 0; s < STEPS; s++) {
            l[i][s] = step(t[i], 300 + (uint64_t)s);
            if (s % 4 != 2) continue; /* evaluations (drains) after steps 3 and 7 */
            sn_test_lcg_batch(x, y, B * T, V, 900 + (uint64_t)s);
            ck_assert_msg(sn_trainer_eval(t[i], x, y, &ev[i][s], &e) == SN_OK, "%s", e.msg);
        }
    }
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(l[0][s] == l[1][s] && ev[0][s] == ev[1][s], "step %d: loss %.9g against "
                      "%.9g, evaluation %.9g against %.9g", s + 1, l[1][s], l[0][s], ev[1][s], ev[0][s]);
    int uploads, early;
    sn_test_upload_order_count(d[1], &uploads, &early);
    sn_offload_times ot[2];
    for (int i = 0; i < 2; i++) sn_trainer_offload_times(t[i], &ot[i]);
    ck_assert_int_eq(ot[0].ups_in_run, 0);
    ck_assert_int_eq(ot[1].ups_in_run, STEPS - 3); /* the steps after 1, 3 and 7 read drained weights */
    ck_assert_int_gt(uploads, 0);
    ck_assert_int_eq(early, 0);
    ck_assert(sn_trainer_drain(t[1], &e) == SN_OK); /* the last update's weights go up here */
    sn_test_upload_order_count(d[1], &uploads, &early);
    ck_assert_int_gt(uploads, 0);
    ck_assert_int_eq(early, 0);
    ck_assert(sn_trainer_drain(t[1], &e) == SN_OK); /* and nothing is left to send */
    sn_test_upload_order_count(d[1], &uploads, &early);
    ck_assert_int_eq(uploads, 0);
    printf("test_offload_delay: %s: %d updates went up during the next step's run, none early; "
           "the losses are the CPU device's\n", _i ? "bf16" : "fp32", ot[1].ups_in_run);
    for (int i = 0; i < 2; i++) {
        sn_trainer_free(t[i]);
        sn_graph_free(g[i]);
        sn_device_free(d[i]);
    }
}
END_TEST

/* The delay without offload, or without a device, is refused by name. */
START_TEST(delay_needs_offload) {
    sn_err e;
    sn_device *d = cpu();
    sn_graph *g = tiny();
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.device = d;
    o.offload_delay = true;
    ck_assert(!sn_trainer_new(g, &o, &e));
    ck_assert_int_eq(e.code, SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "offload_delay") && strstr(e.msg, "offloaded"), "%s", e.msg);
    o.offload = true, o.device = NULL;
    ck_assert(!sn_trainer_new(g, &o, &e));
    ck_assert_msg(strstr(e.msg, "interpreter"), "%s", e.msg);
    o.device = d, o.offload_delay = false, o.offload_threads = 4; /* the update's threads: */
    ck_assert(!sn_trainer_new(g, &o, &e)); /* without the delay */
    ck_assert_msg(e.code == SN_ERR_INVALID && strstr(e.msg, "offload_threads 4") &&
                  strstr(e.msg, "need offload_delay"), "%s", e.msg);
    o.offload_delay = true, o.offload_threads = -1; /* not a count */
    ck_assert(!sn_trainer_new(g, &o, &e));
    ck_assert_msg(e.code == SN_ERR_INVALID && strstr(e.msg, "offload_threads -1"), "%s", e.msg);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("offload_delay");
    TCase *tc = tcase_create("offload_delay");
    tcase_add_test(tc, steps_read_the_weights_one_update_old);
    tcase_add_loop_test(tc, delay_is_the_schedule_written_out, 0, 3);
    tcase_add_loop_test(tc, gradients_come_down_after_their_last_writer, 0, 2);
    tcase_add_test(tc, a_drain_makes_the_next_step_read_the_newest_weights);
    tcase_add_test(tc, delay_resumes);
    tcase_add_test(tc, delay_needs_offload);
    tcase_add_test(tc, uploads_follow_the_last_use);
    tcase_add_loop_test(tc, the_weights_go_up_during_the_last_run, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
