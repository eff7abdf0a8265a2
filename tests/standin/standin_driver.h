/* standin_driver.h: the stand-in libcuda's internal header, one section per file: state and
 * memory (standin_driver.c), modules and launches (standin_launch.c), streams, capture and graphs
 * (standin_stream.c). Convention: every call returns a CUresult and says why on stderr when it
 * is not CUDA_SUCCESS (sn_standin_say); there is one device, one context, no locking (sinter
 * drives the device from one thread). */
#ifndef SN_STANDIN_DRIVER_H
#define SN_STANDIN_DRIVER_H

#include <stdbool.h>

#include "standin.h"

SN_CUDA_DRIVER_API(SN_STANDIN_DECLARE)
int sn_standin_enqueue(CUstream s, sn_standin_op_fn fn, const void *data, size_t bytes);
void *sn_standin_host(CUdeviceptr p, size_t bytes);
void sn_standin_model_time(double seconds);

/* CUresult values the stand-in returns beyond those cuda_api.h names */
enum {
    SI_INVALID_IMAGE = 200,
    SI_INVALID_CONTEXT = 201,
    SI_INVALID_HANDLE = 400,
    SI_NOT_READY = 600,
    SI_ILLEGAL_ADDRESS = 700,
    SI_LAUNCH_OUT_OF_RESOURCES = 701,
    SI_CAPTURE_UNSUPPORTED = 900,
    SI_CAPTURE_INVALIDATED = 901,
    SI_CAPTURE_UNMATCHED = 903,
};

/* ---- standin_driver.c ---- */

typedef struct {
    bool initialised;
    int sm;                  /* SN_STANDIN_SM, default 80 */
    uint64_t total, used;    /* SN_STANDIN_MEM bytes (default 4G), allocated */
    uint64_t allocs, launches;        /* calls so far (1-based counts for injection) */
    uint64_t fail_alloc, fail_launch; /* SN_STANDIN_FAIL_ALLOC / _FAIL_LAUNCH: the Nth fails */
    bool no_binary;          /* SN_STANDIN_NO_BINARY=1: every module load fails */
    uint64_t fault_launch;   /* SN_STANDIN_FAULT_LAUNCH=N: the Nth kernel run faults later */
    CUresult sticky;         /* a kernel fault: every later call fails with it, as on a GPU */
    const char *profile;     /* SN_STANDIN_PROFILE=FILE: every launch profiled, a line each */
    double modeled_s;        /* the modeled clock: seconds the cuBLASLt's algorithms said
                                their runs took (sn_standin_model_time) */
} si_state;
extern si_state si;

/* CUDA_SUCCESS when a context is current on this thread (after cuInit) and no kernel has
 * faulted, else the error. */
CUresult si_need_ctx(const char *call);
/* The bytes of shared memory a block may have with opt-in (static + dynamic), as the device's
 * CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN reports them for sm. */
int si_shared_optin(void);
/* The host address of [p, p + n) in one live allocation, or NULL (said on stderr, naming call). */
void *si_host(CUdeviceptr p, size_t n, const char *call);

/* ---- standin_launch.c ---- */

typedef struct si_function si_function;
/* Runs a launch now (the stream's work is synchronous). */
CUresult si_launch_now(si_function *f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, void **params);
/* The bytes of f's parameters, packed, and where each starts: what a capture copies. */
int si_function_params(const si_function *f, size_t *offsets, size_t *total);

/* ---- standin_stream.c ---- */

typedef enum { SI_KERNEL, SI_COPY, SI_MEMSET, SI_EVENT, SI_HOST } si_kind;
typedef struct {
    si_kind kind;
    si_function *f;          /* SI_KERNEL */
    unsigned grid[3], block[3], shared;
    unsigned char *args;     /* SI_KERNEL: the parameter values, packed; SI_HOST: the data */
    size_t n_args;
    CUdeviceptr dst, src;    /* SI_COPY, SI_MEMSET */
    size_t bytes;
    unsigned char value;
    CUevent event;           /* SI_EVENT */
    sn_standin_op_fn fn;     /* SI_HOST */
} si_op;

/* Runs op on stream s now, or records it when s is capturing (op's buffers are copied then). */
CUresult si_stream_do(CUstream s, const si_op *op, const char *call);
/* CUDA_SUCCESS when s is a live stream or NULL (the legacy default stream). */
CUresult si_stream_check(CUstream s, const char *call);
/* Whether any stream is capturing (allocation and synchronisation are refused then). */
bool si_capturing(void);
/* Deferred host copies (the file's header): s's copies up to the upto-th issued run now (s
 * NULL or no longer live: nothing); every stream's; how many s has issued; one more deferred
 * (run at once on the NULL stream; up: to the device, else a download, read now). */
void si_stream_drain(CUstream s, uint64_t upto);
void si_drain_all(void);
uint64_t si_stream_issued(CUstream s);
CUresult si_stream_defer(CUstream s, void *dst, const void *src, size_t n, bool up);
/* The order between streams that a download checks (the file's header): the device work s
 * has run so far; s waited for `on`'s first `work` (an event); the host synchronised with s's
 * first `work`; with every stream's work so far (cuMemFree, cuMemFreeHost). */
uint64_t si_stream_work(CUstream s);
void si_stream_waited(CUstream s, CUstream on, uint64_t work);
void si_stream_synced(CUstream s, uint64_t work);
void si_synced_all(void);
/* Records a clock reading in ev (standin_driver.c). */
void si_event_stamp(CUevent ev);

#endif
