/* peak.c: the FMA peak of peak.h: 16 independent accumulators per thread (more than latency x
 * ports on current cores), on the widest vectors the CPU has. */
#include "peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define ACC16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

__attribute__((target("avx512f"))) static float fma512(long iters) {
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)(i));
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    ACC16(DECL)
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f), s = _mm512_setzero_ps();
    for (long it = 0; it < iters; it++) { ACC16(STEP) }
    ACC16(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"))) static float fma256(long iters) {
#define DECL(i) __m256 a##i = _mm256_set1_ps((float)(i));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    ACC16(DECL)
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f), s = _mm256_setzero_ps();
    for (long it = 0; it < iters; it++) { ACC16(STEP) }
    ACC16(SUM)
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
#undef DECL
#undef STEP
#undef SUM
}

typedef struct {
    bool wide;
    long iters;
    pthread_barrier_t *bar;
    double gflops;
    volatile float sink;
} job;

static void *run(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    double t0 = now_s();
    j->sink = j->wide ? fma512(j->iters) : fma256(j->iters);
    double flops = (double)j->iters * 16 * (j->wide ? 16 : 8) * 2;
    j->gflops = flops / (now_s() - t0) / 1e9;
    return NULL;
}

double sn_bench_fma_peak(int threads, int reps, const char **isa) {
    __builtin_cpu_init();
    bool wide = __builtin_cpu_supports("avx512f");
    if (isa) *isa = wide ? "avx512f" : "avx2";
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads > 64) threads = 64;
    long iters = 1000000;
    double t0 = now_s();
    volatile float s = wide ? fma512(iters) : fma256(iters);
    (void)s;
    double dt = now_s() - t0;
    iters = (long)((double)iters * 0.2 / (dt > 1e-4 ? dt : 1e-4));
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        job jobs[64];
        pthread_t id[64];
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job){.wide = wide, .iters = iters, .bar = &bar};
            pthread_create(&id[i], NULL, run, &jobs[i]);
        }
        double total = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(id[i], NULL);
            total += jobs[i].gflops;
        }
        pthread_barrier_destroy(&bar);
        if (total > best) best = total;
    }
    return best;
}
