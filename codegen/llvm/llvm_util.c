/* llvm_util.c: the IR-building helpers of llvm_util.h: the kernel function and its buffers,
 * loops, masked vector memory access (the arithmetic is llvm_math.c's).
 * Convention: every helper names the values it makes, so the IR reads like the kernel. */
#ifdef SN_HAVE_LLVM

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llvm_util.h"

/* ---- setup ---- */

void sn_ll_init(sn_ll *L, LLVMModuleRef mod, int lanes, const char *cpu, const char *features) {
    SN_ASSERT(lanes == 4 || lanes == 8 || lanes == 16);
    memset(L, 0, sizeof *L);
    L->mod = mod;
    L->ctx = LLVMGetModuleContext(mod);
    L->b = LLVMCreateBuilderInContext(L->ctx);
    L->top = LLVMCreateBuilderInContext(L->ctx);
    L->lanes = lanes;
    L->cpu = cpu;
    L->features = features;
    L->t_void = LLVMVoidTypeInContext(L->ctx);
    L->t_i1 = LLVMInt1TypeInContext(L->ctx);
    L->t_i8 = LLVMInt8TypeInContext(L->ctx);
    L->t_i32 = LLVMInt32TypeInContext(L->ctx);
    L->t_i64 = LLVMInt64TypeInContext(L->ctx);
    L->t_f32 = LLVMFloatTypeInContext(L->ctx);
    L->t_f64 = LLVMDoubleTypeInContext(L->ctx);
    L->t_vf = LLVMVectorType(L->t_f32, (unsigned)lanes);
    L->t_vi32 = LLVMVectorType(L->t_i32, (unsigned)lanes);
    L->t_vi64 = LLVMVectorType(L->t_i64, (unsigned)lanes);
    L->t_vmask = LLVMVectorType(L->t_i1, (unsigned)lanes);
}

void sn_ll_done(sn_ll *L) {
    if (L->b) LLVMDisposeBuilder(L->b);
    if (L->top) LLVMDisposeBuilder(L->top);
    L->b = L->top = NULL;
}

static void add_str_attr(sn_ll *L, const char *k, const char *v) {
    LLVMAttributeRef a = LLVMCreateStringAttribute(L->ctx, k, (unsigned)strlen(k), v, (unsigned)strlen(v));
    LLVMAddAttributeAtIndex(L->fn, LLVMAttributeFunctionIndex, a);
}

static void add_enum_attr(sn_ll *L, unsigned index, const char *k) {
    unsigned kind = LLVMGetEnumAttributeKindForName(k, strlen(k));
    SN_ASSERT(kind != 0);
    LLVMAddAttributeAtIndex(L->fn, index, LLVMCreateEnumAttribute(L->ctx, kind, 0));
}

void sn_ll_fn_begin(sn_ll *L, const char *name) {
    LLVMTypeRef params[3] = {LLVMPointerType(LLVMPointerType(L->t_i8, 0), 0), L->t_i64, L->t_i64};
    LLVMTypeRef fty = LLVMFunctionType(L->t_void, params, 3, 0);
    L->fn = LLVMAddFunction(L->mod, name, fty);
    add_enum_attr(L, LLVMAttributeFunctionIndex, "nounwind");
    add_enum_attr(L, 1, "noalias"); /* bufs: data pointers are loaded from it, never based on it */
    add_enum_attr(L, 1, "nocapture");
    add_enum_attr(L, 1, "readonly");
    add_str_attr(L, "prefer-vector-width", L->lanes == 16 ? "512" : L->lanes == 8 ? "256" : "128");
    if (L->cpu) add_str_attr(L, "target-cpu", L->cpu);
    if (L->features) add_str_attr(L, "target-features", L->features);
    L->bufs = LLVMGetParam(L->fn, 0);
    L->begin = LLVMGetParam(L->fn, 1);
    L->end = LLVMGetParam(L->fn, 2);
    LLVMSetValueName2(L->bufs, "bufs", 4);
    LLVMSetValueName2(L->begin, "begin", 5);
    LLVMSetValueName2(L->end, "end", 3);
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(L->ctx, L->fn, "entry");
    LLVMPositionBuilderAtEnd(L->b, entry);
    LLVMPositionBuilderAtEnd(L->top, entry);
}

void sn_ll_fn_end(sn_ll *L) { LLVMBuildRetVoid(L->b); }

LLVMBasicBlockRef sn_ll_block(sn_ll *L, const char *name) {
    return LLVMAppendBasicBlockInContext(L->ctx, L->fn, name);
}

LLVMValueRef sn_ll_buf(sn_ll *L, int i, sn_dtype t, const char *name) {
    LLVMTypeRef i8p = LLVMPointerType(L->t_i8, 0);
    LLVMValueRef idx = sn_ll_i64(L, i);
    LLVMValueRef slot = LLVMBuildGEP2(L->b, i8p, L->bufs, &idx, 1, "");
    LLVMValueRef raw = LLVMBuildLoad2(L->b, i8p, slot, "");
    LLVMTypeRef et = t == SN_I32 ? L->t_i32 : t == SN_BF16 ? LLVMBFloatTypeInContext(L->ctx)
                   : t == SN_F16 ? LLVMHalfTypeInContext(L->ctx)
                   : sn_dtype_is_f8(t) ? sn_ll_f8_type(L, t) : L->t_f32;
    SN_ASSERT(t == SN_I32 || t == SN_F32 || t == SN_BF16 || t == SN_F16 || sn_dtype_is_f8(t));
    return LLVMBuildBitCast(L->b, raw, LLVMPointerType(et, 0), name);
}

/* ---- constants ---- */

LLVMValueRef sn_ll_i32(sn_ll *L, int32_t v) { return LLVMConstInt(L->t_i32, (unsigned long long)(int64_t)v, 1); }
LLVMValueRef sn_ll_i64(sn_ll *L, int64_t v) { return LLVMConstInt(L->t_i64, (unsigned long long)v, 1); }
LLVMValueRef sn_ll_f32(sn_ll *L, float v) { return LLVMConstReal(L->t_f32, (double)v); }

static LLVMValueRef const_splat(sn_ll *L, LLVMValueRef c) {
    LLVMValueRef e[16];
    for (int i = 0; i < L->lanes; i++) e[i] = c;
    return LLVMConstVector(e, (unsigned)L->lanes);
}

LLVMValueRef sn_ll_vf32(sn_ll *L, float v) { return const_splat(L, sn_ll_f32(L, v)); }

bool sn_ll_is_vec(LLVMValueRef x) { return LLVMGetTypeKind(LLVMTypeOf(x)) == LLVMVectorTypeKind; }

LLVMValueRef sn_ll_fc(sn_ll *L, LLVMValueRef like, float v) {
    return sn_ll_is_vec(like) ? sn_ll_vf32(L, v) : sn_ll_f32(L, v);
}

LLVMValueRef sn_ll_ic(sn_ll *L, LLVMValueRef like, int32_t v) {
    return sn_ll_is_vec(like) ? const_splat(L, sn_ll_i32(L, v)) : sn_ll_i32(L, v);
}

LLVMValueRef sn_ll_splat(sn_ll *L, LLVMValueRef s, const char *name) {
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)L->lanes);
    LLVMValueRef one = LLVMBuildInsertElement(L->b, LLVMGetUndef(vt), s, sn_ll_i32(L, 0), "");
    return LLVMBuildShuffleVector(L->b, one, LLVMGetUndef(vt), LLVMConstNull(L->t_vi32), name);
}

LLVMValueRef sn_ll_lane_ids(sn_ll *L) {
    LLVMValueRef e[16];
    for (int i = 0; i < L->lanes; i++) e[i] = sn_ll_i64(L, i);
    return LLVMConstVector(e, (unsigned)L->lanes);
}

LLVMValueRef sn_ll_first_lanes(sn_ll *L, LLVMValueRef n) {
    return LLVMBuildICmp(L->b, LLVMIntSLT, sn_ll_lane_ids(L), sn_ll_splat(L, n, ""), "lanes");
}

LLVMValueRef sn_ll_const_first_lanes(sn_ll *L, int n) {
    LLVMValueRef e[16];
    for (int i = 0; i < L->lanes; i++) e[i] = LLVMConstInt(L->t_i1, i < n, 0);
    return LLVMConstVector(e, (unsigned)L->lanes);
}

LLVMValueRef sn_ll_and_mask(sn_ll *L, LLVMValueRef a, LLVMValueRef b) {
    if (!a) return b;
    if (!b) return a;
    return LLVMBuildAnd(L->b, a, b, "mask");
}

static bool is_const(LLVMValueRef v, int64_t c) {
    return LLVMIsAConstantInt(v) && LLVMConstIntGetSExtValue(v) == c;
}

/* a + b and a * b, skipping + 0 and * 1 so the IR stays readable */
LLVMValueRef sn_ll_add(sn_ll *L, LLVMValueRef a, LLVMValueRef b) {
    if (is_const(a, 0)) return b;
    if (is_const(b, 0)) return a;
    return LLVMBuildAdd(L->b, a, b, "");
}
LLVMValueRef sn_ll_mul(sn_ll *L, LLVMValueRef a, LLVMValueRef b) {
    if (is_const(a, 1)) return b;
    if (is_const(b, 1)) return a;
    return LLVMBuildMul(L->b, a, b, "");
}

LLVMValueRef sn_ll_imin(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name) {
    return LLVMBuildSelect(L->b, LLVMBuildICmp(L->b, LLVMIntSLT, a, b, ""), a, b, name);
}
LLVMValueRef sn_ll_imax(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name) {
    return LLVMBuildSelect(L->b, LLVMBuildICmp(L->b, LLVMIntSGT, a, b, ""), a, b, name);
}

/* ---- variables and control flow ---- */

LLVMValueRef sn_ll_var(sn_ll *L, LLVMTypeRef t, LLVMValueRef init, const char *name) {
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(L->fn);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first) LLVMPositionBuilderBefore(L->top, first);
    else LLVMPositionBuilderAtEnd(L->top, entry);
    LLVMValueRef v = LLVMBuildAlloca(L->top, t, name);
    if (init) LLVMBuildStore(L->b, init, v);
    return v;
}

LLVMValueRef sn_ll_get(sn_ll *L, LLVMValueRef var, const char *name) {
    return LLVMBuildLoad2(L->b, LLVMGetAllocatedType(var), var, name);
}

void sn_ll_set(sn_ll *L, LLVMValueRef var, LLVMValueRef v) { LLVMBuildStore(L->b, v, var); }

static LLVMBasicBlockRef named_block(sn_ll *L, const char *base, const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "%s.%s", base, suffix);
    return sn_ll_block(L, name);
}

LLVMValueRef sn_ll_for(sn_ll *L, sn_ll_loop *lp, LLVMValueRef lo, LLVMValueRef hi,
                       LLVMValueRef step, const char *name) {
    lp->pre = LLVMGetInsertBlock(L->b);
    lp->head = named_block(L, name, "head");
    lp->body = named_block(L, name, "body");
    lp->exit = named_block(L, name, "done");
    lp->step = step;
    lp->hi = hi;
    LLVMBuildBr(L->b, lp->head);
    LLVMPositionBuilderAtEnd(L->b, lp->head);
    lp->i = LLVMBuildPhi(L->b, L->t_i64, name);
    LLVMAddIncoming(lp->i, &lo, &lp->pre, 1);
    LLVMValueRef more = LLVMBuildICmp(L->b, LLVMIntSLT, lp->i, hi, "");
    LLVMBuildCondBr(L->b, more, lp->body, lp->exit);
    LLVMPositionBuilderAtEnd(L->b, lp->body);
    return lp->i;
}

void sn_ll_for_end(sn_ll *L, sn_ll_loop *lp) {
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(L->b);
    LLVMValueRef next = LLVMBuildAdd(L->b, lp->i, lp->step, "");
    LLVMBuildBr(L->b, lp->head);
    LLVMAddIncoming(lp->i, &next, &latch, 1);
    LLVMMoveBasicBlockAfter(lp->exit, latch);
    LLVMPositionBuilderAtEnd(L->b, lp->exit);
}

void sn_ll_if_begin(sn_ll *L, sn_ll_if *f, LLVMValueRef cond, const char *name) {
    LLVMBasicBlockRef then = named_block(L, name, "then");
    f->join = named_block(L, name, "join");
    f->in_else = false;
    f->br = LLVMBuildCondBr(L->b, cond, then, f->join);
    LLVMPositionBuilderAtEnd(L->b, then);
}

void sn_ll_if_else(sn_ll *L, sn_ll_if *f) {
    SN_ASSERT(!f->in_else);
    LLVMBasicBlockRef other = LLVMInsertBasicBlockInContext(L->ctx, f->join, "else");
    LLVMSetSuccessor(f->br, 1, other);
    LLVMBuildBr(L->b, f->join);
    LLVMPositionBuilderAtEnd(L->b, other);
    f->in_else = true;
}

void sn_ll_if_end(sn_ll *L, sn_ll_if *f) {
    LLVMBasicBlockRef last = LLVMGetInsertBlock(L->b);
    LLVMBuildBr(L->b, f->join);
    LLVMMoveBasicBlockAfter(f->join, last);
    LLVMPositionBuilderAtEnd(L->b, f->join);
}

void sn_ll_vloop_static(sn_ll *L, sn_ll_vloop *v, int64_t n, const char *name) {
    (void)L;
    memset(v, 0, sizeof *v);
    v->n = n;
    v->name = name;
}

void sn_ll_vloop_range(sn_ll *L, sn_ll_vloop *v, LLVMValueRef lo, LLVMValueRef hi,
                       const char *name) {
    (void)L;
    memset(v, 0, sizeof *v);
    v->dynamic = true;
    v->lo = lo;
    v->hi = hi;
    v->name = name;
}

/* Sets up the tail (phase 2) after the full-vector loop, or finishes. */
static bool vloop_tail(sn_ll *L, sn_ll_vloop *v) {
    int W = L->lanes;
    if (!v->dynamic) {
        int rem = (int)(v->n % W);
        if (rem == 0) {
            v->phase = 3;
            return false;
        }
        v->j = sn_ll_i64(L, v->n - rem);
        v->mask = sn_ll_const_first_lanes(L, rem);
    } else {
        LLVMValueRef jt = v->loop.i; /* the first index the full-vector loop did not take */
        char name[64];
        snprintf(name, sizeof name, "%s.tail", v->name);
        sn_ll_if_begin(L, &v->tail, LLVMBuildICmp(L->b, LLVMIntSLT, jt, v->hi, ""), name);
        v->j = jt;
        v->mask = sn_ll_first_lanes(L, LLVMBuildSub(L->b, v->hi, jt, "left"));
    }
    v->phase = 2;
    return true;
}

bool sn_ll_vloop_next(sn_ll *L, sn_ll_vloop *v) {
    int W = L->lanes;
    switch (v->phase) {
    case 0:
        v->mask = NULL;
        if (v->dynamic) {
            LLVMValueRef last = LLVMBuildSub(L->b, v->hi, sn_ll_i64(L, W - 1), "");
            v->j = sn_ll_for(L, &v->loop, v->lo, last, sn_ll_i64(L, W), v->name);
        } else {
            int64_t full = v->n / W * W;
            if (full == 0) return vloop_tail(L, v);
            v->j = sn_ll_for(L, &v->loop, sn_ll_i64(L, 0), sn_ll_i64(L, full), sn_ll_i64(L, W), v->name);
        }
        v->phase = 1;
        return true;
    case 1:
        sn_ll_for_end(L, &v->loop);
        return vloop_tail(L, v);
    case 2:
        if (v->dynamic) sn_ll_if_end(L, &v->tail);
        v->phase = 3;
        return false;
    default: SN_ASSERT(0);
    }
}

/* ---- memory ---- */

/* Element pointers are typed by the buffer's dtype (sn_ll_buf): float*, i32*, and bfloat* or
 * half* for 16-bit floats, which are loaded as i16 / half and widened to f32 in registers, and
 * rounded to nearest even when stored. bf16 <-> f32 is integer arithmetic on the bits (exact
 * for the widening; the rounding matches sn_dtype_round, NaN stays a quiet NaN), which any x86
 * vector unit runs; f16 uses LLVM's half conversions (F16C / AVX-512 instructions). The 8-bit
 * floats are %f8e4m3* / %f8e5m2*, loaded as i8 codes and converted by llvm_f8.c. */

static LLVMTypeRef elem_type(LLVMValueRef p) { return LLVMGetElementType(LLVMTypeOf(p)); }
static bool is_i32_ptr(sn_ll *L, LLVMValueRef p) { return elem_type(p) == L->t_i32; }
static bool is_bf16_ptr(LLVMValueRef p) { return LLVMGetTypeKind(elem_type(p)) == LLVMBFloatTypeKind; }
static bool is_f16_ptr(LLVMValueRef p) { return LLVMGetTypeKind(elem_type(p)) == LLVMHalfTypeKind; }
static sn_dtype f8_of_ptr(LLVMValueRef p) { return sn_ll_f8_of(elem_type(p)); } /* or COUNT */
static bool is_f8_ptr(LLVMValueRef p) { return f8_of_ptr(p) != SN_DTYPE_COUNT; }

static LLVMValueRef elem_ptr(sn_ll *L, LLVMValueRef p, LLVMValueRef idx) {
    return LLVMBuildGEP2(L->b, elem_type(p), p, &idx, 1, "");
}

/* The type values of buffer p are loaded as (scalar, or a vector of L->lanes with vec). */
static LLVMTypeRef mem_type(sn_ll *L, LLVMValueRef p, bool vec) {
    LLVMTypeRef t = is_i32_ptr(L, p) ? L->t_i32 : is_bf16_ptr(p) ? LLVMInt16TypeInContext(L->ctx)
                  : is_f16_ptr(p) ? LLVMHalfTypeInContext(L->ctx) : is_f8_ptr(p) ? L->t_i8 : L->t_f32;
    return vec ? LLVMVectorType(t, (unsigned)L->lanes) : t;
}

static LLVMTypeRef like_type(LLVMValueRef like, LLVMTypeRef scalar) {
    LLVMTypeRef t = LLVMTypeOf(like);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(scalar, LLVMGetVectorSize(t)) : scalar;
}

/* A loaded value (i32, i16 bf16 bits, half, i8 f8 codes or f32; scalar or vector) as f32. */
static LLVMValueRef widen(sn_ll *L, LLVMValueRef p, LLVMValueRef v, const char *name) {
    if (is_i32_ptr(L, p)) return LLVMBuildSIToFP(L->b, v, like_type(v, L->t_f32), name);
    if (is_f16_ptr(p)) return LLVMBuildFPExt(L->b, v, like_type(v, L->t_f32), name);
    if (is_f8_ptr(p)) return sn_ll_f8_widen(L, v, f8_of_ptr(p), name);
    if (!is_bf16_ptr(p)) return v;
    LLVMValueRef w = LLVMBuildZExt(L->b, v, like_type(v, L->t_i32), "");
    w = LLVMBuildShl(L->b, w, sn_ll_ic(L, w, 16), "");
    return LLVMBuildBitCast(L->b, w, like_type(v, L->t_f32), name);
}

/* f32 bits of x rounded to bf16 (nearest, ties to even), as i16 (scalar or vector). */
static LLVMValueRef bf16_bits(sn_ll *L, LLVMValueRef x) {
    LLVMTypeRef ti = like_type(x, L->t_i32);
    LLVMValueRef u = LLVMBuildBitCast(L->b, x, ti, "");
    LLVMValueRef lsb = LLVMBuildAnd(L->b, LLVMBuildLShr(L->b, u, sn_ll_ic(L, u, 16), ""), sn_ll_ic(L, u, 1), "");
    LLVMValueRef r = LLVMBuildAdd(L->b, u, LLVMBuildAdd(L->b, lsb, sn_ll_ic(L, u, 0x7fff), ""), "");
    r = LLVMBuildLShr(L->b, r, sn_ll_ic(L, u, 16), "");
    LLVMValueRef nan = LLVMBuildFCmp(L->b, LLVMRealUNO, x, x, "");
    r = LLVMBuildSelect(L->b, nan, sn_ll_ic(L, u, 0x7fc0), r, "");
    return LLVMBuildTrunc(L->b, r, like_type(x, LLVMInt16TypeInContext(L->ctx)), "bf16");
}

/* An f32 value (scalar or vector) in buffer p's memory type. */
static LLVMValueRef narrow(sn_ll *L, LLVMValueRef p, LLVMValueRef v) {
    if (is_i32_ptr(L, p)) return LLVMBuildFPToSI(L->b, v, like_type(v, L->t_i32), "");
    if (is_f16_ptr(p)) return LLVMBuildFPTrunc(L->b, v, like_type(v, LLVMHalfTypeInContext(L->ctx)), "f16");
    if (is_bf16_ptr(p)) return bf16_bits(L, v);
    if (is_f8_ptr(p)) return sn_ll_f8_bits(L, v, f8_of_ptr(p));
    return v;
}

LLVMValueRef sn_ll_round_to(sn_ll *L, LLVMValueRef v, sn_dtype t) {
    if (t == SN_F16) {
        LLVMValueRef h = LLVMBuildFPTrunc(L->b, v, like_type(v, LLVMHalfTypeInContext(L->ctx)), "");
        return LLVMBuildFPExt(L->b, h, LLVMTypeOf(v), "");
    }
    if (sn_dtype_is_f8(t)) return sn_ll_f8_widen(L, sn_ll_f8_bits(L, v, t), t, "");
    if (t != SN_BF16) return v;
    LLVMValueRef w = LLVMBuildZExt(L->b, bf16_bits(L, v), like_type(v, L->t_i32), "");
    return LLVMBuildBitCast(L->b, LLVMBuildShl(L->b, w, sn_ll_ic(L, w, 16), ""), LLVMTypeOf(v), "");
}

/* &p[idx] as a pointer to what is loaded (i16 for bf16, i8 for f8), scalar or vector of lanes. */
static LLVMValueRef mem_ptr(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, bool vec) {
    return LLVMBuildBitCast(L->b, elem_ptr(L, p, idx), LLVMPointerType(mem_type(L, p, vec), 0), "");
}

/* the alignment of one element */
static unsigned elem_align(LLVMValueRef p) {
    return is_f8_ptr(p) ? 1 : is_bf16_ptr(p) || is_f16_ptr(p) ? 2 : 4;
}

LLVMValueRef sn_ll_load_i32(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, const char *name) {
    SN_ASSERT(is_i32_ptr(L, p));
    LLVMValueRef v = LLVMBuildLoad2(L->b, L->t_i32, elem_ptr(L, p, idx), name);
    LLVMSetAlignment(v, 4);
    return v;
}

LLVMValueRef sn_ll_load(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, const char *name) {
    bool plain = elem_type(p) == L->t_f32;
    LLVMValueRef v = LLVMBuildLoad2(L->b, mem_type(L, p, false), mem_ptr(L, p, idx, false), plain ? name : "");
    LLVMSetAlignment(v, elem_align(p));
    return widen(L, p, v, name);
}

LLVMValueRef sn_ll_narrow(sn_ll *L, LLVMValueRef p, LLVMValueRef v) { return narrow(L, p, v); }

void sn_ll_store(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef v) {
    LLVMSetAlignment(LLVMBuildStore(L->b, narrow(L, p, v), mem_ptr(L, p, idx, false)), elem_align(p));
}

LLVMValueRef sn_ll_call_typed(sn_ll *L, const char *intrinsic, LLVMTypeRef *types, int nt,
                              LLVMValueRef *args, int n, const char *name) {
    unsigned id = LLVMLookupIntrinsicID(intrinsic, strlen(intrinsic));
    SN_ASSERT(id != 0);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(L->mod, id, types, (size_t)nt);
    LLVMTypeRef fty = LLVMIntrinsicGetType(L->ctx, id, types, (size_t)nt);
    return LLVMBuildCall2(L->b, fty, fn, args, (unsigned)n, name);
}

LLVMValueRef sn_ll_vload(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef mask,
                         const char *name) {
    bool plain = elem_type(p) == L->t_f32;
    LLVMTypeRef vt = mem_type(L, p, true), vpt = LLVMPointerType(vt, 0);
    LLVMValueRef vp = mem_ptr(L, p, idx, true);
    LLVMValueRef v;
    if (!mask) {
        v = LLVMBuildLoad2(L->b, vt, vp, plain ? name : "");
        LLVMSetAlignment(v, elem_align(p));
    } else {
        LLVMTypeRef types[2] = {vt, vpt};
        LLVMValueRef args[4] = {vp, sn_ll_i32(L, (int)elem_align(p)), mask, LLVMConstNull(vt)};
        v = sn_ll_call_typed(L, "llvm.masked.load", types, 2, args, 4, plain ? name : "");
    }
    return widen(L, p, v, name);
}

void sn_ll_vstore(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef v, LLVMValueRef mask) {
    LLVMTypeRef vt = mem_type(L, p, true), vpt = LLVMPointerType(vt, 0);
    v = narrow(L, p, v);
    LLVMValueRef vp = mem_ptr(L, p, idx, true);
    if (!mask) {
        LLVMSetAlignment(LLVMBuildStore(L->b, v, vp), elem_align(p));
        return;
    }
    LLVMTypeRef types[2] = {vt, vpt};
    LLVMValueRef args[4] = {v, vp, sn_ll_i32(L, (int)elem_align(p)), mask};
    sn_ll_call_typed(L, "llvm.masked.store", types, 2, args, 4, "");
}

LLVMValueRef sn_ll_vgather(sn_ll *L, LLVMValueRef p, LLVMValueRef idxv, LLVMValueRef mask,
                           const char *name) {
    bool plain = elem_type(p) == L->t_f32;
    LLVMTypeRef vt = mem_type(L, p, true), st = mem_type(L, p, false);
    LLVMValueRef base = LLVMBuildBitCast(L->b, p, LLVMPointerType(st, 0), "");
    LLVMValueRef ptrs = LLVMBuildGEP2(L->b, st, base, &idxv, 1, "");
    LLVMTypeRef types[2] = {vt, LLVMTypeOf(ptrs)};
    if (!mask) mask = sn_ll_const_first_lanes(L, L->lanes);
    LLVMValueRef args[4] = {ptrs, sn_ll_i32(L, (int)elem_align(p)), mask, LLVMConstNull(vt)};
    LLVMValueRef v =
        sn_ll_call_typed(L, "llvm.masked.gather", types, 2, args, 4, plain ? name : "");
    return widen(L, p, v, name);
}

/* ---- reading a kernel ---- */

const char *sn_ll_kname(const sn_kernel *k, char *buf, size_t len) {
    if (k->name[0]) snprintf(buf, len, "kernel %s", k->name);
    else snprintf(buf, len, "kernel k%d (%s)", k->id,
                  k->kind == SN_KER_POINTWISE ? "pointwise" : k->anchor ? sn_op_name(k->anchor->op) : "?");
    return buf;
}

/* whether k computes n (its anchor or an instruction), not only reads it from a buffer */
static bool computes(const sn_kernel *k, const sn_node *n) {
    if (k->anchor == n) return true;
    for (int i = 0; i < k->n_instr; i++)
        if (k->instr[i].node == n) return true;
    return false;
}

sn_status sn_ll_check_dtype(const sn_kernel *k, const sn_node *n, sn_err *e) {
    char kn[96];
    /* the fp8 pass's nodes: amax is computed as a reduction kernel's anchor, pow2_scale in
       pointwise kernels; 8-bit values (casts to and from them, views of them) are loaded and
       stored by pointwise kernels, and stored as a row kernel's output; elsewhere (a row
       kernel's prologue, attention ...) nothing has been written or tested yet */
    bool made = computes(k, n), out8 = false; /* a row kernel's output cast to 8 bits (the
                                                 classifier's dlogits for the fp8 pass) */
    for (int i = 0; i < k->n_out && k->kind == SN_KER_ROW; i++)
        out8 |= k->args[i] == n && n->op == SN_OP_CAST && sn_dtype_is_f8(n->dtype);
    if (n->op == SN_OP_AMAX && made && k->kind != SN_KER_REDUCE)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: node %%%d is amax outside a reduction kernel: "
                       "not supported yet by the LLVM backend", sn_ll_kname(k, kn, sizeof kn), n->id);
    if (((n->op == SN_OP_POW2_SCALE && made) || sn_dtype_is_f8(n->dtype)) && k->kind != SN_KER_POINTWISE &&
        !out8)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: node %%%d (%s, %s) in a %s kernel: the LLVM "
                       "backend generates pow2_scale and 8-bit floats in pointwise kernels only, "
                       "not supported yet here", sn_ll_kname(k, kn, sizeof kn), n->id,
                       sn_op_name(n->op), sn_dtype_name(n->dtype), sn_kernel_kind_name(k->kind));
    if (n->dtype == SN_F32 || n->dtype == SN_I32 || n->dtype == SN_BF16 || n->dtype == SN_F16 ||
        sn_dtype_is_f8(n->dtype))
        return SN_OK;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: node %%%d (%s) is %s; the LLVM backend generates "
                   "kernels over f32, i32, bf16, f16 and 8-bit float values only",
                   sn_ll_kname(k, kn, sizeof kn), n->id, sn_op_name(n->op), sn_dtype_name(n->dtype));
}

int sn_ll_input_index(const sn_kernel *k, const sn_node *n) {
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i] == n) return i;
    return -1;
}

sn_status sn_ll_input_named(sn_ll *L, const sn_kernel *k, const sn_node *n, const char *name,
                            LLVMValueRef *ptr, sn_err *e) {
    int i = sn_ll_input_index(k, n);
    char kn[96];
    if (i < 0)
        return sn_fail(e, SN_ERR_INVALID, "%s: input %%%d (%s) of %s %%%d is not among the "
                       "kernel's args (the fuse pass must materialise it)",
                       sn_ll_kname(k, kn, sizeof kn), n->id, sn_op_name(n->op),
                       k->anchor ? sn_op_name(k->anchor->op) : "?", k->anchor ? k->anchor->id : -1);
    sn_status st = sn_ll_check_dtype(k, n, e);
    if (st) return st;
    *ptr = sn_ll_buf(L, i, n->dtype, name);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
