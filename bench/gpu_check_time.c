/* gpu_check_time.c: what the GPU check measures: the device's ceilings (cuBLASLt's bf16 GEMM,
 * a device-to-device copy), the compile time of the timed model's program cold (an empty kernel
 * cache) and warm, and its training step at each size, fp32, TF32, bf16 and fp16 (the autocast
 * pass; fp16 with its loss scaler), timed with the device's events (warm-up steps, the median of the rest), with
 * kernels per step, time per kernel kind beside the roofline model, peak device memory, MFU and
 * bandwidth against the measured ceilings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "codegen/cuda/cuda_wgmma.h"
#include "runtime/cuda/cuda_device.h"
#include "support/clock.h"
#include "train/train.h"
#include "gpu_check.h"
#include "roofline.h"

enum { MAX_TIMED = 64, OPTIMIZER_LAUNCHES = 3 /* SQNORM, CLIP, ADAMW */ };

void gc_measure_ceilings(gc_run *r) {
    const char *dt = r->o.gemm_f32 ? "f32" : "bf16";
    gc_step *s = gc_begin(r, r->o.gemm_f32 ? "ceilings: cuBLASLt f32 GEMM and device copy"
                                          : "ceilings: cuBLASLt bf16 GEMM and device copy");
    if (!r->cuda) {
        gc_end(r, s, GC_SKIP, "the CPU device has no cuBLASLt (bench/train_bench measures the CPU's FMA peak)");
        return;
    }
    sn_cuda_ceiling_opts co = {.gemm_n = r->o.gemm_n, .copy_bytes = (int64_t)r->o.copy_mib << 20,
                               .reps = 10, .f32 = r->o.gemm_f32};
    sn_cuda_ceilings c;
    sn_err e = {0};
    if (sn_cuda_measure_ceilings(0, &co, &c, &e)) {
        gc_end(r, s, GC_FAIL, "%s", e.msg);
        return;
    }
    r->bf16_tflops = c.bf16_tflops;
    r->copy_tb_per_s = c.copy_tb_per_s;
    gc_num(s, "gemm_n", co.gemm_n);
    gc_num(s, r->o.gemm_f32 ? "f32_tflops" : "bf16_tflops", c.bf16_tflops);
    gc_num(s, "gemm_ms", c.gemm_s * 1e3);
    gc_num(s, "gemm_check_rel_err", c.gemm_check_err);
    gc_num(s, "copy_mib", r->o.copy_mib);
    gc_num(s, "copy_tb_per_s", c.copy_tb_per_s);
    bool ok = c.gemm_check_err <= 1e-2;
    gc_end(r, s, ok ? GC_PASS : GC_FAIL, "%s GEMM %d^3: %.3g TFLOP/s (%.3f ms, median of 10; 16 "
           "entries within %.1e of the host, tolerance 1e-2); copy of %d MiB: %.3g TB/s read + "
           "written (%.3f ms)", dt, co.gemm_n, c.bf16_tflops, c.gemm_s * 1e3, c.gemm_check_err,
           r->o.copy_mib, c.copy_tb_per_s, c.copy_s * 1e3);
}

void gc_check_wgmma(gc_run *r) {
    const char *name = "wgmma: the simulator's warpgroup-MMA layouts on the device";
    if (!r->cuda) {
        gc_end(r, gc_begin(r, name), GC_SKIP, "the CPU device has no wgmma");
        return;
    }
    sn_cuda_wgmma_result w;
    sn_err e = {0};
    sn_status st = sn_cuda_wgmma_check(0, &w, &e);
    if (!st && w.skipped) { /* not a step on other architectures: nothing there to confirm */
        printf("note: wgmma: sm_%d has no warpgroup MMA (sm_90 only): nothing to check\n", w.sm);
        return;
    }
    gc_step *s = gc_begin(r, name);
    if (st) {
        gc_end(r, s, GC_FAIL, "%s", e.msg);
        return;
    }
    char msg[400] = "";
    for (int i = 0; i < w.forms; i++) {
        char key[40];
        snprintf(key, sizeof key, "form%d_largest_error", i);
        gc_num(s, key, w.worst[i]);
        if (!(w.worst[i] == 0))
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "; %s: %g off",
                     sn_wgmma_gemm_forms[i].name, w.worst[i]);
    }
    gc_end(r, s, w.failed ? GC_FAIL : GC_PASS, "the wgmma GEMM (256^3) equals the exact product "
           "in %d of %d layouts%s%s", w.forms - w.failed, w.forms, w.failed ? " (the simulator's "
           "layout model is wrong there: docs/attention.md)" : "", msg);
}

static int64_t param_count(const sn_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM) n += sn_numel(g->nodes[i]);
    return n;
}

/* A trainer of the timed model at precision prec on d; *wall the seconds sn_trainer_new took. */
static sn_trainer *make_trainer(const gc_opts *o, sn_device *d, int B, int T, sn_precision prec,
                                sn_graph **g, int *vocab, double *wall, sn_err *e) {
    if (!(*g = gc_train_graph(o->time_model, B, T, prec, vocab, e))) return NULL;
    sn_train_opts to;
    sn_train_opts_default(&to, 1000);
    to.device = d;
    double t0 = sn_clock_s();
    sn_trainer *t = sn_trainer_new(*g, &to, e);
    *wall = sn_clock_s() - t0;
    if (!t) {
        sn_graph_free(*g);
        *g = NULL;
    }
    return t;
}

/* Cold (an empty cache directory) and warm (the same again) compiles of the first timed size. */
static void compile_times(gc_run *r) {
    const gc_opts *o = &r->o;
    int B = o->time_sizes[0][0], T = o->time_sizes[0][1], vocab;
    char name[128], dir[600];
    snprintf(name, sizeof name, "compile: %s B=%d T=%d cold and warm", o->time_model, B, T);
    gc_step *s = gc_begin(r, name);
    sn_err e = {0};
    sn_device *d = NULL;
    if (o->cache_dir) snprintf(dir, sizeof dir, "%s-cold", o->cache_dir);
    else snprintf(dir, sizeof dir, "%s/kernel-cache-cold", o->out_dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "gpu_check: could not empty %s\n", dir);
    if (r->cuda) {
        sn_cuda_opts co = {.cache_dir = dir};
        if (sn_cuda_device_new_opts(0, &co, &d, &e)) {
            gc_end(r, s, GC_FAIL, "%s", e.msg);
            return;
        }
    } else if (sn_cpu_device_new_opts(0, &(sn_cpu_opts){.cache_dir = dir}, &d, &e)) { /* its cpu/ */
        gc_end(r, s, GC_FAIL, "%s", e.msg);
        return;
    }
    double wall[2] = {0}, dev_s[2] = {0};
    sn_trainer_startup su = {0}; /* the warm pass's */
    int nvrtc[2] = {0}, hits[2] = {0}, kernels = 0;
    sn_status st = SN_OK;
    for (int pass = 0; pass < 2 && !st; pass++) {
        sn_cuda_stats before, after;
        sn_cuda_stats_get(d, &before);
        sn_graph *g = NULL;
        sn_trainer *t = make_trainer(o, d, B, T, SN_PRECISION_FP32, &g, &vocab, &wall[pass], &e);
        if (!t) {
            st = e.code ? e.code : SN_ERR_DEVICE;
            break;
        }
        sn_exec_stats xs;
        sn_exec_stats_get(sn_trainer_exec(t), &xs);
        sn_cuda_stats_get(d, &after);
        dev_s[pass] = r->cuda ? after.compile_s - before.compile_s : xs.compile_s;
        nvrtc[pass] = after.nvrtc_runs - before.nvrtc_runs;
        hits[pass] = after.cache_hits - before.cache_hits;
        kernels = sn_trainer_program(t)->n_kernels;
        sn_trainer_startup_get(t, &su);
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    sn_device_free(d);
    if (st) {
        gc_end(r, s, GC_FAIL, "%s", e.msg);
        return;
    }
    gc_num(s, "kernels", kernels);
    gc_num(s, "cold_compile_s", dev_s[0]);
    gc_num(s, "warm_compile_s", dev_s[1]);
    gc_num(s, "cold_trainer_new_s", wall[0]);
    gc_num(s, "warm_trainer_new_s", wall[1]);
    gc_num(s, "warm_kernel_passes_s", su.kernels_s);
    gc_num(s, "warm_exec_new_s", su.exec_s);
    gc_num(s, "warm_optimizer_s", su.optimizer_s);
    gc_num(s, "warm_param_init_s", su.init_s);
    gc_num(s, "cold_nvrtc_runs", nvrtc[0]);
    gc_num(s, "warm_cache_hits", hits[1]);
    bool ok = !r->cuda || (nvrtc[1] == 0 && hits[1] > 0);
    gc_end(r, s, ok ? GC_PASS : GC_FAIL, "%d kernels: %s %.2f s cold (%d NVRTC runs), %.3f s warm "
           "(%d cache hits, %d NVRTC runs); sn_trainer_new %.2f s cold, %.2f s warm (warm: kernel "
           "passes %.2f s, executor %.2f s, optimizer %.2f s, parameters drawn and set %.2f s)",
           kernels, r->cuda ? "NVRTC or cache" : "LLVM JIT", dev_s[0], nvrtc[0], dev_s[1], hits[1],
           nvrtc[1], wall[0], wall[1], su.kernels_s, su.exec_s, su.optimizer_s, su.init_s);
}

/* Appends every kernel of the profiled step to gpu_check_kernels.tsv in the output folder: its
 * measured time (device events) beside the roofline's bytes and modeled time, and the bandwidth
 * it reached; the table that says which kernels of a kind hold its time. */
static void write_kernel_table(gc_run *r, const char *run, const sn_program *p, const sn_exec *x,
                               const sn_roofline_machine *m, const sn_roofline_opts *ro) {
    char path[1100];
    snprintf(path, sizeof path, "%s/gpu_check_kernels.tsv", r->o.out_dir);
    FILE *f = fopen(path, "a");
    if (!f) return; /* the report still holds the kinds; nothing to fail */
    fseek(f, 0, SEEK_END);
    if (ftell(f) == 0)
        fprintf(f, "run\tindex\tkernel\tkind\tmeasured_us\tmodeled_us\tMB\tGB_per_s\tGFLOP\n");
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        sn_roofline_kernel mk = sn_roofline_kernel_model(ker, m, ro);
        double t = sn_exec_kernel_time(x, k);
        fprintf(f, "%s\t%d\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t%.3f\n", run, k, ker->name,
                sn_kernel_kind_name(ker->kind), t * 1e6, mk.time_s * 1e6, mk.bytes / 1e6,
                t > 0 ? mk.bytes / t / 1e9 : 0, mk.flops / 1e9);
    }
    fclose(f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times steps of the timed model at (B, T) and precision prec on d; mode names it in the
 * report ("TF32": prec fp32 on a device whose f32 GEMMs run as TF32). */
static void time_size(gc_run *r, sn_device *d, const char *mode, bool tf32, sn_precision prec,
                      int B, int T) {
    const gc_opts *o = &r->o;
    char name[128];
    snprintf(name, sizeof name, "time: %s B=%d T=%d %s", o->time_model, B, T, mode);
    gc_step *s = gc_begin(r, name);
    sn_err e = {0};
    sn_graph *g = NULL;
    int vocab = 0, n = o->time_steps < MAX_TIMED ? o->time_steps : MAX_TIMED, WARMUP = o->warmup;
    double wall, t[MAX_TIMED];
    sn_trainer *tr = make_trainer(o, d, B, T, prec, &g, &vocab, &wall, &e);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(B * T)), *y = malloc(sizeof(int32_t) * (size_t)(B * T));
    void *ev[2] = {NULL, NULL};
    sn_status st = !tr ? (e.code ? e.code : SN_ERR_DEVICE) : !x || !y ? sn_fail_oom(&e, 0, "a batch") : SN_OK;
    for (int i = 0; i < 2 && !st; i++)
        if (!(ev[i] = d->event_new(d, &e))) st = e.code ? e.code : SN_ERR_DEVICE;
    /* timed steps with events around the step only (a replayed CUDA Graph's inner events read
     * 0), then one more step with per-kernel events for the time by kind: a new sequence of
     * operations, so it runs eagerly (runtime/cuda/graph.c) */
    if (tr) sn_exec_time_kernels(sn_trainer_exec(tr), false);
    for (int i = 0; i < WARMUP + n + 1 && !st; i++) {
        gc_batch(vocab, B, T, i, x, y);
        if (i == WARMUP + n) sn_exec_time_kernels(sn_trainer_exec(tr), true);
        st = d->event_record(d, ev[0], &e);
        if (!st) st = sn_trainer_step(tr, x, y, NULL, &e);
        if (!st) st = d->event_record(d, ev[1], &e);
        if (!st) st = d->sync(d, &e);
        if (!st && i >= WARMUP && i < WARMUP + n) st = d->event_elapsed(d, ev[0], ev[1], &t[i - WARMUP], &e);
    }
    int64_t used = 0, total = 0;
    if (!st && r->cuda) st = sn_cuda_memory_used(0, &used, &total, &e);
    if (st) {
        gc_end(r, s, st == SN_ERR_UNSUPPORTED ? GC_SKIP : GC_FAIL, "%s%s",
               st == SN_ERR_UNSUPPORTED ? "not supported yet: " : "", e.msg);
    } else {
        qsort(t, (size_t)n, sizeof t[0], cmp_double);
        double med = t[n / 2], tokens = (double)B * T;
        const sn_program *p = sn_trainer_program(tr);
        const sn_roofline_machine *m = sn_roofline_machine_find("h100");
        sn_roofline_opts ro = {.tf32 = tf32};
        sn_roofline_step model = sn_roofline_program(p, param_count(g), m, &ro);
        sn_exec_stats xs;
        sn_exec_stats_get(sn_trainer_exec(tr), &xs);
        double tflops = model.model_flops / med / 1e12;
        double planned = (double)(p->arena_bytes + p->persistent_bytes + sn_trainer_state_bytes(tr));
        gc_num(s, "batch", B);
        gc_num(s, "seq", T);
        gc_num(s, "step_ms_median", med * 1e3);
        gc_num(s, "step_ms_min", t[0] * 1e3);
        gc_num(s, "step_ms_max", t[n - 1] * 1e3);
        gc_num(s, "tokens_per_s", tokens / med);
        gc_num(s, "tflops", tflops);
        gc_num(s, "mfu_measured_peak", r->bf16_tflops > 0 ? tflops / r->bf16_tflops : NAN);
        gc_num(s, "mfu_h100_published", tflops / m->bf16_tflops);
        gc_num(s, "bandwidth_share", r->copy_tb_per_s > 0 ? model.bytes / med / 1e12 / r->copy_tb_per_s : NAN);
        gc_num(s, "modeled_ms", model.time_s * 1e3);
        gc_num(s, "kernels_per_step", p->n_kernels + OPTIMIZER_LAUNCHES);
        gc_num(s, "device_memory_used_bytes", (double)(used - r->mem_baseline));
        gc_num(s, "planned_bytes", planned);
        for (int k = 0; k < SN_KER_KIND_COUNT; k++)
            if (xs.kind_s[k] > 0) {
                char key[40];
                snprintf(key, sizeof key, "%s_ms", sn_kernel_kind_name((sn_kernel_kind)k));
                gc_num(s, key, xs.kind_s[k] * 1e3);
            }
        char mem[64] = "", pl[32], mfu[96] = "";
        if (r->cuda) snprintf(mem, sizeof mem, "%.2f GB of device memory in use, ", (used - r->mem_baseline) / 1e9);
        if (r->bf16_tflops > 0)
            snprintf(mfu, sizeof mfu, "MFU %.1f%% of the measured GEMM peak, %.0f%% of the copy's "
                     "bandwidth modeled bytes, ", 100 * tflops / r->bf16_tflops,
                     100 * model.bytes / med / 1e12 / r->copy_tb_per_s);
        gc_end(r, s, GC_PASS, "%.3f ms a step (median of %d; %.3f to %.3f) = %.0f tokens/s, %.3g "
               "TFLOP/s: %s%.2g%% of the H100's published bf16 peak; %d kernels a step; %splanned "
               "%s; modeled on an H100 %.3g ms", med * 1e3, n, t[0] * 1e3, t[n - 1] * 1e3,
               tokens / med, tflops, mfu, 100 * tflops / m->bf16_tflops,
               p->n_kernels + OPTIMIZER_LAUNCHES, mem, sn_bytes_str((int64_t)planned, pl, sizeof pl),
               model.time_s * 1e3);
        fprintf(r->details, "%s: kernels by kind (device events, one profiled step after the timed ones) beside the model\n", name);
        sn_roofline_print(r->details, p, param_count(g), tokens, m, &ro, xs.kind_s, med);
        double *ks = malloc(sizeof(double) * (size_t)(p->n_kernels ? p->n_kernels : 1));
        if (ks) { /* else the kernels' table below still has every kernel */
            for (int k = 0; k < p->n_kernels; k++) ks[k] = sn_exec_kernel_time(sn_trainer_exec(tr), k);
            sn_roofline_print_gaps(r->details, p, m, &ro, ks, 12);
            free(ks);
        }
        char run[64];
        snprintf(run, sizeof run, "%dx%d-%s", B, T, mode);
        write_kernel_table(r, run, p, sn_trainer_exec(tr), m, &ro);
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) d->event_free(d, ev[i]);
    free(x);
    free(y);
    sn_trainer_free(tr);
    sn_graph_free(g);
}

void gc_time_steps(gc_run *r) {
    const gc_opts *o = &r->o;
    char table[1100];
    snprintf(table, sizeof table, "%s/gpu_check_kernels.tsv", o->out_dir);
    remove(table); /* this run's table, appended to by each timed size */
    compile_times(r);
    for (int i = 0; i < o->n_time_sizes; i++)
        time_size(r, r->dev, "fp32", false, SN_PRECISION_FP32, o->time_sizes[i][0], o->time_sizes[i][1]);
    sn_device *d = NULL;
    sn_err e = {0};
    sn_cuda_opts co = {.tf32 = true};
    if (!r->cuda) {
        gc_end(r, gc_begin(r, "time: TF32"), GC_SKIP, "the CPU device has no TF32");
    } else if (sn_cuda_device_new_opts(0, &co, &d, &e)) {
        gc_end(r, gc_begin(r, "time: TF32"), GC_FAIL, "%s", e.msg);
    } else {
        for (int i = 0; i < o->n_time_sizes; i++)
            time_size(r, d, "TF32", true, SN_PRECISION_FP32, o->time_sizes[i][0], o->time_sizes[i][1]);
        sn_device_free(d);
    }
    /* the autocast programs: bf16 (sm_80+; on sm_75 a SKIP naming fp16) and fp16 */
    for (int i = 0; i < o->n_time_sizes; i++)
        time_size(r, r->dev, "bf16", false, SN_PRECISION_BF16, o->time_sizes[i][0], o->time_sizes[i][1]);
    for (int i = 0; i < o->n_time_sizes; i++)
        time_size(r, r->dev, "fp16", false, SN_PRECISION_FP16, o->time_sizes[i][0], o->time_sizes[i][1]);
}
