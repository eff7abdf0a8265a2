// sim_run.cc: one launch: blocks in turn, a block's threads as fibers, the first ready one in
// the chosen order running until it blocks (barrier, warp collective) or ends. Convention: a block
// that cannot go on (a divergent barrier, a lane that never comes) is an error, never a hang.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "sim_internal.h"

static thread_local launch *current;

launch *sim_current(void) { return current; }

static std::string thread_name(const launch *l, const fiber *f) {
    char s[160];
    const sn_sim_thread &c = f->coords;
    snprintf(s, sizeof s, "block (%u,%u,%u) thread (%u,%u,%u) (warp %u lane %u)", c.blockIdx.x,
             c.blockIdx.y, c.blockIdx.z, c.threadIdx.x, c.threadIdx.y, c.threadIdx.z,
             f->linear / 32, f->linear % 32);
    return s;
}

static void record(launch *l, const std::string &what) {
    if (l->error.empty()) l->error = what;
}

void sim_fail(int line, const char *fmt, ...) {
    launch *l = current;
    { /* this frame is never returned to: its strings must be gone before the switch */
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        std::string where = l->running ? thread_name(l, l->running) : std::string("the launch");
        char at[32] = "";
        if (line > 0) snprintf(at, sizeof at, " (line %d)", line);
        record(l, std::string(l->kernel) + ": " + where + at + ": " + msg);
    }
    fiber *f = l->running;
    SN_ASSERT(f);
    sim_ctx_leave(&f->ctx, &l->sched); /* the scheduler never resumes a failed launch */
}

static void yield(launch *l) {
    fiber *f = l->running;
    sim_ctx_switch(&f->ctx, &l->sched);
    l->m->enter(&f->coords); /* resumed */
}

unsigned sim_lane(void) { return current->running->linear % 32; }

unsigned sim_warp_lanes(void) {
    launch *l = current;
    unsigned base = l->running->linear / 32 * 32, n = l->nthreads - base;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

/* __syncthreads_count: the number of threads whose pred is nonzero (plain __syncthreads: 1).
 * The count stays valid until every thread has resumed: none can reach the next barrier first. */
static int syncthreads_count(int pred, int line) {
    launch *l = current;
    l->running->state = FIBER_BARRIER;
    l->running->line = line;
    l->running->pred = pred != 0;
    yield(l);
    return (int)l->barrier_count;
}

static void syncthreads(int line) { syncthreads_count(1, line); }

/* Whether thread j of f's warp (or warpgroup) takes part in its collective. */
static bool named(const warp_wait &w, unsigned j) { return w.width > 32 || (w.mask >> j & 1); }

/* If every lane named by f's collective has arrived, moves the data and releases them. */
static void try_complete(launch *l, fiber *f) {
    const warp_wait &w = f->w;
    unsigned base = f->linear / w.width * w.width;
    for (unsigned j = 0; j < w.width; j++) {
        if (!named(w, j)) continue;
        const fiber &g = l->fibers[base + j];
        if (g.state != FIBER_WARP || g.w.released) return;
    }
    for (unsigned j = 0; j < w.width; j++) { /* all here: they must agree */
        if (!named(w, j)) continue;
        const fiber &g = l->fibers[base + j];
        if (g.w.kind != w.kind || g.w.mask != w.mask || g.w.bytes != w.bytes ||
            g.w.width != w.width) {
            l->running = &l->fibers[base + j];
            if (w.width > 32 || g.w.width > 32)
                sim_fail(g.w.line, "threads of a warpgroup disagree at a warpgroup operation: "
                         "thread %u (line %d) and thread %u (line %d) execute different ones "
                         "(all 128 threads must execute the same wgmma)", j, g.w.line,
                         f->linear % w.width, w.line);
            sim_fail(g.w.line, "lanes of a warp disagree at a warp-synchronous operation: lane %u "
                     "(line %d) names mask 0x%08x%s, lane %u (line %d) mask 0x%08x: every lane "
                     "named in a mask must execute the same operation with the same mask", j,
                     g.w.line, g.w.mask, g.w.kind != w.kind ? " in another operation" : "",
                     f->linear % 32, w.line, w.mask);
        }
    }
    if (l->prof) sim_profile_collective(l, w.kind);
    for (unsigned i = 0; i < w.width; i++) {
        if (!named(w, i)) continue;
        fiber &gi = l->fibers[base + i];
        for (unsigned j = 0; j < w.width; j++)
            if (named(w, j))
                memcpy((char *)gi.w.out + (size_t)j * w.bytes, l->fibers[base + j].w.in, w.bytes);
        gi.w.released = true;
        gi.state = FIBER_READY;
        l->hint = std::min(l->hint, l->pos[base + i]);
    }
}

void sim_exchange(int kind, unsigned mask, const void *in, void *out, unsigned bytes, int line) {
    launch *l = current;
    fiber *f = l->running;
    unsigned lane = f->linear % 32;
    if (!(mask >> lane & 1))
        sim_fail(line, "a warp-synchronous operation's mask 0x%08x does not name the lane that "
                 "executes it (%u)", mask, lane);
    f->w = warp_wait{kind, mask & sim_warp_lanes(), in, out, bytes, line, false, 32};
    f->state = FIBER_WARP;
    try_complete(l, f);
    if (f->state == FIBER_WARP) yield(l);
    SN_ASSERT(f->w.released);
}

void sim_exchange_group(int kind, const void *in, void *out, unsigned bytes, int line) {
    launch *l = current;
    fiber *f = l->running;
    unsigned base = f->linear / 128 * 128;
    if (base + 128 > l->nthreads)
        sim_fail(line, "a warpgroup operation in a block of %u threads: threads %u to %u do not "
                 "exist (a warpgroup is 128 threads, 4 whole warps)", l->nthreads, base,
                 base + 127);
    f->w = warp_wait{kind, 0xffffffffu, in, out, bytes, line, false, 128};
    f->state = FIBER_WARP;
    try_complete(l, f);
    if (f->state == FIBER_WARP) yield(l);
    SN_ASSERT(f->w.released);
}

static void *shared_static(const void *key, size_t bytes, const char *name, int line) {
    launch *l = current;
    for (const shared_decl &d : l->decls)
        if (d.key == key) return l->shared + d.offset;
    size_t offset = (l->static_bytes + 15) / 16 * 16;
    if (offset + bytes + l->dynamic_bytes > l->o.shared_limit)
        sim_fail(line, "shared memory over the limit: %s needs %zu bytes after %zu of static and "
                 "%zu of dynamic shared memory, more than the %u bytes allowed (pass a larger "
                 "shared_limit if the kernel opts in to more)", name, bytes, offset,
                 l->dynamic_bytes, l->o.shared_limit);
    l->decls.push_back(shared_decl{key, offset, bytes});
    l->static_bytes = offset + bytes;
    memset(l->shared + offset, 0x7f, bytes); /* the block started before it was declared */
    return l->shared + offset;
}

static void *shared_dynamic(size_t *bytes, const char *name, int line) {
    launch *l = current;
    *bytes = l->dynamic_bytes;
    return l->shared + l->shared_cap - l->dynamic_bytes; /* the end of the arena, 16-aligned */
}

__attribute__((noreturn)) static void out_of_bounds(const char *name, long long index, long long count,
                                       int line) {
    sim_fail(0, "shared memory out of bounds: %s[%lld] of %lld elements (%s is declared on line "
             "%d)", name, index, count, name, line);
}

/* Asynchronous copies wait in the thread's queue until it waits for their group: a read of the
 * destination before the wait sees the poison. */
static void cp_async(void *dst, const void *src, unsigned src_bytes, int line) {
    launch *l = current;
    unsigned char *d = (unsigned char *)dst;
    if (!(d >= l->shared && d + 16 <= l->shared + l->shared_cap))
        sim_fail(line, "cp.async: the destination %p is not 16 bytes of this block's shared "
                 "memory", dst);
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16)
        sim_fail(line, "cp.async: addresses %p (shared) and %p (global) must be 16-byte aligned",
                 dst, src);
    if (src_bytes > 16) sim_fail(line, "cp.async: %u source bytes, at most 16", src_bytes);
    fiber *f = l->running;
    f->copies.push_back(pending_copy{dst, src, src_bytes, f->groups_committed});
    if (l->prof) sim_profile_copy(src, src_bytes, dst, line);
}

static void cp_async_commit(void) { current->running->groups_committed++; }

static void finish_copies(fiber *f, unsigned long long upto) { /* groups below upto */
    size_t kept = 0;
    for (const pending_copy &c : f->copies) {
        if (c.group < upto) {
            memset(c.dst, 0, 16);
            memcpy(c.dst, c.src, c.src_bytes);
            f->proxy_dirty = true; /* a generic-proxy write a wgmma may not see unfenced */
        } else {
            f->copies[kept++] = c;
        }
    }
    f->copies.resize(kept);
}

static void cp_async_wait(int newest_pending, int line) {
    fiber *f = current->running;
    if (newest_pending < 0) { /* wait_all: commits, then waits for everything */
        f->groups_committed++;
        newest_pending = 0;
    }
    unsigned long long c = f->groups_committed, n = (unsigned long long)newest_pending;
    finish_copies(f, c > n ? c - n : 0);
}

static unsigned smem_addr(const void *p, int line) {
    launch *l = current;
    const unsigned char *q = (const unsigned char *)p;
    if (!(q >= l->shared && q <= l->shared + l->shared_cap))
        sim_fail(line, "the shared-memory address of %p, which is not in this block's shared "
                 "memory", p);
    return (unsigned)(q - l->shared);
}

static void *map_pointer(void *p) {
    const sn_sim_opts &o = current->o;
    return o.map_pointer && p ? o.map_pointer(o.map_ctx, p) : p;
}

const sn_sim_api sim_api = {SN_SIM_ABI, syncthreads, sim_shfl, sim_ballot, shared_static,
                            shared_dynamic, out_of_bounds, sim_mma, sim_ldmatrix,
                            sim_activemask, cp_async, cp_async_commit, cp_async_wait,
                            map_pointer, syncthreads_count, smem_addr, sim_wgmma,
                            sim_wgmma_fence, sim_wgmma_commit, sim_wgmma_wait,
                            sim_fence_proxy_async, sim_profile_access};

static void fiber_main(void) {
    launch *l = current;
    fiber *f = l->running;
    l->m->enter(&f->coords);
    l->stub(l->params);
    finish_copies(f, ~0ull); /* copies never waited for land at exit */
    sim_wgmma_exit(f);
    f->state = FIBER_DONE;
    sim_ctx_leave(&f->ctx, &l->sched); /* a finished fiber is never resumed */
}

static unsigned long long next_random(unsigned long long *s) { /* splitmix64 */
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void set_order(launch *l, std::vector<unsigned> &v, unsigned n) {
    v.resize(n);
    for (unsigned i = 0; i < n; i++) v[i] = l->o.order == SN_SIM_REVERSE ? n - 1 - i : i;
    if (l->o.order == SN_SIM_SHUFFLED)
        for (unsigned i = n; i > 1; i--) std::swap(v[i - 1], v[next_random(&l->rng) % i]);
}

static const char *what_waits(const fiber &f) {
    return f.state == FIBER_BARRIER ? "waits at __syncthreads" : f.state == FIBER_WARP
        ? "waits at a warp-synchronous operation" : f.state == FIBER_DONE ? "has exited" : "runs";
}

/* Why no thread of the block can go on, for the error. */
static std::string stall_reason(launch *l) {
    const fiber *bar = NULL, *done = NULL, *warp = NULL;
    for (const fiber &f : l->fibers) {
        if (f.state == FIBER_BARRIER && !bar) bar = &f;
        if (f.state == FIBER_DONE && !done) done = &f;
        if (f.state == FIBER_WARP && !warp) warp = &f;
    }
    char s[700];
    if (warp) {
        unsigned width = warp->w.width, base = warp->linear / width * width;
        const fiber *missing = NULL;
        for (unsigned j = 0; j < width && !missing; j++)
            if (named(warp->w, j) && l->fibers[base + j].state != FIBER_WARP)
                missing = &l->fibers[base + j];
        if (missing) {
            snprintf(s, sizeof s, "%s waits at a %s operation (line %d, mask 0x%08x) that %s %u "
                     "never reaches: it %s%s", thread_name(l, warp).c_str(),
                     width > 32 ? "warpgroup" : "warp-synchronous", warp->w.line, warp->w.mask,
                     width > 32 ? "thread of the warpgroup" : "lane", missing->linear % width,
                     what_waits(*missing),
                     missing->state == FIBER_BARRIER ? " (a barrier inside divergent warp code?)"
                                                     : "");
            return s;
        }
    }
    if (bar && done) {
        snprintf(s, sizeof s, "divergent __syncthreads: %s waits at the barrier on line %d, "
                 "but %s has exited without reaching it (every thread of a block must reach "
                 "every barrier)", thread_name(l, bar).c_str(), bar->line,
                 thread_name(l, done).c_str());
        return s;
    }
    if (bar && warp) {
        snprintf(s, sizeof s, "%s waits at __syncthreads (line %d) while %s waits at a "
                 "warp-synchronous operation (line %d)", thread_name(l, bar).c_str(), bar->line,
                 thread_name(l, warp).c_str(), warp->w.line);
        return s;
    }
    snprintf(s, sizeof s, "the block cannot go on: %s %s", warp ? thread_name(l, warp).c_str()
             : "a thread", warp ? what_waits(*warp) : "is stuck");
    return s;
}

/* Runs block `b` (its linear index) to the end; false on an error (in l->error). */
static bool run_block(launch *l, unsigned long long b) {
    sn_dim3 bid = {(unsigned)(b % l->grid[0]), (unsigned)(b / l->grid[0] % l->grid[1]),
                   (unsigned)(b / l->grid[0] / l->grid[1])};
    memset(l->shared, 0x7f, l->static_bytes); /* the poison: a large finite float, not NaN */
    memset(l->shared + l->shared_cap - l->dynamic_bytes, 0x7f, l->dynamic_bytes);
    for (unsigned t = 0; t < l->nthreads; t++) {
        fiber &f = l->fibers[t];
        f.started = false;
        f.state = FIBER_READY;
        f.copies.clear();
        f.groups_committed = 0;
        f.wgmmas.clear();
        f.wgmma_groups = 0;
        f.wgmma_fenced = false;
        f.proxy_dirty = false;
        f.linear = t;
        f.coords.blockIdx = bid;
        f.coords.threadIdx = sn_dim3{t % l->block[0], t / l->block[0] % l->block[1],
                                     t / l->block[0] / l->block[1]};
        f.coords.blockDim = sn_dim3{l->block[0], l->block[1], l->block[2]};
        f.coords.gridDim = sn_dim3{l->grid[0], l->grid[1], l->grid[2]};
    }
    set_order(l, l->order, l->nthreads);
    l->pos.resize(l->nthreads);
    for (unsigned i = 0; i < l->nthreads; i++) l->pos[l->order[i]] = i;
    /* Always the first ready thread in the order: a warp runs ahead as far as it can, to the
     * next barrier, which is what exposes a missing one (forward and reverse order each run a
     * different warp ahead). */
    l->hint = 0;
    for (;;) {
        unsigned i = l->hint;
        while (i < l->nthreads && l->fibers[l->order[i]].state != FIBER_READY) i++;
        if (i < l->nthreads) {
            fiber &f = l->fibers[l->order[i]];
            l->hint = i;
            l->running = &f;
            if (!f.started) {
                f.started = true;
                sim_ctx_make(&f.ctx, f.stack, l->o.stack_bytes, fiber_main);
            }
            sim_ctx_switch(&l->sched, &f.ctx);
            l->running = NULL;
            if (!l->error.empty()) return false;
            continue;
        }
        unsigned done = 0, bar = 0;
        int line = -1;
        const fiber *other = NULL, *first = NULL;
        for (const fiber &f : l->fibers) {
            done += f.state == FIBER_DONE;
            if (f.state != FIBER_BARRIER) continue;
            bar++;
            if (!first) first = &f, line = f.line;
            else if (f.line != line && !other) other = &f;
        }
        if (done == l->nthreads) return true;
        if (bar == l->nthreads) {
            if (other) {
                record(l, std::string(l->kernel) + ": divergent __syncthreads: " +
                       thread_name(l, first) + " waits at the barrier on line " +
                       std::to_string(first->line) + ", " + thread_name(l, other) +
                       " at the one on line " + std::to_string(other->line));
                return false;
            }
            l->barrier_count = 0;
            for (fiber &f : l->fibers) f.state = FIBER_READY, l->barrier_count += f.pred;
            if (l->prof) sim_profile_collective(l, 0); /* kind 0: a block barrier */
            l->hint = 0;
            continue;
        }
        record(l, std::string(l->kernel) + ": " + stall_reason(l));
        return false;
    }
}

/* Fiber stacks, kept from launch to launch on each OS thread (mapping and faulting them in is
 * most of a small launch's cost). Each has a guard page below it: an overflow faults instead of
 * corrupting its neighbour. */
struct stack_pool {
    char *mem = NULL;
    size_t stride = 0, map = 0;
    unsigned count = 0;
    ~stack_pool() {
        if (mem) sim_stacks_forget(mem, map), munmap(mem, map);
    }
};
static thread_local stack_pool pool;

static char *fiber_stacks(size_t bytes, unsigned n, size_t *stride) {
    const size_t page = 4096;
    *stride = (bytes + page - 1) / page * page + page;
    if (pool.mem && pool.stride == *stride && pool.count >= n) return pool.mem;
    if (pool.mem) sim_stacks_forget(pool.mem, pool.map), munmap(pool.mem, pool.map);
    pool.mem = NULL;
    size_t map = *stride * n;
    void *mem = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (mem == MAP_FAILED) return NULL;
    for (unsigned t = 0; t < n; t++) mprotect((char *)mem + (size_t)t * *stride, page, PROT_NONE);
    pool.mem = (char *)mem;
    pool.stride = *stride;
    pool.map = map;
    pool.count = n;
    return pool.mem;
}

/* A fiber that overflows its stack faults on a guard page, and a kernel's access not aligned to
 * its type traps (sim_module.cc: -fsanitize=alignment): say which before the process dies. The
 * handlers run on their own stack and are installed only for the duration of a launch. */
static thread_local char signal_stack[32 * 1024];
static thread_local struct sigaction old_segv, old_ill;

static void on_ill(int sig, siginfo_t *info, void *uctx) {
    (void)info, (void)uctx;
    char msg[320];
    int n = snprintf(msg, sizeof msg, "sinter sim: %s: a load or store at an address that is not a "
                     "multiple of its size (a float4 not 16-byte aligned, a float2 not 8): a GPU "
                     "faults with \"misaligned address\" there\n", current ? current->kernel : "a kernel");
    if (n > 0 && write(2, msg, (size_t)n) < 0) n = 0;
    sigaction(sig, &old_ill, NULL); /* the trap repeats and goes where it would have */
}

static void on_segv(int sig, siginfo_t *info, void *uctx) {
    const char *a = (const char *)info->si_addr;
    if (pool.mem && a >= pool.mem && a < pool.mem + pool.map &&
        (size_t)(a - pool.mem) % pool.stride < 4096) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "sinter sim: %s: a thread's fiber stack overflowed "
                         "(%zu bytes): raise sn_sim_opts.stack_bytes\n",
                         current ? current->kernel : "a kernel", pool.stride - 4096);
        if (n > 0 && write(2, msg, (size_t)n) < 0) n = 0;
    }
    sigaction(sig, &old_segv, NULL); /* the fault repeats and goes where it would have */
}

struct segv_guard {
    stack_t old_stack;
    segv_guard() {
        stack_t st = {};
        st.ss_sp = signal_stack;
        st.ss_size = sizeof signal_stack;
        sigaltstack(&st, &old_stack);
        struct sigaction sa = {};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &old_segv);
        sa.sa_sigaction = on_ill;
        sigaction(SIGILL, &sa, &old_ill);
    }
    ~segv_guard() {
        sigaction(SIGILL, &old_ill, NULL);
        sigaction(SIGSEGV, &old_segv, NULL);
        sigaltstack(&old_stack, NULL);
    }
};

sn_sim_opts sn_sim_defaults(void) {
    sn_sim_opts o = {};
    o.order = SN_SIM_FORWARD;
    o.seed = 1;
    o.shared_limit = 48 * 1024;
    o.stack_bytes = 64 * 1024;
    return o;
}

sn_status sn_sim_launch(sn_sim_module *m, const char *kernel, const unsigned grid[3],
                        const unsigned block[3], unsigned dynamic_shared_bytes, void **params,
                        const sn_sim_opts *opts, sn_err *e) {
    SN_ASSERT(m && kernel);
    char stub_name[256];
    snprintf(stub_name, sizeof stub_name, "%s_host", kernel);
    void (*stub)(void **);
    *(void **)&stub = sim_module_symbol(m, stub_name);
    if (!stub)
        return sn_fail(e, SN_ERR_INVALID, "sn_sim_launch: the module has no kernel %s (does its "
                       "text end in SN_HOST_STUB(%s)?)", kernel, kernel);
    sn_sim_opts o = opts ? *opts : sn_sim_defaults();
    unsigned long long nthreads = (unsigned long long)block[0] * block[1] * block[2];
    unsigned long long nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
    if (nthreads == 0 || nthreads > 1024 || block[2] > 64 || nblocks == 0 || grid[1] > 65535 ||
        grid[2] > 65535)
        return sn_fail(e, SN_ERR_INVALID, "%s: launch of grid (%u,%u,%u) x block (%u,%u,%u): a "
                       "block has 1 to 1024 threads (z at most 64), grid y and z at most 65535",
                       kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    if (o.profile && !m->profiled)
        return sn_fail(e, SN_ERR_INVALID, "%s: a profiled launch (sn_sim_opts.profile) needs the "
                       "module loaded by sn_sim_module_load_profiled", kernel);
    if (dynamic_shared_bytes > o.shared_limit)
        return sn_fail(e, SN_ERR_INVALID, "%s: %u bytes of dynamic shared memory, more than the "
                       "%u allowed", kernel, dynamic_shared_bytes, o.shared_limit);
    SN_ASSERT(!current); /* one launch at a time per OS thread */
    launch l;
    l.m = m;
    l.stub = stub;
    l.params = params;
    l.o = o;
    memcpy(l.grid, grid, sizeof l.grid);
    memcpy(l.block, block, sizeof l.block);
    l.nthreads = (unsigned)nthreads;
    l.running = NULL;
    l.kernel = kernel;
    l.rng = o.seed;
    l.barrier_count = 0;
    l.shared_cap = ((size_t)o.shared_limit + 15) / 16 * 16;
    l.static_bytes = 0;
    l.dynamic_bytes = (dynamic_shared_bytes + 15u) / 16u * 16u;
    l.shared = (unsigned char *)aligned_alloc(128, (l.shared_cap + 127) / 128 * 128 + 128);
    char *stacks = fiber_stacks(o.stack_bytes, l.nthreads, &l.stack_stride);
    if (!stacks || !l.shared) {
        free(l.shared);
        return sn_fail(e, SN_ERR_OOM, "%s: no memory for %u fiber stacks", kernel, l.nthreads);
    }
    l.fibers.resize(l.nthreads);
    for (unsigned t = 0; t < l.nthreads; t++)
        l.fibers[t].stack = stacks + (size_t)t * l.stack_stride + 4096;
    l.stacks_lo = stacks;
    l.stacks_hi = stacks + (size_t)l.nthreads * l.stack_stride;
    l.prof = NULL;
    if (o.profile && !sim_profile_begin(&l)) {
        free(l.shared);
        return sn_fail(e, SN_ERR_OOM, "%s: no memory for the profile's records", kernel);
    }
    current = &l;
    segv_guard guard;
    std::vector<unsigned long long> blocks(nblocks);
    for (unsigned long long b = 0; b < nblocks; b++)
        blocks[b] = o.order == SN_SIM_REVERSE ? nblocks - 1 - b : b;
    if (o.order == SN_SIM_SHUFFLED)
        for (unsigned long long i = nblocks; i > 1; i--)
            std::swap(blocks[i - 1], blocks[next_random(&l.rng) % i]);
    bool ok = true;
    for (unsigned long long b : blocks) {
        if (!(ok = run_block(&l, b))) break;
        if (l.prof) sim_profile_block(&l);
    }
    if (l.prof) sim_profile_end(&l, ok);
    current = NULL;
    free(l.shared);
    if (!ok) return sn_fail(e, SN_ERR_DEVICE, "%s", l.error.c_str());
    return SN_OK;
}

static const char *order_name(int o) {
    return o == SN_SIM_FORWARD ? "forward" : o == SN_SIM_REVERSE ? "reverse" : "shuffled";
}

sn_status sn_sim_launch_orders(sn_sim_module *m, const char *kernel, const unsigned grid[3],
                               const unsigned block[3], unsigned dynamic_shared_bytes,
                               void **params, const sn_sim_buf *outs, int n_outs,
                               const sn_sim_opts *opts, sn_err *e) {
    sn_sim_opts o = opts ? *opts : sn_sim_defaults();
    std::vector<std::vector<unsigned char>> before(n_outs), first(n_outs);
    for (int i = 0; i < n_outs; i++)
        before[i].assign((unsigned char *)outs[i].ptr,
                         (unsigned char *)outs[i].ptr + outs[i].bytes);
    for (int order = SN_SIM_ORDER_COUNT - 1; order >= 0; order--) { /* forward last */
        for (int i = 0; i < n_outs; i++) memcpy(outs[i].ptr, before[i].data(), outs[i].bytes);
        o.order = (sn_sim_order)order;
        sn_status st = sn_sim_launch(m, kernel, grid, block, dynamic_shared_bytes, params, &o, e);
        if (st != SN_OK) return st;
        for (int i = 0; i < n_outs; i++) {
            const unsigned char *p = (const unsigned char *)outs[i].ptr;
            if (order == SN_SIM_ORDER_COUNT - 1) {
                first[i].assign(p, p + outs[i].bytes);
                continue;
            }
            for (size_t b = 0; b < outs[i].bytes; b++)
                if (p[b] != first[i][b])
                    return sn_fail(e, SN_ERR_NUMERIC, "%s: output %d differs at byte %zu between "
                                   "the %s and the %s thread order (a race between threads: a "
                                   "missing __syncthreads or __syncwarp?)", kernel, i, b,
                                   order_name(order), order_name(SN_SIM_ORDER_COUNT - 1));
        }
    }
    return SN_OK;
}
