/* cuda_attention_wgmma_fwd.c: the sm_90 forward (o and lse) with each tile's softmax overlapped
 * by the warpgroup's products (opt-in, SN_ATT_TILES entry "fwd=wgmma-overlap"; simulated, not
 * yet run on a GPU: docs/attention.md). FlashAttention-3's intra-warpgroup pipelining. Step j:
 * the wait for P V of tile j - 2, O rescaled by tile j - 1's factor and tile j - 1's P packed
 * (pa); the copies (K of tile j + 1, V of tile j: V's copy runs a tile behind K's, so two
 * stages of each suffice, and they come after that wait, which frees V's stage); S of tile j
 * and P V of tile j - 1 issued; the wait for S alone (wgmma.wait_group 1); tile j's max,
 * rescale factor and exponentials while P V runs. The wait for P V opens the next step: at
 * the end of the same step ptxas placed it before the exponentials (sm_90 SASS, 2026-11-29).
 * Tile 0 (S alone) and the last P V are peeled, so no wgmma sits in a branch (ptxas would
 * serialize it); the tiles every row of the block sees whole run in a loop without the mask's
 * branch. The conventions (fragments s[1][8][4] and o_acc[1][8][4], base-2 exponents, the
 * masks) are the wgmma forward's (cuda_attention_wgmma.c); the scale (> 0) is folded into each
 * exponent's fma. */
#include <stdio.h>

#include "cuda_attention_mma.h"

/* Copies of K of tile `kt` (where k_if holds) and of V of tile `vt`, each into its stage
 * (tile % 2), then the commit: one group. */
static void copies(sn_cu_text *t, const char *k_if, const char *kt, const char *vt) {
    sn_cu_emitf(t, "if (%s) {", k_if);
    sn_cu_emitf(t, "const int kn = (%s) * BK, sn = (%s) %% 2 * BK;", kt, kt);
    sn_attm_copy_rows(t, true, "k_tile", "sn", "k", "k_row", "kn", "BK", "HEAD_D", "SEQ_K", true, true);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const int kn = (%s) * BK, sn = (%s) %% 2 * BK;", vt, vt);
    sn_attm_copy_rows(t, true, "v_tile", "sn", "v", "v_row", "kn", "BK", "HEAD_DV", "SEQ_K", true, true);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_cp_async_commit();");
}

/* The top of a step: the group issued in the last step in, visible to wgmma, the stages it
 * frees released by every thread. */
static void step_barrier(sn_cu_text *t) {
    sn_cu_emitf(t, "sn_cp_async_wait_group(0);");
    sn_cu_emitf(t, "sn_fence_proxy_async(); /* the copies, before wgmma reads them */");
    sn_cu_emitf(t, "__syncthreads(); /* the tiles are in; the stages refilled next are read */");
}

/* S = Q K^T of tile `kt` into s (issued and committed, not waited for). */
static void issue_scores(sn_cu_text *t, const sn_att_plan *p, const char *kt) {
    char row[64];
    snprintf(row, sizeof row, "(%s) %% 2 * BK", kt);
    sn_cu_emitf(t, "/* S = Q K^T of tile %s: 4 K steps of 16 along the head */", kt);
    sn_attw_issue_scores(t, p, row);
}

/* O += P V of tile `vt`, P from pa (packed at the top of this step), issued and committed. */
static void issue_pv(sn_cu_text *t, const sn_att_plan *p, const char *vt) {
    char row[64];
    snprintf(row, sizeof row, "(%s) %% 2 * BK", vt);
    sn_cu_emitf(t, "/* O += P V of tile %s: V's rows MN-major, 16 keys a K step */", vt);
    sn_attw_issue_pv(t, p, row);
}

/* Tile `kt`'s softmax once S is in (s): the mask where the tile reaches the diagonal or the
 * end, the tile's max (of the raw scores), the row's new max and alpha[h] (what o_acc and
 * row_sum are rescaled by), the exponentials into s and their sums into row_sum. o_acc is not
 * touched: P V of the last tile may be in flight. */
static void softmax(sn_cu_text *t, const char *kt, bool masked) {
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&s[0][0][0], BK / 2);");
    if (masked) sn_cu_emitf(t, "const int k0 = (%s) * BK;", kt);
    sn_cu_emitf(t, "float tile_max[2] = {-SN_INF, -SN_INF};");
    const char *u[] = {"tile_max[e / 2] = fmaxf(tile_max[e / 2], s[0][nt][e]);"};
    if (!masked) { /* a tile every row of the block sees whole */
        sn_attm_elements(t, "BK / 8", NULL, false, u, 1);
    } else {
        sn_cu_emitf(t, "/* masked: a diagonal or last tile */");
        sn_cu_emitf(t, "if (k0 + BK - 1 > warp_keys || k0 + BK > SEQ_K) {");
        const char *m[] = {"s[0][nt][e] = seen ? s[0][nt][e] : -SN_INF;",
                           "tile_max[e / 2] = fmaxf(tile_max[e / 2], s[0][nt][e]);"};
        sn_attm_elements(t, "BK / 8", "const int i = row0 + e / 2 * 8, j = k0 + nt * 8 + 2 * tig + e % 2;",
                         false, m, 2);
        sn_cu_emitf(t, "} else {");
        sn_attm_elements(t, "BK / 8", NULL, false, u, 1);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "float m_ref[2];");
    sn_cu_emitf(t, "/* online softmax: a row spans the 4 threads of a quad */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "float tm = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));");
    sn_cu_emitf(t, "tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));");
    sn_cu_emitf(t, "const float m_new = fmaxf(row_max[0][h], tm * scale_log2);");
    sn_cu_emitf(t, "m_ref[h] = m_new == -SN_INF ? 0.0f : m_new; /* no key seen yet */");
    sn_cu_emitf(t, "alpha[h] = sn_exp2(row_max[0][h] - m_ref[h]);");
    sn_cu_emitf(t, "row_max[0][h] = m_new;");
    sn_cu_emitf(t, "row_sum[0][h] *= alpha[h];");
    sn_cu_emitf(t, "}");
    const char *x[] = {"s[0][nt][e] = sn_exp2(fmaf(s[0][nt][e], scale_log2, -m_ref[e / 2]));",
                       "row_sum[0][e / 2] += s[0][nt][e]; /* this thread's columns; the quad sums "
                       "at the end */"};
    sn_attm_elements(t, "BK / 8", NULL, false, x, 2);
}

/* Once no P V runs: o_acc rescaled by alpha (the last softmax's), its P (in s) packed into pa. */
static void rescale_and_pack(sn_cu_text *t, sn_attm_ops o) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < HEAD_DV / 8; dt++) {");
    sn_cu_emitf(t, "o_acc[0][dt][0] *= alpha[0], o_acc[0][dt][1] *= alpha[0];");
    sn_cu_emitf(t, "o_acc[0][dt][2] *= alpha[1], o_acc[0][dt][3] *= alpha[1];");
    sn_cu_emitf(t, "}");
    sn_attw_pack(t, o, "pa", "s[0]", "BK");
}

void sn_attw_emit_fwd_overlap(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    SN_ASSERT(p->wgmma && p->overlap && p->out_o && !p->in_lse && p->scale > 0.0f && p->rows == 16);
    sn_cu_emitf(t, "enum { MT = 1, BQ = 16 * WARPS, BK = %d, STAGES = 2, LD = HEAD_D, LDV = HEAD_DV "
                "}; /* rows of 128 bytes, swizzled; K and V double-buffered, V a tile behind */",
                p->tile);
    sn_attm_carve c = sn_attm_carve_begin(t, p);
    sn_attm_tile2(t, &c, "q_tile", (int64_t)p->rows * p->warps, p->D, "BQ", "LD", "");
    sn_attm_tile2(t, &c, "k_tile", (int64_t)p->tile * 2, p->D, "STAGES * BK", "LD", "");
    sn_attm_tile2(t, &c, "v_tile", (int64_t)p->tile * 2, p->Dv, "STAGES * BK", "LDV", "");
    static const char *const qside[][3] = {{"q_tile", "q", "HEAD_D"}};
    sn_attm_key_side_setup(t, p, false, qside, 1); /* Q and K of tile 0: the first group */
    sn_cu_emitf(t, "const int n_tiles = (key_end + BK - 1) / BK; /* at least 1 */");
    sn_cu_emitf(t, "float row_max[1][2] = {{-SN_INF, -SN_INF}}, row_sum[1][2] = {{0.0f, 0.0f}}; "
                "/* base 2: of s scale log2 e */");
    sn_attm_zero_m(t, "o_acc", "HEAD_DV / 8");
    sn_cu_emitf(t, "float s[1][BK / 8][4], alpha[2];");
    sn_cu_emitf(t, "unsigned pa[BK / 16][4]; /* P of the last tile, packed: P V's A */");
    sn_cu_emitf(t, "/* tile 0: S alone */");
    sn_cu_emitf(t, "{");
    step_barrier(t);
    copies(t, "1 < n_tiles", "1", "0");
    issue_scores(t, p, "0");
    sn_cu_emitf(t, "sn_wgmma_wait(0);");
    softmax(t, "0", true);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* the tiles every row of the block sees whole (before the diagonal and the end) */");
    sn_cu_emitf(t, "const int n_whole = max(1, min(n_tiles, min((q0 + SEQ_K - SEQ_Q + 1) / BK, SEQ_K / BK)));");
    for (int masked = 0; masked < 2; masked++) {
        /* the wait for P V of tile j - 2 opens step j: issued right after the softmax, in the
           same step, ptxas put it before the exponentials (sm_90 SASS, 2026-11-29), which
           undid the overlap; across the loop's edge and barrier it stays where it is. Then
           the last tile's rescale and P packed, the copies (V's stage of tile j - 2 free
           only now), S of tile j and P V of tile j - 1 issued, and the softmax of tile j while
           P V runs. The whole tiles' loop has no branch; the masked ones (the diagonal, the
           end) keep the mask's. */
        sn_cu_emitf(t, "/* step j: S of tile j, P V of tile j - 1 under tile j's softmax%s */",
                    masked ? " (the masked tiles)" : "");
        sn_cu_emitf(t, masked ? "for (int j = n_whole; j < n_tiles; j++) {"
                              : "for (int j = 1; j < n_whole; j++) {");
        sn_cu_emitf(t, "sn_wgmma_wait(0); /* P V of tile j - 2 is in: o_acc may be rescaled, pa refilled */");
        sn_cu_emitf(t, "sn_wgmma_fence_operands(&o_acc[0][0][0], HEAD_DV / 2);");
        rescale_and_pack(t, o);
        step_barrier(t);
        copies(t, "j + 1 < n_tiles", "j + 1", "j");
        issue_scores(t, p, "j");
        issue_pv(t, p, "j - 1");
        sn_cu_emitf(t, "sn_wgmma_wait(1); /* S is in; P V may still run */");
        softmax(t, "j", masked);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "/* the last tile's P V */");
    sn_cu_emitf(t, "sn_wgmma_wait(0);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&o_acc[0][0][0], HEAD_DV / 2);");
    rescale_and_pack(t, o);
    step_barrier(t);
    issue_pv(t, p, "n_tiles - 1");
    sn_cu_emitf(t, "sn_wgmma_wait(0);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&o_acc[0][0][0], HEAD_DV / 2);");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "float sum = row_sum[0][h] + __shfl_xor_sync(0xffffffffu, row_sum[0][h], 1);");
    sn_cu_emitf(t, "sum += __shfl_xor_sync(0xffffffffu, sum, 2);");
    sn_cu_emitf(t, "const int i = row0 + 8 * h;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    sn_cu_emitf(t, "const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;");
    sn_attm_store_row(t, o, "o_out", "o_acc[0]", "HEAD_DV / 8", "o_out_row", "inv");
    if (p->out_lse)
        sn_cu_emitf(t, "if (tig == 0) sn_store(&lse_out[i], sum > 0.0f ? (row_max[0][h] + "
                    "log2f(sum)) * 0.693147181f : -SN_INF);");
    sn_cu_emitf(t, "}");
}
