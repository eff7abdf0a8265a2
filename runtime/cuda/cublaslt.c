/* cublaslt.c: one cuBLASLt plan per GEMM kernel, built when the program is loaded (matmul
 * descriptor, layouts, preference, the heuristic's algorithm, or with SN_GEMM_TUNE the fastest
 * of several: gemm_tune.c), run with no setup per call. A and B are f32 (fp32 or TF32 compute),
 * or both bf16 or both f16 (autocast; CUBLAS_COMPUTE_32F, f32 accumulation); D is f32 or A's
 * type. The epilogues set: CUBLASLT_EPILOGUE_DEFAULT, and
 * CUBLASLT_EPILOGUE_BIAS (the bias of D's type, cuBLASLt's rule for BIAS_DATA_TYPE outside fp8
 * and IMMA kernels: f32 with an f32 D, bf16 with a bf16 D; its pointer set before each run) for
 * GEMM kernels with a bias (program/kernel.h: SN_EPI_BIAS); CUBLASLT_EPILOGUE_GELU_BIAS,
 * _GELU_AUX_BIAS and _DGELU for the GELU epilogues (kernel.h), whose aux (the GELU input matrix,
 * D's type as EPILOGUE_AUX_DATA_TYPE left unset gives it; leading dimension
 * EPILOGUE_AUX_LD = N, which cuBLASLt wants a multiple of 8 and at least D^T's N rows) has its
 * pointer set before each run too; no others. accum (kernel.h) is beta = 1 with any of them and
 * a C of D's type and layout, another buffer or D's own (in place: cuBLASLt takes C == D with
 * identical layouts, which the one layout p->d gives); cuBLASLt computes the epilogue of
 * alpha A B + beta C (+ bias), whose f32 order of the two adds it does not document (the CPU
 * device adds the bias first, the graph's order; the stand-in sums in double).
 * FP8 (the fp8 pass's products: fp8_rules): A and B of CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2 (not
 * both E5M2), CUBLAS_COMPUTE_32F, scale type CUDA_R_32F, C and D f32, no epilogue, no scale
 * pointers (the scales are the graph's divisions after the product), FAST_ACCUM left off (its
 * default: the sums promoted to f32 periodically). cuBLASLt's FP8 kernels on Ada and Hopper take
 * only the "TN" form, its A transposed and its B not: with the convention below its A is our B
 * (op T: tb = 1, B stored (N, K)) and its B our A (op N: ta = 0, A stored (M, K)), both operands
 * K-major; and pointers and leading dimensions 16-byte aligned.
 * Convention: the row-major problem D (M, N) = op(A) @ op(B) is handed to cuBLASLt as its
 * column-major transpose D^T (N, M) = op(B)^T @ op(A)^T, so no layout needs a row order and an
 * (N) bias is cuBLASLt's per-row bias of D^T. */
#include <stdlib.h>
#include <string.h>

#include "cuda_rt.h"

/* The alignment every planned buffer has (passes/memplan.c places arena and persistent values
 * at multiples of 64 bytes in blocks from cuMemAlloc): the heuristic must choose algorithms that
 * take operands this aligned, not cuBLASLt's default assumption of 256. */
enum { OPERAND_ALIGN = 64 };

struct sn_gemm_plan {
    sn_gemm_shape s;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d; /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulPreference_t pref;
    bool tf32;     /* TF32 compute (part of what makes two plans alike: gemm_tune.c) */
    bool has_algo;
    cublasLtMatmulHeuristicResult_t heur;
};

sn_gemm_shape sn_gemm_shape_of(const sn_kernel *k) {
    const sn_node *mm = k->anchor, *A = mm->in[0], *B = mm->in[1];
    sn_gemm_shape s = {.ta = mm->a.ta, .tb = mm->a.tb};
    s.M = mm->shape[mm->rank - 2];
    s.N = mm->shape[mm->rank - 1];
    s.K = A->shape[A->rank - 1 - s.ta];
    const sn_gemm_view *v = k->gemm.view; /* operands read in place (kernel.h) */
    s.lda = v[0].ld ? v[0].ld : A->shape[A->rank - 1];
    s.ldb = v[1].ld ? v[1].ld : B->shape[B->rank - 1];
    s.off_a = v[0].off;
    s.off_b = v[1].off;
    s.ldd = s.N;
    s.batch = sn_numel(mm) / (s.M * s.N);
    if (B->rank == 2 && A->rank > 2 && !s.ta) { /* rows of every batch are one matrix */
        s.M *= s.batch;
        s.batch = 1;
    }
    s.stride_a = A->rank > 2 ? s.M * s.K : 0;
    s.stride_b = B->rank > 2 ? s.K * s.N : 0;
    s.stride_d = s.M * s.N;
    s.epi = k->gemm.epilogue;
    s.accum = k->gemm.accum;
    s.ab = A->dtype;
    s.b_t = B->dtype;
    s.d = k->args[0]->dtype; /* the matmul's f32, or its 16-bit cast (with a bias: of its sum) */
    int in = k->n_out + 2;   /* the epilogue's input (kernel.h): a bias, or DGELU's aux */
    s.bias_t = sn_gemm_has_bias(s.epi) ? k->args[in]->dtype : s.d;
    s.c_t = s.accum ? k->args[k->n_out + k->n_in - 1]->dtype : s.d; /* c: the last arg */
    s.aux_t = s.epi == SN_EPI_GELU_AUX_BIAS ? k->args[1]->dtype
              : s.epi == SN_EPI_DGELU ? k->args[in]->dtype : s.d;
    return s;
}

/* cuBLASLt's epilogue for ours. */
static int32_t epilogue_of(sn_epilogue e) {
    switch (e) {
    case SN_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case SN_EPI_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case SN_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case SN_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* cuBLASLt's name of a storage type (f32, bf16, f16, f8e4m3, f8e5m2); -1 for any other. */
static int32_t data_type(sn_dtype t) {
    switch (t) {
    case SN_F32: return CUDA_R_32F;
    case SN_BF16: return CUDA_R_16BF;
    case SN_F16: return CUDA_R_16F;
    case SN_F8E4M3: return CUDA_R_8F_E4M3;
    case SN_F8E5M2: return CUDA_R_8F_E5M2;
    default: return -1;
    }
}

/* B's type: its own in an FP8 product, A's otherwise (sn_gemm_shape b_t). */
static sn_dtype b_type(const sn_gemm_shape *s) { return sn_dtype_is_f8(s->ab) ? s->b_t : s->ab; }

/* cuBLASLt's rules for an FP8 GEMM (its documentation of cublasLtMatmul: "To use FP8 kernels"),
 * checked here so that a wrong form is refused by name, not by a heuristic finding nothing. */
static sn_status fp8_rules(const sn_gemm_shape *s, sn_err *e) {
    const char *an = sn_dtype_name(s->ab), *bn = sn_dtype_name(s->b_t);
    if (!sn_dtype_is_f8(s->b_t))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt GEMM of %s by %s: an FP8 product takes "
                       "two 8-bit operands", an, bn);
    if (s->ab == SN_F8E5M2 && s->b_t == SN_F8E5M2)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt FP8 GEMM of f8e5m2 by f8e5m2: cuBLASLt "
                       "has no e5m2 x e5m2 kernels (one operand must be f8e4m3: the gradient's "
                       "e5m2 multiplies an e4m3 weight or activation)");
    if (s->d != SN_F32 || (s->accum && s->c_t != SN_F32) || s->epi != SN_EPI_NONE)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt FP8 GEMM (%s by %s) into %s%s with "
                       "epilogue %s: the CUDA device takes an f32 D (and C) and no epilogue (the "
                       "fp8 pass divides by the scales after the product)", an, bn,
                       sn_dtype_name(s->d), s->accum && s->c_t != SN_F32 ? " with C of another "
                       "type" : "", sn_epilogue_name(s->epi));
    if (s->ta || !s->tb)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt FP8 GEMM with ta=%d, tb=%d: FP8 kernels "
                       "take both operands K-major (cuBLASLt's \"TN\" rule on Ada and Hopper): A "
                       "stored (M, K) with ta=0 and B stored (N, K) with tb=1; permute the operand "
                       "before its cast to 8 bits", s->ta, s->tb);
    /* 16-byte alignment of every operand's start and rows: A and B one byte an element, D four */
    int64_t bytes[] = {s->lda, s->ldb, s->off_a, s->off_b, s->stride_a, s->stride_b,
                       4 * s->ldd, 4 * s->stride_d};
    static const char *const what[] = {"A's leading dimension", "B's leading dimension",
                                       "A's offset", "B's offset", "A's batch stride",
                                       "B's batch stride", "D's leading dimension",
                                       "D's batch stride"};
    for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++)
        if (bytes[i] % 16)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt FP8 GEMM (%s by %s, %lld x %lld x "
                           "%lld): %s is %lld bytes, and FP8 kernels need pointers and leading "
                           "dimensions 16-byte aligned (pad K to a multiple of 16)", an, bn,
                           (long long)s->M, (long long)s->N, (long long)s->K, what[i],
                           (long long)bytes[i]);
    return SN_OK;
}

/* A column-major layout of rows x cols of type t with leading dimension ld, batched. */
static sn_status layout(sn_cuda_api *a, cublasLtMatrixLayout_t *l, sn_dtype t, uint64_t rows,
                        uint64_t cols, int64_t ld, const sn_gemm_shape *s, int64_t stride, sn_err *e) {
    sn_status st = SN_CUDA_CHECK(a, e, cublasLtMatrixLayoutCreate, l, data_type(t), rows, cols, ld);
    if (st || s->batch == 1) return st;
    int32_t count = (int32_t)s->batch;
    if ((st = SN_CUDA_CHECK(a, e, cublasLtMatrixLayoutSetAttribute, *l,
                            CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count)))
        return st;
    return SN_CUDA_CHECK(a, e, cublasLtMatrixLayoutSetAttribute, *l,
                         CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
}

/* Sets pointer attribute attr of the plan's descriptor to device address v. */
static sn_status set_pointer(sn_cuda_api *a, const sn_gemm_plan *p, int attr, CUdeviceptr v,
                             sn_err *e) {
    void *ptr = (void *)(uintptr_t)v;
    return SN_CUDA_CHECK(a, e, cublasLtMatmulDescSetAttribute, p->desc,
                         (cublasLtMatmulDescAttributes_t)attr, &ptr, sizeof ptr);
}

sn_status sn_gemm_plan_candidates(sn_cuda_api *a, cublasLtHandle_t handle, const sn_gemm_plan *p,
                                  int n, cublasLtMatmulHeuristicResult_t *out, int *found,
                                  sn_err *e) {
    *found = 0;
    /* the heuristic reads the bias's and the aux's alignment from their pointers' values (set
       for real per run) */
    sn_status st = SN_OK;
    if (sn_gemm_has_bias(p->s.epi))
        st = set_pointer(a, p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, OPERAND_ALIGN, e);
    if (!st && sn_gemm_has_aux(p->s.epi))
        st = set_pointer(a, p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, OPERAND_ALIGN, e);
    return st ? st : SN_CUDA_CHECK(a, e, cublasLtMatmulAlgoGetHeuristic, handle, p->desc, p->a,
                                   p->b, p->d, p->d, p->pref, n, out, found);
}

const sn_gemm_shape *sn_gemm_plan_shape(const sn_gemm_plan *p, bool *tf32) {
    *tf32 = p->tf32;
    return &p->s;
}

void sn_gemm_plan_use(sn_gemm_plan *p, const cublasLtMatmulHeuristicResult_t *r) {
    p->heur = *r;
    p->has_algo = true;
}

void sn_gemm_plan_free(sn_cuda_api *a, sn_gemm_plan *p) {
    if (!p) return;
    if (p->pref) a->cublasLtMatmulPreferenceDestroy(p->pref);
    if (p->a) a->cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) a->cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) a->cublasLtMatrixLayoutDestroy(p->d);
    if (p->desc) a->cublasLtMatmulDescDestroy(p->desc);
    free(p);
}

sn_status sn_gemm_plan_new(sn_cuda_api *a, cublasLtHandle_t handle, const sn_gemm_shape *s,
                           bool tf32, size_t workspace_bytes, sn_gemm_plan **out, sn_err *e) {
    *out = NULL;
    /* the types the f32, the autocast and the fp8 programs have; anything else is refused by name */
    bool bias = sn_gemm_has_bias(s->epi), aux = sn_gemm_has_aux(s->epi), fp8 = sn_dtype_is_f8(s->ab);
    if (fp8) {
        sn_status st8 = fp8_rules(s, e);
        if (st8) return st8;
    } else if (data_type(s->ab) < 0 || (s->d != SN_F32 && s->d != s->ab) || s->bias_t != s->d ||
        s->aux_t != s->d || s->c_t != s->d || s->epi < 0 || s->epi >= SN_EPI_COUNT)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt GEMM of %s operands into %s%s%s%s: the "
                       "CUDA device multiplies f32, bf16 or f16 operands into f32 or their own "
                       "type, with a bias, an aux and a C of the output's type",
                       sn_dtype_name(s->ab), sn_dtype_name(s->d), bias ? " with a bias of " : "",
                       bias ? sn_dtype_name(s->bias_t) : "", aux && s->aux_t != s->d ? " (aux "
                       "of another type)" : s->c_t != s->d ? " (C of another type)" : "");
    if (aux && (s->batch != 1 || s->N % 8))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "a cuBLASLt GEMM with epilogue %s of %lld batches of "
                       "rows of %lld: its aux (the GELU input matrix) takes one GEMM whose rows are "
                       "a multiple of 8 elements (cuBLASLt's CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD "
                       "rule)", sn_epilogue_name(s->epi), (long long)s->batch, (long long)s->N);
    sn_status st = sn_cuda_api_load(a, SN_LIB_CUBLASLT, e);
    if (st) return st;
    sn_gemm_plan *p = sn_calloc(1, sizeof *p, "a cuBLASLt plan", e);
    if (!p) return SN_ERR_OOM;
    p->s = *s;
    int32_t op_a = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our B */
    int32_t op_b = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t epi = epilogue_of(s->epi);
    int32_t bias_type = data_type(s->d); /* cuBLASLt: the bias has D's type */
    bool fast = tf32 && s->ab == SN_F32; /* TF32 only for f32 storage */
    if (!st) st = SN_CUDA_CHECK(a, e, cublasLtMatmulDescCreate, &p->desc,
                                fast ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = SN_CUDA_CHECK(a, e, cublasLtMatmulDescSetAttribute, p->desc,
                                CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    if (!st) st = SN_CUDA_CHECK(a, e, cublasLtMatmulDescSetAttribute, p->desc,
                                CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    if (!st) st = SN_CUDA_CHECK(a, e, cublasLtMatmulDescSetAttribute, p->desc,
                                CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (!st && bias)
        st = SN_CUDA_CHECK(a, e, cublasLtMatmulDescSetAttribute, p->desc,
                           CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
    int64_t aux_ld = s->N; /* our row-major (M, N) aux is D^T's column-major (N, M) */
    if (!st && aux)
        st = SN_CUDA_CHECK(a, e, cublasLtMatmulDescSetAttribute, p->desc,
                           CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    /* our row-major B (K, N) [tb: (N, K)] is column-major (N, K) [(K, N)] with ld ldb */
    if (!st) st = layout(a, &p->a, b_type(s), s->tb ? s->K : s->N, s->tb ? s->N : s->K, s->ldb, s,
                         s->stride_b, e);
    if (!st) st = layout(a, &p->b, s->ab, s->ta ? s->M : s->K, s->ta ? s->K : s->M, s->lda, s,
                         s->stride_a, e);
    if (!st) st = layout(a, &p->d, s->d, s->N, s->M, s->ldd, s, s->stride_d, e);
    uint64_t ws = workspace_bytes;
    if (!st) st = SN_CUDA_CHECK(a, e, cublasLtMatmulPreferenceCreate, &p->pref);
    if (!st) st = SN_CUDA_CHECK(a, e, cublasLtMatmulPreferenceSetAttribute, p->pref,
                                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    /* cuBLASLt's A is our B; an operand read in place is as aligned as its first element */
    int64_t off[4] = {s->off_b * (sn_dtype_bits(b_type(s)) / 8), s->off_a * (sn_dtype_bits(s->ab) / 8),
                      0, 0};
    for (int m = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
         m <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && !st; m++) {
        uint32_t align = OPERAND_ALIGN;
        while (off[m - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] % align) align /= 2;
        st = SN_CUDA_CHECK(a, e, cublasLtMatmulPreferenceSetAttribute, p->pref,
                           (cublasLtMatmulPreferenceAttributes_t)m, &align, sizeof align);
    }
    p->tf32 = fast;
    if (!st && handle) { /* without a handle (no GPU, in tests) the plan stops here */
        int found = 0;
        st = sn_gemm_plan_candidates(a, handle, p, 1, &p->heur, &found, e);
        if (!st && found == 0)
            st = sn_fail(e, SN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for the GEMM "
                         "(%s into %s, %lld x %lld x %lld, batch %lld%s%s, epilogue %s%s) with a "
                         "%zu-byte workspace%s", sn_dtype_name(s->ab), sn_dtype_name(s->d),
                         (long long)s->M, (long long)s->N, (long long)s->K, (long long)s->batch,
                         s->ta ? ", A transposed" : "", s->tb ? ", B transposed" : "",
                         sn_epilogue_name(s->epi), s->accum ? " with C" : "", workspace_bytes,
                         s->accum && s->epi != SN_EPI_NONE ? ": run with SN_GEMM_ACCUM=plain to "
                         "keep C apart from the epilogues, and please report it" : "");
        p->has_algo = !st;
    }
    if (st) {
        sn_gemm_plan_free(a, p);
        return st;
    }
    *out = p;
    return SN_OK;
}

sn_status sn_gemm_plan_run(sn_cuda_api *a, cublasLtHandle_t handle, const sn_gemm_plan *p,
                           CUdeviceptr d, CUdeviceptr A, CUdeviceptr B, CUdeviceptr bias,
                           CUdeviceptr aux, CUdeviceptr c, CUdeviceptr workspace,
                           size_t workspace_bytes, CUstream stream, sn_err *e) {
    if (!p->has_algo)
        return sn_fail(e, SN_ERR_INVALID, "a cuBLASLt plan built without a handle cannot run");
    sn_status st = SN_OK;
    if (sn_gemm_has_bias(p->s.epi)) st = set_pointer(a, p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, e);
    if (!st && sn_gemm_has_aux(p->s.epi))
        st = set_pointer(a, p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, e);
    if (st) return st;
    /* accum: beta = 1 and C of D's type and layout (p->d serves both), D's own buffer when
       memplan wrote the sum in place (cuBLASLt allows C == D with identical layouts);
       otherwise beta = 0 and C is D, never read */
    bool accum = p->s.accum;
    if (accum && !c)
        return sn_fail(e, SN_ERR_INTERNAL, "an accum GEMM without its C matrix");
    const float one = 1.0f, zero = 0.0f;
    /* the operands' first elements (views) */
    A += (CUdeviceptr)(p->s.off_a * (sn_dtype_bits(p->s.ab) / 8));
    B += (CUdeviceptr)(p->s.off_b * (sn_dtype_bits(b_type(&p->s)) / 8));
    return SN_CUDA_CHECK(a, e, cublasLtMatmul, handle, p->desc, &one, (const void *)(uintptr_t)B,
                         p->a, (const void *)(uintptr_t)A, p->b, accum ? &one : &zero,
                         (const void *)(uintptr_t)(accum ? c : d), p->d, (void *)(uintptr_t)d,
                         p->d, &p->heur.algo,
                         (void *)(uintptr_t)workspace, workspace_bytes, stream);
}
