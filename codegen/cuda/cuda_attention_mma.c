/* cuda_attention_mma.c: flash attention on tensor cores: every product a warp-wide mma.sync
 * (m16n8k16 with bf16 or f16 operands, or two m16n8k8 for f16 on sm_75) accumulating in f32.
 * Convention: a warp owns 16 rows (queries in FWD and DQ, keys in DKV), so every product is
 * local to its warp: scores come out in accumulator fragments, are scaled, masked and
 * exponentiated there, and become the A operand of the next product without leaving
 * registers (the accumulator layout of two n-tiles is the A layout of one k-step). Tiles are
 * 16-bit copies in shared memory, rows padded by 16 bytes, read with ldmatrix.
 * The streamed tiles (keys and values in FWD and DQ, queries and their dout in DKV) are
 * double-buffered where the plan says STAGES = 2 (sm_80 and later): the next tile's cp.async
 * copies are issued right after the barrier that hands out the current one, so they land while
 * the current tile is multiplied. Exponents are base 2 (the scale times log2 e folded into one
 * multiply: one ex2 an element); only tiles that cross the causal diagonal or the sequence's
 * end evaluate the mask, per warp. This file: the pieces (operations, tiles, copies,
 * products, the fragment loops) and the entry; cuda_attention_mma_pass.c: the three passes. */
#include <stdio.h>

#include "cuda_attention_mma.h"

int64_t sn_att_mma_shared(const sn_att_plan *p) {
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages, LD = p->D + 8,
            LDV = p->Dv + 8, LDS = p->tile + 8;
    if (p->wgmma) LD = p->D, LDV = p->Dv, LDS = p->tile; /* swizzled rows, unpadded; 1 KiB to align them */
    switch (p->pass) {
    case SN_ATT_FWD: return 2 * (own * LD + W * LD + (p->out_o ? W * LDV : 0)) + (p->wgmma ? 1024 : 0);
    case SN_ATT_DQ: return 2 * (own + W) * (LD + LDV) + 4 * own + (p->wgmma ? 1024 : 0);
    case SN_ATT_DKV: /* k (and v), the streamed q, dout (and o for dk's dots; with the atomic
                        dq the dots are given and dS has a tile), lse (and dot) */
        return 2 * (own * LD + (p->out_dk ? own * LDV : 0) + W * (LD + LDV) +
                    (p->out_dk && !p->dq_atomic ? W * LDV : 0) + (p->dq_atomic ? own * LDS : 0)) +
               4 * (int64_t)p->tile * (p->out_dk ? 2 : 1) + (p->wgmma ? 1024 : 0);
    }
    return 0;
}

static sn_attm_ops emit_helpers(sn_cu_text *t, const sn_att_plan *p) {
    sn_attm_ops o;
    if (p->wgmma) /* its products are wgmma's: the packing alone (an unused helper: NVRTC's #177) */
        return p->dt == SN_BF16 ? (sn_attm_ops){"sn_att_mma_bf16", "sn_pack_bf16x2"}
                                : (sn_attm_ops){"sn_att_mma_f16", "sn_pack_f16x2"};
    if (p->dt == SN_BF16) {
        o = (sn_attm_ops){"sn_att_mma_bf16", "sn_pack_bf16x2"};
        sn_cu_emitf(t, "#ifndef SN_ATT_MMA_BF16");
        sn_cu_emitf(t, "#define SN_ATT_MMA_BF16");
        sn_cu_emitf(t, "/* d += a b on one warp: m16n8k16, bf16 operands, f32 accumulators */");
        sn_cu_emitf(t, "SN_DEVICE void sn_att_mma_bf16(float d[4], const unsigned a[4], const "
                    "unsigned b[2]) {");
        sn_cu_emitf(t, "sn_mma_bf16_16816(d, a, b, d);");
    } else if (!p->k8) {
        o = (sn_attm_ops){"sn_att_mma_f16", "sn_pack_f16x2"};
        sn_cu_emitf(t, "#ifndef SN_ATT_MMA_F16");
        sn_cu_emitf(t, "#define SN_ATT_MMA_F16");
        sn_cu_emitf(t, "/* d += a b on one warp: m16n8k16, f16 operands, f32 accumulators */");
        sn_cu_emitf(t, "SN_DEVICE void sn_att_mma_f16(float d[4], const unsigned a[4], const "
                    "unsigned b[2]) {");
        sn_cu_emitf(t, "sn_mma_f16_16816(d, a, b, d);");
    } else {
        o = (sn_attm_ops){"sn_att_mma_f16_k8", "sn_pack_f16x2"};
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
    return o;
}


sn_attm_carve sn_attm_carve_begin(sn_cu_text *t, const sn_att_plan *p) {
    if (p->wgmma) sn_attw_carve_begin(t, p);
    else if (p->dynamic)
        sn_cu_emitf(t, "SN_DYNAMIC_SHARED(unsigned char, att_smem); /* %lld bytes, opted into */",
                    (long long)p->shared_bytes);
    return (sn_attm_carve){p, 0};
}

/* A tile of rows x cols 16-bit values (rows_text, cols_text: the same in the kernel's names). */
void sn_attm_tile2(sn_cu_text *t, sn_attm_carve *c, const char *name, int64_t rows, int64_t cols,
                  const char *rows_text, const char *cols_text, const char *note) {
    if (!c->p->dynamic) {
        sn_cu_emitf(t, "SN_SHARED2(unsigned short, %s, %s, %s);%s", name, rows_text, cols_text, note);
        return;
    }
    sn_cu_emitf(t, "SN_SHARED2_AT(unsigned short, %s, %s, %s, att_smem, %lld);%s", name, rows_text,
                cols_text, (long long)c->at, note);
    c->at += 2 * rows * cols;
}

/* An array of count floats. */
void sn_attm_floats(sn_cu_text *t, sn_attm_carve *c, const char *name, int64_t count,
                   const char *count_text, const char *note) {
    if (!c->p->dynamic) {
        sn_cu_emitf(t, "SN_SHARED(float, %s, %s);%s", name, count_text, note);
        return;
    }
    sn_cu_emitf(t, "SN_SHARED_AT(float, %s, %s, att_smem, %lld);%s", name, count_text,
                (long long)c->at, note);
    c->at += 4 * count;
}

/* One 16-byte chunk from address `at` into row r, column c of the tile (cs where swizzled),
 * zeros where `in` is false (`at` then a row inside the sequence, none read). */
static void copy_chunk(sn_cu_text *t, bool async, const char *tile, const char *trow,
                       const char *at, bool swizzled) {
    if (async) {
        sn_cu_emitf(t, "sn_cp_async_16_zfill(&%s[%s + r][%s], %s, in ? 16u : 0u);", tile, trow,
                    swizzled ? "cs" : "c", at);
        return;
    }
    sn_cu_emitf(t, "uint4 x = make_uint4(0u, 0u, 0u, 0u);");
    sn_cu_emitf(t, "if (in) x = *reinterpret_cast<const uint4 *>(%s);", at);
    sn_cu_emitf(t, "*reinterpret_cast<uint4 *>(&%s[%s + r][%s]) = x;", tile, trow,
                swizzled ? "cs" : "c");
}

/* The swizzled chunk of row r: rows of 128 bytes, 1024-byte aligned, chunk c / 8 XOR the row's
 * index mod 8. */
static void swizzle_chunk(sn_cu_text *t, const char *trow) {
    sn_cu_emitf(t, "const int cs = c ^ (%s + r) %% 8 * 8;", trow);
}

/* The copies as a loop from threadIdx.x over the chunks. */
static void copy_loop(sn_cu_text *t, bool async, const char *tile, const char *trow,
                      const char *src, const char *src_row, const char *row0, const char *count,
                      const char *cols, const char *limit, bool swizzled) {
    char at[160];
    sn_cu_emitf(t, "for (int e = threadIdx.x; e < %s * (%s / 8); e += THREADS) {", count, cols);
    sn_cu_emitf(t, "const int r = e / (%s / 8), c = e %% (%s / 8) * 8;", cols, cols);
    sn_cu_emitf(t, "const bool in = %s + r < %s;", row0, limit);
    if (swizzled) swizzle_chunk(t, trow);
    snprintf(at, sizeof at, "%s + (long long)(in ? %s + r : 0) * %s + c", src, row0, src_row);
    copy_chunk(t, async, tile, trow, at, swizzled);
    sn_cu_emitf(t, "}");
}

/* Rows [row0, row0 + count) of src (`cols` 16-bit values wide, rows src_row apart, `limit` rows
 * in all) into rows trow .. of tile as 16-byte chunks (rows past limit: zeros), by every thread
 * of the block: cp.async copies still to be waited for (async), or loads and stores, by a loop
 * from threadIdx.x. `unrolled`, where the threads divide the chunks evenly (a constant test):
 * an unrolled loop from one address a thread, the chunks a constant apart, each row tested
 * against the limit without a branch (ptxas, sm_90, gpt2's forward: the loop took about 25
 * instructions a copy, these about 5; 2026-11-29). */
void sn_attm_copy_rows(sn_cu_text *t, bool async, const char *tile, const char *trow,
                      const char *src, const char *src_row, const char *row0, const char *count,
                      const char *cols, const char *limit, bool swizzled, bool unrolled) {
    if (!unrolled) {
        copy_loop(t, async, tile, trow, src, src_row, row0, count, cols, limit, swizzled);
        return;
    }
    char at[200];
    sn_cu_emitf(t, "/* constants: the threads divide the chunks */");
    sn_cu_emitf(t, "if (%s * (%s / 8) %% THREADS == 0 && THREADS %% (%s / 8) == 0) {", count, cols,
                cols);
    sn_cu_emitf(t, "const int r_at = threadIdx.x / (%s / 8), c = threadIdx.x %% (%s / 8) * 8;", cols, cols);
    sn_cu_emitf(t, "const auto *at = %s + (long long)(%s + r_at) * %s + c;", src, row0, src_row);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int i = 0; i < %s * (%s / 8) / THREADS; i++) {", count, cols);
    sn_cu_emitf(t, "const int r = r_at + i * (THREADS / (%s / 8));", cols);
    sn_cu_emitf(t, "const bool in = %s + r < %s;", row0, limit);
    if (swizzled) swizzle_chunk(t, trow);
    snprintf(at, sizeof at, "in ? at + (long long)i * (THREADS / (%s / 8)) * %s : %s", cols,
             src_row, src);
    copy_chunk(t, async, tile, trow, at, swizzled);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "} else {");
    copy_loop(t, async, tile, trow, src, src_row, row0, count, cols, limit, swizzled);
    sn_cu_emitf(t, "}");
}

/* acc[n][0..4) = 0 */
void sn_attm_zero(sn_cu_text *t, const char *acc, const char *n) {
    sn_cu_emitf(t, "float %s[%s][4];", acc, n);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int x = 0; x < %s; x++) %s[x][0] = %s[x][1] = %s[x][2] = %s[x][3] = 0.0f;",
                n, acc, acc, acc, acc);
}

static void product_b_pairs(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *b, const char *brow,
                            const char *ntiles);

/* acc[nt] += A B^T over a k of `kdim`: A the 16 rows from `arow` of tile a (ldmatrix x4), B the
 * rows brow + nt * 8 .. of tile b (row-major (n, k): the col layout, ldmatrix x2), nt < ntiles. */
void sn_attm_abt(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *a, const char *arow,
                        const char *b, const char *brow, const char *kdim, const char *ntiles) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kd = 0; kd < %s / 16; kd++) {", kdim);
    sn_cu_emitf(t, "unsigned a[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4(a, &%s[%s + lane %% 16][kd * 16 + lane / 16 * 8]);", a, arow);
    product_b_pairs(t, o, acc, b, brow, ntiles);
    sn_cu_emitf(t, "}");
}

/* The forward's S = Q K^T with MT m-tiles (16 rows each) a warp: acc[m][nt], A of m-tile m from
 * rows arow + m * 16 of tile a; each B fragment (two n-tiles, one ldmatrix x4) feeds MT pairs
 * of mma instructions. */
void sn_attm_abt_m(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *a, const char *arow,
                          const char *b, const char *brow, const char *kdim, const char *ntiles) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kd = 0; kd < %s / 16; kd++) {", kdim);
    sn_cu_emitf(t, "unsigned a[MT][4];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++)");
    sn_cu_emitf(t, "    sn_ldmatrix_x4(a[m], &%s[%s + m * 16 + lane %% 16][kd * 16 + lane / 16 * 8]);",
                a, arow);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < %s; nt += 2) {", ntiles);
    sn_cu_emitf(t, "unsigned b[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4(b, &%s[%s + nt * 8 + lane / 16 * 8 + lane %% 8][kd * 16 + "
                "lane / 8 %% 2 * 8]);", b, brow);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    sn_cu_emitf(t, "%s(%s[m][nt], a[m], b);", o.mma, acc);
    sn_cu_emitf(t, "%s(%s[m][nt + 1], a[m], b + 2);", o.mma, acc);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

static void product_b_pairs(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *b, const char *brow,
                            const char *ntiles) {
    sn_cu_emitf(t, "/* B of n-tiles nt and nt + 1 in one ldmatrix x4: lanes 0-15 address tile "
                "nt's rows (k halves 0, 1), lanes 16-31 tile nt + 1's */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < %s; nt += 2) {", ntiles);
    sn_cu_emitf(t, "unsigned b[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4(b, &%s[%s + nt * 8 + lane / 16 * 8 + lane %% 8][kd * 16 + "
                "lane / 8 %% 2 * 8]);", b, brow);
    sn_cu_emitf(t, "%s(%s[nt], a, b);", o.mma, acc);
    sn_cu_emitf(t, "%s(%s[nt + 1], a, b + 2);", o.mma, acc);
    sn_cu_emitf(t, "}");
}

/* acc[dt] += X B over k = 16 * ksteps: X the accumulator fragments x[2 kk], x[2 kk + 1] packed
 * as the A operand of k-step kk, B the rows brow + kk * 16 .. of tile b (row-major (k, n):
 * ldmatrix .trans), dt < ntiles. */
void sn_attm_xb(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *x, const char *b,
                       const char *brow, const char *ksteps, const char *ntiles, bool pairs) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < %s; kk++) {", ksteps);
    sn_cu_emitf(t, "/* accumulator (row g, cols 2t, 2t+1 | row g+8) of n-tiles 2kk, 2kk+1 = A "
                "(rows g, g+8; k 2t.. | 8+2t..) */");
    sn_cu_emitf(t, "const unsigned a[4] = {%s(%s[2 * kk][0], %s[2 * kk][1]), %s(%s[2 * kk][2], "
                "%s[2 * kk][3]),", o.pack, x, x, o.pack, x, x);
    sn_cu_emitf(t, "                       %s(%s[2 * kk + 1][0], %s[2 * kk + 1][1]), %s(%s[2 * "
                "kk + 1][2], %s[2 * kk + 1][3])};", o.pack, x, x, o.pack, x, x);
    sn_cu_emitf(t, "#pragma unroll");
    if (pairs) { /* fewer shared-memory instructions, more registers live (dk/dv spilled) */
        sn_cu_emitf(t, "/* B of n-tiles dt and dt + 1 in one ldmatrix x4 .trans: lanes 0-15 "
                    "address the k rows at column dt * 8, lanes 16-31 at (dt + 1) * 8 */");
        sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt += 2) {", ntiles);
        sn_cu_emitf(t, "unsigned b[4];");
        sn_cu_emitf(t, "sn_ldmatrix_x4_trans(b, &%s[%s + kk * 16 + lane %% 16][dt * 8 + lane / 16 "
                    "* 8]);", b, brow);
        sn_cu_emitf(t, "%s(%s[dt], a, b);", o.mma, acc);
        sn_cu_emitf(t, "%s(%s[dt + 1], a, b + 2);", o.mma, acc);
    } else {
        sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt++) {", ntiles);
        sn_cu_emitf(t, "unsigned b[2];");
        sn_cu_emitf(t, "sn_ldmatrix_x2_trans(b, &%s[%s + kk * 16 + lane %% 16][dt * 8]);", b, brow);
        sn_cu_emitf(t, "%s(%s[dt], a, b);", o.mma, acc);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* The forward's O += P V with MT m-tiles a warp: acc[m][dt], P from x[m]; each B fragment (two
 * n-tiles, one ldmatrix x4 .trans) feeds MT pairs of mma instructions. */
void sn_attm_xb_m(sn_cu_text *t, sn_attm_ops o, const char *acc, const char *x, const char *b,
                         const char *brow, const char *ksteps, const char *ntiles) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < %s; kk++) {", ksteps);
    sn_cu_emitf(t, "unsigned a[MT][4];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    sn_cu_emitf(t, "a[m][0] = %s(%s[m][2 * kk][0], %s[m][2 * kk][1]);", o.pack, x, x);
    sn_cu_emitf(t, "a[m][1] = %s(%s[m][2 * kk][2], %s[m][2 * kk][3]);", o.pack, x, x);
    sn_cu_emitf(t, "a[m][2] = %s(%s[m][2 * kk + 1][0], %s[m][2 * kk + 1][1]);", o.pack, x, x);
    sn_cu_emitf(t, "a[m][3] = %s(%s[m][2 * kk + 1][2], %s[m][2 * kk + 1][3]);", o.pack, x, x);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt += 2) {", ntiles);
    sn_cu_emitf(t, "unsigned b[4];");
    sn_cu_emitf(t, "sn_ldmatrix_x4_trans(b, &%s[%s + kk * 16 + lane %% 16][dt * 8 + lane / 16 * 8]);",
                b, brow);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    sn_cu_emitf(t, "%s(%s[m][dt], a[m], b);", o.mma, acc);
    sn_cu_emitf(t, "%s(%s[m][dt + 1], a[m], b + 2);", o.mma, acc);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* acc[m][n][0..4) = 0 for MT m-tiles */
void sn_attm_zero_m(sn_cu_text *t, const char *acc, const char *n) {
    sn_cu_emitf(t, "float %s[MT][%s][4];", acc, n);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int x = 0; x < %s; x++) %s[m][x][0] = %s[m][x][1] = %s[m][x][2] = %s[m][x][3] = "
                "0.0f;", n, acc, acc, acc, acc);
    sn_cu_emitf(t, "}");
}

/* Stores row `i` (< limit) of accumulators acc[0 .. ntiles) (this thread's half `h`: 0 rows g,
 * 1 rows g + 8) times `mul` to dst (rows `cols` apart) as packed pairs. */
void sn_attm_store_row(sn_cu_text *t, sn_attm_ops o, const char *dst, const char *acc, const char *ntiles,
                      const char *cols, const char *mul) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int dt = 0; dt < %s; dt++)", ntiles);
    sn_cu_emitf(t, "    *reinterpret_cast<unsigned *>(%s + (long long)i * %s + dt * 8 + 2 * tig) =",
                dst, cols);
    sn_cu_emitf(t, "        %s(%s[dt][2 * h] * %s, %s[dt][2 * h + 1] * %s);", o.pack, acc, mul,
                acc, mul);
}

/* dst[r] = dout_i . o_i for the `rows` rows i = first + r (0 past SEQ_Q), THREADS / rows
 * threads a row (one when rows > THREADS), 8 columns a step: dout's row from `dout_at(i, c)`
 * and o's from `o_at(i, c)`, each the address of 8 16-bit values. The caller's barrier shares
 * dst. */
void sn_attm_tile_dots(sn_cu_text *t, const sn_att_plan *p, const char *dst, const char *rows,
                      const char *first, const char *dout_at, const char *o_at, bool swizzled) {
    const char *ty = sn_att_ctype(p->dt);
    sn_cu_emitf(t, "/* %s[r] = dout_i . o_i, PARTS threads a row */", dst);
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "enum { PARTS = THREADS >= %s ? THREADS / %s : 1 };", rows, rows);
    sn_cu_emitf(t, "for (int r = threadIdx.x / PARTS; r < %s; r += THREADS / PARTS) {", rows);
    sn_cu_emitf(t, "const int i = %s + r;", first);
    sn_cu_emitf(t, "float part = 0.0f;");
    sn_cu_emitf(t, "#pragma unroll /* a count the compiler knows: the same columns in the same order */");
    sn_cu_emitf(t, "for (int u = 0; u < (HEAD_DV + PARTS * 8 - 1) / (PARTS * 8); u++) {");
    if (swizzled) { /* the 128-byte swizzle: chunk c / 8 of row r at c / 8 ^ r % 8 */
        SN_ASSERT(p->Dv == 64);
        sn_cu_emitf(t, "/* the row's chunks taken so that the 8 threads of a quarter warp, 8 / PARTS "
                    "rows, read 8 distinct stored chunks (no bank conflict): stored chunk "
                    "threadIdx.x %% PARTS + PARTS ((u + r) %% (8 / PARTS)), its columns c */");
        sn_cu_emitf(t, "const int c = ((threadIdx.x %% PARTS + PARTS * ((u + r) %% (8 / PARTS))) ^ r %% 8) * 8;");
    } else {
        sn_cu_emitf(t, "const int c = threadIdx.x %% PARTS * 8 + u * PARTS * 8;");
    }
    sn_cu_emitf(t, "if (c >= HEAD_DV || i >= SEQ_Q) break;");
    sn_cu_emitf(t, "float dv8[8], ov8[8];");
    sn_cu_emitf(t, "sn_load8(reinterpret_cast<const %s *>(%s), dv8);", ty, dout_at);
    sn_cu_emitf(t, "sn_load8(reinterpret_cast<const %s *>(%s), ov8);", ty, o_at);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int u = 0; u < 8; u++) part += dv8[u] * ov8[u];");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "for (int d = PARTS / 2; d > 0; d /= 2) part += __shfl_xor_sync(0xffffffffu, "
                "part, d);");
    sn_cu_emitf(t, "if (threadIdx.x %% PARTS == 0) %s[r] = part;", dst);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* The fragment loop over s[nt][e] (ntiles n-tiles), its body `body` (one statement or more);
 * with `mask` first the element's coordinates: `coords` and seen (query_checked: i < SEQ_Q). */
void sn_attm_elements(sn_cu_text *t, const char *ntiles, const char *coords, bool query_checked,
                     const char *const *body, int n_body) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int nt = 0; nt < %s; nt++) {", ntiles);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int e = 0; e < 4; e++) {");
    if (coords) {
        sn_cu_emitf(t, "%s", coords);
        sn_att_emit_seen(t, query_checked);
    }
    for (int b = 0; b < n_body; b++) sn_cu_emitf(t, "%s", body[b]);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

void sn_att_emit_mma(sn_cu_text *t, const sn_att_plan *p, const char *fname) {
    sn_attm_ops o = emit_helpers(t, p);
    char path[128];
    snprintf(path, sizeof path, "tensor cores (%s, f32 accumulators, %s)",
             p->wgmma ? (p->dt == SN_BF16 ? "bf16 wgmma m64n64k16, sm_90a"
                                          : "f16 wgmma m64n64k16, sm_90a") :
             p->k8 ? "f16 mma.sync m16n8k8 x 2, sm_75" : p->dt == SN_BF16 ?
             "bf16 mma.sync m16n8k16" : "f16 mma.sync m16n8k16",
             p->stages == 2 ? "cp.async double-buffered" : "single-buffered");
    sn_att_emit_head(t, p, path, fname);
    switch (p->pass) {
    case SN_ATT_FWD: sn_attm_emit_fwd(t, p, o); break;
    case SN_ATT_DQ: sn_attm_emit_dq(t, p, o); break;
    case SN_ATT_DKV: sn_attm_emit_dkv(t, p, o); break;
    }
    sn_cu_emitf(t, "}");
}
