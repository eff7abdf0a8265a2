/* standin.h: what the stand-in driver's three libraries share (a test instrument, not sinter):
 * the image its NVRTC writes and its cuModuleLoadData reads, and the two calls its cuBLASLt
 * takes from its libcuda (found with dlopen(RTLD_NOLOAD) on $SN_LIBCUDA). Convention: device
 * addresses are non-canonical on x86-64 (a host dereference faults); only sn_standin_host turns
 * one into host memory, and only for a range inside one live allocation.
 *
 * What the stand-in cannot prove: real driver behaviour (it follows the documented API, not the
 * driver's code), asynchrony (every stream call completes before it returns), speed (kernels run
 * on the SIMT simulator, GEMMs are loops), cuBLASLt's algorithm choice and numerics (the stand-in
 * computes in double), and that the real CUBIN runs: its NVRTC compiles with the real NVRTC, so
 * compile errors, register counts and spills are real, but the simulator runs the source text. */
#ifndef SN_STANDIN_H
#define SN_STANDIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/cuda/cuda_api.h"

/* ---- the image: this header, the CUDA C text (with its NUL), then the real CUBIN ---- */

#define SN_STANDIN_MAGIC "SNSTANDIN-IMG-1" /* 16 bytes with the NUL */
typedef struct {
    char magic[16];
    uint32_t arch;      /* 80: compiled with --gpu-architecture=sm_80 */
    uint32_t zero;
    uint64_t src_bytes; /* including the NUL */
    uint64_t cubin_bytes;
} sn_standin_image;

/* ---- the driver's exports for its cuBLASLt ---- */

/* The host memory behind device range [p, p + bytes), or NULL when the range is not inside one
 * live allocation (the caller reports it). */
typedef void *(*sn_standin_host_fn)(CUdeviceptr p, size_t bytes);
/* Runs fn(data) in the order of stream: now, or at each replay when the stream is capturing
 * (data, `bytes` of it, is copied). fn returns a CUresult; a failure at replay fails the
 * cuGraphLaunch. */
typedef int (*sn_standin_op_fn)(const void *data);
typedef int (*sn_standin_enqueue_fn)(CUstream s, sn_standin_op_fn fn, const void *data,
                                     size_t bytes);
/* Advances the clock events read by what an algorithm of the stand-in cuBLASLt's is modeled to
 * take (standin_driver.c, events): run times that do not depend on the CPU's load. */
typedef void (*sn_standin_model_fn)(double seconds);
#define SN_STANDIN_HOST_SYM "sn_standin_host"
#define SN_STANDIN_ENQUEUE_SYM "sn_standin_enqueue"
#define SN_STANDIN_MODEL_SYM "sn_standin_model_time"

/* Declares a table's functions under their exported symbols (cuMemAlloc is cuMemAlloc_v2), so
 * each stand-in definition is checked against cuda_api.h's signature and exported as sinter
 * looks it up. */
#define SN_STANDIN_DECLARE(ret, name, sym, params) ret name params __asm__(sym);

/* Reads environment variable name as a count or a size ("64M", "2G"); def when unset. */
uint64_t sn_standin_env(const char *name, uint64_t def);
/* "sn_standin: " + the message on stderr: why a call failed, in words the driver cannot give. */
void sn_standin_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
