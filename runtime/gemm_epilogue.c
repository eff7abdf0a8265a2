/* gemm_epilogue.c: the GEMM kernels' epilogues on the CPU device over rows of the f32 product
 * (program/kernel.h), the GELU ones with program/epilogue.h's f32 formulas in the order the
 * stand-in cuBLASLt evaluates them: v + bias (f32), then accum's + c, then gelu; (v [+ c]) *
 * gelu'(aux widened to f32); rounded once. */
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
    int o = k->n_out; /* A, B, then the epilogue's input, then accum's c */
    sn_dtype t = k->args[0]->dtype;
    sn_epilogue epi = k->gemm.epilogue;
    const void *acc = k->gemm.accum ? bufs[o + k->n_in - 1] : NULL; /* of y's dtype */
    if ((epi == SN_EPI_NONE || epi == SN_EPI_BIAS) && t != SN_F32) {
        sn_gemm_store_lowp(t, bufs[0], c, epi == SN_EPI_BIAS ? bufs[o + 2] : NULL, acc, N, r0, r1);
        return;
    }
    if (epi == SN_EPI_NONE || epi == SN_EPI_BIAS) { /* f32 y with accum: (v + bias) + c */
        float *y = bufs[0];
        const float *b = epi == SN_EPI_BIAS ? bufs[o + 2] : NULL, *a = acc;
        SN_ASSERT(a); /* without c, runtime/cpu.c stores an f32 y itself */
        for (int64_t r = r0; r < r1; r++)
            for (int64_t j = 0; j < N; j++) {
                int64_t i = r * N + j;
                y[i] = (b ? c[i] + b[j] : c[i]) + a[i];
            }
        return;
    }
    void *y = bufs[0], *aux = epi == SN_EPI_GELU_AUX_BIAS ? bufs[1] : NULL;
    const void *in = epi != SN_EPI_NONE ? bufs[o + 2] : NULL; /* the bias (N), or DGELU's aux */
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < N; j++) {
            int64_t i = r * N + j;
            float v = c[i];
            if (epi == SN_EPI_DGELU) {
                if (acc) v = v + load(t, acc, i);
                put(t, y, i, v * sn_epi_gelu_grad(load(t, in, i)));
                continue;
            }
            if (in) v = v + load(t, in, j);
            if (acc) v = v + load(t, acc, i); /* read before y[i] is written: C may be y */
            if (epi == SN_EPI_NONE || epi == SN_EPI_BIAS) {
                put(t, y, i, v);
                continue;
            }
            if (aux) put(t, aux, i, v);
            put(t, y, i, sn_epi_gelu(v));
        }
}
