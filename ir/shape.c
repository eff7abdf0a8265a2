/* shape.c: the shape and dtype rule of every op, shared by the frontend (which reports a
 * mistake at the call that made it) and the verifier (which re-checks every pass's output).
 * Convention: axes are already normalised (0 <= axis < rank) when a node reaches sn_infer, and
 * every sum, difference or product of sizes is checked for overflow (the sizes come from text and
 * files: a wrapped size passes a comparison and the interpreter then reads past a buffer). */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ir.h"
#include "nf4.h"

_Static_assert(SN_OP_COUNT == 54, "a new op needs its shape rule in sn_infer");

static int bad(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *msg, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* type strings of inputs 0..2, for messages */
typedef struct {
    char s[3][96];
} types;
static types type_strs(const sn_node *n) {
    types t;
    for (int i = 0; i < 3; i++) {
        if (i < n->n_in) sn_type_str(n->in[i], t.s[i], sizeof t.s[i]);
        else t.s[i][0] = 0;
    }
    return t;
}

static void copy_shape(sn_node *n, const sn_node *from) {
    n->rank = from->rank;
    memcpy(n->shape, from->shape, sizeof n->shape);
}

bool sn_same_shape(const sn_node *a, const sn_node *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int sn_broadcast_shapes(int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out) {
    int rank = ra > rb ? ra : rb;
    for (int i = 0; i < rank; i++) {
        int ia = ra - rank + i, ib = rb - rank + i;
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1) return -1;
        out[i] = da == 1 ? db : da;
    }
    *r = rank;
    return 0;
}

static int check_leaf(sn_node *n, char *msg, size_t len) {
    if ((unsigned)n->dtype >= SN_DTYPE_COUNT) return bad(msg, len, "unknown dtype %d", n->dtype);
    if (n->rank < 0 || n->rank > SN_MAX_RANK)
        return bad(msg, len, "rank %d is outside 0..%d", n->rank, SN_MAX_RANK);
    for (int i = 0; i < n->rank; i++)
        if (n->shape[i] <= 0)
            return bad(msg, len, "dimension %d is %lld; dimensions must be positive", i,
                       (long long)n->shape[i]);
    return 0;
}

static int need_float(const sn_node *n, int i, char *msg, size_t len) {
    if (!sn_dtype_is_float(n->in[i]->dtype))
        return bad(msg, len, "input %d is %s but must be a float type (use sn_cast)", i,
                   sn_dtype_name(n->in[i]->dtype));
    return 0;
}

static int need_same_dtype(const sn_node *n, int i, int j, char *msg, size_t len) {
    if (n->in[i]->dtype != n->in[j]->dtype) {
        types t = type_strs(n);
        return bad(msg, len, "inputs have different dtypes: %s and %s (insert sn_cast)", t.s[i],
                   t.s[j]);
    }
    return 0;
}

static int infer_matmul(sn_node *n, char *msg, size_t len) {
    const sn_node *a = n->in[0], *b = n->in[1];
    types t = type_strs(n);
    if (a->rank < 2 || b->rank < 2)
        return bad(msg, len, "a is %s, b is %s: both need rank >= 2", t.s[0], t.s[1]);
    if (need_float(n, 0, msg, len)) return -1;
    if (sn_dtype_is_f8(a->dtype) != sn_dtype_is_f8(b->dtype))
        return bad(msg, len, "a is %s, b is %s: a product of 8-bit floats takes two of them", t.s[0], t.s[1]);
    if (!(sn_dtype_is_f8(a->dtype) && sn_dtype_is_f8(b->dtype)) && need_same_dtype(n, 0, 1, msg, len))
        return -1; /* two 8-bit floats may differ in format (e4m3 by e5m2: a gradient's product) */
    if ((unsigned)n->a.ta > 1 || (unsigned)n->a.tb > 1)
        return bad(msg, len, "ta=%d, tb=%d: each must be 0 or 1", n->a.ta, n->a.tb);
    int64_t m = a->shape[a->rank - 2 + n->a.ta], ka = a->shape[a->rank - 1 - n->a.ta];
    int64_t kb = b->shape[b->rank - 2 + n->a.tb], nb = b->shape[b->rank - 1 - n->a.tb];
    if (ka != kb)
        return bad(msg, len, "a is %s, b is %s (ta=%d, tb=%d): inner dimensions %lld and %lld differ",
                   t.s[0], t.s[1], n->a.ta, n->a.tb, (long long)ka, (long long)kb);
    const sn_node *batch = a->rank >= b->rank ? a : b;
    if (a->rank > 2 && b->rank > 2) {
        bool ok = a->rank == b->rank;
        for (int i = 0; ok && i < a->rank - 2; i++) ok = a->shape[i] == b->shape[i];
        if (!ok)
            return bad(msg, len, "a is %s, b is %s: batch dimensions differ (they must be equal, "
                       "or one operand must be a rank-2 matrix)", t.s[0], t.s[1]);
    }
    /* bf16/f16 operands accumulate in f32 and return f32 (the GEMM libraries' bf16 x bf16 -> f32
     * form; autocast's products): a product is never rounded to 8 bits of mantissa */
    n->dtype = a->dtype == SN_BF16 || a->dtype == SN_F16 || sn_dtype_is_f8(a->dtype) ? SN_F32 : a->dtype;
    n->rank = batch->rank;
    for (int i = 0; i < batch->rank - 2; i++) n->shape[i] = batch->shape[i];
    n->shape[n->rank - 2] = m;
    n->shape[n->rank - 1] = nb;
    return 0;
}

static int infer_reduce(sn_node *n, char *msg, size_t len) {
    const sn_node *x = n->in[0];
    if (need_float(n, 0, msg, len)) return -1;
    if (n->a.axis < 0 || n->a.axis >= x->rank)
        return bad(msg, len, "axis %d is out of range for %s", n->a.axis, type_strs(n).s[0]);
    n->dtype = x->dtype;
    n->rank = 0;
    for (int i = 0; i < x->rank; i++) {
        if (i != n->a.axis) n->shape[n->rank++] = x->shape[i];
        else if (n->a.keepdim) n->shape[n->rank++] = 1;
    }
    return 0;
}

/* w (and b) must be vectors of x's last dimension */
static int infer_norm(sn_node *n, int n_vec, char *msg, size_t len) {
    const sn_node *x = n->in[0];
    types t = type_strs(n);
    if (x->rank < 1) return bad(msg, len, "x is %s: needs rank >= 1", t.s[0]);
    if (need_float(n, 0, msg, len)) return -1;
    for (int i = 1; i <= n_vec; i++) {
        const sn_node *v = n->in[i];
        if (v->rank != 1 || v->shape[0] != x->shape[x->rank - 1])
            return bad(msg, len, "x is %s, input %d is %s: weights must be a vector of x's last "
                       "dimension %lld", t.s[0], i, t.s[i], (long long)x->shape[x->rank - 1]);
        if (need_float(n, i, msg, len)) return -1;
    }
    n->dtype = x->dtype;
    copy_shape(n, x);
    return 0;
}

/* dy must match x; used by the backward row ops */
static int need_same_shape(const sn_node *n, int i, int j, char *msg, size_t len) {
    if (!sn_same_shape(n->in[i], n->in[j])) {
        types t = type_strs(n);
        return bad(msg, len, "input %d is %s, input %d is %s: shapes must be equal", i, t.s[i], j,
                   t.s[j]);
    }
    return 0;
}

static int infer_layout(sn_node *n, char *msg, size_t len) {
    const sn_node *x = n->in[0];
    types t = type_strs(n);
    char s[96];
    switch (n->op) {
    case SN_OP_RESHAPE:
        if (check_leaf(n, msg, len)) return -1;
        if (sn_numel(n) != sn_numel(x))
            return bad(msg, len, "cannot reshape %s (%lld elements) to %s (%lld elements)", t.s[0],
                       (long long)sn_numel(x), sn_shape_str(n->rank, n->shape, s, sizeof s),
                       (long long)sn_numel(n));
        n->dtype = x->dtype;
        return 0;
    case SN_OP_PERMUTE: {
        int seen[SN_MAX_RANK] = {0};
        for (int i = 0; i < x->rank; i++) {
            int p = n->a.perm[i];
            if (p < 0 || p >= x->rank || seen[p]++)
                return bad(msg, len, "perm is not a permutation of the %d axes of %s", x->rank,
                           t.s[0]);
            n->shape[i] = x->shape[p];
        }
        n->rank = x->rank;
        n->dtype = x->dtype;
        return 0;
    }
    case SN_OP_BROADCAST: {
        if (check_leaf(n, msg, len)) return -1;
        int r;
        int64_t out[SN_MAX_RANK];
        bool ok = n->rank >= x->rank &&
                  sn_broadcast_shapes(x->rank, x->shape, n->rank, n->shape, &r, out) == 0;
        for (int i = 0; ok && i < n->rank; i++) ok = out[i] == n->shape[i];
        if (!ok)
            return bad(msg, len, "cannot broadcast %s to %s", t.s[0],
                       sn_shape_str(n->rank, n->shape, s, sizeof s));
        n->dtype = x->dtype;
        return 0;
    }
    case SN_OP_SLICE:
    case SN_OP_PAD: {
        int ax = n->a.axis;
        if (ax < 0 || ax >= x->rank)
            return bad(msg, len, "axis %d is out of range for %s", ax, t.s[0]);
        int64_t d = x->shape[ax];
        n->dtype = x->dtype;
        copy_shape(n, x);
        if (n->op == SN_OP_SLICE) {
            if (n->a.start < 0 || n->a.end > d || n->a.start >= n->a.end)
                return bad(msg, len, "slice [%lld, %lld) of axis %d is empty or outside %s",
                           (long long)n->a.start, (long long)n->a.end, ax, t.s[0]);
            n->shape[ax] = n->a.end - n->a.start;
        } else {
            int64_t stop; /* start + d, which an absurd start overflows */
            if (n->a.start < 0 || __builtin_add_overflow(n->a.start, d, &stop) || stop > n->a.end)
                return bad(msg, len, "cannot place %s at %lld of an axis of size %lld", t.s[0],
                           (long long)n->a.start, (long long)n->a.end);
            n->shape[ax] = n->a.end;
        }
        return 0;
    }
    case SN_OP_CONCAT: {
        int ax = n->a.axis;
        if (ax < 0 || ax >= x->rank)
            return bad(msg, len, "axis %d is out of range for %s", ax, t.s[0]);
        n->dtype = x->dtype;
        copy_shape(n, x);
        for (int i = 1; i < n->n_in; i++) {
            const sn_node *y = n->in[i];
            bool ok = y->rank == x->rank && y->dtype == x->dtype;
            for (int k = 0; ok && k < x->rank; k++) ok = k == ax || y->shape[k] == x->shape[k];
            if (!ok)
                return bad(msg, len, "input 0 is %s, input %d is %s: all must agree except on "
                           "axis %d", t.s[0], i, sn_type_str(y, s, sizeof s), ax);
            if (__builtin_add_overflow(n->shape[ax], y->shape[ax], &n->shape[ax]))
                return bad(msg, len, "the inputs' sizes along axis %d add up to more than %lld: "
                           "use smaller inputs", ax, (long long)INT64_MAX);
        }
        return 0;
    }
    default: SN_ASSERT(0);
    }
}

/* Does x have rank r, the batch dimensions (all but the last two) of q, and the trailing
 * dimensions (rows, cols)? cols < 0: any; rows < 0: rank r - 1 with q's rows (lse).
 * kv: x is k or v, whose last batch dimension (its heads) may be any count; kv_heads_divide
 * checks it against q's (grouped-query attention). */
static bool attention_fits(const sn_node *x, const sn_node *q, int64_t rows, int64_t cols, bool kv) {
    int r = rows < 0 ? q->rank - 1 : q->rank;
    if (x->rank != r) return false;
    for (int i = 0; i < q->rank - 2; i++)
        if (x->shape[i] != q->shape[i] && !(kv && i == q->rank - 3)) return false;
    if (rows < 0) return x->shape[r - 1] == q->shape[r - 1];
    return x->shape[r - 2] == rows && (cols < 0 || x->shape[r - 1] == cols);
}

/* Grouped-query attention: k or v (x, named `name`) may have fewer heads (its last batch
 * dimension) than q, a divisor of q's: query head h reads kv head h / (H / Hkv). */
static int kv_heads_divide(const sn_node *x, const sn_node *q, const char *name, char *msg,
                           size_t len) {
    if (q->rank < 3) return 0;
    int64_t H = q->shape[q->rank - 3], Hkv = x->shape[q->rank - 3];
    if (Hkv >= 1 && H % Hkv == 0) return 0;
    return bad(msg, len, "%s has %lld heads, q has %lld: the kv heads must divide the query "
               "heads (axis %d; grouped-query attention)", name, (long long)Hkv, (long long)H,
               q->rank - 3);
}

int64_t sn_attention_group(const sn_node *n) {
    SN_ASSERT(sn_op_kind(n->op) == SN_K_ATTENTION);
    const sn_node *q = n->in[0], *k = n->in[1];
    return q->rank < 3 ? 1 : q->shape[q->rank - 3] / k->shape[q->rank - 3];
}

/* q (.., H, T, D), k (.., Hkv, S, D), v (.., Hkv, S, Dv), lse (.., H, T), o and dout
 * (.., H, T, Dv); T <= S; Hkv divides H (grouped-query attention: query head h reads kv head
 * h / (H / Hkv)). dk and dv are shaped like k and v. */
static int infer_attention(sn_node *n, char *msg, size_t len) {
    static const char *names[] = {"q", "k", "v", "o", "dout", "lse"};
    const sn_node *q = n->in[0], *k = n->in[1];
    char all[600], s[96];
    size_t at = 0;
    for (int i = 0; i < n->n_in; i++) {
        int name = i == n->n_in - 1 && i >= 3 ? 5 : i;
        at += (size_t)snprintf(all + at, sizeof all - at, "%s%s is %s", i ? ", " : "", names[name],
                               sn_type_str(n->in[i], s, sizeof s));
        if (at >= sizeof all) break;
    }
    int r = q->rank;
    if (r < 2 || !attention_fits(k, q, k->rank >= 2 ? k->shape[k->rank - 2] : 0, q->shape[r - 1], true))
        return bad(msg, len, "%s: need q (.., T, D) and k (.., S, D) with the same leading "
                   "dimensions (k may have fewer heads, a divisor of q's)", all);
    if (kv_heads_divide(k, q, "k", msg, len)) return -1;
    int64_t T = q->shape[r - 2], S = k->shape[r - 2];
    if (T > S) return bad(msg, len, "%s: queries T = %lld exceed keys S = %lld (causal attention "
                          "needs T <= S)", all, (long long)T, (long long)S);
    if (need_float(n, 0, msg, len) || need_same_dtype(n, 0, 1, msg, len)) return -1;
    if (n->op == SN_OP_ATTENTION_LSE) {
        n->dtype = SN_F32;
        n->rank = r - 1;
        memset(n->shape, 0, sizeof n->shape);
        memcpy(n->shape, q->shape, sizeof(int64_t) * (size_t)(r - 1));
        return 0;
    }
    const sn_node *v = n->in[2], *lse = n->in[n->n_in - 1];
    if (!attention_fits(v, q, S, -1, true) || (r >= 3 && v->shape[r - 3] != k->shape[r - 3]))
        return bad(msg, len, "%s: v must be (.., S, Dv) with k's leading dimensions", all);
    int64_t Dv = v->shape[r - 1];
    if (need_same_dtype(n, 0, 2, msg, len)) return -1;
    if (!attention_fits(lse, q, -1, -1, false) || !sn_dtype_is_float(lse->dtype))
        return bad(msg, len, "%s: lse must be a float (.., T) (from attention_lse)", all);
    for (int i = 3; i <= 4 && n->op != SN_OP_ATTENTION; i++)
        if (!attention_fits(n->in[i], q, T, Dv, false) || n->in[i]->dtype != q->dtype)
            return bad(msg, len, "%s: o and dout must be (.., T, Dv) like attention's output, in "
                       "q's dtype", all);
    const sn_node *like = n->op == SN_OP_ATTENTION_BWD_K ? k : n->op == SN_OP_ATTENTION_BWD_V ? v : q;
    n->dtype = q->dtype;
    copy_shape(n, like);
    if (n->op == SN_OP_ATTENTION) n->shape[r - 1] = Dv;
    return 0;
}

/* attention_cache (ops.h): q (B, H, T, D), kc (B, Hkv, S, D), vc (B, Hkv, S, Dv), mask
 * (B, 1, 1, S) f32, k (B, Hkv, T, D), v (B, Hkv, T, Dv), Hkv dividing H; all but mask of q's
 * float dtype; -> (B, H, T, Dv). */
static int infer_attention_cache(sn_node *n, char *msg, size_t len) {
    const sn_node *q = n->in[0], *kc = n->in[1], *vc = n->in[2], *mask = n->in[3];
    const sn_node *k = n->in[4], *v = n->in[5];
    char all[600], s[96];
    static const char *names[] = {"q", "k_cache", "v_cache", "mask", "k", "v"};
    size_t at = 0;
    for (int i = 0; i < 6 && at < sizeof all; i++)
        at += (size_t)snprintf(all + at, sizeof all - at, "%s%s is %s", i ? ", " : "", names[i],
                               sn_type_str(n->in[i], s, sizeof s));
    bool ok = q->rank == 4 && kc->rank == 4 && vc->rank == 4 && mask->rank == 4 && k->rank == 4 &&
              v->rank == 4;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = ok ? kc->shape[1] : 0, S = ok ? kc->shape[2] : 0, Dv = ok ? vc->shape[3] : 0;
    ok = ok && kc->shape[0] == B && kc->shape[3] == D && vc->shape[0] == B && vc->shape[1] == Hkv &&
         vc->shape[2] == S && k->shape[0] == B && k->shape[1] == Hkv && k->shape[2] == T &&
         k->shape[3] == D && v->shape[0] == B && v->shape[1] == Hkv && v->shape[2] == T &&
         v->shape[3] == Dv && mask->shape[0] == B && mask->shape[1] == 1 && mask->shape[2] == 1 &&
         mask->shape[3] == S && Hkv >= 1 && H % Hkv == 0;
    if (!ok)
        return bad(msg, len, "%s: need q (B, H, T, D), k_cache (B, Hkv, S, D), v_cache (B, Hkv, "
                   "S, Dv), mask (B, 1, 1, S), k (B, Hkv, T, D) and v (B, Hkv, T, Dv), Hkv "
                   "dividing H", all);
    if (need_float(n, 0, msg, len)) return -1;
    for (int i = 1; i < 6; i++)
        if (i != 3 && need_same_dtype(n, 0, i, msg, len)) return -1;
    if (mask->dtype != SN_F32) return bad(msg, len, "%s: the mask must be f32", all);
    n->dtype = q->dtype;
    n->rank = 4;
    memset(n->shape, 0, sizeof n->shape);
    n->shape[0] = B, n->shape[1] = H, n->shape[2] = T, n->shape[3] = Dv;
    return 0;
}

static int infer_op(sn_node *n, char *msg, size_t len) {
    sn_op op = n->op;
    if ((unsigned)op >= SN_OP_COUNT) return bad(msg, len, "unknown op %d", op);
    if (n->n_in < sn_op_min_inputs(op) || n->n_in > sn_op_max_inputs(op))
        return bad(msg, len, "takes %d..%d inputs, got %d", sn_op_min_inputs(op),
                   sn_op_max_inputs(op), n->n_in);
    types t = type_strs(n);
    const sn_node *x = n->n_in ? n->in[0] : NULL;
    switch (op) {
    case SN_OP_INPUT:
    case SN_OP_FULL:
        return check_leaf(n, msg, len);
    case SN_OP_PARAM:
        if (check_leaf(n, msg, len)) return -1;
        /* its init rule is the weights' (the trainer draws them, then quantizes: train.h) */
        if (n->dtype == SN_U8 && (!n->a.frozen || n->rank != 1))
            return bad(msg, len, "a u8 parameter is packed storage (an NF4 weight's, read by "
                       "dequant_nf4): it must be frozen and of rank 1 (sn_param_nf4 makes one)");
        if (!sn_dtype_is_float(n->dtype) && n->dtype != SN_U8)
            return bad(msg, len, "parameters must have a float dtype, not %s", sn_dtype_name(n->dtype));
        return 0;
    case SN_OP_CONST:
        if (check_leaf(n, msg, len)) return -1;
        if (!n->data) return bad(msg, len, "a constant needs data");
        return 0;
    case SN_OP_ADD: case SN_OP_SUB: case SN_OP_MUL: case SN_OP_DIV: case SN_OP_EQ:
    case SN_OP_GELU_BWD: case SN_OP_SILU_BWD: {
        if (op != SN_OP_EQ && (need_float(n, 0, msg, len) || need_float(n, 1, msg, len))) return -1;
        if (need_same_dtype(n, 0, 1, msg, len)) return -1;
        const sn_node *b = n->in[1];
        if (sn_broadcast_shapes(x->rank, x->shape, b->rank, b->shape, &n->rank, n->shape))
            return bad(msg, len, "a is %s, b is %s: shapes do not broadcast", t.s[0], t.s[1]);
        n->dtype = x->dtype;
        return 0;
    }
    case SN_OP_NEG: case SN_OP_SCALE: case SN_OP_EXP: case SN_OP_LOG: case SN_OP_TANH:
    case SN_OP_SQRT: case SN_OP_RSQRT: case SN_OP_GELU: case SN_OP_SILU:
        if (need_float(n, 0, msg, len)) return -1;
        n->dtype = x->dtype;
        copy_shape(n, x);
        return 0;
    case SN_OP_DROPOUT: /* x's shape: the mask's element i is x's */
        if (need_float(n, 0, msg, len)) return -1;
        if (n->in[1]->dtype != SN_F32 || sn_numel(n->in[1]) != 1)
            return bad(msg, len, "the seed is %s: it must be an f32 scalar", t.s[1]);
        if (!(n->a.f >= 0 && n->a.f < 1)) return bad(msg, len, "probability %g: give one in [0, 1)", n->a.f);
        if (n->a.site < 0) return bad(msg, len, "site %d: give 0 or more", n->a.site);
        n->dtype = x->dtype;
        copy_shape(n, x);
        return 0;
    case SN_OP_CAST:
        if ((unsigned)n->dtype >= SN_DTYPE_COUNT) return bad(msg, len, "unknown dtype %d", n->dtype);
        copy_shape(n, x);
        return 0;
    case SN_OP_SUM: case SN_OP_MEAN: case SN_OP_MAX: case SN_OP_AMAX:
        return infer_reduce(n, msg, len);
    case SN_OP_POW2_SCALE:
        if (need_float(n, 0, msg, len)) return -1;
        if (!(n->a.f > 0 && isfinite(n->a.f)))
            return bad(msg, len, "f is %g: the bound must be positive and finite", n->a.f);
        n->dtype = x->dtype;
        copy_shape(n, x);
        return 0;
    case SN_OP_SOFTMAX:
        if (x->rank < 1) return bad(msg, len, "x is %s: needs rank >= 1", t.s[0]);
        return infer_norm(n, 0, msg, len);
    case SN_OP_SOFTMAX_BWD:
        if (need_same_shape(n, 0, 1, msg, len)) return -1;
        return infer_norm(n, 0, msg, len);
    case SN_OP_LAYERNORM: return infer_norm(n, 2, msg, len);
    case SN_OP_RMSNORM: return infer_norm(n, 1, msg, len);
    case SN_OP_LAYERNORM_BWD: case SN_OP_RMSNORM_BWD:
        if (need_same_shape(n, 0, 2, msg, len)) return -1;
        return infer_norm(n, 1, msg, len);
    case SN_OP_LAYERNORM_BWD_W: case SN_OP_RMSNORM_BWD_W:
        if (need_same_shape(n, 0, 1, msg, len) || infer_norm(n, 0, msg, len)) return -1;
        n->rank = 1;
        n->shape[0] = x->shape[x->rank - 1];
        return 0;
    case SN_OP_CAUSAL_MASK:
        if (x->rank < 2 || x->shape[x->rank - 2] > x->shape[x->rank - 1])
            return bad(msg, len, "x is %s: needs (.., T, S) with T <= S", t.s[0]);
        return infer_norm(n, 0, msg, len);
    case SN_OP_CROSS_ENTROPY:
    case SN_OP_CROSS_ENTROPY_BWD: {
        const sn_node *tg = n->in[1];
        bool ok = x->rank >= 1 && tg->rank == x->rank - 1;
        for (int i = 0; ok && i < tg->rank; i++) ok = tg->shape[i] == x->shape[i];
        if (!ok)
            return bad(msg, len, "logits are %s, targets are %s: targets must have the logits' "
                       "shape without the last (vocabulary) axis", t.s[0], t.s[1]);
        if (tg->dtype != SN_I32)
            return bad(msg, len, "targets are %s but must be i32", t.s[1]);
        if (need_float(n, 0, msg, len)) return -1;
        if (n->a.start != 0 || n->a.end < 0 || n->a.end > x->shape[x->rank - 1])
            return bad(msg, len, "logits are %s: classes [%lld, %lld) must be [0, end) with end <= "
                       "%lld (end = 0: every class)", t.s[0], (long long)n->a.start,
                       (long long)n->a.end, (long long)x->shape[x->rank - 1]);
        if (op == SN_OP_CROSS_ENTROPY) {
            n->dtype = SN_F32;
            n->rank = 0;
            return 0;
        }
        if (n->in[2]->rank != 0 || !sn_dtype_is_float(n->in[2]->dtype))
            return bad(msg, len, "dloss is %s but must be a float scalar", t.s[2]);
        n->dtype = x->dtype;
        copy_shape(n, x);
        return 0;
    }
    case SN_OP_MATMUL: return infer_matmul(n, msg, len);
    case SN_OP_RESHAPE: case SN_OP_PERMUTE: case SN_OP_BROADCAST: case SN_OP_SLICE:
    case SN_OP_PAD: case SN_OP_CONCAT:
        return infer_layout(n, msg, len);
    case SN_OP_EMBEDDING: {
        const sn_node *ids = n->in[1];
        if (x->rank != 2 || !sn_dtype_is_float(x->dtype))
            return bad(msg, len, "table is %s: must be a float matrix (V, C)", t.s[0]);
        if (ids->dtype != SN_I32 || ids->rank >= SN_MAX_RANK)
            return bad(msg, len, "ids are %s: must be i32 of rank < %d", t.s[1], SN_MAX_RANK);
        n->dtype = x->dtype;
        n->rank = ids->rank + 1;
        for (int i = 0; i < ids->rank; i++) n->shape[i] = ids->shape[i];
        n->shape[ids->rank] = x->shape[1];
        return 0;
    }
    case SN_OP_EMBEDDING_BWD: {
        const sn_node *ids = x, *dy = n->in[1];
        bool ok = ids->dtype == SN_I32 && dy->rank == ids->rank + 1 && n->rank == 2 &&
                  n->shape[0] > 0 && n->shape[1] == dy->shape[dy->rank - 1];
        for (int i = 0; ok && i < ids->rank; i++) ok = dy->shape[i] == ids->shape[i];
        if (!ok)
            return bad(msg, len, "ids are %s, dy is %s: need i32 ids (..), dy (.., C) and an "
                       "output (V, C)", t.s[0], t.s[1]);
        if (!sn_dtype_is_float(n->dtype)) return bad(msg, len, "output must be a float type");
        return 0;
    }
    case SN_OP_ATTENTION_LSE: case SN_OP_ATTENTION: case SN_OP_ATTENTION_BWD_Q:
    case SN_OP_ATTENTION_BWD_K: case SN_OP_ATTENTION_BWD_V:
        return infer_attention(n, msg, len);
    case SN_OP_ATTENTION_CACHE: return infer_attention_cache(n, msg, len);
    case SN_OP_DEQUANT_NF4: {
        if (check_leaf(n, msg, len)) return -1;
        if (!sn_dtype_is_float(n->dtype))
            return bad(msg, len, "the output must be a float type, not %s", sn_dtype_name(n->dtype));
        int64_t want = sn_nf4_layout_of(sn_numel(n)).bytes;
        if (x->dtype != SN_U8 || x->rank != 1 || x->shape[0] != want) {
            char out[96];
            return bad(msg, len, "packed is %s, the output %s: NF4 storage of %lld weights is "
                       "u8[%lld] (ir/nf4.h)", t.s[0], sn_type_str(n, out, sizeof out),
                       (long long)sn_numel(n), (long long)want);
        }
        return 0;
    }
    case SN_OP_COUNT: break;
    }
    SN_ASSERT(0);
}

/* A shape whose element count (or its size in bytes, up to 8 per element) would overflow int64
 * is refused before and after the rule: the caller's declared shape, then the inferred one. */
static int check_size(const sn_node *n, const char *whose, char *msg, size_t len) {
    if (n->rank < 0 || n->rank > SN_MAX_RANK) return 0; /* the rule reports it */
    for (int i = 0; i < n->rank; i++)
        if (n->shape[i] <= 0) return 0;
    if (sn_shape_numel_checked(n->rank, n->shape, NULL)) return 0;
    char s[96];
    return bad(msg, len, "%s shape %s has more than %lld elements (the product of its dimensions "
               "overflows 64-bit sizes): use smaller dimensions", whose,
               sn_shape_str(n->rank, n->shape, s, sizeof s), (long long)SN_MAX_NUMEL);
}

/* 8-bit floats (the fp8 pass's operands) are made by casts and read by casts, products and
 * reshapes/permutes alone; a product reads two of them (either format) or none. */
static int check_f8(const sn_node *n, char *msg, size_t len) {
    bool reads = n->op == SN_OP_CAST || n->op == SN_OP_MATMUL || n->op == SN_OP_RESHAPE ||
                 n->op == SN_OP_PERMUTE;
    for (int i = 0; i < n->n_in; i++)
        if (sn_dtype_is_f8(n->in[i]->dtype) && !reads)
            return bad(msg, len, "input %d is %s: 8-bit floats are read only by casts, products "
                       "and reshapes or permutes (cast it to f32 first)", i,
                       sn_dtype_name(n->in[i]->dtype));
    bool makes = n->op == SN_OP_CAST || n->op == SN_OP_RESHAPE || n->op == SN_OP_PERMUTE;
    if ((unsigned)n->dtype < SN_DTYPE_COUNT && sn_dtype_is_f8(n->dtype) && !makes)
        return bad(msg, len, "%s: 8-bit floats are made only by casts (and viewed by reshapes or "
                   "permutes)", sn_dtype_name(n->dtype));
    return 0;
}

int sn_infer(sn_node *n, char *msg, size_t len) {
    if (check_size(n, "the declared", msg, len) || infer_op(n, msg, len) || check_f8(n, msg, len))
        return -1;
    return check_size(n, "the resulting", msg, len);
}
