/* gemm_epilogue.h: a GEMM kernel's epilogue on the CPU device (program/kernel.h) applied to its
 * f32 product, for the epilogues the product's own store does not do (a 16-bit output, GELU). */
#ifndef SN_GEMM_EPILOGUE_H
#define SN_GEMM_EPILOGUE_H

#include "program/kernel.h"

/* Rows [r0, r1) of GEMM kernel k's outputs (bufs: its args' data, kernel.h's order) from its
 * f32 product c (R, N): NONE and BIAS into a 16-bit y, or with accum's c; GELU_BIAS,
 * GELU_AUX_BIAS and DGELU into y (and the aux) of any dtype, with program/epilogue.h's formulas. */
void sn_gemm_epilogue_rows(const sn_kernel *k, void *const *bufs, const float *c, int64_t r0,
                           int64_t r1);

#endif
