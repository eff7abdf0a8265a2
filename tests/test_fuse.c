/* test_fuse.c: the passes after autodiff: which nodes the fuse pass materialises, how it folds
 * views into strided accesses, the kernel count of a GPT-2 layer, and the memory plan's
 * invariants (no two live values share bytes; the arena is far smaller than no reuse). */
#include <stdlib.h>
#include <string.h>

#include "../models/gpt2.h"
#include "../passes/pipeline.h"
#include "../passes/program.h"
#include "harness.h"

static sn_program *compile(sn_graph *g) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_fuse(g, &p, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_memplan(p, &e) == SN_OK, "%s", e.msg);
    return p;
}

static sn_graph *gpt2_training(const char *name, int layers, int B, int T) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(name, &c));
    if (layers) c.n_layer = layers;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults(); /* attention fused, vocabulary padded */
    o.backward = true;
    ck_assert_msg(sn_pipeline_run(&g, &o, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* gelu(x @ w + b) * 2: the matmul is a GEMM; add, gelu and scale are one pointwise kernel
 * reading the GEMM's output and b broadcast along the rows (stride 0). */
START_TEST(pointwise_chain_is_one_kernel) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 8));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(8, 6), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(6), SN_INIT_ZEROS, 0);
    sn_node *y = sn_scale(g, sn_gelu(g, sn_add(g, sn_matmul(g, x, w), b)), 2.0f);
    sn_graph_add_output(g, y);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 2);
    ck_assert_int_eq(p->kernels[0]->kind, SN_KER_GEMM);
    const sn_kernel *k = p->kernels[1];
    ck_assert_int_eq(k->kind, SN_KER_POINTWISE);
    ck_assert_int_eq(k->n_instr, 3);
    ck_assert_int_eq(k->n_access, 2);
    ck_assert_ptr_eq(k->args[0], y);
    int bias = k->args[k->access[0].arg] == b ? 0 : 1;
    ck_assert_ptr_eq(k->args[k->access[bias].arg], b);
    ck_assert_int_eq(k->access[bias].stride[0], 0);
    ck_assert_int_eq(k->access[bias].stride[1], 1);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* A permuted, sliced view read by a pointwise op folds into one strided access. */
START_TEST(views_fold_into_accesses) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 3, 10));
    sn_node *v = sn_permute(g, sn_slice(g, x, 2, 4, 8), (const int[]){0, 2, 1}); /* (2, 4, 3) */
    sn_node *y = sn_exp(g, v);
    sn_graph_add_output(g, y);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 1);
    const sn_kernel *k = p->kernels[0];
    ck_assert_int_eq(k->n_access, 1);
    const sn_access *a = &k->access[0];
    ck_assert_int_eq(a->offset, 4);
    ck_assert_int_eq(a->stride[0], 30);
    ck_assert_int_eq(a->stride[1], 1);
    ck_assert_int_eq(a->stride[2], 10);
    ck_assert_int_eq(p->value_of[v->id], -1); /* the view has no buffer */
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* No two arena values whose live ranges overlap share a byte; aliases follow their root. */
static void check_plan(const sn_program *p) {
    for (int i = 0; i < p->n_values; i++) {
        const sn_value *a = &p->values[i];
        if (a->persistent || a->alias >= 0) continue;
        ck_assert_msg(a->first >= 0, "value of %%%d is never written", a->node->id);
        ck_assert(a->offset % 64 == 0 && a->offset + a->bytes <= p->arena_bytes);
        for (int j = i + 1; j < p->n_values; j++) {
            const sn_value *b = &p->values[j];
            if (b->persistent || b->alias >= 0) continue;
            bool live = a->first <= b->last && b->first <= a->last;
            bool bytes = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            ck_assert_msg(!(live && bytes), "values of %%%d and %%%d are live together in the same bytes",
                          a->node->id, b->node->id);
        }
    }
}

START_TEST(memory_plan_gpt2) {
    sn_graph *g = gpt2_training("gpt2", 0, 4, 64);
    sn_program *p = compile(g);
    check_plan(p);
    ck_assert_msg(2 * p->arena_bytes <= p->sum_bytes, "arena %lld bytes is more than half of %lld",
                  (long long)p->arena_bytes, (long long)p->sum_bytes);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The kernels one more transformer layer adds to the training program, by kind. */
START_TEST(kernels_per_gpt2_layer) {
    int counts[2][SN_KER_KIND_COUNT] = {{0}}, total[2];
    for (int l = 0; l < 2; l++) {
        sn_graph *g = gpt2_training("tiny", l + 1, 2, 16);
        sn_program *p = compile(g);
        total[l] = p->n_kernels;
        for (int k = 0; k < p->n_kernels; k++) counts[l][p->kernels[k]->kind]++;
        sn_program_free(p);
        sn_graph_free(g);
    }
    int per[SN_KER_KIND_COUNT];
    for (int i = 0; i < SN_KER_KIND_COUNT; i++) per[i] = counts[1][i] - counts[0][i];
    printf("test_fuse: one GPT-2 layer = %d kernels (%d pointwise, %d row, %d reduce, %d gemm, "
           "%d attention)\n", total[1] - total[0], per[SN_KER_POINTWISE], per[SN_KER_ROW],
           per[SN_KER_REDUCE], per[SN_KER_GEMM], per[SN_KER_ATTENTION]);
    ck_assert_int_eq(per[SN_KER_GEMM], 12);      /* 4 linear layers x (forward, dx, dw) */
    ck_assert_int_eq(per[SN_KER_ATTENTION], 4);  /* forward (o and lse), dq, dk, dv */
    ck_assert_int_eq(total[1] - total[0], 45); /* with attention fused */
}
END_TEST

int main(void) {
    Suite *s = suite_create("fuse");
    TCase *tc = tcase_create("fuse");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pointwise_chain_is_one_kernel);
    tcase_add_test(tc, views_fold_into_accesses);
    tcase_add_test(tc, memory_plan_gpt2);
    tcase_add_test(tc, kernels_per_gpt2_layer);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
