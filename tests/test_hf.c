/* test_hf.c: pretrained GPT-2 weights in and out (io/weights.h) against fixtures that
 * transformers made (tools/make_hf_fixtures.py, tests/fixtures/hf): the imported model's logits
 * equal transformers' on the CPU device and the interpreter; sharded equals single; llm.c's bf16
 * file; import, export, import bit for bit (Hugging Face, llm.c, and through a checkpoint); a
 * LoRA checkpoint merged on export computes the unmerged model's logits; and bad files, each
 * refused with a message naming the tensor or file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/lora.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "passes/pipeline.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "train/checkpoint.h"
#include "harness.h"
#include "peft_check.h"

#ifndef SN_TEST_FIXTURES
#define SN_TEST_FIXTURES "tests/fixtures"
#endif

static const char *fixture(const char *name) {
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/hf/%s", SN_TEST_FIXTURES, name);
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

static sn_weights read_ok(const char *path) {
    sn_weights w;
    sn_err e;
    ck_assert_msg(sn_weights_read(path, &w, &e) == SN_OK, "%s: %s", path, e.msg);
    return w;
}

static void rm_rf(const char *d);

/* Where a forward's parameters come from: a weight set, or a trainer. */
typedef struct {
    const sn_weights *w;
    const sn_trainer *t;
} source;

static void fill(const source *src, const sn_node *p, int64_t vocab, float *dst) {
    sn_err e;
    if (src->w) {
        ck_assert_msg(sn_weights_fill(src->w, p, vocab, dst, &e) == SN_OK, "%s", e.msg);
        return;
    }
    int i = sn_trainer_find_param(src->t, p->name);
    ck_assert_msg(i >= 0, "the trainer has no %s", p->name);
    ck_assert_msg(sn_trainer_get_param(src->t, i, SN_PARAM_WEIGHTS, dst, &e) == SN_OK, "%s", e.msg);
}

/* The logits (T, V) of GPT-2 c (with LoRA when lora) on tokens, compiled with the trainer's
 * default rewrites (vocabulary padded, attention fused) for dev (NULL: the interpreter). */
static void forward(const sn_gpt2_config *c, const sn_gpt2_lora *lora, const source *src,
                    const int32_t *tokens, int T, sn_device *dev, double *out) {
    sn_err e;
    sn_device *own = NULL;
    if (!dev) {
        ck_assert_msg(sn_interp_device_new(&own, &e) == SN_OK, "%s", e.msg);
        dev = own;
    }
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    ck_assert_msg(sn_gpt2_build_lora(g, c, 1, T, lora, &m, &e) == SN_OK, "%s", e.msg);
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
            fill(src, n, c->vocab, v);
            ck_assert_msg(sn_exec_set(x, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
    }
    ck_assert_msg(sn_exec_run(x, &e) == SN_OK, "%s", e.msg);
    const sn_node *logits = g->outputs[0];
    ck_assert_int_eq(logits->rank, 3);
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

static void check_logits(const char *model, const char *logits_file, bool cpu) {
    sn_weights w = read_ok(fixture(model));
    golden gd = read_golden(logits_file);
    ck_assert_int_eq(gd.V, w.config.vocab);
    sn_err e;
    sn_device *dev = NULL;
    if (cpu) ck_assert_msg(sn_cpu_device_new(0, &dev, &e) == SN_OK, "%s", e.msg);
    double *got = malloc(sizeof(double) * (size_t)(gd.T * gd.V));
    forward(&w.config, NULL, &(source){.w = &w}, gd.tokens, gd.T, dev, got);
    sn_check_close(logits_file, got, gd.logits, (size_t)(gd.T * gd.V), 1e-4, 1.0);
    free(got);
    free(gd.logits);
    sn_device_free(dev);
    sn_weights_free(&w);
}

START_TEST(logits_interp) { check_logits("tiny", "tiny_logits.bin", false); }
END_TEST

START_TEST(logits_cpu) { check_logits("tiny", "tiny_logits.bin", true); }
END_TEST

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
        printf("test_hf: logits_standin skipped: no NVRTC for the stand-in to wrap\n");
        return;
    }
    char cache[] = "/tmp/sn_test_hf_cache_XXXXXX";
    ck_assert(mkdtemp(cache));
    sn_cuda_opts o = {.cache_dir = cache};
    sn_device *dev = NULL;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &dev, &e) == SN_OK, "%s", e.msg);
    sn_weights w = read_ok(fixture("tiny"));
    golden gd = read_golden("tiny_logits.bin");
    double *got = malloc(sizeof(double) * (size_t)(gd.T * gd.V));
    forward(&w.config, NULL, &(source){.w = &w}, gd.tokens, gd.T, dev, got);
    sn_check_close("stand-in CUDA", got, gd.logits, (size_t)(gd.T * gd.V), 1e-4, 1.0);
    free(got);
    free(gd.logits);
    sn_weights_free(&w);
    sn_device_free(dev);
    rm_rf(cache);
#endif
}
END_TEST

START_TEST(llmc_bf16_logits) { check_logits("tiny_bf16.bin", "tiny_bf16_logits.bin", true); }
END_TEST

static void same_weights(const sn_weights *a, const sn_weights *b) {
    ck_assert_int_eq(a->n, b->n);
    ck_assert_int_eq(a->n, sn_gpt2_param_count(&a->config));
    ck_assert(!memcmp(&a->config.vocab, &b->config.vocab, sizeof(int)) && a->config.n_embd == b->config.n_embd &&
              a->config.n_head == b->config.n_head && a->config.n_layer == b->config.n_layer &&
              a->config.ctx == b->config.ctx);
    for (int i = 0; i < a->n; i++) {
        const sn_weight *x = &a->w[i], *y = sn_weights_find(b, x->name);
        ck_assert_msg(y, "%s missing", x->name);
        ck_assert(x->rank == y->rank && x->shape[0] == y->shape[0] && x->shape[1] == y->shape[1]);
        ck_assert_msg(!memcmp(x->data, y->data, 4 * (size_t)(x->shape[0] * x->shape[1])), "%s differs", x->name);
    }
}

START_TEST(sharded_equals_single) {
    sn_weights a = read_ok(fixture("tiny")), b = read_ok(fixture("sharded"));
    same_weights(&a, &b);
    ck_assert_str_eq(a.name, "gpt2-custom");
    sn_weights_free(&a);
    sn_weights_free(&b);
}
END_TEST

static char *tmp_dir(void) {
    char *d = strdup("/tmp/sn_test_hf_XXXXXX");
    ck_assert(mkdtemp(d));
    return d;
}

static void rm_rf(const char *d) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*len + 1);
    ck_assert(fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(b, 1, len, f) == len && fclose(f) == 0);
}

/* Hugging Face -> Hugging Face -> llm.c -> read: bit for bit; the safetensors file written is
 * byte for byte the one transformers wrote; no output replaces a file. */
START_TEST(round_trip) {
    sn_err e;
    char *d = tmp_dir(), out[4200], bin[4200], st[4300];
    snprintf(out, sizeof out, "%s/hf", d);
    snprintf(bin, sizeof bin, "%s/model.bin", d);
    snprintf(st, sizeof st, "%s/model.safetensors", out);
    sn_weights a = read_ok(fixture("tiny"));
    ck_assert_msg(sn_weights_write_hf(&a, out, &e) == SN_OK, "%s", e.msg);
    size_t n1, n2;
    char *b1 = slurp(st, &n1), *b2 = slurp(fixture("tiny/model.safetensors"), &n2);
    ck_assert(n1 == n2 && !memcmp(b1, b2, n1));
    free(b1);
    free(b2);
    sn_weights b = read_ok(out);
    same_weights(&a, &b);
    ck_assert_int_eq(sn_weights_write_hf(&a, out, &e), SN_ERR_IO);
    ck_assert_msg(strstr(e.msg, "config.json exists") && strstr(e.msg, "not replaced"), "%s", e.msg);
    ck_assert_msg(sn_weights_write_llmc(&b, bin, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_weights_write_llmc(&b, bin, &e), SN_ERR_IO);
    ck_assert_msg(strstr(e.msg, "exists"), "%s", e.msg);
    sn_weights c = read_ok(bin);
    same_weights(&a, &c);
    sn_weights_free(&a);
    sn_weights_free(&b);
    sn_weights_free(&c);
    rm_rf(d);
    free(d);
}
END_TEST

/* llm.c's file of a GPT-2 whose position table is its largest tensor (maxT x C above Vp x C and
 * above a layer's 4C x C: a byte-level model with a long context and few channels) reads back
 * bit for bit: the reader's one buffer is sized for every tensor it reads (it once held only
 * the largest of wte's rows and the layers' kinds, and wpe's rows ran past it). */
START_TEST(llmc_long_context) {
    sn_err e;
    sn_gpt2_config c = {.name = "gpt2-custom", .vocab = 200, .ctx = 512, .n_layer = 1, .n_head = 1,
                        .n_embd = 8};
    sn_weights a;
    sn_weights_init(&a, &c);
    int64_t shape[2];
    char name[96];
    float v = 0;
    for (int i = 0; i < sn_gpt2_param_count(&c); i++) {
        int rank = sn_gpt2_param_at(&c, i, name, sizeof name, shape);
        int64_t n = shape[0] * (rank > 1 ? shape[1] : 1);
        float *d = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++) d[j] = v += 0.25f;
        ck_assert_msg(sn_weights_add(&a, name, rank, shape, d, &e) == SN_OK, "%s", e.msg);
    }
    ck_assert_msg(sn_weights_check(&a, "the test", &e) == SN_OK, "%s", e.msg);
    char *d = tmp_dir(), bin[4200];
    snprintf(bin, sizeof bin, "%s/long.bin", d);
    ck_assert_msg(sn_weights_write_llmc(&a, bin, &e) == SN_OK, "%s", e.msg);
    sn_weights b = read_ok(bin);
    same_weights(&a, &b);
    sn_weights_free(&a);
    sn_weights_free(&b);
    rm_rf(d);
    free(d);
}
END_TEST

/* A trainer of GPT-2 c on the interpreter (vocabulary padded as the session does). */
static sn_trainer *trainer_of(const sn_gpt2_config *c, const sn_gpt2_lora *lora, sn_graph **g) {
    sn_err e;
    *g = sn_graph_new();
    sn_gpt2 m;
    ck_assert_msg(sn_gpt2_build_lora(*g, c, 2, 8, lora, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.backward = true;
    ck_assert_msg(sn_compile(*g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    sn_trainer *t = sn_trainer_new(*g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

/* Imported into a trainer, saved as a checkpoint, exported: the same weights, bit for bit; the
 * trainer's wte is padded (96 -> 128 rows) and export drops the padding. */
START_TEST(checkpoint_round_trip) {
    sn_err e;
    sn_weights a = read_ok(fixture("tiny"));
    sn_graph *g;
    sn_trainer *t = trainer_of(&a.config, NULL, &g);
    ck_assert_int_eq(sn_trainer_param_node(t, sn_trainer_find_param(t, "wte"))->shape[0], 128);
    int fresh = -1;
    ck_assert_msg(sn_weights_init_trainer(&a, t, 96, &fresh, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(fresh, 0);
    char *d = tmp_dir(), ck[4200];
    snprintf(ck, sizeof ck, "%s/run.ckpt", d);
    sn_run_state run = {0};
    sn_run_meta_set(&run, "model", "%s", a.name);
    sn_run_meta_set(&run, "model.shape", "ctx 32, 2 layers, 4 heads, 32 channels");
    ck_assert_msg(sn_checkpoint_save(ck, t, &run, &e) == SN_OK, "%s", e.msg);
    sn_weights b;
    ck_assert_int_eq(sn_weights_from_checkpoint(ck, NULL, &b, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "--vocab"), "%s", e.msg); /* 128 rows, no tokenizer named */
    int merged = -1;
    ck_assert_msg(sn_weights_from_checkpoint(ck, &(sn_export_opts){.vocab = 96}, &b, &merged, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(merged, 0);
    same_weights(&a, &b);
    /* a vocabulary that is not the model's: refused, naming wte */
    a.w[0].shape[0] = 95;
    ck_assert_int_eq(sn_weights_init_trainer(&a, t, 95, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "wte"), "%s", e.msg);
    a.w[0].shape[0] = 96;
    sn_weights_free(&a);
    sn_weights_free(&b);
    sn_run_state_free(&run);
    sn_trainer_free(t);
    sn_graph_free(g);
    rm_rf(d);
    free(d);
}
END_TEST

/* A LoRA run's checkpoint (B not zero) exported with its adapters merged: the plain model of the
 * merged weights computes the LoRA model's logits. */
START_TEST(lora_merge) {
    sn_err e;
    sn_weights a = read_ok(fixture("tiny"));
    sn_gpt2_lora lora = {.lora = {.rank = 4, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    sn_graph *g;
    sn_trainer *t = trainer_of(&a.config, &lora, &g);
    int fresh = 0;
    ck_assert_msg(sn_weights_init_trainer(&a, t, 96, &fresh, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(fresh, 2 * 4 * 2); /* A and B of 4 layers in each of 2 blocks */
    sn_rng r = sn_rng_seed(7);
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        if (!strstr(p->name, ".lora_b")) continue;
        float *v = malloc(4 * (size_t)sn_numel(p));
        for (int64_t k = 0; k < sn_numel(p); k++) v[k] = (float)(0.1 * sn_rng_normal(&r));
        ck_assert(sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, v, &e) == SN_OK);
        free(v);
    }
    char *d = tmp_dir(), ck[4200];
    snprintf(ck, sizeof ck, "%s/lora.ckpt", d);
    sn_run_state run = {0};
    sn_run_meta_set(&run, "model.shape", "ctx 32, 2 layers, 4 heads, 32 channels, LoRA rank 4 alpha 8 on all");
    ck_assert_msg(sn_checkpoint_save(ck, t, &run, &e) == SN_OK, "%s", e.msg);
    sn_weights m;
    int merged = 0;
    ck_assert_msg(sn_weights_from_checkpoint(ck, &(sn_export_opts){.vocab = 96}, &m, &merged, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(merged, 8);
    char ad[4200];
    snprintf(ad, sizeof ad, "%s/adapter", d);
    peft_check(ck, &m, ad, 4, 8, 8); /* the same adapters unmerged, as PEFT's */
    golden gd = read_golden("tiny_logits.bin");
    double *want = malloc(sizeof(double) * (size_t)(gd.T * gd.V)), *got = malloc(sizeof(double) * (size_t)(gd.T * gd.V));
    forward(&a.config, &lora, &(source){.t = t}, gd.tokens, gd.T, NULL, want);
    forward(&m.config, NULL, &(source){.w = &m}, gd.tokens, gd.T, NULL, got);
    sn_check_close("merged LoRA", got, want, (size_t)(gd.T * gd.V), 1e-5, 1.0);
    /* and the adapters did change the model */
    double diff = 0;
    for (int i = 0; i < gd.T * gd.V; i++) diff = fmax(diff, fabs(want[i] - gd.logits[i]));
    ck_assert(diff > 1e-2);
    free(want);
    free(got);
    free(gd.logits);
    sn_weights_free(&a);
    sn_weights_free(&m);
    sn_run_state_free(&run);
    sn_trainer_free(t);
    sn_graph_free(g);
    rm_rf(d);
    free(d);
}
END_TEST

/* ---- bad files ---- */

/* A copy of fixture src (a model directory) in a new temporary directory, with `old` replaced
 * by `repl` in file name (same length: the header's offsets stay), or name cut to keep bytes. */
static char *bad_copy(const char *src, const char *name, const char *old, const char *repl, size_t keep) {
    char *d = tmp_dir();
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp -r '%s/.' '%s'", fixture(src), d);
    ck_assert_int_eq(system(cmd), 0);
    if (!name) return d;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", d, name);
    size_t len;
    char *b = slurp(path, &len);
    if (old) {
        ck_assert_int_eq(strlen(old), strlen(repl));
        char *at = memmem(b, len, old, strlen(old));
        ck_assert_msg(at, "%s not in %s", old, name);
        memcpy(at, repl, strlen(repl));
    }
    unlink(path);
    spit(path, b, keep ? keep : len);
    free(b);
    return d;
}

static void refused(char *dir, sn_status want, const char *m1, const char *m2) {
    sn_weights w;
    sn_err e;
    sn_status s = sn_weights_read(dir, &w, &e);
    ck_assert_msg(s == want, "status %d, not %d: %s", s, want, e.msg);
    ck_assert_msg(strstr(e.msg, m1) && (!m2 || strstr(e.msg, m2)), "'%s' lacks '%s' or '%s'", e.msg, m1, m2 ? m2 : "");
    rm_rf(dir);
    free(dir);
}

START_TEST(bad_files) {
    refused(bad_copy("tiny", "model.safetensors", NULL, NULL, 60000), SN_ERR_PARSE,
            "truncated", "transformer.");
    refused(bad_copy("tiny", "model.safetensors", "\"F32\"", "\"Q32\"", 0), SN_ERR_PARSE,
            "Q32", "transformer.h.0.attn.c_attn.bias");
    refused(bad_copy("tiny", "model.safetensors", "\"F32\"", "\"I32\"", 0), SN_ERR_UNSUPPORTED,
            "transformer.h.0.attn.c_attn.bias is I32", NULL);
    refused(bad_copy("tiny", "config.json", "\"vocab_size\": 96", "\"vocab_size\": 97", 0),
            SN_ERR_INVALID, "transformer.wte.weight is (96, 32)", "needs (97, 32)");
    refused(bad_copy("tiny", "config.json", "\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06", 0),
            SN_ERR_UNSUPPORTED, "layer_norm_epsilon", NULL);
    refused(bad_copy("tiny", "config.json", "\"model_type\": \"gpt2\"", "\"model_type\": \"opt2\"", 0),
            SN_ERR_UNSUPPORTED, "model_type", NULL);
    refused(bad_copy("tiny", "config.json", "\"model_type\": \"gpt2\"", "\"model_type\": 12345 ", 0),
            SN_ERR_UNSUPPORTED, "model_type is not a string", NULL); /* read as a string: crashed */
    char *nd = bad_copy("tiny", "config.json", "\"model_type\": \"gpt2\"", "\"model_type\": null  ", 0);
    sn_weights nw = read_ok(nd); /* null as absent: a GPT-2 (a NULL string crashed strcmp) */
    sn_weights_free(&nw);
    rm_rf(nd);
    free(nd);
    refused(bad_copy("tiny", "model.safetensors", "transformer.h.1.ln_1.bias", "transformer.h.1.attn.bias", 0),
            SN_ERR_INVALID, "h.1.ln_1.b", NULL); /* missing (the name became a mask buffer's) */
    refused(bad_copy("tiny", "model.safetensors", "transformer.ln_f.bias", "transformer.ln_f.bia2", 0),
            SN_ERR_INVALID, "transformer.ln_f.bia2 is not a parameter", NULL);
    char *d = bad_copy("sharded", NULL, NULL, NULL, 0), path[4200];
    snprintf(path, sizeof path, "%s/model-00003-of-00003.safetensors", d);
    ck_assert_int_eq(unlink(path), 0);
    refused(d, SN_ERR_IO, "model-00003-of-00003.safetensors", "not in");
    d = bad_copy("tiny", NULL, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    ck_assert_int_eq(unlink(path), 0);
    refused(d, SN_ERR_IO, "no model.safetensors", NULL);
    /* llm.c: truncated, and a header that is not a GPT-2 */
    d = tmp_dir();
    snprintf(path, sizeof path, "%s/m.bin", d);
    size_t len;
    char *b = slurp(fixture("tiny_bf16.bin"), &len);
    spit(path, b, len - 2);
    sn_weights w;
    sn_err e;
    ck_assert_int_eq(sn_weights_read(path, &w, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, "truncated") && strstr(e.msg, path), "%s", e.msg);
    unlink(path);
    ((int32_t *)b)[5] = 5; /* 5 heads do not divide 32 channels */
    spit(path, b, len);
    ck_assert_int_eq(sn_weights_read(path, &w, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, "NH 5"), "%s", e.msg);
    free(b);
    rm_rf(d);
    free(d);
}
END_TEST

/* Files as the hub's original GPT-2 holds them: names without "transformer.", the attention
 * masks as tensors h.N.attn.bias (skipped), and lm_head.weight (read only when equal to wte). */
static void write_legacy(const sn_weights *w, const char *dir, bool head_differs) {
    char path[4200], name[40][96];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    sn_st_out t[40];
    int n = 0;
    static float mask[32 * 32];
    static const int64_t mask_shape[4] = {1, 1, 32, 32};
    float *head = malloc(4 * 96 * 32);
    for (int i = 0; i < w->n; i++) {
        const char *x = w->w[i].name;
        size_t len = strlen(x);
        if (!strcmp(x, "wte") || !strcmp(x, "wpe")) snprintf(name[n], sizeof name[n], "%s.weight", x);
        else snprintf(name[n], sizeof name[n], "%.*s.%s", (int)(len - 2), x, x[len - 1] == 'w' ? "weight" : "bias");
        t[n] = (sn_st_out){name[n], w->w[i].rank, w->w[i].shape, w->w[i].data};
        n++;
        if (!strcmp(x, "wte")) {
            memcpy(head, w->w[i].data, 4 * 96 * 32);
            head[5] += head_differs;
            t[n++] = (sn_st_out){"lm_head.weight", 2, w->w[i].shape, head};
        }
    }
    for (int l = 0; l < 2; l++) {
        snprintf(name[n], sizeof name[n], "h.%d.attn.bias", l);
        t[n] = (sn_st_out){name[n], 4, mask_shape, mask};
        n++;
    }
    sn_err e;
    ck_assert_msg(sn_st_write(path, t, n, &e) == SN_OK, "%s", e.msg);
    free(head);
}

START_TEST(legacy_names) {
    if (!sn_st_supported()) return;
    sn_weights a = read_ok(fixture("tiny"));
    for (int differs = 0; differs < 2; differs++) {
        char *d = bad_copy("tiny", NULL, NULL, NULL, 0), path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", d);
        ck_assert_int_eq(unlink(path), 0);
        write_legacy(&a, d, differs);
        if (differs) {
            refused(d, SN_ERR_UNSUPPORTED, "lm_head.weight differs from transformer.wte.weight", NULL);
            continue;
        }
        sn_weights b = read_ok(d);
        same_weights(&a, &b);
        sn_weights_free(&b);
        rm_rf(d);
        free(d);
    }
    sn_weights_free(&a);
}
END_TEST

/* A header parsed from bytes: offsets past the end, overlapping tensors, sizes that do not fit. */
static void header_refused(const char *json, size_t data, const char *m) {
    size_t n = strlen(json);
    uint8_t *b = calloc(1, 8 + n + data);
    uint64_t n64 = n;
    memcpy(b, &n64, 8);
    memcpy(b + 8, json, n);
    sn_st_file f;
    sn_err e;
    ck_assert_int_eq(sn_st_parse_header("x.safetensors", b, 8 + n, 8 + n + data, &f, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, m), "'%s' lacks '%s'", e.msg, m);
    free(b);
}

START_TEST(header_checks) {
    if (!sn_st_supported()) return;
    header_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                   "tensor a: data_offsets [0, 8] reach past the end");
    header_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "need 8");
    header_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, "overlap");
    header_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
                   8, "tensor a: dimension 1");
    header_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8, "dimension 0");
    header_refused("{\"a\":[1,2]}", 8, "tensor a: its header entry");
    header_refused("[1,2]", 8, "does not start with '{'");
    header_refused("{\"a\":", 8, "ends early");
}
END_TEST

/* BF16 and F16 tensors read exactly as f32 (a file written by hand). */
START_TEST(half_dtypes) {
    if (!sn_st_supported()) return;
    const char *json = "{\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]}}";
    uint16_t data[6] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x3f80, 0xc0a0}; /* 1, -2, 2^-24, 65504; 1, -5 */
    char *d = tmp_dir(), path[4200];
    snprintf(path, sizeof path, "%s/h.safetensors", d);
    uint64_t n = strlen(json);
    FILE *f = fopen(path, "wb");
    ck_assert(fwrite(&n, 8, 1, f) == 1 && fwrite(json, 1, n, f) == n && fwrite(data, 2, 6, f) == 6);
    fclose(f);
    sn_st_file st;
    sn_err e;
    ck_assert_msg(sn_st_open(path, &st, &e) == SN_OK, "%s", e.msg);
    float h[4], b[2];
    ck_assert(sn_st_read_f32(&st, sn_st_find(&st, "h"), h, &e) == SN_OK);
    ck_assert(sn_st_read_f32(&st, sn_st_find(&st, "b"), b, &e) == SN_OK);
    ck_assert(h[0] == 1 && h[1] == -2 && h[2] == 0x1p-24f && h[3] == 65504 && b[0] == 1 && b[1] == -5);
    sn_st_close(&st);
    rm_rf(d);
    free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hf");
    TCase *tc = tcase_create("hf");
    tcase_add_test(tc, logits_interp);
    tcase_add_test(tc, logits_cpu);
    tcase_add_test(tc, logits_standin);
    tcase_add_test(tc, llmc_bf16_logits);
    tcase_add_test(tc, sharded_equals_single);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, llmc_long_context);
    tcase_add_test(tc, checkpoint_round_trip);
    tcase_add_test(tc, lora_merge);
    tcase_add_test(tc, bad_files);
    tcase_add_test(tc, legacy_names);
    tcase_add_test(tc, header_checks);
    tcase_add_test(tc, half_dtypes);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
