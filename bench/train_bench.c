/* train_bench.c: training throughput of GPT-2 or a LLaMA-family model (--model smollm2-135m)
 * compiled for a device (--device auto|cuda|cpu): forward, forward + backward, and the full step
 * (with AdamW), as tokens/s, ms/step, achieved GFLOP/s and MFU (CPU: against the FMA peak
 * measured in the same run; CUDA: against the --roofline machine's published bf16 peak); plus
 * compile time, kernels per step and the planned vs measured arena peak. One JSON object per
 * measurement per line, with the precision (--precision fp32|bf16|fp16: the autocast pass; on
 * the CPU, MFU against the peak of the precision's products, measured in the same run). --roofline
 * h100 prints the roofline model (roofline.h) beside the measured times by kernel kind, or alone
 * with --model-only (compiles, runs nothing: no GPU needed).
 *
 *     bench/train_bench --model gpt2 --batch 4 --seq 256 --steps 3
 *     bench/train_bench --model gpt2 --batch 16 --seq 1024 --roofline h100 --model-only
 *     bench/train_bench --model gpt2 --batch 4 --seq 256 --steps 3 --precision bf16
 *     bench/train_bench --model demo --batch 16 --seq 128 --steps 10 --compare-interp
 *     bench/train_bench --model gpt2 --batch 4 --seq 128 --steps 3 --lora 8   (LoRA vs full step)
 *     bench/train_bench --model gpt2 --batch 4 --seq 256 --steps 3 --qlora 8 --precision bf16
 *                                                            (QLoRA vs LoRA of the same rank) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/pipeline.h"
#include "passes/passes.h"
#include "program/target.h"
#include "support/clock.h"
#include "support/cores.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "support/rng.h"
#include "train/offload.h"
#include "train/train.h"
#include "bench_json.h"
#include "peak.h"
#include "roofline.h"

typedef struct {
    const char *model;
    int batch, seq, steps, threads;
    int checkpoint; /* an sn_recompute_policy (--checkpoint-policy; budget with --arena-budget) */
    int64_t arena_budget; /* --arena-budget: the budget policy's arena (what sinter plan chose) */
    bool offload;   /* --offload: the optimizer state in host memory (sn_train_opts.offload) */
    bool offload_delay; /* --offload-delay: the delayed update; the offloaded step without it
                           and the on-device step timed in the same run, in blocks */
    int64_t chunk_logits; /* --chunk-logits N: the LM head in chunks of N rows (passes.h); the
                             step with the head whole is timed too, in the same run */
    bool loss_only; /* --loss-only, and with --chunk-logits both steps: the loss the training
                       graph's one output, as sinter train has it (else the logits are one too,
                       and persistent: in a 16-bit program the classifier then reads f32 logits) */
    int fp8;        /* --fp8 head|linear: products on 8-bit operands (passes.h sn_fp8_policy) */
    bool compare_interp;
    const sn_target *target; /* the device's, which every compile names (--model-only: CUDA's
                                sm_90, the roofline machines' architecture) */
    int lora;       /* --lora R: LoRA adapters of rank R on every linear layer (alpha R), the
                       base frozen; the full fine-tuning step is timed too, in the same run */
    unsigned lora_targets; /* --lora-targets all|attn|mlp: the layers adapted (default all) */
    bool nf4;       /* --qlora R: --lora R over a base stored as NF4 (the nf4 pass); the LoRA
                       step of the same rank is the baseline timed in the same run */
    bool ia3;       /* --ia3: IA3 vectors instead (frontend/ia3.h), the full step timed too */
    bool base_f32;  /* --base-f32: the frozen base f32 with weight shadows (else, in bf16/fp16,
                       stored in the compute dtype as sinter train does; the other timed too) */
    sn_precision precision;
    const char *isa; /* of the measured peak */
    const char *device;   /* auto, cuda or cpu */
    const char *roofline; /* a machine (roofline.h) or NULL */
    bool model_only;      /* print the roofline model and run nothing */
    bool startup_only;    /* --startup-only: sn_trainer_new's seconds and their split, no step */
    bool tf32;            /* CUDA: TF32 GEMMs (and the model's f32 GEMMs at the TF32 rate) */
    double host_gbs;      /* --host-gbs: the offload model's host AdamW (0: measured here) */
    double device_ms;     /* --device-ms: the offload model's device step as measured (0: modeled) */
    double peak_f32, peak_bf16; /* GFLOP/s measured in this run (bf16: 0 without the instruction) */
} args;

static void die(const char *what, const sn_err *e) {
    fprintf(stderr, "train_bench: %s: %s\n", what, e ? e->msg : "");
    exit(1);
}

/* FLOPs the program's kernels execute: GEMMs 2MNK; attention counts the causal pairs. */
static double program_flops(const sn_program *p) {
    double total = 0;
    for (int k = 0; k < p->n_kernels; k++) total += sn_roofline_kernel_flops(p->kernels[k]);
    return total;
}

/* The model's graph through the pipeline (sn_compile): with its backward for the trainer (which
 * compiles the rest), or forward only and compiled into *prog. */
static sn_graph *model_graph(const args *a, bool backward, sn_program **prog) {
    sn_gpt2_config c;
    sn_llama_config lc;
    bool gpt2 = sn_gpt2_config_find(a->model, &c);
    if (!gpt2 && !sn_llama_config_find(a->model, &lc)) die("unknown model", NULL);
    sn_graph *g = sn_graph_new();
    sn_node *loss;
    sn_err e;
    if (!g) die("out of memory for the graph", NULL);
    sn_gpt2_lora l = {.lora = {.rank = a->lora, .alpha = (float)a->lora}, .targets = a->lora_targets};
    if (a->ia3) l = (sn_gpt2_lora){.ia3 = true};
    if (gpt2) {
        sn_gpt2 m;
        if (sn_gpt2_build_lora(g, &c, a->batch, a->seq, a->lora || a->ia3 ? &l : NULL, &m, &e))
            die("model", &e);
        loss = m.loss;
    } else {
        sn_llama m;
        if (sn_llama_build_lora(g, &lc, a->batch, a->seq, a->lora || a->ia3 ? &l : NULL, &m, &e))
            die("model", &e);
        loss = m.loss;
    }
    if (backward && a->loss_only) { /* the loss alone (the chunked head has no whole logits) */
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, loss);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.target = a->target;
    o.backward = backward;
    o.checkpoint = backward ? a->checkpoint : 0;
    o.checkpoint_budget = a->arena_budget;
    o.precision = a->precision;
    o.base16 = !a->base_f32;
    o.chunk_logits = backward ? a->chunk_logits : 0;
    o.nf4 = a->nf4;
    o.fp8 = backward ? a->fp8 : 0;
    if (sn_compile(g, &o, prog, NULL, &e)) die("pipeline", &e);
    return g;
}

/* The model's vocabulary (the ids a batch draws from). */
static int model_vocab(const args *a) {
    sn_gpt2_config c;
    sn_llama_config lc;
    if (sn_gpt2_config_find(a->model, &c)) return c.vocab;
    if (sn_llama_config_find(a->model, &lc)) return lc.vocab;
    die("unknown model", NULL);
    return 0;
}

static void random_batch(const args *a, int vocab, int32_t *x, int32_t *y, uint64_t seed) {
    sn_rng r = sn_rng_seed(seed);
    for (int i = 0; i < a->batch * a->seq; i++) {
        x[i] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
        y[i] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
    }
}

/* The record of one phase's timing; the caller adds its own fields and prints it (bj_print). */
static bj *record(const args *a, const char *device, const char *phase, double s_per_step,
                  double flops, double peak) {
    double tokens = (double)a->batch * a->seq, mfu = flops / s_per_step / 1e9 / peak;
    if (mfu > 1) /* the step outran the peak: that measurement is wrong, not the step */
        fprintf(stderr, "train_bench: %s: MFU %.2f is above 1: the step reached %.1f GFLOP/s, more "
                "than the peak measured (%.1f, %s): the machine was busy or its clock lower when "
                "the peak was measured; measure again on an idle machine (\"mfu_suspect\" in the "
                "JSON)\n", phase, mfu, flops / s_per_step / 1e9, peak, a->isa);
    bj *r = bj_new();
    bj_str(r, "bench", "train");
    bj_str(r, "phase", phase);
    bj_str(r, "device", device);
    bj_str(r, "model", a->model);
    bj_int(r, "batch", a->batch);
    bj_int(r, "seq", a->seq);
    bj_int(r, "lora", a->lora);
    bj_bool(r, "qlora", a->nf4);
    bj_bool(r, "ia3", a->ia3);
    bj_str(r, "checkpoint", sn_recompute_policy_name((sn_recompute_policy)a->checkpoint));
    bj_bool(r, "offload", a->offload);
    bj_num(r, "ms_per_step", "%.2f", 1e3 * s_per_step);
    bj_num(r, "tokens_per_s", "%.1f", tokens / s_per_step);
    bj_str(r, "precision", sn_precision_name(a->precision));
    if (a->fp8) bj_str(r, "fp8", sn_fp8_policy_name((sn_fp8_policy)a->fp8));
    bj_num(r, "gflops", "%.1f", flops / s_per_step / 1e9);
    bj_num(r, "peak_gflops", "%.1f", peak);
    bj_str(r, "peak_isa", a->isa);
    bj_num(r, "f32_peak_gflops", "%.1f", a->peak_f32);
    bj_num(r, "bf16_peak_gflops", "%.1f", a->peak_bf16);
    bj_num(r, "mfu", "%.4f", mfu);
    bj_bool(r, "mfu_suspect", mfu > 1);
    return r;
}

/* A profiled step's seconds by kernel kind. */
static void kind_fields(bj *r, const double *kind_s) {
    bj_num(r, "gemm_s", "%.3f", kind_s[SN_KER_GEMM]);
    bj_num(r, "attention_s", "%.3f", kind_s[SN_KER_ATTENTION]);
    bj_num(r, "pointwise_s", "%.3f", kind_s[SN_KER_POINTWISE]);
    bj_num(r, "row_s", "%.3f", kind_s[SN_KER_ROW]);
    bj_num(r, "reduce_s", "%.3f", kind_s[SN_KER_REDUCE]);
    bj_num(r, "gather_s", "%.3f", kind_s[SN_KER_GATHER]);
    bj_num(r, "dequant_s", "%.3f", kind_s[SN_KER_DEQUANT]);
}

/* Best time of `steps` calls of fn (after one warm-up call). */
typedef sn_status (*step_fn)(void *ctx, sn_err *e);
static double time_best(int steps, step_fn fn, void *ctx) {
    sn_err e;
    if (fn(ctx, &e)) die("warm-up", &e);
    double best = 1e30;
    for (int i = 0; i < steps; i++) {
        double t0 = sn_clock_s();
        if (fn(ctx, &e)) die("step", &e);
        double dt = sn_clock_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* The best of `steps` runs each of fn on ctx[0] and ctx[1], interleaved (the order swapped
 * every round) so that a load that comes and goes weighs on both alike, after a warm-up each. */
static void time_pair(int steps, step_fn fn, void *const ctx[2], double best[2]) {
    sn_err e;
    for (int k = 0; k < 2; k++) {
        if (fn(ctx[k], &e)) die("warm-up", &e);
        best[k] = 1e30;
    }
    for (int i = 0; i < 2 * steps; i++) {
        int k = (i & 1) ^ ((i >> 1) & 1); /* 0 1, 1 0, 0 1, ... */
        double t0 = sn_clock_s();
        if (fn(ctx[k], &e)) die("step", &e);
        double dt = sn_clock_s() - t0;
        if (dt < best[k]) best[k] = dt;
    }
}

typedef struct {
    sn_trainer *t;
    int32_t *x, *y;
    sn_exec *fwd;
} run_ctx;

static sn_status run_forward(void *ctx, sn_err *e) { return sn_exec_run(((run_ctx *)ctx)->fwd, e); }
/* validation's evaluation: the evaluation program (the loss's forward alone, runner.h) */
static sn_status run_eval(void *ctx, sn_err *e) {
    run_ctx *r = ctx;
    double loss;
    return sn_trainer_eval(r->t, r->x, r->y, &loss, e);
}
/* The training program's kernels up to the last that writes its loss. */
static int loss_end(const sn_program *p) {
    int end = 0;
    for (int k = 0; k < p->n_kernels; k++)
        for (int o = 0; o < p->kernels[k]->n_out; o++)
            if (p->kernels[k]->args[o] == p->g->loss && sn_kernel_writes(p->kernels[k], o)) end = k + 1;
    return end;
}

static sn_status run_step(void *ctx, sn_err *e) {
    run_ctx *r = ctx;
    return sn_trainer_step(r->t, r->x, r->y, NULL, e);
}

/* One step of r's trainer with every kernel timed: its times by kind in *st, its program. */
static const sn_program *profiled_step(run_ctx *r, const char *what, sn_exec_stats *st) {
    sn_err e;
    sn_exec_time_kernels(sn_trainer_exec(r->t), true);
    if (run_step(r, &e)) die(what, &e);
    sn_exec_stats_get(sn_trainer_exec(r->t), st);
    return sn_trainer_program(r->t);
}

/* --offload-delay: steps back to back, ended by the drain of the last update (its cost spread
 * over the block), so that an update in flight never overlaps another trainer's block. */
typedef struct {
    run_ctx *r;
    int steps;
    bool at_update; /* the delayed update's weights up in the update (sn_trainer_accumulate),
                       not during the next step's run (sn_trainer_step) */
} block_ctx;

static sn_status run_block(void *ctx, sn_err *e) {
    block_ctx *b = ctx;
    sn_status s = SN_OK;
    for (int i = 0; i < b->steps && !s; i++) {
        if (!b->at_update) s = run_step(b->r, e);
        else if (!(s = sn_trainer_accumulate(b->r->t, b->r->x, b->r->y, NULL, e)))
            s = sn_trainer_update(b->r->t, NULL, e);
    }
    return s ? s : sn_trainer_drain(b->r->t, e);
}

/* The delayed update's weights up during the step's run against up in the update, on fresh
 * trainers of o from the same start and the same batch, CHECK_STEPS steps each: the same losses
 * bit for bit (docs/memory.md: the same numbers), what a GPU's real copies have to show; the
 * largest difference out. */
enum { CHECK_STEPS = 4 };
static bool delay_same(const args *a, const sn_train_opts *o, run_ctx *r, double *worst) {
    double l[2][CHECK_STEPS];
    sn_err e;
    for (int i = 0; i < 2; i++) { /* 0: sn_trainer_step (in the run), 1: in the update */
        sn_graph *g = model_graph(a, true, NULL);
        sn_trainer *t = sn_trainer_new(g, o, &e);
        if (!t) die("delay check trainer", &e);
        for (int s = 0; s < CHECK_STEPS; s++) {
            sn_step_stats st;
            sn_status rc = i == 0 ? sn_trainer_step(t, r->x, r->y, &st, &e)
                                  : sn_trainer_accumulate(t, r->x, r->y, NULL, &e);
            if (!rc && i == 1) rc = sn_trainer_update(t, &st, &e);
            if (rc) die("delay check step", &e);
            l[i][s] = st.loss;
        }
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    bool same = true;
    *worst = 0;
    for (int s = 0; s < CHECK_STEPS; s++) {
        same &= l[0][s] == l[1][s];
        *worst = fmax(*worst, fabs(l[0][s] - l[1][s]));
    }
    return same;
}

/* The delayed update's trainer (r), the offloaded one without the delay and the on-device one
 * (made here), each timed in blocks of a->steps steps, the three in turn for 3 rounds (the
 * order rotated), the best block of each; one record with the three and their ratios. The
 * delayed trainer's blocks send the weights up during the next step's run (sn_trainer_step);
 * its blocks of the fourth kind send them in the update, as before (the same numbers). The
 * fifth kind: a delayed trainer whose update takes every core (train.h offload_threads), where
 * the default leaves one to the thread driving the device. */
enum { BLOCK_KINDS = 5 };
static void offload_delay_blocks(const args *a, const sn_train_opts *o, run_ctx *r,
                                 const char *dev, double flops, double peak) {
    double worst;
    bool same = delay_same(a, o, r, &worst); /* first: two trainers more, freed before the rest */
    sn_err e;
    sn_graph *g[3];
    sn_trainer *t[3];
    run_ctx rc[3];
    block_ctx bc[BLOCK_KINDS] = {{r, a->steps, false}, [3] = {r, a->steps, true}};
    for (int i = 0; i < 3; i++) { /* 0: offloaded, 1: on the device, 2: delayed on every core */
        sn_train_opts bo = *o;
        bo.offload_delay = i == 2, bo.offload = i != 1;
        bo.offload_threads = i == 2 ? sn_cores() : 0;
        g[i] = model_graph(a, true, NULL);
        if (!(t[i] = sn_trainer_new(g[i], &bo, &e))) die("baseline trainer", &e);
        sn_exec_time_kernels(sn_trainer_exec(t[i]), false);
        rc[i] = (run_ctx){t[i], r->x, r->y, NULL};
        bc[i < 2 ? i + 1 : 4] = (block_ctx){&rc[i], a->steps, false};
    }
    double best[BLOCK_KINDS] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int k = 0; k < BLOCK_KINDS; k++) /* warm-up */
        if (run_block(&bc[k], &e)) die("warm-up block", &e);
    sn_offload_times before[2], after[2]; /* the delayed trainer's, the offloaded one's */
    sn_trainer_offload_times(r->t, &before[0]);
    sn_trainer_offload_times(t[0], &before[1]);
    for (int round = 0; round < 3; round++)
        for (int j = 0; j < BLOCK_KINDS; j++) {
            int k = (round + j) % BLOCK_KINDS;
            double t0 = sn_clock_s();
            if (run_block(&bc[k], &e)) die("block", &e);
            double dt = (sn_clock_s() - t0) / a->steps;
            if (dt < best[k]) best[k] = dt;
        }
    bj *rec = record(a, dev, "train_step_offload_delay", best[0], flops, peak);
    bj_int(rec, "block_steps", a->steps);
    bj_num(rec, "delayed_step_ms", "%.2f", 1e3 * best[0]);
    bj_num(rec, "offloaded_step_ms", "%.2f", 1e3 * best[1]);
    bj_num(rec, "on_device_step_ms", "%.2f", 1e3 * best[2]);
    bj_num(rec, "delayed_over_on_device", "%.3f", best[0] / best[2]);
    bj_num(rec, "offloaded_over_on_device", "%.3f", best[1] / best[2]);
    bj_num(rec, "delayed_over_offloaded", "%.3f", best[0] / best[1]);
    bj_num(rec, "delayed_up_at_update_step_ms", "%.2f", 1e3 * best[3]);
    bj_num(rec, "up_in_run_over_at_update", "%.3f", best[0] / best[3]);
    bj_int(rec, "host_cores", sn_cores());
    bj_num(rec, "delayed_every_core_step_ms", "%.2f", 1e3 * best[4]);
    bj_num(rec, "leave_a_core_over_every_core", "%.3f", best[0] / best[4]);
    /* where the host's seconds went, a mean per update over the timed rounds (not only the
       best block): the part of the step the host leaves exposed */
    sn_trainer_offload_times(r->t, &after[0]);
    sn_trainer_offload_times(t[0], &after[1]);
    static const char *const who[2] = {"delayed", "offloaded"};
    double per[2]; /* ms an update */
    for (int i = 0; i < 2; i++) {
        int n = after[i].updates - before[i].updates;
        per[i] = n > 0 ? 1e3 / n : 0;
        char key[48];
        snprintf(key, sizeof key, "%s_host_adamw_ms", who[i]);
        bj_num(rec, key, "%.2f", per[i] * (after[i].adamw_s - before[i].adamw_s));
        snprintf(key, sizeof key, "%s_optimizer_ms", who[i]);
        bj_num(rec, key, "%.2f", per[i] * (after[i].optimizer_s - before[i].optimizer_s));
    }
    /* the delayed update's optimizer phase (the blocks' drains included) */
    bj_num(rec, "delayed_join_ms", "%.2f", per[0] * (after[0].join_s - before[0].join_s));
    bj_num(rec, "delayed_up_ms", "%.2f", per[0] * (after[0].up_s - before[0].up_s));
    bj_num(rec, "delayed_copies_wait_ms", "%.2f", per[0] * (after[0].copies_s - before[0].copies_s));
    bj_int(rec, "delayed_ups_in_run", after[0].ups_in_run - before[0].ups_in_run);
    bj_int(rec, "delay_check_steps", CHECK_STEPS);
    bj_bool(rec, "delay_up_in_run_same_losses", same);
    bj_num(rec, "delay_up_in_run_worst_loss_diff", "%.3g", worst);
    bj_print(rec, stdout);
    for (int i = 0; i < 3; i++) {
        sn_trainer_free(t[i]);
        sn_graph_free(g[i]);
    }
}

/* A baseline in the same run: ba's training graph (the caller's graph *g, to free) and its
 * trainer (to free), its best step time over ba->steps in *s. */
static sn_trainer *baseline(const args *ba, const sn_train_opts *o, int32_t *x, int32_t *y,
                            const char *what, sn_graph **g, double *s) {
    sn_err e;
    *g = model_graph(ba, true, NULL);
    sn_trainer *t = sn_trainer_new(*g, o, &e);
    if (!t) die(what, &e);
    run_ctx r = {t, x, y, NULL};
    sn_exec_time_kernels(sn_trainer_exec(t), false);
    *s = time_best(ba->steps, run_step, &r);
    return t;
}

static const char usage_text[] =
    "usage: train_bench [--model NAME] [--batch B] [--seq T] [--steps N] [--threads N]\n"
    "                   [--device auto|cuda|cpu] [--tf32] [--roofline h100 [--model-only]]\n"
    "                   [--checkpoint-policy none|block|sqrt] [--precision fp32|bf16|fp16]\n"
    "                   [--compare-interp] [--arena-budget BYTES] [--offload] [--lora R | --ia3]\n"
    "                   [--qlora R] [--lora-targets all|attn|mlp] [--host-gbs G] [--chunk-logits N]\n"
    "                   [--base-f32] [--startup-only] [--offload-delay] [--loss-only]\n"
    "                   [--device-ms MS] [--fp8 head|linear]\n"
    "  defaults: --model gpt2 --batch 4 --seq 256 --steps 3 --device auto --precision fp32;\n"
    "  --threads 0: all cores; --lora R: the step with LoRA adapters of rank R (all linear\n"
    "  layers, alpha R, the base frozen), and the full fine-tuning step timed in the same run;\n"
    "  --lora-targets: the layers --lora or --qlora adapts (attn: the attention's two\n"
    "  projections; mlp: the MLP's; default all);\n"
    "  --ia3: the same with IA3 vectors (keys, values, the MLP's activation); in bf16 or\n"
    "  fp16 their frozen base is stored in 16 bits (--base-f32: f32 with weight shadows) and\n"
    "  the step with the other base is timed too;\n"
    "  --qlora R: --lora R over a base stored as NF4, and the LoRA step of the same rank\n"
    "  timed in the same run (qlora_over_lora);\n"
    "  --model-only --offload: the offloaded step modeled too, the host AdamW at G GB/s (by\n"
    "  default as measured on this machine, --threads of it), the device's kernels at their\n"
    "  modeled times or scaled to a step a GPU measured (--device-ms);\n"
    "  --offload --offload-delay: the delayed parameter update's step, the offloaded step\n"
    "  without it and the on-device step, each timed in blocks of --steps steps back to back\n"
    "  (a block ends with the drain of its last update), the three in turn, with the delayed\n"
    "  update's weights up in the update and its host AdamW on every core beside them;\n"
    "  --startup-only: the trainer's startup (sn_trainer_new and its parts) alone, no step;\n"
    "  --chunk-logits N: the LM head and its loss in chunks of N rows, and the step with the\n"
    "  head whole timed (or, with --model-only, modeled) in the same run (both --loss-only);\n"
    "  --loss-only: the loss the training program's one output, as sinter train compiles it\n"
    "  (by default the logits are kept too);\n"
    "  --fp8 head|linear: the training step's products on 8-bit operands (docs/fp8.md)\n";

static void usage_fail(const char *fmt, const char *arg) {
    fprintf(stderr, "train_bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_text);
    exit(2);
}

/* A whole decimal integer in [lo, hi] for option k, else usage and exit 2. */
static int int_arg(const char *k, const char *v, long lo, long hi) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) {
        char what[160];
        snprintf(what, sizeof what, "%s wants an integer in %ld..%ld, not '%%s'", k, lo, hi);
        usage_fail(what, v ? v : "(nothing)");
    }
    return (int)x;
}

static void parse(int argc, char **argv, args *a) {
    /* fp32 by default, as sinter train, until bf16 is measured faster on an AVX-512 BF16 CPU */
    *a = (args){.model = "gpt2", .batch = 4, .seq = 256, .steps = 3, .device = "auto",
                .precision = SN_PRECISION_FP32, .lora_targets = SN_GPT2_LORA_ALL};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            fputs(usage_text, stdout);
            exit(0);
        }
        bool *flag = !strcmp(k, "--compare-interp") ? &a->compare_interp
                     : !strcmp(k, "--model-only")   ? &a->model_only
                     : !strcmp(k, "--startup-only") ? &a->startup_only
                     : !strcmp(k, "--tf32")         ? &a->tf32
                     : !strcmp(k, "--offload")      ? &a->offload
                     : !strcmp(k, "--offload-delay") ? &a->offload_delay
                     : !strcmp(k, "--loss-only")    ? &a->loss_only
                     : !strcmp(k, "--ia3")          ? &a->ia3
                     : !strcmp(k, "--base-f32")     ? &a->base_f32 : NULL;
        if (flag) {
            *flag = true;
            continue;
        }
        static const char *const valued[] = {"--model", "--batch", "--seq", "--steps", "--threads",
                                             "--device", "--roofline", "--checkpoint-policy",
                                             "--precision", "--arena-budget", "--lora",
                                             "--qlora", "--host-gbs", "--chunk-logits",
                                             "--lora-targets", "--device-ms", "--fp8"};
        bool known = false;
        for (size_t j = 0; j < sizeof valued / sizeof *valued; j++) known |= !strcmp(k, valued[j]);
        if (!known) usage_fail("unknown option '%s'", k);
        if (!v) usage_fail("%s needs a value", k);
        if (!strcmp(k, "--model")) a->model = v;
        else if (!strcmp(k, "--batch")) a->batch = int_arg(k, v, 1, 1 << 16);
        else if (!strcmp(k, "--seq")) a->seq = int_arg(k, v, 1, 1 << 20);
        else if (!strcmp(k, "--steps")) a->steps = int_arg(k, v, 1, 1000000);
        else if (!strcmp(k, "--threads")) a->threads = int_arg(k, v, 0, 4096);
        else if (!strcmp(k, "--lora")) a->lora = int_arg(k, v, 1, 4096);
        else if (!strcmp(k, "--qlora")) a->lora = int_arg(k, v, 1, 4096), a->nf4 = true;
        else if (!strcmp(k, "--lora-targets")) {
            if (!sn_gpt2_lora_targets_parse(v, &a->lora_targets))
                usage_fail("--lora-targets is all, attn or mlp, not '%s'", v);
        } else if (!strcmp(k, "--chunk-logits")) a->chunk_logits = int_arg(k, v, 1, 1 << 30), a->loss_only = true;
        else if (!strcmp(k, "--fp8")) {
            a->fp8 = sn_fp8_policy_parse(v);
            if (a->fp8 <= 0) usage_fail("--fp8 is head or linear, not '%s'", v);
        } else if (!strcmp(k, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cuda") && strcmp(v, "cpu"))
                usage_fail("--device is auto, cuda or cpu, not '%s'", v);
            a->device = v;
        } else if (!strcmp(k, "--roofline")) {
            if (!sn_roofline_machine_find(v))
                usage_fail("--roofline knows h100, h200, rtx4090 and rtx3090, not '%s'", v);
            a->roofline = v;
        } else if (!strcmp(k, "--checkpoint-policy")) {
            if ((a->checkpoint = sn_recompute_policy_parse(v)) < 0 || a->checkpoint == SN_RECOMPUTE_BUDGET)
                usage_fail("--checkpoint-policy is none, block or sqrt, not '%s'", v);
        } else if (!strcmp(k, "--arena-budget")) {
            char *end;
            double b = strtod(v, &end);
            if (end == v || *end || !(b >= 1) || b > 1e15)
                usage_fail("--arena-budget wants a number of bytes, not '%s'", v);
            a->arena_budget = (int64_t)b;
            a->checkpoint = SN_RECOMPUTE_BUDGET;
        } else if (!strcmp(k, "--host-gbs")) {
            char *end;
            a->host_gbs = strtod(v, &end);
            if (end == v || *end || !(a->host_gbs > 0) || a->host_gbs > 1e6)
                usage_fail("--host-gbs wants GB/s, a positive number, not '%s'", v);
        } else if (!strcmp(k, "--device-ms")) {
            char *end;
            a->device_ms = strtod(v, &end);
            if (end == v || *end || !(a->device_ms > 0) || a->device_ms > 1e7)
                usage_fail("--device-ms wants milliseconds, a positive number, not '%s'", v);
        } else if (!strcmp(k, "--precision")) {
            int p = sn_precision_parse(v);
            if (p < 0 || p == SN_PRECISION_TF32)
                usage_fail("--precision is fp32, bf16 or fp16 (tf32: --tf32), not '%s'", v);
            a->precision = (sn_precision)p;
        }
        i++;
    }
    if (a->model_only && !a->roofline) usage_fail("%s needs --roofline h100", "--model-only");
    if (a->lora_targets != SN_GPT2_LORA_ALL && !a->lora)
        usage_fail("%s shapes LoRA adapters: add --lora R or --qlora R", "--lora-targets");
    if (a->offload_delay && !a->offload)
        usage_fail("%s overlaps the host's AdamW with the next step: add --offload", "--offload-delay");
    if (a->ia3 && a->lora) usage_fail("%s: --ia3 and --lora are two ways to fine-tune: choose one", "--ia3");
    for (int i = 1, lora = 0; i < argc; i++) /* --qlora sets --lora's rank: not both */
        if ((lora += !strcmp(argv[i], "--lora") + !strcmp(argv[i], "--qlora")) > 1)
            usage_fail("%s: --qlora R is --lora R over an NF4 base: give one of them", "--qlora");
}

/* The device --device names; auto: CUDA when the driver reports a GPU, else the CPU. */
static sn_device *open_device(const args *a, bool *cuda) {
    sn_err e;
    sn_device *d = NULL;
    char why[256] = "";
    sn_cuda_opts co = {.tf32 = a->tf32};
    *cuda = !strcmp(a->device, "cuda") ||
            (!strcmp(a->device, "auto") && sn_cuda_device_count(why, sizeof why) > 0);
    if (*cuda) {
        if (sn_cuda_device_new_opts(0, &co, &d, &e)) die("cuda device", &e);
        return d;
    }
    if (!strcmp(a->device, "auto")) fprintf(stderr, "train_bench: no CUDA device (%s): using cpu\n", why);
    if (sn_cpu_device_new(a->threads, &d, &e)) die("cpu device", &e);
    return d;
}

/* The graph's parameters (malloc'd; *n their count: smollm2 with LoRA has 690). */
static sn_node **params_of(const sn_graph *g, int *n) {
    *n = sn_graph_params(g, NULL, 0);
    sn_node **ps = malloc(sizeof *ps * (size_t)(*n ? *n : 1));
    if (!ps) die("out of memory for the parameter list", NULL);
    sn_graph_params(g, ps, *n);
    return ps;
}

static int64_t param_count(const sn_graph *g) {
    int n;
    sn_node **ps = params_of(g, &n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sn_numel(ps[i]);
    free(ps);
    return total;
}

/* The host AdamW's GB/s on this machine (train/offload.c over n elements, the best of 3). */
static double host_adamw_gbs(int64_t n, int threads) {
    float *a = calloc((size_t)n * 4, sizeof(float)), h[SN_OPT_SCALARS] = {0};
    sn_pool *pool = sn_pool_new(threads);
    if (!a || !pool) {
        fprintf(stderr, "train_bench: out of memory measuring the host AdamW: give --host-gbs\n");
        exit(1);
    }
    h[SN_OPT_BETA1] = 0.9f, h[SN_OPT_BETA2] = 0.95f, h[SN_OPT_BC1] = h[SN_OPT_BC2] = 0.5f;
    h[SN_OPT_EPS] = 1e-8f, h[SN_OPT_LR] = 1e-4f, h[SN_OPT_SCALE] = h[SN_OPT_INV_MICRO] = 1;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = sn_clock_s();
        sn_offload_adamw(pool, h, a, a + n, a + 2 * n, a + 3 * n, NULL, SN_F32, n, n);
        double t = sn_clock_s() - t0;
        best = t < best ? t : best;
    }
    sn_pool_free(pool);
    free(a);
    return 28.0 * (double)n / best / 1e9;
}

/* --model-only: the training program's roofline, nothing run. */
static int model_only(const args *a, const sn_roofline_machine *m) {
    sn_program *p;
    sn_graph *g = model_graph(a, true, &p);
    printf("%s, B=%d, T=%d: %d kernels, %lld parameters\n", a->model, a->batch, a->seq, p->n_kernels,
           (long long)param_count(g));
    sn_roofline_opts ro = {.tf32 = a->tf32, .device_step_s = a->device_ms * 1e-3};
    sn_roofline_print(stdout, p, p->layout.flat_n, (double)a->batch * a->seq, m, &ro, NULL, 0);
    if (a->offload) {
        int64_t n = p->layout.flat_n;
        double gbs = a->host_gbs > 0 ? a->host_gbs : host_adamw_gbs(n, a->threads);
        if (a->host_gbs <= 0)
            printf("host AdamW measured on this machine: %.1f GB/s (%d threads)\n", gbs,
                   a->threads ? a->threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
        sn_offload_seg *seg; /* what goes up as 16-bit shadows */
        int n_seg;
        sn_err e;
        if (sn_offload_segments(p, NULL, &seg, &n_seg, &e)) die("offload segments", &e);
        sn_roofline_offload r = sn_roofline_offload_model(p, n, sn_offload_chunk(n), m, &ro, gbs,
                                                          seg, n_seg);
        sn_roofline_offload_print(stdout, &r, (double)a->batch * a->seq, gbs, m);
        if (gbs != 100) { /* a GPU server's host, for comparison */
            sn_roofline_offload r100 = sn_roofline_offload_model(p, n, sn_offload_chunk(n), m, &ro,
                                                                 100, seg, n_seg);
            sn_roofline_offload_delay_print(stdout, &r100, 100);
        }
        free(seg);
    }
    if (a->chunk_logits) { /* against the head whole, modeled the same way */
        args wa = *a;
        wa.chunk_logits = 0;
        sn_program *wp;
        sn_graph *wg = model_graph(&wa, true, &wp);
        sn_roofline_step c = sn_roofline_program(p, p->layout.flat_n, m, &ro);
        sn_roofline_step w = sn_roofline_program(wp, wp->layout.flat_n, m, &ro);
        printf("LM head in chunks of %lld rows: modeled step %.3f ms against %.3f ms whole (%.3fx), "
               "%d kernels against %d, planned arena %lld bytes against %lld (%lld less)\n",
               (long long)a->chunk_logits, 1e3 * c.time_s, 1e3 * w.time_s, c.time_s / w.time_s,
               p->n_kernels, wp->n_kernels, (long long)p->arena_bytes, (long long)wp->arena_bytes,
               (long long)(wp->arena_bytes - p->arena_bytes));
        sn_program_free(wp);
        sn_graph_free(wg);
    }
    sn_program_free(p);
    sn_graph_free(g);
    return 0;
}

int main(int argc, char **argv) {
    args a;
    parse(argc, argv, &a);
    const sn_roofline_machine *machine = sn_roofline_machine_find(a.roofline ? a.roofline : "h100");
    sn_target roofline_target = sn_target_cuda(90); /* the program a GPU of the roofline runs */
    if (a.model_only) a.target = &roofline_target;
    if (a.model_only) return model_only(&a, machine);
    fprintf(stderr, "train_bench: precision %s\n", sn_precision_name(a.precision));
    sn_err e;
    bool cuda;
    sn_device *d = open_device(&a, &cuda);
    a.target = &d->target;
    double peak;
    char isa[96];
    sn_bench_peak pb;
    if (cuda) { /* published, not measured: the GPU check (tools/gpu_check) measures cuBLASLt's */
        peak = machine->bf16_tflops * 1e3;
        snprintf(isa, sizeof isa, "%s bf16 dense (published)", machine->name);
        a.isa = isa;
    } else if (a.startup_only) { /* no MFU to report */
        peak = 1;
        a.isa = "none (--startup-only)";
    } else { /* measured here: the FMA peak, and the bf16 dot products' where there are any */
        a.peak_f32 = sn_bench_fma_peak(a.threads, 3, &a.isa);
        a.peak_bf16 = sn_bench_peak_measure(SN_PEAK_BF16, a.threads, 3, &pb) ? pb.gflops : 0;
        peak = a.precision == SN_PRECISION_BF16 && a.peak_bf16 > 0 ? a.peak_bf16 : a.peak_f32;
        if (a.precision == SN_PRECISION_BF16 && a.peak_bf16 > 0) a.isa = pb.isa;
    }

    /* the training program: compile time is the trainer's setup (fuse, memplan, JIT) */
    sn_graph *g = model_graph(&a, true, NULL);
    sn_train_opts o;
    sn_train_opts_default(&o, 1000);
    o.device = d;
    o.offload = a.offload;
    o.offload_delay = a.offload_delay;
    double t0 = sn_clock_s();
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    if (!t) die("trainer", &e);
    double compile_s = sn_clock_s() - t0;
    sn_trainer_startup su;
    sn_trainer_startup_get(t, &su);
    const sn_program *p = sn_trainer_program(t);
    double train_flops = program_flops(p);
    if (a.startup_only) {
        bj *rec = record(&a, cuda ? "cuda" : "cpu", "startup", 1, 0, peak);
        bj_num(rec, "compile_s", "%.2f", compile_s);
        bj_num(rec, "startup_kernel_passes_s", "%.3f", su.kernels_s);
        bj_num(rec, "startup_exec_new_s", "%.3f", su.exec_s);
        bj_num(rec, "startup_optimizer_s", "%.3f", su.optimizer_s);
        bj_num(rec, "startup_param_init_s", "%.3f", su.init_s);
        bj_int(rec, "persistent_bytes", (long long)p->persistent_bytes);
        bj_print(rec, stdout);
        sn_trainer_free(t);
        sn_graph_free(g);
        sn_device_free(d);
        return 0;
    }

    /* the forward program alone, with the same weights */
    sn_program *fp;
    sn_graph *fg = model_graph(&a, false, &fp);
    sn_exec *fx;
    if (sn_exec_new(d, fp, &fx, &e)) die("forward program", &e);
    int nfp;
    sn_node **fparams = params_of(fg, &nfp);
    for (int i = 0; i < nfp; i++) { /* the trainer's weights, through the host (an NF4
                                        storage's packed bytes, u8 in both programs) */
        int j = sn_trainer_find_param(t, fparams[i]->name);
        bool nf4 = j >= 0 && sn_trainer_param_nf4(t, j);
        float *w = malloc((nf4 ? 1 : sizeof(float)) * (size_t)sn_numel(fparams[i]));
        if (!w || j < 0 || nf4 != (fparams[i]->dtype == SN_U8) ||
            (nf4 ? sn_trainer_get_nf4(t, j, (uint8_t *)w, &e)
                 : sn_trainer_get_param(t, j, SN_PARAM_WEIGHTS, w, &e)) ||
            sn_exec_set(fx, fparams[i], w, &e))
            die("forward weights", &e);
        free(w);
    }
    free(fparams);
    int vocab = model_vocab(&a);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(a.batch * a.seq));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(a.batch * a.seq));
    random_batch(&a, vocab > 50257 ? 50257 : vocab, x, y, 1);
    for (int i = 0; i < fg->n_nodes; i++) {
        sn_node *n = fg->nodes[i];
        if (n->op == SN_OP_INPUT && sn_exec_set(fx, n, !strcmp(n->name, "idx") ? x : y, &e)) die("inputs", &e);
    }
    run_ctx r = {t, x, y, fx};
    const char *dev = cuda ? "cuda" : "cpu";
    double fwd_s = time_best(a.steps, run_forward, &r);
    bj_print(record(&a, dev, "forward", fwd_s, program_flops(fp), peak), stdout);
    double eval_s = time_best(a.steps, run_eval, &r);
    /* timed with events around each run only, then one profiled step for the time by kind (on
     * CUDA its sequence differs, so it runs eagerly and its per-kernel events read true times) */
    sn_exec_time_kernels(sn_trainer_exec(t), false);
    double step_s = time_best(a.steps, run_step, &r);
    sn_exec_stats st;
    profiled_step(&r, "profiled step", &st);
    bj *rec = record(&a, dev, "train_step", step_s, train_flops, peak);
    bj_int(rec, "trained_params", (long long)sn_param_layout_trained(sn_trainer_layout(t)));
    bj_num(rec, "compile_s", "%.2f", compile_s); /* sn_trainer_new, then its parts */
    bj_num(rec, "startup_kernel_passes_s", "%.3f", su.kernels_s);
    bj_num(rec, "startup_exec_new_s", "%.3f", su.exec_s);
    bj_num(rec, "startup_optimizer_s", "%.3f", su.optimizer_s);
    bj_num(rec, "startup_param_init_s", "%.3f", su.init_s);
    bj_int(rec, "kernels_per_step", p->n_kernels);
    bj_int(rec, "optimizer_launches", 3);
    bj_int(rec, "arena_planned_bytes", (long long)p->arena_bytes);
    bj_int(rec, "arena_measured_bytes", (long long)st.arena_peak_bytes);
    bj_int(rec, "arena_no_reuse_bytes", (long long)p->sum_bytes);
    bj_int(rec, "persistent_bytes", (long long)p->persistent_bytes);
    bj_int(rec, "optimizer_state_bytes", (long long)sn_trainer_state_bytes(t));
    kind_fields(rec, st.kind_s);
    bj_print(rec, stdout);
    /* issue 24: a validation batch costs at most 0.4 of a step (the forward is about a third);
     * beside it what validation cost before its own program: the training program's kernels up
     * to the one writing the loss, timed in the profiled step */
    double upto_loss = 0;
    for (int k = 0, end = loss_end(p); k < end; k++) upto_loss += sn_exec_kernel_time(sn_trainer_exec(t), k);
    rec = record(&a, dev, "validation", eval_s, program_flops(fp), peak);
    bj_num(rec, "over_step", "%.3f", eval_s / step_s);
    bj_num(rec, "training_program_to_loss_over_step", "%.3f", upto_loss / step_s);
    bj_print(rec, stdout);
    if (a.roofline) { /* the model beside the last step's measured times by kind */
        sn_roofline_opts ro = {.tf32 = a.tf32};
        sn_roofline_print(stdout, p, p->layout.flat_n, (double)a.batch * a.seq, machine, &ro,
                          st.kind_s, step_s);
        double *ks = malloc(sizeof(double) * (size_t)(p->n_kernels ? p->n_kernels : 1));
        if (!ks) die("the kernels' times: out of memory", NULL);
        for (int k = 0; k < p->n_kernels; k++) ks[k] = sn_exec_kernel_time(sn_trainer_exec(t), k);
        sn_roofline_print_gaps(stdout, p, machine, &ro, ks, 12);
        free(ks);
    }

    if (a.nf4) { /* the baseline: LoRA of the same rank over the full-precision base; on a
                    shared machine the two steps alternate, a QLoRA step then a LoRA one, each
                    the best of its own */
        args la = a;
        la.nf4 = false;
        sn_graph *lg = model_graph(&la, true, NULL);
        sn_trainer *lt = sn_trainer_new(lg, &o, &e);
        if (!lt) die("LoRA trainer", &e);
        run_ctx lr = {lt, x, y, NULL};
        sn_exec_time_kernels(sn_trainer_exec(t), false);
        sn_exec_time_kernels(sn_trainer_exec(lt), false);
        double best[2] = {1e30, 1e30}; /* QLoRA, LoRA */
        run_ctx *rs[2] = {&r, &lr};
        if (run_step(&lr, &e)) die("LoRA warm-up step", &e);
        for (int i = 0; i < a.steps; i++)
            for (int w = 0; w < 2; w++) {
                double t0 = sn_clock_s();
                if (run_step(rs[w], &e)) die("step", &e);
                double dt = sn_clock_s() - t0;
                best[w] = dt < best[w] ? dt : best[w];
            }
        double qlora_s = best[0], lora_s = best[1];
        sn_exec_stats ls;
        const sn_program *lprog = profiled_step(&lr, "profiled LoRA step", &ls);
        bj *l_rec = record(&la, dev, "train_step_lora", lora_s, program_flops(lprog), peak);
        bj_int(l_rec, "kernels_per_step", lprog->n_kernels);
        bj_int(l_rec, "arena_planned_bytes", (long long)lprog->arena_bytes);
        bj_int(l_rec, "persistent_bytes", (long long)lprog->persistent_bytes);
        kind_fields(l_rec, ls.kind_s);
        bj_num(l_rec, "qlora_step_ms", "%.2f", 1e3 * qlora_s);
        bj_num(l_rec, "lora_step_ms", "%.2f", 1e3 * lora_s);
        bj_num(l_rec, "qlora_over_lora", "%.3f", qlora_s / lora_s);
        bj_int(l_rec, "qlora_persistent_bytes", (long long)p->persistent_bytes);
        bj_int(l_rec, "qlora_arena_planned_bytes", (long long)p->arena_bytes);
        bj_print(l_rec, stdout);
        sn_trainer_free(lt);
        sn_graph_free(lg);
    } else if (a.lora || a.ia3) { /* the baseline: full fine-tuning, same model, batch, device */
        args fa = a;
        fa.lora = 0;
        fa.ia3 = false;
        sn_graph *full;
        double full_s;
        sn_trainer *ft = baseline(&fa, &o, x, y, "full fine-tuning trainer", &full, &full_s);
        run_ctx fr = {ft, x, y, NULL};
        sn_exec_stats fs;
        const sn_program *fprog = profiled_step(&fr, "profiled full step", &fs);
        bj *fr_rec = record(&fa, dev, "train_step_full", full_s, program_flops(fprog), peak);
        bj_int(fr_rec, "trained_params", (long long)sn_param_layout_trained(sn_trainer_layout(ft)));
        bj_int(fr_rec, "kernels_per_step", fprog->n_kernels);
        bj_int(fr_rec, "arena_planned_bytes", (long long)fprog->arena_bytes);
        bj_int(fr_rec, "persistent_bytes", (long long)fprog->persistent_bytes);
        bj_int(fr_rec, "optimizer_state_bytes", (long long)sn_trainer_state_bytes(ft));
        kind_fields(fr_rec, fs.kind_s);
        bj_num(fr_rec, a.ia3 ? "ia3_step_ms" : "lora_step_ms", "%.2f", 1e3 * step_s);
        bj_num(fr_rec, a.ia3 ? "ia3_speedup" : "lora_speedup", "%.3f", full_s / step_s);
        bj_print(fr_rec, stdout);
        sn_trainer_free(ft);
        sn_graph_free(full);
    }

    bool low = a.precision == SN_PRECISION_BF16 || a.precision == SN_PRECISION_FP16;
    if ((a.lora || a.ia3) && low) { /* the other base: f32 with shadows, or 16-bit */
        args ba = a;
        ba.base_f32 = !a.base_f32;
        sn_graph *bg = model_graph(&ba, true, NULL);
        sn_trainer *bt = sn_trainer_new(bg, &o, &e);
        if (!bt) die("trainer with the other base", &e);
        run_ctx br = {bt, x, y, NULL};
        void *const pair[2] = {&r, &br};
        double best[2]; /* this run's step and the other base's, timed in turn */
        time_pair(a.steps, run_step, pair, best);
        const sn_program *bprog = sn_trainer_program(bt);
        bj *b_rec = record(&ba, dev, ba.base_f32 ? "train_step_base_f32" : "train_step_base16",
                           best[1], program_flops(bprog), peak);
        bj_int(b_rec, "kernels_per_step", bprog->n_kernels);
        bj_int(b_rec, "persistent_bytes", (long long)bprog->persistent_bytes);
        bj_int(b_rec, "shadows", bprog->n_shadows);
        bj_int(b_rec, "timed_persistent_bytes", (long long)p->persistent_bytes);
        bj_int(b_rec, "timed_shadows", p->n_shadows);
        bj_num(b_rec, "timed_step_ms", "%.2f", 1e3 * best[0]);
        /* the 16-bit base's speed-up over the f32 base's step (above 1: faster) */
        bj_num(b_rec, "base16_speedup", "%.3f", a.base_f32 ? best[0] / best[1] : best[1] / best[0]);
        bj_print(b_rec, stdout);
        sn_trainer_free(bt);
        sn_graph_free(bg);
    }

    if (a.chunk_logits) { /* the baseline: the LM head whole, same batch, same device */
        args wa = a;
        wa.chunk_logits = 0;
        sn_graph *whole;
        double whole_s;
        sn_trainer *wt = baseline(&wa, &o, x, y, "trainer with the head whole", &whole, &whole_s);
        const sn_program *wprog = sn_trainer_program(wt);
        bj *w_rec = record(&wa, dev, "train_step_head_whole", whole_s, program_flops(wprog), peak);
        bj_int(w_rec, "kernels_per_step", wprog->n_kernels);
        bj_int(w_rec, "arena_planned_bytes", (long long)wprog->arena_bytes);
        bj_int(w_rec, "chunk_logits", (long long)a.chunk_logits);
        bj_int(w_rec, "chunked_arena_planned_bytes", (long long)p->arena_bytes);
        bj_num(w_rec, "chunked_step_ms", "%.2f", 1e3 * step_s);
        bj_num(w_rec, "chunked_over_whole", "%.3f", step_s / whole_s);
        bj_print(w_rec, stdout);
        sn_trainer_free(wt);
        sn_graph_free(whole);
    }

    if (a.offload_delay) offload_delay_blocks(&a, &o, &r, dev, train_flops, peak);

    if (a.compare_interp) { /* the reference interpreter on the same step, once */
        sn_graph *ig = model_graph(&a, true, NULL);
        sn_train_opts io = o;
        io.device = NULL;
        sn_trainer *it = sn_trainer_new(ig, &io, &e);
        if (!it) die("interpreter trainer", &e);
        run_ctx ir = {it, x, y, NULL};
        double is = time_best(1, run_step, &ir);
        bj *ir_rec = record(&a, "interp", "train_step", is, train_flops, peak);
        bj_num(ir_rec, "compiled_speedup", "%.1f", is / step_s);
        bj_print(ir_rec, stdout);
        sn_trainer_free(it);
        sn_graph_free(ig);
    }
    sn_exec_free(fx);
    sn_program_free(fp);
    sn_graph_free(fg);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
    free(x);
    free(y);
    return 0;
}
