/* fuse.c: from a graph to kernels: which nodes get a buffer, and the pointwise chains (with
 * the views they read folded into strided accesses) that become one kernel each.
 * Convention: decisions first (materialise or fold, in reverse graph order), then kernels in
 * graph order; a pointwise kernel is rooted at its one materialised output. */
#include <stdlib.h>
#include <string.h>

#include "program.h"

_Static_assert(SN_MAX_RANK == 4, "access maps are written for rank <= 4");

typedef struct {
    const sn_graph *g;
    sn_program *p;
    int **users;   /* [n_nodes] ids of the nodes reading each node */
    int *n_users;
    bool *live;    /* reaches an output */
    bool *mat;     /* has a buffer */
    bool *is_out;  /* graph output, loss or gradient */
    sn_err *e;
} fuse_state;

static bool is_view(sn_op op) {
    return sn_op_kind(op) == SN_K_LAYOUT && op != SN_OP_CONCAT;
}
static bool is_pw(sn_op op) { return sn_op_kind(op) == SN_K_POINTWISE || op == SN_OP_CONCAT; }
static bool is_compute(sn_op op) { return !is_pw(op) && !is_view(op) && sn_op_kind(op) != SN_K_LEAF; }

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

/* A pointwise node folds into its single user when that user is pointwise over the same
 * elements; everything a view or a compute node reads is materialised. */
static bool must_materialise(const fuse_state *s, const sn_node *n) {
    if (s->is_out[n->id]) return true;
    sn_op op = n->op;
    if (op == SN_OP_INPUT || op == SN_OP_PARAM || op == SN_OP_CONST) return true;
    if (is_compute(op)) return true;
    bool any_compute_user = false, all_pw = true, all_pw_same = true;
    int live_users = 0;
    for (int k = 0; k < s->n_users[n->id]; k++) {
        const sn_node *u = s->g->nodes[s->users[n->id][k]];
        if (!s->live[u->id]) continue;
        live_users++;
        if (is_compute(u->op)) any_compute_user = true;
        if (!is_pw(u->op) || u->op == SN_OP_CONCAT) all_pw = false;
        if (!is_pw(u->op) || !same_squeezed(u, n)) all_pw_same = false;
    }
    if (is_view(op)) return any_compute_user; /* folded into the accesses of its readers */
    if (op == SN_OP_FULL) return !all_pw; /* folded as a constant into pointwise readers */
    return live_users != 1 || !all_pw_same || any_compute_user; /* pointwise */
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

/* ---- kernels ---- */

/* The index of n in k's args, added if new; -1 when the kernel has no room left. */
static int arg_index(sn_kernel *k, const sn_node *n) {
    for (int i = 0; i < k->n_out + k->n_in; i++)
        if (k->args[i] == n) return i;
    if (k->n_out + k->n_in == SN_KER_MAX_ARGS) return -1;
    k->args[k->n_out + k->n_in] = n;
    return k->n_out + k->n_in++;
}

typedef struct {
    sn_pw_instr instr[64];
    sn_access access[SN_KER_MAX_ARGS];
    int n_instr, n_access;
} pw_build;

static sn_status add_operand(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *root,
                             const sn_node *x, sn_ref *ref);

static sn_status too_many(fuse_state *s, const sn_node *root) {
    return sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: the pointwise kernel of node %%%d (%s) would "
                   "read more than %d buffers; splitting such chains is not supported yet",
                   root->id, sn_op_name(root->op), SN_KER_MAX_ARGS - 1);
}

/* An access reading map m as a tensor of `like`'s shape, which broadcasts right-aligned into
 * the index space (root's shape). */
static sn_status push_access(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *root,
                             const sn_node *like, const view_map *m, sn_ref *ref) {
    int arg = arg_index(k, m->base);
    if (arg < 0 || b->n_access == SN_KER_MAX_ARGS) return too_many(s, root);
    sn_access a = {.arg = arg, .offset = m->offset, .masked = m->masked};
    int shift = root->rank - like->rank;
    for (int d = 0; d < root->rank; d++) {
        int dx = d - shift;
        a.stride[d] = dx >= 0 && like->shape[dx] == root->shape[d] ? m->stride[dx] : 0;
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
static sn_status concat_part(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *root,
                             const sn_node *n, int i, sn_ref *ref) {
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
    return push_access(s, k, b, root, n, &m, ref);
}

/* Appends the instructions computing n (its folded inputs first); returns its index or -1. */
static int add_instr(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *root, const sn_node *n) {
    sn_pw_instr in = {.node = n, .n_in = n->n_in};
    if (n->n_in > 3) {
        sn_fail(s->e, SN_ERR_UNSUPPORTED, "fuse: node %%%d (%s) has %d inputs; compiled pointwise "
                "kernels take at most 3 (concat of more parts is not supported yet)",
                n->id, sn_op_name(n->op), n->n_in);
        return -1;
    }
    for (int i = 0; i < n->n_in; i++) {
        sn_status st = n->op == SN_OP_CONCAT ? concat_part(s, k, b, root, n, i, &in.in[i])
                                             : add_operand(s, k, b, root, n->in[i], &in.in[i]);
        if (st) return -1;
    }
    if (b->n_instr == 64) {
        too_many(s, root);
        return -1;
    }
    b->instr[b->n_instr] = in;
    return b->n_instr++;
}

static sn_status add_operand(fuse_state *s, sn_kernel *k, pw_build *b, const sn_node *root,
                             const sn_node *x, sn_ref *ref) {
    if (!s->mat[x->id] && x->op == SN_OP_FULL) {
        *ref = (sn_ref){.kind = SN_REF_CONST, .value = x->a.f};
        return SN_OK;
    }
    if (!s->mat[x->id] && is_pw(x->op)) {
        int i = add_instr(s, k, b, root, x);
        if (i < 0) return s->e->code;
        *ref = (sn_ref){.kind = SN_REF_INSTR, .index = i};
        return SN_OK;
    }
    view_map m;
    bool through = x == root; /* a materialised view copying its input chain */
    if (!(through ? map_through(s, x, &m) : map_of(s, x, &m))) return not_strided(s, x);
    return push_access(s, k, b, root, x, &m, ref);
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

static sn_status pointwise_kernel(fuse_state *s, const sn_node *root) {
    sn_kernel *k = new_kernel(s, SN_KER_POINTWISE, root);
    pw_build *b = calloc(1, sizeof *b);
    SN_ASSERT(b);
    sn_status st = SN_OK;
    int top;
    if (is_view(root->op)) { /* a materialised view: a copy of what it views */
        sn_pw_instr copy = {.node = root, .n_in = 1};
        st = add_operand(s, k, b, root, root, &copy.in[0]);
        b->instr[b->n_instr] = copy;
        top = b->n_instr++;
    } else {
        top = add_instr(s, k, b, root, root);
        if (top < 0) st = s->e->code;
    }
    if (!st) {
        k->rank = root->rank;
        memcpy(k->shape, root->shape, sizeof k->shape);
        k->n_instr = b->n_instr;
        k->instr = sn_arena_alloc(&s->p->arena, sizeof(sn_pw_instr) * (size_t)b->n_instr);
        memcpy(k->instr, b->instr, sizeof(sn_pw_instr) * (size_t)b->n_instr);
        k->n_access = b->n_access;
        k->access = sn_arena_alloc(&s->p->arena, sizeof(sn_access) * (size_t)(b->n_access + 1));
        memcpy(k->access, b->access, sizeof(sn_access) * (size_t)b->n_access);
        k->store[0] = top;
        k->n_items = sn_numel(root);
        /* name after the ops in the group, most recent last */
        size_t len = strlen(k->name);
        for (int i = b->n_instr - 2; i >= 0 && len + 12 < sizeof k->name; i--) {
            len += (size_t)snprintf(k->name + len, sizeof k->name - len, "_%s", sn_op_name(b->instr[i].node->op));
        }
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

/* The attention_lse node that attention node n can compute in the same kernel (online
 * softmax gives both), or NULL: lse must be of n's own q and k and read by nothing before n. */
static const sn_node *fused_lse(const fuse_state *s, const sn_node *n) {
    if (n->op != SN_OP_ATTENTION) return NULL;
    const sn_node *lse = n->in[3];
    if (lse->op != SN_OP_ATTENTION_LSE || lse->in[0] != n->in[0] || lse->in[1] != n->in[1] ||
        lse->a.f != n->a.f)
        return NULL;
    for (int k = 0; k < s->n_users[lse->id]; k++)
        if (s->users[lse->id][k] < n->id) return NULL;
    return lse;
}

static bool lse_is_fused(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ATTENTION_LSE) return false;
    for (int k = 0; k < s->n_users[x->id]; k++)
        if (fused_lse(s, s->g->nodes[s->users[x->id][k]]) == x) return true;
    return false;
}

static void compute_kernel(fuse_state *s, const sn_node *n) {
    sn_kernel *k = new_kernel(s, compute_kind(n->op), n);
    k->anchor = n;
    if ((k->anchor2 = fused_lse(s, n))) {
        k->args[k->n_out++] = k->anchor2;
        snprintf(k->name, sizeof k->name, "k%d_attention_fwd", k->id);
    }
    for (int i = 0; i < n->n_in; i++) {
        SN_ASSERT(s->mat[n->in[i]->id]);
        if (n->in[i] == k->anchor2) continue;
        int at = arg_index(k, n->in[i]);
        SN_ASSERT(at >= 0); /* compute ops have at most 6 inputs */
    }
    const sn_node *x = n->in[0];
    switch (k->kind) {
    case SN_KER_ROW:
        k->n_items = x->rank ? sn_numel(x) / x->shape[x->rank - 1] : 1;
        k->serial = n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_LAYERNORM_BWD_W ||
                    n->op == SN_OP_RMSNORM_BWD_W;
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

sn_status sn_fuse(const sn_graph *g, sn_program **out, sn_err *e) {
    *out = NULL;
    int n = g->n_nodes;
    fuse_state s = {.g = g, .e = e};
    s.users = calloc((size_t)n, sizeof *s.users);
    s.n_users = calloc((size_t)n, sizeof *s.n_users);
    s.live = calloc((size_t)n, 1);
    s.mat = calloc((size_t)n, 1);
    s.is_out = calloc((size_t)n, 1);
    SN_ASSERT(s.users && s.n_users && s.live && s.mat && s.is_out);
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
    for (int i = n - 1; i >= 0; i--)
        s.mat[i] = s.live[i] && must_materialise(&s, g->nodes[i]);
    /* a view chain that is not strided materialises the view under the failing reshape */
    for (int i = 0; i < n; i++) {
        const sn_node *v = g->nodes[i];
        view_map m;
        if (s.live[i] && is_view(v->op) && !map_through(&s, v, &m)) s.mat[v->in[0]->id] = true;
    }

    sn_program *p = calloc(1, sizeof *p);
    SN_ASSERT(p);
    p->g = g;
    p->value_of = malloc(sizeof(int) * (size_t)n);
    p->kernels = calloc((size_t)n, sizeof *p->kernels);
    SN_ASSERT(p->value_of && p->kernels);
    s.p = p;
    make_values(&s);
    sn_status st = SN_OK;
    for (int i = 0; i < n && !st; i++) {
        const sn_node *x = g->nodes[i];
        if (!s.mat[i] || p->values[p->value_of[i]].alias >= 0) continue;
        if (x->op == SN_OP_INPUT || x->op == SN_OP_PARAM || x->op == SN_OP_CONST) continue;
        if (x->op == SN_OP_FULL) continue; /* filled when the program is loaded */
        if (lse_is_fused(&s, x)) continue; /* written by its attention node's kernel */
        if (is_compute(x->op)) compute_kernel(&s, x);
        else st = pointwise_kernel(&s, x);
    }
    for (int i = 0; i < n; i++) free(s.users[i]);
    free(s.users);
    free(s.n_users);
    free(s.live);
    free(s.mat);
    free(s.is_out);
    if (st) {
        sn_program_free(p);
        return st;
    }
    *out = p;
    return SN_OK;
}
