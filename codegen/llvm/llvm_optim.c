/* llvm_optim.c: the optimizer step over the flat parameter range (kernel.h: GRAD_ACC, SQNORM,
 * CLIP, ADAMW and their buffers); AdamW with flat_low also stores the new weights' 16-bit
 * copies.
 * Convention: every hyper-parameter is read from the scalar buffer at each call, so one compiled
 * kernel serves every step; only flat_n and flat_decay are fixed when it is generated. */
#ifdef SN_HAVE_LLVM

#include "llvm_util.h"

/* sum[i] += g[i] on the items [begin, end) */
static void emit_grad_acc(sn_ll *L) {
    LLVMValueRef sum = sn_ll_buf(L, 0, SN_F32, "sum"), g = sn_ll_buf(L, 1, SN_F32, "g");
    sn_ll_vloop v;
    for (sn_ll_vloop_range(L, &v, L->begin, L->end, "i"); sn_ll_vloop_next(L, &v);)
        sn_ll_vstore(L, sum, v.j, LLVMBuildFAdd(L->b, sn_ll_vload(L, sum, v.j, v.mask, "s"),
                                                sn_ll_vload(L, g, v.j, v.mask, "g"), "s1"), v.mask);
}

/* partial[b] = sum over block b of (g * inv_micro)^2, blocks [begin, end) */
static void emit_sqnorm(sn_ll *L, int64_t n) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef part = sn_ll_buf(L, 0, SN_F32, "partial"), g = sn_ll_buf(L, 1, SN_F32, "g");
    LLVMValueRef scal = sn_ll_buf(L, 2, SN_F32, "scal");
    LLVMValueRef inv = sn_ll_splat(L, sn_ll_load(L, scal, sn_ll_i64(L, SN_OPT_INV_MICRO), "inv"), "inv");
    sn_ll_loop blocks;
    LLVMValueRef blk = sn_ll_for(L, &blocks, L->begin, L->end, sn_ll_i64(L, 1), "b");
    LLVMValueRef lo = LLVMBuildMul(b, blk, sn_ll_i64(L, SN_SQNORM_BLOCK), "lo");
    LLVMValueRef hi = sn_ll_imin(L, sn_ll_add(L, lo, sn_ll_i64(L, SN_SQNORM_BLOCK)), sn_ll_i64(L, n), "hi");
    LLVMValueRef acc = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, 0), "acc");
    sn_ll_vloop v;
    for (sn_ll_vloop_range(L, &v, lo, hi, "i"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef x = LLVMBuildFMul(b, sn_ll_vload(L, g, v.j, v.mask, "g"), inv, "x");
        sn_ll_acc_add(L, acc, LLVMBuildFMul(b, x, x, "x2"), v.mask);
    }
    sn_ll_store(L, part, blk, sn_ll_hsum(L, sn_ll_get(L, acc, ""), "p"));
    sn_ll_for_end(L, &blocks);
}

/* one serial item: the norm from the partials (f64), and the clip scale */
static void emit_clip(sn_ll *L, int64_t n) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef scal = sn_ll_buf(L, 0, SN_F32, "scal"), part = sn_ll_buf(L, 1, SN_F32, "partial");
    int64_t nb = (n + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK;
    LLVMValueRef acc = sn_ll_var(L, L->t_f64, LLVMConstReal(L->t_f64, 0), "acc");
    sn_ll_loop lp;
    LLVMValueRef i = sn_ll_for(L, &lp, sn_ll_i64(L, 0), sn_ll_i64(L, nb), sn_ll_i64(L, 1), "b");
    LLVMValueRef p = LLVMBuildFPExt(b, sn_ll_load(L, part, i, "p"), L->t_f64, "p64");
    sn_ll_set(L, acc, LLVMBuildFAdd(b, sn_ll_get(L, acc, ""), p, "acc1"));
    sn_ll_for_end(L, &lp);
    LLVMValueRef norm = sn_ll_sqrt(L, sn_ll_get(L, acc, ""), "norm");
    LLVMValueRef clip = LLVMBuildFPExt(b, sn_ll_load(L, scal, sn_ll_i64(L, SN_OPT_CLIP), "clip"), L->t_f64, "clip64");
    LLVMValueRef zero = LLVMConstReal(L->t_f64, 0), one = LLVMConstReal(L->t_f64, 1);
    LLVMValueRef on = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOGT, clip, zero, ""),
                                   LLVMBuildFCmp(b, LLVMRealOGT, norm, clip, ""), "clipping");
    LLVMValueRef scale = LLVMBuildSelect(b, on, LLVMBuildFDiv(b, clip, norm, ""), one, "scale");
    sn_ll_store(L, scal, sn_ll_i64(L, SN_OPT_NORM), LLVMBuildFPTrunc(b, norm, L->t_f32, "norm32"));
    sn_ll_store(L, scal, sn_ll_i64(L, SN_OPT_SCALE), LLVMBuildFPTrunc(b, scale, L->t_f32, "scale32"));
}

/* AdamW on the elements [lo, hi) with weight decay wd (a vector); low: SN_F32, or the dtype of
 * the 16-bit copies of the new weights stored into buffer 5 */
static void adamw_range(sn_ll *L, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef *h, LLVMValueRef wd,
                        sn_dtype low) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef p = sn_ll_buf(L, 0, SN_F32, "p"), m = sn_ll_buf(L, 1, SN_F32, "m");
    LLVMValueRef v2 = sn_ll_buf(L, 2, SN_F32, "v"), g = sn_ll_buf(L, 3, SN_F32, "g");
    LLVMValueRef lowp = low == SN_F32 ? NULL : sn_ll_buf(L, 5, low, "low");
    LLVMValueRef one = sn_ll_vf32(L, 1);
    LLVMValueRef c1 = LLVMBuildFSub(b, one, h[SN_OPT_BETA1], "1-beta1");
    LLVMValueRef c2 = LLVMBuildFSub(b, one, h[SN_OPT_BETA2], "1-beta2");
    sn_ll_vloop v;
    for (sn_ll_vloop_range(L, &v, lo, hi, "i"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef gi = LLVMBuildFMul(b, sn_ll_vload(L, g, v.j, v.mask, "g"), h[SN_OPT_INV_MICRO], "gm");
        gi = LLVMBuildFMul(b, gi, h[SN_OPT_SCALE], "gs");
        LLVMValueRef mi = LLVMBuildFAdd(b, LLVMBuildFMul(b, h[SN_OPT_BETA1], sn_ll_vload(L, m, v.j, v.mask, "m"), ""),
                                        LLVMBuildFMul(b, c1, gi, ""), "m1");
        LLVMValueRef vi = LLVMBuildFAdd(b, LLVMBuildFMul(b, h[SN_OPT_BETA2], sn_ll_vload(L, v2, v.j, v.mask, "v"), ""),
                                        LLVMBuildFMul(b, c2, LLVMBuildFMul(b, gi, gi, ""), ""), "v1");
        LLVMValueRef pi = sn_ll_vload(L, p, v.j, v.mask, "p");
        LLVMValueRef mhat = LLVMBuildFDiv(b, mi, h[SN_OPT_BC1], "mhat");
        LLVMValueRef den = LLVMBuildFAdd(b, sn_ll_sqrt(L, LLVMBuildFDiv(b, vi, h[SN_OPT_BC2], "vhat"), ""),
                                         h[SN_OPT_EPS], "den");
        LLVMValueRef upd = LLVMBuildFAdd(b, LLVMBuildFDiv(b, mhat, den, ""), LLVMBuildFMul(b, wd, pi, ""), "upd");
        LLVMValueRef p1 = LLVMBuildFSub(b, pi, LLVMBuildFMul(b, h[SN_OPT_LR], upd, ""), "p1");
        sn_ll_vstore(L, p, v.j, p1, v.mask);
        if (lowp) sn_ll_vstore(L, lowp, v.j, p1, v.mask); /* rounded to nearest even */
        sn_ll_vstore(L, m, v.j, mi, v.mask);
        sn_ll_vstore(L, v2, v.j, vi, v.mask);
    }
}

static void emit_adamw(sn_ll *L, int64_t n_decay, sn_dtype low) {
    static const char *const hname[SN_OPT_SCALARS] = {"lr", "beta1", "beta2", "eps", "wd", "bc1",
                                                      "bc2", "scale", "inv_micro"};
    LLVMValueRef hp = sn_ll_buf(L, 4, SN_F32, "scal"), h[SN_OPT_SCALARS] = {0};
    for (int i = 0; i <= SN_OPT_INV_MICRO; i++)
        h[i] = sn_ll_splat(L, sn_ll_load(L, hp, sn_ll_i64(L, i), hname[i]), hname[i]);
    LLVMValueRef split = sn_ll_i64(L, n_decay);
    LLVMValueRef mid_lo = sn_ll_imin(L, L->end, split, "decay_end");
    adamw_range(L, L->begin, mid_lo, h, h[SN_OPT_WD], low);
    LLVMValueRef mid_hi = sn_ll_imax(L, L->begin, split, "plain_begin");
    adamw_range(L, mid_hi, L->end, h, sn_ll_vf32(L, 0), low);
}

sn_status sn_ll_emit_optim(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    sn_ll_fn_begin(L, fname);
    switch (k->kind) {
    case SN_KER_GRAD_ACC: emit_grad_acc(L); break;
    case SN_KER_SQNORM: emit_sqnorm(L, k->opt.flat_n); break;
    case SN_KER_CLIP: emit_clip(L, k->opt.flat_n); break;
    case SN_KER_ADAMW: emit_adamw(L, k->opt.flat_decay, k->opt.flat_low); break;
    default: SN_ASSERT(0);
    }
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
