/* llvm_attention.c: fused causal attention kernels (f32 inside; bf16/f16 q, k, v, o, dout
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

#include "llvm_util.h"

enum {
    MAX_CHUNKS = 64,          /* vectors per row: head sizes up to 64 x lanes */
    MAX_SCRATCH_T = 16384,    /* dk keeps dout_i . o_i for the item's T queries on the stack */
    MAX_R = 4,                /* rows per step */
};

typedef struct {
    sn_ll *L;
    const sn_node *n;          /* the attention op */
    int64_t T, S, D, Dv;       /* q (T, D), k (S, D), v (S, Dv) per item */
    int nd, ndv;               /* vectors per row of D and of Dv elements */
    LLVMValueRef scale;        /* f32 */
    /* the buffers (whole), then the current item's slices */
    LLVMValueRef bq, bk, bv, bo, bdo, blse, by, blse_out;
    LLVMValueRef q, k, v, o, dout, lse, y, lse_out;
    LLVMValueRef dsum;         /* dk: dout_i . o_i of the item's queries (stack) */
    int64_t G;                 /* query heads per k/v head (grouped-query attention) */
    bool by_kv;                /* dk and dv: the items are k's slices */
    /* dk and dv with G > 1: the q-side slices of the group's first head, the elements from
     * one head to the next, and dsum's first */
    LLVMValueRef q0, o0, dout0, lse0, dsum0;
    int64_t gq, go, gdo, glse;
    int64_t rq, rk, rv, ro, rdo; /* row strides of the inputs (views of a wider buffer) */
    int64_t ry;                /* the row stride of y (written into a wider buffer, or its row) */
    int R;                     /* rows per step */
} att;

#define B (a->L->b)

/* ---- small helpers ---- */

static int chunks(const sn_ll *L, int64_t n) { return (int)((n + L->lanes - 1) / L->lanes); }

/* The mask of chunk c of a row of n elements: NULL when full. */
static LLVMValueRef chunk_mask(sn_ll *L, int64_t n, int c) {
    int64_t left = n - (int64_t)c * L->lanes;
    return left >= L->lanes ? NULL : sn_ll_const_first_lanes(L, (int)left);
}

/* &p[idx] (p an element pointer of any dtype: f32, or bf16 / f16 converted by the loads) */
static LLVMValueRef at(sn_ll *L, LLVMValueRef p, LLVMValueRef idx, const char *name) {
    return LLVMBuildInBoundsGEP2(L->b, LLVMGetElementType(LLVMTypeOf(p)), p, &idx, 1, name);
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
    for (int c = 0; c < chunks(L, n); c++)
        x[c] = sn_ll_vload(L, p, sn_ll_add(L, off, sn_ll_i64(L, (int64_t)c * L->lanes)),
                           chunk_mask(L, n, c), name);
}

/* Row r (of n elements) of the output y, rows a->ry apart. */
static void store_row(att *a, LLVMValueRef p, LLVMValueRef r, int64_t n, LLVMValueRef *x) {
    sn_ll *L = a->L;
    SN_ASSERT(p == a->y);
    LLVMValueRef off = sn_ll_mul(L, r, sn_ll_i64(L, a->ry));
    for (int c = 0; c < chunks(L, n); c++)
        sn_ll_vstore(L, p, sn_ll_add(L, off, sn_ll_i64(L, (int64_t)c * L->lanes)), x[c],
                     chunk_mask(L, n, c));
}

/* x . y over the chunks of a row of n elements (masked lanes are zero in both). */
static LLVMValueRef row_dot(att *a, LLVMValueRef *x, LLVMValueRef *y, int64_t n, const char *name) {
    sn_ll *L = a->L;
    LLVMValueRef acc = LLVMBuildFMul(B, x[0], y[0], "");
    for (int c = 1; c < chunks(L, n); c++) acc = sn_ll_fma(L, x[c], y[c], acc);
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
        for (int c = 0; c < chunks(L, n); c++) {
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
        for (int c = 0; c < chunks(L, n); c++) {
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
        for (int c = 0; c < chunks(a->L, s->n_acc); c++) v[t][c] = sn_ll_get(a->L, s->acc[t][c], "");
}
static void set_acc(att *a, step *s, LLVMValueRef (*v)[MAX_CHUNKS]) {
    for (int t = 0; t < s->R; t++)
        for (int c = 0; c < chunks(a->L, s->n_acc); c++) sn_ll_set(a->L, s->acc[t][c], v[t][c]);
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
        if (src[r]) *dst[r] = at(L, src[r], sn_ll_mul(L, g, sn_ll_i64(L, per[r])), "head");
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
        for (int c = 0; c < chunks(a->L, n); c++)
            s->acc[t][c] = sn_ll_var(a->L, a->L->t_vf, sn_ll_vf32(a->L, 0), name);
}

/* Stores acc[t] * f (f NULL: 1) as row row[t] of a->y. */
static void store_acc(att *a, step *s, LLVMValueRef *f) {
    LLVMValueRef v[MAX_R][MAX_CHUNKS];
    get_acc(a, s, v);
    for (int t = 0; t < s->R; t++) {
        if (f)
            for (int c = 0; c < chunks(a->L, s->n_acc); c++)
                v[t][c] = LLVMBuildFMul(B, v[t][c], f[t], "");
        store_row(a, a->y, s->row[t], s->n_acc, v[t]);
    }
}

/* Query rows i .. i+R-1 of the forward: ATTENTION with its lse (online softmax, writes O and
 * lse), ATTENTION given lse, or ATTENTION_LSE alone; query i sees keys j < i + S - T + 1. */
static void forward_step(att *a, LLVMValueRef i) {
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
static void bwd_q_step(att *a, LLVMValueRef i) {
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
static void bwd_kv_step(att *a, LLVMValueRef j) {
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
static void fill_dsum(att *a) {
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

/* ---- the kernel ---- */

/* Rows per step: two halve the loads per FMA (measured at D = 64 with AVX-512: 1.5x at 16
 * lanes, 1.6x at 8) as long as their two row vectors and two accumulators fit in the vector
 * registers (32 with AVX-512, else 16; AVX2-only hosts are untested). The kernels work for any
 * R up to MAX_R. */
static int rows_per_step(const sn_ll *L, const att *a) {
    int n = a->nd > a->ndv ? a->nd : a->ndv;
    int regs = L->features && strstr(L->features, "+avx512f") ? 32 : 16;
    return 4 * n <= regs ? 2 : 1;
}

/* The item's slice of buffer p (per elements per item), or NULL for NULL. */
static LLVMValueRef slice(att *a, LLVMValueRef p, LLVMValueRef item, int64_t per, const char *name) {
    return p ? at(a->L, p, sn_ll_mul(a->L, item, sn_ll_i64(a->L, per)), name) : NULL;
}

/* The item's slice of the anchor's input i (or output i - n_in), through its access: the arg,
 * plus the offset and the item's coordinates times their strides. The item's coordinates are
 * over q's leading dims, or k's for dk and dv; on the other side the head coordinate (the last
 * leading dim) is divided by G (k and v read by a query head) or multiplied by it (the group's
 * first query head). NULL for NULL. */
static LLVMValueRef in_slice(att *a, const sn_kernel *k, int i, LLVMValueRef p, LLVMValueRef item,
                             const char *name) {
    if (!p) return NULL;
    sn_ll *L = a->L;
    const sn_node *q = a->n->in[0], *by = a->by_kv ? a->n->in[1] : q;
    bool kv_side = i < a->n->n_in ? i == 1 || i == 2 : a->by_kv;
    const sn_access *x = &k->access[i];
    LLVMValueRef off = sn_ll_i64(L, x->offset), rest = item;
    for (int d = q->rank - 3; d >= 0; d--) { /* the leading dims, innermost first */
        LLVMValueRef size = sn_ll_i64(L, by->shape[d]);
        LLVMValueRef idx = d ? LLVMBuildURem(B, rest, size, "") : rest;
        if (d == q->rank - 3 && a->G > 1 && kv_side != a->by_kv)
            idx = kv_side ? LLVMBuildUDiv(B, idx, sn_ll_i64(L, a->G), "kv_head")
                          : sn_ll_mul(L, idx, sn_ll_i64(L, a->G));
        if (x->stride[d]) off = sn_ll_add(L, off, sn_ll_mul(L, idx, sn_ll_i64(L, x->stride[d])));
        if (d) rest = LLVMBuildUDiv(B, rest, size, "");
    }
    return at(L, p, off, name);
}

/* dk and dv with G > 1: the elements of input i's buffer from one query head to the next. */
static int64_t head_stride(const att *a, const sn_kernel *k, int i) {
    return k->access[i].stride[a->n->in[0]->rank - 3];
}

/* The row stride of input i (or output i - n_in): its second-to-last axis. */
static int64_t in_rs(const sn_kernel *k, int i) {
    return k->access[i].stride[k->anchor->in[0]->rank - 2];
}

/* Checks k (an attention kernel as passes/fuse.c makes it) before anything is built. */
static sn_status check_kernel(const sn_ll *L, const sn_kernel *k, sn_err *e) {
    char kn[96];
    const sn_node *n = k->anchor;
    sn_ll_kname(k, kn, sizeof kn);
    if (!n || sn_op_kind(n->op) != SN_K_ATTENTION)
        return sn_fail(e, SN_ERR_INVALID, "%s: an attention kernel needs an attention op as "
                       "anchor", kn);
    const sn_node *a2 = k->anchor2;
    bool kv = a2 && n->op == SN_OP_ATTENTION_BWD_K && a2->op == SN_OP_ATTENTION_BWD_V &&
              a2->a.f == n->a.f;
    for (int i = 0; kv && i < 6; i++) kv = a2->in[i] == n->in[i];
    if (a2 && !kv && (n->op != SN_OP_ATTENTION || a2->op != SN_OP_ATTENTION_LSE || a2 != n->in[3]))
        return sn_fail(e, SN_ERR_INVALID, "%s: anchor2 must be the attention_lse node that the "
                       "attention anchor reads, or the attention_bwd_v of attention_bwd_k's "
                       "inputs", kn);
    int n_out = a2 ? 2 : 1;
    /* outputs written through accesses: every backward output, or the forward's o alone */
    int n_into = k->n_access - n->n_in;
    bool into = n_into > 0;
    if (into && n_into != (n->op == SN_OP_ATTENTION ? 1 : n_out))
        return sn_fail(e, SN_ERR_INVALID, "%s: an attention kernel writes every backward output, "
                       "or the forward's o alone, through an access", kn);
    if (k->n_out != n_out || (!into && (k->args[0] != n || (a2 && k->args[1] != a2))) ||
        (into && n->op == SN_OP_ATTENTION && a2 && k->args[1] != a2))
        return sn_fail(e, SN_ERR_INVALID, "%s: outputs must be args[0] = %s%s", kn,
                       sn_op_name(n->op), a2 ? ", args[1] = anchor2" : "");
    for (int o = 0; o < n_into; o++) {
        const sn_access *ac = &k->access[n->n_in + o];
        const sn_node *y = o ? a2 : n;
        if (ac->arg != o || ac->masked || ac->stride[y->rank - 1] != 1 ||
            (n->op == SN_OP_ATTENTION && o == 1))
            return sn_fail(e, SN_ERR_INVALID, "%s: output %d of %s %%%d is written through an "
                           "access to args[%d] with unit stride along its last axis (lse: "
                           "contiguous, no access)", kn, o, sn_op_name(n->op), n->id, o);
    }
    for (int i = 0; i < k->n_out; i++) { /* f32, or bf16 / f16 converted by the loads */
        sn_status st = sn_ll_check_dtype(k, k->args[i], e);
        if (st) return st;
    }
    if (n_into < 0)
        return sn_fail(e, SN_ERR_INVALID, "%s: an attention kernel has an access per input of "
                       "its anchor (%d) and maybe one per output, not %d", kn, n->n_in,
                       k->n_access);
    for (int i = 0; i < n->n_in; i++) {
        const sn_node *x = n->in[i];
        if (x == k->anchor2) continue;
        const sn_access *ac = &k->access[i];
        if (ac->arg < k->n_out || ac->arg >= k->n_out + k->n_in || ac->masked ||
            ac->stride[x->rank - 1] != 1)
            return sn_fail(e, SN_ERR_INVALID, "%s: input %%%d (%s) of %s %%%d must be read from "
                           "an input arg with unit stride along its last axis (passes/fuse.c)",
                           kn, x->id, sn_op_name(x->op), sn_op_name(n->op), n->id);
        sn_status st = sn_ll_check_dtype(k, x, e);
        if (st) return st;
    }
    const sn_node *q = n->in[0];
    int r = q->rank;
    bool by_kv = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V;
    int64_t batch = sn_shape_numel(r - 2, (by_kv ? n->in[1] : q)->shape);
    if (k->n_items != batch)
        return sn_fail(e, SN_ERR_INVALID, "%s: n_items is %lld but attention kernels are "
                       "generated for one item per (batch x head) slice of %s: %lld", kn,
                       (long long)k->n_items, by_kv ? "k" : "q", (long long)batch);
    int64_t D = q->shape[r - 1], Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : D;
    if (chunks(L, D) > MAX_CHUNKS || chunks(L, Dv) > MAX_CHUNKS)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: head sizes D = %lld, Dv = %lld exceed the %d "
                       "the LLVM attention kernels hold in registers", kn, (long long)D,
                       (long long)Dv, MAX_CHUNKS * L->lanes);
    int64_t G = sn_attention_group(n);
    if (n->op == SN_OP_ATTENTION_BWD_K && G * q->shape[r - 2] > MAX_SCRATCH_T)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: T = %lld queries (times %lld query heads "
                       "per kv head) exceed the %d the LLVM attention_bwd_k kernel keeps on its "
                       "stack", kn, (long long)q->shape[r - 2], (long long)G, MAX_SCRATCH_T);
    return SN_OK;
}

sn_status sn_ll_emit_attention(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    sn_status st = check_kernel(L, k, e);
    if (st) return st;
    const sn_node *n = k->anchor, *q = n->in[0], *kk = n->in[1];
    int r = q->rank;
    att a = {.L = L, .n = n, .T = q->shape[r - 2], .S = kk->shape[r - 2], .D = q->shape[r - 1]};
    a.Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : a.D;
    a.nd = chunks(L, a.D);
    a.ndv = chunks(L, a.Dv);
    a.scale = sn_ll_f32(L, n->a.f);
    a.R = rows_per_step(L, &a);
    a.G = sn_attention_group(n);
    a.by_kv = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V;

    sn_ll_fn_begin(L, fname);
    /* the inputs through their accesses: q, k, v, o, dout may be views of a wider buffer */
    LLVMValueRef *role[6] = {&a.bq, &a.bk, &a.bv, n->op == SN_OP_ATTENTION ? &a.blse : &a.bo,
                             &a.bdo, &a.blse};
    int64_t *rs[6] = {&a.rq, &a.rk, &a.rv, &a.ro, &a.rdo, NULL};
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] == k->anchor2) continue;
        *role[i] = sn_ll_buf(L, k->access[i].arg, n->in[i]->dtype, "in");
        if (rs[i] && role[i] != &a.blse) *rs[i] = in_rs(k, i);
    }
    a.by = sn_ll_buf(L, 0, n->dtype, "y");
    if (n->op == SN_OP_ATTENTION_LSE) {
        a.blse_out = a.by;
        a.by = NULL;
    } else if (n->op == SN_OP_ATTENTION && k->anchor2) {
        a.blse_out = sn_ll_buf(L, 1, SN_F32, "lse_out"); /* lse */
    }
    if (n->op == SN_OP_ATTENTION_BWD_K) {
        LLVMValueRef buf = sn_ll_var(L, LLVMArrayType(L->t_f32, (unsigned)(a.G * a.T)), NULL, "dsum");
        LLVMSetAlignment(buf, 64);
        a.dsum = LLVMBuildBitCast(L->b, buf, LLVMPointerType(L->t_f32, 0), "dsum");
    }

    sn_ll_loop items;
    LLVMValueRef b = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "item");
    a.q = in_slice(&a, k, 0, a.bq, b, "q");
    a.k = in_slice(&a, k, 1, a.bk, b, "k");
    a.v = in_slice(&a, k, 2, a.bv, b, "v");
    a.o = n->n_in > 3 ? in_slice(&a, k, 3, a.bo, b, "o") : NULL;
    a.dout = n->n_in > 4 ? in_slice(&a, k, 4, a.bdo, b, "dout") : NULL;
    a.lse = in_slice(&a, k, n->op == SN_OP_ATTENTION ? 3 : 5, a.blse, b, "lse");
    a.lse_out = slice(&a, a.blse_out, b, a.T, "lse_out");
    if (a.by_kv && a.G > 1) { /* the group's first query head; use_group moves to the others */
        int i_lse = n->op == SN_OP_ATTENTION ? 3 : 5;
        a.q0 = a.q, a.o0 = a.o, a.dout0 = a.dout, a.lse0 = a.lse, a.dsum0 = a.dsum;
        a.gq = head_stride(&a, k, 0), a.go = head_stride(&a, k, 3);
        a.gdo = head_stride(&a, k, 4), a.glse = head_stride(&a, k, i_lse);
    }
    int64_t rows = n->op == SN_OP_ATTENTION_BWD_K || n->op == SN_OP_ATTENTION_BWD_V ? a.S : a.T;
    int64_t per = n->op == SN_OP_ATTENTION_BWD_Q || n->op == SN_OP_ATTENTION_BWD_K ? a.D : a.Dv;
    bool into = k->n_access > n->n_in; /* outputs written through accesses */
    a.y = into ? in_slice(&a, k, n->n_in, a.by, b, "y") : slice(&a, a.by, b, rows * per, "y");
    a.ry = into ? in_rs(k, n->n_in) : per;
    if (a.dsum) fill_dsum(&a);
    sn_ll_loop rl;
    LLVMValueRef i = sn_ll_for(L, &rl, sn_ll_i64(L, 0), sn_ll_i64(L, rows), sn_ll_i64(L, a.R),
                               rows == a.T ? "query" : "key");
    switch (n->op) {
    case SN_OP_ATTENTION_LSE: case SN_OP_ATTENTION: forward_step(&a, i); break;
    case SN_OP_ATTENTION_BWD_Q: bwd_q_step(&a, i); break;
    default: bwd_kv_step(&a, i); break;
    }
    sn_ll_for_end(L, &rl);
    if (n->op == SN_OP_ATTENTION_BWD_K && k->anchor2) { /* then dv (args[1]) over the same keys */
        a.n = k->anchor2;
        LLVMValueRef dv = sn_ll_buf(L, 1, k->anchor2->dtype, "dv");
        a.y = into ? in_slice(&a, k, n->n_in + 1, dv, b, "dv") : slice(&a, dv, b, a.S * a.Dv, "dv");
        a.ry = into ? in_rs(k, n->n_in + 1) : a.Dv;
        i = sn_ll_for(L, &rl, sn_ll_i64(L, 0), sn_ll_i64(L, a.S), sn_ll_i64(L, a.R), "key");
        bwd_kv_step(&a, i);
        sn_ll_for_end(L, &rl);
        a.n = n;
    }
    sn_ll_for_end(L, &items);
    sn_ll_fn_end(L);
    return SN_OK;
}

#undef B

#endif /* SN_HAVE_LLVM */
