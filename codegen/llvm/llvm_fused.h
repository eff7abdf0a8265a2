/* llvm_fused.h: pointwise instructions evaluated inside another kernel's loops: the prologue
 * and epilogue of a ROW kernel with fused neighbours (kernel.h), walked row by row.
 * Convention: once per row, sn_ll_fx_row computes each access's offset and mask for the row
 * and loads what is constant along it; then each evaluation step (one vector of columns, or
 * one column as scalars) starts with sn_ll_fx_step, and values are built on demand and
 * cached for the step, so an instruction read twice in a step is computed once. The values
 * of a step may be used only inside the loop body (or block) that began it.
 *
 *     sn_ll_fx *f = sn_ll_fx_new(L, k, ptrs, e);          // ptrs: the kernel's args, typed
 *     ... per row r:  sn_ll_fx_row(f, r);
 *     ... per vector: sn_ll_fx_step(f, v.j, v.mask, false);
 *                     LLVMValueRef x = sn_ll_fx_ref(f, &k->instr[k->row.instr].in[0]);
 *     sn_ll_fx_free(f); */
#ifndef SN_LLVM_FUSED_H
#define SN_LLVM_FUSED_H

#ifdef SN_HAVE_LLVM

#include "llvm_util.h"

typedef struct sn_ll_fx sn_ll_fx;

/* For kernel k (instructions and accesses over k->shape, whose last axis is the row); ptr[i]
 * is args[i] as sn_ll_buf gives it. NULL (SN_ERR_OOM in e) when out of memory. */
sn_ll_fx *sn_ll_fx_new(sn_ll *L, const sn_kernel *k, const LLVMValueRef *ptr, sn_err *e);
void sn_ll_fx_free(sn_ll_fx *f);

/* Row r (i64) of the index space: offsets, outer masks, values constant along the row. */
void sn_ll_fx_row(sn_ll_fx *f, LLVMValueRef r);
/* A new step at column j (i64): `lanes` columns under mask (NULL: all), or one (scalar). */
void sn_ll_fx_step(sn_ll_fx *f, LLVMValueRef j, LLVMValueRef mask, bool scalar);
/* Gives instruction i its value in this step (the row op's result, which only it knows). */
void sn_ll_fx_set(sn_ll_fx *f, int i, LLVMValueRef v);
/* From now on, instruction i's value is read from buf (contiguous over the index space), which
 * an earlier pass over the row stored it to, instead of being computed again. */
void sn_ll_fx_reuse(sn_ll_fx *f, int i, LLVMValueRef buf);
/* Whether instruction i has a value in this step yet. */
bool sn_ll_fx_has(const sn_ll_fx *f, int i);
/* The value of instruction i, or of an operand, in this step (f32 vector or scalar). */
LLVMValueRef sn_ll_fx_value(sn_ll_fx *f, int i);
LLVMValueRef sn_ll_fx_ref(sn_ll_fx *f, const sn_ref *r);

/* The value of pointwise node n's op (or a view's copy, a FULL) on operand values x (f32,
 * scalars or vectors alike); i32 results are truncated toward zero, still as f32. */
LLVMValueRef sn_ll_pw_op(sn_ll *L, const sn_node *n, LLVMValueRef *x, int nx);

#endif /* SN_HAVE_LLVM */
#endif
