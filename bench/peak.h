/* peak.h: this machine's FMA peak, measured (not looked up): a bench's MFU is achieved FLOP/s
 * over this number, taken in the same run as the measurement it divides. One pinned thread per
 * CPU, each running 16 independent chains of the widest FMA (or bf16 dot-product) it has. */
#ifndef SN_BENCH_PEAK_H
#define SN_BENCH_PEAK_H

#include <stdbool.h>

typedef enum {
    SN_PEAK_F32,  /* vfmadd231ps: zmm with AVX-512, else ymm (AVX2 + FMA) */
    SN_PEAK_BF16, /* vdpbf16ps zmm: bf16 pairs into fp32 accumulators (avx512_bf16) */
} sn_bench_peak_dtype;

typedef struct {
    double gflops;          /* best total of `threads` threads running at once */
    double gflops_per_core; /* that run's total / threads */
    int threads;            /* threads run: the request, capped at the CPUs this process may use */
    const char *isa;        /* "avx512f", "avx2" or "avx512_bf16" */
    const char *instr;      /* "avx512 vfmadd231ps", "avx2 vfmadd231ps" or "avx512 vdpbf16ps" */
} sn_bench_peak;

/* Whether this CPU has the instruction sn_bench_peak_measure times for dt. */
bool sn_bench_peak_supported(sn_bench_peak_dtype dt);

/* Best run of `threads` threads (0: one per CPU this process may use) over `reps` runs of about
 * 0.2 s each. Returns false, with *out zeroed, if the CPU lacks the instruction. */
bool sn_bench_peak_measure(sn_bench_peak_dtype dt, int threads, int reps, sn_bench_peak *out);

/* The FP32 peak in GFLOP/s (sn_bench_peak_measure(SN_PEAK_F32, ...).gflops); *isa gets "avx512f"
 * or "avx2". */
double sn_bench_fma_peak(int threads, int reps, const char **isa);

#endif
