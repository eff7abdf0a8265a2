/* llvm_gemv.c: the few-row product on the CPU (kernel.h: SN_KER_GEMV) for W (K, N): y (M, N) =
 * x (M, K) @ W, W read from its source as it goes, never stored: packed NF4 bytes (ir/nf4.h)
 * or a 16-bit value widened (W16). The transposed layout is llvm_gemv_t.c's, reached from here.
 * Convention: an item is 64 columns of y; every y[m][n] is summed over k ascending from 0, one
 * llvm.fma a term (never fmuladd: the order and the roundings are fixed, so the vector path
 * and the weight-at-a-time path give the same bits, and so does any split of the items over
 * the pool). Each NF4 weight is the dequantize kernel's: rnd_w(level[code] * scale).
 * Where 64 divides N, row k of an item's columns is exactly block k N / 64 + item: one scale,
 * 32 bytes. The block's 16 possible weights are made in one vector (levels times the scale,
 * rounded to W's dtype) and each code picks its weight from them: vpermps over a 16-entry table
 * with AVX-512 (one instruction a 16 weights), two 8-entry vpermps and a select with AVX2,
 * 15 compares and selects otherwise (sn_ll_nf4_block); then each row of x in a tile multiplies
 * them into its sums (W16: the row's 64 G weights loaded and widened). A tile is `rows` rows of
 * x by G consecutive items, at most 16 vector accumulators (at batch 1 and 16 lanes: 4 items,
 * so each row of W is read in whole cache lines), the row AHEAD rows on prefetched. The bytes
 * read are the source's once a tile: at batch 1, 0.53 bytes a weight for NF4 and 2 for W16 where
 * the unpacked f32 weight is 4 (and the dequantize or cast kernel writes it and the GEMM reads
 * it again). Where 64 does not divide N, a block straddles rows (NF4): a weight at a time, its
 * block's scale each time (slow, rare: no model's product; W16 takes it too). */
#ifdef SN_HAVE_LLVM

#include <string.h>

#include "llvm_util.h"

enum { COLS = SN_GEMV_COLS, BYTES = SN_GEMV_COLS / 2 };
/* Rows of W ahead whose codes are prefetched: the rows lie N / 2 bytes apart, too far for the
 * hardware's stream prefetcher, and a row's 32 G bytes alone left the kernel waiting on L3
 * (nf4_gemv_bench --copies 48 --threads 1, gpt2's shapes: 0.12-0.31 ns a weight without, 0.08-0.17
 * with 8 to 64 rows ahead, all alike within the load's noise). */
enum { AHEAD = 16 };

/* Whether the host has feature "+name" (L->features: comma-separated). */
static bool has(const sn_ll *L, const char *name) {
    size_t n = strlen(name);
    for (const char *p = L->features; p && (p = strstr(p, name)); p += n)
        if (p > L->features && p[-1] == '+' && (p[n] == ',' || !p[n])) return true;
    return false;
}

static LLVMValueRef const_i32v(sn_ll *L, const int *v, int n) {
    LLVMValueRef c[64];
    for (int i = 0; i < n; i++) c[i] = sn_ll_i32(L, v[i]);
    return LLVMConstVector(c, (unsigned)n);
}

/* lanes [at, at + n) of vector v */
static LLVMValueRef slice(sn_ll *L, LLVMValueRef v, int at, int n, const char *name) {
    int ix[64];
    for (int i = 0; i < n; i++) ix[i] = at + i;
    return LLVMBuildShuffleVector(L->b, v, LLVMGetUndef(LLVMTypeOf(v)), const_i32v(L, ix, n), name);
}

/* The table's 16 weights (parts tab[0 .. 16 / lanes), lanes a vector) at the indices idx
 * (<lanes x i32>, each 0..15). */
static LLVMValueRef pick(sn_ll *L, LLVMValueRef *tab, LLVMValueRef idx) {
    LLVMBuilderRef b = L->b;
    if (L->lanes == 16 && has(L, "avx512f")) { /* vpermps zmm: the 16 entries at once */
        LLVMValueRef a[2] = {tab[0], idx};
        return sn_ll_call_typed(L, "llvm.x86.avx512.permvar.sf.512", NULL, 0, a, 2, "w");
    }
    if (L->lanes == 8 && has(L, "avx2")) { /* vpermps ymm reads idx's low 3 bits */
        LLVMValueRef lo[2] = {tab[0], idx}, hi[2] = {tab[1], idx};
        LLVMValueRef wl = sn_ll_call_typed(L, "llvm.x86.avx2.permps", NULL, 0, lo, 2, "");
        LLVMValueRef wh = sn_ll_call_typed(L, "llvm.x86.avx2.permps", NULL, 0, hi, 2, "");
        LLVMValueRef upper = LLVMBuildICmp(b, LLVMIntUGT, idx, sn_ll_ic(L, idx, 7), "");
        return LLVMBuildSelect(b, upper, wh, wl, "w");
    }
    LLVMValueRef w = NULL;
    for (int j = 0; j < 16; j++) { /* w = entry j where idx == j */
        LLVMValueRef e =
            LLVMBuildExtractElement(b, tab[j / L->lanes], sn_ll_i32(L, j % L->lanes), "");
        LLVMValueRef vj = sn_ll_splat(L, e, "");
        w = !w ? vj
               : LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, idx, sn_ll_ic(L, idx, j), ""), vj,
                                 w, "");
    }
    return w;
}

void sn_ll_nf4_block(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef mean,
                     LLVMValueRef blk, sn_dtype wt, LLVMValueRef *w) {
    LLVMBuilderRef b = L->b;
    LLVMValueRef lv[16];
    for (int j = 0; j < 16; j++) lv[j] = sn_ll_f32(L, sn_nf4_levels[j]);
    int hl[COLS];
    LLVMValueRef sh4[BYTES], and15[BYTES];
    for (int i = 0; i < BYTES; i++) {
        hl[2 * i] = i;             /* weight 2i: byte i's high nibble */
        hl[2 * i + 1] = BYTES + i; /* weight 2i + 1: its low nibble */
        sh4[i] = LLVMConstInt(L->t_i8, 4, 0);
        and15[i] = LLVMConstInt(L->t_i8, 15, 0);
    }
    LLVMTypeRef vbytes = LLVMVectorType(L->t_i8, BYTES);
    LLVMValueRef scale = sn_ll_splat(L, sn_ll_nf4_scale(L, l, q, mean, blk), "scale");
    LLVMValueRef tab[4]; /* the block's 16 weights, rounded to W's dtype */
    for (int p = 0; p < 16 / L->lanes; p++)
        tab[p] = sn_ll_round_to(
            L, LLVMBuildFMul(b, LLVMConstVector(lv + p * L->lanes, (unsigned)L->lanes), scale, ""),
            wt);
    LLVMValueRef at = sn_ll_add(L, sn_ll_i64(L, l->off_codes), sn_ll_mul(L, blk, sn_ll_i64(L, BYTES)));
    LLVMValueRef cp = LLVMBuildBitCast(b, LLVMBuildGEP2(b, L->t_i8, q, &at, 1, ""),
                                       LLVMPointerType(vbytes, 0), "");
    LLVMValueRef codes = LLVMBuildLoad2(b, vbytes, cp, "codes");
    LLVMSetAlignment(codes, 1);
    LLVMValueRef hi4 = LLVMBuildLShr(b, codes, LLVMConstVector(sh4, BYTES), "hi");
    LLVMValueRef lo4 = LLVMBuildAnd(b, codes, LLVMConstVector(and15, BYTES), "lo");
    LLVMValueRef nib = LLVMBuildShuffleVector(b, hi4, lo4, const_i32v(L, hl, COLS), "nibbles");
    for (int v = 0; v < COLS / L->lanes; v++) {
        LLVMValueRef idx =
            LLVMBuildZExt(b, slice(L, nib, v * L->lanes, L->lanes, ""), L->t_vi32, "idx");
        w[v] = pick(L, tab, idx);
    }
}

typedef struct {
    const sn_nf4_layout *l;     /* NF4; NULL: W16 */
    int64_t M, K, N;
    sn_dtype wt;                /* the weight's dtype (the dequantize's): rnd_w */
    LLVMValueRef y, x, q, mean; /* y f32*, x typed, q i8* (the source's bytes), mean f32 */
    LLVMValueRef w;             /* W16: the source typed (bfloat* or half*) */
} gemv;

/* Items [c, c + G) (c an i64) with 64 | N: rows [m0, m0 + rows) of y at their 64 G columns,
 * rows * G * 64 / lanes <= 16 vector accumulators. Row k of the G items is 32 G consecutive
 * bytes (G blocks): with G > 1 a row of W is read in whole cache lines, which the hardware
 * prefetches; a half line a row (G = 1) ran at a third of the speed from L3. */
static void tile(sn_ll *L, const gemv *g, LLVMValueRef c, int64_t m0, int rows, int G) {
    LLVMBuilderRef b = L->b;
    int V = COLS / L->lanes; /* vectors an item's row */
    LLVMValueRef acc[4][16];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < G * V; v++) acc[r][v] = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, 0), "acc");
    int wbytes = g->l ? BYTES : 2 * COLS; /* an item's row in the source */
    sn_ll_loop ks;
    LLVMValueRef k = sn_ll_for(L, &ks, sn_ll_i64(L, 0), sn_ll_i64(L, g->K), sn_ll_i64(L, 1), "k");
    LLVMValueRef first = sn_ll_add(L, sn_ll_mul(L, k, sn_ll_i64(L, g->N / COLS)), c);
    LLVMValueRef w[64]; /* [G V]: the group's weights of row k */
    for (int line = 0; line < (G * wbytes + 63) / 64; line++) { /* row k + AHEAD's codes */
        int64_t off = g->l ? g->l->off_codes + AHEAD * g->N / 2 : AHEAD * g->N * 2;
        LLVMValueRef at = sn_ll_add(L, sn_ll_mul(L, first, sn_ll_i64(L, wbytes)),
                                    sn_ll_i64(L, off + 64 * line));
        LLVMValueRef pf[4] = {LLVMBuildGEP2(b, L->t_i8, g->q, &at, 1, ""), sn_ll_i32(L, 0),
                              sn_ll_i32(L, 3), sn_ll_i32(L, 1)}; /* read, keep, data */
        sn_ll_call(L, "llvm.prefetch", pf, 4, "");
    }
    for (int gi = 0; gi < G; gi++) {
        LLVMValueRef blk = sn_ll_add(L, first, sn_ll_i64(L, gi));
        if (g->l) {
            sn_ll_nf4_block(L, g->l, g->q, g->mean, blk, g->wt, w + gi * V);
            continue;
        }
        LLVMValueRef at = sn_ll_mul(L, blk, sn_ll_i64(L, COLS)); /* W16: row k's 64 weights */
        for (int v = 0; v < V; v++)
            w[gi * V + v] = sn_ll_vload(L, g->w, sn_ll_add(L, at, sn_ll_i64(L, v * L->lanes)),
                                        NULL, "w");
    }
    for (int r = 0; r < rows; r++) {
        LLVMValueRef xi = sn_ll_add(L, sn_ll_i64(L, (m0 + r) * g->K), k);
        LLVMValueRef xs = sn_ll_splat(L, sn_ll_load(L, g->x, xi, "x"), "xs");
        for (int v = 0; v < G * V; v++) {
            LLVMValueRef a[3] = {xs, w[v], sn_ll_get(L, acc[r][v], "")};
            sn_ll_set(L, acc[r][v], sn_ll_call(L, "llvm.fma", a, 3, "acc"));
        }
    }
    sn_ll_for_end(L, &ks);
    LLVMValueRef col = sn_ll_mul(L, c, sn_ll_i64(L, COLS));
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < G * V; v++) {
            LLVMValueRef yi = sn_ll_add(L, sn_ll_i64(L, (m0 + r) * g->N + v * L->lanes), col);
            sn_ll_vstore(L, g->y, yi, sn_ll_get(L, acc[r][v], "sum"), NULL);
        }
}

/* Items [c, c + G): every row of y, in tiles of `rows` rows. */
static void tiles(sn_ll *L, const gemv *g, LLVMValueRef c, int rows, int G) {
    for (int64_t m0 = 0; m0 < g->M; m0 += rows)
        tile(L, g, c, m0, (int)(g->M - m0 < rows ? g->M - m0 : rows), G);
}

/* The item c (i64) a weight at a time (any N): flat index f = k N + n, its nibble, its block's
 * scale; the same sums in the same order. */
LLVMValueRef sn_ll_nf4_weight(sn_ll *L, const sn_nf4_layout *l, LLVMValueRef q, LLVMValueRef mean,
                              LLVMValueRef levels, LLVMValueRef f, sn_dtype wt) {
    LLVMValueRef level = sn_ll_nf4_level(L, l, q, levels, f);
    LLVMValueRef blk = LLVMBuildLShr(L->b, f, sn_ll_i64(L, 6), "blk"); /* f / 64 */
    LLVMValueRef scale = sn_ll_nf4_scale(L, l, q, mean, blk);
    return sn_ll_round_to(L, LLVMBuildFMul(L->b, level, scale, ""), wt);
}

static void by_weight(sn_ll *L, const gemv *g, LLVMValueRef c) {
    LLVMValueRef one = sn_ll_i64(L, 1), levels = g->l ? sn_ll_nf4_levels(L) : NULL;
    LLVMValueRef col = sn_ll_mul(L, c, sn_ll_i64(L, COLS));
    LLVMValueRef end =
        sn_ll_imin(L, sn_ll_add(L, col, sn_ll_i64(L, COLS)), sn_ll_i64(L, g->N), "end");
    LLVMValueRef acc = sn_ll_var(L, L->t_f32, sn_ll_f32(L, 0), "acc");
    sn_ll_loop ms, ns, ks;
    LLVMValueRef m = sn_ll_for(L, &ms, sn_ll_i64(L, 0), sn_ll_i64(L, g->M), one, "m");
    LLVMValueRef n = sn_ll_for(L, &ns, col, end, one, "n");
    sn_ll_set(L, acc, sn_ll_f32(L, 0));
    LLVMValueRef k = sn_ll_for(L, &ks, sn_ll_i64(L, 0), sn_ll_i64(L, g->K), one, "k");
    LLVMValueRef f = sn_ll_add(L, sn_ll_mul(L, k, sn_ll_i64(L, g->N)), n);
    LLVMValueRef w = g->l ? sn_ll_nf4_weight(L, g->l, g->q, g->mean, levels, f, g->wt)
                          : sn_ll_load(L, g->w, f, "w");
    LLVMValueRef xv =
        sn_ll_load(L, g->x, sn_ll_add(L, sn_ll_mul(L, m, sn_ll_i64(L, g->K)), k), "x");
    LLVMValueRef a[3] = {xv, w, sn_ll_get(L, acc, "")};
    sn_ll_set(L, acc, sn_ll_call(L, "llvm.fma", a, 3, "acc"));
    sn_ll_for_end(L, &ks);
    sn_ll_store(L, g->y, sn_ll_add(L, sn_ll_mul(L, m, sn_ll_i64(L, g->N)), n),
                sn_ll_get(L, acc, "sum"));
    sn_ll_for_end(L, &ns);
    sn_ll_for_end(L, &ms);
}

sn_status sn_ll_emit_gemv(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    /* the contract (kernel_check.c) fixed the dtypes: x f32, bf16 or f16 (W16: f32), y f32 */
    sn_gemv p = sn_gemv_of(k);
    if (p.tb) return sn_ll_emit_gemv_t(L, k, fname, e);
    const sn_node *x = k->anchor->in[0];
    sn_nf4_layout l = sn_nf4_layout_of(p.K * p.N);
    gemv g = {.l = p.source == SN_GEMV_NF4 ? &l : NULL, .M = p.M, .K = p.K, .N = p.N, .wt = p.wt};
    LLVMBuilderRef b = L->b;
    sn_ll_fn_begin(L, fname);
    g.y = sn_ll_buf(L, 0, SN_F32, "y");
    g.x = sn_ll_buf(L, 1, x->dtype, "x");
    LLVMValueRef two = sn_ll_i64(L, 2);
    LLVMTypeRef i8p = LLVMPointerType(L->t_i8, 0);
    g.q = LLVMBuildLoad2(b, i8p, LLVMBuildGEP2(b, i8p, L->bufs, &two, 1, ""), "q");
    if (g.l) g.mean = sn_ll_nf4_f32_at(L, g.q, sn_ll_i64(L, 0), "mean");
    else g.w = sn_ll_buf(L, 2, p.wt, "w");
    sn_ll_loop items, rest;
    if (g.N % COLS == 0) { /* 16 accumulators: rows x G items x 64 / lanes; a row first */
        int full = L->lanes / 4, rows = g.M < full ? (int)g.M : full, G = full / rows;
        LLVMValueRef last = sn_ll_add(L, L->end, sn_ll_i64(L, 1 - G)); /* groups of G */
        LLVMValueRef c = sn_ll_for(L, &items, L->begin, last, sn_ll_i64(L, G), "item");
        tiles(L, &g, c, rows, G);
        sn_ll_for_end(L, &items);
        if (G > 1) { /* the items after the last whole group, one at a time */
            c = sn_ll_for(L, &rest, items.i, L->end, sn_ll_i64(L, 1), "item");
            tiles(L, &g, c, rows, 1);
            sn_ll_for_end(L, &rest);
        }
    } else {
        LLVMValueRef c = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "item");
        by_weight(L, &g, c);
        sn_ll_for_end(L, &items);
    }
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
