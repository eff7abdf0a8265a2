/* device.h: the one interface every device implements (cpu today; cuda later), and the
 * executor that runs a compiled program on one. Convention: the executor owns two blocks of
 * device memory, the reusable arena (sized by the planner) and the persistent block, and hands
 * kernels pointers carved from them by the plan's offsets; it never allocates during a run. */
#ifndef SN_DEVICE_H
#define SN_DEVICE_H

#include "program/program.h"

typedef struct sn_device sn_device;
struct sn_device {
    const char *name; /* "cpu (LLVM JIT, 2 threads)" */
    void *(*alloc)(sn_device *d, size_t bytes, sn_err *e);
    void (*free)(sn_device *d, void *p);
    sn_status (*upload)(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e);
    sn_status (*download)(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e);
    /* Generates and compiles n kernels (GEMM kernels are skipped: they are library calls);
     * handles[i] is what launch needs for ks[i]. */
    sn_status (*compile)(sn_device *d, sn_kernel *const *ks, int n, void **handles, sn_err *e);
    /* Runs kernel k (compiled as handle) on bufs (k->args order). */
    sn_status (*launch)(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs, sn_err *e);
    /* A GEMM kernel (anchor: a matmul) on bufs (out, a, b). */
    sn_status (*gemm)(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e);
    sn_status (*sync)(sn_device *d, sn_err *e);
    void (*destroy)(sn_device *d);
    void *impl;
};

/* The CPU device: LLVM-JIT kernels, a GEMM library, a thread pool of `threads` (0: all cores). */
sn_status sn_cpu_device_new(int threads, sn_device **out, sn_err *e);
void sn_device_free(sn_device *d);

/* ---- executor (exec.c) ---- */

typedef struct sn_exec sn_exec;

/* Allocates the arena and persistent block, fills constants, compiles the kernels. */
sn_status sn_exec_new(sn_device *d, const sn_program *p, sn_exec **out, sn_err *e);
void sn_exec_free(sn_exec *x);

/* Host data into an INPUT or PARAM value (f32 for float nodes, int32 for i32 nodes). */
sn_status sn_exec_set(sn_exec *x, const sn_node *n, const void *data, sn_err *e);
/* A persistent value (inputs, params, outputs) to the host. */
sn_status sn_exec_get(sn_exec *x, const sn_node *n, void *data, sn_err *e);
/* The device pointer of a persistent value (for optimizers working in place), or NULL. */
void *sn_exec_ptr(sn_exec *x, const sn_node *n);

/* Runs every kernel in order. */
sn_status sn_exec_run(sn_exec *x, sn_err *e);

typedef struct {
    double compile_s;         /* sn_exec_new's code generation and JIT */
    double run_s;             /* the last run */
    double kind_s[SN_KER_KIND_COUNT]; /* the last run's time by kernel kind */
    int64_t arena_peak_bytes; /* measured: the highest arena byte any kernel touched */
    int64_t arena_bytes;      /* allocated (the planner's prediction) */
} sn_exec_stats;
void sn_exec_stats_get(const sn_exec *x, sn_exec_stats *s);

#endif
