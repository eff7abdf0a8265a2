/* test_pool.c: the CPU device's thread pool (runtime/pool.h): every item of a job runs once,
 * in the same parts whoever runs them (the kernels' bits do not depend on the thread), every
 * part done when sn_pool_run returns, and a part the workers have not claimed is run by the
 * caller, which does not wait for a sleeping worker. Convention: parts are recorded by their
 * first item, in a table the job owns. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/pool.h"
#include "support/cores.h"
#include "harness.h"

enum { MAX_ITEMS = 1000, MAX_THREADS = 5 };

typedef struct {
    _Atomic int count[MAX_ITEMS]; /* runs of each item */
    _Atomic int64_t end_of[MAX_ITEMS + 1]; /* a part's end, by its first item (0: no part) */
    _Atomic int parts;
    pthread_t ran_by[MAX_ITEMS]; /* the thread that ran each item */
    int slow;                    /* every part whose first item is odd spins this long */
} job;

static void run_part(void *ctx, int64_t b, int64_t e) {
    job *j = ctx;
    for (volatile int i = 0; b % 2 && i < j->slow; i++) {}
    atomic_store(&j->end_of[b], e);
    atomic_fetch_add(&j->parts, 1);
    for (int64_t i = b; i < e; i++) {
        atomic_fetch_add(&j->count[i], 1);
        j->ran_by[i] = pthread_self();
    }
}

/* n items over every thread count from 1 to MAX_THREADS, 300 jobs each back to back (the
 * workers between spinning and claiming): each item once, the parts the near-equal split
 * [n t / T, n (t + 1) / T) of pool.h, all done at return. A part run twice, skipped, or still
 * running at return fails; so does a split that depends on who claims. */
START_TEST(every_item_once_in_the_same_parts) {
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 64, MAX_ITEMS};
    job *j = malloc(sizeof *j);
    ck_assert(j);
    for (int threads = 1; threads <= MAX_THREADS; threads++) {
        sn_pool *p = sn_pool_new(threads);
        ck_assert(p && sn_pool_threads(p) == threads);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int rep = 0; rep < 300; rep++) {
                int64_t n = sizes[s];
                memset(j, 0, sizeof *j);
                j->slow = rep % 3 ? 0 : 2000;
                sn_pool_run(p, n, run_part, j);
                for (int64_t i = 0; i < n; i++)
                    ck_assert_msg(atomic_load(&j->count[i]) == 1, "%d threads, %lld items: item "
                                  "%lld ran %d times", threads, (long long)n, (long long)i,
                                  atomic_load(&j->count[i]));
                int expect = 0;
                for (int t = 0; t < threads; t++) { /* pool.h's split, empty parts not run */
                    int64_t b = n * t / threads, e = n * (t + 1) / threads;
                    if (b == e) continue;
                    expect++;
                    ck_assert_msg(atomic_load(&j->end_of[b]) == e, "%d threads, %lld items: the "
                                  "part from %lld ends at %lld, not %lld", threads, (long long)n,
                                  (long long)b, (long long)atomic_load(&j->end_of[b]), (long long)e);
                }
                ck_assert_int_eq(atomic_load(&j->parts), expect);
            }
        sn_pool_free(p);
    }
    free(j);
}
END_TEST

/* A worker asleep (the pool idle for 50 ms: past its spin, on the condition variable) takes
 * tens of microseconds to wake; the caller, done with its own part in less, claims the other
 * part and runs it itself. A pool whose worker must run its own part (the caller waiting for
 * it, as it would wait a scheduler's time slice for a worker another process holds off its
 * core) never does: caught. Tried up to 20 times, as the wake's speed is the kernel's. */
START_TEST(caller_runs_the_parts_not_claimed) {
    job *j = malloc(sizeof *j);
    sn_pool *p = sn_pool_new(2);
    ck_assert(j && p && sn_pool_threads(p) == 2);
    int by_caller = 0;
    for (int attempt = 0; attempt < 20 && !by_caller; attempt++) {
        usleep(50 * 1000);
        memset(j, 0, sizeof *j);
        sn_pool_run(p, 2, run_part, j);
        ck_assert(atomic_load(&j->count[0]) == 1 && atomic_load(&j->count[1]) == 1);
        by_caller += pthread_equal(j->ran_by[1], pthread_self()) != 0;
    }
    ck_assert_msg(by_caller, "the worker's part ran on the worker in 20 jobs after the pool "
                  "slept: the caller waited for a sleeping worker instead of claiming it");
    sn_pool_free(p);
    free(j);
}
END_TEST

/* A pool of the default size has a thread for each CPU this process may run on: its affinity
 * mask's, not the machine's (a container's cpuset, taskset); narrowed to one CPU, one. */
START_TEST(default_size_is_the_affinity) {
    cpu_set_t all, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof all, &all), 0);
    sn_pool *p = sn_pool_new(0);
    ck_assert_int_eq(sn_pool_threads(p), CPU_COUNT(&all));
    sn_pool_free(p);
    int first = 0;
    while (!CPU_ISSET(first, &all)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(sn_cores(), 1);
    p = sn_pool_new(0);
    ck_assert_int_eq(sn_pool_threads(p), 1);
    sn_pool_free(p);
    ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_item_once_in_the_same_parts);
    tcase_add_test(tc, caller_runs_the_parts_not_claimed);
    tcase_add_test(tc, default_size_is_the_affinity);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
