/* offload_bench.c: the offloaded optimizer's host AdamW (train/offload.c) in GB/s against this
 * machine's memory bandwidth, measured in the same run by a STREAM-like copy and triad on the
 * same arrays and threads (sinter's pool), for 1..N threads; and against the scalar one-thread
 * loop it replaced (the baseline, here). One JSON record per thread count (bench_json.h), with
 * the CPU's name from /proc/cpuinfo.
 * Convention: bytes are what each element's arithmetic must read and write (AdamW: p, m, v, g
 * read, p, m, v written, 28 bytes, + 2 with the bf16 shadow; copy 8, triad 12), as STREAM counts
 * them (write-allocate traffic not counted: a triad moves 16 bytes where it counts 12, so
 * "update", a += s b in place as AdamW writes, is the fairer bandwidth); each figure is the
 * best of --reps runs. The ratio is AdamW's GB/s over the better of triad's and update's.
 *
 *     offload_bench [--n ELEMENTS] [--threads MAX] [--reps R] [--shadow]
 *
 * --n defaults to gpt2's trained range (124475904 f32 elements: 124.4M parameters, the
 * vocabulary padded to 50304). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_json.h"
#include "program/kernel.h"
#include "runtime/pool.h"
#include "support/clock.h"
#include "train/offload.h"

typedef struct {
    float *a, *b, *c;
    float s;
} stream_job;

static void copy_part(void *ctx, int64_t lo, int64_t hi) {
    stream_job *j = ctx;
    memcpy(j->a + lo, j->b + lo, 4 * (size_t)(hi - lo));
}

static void triad_part(void *ctx, int64_t lo, int64_t hi) {
    stream_job *j = ctx;
    float *restrict a = j->a, s = j->s;
    const float *restrict b = j->b, *restrict c = j->c;
    for (int64_t i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
}

/* in place, as AdamW writes: a += s b (12 bytes, and no write-allocate traffic beyond them) */
static void update_part(void *ctx, int64_t lo, int64_t hi) {
    stream_job *j = ctx;
    float *restrict a = j->a, s = j->s;
    const float *restrict b = j->b;
    for (int64_t i = lo; i < hi; i++) a[i] = a[i] + s * b[i];
}

/* The scalar, one-thread loop offload.c had before threads and vectors. */
static void scalar_adamw(const float *h, float *p, float *m, float *v, const float *g, int64_t n) {
    float b1 = h[SN_OPT_BETA1], b2 = h[SN_OPT_BETA2], c1 = 1.0f - b1, c2 = 1.0f - b2;
    float inv = h[SN_OPT_INV_MICRO], scale = h[SN_OPT_SCALE], bc1 = h[SN_OPT_BC1];
    float bc2 = h[SN_OPT_BC2], eps = h[SN_OPT_EPS], lr = h[SN_OPT_LR], wd = h[SN_OPT_WD];
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * inv;
        gi = gi * scale;
        float mi = b1 * m[i] + c1 * gi, vi = b2 * v[i] + c2 * (gi * gi);
        float den = sqrtf(vi / bc2) + eps;
        p[i] = p[i] - lr * (mi / bc1 / den + wd * p[i]);
        m[i] = mi;
        v[i] = vi;
    }
}

static double best(double t, double *b) { return *b = t < *b ? t : *b; }

/* /proc/cpuinfo's first "model name" (the CPU the numbers are from), or "unknown". */
static void cpu_name(char *out, size_t len) {
    snprintf(out, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = 0;
        snprintf(out, len, "%s", colon);
        break;
    }
    if (f) fclose(f);
}

int main(int argc, char **argv) {
    int64_t n = 124475904;
    int max_threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5;
    bool shadow = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shadow")) shadow = true;
        else {
            fprintf(stderr, "usage: offload_bench [--n ELEMENTS] [--threads MAX] [--reps R] "
                            "[--shadow]\n");
            return 2;
        }
    }
    if (n < 1 || max_threads < 1 || reps < 1) {
        fprintf(stderr, "offload_bench: --n, --threads and --reps must be positive\n");
        return 2;
    }
    size_t bytes = 4 * (size_t)n;
    float *p = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes), *g = malloc(bytes);
    uint16_t *low = shadow ? malloc(2 * (size_t)n) : NULL;
    if (!p || !m || !v || !g || (shadow && !low)) {
        fprintf(stderr, "offload_bench: out of memory for 4 arrays of %lld floats: use a smaller "
                        "--n\n", (long long)n);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) /* touched, so no first-touch page fault is timed */
        p[i] = 0.01f * (float)(i % 97), m[i] = 0, v[i] = 0, g[i] = 1e-3f * (float)(i % 13 - 6);
    /* the stream kernels scale m and v by tiny s: still finite, still near zero for AdamW */
    if (low) memset(low, 0, 2 * (size_t)n);
    float h[SN_OPT_SCALARS] = {0};
    h[SN_OPT_LR] = 6e-4f, h[SN_OPT_BETA1] = 0.9f, h[SN_OPT_BETA2] = 0.95f, h[SN_OPT_EPS] = 1e-8f;
    h[SN_OPT_WD] = 0.1f, h[SN_OPT_BC1] = 0.1f, h[SN_OPT_BC2] = 0.05f, h[SN_OPT_SCALE] = 1;
    h[SN_OPT_INV_MICRO] = 1;
    double per = 28 + (shadow ? 2 : 0), gb = 1e-9 * (double)n;
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    double scalar_s = 1e30;
    for (int r = 0; r < (reps < 3 ? reps : 3); r++) {
        double t0 = sn_clock_s();
        scalar_adamw(h, p, m, v, g, n);
        best(sn_clock_s() - t0, &scalar_s);
    }
    for (int t = 1; t <= max_threads; t++) {
        sn_pool *pool = sn_pool_new(t);
        if (!pool) {
            fprintf(stderr, "offload_bench: cannot start %d threads\n", t);
            return 1;
        }
        stream_job sj = {m, v, g, 1e-3f};
        double copy_s = 1e30, triad_s = 1e30, update_s = 1e30, adamw_s = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = sn_clock_s();
            sn_pool_run(pool, n, copy_part, &sj);
            double t1 = sn_clock_s();
            sn_pool_run(pool, n, triad_part, &sj);
            double t2 = sn_clock_s();
            sn_pool_run(pool, n, update_part, &sj);
            double t3 = sn_clock_s();
            sn_offload_adamw(pool, h, p, m, v, g, low, shadow ? SN_BF16 : SN_F32, n, n / 2);
            double t4 = sn_clock_s();
            best(t1 - t0, &copy_s), best(t2 - t1, &triad_s), best(t3 - t2, &update_s);
            best(t4 - t3, &adamw_s);
        }
        sn_pool_free(pool);
        bj *o = bj_new();
        bj_str(o, "bench", "offload_adamw");
        bj_str(o, "cpu", cpu);
        bj_int(o, "n", n);
        bj_int(o, "threads", t);
        bj_bool(o, "bf16_shadow", shadow);
        bj_num(o, "adamw_ms", "%.2f", 1e3 * adamw_s);
        bj_num(o, "adamw_gbs", "%.2f", per * gb / adamw_s);
        bj_num(o, "copy_gbs", "%.2f", 8 * gb / copy_s);
        bj_num(o, "triad_gbs", "%.2f", 12 * gb / triad_s);
        bj_num(o, "update_gbs", "%.2f", 12 * gb / update_s);
        double bw = 12 * gb / (triad_s < update_s ? triad_s : update_s);
        bj_num(o, "adamw_over_bandwidth", "%.3f", (per * gb / adamw_s) / bw);
        bj_num(o, "scalar_1thread_ms", "%.2f", 1e3 * scalar_s);
        bj_num(o, "speedup_over_scalar", "%.2f", scalar_s / adamw_s);
        bj_print(o, stdout);
    }
    free(p), free(m), free(v), free(g), free(low);
    return 0;
}
