/* cuda_attention_wgmma_dkv.c: the attention backward's dk/dv kernel on sm_90's warpgroup MMA,
 * opt-in (SN_ATT_TILES entry "dkv=wgmma"; simulated, not run on a GPU yet: docs/attention.md,
 * "wgmma"). One warpgroup (4 warps) owns 64 keys and walks the query tiles of 64 that see them
 * (causal: from the tile holding the first query that sees the block's first key; of each query
 * head of the group in turn), double-buffered by cp.async into the 128-byte swizzle (rows of
 * 128 bytes: head size 64). Per query tile, as wgmma m64n64k16 with the keys as M:
 *   S^T = K Q^T and dP^T = V dO^T   (A and B from shared memory, both K-major along the head),
 *   P^T = 2^(S^T scale log2 e - lse log2 e), dS^T = P^T (dP^T - dout_i . o_i)   (registers),
 *   dV += P^T dO and dK += dS^T Q   (A from registers, B MN-major: the tiles as copied).
 * Convention: a warp's accumulators are the mma.sync kernel's fragments (s[nt][e]: key
 * key0 + 8 (e / 2), query qs + 8 nt + 2 tig + e % 2), so masking and the stores are that
 * kernel's (cuda_attention_mma_pass.c); wgmma groups are committed as soon as their operands
 * are in registers, and waited for only where their results are read: dP^T is computed while
 * P^T is, dV's product while dS^T is. */
#include "cuda_attention_mma.h"

/* acc (a [HEAD/8][4] array) += X Y over the query tile: X packed from the fragments x as four
 * K steps of 16 queries (registers), Y the tile at shared address y_at (queries x 64 columns,
 * MN-major: a K step is 16 rows, 2048 bytes). */
static void product_rs(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o, const char *acc,
                       const char *x, const char *packed, const char *y_at) {
    sn_cu_emitf(t, "unsigned %s[BQ / 16][4];", packed);
    sn_cu_emitf(t, "/* n-tiles 2 kk and 2 kk + 1 of %s: K step kk's A fragment */", x);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BQ / 16; kk++) {");
    sn_cu_emitf(t, "%s[kk][0] = %s(%s[2 * kk][0], %s[2 * kk][1]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "%s[kk][1] = %s(%s[2 * kk][2], %s[2 * kk][3]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "%s[kk][2] = %s(%s[2 * kk + 1][0], %s[2 * kk + 1][1]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "%s[kk][3] = %s(%s[2 * kk + 1][2], %s[2 * kk + 1][3]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after the wait and the packing */");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&%s[0][0], 32);", acc);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BQ / 16; kk++)");
    sn_cu_emitf(t, "%s(&%s[0][0], %s[kk], sn_wgmma_desc(%s + 2048u * kk, 8192, 1024, 1), 1);",
                sn_attw_name(p, true), acc, packed, y_at);
    sn_cu_emitf(t, "sn_wgmma_commit();");
}

/* x (keys x queries, [BQ/8][4]) = A B^T over the head: A the block's tile a_tile (keys, K-major),
 * B the query tile b_tile's stage st (queries, K-major); K steps of 16 are 32 bytes along the
 * swizzled rows. Issued, not committed. */
static void product_ss(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *a_tile,
                       const char *b_tile, const char *head) {
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const unsigned a_at = sn_smem_addr(&%s[0][0]), b_at = sn_smem_addr(&%s[st][0]);",
                a_tile, b_tile);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int ks = 0; ks < %s / 16; ks++)", head);
    sn_cu_emitf(t, "%s(&%s[0][0], sn_wgmma_desc(a_at + 32u * ks, 16, 1024, 1), "
                "sn_wgmma_desc(b_at + 32u * ks, 16, 1024, 1), ks > 0);", sn_attw_name(p, false), x);
    sn_cu_emitf(t, "}");
}

void sn_attw_emit_dkv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    bool dk = p->out_dk, dv = p->out_dv, group = p->G > 1;
    SN_ASSERT(p->wgmma && p->warps == 4 && p->rows == 16 && p->tile == 64 && p->stages == 2);
    sn_cu_emitf(t, "enum { MT = 1, BK = 64, BQ = %d, STAGES = 2, LD = HEAD_D, LDV = HEAD_DV }; "
                "/* the warpgroup's keys, the query tile; rows of 128 bytes, swizzled */", p->tile);
    sn_cu_emitf(t, "const float scale_log2 = scale * 1.44269504f; /* exponents in base 2 */");
    sn_cu_emitf(t, "const int k0 = blockIdx.x * BK; /* the first keys have the most queries */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int key0 = k0 + warp * 16 + grp; /* this thread's keys: key0, key0 + 8 */");
    int64_t own = 64, W = 2 * (int64_t)p->tile;
    sn_attm_carve c = sn_attm_carve_begin(t, p);
    sn_attm_tile2(t, &c, "k_tile", own, p->D, "BK", "LD", "");
    if (dk) sn_attm_tile2(t, &c, "v_tile", own, p->Dv, "BK", "LDV", "");
    sn_attm_tile2(t, &c, "q_tile", W, p->D, "STAGES * BQ", "LD", "");
    sn_attm_tile2(t, &c, "do_tile", W, p->Dv, "STAGES * BQ", "LDV", "");
    if (dk) sn_attm_tile2(t, &c, "o_tile", W, p->Dv, "STAGES * BQ", "LDV", " /* for the dots */");
    sn_attm_floats(t, &c, "lse_tile", p->tile, "BQ", " /* base 2 */");
    if (dk) sn_attm_floats(t, &c, "dot_tile", p->tile, "BQ", " /* dout_i . o_i */");
    sn_cu_emitf(t, "/* causal: query i sees key j when i >= j - (SEQ_K - SEQ_Q); the query tiles "
                "from q_begin, of each query head of the group in order */");
    sn_cu_emitf(t, "const int q_begin = max(0, k0 - (SEQ_K - SEQ_Q)) / BQ * BQ;");
    sn_cu_emitf(t, "const int per_head = q_begin < SEQ_Q ? (SEQ_Q - q_begin + BQ - 1) / BQ : 0;");
    sn_cu_emitf(t, "const int n_tiles = %lld * per_head;", (long long)p->G);
    sn_cu_emitf(t, "/* a query tile whose first query misses the warp's last key is masked */");
    sn_cu_emitf(t, "const int warp_queries = k0 + warp * 16 + 15 - (SEQ_K - SEQ_Q);");
    sn_attm_copy_rows(t, true, "k_tile", "0", "k", "k_row", "k0", "BK", "HEAD_D", "SEQ_K", true);
    if (dk) sn_attm_copy_rows(t, true, "v_tile", "0", "v", "v_row", "k0", "BK", "HEAD_DV", "SEQ_K", true);
    sn_cu_emitf(t, "/* the first query tile joins the key tiles' group */");
    sn_cu_emitf(t, "if (n_tiles > 0) {");
    sn_cu_emitf(t, "const int gn = 0, qn = q_begin;");
    if (!group) sn_cu_emitf(t, "(void)gn;");
    sn_attm_copy_query_tile(t, p, true, "0");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_cp_async_commit();");
    const char *lse = group ? "(lse_group + gn * lse_head)" : "lse";
    sn_cu_emitf(t, "/* the lse (base 2) of the tile's query threadIdx.x, one tile ahead */");
    sn_cu_emitf(t, "float lse_next = 0.0f;");
    sn_cu_emitf(t, "if (threadIdx.x < BQ && q_begin + (int)threadIdx.x < SEQ_Q && n_tiles > 0) {");
    sn_cu_emitf(t, "const int gn = 0;");
    if (!group) sn_cu_emitf(t, "(void)gn;");
    sn_cu_emitf(t, "lse_next = sn_load(%s[q_begin + threadIdx.x]) * 1.44269504f;", lse);
    sn_cu_emitf(t, "}");
    if (dk) sn_attm_zero(t, "acc_k", "HEAD_D / 8");
    if (dv) sn_attm_zero(t, "acc_v", "HEAD_DV / 8");
    sn_cu_emitf(t, "for (int tq = 0; tq < n_tiles; tq++) {");
    sn_cu_emitf(t, "const int qs = q_begin + tq %% per_head * BQ; /* of query head tq / per_head */");
    sn_cu_emitf(t, "const float lse_here = lse_next;");
    sn_cu_emitf(t, "const int st = tq %% 2 * BQ; /* this tile's rows in the stages */");
    sn_cu_emitf(t, "sn_cp_async_wait_group(0);");
    sn_cu_emitf(t, "sn_fence_proxy_async(); /* the copies, before wgmma reads them */");
    sn_cu_emitf(t, "__syncthreads(); /* the tile is in for every thread; the other stage's "
                "wgmma reads are done (waited for) */");
    sn_cu_emitf(t, "/* the next tile, landing while this one is used */");
    sn_cu_emitf(t, "if (tq + 1 < n_tiles) {");
    sn_cu_emitf(t, "const int gn = (tq + 1) / per_head, qn = q_begin + (tq + 1) %% per_head * BQ;");
    if (!group) sn_cu_emitf(t, "(void)gn;");
    sn_attm_copy_query_tile(t, p, true, "BQ - st");
    sn_cu_emitf(t, "const int r = threadIdx.x;");
    sn_cu_emitf(t, "if (r < BQ) lse_next = qn + r < SEQ_Q ? sn_load(%s[qn + r]) * 1.44269504f : "
                "0.0f; /* read at the next tile: its latency hidden */", lse);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_cp_async_commit();");
    sn_cu_emitf(t, "/* the tile's lse (base 2)%s */", dk ? " and dots dout_i . o_i" : "");
    sn_cu_emitf(t, "if (threadIdx.x < BQ) lse_tile[threadIdx.x] = lse_here;");
    if (dk) /* 16-byte chunk c / 8 of row r sits at chunk (c / 8) ^ (r % 8): the swizzle */
        sn_attm_tile_dots(t, p, "dot_tile", "BQ", "qs", "&do_tile[st + r][c ^ r % 8 * 8]",
                          "&o_tile[st + r][c ^ r % 8 * 8]");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "/* s = K Q^T (keys x queries)%s: issued as %s */", dk ? ", dp = V dout^T" : "",
                dk ? "two groups, dp's still in flight while P is computed" : "one group");
    sn_cu_emitf(t, "float s[BQ / 8][4];");
    if (dk) sn_cu_emitf(t, "float dp[BQ / 8][4];");
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after the last wait */");
    product_ss(t, p, "s", "k_tile", "q_tile", "HEAD_D");
    sn_cu_emitf(t, "sn_wgmma_commit();");
    if (dk) {
        product_ss(t, p, "dp", "v_tile", "do_tile", "HEAD_DV");
        sn_cu_emitf(t, "sn_wgmma_commit();");
        sn_cu_emitf(t, "sn_wgmma_wait(1); /* s is in; dp may still be in flight */");
    } else {
        sn_cu_emitf(t, "sn_wgmma_wait(0);");
    }
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&s[0][0], BQ / 2);");
    sn_cu_emitf(t, "/* P = 2^(s scale log2 e - lse log2 e), masked on a diagonal or last tile, in s */");
    sn_cu_emitf(t, "if (qs < warp_queries || qs + BQ > SEQ_Q || k0 + warp * 16 + 16 > SEQ_K) {");
    const char *coords = "const int j = key0 + e / 2 * 8, r = nt * 8 + 2 * tig + e % 2, i = qs + r;";
    const char *m[] = {"s[nt][e] = seen ? exp2f(s[nt][e] * scale_log2 - lse_tile[r]) : 0.0f;"};
    sn_attm_elements(t, "BQ / 8", coords, true, m, 1);
    sn_cu_emitf(t, "} else {");
    const char *u[] = {"const int r = nt * 8 + 2 * tig + e % 2;",
                       "s[nt][e] = exp2f(s[nt][e] * scale_log2 - lse_tile[r]);"};
    sn_attm_elements(t, "BQ / 8", NULL, true, u, 2);
    sn_cu_emitf(t, "}");
    if (dv) {
        sn_cu_emitf(t, "/* dv += P dout, in flight while ds is computed */");
        sn_cu_emitf(t, "const unsigned do_at = sn_smem_addr(&do_tile[st][0]);");
        product_rs(t, p, o, "acc_v", "s", "pa", "do_at");
    }
    if (dk) {
        sn_cu_emitf(t, "sn_wgmma_wait(%d); /* dp is in%s */", dv ? 1 : 0, dv ? "; dv's product may "
                    "still be in flight" : "");
        sn_cu_emitf(t, "sn_wgmma_fence_operands(&dp[0][0], BQ / 2);");
        if (dv) { /* P as packed for dv's product (s dead there: 165 registers, not 183) */
            sn_cu_emitf(t, "/* ds = P (dp - dout_i . o_i), in dp (0 where P is), P rounded to "
                        "%s as dv's A holds it (pa[nt / 2][2 (nt %% 2) + e / 2], half e %% 2) */",
                        sn_dtype_name(p->dt));
            const char *d[] = {"const int r = nt * 8 + 2 * tig + e % 2;",
                               "const unsigned w = pa[nt / 2][nt % 2 * 2 + e / 2];",
                               p->dt == SN_BF16
                                   ? "const float pr = __uint_as_float(e % 2 ? w & 0xffff0000u : w << 16);"
                                   : "const float pr = e % 2 ? sn_f16_hi(w) : sn_f16_lo(w);",
                               "dp[nt][e] = pr * (dp[nt][e] - dot_tile[r]);"};
            sn_attm_elements(t, "BQ / 8", NULL, true, d, 4);
        } else {
            sn_cu_emitf(t, "/* ds = P (dp - dout_i . o_i), in dp (0 where P is) */");
            const char *d[] = {"const int r = nt * 8 + 2 * tig + e % 2;",
                               "dp[nt][e] = s[nt][e] * (dp[nt][e] - dot_tile[r]);"};
            sn_attm_elements(t, "BQ / 8", NULL, true, d, 2);
        }
        sn_cu_emitf(t, "/* dk += ds Q */");
        sn_cu_emitf(t, "const unsigned q_at = sn_smem_addr(&q_tile[st][0]);");
        product_rs(t, p, o, "acc_k", "dp", "da", "q_at");
    }
    sn_cu_emitf(t, "sn_wgmma_wait(0); /* the products are in before the stage is refilled */");
    if (dv) sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_v[0][0], HEAD_DV / 2);");
    if (dk) sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_k[0][0], HEAD_D / 2);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_cp_async_wait_all(); /* none left in flight */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "const int i = key0 + 8 * h; /* a key row */");
    sn_cu_emitf(t, "if (i >= SEQ_K) continue;");
    if (dk) sn_attm_store_row(t, o, "dk", "acc_k", "HEAD_D / 8", "dk_row", "scale");
    if (dv) sn_attm_store_row(t, o, "dv", "acc_v", "HEAD_DV / 8", "dv_row", "1.0f");
    sn_cu_emitf(t, "}");
}
