/* llvm_attention.c: the fused causal attention kernels (sn_ll_emit_attention): the checks of
 * the kernel, then a chunk of one (batch x head) slice's rows per item (queries; dk and dv:
 * keys; as program/kernel.h orders them), its q, k, v, o, dout and lse found through their accesses
 * (views of a wider buffer) and its rows walked by llvm_attention_steps.c's steps.
 * Convention: f32 inside; bf16/f16 q, k, v, o, dout converted on load, outputs on store. */
#ifdef SN_HAVE_LLVM

#include <string.h>

#include "llvm_attention.h"

#define B (a->L->b)

/* ---- the kernel ---- */

/* Rows per step: two halve the loads per FMA (measured at D = 64 with AVX-512: 1.5x at 16
 * lanes, 1.6x at 8) as long as their two row vectors and two accumulators fit in the vector
 * registers (32 with AVX-512, else 16; AVX2-only hosts are untested). The kernels work for any
 * R up to MAX_R. */
static int rows_per_step(const sn_ll *L, const att *a) {
    int n = a->nd > a->ndv ? a->nd : a->ndv;
    int regs = L->features && strstr(L->features, "+avx512f") ? 32 : 16;
    return 4 * n <= regs ? 2 : 1;
}

/* The item's slice of buffer p (per elements per item), or NULL for NULL. */
static LLVMValueRef slice(att *a, LLVMValueRef p, LLVMValueRef item, int64_t per, const char *name) {
    return p ? sn_ll_att_at(a->L, p, sn_ll_mul(a->L, item, sn_ll_i64(a->L, per)), name) : NULL;
}

/* The item's slice of the anchor's input i (or output i - n_in), through its access: the arg,
 * plus the offset and the item's coordinates times their strides. The item's coordinates are
 * over q's leading dims, or k's for dk and dv; on the other side the head coordinate (the last
 * leading dim) is divided by G (k and v read by a query head) or multiplied by it (the group's
 * first query head). NULL for NULL. */
static LLVMValueRef in_slice(att *a, const sn_kernel *k, int i, LLVMValueRef p, LLVMValueRef item,
                             const char *name) {
    if (!p) return NULL;
    sn_ll *L = a->L;
    const sn_node *q = a->n->in[0], *by = a->by_kv ? a->n->in[1] : q;
    bool kv_side = i < a->n->n_in ? i == 1 || i == 2 : a->by_kv;
    const sn_access *x = &k->access[i];
    LLVMValueRef off = sn_ll_i64(L, x->offset), rest = item;
    for (int d = q->rank - 3; d >= 0; d--) { /* the leading dims, innermost first */
        LLVMValueRef size = sn_ll_i64(L, by->shape[d]);
        LLVMValueRef idx = d ? LLVMBuildURem(B, rest, size, "") : rest;
        if (d == q->rank - 3 && a->G > 1 && kv_side != a->by_kv)
            idx = kv_side ? LLVMBuildUDiv(B, idx, sn_ll_i64(L, a->G), "kv_head")
                          : sn_ll_mul(L, idx, sn_ll_i64(L, a->G));
        if (x->stride[d]) off = sn_ll_add(L, off, sn_ll_mul(L, idx, sn_ll_i64(L, x->stride[d])));
        if (d) rest = LLVMBuildUDiv(B, rest, size, "");
    }
    return sn_ll_att_at(L, p, off, name);
}

/* dk and dv with G > 1: the elements of input i's buffer from one query head to the next. */
static int64_t head_stride(const att *a, const sn_kernel *k, int i) {
    return k->access[i].stride[a->n->in[0]->rank - 3];
}

/* The row stride of input i (or output i - n_in): its second-to-last axis. */
static int64_t in_rs(const sn_kernel *k, int i) {
    return k->access[i].stride[k->anchor->in[0]->rank - 2];
}

/* Checks k (an attention kernel as passes/fuse.c makes it) before anything is built. */
static sn_status check_kernel(const sn_ll *L, const sn_kernel *k, sn_err *e) {
    char kn[96];
    const sn_node *n = k->anchor;
    sn_ll_kname(k, kn, sizeof kn);
    sn_status cs = sn_kernel_check_attention(k, e); /* the contract (program/kernel_check.c) */
    if (cs) return cs;
    if (k->stage != SN_SUM_WHOLE)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: the atomic dq (kernel.h) is the CUDA kernels' "
                       "alone; compile for the CPU without sn_target.att_dq_atomic", kn);
    for (int i = 0; i < k->n_out; i++) { /* f32, or bf16 / f16 converted by the loads */
        sn_status st = sn_ll_check_dtype(k, k->args[i], e);
        if (st) return st;
    }
    for (int i = 0; i < n->n_in; i++) { /* read from input args (checked): their dtypes */
        if (n->in[i] == k->anchor2) continue;
        sn_status st = sn_ll_check_dtype(k, n->in[i], e);
        if (st) return st;
    }
    const sn_node *q = n->in[0];
    int r = q->rank;
    int64_t D = q->shape[r - 1], Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : D;
    if (sn_ll_att_chunks(L, D) > MAX_CHUNKS || sn_ll_att_chunks(L, Dv) > MAX_CHUNKS)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: head sizes D = %lld, Dv = %lld exceed the %d "
                       "the LLVM attention kernels hold in registers", kn, (long long)D,
                       (long long)Dv, MAX_CHUNKS * L->lanes);
    int64_t G = sn_attention_group(n);
    if (n->op == SN_OP_ATTENTION_BWD_K && G * q->shape[r - 2] > MAX_SCRATCH_T)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: T = %lld queries (times %lld query heads "
                       "per kv head) exceed the %d the LLVM attention_bwd_k kernel keeps on its "
                       "stack", kn, (long long)q->shape[r - 2], (long long)G, MAX_SCRATCH_T);
    return SN_OK;
}

sn_status sn_ll_emit_attention(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    sn_status st = check_kernel(L, k, e);
    if (st || k->anchor->op == SN_OP_ATTENTION_CACHE)
        return st ? st : sn_ll_emit_attention_cache(L, k, fname, e); /* llvm_attention_cache.c */
    const sn_node *n = k->anchor, *q = n->in[0], *kk = n->in[1];
    int r = q->rank;
    att a = {.L = L, .n = n, .T = q->shape[r - 2], .S = kk->shape[r - 2], .D = q->shape[r - 1]};
    a.Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : a.D;
    a.nd = sn_ll_att_chunks(L, a.D);
    a.ndv = sn_ll_att_chunks(L, a.Dv);
    a.scale = sn_ll_f32(L, n->a.f);
    a.R = rows_per_step(L, &a);
    a.G = sn_attention_group(n);
    a.by_kv = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V;

    sn_ll_fn_begin(L, fname);
    /* the inputs through their accesses: q, k, v, o, dout may be views of a wider buffer */
    LLVMValueRef *role[6] = {&a.bq, &a.bk, &a.bv, n->op == SN_OP_ATTENTION ? &a.blse : &a.bo,
                             &a.bdo, &a.blse};
    int64_t *rs[6] = {&a.rq, &a.rk, &a.rv, &a.ro, &a.rdo, NULL};
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] == k->anchor2) continue;
        *role[i] = sn_ll_buf(L, k->access[i].arg, n->in[i]->dtype, "in");
        if (rs[i] && role[i] != &a.blse) *rs[i] = in_rs(k, i);
    }
    a.by = sn_ll_buf(L, 0, n->dtype, "y");
    if (n->op == SN_OP_ATTENTION_LSE) {
        a.blse_out = a.by;
        a.by = NULL;
    } else if (n->op == SN_OP_ATTENTION && k->anchor2) {
        a.blse_out = sn_ll_buf(L, 1, SN_F32, "lse_out"); /* lse */
    }
    if (n->op == SN_OP_ATTENTION_BWD_K) {
        LLVMValueRef buf = sn_ll_var(L, LLVMArrayType(L->t_f32, (unsigned)(a.G * a.T)), NULL, "dsum");
        LLVMSetAlignment(buf, 64);
        a.dsum = LLVMBuildBitCast(L->b, buf, LLVMPointerType(L->t_f32, 0), "dsum");
    }

    sn_ll_loop items;
    LLVMValueRef b = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "item");
    int64_t rows = a.by_kv ? a.S : a.T;
    LLVMValueRef row0 = sn_ll_i64(L, 0), row1 = sn_ll_i64(L, rows);
    { /* item: the slice b / C's chunk of rows sn_att_row_chunk(b % C, C) (kernel.h) */
        int64_t C = rows > 0 ? (rows + SN_ATT_ROW_CHUNK - 1) / SN_ATT_ROW_CHUNK : 1;
        LLVMValueRef c = LLVMBuildURem(L->b, b, sn_ll_i64(L, C), "c");
        b = LLVMBuildUDiv(L->b, b, sn_ll_i64(L, C), "slice");
        LLVMValueRef half = LLVMBuildUDiv(L->b, c, sn_ll_i64(L, 2), "");
        LLVMValueRef odd = LLVMBuildICmp(L->b, LLVMIntNE, LLVMBuildURem(L->b, c, sn_ll_i64(L, 2), ""),
                                         sn_ll_i64(L, 0), "");
        LLVMValueRef chunk = LLVMBuildSelect(L->b, odd, LLVMBuildSub(L->b, sn_ll_i64(L, C - 1), half, ""),
                                             half, "chunk");
        row0 = sn_ll_mul(L, chunk, sn_ll_i64(L, SN_ATT_ROW_CHUNK)); /* a multiple of R: the */
        row1 = sn_ll_imin(L, sn_ll_add(L, row0, sn_ll_i64(L, SN_ATT_ROW_CHUNK)), row1, "row_end");
    } /* steps' second rows stay in the chunk (the last chunk's clamp to the last row is its own) */
    a.q = in_slice(&a, k, 0, a.bq, b, "q");
    a.k = in_slice(&a, k, 1, a.bk, b, "k");
    a.v = in_slice(&a, k, 2, a.bv, b, "v");
    a.o = n->n_in > 3 ? in_slice(&a, k, 3, a.bo, b, "o") : NULL;
    a.dout = n->n_in > 4 ? in_slice(&a, k, 4, a.bdo, b, "dout") : NULL;
    a.lse = in_slice(&a, k, n->op == SN_OP_ATTENTION ? 3 : 5, a.blse, b, "lse");
    a.lse_out = slice(&a, a.blse_out, b, a.T, "lse_out");
    if (a.by_kv && a.G > 1) { /* the group's first query head; use_group moves to the others */
        int i_lse = n->op == SN_OP_ATTENTION ? 3 : 5;
        a.q0 = a.q, a.o0 = a.o, a.dout0 = a.dout, a.lse0 = a.lse, a.dsum0 = a.dsum;
        a.gq = head_stride(&a, k, 0), a.go = head_stride(&a, k, 3);
        a.gdo = head_stride(&a, k, 4), a.glse = head_stride(&a, k, i_lse);
    }
    int64_t per = n->op == SN_OP_ATTENTION_BWD_Q || n->op == SN_OP_ATTENTION_BWD_K ? a.D : a.Dv;
    bool into = k->n_access > n->n_in; /* outputs written through accesses */
    a.y = into ? in_slice(&a, k, n->n_in, a.by, b, "y") : slice(&a, a.by, b, rows * per, "y");
    a.ry = into ? in_rs(k, n->n_in) : per;
    if (a.dsum) sn_ll_att_fill_dsum(&a);
    sn_ll_loop rl;
    LLVMValueRef i = sn_ll_for(L, &rl, row0, row1, sn_ll_i64(L, a.R), a.by_kv ? "key" : "query");
    switch (n->op) {
    case SN_OP_ATTENTION_LSE: case SN_OP_ATTENTION: sn_ll_att_forward_step(&a, i); break;
    case SN_OP_ATTENTION_BWD_Q: sn_ll_att_bwd_q_step(&a, i); break;
    default: sn_ll_att_bwd_kv_step(&a, i); break;
    }
    sn_ll_for_end(L, &rl);
    if (n->op == SN_OP_ATTENTION_BWD_K && k->anchor2) { /* then dv (args[1]) over the same keys */
        a.n = k->anchor2;
        LLVMValueRef dv = sn_ll_buf(L, 1, k->anchor2->dtype, "dv");
        a.y = into ? in_slice(&a, k, n->n_in + 1, dv, b, "dv") : slice(&a, dv, b, a.S * a.Dv, "dv");
        a.ry = into ? in_rs(k, n->n_in + 1) : a.Dv;
        i = sn_ll_for(L, &rl, row0, row1, sn_ll_i64(L, a.R), "key");
        sn_ll_att_bwd_kv_step(&a, i);
        sn_ll_for_end(L, &rl);
        a.n = n;
    }
    sn_ll_for_end(L, &items);
    sn_ll_fn_end(L);
    return SN_OK;
}

#undef B

#endif /* SN_HAVE_LLVM */
