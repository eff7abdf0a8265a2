/* device.h: the one interface every device implements (cpu, cuda, the interpreter), and the
 * executor that runs a compiled program on one. Convention: the executor owns two blocks of
 * device memory, the reusable arena (sized by the planner) and the persistent block, and hands
 * kernels pointers carved from them by the plan's offsets; it never allocates during a run.
 * The memory contract: a device pointer is dereferenced only by its device's own file; code
 * above runtime/ never sees one (it names values by node and extra buffers by number) and
 * moves host data only through upload and download. sn_checked_device_new checks it. */
#ifndef SN_DEVICE_H
#define SN_DEVICE_H

#include "program/program.h"
#include "program/target.h"

typedef struct sn_device sn_device;
struct sn_device {
    const char *name; /* "cpu (LLVM JIT, 2 threads)" */
    sn_target target; /* what programs for it are compiled for (sn_pipeline_opts.target) */
    void *(*alloc)(sn_device *d, size_t bytes, sn_err *e);
    void (*free)(sn_device *d, void *p);
    sn_status (*upload)(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e);
    sn_status (*download)(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e);
    /* Device to device, in stream order (the ranges do not overlap). */
    sn_status (*copy)(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e);
    /* `rows` rows of `width` bytes, device to device in stream order: row i from src + i
     * src_pitch to dst + i dst_pitch (pitches at least width; no range overlaps another) as one
     * operation (cuMemcpy2DAsync); NULL where the device has none: the executor copies the rows
     * one by one. */
    sn_status (*copy_rows)(sn_device *d, void *dst, size_t dst_pitch, const void *src,
                           size_t src_pitch, size_t width, size_t rows, sn_err *e);
    /* Sets bytes of device memory to the byte `value`, in stream order. */
    sn_status (*memset)(sn_device *d, void *dst, int value, size_t bytes, sn_err *e);
    /* Generates and compiles n kernels (GEMM kernels are skipped: they are library calls);
     * handles[i] is what launch needs for ks[i]. */
    sn_status (*compile)(sn_device *d, sn_kernel *const *ks, int n, void **handles, sn_err *e);
    /* Runs kernel k (compiled as handle) on bufs (k->args order). */
    sn_status (*launch)(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs, sn_err *e);
    /* A GEMM kernel (anchor: a matmul) on bufs (out, a, b). */
    sn_status (*gemm)(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e);
    /* Waits until everything queued on the device's one stream is done. */
    sn_status (*sync)(sn_device *d, sn_err *e);
    /* Timing in stream order: an event records the moment the work queued before it is done;
     * elapsed gives the seconds between two recorded events (after a sync). */
    void *(*event_new)(sn_device *d, sn_err *e);
    sn_status (*event_record)(sn_device *d, void *ev, sn_err *e);
    sn_status (*event_elapsed)(sn_device *d, void *from, void *to, double *seconds, sn_err *e);
    void (*event_free)(sn_device *d, void *ev);
    /* Copies that overlap the host's work (offload; NULL where the device has none, and the
     * executor copies synchronously instead). host_alloc: page-locked host memory, which the
     * copies below need to run asynchronously. copy_async: `bytes` between device memory and
     * host_alloc's memory (up: to the device), queued on a copy stream of that direction (so
     * that copies up and down run at once) after everything queued on the device's stream so
     * far, or, with `after` (an event_record'ed event), after the work queued before that
     * event only; returns at once, and `done` (an event_new event) is recorded after the copy.
     * event_wait blocks the host until `done` happened. flush: what the device has queued
     * starts running, and flush returns at once (NULL: a device that queues nothing, each
     * operation running or issued when called). */
    void *(*host_alloc)(sn_device *d, size_t bytes, sn_err *e);
    void (*host_free)(sn_device *d, void *p);
    sn_status (*copy_async)(sn_device *d, void *dst, const void *src, size_t bytes, bool up,
                            void *after, void *done, sn_err *e);
    sn_status (*event_wait)(sn_device *d, void *done, sn_err *e);
    sn_status (*flush)(sn_device *d, sn_err *e);
    /* The device memory free now and in all, in bytes: CUDA's cuMemGetInfo; for host memory
     * (the CPU device, the interpreter) the RAM Linux counts available (MemAvailable) and the
     * RAM. NULL where a device cannot tell. */
    sn_status (*mem_info)(sn_device *d, int64_t *free_bytes, int64_t *total_bytes, sn_err *e);
    /* A device that evaluates the program's graph itself instead of launching its kernels (the
     * reference interpreter) sets these; NULL on the others. run_graph evaluates p->g on its
     * persistent values, value i at at[i] (inputs and parameters in; every persistent value it
     * computes out: outputs, the loss, gradients); *state is the executor's (NULL at first),
     * freed with run_free. */
    sn_status (*run_graph)(sn_device *d, const sn_program *p, char *const *at, void **state,
                           sn_err *e);
    void (*run_free)(sn_device *d, void *state);
    void (*destroy)(sn_device *d);
    void *impl;
};

/* The CPU device: LLVM-JIT kernels, a GEMM library, a thread pool of `threads` (0: all cores).
 * Its compiled kernels are cached on disk as object files (codegen/llvm/llvm.h: sn_jit_set_cache)
 * in $XDG_CACHE_HOME/sinter/cpu or ~/.cache/sinter/cpu, so a second run of the same program
 * compiles nothing; sn_cpu_device_new_opts chooses another folder or none. */
typedef struct {
    const char *cache_dir; /* NULL: the default folder above (with /cpu appended to this one) */
    bool no_cache;         /* compile every kernel, read and write no cache (--no-cache) */
} sn_cpu_opts;
sn_status sn_cpu_device_new(int threads, sn_device **out, sn_err *e);
sn_status sn_cpu_device_new_opts(int threads, const sn_cpu_opts *o, sn_device **out, sn_err *e);
void sn_device_free(sn_device *d);

/* The reference interpreter as a device (interp_device.c): host memory; a run evaluates the
 * program's graph in double precision, rounded to each node's dtype (interp/interp.h); the
 * optimizer kernels run as their references (sn_interp_optim). Programs for it are compiled
 * for the host CPU (its target). */
sn_status sn_interp_device_new(sn_device **out, sn_err *e);

/* A device wrapping `inner` (which it owns) whose pointers are opaque handles that fault if the
 * host dereferences them, translated to inner's pointers at every call: the memory contract's
 * check. Numbers are inner's, bit for bit. */
sn_status sn_checked_device_new(sn_device *inner, sn_device **out, sn_err *e);

/* ---- executor (exec.c) ---- */

typedef struct sn_exec sn_exec;

/* Allocates the arena and persistent block, fills constants, compiles the kernels.
 * SN_ERR_INVALID when p was compiled for another target than d's (its kind or architecture). */
sn_status sn_exec_new(sn_device *d, const sn_program *p, sn_exec **out, sn_err *e);
/* The same for a program that reads owner's parameters (an evaluation program beside a
 * training one, on the same device; owner must outlive it): each PARAM of p is the one of
 * owner's layout of its name, dtype and size (none: SN_ERR_INVALID naming it), owner's memory,
 * and so is its weight shadow where owner
 * has the same parameter's in the same dtype (owner makes its stale shadows before this one's
 * run; a shadow of p's own is made before every run). Its persistent block holds p's other
 * persistent values only (inputs, outputs, constants), packed anew: no block refs into it. It
 * runs in owner's arena when p's fits in it: a run of one clobbers the other's arena, so the
 * two never run at once (nothing in an arena outlives a run). sn_exec_set and sn_exec_get on
 * a shared parameter reach owner's. */
sn_status sn_exec_new_sharing(sn_device *d, const sn_program *p, sn_exec *owner, sn_exec **out,
                              sn_err *e);
void sn_exec_free(sn_exec *x);

/* Host data into an INPUT or PARAM value, in the node's dtype (float, int32, packed u8 bytes,
 * bf16 or f16 bits: support/half.h); nothing
 * for an INPUT or PARAM of the graph that the program never reads. Writing a parameter (here,
 * or through a ref below: upload, copy, memset, AdamW without flat_low) makes its weight shadow
 * (program.h) stale; sn_exec_run makes it again first. */
sn_status sn_exec_set(sn_exec *x, const sn_node *n, const void *data, sn_err *e);
/* A persistent value (inputs, params, outputs) to the host. */
sn_status sn_exec_get(sn_exec *x, const sn_node *n, void *data, sn_err *e);

/* Device memory named without pointers, for work the program does not hold (the optimizer):
 * a persistent value (node), an extra buffer (buffer >= 0, node NULL) or the persistent block
 * (buffer SN_EXEC_BLOCK), bytes in. */
typedef struct {
    const sn_node *node;
    int buffer;
    int64_t offset;
} sn_exec_ref;
static inline sn_exec_ref sn_exec_node_ref(const sn_node *n, int64_t offset) {
    return (sn_exec_ref){n, -1, offset};
}
static inline sn_exec_ref sn_exec_buffer_ref(int buffer, int64_t offset) {
    return (sn_exec_ref){NULL, buffer, offset};
}
/* Bytes into the persistent block itself (the program's parameter layout, program.h). */
enum { SN_EXEC_BLOCK = -2 };
static inline sn_exec_ref sn_exec_block_ref(int64_t offset) {
    return (sn_exec_ref){NULL, SN_EXEC_BLOCK, offset};
}
/* A zeroed extra device buffer owned by the executor; *id names it. */
sn_status sn_exec_buffer_new(sn_exec *x, int64_t bytes, int *id, sn_err *e);
/* The byte offset of a persistent value in the persistent block (layouts), or -1. */
int64_t sn_exec_persistent_offset(const sn_exec *x, const sn_node *n);
sn_status sn_exec_upload(sn_exec *x, sn_exec_ref dst, const void *src, int64_t bytes, sn_err *e);
sn_status sn_exec_download(sn_exec *x, void *dst, sn_exec_ref src, int64_t bytes, sn_err *e);
sn_status sn_exec_copy(sn_exec *x, sn_exec_ref dst, sn_exec_ref src, int64_t bytes, sn_err *e);
/* `rows` rows of `width` bytes from src to dst, row i at src + i src_pitch and dst + i
 * dst_pitch (device.h copy_rows: one operation where the device has it; the generator's cache
 * appends, a layer's heads at once). */
sn_status sn_exec_copy_rows(sn_exec *x, sn_exec_ref dst, int64_t dst_pitch, sn_exec_ref src,
                            int64_t src_pitch, int64_t width, int64_t rows, sn_err *e);
sn_status sn_exec_memset(sn_exec *x, sn_exec_ref dst, int value, int64_t bytes, sn_err *e);
/* Copies that overlap the host's work (device.h copy_async), each named by a `slot`:
 * sn_exec_copy_async queues a copy between a ref and host memory from sn_exec_host_alloc (up: to
 * the device) after the work queued so far and returns at once; sn_exec_copy_wait(slot) returns
 * when the slot's latest copy is done (the host may read or reuse its memory), and with it every
 * copy in the same direction queued before (each direction runs in order). On a device without
 * asynchronous copies each copy is done before sn_exec_copy_async returns. Host memory is
 * page-locked where the device has it (plain memory elsewhere); zeroed. */
enum { SN_EXEC_COPY_SLOTS = 4 };
void *sn_exec_host_alloc(sn_exec *x, int64_t bytes, sn_err *e);
void sn_exec_host_free(sn_exec *x, void *p);
sn_status sn_exec_copy_async(sn_exec *x, bool up, sn_exec_ref ref, void *host, int64_t bytes,
                             int slot, sn_err *e);
sn_status sn_exec_copy_wait(sn_exec *x, int slot, sn_err *e);
/* Downloads a run makes itself while its kernels run (offload's gradients come down during the
 * backward: train/runner.c): each brings the `bytes` at src (a node or the persistent block,
 * not a sharing executor's) into host memory from sn_exec_host_alloc, queued like
 * sn_exec_copy_async right after kernel `after` of the run (-1: before the first), so that it
 * overlaps the kernels after it; `after` is the last kernel that writes any of those bytes
 * (sn_exec_ready_after): one before it reads bytes that kernel has not written yet (the
 * stand-in driver shows it). They may still be in flight when sn_exec_run returns:
 * sn_exec_run_copies_wait returns when they are done (the host may read their memory then),
 * and the executor waits for them itself before it writes bytes they read (sn_exec_set, upload,
 * copy, memset, copy_async up over them; a launch with an output in the persistent block),
 * runs again, sets the list again or frees host memory or itself; reads and writes elsewhere
 * (the weights going up) overlap them. A device without asynchronous copies, or one that runs
 * the graph whole, does them after the run's kernels, in order (the same bytes), and
 * sn_exec_run returns with them done. The list (n of them; 0: none) is copied and holds for
 * every later run until it is set again. */
typedef struct {
    int after;
    sn_exec_ref src;
    void *host;
    int64_t bytes;
} sn_exec_run_copy;
sn_status sn_exec_run_copies(sn_exec *x, const sn_exec_run_copy *c, int n, sn_err *e);
sn_status sn_exec_run_copies_wait(sn_exec *x, sn_err *e);
/* The last kernel of the program that writes any of the `bytes` at r (program.h
 * sn_program_last_write): -1 when none does (an extra buffer's bytes); the last kernel for a
 * sharing executor's refs, whose block is not laid out as its program's. */
int sn_exec_ready_after(const sn_exec *x, sn_exec_ref r, int64_t bytes);
/* Uploads the next run makes itself (the delayed update's weights going up during the step's
 * backward: train/runner.c): each brings `bytes` of host memory from sn_exec_host_alloc (`host`)
 * to `src` (here the destination: a node or the persistent block, not a sharing executor's)
 * once kernel `after` of the run has run (-1: before the first), the last kernel that reads or
 * writes any of those bytes (sn_exec_free_after), so that it overlaps the kernels after it. The
 * run queues its kernels (and its downloads) and lets the device start them; then, upload by
 * upload in the order of their kernels (the list's order among equals), it calls ready(arg, i)
 * (i: the upload's index in c; it returns once the host's bytes are final: the update in
 * flight has done them) and queues the upload on the device's upload stream after an event
 * recorded right after its kernel; it returns when the kernels and the uploads are done. A
 * device without asynchronous copies, or one that runs the graph whole, does the same after
 * the kernels (the same bytes). For the next run only: it clears the list, run or failed. n 0:
 * none. */
typedef sn_status (*sn_exec_ready_fn)(void *arg, int i, sn_err *e);
sn_status sn_exec_run_uploads(sn_exec *x, const sn_exec_run_copy *c, int n, sn_exec_ready_fn ready,
                              void *arg, sn_err *e);
/* The last kernel of the program that reads or writes any of the `bytes` at r (program.h
 * sn_program_last_use): -1 when none does; the last kernel for a sharing executor's refs. */
int sn_exec_free_after(const sn_exec *x, sn_exec_ref r, int64_t bytes);
/* Compiles kernels that are not the program's (the optimizer's) on the executor's device. */
sn_status sn_exec_compile(sn_exec *x, sn_kernel *const *ks, int n, void **handles, sn_err *e);
/* Launches such a kernel on bufs (sn_kernel_n_bufs(k) of them), in stream order. */
sn_status sn_exec_launch(sn_exec *x, const sn_kernel *k, void *handle, const sn_exec_ref *bufs,
                         sn_err *e);
/* The device the executor runs on. */
sn_device *sn_exec_device(const sn_exec *x);

/* Runs every kernel in order (after the stale weight shadows' casts). */
sn_status sn_exec_run(sn_exec *x, sn_err *e);

typedef struct {
    double compile_s;         /* sn_exec_new's code generation and JIT */
    double run_s;             /* the last run, by the device's events */
    double kind_s[SN_KER_KIND_COUNT]; /* the last run's time by kernel kind (device events) */
    int64_t arena_peak_bytes; /* measured: the highest arena byte any kernel touched */
    int64_t arena_bytes;      /* allocated (the planner's prediction) */
    int64_t persistent_bytes; /* the persistent block (a sharing executor's own part) */
    bool arena_shared;        /* the arena is the owner's (sn_exec_new_sharing) */
    int64_t buffer_bytes;     /* extra buffers (sn_exec_buffer_new: optimizer state) */
    int64_t shadow_casts;     /* weight shadows made again from their parameters (program.h),
                                 counted since sn_exec_new */
    int copies_in_run;        /* the last run's copies (sn_exec_run_copies) queued between its
                                 kernels; 0 where they followed the kernels */
    int uploads_in_run;       /* the last run's uploads (sn_exec_run_uploads) queued after their
                                 kernels' events; 0 where they followed the kernels */
} sn_exec_stats;
void sn_exec_stats_get(const sn_exec *x, sn_exec_stats *s);
/* The last run's time of kernel k (device events; 0 when the run was timed as a whole). */
double sn_exec_kernel_time(const sn_exec *x, int k);
/* Whether a run records an event after every kernel (the default: kind_s is filled) or only
 * around the whole run (kind_s stays zero). On a CUDA device the events join the step's CUDA
 * Graph, and inside a replayed graph they read 0 (runtime/cuda/graph.c): time steps with
 * per_kernel false (fewer nodes), then profile kinds in one run with it true, whose different
 * sequence of operations runs eagerly. */
void sn_exec_time_kernels(sn_exec *x, bool per_kernel);

#endif
