/* llvm.h: the CPU code generator: kernels (kernel.h) -> LLVM IR -> verified, optimised for the
 * host CPU, JIT-compiled by ORC LLJIT into functions with the CPU kernel ABI.
 * Convention: a batch of kernels is one module (one optimisation, one link); an sn_jit owns the
 * code it made until sn_jit_free, and is used by one thread at a time (two sn_jit objects may
 * compile on two threads at once).
 *
 *     sn_jit *j;
 *     if (sn_jit_new(&j, &e)) ...                        // fails when built without LLVM
 *     sn_cpu_kernel_fn fns[n];
 *     if (sn_jit_compile(j, kernels, n, fns, &e)) ...    // e.msg names the kernel and the cause
 *     fns[0](bufs, 0, kernels[0]->n_items);              // or split [0, n_items) over threads
 *     sn_jit_free(j);                                    // the functions die with it
 *
 * What each kind expects of the kernel (checked by sn_jit_compile, SN_ERR_INVALID otherwise):
 *   POINTWISE  items = elements of the index space, any split.
 *   ROW        items = rows of in[0] (numel / last dim), any split, except CROSS_ENTROPY,
 *              LAYERNORM_BWD_W and RMSNORM_BWD_W, which must be `serial` (they sum over all
 *              rows into one output: run them once over [0, n_items)), unless column sums
 *              joined them (kernel.h: n_colsum): then item 0 is the op over every row and
 *              items 1 .. the sums' tiles, any split. CROSS_ENTROPY_BWD
 *              counts the targets that are not ignored over all rows itself, so it splits.
 *              CROSS_ENTROPY(_BWD) with attribute end > 0 treat only the first `end` classes
 *              as real (padded vocabulary): the rest add nothing and get a zero gradient.
 *              Fused neighbours (n_instr > 0, kernel.h): the prologue is evaluated where the
 *              op reads an operand, a value it stores is stored by the first pass over the row
 *              that computes it and read back by later passes; the epilogue is evaluated where
 *              the op writes. CROSS_ENTROPY stores no prologue values (SN_ERR_UNSUPPORTED). 
 *   REDUCE     items = output elements, any split.
 *   GATHER     EMBEDDING: items = ids, any split. EMBEDDING_BWD: items = column blocks, each
 *              owning ceil(C / n_items) columns of the (V, C) output, which it zeroes and then
 *              scatter-adds into, so threads never collide: n_items may be anything in
 *              [1, C] (ceil(C / 64) spreads it over threads; 1 is one serial pass).
 *              Split in stages (kernel.h), its ROWS kernel is that kernel (the scratch
 *              unread) and its BUCKET kernel does nothing: the CPU needs no buckets.
 *   GRAD_ACC, ADAMW  items = elements of the flat range [0, flat_n); SQNORM: items = blocks
 *              of SN_SQNORM_BLOCK elements; CLIP: one item (kernel.h lists their buffers).
 *   ATTENTION  see llvm_attention.c. GEMM is a library call: SN_ERR_UNSUPPORTED.
 * Any kernel called with an empty range (begin == end) does nothing. Out-of-range ids and
 * targets never make a kernel read or write out of bounds: an embedding row of a bad id and
 * the loss (or gradient row) of a bad target are NaN; a bad id adds nothing to the scatter.
 * Values are f32 in registers; buffers are f32, i32 (ids, targets, casts), or bf16 / f16
 * (widened on load, rounded to nearest even on store: llvm_util.c), or, in POINTWISE kernels
 * only, f8e4m3 / f8e5m2 (the same, saturating: llvm_f8.c); REDUCE computes amax, POINTWISE
 * pow2_scale; elsewhere these are SN_ERR_UNSUPPORTED ("not supported yet"). */
#ifndef SN_LLVM_H
#define SN_LLVM_H

#include "program/kernel.h"
#include "support/blobcache.h"

typedef struct sn_jit sn_jit;

/* Compile statistics, summed over the batches an sn_jit compiled. */
typedef struct {
    int batches, kernels;
    int shared;       /* kernels whose IR equalled an earlier kernel's: they share its code */
    int cached;       /* batches whose object file came from the cache (sn_jit_set_cache) */
    double build_ms;  /* IR construction and verification (and the cache key, with a cache) */
    double opt_ms;    /* the O3 pipeline for the host (none for a cached batch) */
    double link_ms;   /* machine code generation (none for a cached batch) and linking */
} sn_jit_stats;

/* A JIT for the host CPU (its features pick the vector width: 16 f32 lanes with AVX-512, 8
 * with AVX2, else 4; the environment variable SN_JIT_LANES=4|8|16 overrides it). Fails with
 * SN_ERR_UNSUPPORTED when sinter was built without LLVM. */
sn_status sn_jit_new(sn_jit **out, sn_err *e);

/* Object files on disk (support/blobcache.h, format "SNCPUOBJ"): a batch whose module (its IR
 * text before optimisation) was compiled before for the same LLVM version and host target
 * (triple, CPU name, features) is linked from its object file, skipping the O3 pipeline and
 * code generation; else it is compiled and its object file stored. The same code either way:
 * every batch is compiled to an object file by one target machine, then linked. The cache is
 * the caller's and must outlive j; NULL (the default) turns it off. */
void sn_jit_set_cache(sn_jit *j, sn_blobcache *c);
void sn_jit_free(sn_jit *j); /* NULL is fine */

/* Generates, verifies, optimises and links the n kernels as one module, and sets fns[i] to
 * kernel ks[i]. A kernel whose IR is identical to one compiled before by this sn_jit (the same
 * layer's kernel in another block: buffers come through bufs) shares its code instead of
 * being compiled again. Kernel names need only be unique within the batch. On failure nothing
 * from the batch is linked and e names the kernel and the reason (SN_ERR_UNSUPPORTED for a
 * kind, op or dtype the backend does not generate). */
sn_status sn_jit_compile(sn_jit *j, sn_kernel *const *ks, int n, sn_cpu_kernel_fn *fns, sn_err *e);

/* The LLVM IR of kernel k alone, before (optimized false) or after the host O3 pipeline, as a
 * malloc'd string the caller frees (sinter --dump-llvm). */
sn_status sn_jit_kernel_ir(sn_jit *j, const sn_kernel *k, bool optimized, char **text, sn_err *e);

/* "x86_64-pc-linux-gnu znver3, 16 f32 lanes": what the JIT compiles for. */
const char *sn_jit_target(const sn_jit *j);
sn_jit_stats sn_jit_get_stats(const sn_jit *j);

#endif
