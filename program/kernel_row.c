/* kernel_row.c: a ROW kernel's contract and plan (kernel.h sn_row_plan), computed here once for
 * both code generators: the row op's facts, the classifier's pair, the stages of a sum over
 * every row, the column sums, and for a fused kernel which instructions form the epilogue and
 * which operands the row op reads as they are. A broken contract is a bug in the pass that made
 * the kernel: SN_ERR_INTERNAL. */
#include "pointwise.h"

#define BUG(...) sn_kernel_bug(k, e, __VA_ARGS__)

/* The classifier's pair (kernel.h): a cross_entropy_bwd with the cross_entropy of the same
 * logits, targets and attributes. */
static bool classifier_ok(const sn_node *n, const sn_node *a2) {
    return n->op == SN_OP_CROSS_ENTROPY_BWD && a2->op == SN_OP_CROSS_ENTROPY &&
           a2->in[0] == n->in[0] && a2->in[1] == n->in[1] && a2->a.end == n->a.end &&
           a2->a.ignore_index == n->a.ignore_index;
}

/* A FINISH kernel: the f32 sums of a row op that sums over every row (or the classifier's
 * loss), reading only its partial sums. */
static sn_status finish_plan(const sn_kernel *k, sn_row_plan *p, sn_err *e) {
    const sn_row_facts *f = sn_row_facts_of(k->anchor->op);
    bool f32 = true;
    for (int o = 0; o < k->n_out; o++) f32 = f32 && k->args[o]->dtype == SN_F32;
    if (k->n_in || !f32 || k->args[0] != k->anchor || !f || !f->serial ||
        (k->anchor2 && !classifier_ok(k->anchor2, k->anchor)))
        return BUG("a FINISH kernel writes the f32 sums of a row op that sums over every row and "
                   "reads only its partial sums");
    p->y = 0;
    return SN_OK;
}

/* The row op's operands read as they are (an unfused kernel's): their args. */
static sn_status plain_plan(const sn_kernel *k, sn_row_plan *p, sn_err *e) {
    const sn_node *n = k->anchor;
    for (int i = 0; i < n->n_in; i++)
        for (int a = k->n_out; a < k->n_out + k->n_in && p->buf[i] < 0; a++)
            if (k->args[a] == n->in[i]) p->buf[i] = a;
    for (int i = 0; i < n->n_in; i++)
        if (p->buf[i] < 0) return BUG("input %%%d of %s is none of its args", n->in[i]->id, sn_op_name(n->op));
    if (k->n_out < 1 || k->args[0] != n) return BUG("an unfused row kernel stores its row op as args[0]");
    p->y = 0;
    return SN_OK;
}

bool sn_same_value(const sn_node *a, const sn_node *b) {
    while (a != b && a->op == SN_OP_CAST && b->op == SN_OP_CAST && a->dtype == b->dtype)
        a = a->in[0], b = b->in[0];
    return a == b;
}

/* The norm backward pair (kernel.h): a norm weight gradient's PARTIAL kernel whose row op, a row
 * at a time, is its dx, of the same x, dy and eps. */
static sn_status pair_plan(const sn_kernel *k, sn_row_plan *p, sn_err *e) {
    const sn_node *n = k->anchor;
    bool rms = n->op == SN_OP_RMSNORM_BWD_W;
    if (k->stage != SN_SUM_PARTIAL || (n->op != SN_OP_LAYERNORM_BWD_W && !rms) || k->n_instr < 1 ||
        k->row.instr < 0 || k->row.instr >= k->n_instr)
        return BUG("the norm backward pair is the PARTIAL kernel of a norm weight gradient whose "
                   "fused instructions compute its dx");
    const sn_node *dx = k->instr[k->row.instr].node;
    if (dx->op != (rms ? SN_OP_RMSNORM_BWD : SN_OP_LAYERNORM_BWD) || dx->a.f != n->a.f ||
        !sn_same_value(dx->in[0], n->in[0]) || !sn_same_value(dx->in[2], n->in[1]))
        return BUG("the pair's row op (%s %%%d) is not the dx of %s %%%d's x, dy and eps",
                   sn_op_name(dx->op), dx->id, sn_op_name(n->op), n->id);
    if (k->n_out <= 1 + k->row.n_colsum || p->C > SN_PAIR_MAX_C)
        return BUG("the norm backward pair stores dx's values after its sums, over rows of at most "
                   "%d", SN_PAIR_MAX_C);
    p->op = dx;
    return SN_OK;
}

/* A fused kernel's instructions: the epilogue (dep), the output of the row op's own result, the
 * per-row operands' buffers. */
static sn_status fused_plan(const sn_kernel *k, sn_row_plan *p, sn_err *e) {
    const sn_node *n = p->op;
    int nargs = k->n_out + k->n_in;
    if (k->n_instr > SN_KER_MAX_INSTR || k->row.instr < 0 || k->row.instr >= k->n_instr ||
        k->instr[k->row.instr].node != n || k->instr[k->row.instr].n_in != n->n_in || k->rank < 1)
        return BUG("a fused row kernel computes its anchor as one of its at most %d instructions, "
                   "with the anchor's inputs", SN_KER_MAX_INSTR);
    for (int a = 0; a < k->n_access; a++)
        if (k->access[a].arg < k->n_out || k->access[a].arg >= nargs)
            return BUG("access %d reads args[%d], not an input", a, k->access[a].arg);
    bool *dep = p->dep;
    for (int i = 0; i < k->n_instr; i++) {
        const sn_pw_instr *in = &k->instr[i];
        sn_op op = in->node->op;
        if (i != k->row.instr && sn_op_kind(op) != SN_K_POINTWISE && !sn_pw_is_identity(op))
            return BUG("instruction %d is %s (%%%d), not a pointwise op", i, sn_op_name(op), in->node->id);
        if (op == SN_OP_DROPOUT) /* its mask reads a pointwise kernel's element index (fuse) */
            return BUG("instruction %d is a dropout (%%%d) in a row kernel", i, in->node->id);
        dep[i] = i == k->row.instr;
        for (int t = 0; t < in->n_in; t++) {
            const sn_ref *r = &in->in[t];
            bool ok = r->kind == SN_REF_INSTR ? r->index >= 0 && r->index < i
                    : r->kind == SN_REF_ACCESS ? r->index >= 0 && r->index < k->n_access : true;
            /* the row op's per-row operands (weights, biases, targets): read from their buffers */
            if (i == k->row.instr && !sn_row_operand_per_element(n->op, t))
                ok = ok && r->kind == SN_REF_ACCESS;
            if (!ok)
                return BUG("operand %d of instruction %d refers to no earlier instruction or access "
                           "it may", t, i);
            if (r->kind == SN_REF_INSTR) dep[i] = dep[i] || dep[r->index];
        }
    }
    for (int o = k->row.pair ? 1 + k->row.n_colsum : 0; o < k->n_out; o++) { /* not the pair's sums */
        int i = k->store[o];
        if (i < 0 || i >= k->n_instr ||
            (i != k->row.instr && sn_numel(k->args[o]) != sn_shape_numel(k->rank, k->shape)))
            return BUG("output %d stores no instruction of the kernel's index space", o);
        if (i == k->row.instr) p->y = o;
        if (dep[i] && i != k->row.instr && !sn_row_result_per_element(n->op))
            return BUG("an epilogue after %s, whose result is not one element per element of its "
                       "input", sn_op_name(n->op));
        if (!dep[i] && n->op == SN_OP_CROSS_ENTROPY)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "kernel %s: cross_entropy reads only the counted "
                           "rows, so it cannot store the values of its prologue (%%%d)", k->name,
                           k->args[o]->id);
    }
    if (p->y < 0 && !sn_row_result_per_element(n->op))
        return BUG("%s's result is not stored", sn_op_name(n->op));
    const sn_pw_instr *ri = &k->instr[k->row.instr];
    for (int t = 0; t < ri->n_in; t++) /* w, b, targets: their buffers */
        if (!sn_row_operand_per_element(n->op, t)) p->buf[t] = k->access[ri->in[t].index].arg;
    return SN_OK;
}

sn_status sn_kernel_row_plan(const sn_kernel *k, sn_row_plan *p, sn_err *e) {
    const sn_node *n = k->anchor;
    *p = (sn_row_plan){.y = -1, .buf = {-1, -1, -1}, .fused = k->n_instr > 0, .op = n};
    if (k->kind != SN_KER_ROW || !n || !sn_row_facts_of(n->op) || n->n_in > 3)
        return BUG("a row kernel's anchor is a row op");
    const sn_node *x = n->in[0];
    p->C = x->rank ? x->shape[x->rank - 1] : 1;
    p->R = x->rank ? sn_numel(x) / p->C : 1;
    p->Vr = n->a.end > 0 && n->a.end < p->C ? n->a.end : p->C;
    if (k->stage == SN_SUM_FINISH) return finish_plan(k, p, e);
    bool ce = n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_CROSS_ENTROPY_BWD;
    if (ce && n->in[1]->dtype != SN_I32) /* the IR's rule, which the generators rely on */
        return BUG("targets %%%d are %s, not i32", n->in[1]->id, sn_dtype_name(n->in[1]->dtype));
    if (n->op == SN_OP_CAUSAL_MASK && x->rank < 2) return BUG("causal_mask needs a (.., T, S) input");
    if (k->anchor2 && !classifier_ok(n, k->anchor2))
        return BUG("a classifier is a cross_entropy_bwd with the cross_entropy of the same logits, "
                   "targets and attributes");
    p->sums = sn_row_facts_of(n->op)->serial || k->anchor2; /* over every row, or the loss */
    if (p->sums != (k->stage == SN_SUM_PARTIAL))
        return BUG("a row op that sums over every row, and only it, runs as the PARTIAL and FINISH "
                   "kernels of kernel.h");
    bool bwd_w = n->op == SN_OP_LAYERNORM_BWD_W || n->op == SN_OP_RMSNORM_BWD_W;
    sn_status st;
    if (k->row.pair && (st = pair_plan(k, p, e))) return st;
    if (k->row.n_colsum && (!bwd_w || (!k->row.pair && k->row.n_colsum + 1 != k->n_out)))
        return BUG("column sums join only a norm weight gradient that stores nothing else (or its "
                   "dx's values, the norm backward pair), as its outputs 1 .. n_colsum");
    for (int o = 1; o <= k->row.n_colsum; o++) {
        int s = k->row.colsum_src[o]; /* the pair's: one of its dx's outputs too */
        bool src = s >= (k->row.pair ? 1 + k->row.n_colsum : k->n_out);
        if (!src || s >= k->n_out + k->n_in || !sn_dtype_is_float(k->args[s]->dtype) ||
            k->args[o]->dtype != SN_F32 || sn_numel(k->args[s]) != p->R * sn_numel(k->args[o]))
            return BUG("column sum %d must read a float input of %lld rows of its %lld columns", o,
                       (long long)p->R, (long long)sn_numel(k->args[o]));
    }
    return p->fused ? fused_plan(k, p, e) : plain_plan(k, p, e);
}
