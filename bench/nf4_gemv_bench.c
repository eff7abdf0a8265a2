/* nf4_gemv_bench.c: one product y = x @ W of few rows (a decode step's), its weight f32 (the
 * GEMM library) against NF4 (the nf4_gemv kernel reading the packed bytes: kernel.h), each a
 * compiled program on the CPU device, timed in turn in one run (the order swapped every round,
 * the best of each), GPT-2's four weight shapes; with --copies C a run multiplies x by C weights
 * of that shape, each its own buffer (C = 48: more than the 4 MiB of L2, as a decode step's
 * weights are), times given a product. One JSON object per line: the two times, NF4 over f32,
 * the weight bytes per second each reached. Not a test: numbers for docs/finetune.md.
 *
 *     bench/nf4_gemv_bench [--rows 1,4,8] [--rounds 50] [--threads N] [--copies C] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/nf4.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "support/clock.h"
#include "support/rng.h"
#include "bench_json.h"

#define USAGE "usage: nf4_gemv_bench [--rows 1,4,8] [--rounds N] [--threads N] [--copies N]"

static void die(const char *what, const sn_err *e) {
    fprintf(stderr, "nf4_gemv_bench: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
    exit(1);
}

typedef struct {
    sn_graph *g;
    sn_program *p;
    sn_exec *x;
    const char *kernel; /* the product's kernel kind */
} prog;

/* x (M, K) @ W_i (K, N) for i < copies, each W_i f32 or NF4 (its own buffer: a run reads
 * copies weights, more than the caches' nearest levels hold when copies is large, as a decode
 * step reads every layer's), compiled and loaded with w (f32) or its bytes q. */
static prog make(sn_device *d, int64_t M, int64_t K, int64_t N, bool nf4, int copies,
                 const float *xv, const float *w, const uint8_t *q) {
    prog r = {.g = sn_graph_new()};
    sn_err e;
    sn_node *x = sn_input(r.g, "x", SN_F32, SN_SHAPE(M, K)), *wn[256];
    for (int i = 0; i < copies; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        wn[i] = nf4 ? sn_param_nf4(r.g, name, SN_F32, SN_SHAPE(K, N))
                    : sn_param(r.g, name, SN_F32, SN_SHAPE(K, N), SN_INIT_NORMAL, 0.02f);
        if (!wn[i]) die(sn_graph_error(r.g), NULL);
        sn_node *y = sn_matmul(r.g, x, wn[i]);
        sn_graph_add_output(r.g, y);
    }
    sn_pipeline_opts o = {.target = &d->target};
    if (sn_compile(r.g, &o, &r.p, NULL, &e) || sn_exec_new(d, r.p, &r.x, &e)) die("compile", &e);
    r.kernel = sn_kernel_kind_name(r.p->kernels[0]->kind);
    if (sn_exec_set(r.x, x, xv, &e)) die("set", &e);
    for (int i = 0; i < copies; i++)
        if (sn_exec_set(r.x, nf4 ? wn[i]->in[0] : wn[i], nf4 ? (const void *)q : w, &e))
            die("set", &e);
    return r;
}

static double run(prog *p) {
    sn_err e;
    double t0 = sn_clock_s();
    if (sn_exec_run(p->x, &e)) die("run", &e);
    return sn_clock_s() - t0;
}

static void drop(prog *p) {
    sn_exec_free(p->x);
    sn_program_free(p->p);
    sn_graph_free(p->g);
}

int main(int argc, char **argv) {
    const char *rows = "1,4,8";
    int rounds = 50, threads = 0, copies = 1;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) die(USAGE, NULL);
        if (!strcmp(argv[i], "--rows"))
            rows = v;
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(v);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(v);
        else if (!strcmp(argv[i], "--copies"))
            copies = atoi(v);
        else
            die(USAGE, NULL);
        i++;
    }
    if (copies < 1 || copies > 256) die("--copies: 1 .. 256", NULL);
    sn_device *d;
    sn_err e;
    if (sn_cpu_device_new(threads, &d, &e)) die("cpu device", &e);
    static const int64_t shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    for (const char *r = rows; *r;) {
        char *end;
        long M = strtol(r, &end, 10);
        if (end == r || M < 1 || M > SN_GEMV_MAX_M) die("--rows: each in 1 .. 8", NULL);
        r = *end == ',' ? end + 1 : end;
        for (int s = 0; s < 4; s++) {
            int64_t K = shapes[s][0], N = shapes[s][1], n = K * N;
            float *w = malloc(sizeof(float) * (size_t)n),
                  *xv = malloc(sizeof(float) * (size_t)(M * K));
            uint8_t *q = malloc((size_t)sn_nf4_layout_of(n).bytes);
            sn_rng g = sn_rng_seed(7);
            for (int64_t i = 0; i < n; i++) w[i] = (float)(0.02 * sn_rng_normal(&g));
            for (int64_t i = 0; i < M * K; i++) xv[i] = (float)sn_rng_normal(&g);
            if (sn_nf4_quantize(w, n, q, &e)) die("quantize", &e);
            prog pf = make(d, M, K, N, false, copies, xv, w, NULL);
            prog pq = make(d, M, K, N, true, copies, xv, NULL, q);
            for (double t0 = sn_clock_s(); sn_clock_s() - t0 < 0.2;) run(&pf), run(&pq); /* warm */
            double best[2] = {1e9, 1e9};
            for (int i = 0; i < rounds; i++) /* in turn, the order swapped every round */
                for (int j = 0; j < 2; j++) {
                    int which = (i + j) % 2;
                    double t = run(which ? &pq : &pf);
                    if (t < best[which]) best[which] = t;
                }
            best[0] /= copies, best[1] /= copies; /* a product's */
            double bytes_f = 4.0 * (double)n, bytes_q = (double)sn_nf4_layout_of(n).bytes;
            bj *o = bj_new();
            bj_str(o, "bench", "nf4_gemv");
            bj_str(o, "device", d->name);
            bj_int(o, "M", M);
            bj_int(o, "K", K);
            bj_int(o, "N", N);
            bj_int(o, "copies", copies);
            bj_str(o, "f32_kernel", pf.kernel);
            bj_str(o, "nf4_kernel", pq.kernel);
            bj_num(o, "f32_us", "%.1f", 1e6 * best[0]);
            bj_num(o, "nf4_us", "%.1f", 1e6 * best[1]);
            bj_num(o, "nf4_over_f32", "%.3f", best[1] / best[0]);
            bj_num(o, "f32_weight_gb_s", "%.2f", bytes_f / best[0] / 1e9);
            bj_num(o, "nf4_weight_gb_s", "%.2f", bytes_q / best[1] / 1e9);
            bj_num(o, "nf4_ns_per_weight", "%.3f", 1e9 * best[1] / (double)n);
            bj_print(o, stdout);
            drop(&pf), drop(&pq);
            free(w), free(xv), free(q);
        }
    }
    sn_device_free(d);
    return 0;
}
