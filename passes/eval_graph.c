/* eval_graph.c: the evaluation graph of a training graph: what the loss needs and nothing of
 * the backward, so that validation costs a forward and plans an arena of its own.
 * Convention: the nodes the loss depends on are copied in order (a forward rewrite made after
 * autodiff, the LM head in chunks, is among them); the loss is the one output. */
#include <stdlib.h>

#include "ir/rewrite.h"
#include "passes.h"

sn_status sn_pass_eval_graph(const sn_graph *in, sn_graph **out, sn_err *e) {
    *out = NULL;
    if (!in->loss) return sn_fail(e, SN_ERR_INVALID, "eval_graph: the graph has no loss to evaluate");
    bool *need = sn_calloc((size_t)in->n_nodes + 1, 1, "the evaluation graph's nodes", e);
    if (!need) return SN_ERR_OOM;
    need[in->loss->id] = true;
    for (int i = in->loss->id; i >= 0; i--) /* inputs come before their readers */
        for (int k = 0; need[i] && k < in->nodes[i]->n_in; k++) need[in->nodes[i]->in[k]->id] = true;
    sn_rewrite r;
    sn_status s = sn_rewrite_begin(&r, in, e);
    for (int i = 0; !s && i <= in->loss->id; i++)
        if (need[i] && !sn_rewrite_copy(&r, in->nodes[i])) break; /* the error stays in r.g */
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
