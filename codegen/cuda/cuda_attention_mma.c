/* cuda_attention_mma.c: flash attention on tensor cores: every product a warp-wide mma.sync
 * (m16n8k16 with bf16 or f16 operands, or two m16n8k8 for f16 on sm_75) accumulating in f32.
 * Convention: a warp owns 16 rows (queries in FWD and DQ, keys in DKV), so every product is
 * local to its warp: scores come out in accumulator fragments, are scaled, masked and
 * exponentiated there, and become the A operand of the next product without leaving
 * registers (the accumulator layout of two n-tiles is the A layout of one k-step). Tiles are
 * 16-bit copies in shared memory, rows padded by 16 bytes, read with ldmatrix. */
#include <stdio.h>

#include "cuda_attention.h"

int64_t sn_att_mma_shared(const sn_att_plan *p) {
    int64_t own = 16LL * p->warps, W = p->tile, LD = p->D + 8, LDV = p->Dv + 8;
    switch (p->pass) {
    case SN_ATT_FWD: return 2 * (own * LD + W * LD + (p->out_o ? W * LDV : 0));
    case SN_ATT_DQ: return 2 * (own + W) * (LD + LDV);
    case SN_ATT_DKV:
        return 2 * (own * LD + (p->out_dk ? own * LDV : 0) + W * (LD + LDV)) +
               4 * W * (p->out_dk ? 2 : 1);
    }
    return 0;
}

/* The names this kernel's text multiplies and packs with. */
typedef struct {
    const char *mma, *pack;
} ops;

static ops emit_helpers(sn_cu_text *t, const sn_att_plan *p) {
    ops o;
    if (p->dt == SN_BF16) {
        o = (ops){"sn_att_mma_bf16", "sn_pack_bf16x2"};
        sn_cu_emitf(t, "#ifndef SN_ATT_MMA_BF16");
        sn_cu_emitf(t, "#define SN_ATT_MMA_BF16");
        sn_cu_emitf(t, "/* d += a b on one warp: m16n8k16, bf16 operands, f32 accumulators */");
        sn_cu_emitf(t, "SN_DEVICE void sn_att_mma_bf16(float d[4], const unsigned a[4], const "
                    "unsigned b[2]) {");
        sn_cu_emitf(t, "sn_mma_bf16_16816(d, a, b, d);");
    } else if (!p->k8) {
        o = (ops){"sn_att_mma_f16", "sn_pack_f16x2"};
        sn_cu_emitf(t, "#ifndef SN_ATT_MMA_F16");
        sn_cu_emitf(t, "#define SN_ATT_MMA_F16");
        sn_cu_emitf(t, "/* d += a b on one warp: m16n8k16, f16 operands, f32 accumulators */");
        sn_cu_emitf(t, "SN_DEVICE void sn_att_mma_f16(float d[4], const unsigned a[4], const "
                    "unsigned b[2]) {");
        sn_cu_emitf(t, "sn_mma_f16_16816(d, a, b, d);");
    } else {
        o = (ops){"sn_att_mma_f16_k8", "sn_pack_f16x2"};
        sn_cu_emitf(t, "#ifndef SN_ATT_MMA_F16_K8");
        sn_cu_emitf(t, "#define SN_ATT_MMA_F16_K8");
        sn_cu_emitf(t, "/* d += a b on one warp as m16n8k16 from two m16n8k8 (sm_75): a's "
                    "registers 0-1 and b's 0 hold k 0-7, the rest k 8-15 */");
        sn_cu_emitf(t, "SN_DEVICE void sn_att_mma_f16_k8(float d[4], const unsigned a[4], const "
                    "unsigned b[2]) {");
        sn_cu_emitf(t, "const unsigned a_lo[2] = {a[0], a[1]}, a_hi[2] = {a[2], a[3]};");
        sn_cu_emitf(t, "sn_mma_f16_1688(d, a_lo, b, d);");
        sn_cu_emitf(t, "sn_mma_f16_1688(d, a_hi, b + 1, d);");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#endif");
    sn_cu_emit_att_warp_helpers(t);
    return o;
}

/* Rows [row0, row0 + count) of src (cols 16-bit values wide, `limit` rows in all) into tile as
 * 16-byte chunks (rows past limit: 0), by every thread of the block. */
static void load16(sn_cu_text *t, const char *tile, const char *src, const char *row0,
                   const char *count, const char *cols, const char *limit) {
    sn_cu_emitf(t, "for (int e = threadIdx.x; e < %s * (%s / 8); e += THREADS) {", count, cols);
    sn_cu_emitf(t, "const int r = e / (%s / 8), c = e %% (%s / 8) * 8;", cols, cols);
    sn_cu_emitf(t, "uint4 x = make_uint4(0u, 0u, 0u, 0u);");
    sn_cu_emitf(t, "if (%s + r < %s) x = *reinterpret_cast<const uint4 *>(%s + (%s + r) * %s_row "
                "+ c);", row0, limit, src, row0, src);
    sn_cu_emitf(t, "*reinterpret_cast<uint4 *>(&%s[r][c]) = x;", tile);
    sn_cu_emitf(t, "}");
}

/* acc[n][0..4) = 0 */
static void zero(sn_cu_text *t, const char *acc, const char *n) {
    sn_cu_emitf(t, "float %s[%s][4];", acc, n);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int x = 0; x < %s; x++) %s[x][0] = %s[x][1] = %s[x][2] = %s[x][3] = 0.0f;",
                n, acc, acc, acc, acc);
}

/* acc[nt] += A B^T over a k of `kdim`: A the 16 rows from `arow` of tile a (ldmatrix x4), B the
 * rows nt * 8 .. of tile b (row-major (n, k): the col layout, ldmatrix x2), nt < ntiles. */
static void product_abt(sn_cu_text *t, ops o, const char *acc, const char *a, const char *arow,
                        const char *b, const char *kdim, const char *ntiles) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kd = 0; kd < %s / 16; kd++) {", kdim);
    sn_cu_emitf(t, "unsigned a[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4(a, &%s[%s + lane %% 16][kd * 16 + lane / 16 * 8]);", a, arow);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < %s; nt++) {", ntiles);
    sn_cu_emitf(t, "unsigned b[2];");
    sn_cu_emitf(t, "sn_ldmatrix_x2(b, &%s[nt * 8 + lane %% 8][kd * 16 + lane / 8 %% 2 * 8]);", b);
    sn_cu_emitf(t, "%s(%s[nt], a, b);", o.mma, acc);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* acc[dt] += X B over k = 16 * ksteps: X the accumulator fragments x[2 kk], x[2 kk + 1] packed
 * as the A operand of k-step kk, B the rows kk * 16 .. of tile b (row-major (k, n): ldmatrix
 * .trans), dt < ntiles. */
static void product_xb(sn_cu_text *t, ops o, const char *acc, const char *x, const char *b,
                       const char *ksteps, const char *ntiles) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < %s; kk++) {", ksteps);
    sn_cu_emitf(t, "/* accumulator (row g, cols 2t, 2t+1 | row g+8) of n-tiles 2kk, 2kk+1 = A "
                "(rows g, g+8; k 2t.. | 8+2t..) */");
    sn_cu_emitf(t, "const unsigned a[4] = {%s(%s[2 * kk][0], %s[2 * kk][1]), %s(%s[2 * kk][2], "
                "%s[2 * kk][3]),", o.pack, x, x, o.pack, x, x);
    sn_cu_emitf(t, "                       %s(%s[2 * kk + 1][0], %s[2 * kk + 1][1]), %s(%s[2 * "
                "kk + 1][2], %s[2 * kk + 1][3])};", o.pack, x, x, o.pack, x, x);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt++) {", ntiles);
    sn_cu_emitf(t, "unsigned b[2];");
    sn_cu_emitf(t, "sn_ldmatrix_x2_trans(b, &%s[kk * 16 + lane %% 16][dt * 8]);", b);
    sn_cu_emitf(t, "%s(%s[dt], a, b);", o.mma, acc);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* Stores row `i` (< limit) of accumulators acc[0 .. ntiles) (this thread's half `h`: 0 rows g,
 * 1 rows g + 8) times `mul` to dst (rows `cols` apart) as packed pairs. */
static void store_row(sn_cu_text *t, ops o, const char *dst, const char *acc, const char *ntiles,
                      const char *cols, const char *mul) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt++)", ntiles);
    sn_cu_emitf(t, "    *reinterpret_cast<unsigned *>(%s + (long long)i * %s + dt * 8 + 2 * tig) =",
                dst, cols);
    sn_cu_emitf(t, "        %s(%s[dt][2 * h] * %s, %s[dt][2 * h + 1] * %s);", o.pack, acc, mul,
                acc, mul);
}

/* dout_i . o_i of each row of the warp's 16 from row `first`: every thread keeps its two. */
static void emit_row_dots(sn_cu_text *t, const char *first) {
    sn_cu_emitf(t, "float row_dot[2] = {0.0f, 0.0f}; /* dout_i . o_i of rows grp, grp + 8 */");
    sn_cu_emitf(t, "for (int r = 0; r < 16; r++) {");
    sn_cu_emitf(t, "const int i = %s + r;", first);
    sn_att_emit_row_dot(t, "const float dot");
    sn_cu_emitf(t, "if (r == grp) row_dot[0] = dot;");
    sn_cu_emitf(t, "if (r == grp + 8) row_dot[1] = dot;");
    sn_cu_emitf(t, "}");
}

static void emit_fwd(sn_cu_text *t, const sn_att_plan *p, ops o) {
    sn_cu_emitf(t, "enum { BQ = 16 * WARPS, BK = %d, LD = HEAD_D + 8, LDV = HEAD_DV + 8 }; /* "
                "rows padded by 16 bytes */", p->tile);
    sn_cu_emitf(t, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* the longest rows first */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int row0 = q0 + warp * 16 + grp; /* this thread's rows: row0, row0 + 8 */");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, q_tile, BQ, LD);");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, k_tile, BK, LD);");
    if (p->out_o) sn_cu_emitf(t, "SN_SHARED2(unsigned short, v_tile, BK, LDV);");
    load16(t, "q_tile", "q", "q0", "BQ", "HEAD_D", "SEQ_Q");
    sn_cu_emitf(t, "float row_max[2], row_sum[2] = {0.0f, 0.0f};");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_att_emit_row_max_init(t, p, "h", "row0 + 8 * h");
    sn_cu_emitf(t, "}");
    if (p->out_o) zero(t, "o_acc", "HEAD_DV / 8");
    sn_att_open_key_tiles(t);
    load16(t, "k_tile", "k", "k0", "BK", "HEAD_D", "SEQ_K");
    if (p->out_o) load16(t, "v_tile", "v", "k0", "BK", "HEAD_DV", "SEQ_K");
    sn_cu_emitf(t, "__syncthreads();");
    zero(t, "s", "BK / 8");
    product_abt(t, o, "s", "q_tile", "warp * 16", "k_tile", "HEAD_D", "BK / 8");
    sn_cu_emitf(t, "/* scale and mask: s[nt][e] is row row0 + 8 (e / 2), key k0 + nt * 8 + 2 tig "
                "+ e %% 2 */");
    if (!p->in_lse) sn_cu_emitf(t, "float tile_max[2] = {-SN_INF, -SN_INF};");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < BK / 8; nt++) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int e = 0; e < 4; e++) {");
    sn_cu_emitf(t, "const int i = row0 + e / 2 * 8, j = k0 + nt * 8 + 2 * tig + e %% 2;");
    sn_att_emit_seen(t, false);
    if (p->in_lse) {
        sn_cu_emitf(t, "s[nt][e] = seen ? expf(s[nt][e] * scale - row_max[e / 2]) : 0.0f;");
    } else {
        sn_cu_emitf(t, "s[nt][e] = seen ? s[nt][e] * scale : -SN_INF;");
        sn_cu_emitf(t, "tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    if (!p->in_lse) {
        sn_cu_emitf(t, "/* online softmax: a row spans the 4 threads of a quad */");
        sn_cu_emitf(t, "float m_ref[2];");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
        sn_cu_emitf(t, "tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));");
        sn_cu_emitf(t, "tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));");
        sn_att_emit_online(t, "h", "tile_max[h]", "m_ref[h]", "m_ref[h]");
        sn_cu_emitf(t, "row_sum[h] *= alpha;");
        if (p->out_o) {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int dt = 0; dt < HEAD_DV / 8; dt++) {");
            sn_cu_emitf(t, "o_acc[dt][2 * h] *= alpha;");
            sn_cu_emitf(t, "o_acc[dt][2 * h + 1] *= alpha;");
            sn_cu_emitf(t, "}");
        }
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int nt = 0; nt < BK / 8; nt++) {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int e = 0; e < 4; e++) {");
        sn_cu_emitf(t, "s[nt][e] = expf(s[nt][e] - m_ref[e / 2]);");
        sn_cu_emitf(t, "row_sum[e / 2] += s[nt][e]; /* this thread's columns; the quad sums at "
                    "the end */");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
    }
    if (p->out_o) {
        sn_cu_emitf(t, "/* o += P V */");
        product_xb(t, o, "o_acc", "s", "v_tile", "BK / 16", "HEAD_DV / 8");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);");
    sn_cu_emitf(t, "row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);");
    sn_cu_emitf(t, "const int i = row0 + 8 * h;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    if (p->out_o) {
        sn_att_emit_fwd_inv(t, p, "h");
        store_row(t, o, "o_out", "o_acc", "HEAD_DV / 8", "o_out_row", "inv");
    }
    sn_att_emit_lse_out(t, p, "h", "tig == 0");
    sn_cu_emitf(t, "}");
}

static void emit_dq(sn_cu_text *t, const sn_att_plan *p, ops o) {
    sn_cu_emitf(t, "enum { BQ = 16 * WARPS, BK = %d, LD = HEAD_D + 8, LDV = HEAD_DV + 8 }; /* "
                "rows padded by 16 bytes */", p->tile);
    sn_cu_emitf(t, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* the longest rows first */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int row0 = q0 + warp * 16 + grp; /* this thread's rows: row0, row0 + 8 */");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, q_tile, BQ, LD);");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, do_tile, BQ, LDV);");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, k_tile, BK, LD);");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, v_tile, BK, LDV);");
    load16(t, "q_tile", "q", "q0", "BQ", "HEAD_D", "SEQ_Q");
    load16(t, "do_tile", "dout", "q0", "BQ", "HEAD_DV", "SEQ_Q");
    sn_cu_emitf(t, "float row_lse[2];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) row_lse[h] = row0 + 8 * h < SEQ_Q ? "
                "sn_load(lse[row0 + 8 * h]) : 0.0f;");
    emit_row_dots(t, "q0 + warp * 16");
    zero(t, "acc", "HEAD_D / 8");
    sn_att_open_key_tiles(t);
    load16(t, "k_tile", "k", "k0", "BK", "HEAD_D", "SEQ_K");
    load16(t, "v_tile", "v", "k0", "BK", "HEAD_DV", "SEQ_K");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "/* s = Q K^T, dp = dout V^T */");
    zero(t, "s", "BK / 8");
    zero(t, "dp", "BK / 8");
    product_abt(t, o, "s", "q_tile", "warp * 16", "k_tile", "HEAD_D", "BK / 8");
    product_abt(t, o, "dp", "do_tile", "warp * 16", "v_tile", "HEAD_DV", "BK / 8");
    sn_cu_emitf(t, "/* ds = P (dp - dout_i . o_i), P = exp(s scale - lse), masked; in s */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < BK / 8; nt++) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int e = 0; e < 4; e++) {");
    sn_cu_emitf(t, "const int i = row0 + e / 2 * 8, j = k0 + nt * 8 + 2 * tig + e %% 2;");
    sn_att_emit_seen(t, true);
    sn_att_emit_dq_ds(t, "s[nt][e]", "s[nt][e]", "e / 2", "dp[nt][e]");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* dq += ds K */");
    product_xb(t, o, "acc", "s", "k_tile", "BK / 16", "HEAD_D / 8");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "const int i = row0 + 8 * h;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    store_row(t, o, "dq", "acc", "HEAD_D / 8", "dq_row", "scale");
    sn_cu_emitf(t, "}");
}

static void emit_dkv(sn_cu_text *t, const sn_att_plan *p, ops o) {
    bool dk = p->out_dk, dv = p->out_dv;
    sn_cu_emitf(t, "enum { BK = 16 * WARPS, BQ = %d, LD = HEAD_D + 8, LDV = HEAD_DV + 8 }; /* "
                "rows padded by 16 bytes */", p->tile);
    sn_cu_emitf(t, "const int k0 = blockIdx.x * BK; /* the first keys have the most queries */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int key0 = k0 + warp * 16 + grp; /* this thread's keys: key0, key0 + 8 */");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, k_tile, BK, LD);");
    if (dk) sn_cu_emitf(t, "SN_SHARED2(unsigned short, v_tile, BK, LDV);");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, q_tile, BQ, LD);");
    sn_cu_emitf(t, "SN_SHARED2(unsigned short, do_tile, BQ, LDV);");
    sn_cu_emitf(t, "SN_SHARED(float, lse_tile, BQ);");
    if (dk) sn_cu_emitf(t, "SN_SHARED(float, dot_tile, BQ); /* dout_i . o_i */");
    load16(t, "k_tile", "k", "k0", "BK", "HEAD_D", "SEQ_K");
    if (dk) load16(t, "v_tile", "v", "k0", "BK", "HEAD_DV", "SEQ_K");
    if (dk) zero(t, "acc_k", "HEAD_D / 8");
    if (dv) zero(t, "acc_v", "HEAD_DV / 8");
    sn_att_open_query_tiles(t, p);
    load16(t, "q_tile", "q", "qs", "BQ", "HEAD_D", "SEQ_Q");
    load16(t, "do_tile", "dout", "qs", "BQ", "HEAD_DV", "SEQ_Q");
    sn_att_emit_query_stats(t, p);
    sn_cu_emitf(t, "/* s = K Q^T (keys x queries)%s */", dk ? ", dp = V dout^T" : "");
    zero(t, "s", "BQ / 8");
    product_abt(t, o, "s", "k_tile", "warp * 16", "q_tile", "HEAD_D", "BQ / 8");
    if (dk) {
        zero(t, "dp", "BQ / 8");
        product_abt(t, o, "dp", "v_tile", "warp * 16", "do_tile", "HEAD_DV", "BQ / 8");
    }
    sn_cu_emitf(t, "/* P = exp(s scale - lse_i), masked, in s%s */",
                dk ? "; ds = P (dp - dout_i . o_i), in dp" : "");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < BQ / 8; nt++) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int e = 0; e < 4; e++) {");
    sn_cu_emitf(t, "const int j = key0 + e / 2 * 8, r = nt * 8 + 2 * tig + e %% 2, i = qs + r;");
    sn_att_emit_seen(t, true);
    sn_att_emit_dkv_p(t, p, "s[nt][e]", "s[nt][e]", "r", "dp[nt][e]", "dp[nt][e]");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    if (dv) {
        sn_cu_emitf(t, "/* dv += P dout */");
        product_xb(t, o, "acc_v", "s", "do_tile", "BQ / 16", "HEAD_DV / 8");
    }
    if (dk) {
        sn_cu_emitf(t, "/* dk += ds Q */");
        product_xb(t, o, "acc_k", "dp", "q_tile", "BQ / 16", "HEAD_D / 8");
    }
    sn_att_close_query_tiles(t, p);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "const int i = key0 + 8 * h; /* a key row */");
    sn_cu_emitf(t, "if (i >= SEQ_K) continue;");
    if (dk) store_row(t, o, "dk", "acc_k", "HEAD_D / 8", "dk_row", "scale");
    if (dv) store_row(t, o, "dv", "acc_v", "HEAD_DV / 8", "dv_row", "1.0f");
    sn_cu_emitf(t, "}");
}

void sn_att_emit_mma(sn_cu_text *t, const sn_att_plan *p, const char *fname) {
    ops o = emit_helpers(t, p);
    char path[96];
    snprintf(path, sizeof path, "tensor cores (%s, f32 accumulators)",
             p->k8 ? "f16 mma.sync m16n8k8 x 2, sm_75" : p->dt == SN_BF16 ?
             "bf16 mma.sync m16n8k16" : "f16 mma.sync m16n8k16");
    sn_att_emit_head(t, p, path, fname);
    switch (p->pass) {
    case SN_ATT_FWD: emit_fwd(t, p, o); break;
    case SN_ATT_DQ: emit_dq(t, p, o); break;
    case SN_ATT_DKV: emit_dkv(t, p, o); break;
    }
    sn_cu_emitf(t, "}");
}
