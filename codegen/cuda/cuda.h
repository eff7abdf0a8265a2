/* cuda.h: the CUDA backend's code generation: kernel descriptions rendered as CUDA C text, and
 * that text compiled by NVRTC. Convention: every generated source includes the one prelude
 * (SN_CUDA_PRELUDE_NAME), the only place that knows whether the text runs on a GPU or a CPU.
 *
 *     char *src;
 *     if (sn_cuda_render(&k, 1, &src, &e)) ...               // k: an SN_KER_POINTWISE kernel
 *     sn_cuda_module m;
 *     if (sn_nvrtc_compile(src, "k.cu", 90, &m, &e)) ...      // a CUBIN for sm_90, ptxas report
 *     printf("%s: %d registers\n", m.info[0].name, m.info[0].registers);
 *     sn_cuda_module_free(&m);
 *     free(src);
 */
#ifndef SN_CUDA_H
#define SN_CUDA_H

#include "program/kernel.h"

/* ---- cuda_emit.c: the text emitter and the prelude ---- */

/* Source text built line by line. A line ending in '{' opens a block (the lines after it are
 * indented one level more), a line starting with '}' closes one; sn_cu_finish asserts that every
 * block opened was closed. Out of memory is sticky: later appends do nothing and sn_cu_finish
 * returns NULL. */
typedef struct {
    char *buf;
    size_t len, cap;
    int depth; /* blocks open */
    size_t oom; /* the size of an allocation that failed, 0: none */
} sn_cu_text;

void sn_cu_emitf(sn_cu_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends without a newline or indentation (the middle of a line). */
void sn_cu_appendf(sn_cu_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Checks that the blocks balance; returns the text (malloc'd, the caller frees), or NULL when
 * memory ran out while it was built. */
char *sn_cu_finish(sn_cu_text *t);

/* The name generated sources include, and the prelude's text (see cuda_prelude.h). */
#define SN_CUDA_PRELUDE_NAME "sinter_prelude.h"
const char *sn_cuda_prelude(void);

/* ---- cuda_pointwise.c: pointwise kernels ---- */

enum { SN_CUDA_PW_BLOCK = 256, SN_CUDA_PW_MAX_GRID = 4096 };

typedef struct {
    unsigned grid[3], block[3];
} sn_cuda_dims;

/* The grid and block a pointwise kernel is launched with: blocks of SN_CUDA_PW_BLOCK threads, at
 * most SN_CUDA_PW_MAX_GRID of them (a grid-stride loop covers the rest). */
sn_cuda_dims sn_cuda_pointwise_dims(const sn_kernel *k);

/* Renders kernels ks[0..n) (SN_KER_POINTWISE, f32/bf16/i32 values) into one translation unit:
 * the prelude's #include, then per kernel `extern "C" __global__ void <k->name>(out0.., in0..)`
 * taking one typed pointer per arg in k->args order, then SN_HOST_STUB(<name>). *src is malloc'd.
 * A kind or dtype this backend does not generate is SN_ERR_UNSUPPORTED, naming the kernel. */
sn_status sn_cuda_render(const sn_kernel *const *ks, int n, char **src, sn_err *e);

/* ---- nvrtc.c: compiling with NVRTC ---- */

/* What ptxas reported about one kernel (--ptxas-options=-v). */
typedef struct {
    char name[64];
    int registers;
    int spill_store_bytes, spill_load_bytes;
    int stack_bytes;
    int shared_bytes;
} sn_cuda_kernel_info;

typedef struct {
    int arch;        /* 80: sm_80 */
    char *cubin;     /* the machine code (malloc'd) */
    size_t cubin_size;
    char *log;       /* NVRTC's program log, ptxas report included (malloc'd; "" if none) */
    int n_info;
    sn_cuda_kernel_info *info; /* per kernel, parsed from the log (malloc'd) */
} sn_cuda_module;

/* Compiles src (named `name` in messages) for sm_<arch> (75 and up) into a CUBIN, with the ptxas
 * report parsed. The prelude is supplied as SN_CUDA_PRELUDE_NAME. A compile error is
 * SN_ERR_DEVICE with NVRTC's log in the message (out->log keeps all of it); a build without the
 * CUDA toolkit is SN_ERR_UNSUPPORTED. Free *out with sn_cuda_module_free, success or not. */
sn_status sn_nvrtc_compile(const char *src, const char *name, int arch, sn_cuda_module *out,
                           sn_err *e);
void sn_cuda_module_free(sn_cuda_module *m);

/* Parses a ptxas -v report into at most cap entries; returns how many kernels it found. */
int sn_ptxas_parse(const char *log, sn_cuda_kernel_info *out, int cap);

/* The info of kernel `name` in m, or NULL. */
const sn_cuda_kernel_info *sn_cuda_module_info(const sn_cuda_module *m, const char *name);

#endif
