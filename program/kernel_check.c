/* kernel_check.c: the contract of kernel.h checked once, for every code generator (issue 20):
 * what the fuse pass promises about a kernel's anchors, outputs and accesses. The fuse pass
 * checks each kernel it makes; the CUDA and LLVM generators check the kernels they are given
 * (a test may build one by hand) and then rely on the contract instead of checking it again.
 * A kernel that breaks it is a bug in whatever made it: SN_ERR_INTERNAL. The attention kernels'
 * contract, and the fused row kernels' (their prologue and epilogue). */
#include "pointwise.h"
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
    if (k->stage != SN_SUM_WHOLE && n->op != SN_OP_ATTENTION_BWD_Q &&
        !(k->stage == SN_SUM_PARTIAL && n->op == SN_OP_ATTENTION_BWD_K))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: only the atomic dq's kernels (kernel.h: "
                       "attention_bwd_q's zero and store, attention_bwd_k's PARTIAL) have a stage "
                       "(a bug in the fuse pass)", k->name);
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

bool sn_kernel_att_tensor_cores(const sn_kernel *k, const sn_target *t) {
    const sn_node *n = k->anchor, *a2 = k->anchor2, *q = n->in[0];
    int r = q->rank;
    int64_t D = q->shape[r - 1], Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : D;
    bool ok = D % 16 == 0 && Dv % 16 == 0 &&
              ((q->dtype == SN_BF16 && t->mma_bf16) || (q->dtype == SN_F16 && t->mma_f16));
    /* 16-byte loads of 16-bit rows: every offset and stride a multiple of 8 elements */
    for (int i = 0; ok && i < n->n_in; i++) {
        if (n->in[i] == a2 || n->in[i]->rank < r) continue; /* written here, or lse (f32) */
        ok = k->access[i].offset % 8 == 0;
        for (int d = 0; ok && d + 1 < n->in[i]->rank; d++) ok = k->access[i].stride[d] % 8 == 0;
    }
    for (int i = n->n_in; ok && i < k->n_access; i++) { /* and the outputs' (pairs stored) */
        ok = k->access[i].offset % 8 == 0;
        for (int d = 0; ok && d + 1 < n->rank; d++) ok = k->access[i].stride[d] % 8 == 0;
    }
    return ok;
}

sn_status sn_kernel_row_deps(const sn_kernel *k, bool *dep, int *y, sn_err *e) {
    const sn_node *n = k->anchor;
    int nargs = k->n_out + k->n_in;
    *y = -1;
    if (k->kind != SN_KER_ROW || !n || k->n_instr < 1 || k->row_instr < 0 ||
        k->row_instr >= k->n_instr || k->instr[k->row_instr].node != n ||
        k->instr[k->row_instr].n_in != n->n_in || k->n_out < 1 || nargs > SN_KER_MAX_ARGS)
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: a fused row kernel computes its anchor as "
                       "one of its instructions, with the anchor's inputs (a bug in the fuse "
                       "pass)", k->name);
    for (int a = 0; a < k->n_access; a++)
        if (k->access[a].arg < k->n_out || k->access[a].arg >= nargs)
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: access %d reads args[%d], not an "
                           "input (a bug in the fuse pass)", k->name, a, k->access[a].arg);
    for (int i = 0; i < k->n_instr; i++) {
        const sn_pw_instr *in = &k->instr[i];
        sn_op op = in->node->op;
        if (i != k->row_instr && sn_op_kind(op) != SN_K_POINTWISE && !sn_pw_is_identity(op))
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: instruction %d is %s (%%%d), not a "
                           "pointwise op (a bug in the fuse pass)", k->name, i, sn_op_name(op),
                           in->node->id);
        dep[i] = i == k->row_instr;
        for (int t = 0; t < in->n_in; t++) {
            const sn_ref *r = &in->in[t];
            bool ok = r->kind == SN_REF_INSTR ? r->index >= 0 && r->index < i
                    : r->kind == SN_REF_ACCESS ? r->index >= 0 && r->index < k->n_access : true;
            /* the row op's per-row operands (weights, biases, targets): read from their buffers */
            if (i == k->row_instr && !sn_row_operand_per_element(n->op, t))
                ok = ok && r->kind == SN_REF_ACCESS;
            if (!ok)
                return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: operand %d of instruction %d "
                               "refers to no earlier instruction or access it may (a bug in the "
                               "fuse pass)", k->name, t, i);
            if (r->kind == SN_REF_INSTR) dep[i] = dep[i] || dep[r->index];
        }
    }
    for (int o = 0; o < k->n_out; o++) {
        int i = k->store[o];
        if (i < 0 || i >= k->n_instr ||
            (i != k->row_instr && sn_numel(k->args[o]) != sn_shape_numel(k->rank, k->shape)))
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: output %d stores no instruction of the "
                           "kernel's index space (a bug in the fuse pass)", k->name, o);
        if (i == k->row_instr) *y = o;
        if (dep[i] && i != k->row_instr && !sn_row_result_per_element(n->op))
            return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: an epilogue after %s, whose result is "
                           "not one element per element of its input (a bug in the fuse pass)",
                           k->name, sn_op_name(n->op));
        if (!dep[i] && n->op == SN_OP_CROSS_ENTROPY)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "kernel %s: cross_entropy reads only the counted "
                           "rows, so it cannot store the values of its prologue (%%%d)", k->name,
                           k->args[o]->id);
    }
    if (*y < 0 && !sn_row_result_per_element(n->op))
        return sn_fail(e, SN_ERR_INTERNAL, "kernel %s: %s's result is not stored (a bug in the "
                       "fuse pass)", k->name, sn_op_name(n->op));
    return SN_OK;
}
