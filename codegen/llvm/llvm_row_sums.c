/* llvm_row_sums.c: the row ops that sum over every row (cross-entropy's mean loss, the norm
 * weight gradients with their column sums) as kernel.h's PARTIAL kernel, a chunk of rows an
 * item, and its FINISH kernel; llvm_row.c writes the rows themselves.
 * Convention: partial sums are added in chunk order, so that no float is added in a varying
 * order. */
#ifdef SN_HAVE_LLVM

#include "llvm_row.h"

/* Tile t (runtime) of the column sums that joined a norm weight-gradient kernel (kernel.h:
 * n_colsum), over the chunk's rows [r0, r1): part[at_o + c] = sum over r in row order of
 * src_o[r C_o + c], a vector of adjacent columns walking down the rows. */
static void colsum_tile(sn_ll *L, const sn_kernel *k, LLVMValueRef part, LLVMValueRef t,
                        LLVMValueRef r0, LLVMValueRef r1) {
    LLVMBuilderRef b = L->b;
    int64_t first = 0, at = sn_numel(k->anchor); /* the output's first tile, its partials */
    for (int o = 1; o <= k->row.n_colsum; o++) {
        int64_t C = sn_numel(k->args[o]), tiles = (C + SN_COLSUM_TILE - 1) / SN_COLSUM_TILE;
        LLVMValueRef x = sn_ll_buf(L, k->row.colsum_src[o], k->args[k->row.colsum_src[o]]->dtype,
                                   "colsum_src"); /* 16-bit elements widened as loaded */
        LLVMValueRef in = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, t, sn_ll_i64(L, first), ""),
                                       LLVMBuildICmp(b, LLVMIntSLT, t, sn_ll_i64(L, first + tiles), ""), "");
        sn_ll_if mine;
        sn_ll_if_begin(L, &mine, in, "tile");
        LLVMValueRef c0 = LLVMBuildMul(b, LLVMBuildSub(b, t, sn_ll_i64(L, first), ""),
                                       sn_ll_i64(L, SN_COLSUM_TILE), "c0");
        LLVMValueRef c1 = sn_ll_imin(L, sn_ll_add(L, c0, sn_ll_i64(L, SN_COLSUM_TILE)),
                                     sn_ll_i64(L, C), "c1");
        sn_ll_vloop v;
        for (sn_ll_vloop_range(L, &v, c0, c1, "c"); sn_ll_vloop_next(L, &v);) {
            LLVMValueRef acc = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, 0), "acc");
            sn_ll_loop rs;
            LLVMValueRef r = sn_ll_for(L, &rs, r0, r1, sn_ll_i64(L, 1), "r");
            LLVMValueRef xv = sn_ll_vload(L, x, sn_ll_add(L, LLVMBuildMul(b, r, sn_ll_i64(L, C), ""), v.j),
                                          v.mask, "x");
            sn_ll_set(L, acc, LLVMBuildFAdd(b, sn_ll_get(L, acc, ""), xv, "sum"));
            sn_ll_for_end(L, &rs);
            sn_ll_vstore(L, part, sn_ll_add(L, sn_ll_i64(L, at), v.j), sn_ll_get(L, acc, "s"), v.mask);
        }
        sn_ll_if_end(L, &mine);
        first += tiles;
        at += C;
    }
}

/* kernel.h's FINISH for the items [begin, end): each column of the partial sums added over the
 * chunks in chunk order, into the output that holds it. */
sn_status sn_ll_emit_row_finish(sn_ll *L, const sn_kernel *k, const char *fname) {
    int64_t P = sn_sum_chunks(k), W = sn_sum_width(k), at = 0;
    sn_ll_fn_begin(L, fname);
    LLVMBuilderRef b = L->b;
    LLVMValueRef part = sn_ll_buf(L, k->n_out, SN_F32, "partials");
    if (k->anchor->op == SN_OP_CROSS_ENTROPY) { /* the mean loss from the chunks' f64 sums */
        sn_ll_if any;
        sn_ll_if_begin(L, &any, LLVMBuildICmp(b, LLVMIntSLT, L->begin, L->end, ""), "any");
        LLVMValueRef zero = LLVMConstReal(L->t_f64, 0);
        LLVMValueRef loss = sn_ll_var(L, L->t_f64, zero, "loss"), rows = sn_ll_var(L, L->t_f64, zero, "rows");
        /* the classifier's partials are rows: each chunk of SN_SUM_CHUNK of them added in
         * order first (kernel.h), then the chunks; else the partials are the chunks' */
        int64_t per = k->anchor2 ? SN_SUM_CHUNK : 1, chunks = (P + per - 1) / per;
        LLVMValueRef cl = sn_ll_var(L, L->t_f64, zero, "chunk_loss"), cr = sn_ll_var(L, L->t_f64, zero, "chunk_rows");
        sn_ll_loop cs, ps;
        LLVMValueRef ch = sn_ll_for(L, &cs, sn_ll_i64(L, 0), sn_ll_i64(L, chunks), sn_ll_i64(L, 1), "chunk");
        sn_ll_set(L, cl, zero);
        sn_ll_set(L, cr, zero);
        LLVMValueRef p0 = LLVMBuildMul(b, ch, sn_ll_i64(L, per), "p0");
        LLVMValueRef p1 = sn_ll_imin(L, sn_ll_add(L, p0, sn_ll_i64(L, per)), sn_ll_i64(L, P), "p1");
        LLVMValueRef p = sn_ll_for(L, &ps, p0, p1, sn_ll_i64(L, 1), "p");
        LLVMValueRef i = LLVMBuildMul(b, p, sn_ll_i64(L, 2), "");
        LLVMValueRef at_loss = LLVMBuildGEP2(b, L->t_f64, part, &i, 1, "");
        LLVMValueRef one = sn_ll_i64(L, 1);
        LLVMValueRef at_rows = LLVMBuildGEP2(b, L->t_f64, at_loss, &one, 1, "");
        sn_ll_set(L, cl, LLVMBuildFAdd(b, sn_ll_get(L, cl, ""), LLVMBuildLoad2(b, L->t_f64, at_loss, ""), ""));
        sn_ll_set(L, cr, LLVMBuildFAdd(b, sn_ll_get(L, cr, ""), LLVMBuildLoad2(b, L->t_f64, at_rows, ""), ""));
        sn_ll_for_end(L, &ps);
        /* a chunk's own partial (per 1) arrives as 0 + x, which is x */
        sn_ll_set(L, loss, LLVMBuildFAdd(b, sn_ll_get(L, loss, ""), sn_ll_get(L, cl, ""), ""));
        sn_ll_set(L, rows, LLVMBuildFAdd(b, sn_ll_get(L, rows, ""), sn_ll_get(L, cr, ""), ""));
        sn_ll_for_end(L, &cs);
        LLVMValueRef c = sn_ll_get(L, rows, "rows");
        LLVMValueRef mean = LLVMBuildFDiv(b, sn_ll_get(L, loss, ""), c, "");
        LLVMValueRef some = LLVMBuildFCmp(b, LLVMRealOGT, c, zero, "");
        LLVMValueRef out = LLVMBuildSelect(b, some, LLVMBuildFPTrunc(b, mean, L->t_f32, ""), sn_ll_f32(L, 0), "mean_loss");
        sn_ll_store(L, sn_ll_buf(L, 0, SN_F32, "loss"), sn_ll_i64(L, 0), out);
        sn_ll_if_end(L, &any);
        sn_ll_fn_end(L);
        return SN_OK;
    }
    LLVMValueRef lo = LLVMBuildMul(b, L->begin, sn_ll_i64(L, SN_SUM_FINISH_COLS), "lo");
    LLVMValueRef hi = sn_ll_imin(L, LLVMBuildMul(b, L->end, sn_ll_i64(L, SN_SUM_FINISH_COLS), ""),
                                 sn_ll_i64(L, W), "hi");
    for (int o = 0; o < k->n_out; o++) { /* output o holds columns [at, at + C) */
        int64_t C = sn_numel(k->args[o]);
        LLVMValueRef y = sn_ll_buf(L, o, SN_F32, "sum");
        LLVMValueRef c0 = sn_ll_imax(L, lo, sn_ll_i64(L, at), "c0");
        LLVMValueRef c1 = sn_ll_imin(L, hi, sn_ll_i64(L, at + C), "c1");
        sn_ll_vloop v;
        for (sn_ll_vloop_range(L, &v, c0, c1, "c"); sn_ll_vloop_next(L, &v);) {
            LLVMValueRef acc = sn_ll_var(L, L->t_vf, sn_ll_vload(L, part, v.j, v.mask, "p0"), "acc");
            sn_ll_loop ps;
            LLVMValueRef p = sn_ll_for(L, &ps, sn_ll_i64(L, 1), sn_ll_i64(L, P), sn_ll_i64(L, 1), "p");
            LLVMValueRef x = sn_ll_vload(L, part, sn_ll_add(L, LLVMBuildMul(b, p, sn_ll_i64(L, W), ""), v.j),
                                         v.mask, "x");
            sn_ll_set(L, acc, LLVMBuildFAdd(b, sn_ll_get(L, acc, ""), x, "sum"));
            sn_ll_for_end(L, &ps);
            sn_ll_vstore(L, y, LLVMBuildSub(b, v.j, sn_ll_i64(L, at), ""), sn_ll_get(L, acc, "s"), v.mask);
        }
        at += C;
    }
    sn_ll_fn_end(L);
    return SN_OK;
}

/* The norm backward pair (kernel.h) for the items [begin, end): item i is chunk i, its rows'
 * dx (w->n) with dy xhat added into the chunk's partial sums by the dx pass, in row order, then
 * every column-sum tile over the chunk's rows (they may read what the rows stored). */
static void norm_pair(row *w, int64_t R) {
    sn_ll *L = w->L;
    const sn_kernel *k = w->k;
    LLVMBuilderRef b = L->b;
    w->y = sn_ll_buf(L, k->n_out + k->n_in, SN_F32, "partials");
    sn_ll_loop items, rows, tiles;
    LLVMValueRef chunk = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "chunk");
    int64_t cr = sn_sum_chunk_rows(k);
    LLVMValueRef r0 = LLVMBuildMul(b, chunk, sn_ll_i64(L, cr), "r0");
    LLVMValueRef r1 = sn_ll_imin(L, sn_ll_add(L, r0, sn_ll_i64(L, cr)), sn_ll_i64(L, R), "r1");
    w->y0 = LLVMBuildMul(b, chunk, sn_ll_i64(L, sn_sum_width(k)), "y0");
    sn_ll_vloop v; /* zero the chunk's partial sums of dy xhat, then the rows */
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);)
        sn_ll_vstore(L, w->y, sn_ll_add(L, w->y0, v.j), sn_ll_vf32(L, 0), v.mask);
    LLVMValueRef r = sn_ll_for(L, &rows, r0, r1, sn_ll_i64(L, 1), "r");
    w->off = LLVMBuildMul(b, r, sn_ll_i64(L, w->C), "off");
    sn_ll_fx_row(w->fx, r);
    sn_ll_row_one(w, r);
    sn_ll_for_end(L, &rows);
    LLVMValueRef pp = LLVMBuildGEP2(b, L->t_f32, w->y, &w->y0, 1, "part_row");
    LLVMValueRef t = sn_ll_for(L, &tiles, sn_ll_i64(L, 0), sn_ll_i64(L, sn_colsum_tiles(k)),
                               sn_ll_i64(L, 1), "t");
    colsum_tile(L, k, pp, t, r0, r1);
    sn_ll_for_end(L, &tiles);
    sn_ll_for_end(L, &items);
}

/* kernel.h's PARTIAL for the items [begin, end) of a row op that sums over every row: cross-
 * entropy (item i is chunk i: its loss sum and counted rows), or a norm weight gradient (item i
 * is part i % parts of chunk i / parts: part 0 the chunk's rows, part 1 + t column-sum tile t). */
void sn_ll_row_partial(row *w, int64_t R) {
    sn_ll *L = w->L;
    const sn_kernel *k = w->k;
    LLVMBuilderRef b = L->b;
    if (w->n->op == SN_OP_CROSS_ENTROPY) { /* item i is chunk i */
        LLVMValueRef part = sn_ll_buf(L, k->n_out + k->n_in, SN_F32, "partials");
        sn_ll_loop items;
        LLVMValueRef i = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "chunk");
        LLVMValueRef r0 = LLVMBuildMul(b, i, sn_ll_i64(L, SN_SUM_CHUNK), "r0");
        LLVMValueRef r1 = sn_ll_imin(L, sn_ll_add(L, r0, sn_ll_i64(L, SN_SUM_CHUNK)),
                                     sn_ll_i64(L, R), "r1");
        LLVMValueRef at = LLVMBuildMul(b, i, sn_ll_i64(L, 2), "");
        sn_ll_row_cross_entropy(w, r0, r1, LLVMBuildGEP2(b, L->t_f64, part, &at, 1, "chunk_sums"));
        sn_ll_for_end(L, &items);
        return;
    }
    if (k->row.pair) {
        norm_pair(w, R);
        return;
    }
    /* a norm weight gradient */
    LLVMValueRef parts = sn_ll_i64(L, 1 + sn_colsum_tiles(k)), W = sn_ll_i64(L, sn_sum_width(k));
    w->y = sn_ll_buf(L, k->n_out + k->n_in, SN_F32, "partials");
    sn_ll_loop items;
    LLVMValueRef i = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "item");
    LLVMValueRef chunk = LLVMBuildSDiv(b, i, parts, "chunk");
    LLVMValueRef part = LLVMBuildSRem(b, i, parts, "part");
    int64_t cr = sn_sum_chunk_rows(k);
    LLVMValueRef r0 = LLVMBuildMul(b, chunk, sn_ll_i64(L, cr), "r0");
    LLVMValueRef r1 = sn_ll_imin(L, sn_ll_add(L, r0, sn_ll_i64(L, cr)), sn_ll_i64(L, R), "r1");
    w->y0 = LLVMBuildMul(b, chunk, W, "y0");
    sn_ll_if anchor;
    sn_ll_if_begin(L, &anchor, LLVMBuildICmp(b, LLVMIntEQ, part, sn_ll_i64(L, 0), ""), "anchor");
    sn_ll_vloop v; /* zero the chunk's partial sums, then add its rows */
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);)
        sn_ll_vstore(L, w->y, sn_ll_add(L, w->y0, v.j), sn_ll_vf32(L, 0), v.mask);
    sn_ll_loop rows;
    LLVMValueRef r = sn_ll_for(L, &rows, r0, r1, sn_ll_i64(L, 1), "r");
    w->off = LLVMBuildMul(b, r, sn_ll_i64(L, w->C), "off");
    if (w->fx) sn_ll_fx_row(w->fx, r);
    sn_ll_row_one(w, r);
    sn_ll_for_end(L, &rows);
    if (k->row.n_colsum) {
        sn_ll_if_else(L, &anchor);
        LLVMValueRef pp = LLVMBuildGEP2(b, L->t_f32, w->y, &w->y0, 1, "part_row");
        colsum_tile(L, k, pp, LLVMBuildSub(b, part, sn_ll_i64(L, 1), "t"), r0, r1);
    }
    sn_ll_if_end(L, &anchor);
    sn_ll_for_end(L, &items);
}

#endif /* SN_HAVE_LLVM */
