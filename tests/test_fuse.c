/* test_fuse.c: the passes after autodiff: which nodes the fuse pass materialises, how it folds
 * views into strided accesses, which nodes end up in one kernel (multi-output pointwise
 * kernels, row ops with their prologue and epilogue), the kernel count of a GPT-2 layer, and the
 * memory plan's invariants (no two live values share bytes; the arena is far smaller than no
 * reuse). test_fuse_kernels.c runs the fused kernels. */
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "harness.h"

/* g's program for t (NULL: the CPU). */
static sn_program *compile_for(sn_graph *g, const sn_target *t) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    /* the fuse pass's kernels, not joined with their neighbours (test_fuse_kernels joins) */
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = t, .keep_siblings = true}, &p,
                                      NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

/* The CPU target with the GEMM's GELU epilogues (as CUDA's; the CPU's own keeps the GELU in
 * pointwise kernels): what the fusion tests look at. */
static sn_program *compile(sn_graph *g) {
    sn_target t = sn_target_cpu();
    t.gelu_unfused = false;
    return compile_for(g, &t);
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
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
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

/* The kernel that stores node n (among its outputs), or NULL. */
static const sn_kernel *kernel_of(const sn_program *p, const sn_node *n, int *out) {
    for (int k = 0; k < p->n_kernels; k++)
        for (int o = 0; o < p->kernels[k]->n_out; o++)
            if (p->kernels[k]->args[o] == n) {
                if (out) *out = o;
                return p->kernels[k];
            }
    return NULL;
}

/* Whether kernel k computes node n (an instruction of it). */
static bool computes(const sn_kernel *k, const sn_node *n) {
    for (int i = 0; i < k->n_instr; i++)
        if (k->instr[i].node == n) return true;
    return k->anchor == n;
}

static bool reads(const sn_kernel *k, const sn_node *n) {
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i] == n) return true;
    return false;
}

/* h = x @ w + b feeds gelu(h) and, later, gelu_bwd(h, dy): one kernel computes h and gelu,
 * storing both (h for the later reader), instead of two. */
START_TEST(multi_output_pointwise) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 8));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(8, 6), SN_INIT_NORMAL, 1);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(6, 6), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(6), SN_INIT_ZEROS, 0);
    sn_node *h = sn_add(g, sn_matmul(g, x, w), b);
    sn_node *y = sn_gelu(g, h);
    sn_node *dy = sn_matmul(g, y, w2);
    sn_node *dh = sn_gelu_bwd(g, h, dy);
    sn_graph_add_output(g, dh);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 4); /* gemm, add+gelu, gemm, gelu_bwd */
    int o;
    const sn_kernel *k = kernel_of(p, y, &o);
    ck_assert_int_eq(k->kind, SN_KER_POINTWISE);
    ck_assert_int_eq(o, 0); /* the root first */
    ck_assert_ptr_eq(kernel_of(p, h, &o), k);
    ck_assert_int_eq(o, 1);
    ck_assert_int_eq(k->n_out, 2);
    ck_assert_ptr_eq(k->instr[k->store[1]].node, h);
    ck_assert_ptr_eq(k->instr[k->store[0]].node, y);
    ck_assert_int_eq(k->n_instr, 2);
    const sn_kernel *kb = kernel_of(p, dh, NULL);
    ck_assert(kb != k && reads(kb, h));
    ck_assert_int_ge(p->value_of[h->id], 0);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* A pointwise node joins only the kernel of its earliest reader, and only when that reader
 * can compute it: here the earliest reader is a matmul, so h stays a kernel of its own. */
START_TEST(earliest_reader_decides) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 6));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(6, 6), SN_INIT_NORMAL, 1);
    sn_node *h = sn_exp(g, x);
    sn_node *m = sn_matmul(g, h, w);
    sn_node *y = sn_add(g, sn_tanh(g, h), m);
    sn_graph_add_output(g, y);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 3); /* exp, gemm, tanh+add */
    const sn_kernel *k = kernel_of(p, h, NULL);
    ck_assert_int_eq(k->n_out, 1);
    ck_assert(!computes(kernel_of(p, y, NULL), h));
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The residual x1 = x + (y + c) is the prologue of layernorm(x1) and a second output of its
 * kernel (a later node reads it): one ROW kernel, the adds before the row op. x2 = x1 + m is
 * the GEMM's ACCUM epilogue (x1 its C): no add kernel. */
START_TEST(residual_into_layernorm) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 5, 16));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(3, 5, 16));
    sn_node *c = sn_param(g, "c", SN_F32, SN_SHAPE(16), SN_INIT_ZEROS, 0);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(16), SN_INIT_ONES, 0);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(16), SN_INIT_ZEROS, 0);
    sn_node *x1 = sn_add(g, x, sn_add(g, y, c));
    sn_node *ln = sn_layernorm(g, x1, w, b, 1e-5f);
    sn_node *m = sn_matmul(g, ln, sn_param(g, "p", SN_F32, SN_SHAPE(16, 16), SN_INIT_NORMAL, 1));
    sn_node *x2 = sn_add(g, x1, m);
    sn_graph_add_output(g, x2);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 2); /* add+add+layernorm, gemm + x1 */
    int o;
    const sn_kernel *k = kernel_of(p, ln, &o);
    ck_assert_int_eq(k->kind, SN_KER_ROW);
    ck_assert_ptr_eq(k->anchor, ln);
    ck_assert_int_eq(o, 0);
    ck_assert_ptr_eq(kernel_of(p, x1, &o), k);
    ck_assert_int_eq(o, 1);
    ck_assert_int_eq(k->n_instr, 3);
    ck_assert_int_eq(k->row.instr, 2); /* the adds come first: a prologue */
    ck_assert_ptr_eq(k->instr[k->store[1]].node, x1);
    ck_assert_int_eq(k->instr[k->row.instr].in[0].kind, SN_REF_INSTR);
    ck_assert(reads(k, x) && reads(k, y) && reads(k, c) && reads(k, w) && reads(k, b));
    ck_assert_int_eq(k->n_items, 15);
    const sn_kernel *k2 = kernel_of(p, x2, NULL);
    ck_assert(reads(k2, x1));
    ck_assert(k2->kind == SN_KER_GEMM && k2->gemm.epilogue == SN_EPI_NONE && k2->gemm.accum &&
              k2->anchor == m);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* dx = g + layernorm_bwd(x, w, dy): the residual gradient is the epilogue of the row op, whose
 * own result then needs no buffer. */
START_TEST(layernorm_bwd_into_residual) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(6, 16));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(6, 16));
    sn_node *gr = sn_input(g, "g", SN_F32, SN_SHAPE(6, 16));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(16), SN_INIT_ONES, 0);
    sn_node *lb = sn_layernorm_bwd(g, x, w, dy, 1e-5f);
    sn_node *dx = sn_add(g, gr, lb);
    sn_graph_add_output(g, dx);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 1);
    const sn_kernel *k = p->kernels[0];
    ck_assert_int_eq(k->kind, SN_KER_ROW);
    ck_assert_ptr_eq(k->anchor, lb);
    ck_assert_ptr_eq(k->args[0], dx);
    ck_assert_int_eq(k->n_out, 1);
    ck_assert_int_eq(k->n_instr, 2);
    ck_assert_int_eq(k->row.instr, 0); /* the add comes after: an epilogue */
    ck_assert_ptr_eq(k->instr[k->store[0]].node, dx);
    ck_assert_int_eq(p->value_of[lb->id], -1);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* softmax between a prologue (scale, add of a per-row bias) and an epilogue (mul); softmax_bwd
 * with both operands computed; cross_entropy_bwd with a scaled epilogue; the written-out
 * attention's scale before causal_mask (forward) and after it (backward). */
START_TEST(row_ops_with_neighbours) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 3, 10));
    sn_node *r = sn_input(g, "r", SN_F32, SN_SHAPE(4, 3, 1));
    sn_node *s = sn_softmax(g, sn_add(g, sn_scale(g, x, 0.5f), r));
    sn_node *y = sn_mul(g, s, x);
    sn_node *sb = sn_softmax_bwd(g, sn_exp(g, x), sn_neg(g, sn_tanh(g, x)));
    sn_node *lg = sn_input(g, "logits", SN_F32, SN_SHAPE(12, 10));
    sn_node *tg = sn_input(g, "t", SN_I32, SN_SHAPE(12));
    sn_node *ce = sn_scale(g, sn_cross_entropy_bwd(g, lg, tg, sn_scalar(g, SN_F32, 1), -1), 3);
    sn_node *cm = sn_causal_mask(g, sn_scale(g, x, 0.25f));
    sn_node *cb = sn_scale(g, sn_causal_mask_fill(g, x, 0), 0.25f);
    sn_node *outs[] = {y, sb, ce, cm, cb};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 5);
    const sn_kernel *k = kernel_of(p, y, NULL);
    ck_assert(k && k->kind == SN_KER_ROW && k->anchor == s);
    ck_assert_int_eq(k->row.instr, 2); /* scale, add | softmax | mul */
    ck_assert_int_eq(k->n_instr, 4);
    ck_assert_int_eq(k->access[k->instr[1].in[1].index].stride[2], 0); /* r along the row */
    k = kernel_of(p, sb, NULL);
    ck_assert(k != kernel_of(p, y, NULL) && k->kind == SN_KER_ROW && k->anchor == sb);
    ck_assert_int_eq(k->row.instr, 3); /* exp, tanh, neg | softmax_bwd */
    ck_assert_int_eq(k->instr[3].in[0].kind, SN_REF_INSTR);
    ck_assert_int_eq(k->instr[3].in[1].kind, SN_REF_INSTR);
    k = kernel_of(p, ce, NULL);
    ck_assert(k->kind == SN_KER_ROW && k->anchor->op == SN_OP_CROSS_ENTROPY_BWD && k->row.instr == 0);
    k = kernel_of(p, cm, NULL);
    ck_assert(k->kind == SN_KER_ROW && k->anchor == cm && k->row.instr == 1);
    k = kernel_of(p, cb, NULL);
    ck_assert(k->kind == SN_KER_ROW && k->anchor->op == SN_OP_CAUSAL_MASK && k->row.instr == 0);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* What stays apart: a row op read by another row op keeps its own kernel (a reduction reading
 * an epilogue reads its buffer); cross_entropy stores nothing but its loss, so a value that a
 * later kernel reads is not computed in its prologue. */
START_TEST(what_does_not_fuse) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 10));
    sn_node *s = sn_softmax(g, sn_causal_mask(g, x));
    sn_node *m = sn_sum(g, sn_exp(g, sn_softmax(g, x)), 1, false);
    sn_node *tg = sn_input(g, "t", SN_I32, SN_SHAPE(4));
    sn_node *e = sn_exp(g, x);
    sn_node *loss = sn_cross_entropy(g, e, tg, -1);
    sn_node *outs[] = {s, m, loss, sn_scale(g, e, 2)};
    for (int i = 0; i < 4; i++) sn_graph_add_output(g, outs[i]);
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 8); /* causal_mask, softmax | softmax + exp, sum | exp, ce
                                          (partial sums, their mean), scale */
    ck_assert(kernel_of(p, s, NULL)->anchor == s && kernel_of(p, s, NULL)->n_instr == 0);
    ck_assert_int_eq(kernel_of(p, m, NULL)->kind, SN_KER_REDUCE);
    ck_assert(!computes(kernel_of(p, loss, NULL), e));
    ck_assert_int_eq(kernel_of(p, loss, NULL)->n_instr, 0);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Eight values that later kernels read, all joining the kernel of their sum, would make it
 * write 9 buffers and read 8 (16 at most): it is built again without them. */
START_TEST(overflow_drops_extra_outputs) {
    sn_graph *g = sn_graph_new();
    sn_node *e[8], *sum = NULL;
    for (int i = 0; i < 8; i++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", i);
        e[i] = sn_exp(g, sn_input(g, name, SN_F32, SN_SHAPE(4, 5)));
        sum = sum ? sn_add(g, sum, e[i]) : e[i];
    }
    sn_graph_add_output(g, sum);
    for (int i = 0; i < 8; i++) sn_graph_add_output(g, sn_tanh(g, e[i]));
    sn_program *p = compile(g);
    const sn_kernel *k = kernel_of(p, sum, NULL);
    ck_assert_int_eq(k->n_out, 1);
    ck_assert_int_eq(k->n_in, 8);
    ck_assert_int_eq(p->n_kernels, 1 + 8 + 8);
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
    /* 23 a layer; embedding, ln_f, logits, loss, their backwards and the embeddings' gradients
     * (ln_f's weight gradient in two kernels, PARTIAL and FINISH, its dx (unfused) apart; the
     * loss and its gradient in two, the classifier and the loss's FINISH; the embedding's,
     * BUCKET and ROWS, the LM head's weight gradient added to it by its GEMM: ACCUM) */
    ck_assert_int_eq(p->n_kernels, 12 * 21 + 14);
    int epi[SN_EPI_COUNT] = {0}, accums = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        if (ker->kind != SN_KER_GEMM) continue;
        epi[ker->gemm.epilogue]++;
        accums += ker->gemm.accum;
        if (ker->gemm.epilogue == SN_EPI_BIAS) { /* the qkv GEMMs: args y, A, B, b */
            ck_assert(ker->args[0]->op == SN_OP_ADD && ker->args[3]->rank == 1 &&
                      (ker->args[0]->in[0] == ker->anchor || ker->args[0]->in[1] == ker->anchor));
            ck_assert_int_eq(ker->args[3]->shape[0], 3 * 768);
        }
        if (ker->gemm.epilogue == SN_EPI_GELU_AUX_BIAS) { /* c_fc: args gelu, its input, A, B, b */
            const sn_node *s = ker->args[1];
            ck_assert(ker->args[0]->op == SN_OP_GELU && ker->args[0]->in[0] == s &&
                      s->op == SN_OP_ADD && ker->args[4]->shape[0] == 4 * 768);
            ck_assert(p->value_of[ker->anchor->id] < 0); /* no f32 product stored */
        }
        if (ker->gemm.epilogue == SN_EPI_DGELU) { /* c_fc's dX: args dh, dg, W_proj, h */
            ck_assert(ker->args[0]->op == SN_OP_GELU_BWD && ker->args[0]->in[1] == ker->anchor &&
                      ker->args[0]->in[0] == ker->args[3]);
            ck_assert(ker->args[3]->op == SN_OP_ADD); /* the forward's aux */
        }
    }
    ck_assert_int_eq(epi[SN_EPI_BIAS], 12);
    ck_assert_int_eq(epi[SN_EPI_GELU_AUX_BIAS], 12);
    ck_assert_int_eq(epi[SN_EPI_DGELU], 12);
    ck_assert_int_eq(epi[SN_EPI_GELU_BIAS], 0); /* the backward reads every GELU's input */
    ck_assert_int_eq(accums, 1);                   /* wte's gradient */
    /* reuse: the peak is at most 61% of every arena value added up (half before the copies
     * around attention and the qkv bias went: they shrank the sum, not the peak, 351.89 MiB;
     * 55% before the embedding backward's (V, C) part of wte's gradient was written in place
     * into that gradient, the LM head's GEMM adding to it: the sum 495.6 -> 341.1 MB, the peak
     * 208.0 -> 205.8 MB) */
    ck_assert_msg(100 * p->arena_bytes <= 61 * p->sum_bytes, "arena %lld bytes is more than 61%% "
                  "of %lld", (long long)p->arena_bytes, (long long)p->sum_bytes);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* dq, dk, dv concatenated into the (B, T, 3C) QKV gradient (an add of pads, as autodiff makes
 * it): the attention kernels write their slices of it through output accesses, and no kernel
 * concatenates; not when one of them is also read elsewhere (here: an output). */
static sn_program *qkv_gradient(bool dk_out, sn_node **dqkv_out) {
    enum { B = 2, H = 2, T = 8, D = 4, C = H * D };
    sn_graph *g = sn_graph_new();
    sn_node *qkv = sn_input(g, "qkv", SN_F32, SN_SHAPE(B, T, 3 * C));
    sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(B, T, C));
    sn_node *part[3], *head[4];
    ck_assert_int_eq(sn_split(g, qkv, 2, 3, part), 0);
    static const int perm[] = {0, 2, 1, 3};
    for (int i = 0; i < 4; i++)
        head[i] = sn_permute(g, sn_reshape(g, i < 3 ? part[i] : dy, SN_SHAPE(B, T, H, D)), perm);
    sn_node *q = head[0], *k = head[1], *v = head[2], *dout = head[3];
    sn_node *lse = sn_attention_lse(g, q, k, 0.5f);
    sn_node *o = sn_attention(g, q, k, v, lse, 0.5f);
    sn_node *grads[] = {sn_attention_bwd_q(g, q, k, v, o, dout, lse, 0.5f),
                        sn_attention_bwd_k(g, q, k, v, o, dout, lse, 0.5f),
                        sn_attention_bwd_v(g, q, k, v, o, dout, lse, 0.5f)};
    sn_node *dqkv = NULL;
    for (int i = 2; i >= 0; i--) {
        sn_node *back = sn_reshape(g, sn_permute(g, grads[i], perm), SN_SHAPE(B, T, C));
        sn_node *padded = sn_pad(g, back, 2, i * C, 3 * C);
        dqkv = dqkv ? sn_add(g, dqkv, padded) : padded;
    }
    sn_graph_add_output(g, o);
    sn_graph_add_output(g, dqkv);
    if (dk_out) sn_graph_add_output(g, grads[1]);
    *dqkv_out = dqkv;
    return compile(g);
}

START_TEST(attention_writes_into_concatenation) {
    sn_node *dqkv;
    sn_program *p = qkv_gradient(false, &dqkv);
    ck_assert_int_eq(p->n_kernels, 3); /* forward; dq; dk and dv: no concatenation kernel */
    const sn_kernel *kq = p->kernels[1], *kkv = p->kernels[2];
    ck_assert(kq->args[0] == dqkv && kq->n_access == 6 + 1);
    ck_assert(kkv->args[0] == dqkv && kkv->args[1] == dqkv && kkv->n_access == 6 + 2);
    /* (B, H, T, D) into (B, T, 3C): dq at 0, dk at C, dv at 2C; heads D apart, rows 3C */
    const sn_access *a = &kkv->access[6 + 1];
    ck_assert(a->offset == 16 && a->stride[0] == 8 * 24 && a->stride[1] == 4 && a->stride[2] == 24 &&
              a->stride[3] == 1);
    bool part[2 * 8 * 24];
    ck_assert(sn_kernel_out_part(kq, 0, part));
    int n = 0;
    for (int i = 0; i < 2 * 8 * 24; i++) n += part[i];
    ck_assert(n == 2 * 8 * 8 && part[0] && !part[8] && part[24]);
    ck_assert(p->value_of[dqkv->id] >= 0 && p->value_of[dqkv->in[0]->id] < 0);
    sn_graph *g = (sn_graph *)p->g;
    sn_program_free(p);
    sn_graph_free(g);
    p = qkv_gradient(true, &dqkv);
    /* dk is an output: the three attention outputs are copied to (B, T, H, D) and concatenated */
    ck_assert_int_eq(p->n_kernels, 3 + 3 + 1);
    ck_assert(p->kernels[6]->args[0] == dqkv && p->kernels[1]->n_access == 6);
    g = (sn_graph *)p->g;
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Two attention_bwd_v of one attention_bwd_k's inputs (a graph tools/fuzz's compile harness
 * made, session 21): the dk/dv kernel writes the first, the second has a kernel of its own;
 * before, both counted as the dk/dv kernel's and the second was computed by none (fuse's order
 * check asserted). */

/* Inputs q, k, v and dout (1, 2, 8, 4) of g, for the attention kernels' tests. */
static void attention_inputs(sn_graph *g, sn_node **q, sn_node **k, sn_node **v, sn_node **dout) {
    *q = sn_input(g, "q", SN_F32, SN_SHAPE(1, 2, 8, 4));
    *k = sn_input(g, "k", SN_F32, SN_SHAPE(1, 2, 8, 4));
    *v = sn_input(g, "v", SN_F32, SN_SHAPE(1, 2, 8, 4));
    *dout = sn_input(g, "dout", SN_F32, SN_SHAPE(1, 2, 8, 4));
}

/* A column sum of an input or a parameter (no producer: nothing for the colsum host to look
 * through for a widening cast) is a kernel of its own: fuse read the missing producer's
 * operand and crashed (found by test_cuda_rows's cpu_reduce_by_column, session 22). */
START_TEST(column_sum_of_an_input) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(40, 77));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(6, 5), SN_INIT_NORMAL, 1);
    sn_graph_add_output(g, sn_sum(g, x, 0, false));
    sn_graph_add_output(g, sn_sum(g, w, 0, false));
    sn_program *p = compile(g);
    ck_assert_int_eq(p->n_kernels, 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

START_TEST(second_dv_has_its_own_kernel) {
    sn_graph *g = sn_graph_new();
    sn_node *q, *k, *v, *dout;
    attention_inputs(g, &q, &k, &v, &dout);
    sn_node *lse = sn_attention_lse(g, q, k, 0.5f);
    sn_node *o = sn_attention(g, q, k, v, lse, 0.5f);
    sn_node *dk = sn_attention_bwd_k(g, q, k, v, o, dout, lse, 0.5f);
    sn_node *dv1 = sn_attention_bwd_v(g, q, k, v, o, dout, lse, 0.5f);
    sn_node *dv2 = sn_attention_bwd_v(g, q, k, v, o, dout, lse, 0.5f);
    sn_graph_add_output(g, dk);
    sn_graph_add_output(g, dv1);
    sn_graph_add_output(g, sn_exp(g, dv2));
    sn_program *p = compile(g);
    int writes[2] = {0, 0};
    for (int i = 0; i < p->n_kernels; i++)
        for (int a = 0; a < p->kernels[i]->n_out; a++) {
            writes[0] += p->kernels[i]->args[a] == dv1;
            writes[1] += p->kernels[i]->args[a] == dv2;
        }
    ck_assert_int_eq(writes[0], 1);
    ck_assert_int_eq(writes[1], 1);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* An attention_lse whose attention is dead (nothing reads it: fuzz_compile made a dk that read q
 * for o) gets a kernel of its own, written before the dk kernel that reads it; before, the dead
 * attention's kernel was to write it and no kernel did (fuse's order check fired). */
START_TEST(lse_of_a_dead_attention) {
    sn_graph *g = sn_graph_new();
    sn_node *q, *k, *v, *dout;
    attention_inputs(g, &q, &k, &v, &dout);
    sn_node *lse = sn_attention_lse(g, q, k, 0.5f);
    sn_attention(g, q, k, v, lse, 0.5f); /* dead */
    sn_node *dk = sn_attention_bwd_k(g, q, k, v, q, dout, lse, 0.5f);
    sn_graph_add_output(g, lse);
    sn_graph_add_output(g, dk);
    sn_program *p = compile(g);
    int writes = 0, at = -1, reads = -1;
    for (int i = 0; i < p->n_kernels; i++) {
        for (int a = 0; a < p->kernels[i]->n_out; a++)
            if (p->kernels[i]->args[a] == lse) writes++, at = i;
        if (p->kernels[i]->anchor == dk) reads = i;
    }
    ck_assert_int_eq(writes, 1);
    ck_assert_int_lt(at, reads);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The kernels one more transformer layer adds to the training program, by kind. */
/* The row-op table (program.c) covers exactly the SN_K_ROW ops, and every kernel of a GPT-2
 * training program has the work split sn_kernel_work gives (the one function fuse and the
 * code generators share). */
START_TEST(row_facts_and_work_split) {
    int rows = 0;
    for (int op = 0; op < SN_OP_COUNT; op++) {
        const sn_row_facts *f = sn_row_facts_of((sn_op)op);
        ck_assert_msg(!f == (sn_op_kind((sn_op)op) != SN_K_ROW), "%s", sn_op_name((sn_op)op));
        if (!f) continue;
        rows++;
        ck_assert_msg(f->per_element & 1, "%s: the first operand is per element", sn_op_name((sn_op)op));
        ck_assert_msg(!(f->serial && f->result_per_element), "%s", sn_op_name((sn_op)op));
    }
    ck_assert_int_eq(rows, 11);
    ck_assert(sn_row_facts_of(SN_OP_CROSS_ENTROPY)->serial && !sn_row_facts_of(SN_OP_SOFTMAX)->serial);
    sn_graph *g = gpt2_training("tiny", 0, 2, 16);
    sn_program *p = compile(g);
    int serial = 0, colsum_kernels = 0, colsums = 0, finish = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        int64_t n;
        bool s;
        sn_kernel_work(ker, &n, &s);
        ck_assert_msg(n == ker->n_items && s == ker->serial, "%s", ker->name);
        ck_assert_int_ge(n, 1);
        serial += ker->kind == SN_KER_ROW && s;
        int nc = ker->kind == SN_KER_ROW ? ker->row.n_colsum : 0; /* (the union's row part) */
        colsum_kernels += nc > 0;
        colsums += nc;
        if (nc) /* the norm backward pair (kernel.h): an item a chunk */
            ck_assert_int_eq(n, sn_sum_chunks(ker) * (ker->row.pair ? 1 : 1 + sn_colsum_tiles(ker)));
        if (ker->kind == SN_KER_ROW && (sn_row_facts_of(ker->anchor->op)->serial || ker->anchor2) &&
            ker->stage != SN_SUM_FINISH) { /* two stages */
            ck_assert_int_eq(ker->stage, SN_SUM_PARTIAL);
            ck_assert_int_eq(p->kernels[k + 1]->stage, SN_SUM_FINISH);
            ck_assert_int_eq(p->kernels[k + 1]->scratch, ker->scratch);
            ck_assert(p->values[ker->scratch].node == NULL);
            ck_assert_int_eq(p->values[ker->scratch].bytes,
                             4 * sn_sum_chunks(ker) * sn_sum_width(ker));
            ck_assert_int_eq(p->values[ker->scratch].first, k);
            ck_assert_int_eq(p->values[ker->scratch].last, k + 1);
            finish++;
            k++;
        }
        if (ker->kind == SN_KER_GATHER && ker->anchor->op == SN_OP_EMBEDDING_BWD) { /* two too */
            const sn_kernel *rows = p->kernels[k + 1];
            ck_assert_int_eq(ker->stage, SN_GATHER_BUCKET);
            ck_assert(ker->n_in == 1 && ker->args[1] == ker->anchor->in[0] && !sn_kernel_writes(ker, 0));
            ck_assert_int_eq(n, sn_gather_chunks(ker));
            ck_assert(rows->kind == SN_KER_GATHER && rows->stage == SN_GATHER_ROWS &&
                      rows->anchor == ker->anchor && rows->n_in == 2 && sn_kernel_writes(rows, 0));
            ck_assert_int_eq(rows->scratch, ker->scratch);
            ck_assert(p->values[ker->scratch].node == NULL);
            ck_assert_int_eq(p->values[ker->scratch].bytes, sn_kernel_scratch_bytes(ker));
            ck_assert_int_eq(p->values[ker->scratch].first, k);
            ck_assert_int_eq(p->values[ker->scratch].last, k + 1);
            finish++;
            k++;
        }
    }
    ck_assert_int_eq(finish, 1 + 1 + 2 * 2 + 1); /* the loss (the classifier's), ln_f, 2 a layer; embedding_bwd */
    int classifiers = 0; /* the loss and its gradient: one pass, a partial a row */
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        if (ker->kind != SN_KER_ROW || !ker->anchor2) continue;
        classifiers++;
        ck_assert_int_eq(ker->anchor->op, SN_OP_CROSS_ENTROPY_BWD);
        ck_assert_int_eq(ker->anchor2->op, SN_OP_CROSS_ENTROPY);
        ck_assert_int_eq(ker->n_items, 2 * 16);
        ck_assert_int_eq(sn_sum_chunks(ker), 2 * 16);
        ck_assert(sn_kernel_writes(ker, 0));
        const sn_kernel *f = p->kernels[k + 1];
        ck_assert(f->stage == SN_SUM_FINISH && f->anchor == ker->anchor2 && f->anchor2 == ker->anchor);
        ck_assert(f->args[0] == ker->anchor2 && f->n_in == 0 && f->n_items == 1);
        k++;
    }
    ck_assert_int_eq(classifiers, 1);
    ck_assert_int_eq(serial, 0); /* the loss: PARTIAL and FINISH */
    /* ln_1, ln_2 weight grads per layer and ln_f's carry the column sums: each its dbeta and
     * the bias gradient of the residual gradient it follows (the projection before it; none
     * before layer 0's ln_1), ln_2's the fc bias, ln_1's the qkv bias */
    ck_assert_int_eq(colsum_kernels, 1 + 2 * 2);
    ck_assert_int_eq(colsums, 2 + 2 * 6 - 1);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

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
    ck_assert_int_eq(per[SN_KER_ATTENTION], 3);  /* forward (o and lse), dq, dk and dv */
    /* none: the qkv bias is the GEMM's epilogue, c_fc's bias and GELU too (GELU_AUX_BIAS), the
     * GELU's gradient its dX GEMM's (DGELU); attention writes o straight into (B, T, C), reads
     * q, k, v and dout in place (4 copies fewer) and writes dq, dk, dv into the qkv gradient's
     * concatenation (3 permutes and the concatenation fewer) */
    ck_assert_int_eq(per[SN_KER_POINTWISE], 0);
    /* 2 x (residual + layernorm), 2 x the norm backward pair (kernel.h: layernorm_bwd +
     * residual gradient with layernorm_bwd_w's partial sums over chunks of rows) and its FINISH
     * (their sums) */
    ck_assert_int_eq(per[SN_KER_ROW], 6);
    /* 4 bias gradients, 2 layernorm bias gradients: column sums of the weight-gradient kernels */
    ck_assert_int_eq(per[SN_KER_REDUCE], 0);
    ck_assert_int_eq(total[1] - total[0], 21); /* with attention fused (23 before the GELU
                                                  epilogues, 25 before the norm backward pair,
                                                  45 before fusing around
                                                  rows, 40 before dk and dv shared a kernel, 39
                                                  before attention read q, k, v, dout in place,
                                                  35 before the column sums joined, 29 before
                                                  dq, dk, dv were written in place, 25 before
                                                  the qkv bias was the GEMM's epilogue; 24
                                                  before the norm weight gradients took two
                                                  kernels each to use the whole GPU, 26 before
                                                  the forward wrote o into (B, T, C), 25
                                                  before the GELU and its gradient were
                                                  GEMM epilogues) */
    /* on CUDA each FINISH but the step's last runs in the next norm backward pair's launch
     * (kernel.h: tail; passes/join_finish.c): 19 launches a layer, 2 of them carrying the
     * FINISH of the pair before; at this size (2 x 16 rows) the GELU's gradient is a pointwise
     * kernel of its own (target.h dgelu_min_elems: small DGELU GEMMs were slower on an H200),
     * 20, and 19 with the DGELU epilogue at every size */
    sn_target cuda = sn_target_cuda(90);
    int launches[2], joined[2];
    for (int l = 0; l < 2; l++) {
        sn_graph *g = gpt2_training("tiny", l + 1, 2, 16);
        sn_program *p = compile_for(g, &cuda);
        launches[l] = p->n_kernels;
        sn_program_free(p);
        sn_graph_free(g);
    }
    ck_assert_int_eq(launches[1] - launches[0], 20);
    cuda.dgelu_min_elems = 0;
    for (int l = 0; l < 2; l++) {
        sn_graph *g = gpt2_training("tiny", l + 1, 2, 16);
        sn_program *p = compile_for(g, &cuda);
        launches[l] = p->n_kernels;
        joined[l] = 0;
        for (int k = 0; k < p->n_kernels; k++) joined[l] += p->kernels[k]->tail != NULL;
        sn_program_free(p);
        sn_graph_free(g);
    }
    ck_assert_int_eq(joined[0], 2); /* ln_f's pair's FINISH into ln_2's pair's, ln_2's into ln_1's */
    ck_assert_int_eq(joined[1] - joined[0], 2);
    ck_assert_int_eq(launches[1] - launches[0], 19);
    ck_assert_int_eq(launches[0], total[0] - 2);
    sn_graph *g = gpt2_training("tiny", 1, 2, 16);
    sn_program *p = compile(g);
    int fwd = 0;
    for (int k = 0; k < p->n_kernels; k++) { /* o (B, H, T, D) into its (B, T, H, D) permute */
        const sn_kernel *ker = p->kernels[k];
        const sn_node *a = ker->anchor;
        if (ker->kind != SN_KER_ATTENTION) continue;
        const sn_node *o = a->op == SN_OP_ATTENTION ? a : a->in[3];
        const sn_access *x = a->op == SN_OP_ATTENTION ? &ker->access[a->n_in] : &ker->access[3];
        const sn_node *buf = ker->args[x->arg];
        ck_assert_int_eq(p->value_of[o->id], -1); /* no buffer of its own */
        ck_assert(buf->op == SN_OP_PERMUTE && buf->in[0] == o);
        /* (b, h, t, d) at b T C + t C + h D + d */
        const int64_t H = o->shape[1], T = o->shape[2], D = o->shape[3];
        ck_assert(x->offset == 0 && x->stride[0] == T * H * D && x->stride[1] == D &&
                  x->stride[2] == H * D && x->stride[3] == 1);
        if (a->op == SN_OP_ATTENTION) {
            ck_assert_int_eq(ker->n_access, a->n_in + 1);
            ck_assert(ker->args[1] == a->in[3]); /* lse: contiguous, no access */
            fwd++;
        }
    }
    ck_assert_int_eq(fwd, 1);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* bf16 tiny GPT-2 (one layer): each 16-bit cast of a parameter is a weight shadow (its cast
 * kernel set apart, its copy persistent, the trainable ones at half their parameters' offsets
 * after the gradients); every other cast joins the kernel of its operand (the layernorm_bwd
 * kernels store the bf16 copies too) unless a GEMM computes it (the GELU and its gradient, GEMM
 * epilogues, store theirs). With
 * weight_casts_per_step the shadows are kernels of the step again. */
START_TEST(casts_fold_and_weights_are_copies) {
    int n_kernels[2];
    for (int per_step = 0; per_step < 2; per_step++) {
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        c.n_layer = 1;
        sn_graph *g = sn_graph_new();
        sn_gpt2 m;
        sn_err e;
        ck_assert_msg(sn_gpt2_build(g, &c, 2, 16, &m, &e) == SN_OK, "%s", e.msg);
        sn_pipeline_opts o = sn_pipeline_defaults();
        o.backward = true;
        o.precision = SN_PRECISION_BF16;
        o.weight_casts_per_step = per_step;
        sn_target t = sn_target_cpu(); /* with the GEMM's GELU epilogues, as CUDA's */
        t.gelu_unfused = false;
        o.target = &t;
        sn_program *p;
        ck_assert_msg(sn_compile(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
        n_kernels[per_step] = p->n_kernels;
        /* qkv, proj, fc, fc proj, wte; the qkv and fc biases (the GEMMs' bf16 BIAS epilogue) */
        ck_assert_int_eq(p->n_shadows, per_step ? 0 : 7);
        int64_t base = -1;
        for (int k = 0; k < p->n_shadows; k++) {
            const sn_kernel *sh = p->shadows[k];
            const sn_value *cv = &p->values[p->value_of[sh->args[0]->id]];
            const sn_value *pv = &p->values[p->value_of[sh->args[1]->id]];
            ck_assert(sh->kind == SN_KER_POINTWISE && sh->args[1]->op == SN_OP_PARAM &&
                      sh->args[0]->op == SN_OP_CAST && sh->args[0]->dtype == SN_BF16);
            ck_assert(cv->persistent && pv->persistent);
            if (base < 0) base = cv->offset - pv->offset / 2;
            ck_assert_int_eq(cv->offset - pv->offset / 2, base);
        }
        int ln_bwd_cast = 0, gelu_bwd_cast = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->kind == SN_KER_GEMM && ker->gemm.epilogue == SN_EPI_DGELU)
                gelu_bwd_cast += ker->args[0]->op == SN_OP_CAST && ker->args[0]->dtype == SN_BF16 &&
                                 ker->args[0]->in[0]->op == SN_OP_GELU_BWD;
            for (int i = 0; i < ker->n_instr; i++) {
                const sn_node *x = ker->instr[i].node;
                if (x->op != SN_OP_CAST) continue;
                ck_assert_msg(per_step || x->in[0]->op != SN_OP_PARAM, "%s casts a weight", ker->name);
                /* no cast is a kernel alone but a parameter's per step: a GEMM stores its
                 * product's cast, a bias epilogue reads the bias's 16-bit copy, every other cast
                 * joins the kernel that computes or reads its operand */
                if (ker->n_instr == 1)
                    ck_assert_msg(per_step && x->in[0]->op == SN_OP_PARAM, "%s: a cast of %s alone",
                                  ker->name, sn_op_name(x->in[0]->op));
                const sn_node *row_op = ker->kind == SN_KER_ROW && ker->row.pair
                                            ? ker->instr[ker->row.instr].node : ker->anchor;
                if (row_op && row_op->op == SN_OP_LAYERNORM_BWD) ln_bwd_cast++;
                ck_assert_msg(x->in[0]->op != SN_OP_GELU_BWD, "%s: the GELU gradient in a "
                              "pointwise kernel, not its GEMM's DGELU epilogue", ker->name);
            }
        }
        /* each layernorm_bwd kernel widens its bf16 dy (the products' dX: the layer's two and
           ln_f's), and the layer's two store the bf16 cast of their result for the products;
           the GELU gradient's GEMM (DGELU) stores its bf16 cast */
        ck_assert_int_eq(ln_bwd_cast, 5);
        ck_assert_int_eq(gelu_bwd_cast, 1);
        /* the QKV and fc bias gradients, and the layernorms' dbeta, sum the bf16 gradients the
           products read and write, widened as loaded (no f32 copy of any is stored); proj's and
           fc proj's sum f32 ones (the residual's); each layernorm_bwd_w kernel widens its bf16
           dy in its prologue and hosts column sums all the same */
        int widened = 0, colsums = 0, bwd_w_widening = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->anchor && ker->anchor->op == SN_OP_LAYERNORM_BWD_W && ker->stage == SN_SUM_PARTIAL) {
                /* the norm backward pair's dx prologue widens dy for dx and dw alike */
                bool widens = (ker->n_instr == 2 || ker->row.pair) && ker->instr[0].node->op == SN_OP_CAST &&
                              ker->instr[0].node->in[0]->dtype == SN_BF16;
                bwd_w_widening += widens;
                ck_assert_msg(widens && ker->row.n_colsum > 0, "%s", ker->name);
            }
            for (int o = 1; ker->kind == SN_KER_ROW && o <= ker->row.n_colsum; o++, colsums++) {
                if (ker->args[ker->row.colsum_src[o]]->dtype != SN_BF16) continue;
                widened++;
                ck_assert_int_eq(p->value_of[ker->args[o]->in[0]->id], -1); /* the f32 cast */
            }
        }
        ck_assert_int_eq(colsums, 7); /* the 4 biases, the 3 layernorms' dbeta */
        ck_assert_int_eq(widened, 5);
        ck_assert_int_eq(bwd_w_widening, 3);
        sn_program_free(p);
        sn_graph_free(g);
    }
    /* the 7 parameters' casts (5 weights, 2 biases) are kernels of the step, or none */
    ck_assert_int_eq(n_kernels[1], n_kernels[0] + 7);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fuse");
    TCase *tc = tcase_create("fuse");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pointwise_chain_is_one_kernel);
    tcase_add_test(tc, views_fold_into_accesses);
    tcase_add_test(tc, multi_output_pointwise);
    tcase_add_test(tc, earliest_reader_decides);
    tcase_add_test(tc, residual_into_layernorm);
    tcase_add_test(tc, layernorm_bwd_into_residual);
    tcase_add_test(tc, row_ops_with_neighbours);
    tcase_add_test(tc, what_does_not_fuse);
    tcase_add_test(tc, overflow_drops_extra_outputs);
    tcase_add_test(tc, memory_plan_gpt2);
    tcase_add_test(tc, kernels_per_gpt2_layer);
    tcase_add_test(tc, attention_writes_into_concatenation);
    tcase_add_test(tc, second_dv_has_its_own_kernel);
    tcase_add_test(tc, lse_of_a_dead_attention);
    tcase_add_test(tc, column_sum_of_an_input);
    tcase_add_test(tc, row_facts_and_work_split);
    tcase_add_test(tc, casts_fold_and_weights_are_copies);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
