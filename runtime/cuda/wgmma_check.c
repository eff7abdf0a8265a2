/* wgmma_check.c: the wgmma GEMM (codegen/cuda/cuda_wgmma.c) run on the device in each of its
 * layouts and compared with the host's exact product: what the SIMT simulator assumes about
 * sm_90's warpgroup MMA (descriptor fields, the 128-byte swizzle as a function of the shared
 * address, the accumulator and A-register fragments) confirmed or refuted by the hardware.
 * Convention: its own handles on the primary context, all freed here; inputs are multiples of
 * 1/8 of magnitude at most 2, so every sum is exact in f32 and the result must be equal. */
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_wgmma.h"
#include "cuda_rt.h"

enum { DIM = 256 }; /* M = N = K: 4 x 4 tiles, 4 K steps */

/* The 16-bit bits of v, a multiple of 1/8 with |v| <= 2 (exact in both types). */
static uint16_t bits16(float v, int f16) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if (!f16) return (uint16_t)(u >> 16);
    if (v == 0) return (uint16_t)(u >> 16 & 0x8000u);
    unsigned sign = u >> 16 & 0x8000u, exp = (u >> 23 & 0xffu) - 127u + 15u;
    return (uint16_t)(sign | exp << 10 | (u >> 13 & 0x3ffu));
}

/* One form: compile, launch on DIM^3, *worst the largest difference from the product. */
static sn_status run_form(sn_cuda_api *api, CUstream stream, const sn_wgmma_form *f,
                          const float *a, const float *b, double *worst, sn_err *e) {
    const char *text = sn_cuda_wgmma_gemm_source();
    size_t n = strlen(f->defines) + strlen(text) + 1, elems = (size_t)DIM * DIM;
    char *src = malloc(n);
    uint16_t *ha = malloc(elems * 2), *hb = malloc(elems * 2);
    float *hc = malloc(elems * 4);
    sn_cuda_module m = {0};
    CUmodule mod = NULL;
    CUdeviceptr da = 0, db = 0, dc = 0;
    sn_status st = src && ha && hb && hc ? SN_OK
                   : sn_fail(e, SN_ERR_OOM, "wgmma check: no host memory");
    if (!st) {
        snprintf(src, n, "%s%s", f->defines, text);
        for (int i = 0; i < DIM; i++)
            for (int k = 0; k < DIM; k++) {
                ha[i * DIM + k] = bits16(a[i * DIM + k], f->f16);
                hb[f->trans_b ? k * DIM + i : i * DIM + k] = bits16(b[i * DIM + k], f->f16);
            }
        st = sn_cuda_nvrtc_compile(api, src, "wgmma_gemm.cu", 90, &m, e);
    }
    if (!st) st = SN_CUDA_CHECK(api, e, cuModuleLoadData, &mod, m.cubin);
    CUfunction fn = NULL;
    if (!st) st = SN_CUDA_CHECK(api, e, cuModuleGetFunction, &fn, mod, "sn_wgmma_gemm");
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemAlloc, &da, elems * 2);
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemAlloc, &db, elems * 2);
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemAlloc, &dc, elems * 4);
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemcpyHtoDAsync, da, ha, elems * 2, stream);
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemcpyHtoDAsync, db, hb, elems * 2, stream);
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemsetD8Async, dc, 0xff, elems * 4, stream); /* NaN */
    int dim = DIM;
    void *params[] = {&dc, &da, &db, &dim, &dim, &dim};
    if (!st) st = SN_CUDA_CHECK(api, e, cuLaunchKernel, fn, DIM / 64, DIM / 64, 1, 128, 1, 1,
                                SN_WGMMA_GEMM_SHARED, stream, params, NULL);
    if (!st) st = SN_CUDA_CHECK(api, e, cuMemcpyDtoHAsync, hc, dc, elems * 4, stream);
    if (!st) st = SN_CUDA_CHECK(api, e, cuStreamSynchronize, stream);
    *worst = 0;
    for (int i = 0; !st && i < DIM; i++)
        for (int j = 0; j < DIM; j++) {
            double want = 0;
            for (int k = 0; k < DIM; k++) want += (double)a[i * DIM + k] * b[j * DIM + k];
            double d = hc[i * DIM + j] - want;
            d = d < 0 ? -d : d;
            if (!(d <= *worst)) *worst = d; /* NaN sticks */
        }
    CUdeviceptr ps[] = {da, db, dc};
    for (int i = 0; i < 3; i++)
        if (ps[i]) api->cuMemFree(ps[i]);
    if (mod) api->cuModuleUnload(mod);
    sn_cuda_module_free(&m);
    free(src), free(ha), free(hb), free(hc);
    return st;
}

sn_status sn_cuda_wgmma_check(int ordinal, sn_cuda_wgmma_result *out, sn_err *e) {
    *out = (sn_cuda_wgmma_result){0};
    sn_cuda_api api = {0};
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    CUstream stream = NULL;
    int major = 0, minor = 0;
    sn_status st = sn_cuda_api_load(&api, SN_LIB_CUDA, e);
    if (!st) st = SN_CUDA_CHECK(&api, e, cuInit, 0);
    if (!st) st = SN_CUDA_CHECK(&api, e, cuDeviceGet, &dev, ordinal);
    if (!st) st = SN_CUDA_CHECK(&api, e, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (!st) st = SN_CUDA_CHECK(&api, e, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    out->sm = 10 * major + minor;
    if (!st && out->sm != 90) {
        out->skipped = true; /* wgmma is sm_90a's alone */
        sn_cuda_api_unload(&api);
        return SN_OK;
    }
    if (!st) st = SN_CUDA_CHECK(&api, e, cuDevicePrimaryCtxRetain, &ctx, dev);
    if (!st) st = SN_CUDA_CHECK(&api, e, cuCtxSetCurrent, ctx);
    if (!st) st = SN_CUDA_CHECK(&api, e, cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
    float *a = malloc(sizeof *a * DIM * DIM), *b = malloc(sizeof *b * DIM * DIM);
    if (!st && !(a && b)) st = sn_fail(e, SN_ERR_OOM, "wgmma check: no host memory");
    unsigned s = 2024;
    for (int i = 0; !st && i < DIM * DIM; i++) {
        s = s * 1103515245u + 12345u;
        a[i] = (float)((int)(s >> 16 & 31) - 16) / 8.0f;
        s = s * 1103515245u + 12345u;
        b[i] = (float)((int)(s >> 16 & 31) - 16) / 8.0f;
    }
    for (int i = 0; !st && i < sn_wgmma_gemm_n_forms && i < SN_WGMMA_MAX_FORMS; i++) {
        st = run_form(&api, stream, &sn_wgmma_gemm_forms[i], a, b, &out->worst[i], e);
        out->forms = i + 1;
        if (!st && !(out->worst[i] == 0)) out->failed++;
    }
    free(a), free(b);
    if (stream) api.cuStreamDestroy(stream);
    if (ctx) api.cuDevicePrimaryCtxRelease(dev);
    sn_cuda_api_unload(&api);
    return st;
}
