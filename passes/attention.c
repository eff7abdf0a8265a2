/* attention.c: the attention pass: softmax(causal_mask(f q k^T)) v, written out by a model,
 * becomes attention_lse + attention, flash-attention style (see passes.h).
 * Convention: matching looks back from the final matmul; the matched chain's other nodes are
 * not copied into the new graph at all. */
#include <math.h>
#include <stdlib.h>

#include "frontend/sinter.h"
#include "ir/rewrite.h"
#include "passes.h"

/* One written-out attention: q, k, v and scale f, and the nodes it replaces. */
typedef struct {
    const sn_node *q, *k, *v;
    float f;
    const sn_node *inner[4]; /* qk matmul, scale (or NULL), mask, softmax */
} chain;

static bool only_reader(const int *uses, const sn_node *n) { return uses[n->id] == 1; }

/* Do a and b have the same leading dimensions (all but the last two) and rank? */
static bool same_batch(const sn_node *a, const sn_node *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank - 2; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* Is pv the final matmul of a written-out causal attention? Fills c if so. */
static bool match(const sn_node *pv, const int *uses, chain *c) {
    if (pv->op != SN_OP_MATMUL || pv->a.ta || pv->a.tb) return false;
    const sn_node *sm = pv->in[0];
    if (sm->op != SN_OP_SOFTMAX || !only_reader(uses, sm)) return false;
    const sn_node *mask = sm->in[0];
    if (mask->op != SN_OP_CAUSAL_MASK || !only_reader(uses, mask)) return false;
    if (!(isinf(mask->a.f) && mask->a.f < 0)) return false;
    const sn_node *x = mask->in[0], *scale = NULL;
    if (x->op == SN_OP_SCALE) {
        if (!only_reader(uses, x)) return false;
        scale = x;
        x = x->in[0];
    }
    if (x->op != SN_OP_MATMUL || x->a.ta || !x->a.tb || !only_reader(uses, x)) return false;
    const sn_node *q = x->in[0], *k = x->in[1], *v = pv->in[1];
    if (q->rank < 2 || !same_batch(q, k) || !same_batch(q, v)) return false;
    if (!sn_dtype_is_float(q->dtype) || v->dtype != q->dtype) return false;
    *c = (chain){q, k, v, scale ? scale->a.f : 1.0f, {x, scale, mask, sm}};
    return true;
}

sn_status sn_pass_attention(const sn_graph *in, sn_graph **out, int *n_fused, sn_err *e) {
    *out = NULL;
    *n_fused = 0;
    sn_status st = sn_verify(in, e);
    if (st) return st;
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "attention pass: the graph already has a backward part; "
                       "run the pass before autodiff so the backward uses the fused ops");
    int *uses = sn_graph_use_counts(in, e);
    chain *at = sn_calloc((size_t)in->n_nodes + 1, sizeof *at, "the attention pass's chains", e); /* at[id]: the chain ending at id */
    bool *gone = sn_calloc((size_t)in->n_nodes + 1, sizeof *gone, "the attention pass's chains", e);
    sn_rewrite r;
    if (!uses || !at || !gone || sn_rewrite_begin(&r, in, e)) {
        free(uses);
        free(at);
        free(gone);
        return SN_ERR_OOM;
    }
    for (int i = 0; i < in->n_nodes; i++) {
        chain c;
        if (!match(in->nodes[i], uses, &c)) continue;
        at[i] = c;
        for (int k = 0; k < 4; k++)
            if (c.inner[k]) gone[c.inner[k]->id] = true;
        ++*n_fused;
    }
    for (int i = 0; i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        if (gone[i]) continue;
        if (!at[i].q) {
            sn_rewrite_copy(&r, n);
            continue;
        }
        sn_node *q = r.map[at[i].q->id], *k = r.map[at[i].k->id], *v = r.map[at[i].v->id];
        r.map[i] = sn_causal_attention(r.g, q, k, v, at[i].f);
    }
    free(uses);
    free(at);
    free(gone);
    return sn_rewrite_end(&r, "attention", out, e);
}
