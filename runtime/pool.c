/* pool.c: the thread pool of pool.h: workers sleep on a condition variable between jobs; a
 * job is published with a generation counter and finished when the pending count hits zero. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "../ir/ir.h"

struct sn_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;
    int pending;
    bool stop;
    /* the current job */
    sn_pool_fn fn;
    void *ctx;
    int64_t items;
};

typedef struct {
    sn_pool *p;
    int index;
} worker_arg;

static void part(const sn_pool *p, int i, int64_t *b, int64_t *e) {
    *b = p->items * i / p->n;
    *e = p->items * (i + 1) / p->n;
}

static void *worker(void *arg) {
    worker_arg *w = arg;
    sn_pool *p = w->p;
    int me = w->index;
    free(w);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        int64_t b, e;
        part(p, me, &b, &e);
        if (b < e) p->fn(p->ctx, b, e);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

sn_pool *sn_pool_new(int threads) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0) threads = 1;
    sn_pool *p = calloc(1, sizeof *p);
    SN_ASSERT(p);
    p->n = threads;
    p->threads = calloc((size_t)threads, sizeof *p->threads);
    SN_ASSERT(p->threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 1; i < threads; i++) {
        worker_arg *w = malloc(sizeof *w);
        SN_ASSERT(w);
        *w = (worker_arg){p, i};
        if (pthread_create(&p->threads[i], NULL, worker, w)) {
            free(w);
            p->n = i; /* run with the threads that started */
            break;
        }
    }
    return p;
}

void sn_pool_free(sn_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int sn_pool_threads(const sn_pool *p) { return p->n; }

void sn_pool_run(sn_pool *p, int64_t n, sn_pool_fn fn, void *ctx) {
    if (p->n == 1 || n <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->items = n;
    p->pending = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    int64_t b, e;
    part(p, 0, &b, &e);
    if (b < e) fn(ctx, b, e);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
