/* info.c: the `sinter info` report: build, CPU (cpuid), toolkits, and CUDA devices found through
 * the Driver API opened with dlopen (its few types are declared here, so no toolkit is needed).
 * Convention: every probe answers in words; nothing here fails or aborts. */
#include "info.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SN_X86 1
#endif
#ifdef SN_HAVE_LLVM
#include <llvm/Config/llvm-config.h>
#endif
#ifdef SN_HAVE_NVRTC
#include <nvrtc.h>
#endif
#ifdef SN_HAVE_CUBLASLT
#include <cublasLt.h>
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

/* ---- CUDA driver, through dlopen ------------------------------------------------------- */

typedef int CUresult; /* 0 is CUDA_SUCCESS */
typedef int CUdevice;
enum {
    CU_ATTR_SM_COUNT = 16,  /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
    CU_ATTR_CC_MAJOR = 75,  /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    CU_ATTR_CC_MINOR = 76,  /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
};

typedef struct {
    void *lib;
    CUresult (*init)(unsigned flags);
    CUresult (*driver_version)(int *version);
    CUresult (*count)(int *n);
    CUresult (*get)(CUdevice *dev, int ordinal);
    CUresult (*name)(char *name, int len, CUdevice dev);
    CUresult (*total_mem)(size_t *bytes, CUdevice dev);
    CUresult (*attribute)(int *value, int attr, CUdevice dev);
    CUresult (*error_name)(CUresult r, const char **name);
} cuda_api;

/* Opens libcuda and calls cuInit; returns the device count, or 0 with the reason in why.
 * The library stays open: the driver may have started threads that run its code. */
static int cuda_open(cuda_api *api, char *why, size_t len) {
    memset(api, 0, sizeof *api);
    api->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) {
        const char *err = dlerror();
        snprintf(why, len, "%s", err ? err : "libcuda.so.1: not found");
        return 0;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&api->init, "cuInit"},
        {(void **)&api->driver_version, "cuDriverGetVersion"},
        {(void **)&api->count, "cuDeviceGetCount"},
        {(void **)&api->get, "cuDeviceGet"},
        {(void **)&api->name, "cuDeviceGetName"},
        {(void **)&api->total_mem, "cuDeviceTotalMem_v2"},
        {(void **)&api->attribute, "cuDeviceGetAttribute"},
        {(void **)&api->error_name, "cuGetErrorName"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].slot = dlsym(api->lib, syms[i].name);
        if (!*syms[i].slot && strcmp(syms[i].name, "cuGetErrorName") != 0) {
            snprintf(why, len, "libcuda.so.1: no symbol %s: the driver is too old; update it",
                     syms[i].name);
            return 0;
        }
    }
    const char *call = "cuInit";
    CUresult r = api->init(0);
    int n = 0;
    if (r == 0) {
        call = "cuDeviceGetCount";
        r = api->count(&n);
    }
    if (r != 0) {
        const char *name = NULL;
        if (api->error_name && api->error_name(r, &name) != 0) name = NULL;
        snprintf(why, len, "%s: error %d%s%s%s", call, r,
                 name ? " (" : "", name ? name : "", name ? ")" : "");
        return 0;
    }
    if (n == 0) snprintf(why, len, "cuDeviceGetCount: 0 devices");
    return n;
}

int sn_cuda_device_count(char *why, size_t why_len) {
    char buf[512];
    cuda_api api;
    int n = cuda_open(&api, buf, sizeof buf);
    if (why && why_len) snprintf(why, why_len, "%s", n ? "" : buf);
    return n;
}

static void print_cuda(FILE *f) {
    char why[512];
    cuda_api api;
    int n = cuda_open(&api, why, sizeof why);
    if (n == 0) {
        fprintf(f, "cuda:       no CUDA device (%s)\n", why);
        return;
    }
    int drv = 0;
    api.driver_version(&drv);
    fprintf(f, "cuda:       driver for CUDA %d.%d, %d device%s\n", drv / 1000, drv % 1000 / 10, n,
            n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        CUdevice dev;
        char name[256] = "?";
        size_t mem = 0;
        int major = 0, minor = 0, sms = 0;
        if (api.get(&dev, i) != 0) {
            fprintf(f, "  device %d: cuDeviceGet failed\n", i);
            continue;
        }
        api.name(name, sizeof name, dev);
        api.total_mem(&mem, dev);
        api.attribute(&major, CU_ATTR_CC_MAJOR, dev);
        api.attribute(&minor, CU_ATTR_CC_MINOR, dev);
        api.attribute(&sms, CU_ATTR_SM_COUNT, dev);
        fprintf(f, "  device %d: %s, sm_%d%d (compute capability %d.%d), %.1f GiB, %d SMs\n", i,
                name, major, minor, major, minor, (double)mem / (1024.0 * 1024 * 1024), sms);
    }
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
#ifdef SN_HAVE_NVRTC
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        fprintf(f, "nvrtc:      %d.%d\n", major, minor);
    else
        fprintf(f, "nvrtc:      built in, but nvrtcVersion failed\n");
#else
    fprintf(f, "nvrtc:      not built in (configure with -Dtoolkit_dir=DIR to compile GPU kernels)\n");
#endif
#ifdef SN_HAVE_CUBLASLT
    size_t v = cublasLtGetVersion();
    fprintf(f, "cublaslt:   %zu.%zu.%zu\n", v / 10000, v / 100 % 100, v % 100);
#else
    fprintf(f, "cublaslt:   not built in\n");
#endif
    print_cuda(f);
}
