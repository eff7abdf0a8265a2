/* fuse.c: from a graph to kernels: which nodes get a buffer, and which nodes each kernel
 * computes: a pointwise chain (the views it reads folded into strided accesses), or a row op
 * with the pointwise chains that compute its operands (prologue) and consume its result
 * (epilogue); a value other kernels also read is stored by the kernel as an extra output.
 * Convention: decisions first, in reverse graph order: each node joins the kernel of its
 * earliest reader when that reader can compute it there and every other reader runs later,
 * else it roots a kernel of its own; then kernels in graph order, each at its root (the last
 * node it computes). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"

_Static_assert(SN_MAX_RANK == 4, "access maps are written for rank <= 4");

enum { MAX_INSTR = 64 };

typedef struct {
    const sn_graph *g;
    sn_program *p;
    int **users;   /* [n_nodes] ids of the nodes reading each node */
    int *n_users;
    bool *live;    /* reaches an output */
    bool *mat;     /* has a buffer */
    bool *is_out;  /* graph output, loss or gradient */
    int *home;     /* the root of the kernel that computes the node; -1: none (leaves, FULL,
                      views folded into accesses or sharing their input's buffer) */
    /* per root: */
    const sn_node **anchor; /* the row op its kernel computes, or NULL */
    const sn_node **space;  /* the node whose shape is its kernel's index space */
    int *members;           /* nodes that joined it */
    bool *extra;            /* a node joined it as a stored value or as its row op */
    bool *solo;             /* takes only single-reader chains (its kernel overflowed before) */
    int overflowed;         /* the root whose kernel ran out of args or instructions, or -1 */
    sn_err *e;
} fuse_state;

static bool is_view(sn_op op) {
    return sn_op_kind(op) == SN_K_LAYOUT && op != SN_OP_CONCAT;
}
static bool is_pw(sn_op op) { return sn_op_kind(op) == SN_K_POINTWISE || op == SN_OP_CONCAT; }
static bool is_compute(sn_op op) { return !is_pw(op) && !is_view(op) && sn_op_kind(op) != SN_K_LEAF; }
static bool is_row(sn_op op) { return sn_op_kind(op) == SN_K_ROW; }
static bool is_leaf(sn_op op) { return op == SN_OP_INPUT || op == SN_OP_PARAM || op == SN_OP_CONST; }

/* shapes equal once leading 1s are dropped */
static bool same_squeezed(const sn_node *a, const sn_node *b) {
    int ia = 0, ib = 0;
    while (ia < a->rank && a->shape[ia] == 1) ia++;
    while (ib < b->rank && b->shape[ib] == 1) ib++;
    if (a->rank - ia != b->rank - ib) return false;
    for (; ia < a->rank; ia++, ib++)
        if (a->shape[ia] != b->shape[ib]) return false;
    return true;
}

/* ---- decisions ---- */

static void mark_live(fuse_state *s, const sn_node *n) {
    if (s->live[n->id]) return;
    s->live[n->id] = true;
    for (int i = 0; i < n->n_in; i++) mark_live(s, n->in[i]);
}

/* Whether node id's k-th reader appears earlier in its reader list (read twice). */
static bool seen_reader(const fuse_state *s, int id, int k) {
    for (int j = 0; j < k; j++)
        if (s->users[id][j] == s->users[id][k]) return true;
    return false;
}

/* A materialised reshape whose input has a buffer shares that buffer (make_values). */
static bool is_alias(const fuse_state *s, const sn_node *v) {
    return v->op == SN_OP_RESHAPE && s->mat[v->id] && !s->is_out[v->id] && s->mat[v->in[0]->id];
}

/* Where reader u reads a node: at the root of u's kernel; through a view folded into
 * accesses (or a reshape sharing the buffer), wherever the view's readers are. INT_MAX when
 * nothing live reads it. */
static int read_pos(const fuse_state *s, const sn_node *u) {
    if (!is_view(u->op) || (s->mat[u->id] && !is_alias(s, u))) return s->home[u->id];
    int best = INT_MAX;
    for (int k = 0; k < s->n_users[u->id]; k++) {
        const sn_node *w = s->g->nodes[s->users[u->id][k]];
        if (!s->live[w->id]) continue;
        int p = read_pos(s, w);
        if (p < best) best = p;
    }
    return best;
}

/* Whether u, a reader of n in the kernel rooted at G, can compute n there itself: a pointwise
 * op over the same elements, or G's row op reading n element by element. */
static bool inline_reader(const fuse_state *s, int G, const sn_node *u, const sn_node *n) {
    if (is_view(u->op) || u->op == SN_OP_CONCAT) return false; /* they read n's buffer */
    if (is_pw(u->op)) return same_squeezed(u, n);
    if (!is_row(u->op) || s->anchor[G] != u || !same_squeezed(n, u->in[0])) return false;
    for (int i = 0; i < u->n_in; i++)
        if (u->in[i] == n && !sn_row_operand_per_element(u->op, i)) return false;
    return true;
}

static void make_root(fuse_state *s, const sn_node *n) {
    int id = n->id;
    s->home[id] = id;
    s->mat[id] = true;
    s->anchor[id] = is_row(n->op) ? n : NULL;
    s->space[id] = is_row(n->op) && n->n_in ? n->in[0] : n;
}

/* A pointwise node or a row op: joins the kernel of its earliest reader when that reader can
 * compute it there (a row op only as the kernel's one row op, followed by its epilogue), every
 * other reader runs later, and the kernel can store it if it must (other readers, an output);
 * else it roots a kernel. */
static void join_or_root(fuse_state *s, const sn_node *n) {
    int id = n->id, G = INT_MAX;
    for (int k = 0; k < s->n_users[id]; k++) {
        const sn_node *u = s->g->nodes[s->users[id][k]];
        if (!s->live[u->id]) continue;
        int p = read_pos(s, u);
        if (p < G) G = p;
    }
    bool row = is_row(n->op);
    if (G == INT_MAX || (!is_pw(n->op) && !row)) {
        make_root(s, n);
        return;
    }
    bool stored = s->is_out[id], ok = true;
    for (int k = 0; k < s->n_users[id] && ok; k++) {
        const sn_node *u = s->g->nodes[s->users[id][k]];
        if (!s->live[u->id] || seen_reader(s, id, k)) continue;
        if (read_pos(s, u) != G) stored = true; /* reads the buffer later */
        else ok = inline_reader(s, G, u, n);
    }
    if (ok) ok = s->space[G] && same_squeezed(n, s->space[G]);
    if (ok && row) /* the kernel's row op, its readers the epilogue */
        ok = !s->anchor[G] && sn_row_result_per_element(n->op);
    const sn_node *rows = row ? n->in[0] : s->anchor[G] ? s->space[G] : NULL;
    if (ok && rows) ok = rows->rank >= 1; /* a row kernel's index space has a row axis */
    if (ok && stored && s->anchor[G]) ok = s->anchor[G]->op != SN_OP_CROSS_ENTROPY;
    if (ok && (stored || row)) ok = !s->solo[G];
    if (!ok) {
        make_root(s, n);
        return;
    }
    s->home[id] = G;
    s->mat[id] = stored;
    s->members[G]++;
    if (stored || row) s->extra[G] = true;
    if (row) {
        s->anchor[G] = n;
        s->space[G] = n->in[0];
    }
}

/* The attention node that computes attention_lse x in its own kernel (online softmax gives
 * both), or NULL: lse must be of its own q and k and read by nothing before it. */
static const sn_node *lse_owner(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ATTENTION_LSE) return NULL;
    for (int k = 0; k < s->n_users[x->id]; k++) {
        const sn_node *n = s->g->nodes[s->users[x->id][k]];
        if (n->op != SN_OP_ATTENTION || n->in[3] != x || n->in[0] != x->in[0] || n->in[1] != x->in[1] ||
            n->a.f != x->a.f)
            continue;
        bool first = true;
        for (int j = 0; j < s->n_users[x->id]; j++)
            if (s->users[x->id][j] < n->id) first = false;
        if (first) return n;
    }
    return NULL;
}
/* ---- access maps ---- */

typedef struct {
    const sn_node *base; /* materialised */
    int64_t offset;
    int64_t stride[SN_MAX_RANK]; /* over the viewed node's dims */
    bool masked;
    int mask_axis; /* in the viewed node's dims */
    int64_t lo, hi;
} view_map;

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

static bool map_of(const fuse_state *s, const sn_node *n, view_map *m);

/* The map of view n applied to the map of its input. */
static bool map_through(const fuse_state *s, const sn_node *n, view_map *m) {
    view_map in;
    if (!map_of(s, n->in[0], &in)) return false;
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

/* The map of node n as seen through folded views, down to a materialised base. */
static bool map_of(const fuse_state *s, const sn_node *n, view_map *m) {
    if (s->mat[n->id]) {
        *m = (view_map){.base = n};
        contiguous(n, m->stride);
        return true;
    }
    return map_through(s, n, m);
}

/* ---- all decisions ---- */

/* Views first: one has a buffer when it is an output or a compute op reads it, or when the
 * view above it cannot be a strided view of it; what a view reads has a buffer. Then the
 * other nodes in reverse graph order, so that a node's readers are decided before it. */
static void decide(fuse_state *s) {
    const sn_graph *g = s->g;
    int n = g->n_nodes;
    for (int i = 0; i < n; i++) {
        s->mat[i] = false;
        s->home[i] = -1;
        s->anchor[i] = s->space[i] = NULL;
        s->members[i] = 0;
        s->extra[i] = false;
    }
    for (int i = 0; i < n; i++) {
        const sn_node *x = g->nodes[i];
        if (!s->live[i]) continue;
        if (is_leaf(x->op)) s->mat[i] = true;
        if (!is_view(x->op)) continue;
        if (!is_view(x->in[0]->op)) s->mat[x->in[0]->id] = true;
        s->mat[i] = s->mat[i] || s->is_out[i];
        for (int k = 0; k < s->n_users[i]; k++) {
            const sn_node *u = g->nodes[s->users[i][k]];
            if (s->live[u->id] && is_compute(u->op)) s->mat[i] = true;
        }
    }
    /* a view chain that is not strided materialises the view under the failing reshape */
    for (int i = 0; i < n; i++) {
        const sn_node *v = g->nodes[i];
        view_map m;
        if (s->live[i] && is_view(v->op) && !map_through(s, v, &m)) s->mat[v->in[0]->id] = true;
    }
    for (int i = 0; i < n; i++) /* a view with a buffer of its own is a copy kernel */
        if (s->live[i] && is_view(g->nodes[i]->op) && s->mat[i] && !is_alias(s, g->nodes[i]))
            s->home[i] = i;
    for (int i = n - 1; i >= 0; i--) {
        const sn_node *x = g->nodes[i], *owner;
        if (!s->live[i] || is_leaf(x->op) || is_view(x->op)) continue;
        if (x->op == SN_OP_FULL) { /* folded as a constant into pointwise readers */
            s->mat[i] = s->mat[i] || s->is_out[i];
            for (int k = 0; k < s->n_users[i]; k++) {
                const sn_node *u = g->nodes[s->users[i][k]];
                if (s->live[u->id] && (!is_pw(u->op) || u->op == SN_OP_CONCAT)) s->mat[i] = true;
            }
            continue;
        }
        if ((owner = lse_owner(s, x))) { /* written by its attention node's kernel */
            s->mat[i] = true;
            s->home[i] = owner->id;
            continue;
        }
        join_or_root(s, x);
    }
}

/* ---- kernels ---- */

/* A kernel being built: its instructions and accesses over an index space, its inputs (the
 * accesses' `arg` counts inputs until the outputs are known) and the values it stores. */
typedef struct {
    int G;               /* the root the kernel is built at */
    const sn_node *root; /* for messages */
    int rank;
    int64_t shape[SN_MAX_RANK];
    sn_pw_instr instr[MAX_INSTR];
    sn_access access[SN_KER_MAX_ARGS];
    int n_instr, n_access;
    const sn_node *in[SN_KER_MAX_ARGS];
    int n_in;
    const sn_node *out[SN_KER_MAX_ARGS];
    int out_instr[SN_KER_MAX_ARGS];
    int n_out;
    int row_instr;       /* the row op's instruction, or -1 */
} pw_build;

static sn_status too_many(fuse_state *s, pw_build *b) {
    s->overflowed = b->G;
    return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: the kernel of node %%%d (%s) would read and "
                   "write more than %d buffers or compute more than %d instructions; splitting "
                   "such chains is not supported yet", b->root->id, sn_op_name(b->root->op),
                   SN_KER_MAX_ARGS, MAX_INSTR);
}

/* The input index of n, added if new; -1 when the kernel has no room left. */
static int input_index(pw_build *b, const sn_node *n) {
    for (int i = 0; i < b->n_in; i++)
        if (b->in[i] == n) return i;
    if (b->n_in + b->n_out == SN_KER_MAX_ARGS) return -1;
    b->in[b->n_in] = n;
    return b->n_in++;
}

static sn_status add_value(fuse_state *s, pw_build *b, const sn_node *x, sn_ref *ref);

/* An access reading map m as a tensor of `like`'s shape, which broadcasts right-aligned into
 * the index space. */
static sn_status push_access(fuse_state *s, pw_build *b, const sn_node *like, const view_map *m,
                             sn_ref *ref) {
    int arg = input_index(b, m->base);
    if (arg < 0 || b->n_access == SN_KER_MAX_ARGS) return too_many(s, b);
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

static sn_status not_strided(fuse_state *s, const sn_node *x) {
    return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: the view chain into node %%%d (%s) is not a "
                   "strided view (a reshape of a permuted view, or two paddings)", x->id,
                   sn_op_name(x->op));
}

/* Part i of concat n, read as n's shape: the part's map padded to its place on the axis, so
 * the parts' accesses add up to the concatenation. */
static sn_status concat_part(fuse_state *s, pw_build *b, const sn_node *n, int i, sn_ref *ref) {
    const sn_node *x = n->in[i];
    int64_t start = 0;
    for (int j = 0; j < i; j++) start += n->in[j]->shape[n->a.axis];
    view_map m;
    if (!map_of(s, x, &m) || m.masked) return not_strided(s, x);
    m.masked = true;
    m.mask_axis = n->a.axis;
    m.lo = start;
    m.hi = start + x->shape[n->a.axis];
    m.offset -= start * m.stride[n->a.axis];
    return push_access(s, b, n, &m, ref);
}

/* How the row op n reads operand i, which is not per element of its row: the whole buffer of
 * a materialised node (w and b per column, targets per row, a scalar dloss). */
static sn_status row_operand_access(fuse_state *s, pw_build *b, const sn_node *n, int i, sn_ref *ref) {
    const sn_node *x = n->in[i];
    SN_ASSERT(s->mat[x->id]);
    view_map m = {.base = x};
    contiguous(x, m.stride);
    bool per_row = (n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_CROSS_ENTROPY_BWD) && i == 1;
    if (!per_row) return push_access(s, b, x, &m, ref);
    /* targets (.., T) for the rows of logits (.., T, V): left-aligned, stride 0 along the row */
    int arg = input_index(b, x);
    if (arg < 0 || b->n_access == SN_KER_MAX_ARGS) return too_many(s, b);
    sn_access a = {.arg = arg};
    for (int d = 0; d < x->rank && d < b->rank - 1; d++) a.stride[d] = m.stride[d];
    b->access[b->n_access] = a;
    *ref = (sn_ref){.kind = SN_REF_ACCESS, .index = b->n_access++};
    return SN_OK;
}

/* Appends the instructions computing n (its operands first); returns its index or -1. */
static int add_instr(fuse_state *s, pw_build *b, const sn_node *n) {
    sn_pw_instr in = {.node = n, .n_in = n->n_in};
    if (n->n_in > 3) {
        sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: node %%%d (%s) has %d inputs; compiled pointwise "
                "kernels take at most 3 (concat of more parts is not supported yet)",
                n->id, sn_op_name(n->op), n->n_in);
        return -1;
    }
    bool row = is_row(n->op);
    for (int i = 0; i < n->n_in; i++) {
        sn_status st;
        if (n->op == SN_OP_CONCAT) st = concat_part(s, b, n, i, &in.in[i]);
        else if (row && !sn_row_operand_per_element(n->op, i)) st = row_operand_access(s, b, n, i, &in.in[i]);
        else st = add_value(s, b, n->in[i], &in.in[i]);
        if (st) return -1;
    }
    if (b->n_instr == MAX_INSTR) {
        too_many(s, b);
        return -1;
    }
    if (row) b->row_instr = b->n_instr;
    b->instr[b->n_instr] = in;
    return b->n_instr++;
}

/* A reference to x's value in the kernel: its instruction when the kernel computes it (stored
 * too when x has a buffer), a constant for a folded FULL, else an access to x's buffer (through
 * the views folded over it). */
static sn_status add_value(fuse_state *s, pw_build *b, const sn_node *x, sn_ref *ref) {
    if (!s->mat[x->id] && x->op == SN_OP_FULL) {
        *ref = (sn_ref){.kind = SN_REF_CONST, .value = x->a.f};
        return SN_OK;
    }
    if (s->home[x->id] == b->G && !is_view(x->op)) {
        for (int i = 0; i < b->n_instr; i++)
            if (b->instr[i].node == x) {
                *ref = (sn_ref){.kind = SN_REF_INSTR, .index = i};
                return SN_OK;
            }
        int i = add_instr(s, b, x);
        if (i < 0) return s->e->code;
        if (s->mat[x->id]) {
            if (b->n_in + b->n_out == SN_KER_MAX_ARGS) return too_many(s, b);
            b->out[b->n_out] = x;
            b->out_instr[b->n_out++] = i;
        }
        *ref = (sn_ref){.kind = SN_REF_INSTR, .index = i};
        return SN_OK;
    }
    view_map m;
    if (!map_of(s, x, &m)) return not_strided(s, x);
    return push_access(s, b, x, &m, ref);
}

static sn_kernel *new_kernel(fuse_state *s, sn_kernel_kind kind, const sn_node *out) {
    sn_program *p = s->p;
    sn_kernel *k = sn_arena_alloc(&p->arena, sizeof *k);
    k->kind = kind;
    k->id = p->n_kernels;
    k->n_out = 1;
    k->args[0] = out;
    snprintf(k->name, sizeof k->name, "k%d_%s", k->id, sn_op_name(out->op));
    p->kernels[p->n_kernels++] = k;
    return k;
}

static int64_t rows_of(const sn_node *x) { return x->rank ? sn_numel(x) / x->shape[x->rank - 1] : 1; }

/* Row ops that sum over all rows into one output run as one range. */
static bool row_serial(sn_op op) {
    return op == SN_OP_CROSS_ENTROPY || op == SN_OP_LAYERNORM_BWD_W || op == SN_OP_RMSNORM_BWD_W;
}

/* The kernel of b: outputs (the root first), then inputs; accesses renumbered to args. */
static void finish(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *anchor) {
    sn_arena *A = &s->p->arena;
    int o = 0;
    for (int i = 0; i < b->n_out; i++) /* the root first */
        if (b->out[i] == b->root) {
            k->args[o] = b->out[i];
            k->store[o++] = b->out_instr[i];
        }
    SN_ASSERT(o == 1);
    for (int i = 0; i < b->n_out; i++)
        if (b->out[i] != b->root) {
            k->args[o] = b->out[i];
            k->store[o++] = b->out_instr[i];
        }
    k->n_out = b->n_out;
    k->n_in = b->n_in;
    for (int i = 0; i < b->n_in; i++) k->args[b->n_out + i] = b->in[i];
    for (int a = 0; a < b->n_access; a++) b->access[a].arg += b->n_out;
    k->rank = b->rank;
    memcpy(k->shape, b->shape, sizeof k->shape);
    k->n_instr = b->n_instr;
    k->instr = sn_arena_alloc(A, sizeof(sn_pw_instr) * (size_t)b->n_instr);
    memcpy(k->instr, b->instr, sizeof(sn_pw_instr) * (size_t)b->n_instr);
    k->n_access = b->n_access;
    k->access = sn_arena_alloc(A, sizeof(sn_access) * (size_t)(b->n_access + 1));
    memcpy(k->access, b->access, sizeof(sn_access) * (size_t)b->n_access);
    /* named after its ops: a row kernel's row op first, then the others in order; a pointwise
     * kernel's root, then the others most recent first */
    size_t len = (size_t)snprintf(k->name, sizeof k->name, "k%d_%s", k->id,
                                  sn_op_name((anchor ? anchor : b->root)->op));
    for (int t = 0; t < b->n_instr && len + 12 < sizeof k->name; t++) {
        int i = anchor ? t : b->n_instr - 1 - t;
        const sn_node *n = b->instr[i].node;
        if (n == anchor || (!anchor && n == b->root)) continue;
        len += (size_t)snprintf(k->name + len, sizeof k->name - len, "_%s", sn_op_name(n->op));
    }
    if (anchor) {
        k->anchor = anchor;
        k->row_instr = b->row_instr;
        k->n_items = rows_of(anchor->in[0]);
        k->serial = row_serial(anchor->op);
    } else {
        k->n_items = sn_shape_numel(b->rank, b->shape);
    }
}

static pw_build *new_build(const sn_node *root, const sn_node *space) {
    pw_build *b = calloc(1, sizeof *b);
    SN_ASSERT(b);
    b->G = root->id;
    b->root = root;
    b->rank = space->rank;
    memcpy(b->shape, space->shape, sizeof b->shape);
    b->row_instr = -1;
    return b;
}

/* The kernel rooted at `root`: a pointwise group, or a row op with its prologue and epilogue. */
static sn_status group_kernel(fuse_state *s, const sn_node *root) {
    const sn_node *anchor = s->anchor[root->id];
    sn_kernel *k = new_kernel(s, anchor ? SN_KER_ROW : SN_KER_POINTWISE, root);
    pw_build *b = new_build(root, s->space[root->id]);
    sn_ref top;
    sn_status st = add_value(s, b, root, &top);
    if (!st) finish(s, k, b, anchor);
    free(b);
    return st;
}

/* A view with a buffer of its own: a copy of what it views. */
static sn_status copy_kernel(fuse_state *s, const sn_node *v) {
    sn_kernel *k = new_kernel(s, SN_KER_POINTWISE, v);
    pw_build *b = new_build(v, v);
    sn_pw_instr copy = {.node = v, .n_in = 1};
    view_map m;
    sn_status st = map_through(s, v, &m) ? push_access(s, b, v, &m, &copy.in[0]) : not_strided(s, v);
    if (!st) {
        b->instr[b->n_instr++] = copy;
        b->out[0] = v;
        b->n_out = 1;
        finish(s, k, b, NULL);
    }
    free(b);
    return st;
}

static sn_kernel_kind compute_kind(sn_op op) {
    switch (sn_op_kind(op)) {
    case SN_K_ROW: return SN_KER_ROW;
    case SN_K_REDUCE: return SN_KER_REDUCE;
    case SN_K_MATMUL: return SN_KER_GEMM;
    case SN_K_GATHER: return SN_KER_GATHER;
    default: return SN_KER_ATTENTION;
    }
}

/* A kernel of one compute node (a row op with nothing fused reads its inputs as args). */
static void compute_kernel(fuse_state *s, const sn_node *n) {
    sn_kernel *k = new_kernel(s, compute_kind(n->op), n);
    k->anchor = n;
    const sn_node *lse = n->op == SN_OP_ATTENTION ? n->in[3] : NULL;
    if (lse && s->home[lse->id] == n->id) {
        k->anchor2 = lse;
        k->args[k->n_out++] = lse;
        snprintf(k->name, sizeof k->name, "k%d_attention_fwd", k->id);
    }
    for (int i = 0; i < n->n_in; i++) {
        SN_ASSERT(s->mat[n->in[i]->id]);
        if (n->in[i] == k->anchor2) continue;
        int at = -1;
        for (int j = 0; j < k->n_out + k->n_in && at < 0; j++)
            if (k->args[j] == n->in[i]) at = j;
        if (at < 0) k->args[k->n_out + k->n_in++] = n->in[i]; /* compute ops have at most 6 inputs */
    }
    const sn_node *x = n->in[0];
    switch (k->kind) {
    case SN_KER_ROW:
        k->n_items = rows_of(x);
        k->serial = row_serial(n->op);
        break;
    case SN_KER_REDUCE: k->n_items = sn_numel(n); break;
    case SN_KER_GATHER:
        /* embedding: one item per id; its backward: column blocks of 64 that threads own */
        k->n_items = n->op == SN_OP_EMBEDDING ? sn_numel(n->in[1]) : (n->shape[1] + 63) / 64;
        break;
    case SN_KER_ATTENTION: k->n_items = x->rank >= 2 ? sn_numel(x) / (x->shape[x->rank - 1] * x->shape[x->rank - 2]) : 1; break;
    default: k->n_items = 1; k->serial = true; break;
    }
}

/* Every kernel reads only values written before it (or loaded with the program). */
static void check_order(const fuse_state *s) {
    const sn_program *p = s->p;
    bool *written = calloc((size_t)p->n_values + 1, 1);
    SN_ASSERT(written);
    for (int v = 0; v < p->n_values; v++) {
        sn_op op = p->values[v].node->op;
        written[v] = is_leaf(op) || op == SN_OP_FULL;
    }
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        for (int a = 0; a < ker->n_out + ker->n_in; a++) {
            int v = p->value_of[ker->args[a]->id];
            SN_ASSERT(v >= 0);
            while (p->values[v].alias >= 0) v = p->values[v].alias;
            if (a >= ker->n_out && !written[v])
                SN_ASSERT(!"fuse: a kernel reads a value that no earlier kernel wrote");
        }
        for (int a = 0; a < ker->n_out; a++) {
            int v = p->value_of[ker->args[a]->id];
            while (p->values[v].alias >= 0) v = p->values[v].alias;
            written[v] = true;
        }
    }
    free(written);
}

/* ---- values ---- */

static int dtype_bytes(sn_dtype t) { return sn_dtype_bits(t) / 8; }

static void make_values(fuse_state *s) {
    const sn_graph *g = s->g;
    sn_program *p = s->p;
    p->values = calloc((size_t)g->n_nodes, sizeof *p->values);
    SN_ASSERT(p->values);
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        p->value_of[i] = -1;
        if (!s->mat[i]) continue;
        sn_value *v = &p->values[p->n_values];
        p->value_of[i] = p->n_values++;
        *v = (sn_value){.node = n, .bytes = sn_numel(n) * dtype_bytes(n->dtype), .alias = -1,
                        .first = -1, .last = -1};
        v->persistent = sn_op_kind(n->op) == SN_K_LEAF || s->is_out[i];
        if (n->op == SN_OP_RESHAPE && s->mat[n->in[0]->id] && !s->is_out[i])
            v->alias = p->value_of[n->in[0]->id];
    }
}

/* Decides, then makes the kernels in graph order. SN_OK, or the failure of a kernel that
 * cannot be built (s->overflowed names it when it ran out of room). */
static sn_status build(fuse_state *s) {
    const sn_graph *g = s->g;
    int n = g->n_nodes;
    decide(s);
    sn_program *p = calloc(1, sizeof *p);
    SN_ASSERT(p);
    p->g = g;
    p->value_of = malloc(sizeof(int) * (size_t)n);
    p->kernels = calloc((size_t)n, sizeof *p->kernels);
    SN_ASSERT(p->value_of && p->kernels);
    s->p = p;
    s->overflowed = -1;
    make_values(s);
    sn_status st = SN_OK;
    for (int i = 0; i < n && !st; i++) {
        const sn_node *x = g->nodes[i];
        if (!s->live[i] || s->home[i] != i) continue; /* not the root of a kernel */
        if (is_view(x->op)) st = copy_kernel(s, x);
        else if (is_compute(x->op) && (!is_row(x->op) || !s->members[i])) compute_kernel(s, x);
        else st = group_kernel(s, x);
    }
    if (!st) check_order(s);
    return st;
}

sn_status sn_fuse(const sn_graph *g, sn_program **out, sn_err *e) {
    *out = NULL;
    int n = g->n_nodes;
    fuse_state s = {.g = g, .e = e};
    s.users = calloc((size_t)n, sizeof *s.users);
    s.n_users = calloc((size_t)n, sizeof *s.n_users);
    s.live = calloc((size_t)n, 1);
    s.mat = calloc((size_t)n, 1);
    s.is_out = calloc((size_t)n, 1);
    s.home = calloc((size_t)n, sizeof *s.home);
    s.anchor = calloc((size_t)n, sizeof *s.anchor);
    s.space = calloc((size_t)n, sizeof *s.space);
    s.members = calloc((size_t)n, sizeof *s.members);
    s.extra = calloc((size_t)n, 1);
    s.solo = calloc((size_t)n, 1);
    SN_ASSERT(s.users && s.n_users && s.live && s.mat && s.is_out && s.home && s.anchor && s.space &&
              s.members && s.extra && s.solo);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) s.n_users[g->nodes[i]->in[j]->id]++;
    for (int i = 0; i < n; i++) {
        s.users[i] = malloc(sizeof(int) * (size_t)(s.n_users[i] + 1));
        s.n_users[i] = 0;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            int x = g->nodes[i]->in[j]->id;
            s.users[x][s.n_users[x]++] = i;
        }
    for (int i = 0; i < g->n_outputs; i++) s.is_out[g->outputs[i]->id] = true;
    if (g->loss) s.is_out[g->loss->id] = true;
    for (int i = 0; i < n; i++)
        if (g->nodes[i]->grad) s.is_out[g->nodes[i]->grad->id] = true;
    for (int i = 0; i < n; i++)
        if (s.is_out[i]) mark_live(&s, g->nodes[i]);
    sn_status st;
    /* a kernel that outgrows its args or instructions is built again without the values that
     * joined it as extra outputs or as its row op */
    while ((st = build(&s)) && s.overflowed >= 0 && s.extra[s.overflowed] && !s.solo[s.overflowed]) {
        s.solo[s.overflowed] = true;
        sn_program_free(s.p);
        s.p = NULL;
    }
    for (int i = 0; i < n; i++) free(s.users[i]);
    free(s.users);
    free(s.n_users);
    free(s.live);
    free(s.mat);
    free(s.is_out);
    free(s.home);
    free(s.anchor);
    free(s.space);
    free(s.members);
    free(s.extra);
    free(s.solo);
    if (st) {
        sn_program_free(s.p);
        return st;
    }
    *out = s.p;
    return SN_OK;
}
