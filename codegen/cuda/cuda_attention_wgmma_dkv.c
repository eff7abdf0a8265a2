/* cuda_attention_wgmma_dkv.c: the attention backward's dk/dv products on sm_90's warpgroup MMA,
 * the default on sm_90 at head size 64 (cuda_attention_wgmma.c; measured on an H200:
 * docs/attention.md, "wgmma"). One warpgroup (4 warps) owns 64 keys and walks the query tiles
 * of 64 that see them (causal: from the tile holding the first query that sees the block's
 * first key; of each query head of the group in turn), double-buffered by cp.async into the
 * 128-byte swizzle (rows of 128 bytes: head size 64). Per query tile, as wgmma m64n64k16 with
 * the keys as M:
 *   S^T = K Q^T and dP^T = V dO^T   (A and B from shared memory, both K-major along the head),
 *   P^T = 2^(S^T scale log2 e - lse log2 e), dS^T = P^T (dP^T - dout_i . o_i)   (registers),
 *   dV += P^T dO and dK += dS^T Q   (A from registers, B MN-major: the tiles as copied).
 * Convention: a warp's accumulators are the mma.sync kernel's fragments (s[nt][e]: key
 * key0 + 8 (e / 2), query qs + 8 nt + 2 tig + e % 2), so the rest of the kernel (the tiles,
 * their copies, the query-tile loop, lse and the dots, masking, the stores) is that kernel's,
 * sn_attm_emit_dkv in cuda_attention_mma_pass.c, which calls the products here; wgmma groups are committed as soon as their operands
 * are in registers, and waited for only where their results are read: dP^T is computed while
 * P^T is, dV's product while dS^T is. */
#include "cuda_attention_mma.h"

void sn_attw_product_rs(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o, const char *acc,
                        const char *x, const char *packed, const char *y_at, const char *kdim) {
    sn_cu_emitf(t, "unsigned %s[%s / 16][4];", packed, kdim);
    sn_attw_pack(t, o, packed, x, kdim);
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after the wait and the packing */");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&%s[0][0], 32);", acc);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < %s / 16; kk++)", kdim);
    sn_cu_emitf(t, "%s(&%s[0][0], %s[kk], sn_wgmma_desc(%s + 2048u * kk, 8192, 1024, 1), 1);",
                sn_attw_name(p, true), acc, packed, y_at);
    sn_cu_emitf(t, "sn_wgmma_commit();");
}

void sn_attw_product_ss(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *a_tile,
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

/* The atomic dq's product of the tile, FlashAttention-2's dq inside the dk/dv kernel: dS^T as
 * dk's A holds it (rounded to the operand type; keys x queries) into ds_tile, swizzled as the
 * tiles are (the next tile's stores follow its first barrier); after a barrier, a warp's 16 queries of dS by ldmatrix .trans as
 * wgmma's A fragments (the K steps: 16 keys), K's tile MN-major as B (a K step 16 rows, 2048
 * bytes): acc_q (queries x head) = dS K, issued and committed; the adds follow the wait. */
static void issue_dq(sn_cu_text *t, const sn_att_plan *p) {
    SN_ASSERT(p->tile == 64); /* ds_tile's rows of 128 bytes */
    sn_cu_emitf(t, "/* dq += scale dS K: dS^T into ds_tile, 16-byte chunk c of row r at chunk "
                "c ^ r %% 8 */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BQ / 16; kk++) {");
    sn_cu_emitf(t, "const int r = warp * 16 + grp; /* and r + 8: the same chunks */");
    sn_cu_emitf(t, "const int c0 = (2 * kk ^ r %% 8) * 8 + 2 * tig, c1 = (2 * kk + 1 ^ r %% 8) * 8 + 2 * tig;");
    sn_cu_emitf(t, "*reinterpret_cast<unsigned *>(&ds_tile[r][c0]) = da[kk][0];");
    sn_cu_emitf(t, "*reinterpret_cast<unsigned *>(&ds_tile[r + 8][c0]) = da[kk][1];");
    sn_cu_emitf(t, "*reinterpret_cast<unsigned *>(&ds_tile[r][c1]) = da[kk][2];");
    sn_cu_emitf(t, "*reinterpret_cast<unsigned *>(&ds_tile[r + 8][c1]) = da[kk][3];");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads(); /* every warp's keys of dS are in */");
    sn_cu_emitf(t, "/* A: the warp's queries warp * 16 .. of dS (keys kk * 16 ..), matrices "
                "(queries 0-7 | 8-15) x (keys 0-7 | 8-15) of the stored dS^T, transposed */");
    sn_cu_emitf(t, "unsigned qa[BK / 16][4];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BK / 16; kk++) {");
    sn_cu_emitf(t, "const int r = kk * 16 + lane / 16 * 8 + lane %% 8, c = warp * 2 + lane / 8 %% 2;");
    sn_cu_emitf(t, "sn_ldmatrix_x4_trans(qa[kk], &ds_tile[r][(c ^ r %% 8) * 8]);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_wgmma_wait(0); /* dv's and dk's products are in (P and dS dead) */");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_v[0][0], HEAD_DV / 2);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_k[0][0], HEAD_D / 2);");
    sn_cu_emitf(t, "float acc_q[HEAD_D / 8][4];");
    sn_cu_emitf(t, "const unsigned k_at = sn_smem_addr(&k_tile[0][0]);");
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after the fragments' loads */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BK / 16; kk++)");
    sn_cu_emitf(t, "%s(&acc_q[0][0], qa[kk], sn_wgmma_desc(k_at + 2048u * kk, 8192, 1024, 1), kk > 0);",
                sn_attw_name(p, true));
    sn_cu_emitf(t, "sn_wgmma_commit();");
}

void sn_attw_dkv_products(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    bool dk = p->out_dk, dv = p->out_dv;
    SN_ASSERT(p->wgmma && p->warps == 4 && p->rows == 16 && p->tile == 64 && p->stages == 2);
    sn_cu_emitf(t, "/* s = K Q^T (keys x queries)%s: issued as %s */", dk ? ", dp = V dout^T" : "",
                dk ? "two groups, dp's still in flight while P is computed" : "one group");
    sn_cu_emitf(t, "float s[BQ / 8][4];");
    if (dk) sn_cu_emitf(t, "float dp[BQ / 8][4];");
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after the last wait */");
    sn_attw_product_ss(t, p, "s", "k_tile", "q_tile", "HEAD_D");
    sn_cu_emitf(t, "sn_wgmma_commit();");
    if (dk) {
        sn_attw_product_ss(t, p, "dp", "v_tile", "do_tile", "HEAD_DV");
        sn_cu_emitf(t, "sn_wgmma_commit();");
        sn_cu_emitf(t, "sn_wgmma_wait(1); /* s is in; dp may still be in flight */");
    } else {
        sn_cu_emitf(t, "sn_wgmma_wait(0);");
    }
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&s[0][0], BQ / 2);");
    sn_attm_dkv_p(t, false);
    if (dv) {
        sn_cu_emitf(t, "/* dv += P dout, in flight while ds is computed */");
        sn_cu_emitf(t, "const unsigned do_at = sn_smem_addr(&do_tile[st][0]);");
        sn_attw_product_rs(t, p, o, "acc_v", "s", "pa", "do_at", "BQ");
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
        sn_attw_product_rs(t, p, o, "acc_k", "dp", "da", "q_at", "BQ");
        if (p->dq_atomic) issue_dq(t, p);
    }
    sn_cu_emitf(t, "sn_wgmma_wait(0); /* the products are in before the stage is refilled */");
    if (dv) sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_v[0][0], HEAD_DV / 2);");
    if (dk) sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_k[0][0], HEAD_D / 2);");
    if (p->dq_atomic) {
        sn_cu_emitf(t, "sn_wgmma_fence_operands(&acc_q[0][0], HEAD_D / 2);");
        sn_attm_dq_sums(t, p);
        sn_attm_dq_adds(t, "acc_q", "warp * 16", "0", "HEAD_D / 8");
    }
}
