/* llvm_fused.c: pointwise instructions inside another kernel's row loops (llvm_fused.h).
 * Convention: an access's element at (row r, column j) is base(r) + j * stride along the row,
 * base(r) computed once per row from r's coordinates; a mask on an outer axis is a per-row
 * condition, a mask on the row's axis a per-lane one. */
#ifdef SN_HAVE_LLVM

#include <stdlib.h>
#include <string.h>

#include "llvm_fused.h"
#include "program/pointwise.h"

static const float GELU_K = 0.7978845608028654f; /* sqrt(2/pi) */
static const float GELU_C = 0.044715f;

_Static_assert(SN_OP_POINTWISE_COUNT == 19, "a new pointwise op needs its formula in sn_ll_pw_op "
               "(and cuda_expr.c's sn_cu_emit_instr)");

LLVMValueRef sn_ll_pw_op(sn_ll *L, const sn_node *n, LLVMValueRef *x, int nx) {
    LLVMBuilderRef b = L->b;
    const char *name = sn_op_name(n->op);
    LLVMValueRef v = NULL, s, g;
#define C(f) sn_ll_fc(L, x[0], (float)(f))
    switch (n->op) {
    case SN_OP_ADD: v = LLVMBuildFAdd(b, x[0], x[1], name); break;
    case SN_OP_SUB: v = LLVMBuildFSub(b, x[0], x[1], name); break;
    case SN_OP_MUL: v = LLVMBuildFMul(b, x[0], x[1], name); break;
    case SN_OP_DIV: v = LLVMBuildFDiv(b, x[0], x[1], name); break;
    case SN_OP_EQ:
        v = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, x[0], x[1], ""), C(1), C(0), name);
        break;
    case SN_OP_NEG: v = LLVMBuildFNeg(b, x[0], name); break;
    case SN_OP_SCALE: v = LLVMBuildFMul(b, x[0], C(n->a.f), name); break;
    case SN_OP_EXP: v = sn_ll_exp(L, x[0], name); break;
    case SN_OP_LOG: v = sn_ll_log(L, x[0], name); break;
    case SN_OP_TANH: v = sn_ll_tanh(L, x[0], name); break;
    case SN_OP_SQRT: v = sn_ll_sqrt(L, x[0], name); break;
    case SN_OP_RSQRT: v = LLVMBuildFDiv(b, C(1), sn_ll_sqrt(L, x[0], ""), name); break;
    case SN_OP_GELU:   /* 0.5 x (1 + tanh u) = x sigmoid(2u), u = k (x + c x^3) */
    case SN_OP_GELU_BWD: { /* dy (s + 2 x s (1 - s) k (1 + 3 c x^2)), s = sigmoid(2u) */
        LLVMValueRef x2 = LLVMBuildFMul(b, x[0], x[0], "x2");
        LLVMValueRef u = LLVMBuildFMul(b, LLVMBuildFMul(b, x[0], sn_ll_fma(L, x2, C(GELU_C), C(1)), ""), C(2 * GELU_K), "2u");
        s = sn_ll_sigmoid(L, u, "s");
        if (n->op == SN_OP_GELU) {
            v = LLVMBuildFMul(b, x[0], s, name);
            break;
        }
        LLVMValueRef du = LLVMBuildFMul(b, sn_ll_fma(L, x2, C(3 * GELU_C), C(1)), C(2 * GELU_K), "");
        LLVMValueRef ds = LLVMBuildFMul(b, s, LLVMBuildFSub(b, C(1), s, ""), "");
        g = sn_ll_fma(L, LLVMBuildFMul(b, x[0], ds, ""), du, s);
        v = LLVMBuildFMul(b, x[1], g, name);
        break;
    }
    case SN_OP_SILU: v = LLVMBuildFMul(b, x[0], sn_ll_sigmoid(L, x[0], "s"), name); break;
    case SN_OP_SILU_BWD: /* dy s (1 + x (1 - s)) */
        s = sn_ll_sigmoid(L, x[0], "s");
        g = sn_ll_fma(L, x[0], LLVMBuildFSub(b, C(1), s, ""), C(1));
        v = LLVMBuildFMul(b, x[1], LLVMBuildFMul(b, s, g, ""), name);
        break;
    case SN_OP_CAST: v = sn_ll_round_to(L, x[0], n->dtype); break; /* to i32: truncated below */
    case SN_OP_POW2_SCALE: v = sn_ll_pow2_scale(L, x[0], n->a.f, name); break;
    case SN_OP_FULL: v = nx ? x[0] : sn_ll_vf32(L, n->a.f); break;
    case SN_OP_DROPOUT: /* its mask reads the element's index: llvm_pointwise.c's, never fused
                           into another kind of kernel (fuse) */
        SN_ASSERT(!"a dropout outside its pointwise kernel");
        break;
    case SN_OP_CONCAT: /* the parts are masked accesses: exactly one is not 0 */
        v = x[0];
        for (int i = 1; i < nx; i++) v = LLVMBuildFAdd(b, v, x[i], name);
        break;
    default: /* a view's copy */
        SN_ASSERT(sn_pw_is_identity(n->op) && nx >= 1);
        v = x[0];
        break;
    }
#undef C
    if (n->dtype == SN_I32) v = sn_ll_call(L, "llvm.trunc", &v, 1, name);
    /* an op whose value is 16-bit holds it rounded (the interpreter's rule, and the CUDA
       generator's): bf16(gelu(x)) + bf16(x * x) rounded again, not the f32 sum rounded once */
    if (n->op != SN_OP_CAST && (n->dtype == SN_BF16 || n->dtype == SN_F16))
        v = sn_ll_round_to(L, v, n->dtype);
    return v;
}

struct sn_ll_fx {
    sn_ll *L;
    const sn_kernel *k;
    const LLVMValueRef *ptr;
    int last;            /* the row's axis: k->rank - 1 (-1 for a scalar space) */
    LLVMValueRef *base;  /* [n_access] the row's offset of column 0 */
    LLVMValueRef *ok;    /* [n_access] the row is inside an outer-axis mask, or NULL */
    LLVMValueRef *hoist; /* [n_access] the row's value of an access constant along it, or NULL */
    LLVMValueRef *acc;   /* [n_access] values in this step */
    LLVMValueRef *val;   /* [n_instr] values in this step */
    LLVMValueRef *reuse; /* [n_instr] the buffer holding the instruction's values, or NULL */
    LLVMValueRef rowoff; /* the row's first element in a buffer over the index space */
    LLVMValueRef j, mask;
    bool scalar;
};

sn_ll_fx *sn_ll_fx_new(sn_ll *L, const sn_kernel *k, const LLVMValueRef *ptr, sn_err *e) {
    sn_ll_fx *f = sn_calloc(1, sizeof *f, "a fused kernel's code generator", e);
    size_t na = (size_t)k->n_access + 1, ni = (size_t)k->n_instr + 1;
    if (!f) return NULL;
    *f = (sn_ll_fx){.L = L, .k = k, .ptr = ptr, .last = k->rank - 1};
    f->base = calloc(na, sizeof(LLVMValueRef));
    f->ok = calloc(na, sizeof(LLVMValueRef));
    f->hoist = calloc(na, sizeof(LLVMValueRef));
    f->acc = calloc(na, sizeof(LLVMValueRef));
    f->val = calloc(ni, sizeof(LLVMValueRef));
    f->reuse = calloc(ni, sizeof(LLVMValueRef));
    if (!f->base || !f->ok || !f->hoist || !f->acc || !f->val || !f->reuse) {
        sn_ll_fx_free(f);
        sn_fail_oom(e, (4 * na + 2 * ni) * sizeof(LLVMValueRef), "a fused kernel's code generator");
        return NULL;
    }
    return f;
}

void sn_ll_fx_free(sn_ll_fx *f) {
    if (!f) return;
    free(f->base);
    free(f->ok);
    free(f->hoist);
    free(f->acc);
    free(f->val);
    free(f->reuse);
    free(f);
}

static int64_t row_stride(const sn_ll_fx *f, const sn_access *a) {
    return f->last >= 0 ? a->stride[f->last] : 0;
}
static bool row_masked(const sn_ll_fx *f, const sn_access *a) { return a->masked && a->mask_axis == f->last; }

static LLVMValueRef in_range(sn_ll *L, LLVMValueRef c, const sn_access *a, const char *name) {
    return LLVMBuildAnd(L->b, LLVMBuildICmp(L->b, LLVMIntSGE, c, sn_ll_i64(L, a->mask_lo), ""),
                        LLVMBuildICmp(L->b, LLVMIntSLT, c, sn_ll_i64(L, a->mask_hi), ""), name);
}

/* A scalar load of access a at index idx when cond (NULL: always) holds, else 0. */
static LLVMValueRef guarded_load(sn_ll_fx *f, const sn_access *a, LLVMValueRef idx, LLVMValueRef cond,
                                 const char *name) {
    sn_ll *L = f->L;
    if (cond) idx = LLVMBuildSelect(L->b, cond, idx, sn_ll_i64(L, 0), "");
    LLVMValueRef v = sn_ll_load(L, f->ptr[a->arg], idx, name);
    return cond ? LLVMBuildSelect(L->b, cond, v, sn_ll_f32(L, 0), name) : v;
}

void sn_ll_fx_row(sn_ll_fx *f, LLVMValueRef r) {
    sn_ll *L = f->L;
    const sn_kernel *k = f->k;
    LLVMValueRef c[SN_MAX_RANK], rem = r;
    char name[32];
    for (int d = f->last - 1; d > 0; d--) { /* row r -> outer coordinates */
        snprintf(name, sizeof name, "i%d", d);
        c[d] = LLVMBuildSRem(L->b, rem, sn_ll_i64(L, k->shape[d]), name);
        rem = LLVMBuildSDiv(L->b, rem, sn_ll_i64(L, k->shape[d]), "");
    }
    if (f->last > 0) c[0] = rem;
    f->rowoff = sn_ll_mul(L, r, sn_ll_i64(L, f->last >= 0 ? k->shape[f->last] : 1));
    for (int i = 0; i < k->n_access; i++) {
        const sn_access *a = &k->access[i];
        LLVMValueRef off = sn_ll_i64(L, a->offset);
        for (int d = 0; d < f->last; d++)
            if (a->stride[d]) off = sn_ll_add(L, off, sn_ll_mul(L, c[d], sn_ll_i64(L, a->stride[d])));
        f->base[i] = off;
        f->ok[i] = f->hoist[i] = NULL;
        snprintf(name, sizeof name, "in%d", i);
        if (a->masked && !row_masked(f, a)) f->ok[i] = in_range(L, c[a->mask_axis], a, name);
        if (row_stride(f, a) == 0 && !row_masked(f, a)) {
            snprintf(name, sizeof name, "a%d", i);
            f->hoist[i] = guarded_load(f, a, off, f->ok[i], name);
        }
    }
}

void sn_ll_fx_step(sn_ll_fx *f, LLVMValueRef j, LLVMValueRef mask, bool scalar) {
    f->j = j;
    f->mask = mask;
    f->scalar = scalar;
    memset(f->acc, 0, sizeof(LLVMValueRef) * (size_t)(f->k->n_access + 1));
    memset(f->val, 0, sizeof(LLVMValueRef) * (size_t)(f->k->n_instr + 1));
}

void sn_ll_fx_set(sn_ll_fx *f, int i, LLVMValueRef v) {
    SN_ASSERT(i >= 0 && i < f->k->n_instr);
    f->val[i] = v;
}

void sn_ll_fx_reuse(sn_ll_fx *f, int i, LLVMValueRef buf) {
    SN_ASSERT(i >= 0 && i < f->k->n_instr);
    f->reuse[i] = buf;
}

bool sn_ll_fx_has(const sn_ll_fx *f, int i) { return f->val[i] != NULL; }

/* Access i's value at this step's columns. */
static LLVMValueRef access_value(sn_ll_fx *f, int i) {
    sn_ll *L = f->L;
    const sn_access *a = &f->k->access[i];
    if (f->acc[i]) return f->acc[i];
    char name[16];
    snprintf(name, sizeof name, "a%d", i);
    int64_t st = row_stride(f, a);
    LLVMValueRef idx = sn_ll_add(L, f->base[i], st == 1 ? f->j : sn_ll_mul(L, f->j, sn_ll_i64(L, st)));
    if (f->scalar) {
        if (f->hoist[i]) return f->acc[i] = f->hoist[i];
        LLVMValueRef cond = f->ok[i];
        if (row_masked(f, a)) {
            LLVMValueRef in = in_range(L, f->j, a, "inside");
            cond = cond ? LLVMBuildAnd(L->b, cond, in, "") : in;
        }
        return f->acc[i] = guarded_load(f, a, idx, cond, name);
    }
    if (f->hoist[i]) return f->acc[i] = sn_ll_splat(L, f->hoist[i], name);
    LLVMValueRef m = f->mask;
    if (row_masked(f, a)) {
        LLVMValueRef jv = LLVMBuildAdd(L->b, sn_ll_splat(L, f->j, ""), sn_ll_lane_ids(L), "");
        LLVMValueRef lo = sn_ll_splat(L, sn_ll_i64(L, a->mask_lo), "");
        LLVMValueRef hi = sn_ll_splat(L, sn_ll_i64(L, a->mask_hi), "");
        lo = LLVMBuildICmp(L->b, LLVMIntSGE, jv, lo, "");
        hi = LLVMBuildICmp(L->b, LLVMIntSLT, jv, hi, "");
        m = sn_ll_and_mask(L, m, LLVMBuildAnd(L->b, lo, hi, "inside"));
    }
    if (f->ok[i]) m = sn_ll_and_mask(L, m, sn_ll_splat(L, f->ok[i], ""));
    if (st == 1) return f->acc[i] = sn_ll_vload(L, f->ptr[a->arg], idx, m, name);
    LLVMValueRef step = LLVMBuildMul(L->b, sn_ll_lane_ids(L), sn_ll_splat(L, sn_ll_i64(L, st), ""), "");
    LLVMValueRef idxv = LLVMBuildAdd(L->b, sn_ll_splat(L, idx, ""), step, "");
    return f->acc[i] = sn_ll_vgather(L, f->ptr[a->arg], idxv, m, name);
}

LLVMValueRef sn_ll_fx_ref(sn_ll_fx *f, const sn_ref *r) {
    switch (r->kind) {
    case SN_REF_INSTR: return sn_ll_fx_value(f, r->index);
    case SN_REF_ACCESS: return access_value(f, r->index);
    case SN_REF_CONST: return f->scalar ? sn_ll_f32(f->L, r->value) : sn_ll_vf32(f->L, r->value);
    }
    SN_ASSERT(0);
}

LLVMValueRef sn_ll_fx_value(sn_ll_fx *f, int i) {
    SN_ASSERT(i >= 0 && i < f->k->n_instr);
    if (f->val[i]) return f->val[i];
    const sn_pw_instr *in = &f->k->instr[i];
    SN_ASSERT(i != f->k->row.instr); /* the row op's value is given by sn_ll_fx_set */
    if (f->reuse[i]) {
        LLVMValueRef idx = sn_ll_add(f->L, f->rowoff, f->j);
        return f->val[i] = f->scalar ? sn_ll_load(f->L, f->reuse[i], idx, "")
                                     : sn_ll_vload(f->L, f->reuse[i], idx, f->mask, "");
    }
    LLVMValueRef x[3];
    for (int t = 0; t < in->n_in; t++) x[t] = sn_ll_fx_ref(f, &in->in[t]);
    return f->val[i] = sn_ll_pw_op(f->L, in->node, x, in->n_in);
}

#endif /* SN_HAVE_LLVM */
