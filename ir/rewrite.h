/* rewrite.h: how a pass builds its output graph: the input's nodes copied in order into a new
 * graph through a map from old ids to new nodes, with the pass substituting where it rewrites.
 * Convention: a pass never changes its input; names, outputs (in order), loss, grads and the
 * forward/backward split carry over to the new graph. */
#ifndef SN_REWRITE_H
#define SN_REWRITE_H

#include "ir.h"

typedef struct {
    const sn_graph *old;
    sn_graph *g;   /* the graph being built */
    sn_node **map; /* [old->n_nodes]: the new node standing for each old one (NULL: none yet) */
} sn_rewrite;

/* Starts an empty new graph for old; SN_ERR_OOM (nothing to free) when memory runs out. */
sn_status sn_rewrite_begin(sn_rewrite *r, const sn_graph *old, sn_err *e);

/* Old node n as a proto for the new graph: its op, attributes, name, data and type, its inputs
 * mapped (written to in[], room for n->n_in), no grad. A pass changes it, then emits it. */
sn_node sn_rewrite_proto(const sn_rewrite *r, const sn_node *n, sn_node **in);
/* Appends proto to the new graph (its shape rule re-run, so a shape that follows the inputs
 * follows the rewritten ones) and maps old node n to the result (n NULL: maps nothing).
 * Returns NULL on a shape error, which stays recorded in r->g until sn_rewrite_end. */
sn_node *sn_rewrite_emit(sn_rewrite *r, const sn_node *n, const sn_node *proto);
/* sn_rewrite_proto then sn_rewrite_emit, unchanged. */
sn_node *sn_rewrite_copy(sn_rewrite *r, const sn_node *n);

/* Finishes: maps outputs, loss and grads; the new graph has a backward part where old had one
 * (the split falls where the first old backward node was copied). On success *out is the new
 * graph; on failure (a shape error, or something the pass dropped: an output, the loss, a grad)
 * it is freed and the message names `pass`. */
sn_status sn_rewrite_end(sn_rewrite *r, const char *pass, sn_graph **out, sn_err *e);

/* How many times each node is used: as an input (once per input slot), an output, the loss or
 * a grad. malloc'd [g->n_nodes]; the caller frees. NULL (SN_ERR_OOM in e) when out of memory. */
int *sn_graph_use_counts(const sn_graph *g, sn_err *e);

#endif
