/* test_train.c: the trainer: the learning-rate schedule, parameter initialisation, a tiny
 * GPT-2 overfitting one batch, a diverging run reported without touching the weights,
 * gradient accumulation against one big batch, and sampling (seeded, top-k, greedy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "runtime/device.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "train/sample.h"
#include "train/train.h"
#include "harness.h"

START_TEST(lr_schedule) {
    sn_train_opts o;
    sn_train_opts_default(&o, 100);
    ck_assert_int_eq(o.warmup, 10);
    ck_assert_float_eq_tol(sn_train_lr(&o, 0), o.lr / 10, 1e-9);
    ck_assert_float_eq_tol(sn_train_lr(&o, 9), o.lr, 1e-9);
    ck_assert_float_eq_tol(sn_train_lr(&o, 55), o.lr * (o.min_lr_frac + 1) / 2, 1e-6); /* half way */
    ck_assert_float_eq_tol(sn_train_lr(&o, 100), o.lr * o.min_lr_frac, 1e-9);
    for (int s = 10; s < 100; s++) ck_assert(sn_train_lr(&o, s + 1) <= sn_train_lr(&o, s));
}
END_TEST

START_TEST(param_init) {
    sn_graph *g = sn_graph_new();
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(100, 100), SN_INIT_NORMAL, 0.02f);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(100), SN_INIT_ONES, 0);
    float *v = malloc(sizeof(float) * 10000), *v2 = malloc(sizeof(float) * 10000);
    sn_param_init(w, v, 1);
    double sum = 0, sq = 0;
    for (int i = 0; i < 10000; i++) sum += v[i], sq += (double)v[i] * v[i];
    double mean = sum / 1e4, std = sqrt(sq / 1e4 - mean * mean);
    ck_assert_msg(fabs(std - 0.02) < 0.001 && fabs(mean) < 0.001, "mean %g std %g", mean, std);
    sn_param_init(w, v2, 1);
    ck_assert(!memcmp(v, v2, sizeof(float) * 10000)); /* reproducible */
    sn_param_init(w, v2, 2);
    ck_assert(memcmp(v, v2, sizeof(float) * 10000)); /* the seed matters */
    sn_param_init(b, v, 1);
    for (int i = 0; i < 100; i++) ck_assert_float_eq(v[i], 1.0f);
    free(v);
    free(v2);
    sn_graph_free(g);
}
END_TEST

/* A jump of 2^k steps is 2^k steps; a pool's chunked initialisation (train.c: chunks of 65536
 * draws, each from a jumped start) gives the numbers of the one-by-one stream, across chunk
 * edges and a short last chunk. */
START_TEST(param_init_parallel) {
    sn_rng a = sn_rng_seed(99), b = a;
    sn_rng_jumper j;
    sn_rng_jump_init(&j, 10);
    for (int i = 0; i < 1024; i++) (void)sn_rng_next(&a);
    sn_rng_jump(&j, &b);
    ck_assert(!memcmp(&a, &b, sizeof a));
    enum { N = 3 * 65536 + 17 };
    sn_graph *g = sn_graph_new();
    sn_node *w = sn_param(g, "wte", SN_F32, SN_SHAPE(N), SN_INIT_NORMAL, 0.02f);
    float *v = malloc(sizeof(float) * N), *v2 = malloc(sizeof(float) * N);
    sn_pool *pool = sn_pool_new(3);
    ck_assert_ptr_nonnull(pool);
    sn_param_init(w, v, 1337);
    memset(v2, 0xff, sizeof(float) * N);
    sn_param_init_pool(w, v2, 1337, pool);
    for (int i = 0; i < N; i++) ck_assert_msg(v[i] == v2[i], "draw %d: %g one by one, %g by the pool", i, v[i], v2[i]);
    sn_pool_free(pool);
    free(v);
    free(v2);
    sn_graph_free(g);
}
END_TEST

/* The tiny model memorises one batch of random tokens: loss below 0.1 in a few hundred steps. */
START_TEST(overfit_one_batch) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    enum { B = 2, T = 16 };
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 300);
    o.lr = 1e-2f;
    o.weight_decay = 0;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(42);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, 64), y[i] = (int32_t)sn_rng_below(&r, 64);
    sn_step_stats st = {0};
    double first = 0;
    int step;
    for (step = 0; step < 300; step++) {
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        if (step == 0) first = st.loss;
        if (st.loss < 0.1) break;
    }
    ck_assert_msg(st.loss < 0.1, "loss %.4f after %d steps (first %.4f)", st.loss, step, first);
    ck_assert(fabs(first - log(64.0)) < 0.1);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

/* init_later (train.h): nothing runs or reads before sn_trainer_init_rest; it draws exactly the
 * parameters not set, from the streams an eager trainer draws them from, so a trainer whose
 * parameters are partly set from another's and the rest drawn later trains as the eager one,
 * bit for bit, and a set parameter keeps what was set. */
START_TEST(init_later_draws_the_rest) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    enum { B = 2, T = 16 };
    sn_graph *g[2];
    sn_trainer *t[2];
    sn_err e;
    for (int k = 0; k < 2; k++) {
        g[k] = sn_graph_new();
        sn_gpt2 m;
        ck_assert_msg(sn_gpt2_build(g[k], &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_backward(g[k], m.loss, &e) == SN_OK, "%s", e.msg);
        sn_train_opts o;
        sn_train_opts_default(&o, 10);
        o.init_later = k == 1;
        ck_assert_msg((t[k] = sn_trainer_new(g[k], &o, &e)), "%s", e.msg);
    }
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(7);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, 64), y[i] = (int32_t)sn_rng_below(&r, 64);
    sn_step_stats st[2];
    double loss;
    float buf[64 * 64 * 4];
    /* not ready: a step, an evaluation and a read refuse, naming what to do */
    ck_assert_int_eq(sn_trainer_step(t[1], x, y, &st[1], &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "sn_trainer_init_rest"), "%s", e.msg);
    ck_assert_int_eq(sn_trainer_eval(t[1], x, y, &loss, &e), SN_ERR_INVALID);
    ck_assert_int_eq(sn_trainer_get_param(t[1], 0, SN_PARAM_WEIGHTS, buf, &e), SN_ERR_INVALID);
    /* every other parameter set from the eager trainer's weights; one of them changed first */
    int n = sn_trainer_param_count(t[0]), changed = -1;
    for (int i = 0; i < n; i += 2) {
        int64_t numel = sn_numel(sn_trainer_param_value(t[0], i));
        ck_assert_int_le(numel, (int64_t)(sizeof buf / sizeof buf[0]));
        ck_assert_msg(sn_trainer_get_param(t[0], i, SN_PARAM_WEIGHTS, buf, &e) == SN_OK, "%s", e.msg);
        if (changed < 0 && numel > 1) {
            changed = i;
            buf[1] += 0.25f;
        }
        ck_assert_msg(sn_trainer_set_param(t[1], i, SN_PARAM_WEIGHTS, buf, &e) == SN_OK, "%s", e.msg);
        if (i == changed) { /* set back on the eager one too: the two runs start equal */
            ck_assert_msg(sn_trainer_set_param(t[0], i, SN_PARAM_WEIGHTS, buf, &e) == SN_OK, "%s", e.msg);
        }
    }
    ck_assert_int_ge(changed, 0);
    ck_assert_msg(sn_trainer_init_rest(t[1], &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_trainer_init_rest(t[1], &e) == SN_OK, "%s", e.msg); /* again: nothing */
    for (int i = 0; i < n; i++) { /* the same weights, the changed one as set */
        int64_t numel = sn_numel(sn_trainer_param_value(t[0], i));
        float *w = malloc(2 * sizeof(float) * (size_t)numel);
        ck_assert_msg(sn_trainer_get_param(t[0], i, SN_PARAM_WEIGHTS, w, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_trainer_get_param(t[1], i, SN_PARAM_WEIGHTS, w + numel, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(!memcmp(w, w + numel, sizeof(float) * (size_t)numel), "parameter %d differs", i);
        free(w);
    }
    for (int step = 0; step < 3; step++)
        for (int k = 0; k < 2; k++) ck_assert_msg(sn_trainer_step(t[k], x, y, &st[k], &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(st[0].loss == st[1].loss, "%.9g %.9g", st[0].loss, st[1].loss);
    for (int k = 0; k < 2; k++) {
        sn_trainer_free(t[k]);
        sn_graph_free(g[k]);
    }
}
END_TEST

/* loss = sum(log(w)) with some w < 0: NaN; the step fails and the weights stay. */
START_TEST(nan_loss_is_reported) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input_tokens(g, "idx", SN_SHAPE(1, 2));
    sn_input_targets(g, "targets", SN_SHAPE(1, 2));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(8), SN_INIT_NORMAL, 1.0f);
    sn_node *tab = sn_param(g, "tab", SN_F32, SN_SHAPE(4, 8), SN_INIT_NORMAL, 1.0f);
    sn_node *loss = sn_sum(g, sn_add(g, sn_log(g, w), sn_sum(g, sn_embedding(g, tab, x), 1, false)), -1, false);
    loss = sn_sum(g, loss, 0, false);
    sn_err e;
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t ids[2] = {1, 2};
    ck_assert_int_eq(sn_trainer_step(t, ids, ids, NULL, &e), SN_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, "diverged") && strstr(e.msg, "unchanged"), "%s", e.msg);
    ck_assert_int_eq(sn_trainer_step_count(t), 0);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

static sn_trainer *tiny_trainer(sn_graph *g, int B, int T, int n_embd, sn_gpt2 *m) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    c.n_embd = n_embd;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m->loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

/* Two micro-batches of B rows give the gradients, loss and norm of one batch of 2B rows. */
/* A bigram model (embedding, matmul, cross-entropy) whose token and target inputs have the
 * given names; labels_first declares the targets before the tokens. */
static sn_graph *bigram(const char *tokens, const char *labels, bool labels_first) {
    enum { B = 2, T = 8, V = 16 };
    sn_graph *g = sn_graph_new();
    sn_node *y = labels_first ? sn_input_targets(g, labels, SN_SHAPE(B, T)) : NULL;
    sn_node *x = sn_input_tokens(g, tokens, SN_SHAPE(B, T));
    if (!labels_first) y = sn_input_targets(g, labels, SN_SHAPE(B, T));
    sn_node *wte = sn_param(g, "wte", SN_F32, SN_SHAPE(V, 8), SN_INIT_NORMAL, 0.5f);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(8, V), SN_INIT_NORMAL, 0.5f);
    sn_graph_set_loss(g, sn_cross_entropy(g, sn_matmul(g, sn_embedding(g, wte, x), w), y, -1));
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, g->loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* The trainer feeds inputs by role: inputs named "tokens" and "labels" (declared in the other
 * order) train exactly as "idx" and "targets" do; a graph whose "idx" and "targets" have no
 * role is refused, saying which roles it needs. */
START_TEST(inputs_fed_by_role_not_name) {
    sn_graph *g[2] = {bigram("idx", "targets", false), bigram("tokens", "labels", true)};
    double loss[2][5];
    int32_t x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = (int32_t)(i * 5 % 16), y[i] = (int32_t)((i * 5 + 3) % 16);
    for (int k = 0; k < 2; k++) {
        sn_train_opts o;
        sn_train_opts_default(&o, 5);
        o.lr = 0.1f;
        sn_err e;
        sn_trainer *t = sn_trainer_new(g[k], &o, &e);
        ck_assert_msg(t, "%s", e.msg);
        sn_step_stats st;
        for (int s = 0; s < 5; s++) {
            ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
            loss[k][s] = st.loss;
        }
        sn_trainer_free(t);
        sn_graph_free(g[k]);
    }
    for (int s = 0; s < 5; s++)
        ck_assert_msg(loss[0][s] == loss[1][s], "step %d: loss %.17g (idx, targets) against %.17g "
                      "(tokens, labels)", s, loss[0][s], loss[1][s]);
    ck_assert_msg(loss[0][4] < loss[0][0] - 0.1, "the loss did not fall: %g -> %g", loss[0][0], loss[0][4]);

    sn_graph *h = sn_graph_new();
    sn_node *x2 = sn_input(h, "idx", SN_I32, SN_SHAPE(2, 8));
    sn_node *y2 = sn_input(h, "targets", SN_I32, SN_SHAPE(2, 8));
    sn_node *w = sn_param(h, "wte", SN_F32, SN_SHAPE(16, 16), SN_INIT_NORMAL, 0.5f);
    sn_graph_set_loss(h, sn_cross_entropy(h, sn_embedding(h, w, x2), y2, -1));
    sn_err e;
    ck_assert_msg(sn_backward(h, h->loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, 5);
    ck_assert_ptr_null(sn_trainer_new(h, &o, &e));
    ck_assert_int_eq(e.code, SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "the graph needs i32 inputs of the roles tokens and targets"), "%s", e.msg);
    sn_graph_free(h);
}
END_TEST

START_TEST(accumulation_matches_big_batch) {
    enum { B = 2, T = 8 };
    sn_graph *g1 = sn_graph_new(), *g2 = sn_graph_new();
    sn_gpt2 m;
    sn_trainer *small = tiny_trainer(g1, B, T, 32, &m), *big = tiny_trainer(g2, 2 * B, T, 32, &m);
    int32_t x[2 * B * T], y[2 * B * T];
    sn_rng r = sn_rng_seed(3);
    for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)sn_rng_below(&r, 64), y[i] = (int32_t)sn_rng_below(&r, 64);
    sn_err e;
    double l1, l2, l;
    ck_assert(sn_trainer_accumulate(small, x, y, &l1, &e) == SN_OK);
    ck_assert(sn_trainer_accumulate(small, x + B * T, y + B * T, &l2, &e) == SN_OK);
    ck_assert(sn_trainer_accumulate(big, x, y, &l, &e) == SN_OK);
    ck_assert_int_eq(sn_trainer_pending(small), 2);
    ck_assert_msg(fabs((l1 + l2) / 2 - l) <= 1e-6 * l, "loss %.9g vs %.9g", (l1 + l2) / 2, l);
    for (int i = 0; i < sn_trainer_param_count(small); i++) {
        const sn_node *p = sn_trainer_param_node(small, i);
        size_t n = (size_t)sn_numel(p);
        double *ga = malloc(n * sizeof(double)), *gb = malloc(n * sizeof(double));
        float *fa = malloc(n * sizeof(float)), *fb = malloc(n * sizeof(float));
        ck_assert(sn_trainer_get_param(small, i, SN_PARAM_GRAD, fa, &e) == SN_OK &&
                  sn_trainer_get_param(big, i, SN_PARAM_GRAD, fb, &e) == SN_OK);
        for (size_t j = 0; j < n; j++) ga[j] = fa[j] / 2.0, gb[j] = fb[j];
        sn_check_close(p->name, ga, gb, n, 1e-6, 1e-6);
        free(ga);
        free(gb);
        free(fa);
        free(fb);
    }
    sn_step_stats s1, s2;
    ck_assert(sn_trainer_update(small, &s1, &e) == SN_OK);
    ck_assert(sn_trainer_update(big, &s2, &e) == SN_OK);
    ck_assert(fabs(s1.loss - s2.loss) <= 1e-6 * s2.loss);
    ck_assert_msg(fabs(s1.grad_norm - s2.grad_norm) <= 1e-6 * s2.grad_norm, "norm %.9g vs %.9g",
                  s1.grad_norm, s2.grad_norm);
    ck_assert_int_eq(sn_trainer_pending(small), 0);
    ck_assert_int_eq(sn_trainer_update(small, &s1, &e), SN_ERR_INVALID); /* nothing accumulated */
    sn_trainer_free(small);
    sn_trainer_free(big);
    sn_graph_free(g1);
    sn_graph_free(g2);
}
END_TEST

START_TEST(sample_logits_rules) {
    double lg[6] = {0.5, 2.0, -1.0, 2.0, 1.9, 0.0};
    sn_rng r = sn_rng_seed(1);
    for (int i = 0; i < 50; i++) {
        ck_assert_int_eq(sn_sample_logits(lg, 6, 1.0f, 1, 0, &r), 1); /* greedy: the first of the ties */
        ck_assert_int_eq(sn_sample_logits(lg, 6, 0.0f, 0, 0, &r), 1);
    }
    int seen[6] = {0};
    for (int i = 0; i < 3000; i++) seen[sn_sample_logits(lg, 6, 1.0f, 3, 0, &r)]++;
    ck_assert(seen[1] && seen[3] && seen[4] && !seen[0] && !seen[2] && !seen[5]);
    double p[3] = {0, log(2.0), log(3.0)}; /* probabilities 1/6, 2/6, 3/6 */
    int n[3] = {0};
    for (int i = 0; i < 60000; i++) n[sn_sample_logits(p, 3, 1.0f, 0, 0, &r)]++;
    for (int k = 0; k < 3; k++)
        ck_assert_msg(fabs(n[k] / 60000.0 - (k + 1) / 6.0) < 0.01, "id %d: %d of 60000", k, n[k]);
    /* top-p: 0.6 keeps ids 2 and 1 (3/6 < 0.6 <= 5/6), drawn as 3:2; 0.5 keeps id 2 alone (its
     * 3/6 is enough); 1 keeps all; after top-k 2, 0.9 keeps both of them */
    int q[3] = {0};
    for (int i = 0; i < 50000; i++) q[sn_sample_logits(p, 3, 1.0f, 0, 0.6f, &r)]++;
    ck_assert_msg(!q[0] && fabs(q[2] / 50000.0 - 0.6) < 0.01, "top-p 0.6: %d %d %d", q[0], q[1], q[2]);
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(sn_sample_logits(p, 3, 1.0f, 0, 0.5f, &r), 2);
        ck_assert_int_ne(sn_sample_logits(p, 3, 1.0f, 2, 0.9f, &r), 0);
    }
    int all[3] = {0};
    for (int i = 0; i < 6000; i++) all[sn_sample_logits(p, 3, 1.0f, 0, 1.0f, &r)]++;
    ck_assert(all[0] && all[1] && all[2]);
}
END_TEST

/* The sampler on a forward graph (B = 1) with the trainer's weights: reproducible from the
 * seed, greedy with top-k 1 (checked against the interpreter's argmax), and within vocab. */
START_TEST(sampling) {
    enum { T = 16, N = 24 };
    sn_graph *g = sn_graph_new(), *fg = sn_graph_new();
    sn_gpt2 m, fm;
    sn_trainer *t = tiny_trainer(g, 2, T, 32, &m);
    sn_err e;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    ck_assert(sn_gpt2_build(fg, &c, 1, T, &fm, &e) == SN_OK);
    sn_sampler *s = sn_sampler_new(fg, fm.idx, fm.logits, NULL, &e);
    ck_assert_msg(s, "%s", e.msg);
    ck_assert_msg(sn_sampler_load(s, t, &e) == SN_OK, "%s", e.msg);
    int32_t prompt[3] = {5, 9, 11}, a[N], b[N], d[N];
    sn_sample_opts o = {.n_new = N, .temperature = 1.0f, .top_k = 0, .seed = 7};
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, a, &e) == SN_OK);
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, b, &e) == SN_OK);
    ck_assert(!memcmp(a, b, sizeof a));
    o.seed = 8;
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, b, &e) == SN_OK);
    ck_assert(memcmp(a, b, sizeof a)); /* 24 draws over 64 ids: equal only by a miracle */

    o.top_k = 1;
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, a, &e) == SN_OK);
    o.seed = 9, o.top_k = 0, o.temperature = 0;
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, b, &e) == SN_OK);
    ck_assert(!memcmp(a, b, sizeof a));
    /* the first greedy token is the argmax of the interpreter's logits at the prompt's end */
    sn_interp *it = sn_interp_new(fg, false);
    int32_t ids[T] = {5, 9, 11};
    ck_assert(sn_interp_set_i32(it, fm.idx, ids, &e) == SN_OK && sn_interp_set_i32(it, fm.targets, ids, &e) == SN_OK);
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        float *w = malloc(sizeof(float) * (size_t)sn_numel(p));
        ck_assert(sn_trainer_get_param(t, i, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
        for (int k = 0; k < fg->n_nodes; k++)
            if (fg->nodes[k]->op == SN_OP_PARAM && !strcmp(fg->nodes[k]->name, p->name))
                ck_assert(sn_interp_set(it, fg->nodes[k], w, &e) == SN_OK);
        free(w);
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    const double *lg = sn_interp_value(it, fm.logits) + 2 * 64;
    int best = 0;
    for (int v = 1; v < 64; v++) if (lg[v] > lg[best]) best = v;
    ck_assert_int_eq(a[0], best);
    sn_interp_free(it);

    /* the same sampler compiled on the CPU device: the same greedy and seeded draws */
    sn_device *dev;
    ck_assert_msg(sn_cpu_device_new(2, &dev, &e) == SN_OK, "%s", e.msg);
    sn_sampler *sd = sn_sampler_new(fg, fm.idx, fm.logits, dev, &e);
    ck_assert_msg(sd && sn_sampler_load(sd, t, &e) == SN_OK, "%s", e.msg);
    o = (sn_sample_opts){.n_new = N, .temperature = 0, .seed = 9};
    ck_assert_msg(sn_sampler_generate(sd, prompt, 3, &o, d, &e) == SN_OK, "%s", e.msg);
    ck_assert(!memcmp(a, d, sizeof a));
    o = (sn_sample_opts){.n_new = N, .temperature = 1.0f, .seed = 7};
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, a, &e) == SN_OK);
    ck_assert(sn_sampler_generate(sd, prompt, 3, &o, d, &e) == SN_OK);
    ck_assert(!memcmp(a, d, sizeof a));
    sn_sampler_free(sd);
    sn_device_free(dev);

    o = (sn_sample_opts){.n_new = N, .temperature = 2.0f, .vocab = 10, .seed = 1};
    ck_assert(sn_sampler_generate(s, prompt, 3, &o, d, &e) == SN_OK);
    for (int i = 0; i < N; i++) ck_assert_int_lt(d[i], 10);
    ck_assert_int_eq(sn_sampler_generate(s, prompt, 0, &o, d, &e), SN_ERR_INVALID);
    sn_sampler_free(s);
    sn_graph_free(fg);

    /* a sampling graph of another width is refused by name and shapes */
    fg = sn_graph_new();
    c.n_embd = 16;
    ck_assert(sn_gpt2_build(fg, &c, 1, T, &fm, &e) == SN_OK);
    s = sn_sampler_new(fg, fm.idx, fm.logits, NULL, &e);
    ck_assert_int_eq(sn_sampler_load(s, t, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "wte") && strstr(e.msg, "f32[64,16]") && strstr(e.msg, "f32[64,32]"), "%s", e.msg);
    sn_sampler_free(s);
    sn_graph_free(fg);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("trainer");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, lr_schedule);
    tcase_add_test(tc, param_init);
    tcase_add_test(tc, param_init_parallel);
    tcase_add_test(tc, overfit_one_batch);
    tcase_add_test(tc, init_later_draws_the_rest);
    tcase_add_test(tc, nan_loss_is_reported);
    tcase_add_test(tc, accumulation_matches_big_batch);
    tcase_add_test(tc, inputs_fed_by_role_not_name);
    tcase_add_test(tc, sample_logits_rules);
    tcase_add_test(tc, sampling);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
