/* verify.c: the graph verifier, run between passes: ids, input order, arity, attributes, shape
 * rules (re-run on a copy of each node), grads, outputs and loss.
 * Convention: it stops at the first problem; the message names the node, its op and the types. */
#include "ir.h"

static bool in_graph(const sn_graph *g, const sn_node *n) {
    return n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n;
}

static bool same_type(const sn_node *a, const sn_node *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* Everything that must hold before the node's shape rule may look at it. */
static sn_status check_form(const sn_graph *g, const sn_node *n, int i, sn_err *e) {
    const char *op = sn_op_name(n->op);
    if ((unsigned)n->dtype >= SN_DTYPE_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): unknown dtype %d", i, op, (int)n->dtype);
    if (n->rank < 0 || n->rank > SN_MAX_RANK)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): rank %d is outside 0..%d", i, op, n->rank,
                       SN_MAX_RANK);
    int lo = sn_op_min_inputs(n->op), hi = sn_op_max_inputs(n->op);
    if (n->n_in < lo || n->n_in > hi)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): has %d inputs, but %s takes %d..%d", i,
                       op, n->n_in, op, lo, hi);
    for (int k = 0; k < n->n_in; k++) {
        const sn_node *x = n->in[k];
        if (!in_graph(g, x))
            return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): input %d is %s (rebuild the node "
                           "from nodes of this graph)", i, op, k, x ? "not a node of this graph" : "NULL");
        if (x->id >= i)
            return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): input %d is %%%d, which is not an "
                           "earlier node (inputs must come before their users)", i, op, k, x->id);
    }
    unsigned cols = sn_op_attrs(n->op);
    const sn_attrs *a = &n->a;
    if ((cols & SN_A_TRANS) && ((unsigned)a->ta > 1 || (unsigned)a->tb > 1))
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): ta=%d tb=%d; each must be 0 or 1", i, op,
                       a->ta, a->tb);
    if ((cols & SN_A_KEEP) && (unsigned)a->keepdim > 1)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): keepdim=%d; it must be 0 or 1", i, op,
                       a->keepdim);
    if ((cols & SN_A_INIT) && (unsigned)a->init >= SN_INIT_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): unknown init rule %d", i, op, (int)a->init);
    if (n->name && !(cols & SN_A_NAME))
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s) has a name; only input and param nodes "
                       "carry one (the text form would drop it)", i, op);
    if (n->data && !(cols & SN_A_DATA))
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s) has data; only const nodes carry it", i, op);
    if ((unsigned)n->role >= SN_ROLE_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): unknown role %d", i, op, (int)n->role);
    if (n->role != SN_ROLE_NONE && !(cols & SN_A_ROLE))
        return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s) has the role %s; only input nodes carry one",
                       i, op, sn_role_name(n->role));
    return SN_OK;
}

/* Each role but none on one input at most, of the dtype (and for the loss scale the shape) its
 * readers feed. */
static sn_status check_roles(const sn_graph *g, sn_err *e) {
    const sn_node *seen[SN_ROLE_COUNT] = {0};
    char t[96];
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        sn_role r = n->role;
        if (r == SN_ROLE_NONE) continue;
        if (seen[r])
            return sn_fail(e, SN_ERR_INVALID, "inputs %%%d \"%s\" and %%%d \"%s\" both have the role "
                           "%s; a graph has one input of each role", seen[r]->id, seen[r]->name, i,
                           n->name, sn_role_name(r));
        seen[r] = n;
        if (!sn_role_fits(r, n->dtype, n->rank))
            return sn_fail(e, SN_ERR_DTYPE, "input %%%d \"%s\" has the role %s but is %s; it must be %s",
                           i, n->name, sn_role_name(r), sn_type_str(n, t, sizeof t), sn_role_needs(r));
    }
    return SN_OK;
}

static sn_status check_node(const sn_graph *g, int i, sn_err *e) {
    const sn_node *n = g->nodes[i];
    char t[96], u[96];
    if (!n) return sn_fail(e, SN_ERR_INVALID, "node %%%d is NULL", i);
    if (n->id != i)
        return sn_fail(e, SN_ERR_INVALID, "node at index %d has id %d; a node's id must be its "
                       "index in g->nodes (renumber after removing nodes)", i, n->id);
    if ((unsigned)n->op >= SN_OP_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "node %%%d: unknown op %d", i, (int)n->op);
    sn_status st = check_form(g, n, i, e);
    if (st) return st;
    const char *op = sn_op_name(n->op);
    sn_node copy = *n;
    char msg[600];
    if (sn_infer(&copy, msg, sizeof msg) != 0)
        return sn_fail(e, SN_ERR_SHAPE, "node %%%d (%s): %s", i, op, msg);
    if (!same_type(&copy, n))
        return sn_fail(e, SN_ERR_SHAPE, "node %%%d (%s): stored type %s but the shape rule gives %s",
                       i, op, sn_type_str(n, t, sizeof t), sn_type_str(&copy, u, sizeof u));
    if (n->grad) {
        if (n->op != SN_OP_PARAM)
            return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s) has a grad; only params carry one", i, op);
        if (!in_graph(g, n->grad))
            return sn_fail(e, SN_ERR_INVALID, "node %%%d (%s): its grad is not a node of this graph",
                           i, op);
        if (!same_type(n->grad, n))
            return sn_fail(e, SN_ERR_SHAPE, "node %%%d (%s): grad %%%d is %s but the param is %s; "
                           "they must agree", i, op, n->grad->id, sn_type_str(n->grad, t, sizeof t),
                           sn_type_str(n, u, sizeof u));
    }
    return SN_OK;
}

sn_status sn_verify(const sn_graph *g, sn_err *e) {
    if (g->err.code)
        return sn_fail(e, g->err.code, "the graph has a construction error: %s", g->err.msg);
    if (g->n_nodes < 0 || (g->n_nodes > 0 && !g->nodes))
        return sn_fail(e, SN_ERR_INVALID, "the graph's node list is corrupt (n_nodes %d)", g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        sn_status st = check_node(g, i, e);
        if (st) return st;
    }
    sn_status st = check_roles(g, e);
    if (st) return st;
    if (g->n_forward < 0 || g->n_forward > g->n_nodes)
        return sn_fail(e, SN_ERR_INVALID, "n_forward is %d but the graph has %d nodes", g->n_forward,
                       g->n_nodes);
    if (!g->has_backward && g->n_forward != g->n_nodes)
        return sn_fail(e, SN_ERR_INVALID, "n_forward is %d but the graph has %d nodes and no "
                       "backward part; they must be equal", g->n_forward, g->n_nodes);
    for (int i = 0; i < g->n_outputs; i++)
        if (!in_graph(g, g->outputs[i]))
            return sn_fail(e, SN_ERR_INVALID, "output %d is not a node of this graph", i);
    if (g->loss) {
        char t[96];
        if (!in_graph(g, g->loss))
            return sn_fail(e, SN_ERR_INVALID, "the loss is not a node of this graph");
        if (g->loss->rank != 0 || !sn_dtype_is_float(g->loss->dtype))
            return sn_fail(e, SN_ERR_SHAPE, "the loss %%%d (%s) is %s; it must be a float scalar "
                           "(reduce it with mean or sum)", g->loss->id, sn_op_name(g->loss->op),
                           sn_type_str(g->loss, t, sizeof t));
    }
    if (g->logits) {
        char t[96];
        bool out = false;
        for (int i = 0; i < g->n_outputs; i++) out = out || g->outputs[i] == g->logits;
        if (!in_graph(g, g->logits) || !out)
            return sn_fail(e, SN_ERR_INVALID, "the logits are not an output node of this graph");
        if (g->logits->rank < 2 || !sn_dtype_is_float(g->logits->dtype))
            return sn_fail(e, SN_ERR_SHAPE, "the logits %%%d (%s) are %s; they must be a float "
                           "(.., V) value", g->logits->id, sn_op_name(g->logits->op),
                           sn_type_str(g->logits, t, sizeof t));
    }
    return SN_OK;
}
