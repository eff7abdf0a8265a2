/* pool.h: a fixed pool of worker threads that split a range of work items. Convention: the
 * calling thread takes part (as worker 0), so a pool of n threads starts n-1 of them. */
#ifndef SN_POOL_H
#define SN_POOL_H

#include <stdint.h>

typedef struct sn_pool sn_pool;
typedef void (*sn_pool_fn)(void *ctx, int64_t begin, int64_t end);

/* threads <= 0: one per CPU this process may run on (support/cores.h sn_cores). NULL when out
 * of memory for the pool (it runs with fewer threads when some cannot be started). */
sn_pool *sn_pool_new(int threads);
void sn_pool_free(sn_pool *p);
int sn_pool_threads(const sn_pool *p);
/* Calls fn on contiguous, near-equal parts of [0, n), one a thread: part t is [n t / T,
 * n (t + 1) / T) of T = sn_pool_threads, run by whichever thread claims it first (the caller
 * too: one worker held off its core costs the caller that part, not a wait). Returns when all
 * are done. Not reentrant: one sn_pool_run at a time per pool. */
void sn_pool_run(sn_pool *p, int64_t n, sn_pool_fn fn, void *ctx);

#endif
