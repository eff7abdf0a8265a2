/* pointwise.c: see pointwise.h. Convention: the space's dims are dropped and merged from the
 * last towards the first, and every access's strides and mask axis move with them. */
#include "pointwise.h"

#include <string.h>

bool sn_pw_is_identity(sn_op op) {
    switch (op) {
    case SN_OP_RESHAPE: case SN_OP_PERMUTE: case SN_OP_BROADCAST: case SN_OP_SLICE:
    case SN_OP_PAD: case SN_OP_CONCAT: case SN_OP_FULL: case SN_OP_CONST: return true;
    default: return false;
    }
}

sn_status sn_pw_check(const sn_kernel *k, const char *who, sn_pw_dtype_check dtype_ok, sn_err *e) {
    SN_ASSERT(k->n_instr >= 1 && k->instr && k->n_out >= 1);
    SN_ASSERT(k->rank >= 0 && k->rank <= SN_MAX_RANK);
    for (int i = 0; i < k->n_out + k->n_in; i++) {
        sn_status st = dtype_ok(k, k->args[i], e);
        if (st) return st;
    }
    for (int i = 0; i < k->n_instr; i++) {
        const sn_pw_instr *in = &k->instr[i];
        const sn_node *n = in->node;
        sn_status st = dtype_ok(k, n, e);
        if (st) return st;
        if (sn_op_kind(n->op) != SN_K_POINTWISE && !sn_pw_is_identity(n->op))
            return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: instruction %d is %s (%%%d), which is not "
                           "a pointwise op", who, i, sn_op_name(n->op), n->id);
        if (sn_op_kind(n->op) == SN_K_POINTWISE) SN_ASSERT(in->n_in == sn_op_min_inputs(n->op));
        for (int j = 0; j < in->n_in; j++) {
            const sn_ref *r = &in->in[j];
            if (r->kind == SN_REF_INSTR) SN_ASSERT(r->index >= 0 && r->index < i);
            if (r->kind == SN_REF_ACCESS) SN_ASSERT(r->index >= 0 && r->index < k->n_access);
        }
    }
    for (int a = 0; a < k->n_access; a++)
        SN_ASSERT(k->access[a].arg >= k->n_out && k->access[a].arg < k->n_out + k->n_in);
    for (int o = 0; o < k->n_out; o++) {
        SN_ASSERT(k->store[o] >= 0 && k->store[o] < k->n_instr);
        SN_ASSERT(sn_numel(k->args[o]) == sn_shape_numel(k->rank, k->shape));
    }
    return SN_OK;
}

/* ---- the index space ---- */

static void drop_dim(sn_pw_space *s, int d) {
    for (int a = 0; a < s->n_access; a++) {
        sn_access *x = &s->acc[a];
        for (int t = d; t + 1 < s->rank; t++) x->stride[t] = x->stride[t + 1];
        if (x->masked && x->mask_axis > d) x->mask_axis--;
    }
    for (int t = d; t + 1 < s->rank; t++) s->shape[t] = s->shape[t + 1];
    s->rank--;
}

void sn_pw_space_fill(sn_pw_space *s, const sn_kernel *k) {
    SN_ASSERT(k->n_access >= 0 && k->n_access <= SN_KER_MAX_ARGS); /* s->acc's room */
    memset(s, 0, sizeof *s);
    s->rank = k->rank;
    memcpy(s->shape, k->shape, sizeof s->shape);
    s->n_access = k->n_access;
    if (k->n_access) memcpy(s->acc, k->access, sizeof(sn_access) * (size_t)k->n_access);
    for (int d = s->rank - 1; d >= 0; d--) { /* size-1 dims: coordinate 0 */
        if (s->shape[d] != 1) continue;
        for (int a = 0; a < s->n_access; a++) {
            sn_access *x = &s->acc[a];
            if (!x->masked || x->mask_axis != d) continue;
            if (!(x->mask_lo <= 0 && 0 < x->mask_hi)) s->zero[a] = true;
            x->masked = false;
        }
        drop_dim(s, d);
    }
    for (int d = s->rank - 2; d >= 0; d--) { /* merge d and d+1 when nothing tells them apart */
        bool ok = true;
        for (int a = 0; a < s->n_access && ok; a++) {
            const sn_access *x = &s->acc[a];
            if (x->stride[d] != x->stride[d + 1] * s->shape[d + 1]) ok = false;
            if (x->masked && (x->mask_axis == d || x->mask_axis == d + 1)) ok = false;
        }
        if (!ok) continue;
        s->shape[d] *= s->shape[d + 1];
        for (int a = 0; a < s->n_access; a++) s->acc[a].stride[d] = s->acc[a].stride[d + 1];
        drop_dim(s, d + 1);
    }
    if (s->rank == 0) { /* a scalar */
        s->rank = 1;
        s->shape[0] = 1;
        for (int a = 0; a < s->n_access; a++) s->acc[a].stride[0] = 0;
    }
}
