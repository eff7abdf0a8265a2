/* gemm.c: see gemm.h. Convention: every product goes through sn_gemm_f32, the one place that
 * knows which library runs it. */
#include "gemm.h"

#include <string.h>

#ifdef SN_HAVE_DNNL
#include <dnnl.h>
#endif
#ifdef SN_HAVE_OPENMP
#include <omp.h>
#endif

void sn_gemm_thread_init(void) {
#ifdef SN_HAVE_OPENMP
    omp_set_num_threads(1); /* oneDNN's OpenMP threads would fight the pool's for the cores */
#endif
}

const char *sn_gemm_library(void) {
#ifdef SN_HAVE_DNNL
    return "oneDNN";
#else
    return "built-in loops (oneDNN not found at build time: apt-get install libdnnl-dev)";
#endif
}

#ifndef SN_HAVE_DNNL
static void loops(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        for (int64_t j = 0; j < N; j++) c[j] = beta == 0 ? 0 : beta * c[j];
        for (int64_t k = 0; k < K; k++) {
            float a = ta ? A[k * lda + i] : A[i * lda + k];
            if (!tb) {
                const float *b = B + k * ldb;
                for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
            } else {
                for (int64_t j = 0; j < N; j++) c[j] += a * B[j * ldb + k];
            }
        }
    }
}
#endif

sn_status sn_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                      sn_err *e) {
#ifdef SN_HAVE_DNNL
    dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb,
                                 beta, C, ldc);
    if (s != dnnl_success)
        return sn_fail(e, SN_ERR_DEVICE, "oneDNN sgemm (%lld x %lld x %lld) failed with status %d",
                       (long long)M, (long long)N, (long long)K, (int)s);
#else
    (void)e;
    loops(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
#endif
    return SN_OK;
}

void sn_gemm_part_of(const sn_node *mm, const sn_gemm_view *view, int part, int parts,
                     sn_gemm_part *p) {
    const sn_node *A = mm->in[0], *B = mm->in[1];
    bool ta = mm->a.ta;
    int64_t M = mm->shape[mm->rank - 2], N = mm->shape[mm->rank - 1];
    int64_t K = A->shape[A->rank - 1 - ta];
    int64_t batch = sn_numel(mm) / (M * N);
    if (B->rank == 2 && A->rank > 2 && !ta) { /* rows of every batch are one matrix */
        M *= batch;
        batch = 1;
    }
    *p = (sn_gemm_part){.ta = ta, .tb = mm->a.tb, .M = M, .N = N, .K = K,
                        .lda = view && view[0].ld ? view[0].ld : A->shape[A->rank - 1],
                        .ldb = view && view[1].ld ? view[1].ld : B->shape[B->rank - 1],
                        .oa = view ? view[0].off : 0, .ob = view ? view[1].off : 0,
                        .sa = A->rank > 2 ? M * K : 0, .sb = B->rank > 2 ? K * N : 0,
                        .b0 = 0, .b1 = batch, .r0 = 0, .r1 = M, .c0 = 0, .c1 = N};
    int64_t blocks = (M + 15) / 16, cols = (N + 15) / 16;
    if (batch >= parts) { /* whole batches per part */
        p->b0 = batch * part / parts;
        p->b1 = batch * (part + 1) / parts;
    } else if (blocks >= parts || cols < parts) { /* rows of every batch, in multiples of 16 */
        p->r0 = blocks * part / parts * 16;
        p->r1 = blocks * (part + 1) / parts * 16;
        if (p->r1 > M) p->r1 = M;
    } else { /* a few rows (a decode step's one): columns, in multiples of 16 */
        p->c0 = cols * part / parts * 16;
        p->c1 = cols * (part + 1) / parts * 16;
        if (p->c1 > N) p->c1 = N;
    }
}

void sn_gemm_part_bias(const sn_gemm_part *p, float *c, const float *bias, int64_t i) {
    for (int64_t r = p->r0; bias && r < p->r1; r++) { /* rows still in cache */
        float *row = c + i * p->M * p->N + r * p->N;
        for (int64_t j = p->c0; j < p->c1; j++) row[j] += bias[j];
    }
}

sn_status sn_gemm_matmul_part(const sn_node *mm, const sn_gemm_view *view, float *c,
                              const float *a, const float *b, const float *bias, int part,
                              int parts, sn_err *e) {
    sn_gemm_part p;
    sn_gemm_part_of(mm, view, part, parts, &p);
    a += p.oa;
    b += p.ob;
    for (int64_t i = p.b0; i < p.b1 && p.r0 < p.r1 && p.c0 < p.c1; i++) {
        const float *ai = a + i * p.sa + (p.ta ? p.r0 : p.r0 * p.lda);
        const float *bi = b + i * p.sb + (p.tb ? p.c0 * p.ldb : p.c0);
        sn_status s = sn_gemm_f32(p.ta, p.tb, p.r1 - p.r0, p.c1 - p.c0, p.K, ai, p.lda, bi, p.ldb,
                                  0, c + i * p.M * p.N + p.r0 * p.N + p.c0, p.N, e);
        if (s) return s;
        sn_gemm_part_bias(&p, c, bias, i); /* the bias epilogue */
    }
    return SN_OK;
}
