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

sn_status sn_gemm_matmul(const sn_node *mm, float *c, const float *a, const float *b, sn_err *e) {
    return sn_gemm_matmul_part(mm, c, a, b, NULL, 0, 1, e);
}

sn_status sn_gemm_matmul_part(const sn_node *mm, float *c, const float *a, const float *b,
                              const float *bias, int part, int parts, sn_err *e) {
    const sn_node *A = mm->in[0], *B = mm->in[1];
    bool ta = mm->a.ta, tb = mm->a.tb;
    int64_t M = mm->shape[mm->rank - 2], N = mm->shape[mm->rank - 1];
    int64_t K = A->shape[A->rank - 1 - ta];
    int64_t lda = A->shape[A->rank - 1], ldb = B->shape[B->rank - 1];
    int64_t batch = sn_numel(mm) / (M * N);
    if (B->rank == 2 && A->rank > 2 && !ta) { /* rows of every batch are one matrix */
        M *= batch;
        batch = 1;
    }
    int64_t sa = A->rank > 2 ? M * K : 0, sb = B->rank > 2 ? K * N : 0;
    int64_t b0 = 0, b1 = batch, r0 = 0, r1 = M;
    if (batch >= parts) { /* whole batches per part */
        b0 = batch * part / parts;
        b1 = batch * (part + 1) / parts;
    } else { /* rows of every batch, in multiples of 16 */
        int64_t blocks = (M + 15) / 16;
        r0 = blocks * part / parts * 16;
        r1 = blocks * (part + 1) / parts * 16;
        if (r1 > M) r1 = M;
    }
    for (int64_t i = b0; i < b1 && r0 < r1; i++) {
        const float *ai = a + i * sa + (ta ? r0 : r0 * lda);
        sn_status s = sn_gemm_f32(ta, tb, r1 - r0, N, K, ai, lda, b + i * sb, ldb, 0,
                                  c + i * M * N + r0 * N, N, e);
        if (s) return s;
        for (int64_t r = r0; bias && r < r1; r++) { /* the bias epilogue, rows still in cache */
            float *row = c + i * M * N + r * N;
            for (int64_t j = 0; j < N; j++) row[j] += bias[j];
        }
    }
    return SN_OK;
}
