/* llvm_attention_steps.c: the steps of the fused causal attention kernels (f32 inside; bf16/f16 q, k, v, o, dout
 * converted on load, outputs on store), one (batch x head) slice per item:
 * the forward (online softmax over key blocks: O and the log-sum-exp in one pass), and the three
 * backwards: dq by query rows, dk and dv by key rows over the queries that see them.
 * Convention: a row (of q, k, v, o or dout) is held as ceil(n / lanes) vectors, the last one
 * masked. A step takes R rows (two where registers allow), which share every row of the other
 * side that a block loads; a block is `lanes` rows of the other side (keys, or queries): one dot
 * product per pair as vector FMAs over the head size, then the block's partial-sum vectors are
 * reduced together by a transposing shuffle tree into one vector with a score per lane, so exp
 * and the softmax statistics run on whole vectors. A masked block's lanes past a row's range
 * read the last row in range instead and are masked out: nothing is read out of bounds.
 * Grouped-query attention (G query heads per k/v head): the forward and dq items are q's slices,
 * reading k and v at the slice's head / G; the dk and dv items are k's slices, each looping over
 * its G query heads in order, their sums in the same accumulators. */
#ifdef SN_HAVE_LLVM

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llvm_attention.h"

#define B (a->L->b)

/* ---- small helpers ---- */

/* The mask of chunk c of a row of n elements: NULL when full. */
static LLVMValueRef chunk_mask(sn_ll *L, int64_t n, int c) {
    int64_t left = n - (int64_t)c * L->lanes;
    return left >= L->lanes ? NULL : sn_ll_const_first_lanes(L, (int)left);
}

/* The vector whose lanes are all lane l of v. */
static LLVMValueRef lane_splat(sn_ll *L, LLVMValueRef v, int l) {
    LLVMValueRef idx[16];
    for (int i = 0; i < L->lanes; i++) idx[i] = sn_ll_i32(L, l);
    return LLVMBuildShuffleVector(L->b, v, LLVMGetUndef(L->t_vf),
                                  LLVMConstVector(idx, (unsigned)L->lanes), "");
}

/* The row stride of input slice p (one of q, k, v, o, dout). */
static int64_t rs_of(const att *a, LLVMValueRef p) {
    if (p == a->q) return a->rq;
    if (p == a->k) return a->rk;
    if (p == a->v) return a->rv;
    if (p == a->o) return a->ro;
    SN_ASSERT(p == a->dout);
    return a->rdo;
}

/* Row r (of n elements) of input p into x[0 .. chunks). */
static void load_row(att *a, LLVMValueRef p, LLVMValueRef r, int64_t n, LLVMValueRef *x,
                     const char *name) {
    sn_ll *L = a->L;
    LLVMValueRef off = sn_ll_mul(L, r, sn_ll_i64(L, rs_of(a, p)));
    for (int c = 0; c < sn_ll_att_chunks(L, n); c++)
        x[c] = sn_ll_vload(L, p, sn_ll_add(L, off, sn_ll_i64(L, (int64_t)c * L->lanes)),
                           chunk_mask(L, n, c), name);
}

/* Row r (of n elements) of the output y, rows a->ry apart. */
static void store_row(att *a, LLVMValueRef p, LLVMValueRef r, int64_t n, LLVMValueRef *x) {
    sn_ll *L = a->L;
    SN_ASSERT(p == a->y);
    LLVMValueRef off = sn_ll_mul(L, r, sn_ll_i64(L, a->ry));
    for (int c = 0; c < sn_ll_att_chunks(L, n); c++)
        sn_ll_vstore(L, p, sn_ll_add(L, off, sn_ll_i64(L, (int64_t)c * L->lanes)), x[c],
                     chunk_mask(L, n, c));
}

/* x . y over the chunks of a row of n elements (masked lanes are zero in both). */
static LLVMValueRef row_dot(att *a, LLVMValueRef *x, LLVMValueRef *y, int64_t n, const char *name) {
    sn_ll *L = a->L;
    LLVMValueRef acc = LLVMBuildFMul(B, x[0], y[0], "");
    for (int c = 1; c < sn_ll_att_chunks(L, n); c++) acc = sn_ll_fma(L, x[c], y[c], acc);
    return sn_ll_hsum(L, acc, name);
}

/* Horizontal sums of `lanes` vectors at once: lane l of the result is the sum of the l-th
 * vector pushed. Vectors are merged pairwise as soon as two of the same level are on the stack
 * (lanes-1 merges in all, two shuffles and an add each, and at most log2(lanes)+1 vectors live):
 * a merge keeps, for every row it holds, half as many partial-sum lanes. Which lanes hold which
 * row is tracked here, while the kernel is built, so the shuffles are constants. */
typedef struct {
    int n, pushed;
    LLVMValueRef v[6];
    int level[6];
    int row[6][16]; /* row[e][lane]: the row whose partial sum the lane holds */
} hsum_stack;

static void hsum_push(sn_ll *L, hsum_stack *h, LLVMValueRef x, const char *name) {
    int W = L->lanes, e = h->n++;
    SN_ASSERT(e < 6);
    h->v[e] = x;
    h->level[e] = 0;
    for (int l = 0; l < W; l++) h->row[e][l] = h->pushed;
    h->pushed++;
    while (h->n > 1 && h->level[h->n - 1] == h->level[h->n - 2]) {
        int a = h->n - 2, cat[32], nrow[16], k = 0, lo_row = h->row[a][0];
        int nrows = 2 << h->level[a];
        LLVMValueRef lo[16], hi[16];
        for (int l = 0; l < W; l++) cat[l] = h->row[a][l], cat[W + l] = h->row[a + 1][l];
        for (int r = lo_row; r < lo_row + nrows; r++) { /* rows ascending, each to half its lanes */
            int idx[32], g = 0;
            for (int l = 0; l < 2 * W; l++)
                if (cat[l] == r) idx[g++] = l;
            for (int t = 0; t < g / 2; t++, k++) {
                lo[k] = sn_ll_i32(L, idx[t]);
                hi[k] = sn_ll_i32(L, idx[g / 2 + t]);
                nrow[k] = r;
            }
        }
        SN_ASSERT(k == W);
        LLVMValueRef x0 = h->v[a], x1 = h->v[a + 1];
        LLVMValueRef s0 = LLVMBuildShuffleVector(L->b, x0, x1, LLVMConstVector(lo, (unsigned)W), "");
        LLVMValueRef s1 = LLVMBuildShuffleVector(L->b, x0, x1, LLVMConstVector(hi, (unsigned)W), "");
        h->v[a] = LLVMBuildFAdd(L->b, s0, s1, nrows == W ? name : "");
        h->level[a]++;
        memcpy(h->row[a], nrow, sizeof nrow);
        h->n--;
    }
}

/* The vector of the lanes sums, once lanes vectors were pushed. */
static LLVMValueRef hsum_result(sn_ll *L, const hsum_stack *h) {
    SN_ASSERT(h->n == 1 && (1 << h->level[0]) == L->lanes);
    for (int l = 0; l < L->lanes; l++) SN_ASSERT(h->row[0][l] == l);
    return h->v[0];
}

/* ---- blocks ---- */

/* One step of a kernel: R rows (query rows for the forward and dq, key rows for dk and dv)
 * that share every k, v (or q, dout) row a block loads. Row t, row[t], pairs with the rows
 * [lo[t], hi[t]) of the other side (lo NULL: from 0); both bounds ascend with t. */
typedef struct {
    int R;
    LLVMValueRef row[MAX_R], lo[MAX_R], hi[MAX_R];
    LLVMValueRef x[MAX_R][MAX_CHUNKS];   /* q_i (forward, dq) or k_j (dk, dv) */
    LLVMValueRef y[MAX_R][MAX_CHUNKS];   /* dout_i (dq) or v_j (dk) */
    LLVMValueRef lse[MAX_R], di[MAX_R];  /* splats of lse_i and D_i (forward given lse; dq) */
    LLVMValueRef m[MAX_R], l[MAX_R];     /* online softmax: running max and sum (vars) */
    LLVMValueRef acc[MAX_R][MAX_CHUNKS]; /* the accumulated rows (vars) */
    int64_t n_acc;                       /* their length */
} step;

/* Row j0 + l of a block, or, in a masked block, at most `last`: lanes past the range read the
 * last row in it (their results are masked out), so reads stay in bounds. */
static LLVMValueRef block_row(att *a, LLVMValueRef j0, int l, LLVMValueRef last) {
    sn_ll *L = a->L;
    LLVMValueRef r = sn_ll_add(L, j0, sn_ll_i64(L, l));
    return last ? sn_ll_imin(L, r, last, "row") : r;
}

/* out[t] lane l = x[t] . row(j0 + l) of input p (rows of n elements), for t < R. */
static void block_dots(att *a, int R, LLVMValueRef (*x)[MAX_CHUNKS], LLVMValueRef p, int64_t n,
                       LLVMValueRef j0, LLVMValueRef last, LLVMValueRef *out, const char *name) {
    sn_ll *L = a->L;
    hsum_stack h[MAX_R] = {{0}};
    for (int l = 0; l < L->lanes; l++) {
        LLVMValueRef off = sn_ll_mul(L, block_row(a, j0, l, last), sn_ll_i64(L, rs_of(a, p)));
        LLVMValueRef part[MAX_R];
        for (int c = 0; c < sn_ll_att_chunks(L, n); c++) {
            LLVMValueRef y = sn_ll_vload(L, p, sn_ll_add(L, off, sn_ll_i64(L, (int64_t)c * L->lanes)),
                                         chunk_mask(L, n, c), "");
            for (int t = 0; t < R; t++)
                part[t] = c ? sn_ll_fma(L, x[t][c], y, part[t]) : LLVMBuildFMul(B, x[t][c], y, "");
        }
        for (int t = 0; t < R; t++) hsum_push(L, &h[t], part[t], name);
    }
    for (int t = 0; t < R; t++) out[t] = hsum_result(L, &h[t]);
}

/* acc[t] += sum over lanes l of w[t][l] * row(j0 + l) of input p (rows of n elements). */
static void block_axpy(att *a, int R, LLVMValueRef (*acc)[MAX_CHUNKS], LLVMValueRef *w,
                       LLVMValueRef p, int64_t n, LLVMValueRef j0, LLVMValueRef last) {
    sn_ll *L = a->L;
    for (int l = 0; l < L->lanes; l++) {
        LLVMValueRef off = sn_ll_mul(L, block_row(a, j0, l, last), sn_ll_i64(L, rs_of(a, p)));
        LLVMValueRef wl[MAX_R];
        for (int t = 0; t < R; t++) wl[t] = lane_splat(L, w[t], l);
        for (int c = 0; c < sn_ll_att_chunks(L, n); c++) {
            LLVMValueRef y = sn_ll_vload(L, p, sn_ll_add(L, off, sn_ll_i64(L, (int64_t)c * L->lanes)),
                                         chunk_mask(L, n, c), "");
            for (int t = 0; t < R; t++) acc[t][c] = sn_ll_fma(L, wl[t], y, acc[t][c]);
        }
    }
}

/* Where a masked block's lanes are out of a row's range: v, else f. */
static LLVMValueRef keep(att *a, LLVMValueRef mask, LLVMValueRef v, float f) {
    return mask ? LLVMBuildSelect(B, mask, v, sn_ll_vf32(a->L, f), "") : v;
}

/* exp(x - y) */
static LLVMValueRef exp_minus(att *a, LLVMValueRef x, LLVMValueRef y, const char *name) {
    return sn_ll_exp(a->L, LLVMBuildFSub(B, x, y, ""), name);
}

/* dS = P (dP - D) */
static LLVMValueRef dscore(att *a, LLVMValueRef p, LLVMValueRef dp, LLVMValueRef d) {
    return LLVMBuildFMul(B, p, LLVMBuildFSub(B, dp, d, ""), "ds");
}

/* scale * dots */
static LLVMValueRef scaled(att *a, LLVMValueRef dots, const char *name) {
    return LLVMBuildFMul(B, dots, sn_ll_splat(a->L, a->scale, ""), name);
}

static void get_acc(att *a, step *s, LLVMValueRef (*v)[MAX_CHUNKS]) {
    for (int t = 0; t < s->R; t++)
        for (int c = 0; c < sn_ll_att_chunks(a->L, s->n_acc); c++) v[t][c] = sn_ll_get(a->L, s->acc[t][c], "");
}
static void set_acc(att *a, step *s, LLVMValueRef (*v)[MAX_CHUNKS]) {
    for (int t = 0; t < s->R; t++)
        for (int c = 0; c < sn_ll_att_chunks(a->L, s->n_acc); c++) sn_ll_set(a->L, s->acc[t][c], v[t][c]);
}

/* One block of lanes rows of the other side, from j0: mask[t] NULL (all lanes in row t's
 * range) or the lanes that are; lmask: the lanes in range of any row (NULL: all); last: the
 * last row a masked block may read (NULL: none past the block). */
static void block(att *a, step *s, LLVMValueRef j0, LLVMValueRef *mask, LLVMValueRef lmask,
                  LLVMValueRef last) {
    sn_ll *L = a->L;
    int R = s->R;
    sn_op op = a->n->op;
    LLVMValueRef sc[MAX_R], p[MAX_R], dp[MAX_R], acc[MAX_R][MAX_CHUNKS];
    bool by_query = op == SN_OP_ATTENTION_LSE || op == SN_OP_ATTENTION || op == SN_OP_ATTENTION_BWD_Q;
    /* scores s = scale q_i . k_j, and P = exp(s - lse) unless the forward finds lse */
    block_dots(a, R, s->x, by_query ? a->k : a->q, a->D, j0, last, sc, "qk");
    LLVMValueRef lsev = by_query ? NULL : sn_ll_vload(L, a->lse, j0, lmask, "lse");
    for (int t = 0; t < R; t++) {
        sc[t] = scaled(a, sc[t], "s");
        if (!s->m[t])
            p[t] = keep(a, mask[t], exp_minus(a, sc[t], lsev ? lsev : s->lse[t], "p"), 0);
    }
    if (s->m[0]) { /* the forward's online softmax: rescale by exp(m_old - m_new) */
        LLVMValueRef alpha[MAX_R];
        for (int t = 0; t < R; t++) {
            LLVMValueRef st = keep(a, mask[t], sc[t], -INFINITY);
            LLVMValueRef m0 = sn_ll_get(L, s->m[t], "m0");
            LLVMValueRef m1 = sn_ll_maxnum(L, m0, sn_ll_hmaxnum(L, st, "bmax"), "m1");
            alpha[t] = exp_minus(a, m0, m1, "alpha");
            p[t] = keep(a, mask[t], exp_minus(a, st, sn_ll_splat(L, m1, ""), "p"), 0);
            LLVMValueRef l0 = sn_ll_get(L, s->l[t], "l0");
            sn_ll_set(L, s->l[t], sn_ll_fma(L, l0, alpha[t], sn_ll_hsum(L, p[t], "psum")));
            sn_ll_set(L, s->m[t], m1);
        }
        if (op == SN_OP_ATTENTION_LSE) return;
        get_acc(a, s, acc);
        for (int t = 0; t < R; t++) {
            LLVMValueRef va = sn_ll_splat(L, alpha[t], "");
            for (int c = 0; c < a->ndv; c++) acc[t][c] = LLVMBuildFMul(B, acc[t][c], va, "");
        }
        block_axpy(a, R, acc, p, a->v, a->Dv, j0, last);
        set_acc(a, s, acc);
        return;
    }
    get_acc(a, s, acc);
    switch (op) {
    case SN_OP_ATTENTION: /* given lse: O_i = sum_j P_ij v_j */
        block_axpy(a, R, acc, p, a->v, a->Dv, j0, last);
        break;
    case SN_OP_ATTENTION_BWD_Q: /* dS_ij = P_ij (dout_i . v_j - D_i); dq_i += dS_ij k_j */
        block_dots(a, R, s->y, a->v, a->Dv, j0, last, dp, "dp");
        for (int t = 0; t < R; t++) p[t] = dscore(a, p[t], dp[t], s->di[t]);
        block_axpy(a, R, acc, p, a->k, a->D, j0, last);
        break;
    case SN_OP_ATTENTION_BWD_K: { /* dk_j += dS_ij q_i */
        block_dots(a, R, s->y, a->dout, a->Dv, j0, last, dp, "dp");
        LLVMValueRef di = sn_ll_vload(L, a->dsum, j0, lmask, "Di");
        for (int t = 0; t < R; t++) p[t] = dscore(a, p[t], dp[t], di);
        block_axpy(a, R, acc, p, a->q, a->D, j0, last);
        break;
    }
    default: /* BWD_V: dv_j += P_ij dout_i */
        block_axpy(a, R, acc, p, a->dout, a->Dv, j0, last);
        break;
    }
    set_acc(a, s, acc);
}

/* A block from j0 with lane masks: lanes j0 + l in [lo[t], hi[t]) for row t. */
static void masked_block(att *a, step *s, LLVMValueRef j0) {
    sn_ll *L = a->L;
    LLVMValueRef idx = LLVMBuildAdd(B, sn_ll_splat(L, j0, ""), sn_ll_lane_ids(L), "idx");
    LLVMValueRef mask[MAX_R];
    for (int t = 0; t < s->R; t++) {
        mask[t] = LLVMBuildICmp(B, LLVMIntSLT, idx, sn_ll_splat(L, s->hi[t], ""), "in");
        if (s->lo[t]) {
            LLVMValueRef from = LLVMBuildICmp(B, LLVMIntSGE, idx, sn_ll_splat(L, s->lo[t], ""), "");
            mask[t] = sn_ll_and_mask(L, mask[t], from);
        }
    }
    LLVMValueRef hi = s->hi[s->R - 1];
    LLVMValueRef lmask = LLVMBuildICmp(B, LLVMIntSLT, idx, sn_ll_splat(L, hi, ""), "any");
    block(a, s, j0, mask, lmask, LLVMBuildSub(B, hi, sn_ll_i64(L, 1), "last"));
}

/* All blocks of a step: masked ones over [lo[0], lo[R-1]), full ones while a block fits in
 * every row's range, masked ones to hi[R-1]. */
static void blocks(att *a, step *s) {
    sn_ll *L = a->L;
    LLVMValueRef W = sn_ll_i64(L, L->lanes), j, start = s->lo[0] ? s->lo[0] : sn_ll_i64(L, 0);
    sn_ll_loop head, full, tail;
    if (s->lo[0] && s->R > 1) {
        j = sn_ll_for(L, &head, start, s->lo[s->R - 1], W, "head");
        masked_block(a, s, j);
        sn_ll_for_end(L, &head);
        start = head.i;
    }
    LLVMValueRef none[MAX_R] = {NULL};
    LLVMValueRef fits = LLVMBuildSub(B, s->hi[0], sn_ll_i64(L, L->lanes - 1), ""); /* j0 < fits */
    j = sn_ll_for(L, &full, start, fits, W, "block");
    block(a, s, j, none, NULL, NULL);
    sn_ll_for_end(L, &full);
    j = sn_ll_for(L, &tail, full.i, s->hi[s->R - 1], W, "tail");
    masked_block(a, s, j);
    sn_ll_for_end(L, &tail);
}

/* dk and dv with G > 1: point the q-side slices (q, o, dout, lse, dsum) at head g of the
 * item's group. */
static void use_group(att *a, LLVMValueRef g) {
    sn_ll *L = a->L;
    LLVMValueRef *dst[] = {&a->q, &a->o, &a->dout, &a->lse, &a->dsum};
    LLVMValueRef src[] = {a->q0, a->o0, a->dout0, a->lse0, a->dsum0};
    int64_t per[] = {a->gq, a->go, a->gdo, a->glse, a->T};
    for (int r = 0; r < 5; r++)
        if (src[r]) *dst[r] = sn_ll_att_at(L, src[r], sn_ll_mul(L, g, sn_ll_i64(L, per[r])), "head");
}

/* ---- steps ---- */

/* The rows i .. i+R-1 (those past the last, n rows, repeat it: they store the same values). */
static void step_rows(att *a, step *s, LLVMValueRef i, int64_t n) {
    sn_ll *L = a->L;
    s->row[0] = i;
    for (int t = 1; t < s->R; t++)
        s->row[t] = sn_ll_imin(L, sn_ll_add(L, i, sn_ll_i64(L, t)), sn_ll_i64(L, n - 1), "row");
}

static void zero_acc(att *a, step *s, int64_t n, const char *name) {
    s->n_acc = n;
    for (int t = 0; t < s->R; t++)
        for (int c = 0; c < sn_ll_att_chunks(a->L, n); c++)
            s->acc[t][c] = sn_ll_var(a->L, a->L->t_vf, sn_ll_vf32(a->L, 0), name);
}

/* Stores acc[t] * f (f NULL: 1) as row row[t] of a->y. */
static void store_acc(att *a, step *s, LLVMValueRef *f) {
    LLVMValueRef v[MAX_R][MAX_CHUNKS];
    get_acc(a, s, v);
    for (int t = 0; t < s->R; t++) {
        if (f)
            for (int c = 0; c < sn_ll_att_chunks(a->L, s->n_acc); c++)
                v[t][c] = LLVMBuildFMul(B, v[t][c], f[t], "");
        store_row(a, a->y, s->row[t], s->n_acc, v[t]);
    }
}

/* Query rows i .. i+R-1 of the forward: ATTENTION with its lse (online softmax, writes O and
 * lse), ATTENTION given lse, or ATTENTION_LSE alone; query i sees keys j < i + S - T + 1. */
void sn_ll_att_forward_step(att *a, LLVMValueRef i) {
    sn_ll *L = a->L;
    step s = {.R = a->R};
    bool want_o = a->n->op == SN_OP_ATTENTION, online = a->lse_out != NULL;
    step_rows(a, &s, i, a->T);
    for (int t = 0; t < s.R; t++) {
        load_row(a, a->q, s.row[t], a->D, s.x[t], "q");
        s.hi[t] = sn_ll_add(L, s.row[t], sn_ll_i64(L, a->S - a->T + 1));
        if (online) {
            s.m[t] = sn_ll_var(L, L->t_f32, sn_ll_f32(L, -INFINITY), "m");
            s.l[t] = sn_ll_var(L, L->t_f32, sn_ll_f32(L, 0), "l");
        } else {
            s.lse[t] = sn_ll_splat(L, sn_ll_load(L, a->lse, s.row[t], "lse"), "");
        }
    }
    if (want_o) zero_acc(a, &s, a->Dv, "acc");
    blocks(a, &s);
    LLVMValueRef inv[MAX_R];
    for (int t = 0; t < s.R && online; t++) {
        LLVMValueRef lv = sn_ll_get(L, s.l[t], "l"), mv = sn_ll_get(L, s.m[t], "m");
        sn_ll_store(L, a->lse_out, s.row[t], LLVMBuildFAdd(B, mv, sn_ll_log(L, lv, ""), "lse"));
        inv[t] = sn_ll_splat(L, LLVMBuildFDiv(B, sn_ll_f32(L, 1), lv, "inv"), "");
    }
    if (want_o) store_acc(a, &s, online ? inv : NULL);
}

/* Query rows of dq: dq_i = scale sum_j P_ij (dout_i . v_j - D_i) k_j. */
void sn_ll_att_bwd_q_step(att *a, LLVMValueRef i) {
    sn_ll *L = a->L;
    step s = {.R = a->R};
    LLVMValueRef o[MAX_CHUNKS], f[MAX_R];
    step_rows(a, &s, i, a->T);
    for (int t = 0; t < s.R; t++) {
        load_row(a, a->q, s.row[t], a->D, s.x[t], "q");
        load_row(a, a->dout, s.row[t], a->Dv, s.y[t], "do");
        load_row(a, a->o, s.row[t], a->Dv, o, "o");
        s.di[t] = sn_ll_splat(L, row_dot(a, s.y[t], o, a->Dv, "Di"), "");
        s.lse[t] = sn_ll_splat(L, sn_ll_load(L, a->lse, s.row[t], "lse"), "");
        s.hi[t] = sn_ll_add(L, s.row[t], sn_ll_i64(L, a->S - a->T + 1));
        f[t] = sn_ll_splat(L, a->scale, "");
    }
    zero_acc(a, &s, a->D, "dq");
    blocks(a, &s);
    store_acc(a, &s, f);
}

/* Key rows of dk (dk_j = scale sum_i P_ij (dout_i . v_j - D_i) q_i) or dv (dv_j = sum_i P_ij
 * dout_i), over the queries that see key j: i >= j - (S - T). */
void sn_ll_att_bwd_kv_step(att *a, LLVMValueRef j) {
    sn_ll *L = a->L;
    step s = {.R = a->R};
    bool dk = a->n->op == SN_OP_ATTENTION_BWD_K;
    LLVMValueRef f[MAX_R];
    step_rows(a, &s, j, a->S);
    for (int t = 0; t < s.R; t++) {
        load_row(a, a->k, s.row[t], a->D, s.x[t], "k");
        if (dk) load_row(a, a->v, s.row[t], a->Dv, s.y[t], "v");
        s.lo[t] = sn_ll_imax(L, LLVMBuildSub(B, s.row[t], sn_ll_i64(L, a->S - a->T), ""),
                             sn_ll_i64(L, 0), "first");
        s.hi[t] = sn_ll_i64(L, a->T);
        f[t] = sn_ll_splat(L, a->scale, "");
    }
    zero_acc(a, &s, dk ? a->D : a->Dv, dk ? "dk" : "dv");
    if (a->G == 1) {
        blocks(a, &s);
    } else { /* the group's query heads in order, summed in the same accumulators */
        sn_ll_loop gl;
        use_group(a, sn_ll_for(L, &gl, sn_ll_i64(L, 0), sn_ll_i64(L, a->G), sn_ll_i64(L, 1), "g"));
        blocks(a, &s);
        sn_ll_for_end(L, &gl);
    }
    store_acc(a, &s, dk ? f : NULL);
}

/* dsum[i] = dout_i . o_i for the item's T queries (of each head of its group: G T). */
void sn_ll_att_fill_dsum(att *a) {
    sn_ll *L = a->L;
    LLVMValueRef doi[MAX_CHUNKS], oi[MAX_CHUNKS];
    sn_ll_loop lp, gl;
    if (a->G > 1)
        use_group(a, sn_ll_for(L, &gl, sn_ll_i64(L, 0), sn_ll_i64(L, a->G), sn_ll_i64(L, 1), "g"));
    LLVMValueRef i = sn_ll_for(L, &lp, sn_ll_i64(L, 0), sn_ll_i64(L, a->T), sn_ll_i64(L, 1), "qi");
    load_row(a, a->dout, i, a->Dv, doi, "do");
    load_row(a, a->o, i, a->Dv, oi, "o");
    sn_ll_store(L, a->dsum, i, row_dot(a, doi, oi, a->Dv, "Di"));
    sn_ll_for_end(L, &lp);
    if (a->G > 1) sn_ll_for_end(L, &gl);
}

#undef B

#endif /* SN_HAVE_LLVM */
