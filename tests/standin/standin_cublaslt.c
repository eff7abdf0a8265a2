/* standin_cublaslt.c: the stand-in cuBLASLt (SN_LIBCUBLASLT): descriptors, layouts and
 * preferences as cuBLASLt defines them, "algorithms" that all compute alike (one, or four with
 * modeled times for a heuristic asked for more: below), and matmuls computed on the CPU in
 * double, in the order of the stand-in libcuda's stream (found through $SN_LIBCUDA, already
 * loaded). Convention: D = epilogue(alpha op(A) op(B) + beta C [+ bias]) in cuBLASLt's own terms
 * (column-major unless a layout says CUBLASLT_ORDER_ROW; the bias runs along D's rows, one value
 * per row index); f32, f16 and bf16 operands (A and B of one type, C and D of one type; C may
 * be D, in place, only with D's layout); anything it does not implement is
 * CUBLAS_STATUS_NOT_SUPPORTED, said on stderr. The GELU epilogues (GELU, GELU_BIAS, GELU_AUX,
 * GELU_AUX_BIAS, DGELU) work as cuBLASLt's documentation has them: the product rounded to the f32 of the compute type, then program/epilogue.h's f32 formulas, the
 * sinter CPU device's; their aux (the GELU input matrix) is of D's type (EPILOGUE_AUX_DATA_TYPE
 * left unset, as the documentation asks outside FP8 kernels), column-major with leading dimension
 * EPILOGUE_AUX_LD, a multiple of 8 no less than D's rows (batch stride a multiple of 8 too),
 * its pointer as aligned at the matmul as at the heuristic, which reads the alignment from it.
 * FP8 (fp8_check): A and B CUDA_R_8F_E4M3 or _E5M2 (not both E5M2), widened exactly, their
 * products (exact in f32) summed in f32 in k order; C and D f32, compute CUBLAS_COMPUTE_32F,
 * no epilogue and column-major layouts (the rest of cuBLASLt's FP8 forms is not implemented
 * here); and cuBLASLt's rules enforced so that tests catch a wrong layout: a device of sm_89 or
 * newer (SN_STANDIN_SM), the "TN" form (A transposed, B not), pointers, leading dimensions and
 * batch strides 16-byte aligned. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "program/epilogue.h"
#include "standin.h"

SN_CUDA_CUBLASLT_API(SN_STANDIN_DECLARE)

enum { ST_OK = 0, ST_NOT_INITIALIZED = 1, ST_ALLOC_FAILED = 3, ST_INVALID_VALUE = 7,
       ST_EXECUTION_FAILED = 13, ST_NOT_SUPPORTED = 15 };
enum { EPI_DEFAULT = 1, EPI_RELU = 2, EPI_BIAS = 4, EPI_RELU_BIAS = 6, EPI_GELU = 32,
       EPI_GELU_BIAS = 36, EPI_GELU_AUX = 160, EPI_GELU_AUX_BIAS = 164, EPI_DGELU = 192 };
enum { DESC_COMPUTE_TYPE = 0, DESC_SCALE_TYPE = 1, DESC_POINTER_MODE = 2, DESC_BIAS_BATCH_STRIDE = 10 };
/* algo.data[0]: the algorithm (ALGO_FIRST + its place in the heuristic's order); [1 + i]: A, B,
 * C, D's alignments; [5]: the aux's; [6]: its modeled nanoseconds a run (0: none) */
enum { ALGO_ALIGN_AUX = 5, ALGO_MODEL_NS = 6 };
enum { ALGO_FIRST = 0x5d, ALGOS = 4 };
enum { LAYOUT_TYPE = 0, LAYOUT_ROWS = 2, LAYOUT_COLS = 3, LAYOUT_LD = 4 };
#define HANDLE_MAGIC 0x5d17c0de

struct cublasLtContext {
    int magic;
    sn_standin_host_fn host;
    sn_standin_enqueue_fn enqueue;
    sn_standin_model_fn model;
};
typedef struct {
    int32_t compute, scale, transa, transb, pointer_mode, bias_type, aux_type;
    uint32_t epilogue;
    CUdeviceptr bias, aux;
    int64_t bias_stride, aux_ld, aux_stride;
} desc;
typedef struct {
    uint32_t type;
    uint64_t rows, cols;
    int64_t ld, stride;
    int32_t order, batch;
} layout;
typedef struct {
    uint64_t workspace;
    uint32_t align[4]; /* MIN_ALIGNMENT_{A,B,C,D}_BYTES: cuBLASLt's default 256 */
} pref;

/* ---- status names ---- */

static const struct {
    int code;
    const char *name, *text;
} statuses[] = {
    {ST_OK, "CUBLAS_STATUS_SUCCESS", "success"},
    {ST_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {ST_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {ST_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument"},
    {ST_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {ST_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
};

const char *cublasLtGetStatusName(cublasStatus_t status) {
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        if (statuses[i].code == status) return statuses[i].name;
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        if (statuses[i].code == status) return statuses[i].text;
    return "unknown status";
}

size_t cublasLtGetVersion(void) { return 130000; }

/* ---- handle, descriptors, layouts, preferences ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
    if (!lightHandle) return ST_INVALID_VALUE;
    if (sn_standin_env("SN_STANDIN_FAIL_CUBLASLT", 0)) {
        sn_standin_say("cublasLtCreate fails as SN_STANDIN_FAIL_CUBLASLT asks");
        return ST_NOT_INITIALIZED;
    }
    const char *cuda = getenv(SN_LIBCUDA_ENV);
    void *h = cuda && *cuda ? dlopen(cuda, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : NULL;
    sn_standin_host_fn host = h ? (sn_standin_host_fn)dlsym(h, SN_STANDIN_HOST_SYM) : NULL;
    sn_standin_enqueue_fn enqueue = h ? (sn_standin_enqueue_fn)dlsym(h, SN_STANDIN_ENQUEUE_SYM) : NULL;
    sn_standin_model_fn model = h ? (sn_standin_model_fn)dlsym(h, SN_STANDIN_MODEL_SYM) : NULL;
    if (!host || !enqueue || !model) {
        sn_standin_say("cublasLtCreate: the stand-in cuBLASLt runs only with the stand-in libcuda "
                       "loaded (%s=%s)", SN_LIBCUDA_ENV, cuda ? cuda : "(unset)");
        if (h) dlclose(h);
        return ST_NOT_INITIALIZED;
    }
    struct cublasLtContext *c = malloc(sizeof *c);
    if (!c) return ST_ALLOC_FAILED;
    *c = (struct cublasLtContext){HANDLE_MAGIC, host, enqueue, model};
    *lightHandle = c;
    return ST_OK;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
    if (!lightHandle || lightHandle->magic != HANDLE_MAGIC) return ST_NOT_INITIALIZED;
    lightHandle->magic = 0;
    free(lightHandle);
    return ST_OK;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
    if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_FAST_TF32) {
        sn_standin_say("cublasLtMatmulDescCreate: compute type %d is not supported", computeType);
        return ST_NOT_SUPPORTED;
    }
    if (scaleType != CUDA_R_32F) return ST_INVALID_VALUE;
    desc *d = calloc(1, sizeof *d);
    if (!d) return ST_ALLOC_FAILED;
    *d = (desc){.compute = computeType, .scale = scaleType, .transa = CUBLAS_OP_N,
                .transb = CUBLAS_OP_N, .epilogue = EPI_DEFAULT, .bias_type = -1, .aux_type = -1};
    *matmulDesc = (cublasLtMatmulDesc_t)d;
    return ST_OK;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    free(matmulDesc);
    return ST_OK;
}

/* Copies buf into field when the size is the attribute's. */
static cublasStatus_t set(void *field, size_t field_bytes, const void *buf, size_t bytes,
                          const char *what) {
    if (!buf || bytes != field_bytes) {
        sn_standin_say("%s: %zu bytes given, the attribute has %zu", what, bytes, field_bytes);
        return ST_INVALID_VALUE;
    }
    memcpy(field, buf, bytes);
    return ST_OK;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
    desc *d = (desc *)matmulDesc;
    if (!d) return ST_INVALID_VALUE;
    const char *w = "cublasLtMatmulDescSetAttribute";
    switch (attr) {
    case DESC_POINTER_MODE: return set(&d->pointer_mode, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(&d->transa, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(&d->transb, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&d->epilogue, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&d->bias, 8, buf, sizeInBytes, w);
    case DESC_BIAS_BATCH_STRIDE: return set(&d->bias_stride, 8, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(&d->bias_type, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(&d->aux, 8, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(&d->aux_ld, 8, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
        return set(&d->aux_stride, 8, buf, sizeInBytes, w);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set(&d->aux_type, 4, buf, sizeInBytes, w);
    }
    sn_standin_say("%s: attribute %d is not supported by the stand-in", w, attr);
    return ST_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    layout *l = calloc(1, sizeof *l);
    if (!l) return ST_ALLOC_FAILED;
    *l = (layout){.type = (uint32_t)type, .rows = rows, .cols = cols, .ld = ld,
                  .order = CUBLASLT_ORDER_COL, .batch = 1};
    *matLayout = (cublasLtMatrixLayout_t)l;
    return ST_OK;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    free(matLayout);
    return ST_OK;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
    layout *l = (layout *)matLayout;
    if (!l) return ST_INVALID_VALUE;
    const char *w = "cublasLtMatrixLayoutSetAttribute";
    switch (attr) {
    case LAYOUT_TYPE: return set(&l->type, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set(&l->order, 4, buf, sizeInBytes, w);
    case LAYOUT_ROWS: return set(&l->rows, 8, buf, sizeInBytes, w);
    case LAYOUT_COLS: return set(&l->cols, 8, buf, sizeInBytes, w);
    case LAYOUT_LD: return set(&l->ld, 8, buf, sizeInBytes, w);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set(&l->batch, 4, buf, sizeInBytes, w);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set(&l->stride, 8, buf, sizeInBytes, w);
    }
    sn_standin_say("%s: attribute %d is not supported by the stand-in", w, attr);
    return ST_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    pref *q = calloc(1, sizeof *q);
    if (!q) return ST_ALLOC_FAILED;
    for (int i = 0; i < 4; i++) q->align[i] = 256;
    *p = (cublasLtMatmulPreference_t)q;
    return ST_OK;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    free(p);
    return ST_OK;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
    pref *q = (pref *)p;
    if (!q) return ST_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return set(&q->workspace, 8, buf, sizeInBytes, "cublasLtMatmulPreferenceSetAttribute");
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return set(&q->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], 4, buf, sizeInBytes,
                   "cublasLtMatmulPreferenceSetAttribute");
    sn_standin_say("cublasLtMatmulPreferenceSetAttribute: attribute %d is not supported", attr);
    return ST_NOT_SUPPORTED;
}

/* ---- the problem: checked at the heuristic and again at each matmul ---- */

typedef struct {
    desc d;
    layout a, b, c, dl;
    int64_t m, n, k;
    float alpha, beta;
    CUdeviceptr A, B, C, D;
    struct cublasLtContext *h;
    int algo;       /* its place in the heuristic's order */
    double model_s; /* its modeled time (0: none) */
} problem;

static bool is_fp8(uint32_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }

/* Bytes of one element of a type the stand-in takes (f32, f16, bf16, the two FP8), else 0. */
static size_t elem_bytes(uint32_t type) {
    return type == CUDA_R_32F ? 4 : type == CUDA_R_16F || type == CUDA_R_16BF ? 2 : is_fp8(type) ? 1 : 0;
}

/* An FP8 code's value (OCP: e4m3 bias 7, no infinities, S.1111.111 NaN; e5m2 bias 15, IEEE
 * specials), exactly. */
static double fp8_value(uint32_t type, uint8_t c) {
    bool e4 = type == CUDA_R_8F_E4M3;
    int m = e4 ? 3 : 2, bias = e4 ? 7 : 15, mag = c & 0x7f, e = mag >> m, f = mag & ((1 << m) - 1);
    double v;
    if (e4 ? mag == 0x7f : e == 31) v = e4 || f ? NAN : INFINITY;
    else if (e == 0) v = ldexp(f, 1 - bias - m);
    else v = ldexp((1 << m) + f, e - bias - m);
    return c & 0x80 ? -v : v;
}

static double load(uint32_t type, const void *base, int64_t i) {
    if (is_fp8(type)) return fp8_value(type, ((const uint8_t *)base)[i]);
    if (type == CUDA_R_32F) return ((const float *)base)[i];
    if (type == CUDA_R_16F) return (double)((const _Float16 *)base)[i];
    uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void store(uint32_t type, void *base, int64_t i, double v) {
    float f = (float)v;
    if (type == CUDA_R_32F) {
        ((float *)base)[i] = f;
    } else if (type == CUDA_R_16F) {
        ((_Float16 *)base)[i] = (_Float16)f;
    } else { /* bf16: round to nearest even (NaN stays NaN) */
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)base)[i] = f != f ? (uint16_t)(u >> 16 | 0x40) : (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
}

/* Elements a layout spans in one batch: the last element's index + 1. */
static uint64_t span(const layout *l) {
    return l->order == CUBLASLT_ORDER_COL ? (l->cols - 1) * (uint64_t)l->ld + l->rows
                                          : (l->rows - 1) * (uint64_t)l->ld + l->cols;
}

static bool bias_epilogue(uint32_t e) {
    return e == EPI_BIAS || e == EPI_RELU_BIAS || e == EPI_GELU_BIAS || e == EPI_GELU_AUX_BIAS;
}

static bool gelu_epilogue(uint32_t e) {
    return e == EPI_GELU || e == EPI_GELU_BIAS || e == EPI_GELU_AUX || e == EPI_GELU_AUX_BIAS;
}

/* The epilogues with a GELU input matrix: written (GELU_AUX, GELU_AUX_BIAS) or read (DGELU). */
static bool aux_epilogue(uint32_t e) {
    return e == EPI_GELU_AUX || e == EPI_GELU_AUX_BIAS || e == EPI_DGELU;
}

/* The alignment a pointer's value promises (its lowest set bit, at most 256; NULL: 256). */
static uint64_t align_of(CUdeviceptr p) {
    uint64_t a = 1;
    while (a < 256 && !(p & a)) a <<= 1;
    return a;
}

/* cuBLASLt's rules for FP8 (its documentation of cublasLtMatmul, "To use FP8 kernels"), and
 * the stand-in's own limits past them (said as such). */
static cublasStatus_t fp8_check(const problem *p) {
    const desc *d = &p->d;
    const layout *ls[4] = {&p->a, &p->b, &p->c, &p->dl};
    int sm = (int)sn_standin_env("SN_STANDIN_SM", 80); /* the stand-in libcuda's default too */
    if (sm < 89) {
        sn_standin_say("cuBLASLt: FP8 matmuls need a device of compute capability 8.9 or newer "
                       "(Ada, Hopper); this one is sm_%d", sm);
        return ST_NOT_SUPPORTED;
    }
    if (!is_fp8(p->a.type) || !is_fp8(p->b.type) ||
        (p->a.type == CUDA_R_8F_E5M2 && p->b.type == CUDA_R_8F_E5M2)) {
        sn_standin_say("cuBLASLt: FP8 types A %u, B %u: both must be FP8, and E5M2 x E5M2 is not "
                       "supported", p->a.type, p->b.type);
        return ST_NOT_SUPPORTED;
    }
    if (p->c.type != CUDA_R_32F || p->dl.type != CUDA_R_32F || d->compute != CUBLAS_COMPUTE_32F ||
        d->epilogue != EPI_DEFAULT) {
        sn_standin_say("cuBLASLt: an FP8 matmul into C %u, D %u, compute %d, epilogue %u: the "
                       "stand-in implements f32 C and D, CUBLAS_COMPUTE_32F and no epilogue",
                       p->c.type, p->dl.type, d->compute, d->epilogue);
        return ST_NOT_SUPPORTED;
    }
    if (d->transa != CUBLAS_OP_T || d->transb != CUBLAS_OP_N) {
        sn_standin_say("cuBLASLt: an FP8 matmul with transa %d, transb %d: FP8 kernels take only "
                       "the \"TN\" format (A transposed, B non-transposed)", d->transa, d->transb);
        return ST_NOT_SUPPORTED;
    }
    for (int i = 0; i < 4; i++) {
        const layout *l = ls[i];
        uint64_t es = elem_bytes(l->type);
        if (l->order != CUBLASLT_ORDER_COL) {
            sn_standin_say("cuBLASLt: an FP8 matmul with a row-major layout is not supported by "
                           "the stand-in");
            return ST_NOT_SUPPORTED;
        }
        if (((uint64_t)l->ld * es) % 16 || (l->batch > 1 && ((uint64_t)l->stride * es) % 16)) {
            sn_standin_say("cuBLASLt: FP8 matmul: matrix %c's leading dimension %lld (batch stride "
                           "%lld) is not a multiple of 16 bytes, as FP8 kernels need", "ABCD"[i],
                           (long long)l->ld, (long long)l->stride);
            return ST_NOT_SUPPORTED;
        }
    }
    return ST_OK;
}

static cublasStatus_t check(problem *p) {
    const desc *d = &p->d;
    const layout *ls[4] = {&p->a, &p->b, &p->c, &p->dl};
    if (is_fp8(p->a.type) || is_fp8(p->b.type)) {
        cublasStatus_t st = fp8_check(p);
        if (st) return st;
    } else if (p->a.type != p->b.type || p->c.type != p->dl.type ||
        (p->a.type == CUDA_R_32F && p->dl.type != CUDA_R_32F)) {
        sn_standin_say("cuBLASLt: types A %u, B %u, C %u, D %u: the stand-in takes A and B of one "
                       "type, C and D of one type, f32 A only with f32 D", p->a.type, p->b.type,
                       p->c.type, p->dl.type);
        return ST_NOT_SUPPORTED;
    }
    for (int i = 0; i < 4; i++) {
        const layout *l = ls[i];
        if (!elem_bytes(l->type)) {
            sn_standin_say("cuBLASLt: data type %u is not supported by the stand-in (f32, f16, "
                           "bf16)", l->type);
            return ST_NOT_SUPPORTED;
        }
        if (!l->rows || !l->cols || l->batch < 1 ||
            (l->order == CUBLASLT_ORDER_COL ? (uint64_t)l->ld < l->rows : (uint64_t)l->ld < l->cols) ||
            (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)) {
            sn_standin_say("cuBLASLt: layout %d (%llu x %llu, ld %lld, order %d, batch %d) is "
                           "invalid", i, (unsigned long long)l->rows, (unsigned long long)l->cols,
                           (long long)l->ld, l->order, l->batch);
            return ST_INVALID_VALUE;
        }
    }
    p->m = (int64_t)p->dl.rows;
    p->n = (int64_t)p->dl.cols;
    p->k = (int64_t)(d->transa == CUBLAS_OP_N ? p->a.cols : p->a.rows);
    uint64_t am = d->transa == CUBLAS_OP_N ? p->a.rows : p->a.cols;
    uint64_t bk = d->transb == CUBLAS_OP_N ? p->b.rows : p->b.cols;
    uint64_t bn = d->transb == CUBLAS_OP_N ? p->b.cols : p->b.rows;
    if (am != (uint64_t)p->m || bn != (uint64_t)p->n || bk != (uint64_t)p->k ||
        p->c.rows != p->dl.rows || p->c.cols != p->dl.cols ||
        p->a.batch != p->dl.batch || p->b.batch != p->dl.batch || p->c.batch != p->dl.batch) {
        sn_standin_say("cuBLASLt: op(A) %llu x %lld, op(B) %llu x %llu, C %llu x %llu and D %lld x "
                       "%lld (batches %d %d %d %d) do not agree", (unsigned long long)am,
                       (long long)p->k, (unsigned long long)bk, (unsigned long long)bn,
                       (unsigned long long)p->c.rows, (unsigned long long)p->c.cols,
                       (long long)p->m, (long long)p->n, p->a.batch, p->b.batch, p->c.batch,
                       p->dl.batch);
        return ST_INVALID_VALUE;
    }
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) ||
        (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T) || d->pointer_mode != 0)
        return ST_NOT_SUPPORTED;
    switch (d->epilogue) {
    case EPI_DEFAULT: case EPI_RELU: case EPI_BIAS: case EPI_RELU_BIAS: case EPI_GELU:
    case EPI_GELU_BIAS: case EPI_GELU_AUX: case EPI_GELU_AUX_BIAS: case EPI_DGELU: break;
    default:
        sn_standin_say("cuBLASLt: epilogue %u is not supported by the stand-in", d->epilogue);
        return ST_NOT_SUPPORTED;
    }
    if (aux_epilogue(d->epilogue)) { /* the GELU input matrix's rules (cuBLASLt's documentation) */
        if (d->aux_ld % 8 || d->aux_ld < p->m || (p->dl.batch > 1 && d->aux_stride % 8)) {
            sn_standin_say("cuBLASLt: epilogue %u's aux has leading dimension %lld and batch "
                           "stride %lld: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD must be a multiple "
                           "of 8 and no less than D's %lld rows, the batch stride a multiple of 8",
                           d->epilogue, (long long)d->aux_ld, (long long)d->aux_stride,
                           (long long)p->m);
            return ST_INVALID_VALUE;
        }
        if (d->aux_type != -1) {
            sn_standin_say("cuBLASLt: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE is %d: outside "
                           "FP8 kernels it is left unset (-1), the aux of D's type", d->aux_type);
            return ST_INVALID_VALUE;
        }
        if (p->dl.order != CUBLASLT_ORDER_COL) {
            sn_standin_say("cuBLASLt: an aux epilogue with a row-major D is not supported by the "
                           "stand-in");
            return ST_NOT_SUPPORTED;
        }
    }
    if (bias_epilogue(d->epilogue) && d->bias_type != -1 && !elem_bytes((uint32_t)d->bias_type)) {
        sn_standin_say("cuBLASLt: bias data type %d is not supported by the stand-in", d->bias_type);
        return ST_NOT_SUPPORTED;
    }
    return ST_OK;
}

/* What a run of algorithm k of a heuristic asked for several is modeled to take: the first 30 us;
 * the second 10 us without an epilogue (the fastest) and 30 us with one (a tie with the first,
 * which a tuner must keep); the third 50 us (the slowest); the fourth refuses to run (as a real
 * candidate may), so it has no time. */
static uint64_t modeled_ns(int k, uint32_t epilogue) {
    static const uint64_t ns[ALGOS] = {30000, 10000, 50000, 0};
    return k == 1 && epilogue != EPI_DEFAULT ? ns[0] : ns[k];
}

/* Runs of each algorithm so far (its place in the heuristic's order), for tests. */
static uint64_t runs[ALGOS];
uint64_t sn_standin_cublaslt_runs(int k);
uint64_t sn_standin_cublaslt_runs(int k) { return k >= 0 && k < ALGOS ? runs[k] : 0; }

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
    if (!lightHandle || lightHandle->magic != HANDLE_MAGIC) return ST_NOT_INITIALIZED;
    if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference ||
        requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
        return ST_INVALID_VALUE;
    problem p = {.d = *(desc *)operationDesc, .a = *(layout *)Adesc, .b = *(layout *)Bdesc,
                 .c = *(layout *)Cdesc, .dl = *(layout *)Ddesc};
    *returnAlgoCount = 0;
    cublasStatus_t st = check(&p);
    if (st) return st;
    /* asked for one: the stand-in's algorithm, without a modeled time (events time the CPU) */
    int n = requestedAlgoCount == 1 ? 1 : requestedAlgoCount < ALGOS ? requestedAlgoCount : ALGOS;
    for (int k = 0; k < n; k++) {
        cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[k];
        memset(r, 0, sizeof *r);
        r->algo.data[0] = ALGO_FIRST + (uint64_t)k;
        for (int i = 0; i < 4; i++) /* chosen for operands this aligned (the preference's) */
            r->algo.data[1 + i] = ((pref *)preference)->align[i];
        /* and an aux as aligned as the pointer it was given (the documentation: the heuristic
           depends on its value to determine expected pointer alignment) */
        if (aux_epilogue(p.d.epilogue)) r->algo.data[ALGO_ALIGN_AUX] = align_of(p.d.aux);
        r->algo.data[ALGO_MODEL_NS] = n == 1 ? 0 : modeled_ns(k, p.d.epilogue);
        r->wavesCount = 1;
    }
    *returnAlgoCount = n;
    return ST_OK;
}

/* ---- the product ---- */

/* Element (r, c) of batch b of an operand. */
static int64_t index_of(const layout *l, int64_t b, int64_t r, int64_t c) {
    return b * l->stride + (l->order == CUBLASLT_ORDER_COL ? r + c * l->ld : r * l->ld + c);
}

/* Host memory of an operand's batches, or NULL (said on stderr). */
static const void *operand(const problem *p, CUdeviceptr ptr, const layout *l) {
    uint64_t elems = (uint64_t)(l->batch - 1) * (uint64_t)l->stride + span(l);
    return p->h->host(ptr, elems * elem_bytes(l->type));
}

/* Runs in stream order: the device pointers are turned into host memory only now. */
static int run(const void *data) {
    const problem *p = data;
    const desc *d = &p->d;
    int64_t batch = p->dl.batch;
    uint32_t bias_type = d->bias_type == -1 ? p->dl.type : (uint32_t)d->bias_type;
    const void *A = operand(p, p->A, &p->a), *B = operand(p, p->B, &p->b);
    const void *C = p->beta != 0 ? operand(p, p->C, &p->c) : NULL;
    void *D = (void *)operand(p, p->D, &p->dl);
    bool biased = bias_epilogue(d->epilogue), has_aux = aux_epilogue(d->epilogue);
    const void *bias = biased ? p->h->host(d->bias, elem_bytes(bias_type) *
                                           (uint64_t)((batch - 1) * d->bias_stride + p->m)) : NULL;
    void *aux = has_aux ? p->h->host(d->aux, elem_bytes(p->dl.type) *
                                     (uint64_t)((batch - 1) * d->aux_stride +
                                                (p->n - 1) * d->aux_ld + p->m)) : NULL;
    if (!A || !B || !D || (p->beta != 0 && !C) || (biased && !bias) || (has_aux && !aux)) {
        sn_standin_say("cublasLtMatmul: an operand is not (all) in device memory");
        return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    }
    runs[p->algo]++;
    if (p->model_s > 0) p->h->model(p->model_s);
    double *pa = malloc(sizeof *pa * (size_t)(p->m * p->k)), *pb = malloc(sizeof *pb * (size_t)(p->n * p->k));
    if (!pa || !pb) {
        free(pa);
        free(pb);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N, fp8 = is_fp8(p->a.type);
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < p->m; i++) /* op(A) row i, contiguous in k */
            for (int64_t k = 0; k < p->k; k++)
                pa[i * p->k + k] = load(p->a.type, A, ta ? index_of(&p->a, b, k, i) : index_of(&p->a, b, i, k));
        for (int64_t j = 0; j < p->n; j++) /* op(B) column j, contiguous in k */
            for (int64_t k = 0; k < p->k; k++)
                pb[j * p->k + k] = load(p->b.type, B, tb ? index_of(&p->b, b, j, k) : index_of(&p->b, b, k, j));
        for (int64_t j = 0; j < p->n; j++)
            for (int64_t i = 0; i < p->m; i++) {
                double s = 0;
                if (fp8) { /* exact products (4 by 4 significant bits) summed in f32, k ascending */
                    float f = 0;
                    for (int64_t k = 0; k < p->k; k++) f += (float)(pa[i * p->k + k] * pb[j * p->k + k]);
                    s = f;
                } else {
                    for (int64_t k = 0; k < p->k; k++) s += pa[i * p->k + k] * pb[j * p->k + k];
                }
                double v = p->alpha * s + (C ? p->beta * load(p->c.type, C, index_of(&p->c, b, i, j)) : 0);
                int64_t at = index_of(&p->dl, b, i, j);
                if (gelu_epilogue(d->epilogue) || d->epilogue == EPI_DGELU) {
                    /* in f32, the compute type: the product, then epilogue.h's formulas */
                    int64_t ax = b * d->aux_stride + i + j * d->aux_ld;
                    float f = (float)v;
                    if (d->epilogue == EPI_DGELU) {
                        store(p->dl.type, D, at, f * sn_epi_gelu_grad((float)load(p->dl.type, aux, ax)));
                        continue;
                    }
                    if (biased) f = f + (float)load(bias_type, bias, b * d->bias_stride + i);
                    if (aux) store(p->dl.type, aux, ax, f);
                    store(p->dl.type, D, at, sn_epi_gelu(f));
                    continue;
                }
                if (biased) v += load(bias_type, bias, b * d->bias_stride + i);
                if (d->epilogue == EPI_RELU || d->epilogue == EPI_RELU_BIAS) v = v > 0 ? v : 0;
                store(p->dl.type, D, at, v);
            }
    }
    free(pa);
    free(pb);
    return 0;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
    if (!lightHandle || lightHandle->magic != HANDLE_MAGIC) return ST_NOT_INITIALIZED;
    if (!computeDesc || !alpha || !beta || !A || !B || !D || !Adesc || !Bdesc || !Cdesc || !Ddesc)
        return ST_INVALID_VALUE;
    if (algo && (algo->data[0] < ALGO_FIRST || algo->data[0] >= ALGO_FIRST + ALGOS)) {
        sn_standin_say("cublasLtMatmul: the algorithm is not one the stand-in's heuristic gave");
        return ST_INVALID_VALUE;
    }
    int which = algo ? (int)(algo->data[0] - ALGO_FIRST) : 0;
    if (which == ALGOS - 1) {
        sn_standin_say("cublasLtMatmul: the heuristic's fourth algorithm refuses every problem "
                       "(a candidate that does not run, as a real one may)");
        return ST_NOT_SUPPORTED;
    }
    problem p = {.d = *(desc *)computeDesc, .a = *(layout *)Adesc, .b = *(layout *)Bdesc,
                 .c = *(layout *)Cdesc, .dl = *(layout *)Ddesc,
                 .alpha = *(const float *)alpha, .beta = *(const float *)beta,
                 .A = (CUdeviceptr)(uintptr_t)A, .B = (CUdeviceptr)(uintptr_t)B,
                 .C = (CUdeviceptr)(uintptr_t)C, .D = (CUdeviceptr)(uintptr_t)D, .h = lightHandle,
                 .algo = which, .model_s = algo ? 1e-9 * (double)algo->data[ALGO_MODEL_NS] : 0};
    cublasStatus_t st = check(&p);
    if (st) return st;
    /* FP8 kernels need every matrix 16-byte aligned, whatever the preference said */
    const void *all[4] = {A, B, C, D};
    for (int i = 0; i < 4 && is_fp8(p.a.type); i++)
        if ((uintptr_t)all[i] % 16) {
            sn_standin_say("cublasLtMatmul: FP8 matmul: matrix %c at 0x%llx is not 16-byte aligned",
                           "ABCD"[i], (unsigned long long)(uintptr_t)all[i]);
            return ST_NOT_SUPPORTED;
        }
    /* an algorithm chosen for aligned operands refuses less aligned ones (real cuBLASLt may
     * fail or fault: the preference's MIN_ALIGNMENT attributes are how a caller says) */
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        uint64_t need = algo ? algo->data[1 + i] : 256;
        if (ptrs[i] && need && (uintptr_t)ptrs[i] % need) {
            sn_standin_say("cublasLtMatmul: matrix %c at 0x%llx is not %llu-byte aligned, as the "
                           "heuristic's algorithm needs (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)",
                           "ABCD"[i], (unsigned long long)(uintptr_t)ptrs[i],
                           (unsigned long long)need, "ABCD"[i]);
            return ST_NOT_SUPPORTED;
        }
    }
    if (aux_epilogue(p.d.epilogue)) {
        uint64_t need = algo ? algo->data[ALGO_ALIGN_AUX] : 256;
        if (!p.d.aux || (need && p.d.aux % need)) {
            sn_standin_say("cublasLtMatmul: epilogue %u's aux at 0x%llx: %s", p.d.epilogue,
                           (unsigned long long)p.d.aux, !p.d.aux ? "CUBLASLT_MATMUL_DESC_EPILOGUE_"
                           "AUX_POINTER is not set" : "less aligned than the pointer the "
                           "heuristic chose the algorithm for");
            return p.d.aux ? ST_NOT_SUPPORTED : ST_INVALID_VALUE;
        }
    }
    /* C == D in place only with identical layouts (cuBLASLt's documentation: Cdesc must then
       equal Ddesc) */
    const layout *lc = &p.c, *ld = &p.dl;
    if (C == D && p.beta != 0 &&
        (lc->type != ld->type || lc->rows != ld->rows || lc->cols != ld->cols ||
         lc->ld != ld->ld || lc->order != ld->order || lc->batch != ld->batch ||
         (lc->batch > 1 && lc->stride != ld->stride))) {
        sn_standin_say("cublasLtMatmul: C and D are one buffer (in place) with different layouts");
        return ST_NOT_SUPPORTED;
    }
    if (workspace && !lightHandle->host((CUdeviceptr)(uintptr_t)workspace, workspaceSizeInBytes)) {
        sn_standin_say("cublasLtMatmul: the workspace is not device memory");
        return ST_INVALID_VALUE;
    }
    int r = lightHandle->enqueue(stream, run, &p, sizeof p);
    if (r) sn_standin_say("cublasLtMatmul: the stream refused or failed the product (CUresult %d)", r);
    return r ? ST_EXECUTION_FAILED : ST_OK;
}
