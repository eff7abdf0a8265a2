/* llvm_dequant.c: the dequantize of NF4 weights (ir/nf4.h) on the CPU: y (the node's shape,
 * f32 or bf16) from the packed bytes.
 * Convention: an item is a block of 64 weights; its scale is fma(code, step, mean) (llvm.fma,
 * never fmuladd: ir/nf4.h defines it with one rounding) and each weight one f32 product of its
 * level (a constant table) and the scale, so the kernel equals sn_nf4_dequantize bit for bit. */
#ifdef SN_HAVE_LLVM

#include "ir/nf4.h"
#include "llvm_util.h"

/* the 16 levels as a constant global float[16] */
static LLVMValueRef level_table(sn_ll *L) {
    LLVMValueRef g = LLVMGetNamedGlobal(L->mod, "sn_nf4_levels");
    if (g) return g;
    LLVMValueRef v[16];
    for (int i = 0; i < 16; i++) v[i] = sn_ll_f32(L, sn_nf4_levels[i]);
    LLVMTypeRef t = LLVMArrayType(L->t_f32, 16);
    g = LLVMAddGlobal(L->mod, t, "sn_nf4_levels");
    LLVMSetInitializer(g, LLVMConstArray(L->t_f32, v, 16));
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    return g;
}

/* the byte at q + at (an i64), zero-extended to i32 */
static LLVMValueRef byte_at(sn_ll *L, LLVMValueRef q, LLVMValueRef at, const char *name) {
    LLVMValueRef p = LLVMBuildGEP2(L->b, L->t_i8, q, &at, 1, "");
    return LLVMBuildLoad2(L->b, L->t_i8, p, name);
}

/* the f32 at byte offset at (an i64) of q */
static LLVMValueRef f32_at(sn_ll *L, LLVMValueRef q, LLVMValueRef at, const char *name) {
    LLVMValueRef p = LLVMBuildGEP2(L->b, L->t_i8, q, &at, 1, "");
    p = LLVMBuildBitCast(L->b, p, LLVMPointerType(L->t_f32, 0), "");
    return LLVMBuildLoad2(L->b, L->t_f32, p, name);
}

sn_status sn_ll_emit_dequant(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor;
    char kn[96]; /* the contract (args y, packed) is kernel_check.c's */
    if (n->dtype != SN_F32 && n->dtype != SN_BF16)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: NF4 weights dequantized to %s: the CPU kernel "
                       "writes f32 or bf16", sn_ll_kname(k, kn, sizeof kn), sn_dtype_name(n->dtype));
    sn_nf4_layout l = sn_nf4_layout_of(sn_numel(n));
    LLVMBuilderRef b = L->b;
    sn_ll_fn_begin(L, fname);
    LLVMValueRef y = sn_ll_buf(L, 0, n->dtype, "y");
    LLVMValueRef one = sn_ll_i64(L, 1);
    LLVMValueRef q = LLVMBuildLoad2(b, LLVMPointerType(L->t_i8, 0),
                                    LLVMBuildGEP2(b, LLVMPointerType(L->t_i8, 0), L->bufs, &one, 1, ""), "q");
    LLVMValueRef levels = level_table(L), mean = f32_at(L, q, sn_ll_i64(L, 0), "mean");
    sn_ll_loop blocks, ws;
    LLVMValueRef blk = sn_ll_for(L, &blocks, L->begin, L->end, one, "b");
    LLVMValueRef group = LLVMBuildSDiv(b, blk, sn_ll_i64(L, SN_NF4_SCALE_GROUP), "g");
    LLVMValueRef step = f32_at(L, q, sn_ll_add(L, sn_ll_i64(L, l.off_steps), sn_ll_mul(L, group, sn_ll_i64(L, 4))), "step");
    LLVMValueRef code = byte_at(L, q, sn_ll_add(L, sn_ll_i64(L, l.off_scale_codes), blk), "code");
    LLVMValueRef fma[3] = {LLVMBuildSIToFP(b, code, L->t_f32, ""), step, mean}; /* int8: signed */
    LLVMValueRef scale = sn_ll_call(L, "llvm.fma", fma, 3, "scale");
    LLVMValueRef i0 = sn_ll_mul(L, blk, sn_ll_i64(L, SN_NF4_BLOCK));
    LLVMValueRef i1 = sn_ll_imin(L, sn_ll_add(L, i0, sn_ll_i64(L, SN_NF4_BLOCK)), sn_ll_i64(L, l.n), "i1");
    LLVMValueRef i = sn_ll_for(L, &ws, i0, i1, one, "i");
    LLVMValueRef byte = byte_at(L, q, sn_ll_add(L, sn_ll_i64(L, l.off_codes), LLVMBuildSDiv(b, i, sn_ll_i64(L, 2), "")), "byte");
    LLVMValueRef odd = LLVMBuildTrunc(b, LLVMBuildAnd(b, i, one, ""), L->t_i1, "odd");
    LLVMValueRef hi = LLVMBuildLShr(b, byte, LLVMConstInt(L->t_i8, 4, 0), "hi");
    LLVMValueRef lo = LLVMBuildAnd(b, byte, LLVMConstInt(L->t_i8, 15, 0), "lo");
    LLVMValueRef nib = LLVMBuildZExt(b, LLVMBuildSelect(b, odd, lo, hi, ""), L->t_i64, "nibble");
    LLVMValueRef at[2] = {sn_ll_i64(L, 0), nib};
    LLVMValueRef lp = LLVMBuildGEP2(b, LLVMArrayType(L->t_f32, 16), levels, at, 2, "");
    LLVMValueRef w = LLVMBuildFMul(b, LLVMBuildLoad2(b, L->t_f32, lp, "level"), scale, "w");
    sn_ll_store(L, y, i, w); /* bf16: rounded to nearest even */
    sn_ll_for_end(L, &ws);
    sn_ll_for_end(L, &blocks);
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
