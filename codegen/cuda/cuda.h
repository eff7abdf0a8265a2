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

/* ---- cuda_attention.c, cuda_attention_mma.c: flash attention ---- */

/* An SN_KER_ATTENTION kernel (passes/fuse.c) needs the target: its products run on tensor cores
 * (mma.sync: m16n8k16 with bf16 operands where tg->mma_bf16, f16 with m16n8k16 on sm_80+ and two
 * m16n8k8 on sm_75) when q, k, v are bf16 or f16 and the head sizes are multiples of 16, and as
 * fp32 FMA tiles otherwise (f32 storage: what training uses until autocast). Kinds: the forward
 * (o and lse in one kernel with online softmax; or lse alone; or o from a given lse), dq (query
 * blocks over key tiles), dk and/or dv (key blocks over query tiles; one kernel when fuse puts
 * attention_bwd_v as anchor2 of attention_bwd_k). Each kernel recomputes dout_i . o_i itself,
 * and no kernel uses atomics: the results are deterministic. Head sizes up to 128; shared memory
 * is static and at most the target's shared_default (48 KiB), so no launch needs the runtime to
 * raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, and dynamic shared memory is 0.
 * Params: one typed pointer per arg, in k->args order, as sn_cuda_render's. */
sn_status sn_cuda_attention_emit(sn_cu_text *t, const sn_kernel *k, const sn_target *tg,
                                 sn_err *e);
/* Grid (query or key tiles, (batch x head) slices, 1) and block (32 x warps) of k on tg. */
sn_status sn_cuda_attention_dims(const sn_kernel *k, const sn_target *tg, sn_cuda_dims *d,
                                 sn_err *e);
/* ks[0..n) rendered into one translation unit (the prelude's #include, then each kernel). */
sn_status sn_cuda_render_attention(const sn_kernel *const *ks, int n, const sn_target *tg,
                                   char **src, sn_err *e);

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
