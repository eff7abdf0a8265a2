/* llvm_reduce.c: sum, mean, max and amax over one axis: x seen as (outer, d, inner) -> (outer, inner).
 * Convention: items are output elements. With inner == 1 each item is a contiguous row of d,
 * reduced a vector at a time; otherwise a vector of adjacent outputs walks the d rows together. */
#ifdef SN_HAVE_LLVM

#include <math.h>

#include "llvm_util.h"

/* acc op v: sum (mean), or max (amax: of |v|) with NaN propagating, as the reference reduces */
static LLVMValueRef combine(sn_ll *L, sn_op op, LLVMValueRef acc, LLVMValueRef v) {
    if (op == SN_OP_AMAX) return sn_ll_max_nan(L, acc, sn_ll_call(L, "llvm.fabs", &v, 1, "abs"), "amax");
    return op == SN_OP_MAX ? sn_ll_max_nan(L, acc, v, "max") : LLVMBuildFAdd(L->b, acc, v, "sum");
}

static bool is_max(sn_op op) { return op == SN_OP_MAX || op == SN_OP_AMAX; }

/* y[o] = reduce x[o*d .. o*d + d) for o in [begin, end) */
static void reduce_rows(sn_ll *L, sn_op op, LLVMValueRef x, LLVMValueRef y, int64_t d) {
    sn_ll_loop rows;
    LLVMValueRef o = sn_ll_for(L, &rows, L->begin, L->end, sn_ll_i64(L, 1), "o");
    LLVMValueRef off = LLVMBuildMul(L->b, o, sn_ll_i64(L, d), "off");
    float id = op == SN_OP_MAX ? -INFINITY : 0.0f; /* amax: |x| >= 0 */
    LLVMValueRef acc = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, id), "acc");
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, d, "k"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef xv = sn_ll_vload(L, x, sn_ll_add(L, off, v.j), v.mask, "x");
        if (v.mask) xv = LLVMBuildSelect(L->b, v.mask, xv, sn_ll_vf32(L, id), "");
        sn_ll_set(L, acc, combine(L, op, sn_ll_get(L, acc, ""), xv));
    }
    LLVMValueRef a = sn_ll_get(L, acc, "");
    LLVMValueRef r = is_max(op) ? sn_ll_hmax_nan(L, a, "r") : sn_ll_hsum(L, a, "r");
    if (op == SN_OP_MEAN) r = LLVMBuildFDiv(L->b, r, sn_ll_f32(L, (float)d), "mean");
    sn_ll_store(L, y, o, r);
    sn_ll_for_end(L, &rows);
}

/* y[o, i] = reduce_k x[o, k, i] for the items o*inner + i in [begin, end) */
static void reduce_strided(sn_ll *L, sn_op op, LLVMValueRef x, LLVMValueRef y, int64_t d, int64_t inner) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef n_in = sn_ll_i64(L, inner);
    LLVMValueRef o_lo = LLVMBuildSDiv(b, L->begin, n_in, "o_lo");
    LLVMValueRef o_hi = LLVMBuildSDiv(b, sn_ll_add(L, L->end, sn_ll_i64(L, inner - 1)), n_in, "o_hi");
    sn_ll_loop outer;
    LLVMValueRef o = sn_ll_for(L, &outer, o_lo, o_hi, sn_ll_i64(L, 1), "o");
    LLVMValueRef start = LLVMBuildMul(b, o, n_in, "start");
    LLVMValueRef i0 = sn_ll_imax(L, LLVMBuildSub(b, L->begin, start, ""), sn_ll_i64(L, 0), "i0");
    LLVMValueRef i1 = sn_ll_imin(L, LLVMBuildSub(b, L->end, start, ""), n_in, "i1");
    LLVMValueRef xo = LLVMBuildMul(b, o, sn_ll_i64(L, d * inner), "xo");
    sn_ll_vloop v;
    for (sn_ll_vloop_range(L, &v, i0, i1, "i"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef base = sn_ll_add(L, xo, v.j);
        LLVMValueRef x0 = sn_ll_vload(L, x, base, v.mask, "x0");
        if (op == SN_OP_AMAX) x0 = sn_ll_call(L, "llvm.fabs", &x0, 1, "abs");
        LLVMValueRef acc = sn_ll_var(L, L->t_vf, x0, "acc");
        sn_ll_loop ks;
        LLVMValueRef kk = sn_ll_for(L, &ks, sn_ll_i64(L, 1), sn_ll_i64(L, d), sn_ll_i64(L, 1), "k");
        LLVMValueRef xv = sn_ll_vload(L, x, sn_ll_add(L, base, LLVMBuildMul(b, kk, n_in, "")), v.mask, "x");
        sn_ll_set(L, acc, combine(L, op, sn_ll_get(L, acc, ""), xv));
        sn_ll_for_end(L, &ks);
        LLVMValueRef r = sn_ll_get(L, acc, "r");
        if (op == SN_OP_MEAN) r = LLVMBuildFDiv(b, r, sn_ll_vf32(L, (float)d), "mean");
        sn_ll_vstore(L, y, sn_ll_add(L, start, v.j), r, v.mask);
    }
    sn_ll_for_end(L, &outer);
}

sn_status sn_ll_emit_reduce(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor, *x = n->in[0];
    int axis = n->a.axis;
    SN_ASSERT(axis >= 0 && axis < x->rank);
    int64_t d = x->shape[axis];
    int64_t inner = sn_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
    sn_status st = sn_ll_check_dtype(k, n, e);
    if (st) return st;
    sn_ll_fn_begin(L, fname);
    LLVMValueRef y = sn_ll_buf(L, 0, n->dtype, "y"), xp;
    if ((st = sn_ll_input_named(L, k, x, "x", &xp, e))) return st;
    if (inner == 1) reduce_rows(L, n->op, xp, y, d);
    else reduce_strided(L, n->op, xp, y, d, inner);
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
