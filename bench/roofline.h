/* roofline.h: a roofline model of a compiled program on a GPU: each kernel's FLOPs and the
 * fewest bytes it must move (every argument read or written once), its modeled time
 * max(flops / peak, bytes / bandwidth), or longer when one block does more than its share
 * (its share of the work on its share of the SMs), summed per step. Convention: a model, printed beside
 * (never instead of) a measurement; GEMM FLOPs are 2MNK, attention counts the causal pairs,
 * other kernels count a few FLOPs per element and are, as modeled, bound by bytes. */
#ifndef SN_BENCH_ROOFLINE_H
#define SN_BENCH_ROOFLINE_H

#include <stdbool.h>
#include <stdio.h>

#include "program/program.h"
#include "train/offload.h"

/* A machine's published ceilings. */
typedef struct {
    const char *name;
    double bf16_tflops; /* dense tensor-core bf16 (and f16) products, fp32 accumulate */
    double tf32_tflops; /* tensor-core TF32 products */
    double fp32_tflops; /* CUDA cores, FMA counted as 2 */
    double tb_per_s;    /* device memory bandwidth */
    int sms;            /* multiprocessors: a block runs on one */
    double pcie_gb_s;   /* host <-> device copies of page-locked memory, each direction at once
                           (PCIe 5.0 x16: 64 GB/s raw; assumed 55, to be measured) */
    double gemm_floor_us, kernel_floor_us; /* the least a library GEMM and a generated kernel
                           take, whatever their bytes and FLOPs: measured on an H200 (2026-11-28,
                           the check's per-kernel tables: kernels modeled under 4 us took 7.3-13
                           us (GEMMs) and 3.6-17 us (generated); their sum was the graph-replayed
                           step's within 2-9%), so that many small kernels (LoRA's rank-r
                           products) cost what they do */
    double gemm_eff, gemm_overhead_us; /* a library GEMM runs at gemm_eff of the bf16 (TF32,
                           fp32) peak and takes gemm_overhead_us more, whatever its size: fitted
                           on an H200 (2026-11-28): with 0.9 and 10 us gpt2 bf16 B=16 T=1024's
                           147 GEMMs are modeled 18.64 ms (measured 19.20, their epilogues
                           included) and smollm2-135m B=8 T=1024's 633 are 15.83 ms (measured
                           14.85); at the bare ceiling 15.7 and 9.4 */
    double fp8_tflops;  /* dense tensor-core FP8 (e4m3/e5m2) products, fp32 accumulate; 0:
                           none (before sm_89) */
} sn_roofline_machine;

/* "h100": H100 SXM (989 bf16 dense, 1979 FP8, 494.5 TF32, 67 fp32, 3.35 TB/s); "h200": the
 * H200's measured ceilings (773 bf16, 4.22 TB/s; 2026-11-27; FP8 assumed twice bf16, not
 * measured); "rtx3090" (71 bf16, no FP8, 0.936 TB/s, 82 SMs) and "rtx4090" (165.2 bf16, 330.3
 * FP8, 1.008 TB/s, 128 SMs): published; NULL for another name. */
const sn_roofline_machine *sn_roofline_machine_find(const char *name);

/* How f32 GEMMs run: on the CUDA cores, or as TF32 on the tensor cores (--tf32). */
typedef struct {
    bool tf32;
    double device_step_s; /* the offload model's on-device step as a GPU measured it (0: as
                             modeled): the kernels' modeled times scaled to make it */
} sn_roofline_opts;

typedef struct {
    double flops, bytes;
    double time_s;     /* max(flops / the kernel's peak, bytes / bandwidth, the machine's floor);
                          a GEMM's: max(flops / (peak gemm_eff), bytes / bandwidth) +
                          gemm_overhead_us */
    bool compute_bound;
    bool sm_bound;     /* its busiest block, alone on one SM, takes longer than that */
    bool floor_bound;  /* the machine's least time for a kernel of its kind is more */
} sn_roofline_kernel;

typedef struct {
    double flops, bytes, time_s;   /* the program's kernels and the optimizer step */
    double model_flops;            /* GEMMs and attention: what MFU counts */
    double kind_s[SN_KER_KIND_COUNT]; /* modeled time by kernel kind */
    double kind_bytes[SN_KER_KIND_COUNT], kind_flops[SN_KER_KIND_COUNT];
    double optimizer_s, optimizer_bytes; /* SQNORM + CLIP + ADAMW over n_params, modeled */
} sn_roofline_step;

/* FLOPs of one kernel (GEMMs 2MNK, attention the causal pairs); the sum over a program is what
 * MFU divides (train_bench's program FLOPs). */
double sn_roofline_kernel_flops(const sn_kernel *k);

/* One kernel on machine m. */
sn_roofline_kernel sn_roofline_kernel_model(const sn_kernel *k, const sn_roofline_machine *m,
                                            const sn_roofline_opts *o);

/* The program's kernels plus one optimizer step over n_params f32 parameters (0: none). */
sn_roofline_step sn_roofline_program(const sn_program *p, int64_t n_params,
                                     const sn_roofline_machine *m, const sn_roofline_opts *o);

/* A table: per kernel kind count, FLOPs, bytes, modeled time, and the measured time beside it
 * where measured_kind_s is not NULL; then the step's modeled time, tokens/s and MFU against the
 * machine's bf16 peak and against the peak the GEMMs run at. tokens: per step. */
void sn_roofline_print(FILE *f, const sn_program *p, int64_t n_params, double tokens,
                       const sn_roofline_machine *m, const sn_roofline_opts *o,
                       const double *measured_kind_s, double measured_step_s);

/* Where a measured step departs from the model (roofline_gap.c). A GEMM's shape as the library
 * runs it: batch products of M x N, K deep (A's batch folded into M when B is one matrix). A
 * skinny GEMM has M, N or K at most SN_ROOFLINE_SKINNY: LoRA's rank-r products and their
 * gradients, which a library may tile far from the model's bytes-bound time. */
enum { SN_ROOFLINE_SKINNY = 64 };
typedef struct {
    int64_t batch, m, n, k;
} sn_roofline_gemm_shape;
sn_roofline_gemm_shape sn_roofline_gemm_shape_of(const sn_kernel *k);
bool sn_roofline_gemm_skinny(const sn_kernel *k);

/* The program's GEMMs in two classes, [0] skinny and [1] the rest: count, FLOPs, bytes, modeled
 * time, and the measured time (measured_kernel_s[i]: kernel i's, or NULL). */
typedef struct {
    int n[2];
    double flops[2], bytes[2], modeled_s[2], measured_s[2];
} sn_roofline_gemm_classes;
sn_roofline_gemm_classes sn_roofline_gemm_split(const sn_program *p, const sn_roofline_machine *m,
                                                const sn_roofline_opts *o,
                                                const double *measured_kernel_s);

/* Prints the two GEMM classes with their measured times, then the `top` kernels whose measured
 * time (measured_kernel_s[i], one profiled step) exceeds their modeled time the most, with
 * GEMMs' shapes, and the sum of every kernel's excess. */
void sn_roofline_print_gaps(FILE *f, const sn_program *p, const sn_roofline_machine *m,
                            const sn_roofline_opts *o, const double *measured_kernel_s, int top);

/* An offloaded step (sn_train_opts.offload, train/runner.c): the program's kernels and SQNORM
 * on the device, then AdamW on the host over n_params in chunks of `chunk` elements, f32
 * gradients down and f32 weights up over PCIe (both directions at once), the host's work at
 * host_gb_s (28 bytes an element: p, m, v, g read, p, m, v written). Serial: the three one after
 * another (the copies synchronous); overlapped: the pipeline, the slowest of the three plus one
 * chunk of each of the other two (filling and draining it). */
typedef struct {
    double on_device_s;          /* the step without offload (sn_roofline_program) */
    double kernel_scale;         /* the kernels' modeled times times this (opts device_step_s) */
    double device_s;             /* its kernels without AdamW, with SQNORM */
    double down_s, up_s, host_s; /* the optimizer's three streams of work */
    double low_frac;             /* of the elements, those that go up as 16-bit shadows */
    double serial_s, overlapped_s; /* the optimizer phase */
    double step_s;               /* device_s + overlapped_s */
    /* the delayed parameter update (sn_train_opts.offload_delay, runner.c): the host's AdamW
     * overlaps the device's next step, and each chunk of the gradients comes down as soon as
     * the last kernel that writes it has run (program.h sn_program_last_write; the kernels
     * back to back at their modeled times, one copy stream): tail_s of it is left after the
     * last kernel, all of it on the host at down_end_s from the step's start. The weights go
     * up once the device's step no longer reads them and the host's update is done, while the
     * tail comes down the other way: max(down_end_s, max(device_s, host_s) + up_s);
     * delayed_serial_s what follows the device's step; delayed_after_s the same with the
     * gradients down after the step, as before they came down during it:
     * max(device_s, host_s) + max(down_s, up_s) */
    double tail_s, down_end_s, delayed_s, delayed_serial_s, delayed_after_s;
    /* the same with the weights going up during the step's run (sn_trainer_accumulate_last,
     * the default of sn_trainer_step and the CLI): each chunk (its f32 weights, or the 16-bit
     * shadows' bits where they go so) once the host's update is done and the last kernel using
     * its bytes has ended (program.h sn_program_last_use), in that order on the upload stream;
     * delayed_run_s = max(down_end_s, device_s, the last upload's end); up_left_s of the uploads
     * after the device's step */
    double delayed_run_s, up_left_s;
    /* the same with the weights and the gradients double-buffered on the device (+8 bytes an
     * element: not built): two device copies serial, the pipeline overlapping the device */
    double buffered_s;
} sn_roofline_offload;

/* seg (n_seg; NULL: all in f32): the runs of the flat range that go up as their 16-bit weight
 * shadows (2 bytes each, train/offload.h sn_offload_segments) or in f32 */
sn_roofline_offload sn_roofline_offload_model(const sn_program *p, int64_t n_params, int64_t chunk,
                                              const sn_roofline_machine *m,
                                              const sn_roofline_opts *o, double host_gb_s,
                                              const sn_offload_seg *seg, int n_seg);
void sn_roofline_offload_print(FILE *f, const sn_roofline_offload *r, double tokens,
                               double host_gb_s, const sn_roofline_machine *m);
/* The delayed update's lines alone (its step against the step without offload). */
void sn_roofline_offload_delay_print(FILE *f, const sn_roofline_offload *r, double host_gb_s);

#endif
