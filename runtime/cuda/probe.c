/* probe.c: what `sinter info` and `--device auto` learn about CUDA without opening a device:
 * the driver's devices and the toolkit libraries' versions. Convention: probing never fails: a
 * missing library is an answer, in words. */
#include <string.h>

#include "cuda_rt.h"

/* Loads libcuda and calls cuInit; returns the device count, or 0 with the reason in why. */
static int probe(sn_cuda_api *a, char *why, size_t len) {
    sn_err e = {0};
    int n = 0;
    if (sn_cuda_api_load(a, SN_LIB_CUDA, &e)) {
        if (why && strstr(e.msg, "No such file or directory"))
            snprintf(why, len, "%s not found", sn_cuda_lib_name(a, SN_LIB_CUDA));
        else if (why)
            snprintf(why, len, "%s", e.msg);
        return 0;
    }
    if (SN_CUDA_CHECK(a, &e, cuInit, 0) || SN_CUDA_CHECK(a, &e, cuDeviceGetCount, &n)) {
        if (why) snprintf(why, len, "%s", e.msg);
        return 0;
    }
    if (n == 0 && why) snprintf(why, len, "cuDeviceGetCount: 0 devices");
    return n;
}

int sn_cuda_device_count(char *why, size_t why_len) {
    sn_cuda_api a = {0};
    if (why && why_len) why[0] = '\0';
    int n = probe(&a, why, why_len);
    sn_cuda_api_unload(&a);
    return n;
}

void sn_cuda_info_print(FILE *f) {
    sn_cuda_api a = {0};
    sn_err e = {0};
    int major = 0, minor = 0;
    if (sn_nvrtc_version(&a.nvrtc, &major, &minor, &e))
        fprintf(f, "nvrtc:      not available (%s)\n", e.msg);
    else
        fprintf(f, "nvrtc:      %d.%d (%s)\n", major, minor, sn_nvrtc_lib_name(&a.nvrtc));
    if (sn_cuda_api_load(&a, SN_LIB_CUBLASLT, &e)) {
        fprintf(f, "cublaslt:   not available (%s)\n", e.msg);
    } else {
        size_t v = a.cublasLtGetVersion();
        fprintf(f, "cublaslt:   %zu.%zu.%zu (%s)\n", v / 10000, v / 100 % 100, v % 100,
                sn_cuda_lib_name(&a, SN_LIB_CUBLASLT));
    }
    char why[sizeof e.msg];
    int n = probe(&a, why, sizeof why);
    if (n == 0) {
        fprintf(f, "cuda:       no CUDA device (%s)\n", why);
        sn_cuda_api_unload(&a);
        return;
    }
    int drv = 0;
    a.cuDriverGetVersion(&drv);
    fprintf(f, "cuda:       driver for CUDA %d.%d (%s), %d device%s\n", drv / 1000, drv % 1000 / 10,
            sn_cuda_lib_name(&a, SN_LIB_CUDA), n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        CUdevice dev;
        char name[256] = "?", mem_s[32];
        size_t mem = 0;
        int cc_major = 0, cc_minor = 0, sms = 0;
        if (SN_CUDA_CHECK(&a, &e, cuDeviceGet, &dev, i)) {
            fprintf(f, "  device %d: %s\n", i, e.msg);
            continue;
        }
        a.cuDeviceGetName(name, (int)sizeof name, dev);
        a.cuDeviceTotalMem(&mem, dev);
        a.cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        a.cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
        a.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
        fprintf(f, "  device %d: %s, sm_%d%d, %s, %d SMs%s\n", i, name, cc_major, cc_minor,
                sn_bytes_str((int64_t)mem, mem_s, sizeof mem_s), sms,
                cc_major * 10 + cc_minor < 75 ? " (too old for sinter: sm_75 or newer)" : "");
    }
    sn_cuda_api_unload(&a);
}
