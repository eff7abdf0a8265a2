/* llvm_row.c: row kernels: softmax, layernorm, rmsnorm, causal mask, cross-entropy and their
 * backwards, over rows of the last axis (C elements, known when the kernel is built).
 * Convention: items are rows; every pass over a row is a vector loop with a constant-mask tail,
 * and row statistics are summed lane-wise, then across lanes by a shuffle tree. */
#ifdef SN_HAVE_LLVM

#include <math.h>
#include <string.h>

#include "llvm_util.h"

typedef struct {
    sn_ll *L;
    const sn_node *n;     /* the row op */
    int64_t C;            /* row length */
    LLVMValueRef y;       /* output */
    LLVMValueRef in[3];   /* inputs, in the op's order */
    LLVMValueRef off;     /* r * C: the current row's first element */
} row;

#define B (w->L->b)

static LLVMValueRef at(row *w, LLVMValueRef j) { return sn_ll_add(w->L, w->off, j); }

/* x[row, j ..] for input i (a full row), or w[j ..] for a per-column input (w, b). */
static LLVMValueRef ld(row *w, int i, const sn_ll_vloop *v, const char *name) {
    return sn_ll_vload(w->L, w->in[i], at(w, v->j), v->mask, name);
}
static LLVMValueRef ld_col(row *w, int i, const sn_ll_vloop *v, const char *name) {
    return sn_ll_vload(w->L, w->in[i], v->j, v->mask, name);
}
static void st(row *w, const sn_ll_vloop *v, LLVMValueRef val) {
    sn_ll_vstore(w->L, w->y, at(w, v->j), val, v->mask);
}

static LLVMValueRef splat(row *w, LLVMValueRef s) { return sn_ll_splat(w->L, s, ""); }

static LLVMValueRef new_acc(row *w, const char *name) {
    return sn_ll_var(w->L, w->L->t_vf, sn_ll_vf32(w->L, 0), name);
}

/* max over the first n elements of input i's row (NaN ignored, as the reference does) */
static LLVMValueRef row_max(row *w, int i, int64_t n) {
    sn_ll *L = w->L;
    LLVMValueRef acc = sn_ll_var(L, L->t_vf, sn_ll_vf32(L, -INFINITY), "mx");
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, n, "j"); sn_ll_vloop_next(L, &v);)
        sn_ll_acc_maxnum(L, acc, ld(w, i, &v, "x"), v.mask);
    return sn_ll_hmaxnum(L, sn_ll_get(L, acc, ""), "max");
}

/* sum of exp(x - m) over the first n elements of input i's row */
static LLVMValueRef row_sum_exp(row *w, int i, int64_t n, LLVMValueRef m) {
    sn_ll *L = w->L;
    LLVMValueRef acc = new_acc(w, "se"), vm = splat(w, m);
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, n, "j"); sn_ll_vloop_next(L, &v);)
        sn_ll_acc_add(L, acc, sn_ll_exp(L, LLVMBuildFSub(B, ld(w, i, &v, "x"), vm, ""), "e"), v.mask);
    return sn_ll_hsum(L, sn_ll_get(L, acc, ""), "sumexp");
}

/* Layernorm (mean, 1/sqrt(biased var + eps)) or rmsnorm (mean NULL, 1/sqrt(mean sq + eps))
 * statistics of x's row, two passes like the reference. */
static void norm_stats(row *w, bool rms, LLVMValueRef *mean, LLVMValueRef *rstd) {
    sn_ll *L = w->L;
    LLVMValueRef fC = sn_ll_f32(L, (float)w->C), vmean = NULL, acc;
    sn_ll_vloop v;
    *mean = NULL;
    if (!rms) {
        acc = new_acc(w, "sx");
        for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);)
            sn_ll_acc_add(L, acc, ld(w, 0, &v, "x"), v.mask);
        *mean = LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, acc, ""), ""), fC, "mean");
        vmean = splat(w, *mean);
    }
    acc = new_acc(w, "sq");
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef d = ld(w, 0, &v, "x");
        if (vmean) d = LLVMBuildFSub(B, d, vmean, "d");
        sn_ll_acc_add(L, acc, LLVMBuildFMul(B, d, d, ""), v.mask);
    }
    LLVMValueRef var = LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, acc, ""), ""), fC, rms ? "ms" : "var");
    var = LLVMBuildFAdd(B, var, sn_ll_f32(L, w->n->a.f), "");
    *rstd = LLVMBuildFDiv(B, sn_ll_f32(L, 1), sn_ll_sqrt(L, var, ""), "rstd");
}

/* xhat = (x - mean) rstd, or x rstd for rmsnorm (mean NULL) */
static LLVMValueRef xhat(row *w, LLVMValueRef x, LLVMValueRef vmean, LLVMValueRef vrstd) {
    if (vmean) x = LLVMBuildFSub(B, x, vmean, "");
    return LLVMBuildFMul(B, x, vrstd, "xhat");
}

/* ---- the ops, one row each (w->off set) ---- */

static void softmax(row *w) {
    sn_ll *L = w->L;
    LLVMValueRef m = splat(w, row_max(w, 0, w->C)), acc = new_acc(w, "se");
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef e = sn_ll_exp(L, LLVMBuildFSub(B, ld(w, 0, &v, "x"), m, ""), "e");
        st(w, &v, e);
        sn_ll_acc_add(L, acc, e, v.mask);
    }
    LLVMValueRef inv = splat(w, LLVMBuildFDiv(B, sn_ll_f32(L, 1), sn_ll_hsum(L, sn_ll_get(L, acc, ""), "sum"), "inv"));
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);)
        st(w, &v, LLVMBuildFMul(B, sn_ll_vload(L, w->y, at(w, v.j), v.mask, "e"), inv, "p"));
}

static void softmax_bwd(row *w) { /* (y, dy) -> y (dy - sum(dy y)) */
    sn_ll *L = w->L;
    LLVMValueRef acc = new_acc(w, "sdy");
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);)
        sn_ll_acc_add(L, acc, LLVMBuildFMul(B, ld(w, 0, &v, "y"), ld(w, 1, &v, "dy"), ""), v.mask);
    LLVMValueRef s = splat(w, sn_ll_hsum(L, sn_ll_get(L, acc, ""), "s"));
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);)
        st(w, &v, LLVMBuildFMul(B, ld(w, 0, &v, "y"), LLVMBuildFSub(B, ld(w, 1, &v, "dy"), s, ""), "dx"));
}

static void norm(row *w, bool rms) { /* layernorm (x, w, b), rmsnorm (x, w) */
    sn_ll *L = w->L;
    LLVMValueRef mean, rstd;
    norm_stats(w, rms, &mean, &rstd);
    LLVMValueRef vmean = mean ? splat(w, mean) : NULL, vrstd = splat(w, rstd);
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef h = xhat(w, ld(w, 0, &v, "x"), vmean, vrstd), wt = ld_col(w, 1, &v, "w");
        st(w, &v, rms ? LLVMBuildFMul(B, h, wt, "y") : sn_ll_fma(L, h, wt, ld_col(w, 2, &v, "b")));
    }
}

/* (x, w, dy) -> dx: layernorm rstd (g - mean g - xhat mean(g xhat)), rmsnorm rstd (g - xhat
 * mean(g xhat)), with g = dy w */
static void norm_bwd(row *w, bool rms) {
    sn_ll *L = w->L;
    LLVMValueRef mean, rstd;
    norm_stats(w, rms, &mean, &rstd);
    LLVMValueRef vmean = mean ? splat(w, mean) : NULL, vrstd = splat(w, rstd);
    LLVMValueRef sg = new_acc(w, "sg"), sgx = new_acc(w, "sgx");
    LLVMValueRef fC = sn_ll_f32(L, (float)w->C);
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef g = LLVMBuildFMul(B, ld(w, 2, &v, "dy"), ld_col(w, 1, &v, "w"), "g");
        if (!rms) sn_ll_acc_add(L, sg, g, v.mask);
        sn_ll_acc_add(L, sgx, LLVMBuildFMul(B, g, xhat(w, ld(w, 0, &v, "x"), vmean, vrstd), ""), v.mask);
    }
    LLVMValueRef mg = rms ? sn_ll_vf32(L, 0)
                          : splat(w, LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, sg, ""), ""), fC, "mg"));
    LLVMValueRef mgx = splat(w, LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, sgx, ""), ""), fC, "mgx"));
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef g = LLVMBuildFMul(B, ld(w, 2, &v, "dy"), ld_col(w, 1, &v, "w"), "g");
        LLVMValueRef h = xhat(w, ld(w, 0, &v, "x"), vmean, vrstd);
        LLVMValueRef t = LLVMBuildFSub(B, LLVMBuildFSub(B, g, mg, ""), LLVMBuildFMul(B, h, mgx, ""), "");
        st(w, &v, LLVMBuildFMul(B, t, vrstd, "dx"));
    }
}

/* (x, dy) -> y (C) += dy xhat over the rows (y zeroed by the caller) */
static void norm_bwd_w(row *w, bool rms) {
    sn_ll *L = w->L;
    LLVMValueRef mean, rstd;
    norm_stats(w, rms, &mean, &rstd);
    LLVMValueRef vmean = mean ? splat(w, mean) : NULL, vrstd = splat(w, rstd);
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef d = LLVMBuildFMul(B, ld(w, 1, &v, "dy"), xhat(w, ld(w, 0, &v, "x"), vmean, vrstd), "");
        LLVMValueRef sum = sn_ll_vload(L, w->y, v.j, v.mask, "dw");
        sn_ll_vstore(L, w->y, v.j, LLVMBuildFAdd(B, sum, d, "dw"), v.mask);
    }
}

/* row r is query i = r % T of a (.., T, S) matrix: key j > i + S - T becomes f */
static void causal_mask(row *w, LLVMValueRef r) {
    sn_ll *L = w->L;
    const sn_node *x = w->n->in[0];
    int64_t T = x->shape[x->rank - 2];
    LLVMValueRef i = LLVMBuildSRem(B, r, sn_ll_i64(L, T), "query");
    LLVMValueRef lim = splat(w, sn_ll_add(L, i, sn_ll_i64(L, w->C - T)));
    LLVMValueRef fill = sn_ll_vf32(L, w->n->a.f);
    sn_ll_vloop v;
    for (sn_ll_vloop_static(L, &v, w->C, "j"); sn_ll_vloop_next(L, &v);) {
        LLVMValueRef jv = LLVMBuildAdd(B, splat(w, v.j), sn_ll_lane_ids(L), "key");
        LLVMValueRef masked = LLVMBuildICmp(B, LLVMIntSGT, jv, lim, "future");
        st(w, &v, LLVMBuildSelect(B, masked, fill, ld(w, 0, &v, "x"), "y"));
    }
}

/* The real classes of a cross-entropy: the first a.end when set (a padded vocabulary). */
static int64_t real_classes(const sn_node *n, int64_t V) {
    return n->a.end > 0 && n->a.end < V ? n->a.end : V;
}

/* is target t (i32) a class in [0, V)? */
static LLVMValueRef valid_target(row *w, LLVMValueRef t, int64_t V) {
    LLVMValueRef lo = LLVMBuildICmp(B, LLVMIntSGE, t, sn_ll_i32(w->L, 0), "");
    LLVMValueRef hi = LLVMBuildICmp(B, LLVMIntSLT, t, sn_ll_i32(w->L, (int32_t)V), "");
    return LLVMBuildAnd(B, lo, hi, "valid");
}

/* (logits, targets) -> mean over rows whose target is not ignore_index of lse - logit[t]. A
 * serial kernel: the loss sums in double over [begin, end). */
static void cross_entropy(row *w) {
    sn_ll *L = w->L;
    int64_t Vr = real_classes(w->n, w->C);
    LLVMValueRef loss = sn_ll_var(L, L->t_f64, LLVMConstReal(L->t_f64, 0), "loss");
    LLVMValueRef count = sn_ll_var(L, L->t_i64, sn_ll_i64(L, 0), "count");
    sn_ll_loop rows;
    LLVMValueRef r = sn_ll_for(L, &rows, L->begin, L->end, sn_ll_i64(L, 1), "r");
    w->off = LLVMBuildMul(B, r, sn_ll_i64(L, w->C), "off");
    LLVMValueRef t = sn_ll_load_i32(L, w->in[1], r, "target");
    sn_ll_if counted;
    sn_ll_if_begin(L, &counted, LLVMBuildICmp(B, LLVMIntNE, t, sn_ll_i32(L, w->n->a.ignore_index), ""), "counted");
    sn_ll_set(L, count, sn_ll_add(L, sn_ll_get(L, count, ""), sn_ll_i64(L, 1)));
    LLVMValueRef m = row_max(w, 0, Vr);
    LLVMValueRef lse = LLVMBuildFAdd(B, m, sn_ll_log(L, row_sum_exp(w, 0, Vr, m), ""), "lse");
    LLVMValueRef ok = valid_target(w, t, Vr);
    LLVMValueRef ti = LLVMBuildSExt(B, LLVMBuildSelect(B, ok, t, sn_ll_i32(L, 0), ""), L->t_i64, "");
    LLVMValueRef xt = sn_ll_load(L, w->in[0], at(w, ti), "logit_t");
    LLVMValueRef li = LLVMBuildSelect(B, ok, LLVMBuildFSub(B, lse, xt, ""), sn_ll_f32(L, NAN), "row_loss");
    sn_ll_set(L, loss, LLVMBuildFAdd(B, sn_ll_get(L, loss, ""), LLVMBuildFPExt(B, li, L->t_f64, ""), ""));
    sn_ll_if_end(L, &counted);
    sn_ll_for_end(L, &rows);
    LLVMValueRef c = sn_ll_get(L, count, "count");
    LLVMValueRef mean = LLVMBuildFDiv(B, sn_ll_get(L, loss, ""), LLVMBuildSIToFP(B, c, L->t_f64, ""), "");
    LLVMValueRef any = LLVMBuildICmp(B, LLVMIntSGT, c, sn_ll_i64(L, 0), "");
    LLVMValueRef out = LLVMBuildSelect(B, any, LLVMBuildFPTrunc(B, mean, L->t_f32, ""), sn_ll_f32(L, 0), "mean_loss");
    sn_ll_store(L, w->y, sn_ll_i64(L, 0), out);
}

/* (logits, targets, dloss) -> dlogits = (softmax - onehot(t)) dloss / count for counted rows,
 * 0 for ignored rows and padded classes, NaN for a bad target. */
static void cross_entropy_bwd(row *w, int64_t R) {
    sn_ll *L = w->L;
    int64_t Vr = real_classes(w->n, w->C);
    LLVMValueRef ign = sn_ll_i32(L, w->n->a.ignore_index);
    LLVMValueRef count = sn_ll_var(L, L->t_i64, sn_ll_i64(L, 0), "count");
    sn_ll_loop all;
    LLVMValueRef q = sn_ll_for(L, &all, sn_ll_i64(L, 0), sn_ll_i64(L, R), sn_ll_i64(L, 1), "q");
    LLVMValueRef counted = LLVMBuildICmp(B, LLVMIntNE, sn_ll_load_i32(L, w->in[1], q, "tq"), ign, "");
    sn_ll_set(L, count, sn_ll_add(L, sn_ll_get(L, count, ""), LLVMBuildZExt(B, counted, L->t_i64, "")));
    sn_ll_for_end(L, &all);
    LLVMValueRef c = sn_ll_get(L, count, "count");
    LLVMValueRef dl = sn_ll_load(L, w->in[2], sn_ll_i64(L, 0), "dloss");
    LLVMValueRef scale = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, c, sn_ll_i64(L, 0), ""),
                                         LLVMBuildFDiv(B, dl, LLVMBuildSIToFP(B, c, L->t_f32, ""), ""),
                                         sn_ll_f32(L, 0), "scale");
    sn_ll_loop rows;
    LLVMValueRef r = sn_ll_for(L, &rows, L->begin, L->end, sn_ll_i64(L, 1), "r");
    w->off = LLVMBuildMul(B, r, sn_ll_i64(L, w->C), "off");
    LLVMValueRef t = sn_ll_load_i32(L, w->in[1], r, "target");
    LLVMValueRef ignored = LLVMBuildICmp(B, LLVMIntEQ, t, ign, "ignored");
    LLVMValueRef ok = valid_target(w, t, Vr);
    sn_ll_if f;
    sn_ll_vloop v;
    sn_ll_if_begin(L, &f, LLVMBuildAnd(B, ok, LLVMBuildNot(B, ignored, ""), ""), "grad");
    LLVMValueRef m = row_max(w, 0, Vr);
    LLVMValueRef k = LLVMBuildFDiv(B, scale, row_sum_exp(w, 0, Vr, m), "k");
    LLVMValueRef vm = splat(w, m), vk = splat(w, k);
    for (sn_ll_vloop_static(L, &v, Vr, "j"); sn_ll_vloop_next(L, &v);)
        st(w, &v, LLVMBuildFMul(B, sn_ll_exp(L, LLVMBuildFSub(B, ld(w, 0, &v, "x"), vm, ""), ""), vk, "dx"));
    LLVMValueRef ti = at(w, LLVMBuildSExt(B, t, L->t_i64, ""));
    sn_ll_store(L, w->y, ti, LLVMBuildFSub(B, sn_ll_load(L, w->y, ti, ""), scale, "dx_t"));
    sn_ll_if_else(L, &f);
    LLVMValueRef fill = splat(w, LLVMBuildSelect(B, ignored, sn_ll_f32(L, 0), sn_ll_f32(L, NAN), "fill"));
    for (sn_ll_vloop_static(L, &v, Vr, "j"); sn_ll_vloop_next(L, &v);) st(w, &v, fill);
    sn_ll_if_end(L, &f);
    LLVMValueRef pad = sn_ll_add(L, w->off, sn_ll_i64(L, Vr)); /* padded classes: 0 */
    for (sn_ll_vloop_static(L, &v, w->C - Vr, "jp"); sn_ll_vloop_next(L, &v);)
        sn_ll_vstore(L, w->y, sn_ll_add(L, pad, v.j), sn_ll_vf32(L, 0), v.mask);
    sn_ll_for_end(L, &rows);
}

#undef B

static bool per_row(sn_op op) {
    switch (op) {
    case SN_OP_SOFTMAX: case SN_OP_SOFTMAX_BWD: case SN_OP_LAYERNORM: case SN_OP_RMSNORM:
    case SN_OP_LAYERNORM_BWD: case SN_OP_RMSNORM_BWD: case SN_OP_LAYERNORM_BWD_W:
    case SN_OP_RMSNORM_BWD_W: case SN_OP_CAUSAL_MASK: return true;
    default: return false;
    }
}

/* One row of a per-row op at w->off (row r). */
static void one_row(row *w, LLVMValueRef r) {
    switch (w->n->op) {
    case SN_OP_SOFTMAX: softmax(w); break;
    case SN_OP_SOFTMAX_BWD: softmax_bwd(w); break;
    case SN_OP_LAYERNORM: norm(w, false); break;
    case SN_OP_RMSNORM: norm(w, true); break;
    case SN_OP_LAYERNORM_BWD: norm_bwd(w, false); break;
    case SN_OP_RMSNORM_BWD: norm_bwd(w, true); break;
    case SN_OP_LAYERNORM_BWD_W: norm_bwd_w(w, false); break;
    case SN_OP_RMSNORM_BWD_W: norm_bwd_w(w, true); break;
    case SN_OP_CAUSAL_MASK: causal_mask(w, r); break;
    default: SN_ASSERT(0);
    }
}

/* The IR name of input i of a row op. */
static const char *input_name(sn_op op, int i) {
    switch (op) {
    case SN_OP_SOFTMAX_BWD: return i ? "dp" : "p";
    case SN_OP_LAYERNORM: return (const char *[]){"x", "w", "b"}[i];
    case SN_OP_LAYERNORM_BWD_W: case SN_OP_RMSNORM_BWD_W: return i ? "dy" : "x";
    case SN_OP_LAYERNORM_BWD: case SN_OP_RMSNORM_BWD: case SN_OP_RMSNORM:
        return (const char *[]){"x", "w", "dy"}[i];
    case SN_OP_CROSS_ENTROPY: case SN_OP_CROSS_ENTROPY_BWD:
        return (const char *[]){"logits", "targets", "dloss"}[i];
    default: return "x";
    }
}

sn_status sn_ll_emit_row(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor;
    const sn_node *x = n->in[0];
    char kn[96];
    row w = {.L = L, .n = n, .C = x->rank ? x->shape[x->rank - 1] : 1};
    int64_t R = x->rank ? sn_numel(x) / w.C : 1;
    bool ce = n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_CROSS_ENTROPY_BWD;
    if (!ce && !per_row(n->op))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: %s is not a row op the LLVM backend knows",
                       sn_ll_kname(k, kn, sizeof kn), sn_op_name(n->op));
    sn_status st = sn_ll_check_dtype(k, n, e);
    if (st) return st;
    if (n->op == SN_OP_CAUSAL_MASK && x->rank < 2)
        return sn_fail(e, SN_ERR_INVALID, "%s: causal_mask needs a (.., T, S) input", sn_ll_kname(k, kn, sizeof kn));
    if (ce && n->in[1]->dtype != SN_I32)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: targets %%%d are %s; the LLVM backend reads i32 "
                       "targets", sn_ll_kname(k, kn, sizeof kn), n->in[1]->id, sn_dtype_name(n->in[1]->dtype));
    sn_ll_fn_begin(L, fname);
    w.y = sn_ll_buf(L, 0, n->dtype, "y");
    for (int i = 0; i < n->n_in; i++)
        if ((st = sn_ll_input_named(L, k, n->in[i], input_name(n->op, i), &w.in[i], e))) return st;
    bool bwd_w = n->op == SN_OP_LAYERNORM_BWD_W || n->op == SN_OP_RMSNORM_BWD_W;
    sn_ll_if any; /* the serial kernels write their sums even for no rows: not for an empty call */
    sn_ll_if_begin(L, &any, LLVMBuildICmp(L->b, LLVMIntSLT, L->begin, L->end, ""), "any");
    if (n->op == SN_OP_CROSS_ENTROPY) {
        cross_entropy(&w);
    } else if (n->op == SN_OP_CROSS_ENTROPY_BWD) {
        cross_entropy_bwd(&w, R);
    } else {
        if (bwd_w) { /* serial: zero y, then add every row */
            sn_ll_vloop v;
            for (sn_ll_vloop_static(L, &v, w.C, "j"); sn_ll_vloop_next(L, &v);)
                sn_ll_vstore(L, w.y, v.j, sn_ll_vf32(L, 0), v.mask);
        }
        sn_ll_loop rows;
        LLVMValueRef r = sn_ll_for(L, &rows, L->begin, L->end, sn_ll_i64(L, 1), "r");
        w.off = LLVMBuildMul(L->b, r, sn_ll_i64(L, w.C), "off");
        one_row(&w, r);
        sn_ll_for_end(L, &rows);
    }
    sn_ll_if_end(L, &any);
    sn_ll_fn_end(L);
    return SN_OK;
}

#endif /* SN_HAVE_LLVM */
