/* eval_graph.c: a model's graph as evaluation and generation run it: the evaluation graph of a
 * training graph (what the loss needs and nothing of the backward, so that validation costs a
 * forward and plans an arena of its own), and any forward without its dropouts.
 * Convention: nodes are copied in order (a forward rewrite made after autodiff, the LM head in
 * chunks, is among them); a dropout maps to its input (identity at inference), and the
 * dropout seed input goes with the last of them. */
#include <stdlib.h>

#include "ir/rewrite.h"
#include "passes.h"

sn_status sn_pass_eval_graph(const sn_graph *in, sn_graph **out, sn_err *e) {
    *out = NULL;
    if (!in->loss) return sn_fail(e, SN_ERR_INVALID, "eval_graph: the graph has no loss to evaluate");
    bool *need = sn_calloc((size_t)in->n_nodes + 1, 1, "the evaluation graph's nodes", e);
    if (!need) return SN_ERR_OOM;
    need[in->loss->id] = true;
    for (int i = in->loss->id; i >= 0; i--) { /* inputs come before their readers */
        const sn_node *n = in->nodes[i];
        for (int k = 0; need[i] && k < (n->op == SN_OP_DROPOUT ? 1 : n->n_in); k++)
            need[n->in[k]->id] = true; /* a dropout's seed is not needed: it is identity */
    }
    sn_rewrite r;
    sn_status s = sn_rewrite_begin(&r, in, e);
    for (int i = 0; !s && i <= in->loss->id; i++) {
        const sn_node *n = in->nodes[i];
        if (need[i] && n->op == SN_OP_DROPOUT) r.map[i] = r.map[n->in[0]->id];
        else if (need[i] && !sn_rewrite_copy(&r, n)) break; /* the error stays in r.g */
    }
    free(need);
    if (s) return s;
    sn_graph *g = r.g;
    if (!g->err.code) {
        g->loss = r.map[in->loss->id];
        sn_graph_add_output(g, g->loss); /* the logits are no output: they die in the run */
    }
    free(r.map);
    if (g->err.code) {
        s = sn_fail(e, g->err.code, "eval_graph: %s", g->err.msg);
        sn_graph_free(g);
        return s;
    }
    *out = g;
    return SN_OK;
}

sn_status sn_pass_no_dropout(const sn_graph *in, sn_graph **out, int *n_removed, sn_err *e) {
    *out = NULL;
    *n_removed = 0;
    for (int i = 0; i < in->n_nodes; i++) *n_removed += in->nodes[i]->op == SN_OP_DROPOUT;
    if (!*n_removed) return SN_OK;
    sn_rewrite r;
    sn_status s = sn_rewrite_begin(&r, in, e);
    for (int i = 0; !s && i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        if (n->op == SN_OP_DROPOUT) r.map[i] = r.map[n->in[0]->id];
        else if (n->op != SN_OP_INPUT || n->role != SN_ROLE_DROPOUT_SEED) sn_rewrite_copy(&r, n);
    }
    return s ? s : sn_rewrite_end(&r, "no_dropout", out, e);
}
