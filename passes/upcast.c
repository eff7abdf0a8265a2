/* upcast.c: the upcast pass: an f32 cast of a 16-bit value that several readers widen where
 * they load it becomes one cast per reader. Fuse joins a cast with one reader into that
 * reader's kernel, which then loads the 16-bit value and widens it there; a cast with several
 * readers would instead be stored once in f32 for all of them (twice the bytes written, and
 * each reader loading twice the bytes). The readers that widen: pointwise ops, the norms and
 * their input gradients (a row kernel's prologue), and a column sum through reshapes (fuse's
 * colsum_widens). The cases that matter: a GELU's input, which autocast keeps in bf16 (what a
 * GEMM's epilogue stores), read by the forward's GELU and by the backward's gelu_bwd; the bf16
 * gradient of a norm's rounded output (autodiff), read by the norm's backward, its weight
 * gradient and its bias gradient (the column sum that joins the weight gradient's kernel).
 * Exact: widening a bf16 or f16 value to f32 loses nothing. */
#include <stdlib.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

/* Whether n is kept as itself by the graph: an output, the loss or a gradient. */
static bool kept(const sn_graph *g, const sn_node *n) {
    if (g->loss == n) return true;
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == n) return true;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->grad == n) return true;
    return false;
}

/* Whether reader u of a value loads it element by element in a kernel that can widen it: a
 * pointwise op, a norm or its backward (row kernels' prologues), or a reshape read only by a
 * column sum over axis 0, through further reshapes. */
static bool widens(const sn_graph *g, const sn_node *u, const int *uses) {
    switch (u->op) {
    case SN_OP_LAYERNORM: case SN_OP_LAYERNORM_BWD: case SN_OP_LAYERNORM_BWD_W:
    case SN_OP_RMSNORM: case SN_OP_RMSNORM_BWD: case SN_OP_RMSNORM_BWD_W:
        return true;
    case SN_OP_RESHAPE:
        if (uses[u->id] != 1 || kept(g, u)) return false;
        for (int i = u->id + 1; i < g->n_nodes; i++) {
            const sn_node *v = g->nodes[i];
            for (int j = 0; j < v->n_in; j++)
                if (v->in[j] == u)
                    return (v->op == SN_OP_SUM && v->a.axis == 0) || widens(g, v, uses);
        }
        return false;
    default: return sn_op_kind(u->op) == SN_K_POINTWISE;
    }
}

/* Whether n, read `uses` times, is an f32 cast of a bf16 or f16 value read only by readers
 * that widen it (widens), at least twice, and not kept: one cast per reader instead. */
static bool splits(const sn_graph *g, const sn_node *n, const int *uses, bool *pw_only) {
    if (n->op != SN_OP_CAST || n->dtype != SN_F32 ||
        (n->in[0]->dtype != SN_BF16 && n->in[0]->dtype != SN_F16) || uses[n->id] < 2 ||
        !pw_only[n->id])
        return false;
    return !kept(g, n);
}

sn_status sn_pass_upcast(const sn_graph *in, sn_graph **out, int *n_split, sn_err *e) {
    *out = NULL;
    *n_split = 0;
    int n = in->n_nodes;
    int *uses = sn_graph_use_counts(in, e);
    bool *pw_only = uses ? sn_calloc((size_t)n + 1, sizeof *pw_only, "the upcast pass", e) : NULL;
    bool *split = pw_only ? sn_calloc((size_t)n + 1, sizeof *split, "the upcast pass", e) : NULL;
    sn_rewrite r;
    if (!split || sn_rewrite_begin(&r, in, e)) {
        free(uses);
        free(pw_only);
        free(split);
        return SN_ERR_OOM;
    }
    for (int i = 0; i < n; i++) pw_only[i] = true;
    for (int i = 0; i < n; i++) {
        const sn_node *u = in->nodes[i];
        for (int j = 0; j < u->n_in; j++)
            if (!widens(in, u, uses)) pw_only[u->in[j]->id] = false;
    }
    for (int i = 0; i < n; i++) *n_split += split[i] = splits(in, in->nodes[i], uses, pw_only);
    if (!*n_split) { /* nothing to split: the graph stays as it is (its nodes too) */
        free(uses);
        free(pw_only);
        free(split);
        free(r.map);
        sn_graph_free(r.g);
        return SN_OK;
    }
    for (int i = 0; i < n; i++) {
        const sn_node *x = in->nodes[i];
        if (split[i]) continue; /* each reader makes its own */
        sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&r, x, ins);
        for (int j = 0; j < x->n_in; j++) {
            const sn_node *c = x->in[j];
            if (!split[c->id]) continue;
            sn_node *mine = NULL; /* one cast for every slot of this reader that reads c */
            for (int k = 0; k < j && !mine; k++)
                if (x->in[k] == c) mine = ins[k];
            ins[j] = mine ? mine : sn_cast(r.g, r.map[c->in[0]->id], SN_F32);
        }
        sn_rewrite_emit(&r, x, &p); /* a shape error stays in r.g for sn_rewrite_end */
    }
    free(uses);
    free(pw_only);
    free(split);
    return sn_rewrite_end(&r, "upcast", out, e);
}
