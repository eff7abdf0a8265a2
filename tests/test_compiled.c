/* test_compiled.c: the compiled CPU program (fuse, memplan, LLVM-JIT kernels, GEMM library,
 * executor) against the reference interpreter on tiny GPT-2 with attention fused and the
 * vocabulary padded: the loss and every gradient, the measured arena peak against the plan,
 * and a few training steps through the trainer on both backends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "train/train.h"
#include "harness.h"
#include "tiny_gpt2.h"

START_TEST(program_matches_interpreter) {
    sn_graph *g = tiny_training_graph(true);
    tiny_memory m = tiny_check_compiled(g, 3, "attention fused");
    ck_assert_int_eq(m.arena_measured, m.arena_planned); /* the plan's peak is the real one */
    /* reuse: the peak is at most 60% of every value added up (the GELU epilogues store no f32
     * product of c_fc or of its dX: they shrank the sum, not the peak, 259 KiB; 55% before the
     * ACCUM epilogues, whose GEMMs store no product apart from its sum and write wte's gradient
     * in place over the embedding backward's part: the sum 457,984 bytes, the peak 271,488) */
    ck_assert_msg(100 * m.arena_planned <= 60 * m.arena_no_reuse, "planned %lld, no reuse %lld",
                  (long long)m.arena_planned, (long long)m.arena_no_reuse);
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
        sn_graph *g = tiny_training_graph(true);
        sn_train_opts o;
        sn_train_opts_default(&o, 5);
        o.device = backend ? d : NULL;
        sn_trainer *t = sn_trainer_new(g, &o, &e);
        ck_assert_msg(t, "%s", e.msg);
        for (int s = 0; s < 5; s++) {
            int32_t x[TINY_B * TINY_T], y[TINY_B * TINY_T];
            tiny_tokens(x, y, 100); /* one batch: the loss must fall */
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

/* The same options given to both entries (as `sinter train --dump-after fuse` does): the
 * caller's sn_compile without a program runs the graph passes and dumps nothing of fuse; the
 * trainer's sn_pipeline_kernels (the graph now has its backward) runs fuse and memplan and
 * dumps the program the trainer runs, once. */
START_TEST(trainer_dumps_the_program_it_runs) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, TINY_B, TINY_T, &m, &e) == SN_OK, "%s", e.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.backward = true;
    po.dump_after = "fuse";
    po.dump = f;
    ck_assert_msg(sn_compile(g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert(g->has_backward);
    fflush(f);
    ck_assert_int_eq(len, 0);
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 1);
    o.device = d;
    o.compile = &po;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    fclose(f);
    const sn_program *p = sn_trainer_program(t);
    ck_assert_msg(strstr(buf, "# after pass fuse\n") == buf, "%s", buf);
    ck_assert_msg(!strstr(buf + 1, "# after pass"), "dumped twice: %s", buf);
    int lines = 0; /* one line per kernel */
    for (const char *q = buf; (q = strchr(q, '\n')); q++) lines++;
    ck_assert_int_ge(lines, p->n_kernels + 1);
    const sn_kernel *last = p->kernels[p->n_kernels - 1];
    ck_assert_msg(strstr(buf, last->name), "the last kernel %s is not in the dump", last->name);
    free(buf);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

/* Programs no machine can hold: the planner refuses one larger than the target's memory, and
 * the CPU device refuses an arena larger than RAM + swap before touching it (Linux overcommit
 * would let the malloc succeed); both are statuses whose message says what to do. */
START_TEST(impossible_arena_is_a_status) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(1 << 20, 1 << 18)); /* 1 TiB */
    sn_graph_add_output(g, sn_sum(g, sn_exp(g, sn_exp(g, x)), 1, false));
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_err e = {0};
    sn_program *p;
    sn_target small = sn_target_cuda(75);
    small.memory_bytes = (int64_t)16 << 30;
    sn_pipeline_opts o = {.target = &small};
    ck_assert_int_eq(sn_compile(g, &o, &p, NULL, &e), SN_ERR_OOM);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(e.msg, "out of memory: the program needs 2048.0 GiB") &&
                  strstr(e.msg, "but cuda sm_75 has 16.0 GiB: use a smaller --batch or --seq"), "%s", e.msg);

    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(1, &d, &e) == SN_OK, "%s", e.msg);
    sn_exec *xe = (sn_exec *)&e; /* overwritten: NULL on failure */
    ck_assert_int_eq(sn_exec_new(d, p, &xe, &e), SN_ERR_OOM);
    ck_assert_ptr_null(xe);
    ck_assert_msg(strstr(e.msg, "the program's arena (the activations and gradients one step reuses) "
                                "does not fit on the device: out of memory: the CPU device cannot "
                                "allocate 1024.0 GiB") && strstr(e.msg, "of RAM and swap: use a smaller --batch"),
                  "%s", e.msg);
    sn_device_free(d);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* A program records the target it was compiled for, and a device of another kind refuses it
 * with a message naming both and the fix; the reference interpreter is a device of its own. */
START_TEST(program_for_another_target_is_refused) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 8));
    sn_graph_add_output(g, sn_sum(g, sn_exp(g, x), 1, false));
    sn_err e = {0};
    sn_target gpu = sn_target_cuda(80);
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &gpu}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(p->target.kind, SN_TARGET_CUDA);
    ck_assert_int_eq(p->target.sm, 80);
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(1, &d, &e) == SN_OK, "%s", e.msg);
    sn_exec *xe = (sn_exec *)&e; /* overwritten: NULL on failure */
    ck_assert_int_eq(sn_exec_new(d, p, &xe, &e), SN_ERR_INVALID);
    ck_assert_ptr_null(xe);
    ck_assert_msg(strstr(e.msg, "the program was compiled for cuda sm_80, but the device is cpu") &&
                  strstr(e.msg, "compile it with sn_pipeline_opts.target = &device->target"), "%s", e.msg);
    sn_program_free(p);
    /* for the device's target it runs; the interpreter's program likewise on the interpreter */
    sn_device *it;
    ck_assert_msg(sn_interp_device_new(&it, &e) == SN_OK, "%s", e.msg);
    float in[32], y[2][4];
    for (int i = 0; i < 32; i++) in[i] = (float)i / 32;
    sn_device *devs[2] = {d, it};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &devs[k]->target}, &p, NULL, &e) == SN_OK,
                      "%s", e.msg);
        sn_exec *xk;
        ck_assert_msg(sn_exec_new(devs[k], p, &xk, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_exec_set(xk, x, in, &e) == SN_OK && sn_exec_run(xk, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_exec_get(xk, g->outputs[0], y[k], &e) == SN_OK, "%s", e.msg);
        sn_exec_free(xk);
        sn_program_free(p);
    }
    for (int r = 0; r < 4; r++) /* sums of 8 exponentials near 1..2.7 */
        ck_assert_msg(fabsf(y[0][r] - y[1][r]) <= 1e-5f * fabsf(y[1][r]), "row %d: cpu %.9g, "
                      "interpreter %.9g", r, y[0][r], y[1][r]);
    sn_device_free(it);
    sn_device_free(d);
    sn_graph_free(g);
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
    ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) && !sn_exec_new(d, p, &x, &e), "%s", e.msg);
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

/* Ops whose values are bf16 or f16 hold them rounded, on the CPU device as in the interpreter:
 * gelu(x) + x*x in bf16 is three roundings, not one of the f32 sum (gpu_check's "pointwise bf16
 * and f16" found the CPU device 4e-3 off before). */
START_TEST(sixteen_bit_ops_round) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(5, 67)), *y = sn_input(g, "y", SN_F32, SN_SHAPE(5, 67));
    sn_node *xb = sn_cast(g, x, SN_BF16), *yh = sn_cast(g, y, SN_F16);
    sn_node *o[2] = {sn_cast(g, sn_add(g, sn_gelu(g, xb), sn_mul(g, xb, xb)), SN_F32),
                     sn_cast(g, sn_mul(g, yh, sn_exp(g, yh)), SN_F32)};
    sn_graph_add_output(g, o[0]);
    sn_graph_add_output(g, o[1]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_program *p;
    sn_exec *ex;
    ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) && !sn_exec_new(d, p, &ex, &e), "%s", e.msg);
    sn_interp *it = sn_interp_new(g, false);
    float xv[335], yv[335];
    sn_rng r = sn_rng_seed(3);
    for (int i = 0; i < 335; i++) xv[i] = 4 * sn_rng_uniform(&r) - 2, yv[i] = 2 * sn_rng_uniform(&r) - 1;
    ck_assert(!sn_exec_set(ex, x, xv, &e) && !sn_exec_set(ex, y, yv, &e));
    ck_assert(!sn_interp_set(it, x, xv, &e) && !sn_interp_set(it, y, yv, &e));
    ck_assert_msg(!sn_exec_run(ex, &e) && !sn_interp_run(it, &e), "%s", e.msg);
    for (int k = 0; k < 2; k++) {
        float got[335];
        double gd[335];
        ck_assert(!sn_exec_get(ex, o[k], got, &e));
        for (int i = 0; i < 335; i++) gd[i] = got[i];
        /* the same roundings give the same values (the one-rounding sum was 4e-3 off) */
        sn_check_close(k ? "f16 y exp(y)" : "bf16 gelu(x) + x x", gd, sn_interp_value(it, o[k]),
                       335, 1e-5, 1);
    }
    sn_interp_free(it);
    sn_exec_free(ex);
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
    tcase_add_test(tc, sixteen_bit_ops_round);
    tcase_add_test(tc, program_matches_interpreter);
    tcase_add_test(tc, trainer_on_both_backends);
    tcase_add_test(tc, trainer_dumps_the_program_it_runs);
    tcase_add_test(tc, impossible_arena_is_a_status);
    tcase_add_test(tc, program_for_another_target_is_refused);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
