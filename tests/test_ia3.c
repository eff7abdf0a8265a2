/* test_ia3.c: (IA)^3 fine-tuning (frontend/ia3.h) of both families: a model with its vectors at
 * ones computes the base model's loss exactly; the vectors' gradients against finite
 * differences; a run on the CPU device trains the vectors alone (the base bit-identical); the
 * export's merged weights (io/ia3_merge.c) compute the IA3 model's logits, and PEFT's IA3 layout
 * holds the same vectors; a resumed run ends bit for bit as one not interrupted; IA3 with LoRA,
 * and an IA3 checkpoint into a model without vectors, refused by name. Convention: _i 0 is tiny
 * GPT-2, 1 llama-tiny, both of vocabulary 64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/ia3.h"
#include "interp/interp.h"
#include "io/hf_llama.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64 };

static const sn_gpt2_lora IA3 = {.ia3 = true};

/* family 0 (GPT-2 tiny) or 1 (llama-tiny), n_layer layers (0: the shape's), IA3 vectors or
 * not, into a new graph for batches of b x t */
static sn_graph *build(int family, int n_layer, bool ia3, int b, int t) {
    sn_graph *g = sn_graph_new();
    sn_err e;
    sn_status s;
    if (family) {
        sn_llama_config c;
        ck_assert(sn_llama_config_find("llama-tiny", &c));
        c.vocab = V;
        if (n_layer) c.n_layer = n_layer;
        sn_llama m;
        s = sn_llama_build_lora(g, &c, b, t, ia3 ? &IA3 : NULL, &m, &e);
    } else {
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        c.vocab = V;
        if (n_layer) c.n_layer = n_layer;
        sn_gpt2 m;
        s = sn_gpt2_build_lora(g, &c, b, t, ia3 ? &IA3 : NULL, &m, &e);
    }
    ck_assert_msg(s == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *compiled_at(int family, int n_layer, bool ia3, sn_precision prec) {
    sn_graph *g = build(family, n_layer, ia3, B, T);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = prec;
    sn_err e;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *compiled(int family, int n_layer, bool ia3) {
    return compiled_at(family, n_layer, ia3, SN_PRECISION_FP32);
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) { sn_test_rule_batch(x, y, B * T, V, seed); }

static sn_trainer *trainer(sn_graph *g, sn_device *d, uint64_t seed) {
    return sn_test_trainer(g, d, seed, 20, 3e-2f);
}

static double eval(sn_trainer *t) {
    int32_t x[B * T], y[B * T];
    batch(x, y, 77);
    double l;
    sn_err e;
    ck_assert_msg(sn_trainer_eval(t, x, y, &l, &e) == SN_OK, "%s", e.msg);
    return l;
}

static void steps(sn_trainer *t, int n, uint64_t from) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int s = 0; s < n; s++) {
        batch(x, y, from + (uint64_t)s);
        ck_assert_msg(sn_trainer_step(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    }
}

static char *tmp_path(const char *what) {
    char *p = malloc(64);
    snprintf(p, 64, "/tmp/sn_ia3_%s_XXXXXX", what);
    int fd = mkstemp(p);
    ck_assert(fd >= 0);
    close(fd);
    return p;
}

/* The run's metadata as sinter train writes it (what export reads) */
static void meta(sn_run_state *r, int family) {
    sn_run_meta_set(r, "model", family ? "llama-tiny" : "tiny");
    sn_run_meta_set(r, "model.shape", family ? "llama-tiny, IA3" : "ctx 32, 2 layers, 2 heads, 32 channels, IA3");
}

static void save(const sn_trainer *t, int family, const char *path) {
    sn_run_state r = {0};
    meta(&r, family);
    sn_err e;
    ck_assert_msg(sn_checkpoint_save(path, t, &r, &e) == SN_OK, "%s", e.msg);
    sn_run_state_free(&r);
}

/* The vectors of t set to 1 + 0.3 N(0, 1): a model the vectors change (seeded). */
static void perturb(sn_trainer *t, uint64_t seed) {
    sn_rng r = sn_rng_seed(seed);
    sn_err e;
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        if (!sn_ia3_is_vector(p->name)) continue;
        float *v = malloc(4 * (size_t)sn_numel(p));
        for (int64_t k = 0; k < sn_numel(p); k++) v[k] = (float)(1 + 0.3 * sn_rng_normal(&r));
        ck_assert(sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, v, &e) == SN_OK);
        free(v);
    }
}

/* ---- ones: the base model's loss, exactly ---- */

/* _i: family; on the interpreter, the CPU device, and the CPU device in bf16 (autocast reads an
 * IA3 scaling through, so the model rounds where its base does): the base model after 3 steps,
 * saved; an IA3 model started from its weights (the vectors fresh: ones) has its loss bit for
 * bit. The CPU device's programs keep the GELU in a pointwise kernel (target gelu_unfused): the
 * base's would otherwise be its GEMM's epilogue (kernel.h: the GELU of the unrounded sum, libm's
 * tanh), which IA3's scaled GELU cannot be (1.8e-5 apart in bf16). */
START_TEST(ones_are_the_base) {
    sn_err e;
    sn_device *cpu;
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    cpu->target.gelu_unfused = true;
    static const char *const where[3] = {"interp", "cpu", "cpu bf16"};
    for (int dev = 0; dev < 3; dev++) {
        sn_device *d = dev ? cpu : NULL;
        char *path = tmp_path("base");
        sn_precision prec = dev == 2 ? SN_PRECISION_BF16 : SN_PRECISION_FP32;
        sn_graph *gb = compiled_at(_i, 0, false, prec), *gi = compiled_at(_i, 0, true, prec);
        sn_trainer *base = trainer(gb, d, 1), *ia3 = trainer(gi, d, 2);
        steps(base, 3, 100);
        double want = eval(base);
        save(base, _i, path);
        int fresh = -1;
        ck_assert_msg(sn_checkpoint_init(path, ia3, NULL, &fresh, &e) == SN_OK, "%s", e.msg);
        ck_assert_int_eq(fresh, _i ? 3 * 2 : 2 * 2); /* k, v (one vector for GPT-2's c_attn), the MLP's */
        double got = eval(ia3);
        ck_assert_msg(got == want, "%s on %s: IA3 at ones %.17g, the base %.17g", _i ? "llama-tiny" : "tiny",
                      where[dev], got, want);
        printf("%s (%s): the base loss %.9g, IA3 at ones %.9g\n", _i ? "llama-tiny" : "tiny",
               where[dev], want, got);
        sn_trainer_free(base);
        sn_trainer_free(ia3);
        sn_graph_free(gb);
        sn_graph_free(gi);
        unlink(path);
        free(path);
    }
    sn_device_free(cpu);
}
END_TEST

/* ---- the vectors' gradients against central finite differences ---- */

START_TEST(vector_gradients) {
    sn_graph *g = compiled(_i, 1, true);
    sn_interp *it = sn_interp_new(g, true);
    sn_err e;
    int32_t x[B * T], y[B * T];
    batch(x, y, 7);
    sn_node *in[2] = {NULL, NULL};
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT) in[strcmp(g->nodes[i]->name, "idx") != 0] = g->nodes[i];
    ck_assert(!sn_interp_set_i32(it, in[0], x, &e) && !sn_interp_set_i32(it, in[1], y, &e));
    sn_node *ps[64];
    int np = sn_graph_params(g, ps, 64), vectors = 0;
    double *vals[64];
    sn_rng r = sn_rng_seed(99);
    for (int p = 0; p < np; p++) {
        bool vec = sn_ia3_is_vector(ps[p]->name);
        ck_assert_msg(vec ? !ps[p]->a.frozen && ps[p]->grad : ps[p]->a.frozen && !ps[p]->grad,
                      "%s: frozen %d", ps[p]->name, ps[p]->a.frozen);
        vectors += vec;
        float *w = malloc(4 * (size_t)sn_numel(ps[p]));
        sn_param_init(ps[p], w, 5);
        vals[p] = malloc(sizeof(double) * (size_t)sn_numel(ps[p]));
        for (int64_t i = 0; i < sn_numel(ps[p]); i++) /* vectors off ones; biases not zero */
            vals[p][i] = vec ? 1 + 0.3 * sn_rng_normal(&r)
                       : ps[p]->a.init == SN_INIT_ZEROS ? 0.1 * sn_rng_normal(&r) : w[i];
        free(w);
        ck_assert(sn_interp_set_f64(it, ps[p], vals[p], &e) == SN_OK);
    }
    ck_assert_int_eq(vectors, _i ? 3 : 2);
    for (int p = 0; p < np; p++) {
        if (!sn_ia3_is_vector(ps[p]->name)) continue;
        sn_check_param_grad(it, g, ps[p], vals[p], 24, 1e-5, 1e-6);
    }
    for (int p = 0; p < np; p++) free(vals[p]);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- a run on the CPU device: the vectors train, the base does not move ---- */

START_TEST(only_the_vectors_train) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = compiled(_i, 0, true);
    sn_trainer *t = trainer(g, d, 5);
    float **before = sn_param_snapshot(t);
    int32_t x[B * T], y[B * T];
    batch(x, y, 3);
    double first = 0, last = 0;
    for (int s = 0; s < 15; s++) { /* one batch: the loss must fall */
        sn_step_stats st;
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        *(s ? &last : &first) = st.loss;
    }
    ck_assert_msg(last < first - 0.01, "loss %g -> %g: the vectors do not learn", first, last);
    ck_assert_int_eq(sn_check_trained_only(t, before, sn_ia3_is_vector, "an IA3 run"), _i ? 6 : 4);
    printf("IA3 %s on the CPU device: loss %.4f -> %.4f in 15 steps; every vector trained, the base "
           "bit-identical\n", _i ? "llama-tiny" : "tiny", first, last);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

/* ---- export: merged weights compute the IA3 model ---- */

/* The logits (T, V) of family's model (ia3 or not) on tokens, parameters from t or w, on the
 * interpreter. */
static void forward(int family, bool ia3, const sn_trainer *t, const sn_weights *w,
                    const int32_t *tokens, double *out) {
    sn_err e;
    sn_graph *g = build(family, 0, ia3, 1, T);
    sn_pipeline_opts o = sn_pipeline_defaults();
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_interp *it = sn_interp_new(g, false);
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op == SN_OP_INPUT) {
            int32_t zeros[T] = {0};
            ck_assert(sn_interp_set_i32(it, n, strcmp(n->name, "idx") ? zeros : tokens, &e) == SN_OK);
        } else if (n->op == SN_OP_PARAM) {
            size_t k = (size_t)sn_numel(n);
            float *v = malloc(4 * k);
            double *dv = malloc(8 * k);
            if (w) {
                ck_assert_msg(sn_weights_fill(w, n, V, v, &e) == SN_OK, "%s", e.msg);
            } else {
                int j = sn_trainer_find_param(t, n->name);
                ck_assert_msg(j >= 0 && sn_trainer_get_param(t, j, SN_PARAM_WEIGHTS, v, &e) == SN_OK, "%s", n->name);
            }
            for (size_t q = 0; q < k; q++) dv[q] = v[q];
            ck_assert(sn_interp_set_f64(it, n, dv, &e) == SN_OK);
            free(v);
            free(dv);
        }
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    const sn_node *logits = g->outputs[0];
    int64_t vp = logits->shape[2];
    const double *l = sn_interp_value(it, logits);
    for (int i = 0; i < T; i++)
        for (int v = 0; v < V; v++) out[i * V + v] = l[i * vp + v];
    sn_interp_free(it);
    sn_graph_free(g);
}

/* _i: family. The IA3 model with its vectors off ones (and GPT-2's biases not zero), saved;
 * the export's merged weights in the plain model: the same logits to f32 rounding (each merged
 * weight W l is one f32 rounding, 2^-24 relative, of the product the IA3 model computes in
 * the interpreter's doubles: 1e-5 of the largest logit is far above that and far below what a
 * vector scaling the wrong channels changes). PEFT's IA3 adapter of the same checkpoint: each
 * vector under its module's name, (out, 1) or (1, in), GPT-2's c_attn with ones for q. */
START_TEST(merged_export_is_the_model) {
    sn_err e;
    sn_graph *g = compiled(_i, 0, true);
    sn_trainer *t = trainer(g, NULL, 4);
    perturb(t, 8);
    sn_rng r = sn_rng_seed(9);
    for (int i = 0; i < sn_trainer_param_count(t); i++) { /* GPT-2's biases: the merge scales them */
        const sn_node *p = sn_trainer_param_node(t, i);
        if (p->a.init != SN_INIT_ZEROS) continue;
        float *v = malloc(4 * (size_t)sn_numel(p));
        for (int64_t k = 0; k < sn_numel(p); k++) v[k] = (float)(0.2 * sn_rng_normal(&r));
        ck_assert(sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, v, &e) == SN_OK);
        free(v);
    }
    char *path = tmp_path("merge");
    save(t, _i, path);
    sn_weights m;
    if (_i) {
        bool is_llama = false;
        sn_llama_config c;
        ck_assert_msg(sn_hf_llama_from_checkpoint(path, V, &is_llama, &c, &m, &e) == SN_OK, "%s", e.msg);
        ck_assert(is_llama);
    } else {
        int merged = 0;
        ck_assert_msg(sn_weights_from_checkpoint(path, &(sn_export_opts){.vocab = V}, &m, &merged, &e) == SN_OK, "%s", e.msg);
        ck_assert_int_eq(merged, 4);
    }
    for (int i = 0; i < m.n; i++) ck_assert_msg(!sn_ia3_is_vector(m.w[i].name), "%s exported", m.w[i].name);
    int32_t tokens[T];
    for (int i = 0; i < T; i++) tokens[i] = (i * 7 + 3) % V;
    double want[T * V], got[T * V], base[T * V];
    forward(_i, true, t, NULL, tokens, want);
    forward(_i, false, NULL, &m, tokens, got);
    sn_check_close(_i ? "llama-tiny, merged IA3" : "tiny, merged IA3", got, want, T * V, 1e-5, 1.0);
    forward(_i, false, t, NULL, tokens, base); /* the base alone: the vectors do change the model */
    double diff = 0;
    for (int i = 0; i < T * V; i++) diff = fmax(diff, fabs(want[i] - base[i]));
    ck_assert_msg(diff > 1e-3, "the vectors change the logits by %g only: the check would prove "
                  "little", diff); /* 100 times its tolerance */
    printf("%s: merged export against the IA3 model checked; the vectors move the logits by %.3g\n",
           _i ? "llama-tiny" : "tiny", diff);

    /* PEFT's IA3 adapter */
    char dir[80];
    snprintf(dir, sizeof dir, "%s.peft", path);
    int n = 0;
    ck_assert_msg(sn_lora_write_peft(path, dir, NULL, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, _i ? 6 : 4);
    char file[160];
    snprintf(file, sizeof file, "%s/adapter_model.safetensors", dir);
    sn_st_file f;
    ck_assert_msg(sn_st_open(file, &f, &e) == SN_OK, "%s", e.msg);
    static const char *const names[2][3] = {
        {"base_model.model.transformer.h.1.attn.c_attn.ia3_l", "base_model.model.transformer.h.1.mlp.c_proj.ia3_l", NULL},
        {"base_model.model.model.layers.1.self_attn.k_proj.ia3_l", "base_model.model.model.layers.1.self_attn.v_proj.ia3_l",
         "base_model.model.model.layers.1.mlp.down_proj.ia3_l"}};
    static const char *const ours[2][3] = {{"h.1.attn.c_attn.ia3_l", "h.1.mlp.c_proj.ia3_l", NULL},
                                           {"model.layers.1.self_attn.k_proj.ia3_l", "model.layers.1.self_attn.v_proj.ia3_l",
                                            "model.layers.1.mlp.down_proj.ia3_l"}};
    for (int k = 0; k < 3 && names[_i][k]; k++) {
        const sn_st_tensor *st = sn_st_find(&f, names[_i][k]);
        ck_assert_msg(st && st->rank == 2, "%s missing or not (out, 1) / (1, in)", names[_i][k]);
        int j = sn_trainer_find_param(t, ours[_i][k]);
        ck_assert(j >= 0);
        int64_t len = sn_numel(sn_trainer_param_node(t, j)), pad = !_i && k == 0 ? len / 2 : 0;
        bool ff = strstr(names[_i][k], "c_proj") || strstr(names[_i][k], "down_proj");
        ck_assert_msg(st->shape[ff ? 0 : 1] == 1 && st->shape[ff ? 1 : 0] == pad + len, "%s: [%lld, %lld]",
                      names[_i][k], (long long)st->shape[0], (long long)st->shape[1]);
        float *a = malloc(4 * (size_t)(pad + len)), *b = malloc(4 * (size_t)len);
        ck_assert(sn_st_read_f32(&f, st, a, &e) == SN_OK);
        ck_assert(sn_trainer_get_param(t, j, SN_PARAM_WEIGHTS, b, &e) == SN_OK);
        for (int64_t q = 0; q < pad; q++) ck_assert(a[q] == 1.0f); /* GPT-2's q: not scaled */
        ck_assert(!memcmp(a + pad, b, 4 * (size_t)len));
        free(a);
        free(b);
    }
    sn_st_close(&f);
    snprintf(file, sizeof file, "%s/adapter_config.json", dir);
    FILE *cf = fopen(file, "r");
    ck_assert(cf);
    char json[8192] = {0};
    ck_assert(fread(json, 1, sizeof json - 1, cf) > 0);
    fclose(cf);
    ck_assert_msg(strstr(json, "\"peft_type\": \"IA3\"") || strstr(json, "\"peft_type\":\"IA3\""), "%s", json);
    ck_assert_msg(strstr(json, "feedforward_modules") &&
                  strstr(json, _i ? "model.layers.0.mlp.down_proj" : "transformer.h.0.mlp.c_proj"), "%s", json);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    sn_weights_free(&m);
    sn_trainer_free(t);
    sn_graph_free(g);
    unlink(path);
    free(path);
}
END_TEST

/* ---- resume: the same end, bit for bit ---- */

START_TEST(resume_bit_exact) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g1 = compiled(_i, 0, true), *g2 = compiled(_i, 0, true), *g3 = compiled(_i, 0, true);
    sn_trainer *straight = trainer(g1, d, 6), *first = trainer(g2, d, 6), *second = trainer(g3, d, 6);
    steps(straight, 8, 200);
    steps(first, 4, 200);
    char *path = tmp_path("resume");
    save(first, _i, path);
    sn_run_state r = {0};
    meta(&r, _i);
    ck_assert_msg(sn_checkpoint_load(path, second, &r, &e) == SN_OK, "%s", e.msg);
    sn_run_state_free(&r);
    steps(second, 4, 204);
    for (int i = 0; i < sn_trainer_param_count(straight); i++) {
        const sn_node *p = sn_trainer_param_node(straight, i);
        size_t n = (size_t)sn_numel(p);
        for (int what = SN_PARAM_WEIGHTS; what <= SN_PARAM_V; what++) {
            float *a = malloc(4 * n), *b = malloc(4 * n);
            ck_assert(sn_trainer_get_param(straight, i, (sn_param_which)what, a, &e) == SN_OK);
            ck_assert(sn_trainer_get_param(second, i, (sn_param_which)what, b, &e) == SN_OK);
            ck_assert_msg(!memcmp(a, b, 4 * n), "%s (part %d) differs after resume", p->name, what);
            free(a);
            free(b);
        }
    }
    ck_assert(eval(straight) == eval(second));
    sn_trainer_free(straight);
    sn_trainer_free(first);
    sn_trainer_free(second);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_graph_free(g3);
    sn_device_free(d);
    unlink(path);
    free(path);
}
END_TEST

/* ---- refusals ---- */

START_TEST(refusals) {
    sn_err e;
    sn_graph *g = sn_graph_new();
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_gpt2 m;
    sn_gpt2_lora both = {.lora = {.rank = 4, .alpha = 4}, .targets = SN_GPT2_LORA_ALL, .ia3 = true};
    ck_assert(sn_gpt2_build_lora(g, &c, B, T, &both, &m, &e) == SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "IA3 vectors together with LoRA adapters (rank 4) are not supported"), "%s", e.msg);
    sn_graph_free(g);
    g = sn_graph_new();
    sn_llama_config lc;
    ck_assert(sn_llama_config_find("llama-tiny", &lc));
    sn_llama lm;
    ck_assert(sn_llama_build_lora(g, &lc, B, T, &both, &lm, &e) == SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "IA3 vectors together with LoRA"), "%s", e.msg);
    sn_graph_free(g);
    /* an IA3 checkpoint into a model without vectors */
    sn_graph *gi = compiled(0, 0, true), *gb = compiled(0, 0, false);
    sn_trainer *ti = trainer(gi, NULL, 1), *tb = trainer(gb, NULL, 1);
    char *path = tmp_path("refuse");
    save(ti, 0, path);
    ck_assert(sn_checkpoint_init(path, tb, NULL, NULL, &e) != SN_OK);
    ck_assert_msg(strstr(e.msg, "it has a parameter h.0.attn.c_attn.ia3_l, which this model lacks (an "
                         "IA3 vector: add --ia3"), "%s", e.msg);
    sn_trainer_free(ti);
    sn_trainer_free(tb);
    sn_graph_free(gi);
    sn_graph_free(gb);
    unlink(path);
    free(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ia3");
    TCase *tc = tcase_create("ia3");
    tcase_add_loop_test(tc, ones_are_the_base, 0, 2);
    tcase_add_loop_test(tc, vector_gradients, 0, 2);
    tcase_add_loop_test(tc, only_the_vectors_train, 0, 2);
    tcase_add_loop_test(tc, merged_export_is_the_model, 0, 2);
    tcase_add_loop_test(tc, resume_bit_exact, 0, 2);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
