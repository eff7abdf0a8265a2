/* sink_views.c: the sink_views pass: a slice, pad or permute of a pointwise value read by
 * pointwise ops (a chain of permutes alone: read by anything) moves onto the value's operands, down to values with buffers (the value read
 * by that view alone, or only by views, each then making its own, or a cast, which is cheap to
 * make again), so that one
 * pointwise kernel reads those buffers through the views (fuse: accesses with offsets, strides
 * and pad masks) instead of storing the value and copying it. The case that matters: rotary
 * embeddings' backward (models/llama.c), whose rotate_half transposed is pads of slices of
 * dy * sin, added to dy * cos, then permuted from heads back to (B, T, h * D): four kernels
 * and three f32 values a projection, where the forward is one kernel. Exact: a slice or a
 * permute of an elementwise op is the op of the sliced or permuted operands; a pad only moves
 * onto an op that is 0 where its operands are (cast, add, sub, mul, neg, scale, tanh, GELU,
 * SiLU and their gradients), whose value at a padded position is then 0 as the pad's, and
 * only when every operand has the padded axis (none is broadcast along it). A cast of a reshape
 * of such a value goes under the reshape, so that it joins the value's kernel. */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

enum { MAX_CHAIN = 8 };

/* A chain of views, applied first to last: each a slice, pad or permute. */
typedef struct {
    int n;
    const sn_node *v[MAX_CHAIN];
} chain;

typedef struct {
    sn_rewrite r;
    const sn_graph *old;
    int *uses;
    bool *view_only; /* every use of the node is a slice, pad or permute */
    bool *pw_read;   /* every use of the node is pointwise, or a reshape whose are */
    int sunk;        /* pointwise ops made again over views of their operands */
} sink_state;

static bool is_sinkable_view(sn_op op) {
    return op == SN_OP_SLICE || op == SN_OP_PAD || op == SN_OP_PERMUTE;
}

/* Whether op is 0 where every operand is 0 (f(0, ..) = 0: a pad's zeros stay zeros). */
static bool zero_at_zero(sn_op op) {
    switch (op) {
    case SN_OP_CAST: case SN_OP_ADD: case SN_OP_SUB: case SN_OP_MUL: case SN_OP_NEG:
    case SN_OP_SCALE: case SN_OP_TANH: case SN_OP_GELU: case SN_OP_SILU: case SN_OP_GELU_BWD:
    case SN_OP_SILU_BWD:
        return true;
    default:
        return false;
    }
}

/* Whether the pads of c can move onto op (its value 0 where every operand is 0). */
static bool pads_pass(const chain *c, sn_op op) {
    for (int i = 0; i < c->n; i++)
        if (c->v[i]->op == SN_OP_PAD && !zero_at_zero(op)) return false;
    return true;
}

/* Operand o of pointwise x (rank R, o aligned to x's trailing axes) as the chain c of views of
 * x sees it: c adapted in out (the views o takes), or false when a pad falls on an axis o
 * broadcasts. *lift: a permute needs o at rank R (apply reshapes it first). A slice on an axis
 * o broadcasts is dropped: o is the same at every position of it. */
static bool adapt(const chain *c, const sn_node *x, const sn_node *o, chain *out, bool *lift) {
    int R = x->rank, lead = R - o->rank;
    *lift = false;
    for (int i = 0; i < c->n; i++)
        if (c->v[i]->op == SN_OP_PERMUTE && lead > 0) *lift = true;
    if (*lift) lead = 0; /* o reshaped to rank R: aligned axes are x's */
    /* the axes of x as each view sees them: permutes renumber the axes of the later views */
    int axis_of[SN_MAX_RANK]; /* x's axis at each position of the current view's input */
    for (int a = 0; a < R; a++) axis_of[a] = a;
    out->n = 0;
    for (int i = 0; i < c->n; i++) {
        const sn_node *v = c->v[i];
        if (v->op == SN_OP_PERMUTE) {
            int next[SN_MAX_RANK];
            for (int a = 0; a < R; a++) next[a] = axis_of[v->a.perm[a]];
            memcpy(axis_of, next, sizeof next);
            out->v[out->n++] = v;
            continue;
        }
        int xa = axis_of[v->a.axis], oa = xa - lead; /* o's axis, before any permute of o */
        bool bcast = oa < 0 || (*lift ? (xa < R - o->rank || o->shape[xa - (R - o->rank)] == 1)
                                       : o->shape[oa] == 1);
        if (bcast && x->shape[xa] != 1) {
            if (v->op == SN_OP_PAD) return false;
            continue; /* a slice along a broadcast axis: nothing to slice */
        }
        out->v[out->n++] = v;
    }
    return true;
}

/* n with the views of c applied, as new nodes (c adapted to n's rank, lifted if asked). Each
 * slice and pad keeps its axis as numbered in the view's own input, which is n's when n has
 * x's rank. */
static sn_node *apply(sink_state *s, const chain *c, sn_node *n, int rank, bool lift) {
    sn_graph *g = s->r.g;
    if (lift && n->rank < rank) {
        sn_shape sh = {.rank = rank};
        for (int a = 0; a < rank; a++) sh.d[a] = a < rank - n->rank ? 1 : n->shape[a - (rank - n->rank)];
        n = sn_reshape(g, n, sh);
    }
    int lead = rank - n->rank; /* axes of x that n does not have (no permute in c then) */
    for (int i = 0; i < c->n && n; i++) {
        const sn_node *v = c->v[i];
        if (v->op == SN_OP_PERMUTE) n = sn_permute(g, n, v->a.perm);
        else if (v->op == SN_OP_SLICE) n = sn_slice(g, n, v->a.axis - lead, v->a.start, v->a.end);
        else n = sn_pad(g, n, v->a.axis - lead, v->a.start, v->a.end);
    }
    return n;
}

/* The chain of views that nothing else reads from x down (x's own first), ending at *base. */
static void chain_of(const sink_state *s, const sn_node *x, chain *c, const sn_node **base) {
    c->n = 0;
    const sn_node *v = x;
    while (is_sinkable_view(v->op) && c->n < MAX_CHAIN && (v == x || s->uses[v->id] == 1)) {
        c->v[c->n++] = v;
        v = v->in[0];
    }
    *base = v;
    /* first applied first: the innermost view */
    for (int i = 0; i < c->n / 2; i++) {
        const sn_node *t = c->v[i];
        c->v[i] = c->v[c->n - 1 - i];
        c->v[c->n - 1 - i] = t;
    }
}

/* Whether x is read by others than the views moving onto it: a cast, made again for them
 * (a cast is a load's widening), its operand not (sink does not go past it). */
static bool shared_cast(const sink_state *s, const sn_node *x) {
    return s->uses[x->id] != 1 && !s->view_only[x->id] && x->op == SN_OP_CAST;
}

/* Whether a GEMM stores x's 16-bit cast: x a product, or a product plus the widened 16-bit
 * matrix its GEMM adds as C (kernel.h accum: a LoRA base and its adapters' product, joined for
 * several projections by passes/siblings.c). */
static bool stored_by_gemm(const sn_node *x) {
    if (x->op == SN_OP_MATMUL) return true;
    if (x->op != SN_OP_ADD) return false;
    for (int i = 0; i < 2; i++) {
        const sn_node *c = x->in[1 - i];
        if (x->in[i]->op == SN_OP_MATMUL && c->op == SN_OP_CAST && c->dtype == SN_F32 &&
            c->in[0]->dtype != SN_F32)
            return true;
    }
    return false;
}

/* Whether the chain c can move onto pointwise x: x read by nothing but c, or only by views
 * (each then gets its own x, and x itself none), or a shared cast; and every pad of c passes
 * x's op. Not onto a dropout (its mask is of its own elements' indices), nor onto the 16-bit
 * cast of a product (or of its sum with its GEMM's C), which its GEMM stores (kernel.h: the
 * rounding epilogue; LLaMA's q, k, v made as one product and read as slices: each slice's own
 * cast would leave the product f32). */
static bool sinks(const sink_state *s, const chain *c, const sn_node *x) {
    if (x->op == SN_OP_CAST && x->dtype != SN_F32 && stored_by_gemm(x->in[0])) return false;
    return c->n > 0 && sn_op_kind(x->op) == SN_K_POINTWISE && x->op != SN_OP_DROPOUT && x->n_in > 0 &&
           (s->uses[x->id] == 1 || s->view_only[x->id] || shared_cast(s, x)) && pads_pass(c, x->op);
}

static sn_node *sink(sink_state *s, const chain *c, const sn_node *x);

static bool feasible(const sink_state *s, const chain *c, const sn_node *x);

/* Old operand o of a pointwise op of rank `rank`, seen through the views c (adapted to o; its
 * axes numbered as the op's): o's own views that nothing else reads join c when o has the
 * op's rank, and the whole moves onto o's pointwise base where it can; else c applies to o. */
static sn_node *operand(sink_state *s, const chain *c, const sn_node *o, int rank, bool lift,
                        bool deeper) {
    if (deeper && !lift && o->rank == rank && c->n > 0) {
        if (is_sinkable_view(o->op) && s->uses[o->id] == 1) {
            chain own, all = {0};
            const sn_node *base;
            chain_of(s, o, &own, &base);
            for (int i = 0; i < own.n; i++) all.v[all.n++] = own.v[i];
            for (int i = 0; i < c->n && all.n < MAX_CHAIN; i++) all.v[all.n++] = c->v[i];
            if (all.n == own.n + c->n && feasible(s, &all, base)) return sink(s, &all, base);
        } else if (feasible(s, c, o)) {
            return sink(s, c, o);
        }
    }
    return apply(s, c, s->r.map[o->id], rank, lift);
}

/* Pointwise x seen through c, as x of its operands seen through c (new nodes). */
static sn_node *sink(sink_state *s, const chain *c, const sn_node *x) {
    sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&s->r, x, ins);
    for (int j = 0; j < x->n_in; j++) {
        chain cj;
        bool lift;
        adapt(c, x, x->in[j], &cj, &lift);
        /* feasible(c, x) made sure; a shared cast's operand is read through the views as it is */
        ins[j] = operand(s, &cj, x->in[j], x->rank, lift, !shared_cast(s, x));
    }
    s->sunk++;
    return sn_rewrite_emit(&s->r, NULL, &p);
}

/* Whether every operand of pointwise x takes the chain c (no pad along a broadcast axis),
 * down through the operands it would move onto. */
static bool feasible(const sink_state *s, const chain *c, const sn_node *x) {
    if (!sinks(s, c, x)) return false;
    for (int j = 0; j < x->n_in; j++) {
        chain cj;
        bool lift;
        if (!adapt(c, x, x->in[j], &cj, &lift)) return false;
    }
    return true;
}

/* Whether x is a unary pointwise op (a cast) of a reshape, read by x alone, of a pointwise
 * value: x goes under the reshape (the reshape of x's result), so that it joins the value's
 * kernel, whose index space is the value's shape (the rotation's f32 sum and its bf16 cast). */
static bool under_reshape(const sink_state *s, const sn_node *x) {
    const sn_node *r = x->n_in == 1 ? x->in[0] : NULL;
    if (!r || sn_op_kind(x->op) != SN_K_POINTWISE || r->op != SN_OP_RESHAPE || s->uses[r->id] != 1)
        return false;
    const sn_node *v = s->r.g && s->r.map[r->in[0]->id] ? s->r.map[r->in[0]->id] : r->in[0];
    return sn_op_kind(v->op) == SN_K_POINTWISE; /* as the views moved so far made it */
}

/* Whether chain c is permutes alone: the pointwise value under it is then made in the permuted
 * order whoever reads the chain's top (a product, after the cast of a rotated gradient to
 * its 16-bit dtype), instead of stored and copied. */
static bool permutes(const chain *c) {
    for (int i = 0; i < c->n; i++)
        if (c->v[i]->op != SN_OP_PERMUTE) return false;
    return c->n > 0;
}

sn_status sn_pass_sink_views(const sn_graph *in, sn_graph **out, int *n_sunk, sn_err *e) {
    *out = NULL;
    *n_sunk = 0;
    sink_state s = {.old = in};
    int n = in->n_nodes;
    if (!(s.uses = sn_graph_use_counts(in, e))) return SN_ERR_OOM;
    s.view_only = sn_calloc((size_t)n + 1, sizeof *s.view_only, "the sink_views pass", e);
    s.pw_read = s.view_only ? sn_calloc((size_t)n + 1, sizeof *s.pw_read, "the sink_views pass", e) : NULL;
    int *views = s.pw_read ? sn_calloc((size_t)n + 1, sizeof *views, "the sink_views pass", e) : NULL;
    int *pws = views ? sn_calloc((size_t)n + 1, sizeof *pws, "the sink_views pass", e) : NULL;
    if (!pws) {
        free(s.uses);
        free(s.view_only);
        free(s.pw_read);
        free(views);
        return SN_ERR_OOM;
    }
    for (int i = n - 1; i >= 0; i--) { /* readers come after: their pw_read is known */
        const sn_node *u = in->nodes[i];
        s.pw_read[i] = s.uses[i] > 0 && pws[i] == s.uses[i];
        s.view_only[i] = s.uses[i] > 0 && views[i] == s.uses[i];
        for (int j = 0; j < u->n_in; j++) {
            views[u->in[j]->id] += is_sinkable_view(u->op);
            pws[u->in[j]->id] += sn_op_kind(u->op) == SN_K_POINTWISE ||
                                 (u->op == SN_OP_RESHAPE && s.pw_read[i]);
        }
    }
    free(views);
    free(pws);
    /* the tops of chains that move: a view whose chain ends at a pointwise value */
    bool any = false;
    for (int i = 0; i < in->n_nodes && !any; i++) {
        const sn_node *x = in->nodes[i], *base;
        if (under_reshape(&s, x)) any = true;
        if (!is_sinkable_view(x->op)) continue; /* a chain's top, read by pointwise ops */
        chain c;
        chain_of(&s, x, &c, &base);
        any = ((s.pw_read[i] || permutes(&c)) && feasible(&s, &c, base)) || under_reshape(&s, x);
    }
    if (!any || sn_rewrite_begin(&s.r, in, e)) {
        free(s.uses);
        free(s.view_only);
        free(s.pw_read);
        return any ? SN_ERR_OOM : SN_OK;
    }
    for (int i = 0; i < in->n_nodes; i++) {
        const sn_node *x = in->nodes[i], *base;
        chain c;
        sn_node *y = NULL;
        if (is_sinkable_view(x->op)) {
            chain_of(&s, x, &c, &base);
            if ((s.pw_read[i] || permutes(&c)) && feasible(&s, &c, base)) y = sink(&s, &c, base);
        } else if (under_reshape(&s, x)) {
            sn_node *ins[1], p = sn_rewrite_proto(&s.r, x, ins);
            ins[0] = s.r.map[x->in[0]->in[0]->id];
            y = sn_rewrite_emit(&s.r, NULL, &p);
            y = y ? sn_reshape(s.r.g, y, sn_shape_of(x)) : NULL;
            s.sunk += y != NULL;
        }
        if (y) s.r.map[x->id] = y;
        else sn_rewrite_copy(&s.r, x);
    }
    free(s.uses);
    free(s.view_only);
    free(s.pw_read);
    *n_sunk = s.sunk;
    return sn_rewrite_end(&s.r, "sink_views", out, e);
}
