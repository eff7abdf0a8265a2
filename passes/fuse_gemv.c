/* fuse_gemv.c: the NF4 product (kernel.h: SN_KER_NF4_GEMV): a dequant_nf4 that one matmul of
 * few rows reads joins that matmul's kernel, which reads the packed bytes itself, so the
 * unpacked weight has no buffer (no scratch in the plan). Convention: decided after the grouping
 * and before the GEMM epilogues (fuse.c decide), which such a matmul does not take: a bias add
 * after it is a kernel of its own (at few rows a few hundred elements). */
#include "fuse_int.h"

/* Whether matmul mm can read its weight in NF4: y = x @ dequant_nf4(q), neither transposed, the
 * dequantize (K, N) read by mm alone, once, and no output; f32, bf16 or f16 operands; at most
 * SN_NF4_GEMV_MAX_M rows of x (batch dims folded). Larger products (training, a long prefill)
 * keep the dequantize kernel and the GEMM, which wins there (docs/finetune.md). */
static bool fits(const fuse_state *s, const sn_node *mm) {
    if (mm->op != SN_OP_MATMUL || !s->live[mm->id] || mm->a.ta || mm->a.tb) return false;
    const sn_node *x = mm->in[0], *w = mm->in[1];
    if (w->op != SN_OP_DEQUANT_NF4 || w->rank != 2 || x == w || s->is_out[w->id]) return false;
    int reads = 0;
    for (int k = 0; k < s->n_users[w->id]; k++) {
        int u = s->users[w->id][k];
        if (s->live[u] && (u != mm->id || reads++)) return false;
    }
    if (x->dtype != SN_F32 && x->dtype != SN_BF16 && x->dtype != SN_F16) return false;
    return mm->dtype == SN_F32 && sn_numel(x) / w->shape[0] <= SN_NF4_GEMV_MAX_M;
}

void sn_fuse_nf4_gemv_decide(fuse_state *s) {
    for (int i = 0; i < s->g->n_nodes; i++) {
        const sn_node *mm = s->g->nodes[i];
        if (!fits(s, mm)) continue;
        s->home[mm->in[1]->id] = mm->id; /* computed, a weight at a time, inside mm's kernel */
        s->mat[mm->in[1]->id] = false;
    }
}

bool sn_fuse_is_nf4_gemv(const fuse_state *s, const sn_node *mm) {
    return mm->op == SN_OP_MATMUL && mm->in[1]->op == SN_OP_DEQUANT_NF4 &&
           s->home[mm->in[1]->id] == mm->id;
}
