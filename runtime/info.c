/* info.c: the `sinter info` report: build, CPU (cpuid), toolkits, and CUDA devices found through
 * runtime/cuda's probe (the Driver API, NVRTC and cuBLASLt opened with dlopen).
 * Convention: every probe answers in words; nothing here fails or aborts. */
#include "info.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "gemm.h"
#include "runtime/cuda/cuda_device.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SN_X86 1
#endif
#ifdef SN_HAVE_LLVM
#include <llvm/Config/llvm-config.h>
#endif

/* ---- CPU ------------------------------------------------------------------------------- */

static void trim(char *s) {
    size_t n = strlen(s), k = 0;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t')) s[--n] = 0;
    while (s[k] == ' ' || s[k] == '\t') k++;
    memmove(s, s + k, n - k + 1);
}

/* The "model name" line of /proc/cpuinfo, for CPUs whose cpuid has no brand string. */
static void model_from_proc(char *out, size_t len) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(out, len, "%s", colon + 1);
            trim(out);
            break;
        }
    }
    if (f) fclose(f);
}

void sn_cpu_info_fill(sn_cpu_info *c) {
    memset(c, 0, sizeof *c);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->cpus = n > 0 ? (int)n : 1;
#ifdef SN_X86
    unsigned a, b, cx, d;
    if (__get_cpuid(0x80000000u, &a, &b, &cx, &d) && a >= 0x80000004u) {
        uint32_t brand[12];
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2],
                        &brand[4 * i + 3]);
        memcpy(c->model, brand, sizeof brand);
        c->model[sizeof brand] = 0;
        trim(c->model);
    }
    /* a feature counts only when the OS saves its registers (XCR0: YMM bits 1-2, ZMM 5-7) */
    unsigned long long xcr0 = 0;
    if (__get_cpuid(1, &a, &b, &cx, &d) && (cx & bit_OSXSAVE)) {
        unsigned lo, hi;
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (unsigned long long)hi << 32 | lo;
    }
    bool ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
    if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
        unsigned max_sub = a;
        c->avx2 = ymm && (b & (1u << 5));
        c->avx512f = zmm && (b & (1u << 16));
        if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &cx, &d))
            c->avx512bf16 = c->avx512f && (a & (1u << 5));
    }
#endif
    if (!c->model[0]) model_from_proc(c->model, sizeof c->model);
    if (!c->model[0]) snprintf(c->model, sizeof c->model, "unknown");
}

/* ---- the report ------------------------------------------------------------------------ */

void sn_info_print(FILE *f) {
    fprintf(f, "sinter %s\n", SN_VERSION);
#if defined(__clang__)
    fprintf(f, "compiler:   clang %s\n", __clang_version__);
#elif defined(__GNUC__)
    fprintf(f, "compiler:   gcc %s\n", __VERSION__);
#else
    fprintf(f, "compiler:   unknown\n");
#endif
    sn_cpu_info c;
    sn_cpu_info_fill(&c);
    fprintf(f, "cpu:        %s, %d logical CPU%s; AVX2 %s, AVX-512F %s, AVX-512 BF16 %s\n",
            c.model, c.cpus, c.cpus == 1 ? "" : "s", c.avx2 ? "yes" : "no",
            c.avx512f ? "yes" : "no", c.avx512bf16 ? "yes" : "no");
#ifdef SN_HAVE_LLVM
    fprintf(f, "llvm:       %s (CPU JIT backend)\n", LLVM_VERSION_STRING);
#else
    fprintf(f, "llvm:       not built in (install llvm-14-dev and reconfigure for the CPU JIT)\n");
#endif
    fprintf(f, "cpu gemm:   %s\n", sn_gemm_library());
    sn_cuda_info_print(f);
}
