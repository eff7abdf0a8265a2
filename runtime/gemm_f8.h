/* gemm_f8.h: matrix products of two 8-bit float operands (f8e4m3 / f8e5m2, either format each:
 * the fp8 pass's products), f32 output, for the CPU device; row-major like gemm.h. */
#ifndef SN_GEMM_F8_H
#define SN_GEMM_F8_H

#include <stdint.h>

#include "ir/ir.h"
#include "program/kernel.h"

/* Part `part` of `parts` of matmul mm whose operands are 8-bit floats (its output f32): the
 * same split, views and bias epilogue (bias (N) added to every row; NULL: none) as
 * sn_gemm_matmul_part. Each part's operands are widened exactly to bf16 (every f8e4m3 and
 * f8e5m2 value is one) and multiplied by sn_gemm_lowp: the products are exact, the sums f32. */
sn_status sn_gemm_matmul_part_f8(const sn_node *mm, const sn_gemm_view *view, float *c,
                                 const void *a, const void *b, const float *bias, int part,
                                 int parts, sn_err *e);

/* The value of code q of 8-bit format t (exact; a NaN code a quiet NaN, E5M2's infinities
 * infinities). */
float sn_f8_widen(sn_dtype t, uint8_t q);

#endif
