/* gemm.h: f32 matrix products for the CPU device through the GEMM library chosen in
 * docs/gemm.md (oneDNN), with a plain blocked loop when the library is missing. Row-major. */
#ifndef SN_GEMM_H
#define SN_GEMM_H

#include "ir/ir.h"
#include "program/kernel.h"

/* C (M, N) = op(A) @ op(B) + beta * C; A is (M, K) or, with ta, stored (K, M); B likewise. */
sn_status sn_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                      sn_err *e);

/* Part `part` of `parts` of the (batched) product c = a @ b of matmul node mm on contiguous
 * buffers, or, with view (NULL: none; program/kernel.h's operand views), a and b read at their
 * view's element off with rows ld apart (a rank-2 operand shared across the other's batch is
 * folded into one large GEMM where the layout allows): a share of the rows of every batch's output, or of
 * the batches; the parts together compute the whole product, each on its own thread, with the
 * library itself single-threaded (one thread pool for the whole device). With `bias` (N
 * floats; NULL: none), each part adds it to every row it computed while they are in cache (the
 * GEMM kernel's bias epilogue, program/kernel.h). */
sn_status sn_gemm_matmul_part(const sn_node *mm, const sn_gemm_view *view, float *c,
                              const float *a, const float *b, const float *bias, int part,
                              int parts, sn_err *e);

/* The share of a matmul node's product that part `part` of `parts` computes (the one work
 * split of sn_gemm_matmul_part and the 16-bit GEMMs): batches [b0, b1) and, of each, output rows
 * [r0, r1) and columns [c0, c1) (columns are split only when the rows are fewer than one block
 * of 16 per part: a decode step's single row); operands' strides between batches sa, sb (0:
 * shared), leading dims lda, ldb and first elements oa, ob (view as sn_gemm_matmul_part's). */
typedef struct {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, sa, sb, oa, ob;
    int64_t b0, b1, r0, r1, c0, c1;
} sn_gemm_part;
void sn_gemm_part_of(const sn_node *mm, const sn_gemm_view *view, int part, int parts,
                     sn_gemm_part *p);
/* Adds bias (N floats; NULL: nothing) to rows [r0, r1), columns [c0, c1) of batch i's output
 * c (M x N). */
void sn_gemm_part_bias(const sn_gemm_part *p, float *c, const float *bias, int64_t i);

/* Makes the calling thread's library calls single-threaded (call once per pool thread). */
void sn_gemm_thread_init(void);

/* "oneDNN" or "built-in loops" */
const char *sn_gemm_library(void);

#endif
