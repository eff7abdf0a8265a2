/* kernel_gemm.c: a GEMM kernel's part of the contract (kernel.h: the epilogues): its args, their
 * dtypes and shapes, and the graph nodes its epilogue stands for, as the fuse pass matched them
 * (passes/fuse_epilogue.c); the runtimes (runtime/cpu.c, runtime/cuda/cublaslt.c) take the
 * epilogue on its word. A broken one is SN_ERR_INTERNAL. */
#include "program.h"

#define BUG(...) sn_kernel_bug(k, e, __VA_ARGS__)

/* x's operand when x is a cast to t, else NULL. */
static const sn_node *uncast(const sn_node *x, sn_dtype t) {
    return x && x->op == SN_OP_CAST && x->dtype == t ? x->in[0] : NULL;
}

static bool is_16(sn_dtype t) { return t == SN_BF16 || t == SN_F16; }

/* With accum, the operand x adds c to (kernel.h): x = a + c (f32 c), or a + f32(c) (16-bit c),
 * c under reshapes allowed (the same elements in the same order); NULL when x is no such add. */
static const sn_node *accum_inner(const sn_node *x, const sn_node *c) {
    if (!x || x->op != SN_OP_ADD || x->dtype != SN_F32) return NULL;
    for (int i = 0; i < 2; i++) {
        const sn_node *o = x->in[1 - i];
        if (is_16(c->dtype)) o = uncast(o, SN_F32);
        while (o && o != c && o->op == SN_OP_RESHAPE) o = o->in[0];
        if (o == c && x->in[i] != x->in[1 - i]) return x->in[i];
    }
    return NULL;
}

/* The f32 sum a stored y rounds (y itself when f32, else the f32 x of y = rnd(x)), with accum
 * the operand its add of c adds c to; NULL when y is neither. */
static const sn_node *summed(const sn_node *y, const sn_node *c) {
    const sn_node *x = y->dtype == SN_F32 ? y : is_16(y->dtype) ? uncast(y, y->dtype) : NULL;
    if (!c || !x) return x;
    return y != c && c->dtype == y->dtype ? accum_inner(x, c) : NULL;
}

/* Whether s is the bias epilogue's sum of mm and bias as kernel.h has it: mm + bias (f32), or
 * rnd(mm + f32(bias)) to bias's 16-bit dtype; with accum, c added to that sum before the
 * rounding. */
static bool bias_sum(const sn_node *s, const sn_node *mm, const sn_node *bias, const sn_node *c) {
    const sn_node *x = summed(s, c), *b = bias;
    if (!x || x->op != SN_OP_ADD || x->dtype != SN_F32 || s->dtype != bias->dtype) return false;
    const sn_node *other = x->in[0] == mm ? x->in[1] : x->in[1] == mm ? x->in[0] : NULL;
    if (is_16(bias->dtype)) other = uncast(other, SN_F32);
    return other == b && bias->rank == 1 && bias->shape[0] == mm->shape[mm->rank - 1];
}

/* The sum a GELU epilogue's result y is the GELU of (kernel.h: gelu(s), or rnd(gelu(f32(s))) to
 * s's 16-bit dtype), or NULL. */
static const sn_node *gelu_input(const sn_node *y) {
    bool wide = y->dtype == SN_F32;
    const sn_node *g = wide ? y : is_16(y->dtype) ? uncast(y, y->dtype) : NULL;
    if (!g || g->op != SN_OP_GELU || g->dtype != SN_F32) return NULL;
    const sn_node *s = wide ? g->in[0] : uncast(g->in[0], SN_F32);
    return s && s->dtype == y->dtype ? s : NULL;
}

/* Whether y is DGELU's result of mm and aux h: gelu_bwd(h, p) (f32), or
 * rnd(gelu_bwd(f32(h), f32(rnd(p)))) in h's 16-bit dtype, p the product mm, with accum its sum
 * with c. */
static bool dgelu_of(const sn_node *y, const sn_node *mm, const sn_node *h, const sn_node *c) {
    const sn_node *g = y->dtype == SN_F32 ? y : uncast(y, y->dtype), *p;
    if (!g || g->op != SN_OP_GELU_BWD || g->dtype != SN_F32) return false;
    if (y->dtype == SN_F32) {
        p = g->in[1];
        if (g->in[0] != h) return false;
    } else {
        p = uncast(g->in[1], SN_F32);
        if (!is_16(y->dtype) || uncast(g->in[0], SN_F32) != h || !p) return false;
    }
    return p && (c ? summed(p, c) : y->dtype == SN_F32 ? p : uncast(p, y->dtype)) == mm;
}

bool sn_gemm_operand_view(const sn_node *mm, int i, const sn_node **base, sn_gemm_view *v) {
    const sn_node *x = mm->in[i], *s = x;
    int64_t cols = x->shape[x->rank - 1];
    while (s->op == SN_OP_RESHAPE && s->in[0]->shape[s->in[0]->rank - 1] == cols) s = s->in[0];
    if (s->op != SN_OP_SLICE || s->a.axis != s->rank - 1) return false;
    const sn_node *b = mm->in[1 - i];
    bool one_matrix = i == 0 ? x->rank == 2 || (b->rank == 2 && !mm->a.ta) : x->rank == 2;
    int64_t es = sn_dtype_bits(x->dtype) / 8, ld = s->in[0]->shape[s->rank - 1];
    if (!one_matrix || (s->a.start * es) % 16 || (ld * es) % 16) return false;
    *base = s->in[0];
    while ((*base)->op == SN_OP_RESHAPE && (*base)->in[0]->shape[(*base)->in[0]->rank - 1] == ld)
        *base = (*base)->in[0]; /* the sliced value's rows are its source's */
    *v = (sn_gemm_view){.off = s->a.start, .ld = ld};
    return true;
}

/* The arg operand i of matmul n is read from (k->gemm.view[i]: the operand, or the value it is
 * a view of), or NULL when the recorded view is not the operand's. */
static const sn_node *operand_arg(const sn_kernel *k, int i) {
    const sn_node *n = k->anchor, *base;
    sn_gemm_view v, r = k->gemm.view[i];
    if (!r.ld) return r.off ? NULL : n->in[i];
    return sn_gemm_operand_view(n, i, &base, &v) && v.off == r.off && v.ld == r.ld ? base : NULL;
}

sn_status sn_kernel_check_gemm(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    sn_epilogue epi = k->gemm.epilogue;
    if (n->op != SN_OP_MATMUL || epi < 0 || epi >= SN_EPI_COUNT || k->n_in < 1 + k->gemm.accum)
        return BUG("a GEMM kernel is a matmul with one of kernel.h's epilogues");
    const sn_node *A = operand_arg(k, 0), *B = operand_arg(k, 1);
    if (!A || !B)
        return BUG("a GEMM reads operand %s through a view (off %lld, ld %lld) that is not a "
                   "slice of its last axis (kernel.h: operand views)", A ? "B" : "A",
                   (long long)k->gemm.view[A ? 1 : 0].off, (long long)k->gemm.view[A ? 1 : 0].ld);
    /* c, with accum: the last arg, of the product's element count and y's dtype, not y */
    const sn_node *c = k->gemm.accum ? k->args[k->n_out + k->n_in - 1] : NULL;
    int n_in = k->n_in - k->gemm.accum;
    if (c && (n->dtype != SN_F32 || sn_numel(c) != sn_numel(n) || c->dtype != k->args[0]->dtype ||
              c == k->args[0]))
        return BUG("an accum GEMM's last arg c (kernel.h) has the product's %lld elements and "
                   "y's dtype, in a buffer of its own", (long long)sn_numel(n));
    if (epi == SN_EPI_NONE || epi == SN_EPI_BIAS) { /* args y, A, B (one arg when A is B)
                                                        [, bias] [, c] */
        bool a = false, b = false, bias = epi == SN_EPI_BIAS;
        int ops = n_in - bias; /* A and B */
        for (int i = k->n_out; i < k->n_out + ops; i++) {
            a |= k->args[i] == A;
            b |= k->args[i] == B;
        }
        if (k->n_out != 1 || !a || !b || ops < 1 || ops > 2)
            return BUG("a GEMM kernel is a matmul with args (y, A, B) and its epilogue's bias "
                       "and c");
        const sn_node *y = k->args[0];
        const char *what = bias ? c ? "(the product + bias) + c" : "the product + bias"
                           : c  ? "the product + c"
                                : "the product or its 16-bit cast";
        if (bias ? !bias_sum(y, n, k->args[k->n_out + n_in - 1], c)
                 : c ? summed(y, c) != n : y != n && (!is_16(y->dtype) || uncast(y, y->dtype) != n))
            return BUG("a %s%s GEMM stores %s (kernel.h)", sn_epilogue_name(epi),
                       c ? " accum" : "", what);
        return SN_OK;
    }
    /* the GELU epilogues: outputs, A, B, then the bias or the aux (kernel.h) [, c] */
    int outs = epi == SN_EPI_GELU_AUX_BIAS ? 2 : 1;
    const sn_node *y = k->args[0], *in = k->args[outs + 2];
    if (k->n_out != outs || n_in != 3 || k->args[outs] != A || k->args[outs + 1] != B)
        return BUG("a %s GEMM has args (%s, A, B, %s%s): %d outputs and %d inputs, A and B the "
                   "matmul's operands", sn_epilogue_name(epi), outs == 2 ? "y, aux" : "y",
                   epi == SN_EPI_DGELU ? "aux" : "bias", c ? ", c" : "", outs, 3 + !!c);
    int64_t N = n->shape[n->rank - 1];
    if (n->dtype != SN_F32 || n->a.ta || n->in[1]->rank != 2 || N % 8 || sn_numel(y) != sn_numel(n))
        return BUG("a %s GEMM is one f32 product (A not transposed, B of rank 2) of rows of N %% "
                   "8 == 0 elements (cuBLASLt's aux leading dimension), y of its %lld elements",
                   sn_epilogue_name(epi), (long long)sn_numel(n));
    if (y->dtype != SN_F32 && y->dtype != n->in[0]->dtype)
        return BUG("a %s GEMM stores f32 or its operands' dtype, not %s", sn_epilogue_name(epi),
                   sn_dtype_name(y->dtype));
    if (epi == SN_EPI_DGELU) {
        if (in->dtype != y->dtype || sn_numel(in) != sn_numel(n) || !dgelu_of(y, n, in, c))
            return BUG("a dgelu GEMM stores gelu_bwd(aux, product%s) (kernel.h), its aux %%%d of "
                       "y's dtype and the product's shape", c ? " + c" : "", in->id);
        return SN_OK;
    }
    const sn_node *s = gelu_input(y);
    if (!s || !bias_sum(s, n, in, c))
        return BUG("a %s GEMM stores the GELU of the bias epilogue's sum%s (kernel.h), its bias "
                   "%%%d an (N) vector of y's dtype", sn_epilogue_name(epi), c ? " with c" : "",
                   in->id);
    if (epi == SN_EPI_GELU_AUX_BIAS && k->args[1] != s)
        return BUG("a gelu_aux_bias GEMM stores the sum %%%d the GELU reads as its aux (output 1)",
                   s->id);
    return SN_OK;
}
