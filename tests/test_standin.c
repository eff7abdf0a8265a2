/* test_standin.c: runtime/cuda end to end on the stand-in driver (tests/standin: libcuda over host
 * memory and the SIMT simulator, NVRTC wrapping the real one, cuBLASLt on the CPU): tiny GPT-2
 * trains 20 steps with the CPU device's losses, LoRA over a 16-bit base as over the f32 base,
 * the kernel cache goes cold, warm and corrupt part by part, each injected failure (a part NVRTC
 * fails on included) says what failed, device pointers fault on the host. Convention: the stand-in's
 * settings are environment variables read at its first cuInit, so each test (a forked process)
 * sets its own before it opens the device. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/device.h"
#include "support/cores.h"
#include "support/clock.h"
#include "train/plan.h"
#include "train/train.h"
#include "examples/llama/llama.h"
#include "delay_ref.h"
#include "harness.h"
#include "run_copies_check.h"

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

enum { B = 2, T = 16, V = 64, STEPS = 20 };

/* The stand-in's three libraries (paths from meson) and a kernel cache shared by the tests that
 * do not test the cache, so the real NVRTC runs once per program text. */
static void use_standin(void) {
    setenv("SN_LIBCUDA", SN_TEST_STANDIN_CUDA, 1);
    setenv("SN_LIBNVRTC", SN_TEST_STANDIN_NVRTC, 1);
    setenv("SN_LIBCUBLASLT", SN_TEST_STANDIN_CUBLASLT, 1);
}

/* Whether the real NVRTC the stand-in NVRTC wraps is here (a machine without the toolkit skips). */
static bool have_nvrtc(void) {
    use_standin();
    sn_cuda_api a = {0};
    sn_err e;
    int major = 0, minor = 0;
    bool ok = sn_nvrtc_version(&a.nvrtc, &major, &minor, &e) == SN_OK;
    if (!ok) printf("test_standin: skipped: no NVRTC for the stand-in to wrap\n");
    sn_cuda_api_unload(&a);
    return ok;
}

static const char *shared_cache(void) {
    static char dir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sinter_standin_cache_%ld", tmp && *tmp ? tmp : "/tmp", (long)getuid());
    return dir;
}

static sn_device *cuda(const char *cache_dir) {
    use_standin();
    sn_cuda_opts o = {.cache_dir = cache_dir ? cache_dir : shared_cache()};
    sn_device *d = NULL;
    sn_err e;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

/* tiny GPT-2 (vocabulary 64) with its backward, with dropout p */
static sn_graph *tiny_dropout(float p) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    c.dropout = p;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *tiny(void) { return tiny_dropout(0); }

static void batch(int32_t *x, int32_t *y, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % V);
        y[i] = (x[i] * 3 + 1) % V; /* a rule the model can learn */
    }
}

static sn_trainer *trainer_offload(sn_graph *g, sn_device *d, bool offload, sn_err *e) {
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.device = d;
    o.offload = offload;
    return sn_trainer_new(g, &o, e);
}

static sn_trainer *trainer_on(sn_graph *g, sn_device *d, sn_err *e) {
    return trainer_offload(g, d, false, e);
}

/* steps steps (every third with an evaluation, checked against the training program's loss on
 * its batch, which is then a second micro-batch); SN_OK or the failure */
static sn_status train(sn_trainer *t, int steps, double *loss, double *norm, sn_err *e) {
    int32_t x[B * T], y[B * T];
    sn_status st = SN_OK;
    for (int s = 0; s < steps && !st; s++) {
        batch(x, y, (uint64_t)s);
        st = sn_trainer_accumulate(t, x, y, NULL, e);
        if (!st && s % 3 == 2) {
            double l;
            batch(x, y, 1000 + (uint64_t)s);
            st = sn_trainer_eval(t, x, y, &l, e);
            /* the evaluation program's loss is the training program's: to the bit on the CPU
             * device (test_eval); here within 1e-6, because on CUDA the two compute a row's
             * log-sum-exp differently: training's classifier (cuda_row.c cross_entropy_bwd)
             * in one online pass over a block, the evaluation's cross_entropy
             * (cuda_row_sums.c) as a max then a warp-summed exp; an ulp apart on a rare row
             * (6e-8 at step 5 of the first run, every other step equal) */
            double la;
            if (!st) st = sn_trainer_accumulate(t, x, y, &la, e);
            ck_assert_msg(st || fabs(l - la) <= 1e-6 * fabs(la) || sn_trainer_dropout(t) > 0,
                          "step %d: eval %.9g, the training program %.9g", s, l, la); /* dropout: not equal */
        }
        sn_step_stats ss;
        if (!st) st = sn_trainer_update(t, &ss, e);
        if (!st) {
            loss[s] = ss.loss;
            norm[s] = ss.grad_norm;
        }
    }
    return st;
}

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

/* tiny GPT-2 through the autocast pass at precision p, with its backward */
static sn_graph *tiny_outputs(sn_precision p, bool loss_only) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    if (loss_only) { /* as sinter train compiles it: no logits kept */
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, m.loss);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *tiny_at(sn_precision p) { return tiny_outputs(p, false); }

/* A 2-layer LLaMA (examples/llama: rmsnorm, SwiGLU, grouped-query attention: 4 query heads on
 * 2 kv heads) of width dim with its backward, at precision p. */
static sn_graph *llama_tiny_at(sn_precision p, int dim) {
    llama_config c = {.ctx = T, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .dim = dim,
                      .hidden = dim * 3 / 2, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    sn_graph *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(llama_build(g, B, T, V, &c, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* A trainer of g on gpu compiled with po: steps steps, lr 1e-2. */
static sn_trainer *trainer_with(sn_graph *g, sn_device *gpu, const sn_pipeline_opts *po, int steps) {
    sn_train_opts o;
    sn_train_opts_default(&o, steps);
    o.lr = 1e-2f;
    o.device = gpu;
    o.compile = po;
    sn_err e;
    sn_trainer *tr = sn_trainer_new(g, &o, &e);
    ck_assert_msg(tr, "%s", e.msg);
    return tr;
}

/* n steps of tr on batches 0, 1, ..: their losses and gradient norms. */
static void run_steps(sn_trainer *tr, int n, double *loss, double *norm, const char *what) {
    int32_t x[B * T], y[B * T];
    for (int s = 0; s < n; s++) {
        sn_step_stats ss;
        sn_err e;
        batch(x, y, (uint64_t)s);
        ck_assert_msg(sn_trainer_step(tr, x, y, &ss, &e) == SN_OK, "%s step %d: %s", what, s, e.msg);
        loss[s] = ss.loss;
        norm[s] = ss.grad_norm;
    }
}

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

/* ---- cuBLASLt plans (runtime/cuda/cublaslt.c) on the stand-in's cuBLASLt ---- */

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int)(seed >> 40) % 2001 - 1000) / 1000.0f;
    }
}

/* x rounded to dtype t (round to nearest even) in place, and stored as t into buf. */
static void to_dtype(sn_dtype t, float *x, size_t n, void *buf) {
    for (size_t i = 0; i < n; i++) {
        if (t == SN_F16) {
            ((_Float16 *)buf)[i] = (_Float16)x[i];
            x[i] = (float)((_Float16 *)buf)[i];
        } else if (t == SN_BF16) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
            ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
            memcpy(&x[i], &u, 4);
        } else {
            ((float *)buf)[i] = x[i];
        }
    }
}

static void from_dtype(sn_dtype t, const void *buf, int64_t n, float *x) {
    for (int64_t i = 0; i < n; i++) {
        if (t == SN_F16) {
            x[i] = (float)((const _Float16 *)buf)[i];
        } else if (t == SN_BF16) {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            memcpy(&x[i], &u, 4);
        } else {
            x[i] = ((const float *)buf)[i];
        }
    }
}

/* The row-major problem of s in double: D (batch, M, N) = epilogue(op(A) op(B)) (kernel.h's
 * epilogues: + bias (N); gelu, its input into aux; times gelu'(aux); + C, the aux_in values),
 * the tanh form in double. */
static void reference(const sn_gemm_shape *s, const float *A, const float *B, const float *bias,
                      const float *aux_in, const float *c_in, double *D, double *aux) {
    const double k = 0.7978845608028654, c = 0.044715;
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t i = 0; i < s->M; i++)
            for (int64_t j = 0; j < s->N; j++) {
                const float *a = A + b * s->stride_a, *bb = B + b * s->stride_b;
                int64_t at = b * s->stride_d + i * s->ldd + j;
                double v = (sn_gemm_has_bias(s->epi) ? bias[j] : 0) + (s->accum ? c_in[at] : 0);
                for (int64_t q = 0; q < s->K; q++)
                    v += (double)(s->ta ? a[q * s->lda + i] : a[i * s->lda + q]) *
                         (s->tb ? bb[j * s->ldb + q] : bb[q * s->ldb + j]);
                if (s->epi == SN_EPI_GELU_AUX_BIAS) aux[at] = v;
                if (s->epi == SN_EPI_GELU_BIAS || s->epi == SN_EPI_GELU_AUX_BIAS)
                    v = 0.5 * v * (1 + tanh(k * (v + c * v * v * v)));
                if (s->epi == SN_EPI_DGELU) {
                    double x = aux_in[at], t = tanh(k * (x + c * x * x * x));
                    v *= 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
                }
                D[at] = v;
            }
}

#define CK(call) ck_assert_msg((call) == SN_OK, "%s", e.msg)

/* The stand-in's libcuda and cuBLASLt with a context current on device 0, a stream and a
 * cuBLASLt handle: what the tests that call cuBLASLt themselves start from. */
typedef struct {
    sn_cuda_api a;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    cublasLtHandle_t lt;
} lt_setup;

static void lt_open(lt_setup *L) {
    use_standin();
    *L = (lt_setup){0};
    sn_cuda_api *a = &L->a;
    sn_err e;
    CK(sn_cuda_api_load(a, SN_LIB_CUDA, &e));
    CK(sn_cuda_api_load(a, SN_LIB_CUBLASLT, &e));
    CK(SN_CUDA_CHECK(a, &e, cuInit, 0));
    CK(SN_CUDA_CHECK(a, &e, cuDeviceGet, &L->dev, 0));
    CK(SN_CUDA_CHECK(a, &e, cuDevicePrimaryCtxRetain, &L->ctx, L->dev));
    CK(SN_CUDA_CHECK(a, &e, cuCtxSetCurrent, L->ctx));
    CK(SN_CUDA_CHECK(a, &e, cuStreamCreate, &L->stream, CU_STREAM_NON_BLOCKING));
    CK(SN_CUDA_CHECK(a, &e, cublasLtCreate, &L->lt));
}

static void lt_close(lt_setup *L) {
    L->a.cublasLtDestroy(L->lt);
    L->a.cuStreamDestroy(L->stream);
    L->a.cuDevicePrimaryCtxRelease(L->dev);
    sn_cuda_api_unload(&L->a);
}

/* A download on the stand-in reads the device at its call, the earliest moment it may run
 * (standin_stream.c), so work queued after it does not reach it; and one on a stream that did
 * not wait for another stream's work (an event, or the host synchronising that stream) races
 * with it and lands 0xff bytes: a copy stream that does not wait for the kernels before it, or
 * a copy queued before the kernel that writes its bytes, lands other bytes. */
START_TEST(downloads_read_at_their_call_and_race_unordered) {
    enum { N = 64 };
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    sn_err e;
    CUstream s2;
    CUevent ev;
    CUdeviceptr dev;
    float *h, want[N];
    unsigned char ff[4 * N];
    memset(ff, 0xff, sizeof ff);
    CK(SN_CUDA_CHECK(a, &e, cuStreamCreate, &s2, CU_STREAM_NON_BLOCKING));
    CK(SN_CUDA_CHECK(a, &e, cuEventCreate, &ev, CU_EVENT_DEFAULT));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dev, 4 * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemHostAlloc, (void **)&h, 4 * N, 0));
    for (int i = 0; i < N; i++) want[i] = (float)i;
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dev, want, sizeof want, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
    /* ordered by an event after the first stream's work, the memset queued after the copy */
    CK(SN_CUDA_CHECK(a, &e, cuMemsetD8Async, dev, 7, 4 * N, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dev, want, sizeof want, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuEventRecord, ev, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamWaitEvent, s2, ev, 0));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, h, dev, 4 * N, s2));
    CK(SN_CUDA_CHECK(a, &e, cuMemsetD8Async, dev, 0, 4 * N, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, s2));
    ck_assert_msg(!memcmp(h, want, sizeof want), "the download did not read at its call");
    /* unordered: the last memset was waited for by no one */
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, h, dev, 4 * N, s2));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, s2));
    ck_assert_msg(!memcmp(h, ff, sizeof ff), "a download racing with a memset landed %g", h[1]);
    /* the host synchronised the first stream: ordered */
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, h, dev, 4 * N, s2));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, s2));
    ck_assert(h[0] == 0 && h[N - 1] == 0);
    CK(SN_CUDA_CHECK(a, &e, cuMemFreeHost, h));
    CK(SN_CUDA_CHECK(a, &e, cuMemFree, dev));
    CK(SN_CUDA_CHECK(a, &e, cuEventDestroy, ev));
    CK(SN_CUDA_CHECK(a, &e, cuStreamDestroy, s2));
    lt_close(&L);
}
END_TEST

START_TEST(gemm_plans_match_a_reference) {
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    CUstream stream = L.stream;
    cublasLtHandle_t lt = L.lt;
    sn_err e;
    enum { M = 5, N = 7, K = 3, NB = 3, N8 = 8, WS = 1 << 20 };
    /* plain, each transpose, both, batched, batched with B shared, the bias epilogue; the GELU
     * epilogues (rows of N8: the aux's leading dimension is a multiple of 8) */
    sn_gemm_shape shapes[] = {
        {.M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = N, .ldd = N},
        {.ta = true, .M = M, .N = N, .K = K, .batch = 1, .lda = M, .ldb = N, .ldd = N},
        {.tb = true, .M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = K, .ldd = N},
        {.ta = true, .tb = true, .M = M, .N = N, .K = K, .batch = 1, .lda = M, .ldb = K, .ldd = N},
        {.tb = true, .M = M, .N = N, .K = K, .batch = NB, .lda = K, .ldb = K, .ldd = N,
         .stride_a = M * K, .stride_b = N * K, .stride_d = M * N},
        {.ta = true, .M = M, .N = N, .K = K, .batch = NB, .lda = M, .ldb = N, .ldd = N,
         .stride_a = M * K, .stride_b = 0, .stride_d = M * N},
        {.M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = N, .ldd = N, .epi = SN_EPI_BIAS},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8, .epi = SN_EPI_GELU_BIAS},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8,
         .epi = SN_EPI_GELU_AUX_BIAS},
        {.tb = true, .M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = K, .ldd = N8,
         .epi = SN_EPI_DGELU},
        /* accum: beta = 1, C (D's type) another buffer, alone and with each epilogue */
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8, .accum = true},
        {.ta = true, .tb = true, .M = M, .N = N8, .K = K, .batch = 1, .lda = M, .ldb = K,
         .ldd = N8, .accum = true},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8, .epi = SN_EPI_BIAS,
         .accum = true},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8,
         .epi = SN_EPI_GELU_AUX_BIAS, .accum = true},
        {.tb = true, .M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = K, .ldd = N8,
         .epi = SN_EPI_DGELU, .accum = true},
    };
    CUdeviceptr dA, dB, dD, dbias, daux, dC, ws;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * NB * M * K));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dB, 4 * NB * K * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * NB * M * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dbias, 4 * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &daux, 4 * M * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dC, 4 * M * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &ws, WS));
    float A[NB * M * K], Bm[NB * K * N8], bias[N8], D[NB * M * N8], aux[M * N8], C[M * N8];
    char sA[sizeof A], sB[sizeof Bm], sbias[sizeof bias], sD[sizeof D], saux[sizeof aux],
        sC[sizeof C];
    double want[NB * M * N8], got[NB * M * N8], want_aux[M * N8], got_aux[M * N8];
    /* f32 (fp32 compute); bf16 and f16 operands (autocast) into f32 and into their own type */
    const sn_dtype types[][2] = {{SN_F32, SN_F32}, {SN_BF16, SN_F32}, {SN_F16, SN_F32},
                                 {SN_BF16, SN_BF16}, {SN_F16, SN_F16}};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            sn_gemm_shape s = shapes[i];
            s.ab = types[ti][0];
            s.d = s.bias_t = s.aux_t = s.c_t = types[ti][1];
            int64_t nd = s.batch * s.M * s.N;
            fill(A, NB * M * K, 1 + i);
            fill(Bm, NB * K * N8, 100 + i);
            fill(bias, N8, 200 + i);
            fill(aux, M * N8, 300 + i);
            for (int j = 0; j < M * N8; j++) aux[j] *= 3; /* GELU inputs over [-3, 3] */
            fill(C, M * N8, 400 + i);
            /* the reference multiplies the values as stored: rounded to the operands' type */
            to_dtype(s.ab, A, NB * M * K, sA);
            to_dtype(s.ab, Bm, NB * K * N8, sB);
            to_dtype(s.d, bias, N8, sbias);
            to_dtype(s.d, aux, M * N8, saux);
            to_dtype(s.d, C, M * N8, sC);
            from_dtype(s.d, sC, M * N8, C); /* the reference adds C as stored */
            reference(&s, A, Bm, bias, aux, C, want, want_aux);
            size_t ab = s.ab == SN_F32 ? 4 : 2, db = s.d == SN_F32 ? 4 : 2;
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, sA, ab * NB * M * K, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, sB, ab * NB * K * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dbias, sbias, db * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, daux, saux, db * M * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dC, sC, db * M * N8, stream));
            sn_gemm_plan *p;
            CK(sn_gemm_plan_new(a, lt, &s, false, WS, &p, &e));
            CK(sn_gemm_plan_run(a, lt, p, dD, dA, dB, sn_gemm_has_bias(s.epi) ? dbias : 0,
                                sn_gemm_has_aux(s.epi) ? daux : 0,
                                s.accum ? dC : 0, ws, WS, stream, &e));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, sD, dD, db * (size_t)nd, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, saux, daux, db * M * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
            from_dtype(s.d, sD, nd, D);
            for (int64_t j = 0; j < nd; j++) got[j] = D[j];
            char what[112];
            snprintf(what, sizeof what, "GEMM %zu (%s into %s, ta %d, tb %d, batch %lld, %s%s)",
                     i, sn_dtype_name(s.ab), sn_dtype_name(s.d), s.ta, s.tb, (long long)s.batch,
                     sn_epilogue_name(s.epi), s.accum ? " + C" : "");
            /* f32 D: the f32 rounding of a double sum (and f32 GELU); 16-bit D: one rounding
             * (2^-9, 2^-12) */
            double tol = s.d == SN_F32 ? 1e-6 : s.d == SN_BF16 ? 4e-3 : 5e-4;
            sn_check_close(what, got, want, (size_t)nd, tol, 1);
            if (s.epi == SN_EPI_GELU_AUX_BIAS) { /* the GELU input, stored in D's type */
                from_dtype(s.d, saux, M * N8, aux);
                for (int64_t j = 0; j < M * N8; j++) got_aux[j] = aux[j];
                sn_check_close("the GELU's input (aux)", got_aux, want_aux, M * N8, tol, 1);
            }
            sn_gemm_plan_free(a, p);
        }
    /* operands only 64-byte aligned (the memory planner's promise; cuBLASLt's heuristic assumes
     * 256 unless told): the plan's algorithm must take them (the stand-in refuses an operand
     * less aligned than the preference the algorithm was chosen for, as cuBLASLt may fail) */
    {
        sn_gemm_shape s = shapes[0];
        fill(A, M * K, 1);
        fill(Bm, K * N, 100);
        reference(&s, A, Bm, NULL, NULL, NULL, want, NULL);
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA + 64, A, 4 * M * K, stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB + 64, Bm, 4 * K * N, stream));
        sn_gemm_plan *p;
        CK(sn_gemm_plan_new(a, lt, &s, false, WS, &p, &e));
        CK(sn_gemm_plan_run(a, lt, p, dD + 64, dA + 64, dB + 64, 0, 0, 0, ws, WS, stream, &e));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, D, dD + 64, 4 * M * N, stream));
        CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
        for (int64_t j = 0; j < M * N; j++) got[j] = D[j];
        sn_check_close("GEMM on 64-byte aligned operands", got, want, (size_t)(M * N), 1e-6, 1);
        sn_gemm_plan_free(a, p);
    }
    /* operands read in place (kernel.h: operand views): bf16 A and B inside rows of 24, at
     * elements 8 and 16 (16 and 32 bytes: the plan must say so, as the stand-in refuses an
     * operand less aligned than the preference its algorithm was chosen for) */
    {
        enum { VK = 8, VN = 8, LD = 24 };
        sn_gemm_shape s = {.M = M, .N = VN, .K = VK, .batch = 1, .lda = LD, .ldb = LD, .ldd = VN,
                           .off_a = 8, .off_b = 16, .ab = SN_BF16, .d = SN_F32,
                           .bias_t = SN_F32, .aux_t = SN_F32, .c_t = SN_F32};
        float Av[M * LD], Bv[VK * LD];
        uint16_t hA[M * LD], hB[VK * LD];
        fill(Av, M * LD, 7);
        fill(Bv, VK * LD, 8);
        to_dtype(SN_BF16, Av, M * LD, hA);
        to_dtype(SN_BF16, Bv, VK * LD, hB);
        from_dtype(SN_BF16, hA, M * LD, Av);
        from_dtype(SN_BF16, hB, VK * LD, Bv);
        reference(&s, Av + 8, Bv + 16, NULL, NULL, NULL, want, NULL);
        CUdeviceptr vA, vB;
        CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &vA, sizeof hA));
        CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &vB, sizeof hB));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, vA, hA, sizeof hA, stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, vB, hB, sizeof hB, stream));
        sn_gemm_plan *p;
        CK(sn_gemm_plan_new(a, lt, &s, false, WS, &p, &e));
        CK(sn_gemm_plan_run(a, lt, p, dD, vA, vB, 0, 0, 0, ws, WS, stream, &e));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, D, dD, 4 * M * VN, stream));
        CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
        for (int64_t j = 0; j < M * VN; j++) got[j] = D[j];
        sn_check_close("GEMM of operands read in place", got, want, (size_t)(M * VN), 1e-6, 1);
        sn_gemm_plan_free(a, p);
        CK(SN_CUDA_CHECK(a, &e, cuMemFree, vA));
        CK(SN_CUDA_CHECK(a, &e, cuMemFree, vB));
    }
    /* types cuBLASLt has no plan for here are refused by name before any call */
    sn_gemm_shape bad = shapes[6];
    bad.ab = SN_BF16;
    bad.d = SN_F16;
    bad.bias_t = SN_F16;
    sn_gemm_plan *none = NULL;
    ck_assert_int_eq(sn_gemm_plan_new(a, lt, &bad, false, WS, &none, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "bf16 operands into f16"), "%s", e.msg);
    bad.d = SN_F32; /* a bias of another type than D's */
    ck_assert_int_eq(sn_gemm_plan_new(a, lt, &bad, false, WS, &none, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "with a bias of f16"), "%s", e.msg);
    ck_assert_ptr_null(none);
    /* bf16 in and out, fp32 accumulation, column-major (what a bf16 ceiling measures) */
    enum { S = 6 };
    uint16_t hA[S * S], hB[S * S], hD[S * S];
    double want16[S * S], got16[S * S];
    for (int i = 0; i < S * S; i++) { /* small integers and halves: exact in bf16 */
        hA[i] = (uint16_t)(0x3f80 + (i % 5) * 0x40); /* 1, 1.5, 2, 2.5, 3 */
        hB[i] = (uint16_t)((i % 3 ? 0x3f00 : 0xbf80)); /* 0.5 or -1 */
    }
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) {
            double v = 0;
            for (int k = 0; k < S; k++) {
                uint32_t ua = (uint32_t)hA[i + k * S] << 16, ub = (uint32_t)hB[k + j * S] << 16;
                float fa, fb;
                memcpy(&fa, &ua, 4);
                memcpy(&fb, &ub, 4);
                v += (double)fa * fb;
            }
            want16[i + j * S] = v;
        }
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay;
    const float one = 1, zero = 0;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, hA, sizeof hA, stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, hB, sizeof hB, stream));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescCreate, &desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &lay, CUDA_R_16BF, S, S, S));
    cublasLtMatmulPreference_t pref;
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulPreferenceCreate, &pref));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulAlgoGetHeuristic, lt, desc, lay, lay, lay, lay, pref, 1,
                     &heur, &found));
    ck_assert_int_eq(found, 1);
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmul, lt, desc, &one, (void *)(uintptr_t)dA, lay,
                     (void *)(uintptr_t)dB, lay, &zero, (void *)(uintptr_t)dD, lay,
                     (void *)(uintptr_t)dD, lay, &heur.algo, NULL, 0, stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, hD, dD, sizeof hD, stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
    for (int i = 0; i < S * S; i++) {
        uint32_t u = (uint32_t)hD[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        got16[i] = f;
    }
    sn_check_close("bf16 GEMM", got16, want16, S * S, 1e-2, 1);
    a->cublasLtMatmulPreferenceDestroy(pref);
    a->cublasLtMatrixLayoutDestroy(lay);
    a->cublasLtMatmulDescDestroy(desc);
    lt_close(&L);
}
END_TEST

/* What cuBLASLt's documentation rules out for the GELU input matrix (the aux of GELU_AUX_BIAS
 * and DGELU), the stand-in refuses: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD not a multiple of 8 or
 * less than D's rows, EPILOGUE_AUX_DATA_TYPE set outside FP8 kernels, no aux pointer, an aux
 * less aligned at the matmul than the pointer the heuristic chose the algorithm for; and
 * sinter's plan refuses rows of a width that is no multiple of 8 before any call. */
START_TEST(gelu_aux_rules_are_cublaslts) {
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    CUstream stream = L.stream;
    cublasLtHandle_t lt = L.lt;
    sn_err e;
    enum { S = 16 }; /* D (S, S) = A (S, S) B (S, S), f32 */
    CUdeviceptr dA, dD, daux;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * S * S));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * S * S));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &daux, 4 * S * S + 64));
    float zeros[S * S] = {0};
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, zeros, sizeof zeros, stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, daux, zeros, sizeof zeros, stream));
    cublasLtMatrixLayout_t lay;
    cublasLtMatmulPreference_t pref;
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &lay, CUDA_R_32F, S, S, S));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulPreferenceCreate, &pref));
    const float one = 1, zero = 0;
    /* {epilogue, aux ld, aux data type (-2: unset), aux at the heuristic (offset into daux; -1:
     * unset), aux at the matmul, the heuristic's status, the matmul's} */
    const struct {
        int32_t epi;
        int64_t ld;
        int32_t type;
        int at_heur, at_run, heur, run;
    } cases[] = {
        {CUBLASLT_EPILOGUE_DGELU, S, -2, 0, 0, 0, 0},                        /* as documented */
        {CUBLASLT_EPILOGUE_GELU_AUX, S, -1, 0, 0, 0, 0},                     /* -1: D's type */
        {CUBLASLT_EPILOGUE_GELU_AUX, 12, -2, 0, 0, 7, 7},                    /* ld % 8 */
        {CUBLASLT_EPILOGUE_DGELU, 8, -2, 0, 0, 7, 7},                        /* ld < D's rows */
        {CUBLASLT_EPILOGUE_DGELU, S, CUDA_R_32F, 0, 0, 7, 7},                /* a type set */
        {CUBLASLT_EPILOGUE_GELU_AUX, S, -2, -1, -1, 0, 7},                   /* no aux pointer */
        {CUBLASLT_EPILOGUE_DGELU, S, -2, 0, 4, 0, 15},                       /* less aligned */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cublasLtMatmulDesc_t desc;
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescCreate, &desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                          &cases[i].epi, sizeof cases[i].epi), 0);
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                          &cases[i].ld, sizeof cases[i].ld), 0);
        if (cases[i].type != -2)
            ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(
                                 desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &cases[i].type,
                                 sizeof cases[i].type), 0);
        void *aux = cases[i].at_heur < 0 ? NULL : (void *)(uintptr_t)(daux + (CUdeviceptr)cases[i].at_heur);
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &aux, sizeof aux), 0);
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        int st = a->cublasLtMatmulAlgoGetHeuristic(lt, desc, lay, lay, lay, lay, pref, 1, &heur, &found);
        ck_assert_msg(st == cases[i].heur, "case %zu: the heuristic's status %d, want %d", i, st,
                      cases[i].heur);
        if (st) {
            memset(&heur, 0, sizeof heur);
            heur.algo.data[0] = 0x5d; /* the matmul checks again, with the stand-in's algorithm */
        }
        aux = cases[i].at_run < 0 ? NULL : (void *)(uintptr_t)(daux + (CUdeviceptr)cases[i].at_run);
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &aux, sizeof aux), 0);
        st = a->cublasLtMatmul(lt, desc, &one, (void *)(uintptr_t)dA, lay, (void *)(uintptr_t)dA, lay,
                              &zero, (void *)(uintptr_t)dD, lay, (void *)(uintptr_t)dD, lay,
                              &heur.algo, NULL, 0, stream);
        ck_assert_msg(st == cases[i].run, "case %zu: the matmul's status %d, want %d", i, st,
                      cases[i].run);
        a->cublasLtMatmulDescDestroy(desc);
    }
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
    /* sinter's plan: an aux needs rows of a multiple of 8, one GEMM */
    sn_gemm_shape s = {.M = S, .N = 12, .K = S, .batch = 1, .lda = S, .ldb = 12, .ldd = 12,
                       .epi = SN_EPI_DGELU};
    sn_gemm_plan *p = NULL;
    ck_assert_int_eq(sn_gemm_plan_new(a, lt, &s, false, 0, &p, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "multiple of 8") && strstr(e.msg, "EPILOGUE_AUX_LD"), "%s", e.msg);
    ck_assert_ptr_null(p);
    a->cublasLtMatmulPreferenceDestroy(pref);
    a->cublasLtMatrixLayoutDestroy(lay);
    lt_close(&L);
}
END_TEST

/* ---- the kernel cache ---- */

typedef struct {
    sn_cuda_stats st;
    double loss[2];
    int files;
} cache_round;

/* A linear layer as autocast leaves it, cast(x @ w + f32(b)) in bf16 or f16 (and the f32
 * x @ w + b): fuse makes one GEMM kernel with the BIAS epilogue, and it agrees with the
 * interpreter on the CPU device and on the stand-in's cuBLASLt (one rounding of the output:
 * half a unit in the last place, and the f32 sums' own error). */
/* The linear layer's graph in storage type t: inputs x, w, b; y the output; bt the bias cast. */
static sn_graph *linear_graph(sn_dtype t, sn_node **x, sn_node **w, sn_node **b, sn_node **bt,
                              sn_node **y) {
    sn_graph *g = sn_graph_new();
    *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 8, 16));
    *w = sn_input(g, "w", SN_F32, SN_SHAPE(16, 24)), *b = sn_input(g, "b", SN_F32, SN_SHAPE(24));
    *bt = sn_cast(g, *b, t); /* the epilogue's bias, of the output's dtype */
    *y = sn_cast(g, sn_add(g, sn_matmul(g, sn_cast(g, *x, t), sn_cast(g, *w, t)),
                           sn_cast(g, *bt, SN_F32)), t);
    sn_graph_add_output(g, *y);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

START_TEST(bias_epilogue_matches_the_interpreter) {
    if (!have_nvrtc()) return;
    sn_dtype t = _i == 0 ? SN_BF16 : _i == 1 ? SN_F16 : SN_F32;
    double tol = t == SN_BF16 ? 0x1p-8 : t == SN_F16 ? 0x1p-10 : 1e-5;
    sn_node *x, *w, *b, *bt, *y;
    sn_graph *ref = linear_graph(t, &x, &w, &b, &bt, &y);
    sn_err e;
    float xv[256], wv[384], bv[24];
    fill(xv, 256, 1), fill(wv, 384, 2), fill(bv, 24, 3);
    sn_interp *it = sn_interp_new(ref, false);
    ck_assert(!sn_interp_set(it, x, xv, &e) && !sn_interp_set(it, w, wv, &e) &&
              !sn_interp_set(it, b, bv, &e) && !sn_interp_run(it, &e));
    const double *want = sn_interp_value(it, y);
    for (int d = 0; d < 2; d++) { /* each device's program, compiled for its target */
        sn_device *dev = NULL;
        if (d == 0) ck_assert_msg(sn_cpu_device_new(2, &dev, &e) == SN_OK, "%s", e.msg);
        else dev = cuda(NULL);
        sn_graph *g = linear_graph(t, &x, &w, &b, &bt, &y);
        sn_program *p;
        ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &dev->target}, &p, NULL, &e),
                      "%s", e.msg);
        int gemms = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->kind != SN_KER_GEMM) {
                ck_assert_msg(ker->kind == SN_KER_POINTWISE && ker->args[0]->op == SN_OP_CAST,
                              "%s: only the operands' casts besides the GEMM", ker->name);
                continue;
            }
            ck_assert_int_eq(ker->gemm.epilogue, SN_EPI_BIAS);
            ck_assert(ker->args[0] == y && ker->args[3] == bt);
            gemms++;
        }
        ck_assert_int_eq(gemms, 1);
        sn_exec *ex;
        ck_assert_msg(!sn_exec_new(dev, p, &ex, &e), "%s", e.msg);
        ck_assert(!sn_exec_set(ex, x, xv, &e) && !sn_exec_set(ex, w, wv, &e) &&
                  !sn_exec_set(ex, b, bv, &e));
        ck_assert_msg(!sn_exec_run(ex, &e), "%s", e.msg);
        float got[384], raw[384]; /* the output's own storage, widened */
        double gd[384];
        ck_assert_msg(!sn_exec_get(ex, y, raw, &e), "%s", e.msg);
        from_dtype(t, raw, 384, got);
        for (int i = 0; i < 384; i++) gd[i] = got[i];
        sn_check_close(d ? "linear, stand-in" : "linear, cpu", gd, want, 384, tol, tol);
        sn_exec_free(ex);
        sn_program_free(p);
        sn_graph_free(g);
        sn_device_free(dev);
    }
    sn_interp_free(it);
    sn_graph_free(ref);
}
END_TEST

/* c_fc's GELU and its gradient as autocast leaves them, in storage type t (bf16, f16; f32: no
 * casts): h = rnd(x @ w1 + f32(b1)), g = rnd(gelu(f32(h))), and the backward's
 * dh = rnd(gelu_bwd(f32(h), f32(rnd(dy @ w2^T)))), outputs g and dh; h (the aux) is an output
 * too when aux_out. */
typedef struct {
    sn_node *x, *w1, *b1, *dy, *w2, *h, *g, *dh;
} mlp_nodes;

static sn_node *as(sn_graph *g, sn_node *x, sn_dtype t) { return x->dtype == t ? x : sn_cast(g, x, t); }

static sn_graph *mlp_graph(sn_dtype t, mlp_nodes *m) {
    sn_graph *g = sn_graph_new();
    m->x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 8, 16));
    m->w1 = sn_input(g, "w1", SN_F32, SN_SHAPE(16, 32));
    m->b1 = sn_input(g, "b1", SN_F32, SN_SHAPE(32));
    m->dy = sn_input(g, "dy", SN_F32, SN_SHAPE(2, 8, 8));
    m->w2 = sn_input(g, "w2", SN_F32, SN_SHAPE(32, 8));
    sn_node *v = sn_add(g, sn_matmul(g, as(g, m->x, t), as(g, m->w1, t)), as(g, as(g, m->b1, t), SN_F32));
    m->h = as(g, v, t);
    m->g = as(g, sn_gelu(g, as(g, m->h, SN_F32)), t);
    sn_node *p = as(g, sn_matmul_t(g, as(g, m->dy, t), as(g, m->w2, t), false, true), t);
    m->dh = as(g, sn_gelu_bwd(g, as(g, m->h, SN_F32), as(g, p, SN_F32)), t);
    sn_graph_add_output(g, m->g);
    sn_graph_add_output(g, m->dh);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

/* Multiples of 1/den in [-1, 1] (den <= 128: exact in bf16). */
static void dyadic(float *x, size_t n, uint64_t seed, int den) {
    fill(x, n, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(int)(x[i] * (float)den) / (float)den;
}

/* The GELU epilogues (kernel.h: GELU_AUX_BIAS, DGELU) on the CPU device and on the stand-in's
 * cuBLASLt: one GEMM kernel each, nothing else but the operands' casts; the same bits from the
 * two devices on operands whose products are exact in f32 (so that the epilogue alone decides:
 * the same f32 formulas, program/epilogue.h; a CPU device that rounded GELU's input to 16 bits
 * first, as the graph does, was caught here), and of the interpreter, which rounds GELU's input
 * and the product where the epilogues do not, within 2^-7 (bf16), 2^-9 (f16) of the largest
 * value: four units of roundoff. */
START_TEST(gelu_epilogues_match_the_interpreter) {
    if (!have_nvrtc()) return;
    sn_dtype t = _i == 0 ? SN_BF16 : _i == 1 ? SN_F16 : SN_F32;
    double tol = t == SN_BF16 ? 0x1p-7 : t == SN_F16 ? 0x1p-9 : 1e-6;
    mlp_nodes r, m;
    sn_graph *ref = mlp_graph(t, &r);
    sn_err e;
    float xv[256], w1v[512], b1v[32], dyv[128], w2v[256];
    /* eighths times 64ths: sums of 16 or 8 products exact in f32, with more bits than bf16 and
       f16 keep, so that the roundings the epilogues skip show */
    dyadic(xv, 256, 1, 8), dyadic(w1v, 512, 2, 64), dyadic(b1v, 32, 3, 64), dyadic(dyv, 128, 4, 8);
    dyadic(w2v, 256, 5, 64);
    sn_interp *it = sn_interp_new(ref, false);
    ck_assert(!sn_interp_set(it, r.x, xv, &e) && !sn_interp_set(it, r.w1, w1v, &e) &&
              !sn_interp_set(it, r.b1, b1v, &e) && !sn_interp_set(it, r.dy, dyv, &e) &&
              !sn_interp_set(it, r.w2, w2v, &e) && !sn_interp_run(it, &e));
    uint16_t bits[2][2][512]; /* device, output (g, dh): the stored 16 or 32 bits, 512 values */
    for (int d = 0; d < 2; d++) {
        sn_device *dev = NULL;
        if (d == 0) ck_assert_msg(sn_cpu_device_new(2, &dev, &e) == SN_OK, "%s", e.msg);
        else dev = cuda(NULL);
        sn_graph *g = mlp_graph(t, &m);
        sn_program *p;
        sn_target tg = dev->target; /* the CPU's with the epilogues too (its own keeps the GELU
                                       in pointwise kernels) */
        tg.gelu_unfused = false;
        tg.dgelu_min_elems = 0; /* the DGELU epilogue at this size too (target.h) */
        ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &tg}, &p, NULL, &e),
                      "%s", e.msg);
        int epi[SN_EPI_COUNT] = {0};
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->kind == SN_KER_GEMM) epi[ker->gemm.epilogue]++;
            else ck_assert_msg(ker->kind == SN_KER_POINTWISE && ker->n_instr == 1 &&
                               ker->args[0]->op == SN_OP_CAST, "%s: only the operands' casts "
                               "besides the GEMMs", ker->name);
        }
        ck_assert_int_eq(epi[SN_EPI_GELU_AUX_BIAS], 1);
        ck_assert_int_eq(epi[SN_EPI_DGELU], 1);
        sn_exec *ex;
        ck_assert_msg(!sn_exec_new(dev, p, &ex, &e), "%s", e.msg);
        ck_assert(!sn_exec_set(ex, m.x, xv, &e) && !sn_exec_set(ex, m.w1, w1v, &e) &&
                  !sn_exec_set(ex, m.b1, b1v, &e) && !sn_exec_set(ex, m.dy, dyv, &e) &&
                  !sn_exec_set(ex, m.w2, w2v, &e));
        ck_assert_msg(!sn_exec_run(ex, &e), "%s", e.msg);
        const sn_node *outs[2] = {m.g, m.dh}, *want[2] = {r.g, r.dh};
        for (int o = 0; o < 2; o++) {
            float raw[512], got[512];
            double gd[512];
            ck_assert_msg(!sn_exec_get(ex, outs[o], raw, &e), "%s", e.msg);
            memcpy(bits[d][o], raw, sizeof bits[d][o]); /* f32: the low halves of the first 256 */
            from_dtype(t, raw, 512, got);
            for (int i = 0; i < 512; i++) gd[i] = got[i];
            char what[64];
            snprintf(what, sizeof what, "%s, %s, %s", o ? "dgelu" : "gelu", sn_dtype_name(t),
                     d ? "stand-in" : "cpu");
            sn_check_close(what, gd, sn_interp_value(it, want[o]), 512, tol, 1);
            if (t == SN_F32) continue;
            if (d) ck_assert_msg(!memcmp(bits[0][o], bits[1][o], sizeof bits[0][o]),
                                 "%s: not the cpu device's bits", what);
        }
        sn_exec_free(ex);
        sn_program_free(p);
        sn_graph_free(g);
        sn_device_free(dev);
    }
    sn_interp_free(it);
    sn_graph_free(ref);
}
END_TEST

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *f; d && (f = readdir(d));) n += f->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* Opens a device on cache dir (jobs NVRTC children at once, 0: the CPUs), builds a trainer
 * (every kernel compiled), trains two steps. */
static cache_round cache_run(const char *dir, int jobs) {
    cache_round r = {0};
    use_standin();
    sn_cuda_opts o = {.cache_dir = dir, .compile_jobs = jobs};
    sn_device *d = NULL;
    sn_err e;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = tiny();
    sn_trainer *t = trainer_on(g, d, &e);
    ck_assert_msg(t, "%s", e.msg);
    double norm[2];
    ck_assert_msg(train(t, 2, r.loss, norm, &e) == SN_OK, "%s", e.msg);
    sn_cuda_stats_get(d, &r.st);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
    r.files = count_files(dir);
    return r;
}

/* Flips a byte in the middle of the entry whose name sorts first; returns its name. */
static void corrupt_one(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    char first[256] = "";
    for (struct dirent *f; (f = readdir(d));)
        if (f->d_name[0] != '.' && (!first[0] || strcmp(f->d_name, first) < 0))
            snprintf(first, sizeof first, "%s", f->d_name);
    closedir(d);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, first);
    FILE *fp = fopen(path, "r+b");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, 0, SEEK_END);
    long mid = ftell(fp) / 2;
    fseek(fp, mid, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, mid, SEEK_SET);
    fputc(c ^ 0x5a, fp);
    fclose(fp);
}

/* The program compiles as several parts, an entry each: cold (three children at once, fewer than
 * the parts), warm with the default number of children (every part a hit: the split and the keys
 * depend on the program only), one damaged entry (that part alone recompiled), warm again; the
 * losses equal every time. */
START_TEST(kernel_cache_cold_warm_corrupt) {
    if (!have_nvrtc()) return;
    char dir[] = "/tmp/sn_standin_cache_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    cache_round cold = cache_run(dir, 3);
    ck_assert_int_gt(cold.st.parts, cold.st.programs + 3); /* the training program split */
    ck_assert_int_eq(cold.st.nvrtc_runs, cold.st.parts); /* a child per part */
    ck_assert_int_eq(cold.st.cache_hits, 0);
    ck_assert_int_eq(cold.files, cold.st.nvrtc_runs); /* one entry per compiled part */
    for (int q = 0; q < cold.st.last_parts; q++) {
        ck_assert(cold.st.part[q].compiled);
        ck_assert_double_gt(cold.st.part[q].cpu_s, 0);
    }
    cache_round warm = cache_run(dir, 0);
    ck_assert_int_eq(warm.st.nvrtc_runs, 0); /* NVRTC never ran */
    ck_assert_int_eq(warm.st.cache_hits, cold.st.nvrtc_runs);
    ck_assert_int_eq(warm.st.cache_rejected, 0);
    corrupt_one(dir);
    cache_round bad = cache_run(dir, 0);
    ck_assert_int_eq(bad.st.cache_rejected, 1); /* the damaged entry refused ... */
    ck_assert_int_eq(bad.st.nvrtc_runs, 1);     /* ... its part alone compiled again */
    ck_assert_int_eq(bad.st.cache_hits, cold.st.nvrtc_runs - 1);
    cache_round again = cache_run(dir, 0); /* the rewritten entry is good */
    ck_assert_int_eq(again.st.nvrtc_runs, 0);
    ck_assert_int_eq(again.st.cache_rejected, 0);
    ck_assert_int_eq(again.files, cold.files);
    for (int s = 0; s < 2; s++)
        ck_assert_msg(cold.loss[s] == warm.loss[s] && cold.loss[s] == bad.loss[s] &&
                      cold.loss[s] == again.loss[s], "step %d: losses %.9g %.9g %.9g %.9g", s,
                      cold.loss[s], warm.loss[s], bad.loss[s], again.loss[s]);
    printf("test_standin: kernel cache: cold %d programs in %d parts, %d NVRTC runs in %.2f s, "
           "warm %d hits in %.3f s, one corrupt entry rejected and recompiled\n",
           cold.st.programs, cold.st.parts, cold.st.nvrtc_runs, cold.st.compile_s,
           warm.st.cache_hits, warm.st.compile_s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static int count_fds(void) { return count_files("/proc/self/fd"); }

/* NVRTC failing, or crashing, on one part of the program (the one with the cross-entropy
 * backward) while the others compile: the error names that part and its kernels and carries
 * NVRTC's words; every child is reaped (no zombie) and no pipe is left open. */
START_TEST(part_failure_names_the_part) {
    if (!have_nvrtc()) return;
    const char *var = _i ? "SN_STANDIN_CRASH_NVRTC" : "SN_STANDIN_FAIL_NVRTC";
    char dir[] = "/tmp/sn_standin_fail_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    use_standin();
    sn_cuda_opts o = {.cache_dir = dir, .compile_jobs = 2};
    sn_device *d = NULL;
    sn_err e = {0};
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = tiny();
    int fds = count_fds();
    setenv(var, "cross_entropy_bwd", 1);
    sn_trainer *t = trainer_on(g, d, &e);
    unsetenv(var);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(e.code, SN_ERR_DEVICE);
    int part = 0, parts = 0, file_part = 0, file_parts = 0;
    ck_assert_msg(sscanf(e.msg, "part %d of %d (functions k", &part, &parts) == 2, "%s", e.msg);
    const char *file = strstr(e.msg, "sinter_program_0_part");
    ck_assert_msg(file && sscanf(file, "sinter_program_0_part%dof%d.cu", &file_part,
                                 &file_parts) == 2, "%s", e.msg);
    ck_assert_int_gt(parts, 3);
    ck_assert_int_eq(file_part, part); /* the part named is the one compiled */
    ck_assert_int_eq(file_parts, parts);
    if (_i) {
        ck_assert_has(e.msg, "NVRTC crashed (signal 11, Segmentation fault) compiling");
    } else {
        ck_assert_has(e.msg, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION");
        ck_assert_has(e.msg, "the source contains \"cross_entropy_bwd\"");
    }
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* no child left, ended or not */
    ck_assert_int_eq(count_fds(), fds);
    printf("test_standin: %s: %s\n", var, e.msg);
    sn_graph_free(g);
    sn_device_free(d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- injected failures: each a status whose message names what failed ---- */

static const struct {
    const char *env, *value; /* the stand-in's setting */
    sn_status status;
    const char *says[3];     /* what the message must contain */
} failures[] = {
    {"SN_STANDIN_FAIL_ALLOC", "2", SN_ERR_OOM,
     {"cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", NULL}},
    {"SN_STANDIN_MEM", "64K", SN_ERR_OOM,
     {"cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY", "the GPU has", "use a smaller --batch or --seq"}},
    {"SN_STANDIN_NO_BINARY", "1", SN_ERR_DEVICE,
     {"cuModuleLoadData: CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available", NULL}},
    {"SN_STANDIN_FAIL_LAUNCH", "7", SN_ERR_DEVICE,
     {"cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)", "(kernel k", NULL}},
    {"SN_STANDIN_FAULT_LAUNCH", "7", SN_ERR_DEVICE,
     {"CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered): a kernel failed on "
      "the GPU", "CUDA_LAUNCH_BLOCKING=1", NULL}},
    {"SN_STANDIN_FAIL_CUBLASLT", "1", SN_ERR_DEVICE,
     {"cublasLtCreate: CUBLAS_STATUS_NOT_INITIALIZED", NULL}},
    {"SN_STANDIN_SM", "70", SN_ERR_UNSUPPORTED, {"is sm_70: sinter needs sm_75", "--device cpu"}},
};

START_TEST(injected_failure_says_what_failed) {
    if (!have_nvrtc()) return;
    setenv(failures[_i].env, failures[_i].value, 1);
    use_standin();
    sn_cuda_opts o = {.cache_dir = shared_cache()};
    sn_device *d = NULL;
    sn_err e = {0};
    sn_status st = sn_cuda_device_new_opts(0, &o, &d, &e);
    sn_graph *g = tiny();
    sn_trainer *t = NULL;
    if (!st && !(t = trainer_on(g, d, &e))) st = e.code;
    double loss[3], norm[3];
    if (!st) st = train(t, 3, loss, norm, &e);
    ck_assert_msg(st == failures[_i].status, "%s=%s: status %d, want %d: %s", failures[_i].env,
                  failures[_i].value, st, failures[_i].status, st ? e.msg : "no failure");
    for (int i = 0; i < 3 && failures[_i].says[i]; i++) ck_assert_has(e.msg, failures[_i].says[i]);
    printf("test_standin: %s=%s: %s\n", failures[_i].env, failures[_i].value, e.msg);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

/* tiny GPT-2 with LoRA adapters (rank 4, every linear layer) in precision p, its frozen linear
 * weights in the compute dtype (the base16 pass) or f32 parameters with weight shadows */
static sn_graph *tiny_lora_rows(sn_precision p, bool base16, int batch, int *stored) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = 4, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_gpt2_build_lora(g, &c, batch, T, &l, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = true;
    o.base16 = base16;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    *stored = st.base16_stored;
    return g;
}

static sn_graph *tiny_lora_at(sn_precision p, bool base16, int *stored) {
    return tiny_lora_rows(p, base16, B, stored);
}

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

/* ---- SN_GEMM_TUNE (runtime/cuda/gemm_tune.c) on the stand-in's algorithms ---- */

/* stderr into a temporary file from begin to end, which returns what was written (malloc'd). */
typedef struct {
    FILE *f;
    int saved;
} stderr_capture;

static void capture_begin(stderr_capture *c) {
    fflush(stderr);
    ck_assert((c->f = tmpfile()) && (c->saved = dup(2)) >= 0 && dup2(fileno(c->f), 2) >= 0);
}

static char *capture_end(stderr_capture *c) {
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    long n = ftell(c->f);
    char *s = calloc((size_t)n + 1, 1);
    rewind(c->f);
    ck_assert(s && fread(s, 1, (size_t)n, c->f) == (size_t)n);
    fclose(c->f);
    return s;
}

/* SN_GEMM_TUNE's values: 0 or unset off, 2 to 32 on, any other refused naming what it takes. */
START_TEST(gemm_tune_setting_is_checked) {
    const struct {
        const char *v;
        int n; /* -1: refused */
    } cases[] = {{"", 0}, {"0", 0}, {"2", 2}, {"16", 16}, {"32", 32}, {"1", -1}, {"33", -1},
                 {"-4", -1}, {"16x", -1}, {"many", -1}, {"99999999999999999999", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("SN_GEMM_TUNE", cases[i].v, 1);
        sn_gemm_tuner t;
        sn_err e = {0};
        sn_status st = sn_gemm_tuner_init(&t, &e);
        ck_assert_int_eq(st, cases[i].n < 0 ? SN_ERR_INVALID : SN_OK);
        if (cases[i].n >= 0) ck_assert_int_eq(t.n, cases[i].n);
        else ck_assert_msg(strstr(e.msg, cases[i].v) && strstr(e.msg, "2 to 32"), "%s", e.msg);
        sn_gemm_tuner_free(&t);
    }
    /* the device refuses to start with a bad one, saying so */
    setenv("SN_GEMM_TUNE", "many", 1);
    use_standin();
    sn_device *d = NULL;
    sn_err e;
    ck_assert_int_eq(sn_cuda_device_new(0, &d, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "SN_GEMM_TUNE=many");
    ck_assert_ptr_null(d);
    unsetenv("SN_GEMM_TUNE");
}
END_TEST

/* The stand-in's heuristic asked for more than one gives four algorithms that compute alike:
 * the first modeled at 30 us a run, the second at 10 (the fastest) without an epilogue and 30
 * with one (a tie), the third at 50, the fourth refusing to run. Tuning runs each that runs once
 * and then 5 times timed, and keeps the fastest: the second for a plain product and for one
 * adding its C in place (whose D then holds A B + C, untouched by the tuning), the first on a
 * tie (the bias epilogue) and when asked for 2 of a bias GEMM; an alike problem takes the
 * winner with nothing run; a problem whose scratch does not fit keeps the first. */
START_TEST(gemm_tuning_keeps_the_fastest) {
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    sn_err e;
    uint64_t (*runs)(int) = (uint64_t(*)(int))dlsym(a->handle[SN_LIB_CUBLASLT], "sn_standin_cublaslt_runs");
    ck_assert_ptr_nonnull(runs);
    enum { M = 5, N = 8, K = 3, WS = 1 << 20 };
    sn_gemm_shape plain = {.M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = N, .ldd = N};
    sn_gemm_shape bias = plain, accum = plain, huge = plain;
    bias.epi = SN_EPI_BIAS;
    accum.accum = true;
    huge.M = huge.N = huge.ldb = huge.ldd = 1 << 17; /* 64 GiB of f32 D: more than the 4G */
    const struct {
        const sn_gemm_shape *s;
        int n, tried, ran, chosen;
        double first_us, chosen_us;
        bool known, no_scratch;
    } cases[] = {
        {&plain, 4, 4, 3, 1, 30, 10, false, false},  {&bias, 4, 4, 3, 0, 30, 30, false, false},
        {&accum, 4, 4, 3, 1, 30, 10, false, false},  {&plain, 4, 0, 0, 1, 0, 0, true, false},
        {&bias, 2, 2, 2, 0, 30, 30, false, false},   {&huge, 4, 4, 0, 0, 0, 0, false, true},
    };
    CUdeviceptr dA, dB, dD, ws;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * M * K));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dB, 4 * K * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * M * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &ws, WS));
    float A[M * K], Bm[K * N], C[M * N], D[M * N];
    double want[M * N], got[M * N];
    fill(A, M * K, 1);
    fill(Bm, K * N, 2);
    fill(C, M * N, 3);
    setenv("SN_GEMM_TUNE", "4", 1);
    setenv("SN_GEMM_TUNE_LOG", "1", 1);
    sn_gemm_tuner t[2]; /* asked for 4, and for 2 */
    CK(sn_gemm_tuner_init(&t[0], &e));
    setenv("SN_GEMM_TUNE", "2", 1);
    CK(sn_gemm_tuner_init(&t[1], &e));
    stderr_capture cap;
    capture_begin(&cap);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sn_gemm_plan *p;
        CK(sn_gemm_plan_new(a, L.lt, cases[i].s, false, WS, &p, &e));
        uint64_t before[4];
        for (int k = 0; k < 4; k++) before[k] = runs(k);
        sn_gemm_tune_result r;
        CK(sn_gemm_tune(&t[cases[i].n == 2], a, L.lt, p, L.stream, ws, WS, &r, &e));
        ck_assert_msg(r.tried == cases[i].tried && r.ran == cases[i].ran &&
                      r.chosen == cases[i].chosen && r.known == cases[i].known &&
                      r.no_scratch == cases[i].no_scratch &&
                      fabs(r.first_s - 1e-6 * cases[i].first_us) < 1e-9 &&
                      fabs(r.chosen_s - 1e-6 * cases[i].chosen_us) < 1e-9,
                      "case %zu: %d tried, %d ran, #%d chosen, %g and %g s, known %d, no scratch "
                      "%d", i, r.tried, r.ran, r.chosen, r.first_s, r.chosen_s, r.known,
                      r.no_scratch);
        for (int k = 0; k < 4; k++) /* each candidate that runs: once, then 5 times timed */
            ck_assert_int_eq(runs(k) - before[k], k < cases[i].ran ? 6 : 0);
        if (cases[i].s == &huge) {
            sn_gemm_plan_free(a, p);
            continue;
        }
        /* the plan runs its winner on the program's buffers: A B (+ C already in D, in place) */
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, A, sizeof A, L.stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, Bm, sizeof Bm, L.stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dD, C, sizeof C, L.stream));
        for (int k = 0; k < 4; k++) before[k] = runs(k);
        float zeros[N] = {0};
        CUdeviceptr dbias = dD + 4 * M * N; /* unused without the epilogue */
        if (cases[i].s->epi == SN_EPI_BIAS) {
            CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dbias, sizeof zeros));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dbias, zeros, sizeof zeros, L.stream));
        }
        CK(sn_gemm_plan_run(a, L.lt, p, dD, dA, dB, cases[i].s->epi == SN_EPI_BIAS ? dbias : 0, 0,
                            cases[i].s->accum ? dD : 0, ws, WS, L.stream, &e));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, D, dD, sizeof D, L.stream));
        CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
        if (cases[i].s->epi == SN_EPI_BIAS) CK(SN_CUDA_CHECK(a, &e, cuMemFree, dbias));
        ck_assert_int_eq(runs(cases[i].chosen) - before[cases[i].chosen], 1);
        reference(cases[i].s, A, Bm, zeros, NULL, C, want, NULL);
        for (int j = 0; j < M * N; j++) got[j] = D[j];
        sn_check_close("the tuned plan's product", got, want, M * N, 1e-6, 1);
        sn_gemm_plan_free(a, p);
    }
    char *log = capture_end(&cap);
    ck_assert_int_eq(t[0].timed, 3); /* plain, bias, accum: the alike one and the huge one not */
    ck_assert_int_eq(t[0].switched, 2);
    ck_assert_int_eq(t[1].timed, 1);
    /* SN_GEMM_TUNE_LOG: a line per problem timed, one for the huge one's want of room */
    ck_assert_has(log, "sinter: gemm tune: 5 x 8 x 3, batch 1, f32 into f32, epilogue none: the "
                  "heuristic's first 30.00 us, #1 10.00 us (3.000x), 3 of 4 candidates ran\n");
    ck_assert_has(log, "epilogue bias: the heuristic's first 30.00 us, #0 30.00 us (1.000x), 3 of 4");
    ck_assert_has(log, "epilogue none + C: the heuristic's first 30.00 us, #1 10.00 us");
    ck_assert_has(log, "epilogue bias: the heuristic's first 30.00 us, #0 30.00 us (1.000x), 2 of 2");
    ck_assert_has(log, "131072 x 131072 x 3, batch 1, f32 into f32, epilogue none: no room for 64");
    ck_assert_has(log, "of scratch operands: the heuristic's first kept, untimed\n");
    printf("test_standin: SN_GEMM_TUNE's lines:\n%s", log);
    free(log);
    for (int k = 0; k < 2; k++) sn_gemm_tuner_free(&t[k]);
    unsetenv("SN_GEMM_TUNE");
    unsetenv("SN_GEMM_TUNE_LOG");
    lt_close(&L);
}
END_TEST

/* Tuned (SN_GEMM_TUNE=4) tiny GPT-2 in bf16 and its LoRA (whose base GEMMs add the adapters' C:
 * _i) train on the stand-in to the bit as untuned: its algorithms compute alike, and the
 * tuning touches none of the program's buffers. The plain GEMMs take the fastest (the second),
 * those with an epilogue keep the first (a tie). */
START_TEST(gemm_tuning_trains_as_untuned) {
    if (!have_nvrtc()) return;
    enum { N = 6 };
    double loss[2][N], norm[2][N];
    sn_cuda_stats st[2];
    for (int tuned = 0; tuned < 2; tuned++) {
        if (tuned) setenv("SN_GEMM_TUNE", "4", 1);
        sn_device *d = cuda(NULL);
        int stored;
        sn_graph *g = _i ? tiny_lora_at(SN_PRECISION_BF16, false, &stored) : tiny_at(SN_PRECISION_BF16);
        sn_err e;
        sn_trainer *tr = trainer_on(g, d, &e);
        ck_assert_msg(tr, "%s", e.msg);
        int32_t x[B * T], y[B * T];
        for (int s = 0; s < N; s++) {
            sn_step_stats ss;
            batch(x, y, (uint64_t)s);
            ck_assert_msg(sn_trainer_step(tr, x, y, &ss, &e) == SN_OK, "step %d: %s", s, e.msg);
            loss[tuned][s] = ss.loss;
            norm[tuned][s] = ss.grad_norm;
        }
        sn_cuda_stats_get(d, &st[tuned]);
        if (tuned) ck_assert_has(d->name, ", GEMMs tuned (SN_GEMM_TUNE=4)");
        sn_trainer_free(tr);
        sn_graph_free(g);
        sn_device_free(d);
    }
    unsetenv("SN_GEMM_TUNE");
    ck_assert_int_eq(st[0].gemm_tuned, 0);
    ck_assert_int_gt(st[1].gemm_tuned, 0);
    ck_assert_int_lt(st[1].gemm_tuned, st[1].gemm_plans); /* alike problems timed once */
    ck_assert_int_gt(st[1].gemm_tune_switched, 0);
    ck_assert_int_lt(st[1].gemm_tune_switched, st[1].gemm_tuned); /* the bias epilogues' ties */
    for (int s = 0; s < N; s++)
        ck_assert_msg(loss[0][s] == loss[1][s] && norm[0][s] == norm[1][s], "step %d: loss %.17g "
                      "untuned, %.17g tuned; norm %.17g, %.17g", s, loss[0][s], loss[1][s],
                      norm[0][s], norm[1][s]);
    printf("test_standin: tiny GPT-2%s bf16 tuned (SN_GEMM_TUNE=4): %d GEMM plans, %d problems "
           "timed, %d switched; %d losses bit for bit as untuned (%.6f -> %.6f)\n",
           _i ? " LoRA" : "", st[1].gemm_plans, st[1].gemm_tuned, st[1].gemm_tune_switched, N,
           loss[1][0], loss[1][N - 1]);
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
    tcase_add_test(tc, gemm_plans_match_a_reference);
    tcase_add_test(tc, gelu_aux_rules_are_cublaslts);
    tcase_add_loop_test(tc, bias_epilogue_matches_the_interpreter, 0, 3);
    tcase_add_loop_test(tc, gelu_epilogues_match_the_interpreter, 0, 3);
    tcase_add_test(tc, kernel_cache_cold_warm_corrupt);
    tcase_add_loop_test(tc, part_failure_names_the_part, 0, 2);
    tcase_add_loop_test(tc, injected_failure_says_what_failed, 0,
                        (int)(sizeof failures / sizeof *failures));
    tcase_add_test(tc, gemm_tune_setting_is_checked);
    tcase_add_test(tc, gemm_tuning_keeps_the_fastest);
    tcase_add_loop_test(tc, gemm_tuning_trains_as_untuned, 0, 2);
    suite_add_tcase(s, tc);
    TCase *off = tcase_create("offload");
    tcase_set_timeout(off, 240);
    tcase_add_test(off, offload_trains_like_the_device);
    tcase_add_loop_test(off, offload_delay_is_the_schedule_written_out, 0, 2);
    tcase_add_loop_test(off, async_copies_land_at_their_event, 0, 2);
    tcase_add_test(off, copy_rows_land_at_their_pitch);
    tcase_add_test(off, downloads_read_at_their_call_and_race_unordered);
    tcase_add_test(off, run_copies_follow_their_last_writer);
    tcase_add_test(off, cuda_plan_is_the_trainer);
    suite_add_tcase(s, off);
    return s;
}

int main(void) { return sn_test_main(suite()); }
