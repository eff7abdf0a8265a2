/* ceilings.c: the device's own ceilings, measured (the GPU check's MFU and bandwidth divide by
 * these, taken in the same run): a square bf16 GEMM through cuBLASLt (fp32 accumulation, the
 * heuristic's best algorithm) on random data, spot-checked against the host, and a
 * device-to-device copy, each timed with events (warm-up excluded, median of reps); and the
 * device memory in use. Convention: its own handles on the primary context, all freed here. */
#include <stdlib.h>
#include <string.h>

#include "support/rng.h"
#include "cuda_rt.h"

enum { WORKSPACE = 32 << 20, CHECKED_ENTRIES = 16 };

typedef struct {
    sn_cuda_api api;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUevent ev[2];
    CUdeviceptr a, b, d, src, dst, ws;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout;
    cublasLtMatmulPreference_t pref;
    void *host_a, *host_b;
    bool f32;
    int64_t copy_bytes;
    cublasLtMatmulHeuristicResult_t heur;
} ctx;

#define API (&c->api)

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); /* round to nearest even */
}
static float bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void release(ctx *c) {
    sn_cuda_api *a = &c->api;
    if (c->stream) a->cuStreamSynchronize(c->stream);
    if (c->pref) a->cublasLtMatmulPreferenceDestroy(c->pref);
    if (c->layout) a->cublasLtMatrixLayoutDestroy(c->layout);
    if (c->desc) a->cublasLtMatmulDescDestroy(c->desc);
    if (c->lt) a->cublasLtDestroy(c->lt);
    CUdeviceptr ps[] = {c->a, c->b, c->d, c->src, c->dst, c->ws};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) a->cuMemFree(ps[i]);
    for (int i = 0; i < 2; i++)
        if (c->ev[i]) a->cuEventDestroy(c->ev[i]);
    if (c->stream) a->cuStreamDestroy(c->stream);
    if (c->ctx) a->cuDevicePrimaryCtxRelease(c->dev);
    free(c->host_a);
    free(c->host_b);
    sn_cuda_api_unload(a);
}

static sn_status open_ctx(ctx *c, int ordinal, sn_err *e) {
    sn_status st = sn_cuda_api_load(API, SN_LIB_CUDA, e);
    if (!st) st = SN_CUDA_CHECK(API, e, cuInit, 0);
    if (!st) st = SN_CUDA_CHECK(API, e, cuDeviceGet, &c->dev, ordinal);
    if (!st) st = SN_CUDA_CHECK(API, e, cuDevicePrimaryCtxRetain, &c->ctx, c->dev);
    if (!st) st = SN_CUDA_CHECK(API, e, cuCtxSetCurrent, c->ctx);
    if (!st) st = SN_CUDA_CHECK(API, e, cuStreamCreate, &c->stream, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < 2 && !st; i++) st = SN_CUDA_CHECK(API, e, cuEventCreate, &c->ev[i], CU_EVENT_DEFAULT);
    return st;
}

/* Random values in [-1, 1) (bf16, or f32 when f32) uploaded into a fresh allocation of n
 * elements; *host keeps them. */
static sn_status random_values(ctx *c, CUdeviceptr *p, void **host, int64_t n, bool f32,
                               uint64_t seed, sn_err *e) {
    size_t size = f32 ? 4 : 2;
    *host = sn_malloc((size_t)n * size, "random GEMM operands on the host", e);
    if (!*host) return SN_ERR_OOM;
    sn_rng r = sn_rng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        float v = (float)(2 * sn_rng_uniform(&r) - 1);
        if (f32) ((float *)*host)[i] = v;
        else ((uint16_t *)*host)[i] = bf16_bits(v);
    }
    sn_status st = SN_CUDA_CHECK(API, e, cuMemAlloc, p, (size_t)n * size);
    if (!st) st = SN_CUDA_CHECK(API, e, cuMemcpyHtoDAsync, *p, *host, (size_t)n * size, c->stream);
    return st ? st : SN_CUDA_CHECK(API, e, cuStreamSynchronize, c->stream);
}

static double value_at(const void *h, bool f32, int64_t i) {
    return f32 ? ((const float *)h)[i] : bf16_float(((const uint16_t *)h)[i]);
}

typedef sn_status (*work_fn)(ctx *c, sn_err *e);

/* Median seconds of reps timed calls of fn, after two untimed ones. */
static sn_status time_median(ctx *c, work_fn fn, int reps, double *out, sn_err *e) {
    double t[64];
    if (reps > 64) reps = 64;
    sn_status st = SN_OK;
    for (int i = 0; i < 2 && !st; i++) st = fn(c, e);
    for (int i = 0; i < reps && !st; i++) {
        float ms = 0;
        st = SN_CUDA_CHECK(API, e, cuEventRecord, c->ev[0], c->stream);
        if (!st) st = fn(c, e);
        if (!st) st = SN_CUDA_CHECK(API, e, cuEventRecord, c->ev[1], c->stream);
        if (!st) st = SN_CUDA_CHECK(API, e, cuEventSynchronize, c->ev[1]);
        if (!st) st = SN_CUDA_CHECK(API, e, cuEventElapsedTime, &ms, c->ev[0], c->ev[1]);
        t[i] = ms * 1e-3;
    }
    if (st) return st;
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    *out = t[reps / 2];
    return SN_OK;
}

static sn_status copy_once(ctx *c, sn_err *e) {
    return SN_CUDA_CHECK(API, e, cuMemcpyDtoDAsync, c->dst, c->src, (size_t)c->copy_bytes, c->stream);
}

static sn_status gemm_once(ctx *c, sn_err *e) {
    const float one = 1.0f, zero = 0.0f;
    return SN_CUDA_CHECK(API, e, cublasLtMatmul, c->lt, c->desc, &one, (const void *)(uintptr_t)c->a,
                         c->layout, (const void *)(uintptr_t)c->b, c->layout, &zero,
                         (const void *)(uintptr_t)c->d, c->layout, (void *)(uintptr_t)c->d,
                         c->layout, &c->heur.algo, (void *)(uintptr_t)c->ws, (size_t)WORKSPACE,
                         c->stream);
}

/* D = A B in cuBLASLt's column-major terms: D[i + j n] = sum_k A[i + k n] B[k + j n]; a few
 * entries against the host in double, relative to the sum of the products' magnitudes. */
static sn_status spot_check(ctx *c, int n, double *worst, sn_err *e) {
    size_t size = c->f32 ? 4 : 2;
    void *dh = sn_malloc((size_t)n * n * size, "the GEMM's result on the host", e);
    if (!dh) return SN_ERR_OOM;
    sn_status st = SN_CUDA_CHECK(API, e, cuMemcpyDtoHAsync, dh, c->d, (size_t)n * n * size, c->stream);
    if (!st) st = SN_CUDA_CHECK(API, e, cuStreamSynchronize, c->stream);
    sn_rng r = sn_rng_seed(7);
    *worst = 0;
    for (int t = 0; t < CHECKED_ENTRIES && !st; t++) {
        int64_t i = (int64_t)sn_rng_below(&r, (uint64_t)n), j = (int64_t)sn_rng_below(&r, (uint64_t)n);
        double want = 0, mag = 0;
        for (int64_t k = 0; k < n; k++) {
            double p = value_at(c->host_a, c->f32, i + k * n) * value_at(c->host_b, c->f32, k + j * n);
            want += p;
            mag += p < 0 ? -p : p;
        }
        double got = value_at(dh, c->f32, i + j * n), err = (got - want) / (mag > 0 ? mag : 1);
        err = err < 0 ? -err : err;
        if (!(err <= *worst)) *worst = err; /* NaN sticks */
    }
    free(dh);
    return st;
}

sn_status sn_cuda_measure_ceilings(int ordinal, const sn_cuda_ceiling_opts *o, sn_cuda_ceilings *out,
                                   sn_err *e) {
    *out = (sn_cuda_ceilings){0};
    ctx cc = {0}, *c = &cc;
    int n = o->gemm_n, reps = o->reps > 0 ? o->reps : 10;
    int64_t elems = (int64_t)n * n;
    sn_status st = open_ctx(c, ordinal, e);
    /* the copy: a random source, so nothing compresses or short-cuts */
    if (!st && o->copy_bytes > 0) {
        c->copy_bytes = o->copy_bytes;
        st = SN_CUDA_CHECK(API, e, cuMemAlloc, &c->src, (size_t)o->copy_bytes);
        if (!st) st = SN_CUDA_CHECK(API, e, cuMemAlloc, &c->dst, (size_t)o->copy_bytes);
        int64_t chunk = o->copy_bytes < (64 << 20) ? o->copy_bytes : (64 << 20);
        void *h = NULL;
        CUdeviceptr tmp = 0;
        if (!st) st = random_values(c, &tmp, &h, chunk / 2, false, 11, e);
        for (int64_t at = 0; !st && at < o->copy_bytes; at += chunk) {
            size_t len = (size_t)(o->copy_bytes - at < chunk ? o->copy_bytes - at : chunk);
            st = SN_CUDA_CHECK(API, e, cuMemcpyDtoDAsync, c->src + (CUdeviceptr)at, tmp, len, c->stream);
        }
        if (tmp) c->api.cuMemFree(tmp);
        free(h);
        if (!st) st = time_median(c, copy_once, reps, &out->copy_s, e);
        if (!st) out->copy_tb_per_s = 2.0 * (double)o->copy_bytes / out->copy_s / 1e12;
    }
    /* the GEMM: n x n x n, bf16 (or f32) in and out, fp32 accumulation */
    c->f32 = o->f32;
    if (!st && n > 0) {
        st = random_values(c, &c->a, &c->host_a, elems, c->f32, 1, e);
        if (!st) st = random_values(c, &c->b, &c->host_b, elems, c->f32, 2, e);
        if (!st) st = SN_CUDA_CHECK(API, e, cuMemAlloc, &c->d, (size_t)elems * (c->f32 ? 4 : 2));
        if (!st) st = SN_CUDA_CHECK(API, e, cuMemAlloc, &c->ws, (size_t)WORKSPACE);
        if (!st) st = sn_cuda_api_load(API, SN_LIB_CUBLASLT, e);
        if (!st) st = SN_CUDA_CHECK(API, e, cublasLtCreate, &c->lt);
        if (!st) st = SN_CUDA_CHECK(API, e, cublasLtMatmulDescCreate, &c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        if (!st) st = SN_CUDA_CHECK(API, e, cublasLtMatrixLayoutCreate, &c->layout,
                                    c->f32 ? CUDA_R_32F : CUDA_R_16BF,
                                    (uint64_t)n, (uint64_t)n, (int64_t)n);
        uint64_t ws = WORKSPACE;
        if (!st) st = SN_CUDA_CHECK(API, e, cublasLtMatmulPreferenceCreate, &c->pref);
        if (!st) st = SN_CUDA_CHECK(API, e, cublasLtMatmulPreferenceSetAttribute, c->pref,
                                    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        int found = 0;
        if (!st) st = SN_CUDA_CHECK(API, e, cublasLtMatmulAlgoGetHeuristic, c->lt, c->desc, c->layout,
                                    c->layout, c->layout, c->layout, c->pref, 1, &c->heur, &found);
        if (!st && !found)
            st = sn_fail(e, SN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for a %d x %d x %d %s GEMM",
                         n, n, n, c->f32 ? "f32" : "bf16");
        if (!st) st = time_median(c, gemm_once, reps, &out->gemm_s, e);
        if (!st) out->bf16_tflops = 2.0 * (double)n * n * n / out->gemm_s / 1e12;
        if (!st) st = spot_check(c, n, &out->gemm_check_err, e);
    }
    size_t free_b = 0, total = 0;
    if (!st && !c->api.cuMemGetInfo(&free_b, &total)) out->device_bytes = (int64_t)total;
    release(c);
    return st;
}

sn_status sn_cuda_memory_used(int ordinal, int64_t *used, int64_t *total, sn_err *e) {
    ctx cc = {0}, *c = &cc;
    size_t free_b = 0, tot = 0;
    sn_status st = open_ctx(c, ordinal, e);
    if (!st) st = SN_CUDA_CHECK(API, e, cuMemGetInfo, &free_b, &tot);
    *used = (int64_t)(tot - free_b);
    *total = (int64_t)tot;
    release(c);
    return st;
}
