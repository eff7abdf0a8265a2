/* nvrtc.c: NVRTC, the one loader and wrapper every compile goes through (--emit-cuda, the tests,
 * the CUDA device's compiler children): the library opened with dlopen (SN_LIBNVRTC names another,
 * a stand-in in the tests), CUDA C text to a CUBIN, and the ptxas report read back (registers,
 * spills, shared memory per kernel). Convention: every NVRTC call goes through NVRTC_CHECK, which
 * records file:line, the call, NVRTC's error text and the program log, then jumps to `done`. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

/* ---- the ptxas report ---- */

/* The quoted or trailing name after `key` on a line ("... function 'k1_add' for ..."). */
static bool name_after(const char *line, const char *key, char *name, size_t len) {
    const char *p = strstr(line, key);
    if (!p) return false;
    p += strlen(key);
    if (*p == '\'') p++;
    size_t n = strcspn(p, "'\n\r ");
    if (n == 0 || n >= len) return false;
    memcpy(name, p, n);
    name[n] = '\0';
    return true;
}

/* The number before `unit` on a line ("..., 8 bytes spill stores" -> 8), or 0. */
static int number_before(const char *line, const char *eol, const char *unit) {
    const char *p = strstr(line, unit);
    if (!p || p >= eol) return 0;
    while (p > line && p[-1] == ' ') p--;
    while (p > line && p[-1] >= '0' && p[-1] <= '9') p--;
    return atoi(p);
}

int sn_ptxas_parse(const char *log, sn_cuda_kernel_info *out, int cap) {
    int n = 0, cur = -1, props = -1;
    char name[64];
    for (const char *line = log; line && *line;) {
        const char *eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        char text[512];
        size_t len = (size_t)(eol - line);
        if (len > sizeof text - 1) len = sizeof text - 1;
        memcpy(text, line, len);
        text[len] = '\0';
        if (name_after(text, "Compiling entry function ", name, sizeof name)) {
            cur = n < cap ? n : -1;
            if (cur >= 0) {
                out[cur] = (sn_cuda_kernel_info){0};
                snprintf(out[cur].name, sizeof out[cur].name, "%s", name);
            }
            n++;
        } else if (name_after(text, "Function properties for ", name, sizeof name)) {
            props = cur >= 0 && strcmp(out[cur].name, name) == 0 ? cur : -1; /* not a callee's */
        } else if (strstr(text, "bytes stack frame") && props >= 0) {
            out[props].stack_bytes = number_before(text, text + len, "bytes stack frame");
            out[props].spill_store_bytes = number_before(text, text + len, "bytes spill stores");
            out[props].spill_load_bytes = number_before(text, text + len, "bytes spill loads");
        } else if (strstr(text, "Used ") && strstr(text, " registers") && cur >= 0) {
            out[cur].registers = number_before(text, text + len, " registers");
            out[cur].shared_bytes = number_before(text, text + len, "bytes smem");
        }
        line = *eol ? eol + 1 : eol;
    }
    return n;
}

const sn_cuda_kernel_info *sn_cuda_module_info(const sn_cuda_module *m, const char *name) {
    for (int i = 0; i < m->n_info; i++)
        if (strcmp(m->info[i].name, name) == 0) return &m->info[i];
    return NULL;
}

void sn_cuda_module_free(sn_cuda_module *m) {
    free(m->cubin);
    free(m->log);
    free(m->info);
    *m = (sn_cuda_module){0};
}

/* ---- the library: opened with dlopen, never linked ---- */

#ifndef SN_CUDA_LIB_DIR
#define SN_CUDA_LIB_DIR "/usr/local/cuda/lib64"
#endif

const char *sn_nvrtc_lib_name(const sn_nvrtc *n) {
    if (n->path[0]) return n->path;
    const char *env = getenv(SN_LIBNVRTC_ENV);
    return env && *env ? env : SN_LIBNVRTC_DEFAULT;
}

typedef struct {
    size_t offset; /* of the function pointer in sn_nvrtc */
    const char *symbol;
} sym_entry;

#define SN_NVRTC_SYM(ret, name, sym, params) {offsetof(sn_nvrtc, name), sym},
static const sym_entry syms[] = {SN_CUDA_NVRTC_API(SN_NVRTC_SYM)};
#undef SN_NVRTC_SYM

sn_status sn_nvrtc_open(sn_nvrtc *n, sn_err *e) {
    if (n->handle) return SN_OK;
    const char *name = sn_nvrtc_lib_name(n);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    bool named = getenv(SN_LIBNVRTC_ENV) && *getenv(SN_LIBNVRTC_ENV);
    char why[512];
    snprintf(why, sizeof why, "%s", h ? "" : dlerror());
    if (!h && !named) { /* not on the loader's path: the toolkit this build was configured with */
        name = SN_CUDA_LIB_DIR "/" SN_LIBNVRTC_DEFAULT;
        h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h)
        return sn_fail(e, SN_ERR_DEVICE, "%s (install the CUDA toolkit's NVRTC (%s) or add its "
                       "lib64 folder to LD_LIBRARY_PATH; or name the library with %s=PATH)", why,
                       SN_LIBNVRTC_DEFAULT, SN_LIBNVRTC_ENV);
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(h, syms[i].symbol);
        if (!f) {
            dlclose(h);
            return sn_fail(e, SN_ERR_DEVICE, "%s has no symbol %s: the library is older than "
                           "sinter needs (CUDA 12 or newer); update it", name, syms[i].symbol);
        }
        memcpy((char *)n + syms[i].offset, &f, sizeof f);
    }
    snprintf(n->path, sizeof n->path, "%s", name);
    n->handle = h;
    return SN_OK;
}

void sn_nvrtc_close(sn_nvrtc *n) {
    if (n->handle) dlclose(n->handle);
    memset(n, 0, sizeof *n);
}

/* NVRTC_CHECK(n, fn, args...): calls n->fn(args...); on failure records file:line, the call,
 * NVRTC's error text, what was compiled and NVRTC's log (kept whole in out->log), then jumps to
 * `done` with st set. The one checking macro of every NVRTC call. */
static sn_status nvrtc_fail(const sn_nvrtc *n, sn_err *e, const char *file, int line,
                            const char *call, nvrtcResult r, nvrtcProgram prog, const char *name,
                            int arch, sn_cuda_module *out) {
    size_t size = 0;
    if (prog && !out->log && n->nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 0) {
        out->log = malloc(size);
        if (out->log && n->nvrtcGetProgramLog(prog, out->log) != NVRTC_SUCCESS) out->log[0] = '\0';
    }
    const char *log = out->log && out->log[0] ? out->log : "(empty)\n";
    const char *text = n->nvrtcGetErrorString ? n->nvrtcGetErrorString(r) : NULL;
    return sn_fail(e, r == NVRTC_ERROR_OUT_OF_MEMORY ? SN_ERR_OOM : SN_ERR_DEVICE,
                   "%s:%d: %s: %s, compiling %s for sm_%d (generated CUDA C that does not compile "
                   "is a bug in sinter's code generator; please report it with this log)\nNVRTC "
                   "log:\n%s", file, line, call, text ? text : "NVRTC error", name, arch, log);
}

#define NVRTC_CHECK(n, fn, ...)                                                                    \
    do {                                                                                           \
        nvrtcResult r_ = (n)->fn(__VA_ARGS__);                                                     \
        if (r_ != NVRTC_SUCCESS) {                                                                 \
            st = nvrtc_fail((n), e, __FILE__, __LINE__, #fn, r_, prog, name, arch, out);           \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

sn_status sn_nvrtc_version(sn_nvrtc *n, int *major, int *minor, sn_err *e) {
    sn_status st = sn_nvrtc_open(n, e);
    if (st) return st;
    nvrtcResult r = n->nvrtcVersion(major, minor);
    if (r == NVRTC_SUCCESS) return SN_OK;
    const char *text = n->nvrtcGetErrorString(r);
    return sn_fail(e, SN_ERR_DEVICE, "%s:%d: nvrtcVersion: %s (%s)", __FILE__, __LINE__,
                   text ? text : "NVRTC error", sn_nvrtc_lib_name(n));
}

int sn_nvrtc_options(int arch, char gpu[48], const char **opts) {
    int k = 0;
    /* sm_90 as sm_90a: the warpgroup MMA (wgmma) is an arch-specific feature; the machine code
     * runs on the same devices (H100, H200), not on later architectures, which get their own */
    snprintf(gpu, 48, "--gpu-architecture=sm_%d%s", arch, arch == 90 ? "a" : "");
    opts[k++] = gpu;
#ifdef SN_CUDA_INCLUDE
    opts[k++] = "--include-path=" SN_CUDA_INCLUDE;
#endif
    opts[k++] = "--std=c++17";
    opts[k++] = "--ptxas-options=-v"; /* the report sn_ptxas_parse reads */
    return k;
}

sn_status sn_nvrtc_compile_with(sn_nvrtc *n, const char *src, const char *name, int arch,
                                sn_cuda_module *out, sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    if (arch < 75)
        return sn_fail(e, SN_ERR_INVALID, "NVRTC: sm_%d is too old: sinter's CUDA kernels need "
                       "sm_75 (Turing) or newer", arch);
    sn_status st = sn_nvrtc_open(n, e);
    if (st) return st;
    nvrtcProgram prog = NULL;
    const char *headers[] = {sn_cuda_prelude()}, *header_names[] = {SN_CUDA_PRELUDE_NAME};
    char gpu[48];
    const char *opts[8];
    int n_opts = sn_nvrtc_options(arch, gpu, opts);
    size_t size = 0;
    NVRTC_CHECK(n, nvrtcCreateProgram, &prog, src, name, 1, headers, header_names);
    NVRTC_CHECK(n, nvrtcCompileProgram, prog, n_opts, opts);
    NVRTC_CHECK(n, nvrtcGetProgramLogSize, prog, &size);
    if (!(out->log = sn_malloc(size + 1, "NVRTC's log", e))) {
        st = SN_ERR_OOM;
        goto done;
    }
    out->log[0] = '\0';
    if (size) NVRTC_CHECK(n, nvrtcGetProgramLog, prog, out->log);
    out->log[size] = '\0';
    NVRTC_CHECK(n, nvrtcGetCUBINSize, prog, &out->cubin_size);
    if (!(out->cubin = sn_malloc(out->cubin_size ? out->cubin_size : 1, "a compiled CUDA module", e))) {
        st = SN_ERR_OOM;
        goto done;
    }
    NVRTC_CHECK(n, nvrtcGetCUBIN, prog, out->cubin);
    out->n_info = sn_ptxas_parse(out->log, NULL, 0);
    if (!(out->info = sn_calloc((size_t)out->n_info + 1, sizeof *out->info, "ptxas's report", e))) {
        st = SN_ERR_OOM;
        goto done;
    }
    sn_ptxas_parse(out->log, out->info, out->n_info);
done:
    if (prog) n->nvrtcDestroyProgram(&prog);
    return st;
}

/* The process's NVRTC for sn_nvrtc_compile: opened at the first call that finds it and kept
 * open (as the driver is); a library handle, not compiler state. */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static sn_nvrtc shared;

sn_status sn_nvrtc_compile(const char *src, const char *name, int arch, sn_cuda_module *out,
                           sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    pthread_mutex_lock(&shared_lock);
    sn_status st = sn_nvrtc_open(&shared, e);
    pthread_mutex_unlock(&shared_lock);
    if (st)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cannot compile %s for sm_%d: NVRTC is not "
                       "available: %.500s", name, arch, e->msg);
    return sn_nvrtc_compile_with(&shared, src, name, arch, out, e);
}
