/* gpu_check.h: the GPU check (tools/gpu_check runs it): every kernel kind against the reference
 * interpreter, training against the interpreter and the CPU device's golden losses, step timing,
 * the device's measured ceilings; each step printed as PASS, FAIL or SKIP with its numbers and
 * recorded for gpu_check_report.md and gpu_check.json. Convention: a failing step never stops
 * the later ones; the exit status is non-zero when any step failed. One file per part:
 * gpu_check.c (options, the run), _kernels.c, _train.c, _time.c, _report.c. */
#ifndef SN_BENCH_GPU_CHECK_H
#define SN_BENCH_GPU_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "program/target.h"
#include "runtime/device.h"

typedef enum { GC_PASS, GC_FAIL, GC_SKIP } gc_status;

typedef struct {
    const char *device;      /* "cuda" (default) or "cpu" (golden losses, trying the check here) */
    const char *out_dir;     /* gpu_check_report.md, gpu_check.json */
    const char *cache_dir;   /* the kernel cache (default: out_dir/kernel-cache); the cold
                                compile uses cache_dir-cold, emptied first */
    uint64_t seed;           /* fresh random inputs: the run's seed (default: from the clock) */
    int att_T;               /* attention's sequence length (100: no tile divides it) */
    const char *tiny_model;  /* trained against the interpreter */
    int tiny_steps;
    const char *train_model; /* trained against the golden (or a live CPU) reference */
    int train_batch, train_seq, train_steps;
    const char *golden;      /* the golden losses file (fp32) */
    const char *golden_bf16; /* the golden bf16 losses (the autocast program on the CPU device) */
    const char *write_golden; /* produce a golden file (on the CPU device) and stop */
    sn_precision train_precision; /* the golden file's precision (--train-precision; fp32) */
    const char *time_model;
    int time_sizes[4][2], n_time_sizes; /* (B, T) */
    int time_steps;          /* timed steps per size (median) */
    int warmup;              /* untimed steps before them (3; at least 2: eager, then captured) */
    int gemm_n;              /* the ceilings: bf16 GEMM n^3 and the copy's MiB */
    bool gemm_f32;           /* the ceiling GEMM in f32 (for a cuBLASLt without bf16) */
    int copy_mib;
    int att_shapes[4][5], n_att_shapes; /* attention timed alone: (B, H, T, D, kv heads), bf16 */
    int att_reps;            /* timed runs per attention program (median) */
    const char *att_tiles;   /* --att-tiles: SN_ATT_TILES configurations to compare, ';' apart */
    bool only_attention;     /* --only attention: the device and the attention timings alone */
    const char *anchors_dir; /* torch_gpt2.jsonl, torch_sdpa.jsonl (bench/torch_*.py), or
                                torch_skip.txt with the reason there are none; NULL: none */
} gc_opts;

/* One step's record: a name, a status, a one-line message, numbers. */
enum { GC_MAX_NUMS = 24, GC_MAX_STEPS = 64 };
typedef struct {
    char name[64];
    gc_status status;
    char msg[512];
    int n_nums;
    char keys[GC_MAX_NUMS][40];
    double vals[GC_MAX_NUMS];
} gc_step;

typedef struct {
    gc_opts o;
    sn_device *dev;          /* the device under check */
    bool cuda;
    char device_name[256];
    gc_step steps[GC_MAX_STEPS];
    int n_steps;
    int kinds_run[16];       /* kernels run per kind by the kernel checks */
    double bf16_tflops, copy_tb_per_s; /* measured ceilings (0: not measured) */
    int64_t mem_baseline;    /* device memory in use before the check's programs */
    FILE *details;           /* longer text for the report (tables), an open memstream */
    char *details_buf;
    size_t details_len;
} gc_run;

/* gpu_check_report.c: record a step (printed at once: "PASS name: msg") with its numbers. */
gc_step *gc_begin(gc_run *r, const char *name);
void gc_num(gc_step *s, const char *key, double v);
void gc_end(gc_run *r, gc_step *s, gc_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Writes gpu_check_report.md and gpu_check.json into o.out_dir; false (with a message on
 * stderr) when it cannot. */
bool gc_write_reports(gc_run *r);
int gc_failures(const gc_run *r);

/* max |got - want| / max(max |want|, floor): NaN anywhere gives NaN (so !(err <= tol) fails). */
double gc_rel_err(const float *got, const double *want, int64_t n, double floor);

/* A device whose allocations are filled with 0xff bytes (NaN as f32): an output a kernel does
 * not write reads back as NaN. It wraps (does not own) inner. */
sn_device *gc_poison_device_new(sn_device *inner, sn_err *e);
void gc_poison_device_free(sn_device *d);

/* gpu_check_kernels.c: every kernel kind against the interpreter, then the coverage step. */
void gc_check_kernels(gc_run *r);
/* gpu_check_train.c: tiny GPT-2 (and the optimizer kernels) against the interpreter; the
 * train model's losses in fp32 and in bf16 against the fp32 golden file (or the CPU device
 * live); write_golden. */
void gc_check_tiny(gc_run *r);
void gc_check_losses(gc_run *r);
int gc_write_golden(const gc_opts *o);
/* The model's training graph at precision prec (attention fused, vocabulary padded, backward);
 * *vocab its unpadded vocabulary; NULL with e set on failure. */
sn_graph *gc_train_graph(const char *model, int B, int T, sn_precision prec, int *vocab,
                         sn_err *e);
/* The train data: a periodic token stream from a seed (the model can learn it), batch by step. */
void gc_batch(int vocab, int B, int T, int step, int32_t *x, int32_t *y);
/* gpu_check_time.c: the ceilings; step timing, compile times, kernels, memory. */
void gc_measure_ceilings(gc_run *r);
/* The wgmma GEMM in every layout against the exact product (sm_90 only; first, it is short). */
void gc_check_wgmma(gc_run *r);
void gc_time_steps(gc_run *r);
/* gpu_check_attention.c: sinter's causal attention alone, forward and forward + backward. */
void gc_time_attention(gc_run *r);
/* "<what> B=16 H=12 T=1024 D=64" of shape sh (att_shapes), " KV=4" for grouped-query k and v,
 * then tail (" bf16"): the attention steps' names, which the anchors look up. */
void gc_att_name(char *buf, size_t len, const char *what, const int *sh, const char *tail);
/* gpu_check_anchors.c: the PyTorch anchors measured in the same run (tools/gpu_check runs
 * bench/torch_gpt2.py and bench/torch_sdpa.py into anchors_dir) beside the steps' times, as
 * ratios sinter / torch; SKIPs saying why when there are none ("no torch"). With --only
 * attention, SDPA's alone. */
void gc_compare_anchors(gc_run *r);

#endif
