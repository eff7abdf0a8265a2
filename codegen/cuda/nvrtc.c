/* nvrtc.c: CUDA C text to a CUBIN with NVRTC, and the ptxas report read back (registers,
 * spills, shared memory per kernel). Convention: every NVRTC call goes through NVRTC_CHECK, which
 * records file:line, the call, NVRTC's error text and the program log, then jumps to `done`. */
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

#ifdef SN_HAVE_NVRTC

#include <nvrtc.h>

/* Records a failed NVRTC call: where, which, NVRTC's words, and the log (kept whole in out). */
static sn_status nvrtc_fail(sn_err *e, const char *file, int line, const char *call,
                            nvrtcResult r, nvrtcProgram prog, const char *name, int arch,
                            sn_cuda_module *out) {
    size_t size = 0;
    if (prog && !out->log && nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 0) {
        out->log = malloc(size);
        if (out->log && nvrtcGetProgramLog(prog, out->log) != NVRTC_SUCCESS) out->log[0] = '\0';
    }
    const char *log = out->log && out->log[0] ? out->log : "(empty)\n";
    return sn_fail(e, SN_ERR_DEVICE, "%s:%d: %s: %s, compiling %s for sm_%d (generated CUDA C "
                   "that does not compile is a bug in sinter's code generator; please report "
                   "it with this log)\nNVRTC log:\n%s", file, line, call, nvrtcGetErrorString(r),
                   name, arch, log);
}

#define NVRTC_CHECK(call)                                                                          \
    do {                                                                                           \
        nvrtcResult r_ = (call);                                                                   \
        if (r_ != NVRTC_SUCCESS) {                                                                 \
            st = nvrtc_fail(e, __FILE__, __LINE__, #call, r_, prog, name, arch, out);              \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

sn_status sn_nvrtc_compile(const char *src, const char *name, int arch, sn_cuda_module *out,
                           sn_err *e) {
    *out = (sn_cuda_module){.arch = arch};
    if (arch < 75)
        return sn_fail(e, SN_ERR_INVALID, "NVRTC: sm_%d is too old: sinter's CUDA kernels need "
                       "sm_75 (Turing) or newer", arch);
    sn_status st = SN_OK;
    nvrtcProgram prog = NULL;
    const char *headers[] = {sn_cuda_prelude()}, *header_names[] = {SN_CUDA_PRELUDE_NAME};
    char gpu[48];
    snprintf(gpu, sizeof gpu, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = {gpu, "--include-path=" SN_CUDA_INCLUDE, "--std=c++17",
                          "--ptxas-options=-v"};
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    size_t size = 0;
    NVRTC_CHECK(nvrtcCreateProgram(&prog, src, name, 1, headers, header_names));
    NVRTC_CHECK(nvrtcCompileProgram(prog, n_opts, opts));
    NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &size));
    if (!(out->log = sn_malloc(size + 1, "NVRTC's log", e))) {
        st = SN_ERR_OOM;
        goto done;
    }
    out->log[0] = '\0';
    if (size) NVRTC_CHECK(nvrtcGetProgramLog(prog, out->log));
    NVRTC_CHECK(nvrtcGetCUBINSize(prog, &out->cubin_size));
    if (!(out->cubin = sn_malloc(out->cubin_size, "a compiled CUDA module", e))) {
        st = SN_ERR_OOM;
        goto done;
    }
    NVRTC_CHECK(nvrtcGetCUBIN(prog, out->cubin));
    out->n_info = sn_ptxas_parse(out->log, NULL, 0);
    if (!(out->info = sn_calloc((size_t)out->n_info + 1, sizeof *out->info, "ptxas's report", e))) {
        st = SN_ERR_OOM;
        goto done;
    }
    sn_ptxas_parse(out->log, out->info, out->n_info);
done:
    if (prog) nvrtcDestroyProgram(&prog);
    return st;
}

#else /* built without the CUDA toolkit */

sn_status sn_nvrtc_compile(const char *src, const char *name, int arch, sn_cuda_module *out,
                           sn_err *e) {
    (void)src;
    *out = (sn_cuda_module){.arch = arch};
    return sn_fail(e, SN_ERR_UNSUPPORTED, "cannot compile %s for sm_%d: sinter was built "
                   "without the CUDA toolkit, so NVRTC is not available (install the toolkit, or "
                   "point meson at one with -Dtoolkit_dir=DIR, and rebuild)", name, arch);
}

#endif
