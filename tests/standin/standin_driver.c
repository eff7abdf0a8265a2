/* standin_driver.c: the stand-in libcuda's state, error names, device queries, the primary
 * context and device memory (a test instrument: see standin.h for what it cannot prove).
 * Convention: device memory is host memory mapped with a guard page after it, poisoned with 0xff
 * (NaN) like fresh device memory is garbage, and handed out at non-canonical addresses
 * (0x5d00... on x86-64): a host dereference of a device pointer faults. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "standin_driver.h"

si_state si;
static __thread CUcontext current; /* per thread, as in the driver */
static struct CUctx_st { int refs; } primary;

#define DEV_BASE 0x5d00000000000000ull
#define DEV_GAP (2ull << 20) /* unmapped device addresses between two allocations */

/* ---- errors ---- */

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {SI_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {SI_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {SI_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {SI_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {SI_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {SI_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {SI_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {SI_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {SI_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not initiated in this stream"},
};

static int error_index(CUresult r) {
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
        if (errors[i].code == r) return (int)i;
    return -1;
}

CUresult cuGetErrorName(CUresult error, const char **pStr) {
    int i = error_index(error);
    *pStr = i < 0 ? NULL : errors[i].name;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
    int i = error_index(error);
    *pStr = i < 0 ? NULL : errors[i].text;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- initialisation, the device, the context ---- */

CUresult cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (si.initialised) return CUDA_SUCCESS;
    si.sm = (int)sn_standin_env("SN_STANDIN_SM", 80);
    si.total = sn_standin_env("SN_STANDIN_MEM", 4ull << 30);
    si.fail_alloc = sn_standin_env("SN_STANDIN_FAIL_ALLOC", 0);
    si.fail_launch = sn_standin_env("SN_STANDIN_FAIL_LAUNCH", 0);
    si.no_binary = sn_standin_env("SN_STANDIN_NO_BINARY", 0) != 0;
    si.fault_launch = sn_standin_env("SN_STANDIN_FAULT_LAUNCH", 0);
    si.profile = getenv("SN_STANDIN_PROFILE");
    if (si.profile && !*si.profile) si.profile = NULL;
    if (si.sm < 10 || si.sm > 200) {
        sn_standin_say("SN_STANDIN_SM=%d is not a compute capability like 75, 80 or 90", si.sm);
        return CUDA_ERROR_INVALID_VALUE;
    }
    si.initialised = true;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion) {
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "sinter stand-in driver (SIMT simulator, sm_%d)", si.sm);
    return CUDA_SUCCESS;
}

/* Shared memory per block with opt-in, as the real parts have it (the multiprocessor has 1 KiB
 * more): 163 KiB on sm_80 and sm_87, 227 KiB on sm_90 to sm_11x, 99 KiB on the consumer parts
 * (sm_86, sm_89, sm_12x), 64 KiB before. */
int si_shared_optin(void) {
    return si.sm == 80 || si.sm == 87 ? 166912 : si.sm >= 90 && si.sm < 120 ? 232448 : si.sm >= 86 ? 101376 : 65536;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 108; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *pi = 1215000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *pi = 40 << 20; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = si.sm / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = si.sm % 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *pi = si_shared_optin() + 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = si_shared_optin(); break;
    default:
        sn_standin_say("cuDeviceGetAttribute: attribute %d is not one the stand-in knows", attrib);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = si.total;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    primary.refs++;
    *pctx = &primary;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (primary.refs <= 0) return SI_INVALID_CONTEXT;
    if (--primary.refs == 0 && current == &primary) current = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && (ctx != &primary || primary.refs <= 0)) return SI_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult si_need_ctx(const char *call) {
    if (!si.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (si.sticky) return si.sticky;
    if (current == &primary && primary.refs > 0) return CUDA_SUCCESS;
    sn_standin_say("%s: no context is current on this thread (cuCtxSetCurrent)", call);
    return SI_INVALID_CONTEXT;
}

/* ---- memory ---- */

typedef struct {
    CUdeviceptr dev;
    size_t bytes;
    unsigned char *host; /* inside the mapping */
    void *map;
    size_t map_bytes;    /* the data, rounded to pages, and a guard page after */
    bool live;
} allocation;

static allocation *allocs;
static size_t n_allocs, cap_allocs;
static CUdeviceptr next_dev = DEV_BASE;

static allocation *find(CUdeviceptr p) {
    for (size_t i = n_allocs; i-- > 0;)
        if (p >= allocs[i].dev && p - allocs[i].dev <= allocs[i].bytes) return &allocs[i];
    return NULL;
}

void *si_host(CUdeviceptr p, size_t n, const char *call) {
    allocation *a = find(p);
    if (!a || !a->live || n > a->bytes - (p - a->dev)) {
        sn_standin_say("%s: device range 0x%llx + %zu bytes is %s", call, (unsigned long long)p, n,
                       !a ? "not device memory" : !a->live ? "in freed memory"
                          : "past the end of its allocation");
        return NULL;
    }
    return a->host + (p - a->dev);
}

void *sn_standin_host(CUdeviceptr p, size_t bytes) { return si_host(p, bytes, "cuBLASLt"); }

CUresult cuMemGetInfo(size_t *free_b, size_t *total) {
    CUresult r = si_need_ctx("cuMemGetInfo");
    if (r) return r;
    *free_b = si.total - si.used;
    *total = si.total;
    return CUDA_SUCCESS;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    CUresult r = si_need_ctx("cuMemAlloc");
    if (r) return r;
    if (si_capturing()) {
        sn_standin_say("cuMemAlloc while a stream is capturing");
        return SI_CAPTURE_UNSUPPORTED;
    }
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    si.allocs++;
    size_t accounted = round_up(bytesize, 256);
    if (si.fail_alloc && si.allocs == si.fail_alloc) {
        sn_standin_say("cuMemAlloc #%llu of %zu bytes fails as SN_STANDIN_FAIL_ALLOC asks",
                       (unsigned long long)si.allocs, bytesize);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (accounted > si.total - si.used) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), data = round_up(accounted, page);
    size_t map_bytes = data + page;
    void *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    mprotect((char *)map + data, page, PROT_NONE); /* an overrun of the block faults */
    if (n_allocs == cap_allocs) {
        size_t cap = cap_allocs ? 2 * cap_allocs : 64;
        allocation *t = realloc(allocs, cap * sizeof *t);
        if (!t) {
            munmap(map, map_bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocs = t;
        cap_allocs = cap;
    }
    allocation *a = &allocs[n_allocs++];
    *a = (allocation){.dev = next_dev, .bytes = bytesize, .map = map, .map_bytes = map_bytes,
                      .host = (unsigned char *)map + (data - accounted), .live = true};
    memset(a->host, 0xff, accounted); /* fresh device memory is garbage: NaN, here */
    next_dev += round_up(accounted, DEV_GAP) + DEV_GAP; /* addresses are never reused */
    si.used += accounted;
    *dptr = a->dev;
    return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr) {
    CUresult r = si_need_ctx("cuMemFree");
    if (r) return r;
    if (si_capturing()) {
        sn_standin_say("cuMemFree while a stream is capturing");
        return SI_CAPTURE_UNSUPPORTED;
    }
    si_drain_all(); /* cuMemFree synchronises: no copy runs on freed memory */
    si_synced_all();
    allocation *a = find(dptr);
    if (!a || !a->live || a->dev != dptr) {
        sn_standin_say("cuMemFree(0x%llx): %s", (unsigned long long)dptr,
                       !a ? "not device memory" : !a->live ? "already freed"
                          : "not the start of an allocation");
        return CUDA_ERROR_INVALID_VALUE;
    }
    munmap(a->map, a->map_bytes);
    a->live = false;
    a->host = NULL;
    si.used -= round_up(a->bytes, 256);
    return CUDA_SUCCESS;
}

/* Host copies may not be captured here (the stand-in records device work only). */
static CUresult host_copy(void *dst, const void *src, size_t n, bool up, CUstream s,
                          const char *call) {
    CUresult r = si_need_ctx(call);
    if (!r) r = si_stream_check(s, call);
    if (r) return r;
    if (si_capturing()) {
        sn_standin_say("%s: a host copy while a stream is capturing", call);
        return SI_CAPTURE_UNSUPPORTED;
    }
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    return si_stream_defer(s, dst, src, n, up); /* standin_stream.c: run when something orders it */
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                           CUstream hStream) {
    return host_copy(si_host(dstDevice, ByteCount, "cuMemcpyHtoDAsync"), srcHost, ByteCount, true,
                     hStream, "cuMemcpyHtoDAsync");
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                           CUstream hStream) {
    return host_copy(dstHost, si_host(srcDevice, ByteCount, "cuMemcpyDtoHAsync"), ByteCount, false,
                     hStream, "cuMemcpyDtoHAsync");
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                           CUstream hStream) {
    CUresult r = si_need_ctx("cuMemcpyDtoDAsync");
    if (r) return r;
    if (!si_host(dstDevice, ByteCount, "cuMemcpyDtoDAsync (destination)") ||
        !si_host(srcDevice, ByteCount, "cuMemcpyDtoDAsync (source)"))
        return CUDA_ERROR_INVALID_VALUE;
    si_op op = {.kind = SI_COPY, .dst = dstDevice, .src = srcDevice, .bytes = ByteCount};
    return si_stream_do(hStream, &op, "cuMemcpyDtoDAsync");
}

/* Device to device only (what sinter asks), as row copies in stream order; a pitch below the
 * row, or a row outside an allocation, is refused as the driver refuses it. */
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *m, CUstream hStream) {
    CUresult r = si_need_ctx("cuMemcpy2DAsync");
    if (r) return r;
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    if (m->srcMemoryType != CU_MEMORYTYPE_DEVICE || m->dstMemoryType != CU_MEMORYTYPE_DEVICE) {
        sn_standin_say("cuMemcpy2DAsync: memory types %d to %d: the stand-in copies device to "
                       "device only", m->srcMemoryType, m->dstMemoryType);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    size_t w = m->WidthInBytes;
    if (m->srcPitch < m->srcXInBytes + w || m->dstPitch < m->dstXInBytes + w) {
        sn_standin_say("cuMemcpy2DAsync: rows of %zu bytes with pitches %zu and %zu", w, m->srcPitch,
                       m->dstPitch);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (int queue = 0; queue < 2; queue++) /* every row checked before any is queued */
        for (size_t i = 0; i < m->Height && w; i++) {
            CUdeviceptr src = m->srcDevice + m->srcXInBytes + (m->srcY + i) * m->srcPitch;
            CUdeviceptr dst = m->dstDevice + m->dstXInBytes + (m->dstY + i) * m->dstPitch;
            if (!queue && (!si_host(dst, w, "cuMemcpy2DAsync (destination)") ||
                           !si_host(src, w, "cuMemcpy2DAsync (source)")))
                return CUDA_ERROR_INVALID_VALUE;
            si_op op = {.kind = SI_COPY, .dst = dst, .src = src, .bytes = w};
            if (queue && (r = si_stream_do(hStream, &op, "cuMemcpy2DAsync"))) return r;
        }
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    CUresult r = si_need_ctx("cuMemsetD8Async");
    if (r) return r;
    if (!si_host(dstDevice, N, "cuMemsetD8Async")) return CUDA_ERROR_INVALID_VALUE;
    si_op op = {.kind = SI_MEMSET, .dst = dstDevice, .value = uc, .bytes = N};
    return si_stream_do(hStream, &op, "cuMemsetD8Async");
}

/* ---- events: a clock reading taken when the stream reaches the event ---- */

/* Two clocks: the CPU's, and a modeled one that only the stand-in cuBLASLt's algorithms with a
 * modeled time advance (the several it gives a heuristic asked for more than one; the one it
 * gives otherwise has none). Between two events across which the modeled clock moved, the
 * elapsed time is the modeled clock's alone: what those algorithms take, whatever the CPU's
 * load, so that a test of choosing the fastest is exact, ties included. */
struct CUevent_st {
    double t;     /* seconds */
    double model; /* si.modeled_s then */
    bool recorded;
    CUstream stream; /* where it was last recorded, and that stream's deferred host copies */
    uint64_t copies; /* then: synchronising it runs those */
    uint64_t work;   /* and the device work it had run: waiting on it orders after that */
};

void si_event_stamp(CUevent ev) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ev->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    ev->model = si.modeled_s;
    ev->recorded = true;
}

void sn_standin_model_time(double seconds) { si.modeled_s += seconds; }

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    CUresult r = si_need_ctx("cuEventCreate");
    if (r) return r;
    if (!(*phEvent = calloc(1, sizeof **phEvent))) return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    CUresult r = si_need_ctx("cuEventRecord");
    if (r) return r;
    if (!hEvent) return SI_INVALID_HANDLE;
    /* not si_stream_do, which would run the deferred copies: the event is stamped now, after
       the work before it but for those */
    if ((r = si_stream_check(hStream, "cuEventRecord"))) return r;
    si_op op = {.kind = SI_EVENT, .event = hEvent};
    hEvent->stream = hStream;
    hEvent->copies = si_stream_issued(hStream);
    hEvent->work = si_stream_work(hStream);
    if (si_capturing()) return si_stream_do(hStream, &op, "cuEventRecord");
    si_event_stamp(hEvent);
    return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent hEvent) {
    CUresult r = si_need_ctx("cuEventSynchronize");
    if (r) return r;
    if (!hEvent) return SI_INVALID_HANDLE;
    si_stream_drain(hEvent->stream, hEvent->copies);
    si_stream_synced(hEvent->stream, hEvent->work);
    return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    CUresult r = si_need_ctx("cuStreamWaitEvent");
    if (!r) r = si_stream_check(hStream, "cuStreamWaitEvent");
    if (r) return r;
    if (!hEvent) return SI_INVALID_HANDLE;
    if (Flags) return CUDA_ERROR_INVALID_VALUE;
    if (si_capturing()) {
        sn_standin_say("cuStreamWaitEvent while a stream is capturing is not supported by the stand-in");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    si_stream_drain(hEvent->stream, hEvent->copies); /* hStream's later work runs at its call */
    si_stream_waited(hStream, hEvent->stream, hEvent->work);
    return CUDA_SUCCESS;
}

/* Page-locked host memory: plain host memory here. */
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    CUresult r = si_need_ctx("cuMemHostAlloc");
    if (r) return r;
    if (!pp || Flags) return CUDA_ERROR_INVALID_VALUE;
    return (*pp = malloc(bytesize ? bytesize : 1)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p) {
    CUresult r = si_need_ctx("cuMemFreeHost");
    if (r) return r;
    si_drain_all(); /* as the driver synchronises */
    si_synced_all();
    free(p);
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    CUresult r = si_need_ctx("cuEventElapsedTime");
    if (r) return r;
    if (!hStart || !hEnd) return SI_INVALID_HANDLE;
    if (!hStart->recorded || !hEnd->recorded) {
        sn_standin_say("cuEventElapsedTime: an event that was never recorded");
        return SI_INVALID_HANDLE;
    }
    double model = hEnd->model - hStart->model;
    *pMilliseconds = (float)((model != 0 ? model : hEnd->t - hStart->t) * 1e3);
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent) {
    if (!hEvent) return SI_INVALID_HANDLE;
    free(hEvent);
    return CUDA_SUCCESS;
}
