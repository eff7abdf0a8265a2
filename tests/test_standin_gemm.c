/* test_standin_gemm.c: runtime/cuda's GEMMs on the stand-in's cuBLASLt (tests/standin: the
 * documented semantics on the CPU): plans for every layout, dtype, epilogue and operand view
 * against a double reference, the GELU epilogues' rules, GEMMs with epilogues against the
 * interpreter, downloads ordered by their stream, and SN_GEMM_TUNE (runtime/cuda/gemm_tune.c)
 * keeping the fastest algorithm and training as untuned. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "standin_check.h"
#include "interp/interp.h"
#include "models/gpt2.h"
#include "program/program.h"
#include "runtime/cuda/cuda_rt.h"
#include "support/cores.h"
#include "support/clock.h"
#include "train/plan.h"

/* ---- cuBLASLt plans (runtime/cuda/cublaslt.c) on the stand-in's cuBLASLt ---- */

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int)(seed >> 40) % 2001 - 1000) / 1000.0f;
    }
}

/* x rounded to dtype t (round to nearest even) in place, and stored as t into buf. */
static void to_dtype(sn_dtype t, float *x, size_t n, void *buf) {
    for (size_t i = 0; i < n; i++) {
        if (t == SN_F16) {
            ((_Float16 *)buf)[i] = (_Float16)x[i];
            x[i] = (float)((_Float16 *)buf)[i];
        } else if (t == SN_BF16) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
            ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
            memcpy(&x[i], &u, 4);
        } else {
            ((float *)buf)[i] = x[i];
        }
    }
}

static void from_dtype(sn_dtype t, const void *buf, int64_t n, float *x) {
    for (int64_t i = 0; i < n; i++) {
        if (t == SN_F16) {
            x[i] = (float)((const _Float16 *)buf)[i];
        } else if (t == SN_BF16) {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            memcpy(&x[i], &u, 4);
        } else {
            x[i] = ((const float *)buf)[i];
        }
    }
}

/* The row-major problem of s in double: D (batch, M, N) = epilogue(op(A) op(B)) (kernel.h's
 * epilogues: + bias (N); gelu, its input into aux; times gelu'(aux); + C, the aux_in values),
 * the tanh form in double. */
static void reference(const sn_gemm_shape *s, const float *A, const float *B, const float *bias,
                      const float *aux_in, const float *c_in, double *D, double *aux) {
    const double k = 0.7978845608028654, c = 0.044715;
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t i = 0; i < s->M; i++)
            for (int64_t j = 0; j < s->N; j++) {
                const float *a = A + b * s->stride_a, *bb = B + b * s->stride_b;
                int64_t at = b * s->stride_d + i * s->ldd + j;
                double v = (sn_gemm_has_bias(s->epi) ? bias[j] : 0) + (s->accum ? c_in[at] : 0);
                for (int64_t q = 0; q < s->K; q++)
                    v += (double)(s->ta ? a[q * s->lda + i] : a[i * s->lda + q]) *
                         (s->tb ? bb[j * s->ldb + q] : bb[q * s->ldb + j]);
                if (s->epi == SN_EPI_GELU_AUX_BIAS) aux[at] = v;
                if (s->epi == SN_EPI_GELU_BIAS || s->epi == SN_EPI_GELU_AUX_BIAS)
                    v = 0.5 * v * (1 + tanh(k * (v + c * v * v * v)));
                if (s->epi == SN_EPI_DGELU) {
                    double x = aux_in[at], t = tanh(k * (x + c * x * x * x));
                    v *= 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
                }
                D[at] = v;
            }
}

#define CK(call) ck_assert_msg((call) == SN_OK, "%s", e.msg)


/* A download on the stand-in reads the device at its call, the earliest moment it may run
 * (standin_stream.c), so work queued after it does not reach it; and one on a stream that did
 * not wait for another stream's work (an event, or the host synchronising that stream) races
 * with it and lands 0xff bytes: a copy stream that does not wait for the kernels before it, or
 * a copy queued before the kernel that writes its bytes, lands other bytes. */
START_TEST(downloads_read_at_their_call_and_race_unordered) {
    enum { N = 64 };
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    sn_err e;
    CUstream s2;
    CUevent ev;
    CUdeviceptr dev;
    float *h, want[N];
    unsigned char ff[4 * N];
    memset(ff, 0xff, sizeof ff);
    CK(SN_CUDA_CHECK(a, &e, cuStreamCreate, &s2, CU_STREAM_NON_BLOCKING));
    CK(SN_CUDA_CHECK(a, &e, cuEventCreate, &ev, CU_EVENT_DEFAULT));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dev, 4 * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemHostAlloc, (void **)&h, 4 * N, 0));
    for (int i = 0; i < N; i++) want[i] = (float)i;
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dev, want, sizeof want, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
    /* ordered by an event after the first stream's work, the memset queued after the copy */
    CK(SN_CUDA_CHECK(a, &e, cuMemsetD8Async, dev, 7, 4 * N, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dev, want, sizeof want, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuEventRecord, ev, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamWaitEvent, s2, ev, 0));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, h, dev, 4 * N, s2));
    CK(SN_CUDA_CHECK(a, &e, cuMemsetD8Async, dev, 0, 4 * N, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, s2));
    ck_assert_msg(!memcmp(h, want, sizeof want), "the download did not read at its call");
    /* unordered: the last memset was waited for by no one */
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, h, dev, 4 * N, s2));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, s2));
    ck_assert_msg(!memcmp(h, ff, sizeof ff), "a download racing with a memset landed %g", h[1]);
    /* the host synchronised the first stream: ordered */
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, h, dev, 4 * N, s2));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, s2));
    ck_assert(h[0] == 0 && h[N - 1] == 0);
    CK(SN_CUDA_CHECK(a, &e, cuMemFreeHost, h));
    CK(SN_CUDA_CHECK(a, &e, cuMemFree, dev));
    CK(SN_CUDA_CHECK(a, &e, cuEventDestroy, ev));
    CK(SN_CUDA_CHECK(a, &e, cuStreamDestroy, s2));
    lt_close(&L);
}
END_TEST

START_TEST(gemm_plans_match_a_reference) {
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    CUstream stream = L.stream;
    cublasLtHandle_t lt = L.lt;
    sn_err e;
    enum { M = 5, N = 7, K = 3, NB = 3, N8 = 8, WS = 1 << 20 };
    /* plain, each transpose, both, batched, batched with B shared, the bias epilogue; the GELU
     * epilogues (rows of N8: the aux's leading dimension is a multiple of 8) */
    sn_gemm_shape shapes[] = {
        {.M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = N, .ldd = N},
        {.ta = true, .M = M, .N = N, .K = K, .batch = 1, .lda = M, .ldb = N, .ldd = N},
        {.tb = true, .M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = K, .ldd = N},
        {.ta = true, .tb = true, .M = M, .N = N, .K = K, .batch = 1, .lda = M, .ldb = K, .ldd = N},
        {.tb = true, .M = M, .N = N, .K = K, .batch = NB, .lda = K, .ldb = K, .ldd = N,
         .stride_a = M * K, .stride_b = N * K, .stride_d = M * N},
        {.ta = true, .M = M, .N = N, .K = K, .batch = NB, .lda = M, .ldb = N, .ldd = N,
         .stride_a = M * K, .stride_b = 0, .stride_d = M * N},
        {.M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = N, .ldd = N, .epi = SN_EPI_BIAS},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8, .epi = SN_EPI_GELU_BIAS},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8,
         .epi = SN_EPI_GELU_AUX_BIAS},
        {.tb = true, .M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = K, .ldd = N8,
         .epi = SN_EPI_DGELU},
        /* accum: beta = 1, C (D's type) another buffer, alone and with each epilogue */
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8, .accum = true},
        {.ta = true, .tb = true, .M = M, .N = N8, .K = K, .batch = 1, .lda = M, .ldb = K,
         .ldd = N8, .accum = true},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8, .epi = SN_EPI_BIAS,
         .accum = true},
        {.M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = N8, .ldd = N8,
         .epi = SN_EPI_GELU_AUX_BIAS, .accum = true},
        {.tb = true, .M = M, .N = N8, .K = K, .batch = 1, .lda = K, .ldb = K, .ldd = N8,
         .epi = SN_EPI_DGELU, .accum = true},
    };
    CUdeviceptr dA, dB, dD, dbias, daux, dC, ws;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * NB * M * K));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dB, 4 * NB * K * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * NB * M * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dbias, 4 * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &daux, 4 * M * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dC, 4 * M * N8));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &ws, WS));
    float A[NB * M * K], Bm[NB * K * N8], bias[N8], D[NB * M * N8], aux[M * N8], C[M * N8];
    char sA[sizeof A], sB[sizeof Bm], sbias[sizeof bias], sD[sizeof D], saux[sizeof aux],
        sC[sizeof C];
    double want[NB * M * N8], got[NB * M * N8], want_aux[M * N8], got_aux[M * N8];
    /* f32 (fp32 compute); bf16 and f16 operands (autocast) into f32 and into their own type */
    const sn_dtype types[][2] = {{SN_F32, SN_F32}, {SN_BF16, SN_F32}, {SN_F16, SN_F32},
                                 {SN_BF16, SN_BF16}, {SN_F16, SN_F16}};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            sn_gemm_shape s = shapes[i];
            s.ab = types[ti][0];
            s.d = s.bias_t = s.aux_t = s.c_t = types[ti][1];
            int64_t nd = s.batch * s.M * s.N;
            fill(A, NB * M * K, 1 + i);
            fill(Bm, NB * K * N8, 100 + i);
            fill(bias, N8, 200 + i);
            fill(aux, M * N8, 300 + i);
            for (int j = 0; j < M * N8; j++) aux[j] *= 3; /* GELU inputs over [-3, 3] */
            fill(C, M * N8, 400 + i);
            /* the reference multiplies the values as stored: rounded to the operands' type */
            to_dtype(s.ab, A, NB * M * K, sA);
            to_dtype(s.ab, Bm, NB * K * N8, sB);
            to_dtype(s.d, bias, N8, sbias);
            to_dtype(s.d, aux, M * N8, saux);
            to_dtype(s.d, C, M * N8, sC);
            from_dtype(s.d, sC, M * N8, C); /* the reference adds C as stored */
            reference(&s, A, Bm, bias, aux, C, want, want_aux);
            size_t ab = s.ab == SN_F32 ? 4 : 2, db = s.d == SN_F32 ? 4 : 2;
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, sA, ab * NB * M * K, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, sB, ab * NB * K * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dbias, sbias, db * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, daux, saux, db * M * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dC, sC, db * M * N8, stream));
            sn_gemm_plan *p;
            CK(sn_gemm_plan_new(a, lt, &s, false, WS, &p, &e));
            CK(sn_gemm_plan_run(a, lt, p, dD, dA, dB, sn_gemm_has_bias(s.epi) ? dbias : 0,
                                sn_gemm_has_aux(s.epi) ? daux : 0,
                                s.accum ? dC : 0, ws, WS, stream, &e));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, sD, dD, db * (size_t)nd, stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, saux, daux, db * M * N8, stream));
            CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
            from_dtype(s.d, sD, nd, D);
            for (int64_t j = 0; j < nd; j++) got[j] = D[j];
            char what[112];
            snprintf(what, sizeof what, "GEMM %zu (%s into %s, ta %d, tb %d, batch %lld, %s%s)",
                     i, sn_dtype_name(s.ab), sn_dtype_name(s.d), s.ta, s.tb, (long long)s.batch,
                     sn_epilogue_name(s.epi), s.accum ? " + C" : "");
            /* f32 D: the f32 rounding of a double sum (and f32 GELU); 16-bit D: one rounding
             * (2^-9, 2^-12) */
            double tol = s.d == SN_F32 ? 1e-6 : s.d == SN_BF16 ? 4e-3 : 5e-4;
            sn_check_close(what, got, want, (size_t)nd, tol, 1);
            if (s.epi == SN_EPI_GELU_AUX_BIAS) { /* the GELU input, stored in D's type */
                from_dtype(s.d, saux, M * N8, aux);
                for (int64_t j = 0; j < M * N8; j++) got_aux[j] = aux[j];
                sn_check_close("the GELU's input (aux)", got_aux, want_aux, M * N8, tol, 1);
            }
            sn_gemm_plan_free(a, p);
        }
    /* operands only 64-byte aligned (the memory planner's promise; cuBLASLt's heuristic assumes
     * 256 unless told): the plan's algorithm must take them (the stand-in refuses an operand
     * less aligned than the preference the algorithm was chosen for, as cuBLASLt may fail) */
    {
        sn_gemm_shape s = shapes[0];
        fill(A, M * K, 1);
        fill(Bm, K * N, 100);
        reference(&s, A, Bm, NULL, NULL, NULL, want, NULL);
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA + 64, A, 4 * M * K, stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB + 64, Bm, 4 * K * N, stream));
        sn_gemm_plan *p;
        CK(sn_gemm_plan_new(a, lt, &s, false, WS, &p, &e));
        CK(sn_gemm_plan_run(a, lt, p, dD + 64, dA + 64, dB + 64, 0, 0, 0, ws, WS, stream, &e));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, D, dD + 64, 4 * M * N, stream));
        CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
        for (int64_t j = 0; j < M * N; j++) got[j] = D[j];
        sn_check_close("GEMM on 64-byte aligned operands", got, want, (size_t)(M * N), 1e-6, 1);
        sn_gemm_plan_free(a, p);
    }
    /* operands read in place (kernel.h: operand views): bf16 A and B inside rows of 24, at
     * elements 8 and 16 (16 and 32 bytes: the plan must say so, as the stand-in refuses an
     * operand less aligned than the preference its algorithm was chosen for) */
    {
        enum { VK = 8, VN = 8, LD = 24 };
        sn_gemm_shape s = {.M = M, .N = VN, .K = VK, .batch = 1, .lda = LD, .ldb = LD, .ldd = VN,
                           .off_a = 8, .off_b = 16, .ab = SN_BF16, .d = SN_F32,
                           .bias_t = SN_F32, .aux_t = SN_F32, .c_t = SN_F32};
        float Av[M * LD], Bv[VK * LD];
        uint16_t hA[M * LD], hB[VK * LD];
        fill(Av, M * LD, 7);
        fill(Bv, VK * LD, 8);
        to_dtype(SN_BF16, Av, M * LD, hA);
        to_dtype(SN_BF16, Bv, VK * LD, hB);
        from_dtype(SN_BF16, hA, M * LD, Av);
        from_dtype(SN_BF16, hB, VK * LD, Bv);
        reference(&s, Av + 8, Bv + 16, NULL, NULL, NULL, want, NULL);
        CUdeviceptr vA, vB;
        CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &vA, sizeof hA));
        CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &vB, sizeof hB));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, vA, hA, sizeof hA, stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, vB, hB, sizeof hB, stream));
        sn_gemm_plan *p;
        CK(sn_gemm_plan_new(a, lt, &s, false, WS, &p, &e));
        CK(sn_gemm_plan_run(a, lt, p, dD, vA, vB, 0, 0, 0, ws, WS, stream, &e));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, D, dD, 4 * M * VN, stream));
        CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
        for (int64_t j = 0; j < M * VN; j++) got[j] = D[j];
        sn_check_close("GEMM of operands read in place", got, want, (size_t)(M * VN), 1e-6, 1);
        sn_gemm_plan_free(a, p);
        CK(SN_CUDA_CHECK(a, &e, cuMemFree, vA));
        CK(SN_CUDA_CHECK(a, &e, cuMemFree, vB));
    }
    /* types cuBLASLt has no plan for here are refused by name before any call */
    sn_gemm_shape bad = shapes[6];
    bad.ab = SN_BF16;
    bad.d = SN_F16;
    bad.bias_t = SN_F16;
    sn_gemm_plan *none = NULL;
    ck_assert_int_eq(sn_gemm_plan_new(a, lt, &bad, false, WS, &none, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "bf16 operands into f16"), "%s", e.msg);
    bad.d = SN_F32; /* a bias of another type than D's */
    ck_assert_int_eq(sn_gemm_plan_new(a, lt, &bad, false, WS, &none, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "with a bias of f16"), "%s", e.msg);
    ck_assert_ptr_null(none);
    /* bf16 in and out, fp32 accumulation, column-major (what a bf16 ceiling measures) */
    enum { S = 6 };
    uint16_t hA[S * S], hB[S * S], hD[S * S];
    double want16[S * S], got16[S * S];
    for (int i = 0; i < S * S; i++) { /* small integers and halves: exact in bf16 */
        hA[i] = (uint16_t)(0x3f80 + (i % 5) * 0x40); /* 1, 1.5, 2, 2.5, 3 */
        hB[i] = (uint16_t)((i % 3 ? 0x3f00 : 0xbf80)); /* 0.5 or -1 */
    }
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) {
            double v = 0;
            for (int k = 0; k < S; k++) {
                uint32_t ua = (uint32_t)hA[i + k * S] << 16, ub = (uint32_t)hB[k + j * S] << 16;
                float fa, fb;
                memcpy(&fa, &ua, 4);
                memcpy(&fb, &ub, 4);
                v += (double)fa * fb;
            }
            want16[i + j * S] = v;
        }
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay;
    const float one = 1, zero = 0;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, hA, sizeof hA, stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, hB, sizeof hB, stream));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescCreate, &desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &lay, CUDA_R_16BF, S, S, S));
    cublasLtMatmulPreference_t pref;
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulPreferenceCreate, &pref));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulAlgoGetHeuristic, lt, desc, lay, lay, lay, lay, pref, 1,
                     &heur, &found));
    ck_assert_int_eq(found, 1);
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmul, lt, desc, &one, (void *)(uintptr_t)dA, lay,
                     (void *)(uintptr_t)dB, lay, &zero, (void *)(uintptr_t)dD, lay,
                     (void *)(uintptr_t)dD, lay, &heur.algo, NULL, 0, stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, hD, dD, sizeof hD, stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
    for (int i = 0; i < S * S; i++) {
        uint32_t u = (uint32_t)hD[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        got16[i] = f;
    }
    sn_check_close("bf16 GEMM", got16, want16, S * S, 1e-2, 1);
    a->cublasLtMatmulPreferenceDestroy(pref);
    a->cublasLtMatrixLayoutDestroy(lay);
    a->cublasLtMatmulDescDestroy(desc);
    lt_close(&L);
}
END_TEST

/* What cuBLASLt's documentation rules out for the GELU input matrix (the aux of GELU_AUX_BIAS
 * and DGELU), the stand-in refuses: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD not a multiple of 8 or
 * less than D's rows, EPILOGUE_AUX_DATA_TYPE set outside FP8 kernels, no aux pointer, an aux
 * less aligned at the matmul than the pointer the heuristic chose the algorithm for; and
 * sinter's plan refuses rows of a width that is no multiple of 8 before any call. */
START_TEST(gelu_aux_rules_are_cublaslts) {
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    CUstream stream = L.stream;
    cublasLtHandle_t lt = L.lt;
    sn_err e;
    enum { S = 16 }; /* D (S, S) = A (S, S) B (S, S), f32 */
    CUdeviceptr dA, dD, daux;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * S * S));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * S * S));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &daux, 4 * S * S + 64));
    float zeros[S * S] = {0};
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, zeros, sizeof zeros, stream));
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, daux, zeros, sizeof zeros, stream));
    cublasLtMatrixLayout_t lay;
    cublasLtMatmulPreference_t pref;
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &lay, CUDA_R_32F, S, S, S));
    CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulPreferenceCreate, &pref));
    const float one = 1, zero = 0;
    /* {epilogue, aux ld, aux data type (-2: unset), aux at the heuristic (offset into daux; -1:
     * unset), aux at the matmul, the heuristic's status, the matmul's} */
    const struct {
        int32_t epi;
        int64_t ld;
        int32_t type;
        int at_heur, at_run, heur, run;
    } cases[] = {
        {CUBLASLT_EPILOGUE_DGELU, S, -2, 0, 0, 0, 0},                        /* as documented */
        {CUBLASLT_EPILOGUE_GELU_AUX, S, -1, 0, 0, 0, 0},                     /* -1: D's type */
        {CUBLASLT_EPILOGUE_GELU_AUX, 12, -2, 0, 0, 7, 7},                    /* ld % 8 */
        {CUBLASLT_EPILOGUE_DGELU, 8, -2, 0, 0, 7, 7},                        /* ld < D's rows */
        {CUBLASLT_EPILOGUE_DGELU, S, CUDA_R_32F, 0, 0, 7, 7},                /* a type set */
        {CUBLASLT_EPILOGUE_GELU_AUX, S, -2, -1, -1, 0, 7},                   /* no aux pointer */
        {CUBLASLT_EPILOGUE_DGELU, S, -2, 0, 4, 0, 15},                       /* less aligned */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cublasLtMatmulDesc_t desc;
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescCreate, &desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                          &cases[i].epi, sizeof cases[i].epi), 0);
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                          &cases[i].ld, sizeof cases[i].ld), 0);
        if (cases[i].type != -2)
            ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(
                                 desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &cases[i].type,
                                 sizeof cases[i].type), 0);
        void *aux = cases[i].at_heur < 0 ? NULL : (void *)(uintptr_t)(daux + (CUdeviceptr)cases[i].at_heur);
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &aux, sizeof aux), 0);
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        int st = a->cublasLtMatmulAlgoGetHeuristic(lt, desc, lay, lay, lay, lay, pref, 1, &heur, &found);
        ck_assert_msg(st == cases[i].heur, "case %zu: the heuristic's status %d, want %d", i, st,
                      cases[i].heur);
        if (st) {
            memset(&heur, 0, sizeof heur);
            heur.algo.data[0] = 0x5d; /* the matmul checks again, with the stand-in's algorithm */
        }
        aux = cases[i].at_run < 0 ? NULL : (void *)(uintptr_t)(daux + (CUdeviceptr)cases[i].at_run);
        ck_assert_int_eq(a->cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &aux, sizeof aux), 0);
        st = a->cublasLtMatmul(lt, desc, &one, (void *)(uintptr_t)dA, lay, (void *)(uintptr_t)dA, lay,
                              &zero, (void *)(uintptr_t)dD, lay, (void *)(uintptr_t)dD, lay,
                              &heur.algo, NULL, 0, stream);
        ck_assert_msg(st == cases[i].run, "case %zu: the matmul's status %d, want %d", i, st,
                      cases[i].run);
        a->cublasLtMatmulDescDestroy(desc);
    }
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, stream));
    /* sinter's plan: an aux needs rows of a multiple of 8, one GEMM */
    sn_gemm_shape s = {.M = S, .N = 12, .K = S, .batch = 1, .lda = S, .ldb = 12, .ldd = 12,
                       .epi = SN_EPI_DGELU};
    sn_gemm_plan *p = NULL;
    ck_assert_int_eq(sn_gemm_plan_new(a, lt, &s, false, 0, &p, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "multiple of 8") && strstr(e.msg, "EPILOGUE_AUX_LD"), "%s", e.msg);
    ck_assert_ptr_null(p);
    a->cublasLtMatmulPreferenceDestroy(pref);
    a->cublasLtMatrixLayoutDestroy(lay);
    lt_close(&L);
}
END_TEST

/* A linear layer as autocast leaves it, cast(x @ w + f32(b)) in bf16 or f16 (and the f32
 * x @ w + b): fuse makes one GEMM kernel with the BIAS epilogue, and it agrees with the
 * interpreter on the CPU device and on the stand-in's cuBLASLt (one rounding of the output:
 * half a unit in the last place, and the f32 sums' own error). */
/* The linear layer's graph in storage type t: inputs x, w, b; y the output; bt the bias cast. */
static sn_graph *linear_graph(sn_dtype t, sn_node **x, sn_node **w, sn_node **b, sn_node **bt,
                              sn_node **y) {
    sn_graph *g = sn_graph_new();
    *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 8, 16));
    *w = sn_input(g, "w", SN_F32, SN_SHAPE(16, 24)), *b = sn_input(g, "b", SN_F32, SN_SHAPE(24));
    *bt = sn_cast(g, *b, t); /* the epilogue's bias, of the output's dtype */
    *y = sn_cast(g, sn_add(g, sn_matmul(g, sn_cast(g, *x, t), sn_cast(g, *w, t)),
                           sn_cast(g, *bt, SN_F32)), t);
    sn_graph_add_output(g, *y);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

START_TEST(bias_epilogue_matches_the_interpreter) {
    if (!have_nvrtc()) return;
    sn_dtype t = _i == 0 ? SN_BF16 : _i == 1 ? SN_F16 : SN_F32;
    double tol = t == SN_BF16 ? 0x1p-8 : t == SN_F16 ? 0x1p-10 : 1e-5;
    sn_node *x, *w, *b, *bt, *y;
    sn_graph *ref = linear_graph(t, &x, &w, &b, &bt, &y);
    sn_err e;
    float xv[256], wv[384], bv[24];
    fill(xv, 256, 1), fill(wv, 384, 2), fill(bv, 24, 3);
    sn_interp *it = sn_interp_new(ref, false);
    ck_assert(!sn_interp_set(it, x, xv, &e) && !sn_interp_set(it, w, wv, &e) &&
              !sn_interp_set(it, b, bv, &e) && !sn_interp_run(it, &e));
    const double *want = sn_interp_value(it, y);
    for (int d = 0; d < 2; d++) { /* each device's program, compiled for its target */
        sn_device *dev = NULL;
        if (d == 0) ck_assert_msg(sn_cpu_device_new(2, &dev, &e) == SN_OK, "%s", e.msg);
        else dev = cuda(NULL);
        sn_graph *g = linear_graph(t, &x, &w, &b, &bt, &y);
        sn_program *p;
        ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &dev->target}, &p, NULL, &e),
                      "%s", e.msg);
        int gemms = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->kind != SN_KER_GEMM) {
                ck_assert_msg(ker->kind == SN_KER_POINTWISE && ker->args[0]->op == SN_OP_CAST,
                              "%s: only the operands' casts besides the GEMM", ker->name);
                continue;
            }
            ck_assert_int_eq(ker->gemm.epilogue, SN_EPI_BIAS);
            ck_assert(ker->args[0] == y && ker->args[3] == bt);
            gemms++;
        }
        ck_assert_int_eq(gemms, 1);
        sn_exec *ex;
        ck_assert_msg(!sn_exec_new(dev, p, &ex, &e), "%s", e.msg);
        ck_assert(!sn_exec_set(ex, x, xv, &e) && !sn_exec_set(ex, w, wv, &e) &&
                  !sn_exec_set(ex, b, bv, &e));
        ck_assert_msg(!sn_exec_run(ex, &e), "%s", e.msg);
        float got[384], raw[384]; /* the output's own storage, widened */
        double gd[384];
        ck_assert_msg(!sn_exec_get(ex, y, raw, &e), "%s", e.msg);
        from_dtype(t, raw, 384, got);
        for (int i = 0; i < 384; i++) gd[i] = got[i];
        sn_check_close(d ? "linear, stand-in" : "linear, cpu", gd, want, 384, tol, tol);
        sn_exec_free(ex);
        sn_program_free(p);
        sn_graph_free(g);
        sn_device_free(dev);
    }
    sn_interp_free(it);
    sn_graph_free(ref);
}
END_TEST

/* c_fc's GELU and its gradient as autocast leaves them, in storage type t (bf16, f16; f32: no
 * casts): h = rnd(x @ w1 + f32(b1)), g = rnd(gelu(f32(h))), and the backward's
 * dh = rnd(gelu_bwd(f32(h), f32(rnd(dy @ w2^T)))), outputs g and dh; h (the aux) is an output
 * too when aux_out. */
typedef struct {
    sn_node *x, *w1, *b1, *dy, *w2, *h, *g, *dh;
} mlp_nodes;

static sn_node *as(sn_graph *g, sn_node *x, sn_dtype t) { return x->dtype == t ? x : sn_cast(g, x, t); }

static sn_graph *mlp_graph(sn_dtype t, mlp_nodes *m) {
    sn_graph *g = sn_graph_new();
    m->x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 8, 16));
    m->w1 = sn_input(g, "w1", SN_F32, SN_SHAPE(16, 32));
    m->b1 = sn_input(g, "b1", SN_F32, SN_SHAPE(32));
    m->dy = sn_input(g, "dy", SN_F32, SN_SHAPE(2, 8, 8));
    m->w2 = sn_input(g, "w2", SN_F32, SN_SHAPE(32, 8));
    sn_node *v = sn_add(g, sn_matmul(g, as(g, m->x, t), as(g, m->w1, t)), as(g, as(g, m->b1, t), SN_F32));
    m->h = as(g, v, t);
    m->g = as(g, sn_gelu(g, as(g, m->h, SN_F32)), t);
    sn_node *p = as(g, sn_matmul_t(g, as(g, m->dy, t), as(g, m->w2, t), false, true), t);
    m->dh = as(g, sn_gelu_bwd(g, as(g, m->h, SN_F32), as(g, p, SN_F32)), t);
    sn_graph_add_output(g, m->g);
    sn_graph_add_output(g, m->dh);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

/* Multiples of 1/den in [-1, 1] (den <= 128: exact in bf16). */
static void dyadic(float *x, size_t n, uint64_t seed, int den) {
    fill(x, n, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(int)(x[i] * (float)den) / (float)den;
}

/* The GELU epilogues (kernel.h: GELU_AUX_BIAS, DGELU) on the CPU device and on the stand-in's
 * cuBLASLt: one GEMM kernel each, nothing else but the operands' casts; the same bits from the
 * two devices on operands whose products are exact in f32 (so that the epilogue alone decides:
 * the same f32 formulas, program/epilogue.h; a CPU device that rounded GELU's input to 16 bits
 * first, as the graph does, was caught here), and of the interpreter, which rounds GELU's input
 * and the product where the epilogues do not, within 2^-7 (bf16), 2^-9 (f16) of the largest
 * value: four units of roundoff. */
START_TEST(gelu_epilogues_match_the_interpreter) {
    if (!have_nvrtc()) return;
    sn_dtype t = _i == 0 ? SN_BF16 : _i == 1 ? SN_F16 : SN_F32;
    double tol = t == SN_BF16 ? 0x1p-7 : t == SN_F16 ? 0x1p-9 : 1e-6;
    mlp_nodes r, m;
    sn_graph *ref = mlp_graph(t, &r);
    sn_err e;
    float xv[256], w1v[512], b1v[32], dyv[128], w2v[256];
    /* eighths times 64ths: sums of 16 or 8 products exact in f32, with more bits than bf16 and
       f16 keep, so that the roundings the epilogues skip show */
    dyadic(xv, 256, 1, 8), dyadic(w1v, 512, 2, 64), dyadic(b1v, 32, 3, 64), dyadic(dyv, 128, 4, 8);
    dyadic(w2v, 256, 5, 64);
    sn_interp *it = sn_interp_new(ref, false);
    ck_assert(!sn_interp_set(it, r.x, xv, &e) && !sn_interp_set(it, r.w1, w1v, &e) &&
              !sn_interp_set(it, r.b1, b1v, &e) && !sn_interp_set(it, r.dy, dyv, &e) &&
              !sn_interp_set(it, r.w2, w2v, &e) && !sn_interp_run(it, &e));
    uint16_t bits[2][2][512]; /* device, output (g, dh): the stored 16 or 32 bits, 512 values */
    for (int d = 0; d < 2; d++) {
        sn_device *dev = NULL;
        if (d == 0) ck_assert_msg(sn_cpu_device_new(2, &dev, &e) == SN_OK, "%s", e.msg);
        else dev = cuda(NULL);
        sn_graph *g = mlp_graph(t, &m);
        sn_program *p;
        sn_target tg = dev->target; /* the CPU's with the epilogues too (its own keeps the GELU
                                       in pointwise kernels) */
        tg.gelu_unfused = false;
        tg.dgelu_min_elems = 0; /* the DGELU epilogue at this size too (target.h) */
        ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &tg}, &p, NULL, &e),
                      "%s", e.msg);
        int epi[SN_EPI_COUNT] = {0};
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->kind == SN_KER_GEMM) epi[ker->gemm.epilogue]++;
            else ck_assert_msg(ker->kind == SN_KER_POINTWISE && ker->n_instr == 1 &&
                               ker->args[0]->op == SN_OP_CAST, "%s: only the operands' casts "
                               "besides the GEMMs", ker->name);
        }
        ck_assert_int_eq(epi[SN_EPI_GELU_AUX_BIAS], 1);
        ck_assert_int_eq(epi[SN_EPI_DGELU], 1);
        sn_exec *ex;
        ck_assert_msg(!sn_exec_new(dev, p, &ex, &e), "%s", e.msg);
        ck_assert(!sn_exec_set(ex, m.x, xv, &e) && !sn_exec_set(ex, m.w1, w1v, &e) &&
                  !sn_exec_set(ex, m.b1, b1v, &e) && !sn_exec_set(ex, m.dy, dyv, &e) &&
                  !sn_exec_set(ex, m.w2, w2v, &e));
        ck_assert_msg(!sn_exec_run(ex, &e), "%s", e.msg);
        const sn_node *outs[2] = {m.g, m.dh}, *want[2] = {r.g, r.dh};
        for (int o = 0; o < 2; o++) {
            float raw[512], got[512];
            double gd[512];
            ck_assert_msg(!sn_exec_get(ex, outs[o], raw, &e), "%s", e.msg);
            memcpy(bits[d][o], raw, sizeof bits[d][o]); /* f32: the low halves of the first 256 */
            from_dtype(t, raw, 512, got);
            for (int i = 0; i < 512; i++) gd[i] = got[i];
            char what[64];
            snprintf(what, sizeof what, "%s, %s, %s", o ? "dgelu" : "gelu", sn_dtype_name(t),
                     d ? "stand-in" : "cpu");
            sn_check_close(what, gd, sn_interp_value(it, want[o]), 512, tol, 1);
            if (t == SN_F32) continue;
            if (d) ck_assert_msg(!memcmp(bits[0][o], bits[1][o], sizeof bits[0][o]),
                                 "%s: not the cpu device's bits", what);
        }
        sn_exec_free(ex);
        sn_program_free(p);
        sn_graph_free(g);
        sn_device_free(dev);
    }
    sn_interp_free(it);
    sn_graph_free(ref);
}
END_TEST

/* ---- SN_GEMM_TUNE (runtime/cuda/gemm_tune.c) on the stand-in's algorithms ---- */

/* stderr into a temporary file from begin to end, which returns what was written (malloc'd). */
typedef struct {
    FILE *f;
    int saved;
} stderr_capture;

static void capture_begin(stderr_capture *c) {
    fflush(stderr);
    ck_assert((c->f = tmpfile()) && (c->saved = dup(2)) >= 0 && dup2(fileno(c->f), 2) >= 0);
}

static char *capture_end(stderr_capture *c) {
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    long n = ftell(c->f);
    char *s = calloc((size_t)n + 1, 1);
    rewind(c->f);
    ck_assert(s && fread(s, 1, (size_t)n, c->f) == (size_t)n);
    fclose(c->f);
    return s;
}

/* SN_GEMM_TUNE's values: 0 or unset off, 2 to 32 on, any other refused naming what it takes. */
START_TEST(gemm_tune_setting_is_checked) {
    const struct {
        const char *v;
        int n; /* -1: refused */
    } cases[] = {{"", 0}, {"0", 0}, {"2", 2}, {"16", 16}, {"32", 32}, {"1", -1}, {"33", -1},
                 {"-4", -1}, {"16x", -1}, {"many", -1}, {"99999999999999999999", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("SN_GEMM_TUNE", cases[i].v, 1);
        sn_gemm_tuner t;
        sn_err e = {0};
        sn_status st = sn_gemm_tuner_init(&t, &e);
        ck_assert_int_eq(st, cases[i].n < 0 ? SN_ERR_INVALID : SN_OK);
        if (cases[i].n >= 0) ck_assert_int_eq(t.n, cases[i].n);
        else ck_assert_msg(strstr(e.msg, cases[i].v) && strstr(e.msg, "2 to 32"), "%s", e.msg);
        sn_gemm_tuner_free(&t);
    }
    /* the device refuses to start with a bad one, saying so */
    setenv("SN_GEMM_TUNE", "many", 1);
    use_standin();
    sn_device *d = NULL;
    sn_err e;
    ck_assert_int_eq(sn_cuda_device_new(0, &d, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "SN_GEMM_TUNE=many");
    ck_assert_ptr_null(d);
    unsetenv("SN_GEMM_TUNE");
}
END_TEST

/* The stand-in's heuristic asked for more than one gives four algorithms that compute alike:
 * the first modeled at 30 us a run, the second at 10 (the fastest) without an epilogue and 30
 * with one (a tie), the third at 50, the fourth refusing to run. Tuning runs each that runs once
 * and then 5 times timed, and keeps the fastest: the second for a plain product and for one
 * adding its C in place (whose D then holds A B + C, untouched by the tuning), the first on a
 * tie (the bias epilogue) and when asked for 2 of a bias GEMM; an alike problem takes the
 * winner with nothing run; a problem whose scratch does not fit keeps the first. */
START_TEST(gemm_tuning_keeps_the_fastest) {
    lt_setup L;
    lt_open(&L);
    sn_cuda_api *a = &L.a;
    sn_err e;
    uint64_t (*runs)(int) = (uint64_t(*)(int))dlsym(a->handle[SN_LIB_CUBLASLT], "sn_standin_cublaslt_runs");
    ck_assert_ptr_nonnull(runs);
    enum { M = 5, N = 8, K = 3, WS = 1 << 20 };
    sn_gemm_shape plain = {.M = M, .N = N, .K = K, .batch = 1, .lda = K, .ldb = N, .ldd = N};
    sn_gemm_shape bias = plain, accum = plain, huge = plain;
    bias.epi = SN_EPI_BIAS;
    accum.accum = true;
    huge.M = huge.N = huge.ldb = huge.ldd = 1 << 17; /* 64 GiB of f32 D: more than the 4G */
    const struct {
        const sn_gemm_shape *s;
        int n, tried, ran, chosen;
        double first_us, chosen_us;
        bool known, no_scratch;
    } cases[] = {
        {&plain, 4, 4, 3, 1, 30, 10, false, false},  {&bias, 4, 4, 3, 0, 30, 30, false, false},
        {&accum, 4, 4, 3, 1, 30, 10, false, false},  {&plain, 4, 0, 0, 1, 0, 0, true, false},
        {&bias, 2, 2, 2, 0, 30, 30, false, false},   {&huge, 4, 4, 0, 0, 0, 0, false, true},
    };
    CUdeviceptr dA, dB, dD, ws;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * M * K));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dB, 4 * K * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * M * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &ws, WS));
    float A[M * K], Bm[K * N], C[M * N], D[M * N];
    double want[M * N], got[M * N];
    fill(A, M * K, 1);
    fill(Bm, K * N, 2);
    fill(C, M * N, 3);
    setenv("SN_GEMM_TUNE", "4", 1);
    setenv("SN_GEMM_TUNE_LOG", "1", 1);
    sn_gemm_tuner t[2]; /* asked for 4, and for 2 */
    CK(sn_gemm_tuner_init(&t[0], &e));
    setenv("SN_GEMM_TUNE", "2", 1);
    CK(sn_gemm_tuner_init(&t[1], &e));
    stderr_capture cap;
    capture_begin(&cap);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sn_gemm_plan *p;
        CK(sn_gemm_plan_new(a, L.lt, cases[i].s, false, WS, &p, &e));
        uint64_t before[4];
        for (int k = 0; k < 4; k++) before[k] = runs(k);
        sn_gemm_tune_result r;
        CK(sn_gemm_tune(&t[cases[i].n == 2], a, L.lt, p, L.stream, ws, WS, &r, &e));
        ck_assert_msg(r.tried == cases[i].tried && r.ran == cases[i].ran &&
                      r.chosen == cases[i].chosen && r.known == cases[i].known &&
                      r.no_scratch == cases[i].no_scratch &&
                      fabs(r.first_s - 1e-6 * cases[i].first_us) < 1e-9 &&
                      fabs(r.chosen_s - 1e-6 * cases[i].chosen_us) < 1e-9,
                      "case %zu: %d tried, %d ran, #%d chosen, %g and %g s, known %d, no scratch "
                      "%d", i, r.tried, r.ran, r.chosen, r.first_s, r.chosen_s, r.known,
                      r.no_scratch);
        for (int k = 0; k < 4; k++) /* each candidate that runs: once, then 5 times timed */
            ck_assert_int_eq(runs(k) - before[k], k < cases[i].ran ? 6 : 0);
        if (cases[i].s == &huge) {
            sn_gemm_plan_free(a, p);
            continue;
        }
        /* the plan runs its winner on the program's buffers: A B (+ C already in D, in place) */
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, A, sizeof A, L.stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, Bm, sizeof Bm, L.stream));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dD, C, sizeof C, L.stream));
        for (int k = 0; k < 4; k++) before[k] = runs(k);
        float zeros[N] = {0};
        CUdeviceptr dbias = dD + 4 * M * N; /* unused without the epilogue */
        if (cases[i].s->epi == SN_EPI_BIAS) {
            CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dbias, sizeof zeros));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dbias, zeros, sizeof zeros, L.stream));
        }
        CK(sn_gemm_plan_run(a, L.lt, p, dD, dA, dB, cases[i].s->epi == SN_EPI_BIAS ? dbias : 0, 0,
                            cases[i].s->accum ? dD : 0, ws, WS, L.stream, &e));
        CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, D, dD, sizeof D, L.stream));
        CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
        if (cases[i].s->epi == SN_EPI_BIAS) CK(SN_CUDA_CHECK(a, &e, cuMemFree, dbias));
        ck_assert_int_eq(runs(cases[i].chosen) - before[cases[i].chosen], 1);
        reference(cases[i].s, A, Bm, zeros, NULL, C, want, NULL);
        for (int j = 0; j < M * N; j++) got[j] = D[j];
        sn_check_close("the tuned plan's product", got, want, M * N, 1e-6, 1);
        sn_gemm_plan_free(a, p);
    }
    char *log = capture_end(&cap);
    ck_assert_int_eq(t[0].timed, 3); /* plain, bias, accum: the alike one and the huge one not */
    ck_assert_int_eq(t[0].switched, 2);
    ck_assert_int_eq(t[1].timed, 1);
    /* SN_GEMM_TUNE_LOG: a line per problem timed, one for the huge one's want of room */
    ck_assert_has(log, "sinter: gemm tune: 5 x 8 x 3, batch 1, f32 into f32, epilogue none: the "
                  "heuristic's first 30.00 us, #1 10.00 us (3.000x), 3 of 4 candidates ran\n");
    ck_assert_has(log, "epilogue bias: the heuristic's first 30.00 us, #0 30.00 us (1.000x), 3 of 4");
    ck_assert_has(log, "epilogue none + C: the heuristic's first 30.00 us, #1 10.00 us");
    ck_assert_has(log, "epilogue bias: the heuristic's first 30.00 us, #0 30.00 us (1.000x), 2 of 2");
    ck_assert_has(log, "131072 x 131072 x 3, batch 1, f32 into f32, epilogue none: no room for 64");
    ck_assert_has(log, "of scratch operands: the heuristic's first kept, untimed\n");
    printf("test_standin: SN_GEMM_TUNE's lines:\n%s", log);
    free(log);
    for (int k = 0; k < 2; k++) sn_gemm_tuner_free(&t[k]);
    unsetenv("SN_GEMM_TUNE");
    unsetenv("SN_GEMM_TUNE_LOG");
    lt_close(&L);
}
END_TEST

/* Tuned (SN_GEMM_TUNE=4) tiny GPT-2 in bf16 and its LoRA (whose base GEMMs add the adapters' C:
 * _i) train on the stand-in to the bit as untuned: its algorithms compute alike, and the
 * tuning touches none of the program's buffers. The plain GEMMs take the fastest (the second),
 * those with an epilogue keep the first (a tie). */
START_TEST(gemm_tuning_trains_as_untuned) {
    if (!have_nvrtc()) return;
    enum { N = 6 };
    double loss[2][N], norm[2][N];
    sn_cuda_stats st[2];
    for (int tuned = 0; tuned < 2; tuned++) {
        if (tuned) setenv("SN_GEMM_TUNE", "4", 1);
        sn_device *d = cuda(NULL);
        int stored;
        sn_graph *g = _i ? tiny_lora_at(SN_PRECISION_BF16, false, &stored) : tiny_at(SN_PRECISION_BF16);
        sn_err e;
        sn_trainer *tr = trainer_on(g, d, &e);
        ck_assert_msg(tr, "%s", e.msg);
        int32_t x[B * T], y[B * T];
        for (int s = 0; s < N; s++) {
            sn_step_stats ss;
            batch(x, y, (uint64_t)s);
            ck_assert_msg(sn_trainer_step(tr, x, y, &ss, &e) == SN_OK, "step %d: %s", s, e.msg);
            loss[tuned][s] = ss.loss;
            norm[tuned][s] = ss.grad_norm;
        }
        sn_cuda_stats_get(d, &st[tuned]);
        if (tuned) ck_assert_has(d->name, ", GEMMs tuned (SN_GEMM_TUNE=4)");
        sn_trainer_free(tr);
        sn_graph_free(g);
        sn_device_free(d);
    }
    unsetenv("SN_GEMM_TUNE");
    ck_assert_int_eq(st[0].gemm_tuned, 0);
    ck_assert_int_gt(st[1].gemm_tuned, 0);
    ck_assert_int_lt(st[1].gemm_tuned, st[1].gemm_plans); /* alike problems timed once */
    ck_assert_int_gt(st[1].gemm_tune_switched, 0);
    ck_assert_int_lt(st[1].gemm_tune_switched, st[1].gemm_tuned); /* the bias epilogues' ties */
    for (int s = 0; s < N; s++)
        ck_assert_msg(loss[0][s] == loss[1][s] && norm[0][s] == norm[1][s], "step %d: loss %.17g "
                      "untuned, %.17g tuned; norm %.17g, %.17g", s, loss[0][s], loss[1][s],
                      norm[0][s], norm[1][s]);
    printf("test_standin: tiny GPT-2%s bf16 tuned (SN_GEMM_TUNE=4): %d GEMM plans, %d problems "
           "timed, %d switched; %d losses bit for bit as untuned (%.6f -> %.6f)\n",
           _i ? " LoRA" : "", st[1].gemm_plans, st[1].gemm_tuned, st[1].gemm_tune_switched, N,
           loss[1][0], loss[1][N - 1]);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("standin_gemm");
    TCase *tc = tcase_create("cublaslt");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, gemm_plans_match_a_reference);
    tcase_add_test(tc, gelu_aux_rules_are_cublaslts);
    tcase_add_loop_test(tc, bias_epilogue_matches_the_interpreter, 0, 3);
    tcase_add_loop_test(tc, gelu_epilogues_match_the_interpreter, 0, 3);
    tcase_add_test(tc, downloads_read_at_their_call_and_race_unordered);
    tcase_add_test(tc, gemm_tune_setting_is_checked);
    tcase_add_test(tc, gemm_tuning_keeps_the_fastest);
    tcase_add_loop_test(tc, gemm_tuning_trains_as_untuned, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
