/* lowrank_sum.c: the lowrank_sum pass, after autodiff in an autocast program. A 16-bit
 * gradient that sums a wide product and a low-rank one (LoRA: the gradient of an adapted
 * layer's input, dy W^T + dh' A^T, A of rank r beside the base's W) becomes
 * rnd(dy W^T + f32(rnd(dh' A^T))): the low-rank product rounded to the 16-bit dtype first, as
 * autocast rounds the adapter's product in the forward, the wide one not. Then the wide
 * product's GEMM adds it as its C (program/kernel.h accum; cuBLASLt's C is of D's type) and
 * keeps its DGELU epilogue, and no pointwise kernel reads either product back. Autodiff gave
 * rnd(v + c) (an f32 value's gradient read rounded: the low-rank term now rounded first, at
 * most half an ulp of it apart) or rnd(rnd(v) + rnd(c)) (a 16-bit value's gradient, what PEFT
 * under torch.autocast computes: the wide term's rounding dropped). Low rank: the product's
 * contraction K at most SN_LOWRANK_K where the other's is larger. */
#include <stdlib.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

/* The contraction length of matmul m: A's last axis, or its row axis when A is transposed. */
static int64_t contraction(const sn_node *m) {
    const sn_node *a = m->in[0];
    return a->shape[a->rank - 1 - (m->a.ta ? 1 : 0)];
}

static bool is_16(sn_dtype t) { return t == SN_BF16 || t == SN_F16; }

/* Whether x is an output or the loss. */
static bool kept(const sn_graph *g, const sn_node *x) {
    if (g->loss == x) return true;
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == x) return true;
    return false;
}

/* Whether n (read uses[n] times) is an f32 product of two t operands, of x's shape, read only
 * by x (a gradient is read by the optimizer: uses counts it) and no output or loss. */
static bool product_of(const sn_graph *g, const sn_node *n, const sn_node *x, sn_dtype t,
                       const int *uses) {
    return n->op == SN_OP_MATMUL && n->dtype == SN_F32 && n->in[0]->dtype == t &&
           n->in[1]->dtype == t && uses[n->id] == 1 && sn_same_shape(n, x) && !kept(g, n);
}

/* Which of products p[0], p[1] (of x's shape, t operands, read only by their reader) is of low
 * rank beside a wide one: 0 or 1, or -1. */
static int lowrank_of(const sn_graph *g, const sn_node *const p[2], const sn_node *x, sn_dtype t,
                      const int *uses) {
    for (int i = 0; i < 2; i++)
        if (!product_of(g, p[i], x, t, uses)) return -1;
    int64_t k0 = contraction(p[0]), k1 = contraction(p[1]);
    if (k0 <= SN_LOWRANK_K && k1 > k0) return 0;
    if (k1 <= SN_LOWRANK_K && k0 > k1) return 1;
    return -1;
}

/* How x is rewritten, or -1: 0 or 1, x = add(p0, p1) of two f32 products read only by its cast
 * y to 16 bits (the gradient of an f32 value read rounded), that operand low rank; 2 or 3, x =
 * add(rnd(p0), rnd(p1)) in 16 bits (the gradient of a 16-bit value: autodiff rounds each
 * term), each cast read only by x, operand (plan - 2) low rank: x becomes rnd(p_wide +
 * f32(rnd(p_low))), the wide term's rounding dropped too. */
static int plan_of(const sn_graph *g, const sn_node *x, const sn_node *y, const int *uses) {
    if (x->op != SN_OP_ADD || x->in[0] == x->in[1] || kept(g, x)) return -1;
    if (x->dtype == SN_F32) {
        if (uses[x->id] != 1 || !y || y->op != SN_OP_CAST || y->in[0] != x || !is_16(y->dtype))
            return -1;
        return lowrank_of(g, (const sn_node *const[]){x->in[0], x->in[1]}, x, y->dtype, uses);
    }
    if (!is_16(x->dtype)) return -1;
    const sn_node *p[2];
    for (int i = 0; i < 2; i++) {
        const sn_node *c = x->in[i];
        if (c->op != SN_OP_CAST || c->dtype != x->dtype || uses[c->id] != 1 || kept(g, c))
            return -1;
        p[i] = c->in[0];
    }
    int low = lowrank_of(g, p, x, x->dtype, uses);
    return low < 0 ? -1 : 2 + low;
}

sn_status sn_pass_lowrank_sum(const sn_graph *in, sn_graph **out, int *n_rounded, sn_err *e) {
    *out = NULL;
    *n_rounded = 0;
    int n = in->n_nodes;
    int *uses = sn_graph_use_counts(in, e);
    int *plan = uses ? malloc(sizeof *plan * ((size_t)n + 1)) : NULL;
    const sn_node **reader = plan ? calloc((size_t)n + 1, sizeof *reader) : NULL;
    bool *dropped = reader ? calloc((size_t)n + 1, sizeof *dropped) : NULL;
    if (!dropped) {
        free(uses);
        free(plan);
        free(reader);
        return sn_fail(e, SN_ERR_OOM, "the lowrank_sum pass: out of memory");
    }
    for (int i = 0; i < n; i++) /* each node's last reader (the only one where uses is 1) */
        for (int j = 0; j < in->nodes[i]->n_in; j++) reader[in->nodes[i]->in[j]->id] = in->nodes[i];
    for (int i = 0; i < n; i++) {
        const sn_node *x = in->nodes[i];
        plan[i] = plan_of(in, x, reader[i], uses);
        *n_rounded += plan[i] >= 0;
        if (plan[i] >= 2) dropped[x->in[1 - (plan[i] - 2)]->id] = true; /* the wide term's cast */
    }
    sn_status st = SN_OK;
    sn_rewrite r;
    if (*n_rounded && !(st = sn_rewrite_begin(&r, in, e))) {
        for (int i = 0; i < n; i++) {
            const sn_node *x = in->nodes[i];
            if (dropped[i]) continue; /* read by nothing now */
            sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&r, x, ins);
            if (plan[i] >= 0 && plan[i] < 2) { /* rnd(p_wide + f32(rnd(p_low))) */
                int lo = plan[i];
                ins[lo] = sn_cast(r.g, sn_cast(r.g, ins[lo], reader[i]->dtype), SN_F32);
            } else if (plan[i] >= 2) { /* the same, x's dtype */
                int lo = plan[i] - 2;
                sn_dtype t = x->dtype;
                sn_node *wide = r.map[x->in[1 - lo]->in[0]->id];
                sn_node *sum = lo ? sn_add(r.g, wide, sn_cast(r.g, ins[lo], SN_F32))
                                  : sn_add(r.g, sn_cast(r.g, ins[lo], SN_F32), wide);
                r.map[i] = sn_cast(r.g, sum, t);
                continue;
            }
            sn_rewrite_emit(&r, x, &p); /* a shape error stays in r.g for sn_rewrite_end */
        }
        st = sn_rewrite_end(&r, "lowrank_sum", out, e);
    }
    free(uses);
    free(plan);
    free(reader);
    free(dropped);
    return st;
}
