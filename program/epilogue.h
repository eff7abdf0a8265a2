/* epilogue.h: the f32 formulas of the GEMM epilogues' GELU (kernel.h: GELU_BIAS, GELU_AUX_BIAS,
 * DGELU), the tanh form cuBLASLt documents, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and
 * its derivative, as ir's gelu and gelu_bwd define them. The CPU device (runtime/gemm_epilogue.c)
 * and the stand-in cuBLASLt (tests/standin) both evaluate these, so that the same f32 product
 * gives them the same stores. Convention: f32 operations in the order written, no contraction
 * into FMAs (sinter builds for the x86-64 baseline, which has none). */
#ifndef SN_EPILOGUE_H
#define SN_EPILOGUE_H

#include <math.h>

#define SN_EPI_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define SN_EPI_GELU_C 0.044715f

/* gelu(x) = 0.5 x (1 + tanh(k (x + c x^3))) */
static inline float sn_epi_gelu(float x) {
    float t = tanhf(SN_EPI_GELU_K * (x + SN_EPI_GELU_C * x * x * x));
    return 0.5f * x * (1.0f + t);
}

/* gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)) */
static inline float sn_epi_gelu_grad(float x) {
    float t = tanhf(SN_EPI_GELU_K * (x + SN_EPI_GELU_C * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * SN_EPI_GELU_K * (1.0f + 3.0f * SN_EPI_GELU_C * x * x);
}

#endif
