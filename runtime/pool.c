/* pool.c: the thread pool of pool.h. A job is published by bumping a generation counter (under
 * the mutex, so a worker about to sleep cannot miss it); workers spin briefly for the next job
 * before sleeping on a condition variable. The job's parts are claimed one at a time from a
 * counter by whichever thread comes first, the caller too, so a worker that another process
 * holds off its core (a shared machine) costs the caller the parts it did not claim, not a
 * scheduler's time slice (0.3-0.9 ms measured); the caller then spins (yielding) only for the
 * parts the others claimed. A part is the same range whoever runs it. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "ir/ir.h"
#include "support/cores.h"

enum { SPIN = 20000 }; /* polls before a worker sleeps: tens of microseconds */

struct sn_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    _Atomic uint64_t generation;
    _Atomic int64_t next;  /* the current job's next part to claim (>= n: none left) */
    _Atomic int finished;  /* the current job's parts the workers finished */
    _Atomic bool stop;
    /* the current job: written before the generation is bumped */
    sn_pool_fn fn;
    void *ctx;
    int64_t items;
};

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void part(const sn_pool *p, int i, int64_t *b, int64_t *e) {
    *b = p->items * i / p->n;
    *e = p->items * (i + 1) / p->n;
}

/* Waits until the generation differs from seen (or stop); returns the new one. */
static uint64_t next_job(sn_pool *p, uint64_t seen) {
    for (int i = 0; i < SPIN; i++) {
        if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen || atomic_load(&p->stop))
            return atomic_load_explicit(&p->generation, memory_order_acquire);
        relax();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return atomic_load_explicit(&p->generation, memory_order_acquire);
}

static void *worker(void *arg) {
    sn_pool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        seen = next_job(p, seen);
        if (atomic_load(&p->stop)) break;
        /* a claim of the job published after `seen` is as good: its caller counts it; a claim
           past the last part (the job done, or taken by the others) runs nothing */
        for (int64_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) {
            int64_t b, e;
            part(p, (int)i, &b, &e);
            if (b < e) p->fn(p->ctx, b, e);
            atomic_fetch_add(&p->finished, 1);
        }
    }
    return NULL;
}

sn_pool *sn_pool_new(int threads) {
    if (threads <= 0) threads = sn_cores();
    sn_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)threads, sizeof *p->threads))) {
        free(p);
        return NULL;
    }
    p->n = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    /* The workers take no asynchronous signal (they start with them blocked): a handler's frame
     * pushed while a worker runs oneDNN's JIT sgemm, whose rsp points into a heap workspace,
     * would land on the heap (cli/stop_signals.h). The faults a worker causes itself stay. */
    sigset_t async, old;
    sigfillset(&async);
    static const int own[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) sigdelset(&async, own[i]);
    pthread_sigmask(SIG_BLOCK, &async, &old);
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p)) {
            p->n = i; /* run with the threads that started */
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p;
}

void sn_pool_free(sn_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}

int sn_pool_threads(const sn_pool *p) { return p->n; }

void sn_pool_run(sn_pool *p, int64_t n, sn_pool_fn fn, void *ctx) {
    if (p->n == 1 || n <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->items = n;
    /* the job's fields before the claims open (a late worker's claim of the last job, past
       its parts, may land before or after: it runs nothing) */
    atomic_store(&p->finished, 0);
    atomic_store(&p->next, 0);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    int mine = 0;
    for (int64_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n; mine++) {
        int64_t b, e;
        part(p, (int)i, &b, &e);
        if (b < e) fn(ctx, b, e);
    }
    for (int i = 0; atomic_load(&p->finished) < p->n - mine; i++) {
        if (i < SPIN) relax();
        else sched_yield(); /* a worker was descheduled inside its part: let it run */
    }
}
