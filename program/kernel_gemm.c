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

/* Whether s is the bias epilogue's sum of mm and bias as kernel.h has it: mm + bias (f32), or
 * rnd(mm + f32(bias)) to bias's 16-bit dtype. */
static bool bias_sum(const sn_node *s, const sn_node *mm, const sn_node *bias) {
    const sn_node *x = s->dtype == SN_F32 ? s : uncast(s, bias->dtype), *b = bias;
    if (!x || x->op != SN_OP_ADD || s->dtype != bias->dtype) return false;
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

/* Whether y is DGELU's result of mm and aux h: gelu_bwd(h, mm) (f32), or
 * rnd(gelu_bwd(f32(h), f32(rnd(mm)))) in h's 16-bit dtype. */
static bool dgelu_of(const sn_node *y, const sn_node *mm, const sn_node *h) {
    if (y->dtype == SN_F32) return y->op == SN_OP_GELU_BWD && y->in[0] == h && y->in[1] == mm;
    const sn_node *g = uncast(y, y->dtype);
    if (!is_16(y->dtype) || !g || g->op != SN_OP_GELU_BWD || g->dtype != SN_F32) return false;
    return uncast(g->in[0], SN_F32) == h && uncast(uncast(g->in[1], SN_F32), y->dtype) == mm;
}

/* Whether y is ACCUM's sum of mm and c as kernel.h has it: mm + c (f32), or rnd(mm + f32(c))
 * to c's 16-bit dtype; c (or what the add's operand reshapes) of mm's element count and y's
 * dtype, not y itself. */
static bool accum_sum(const sn_node *y, const sn_node *mm, const sn_node *c) {
    const sn_node *x = y->dtype == SN_F32 ? y : uncast(y, y->dtype);
    if (!x || x->op != SN_OP_ADD || x->dtype != SN_F32 || y->dtype != c->dtype || y == c ||
        sn_numel(c) != sn_numel(mm) || (y->dtype != SN_F32 && !is_16(y->dtype)))
        return false;
    const sn_node *other = x->in[0] == mm ? x->in[1] : x->in[1] == mm ? x->in[0] : NULL;
    if (is_16(y->dtype)) other = uncast(other, SN_F32);
    while (other && other != c && other->op == SN_OP_RESHAPE) other = other->in[0];
    return other == c;
}

sn_status sn_kernel_check_gemm(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    sn_epilogue epi = k->gemm.epilogue;
    if (n->op != SN_OP_MATMUL || epi < 0 || epi >= SN_EPI_COUNT)
        return BUG("a GEMM kernel is a matmul with one of kernel.h's epilogues");
    if (epi == SN_EPI_NONE || epi == SN_EPI_BIAS) { /* args y, A, B (one arg when A is B) [, bias] */
        bool a = false, b = false;
        for (int i = k->n_out; i < k->n_out + k->n_in; i++) {
            a |= k->args[i] == n->in[0];
            b |= k->args[i] == n->in[1];
        }
        if (k->n_out != 1 || !a || !b || (epi == SN_EPI_BIAS && k->n_in < 2))
            return BUG("a GEMM kernel is a matmul with args (y, A, B) and its epilogue's bias");
        return SN_OK;
    }
    if (epi == SN_EPI_ACCUM) { /* args y, A, B, c */
        if (k->n_out != 1 || k->n_in != 3 || k->args[1] != n->in[0] || k->args[2] != n->in[1] ||
            n->dtype != SN_F32 || !accum_sum(k->args[0], n, k->args[3]))
            return BUG("an accum GEMM has args (y, A, B, c), A and B the matmul's operands, and "
                       "stores y = the f32 product + c (kernel.h), c of the product's shape and "
                       "y's dtype in another buffer");
        return SN_OK;
    }
    /* the GELU epilogues: outputs, A, B, then the bias or the aux (kernel.h) */
    int outs = epi == SN_EPI_GELU_AUX_BIAS ? 2 : 1;
    const sn_node *y = k->args[0], *in = k->args[outs + 2];
    if (k->n_out != outs || k->n_in != 3 || k->args[outs] != n->in[0] || k->args[outs + 1] != n->in[1])
        return BUG("a %s GEMM has args (%s, A, B, %s): %d outputs and 3 inputs, A and B the "
                   "matmul's operands", sn_epilogue_name(epi),
                   outs == 2 ? "y, aux" : "y", epi == SN_EPI_DGELU ? "aux" : "bias", outs);
    int64_t N = n->shape[n->rank - 1];
    if (n->dtype != SN_F32 || n->a.ta || n->in[1]->rank != 2 || N % 8 || sn_numel(y) != sn_numel(n))
        return BUG("a %s GEMM is one f32 product (A not transposed, B of rank 2) of rows of N %% "
                   "8 == 0 elements (cuBLASLt's aux leading dimension), y of its %lld elements",
                   sn_epilogue_name(epi), (long long)sn_numel(n));
    if (y->dtype != SN_F32 && y->dtype != n->in[0]->dtype)
        return BUG("a %s GEMM stores f32 or its operands' dtype, not %s", sn_epilogue_name(epi),
                   sn_dtype_name(y->dtype));
    if (epi == SN_EPI_DGELU) {
        if (in->dtype != y->dtype || sn_numel(in) != sn_numel(n) || !dgelu_of(y, n, in))
            return BUG("a dgelu GEMM stores gelu_bwd(aux, product) (kernel.h), its aux %%%d of "
                       "y's dtype and the product's shape", in->id);
        return SN_OK;
    }
    const sn_node *s = gelu_input(y);
    if (!s || !bias_sum(s, n, in))
        return BUG("a %s GEMM stores the GELU of the bias epilogue's sum (kernel.h), its bias %%%d "
                   "an (N) vector of y's dtype", sn_epilogue_name(epi), in->id);
    if (epi == SN_EPI_GELU_AUX_BIAS && k->args[1] != s)
        return BUG("a gelu_aux_bias GEMM stores the sum %%%d the GELU reads as its aux (output 1)",
                   s->id);
    return SN_OK;
}
