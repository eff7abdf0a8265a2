/* llvm_adamw.c: the AdamW update of one parameter, in place (kernel.h lists the buffers:
 * p, m, v, g, hyper[8]).
 * Convention: items are elements; the hyperparameters are read once per call, so one compiled
 * kernel serves every step. */
#ifdef SN_HAVE_LLVM

#include "llvm_util.h"

sn_status sn_ll_emit_adamw(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    for (int i = 0; i < SN_ADAMW_BUFS - 1 && i < SN_KER_MAX_ARGS; i++) {
        sn_status st = k->args[i] ? sn_ll_check_dtype(k, k->args[i], e) : SN_OK;
        if (st) return st;
    }
    if (k->anchor) {
        sn_status st = sn_ll_check_dtype(k, k->anchor, e);
        if (st) return st;
    }
    static const char *const hname[SN_ADAMW_HYPER] = {"lr", "beta1", "beta2", "eps", "wd",
                                                      "bc1", "bc2", "grad_scale"};
    sn_ll_fn_begin(L, fname);
    LLVMBuilderRef b = L->b;
    LLVMValueRef p = sn_ll_buf(L, 0, SN_F32, "p"), m = sn_ll_buf(L, 1, SN_F32, "m");
    LLVMValueRef v2 = sn_ll_buf(L, 2, SN_F32, "v"), g = sn_ll_buf(L, 3, SN_F32, "g");
    LLVMValueRef hp = sn_ll_buf(L, 4, SN_F32, "hyper"), h[SN_ADAMW_HYPER];
    for (int i = 0; i < SN_ADAMW_HYPER; i++)
        h[i] = sn_ll_splat(L, sn_ll_load(L, hp, sn_ll_i64(L, i), hname[i]), hname[i]);
    LLVMValueRef one = sn_ll_vf32(L, 1);
    LLVMValueRef c1 = LLVMBuildFSub(b, one, h[1], "1-beta1"), c2 = LLVMBuildFSub(b, one, h[2], "1-beta2");
    sn_ll_vloop v;
    for (sn_ll_vloop_range(L, &v, L->begin, L->end, "i"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef gi = LLVMBuildFMul(b, sn_ll_vload(L, g, v.j, v.mask, "g"), h[7], "gs");
        LLVMValueRef mi = LLVMBuildFAdd(b, LLVMBuildFMul(b, h[1], sn_ll_vload(L, m, v.j, v.mask, "m"), ""),
                                        LLVMBuildFMul(b, c1, gi, ""), "m1");
        LLVMValueRef vi = LLVMBuildFAdd(b, LLVMBuildFMul(b, h[2], sn_ll_vload(L, v2, v.j, v.mask, "v"), ""),
                                        LLVMBuildFMul(b, c2, LLVMBuildFMul(b, gi, gi, ""), ""), "v1");
        LLVMValueRef pi = sn_ll_vload(L, p, v.j, v.mask, "p");
        LLVMValueRef mhat = LLVMBuildFDiv(b, mi, h[5], "mhat");
        LLVMValueRef den = LLVMBuildFAdd(b, sn_ll_sqrt(L, LLVMBuildFDiv(b, vi, h[6], "vhat"), ""), h[3], "den");
        LLVMValueRef upd = LLVMBuildFAdd(b, LLVMBuildFDiv(b, mhat, den, ""), LLVMBuildFMul(b, h[4], pi, ""), "upd");
        sn_ll_vstore(L, p, v.j, LLVMBuildFSub(b, pi, LLVMBuildFMul(b, h[0], upd, ""), "p1"), v.mask);
        sn_ll_vstore(L, m, v.j, mi, v.mask);
        sn_ll_vstore(L, v2, v.j, vi, v.mask);
    }
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
