/* tiny_gpt2.c: see tiny_gpt2.h. */
#include "tiny_gpt2.h"

#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "interp/interp.h"
#include "support/half.h"
#include "support/rng.h"
#include "train/train.h"
#include "harness.h"

sn_graph *tiny_training_graph(bool fuse_attention) {
    return tiny_training_graph_at(fuse_attention, SN_PRECISION_FP32);
}

sn_graph *tiny_training_graph_at(bool fuse_attention, sn_precision precision) {
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.fuse_attention = fuse_attention;
    o.precision = precision;
    sn_pipeline_stats st;
    sn_graph *g = tiny_training_graph_opts(&o, &st);
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    ck_assert_int_eq(st.attention_fused, fuse_attention ? c.n_layer : 0);
    ck_assert_int_eq(st.vocab_padded, 1);
    return g;
}

static sn_graph *built(const sn_gpt2_lora *l, const sn_pipeline_opts *o, sn_pipeline_stats *st) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = TINY_VOCAB;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build_lora(g, &c, TINY_B, TINY_T, l, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_compile(g, o, NULL, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

sn_graph *tiny_training_graph_opts(const sn_pipeline_opts *o, sn_pipeline_stats *st) {
    return built(NULL, o, st);
}

sn_graph *tiny_lora_graph(sn_precision precision, sn_pipeline_stats *st) {
    sn_gpt2_lora l = {.lora = {.rank = 4, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = precision;
    return built(&l, &o, st);
}

sn_node *tiny_input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    return NULL;
}

void tiny_tokens(int32_t *x, int32_t *y, uint64_t seed) {
    sn_rng r = sn_rng_seed(seed);
    for (int i = 0; i < TINY_B * TINY_T; i++) {
        x[i] = (int32_t)sn_rng_below(&r, TINY_VOCAB);
        y[i] = i % 9 == 4 ? -1 : (int32_t)sn_rng_below(&r, TINY_VOCAB);
    }
}

tiny_memory tiny_check_compiled(sn_graph *g, uint64_t seed, const char *label) {
    return tiny_check_compiled_tol(g, seed, label, 1e-4);
}

tiny_memory tiny_check_compiled_tol(sn_graph *g, uint64_t seed, const char *label, double tol) {
    return tiny_check_compiled_for(g, seed, label, tol, NULL);
}

tiny_memory tiny_check_compiled_for(sn_graph *g, uint64_t seed, const char *label, double tol,
                                    const sn_target *t) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = t}, &p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    sn_exec *x;
    ck_assert_msg(sn_exec_new(d, p, &x, &e) == SN_OK, "%s", e.msg);
    sn_interp *it = sn_interp_new(g, false);

    int32_t ids[TINY_B * TINY_T], tg[TINY_B * TINY_T];
    tiny_tokens(ids, tg, seed);
    sn_node *idx = tiny_input(g, "idx"), *targets = tiny_input(g, "targets");
    ck_assert_msg(!sn_exec_set(x, idx, ids, &e) && !sn_exec_set(x, targets, tg, &e), "%s", e.msg);
    ck_assert(!sn_interp_set_i32(it, idx, ids, &e) && !sn_interp_set_i32(it, targets, tg, &e));
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    for (int i = 0; i < np; i++) {
        float *w = malloc(sizeof(float) * (size_t)sn_numel(params[i]));
        sn_param_init(params[i], w, seed);
        if (params[i]->a.init == SN_INIT_ZEROS) /* biases that are not 0: an epilogue that
                                                    drops one shows */
            for (int64_t j = 0; j < sn_numel(params[i]); j++) w[j] = 0.05f * (float)((j * 7 + i) % 11 - 5);
        sn_dtype dt = params[i]->dtype; /* a base stored in 16 bits (base16) is set so */
        uint16_t *w16 = dt == SN_F32 ? NULL : malloc(sizeof(uint16_t) * (size_t)sn_numel(params[i]));
        for (int64_t j = 0; w16 && j < sn_numel(params[i]); j++)
            w16[j] = dt == SN_BF16 ? sn_f32_to_bf16(w[j]) : sn_f32_to_f16(w[j]);
        ck_assert_msg(sn_exec_set(x, params[i], w16 ? (const void *)w16 : w, &e) == SN_OK, "%s", e.msg);
        ck_assert(sn_interp_set(it, params[i], w, &e) == SN_OK);
        free(w16);
        free(w);
    }
    sn_node *ls = tiny_input(g, "loss_scale"); /* fp16: a power of two scales loss and gradients */
    const float scale = 1024;
    if (ls) ck_assert(!sn_exec_set(x, ls, &scale, &e) && !sn_interp_set(it, ls, &scale, &e));
    ck_assert_msg(sn_exec_run(x, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);

    float loss;
    ck_assert(sn_exec_get(x, g->loss, &loss, &e) == SN_OK);
    double got = loss;
    char what[128];
    snprintf(what, sizeof what, "loss (%s)", label);
    sn_check_close(what, &got, sn_interp_value(it, g->loss), 1, tol, 0);
    for (int i = 0; i < np; i++) {
        if (!params[i]->grad) continue; /* frozen */
        int64_t n = sn_numel(params[i]);
        float *gf = malloc(sizeof(float) * (size_t)n);
        double *gd = malloc(sizeof(double) * (size_t)n);
        ck_assert(sn_exec_get(x, params[i]->grad, gf, &e) == SN_OK);
        for (int64_t k = 0; k < n; k++) gd[k] = gf[k];
        snprintf(what, sizeof what, "d loss / d %s (%s)", params[i]->name, label);
        sn_check_close(what, gd, sn_interp_value(it, params[i]->grad), (size_t)n, tol, 1e-6);
        free(gf);
        free(gd);
    }
    sn_exec_stats st;
    sn_exec_stats_get(x, &st);
    tiny_memory m = {p->arena_bytes, st.arena_peak_bytes, p->sum_bytes};
    sn_interp_free(it);
    sn_exec_free(x);
    sn_program_free(p);
    sn_device_free(d);
    return m;
}
