// sim_internal.h: what the simulator's files share: the callback table the kernel's shared object
// calls (the same layout as in the text of sinter_sim.h, pinned by SN_SIM_ABI), the launch state
// (fibers, warps, shared memory) and the collective every warp primitive is built on.
#ifndef SN_SIM_INTERNAL_H
#define SN_SIM_INTERNAL_H

#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#include <string>
#include <vector>

#include "sim.h"

#define SN_SIM_ABI 8u

/* Built with AddressSanitizer (gcc defines __SANITIZE_ADDRESS__, clang has the feature). */
#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif

struct sn_dim3 {
    unsigned x, y, z;
};
struct sn_sim_thread {
    sn_dim3 threadIdx, blockIdx, blockDim, gridDim;
};
struct sn_sim_api {
    unsigned abi;
    void (*syncthreads)(int line);
    unsigned (*shfl)(int mode, unsigned mask, unsigned value, int arg, int width, int line);
    unsigned (*ballot)(unsigned mask, int pred, int line);
    void *(*shared_static)(const void *key, size_t bytes, const char *name, int line);
    void *(*shared_dynamic)(size_t *bytes, const char *name, int line);
    /* never returns (the GNU attribute: clang takes no [[noreturn]] on a pointer) */
    void (*out_of_bounds)(const char *name, long long index, long long count, int line)
        __attribute__((noreturn));
    void (*mma)(int shape, float *d, const unsigned *a, const unsigned *b, const float *c,
                int line);
    void (*ldmatrix)(int n, int trans, unsigned *r, const void *row, int line);
    unsigned (*activemask)(void);
    void (*cp_async)(void *dst, const void *src, unsigned src_bytes, int line);
    void (*cp_async_commit)(void);
    void (*cp_async_wait)(int newest_pending, int line); /* < 0: wait_all */
    void *(*map_pointer)(void *p); /* a pointer parameter's value as the kernel sees it */
    int (*syncthreads_count)(int pred, int line);
    unsigned (*smem_addr)(const void *p, int line); /* p's address in the shared window */
    /* warpgroup MMA (sm_90, sim_wgmma.cc): form as SN_WGMMA_* in sim_wgmma.cc */
    void (*wgmma)(int form, float *d, const unsigned *a, unsigned long long desc_a,
                  unsigned long long desc_b, int scale_d, int line);
    void (*wgmma_fence)(int line);
    void (*wgmma_commit)(int line);
    void (*wgmma_wait)(int newest_pending, int line);
    void (*fence_proxy_async)(int line);
    /* a profiled module's load or store of `bytes` at p, from the code at `site` */
    void (*access)(const void *p, unsigned bytes, int write, const void *site);
};

/* sim_module.cc */
struct sn_sim_module {
    void *so;
    void (*enter)(const sn_sim_thread *t); /* sets the running thread's coordinates */
    bool profiled;                         /* sn_sim_module_load_profiled */
    uintptr_t lo, hi;                      /* a profiled one's mapped range */
};

/* The address of symbol `name` in m's shared object, or NULL. */
void *sim_module_symbol(sn_sim_module *m, const char *name);

/* sim_fiber.cc: a fiber's saved state and the switch between two */
struct sim_ctx {
    void *sp;      /* x86-64: the saved stack pointer */
    ucontext_t uc; /* elsewhere */
    /* For AddressSanitizer's fiber annotations: the stack it runs on (a fiber's from
     * sim_ctx_make; the scheduler's, the OS thread's, learnt at its first switch to a fiber) and
     * what the first switch starts. */
    const void *stack_lo;
    size_t stack_bytes;
    void (*entry)(void);
};
/* Makes c start entry() on the stack [stack, stack + bytes) at the first switch to it. The stack
 * may have held a fiber abandoned mid-call (a failed launch): it is taken as unused. */
void sim_ctx_make(sim_ctx *c, char *stack, size_t bytes, void (*entry)(void));
/* Saves the running state in from, continues to. */
void sim_ctx_switch(sim_ctx *from, sim_ctx *to);
/* The same for a fiber that is never resumed (it ended or its launch failed): never returns. */
[[noreturn]] void sim_ctx_leave(sim_ctx *from, sim_ctx *to);
/* Before fiber stacks are unmapped: AddressSanitizer forgets what it marked in them (the address
 * range may be mapped again for anything). Nothing without it. */
void sim_stacks_forget(void *mem, size_t bytes);

/* sim_run.cc: the launch, its fibers and their scheduler */
enum fiber_state { FIBER_READY, FIBER_BARRIER, FIBER_WARP, FIBER_DONE };

/* What a lane waiting in a warp collective offers and where its result goes. */
struct warp_wait {
    int kind;         /* which primitive: lanes of one collective must agree */
    unsigned mask;    /* the lanes named (only lanes that exist in the block) */
    const void *in;   /* `bytes` of this lane's contribution */
    void *out;        /* 32 * bytes: every named lane's contribution, by lane */
    unsigned bytes;
    int line;
    bool released;
    unsigned width; /* 32: a warp (lanes named by mask); 128: a warpgroup (all its threads) */
};

/* A cp.async not yet waited for: 16 bytes to dst, src_bytes of them from src, zeros after. */
struct pending_copy {
    void *dst;
    const void *src;
    unsigned src_bytes;
    unsigned long long group; /* the commit group it belongs to */
};

/* A wgmma issued and not yet waited for (sim_wgmma.cc): it reads shared memory and writes the
 * accumulators when the thread waits for its group, as late as the hardware may. */
struct pending_wgmma {
    int form, line;
    float *d;                      /* the accumulators, poisoned until then */
    std::vector<float> c;          /* their values at issue (if not chained to a pending one) */
    bool chained;                  /* d is the output of an earlier pending wgmma */
    unsigned a[32][4];             /* the warp's A fragments (A from registers) */
    unsigned long long desc_a, desc_b;
    int scale_d;
    unsigned long long group;
};

struct fiber {
    sim_ctx ctx;
    char *stack;
    bool started;
    fiber_state state;
    int line;         /* of the barrier it waits at */
    bool pred;        /* its __syncthreads_count predicate */
    unsigned linear;  /* the thread's index in its block */
    sn_sim_thread coords;
    warp_wait w;
    std::vector<pending_copy> copies;
    unsigned long long groups_committed;
    std::vector<pending_wgmma> wgmmas;
    unsigned long long wgmma_groups;
    bool wgmma_fenced;  /* a wgmma.fence since the thread last waited for accumulators */
    bool proxy_dirty;   /* cp.async data landed since the last fence.proxy.async */
};

struct shared_decl {
    const void *key;
    size_t offset, bytes;
};

struct launch {
    sn_sim_module *m;
    void (*stub)(void **);
    void **params;
    sn_sim_opts o;
    unsigned grid[3], block[3];
    unsigned nthreads;
    std::vector<fiber> fibers;
    std::vector<unsigned> order; /* the order fibers run in, this block */
    std::vector<unsigned> pos;   /* fiber -> its place in order */
    unsigned hint;               /* no fiber before order[hint] is ready */
    unsigned barrier_count;      /* of the last barrier released: threads whose pred held */
    fiber *running;
    sim_ctx sched;
    std::string error; /* the first error; the launch stops there */
    size_t stack_stride;
    /* shared memory: static declarations, then dynamic, in one arena */
    unsigned char *shared;
    size_t shared_cap, static_bytes, dynamic_bytes;
    std::vector<shared_decl> decls;
    const char *kernel;
    unsigned long long rng;
    const char *stacks_lo, *stacks_hi; /* the fibers' stacks */
    struct sim_prof *prof;             /* a profiled launch's records (sim_profile.cc), or NULL */
};

/* The launch running on this OS thread. */
launch *sim_current(void);
/* Records the first error (with the running thread's coordinates) and abandons the launch:
 * never returns to the kernel. */
[[noreturn]] void sim_fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Waits until every lane named in mask has called sim_exchange with the same kind, then every
 * named lane's `bytes` of `in` are in `out` (32 * bytes) at its lane's place. */
void sim_exchange(int kind, unsigned mask, const void *in, void *out, unsigned bytes, int line);
/* The same among the 128 threads of the running thread's warpgroup (all of which must exist in
 * the block and arrive): `out` holds 128 * bytes, by thread index within the warpgroup. */
void sim_exchange_group(int kind, const void *in, void *out, unsigned bytes, int line);
/* The lanes of the running thread's warp that exist in the block. */
unsigned sim_warp_lanes(void);
unsigned sim_lane(void);

/* sim_warp.cc: the warp primitives (the sn_sim_api entries of the same names) */
unsigned sim_shfl(int mode, unsigned mask, unsigned value, int arg, int width, int line);
unsigned sim_ballot(unsigned mask, int pred, int line);
unsigned sim_activemask(void);
void sim_mma(int shape, float *d, const unsigned *a, const unsigned *b, const float *c, int line);
void sim_ldmatrix(int n, int trans, unsigned *r, const void *row, int line);

/* sim_wgmma.cc: warpgroup MMA (the sn_sim_api entries of the same names) */
void sim_wgmma(int form, float *d, const unsigned *a, unsigned long long desc_a,
               unsigned long long desc_b, int scale_d, int line);
void sim_wgmma_fence(int line);
void sim_wgmma_commit(int line);
void sim_wgmma_wait(int newest_pending, int line);
void sim_fence_proxy_async(int line);
/* At a thread's exit: a wgmma still in flight is an error. */
void sim_wgmma_exit(fiber *f);

/* sim_profile.cc: a profiled launch (sn_sim_opts.profile) */
/* Starts recording for l (l->prof), false when out of memory. */
bool sim_profile_begin(launch *l);
/* The access callback (sn_sim_api.access). */
void sim_profile_access(const void *p, unsigned bytes, int write, const void *site);
/* A cp.async (its global source and shared destination) or an ldmatrix row, recorded as the
 * access of the running lane at a site made from the line and `what`. */
void sim_profile_copy(const void *src, unsigned src_bytes, const void *dst, int line);
void sim_profile_ldmatrix(const void *row, int n, int line);
/* A collective of kind `kind` (sim_warp.cc's KIND_*, sim_wgmma.cc's) completed. */
void sim_profile_collective(launch *l, int kind);
/* The block that just ended: its requests counted into the profile. */
void sim_profile_block(launch *l);
/* The launch's end: its totals added into opts.profile, the records freed. */
void sim_profile_end(launch *l, bool ok);

/* The table handed to every module (sim_run.cc). */
extern const sn_sim_api sim_api;

#endif
