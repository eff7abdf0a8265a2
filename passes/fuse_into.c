/* fuse_into.c: the fuse pass's decisions to write a value straight into another's buffer: the
 * attention backward's dq, dk and dv into the concatenation autodiff makes of them (an add of
 * pads: no kernel, no copies), and the attention forward's o into the permute that makes it
 * (B, T, H, D). into[] records them; the kernels then write through accesses (kernel.h). */
#include "fuse_int.h"

/* ---- attention outputs written into a concatenation ---- */

enum { MAX_PARTS = 8 };

bool sn_fuse_is_att_out(sn_op op) {
    return op == SN_OP_ATTENTION_BWD_Q || op == SN_OP_ATTENTION_BWD_K || op == SN_OP_ATTENTION_BWD_V;
}

/* The pads under x in an add tree rooted at y (every add and pad the one reader's, shaped
 * like y) into pads[*n]; false when x is something else. */
static bool pad_tree(const fuse_state *s, const sn_node *x, const sn_node *y, const sn_node **pads,
                     int *n) {
    if (x->rank != y->rank || x->dtype != y->dtype || (x != y && !sn_fuse_only_reader(s, x)))
        return false;
    for (int d = 0; d < y->rank; d++)
        if (x->shape[d] != y->shape[d]) return false;
    if (x->op == SN_OP_ADD)
        return pad_tree(s, x->in[0], y, pads, n) && pad_tree(s, x->in[1], y, pads, n);
    if (x->op != SN_OP_PAD || *n == MAX_PARTS) return false;
    pads[(*n)++] = x;
    return true;
}

/* The attention output under pad p (through permutes and reshapes, each read by the next
 * alone), or NULL. */
static const sn_node *pad_part(const fuse_state *s, const sn_node *p) {
    const sn_node *x = p->in[0];
    while (x->op == SN_OP_PERMUTE || x->op == SN_OP_RESHAPE) x = x->in[0];
    return sn_fuse_is_att_out(x->op) && x->dtype == p->dtype ? x : NULL;
}

/* Whether y, an add of pads along one axis whose parts tile it, each an attention output
 * (dq, dk, dv of the QKV gradient) read by nothing else, can have them written straight into
 * its buffer, with unit stride along the head: then into[] marks y, the tree and the parts. */
bool sn_fuse_concat_into(fuse_state *s, const sn_node *y) {
    const sn_node *pads[MAX_PARTS], *parts[MAX_PARTS];
    int n = 0;
    if (y->op != SN_OP_ADD || s->into[y->id] || !pad_tree(s, y, y, pads, &n)) return false;
    int axis = pads[0]->a.axis;
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        const sn_node *p = pads[i];
        int64_t lo = p->a.start, hi = lo + p->in[0]->shape[axis];
        if (p->a.axis != axis || !(parts[i] = pad_part(s, p))) return false;
        for (int j = 0; j < i; j++) { /* disjoint */
            int64_t l2 = pads[j]->a.start, h2 = l2 + pads[j]->in[0]->shape[axis];
            if (lo < h2 && l2 < hi) return false;
        }
        covered += hi - lo;
        view_map m;
        const sn_node *a = parts[i];
        if (!sn_fuse_out_map(s, a, y, &m) || m.stride[a->rank - 1] != 1) return false;
    }
    if (covered != y->shape[axis]) return false;
    s->into[y->id] = y;
    for (int i = 0; i < n; i++) { /* the parts, their views, the pads and the adds above */
        for (const sn_node *x = parts[i]; x != y; x = sn_fuse_only_reader(s, x)) s->into[x->id] = y;
    }
    return true;
}

/* After the other decisions: the parts have no buffer of their own (their kernels write into
 * y's), y has one and no kernel (home: the last part's), the pads and adds neither. */
void sn_fuse_settle_into(fuse_state *s) {
    for (int i = 0; i < s->g->n_nodes; i++) {
        const sn_node *y = s->into[i];
        if (y != s->g->nodes[i]) continue;
        s->mat[i] = true;
        s->home[i] = -1;
        for (int j = 0; j < i; j++) {
            if (s->into[j] != y) continue;
            s->mat[j] = false;
            if (sn_fuse_is_att_out(s->g->nodes[j]->op)) {
                if (s->home[j] > s->home[i]) s->home[i] = s->home[j];
            } else {
                s->home[j] = -1;
            }
        }
    }
}

/* ---- the attention forward's output written into its permute ---- */

/* Whether attention forward x writes its o (B, H, T, D) straight into the buffer of the permute
 * that makes it (B, T, H, D) (kernel.h: a forward's output access): x is no output, its live
 * readers are that one permute, keeping the head axis last and x's dtype, and attention
 * backwards (which read o through the permute's buffer: sn_fuse_map_of). Then into[] marks x
 * and the permute, which has a buffer but no kernel (x's writes it). */
bool sn_fuse_fwd_into(fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ATTENTION || s->is_out[x->id] || s->home[x->id] != x->id || s->into[x->id])
        return false;
    const sn_node *perm = NULL;
    for (int k = 0; k < s->n_users[x->id]; k++) {
        const sn_node *u = s->g->nodes[s->users[x->id][k]];
        if (!s->live[u->id] || sn_op_kind(u->op) == SN_K_ATTENTION) continue;
        if (u->op != SN_OP_PERMUTE || perm || u->a.perm[u->rank - 1] != u->rank - 1 ||
            u->dtype != x->dtype || !s->mat[u->id])
            return false;
        perm = u;
    }
    if (!perm) return false;
    s->into[x->id] = s->into[perm->id] = perm;
    s->mat[x->id] = false;
    s->home[perm->id] = x->id;
    return true;
}

