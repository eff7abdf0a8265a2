/* llvm_gemv_t.c: the few-row product on the CPU with W stored (N, K) (kernel.h: SN_KER_GEMV, tb:
 * LLaMA's (out, in) projections): y[m][n] = sum over k of x[m][k] W[n][k], a dot product per
 * output, W read from its source (NF4 bytes, or a 16-bit value widened) as it goes.
 * Convention: an item is 64 outputs n (rows of W); every y[m][n] is 16 partial sums, sum j over
 * the k = j (mod 16) ascending, one llvm.fma a term, then added pairwise (p[j] += p[j + 8], then
 * 4, 2, 1 away): at 16 lanes one vector of sums, at 8 two, at 4 four, so every vector width (and
 * every split of the items) gives the same bits, and so does the weight-at-a-time path.
 * Where 64 divides K (NF4), row n's k in [64 c, 64 c + 64) is exactly block n K / 64 + c: its 64
 * weights made as llvm_gemv.c makes a block's (sn_ll_nf4_block), then each row of x's 64 (loaded
 * once for the R rows of W in the tile) multiplies them into R sums. W16 reads 16 k a step, its
 * last K % 16 one at a time into their partial sums. Where 64 does not divide K (NF4) a block
 * straddles rows: a weight at a time, its block's scale each time (slow; no LLaMA's shape). */
#ifdef SN_HAVE_LLVM

#include "llvm_util.h"

enum { COLS = SN_GEMV_COLS, PARTS = 16 };

typedef struct {
    const sn_nf4_layout *l;     /* NF4; NULL: W16 */
    int64_t M, K, N;
    sn_dtype wt;                /* the weights' dtype */
    LLVMValueRef y, x, q, mean; /* y f32*, x typed, q i8* (NF4's bytes), mean f32 */
    LLVMValueRef w;             /* W16: the source typed (bfloat* or half*) */
} gemv_t;

/* The 16 partial sums p (P = 16 / lanes vectors, sum j at lane j % lanes of p[j / lanes])
 * added pairwise as kernel.h states; the scalar sum. */
static LLVMValueRef add_parts(sn_ll *L, LLVMValueRef *p) {
    LLVMValueRef s[PARTS];
    for (int j = 0; j < PARTS; j++)
        s[j] = LLVMBuildExtractElement(L->b, p[j / L->lanes], sn_ll_i32(L, j % L->lanes), "");
    for (int h = PARTS / 2; h >= 1; h /= 2)
        for (int j = 0; j < h; j++) s[j] = LLVMBuildFAdd(L->b, s[j], s[j + h], "");
    return s[0];
}

static LLVMValueRef fma3(sn_ll *L, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
    LLVMValueRef v[3] = {a, b, c};
    return sn_ll_call(L, "llvm.fma", v, 3, "acc");
}

/* Outputs n0 .. n0 + R - 1 (n0 an i64) for every row of x: M R P vector sums. */
static void rows_of_w(sn_ll *L, const gemv_t *g, LLVMValueRef n0, int R) {
    LLVMBuilderRef b = L->b;
    int P = PARTS / L->lanes, M = (int)g->M;
    int step = g->l ? COLS : PARTS, V = step / L->lanes; /* k a step, vectors a step */
    LLVMValueRef acc[SN_GEMV_MAX_M][4][4];
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++)
            for (int p = 0; p < P; p++) acc[m][r][p] = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, 0), "acc");
    LLVMValueRef rowk[4]; /* W's flat index of row n0 + r */
    for (int r = 0; r < R; r++)
        rowk[r] = sn_ll_mul(L, sn_ll_add(L, n0, sn_ll_i64(L, r)), sn_ll_i64(L, g->K));
    int64_t steps = g->K / step;
    if (steps > 0) {
        sn_ll_loop ks;
        LLVMValueRef c = sn_ll_for(L, &ks, sn_ll_i64(L, 0), sn_ll_i64(L, steps), sn_ll_i64(L, 1), "c");
        LLVMValueRef k0 = sn_ll_mul(L, c, sn_ll_i64(L, step));
        LLVMValueRef w[4][16]; /* [R][V] */
        for (int r = 0; r < R; r++) {
            if (g->l) { /* block (n0 + r) K / 64 + c */
                LLVMValueRef blk = sn_ll_add(L, sn_ll_mul(L, sn_ll_add(L, n0, sn_ll_i64(L, r)),
                                                          sn_ll_i64(L, g->K / COLS)), c);
                sn_ll_nf4_block(L, g->l, g->q, g->mean, blk, g->wt, w[r]);
            } else {
                for (int v = 0; v < V; v++)
                    w[r][v] = sn_ll_vload(L, g->w, sn_ll_add(L, sn_ll_add(L, rowk[r], k0),
                                                            sn_ll_i64(L, v * L->lanes)), NULL, "w");
            }
        }
        for (int m = 0; m < M; m++)
            for (int v = 0; v < V; v++) { /* k0 + v lanes ..: sums v % P (16 k a round) */
                LLVMValueRef xi = sn_ll_add(L, sn_ll_i64(L, m * g->K + v * L->lanes), k0);
                LLVMValueRef xv = sn_ll_vload(L, g->x, xi, NULL, "x");
                for (int r = 0; r < R; r++) {
                    LLVMValueRef a = acc[m][r][v % P];
                    sn_ll_set(L, a, fma3(L, xv, w[r][v], sn_ll_get(L, a, "")));
                }
            }
        sn_ll_for_end(L, &ks);
    }
    for (int64_t k = steps * step; k < g->K; k++) { /* W16's last K % 16: sum k % 16 */
        int j = (int)(k % PARTS);
        LLVMValueRef lane = sn_ll_i32(L, j % L->lanes);
        for (int r = 0; r < R; r++) {
            LLVMValueRef wk = sn_ll_load(L, g->w, sn_ll_add(L, rowk[r], sn_ll_i64(L, k)), "w");
            for (int m = 0; m < M; m++) {
                LLVMValueRef xk = sn_ll_load(L, g->x, sn_ll_i64(L, m * g->K + k), "x");
                LLVMValueRef a = acc[m][r][j / L->lanes], v = sn_ll_get(L, a, "");
                LLVMValueRef s = fma3(L, xk, wk, LLVMBuildExtractElement(b, v, lane, ""));
                sn_ll_set(L, a, LLVMBuildInsertElement(b, v, s, lane, ""));
            }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) {
            LLVMValueRef p[4];
            for (int q = 0; q < P; q++) p[q] = sn_ll_get(L, acc[m][r][q], "");
            LLVMValueRef yi = sn_ll_add(L, sn_ll_i64(L, m * g->N + r), n0);
            sn_ll_store(L, g->y, yi, add_parts(L, p));
        }
}

/* The item c (i64) a weight at a time (NF4 with 64 not dividing K): each y[m][n]'s 16 sums as
 * 16 scalars, k in rounds of 16 (then the last K % 16), the same order as the vector path. */
static void by_weight(sn_ll *L, const gemv_t *g, LLVMValueRef c) {
    LLVMValueRef one = sn_ll_i64(L, 1), levels = sn_ll_nf4_levels(L);
    LLVMValueRef col = sn_ll_mul(L, c, sn_ll_i64(L, COLS));
    LLVMValueRef end =
        sn_ll_imin(L, sn_ll_add(L, col, sn_ll_i64(L, COLS)), sn_ll_i64(L, g->N), "end");
    LLVMValueRef acc[PARTS];
    for (int j = 0; j < PARTS; j++) acc[j] = sn_ll_var(L, L->t_f32, sn_ll_f32(L, 0), "acc");
    sn_ll_loop ms, ns, ks;
    LLVMValueRef m = sn_ll_for(L, &ms, sn_ll_i64(L, 0), sn_ll_i64(L, g->M), one, "m");
    LLVMValueRef n = sn_ll_for(L, &ns, col, end, one, "n");
    for (int j = 0; j < PARTS; j++) sn_ll_set(L, acc[j], sn_ll_f32(L, 0));
    LLVMValueRef rowk = sn_ll_mul(L, n, sn_ll_i64(L, g->K)), xrow = sn_ll_mul(L, m, sn_ll_i64(L, g->K));
    int64_t rounds = g->K / PARTS;
    for (int tail = 0; tail < 2; tail++) {
        LLVMValueRef k0 = sn_ll_i64(L, rounds * PARTS);
        int64_t nj = PARTS;
        if (!tail) {
            if (!rounds) continue;
            LLVMValueRef rd = sn_ll_for(L, &ks, sn_ll_i64(L, 0), sn_ll_i64(L, rounds), one, "round");
            k0 = sn_ll_mul(L, rd, sn_ll_i64(L, PARTS));
        } else {
            nj = g->K % PARTS;
        }
        for (int j = 0; j < nj; j++) {
            LLVMValueRef k = sn_ll_add(L, k0, sn_ll_i64(L, j));
            LLVMValueRef w = sn_ll_nf4_weight(L, g->l, g->q, g->mean, levels, sn_ll_add(L, rowk, k),
                                              g->wt);
            LLVMValueRef xv = sn_ll_load(L, g->x, sn_ll_add(L, xrow, k), "x");
            sn_ll_set(L, acc[j], fma3(L, xv, w, sn_ll_get(L, acc[j], "")));
        }
        if (!tail) sn_ll_for_end(L, &ks);
    }
    LLVMValueRef s[PARTS];
    for (int j = 0; j < PARTS; j++) s[j] = sn_ll_get(L, acc[j], "");
    for (int h = PARTS / 2; h >= 1; h /= 2)
        for (int j = 0; j < h; j++) s[j] = LLVMBuildFAdd(L->b, s[j], s[j + h], "");
    sn_ll_store(L, g->y, sn_ll_add(L, sn_ll_mul(L, m, sn_ll_i64(L, g->N)), n), s[0]);
    sn_ll_for_end(L, &ns);
    sn_ll_for_end(L, &ms);
}

sn_status sn_ll_emit_gemv_t(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    (void)e; /* the contract (kernel_check.c) fixed the dtypes */
    sn_gemv p = sn_gemv_of(k);
    const sn_node *x = k->anchor->in[0];
    sn_nf4_layout l = sn_nf4_layout_of(p.K * p.N);
    gemv_t g = {.l = p.source == SN_GEMV_NF4 ? &l : NULL, .M = p.M, .K = p.K, .N = p.N, .wt = p.wt};
    LLVMBuilderRef b = L->b;
    sn_ll_fn_begin(L, fname);
    g.y = sn_ll_buf(L, 0, SN_F32, "y");
    g.x = sn_ll_buf(L, 1, x->dtype, "x");
    if (g.l) {
        LLVMValueRef two = sn_ll_i64(L, 2);
        LLVMTypeRef i8p = LLVMPointerType(L->t_i8, 0);
        g.q = LLVMBuildLoad2(b, i8p, LLVMBuildGEP2(b, i8p, L->bufs, &two, 1, ""), "q");
        g.mean = sn_ll_nf4_f32_at(L, g.q, sn_ll_i64(L, 0), "mean");
    } else {
        g.w = sn_ll_buf(L, 2, p.wt, "w");
    }
    sn_ll_loop items, ns, rest;
    LLVMValueRef c = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "item");
    if (g.l && g.K % COLS) {
        by_weight(L, &g, c);
    } else { /* R rows of W a tile: M R P vector sums, at most 16 (at least one row) */
        int P = PARTS / L->lanes, R = 16 / ((int)g.M * P);
        R = R < 1 ? 1 : R > 4 ? 4 : R;
        LLVMValueRef col = sn_ll_mul(L, c, sn_ll_i64(L, COLS));
        LLVMValueRef end =
            sn_ll_imin(L, sn_ll_add(L, col, sn_ll_i64(L, COLS)), sn_ll_i64(L, g.N), "end");
        LLVMValueRef n0 = col;
        if (R > 1) {
            LLVMValueRef last = sn_ll_add(L, end, sn_ll_i64(L, 1 - R)); /* whole tiles */
            n0 = sn_ll_for(L, &ns, col, last, sn_ll_i64(L, R), "n");
            rows_of_w(L, &g, n0, R);
            sn_ll_for_end(L, &ns);
            n0 = ns.i;
        }
        LLVMValueRef n = sn_ll_for(L, &rest, n0, end, sn_ll_i64(L, 1), "n"); /* one at a time */
        rows_of_w(L, &g, n, 1);
        sn_ll_for_end(L, &rest);
    }
    sn_ll_for_end(L, &items);
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
