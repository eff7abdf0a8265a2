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
 * end evaluate the mask, per warp. */
#include <stdio.h>

#include "cuda_attention.h"

int64_t sn_att_mma_shared(const sn_att_plan *p) {
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages, LD = p->D + 8,
            LDV = p->Dv + 8;
    switch (p->pass) {
    case SN_ATT_FWD: return 2 * (own * LD + W * LD + (p->out_o ? W * LDV : 0));
    case SN_ATT_DQ: return 2 * (own + W) * (LD + LDV) + 4 * own;
    case SN_ATT_DKV: /* k (and v), the streamed q, dout (and o for dk's dot), lse (and dot) */
        return 2 * (own * LD + (p->out_dk ? own * LDV : 0) + W * (LD + LDV) +
                    (p->out_dk ? W * LDV : 0)) + 4 * (int64_t)p->tile * (p->out_dk ? 2 : 1);
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

/* Shared-memory arrays: static (SN_SHARED, SN_SHARED2) when the plan fits 48 KiB, else carved
 * in order from the dynamic shared memory, `at` bytes in; sn_att_mma_shared counts the same. */
typedef struct {
    const sn_att_plan *p;
    int64_t at;
} carve;

static carve carve_begin(sn_cu_text *t, const sn_att_plan *p) {
    if (p->dynamic)
        sn_cu_emitf(t, "SN_DYNAMIC_SHARED(unsigned char, att_smem); /* %lld bytes, opted into */",
                    (long long)p->shared_bytes);
    return (carve){p, 0};
}

/* A tile of rows x cols 16-bit values (rows_text, cols_text: the same in the kernel's names). */
static void tile2(sn_cu_text *t, carve *c, const char *name, int64_t rows, int64_t cols,
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
static void floats(sn_cu_text *t, carve *c, const char *name, int64_t count,
                   const char *count_text, const char *note) {
    if (!c->p->dynamic) {
        sn_cu_emitf(t, "SN_SHARED(float, %s, %s);%s", name, count_text, note);
        return;
    }
    sn_cu_emitf(t, "SN_SHARED_AT(float, %s, %s, att_smem, %lld);%s", name, count_text,
                (long long)c->at, note);
    c->at += 4 * count;
}

/* Rows [row0, row0 + count) of src (`cols` 16-bit values wide, rows src_row apart, `limit` rows
 * in all) into rows trow .. of tile as 16-byte chunks (rows past limit: zeros), by every thread
 * of the block: cp.async copies still to be waited for (async), or loads and stores. */
static void copy_rows(sn_cu_text *t, bool async, const char *tile, const char *trow,
                      const char *src, const char *src_row, const char *row0, const char *count,
                      const char *cols, const char *limit) {
    sn_cu_emitf(t, "for (int e = threadIdx.x; e < %s * (%s / 8); e += THREADS) {", count, cols);
    sn_cu_emitf(t, "const int r = e / (%s / 8), c = e %% (%s / 8) * 8;", cols, cols);
    sn_cu_emitf(t, "const bool in = %s + r < %s;", row0, limit);
    if (async) {
        sn_cu_emitf(t, "sn_cp_async_16_zfill(&%s[%s + r][c], %s + (long long)(in ? %s + r : 0) * "
                    "%s + c, in ? 16u : 0u);", tile, trow, src, row0, src_row);
    } else {
        sn_cu_emitf(t, "uint4 x = make_uint4(0u, 0u, 0u, 0u);");
        sn_cu_emitf(t, "if (in) x = *reinterpret_cast<const uint4 *>(%s + (long long)(%s + r) * "
                    "%s + c);", src, row0, src_row);
        sn_cu_emitf(t, "*reinterpret_cast<uint4 *>(&%s[%s + r][c]) = x;", tile, trow);
    }
    sn_cu_emitf(t, "}");
}

/* acc[n][0..4) = 0 */
static void zero(sn_cu_text *t, const char *acc, const char *n) {
    sn_cu_emitf(t, "float %s[%s][4];", acc, n);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int x = 0; x < %s; x++) %s[x][0] = %s[x][1] = %s[x][2] = %s[x][3] = 0.0f;",
                n, acc, acc, acc, acc);
}

static void product_b_pairs(sn_cu_text *t, ops o, const char *acc, const char *b, const char *brow,
                            const char *ntiles);

/* acc[nt] += A B^T over a k of `kdim`: A the 16 rows from `arow` of tile a (ldmatrix x4), B the
 * rows brow + nt * 8 .. of tile b (row-major (n, k): the col layout, ldmatrix x2), nt < ntiles. */
static void product_abt(sn_cu_text *t, ops o, const char *acc, const char *a, const char *arow,
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
static void product_abt_m(sn_cu_text *t, ops o, const char *acc, const char *a, const char *arow,
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

static void product_b_pairs(sn_cu_text *t, ops o, const char *acc, const char *b, const char *brow,
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
static void product_xb(sn_cu_text *t, ops o, const char *acc, const char *x, const char *b,
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
static void product_xb_m(sn_cu_text *t, ops o, const char *acc, const char *x, const char *b,
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
static void zero_m(sn_cu_text *t, const char *acc, const char *n) {
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
static void store_row(sn_cu_text *t, ops o, const char *dst, const char *acc, const char *ntiles,
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
static void tile_dots(sn_cu_text *t, const sn_att_plan *p, const char *dst, const char *rows,
                      const char *first, const char *dout_at, const char *o_at) {
    const char *ty = sn_att_ctype(p->dt);
    sn_cu_emitf(t, "/* %s[r] = dout_i . o_i, PARTS threads a row */", dst);
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "enum { PARTS = THREADS >= %s ? THREADS / %s : 1 };", rows, rows);
    sn_cu_emitf(t, "for (int r = threadIdx.x / PARTS; r < %s; r += THREADS / PARTS) {", rows);
    sn_cu_emitf(t, "const int i = %s + r;", first);
    sn_cu_emitf(t, "float part = 0.0f;");
    sn_cu_emitf(t, "for (int c = threadIdx.x %% PARTS * 8; c < HEAD_DV && i < SEQ_Q; c += PARTS * 8) {");
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
static void elements(sn_cu_text *t, const char *ntiles, const char *coords, bool query_checked,
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

/* The streamed tile loop of FWD and DQ over the key tiles the block's queries see: opens the
 * body, in which `st` is the tile's first row in k_tile and v_tile (v: with_v). */
static void open_key_loop(sn_cu_text *t, const sn_att_plan *p, bool with_v) {
    bool async = p->stages == 2;
    sn_cu_emitf(t, "for (int k0 = 0, it = 0; k0 < key_end; k0 += BK, it++) {");
    if (async) {
        sn_cu_emitf(t, "const int st = it %% 2 * BK; /* this tile's rows in the stages */");
        sn_cu_emitf(t, "sn_cp_async_wait_group(0);");
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
    copy_rows(t, async, "k_tile", "sn", "k", "k_row", "kn", "BK", "HEAD_D", "SEQ_K");
    if (with_v) copy_rows(t, async, "v_tile", "sn", "v", "v_row", "kn", "BK", "HEAD_DV", "SEQ_K");
    sn_cu_emitf(t, "}");
    if (async) sn_cu_emitf(t, "sn_cp_async_commit();");
    else sn_cu_emitf(t, "__syncthreads();");
}

/* FWD and DQ: the block's rows, the causal key range, the first tile's copies (with the q-side
 * tiles of `qside`, named tile, source, columns). */
static void key_side_setup(sn_cu_text *t, const sn_att_plan *p, bool with_v,
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
        copy_rows(t, async, qside[i][0], "0", qside[i][1], row, "q0", "BQ", qside[i][2], "SEQ_Q");
    }
    if (async) {
        sn_cu_emitf(t, "/* the first key tile joins the query tiles' group */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const int kn = 0;");
        copy_rows(t, true, "k_tile", "0", "k", "k_row", "kn", "BK", "HEAD_D", "SEQ_K");
        if (with_v) copy_rows(t, true, "v_tile", "0", "v", "v_row", "kn", "BK", "HEAD_DV", "SEQ_K");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_cp_async_commit();");
    }
}

static void emit_enum(sn_cu_text *t, const sn_att_plan *p, const char *own, const char *streamed) {
    sn_cu_emitf(t, "enum { MT = %d, %s = 16 * MT * WARPS, %s = %d, STAGES = %d, LD = HEAD_D + 8, "
                "LDV = HEAD_DV + 8 }; /* MT m-tiles of 16 rows a warp; rows padded by 16 bytes */",
                p->rows / 16, own, streamed, p->tile, p->stages);
}

static void emit_fwd(sn_cu_text *t, const sn_att_plan *p, ops o) {
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages, LD = p->D + 8,
            LDV = p->Dv + 8;
    emit_enum(t, p, "BQ", "BK");
    carve c = carve_begin(t, p);
    tile2(t, &c, "q_tile", own, LD, "BQ", "LD", "");
    tile2(t, &c, "k_tile", W, LD, "STAGES * BK", "LD", "");
    if (p->out_o) tile2(t, &c, "v_tile", W, LDV, "STAGES * BK", "LDV", "");
    static const char *const qside[][3] = {{"q_tile", "q", "HEAD_D"}};
    key_side_setup(t, p, p->out_o, qside, 1);
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
    if (p->out_o) zero_m(t, "o_acc", "HEAD_DV / 8");
    open_key_loop(t, p, p->out_o);
    zero_m(t, "s", "BK / 8");
    product_abt_m(t, o, "s", "q_tile", "warp * 16 * MT", "k_tile", "st", "HEAD_D", "BK / 8");
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
        const char *m[] = {"s[m][nt][e] = seen ? exp2f(s[m][nt][e] * scale_log2 - row_max[m][e / 2]) : 0.0f;"};
        elements(t, "BK / 8", coords, false, m, 1);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "} else {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
        const char *u[] = {"s[m][nt][e] = exp2f(s[m][nt][e] * scale_log2 - row_max[m][e / 2]);"};
        elements(t, "BK / 8", NULL, false, u, 1);
    } else {
        const char *m[] = {"s[m][nt][e] = seen ? s[m][nt][e] * scale_log2 : -SN_INF;",
                           "tile_max[m][e / 2] = fmaxf(tile_max[m][e / 2], s[m][nt][e]);"};
        elements(t, "BK / 8", coords, false, m, 2);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "} else {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < MT; m++) {");
        const char *u[] = {"s[m][nt][e] *= scale_log2;",
                           "tile_max[m][e / 2] = fmaxf(tile_max[m][e / 2], s[m][nt][e]);"};
        elements(t, "BK / 8", NULL, false, u, 2);
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
        sn_cu_emitf(t, "const float m_new = fmaxf(row_max[m][h], tm);");
        sn_cu_emitf(t, "m_ref[m][h] = m_new == -SN_INF ? 0.0f : m_new; /* no key seen yet */");
        sn_cu_emitf(t, "const float alpha = exp2f(row_max[m][h] - m_ref[m][h]);");
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
        const char *x[] = {"s[m][nt][e] = exp2f(s[m][nt][e] - m_ref[m][e / 2]);",
                           "row_sum[m][e / 2] += s[m][nt][e]; /* this thread's columns; the quad "
                           "sums at the end */"};
        elements(t, "BK / 8", NULL, false, x, 2);
        sn_cu_emitf(t, "}");
    }
    if (p->out_o) {
        sn_cu_emitf(t, "/* o += P V */");
        product_xb_m(t, o, "o_acc", "s", "v_tile", "st", "BK / 16", "HEAD_DV / 8");
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
        store_row(t, o, "o_out", "o_acc[m]", "HEAD_DV / 8", "o_out_row", "inv");
    }
    if (p->out_lse)
        sn_cu_emitf(t, "if (tig == 0) sn_store(&lse_out[i], sum > 0.0f ? (row_max[m][h] + "
                    "log2f(sum)) * 0.693147181f : -SN_INF);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

static void emit_dq(sn_cu_text *t, const sn_att_plan *p, ops o) {
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages, LD = p->D + 8, LDV = p->Dv + 8;
    emit_enum(t, p, "BQ", "BK");
    carve c = carve_begin(t, p);
    tile2(t, &c, "q_tile", own, LD, "BQ", "LD", "");
    tile2(t, &c, "do_tile", own, LDV, "BQ", "LDV", "");
    tile2(t, &c, "k_tile", W, LD, "STAGES * BK", "LD", "");
    tile2(t, &c, "v_tile", W, LDV, "STAGES * BK", "LDV", "");
    floats(t, &c, "dot_rows", own, "BQ", " /* dout_i . o_i of the block's rows */");
    static const char *const qside[][3] = {{"q_tile", "q", "HEAD_D"}, {"do_tile", "dout", "HEAD_DV"}};
    key_side_setup(t, p, true, qside, 2);
    tile_dots(t, p, "dot_rows", "BQ", "q0", "dout + (long long)i * dout_row + c",
              "o + (long long)i * o_row + c");
    sn_cu_emitf(t, "float row_lse[2]; /* base 2 */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) row_lse[h] = row0 + 8 * h < SEQ_Q ? "
                "sn_load(lse[row0 + 8 * h]) * 1.44269504f : 0.0f;");
    zero(t, "acc", "HEAD_D / 8");
    open_key_loop(t, p, true);
    sn_cu_emitf(t, "const float row_dot[2] = {dot_rows[warp * 16 + grp], dot_rows[warp * 16 + "
                "grp + 8]};");
    sn_cu_emitf(t, "/* s = Q K^T, dp = dout V^T */");
    zero(t, "s", "BK / 8");
    zero(t, "dp", "BK / 8");
    product_abt(t, o, "s", "q_tile", "warp * 16", "k_tile", "st", "HEAD_D", "BK / 8");
    product_abt(t, o, "dp", "do_tile", "warp * 16", "v_tile", "st", "HEAD_DV", "BK / 8");
    sn_cu_emitf(t, "/* ds = P (dp - dout_i . o_i), P = 2^(s scale log2 e - lse log2 e), masked "
                "on a diagonal or last tile; in s */");
    sn_cu_emitf(t, "if (k0 + BK - 1 > warp_keys || k0 + BK > SEQ_K || q0 + warp * 16 + 16 > SEQ_Q) {");
    const char *m[] = {"s[nt][e] = seen ? exp2f(s[nt][e] * scale_log2 - row_lse[e / 2]) * "
                       "(dp[nt][e] - row_dot[e / 2]) : 0.0f;"};
    elements(t, "BK / 8", "const int i = row0 + e / 2 * 8, j = k0 + nt * 8 + 2 * tig + e % 2;",
             true, m, 1);
    sn_cu_emitf(t, "} else {");
    const char *u[] = {"s[nt][e] = exp2f(s[nt][e] * scale_log2 - row_lse[e / 2]) * (dp[nt][e] - "
                       "row_dot[e / 2]);"};
    elements(t, "BK / 8", NULL, true, u, 1);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* dq += ds K */");
    product_xb(t, o, "acc", "s", "k_tile", "st", "BK / 16", "HEAD_D / 8", true);
    sn_cu_emitf(t, "}");
    if (p->stages == 2) sn_cu_emitf(t, "sn_cp_async_wait_all(); /* none left in flight */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int h = 0; h < 2; h++) {");
    sn_cu_emitf(t, "const int i = row0 + 8 * h;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    store_row(t, o, "dq", "acc", "HEAD_D / 8", "dq_row", "scale");
    sn_cu_emitf(t, "}");
}

/* DKV: copies of query tile (gn, qn) into rows `trow` of the streamed tiles: q, dout and, with
 * dk, o (for the dots); head gn's pointers when the group has several. */
static void copy_query_tile(sn_cu_text *t, const sn_att_plan *p, bool async, const char *trow) {
    const char *srcs[][4] = {{"q_tile", "q", "HEAD_D", "q_row"},
                             {"do_tile", "dout", "HEAD_DV", "dout_row"},
                             {"o_tile", "o", "HEAD_DV", "o_row"}};
    for (int i = 0; i < (p->out_dk ? 3 : 2); i++) {
        char src[64];
        if (p->G > 1) snprintf(src, sizeof src, "(%s_group + gn * %s_head)", srcs[i][1], srcs[i][1]);
        else snprintf(src, sizeof src, "%s", srcs[i][1]);
        copy_rows(t, async, srcs[i][0], trow, src, srcs[i][3], "qn", "BQ", srcs[i][2], "SEQ_Q");
    }
}

static void emit_dkv(sn_cu_text *t, const sn_att_plan *p, ops o) {
    bool dk = p->out_dk, dv = p->out_dv, async = p->stages == 2, group = p->G > 1;
    SN_ASSERT(p->tile <= 32 * p->warps); /* a thread per query of the tile holds its lse */
    emit_enum(t, p, "BK", "BQ");
    sn_cu_emitf(t, "const float scale_log2 = scale * 1.44269504f; /* exponents in base 2 */");
    sn_cu_emitf(t, "const int k0 = blockIdx.x * BK; /* the first keys have the most queries */");
    sn_cu_emitf(t, "const int grp = lane / 4, tig = lane %% 4; /* a fragment's row group, "
                "thread in group */");
    sn_cu_emitf(t, "const int key0 = k0 + warp * 16 + grp; /* this thread's keys: key0, key0 + 8 */");
    int64_t own = (int64_t)p->rows * p->warps, W = (int64_t)p->tile * p->stages, LD = p->D + 8, LDV = p->Dv + 8;
    carve c = carve_begin(t, p);
    tile2(t, &c, "k_tile", own, LD, "BK", "LD", "");
    if (dk) tile2(t, &c, "v_tile", own, LDV, "BK", "LDV", "");
    tile2(t, &c, "q_tile", W, LD, "STAGES * BQ", "LD", "");
    tile2(t, &c, "do_tile", W, LDV, "STAGES * BQ", "LDV", "");
    if (dk) tile2(t, &c, "o_tile", W, LDV, "STAGES * BQ", "LDV", " /* for the dots */");
    floats(t, &c, "lse_tile", p->tile, "BQ", " /* base 2 */");
    if (dk) floats(t, &c, "dot_tile", p->tile, "BQ", " /* dout_i . o_i */");
    sn_cu_emitf(t, "/* causal: query i sees key j when i >= j - (SEQ_K - SEQ_Q); the query tiles "
                "from q_begin, of each query head of the group in order */");
    sn_cu_emitf(t, "const int q_begin = max(0, k0 - (SEQ_K - SEQ_Q)) / BQ * BQ;");
    sn_cu_emitf(t, "const int per_head = q_begin < SEQ_Q ? (SEQ_Q - q_begin + BQ - 1) / BQ : 0;");
    sn_cu_emitf(t, "const int n_tiles = %lld * per_head;", (long long)p->G);
    sn_cu_emitf(t, "/* a query tile whose first query misses the warp's last key is masked */");
    sn_cu_emitf(t, "const int warp_queries = k0 + warp * 16 + 15 - (SEQ_K - SEQ_Q);");
    copy_rows(t, async, "k_tile", "0", "k", "k_row", "k0", "BK", "HEAD_D", "SEQ_K");
    if (dk) copy_rows(t, async, "v_tile", "0", "v", "v_row", "k0", "BK", "HEAD_DV", "SEQ_K");
    if (async) {
        sn_cu_emitf(t, "/* the first query tile joins the key tiles' group */");
        sn_cu_emitf(t, "if (n_tiles > 0) {");
        sn_cu_emitf(t, "const int gn = 0, qn = q_begin;");
        if (!group) sn_cu_emitf(t, "(void)gn;");
        copy_query_tile(t, p, true, "0");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_cp_async_commit();");
        sn_cu_emitf(t, "/* the lse (base 2) of the tile's query threadIdx.x, one tile ahead */");
        sn_cu_emitf(t, "float lse_next = threadIdx.x < BQ && q_begin + (int)threadIdx.x < SEQ_Q && "
                    "n_tiles > 0 ? sn_load(%s[q_begin + threadIdx.x]) * 1.44269504f : 0.0f;",
                    group ? "lse_group" : "lse");
    }
    if (dk) zero(t, "acc_k", "HEAD_D / 8");
    if (dv) zero(t, "acc_v", "HEAD_DV / 8");
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
        sn_cu_emitf(t, "const int st = tq %% 2 * BQ; /* this tile's rows in the stages */");
        sn_cu_emitf(t, "sn_cp_async_wait_group(0);");
        sn_cu_emitf(t, "__syncthreads(); /* the tile is in for every thread; the other stage's "
                    "readers are done */");
        sn_cu_emitf(t, "/* the next tile, landing while this one is used */");
        sn_cu_emitf(t, "if (tq + 1 < n_tiles) {");
        sn_cu_emitf(t, "const int gn = (tq + 1) / per_head, qn = q_begin + (tq + 1) %% per_head * BQ;");
        if (!group) sn_cu_emitf(t, "(void)gn;");
        copy_query_tile(t, p, true, "BQ - st");
        sn_cu_emitf(t, "const int r = threadIdx.x;");
        sn_cu_emitf(t, "if (r < BQ) lse_next = qn + r < SEQ_Q ? sn_load(%s[qn + r]) * "
                    "1.44269504f : 0.0f; /* read at the next tile: its latency hidden */",
                    group ? "(lse_group + gn * lse_head)" : "lse");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "sn_cp_async_commit();");
    } else {
        sn_cu_emitf(t, "const int st = 0;");
        sn_cu_emitf(t, "__syncthreads(); /* the previous query tile is used up */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const int gn = g, qn = qs;");
        if (!group) sn_cu_emitf(t, "(void)gn;");
        copy_query_tile(t, p, false, "st");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "__syncthreads();");
    }
    sn_cu_emitf(t, "/* the tile's lse (base 2)%s */", dk ? " and dots dout_i . o_i" : "");
    if (async)
        sn_cu_emitf(t, "if (threadIdx.x < BQ) lse_tile[threadIdx.x] = lse_here;");
    else
        sn_cu_emitf(t, "for (int r = threadIdx.x; r < BQ; r += THREADS) lse_tile[r] = qs + r < "
                    "SEQ_Q ? sn_load(lse[qs + r]) * 1.44269504f : 0.0f;");
    if (dk)
        tile_dots(t, p, "dot_tile", "BQ", "qs", "&do_tile[st + r][c]", "&o_tile[st + r][c]");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "/* s = K Q^T (keys x queries)%s */", dk ? ", dp = V dout^T" : "");
    zero(t, "s", "BQ / 8");
    product_abt(t, o, "s", "k_tile", "warp * 16", "q_tile", "st", "HEAD_D", "BQ / 8");
    if (dk) {
        zero(t, "dp", "BQ / 8");
        product_abt(t, o, "dp", "v_tile", "warp * 16", "do_tile", "st", "HEAD_DV", "BQ / 8");
    }
    sn_cu_emitf(t, "/* P = 2^(s scale log2 e - lse log2 e), masked on a diagonal or last tile, "
                "in s%s */", dk ? "; ds = P (dp - dout_i . o_i), in dp" : "");
    sn_cu_emitf(t, "if (qs < warp_queries || qs + BQ > SEQ_Q || k0 + warp * 16 + 16 > SEQ_K) {");
    const char *coords = "const int j = key0 + e / 2 * 8, r = nt * 8 + 2 * tig + e % 2, i = qs + r;";
    const char *m[] = {"s[nt][e] = seen ? exp2f(s[nt][e] * scale_log2 - lse_tile[r]) : 0.0f;",
                       "dp[nt][e] = s[nt][e] * (dp[nt][e] - dot_tile[r]);"};
    elements(t, "BQ / 8", coords, true, m, dk ? 2 : 1);
    sn_cu_emitf(t, "} else {");
    const char *u[] = {"const int r = nt * 8 + 2 * tig + e % 2;",
                       "s[nt][e] = exp2f(s[nt][e] * scale_log2 - lse_tile[r]);",
                       "dp[nt][e] = s[nt][e] * (dp[nt][e] - dot_tile[r]);"};
    elements(t, "BQ / 8", NULL, true, u, dk ? 3 : 2);
    sn_cu_emitf(t, "}");
    if (dv) {
        sn_cu_emitf(t, "/* dv += P dout */");
        product_xb(t, o, "acc_v", "s", "do_tile", "st", "BQ / 16", "HEAD_DV / 8", false);
    }
    if (dk) {
        sn_cu_emitf(t, "/* dk += ds Q */");
        product_xb(t, o, "acc_k", "dp", "q_tile", "st", "BQ / 16", "HEAD_D / 8", false);
    }
    sn_cu_emitf(t, "}");
    if (async) sn_cu_emitf(t, "sn_cp_async_wait_all(); /* none left in flight */");
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
    char path[128];
    snprintf(path, sizeof path, "tensor cores (%s, f32 accumulators, %s)",
             p->k8 ? "f16 mma.sync m16n8k8 x 2, sm_75" : p->dt == SN_BF16 ?
             "bf16 mma.sync m16n8k16" : "f16 mma.sync m16n8k16",
             p->stages == 2 ? "cp.async double-buffered" : "single-buffered");
    sn_att_emit_head(t, p, path, fname);
    switch (p->pass) {
    case SN_ATT_FWD: emit_fwd(t, p, o); break;
    case SN_ATT_DQ: emit_dq(t, p, o); break;
    case SN_ATT_DKV: emit_dkv(t, p, o); break;
    }
    sn_cu_emitf(t, "}");
}
