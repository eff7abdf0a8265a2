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

sn_status sn_kernel_dtypes(const sn_kernel *k, sn_pw_dtype_check dtype_ok, sn_err *e) {
    sn_status st = k->anchor ? dtype_ok(k, k->anchor, e) : SN_OK;
    for (int i = 0; i < k->n_out + k->n_in && !st; i++) st = dtype_ok(k, k->args[i], e);
    for (int i = 0; i < k->n_instr && !st; i++) st = dtype_ok(k, k->instr[i].node, e);
    return st;
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
