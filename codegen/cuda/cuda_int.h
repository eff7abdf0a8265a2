/* cuda_int.h: what the CUDA kernel emitters share, one section per file: names, literals and
 * pointwise instructions (cuda_expr.c), then one emitter per kernel kind. Convention: an
 * emitter writes one `extern "C" __global__` function named `fname` whose text depends only on
 * the kernel's computation (ops, shapes, dtypes), never on node ids, so that kernels that
 * differ only in names render to the same text and are emitted once (cuda_render.c). Node ids
 * go in the header comment, which the renderer writes outside the compared text. */
#ifndef SN_CUDA_INT_H
#define SN_CUDA_INT_H

#include "cuda.h"
#include "ir/nf4.h"
#include "program/pointwise.h"

/* ---- cuda_expr.c: names, literals, instructions ---- */

/* "float", "sn_bf16", "sn_f16", "int" */
const char *sn_cu_ctype(sn_dtype t);
/* A float literal C and CUDA read back exactly: "0.5f", "2.0f", "(-SN_INF)". */
const char *sn_cu_float_lit(float v, char *buf, size_t len);
/* "out0" or "in2": the parameter holding args[i]. */
const char *sn_cu_arg_name(const sn_kernel *k, int i, char *buf, size_t len);
/* "gelu_3<sfx>": the variable holding instruction i's value (sfx: a vector lane, or ""). */
const char *sn_cu_var_name(const sn_kernel *k, int i, const char *sfx, char *buf, size_t len);
/* An operand as C: a variable, "x<a><sfx>" for access a, or a literal. */
const char *sn_cu_operand(const sn_kernel *k, const sn_ref *r, const char *sfx, char *buf,
                          size_t len);
/* "const float gelu_3 = sn_gelu(add_2);": instruction i (not a row op) in f32, rounded to its
 * node's dtype. */
void sn_cu_emit_instr(sn_cu_text *t, const sn_kernel *k, int i, const char *sfx);
/* The same where the element's index in the kernel's space is the C expression `index` (a
 * pointwise kernel's: a dropout's mask reads it; NULL elsewhere, where fuse puts none). */
void sn_cu_emit_instr_at(sn_cu_text *t, const sn_kernel *k, int i, const char *sfx, const char *index);
/* Appends the fused expression under r to buf, with node ids: "gelu(add(%40, %12))". */
void sn_cu_describe(const sn_kernel *k, const sn_ref *r, char *buf, size_t len);
/* Whether k reads a bf16 or f16 input: its inputs carry 8 or 11 bits, and its exponentials,
 * sigmoids and activations are the prelude's approximate forms on the SFU (about 2^-21
 * relative, far under their rounding). */
bool sn_cu_reads_16bit(const sn_kernel *k);
/* f32, bf16, f16, i32 and 8-bit float values only (pointwise and reduce kernels); else
 * SN_ERR_UNSUPPORTED naming k and n. */
sn_status sn_cu_check_dtype(const sn_kernel *k, const sn_node *n, sn_err *e);
/* The same without 8-bit floats (row and gather kernels: "not supported yet", naming k's kind). */
sn_status sn_cu_check_dtype_no_f8(const sn_kernel *k, const sn_node *n, sn_err *e);
/* The kernel's name is a C identifier (asserted). */
void sn_cu_check_name(const sn_kernel *k);
/* `extern "C" __global__ void __launch_bounds__(threads) fname(` and one typed parameter a
 * line (outputs, then inputs: "float *__restrict__ out0, /+ f32[4,64] +/"), then "{". */
void sn_cu_emit_signature(sn_cu_text *t, const sn_kernel *k, const char *fname, int threads);
/* The same with __launch_bounds__(threads, min_blocks) (min_blocks > 0): ptxas then takes the
 * registers the kernel needs up to what min_blocks leaves; with threads alone its heuristic
 * may spill to keep more blocks resident (sm_80: a row kept in registers, 40 registers and 12
 * bytes spilled, 48 and none with a minimum of 1 to 4 blocks). */
void sn_cu_emit_signature_min(sn_cu_text *t, const sn_kernel *k, const char *fname, int threads,
                              int min_blocks);
/* cuda_tail.c: a joined FINISH (kernel.h: tail) in its host's launch: the blocks it adds to
 * the host's grid (a thread a column of its partial sums); the FINISH's device function
 * `fname`_tail (emitted before the host); its signature; the host's parameters for it (after
 * its own, closing the list); the host's first lines sending the blocks after its own to it. */
int64_t sn_cu_tail_blocks(const sn_kernel *k, unsigned threads);
void sn_cu_emit_tail_fn(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);
void sn_cu_tail_signature(sn_cu_text *t, const sn_kernel *f, const char *fname);
void sn_cu_tail_params(sn_cu_text *t, const sn_kernel *k, int indent);
void sn_cu_tail_dispatch(sn_cu_text *t, const sn_kernel *k, const char *fname);
/* "int" when every index below `reach` fits in 32 bits, else "long long". */
const char *sn_cu_index_type(int64_t reach);

/* ---- the emitters: each writes a kernel that passed kernel.h's contract (sn_kernel_check)
 * and, where it has one, the backend's check (SN_ERR_UNSUPPORTED with a message naming the
 * kernel: what this backend does not generate); dims from cuda_launch.c ---- */

void sn_cu_emit_pointwise(sn_cu_text *t, const sn_kernel *k, const char *fname);
/* The comment above a pointwise kernel (the fused expression with node ids, the shape). */
void sn_cu_header_pointwise(sn_cu_text *t, const sn_kernel *k);
/* Elements a pointwise kernel's step does: 8 (16-byte loads of 8 bf16/f16 values), 4 (float4)
 * or 1. */
int sn_cu_pointwise_lanes(const sn_kernel *k);

sn_status sn_cu_check_row(const sn_kernel *k, sn_err *e);
/* tg: row_cache, the row kept in registers between passes where it fits, and its budget */
void sn_cu_emit_row(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const sn_target *tg,
                    const char *fname);
/* The dynamic shared memory of a classifier kernel in blocks of `threads` on tg that takes its
 * rows in turn, the next copied ahead into shared memory (cuda_row.h:
 * sn_cu_row_prefetch_plan), or 0: a block a row; where not 0, *blocks_per_sm gets the blocks an
 * SM its launch bounds ask (the registers its kept row leaves). */
int64_t sn_cu_row_prefetched(const sn_kernel *k, unsigned threads, const sn_target *tg,
                             int *blocks_per_sm);
/* Threads of a block-per-row kernel for rows of C elements taken `lanes` a step. */
int sn_cu_row_threads(int64_t C, int lanes);
/* Columns a row kernel's pass takes a step: 8 (16-byte loads of 8 bf16/f16 values; f32 as two
 * float4) where a 16-bit buffer takes part, the row length divides by 8 and at most three f32
 * buffers are read or written element by element (more spill on sm_80), 4 (float4) where an
 * f32 buffer takes part and it divides by 4, else 1; FINISH kernels 1. */
int sn_cu_row_lanes(const sn_kernel *k);
/* Whether a whole-row kernel takes a warp per row, SN_CUDA_ROW_WARPS rows a block (short
 * rows), rather than a block per row (cuda_row_pass.c). */
bool sn_cu_row_warp_per_row(const sn_kernel *k);
enum { SN_CUDA_ROW_WARPS = 8 };

void sn_cu_emit_reduce(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);
/* Whether a column reduction takes a thread a column (its d rows at most SN_CUDA_REDUCE_ROWS:
 * their loads together in one thread, added in order), blocks of SN_CUDA_REDUCE_COLS threads;
 * else tiles of 32 columns with threads down the rows. */
enum { SN_CUDA_REDUCE_ROWS = 32, SN_CUDA_REDUCE_COLS = 256 };
bool sn_cu_reduce_by_column(const sn_kernel *k);

sn_status sn_cu_check_gather(const sn_kernel *k, sn_err *e);
void sn_cu_emit_gather(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);

/* cuda_dequant.c: NF4 weights unpacked (f32, bf16 or f16 out), a thread a weight. */
/* cuda_attention_cache.c: attention_cache (decoding over a KV cache); cuda_attention.c's entry
 * points hand that op over */
sn_status sn_cu_check_attention_cache(const sn_kernel *k, sn_err *e);
sn_cuda_dims sn_cu_attention_cache_dims(const sn_kernel *k);
void sn_cu_emit_attention_cache(sn_cu_text *t, const sn_kernel *k, const char *fname);
sn_status sn_cu_check_dequant(const sn_kernel *k, sn_err *e);
void sn_cu_emit_dequant(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);
/* cuda_dequant.c, for the few-row products too: threads 0..15 copy the 16 NF4 levels into the
 * shared `level` (declared by the caller; a barrier before they are read is the caller's) */
void sn_cu_emit_nf4_levels(sn_cu_text *t);
/* cuda_gemv.c: the few-row product (NF4 or 16-bit W (K, N); f32, bf16 or f16 x; f32 y), a block
 * of 8 warps per 64 columns; the split's FINISH; its launch (both layouts). */
void sn_cu_emit_gemv(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);
/* cuda_gemv.c, for cuda_gemv_t.c too: mean, step, scale_code and code, pointers into in1 (the
 * packed NF4 bytes of layout l) */
void sn_cu_emit_nf4_pointers(sn_cu_text *t, const sn_nf4_layout *l);
/* cuda_gemv_t.c: the product with W stored (N, K) (tb): one kernel or the split's PARTIAL */
void sn_cu_emit_gemv_t(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);
sn_cuda_dims sn_cu_gemv_dims(const sn_kernel *k);
/* cuda_gemv.c, for the thin product's sum form too: the FINISH of a kernel split in
 * sn_split_parts parts, each an f32 y (kernel.h: the decode split): a thread an element of y, the
 * parts added in order; a kernel of SN_SPLIT_FINISH_ELEMS threads a block, or (tail > 0) a
 * joined FINISH's device function of `block` in a host of `tail` threads (cuda_tail.c) */
void sn_cu_emit_parts_finish(sn_cu_text *t, const sn_kernel *k, const char *fname, unsigned tail);
/* cuda_thin.c: the thin product (kernel.h: SN_KER_THIN), a block of warps per `rows` rows */
void sn_cu_emit_thin(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);
sn_cuda_dims sn_cu_thin_dims(const sn_kernel *k);
/* cuda_gather.c: the embedding (a team of threads an id) and embedding_bwd's ROWS kernel (a
 * team a table row), 256 threads a block */
sn_cuda_dims sn_cu_gather_rows_dims(const sn_kernel *k);
/* cuda_thin.c, for cuda_thin_sum.c too: v[0 .. n) = the n elements of type `ct` at `src` (a
 * pointer expression), widened: one load where they take 4 or 8 bytes (16-bit) or 8 (f32),
 * 16-byte loads where they take a multiple of 16, else n scalar loads. The address is a
 * multiple of the loads' size (the caller's). */
void sn_cu_load_n(sn_cu_text *t, const char *ct, int eb, int n, const char *v, const char *src);
/* cuda_thin_sum.c: the sum form's PARTIAL (x^T W over a part of the rows) or FINISH */
void sn_cu_emit_thin_sum(sn_cu_text *t, const sn_kernel *k, const sn_thin *p, const char *fname);

void sn_cu_emit_optim(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname);

/* Flash attention (cuda_attention.c: the plan and what both paths share; cuda_attention_simt.c,
 * cuda_attention_mma.c: the paths): the forward (o and lse with online
 * softmax, or lse alone, or o from a given lse), dq, and dk and/or dv (attention_bwd_v as anchor2
 * of attention_bwd_k), on tensor cores (mma.sync with bf16 or f16 operands, f32 accumulators)
 * where the target multiplies q's dtype and the head sizes are multiples of 16, else as fp32
 * FMA tiles. Deterministic (no atomics); static shared memory within t->shared_default; head
 * sizes up to 128. The check needs the target (the plan: path and tiles). */
sn_status sn_cu_check_attention(const sn_kernel *k, const sn_target *t, sn_err *e);
void sn_cu_emit_attention(sn_cu_text *t, const sn_kernel *k, const sn_target *tg, const char *fname);
sn_cuda_dims sn_cu_attention_dims(const sn_kernel *k, const sn_target *t);
/* The warp max and sum both attention paths use, emitted once per translation unit (guarded). */
void sn_cu_emit_att_warp_helpers(sn_cu_text *t);

/* The device functions every row and reduction kernel uses (block sums and maxima), written
 * once at the top of a translation unit that has any. */
void sn_cu_emit_block_reductions(sn_cu_text *t);

#endif
