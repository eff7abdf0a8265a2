/* nvrtc_api.h: every function sinter takes from NVRTC, as an X-macro of (return type, name,
 * exported symbol, parameters), with the types they need; nvrtc.c opens the library with dlopen
 * and looks these up (sinter links no NVRTC). Convention: names and signatures are exactly those
 * of nvrtc.h (CUDA 13); a stand-in library implements exactly these symbols. Do not include this
 * header together with nvrtc.h: it declares the same type names itself, so that sinter builds
 * without the toolkit's headers. */
#ifndef SN_NVRTC_API_H
#define SN_NVRTC_API_H

#include <stddef.h>

typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1 };

#define SN_CUDA_NVRTC_API(X)                                                                       \
    X(const char *, nvrtcGetErrorString, "nvrtcGetErrorString", (nvrtcResult result))              \
    X(nvrtcResult, nvrtcVersion, "nvrtcVersion", (int *major, int *minor))                         \
    X(nvrtcResult, nvrtcCreateProgram, "nvrtcCreateProgram",                                       \
      (nvrtcProgram *prog, const char *src, const char *name, int numHeaders,                      \
       const char *const *headers, const char *const *includeNames))                               \
    X(nvrtcResult, nvrtcDestroyProgram, "nvrtcDestroyProgram", (nvrtcProgram *prog))               \
    X(nvrtcResult, nvrtcCompileProgram, "nvrtcCompileProgram",                                     \
      (nvrtcProgram prog, int numOptions, const char *const *options))                             \
    X(nvrtcResult, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize",                               \
      (nvrtcProgram prog, size_t *logSizeRet))                                                     \
    X(nvrtcResult, nvrtcGetProgramLog, "nvrtcGetProgramLog", (nvrtcProgram prog, char *log))       \
    X(nvrtcResult, nvrtcGetCUBINSize, "nvrtcGetCUBINSize", (nvrtcProgram prog, size_t *cubinSizeRet)) \
    X(nvrtcResult, nvrtcGetCUBIN, "nvrtcGetCUBIN", (nvrtcProgram prog, char *cubin))

/* The library's default name and the environment variable that overrides it (a path or a name
 * dlopen finds): a stand-in NVRTC is loaded this way in the tests. */
#define SN_LIBNVRTC_DEFAULT "libnvrtc.so.13"
#define SN_LIBNVRTC_ENV "SN_LIBNVRTC"

#endif
