/* llvm_dequant.c: the dequantize of NF4 weights (ir/nf4.h) on the CPU: y (the node's shape,
 * f32, bf16 or f16) from the packed bytes.
 * Convention: an item is a block of 64 weights; its scale is fma(code, step, mean) (llvm.fma,
 * never fmuladd: ir/nf4.h defines it with one rounding). A block can hold only 16 distinct
 * weights, so they are made first, in one vector: each level times the scale (one f32 product),
 * rounded once to y's dtype; then the 64 codes pick theirs by compares and selects over whole
 * vectors and the block is stored at once (a loop of a weight at a time, a table load, a
 * product and a rounding each, took ~4 ns a weight: 0.95 s of gpt2's bf16 QLoRA step at B=4
 * T=256). The short last block, when there is one, goes a weight at a time, the same formula.
 * Either way the kernel equals sn_nf4_dequantize bit for bit (then one rounding). */
#ifdef SN_HAVE_LLVM

#include "ir/nf4.h"
#include "llvm_util.h"

LLVMValueRef sn_ll_nf4_levels(sn_ll *L) {
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

/* the byte at q + at (an i64) */
static LLVMValueRef byte_at(sn_ll *L, LLVMValueRef q, LLVMValueRef at, const char *name) {
    LLVMValueRef p = LLVMBuildGEP2(L->b, L->t_i8, q, &at, 1, "");
    return LLVMBuildLoad2(L->b, L->t_i8, p, name);
}

LLVMValueRef sn_ll_nf4_f32_at(sn_ll *L, LLVMValueRef q, LLVMValueRef at, const char *name) {
    LLVMValueRef p = LLVMBuildGEP2(L->b, L->t_i8, q, &at, 1, "");
    p = LLVMBuildBitCast(L->b, p, LLVMPointerType(L->t_f32, 0), "");
    return LLVMBuildLoad2(L->b, L->t_f32, p, name);
}

LLVMValueRef sn_ll_nf4_scale(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q,
                                LLVMValueRef mean, LLVMValueRef blk) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef group = LLVMBuildUDiv(b, blk, sn_ll_i64(L, SN_NF4_SCALE_GROUP), "g");
    LLVMValueRef at = sn_ll_mul(L, group, sn_ll_i64(L, 4));
    LLVMValueRef step = sn_ll_nf4_f32_at(L, q, sn_ll_add(L, sn_ll_i64(L, l->off_steps), at), "step");
    LLVMValueRef code = byte_at(L, q, sn_ll_add(L, sn_ll_i64(L, l->off_scale_codes), blk), "code");
    LLVMValueRef fma[3] = {LLVMBuildSIToFP(b, code, L->t_f32, ""), step, mean}; /* int8: signed */
    return sn_ll_call(L, "llvm.fma", fma, 3, "scale");
}

LLVMValueRef sn_ll_nf4_level(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef levels,
                             LLVMValueRef f) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef one = sn_ll_i64(L, 1);
    LLVMValueRef half = LLVMBuildLShr(b, f, one, "");
    LLVMValueRef byte = byte_at(L, q, sn_ll_add(L, sn_ll_i64(L, l->off_codes), half), "byte");
    LLVMValueRef odd = LLVMBuildTrunc(b, LLVMBuildAnd(b, f, one, ""), L->t_i1, "odd");
    LLVMValueRef hi = LLVMBuildLShr(b, byte, LLVMConstInt(L->t_i8, 4, 0), "hi");
    LLVMValueRef lo = LLVMBuildAnd(b, byte, LLVMConstInt(L->t_i8, 15, 0), "lo");
    LLVMValueRef nib = LLVMBuildZExt(b, LLVMBuildSelect(b, odd, lo, hi, ""), L->t_i64, "nibble");
    LLVMValueRef at[2] = {sn_ll_i64(L, 0), nib};
    LLVMValueRef lp = LLVMBuildGEP2(b, LLVMArrayType(L->t_f32, 16), levels, at, 2, "");
    return LLVMBuildLoad2(b, L->t_f32, lp, "level");
}

/* scalar x in every one of n lanes */
static LLVMValueRef splat(sn_ll *L, LLVMValueRef x, unsigned n) {
    LLVMTypeRef t = LLVMVectorType(LLVMTypeOf(x), n);
    LLVMValueRef v = LLVMBuildInsertElement(L->b, LLVMGetUndef(t), x, sn_ll_i32(L, 0), "");
    LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(L->t_i32, n)); /* lane 0, n times */
    return LLVMBuildShuffleVector(L->b, v, LLVMGetUndef(t), zeros, "");
}

/* Blocks [lo, hi), all full: per block the 16 possible weights rounded to y's dtype, the 64
 * nibbles in weight order (byte i's high one, then its low one), each weight selected, one
 * vector store. */
static void full_blocks(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef y, LLVMValueRef q,
                        LLVMValueRef mean, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMBuilderRef b = L->b;
    enum { W = SN_NF4_BLOCK, BYTES = SN_NF4_BLOCK / 2 };
    LLVMValueRef lv[16], hl[W], sh4[BYTES], m15[BYTES];
    for (int j = 0; j < 16; j++) lv[j] = sn_ll_f32(L, sn_nf4_levels[j]);
    for (int i = 0; i < BYTES; i++) {
        hl[2 * i] = sn_ll_i32(L, i);             /* weight 2i: byte i's high nibble */
        hl[2 * i + 1] = sn_ll_i32(L, BYTES + i); /* weight 2i + 1: its low nibble */
        sh4[i] = LLVMConstInt(L->t_i8, 4, 0);
        m15[i] = LLVMConstInt(L->t_i8, 15, 0);
    }
    LLVMTypeRef vbytes = LLVMVectorType(L->t_i8, BYTES);
    LLVMValueRef levels = LLVMConstVector(lv, 16), interleave = LLVMConstVector(hl, W);
    sn_ll_loop blocks;
    LLVMValueRef blk = sn_ll_for(L, &blocks, lo, hi, sn_ll_i64(L, 1), "b");
    LLVMValueRef scale = splat(L, sn_ll_nf4_scale(L, l, q, mean, blk), 16);
    LLVMValueRef value = sn_ll_narrow(L, y, LLVMBuildFMul(b, levels, scale, "")); /* <16 x y's> */
    LLVMTypeRef et = LLVMGetElementType(LLVMTypeOf(value)), vw = LLVMVectorType(et, W);
    LLVMValueRef at = sn_ll_mul(L, blk, sn_ll_i64(L, BYTES));
    at = sn_ll_add(L, sn_ll_i64(L, l->off_codes), at);
    LLVMValueRef cp = LLVMBuildBitCast(b, LLVMBuildGEP2(b, L->t_i8, q, &at, 1, ""),
                                       LLVMPointerType(vbytes, 0), "");
    LLVMValueRef codes = LLVMBuildLoad2(b, vbytes, cp, "codes");
    LLVMSetAlignment(codes, 1);
    LLVMValueRef hi4 = LLVMBuildLShr(b, codes, LLVMConstVector(sh4, BYTES), "hi");
    LLVMValueRef lo4 = LLVMBuildAnd(b, codes, LLVMConstVector(m15, BYTES), "lo");
    LLVMValueRef nib = LLVMBuildShuffleVector(b, hi4, lo4, interleave, "nibbles");
    LLVMValueRef w = NULL;
    for (int j = 0; j < 16; j++) { /* w = the value of nibble j where nib == j */
        LLVMValueRef vj = splat(L, LLVMBuildExtractElement(b, value, sn_ll_i32(L, j), ""), W);
        if (!w) {
            w = vj;
            continue;
        }
        LLVMValueRef cj[W];
        for (int i = 0; i < W; i++) cj[i] = LLVMConstInt(L->t_i8, (unsigned long long)j, 0);
        LLVMValueRef is = LLVMBuildICmp(b, LLVMIntEQ, nib, LLVMConstVector(cj, W), "");
        w = LLVMBuildSelect(b, is, vj, w, "");
    }
    LLVMValueRef first = sn_ll_mul(L, blk, sn_ll_i64(L, W));
    LLVMValueRef yp = LLVMBuildBitCast(b, y, LLVMPointerType(et, 0), "");
    yp = LLVMBuildGEP2(b, et, yp, &first, 1, "");
    LLVMValueRef st = LLVMBuildStore(b, w, LLVMBuildBitCast(b, yp, LLVMPointerType(vw, 0), ""));
    LLVMSetAlignment(st, et == L->t_f32 ? 4 : 2); /* an element's */
    sn_ll_for_end(L, &blocks);
}

/* Block `last` (short: the weights [64 last, n)) a weight at a time. */
static void short_block(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef y, LLVMValueRef q,
                        LLVMValueRef mean, int64_t last) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef one = sn_ll_i64(L, 1), levels = sn_ll_nf4_levels(L);
    LLVMValueRef scale = sn_ll_nf4_scale(L, l, q, mean, sn_ll_i64(L, last));
    sn_ll_loop ws;
    LLVMValueRef i = sn_ll_for(L, &ws, sn_ll_i64(L, last * SN_NF4_BLOCK), sn_ll_i64(L, l->n), one,
                               "i");
    LLVMValueRef w = LLVMBuildFMul(b, sn_ll_nf4_level(L, l, q, levels, i), scale, "w");
    sn_ll_store(L, y, i, w); /* 16-bit: rounded to nearest even */
    sn_ll_for_end(L, &ws);
}

sn_status sn_ll_emit_dequant(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor;
    char kn[96]; /* the contract (args y, packed) is kernel_check.c's */
    if (n->dtype != SN_F32 && n->dtype != SN_BF16 && n->dtype != SN_F16)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: NF4 weights dequantized to %s: the CPU kernel "
                       "writes f32, bf16 or f16", sn_ll_kname(k, kn, sizeof kn),
                       sn_dtype_name(n->dtype));
    sn_nf4_layout l = sn_nf4_layout_of(sn_numel(n));
    int64_t full = l.n / SN_NF4_BLOCK; /* blocks of 64; a short one after them when n % 64 */
    LLVMBuilderRef b = L->b;
    sn_ll_fn_begin(L, fname);
    LLVMValueRef y = sn_ll_buf(L, 0, n->dtype, "y");
    LLVMValueRef one = sn_ll_i64(L, 1);
    LLVMTypeRef i8p = LLVMPointerType(L->t_i8, 0);
    LLVMValueRef q = LLVMBuildLoad2(b, i8p, LLVMBuildGEP2(b, i8p, L->bufs, &one, 1, ""), "q");
    LLVMValueRef mean = sn_ll_nf4_f32_at(L, q, sn_ll_i64(L, 0), "mean");
    LLVMValueRef nfull = sn_ll_i64(L, full);
    full_blocks(L, &l, y, q, mean, sn_ll_imin(L, L->begin, nfull, "lo"),
                sn_ll_imin(L, L->end, nfull, "hi"));
    if (full < l.blocks) {
        sn_ll_if last;
        sn_ll_if_begin(L, &last, LLVMBuildICmp(b, LLVMIntSGT, L->end, nfull, ""), "short");
        short_block(L, &l, y, q, mean, full);
        sn_ll_if_end(L, &last);
    }
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
