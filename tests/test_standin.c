/* test_standin.c: runtime/cuda end to end on the stand-in driver (tests/standin: libcuda over host
 * memory and the SIMT simulator, NVRTC wrapping the real one, cuBLASLt on the CPU): tiny GPT-2
 * trains 20 steps with the CPU device's losses (f32, 16-bit, dropout, a tiny LLaMA), kernel
 * variants train to the bit as the kernels they replace, LoRA over a 16-bit base as over the f32
 * base, the optimizer offloaded to the host with its copies in flight, device pointers fault on
 * the host. cuBLASLt: test_standin_gemm.c; the kernel cache and failures: test_standin_cache.c.
 * Convention (standin_check.h): each test, a forked process, sets the stand-in's environment
 * before it opens the device. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "standin_check.h"
#include "interp/interp.h"
#include "models/gpt2.h"
#include "program/program.h"
#include "runtime/cuda/cuda_rt.h"
#include "support/cores.h"
#include "support/clock.h"
#include "train/plan.h"
#include "examples/llama/llama.h"
#include "delay_ref.h"
#include "run_copies_check.h"

/* ---- training ---- */

START_TEST(tiny_gpt2_trains_like_the_cpu_device) {
    if (!have_nvrtc()) return;
    sn_err e;
    sn_device *cpu, *gpu = cuda(NULL);
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    sn_graph *g1 = tiny(), *g2 = tiny();
    sn_trainer *a = trainer_on(g1, cpu, &e);
    ck_assert_msg(a, "%s", e.msg);
    sn_trainer *b = trainer_on(g2, gpu, &e);
    ck_assert_msg(b, "%s", e.msg);
    double la[STEPS], lb[STEPS], na[STEPS], nb[STEPS];
    ck_assert_msg(train(a, STEPS, la, na, &e) == SN_OK, "%s", e.msg);
    double t0 = sn_clock_s();
    ck_assert_msg(train(b, STEPS, lb, nb, &e) == SN_OK, "%s", e.msg);
    double secs = sn_clock_s() - t0;
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        ck_assert_msg(fabs(la[s] - lb[s]) <= 1e-5 && fabs(na[s] - nb[s]) <= 1e-4 * fmax(1, na[s]),
                      "step %d: loss %.9g (cpu) vs %.9g (cuda), norm %.9g vs %.9g", s, la[s], lb[s],
                      na[s], nb[s]);
        worst = fmax(worst, fabs(la[s] - lb[s]));
    }
    ck_assert_msg(la[STEPS - 1] < la[0] - 0.5, "loss %g -> %g: not learning", la[0], la[STEPS - 1]);
    sn_cuda_stats st;
    sn_cuda_stats_get(gpu, &st);
    ck_assert_int_eq(st.sm, 80);
    ck_assert_int_gt(st.gemm_plans, 0);
    ck_assert_int_ge(st.graphs_captured, 2); /* the training and the evaluation sequences */
    ck_assert_int_gt(st.graph_launches, STEPS);
    printf("test_standin: 20 steps of tiny GPT-2 on the stand-in in %.1f s: loss %.4f -> %.4f, "
           "largest difference from the cpu device %.2g; %d GEMM plans, %d graphs captured, %d "
           "replays, %d eager flushes\n", secs, lb[0], lb[STEPS - 1], worst, st.gemm_plans,
           st.graphs_captured, st.graph_launches, st.eager_steps);
    /* events time the stream */
    void *e0 = gpu->event_new(gpu, &e), *e1 = gpu->event_new(gpu, &e);
    double secs_ev = -1;
    ck_assert(e0 && e1);
    ck_assert_msg(gpu->event_record(gpu, e0, &e) == SN_OK && gpu->event_record(gpu, e1, &e) == SN_OK &&
                  gpu->sync(gpu, &e) == SN_OK && gpu->event_elapsed(gpu, e0, e1, &secs_ev, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert(secs_ev >= 0 && secs_ev < 10);
    gpu->event_free(gpu, e0);
    gpu->event_free(gpu, e1);
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(cpu);
    sn_device_free(gpu);
}
END_TEST

/* The FINISH kernels joined into the next norm backward pair's launch (kernel.h: tail, the CUDA
 * target's join_finish) train tiny GPT-2 and a tiny LLaMA (f32 and bf16: _i) to the bit as the
 * separate kernels do: the same losses and gradient norms over 6 steps, the joined GPT-2
 * program two launches fewer a layer (the step's last FINISH alone). */
START_TEST(joined_finish_trains_to_the_bit) {
    if (!have_nvrtc()) return;
    enum { N = 6 };
    sn_precision p = _i % 2 ? SN_PRECISION_BF16 : SN_PRECISION_FP32;
    bool llama = _i >= 2;
    sn_device *gpu = cuda(NULL);
    double loss[2][N], norm[2][N];
    int launches[2], joined[2];
    for (int j = 0; j < 2; j++) {
        sn_target t = gpu->target;
        ck_assert(t.join_finish); /* the CUDA target's default */
        t.join_finish = j == 1;
        sn_pipeline_opts po = {.target = &t};
        sn_graph *g = llama ? llama_tiny_at(p, 32) : tiny_at(p);
        sn_trainer *tr = trainer_with(g, gpu, &po, N);
        const sn_program *prog = sn_trainer_program(tr);
        launches[j] = prog->n_kernels;
        joined[j] = 0;
        for (int k = 0; k < prog->n_kernels; k++) joined[j] += prog->kernels[k]->tail != NULL;
        run_steps(tr, N, loss[j], norm[j], j ? "joined" : "separate");
        sn_trainer_free(tr);
        sn_graph_free(g);
    }
    ck_assert_int_eq(joined[0], 0);
    if (!llama) ck_assert_int_eq(joined[1], 4); /* tiny's 2 layers: 5 pairs, the last FINISH alone */
    ck_assert_int_eq(launches[0] - launches[1], joined[1]);
    for (int s = 0; s < N; s++)
        ck_assert_msg(loss[0][s] == loss[1][s] && norm[0][s] == norm[1][s], "%s step %d: loss "
                      "%.9g (separate) vs %.9g (joined), norm %.9g vs %.9g", sn_precision_name(p),
                      s, loss[0][s], loss[1][s], norm[0][s], norm[1][s]);
    printf("test_standin: %s tiny %s, the FINISH kernels joined (%d launches, %d fewer): the "
           "same bits over %d steps, loss %.6f -> %.6f\n", sn_precision_name(p),
           llama ? "LLaMA" : "GPT-2", launches[1],
           launches[0] - launches[1], N, loss[1][0], loss[1][N - 1]);
    sn_device_free(gpu);
}
END_TEST

/* The classifier taking its rows in turn (codegen/cuda/cuda_row.h sn_cu_row_prefetch_plan; the
 * device's target: its SM count sizes the grid, row_prefetch allows it) through the whole
 * trainer (the launch's dynamic shared memory, the grid): tiny GPT-2 in bf16, the loss its one
 * output (its bf16 logits are the classifier's input as stored), over 6 steps, the
 * same bits with a block a row (the stand-in's 108 SMs outnumber its 32 rows), 3 blocks taking
 * the rows in turn (one SM), and the classifier that reads its row itself (row_prefetch off). */
START_TEST(classifier_rows_in_turn_train_to_the_bit) {
    if (!have_nvrtc()) return;
    enum { N = 6 };
    double loss[3][N], norm[3][N];
    unsigned grid[3] = {0};
    for (int j = 0; j < 3; j++) {
        sn_device *gpu = cuda(NULL);
        ck_assert(gpu->target.row_prefetch && gpu->target.sm_count == 108);
        if (j == 1) gpu->target.sm_count = 1;
        if (j == 2) gpu->target.row_prefetch = false;
        sn_pipeline_opts po = {.target = &gpu->target};
        sn_graph *g = tiny_outputs(SN_PRECISION_BF16, true); /* bf16 logits */
        sn_trainer *tr = trainer_with(g, gpu, &po, N);
        const sn_program *prog = sn_trainer_program(tr);
        for (int k = 0; k < prog->n_kernels; k++) {
            const sn_kernel *ker = prog->kernels[k];
            if (ker->kind == SN_KER_ROW && ker->anchor2 && ker->stage != SN_SUM_FINISH) {
                sn_cuda_dims d = sn_cuda_launch_dims(ker, &gpu->target);
                ck_assert_msg(j == 2 ? d.shared_bytes == 0 : d.shared_bytes == 2 * V, "%s: %u bytes "
                              "of dynamic shared memory", ker->name, d.shared_bytes);
                grid[j] = d.grid[0];
            }
        }
        run_steps(tr, N, loss[j], norm[j], j == 1 ? "rows in turn" : "a block a row");
        sn_trainer_free(tr);
        sn_graph_free(g);
        sn_device_free(gpu);
    }
    ck_assert_int_eq(grid[0], B * T);
    ck_assert_int_eq(grid[1], 3);
    ck_assert_int_eq(grid[2], B * T);
    for (int j = 1; j < 3; j++)
        for (int s = 0; s < N; s++)
            ck_assert_msg(loss[0][s] == loss[j][s] && norm[0][s] == norm[j][s], "step %d: loss %.9g "
                          "vs %.9g (%s), norm %.9g vs %.9g", s, loss[0][s], loss[j][s],
                          j == 1 ? "rows in turn" : "no prefetch", norm[0][s], norm[j][s]);
    printf("test_standin: bf16 tiny GPT-2's classifier a block a row, 3 blocks taking its %d rows "
           "in turn, and reading its rows itself: the same bits over %d steps, loss %.6f -> %.6f\n",
           B * T, N, loss[1][0], loss[1][N - 1]);
}
END_TEST

/* Grouped-query dk and dv in parts (sn_target.att_dkv_parts; program/kernel.h) through the whole
 * trainer (memplan's scratch, the executor, the stand-in): a tiny bf16 LLaMA with head size 16
 * (4 query heads on 2 kv heads, tensor cores) trains as with one dk/dv kernel a layer over 6
 * steps: the losses within 1e-3 (dk and dv's f32 sums in another order, then rounded to bf16)
 * and the gradient norms within 1e-2 relative, two kernels a layer where there was one. */
START_TEST(dkv_parts_train_as_one_kernel) {
    if (!have_nvrtc()) return;
    enum { N = 6 };
    sn_device *gpu = cuda(NULL);
    double loss[2][N], norm[2][N];
    int parts[2];
    for (int j = 0; j < 2; j++) {
        sn_target t = gpu->target;
        ck_assert(t.att_dkv_parts); /* the CUDA target's default */
        t.att_dkv_parts = j == 1;
        sn_pipeline_opts po = {.target = &t};
        sn_graph *g = llama_tiny_at(SN_PRECISION_BF16, 64); /* head size 16 */
        sn_trainer *tr = trainer_with(g, gpu, &po, N);
        const sn_program *prog = sn_trainer_program(tr);
        parts[j] = 0;
        for (int k = 0; k < prog->n_kernels; k++) parts[j] += prog->kernels[k]->dkv_parts;
        run_steps(tr, N, loss[j], norm[j], j ? "parts" : "one kernel");
        sn_trainer_free(tr);
        sn_graph_free(g);
    }
    ck_assert_int_eq(parts[0], 0);
    ck_assert_int_eq(parts[1], 4); /* two layers: a PARTIAL and its sum each */
    for (int st = 0; st < N; st++)
        ck_assert_msg(fabs(loss[0][st] - loss[1][st]) <= 1e-3 &&
                      fabs(norm[0][st] - norm[1][st]) <= 1e-2 * norm[0][st], "step %d: loss %.9g "
                      "(one kernel) vs %.9g (parts), norm %.9g vs %.9g", st, loss[0][st],
                      loss[1][st], norm[0][st], norm[1][st]);
    printf("test_standin: bf16 tiny LLaMA, dk and dv in parts: losses %.6f -> %.6f, at most %.2e "
           "from one kernel's\n", loss[1][0], loss[1][N - 1], fabs(loss[0][N - 1] - loss[1][N - 1]));
    sn_device_free(gpu);
}
END_TEST

/* With dropout 0.2 (its kernels on the simulator, the seed set each micro-batch) the stand-in
 * trains as the CPU device does: the losses within 1e-5 over 20 steps (a mask that differed
 * anywhere would move them by far more), and the evaluations, which have no dropout, agree. */
START_TEST(dropout_trains_like_the_cpu_device) {
    if (!have_nvrtc()) return;
    sn_err e;
    sn_device *cpu, *gpu = cuda(NULL);
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    sn_graph *g1 = tiny_dropout(0.2f), *g2 = tiny_dropout(0.2f), *g0 = tiny();
    sn_trainer *a = trainer_on(g1, cpu, &e), *b = trainer_on(g2, gpu, &e), *c = trainer_on(g0, cpu, &e);
    ck_assert_msg(a && b && c, "%s", e.msg);
    double la[STEPS], lb[STEPS], lc[STEPS], na[STEPS], nb[STEPS], nc[STEPS];
    ck_assert_msg(train(a, STEPS, la, na, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(train(b, STEPS, lb, nb, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(train(c, STEPS, lc, nc, &e) == SN_OK, "%s", e.msg);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabs(la[s] - lb[s]) <= 1e-5 && fabs(na[s] - nb[s]) <= 1e-4 * fmax(1, na[s]),
                      "step %d: loss %.9g (cpu) vs %.9g (cuda), norm %.9g vs %.9g", s, la[s], lb[s],
                      na[s], nb[s]);
    ck_assert_msg(fabs(la[0] - lc[0]) > 1e-4, "dropout 0.2 left the first loss as it was (%.9g)", la[0]);
    ck_assert_msg(la[STEPS - 1] < la[0] - 0.5, "loss %g -> %g: not learning", la[0], la[STEPS - 1]);
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_trainer_free(c);
    sn_graph_free(g0);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(cpu);
    sn_device_free(gpu);
}
END_TEST

/* bf16 and fp16 (_i) programs train 20 steps through runtime/cuda (16-bit cuBLASLt plans, f16
 * and bf16 kernels on the simulator) with the CPU device's losses. Both devices run one program
 * on the same 16-bit operands, but not with identical arithmetic: the CUDA flash attention
 * multiplies P @ V on tensor cores, so P is rounded to the 16-bit type (as FlashAttention does)
 * where the CPU's attention keeps it in f32, and a product is summed in double (the stand-in's
 * cuBLASLt) or in f32 (sgemm), which flips an occasional later rounding to 16 bits by a unit.
 * So: while the weights are still the same (the first step, and fp16's skipped steps) the
 * losses agree within a sixteenth of a unit of the 16-bit roundoff u of the loss (u = 2^-9
 * bf16, 2^-12 fp16; measured: 0.006 u and 0.004 u); once AdamW has updated, they drift apart: its first
 * update is lr sign(g) per weight, so a gradient element whose sign the differences flip moves
 * 2 lr apart on the two devices. After that the losses agree within 0.5% (issue 10 allows 1%
 * between bf16 and fp32; measured at most 0.13% over 20 steps). fp16 starts at a loss scale of
 * 2^24, which overflows: the skip-and-halve path runs on the device, step for step as on the
 * CPU (the same skips and scales), and the scale doubles again after 4 clean steps. */
START_TEST(tiny_gpt2_16bit_trains_like_the_cpu_device) {
    if (!have_nvrtc()) return;
    sn_precision p = _i ? SN_PRECISION_FP16 : SN_PRECISION_BF16;
    double u = _i ? 0x1p-12 : 0x1p-9;
    sn_err e;
    sn_device *dev[2];
    ck_assert_msg(sn_cpu_device_new(2, &dev[0], &e) == SN_OK, "%s", e.msg);
    dev[1] = cuda(NULL);
    double loss[2][STEPS];
    float scale[2][STEPS];
    bool skipped[2][STEPS];
    double secs = 0;
    for (int d = 0; d < 2; d++) {
        sn_graph *g = tiny_at(p);
        sn_train_opts o;
        sn_train_opts_default(&o, STEPS);
        o.lr = 1e-2f;
        o.device = dev[d];
        o.init_scale = 0x1p24f;
        o.scale_interval = 4;
        sn_trainer *t = sn_trainer_new(g, &o, &e);
        ck_assert_msg(t, "%s", e.msg);
        int32_t x[B * T], y[B * T];
        double t0 = sn_clock_s();
        for (int s = 0; s < STEPS; s++) {
            sn_step_stats ss;
            batch(x, y, (uint64_t)s);
            ck_assert_msg(sn_trainer_step(t, x, y, &ss, &e) == SN_OK, "%s step %d: %s",
                          d ? "cuda" : "cpu", s, e.msg);
            loss[d][s] = ss.loss;
            scale[d][s] = ss.loss_scale;
            skipped[d][s] = ss.skipped;
        }
        if (d) secs = sn_clock_s() - t0;
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    double worst = 0, worst_same = 0;
    int skips = 0;
    bool same = true; /* no update yet: the two devices hold the same weights */
    for (int s = 0; s < STEPS; s++) {
        double diff = fabs(loss[0][s] - loss[1][s]);
        double tol = same ? u * loss[0][s] / 16 : 5e-3 * loss[0][s];
        ck_assert_msg(diff <= tol && scale[0][s] == scale[1][s] && skipped[0][s] == skipped[1][s],
                      "%s step %d: loss %.9g (cpu) vs %.9g (cuda) (tolerance %.3g), scale %g vs "
                      "%g, skipped %d vs %d", sn_precision_name(p), s, loss[0][s], loss[1][s],
                      tol, scale[0][s], scale[1][s], skipped[0][s], skipped[1][s]);
        if (same) worst_same = fmax(worst_same, diff / (u * loss[0][s]));
        else worst = fmax(worst, diff / loss[0][s]);
        skips += skipped[1][s];
        same = same && skipped[1][s];
    }
    ck_assert_msg(loss[1][STEPS - 1] < loss[1][0] - 0.5, "loss %g -> %g: not learning",
                  loss[1][0], loss[1][STEPS - 1]);
    int doubled = 0;
    for (int s = 1; s < STEPS; s++) doubled += scale[1][s] == 2 * scale[1][s - 1];
    if (_i) ck_assert_msg(skips >= 1 && doubled >= 1, "fp16: %d skipped steps, the scale doubled "
                          "%d times", skips, doubled);
    sn_cuda_stats st;
    sn_cuda_stats_get(dev[1], &st);
    printf("test_standin: 20 steps of tiny GPT-2 in %s on the stand-in in %.1f s: loss %.4f -> "
           "%.4f; from the cpu device's loss: %.3f u of roundoff at most before the first update, "
           "%.3f%% after; %d skipped steps, loss scale %g at the end; %d GEMM plans\n",
           sn_precision_name(p), secs, loss[1][0], loss[1][STEPS - 1], worst_same, 100 * worst,
           skips, scale[1][STEPS - 1], st.gemm_plans);
    sn_device_free(dev[0]);
    sn_device_free(dev[1]);
}
END_TEST

/* The optimizer state in host memory (sn_train_opts.offload) on the CUDA device: the gradients
 * come down through the stream, the CPU runs AdamW, the weights go up; the losses are the
 * device-resident run's within 1e-6 (equal on the stand-in, where the device AdamW runs on the
 * simulator; on a GPU NVRTC may contract it into FMAs, which the host's is not), and the device
 * holds only the step's scalars besides the program. */
START_TEST(offload_trains_like_the_device) {
    if (!have_nvrtc()) return;
    enum { N = 8 };
    sn_err e;
    sn_device *gpu = cuda(NULL);
    sn_graph *g1 = tiny(), *g2 = tiny();
    sn_trainer *a = trainer_offload(g1, gpu, false, &e);
    ck_assert_msg(a, "%s", e.msg);
    sn_trainer *b = trainer_offload(g2, gpu, true, &e);
    ck_assert_msg(b, "%s", e.msg);
    double la[N], lb[N], na[N], nb[N];
    ck_assert_msg(train(a, N, la, na, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(train(b, N, lb, nb, &e) == SN_OK, "%s", e.msg);
    double worst = 0;
    for (int s = 0; s < N; s++) {
        ck_assert_msg(fabs(la[s] - lb[s]) <= 1e-6 && fabs(na[s] - nb[s]) <= 1e-5 * fmax(1, na[s]),
                      "step %d: loss %.9g (on the device) vs %.9g (offloaded), norm %.9g vs %.9g",
                      s, la[s], lb[s], na[s], nb[s]);
        worst = fmax(worst, fabs(la[s] - lb[s]));
    }
    ck_assert_msg(lb[N - 1] < lb[0] - 0.2, "loss %g -> %g: not learning", lb[0], lb[N - 1]);
    ck_assert_int_gt(sn_trainer_host_state_bytes(b), 0);
    ck_assert_int_eq(sn_trainer_host_state_bytes(a), 0);
    ck_assert_int_lt(3 * sn_trainer_state_bytes(b), sn_trainer_state_bytes(a));
    printf("test_standin: %d offloaded steps: largest loss difference from the device's AdamW %.2g\n",
           N, worst);
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(gpu);
}
END_TEST

/* The delayed parameter update (sn_train_opts.offload_delay) on the CUDA device, where the host's
 * AdamW runs on a thread of its own while the stand-in runs the next step and the copies are
 * deferred until waited on (so an upload not waited on before the next run, or a job reading
 * gradients before their download is waited on, reads other bytes): the losses, norms and the
 * evaluation's loss are those of the schedule written out by hand (delay_ref.h) with the
 * stand-in's device-resident trainer, and (fp32, _i 0) the CPU device's delayed run, within the
 * tolerance of offload_trains_like_the_device (equal on the stand-in); in bf16 (_i 1) the
 * linear layers' weights go up as their shadows' bits. */
START_TEST(offload_delay_is_the_schedule_written_out) {
    if (!have_nvrtc()) return;
    enum { N = 6, EVAL = 4 };
    sn_err e;
    sn_device *gpu = cuda(NULL), *cpu;
    ck_assert(sn_cpu_device_new(2, &cpu, &e) == SN_OK);
    sn_device *on[3] = {gpu, gpu, cpu};
    sn_pipeline_opts po[3];
    sn_graph *g[3];
    for (int i = 0; i < 3; i++) {
        po[i] = sn_pipeline_defaults();
        po[i].precision = _i ? SN_PRECISION_BF16 : SN_PRECISION_FP32;
        po[i].backward = true;
        po[i].target = &on[i]->target;
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        c.vocab = V;
        g[i] = sn_graph_new();
        sn_gpt2 m;
        ck_assert_msg(sn_gpt2_build(g[i], &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_compile(g[i], &po[i], NULL, NULL, &e) == SN_OK, "%s", e.msg);
    }
    sn_trainer *t[3];
    for (int i = 0; i < 3; i++) {
        sn_train_opts o;
        sn_train_opts_default(&o, STEPS);
        o.lr = 1e-2f;
        o.grad_clip = 0.5f;
        o.device = on[i];
        o.offload = o.offload_delay = i != 1; /* 1: the written-out schedule's */
        o.offload_threads = i == 0 && _i ? 2 : 0; /* bf16: two, fp32: the default */
        o.compile = &po[i];
        ck_assert_msg(t[i] = sn_trainer_new(g[i], &o, &e), "%s", e.msg);
    }
    sn_test_delay ref;
    sn_test_delay_new(&ref, t[1]);
    double l[3][N], n[3][N], ev[3];
    for (int i = 0; i < 3; i++)
        sn_test_delay_run(t[i], i == 1 ? &ref : NULL, N, B * T, V, EVAL, l[i], n[i], &ev[i]);
    double worst[3] = {0};
    for (int i = 1; i < (_i ? 2 : 3); i++) {
        for (int s = 0; s < N; s++) {
            ck_assert_msg(fabs(l[0][s] - l[i][s]) <= 1e-6 && fabs(n[0][s] - n[i][s]) <= 1e-5 * fmax(1, n[i][s]),
                          "step %d: loss %.9g (delayed) vs %.9g (%s), norm %.9g vs %.9g", s + 1,
                          l[0][s], l[i][s], i == 1 ? "written out" : "the CPU device's", n[0][s], n[i][s]);
            worst[i] = fmax(worst[i], fabs(l[0][s] - l[i][s]));
        }
        ck_assert_msg(fabs(ev[0] - ev[i]) <= 1e-6, "evaluation %.9g vs %.9g", ev[0], ev[i]);
    }
    ck_assert_msg(l[0][N - 1] < l[0][0] - 0.1, "loss %g -> %g: not learning", l[0][0], l[0][N - 1]);
    sn_exec_stats xs; /* the gradients came down during the run, the weights went up in it */
    sn_exec_stats_get(sn_trainer_exec(t[0]), &xs);
    ck_assert_int_gt(xs.copies_in_run, 0);
    ck_assert_int_gt(xs.uploads_in_run, 0);
    sn_offload_times ot; /* steps 2, 3, 4 and 6 (step 5's evaluation drained first) */
    sn_trainer_offload_times(t[0], &ot);
    ck_assert_int_eq(ot.ups_in_run, N - 2);
    /* the update's threads: as asked, or the cores less one, left to the thread driving the
       device (the same numbers either way: AdamW is element by element) */
    int cores = sn_cores();
    ck_assert_int_eq(ot.threads, _i ? 2 : cores > 1 ? cores - 1 : 1);
    printf("test_standin: %d delayed steps (%s): largest loss difference from the written-out "
           "schedule %.2g, from the CPU device's delayed run %.2g%s; %d updates went up during "
           "the next step's run (%d uploads in the last)\n", N, _i ? "bf16" : "fp32", worst[1],
           worst[2], _i ? " (not compared)" : "", ot.ups_in_run, xs.uploads_in_run);
    sn_test_delay_free(&ref);
    for (int i = 0; i < 3; i++) {
        sn_trainer_free(t[i]);
        sn_graph_free(g[i]);
    }
    sn_device_free(gpu);
    sn_device_free(cpu);
}
END_TEST

/* The copies offload overlaps with its AdamW (device.h copy_async) on the stand-in, which
 * defers a copy on a stream until something orders it (standin_stream.c): a download's host
 * memory holds the old bytes until its event is waited on, and an upload reads its host memory
 * late, so a host that writes it before the wait is caught (on a GPU either may happen); the
 * same through the checked device (_i 1), which translates the device pointer. */
START_TEST(async_copies_land_at_their_event) {
    enum { N = 4096 };
    sn_err e;
    sn_device *d = cuda(NULL);
    if (_i) ck_assert(sn_checked_device_new(d, &d, &e) == SN_OK);
    ck_assert(d->copy_async && d->host_alloc && d->event_wait);
    float *h = d->host_alloc(d, 4 * N, &e), want[N];
    ck_assert_msg(h, "%s", e.msg);
    void *dev = d->alloc(d, 4 * N, &e), *done = d->event_new(d, &e);
    ck_assert(dev && done);
    for (int i = 0; i < N; i++) want[i] = (float)i;
    ck_assert(d->upload(d, dev, want, 4 * N, &e) == SN_OK);
    memset(h, 0, 4 * N);
    ck_assert_msg(d->copy_async(d, h, dev, 4 * N, false, NULL, done, &e) == SN_OK, "%s", e.msg);
    ck_assert(h[5] == 0); /* not yet */
    ck_assert_msg(d->event_wait(d, done, &e) == SN_OK, "%s", e.msg);
    ck_assert(!memcmp(h, want, sizeof want));
    ck_assert(d->copy_async(d, dev, h, 4 * N, true, NULL, done, &e) == SN_OK);
    h[7] = -1; /* a host writing what is still being copied up */
    ck_assert(d->event_wait(d, done, &e) == SN_OK);
    float got[N];
    ck_assert(d->download(d, got, dev, 4 * N, &e) == SN_OK);
    ck_assert(got[7] == -1 && got[8] == 8);
    d->event_free(d, done);
    d->free(d, dev);
    d->host_free(d, h);
    sn_device_free(d);
}
END_TEST

/* The CUDA device's rows copy (device.h copy_rows: cuMemcpy2DAsync, the generator's cache
 * appends): 6 rows of 16 floats from a contiguous array to rows 40 floats apart, 3 floats in,
 * land there and nowhere else; a pitch below the row, and rows running past the allocation,
 * are refused, the latter with nothing copied. */
START_TEST(copy_rows_land_at_their_pitch) {
    enum { W = 16, R = 6, P = 40, N = R * P };
    sn_err e;
    sn_device *d = cuda(NULL);
    ck_assert(d->copy_rows);
    float src_h[R * W], dst_h[N], got[N];
    for (int i = 0; i < R * W; i++) src_h[i] = (float)i;
    for (int i = 0; i < N; i++) dst_h[i] = -1;
    float *src = d->alloc(d, sizeof src_h, &e), *dst = d->alloc(d, sizeof dst_h, &e);
    ck_assert(src && dst);
    ck_assert(d->upload(d, src, src_h, sizeof src_h, &e) == SN_OK);
    ck_assert(d->upload(d, dst, dst_h, sizeof dst_h, &e) == SN_OK);
    ck_assert_msg(d->copy_rows(d, dst + 3, 4 * P, src, 4 * W, 4 * W, R, &e) == SN_OK, "%s", e.msg);
    ck_assert(d->download(d, got, dst, sizeof got, &e) == SN_OK);
    for (int i = 0; i < N; i++) {
        int r = i / P, c = i % P - 3;
        float want = c >= 0 && c < W ? (float)(r * W + c) : -1.0f;
        ck_assert_msg(got[i] == want, "element %d: %g, not %g", i, got[i], want);
    }
    ck_assert(d->copy_rows(d, dst, 4 * 8, src, 4 * W, 4 * W, 2, &e) != SN_OK); /* pitch < row */
    ck_assert(d->copy_rows(d, dst, 4 * P * 2, src, 4 * W, 4 * W, R, &e) != SN_OK); /* past the end */
    ck_assert(d->download(d, got, dst, sizeof got, &e) == SN_OK);
    ck_assert(got[0] == -1 && got[3] == 0); /* its first rows not copied either */
    d->free(d, src);
    d->free(d, dst);
    sn_device_free(d);
}
END_TEST

/* The run's copies are in flight when the run returns (the stand-in lands a download when it
 * is waited for): the host memory is untouched until sn_exec_run_copies_wait; an upload
 * elsewhere (the weights) does not wait for them, one over the bytes they read does. */
static void run_copies_in_flight(sn_trainer *t) {
    sn_err e;
    sn_exec *x = sn_trainer_exec(t);
    const sn_param_layout *l = &sn_trainer_program(t)->layout;
    int64_t n = l->flat_n;
    float *h = sn_exec_host_alloc(x, 4 * n, &e), *want = malloc(4 * (size_t)n), w0;
    ck_assert(h && want);
    sn_exec_run_copy c = {0, sn_exec_block_ref(l->grads), h, 4 * n};
    c.after = sn_exec_ready_after(x, c.src, c.bytes);
    ck_assert_msg(sn_exec_run_copies(x, &c, 1, &e) == SN_OK, "%s", e.msg);
    int32_t xs[B * T], ys[B * T];
    batch(xs, ys, 3);
    ck_assert_msg(sn_trainer_accumulate(t, xs, ys, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_exec_download(x, want, sn_exec_block_ref(l->grads), 4 * n, &e) == SN_OK);
    ck_assert(h[0] == 0 && h[n - 1] == 0 && want[0] != 0); /* in flight */
    ck_assert(sn_exec_download(x, &w0, sn_exec_block_ref(l->params), 4, &e) == SN_OK);
    ck_assert(sn_exec_upload(x, sn_exec_block_ref(l->params), &w0, 4, &e) == SN_OK);
    ck_assert_msg(h[0] == 0, "an upload of the weights waited for the gradients' copy");
    ck_assert(sn_exec_upload(x, sn_exec_block_ref(l->grads + 4 * (n - 1)), &want[n - 1], 4, &e) == SN_OK);
    ck_assert_msg(!memcmp(h, want, 4 * (size_t)n), "an upload over the gradients did not wait for "
                  "their copy");
    ck_assert(sn_exec_run_copies(x, NULL, 0, &e) == SN_OK);
    sn_exec_host_free(x, h);
    free(want);
}

/* The delayed update's downloads during the run (device.h sn_exec_run_copies) on the stand-in,
 * chunks of 64 gradients: each queued on the copy stream right after the last kernel that writes
 * it lands the run's gradients bit for bit; one kernel earlier lands other bytes (a download
 * reads at its call, above); the step, with copies in it, runs eagerly (cuda_rt.h); and they
 * are in flight when the run returns (run_copies_in_flight). */
START_TEST(run_copies_follow_their_last_writer) {
    if (!have_nvrtc()) return;
    sn_err e;
    sn_device *gpu = cuda(NULL);
    sn_graph *g = tiny();
    sn_trainer *t = trainer_on(g, gpu, &e);
    ck_assert_msg(t, "%s", e.msg);
    sn_test_run_copies r;
    sn_test_run_copies_check(t, 64, B * T, V, &r);
    ck_assert_int_eq(r.during, r.chunks);
    ck_assert_msg(r.early_differ > 0, "no chunk copied a kernel early differs");
    ck_assert_msg(r.points > 4 && 2 * r.before_last > r.chunks, "%d chunks ready at %d points, "
                  "%d before the last kernel", r.chunks, r.points, r.before_last);
    printf("test_standin: %d chunks of gradients copied during the run, ready after %d kernels, "
           "%d before the last; one kernel early, %d of the %d written differ\n", r.chunks,
           r.points, r.before_last, r.early_differ, r.written);
    run_copies_in_flight(t);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(gpu);
}
END_TEST

static sn_test_tiny_shape tiny_shape = {V, T};

/* The plan for the CUDA device is made with its target (the session passes the device's): the
 * device's arena peak, persistent block and buffers after an accumulated, offloaded step are the
 * plan's total less cuBLASLt's 32 MiB workspace, the host arrays its host figure. */
START_TEST(cuda_plan_is_the_trainer) {
    if (!have_nvrtc()) return;
    sn_err e;
    sn_device *gpu = cuda(NULL);
    ck_assert_int_eq(gpu->target.kind, SN_TARGET_CUDA);
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.target = &gpu->target;
    sn_plan_opts o = {.batch = 2 * B, .micro_batch = B, .policy = 0, .compile = &po,
                      .offload = SN_PLAN_OFFLOAD_ALWAYS};
    sn_plan pl;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(pl.workspace, 32 << 20);
    ck_assert_int_eq(pl.accum, 2);
    sn_graph *g;
    ck_assert(sn_test_tiny_loss_graph(&tiny_shape, B, &g, &e) == SN_OK);
    po.backward = true;
    ck_assert_msg(sn_compile(g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_train_opts to;
    sn_train_opts_default(&to, STEPS);
    to.device = gpu;
    to.compile = &po;
    to.offload = true;
    sn_trainer *t = sn_trainer_new(g, &to, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    batch(x, y, 5);
    for (int k = 0; k < pl.accum; k++)
        ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    sn_step_stats st;
    ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
    sn_exec_stats xs;
    sn_exec_stats_get(sn_trainer_exec(t), &xs);
    ck_assert_int_eq(xs.arena_peak_bytes + xs.persistent_bytes + xs.buffer_bytes + pl.workspace + sn_test_eval_bytes(t),
                     pl.total);
    ck_assert_int_eq(sn_trainer_host_state_bytes(t), pl.opt_host);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(gpu);
}
END_TEST

/* Two trainers one after the other on one device (as a check program or a sampler does): the
 * second's step is not the first's, though the queue may look the same to the graph cache. */
START_TEST(second_trainer_on_one_device) {
    if (!have_nvrtc()) return;
    sn_err e;
    sn_device *cpu, *gpu = cuda(NULL);
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    double la[3], lb[3], na[3], nb[3];
    for (int round = 0; round < 2; round++) {
        sn_graph *g = tiny();
        sn_trainer *t = trainer_on(g, gpu, &e);
        ck_assert_msg(t, "%s", e.msg);
        ck_assert_msg(train(t, 3, lb, nb, &e) == SN_OK, "round %d: %s", round, e.msg);
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    sn_graph *g = tiny();
    sn_trainer *t = trainer_on(g, cpu, &e);
    ck_assert_msg(t && train(t, 3, la, na, &e) == SN_OK, "%s", e.msg);
    for (int s = 0; s < 3; s++)
        ck_assert_msg(fabs(la[s] - lb[s]) <= 1e-5, "step %d: %.9g vs %.9g", s, la[s], lb[s]);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(cpu);
    sn_device_free(gpu);
}
END_TEST

/* ---- device memory ---- */

/* A device pointer is no host address: writing through one faults (SIGSEGV, or SIGBUS when
 * the compiler addresses it through the stack pointer's register: x86's stack-segment fault). */
START_TEST(device_pointers_fault_on_the_host) {
    sn_device *d = cuda(NULL);
    sn_err e;
    volatile float *p = d->alloc(d, 64, &e);
    ck_assert_msg(p, "%s", e.msg);
    float one = 1, back = 0;
    ck_assert(d->upload(d, (void *)p, &one, 4, &e) == SN_OK);
    ck_assert(d->download(d, &back, (void *)p, 4, &e) == SN_OK && back == 1);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        p[0] = 2; /* faults here */
        _exit(0);
    }
    int wst = 0;
    ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
    ck_assert_msg(WIFSIGNALED(wst) && (WTERMSIG(wst) == SIGSEGV || WTERMSIG(wst) == SIGBUS),
                  "a host write to device pointer %p did not fault (status 0x%x)", (void *)p, wst);
    sn_device_free(d);
}
END_TEST

/* LoRA in bf16 and fp16 (_i) on the device with its frozen base stored in 16 bits: the 8 base
 * weights are 16-bit device values without weight shadows, read back through the trainer as the
 * f32 base's rounding, and the losses of 8 steps equal the f32 base's (parameters and shadows)
 * on the same device bit for bit: the products read the same bits. */
START_TEST(lora_16bit_base_trains_as_the_f32_base) {
    if (!have_nvrtc()) return;
    sn_precision p = _i ? SN_PRECISION_FP16 : SN_PRECISION_BF16;
    enum { N = 8 };
    sn_err e;
    sn_device *d = cuda(NULL);
    double loss[2][N];
    sn_trainer *t[2];
    sn_graph *g[2];
    for (int k = 0; k < 2; k++) { /* k = 0: the 16-bit base */
        int stored;
        g[k] = tiny_lora_at(p, k == 0, &stored);
        ck_assert_int_eq(stored, k == 0 ? 8 : 0);
        ck_assert_msg((t[k] = trainer_on(g[k], d, &e)), "%s", e.msg);
        int32_t x[B * T], y[B * T];
        for (int s = 0; s < N; s++) {
            sn_step_stats ss;
            batch(x, y, (uint64_t)s);
            ck_assert_msg(sn_trainer_step(t[k], x, y, &ss, &e) == SN_OK, "step %d: %s", s, e.msg);
            loss[k][s] = ss.loss;
        }
    }
    int half = 0;
    const sn_program *pr = sn_trainer_program(t[0]);
    for (int i = 0; i < sn_trainer_param_count(t[0]); i++) {
        if (!sn_trainer_param_16bit(t[0], i)) continue;
        half++;
        const sn_param_slot *sl = &pr->layout.slots[i];
        ck_assert_msg(sl->shadow < 0 && pr->values[pr->value_of[sl->node->id]].bytes == 2 * sl->numel,
                      "%s: a shadow, or not 2 bytes a weight", sl->node->name);
        int j = sn_trainer_find_param(t[1], sl->node->name);
        float *a = malloc(4 * (size_t)sl->numel), *b = malloc(4 * (size_t)sl->numel);
        ck_assert(sn_trainer_get_param(t[0], i, SN_PARAM_WEIGHTS, a, &e) == SN_OK);
        ck_assert(sn_trainer_get_param(t[1], j, SN_PARAM_WEIGHTS, b, &e) == SN_OK);
        for (int64_t k = 0; k < sl->numel; k++)
            ck_assert_msg(a[k] == (float)sn_dtype_round(sl->dtype, b[k]), "%s[%lld]: %a, the f32 "
                          "base's %a", sl->node->name, (long long)k, (double)a[k], (double)b[k]);
        free(a), free(b);
    }
    ck_assert_int_eq(half, 8);
    ck_assert_int_eq(pr->n_shadows, sn_trainer_program(t[1])->n_shadows - 8);
    for (int s = 0; s < N; s++)
        ck_assert_msg(loss[0][s] == loss[1][s], "%s step %d: loss %.17g with the 16-bit base, %.17g "
                      "with the f32 base", sn_precision_name(p), s, loss[0][s], loss[1][s]);
    ck_assert_msg(loss[0][N - 1] < loss[0][0], "loss %g -> %g: not learning", loss[0][0], loss[0][N - 1]);
    printf("test_standin: LoRA %s with its base in 16 bits: %d losses bit for bit with the f32 "
           "base's (%.6f -> %.6f), 8 weights without shadows\n", sn_precision_name(p), N,
           loss[0][0], loss[0][N - 1]);
    for (int k = 0; k < 2; k++) sn_trainer_free(t[k]), sn_graph_free(g[k]);
    sn_device_free(d);
}
END_TEST

/* LoRA (rank 4, bf16) at 256 rows a step, where the adapters' products are thin products
 * (kernel.h SN_KER_THIN: tiny's x A of 32 by 4, the expansions h B of 4 by 96 and 32, the weight
 * gradients h^T dy and x^T dh as sums over the 256 rows), through the trainer on the stand-in:
 * the program has the three forms, and 4 steps' losses are those of the same program with the
 * products as GEMMs (SN_THIN=0) within f32 rounding of the sums' orders. */
START_TEST(lora_thin_products_train_as_the_gemms) {
    if (!have_nvrtc()) return;
    enum { BB = 16, N = 4 };
    double loss[2][N];
    for (int gemms = 0; gemms < 2; gemms++) {
        if (gemms) setenv("SN_THIN", "0", 1);
        sn_device *d = cuda(NULL);
        unsetenv("SN_THIN");
        int stored;
        sn_graph *g = tiny_lora_rows(SN_PRECISION_BF16, false, BB, &stored);
        sn_err e;
        sn_trainer *tr = trainer_on(g, d, &e);
        ck_assert_msg(tr, "%s", e.msg);
        const sn_program *pr = sn_trainer_program(tr);
        int thin = 0, expand = 0, sums = 0;
        for (int i = 0; i < pr->n_kernels; i++)
            if (pr->kernels[i]->kind == SN_KER_THIN) {
                sn_thin t = sn_thin_of(pr->kernels[i]);
                if (t.sum) sums += pr->kernels[i]->stage == SN_SUM_PARTIAL;
                else if (t.rank) expand++;
                else thin++;
            }
        if (gemms) ck_assert_int_eq(thin + expand + sums, 0);
        else ck_assert_msg(thin >= 4 && expand >= 4 && sums >= 4, "%d thin, %d expansions, %d sums",
                           thin, expand, sums);
        int32_t x[BB * T], y[BB * T];
        for (int s = 0; s < N; s++) {
            for (int h = 0; h < BB / B; h++) batch(x + h * B * T, y + h * B * T, (uint64_t)(s * 8 + h));
            sn_step_stats ss;
            ck_assert_msg(sn_trainer_step(tr, x, y, &ss, &e) == SN_OK, "step %d: %s", s, e.msg);
            loss[gemms][s] = ss.loss;
        }
        if (!gemms) printf("test_standin: LoRA bf16 at %d rows: %d thin products, %d expansions, "
                           "%d weight gradients' sums\n", BB * T, thin, expand, sums);
        sn_trainer_free(tr);
        sn_graph_free(g);
        sn_device_free(d);
    }
    for (int s = 0; s < N; s++)
        ck_assert_msg(fabs(loss[0][s] - loss[1][s]) <= 1e-3 * fabs(loss[1][s]), "step %d: loss %.9g "
                      "with thin products, %.9g with GEMMs", s, loss[0][s], loss[1][s]);
    ck_assert_msg(loss[0][N - 1] < loss[0][0], "loss %g -> %g: not learning", loss[0][0], loss[0][N - 1]);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("standin");
    TCase *tc = tcase_create("standin");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, tiny_gpt2_trains_like_the_cpu_device);
    tcase_add_test(tc, dropout_trains_like_the_cpu_device);
    tcase_add_loop_test(tc, joined_finish_trains_to_the_bit, 0, 4);
    tcase_add_test(tc, classifier_rows_in_turn_train_to_the_bit);
    tcase_add_test(tc, dkv_parts_train_as_one_kernel);
    tcase_add_loop_test(tc, tiny_gpt2_16bit_trains_like_the_cpu_device, 0, 2);
    tcase_add_loop_test(tc, lora_16bit_base_trains_as_the_f32_base, 0, 2);
    tcase_add_test(tc, lora_thin_products_train_as_the_gemms);
    tcase_add_test(tc, second_trainer_on_one_device);
    tcase_add_test(tc, device_pointers_fault_on_the_host);
    suite_add_tcase(s, tc);
    TCase *off = tcase_create("offload");
    tcase_set_timeout(off, 240);
    tcase_add_test(off, offload_trains_like_the_device);
    tcase_add_loop_test(off, offload_delay_is_the_schedule_written_out, 0, 2);
    tcase_add_loop_test(off, async_copies_land_at_their_event, 0, 2);
    tcase_add_test(off, copy_rows_land_at_their_pitch);
    tcase_add_test(off, run_copies_follow_their_last_writer);
    tcase_add_test(off, cuda_plan_is_the_trainer);
    suite_add_tcase(s, off);
    return s;
}

int main(void) { return sn_test_main(suite()); }
