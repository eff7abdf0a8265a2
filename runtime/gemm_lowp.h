/* gemm_lowp.h: matrix products with bf16 or f16 operands (raw 16-bit storage), f32
 * accumulation and f32 output, for the CPU device; row-major like gemm.h. */
#ifndef SN_GEMM_LOWP_H
#define SN_GEMM_LOWP_H

#include <stdint.h>

#include "ir/ir.h"
#include "program/kernel.h"

/* C (M, N) = op(A) @ op(B) (C overwritten), A and B of dtype t (SN_BF16 or SN_F16). */
sn_status sn_gemm_lowp(sn_dtype t, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                       int64_t ldc, sn_err *e);

/* Part `part` of `parts` of matmul mm whose operands are bf16 or f16 (its output f32): the
 * same split, views and bias epilogue (bias (N) added to every row; NULL: none) as
 * sn_gemm_matmul_part. */
sn_status sn_gemm_matmul_part_lowp(const sn_node *mm, const sn_gemm_view *view, float *c,
                                   const void *a, const void *b, const float *bias, int part,
                                   int parts, sn_err *e);

/* A GEMM kernel's epilogue into a 16-bit output (program/kernel.h: NONE, BIAS, with or without
 * accum): rows [r0, r1) of y (R, N) of dtype t (SN_BF16 or SN_F16) = (c + bias) + acc rounded to
 * nearest even, c the f32 product, bias (N) and acc (R, N, may be y) of dtype t or NULL. */
void sn_gemm_store_lowp(sn_dtype t, void *y, const float *c, const void *bias, const void *acc,
                        int64_t N, int64_t r0, int64_t r1);

/* One value of dtype t (SN_BF16 or SN_F16) widened to f32 (exact), and an f32 rounded to t's
 * bits to nearest even (sn_dtype_round; NaN stays NaN, overflow goes to infinity). */
float sn_lowp_widen(sn_dtype t, uint16_t bits);
uint16_t sn_lowp_round(sn_dtype t, float v);

#endif
