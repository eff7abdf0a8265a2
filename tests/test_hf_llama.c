/* test_hf_llama.c: the LLaMA-family model (models/llama.h) and its Hugging Face import and
 * export (io/hf_llama.h) against fixtures transformers made (tools/make_llama_fixtures.py,
 * tests/fixtures/llama): the imported model's logits equal transformers' on the interpreter, the
 * CPU device and the stand-in CUDA driver (untied LLaMA; tied LLaMA with llama3 rope scaling;
 * sharded Qwen2 with q/k/v biases), and so do the KV cache's prefill and decode programs, whose
 * greedy generation is transformers' token for token; import, export, import is bit-identical;
 * the whole graph's gradient against finite differences; the imported model trains; bad configs
 * and tensors refused, each message naming the field or tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interp/interp.h"
#include "io/hf_llama.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "train/generate.h"
#include "train/train.h"
#include "harness.h"
#include "tiny_gpt2.h"

#ifndef SN_TEST_FIXTURES
#define SN_TEST_FIXTURES "tests/fixtures"
#endif

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

static const char *fixture(const char *name) {
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/llama/%s", SN_TEST_FIXTURES, name);
    return buf[k];
}

/* The fixture's logits file: magic "SNLG", version 1, T, V, tokens[T], f32 logits (T, V). */
typedef struct {
    int T, V;
    int32_t tokens[64];
    double *logits;
} golden;

static golden read_golden(const char *name) {
    FILE *f = fopen(fixture(name), "rb");
    ck_assert_msg(f, "cannot open %s", fixture(name));
    int32_t h[4];
    ck_assert(fread(h, 4, 4, f) == 4);
    ck_assert_int_eq(h[0], 0x474c4e53);
    ck_assert_int_eq(h[1], 1);
    golden g = {.T = h[2], .V = h[3]};
    ck_assert(g.T > 0 && g.T <= 64);
    ck_assert(fread(g.tokens, 4, (size_t)g.T, f) == (size_t)g.T);
    float *l = malloc(4 * (size_t)(g.T * g.V));
    ck_assert(fread(l, 4, (size_t)(g.T * g.V), f) == (size_t)(g.T * g.V));
    fclose(f);
    g.logits = malloc(sizeof(double) * (size_t)(g.T * g.V));
    for (int i = 0; i < g.T * g.V; i++) g.logits[i] = l[i];
    free(l);
    return g;
}

/* dir: a fixture's name, or a path (with a slash) */
static void read_ok(const char *dir, sn_llama_config *c, sn_weights *w) {
    sn_err e;
    const char *path = strchr(dir, '/') ? dir : fixture(dir);
    ck_assert_msg(sn_hf_llama_read(path, c, w, &e) == SN_OK, "%s: %s", path, e.msg);
}

/* The logits (T, V) of c with weights w on tokens, compiled with the default rewrites
 * (vocabulary padded, attention fused) for dev (NULL: the interpreter). */
static void forward(const sn_llama_config *c, const sn_weights *w, const int32_t *tokens, int T,
                    sn_device *dev, double *out) {
    sn_err e;
    sn_device *own = NULL;
    if (!dev) {
        ck_assert_msg(sn_interp_device_new(&own, &e) == SN_OK, "%s", e.msg);
        dev = own;
    }
    sn_graph *g = sn_graph_new();
    sn_llama m;
    ck_assert_msg(sn_llama_build(g, c, 1, T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.target = &dev->target;
    sn_program *p;
    sn_exec *x;
    ck_assert_msg(sn_compile(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_exec_new(dev, p, &x, &e) == SN_OK, "%s", e.msg);
    int32_t zeros[64] = {0};
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op == SN_OP_INPUT) {
            ck_assert_msg(sn_exec_set(x, n, strcmp(n->name, "idx") ? zeros : tokens, &e) == SN_OK, "%s", e.msg);
        } else if (n->op == SN_OP_PARAM) {
            float *v = malloc(4 * (size_t)sn_numel(n));
            ck_assert_msg(sn_weights_fill(w, n, c->vocab, v, &e) == SN_OK, "%s", e.msg);
            ck_assert_msg(sn_exec_set(x, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
    }
    ck_assert_msg(sn_exec_run(x, &e) == SN_OK, "%s", e.msg);
    const sn_node *logits = g->outputs[0];
    int64_t vp = logits->shape[2];
    ck_assert_int_ge(vp, c->vocab);
    float *l = malloc(4 * (size_t)(T * vp));
    ck_assert_msg(sn_exec_get(x, logits, l, &e) == SN_OK, "%s", e.msg);
    for (int t = 0; t < T; t++)
        for (int v = 0; v < c->vocab; v++) out[t * c->vocab + v] = l[t * vp + v];
    free(l);
    sn_exec_free(x);
    sn_program_free(p);
    sn_graph_free(g);
    sn_device_free(own);
}

static const char *const models[3] = {"llama", "llama3", "qwen2"};

/* The logits of model (its directory dir: NULL for the fixture's) on dev (NULL: the
 * interpreter) against transformers'. */
static void check_logits_on(const char *model, const char *dir, sn_device *dev) {
    sn_llama_config c;
    sn_weights w;
    read_ok(dir ? dir : model, &c, &w);
    char name[64];
    snprintf(name, sizeof name, "%s_logits.bin", model);
    golden gd = read_golden(name);
    ck_assert_int_eq(gd.V, c.vocab);
    double *got = malloc(sizeof(double) * (size_t)(gd.T * gd.V));
    forward(&c, &w, gd.tokens, gd.T, dev, got);
    sn_check_close(name, got, gd.logits, (size_t)(gd.T * gd.V), 1e-4, 1.0);
    free(got);
    free(gd.logits);
    sn_weights_free(&w);
}

static void check_logits(const char *model, bool cpu) {
    sn_err e;
    sn_device *dev = NULL;
    if (cpu) ck_assert_msg(sn_cpu_device_new(0, &dev, &e) == SN_OK, "%s", e.msg);
    check_logits_on(model, NULL, dev);
    sn_device_free(dev);
}

/* _i: model _i % 3, on the interpreter (_i < 3) or the CPU device */
START_TEST(logits) { check_logits(models[_i % 3], _i >= 3); }
END_TEST

static void rm_rf(const char *d);

/* On the stand-in CUDA driver (tests/standin: libcuda over host memory, the kernels' CUDA C run
 * by the SIMT simulator) when meson gives its paths and the real NVRTC it wraps is here. */
START_TEST(logits_standin) {
#ifdef SN_TEST_STANDIN_CUDA
    setenv("SN_LIBCUDA", SN_TEST_STANDIN_CUDA, 1);
    setenv("SN_LIBNVRTC", SN_TEST_STANDIN_NVRTC, 1);
    setenv("SN_LIBCUBLASLT", SN_TEST_STANDIN_CUBLASLT, 1);
    sn_cuda_api a = {0};
    sn_err e;
    int major = 0, minor = 0;
    bool ok = sn_nvrtc_version(&a.nvrtc, &major, &minor, &e) == SN_OK;
    sn_cuda_api_unload(&a);
    if (!ok) {
        printf("test_hf_llama: logits_standin skipped: no NVRTC for the stand-in to wrap\n");
        return;
    }
    char cache[] = "/tmp/sn_test_hf_llama_cache_XXXXXX";
    ck_assert(mkdtemp(cache));
    sn_cuda_opts o = {.cache_dir = cache};
    sn_device *dev = NULL;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &dev, &e) == SN_OK, "%s", e.msg);
    check_logits_on(models[_i], NULL, dev);
    sn_device_free(dev);
    rm_rf(cache);
#endif
}
END_TEST

/* sn_weights as a generator's source of weights */
typedef struct {
    const sn_weights *w;
    int64_t vocab;
} weights_src;

static sn_status get_weight(void *src, const sn_node *p, float *data, sn_err *e) {
    const weights_src *s = src;
    return sn_weights_fill(s->w, p, s->vocab, data, e);
}

static sn_status build_kv(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e) {
    return sn_llama_build_kv(g, user, B, T, decode, e);
}

/* Generation with the KV cache (train/generate.h): a 3-token prefill, then one token at a time
 * through the decode program reading the cache; its logits at every position equal
 * transformers' to 1e-4, on the interpreter and the CPU device. */
static void check_cached(const char *model, bool cpu) {
    enum { P = 3 };
    sn_llama_config c;
    sn_weights w;
    read_ok(model, &c, &w);
    char name[64];
    snprintf(name, sizeof name, "%s_logits.bin", model);
    golden gd = read_golden(name);
    sn_err e;
    sn_device *dev = NULL;
    if (cpu) ck_assert_msg(sn_cpu_device_new(0, &dev, &e) == SN_OK, "%s", e.msg);
    sn_generator *gen;
    sn_generator_opts o = {.build = build_kv, .user = &c, .ctx = c.ctx, .n_layer = c.n_layer, .batch = 1};
    ck_assert_msg(sn_generator_new(&o, dev, &gen, &e) == SN_OK, "%s", e.msg);
    weights_src src = {&w, c.vocab};
    ck_assert_msg(sn_generator_load(gen, (sn_weight_source){get_weight, &src}, &e) == SN_OK, "%s", e.msg);
    float *got = malloc(sizeof(float) * (size_t)((gd.T - P + 1) * gd.V));
    ck_assert_msg(sn_generator_forced(gen, gd.tokens, gd.T, P, got, &e) == SN_OK, "%s", e.msg);
    double *row = malloc(sizeof(double) * (size_t)gd.V);
    for (int i = P - 1; i < gd.T; i++) {
        for (int v = 0; v < gd.V; v++) row[v] = got[(i - P + 1) * gd.V + v];
        char what[96];
        snprintf(what, sizeof what, "%s: %s logits at position %d", model, i < P ? "prefill" : "decode", i);
        sn_check_close(what, row, gd.logits + (size_t)i * gd.V, (size_t)gd.V, 1e-4, 1.0);
    }
    free(row);
    free(got);
    free(gd.logits);
    sn_generator_free(gen);
    sn_device_free(dev);
    sn_weights_free(&w);
}

/* _i: model _i % 3, on the interpreter (_i < 3) or the CPU device */
START_TEST(cached) { check_cached(models[_i % 3], _i >= 3); }
END_TEST

/* Greedy generation with the cache (prefill, then decode steps) gives transformers' greedy
 * generate token for token (NAME_greedy.bin: "SNGR", version 1, P, N, P prompt ids, N new). */
static void check_greedy(const char *model, bool cpu) {
    sn_llama_config c;
    sn_weights w;
    read_ok(model, &c, &w);
    char name[64];
    snprintf(name, sizeof name, "%s_greedy.bin", model);
    FILE *f = fopen(fixture(name), "rb");
    ck_assert_msg(f, "cannot open %s", fixture(name));
    int32_t h[4], ids[128];
    ck_assert(fread(h, 4, 4, f) == 4 && h[0] == 0x52474e53 && h[1] == 1 && h[2] > 0 && h[3] > 0 && h[2] + h[3] <= 128);
    int P = h[2], N = h[3];
    ck_assert(fread(ids, 4, (size_t)(P + N), f) == (size_t)(P + N));
    fclose(f);
    sn_err e;
    sn_device *dev = NULL;
    if (cpu) ck_assert_msg(sn_cpu_device_new(0, &dev, &e) == SN_OK, "%s", e.msg);
    sn_generator *gen;
    sn_generator_opts o = {.build = build_kv, .user = &c, .ctx = c.ctx, .n_layer = c.n_layer, .batch = 1};
    ck_assert_msg(sn_generator_new(&o, dev, &gen, &e) == SN_OK, "%s", e.msg);
    weights_src src = {&w, c.vocab};
    ck_assert_msg(sn_generator_load(gen, (sn_weight_source){get_weight, &src}, &e) == SN_OK, "%s", e.msg);
    sn_sample_opts so = {.n_new = N, .temperature = 0, .vocab = c.vocab, .seed = 1};
    int32_t out[128];
    const int32_t *prompt = ids;
    ck_assert_msg(sn_generator_generate(gen, &prompt, &P, &so, out, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < N; i++)
        ck_assert_msg(out[i] == ids[P + i], "%s: new token %d is %d, transformers' %d", model, i, out[i], ids[P + i]);
    sn_generator_free(gen);
    sn_device_free(dev);
    sn_weights_free(&w);
}

/* _i: model _i % 3, on the interpreter (_i < 3) or the CPU device */
START_TEST(greedy) { check_greedy(models[_i % 3], _i >= 3); }
END_TEST

/* What each fixture's config.json says, and the built-in shape it matches. */
START_TEST(configs) {
    sn_llama_config c;
    sn_err e;
    ck_assert_msg(sn_hf_llama_read_config(fixture("llama"), &c, &e) == SN_OK, "%s", e.msg);
    sn_llama_config tiny;
    ck_assert(sn_llama_config_find("llama-tiny", &tiny));
    ck_assert_str_eq(c.name, "llama-tiny"); /* the built-in test shape is the fixture's */
    ck_assert(c.n_kv_head == 2 && c.head_dim == 8 && !c.tie_word_embeddings && !c.qkv_bias && c.rope_factor == 0);
    ck_assert_msg(sn_hf_llama_read_config(fixture("llama3"), &c, &e) == SN_OK, "%s", e.msg);
    ck_assert_str_eq(c.name, "llama-custom");
    ck_assert(c.tie_word_embeddings && c.rope_factor == 8 && c.rope_original_ctx == 16 && c.rope_theta == 500000);
    ck_assert_msg(sn_hf_llama_read_config(fixture("qwen2"), &c, &e) == SN_OK, "%s", e.msg);
    ck_assert(c.qkv_bias && c.tie_word_embeddings && c.rope_theta == 1e6f);
    ck_assert(sn_hf_is_llama(fixture("qwen2")) && sn_hf_is_llama(fixture("llama")));
    ck_assert(!sn_hf_is_llama(SN_TEST_FIXTURES "/hf/tiny")); /* GPT-2 */
    const char *names[] = {"smollm2-135m", "smollm2-360m", "tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b"};
    static const long long params[] = {134515008LL, 361821120LL, 1100048384LL, 1235814400LL, 494032768LL};
    for (int i = 0; i < 5; i++) { /* the published parameter counts */
        ck_assert(sn_llama_config_find(names[i], &c));
        sn_graph *g = sn_graph_new();
        sn_llama m;
        ck_assert_msg(sn_llama_build(g, &c, 1, 4, &m, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_graph_param_count(g) == params[i], "%s: %lld parameters", names[i],
                      (long long)sn_graph_param_count(g));
        sn_graph_free(g);
    }
}
END_TEST

/* d loss / d param of the whole tiny model (tied, llama3 rope, q/k/v biases, grouped heads)
 * against central differences, three elements of every parameter, in the exact interpreter. */
START_TEST(gradient) {
    sn_llama_config c;
    ck_assert(sn_llama_config_find("llama-tiny", &c));
    c.vocab = 32;
    c.tie_word_embeddings = _i & 1;
    c.qkv_bias = _i & 1;
    if (_i & 1) c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_ctx = 4;
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    ck_assert_msg(sn_llama_build(g, &c, 2, 16, &m, &e) == SN_OK, "%s", e.msg);
    if (_i & 2) { /* q, k, v and gate, up as one product each (passes/siblings.c) */
        sn_graph *h;
        int joined;
        ck_assert_msg(sn_pass_siblings(g, &h, &joined, &e) == SN_OK, "%s", e.msg);
        ck_assert_int_eq(joined, 5 * c.n_layer);
        m.loss = h->loss;
        m.idx = NULL, m.targets = NULL;
        for (int i = 0; i < h->n_nodes; i++)
            if (h->nodes[i]->op == SN_OP_INPUT) {
                if (!strcmp(h->nodes[i]->name, "idx")) m.idx = h->nodes[i];
                if (!strcmp(h->nodes[i]->name, "targets")) m.targets = h->nodes[i];
            }
        sn_graph_free(g);
        g = h;
    }
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    sn_interp *it = sn_interp_new(g, true);
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    ck_assert_int_eq(np, 2 + 9 * 2 + !(_i & 1) + (_i & 1 ? 3 * 2 : 0));
    double *vals[64];
    for (int p = 0; p < np; p++) {
        int64_t n = sn_numel(params[p]);
        sn_rng r = sn_rng_seed(100 + (uint64_t)p);
        vals[p] = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) /* norms near 1, the rest of scale 0.3 */
            vals[p][i] = (params[p]->rank == 1 && !strstr(params[p]->name, "bias") ? 1.0 : 0.0) +
                         0.3 * ((double)sn_rng_below(&r, 2001) / 1000.0 - 1.0);
        ck_assert(sn_interp_set_f64(it, params[p], vals[p], &e) == SN_OK);
    }
    int32_t x[32], y[32]; /* 32 rows: the siblings pass joins products over as many */
    for (int i = 0; i < 32; i++) x[i] = (i * 7 + 3) % 32, y[i] = (i * 5 + 1) % 32;
    ck_assert(sn_interp_set_i32(it, m.idx, x, &e) == SN_OK && sn_interp_set_i32(it, m.targets, y, &e) == SN_OK);
    sn_rng r = sn_rng_seed(99);
    for (int p = 0; p < np; p++) {
        int64_t n = sn_numel(params[p]);
        ck_assert(sn_interp_run(it, &e) == SN_OK);
        const double *grad = sn_interp_value(it, params[p]->grad);
        for (int k = 0; k < 3; k++) {
            int64_t at = (int64_t)sn_rng_below(&r, (uint64_t)n);
            double analytic = grad[at], h = 1e-5, keep = vals[p][at], up, down;
            vals[p][at] = keep + h;
            sn_interp_set_f64(it, params[p], vals[p], &e);
            ck_assert(sn_interp_run(it, &e) == SN_OK);
            up = sn_interp_value(it, m.loss)[0];
            vals[p][at] = keep - h;
            sn_interp_set_f64(it, params[p], vals[p], &e);
            ck_assert(sn_interp_run(it, &e) == SN_OK);
            down = sn_interp_value(it, m.loss)[0];
            vals[p][at] = keep;
            sn_interp_set_f64(it, params[p], vals[p], &e);
            double numeric = (up - down) / (2 * h);
            ck_assert_msg(fabs(analytic - numeric) <= 1e-6 + 1e-4 * fabs(numeric),
                          "%s[%lld]: autodiff %.9g, finite differences %.9g", params[p]->name,
                          (long long)at, analytic, numeric);
            ck_assert(sn_interp_run(it, &e) == SN_OK);
            grad = sn_interp_value(it, params[p]->grad);
        }
    }
    for (int p = 0; p < np; p++) free(vals[p]);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* The training graph through the pipeline: every layer's written-out attention is fused into a
 * flash-attention op reading its key/value heads unrepeated (grouped-query). */
START_TEST(attention_fused) {
    sn_llama_config c;
    ck_assert(sn_llama_config_find("llama-tiny", &c));
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    ck_assert_msg(sn_llama_build(g, &c, 2, 16, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_pipeline_stats st = {0};
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(st.attention_fused, c.n_layer);
    ck_assert_int_eq(st.kv_unrepeated, c.n_layer);
    sn_graph_free(g);
}
END_TEST

/* Matmuls of node list [from, to) of g. */
static int products(const sn_graph *g, int from, int to) {
    int n = 0;
    for (int i = from; i < to; i++) n += g->nodes[i]->op == SN_OP_MATMUL;
    return n;
}

/* g through the graph passes for training on a CPU target that joins siblings as CUDA's does
 * (the CPU's own keeps a product a weight), bf16 (its frozen base in bf16 with base16) or f32,
 * under checkpoint policy `policy`; `joined` products made one. */
static void compile_joined(sn_graph *g, bool bf16, bool base16, int policy, int joined) {
    sn_pipeline_opts o = sn_pipeline_defaults();
    sn_target t = sn_target_cpu();
    t.fuse_siblings = true;
    o.target = &t;
    o.backward = true;
    o.precision = bf16 ? SN_PRECISION_BF16 : SN_PRECISION_FP32;
    o.base16 = base16;
    o.checkpoint = policy;
    sn_pipeline_stats st = {0};
    sn_err e;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(st.siblings_fused, joined);
}

/* llama-tiny (vocabulary TINY_VOCAB, q, k, v biases when bias) built for training at TINY_B x
 * TINY_T, in c, and through the graph passes at bf16 or f32, with checkpoint policy `policy`. */
static sn_graph *tiny_llama_training(bool bias, bool bf16, int policy, sn_llama_config *c) {
    ck_assert(sn_llama_config_find("llama-tiny", c));
    c->vocab = TINY_VOCAB;
    c->qkv_bias = bias;
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    ck_assert_msg(sn_llama_build(g, c, TINY_B, TINY_T, &m, &e) == SN_OK, "%s", e.msg);
    /* a layer: q, k, v, o, gate, up, down and the written-out attention's two; the head */
    ck_assert_int_eq(products(g, 0, g->n_nodes), 9 * c->n_layer + 1);
    compile_joined(g, bf16, false, policy, 5 * c->n_layer); /* q, k, v and gate, up */
    /* the forward's products: q k v, o, gate up, down (the attention fused); the head */
    ck_assert_int_eq(products(g, 0, g->n_forward), 4 * c->n_layer + 1);
    return g;
}

/* The frozen blocks of p (program.h): read in place (no kernel writes one), each a persistent
 * alias of its first part with its parts one after the other; how many. */
static int blocks_in_place(const sn_program *p) {
    int blocks = 0;
    for (int k = 0; k < p->n_kernels; k++)
        for (int o = 0; o < p->kernels[k]->n_out; o++)
            ck_assert(!sn_frozen_block(p->kernels[k]->args[o]));
    for (int v = 0; v < p->n_values; v++) {
        const sn_value *val = &p->values[v];
        if (!val->node || !sn_frozen_block(val->node)) continue;
        blocks++;
        ck_assert(val->persistent && val->alias >= 0);
        int64_t at = p->values[val->alias].offset;
        ck_assert_int_eq(val->offset, at);
        for (int k = 0; k < val->node->n_in; k++) {
            const sn_value *part = &p->values[p->value_of[val->node->in[k]->id]];
            ck_assert_int_eq(part->offset, at);
            at += part->bytes;
        }
    }
    return blocks;
}

/* A layer's q, k, v (and gate, up) are one product of the normed x where the target fuses
 * siblings (passes/siblings.c; CUDA's): 4 forward GEMMs a layer where there were 7, and in the backward one for
 * x's gradient of each, each weight's gradient its own GEMM reading its columns of the joint
 * gradient in place (no kernel copies a weight's rows out of a joint weight gradient; the
 * biases' gradients are their parts of one column sum, vectors copied); the compiled program,
 * f32 and bf16, with and without q, k, v biases (Qwen2's), computes the interpreter's loss and
 * every gradient. Generation's graphs keep a product a weight. */
START_TEST(projections_fused) {
    sn_llama_config c;
    bool bf16 = _i & 2;
    sn_graph *g = tiny_llama_training(_i & 1, bf16, SN_RECOMPUTE_NONE, &c);
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    int gemms = 0, copies = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        gemms += ker->kind == SN_KER_GEMM;
        for (int o = 0; ker->kind == SN_KER_POINTWISE && o < ker->n_out; o++) {
            const sn_node *n = ker->instr[ker->store[o]].node; /* what the output stores */
            copies += n->op == SN_OP_SLICE && n->rank > 1;
        }
    }
    /* a layer: 4 forward, 4 for x's gradients, 7 weight gradients; the head: 3 */
    ck_assert_int_eq(gemms, 15 * c.n_layer + 3);
    ck_assert_int_eq(copies, 0);
    /* bf16: the products read the weights' shadows where AdamW writes them, q k v's and gate
       up's one after the other (in either order of the trained parameters) */
    ck_assert_int_eq(blocks_in_place(p), bf16 ? 2 * c.n_layer : 0);
    sn_program_free(p);
    sn_pipeline_opts rev = {.param_order = SN_PARAM_ORDER_REVERSED};
    ck_assert_msg(sn_pipeline_kernels(g, &rev, &p, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(blocks_in_place(p), bf16 ? 2 * c.n_layer : 0);
    sn_program_free(p);
    /* the CPU's own target keeps them apart: 7 forward products a layer */
    sn_graph *h = sn_graph_new();
    sn_llama m;
    ck_assert_msg(sn_llama_build(h, &c, TINY_B, TINY_T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_pipeline_stats st = {0};
    ck_assert_msg(sn_compile(h, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(st.siblings_fused, 0);
    sn_graph_free(h);
    tiny_check_compiled_tol(g, 5 + (uint64_t)_i, bf16 ? "llama fused projections, bf16"
                                                      : "llama fused projections", bf16 ? 4 * 0x1p-9 : 1e-4);
    sn_graph_free(g);
    g = sn_graph_new();
    ck_assert_msg(sn_llama_build_kv(g, &c, 1, 1, true, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(products(g, 0, g->n_nodes), 7 * c.n_layer + 1);
    sn_graph_free(g);
}
END_TEST

/* Under block checkpointing the concatenated weights are copied again for the backward of
 * every recomputed block (recompute.c weights_copy), not kept from the forward, and the
 * compiled program still computes the interpreter's loss and gradients. */
START_TEST(projections_fused_checkpointed) {
    sn_llama_config c;
    sn_graph *g = tiny_llama_training(false, _i, SN_RECOMPUTE_BLOCK, &c);
    int joined = 0, read_late = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_CONCAT || n->in[0]->op == SN_OP_CONCAT || sn_node_dim(n, 0) < 64) continue;
        if (i < g->n_forward) joined++;
        else read_late++; /* made again after the forward */
    }
    ck_assert_int_eq(joined, 2 * c.n_layer);
    ck_assert_int_ge(read_late, 2);
    tiny_check_compiled_tol(g, 9, _i ? "llama fused projections, bf16, checkpointed"
                                     : "llama fused projections, checkpointed",
                            _i ? 4 * 0x1p-9 : 1e-4);
    sn_graph_free(g);
}
END_TEST

/* llama-tiny with LoRA adapters of rank 4 (alpha 8: the path scaled by 2) on every projection,
 * vocabulary TINY_VOCAB, q, k, v biases (frozen) when bias, the frozen base stored in bf16 (the
 * base16 pass) when base16; its forward graph. */
static sn_graph *tiny_llama_lora(bool bias, bool base16, sn_llama_config *c, sn_llama *m) {
    ck_assert(sn_llama_config_find("llama-tiny", c));
    c->vocab = TINY_VOCAB;
    c->qkv_bias = bias;
    sn_graph *g = sn_graph_new();
    sn_err e;
    sn_llama_lora l = {.lora = {.rank = 4, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_llama_build_lora(g, c, TINY_B, TINY_T, &l, m, &e) == SN_OK, "%s", e.msg);
    if (!base16) return g;
    sn_graph *h;
    int stored;
    ck_assert_msg(sn_pass_base16(g, SN_BF16, &h, &stored, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(stored, 7 * c->n_layer + !c->tie_word_embeddings); /* and the LM head */
    sn_graph_free(g);
    return h;
}

/* The node of g named `name` of op `op`. */
static sn_node *named(const sn_graph *g, sn_op op, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == op && g->nodes[i]->name && !strcmp(g->nodes[i]->name, name))
            return g->nodes[i];
    ck_abort_msg("no node %s", name);
    return NULL;
}

/* The loss and every trained parameter's gradient of g (backward appended) in the exact
 * interpreter, each parameter drawn by its name's hash (the same values in any graph). */
static double *lora_gradients(sn_graph *g, int *n_out) {
    sn_err e;
    sn_interp *it = sn_interp_new(g, true);
    int32_t x[TINY_B * TINY_T], y[TINY_B * TINY_T];
    for (int i = 0; i < TINY_B * TINY_T; i++) x[i] = (i * 7 + 3) % TINY_VOCAB, y[i] = (i * 5 + 1) % TINY_VOCAB;
    ck_assert(sn_interp_set_i32(it, named(g, SN_OP_INPUT, "idx"), x, &e) == SN_OK);
    ck_assert(sn_interp_set_i32(it, named(g, SN_OP_INPUT, "targets"), y, &e) == SN_OK);
    sn_node *params[128];
    int np = sn_graph_params(g, params, 128);
    for (int p = 0; p < np; p++) {
        int64_t n = sn_numel(params[p]);
        uint64_t seed = 7;
        for (const char *c = params[p]->name; *c; c++) seed = seed * 131 + (uint64_t)*c;
        sn_rng r = sn_rng_seed(seed);
        double *v = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) /* norms near 1, the rest (B too: not zero) of scale 0.3 */
            v[i] = (params[p]->rank == 1 && strstr(params[p]->name, "norm") ? 1.0 : 0.0) +
                   0.3 * ((double)sn_rng_below(&r, 2001) / 1000.0 - 1.0);
        ck_assert_msg(sn_interp_set_f64(it, params[p], v, &e) == SN_OK, "%s", e.msg);
        free(v);
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    int n = 1;
    for (int p = 0; p < np; p++) n += params[p]->grad ? (int)sn_numel(params[p]) : 0;
    double *out = malloc(sizeof(double) * (size_t)n);
    out[0] = sn_interp_value(it, g->loss)[0];
    for (int p = 0, at = 1; p < np; p++) { /* in graph order, which the passes keep */
        if (!params[p]->grad) continue;
        memcpy(out + at, sn_interp_value(it, params[p]->grad), sizeof(double) * (size_t)sn_numel(params[p]));
        at += (int)sn_numel(params[p]);
    }
    sn_interp_free(it);
    *n_out = n;
    return out;
}

/* With LoRA the siblings pass joins the frozen q, k, v (and gate, up) with their adapters: one
 * base product of the concatenated weights plus h @ D, D the adapters' B in a block-diagonal
 * matrix (passes/siblings.c). The joined graph's loss and every adapter's gradient equal the
 * graph's as built (the exact interpreter: D's zeros add nothing), f32 and bf16 bases, with
 * and without q, k, v biases; D's gradient is one GEMM, each B's its block (autodiff's concat
 * rule); the compiled program (a target that joins siblings, on the CPU device) computes the
 * interpreter's loss and gradients. */
START_TEST(lora_projections_fused) {
    sn_llama_config c;
    sn_llama m;
    sn_err e;
    bool bias = _i & 1, base16 = _i & 2;
    sn_graph *g = tiny_llama_lora(bias, base16, &c, &m), *h;
    int joined;
    ck_assert_msg(sn_pass_siblings(g, &h, &joined, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(joined, 5 * c.n_layer);
    /* a layer: q k v's x @ A, adapters and base; o's three; gate up's three; down's three */
    ck_assert_int_eq(products(h, 0, h->n_nodes), 12 * c.n_layer + 2 * c.n_layer + 1);
    ck_assert_msg(sn_backward(g, g->loss, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(h, h->loss, &e) == SN_OK, "%s", e.msg);
    int na, nb;
    double *a = lora_gradients(g, &na), *b = lora_gradients(h, &nb);
    ck_assert_int_eq(na, nb);
    /* the loss, and a layer's A and B: r (in + out) each, q 32 + 32, k and v 32 + 16, o 32 + 32,
       gate and up 32 + 64, down 64 + 32 */
    ck_assert_int_eq(na, 1 + 4 * (64 + 2 * 48 + 64 + 2 * 96 + 96) * c.n_layer);
    double worst = 0;
    for (int i = 0; i < na; i++) worst = fmax(worst, fabs(a[i] - b[i]) / (1e-6 + fabs(a[i])));
    ck_assert_msg(worst < 1e-9, "joined LoRA graph differs: worst relative %.3g", worst);
    free(a);
    free(b);
    sn_graph_free(g);
    sn_graph_free(h);
    /* through the pipeline (bf16 with its base in bf16, or f32) on a target that joins them */
    g = tiny_llama_lora(bias, false, &c, &m);
    compile_joined(g, base16, base16, SN_RECOMPUTE_NONE, 5 * c.n_layer);
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    int gemms = 0, pads = 0, slices = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        gemms += p->kernels[k]->kind == SN_KER_GEMM;
        pads += strstr(p->kernels[k]->name, "_pad") != NULL;
        slices += strstr(p->kernels[k]->name, "_slice") != NULL;
    }
    /* the adapters' small kernels gathered by shape across the layers (join_siblings): D's
       padded parts, q k v's (4, 64) and gate up's (4, 128), hoisted to the step's start, two
       kernels; the B blocks of D's gradient, (4, 16), (4, 32), (4, 64), and the A parts of
       dA's, sunk to its end, four (each layer's apart: 4, and 8 or more) */
    ck_assert_int_eq(pads, 2);
    ck_assert_int_eq(slices, 4);
    /* the frozen weights read in place: q k v's and gate up's in each layer's forward, and
       again for its backward (remat.c) but layer 0's q k v (no dx); the q k v biases' */
    ck_assert_int_eq(blocks_in_place(p), 2 * c.n_layer + 2 * c.n_layer - 1 + (bias ? c.n_layer : 0));
    /* a layer's forward 12 (above), backward 5 a group: dh, dB (q k v's and gate up's: D's),
       dA, dx and dh A^T; but layer 0's q k v no dx (the embeddings frozen); the head 2 (its
       base frozen) */
    ck_assert_int_eq(gemms, (12 + 4 * 5) * c.n_layer - 2 + 2);
    sn_program_free(p);
    tiny_check_compiled_tol(g, 11 + (uint64_t)_i, base16 ? "llama LoRA joined, bf16" : "llama LoRA joined",
                            base16 ? 4 * 0x1p-9 : 1e-4);
    sn_graph_free(g);
}
END_TEST

/* A program reading frozen blocks (the joined LoRA graph) that shares its parameters with an
 * owner keeping them apart (the CPU target's program of the same model, q, k, v with biases
 * between their weights) is refused by name (runtime/exec.c), not run over the wrong bytes. */
START_TEST(frozen_blocks_shared_apart) {
    sn_llama_config c;
    sn_llama m;
    sn_err e;
    sn_graph *g = tiny_llama_lora(true, false, &c, &m), *h = tiny_llama_lora(true, false, &c, &m);
    compile_joined(g, false, false, SN_RECOMPUTE_NONE, 5 * c.n_layer);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    ck_assert_msg(sn_compile(h, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_program *pg, *ph;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &pg, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(h, &(sn_pipeline_opts){0}, &ph, NULL, &e) == SN_OK, "%s", e.msg);
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(1, &d, &e) == SN_OK, "%s", e.msg);
    sn_exec *owner, *x = NULL;
    ck_assert_msg(sn_exec_new(d, ph, &owner, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_exec_new_sharing(d, pg, owner, &x, &e), SN_ERR_UNSUPPORTED);
    ck_assert_ptr_null(x);
    ck_assert_msg(strstr(e.msg, "q_proj.weight") && strstr(e.msg, "keeps them apart"), "%s", e.msg);
    sn_exec_free(owner);
    sn_device_free(d);
    sn_program_free(pg);
    sn_program_free(ph);
    sn_graph_free(g);
    sn_graph_free(h);
}
END_TEST

/* The imported model trains on the CPU device: ten steps on one batch lower its loss, and the
 * first step's loss is the imported model's. */
START_TEST(trains) {
    sn_llama_config c;
    sn_weights w;
    read_ok("llama", &c, &w);
    enum { B = 2, T = 16 };
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    ck_assert_msg(sn_llama_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(0, &d, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    o.lr = 1e-2f;
    o.warmup = 0;
    o.device = d;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    ck_assert_msg(sn_weights_init_trainer(&w, t, c.vocab, NULL, &e) == SN_OK, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (i * 37 + 5) % 256, y[i] = (x[i] * 3 + 1) % 256;
    double first = 0, last = 0;
    for (int s = 0; s < 10; s++) {
        sn_step_stats st;
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        if (!s) first = st.loss;
        last = st.loss;
    }
    ck_assert_msg(last < first - 0.5, "loss %.4f -> %.4f after 10 steps", first, last);
    sn_trainer_free(t);
    sn_device_free(d);
    sn_graph_free(g);
    sn_weights_free(&w);
}
END_TEST

/* ---- refusals ---- */

static char *tmp_dir(void) {
    char *d = strdup("/tmp/sn_test_llama_XXXXXX");
    ck_assert(mkdtemp(d));
    return d;
}

static void rm_rf(const char *d) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
}

/* A copy of fixture model's directory whose config.json has `from` replaced by `to`; the
 * error reading it. */
static sn_status read_edited(const char *model, const char *from, const char *to, sn_err *e) {
    char *d = tmp_dir(), cmd[8400], path[4300];
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/", fixture(model), d);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/config.json", d);
    FILE *f = fopen(path, "rb");
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *at = strstr(text, from), out[8400];
    ck_assert_msg(at, "config.json of %s lacks %s", model, from);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    f = fopen(path, "wb");
    ck_assert(fputs(out, f) >= 0 && fclose(f) == 0);
    sn_llama_config c;
    sn_weights w;
    sn_status s = sn_hf_llama_read(d, &c, &w, e);
    if (!s) sn_weights_free(&w);
    rm_rf(d);
    free(d);
    return s;
}

START_TEST(bad_configs) {
    static const struct {
        const char *model, *from, *to, *says;
        sn_status code;
    } cases[] = {
        {"llama", "\"model_type\": \"llama\"", "\"model_type\": \"mistral\"", "\"mistral\"", SN_ERR_UNSUPPORTED},
        {"llama", "\"LlamaForCausalLM\"", "\"LlamaForSequenceClassification\"", "architectures", SN_ERR_UNSUPPORTED},
        {"llama", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "rope_parameters.rope_type is yarn", SN_ERR_UNSUPPORTED},
        {"llama", "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias", SN_ERR_UNSUPPORTED},
        {"llama", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act is gelu", SN_ERR_UNSUPPORTED},
        {"qwen2", "\"use_sliding_window\": false", "\"use_sliding_window\": true", "use_sliding_window", SN_ERR_UNSUPPORTED},
        {"llama", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "key/value heads must divide", SN_ERR_INVALID},
        {"llama", "\"hidden_size\": 32", "\"hidden_size\": \"32\"", "hidden_size is not a whole number", SN_ERR_INVALID},
        /* the weights of another model */
        {"llama", "\"intermediate_size\": 64", "\"intermediate_size\": 48",
         "tensor model.layers.0.mlp.down_proj.weight is [32,64]; config.json", SN_ERR_INVALID},
        {"llama", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", "no tensor model.layers.2.", SN_ERR_INVALID},
        {"llama", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1", "tensor model.layers.1.", SN_ERR_INVALID},
        {"llama", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true", "lm_head.weight differs", SN_ERR_UNSUPPORTED},
        {"llama3", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "no tensor lm_head.weight", SN_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sn_err e;
        sn_status s = read_edited(cases[i].model, cases[i].from, cases[i].to, &e);
        ck_assert_msg(s == cases[i].code, "case %zu (%s): status %d: %s", i, cases[i].to, s, s ? e.msg : "");
        ck_assert_has(e.msg, cases[i].says);
    }
}
END_TEST

/* A shard the index names is missing: the shard and a tensor it holds are named. */
START_TEST(missing_shard) {
    char *d = tmp_dir(), cmd[8400];
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/ && rm '%s/model-00002-of-00003.safetensors'", fixture("qwen2"), d, d);
    ck_assert_int_eq(system(cmd), 0);
    sn_llama_config c;
    sn_weights w;
    sn_err e;
    ck_assert_int_eq(sn_hf_llama_read(d, &c, &w, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "model-00002-of-00003.safetensors");
    ck_assert_has(e.msg, "download every shard");
    rm_rf(d);
    free(d);
}
END_TEST

static bool same_config(const sn_llama_config *a, const sn_llama_config *b) {
    return a->vocab == b->vocab && a->ctx == b->ctx && a->n_layer == b->n_layer && a->n_head == b->n_head &&
           a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim && a->hidden == b->hidden &&
           a->intermediate == b->intermediate && a->rms_norm_eps == b->rms_norm_eps &&
           a->rope_theta == b->rope_theta && a->rope_factor == b->rope_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_ctx == b->rope_original_ctx &&
           a->tie_word_embeddings == b->tie_word_embeddings && a->qkv_bias == b->qkv_bias;
}

/* Import, export (sn_hf_llama_write), import: the same configuration and every tensor bit for
 * bit; the export never replaces a file. */
START_TEST(round_trip) {
    sn_llama_config a, b;
    sn_weights wa, wb;
    sn_err e;
    read_ok(models[_i], &a, &wa);
    char *d = tmp_dir(), out[4200];
    snprintf(out, sizeof out, "%s/hf", d);
    ck_assert_msg(sn_hf_llama_write(&a, &wa, out, &e) == SN_OK, "%s", e.msg);
    read_ok(out, &b, &wb);
    ck_assert(same_config(&a, &b));
    ck_assert_str_eq(a.name, b.name);
    ck_assert_int_eq(wa.n, wb.n);
    for (int i = 0; i < wa.n; i++) {
        const sn_weight *x = &wa.w[i], *y = sn_weights_find(&wb, x->name);
        ck_assert_msg(y, "%s missing", x->name);
        ck_assert(x->rank == y->rank && x->shape[0] == y->shape[0] && x->shape[1] == y->shape[1]);
        ck_assert_msg(!memcmp(x->data, y->data, 4 * (size_t)(x->shape[0] * x->shape[1])), "%s differs", x->name);
    }
    ck_assert_int_eq(sn_hf_llama_write(&a, &wa, out, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "exists: it is not replaced");
    sn_weights_free(&wa);
    sn_weights_free(&wb);
    rm_rf(d);
    free(d);
}
END_TEST

/* The hub's files are transformers 4's: rope_theta beside rope_scaling, not rope_parameters.
 * The llama3 fixture written that way computes the same logits. */
START_TEST(transformers4_config) {
    char *d = tmp_dir(), cmd[8400];
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/ && sed -i -e '/\"rope_theta\": 500000.0,/d' -e "
             "'s/\"rope_parameters\"/\"rope_theta\": 500000.0, \"rope_scaling\"/' '%s/config.json'",
             fixture("llama3"), d, d);
    ck_assert_int_eq(system(cmd), 0);
    char path[4300], text[4096];
    snprintf(path, sizeof path, "%s/config.json", d);
    FILE *f = fopen(path, "rb");
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    ck_assert_has(text, "\"rope_theta\": 500000.0, \"rope_scaling\": {");
    ck_assert(!strstr(text, "rope_parameters"));
    sn_llama_config c;
    sn_err e;
    ck_assert_msg(sn_hf_llama_read_config(d, &c, &e) == SN_OK, "%s", e.msg);
    ck_assert(c.rope_theta == 500000 && c.rope_factor == 8 && c.rope_original_ctx == 16);
    check_logits_on("llama3", d, NULL);
    rm_rf(d);
    free(d);
}
END_TEST

/* A configuration as a checkpoint keeps it (model.config): every built-in shape, and one with
 * llama3 rope scaling and Qwen2's biases, read back field for field (floats exactly); damaged
 * texts refused saying so. */
START_TEST(config_text_round_trip) {
    int shapes = 0;
    sn_llama_config c, back;
    for (int i = 0; sn_llama_config_at(i, &c); i++, shapes++) {
        const char *name = c.name;
        char text[512];
        int n = sn_llama_config_format(&c, text, sizeof text);
        ck_assert(n > 0 && n < (int)sizeof text);
        sn_err e;
        ck_assert_msg(sn_llama_config_parse(text, &back, &e) == SN_OK, "%s: %s", name, e.msg);
        ck_assert_str_eq(back.name, "llama-custom");
        bool same = back.vocab == c.vocab && back.ctx == c.ctx && back.n_layer == c.n_layer &&
                    back.n_head == c.n_head && back.n_kv_head == c.n_kv_head &&
                    back.head_dim == c.head_dim && back.hidden == c.hidden &&
                    back.intermediate == c.intermediate && back.rms_norm_eps == c.rms_norm_eps &&
                    back.rope_theta == c.rope_theta && back.rope_factor == c.rope_factor &&
                    back.rope_low_freq_factor == c.rope_low_freq_factor &&
                    back.rope_high_freq_factor == c.rope_high_freq_factor &&
                    back.rope_original_ctx == c.rope_original_ctx &&
                    back.tie_word_embeddings == c.tie_word_embeddings && back.qkv_bias == c.qkv_bias;
        ck_assert_msg(same, "%s: %s read back differs", name, text);
    }
    ck_assert_int_eq(shapes, 6);
    sn_err e;
    ck_assert(sn_llama_config_find("llama-3.2-1b", &c));
    ck_assert(c.rope_factor > 0);
    c.qkv_bias = true;
    c.rms_norm_eps = 1.234567e-6f;
    char text[512];
    sn_llama_config_format(&c, text, sizeof text);
    ck_assert(sn_llama_config_parse(text, &back, &e) == SN_OK);
    ck_assert(back.rms_norm_eps == c.rms_norm_eps && back.rope_low_freq_factor == c.rope_low_freq_factor && back.qkv_bias);
    static const char *const bad[] = {NULL, "", "vocab=256", "vocab=256 ctx=64 layers=2 heads=4 kv_heads=3",
                                      "nonsense"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert(sn_llama_config_parse(bad[i], &back, &e) == SN_ERR_INVALID);
        ck_assert_has(e.msg, "the file is damaged");
    }
    text[strlen(text) - 1] = '7'; /* qkv_bias=7 */
    ck_assert(sn_llama_config_parse(text, &back, &e) == SN_ERR_INVALID);
    strcat(text, " more");
    ck_assert(sn_llama_config_parse(text, &back, &e) == SN_ERR_INVALID);
    /* a text sinter writes whose shape cannot be built: the check's message */
    sn_llama_config_find("llama-tiny", &c);
    c.n_kv_head = 3;
    sn_llama_config_format(&c, text, sizeof text);
    ck_assert(sn_llama_config_parse(text, &back, &e) == SN_ERR_INVALID);
    ck_assert_has(e.msg, "the key/value heads must divide the heads");
}
END_TEST

int main(void) {
    Suite *s = suite_create("hf_llama");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, logits, 0, 6);
    tcase_add_loop_test(tc, logits_standin, 0, 3);
    tcase_add_loop_test(tc, cached, 0, 6);
    tcase_add_loop_test(tc, greedy, 0, 6);
    tcase_add_test(tc, configs);
    tcase_add_test(tc, config_text_round_trip);
    tcase_add_loop_test(tc, gradient, 0, 4);
    tcase_add_test(tc, attention_fused);
    tcase_add_loop_test(tc, projections_fused, 0, 4);
    tcase_add_loop_test(tc, projections_fused_checkpointed, 0, 2);
    tcase_add_loop_test(tc, lora_projections_fused, 0, 4);
    tcase_add_test(tc, frozen_blocks_shared_apart);
    tcase_add_test(tc, trains);
    tcase_add_test(tc, bad_configs);
    tcase_add_test(tc, missing_shard);
    tcase_add_test(tc, transformers4_config);
    tcase_add_loop_test(tc, round_trip, 0, 3);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
