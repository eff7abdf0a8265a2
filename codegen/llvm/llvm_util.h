/* llvm_util.h: the IR-building helpers shared by the LLVM emitters (one file per kernel kind)
 * and the JIT driver, and the emitters' entry points. Convention: an emitter builds one function
 * with the CPU kernel ABI `void name(i8** bufs, i64 begin, i64 end)` through an sn_ll; element
 * values are f32 (scalars, or vectors of L->lanes f32), indices are i64 element counts, and
 * mutable state lives in sn_ll_var slots (allocas that mem2reg promotes to registers).
 *
 * A typical row loop (C known when the kernel is built; the body is emitted once for full
 * vectors and once more, with a constant lane mask, for the tail):
 *
 *     LLVMValueRef acc = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, 0), "acc");
 *     sn_ll_vloop v;
 *     for (sn_ll_vloop_static(L, &v, C, "j"); sn_ll_vloop_next(L, &v);) {
 *         LLVMValueRef x = sn_ll_vload(L, xp, sn_ll_add(L, row_off, v.j), v.mask, "x");
 *         sn_ll_acc_add(L, acc, x, v.mask);
 *     }
 *     LLVMValueRef sum = sn_ll_hsum(L, sn_ll_get(L, acc, "acc"), "sum");
 *
 * The LLVM 14 C API cannot set fast-math flags on instructions, so reductions are vectorised
 * explicitly (lane-wise partial sums, then a shuffle tree) and multiply-adds go through
 * llvm.fmuladd (sn_ll_fma), which the backend fuses into FMA instructions. */
#ifndef SN_LLVM_UTIL_H
#define SN_LLVM_UTIL_H

#ifdef SN_HAVE_LLVM

#include <llvm-c/Core.h>

#include "ir/nf4.h"
#include "program/kernel.h"

typedef struct {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;     /* where code goes */
    LLVMBuilderRef top;   /* the top of the entry block: allocas */
    int lanes;            /* f32 lanes per vector (16 with AVX-512, 8 with AVX2, else 4) */
    const char *cpu;      /* host CPU and features, set as function attributes (may be NULL) */
    const char *features;
    /* types: scalars, and vectors of `lanes` elements (vf: f32, vi32, vi64, vmask: i1) */
    LLVMTypeRef t_void, t_i1, t_i8, t_i32, t_i64, t_f32, t_f64;
    LLVMTypeRef t_vf, t_vi32, t_vi64, t_vmask;
    /* the function being built: its parameters */
    LLVMValueRef fn, bufs, begin, end;
} sn_ll;

/* ---- llvm_util.c: setup, function, constants ---- */

/* Prepares L to add functions to mod (whose context it uses). lanes: 4, 8 or 16. */
void sn_ll_init(sn_ll *L, LLVMModuleRef mod, int lanes, const char *cpu, const char *features);
void sn_ll_done(sn_ll *L); /* disposes the builders */

/* Adds `void name(i8** bufs, i64 begin, i64 end)` (nounwind, host cpu/features,
 * prefer-vector-width) and positions the builder in its entry block. */
void sn_ll_fn_begin(sn_ll *L, const char *name);
void sn_ll_fn_end(sn_ll *L); /* ret void at the current position */
LLVMBasicBlockRef sn_ll_block(sn_ll *L, const char *name); /* a new block in L->fn */

/* bufs[i] as a typed element pointer: float*, i32*, bfloat*, half*, %f8e4m3* or %f8e5m2* by
 * dtype; the loads and stores below convert bf16 / f16 / f8 elements to and from f32 values
 * (round to nearest even; f8 saturating: llvm_f8.c). */
LLVMValueRef sn_ll_buf(sn_ll *L, int i, sn_dtype t, const char *name);

/* f32 value v (scalar or vector) rounded to dtype t and back (a cast to bf16 / f16 / f8 inside
 * a fused expression); v itself for f32 and i32. */
LLVMValueRef sn_ll_round_to(sn_ll *L, LLVMValueRef v, sn_dtype t);

/* ---- llvm_f8.c: the 8-bit floats (f8e4m3, f8e5m2) and pow2_scale ---- */

/* The element type of an f8 buffer of dtype t (a named struct {i8}: the pointer carries the
 * format), and the format such an element type holds (SN_DTYPE_COUNT for any other type). */
LLVMTypeRef sn_ll_f8_type(sn_ll *L, sn_dtype t);
sn_dtype sn_ll_f8_of(LLVMTypeRef elem);
/* f32 x (scalar or vector) as t's codes (i8 of the same shape), rounded as sn_dtype_round does
 * (nearest even, subnormals, saturating at +-max, infinities too; NaN: E4M3's S.1111.111,
 * E5M2's S.11111.10); and codes q of t as exact f32 values (NaN codes a quiet NaN of their
 * sign, E5M2's infinities infinities). */
LLVMValueRef sn_ll_f8_bits(sn_ll *L, LLVMValueRef x, sn_dtype t);
LLVMValueRef sn_ll_f8_widen(sn_ll *L, LLVMValueRef q, sn_dtype t, const char *name);
/* pow2_scale's value for f32 x (ops.h; ir/graph.c sn_pow2_scale_of) and bound f, exact. */
LLVMValueRef sn_ll_pow2_scale(sn_ll *L, LLVMValueRef x, double f, const char *name);

LLVMValueRef sn_ll_i32(sn_ll *L, int32_t v);
LLVMValueRef sn_ll_i64(sn_ll *L, int64_t v);
LLVMValueRef sn_ll_f32(sn_ll *L, float v);
LLVMValueRef sn_ll_vf32(sn_ll *L, float v);  /* splat constant vector */
/* The f32 constant v with the shape of `like` (a scalar or a vector of f32). */
LLVMValueRef sn_ll_fc(sn_ll *L, LLVMValueRef like, float v);
/* The i32 constant v, a scalar or a vector like `like`. */
LLVMValueRef sn_ll_ic(sn_ll *L, LLVMValueRef like, int32_t v);
bool sn_ll_is_vec(LLVMValueRef x); /* a vector value (not a scalar) */
LLVMValueRef sn_ll_splat(sn_ll *L, LLVMValueRef scalar, const char *name);
LLVMValueRef sn_ll_lane_ids(sn_ll *L);                   /* <0, 1, .., lanes-1> (i64) */
LLVMValueRef sn_ll_first_lanes(sn_ll *L, LLVMValueRef n); /* mask: lane < n (i64, runtime) */
LLVMValueRef sn_ll_const_first_lanes(sn_ll *L, int n);    /* mask: lane < n (constant) */
LLVMValueRef sn_ll_and_mask(sn_ll *L, LLVMValueRef a, LLVMValueRef b); /* NULL = all lanes */

/* i64 arithmetic, named */
LLVMValueRef sn_ll_add(sn_ll *L, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef sn_ll_mul(sn_ll *L, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef sn_ll_imin(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name);
LLVMValueRef sn_ll_imax(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name);

/* ---- llvm_util.c: variables and control flow ---- */

/* A mutable slot of type t (alloca at the top of the function), set to init here. */
LLVMValueRef sn_ll_var(sn_ll *L, LLVMTypeRef t, LLVMValueRef init, const char *name);
LLVMValueRef sn_ll_get(sn_ll *L, LLVMValueRef var, const char *name);
void sn_ll_set(sn_ll *L, LLVMValueRef var, LLVMValueRef v);

/* for (i = lo; i < hi; i += step) (signed i64). sn_ll_for returns i and leaves the builder in
 * the body; sn_ll_for_end closes the loop and leaves it after. lp->i stays valid after the
 * loop, where it holds the first value that failed the test. */
typedef struct {
    LLVMValueRef i, step, hi;
    LLVMBasicBlockRef head, body, exit, pre;
} sn_ll_loop;
LLVMValueRef sn_ll_for(sn_ll *L, sn_ll_loop *lp, LLVMValueRef lo, LLVMValueRef hi,
                       LLVMValueRef step, const char *name);
void sn_ll_for_end(sn_ll *L, sn_ll_loop *lp);

/* if (cond) { .. } [else { .. }] */
typedef struct {
    LLVMValueRef br;
    LLVMBasicBlockRef join;
    bool in_else;
} sn_ll_if;
void sn_ll_if_begin(sn_ll *L, sn_ll_if *f, LLVMValueRef cond, const char *name);
void sn_ll_if_else(sn_ll *L, sn_ll_if *f);
void sn_ll_if_end(sn_ll *L, sn_ll_if *f);

/* Vector loop over [0, n) (n known now) or [lo, hi) (runtime): written as
 *     for (sn_ll_vloop_static(L, &v, n, "j"); sn_ll_vloop_next(L, &v);) { body(v.j, v.mask) }
 * The body is emitted for full vectors (v.mask NULL) and then, when needed, once for the
 * tail (v.mask: the lanes in range). v.j is the index of lane 0. */
typedef struct {
    LLVMValueRef j, mask;
    int phase; /* 0 start, 1 full-vector body, 2 tail, 3 done */
    bool dynamic;
    int64_t n;
    LLVMValueRef lo, hi;
    const char *name;
    sn_ll_loop loop;
    sn_ll_if tail;
} sn_ll_vloop;
void sn_ll_vloop_static(sn_ll *L, sn_ll_vloop *v, int64_t n, const char *name);
void sn_ll_vloop_range(sn_ll *L, sn_ll_vloop *v, LLVMValueRef lo, LLVMValueRef hi,
                       const char *name);
bool sn_ll_vloop_next(sn_ll *L, sn_ll_vloop *v);

/* ---- llvm_util.c: memory (p from sn_ll_buf; idx an i64 element index) ---- */

/* Scalar load, converted to f32 when p is i32* (sitofp). */
LLVMValueRef sn_ll_load(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, const char *name);
LLVMValueRef sn_ll_load_i32(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, const char *name);
/* Scalar store of an f32 (converted toward zero when p is i32*). */
void sn_ll_store(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef v);
/* f32 value v (a scalar or a vector of any width) as p's stores write it: i16 bf16 bits, half or
 * i8 f8 codes (rounded to nearest even), f32, or i32 (toward zero). */
LLVMValueRef sn_ll_narrow(sn_ll *L, LLVMValueRef p, LLVMValueRef v);
/* Vector of lanes elements p[idx ..]; with a mask, only those lanes are read (others 0, never
 * touched, so they may lie out of bounds). Converted to f32 when p is i32*. */
LLVMValueRef sn_ll_vload(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef mask,
                         const char *name);
void sn_ll_vstore(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef v, LLVMValueRef mask);
/* p[idxv[l]] for each lane l (idxv: vector of i64), masked lanes read 0. */
LLVMValueRef sn_ll_vgather(sn_ll *L, LLVMValueRef p, LLVMValueRef idxv, LLVMValueRef mask,
                           const char *name);

/* ---- llvm_math.c: arithmetic on f32 scalars or vectors ---- */

/* An intrinsic overloaded on the nt types `types`: sn_ll_call_typed(L, "llvm.masked.load", ...) */
LLVMValueRef sn_ll_call_typed(sn_ll *L, const char *intrinsic, LLVMTypeRef *types, int nt,
                              LLVMValueRef *args, int n, const char *name);
/* An intrinsic overloaded on its first argument's type: sn_ll_call(L, "llvm.sqrt", &x, 1, "s") */
LLVMValueRef sn_ll_call(sn_ll *L, const char *intrinsic, LLVMValueRef *args, int n,
                        const char *name);
LLVMValueRef sn_ll_fma(sn_ll *L, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c); /* a*b+c */
LLVMValueRef sn_ll_sqrt(sn_ll *L, LLVMValueRef x, const char *name);
LLVMValueRef sn_ll_exp(sn_ll *L, LLVMValueRef x, const char *name);  /* ~1 ulp, inline */
LLVMValueRef sn_ll_log(sn_ll *L, LLVMValueRef x, const char *name);  /* ~1 ulp, inline */
LLVMValueRef sn_ll_tanh(sn_ll *L, LLVMValueRef x, const char *name); /* ~2e-7 abs, inline */
LLVMValueRef sn_ll_sigmoid(sn_ll *L, LLVMValueRef x, const char *name);
/* max as the reference reduces: b wins when b > a or b is NaN (NaN propagates) */
LLVMValueRef sn_ll_max_nan(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name);
/* max ignoring NaN (llvm.maxnum), as the reference's row max does */
LLVMValueRef sn_ll_maxnum(sn_ll *L, LLVMValueRef a, LLVMValueRef b, const char *name);

/* Horizontal reductions of a vector to a scalar, by a shuffle tree. */
LLVMValueRef sn_ll_hsum(sn_ll *L, LLVMValueRef v, const char *name);
LLVMValueRef sn_ll_hmax_nan(sn_ll *L, LLVMValueRef v, const char *name);
LLVMValueRef sn_ll_hmaxnum(sn_ll *L, LLVMValueRef v, const char *name);

/* var (vector) += v, or var = maxnum(var, v), on the lanes of mask (NULL: all). */
void sn_ll_acc_add(sn_ll *L, LLVMValueRef var, LLVMValueRef v, LLVMValueRef mask);
void sn_ll_acc_maxnum(sn_ll *L, LLVMValueRef var, LLVMValueRef v, LLVMValueRef mask);

/* ---- llvm_util.c: reading a kernel ---- */

/* "kernel k3_pointwise_add": how messages name a kernel. */
const char *sn_ll_kname(const sn_kernel *k, char *buf, size_t len);
/* Fails with SN_ERR_UNSUPPORTED unless n is f32, i32, bf16 or f16, or one of the fp8 pass's:
 * an 8-bit float or a pow2_scale in a pointwise kernel, an amax in a reduction kernel. */
sn_status sn_ll_check_dtype(const sn_kernel *k, const sn_node *n, sn_err *e);
/* The index of n among k's inputs (args[n_out..]), or -1. */
int sn_ll_input_index(const sn_kernel *k, const sn_node *n);
/* The typed pointer to input n (via sn_ll_input_index), named `name` in the IR ("x", "dy" ...);
 * fails with SN_ERR_INVALID when k does not have n among its args, or with sn_ll_check_dtype's
 * failure. */
sn_status sn_ll_input_named(sn_ll *L, const sn_kernel *k, const sn_node *n, const char *name,
                            LLVMValueRef *ptr, sn_err *e);

/* ---- the emitters: each adds function `fname` computing k to L->mod ---- */

sn_status sn_ll_emit_pointwise(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);
sn_status sn_ll_emit_row(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);
sn_status sn_ll_emit_reduce(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);
sn_status sn_ll_emit_gather(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);
sn_status sn_ll_emit_optim(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e); /* GRAD_ACC .. ADAMW */
sn_status sn_ll_emit_dequant(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e); /* NF4 */
sn_status sn_ll_emit_gemv(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);
/* llvm_gemv.c, for llvm_gemv_t.c too: the 64 weights of NF4 block blk (an i64), rounded to wt,
 * into w[0 .. 64 / lanes) (vectors, weight j at lane j % lanes of w[j / lanes]); weight f's
 * alone (an f32: its level times its block's scale, rounded to wt) */
void sn_ll_nf4_block(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef mean,
                     LLVMValueRef blk, sn_dtype wt, LLVMValueRef *w);
LLVMValueRef sn_ll_nf4_weight(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef mean,
                              LLVMValueRef levels, LLVMValueRef f, sn_dtype wt);
/* llvm_gemv_t.c: the product with W stored (N, K) (tb) */
sn_status sn_ll_emit_gemv_t(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);
/* llvm_dequant.c: reading ir/nf4.h's packed buffer q (an i8*): the 16 levels as a constant
 * global float[16]; the f32 at byte offset at (an i64); block blk's scale,
 * fma((float)scale_code[blk], step[blk / 256], mean) (llvm.fma: one rounding) */
LLVMValueRef sn_ll_nf4_levels(sn_ll *L);
LLVMValueRef sn_ll_nf4_f32_at(sn_ll *L, LLVMValueRef q, LLVMValueRef at, const char *name);
LLVMValueRef sn_ll_nf4_scale(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef mean,
                             LLVMValueRef blk);
/* weight f's level (levels[its nibble]: the high one of its byte for even f, the low for odd),
 * an f32 */
LLVMValueRef sn_ll_nf4_level(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef levels,
                             LLVMValueRef f);
/* llvm_attention.c */
sn_status sn_ll_emit_attention(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);

/* ---- llvm_jit.c ---- */

/* Runs LLVM's verifier on mod: SN_ERR_INVALID with the verifier's text on failure (a bug in an
 * emitter). */
sn_status sn_ll_verify(LLVMModuleRef mod, sn_err *e);

#endif /* SN_HAVE_LLVM */
#endif
