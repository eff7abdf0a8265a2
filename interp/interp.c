/* interp.c: the reference interpreter: every op written plainly, evaluated in node order.
 * Convention: a node's value is double[numel], contiguous row-major; after each op it is rounded
 * to the node's dtype (float tensors not at all in exact mode); i32 values are integral doubles. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "interp_int.h"
#include "ir/dropout.h"
#include "ir/nf4.h"

_Static_assert(SN_OP_COUNT == 54, "a new op needs its kernel in eval()");

struct sn_interp {
    const sn_graph *g;
    int n_nodes;   /* g->n_nodes when created: the graph must not grow afterwards */
    bool exact;    /* float tensors are never rounded */
    bool keep_all; /* keep every value after a run */
    double **val;  /* [n_nodes] the value of each node, NULL when not held */
    bool *set;     /* [n_nodes] INPUT/PARAM given a value */
    bool *keep;    /* [n_nodes] leaves, outputs, the loss, param grads: a run never frees them */
    int *last_use; /* [n_nodes] id of the last node reading it, -1 if none */
};

/* ---- rounding ---- */

/* Rounds v[0..n) to t: float types to the nearest representable value (not in exact mode),
 * i32 toward zero. */
static void round_to(const sn_interp *it, sn_dtype t, double *v, int64_t n) {
    if (t == SN_I32 || t == SN_U8) {
        for (int64_t i = 0; i < n; i++) v[i] = trunc(v[i]);
    } else if (it->exact) {
        return;
    } else if (t == SN_F32) {
        for (int64_t i = 0; i < n; i++) v[i] = (double)(float)v[i];
    } else {
        for (int64_t i = 0; i < n; i++) v[i] = sn_dtype_round(t, v[i]);
    }
}

/* ---- index helpers ---- */

static void contiguous_strides(int rank, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

/* Offset of row r (a flat index over all but the last dim of shape) in a view with strides st. */
static int64_t row_offset(int64_t r, int rank, const int64_t *shape, const int64_t *st) {
    int64_t off = 0;
    for (int i = rank - 2; i >= 0; i--) {
        off += (r % shape[i]) * st[i];
        r /= shape[i];
    }
    return off;
}

/* x's strides seen from shape (rank), which x broadcasts to (numpy, right-aligned): a missing
 * or size-1 dim of x has stride 0. */
static void bcast_strides(const sn_node *x, int rank, const int64_t *shape, int64_t *st) {
    int64_t xs[SN_MAX_RANK];
    contiguous_strides(x->rank, x->shape, xs);
    for (int i = 0; i < rank; i++) {
        int k = i - (rank - x->rank);
        st[i] = k < 0 || x->shape[k] == 1 ? 0 : xs[k];
    }
}

/* dst (shape, contiguous) = the view of src with strides st. */
static void copy_view(double *dst, const double *src, int rank, const int64_t *shape,
                      const int64_t *st) {
    int64_t len = rank ? shape[rank - 1] : 1, step = rank ? st[rank - 1] : 0;
    int64_t rows = sn_shape_numel(rank, shape) / len;
    for (int64_t r = 0; r < rows; r++) {
        const double *s = src + row_offset(r, rank, shape, st);
        double *d = dst + r * len;
        for (int64_t j = 0; j < len; j++) d[j] = s[j * step];
    }
}

/* x seen as (outer, x->shape[axis], inner). */
static void split_at(const sn_node *x, int axis, int64_t *outer, int64_t *inner) {
    *outer = sn_shape_numel(axis, x->shape);
    *inner = sn_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
}

char *sn_interp_index_str(int64_t i, int rank, const int64_t *shape, char *buf, size_t len) {
    int64_t idx[SN_MAX_RANK];
    for (int k = rank - 1; k >= 0; k--) {
        idx[k] = i % shape[k];
        i /= shape[k];
    }
    return sn_shape_str(rank, idx, buf, len);
}

/* ---- pointwise ---- */

static const double GELU_K = 0.7978845608028654; /* sqrt(2/pi) */
static const double GELU_C = 0.044715;

static double gelu(double x) { return 0.5 * x * (1 + tanh(GELU_K * (x + GELU_C * x * x * x))); }
static double gelu_grad(double x) {
    double t = tanh(GELU_K * (x + GELU_C * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
}
static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

static double unary(const sn_node *n, double x) {
    switch (n->op) {
    case SN_OP_NEG: return -x;
    case SN_OP_SCALE: return (double)n->a.f * x;
    case SN_OP_EXP: return exp(x);
    case SN_OP_LOG: return log(x);
    case SN_OP_TANH: return tanh(x);
    case SN_OP_SQRT: return sqrt(x);
    case SN_OP_RSQRT: return 1 / sqrt(x);
    case SN_OP_GELU: return gelu(x);
    case SN_OP_SILU: return x * sigmoid(x);
    case SN_OP_CAST: return x; /* rounded to the node's dtype afterwards (i32: toward zero) */
    case SN_OP_POW2_SCALE: return sn_pow2_scale_of(x, n->a.f);
    default: SN_ASSERT(0);
    }
}

/* y (n's shape) = a op b, a and b broadcast to y's shape. */
static void eval_binary(const sn_node *n, const double *a, const double *b, double *y) {
    int r = n->rank;
    int64_t sa[SN_MAX_RANK], sb[SN_MAX_RANK];
    bcast_strides(n->in[0], r, n->shape, sa);
    bcast_strides(n->in[1], r, n->shape, sb);
    int64_t len = sn_interp_last_dim(n), rows = sn_numel(n) / len;
    int64_t ja = r ? sa[r - 1] : 0, jb = r ? sb[r - 1] : 0;
    for (int64_t row = 0; row < rows; row++) {
        const double *pa = a + row_offset(row, r, n->shape, sa);
        const double *pb = b + row_offset(row, r, n->shape, sb);
        double *py = y + row * len;
#define LOOP(expr)                                                                                 \
    for (int64_t j = 0; j < len; j++) {                                                            \
        double u = pa[j * ja], v = pb[j * jb];                                                     \
        py[j] = (expr);                                                                            \
    }                                                                                              \
    break
        switch (n->op) {
        case SN_OP_ADD: LOOP(u + v);
        case SN_OP_SUB: LOOP(u - v);
        case SN_OP_MUL: LOOP(u * v);
        case SN_OP_DIV: LOOP(u / v);
        case SN_OP_EQ: LOOP(u == v ? 1.0 : 0.0);
        case SN_OP_GELU_BWD: LOOP(v * gelu_grad(u));
        case SN_OP_SILU_BWD: LOOP(v * sigmoid(u) * (1 + u * (1 - sigmoid(u))));
        default: SN_ASSERT(0);
        }
#undef LOOP
    }
}

/* ---- reductions: x (outer, d, inner) -> y (outer, inner) ---- */

static void eval_reduce(const sn_node *n, const double *x, double *y) {
    const sn_node *in = n->in[0];
    int64_t outer, inner, d = in->shape[n->a.axis];
    split_at(in, n->a.axis, &outer, &inner);
    for (int64_t o = 0; o < outer; o++) {
        const double *xo = x + o * d * inner;
        double *yo = y + o * inner;
        memcpy(yo, xo, sizeof(double) * (size_t)inner);
        if (n->op == SN_OP_AMAX)
            for (int64_t i = 0; i < inner; i++) yo[i] = fabs(yo[i]);
        for (int64_t k = 1; k < d; k++) {
            const double *xk = xo + k * inner;
            if (n->op == SN_OP_AMAX) {
                for (int64_t i = 0; i < inner; i++)
                    if (fabs(xk[i]) > yo[i] || isnan(xk[i])) yo[i] = fabs(xk[i]);
            } else if (n->op == SN_OP_MAX) {
                for (int64_t i = 0; i < inner; i++)
                    if (xk[i] > yo[i] || isnan(xk[i])) yo[i] = xk[i];
            } else {
                for (int64_t i = 0; i < inner; i++) yo[i] += xk[i];
            }
        }
        if (n->op == SN_OP_MEAN)
            for (int64_t i = 0; i < inner; i++) yo[i] /= (double)d;
    }
}

/* ---- matmul ---- */

/* dst (C, R) = transpose of src (R, C) */
static void transpose(const double *src, int64_t R, int64_t C, double *dst) {
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) dst[j * R + i] = src[i * C + j];
}

/* y (M, N) = a (M, K) @ b (K, N), i-k-j order over contiguous rows */
static void matmul(const double *a, const double *b, double *y, int64_t M, int64_t K, int64_t N) {
    for (int64_t i = 0; i < M; i++) {
        double *yr = y + i * N;
        memset(yr, 0, sizeof(double) * (size_t)N);
        for (int64_t k = 0; k < K; k++) {
            double aik = a[i * K + k];
            const double *br = b + k * N;
            for (int64_t j = 0; j < N; j++) yr[j] += aik * br[j];
        }
    }
}

/* a (.., M, K) or ta (.., K, M); b (.., K, N) or tb (.., N, K); a rank-2 side is shared across
 * the other's batch. */
static void eval_matmul(const sn_node *n, const double *a, const double *b, double *y) {
    const sn_node *an = n->in[0], *bn = n->in[1];
    int64_t M = n->shape[n->rank - 2], N = n->shape[n->rank - 1];
    int64_t K = an->shape[an->rank - 1 - n->a.ta], batch = sn_numel(n) / (M * N);
    int64_t sa = an->rank > 2 ? M * K : 0, sb = bn->rank > 2 ? K * N : 0;
    /* transposed copies, made once for a shared side */
    double *at = n->a.ta ? malloc(sizeof(double) * (size_t)(M * K)) : NULL;
    double *bt = n->a.tb ? malloc(sizeof(double) * (size_t)(K * N)) : NULL;
    SN_ASSERT((!n->a.ta || at) && (!n->a.tb || bt));
    for (int64_t i = 0; i < batch; i++) {
        const double *am = a + i * sa, *bm = b + i * sb;
        if (at) {
            if (i == 0 || sa) transpose(am, K, M, at);
            am = at;
        }
        if (bt) {
            if (i == 0 || sb) transpose(bm, N, K, bt);
            bm = bt;
        }
        matmul(am, bm, y + i * M * N, M, K, N);
    }
    free(at);
    free(bt);
}

/* ---- layout ---- */

static void eval_layout(const sn_node *n, double *const *in, double *y) {
    const sn_node *x = n->in[0];
    const size_t dsz = sizeof(double);
    int64_t st[SN_MAX_RANK], outer, inner;
    switch (n->op) {
    case SN_OP_RESHAPE: memcpy(y, in[0], dsz * (size_t)sn_numel(n)); return;
    case SN_OP_PERMUTE: { /* out dim i = in dim perm[i] */
        int64_t xs[SN_MAX_RANK];
        contiguous_strides(x->rank, x->shape, xs);
        for (int i = 0; i < n->rank; i++) st[i] = xs[n->a.perm[i]];
        copy_view(y, in[0], n->rank, n->shape, st);
        return;
    }
    case SN_OP_BROADCAST:
        bcast_strides(x, n->rank, n->shape, st);
        copy_view(y, in[0], n->rank, n->shape, st);
        return;
    case SN_OP_SLICE: { /* x (outer, d, inner) -> y (outer, end - start, inner) */
        split_at(x, n->a.axis, &outer, &inner);
        int64_t d = x->shape[n->a.axis], w = (n->a.end - n->a.start) * inner;
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + o * w, in[0] + (o * d + n->a.start) * inner, dsz * (size_t)w);
        return;
    }
    case SN_OP_PAD: { /* x (outer, d, inner) -> y (outer, end, inner), x at start */
        split_at(x, n->a.axis, &outer, &inner);
        int64_t w = x->shape[n->a.axis] * inner;
        memset(y, 0, dsz * (size_t)sn_numel(n));
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + (o * n->a.end + n->a.start) * inner, in[0] + o * w, dsz * (size_t)w);
        return;
    }
    case SN_OP_CONCAT: { /* xs (outer, d_i, inner) -> y (outer, sum d_i, inner) */
        split_at(x, n->a.axis, &outer, &inner);
        double *p = y;
        for (int64_t o = 0; o < outer; o++)
            for (int i = 0; i < n->n_in; i++) {
                int64_t w = n->in[i]->shape[n->a.axis] * inner;
                memcpy(p, in[i] + o * w, dsz * (size_t)w);
                p += w;
            }
        return;
    }
    default: SN_ASSERT(0);
    }
}

/* ---- one node ---- */

/* y = the NF4 weights packed in the bytes q (ir/nf4.h; u8 values held as doubles), in f32 as
 * sn_nf4_dequantize defines them; rounded to n's dtype afterwards. */
static sn_status eval_dequant_nf4(const sn_node *n, const double *q, double *y, sn_err *e) {
    int64_t numel = sn_numel(n), bytes = sn_numel(n->in[0]);
    uint8_t *packed = sn_malloc((size_t)bytes, "the interpreter's NF4 bytes", e);
    float *w = packed ? sn_malloc(sizeof *w * (size_t)numel, "the interpreter's NF4 weights", e) : NULL;
    if (!w) {
        free(packed);
        return SN_ERR_OOM;
    }
    for (int64_t i = 0; i < bytes; i++) packed[i] = (uint8_t)q[i];
    sn_nf4_dequantize(packed, numel, w);
    for (int64_t i = 0; i < numel; i++) y[i] = w[i];
    free(packed);
    free(w);
    return SN_OK;
}

/* y = dropout(x, seed): element i kept (x * the f32 scale, a product rounded to f32 as the kernels
 * make it, except in exact mode) or 0, by ir/dropout.h's mask. */
static void eval_dropout(const sn_node *n, const double *x, const double *seed, bool exact, double *y) {
    uint32_t key = sn_dropout_key((uint32_t)seed[0], (uint32_t)n->a.site);
    uint32_t thr = sn_dropout_threshold(n->a.f);
    float s = sn_dropout_scale(n->a.f);
    for (int64_t i = 0, m = sn_numel(n); i < m; i++)
        y[i] = sn_dropout_bits(key, (uint32_t)i) < thr ? 0.0
               : exact                                  ? x[i] * (double)s
                                                        : (double)(float)(x[i] * (double)s);
}

/* y (n's shape) = n applied to its inputs' values; fails only on a bad id or target. */
static sn_status eval(const sn_interp *it, const sn_node *n, double *y, sn_err *e) {
    double *in[SN_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = it->val[n->in[i]->id];
        SN_ASSERT(in[i]); /* freed too early, or an input after its user */
    }
    int64_t numel = sn_numel(n);
    switch (n->op) {
    case SN_OP_INPUT: case SN_OP_PARAM: case SN_OP_CONST: case SN_OP_FULL:
        SN_ASSERT(0); /* leaves hold their values from the setters and sn_interp_new */
    case SN_OP_ADD: case SN_OP_SUB: case SN_OP_MUL: case SN_OP_DIV: case SN_OP_EQ:
    case SN_OP_GELU_BWD: case SN_OP_SILU_BWD:
        eval_binary(n, in[0], in[1], y);
        return SN_OK;
    case SN_OP_NEG: case SN_OP_SCALE: case SN_OP_EXP: case SN_OP_LOG: case SN_OP_TANH:
    case SN_OP_SQRT: case SN_OP_RSQRT: case SN_OP_GELU: case SN_OP_SILU: case SN_OP_CAST:
    case SN_OP_POW2_SCALE:
        for (int64_t i = 0; i < numel; i++) y[i] = unary(n, in[0][i]);
        return SN_OK;
    case SN_OP_DROPOUT:
        eval_dropout(n, in[0], in[1], it->exact, y);
        return SN_OK;
    case SN_OP_SUM: case SN_OP_MEAN: case SN_OP_MAX: case SN_OP_AMAX:
        eval_reduce(n, in[0], y);
        return SN_OK;
    case SN_OP_SOFTMAX: case SN_OP_SOFTMAX_BWD: case SN_OP_LAYERNORM: case SN_OP_LAYERNORM_BWD:
    case SN_OP_LAYERNORM_BWD_W: case SN_OP_RMSNORM: case SN_OP_RMSNORM_BWD:
    case SN_OP_RMSNORM_BWD_W: case SN_OP_CAUSAL_MASK:
        sn_interp_rows(n, in, y);
        return SN_OK;
    case SN_OP_CROSS_ENTROPY: case SN_OP_CROSS_ENTROPY_BWD: return sn_interp_cross_entropy(n, in, y, e);
    case SN_OP_MATMUL:
        eval_matmul(n, in[0], in[1], y);
        return SN_OK;
    case SN_OP_RESHAPE: case SN_OP_PERMUTE: case SN_OP_BROADCAST: case SN_OP_SLICE:
    case SN_OP_PAD: case SN_OP_CONCAT:
        eval_layout(n, in, y);
        return SN_OK;
    case SN_OP_EMBEDDING: case SN_OP_EMBEDDING_BWD: return sn_interp_embedding(n, in, y, e);
    case SN_OP_ATTENTION_LSE: case SN_OP_ATTENTION: case SN_OP_ATTENTION_BWD_Q:
    case SN_OP_ATTENTION_BWD_K: case SN_OP_ATTENTION_BWD_V: case SN_OP_ATTENTION_CACHE:
        return sn_interp_attention(n, in, y, e);
    case SN_OP_DEQUANT_NF4: return eval_dequant_nf4(n, in[0], y, e);
    case SN_OP_COUNT: break;
    }
    SN_ASSERT(0);
}

/* ---- the interpreter ---- */

static bool is_leaf(const sn_node *n) { return sn_op_kind(n->op) == SN_K_LEAF; }

/* n's value (numel doubles); NULL with SN_ERR_OOM in e (the interpreter is for small graphs). */
static double *alloc_value(const sn_node *n, sn_err *e) {
    return sn_malloc(sizeof(double) * (size_t)sn_numel(n), "a value in the reference interpreter "
                     "(fp64: it is for small graphs)", e);
}

/* A FULL or CONST leaf's value, made on first use. */
static sn_status fill_constant(sn_interp *it, const sn_node *n, sn_err *e) {
    int64_t numel = sn_numel(n);
    double *v = it->val[n->id] = alloc_value(n, e);
    if (!v) return SN_ERR_OOM;
    for (int64_t k = 0; k < numel; k++) v[k] = n->op == SN_OP_FULL ? (double)n->a.f : (double)n->data[k];
    round_to(it, n->dtype, v, numel);
    return SN_OK;
}

sn_interp *sn_interp_new(const sn_graph *g, bool exact) {
    sn_interp *it = calloc(1, sizeof *it);
    if (!it) return NULL;
    int nn = g->n_nodes;
    size_t cnt = nn ? (size_t)nn : 1;
    it->g = g;
    it->n_nodes = nn;
    it->exact = exact;
    it->val = calloc(cnt, sizeof *it->val);
    it->set = calloc(cnt, sizeof *it->set);
    it->keep = calloc(cnt, sizeof *it->keep);
    it->last_use = malloc(cnt * sizeof *it->last_use);
    if (!it->val || !it->set || !it->keep || !it->last_use) {
        sn_interp_free(it);
        return NULL;
    }
    for (int i = 0; i < nn; i++) it->last_use[i] = -1;
    for (int i = 0; i < nn; i++) {
        const sn_node *n = g->nodes[i];
        SN_ASSERT(n->id == i);
        for (int k = 0; k < n->n_in; k++) {
            SN_ASSERT(n->in[k]->id < i);
            it->last_use[n->in[k]->id] = i;
        }
        if (is_leaf(n)) it->keep[i] = true;
        if (n->op == SN_OP_PARAM && n->grad) it->keep[n->grad->id] = true;
    }
    for (int i = 0; i < g->n_outputs; i++) it->keep[g->outputs[i]->id] = true;
    if (g->loss) it->keep[g->loss->id] = true;
    return it;
}

void sn_interp_free(sn_interp *it) {
    if (!it) return;
    for (int i = 0; it->val && i < it->n_nodes; i++) free(it->val[i]);
    free(it->val);
    free(it->set);
    free(it->keep);
    free(it->last_use);
    free(it);
}

static bool owns(const sn_interp *it, const sn_node *n) {
    return n && n->id >= 0 && n->id < it->n_nodes && it->g->nodes[n->id] == n;
}

/* The setters: exactly one of f, d, i is not NULL. */
static sn_status set_values(sn_interp *it, const sn_node *n, const float *f, const double *d,
                            const int32_t *i32, sn_err *e) {
    if (!owns(it, n))
        return sn_fail(e, SN_ERR_INVALID, "sn_interp_set: the node is not in this interpreter's "
                       "graph (was the graph changed after sn_interp_new?)");
    if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM)
        return sn_fail(e, SN_ERR_INVALID, "sn_interp_set: %%%d is a %s node; only input and param "
                       "nodes take values (the others are computed by sn_interp_run)",
                       n->id, sn_op_name(n->op));
    int64_t numel = sn_numel(n);
    bool u8 = n->dtype == SN_U8;
    if ((n->dtype == SN_I32 && !i32) || u8) /* i32 setters of i32 need no check */
        for (int64_t k = 0; k < numel; k++) {
            double v = f ? (double)f[k] : d ? d[k] : (double)i32[k];
            if (v == trunc(v) && v >= (u8 ? 0 : INT32_MIN) && v <= (u8 ? 255 : INT32_MAX)) continue;
            char at[64];
            return sn_fail(e, SN_ERR_INVALID, "sn_interp_set: %s '%s' (%%%d) is %s but element "
                           "%s is %g, not an integer in the %s range", sn_op_name(n->op),
                           n->name ? n->name : "?", n->id, sn_dtype_name(n->dtype),
                           sn_interp_index_str(k, n->rank, n->shape, at, sizeof at), v,
                           sn_dtype_name(n->dtype));
        }
    double *v = it->val[n->id];
    if (!v && !(v = it->val[n->id] = alloc_value(n, e))) return SN_ERR_OOM;
    for (int64_t k = 0; k < numel; k++) v[k] = f ? (double)f[k] : d ? d[k] : (double)i32[k];
    round_to(it, n->dtype, v, numel);
    it->set[n->id] = true;
    return SN_OK;
}

sn_status sn_interp_set(sn_interp *it, const sn_node *n, const float *data, sn_err *e) {
    return set_values(it, n, data, NULL, NULL, e);
}
sn_status sn_interp_set_f64(sn_interp *it, const sn_node *n, const double *data, sn_err *e) {
    return set_values(it, n, NULL, data, NULL, e);
}
sn_status sn_interp_set_i32(sn_interp *it, const sn_node *n, const int32_t *data, sn_err *e) {
    return set_values(it, n, NULL, NULL, data, e);
}

void sn_interp_keep_all(sn_interp *it, bool keep) { it->keep_all = keep; }

/* Frees the values of computed nodes a run does not keep (all of them with `all`). */
static void drop_values(sn_interp *it, bool all) {
    for (int i = 0; i < it->n_nodes; i++)
        if (!is_leaf(it->g->nodes[i]) && (all || !it->keep[i])) {
            free(it->val[i]);
            it->val[i] = NULL;
        }
}

sn_status sn_interp_run(sn_interp *it, sn_err *e) {
    const sn_graph *g = it->g;
    SN_ASSERT(g->n_nodes == it->n_nodes); /* nodes appended after sn_interp_new */
    for (int i = 0; i < it->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if ((n->op == SN_OP_INPUT || n->op == SN_OP_PARAM) && !it->set[i])
            return sn_fail(e, SN_ERR_INVALID, "%s '%s' (%%%d) was not set: call sn_interp_set "
                           "before sn_interp_run", sn_op_name(n->op), n->name ? n->name : "?", i);
        if ((n->op == SN_OP_FULL || n->op == SN_OP_CONST) && !it->val[i] && fill_constant(it, n, e))
            return SN_ERR_OOM;
    }
    if (!it->keep_all) drop_values(it, false); /* left over from a keep_all run: lowers the peak */
    for (int i = 0; i < it->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (is_leaf(n)) continue;
        sn_status st = it->val[i] || (it->val[i] = alloc_value(n, e)) ? eval(it, n, it->val[i], e) : SN_ERR_OOM;
        if (st) {
            drop_values(it, true); /* no half-run values */
            return st;
        }
        round_to(it, n->dtype, it->val[i], sn_numel(n));
        if (it->keep_all) continue;
        for (int k = 0; k < n->n_in; k++) { /* inputs read for the last time */
            int id = n->in[k]->id;
            if (it->last_use[id] == i && !it->keep[id]) {
                free(it->val[id]);
                it->val[id] = NULL;
            }
        }
        if (it->last_use[i] < 0 && !it->keep[i]) { /* read by nothing */
            free(it->val[i]);
            it->val[i] = NULL;
        }
    }
    return SN_OK;
}

const double *sn_interp_value(const sn_interp *it, const sn_node *n) {
    SN_ASSERT(owns(it, n));
    return it->val[n->id];
}
