/* gpu_check_train.c: training on the device under check: a tiny GPT-2 against the reference
 * interpreter (every step with two micro-batches, so the optimizer's four kernels all run), and a
 * model's first steps against the CPU device's losses, from the golden files when they hold this
 * configuration, else computed live on the CPU device (when this build has one): fp32 against
 * fp32's; bf16 (the autocast pass) within 0.3% of the CPU device's bf16 at every step and, on
 * the mean over the steps, within 0.5% of fp32 (issue 21). Convention: the data is gc_batch's
 * periodic token stream (the loss falls), the same on every device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "support/rng.h"
#include "train/train.h"
#include "gpu_check.h"

enum { PERIOD = 257, MAX_STEPS = 200, TRAIN_SEED = 1337 };
#define TRAIN_LR 3e-4f /* the losses check: low enough that 20 steps fall smoothly (1e-3 spikes) */
#define GOLDEN_MAGIC "sinter-golden 1"

void gc_batch(int vocab, int B, int T, int step, int32_t *x, int32_t *y) {
    int32_t motif[PERIOD];
    sn_rng r = sn_rng_seed(42);
    for (int j = 0; j < PERIOD; j++) motif[j] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
    for (int b = 0; b < B; b++) {
        int64_t start = ((int64_t)step * B + b) * 61;
        for (int t = 0; t < T; t++) {
            x[b * T + t] = motif[(start + t) % PERIOD];
            y[b * T + t] = motif[(start + t + 1) % PERIOD];
        }
    }
}

sn_graph *gc_train_graph(const char *model, int B, int T, sn_precision prec, int *vocab,
                         sn_err *e) {
    sn_gpt2_config c;
    if (!sn_gpt2_config_find(model, &c)) {
        sn_fail(e, SN_ERR_INVALID, "unknown model '%s'", model);
        return NULL;
    }
    *vocab = c.vocab;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = prec;
    if (!g) {
        sn_fail(e, SN_ERR_OOM, "out of memory for a graph");
        return NULL;
    }
    sn_status st = sn_gpt2_build(g, &c, B, T, &m, e);
    if (!st) { /* the loss alone, as sinter train's session keeps it: no logits to store */
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, g->loss);
    }
    if (st || sn_compile(g, &o, NULL, NULL, e)) {
        sn_graph_free(g);
        return NULL;
    }
    return g;
}

/* steps optimizer steps of `micro` micro-batches each on device (NULL: the interpreter) at
 * precision prec; losses[s] and norms[s] per step. */
static sn_status train_run(const char *model, int B, int T, sn_precision prec, int steps, int micro,
                           float lr, sn_device *device, double *losses, double *norms, sn_err *e) {
    int vocab = 0;
    sn_graph *g = gc_train_graph(model, B, T, prec, &vocab, e);
    if (!g) return e->code ? e->code : SN_ERR_INVALID;
    sn_train_opts o;
    sn_train_opts_default(&o, steps);
    o.seed = TRAIN_SEED;
    if (lr > 0) o.lr = lr;
    o.device = device;
    sn_trainer *t = sn_trainer_new(g, &o, e);
    int32_t *x = sn_malloc(sizeof(int32_t) * (size_t)(B * T), "a batch", e);
    int32_t *y = sn_malloc(sizeof(int32_t) * (size_t)(B * T), "a batch", e);
    sn_status st = t && x && y ? SN_OK : e->code ? e->code : SN_ERR_OOM;
    for (int s = 0; s < steps && !st; s++) {
        for (int m = 0; m < micro && !st; m++) {
            gc_batch(vocab, B, T, s * micro + m, x, y);
            st = sn_trainer_accumulate(t, x, y, NULL, e);
        }
        sn_step_stats ss;
        if (!st) st = sn_trainer_update(t, &ss, e);
        losses[s] = st ? NAN : ss.loss;
        if (norms) norms[s] = st ? NAN : ss.grad_norm;
    }
    free(x);
    free(y);
    sn_trainer_free(t);
    sn_graph_free(g);
    return st;
}

static double worst_rel(const double *got, const double *want, int n, int *at) {
    double w = 0;
    *at = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]) / fmax(fabs(want[i]), 1e-12);
        if (!(d <= w)) {
            w = d;
            *at = i;
        }
    }
    return w;
}

void gc_check_tiny(gc_run *r) {
    const gc_opts *o = &r->o;
    int steps = o->tiny_steps < MAX_STEPS ? o->tiny_steps : MAX_STEPS;
    double dl[MAX_STEPS], dn[MAX_STEPS], il[MAX_STEPS], in[MAX_STEPS];
    char name[96];
    snprintf(name, sizeof name, "train: %s GPT-2 vs the interpreter (optimizer kernels)", o->tiny_model);
    gc_step *s = gc_begin(r, name);
    sn_err e = {0};
    sn_device *pd = gc_poison_device_new(r->dev, &e); /* the arena starts as NaN */
    sn_status st = pd ? train_run(o->tiny_model, 2, 32, SN_PRECISION_FP32, steps, 2, 0, pd, dl, dn, &e) : SN_ERR_OOM;
    gc_poison_device_free(pd);
    if (!st) st = train_run(o->tiny_model, 2, 32, SN_PRECISION_FP32, steps, 2, 0, NULL, il, in, &e);
    if (st) {
        gc_end(r, s, GC_FAIL, "%s", e.msg);
        return;
    }
    int at_l, at_n;
    double el = worst_rel(dl, il, steps, &at_l), en = worst_rel(dn, in, steps, &at_n);
    gc_num(s, "steps", steps);
    gc_num(s, "loss_first", dl[0]);
    gc_num(s, "loss_last", dl[steps - 1]);
    gc_num(s, "loss_max_rel_err", el);
    gc_num(s, "norm_max_rel_err", en);
    bool ok = el <= 1e-4 && en <= 1e-3 && dl[steps - 1] < dl[0];
    gc_end(r, s, ok ? GC_PASS : GC_FAIL, "%d steps of 2 micro-batches (B=2, T=32): loss %.4f -> "
           "%.4f; losses within %.1e of the interpreter's (step %d; tolerance 1e-4), gradient "
           "norms within %.1e (step %d; 1e-3)%s", steps, dl[0], dl[steps - 1], el, at_l, en, at_n,
           dl[steps - 1] < dl[0] ? "" : "; the loss did not fall");
}

/* ---- the golden file ---- */

typedef struct {
    char model[32];
    int batch, seq, steps;
    double lr;
    sn_precision prec; /* the line "precision bf16" (none: fp32) */
    double losses[MAX_STEPS];
} golden;

static bool golden_read(const char *path, golden *gd, char *why, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, len, "cannot open %s", path);
        return false;
    }
    char line[256];
    bool ok = fgets(line, sizeof line, f) && !strncmp(line, GOLDEN_MAGIC, strlen(GOLDEN_MAGIC));
    int n = 0;
    while (ok && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        int step;
        double v;
        char prec[16];
        if (sscanf(line, "model %31s batch %d seq %d steps %d lr %lf", gd->model, &gd->batch,
                   &gd->seq, &gd->steps, &gd->lr) == 5)
            continue;
        if (sscanf(line, "precision %15s", prec) == 1) {
            gd->prec = !strcmp(prec, "bf16") ? SN_PRECISION_BF16 : !strcmp(prec, "fp16") ? SN_PRECISION_FP16
                     : !strcmp(prec, "fp32") ? SN_PRECISION_FP32 : SN_PRECISION_COUNT;
            ok = gd->prec != SN_PRECISION_COUNT;
            continue;
        }
        if (sscanf(line, "loss %d %lf", &step, &v) == 2 && step == n && n < MAX_STEPS) gd->losses[n++] = v;
        else ok = false;
    }
    fclose(f);
    if (!ok || n != gd->steps || n == 0) {
        snprintf(why, len, "%s is not a golden file of version 1 (magic, header, one loss a step)", path);
        return false;
    }
    return true;
}

int gc_write_golden(const gc_opts *o) {
    sn_err e = {0};
    sn_device *d = NULL;
    if (sn_cpu_device_new(0, &d, &e)) {
        fprintf(stderr, "gpu_check: the golden losses come from the CPU device: %s\n", e.msg);
        return 1;
    }
    int steps = o->train_steps < MAX_STEPS ? o->train_steps : MAX_STEPS;
    double losses[MAX_STEPS];
    bool f32 = o->train_precision == SN_PRECISION_FP32;
    const char *pn = sn_precision_name(o->train_precision);
    sn_status st = train_run(o->train_model, o->train_batch, o->train_seq, o->train_precision, steps,
                             1, TRAIN_LR, d, losses, NULL, &e);
    sn_device_free(d);
    FILE *f = st ? NULL : fopen(o->write_golden, "w");
    if (!f) {
        fprintf(stderr, "gpu_check: %s\n", st ? e.msg : "cannot write the golden file");
        return 1;
    }
    char opt[40] = "";
    if (!f32) snprintf(opt, sizeof opt, " --train-precision %s", pn);
    fprintf(f, "%s\n# The CPU device's first losses training %s on gpu_check's periodic tokens (bench/\n"
            "# gpu_check_train.c: gc_batch, seed 42, period %d), parameters from seed %d, AdamW with\n"
            "# sn_train_opts_default but lr %g (warm-up 10%% of the steps), %s%s. Made by:\n"
            "#   build/bench/gpu_check --device cpu --write-golden %s --train-model %s "
            "--train-batch %d --train-seq %d --train-steps %d%s\n",
            GOLDEN_MAGIC, o->train_model, PERIOD, TRAIN_SEED, (double)TRAIN_LR, pn,
            f32 ? "" : " (the autocast pass)", o->write_golden, o->train_model, o->train_batch,
            o->train_seq, steps, opt);
    fprintf(f, "model %s batch %d seq %d steps %d lr %g\n", o->train_model, o->train_batch,
            o->train_seq, steps, (double)TRAIN_LR);
    if (!f32) fprintf(f, "precision %s\n", pn);
    for (int s = 0; s < steps; s++) fprintf(f, "loss %d %.9g\n", s, losses[s]);
    if (fclose(f)) return 1;
    printf("gpu_check: wrote %s: %s %s losses %.4f -> %.4f over %d steps\n", o->write_golden,
           o->train_model, pn, losses[0], losses[steps - 1], steps);
    return 0;
}

/* The CPU device's losses of the train model at precision prec: from the golden file when it
 * holds this configuration, else computed now on this build's CPU device; *source says which.
 * false (why in e) when there is neither. */
static bool reference(const gc_opts *o, sn_precision prec, const char *file, int steps, double *ref,
                      char *source, size_t len, sn_err *e) {
    golden gd = {0};
    char why[256] = "";
    bool have = golden_read(file, &gd, why, sizeof why) && !strcmp(gd.model, o->train_model) &&
                gd.batch == o->train_batch && gd.seq == o->train_seq && gd.steps >= steps &&
                fabs(gd.lr - (double)TRAIN_LR) <= 1e-9 && gd.prec == prec;
    if (have) {
        memcpy(ref, gd.losses, sizeof(double) * (size_t)steps);
        snprintf(source, len, "%s", file);
        return true;
    }
    sn_device *cpu = NULL;
    if (!why[0]) snprintf(why, sizeof why, "%s holds %s B=%d T=%d %d steps lr %g %s", file, gd.model,
                          gd.batch, gd.seq, gd.steps, gd.lr, sn_precision_name(gd.prec));
    sn_err ce = {0};
    if (sn_cpu_device_new(0, &cpu, &ce) ||
        train_run(o->train_model, o->train_batch, o->train_seq, prec, steps, 1, TRAIN_LR, cpu, ref,
                  NULL, &ce)) {
        sn_fail(e, ce.code ? ce.code : SN_ERR_INVALID, "no %s reference: %s, and the CPU device cannot "
                "make one: %s", sn_precision_name(prec), why, ce.msg);
        sn_device_free(cpu);
        return false;
    }
    sn_device_free(cpu);
    snprintf(source, len, "the CPU device's, computed now (%s)", why);
    return true;
}

static double mean_rel(const double *got, const double *want, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += fabs(got[i] - want[i]) / fmax(fabs(want[i]), 1e-12);
    return sum / n;
}

/* The train model at precision prec on the device against the CPU device's losses. fp32: the
 * first loss within 1e-4 and every loss within 5e-3 of fp32's (summation orders). bf16 (issue
 * 21): the first four losses within 0.1% of the CPU device's bf16 losses (the same program, its
 * roundings not yet compounded: 2.8e-4 at most on an H100), every loss within 1% of them (two
 * bf16 runs drift apart like bf16 and fp32 do: 3.8e-3 at step 17 on an H100, whose cuBLASLt
 * picks other GEMM algorithms than the CPU's, while bf16 and fp32 differ by 1.2% at step 7),
 * and the mean over the steps of the relative difference to fp32's at most 0.5%. */
static void check_losses(gc_run *r, sn_precision prec) {
    const gc_opts *o = &r->o;
    int steps = o->train_steps < MAX_STEPS ? o->train_steps : MAX_STEPS;
    bool f32 = prec == SN_PRECISION_FP32;
    const char *pn = sn_precision_name(prec);
    char name[128], src32[400], src16[400];
    snprintf(name, sizeof name, "train: %s B=%d T=%d, %d steps %s vs the CPU device", o->train_model,
             o->train_batch, o->train_seq, steps, pn);
    gc_step *s = gc_begin(r, name);
    double ref[MAX_STEPS], ref16[MAX_STEPS], got[MAX_STEPS];
    sn_err e = {0};
    if (!reference(o, SN_PRECISION_FP32, o->golden, steps, ref, src32, sizeof src32, &e) ||
        (!f32 && !reference(o, prec, o->golden_bf16, steps, ref16, src16, sizeof src16, &e))) {
        gc_end(r, s, GC_FAIL, "%s", e.msg);
        return;
    }
    sn_status st = train_run(o->train_model, o->train_batch, o->train_seq, prec, steps, 1, TRAIN_LR,
                             r->dev, got, NULL, &e);
    if (st) { /* bf16 on an sm_75 GPU: a SKIP that names fp16 */
        gc_end(r, s, st == SN_ERR_UNSUPPORTED ? GC_SKIP : GC_FAIL, "%s", e.msg);
        return;
    }
    int at, at16 = 0;
    double first = fabs(got[0] - ref[0]) / fabs(ref[0]), worst = worst_rel(got, ref, steps, &at);
    gc_num(s, "loss_first", got[0]);
    gc_num(s, "loss_last", got[steps - 1]);
    gc_num(s, "ref_loss_last", ref[steps - 1]);
    gc_num(s, "first_rel_err", first);
    gc_num(s, "max_rel_err", worst);
    if (f32) {
        bool ok = first <= 1e-4 && worst <= 5e-3;
        gc_end(r, s, ok ? GC_PASS : GC_FAIL, "loss %.4f -> %.4f (reference %.4f -> %.4f, %s): first "
               "step within %.1e (tolerance 1e-04), every step within %.1e (step %d; 5e-03)", got[0],
               got[steps - 1], ref[0], ref[steps - 1], src32, first, worst, at);
    } else {
        int early_at, early_n = steps < 4 ? steps : 4;
        double worst16 = worst_rel(got, ref16, steps, &at16), mean32 = mean_rel(got, ref, steps);
        double early16 = worst_rel(got, ref16, early_n, &early_at);
        gc_num(s, "ref_bf16_loss_last", ref16[steps - 1]);
        gc_num(s, "max_rel_err_vs_bf16", worst16);
        gc_num(s, "mean_rel_err_vs_fp32", mean32);
        gc_num(s, "max_rel_err_vs_bf16_first4", early16);
        bool ok = early16 <= 1e-3 && worst16 <= 1e-2 && mean32 <= 5e-3;
        gc_end(r, s, ok ? GC_PASS : GC_FAIL, "loss %.4f -> %.4f; the CPU device's %s %.4f -> %.4f "
               "(%.120s): the first %d steps within %.1e (step %d; tolerance 1e-03), every step "
               "within %.1e (step %d; 1e-02); fp32's %.4f -> %.4f (%.120s): mean over the steps "
               "%.1e (tolerance 5e-03), the largest %.1e at step %d",
               got[0], got[steps - 1], pn, ref16[0], ref16[steps - 1], src16, early_n, early16,
               early_at, worst16, at16, ref[0], ref[steps - 1], src32, mean32, worst, at);
    }
    fprintf(r->details, "%s: step, loss on the device, the CPU device's fp32 loss%s\n", name,
            f32 ? "" : ", its bf16 loss");
    for (int i = 0; i < steps; i++) {
        fprintf(r->details, "  %3d %.6f %.6f", i, got[i], ref[i]);
        if (!f32) fprintf(r->details, " %.6f", ref16[i]);
        fprintf(r->details, "\n");
    }
}

void gc_check_losses(gc_run *r) {
    check_losses(r, SN_PRECISION_FP32);
    check_losses(r, SN_PRECISION_BF16);
}
