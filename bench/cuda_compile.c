/* cuda_compile.c: the CUDA device's compile time for a model's training program at a precision,
 * cold (an empty kernel cache) and warm (the cache the cold run left): the device's compile call
 * (CUDA C rendering, NVRTC children or the cache, module loads, cuBLASLt plans), no memory
 * allocated for the program; where the time went, and each part's NVRTC child (CPU and wall), with
 * the critical path: the busiest of `jobs` CPUs when the children's CPU times are dealt to them in
 * start order (what the compile takes on a quiet machine with that many cores).
 * Convention: runs on a GPU, or on the stand-in driver (SN_LIBCUDA, SN_LIBNVRTC,
 * SN_LIBCUBLASLT), whose module load and cuBLASLt plans are its own (module load hands the text
 * to the simulator, which runs g++ on a text it has not seen): the cold time is NVRTC's either
 * way, the warm one an estimate for a GPU.
 *
 *     bench/cuda_compile --model gpt2 --batch 4 --seq 256 --precision bf16 [--cache-dir DIR]
 *                        [--jobs N] (NVRTC children at once; default: the CPUs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "runtime/cuda/cuda_device.h"
#include "support/clock.h"

/* This process's CPU seconds (NVRTC's child process not counted; a warm compile has none). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The time jobs CPUs take for children of these CPU times started in order, each on the CPU
 * that frees first. */
static double critical_path(const sn_cuda_stats *s, int jobs) {
    double cpu[SN_CUDA_MAX_PARTS] = {0}, worst = 0;
    if (jobs < 1 || jobs > SN_CUDA_MAX_PARTS) jobs = SN_CUDA_MAX_PARTS;
    for (int p = 0; p < s->last_parts; p++) {
        if (!s->part[p].compiled) continue;
        int at = 0;
        for (int j = 1; j < jobs; j++)
            if (cpu[j] < cpu[at]) at = j;
        cpu[at] += s->part[p].cpu_s;
        if (cpu[at] > worst) worst = cpu[at];
    }
    return worst;
}

static int fail(const char *what, const sn_err *e) {
    fprintf(stderr, "cuda_compile: %s: %s\n", what, e->msg);
    return 1;
}

int main(int argc, char **argv) {
    const char *model = "gpt2", *precision = "fp32", *dir = "/tmp/sinter_cuda_compile_cache";
    int B = 4, T = 256, jobs = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!strcmp(argv[i], "--cache-dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--jobs")) jobs = atoi(argv[i + 1]);
        else argc = 0;
    }
    int prec = sn_precision_parse(precision);
    sn_gpt2_config c;
    if (argc % 2 == 0 || B < 1 || T < 1 || prec < 0 || !sn_gpt2_config_find(model, &c)) {
        fprintf(stderr, "usage: cuda_compile [--model M] [--batch B] [--seq T] [--precision "
                        "fp32|bf16|fp16] [--cache-dir DIR] (emptied first) [--jobs N]\n");
        return 2;
    }
    sn_err e = {0};
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = (sn_precision)prec;
    sn_program *p = NULL;
    double t0 = sn_clock_s();
    if (!g || sn_gpt2_build(g, &c, B, T, &m, &e) || sn_compile(g, &o, &p, NULL, &e))
        return fail("the program", &e);
    printf("cuda_compile: %s B=%d T=%d %s: %d kernels, passes %.2f s\n", model, B, T, precision,
           p->n_kernels, sn_clock_s() - t0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cuda_compile: could not empty %s\n", dir);
    for (int pass = 0; pass < 2; pass++) {
        sn_cuda_opts co = {.cache_dir = dir, .compile_jobs = jobs};
        sn_device *d = NULL;
        if (sn_cuda_device_new_opts(0, &co, &d, &e)) return fail("the CUDA device", &e);
        void **handles = calloc((size_t)p->n_kernels + 1, sizeof *handles);
        if (!handles) return 1;
        t0 = sn_clock_s();
        double c0 = cpu_s();
        sn_status st = d->compile(d, p->kernels, p->n_kernels, handles, &e);
        double wall = sn_clock_s() - t0, cpu = cpu_s() - c0;
        if (st) return fail("compile", &e);
        sn_cuda_stats s;
        sn_cuda_stats_get(d, &s);
        printf("cuda_compile: %s: the compile call %.3f s (%.3f s of this process's CPU): %d parts, "
               "%d NVRTC runs, %d cache hits, %d cuBLASLt plans\n", pass ? "warm" : "cold", wall,
               cpu, s.parts, s.nvrtc_runs, s.cache_hits, s.gemm_plans);
        printf("cuda_compile: %s: cuBLASLt plans %.3f s, rendering %.3f s, cache %.3f s, NVRTC "
               "children %.3f s, module loads %.3f s (wall)\n", pass ? "warm" : "cold", s.gemm_s,
               s.render_s, s.cache_s, s.nvrtc_s, s.load_s);
        double sum = 0, most = 0;
        for (int q = 0; q < s.last_parts; q++) {
            const sn_cuda_part_stats *ps = &s.part[q];
            if (!ps->compiled) continue;
            printf("cuda_compile:   part %d: %3d kernels, %2d functions, cost %6zu, "
                   "%6zu of source: NVRTC child %.3f s CPU, %.3f s wall\n", q + 1, ps->kernels,
                   ps->functions, ps->cost, ps->src_bytes, ps->cpu_s, ps->wall_s);
            sum += ps->cpu_s;
            most = ps->cpu_s > most ? ps->cpu_s : most;
        }
        int ncpu = jobs > 0 ? jobs : sn_cuda_compile_jobs();
        if (s.nvrtc_runs)
            printf("cuda_compile: %s: children %.3f s CPU in all, the longest %.3f s; critical path "
                   "on %d CPUs %.3f s, on 2 %.3f s, on 8 %.3f s\n", pass ? "warm" : "cold", sum,
                   most, ncpu, critical_path(&s, ncpu), critical_path(&s, 2), critical_path(&s, 8));
        free(handles);
        sn_device_free(d);
    }
    sn_program_free(p);
    sn_graph_free(g);
    return 0;
}
