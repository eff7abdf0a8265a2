/* llvm_f8.c: the 8-bit floats in generated kernels: f32 <-> f8e4m3 / f8e5m2 codes (OCP FP8) as
 * integer arithmetic on the f32 bits (LLVM 14 has no fp8 type), and pow2_scale's value.
 * Convention: one function per direction, used by every load, store and in-register cast
 * (llvm_util.c), so all kernel kinds round alike; the rounding is ir/graph.c's sn_dtype_round
 * bit for bit: to nearest even, subnormals, saturating at +-max (infinities too), NaN a NaN. */
#ifdef SN_HAVE_LLVM

#include <math.h>
#include <string.h>

#include "llvm_util.h"

/* A format's layout: mantissa bits, exponent bias, the largest finite code and its value's f32
 * bits, the NaN code a store writes (E4M3's only one, S.1111.111; E5M2's quiet S.11111.10). */
typedef struct {
    int mant, bias;
    uint32_t max_code, max_bits, nan_code;
} f8_format;

static f8_format format_of(sn_dtype t) {
    SN_ASSERT(sn_dtype_is_f8(t));
    f8_format f = t == SN_F8E4M3 ? (f8_format){3, 7, 0x7e, 0, 0x7f} : (f8_format){2, 15, 0x7b, 0, 0x7e};
    float max = (float)sn_dtype_max(t);
    memcpy(&f.max_bits, &max, sizeof max);
    return f;
}

/* the element type of an f8 buffer: a named struct {i8} per format, so that a pointer says which
 * format its bytes hold ("%f8e4m3*" in the IR); a GEP over it steps one byte */
LLVMTypeRef sn_ll_f8_type(sn_ll *L, sn_dtype t) {
    const char *name = sn_dtype_name(t);
    SN_ASSERT(sn_dtype_is_f8(t));
    LLVMTypeRef s = LLVMGetTypeByName2(L->ctx, name);
    if (!s) {
        s = LLVMStructCreateNamed(L->ctx, name);
        LLVMStructSetBody(s, &L->t_i8, 1, 0);
    }
    return s;
}

sn_dtype sn_ll_f8_of(LLVMTypeRef elem) {
    if (LLVMGetTypeKind(elem) != LLVMStructTypeKind) return SN_DTYPE_COUNT;
    const char *name = LLVMGetStructName(elem);
    if (!name) return SN_DTYPE_COUNT;
    if (!strcmp(name, sn_dtype_name(SN_F8E4M3))) return SN_F8E4M3;
    if (!strcmp(name, sn_dtype_name(SN_F8E5M2))) return SN_F8E5M2;
    return SN_DTYPE_COUNT;
}

/* the type t (scalar) or a vector of them shaped as like */
static LLVMTypeRef shaped(LLVMValueRef like, LLVMTypeRef t) {
    LLVMTypeRef lt = LLVMTypeOf(like);
    return LLVMGetTypeKind(lt) == LLVMVectorTypeKind ? LLVMVectorType(t, LLVMGetVectorSize(lt)) : t;
}

#define IC(v) sn_ll_ic(L, u, (int32_t)(v))
#define SEL(c_, t_, f_) LLVMBuildSelect(b, (c_), (t_), (f_), "")
#define ICMP(p_, l_, r_) LLVMBuildICmp(b, (p_), (l_), (r_), "")

/* RNE of v >> sh (sh < 32, a constant or per lane): adds half an ulp less one, plus the kept
 * part's last bit, so a tie goes to the even result; no overflow, v < 2^31 - 2^sh */
static LLVMValueRef shift_rne(sn_ll *L, LLVMValueRef u, LLVMValueRef v, LLVMValueRef sh) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, v, sh, ""), IC(1), "");
    LLVMValueRef half = LLVMBuildSub(b, LLVMBuildShl(b, IC(1), LLVMBuildSub(b, sh, IC(1), ""), ""), IC(1), "");
    return LLVMBuildLShr(b, LLVMBuildAdd(b, v, LLVMBuildAdd(b, half, odd, ""), ""), sh, "");
}

LLVMValueRef sn_ll_f8_bits(sn_ll *L, LLVMValueRef x, sn_dtype t) {
    LLVMBuilderRef b = L->b;
    f8_format f = format_of(t);
    int emin = 1 - f.bias; /* the smallest normal's exponent */
    LLVMValueRef u = LLVMBuildBitCast(b, x, shaped(x, L->t_i32), "");
    LLVMValueRef a = LLVMBuildAnd(b, u, IC(0x7fffffff), "abs");
    LLVMValueRef sign = LLVMBuildLShr(b, LLVMBuildAnd(b, u, IC(0x80000000u), ""), IC(24), "sign");
    /* normal: the f32 bits rounded to `mant` mantissa bits (a carry moves into the exponent),
       the exponent rebiased from 127 to the format's */
    LLVMValueRef normal = LLVMBuildSub(b, shift_rne(L, u, a, IC(23 - f.mant)),
                                       IC((127 - f.bias) << f.mant), "normal");
    /* below 2^emin: an integer count of the subnormal step 2^(emin - mant), the significand
       (implicit bit included; f32 subnormals come out 0) shifted right by 23 + emin - mant - e,
       at most 31 (all shifted out) */
    LLVMValueRef e = LLVMBuildLShr(b, a, IC(23), "");
    LLVMValueRef sig = LLVMBuildOr(b, LLVMBuildAnd(b, a, IC(0x7fffff), ""),
                                   SEL(ICMP(LLVMIntEQ, e, IC(0)), IC(0), IC(0x800000)), "sig");
    LLVMValueRef sh = LLVMBuildSub(b, IC(23 + emin - f.mant + 127), e, "");
    sh = SEL(ICMP(LLVMIntUGT, sh, IC(31)), IC(31), sh);
    LLVMValueRef sub = shift_rne(L, u, sig, sh);
    LLVMValueRef c = SEL(ICMP(LLVMIntULT, a, IC((uint32_t)(emin + 127) << 23)), sub, normal);
    c = SEL(ICMP(LLVMIntUGT, a, IC(f.max_bits)), IC(f.max_code), c);  /* saturate (inf too) */
    c = SEL(ICMP(LLVMIntUGT, a, IC(0x7f800000u)), IC(f.nan_code), c); /* NaN */
    c = LLVMBuildOr(b, c, sign, "");
    return LLVMBuildTrunc(b, c, shaped(x, L->t_i8), sn_dtype_name(t));
}

LLVMValueRef sn_ll_f8_widen(sn_ll *L, LLVMValueRef q, sn_dtype t, const char *name) {
    LLVMBuilderRef b = L->b;
    f8_format f = format_of(t);
    LLVMValueRef u = LLVMBuildZExt(b, q, shaped(q, L->t_i32), "");
    LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildAnd(b, u, IC(0x80), ""), IC(24), "");
    LLVMValueRef em = LLVMBuildAnd(b, u, IC(0x7f), "");
    LLVMValueRef e = LLVMBuildLShr(b, em, IC(f.mant), "");
    /* normal: the fields moved into place, the exponent rebiased to 127 */
    LLVMValueRef normal = LLVMBuildAdd(b, LLVMBuildShl(b, em, IC(23 - f.mant), ""),
                                       IC((127 - f.bias) << 23), "");
    /* subnormal (and 0): m 2^(1 - bias - mant), an integer's float times a power of two:
       exact, and a normal f32 (no flush-to-zero can touch it) */
    LLVMTypeRef tf = shaped(q, L->t_f32);
    LLVMValueRef m = LLVMBuildUIToFP(b, em, tf, "");
    m = LLVMBuildFMul(b, m, sn_ll_fc(L, m, ldexpf(1, 1 - f.bias - f.mant)), "");
    LLVMValueRef bits = SEL(ICMP(LLVMIntEQ, e, IC(0)), LLVMBuildBitCast(b, m, shaped(q, L->t_i32), ""), normal);
    if (t == SN_F8E4M3) { /* S.1111.111 alone is NaN: no infinities */
        bits = SEL(ICMP(LLVMIntEQ, em, IC(0x7f)), IC(0x7fc00000), bits);
    } else { /* IEEE-like: an all-ones exponent is infinity (mantissa 0) or NaN */
        LLVMValueRef special = SEL(ICMP(LLVMIntEQ, em, IC(0x7c)), IC(0x7f800000), IC(0x7fc00000));
        bits = SEL(ICMP(LLVMIntUGE, em, IC(0x7c)), special, bits);
    }
    return LLVMBuildBitCast(b, LLVMBuildOr(b, bits, sign, ""), tf, name);
}

#undef IC
#define IC(v) sn_ll_ic(L, x, (int32_t)(v))

/* pow2_scale (ir/graph.c sn_pow2_scale_of): with |x| = mx 2^ex and f = mf 2^ef, mx and mf in
 * [0.5, 1) (frexp), s = 2^k, k = ef - ex - (mx > mf), clamped to [-126, 127]; 1 for 0, an
 * infinity or a NaN. On the bits: ex from the exponent field (f32 subnormals normalised by
 * their leading zeros), and mx > mf compared as mantissa fields: x's (23 bits after the
 * leading one) against the largest integer T with T <= (2 mf - 1) 2^23. */
LLVMValueRef sn_ll_pow2_scale(sn_ll *L, LLVMValueRef x, double f, const char *name) {
    LLVMBuilderRef b = L->b;
    int ef;
    double mf = frexp(f, &ef);
    int32_t T = (int32_t)floor((2 * mf - 1) * 0x1p23);
    LLVMValueRef u = LLVMBuildBitCast(b, x, shaped(x, L->t_i32), "");
    LLVMValueRef a = LLVMBuildAnd(b, u, sn_ll_ic(L, x, 0x7fffffff), "abs");
    LLVMValueRef e = LLVMBuildLShr(b, a, IC(23), "");
    /* a subnormal's leading one at bit p = 31 - lz: |x| = 1.m 2^(p - 149), so ex = p - 148 and
       its mantissa field is a shifted left by 23 - p (= lz - 8) */
    LLVMValueRef args[2] = {a, LLVMConstInt(L->t_i1, 0, 0)};
    LLVMValueRef lz = sn_ll_call(L, "llvm.ctlz", args, 2, "lz");
    LLVMValueRef is_sub = ICMP(LLVMIntEQ, e, IC(0));
    LLVMValueRef ex = SEL(is_sub, LLVMBuildSub(b, IC(31 - 148), lz, ""), LLVMBuildSub(b, e, IC(126), ""));
    LLVMValueRef sub_sh = SEL(is_sub, LLVMBuildSub(b, lz, IC(8), ""), IC(0)); /* 0 for normals */
    LLVMValueRef m = LLVMBuildAnd(b, LLVMBuildShl(b, a, sub_sh, ""), IC(0x7fffff), "m");
    LLVMValueRef k = LLVMBuildSub(b, IC(ef), ex, "");
    k = LLVMBuildSub(b, k, LLVMBuildZExt(b, ICMP(LLVMIntSGT, m, IC(T)), shaped(x, L->t_i32), ""), "k");
    k = SEL(ICMP(LLVMIntSLT, k, IC(-126)), IC(-126), k);
    k = SEL(ICMP(LLVMIntSGT, k, IC(127)), IC(127), k);
    LLVMValueRef s = LLVMBuildShl(b, LLVMBuildAdd(b, k, IC(127), ""), IC(23), "");
    LLVMValueRef special = LLVMBuildOr(b, ICMP(LLVMIntEQ, a, IC(0)), ICMP(LLVMIntEQ, e, IC(255)), "");
    s = SEL(special, IC(127 << 23), s); /* 1.0 */
    return LLVMBuildBitCast(b, s, LLVMTypeOf(x), name);
}

#undef IC
#undef SEL
#undef ICMP

#endif /* SN_HAVE_LLVM */
