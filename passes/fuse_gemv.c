/* fuse_gemv.c: the few-row product (kernel.h: SN_KER_GEMV): a weight that one matmul of few rows
 * reads, unpacked from NF4 (dequant_nf4) or widened from 16 bits (an f32 cast of a bf16 or f16
 * value), joins that matmul's kernel, which reads the source itself, so the f32 weight has no
 * buffer (no scratch, no cast kernel). Convention: decided after the grouping and before the
 * GEMM epilogues (fuse.c decide), which such a matmul does not take: a bias add after it is a
 * kernel of its own (at few rows a few hundred elements). */
#include "fuse_int.h"

/* Whether w is a weight the product can read from its source: a dequant_nf4 (its dtype x's),
 * or an f32 cast of a 16-bit value with a buffer of its own (a parameter, base16's) that
 * nothing joined (x then f32). */
static bool source_fits(const fuse_state *s, const sn_node *w, const sn_node *x) {
    if (w->op == SN_OP_DEQUANT_NF4)
        return x->dtype == SN_F32 || x->dtype == SN_BF16 || x->dtype == SN_F16;
    if (w->op != SN_OP_CAST || w->dtype != SN_F32 || x->dtype != SN_F32) return false;
    const sn_node *v = w->in[0];
    return (v->dtype == SN_BF16 || v->dtype == SN_F16) && v->rank == 2 && !is_view(v->op) &&
           s->mat[v->id] && s->home[w->id] == w->id && !s->members[w->id];
}

/* Whether matmul mm can read its weight from its source: y = x @ W or x @ W^T (tb; ta never),
 * W of rank 2 read by mm alone, once, and no output; at most SN_GEMV_MAX_M rows of x (batch dims
 * folded), y f32. Larger products (training, a long prefill) keep the dequantize or cast kernel
 * and the GEMM, which wins there (docs/finetune.md). */
static bool fits(const fuse_state *s, const sn_node *mm) {
    if (mm->op != SN_OP_MATMUL || !s->live[mm->id] || mm->a.ta) return false;
    const sn_node *x = mm->in[0], *w = mm->in[1];
    if (s->t && s->t->gemv_nf4_only && (mm->a.tb || w->op != SN_OP_DEQUANT_NF4)) return false;
    if (w->rank != 2 || x == w || s->is_out[w->id] || !source_fits(s, w, x)) return false;
    if (is_view(x->op) && !s->mat[x->id]) return false; /* a GEMM reads it in place instead */
    int reads = 0;
    for (int k = 0; k < s->n_users[w->id]; k++) {
        int u = s->users[w->id][k];
        if (s->live[u] && (u != mm->id || reads++)) return false;
    }
    int64_t K = w->shape[mm->a.tb ? 1 : 0];
    return mm->dtype == SN_F32 && sn_numel(x) / K <= SN_GEMV_MAX_M;
}

void sn_fuse_gemv_decide(fuse_state *s) {
    for (int i = 0; i < s->g->n_nodes; i++) {
        const sn_node *mm = s->g->nodes[i];
        if (!fits(s, mm)) continue;
        s->home[mm->in[1]->id] = mm->id; /* computed, a weight at a time, inside mm's kernel */
        s->mat[mm->in[1]->id] = false;
    }
}

bool sn_fuse_is_gemv(const fuse_state *s, const sn_node *mm) {
    const sn_node *w = mm->op == SN_OP_MATMUL ? mm->in[1] : NULL;
    return w && (w->op == SN_OP_DEQUANT_NF4 || w->op == SN_OP_CAST) && s->home[w->id] == mm->id;
}
