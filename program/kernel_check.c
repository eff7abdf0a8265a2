/* kernel_check.c: the contract of kernel.h checked once, for every code generator (issue 20):
 * what the fuse pass promises about a kernel's anchors, outputs and accesses. The fuse pass
 * checks each kernel it makes; the CUDA and LLVM generators check the kernels they are given
 * (a test may build one by hand) and then rely on the contract instead of checking it again.
 * A kernel that breaks it is a bug in whatever made it: SN_ERR_INTERNAL. Only the attention
 * kernels' contract lives here so far; the row kernels' (fused prologue and epilogue
 * dependencies) is still checked by each generator. */
#include "program.h"

/* Whether attention kernel k's anchor2 is what it may be: the attention_lse the forward reads
 * (both written), or the attention_bwd_v of attention_bwd_k's six inputs (dk and dv in one). */
static bool anchor2_ok(const sn_node *n, const sn_node *a2) {
    if (!a2) return true;
    if (n->op == SN_OP_ATTENTION) return a2->op == SN_OP_ATTENTION_LSE && a2 == n->in[3];
    bool kv = n->op == SN_OP_ATTENTION_BWD_K && a2->op == SN_OP_ATTENTION_BWD_V && a2->a.f == n->a.f;
    for (int i = 0; kv && i < 6; i++) kv = a2->in[i] == n->in[i];
    return kv;
}

sn_status sn_kernel_check_attention(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor, *a2 = k->anchor2;
    if (k->kind != SN_KER_ATTENTION || !n || sn_op_kind(n->op) != SN_K_ATTENTION)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an attention kernel needs an attention op "
                       "as anchor (a bug in the fuse pass)", k->name);
    if (!anchor2_ok(n, a2))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: anchor2 must be the attention_lse the "
                       "attention reads, or the attention_bwd_v of attention_bwd_k's inputs (a bug "
                       "in the fuse pass)", k->name);
    int n_out = a2 ? 2 : 1, n_into = k->n_access - n->n_in;
    if (n_into < 0)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an attention kernel has an access per "
                       "input of its anchor (%d) and maybe one per output, not %d (a bug in the "
                       "fuse pass)", k->name, n->n_in, k->n_access);
    /* outputs written through accesses: every backward output, or the forward's o alone */
    bool into = n_into > 0, fwd = n->op == SN_OP_ATTENTION || n->op == SN_OP_ATTENTION_LSE;
    if (into && n_into != (fwd ? 1 : n_out))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an attention kernel writes every backward "
                       "output, or the forward's o alone, through an access (a bug in the fuse "
                       "pass)", k->name);
    if (k->n_out != n_out || (!into && (k->args[0] != n || (a2 && k->args[1] != a2))) ||
        (into && fwd && a2 && k->args[1] != a2))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: outputs must be args[0] = %s%s (a bug in "
                       "the fuse pass)", k->name, sn_op_name(n->op), a2 ? ", args[1] = anchor2" : "");
    for (int o = 0; o < n_into; o++) {
        const sn_access *x = &k->access[n->n_in + o];
        const sn_node *y = o ? a2 : n;
        if (x->arg != o || x->masked || x->stride[y->rank - 1] != 1)
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: output %d is written through an access "
                           "to args[%d] with unit stride along its last axis (a bug in the fuse "
                           "pass)", k->name, o, o);
    }
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] == a2) continue; /* written by this kernel, not read */
        const sn_access *x = &k->access[i];
        if (x->arg < k->n_out || x->arg >= k->n_out + k->n_in || x->masked ||
            x->stride[n->in[i]->rank - 1] != 1)
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: input %%%d of %s must be read from an "
                           "input arg with unit stride along its last axis (a bug in the fuse "
                           "pass)", k->name, n->in[i]->id, sn_op_name(n->op));
    }
    const sn_node *q = n->in[0];
    int r = q->rank;
    bool by_kv = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V;
    int64_t slices = sn_shape_numel(r - 2, (by_kv ? n->in[1] : q)->shape);
    if (k->n_items != slices)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: n_items is %lld, not the %lld (batch x "
                       "head) slices of %s (a bug in the fuse pass)", k->name,
                       (long long)k->n_items, (long long)slices, by_kv ? "k" : "q");
    return SN_OK;
}
