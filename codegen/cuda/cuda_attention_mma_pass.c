/* cuda_attention_mma_pass.c: the tensor-core attention kernels of each pass, written with the
 * pieces of cuda_attention_mma.c: the forward and dq (a block of query rows over the key tiles
 * they see, streamed), and dk/dv (a block of keys over the query tiles that see them, of each
 * query head of the group). The conventions are cuda_attention_mma.c's. The sm_90 wgmma
 * forward, dq and dk/dv kernels (p->wgmma) are these kernels with their products from
 * cuda_attention_wgmma.c, cuda_attention_wgmma_dq.c and cuda_attention_wgmma_dkv.c and their
 * tiles swizzled. */
#include <stdio.h>

#include "cuda_attention_mma.h"

/* The streamed tile loop of FWD and DQ over the key tiles the block's queries see: opens the
 * body, in which `st` is the tile's first row in k_tile and v_tile (v: with_v). */
static void open_key_loop(sn_cu_text *t, const sn_att_plan *p, bool with_v) {
    bool async = p->stages == 2;
    sn_cu_emitf(t, "for (int k0 = 0, it = 0; k0 < key_end; k0 += BK, it++) {");
    if (async) {
        sn_cu_emitf(t, "const int st = it %% 2 * BK; /* this tile's rows in the stages */");
        sn_cu_emitf(t, "sn_cp_async_wait_group(0);");
        if (p->wgmma) sn_cu_emitf(t, "sn_fence_proxy_async(); /* the copies, before wgmma reads them */");
        sn_cu_emitf(t, "__syncthreads(); /* the tile is in for every thread; the other stage's "
                    "readers are done */");
        sn_cu_emitf(t, "/* the next tile, landing while this one is used */");
        sn_cu_emitf(t, "if (k0 + BK < key_end) {");
        sn_cu_emitf(t, "const int kn = k0 + BK, sn = BK - st;");
    } else {
        sn_cu_emitf(t, "const int st = 0;");
        sn_cu_emitf(t, "__syncthreads(); /* the previous tiles are used up */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const int kn = k0, sn = 0;");
    }
    sn_attm_copy_rows(t, async, "k_tile", "sn", "k", "k_row", "kn", "BK", "HEAD_D", "SEQ_K", p->wgmma, true);
    if (with_v) sn_attm_copy_rows(t, async, "v_tile", "sn", "v", "v_row", "kn", "BK", "HEAD_DV", "SEQ_K", p->wgmma, true);
    sn_cu_emitf(t, "}");
    if (async) sn_cu_emitf(t, "sn_cp_async_commit();");
    else sn_cu_emitf(t, "__syncthreads();");
}

/* FWD and DQ: the block's rows, the causal key range, the first tile's copies (with the q-side
 * tiles of `qside`, named tile, source, columns). */
void sn_attm_key_side_setup(sn_cu_text *t, const sn_att_plan *p, bool with_v,
                            const char *const qside[][3], int n_qside) {
    bool async = p->stages == 2;
    sn_cu_emitf(t, "const float scale_log2 = scale * 1.44269504f; /* exponents in base 2 */");
    sn_cu_emitf(t, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* the longest rows first */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int row0 = q0 + warp * 16 * MT + grp; /* this thread's rows: row0, row0 + "
                "8 (and 16 more an m-tile) */");
    sn_cu_emitf(t, "/* causal: the block's last query sees keys up to q_last + SEQ_K - SEQ_Q */");
    sn_cu_emitf(t, "const int q_last = min(q0 + BQ, (int)SEQ_Q) - 1;");
    sn_cu_emitf(t, "const int key_end = min((int)SEQ_K, q_last + SEQ_K - SEQ_Q + 1);");
    sn_cu_emitf(t, "/* the warp's first row sees keys up to warp_keys: a tile past it is masked */");
    sn_cu_emitf(t, "const int warp_keys = q0 + warp * 16 * MT + (SEQ_K - SEQ_Q);");
    for (int i = 0; i < n_qside; i++) {
        char row[32];
        snprintf(row, sizeof row, "%s_row", qside[i][1]);
        sn_attm_copy_rows(t, async, qside[i][0], "0", qside[i][1], row, "q0", "BQ", qside[i][2], "SEQ_Q", p->wgmma, true);
    }
    if (async) {
        sn_cu_emitf(t, "/* the first key tile joins the query tiles' group */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const int kn = 0;");
        sn_attm_copy_rows(t, true, "k_tile", "0", "k", "k_row", "kn", "BK", "HEAD_D", "SEQ_K", p->wgmma, true);
        if (with_v) sn_attm_copy_rows(t, true, "v_tile", "0", "v", "v_row", "kn", "BK", "HEAD_DV", "SEQ_K", p->wgmma, true);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_cp_async_commit();");
    }
}

static void sn_attm_enum(sn_cu_text *t, const sn_att_plan *p, const char *own, const char *streamed) {
    sn_cu_emitf(t, "enum { MT = %d, %s = 16 * MT * WARPS, %s = %d, STAGES = %d, LD = HEAD_D%s, "
                "LDV = HEAD_DV%s }; /* MT m-tiles of 16 rows a warp; %s */", p->rows / 16, own,
                streamed, p->tile, p->stages, p->wgmma ? "" : " + 8", p->wgmma ? "" : " + 8",
                p->wgmma ? "rows of 128 bytes, swizzled" : "rows padded by 16 bytes");
}

void sn_attm_emit_fwd(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    if (p->overlap) {
        sn_attw_emit_fwd_overlap(t, p, o);
        return;
    }
    const int fold = p->scale > 0.0f; /* the scale folded into each exponent's fma */
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages,
            LD = p->D + (p->wgmma ? 0 : 8), LDV = p->Dv + (p->wgmma ? 0 : 8);
    sn_attm_enum(t, p, "BQ", "BK");
    sn_attm_carve c = sn_attm_carve_begin(t, p);
    sn_attm_tile2(t, &c, "q_tile", own, LD, "BQ", "LD", "");
    sn_attm_tile2(t, &c, "k_tile", W, LD, "STAGES * BK", "LD", "");
    if (p->out_o) sn_attm_tile2(t, &c, "v_tile", W, LDV, "STAGES * BK", "LDV", "");
    static const char *const qside[][3] = {{"q_tile", "q", "HEAD_D"}};
    sn_attm_key_side_setup(t, p, p->out_o, qside, 1);
    sn_cu_emitf(t, "/* m-tile m's rows of this thread: row0 + 16 m, row0 + 16 m + 8 (h = 1) */");
    sn_cu_emitf(t, "float row_max[MT][2], row_sum[MT][2]; /* base 2: of s scale log2 e */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "row_sum[m][h] = 0.0f;");
    if (p->in_lse)
        sn_cu_emitf(t, "row_max[m][h] = row0 + 16 * m + 8 * h < SEQ_Q ? sn_load(lse[row0 + 16 * "
                    "m + 8 * h]) * 1.44269504f : 0.0f; /* given: p = 2^(s scale log2 e - lse "
                    "log2 e) */");
    else
        sn_cu_emitf(t, "row_max[m][h] = -SN_INF;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    if (p->out_o) sn_attm_zero_m(t, "o_acc", "HEAD_DV / 8");
    open_key_loop(t, p, p->out_o);
    if (p->wgmma) {
        sn_attw_scores(t, p);
    } else {
        sn_attm_zero_m(t, "s", "BK / 8");
        sn_attm_abt_m(t, o, "s", "q_tile", "warp * 16 * MT", "k_tile", "st", "HEAD_D", "BK / 8");
    }
    sn_cu_emitf(t, "/* scale (and mask): s[m][nt][e] is row row0 + 16 m + 8 (e / 2), key k0 + nt * "
                "8 + 2 tig + e %% 2 */");
    if (!p->in_lse) {
        sn_cu_emitf(t, "float tile_max[MT][2];");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < MT; m++) tile_max[m][0] = tile_max[m][1] = -SN_INF;");
    }
    const char *coords = "const int i = row0 + 16 * m + e / 2 * 8, j = k0 + nt * 8 + 2 * tig + e % 2;";
    sn_cu_emitf(t, "/* masked: a diagonal or last tile */");
    sn_cu_emitf(t, "if (k0 + BK - 1 > warp_keys || k0 + BK > SEQ_K) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    if (p->in_lse) {
        const char *m[] = {"s[m][nt][e] = seen ? sn_exp2(fmaf(s[m][nt][e], scale_log2, -row_max[m][e / 2])) : 0.0f;"};
        sn_attm_elements(t, "BK / 8", coords, false, m, 1);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "} else {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
        const char *u[] = {"s[m][nt][e] = sn_exp2(fmaf(s[m][nt][e], scale_log2, -row_max[m][e / 2]));"};
        sn_attm_elements(t, "BK / 8", NULL, false, u, 1);
    } else {
        /* folded: the max of the scores as they are, scaled once (scale > 0: the same max),
         * each exponent one fma (2026-11-29: a multiply an element fewer) */
        const char *m[] = {fold ? "s[m][nt][e] = seen ? s[m][nt][e] : -SN_INF;"
                                : "s[m][nt][e] = seen ? s[m][nt][e] * scale_log2 : -SN_INF;",
                           "tile_max[m][e / 2] = fmaxf(tile_max[m][e / 2], s[m][nt][e]);"};
        sn_attm_elements(t, "BK / 8", coords, false, m, 2);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "} else {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
        const char *u[] = {"s[m][nt][e] *= scale_log2;",
                           "tile_max[m][e / 2] = fmaxf(tile_max[m][e / 2], s[m][nt][e]);"};
        sn_attm_elements(t, "BK / 8", NULL, false, u + fold, 2 - fold);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    if (!p->in_lse) {
        sn_cu_emitf(t, "/* online softmax: a row spans the 4 threads of a quad */");
        sn_cu_emitf(t, "float m_ref[MT][2];");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
        sn_cu_emitf(t, "float tm = fmaxf(tile_max[m][h], __shfl_xor_sync(0xffffffffu, tile_max[m][h], 1));");
        sn_cu_emitf(t, "tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));");
        sn_cu_emitf(t, "const float m_new = fmaxf(row_max[m][h], tm%s);", fold ? " * scale_log2" : "");
        sn_cu_emitf(t, "m_ref[m][h] = m_new == -SN_INF ? 0.0f : m_new; /* no key seen yet */");
        sn_cu_emitf(t, "const float alpha = sn_exp2(row_max[m][h] - m_ref[m][h]);");
        sn_cu_emitf(t, "row_max[m][h] = m_new;");
        sn_cu_emitf(t, "row_sum[m][h] *= alpha;");
        if (p->out_o) {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int dt = 0; dt < HEAD_DV / 8; dt++) {");
            sn_cu_emitf(t, "o_acc[m][dt][2 * h] *= alpha;");
            sn_cu_emitf(t, "o_acc[m][dt][2 * h + 1] *= alpha;");
            sn_cu_emitf(t, "}");
        }
        sn_cu_emitf(t, "}");
        const char *x[] = {fold ? "s[m][nt][e] = sn_exp2(fmaf(s[m][nt][e], scale_log2, -m_ref[m][e / 2]));"
                                : "s[m][nt][e] = sn_exp2(s[m][nt][e] - m_ref[m][e / 2]);",
                           "row_sum[m][e / 2] += s[m][nt][e]; /* this thread's columns; the quad "
                           "sums at the end */"};
        sn_attm_elements(t, "BK / 8", NULL, false, x, 2);
        sn_cu_emitf(t, "}");
    }
    if (p->out_o) {
        sn_cu_emitf(t, "/* o += P V */");
        if (p->wgmma) sn_attw_pv(t, p, o);
        else sn_attm_xb_m(t, o, "o_acc", "s", "v_tile", "st", "BK / 16", "HEAD_DV / 8");
    }
    sn_cu_emitf(t, "}");
    if (p->stages == 2) sn_cu_emitf(t, "sn_cp_async_wait_all(); /* none left in flight */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "float sum = row_sum[m][h] + __shfl_xor_sync(0xffffffffu, row_sum[m][h], 1);");
    sn_cu_emitf(t, "sum += __shfl_xor_sync(0xffffffffu, sum, 2);");
    sn_cu_emitf(t, "const int i = row0 + 16 * m + 8 * h;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    if (p->out_o) {
        if (p->in_lse) sn_cu_emitf(t, "const float inv = 1.0f;");
        else sn_cu_emitf(t, "const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;");
        sn_attm_store_row(t, o, "o_out", "o_acc[m]", "HEAD_DV / 8", "o_out_row", "inv");
    }
    if (p->out_lse)
        sn_cu_emitf(t, "if (tig == 0) sn_store(&lse_out[i], sum > 0.0f ? (row_max[m][h] + "
                    "log2f(sum)) * 0.693147181f : -SN_INF);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

void sn_attm_emit_dq(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages,
            LD = p->D + (p->wgmma ? 0 : 8), LDV = p->Dv + (p->wgmma ? 0 : 8);
    sn_attm_enum(t, p, "BQ", "BK");
    sn_attm_carve c = sn_attm_carve_begin(t, p);
    sn_attm_tile2(t, &c, "q_tile", own, LD, "BQ", "LD", "");
    sn_attm_tile2(t, &c, "do_tile", own, LDV, "BQ", "LDV", "");
    sn_attm_tile2(t, &c, "k_tile", W, LD, "STAGES * BK", "LD", "");
    sn_attm_tile2(t, &c, "v_tile", W, LDV, "STAGES * BK", "LDV", "");
    sn_attm_floats(t, &c, "dot_rows", own, "BQ", " /* dout_i . o_i of the block's rows */");
    static const char *const qside[][3] = {{"q_tile", "q", "HEAD_D"}, {"do_tile", "dout", "HEAD_DV"}};
    sn_attm_key_side_setup(t, p, true, qside, 2);
    sn_attm_tile_dots(t, p, "dot_rows", "BQ", "q0", "dout + (long long)i * dout_row + c",
                      "o + (long long)i * o_row + c", false);
    sn_cu_emitf(t, "float row_lse[2]; /* base 2 */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) row_lse[h] = row0 + 8 * h < SEQ_Q ? "
                "sn_load(lse[row0 + 8 * h]) * 1.44269504f : 0.0f;");
    sn_attm_zero(t, "acc", "HEAD_D / 8");
    open_key_loop(t, p, true);
    sn_cu_emitf(t, "const float row_dot[2] = {dot_rows[warp * 16 + grp], dot_rows[warp * 16 + "
                "grp + 8]};");
    if (p->wgmma) {
        sn_attw_dq_scores(t, p);
    } else {
        sn_cu_emitf(t, "/* s = Q K^T, dp = dout V^T */");
        sn_attm_zero(t, "s", "BK / 8");
        sn_attm_zero(t, "dp", "BK / 8");
        sn_attm_abt(t, o, "s", "q_tile", "warp * 16", "k_tile", "st", "HEAD_D", "BK / 8");
        sn_attm_abt(t, o, "dp", "do_tile", "warp * 16", "v_tile", "st", "HEAD_DV", "BK / 8");
    }
    sn_cu_emitf(t, "/* ds = P (dp - dout_i . o_i), P = 2^(s scale log2 e - lse log2 e), masked "
                "on a diagonal or last tile; in s */");
    sn_cu_emitf(t, "if (k0 + BK - 1 > warp_keys || k0 + BK > SEQ_K || q0 + warp * 16 + 16 > SEQ_Q) {");
    const char *m[] = {"s[nt][e] = seen ? sn_exp2(fmaf(s[nt][e], scale_log2, -row_lse[e / 2])) * "
                       "(dp[nt][e] - row_dot[e / 2]) : 0.0f;"};
    sn_attm_elements(t, "BK / 8", "const int i = row0 + e / 2 * 8, j = k0 + nt * 8 + 2 * tig + e % 2;",
             true, m, 1);
    sn_cu_emitf(t, "} else {");
    const char *u[] = {"s[nt][e] = sn_exp2(fmaf(s[nt][e], scale_log2, -row_lse[e / 2])) * (dp[nt][e] - "
                       "row_dot[e / 2]);"};
    sn_attm_elements(t, "BK / 8", NULL, true, u, 1);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* dq += ds K */");
    if (p->wgmma) sn_attw_dq_update(t, p, o);
    else sn_attm_xb(t, o, "acc", "s", "k_tile", "st", "BK / 16", "HEAD_D / 8", true);
    sn_cu_emitf(t, "}");
    if (p->stages == 2) sn_cu_emitf(t, "sn_cp_async_wait_all(); /* none left in flight */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "const int i = row0 + 8 * h;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    sn_attm_store_row(t, o, "dq", "acc", "HEAD_D / 8", "dq_row", "scale");
    sn_cu_emitf(t, "}");
}

/* Whether the tile copies are unrolled (sn_attm_copy_rows): all but the mma.sync dk/dv kernel of
 * the atomic dq, which spilled at its cap of 3 blocks an SM so (sm_90, 2026-11-29). */
bool sn_attm_copies_unrolled(const sn_att_plan *p) { return !p->dq_atomic || p->wgmma; }

void sn_attm_copy_query_tile(sn_cu_text *t, const sn_att_plan *p, bool async, const char *trow) {
    const char *srcs[][4] = {{"q_tile", "q", "HEAD_D", "q_row"},
                             {"do_tile", "dout", "HEAD_DV", "dout_row"},
                             {"o_tile", "o", "HEAD_DV", "o_row"}};
    for (int i = 0; i < (p->out_dk && !p->dq_atomic ? 3 : 2); i++) {
        char src[64];
        if (sn_att_group_loop(p))
            snprintf(src, sizeof src, "(%s_group + gn * %s_head)", srcs[i][1], srcs[i][1]);
        else snprintf(src, sizeof src, "%s", srcs[i][1]);
        sn_attm_copy_rows(t, async, srcs[i][0], trow, src, srcs[i][3], "qn", "BQ", srcs[i][2], "SEQ_Q",
                          p->wgmma, sn_attm_copies_unrolled(p));
    }
}

/* The pointer dq_sums to the atomic dq's f32 sums of query head g of the group (the scratch:
 * the buffer after the args). */
void sn_attm_dq_sums(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "/* dq's f32 sums of query head g of the group (not bit-deterministic: the "
                "order of the adds varies) */");
    if (p->G > 1)
        sn_cu_emitf(t, "float *const dq_sums = a%d + ((long long)item * %lld + g) * SEQ_Q * HEAD_D;",
                    p->k->n_out + p->k->n_in, (long long)p->G);
    else /* g is 0: not kept live for this */
        sn_cu_emitf(t, "float *const dq_sums = a%d + (long long)item * SEQ_Q * HEAD_D;",
                    p->k->n_out + p->k->n_in);
}

/* dq_sums += scale acc: acc[dt][e] (a warp's m16n8 fragments, ntiles of them) is query qs + row0
 * + grp + 8 (e / 2), column col0 + dt * 8 + 2 tig + e % 2. */
void sn_attm_dq_adds(sn_cu_text *t, const char *acc, const char *row0, const char *col0,
                     const char *ntiles) {
    sn_cu_emitf(t, "/* %s[dt][e]: query qs + %s + grp + 8 (e / 2), column %s + dt * 8 + "
                "2 tig + e %% 2; threads tig and tig ^ 1 trade a row's pair, so that the even one "
                "adds 4 columns of row grp, the odd one 4 of row grp + 8, as one reduction */",
                acc, row0, col0);
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const bool odd = tig & 1;");
    sn_cu_emitf(t, "const int i = qs + %s + grp + (odd ? 8 : 0);", row0);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt++) {", ntiles);
    sn_cu_emitf(t, "const float v0 = %s[dt][0] * scale, v1 = %s[dt][1] * scale;", acc, acc);
    sn_cu_emitf(t, "const float v2 = %s[dt][2] * scale, v3 = %s[dt][3] * scale;", acc, acc);
    sn_cu_emitf(t, "const float got0 = __shfl_xor_sync(0xffffffffu, odd ? v0 : v2, 1);");
    sn_cu_emitf(t, "const float got1 = __shfl_xor_sync(0xffffffffu, odd ? v1 : v3, 1);");
    sn_cu_emitf(t, "if (i < SEQ_Q)");
    sn_cu_emitf(t, "    sn_red_add_f32x4(dq_sums + (long long)i * HEAD_D + %s + dt * 8 + 2 * (tig & 2), "
                "odd ? got0 : v0, odd ? got1 : v1, odd ? v2 : got0, odd ? v3 : got1);", col0);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* DKV's atomic dq, after dk's product of the query tile (qs, head g): dS (dp, keys x queries
 * in accumulator fragments) into ds_tile, then dq(tile) += scale dS^T K by the block, a warp an
 * m-tile of 16 queries, its fragments added to dq's f32 sums with atomic adds: 4 columns a
 * thread, from a trade with its neighbour, as one sn_red_add_f32x4 (one vector reduction on
 * sm_90; on an H200 the backward took 0.603 ms with a scalar atomicAdd an element, 0.479 with
 * pairs, 0.474-0.478 so). ds_tile is a tile of its own (it was o_tile's stage while the
 * kernel took the dots itself: 74240 bytes at D = 64, now 65024). */
static void emit_dq_atomic(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    sn_cu_emitf(t, "/* dq += scale dS^T K: dS through shared memory (keys x queries), then "
                "transposed by ldmatrix .trans */");
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < BQ / 8; nt++) {");
    sn_cu_emitf(t, "*reinterpret_cast<unsigned *>(&ds_tile[warp * 16 + grp][nt * 8 + 2 * tig]) = "
                "%s(dp[nt][0], dp[nt][1]);", o.pack);
    sn_cu_emitf(t, "*reinterpret_cast<unsigned *>(&ds_tile[warp * 16 + grp + 8][nt * 8 + 2 * tig]) = "
                "%s(dp[nt][2], dp[nt][3]);", o.pack);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads(); /* every warp's keys of dS are in */");
    sn_attm_dq_sums(t, p);
    sn_cu_emitf(t, "/* an m-tile of 16 queries a warp */");
    sn_cu_emitf(t, "for (int mt = warp; mt < BQ / 16; mt += WARPS) {");
    sn_cu_emitf(t, "/* DQ_COLS columns of dq at a time: few accumulators live beside dk's and dv's */");
    sn_cu_emitf(t, "#pragma unroll 1");
    sn_cu_emitf(t, "for (int d0 = 0; d0 < HEAD_D; d0 += DQ_COLS) {");
    sn_attm_zero(t, "acc_q", "DQ_COLS / 8");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BK / 16; kk++) {");
    sn_cu_emitf(t, "/* A = dS^T (queries mt * 16 .., keys kk * 16 ..) from ds_tile, stored (keys, "
                "queries): matrices (queries 0-7 | 8-15) x (keys 0-7 | 8-15), transposed */");
    sn_cu_emitf(t, "unsigned a[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4_trans(a, &ds_tile[kk * 16 + lane / 16 * 8 + lane %% 8][mt * 16 + "
                "lane / 8 %% 2 * 8]);");
    sn_cu_emitf(t, "/* B = K (keys kk * 16 .., columns dt * 8 ..), row-major (k, n): two n-tiles "
                "an ldmatrix x4 .trans */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < DQ_COLS / 8; dt += 2) {");
    sn_cu_emitf(t, "unsigned b[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4_trans(b, &k_tile[kk * 16 + lane %% 16][d0 + dt * 8 + lane / 16 * 8]);");
    sn_cu_emitf(t, "%s(acc_q[dt], a, b);", o.mma);
    sn_cu_emitf(t, "%s(acc_q[dt + 1], a, b + 2);", o.mma);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_attm_dq_adds(t, "acc_q", "mt * 16", "d0", "DQ_COLS / 8");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

static void close_dkv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o);

void sn_attm_emit_dkv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    bool dk = p->out_dk, dv = p->out_dv, async = p->stages == 2, group = sn_att_group_loop(p);
    SN_ASSERT(p->tile <= 32 * p->warps); /* a thread per query of the tile holds its lse */
    sn_attm_enum(t, p, "BK", "BQ");
    sn_cu_emitf(t, "const float scale_log2 = scale * 1.44269504f; /* exponents in base 2 */");
    sn_cu_emitf(t, "const int k0 = blockIdx.x * BK; /* the first keys have the most queries */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int key0 = k0 + warp * 16 + grp; /* this thread's keys: key0, key0 + 8 */");
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages,
            LD = p->D + (p->wgmma ? 0 : 8), LDV = p->Dv + (p->wgmma ? 0 : 8);
    sn_attm_carve c = sn_attm_carve_begin(t, p);
    sn_attm_tile2(t, &c, "k_tile", own, LD, "BK", "LD", "");
    if (dk) sn_attm_tile2(t, &c, "v_tile", own, LDV, "BK", "LDV", "");
    sn_attm_tile2(t, &c, "q_tile", W, LD, "STAGES * BQ", "LD", "");
    sn_attm_tile2(t, &c, "do_tile", W, LDV, "STAGES * BQ", "LDV", "");
    if (dk && !p->dq_atomic) sn_attm_tile2(t, &c, "o_tile", W, LDV, "STAGES * BQ", "LDV", " /* for the dots */");
    if (p->dq_atomic) {
        SN_ASSERT(dk); /* dS is dk's */
        if (p->wgmma)
            sn_cu_emitf(t, "enum { LDS = BQ }; /* ds_tile's rows: queries, swizzled as the tiles */");
        else
            sn_cu_emitf(t, "enum { LDS = BQ + 8, DQ_COLS = %d }; /* ds_tile's rows: queries, padded by "
                        "16 bytes; dq's columns a pass */", p->D % 32 == 0 && p->D <= 64 ? 32 : 16);
        sn_attm_tile2(t, &c, "ds_tile", own, p->tile + (p->wgmma ? 0 : 8), "BK", "LDS",
                      " /* dS, keys x queries */");
    }
    sn_attm_floats(t, &c, "lse_tile", p->tile, "BQ", " /* base 2 */");
    if (dk) sn_attm_floats(t, &c, "dot_tile", p->tile, "BQ", " /* dout_i . o_i */");
    if (p->dq_atomic) /* after dq's sums: q's slices x SEQ_Q */
        sn_cu_emitf(t, "const float *const dots_group = a%d + %lldll + (long long)item * %lld * SEQ_Q; "
                    "/* the dots of the %s (the zero kernel's) */", p->k->n_out + p->k->n_in,
                    (long long)sn_numel(p->n->in[0]), (long long)(group ? p->G : 1),
                    group ? "group's first query head" : "item");
    sn_cu_emitf(t, "/* causal: query i sees key j when i >= j - (SEQ_K - SEQ_Q); the query tiles "
                "from q_begin, of each query head of the group in order */");
    sn_cu_emitf(t, "const int q_begin = max(0, k0 - (SEQ_K - SEQ_Q)) / BQ * BQ;");
    sn_cu_emitf(t, "const int per_head = q_begin < SEQ_Q ? (SEQ_Q - q_begin + BQ - 1) / BQ : 0;");
    sn_cu_emitf(t, "const int n_tiles = %lld * per_head;", (long long)(group ? p->G : 1));
    sn_cu_emitf(t, "/* a query tile whose first query misses the warp's last key is masked */");
    sn_cu_emitf(t, "const int warp_queries = k0 + warp * 16 + 15 - (SEQ_K - SEQ_Q);");
    sn_attm_copy_rows(t, async, "k_tile", "0", "k", "k_row", "k0", "BK", "HEAD_D", "SEQ_K", p->wgmma, sn_attm_copies_unrolled(p));
    if (dk)
        sn_attm_copy_rows(t, async, "v_tile", "0", "v", "v_row", "k0", "BK", "HEAD_DV", "SEQ_K", p->wgmma, sn_attm_copies_unrolled(p));
    if (async) {
        sn_cu_emitf(t, "/* the first query tile joins the key tiles' group */");
        sn_cu_emitf(t, "if (n_tiles > 0) {");
        sn_cu_emitf(t, "const int gn = 0, qn = q_begin;");
        if (!group) sn_cu_emitf(t, "(void)gn;");
        sn_attm_copy_query_tile(t, p, true, "0");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_cp_async_commit();");
        sn_cu_emitf(t, "/* the lse (base 2) of the tile's query threadIdx.x, one tile ahead */");
        sn_cu_emitf(t, "float lse_next = threadIdx.x < BQ && q_begin + (int)threadIdx.x < SEQ_Q && "
                    "n_tiles > 0 ? sn_load(%s[q_begin + threadIdx.x]) * 1.44269504f : 0.0f;",
                    group ? "lse_group" : "lse");
        if (p->dq_atomic)
            sn_cu_emitf(t, "float dot_next = threadIdx.x < BQ && q_begin + (int)threadIdx.x < SEQ_Q && "
                        "n_tiles > 0 ? dots_group[q_begin + threadIdx.x] : 0.0f;");
    }
    if (dk) sn_attm_zero(t, "acc_k", "HEAD_D / 8");
    if (dv) sn_attm_zero(t, "acc_v", "HEAD_DV / 8");
    sn_cu_emitf(t, "for (int tq = 0; tq < n_tiles; tq++) {");
    sn_cu_emitf(t, "const int g = tq / per_head, qs = q_begin + tq %% per_head * BQ;");
    if (group && !async) {
        sn_cu_emitf(t, "/* grouped-query attention: query head g of the group */");
        sn_cu_emitf(t, "const %s *lse = lse_group + g * lse_head;", sn_att_ctype(SN_F32));
    } else {
        sn_cu_emitf(t, "(void)g;");
    }
    if (async) {
        sn_cu_emitf(t, "const float lse_here = lse_next;");
        if (p->dq_atomic) sn_cu_emitf(t, "const float dot_here = dot_next;");
        sn_cu_emitf(t, "const int st = tq %% 2 * BQ; /* this tile's rows in the stages */");
        sn_cu_emitf(t, "sn_cp_async_wait_group(0);");
        if (p->wgmma) sn_cu_emitf(t, "sn_fence_proxy_async(); /* the copies, before wgmma reads them */");
        sn_cu_emitf(t, "__syncthreads(); /* the tile is in for every thread; the other stage's "
                    "readers are done */");
        sn_cu_emitf(t, "/* the next tile, landing while this one is used */");
        sn_cu_emitf(t, "if (tq + 1 < n_tiles) {");
        sn_cu_emitf(t, "const int gn = (tq + 1) / per_head, qn = q_begin + (tq + 1) %% per_head * BQ;");
        if (!group) sn_cu_emitf(t, "(void)gn;");
        sn_attm_copy_query_tile(t, p, true, "BQ - st");
        sn_cu_emitf(t, "const int r = threadIdx.x;");
        sn_cu_emitf(t, "if (r < BQ) lse_next = qn + r < SEQ_Q ? sn_load(%s[qn + r]) * "
                    "1.44269504f : 0.0f; /* read at the next tile: its latency hidden */",
                    group ? "(lse_group + gn * lse_head)" : "lse");
        if (p->dq_atomic)
            sn_cu_emitf(t, "if (r < BQ) dot_next = qn + r < SEQ_Q ? dots_group[%sqn + r] : 0.0f;",
                        group ? "gn * SEQ_Q + " : "");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_cp_async_commit();");
    } else {
        sn_cu_emitf(t, "const int st = 0;");
        sn_cu_emitf(t, "__syncthreads(); /* the previous query tile is used up */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const int gn = g, qn = qs;");
        if (!group) sn_cu_emitf(t, "(void)gn;");
        sn_attm_copy_query_tile(t, p, false, "st");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "__syncthreads();");
    }
    sn_cu_emitf(t, "/* the tile's lse (base 2)%s */", dk ? " and dots dout_i . o_i" : "");
    if (async)
        sn_cu_emitf(t, "if (threadIdx.x < BQ) lse_tile[threadIdx.x] = lse_here;");
    else
        sn_cu_emitf(t, "for (int r = threadIdx.x; r < BQ; r += THREADS) lse_tile[r] = qs + r < "
                    "SEQ_Q ? sn_load(lse[qs + r]) * 1.44269504f : 0.0f;");
    if (p->dq_atomic && async) /* the zero kernel's dots */
        sn_cu_emitf(t, "if (threadIdx.x < BQ) dot_tile[threadIdx.x] = dot_here;");
    else if (p->dq_atomic)
        sn_cu_emitf(t, "for (int r = threadIdx.x; r < BQ; r += THREADS) dot_tile[r] = qs + r < "
                    "SEQ_Q ? dots_group[%sqs + r] : 0.0f;", group ? "g * SEQ_Q + " : "");
    else if (dk && p->wgmma) /* 16-byte chunk c / 8 of row r sits at chunk (c / 8) ^ (r % 8) */
        sn_attm_tile_dots(t, p, "dot_tile", "BQ", "qs", "&do_tile[st + r][c ^ r % 8 * 8]",
                          "&o_tile[st + r][c ^ r % 8 * 8]", true);
    else if (dk)
        sn_attm_tile_dots(t, p, "dot_tile", "BQ", "qs", "&do_tile[st + r][c]", "&o_tile[st + r][c]",
                          false);
    sn_cu_emitf(t, "__syncthreads();");
    if (p->wgmma) {
        sn_attw_dkv_products(t, p, o);
        close_dkv(t, p, o);
        return;
    }
    sn_cu_emitf(t, "/* s = K Q^T (keys x queries)%s */", dk ? ", dp = V dout^T" : "");
    sn_attm_zero(t, "s", "BQ / 8");
    sn_attm_abt(t, o, "s", "k_tile", "warp * 16", "q_tile", "st", "HEAD_D", "BQ / 8");
    if (dk) {
        sn_attm_zero(t, "dp", "BQ / 8");
        sn_attm_abt(t, o, "dp", "v_tile", "warp * 16", "do_tile", "st", "HEAD_DV", "BQ / 8");
    }
    sn_attm_dkv_p(t, dk);
    if (dv) {
        sn_cu_emitf(t, "/* dv += P dout */");
        sn_attm_xb(t, o, "acc_v", "s", "do_tile", "st", "BQ / 16", "HEAD_DV / 8", false);
    }
    if (dk) {
        sn_cu_emitf(t, "/* dk += ds Q */");
        sn_attm_xb(t, o, "acc_k", "dp", "q_tile", "st", "BQ / 16", "HEAD_D / 8", false);
    }
    if (p->dq_atomic) emit_dq_atomic(t, p, o);
    close_dkv(t, p, o);
}

void sn_attm_dkv_p(sn_cu_text *t, bool ds) {
    sn_cu_emitf(t, "/* P = 2^(s scale log2 e - lse log2 e), masked on a diagonal or last tile, "
                "in s%s */", ds ? "; ds = P (dp - dout_i . o_i), in dp" : "");
    sn_cu_emitf(t, "if (qs < warp_queries || qs + BQ > SEQ_Q || k0 + warp * 16 + 16 > SEQ_K) {");
    const char *coords = "const int j = key0 + e / 2 * 8, r = nt * 8 + 2 * tig + e % 2, i = qs + r;";
    const char *m[] = {"s[nt][e] = seen ? sn_exp2(fmaf(s[nt][e], scale_log2, -lse_tile[r])) : 0.0f;",
                       "dp[nt][e] = s[nt][e] * (dp[nt][e] - dot_tile[r]);"};
    sn_attm_elements(t, "BQ / 8", coords, true, m, ds ? 2 : 1);
    sn_cu_emitf(t, "} else {");
    const char *u[] = {"const int r = nt * 8 + 2 * tig + e % 2;",
                       "s[nt][e] = sn_exp2(fmaf(s[nt][e], scale_log2, -lse_tile[r]));",
                       "dp[nt][e] = s[nt][e] * (dp[nt][e] - dot_tile[r]);"};
    sn_attm_elements(t, "BQ / 8", NULL, true, u, ds ? 3 : 2);
    sn_cu_emitf(t, "}");
}

/* Key row i's columns of acc (times mul) as f32 pairs at dst (a part: rows of dst_row). */
static void store_part(sn_cu_text *t, const char *dst, const char *acc, const char *ntiles,
                       const char *mul) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt++)", ntiles);
    sn_cu_emitf(t, "    *reinterpret_cast<float2 *>(%s + (long long)i * %s_row + dt * 8 + 2 * tig) =",
                dst, dst);
    sn_cu_emitf(t, "        make_float2(%s[dt][2 * h] * %s, %s[dt][2 * h + 1] * %s);", acc, mul, acc, mul);
}

/* DKV's end: the query-tile loop closed, dk (times the scale) and dv stored by key row. */
static void close_dkv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    bool dk = p->out_dk, dv = p->out_dv;
    sn_cu_emitf(t, "}");
    if (p->stages == 2) sn_cu_emitf(t, "sn_cp_async_wait_all(); /* none left in flight */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "const int i = key0 + 8 * h; /* a key row */");
    sn_cu_emitf(t, "if (i >= SEQ_K) continue;");
    if (p->parts) { /* f32 pairs into the scratch (kernel.h: dk and dv in parts) */
        if (dk) store_part(t, "dk", "acc_k", "HEAD_D / 8", "scale");
        if (dv) store_part(t, "dv", "acc_v", "HEAD_DV / 8", "1.0f");
    } else {
        if (dk) sn_attm_store_row(t, o, "dk", "acc_k", "HEAD_D / 8", "dk_row", "scale");
        if (dv) sn_attm_store_row(t, o, "dv", "acc_v", "HEAD_DV / 8", "dv_row", "1.0f");
    }
    sn_cu_emitf(t, "}");
}

