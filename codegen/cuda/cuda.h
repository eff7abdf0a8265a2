/* cuda.h: the CUDA backend's code generation: kernel descriptions rendered as CUDA C text, and
 * that text compiled by NVRTC. Convention: every generated source includes the one prelude
 * (SN_CUDA_PRELUDE_NAME), the only place that knows whether the text runs on a GPU or a CPU.
 *
 *     sn_target t = sn_target_cuda(90);
 *     sn_cuda_source s;
 *     if (sn_cuda_render(p->kernels, p->n_kernels, &t, &s, &e)) ...  // every kernel but GEMMs
 *     sn_cuda_module m;
 *     if (sn_nvrtc_compile(s.src, "prog.cu", 90, &m, &e)) ...  // one CUBIN, ptxas report
 *     sn_cuda_dims d = sn_cuda_launch_dims(p->kernels[3], &t); // launch s.fn[3] with these
 *     sn_cuda_module_free(&m);
 *     sn_cuda_source_free(&s);
 */
#ifndef SN_CUDA_H
#define SN_CUDA_H

#include "program/kernel.h"
#include "program/program.h"
#include "program/target.h"

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

/* ---- cuda_launch.c: launch dimensions ---- */

enum { SN_CUDA_PW_BLOCK = 256, SN_CUDA_PW_MAX_GRID = 4096 };

typedef struct {
    unsigned grid[3], block[3];
    unsigned shared_bytes; /* dynamic shared memory */
} sn_cuda_dims;

/* The grid, block and dynamic shared memory kernel k is launched with on target t: the one place
 * that decides them, read by the runtime, the stand-in driver and the simulator's tests alike
 * (the rendered text is written for exactly these: __launch_bounds__, shared sizes). GEMMs have
 * none (all zero). Pointwise: blocks of SN_CUDA_PW_BLOCK threads, at most SN_CUDA_PW_MAX_GRID
 * of them (a grid-stride loop covers the rest); row ops: a block per row (cross-entropy's loss
 * and the norm weight gradients: one block); reductions: a block per output tile; gathers: a
 * block per id (forward) or per table row (backward); the optimizer: grid-stride blocks (the
 * squared norm: a block per SN_SQNORM_BLOCK elements; the clip: one block). */
sn_cuda_dims sn_cuda_launch_dims(const sn_kernel *k, const sn_target *t);

/* ---- cuda_render.c: kernels to one translation unit ---- */

/* The CUDA C of a set of kernels: one translation unit (the prelude's #include, the shared
 * device functions, then each distinct kernel once) and which function launches each kernel. */
typedef struct {
    char *src;            /* the text NVRTC and the simulator get (malloc'd) */
    int n_kernels;        /* kernels given */
    int n_functions;      /* distinct __global__ functions in src */
    int n_skipped;        /* kernels given that have no function here (GEMMs) */
    char (*fn)[64];       /* [n_kernels]: the function kernel i launches; "" for a GEMM */
    int *leader;          /* [n_kernels]: the kernel whose function kernel i launches (i for the
                             first of its text); -1 for a GEMM */
    size_t *fn_bytes;     /* [n_kernels]: the body of the function kernel i leads; 0 if none */
    char **text;          /* [n_kernels]: that function as src has it (comments, body, host
                             stub); NULL if none */
} sn_cuda_source;

/* Renders kernels ks[0..n) for target t into one translation unit. Each kernel becomes
 * `extern "C" __global__ void <name>(out0.., in0..)` taking one typed pointer per arg in
 * k->args order, then SN_HOST_STUB(<name>); kernels whose text differs only in names (node ids,
 * their own name) share the function of the first of them, named after it, and are launched
 * with their own args: out->fn[i] names kernel i's function. GEMMs are skipped (the runtime
 * calls a library). Buffers must be 16-byte aligned (float4 accesses). A kind or dtype this
 * backend does not generate is SN_ERR_UNSUPPORTED naming the kernel; *out is then empty. */
sn_status sn_cuda_render(const sn_kernel *const *ks, int n, const sn_target *t,
                         sn_cuda_source *out, sn_err *e);
/* A part of s (which sn_cuda_render made of ks) as a translation unit of its own: the kernels
 * with part[i] == p, their functions named and written exactly as in s->src (every kernel that
 * shares a function must be in its leader's part). *src is malloc'd. */
sn_status sn_cuda_render_part(const sn_kernel *const *ks, const sn_cuda_source *s,
                              const sn_target *tg, const int *part, int p, char **src, sn_err *e);
void sn_cuda_source_free(sn_cuda_source *s);

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
