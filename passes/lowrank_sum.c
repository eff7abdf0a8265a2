/* lowrank_sum.c: the lowrank_sum pass, after autodiff in an autocast program: sums of products
 * that a 16-bit gradient rounds become chains the GEMMs compute, each adding the one before as
 * its C (program/kernel.h accum; cuBLASLt's C is of D's type), so that no f32 sum of (B, T, C)
 * is written, read back and rounded by another kernel.
 * (1) An f32 sum of products (an add tree, each product of 16-bit operands read only by it)
 * read only by its cast y to 16 bits (the gradient of an activation read by several products:
 * LLaMA's normed x by q, k and v, or by gate and up; a LoRA layer's input by the base and the
 * adapter) becomes rnd(p_n + f32(rnd(p_n-1 + ... f32(rnd(p_1))))), the products by their
 * contraction K ascending (ties in graph order): the narrowest rounded first (LoRA's adapter,
 * as autocast rounds its product in the forward), the widest last. Autodiff gave rnd(p_1 + ..
 * + p_n) with one rounding; the chain rounds n times, each partial sum at most half an ulp of
 * itself apart, where torch.autocast rounds every product and every partial sum (2n - 1).
 * Then every GEMM but the first adds the one before as C and stores 16 bits, the last one y
 * itself (a norm's backward then reads it as GPT-2's reads its one product's).
 * (2) A 16-bit gradient adding two rounded products, a wide and a low-rank one (dy W^T and
 * dh' A^T, A of rank r beside the base's W: autodiff rounds each term, rnd(rnd(v) + rnd(c)),
 * what PEFT under torch.autocast computes), becomes rnd(v + f32(rnd(c))): the wide term's
 * rounding dropped. Low rank: the product's contraction K at most SN_LOWRANK_K where the
 * other's is larger. */
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

enum { MAX_TERMS = 8, CHAIN = 0 };

/* The products of the f32 add tree under node a (x itself, or an add read only by its parent
 * add, no output), of x's shape and t operands, into p[*n]; false when a leaf is something
 * else or there are more than MAX_TERMS. */
static bool terms_of(const sn_graph *g, const sn_node *a, const sn_node *x, sn_dtype t,
                     const int *uses, const sn_node **p, int *n) {
    bool inner = a == x || (uses[a->id] == 1 && !kept(g, a));
    if (a->op == SN_OP_ADD && a->dtype == SN_F32 && a->in[0] != a->in[1] && inner)
        return terms_of(g, a->in[0], x, t, uses, p, n) && terms_of(g, a->in[1], x, t, uses, p, n);
    if (*n == MAX_TERMS || !product_of(g, a, x, t, uses)) return false;
    p[(*n)++] = a;
    return true;
}

/* How x is rewritten, or -1: CHAIN, x an f32 sum of products read only by its cast y to 16
 * bits (rule 1 above); 2 or 3, x = add(rnd(p0), rnd(p1)) in 16 bits (the gradient of a 16-bit
 * value: autodiff rounds each term), each cast read only by x, operand (plan - 2) low rank:
 * x becomes rnd(p_wide + f32(rnd(p_low))), the wide term's rounding dropped (rule 2). */
static int plan_of(const sn_graph *g, const sn_node *x, const sn_node *y, const int *uses) {
    if (x->op != SN_OP_ADD || x->in[0] == x->in[1] || kept(g, x)) return -1;
    if (x->dtype == SN_F32) {
        if (uses[x->id] != 1 || !y || y->op != SN_OP_CAST || y->in[0] != x || !is_16(y->dtype))
            return -1;
        const sn_node *p[MAX_TERMS];
        int n = 0;
        return terms_of(g, x, x, y->dtype, uses, p, &n) ? CHAIN : -1;
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

/* Marks the inner adds of an add tree (a, or the adds under it) dropped: the chain replaces
 * them. */
static void drop_adds(const sn_node *a, bool *dropped) {
    if (a->op != SN_OP_ADD) return;
    dropped[a->id] = true;
    drop_adds(a->in[0], dropped);
    drop_adds(a->in[1], dropped);
}

/* Rule 1's chain for the f32 sum x of products (the new graph's, through r's map) rounded to t:
 * returns the last f32 sum, whose cast the copy of x's reader makes. */
static sn_node *chain(sn_rewrite *r, const sn_graph *in, const sn_node *x, sn_dtype t,
                      const int *uses) {
    const sn_node *p[MAX_TERMS];
    int n = 0;
    terms_of(in, x, x, t, uses, p, &n);
    for (int i = 1; i < n; i++) /* K ascending, then graph order (insertion: stable) */
        for (int j = i; j > 0 && contraction(p[j]) < contraction(p[j - 1]); j--) {
            const sn_node *q = p[j];
            p[j] = p[j - 1];
            p[j - 1] = q;
        }
    sn_node *acc = r->map[p[0]->id];
    for (int i = 1; i < n; i++)
        acc = sn_add(r->g, r->map[p[i]->id], sn_cast(r->g, sn_cast(r->g, acc, t), SN_F32));
    return acc;
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
    for (int i = n - 1; i >= 0; i--) { /* a tree's root before its inner adds */
        const sn_node *x = in->nodes[i];
        plan[i] = dropped[i] ? -1 : plan_of(in, x, reader[i], uses);
        *n_rounded += plan[i] >= 0;
        if (plan[i] >= 2) dropped[x->in[1 - (plan[i] - 2)]->id] = true; /* the wide term's cast */
        for (int j = 0; plan[i] == CHAIN && j < 2; j++) drop_adds(x->in[j], dropped);
    }
    sn_status st = SN_OK;
    sn_rewrite r;
    if (*n_rounded && !(st = sn_rewrite_begin(&r, in, e))) {
        for (int i = 0; i < n; i++) {
            const sn_node *x = in->nodes[i];
            if (dropped[i]) continue; /* read by nothing now */
            sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&r, x, ins);
            if (plan[i] == CHAIN) { /* rnd(p_n + f32(rnd(... + f32(rnd(p_1))))) */
                r.map[i] = chain(&r, in, x, reader[i]->dtype, uses);
                continue;
            } else if (plan[i] >= 2) { /* rnd(p_wide + f32(rnd(p_low))), x's dtype */
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
