/* info.h: what `sinter info` prints: version, compiler, CPU and its vector features, the
 * toolkits built in (LLVM, NVRTC, cuBLASLt) and the CUDA devices.
 * Convention: probing never fails: a missing driver or device is a normal answer, reported in
 * words; libcuda is opened with dlopen, never linked. */
#ifndef SN_INFO_H
#define SN_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifndef SN_VERSION
#define SN_VERSION "0.1.0"
#endif

typedef struct {
    char model[128]; /* "AMD EPYC 9654 96-Core Processor", or "unknown" */
    int cpus;        /* logical CPUs online */
    bool avx2, avx512f, avx512bf16; /* present and enabled by the OS */
} sn_cpu_info;

void sn_cpu_info_fill(sn_cpu_info *c);

/* (The CUDA devices: sn_cuda_device_count in runtime/cuda/cuda_device.h.) */

/* Writes the report of `sinter info` to f. */
void sn_info_print(FILE *f);

#endif
