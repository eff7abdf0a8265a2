/* fuse_pair.c: the norm backward pair (kernel.h): after the fuse pass made its kernels, a norm's
 * dx kernel and its weight gradient's PARTIAL kernel become one kernel that reads dy and x once.
 * Convention: the pair is the dx kernel's struct, its args reordered (the sums first), in the
 * place of whichever of the two ran first; nothing changes where they cannot pair. */
#include <stdio.h>
#include <string.h>

#include "fuse_int.h"

/* The value whose buffer node x's is (through aliases), or -1. */
static int buffer_of(const sn_program *p, const sn_node *x) {
    int v = p->value_of[x->id];
    while (v >= 0 && p->values[v].alias >= 0) v = p->values[v].alias;
    return v;
}

/* Whether D computes the dx of norm weight gradient W's x, dy and eps, fused (its instructions
 * carry the sum's operands), W storing nothing but its sums, over rows the pair takes. */
static bool pairs_with(const sn_kernel *D, const sn_kernel *W) {
    const sn_node *n = W->anchor, *dx = D->anchor;
    sn_op want = n->op == SN_OP_RMSNORM_BWD_W ? SN_OP_RMSNORM_BWD : SN_OP_LAYERNORM_BWD;
    return D->kind == SN_KER_ROW && D->stage == SN_SUM_WHOLE && !D->anchor2 && D->n_instr > 0 &&
           dx->op == want && dx->a.f == n->a.f && sn_same_value(dx->in[0], n->in[0]) &&
           sn_same_value(dx->in[2], n->in[1]) && W->n_out == 1 + W->row.n_colsum &&
           dx->in[0]->shape[dx->in[0]->rank - 1] <= SN_PAIR_MAX_C;
}

/* D becomes the pair of D and W (kernel.h), or false (nothing changed) when its args overflow. */
static bool make_pair(sn_program *p, sn_kernel *D, const sn_kernel *W) {
    const sn_node *n = W->anchor, *dx = D->anchor;
    int c = W->row.n_colsum, nd = D->n_out, sums = 1 + c;
    const sn_node *args[SN_KER_MAX_ARGS];
    int store[SN_KER_MAX_ARGS], src[SN_KER_MAX_ARGS], n_in = D->n_in;
    if (sums + nd + n_in + 1 > SN_KER_MAX_ARGS) return false; /* + the scratch */
    for (int o = 0; o < sums; o++) args[o] = W->args[o], store[o] = D->row.instr;
    for (int o = 0; o < nd; o++) args[sums + o] = D->args[o], store[sums + o] = D->store[o];
    for (int i = 0; i < n_in; i++) args[sums + nd + i] = D->args[nd + i];
    for (int o = 1; o <= c; o++) { /* a column sum of dx's output reads it there */
        const sn_node *x = W->args[W->row.colsum_src[o]];
        int v = buffer_of(p, x);
        src[o] = -1;
        for (int a = sums; a < sums + nd + n_in && src[o] < 0; a++)
            if (args[a] == x || (a < sums + nd && v >= 0 && buffer_of(p, args[a]) == v)) src[o] = a;
        if (src[o] < 0) {
            if (sums + nd + n_in + 1 == SN_KER_MAX_ARGS) return false;
            src[o] = sums + nd + n_in;
            args[sums + nd + n_in++] = x;
        }
    }
    memcpy(D->args, args, sizeof *args * (size_t)(sums + nd + n_in));
    memcpy(D->store, store, sizeof *store * (size_t)(sums + nd));
    for (int a = 0; a < D->n_access; a++) D->access[a].arg += sums;
    for (int o = 1; o <= c; o++) D->row.colsum_src[o] = src[o];
    D->n_out = sums + nd;
    D->n_in = n_in;
    D->anchor = n;
    D->stage = SN_SUM_PARTIAL;
    D->scratch = W->scratch;
    D->row.n_colsum = c;
    D->row.pair = true;
    const char *rest = D->name + strcspn(D->name, "_") + 1 + strlen(sn_op_name(dx->op));
    char name[sizeof D->name];
    snprintf(name, sizeof name, "k%d_%s_pair%s", D->id, sn_op_name(dx->op), rest);
    memcpy(D->name, name, sizeof name);
    sn_kernel_work(D, &D->n_items, &D->serial);
    return true;
}

/* Whether kernel k writes node x's buffer. */
static bool writes_node(const sn_program *p, const sn_kernel *k, const sn_node *x) {
    for (int o = 0; o < k->n_out; o++)
        if (buffer_of(p, k->args[o]) == buffer_of(p, x)) return true;
    return false;
}

sn_status sn_fuse_norm_pairs(fuse_state *s) {
    sn_program *p = s->p;
    sn_kernel **ks = p->kernels;
    for (int i = 0; i < p->n_kernels; i++) {
        sn_kernel *W = ks[i];
        if (W->kind != SN_KER_ROW || W->stage != SN_SUM_PARTIAL || W->anchor2 || W->row.pair ||
            (W->anchor->op != SN_OP_LAYERNORM_BWD_W && W->anchor->op != SN_OP_RMSNORM_BWD_W))
            continue;
        int d = -1; /* dx's kernel right before W, or right after W's FINISH (W in D's place) */
        if (i >= 1 && pairs_with(ks[i - 1], W)) d = i - 1;
        else if (i + 2 < p->n_kernels && ks[i + 1]->stage == SN_SUM_FINISH &&
                 ks[i + 1]->scratch == W->scratch && pairs_with(ks[i + 2], W)) {
            bool ready = true; /* D's inputs written before W */
            for (int a = ks[i + 2]->n_out; a < ks[i + 2]->n_out + ks[i + 2]->n_in; a++)
                ready = ready && !writes_node(p, W, ks[i + 2]->args[a]) &&
                        !writes_node(p, ks[i + 1], ks[i + 2]->args[a]);
            if (ready) d = i + 2;
        }
        if (d < 0 || !make_pair(p, ks[d], W)) continue;
        sn_status st = sn_kernel_check(ks[d], s->e);
        if (st) return st;
        if (d > i) { /* the pair in W's place, its FINISH after it */
            ks[i] = ks[d];
            memmove(ks + d, ks + d + 1, sizeof *ks * (size_t)(p->n_kernels - d - 1));
        } else {
            memmove(ks + i, ks + i + 1, sizeof *ks * (size_t)(p->n_kernels - i - 1));
        }
        p->n_kernels--;
    }
    return SN_OK;
}
