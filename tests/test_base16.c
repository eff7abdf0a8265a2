/* test_base16.c: LoRA's and IA3's frozen base stored in the compute dtype (the base16 pass):
 * the host's 16-bit conversions round as the interpreter's rule does; a bf16 run with the 16-bit
 * base has the f32 base's losses bit for bit (tiny GPT-2 and tiny LLaMA, LoRA and IA3, the
 * interpreter and the CPU device; fp16 with loss scaling on the CPU device), its base weights
 * are the f32 run's shadows exactly, its program holds no shadow and no f32 copy of them; a
 * checkpoint resumes bit for bit in a 16-bit-base run and in an f32-base one, both ways; the
 * trainer rounds what is set and refuses what fp16 cannot hold; a sampler over the 16-bit base
 * samples as one over the shadows. Convention: vocabulary 64, adapters of rank 4 on every linear
 * layer (GPT-2 tiny: 8 base weights, 2 layers x c_attn, c_proj, c_fc, mlp.c_proj; LLaMA tiny:
 * 15, 2 layers x 7 and its untied LM head). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "support/half.h"
#include "support/rng.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "train/sample.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64, RANK = 4, STEPS = 6 };

/* ---- the host's conversions ---- */

/* x rounded by support/half.h and read back, against ir's sn_dtype_round (the interpreter's) */
static void check_round(float x) {
    float b = sn_bf16_to_f32(sn_f32_to_bf16(x)), h = sn_f16_to_f32(sn_f32_to_f16(x));
    float wb = (float)sn_dtype_round(SN_BF16, x), wh = (float)sn_dtype_round(SN_F16, x);
    ck_assert_msg(!memcmp(&b, &wb, 4), "bf16(%a) = %a, the interpreter's %a", (double)x, (double)b, (double)wb);
    ck_assert_msg(!memcmp(&h, &wh, 4), "f16(%a) = %a, the interpreter's %a", (double)x, (double)h, (double)wh);
}

START_TEST(half_rounds_as_the_interpreter) {
    sn_rng r = sn_rng_seed(5);
    for (int i = 0; i < 200000; i++) { /* every exponent from 2^-30 to 2^18, both signs */
        uint32_t u = (uint32_t)sn_rng_next(&r);
        u = (u & 0x807fffffu) | ((uint32_t)(97 + i % 48) << 23);
        float x;
        memcpy(&x, &u, 4);
        check_round(x);
    }
    /* ties (to even), the f16 subnormals and their halves, the ends of f16's range */
    const float edge[] = {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-11f,
                          1.0f + 0x3p-11f, 0x1p-24f, 0x1p-25f, 0x3p-25f, 0x1p-26f, 0x1.8p-15f,
                          0x1.ffcp-15f, 0x1.ffep-15f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                          0x1.fffffep127f, INFINITY, -INFINITY, 0x1p-149f, 0x1.fep-127f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) check_round(edge[i]), check_round(-edge[i]);
    ck_assert(isnan(sn_bf16_to_f32(sn_f32_to_bf16(NAN))) && isnan(sn_f16_to_f32(sn_f32_to_f16(NAN))));
    ck_assert_int_eq(sn_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_int_eq(sn_f32_to_f16(0x1p-24f), 1);
}
END_TEST

/* ---- the runs ---- */

typedef enum { GPT2_LORA, GPT2_IA3, LLAMA_LORA, LLAMA_IA3, CASES } model_case;
static const char *const case_name[CASES] = {"GPT-2 LoRA", "GPT-2 IA3", "LLaMA LoRA", "LLaMA IA3"};

/* the case's tiny model at batch b, compiled by the session's passes in prec, the base 16-bit
 * or not (*st: the passes' statistics) */
static sn_graph *model(model_case c, int b, bool backward, sn_precision prec, bool base16,
                       sn_pipeline_stats *st) {
    sn_graph *g = sn_graph_new();
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = RANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    if (c == GPT2_IA3 || c == LLAMA_IA3) l = (sn_gpt2_lora){.ia3 = true};
    sn_status s;
    if (c == LLAMA_LORA || c == LLAMA_IA3) {
        sn_llama_config lc;
        ck_assert(sn_llama_config_find("llama-tiny", &lc));
        lc.vocab = V;
        sn_llama m;
        s = sn_llama_build_lora(g, &lc, b, T, &l, &m, &e);
    } else {
        sn_gpt2_config gc;
        ck_assert(sn_gpt2_config_find("tiny", &gc));
        gc.vocab = V;
        sn_gpt2 m;
        s = sn_gpt2_build_lora(g, &gc, b, T, &l, &m, &e);
    }
    ck_assert_msg(s == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = backward;
    o.precision = prec;
    o.base16 = base16;
    ck_assert_msg(sn_compile(g, &o, NULL, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_trainer *trainer(sn_graph *g, sn_device *d, uint64_t seed, int steps) {
    return sn_test_trainer(g, d, seed, steps, 1e-2f);
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) { sn_test_rule_batch(x, y, B * T, V, seed); }

/* n steps, each on the batch of its step number; losses into loss (may be NULL) */
static void steps(sn_trainer *t, int n, double *loss) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int s = 0; s < n; s++) {
        batch(x, y, 100 + (uint64_t)sn_trainer_step_count(t));
        sn_step_stats st;
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        if (loss) loss[s] = st.loss;
    }
}

/* STEPS steps on one batch (a rule the adapters learn in a few steps) */
static void fixed_steps(sn_trainer *t, double *loss) {
    int32_t x[B * T], y[B * T];
    batch(x, y, 3);
    sn_err e;
    for (int s = 0; s < STEPS; s++) {
        sn_step_stats st;
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        loss[s] = st.loss;
    }
}

static float *weights(const sn_trainer *t, int i) {
    sn_err e;
    float *w = malloc(4 * (size_t)sn_numel(sn_trainer_param_value(t, i)) + 4);
    ck_assert_msg(w && sn_trainer_get_param(t, i, SN_PARAM_WEIGHTS, w, &e) == SN_OK, "%s", e.msg);
    return w;
}

static bool is_16bit(sn_dtype d) { return d == SN_BF16 || d == SN_F16; }

/* Every parameter of t16 (16-bit base) against tf's (f32 base, the same seed): a 16-bit one
 * holds tf's weights rounded to nearest even (the shadow tf's products read), every other one
 * tf's bit for bit; returns the 16-bit ones' count. */
static int check_base(const sn_trainer *t16, const sn_trainer *tf, const char *what) {
    int n16 = 0;
    ck_assert_int_eq(sn_trainer_param_count(t16), sn_trainer_param_count(tf));
    for (int i = 0; i < sn_trainer_param_count(t16); i++) {
        const sn_node *p = sn_trainer_param_node(t16, i);
        int j = sn_trainer_find_param(tf, p->name);
        ck_assert_msg(j >= 0 && sn_trainer_param_node(tf, j)->dtype == SN_F32, "%s: %s", what, p->name);
        float *a = weights(t16, i), *b = weights(tf, j);
        int64_t n = sn_numel(p);
        if (sn_trainer_param_16bit(t16, i)) {
            n16++;
            ck_assert_msg(p->a.frozen && !sn_lora_is_adapter(p->name) && !sn_ia3_is_vector(p->name),
                          "%s: %s is 16-bit but not a frozen base weight", what, p->name);
            for (int64_t k = 0; k < n; k++) b[k] = (float)sn_dtype_round(p->dtype, b[k]);
        }
        ck_assert_msg(!memcmp(a, b, 4 * (size_t)n), "%s: %s differs", what, p->name);
        free(a), free(b);
    }
    return n16;
}

/* The program of t holds every 16-bit parameter as its own value of 2 bytes a weight and no
 * weight shadow of them (nor any f32 value of their name); returns the shadows it has. */
static int check_program(const sn_trainer *t, const char *what) {
    const sn_program *p = sn_trainer_program(t);
    ck_assert(p);
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        if (!sn_trainer_param_16bit(t, i)) continue;
        const sn_param_slot *s = &p->layout.slots[i];
        ck_assert_msg(s->shadow < 0 && s->frozen && s->value >= 0 && is_16bit(s->dtype),
                      "%s: %s has a shadow or no 16-bit value", what, s->node->name);
        const sn_value *v = &p->values[p->value_of[s->node->id]];
        ck_assert_int_eq(v->bytes, 2 * s->numel);
        for (int k = 0; k < p->n_shadows; k++)
            ck_assert_msg(strcmp(p->shadows[k]->args[1]->name ? p->shadows[k]->args[1]->name : "",
                                 s->node->name), "%s: a shadow of %s", what, s->node->name);
    }
    return p->n_shadows;
}

/* The losses of a 16-bit base and of the f32 base, bit for bit, on device d (NULL: the
 * interpreter), for the case c in prec. */
static void same_losses(model_case c, sn_device *d, sn_precision prec) {
    const char *dev = d ? "CPU device" : "interpreter";
    sn_pipeline_stats s16, sf;
    sn_graph *g16 = model(c, B, true, prec, true, &s16), *gf = model(c, B, true, prec, false, &sf);
    /* 2 layers x 4 linear weights; LLaMA's 7 and its untied LM head (GPT-2's is wte, tied) */
    int want = c == GPT2_LORA || c == GPT2_IA3 ? 8 : 15;
    ck_assert_msg(s16.base16_stored == want && sf.base16_stored == 0, "%s: %d weights stored in 16 "
                  "bits, want %d", case_name[c], s16.base16_stored, want);
    ck_assert_msg(s16.casts < sf.casts, "%s: %d casts with the 16-bit base, %d without", case_name[c],
                  s16.casts, sf.casts);
    sn_trainer *t16 = trainer(g16, d, 31, STEPS), *tf = trainer(gf, d, 31, STEPS);
    char what[96];
    snprintf(what, sizeof what, "%s on the %s", case_name[c], dev);
    ck_assert_int_eq(check_base(t16, tf, what), want);
    if (d) {
        int n16 = check_program(t16, what), nf = sn_trainer_program(tf)->n_shadows;
        ck_assert_msg(n16 == nf - want, "%s: %d shadows with the 16-bit base, %d without", what, n16, nf);
        ck_assert_msg(sn_trainer_program(t16)->persistent_bytes < sn_trainer_program(tf)->persistent_bytes,
                      "%s: no smaller", what);
    }
    double a[STEPS], b[STEPS];
    fixed_steps(t16, a);
    fixed_steps(tf, b);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(a[s] == b[s], "%s, %s: step %d loss %.17g with the 16-bit base, %.17g with "
                      "the f32 base", what, sn_precision_name(prec), s + 1, a[s], b[s]);
    ck_assert_msg(a[STEPS - 1] < a[0], "%s: loss %g -> %g: nothing trains", what, a[0], a[STEPS - 1]);
    ck_assert_int_eq(check_base(t16, tf, what), want); /* the base unchanged, the adapters alike */
    printf("%s, %s: %d losses bit for bit with the f32 base (%.6f -> %.6f); %d weights in %s\n",
           what, sn_precision_name(prec), STEPS, a[0], a[STEPS - 1], want,
           prec == SN_PRECISION_BF16 ? "bf16" : "f16");
    sn_trainer_free(t16), sn_trainer_free(tf);
    sn_graph_free(g16), sn_graph_free(gf);
}

START_TEST(losses_bit_identical_interp) { same_losses((model_case)_i, NULL, SN_PRECISION_BF16); }
END_TEST

START_TEST(losses_bit_identical_cpu) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    same_losses((model_case)_i, d, SN_PRECISION_BF16);
    if (_i == GPT2_LORA || _i == LLAMA_IA3) same_losses((model_case)_i, d, SN_PRECISION_FP16);
    sn_device_free(d);
}
END_TEST

/* fp32 and tf32 programs: the pass does not run */
START_TEST(fp32_unchanged) {
    sn_pipeline_stats st;
    sn_graph *g = model(GPT2_LORA, B, true, SN_PRECISION_FP32, true, &st);
    ck_assert_int_eq(st.base16_stored, 0);
    for (int i = 0; i < g->n_nodes; i++)
        ck_assert(g->nodes[i]->op != SN_OP_PARAM || g->nodes[i]->dtype == SN_F32);
    sn_graph_free(g);
}
END_TEST

/* ---- setting and reading the weights ---- */

START_TEST(set_rounds_get_widens_fp16_refuses) {
    sn_err e;
    sn_graph *g = model(GPT2_LORA, B, true, SN_PRECISION_FP16, true, NULL);
    sn_trainer *t = trainer(g, NULL, 3, 4);
    int k = sn_trainer_find_param(t, "h.0.mlp.c_fc.w");
    ck_assert(k >= 0 && sn_trainer_param_16bit(t, k) && sn_trainer_param_node(t, k)->dtype == SN_F16);
    int64_t n = sn_numel(sn_trainer_param_node(t, k));
    float *w = malloc(4 * (size_t)n), *back = malloc(4 * (size_t)n);
    sn_rng r = sn_rng_seed(9);
    for (int64_t i = 0; i < n; i++) w[i] = (float)(sn_rng_normal(&r) * 100);
    ck_assert_msg(sn_trainer_set_param(t, k, SN_PARAM_WEIGHTS, w, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_trainer_get_param(t, k, SN_PARAM_WEIGHTS, back, &e) == SN_OK);
    int inexact = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(back[i] == (float)sn_dtype_round(SN_F16, w[i]), "weight %lld: %g read back as "
                      "%g", (long long)i, (double)w[i], (double)back[i]);
        inexact += back[i] != w[i];
    }
    ck_assert(inexact > n / 2); /* the draws had more bits than f16 */
    ck_assert(sn_trainer_get_param(t, k, SN_PARAM_M, back, &e) == SN_OK && back[0] == 0 && back[n - 1] == 0);
    float *was = weights(t, k);
    w[5] = 70000; /* past 65504: refused, the weights as they were */
    ck_assert(sn_trainer_set_param(t, k, SN_PARAM_WEIGHTS, w, &e) == SN_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "h.0.mlp.c_fc.w") && strstr(e.msg, "weight 5 is 70000") &&
                  strstr(e.msg, "past the format's range") && strstr(e.msg, "--base-f32"), "%s", e.msg);
    float *now = weights(t, k);
    ck_assert(!memcmp(now, was, 4 * (size_t)n));
    free(now), free(was);
    printf("fp16 base: set rounds to nearest even, get widens; 70000 refused: %s\n", e.msg);
    free(w), free(back);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

/* ---- checkpoints: f32 weights on file, resumed either way bit for bit ---- */

static char *tmp_path(void) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/sn_test_base16_XXXXXX");
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    return path;
}

/* A run of base `from` saved after 3 steps and continued 3; a run of base `to` resuming the
 * file has the continuation's losses and ends in the same adapters and moments. */
static void resume_across(sn_device *d, bool from16, bool to16) {
    sn_err e;
    char *path = tmp_path();
    sn_graph *g = model(LLAMA_LORA, B, true, SN_PRECISION_BF16, from16, NULL);
    sn_graph *g2 = model(LLAMA_LORA, B, true, SN_PRECISION_BF16, to16, NULL);
    sn_trainer *t = trainer(g, d, 21, 8), *t2 = trainer(g2, d, 21, 8);
    sn_run_state r = {0}, r2 = {0};
    sn_run_meta_set(&r, "model", "llama-tiny");
    sn_run_meta_set(&r2, "model", "llama-tiny");
    steps(t, 3, NULL);
    ck_assert_msg(sn_checkpoint_save(path, t, &r, &e) == SN_OK, "%s", e.msg);
    double a[3], b[3];
    steps(t, 3, a);
    steps(t2, 2, NULL); /* other adapters and moments: the file's must replace them */
    ck_assert_msg(sn_checkpoint_load(path, t2, &r2, &e) == SN_OK, "%s", e.msg);
    steps(t2, 3, b);
    ck_assert_msg(!memcmp(a, b, sizeof a), "%s base resumed by a %s base: %.17g %.17g %.17g, "
                  "straight %.17g %.17g %.17g", from16 ? "16-bit" : "f32", to16 ? "16-bit" : "f32",
                  b[0], b[1], b[2], a[0], a[1], a[2]);
    if (from16 == to16) {
        sn_test_same_state(t, t2);
    } else { /* the adapters and moments alike; the base as check_base says */
        sn_trainer *t16 = from16 ? t : t2, *tf = from16 ? t2 : t;
        ck_assert_int_gt(check_base(t16, tf, "resumed across"), 0);
    }
    printf("checkpoint of a %s base resumed by a %s base: bit for bit\n", from16 ? "16-bit" : "f32",
           to16 ? "16-bit" : "f32");
    unlink(path);
    sn_run_state_free(&r), sn_run_state_free(&r2);
    sn_trainer_free(t), sn_trainer_free(t2);
    sn_graph_free(g), sn_graph_free(g2);
}

START_TEST(checkpoint_resume_across) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    resume_across(d, true, true);
    resume_across(d, true, false);
    resume_across(d, false, true);
    sn_device_free(d);
}
END_TEST

/* ---- samples: a sampler whose base is 16-bit reads the trainer's weights rounded ---- */

START_TEST(samples_over_the_16bit_base) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = model(GPT2_LORA, B, true, SN_PRECISION_BF16, true, NULL);
    sn_trainer *t = trainer(g, d, 17, 8);
    steps(t, 4, NULL);
    sn_graph *g16 = model(GPT2_LORA, 1, false, SN_PRECISION_BF16, true, NULL);
    sn_graph *gf = model(GPT2_LORA, 1, false, SN_PRECISION_BF16, false, NULL);
    int n16 = 0;
    for (int i = 0; i < g16->n_nodes; i++) n16 += g16->nodes[i]->op == SN_OP_PARAM && is_16bit(g16->nodes[i]->dtype);
    ck_assert_int_eq(n16, 8);
    sn_sampler *s16 = sn_sampler_new(g16, sn_graph_input(g16, SN_ROLE_TOKENS), g16->logits, d, &e);
    sn_sampler *sf = sn_sampler_new(gf, sn_graph_input(gf, SN_ROLE_TOKENS), gf->logits, d, &e);
    ck_assert_msg(s16 && sf, "%s", e.msg);
    ck_assert_msg(sn_sampler_load(s16, t, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_sampler_load(sf, t, &e) == SN_OK, "%s", e.msg);
    int32_t prompt[1] = {7}, a[12], b[12];
    sn_sample_opts so = {.n_new = 12, .temperature = 0.8, .vocab = V, .seed = 1};
    ck_assert(sn_sampler_generate(s16, prompt, 1, &so, a, &e) == SN_OK);
    ck_assert(sn_sampler_generate(sf, prompt, 1, &so, b, &e) == SN_OK);
    ck_assert_msg(!memcmp(a, b, sizeof a), "samples differ: 16-bit base %d %d %d, shadows %d %d %d",
                  a[0], a[1], a[2], b[0], b[1], b[2]);
    sn_sampler_free(s16), sn_sampler_free(sf);
    sn_graph_free(g16), sn_graph_free(gf);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

/* ---- the KV-cache generator over the 16-bit base ---- */

static sn_status tiny_kv(sn_graph *g, int b, int t, bool decode, void *user, sn_err *e) {
    (void)user;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_gpt2_lora l = {.lora = {.rank = RANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    return sn_gpt2_build_kv(g, &c, b, t, decode, &l, e);
}

/* A generator over t's weights, its base 16-bit (`low`) or f32: a forced sequence's logits, and
 * the decode program's weight bytes and 16-bit parameters. */
static int64_t forced(sn_device *d, const sn_trainer *t, sn_dtype low, float *logits, int *n16) {
    static const int32_t toks[] = {3, 17, 42, 5, 63, 0, 9, 9, 30, 11};
    sn_generator_opts go = {.build = tiny_kv, .ctx = 32, .n_layer = 2, .batch = 1, .base16 = low};
    sn_generator *gen;
    sn_err e;
    ck_assert_msg(sn_generator_new(&go, d, &gen, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_generator_load(gen, sn_trainer_weights(t), &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_generator_forced(gen, toks, 10, 4, logits, &e) == SN_OK, "%s", e.msg);
    const sn_program *p = sn_generator_decode_program(gen);
    int64_t bytes = 0;
    *n16 = 0;
    for (int i = 0; i < p->g->n_nodes; i++) {
        const sn_node *n = p->g->nodes[i];
        if (n->op != SN_OP_PARAM) continue;
        bytes += sn_numel(n) * sn_dtype_bits(n->dtype) / 8;
        *n16 += n->dtype == low;
    }
    sn_generator_free(gen);
    return bytes;
}

/* Samples of a bf16 LoRA run go over the KV cache with the base still 16-bit: the generator
 * stores the trainer's base in bf16 and each product reads it widened, so its logits are those
 * of an f32 generator loaded with the same (widened) weights, bit for bit, in fewer bytes. */
START_TEST(generator_keeps_the_16bit_base) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = model(GPT2_LORA, B, true, SN_PRECISION_BF16, true, NULL);
    sn_trainer *t = trainer(g, d, 3, 8);
    steps(t, 3, NULL);
    enum { ROWS = 10 - 4 + 1 };
    float *a = malloc(sizeof(float) * ROWS * V), *b = malloc(sizeof(float) * ROWS * V);
    int n16, n32;
    int64_t low = forced(d, t, SN_BF16, a, &n16), full = forced(d, t, (sn_dtype)0, b, &n32);
    ck_assert_int_eq(n16, 8); /* tiny GPT-2's linear weights: 4 a layer */
    for (int i = 0; i < ROWS * V; i++)
        ck_assert_msg(a[i] == b[i], "logit %d: %.9g over the bf16 base, %.9g over f32", i, a[i], b[i]);
    ck_assert_msg(low < full, "bf16 base %lld bytes, f32 %lld", (long long)low, (long long)full);
    printf("the KV generator over a bf16 base: the f32 generator's logits bit for bit, weights "
           "%lld bytes against %lld\n", (long long)low, (long long)full);
    free(a);
    free(b);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("base16");
    TCase *t = tcase_create("base16");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, half_rounds_as_the_interpreter);
    tcase_add_loop_test(t, losses_bit_identical_interp, 0, CASES);
    tcase_add_loop_test(t, losses_bit_identical_cpu, 0, CASES);
    tcase_add_test(t, fp32_unchanged);
    tcase_add_test(t, set_rounds_get_widens_fp16_refuses);
    tcase_add_test(t, checkpoint_resume_across);
    tcase_add_test(t, samples_over_the_16bit_base);
    tcase_add_test(t, generator_keeps_the_16bit_base);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
