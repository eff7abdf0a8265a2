/* test_layout.c: the program's parameter layout (program.h sn_param_layout, written by memplan)
 * and the compile pipeline's two entries. The layout is checked against the graph for tiny
 * GPT-2 with and without LoRA (frozen flags), in fp32 and bf16 (weight shadows); the check
 * itself catches broken tables; and the trainer works from the table: a layout with the
 * parameters in reverse order trains to the same losses, weights, moments and checkpoint bytes,
 * on the device, offloaded, and in bf16.
 * Convention: "the same" is ==/memcmp; the global norm alone is summed in another order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/lora.h"
#include "frontend/sinter.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "support/savefile.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64, STEPS = 6, MAX_PARAMS = 128 };

/* tiny GPT-2 through the graph passes (autodiff included) at a precision, LoRA adapters of rank
 * `rank` on every target (0: none) */
static sn_graph *tiny(int rank, sn_precision prec) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = rank, .alpha = (float)rank}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_gpt2_build_lora(g, &c, B, T, rank ? &l : NULL, &m, &e) == SN_OK, "%s", e.msg);
    sn_graph_clear_outputs(g);
    sn_graph_add_output(g, m.loss);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = prec;
    ck_assert_msg(sn_pipeline_graph(g, &o, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_program *compile(sn_graph *g, sn_param_order order) {
    sn_program *p;
    sn_err e;
    sn_pipeline_opts o = {.param_order = order};
    ck_assert_msg(sn_pipeline_kernels(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

static int64_t persistent_offset(const sn_program *p, const sn_node *n) {
    int v = n ? p->value_of[n->id] : -1;
    return v >= 0 && p->values[v].persistent ? p->values[v].offset : -1;
}

/* The layout of p against its graph, each fact worked out here from the graph and the values. */
static void check_against_graph(const sn_program *p, bool lora, bool bf16) {
    const sn_param_layout *l = &p->layout;
    sn_node *params[MAX_PARAMS];
    int n = sn_graph_params(p->g, params, MAX_PARAMS);
    ck_assert_int_eq(l->n, n);
    int64_t trained = 0, shadowed = 0;
    for (int i = 0; i < n; i++) {
        const sn_param_slot *s = &l->slots[i];
        const sn_node *w = params[i];
        ck_assert_msg(s->node == w, "slot %d is %s, the graph's parameter %d is %s", i,
                      s->node->name, i, w->name);
        ck_assert_ptr_eq(sn_param_layout_find(l, w), s);
        ck_assert_int_eq(s->numel, sn_numel(w));
        ck_assert_int_eq(s->dtype, SN_F32);
        ck_assert_int_eq(s->value, persistent_offset(p, w));
        bool frozen = lora && !sn_lora_is_adapter(w->name);
        ck_assert_msg(s->frozen == frozen, "%s: frozen %d", w->name, s->frozen);
        if (frozen) {
            ck_assert(!w->grad && s->grad == -1 && s->flat == -1 && !s->decay);
            /* a frozen weight's 16-bit copy is its cast kernel's, outside AdamW's range */
            ck_assert(s->shadow == -1 || s->shadow < l->shadows || s->shadow >= l->shadows + 2 * l->flat_n);
            continue;
        }
        trained += s->numel;
        ck_assert_int_eq(s->grad, persistent_offset(p, w->grad));
        ck_assert_msg(s->decay == (w->rank >= 2), "%s: decay %d at rank %d", w->name, s->decay, w->rank);
        ck_assert_int_eq(s->value, l->params + 4 * s->flat);
        ck_assert_int_eq(s->grad, l->grads + 4 * s->flat);
        ck_assert(s->decay ? s->flat + s->numel <= l->flat_decay : s->flat >= l->flat_decay);
        if (s->shadow >= 0) {
            shadowed++;
            ck_assert_int_eq(s->shadow, l->shadows + 2 * s->flat);
        }
        ck_assert(s->flat >= 0 && s->flat + s->numel <= l->flat_n);
    }
    ck_assert_int_eq(trained, sn_param_layout_trained(l));
    ck_assert(trained > 0 && l->flat_n >= trained && l->flat_n < trained + 64 * n);
    ck_assert_int_eq(l->grads - l->params, 4 * l->flat_n);
    /* the trained weights' 16-bit copies are the products' operands: matrices, not biases */
    ck_assert_int_eq(l->low, bf16 ? SN_BF16 : SN_F32);
    ck_assert(bf16 ? shadowed > 0 && l->shadows >= 0 : shadowed == 0 && l->shadows == -1);
    if (lora) ck_assert(trained < sn_graph_param_count(p->g) / 4);
}

START_TEST(layout_matches_graph) {
    for (int lora = 0; lora < 2; lora++)
        for (int bf16 = 0; bf16 < 2; bf16++)
            for (int order = 0; order < SN_PARAM_ORDER_COUNT; order++) {
                sn_graph *g = tiny(lora ? 4 : 0, bf16 ? SN_PRECISION_BF16 : SN_PRECISION_FP32);
                sn_program *p = compile(g, (sn_param_order)order);
                sn_err e;
                ck_assert_msg(sn_param_layout_check(p, &e) == SN_OK, "%s", e.msg);
                check_against_graph(p, lora, bf16);
                sn_program_free(p);
                sn_graph_free(g);
            }
}
END_TEST

/* The reversed order is another layout: the same parameters, other flat elements. */
START_TEST(reversed_is_another_layout) {
    sn_graph *g = tiny(0, SN_PRECISION_FP32);
    sn_program *a = compile(g, SN_PARAM_ORDER_GRAPH), *b = compile(g, SN_PARAM_ORDER_REVERSED);
    const sn_param_layout *la = &a->layout, *lb = &b->layout;
    ck_assert_int_eq(la->n, lb->n);
    ck_assert_int_eq(la->flat_n, lb->flat_n);
    ck_assert_int_eq(la->flat_decay, lb->flat_decay);
    int moved = 0;
    for (int i = 0; i < la->n; i++) {
        ck_assert(la->slots[i].decay == lb->slots[i].decay);
        moved += la->slots[i].flat != lb->slots[i].flat;
    }
    ck_assert_int_gt(moved, la->n / 2);
    sn_program_free(a);
    sn_program_free(b);
    sn_graph_free(g);
}
END_TEST

/* The check on p's layout fails with SN_ERR_INTERNAL, naming `name` and saying `what`. */
static void broken(const sn_program *p, const char *name, const char *what) {
    sn_err e;
    ck_assert_int_eq(sn_param_layout_check(p, &e), SN_ERR_INTERNAL);
    ck_assert_msg(strstr(e.msg, name) && strstr(e.msg, what), "%s", e.msg);
}

/* sn_param_layout_check fails on a table that disagrees with the program, naming the parameter. */
START_TEST(check_catches_broken_tables) {
    sn_graph *g = tiny(4, SN_PRECISION_BF16);
    sn_program *p = compile(g, SN_PARAM_ORDER_GRAPH);
    sn_param_layout *l = &p->layout;
    int t = -1, d = -1, u = -1, f = -1; /* trained with a shadow, decayed, another trained, frozen */
    for (int i = 0; i < l->n; i++) {
        const sn_param_slot *s = &l->slots[i];
        if (s->frozen) f = f < 0 ? i : f;
        else if (s->shadow >= 0 && t < 0) t = i;
        else if (s->decay && d < 0) d = i;
        else if (u < 0) u = i;
    }
    ck_assert(t >= 0 && d >= 0 && u >= 0 && f >= 0);
    sn_param_slot keep;
    sn_err e;
    keep = l->slots[d];
    l->slots[d].decay = false;
    broken(p, l->slots[d].node->name, "without decay (in the decayed prefix)");
    l->slots[d] = keep;
    keep = l->slots[u];
    l->slots[u].flat += 1;
    broken(p, l->slots[u].node->name, "weights' offset in the parameters' range");
    l->slots[u] = keep;
    keep = l->slots[t];
    l->slots[t].shadow += 2;
    broken(p, l->slots[t].node->name, "weight shadow's offset");
    l->slots[t] = keep;
    keep = l->slots[t];
    l->slots[t].grad += 64;
    broken(p, l->slots[t].node->name, "gradient's offset");
    l->slots[t] = keep;
    keep = l->slots[f];
    l->slots[f].frozen = false;
    broken(p, l->slots[f].node->name, "frozen flag");
    l->slots[f] = keep;
    keep = l->slots[t];
    l->slots[t] = l->slots[u];
    broken(p, keep.node->name, "is not its slot");
    l->slots[t] = keep;
    int64_t decay = l->flat_decay;
    l->flat_decay = l->flat_n + 1;
    ck_assert_int_eq(sn_param_layout_check(p, &e), SN_ERR_INTERNAL);
    l->flat_decay = decay;
    l->shadows += 64;
    broken(p, l->slots[t].node->name, "weight shadow's offset in the shadows' range");
    l->shadows -= 64;
    ck_assert_msg(sn_param_layout_check(p, &e) == SN_OK, "%s", e.msg); /* all put back */
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The two pipeline entries: the graph passes refuse a graph that has its backward (they must
 * run before autodiff), naming the entry to go on with; sn_compile is the two in a row. */
START_TEST(pipeline_entries) {
    sn_graph *g = tiny(0, SN_PRECISION_FP32);
    sn_pipeline_opts o = sn_pipeline_defaults();
    sn_err e;
    ck_assert_int_eq(sn_pipeline_graph(g, &o, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "has its backward already") && strstr(e.msg, "sn_pipeline_kernels"), "%s", e.msg);
    ck_assert_int_eq(sn_compile(g, &o, NULL, NULL, &e), SN_ERR_INVALID);
    sn_program *a = compile(g, SN_PARAM_ORDER_GRAPH);
    sn_graph *h = sn_graph_new();
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_gpt2 m;
    ck_assert(sn_gpt2_build(h, &c, B, T, &m, &e) == SN_OK);
    sn_graph_clear_outputs(h);
    sn_graph_add_output(h, m.loss);
    o.backward = true;
    sn_program *b;
    ck_assert_msg(sn_compile(h, &o, &b, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(a->n_kernels, b->n_kernels);
    ck_assert_int_eq(a->persistent_bytes, b->persistent_bytes);
    ck_assert_int_eq(a->arena_bytes, b->arena_bytes);
    ck_assert_int_eq(a->layout.flat_n, b->layout.flat_n);
    sn_program_free(a);
    sn_program_free(b);
    sn_graph_free(g);
    sn_graph_free(h);
}
END_TEST

/* ---- the trainer works from the table ---- */

static sn_device *cpu(void) {
    sn_device *d;
    sn_err e;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % V);
        y[i] = (x[i] * 3 + 1) % V;
    }
}

typedef struct {
    int lora;
    sn_precision prec;
    bool offload;
    float clip;
} run_cfg;

/* A trainer for cfg on d with the parameters laid out in `order`; its graph in *g. */
static sn_trainer *trainer(const run_cfg *c, sn_device *d, const sn_pipeline_opts *po, sn_graph **g) {
    *g = tiny(c->lora, c->prec);
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.grad_clip = c->clip;
    o.device = d;
    o.offload = c->offload;
    o.compile = po;
    sn_err e;
    sn_trainer *t = sn_trainer_new(*g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

/* STEPS steps of two micro-batches each; the losses and norms */
static void train(sn_trainer *t, double *loss, double *norm) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < 2; k++) {
            batch(x, y, (uint64_t)(2 * s + k));
            ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
        }
        sn_step_stats st;
        ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
        loss[s] = st.loss;
        norm[s] = st.grad_norm;
    }
}

static void *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(*len + 1);
    ck_assert(b && fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

/* Trains cfg with the graph's layout and the reversed one: without clipping (the global norm
 * alone is summed in another order) the losses, weights, moments and checkpoint bytes are the
 * same; with clipping the losses agree to rounding. A checkpoint of the reversed run loads into
 * a trainer of the graph's layout as the same state. */
static void same_training(const run_cfg *c) {
    static const sn_pipeline_opts orders[2] = {{.param_order = SN_PARAM_ORDER_GRAPH},
                                               {.param_order = SN_PARAM_ORDER_REVERSED}};
    sn_device *d = cpu();
    sn_graph *g[3];
    sn_trainer *t[3];
    double loss[2][STEPS], norm[2][STEPS];
    char dir[64], path[2][96];
    snprintf(dir, sizeof dir, "/tmp/sn_layout_XXXXXX");
    ck_assert(mkdtemp(dir));
    sn_err e;
    for (int k = 0; k < 2; k++) {
        t[k] = trainer(c, d, &orders[k], &g[k]);
        train(t[k], loss[k], norm[k]);
        snprintf(path[k], sizeof path[k], "%s/%d.ckpt", dir, k);
        sn_run_state r = {0};
        ck_assert_msg(sn_checkpoint_save(path[k], t[k], &r, &e) == SN_OK, "%s", e.msg);
    }
    int moved = 0;
    for (int i = 0; i < sn_trainer_layout(t[0])->n; i++)
        moved += sn_trainer_layout(t[0])->slots[i].flat != sn_trainer_layout(t[1])->slots[i].flat;
    ck_assert_int_gt(moved, 1); /* another layout */
    for (int s = 0; s < STEPS; s++) {
        ck_assert(isfinite(loss[0][s]));
        if (c->clip > 0) {
            ck_assert_msg(fabs(loss[0][s] - loss[1][s]) <= 1e-5 * fabs(loss[0][s]), "step %d: loss "
                          "%.9g vs %.9g", s, loss[0][s], loss[1][s]);
            continue;
        }
        ck_assert_msg(loss[0][s] == loss[1][s], "step %d: loss %.9g vs %.9g", s, loss[0][s], loss[1][s]);
        ck_assert_msg(fabs(norm[0][s] - norm[1][s]) <= 1e-6 * norm[0][s], "step %d: norm %.9g vs "
                      "%.9g", s, norm[0][s], norm[1][s]);
    }
    if (c->clip == 0) {
        sn_test_same_state(t[0], t[1]);
        size_t n0, n1;
        void *a = read_all(path[0], &n0), *b = read_all(path[1], &n1);
        ck_assert_msg(n0 == n1 && !memcmp(a, b, n0), "the checkpoints differ (%zu, %zu bytes)", n0, n1);
        free(a);
        free(b);
    }
    t[2] = trainer(c, d, &orders[0], &g[2]);
    sn_run_state r = {0};
    ck_assert_msg(sn_checkpoint_load(path[1], t[2], &r, &e) == SN_OK, "%s", e.msg);
    sn_run_state_free(&r);
    sn_test_same_state(t[1], t[2]);
    for (int k = 0; k < 3; k++) {
        if (k < 2) unlink(path[k]);
        sn_trainer_free(t[k]);
        sn_graph_free(g[k]);
    }
    rmdir(dir);
    sn_device_free(d);
}

START_TEST(reversed_layout_trains_the_same) {
    same_training(&(run_cfg){.prec = SN_PRECISION_FP32});
}
END_TEST

START_TEST(reversed_layout_trains_the_same_offloaded) {
    same_training(&(run_cfg){.prec = SN_PRECISION_FP32, .offload = true});
}
END_TEST

START_TEST(reversed_layout_trains_the_same_bf16) { /* AdamW writes the shadows where the table says */
    same_training(&(run_cfg){.prec = SN_PRECISION_BF16});
}
END_TEST

START_TEST(reversed_layout_trains_the_same_lora) {
    same_training(&(run_cfg){.lora = 4, .prec = SN_PRECISION_BF16});
}
END_TEST

START_TEST(reversed_layout_trains_close_clipped) {
    same_training(&(run_cfg){.prec = SN_PRECISION_FP32, .clip = 1.0f});
}
END_TEST

Suite *layout_suite(void) {
    Suite *s = suite_create("layout");
    TCase *tc = tcase_create("layout");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, layout_matches_graph);
    tcase_add_test(tc, reversed_is_another_layout);
    tcase_add_test(tc, check_catches_broken_tables);
    tcase_add_test(tc, pipeline_entries);
    tcase_add_test(tc, reversed_layout_trains_the_same);
    tcase_add_test(tc, reversed_layout_trains_the_same_offloaded);
    tcase_add_test(tc, reversed_layout_trains_the_same_bf16);
    tcase_add_test(tc, reversed_layout_trains_the_same_lora);
    tcase_add_test(tc, reversed_layout_trains_close_clipped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(layout_suite()); }
