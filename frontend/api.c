/* api.c: the graph constructors of sinter.h.
 * Convention: each constructor fills a proto node (op, inputs, attributes, and the shape where
 * the caller chooses it) and hands it to sn_graph_append, where the op's shape rule checks it;
 * a NULL input (an earlier error) makes the constructor return NULL without a new message. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "ir/nf4.h"

sn_shape sn_shape_of(const sn_node *n) {
    sn_shape s = {.rank = n->rank};
    memcpy(s.d, n->shape, sizeof s.d);
    return s;
}
sn_dtype sn_node_dtype(const sn_node *n) { return n->dtype; }
int64_t sn_node_dim(const sn_node *n, int axis) {
    if (axis < 0) axis += n->rank;
    return axis >= 0 && axis < n->rank ? n->shape[axis] : 0;
}
const char *sn_node_name(const sn_node *n) { return n->name; }
sn_role sn_node_role(const sn_node *n) { return n->role; }

sn_status sn_graph_fail(sn_graph *g, sn_status code, const char *fmt, ...) {
    if (g->err.code) return g->err.code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err.msg, sizeof g->err.msg, fmt, ap);
    va_end(ap);
    g->err.code = code;
    return code;
}

void sn_graph_set_loss(sn_graph *g, sn_node *loss) {
    char t[96];
    if (g->err.code) return;
    if (!loss) {
        sn_graph_fail(g, SN_ERR_INVALID, "sn_graph_set_loss: the loss is NULL");
        return;
    }
    if (loss->rank != 0 || !sn_dtype_is_float(loss->dtype)) {
        sn_graph_fail(g, SN_ERR_SHAPE, "sn_graph_set_loss: the loss %%%d (%s) is %s; it must be a "
                      "float scalar (reduce it with sn_mean or sn_sum)", loss->id,
                      sn_op_name(loss->op), sn_type_str(loss, t, sizeof t));
        return;
    }
    g->loss = loss;
    sn_graph_add_output(g, loss);
}

void sn_graph_set_logits(sn_graph *g, sn_node *logits) {
    char t[96];
    if (g->err.code) return;
    if (!logits || logits->rank < 2 || !sn_dtype_is_float(logits->dtype)) {
        sn_graph_fail(g, SN_ERR_SHAPE, "sn_graph_set_logits: the logits %s; they must be a float "
                      "(.., V) value", logits ? sn_type_str(logits, t, sizeof t) : "are NULL");
        return;
    }
    g->logits = logits;
    sn_graph_add_output(g, logits);
}

static sn_node proto(sn_op op, int n_in, sn_node **in) {
    sn_node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.n_in = n_in;
    p.in = in;
    return p;
}

static void set_shape(sn_node *p, sn_dtype t, sn_shape s) {
    p->dtype = t;
    p->rank = s.rank;
    memcpy(p->shape, s.d, sizeof p->shape);
}

static bool any_null(int n, sn_node *const *xs) {
    for (int i = 0; i < n; i++)
        if (!xs[i]) return true;
    return false;
}

/* Appends op over n inputs; returns NULL if an input is NULL (an earlier error). */
static sn_node *append(sn_graph *g, sn_node *p) {
    if (any_null(p->n_in, p->in)) return NULL;
    return sn_graph_append(g, p);
}

/* Maps a negative axis onto 0..rank-1; leaves an out-of-range axis for the shape rule. */
static int norm_axis(const sn_node *x, int axis) { return axis < 0 ? axis + x->rank : axis; }

static sn_node *unary(sn_graph *g, sn_op op, sn_node *x) {
    sn_node p = proto(op, 1, &x);
    return append(g, &p);
}

static sn_node *binary(sn_graph *g, sn_op op, sn_node *a, sn_node *b) {
    sn_node *in[2] = {a, b};
    sn_node p = proto(op, 2, in);
    return append(g, &p);
}

/* ---- leaves ---- */

static sn_node *leaf(sn_graph *g, sn_op op, const char *name, sn_dtype t, sn_shape s) {
    sn_node p = proto(op, 0, NULL);
    set_shape(&p, t, s);
    p.name = name;
    return sn_graph_append(g, &p);
}

sn_node *sn_input(sn_graph *g, const char *name, sn_dtype t, sn_shape s) {
    return leaf(g, SN_OP_INPUT, name, t, s);
}

sn_node *sn_input_role(sn_graph *g, const char *name, sn_role r, sn_dtype t, sn_shape s) {
    if (g->err.code) return NULL;
    if ((unsigned)r >= SN_ROLE_COUNT) {
        sn_graph_fail(g, SN_ERR_INVALID, "input \"%s\": unknown role %d", name, (int)r);
        return NULL;
    }
    const sn_node *had = r != SN_ROLE_NONE ? sn_graph_input(g, r) : NULL;
    if (had) {
        sn_graph_fail(g, SN_ERR_INVALID, "input \"%s\" would be a second input of the role %s "
                      "(the first is \"%s\"): a graph has one input of each role", name,
                      sn_role_name(r), had->name);
        return NULL;
    }
    if (!sn_role_fits(r, t, s.rank)) {
        sn_graph_fail(g, SN_ERR_DTYPE, "input \"%s\" of the role %s must be %s", name,
                      sn_role_name(r), sn_role_needs(r));
        return NULL;
    }
    sn_node *n = leaf(g, SN_OP_INPUT, name, t, s);
    if (n) n->role = r;
    return n;
}
sn_node *sn_input_tokens(sn_graph *g, const char *name, sn_shape s) {
    return sn_input_role(g, name, SN_ROLE_TOKENS, SN_I32, s);
}
sn_node *sn_input_targets(sn_graph *g, const char *name, sn_shape s) {
    return sn_input_role(g, name, SN_ROLE_TARGETS, SN_I32, s);
}

sn_node *sn_param(sn_graph *g, const char *name, sn_dtype t, sn_shape s, sn_init init, float std) {
    sn_node p = proto(SN_OP_PARAM, 0, NULL);
    set_shape(&p, t, s);
    p.name = name;
    p.a.init = init;
    p.a.f = init == SN_INIT_NORMAL ? std : 0;
    return sn_graph_append(g, &p);
}

sn_node *sn_param_freeze(sn_node *p) {
    SN_ASSERT(p && p->op == SN_OP_PARAM);
    p->a.frozen = 1;
    return p;
}

sn_node *sn_const(sn_graph *g, sn_dtype t, sn_shape s, const float *data) {
    sn_node p = proto(SN_OP_CONST, 0, NULL);
    set_shape(&p, t, s);
    p.data = (float *)data; /* copied by sn_graph_append */
    return sn_graph_append(g, &p);
}

sn_node *sn_full(sn_graph *g, sn_dtype t, sn_shape s, float value) {
    sn_node p = proto(SN_OP_FULL, 0, NULL);
    set_shape(&p, t, s);
    p.a.f = value;
    return sn_graph_append(g, &p);
}

sn_node *sn_scalar(sn_graph *g, sn_dtype t, float value) { return sn_full(g, t, SN_SCALAR, value); }

/* ---- pointwise ---- */

sn_node *sn_add(sn_graph *g, sn_node *a, sn_node *b) { return binary(g, SN_OP_ADD, a, b); }
sn_node *sn_sub(sn_graph *g, sn_node *a, sn_node *b) { return binary(g, SN_OP_SUB, a, b); }
sn_node *sn_mul(sn_graph *g, sn_node *a, sn_node *b) { return binary(g, SN_OP_MUL, a, b); }
sn_node *sn_div(sn_graph *g, sn_node *a, sn_node *b) { return binary(g, SN_OP_DIV, a, b); }
sn_node *sn_eq(sn_graph *g, sn_node *a, sn_node *b) { return binary(g, SN_OP_EQ, a, b); }
sn_node *sn_neg(sn_graph *g, sn_node *x) { return unary(g, SN_OP_NEG, x); }
sn_node *sn_exp(sn_graph *g, sn_node *x) { return unary(g, SN_OP_EXP, x); }
sn_node *sn_log(sn_graph *g, sn_node *x) { return unary(g, SN_OP_LOG, x); }
sn_node *sn_tanh(sn_graph *g, sn_node *x) { return unary(g, SN_OP_TANH, x); }
sn_node *sn_sqrt(sn_graph *g, sn_node *x) { return unary(g, SN_OP_SQRT, x); }
sn_node *sn_rsqrt(sn_graph *g, sn_node *x) { return unary(g, SN_OP_RSQRT, x); }
sn_node *sn_gelu(sn_graph *g, sn_node *x) { return unary(g, SN_OP_GELU, x); }
sn_node *sn_silu(sn_graph *g, sn_node *x) { return unary(g, SN_OP_SILU, x); }
sn_node *sn_gelu_bwd(sn_graph *g, sn_node *x, sn_node *dy) { return binary(g, SN_OP_GELU_BWD, x, dy); }
sn_node *sn_silu_bwd(sn_graph *g, sn_node *x, sn_node *dy) { return binary(g, SN_OP_SILU_BWD, x, dy); }

sn_node *sn_scale(sn_graph *g, sn_node *x, float f) {
    sn_node p = proto(SN_OP_SCALE, 1, &x);
    p.a.f = f;
    return append(g, &p);
}

sn_node *sn_dropout(sn_graph *g, sn_node *x, sn_node *seed, float p, int site) {
    sn_node *in[2] = {x, seed};
    sn_node n = proto(SN_OP_DROPOUT, 2, in);
    n.a.f = p;
    n.a.site = site;
    return append(g, &n);
}

sn_node *sn_input_dropout_seed(sn_graph *g) {
    sn_node *s = sn_graph_input(g, SN_ROLE_DROPOUT_SEED);
    return s ? s : sn_input_role(g, "dropout_seed", SN_ROLE_DROPOUT_SEED, SN_F32, SN_SCALAR);
}

sn_node *sn_cast(sn_graph *g, sn_node *x, sn_dtype t) {
    if (x && x->dtype == t) return x;
    /* a 16-bit value widened to f32 and narrowed back is itself (f32 holds it exactly) */
    if (x && x->op == SN_OP_CAST && x->in[0]->dtype == t && x->dtype == SN_F32 &&
        (t == SN_BF16 || t == SN_F16))
        return x->in[0];
    sn_node p = proto(SN_OP_CAST, 1, &x);
    p.dtype = t;
    return append(g, &p);
}

/* ---- reductions ---- */

static sn_node *reduce(sn_graph *g, sn_op op, sn_node *x, int axis, bool keepdim) {
    if (!x) return NULL;
    sn_node p = proto(op, 1, &x);
    p.a.axis = norm_axis(x, axis);
    p.a.keepdim = keepdim;
    return append(g, &p);
}
sn_node *sn_sum(sn_graph *g, sn_node *x, int axis, bool keepdim) {
    return reduce(g, SN_OP_SUM, x, axis, keepdim);
}
sn_node *sn_mean(sn_graph *g, sn_node *x, int axis, bool keepdim) {
    return reduce(g, SN_OP_MEAN, x, axis, keepdim);
}
sn_node *sn_max(sn_graph *g, sn_node *x, int axis, bool keepdim) {
    return reduce(g, SN_OP_MAX, x, axis, keepdim);
}

sn_node *sn_amax(sn_graph *g, sn_node *x, int axis, bool keepdim) {
    return reduce(g, SN_OP_AMAX, x, axis, keepdim);
}

sn_node *sn_pow2_scale(sn_graph *g, sn_node *x, float bound) {
    sn_node p = proto(SN_OP_POW2_SCALE, 1, &x);
    p.a.f = bound;
    return append(g, &p);
}

/* ---- row ops ---- */

static sn_node *with_f(sn_graph *g, sn_op op, int n, sn_node **in, float f) {
    sn_node p = proto(op, n, in);
    p.a.f = f;
    return append(g, &p);
}

sn_node *sn_softmax(sn_graph *g, sn_node *x) { return unary(g, SN_OP_SOFTMAX, x); }
sn_node *sn_softmax_bwd(sn_graph *g, sn_node *y, sn_node *dy) {
    return binary(g, SN_OP_SOFTMAX_BWD, y, dy);
}
sn_node *sn_layernorm(sn_graph *g, sn_node *x, sn_node *w, sn_node *b, float eps) {
    return with_f(g, SN_OP_LAYERNORM, 3, (sn_node *[]){x, w, b}, eps);
}
sn_node *sn_layernorm_bwd(sn_graph *g, sn_node *x, sn_node *w, sn_node *dy, float eps) {
    return with_f(g, SN_OP_LAYERNORM_BWD, 3, (sn_node *[]){x, w, dy}, eps);
}
sn_node *sn_layernorm_bwd_w(sn_graph *g, sn_node *x, sn_node *dy, float eps) {
    return with_f(g, SN_OP_LAYERNORM_BWD_W, 2, (sn_node *[]){x, dy}, eps);
}
sn_node *sn_rmsnorm(sn_graph *g, sn_node *x, sn_node *w, float eps) {
    return with_f(g, SN_OP_RMSNORM, 2, (sn_node *[]){x, w}, eps);
}
sn_node *sn_rmsnorm_bwd(sn_graph *g, sn_node *x, sn_node *w, sn_node *dy, float eps) {
    return with_f(g, SN_OP_RMSNORM_BWD, 3, (sn_node *[]){x, w, dy}, eps);
}
sn_node *sn_rmsnorm_bwd_w(sn_graph *g, sn_node *x, sn_node *dy, float eps) {
    return with_f(g, SN_OP_RMSNORM_BWD_W, 2, (sn_node *[]){x, dy}, eps);
}
sn_node *sn_causal_mask(sn_graph *g, sn_node *x) { return sn_causal_mask_fill(g, x, -INFINITY); }
sn_node *sn_causal_mask_fill(sn_graph *g, sn_node *x, float fill) {
    return with_f(g, SN_OP_CAUSAL_MASK, 1, &x, fill);
}

sn_node *sn_cross_entropy(sn_graph *g, sn_node *logits, sn_node *targets, int ignore_index) {
    return sn_cross_entropy_padded(g, logits, targets, ignore_index, 0);
}

sn_node *sn_cross_entropy_bwd(sn_graph *g, sn_node *logits, sn_node *targets, sn_node *dloss,
                              int ignore_index) {
    return sn_cross_entropy_bwd_padded(g, logits, targets, dloss, ignore_index, 0);
}

sn_node *sn_cross_entropy_padded(sn_graph *g, sn_node *logits, sn_node *targets, int ignore_index,
                                 int64_t classes) {
    sn_node *in[2] = {logits, targets};
    sn_node p = proto(SN_OP_CROSS_ENTROPY, 2, in);
    p.a.ignore_index = ignore_index;
    p.a.end = classes;
    return append(g, &p);
}

sn_node *sn_cross_entropy_bwd_padded(sn_graph *g, sn_node *logits, sn_node *targets,
                                     sn_node *dloss, int ignore_index, int64_t classes) {
    sn_node *in[3] = {logits, targets, dloss};
    sn_node p = proto(SN_OP_CROSS_ENTROPY_BWD, 3, in);
    p.a.ignore_index = ignore_index;
    p.a.end = classes;
    return append(g, &p);
}

/* ---- matmul ---- */

sn_node *sn_matmul(sn_graph *g, sn_node *a, sn_node *b) { return sn_matmul_t(g, a, b, false, false); }

sn_node *sn_matmul_t(sn_graph *g, sn_node *a, sn_node *b, bool ta, bool tb) {
    sn_node *in[2] = {a, b};
    sn_node p = proto(SN_OP_MATMUL, 2, in);
    p.a.ta = ta;
    p.a.tb = tb;
    return append(g, &p);
}

/* ---- attention ---- */

sn_node *sn_causal_attention(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, float scale) {
    return sn_attention(g, q, k, v, sn_attention_lse(g, q, k, scale), scale);
}
sn_node *sn_attention_lse(sn_graph *g, sn_node *q, sn_node *k, float scale) {
    return with_f(g, SN_OP_ATTENTION_LSE, 2, (sn_node *[]){q, k}, scale);
}
sn_node *sn_attention(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *lse, float scale) {
    return with_f(g, SN_OP_ATTENTION, 4, (sn_node *[]){q, k, v, lse}, scale);
}
sn_node *sn_attention_cache(sn_graph *g, sn_node *q, sn_node *k_cache, sn_node *v_cache,
                            sn_node *mask, sn_node *k, sn_node *v, float scale) {
    return with_f(g, SN_OP_ATTENTION_CACHE, 6, (sn_node *[]){q, k_cache, v_cache, mask, k, v}, scale);
}
sn_node *sn_attention_bwd_q(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *o,
                            sn_node *dout, sn_node *lse, float scale) {
    return with_f(g, SN_OP_ATTENTION_BWD_Q, 6, (sn_node *[]){q, k, v, o, dout, lse}, scale);
}
sn_node *sn_attention_bwd_k(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *o,
                            sn_node *dout, sn_node *lse, float scale) {
    return with_f(g, SN_OP_ATTENTION_BWD_K, 6, (sn_node *[]){q, k, v, o, dout, lse}, scale);
}
sn_node *sn_attention_bwd_v(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *o,
                            sn_node *dout, sn_node *lse, float scale) {
    return with_f(g, SN_OP_ATTENTION_BWD_V, 6, (sn_node *[]){q, k, v, o, dout, lse}, scale);
}

/* ---- layout ---- */

sn_node *sn_reshape(sn_graph *g, sn_node *x, sn_shape s) {
    if (!x) return NULL;
    int free_dim = -1;
    int64_t known = 1;
    for (int i = 0; i < s.rank; i++) {
        if (s.d[i] == -1 && free_dim < 0) free_dim = i;
        else known *= s.d[i];
    }
    if (free_dim >= 0 && known > 0 && sn_numel(x) % known == 0) s.d[free_dim] = sn_numel(x) / known;
    sn_node p = proto(SN_OP_RESHAPE, 1, &x);
    set_shape(&p, x->dtype, s);
    return append(g, &p);
}

sn_node *sn_permute(sn_graph *g, sn_node *x, const int *perm) {
    if (!x) return NULL;
    sn_node p = proto(SN_OP_PERMUTE, 1, &x);
    for (int i = 0; i < x->rank; i++) p.a.perm[i] = norm_axis(x, perm[i]);
    return append(g, &p);
}

sn_node *sn_transpose(sn_graph *g, sn_node *x, int axis0, int axis1) {
    if (!x) return NULL;
    int perm[SN_MAX_RANK];
    for (int i = 0; i < x->rank; i++) perm[i] = i;
    axis0 = norm_axis(x, axis0);
    axis1 = norm_axis(x, axis1);
    if (axis0 >= 0 && axis0 < x->rank && axis1 >= 0 && axis1 < x->rank) {
        perm[axis0] = axis1;
        perm[axis1] = axis0;
    } else {
        perm[0] = -1; /* let the shape rule report it */
    }
    return sn_permute(g, x, perm);
}

sn_node *sn_broadcast(sn_graph *g, sn_node *x, sn_shape s) {
    if (!x) return NULL;
    sn_node p = proto(SN_OP_BROADCAST, 1, &x);
    set_shape(&p, x->dtype, s);
    return append(g, &p);
}

/* An op on one axis of x with a range attribute: slice [start, end), pad (start, size). */
static sn_node *axis_range(sn_graph *g, sn_op op, sn_node *x, int axis, int64_t start, int64_t end) {
    if (!x) return NULL;
    sn_node p = proto(op, 1, &x);
    p.a.axis = norm_axis(x, axis);
    p.a.start = start;
    p.a.end = end;
    return append(g, &p);
}

sn_node *sn_slice(sn_graph *g, sn_node *x, int axis, int64_t start, int64_t end) {
    return axis_range(g, SN_OP_SLICE, x, axis, start, end);
}

int sn_split(sn_graph *g, sn_node *x, int axis, int n, sn_node **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (!x || g->err.code) return -1;
    int ax = norm_axis(x, axis);
    if (ax < 0 || ax >= x->rank || n <= 0 || x->shape[ax] % n) {
        char t[96];
        sn_fail(&g->err, SN_ERR_SHAPE, "split: cannot split %s into %d equal parts along axis %d",
                sn_type_str(x, t, sizeof t), n, axis);
        return -1;
    }
    int64_t part = x->shape[ax] / n;
    for (int i = 0; i < n; i++) out[i] = sn_slice(g, x, ax, i * part, (i + 1) * part);
    return g->err.code ? -1 : 0;
}

sn_node *sn_pad(sn_graph *g, sn_node *x, int axis, int64_t start, int64_t size) {
    return axis_range(g, SN_OP_PAD, x, axis, start, size);
}

sn_node *sn_concat(sn_graph *g, int n, sn_node *const *xs, int axis) {
    if (n < 1 || n > SN_MAX_INPUTS) {
        sn_fail(&g->err, SN_ERR_INVALID, "concat: takes 1..%d inputs, got %d", SN_MAX_INPUTS, n);
        return NULL;
    }
    if (any_null(n, xs)) return NULL;
    sn_node p = proto(SN_OP_CONCAT, n, (sn_node **)xs);
    p.a.axis = norm_axis(xs[0], axis);
    return append(g, &p);
}

/* ---- gather ---- */

sn_node *sn_embedding(sn_graph *g, sn_node *table, sn_node *ids) {
    return binary(g, SN_OP_EMBEDDING, table, ids);
}

sn_node *sn_embedding_bwd(sn_graph *g, sn_node *ids, sn_node *dy, int64_t vocab) {
    if (!ids || !dy) return NULL;
    sn_node *in[2] = {ids, dy};
    sn_node p = proto(SN_OP_EMBEDDING_BWD, 2, in);
    set_shape(&p, dy->dtype, SN_SHAPE(vocab, dy->rank ? dy->shape[dy->rank - 1] : 0));
    return append(g, &p);
}

/* ---- quantized storage ---- */

sn_node *sn_dequant_nf4(sn_graph *g, sn_node *packed, sn_dtype t, sn_shape s) {
    if (!packed) return NULL;
    sn_node p = proto(SN_OP_DEQUANT_NF4, 1, &packed);
    set_shape(&p, t, s);
    return append(g, &p);
}

sn_node *sn_param_nf4(sn_graph *g, const char *name, sn_dtype t, sn_shape s) {
    int64_t n;
    if (g->err.code) return NULL;
    if (!sn_shape_numel_checked(s.rank, s.d, &n) || n < 1) {
        sn_fail(&g->err, SN_ERR_SHAPE, "sn_param_nf4 '%s': the weights' shape needs positive "
                "dimensions", name ? name : "?");
        return NULL;
    }
    sn_node p = proto(SN_OP_PARAM, 0, NULL);
    set_shape(&p, SN_U8, SN_SHAPE(sn_nf4_layout_of(n).bytes));
    p.name = name;
    p.a.init = SN_INIT_ZEROS; /* all-zero storage decodes to zeros (ir/nf4.h) */
    p.a.frozen = 1;
    return sn_dequant_nf4(g, sn_graph_append(g, &p), t, s);
}

/* ---- queries ---- */

int sn_graph_params(const sn_graph *g, sn_node **out, int cap) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM) {
            if (out && k < cap) out[k] = g->nodes[i];
            k++;
        }
    return k;
}

const sn_node *sn_nf4_weights(const sn_graph *g, const sn_node *packed) {
    for (int i = packed->id + 1; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_DEQUANT_NF4 && g->nodes[i]->in[0] == packed) return g->nodes[i];
    return NULL;
}

int64_t sn_graph_param_count(const sn_graph *g) {
    int64_t total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i], *w;
        if (p->op != SN_OP_PARAM) continue;
        /* NF4 storage counts the weights it holds, not its bytes */
        total += p->dtype == SN_U8 && (w = sn_nf4_weights(g, p)) ? sn_numel(w) : sn_numel(p);
    }
    return total;
}
