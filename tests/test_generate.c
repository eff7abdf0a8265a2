/* test_generate.c: generation with a KV cache (train/generate.h) on a tiny GPT-2 trained a few
 * steps: greedy and seeded draws equal the recomputing sampler's (train/sample.h) token for
 * token, the decode program's logits at every position equal the full forward's (the reference
 * interpreter's) to 1e-5, a batch of prompts of different lengths equals each prompt alone,
 * and what does not fit the context or the model is refused with a message that says so. Each on
 * the reference interpreter and on the CPU device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interp/interp.h"
#include "models/gpt2.h"
#include "runtime/device.h"
#include "train/checkpoint.h"
#include "train/generate.h"
#include "harness.h"

enum { V = 64, STEPS = 12 };

static sn_gpt2_config tiny_config(void) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c)); /* ctx 32, 2 layers, 2 heads, 32 channels */
    c.vocab = V;
    return c;
}

static sn_status build_kv(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e) {
    return sn_gpt2_build_kv(g, user, B, T, decode, NULL, e);
}

/* tiny GPT-2 trained STEPS steps on the interpreter on a repeating pattern, so that its greedy
 * continuations are not a constant; the caller frees the trainer and *g. */
static sn_trainer *trained(sn_graph **g) {
    enum { B = 2, T = 16 };
    sn_gpt2_config c = tiny_config();
    *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(*g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(*g, m.loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    sn_trainer *t = sn_trainer_new(*g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < B * T; i++) {
            x[i] = (int32_t)((i * 7 + s) % 23);
            y[i] = (int32_t)(((i + 1) * 7 + s) % 23);
        }
        sn_step_stats st;
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
    }
    return t;
}

/* device 0: the reference interpreter (NULL); 1: the CPU device */
static sn_device *open_device(int which) {
    if (!which) return NULL;
    sn_device *d;
    sn_err e;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

static sn_generator *generator(sn_gpt2_config *c, int B, sn_device *d, const sn_trainer *t) {
    sn_generator *gen;
    sn_err e;
    sn_generator_opts o = {.build = build_kv, .user = c, .ctx = c->ctx, .n_layer = c->n_layer, .batch = B};
    ck_assert_msg(sn_generator_new(&o, d, &gen, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_generator_load(gen, sn_trainer_weights(t), &e) == SN_OK, "%s", e.msg);
    return gen;
}

/* Greedy and seeded generation with the cache equals the sampler's, which runs the whole
 * window for every token, up to the last token the context takes. */
START_TEST(cache_equals_recompute) {
    sn_graph *tg, *fg = sn_graph_new();
    sn_trainer *t = trained(&tg);
    sn_gpt2_config c = tiny_config();
    sn_device *d = open_device(_i);
    sn_gpt2 fm;
    sn_err e;
    ck_assert(sn_gpt2_build(fg, &c, 1, c.ctx, &fm, &e) == SN_OK);
    sn_sampler *s = sn_sampler_new(fg, fm.idx, fm.logits, d, &e);
    ck_assert_msg(s && sn_sampler_load(s, t, &e) == SN_OK, "%s", e.msg);
    sn_generator *gen = generator(&c, 1, d, t);
    int32_t prompt[5] = {3, 10, 17, 1, 8};
    enum { N = 32 - 5 + 1 }; /* the last token fed sits at position 31 */
    int32_t a[N], b[N];
    const int32_t *pp = prompt;
    int n = 5;
    for (int k = 0; k < 3; k++) {
        sn_sample_opts o = {.n_new = N, .temperature = k ? 1.0f : 0, .top_k = k == 2 ? 5 : 0, .seed = 11 + (uint64_t)k};
        ck_assert_msg(sn_sampler_generate(s, prompt, 5, &o, a, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_generator_generate(gen, &pp, &n, &o, b, NULL, NULL, &e) == SN_OK, "%s", e.msg);
        for (int i = 0; i < N; i++)
            ck_assert_msg(a[i] == b[i], "draw %d (temperature %g, top-k %d): token %d is %d without the "
                          "cache, %d with it", k, (double)o.temperature, o.top_k, i, a[i], b[i]);
    }
    int distinct = 0; /* the greedy run was not a constant */
    for (int i = 1; i < N; i++) distinct += a[i] != a[0];
    ck_assert_int_gt(distinct, 0);
    sn_generate_stats st;
    sn_generator_stats(gen, &st);
    ck_assert_int_eq(st.n_steps, N - 1);
    ck_assert(st.step_s && st.prefill_s > 0 && st.decode_s > 0);
    sn_generator_free(gen);
    sn_sampler_free(s);
    sn_device_free(d);
    sn_graph_free(fg);
    sn_trainer_free(t);
    sn_graph_free(tg);
}
END_TEST

/* The decode program's logits at every position, fed the tokens of a fixed sequence one at a
 * time after a 3-token prefill, equal the full forward's at that position (the interpreter, in
 * double precision) to 1e-5. */
START_TEST(decode_logits_equal_forward) {
    enum { N = 32, P = 3 };
    sn_graph *tg, *fg = sn_graph_new();
    sn_trainer *t = trained(&tg);
    sn_gpt2_config c = tiny_config();
    sn_device *d = open_device(_i);
    sn_gpt2 fm;
    sn_err e;
    ck_assert(sn_gpt2_build(fg, &c, 1, N, &fm, &e) == SN_OK);
    sn_interp *it = sn_interp_new(fg, false);
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 13 + 5) % V);
    ck_assert(sn_interp_set_i32(it, fm.idx, tok, &e) == SN_OK && sn_interp_set_i32(it, fm.targets, tok, &e) == SN_OK);
    for (int k = 0; k < fg->n_nodes; k++) {
        const sn_node *p = fg->nodes[k];
        if (p->op != SN_OP_PARAM) continue;
        float *w = malloc(sizeof(float) * (size_t)sn_numel(p));
        sn_weight_source src = sn_trainer_weights(t);
        ck_assert(src.get(src.src, p, w, &e) == SN_OK && sn_interp_set(it, p, w, &e) == SN_OK);
        free(w);
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    const double *want = sn_interp_value(it, fm.logits);
    sn_generator *gen = generator(&c, 1, d, t);
    float *got = malloc(sizeof(float) * (N - P + 1) * V);
    ck_assert_msg(sn_generator_forced(gen, tok, N, P, got, &e) == SN_OK, "%s", e.msg);
    for (int i = P - 1; i < N; i++) {
        double row[V];
        for (int v = 0; v < V; v++) row[v] = got[(i - P + 1) * V + v];
        char what[64];
        snprintf(what, sizeof what, "%s logits at position %d", i < P ? "prefill" : "decode", i);
        sn_check_close(what, row, want + (size_t)i * V, V, 1e-5, 1e-3);
    }
    free(got);
    sn_generator_free(gen);
    sn_interp_free(it);
    sn_device_free(d);
    sn_graph_free(fg);
    sn_trainer_free(t);
    sn_graph_free(tg);
}
END_TEST

/* Three prompts of 1, 6 and 4 tokens as one batch: each row is what that prompt gives alone
 * (greedy), and seeded draws of row b are those of seed + b alone. */
START_TEST(batch_rows_are_independent) {
    enum { B = 3, N = 12 };
    sn_graph *tg;
    sn_trainer *t = trained(&tg);
    sn_gpt2_config c = tiny_config();
    sn_device *d = open_device(_i);
    sn_generator *many = generator(&c, B, d, t), *one = generator(&c, 1, d, t);
    int32_t p0[] = {7}, p1[] = {1, 2, 3, 4, 5, 6}, p2[] = {9, 16, 0, 7};
    const int32_t *ps[B] = {p0, p1, p2};
    int lens[B] = {1, 6, 4};
    int32_t all[B * N], alone[N];
    sn_err e;
    for (int k = 0; k < 2; k++) {
        sn_sample_opts o = {.n_new = N, .temperature = k ? 1.0f : 0, .seed = 5};
        ck_assert_msg(sn_generator_generate(many, ps, lens, &o, all, NULL, NULL, &e) == SN_OK, "%s", e.msg);
        for (int b = 0; b < B; b++) {
            sn_sample_opts ob = o;
            ob.seed = o.seed + (uint64_t)b;
            ck_assert_msg(sn_generator_generate(one, &ps[b], &lens[b], &ob, alone, NULL, NULL, &e) == SN_OK, "%s", e.msg);
            for (int i = 0; i < N; i++)
                ck_assert_msg(all[b * N + i] == alone[i], "row %d token %d: %d in the batch, %d alone",
                              b, i, all[b * N + i], alone[i]);
        }
    }
    sn_generator_free(many);
    sn_generator_free(one);
    sn_device_free(d);
    sn_trainer_free(t);
    sn_graph_free(tg);
}
END_TEST

/* Past the context every row's window slides: the greedy tokens after a slide are those a fresh
 * call draws from the slid window as its prompt (its logits are a prefill's); a batch's longest
 * row (the one that fills first) slides as it does alone, greedy and seeded; the stats count
 * the slides. On the interpreter and the CPU device. */
START_TEST(window_slides_past_context) {
    enum { S = 32, K = S / 2, N = 20 };
    sn_graph *tg;
    sn_trainer *t = trained(&tg);
    sn_gpt2_config c = tiny_config();
    sn_device *d = open_device(_i);
    sn_generator *one = generator(&c, 1, d, t), *two = generator(&c, 2, d, t);
    int32_t full[S], p1[] = {3, 4, 5}, out[N], again[N], win[K], both[2 * N];
    for (int i = 0; i < S; i++) full[i] = (int32_t)(i * 7 % 23);
    const int32_t *pp = full, *wp = win, *ps[2] = {full, p1};
    int n = S, wn = K, lens[2] = {S, 3};
    sn_err e;
    /* a full prompt: the step after the prefill slides, the window full[17, 32) and out[0] */
    sn_sample_opts o = {.n_new = N};
    ck_assert_msg(sn_generator_generate(one, &pp, &n, &o, out, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_generate_stats st;
    sn_generator_stats(one, &st);
    ck_assert_int_eq(st.n_slides, 2); /* the second at the step drawing out[18]: 16 positions on */
    ck_assert_int_eq(st.n_steps, N - 1);
    memcpy(win, full + S - K + 1, sizeof(int32_t) * (K - 1));
    win[K - 1] = out[0];
    o.n_new = K + 1; /* up to its own slide */
    ck_assert_msg(sn_generator_generate(one, &wp, &wn, &o, again, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < K; i++)
        ck_assert_msg(again[i] == out[1 + i], "token %d after the slide: %d, from the window alone %d",
                      1 + i, out[1 + i], again[i]);
    for (int k = 0; k < 2; k++) { /* the batch's first row is the longest: alone the same */
        o = (sn_sample_opts){.n_new = N, .temperature = k ? 1.0f : 0, .seed = 11};
        ck_assert_msg(sn_generator_generate(one, &pp, &n, &o, out, NULL, NULL, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_generator_generate(two, ps, lens, &o, both, NULL, NULL, &e) == SN_OK, "%s", e.msg);
        for (int i = 0; i < N; i++)
            ck_assert_msg(both[i] == out[i], "row 0 token %d: %d in the batch, %d alone", i, both[i], out[i]);
    }
    sn_generator_free(one);
    sn_generator_free(two);
    sn_device_free(d);
    sn_trainer_free(t);
    sn_graph_free(tg);
}
END_TEST

static int streamed[64], n_streamed;
static int stop_after; /* steps */
static bool on_step(void *user, int step, const int32_t *ids) {
    (void)user;
    ck_assert_int_eq(step, n_streamed);
    streamed[n_streamed++] = ids[0];
    return n_streamed < stop_after;
}

/* What does not fit is refused by a message that says what to change; tokens stream in order. */
START_TEST(refusals_and_streaming) {
    sn_graph *tg;
    sn_trainer *t = trained(&tg);
    sn_gpt2_config c = tiny_config();
    sn_generator *gen = generator(&c, 1, NULL, t);
    int32_t prompt[40] = {0}, out[40];
    const int32_t *pp = prompt;
    sn_err e;
    int n = 33;
    sn_sample_opts o = {.n_new = 1};
    ck_assert_int_eq(sn_generator_generate(gen, &pp, &n, &o, out, NULL, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "33 tokens") && strstr(e.msg, "context is 32") &&
                  strstr(e.msg, "shorten the prompt"), "%s", e.msg);
    n = 0;
    ck_assert_int_eq(sn_generator_generate(gen, &pp, &n, &o, out, NULL, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "empty"), "%s", e.msg);
    n = 10, o.n_new = 23;
    n_streamed = 0, stop_after = 100;
    ck_assert_msg(sn_generator_generate(gen, &pp, &n, &o, out, on_step, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n_streamed, 23);
    ck_assert(!memcmp(streamed, out, sizeof(int32_t) * 23));
    n_streamed = 0, stop_after = 5; /* a stop token: no more steps */
    ck_assert_msg(sn_generator_generate(gen, &pp, &n, &o, out, on_step, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n_streamed, 5);
    sn_generate_stats st;
    sn_generator_stats(gen, &st);
    ck_assert_int_eq(st.n_steps, 4);
    sn_generator_free(gen);

    /* weights of another model: the parameter named, with both shapes */
    c.n_embd = 16;
    sn_generator_opts go = {.build = build_kv, .user = &c, .ctx = c.ctx, .n_layer = c.n_layer, .batch = 1};
    ck_assert_msg(sn_generator_new(&go, NULL, &gen, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_generator_load(gen, sn_trainer_weights(t), &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "wte") && strstr(e.msg, "f32[64,16]") && strstr(e.msg, "f32[64,32]"), "%s", e.msg);
    ck_assert_int_eq(sn_generator_generate(gen, &pp, &n, &o, out, NULL, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "no weights"), "%s", e.msg);
    sn_generator_free(gen);
    /* a model whose graphs are not generate.h's: its layer count says otherwise */
    go.n_layer = 3;
    ck_assert_int_eq(sn_generator_new(&go, NULL, &gen, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "decode graph has 5 outputs"), "%s", e.msg);
    sn_trainer_free(t);
    sn_graph_free(tg);
}
END_TEST

/* A checkpoint's model read without a trainer (train/checkpoint.h): its metadata, shapes and
 * weights are the trainer's, bit for bit, and generate the same tokens; a model of another width
 * or with fewer layers than the file is refused naming the parameter. */
START_TEST(checkpoint_model) {
    sn_graph *tg;
    sn_trainer *t = trained(&tg);
    sn_gpt2_config c = tiny_config();
    char path[256];
    snprintf(path, sizeof path, "%s/sn_generate_%d.ckpt", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    sn_run_state run = {0};
    sn_run_meta_set(&run, "model", "tiny");
    sn_run_meta_set(&run, "seq", "16");
    sn_err e;
    ck_assert_msg(sn_checkpoint_save(path, t, &run, &e) == SN_OK, "%s", e.msg);
    sn_ckpt_model *ck;
    ck_assert_msg(sn_ckpt_model_read(path, &ck, &e) == SN_OK, "%s", e.msg);
    char buf[32];
    ck_assert_str_eq(sn_ckpt_model_meta(ck, "model", buf, sizeof buf), "tiny");
    ck_assert_ptr_null(sn_ckpt_model_meta(ck, "nothing", buf, sizeof buf));
    int64_t shape[SN_MAX_RANK];
    ck_assert_int_eq(sn_ckpt_model_shape(ck, "wte", shape), 2);
    ck_assert(shape[0] == V && shape[1] == 32);
    ck_assert_int_eq(sn_ckpt_model_shape(ck, "nothing", shape), -1);
    ck_assert_str_eq(sn_ckpt_model_param_name(ck, 0), sn_trainer_param_node(t, 0)->name);
    ck_assert_ptr_null(sn_ckpt_model_param_name(ck, sn_trainer_param_count(t)));
    sn_weight_source fw = sn_ckpt_model_weights(ck), tw = sn_trainer_weights(t);
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        size_t n = (size_t)sn_numel(p);
        float *a = malloc(4 * n), *b = malloc(4 * n);
        ck_assert(fw.get(fw.src, p, a, &e) == SN_OK && tw.get(tw.src, p, b, &e) == SN_OK);
        ck_assert_msg(!memcmp(a, b, 4 * n), "%s differs", p->name);
        free(a);
        free(b);
    }
    /* the same greedy tokens from the file's weights as from the trainer's */
    sn_generator *g1 = generator(&c, 1, NULL, t), *g2;
    sn_generator_opts go = {.build = build_kv, .user = &c, .ctx = c.ctx, .n_layer = c.n_layer, .batch = 1};
    ck_assert_msg(sn_generator_new(&go, NULL, &g2, &e) == SN_OK && sn_generator_load(g2, fw, &e) == SN_OK &&
                  sn_ckpt_model_covers(ck, sn_generator_decode_graph(g2), &e) == SN_OK, "%s", e.msg);
    int32_t prompt[2] = {4, 9}, a[10], b[10];
    const int32_t *pp = prompt;
    int n = 2;
    sn_sample_opts o = {.n_new = 10};
    ck_assert(sn_generator_generate(g1, &pp, &n, &o, a, NULL, NULL, &e) == SN_OK);
    ck_assert(sn_generator_generate(g2, &pp, &n, &o, b, NULL, NULL, &e) == SN_OK);
    ck_assert(!memcmp(a, b, sizeof a));
    sn_generator_free(g1);
    sn_generator_free(g2);
    /* another width: the parameter and both shapes; fewer layers: the file's extra parameter */
    sn_gpt2_config narrow = c, shallow = c;
    narrow.n_embd = 16;
    go.user = &narrow;
    ck_assert_msg(sn_generator_new(&go, NULL, &g2, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_generator_load(g2, fw, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "wte is [64,32] there, [64,16] here") && strstr(e.msg, "model tiny"), "%s", e.msg);
    sn_generator_free(g2);
    shallow.n_layer = 1;
    go.user = &shallow, go.n_layer = 1;
    ck_assert_msg(sn_generator_new(&go, NULL, &g2, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_ckpt_model_covers(ck, sn_generator_decode_graph(g2), &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "parameter h.1.") && strstr(e.msg, "lacks"), "%s", e.msg);
    sn_generator_free(g2);
    sn_ckpt_model_free(ck);
    /* not a checkpoint */
    FILE *f = fopen(path, "wb");
    fputs("hello", f);
    fclose(f);
    ck_assert_int_eq(sn_ckpt_model_read(path, &ck, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, "not a sinter checkpoint"), "%s", e.msg);
    remove(path);
    sn_run_state_free(&run);
    sn_trainer_free(t);
    sn_graph_free(tg);
}
END_TEST

int main(void) {
    Suite *s = suite_create("generate");
    TCase *tc = tcase_create("generate");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, cache_equals_recompute, 0, 2);
    tcase_add_loop_test(tc, decode_logits_equal_forward, 0, 2);
    tcase_add_loop_test(tc, batch_rows_are_independent, 0, 2);
    tcase_add_loop_test(tc, window_slides_past_context, 0, 2);
    tcase_add_test(tc, refusals_and_streaming);
    tcase_add_test(tc, checkpoint_model);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
