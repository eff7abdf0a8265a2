/* standin_nvrtc.c: the stand-in NVRTC (SN_LIBNVRTC): every call goes to the real NVRTC (opened
 * with dlopen: SN_STANDIN_REAL_NVRTC, else the toolkit's), so compile errors, registers and
 * spills are real; the "CUBIN" it returns is the stand-in image (standin.h): a header, the CUDA C
 * text and the real CUBIN, which the stand-in libcuda runs on the SIMT simulator. Injected
 * failures: SN_STANDIN_FAIL_NVRTC=TEXT fails the compile of any source containing TEXT
 * (NVRTC_ERROR_COMPILATION, the log saying why), SN_STANDIN_CRASH_NVRTC=TEXT dies of SIGSEGV in it.
 * Convention: a program handle is this file's wrapper around the real one. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

#ifndef SN_STANDIN_REAL_NVRTC
#define SN_STANDIN_REAL_NVRTC "libnvrtc.so.13"
#endif

SN_CUDA_NVRTC_API(SN_STANDIN_DECLARE)

static struct {
    void *h;
#define FIELD(ret, name, sym, params) ret(*name) params;
    SN_CUDA_NVRTC_API(FIELD)
#undef FIELD
} real;

enum { NVRTC_ERROR_INVALID_INPUT = 3, NVRTC_ERROR_INVALID_PROGRAM = 4,
       NVRTC_ERROR_COMPILATION = 6, NVRTC_ERROR_INTERNAL_ERROR = 11 };

/* Opens the real NVRTC once; false (said on stderr) when it or a symbol is missing. */
static bool load(void) {
    if (real.h) return true;
    const char *path = getenv("SN_STANDIN_REAL_NVRTC");
    if (!path || !*path) path = SN_STANDIN_REAL_NVRTC;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        sn_standin_say("the stand-in NVRTC needs the real one: %s", dlerror());
        return false;
    }
#define LOOK(ret, name, sym, params)                                                               \
    if (!(*(void **)&real.name = dlsym(h, sym))) {                                                 \
        sn_standin_say("%s has no %s", path, sym);                                                 \
        return false;                                                                              \
    }
    SN_CUDA_NVRTC_API(LOOK)
#undef LOOK
    real.h = h;
    return true;
}

struct _nvrtcProgram {
    nvrtcProgram prog; /* the real one */
    char *src;
    unsigned arch; /* from --gpu-architecture=sm_NN */
    char log[256]; /* an injected failure's log, "" if none */
};

/* Whether the environment variable names text that src contains. */
static bool injected(const char *var, const char *src) {
    const char *v = getenv(var);
    return v && *v && strstr(src, v);
}

const char *nvrtcGetErrorString(nvrtcResult result) {
    return load() ? real.nvrtcGetErrorString(result) : "NVRTC_ERROR_INTERNAL_ERROR";
}

nvrtcResult nvrtcVersion(int *major, int *minor) {
    return load() ? real.nvrtcVersion(major, minor) : NVRTC_ERROR_INTERNAL_ERROR;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames) {
    if (!load()) return NVRTC_ERROR_INTERNAL_ERROR;
    if (!prog || !src) return NVRTC_ERROR_INVALID_INPUT;
    struct _nvrtcProgram *p = calloc(1, sizeof *p);
    if (!p || !(p->src = strdup(src))) {
        free(p);
        return 1; /* NVRTC_ERROR_OUT_OF_MEMORY */
    }
    nvrtcResult r = real.nvrtcCreateProgram(&p->prog, src, name, numHeaders, headers, includeNames);
    if (r) {
        free(p->src);
        free(p);
        return r;
    }
    *prog = p;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
    if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
    nvrtcResult r = real.nvrtcDestroyProgram(&(*prog)->prog);
    free((*prog)->src);
    free(*prog);
    *prog = NULL;
    return r;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    for (int i = 0; i < numOptions; i++) {
        const char *o = options[i];
        if (!strncmp(o, "--gpu-architecture=sm_", 22)) prog->arch = (unsigned)atoi(o + 22);
        else if (!strncmp(o, "-arch=sm_", 9)) prog->arch = (unsigned)atoi(o + 9);
    }
    if (!prog->arch) {
        sn_standin_say("nvrtcCompileProgram: the stand-in needs --gpu-architecture=sm_NN");
        return NVRTC_ERROR_INVALID_INPUT;
    }
    if (injected("SN_STANDIN_CRASH_NVRTC", prog->src)) {
        sn_standin_say("nvrtcCompileProgram: crashing, as SN_STANDIN_CRASH_NVRTC asks");
        raise(SIGSEGV);
    }
    if (injected("SN_STANDIN_FAIL_NVRTC", prog->src)) {
        snprintf(prog->log, sizeof prog->log, "sn_standin: the source contains \"%s\", so it "
                 "fails to compile, as SN_STANDIN_FAIL_NVRTC asks\n", getenv("SN_STANDIN_FAIL_NVRTC"));
        return NVRTC_ERROR_COMPILATION;
    }
    return real.nvrtcCompileProgram(prog->prog, numOptions, options);
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    if (prog->log[0]) {
        *logSizeRet = strlen(prog->log) + 1;
        return NVRTC_SUCCESS;
    }
    return real.nvrtcGetProgramLogSize(prog->prog, logSizeRet);
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    if (prog->log[0]) {
        memcpy(log, prog->log, strlen(prog->log) + 1);
        return NVRTC_SUCCESS;
    }
    return real.nvrtcGetProgramLog(prog->prog, log);
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    size_t cubin = 0;
    nvrtcResult r = real.nvrtcGetCUBINSize(prog->prog, &cubin);
    if (!r) *cubinSizeRet = sizeof(sn_standin_image) + strlen(prog->src) + 1 + cubin;
    return r;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    size_t n = 0, src = strlen(prog->src) + 1;
    nvrtcResult r = real.nvrtcGetCUBINSize(prog->prog, &n);
    if (!r) r = real.nvrtcGetCUBIN(prog->prog, cubin + sizeof(sn_standin_image) + src);
    if (r) return r;
    sn_standin_image h = {.arch = prog->arch, .src_bytes = src, .cubin_bytes = n};
    memcpy(h.magic, SN_STANDIN_MAGIC, sizeof h.magic);
    memcpy(cubin, &h, sizeof h);
    memcpy(cubin + sizeof h, prog->src, src);
    return NVRTC_SUCCESS;
}
