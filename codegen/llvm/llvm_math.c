/* llvm_math.c: the arithmetic helpers of llvm_util.h on f32 scalars or vectors: intrinsic
 * calls, inline exp/log/tanh (Cephes polynomials), sigmoid, maxima and horizontal reductions.
 * Convention: a helper's result is a scalar or a vector as its argument is. */
#ifdef SN_HAVE_LLVM

#include <math.h>
#include <string.h>

#include "llvm_util.h"

LLVMValueRef sn_ll_call(sn_ll *L, const char *intrinsic, LLVMValueRef *args, int n,
                        const char *name) {
    LLVMTypeRef t = LLVMTypeOf(args[0]);
    return sn_ll_call_typed(L, intrinsic, &t, 1, args, n, name);
}

static LLVMValueRef call1(sn_ll *L, const char *intrinsic, LLVMValueRef x, const char *name) {
    return sn_ll_call(L, intrinsic, &x, 1, name);
}

LLVMValueRef sn_ll_fma(sn_ll *L, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
    LLVMValueRef args[3] = {a, b, c};
    return sn_ll_call(L, "llvm.fmuladd", args, 3, "");
}

LLVMValueRef sn_ll_sqrt(sn_ll *L, LLVMValueRef x, const char *name) {
    return call1(L, "llvm.sqrt", x, name);
}

#define FC(v) sn_ll_fc(L, x, (float)(v))
#define IC(v) sn_ll_ic(L, x, (v))
#define SEL(c_, t_, f_) LLVMBuildSelect(L->b, (c_), (t_), (f_), "")
#define FCMP(p_, l_, r_) LLVMBuildFCmp(L->b, (p_), (l_), (r_), "")

static LLVMTypeRef int_type_like(sn_ll *L, LLVMValueRef x) {
    return sn_ll_is_vec(x) ? L->t_vi32 : L->t_i32;
}

/* Evaluates c[0] + r (c[1] + r (c[2] + ..)) written highest degree first: c[n-1] ... c[0]. */
static LLVMValueRef horner(sn_ll *L, LLVMValueRef x, LLVMValueRef r, const double *c, int n) {
    LLVMValueRef p = FC(c[0]);
    for (int i = 1; i < n; i++) p = sn_ll_fma(L, p, r, FC(c[i]));
    return p;
}

/* e^x: n = rint(x log2 e), r = x - n ln2 (in two parts), e^r by a degree-7 polynomial, then
 * times 2^n as two powers of two (so results down to the subnormals round once). x is clamped
 * to [-104, 89], beyond which e^x is 0 or inf in f32; NaN passes through. */
LLVMValueRef sn_ll_exp(sn_ll *L, LLVMValueRef x, const char *name) {
    static const double P[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                               4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
    LLVMValueRef nan = FCMP(LLVMRealUNO, x, x);
    LLVMValueRef xc = SEL(FCMP(LLVMRealOGT, x, FC(89.0)), FC(89.0), x);
    xc = SEL(FCMP(LLVMRealOLT, xc, FC(-104.0)), FC(-104.0), xc);
    xc = SEL(nan, FC(0), xc);
    LLVMValueRef nf = call1(L, "llvm.rint", LLVMBuildFMul(L->b, xc, FC(1.44269504088896341), ""), "");
    LLVMValueRef r = sn_ll_fma(L, nf, FC(-0.693359375), xc);
    r = sn_ll_fma(L, nf, FC(2.12194440e-4), r);
    LLVMValueRef p = horner(L, x, r, P, 6);
    LLVMValueRef y = LLVMBuildFAdd(L->b, sn_ll_fma(L, p, LLVMBuildFMul(L->b, r, r, ""), r), FC(1), "");
    LLVMValueRef n = LLVMBuildFPToSI(L->b, nf, int_type_like(L, x), "");
    LLVMValueRef n1 = LLVMBuildAShr(L->b, n, IC(1), "");
    LLVMValueRef n2 = LLVMBuildSub(L->b, n, n1, "");
    LLVMTypeRef ft = LLVMTypeOf(x);
    LLVMValueRef s1 = LLVMBuildBitCast(L->b, LLVMBuildShl(L->b, LLVMBuildAdd(L->b, n1, IC(127), ""), IC(23), ""), ft, "");
    LLVMValueRef s2 = LLVMBuildBitCast(L->b, LLVMBuildShl(L->b, LLVMBuildAdd(L->b, n2, IC(127), ""), IC(23), ""), ft, "");
    LLVMValueRef res = LLVMBuildFMul(L->b, LLVMBuildFMul(L->b, y, s1, ""), s2, "");
    return LLVMBuildSelect(L->b, nan, x, res, name);
}

/* ln x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln x = ln m + e ln 2 with ln(1+f) by a
 * degree-9 polynomial; subnormals are scaled by 2^23 first. 0 -> -inf, x < 0 -> NaN. */
LLVMValueRef sn_ll_log(sn_ll *L, LLVMValueRef x, const char *name) {
    static const double P[] = {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1,
                               -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1,
                               2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1};
    LLVMTypeRef it = int_type_like(L, x), ft = LLVMTypeOf(x);
    LLVMValueRef tiny = FCMP(LLVMRealOLT, x, FC(1.17549435e-38));
    LLVMValueRef xs = SEL(tiny, LLVMBuildFMul(L->b, x, FC(8388608.0), ""), x);
    LLVMValueRef bits = LLVMBuildBitCast(L->b, xs, it, "");
    LLVMValueRef e = LLVMBuildSub(L->b, LLVMBuildLShr(L->b, bits, IC(23), ""), IC(126), "");
    e = LLVMBuildSub(L->b, e, SEL(tiny, IC(23), IC(0)), "");
    LLVMValueRef mb = LLVMBuildOr(L->b, LLVMBuildAnd(L->b, bits, IC(0x007fffff), ""), IC(0x3f000000), "");
    LLVMValueRef m = LLVMBuildBitCast(L->b, mb, ft, ""); /* [0.5, 1) */
    LLVMValueRef low = FCMP(LLVMRealOLT, m, FC(0.707106781186547524));
    e = LLVMBuildSub(L->b, e, SEL(low, IC(1), IC(0)), "");
    m = LLVMBuildFSub(L->b, SEL(low, LLVMBuildFAdd(L->b, m, m, ""), m), FC(1), "");
    LLVMValueRef ef = LLVMBuildSIToFP(L->b, e, ft, "");
    LLVMValueRef z = LLVMBuildFMul(L->b, m, m, "");
    LLVMValueRef y = LLVMBuildFMul(L->b, LLVMBuildFMul(L->b, horner(L, x, m, P, 9), m, ""), z, "");
    y = sn_ll_fma(L, ef, FC(-2.12194440e-4), y);
    y = sn_ll_fma(L, z, FC(-0.5), y);
    LLVMValueRef r = sn_ll_fma(L, ef, FC(0.693359375), LLVMBuildFAdd(L->b, m, y, ""));
    r = SEL(FCMP(LLVMRealOEQ, x, FC(INFINITY)), FC(INFINITY), r);
    r = SEL(FCMP(LLVMRealOEQ, x, FC(0)), FC(-INFINITY), r);
    r = SEL(FCMP(LLVMRealOLT, x, FC(0)), FC(NAN), r);
    return LLVMBuildSelect(L->b, FCMP(LLVMRealUNO, x, x), x, r, name);
}

/* tanh x: an odd polynomial below |x| = 0.625, else 1 - 2 / (e^{2|x|} + 1) with x's sign. */
LLVMValueRef sn_ll_tanh(sn_ll *L, LLVMValueRef x, const char *name) {
    static const double P[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                               1.33314422036E-1, -3.33332819422E-1};
    LLVMValueRef ax = call1(L, "llvm.fabs", x, "");
    LLVMValueRef z = LLVMBuildFMul(L->b, x, x, "");
    LLVMValueRef small = sn_ll_fma(L, LLVMBuildFMul(L->b, horner(L, x, z, P, 5), z, ""), x, x);
    small = LLVMBuildSelect(L->b, LLVMBuildFCmp(L->b, LLVMRealOEQ, x, sn_ll_fc(L, x, 0), ""), x, small, ""); /* -0 */
    LLVMValueRef e = sn_ll_exp(L, LLVMBuildFAdd(L->b, ax, ax, ""), "");
    LLVMValueRef big = LLVMBuildFSub(L->b, FC(1), LLVMBuildFDiv(L->b, FC(2), LLVMBuildFAdd(L->b, e, FC(1), ""), ""), "");
    LLVMValueRef args[2] = {big, x};
    big = sn_ll_call(L, "llvm.copysign", args, 2, "");
    return LLVMBuildSelect(L->b, FCMP(LLVMRealOLT, ax, FC(0.625)), small, big, name);
}

LLVMValueRef sn_ll_sigmoid(sn_ll *L, LLVMValueRef x, const char *name) {
    LLVMValueRef e = sn_ll_exp(L, LLVMBuildFNeg(L->b, x, ""), "");
    return LLVMBuildFDiv(L->b, FC(1), LLVMBuildFAdd(L->b, e, FC(1), ""), name);
}

LLVMValueRef sn_ll_max_nan(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name) {
    LLVMValueRef take = LLVMBuildOr(L->b, FCMP(LLVMRealOGT, b, a), FCMP(LLVMRealUNO, b, b), "");
    return LLVMBuildSelect(L->b, take, b, a, name);
}

LLVMValueRef sn_ll_maxnum(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name) {
    LLVMValueRef args[2] = {a, b};
    return sn_ll_call(L, "llvm.maxnum", args, 2, name);
}

#undef FC
#undef IC
#undef SEL
#undef FCMP

typedef enum { H_SUM, H_MAX_NAN, H_MAXNUM } hop;

static LLVMValueRef hreduce(sn_ll *L, LLVMValueRef v, hop op, const char *name) {
    for (int w = L->lanes / 2; w >= 1; w /= 2) {
        LLVMValueRef idx[16];
        for (int i = 0; i < L->lanes; i++) idx[i] = sn_ll_i32(L, i < w ? i + w : i);
        LLVMValueRef hi = LLVMBuildShuffleVector(L->b, v, LLVMGetUndef(L->t_vf),
                                                 LLVMConstVector(idx, (unsigned)L->lanes), "");
        v = op == H_SUM ? LLVMBuildFAdd(L->b, v, hi, "")
            : op == H_MAX_NAN ? sn_ll_max_nan(L, v, hi, "") : sn_ll_maxnum(L, v, hi, "");
    }
    return LLVMBuildExtractElement(L->b, v, sn_ll_i32(L, 0), name);
}

LLVMValueRef sn_ll_hsum(sn_ll *L, LLVMValueRef v, const char *name) { return hreduce(L, v, H_SUM, name); }
LLVMValueRef sn_ll_hmax_nan(sn_ll *L, LLVMValueRef v, const char *name) { return hreduce(L, v, H_MAX_NAN, name); }
LLVMValueRef sn_ll_hmaxnum(sn_ll *L, LLVMValueRef v, const char *name) { return hreduce(L, v, H_MAXNUM, name); }

void sn_ll_acc_add(sn_ll *L, LLVMValueRef var, LLVMValueRef v, LLVMValueRef mask) {
    if (mask) v = LLVMBuildSelect(L->b, mask, v, sn_ll_vf32(L, 0), "");
    sn_ll_set(L, var, LLVMBuildFAdd(L->b, sn_ll_get(L, var, ""), v, ""));
}

void sn_ll_acc_maxnum(sn_ll *L, LLVMValueRef var, LLVMValueRef v, LLVMValueRef mask) {
    if (mask) v = LLVMBuildSelect(L->b, mask, v, sn_ll_vf32(L, -INFINITY), "");
    sn_ll_set(L, var, sn_ll_maxnum(L, sn_ll_get(L, var, ""), v, ""));
}

#endif /* SN_HAVE_LLVM */
