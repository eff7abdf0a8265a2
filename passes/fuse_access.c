/* fuse_access.c: the views a kernel reads, folded into strided and masked accesses to buffers.
 * Convention: a view map walks down to the nearest node with a buffer and applies the views on
 * the way back up; a chain that is no strided view has no map (decide buffers what it views). */
#include <string.h>

#include "fuse_int.h"

_Static_assert(SN_MAX_RANK == 4, "access maps are written for rank <= 4");

/* ---- view maps ---- */

static void contiguous(const sn_node *n, int64_t *st) {
    int64_t s = 1;
    for (int i = n->rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= n->shape[i];
    }
}

/* Strides of `to` viewing the same elements as (from_shape, from_stride), or false when
 * that is not a strided view (merging dims that are not laid out contiguously). */
static bool reshape_strides(int fr, const int64_t *fs, const int64_t *fst, int tr, const int64_t *ts,
                            int64_t *tst) {
    int i = 0, j = 0;
    while (i < fr || j < tr) {
        /* take one group of from-dims and to-dims with equal products */
        int64_t pf = 1, pt = 1;
        int i0 = i, j0 = j;
        if (i < fr) pf *= fs[i++];
        if (j < tr) pt *= ts[j++];
        while (pf != pt) {
            if (pf < pt && i < fr) pf *= fs[i++];
            else if (pt < pf && j < tr) pt *= ts[j++];
            else return false;
        }
        /* the from-dims in the group must be contiguous with each other */
        for (int k = i0; k + 1 < i; k++)
            if (fs[k + 1] != 1 && fs[k] != 1 && fst[k] != fst[k + 1] * fs[k + 1]) return false;
        int64_t inner = i > i0 ? fst[i - 1] : 1;
        for (int k = j - 1; k >= j0; k--) {
            tst[k] = inner;
            inner *= ts[k];
        }
    }
    return true;
}

/* The map of view n applied to the map of its input. */
bool sn_fuse_map_through(const fuse_state *s, const sn_node *n, view_map *m) {
    view_map in;
    if (!sn_fuse_map_of(s, n->in[0], &in)) return false;
    const sn_node *x = n->in[0];
    *m = in;
    switch (n->op) {
    case SN_OP_BROADCAST:
        for (int d = 0; d < n->rank; d++) {
            int dx = d - (n->rank - x->rank);
            m->stride[d] = dx >= 0 && x->shape[dx] == n->shape[d] ? in.stride[dx] : 0;
        }
        if (in.masked) m->mask_axis = in.mask_axis + (n->rank - x->rank);
        return true;
    case SN_OP_PERMUTE:
        for (int d = 0; d < n->rank; d++) m->stride[d] = in.stride[n->a.perm[d]];
        if (in.masked)
            for (int d = 0; d < n->rank; d++)
                if (n->a.perm[d] == in.mask_axis) m->mask_axis = d;
        return true;
    case SN_OP_SLICE:
        if (in.masked) return false;
        m->offset += n->a.start * in.stride[n->a.axis];
        return true;
    case SN_OP_PAD:
        if (in.masked) return false;
        m->masked = true;
        m->mask_axis = n->a.axis;
        m->lo = n->a.start;
        m->hi = n->a.start + x->shape[n->a.axis];
        m->offset -= n->a.start * in.stride[n->a.axis];
        return true;
    case SN_OP_RESHAPE:
        if (in.masked) return false;
        return reshape_strides(x->rank, x->shape, in.stride, n->rank, n->shape, m->stride);
    default: SN_ASSERT(0);
    }
}

/* The map of node n as seen through folded views, down to a materialised base; an attention
 * forward's o written into its permute (fuse.c: fwd_into) is that permute's buffer seen
 * through the inverse permutation. */
bool sn_fuse_map_of(const fuse_state *s, const sn_node *n, view_map *m) {
    if (s->mat[n->id]) {
        *m = (view_map){.base = n};
        contiguous(n, m->stride);
        return true;
    }
    if (n->op == SN_OP_ATTENTION && s->into[n->id]) {
        const sn_node *p = s->into[n->id];
        int64_t st[SN_MAX_RANK];
        contiguous(p, st);
        *m = (view_map){.base = p};
        for (int d = 0; d < p->rank; d++) m->stride[p->a.perm[d]] = st[d];
        return true;
    }
    return sn_fuse_map_through(s, n, m);
}

const sn_node *sn_fuse_only_reader(const fuse_state *s, const sn_node *n) {
    const sn_node *r = NULL;
    if (s->is_out[n->id]) return NULL;
    for (int k = 0; k < s->n_users[n->id]; k++) {
        const sn_node *u = s->g->nodes[s->users[n->id][k]];
        if (!s->live[u->id]) continue;
        if (r) return NULL;
        r = u;
    }
    return r;
}

/* ---- attention outputs written into a concatenation ---- */

bool sn_fuse_out_map(const fuse_state *s, const sn_node *a, const sn_node *y, view_map *m) {
    enum { MAX_CHAIN = 8 };
    const sn_node *chain[MAX_CHAIN + 1];
    int len = 0;
    chain[len++] = a;
    while (chain[len - 1]->op != SN_OP_PAD) { /* a, its views, the pad */
        const sn_node *v = sn_fuse_only_reader(s, chain[len - 1]);
        if (!v || len > MAX_CHAIN ||
            (v->op != SN_OP_PERMUTE && v->op != SN_OP_RESHAPE && v->op != SN_OP_PAD))
            return false;
        chain[len++] = v;
    }
    const sn_node *pad = chain[len - 1];
    if (pad->rank != y->rank) return false;
    for (int d = 0; d < y->rank; d++)
        if (pad->shape[d] != y->shape[d]) return false;
    *m = (view_map){.base = y};
    contiguous(y, m->stride); /* the pad's strides in y; its part starts at a.start */
    m->offset = pad->a.start * m->stride[pad->a.axis];
    for (int i = len - 2; i >= 0; i--) { /* chain[i + 1] = view(chain[i]): chain[i]'s strides */
        const sn_node *v = chain[i + 1], *u = chain[i];
        int64_t st[SN_MAX_RANK] = {0};
        if (v->op == SN_OP_PERMUTE) {
            for (int d = 0; d < v->rank; d++) st[v->a.perm[d]] = m->stride[d];
        } else if (v->op == SN_OP_RESHAPE) {
            if (!reshape_strides(v->rank, v->shape, m->stride, u->rank, u->shape, st)) return false;
        } else if (v != pad) {
            return false;
        } else {
            memcpy(st, m->stride, sizeof st);
        }
        memcpy(m->stride, st, sizeof st);
    }
    return true;
}

/* ---- accesses ---- */

/* The input index of n, added if new; -1 when the kernel has no room left. */
static int input_index(pw_build *b, const sn_node *n) {
    for (int i = 0; i < b->n_in; i++)
        if (b->in[i] == n) return i;
    if (b->n_in + b->n_out == SN_KER_MAX_ARGS) return -1;
    b->in[b->n_in] = n;
    return b->n_in++;
}

/* An access reading map m as a tensor of `like`'s shape, which broadcasts right-aligned into
 * the index space. */
sn_status sn_fuse_push_access(fuse_state *s, pw_build *b, const sn_node *like, const view_map *m,
                              sn_ref *ref) {
    int arg = input_index(b, m->base);
    if (arg < 0 || b->n_access == SN_KER_MAX_ARGS) return sn_fuse_too_many(s, b);
    sn_access a = {.arg = arg, .offset = m->offset, .masked = m->masked};
    int shift = b->rank - like->rank;
    for (int d = 0; d < b->rank; d++) {
        int dx = d - shift;
        a.stride[d] = dx >= 0 && like->shape[dx] == b->shape[d] ? m->stride[dx] : 0;
    }
    if (m->masked) {
        a.mask_axis = m->mask_axis + shift;
        a.mask_lo = m->lo;
        a.mask_hi = m->hi;
    }
    b->access[b->n_access] = a;
    *ref = (sn_ref){.kind = SN_REF_ACCESS, .index = b->n_access++};
    return SN_OK;
}

/* The failure of a view chain into x that is not a strided view. */
sn_status sn_fuse_not_strided(fuse_state *s, const sn_node *x) {
    return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: the view chain into node %%%d (%s) is not a "
                   "strided view (a reshape of a permuted view, or two paddings)", x->id,
                   sn_op_name(x->op));
}

/* Part i of concat n, read as n's shape: the part's map padded to its place on the axis, so
 * the parts' accesses add up to the concatenation. */
sn_status sn_fuse_concat_part(fuse_state *s, pw_build *b, const sn_node *n, int i, sn_ref *ref) {
    const sn_node *x = n->in[i];
    int64_t start = 0;
    for (int j = 0; j < i; j++) start += n->in[j]->shape[n->a.axis];
    view_map m;
    if (!sn_fuse_map_of(s, x, &m) || m.masked) return sn_fuse_not_strided(s, x);
    m.masked = true;
    m.mask_axis = n->a.axis;
    m.lo = start;
    m.hi = start + x->shape[n->a.axis];
    m.offset -= start * m.stride[n->a.axis];
    return sn_fuse_push_access(s, b, n, &m, ref);
}

/* How the row op n reads operand i, which is not per element of its row: the whole buffer of
 * a materialised node (w and b per column, targets per row, a scalar dloss). */
sn_status sn_fuse_row_operand_access(fuse_state *s, pw_build *b, const sn_node *n, int i,
                                     sn_ref *ref) {
    const sn_node *x = n->in[i];
    SN_ASSERT(s->mat[x->id]);
    view_map m = {.base = x};
    contiguous(x, m.stride);
    bool per_row = sn_row_facts_of(n->op)->per_row >> i & 1;
    if (!per_row) return sn_fuse_push_access(s, b, x, &m, ref);
    /* targets (.., T) for the rows of logits (.., T, V): left-aligned, stride 0 along the row */
    int arg = input_index(b, x);
    if (arg < 0 || b->n_access == SN_KER_MAX_ARGS) return sn_fuse_too_many(s, b);
    sn_access a = {.arg = arg};
    for (int d = 0; d < x->rank && d < b->rank - 1; d++) a.stride[d] = m.stride[d];
    b->access[b->n_access] = a;
    *ref = (sn_ref){.kind = SN_REF_ACCESS, .index = b->n_access++};
    return SN_OK;
}
