/* emit_cuda.c: `sinter graph ... --emit-cuda DIR`: the program's CUDA C as the one translation
 * unit NVRTC gets (DIR/program.cu, with the header it includes, DIR/sinter_prelude.h: nvcc
 * compiles the two as they are), the machine code NVRTC made of it (DIR/program.cubin: what
 * tools/sass disassembles) and, per kernel, what ptxas reported (DIR/ptxas.txt: the function
 * that launches it, registers, shared memory, spills, stack; its launch dims). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/cuda/cuda.h"
#include "cli.h"

static FILE *open_in(const char *dir, const char *name, char *path, size_t len) {
    snprintf(path, len, "%s/%s", dir, name);
    return fopen(path, "w");
}

/* DIR/name holding the `len` bytes at data; false (with the message) where it cannot. */
static bool write_file(const char *dir, const char *name, const void *data, size_t len) {
    char path[4096];
    FILE *f = open_in(dir, name, path, sizeof path);
    if (f && fwrite(data, 1, len, f) == len && !fclose(f)) return true;
    fprintf(stderr, "sinter: cannot write %s: %s\n", path, strerror(errno));
    if (f) fclose(f);
    return false;
}

int cli_emit_cuda(const sn_program *p, const char *dir, int arch) {
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "sinter: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    sn_target t = sn_target_cuda(arch);
    sn_cuda_source cs;
    sn_err e;
    const sn_kernel **ks = malloc(sizeof *ks * ((size_t)p->n_kernels + 1));
    int *at = malloc(sizeof *at * ((size_t)p->n_kernels + 1)), n = 0;
    if (!ks || !at) {
        free(ks);
        free(at);
        fprintf(stderr, "sinter: out of memory\n");
        return 1;
    }
    for (int i = 0; i < p->n_kernels; i++) at[i] = n, ks[n++] = p->kernels[i];
    sn_status rs = sn_cuda_render(ks, n, &t, &cs, &e);
    free(ks);
    if (rs) {
        free(at);
        fprintf(stderr, "sinter: %s\n", e.msg);
        return 1;
    }
    char path[4096];
    const char *prelude = sn_cuda_prelude();
    if (!write_file(dir, "program.cu", cs.src, strlen(cs.src)) ||
        !write_file(dir, "sinter_prelude.h", prelude, strlen(prelude))) {
        sn_cuda_source_free(&cs);
        free(at);
        return 1;
    }
    snprintf(path, sizeof path, "%s/program.cu", dir);
    printf("# %s: %d kernels as %d functions (%d GEMMs are library calls)\n", path,
           cs.n_kernels - cs.n_skipped, cs.n_functions, cs.n_skipped);
    sn_cuda_module m;
    FILE *f;
    sn_status st = sn_nvrtc_compile(cs.src, "program.cu", arch, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) { /* no toolkit: the source alone */
        printf("# %s\n", e.msg);
    } else if (st) {
        fprintf(stderr, "sinter: %s\n", e.msg);
    } else if (!write_file(dir, "program.cubin", m.cubin, m.cubin_size)) {
        st = SN_ERR_IO;
    } else if (!(f = open_in(dir, "ptxas.txt", path, sizeof path))) {
        fprintf(stderr, "sinter: cannot write %s: %s\n", path, strerror(errno));
        st = SN_ERR_IO;
    } else {
        fprintf(f, "# sm_%d: kernel function registers shared_bytes spill_stores spill_loads "
                   "stack_bytes grid block dynamic_shared\n", arch);
        for (int i = 0; i < p->n_kernels; i++) {
            const sn_kernel *k = p->kernels[i];
            const char *fn = at[i] >= 0 ? cs.fn[at[i]] : "";
            const sn_cuda_kernel_info *in = fn[0] ? sn_cuda_module_info(&m, fn) : NULL;
            sn_cuda_dims d = sn_cuda_launch_dims(k, &t);
            if (!in) {
                fprintf(f, "%s - (%s)\n", k->name, sn_kernel_kind_name(k->kind));
                continue;
            }
            fprintf(f, "%s %s %d %d %d %d %d %ux%ux%u %ux%ux%u %u\n", k->name, fn,
                    in->registers, in->shared_bytes, in->spill_store_bytes, in->spill_load_bytes,
                    in->stack_bytes, d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1],
                    d.block[2], d.shared_bytes);
        }
        if (fclose(f)) st = SN_ERR_IO;
        printf("# %s: the ptxas report of each kernel for sm_%d\n", path, arch);
    }
    sn_cuda_module_free(&m);
    sn_cuda_source_free(&cs);
    free(at);
    return st && st != SN_ERR_UNSUPPORTED ? 1 : 0;
}
