/* siblings.c: the siblings pass, on the forward graph before autocast: products of one x by
 * several trained weights, x @ w_i^T (LLaMA's q, k, v and gate, up; Hugging Face's (out, in)
 * layout), become one product x @ [w_0; w_1; ..]^T whose columns are each product (a slice of
 * the last axis); where every one of them is read only by the add of a trained bias, the
 * biases are concatenated too and each add becomes its columns of the joint sum. One GEMM
 * where there were n, in the forward and for x's gradient; each weight's gradient stays its
 * own GEMM, reading its columns of the joint output gradient in place (autodiff's concat rule).
 * The concatenation is a copy of the weights a step (recomputed with its block under a
 * checkpoint policy: recompute.c): worth it where launches and small GEMMs cost more than that
 * copy (sn_target.fuse_siblings: CUDA; on a CPU at small batches the copy costs more than the
 * GEMMs it joins save), in training graphs (the pipeline's choice: generation reads each weight
 * about once a token, so a copy would cost what the products do). Products over few rows and
 * frozen weights (LoRA's, IA3's and QLoRA's base, which the nf4 and base16
 * passes store apart, looking for a weight that only products read) are left alone.
 * Exact: each output element is the same dot product (the GEMM library may order its sum
 * otherwise at another shape). */
#include <stdlib.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

/* MIN_ROWS: a product over fewer rows (decoding's few-row products, kernel.h SN_GEMV_MAX_M) reads
 * its weights about once, so a copy of them would cost what the product costs */
enum { MAX_SIBLINGS = 8, MIN_ROWS = 4 * SN_GEMV_MAX_M };

/* Whether p is a trained f32 matrix or vector with `uses` uses, all by one node. */
static bool trained(const sn_node *p, const int *uses, int rank) {
    return p->op == SN_OP_PARAM && !p->a.frozen && p->dtype == SN_F32 && p->rank == rank &&
           uses[p->id] == 1;
}

/* Whether u is x @ w^T by a trained weight that u alone reads, over at least MIN_ROWS rows. */
static bool sibling(const sn_node *u, const int *uses) {
    if (u->op != SN_OP_MATMUL || u->a.ta || !u->a.tb || u->in[1]->rank != 2 ||
        !trained(u->in[1], uses, 2) || u->in[0]->dtype != SN_F32)
        return false;
    const sn_node *x = u->in[0];
    return sn_numel(x) / x->shape[x->rank - 1] >= MIN_ROWS;
}

/* The add of a trained bias that is the only reader of product u, or NULL. */
static const sn_node *bias_add(const sn_graph *g, const sn_node *u, const int *uses) {
    if (uses[u->id] != 1) return NULL;
    for (int i = u->id + 1; i < g->n_nodes; i++) {
        const sn_node *a = g->nodes[i];
        if (a->op != SN_OP_ADD || (a->in[0] != u && a->in[1] != u)) continue;
        const sn_node *b = a->in[0] == u ? a->in[1] : a->in[0];
        return trained(b, uses, 1) ? a : NULL;
    }
    return NULL;
}

typedef struct {
    int n;
    const sn_node *mm[MAX_SIBLINGS], *add[MAX_SIBLINGS]; /* add: all or none */
} group;

/* The group of siblings that u is the first of (products of u's x, in graph order), its
 * weights (and biases) made before u; n < 2 when none. */
static group group_of(const sn_graph *g, const sn_node *u, const int *uses, const bool *taken) {
    group gr = {0};
    if (taken[u->id] || !sibling(u, uses)) return gr;
    for (int i = u->id; i < g->n_nodes && gr.n < MAX_SIBLINGS; i++) {
        const sn_node *v = g->nodes[i];
        if (v->op == SN_OP_MATMUL && v->in[0] == u->in[0] && !taken[i] && sibling(v, uses) &&
            v->in[1]->id < u->id)
            gr.mm[gr.n++] = v;
    }
    bool biased = true;
    for (int i = 0; i < gr.n; i++) {
        gr.add[i] = bias_add(g, gr.mm[i], uses);
        const sn_node *a = gr.add[i];
        biased &= a && (a->in[0] == gr.mm[i] ? a->in[1] : a->in[0])->id < u->id;
    }
    for (int i = 0; !biased && i < gr.n; i++) gr.add[i] = NULL;
    return gr;
}

/* The group's joint product (and bias sum) in the new graph; each member mapped to its
 * columns. */
static void join(sn_rewrite *r, const group *gr) {
    sn_graph *g = r->g;
    sn_node *w[MAX_SIBLINGS], *b[MAX_SIBLINGS];
    for (int i = 0; i < gr->n; i++) {
        w[i] = r->map[gr->mm[i]->in[1]->id];
        if (gr->add[i]) {
            const sn_node *a = gr->add[i];
            b[i] = r->map[(a->in[0] == gr->mm[i] ? a->in[1] : a->in[0])->id];
        }
    }
    sn_node *all = sn_matmul_t(g, r->map[gr->mm[0]->in[0]->id], sn_concat(g, gr->n, w, 0), false, true);
    if (gr->add[0]) all = sn_add(g, all, sn_concat(g, gr->n, b, 0));
    for (int i = 0, at = 0; i < gr->n; i++) {
        int out = (int)gr->mm[i]->in[1]->shape[0];
        sn_node *cols = sn_slice(g, all, -1, at, at + out);
        r->map[gr->mm[i]->id] = cols; /* read by nothing else when there is a bias */
        if (gr->add[i]) r->map[gr->add[i]->id] = cols;
        at += out;
    }
}

sn_status sn_pass_siblings(const sn_graph *in, sn_graph **out, int *n_joined, sn_err *e) {
    *out = NULL;
    *n_joined = 0;
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "siblings: the graph has a backward; run the pass on "
                       "the forward graph, before autodiff");
    int *uses = sn_graph_use_counts(in, e);
    bool *taken = calloc((size_t)in->n_nodes + 1, sizeof *taken);
    group *at = calloc((size_t)in->n_nodes + 1, sizeof *at); /* by the first member's id */
    if (!uses || !taken || !at) {
        free(taken);
        free(at);
        if (!uses) return SN_ERR_OOM;
        free(uses);
        return sn_fail(e, SN_ERR_OOM, "siblings: out of memory");
    }
    int groups = 0;
    for (int i = 0; i < in->n_nodes; i++) {
        group gr = group_of(in, in->nodes[i], uses, taken);
        if (gr.n < 2) continue;
        for (int k = 0; k < gr.n; k++) {
            taken[gr.mm[k]->id] = true;
            if (gr.add[k]) taken[gr.add[k]->id] = true;
            *n_joined += 1;
        }
        at[i] = gr;
        groups++;
    }
    sn_status st = SN_OK;
    sn_rewrite r;
    if (groups && !(st = sn_rewrite_begin(&r, in, e))) {
        for (int i = 0; i < in->n_nodes; i++) {
            if (at[i].n >= 2) join(&r, &at[i]); /* maps every member */
            else if (!taken[i]) sn_rewrite_copy(&r, in->nodes[i]);
        }
        st = sn_rewrite_end(&r, "siblings", out, e);
    }
    free(uses);
    free(taken);
    free(at);
    return st;
}
