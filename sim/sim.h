/* sim.h: the SIMT simulator, a test instrument that runs the exact CUDA C text NVRTC receives on
 * the CPU: the text is compiled by the host C++ compiler against the CPU side of the prelude
 * (sinter_sim.h, sim_prelude.cc), the threads of a block run as cooperative fibers.
 *
 *     sn_sim_module *m;
 *     if (sn_sim_module_load(src, &m, &e)) ...                 // g++ -O1 -shared; cached by hash
 *     void *params[] = {&out, &in, &n};                       // as cuLaunchKernel's kernelParams
 *     sn_sim_opts o = sn_sim_defaults();
 *     if (sn_sim_launch(m, "softmax", grid, block, 0, params, &o, &e)) puts(e.msg);
 *     sn_sim_module_free(m);
 *
 * What a launch enforces (each a status with a message naming the thread, the line and the fix):
 * __syncthreads is a block barrier that every thread must reach at the same call site (a thread
 * that exits while others wait is an error, not a hang); warp shuffles, votes, __syncwarp,
 * mma.sync and ldmatrix are exchanged among the lanes named in the mask, all of which must
 * arrive; wgmma (sm_90's warpgroup MMA) among the 128 threads of a warpgroup, computed at its
 * wait_group (sim_wgmma.cc has its rules); shared memory (SN_SHARED, SN_SHARED2, SN_DYNAMIC_SHARED) is poisoned with bytes 0x7f at
 * every block start, bounds-checked on every indexed access, and its total held to a limit.
 * Blocks run one after another, the threads of a block round-robin between synchronisation
 * points in the order the options choose. */
#ifndef SN_SIM_H
#define SN_SIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#ifndef _Noreturn
#define _Noreturn [[noreturn]] /* ir.h is C11 */
#endif
extern "C" {
#endif

#include "ir/ir.h"

typedef struct sn_sim_module sn_sim_module;

/* The order threads (and blocks) are run in between synchronisation points. */
typedef enum {
    SN_SIM_FORWARD,  /* thread 0, 1, 2 ... */
    SN_SIM_REVERSE,  /* the last thread first */
    SN_SIM_SHUFFLED, /* a permutation drawn from `seed`, a new one per block */
    SN_SIM_ORDER_COUNT
} sn_sim_order;

/* What profiled launches count (sim_profile.cc), added into the struct at each launch: a
 * performance instrument for machines without a GPU. A warp-wide request is the k-th execution
 * of one load or store in the kernel's code by each lane of a warp, taken together as the
 * hardware issues it; requests are counted per global or shared access site. Global memory is
 * every address that is neither shared memory, nor a thread's stack, nor the simulator's own. */
typedef struct {
    long long launches, blocks;
    /* global loads and stores: requests, the 32-byte sectors they touch, the distinct bytes they
     * use (a byte read by many lanes of one request once); cp.async copies count as loads */
    long long ld_requests, ld_sectors, ld_bytes;
    long long st_requests, st_sectors, st_bytes;
    /* the distinct sectors each launch touched, added up over launches: sectors moved over this
     * is how many times the same data went through the memory system */
    long long footprint_sectors;
    /* shared memory (ldmatrix rows and cp.async destinations included): requests, the
     * wavefronts the 32 banks need for them (one per distinct 4-byte word in the busiest bank,
     * by phase: 32 lanes for accesses of 4 bytes or less, 16 for 8, 8 for 16), and the fewest
     * wavefronts their bytes need (a 128-byte wavefront each) */
    long long sh_requests, sh_wavefronts, sh_ideal;
    /* warp-wide instructions by class (wgmma: per warpgroup; barriers: per block) */
    long long shfl, vote, mma, ldmatrix, wgmma, cp_async, barriers;
} sn_sim_profile;

/* The profile's verdicts, "" when none: loads or stores using under half the sector bytes they
 * move (uncoalesced; when they are a tenth or more of the sectors moved), sectors moved more
 * than 8 times the distinct ones (data read again and again by many warps or blocks), shared
 * memory taking over 1.5 times the wavefronts its bytes need (bank conflicts); each with its
 * number. A launch of fewer than 64 sectors and 64 shared requests is not judged. */
void sn_sim_profile_flags(const sn_sim_profile *p, char *buf, size_t n);

typedef struct {
    sn_sim_order order;
    uint64_t seed;         /* for SN_SIM_SHUFFLED */
    unsigned shared_limit; /* bytes of static + dynamic shared memory per block (48 KiB) */
    unsigned stack_bytes;  /* per thread fiber (64 KiB) */
    /* If set, every pointer parameter of the kernel is passed through it (NULL stays NULL): a
     * stand-in driver whose device pointers are not host addresses maps them here. */
    void *(*map_pointer)(void *ctx, const void *device_ptr);
    void *map_ctx;
    /* If set, the launch's counts are added into it; the module must have been loaded by
     * sn_sim_module_load_profiled (else SN_ERR_INVALID). */
    sn_sim_profile *profile;
} sn_sim_opts;

/* Forward order, seed 1, 48 KiB of shared memory (the opt-in maximum of a target is larger:
 * pass it when the kernel opts in), 64 KiB stacks. */
sn_sim_opts sn_sim_defaults(void);

/* Compiles src (CUDA C that includes "sinter_prelude.h") with g++ -O1 into a shared object,
 * cached by a hash of the text in $TMPDIR/sinter_sim_<uid> (SN_SIM_CACHE=0 turns the cache off),
 * and loads it. A compile error is SN_ERR_DEVICE carrying g++'s message; no g++ is
 * SN_ERR_UNSUPPORTED. *out is NULL on failure. */
sn_status sn_sim_module_load(const char *src, sn_sim_module **out, sn_err *e);
/* The same with every load and store of the kernel's code reported to the simulator
 * (g++ -fsanitize=thread's instrumentation, its callbacks the simulator's own: no ThreadSanitizer
 * runtime), for sn_sim_opts.profile; a few times slower to run. Cached apart. */
sn_status sn_sim_module_load_profiled(const char *src, sn_sim_module **out, sn_err *e);
void sn_sim_module_free(sn_sim_module *m);

/* Whether m holds kernel `name` (its text ends in SN_HOST_STUB(name)). */
int sn_sim_has_kernel(const sn_sim_module *m, const char *name);

/* Runs one launch of `kernel`: params[i] points at the i-th kernel parameter's value, as
 * cuLaunchKernel's kernelParams. o NULL: sn_sim_defaults(). A kernel that breaks the rules above
 * is SN_ERR_DEVICE naming the block, the thread, the line and what went wrong; the launch stops at
 * the first such error. */
sn_status sn_sim_launch(sn_sim_module *m, const char *kernel, const unsigned grid[3],
                        const unsigned block[3], unsigned dynamic_shared_bytes, void **params,
                        const sn_sim_opts *o, sn_err *e);

/* A host buffer a launch writes (or reads and writes). */
typedef struct {
    void *ptr;
    size_t bytes;
} sn_sim_buf;

/* Runs the same launch in every order (forward, reverse, shuffled with o->seed), each on the
 * outputs as they were before the first, and checks that the outputs come out bitwise equal:
 * a difference is SN_ERR_NUMERIC naming the buffer, the first differing byte and the orders (a
 * race: a missing barrier, usually). The outputs keep the forward order's result. */
sn_status sn_sim_launch_orders(sn_sim_module *m, const char *kernel, const unsigned grid[3],
                               const unsigned block[3], unsigned dynamic_shared_bytes,
                               void **params, const sn_sim_buf *outs, int n_outs,
                               const sn_sim_opts *o, sn_err *e);

/* The text of "sinter_sim.h", the simulator's CPU primitives that the prelude includes when it
 * is not compiled by NVRTC (sim_prelude.cc). */
const char *sn_sim_header(void);

#ifdef __cplusplus
}
#endif

#endif
