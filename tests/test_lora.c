/* test_lora.c: LoRA fine-tuning and starting a run from a checkpoint's weights: the adapters'
 * gradients against finite differences, a LoRA run on the CPU device against the interpreter
 * (base weights bit-identical, adapters trained, the loss down), the memory plan counting no
 * gradient or moments for the frozen base, sn_checkpoint_init reproducing a saved model's loss
 * exactly and refusing another model by name. Convention: tiny GPT-2 (vocabulary 64), adapters
 * on every linear layer unless a test says otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/lora.h"
#include "interp/interp.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "train/checkpoint.h"
#include "train/plan.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64 };

/* tiny GPT-2 through the session's forward passes (at a precision) and autodiff; rank 0: no
 * adapters */
static sn_graph *tiny_lora_at(int rank, float alpha, unsigned targets, int n_layer, sn_precision prec) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    if (n_layer) c.n_layer = n_layer;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = rank, .alpha = alpha}, .targets = targets};
    ck_assert_msg(sn_gpt2_build_lora(g, &c, B, T, rank ? &l : NULL, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = prec;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *tiny_lora(int rank, float alpha, unsigned targets, int n_layer) {
    return tiny_lora_at(rank, alpha, targets, n_layer, SN_PRECISION_FP32);
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) { sn_test_rule_batch(x, y, B * T, V, seed); }

static sn_trainer *trainer(sn_graph *g, sn_device *d, uint64_t seed, int steps) {
    return sn_test_trainer(g, d, seed, steps, 1e-2f);
}

static sn_node *input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    return NULL;
}

/* Every base parameter frozen with no gradient; every adapter trained; the adapters' count. */
static int check_frozen_base(const sn_graph *g) {
    int adapters = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_PARAM) continue;
        bool ad = sn_lora_is_adapter(n->name);
        ck_assert_msg(ad ? !n->a.frozen && n->grad : n->a.frozen && !n->grad,
                      "%s: frozen %d, gradient %p", n->name, n->a.frozen, (void *)n->grad);
        adapters += ad;
    }
    return adapters;
}

/* ---- the adapters' gradients against central finite differences (exact interpreter) ---- */

/* llama-tiny with one layer, adapters of rank 2 (alpha 3) on its seven projections: q, k and v
 * share one product x @ [A_q A_k A_v], gate and up another (sn_lora_paths) */
static sn_graph *tiny_llama_lora(void) {
    sn_llama_config c;
    ck_assert(sn_llama_config_find("llama-tiny", &c));
    c.n_layer = 1;
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    sn_llama_lora l = {.lora = {.rank = 2, .alpha = 3.0f}, .targets = SN_GPT2_LORA_ALL};
    ck_assert_msg(sn_llama_build_lora(g, &c, B, T, &l, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* _i 0: tiny GPT-2 (one layer, 8 adapters); 1: llama-tiny (one layer, 14) */
START_TEST(adapter_gradients) {
    sn_graph *g = _i ? tiny_llama_lora() : tiny_lora(2, 3.0f, SN_GPT2_LORA_ALL, 1); /* alpha/r = 1.5: the scale op runs */
    int adapters = _i ? 14 : 8;
    ck_assert_int_eq(check_frozen_base(g), adapters);
    sn_interp *it = sn_interp_new(g, true);
    sn_err e;
    int32_t x[B * T], y[B * T];
    batch(x, y, 7);
    ck_assert(!sn_interp_set_i32(it, input(g, "idx"), x, &e) && !sn_interp_set_i32(it, input(g, "targets"), y, &e));
    sn_node *ps[64];
    int np = sn_graph_params(g, ps, 64);
    double *vals[64];
    sn_rng r = sn_rng_seed(99);
    for (int p = 0; p < np; p++) { /* B not zero, so A's gradient is not either */
        float w[64 * 256];
        ck_assert(sn_numel(ps[p]) <= 64 * 256);
        sn_param_init(ps[p], w, 5);
        vals[p] = malloc(sizeof(double) * (size_t)sn_numel(ps[p]));
        for (int64_t i = 0; i < sn_numel(ps[p]); i++)
            vals[p][i] = ps[p]->a.init == SN_INIT_ZEROS ? 0.3 * sn_rng_normal(&r) : w[i];
        ck_assert(sn_interp_set_f64(it, ps[p], vals[p], &e) == SN_OK);
    }
    int checked = 0;
    for (int p = 0; p < np; p++) {
        if (!sn_lora_is_adapter(ps[p]->name)) continue;
        sn_check_param_grad(it, g, ps[p], vals[p], 16, 1e-4, 1e-6);
        checked++;
    }
    ck_assert_int_eq(checked, adapters);
    for (int p = 0; p < np; p++) free(vals[p]);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* Each target choice adapts the layers it names, and nothing else; the autocast pass keeps the
 * base frozen (its f32 weights cast to 16 bits for the products, no gradient). */
START_TEST(targets_and_names) {
    for (int prec = SN_PRECISION_BF16; prec <= SN_PRECISION_FP16; prec++) {
        sn_graph *g = tiny_lora_at(4, 4, SN_GPT2_LORA_ALL, 0, (sn_precision)prec);
        ck_assert_int_eq(check_frozen_base(g), 16);
        sn_graph_free(g);
    }
    static const struct {
        unsigned targets;
        const char *has, *lacks;
    } cases[] = {{SN_GPT2_LORA_ATTN, "h.1.attn.c_proj.lora_b", "h.0.mlp.c_fc.lora_a"},
                 {SN_GPT2_LORA_MLP, "h.1.mlp.c_proj.lora_a", "h.0.attn.c_attn.lora_a"},
                 {SN_GPT2_LORA_ALL, "h.0.attn.c_attn.lora_a", "wte.lora_a"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sn_graph *g = tiny_lora(4, 4, cases[c].targets, 0);
        ck_assert_int_eq(check_frozen_base(g), cases[c].targets == SN_GPT2_LORA_ALL ? 16 : 8);
        bool has = false, lacks = true;
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->op == SN_OP_PARAM) {
                has |= !strcmp(g->nodes[i]->name, cases[c].has);
                lacks &= strcmp(g->nodes[i]->name, cases[c].lacks) != 0;
                if (!strcmp(g->nodes[i]->name, "h.0.attn.c_attn.lora_a"))
                    ck_assert(g->nodes[i]->shape[0] == 32 && g->nodes[i]->shape[1] == 4);
                if (!strcmp(g->nodes[i]->name, "h.0.mlp.c_proj.lora_b"))
                    ck_assert(g->nodes[i]->shape[0] == 4 && g->nodes[i]->shape[1] == 32);
            }
        ck_assert_msg(has && lacks, "targets %s: %s %d, %s absent %d", sn_gpt2_lora_targets_name(cases[c].targets),
                      cases[c].has, has, cases[c].lacks, lacks);
        sn_graph_free(g);
    }
    sn_err e;
    sn_gpt2_config c;
    sn_gpt2 m;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2_lora bad = {.lora = {.rank = 0, .alpha = 1}, .targets = SN_GPT2_LORA_ALL};
    ck_assert(sn_gpt2_build_lora(g, &c, B, T, &bad, &m, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "need a rank >= 1"), "%s", e.msg);
    sn_graph_free(g);
}
END_TEST

/* ---- a LoRA run: the CPU device against the interpreter, the base untouched ---- */

enum { STEPS = 12 };

START_TEST(lora_run_cpu_matches_interp) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *gc = tiny_lora(4, 8, SN_GPT2_LORA_ALL, 0), *gi = tiny_lora(4, 8, SN_GPT2_LORA_ALL, 0);
    sn_trainer *tc = trainer(gc, d, 11, STEPS), *ti = trainer(gi, NULL, 11, STEPS);
    int np = sn_trainer_param_count(tc);
    float **before = sn_param_snapshot(tc);
    int32_t x[B * T], y[B * T];
    batch(x, y, 3);
    /* the first step's gradients: B is zero, so A's are zero and B's are not */
    double lc, li;
    ck_assert(sn_trainer_accumulate(tc, x, y, &lc, &e) == SN_OK);
    ck_assert(sn_trainer_accumulate(ti, x, y, &li, &e) == SN_OK);
    sn_check_close("loss, step 1", &lc, &li, 1, 1e-5, 0);
    double losses[STEPS];
    for (int s = 0; s < STEPS; s++) {
        if (s) {
            batch(x, y, 3); /* the same batch: the loss must fall */
            ck_assert(sn_trainer_accumulate(tc, x, y, NULL, &e) == SN_OK);
            ck_assert(sn_trainer_accumulate(ti, x, y, NULL, &e) == SN_OK);
        }
        if (s == 2) { /* B has moved: every adapter's gradient, device against interpreter */
            for (int i = 0; i < np; i++) {
                const sn_node *p = sn_trainer_param_node(tc, i);
                if (!sn_lora_is_adapter(p->name)) continue;
                size_t n = (size_t)sn_numel(p);
                float *gc_ = malloc(4 * n), *gi_ = malloc(4 * n);
                double *a = malloc(8 * n), *b = malloc(8 * n);
                ck_assert(!sn_trainer_get_param(tc, i, SN_PARAM_GRAD, gc_, &e) &&
                          !sn_trainer_get_param(ti, i, SN_PARAM_GRAD, gi_, &e));
                double mx = 0;
                for (size_t k = 0; k < n; k++) a[k] = gc_[k], b[k] = gi_[k], mx = fmax(mx, fabs(b[k]));
                ck_assert_msg(mx > 0, "%s: no gradient", p->name);
                char what[96];
                snprintf(what, sizeof what, "d loss / d %s, step 3", p->name);
                sn_check_close(what, a, b, n, 1e-4, 1e-6);
                free(gc_), free(gi_), free(a), free(b);
            }
        }
        sn_step_stats sc, si;
        ck_assert_msg(sn_trainer_update(tc, &sc, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_trainer_update(ti, &si, &e) == SN_OK, "%s", e.msg);
        char what[64];
        snprintf(what, sizeof what, "loss, step %d", s + 1);
        sn_check_close(what, &sc.loss, &si.loss, 1, 1e-4, 0);
        losses[s] = sc.loss;
    }
    ck_assert_msg(losses[STEPS - 1] < losses[0] - 0.3, "loss %g -> %g: the adapters do not learn",
                  losses[0], losses[STEPS - 1]);
    ck_assert_int_eq(sn_check_trained_only(tc, before, sn_lora_is_adapter, "a LoRA run"), 16);
    printf("LoRA tiny on the CPU device: loss %.4f -> %.4f in %d steps, within 1e-4 of the "
           "interpreter; 16 adapters trained, the base bit-identical\n", losses[0], losses[STEPS - 1], STEPS);
    sn_trainer_free(tc);
    sn_trainer_free(ti);
    sn_graph_free(gc);
    sn_graph_free(gi);
    sn_device_free(d);
}
END_TEST

/* ---- the memory plan: no gradient or moments for the frozen base ---- */

START_TEST(plan_counts_adapters_only) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(1, &d, &e) == SN_OK, "%s", e.msg);
    sn_plan full, lora;
    int64_t adapters = 0;
    for (int k = 0; k < 2; k++) {
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        c.vocab = V;
        sn_graph *g = sn_graph_new();
        sn_gpt2 m;
        sn_gpt2_lora l = {.lora = {.rank = 4, .alpha = 4}, .targets = SN_GPT2_LORA_ALL};
        ck_assert(sn_gpt2_build_lora(g, &c, B, T, k ? &l : NULL, &m, &e) == SN_OK);
        sn_pipeline_opts po = sn_pipeline_defaults();
        sn_program *p;
        ck_assert_msg(sn_plan_measure(g, &po, SN_RECOMPUTE_NONE, 0, 1, false, k ? &lora : &full, &p, &e) == SN_OK, "%s", e.msg);
        int64_t grads = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const sn_node *n = g->nodes[i];
            if (n->op == SN_OP_PARAM && !n->a.frozen) grads += (4 * sn_numel(n) + 63) / 64 * 64;
            if (k && n->op == SN_OP_PARAM && sn_lora_is_adapter(n->name)) adapters += sn_numel(n);
        }
        ck_assert_int_eq((k ? lora : full).grads, grads);
        sn_program_free(p);
        /* the trainer's own count of its optimizer state is the plan's */
        sn_train_opts o;
        sn_train_opts_default(&o, 10);
        o.device = d;
        o.compile = &po;
        sn_trainer *t = sn_trainer_new(g, &o, &e);
        ck_assert_msg(t, "%s", e.msg);
        ck_assert_int_eq(sn_trainer_state_bytes(t), (k ? lora : full).opt_device);
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    ck_assert_int_eq(lora.trained, adapters);
    ck_assert_int_eq(full.trained, full.params);
    ck_assert_int_eq(lora.params, full.params + adapters);
    ck_assert_int_lt(lora.opt_device * 5, full.opt_device); /* 4,096 of 38,784 elements */
    printf("plan, tiny B=%d T=%d: full: %lld trained, gradients %lld, optimizer %lld bytes, arena %lld; "
           "LoRA r 4: %lld trained, gradients %lld, optimizer %lld, arena %lld\n", B, T,
           (long long)full.trained, (long long)full.grads, (long long)full.opt_device, (long long)full.arena,
           (long long)lora.trained, (long long)lora.grads, (long long)lora.opt_device, (long long)lora.arena);
    sn_device_free(d);
}
END_TEST

/* ---- sn_checkpoint_init: a new run from a saved model's weights ---- */

static void save(const sn_trainer *t, const char *path) {
    sn_run_state r = {0};
    sn_run_meta_set(&r, "model", "tiny");
    sn_err e;
    ck_assert_msg(sn_checkpoint_save(path, t, &r, &e) == SN_OK, "%s", e.msg);
    sn_run_state_free(&r);
}

static double eval(sn_trainer *t) {
    int32_t x[B * T], y[B * T];
    batch(x, y, 77);
    double l;
    sn_err e;
    ck_assert_msg(sn_trainer_eval(t, x, y, &l, &e) == SN_OK, "%s", e.msg);
    return l;
}

static void steps(sn_trainer *t, int n) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int s = 0; s < n; s++) {
        batch(x, y, 100 + (uint64_t)s);
        ck_assert_msg(sn_trainer_step(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    }
}

/* _i: 0 the interpreter, 1 the CPU device */
START_TEST(init_reproduces_the_saved_loss) {
    sn_err e;
    sn_device *d = NULL;
    if (_i) ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    char path[] = "/tmp/sn_lora_init_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_graph *g0 = tiny_lora(0, 0, 0, 0), *g1 = tiny_lora(0, 0, 0, 0), *g2 = tiny_lora(4, 4, SN_GPT2_LORA_ALL, 0);
    sn_trainer *base = trainer(g0, d, 1, 20);
    steps(base, 4);
    double saved = eval(base);
    save(base, path);
    /* another seed: every weight differs until init */
    sn_trainer *full = trainer(g1, d, 2, 20), *lora = trainer(g2, d, 3, 20);
    ck_assert(eval(full) != saved);
    int fresh = -1;
    ck_assert_msg(sn_checkpoint_init(path, full, NULL, &fresh, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(fresh, 0);
    double got = eval(full);
    ck_assert_msg(got == saved, "full model from the checkpoint: loss %.9g, saved %.9g", got, saved);
    ck_assert_int_eq(sn_trainer_step_count(full), 0);
    for (int i = 0; i < sn_trainer_param_count(full); i++) { /* a fresh optimizer */
        size_t n = (size_t)sn_numel(sn_trainer_param_node(full, i));
        float *m = malloc(4 * n);
        ck_assert(sn_trainer_get_param(full, i, SN_PARAM_M, m, &e) == SN_OK);
        for (size_t k = 0; k < n; k++) ck_assert(m[k] == 0);
        free(m);
    }
    /* the LoRA model: its adapters are new (B zeros), so it starts as the saved model */
    ck_assert_msg(sn_checkpoint_init(path, lora, NULL, &fresh, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(fresh, 16);
    got = eval(lora);
    if (_i) sn_check_close("LoRA model from the checkpoint, CPU device", &got, &saved, 1, 1e-6, 0);
    else ck_assert_msg(got == saved, "LoRA model on the interpreter: loss %.17g, saved %.17g", got, saved);
    printf("init (%s): the saved loss %.9g, the model from the file %.9g, with LoRA %.9g\n",
           _i ? "cpu" : "interp", saved, eval(full), got);
    steps(lora, 2); /* and it trains */
    sn_trainer_free(base);
    sn_trainer_free(full);
    sn_trainer_free(lora);
    sn_graph_free(g0);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(d);
    unlink(path);
}
END_TEST

/* Another model, another rank, adapters the model lacks, a damaged file: refused by name, and
 * the trainer keeps its weights. */
START_TEST(init_refuses_another_model) {
    sn_err e;
    char base_path[] = "/tmp/sn_lora_base_XXXXXX", lora_path[] = "/tmp/sn_lora_lora_XXXXXX";
    int fd = mkstemp(base_path);
    ck_assert(fd >= 0);
    close(fd);
    ck_assert((fd = mkstemp(lora_path)) >= 0);
    close(fd);
    sn_graph *one = tiny_lora(0, 0, 0, 1), *two = tiny_lora(0, 0, 0, 0);
    sn_graph *l4 = tiny_lora(4, 4, SN_GPT2_LORA_ALL, 0), *l2 = tiny_lora(2, 2, SN_GPT2_LORA_ALL, 0);
    sn_trainer *t1 = trainer(one, NULL, 1, 5), *t2 = trainer(two, NULL, 1, 5);
    sn_trainer *t4 = trainer(l4, NULL, 1, 5), *tl2 = trainer(l2, NULL, 1, 5);
    save(t1, base_path);
    save(t4, lora_path);
    double before = eval(t2);
    static const struct {
        int which; /* 0: the one-layer model into two layers; 1: rank 4 into rank 2; 2: adapters
                      into a model without; 3: truncated */
        const char *msg;
    } cases[] = {
        {0, "does not fit this model: it has no parameter h.1.ln_1.b: the checkpoint holds model tiny"},
        {1, "parameter h.0.attn.c_attn.lora_a is [32,4] there, [32,2] here"},
        {2, "it has a parameter h.0.attn.c_attn.lora_a, which this model lacks (a LoRA adapter: "
            "merging adapters into the weights is not supported yet"},
        {3, "is truncated"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sn_trainer *t = cases[c].which == 1 ? tl2 : t2;
        const char *path = cases[c].which == 0 ? base_path : lora_path;
        if (cases[c].which == 3) {
            ck_assert(truncate(base_path, 1000) == 0);
            path = base_path;
        }
        sn_status s = sn_checkpoint_init(path, t, NULL, NULL, &e);
        ck_assert_msg(s != SN_OK && strstr(e.msg, cases[c].msg), "case %zu: %s", c, s ? e.msg : "accepted");
    }
    ck_assert(eval(t2) == before);
    sn_trainer_free(t1);
    sn_trainer_free(t2);
    sn_trainer_free(t4);
    sn_trainer_free(tl2);
    sn_graph_free(one);
    sn_graph_free(two);
    sn_graph_free(l4);
    sn_graph_free(l2);
    unlink(base_path);
    unlink(lora_path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lora");
    TCase *tc = tcase_create("lora");
    tcase_add_loop_test(tc, adapter_gradients, 0, 2);
    tcase_add_test(tc, targets_and_names);
    tcase_add_test(tc, lora_run_cpu_matches_interp);
    tcase_add_test(tc, plan_counts_adapters_only);
    tcase_add_loop_test(tc, init_reproduces_the_saved_loss, 0, 2);
    tcase_add_test(tc, init_refuses_another_model);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
