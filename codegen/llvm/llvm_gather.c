/* llvm_gather.c: embedding (rows of a table picked by ids) and its backward (the rows of dy
 * scatter-added into a zeroed (V, C) gradient; of its two stages, the ROWS kernel).
 * Convention: forward items are ids; backward items are column blocks of ceil(C / n_items)
 * columns, each zeroed and summed into by one item, so threads never write the same element. */
#ifdef SN_HAVE_LLVM

#include <math.h>

#include "llvm_util.h"

/* is id (i32) a row in [0, V)? */
static LLVMValueRef valid_id(sn_ll *L, LLVMValueRef id, int64_t V) {
    LLVMValueRef lo = LLVMBuildICmp(L->b, LLVMIntSGE, id, sn_ll_i32(L, 0), "");
    LLVMValueRef hi = LLVMBuildICmp(L->b, LLVMIntSLT, id, sn_ll_i32(L, (int32_t)V), "");
    return LLVMBuildAnd(L->b, lo, hi, "valid");
}

/* y[p, :] = table[ids[p], :] for p in [begin, end); a bad id gives a row of NaN */
static void embedding(sn_ll *L, LLVMValueRef y, LLVMValueRef table, LLVMValueRef ids, int64_t V, int64_t C) {
    LLVMBuilderRef b = L->b;
    sn_ll_loop ps;
    LLVMValueRef p = sn_ll_for(L, &ps, L->begin, L->end, sn_ll_i64(L, 1), "p");
    LLVMValueRef id = sn_ll_load_i32(L, ids, p, "id");
    LLVMValueRef ok = valid_id(L, id, V);
    LLVMValueRef src = LLVMBuildMul(b, LLVMBuildSExt(b, LLVMBuildSelect(b, ok, id, sn_ll_i32(L, 0), ""), L->t_i64, ""),
                                    sn_ll_i64(L, C), "src");
    LLVMValueRef dst = LLVMBuildMul(b, p, sn_ll_i64(L, C), "dst");
    LLVMValueRef okv = sn_ll_splat(L, ok, "okv");
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef row = sn_ll_vload(L, table, sn_ll_add(L, src, v.j), v.mask, "row");
        sn_ll_vstore(L, y, sn_ll_add(L, dst, v.j), LLVMBuildSelect(b, okv, row, sn_ll_vf32(L, NAN), ""), v.mask);
    }
    sn_ll_for_end(L, &ps);
}

/* columns [q cb, min(q cb + cb, C)) of y (V, C) = sum over p with ids[p] = v of dy[p, cols] */
static void embedding_bwd(sn_ll *L, LLVMValueRef y, LLVMValueRef ids, LLVMValueRef dy, int64_t N,
                          int64_t V, int64_t C, int64_t cb) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef nC = sn_ll_i64(L, C);
    sn_ll_loop qs, rows, ps;
    sn_ll_vloop v;
    LLVMValueRef q = sn_ll_for(L, &qs, L->begin, L->end, sn_ll_i64(L, 1), "q");
    LLVMValueRef c0 = LLVMBuildMul(b, q, sn_ll_i64(L, cb), "c0");
    LLVMValueRef c1 = sn_ll_imin(L, sn_ll_add(L, c0, sn_ll_i64(L, cb)), nC, "c1");
    LLVMValueRef row = sn_ll_for(L, &rows, sn_ll_i64(L, 0), sn_ll_i64(L, V), sn_ll_i64(L, 1), "v");
    LLVMValueRef at = LLVMBuildMul(b, row, nC, "at");
    for (sn_ll_vloop_range(L, &v, c0, c1, "j"); sn_ll_vloop_next(L, &v);)
        sn_ll_vstore(L, y, sn_ll_add(L, at, v.j), sn_ll_vf32(L, 0), v.mask);
    sn_ll_for_end(L, &rows);
    LLVMValueRef p = sn_ll_for(L, &ps, sn_ll_i64(L, 0), sn_ll_i64(L, N), sn_ll_i64(L, 1), "p");
    LLVMValueRef id = sn_ll_load_i32(L, ids, p, "id");
    sn_ll_if ok;
    sn_ll_if_begin(L, &ok, valid_id(L, id, V), "ok");
    LLVMValueRef dst = LLVMBuildMul(b, LLVMBuildSExt(b, id, L->t_i64, ""), nC, "dst");
    LLVMValueRef src = LLVMBuildMul(b, p, nC, "src");
    for (sn_ll_vloop_range(L, &v, c0, c1, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef sum = sn_ll_vload(L, y, sn_ll_add(L, dst, v.j), v.mask, "acc");
        LLVMValueRef add = sn_ll_vload(L, dy, sn_ll_add(L, src, v.j), v.mask, "dy");
        sn_ll_vstore(L, y, sn_ll_add(L, dst, v.j), LLVMBuildFAdd(b, sum, add, "acc"), v.mask);
    }
    sn_ll_if_end(L, &ok);
    sn_ll_for_end(L, &ps);
    sn_ll_for_end(L, &qs);
}

sn_status sn_ll_emit_gather(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor;
    bool fwd = n->op == SN_OP_EMBEDDING;
    const sn_node *ids = n->in[fwd ? 1 : 0], *rows = n->in[fwd ? 0 : 1];
    int64_t C = n->shape[n->rank - 1];
    int64_t V = fwd ? rows->shape[0] : n->shape[0];
    sn_status st = sn_ll_check_dtype(k, n, e);
    if (st) return st;
    sn_ll_fn_begin(L, fname);
    if (k->stage == SN_GATHER_BUCKET) { /* the CPU sums by column blocks: no buckets (llvm.h) */
        sn_ll_fn_end(L);
        return SN_OK;
    }
    LLVMValueRef y = sn_ll_buf(L, 0, n->dtype, "y"), idp, rp;
    if ((st = sn_ll_input_named(L, k, ids, "ids", &idp, e)) || (st = sn_ll_input_named(L, k, rows, fwd ? "table" : "dy", &rp, e))) return st;
    if (fwd) embedding(L, y, rp, idp, V, C);
    else embedding_bwd(L, y, idp, rp, sn_numel(ids), V, C, (C + k->n_items - 1) / k->n_items);
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
