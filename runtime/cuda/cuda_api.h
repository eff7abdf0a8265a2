/* cuda_api.h: every function sinter takes from libcuda and cuBLASLt (NVRTC's: nvrtc_api.h, included
 * here), as X-macros of (return type, name, exported symbol, parameters), with the few types and
 * constants they need.
 * Convention: names and signatures are exactly those of cuda.h, nvrtc.h and cublasLt.h (CUDA 13);
 * the symbol is what dlsym looks up (cuda.h's #define maps e.g. cuMemAlloc to cuMemAlloc_v2).
 * A stand-in library implements exactly these symbols. Do not include this header together with
 * cuda.h, nvrtc.h or cublasLt.h: it declares the same type names itself, so that sinter builds
 * without the toolkit's headers. */
#ifndef SN_CUDA_API_H
#define SN_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/cuda/nvrtc_api.h"

/* ---- libcuda (the Driver API): types and the constants sinter uses ---- */

typedef int CUresult;                 /* enum cudaError_enum */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef int CUdevice_attribute;       /* enum CUdevice_attribute_enum */
typedef int CUfunction_attribute;     /* enum CUfunction_attribute_enum */
typedef int CUstreamCaptureMode;      /* enum CUstreamCaptureMode_enum */
typedef int CUmemorytype;             /* enum CUmemorytype_enum */
typedef struct CUarray_st *CUarray;
enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3 };
/* cuda.h's CUDA_MEMCPY2D (CUDA_MEMCPY2D_v2): a copy of Height rows of WidthInBytes */
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};
enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,       /* kHz */
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37, /* bits */
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};
enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };
enum { CU_STREAM_DEFAULT = 0, CU_STREAM_NON_BLOCKING = 1 };
enum { CU_EVENT_DEFAULT = 0, CU_EVENT_DISABLE_TIMING = 2 };
enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

/* X(return type, name, symbol, (parameters)) */
#define SN_CUDA_DRIVER_API(X)                                                                      \
    X(CUresult, cuGetErrorName, "cuGetErrorName", (CUresult error, const char **pStr))             \
    X(CUresult, cuGetErrorString, "cuGetErrorString", (CUresult error, const char **pStr))         \
    X(CUresult, cuInit, "cuInit", (unsigned int Flags))                                            \
    X(CUresult, cuDriverGetVersion, "cuDriverGetVersion", (int *driverVersion))                    \
    X(CUresult, cuDeviceGetCount, "cuDeviceGetCount", (int *count))                                \
    X(CUresult, cuDeviceGet, "cuDeviceGet", (CUdevice *device, int ordinal))                       \
    X(CUresult, cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))           \
    X(CUresult, cuDeviceGetAttribute, "cuDeviceGetAttribute",                                      \
      (int *pi, CUdevice_attribute attrib, CUdevice dev))                                          \
    X(CUresult, cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *bytes, CUdevice dev))            \
    X(CUresult, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                              \
      (CUcontext *pctx, CUdevice dev))                                                             \
    X(CUresult, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))         \
    X(CUresult, cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                               \
    X(CUresult, cuMemGetInfo, "cuMemGetInfo_v2", (size_t *free, size_t *total))                    \
    X(CUresult, cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *dptr, size_t bytesize))                 \
    X(CUresult, cuMemFree, "cuMemFree_v2", (CUdeviceptr dptr))                                     \
    X(CUresult, cuMemHostAlloc, "cuMemHostAlloc", (void **pp, size_t bytesize, unsigned int Flags)) \
    X(CUresult, cuMemFreeHost, "cuMemFreeHost", (void *p))                                         \
    X(CUresult, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                         \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))            \
    X(CUresult, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",                                         \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                  \
    X(CUresult, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2",                                         \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))          \
    X(CUresult, cuMemcpy2DAsync, "cuMemcpy2DAsync_v2", (const CUDA_MEMCPY2D *pCopy, CUstream hStream)) \
    X(CUresult, cuMemsetD8Async, "cuMemsetD8Async",                                                \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))                       \
    X(CUresult, cuStreamCreate, "cuStreamCreate", (CUstream *phStream, unsigned int Flags))        \
    X(CUresult, cuStreamDestroy, "cuStreamDestroy_v2", (CUstream hStream))                         \
    X(CUresult, cuStreamSynchronize, "cuStreamSynchronize", (CUstream hStream))                    \
    X(CUresult, cuStreamWaitEvent, "cuStreamWaitEvent",                                            \
      (CUstream hStream, CUevent hEvent, unsigned int Flags))                                      \
    X(CUresult, cuEventCreate, "cuEventCreate", (CUevent *phEvent, unsigned int Flags))            \
    X(CUresult, cuEventRecord, "cuEventRecord", (CUevent hEvent, CUstream hStream))                \
    X(CUresult, cuEventSynchronize, "cuEventSynchronize", (CUevent hEvent))                        \
    X(CUresult, cuEventElapsedTime, "cuEventElapsedTime",                                          \
      (float *pMilliseconds, CUevent hStart, CUevent hEnd))                                        \
    X(CUresult, cuEventDestroy, "cuEventDestroy_v2", (CUevent hEvent))                             \
    X(CUresult, cuModuleLoadData, "cuModuleLoadData", (CUmodule *module, const void *image))       \
    X(CUresult, cuModuleUnload, "cuModuleUnload", (CUmodule hmod))                                 \
    X(CUresult, cuModuleGetFunction, "cuModuleGetFunction",                                        \
      (CUfunction *hfunc, CUmodule hmod, const char *name))                                        \
    X(CUresult, cuFuncSetAttribute, "cuFuncSetAttribute",                                          \
      (CUfunction hfunc, CUfunction_attribute attrib, int value))                                  \
    X(CUresult, cuLaunchKernel, "cuLaunchKernel",                                                  \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                     \
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))          \
    X(CUresult, cuStreamBeginCapture, "cuStreamBeginCapture_v2",                                   \
      (CUstream hStream, CUstreamCaptureMode mode))                                                \
    X(CUresult, cuStreamEndCapture, "cuStreamEndCapture", (CUstream hStream, CUgraph *phGraph))    \
    X(CUresult, cuGraphInstantiate, "cuGraphInstantiateWithFlags",                                 \
      (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags))                        \
    X(CUresult, cuGraphLaunch, "cuGraphLaunch", (CUgraphExec hGraphExec, CUstream hStream))        \
    X(CUresult, cuGraphExecDestroy, "cuGraphExecDestroy", (CUgraphExec hGraphExec))                \
    X(CUresult, cuGraphDestroy, "cuGraphDestroy", (CUgraph hGraph))

/* ---- NVRTC: codegen/cuda/nvrtc_api.h (codegen/cuda/nvrtc.c opens it, for the runtime too) ---- */

/* ---- cuBLASLt ---- */

typedef int cublasStatus_t;       /* CUBLAS_STATUS_SUCCESS = 0 */
typedef int cublasComputeType_t;
typedef int cudaDataType_t;
typedef int cudaDataType;
typedef int cublasOperation_t;
typedef int cublasLtOrder_t;
typedef int cublasLtEpilogue_t;
typedef int cublasLtMatmulDescAttributes_t;
typedef int cublasLtMatrixLayoutAttribute_t;
typedef int cublasLtMatmulPreferenceAttributes_t;
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct { uint64_t data[8]; } cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef CUstream cudaStream_t;

enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14, CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29 };
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 };
enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11, /* void *; the GELU input matrix */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,      /* int64_t; % 8 == 0, >= D's rows */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13, /* int64_t; % 8 == 0 */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22, /* int32_t; -1 (unset): D's type */
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum {
    CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
};
enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* .. _B 6, _C 7, _D 8: uint32_t, default 256 */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,      /* GELU | 128: the GELU input stored in the aux */
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, /* GELU_AUX | BIAS */
    CUBLASLT_EPILOGUE_DGELU = 192,         /* 64 | 128: times gelu'(aux) */
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,   /* DGELU | 16: and the bias gradient */
};

#define SN_CUDA_CUBLASLT_API(X)                                                                    \
    X(const char *, cublasLtGetStatusName, "cublasLtGetStatusName", (cublasStatus_t status))       \
    X(const char *, cublasLtGetStatusString, "cublasLtGetStatusString", (cublasStatus_t status))   \
    X(size_t, cublasLtGetVersion, "cublasLtGetVersion", (void))                                    \
    X(cublasStatus_t, cublasLtCreate, "cublasLtCreate", (cublasLtHandle_t *lightHandle))           \
    X(cublasStatus_t, cublasLtDestroy, "cublasLtDestroy", (cublasLtHandle_t lightHandle))          \
    X(cublasStatus_t, cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate",                        \
      (cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,                          \
       cudaDataType_t scaleType))                                                                  \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy",                      \
      (cublasLtMatmulDesc_t matmulDesc))                                                           \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute",            \
      (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void *buf,      \
       size_t sizeInBytes))                                                                        \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate",                    \
      (cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows, uint64_t cols,         \
       int64_t ld))                                                                                \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy",                  \
      (cublasLtMatrixLayout_t matLayout))                                                          \
    X(cublasStatus_t, cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute",        \
      (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void *buf,    \
       size_t sizeInBytes))                                                                        \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate",            \
      (cublasLtMatmulPreference_t *pref))                                                          \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy",          \
      (cublasLtMatmulPreference_t pref))                                                           \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute", \
      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,                 \
       const void *buf, size_t sizeInBytes))                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic",            \
      (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,                           \
       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,   \
       cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,                        \
       int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[],            \
       int *returnAlgoCount))                                                                      \
    X(cublasStatus_t, cublasLtMatmul, "cublasLtMatmul",                                            \
      (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,          \
       const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,   \
       const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,                     \
       cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,            \
       size_t workspaceSizeInBytes, cudaStream_t stream))

/* The libraries' default names and the environment variables that override them (a path or a
 * name dlopen finds): a stand-in driver is loaded this way in the tests. */
#define SN_LIBCUDA_DEFAULT "libcuda.so.1"
#define SN_LIBCUBLASLT_DEFAULT "libcublasLt.so.13"
#define SN_LIBCUDA_ENV "SN_LIBCUDA"
#define SN_LIBCUBLASLT_ENV "SN_LIBCUBLASLT"

#endif
