/* thin_check.c: thin_check.h. */
#include "thin_check.h"

#include <stdio.h>
#include <stdlib.h>

#include "codegen/cuda/cuda.h"
#include "runtime/gemm_lowp.h"
#include "harness.h"

void *thin_to_dt(sn_dtype dt, const float *f, int64_t n) {
    void *b = malloc((size_t)n * (dt == SN_F32 ? 4 : 2));
    ck_assert(b);
    for (int64_t i = 0; i < n; i++) {
        if (dt == SN_F32) ((float *)b)[i] = f[i];
        else ((uint16_t *)b)[i] = sn_lowp_round(dt, f[i]);
    }
    return b;
}

bool thin_have_nvrtc(const char *suite) {
    sn_cuda_module m;
    sn_err e;
    sn_status st = sn_nvrtc_compile("extern \"C\" __global__ void k() {}\n", "probe.cu", 80, &m, &e);
    sn_cuda_module_free(&m);
    if (st == SN_ERR_UNSUPPORTED) printf("%s: %s: skipping the NVRTC checks\n", suite, e.msg);
    else ck_assert_msg(st == SN_OK, "%s", e.msg);
    return st == SN_OK;
}

bool thin_sim_load(const char *src, bool profiled, sn_sim_module **h, char *why, size_t len) {
    sn_err e;
    sn_status st = profiled ? sn_sim_module_load_profiled(src, h, &e) : sn_sim_module_load(src, h, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        snprintf(why, len, "no simulator: %s", e.msg);
        return false;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return true;
}
