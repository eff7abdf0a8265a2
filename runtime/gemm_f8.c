/* gemm_f8.c: products of 8-bit float operands on the CPU (gemm_f8.h). Convention: no CPU this
 * runs on multiplies FP8, so each part's share of A and B is widened through a 256-entry table
 * of bf16 bits into this thread's packed scratch, and the bf16 product (gemm_lowp.c) does the
 * rest: exact widening, exact products (at most 4 x 4 significant bits), f32 sums. */
#include "gemm_f8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "gemm_lowp.h"

float sn_f8_widen(sn_dtype t, uint8_t q) {
    SN_ASSERT(sn_dtype_is_f8(t));
    int mant = t == SN_F8E4M3 ? 3 : 2, bias = t == SN_F8E4M3 ? 7 : 15;
    int em = q & 0x7f, e = em >> mant, m = em & ((1 << mant) - 1);
    float v;
    if (t == SN_F8E4M3 && em == 0x7f) v = NAN; /* S.1111.111: E4M3 has no infinities */
    else if (t == SN_F8E5M2 && e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexpf((float)m, 1 - bias - mant);
    else v = ldexpf((float)((1 << mant) + m), e - bias - mant);
    return q & 0x80 ? -v : v;
}

/* the bf16 bits of every code of t (exact: 4 significant bits at most, exponents in range) */
static void bf16_table(sn_dtype t, uint16_t *tab) {
    for (int q = 0; q < 256; q++) {
        float v = sn_f8_widen(t, (uint8_t)q);
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        tab[q] = (uint16_t)(u >> 16);
    }
}

/* rows x cols of an f8 matrix (leading dimension ld) as packed bf16 in this thread's buffer
 * `slot`, kept between calls up to KEEP_CODES elements (gemm_lowp.c's reason: a fresh buffer a
 * call costs its page faults), larger ones freed after their product */
enum { KEEP_CODES = 16 << 20 };
static _Thread_local struct { uint16_t *p; size_t n; } bufs[2];
static void release_large(void) {
    for (int i = 0; i < 2; i++)
        if (bufs[i].n > KEEP_CODES) {
            free(bufs[i].p);
            bufs[i].p = NULL;
            bufs[i].n = 0;
        }
}

static uint16_t *widen(const uint16_t *tab, const uint8_t *x, int64_t rows, int64_t cols,
                       int64_t ld, int slot, sn_err *e) {
    size_t n = (size_t)(rows * cols);
    if (bufs[slot].n < n) {
        free(bufs[slot].p);
        bufs[slot].n = 0;
        if (!(bufs[slot].p = sn_malloc(sizeof(uint16_t) * n, "a bf16 copy of an 8-bit GEMM operand", e)))
            return NULL;
        bufs[slot].n = n;
    }
    uint16_t *y = bufs[slot].p;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) y[i * cols + j] = tab[x[i * ld + j]];
    return y;
}

sn_status sn_gemm_matmul_part_f8(const sn_node *mm, const sn_gemm_view *view, float *c,
                                 const void *a, const void *b, const float *bias, int part,
                                 int parts, sn_err *e) {
    SN_ASSERT(sn_dtype_is_f8(mm->in[0]->dtype) && sn_dtype_is_f8(mm->in[1]->dtype));
    uint16_t ta_tab[256], tb_tab[256];
    bf16_table(mm->in[0]->dtype, ta_tab);
    bf16_table(mm->in[1]->dtype, tb_tab);
    sn_gemm_part p;
    sn_gemm_part_of(mm, view, part, parts, &p);
    const uint8_t *a8 = (const uint8_t *)a + p.oa, *b8 = (const uint8_t *)b + p.ob;
    int64_t m = p.r1 - p.r0, n = p.c1 - p.c0;
    for (int64_t i = p.b0; i < p.b1 && m > 0 && n > 0; i++) {
        /* this part's rows of op(A) and columns of op(B), as stored (transposed or not) */
        const uint8_t *ai = a8 + i * p.sa + (p.ta ? p.r0 : p.r0 * p.lda);
        const uint8_t *bi = b8 + i * p.sb + (p.tb ? p.c0 * p.ldb : p.c0);
        int64_t a_cols = p.ta ? m : p.K, b_cols = p.tb ? p.K : n;
        uint16_t *wa = widen(ta_tab, ai, p.ta ? p.K : m, a_cols, p.lda, 0, e);
        uint16_t *wb = wa ? widen(tb_tab, bi, p.tb ? n : p.K, b_cols, p.ldb, 1, e) : NULL;
        sn_status s = !wb ? SN_ERR_OOM
                          : sn_gemm_lowp(SN_BF16, p.ta, p.tb, m, n, p.K, wa, a_cols, wb, b_cols,
                                         c + i * p.M * p.N + p.r0 * p.N + p.c0, p.N, e);
        release_large();
        if (s) return s;
        sn_gemm_part_bias(&p, c, bias, i); /* the bias epilogue (f32 output) */
    }
    return SN_OK;
}
