/* cuda_device.h: the CUDA device (Driver API, NVRTC and cuBLASLt, all opened with dlopen), and
 * the probe `sinter info` and `--device auto` use. Convention: no function here fails the process
 * on a machine without a driver: the absence of libcuda is a status with the reason in words.
 *
 *     sn_device *d;
 *     if (sn_cuda_device_new(0, &d, &e)) printf("%s\n", e.msg); // "no CUDA device (...)"
 */
#ifndef SN_CUDA_DEVICE_H
#define SN_CUDA_DEVICE_H

#include <stdio.h>

#include "runtime/device.h"

typedef struct {
    bool tf32;             /* TF32 tensor-core GEMMs (sm_80+; ignored before) */
    bool no_cache;         /* compile every kernel, read and write no cache entry */
    bool no_graphs;        /* launch one by one: never capture a step into a CUDA Graph */
    int compile_jobs;      /* NVRTC children at once; 0: the CPUs this process may use */
    const char *cache_dir; /* NULL: $XDG_CACHE_HOME/sinter or ~/.cache/sinter */
} sn_cuda_opts;

/* The CUDA device `ordinal` with default options (tf32 off, cache on, graphs on). Without a
 * driver or a device: SN_ERR_DEVICE, the message saying why ("no CUDA device (libcuda.so.1:
 * cannot open shared object file ...)"). */
sn_status sn_cuda_device_new(int ordinal, sn_device **out, sn_err *e);
sn_status sn_cuda_device_new_opts(int ordinal, const sn_cuda_opts *o, sn_device **out, sn_err *e);

/* Number of CUDA devices; 0 with the reason in why (when not NULL): "libcuda.so.1: cannot open
 * shared object file ..." or "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is
 * detected)". */
int sn_cuda_device_count(char *why, size_t why_len);

/* The `sinter info` lines: NVRTC and cuBLASLt versions (or why not), driver, devices. */
void sn_cuda_info_print(FILE *f);

/* One translation unit of a compiled program (runtime/cuda/compile_parts.c). */
enum { SN_CUDA_MAX_PARTS = 8 };
typedef struct {
    int kernels, functions;
    size_t cost;          /* its functions' sn_cuda_function_cost: the split's measure of NVRTC's
                             work, in bytes of attention-like text */
    size_t src_bytes;     /* its translation unit */
    bool compiled;        /* NVRTC ran (else a cache hit) */
    double cpu_s, wall_s; /* its NVRTC child's CPU (user + system) and fork-to-reaped time */
} sn_cuda_part_stats;

/* How many NVRTC children compile at once by default: the CPUs this process may run on. */
int sn_cuda_compile_jobs(void);

/* Statistics of a CUDA device (zeros for another device). */
typedef struct {
    int sm;                       /* 90: sm_90 */
    int nvrtc_runs, cache_hits, cache_rejected; /* per part */
    double compile_s;             /* the compile calls, wall */
    /* where compile_s went (wall, summed over compile calls): rendering the CUDA C, cache reads
     * and writes, NVRTC children (first fork to last reaped), module loads with their functions'
     * lookups, cuBLASLt plans */
    double render_s, cache_s, nvrtc_s, load_s, gemm_s;
    int programs, parts;          /* compile calls with generated kernels; their translation
                                     units (each a cache hit or an NVRTC run) */
    int last_parts;               /* the last such call's, with what each cost: */
    sn_cuda_part_stats part[SN_CUDA_MAX_PARTS];
    int graphs_captured, graph_launches, eager_steps;
    int gemm_plans;
    int gemm_tuned, gemm_tune_switched; /* SN_GEMM_TUNE: problems timed; those whose fastest
                                           is not the heuristic's first */
    double gemm_tune_s;           /* spent timing them (part of gemm_s) */
} sn_cuda_stats;
void sn_cuda_stats_get(const sn_device *d, sn_cuda_stats *s);

/* The device's measured ceilings (ceilings.c): a gemm_n^3 bf16 GEMM through cuBLASLt (fp32
 * accumulation) on random data, and a device-to-device copy of copy_bytes (0: skipped), each the
 * median of reps (0: 10) timed with events after two warm-up runs. */
typedef struct {
    int gemm_n;         /* 8192 on a large GPU; 0: no GEMM */
    bool f32;           /* an f32 GEMM instead (a stand-in driver's cuBLASLt has only f32) */
    int64_t copy_bytes; /* 1 GiB on a large GPU */
    int reps;
} sn_cuda_ceiling_opts;
typedef struct {
    double bf16_tflops, gemm_s; /* (f32: the f32 GEMM's rate) */
    double gemm_check_err; /* the worst relative error of 16 entries checked against the host */
    double copy_tb_per_s;  /* bytes read plus bytes written, per second */
    double copy_s;
    int64_t device_bytes;
} sn_cuda_ceilings;
sn_status sn_cuda_measure_ceilings(int ordinal, const sn_cuda_ceiling_opts *o, sn_cuda_ceilings *out,
                                   sn_err *e);
/* The wgmma GEMM (codegen/cuda/cuda_wgmma.c) on the device in each of its layouts against the
 * host's exact product (wgmma_check.c): confirms on a first sm_90 GPU what the simulator assumes
 * of warpgroup MMA. Another architecture: skipped (SN_OK). */
enum { SN_WGMMA_MAX_FORMS = 16 };
typedef struct {
    int sm;       /* the device's compute capability, 90 for sm_90 */
    bool skipped; /* not sm_90: nothing run */
    int forms, failed; /* layouts run; those whose result differs from the product */
    double worst[SN_WGMMA_MAX_FORMS]; /* per layout: the largest difference (must be 0) */
} sn_cuda_wgmma_result;
sn_status sn_cuda_wgmma_check(int ordinal, sn_cuda_wgmma_result *out, sn_err *e);
/* Device memory in use (total minus free: this process's contexts and any other's), and the total. */
sn_status sn_cuda_memory_used(int ordinal, int64_t *used, int64_t *total, sn_err *e);

#endif
