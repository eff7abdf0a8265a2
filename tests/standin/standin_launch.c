/* standin_launch.c: the stand-in libcuda's modules and launches. A module is an image from the
 * stand-in NVRTC (standin.h): its CUDA C text is loaded into the SIMT simulator and its kernels'
 * parameter lists are read from the text, so a launch knows each parameter's size and which are
 * pointers, and its __launch_bounds__. Convention: every pointer parameter must lie in live device memory and is mapped to
 * host memory for the simulator; nothing else a launch is given is trusted. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "standin_driver.h"

enum { MAX_PARAMS = 64, SHARED_DEFAULT = 48 * 1024 };

struct si_function {
    struct CUmod_st *m;
    char name[128];
    int n;
    size_t size[MAX_PARAMS], offset[MAX_PARAMS], total;
    bool pointer[MAX_PARAMS];
    int max_dynamic_shared; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int max_threads;        /* __launch_bounds__, else 1024 */
};
struct CUmod_st {
    sn_sim_module *sim;
    si_function *fns;
    int n_fns;
    int arch;
};

int si_function_params(const si_function *f, size_t *offsets, size_t *total) {
    memcpy(offsets, f->offset, (size_t)f->n * sizeof *offsets);
    *total = f->total;
    return f->n;
}

/* ---- the kernels' parameter lists, read from the text ---- */

/* src without comments (each replaced by a space). */
static char *strip_comments(const char *src) {
    char *out = malloc(strlen(src) + 1), *o = out;
    if (!out) return NULL;
    for (const char *s = src; *s;) {
        if (s[0] == '/' && s[1] == '*') {
            const char *end = strstr(s + 2, "*/");
            s = end ? end + 2 : s + strlen(s);
            *o++ = ' ';
        } else if (s[0] == '/' && s[1] == '/') {
            while (*s && *s != '\n') s++;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

static const char *skip_space(const char *s) {
    while (isspace((unsigned char)*s)) s++;
    return s;
}

/* The size of a parameter declared as text [s, end), or 0 when its type is not known. */
static size_t param_size(const char *s, const char *end, bool *pointer) {
    *pointer = memchr(s, '*', (size_t)(end - s)) != NULL;
    if (*pointer) return 8;
    static const struct {
        const char *word;
        size_t size;
    } types[] = {{"double", 8}, {"long", 8}, {"int64_t", 8}, {"uint64_t", 8}, {"size_t", 8},
                 {"float", 4}, {"int", 4}, {"unsigned", 4}, {"int32_t", 4}, {"uint32_t", 4},
                 {"short", 2}, {"__half", 2}, {"__nv_bfloat16", 2}, {"char", 1}, {"bool", 1}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        size_t n = strlen(types[i].word);
        for (const char *p = s; p + n <= end; p++)
            if (!memcmp(p, types[i].word, n) && (p == s || (!isalnum((unsigned char)p[-1]) && p[-1] != '_')) &&
                (p + n == end || (!isalnum((unsigned char)p[n]) && p[n] != '_')))
                return types[i].size;
    }
    return 0;
}

/* Reads one kernel's name and parameters after "__global__"; returns where it ended or NULL. */
static const char *parse_kernel(const char *s, si_function *f) {
    s = skip_space(s);
    if (strncmp(s, "void", 4)) return NULL;
    s = skip_space(s + 4);
    f->max_threads = 1024;
    if (!strncmp(s, "__launch_bounds__", 17)) {
        const char *open = strchr(s, '(');
        if (open) f->max_threads = atoi(open + 1);
        s = strchr(s, ')');
        if (!s) return NULL;
        s = skip_space(s + 1);
    }
    size_t len = 0;
    while (isalnum((unsigned char)s[len]) || s[len] == '_') len++;
    if (!len || len >= sizeof f->name) return NULL;
    memcpy(f->name, s, len);
    f->name[len] = '\0';
    s = skip_space(s + len);
    if (*s != '(') return NULL;
    s++;
    f->n = 0;
    f->total = 0;
    if (*skip_space(s) == ')') return skip_space(s) + 1;
    for (;;) {
        const char *end = s;
        int depth = 0;
        while (*end && (depth || (*end != ',' && *end != ')'))) {
            depth += *end == '(' || *end == '<';
            depth -= *end == ')' || *end == '>';
            end++;
        }
        if (!*end || f->n == MAX_PARAMS) return NULL;
        const char *a = skip_space(s);
        if (end - a == 4 && !strncmp(a, "void", 4) && *end == ')' && f->n == 0) return end + 1;
        size_t size = param_size(a, end, &f->pointer[f->n]);
        if (!size) return NULL;
        f->total = (f->total + size - 1) / size * size;
        f->size[f->n] = size;
        f->offset[f->n++] = f->total;
        f->total += size;
        if (*end == ')') return end + 1;
        s = end + 1;
    }
}

static CUresult parse_kernels(struct CUmod_st *m, const char *src) {
    char *text = strip_comments(src);
    if (!text) return CUDA_ERROR_OUT_OF_MEMORY;
    int cap = 0;
    for (const char *s = text; (s = strstr(s, "__global__")); s += 10) cap++;
    m->fns = calloc((size_t)cap + 1, sizeof *m->fns);
    CUresult r = m->fns ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (const char *s = text; !r && (s = strstr(s, "__global__")); s += 10) {
        si_function *f = &m->fns[m->n_fns];
        const char *end = parse_kernel(s + 10, f);
        if (!end) {
            sn_standin_say("cuModuleLoadData: cannot read the parameters of the kernel at \"%.60s\"",
                           s);
            r = SI_INVALID_IMAGE;
            break;
        }
        f->m = m;
        m->n_fns++;
    }
    free(text);
    return r;
}

/* ---- modules ---- */

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    CUresult r = si_need_ctx("cuModuleLoadData");
    if (r) return r;
    if (!image) return CUDA_ERROR_INVALID_VALUE;
    const sn_standin_image *h = image;
    if (si.no_binary) {
        sn_standin_say("cuModuleLoadData: no binary for the GPU, as SN_STANDIN_NO_BINARY asks");
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    if (memcmp(h->magic, SN_STANDIN_MAGIC, sizeof h->magic) != 0) {
        bool elf = !memcmp(image, "\177ELF", 4);
        sn_standin_say("cuModuleLoadData: %s: the stand-in runs only images written by its own "
                       "NVRTC (SN_LIBNVRTC=.../libsn_standin_nvrtc.so)",
                       elf ? "a real CUBIN" : "not an image");
        return elf ? CUDA_ERROR_NO_BINARY_FOR_GPU : SI_INVALID_IMAGE;
    }
    const char *src = (const char *)(h + 1);
    if (h->src_bytes == 0 || src[h->src_bytes - 1] != '\0') return SI_INVALID_IMAGE;
    if ((int)h->arch / 10 != si.sm / 10 || (int)h->arch % 10 > si.sm % 10) {
        sn_standin_say("cuModuleLoadData: the image is for sm_%u and the device is sm_%d",
                       h->arch, si.sm);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->arch = (int)h->arch;
    sn_err e;
    if ((r = parse_kernels(m, src)) == CUDA_SUCCESS &&
        (si.profile ? sn_sim_module_load_profiled : sn_sim_module_load)(src, &m->sim, &e)) {
        sn_standin_say("cuModuleLoadData: the simulator cannot load the text: %s", e.msg);
        r = SI_INVALID_IMAGE;
    }
    if (r) {
        free(m->fns);
        free(m);
        return r;
    }
    *module = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
    if (!hmod) return SI_INVALID_HANDLE;
    sn_sim_module_free(hmod->sim);
    free(hmod->fns);
    free(hmod);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    CUresult r = si_need_ctx("cuModuleGetFunction");
    if (r) return r;
    if (!hmod || !name) return !hmod ? SI_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < hmod->n_fns; i++)
        if (!strcmp(hmod->fns[i].name, name) && sn_sim_has_kernel(hmod->sim, name)) {
            *hfunc = (CUfunction)&hmod->fns[i];
            return CUDA_SUCCESS;
        }
    sn_standin_say("cuModuleGetFunction: the module has no kernel %s", name);
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    CUresult r = si_need_ctx("cuFuncSetAttribute");
    if (r) return r;
    si_function *f = (si_function *)hfunc;
    if (!f) return SI_INVALID_HANDLE;
    if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        sn_standin_say("cuFuncSetAttribute: attribute %d is not one the stand-in knows", attrib);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (value < 0 || value > si_shared_optin()) {
        sn_standin_say("cuFuncSetAttribute: %d bytes of dynamic shared memory; sm_%d allows %d",
                       value, si.sm, si_shared_optin());
        return CUDA_ERROR_INVALID_VALUE;
    }
    f->max_dynamic_shared = value;
    return CUDA_SUCCESS;
}

/* ---- launches ---- */

/* SN_STANDIN_PROFILE: the launch's profile (sim/sim.h) as a line of FILE, appended, after a
 * header when the file is empty: the kernel, its grid and block, the counts, the verdicts. */
static void profile_line(const si_function *f, const unsigned grid[3], const unsigned block[3],
                         const sn_sim_profile *p) {
    FILE *out = fopen(si.profile, "a");
    if (!out) {
        sn_standin_say("SN_STANDIN_PROFILE=%s cannot be opened for appending", si.profile);
        return;
    }
    if (ftell(out) == 0)
        fprintf(out, "kernel\tgrid\tblock\tld_requests\tld_sectors\tld_bytes\tst_requests\t"
                "st_sectors\tst_bytes\tdistinct_sectors\tsh_requests\tsh_wavefronts\t"
                "sh_ideal\tshfl\tvote\tmma\tldmatrix\twgmma\tcp_async\tbarriers\tflags\n");
    char flags[512];
    sn_sim_profile_flags(p, flags, sizeof flags);
    fprintf(out, "%s\t%ux%ux%u\t%ux%ux%u\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t"
            "%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%s\n", f->name, grid[0], grid[1],
            grid[2], block[0], block[1], block[2], p->ld_requests, p->ld_sectors, p->ld_bytes,
            p->st_requests, p->st_sectors, p->st_bytes, p->footprint_sectors, p->sh_requests,
            p->sh_wavefronts, p->sh_ideal, p->shfl, p->vote, p->mma, p->ldmatrix, p->wgmma,
            p->cp_async, p->barriers, *flags ? flags : "-");
    fclose(out);
}

static void *map_pointer(void *ctx, const void *p) {
    return si_host((CUdeviceptr)(uintptr_t)p, 0, (const char *)ctx);
}

CUresult si_launch_now(si_function *f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, void **params) {
    si.launches++;
    if (si.fail_launch && si.launches == si.fail_launch) {
        sn_standin_say("launch #%llu (%s) fails as SN_STANDIN_FAIL_LAUNCH asks",
                       (unsigned long long)si.launches, f->name);
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    if (si.fault_launch && si.launches == si.fault_launch) {
        sn_standin_say("launch #%llu (%s) faults as SN_STANDIN_FAULT_LAUNCH asks: the call "
                       "succeeds, the calls after it fail", (unsigned long long)si.launches,
                       f->name);
        si.sticky = SI_ILLEGAL_ADDRESS;
        return CUDA_SUCCESS;
    }
    for (int i = 0; i < f->n; i++) {
        CUdeviceptr p;
        if (!f->pointer[i]) continue;
        memcpy(&p, params[i], sizeof p);
        if (p && !si_host(p, 0, f->name)) {
            sn_standin_say("%s: parameter %d (0x%llx) is not device memory", f->name, i,
                           (unsigned long long)p);
            return SI_ILLEGAL_ADDRESS;
        }
    }
    sn_sim_opts o = sn_sim_defaults();
    o.shared_limit = f->max_dynamic_shared > SHARED_DEFAULT ? (unsigned)si_shared_optin()
                                                            : SHARED_DEFAULT;
    o.map_pointer = map_pointer;
    o.map_ctx = f->name;
    uint64_t order = sn_standin_env("SN_STANDIN_ORDER", 0); /* 0 forward, 1 reverse, 2 shuffled */
    o.order = order < SN_SIM_ORDER_COUNT ? (sn_sim_order)order : SN_SIM_FORWARD;
    sn_sim_profile prof = {0};
    if (si.profile) o.profile = &prof;
    sn_err e;
    if (sn_sim_launch(f->m->sim, f->name, grid, block, shared, params, &o, &e)) {
        sn_standin_say("%s failed on the simulator: %s", f->name, e.msg);
        si.sticky = CUDA_ERROR_LAUNCH_FAILED; /* a fault ends the context on a GPU */
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    if (si.profile) profile_line(f, grid, block, &prof);
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f_, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
    CUresult r = si_need_ctx("cuLaunchKernel");
    if (r) return r;
    si_function *f = (si_function *)f_;
    if (!f) return SI_INVALID_HANDLE;
    if (extra) {
        sn_standin_say("cuLaunchKernel: `extra` is not supported by the stand-in");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    unsigned long long threads = (unsigned long long)blockDimX * blockDimY * blockDimZ;
    if (!gridDimX || !gridDimY || !gridDimZ || gridDimY > 65535 || gridDimZ > 65535 ||
        gridDimX > 0x7fffffffu || !threads || threads > 1024 || blockDimZ > 64) {
        sn_standin_say("cuLaunchKernel %s: grid (%u, %u, %u) x block (%u, %u, %u) is out of "
                       "bounds", f->name, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                       blockDimZ);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (threads > (unsigned long long)f->max_threads) {
        sn_standin_say("cuLaunchKernel %s: %llu threads a block, more than its "
                       "__launch_bounds__(%d)", f->name, threads, f->max_threads);
        return SI_LAUNCH_OUT_OF_RESOURCES;
    }
    if (sharedMemBytes > SHARED_DEFAULT && (int)sharedMemBytes > f->max_dynamic_shared) {
        sn_standin_say("cuLaunchKernel %s: %u bytes of dynamic shared memory; above 48 KiB the "
                       "kernel needs cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) first "
                       "(it allows %d)", f->name, sharedMemBytes, f->max_dynamic_shared);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (f->n && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
    unsigned char args[MAX_PARAMS * 8];
    for (int i = 0; i < f->n; i++) {
        if (!kernelParams[i]) return CUDA_ERROR_INVALID_VALUE;
        memcpy(args + f->offset[i], kernelParams[i], f->size[i]);
    }
    si_op op = {.kind = SI_KERNEL, .f = f, .grid = {gridDimX, gridDimY, gridDimZ},
                .block = {blockDimX, blockDimY, blockDimZ}, .shared = sharedMemBytes,
                .args = args, .n_args = f->total};
    return si_stream_do(hStream, &op, "cuLaunchKernel");
}
