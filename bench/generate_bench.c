/* generate_bench.c: text generation speed of a GPT-2 (or, with the cache only, LLaMA-family)
 * configuration (random weights, batch 1,
 * fp32, greedy) with the KV cache (train/generate.h: prefill once, then one decode step per
 * token) and without it (train/sample.h: the whole window recomputed for every token, the path
 * sinter train's samples take); and the time of one decode step at given positions, which must
 * not grow with the position beyond the attention's read of the cache. One JSON object per
 * measurement per line, then a summary. Not a test: numbers for docs/generate.md.
 *
 *     bench/generate_bench --model gpt2 --prompt-len 32 --new 256 --positions 64,1024
 *     bench/generate_bench --model demo --baseline-tokens 0          (the cache only)
 *     bench/generate_bench --model gpt2 --baseline-tokens 0 --base nf4 (QLoRA's base: NF4)
 *     bench/generate_bench --model gpt2 --baseline-tokens 0 --qlora 8   (the base NF4 with
 *         rank-8 adapters on every layer, B random; timed in turn with the same base alone)
 *     bench/generate_bench --model smollm2-135m --baseline-tokens 0 --qlora 8 (LLaMA's) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/nf4.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "program/program.h"
#include "passes/pipeline.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"
#include "support/clock.h"
#include "support/rng.h"
#include "train/generate.h"
#include "bench_json.h"

typedef struct {
    const char *model, *device, *positions, *base;
    int prompt_len, n_new, threads, baseline_tokens, lora, rounds;
    bool qlora; /* --qlora R: --lora R over --base nf4 */
    uint64_t seed;
} args;

static void die(const char *what, const sn_err *e) {
    fprintf(stderr, "generate_bench: %s%s%s\n", what, e ? ": " : "", e ? e->msg : "");
    exit(1);
}

static void usage(void) {
    fprintf(stderr, "usage: generate_bench [--model NAME] [--prompt-len N] [--new N] [--device auto|cpu|cuda|interp]\n"
                    "         [--threads N] [--baseline-tokens N (0: no run without the cache)]\n"
                    "         [--positions P,P,... (1-based; each timed over the 8 steps up to it)] [--seed N]\n"
                    "         [--base f32|nf4|bf16 (the linear weights NF4, as a QLoRA's generate, or\n"
                    "          bf16, as a 16-bit LoRA's)]\n"
                    "         [--lora R | --qlora R (adapters of rank R on every layer, B random:\n"
                    "          decoding timed with and without them in turn, --rounds N times)]\n");
    exit(2);
}

static long num(const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) usage();
    return v;
}

static args parse(int argc, char **argv) {
    args a = {.model = "gpt2", .device = "cpu", .positions = "64,1024", .prompt_len = 32,
              .n_new = 256, .baseline_tokens = 8, .rounds = 5, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(o, "--model")) a.model = v;
        else if (!strcmp(o, "--device")) a.device = v;
        else if (!strcmp(o, "--positions")) a.positions = v;
        else if (!strcmp(o, "--base")) a.base = v;
        else if (!strcmp(o, "--prompt-len")) a.prompt_len = (int)num(v, 1, 1 << 20);
        else if (!strcmp(o, "--new")) a.n_new = (int)num(v, 1, 1 << 20);
        else if (!strcmp(o, "--threads")) a.threads = (int)num(v, 0, 1024);
        else if (!strcmp(o, "--baseline-tokens")) a.baseline_tokens = (int)num(v, 0, 1 << 20);
        else if (!strcmp(o, "--seed")) a.seed = (uint64_t)num(v, 0, 1L << 62);
        else if (!strcmp(o, "--lora")) a.lora = (int)num(v, 1, 4096);
        else if (!strcmp(o, "--qlora")) a.lora = (int)num(v, 1, 4096), a.qlora = true;
        else if (!strcmp(o, "--rounds")) a.rounds = (int)num(v, 1, 1000);
        else usage();
        i++;
    }
    return a;
}

static sn_device *open_device(const args *a) {
    sn_device *d = NULL;
    sn_err e;
    char why[512];
    bool cuda = !strcmp(a->device, "cuda") || (!strcmp(a->device, "auto") && sn_cuda_device_count(why, sizeof why) > 0);
    if (cuda && sn_cuda_device_new(0, &d, &e)) die("cuda device", &e);
    if (!cuda && !strcmp(a->device, "interp")) return NULL;
    if (!cuda && sn_cpu_device_new(a->threads, &d, &e)) die("cpu device", &e);
    return d;
}

/* Random weights: each parameter's init rule, seeded (train.h's sn_param_init); an NF4 one
 * (--base nf4: u8 storage keeping its weight's rule) drawn so and quantized into data. Its
 * weight count is the largest whose layout has its bytes: exact for an even count (GPT-2's). */
static sn_status init_weights(void *src, const sn_node *p, float *data, sn_err *e) {
    uint64_t seed = *(const uint64_t *)src;
    if (p->dtype != SN_U8) {
        sn_node q = *p; /* an adapter's B, zeros at init, drawn as its A: the products not 0 */
        if (sn_lora_is_adapter(p->name) && q.a.init == SN_INIT_ZEROS)
            q.a.init = SN_INIT_NORMAL, q.a.f = 0.02f;
        sn_param_init(&q, data, seed);
        return SN_OK;
    }
    int64_t lo = 1, hi = 2 * sn_numel(p);
    while (lo < hi) { /* the largest n with bytes(n) <= numel(p) */
        int64_t mid = (lo + hi + 1) / 2;
        if (sn_nf4_layout_of(mid).bytes <= sn_numel(p)) lo = mid;
        else hi = mid - 1;
    }
    sn_node w = *p;
    w.dtype = SN_F32, w.rank = 1, w.shape[0] = lo;
    float *f = malloc(sizeof(float) * (size_t)lo);
    if (!f || sn_nf4_layout_of(lo).bytes != sn_numel(p)) die("an NF4 parameter's weights", NULL);
    sn_param_init(&w, f, seed);
    sn_status s = sn_nf4_quantize(f, lo, (uint8_t *)data, e);
    free(f);
    return s;
}

typedef struct {
    sn_gpt2_config c;
    const sn_llama_config *lc; /* a LLaMA-family model (c unused), or NULL */
    bool frozen; /* every weight but the adapters frozen, so that the nf4 or base16 pass stores
                    the linear ones as NF4 or bf16 */
    const sn_gpt2_lora *lora; /* NULL: no adapters */
} model;

static sn_status build_kv(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e) {
    const model *m = user;
    sn_status s = m->lc ? sn_llama_build_kv_lora(g, m->lc, B, T, decode, m->lora, e)
                        : sn_gpt2_build_kv(g, &m->c, B, T, decode, m->lora, e);
    for (int i = 0; !s && m->frozen && i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && !sn_lora_is_adapter(g->nodes[i]->name))
            sn_param_freeze(g->nodes[i]);
    return s;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One call of a->n_new tokens from a->prompt_len of prompt: its decode steps' tokens/s and the
 * median step's seconds (a step another process delays stays out of the median). */
static double decode_tps(sn_generator *gen, const args *a, const int32_t *prompt, double *median_s) {
    int32_t *out = malloc(sizeof(int32_t) * (size_t)a->n_new);
    double *s = malloc(sizeof(double) * (size_t)a->n_new);
    sn_sample_opts so = {.n_new = a->n_new, .temperature = 0, .seed = a->seed};
    sn_generate_stats st;
    sn_err e;
    if (!out || !s || sn_generator_generate(gen, &prompt, &a->prompt_len, &so, out, NULL, NULL, &e))
        die("generate", out && s ? &e : NULL);
    sn_generator_stats(gen, &st);
    memcpy(s, st.step_s, sizeof(double) * (size_t)st.n_steps);
    if (median_s) *median_s = st.n_steps ? median(s, st.n_steps) : 0;
    free(out);
    free(s);
    return st.n_steps ? st.n_steps / st.decode_s : 0;
}

/* --lora: the decode steps with the adapters and without them, medians over the rounds */
typedef struct {
    double with_ms, without_ms;   /* the median step (the median of the calls' medians) */
    double with_tps, without_tps; /* the calls' tokens/s, their median */
} turns;

/* --lora: decoding with the adapters and without them (the same base), a call of each in turn
 * a->rounds times (the machine's load falls on both alike). */
static turns in_turn(const args *a, sn_generator *adapted, sn_generator *plain, const int32_t *prompt) {
    double with[1000], without[1000], with_ms[1000], without_ms[1000];
    for (int r = 0; r < a->rounds; r++) {
        with[r] = decode_tps(adapted, a, prompt, &with_ms[r]);
        without[r] = decode_tps(plain, a, prompt, &without_ms[r]);
    }
    double tw = median(with, a->rounds), tn = median(without, a->rounds);
    double mw = 1e3 * median(with_ms, a->rounds), mn = 1e3 * median(without_ms, a->rounds);
    bj *rec = bj_new();
    bj_str(rec, "bench", "generate_adapters");
    bj_str(rec, "model", a->model);
    bj_str(rec, "base", a->qlora ? "nf4" : a->base ? a->base : "f32");
    bj_int(rec, "rank", a->lora);
    bj_int(rec, "rounds", a->rounds);
    bj_num(rec, "adapters_decode_tokens_per_s", "%.3f", tw);
    bj_num(rec, "none_decode_tokens_per_s", "%.3f", tn);
    bj_num(rec, "adapters_step_ms", "%.3f", mw);
    bj_num(rec, "none_step_ms", "%.3f", mn);
    bj_num(rec, "step_ratio", "%.4f", mw / mn);
    bj_print(rec, stdout);
    return (turns){mw, mn, tw, tn};
}

/* A decode step's time by kernel kind into kinds (512 bytes): a short run with an event after
 * every kernel (which costs time of its own, so the runs above have events around the whole
 * step only). adapters: the record's word for them (NULL: no such field). */
static void kinds_of(sn_generator *gen, const args *a, const int32_t *prompt, const char *adapters,
                     char *kinds) {
    sn_exec *dx = sn_generator_decode_exec(gen);
    args four = *a;
    four.n_new = 4;
    sn_exec_time_kernels(dx, true);
    decode_tps(gen, &four, prompt, NULL);
    sn_exec_time_kernels(dx, false);
    sn_exec_stats xs;
    sn_exec_stats_get(dx, &xs);
    kinds[0] = 0;
    for (int k = 0, at = 0; k < SN_KER_KIND_COUNT; k++)
        if (xs.kind_s[k] > 0)
            at += snprintf(kinds + at, 512 - (size_t)at, "%s%s %.2f ms", at ? ", " : "",
                           sn_kernel_kind_name((sn_kernel_kind)k), 1e3 * xs.kind_s[k]);
    bj *rec = bj_new();
    bj_str(rec, "bench", "generate_kinds");
    if (adapters) bj_str(rec, "adapters", adapters);
    bj_str(rec, "decode_step", kinds);
    bj_int(rec, "kernels", sn_generator_decode_program(gen)->n_kernels);
    bj_int(rec, "persistent_bytes", (long long)xs.persistent_bytes);
    bj_int(rec, "arena_bytes", (long long)xs.arena_bytes);
    bj_print(rec, stdout);
}

int main(int argc, char **argv) {
    args a = parse(argc, argv);
    sn_gpt2_config c;
    sn_llama_config lc, *llama = NULL;
    if (!sn_gpt2_config_find(a.model, &c)) {
        if (!sn_llama_config_find(a.model, &lc))
            die("unknown model (gpt2, gpt2-medium, ..., demo, tiny; smollm2-135m, tinyllama-1.1b, ...)",
                NULL);
        llama = &lc; /* the fields the bench reads */
        c = (sn_gpt2_config){.name = lc.name, .vocab = lc.vocab, .ctx = lc.ctx, .n_layer = lc.n_layer};
        if (a.baseline_tokens) die("a LLaMA-family model: --baseline-tokens 0 (the run without "
                                   "the cache builds GPT-2 only)", NULL);
    }
    if (a.prompt_len + a.n_new - 1 > c.ctx) die("the prompt and the new tokens do not fit the context", NULL);
    sn_device *d = open_device(&a);
    const char *dev = d ? d->name : "reference interpreter";
    sn_weight_source w = {init_weights, &a.seed};
    sn_err e;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)c.ctx), *out = malloc(sizeof(int32_t) * (size_t)c.ctx);
    if (!prompt || !out) die("out of memory for the tokens", NULL);
    sn_rng r = sn_rng_seed(a.seed);
    for (int i = 0; i < c.ctx; i++) prompt[i] = (int32_t)sn_rng_below(&r, (uint64_t)c.vocab);

    /* with the cache: a first call compiles the prefill program, the second is timed */
    double t0 = sn_clock_s();
    sn_generator *gen;
    bool nf4 = a.base && !strcmp(a.base, "nf4");
    sn_dtype base16 = a.base && !strcmp(a.base, "bf16") ? SN_BF16 : 0;
    if (a.base && !nf4 && !base16 && strcmp(a.base, "f32")) die("--base: f32, bf16 or nf4", NULL);
    if (a.qlora && a.base && !nf4) die("--qlora is --lora over --base nf4: leave out --base", NULL);
    nf4 |= a.qlora;
    sn_gpt2_lora lo = {.lora = {.rank = a.lora, .alpha = (float)a.lora}, .targets = SN_GPT2_LORA_ALL};
    model mk = {c, llama, nf4 || base16, a.lora ? &lo : NULL}, plain_mk = {c, llama, nf4 || base16, NULL};
    sn_generator_opts go = {.build = build_kv, .user = &mk, .ctx = c.ctx, .n_layer = c.n_layer,
                            .batch = 1, .nf4 = nf4, .base16 = base16};
    if (sn_generator_new(&go, d, &gen, &e) || sn_generator_load(gen, w, &e)) die("generator", &e);
    sn_generator *plain = NULL; /* --lora: the same base without the adapters */
    go.user = &plain_mk;
    if (a.lora && (sn_generator_new(&go, d, &plain, &e) || sn_generator_load(plain, w, &e)))
        die("generator without the adapters", &e);
    double setup_s = sn_clock_s() - t0;
    sn_sample_opts so = {.n_new = a.n_new, .temperature = 0, .seed = a.seed};
    const int32_t *pp = prompt;
    t0 = sn_clock_s();
    if (sn_generator_generate(gen, &pp, &a.prompt_len, &so, out, NULL, NULL, &e)) die("generate", &e);
    double first_s = sn_clock_s() - t0;
    t0 = sn_clock_s();
    if (sn_generator_generate(gen, &pp, &a.prompt_len, &so, out, NULL, NULL, &e)) die("generate", &e);
    double total_s = sn_clock_s() - t0;
    sn_generate_stats st;
    sn_generator_stats(gen, &st);
    double cached_tps = a.n_new / total_s, decode_tps = st.n_steps ? st.n_steps / st.decode_s : 0;
    double prefill_s = st.prefill_s;
    bj *rec = bj_new();
    bj_str(rec, "bench", "generate");
    bj_bool(rec, "cache", true);
    bj_str(rec, "model", a.model);
    bj_str(rec, "device", dev);
    bj_str(rec, "base", nf4 ? "nf4" : base16 ? "bf16" : "f32");
    bj_int(rec, "prompt", a.prompt_len);
    bj_int(rec, "new", a.n_new);
    bj_num(rec, "tokens_per_s", "%.3f", cached_tps);
    bj_num(rec, "decode_tokens_per_s", "%.3f", decode_tps);
    bj_num(rec, "prefill_s", "%.4f", prefill_s);
    bj_num(rec, "setup_s", "%.3f", setup_s);
    bj_num(rec, "first_call_s", "%.3f", first_s);
    bj_print(rec, stdout);
    turns tu = a.lora ? in_turn(&a, gen, plain, prompt) : (turns){0};
    /* a decode step's time by kernel kind: a short run with an event after every kernel (which
     * costs time of its own, so the runs above have events around the whole step only) */
    char kinds[512], plain_kinds[512] = "";
    kinds_of(gen, &a, prompt, a.lora ? "adapters" : NULL, kinds);
    if (plain) kinds_of(plain, &a, prompt, "none", plain_kinds);

    /* one decode step at each position P (1-based): the 8 steps up to it, the median */
    double pos_ms[8] = {0};
    int pos_at[8], n_pos = 0;
    for (const char *p = a.positions; *p && n_pos < 8;) {
        char *end;
        long P = strtol(p, &end, 10);
        if (end == p || P < 10 || P > c.ctx) die("--positions: each between 10 and the context", NULL);
        int np = (int)P - 8, nn = 9; /* steps feed positions P-8 .. P-1 (0-based) */
        const int32_t *q = prompt;
        sn_sample_opts po = {.n_new = nn, .temperature = 0, .seed = a.seed};
        if (sn_generator_generate(gen, &q, &np, &po, out, NULL, NULL, &e)) die("generate", &e);
        sn_generator_stats(gen, &st);
        double s[8];
        memcpy(s, st.step_s, sizeof s);
        qsort(s, 8, sizeof s[0], by_value);
        pos_at[n_pos] = (int)P, pos_ms[n_pos] = 1e3 * (s[3] + s[4]) / 2;
        rec = bj_new();
        bj_str(rec, "bench", "generate_step");
        bj_str(rec, "model", a.model);
        bj_str(rec, "device", dev);
        bj_int(rec, "position", pos_at[n_pos]);
        bj_num(rec, "ms", "%.3f", pos_ms[n_pos]);
        bj_print(rec, stdout);
        n_pos++;
        p = *end == ',' ? end + 1 : end;
    }
    sn_generator_free(gen);
    sn_generator_free(plain);

    /* without the cache: the sampler over a window of prompt + new tokens, the trainer's
     * forward rewrites (attention fused); every token costs the same, so a few are timed */
    double plain_tps = 0;
    if (a.baseline_tokens > 0) {
        int T = a.prompt_len + a.n_new, n = a.baseline_tokens < a.n_new ? a.baseline_tokens : a.n_new;
        sn_graph *g = sn_graph_new();
        sn_gpt2 m;
        sn_pipeline_opts po = sn_pipeline_defaults();
        po.target = d ? &d->target : NULL;
        po.pad_vocab = 0;
        if (sn_gpt2_build(g, &c, 1, T, &m, &e) || sn_compile(g, &po, NULL, NULL, &e)) die("sampler graph", &e);
        sn_sampler *s = sn_sampler_new(g, sn_graph_input(g, SN_ROLE_TOKENS), g->logits, d, &e);
        if (!s || sn_sampler_load_weights(s, w, &e)) die("sampler", &e);
        so.n_new = 1; /* warm-up */
        if (sn_sampler_generate(s, prompt, a.prompt_len, &so, out, &e)) die("sample", &e);
        so.n_new = n;
        t0 = sn_clock_s();
        if (sn_sampler_generate(s, prompt, a.prompt_len, &so, out, &e)) die("sample", &e);
        plain_tps = n / (sn_clock_s() - t0);
        rec = bj_new();
        bj_str(rec, "bench", "generate");
        bj_bool(rec, "cache", false);
        bj_str(rec, "model", a.model);
        bj_str(rec, "device", dev);
        bj_int(rec, "window", T);
        bj_int(rec, "timed_tokens", n);
        bj_num(rec, "tokens_per_s", "%.3f", plain_tps);
        bj_print(rec, stdout);
        sn_sampler_free(s);
        sn_graph_free(g);
    }

    printf("\n%s on %s, batch 1, fp32%s, %d-token prompt, %d new tokens (greedy):\n", a.model, dev,
           nf4 ? " (linear weights NF4)" : base16 ? " (linear weights bf16)" : "", a.prompt_len, a.n_new);
    printf("  with the KV cache:    %8.2f tokens/s (prefill %.3f s, decode steps %.2f tokens/s)\n",
           cached_tps, prefill_s, decode_tps);
    if (plain_tps > 0)
        printf("  without (recompute):  %8.2f tokens/s (a window of %d, %d tokens timed): %.1fx\n",
               plain_tps, a.prompt_len + a.n_new, a.baseline_tokens, cached_tps / plain_tps);
    for (int i = 0; i < n_pos; i++) printf("  one decode step at position %4d: %.2f ms\n", pos_at[i], pos_ms[i]);
    printf("  a decode step by kernel kind (timed kernel by kernel, which adds time): %s\n", kinds);
    if (a.lora)
        printf("  decode steps with rank-%d adapters on every layer %.3f ms, the same base without "
               "them %.3f ms (medians of %d calls in turn; %.1f and %.1f tokens/s): %.3fx\n"
               "  without the adapters, by kernel kind: %s\n", a.lora, tu.with_ms, tu.without_ms,
               a.rounds, tu.with_tps, tu.without_tps, tu.with_ms / tu.without_ms, plain_kinds);
    free(prompt);
    free(out);
    sn_device_free(d);
    return 0;
}
