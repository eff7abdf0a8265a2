/* llvm_attention.h: what the fused attention emitters share: the state of one kernel (att),
 * built by llvm_attention.c for an item's slices, and the steps over its rows
 * (llvm_attention_steps.c). */
#ifndef SN_LLVM_ATTENTION_H
#define SN_LLVM_ATTENTION_H

#ifdef SN_HAVE_LLVM

#include "llvm_util.h"

enum {
    MAX_CHUNKS = 64,          /* vectors per row: head sizes up to 64 x lanes */
    MAX_SCRATCH_T = 16384,    /* dk keeps dout_i . o_i for the item's T queries on the stack */
    MAX_R = 4,                /* rows per step */
};

typedef struct {
    sn_ll *L;
    const sn_node *n;          /* the attention op */
    int64_t T, S, D, Dv;       /* q (T, D), k (S, D), v (S, Dv) per item */
    int nd, ndv;               /* vectors per row of D and of Dv elements */
    LLVMValueRef scale;        /* f32 */
    /* the buffers (whole), then the current item's slices */
    LLVMValueRef bq, bk, bv, bo, bdo, blse, by, blse_out;
    LLVMValueRef q, k, v, o, dout, lse, y, lse_out;
    LLVMValueRef dsum;         /* dk: dout_i . o_i of the item's queries (stack) */
    int64_t G;                 /* query heads per k/v head (grouped-query attention) */
    bool by_kv;                /* dk and dv: the items are k's slices */
    /* dk and dv with G > 1: the q-side slices of the group's first head, the elements from
     * one head to the next, and dsum's first */
    LLVMValueRef q0, o0, dout0, lse0, dsum0;
    int64_t gq, go, gdo, glse;
    int64_t rq, rk, rv, ro, rdo; /* row strides of the inputs (views of a wider buffer) */
    int64_t ry;                /* the row stride of y (written into a wider buffer, or its row) */
    int R;                     /* rows per step */
} att;

/* Vectors of a row of n elements. */
static inline int sn_ll_att_chunks(const sn_ll *L, int64_t n) {
    return (int)((n + L->lanes - 1) / L->lanes);
}
/* &p[idx] (p an element pointer of any dtype: f32, or bf16 / f16 converted by the loads) */
static inline LLVMValueRef sn_ll_att_at(sn_ll *L, LLVMValueRef p, LLVMValueRef idx,
                                        const char *name) {
    return LLVMBuildInBoundsGEP2(L->b, LLVMGetElementType(LLVMTypeOf(p)), p, &idx, 1, name);
}

/* ---- llvm_attention_steps.c: R rows i .. i+R-1 of the current item, one kind each ---- */

void sn_ll_att_forward_step(att *a, LLVMValueRef i);
void sn_ll_att_bwd_q_step(att *a, LLVMValueRef i);
void sn_ll_att_bwd_kv_step(att *a, LLVMValueRef j);
/* ---- llvm_attention_cache.c: attention_cache (decoding over a KV cache), checked ---- */

sn_status sn_ll_emit_attention_cache(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e);

/* dsum[i] = dout_i . o_i for the item's T queries (of each head of its group: G T). */
void sn_ll_att_fill_dsum(att *a);

#endif /* SN_HAVE_LLVM */
#endif
