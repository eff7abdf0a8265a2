/* fuse.c: the fuse pass's driver (sn_fuse) and its decisions: which nodes get a buffer and
 * which kernel each node joins. Convention: in reverse graph order, a node joins the kernel of its
 * earliest reader when that reader can compute it there and every other reader runs later, else
 * it roots a kernel of its own; kernels are then built in graph order, each at its root. */
#include <limits.h>
#include <stdlib.h>

#include "fuse_int.h"
#include "passes.h"

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
    const sn_node *a = s->anchor[G]; /* the classifier's loss reads its logits as its anchor does */
    if (u->op == SN_OP_CROSS_ENTROPY && a && a->op == SN_OP_CROSS_ENTROPY_BWD &&
        s->home[u->id] == G && u->in[0] == n && a->in[0] == n)
        u = a;
    if (!is_row(u->op) || s->anchor[G] != u || !same_squeezed(n, u->in[0])) return false;
    for (int i = 0; i < u->n_in; i++)
        if (u->in[i] == n && !sn_row_operand_per_element(u->op, i)) return false;
    return true;
}

void sn_fuse_make_root(fuse_state *s, const sn_node *n) {
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
        sn_fuse_make_root(s, n);
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
        sn_fuse_make_root(s, n);
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
 * both), or NULL: a live one (a dead attention has no kernel: a graph fuzzed into one whose
 * attention_bwd_k read q for o left its lse computed by none), of lse's own q and k, and
 * nothing reads lse before it. */
static const sn_node *lse_owner(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ATTENTION_LSE) return NULL;
    for (int k = 0; k < s->n_users[x->id]; k++) {
        const sn_node *n = s->g->nodes[s->users[x->id][k]];
        if (n->op != SN_OP_ATTENTION || !s->live[n->id] || n->in[3] != x || n->in[0] != x->in[0] || n->in[1] != x->in[1] ||
            n->a.f != x->a.f)
            continue;
        bool first = true;
        for (int j = 0; j < s->n_users[x->id]; j++)
            if (s->users[x->id][j] < n->id) first = false;
        if (first) return n;
    }
    return NULL;
}

/* Whether attention ops a and b read the same six inputs with the same scale. */
static bool same_inputs_scale(const sn_node *a, const sn_node *b) {
    bool same = a->a.f == b->a.f;
    for (int i = 0; i < 6 && same; i++) same = a->in[i] == b->in[i];
    return same;
}

/* The attention_bwd_k node whose kernel also writes attention_bwd_v x (one pass over the scores
 * gives dk and dv), or NULL: the same six inputs and scale, nothing reads x before it, and x is
 * the first live attention_bwd_v of them (a kernel writes one dv: a second one has a kernel of
 * its own; a graph fuzzed into two once left the second computed by none). */
static const sn_node *dv_owner(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_ATTENTION_BWD_V) return NULL;
    const sn_node *q = x->in[0];
    for (int k = 0; k < s->n_users[q->id]; k++) {
        const sn_node *y = s->g->nodes[s->users[q->id][k]];
        if (y != x && y->op == SN_OP_ATTENTION_BWD_V && s->live[y->id] && y->id < x->id &&
            same_inputs_scale(y, x))
            return NULL;
    }
    for (int k = 0; k < s->n_users[q->id]; k++) {
        const sn_node *n = s->g->nodes[s->users[q->id][k]];
        if (n->op != SN_OP_ATTENTION_BWD_K || !s->live[n->id] || n->id > x->id || !same_inputs_scale(n, x))
            continue;
        bool same = true;
        for (int j = 0; j < s->n_users[x->id] && same; j++)
            if (s->users[x->id][j] < n->id) same = false;
        if (same) return n;
    }
    return NULL;
}

/* The cross_entropy_bwd whose kernel also computes cross_entropy x (kernel.h: the
 * classifier), or NULL: a live one of the same logits, targets and attributes, in a kernel of
 * its own as its row op, and nothing reads x before that kernel runs (not its dloss). */
static const sn_node *loss_owner(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_CROSS_ENTROPY) return NULL;
    const sn_node *lg = x->in[0];
    for (int k = 0; k < s->n_users[lg->id]; k++) {
        const sn_node *n = s->g->nodes[s->users[lg->id][k]];
        if (n->op != SN_OP_CROSS_ENTROPY_BWD || !s->live[n->id] || n->in[0] != lg ||
            n->in[1] != x->in[1] || n->a.end != x->a.end || n->a.ignore_index != x->a.ignore_index)
            continue;
        int G = s->home[n->id];
        if (G < 0 || (G != n->id && s->anchor[G] != n)) continue;
        bool later = true;
        for (int j = 0; j < s->n_users[x->id] && later; j++) {
            const sn_node *u = s->g->nodes[s->users[x->id][j]];
            later = !s->live[u->id] || read_pos(s, u) > G;
        }
        if (later) return n;
    }
    return NULL;
}

/* Whether compute op u may read operand x through a strided view of x's buffer instead of a
 * copy: q, k, v, o and dout of the attention ops (not lse), which the attention kernels index
 * by (item, row) strides (kernel.h); a matmul's slices of a value's last axis (kernel.h: the
 * GEMM's operand views; not an NF4 weight's product, which may be the few-row product reading
 * its x whole: fuse_gemv.c leaves a view without a buffer to a GEMM). */
static bool in_place_operand(const sn_node *u, const sn_node *x) {
    if (u->op == SN_OP_MATMUL && is_view(x->op) && u->in[1]->op != SN_OP_DEQUANT_NF4) {
        for (int i = 0; i < 2; i++) {
            const sn_node *base;
            sn_gemm_view v;
            if (u->in[i] == x && (!sn_gemm_operand_view(u, i, &base, &v) || is_view(base->op)))
                return false;
        }
        return true;
    }
    if (sn_op_kind(u->op) != SN_K_ATTENTION || !is_view(x->op)) return false;
    for (int i = 0; i < u->n_in; i++) {
        bool lse = (u->op == SN_OP_ATTENTION && i == 3) || (u->op != SN_OP_ATTENTION_CACHE && i == 5);
        if (u->in[i] == x && lse) return false;
    }
    return true;
}

/* Whether a live attention op reads view v in place. */
static bool read_by_attention(const fuse_state *s, const sn_node *v) {
    for (int k = 0; k < s->n_users[v->id]; k++) {
        const sn_node *u = s->g->nodes[s->users[v->id][k]];
        if (s->live[u->id] && in_place_operand(u, v)) return true;
    }
    return false;
}

/* Whether view v (map m), an attention operand read in place, is the one such operand on its
 * buffer and less than half of it: LLaMA's v among the columns of q, k and v made one product
 * (passes/siblings.c), whose q and k the rotation reads into values of their own. Read in
 * place, v would keep the whole product from the forward to the attention's backward; its copy
 * keeps v alone (tinyllama-1.1b at B=4 T=2048: 40 MB a layer less). GPT-2's q, k and v, all
 * three read in place from one product, stay views. */
static bool lone_part(const fuse_state *s, const sn_node *v, const view_map *m) {
    if (sn_numel(m->base) <= 2 * sn_numel(v)) return false;
    for (int j = 0; j < s->g->n_nodes; j++) {
        const sn_node *w = s->g->nodes[j];
        view_map o;
        if (w != v && s->live[j] && is_view(w->op) && !s->mat[j] && read_by_attention(s, w) &&
            sn_fuse_map_of(s, w, &o) && o.base == m->base)
            return false;
    }
    return true;
}

/* The rows of a row op's first input. */
static int64_t rows_of(const sn_node *x) { return x->rank ? sn_numel(x) / x->shape[x->rank - 1] : 1; }

/* Whether the members of kernel h (fuse state) are only f32 casts of 16-bit values that h alone
 * reads, no result of theirs stored: the prologue of a norm weight gradient widening its bf16
 * dy (the upcast pass), whose kernel stores nothing but the sum. */
static bool only_widening(const fuse_state *s, int h) {
    int casts = 0;
    for (int j = 0; j < s->g->n_nodes && casts < s->members[h]; j++) {
        const sn_node *c = s->g->nodes[j];
        if (j == h || s->home[j] != h || !s->live[j] || c->op == SN_OP_SUM) continue;
        if (c->op != SN_OP_CAST || c->dtype != SN_F32 || sn_dtype_bits(c->in[0]->dtype) != 16 ||
            s->mat[j] || s->n_users[j] != 1 || s->users[j][0] != h)
            return false;
        casts++;
    }
    return casts == s->members[h];
}

/* The 16-bit value v whose f32 cast (*cast) a column sum x reads through reshapes that
 * nothing else reads, where the sum can load v and widen it (colsum_widens), or NULL. */
static const sn_node *widened(const fuse_state *s, const sn_node *x, const sn_node **cast) {
    const sn_node *b = x->in[0];
    for (;; b = b->in[0]) {
        int readers = 0;
        for (int k = 0; k < s->n_users[b->id]; k++) readers += s->live[s->users[b->id][k]];
        if (readers != 1 || s->is_out[b->id]) return NULL;
        if (b->op != SN_OP_RESHAPE) break;
    }
    if (b->n_in < 1) return NULL; /* a sum of an input or a parameter: no cast to look through */
    const sn_node *v = b->in[0];
    if (b->op != SN_OP_CAST || b->dtype != SN_F32 || (v->dtype != SN_BF16 && v->dtype != SN_F16) ||
        is_view(v->op) || !s->mat[v->id] || s->home[b->id] != b->id)
        return NULL;
    *cast = b;
    return v;
}

/* The norm weight-gradient kernel (kernel.h: n_colsum) that also computes x, a column sum over
 * axis 0 of a buffer (R, C) (a bias gradient, a layernorm's dbeta), or NULL: the first such
 * kernel, over the same R rows and with nothing fused into it but casts widening its operands
 * (only_widening), that runs after x's operand is written and before anything reads x, with
 * room for one more output and input. */
static const sn_node *colsum_host(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_SUM) return NULL;
    const sn_node *src = x->in[0], *b = src;
    if (x->a.axis != 0 || src->rank != 2 || x->dtype != SN_F32 ||
        src->dtype != SN_F32 || s->home[x->id] != x->id || !s->mat[src->id])
        return NULL;
    while (is_alias(s, b)) b = b->in[0];
    const sn_node *cast, *v = widened(s, x, &cast);
    if (v && !s->members[cast->id]) b = v; /* read widened: ready once v is (its kernel) */
    int ready = is_leaf(b->op) || b->op == SN_OP_FULL ? -1 : s->home[b->id];
    if (ready < 0 && !is_leaf(b->op) && b->op != SN_OP_FULL) return NULL;
    if (ready >= 0) ready = sn_fuse_kernel_pos(s, ready); /* a GEMM's: at its epilogue's end */
    int first_read = s->g->n_nodes;
    for (int k = 0; k < s->n_users[x->id]; k++) {
        const sn_node *u = s->g->nodes[s->users[x->id][k]];
        int p = s->live[u->id] ? read_pos(s, u) : INT_MAX;
        if (p < first_read) first_read = p;
    }
    for (int h = ready + 1; h < first_read; h++) {
        const sn_node *H = s->g->nodes[h];
        if (!s->live[h] || (H->op != SN_OP_LAYERNORM_BWD_W && H->op != SN_OP_RMSNORM_BWD_W) ||
            s->home[h] != h || !only_widening(s, h) || rows_of(H->in[0]) != src->shape[0])
            continue;
        int sums = 0; /* outputs 1 + sums, inputs at most 2 + sums */
        for (int j = 0; j < s->g->n_nodes; j++)
            sums += j != h && s->home[j] == h && s->g->nodes[j]->op == SN_OP_SUM;
        if (3 + 2 * (sums + 1) <= SN_KER_MAX_ARGS) return H;
    }
    return NULL;
}

/* Column sum x, which joined a norm weight-gradient kernel, of the f32 cast of a 16-bit value v
 * with a buffer (through reshapes), where nothing else reads the cast or the reshapes: the
 * kernel reads v and widens each element as it loads it (exact: the same sums), so the cast
 * is never stored. A bias gradient is the column sum of the cast of the 16-bit gradient the
 * products read (the GELU's, the QKV concatenation's): half the bytes, one pass fewer. */
static void colsum_widens(fuse_state *s, const sn_node *x) {
    const sn_node *b, *v = widened(s, x, &b);
    if (!v) return;
    if (s->members[b->id]) { /* b roots the pointwise kernel that stores v: v roots it instead */
        if (s->home[v->id] != b->id || s->anchor[b->id]) return;
        for (int j = v->id + 1; j < b->id; j++)
            if (s->home[j] == b->id) return; /* a member after v */
        bool extra = false;
        for (int j = 0; j < v->id; j++)
            if (s->home[j] == b->id) {
                s->home[j] = v->id;
                extra |= s->mat[j];
            }
        s->home[v->id] = v->id;
        s->members[v->id] = s->members[b->id] - 1;
        s->extra[v->id] = extra;
        s->space[v->id] = v;
        s->anchor[v->id] = NULL;
        s->members[b->id] = 0;
    }
    for (const sn_node *c = x->in[0];; c = c->in[0]) {
        s->mat[c->id] = false;
        s->home[c->id] = -1;
        if (c == b) break;
    }
    s->read_as[x->id] = v;
}

/* The root of the kernel that computes x, a cast with a kernel of its own, as one more output
 * (its epilogue), or -1: x's operand is computed by a pointwise or row kernel over x's elements
 * whose row op gives one result per element (the residual gradient after layernorm_bwd, the
 * GELU gradient: their bf16 copies for the products then cost no pass of their own). */
static int cast_host(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_CAST || s->home[x->id] != x->id || s->members[x->id] || is_shadow(s, x) ||
        s->into[x->id])
        return -1;
    const sn_node *v = x->in[0];
    int R = is_view(v->op) || is_leaf(v->op) ? -1 : s->home[v->id];
    /* not into a weight shadow's kernel: it runs apart from the step (f32(bf16(bias)), the BIAS
     * epilogue's reading of a bias, must be computed in the step) */
    if (R < 0 || R >= x->id || s->solo[R] || s->into[R] || is_shadow(s, s->g->nodes[R])) return -1;
    const sn_node *r = s->g->nodes[R], *a = s->anchor[R];
    if (!is_pw(r->op) && !is_row(r->op)) return -1; /* a GEMM, attention, reduction, copy */
    if (r->op == SN_OP_CONCAT || (a && (!sn_row_result_per_element(a->op) || a->op == SN_OP_CROSS_ENTROPY)))
        return -1;
    return s->space[R] && same_squeezed(x, s->space[R]) ? R : -1;
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
        s->into[i] = NULL;
        s->read_as[i] = NULL;
    }
    for (int i = 0; i < n; i++) {
        const sn_node *x = g->nodes[i];
        if (!s->live[i]) continue;
        if (is_leaf(x->op) || frozen_block(s, x)) s->mat[i] = true;
        if (!is_view(x->op)) continue;
        if (!is_view(x->in[0]->op)) s->mat[x->in[0]->id] = true;
        s->mat[i] = s->mat[i] || s->is_out[i];
        for (int k = 0; k < s->n_users[i]; k++) {
            const sn_node *u = g->nodes[s->users[i][k]];
            if (s->live[u->id] && is_compute(u->op) && !in_place_operand(u, x)) s->mat[i] = true;
        }
    }
    /* a view chain that is not strided materialises the view under the failing reshape */
    for (int i = 0; i < n; i++) {
        const sn_node *v = g->nodes[i];
        view_map m;
        if (s->live[i] && is_view(v->op) && !sn_fuse_map_through(s, v, &m))
            s->mat[v->in[0]->id] = true;
    }
    /* a concatenation's part read through a pad (a masked map: LoRA's block-diagonal B,
       passes/siblings.c) is copied into a buffer of its own: an access has one mask, and the
       concatenation's is along its axis */
    for (int i = 0; i < n; i++) {
        const sn_node *c = g->nodes[i];
        if (!s->live[i] || c->op != SN_OP_CONCAT) continue;
        for (int k = 0; k < c->n_in; k++) {
            const sn_node *x = c->in[k];
            view_map m;
            if (is_view(x->op) && !s->mat[x->id] && sn_fuse_map_of(s, x, &m) && m.masked)
                s->mat[x->id] = true;
        }
    }
    /* an attention operand read in place must map onto its buffer with unit stride along the
     * head and no mask; otherwise it is copied after all */
    for (int i = 0; i < n; i++) {
        const sn_node *v = g->nodes[i];
        view_map m;
        if (!s->live[i] || !is_view(v->op) || s->mat[i] || !read_by_attention(s, v)) continue;
        if (!sn_fuse_map_of(s, v, &m) || m.masked || m.stride[v->rank - 1] != 1 ||
            lone_part(s, v, &m))
            s->mat[i] = true;
    }
    for (int i = 0; i < n; i++) /* a view with a buffer of its own is a copy kernel */
        if (s->live[i] && is_view(g->nodes[i]->op) && s->mat[i] && !is_alias(s, g->nodes[i]))
            s->home[i] = i;
    for (int i = n - 1; i >= 0; i--) /* attention outputs written into a concatenation */
        if (s->live[i]) sn_fuse_concat_into(s, g->nodes[i]);
    for (int i = n - 1; i >= 0; i--) {
        const sn_node *x = g->nodes[i], *owner;
        if (!s->live[i] || is_leaf(x->op) || is_view(x->op) || frozen_block(s, x)) continue;
        if (s->into[i] && !sn_fuse_is_att_out(x->op)) continue; /* the concatenation: settle_into */
        if (x->op == SN_OP_FULL) { /* folded as a constant into pointwise readers */
            s->mat[i] = s->mat[i] || s->is_out[i];
            for (int k = 0; k < s->n_users[i]; k++) {
                const sn_node *u = g->nodes[s->users[i][k]];
                if (s->live[u->id] && (!is_pw(u->op) || u->op == SN_OP_CONCAT)) s->mat[i] = true;
            }
            continue;
        }
        if (x->op == SN_OP_DROPOUT) { /* roots its pointwise kernel: its index space is the
                                         dropout's elements, whose indices its mask reads, and
                                         no row op or stored value joins it (solo) */
            sn_fuse_make_root(s, x);
            s->solo[i] = true;
            continue;
        }
        if (is_shadow(s, x)) { /* its own cast kernel, set apart from the step's (build) */
            sn_fuse_make_root(s, x);
            continue;
        }
        if ((owner = lse_owner(s, x)) || (owner = dv_owner(s, x))) { /* written by its
                                                                        attention node's kernel */
            s->mat[i] = true;
            s->home[i] = owner->id;
            continue;
        }
        if ((owner = loss_owner(s, x))) { /* the classifier: computed by its backward's kernel */
            s->mat[i] = true;
            s->home[i] = s->home[owner->id];
            continue;
        }
        if (sn_fuse_gemm_result(s, x)) sn_fuse_make_root(s, x); /* a GEMM stores it */
        else join_or_root(s, x);
    }
    sn_fuse_settle_into(s);
    for (int i = 0; i < n; i++) /* the attention forward's o written into its permute */
        if (s->live[i]) sn_fuse_fwd_into(s, g->nodes[i]);
    sn_fuse_gemv_decide(s); /* a dequantize into the one product of few rows reading it */
    for (int i = 0; i < n; i++) /* a bias add, or a cast, joins the GEMM before it */
        if (s->live[i] && !sn_fuse_is_gemv(s, g->nodes[i])) sn_fuse_gemm_epilogue(s, g->nodes[i]);
    /* column sums join a norm weight-gradient kernel over the same rows (kernel.h) */
    for (int i = 0; i < n; i++) {
        const sn_node *h = s->live[i] ? colsum_host(s, g->nodes[i]) : NULL;
        if (h) s->home[i] = h->id;
        if (h) colsum_widens(s, g->nodes[i]);
    }
    /* casts join the kernel that computes their operand (in graph order: a cast of such a
       cast follows it there too) */
    for (int i = 0; i < n; i++) {
        int R = s->live[i] ? cast_host(s, g->nodes[i]) : -1;
        if (R < 0) continue;
        s->home[i] = R;
        s->members[R]++;
        s->extra[R] = true;
    }
}

/* ---- the driver ---- */

/* Whether x is a dequantize read only by matmuls: its kernel is made right before theirs
 * (after the kernels of the GEMM's epilogue's position), so the unpacked weights live over the
 * two kernels alone. */
static bool dequant_for_gemm(const fuse_state *s, const sn_node *x) {
    if (x->op != SN_OP_DEQUANT_NF4 || s->is_out[x->id] || !s->n_users[x->id] ||
        s->home[x->id] != x->id) /* not in a few-row product (fuse_gemv.c) */
        return false;
    for (int k = 0; k < s->n_users[x->id]; k++)
        if (s->g->nodes[s->users[x->id][k]]->op != SN_OP_MATMUL) return false;
    return true;
}

/* Decides, then makes the kernels in graph order. SN_OK, or the failure of a kernel that
 * cannot be built (s->overflowed names it when it ran out of room). */
static sn_status build(fuse_state *s) {
    const sn_graph *g = s->g;
    int n = g->n_nodes;
    decide(s);
    s->overflowed = -1;
    const char *what = "the fuse pass's program";
    sn_program *p = s->p = sn_calloc(1, sizeof *p, what, s->e);
    if (!p || !(p->value_of = sn_malloc(sizeof(int) * (size_t)n, what, s->e)) ||
        !(p->kernels = sn_calloc(2 * (size_t)n + 1, /* a FINISH kernel at most per node */ sizeof *p->kernels, what, s->e)))
        return SN_ERR_OOM;
    p->g = g;
    sn_status st = sn_fuse_make_values(s);
    /* a GEMM kernel with an epilogue is made where its last node is: it reads the epilogue's
     * inputs (a bias cast after the matmul) */
    int *last = sn_malloc(sizeof(int) * 2 * (size_t)n, what, s->e), *ends = last + n;
    if (!last) return SN_ERR_OOM;
    for (int i = 0; i < n; i++) last[i] = i, ends[i] = -1;
    for (int i = 0; i < n; i++)
        if (s->live[i] && s->home[i] >= 0 && g->nodes[s->home[i]]->op == SN_OP_MATMUL)
            last[s->home[i]] = i;
    for (int i = 0; i < n; i++)
        if (last[i] != i) ends[last[i]] = i;
    for (int at = 0; at < n && !st; at++) {
        int i = ends[at] >= 0 ? ends[at] : at; /* the GEMM whose epilogue ends here */
        if (ends[at] < 0 && last[at] != at) continue; /* made at its epilogue's last node */
        const sn_node *x = g->nodes[i];
        if (!s->live[i] || s->home[i] != i || is_shadow(s, x)) continue; /* not the root of a
                                                                          kernel of the step */
        if (dequant_for_gemm(s, x)) continue; /* made with its GEMM, below */
        for (int j = 0; x->op == SN_OP_MATMUL && j < x->n_in && !st; j++)
            if (dequant_for_gemm(s, x->in[j]) && s->users[x->in[j]->id][0] == i &&
                (j == 0 || x->in[0] != x->in[1])) /* before its first reader */
                st = sn_fuse_compute_kernel(s, x->in[j]);
        if (st) break;
        if (is_view(x->op)) st = sn_fuse_copy_kernel(s, x);
        else if (is_compute(x->op) && (!is_row(x->op) || !s->members[i]))
            st = sn_fuse_compute_kernel(s, x);
        else st = sn_fuse_group_kernel(s, x);
        sn_kernel *k = st ? NULL : p->kernels[p->n_kernels - 1];
        if (k && k->kind == SN_KER_ROW && sn_fuse_sums_rows(k->anchor->op))
            st = sn_fuse_split_sum(s, k); /* and its FINISH kernel */
        for (int j = 0; k && !st && k->anchor && k->anchor->op == SN_OP_CROSS_ENTROPY_BWD && j < i; j++)
            if (s->live[j] && s->home[j] == i && g->nodes[j]->op == SN_OP_CROSS_ENTROPY)
                st = sn_fuse_classifier(s, k, g->nodes[j]); /* and its FINISH kernel */
        if (k && !st && k->kind == SN_KER_GATHER && k->anchor->op == SN_OP_EMBEDDING_BWD)
            st = sn_fuse_split_gather(s, k); /* and its ROWS kernel */
        if (k && !st) sn_fuse_thin(s, k); /* a GEMM of few columns: a generated kernel */
        if (k && !st && (s->t->split_decode || k->kind == SN_KER_THIN) && sn_split_parts(k) > 1)
            st = sn_fuse_split_decode(s, k); /* and its FINISH kernel (the thin sum's always) */
    }
    if (!st) st = sn_fuse_norm_pairs(s); /* a norm's dx with its weight gradient's sums */
    if (!st && s->t->att_dq_atomic) st = sn_fuse_att_dq_atomic(s); /* dq with dk and dv */
    if (!st && s->t->att_dkv_parts) st = sn_fuse_att_dkv_parts(s); /* grouped-query dk, dv */
    /* the weight shadows' cast kernels, after the step's and set apart from them */
    int n_step = p->n_kernels;
    for (int i = 0; i < n && !st; i++)
        if (s->live[i] && is_shadow(s, g->nodes[i])) st = sn_fuse_group_kernel(s, g->nodes[i]);
    p->shadows = p->kernels + n_step;
    p->n_shadows = p->n_kernels - n_step;
    p->n_kernels = n_step;
    free(last);
    if (!st) st = sn_fuse_check_order(s);
    return st;
}

/* The per-node tables of sn_fuse (any of them may be NULL). */
static void free_tables(fuse_state *s, int n) {
    for (int i = 0; s->users && i < n; i++) free(s->users[i]);
    free(s->users);
    free(s->n_users);
    free(s->live);
    free(s->mat);
    free(s->is_out);
    free(s->home);
    free(s->anchor);
    free(s->space);
    free(s->members);
    free(s->extra);
    free(s->solo);
    free(s->into);
    free(s->read_as);
}

sn_status sn_fuse(const sn_graph *g, const sn_target *t, bool shadows, sn_program **out, sn_err *e) {
    *out = NULL;
    int n = g->n_nodes;
    fuse_state s = {.g = g, .e = e, .shadows = shadows, .t = t};
    const char *what = "the fuse pass's per-node tables";
    s.users = sn_calloc((size_t)n, sizeof *s.users, what, e);
    s.n_users = sn_calloc((size_t)n, sizeof *s.n_users, what, e);
    s.live = sn_calloc((size_t)n, 1, what, e);
    s.mat = sn_calloc((size_t)n, 1, what, e);
    s.is_out = sn_calloc((size_t)n, 1, what, e);
    s.home = sn_calloc((size_t)n, sizeof *s.home, what, e);
    s.anchor = sn_calloc((size_t)n, sizeof *s.anchor, what, e);
    s.space = sn_calloc((size_t)n, sizeof *s.space, what, e);
    s.members = sn_calloc((size_t)n, sizeof *s.members, what, e);
    s.extra = sn_calloc((size_t)n, 1, what, e);
    s.solo = sn_calloc((size_t)n, 1, what, e);
    s.into = sn_calloc((size_t)n, sizeof *s.into, what, e);
    s.read_as = sn_calloc((size_t)n, sizeof *s.read_as, what, e);
    bool ok = s.users && s.n_users && s.live && s.mat && s.is_out && s.home && s.anchor && s.space &&
              s.members && s.extra && s.solo && s.into && s.read_as;
    for (int i = 0; ok && i < n; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) s.n_users[g->nodes[i]->in[j]->id]++;
    for (int i = 0; ok && i < n; i++) {
        ok = (s.users[i] = sn_malloc(sizeof(int) * (size_t)(s.n_users[i] + 1), what, e));
        s.n_users[i] = 0;
    }
    if (!ok) {
        free_tables(&s, n);
        return SN_ERR_OOM;
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
    free_tables(&s, n);
    if (st) {
        sn_program_free(s.p);
        return st;
    }
    s.p->target = *t; /* what it is for: the executor refuses another device */
    *out = s.p;
    return SN_OK;
}
