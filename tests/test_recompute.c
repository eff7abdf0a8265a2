/* test_recompute.c: the recompute pass (passes/recompute.c): the blocks it finds from the
 * graph's structure, losses and gradients bit-identical with and without recompute (compiled CPU
 * device and the reference interpreter), planned arenas that fall, and the budget's choices and
 * refusals. Convention: "identical" is memcmp of the values, never a tolerance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "interp/interp.h"
#include "train/plan.h"
#include "train/train.h"
#include "harness.h"
#include "tiny_gpt2.h"

enum { MAX_PARAMS = 64 };

/* The tiny GPT-2 (tiny_gpt2.h's shape) through the pipeline with a checkpoint policy. */
static sn_graph *tiny_graph(sn_recompute_policy policy, int64_t budget, sn_pipeline_stats *st) {
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.checkpoint = policy;
    o.checkpoint_budget = budget;
    return tiny_training_graph_opts(&o, st);
}

/* gpt2 124M at B x T through fuse and memplan: the planned arena. */
static int64_t gpt2_arena(const char *model, int B, int T, sn_recompute_policy policy, int64_t budget,
                          sn_pipeline_stats *st, sn_status *status, sn_err *e) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(model, &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    ck_assert(sn_gpt2_build(g, &c, B, T, &m, e) == SN_OK);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.checkpoint = policy;
    o.checkpoint_budget = budget;
    sn_program *p;
    *status = sn_compile(g, &o, &p, st, e);
    int64_t a = *status ? -1 : p->arena_bytes;
    if (!*status) sn_program_free(p);
    sn_graph_free(g);
    return a;
}

/* Every FINISH kernel runs after the PARTIAL kernel that writes its scratch (no arg links the
 * two, so an order built from args alone may swap them); returns the FINISH kernels seen. */
static int sum_stages_in_order(const sn_program *p) {
    int finishes = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        if (p->kernels[k]->stage != SN_SUM_FINISH) continue;
        int j = k - 1;
        while (j >= 0 && !(p->kernels[j]->stage == SN_SUM_PARTIAL && p->kernels[j]->scratch == p->kernels[k]->scratch))
            j--;
        ck_assert_msg(j >= 0, "kernel %d (%s, FINISH) runs before its PARTIAL kernel", k, p->kernels[k]->name);
        finishes++;
    }
    return finishes;
}

/* The loss and every gradient of g, compiled on the CPU device: [0] the loss, then the
 * gradients in parameter order, as floats. */
static float *run_scheduled_at(sn_graph *g, const sn_target *t, sn_schedule_mode mode,
                               sn_pipeline_stats *ps, int64_t *n_out, int64_t *planned,
                               int64_t *measured) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.schedule = mode, .target = t}, &p, ps, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_int_gt(sum_stages_in_order(p), 0);
    sn_exec *x;
    ck_assert_msg(sn_exec_new(d, p, &x, &e) == SN_OK, "%s", e.msg);
    int32_t ids[TINY_B * TINY_T], tg[TINY_B * TINY_T];
    tiny_tokens(ids, tg, 7);
    ck_assert(!sn_exec_set(x, tiny_input(g, "idx"), ids, &e));
    ck_assert(!sn_exec_set(x, tiny_input(g, "targets"), tg, &e));
    sn_node *params[MAX_PARAMS];
    int np = sn_graph_params(g, params, MAX_PARAMS);
    int64_t n = 1;
    for (int i = 0; i < np; i++) n += sn_numel(params[i]);
    float *out = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < np; i++) {
        sn_param_init(params[i], out, 3);
        ck_assert(sn_exec_set(x, params[i], out, &e) == SN_OK);
    }
    ck_assert_msg(sn_exec_run(x, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_exec_get(x, g->loss, out, &e) == SN_OK);
    int64_t at = 1;
    for (int i = 0; i < np; i++) {
        ck_assert(sn_exec_get(x, params[i]->grad, out + at, &e) == SN_OK);
        at += sn_numel(params[i]);
    }
    sn_exec_stats st;
    sn_exec_stats_get(x, &st);
    *planned = p->arena_bytes;
    *measured = st.arena_peak_bytes;
    *n_out = n;
    sn_exec_free(x);
    sn_program_free(p);
    sn_device_free(d);
    return out;
}

static float *run_scheduled(sn_graph *g, sn_schedule_mode mode, sn_pipeline_stats *ps,
                            int64_t *n_out, int64_t *planned, int64_t *measured) {
    return run_scheduled_at(g, NULL, mode, ps, n_out, planned, measured);
}

static float *run_compiled(sn_graph *g, int64_t *n_out, int64_t *planned, int64_t *measured) {
    sn_pipeline_stats ps;
    return run_scheduled(g, SN_SCHEDULE_OFF, &ps, n_out, planned, measured);
}

/* The same with the GELU and its gradient in pointwise kernels, not GEMM epilogues. */
static float *run_unfused(sn_graph *g, int64_t *n_out, int64_t *planned, int64_t *measured) {
    sn_pipeline_stats ps;
    sn_target t = sn_target_cpu();
    t.gelu_unfused = true;
    return run_scheduled_at(g, &t, SN_SCHEDULE_OFF, &ps, n_out, planned, measured);
}

/* The same on the reference interpreter, as doubles. */
static double *run_interp(sn_graph *g, int64_t *n_out) {
    sn_err e;
    sn_interp *it = sn_interp_new(g, false);
    int32_t ids[TINY_B * TINY_T], tg[TINY_B * TINY_T];
    tiny_tokens(ids, tg, 7);
    ck_assert(!sn_interp_set_i32(it, tiny_input(g, "idx"), ids, &e));
    ck_assert(!sn_interp_set_i32(it, tiny_input(g, "targets"), tg, &e));
    sn_node *params[MAX_PARAMS];
    int np = sn_graph_params(g, params, MAX_PARAMS);
    int64_t n = 1;
    for (int i = 0; i < np; i++) n += sn_numel(params[i]);
    double *out = malloc(sizeof(double) * (size_t)n);
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < np; i++) {
        sn_param_init(params[i], w, 3);
        ck_assert(sn_interp_set(it, params[i], w, &e) == SN_OK);
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    out[0] = sn_interp_value(it, g->loss)[0];
    int64_t at = 1;
    for (int i = 0; i < np; i++) {
        memcpy(out + at, sn_interp_value(it, params[i]->grad), sizeof(double) * (size_t)sn_numel(params[i]));
        at += sn_numel(params[i]);
    }
    free(w);
    sn_interp_free(it);
    *n_out = n;
    return out;
}

/* the budget twice: just under the full arena (a few values dropped), and at three quarters of
 * it (boundaries and a mix of kept values) */
static const sn_recompute_policy policies[] = {SN_RECOMPUTE_BLOCK, SN_RECOMPUTE_SQRT, SN_RECOMPUTE_BUDGET, SN_RECOMPUTE_BUDGET};

/* ---- tests ---- */

START_TEST(finds_blocks) {
    sn_err e;
    sn_status s;
    sn_pipeline_stats st;
    sn_graph *g = tiny_graph(SN_RECOMPUTE_BLOCK, 0, &st);
    ck_assert_int_gt(st.checkpoint_recomputed, 0);
    sn_graph_free(g);
    /* gpt2: 12 blocks of two sub-blocks, so block keeps 13 boundaries and sqrt(24) ~ 5 */
    sn_graph *h = sn_graph_new();
    sn_gpt2_config c;
    sn_gpt2 m;
    ck_assert(sn_gpt2_config_find("gpt2", &c) && !sn_gpt2_build(h, &c, 1, 64, &m, &e));
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    ck_assert(sn_compile(h, &o, NULL, NULL, &e) == SN_OK);
    sn_graph *out;
    sn_recompute_stats cs;
    sn_target t = sn_target_cpu();
    ck_assert_msg(sn_pass_recompute(h, SN_RECOMPUTE_BLOCK, 0, &t, &out, &cs, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(cs.blocks, 12);
    ck_assert_int_eq(cs.sub_blocks, 24);
    ck_assert_int_eq(cs.kept, 13);
    sn_graph_free(out);
    ck_assert(sn_pass_recompute(h, SN_RECOMPUTE_SQRT, 0, &t, &out, &cs, &e) == SN_OK);
    ck_assert_int_eq(cs.kept, 6); /* boundaries 0, 5, 10, 15, 20 and the last */
    sn_graph_free(out);
    ck_assert(sn_pass_recompute(h, SN_RECOMPUTE_NONE, 0, &t, &out, &cs, &e) == SN_OK);
    ck_assert_int_eq(cs.recomputed, 0);
    ck_assert_int_eq(out->n_nodes, h->n_nodes);
    sn_graph_free(out);
    sn_graph_free(h);
    (void)s;
}
END_TEST

/* Loss and gradients identical to the bit with each policy, on the compiled CPU device (whose
 * planned arena is also its measured one) and on the interpreter. The program without
 * checkpointing is checked against the interpreter by test_compiled, so identity is enough.
 * The GELUs in pointwise kernels for that: a policy that keeps c_fc's pre-activation and drops
 * its GELU recomputes the GELU in a pointwise kernel (LLVM's tanh), where the program without
 * checkpointing had it from the GEMM's epilogue (libm's): with the epilogues the loss is the
 * same and the gradients within 1e-5 (c_proj's weights', which read the GELU). */
START_TEST(recompute_is_bit_identical) {
    sn_pipeline_stats st;
    sn_graph *g0 = tiny_graph(SN_RECOMPUTE_NONE, 0, &st);
    int64_t n0, n1, plan0, meas0, plan1, meas1;
    float *c0 = run_unfused(g0, &n0, &plan0, &meas0), *e0 = run_compiled(g0, &n0, &plan0, &meas0);
    double *i0 = run_interp(g0, &n0);
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        sn_recompute_policy policy = policies[k];
        int64_t budget = policy != SN_RECOMPUTE_BUDGET ? 0 : k == 2 ? plan0 - 1 : plan0 * 3 / 4;
        sn_graph *g1 = tiny_graph(policy, budget, &st);
        ck_assert_int_gt(st.checkpoint_recomputed, 0);
        ck_assert_int_gt(g1->n_nodes, g0->n_nodes);
        float *c1 = run_unfused(g1, &n1, &plan1, &meas1), *e1 = run_compiled(g1, &n1, &plan1, &meas1);
        ck_assert_int_eq(n0, n1);
        ck_assert_msg(!memcmp(c0, c1, sizeof(float) * (size_t)n0), "%s: compiled loss %.9g vs %.9g "
                      "or a gradient differs", sn_recompute_policy_name(policy), c1[0], c0[0]);
        ck_assert_msg(e1[0] == e0[0], "%s: with the GELU epilogues, loss %.9g vs %.9g",
                      sn_recompute_policy_name(policy), e1[0], e0[0]);
        double ge0[4096], ge1[4096];
        for (int64_t at = 1; at < n0; at += 4096) { /* the gradients, a block at a time */
            int64_t m = n0 - at < 4096 ? n0 - at : 4096;
            for (int64_t i = 0; i < m; i++) ge0[i] = e0[at + i], ge1[i] = e1[at + i];
            sn_check_close("gradients with the GELU epilogues", ge1, ge0, (size_t)m, 1e-5, 1e-3);
        }
        free(e1);
        ck_assert_int_eq(plan1, meas1); /* the planner's arena is the device's */
        ck_assert_int_lt(plan1, plan0);
        if (policy == SN_RECOMPUTE_BUDGET) ck_assert_int_le(plan1, budget);
        double *i1 = run_interp(g1, &n1);
        ck_assert_msg(!memcmp(i0, i1, sizeof(double) * (size_t)n0), "%s: interpreted loss %.17g vs "
                      "%.17g or a gradient differs", sn_recompute_policy_name(policy), i1[0], i0[0]);
        free(c1);
        free(i1);
        sn_graph_free(g1);
    }
    free(c0);
    free(e0);
    free(i0);
    sn_graph_free(g0);
}
END_TEST

/* The schedule pass moves kernels only where every kernel still reads what it read: tiny GPT-2's
 * training step, with and without block checkpointing, in the greedy order even where it is no
 * better (SN_SCHEDULE_ALWAYS: weight-gradient GEMMs and column sums move up), has the loss and
 * every gradient of fuse's order bit for bit; with SN_SCHEDULE_ON the order is kept only when
 * its peak is lower, and on GPT-2 it is not (the peak is the head's logits gradient). */
START_TEST(schedule_is_bit_identical) {
    static const sn_recompute_policy pol[] = {SN_RECOMPUTE_NONE, SN_RECOMPUTE_BLOCK};
    for (int k = 0; k < 2; k++) {
        sn_pipeline_stats st, s0, s1;
        sn_graph *g0 = tiny_graph(pol[k], 0, &st), *g1 = tiny_graph(pol[k], 0, &st);
        int64_t n0, n1, plan0, meas0, plan1, meas1;
        float *c0 = run_scheduled(g0, SN_SCHEDULE_OFF, &s0, &n0, &plan0, &meas0);
        float *c1 = run_scheduled(g1, SN_SCHEDULE_ALWAYS, &s1, &n1, &plan1, &meas1);
        ck_assert_int_eq(s0.schedule_moved, 0);
        ck_assert_int_gt(s1.schedule_moved, 10);
        ck_assert_int_eq(n0, n1);
        ck_assert_msg(!memcmp(c0, c1, sizeof(float) * (size_t)n0), "%s: scheduled loss %.9g vs "
                      "%.9g or a gradient differs", sn_recompute_policy_name(pol[k]), c1[0], c0[0]);
        ck_assert_int_eq(plan1, meas1);
        printf("test_recompute: schedule (%s): %d of the tiny step's kernels moved, bit-identical; "
               "live arena peak %lld -> %lld bytes, arena %lld -> %lld\n", sn_recompute_policy_name(pol[k]),
               s1.schedule_moved, (long long)s1.schedule_peak_before, (long long)s1.schedule_peak_after,
               (long long)plan0, (long long)plan1);
        free(c0);
        free(c1);
        sn_graph_free(g0);
        sn_graph_free(g1);
    }
    sn_pipeline_stats st, s2;
    sn_graph *g2 = tiny_graph(SN_RECOMPUTE_NONE, 0, &st);
    int64_t n2, plan2, meas2;
    free(run_scheduled(g2, SN_SCHEDULE_ON, &s2, &n2, &plan2, &meas2));
    ck_assert_int_le(s2.schedule_peak_after, s2.schedule_peak_before);
    ck_assert(s2.schedule_moved == 0 || s2.schedule_peak_after < s2.schedule_peak_before);
    sn_graph_free(g2);
}
END_TEST

/* Where the graph's order keeps two large values alive at once, the pass frees the first before
 * making the second: y1 = x w1 and y2 = x w2 (each 1 MiB), reduced to s1, s2; fuse's order
 * computes y1, y2, s1, s2; scheduled, s1 runs before y2 and the arena halves; the output is the
 * same bits. */
START_TEST(schedule_lowers_a_peak) {
    enum { R = 256, K = 64, N = 1024 };
    float out[2][R];
    int64_t arena[2];
    for (int m = 0; m < 2; m++) {
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, K));
        sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(K, N), SN_INIT_NORMAL, 0.02f);
        sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(K, N), SN_INIT_NORMAL, 0.02f);
        sn_node *y1 = sn_matmul(g, x, w1), *y2 = sn_matmul(g, x, w2);
        sn_node *s = sn_add(g, sn_sum(g, y1, 1, false), sn_sum(g, y2, 1, false));
        sn_graph_add_output(g, s);
        ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
        sn_err e;
        sn_pipeline_stats ps;
        sn_program *p;
        ck_assert_msg(sn_compile(g, &(sn_pipeline_opts){.schedule = m ? SN_SCHEDULE_ON : SN_SCHEDULE_OFF},
                                 &p, &ps, &e) == SN_OK, "%s", e.msg);
        arena[m] = p->arena_bytes;
        if (m) ck_assert_int_gt(ps.schedule_moved, 0);
        sn_device *d;
        ck_assert(sn_cpu_device_new(2, &d, &e) == SN_OK);
        sn_exec *xe;
        ck_assert_msg(sn_exec_new(d, p, &xe, &e) == SN_OK, "%s", e.msg);
        static float buf[K * N];
        for (int i = 0; i < R * K; i++) buf[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        ck_assert(sn_exec_set(xe, x, buf, &e) == SN_OK);
        sn_param_init(w1, buf, 5);
        ck_assert(sn_exec_set(xe, w1, buf, &e) == SN_OK);
        sn_param_init(w2, buf, 5);
        ck_assert(sn_exec_set(xe, w2, buf, &e) == SN_OK);
        ck_assert_msg(sn_exec_run(xe, &e) == SN_OK, "%s", e.msg);
        ck_assert(sn_exec_get(xe, s, out[m], &e) == SN_OK);
        sn_exec_free(xe);
        sn_program_free(p);
        sn_device_free(d);
        sn_graph_free(g);
    }
    ck_assert_msg(arena[1] * 3 < arena[0] * 2, "arena %lld scheduled vs %lld", (long long)arena[1],
                  (long long)arena[0]);
    ck_assert(!memcmp(out[0], out[1], sizeof out[0]));
}
END_TEST

/* gpt2 124M at B=4, T=256: each policy lowers the planned arena, the budget fits what it is
 * given, and a budget below what any choice reaches is refused with the smallest one named. */
START_TEST(gpt2_arenas) {
    sn_err e;
    sn_status s;
    sn_pipeline_stats st;
    int64_t none = gpt2_arena("gpt2", 4, 256, SN_RECOMPUTE_NONE, 0, &st, &s, &e);
    int64_t block = gpt2_arena("gpt2", 4, 256, SN_RECOMPUTE_BLOCK, 0, &st, &s, &e);
    double block_extra = st.checkpoint_extra_flops / st.step_flops;
    int64_t sqrtn = gpt2_arena("gpt2", 4, 256, SN_RECOMPUTE_SQRT, 0, &st, &s, &e);
    ck_assert_msg(block < none / 2 && sqrtn < none / 2, "arenas: none %lld block %lld sqrt %lld",
                  (long long)none, (long long)block, (long long)sqrtn);
    ck_assert(block_extra > 0.05 && block_extra < 0.34); /* at most one forward again */
    int64_t budget = (none + block) / 2;
    int64_t got = gpt2_arena("gpt2", 4, 256, SN_RECOMPUTE_BUDGET, budget, &st, &s, &e);
    ck_assert_msg(!s, "%s", e.msg);
    ck_assert_int_le(got, budget);
    ck_assert(st.checkpoint_extra_flops / st.step_flops < block_extra); /* it keeps more */
    got = gpt2_arena("gpt2", 4, 256, SN_RECOMPUTE_BUDGET, none, &st, &s, &e); /* fits as it is */
    ck_assert_int_eq(got, none);
    ck_assert_int_eq(st.checkpoint_recomputed, 0);
    got = gpt2_arena("gpt2", 4, 256, SN_RECOMPUTE_BUDGET, 1 << 20, &st, &s, &e);
    ck_assert_int_eq(s, SN_ERR_OOM);
    ck_assert_msg(strstr(e.msg, "no choice fits the activation budget of 1.0 MiB") &&
                  strstr(e.msg, "needs an arena of"), "%s", e.msg);
    ck_assert_int_gt(st.checkpoint_min_arena, 1 << 20);
    ck_assert_int_lt(st.checkpoint_min_arena, block + 1);
}
END_TEST

/* The tied LM head's (V, C) weight gradient is written by its GEMM straight into the gradient
 * of wte, the embedding backward's part added by the same GEMM (program/kernel.h ACCUM: its C),
 * in place: the embedding backward writes wte's gradient, the GEMM adds to it there; no add
 * kernel and no (V, C) arena value. */
START_TEST(tied_head_gradient_in_place) {
    sn_err e;
    sn_gpt2_config c;
    sn_gpt2 m;
    sn_graph *g = sn_graph_new();
    ck_assert(sn_gpt2_config_find("gpt2", &c) && !sn_gpt2_build(g, &c, 1, 64, &m, &e));
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_program *p;
    ck_assert_msg(sn_compile(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    const sn_node *wte = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && !strcmp(g->nodes[i]->name, "wte")) wte = g->nodes[i];
    ck_assert(wte && wte->grad);
    int in_arena = 0;
    for (int v = 0; v < p->n_values; v++) {
        const sn_value *x = &p->values[v];
        if (!x->persistent && x->bytes == sn_numel(wte) * 4) in_arena++;
    }
    const sn_kernel *head = NULL;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_node *a = p->kernels[k]->anchor;
        if (p->kernels[k]->kind == SN_KER_GEMM && a->rank == 2 && a->shape[0] == wte->shape[0])
            head = p->kernels[k];
    }
    ck_assert(head && head->gemm.epilogue == SN_EPI_NONE && head->gemm.accum);
    int y = p->value_of[head->args[0]->id], cv = p->value_of[head->args[3]->id];
    ck_assert_int_eq(y, p->value_of[wte->grad->id]);
    ck_assert(p->values[y].persistent && p->values[cv].alias == y);
    ck_assert_int_eq(in_arena, 0);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- the LM head in chunks (passes/chunk_logits.c) ---- */

static sn_test_tiny_shape chunk_shape = {TINY_VOCAB, TINY_T};

/* Tiny GPT-2 (llama: llama-tiny) at TINY_B x TINY_T, the loss its one output, through the graph
 * passes at precision p with the LM head in chunks of `rows` (0: whole). */
static sn_graph *chunk_graph_policy(bool llama, sn_precision p, int64_t rows, sn_recompute_policy policy,
                                    sn_pipeline_stats *st) {
    sn_err e;
    sn_graph *g;
    if (llama) {
        sn_llama_config c;
        sn_llama m;
        ck_assert(sn_llama_config_find("llama-tiny", &c));
        g = sn_graph_new();
        ck_assert_msg(sn_llama_build(g, &c, TINY_B, TINY_T, &m, &e) == SN_OK, "%s", e.msg);
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, m.loss);
    } else {
        ck_assert(sn_test_tiny_loss_graph(&chunk_shape, TINY_B, &g, &e) == SN_OK);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = p;
    o.chunk_logits = rows;
    o.checkpoint = policy;
    ck_assert_msg(sn_compile(g, &o, NULL, st, &e) == SN_OK, "%s", e.msg);
    return g;
}

static sn_graph *chunk_graph(bool llama, sn_precision p, int64_t rows, sn_pipeline_stats *st) {
    return chunk_graph_policy(llama, p, rows, SN_RECOMPUTE_NONE, st);
}

/* The largest difference of b from a, the loss and each gradient (as run_compiled lays them
 * out) relative to that value's largest magnitude in a. */
static double worst(const sn_graph *g, const double *a, const double *b) {
    sn_node *params[MAX_PARAMS];
    int np = sn_graph_params(g, params, MAX_PARAMS);
    double w = fabs(a[0] - b[0]) / fabs(a[0]);
    int64_t at = 1;
    for (int i = 0; i < np; i++) {
        double d = 0, m = 0;
        for (int64_t j = at; j < at + sn_numel(params[i]); j++) {
            d = fmax(d, fabs(a[j] - b[j]));
            m = fmax(m, fabs(a[j]));
        }
        if (m > 0 && !(d / m <= w)) w = d / m; /* NaN propagates */
        at += sn_numel(params[i]);
    }
    return w;
}

static double *widen(const float *x, int64_t n) {
    double *y = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* The loss and every gradient of g1 against g0's, compiled (CPU device) and interpreted: the
 * worse of the two relative differences. */
static double chunk_error(sn_graph *g0, sn_graph *g1, double *compiled, double *interpreted) {
    int64_t n0, n1, plan, meas;
    float *f0 = run_compiled(g0, &n0, &plan, &meas), *f1 = run_compiled(g1, &n1, &plan, &meas);
    ck_assert_int_eq(n0, n1);
    double *c0 = widen(f0, n0), *c1 = widen(f1, n1);
    double *i0 = run_interp(g0, &n0), *i1 = run_interp(g1, &n1);
    *compiled = worst(g0, c0, c1);
    *interpreted = worst(g0, i0, i1);
    free(f0), free(f1), free(c0), free(c1), free(i0), free(i1);
    return fmax(*compiled, *interpreted);
}

/* The loss and every gradient with the LM head in chunks, against the head whole: tiny GPT-2 in
 * f32 and bf16, three chunks of 16 rows and three of 20, 20, 8 (every ninth target ignored, so
 * the chunks' counts are not powers of two), compiled and interpreted; and llama-tiny (its own
 * lm_head, untied). Within 1e-6 in f32: the loss adds the chunks' means, dloss / count is
 * rounded once more, dW adds the chunks' products (passes.h). bf16 stores dlogits in 16 bits, so
 * an element whose scale moved by an ulp may round the other way: within 1e-3 there. */
START_TEST(chunked_logits_match_whole) {
    static const struct { bool llama; sn_precision p; double tol; } cases[] = {
        {false, SN_PRECISION_FP32, 1e-6}, {false, SN_PRECISION_BF16, 1e-3}, {true, SN_PRECISION_FP32, 1e-6}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int64_t rows = 16; rows <= 20; rows += 4) {
            sn_pipeline_stats st;
            sn_graph *g0 = chunk_graph(cases[k].llama, cases[k].p, 0, &st);
            ck_assert_int_eq(st.logits_chunks, 0);
            sn_graph *g1 = chunk_graph(cases[k].llama, cases[k].p, rows, &st);
            ck_assert_int_eq(st.logits_chunks, 3);
            double c, i, err = chunk_error(g0, g1, &c, &i);
            printf("test_recompute: %s %s, LM head in chunks of %lld rows: loss and gradients within "
                   "%.3g (compiled) and %.3g (interpreted) of the head whole\n",
                   cases[k].llama ? "llama-tiny" : "tiny GPT-2", sn_precision_name(cases[k].p),
                   (long long)rows, c, i);
            ck_assert_msg(err <= cases[k].tol, "chunks of %lld: %.3g", (long long)rows, err);
            sn_graph_free(g0);
            sn_graph_free(g1);
        }
}
END_TEST

/* The memory plan sees each chunk's logits and dlogits die before the next chunk's are made:
 * the (rows, V) values of the chunked step (tiny GPT-2, 3 chunks of 16 rows) live in disjoint
 * ranges of kernels, chunk after chunk, and the planned arena is what the CPU device measures. */
START_TEST(chunked_logits_live_one_at_a_time) {
    sn_err e;
    sn_pipeline_stats st;
    sn_graph *g = chunk_graph(false, SN_PRECISION_FP32, 16, &st);
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    int seen[8], n = 0;
    for (int v = 0; v < p->n_values; v++) {
        const sn_node *x = p->values[v].node;
        if (!x || x->rank != 2 || x->shape[0] != 16 || x->shape[1] != 256 || p->values[v].alias >= 0) continue;
        ck_assert_int_lt(n, 8);
        seen[n++] = v;
    }
    ck_assert_int_ge(n, 3); /* each chunk's logits (and dlogits, where they are not one value) */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const sn_value *a = &p->values[seen[i]], *b = &p->values[seen[j]];
            bool same_chunk = a->node->in[0] == b->node || b->node->in[0] == a->node ||
                              a->node->in[0] == b->node->in[0];
            if (i != j && !same_chunk)
                ck_assert_msg(a->last < b->first || b->last < a->first, "%%%d [%d, %d] and %%%d [%d, %d] "
                              "live at once", a->node->id, a->first, a->last, b->node->id, b->first, b->last);
        }
    sn_program_free(p);
    int64_t n0, plan, meas;
    free(run_compiled(g, &n0, &plan, &meas));
    ck_assert_int_eq(plan, meas);
    sn_graph_free(g);
}
END_TEST

/* Checkpointing runs after the chunks (its budget plans the chunked arena): block
 * checkpointing of the chunked step changes no bit of its loss or gradients. */
START_TEST(chunked_logits_then_recompute) {
    sn_pipeline_stats st;
    sn_graph *g0 = chunk_graph(false, SN_PRECISION_FP32, 16, &st);
    sn_graph *g1 = chunk_graph_policy(false, SN_PRECISION_FP32, 16, SN_RECOMPUTE_BLOCK, &st);
    ck_assert_int_eq(st.logits_chunks, 3);
    ck_assert_int_gt(st.checkpoint_recomputed, 0);
    int64_t n0, n1, plan, meas;
    float *c0 = run_compiled(g0, &n0, &plan, &meas), *c1 = run_compiled(g1, &n1, &plan, &meas);
    ck_assert_int_eq(n0, n1);
    ck_assert_msg(!memcmp(c0, c1, sizeof(float) * (size_t)n0), "loss %.9g vs %.9g or a gradient", c1[0], c0[0]);
    double *i0 = run_interp(g0, &n0), *i1 = run_interp(g1, &n1);
    ck_assert(!memcmp(i0, i1, sizeof(double) * (size_t)n0));
    free(c0), free(c1), free(i0), free(i1);
    sn_graph_free(g0);
    sn_graph_free(g1);
}
END_TEST

/* Planted bugs: chunk 1 reading chunk 0's rows of the head's input (its own never multiplied:
 * a chunk skipped, one overlapped), or its targets, is caught by the comparison above. */
START_TEST(chunked_logits_planted_overlap) {
    for (int which = 0; which < 2; which++) {
        sn_pipeline_stats st;
        sn_graph *g0 = chunk_graph(false, SN_PRECISION_FP32, 0, &st);
        sn_graph *g1 = chunk_graph(false, SN_PRECISION_FP32, 16, &st);
        int planted = 0;
        for (int i = 0; i < g1->n_nodes; i++) {
            sn_node *n = g1->nodes[i];
            bool targets = n->dtype == SN_I32;
            if (n->op != SN_OP_SLICE || n->a.start != 16 || targets != (which == 1)) continue;
            n->a.start = 0, n->a.end = 16;
            planted++;
        }
        ck_assert_int_gt(planted, 0);
        double c, i, err = chunk_error(g0, g1, &c, &i);
        ck_assert_msg(c > 1e-3 && i > 1e-3, "the planted %s overlap went unseen: %.3g, %.3g",
                      which ? "targets" : "rows", c, i);
        (void)err;
        sn_graph_free(g0);
        sn_graph_free(g1);
    }
}
END_TEST

/* gpt2 124M at B = 4, T = 256 (micro-batch 4) for the plan's graph callback. */
static sn_status gpt2_loss_graph(void *ctx, int b, sn_graph **out, sn_err *e) {
    (void)ctx;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("gpt2", &c));
    *out = sn_graph_new();
    sn_gpt2 m;
    sn_status s = sn_gpt2_build(*out, &c, b, 256, &m, e);
    sn_graph_clear_outputs(*out);
    sn_graph_add_output(*out, m.loss);
    return s;
}

/* The planned arena of gpt2 at 4 x 256 (1024 rows, V = 50304) falls by the logits' share with
 * the head in chunks of 256 rows: the f32 logits and their gradient, 2 x 206 MB whole, are
 * 2 x 52 MB a chunk, against one more (V, C) product for the weight gradient (155 MB); and
 * under a budget between the two totals the plan takes the chunks, without checkpointing. */
START_TEST(chunked_logits_plan) {
    sn_err e;
    sn_pipeline_opts po = sn_pipeline_defaults();
    sn_plan_opts o = {.batch = 4, .micro_batch = 4, .policy = -1, .compile = &po};
    sn_plan whole, chunked;
    ck_assert_msg(sn_plan_make(&o, gpt2_loss_graph, NULL, &whole, &e) == SN_OK, "%s", e.msg);
    o.chunk_logits = 256;
    ck_assert_msg(sn_plan_make(&o, gpt2_loss_graph, NULL, &chunked, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(whole.logits_chunks, 0);
    ck_assert_int_eq(chunked.logits_chunks, 4);
    int64_t R = 1024, V = 50304, C = 768, share = 2 * (R - 256) * V * 4 - V * C * 4;
    printf("test_recompute: gpt2 4 x 256 f32: arena %lld whole, %lld in 4 chunks (%lld less; the "
           "logits' share %lld)\n", (long long)whole.arena, (long long)chunked.arena,
           (long long)(whole.arena - chunked.arena), (long long)share);
    ck_assert_int_le(chunked.arena, whole.arena - share);
    o.chunk_logits = SN_CHUNK_LOGITS_AUTO;
    o.budget = (whole.total + chunked.total) / 2;
    sn_plan pl;
    ck_assert_msg(sn_plan_make(&o, gpt2_loss_graph, NULL, &pl, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(pl.logits_chunks, SN_CHUNK_LOGITS_PARTS);
    ck_assert_int_eq(pl.chunk_logits, SN_CHUNK_LOGITS_AUTO);
    ck_assert_int_eq(pl.recomputed, 0);
    ck_assert_int_le(pl.total, o.budget);
    o.budget = whole.total; /* fits whole: no chunks */
    ck_assert_msg(sn_plan_make(&o, gpt2_loss_graph, NULL, &pl, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(pl.logits_chunks, 0);
}
END_TEST

/* What the pass does not split is refused by name: the logits an output of the graph, more
 * than 64 chunks. */
START_TEST(chunked_logits_refusals) {
    sn_err e;
    sn_gpt2_config c;
    sn_gpt2 m;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.chunk_logits = 16;
    sn_graph *g = sn_graph_new();
    ck_assert(sn_gpt2_build(g, &c, TINY_B, TINY_T, &m, &e) == SN_OK); /* the logits an output */
    ck_assert_int_eq(sn_compile(g, &o, NULL, NULL, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "is an output of the graph") && strstr(e.msg, "not supported yet"), "%s", e.msg);
    sn_graph_free(g);
    o.chunk_logits = 1;
    ck_assert(sn_test_tiny_loss_graph(&chunk_shape, 4, &g, &e) == SN_OK); /* 96 rows */
    ck_assert_int_eq(sn_compile(g, &o, NULL, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "make 96 chunks") && strstr(e.msg, "give at least 2 rows"), "%s", e.msg);
    sn_graph_free(g);
}
END_TEST

/* ---- the plan (train/plan.c) ---- */

/* The plan's training graph: tiny GPT-2, T = TINY_T, the loss its one output. */
static sn_test_tiny_shape tiny_shape = {TINY_VOCAB, TINY_T};

/* The plan's figures are the program's and the trainer's: its arena is the compiled program's
 * planned and measured arena, its optimizer state the trainer's, its total what the device
 * holds after a step with accumulation. */
START_TEST(plan_is_the_program) {
    sn_err e;
    sn_pipeline_opts po = sn_pipeline_defaults();
    sn_plan_opts o = {.batch = 8, .policy = -1, .compile = &po};
    sn_plan full;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &full, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(full.micro_batch, 8);
    ck_assert_int_eq(full.recomputed, 0);
    /* a budget a little under it: a smaller micro-batch or recompute */
    o.budget = full.total - full.arena / 3;
    sn_plan pl;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_le(pl.total, o.budget);
    ck_assert_int_eq(pl.micro_batch * pl.accum, 8);
    ck_assert_int_eq(pl.total, pl.weights + pl.grads + pl.io + pl.opt_device + pl.arena + pl.workspace + pl.eval);
    ck_assert(pl.eval > 0 && pl.eval_arena < pl.arena); /* ids and loss; in the training arena */
    /* compiled the way the trainer compiles it: the same program */
    sn_graph *g;
    ck_assert(sn_test_tiny_loss_graph(&tiny_shape, pl.micro_batch, &g, &e) == SN_OK);
    po.backward = true;
    po.checkpoint = pl.policy;
    po.checkpoint_budget = pl.arena_budget;
    ck_assert_msg(sn_compile(g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_device *d;
    ck_assert(sn_cpu_device_new(2, &d, &e) == SN_OK);
    sn_train_opts to;
    sn_train_opts_default(&to, 10);
    to.device = d;
    to.compile = &po;
    sn_trainer *t = sn_trainer_new(g, &to, &e);
    ck_assert_msg(t, "%s", e.msg);
    const sn_program *p = sn_trainer_program(t);
    ck_assert_int_eq(p->arena_bytes, pl.arena);
    ck_assert_int_eq(p->persistent_bytes, pl.weights + pl.grads + pl.io);
    int32_t x[8 * TINY_T], y[8 * TINY_T];
    for (int i = 0; i < 8 * TINY_T; i++) x[i] = (i * 37) % TINY_VOCAB, y[i] = (i * 11 + 3) % TINY_VOCAB;
    for (int k = 0; k < pl.accum; k++)
        ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    sn_step_stats st;
    ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(sn_trainer_state_bytes(t), pl.opt_device);
    sn_exec_stats xs;
    sn_exec_stats_get(sn_trainer_exec(t), &xs);
    ck_assert_int_eq(xs.arena_peak_bytes + xs.persistent_bytes + xs.buffer_bytes + sn_test_eval_bytes(t), pl.total);
    sn_trainer_free(t);
    sn_device_free(d);
    sn_graph_free(g);
}
END_TEST

/* Nothing fits: the message names the smallest budget, and that budget is one that fits (one
 * byte less does not); a micro-batch that does not fit names the largest that does. */
START_TEST(plan_refusals) {
    sn_err e;
    sn_pipeline_opts po = sn_pipeline_defaults();
    sn_plan_opts o = {.batch = 8, .budget = 100 << 10, .policy = -1, .compile = &po};
    sn_plan pl;
    ck_assert_int_eq(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e), SN_ERR_OOM);
    ck_assert_msg(strstr(e.msg, "plan: nothing fits in 100.0 KiB: the smallest budget that would "
                         "fit is ") && strstr(e.msg, "(micro-batch 1, checkpointing as needed)") &&
                  strstr(e.msg, "no micro-batch fits the budget given"), "%s", e.msg);
    int64_t least = pl.min_budget;
    ck_assert_int_gt(least, 100 << 10);
    o.budget = least;
    ck_assert_msg(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(pl.micro_batch, 1);
    ck_assert_int_eq(pl.accum, 8);
    ck_assert_int_le(pl.total, least);
    o.budget = least - 1;
    ck_assert_int_eq(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e), SN_ERR_OOM);
    /* micro-batch 8 asked for with room for 2 (and 4 accumulation steps' gradient sums) */
    sn_plan two;
    sn_plan_opts o2 = {.batch = 8, .micro_batch = 2, .policy = SN_RECOMPUTE_NONE, .compile = &po};
    ck_assert(sn_plan_make(&o2, sn_test_tiny_loss_graph, &tiny_shape, &two, &e) == SN_OK);
    o.budget = two.total + 1024;
    o.micro_batch = 8;
    o.policy = SN_RECOMPUTE_NONE;
    ck_assert_int_eq(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e), SN_ERR_OOM);
    ck_assert_msg(strstr(e.msg, "micro-batch 8 does not fit in") &&
                  strstr(e.msg, "the largest micro-batch that fits is 2 (4 accumulation steps)"),
                  "%s", e.msg);
    ck_assert_int_eq(pl.max_micro_batch, 2);
    o.micro_batch = 3;
    ck_assert_int_eq(sn_plan_make(&o, sn_test_tiny_loss_graph, &tiny_shape, &pl, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "not a multiple of the micro-batch 3"), "%s", e.msg);
}
END_TEST

START_TEST(errors_say_what_to_do) {
    sn_err e;
    sn_graph *g = tiny_graph(SN_RECOMPUTE_NONE, 0, NULL);
    sn_graph *out;
    sn_recompute_stats cs;
    sn_target t = sn_target_cpu();
    ck_assert_int_eq(sn_pass_recompute(g, SN_RECOMPUTE_BUDGET, 0, &t, &out, &cs, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "needs a memory budget (give --mem)"), "%s", e.msg);
    sn_graph_free(g);
    sn_gpt2_config c;
    sn_gpt2 m;
    g = sn_graph_new();
    ck_assert(sn_gpt2_config_find("tiny", &c) && !sn_gpt2_build(g, &c, 1, 8, &m, &e));
    ck_assert_int_eq(sn_pass_recompute(g, SN_RECOMPUTE_BLOCK, 0, &t, &out, &cs, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "no backward part"), "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.dump_after = "checkpoint";
    o.backward = true;
    ck_assert_int_eq(sn_compile(g, &o, NULL, NULL, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "no checkpoint policy is on"), "%s", e.msg);
    ck_assert_int_eq(sn_recompute_policy_parse("block"), SN_RECOMPUTE_BLOCK);
    ck_assert_int_eq(sn_recompute_policy_parse("blocks"), -1);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("recompute");
    TCase *tc = tcase_create("recompute");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, finds_blocks);
    tcase_add_test(tc, recompute_is_bit_identical);
    tcase_add_test(tc, schedule_is_bit_identical);
    tcase_add_test(tc, schedule_lowers_a_peak);
    tcase_add_test(tc, gpt2_arenas);
    tcase_add_test(tc, tied_head_gradient_in_place);
    tcase_add_test(tc, chunked_logits_match_whole);
    tcase_add_test(tc, chunked_logits_then_recompute);
    tcase_add_test(tc, chunked_logits_live_one_at_a_time);
    tcase_add_test(tc, chunked_logits_planted_overlap);
    tcase_add_test(tc, chunked_logits_plan);
    tcase_add_test(tc, chunked_logits_refusals);
    tcase_add_test(tc, plan_is_the_program);
    tcase_add_test(tc, plan_refusals);
    tcase_add_test(tc, errors_say_what_to_do);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
