/* fp8_model.c: the fp8 suites' small GPT-2 (fp8_model.h). */
#include "fp8_model.h"

#include <stdlib.h>
#include <string.h>

#include "support/rng.h"
#include "train/train.h"
#include "harness.h"

const sn_gpt2_config FP8_SMALL = {"fp8-small", 256, FP8_T, 2, 2, 128, 0};

sn_graph *fp8_small_graph(sn_fp8_policy pol, sn_pipeline_stats *st) {
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e = {0};
    ck_assert_msg(sn_gpt2_build(g, &FP8_SMALL, FP8_B, FP8_T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = SN_PRECISION_BF16;
    o.fp8 = pol;
    ck_assert_msg(sn_pipeline_graph(g, &o, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

void fp8_small_set(sn_interp *it, sn_exec *x, const sn_graph *g, uint64_t seed) {
    sn_err e = {0};
    for (int i = 0, k = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM) continue;
        k++; /* the parameter's ordinal, not its node id: the fp8 pass adds nodes between them */
        int64_t n = sn_numel(p);
        float *w = malloc(sizeof(float) * (size_t)n);
        ck_assert(w && p->dtype == SN_F32);
        sn_param_init(p, w, seed + (uint64_t)k);
        if (p->a.init == SN_INIT_ZEROS) /* biases that are not 0 */
            for (int64_t j = 0; j < n; j++) w[j] = 0.02f * (float)((j * 7 + k) % 11 - 5);
        ck_assert(sn_interp_set(it, p, w, &e) == SN_OK);
        if (x) ck_assert_msg(sn_exec_set(x, p, w, &e) == SN_OK, "%s", e.msg);
        free(w);
    }
    sn_rng r = sn_rng_seed(seed);
    int32_t ids[FP8_B * FP8_T], tg[FP8_B * FP8_T];
    for (int k = 0; k < FP8_B * FP8_T; k++)
        ids[k] = (int32_t)sn_rng_below(&r, 250), tg[k] = k % 7 == 3 ? -1 : (int32_t)sn_rng_below(&r, 250);
    const sn_node *in[2] = {sn_graph_input(g, SN_ROLE_TOKENS), sn_graph_input(g, SN_ROLE_TARGETS)};
    const int32_t *v[2] = {ids, tg};
    for (int k = 0; k < 2; k++) {
        ck_assert(sn_interp_set_i32(it, in[k], v[k], &e) == SN_OK);
        if (x) ck_assert_msg(sn_exec_set(x, in[k], v[k], &e) == SN_OK, "%s", e.msg);
    }
}

const sn_node *fp8_param(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    ck_abort_msg("no parameter %s", name);
    return NULL;
}
