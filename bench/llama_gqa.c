/* llama_gqa.c: grouped-query attention measured on the LLaMA example (examples/llama): its
 * training program with k and v read unrepeated by the fused attention ops (the attention pass's
 * default) against the same model with the repeats kept as written (keep_kv_repeats), in one
 * run on the CPU device. Convention: one JSON object per variant per line; step times are the
 * best of --steps, the two variants' steps interleaved so that load on the machine hits both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/llama/llama.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "support/clock.h"
#include "support/rng.h"
#include "train/train.h"
#include "bench_json.h"

typedef struct {
    llama_config c;
    int batch, seq, vocab, steps, threads;
} args;

static void die(const char *what, const sn_err *e) {
    fprintf(stderr, "llama_gqa: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
    exit(1);
}

/* The training graph (forward, attention fused, backward) of c with `layers` layers. */
static sn_graph *training_graph(const args *a, int layers, bool keep, sn_pipeline_stats *st) {
    llama_config c = a->c;
    c.n_layer = layers;
    sn_graph *g = sn_graph_new();
    sn_err e;
    if (!g) die("out of memory for the graph", NULL);
    if (llama_build(g, a->batch, a->seq, a->vocab, &c, &e)) die("model", &e);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.keep_kv_repeats = keep;
    if (sn_compile(g, &o, NULL, st, &e)) die("pipeline", &e);
    return g;
}

/* Adds sign times the kernels of the compiled training program of a graph with `layers`
 * layers to n, by kind. */
static void kernels(const args *a, int layers, bool keep, int sign, int *n) {
    sn_graph *g = training_graph(a, layers, keep, NULL);
    sn_program *p;
    sn_err e;
    if (sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e)) die("compile", &e);
    for (int i = 0; i < p->n_kernels; i++) n[p->kernels[i]->kind] += sign;
    sn_program_free(p);
    sn_graph_free(g);
}

typedef struct {
    bool keep;
    sn_graph *g;
    sn_trainer *t;
    int per_layer[SN_KER_KIND_COUNT], unrepeated;
    double best;
} variant;

static int parse_int(const char *flag, const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 1 || x > 1 << 20) {
        fprintf(stderr, "llama_gqa: %s wants a positive integer, not '%s'\n", flag, v);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    args a = {.c = llama_config_small(), .batch = 4, .seq = 128, .vocab = 256, .steps = 5,
              .threads = 0};
    a.c.n_head = 8; /* 8 query heads over 2 key/value heads: G = 4 */
    a.c.n_kv_head = 2;
    for (int i = 1; i < argc; i++) {
        static const char *flags[] = {"--layers", "--heads", "--kv-heads", "--dim", "--hidden",
                                      "--batch", "--seq", "--vocab", "--steps", "--threads"};
        int *dst[] = {&a.c.n_layer, &a.c.n_head, &a.c.n_kv_head, &a.c.dim, &a.c.hidden,
                      &a.batch, &a.seq, &a.vocab, &a.steps, &a.threads};
        int f = -1;
        for (int k = 0; k < 10; k++)
            if (!strcmp(argv[i], flags[k])) f = k;
        if (f < 0 || i + 1 >= argc) {
            fprintf(stderr, "usage: llama_gqa [--layers L] [--heads H] [--kv-heads Hkv] [--dim C] "
                    "[--hidden F] [--batch B] [--seq T] [--vocab V] [--steps N] [--threads N]\n");
            return 2;
        }
        *dst[f] = parse_int(argv[i], argv[i + 1]);
        i++;
    }
    a.c.ctx = a.seq;
    if (a.c.n_layer < 2) die("--layers must be at least 2 (kernels per layer are a difference)", NULL);
    char desc[160];
    llama_describe(&a.c, desc, sizeof desc);
    sn_device *d;
    sn_err e;
    if (sn_cpu_device_new(a.threads, &d, &e)) die("cpu device", &e);

    variant v[2] = {{.keep = true}, {.keep = false}};
    for (int i = 0; i < 2; i++) {
        sn_pipeline_stats st = {0};
        kernels(&a, 2, v[i].keep, 1, v[i].per_layer);
        kernels(&a, 1, v[i].keep, -1, v[i].per_layer);
        v[i].g = training_graph(&a, a.c.n_layer, v[i].keep, &st);
        v[i].unrepeated = st.kv_unrepeated;
        sn_train_opts o;
        sn_train_opts_default(&o, 1000);
        o.device = d;
        v[i].t = sn_trainer_new(v[i].g, &o, &e);
        if (!v[i].t) die("trainer", &e);
        v[i].best = 1e30;
    }
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(a.batch * a.seq));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(a.batch * a.seq));
    if (!x || !y) die("out of memory for the batch", NULL);
    sn_rng r = sn_rng_seed(1);
    for (int i = 0; i < a.batch * a.seq; i++) {
        x[i] = (int32_t)sn_rng_below(&r, (uint64_t)a.vocab);
        y[i] = (int32_t)sn_rng_below(&r, (uint64_t)a.vocab);
    }
    for (int s = 0; s <= a.steps; s++) /* step 0 warms both up */
        for (int i = 0; i < 2; i++) {
            sn_step_stats ss;
            double t0 = sn_clock_s();
            if (sn_trainer_step(v[i].t, x, y, &ss, &e)) die("step", &e);
            double dt = sn_clock_s() - t0;
            if (s > 0 && dt < v[i].best) v[i].best = dt;
        }
    for (int i = 0; i < 2; i++) {
        const sn_program *p = sn_trainer_program(v[i].t);
        bj *rec = bj_new();
        bj_str(rec, "bench", "llama_gqa");
        bj_str(rec, "model", desc);
        bj_int(rec, "batch", a.batch);
        bj_int(rec, "seq", a.seq);
        bj_str(rec, "kv", v[i].keep ? "repeated" : "unrepeated");
        bj_int(rec, "attention_unrepeated", v[i].unrepeated);
        bj_int(rec, "kernels_per_step", p->n_kernels);
        int total = 0;
        for (int k = 0; k < SN_KER_KIND_COUNT; k++) total += v[i].per_layer[k];
        bj_int(rec, "kernels_per_layer", total);
        bj *kinds = bj_obj(rec, "by_kind");
        for (int k = 0; k < SN_KER_KIND_COUNT; k++)
            if (v[i].per_layer[k]) bj_int(kinds, sn_kernel_kind_name((sn_kernel_kind)k), v[i].per_layer[k]);
        bj_int(rec, "arena_planned_bytes", (long long)p->arena_bytes);
        bj_num(rec, "ms_per_step", "%.1f", v[i].best * 1e3);
        bj_num(rec, "ratio_to_repeated", "%.3f", v[i].best / v[0].best);
        bj_print(rec, stdout);
    }
    for (int i = 0; i < 2; i++) {
        sn_trainer_free(v[i].t);
        sn_graph_free(v[i].g);
    }
    free(x);
    free(y);
    sn_device_free(d);
    return 0;
}
