/* llvm_pointwise.c: pointwise kernels: node ops over strided, broadcast and masked accesses.
 * Convention: the index space is simplified (pointwise.h: size-1 dims dropped, dims all
 * accesses walk contiguously merged), then walked by rows: coordinates and offsets once per
 * row, then a vector loop along the last dimension with a masked tail; any [begin, end) cuts
 * rows. */
#ifdef SN_HAVE_LLVM

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dropout.h"
#include "llvm_fused.h"
#include "llvm_util.h"
#include "program/pointwise.h"

typedef struct {
    sn_ll *L;
    const sn_kernel *k;
    sn_pw_space s;
    LLVMValueRef *ptr;    /* [args] */
    LLVMValueRef *base;   /* [n_access] offset of the row's first element */
    LLVMValueRef *ok;     /* [n_access] the row is inside an outer-axis mask (NULL: no mask) */
    LLVMValueRef *hoist;  /* [n_access] the row's value of a stride-0 access, or NULL */
    LLVMValueRef *cache;  /* [n_access] values in the current vector step */
} pw;

static bool last_axis_mask(const pw *P, const sn_access *x) {
    return x->masked && x->mask_axis == P->s.rank - 1;
}

/* Per row: offsets, outer-mask conditions, stride-0 values (loaded once, not per vector). */
static void row_setup(pw *P, LLVMValueRef r) {
    sn_ll *L = P->L;
    const sn_pw_space *s = &P->s;
    LLVMValueRef c[SN_MAX_RANK], rem = r;
    char name[32];
    for (int d = s->rank - 2; d > 0; d--) { /* row r -> outer coordinates i0 .. */
        snprintf(name, sizeof name, "i%d", d);
        c[d] = LLVMBuildSRem(L->b, rem, sn_ll_i64(L, s->shape[d]), name);
        rem = LLVMBuildSDiv(L->b, rem, sn_ll_i64(L, s->shape[d]), "");
    }
    c[0] = rem; /* r < rows, so the first coordinate needs no remainder */
    for (int a = 0; a < s->n_access; a++) {
        const sn_access *x = &s->acc[a];
        P->ok[a] = P->hoist[a] = NULL;
        if (s->zero[a]) continue;
        LLVMValueRef off = sn_ll_i64(L, x->offset);
        for (int d = 0; d < s->rank - 1; d++)
            if (x->stride[d]) off = sn_ll_add(L, off, sn_ll_mul(L, c[d], sn_ll_i64(L, x->stride[d])));
        snprintf(name, sizeof name, "off%d", a);
        P->base[a] = off;
        if (LLVMIsAInstruction(off) && !LLVMGetValueName2(off, &(size_t){0})[0])
            LLVMSetValueName2(off, name, strlen(name));
        if (x->masked && !last_axis_mask(P, x)) {
            LLVMValueRef ci = c[x->mask_axis];
            snprintf(name, sizeof name, "in%d", a);
            P->ok[a] = LLVMBuildAnd(L->b, LLVMBuildICmp(L->b, LLVMIntSGE, ci, sn_ll_i64(L, x->mask_lo), ""),
                                    LLVMBuildICmp(L->b, LLVMIntSLT, ci, sn_ll_i64(L, x->mask_hi), ""), name);
        }
        if (x->stride[s->rank - 1] == 0 && !last_axis_mask(P, x)) {
            LLVMValueRef idx = P->ok[a] ? LLVMBuildSelect(L->b, P->ok[a], off, sn_ll_i64(L, 0), "") : off;
            snprintf(name, sizeof name, "a%d", a);
            LLVMValueRef v = sn_ll_load(L, P->ptr[x->arg], idx, name);
            if (P->ok[a]) v = LLVMBuildSelect(L->b, P->ok[a], v, sn_ll_f32(L, 0), name);
            P->hoist[a] = sn_ll_splat(L, v, name);
        }
    }
}

/* Access a's vector at column j of the row (tail: the lanes in range). */
static LLVMValueRef access_value(pw *P, int a, LLVMValueRef j, LLVMValueRef tail) {
    sn_ll *L = P->L;
    const sn_access *x = &P->s.acc[a];
    if (P->s.zero[a]) return sn_ll_vf32(L, 0);
    if (P->hoist[a]) return P->hoist[a];
    if (P->cache[a]) return P->cache[a];
    char name[16];
    snprintf(name, sizeof name, "a%d", a);
    LLVMValueRef m = tail;
    if (last_axis_mask(P, x)) {
        LLVMValueRef jv = LLVMBuildAdd(L->b, sn_ll_splat(L, j, ""), sn_ll_lane_ids(L), "");
        LLVMValueRef lo = LLVMBuildICmp(L->b, LLVMIntSGE, jv, sn_ll_splat(L, sn_ll_i64(L, x->mask_lo), ""), "");
        LLVMValueRef hi = LLVMBuildICmp(L->b, LLVMIntSLT, jv, sn_ll_splat(L, sn_ll_i64(L, x->mask_hi), ""), "");
        m = sn_ll_and_mask(L, m, LLVMBuildAnd(L->b, lo, hi, "inside"));
    }
    if (P->ok[a]) m = sn_ll_and_mask(L, m, sn_ll_splat(L, P->ok[a], ""));
    int64_t st = x->stride[P->s.rank - 1];
    LLVMValueRef idx = sn_ll_add(L, P->base[a], st == 1 ? j : sn_ll_mul(L, j, sn_ll_i64(L, st)));
    LLVMValueRef v;
    if (st == 1) {
        v = sn_ll_vload(L, P->ptr[x->arg], idx, m, name);
    } else { /* permuted, or broadcast under a mask: a gather */
        LLVMValueRef step = LLVMBuildMul(L->b, sn_ll_lane_ids(L), sn_ll_splat(L, sn_ll_i64(L, st), ""), "");
        LLVMValueRef idxv = LLVMBuildAdd(L->b, sn_ll_splat(L, idx, ""), step, "");
        v = sn_ll_vgather(L, P->ptr[x->arg], idxv, m, name);
    }
    return P->cache[a] = v;
}

static LLVMValueRef operand(pw *P, const sn_ref *r, LLVMValueRef *vals, LLVMValueRef j, LLVMValueRef tail) {
    switch (r->kind) {
    case SN_REF_INSTR: return vals[r->index];
    case SN_REF_ACCESS: return access_value(P, r->index, j, tail);
    case SN_REF_CONST: return sn_ll_vf32(P->L, r->value);
    }
    SN_ASSERT(0);
}

/* MurmurHash3's finaliser on a vector of i32 (ir/dropout.h). */
static LLVMValueRef fmix(sn_ll *L, LLVMValueRef h) {
    LLVMBuilderRef b = L->b;
    h = LLVMBuildXor(b, h, LLVMBuildLShr(b, h, sn_ll_ic(L, h, 16), ""), "");
    h = LLVMBuildMul(b, h, sn_ll_ic(L, h, (int32_t)0x85ebca6bu), "");
    h = LLVMBuildXor(b, h, LLVMBuildLShr(b, h, sn_ll_ic(L, h, 13), ""), "");
    h = LLVMBuildMul(b, h, sn_ll_ic(L, h, (int32_t)0xc2b2ae35u), "");
    return LLVMBuildXor(b, h, LLVMBuildLShr(b, h, sn_ll_ic(L, h, 16), ""), "");
}

/* Dropout n of x (vectors) at the kernel's elements at, at + 1, ..: ir/dropout.h's mask, which
 * is the interpreter's (the dropout's shape is the kernel's space: kernel_check.c). */
static LLVMValueRef dropout(sn_ll *L, const sn_node *n, LLVMValueRef x, LLVMValueRef seed,
                            LLVMValueRef at) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef s = LLVMBuildFPToUI(b, seed, L->t_vi32, "seed");
    uint32_t site_mix = (uint32_t)n->a.site * 0x7feb352du + 0x68e31da4u;
    LLVMValueRef key = fmix(L, LLVMBuildAdd(b, LLVMBuildMul(b, s, sn_ll_ic(L, s, (int32_t)0x9e3779b1u), ""),
                                            sn_ll_ic(L, s, (int32_t)site_mix), "key"));
    LLVMValueRef i = LLVMBuildTrunc(b, LLVMBuildAdd(b, sn_ll_splat(L, at, ""), sn_ll_lane_ids(L), ""),
                                    L->t_vi32, "i");
    LLVMValueRef bits = fmix(L, LLVMBuildAdd(b, LLVMBuildMul(b, i, sn_ll_ic(L, i, (int32_t)0x9e3779b1u), ""), key, ""));
    LLVMValueRef keep = LLVMBuildICmp(b, LLVMIntUGE, bits,
                                      sn_ll_ic(L, bits, (int32_t)sn_dropout_threshold(n->a.f)), "keep");
    LLVMValueRef y = LLVMBuildSelect(b, keep, LLVMBuildFMul(b, x, sn_ll_fc(L, x, sn_dropout_scale(n->a.f)), ""),
                                     sn_ll_fc(L, x, 0), "dropout");
    return n->dtype == SN_BF16 || n->dtype == SN_F16 ? sn_ll_round_to(L, y, n->dtype) : y;
}

/* One vector step: every instruction, then the stores. */
static void vector_step(pw *P, LLVMValueRef rowstart, LLVMValueRef j, LLVMValueRef tail, LLVMValueRef *vals) {
    const sn_kernel *k = P->k;
    memset(P->cache, 0, sizeof(LLVMValueRef) * (size_t)(k->n_access + 1));
    for (int i = 0; i < k->n_instr; i++) {
        const sn_pw_instr *in = &k->instr[i];
        LLVMValueRef x[3] = {NULL}; /* the first in->n_in are set */
        for (int t = 0; t < in->n_in; t++) x[t] = operand(P, &in->in[t], vals, j, tail);
        if (in->node->op == SN_OP_DROPOUT)
            vals[i] = dropout(P->L, in->node, x[0], x[1], sn_ll_add(P->L, rowstart, j));
        else
            vals[i] = sn_ll_pw_op(P->L, in->node, x, in->n_in);
    }
    LLVMValueRef at = sn_ll_add(P->L, rowstart, j);
    for (int o = 0; o < k->n_out; o++) sn_ll_vstore(P->L, P->ptr[o], at, vals[k->store[o]], tail);
}

static void free_arrays(pw *P, LLVMValueRef *vals) {
    free(P->ptr);
    free(P->base);
    free(P->ok);
    free(P->hoist);
    free(P->cache);
    free(vals);
}

sn_status sn_ll_emit_pointwise(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    sn_status st = sn_kernel_dtypes(k, sn_ll_check_dtype, e);
    if (st) return st;
    int na = k->n_access + 1, nargs = k->n_out + k->n_in;
    pw P = {.L = L, .k = k};
    P.ptr = calloc((size_t)nargs, sizeof(LLVMValueRef));
    P.base = calloc((size_t)na, sizeof(LLVMValueRef));
    P.ok = calloc((size_t)na, sizeof(LLVMValueRef));
    P.hoist = calloc((size_t)na, sizeof(LLVMValueRef));
    P.cache = calloc((size_t)na, sizeof(LLVMValueRef));
    LLVMValueRef *vals = calloc((size_t)k->n_instr + 1, sizeof(LLVMValueRef));
    if (!P.ptr || !P.base || !P.ok || !P.hoist || !P.cache || !vals) {
        free_arrays(&P, vals);
        return sn_fail_oom(e, (size_t)(nargs + 4 * na + k->n_instr) * sizeof(LLVMValueRef),
                           "a pointwise kernel's code generator");
    }
    sn_pw_space_fill(&P.s, k);

    sn_ll_fn_begin(L, fname);
    for (int i = 0; i < nargs; i++) {
        char name[32];
        snprintf(name, sizeof name, i < k->n_out ? "out%d" : "in%d", i < k->n_out ? i : i - k->n_out);
        P.ptr[i] = sn_ll_buf(L, i, k->args[i]->dtype, name);
    }
    int64_t len = P.s.shape[P.s.rank - 1]; /* the vectorised dimension */
    sn_ll_if any;
    sn_ll_if_begin(L, &any, LLVMBuildICmp(L->b, LLVMIntSLT, L->begin, L->end, ""), "any");
    LLVMValueRef r_lo = LLVMBuildSDiv(L->b, L->begin, sn_ll_i64(L, len), "row_lo");
    LLVMValueRef r_hi = LLVMBuildSDiv(L->b, sn_ll_add(L, L->end, sn_ll_i64(L, len - 1)), sn_ll_i64(L, len), "row_hi");
    sn_ll_loop rows;
    LLVMValueRef r = sn_ll_for(L, &rows, r_lo, r_hi, sn_ll_i64(L, 1), "row");
    LLVMValueRef rowstart = LLVMBuildMul(L->b, r, sn_ll_i64(L, len), "rowstart");
    LLVMValueRef j0 = sn_ll_imax(L, LLVMBuildSub(L->b, L->begin, rowstart, ""), sn_ll_i64(L, 0), "j0");
    LLVMValueRef j1 = sn_ll_imin(L, LLVMBuildSub(L->b, L->end, rowstart, ""), sn_ll_i64(L, len), "j1");
    row_setup(&P, r);
    sn_ll_vloop v;
    for (sn_ll_vloop_range(L, &v, j0, j1, "j"); sn_ll_vloop_next(L, &v);)
        vector_step(&P, rowstart, v.j, v.mask, vals);
    sn_ll_for_end(L, &rows);
    sn_ll_if_end(L, &any);
    sn_ll_fn_end(L);

    free_arrays(&P, vals);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
