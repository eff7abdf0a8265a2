/* cuda_attention_wgmma_dq.c: the attention backward's dq products on sm_90's warpgroup MMA,
 * opt-in (SN_ATT_TILES entry "dq=wgmma"; simulated, not yet run on a GPU: docs/attention.md,
 * "wgmma"). The kernel is sn_attm_emit_dq's (cuda_attention_mma_pass.c): one warpgroup (4 warps,
 * 64 queries) over the key tiles its queries see, K and V double-buffered by cp.async into the
 * 128-byte swizzle (rows of 128 bytes: head size 64), Q and dout copied once. Per key tile, as
 * wgmma m64n64k16 with the queries as M:
 *   S = Q K^T and dP = dout V^T   (A and B from shared memory, both K-major along the head),
 *   dS = P (dP - dout_i . o_i), P = 2^(S scale log2 e - lse log2 e)   (registers, the mma.sync
 *   kernel's code: the accumulators are its fragments, s[nt][e] row 16 warp + grp + 8 (e / 2),
 *   key k0 + 8 nt + 2 tig + e % 2),
 *   dQ += dS K   (A from registers, B the key tile MN-major: as copied),
 * each group waited for before its result is read, and dQ's before the stage is refilled. */
#include "cuda_attention_mma.h"

void sn_attw_dq_scores(sn_cu_text *t, const sn_att_plan *p) {
    SN_ASSERT(p->wgmma && p->pass == SN_ATT_DQ && p->warps == 4 && p->rows == 16 && p->tile == 64);
    sn_cu_emitf(t, "/* s = Q K^T, dp = dout V^T (queries x keys), two groups */");
    sn_cu_emitf(t, "float s[BK / 8][4], dp[BK / 8][4];");
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after the last wait */");
    sn_attw_product_ss(t, p, "s", "q_tile", "k_tile", "HEAD_D");
    sn_cu_emitf(t, "sn_wgmma_commit();");
    sn_attw_product_ss(t, p, "dp", "do_tile", "v_tile", "HEAD_DV");
    sn_cu_emitf(t, "sn_wgmma_commit();");
    sn_cu_emitf(t, "sn_wgmma_wait(0);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&s[0][0], BK / 2);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&dp[0][0], BK / 2);");
}

void sn_attw_dq_update(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const unsigned k_at = sn_smem_addr(&k_tile[st][0]);");
    sn_attw_product_rs(t, p, o, "acc", "s", "da", "k_at", "BK");
    sn_cu_emitf(t, "sn_wgmma_wait(0); /* in before the stage is refilled */");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc[0][0], HEAD_D / 2);");
    sn_cu_emitf(t, "}");
}
