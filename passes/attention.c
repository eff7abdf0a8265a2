/* attention.c: the attention pass: softmax(causal_mask(f q k^T)) v, written out by a model,
 * becomes attention_lse + attention, flash-attention style (see passes.h); k and v repeated
 * for groups of query heads (reshape, broadcast, reshape) are read unrepeated (grouped-query).
 * Convention: matching looks back from the final matmul; the matched chain's other nodes (and
 * the repeats it folds) are not copied into the new graph at all. */
#include <math.h>
#include <stdlib.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

/* One written-out attention: q, k, v and scale f, and the nodes it replaces. */
typedef struct {
    const sn_node *q, *k, *v;
    float f;
    const sn_node *inner[4]; /* qk matmul, scale (or NULL), mask, softmax */
    const sn_node *repeat[6]; /* k's then v's folded repeat (reshape, broadcast, reshape), or NULLs */
} chain;

static bool only_reader(const int *uses, const sn_node *n) { return uses[n->id] == 1; }

/* Do a and b have the same rank and leading dimensions (all but the last two), except that
 * with `group` b's heads (the last leading dimension) may be a divisor of a's? */
static bool same_batch(const sn_node *a, const sn_node *b, bool group) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank - 2; i++) {
        bool heads = group && i == a->rank - 3 && b->shape[i] > 0 && a->shape[i] % b->shape[i] == 0;
        if (a->shape[i] != b->shape[i] && !heads) return false;
    }
    return true;
}

/* The kv tensor c (.., Hkv, S, D) when x is its repeat for groups of G query heads, exactly as
 * a model writes it: reshape to (.., Hkv, 1, rest) (rest: S D elements in any shape), broadcast
 * of that size-1 axis to (.., Hkv, G, rest), reshape to (.., Hkv G, S, D), so that head h of x
 * is kv head h / G; each node read only by the next (x by the attention, checked by the
 * caller). NULL otherwise (a repeat mapping heads another way, h % Hkv, is not this). Fills
 * nodes[0..3) with x and the two nodes under it. */
static const sn_node *repeated_kv(const sn_node *x, const int *uses, const sn_node **nodes) {
    if (x->op != SN_OP_RESHAPE || x->rank < 3) return NULL;
    const sn_node *bc = x->in[0];
    if (bc->op != SN_OP_BROADCAST || !only_reader(uses, bc)) return NULL;
    const sn_node *r1 = bc->in[0];
    if (r1->op != SN_OP_RESHAPE || !only_reader(uses, r1) || r1->rank != bc->rank) return NULL;
    const sn_node *c = r1->in[0];
    int r = x->rank, h = r - 3; /* the head axis of x and c */
    if (c->rank != r || r1->rank < h + 3 || c->shape[h] < 1) return NULL;
    int64_t Hkv = c->shape[h], G = x->shape[h] / Hkv;
    if (G * Hkv != x->shape[h] || c->shape[r - 2] != x->shape[r - 2] || c->shape[r - 1] != x->shape[r - 1])
        return NULL;
    for (int i = 0; i < h; i++)
        if (x->shape[i] != c->shape[i] || r1->shape[i] != c->shape[i] || bc->shape[i] != c->shape[i])
            return NULL;
    if (r1->shape[h] != Hkv || bc->shape[h] != Hkv || r1->shape[h + 1] != 1 || bc->shape[h + 1] != G)
        return NULL;
    for (int i = h + 2; i < r1->rank; i++)
        if (bc->shape[i] != r1->shape[i]) return NULL;
    if (sn_shape_numel(r1->rank - h - 2, r1->shape + h + 2) != c->shape[r - 2] * c->shape[r - 1])
        return NULL;
    nodes[0] = x;
    nodes[1] = bc;
    nodes[2] = r1;
    return c;
}

/* Is pv the final matmul of a written-out causal attention? Fills c if so. */
static bool match(const sn_node *pv, const int *uses, bool unrepeat_kv, chain *c) {
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
    if (q->rank < 2 || !same_batch(q, k, true) || !same_batch(k, v, false)) return false;
    if (!sn_dtype_is_float(q->dtype) || v->dtype != q->dtype) return false;
    *c = (chain){q, k, v, scale ? scale->a.f : 1.0f, {x, scale, mask, sm}, {NULL}};
    /* grouped-query attention: k and v repeated alike for the query heads are read unrepeated
       (both or neither: they must keep one head count) */
    const sn_node *rk[3], *rv[3];
    const sn_node *k1 = unrepeat_kv && only_reader(uses, k) ? repeated_kv(k, uses, rk) : NULL;
    const sn_node *v1 = unrepeat_kv && only_reader(uses, v) ? repeated_kv(v, uses, rv) : NULL;
    if (k1 && v1 && k != v && same_batch(k1, v1, false)) {
        c->k = k1;
        c->v = v1;
        for (int i = 0; i < 3; i++) c->repeat[i] = rk[i], c->repeat[3 + i] = rv[i];
    }
    return true;
}

sn_status sn_pass_attention(const sn_graph *in, bool unrepeat_kv, sn_graph **out, int *n_fused,
                            int *n_unrepeated, sn_err *e) {
    int unrepeated = 0;
    *out = NULL;
    *n_fused = 0;
    if (n_unrepeated) *n_unrepeated = 0;
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
        if (!match(in->nodes[i], uses, unrepeat_kv, &c)) continue;
        unrepeated += c.repeat[0] != NULL;
        at[i] = c;
        for (int k = 0; k < 4; k++)
            if (c.inner[k]) gone[c.inner[k]->id] = true;
        for (int k = 0; k < 6; k++)
            if (c.repeat[k]) gone[c.repeat[k]->id] = true;
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
    if (n_unrepeated) *n_unrepeated = unrepeated;
    return sn_rewrite_end(&r, "attention", out, e);
}
