/* llvm_row.c: row kernels: softmax, layernorm, rmsnorm, causal mask, cross-entropy and their
 * backwards, over rows of the last axis (C elements, known when the kernel is built), with the
 * pointwise instructions fused around the row op (kernel.h): a prologue computing its operands
 * and an epilogue applied to what it stores (llvm_fused.h evaluates them). The PARTIAL and
 * FINISH kernels of the ops that sum over every row are llvm_row_sums.c's.
 * Convention: items are rows; every pass over a row is a vector loop with a constant-mask tail,
 * and row statistics are summed lane-wise, then across lanes by a shuffle tree. The ops read
 * operands through ld() and write results through st(): without fused neighbours these are
 * plain loads and stores; with them, ld() evaluates the prologue (and stores the values other
 * kernels read, in the first pass over the row that computes them; later passes read them
 * back) and st() the epilogue. */
#ifdef SN_HAVE_LLVM

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llvm_row.h"
#include "program/pointwise.h"

#define B (w->L->b)

static LLVMValueRef at(row *w, LLVMValueRef j) { return sn_ll_add(w->L, w->off, j); }

/* for (pass(w, &v, n, "j"); next(w, &v);) { .. }: a vector loop over the row's first n
 * elements; with fused neighbours each body is one evaluation step. */
static void pass(row *w, sn_ll_vloop *v, int64_t n, const char *name) {
    sn_ll_vloop_static(w->L, v, n, name);
    w->full = w->whole && n == w->C;
}

static bool next(row *w, sn_ll_vloop *v) {
    if (!sn_ll_vloop_next(w->L, v)) {
        for (int o = 0; o < SN_KER_MAX_ARGS; o++) {
            if (w->pending[o] && w->k->args[o]->dtype == SN_F32) /* later passes read it back */
                sn_ll_fx_reuse(w->fx, w->k->store[o], w->ptr[o]);
            w->have[o] = w->have[o] || w->pending[o];
            w->pending[o] = false;
        }
        w->full = false;
        return false;
    }
    if (w->fx) {
        sn_ll_fx_step(w->fx, v->j, v->mask, false);
        memset(w->stepped, 0, sizeof w->stepped);
    }
    return true;
}

/* Stores this step's values of the outputs that do not depend on the row op and are not yet
 * stored for this row: all of them (at), or those already evaluated. */
static void store_prologue(row *w, const sn_ll_vloop *v, bool all) {
    const sn_kernel *k = w->k;
    for (int o = 0; o < k->n_out; o++) {
        int i = k->store[o];
        if (w->dep[i] || w->have[o] || w->stepped[o] || (!all && !sn_ll_fx_has(w->fx, i))) continue;
        sn_ll_vstore(w->L, w->ptr[o], at(w, v->j), sn_ll_fx_value(w->fx, i), v->mask);
        w->stepped[o] = w->written[o] = true;
        if (w->full) w->pending[o] = true;
    }
}

/* x[row, j ..] for input i (a full row): loaded, read back, or computed by the prologue. */
static LLVMValueRef ld(row *w, int i, const sn_ll_vloop *v, const char *name) {
    if (w->in[i]) return sn_ll_vload(w->L, w->in[i], at(w, v->j), v->mask, name);
    LLVMValueRef x = sn_ll_fx_ref(w->fx, &w->k->instr[w->k->row.instr].in[i]);
    if (w->full) store_prologue(w, v, false);
    return x;
}

/* x[row, j] for input i (a full row) at one column j. */
static LLVMValueRef ld_one(row *w, int i, LLVMValueRef j, const char *name) {
    if (w->in[i]) return sn_ll_load(w->L, w->in[i], at(w, j), name);
    sn_ll_fx_step(w->fx, j, NULL, true);
    return sn_ll_fx_ref(w->fx, &w->k->instr[w->k->row.instr].in[i]);
}

/* w[j ..] for a per-column input (w, b). */
static LLVMValueRef ld_col(row *w, int i, const sn_ll_vloop *v, const char *name) {
    return sn_ll_vload(w->L, w->in[i], v->j, v->mask, name);
}

/* The row op's result at the step's columns: stored, or through the epilogue into every
 * output that depends on it (and the prologue values not stored yet). */
static void st(row *w, const sn_ll_vloop *v, LLVMValueRef val) {
    if (!w->fx) {
        sn_ll_vstore(w->L, w->y, at(w, v->j), val, v->mask);
        return;
    }
    const sn_kernel *k = w->k;
    sn_ll_fx_set(w->fx, k->row.instr, val);
    for (int o = w->out0; o < k->n_out; o++) {
        int i = k->store[o];
        if (!w->dep[i] || w->stepped[o]) continue;
        sn_ll_vstore(w->L, w->ptr[o], at(w, v->j), sn_ll_fx_value(w->fx, i), v->mask);
        w->stepped[o] = w->written[o] = true;
    }
    store_prologue(w, v, true);
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
    for (pass(w, &v, n, "j"); next(w, &v);)
        sn_ll_acc_maxnum(L, acc, ld(w, i, &v, "x"), v.mask);
    return sn_ll_hmaxnum(L, sn_ll_get(L, acc, ""), "max");
}

/* sum of exp(x - m) over the first n elements of input i's row */
static LLVMValueRef row_sum_exp(row *w, int i, int64_t n, LLVMValueRef m) {
    sn_ll *L = w->L;
    LLVMValueRef acc = new_acc(w, "se"), vm = splat(w, m);
    sn_ll_vloop v;
    for (pass(w, &v, n, "j"); next(w, &v);)
        sn_ll_acc_add(L, acc, sn_ll_exp(L, LLVMBuildFSub(B, ld(w, i, &v, "x"), vm, ""), "e"), v.mask);
    return sn_ll_hsum(L, sn_ll_get(L, acc, ""), "sumexp");
}

/* Layernorm (mean, 1/sqrt(biased var + eps)) or rmsnorm (mean NULL, 1/sqrt(mean sq + eps))
 * statistics of x's row, two passes like the reference, splat over the lanes. */
static void norm_stats(row *w, bool rms, LLVMValueRef *vmean_out, LLVMValueRef *vrstd) {
    sn_ll *L = w->L;
    LLVMValueRef fC = sn_ll_f32(L, (float)w->C), vmean = NULL, acc;
    sn_ll_vloop v;
    if (!rms) {
        acc = new_acc(w, "sx");
        for (pass(w, &v, w->C, "j"); next(w, &v);)
            sn_ll_acc_add(L, acc, ld(w, 0, &v, "x"), v.mask);
        vmean = splat(w, LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, acc, ""), ""), fC, "mean"));
    }
    *vmean_out = vmean;
    acc = new_acc(w, "sq");
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
        LLVMValueRef d = ld(w, 0, &v, "x");
        if (vmean) d = LLVMBuildFSub(B, d, vmean, "d");
        sn_ll_acc_add(L, acc, LLVMBuildFMul(B, d, d, ""), v.mask);
    }
    LLVMValueRef var = LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, acc, ""), ""), fC, rms ? "ms" : "var");
    var = LLVMBuildFAdd(B, var, sn_ll_f32(L, w->n->a.f), "");
    *vrstd = splat(w, LLVMBuildFDiv(B, sn_ll_f32(L, 1), sn_ll_sqrt(L, var, ""), "rstd"));
}

/* xhat = (x - mean) rstd, or x rstd for rmsnorm (mean NULL) */
static LLVMValueRef xhat(row *w, LLVMValueRef x, LLVMValueRef vmean, LLVMValueRef vrstd) {
    if (vmean) x = LLVMBuildFSub(B, x, vmean, "");
    return LLVMBuildFMul(B, x, vrstd, "xhat");
}

/* ---- the ops, one row each (w->off set) ---- */

/* e = exp(x - max) is kept in y between the passes; without such a buffer (the epilogue
 * stores only what follows softmax, and not as f32), the last pass computes it again. */
static void softmax(row *w) {
    sn_ll *L = w->L;
    LLVMValueRef m = splat(w, row_max(w, 0, w->C)), acc = new_acc(w, "se");
    sn_ll_vloop v;
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
        LLVMValueRef e = sn_ll_exp(L, LLVMBuildFSub(B, ld(w, 0, &v, "x"), m, ""), "e");
        if (w->y) sn_ll_vstore(L, w->y, at(w, v.j), e, v.mask);
        sn_ll_acc_add(L, acc, e, v.mask);
    }
    LLVMValueRef inv = splat(w, LLVMBuildFDiv(B, sn_ll_f32(L, 1), sn_ll_hsum(L, sn_ll_get(L, acc, ""), "sum"), "inv"));
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
        LLVMValueRef e = w->y ? sn_ll_vload(L, w->y, at(w, v.j), v.mask, "e")
                              : sn_ll_exp(L, LLVMBuildFSub(B, ld(w, 0, &v, "x"), m, ""), "e");
        st(w, &v, LLVMBuildFMul(B, e, inv, "p"));
    }
}

static void softmax_bwd(row *w) { /* (y, dy) -> y (dy - sum(dy y)) */
    sn_ll *L = w->L;
    LLVMValueRef acc = new_acc(w, "sdy");
    sn_ll_vloop v;
    for (pass(w, &v, w->C, "j"); next(w, &v);)
        sn_ll_acc_add(L, acc, LLVMBuildFMul(B, ld(w, 0, &v, "y"), ld(w, 1, &v, "dy"), ""), v.mask);
    LLVMValueRef s = splat(w, sn_ll_hsum(L, sn_ll_get(L, acc, ""), "s"));
    for (pass(w, &v, w->C, "j"); next(w, &v);)
        st(w, &v, LLVMBuildFMul(B, ld(w, 0, &v, "y"), LLVMBuildFSub(B, ld(w, 1, &v, "dy"), s, ""), "dx"));
}

static void norm(row *w, bool rms) { /* layernorm (x, w, b), rmsnorm (x, w) */
    sn_ll *L = w->L;
    LLVMValueRef vmean, vrstd;
    norm_stats(w, rms, &vmean, &vrstd);
    sn_ll_vloop v;
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
        LLVMValueRef h = xhat(w, ld(w, 0, &v, "x"), vmean, vrstd), wt = ld_col(w, 1, &v, "w");
        st(w, &v, rms ? LLVMBuildFMul(B, h, wt, "y") : sn_ll_fma(L, h, wt, ld_col(w, 2, &v, "b")));
    }
}

/* y[y0 + j ..] += d: a step of dy xhat into the chunk's partial sums */
static void add_dw(row *w, const sn_ll_vloop *v, LLVMValueRef d) {
    LLVMValueRef j = sn_ll_add(w->L, w->y0, v->j);
    LLVMValueRef sum = sn_ll_vload(w->L, w->y, j, v->mask, "dw");
    sn_ll_vstore(w->L, w->y, j, LLVMBuildFAdd(B, sum, d, "dw"), v->mask);
}

/* (x, w, dy) -> dx: layernorm rstd (g - mean g - xhat mean(g xhat)), rmsnorm rstd (g - xhat
 * mean(g xhat)), with g = dy w */
static void norm_bwd(row *w, bool rms) {
    sn_ll *L = w->L;
    LLVMValueRef vmean, vrstd;
    norm_stats(w, rms, &vmean, &vrstd);
    LLVMValueRef sg = new_acc(w, "sg"), sgx = new_acc(w, "sgx");
    LLVMValueRef fC = sn_ll_f32(L, (float)w->C);
    sn_ll_vloop v;
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
        LLVMValueRef g = LLVMBuildFMul(B, ld(w, 2, &v, "dy"), ld_col(w, 1, &v, "w"), "g");
        if (!rms) sn_ll_acc_add(L, sg, g, v.mask);
        sn_ll_acc_add(L, sgx, LLVMBuildFMul(B, g, xhat(w, ld(w, 0, &v, "x"), vmean, vrstd), ""), v.mask);
    }
    LLVMValueRef mg = rms ? sn_ll_vf32(L, 0)
                          : splat(w, LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, sg, ""), ""), fC, "mg"));
    LLVMValueRef mgx = splat(w, LLVMBuildFDiv(B, sn_ll_hsum(L, sn_ll_get(L, sgx, ""), ""), fC, "mgx"));
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
        LLVMValueRef dy = ld(w, 2, &v, "dy");
        LLVMValueRef g = LLVMBuildFMul(B, dy, ld_col(w, 1, &v, "w"), "g");
        LLVMValueRef h = xhat(w, ld(w, 0, &v, "x"), vmean, vrstd);
        LLVMValueRef t = LLVMBuildFSub(B, LLVMBuildFSub(B, g, mg, ""), LLVMBuildFMul(B, h, mgx, ""), "");
        st(w, &v, LLVMBuildFMul(B, t, vrstd, "dx"));
        if (w->k->row.pair) add_dw(w, &v, LLVMBuildFMul(B, dy, h, "")); /* the pair's sum */
    }
}

/* (x, dy) -> y[y0 ..][0, C) += dy xhat over the rows: the chunk's partial sums (zeroed by the
 * caller) */
static void norm_bwd_w(row *w, bool rms) {
    LLVMValueRef vmean, vrstd;
    norm_stats(w, rms, &vmean, &vrstd);
    sn_ll_vloop v;
    for (pass(w, &v, w->C, "j"); next(w, &v);)
        add_dw(w, &v, LLVMBuildFMul(B, ld(w, 1, &v, "dy"), xhat(w, ld(w, 0, &v, "x"), vmean, vrstd), ""));
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
    for (pass(w, &v, w->C, "j"); next(w, &v);) {
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

/* (logits, targets) -> over the rows [r0, r1) whose target is not ignore_index: the sum of
 * lse - logit[t] in f64 and their count, stored as two f64 at part (kernel.h: PARTIAL). */
void sn_ll_row_cross_entropy(row *w, LLVMValueRef r0, LLVMValueRef r1, LLVMValueRef part) {
    sn_ll *L = w->L;
    int64_t Vr = real_classes(w->n, w->C);
    LLVMValueRef loss = sn_ll_var(L, L->t_f64, LLVMConstReal(L->t_f64, 0), "loss");
    LLVMValueRef count = sn_ll_var(L, L->t_i64, sn_ll_i64(L, 0), "count");
    sn_ll_loop rows;
    LLVMValueRef r = sn_ll_for(L, &rows, r0, r1, sn_ll_i64(L, 1), "r");
    w->off = LLVMBuildMul(B, r, sn_ll_i64(L, w->C), "off");
    if (w->fx) sn_ll_fx_row(w->fx, r);
    LLVMValueRef t = sn_ll_load_i32(L, w->in[1], r, "target");
    sn_ll_if counted;
    sn_ll_if_begin(L, &counted, LLVMBuildICmp(B, LLVMIntNE, t, sn_ll_i32(L, w->n->a.ignore_index), ""), "counted");
    sn_ll_set(L, count, sn_ll_add(L, sn_ll_get(L, count, ""), sn_ll_i64(L, 1)));
    LLVMValueRef m = row_max(w, 0, Vr);
    LLVMValueRef lse = LLVMBuildFAdd(B, m, sn_ll_log(L, row_sum_exp(w, 0, Vr, m), ""), "lse");
    LLVMValueRef ok = valid_target(w, t, Vr);
    LLVMValueRef ti = LLVMBuildSExt(B, LLVMBuildSelect(B, ok, t, sn_ll_i32(L, 0), ""), L->t_i64, "");
    LLVMValueRef xt = ld_one(w, 0, ti, "logit_t");
    LLVMValueRef li = LLVMBuildSelect(B, ok, LLVMBuildFSub(B, lse, xt, ""), sn_ll_f32(L, NAN), "row_loss");
    sn_ll_set(L, loss, LLVMBuildFAdd(B, sn_ll_get(L, loss, ""), LLVMBuildFPExt(B, li, L->t_f64, ""), ""));
    sn_ll_if_end(L, &counted);
    sn_ll_for_end(L, &rows);
    LLVMValueRef c = LLVMBuildSIToFP(B, sn_ll_get(L, count, "count"), L->t_f64, "");
    LLVMBuildStore(B, sn_ll_get(L, loss, "loss_sum"), part);
    LLVMValueRef one = sn_ll_i64(L, 1);
    LLVMBuildStore(B, c, LLVMBuildGEP2(B, L->t_f64, part, &one, 1, "count_at"));
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
    if (w->fx) sn_ll_fx_row(w->fx, r);
    LLVMValueRef t = sn_ll_load_i32(L, w->in[1], r, "target");
    LLVMValueRef ignored = LLVMBuildICmp(B, LLVMIntEQ, t, ign, "ignored");
    LLVMValueRef ok = valid_target(w, t, Vr);
    sn_ll_if f;
    sn_ll_vloop v;
    sn_ll_if_begin(L, &f, LLVMBuildAnd(B, ok, LLVMBuildNot(B, ignored, ""), ""), "grad");
    LLVMValueRef m = row_max(w, 0, Vr);
    LLVMValueRef k = LLVMBuildFDiv(B, scale, row_sum_exp(w, 0, Vr, m), "k");
    LLVMValueRef vm = splat(w, m), vk = splat(w, k), vs = splat(w, scale);
    LLVMValueRef vt = splat(w, LLVMBuildSExt(B, t, L->t_i64, ""));
    for (pass(w, &v, Vr, "j"); next(w, &v);) { /* the target's column takes off scale */
        LLVMValueRef e = sn_ll_exp(L, LLVMBuildFSub(B, ld(w, 0, &v, "x"), vm, ""), "");
        LLVMValueRef p = LLVMBuildFMul(B, e, vk, "");
        LLVMValueRef jv = LLVMBuildAdd(B, splat(w, v.j), sn_ll_lane_ids(L), "");
        LLVMValueRef is_t = LLVMBuildICmp(B, LLVMIntEQ, jv, vt, "is_t");
        st(w, &v, LLVMBuildSelect(B, is_t, LLVMBuildFSub(B, p, vs, ""), p, "dx"));
    }
    sn_ll_if_else(L, &f);
    LLVMValueRef fill = splat(w, LLVMBuildSelect(B, ignored, sn_ll_f32(L, 0), sn_ll_f32(L, NAN), "fill"));
    for (pass(w, &v, Vr, "j"); next(w, &v);) st(w, &v, fill);
    sn_ll_if_end(L, &f);
    if (Vr < w->C) { /* padded classes: 0 */
        LLVMValueRef off = w->off;
        w->off = sn_ll_add(L, off, sn_ll_i64(L, Vr));
        for (pass(w, &v, w->C - Vr, "jp"); next(w, &v);) {
            if (w->fx) sn_ll_fx_step(w->fx, sn_ll_add(L, v.j, sn_ll_i64(L, Vr)), v.mask, false);
            st(w, &v, sn_ll_vf32(L, 0));
        }
        w->off = off;
    }
    sn_ll_for_end(L, &rows);
}

#undef B


/* One row of a per-row op at w->off (row r). */
void sn_ll_row_one(row *w, LLVMValueRef r) {
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

/* Whether access a reads its arg exactly as the kernel's index space (a row op's input as is). */
static bool plain_access(const sn_kernel *k, const sn_access *a) {
    if (a->offset || a->masked || sn_numel(k->args[a->arg]) != sn_shape_numel(k->rank, k->shape))
        return false;
    int64_t st = 1;
    for (int d = k->rank - 1; d >= 0; d--) {
        if (k->shape[d] != 1 && a->stride[d] != st) return false;
        st *= k->shape[d];
    }
    return true;
}

/* Sets w up for a ROW kernel with fused neighbours (after sn_ll_fn_begin): the args' pointers,
 * the operands read as they are, the result buffer (what depends on the row op: the plan's). */
static sn_status fused_setup(row *w, sn_err *e) {
    sn_ll *L = w->L;
    const sn_kernel *k = w->k;
    const sn_node *n = w->n;
    char name[32];
    int nargs = k->n_out + k->n_in, y = w->plan.y;
    const sn_pw_instr *ri = &k->instr[k->row.instr];
    for (int i = 0; i < nargs; i++) {
        int opnd = -1;
        for (int t = 0; t < ri->n_in && i >= k->n_out; t++)
            if (ri->in[t].kind == SN_REF_ACCESS && k->access[ri->in[t].index].arg == i) opnd = t;
        if (opnd >= 0) snprintf(name, sizeof name, "%s", input_name(n->op, opnd));
        else snprintf(name, sizeof name, i < k->n_out ? "out%d" : "in%d", i < k->n_out ? i : i - k->n_out);
        w->ptr[i] = sn_ll_buf(L, i, k->args[i]->dtype, name);
    }
    for (int t = 0; t < ri->n_in; t++) {
        const sn_ref *r = &ri->in[t];
        bool plain = r->kind == SN_REF_ACCESS && (!sn_row_operand_per_element(n->op, t) ||
                                                  plain_access(k, &k->access[r->index]));
        w->in[t] = plain ? w->ptr[k->access[r->index].arg] : NULL;
    }
    if (y >= 0) w->y = w->ptr[y];
    for (int o = 0; o < k->n_out && !w->y && n->op == SN_OP_SOFTMAX; o++) /* softmax's scratch */
        if (w->dep[k->store[o]] && k->args[o]->dtype == SN_F32) w->y = w->ptr[o];
    SN_ASSERT(w->y || sn_row_result_per_element(n->op)); /* a sum or a loss is always stored */
    w->whole = sn_row_facts_of(n->op)->whole_rows;
    w->fx = sn_ll_fx_new(L, k, w->ptr, e);
    return w->fx ? SN_OK : SN_ERR_OOM;
}

/* Every output that does not depend on the row op was stored by some pass. */
static sn_status fused_check(row *w, sn_err *e) {
    char kn[96];
    for (int o = 0; o < w->k->n_out; o++)
        if (!w->dep[w->k->store[o]] && !w->written[o])
            return sn_fail(e, SN_ERR_INVALID, "%s: %%%d is stored, but no pass of %s computes it",
                           sn_ll_kname(w->k, kn, sizeof kn), w->k->args[o]->id, sn_op_name(w->n->op));
    return SN_OK;
}

sn_status sn_ll_emit_row(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor;
    row w = {.L = L, .k = k};
    sn_status st = sn_kernel_row_plan(k, &w.plan, e); /* the contract (program/kernel_row.c) */
    if (st || (st = sn_kernel_dtypes(k, sn_ll_check_dtype, e))) return st;
    w.n = w.plan.op; /* the anchor, or the pair's dx */
    w.out0 = k->row.pair ? 1 + k->row.n_colsum : 0;
    if (k->stage == SN_SUM_FINISH) return sn_ll_emit_row_finish(L, k, fname);
    w.C = w.plan.C;
    w.dep = w.plan.dep;
    int64_t R = w.plan.R;
    bool bwd_w = n->op == SN_OP_LAYERNORM_BWD_W || n->op == SN_OP_RMSNORM_BWD_W;
    sn_ll_fn_begin(L, fname);
    if (k->n_instr > 0) {
        st = fused_setup(&w, e);
    } else {
        w.y = sn_ll_buf(L, 0, n->dtype, "y");
        for (int i = 0; i < n->n_in && !st; i++)
            st = sn_ll_input_named(L, k, n->in[i], input_name(n->op, i), &w.in[i], e);
    }
    sn_ll_if any; /* the serial kernels write their sums even for no rows: not for an empty call */
    if (!st) {
        sn_ll_if_begin(L, &any, LLVMBuildICmp(L->b, LLVMIntSLT, L->begin, L->end, ""), "any");
        if (n->op == SN_OP_CROSS_ENTROPY || bwd_w) {
            sn_ll_row_partial(&w, R);
        } else if (n->op == SN_OP_CROSS_ENTROPY_BWD) {
            cross_entropy_bwd(&w, R);
            if (k->anchor2) { /* the classifier: each row's loss and count (kernel.h), as the
                                 forward's chunk of that one row */
                LLVMBuilderRef b = L->b;
                LLVMValueRef part = sn_ll_buf(L, k->n_out + k->n_in, SN_F32, "partials");
                sn_ll_loop rows;
                LLVMValueRef r = sn_ll_for(L, &rows, L->begin, L->end, sn_ll_i64(L, 1), "r");
                LLVMValueRef at = LLVMBuildMul(b, r, sn_ll_i64(L, 2), "");
                sn_ll_row_cross_entropy(&w, r, sn_ll_add(L, r, sn_ll_i64(L, 1)),
                                        LLVMBuildGEP2(b, L->t_f64, part, &at, 1, "row_sums"));
                sn_ll_for_end(L, &rows);
            }
        } else {
            sn_ll_loop rows;
            LLVMValueRef r = sn_ll_for(L, &rows, L->begin, L->end, sn_ll_i64(L, 1), "r");
            w.off = LLVMBuildMul(L->b, r, sn_ll_i64(L, w.C), "off");
            if (w.fx) sn_ll_fx_row(w.fx, r);
            sn_ll_row_one(&w, r);
            sn_ll_for_end(L, &rows);
        }
        sn_ll_if_end(L, &any);
        sn_ll_fn_end(L);
        if (w.fx) st = fused_check(&w, e);
    }
    sn_ll_fx_free(w.fx);
    return st;
}

#endif /* SN_HAVE_LLVM */
