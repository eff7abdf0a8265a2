/* driver.c: libcuda and cuBLASLt opened with dlopen (never linked), their symbols looked up from
 * cuda_api.h's tables, NVRTC through codegen/cuda/nvrtc.c's loader (the one every compile uses),
 * and the one failure path of SN_CUDA_CHECK. Convention: a library is named by an environment
 * variable when set (SN_LIBCUDA=/path/libsn_standin_cuda.so). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_rt.h"

static const char *const lib_default[SN_LIB_COUNT] = {SN_LIBCUDA_DEFAULT, SN_LIBNVRTC_DEFAULT,
                                                      SN_LIBCUBLASLT_DEFAULT};
static const char *const lib_env[SN_LIB_COUNT] = {SN_LIBCUDA_ENV, SN_LIBNVRTC_ENV,
                                                  SN_LIBCUBLASLT_ENV};
static const char *const lib_fix[SN_LIB_COUNT] = {
    "install the NVIDIA driver, or use --device cpu",
    "", /* nvrtc.c says it */
    ("install the CUDA toolkit's cuBLASLt (libcublasLt.so.13) or add its lib64 folder to "
     "LD_LIBRARY_PATH"), /* one string (clang's -Wstring-concatenation) */
};

typedef struct {
    size_t offset; /* of the function pointer in sn_cuda_api */
    const char *symbol;
} sym_entry;

#define SN_CUDA_SYM(ret, name, sym, params) {offsetof(sn_cuda_api, name), sym},
static const sym_entry driver_syms[] = {SN_CUDA_DRIVER_API(SN_CUDA_SYM)};
static const sym_entry cublaslt_syms[] = {SN_CUDA_CUBLASLT_API(SN_CUDA_SYM)};
#undef SN_CUDA_SYM

const char *sn_cuda_lib_name(const sn_cuda_api *a, sn_cuda_lib lib) {
    if (lib == SN_LIB_NVRTC) return sn_nvrtc_lib_name(&a->nvrtc);
    if (a->path[lib][0]) return a->path[lib];
    const char *env = getenv(lib_env[lib]);
    return env && *env ? env : lib_default[lib];
}

sn_status sn_cuda_api_load(sn_cuda_api *a, sn_cuda_lib lib, sn_err *e) {
    if (a->handle[lib]) return SN_OK;
    if (lib == SN_LIB_NVRTC) {
        sn_status st = sn_nvrtc_open(&a->nvrtc, e);
        a->handle[lib] = a->nvrtc.handle;
        return st;
    }
    const char *name = sn_cuda_lib_name(a, lib);
    snprintf(a->path[lib], sizeof a->path[lib], "%s", name);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return sn_fail(e, SN_ERR_DEVICE, "%s (%s; or name the library with %s=PATH)",
                       why ? why : name, lib_fix[lib], lib_env[lib]);
    }
    const sym_entry *syms = lib == SN_LIB_CUDA ? driver_syms : cublaslt_syms;
    size_t n = lib == SN_LIB_CUDA ? sizeof driver_syms / sizeof *syms
                                  : sizeof cublaslt_syms / sizeof *syms;
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(h, syms[i].symbol);
        if (!f) {
            if (lib != SN_LIB_CUDA) dlclose(h);
            return sn_fail(e, SN_ERR_DEVICE, "%s has no symbol %s: the library is older than "
                           "sinter needs (CUDA 12 or newer); update it", name, syms[i].symbol);
        }
        memcpy((char *)a + syms[i].offset, &f, sizeof f);
    }
    a->handle[lib] = h;
    return SN_OK;
}

void sn_cuda_api_unload(sn_cuda_api *a) {
    sn_nvrtc_close(&a->nvrtc);
    for (int lib = SN_LIB_CUBLASLT; lib < SN_LIB_COUNT; lib++)
        if (a->handle[lib]) dlclose(a->handle[lib]);
    void *cuda = a->handle[SN_LIB_CUDA]; /* the driver stays open: its threads may be running */
    memset(a, 0, sizeof *a);
    (void)cuda;
}

sn_status sn_cuda_fail(const sn_cuda_api *a, int result, const char *file, int line,
                       const char *call, sn_err *e) {
    const char *name = NULL, *text = NULL;
    sn_status code = SN_ERR_DEVICE;
    if (strncmp(call, "cublasLt", 8) == 0) {
        name = a->cublasLtGetStatusName ? a->cublasLtGetStatusName(result) : NULL;
        text = a->cublasLtGetStatusString ? a->cublasLtGetStatusString(result) : NULL;
        if (result == 3) code = SN_ERR_OOM; /* CUBLAS_STATUS_ALLOC_FAILED */
    } else {
        if (a->cuGetErrorName && a->cuGetErrorName(result, &name) != CUDA_SUCCESS) name = NULL;
        if (a->cuGetErrorString && a->cuGetErrorString(result, &text) != CUDA_SUCCESS) text = NULL;
        if (result == CUDA_ERROR_OUT_OF_MEMORY) code = SN_ERR_OOM;
    }
    /* a kernel's fault is reported by whichever call comes after it, and ends the context */
    bool fault = code == SN_ERR_DEVICE && strncmp(call, "cublasLt", 8) &&
                 (result == 700 || (result >= 714 && result <= 719));
    char num[32];
    snprintf(num, sizeof num, "error %d", result);
    return sn_fail(e, code, "%s:%d: %s: %s%s%s%s%s", file, line, call, name ? name : num,
                   text ? " (" : "", text ? text : "", text ? ")" : "",
                   fault ? ": a kernel failed on the GPU (launches run asynchronously, so a later "
                           "call reports it; the device cannot be used after it): rerun with "
                           "CUDA_LAUNCH_BLOCKING=1 to name the kernel, and please report it" : "");
}
