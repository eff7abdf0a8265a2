/* remat.c: the remat pass, after autodiff. Two kinds of forward value are made again for the
 * backward, right before their first reader there, instead of kept from the forward:
 * - one that a unary pointwise op makes from a value the backward reads anyway (SwiGLU's
 *   silu(gate), whose input silu_bwd reads), read in the backward by pointwise ops alone: the
 *   forward's kernel then stores nothing for it (fuse) and the backward's kernel computes it
 *   from what it reads already. Not a cast (a value's own copy, which the backward reads in
 *   place of it), nor a dropout (its mask is drawn from its own elements' indices, the same
 *   again, but kept apart: fuse roots it alone);
 * - a copy of frozen weights, their concatenation along the rows (passes/siblings.c: LoRA's
 *   base of q, k, v or gate, up made one product), read by the backward's product for x's
 *   gradient. Where its parts are whole numbers of 64 bytes (every shape sinter's models have)
 *   both are frozen blocks (program.h), read in place, and this costs nothing; otherwise it is
 *   one more copy kernel a step, and the copy's buffer is no longer held from a layer's forward
 *   to its backward (tinyllama-1.1b: 57 MB a layer, 1.2 GB over 22 layers). A trained
 *   concatenation stays kept (its 16-bit cast is a copy of the f32 masters a step; the
 *   trainer's state, 16 bytes a parameter, dwarfs it).
 * Exact: the same op on the same values. */
#include <stdlib.h>

#include "ir/rewrite.h"
#include "passes.h"

/* Whether old node x is read by a backward node (id at least nf); with pointwise, only by
 * pointwise ones (which the copy joins: it then needs no buffer of its own either). */
static bool read_backward(const sn_graph *g, const sn_node *x, int nf, bool pointwise) {
    bool read = false;
    for (int i = nf; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            if (g->nodes[i]->in[j] != x) continue;
            if (pointwise && sn_op_kind(g->nodes[i]->op) != SN_K_POINTWISE) return false;
            read = true;
        }
    return read;
}

/* Whether u is a concatenation along the rows of frozen parameters or dequantized NF4 weights
 * (a copy of frozen weights; the dequantizations then made again too: nf4_per_reader). */
static bool frozen_copy(const sn_node *u) {
    if (u->op != SN_OP_CONCAT || u->a.axis != 0) return false;
    for (int k = 0; k < u->n_in; k++)
        if ((u->in[k]->op != SN_OP_PARAM || !u->in[k]->a.frozen) && u->in[k]->op != SN_OP_DEQUANT_NF4)
            return false;
    return true;
}

/* Whether forward node u (of the nf) is made again for the backward. */
static bool remade(const sn_graph *g, const sn_node *u, int nf) {
    if (u->id < nf && frozen_copy(u) && g->loss != u) return read_backward(g, u, nf, false);
    if (u->id >= nf || sn_op_kind(u->op) != SN_K_POINTWISE || u->n_in != 1 ||
        u->op == SN_OP_CAST || u->op == SN_OP_DROPOUT || g->loss == u)
        return false;
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == u) return false;
    return read_backward(g, u, nf, true) && read_backward(g, u->in[0], nf, false);
}

sn_status sn_pass_remat(const sn_graph *in, sn_graph **out, int *n_remade, sn_err *e) {
    *out = NULL;
    *n_remade = 0;
    int nf = in->n_forward, n = in->n_nodes;
    if (nf <= 0 || nf >= n) return SN_OK; /* no backward */
    bool *cand = calloc((size_t)n + 1, sizeof *cand);
    if (!cand) return sn_fail(e, SN_ERR_OOM, "the remat pass: out of memory");
    for (int i = 0; i < nf; i++) *n_remade += cand[i] = remade(in, in->nodes[i], nf);
    sn_status st = SN_OK;
    sn_rewrite r;
    sn_node **again = NULL; /* [n]: each candidate's copy for the backward */
    if (*n_remade && !(again = calloc((size_t)n + 1, sizeof *again)))
        st = sn_fail(e, SN_ERR_OOM, "the remat pass: out of memory");
    if (*n_remade && !st && !(st = sn_rewrite_begin(&r, in, e))) {
        for (int i = 0; i < n; i++) {
            const sn_node *x = in->nodes[i];
            if (i < nf) {
                sn_rewrite_copy(&r, x);
                continue;
            }
            sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&r, x, ins);
            for (int j = 0; j < x->n_in; j++) {
                const sn_node *u = x->in[j];
                if (!cand[u->id]) continue;
                if (!again[u->id]) { /* made right before its first backward reader */
                    sn_node *uin[SN_MAX_INPUTS], q = sn_rewrite_proto(&r, u, uin);
                    again[u->id] = sn_rewrite_emit(&r, NULL, &q);
                }
                ins[j] = again[u->id];
            }
            sn_rewrite_emit(&r, x, &p); /* a shape error stays in r.g for sn_rewrite_end */
        }
        st = sn_rewrite_end(&r, "remat", out, e);
    }
    free(cand);
    free(again);
    return st;
}
