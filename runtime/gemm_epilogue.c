/* gemm_epilogue.c: the GEMM kernels' epilogues on the CPU device over rows of the f32 product
 * (program/kernel.h), the GELU ones with program/epilogue.h's f32 formulas in the order the
 * stand-in cuBLASLt evaluates them: v + bias (f32), then gelu; v * gelu'(aux widened to f32);
 * ACCUM's v + c (f32), rounded once. */
#include "gemm_epilogue.h"

#include "gemm_lowp.h"
#include "program/epilogue.h"

static float load(sn_dtype t, const void *p, int64_t i) {
    return t == SN_F32 ? ((const float *)p)[i] : sn_lowp_widen(t, ((const uint16_t *)p)[i]);
}

static void put(sn_dtype t, void *p, int64_t i, float v) {
    if (t == SN_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = sn_lowp_round(t, v);
}

void sn_gemm_epilogue_rows(const sn_kernel *k, void *const *bufs, const float *c, int64_t r0,
                           int64_t r1) {
    const sn_node *mm = k->anchor;
    int64_t N = mm->shape[mm->rank - 1];
    int o = k->n_out; /* A, B, then the epilogue's input */
    sn_dtype t = k->args[0]->dtype;
    sn_epilogue epi = k->gemm.epilogue;
    if (epi == SN_EPI_NONE || epi == SN_EPI_BIAS) {
        sn_gemm_store_lowp(t, bufs[0], c, epi == SN_EPI_BIAS ? bufs[o + 2] : NULL, N, r0, r1);
        return;
    }
    if (epi == SN_EPI_ACCUM) { /* y = rnd(v + c), c of y's dtype (as the add kernel it replaces) */
        const void *in = bufs[o + 2];
        for (int64_t i = r0 * N; i < r1 * N; i++) put(t, bufs[0], i, c[i] + load(t, in, i));
        return;
    }
    void *y = bufs[0], *aux = epi == SN_EPI_GELU_AUX_BIAS ? bufs[1] : NULL;
    const void *in = bufs[o + 2]; /* the bias (N), or DGELU's aux (R, N) */
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < N; j++) {
            int64_t i = r * N + j;
            float v = c[i];
            if (epi == SN_EPI_DGELU) {
                put(t, y, i, v * sn_epi_gelu_grad(load(t, in, i)));
                continue;
            }
            v = v + load(t, in, j);
            if (aux) put(t, aux, i, v);
            put(t, y, i, sn_epi_gelu(v));
        }
}
