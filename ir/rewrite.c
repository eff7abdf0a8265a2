/* rewrite.c: copying a graph into a new one through a node map (see rewrite.h).
 * Convention: nodes are appended in the old order, so inputs still come before their users. */
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

sn_status sn_rewrite_begin(sn_rewrite *r, const sn_graph *old, sn_err *e) {
    r->old = old;
    r->g = sn_graph_new();
    r->map = sn_calloc((size_t)old->n_nodes, sizeof *r->map, "a rewrite's node map", e);
    if (r->g && r->map) return SN_OK;
    if (!r->g) sn_fail_oom(e, sizeof *r->g, "a rewritten graph");
    sn_graph_free(r->g);
    free(r->map);
    *r = (sn_rewrite){0};
    return SN_ERR_OOM;
}

sn_node sn_rewrite_proto(const sn_rewrite *r, const sn_node *n, sn_node **in) {
    sn_node p = *n;
    p.id = -1;
    p.grad = NULL;
    p.in = in;
    for (int i = 0; i < n->n_in; i++) in[i] = r->map[n->in[i]->id]; /* NULL: emit fails */
    return p;
}

sn_node *sn_rewrite_emit(sn_rewrite *r, const sn_node *n, const sn_node *proto) {
    const sn_graph *old = r->old;
    /* the first old backward node opens the new graph's backward part */
    if (n && old->has_backward && n->id >= old->n_forward) r->g->has_backward = true;
    sn_node *y = sn_graph_append(r->g, proto);
    if (n) r->map[n->id] = y;
    return y;
}

sn_node *sn_rewrite_copy(sn_rewrite *r, const sn_node *n) {
    sn_node *in[SN_MAX_INPUTS];
    sn_node p = sn_rewrite_proto(r, n, in);
    return sn_rewrite_emit(r, n, &p);
}

/* The new node for old node n, or a message about what the pass dropped. */
static sn_node *mapped(sn_rewrite *r, const sn_node *n, const char *pass, const char *role, sn_err *e) {
    sn_node *y = r->map[n->id];
    if (!y) sn_fail(e, SN_ERR_INVALID, "pass %s dropped node %%%d (%s), %s: a bug in the pass "
                    "(map every kept node to its new one)", pass, n->id, sn_op_name(n->op), role);
    return y;
}

sn_status sn_rewrite_end(sn_rewrite *r, const char *pass, sn_graph **out, sn_err *e) {
    const sn_graph *old = r->old;
    sn_graph *g = r->g;
    sn_status st = SN_OK;
    *out = NULL;
    if (g->err.code)
        st = sn_fail(e, g->err.code, "pass %s built a graph with an error: %s", pass, g->err.msg);
    for (int i = 0; !st && i < old->n_outputs; i++) {
        sn_node *y = mapped(r, old->outputs[i], pass, "an output", e);
        if (y) sn_graph_add_output(g, y);
        else st = SN_ERR_INVALID;
    }
    if (!st && old->loss && !(g->loss = mapped(r, old->loss, pass, "the loss", e))) st = SN_ERR_INVALID;
    if (!st && old->logits && !(g->logits = mapped(r, old->logits, pass, "the logits", e)))
        st = SN_ERR_INVALID;
    for (int i = 0; !st && i < old->n_nodes; i++) {
        const sn_node *n = old->nodes[i];
        if (!n->grad) continue;
        sn_node *p = mapped(r, n, pass, "a param with a grad", e), *d = NULL;
        if (p) d = mapped(r, n->grad, pass, "a param's grad", e);
        if (d) p->grad = d;
        else st = SN_ERR_INVALID;
    }
    if (old->has_backward) g->has_backward = true;
    free(r->map);
    r->map = NULL;
    if (st) {
        sn_graph_free(g);
        return st;
    }
    *out = g;
    return SN_OK;
}

int *sn_graph_use_counts(const sn_graph *g, sn_err *e) {
    int *uses = sn_calloc((size_t)g->n_nodes, sizeof *uses, "a graph's use counts", e);
    if (!uses) return NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        for (int k = 0; k < n->n_in; k++) uses[n->in[k]->id]++;
        if (n->grad) uses[n->grad->id]++;
    }
    for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i]->id]++;
    if (g->loss) uses[g->loss->id]++;
    if (g->logits) uses[g->logits->id]++;
    return uses;
}
