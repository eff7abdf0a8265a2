/* crash_nvrtc.c: a fake NVRTC for test_cudadev (loaded through SN_LIBNVRTC): it has every symbol
 * runtime/cuda takes from NVRTC, and its nvrtcCompileProgram dies of SIGSEGV, as NVRTC's
 * embedded ptxas once did. The training process must survive it. */
#include <signal.h>

#include "runtime/cuda/cuda_api.h"

const char *nvrtcGetErrorString(nvrtcResult result) { return result ? "NVRTC_ERROR" : "NVRTC_SUCCESS"; }
nvrtcResult nvrtcVersion(int *major, int *minor) {
    *major = 99;
    *minor = 0;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames) {
    *prog = (nvrtcProgram)1;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) { return NVRTC_SUCCESS; }
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options) {
    raise(SIGSEGV);
    return 1;
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet) { *logSizeRet = 1; return 0; }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) { log[0] = 0; return 0; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet) { *cubinSizeRet = 1; return 0; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) { cubin[0] = 0; return 0; }
