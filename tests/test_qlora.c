/* test_qlora.c: training over an NF4 base (QLoRA, issue 25): the base a QLoRA trainer starts
 * from is the LoRA trainer's f32 base quantized, bit for bit; its first loss is the LoRA model's
 * over the dequantized base exactly; a run on the CPU device (f32 and fp16) follows the
 * interpreter, trains the adapters alone and tracks the LoRA run of the same seed; a checkpoint resumes bit for bit; a new
 * run from a checkpoint crosses kinds (f32 quantized into NF4, NF4 dequantized into f32); a resume
 * across QLoRA and LoRA is refused by name, an NF4 record with a NaN scale as corrupt; a sampler with NF4 storage (the trainer's bytes)
 * samples as one over the dequantized weights. Convention: tiny GPT-2 (vocabulary 64), adapters of
 * rank 4 on every linear layer, whose 8 weights the nf4 pass stores as NF4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "frontend/lora.h"
#include "ir/nf4.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "program/program.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "train/sample.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64, RANK = 4, N_NF4 = 8, N_ADAPTERS = 16 };

/* tiny GPT-2 with LoRA adapters, its base stored as NF4 or not, through the session's passes */
static sn_graph *tiny(bool nf4, sn_precision prec) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = RANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_gpt2_build_lora(g, &c, B, T, &l, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = prec;
    o.nf4 = nf4;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_trainer *trainer(sn_graph *g, sn_device *d, uint64_t seed, int steps) {
    return sn_test_trainer(g, d, seed, steps, 1e-2f);
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) { sn_test_rule_batch(x, y, B * T, V, seed); }

static float *weights(const sn_trainer *t, int i) {
    sn_err e;
    float *w = malloc(4 * (size_t)sn_numel(sn_trainer_param_value(t, i)));
    ck_assert_msg(w && sn_trainer_get_param(t, i, SN_PARAM_WEIGHTS, w, &e) == SN_OK, "%s", e.msg);
    return w;
}

static uint8_t *packed(const sn_trainer *t, int i) {
    sn_err e;
    uint8_t *q = malloc((size_t)sn_nf4_layout_of(sn_numel(sn_trainer_param_value(t, i))).bytes);
    ck_assert_msg(q && sn_trainer_get_nf4(t, i, q, &e) == SN_OK, "%s", e.msg);
    return q;
}

/* Every NF4 parameter of tq holds sn_nf4_quantize of tl's f32 weights of its name, bit for
 * bit, and every other parameter equals tl's; returns the NF4 parameters' count. */
static int check_quantized_base(const sn_trainer *tq, const sn_trainer *tl, const char *what) {
    int nf4 = 0;
    ck_assert_int_eq(sn_trainer_param_count(tq), sn_trainer_param_count(tl));
    for (int i = 0; i < sn_trainer_param_count(tq); i++) {
        const char *name = sn_trainer_param_node(tq, i)->name;
        int j = sn_trainer_find_param(tl, name);
        ck_assert_msg(j >= 0, "%s: %s missing", what, name);
        const sn_node *w = sn_trainer_param_value(tq, i), *wl = sn_trainer_param_value(tl, j);
        ck_assert(w->rank == wl->rank && !memcmp(w->shape, wl->shape, 8 * (size_t)w->rank));
        float *f = weights(tl, j);
        if (sn_trainer_param_nf4(tq, i)) {
            nf4++;
            ck_assert_msg(sn_trainer_get_param(tq, i, SN_PARAM_M, f, &(sn_err){0}) == SN_OK && f[0] == 0,
                          "%s: %s has moments", what, name);
            free(f);
            f = weights(tl, j);
            int64_t n = sn_numel(w);
            size_t bytes = (size_t)sn_nf4_layout_of(n).bytes;
            uint8_t *want = malloc(bytes), *got = packed(tq, i);
            sn_err e;
            ck_assert(sn_nf4_quantize(f, n, want, &e) == SN_OK);
            ck_assert_msg(!memcmp(got, want, bytes), "%s: %s's NF4 bytes are not its f32 weights "
                          "quantized", what, name);
            free(want), free(got);
        } else {
            float *g = weights(tq, i);
            ck_assert_msg(!memcmp(f, g, 4 * (size_t)sn_numel(w)), "%s: %s differs", what, name);
            free(g);
        }
        free(f);
    }
    return nf4;
}

/* ---- the base: the LoRA run's, quantized ---- */

START_TEST(base_is_the_lora_base_quantized) {
    sn_graph *gq = tiny(true, SN_PRECISION_BF16), *gl = tiny(false, SN_PRECISION_BF16);
    sn_trainer *tq = trainer(gq, NULL, 7, 4), *tl = trainer(gl, NULL, 7, 4);
    ck_assert_int_eq(check_quantized_base(tq, tl, "seed 7"), N_NF4);
    /* the storage keeps the weight's init rule (normal, GPT-2's std) and the stream of its name:
       another seed draws other weights */
    sn_graph *g8 = tiny(true, SN_PRECISION_BF16); /* a trainer compiles its graph in place */
    sn_trainer *t8 = trainer(g8, NULL, 8, 4);
    for (int i = 0; i < sn_trainer_param_count(tq); i++) {
        if (!sn_trainer_param_nf4(tq, i)) continue;
        const sn_node *p = sn_trainer_param_node(tq, i);
        ck_assert_msg(p->a.init == SN_INIT_NORMAL && p->a.f > 0, "%s: init %d", p->name, p->a.init);
        uint8_t *a = packed(tq, i), *b = packed(t8, i);
        ck_assert_msg(memcmp(a, b, (size_t)sn_numel(p)), "%s: seeds 7 and 8 quantize alike", p->name);
        free(a), free(b);
    }
    printf("QLoRA's base: %d weights stored as NF4, each the LoRA run's f32 weights quantized bit "
           "for bit\n", N_NF4);
    sn_trainer_free(t8);
    sn_graph_free(g8);
    sn_trainer_free(tq);
    sn_trainer_free(tl);
    sn_graph_free(gq);
    sn_graph_free(gl);
}
END_TEST

/* A weight of a million (1024 x 1024) set into a QLoRA trainer: quantized over a thread pool
 * (train.c, from a million weights), the bytes sn_nf4_quantize writes on one thread. */
START_TEST(large_weight_quantized_over_a_pool) {
    enum { K = 1024, N = 1024 };
    sn_graph *g = sn_graph_new();
    sn_node *idx = sn_input_tokens(g, "idx", SN_SHAPE(1, 2));
    sn_node *y = sn_input_targets(g, "y", SN_SHAPE(1, 2));
    sn_node *wte = sn_param(g, "wte", SN_F32, SN_SHAPE(16, K), SN_INIT_NORMAL, 0.02f);
    sn_node *x = sn_embedding(g, wte, idx);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(K, N), SN_INIT_NORMAL, 0.02f);
    sn_lora l = {.rank = 1, .alpha = 1};
    sn_node *logits = sn_add(g, sn_matmul(g, x, w), sn_lora_path(g, x, "w", K, N, &l));
    sn_graph_set_loss(g, sn_cross_entropy(g, logits, y, -1));
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_lora_freeze_base(g);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.nf4 = true;
    sn_err e;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_trainer *t = trainer(g, NULL, 5, 1);
    int i = sn_trainer_find_param(t, "w");
    ck_assert(i >= 0 && sn_trainer_param_nf4(t, i));
    int64_t n = K * N, bytes = sn_nf4_layout_of(n).bytes;
    ck_assert(n >= 1 << 20); /* train.c's pool from a million weights */
    float *v = malloc(sizeof(float) * (size_t)n);
    sn_rng r = sn_rng_seed(9);
    for (int64_t k = 0; k < n; k++) v[k] = (float)((k / 64 % 5 + 1) * 0.01 * sn_rng_normal(&r));
    uint8_t *want = malloc((size_t)bytes);
    ck_assert(sn_nf4_quantize(v, n, want, &e) == SN_OK);
    ck_assert_msg(sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, v, &e) == SN_OK, "%s", e.msg);
    uint8_t *got = packed(t, i);
    ck_assert_msg(!memcmp(got, want, (size_t)bytes), "the trainer's bytes of a million weights "
                  "differ from sn_nf4_quantize's");
    v[n - 3] = NAN; /* refused by index, naming the parameter */
    ck_assert(sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, v, &e) == SN_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "weight 1048573 of 1048576 is nan") && strstr(e.msg, "parameter w,"),
                  "%s", e.msg);
    free(v), free(want), free(got);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

/* ---- a run: the first loss, the CPU device against the interpreter, against LoRA ---- */

enum { STEPS = 12 };

/* The losses of STEPS steps on one fixed batch. */
static void run(sn_trainer *t, double *loss) {
    int32_t x[B * T], y[B * T];
    batch(x, y, 3);
    sn_err e;
    for (int s = 0; s < STEPS; s++) {
        sn_step_stats st;
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        loss[s] = st.loss;
    }
}

/* n steps on the fixed batch */
static void steps_on(sn_trainer *t, int n) {
    int32_t x[B * T], y[B * T];
    batch(x, y, 3);
    sn_err e;
    for (int s = 0; s < n; s++) ck_assert_msg(sn_trainer_step(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
}

START_TEST(first_loss_is_the_dequantized_models) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *gq = tiny(true, SN_PRECISION_FP32), *gl = tiny(false, SN_PRECISION_FP32);
    sn_trainer *tq = trainer(gq, d, 5, STEPS), *tl = trainer(gl, d, 5, STEPS);
    for (int i = 0; i < sn_trainer_param_count(tq); i++) { /* LoRA over the dequantized base */
        if (!sn_trainer_param_nf4(tq, i)) continue;
        float *w = weights(tq, i);
        int j = sn_trainer_find_param(tl, sn_trainer_param_node(tq, i)->name);
        ck_assert(sn_trainer_set_param(tl, j, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
        free(w);
    }
    int32_t x[B * T], y[B * T];
    batch(x, y, 3);
    double lq, ll;
    ck_assert(sn_trainer_eval(tq, x, y, &lq, &e) == SN_OK && sn_trainer_eval(tl, x, y, &ll, &e) == SN_OK);
    ck_assert_msg(lq == ll, "QLoRA's first loss %.17g, the LoRA model's over the dequantized base "
                  "%.17g", lq, ll);
    printf("QLoRA's first loss %.9g: the dequantized base's, bit for bit\n", lq);
    sn_trainer_free(tq);
    sn_trainer_free(tl);
    sn_graph_free(gq);
    sn_graph_free(gl);
    sn_device_free(d);
}
END_TEST

/* A run of prec (f32 or fp16: the base unpacked to f16, the loss scaled) on the CPU device
 * against the interpreter running the same graph (16-bit rounding emulated), within tol: it
 * learns, trains the adapters alone and leaves the packed bytes as they were. */
static void cpu_against_interp(sn_precision prec, uint64_t seed, double tol) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *gc = tiny(true, prec), *gi = tiny(true, prec);
    sn_dtype low = prec == SN_PRECISION_FP16 ? SN_F16 : SN_F32;
    int unpacked = 0; /* to the products' dtype */
    for (int i = 0; i < gc->n_nodes; i++)
        unpacked += gc->nodes[i]->op == SN_OP_DEQUANT_NF4 && gc->nodes[i]->dtype == low;
    ck_assert_msg(unpacked >= N_NF4, "%d dequantizes to %s", unpacked, sn_dtype_name(low));
    sn_trainer *tc = trainer(gc, d, seed, STEPS), *ti = trainer(gi, NULL, seed, STEPS);
    float **before = sn_param_snapshot(tc);
    int np = sn_trainer_param_count(tc);
    uint8_t *bytes[64];
    ck_assert(np <= 64);
    for (int i = 0; i < np; i++) bytes[i] = sn_trainer_param_nf4(tc, i) ? packed(tc, i) : NULL;
    double lc[STEPS], li[STEPS];
    run(tc, lc);
    run(ti, li);
    char what[96];
    snprintf(what, sizeof what, "QLoRA losses in %s, CPU device against the interpreter", sn_precision_name(prec));
    sn_check_close(what, lc, li, STEPS, tol, 0);
    ck_assert_msg(lc[STEPS - 1] < lc[0] - 0.3, "loss %g -> %g: the adapters do not learn", lc[0],
                  lc[STEPS - 1]);
    ck_assert_int_eq(sn_check_trained_only(tc, before, sn_lora_is_adapter, "a QLoRA run"), N_ADAPTERS);
    for (int i = 0; i < np; i++) { /* the packed bytes themselves, not only their values */
        if (!bytes[i]) continue;
        uint8_t *now = packed(tc, i);
        ck_assert_msg(!memcmp(now, bytes[i], (size_t)sn_numel(sn_trainer_param_node(tc, i))),
                      "%s's NF4 bytes changed", sn_trainer_param_node(tc, i)->name);
        free(now), free(bytes[i]);
    }
    printf("QLoRA tiny in %s on the CPU device: loss %.4f -> %.4f in %d steps, within %g of the "
           "interpreter; %d adapters trained, the NF4 base's bytes unchanged\n",
           sn_precision_name(prec), lc[0], lc[STEPS - 1], STEPS, tol, N_ADAPTERS);
    sn_trainer_free(tc);
    sn_trainer_free(ti);
    sn_graph_free(gc);
    sn_graph_free(gi);
    sn_device_free(d);
}

START_TEST(cpu_matches_interp_adapters_only) { cpu_against_interp(SN_PRECISION_FP32, 11, 1e-4); }
END_TEST

/* fp16 QLoRA (each dequantize kernel writing f16; measured 5.3e-5 from the interpreter) */
START_TEST(fp16_cpu_matches_interp) { cpu_against_interp(SN_PRECISION_FP16, 17, 5e-4); }
END_TEST

/* The issue's target is QLoRA within 0.05 of bf16 LoRA over a long run (measured by hand,
 * docs/finetune.md); here a short one, step by step. */
START_TEST(tracks_lora_bf16) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *gq = tiny(true, SN_PRECISION_BF16), *gl = tiny(false, SN_PRECISION_BF16);
    sn_trainer *tq = trainer(gq, d, 13, STEPS), *tl = trainer(gl, d, 13, STEPS);
    double lq[STEPS], ll[STEPS], most = 0;
    run(tq, lq);
    run(tl, ll);
    for (int s = 0; s < STEPS; s++) most = fmax(most, fabs(lq[s] - ll[s]));
    ck_assert_msg(most < 0.05, "QLoRA strays %g from LoRA", most);
    ck_assert_msg(lq[STEPS - 1] < lq[0] - 0.3, "QLoRA bf16: loss %g -> %g", lq[0], lq[STEPS - 1]);
    printf("bf16, %d steps: QLoRA %.4f -> %.4f, LoRA %.4f -> %.4f, at most %.4f apart\n", STEPS,
           lq[0], lq[STEPS - 1], ll[0], ll[STEPS - 1], most);
    sn_trainer_free(tq);
    sn_trainer_free(tl);
    sn_graph_free(gq);
    sn_graph_free(gl);
    sn_device_free(d);
}
END_TEST

/* ---- samples: the sampler's NF4 storage gets the trainer's bytes ---- */

/* The batch-1 forward of tiny GPT-2 with adapters (its base NF4 or not) and its sampler. */
static sn_sampler *sampler(bool nf4, sn_device *d, sn_graph **g) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = RANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_gpt2_build_lora(*g, &c, 1, T, &l, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.nf4 = nf4;
    ck_assert_msg(sn_compile(*g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_sampler *s = sn_sampler_new(*g, sn_graph_input(*g, SN_ROLE_TOKENS), (*g)->logits, d, &e);
    ck_assert_msg(s, "%s", e.msg);
    return s;
}

START_TEST(samples_read_the_packed_bytes) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = tiny(true, SN_PRECISION_FP32), *gq, *gl;
    sn_trainer *t = trainer(g, d, 17, STEPS);
    steps_on(t, 4);
    /* one sampler with the nf4 pass (the bytes), one without (the weights dequantized) */
    sn_sampler *sq = sampler(true, d, &gq), *sl = sampler(false, d, &gl);
    ck_assert_msg(sn_sampler_load(sq, t, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_sampler_load(sl, t, &e) == SN_OK, "%s", e.msg);
    int32_t prompt[1] = {7}, a[12], b[12];
    sn_sample_opts so = {.n_new = 12, .temperature = 0, .vocab = V, .seed = 1};
    ck_assert(sn_sampler_generate(sq, prompt, 1, &so, a, &e) == SN_OK);
    ck_assert(sn_sampler_generate(sl, prompt, 1, &so, b, &e) == SN_OK);
    ck_assert_msg(!memcmp(a, b, sizeof a), "greedy samples differ: NF4 %d %d %d, dequantized %d %d %d",
                  a[0], a[1], a[2], b[0], b[1], b[2]);
    sn_sampler_free(sq), sn_sampler_free(sl);
    sn_graph_free(gq), sn_graph_free(gl);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

/* ---- checkpoints ---- */

static void meta(sn_run_state *r, bool qlora) {
    *r = (sn_run_state){0};
    sn_run_meta_set(r, "model", "tiny");
    if (qlora) sn_run_meta_set(r, "qlora", "NF4 base");
}

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

START_TEST(resume_bit_exact_and_refusals) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    char path[] = "/tmp/sn_test_qlora_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_graph *g = tiny(true, SN_PRECISION_BF16), *g2 = tiny(true, SN_PRECISION_BF16);
    sn_trainer *t = trainer(g, d, 21, 8), *t2 = trainer(g2, d, 21, 8);
    sn_run_state r, r2;
    meta(&r, true);
    steps(t, 3, NULL);
    ck_assert_msg(sn_checkpoint_save(path, t, &r, &e) == SN_OK, "%s", e.msg);
    double a[3], b[3];
    steps(t, 3, a);
    for (int i = 0; i < sn_trainer_param_count(t2); i++) /* the bytes must come from the file */
        if (sn_trainer_param_nf4(t2, i)) {
            uint8_t *zeros = calloc((size_t)sn_numel(sn_trainer_param_node(t2, i)), 1);
            ck_assert(sn_trainer_set_nf4(t2, i, zeros, &e) == SN_OK);
            free(zeros);
        }
    meta(&r2, true);
    ck_assert_msg(sn_checkpoint_load(path, t2, &r2, &e) == SN_OK, "%s", e.msg);
    steps(t2, 3, b);
    ck_assert_msg(!memcmp(a, b, sizeof a), "losses after resume: %.9g %.9g %.9g, straight %.9g "
                  "%.9g %.9g", b[0], b[1], b[2], a[0], a[1], a[2]);
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        float *x = weights(t, i), *y = weights(t2, i);
        ck_assert_msg(!memcmp(x, y, 4 * (size_t)sn_numel(sn_trainer_param_value(t, i))),
                      "%s differs after resume", sn_trainer_param_node(t, i)->name);
        free(x), free(y);
        if (!sn_trainer_param_nf4(t, i)) continue;
        uint8_t *p = packed(t, i), *q = packed(t2, i);
        ck_assert(!memcmp(p, q, (size_t)sn_numel(sn_trainer_param_node(t, i))));
        free(p), free(q);
    }
    /* a LoRA run (f32 base) resuming it, and a QLoRA run resuming a LoRA checkpoint: refused */
    sn_graph *gl = tiny(false, SN_PRECISION_BF16);
    sn_trainer *tl = trainer(gl, d, 21, 8);
    sn_run_state rl;
    meta(&rl, false);
    ck_assert(sn_checkpoint_load(path, tl, &rl, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "it was saved by a QLoRA (NF4 base) run and this one is not: resume "
                         "with --qlora R"), "%s", e.msg);
    /* a new run from the QLoRA checkpoint in full precision: the base dequantized */
    ck_assert_msg(sn_checkpoint_init(path, tl, &rl, NULL, &e) == SN_OK, "%s", e.msg);
    sn_graph *g3 = tiny(true, SN_PRECISION_BF16), *g4 = tiny(true, SN_PRECISION_BF16);
    sn_trainer *t3 = trainer(g3, d, 21, 8);
    meta(&r2, true);
    ck_assert(sn_checkpoint_load(path, t3, &r2, &e) == SN_OK);
    for (int i = 0; i < sn_trainer_param_count(t3); i++) {
        int j = sn_trainer_find_param(tl, sn_trainer_param_node(t3, i)->name);
        float *x = weights(t3, i), *y = weights(tl, j);
        ck_assert_msg(!memcmp(x, y, 4 * (size_t)sn_numel(sn_trainer_param_value(t3, i))),
                      "--init of a QLoRA checkpoint in full precision: %s", sn_trainer_param_node(t3, i)->name);
        free(x), free(y);
    }
    /* the LoRA run's checkpoint: refused on resume by QLoRA, quantized by --init */
    ck_assert_msg(sn_checkpoint_save(path, tl, &rl, &e) == SN_OK, "%s", e.msg);
    sn_trainer *t4 = trainer(g4, d, 98, 8);
    meta(&r2, true);
    ck_assert(sn_checkpoint_load(path, t4, &r2, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "saved by a full-precision run and this one is QLoRA (NF4 base): "
                         "resume without --qlora R"), "%s", e.msg);
    ck_assert_msg(sn_checkpoint_init(path, t4, &r2, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(check_quantized_base(t4, tl, "--init of a LoRA checkpoint"), N_NF4);
    /* an NF4 record whose mean is NaN (the CRC made good again): corrupt, named, t4 unchanged */
    ck_assert_msg(sn_checkpoint_save(path, t4, &r2, &e) == SN_OK, "%s", e.msg);
    FILE *f = fopen(path, "rb");
    ck_assert(f);
    static uint8_t file[1 << 20];
    size_t len = fread(file, 1, sizeof file, f);
    fclose(f);
    ck_assert(len > 32 && len < sizeof file);
    const char *name = NULL;
    for (int i = 0; i < sn_trainer_param_count(t4) && !name; i++)
        if (sn_trainer_param_nf4(t4, i)) name = sn_trainer_param_node(t4, i)->name;
    uint8_t *at = memmem(file + 32, len - 32, name, strlen(name));
    ck_assert(at);
    uint8_t *mean = at + strlen(name) + 8 + 4 + 8 * 2; /* body size, rank, shape (2) */
    float nan = NAN;
    memcpy(mean, &nan, 4);
    uint32_t crc = (uint32_t)crc32_z(0, file + 32, len - 32);
    memcpy(file + 24, &crc, 4);
    int k = sn_trainer_find_param(t4, name);
    uint8_t *before = packed(t4, k);
    meta(&r2, true);
    ck_assert(sn_checkpoint_load_bytes(path, file, len, t4, &r2, &e) == SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, "is corrupt: the NF4 weights of parameter") && strstr(e.msg, name), "%s", e.msg);
    uint8_t *after = packed(t4, k);
    ck_assert(!memcmp(before, after, (size_t)sn_numel(sn_trainer_param_node(t4, k))));
    free(before), free(after);
    sn_ckpt_weights cw;
    ck_assert(sn_checkpoint_read_weights_bytes(path, file, len, &cw, &e) == SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, "the NF4 weights of parameter"), "%s", e.msg);
    printf("QLoRA checkpoint: resumed bit for bit (losses, adapters, NF4 bytes); --init crosses "
           "kinds; resume across QLoRA and LoRA refused\n");
    unlink(path);
    sn_run_state_free(&r), sn_run_state_free(&r2), sn_run_state_free(&rl);
    sn_trainer_free(t), sn_trainer_free(t2), sn_trainer_free(t3), sn_trainer_free(t4);
    sn_trainer_free(tl);
    sn_graph_free(g), sn_graph_free(g2), sn_graph_free(g3), sn_graph_free(g4), sn_graph_free(gl);
    sn_device_free(d);
}
END_TEST

/* ---- generation: the base stays NF4 ---- */

static sn_status tiny_kv(sn_graph *g, int b, int t, bool decode, void *user, sn_err *e) {
    (void)user;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_gpt2_lora l = {.lora = {.rank = RANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    return sn_gpt2_build_kv(g, &c, b, t, decode, &l, e);
}

/* A generator of the checkpoint at path with its base NF4 or dequantized: the logits of a
 * forced sequence into logits ((n - n_prompt + 1) x V), the decode program's weight bytes. */
static int64_t forced(sn_device *d, const sn_ckpt_model *ck, bool nf4, float *logits) {
    static const int32_t toks[] = {3, 17, 42, 5, 63, 0, 9, 9, 30, 11};
    sn_generator_opts go = {.build = tiny_kv, .ctx = 32, .n_layer = 2, .batch = 1, .nf4 = nf4};
    sn_generator *gen;
    sn_err e;
    ck_assert_msg(sn_generator_new(&go, d, &gen, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_generator_load(gen, sn_ckpt_model_weights(ck), &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_generator_forced(gen, toks, 10, 4, logits, &e) == SN_OK, "%s", e.msg);
    const sn_program *p = sn_generator_decode_program(gen);
    int64_t bytes = 0, u8 = 0;
    for (int i = 0; i < p->g->n_nodes; i++) {
        const sn_node *n = p->g->nodes[i];
        if (n->op != SN_OP_PARAM) continue;
        bytes += sn_numel(n) * sn_dtype_bits(n->dtype) / 8;
        u8 += n->dtype == SN_U8;
    }
    ck_assert_int_eq(u8, nf4 ? N_NF4 : 0);
    int gemv = 0, dequant = 0; /* batch 1: every NF4 product reads its packed bytes (kernel.h) */
    for (int i = 0; i < p->n_kernels; i++) {
        gemv += p->kernels[i]->kind == SN_KER_GEMV;
        dequant += p->kernels[i]->kind == SN_KER_DEQUANT;
    }
    ck_assert_msg(gemv == (nf4 ? N_NF4 : 0) && dequant == 0, "the decode program has %d nf4_gemv "
                  "and %d dequant kernels", gemv, dequant);
    sn_generator_free(gen);
    return bytes;
}

/* sinter generate from a QLoRA checkpoint keeps the base NF4 on the device (its records' bytes
 * exactly): the logits of a forced sequence are the dequantized base's within f32 rounding, in
 * fewer weight bytes; an f32 checkpoint's weights are quantized on the way in. Each product
 * reads exactly the weights the f32 base holds, but at batch 1 (and a prompt of 4) it is the NF4
 * product (kernel.h), whose f32 sum runs in its own order, not the GEMM library's: each
 * product's y moves by at most K 2^-24 sum_k |x w| (K <= 4 C = 128 here: 8e-6 of that sum),
 * and two layers, the norms and the head carry that into the logits; 2e-5 of the logits' scale
 * (|logit| + 1) is that bound with room, far below what a wrong weight moves them (the CPU
 * kernel's nibble order swapped, planted once, moved logit 0 by 0.06). Measured: equal bit for
 * bit on this CPU (oneDNN's small GEMV sums k in order too). */
START_TEST(generation_keeps_the_base_nf4) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    char path[] = "/tmp/sn_test_qlora_gen_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_graph *g = tiny(true, SN_PRECISION_FP32);
    sn_trainer *t = trainer(g, d, 5, 8);
    steps(t, 3, NULL);
    sn_run_state r;
    meta(&r, true);
    ck_assert_msg(sn_checkpoint_save(path, t, &r, &e) == SN_OK, "%s", e.msg);
    sn_ckpt_model *ck;
    ck_assert_msg(sn_ckpt_model_read(path, &ck, &e) == SN_OK, "%s", e.msg);
    enum { ROWS = 10 - 4 + 1 };
    float *a = malloc(sizeof(float) * ROWS * V), *b = malloc(sizeof(float) * ROWS * V);
    int64_t packed_bytes = forced(d, ck, true, a), full = forced(d, ck, false, b);
    double worst = 0;
    for (int i = 0; i < ROWS * V; i++) {
        double err = fabs((double)a[i] - b[i]), tol = 2e-5 * (fabs(b[i]) + 1);
        ck_assert_msg(err <= tol, "logit %d: %.9g with the NF4 base, %.9g dequantized (error %.3g, "
                      "tolerance %.3g)", i, a[i], b[i], err, tol);
        worst = fmax(worst, err / tol);
    }
    ck_assert_msg(packed_bytes < full, "NF4 weights %lld bytes, f32 %lld", (long long)packed_bytes,
                  (long long)full);
    printf("generation from a QLoRA checkpoint: the NF4 base's logits (its products nf4_gemv "
           "kernels) are the dequantized base's within %.2g of the tolerance; the decode program's "
           "parameters %lld bytes against %lld\n", worst, (long long)packed_bytes, (long long)full);
    sn_ckpt_model_free(ck);
    sn_trainer_free(t);
    sn_graph_free(g);

    /* a LoRA checkpoint (f32 base) generated with the base in NF4: quantized on the way in, as
       the trainer's --init quantizes it */
    g = tiny(false, SN_PRECISION_FP32);
    t = trainer(g, d, 5, 8);
    meta(&r, false);
    ck_assert_msg(sn_checkpoint_save(path, t, &r, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_ckpt_model_read(path, &ck, &e) == SN_OK, "%s", e.msg);
    forced(d, ck, true, a);
    for (int i = 0; i < ROWS * V; i++) ck_assert_msg(isfinite(a[i]), "logit %d: %g", i, a[i]);
    sn_ckpt_model_free(ck);
    sn_trainer_free(t);
    sn_graph_free(g);
    free(a);
    free(b);
    unlink(path);
    sn_device_free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("qlora");
    TCase *t = tcase_create("qlora");
    tcase_add_test(t, base_is_the_lora_base_quantized);
    tcase_add_test(t, large_weight_quantized_over_a_pool);
    tcase_add_test(t, first_loss_is_the_dequantized_models);
    tcase_add_test(t, cpu_matches_interp_adapters_only);
    tcase_add_test(t, tracks_lora_bf16);
    tcase_add_test(t, fp16_cpu_matches_interp);
    tcase_add_test(t, samples_read_the_packed_bytes);
    tcase_add_test(t, resume_bit_exact_and_refusals);
    tcase_add_test(t, generation_keeps_the_base_nf4);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
