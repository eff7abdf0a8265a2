/* fp8.c: the fp8 pass, after autodiff: the selected matrix products multiply 8-bit copies of
 * their operands (Hopper's and Ada's FP8 tensor cores run at twice bf16's rate), as Transformer
 * Engine's recipe does: the forward's operands (activations, weights) in e4m3 (3 mantissa bits,
 * up to 448), the gradients in e5m2 (2 bits, up to 57344: their range is the wider). Each
 * operand is scaled into its format's range first, per tensor, by a power of two (current
 * scaling: the scale of this step's own amax, not a history; a power of two so that scaling
 * and unscaling round nothing; the LM head's gradient from a bound it has by construction):
 *
 *   s  = pow2_scale(amax(amax(v as (rows, cols), 1), 0), max)   the largest 2^k with amax 2^k <= max
 *   v8 = cast(f32(v) * s, f8)                                    rounded to nearest, saturating
 *   y  = (v8 @ w8) / s_v / s_w                                   f32 sums of exact products
 *
 * Both 8-bit operands are made K-major (a (.., M, K), b (.., N, K): ta = 0, tb = 1), the one
 * layout cuBLASLt's FP8 products take on sm_89 and sm_90; an operand stored the other way is
 * read transposed by its cast. A value cast once per format and layout serves every product
 * that reads it so (the forward's x8 the backward's weight gradient reads too).
 * Selection (sn_fp8_policy): SN_FP8_HEAD the LM head's three products (the logits, and the
 * backward's two that read their gradient: 31% of GPT-2 124M's step FLOPs); SN_FP8_LINEAR every
 * linear layer's: a product with a parameter operand (through casts, views, dequantization),
 * and the backward's products that read a selected forward product's activation (the weight
 * gradient) or a parameter (the input gradient). Skipped: products with a dimension of at most
 * SN_LOWRANK_K (LoRA's adapters: small, and their rank too few values to scale well), or with
 * K or N not a multiple of 16 (cuBLASLt's FP8 alignment), and any product of two gradients.
 * Not exact: each operand loses all but 3 (or 2) mantissa bits; docs/fp8.md has what it costs
 * a training run. */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

/* x with casts, single-input views and dequantization looked through. */
static const sn_node *source(const sn_node *x) {
    while (x->n_in == 1 && (x->op == SN_OP_CAST || x->op == SN_OP_DEQUANT_NF4 ||
                            (sn_op_kind(x->op) == SN_K_LAYOUT && x->op != SN_OP_CONCAT)))
        x = x->in[0];
    return x;
}

/* x with reshapes and permutes looked through: the value whose elements x views. */
static const sn_node *viewed(const sn_node *x) {
    while (x->op == SN_OP_RESHAPE || x->op == SN_OP_PERMUTE) x = x->in[0];
    return x;
}

/* Whether x is a parameter's value (a concatenation of parameters too: fused siblings). */
static bool weight(const sn_node *x) {
    x = source(x);
    if (x->op != SN_OP_CONCAT) return x->op == SN_OP_PARAM;
    for (int k = 0; k < x->n_in; k++)
        if (source(x->in[k])->op != SN_OP_PARAM) return false;
    return true;
}

/* Whether product mm's shape suits an 8-bit product (above). */
static bool sized(const sn_node *mm) {
    const sn_node *a = mm->in[0];
    int64_t N = mm->shape[mm->rank - 1], M = mm->shape[mm->rank - 2];
    if (mm->in[1]->rank == 2 && !mm->a.ta) M = sn_numel(mm) / N; /* a shared weight: all rows */
    int64_t K = a->shape[a->rank - 1 - mm->a.ta];
    return M > SN_LOWRANK_K && N > SN_LOWRANK_K && K > SN_LOWRANK_K && K % 16 == 0 && N % 16 == 0;
}

/* The pass's choice per old node: which products, and each operand's format. */
typedef struct {
    const sn_graph *g;
    int nf;
    bool *picked;  /* [n]: products made 8-bit */
    bool *act;     /* [n]: what operands of picked forward products view (the weight
                      gradient's x, which it reads through a reshape of its own) */
} fp8_sel;

/* Whether x reaches a cross-entropy's logits (forward: the head's product) or comes from a
 * cross-entropy's backward (the head's gradient) through casts and views. */
static bool head_forward(const sn_graph *g, const sn_node *mm) {
    for (int i = mm->id + 1; i < g->n_nodes; i++) {
        const sn_node *c = g->nodes[i];
        if (c->op == SN_OP_CROSS_ENTROPY && source(c->in[0]) == mm) return true;
    }
    return false;
}
static bool head_gradient(const sn_node *x) { return source(x)->op == SN_OP_CROSS_ENTROPY_BWD; }

/* An operand's format: e5m2 for a gradient (a backward value that is no parameter's), else
 * e4m3. */
static sn_dtype format_of(const fp8_sel *s, const sn_node *x) {
    return x->id >= s->nf && !weight(x) && source(x)->id >= s->nf ? SN_F8E5M2 : SN_F8E4M3;
}

static void select_products(fp8_sel *s, sn_fp8_policy pol) {
    const sn_graph *g = s->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *mm = g->nodes[i];
        if (mm->op != SN_OP_MATMUL || !sn_dtype_is_float(mm->in[0]->dtype) ||
            sn_dtype_is_f8(mm->in[0]->dtype) || !sized(mm))
            continue;
        const sn_node *a = mm->in[0], *b = mm->in[1];
        bool fwd = i < s->nf, pick;
        if (pol == SN_FP8_HEAD)
            pick = fwd ? head_forward(g, mm) : head_gradient(a) || head_gradient(b);
        else
            pick = weight(a) || weight(b) || (!fwd && (s->act[viewed(a)->id] || s->act[viewed(b)->id]));
        if (pick && format_of(s, a) == SN_F8E5M2 && format_of(s, b) == SN_F8E5M2)
            pick = false; /* two gradients: no e5m2 x e5m2 product (cuBLASLt has none) */
        if (!pick) continue;
        s->picked[i] = true;
        if (fwd) s->act[viewed(a)->id] = s->act[viewed(b)->id] = true;
    }
}

/* ---- the rewrite ---- */

typedef struct {
    sn_rewrite r;
    const fp8_sel *sel;
    sn_node **scale[2]; /* [n] by old operand id: its scale for e4m3, e5m2 */
    sn_node **copy[4];  /* [n] by old operand id: its 8-bit copy, [format * 2 + transposed] */
} fp8_state;

static int fmt_index(sn_dtype t) { return t == SN_F8E5M2; }

/* A bound on |dlogits| for cross-entropy backward c, in the new graph: its entries are
 * (softmax - onehot) dloss / count, count its targets other than ignore_index, so |dloss| /
 * count bounds them; twice that, for the 16-bit rounding of dlogits the products read (up by
 * half an ulp). No pass over the 16,384 x 50,304 values, where an amax would read them all. */
static sn_node *dlogits_bound(fp8_state *s, const sn_node *c) {
    sn_graph *g = s->r.g;
    sn_node *tg = s->r.map[c->in[1]->id], *dl = s->r.map[c->in[2]->id];
    int64_t n = sn_numel(tg);
    sn_node *ign = sn_eq(g, tg, sn_scalar(g, SN_I32, (float)c->a.ignore_index));
    ign = sn_sum(g, sn_reshape(g, sn_cast(g, ign, SN_F32), (sn_shape){1, {n}}), 0, false);
    sn_node *count = sn_sub(g, sn_scalar(g, SN_F32, (float)n), ign);
    if (dl && dl->dtype != SN_F32) dl = sn_cast(g, dl, SN_F32);
    sn_node *mag = sn_amax(g, sn_reshape(g, dl, (sn_shape){1, {1}}), 0, false); /* |dloss| */
    return sn_div(g, sn_scale(g, mag, 2), count); /* count 0: inf, pow2_scale's 1 (all zeros) */
}

/* Old operand x's scale into format t, in the new graph: made once for all the reshapes and
 * permutes of one value (the same elements, so the same amax); for the LM head's gradient from
 * its bound instead (dlogits_bound). */
static sn_node *scale_of(fp8_state *s, const sn_node *x, sn_dtype t) {
    x = viewed(x);
    sn_node **memo = &s->scale[fmt_index(t)][x->id];
    if (*memo) return *memo;
    sn_graph *g = s->r.g;
    const sn_node *c = source(x);
    if (c->op == SN_OP_CROSS_ENTROPY_BWD)
        return *memo = sn_pow2_scale(g, dlogits_bound(s, c), (float)sn_dtype_max(t));
    sn_node *v = s->r.map[x->id];
    int64_t cols = v->rank ? v->shape[v->rank - 1] : 1, rows = sn_numel(v) / cols;
    /* by rows, then over them: a reduction's parallel work is its outputs */
    sn_node *m = sn_amax(g, sn_amax(g, sn_reshape(g, v, (sn_shape){2, {rows, cols}}), 1, false), 0, false);
    if (m && m->dtype != SN_F32) m = sn_cast(g, m, SN_F32);
    return *memo = sn_pow2_scale(g, m, (float)sn_dtype_max(t));
}

/* Old operand x's 8-bit copy in format t, transposed (its last two axes swapped) or not. */
static sn_node *copy_of(fp8_state *s, const sn_node *x, sn_dtype t, bool transposed) {
    sn_node **memo = &s->copy[fmt_index(t) * 2 + transposed][x->id];
    if (*memo) return *memo;
    sn_graph *g = s->r.g;
    sn_node *v = s->r.map[x->id], *sc = scale_of(s, x, t);
    if (transposed) v = sn_transpose(g, v, v->rank - 2, v->rank - 1);
    if (v && v->dtype != SN_F32) v = sn_cast(g, v, SN_F32);
    return *memo = sn_cast(g, sn_mul(g, v, sc), t);
}

/* Old product mm (picked) as the unscaled product of its operands' 8-bit copies. */
static void rewrite_product(fp8_state *s, const sn_node *mm) {
    sn_graph *g = s->r.g;
    const sn_node *a = mm->in[0], *b = mm->in[1];
    sn_dtype ta = format_of(s->sel, a), tb = format_of(s->sel, b);
    sn_node *a8 = copy_of(s, a, ta, mm->a.ta), *b8 = copy_of(s, b, tb, !mm->a.tb);
    sn_node *y = sn_matmul_t(g, a8, b8, false, true);
    y = sn_div(g, sn_div(g, y, scale_of(s, a, ta)), scale_of(s, b, tb));
    s->r.map[mm->id] = y;
}

sn_status sn_pass_fp8(const sn_graph *in, sn_fp8_policy pol, sn_graph **out, int *n_products,
                      sn_err *e) {
    *out = NULL;
    *n_products = 0;
    if (pol == SN_FP8_OFF) return SN_OK;
    if (!in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "fp8: the graph has no backward; the pass runs after "
                       "autodiff (it picks the gradients' format by the forward/backward split)");
    int n = in->n_nodes;
    fp8_sel sel = {in, in->n_forward, calloc((size_t)n + 1, sizeof(bool)), calloc((size_t)n + 1, sizeof(bool))};
    fp8_state s = {.sel = &sel};
    bool ok = sel.picked && sel.act;
    for (int k = 0; k < 2; k++) ok &= (s.scale[k] = calloc((size_t)n + 1, sizeof(sn_node *))) != NULL;
    for (int k = 0; k < 4; k++) ok &= (s.copy[k] = calloc((size_t)n + 1, sizeof(sn_node *))) != NULL;
    sn_status st = ok ? SN_OK : sn_fail(e, SN_ERR_OOM, "the fp8 pass: out of memory");
    if (!st) select_products(&sel, pol);
    for (int i = 0; !st && i < n; i++) *n_products += sel.picked[i];
    if (!st && *n_products && !(st = sn_rewrite_begin(&s.r, in, e))) {
        for (int i = 0; i < n; i++) {
            if (i == in->n_forward) s.r.g->has_backward = true; /* what its nodes make is backward */
            if (sel.picked[i]) rewrite_product(&s, in->nodes[i]);
            else sn_rewrite_copy(&s.r, in->nodes[i]);
        }
        st = sn_rewrite_end(&s.r, "fp8", out, e); /* a shape error recorded in r.g comes out here */
    }
    free(sel.picked);
    free(sel.act);
    for (int k = 0; k < 2; k++) free(s.scale[k]);
    for (int k = 0; k < 4; k++) free(s.copy[k]);
    return st;
}

static const char *const policy_names[] = {"off", "head", "linear"};

const char *sn_fp8_policy_name(sn_fp8_policy p) {
    SN_ASSERT((unsigned)p < sizeof policy_names / sizeof policy_names[0]);
    return policy_names[p];
}

int sn_fp8_policy_parse(const char *s) {
    for (int i = 0; i < (int)(sizeof policy_names / sizeof policy_names[0]); i++)
        if (!strcmp(s, policy_names[i])) return i;
    return -1;
}
