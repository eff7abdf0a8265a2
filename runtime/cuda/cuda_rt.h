/* cuda_rt.h: the CUDA device's internal header, one section per file (a table of contents).
 * Convention: every libcuda, NVRTC and cuBLASLt call goes through SN_CUDA_CHECK, which names
 * file:line, the call and the library's own error name and text, and returns an sn_status. */
#ifndef SN_CUDA_RT_H
#define SN_CUDA_RT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "codegen/cuda/cuda.h"
#include "runtime/device.h"
#include "support/blobcache.h"
#include "cuda_api.h"
#include "cuda_device.h"

/* ---- driver.c: the three libraries, opened with dlopen (NVRTC by codegen/cuda/nvrtc.c's loader),
 * and the checking macro of libcuda and cuBLASLt calls ---- */

typedef enum { SN_LIB_CUDA, SN_LIB_NVRTC, SN_LIB_CUBLASLT, SN_LIB_COUNT } sn_cuda_lib;

/* The function tables; a library not (yet) loaded has NULL entries and handle. */
typedef struct {
    void *handle[SN_LIB_COUNT];
    char path[SN_LIB_COUNT][256]; /* the name or path each was opened as */
    sn_nvrtc nvrtc;               /* SN_LIB_NVRTC: the one NVRTC loader's table (nvrtc.c) */
#define SN_CUDA_FIELD(ret, name, sym, params) ret(*name) params;
    SN_CUDA_DRIVER_API(SN_CUDA_FIELD)
    SN_CUDA_CUBLASLT_API(SN_CUDA_FIELD)
#undef SN_CUDA_FIELD
} sn_cuda_api;

/* Opens library `lib` (the environment variable SN_LIB*_ENV overrides its name) and looks up
 * every symbol of its table. A missing library or symbol is SN_ERR_DEVICE naming the library,
 * dlerror's words and what to do. Loading twice is a no-op. */
sn_status sn_cuda_api_load(sn_cuda_api *a, sn_cuda_lib lib, sn_err *e);
/* dlcloses what was loaded (libcuda stays open: the driver's threads may run its code). */
void sn_cuda_api_unload(sn_cuda_api *a);
/* The library's name in messages: "libcuda.so.1" or the overriding path. */
const char *sn_cuda_lib_name(const sn_cuda_api *a, sn_cuda_lib lib);

/* Records a failed call: the library is told by the call's name (cu*, cublasLt*; NVRTC's calls
 * go through nvrtc.c's NVRTC_CHECK). */
sn_status sn_cuda_fail(const sn_cuda_api *a, int result, const char *file, int line,
                       const char *call, sn_err *e);

/* SN_CUDA_CHECK(api, e, cuMemAlloc, &p, n): calls api->cuMemAlloc(&p, n); SN_OK, or the failure
 * recorded in e ("runtime/cuda/device.c:80: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of
 * memory)") and its status (SN_ERR_OOM for out-of-memory results, else SN_ERR_DEVICE). */
#define SN_CUDA_CHECK(api, e, fn, ...)                                                             \
    ({                                                                                             \
        int r_ = (int)(api)->fn(__VA_ARGS__);                                                      \
        r_ == 0 ? SN_OK : sn_cuda_fail((api), r_, __FILE__, __LINE__, #fn, (e));                   \
    })

/* ---- compile.c: NVRTC in a child process ---- */

/* Compiles src for sm_<arch> into a CUBIN with the ptxas report (sn_nvrtc_compile_with), in a
 * forked child that sends the result back through a pipe: a crash of NVRTC's embedded ptxas is
 * an error naming the signal, not the end of the process. Free *out with sn_cuda_module_free. */
sn_status sn_cuda_nvrtc_compile(sn_cuda_api *a, const char *src, const char *name, int arch,
                                sn_cuda_module *out, sn_err *e);

/* The same in steps, for several children at once: start forks the child; read takes what its
 * pipe holds (call it when fd is readable, or blocking) until *done (end of file); finish reaps
 * the child and decodes its record into *out (the errors sn_cuda_nvrtc_compile gives); abandon
 * kills and reaps a child that will not be finished. After finish or abandon, pid and fd are -1;
 * cpu_s and wall_s say what the child cost. */
typedef struct {
    pid_t pid;
    int fd;               /* the read end of the child's pipe */
    char name[96];
    int arch;
    char *buf;            /* the record read so far */
    size_t len, cap;
    double t0;            /* sn_clock_s() at the fork */
    double cpu_s, wall_s; /* the child's user + system CPU, fork to reaped (after finish) */
} sn_nvrtc_child;
sn_status sn_cuda_nvrtc_start(sn_cuda_api *a, const char *src, const char *name, int arch,
                              sn_nvrtc_child *c, sn_err *e);
sn_status sn_cuda_nvrtc_read(sn_nvrtc_child *c, bool *done, sn_err *e);
sn_status sn_cuda_nvrtc_finish(sn_nvrtc_child *c, sn_cuda_module *out, sn_err *e);
void sn_cuda_nvrtc_abandon(sn_nvrtc_child *c);

/* ---- cache.c: the CUBIN cache on disk ---- */

typedef sn_blobcache sn_cuda_cache; /* support/blobcache.h: dir, disabled, hits, misses, ... */

/* The cache directory (dir_override, else the environment's), created on first store; one that
 * exists and belongs to another user is not used (a warning; dir left empty, foreign set). */
void sn_cuda_cache_init(sn_cuda_cache *c, const char *dir_override, bool disabled);
/* The CUBIN for (src, arch) from the cache, else compiled (sn_cuda_nvrtc_compile) and stored.
 * The key hashes source, prelude, options, NVRTC version and library name, and arch; an entry
 * whose magic, size, checksum or key does not match is recompiled and replaced, never used. *compiled says
 * whether NVRTC ran. */
sn_status sn_cuda_cache_compile(sn_cuda_cache *c, sn_cuda_api *a, const char *src,
                                const char *name, int arch, sn_cuda_module *out, bool *compiled,
                                sn_err *e);
/* The same in two steps, for compiling several sources at once. lookup: *hit with *out filled
 * from a good entry, else *out empty and *slot saying where the CUBIN belongs (hits, misses and
 * rejected counted as above); store: writes the compiled module there (nothing when the cache is
 * off; a write that fails is a warning on stderr, not an error, given once: later stores are
 * skipped). */
typedef struct {
    bool use; /* the cache is on */
    uint8_t key[16];
    char path[600];
} sn_cuda_cache_slot;
sn_status sn_cuda_cache_lookup(sn_cuda_cache *c, sn_cuda_api *a, const char *src, int arch,
                               sn_cuda_cache_slot *slot, sn_cuda_module *out, bool *hit,
                               sn_err *e);
void sn_cuda_cache_store(sn_cuda_cache *c, const sn_cuda_cache_slot *slot, int arch,
                         const sn_cuda_module *m);
/* The file an entry for (src, arch) lives in (for tests); false without a cache directory. */
bool sn_cuda_cache_path(const sn_cuda_cache *c, sn_cuda_api *a, const char *src, int arch,
                        char *path, size_t len);

/* ---- compile_parts.c: a program in parts, compiled at once ---- */

/* A function's cost to NVRTC, in bytes of f32-attention-like text: its text weighted by kind (row
 * kernels, with their block reductions, cost 1.7 times as much a byte; 16-bit attention, on
 * tensor cores, 1.6; pointwise and optimizer kernels half). A program's functions go to sn_cuda_parts_count(their total cost, their count)
 * parts: one per SN_CUDA_PART_COST (~0.37 s of NVRTC's CPU, so its fixed ~0.09 s a translation
 * unit stays a fraction of a part's), at most SN_CUDA_MAX_PARTS, at most one per function. */
enum { SN_CUDA_PART_COST = 8192 }; /* SN_CUDA_MAX_PARTS: cuda_device.h */
size_t sn_cuda_function_cost(const sn_kernel *k, size_t text_bytes);
int sn_cuda_parts_count(size_t cost, int n_functions);

typedef struct {
    int n_parts;
    sn_cuda_module mod[SN_CUDA_MAX_PARTS]; /* each part's CUBIN */
    int *part;                              /* [n]: kernel i's part; -1 for a GEMM */
    char (*fn)[64];                         /* [n]: the function that launches kernel i */
    sn_cuda_part_stats part_st[SN_CUDA_MAX_PARTS];
    double render_s, cache_s, nvrtc_s;      /* wall: rendering; cache reads and writes; from the
                                               first child's fork to the last one reaped */
} sn_cuda_parts;

/* Renders kernels ks[0..n) for tg, splits their distinct functions into parts (the largest first,
 * each onto the part with the least text; a function's kernels all in its part), renders each
 * part as its own translation unit (program order: names as in one rendering), looks each up in
 * the cache and compiles the misses for sm_<arch> in forked children, at most jobs at once (0:
 * sn_cuda_compile_jobs()), storing each as it arrives. Parts are named "<name>_part3of8.cu". A
 * failure of any part is its child's error (sn_cuda_nvrtc_compile's) prefixed with "part 3 of 8
 * (functions ...): "; the other children are then killed and reaped. Free *out with
 * sn_cuda_parts_free, success or not. */
sn_status sn_cuda_parts_compile(sn_cuda_cache *c, sn_cuda_api *a, const sn_kernel *const *ks,
                                int n, const sn_target *tg, int arch, int jobs, const char *name,
                                sn_cuda_parts *out, sn_err *e);
void sn_cuda_parts_free(sn_cuda_parts *p);

/* ---- cublaslt.c: GEMM plans ---- */

typedef struct sn_gemm_plan sn_gemm_plan;

/* The row-major problem of a GEMM kernel: D (batch, M, N) = epilogue(op(A) @ op(B)) (kernel.h's
 * epilogues: a bias (N); GELU_AUX_BIAS's aux output and DGELU's aux input (M, N), leading
 * dimension N, of D's type). */
typedef struct {
    bool ta, tb;
    int64_t M, N, K, batch;
    int64_t lda, ldb, ldd;             /* row-major leading dimensions */
    int64_t off_a, off_b;              /* A's and B's first elements in their buffers (kernel.h:
                                          operand views; sn_gemm_plan_run adds them) */
    int64_t stride_a, stride_b, stride_d; /* batch strides in elements (0: shared) */
    sn_epilogue epi;
    bool accum;                        /* beta = 1 with C (kernel.h's accum) */
    sn_dtype ab, d, bias_t, aux_t, c_t; /* A's and B's type, D's, the bias's, the aux's and
                                           C's (zero: SN_F32, or none) */
    sn_dtype b_t;                      /* B's type where A is an 8-bit float (either format: a
                                          gradient's product is e5m2 by e4m3); ignored
                                          otherwise, B being of ab */
} sn_gemm_shape;

/* Whether epilogue e reads a bias vector, and whether it writes or reads an aux matrix. */
static inline bool sn_gemm_has_bias(sn_epilogue e) {
    return e == SN_EPI_BIAS || e == SN_EPI_GELU_BIAS || e == SN_EPI_GELU_AUX_BIAS;
}
static inline bool sn_gemm_has_aux(sn_epilogue e) {
    return e == SN_EPI_GELU_AUX_BIAS || e == SN_EPI_DGELU;
}

/* The problem kernel k's matmul describes (runtime/gemm.c's layouts: a rank-2 operand shared by
 * the other's batch folds into one larger GEMM). */
sn_gemm_shape sn_gemm_shape_of(const sn_kernel *k);

/* Builds the plan: matmul descriptor (fp32 compute, or TF32 when tf32 and the operands are f32)
 * with the epilogue (cuBLASLt's BIAS, GELU_BIAS, GELU_AUX_BIAS, DGELU), layouts of s's types (A,
 * B f32/bf16/f16; D f32 or A's type; the bias and the aux D's type; an aux only for one GEMM
 * of N % 8 == 0, else SN_ERR_UNSUPPORTED), a preference allowing workspace_bytes, and the
 * heuristic's best algorithm. FP8 (A f8e4m3 or f8e5m2, B either, not both e5m2): f32 D (and C),
 * no epilogue, both operands K-major (ta = 0, tb = 1: cuBLASLt's "TN"), leading dimensions,
 * offsets and batch strides multiples of 16 bytes; anything else SN_ERR_UNSUPPORTED naming the
 * rule (the device checks the architecture: sm_89 and up). handle may be NULL (no GPU: everything up to the heuristic is
 * built, then SN_ERR_DEVICE naming cublasLtCreate's result). */
sn_status sn_gemm_plan_new(sn_cuda_api *a, cublasLtHandle_t handle, const sn_gemm_shape *s,
                           bool tf32, size_t workspace_bytes, sn_gemm_plan **out, sn_err *e);
/* D = epilogue(A @ B [+ C]) on stream, with the plan's algorithm; bias, aux and c 0 where the
 * epilogue has none (c: accum's C, beta = 1, of D's type and layout, may be d: in place). A and
 * B are their buffers: the operands start off_a and off_b elements into them. */
sn_status sn_gemm_plan_run(sn_cuda_api *a, cublasLtHandle_t handle, const sn_gemm_plan *p,
                           CUdeviceptr d, CUdeviceptr A, CUdeviceptr B, CUdeviceptr bias,
                           CUdeviceptr aux, CUdeviceptr c, CUdeviceptr workspace,
                           size_t workspace_bytes, CUstream stream, sn_err *e);
void sn_gemm_plan_free(sn_cuda_api *a, sn_gemm_plan *p);
/* The heuristic's algorithms for the plan, best first: up to n into out[0..*found) (the plan's
 * own is the first of a call with n = 1). */
sn_status sn_gemm_plan_candidates(sn_cuda_api *a, cublasLtHandle_t handle, const sn_gemm_plan *p,
                                  int n, cublasLtMatmulHeuristicResult_t *out, int *found,
                                  sn_err *e);
/* The plan's problem, and whether it computes in TF32. */
const sn_gemm_shape *sn_gemm_plan_shape(const sn_gemm_plan *p, bool *tf32);
/* Runs the plan with algorithm r (one of sn_gemm_plan_candidates') from now on. */
void sn_gemm_plan_use(sn_gemm_plan *p, const cublasLtMatmulHeuristicResult_t *r);

/* ---- gemm_tune.c: SN_GEMM_TUNE, the fastest of the heuristic's candidates ---- */

enum { SN_GEMM_TUNE_MAX = 32, SN_GEMM_TUNE_REPS = 5 };

/* The tuning of one device: the settings from the environment, the GEMMs timed so far. */
typedef struct sn_gemm_tuned sn_gemm_tuned;
typedef struct {
    int n;             /* SN_GEMM_TUNE: candidates to time, 2..SN_GEMM_TUNE_MAX; 0: none */
    bool log;          /* SN_GEMM_TUNE_LOG=1: a line on stderr per GEMM timed */
    sn_gemm_tuned *known; /* [n_known]: each problem timed and its winner */
    int n_known;
    int timed, switched; /* problems timed; those whose winner is not the heuristic's first */
    double seconds;    /* spent timing (wall) */
} sn_gemm_tuner;

/* What tuning one plan did. */
typedef struct {
    int tried, ran;     /* the heuristic's candidates; those cuBLASLt ran (the others skipped) */
    int chosen;         /* the winner's place in the heuristic's order (0: its first; known:
                           the alike problem's) */
    double first_s, chosen_s; /* the median seconds of a run: the first's (0: it did not run), the
                                 winner's */
    bool known;         /* an alike problem was timed before: its winner, nothing run */
    bool no_scratch;    /* no memory for the scratch operands: the first kept, nothing run */
} sn_gemm_tune_result;

/* Reads SN_GEMM_TUNE (unset, empty or 0: off; 2 to 32: on; anything else is SN_ERR_INVALID
 * saying what it takes) and SN_GEMM_TUNE_LOG. */
sn_status sn_gemm_tuner_init(sn_gemm_tuner *t, sn_err *e);
void sn_gemm_tuner_free(sn_gemm_tuner *t);
/* With tuning on: asks the heuristic for up to t->n algorithms for plan p, runs each on scratch
 * operands (random values in one allocation, freed before returning; none of the program's
 * buffers) on stream, once to warm up and SN_GEMM_TUNE_REPS times between events, and makes the
 * plan use the one of least median time (a tie: the earlier in the heuristic's order). A candidate
 * cuBLASLt refuses to run is skipped; without memory for the scratch, the plan keeps its
 * algorithm. A problem alike (sn_gemm_shape's every field and TF32) to one timed before takes its
 * winner. Tuning off: nothing. *r (may be NULL) says what was done. */
sn_status sn_gemm_tune(sn_gemm_tuner *t, sn_cuda_api *a, cublasLtHandle_t handle, sn_gemm_plan *p,
                       CUstream stream, CUdeviceptr workspace, size_t workspace_bytes,
                       sn_gemm_tune_result *r, sn_err *e);

/* ---- graph.c: the step as a CUDA Graph ---- */

/* One operation of the step in progress: a kernel launch or a GEMM with its buffers, an event
 * recorded between two of them, or a copy on a copy stream (device.h copy_async: the gradients
 * coming down during the step, runtime/exec.c). The device queues them and issues the queue at
 * the next upload, download, sync or wait: a queue equal to one issued before (the step is
 * stable) is captured once into a CUDA Graph and replayed. Events are not captured: a replay
 * records the events queued before its first launch ahead of the graph and all others after it,
 * so the time between the first and the last is the step's, and the times between events inside
 * it are zero (per-kernel times come from steps issued eagerly: the first of each sequence, or
 * sn_cuda_opts.no_graphs). A queue with a copy is issued eagerly every time, never captured:
 * capturing it would fork the copy stream into the capture and join it back, which the stand-in
 * cannot check and no GPU has run yet; a copy with nothing queued before it is issued at once. */
typedef struct {
    const void *what; /* the kernel's cuda_fn or cuda_gemm (both live as long as the device), or
                         the device's copy tag; NULL for an event */
    CUevent event;    /* what == NULL: the event to record; a copy: recorded after it */
    int n_bufs;
    CUdeviceptr bufs[SN_KER_MAX_BUFS]; /* a copy: bufs[0] its device memory */
    void *host;       /* a copy: its host memory (NULL: not a copy), `bytes` of it, up: to the device */
    size_t bytes;
    bool up;
    CUevent after;    /* a copy: the event it waits for (NULL: the work queued before it) */
} sn_cuda_op;

/* Issues one kernel, GEMM or copy op (graph.c records events itself). */
typedef sn_status (*sn_cuda_issue_fn)(void *ctx, const sn_cuda_op *op, sn_err *e);

typedef struct sn_cuda_graphs sn_cuda_graphs;

/* enabled false: every op is issued when queued, nothing is captured. */
sn_cuda_graphs *sn_cuda_graphs_new(sn_cuda_api *a, CUstream stream, bool enabled,
                                   sn_cuda_issue_fn issue, void *ctx, sn_err *e);
void sn_cuda_graphs_free(sn_cuda_graphs *g);
sn_status sn_cuda_graphs_add(sn_cuda_graphs *g, const sn_cuda_op *op, sn_err *e);
/* Issues what is queued: eagerly the first time a sequence is seen (and always with a copy in
 * it), as a graph after. */
sn_status sn_cuda_graphs_flush(sn_cuda_graphs *g, sn_err *e);
void sn_cuda_graphs_counts(const sn_cuda_graphs *g, int *captured, int *launches, int *eager);

#endif
