/* peak.h: this machine's FP32 FMA peak, measured (not looked up): the bench's MFU is
 * achieved FLOP/s over this number, taken in the same run as the measurement it divides. */
#ifndef SN_BENCH_PEAK_H
#define SN_BENCH_PEAK_H

/* Best GFLOP/s of `threads` threads (0: all CPUs) running independent FMA chains at once,
 * over `reps` runs of about 0.2 s each; *isa gets "avx512f" or "avx2". */
double sn_bench_fma_peak(int threads, int reps, const char **isa);

#endif
