/* autodiff.c: reverse-mode differentiation as a graph-to-graph rewrite.
 * Convention: the backward nodes are appended to the same graph through the frontend
 * constructors (so every one is shape-checked); nothing is computed. The adjoint of a node
 * used twice is the sum of its users' contributions (tied embeddings). */
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

_Static_assert(SN_OP_COUNT == 54, "a new op needs its gradient rule in grad_rule");

typedef struct {
    sn_graph *g;
    sn_node **adj;  /* adjoint of each forward node, by id (NULL: none yet) */
    bool *needs;    /* forward node depends on a parameter */
} ad_state;

static bool weights(const sn_node *x);

static void accumulate(ad_state *s, sn_node *x, sn_node *contrib) {
    if (!contrib || !s->needs[x->id]) return;
    /* A bf16 node's adjoint is bf16 (a product of bf16 operands returns f32), except a cast's:
     * its rule casts to its input's dtype, so an f32 weight gradient is not rounded on the way
     * (contributions are summed in the dtype of the first). */
    if (x->op != SN_OP_CAST && (x->op == SN_OP_PARAM || !weights(x)))
        contrib = sn_cast(s->g, contrib, x->dtype);
    else if (s->adj[x->id]) contrib = sn_cast(s->g, contrib, s->adj[x->id]->dtype);
    s->adj[x->id] = s->adj[x->id] ? sn_add(s->g, s->adj[x->id], contrib) : contrib;
}

/* x in dtype t, reusing a cast of x to t made earlier: a gradient read by a product and by the
 * cast rule below (a LoRA adapter's sum: the base's product and the adapter's rounded one) is
 * rounded once, one kernel, not two. */
static sn_node *cast_once(ad_state *s, sn_node *x, sn_dtype t) {
    if (!x || x->dtype == t) return x;
    for (int i = x->id + 1; i < s->g->n_nodes; i++) {
        sn_node *c = s->g->nodes[i];
        if (c->op == SN_OP_CAST && c->in[0] == x && c->dtype == t) return c;
    }
    return sn_cast(s->g, x, t);
}

/* Whether x is a parameter, or parameters (or their 16-bit casts, the weight shadows that
 * autocast concatenates) concatenated (passes/siblings.c: several products of one x as one;
 * LoRA's B padded into a block-diagonal matrix): a weight, whose gradient is not rounded on its
 * way to the f32 masters, not even where the concatenation is 16-bit (accumulate). */
static bool weights(const sn_node *x) {
    if (x->op == SN_OP_PARAM) return true;
    if (x->op == SN_OP_CAST && x->in[0]->op == SN_OP_PARAM) return true;
    if (x->op == SN_OP_PAD) return weights(x->in[0]);
    if (x->op != SN_OP_CONCAT) return false;
    for (int i = 0; i < x->n_in; i++)
        if (!weights(x->in[i])) return false;
    return true;
}

/* Sums the gradient dy (shape of a broadcast result) down to the shape of x. */
static sn_node *unbroadcast(sn_graph *g, sn_node *dy, const sn_node *x) {
    if (dy && dy->rank > x->rank + 1) { /* fold the extra leading axes into one, sum it once */
        sn_shape s = {.rank = x->rank + 1, .d = {-1}};
        for (int i = 0; i < x->rank; i++) s.d[i + 1] = dy->shape[dy->rank - x->rank + i];
        dy = sn_reshape(g, dy, s);
    }
    while (dy && dy->rank > x->rank) dy = sn_sum(g, dy, 0, false);
    for (int i = 0; dy && i < x->rank; i++)
        if (x->shape[i] == 1 && dy->shape[i] != 1) dy = sn_sum(g, dy, i, true);
    return dy;
}

/* dy of a reduction over `axis` without keepdim, reshaped to keep it, then broadcast to x. */
static sn_node *expand_reduced(sn_graph *g, sn_node *dy, const sn_node *n, const sn_node *x) {
    if (!n->a.keepdim) {
        sn_shape s = sn_shape_of(x);
        s.d[n->a.axis] = 1;
        dy = sn_reshape(g, dy, s);
    }
    return sn_broadcast(g, dy, sn_shape_of(x));
}

/* Sum over all axes but the last: (.., C) -> (C). */
static sn_node *sum_rows(sn_graph *g, sn_node *dy) {
    if (!dy) return NULL;
    int64_t c = dy->shape[dy->rank - 1];
    return sn_sum(g, sn_reshape(g, dy, SN_SHAPE(-1, c)), 0, false);
}

/* Sums leading batch axes of a batched matmul result down to rank 2. */
static sn_node *sum_batch(sn_graph *g, sn_node *x) {
    while (x && x->rank > 2) x = sn_sum(g, x, 0, false);
    return x;
}

/* Gradients of C = op(A) @ op(B) (op = transpose when ta/tb). A shared rank-2 B (a weight)
 * gets its gradient from one 2-D product over all rows when A's rows can be flattened. With
 * bf16/f16 operands C is f32: dC is rounded to the operands' dtype once for both products. */
static void matmul_rule(ad_state *s, sn_node *n, sn_node *dc) {
    sn_graph *g = s->g;
    sn_node *a = n->in[0], *b = n->in[1];
    dc = cast_once(s, dc, a->dtype);
    bool ta = n->a.ta, tb = n->a.tb;
    if (s->needs[a->id]) {
        sn_node *da = ta ? sn_matmul_t(g, b, dc, tb, true) : sn_matmul_t(g, dc, b, false, !tb);
        accumulate(s, a, a->rank == 2 ? sum_batch(g, da) : da);
    }
    if (s->needs[b->id]) {
        sn_node *db;
        if (b->rank == 2 && a->rank > 2 && !ta) {
            int64_t k = a->shape[a->rank - 1], m = dc->shape[dc->rank - 1];
            sn_node *a2 = sn_reshape(g, a, SN_SHAPE(-1, k)), *dc2 = sn_reshape(g, dc, SN_SHAPE(-1, m));
            db = tb ? sn_matmul_t(g, dc2, a2, true, false) : sn_matmul_t(g, a2, dc2, true, false);
        } else {
            db = tb ? sn_matmul_t(g, dc, a, true, ta) : sn_matmul_t(g, a, dc, !ta, false);
            if (b->rank == 2) db = sum_batch(g, db);
        }
        accumulate(s, b, db);
    }
}

/* Part [lo, hi) along axis of dy when dy is a weight gradient's product A^T B (or its f32
 * widening) and axis its rows: the product of A's columns [lo, hi), a GEMM that reads them in
 * place (the gradients of weights concatenated for one product, passes/siblings.c: each
 * weight's own GEMM, no copy of its rows out of the whole); else NULL. */
static sn_node *part_of(sn_graph *g, sn_node *dy, int axis, int64_t lo, int64_t hi) {
    sn_node *p = dy->op == SN_OP_CAST && dy->in[0]->op == SN_OP_MATMUL ? dy->in[0] : dy;
    if (p->op != SN_OP_MATMUL || p->rank != 2 || axis != 0 || !p->a.ta || p->in[0]->rank != 2)
        return NULL;
    sn_node *y = sn_matmul_t(g, sn_slice(g, p->in[0], -1, lo, hi), p->in[1], true, p->a.tb);
    return p == dy ? y : sn_cast(g, y, dy->dtype);
}

/* lse_i = log sum_j exp(f q_i.k_j): d lse_i / d q_i = f sum_j P_ij k_j, which is attention with
 * k for v, and d / d k_j = f sum_i P_ij q_i, which is attention_bwd_v with dout_i = q_i. Only
 * a reader of lse other than attention (whose rule covers lse) gives it an adjoint. */
static void attention_lse_rule(ad_state *s, sn_node *n, sn_node *dlse) {
    sn_graph *g = s->g;
    sn_node *q = n->in[0], *k = n->in[1];
    sn_shape col = sn_shape_of(n);
    col.d[col.rank++] = 1;
    sn_node *w = sn_reshape(g, sn_scale(g, sn_cast(g, dlse, q->dtype), n->a.f), col); /* (.., T, 1) */
    if (s->needs[q->id]) accumulate(s, q, sn_mul(g, sn_attention(g, q, k, k, n, n->a.f), w));
    if (s->needs[k->id]) {
        sn_node *wq = sn_mul(g, q, w);
        accumulate(s, k, sn_attention_bwd_v(g, q, k, k, wq, wq, n, n->a.f));
    }
}

static sn_status grad_rule(ad_state *s, sn_node *n, sn_node *dy, sn_err *e) {
    sn_graph *g = s->g;
    sn_node *x = n->n_in ? n->in[0] : NULL, *b = n->n_in > 1 ? n->in[1] : NULL;
    switch (n->op) {
    case SN_OP_INPUT: case SN_OP_PARAM: case SN_OP_CONST: case SN_OP_FULL: case SN_OP_EQ:
    case SN_OP_DEQUANT_NF4: /* its input is a frozen parameter's packed storage: no gradient */
    case SN_OP_AMAX: case SN_OP_POW2_SCALE: /* scales: constants to the step (the fp8 pass) */
        return SN_OK;
    case SN_OP_ADD:
        accumulate(s, x, unbroadcast(g, dy, x));
        accumulate(s, b, unbroadcast(g, dy, b));
        return SN_OK;
    case SN_OP_SUB:
        accumulate(s, x, unbroadcast(g, dy, x));
        if (s->needs[b->id]) accumulate(s, b, unbroadcast(g, sn_neg(g, dy), b));
        return SN_OK;
    case SN_OP_MUL:
        if (s->needs[x->id]) accumulate(s, x, unbroadcast(g, sn_mul(g, dy, b), x));
        if (s->needs[b->id]) accumulate(s, b, unbroadcast(g, sn_mul(g, dy, x), b));
        return SN_OK;
    case SN_OP_DIV: /* d(a/b)/db = -(a/b)/b */
        if (s->needs[x->id]) accumulate(s, x, unbroadcast(g, sn_div(g, dy, b), x));
        if (s->needs[b->id])
            accumulate(s, b, unbroadcast(g, sn_neg(g, sn_div(g, sn_mul(g, dy, n), b)), b));
        return SN_OK;
    case SN_OP_NEG: accumulate(s, x, sn_neg(g, dy)); return SN_OK;
    case SN_OP_SCALE: accumulate(s, x, sn_scale(g, dy, n->a.f)); return SN_OK;
    case SN_OP_DROPOUT: /* the same mask and scale on dy; the seed has no gradient */
        accumulate(s, x, sn_dropout(g, dy, b, n->a.f, n->a.site));
        return SN_OK;
    case SN_OP_EXP: accumulate(s, x, sn_mul(g, dy, n)); return SN_OK;
    case SN_OP_LOG: accumulate(s, x, sn_div(g, dy, x)); return SN_OK;
    case SN_OP_TANH: /* dy * (1 - y^2) */
        accumulate(s, x, sn_sub(g, dy, sn_mul(g, dy, sn_mul(g, n, n))));
        return SN_OK;
    case SN_OP_SQRT: accumulate(s, x, sn_scale(g, sn_div(g, dy, n), 0.5f)); return SN_OK;
    case SN_OP_RSQRT: /* -1/2 y^3 */
        accumulate(s, x, sn_scale(g, sn_mul(g, dy, sn_mul(g, n, sn_mul(g, n, n))), -0.5f));
        return SN_OK;
    case SN_OP_GELU: accumulate(s, x, sn_gelu_bwd(g, x, dy)); return SN_OK;
    case SN_OP_SILU: accumulate(s, x, sn_silu_bwd(g, x, dy)); return SN_OK;
    case SN_OP_CAST:
        /* a parameter's low-precision copy read back in f32 (autocast's bias): rounding is the
         * identity to the gradient, which goes to the f32 master unrounded */
        if (x->op == SN_OP_CAST && x->in[0]->op == SN_OP_PARAM && x->in[0]->dtype == n->dtype)
            accumulate(s, x->in[0], dy);
        else if (!weights(x) && sn_dtype_is_float(n->dtype) &&
                 sn_dtype_bits(n->dtype) < sn_dtype_bits(x->dtype))
            /* an activation rounded to 16 bits (autocast's operand of a product): its gradient
             * is rounded likewise, once, after its readers' contributions are summed, as
             * torch.autocast's cast rounds it (a weight's gradient, above and below, is not) */
            accumulate(s, x, cast_once(s, cast_once(s, dy, n->dtype), x->dtype));
        else accumulate(s, x, cast_once(s, dy, x->dtype));
        return SN_OK;
    case SN_OP_SUM: accumulate(s, x, expand_reduced(g, dy, n, x)); return SN_OK;
    case SN_OP_MEAN:
        accumulate(s, x, sn_scale(g, expand_reduced(g, dy, n, x), 1.0f / (float)x->shape[n->a.axis]));
        return SN_OK;
    case SN_OP_MAX: { /* to every position equal to the max */
        sn_node *y = expand_reduced(g, n, n, x);
        accumulate(s, x, sn_mul(g, sn_eq(g, x, y), expand_reduced(g, dy, n, x)));
        return SN_OK;
    }
    case SN_OP_SOFTMAX: accumulate(s, x, sn_softmax_bwd(g, n, dy)); return SN_OK;
    case SN_OP_LAYERNORM:
        if (s->needs[x->id]) accumulate(s, x, sn_layernorm_bwd(g, x, b, dy, n->a.f));
        if (s->needs[b->id])
            accumulate(s, b, sn_cast(g, sn_layernorm_bwd_w(g, x, dy, n->a.f), b->dtype));
        if (s->needs[n->in[2]->id]) accumulate(s, n->in[2], sn_cast(g, sum_rows(g, dy), n->in[2]->dtype));
        return SN_OK;
    case SN_OP_RMSNORM:
        if (s->needs[x->id]) accumulate(s, x, sn_rmsnorm_bwd(g, x, b, dy, n->a.f));
        if (s->needs[b->id])
            accumulate(s, b, sn_cast(g, sn_rmsnorm_bwd_w(g, x, dy, n->a.f), b->dtype));
        return SN_OK;
    case SN_OP_CAUSAL_MASK: accumulate(s, x, sn_causal_mask_fill(g, dy, 0.0f)); return SN_OK;
    case SN_OP_CROSS_ENTROPY:
        accumulate(s, x, sn_cross_entropy_bwd_padded(g, x, b, dy, n->a.ignore_index, n->a.end));
        return SN_OK;
    case SN_OP_MATMUL: matmul_rule(s, n, dy); return SN_OK;
    case SN_OP_RESHAPE: accumulate(s, x, sn_reshape(g, dy, sn_shape_of(x))); return SN_OK;
    case SN_OP_PERMUTE: {
        int inv[SN_MAX_RANK];
        for (int i = 0; i < n->rank; i++) inv[n->a.perm[i]] = i;
        accumulate(s, x, sn_permute(g, dy, inv));
        return SN_OK;
    }
    case SN_OP_BROADCAST: accumulate(s, x, unbroadcast(g, dy, x)); return SN_OK;
    case SN_OP_SLICE:
        accumulate(s, x, sn_pad(g, dy, n->a.axis, n->a.start, x->shape[n->a.axis]));
        return SN_OK;
    case SN_OP_PAD:
        accumulate(s, x, sn_slice(g, dy, n->a.axis, n->a.start, n->a.start + x->shape[n->a.axis]));
        return SN_OK;
    case SN_OP_CONCAT: {
        int64_t at = 0;
        /* LoRA's block-diagonal B (siblings.c): its gradient one product, each block copied out
           (a GEMM a block, each reading its columns of the output gradient, costs more) */
        bool blocks = true;
        for (int i = 0; i < n->n_in; i++) blocks &= n->in[i]->op == SN_OP_PAD;
        for (int i = 0; i < n->n_in; i++) {
            sn_node *xi = n->in[i];
            int64_t len = xi->shape[n->a.axis];
            sn_node *part = blocks ? NULL : part_of(g, dy, n->a.axis, at, at + len);
            if (s->needs[xi->id])
                accumulate(s, xi, part ? part : sn_slice(g, dy, n->a.axis, at, at + len));
            at += len;
        }
        return SN_OK;
    }
    case SN_OP_EMBEDDING:
        accumulate(s, x, sn_embedding_bwd(g, b, dy, x->shape[0]));
        return SN_OK;
    case SN_OP_ATTENTION_LSE: attention_lse_rule(s, n, dy); return SN_OK;
    case SN_OP_ATTENTION: {
        sn_node *k = b, *v = n->in[2], *lse = n->in[3];
        float f = n->a.f;
        if (s->needs[x->id]) accumulate(s, x, sn_attention_bwd_q(g, x, k, v, n, dy, lse, f));
        if (s->needs[k->id]) accumulate(s, k, sn_attention_bwd_k(g, x, k, v, n, dy, lse, f));
        if (s->needs[v->id]) accumulate(s, v, sn_attention_bwd_v(g, x, k, v, n, dy, lse, f));
        return SN_OK; /* and nothing to lse: the rule above already differentiates through it */
    }
    case SN_OP_ATTENTION_CACHE:
        return sn_fail(e, SN_ERR_UNSUPPORTED, "autodiff: node %%%d (attention_cache) decodes over "
                       "a KV cache, which has no gradient (inference only): train on the model's "
                       "graph without a cache", n->id);
    case SN_OP_GELU_BWD: case SN_OP_SILU_BWD: case SN_OP_SOFTMAX_BWD: case SN_OP_LAYERNORM_BWD:
    case SN_OP_LAYERNORM_BWD_W: case SN_OP_RMSNORM_BWD: case SN_OP_RMSNORM_BWD_W:
    case SN_OP_CROSS_ENTROPY_BWD: case SN_OP_EMBEDDING_BWD: case SN_OP_ATTENTION_BWD_Q:
    case SN_OP_ATTENTION_BWD_K: case SN_OP_ATTENTION_BWD_V:
        return sn_fail(e, SN_ERR_UNSUPPORTED, "autodiff: node %%%d (%s) is a backward op; "
                       "differentiating a gradient (double backward) is not supported yet",
                       n->id, sn_op_name(n->op));
    case SN_OP_COUNT: break;
    }
    SN_ASSERT(0);
}

sn_status sn_backward(sn_graph *g, sn_node *loss, sn_err *e) {
    if (g->err.code)
        return sn_fail(e, g->err.code, "autodiff: the graph has an earlier error: %s", g->err.msg);
    if (!loss || loss->id >= g->n_nodes || g->nodes[loss->id] != loss)
        return sn_fail(e, SN_ERR_INVALID, "autodiff: the loss is not a node of this graph");
    if (g->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "autodiff: the graph already has a backward part");
    if (loss->rank != 0 || !sn_dtype_is_float(loss->dtype)) {
        char t[96];
        return sn_fail(e, SN_ERR_SHAPE, "autodiff: the loss must be a float scalar, node %%%d (%s) "
                       "is %s (reduce it with sn_mean or sn_sum)", loss->id, sn_op_name(loss->op),
                       sn_type_str(loss, t, sizeof t));
    }
    int n_fwd = g->n_nodes;
    const char *what = "autodiff's per-node gradients";
    ad_state s = {g, sn_calloc((size_t)n_fwd, sizeof(sn_node *), what, e), sn_calloc((size_t)n_fwd, sizeof(bool), what, e)};
    if (!s.adj || !s.needs) {
        free(s.adj);
        free(s.needs);
        return SN_ERR_OOM;
    }
    for (int i = 0; i < n_fwd; i++) {
        sn_node *n = g->nodes[i];
        s.needs[i] = n->op == SN_OP_PARAM && !n->a.frozen;
        for (int j = 0; j < n->n_in && !s.needs[i]; j++) s.needs[i] = s.needs[n->in[j]->id];
        if (!sn_dtype_is_float(n->dtype)) s.needs[i] = false;
    }
    g->n_forward = n_fwd;
    g->has_backward = true;
    sn_status st = SN_OK;
    if (s.needs[loss->id]) s.adj[loss->id] = sn_full(g, loss->dtype, SN_SCALAR, 1.0f);
    for (int i = loss->id; i >= 0 && st == SN_OK && !g->err.code; i--) {
        sn_node *n = g->nodes[i];
        if (s.adj[i] && s.needs[i]) st = grad_rule(&s, n, s.adj[i], e);
    }
    for (int i = 0; i < n_fwd && st == SN_OK && !g->err.code; i++) {
        sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM || p->a.frozen) continue;
        p->grad = s.adj[i] ? s.adj[i] : sn_full(g, p->dtype, sn_shape_of(p), 0.0f);
    }
    free(s.adj);
    free(s.needs);
    if (st != SN_OK) return st;
    if (g->err.code)
        return sn_fail(e, g->err.code, "autodiff: building the backward graph failed: %s", g->err.msg);
    g->loss = loss;
    sn_graph_add_output(g, loss);
    for (int i = 0; i < n_fwd; i++)
        if (g->nodes[i]->grad) sn_graph_add_output(g, g->nodes[i]->grad);
    return SN_OK;
}
