/* pool_bench.c: what a kernel launch through the CPU device's thread pool costs (runtime/pool.h)
 * beside the work itself: an empty job of one part a thread, and a LoRA adapter's products at
 * batch 1 (x (1, K) @ A (K, r), then (1, r) @ B (r, N) in the column parts the device gives
 * them: runtime/gemm.h) on the calling thread alone and through the pool, timed in turn in one
 * run (blocks of --calls, the mean call of each block, the median block). On a machine whose
 * other cores run other processes the pool's cost is theirs to decide: the load goes beside
 * the numbers. Not a test: numbers for docs/generate.md.
 *
 *     bench/pool_bench [--threads N] [--blocks N] [--calls N] [--k 768] [--n 3072] [--r 8] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gemm.h"
#include "runtime/pool.h"
#include "support/clock.h"
#include "bench_json.h"

#define USAGE "usage: pool_bench [--threads N] [--blocks N] [--calls N] [--k K] [--n N] [--r R]"

typedef struct {
    int64_t K, N, r;
    const float *x, *a, *b; /* (1, K), (K, r), (r, N) */
    float *h, *y;           /* (1, r), (1, N) */
    int parts;
} adapter;

static void nothing(void *ctx, int64_t b, int64_t e) { (void)ctx, (void)b, (void)e; }

/* Parts [b, e) of the adapter's two products, as the CPU device splits them: x @ A's one row
 * (8 columns: a single part computes it), then h @ B's columns in multiples of 16. */
static void x_at_a(void *ctx, int64_t b, int64_t e) {
    adapter *p = ctx;
    sn_err err;
    sn_gemm_thread_init();
    for (int64_t i = b; i < e; i++)
        if (i == p->parts - 1) sn_gemm_f32(false, false, 1, p->r, p->K, p->x, p->K, p->a, p->r, 0, p->h, p->r, &err);
}

static void h_at_b(void *ctx, int64_t b, int64_t e) {
    adapter *p = ctx;
    sn_err err;
    sn_gemm_thread_init();
    int64_t cols = (p->N + 15) / 16;
    for (int64_t i = b; i < e; i++) {
        int64_t c0 = cols * i / p->parts * 16, c1 = cols * (i + 1) / p->parts * 16;
        if (c1 > p->N) c1 = p->N;
        if (c0 < c1) sn_gemm_f32(false, false, 1, c1 - c0, p->r, p->h, p->r, p->b + c0, p->N, 0, p->y + c0, p->N, &err);
    }
}

typedef enum { EMPTY_POOL, ADAPTER_CALLER, ADAPTER_POOL, WAYS } way;
static const char *const way_names[WAYS] = {"empty job, pool", "adapter, calling thread", "adapter, pool"};

static double block(way w, sn_pool *pool, adapter *p, int calls) {
    double t0 = sn_clock_s();
    for (int i = 0; i < calls; i++) {
        if (w == EMPTY_POOL) sn_pool_run(pool, p->parts, nothing, NULL);
        else if (w == ADAPTER_CALLER) {
            x_at_a(p, 0, p->parts);
            h_at_b(p, 0, p->parts);
        } else {
            sn_pool_run(pool, p->parts, x_at_a, p);
            sn_pool_run(pool, p->parts, h_at_b, p);
        }
    }
    return (sn_clock_s() - t0) / calls;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long num(const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "%s\n", USAGE);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    int threads = 0, blocks = 21, calls = 500;
    adapter p = {.K = 768, .N = 3072, .r = 8};
    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(o, "--threads")) threads = (int)num(v, 0, 1024);
        else if (!strcmp(o, "--blocks")) blocks = (int)num(v, 1, 1001);
        else if (!strcmp(o, "--calls")) calls = (int)num(v, 1, 1000000);
        else if (!strcmp(o, "--k")) p.K = num(v, 1, 1 << 16);
        else if (!strcmp(o, "--n")) p.N = num(v, 1, 1 << 16);
        else if (!strcmp(o, "--r")) p.r = num(v, 1, 1024);
        else num("", 1, 0); /* the usage */
    }
    sn_pool *pool = sn_pool_new(threads);
    float *buf = calloc((size_t)(p.K + p.K * p.r + p.r * p.N + p.r + p.N), sizeof(float));
    if (!pool || !buf) {
        fprintf(stderr, "pool_bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < p.K + p.K * p.r + p.r * p.N; i++) buf[i] = (float)(i % 7) * 0.01f;
    p.x = buf, p.a = buf + p.K, p.b = buf + p.K + p.K * p.r;
    p.h = buf + p.K + p.K * p.r + p.r * p.N, p.y = p.h + p.r;
    p.parts = sn_pool_threads(pool);
    double *t[WAYS];
    for (int w = 0; w < WAYS; w++)
        if (!(t[w] = malloc(sizeof(double) * (size_t)blocks))) return 1;
    for (int k = 0; k < blocks; k++) /* in turn, the order rotated every block */
        for (int j = 0; j < WAYS; j++) {
            way w = (way)((j + k) % WAYS);
            t[w][k] = block(w, pool, &p, calls);
        }
    printf("%d threads, x (1, %lld) @ A (%lld, %lld), then @ B (%lld, %lld); %d blocks of %d calls "
           "in turn, the median block's mean call:\n", p.parts, (long long)p.K, (long long)p.K,
           (long long)p.r, (long long)p.r, (long long)p.N, blocks, calls);
    for (int w = 0; w < WAYS; w++) {
        qsort(t[w], (size_t)blocks, sizeof(double), by_value);
        double med = t[w][blocks / 2], lo = t[w][0], hi = t[w][blocks - 1];
        bj *rec = bj_new();
        bj_str(rec, "bench", "pool");
        bj_str(rec, "way", way_names[w]);
        bj_int(rec, "threads", p.parts);
        bj_num(rec, "median_us", "%.3f", 1e6 * med);
        bj_num(rec, "min_us", "%.3f", 1e6 * lo);
        bj_num(rec, "max_us", "%.3f", 1e6 * hi);
        bj_print(rec, stdout);
        printf("  %-24s %9.3f us (blocks from %.3f to %.3f)\n", way_names[w], 1e6 * med, 1e6 * lo, 1e6 * hi);
    }
    for (int w = 0; w < WAYS; w++) free(t[w]);
    free(buf);
    sn_pool_free(pool);
    return 0;
}
