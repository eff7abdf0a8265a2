/* llvm_row.h: what the LLVM row-kernel emitters share (llvm_row.c: the passes over a row and
 * the ops a row at a time; llvm_row_sums.c: the PARTIAL and FINISH kernels of the ops that sum
 * over every row). Convention: an emitter fills one `row` from its kernel and builds the
 * function through it. */
#ifndef SN_LLVM_ROW_H
#define SN_LLVM_ROW_H

#ifdef SN_HAVE_LLVM

#include "llvm_fused.h"

typedef struct {
    sn_ll *L;
    const sn_kernel *k;
    const sn_node *n;     /* the row op */
    int64_t C;            /* row length */
    LLVMValueRef y;       /* the buffer of the row op's result (softmax reads it back), or NULL */
    LLVMValueRef in[3];   /* inputs read as they are, in the op's order (NULL: computed) */
    LLVMValueRef off;     /* r * C: the current row's first element */
    LLVMValueRef y0;      /* a norm weight gradient: where its chunk's partial sums start in y
                             (the norm backward pair's dx pass adds dy xhat there too) */
    int out0;             /* the first output the row's passes store (after the pair's sums) */
    /* fused neighbours (fx NULL without): */
    sn_ll_fx *fx;
    LLVMValueRef ptr[SN_KER_MAX_ARGS];
    sn_row_plan plan;               /* program/kernel_row.c */
    bool *dep;                      /* [n_instr] depends on the row op's value: plan.dep */
    bool whole;                     /* every pass of the op covers every row unconditionally */
    bool full;                      /* the current pass covers the row and may store values */
    bool have[SN_KER_MAX_ARGS];     /* output o holds this row's values (read back, not again) */
    bool pending[SN_KER_MAX_ARGS];  /* stored by the current pass */
    bool stepped[SN_KER_MAX_ARGS];  /* stored in the current step */
    bool written[SN_KER_MAX_ARGS];  /* stored somewhere (checked at the end) */
} row;

/* ---- llvm_row.c ---- */

/* One row of a per-row op at w->off (row r). */
void sn_ll_row_one(row *w, LLVMValueRef r);
/* (logits, targets) -> over the rows [r0, r1) whose target is not ignore_index: the sum of
 * lse - logit[t] in f64 and their count, stored as two f64 at part (kernel.h: PARTIAL). */
void sn_ll_row_cross_entropy(row *w, LLVMValueRef r0, LLVMValueRef r1, LLVMValueRef part);

/* ---- llvm_row_sums.c ---- */

/* The PARTIAL kernel's items [begin, end) of w's op (cross-entropy or a norm weight gradient)
 * over R rows, inside the function sn_ll_emit_row began. */
void sn_ll_row_partial(row *w, int64_t R);
/* kernel.h's FINISH kernel k (its plan made) as function fname. */
sn_status sn_ll_emit_row_finish(sn_ll *L, const sn_kernel *k, const char *fname);

#endif /* SN_HAVE_LLVM */
#endif
