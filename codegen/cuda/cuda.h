/* cuda.h: the CUDA backend's code generation: kernel descriptions rendered as CUDA C text, and
 * that text compiled by NVRTC. Convention: every generated source includes the one prelude
 * (SN_CUDA_PRELUDE_NAME), the only place that knows whether the text runs on a GPU or a CPU.
 *
 *     sn_target t = sn_target_cuda(90);
 *     sn_cuda_source s;
 *     if (sn_cuda_render(p->kernels, p->n_kernels, &t, &s, &e)) ...  // every kernel but GEMMs
 *     sn_cuda_module m;
 *     if (sn_nvrtc_compile(s.src, "prog.cu", 90, &m, &e)) ...  // one CUBIN, ptxas report
 *     sn_cuda_dims d = sn_cuda_launch_dims(p->kernels[3], &t); // launch s.fn[3] with these
 *     sn_cuda_module_free(&m);
 *     sn_cuda_source_free(&s);
 */
#ifndef SN_CUDA_H
#define SN_CUDA_H

#include "program/kernel.h"
#include "program/program.h"
#include "program/target.h"
#include "nvrtc_api.h"

/* ---- cuda_emit.c: the text emitter and the prelude ---- */

/* Source text built line by line. A line ending in '{' opens a block (the lines after it are
 * indented one level more), a line starting with '}' closes one; sn_cu_finish asserts that every
 * block opened was closed. Out of memory is sticky: later appends do nothing and sn_cu_finish
 * returns NULL. */
typedef struct {
    char *buf;
    size_t len, cap;
    int depth; /* blocks open */
    size_t oom; /* the size of an allocation that failed, 0: none */
} sn_cu_text;

void sn_cu_emitf(sn_cu_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends without a newline or indentation (the middle of a line). */
void sn_cu_appendf(sn_cu_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Checks that the blocks balance; returns the text (malloc'd, the caller frees), or NULL when
 * memory ran out while it was built. */
char *sn_cu_finish(sn_cu_text *t);

/* The name generated sources include, and the prelude's text (see cuda_prelude.h). */
#define SN_CUDA_PRELUDE_NAME "sinter_prelude.h"
const char *sn_cuda_prelude(void);

/* ---- cuda_launch.c: launch dimensions ---- */

enum { SN_CUDA_PW_BLOCK = 256, SN_CUDA_PW_MAX_GRID = 4096 };
enum { SN_CUDA_CE_FINISH_THREADS = 256 }; /* the classifier's FINISH: a chunk of rows a thread */

typedef struct {
    unsigned grid[3], block[3];
    unsigned shared_bytes; /* dynamic shared memory */
} sn_cuda_dims;

/* The grid, block and dynamic shared memory kernel k is launched with on target t: the one place
 * that decides them, read by the runtime, the stand-in driver and the simulator's tests alike
 * (the rendered text is written for exactly these: __launch_bounds__, shared sizes). GEMMs have
 * none (all zero). Pointwise: blocks of SN_CUDA_PW_BLOCK threads, at most SN_CUDA_PW_MAX_GRID
 * of them (a grid-stride loop covers the rest); row ops: a block per row (the classifier's
 * too), the sums over every row (cross-entropy's loss, the norm weight gradients) a block per
 * chunk of rows, then a finishing block; reductions: a block per output tile; gathers: a
 * block per id (forward) or per table row (backward); the optimizer: grid-stride blocks (the
 * squared norm: a block per SN_SQNORM_BLOCK elements; the clip: one block). */
sn_cuda_dims sn_cuda_launch_dims(const sn_kernel *k, const sn_target *t);

/* ---- cuda_render.c: kernels to one translation unit ---- */

/* The CUDA C of a set of kernels: one translation unit (the prelude's #include, the shared
 * device functions, then each distinct kernel once) and which function launches each kernel. */
typedef struct {
    char *src;            /* the text NVRTC and the simulator get (malloc'd) */
    int n_kernels;        /* kernels given */
    int n_functions;      /* distinct __global__ functions in src */
    int n_skipped;        /* kernels given that have no function here (GEMMs) */
    char (*fn)[64];       /* [n_kernels]: the function kernel i launches; "" for a GEMM */
    int *leader;          /* [n_kernels]: the kernel whose function kernel i launches (i for the
                             first of its text); -1 for a GEMM */
    size_t *fn_bytes;     /* [n_kernels]: the body of the function kernel i leads; 0 if none */
    char **text;          /* [n_kernels]: that function as src has it (comments, body, host
                             stub); NULL if none */
} sn_cuda_source;

/* Renders kernels ks[0..n) for target t into one translation unit. Each kernel becomes
 * `extern "C" __global__ void <name>(out0.., in0..)` taking one typed pointer per arg in
 * k->args order, then SN_HOST_STUB(<name>); kernels whose text differs only in names (node ids,
 * their own name) share the function of the first of them, named after it, and are launched
 * with their own args: out->fn[i] names kernel i's function. GEMMs are skipped (the runtime
 * calls a library). Buffers must be 16-byte aligned (float4 accesses). A kind or dtype this
 * backend does not generate is SN_ERR_UNSUPPORTED naming the kernel; *out is then empty. */
sn_status sn_cuda_render(const sn_kernel *const *ks, int n, const sn_target *t,
                         sn_cuda_source *out, sn_err *e);
/* A part of s (which sn_cuda_render made of ks) as a translation unit of its own: the kernels
 * with part[i] == p, their functions named and written exactly as in s->src (every kernel that
 * shares a function must be in its leader's part). *src is malloc'd. */
sn_status sn_cuda_render_part(const sn_kernel *const *ks, const sn_cuda_source *s,
                              const sn_target *tg, const int *part, int p, char **src, sn_err *e);
void sn_cuda_source_free(sn_cuda_source *s);

/* ---- nvrtc.c: compiling with NVRTC ---- */

/* What ptxas reported about one kernel (--ptxas-options=-v). */
typedef struct {
    char name[64];
    int registers;
    int spill_store_bytes, spill_load_bytes;
    int stack_bytes;
    int shared_bytes;
} sn_cuda_kernel_info;

typedef struct {
    int arch;        /* 80: sm_80 */
    char *cubin;     /* the machine code (malloc'd) */
    size_t cubin_size;
    char *log;       /* NVRTC's program log, ptxas report included (malloc'd; "" if none) */
    int n_info;
    sn_cuda_kernel_info *info; /* per kernel, parsed from the log (malloc'd) */
} sn_cuda_module;

/* NVRTC opened with dlopen: SN_LIBNVRTC's name or path when set, else libnvrtc.so.13 from the
 * loader's path, else from the toolkit meson was configured with (sinter links no NVRTC). The
 * function table is nvrtc_api.h's. Zero it before the first open. */
typedef struct {
    void *handle;   /* NULL: not open */
    char path[256]; /* the name or path it was opened as */
#define SN_NVRTC_FIELD(ret, name, sym, params) ret(*name) params;
    SN_CUDA_NVRTC_API(SN_NVRTC_FIELD)
#undef SN_NVRTC_FIELD
} sn_nvrtc;

/* Opens the library and looks up every symbol; a missing library or symbol is SN_ERR_DEVICE
 * naming it, dlerror's words and what to do. Opening twice is a no-op. */
sn_status sn_nvrtc_open(sn_nvrtc *n, sn_err *e);
void sn_nvrtc_close(sn_nvrtc *n);
/* "libnvrtc.so.13", or the path it was opened as, or SN_LIBNVRTC's value (before opening). */
const char *sn_nvrtc_lib_name(const sn_nvrtc *n);
/* NVRTC's version (opening it first). */
sn_status sn_nvrtc_version(sn_nvrtc *n, int *major, int *minor, sn_err *e);
/* The options every compile passes for arch (written into opts, at most 8; returns how many):
 * the arch, the toolkit's include folder, C++17 and ptxas -v (the report). */
int sn_nvrtc_options(int arch, char gpu[48], const char **opts);

/* Compiles src (named `name` in messages) with NVRTC n (opened here if it is not) for sm_<arch>
 * (75 and up) into a CUBIN, with the ptxas report parsed. The prelude is supplied as
 * SN_CUDA_PRELUDE_NAME. A compile error is SN_ERR_DEVICE with NVRTC's log in the message
 * (out->log keeps all of it). Free *out with sn_cuda_module_free, success or not. */
sn_status sn_nvrtc_compile_with(sn_nvrtc *n, const char *src, const char *name, int arch,
                                sn_cuda_module *out, sn_err *e);
/* The same with the process's NVRTC, opened on first use and kept open; no NVRTC to be found is
 * SN_ERR_UNSUPPORTED (the callers, --emit-cuda and the tests, then go on without it). */
sn_status sn_nvrtc_compile(const char *src, const char *name, int arch, sn_cuda_module *out,
                           sn_err *e);
void sn_cuda_module_free(sn_cuda_module *m);

/* Parses a ptxas -v report into at most cap entries; returns how many kernels it found. */
int sn_ptxas_parse(const char *log, sn_cuda_kernel_info *out, int cap);

/* The info of kernel `name` in m, or NULL. */
const sn_cuda_kernel_info *sn_cuda_module_info(const sn_cuda_module *m, const char *name);

/* ---- cuda_occupancy.c: theoretical occupancy, and the per-kernel ptxas report ---- */

/* One arch's per-SM limits (NVIDIA's published numbers). */
typedef struct {
    int arch;                 /* 75, 80, 90 */
    int threads_sm, blocks_sm, warps_sm; /* resident at most: sm_80/90 2048, 32, 64 */
    int regs_sm;              /* 32-bit registers an SM holds (64 K) */
    int reg_unit;             /* a warp's registers are allocated in units of this many (256) */
    int subpartitions;        /* the register file's quarters; a warp lives in one (4) */
    int max_regs_thread;      /* 255 */
    int smem_sm;              /* shared memory an SM holds at its largest carveout (sm_80 164 KiB,
                                 sm_90 228 KiB) */
    int smem_block;           /* the most one block can opt into (163 KiB, 227 KiB) */
    int reserved_block;       /* shared memory the system takes per block (1 KiB on sm_80+) */
    int smem_unit;            /* allocation granularity of shared memory (128 bytes) */
} sn_cuda_sm_limits;

/* The limits of sm_<arch> (75, 80, 86, 89, 90, 120), or NULL. */
const sn_cuda_sm_limits *sn_cuda_sm_limits_of(int arch);

/* How many blocks of a kernel fit on one SM, and what limits them (the formulas are written out in
 * cuda_occupancy.c: registers by warp in units of 256 per sub-partition, shared memory as static +
 * dynamic + 1 KiB reserved, threads, blocks). */
typedef struct {
    int warps_per_block;
    int regs_per_warp;     /* allocated: registers x 32 rounded up to reg_unit */
    int smem_per_block;    /* allocated: static + dynamic + reserved, rounded up */
    int by_regs, by_smem, by_threads, by_blocks; /* blocks each limit allows */
    int blocks;            /* resident blocks per SM: the least of the four (0: cannot launch) */
    int warps;             /* resident warps per SM */
    double occupancy;      /* warps / warps_sm */
    const char *limiter;   /* "registers", "shared memory", "threads", "blocks", "cannot launch..." */
} sn_cuda_occupancy;

sn_cuda_occupancy sn_cuda_occupancy_of(const sn_cuda_sm_limits *L, int registers, int static_smem,
                                       int dynamic_smem, int threads);
/* The share of a GPU's resident warp slots a launch of `blocks` blocks fills on `sms` SMs: the
 * occupancy, times the share of the SMs' resident blocks the grid has when it is smaller than
 * one wave (the SMs it leaves idle or half-used). */
double sn_cuda_grid_fill(const sn_cuda_occupancy *o, double blocks, int sms);

/* One kernel compiled for one arch: ptxas's numbers, its launch there and its occupancy. */
typedef struct {
    const sn_kernel *k;
    int arch;
    char fn[64];              /* the function that launches it ("" for a GEMM) */
    bool has_info;            /* false for a GEMM (a library call) */
    sn_cuda_dims dims;        /* sn_cuda_launch_dims on sm_<arch> */
    sn_cuda_kernel_info info; /* registers, static shared memory, spills, stack */
    sn_cuda_occupancy occ;
} sn_cuda_kernel_report;

/* Renders ks[0..n) for sm_<arch> as one translation unit, compiles it with NVRTC (ptxas -v) and
 * fills out[0..n): each kernel's ptxas record, launch dims and occupancy (GEMMs: only k and arch).
 * Errors: those of sn_cuda_render and sn_nvrtc_compile (SN_ERR_UNSUPPORTED without NVRTC), and
 * SN_ERR_INVALID for an arch with no limits here. */
sn_status sn_cuda_ptxas_report(const sn_kernel *const *ks, int n, int arch,
                               sn_cuda_kernel_report *out, sn_err *e);

#endif
