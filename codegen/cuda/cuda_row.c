/* cuda_row.c: row ops as CUDA C (softmax, layernorm, rmsnorm, causal mask, cross-entropy and
 * their backwards) with the pointwise instructions fused around them (kernel.h): a block per row,
 * each pass over the row (cuda_row_pass.c) strided by the block's threads, the row's statistics
 * summed by warp shuffles, then across warps through shared memory (sn_block_sum, written once
 * per unit); short rows a warp each (sn_cu_row_warp_per_row), their statistics warp shuffles. The ops that sum over every row (cross-entropy's mean loss, the norm weight
 * gradients) are cuda_row_sums.c's.
 * Convention: the pass that writes the row op's result stores it through sn_cu_row_store, which
 * runs the epilogue and stores every output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_row.h"
#include "program/pointwise.h"


/* ---- a block per row ---- */

/* sn_cu_row_store() of a value written from a format and up to three operands. */
static void store_with(row *w, const char *fmt, const char *x0, const char *x1, const char *x2) {
    char val[512];
    snprintf(val, sizeof val, fmt, x0, x1, x2);
    sn_cu_row_store(w, val);
}

/* e^x's function where the max is not final (the online passes). */
static const char *exp_name(const row *w) { return w->exp_fast ? "sn_exp_approx" : "expf"; }

void sn_cu_row_exp_base(row *w, const char *m) {
    if (w->exp_fast) E("const float %s_l2 = %s * 1.44269504f; /* base 2 */", m, m);
}

const char *sn_cu_row_exp_sub(const row *w, const char *x, const char *m, char *b, size_t len) {
    if (w->exp_fast) snprintf(b, len, "sn_exp2(fmaf(%s, 1.44269504f, -%s_l2))", x, m);
    else snprintf(b, len, "expf(%s - %s)", x, m);
    return b;
}

static void softmax(row *w) {
    char x[64], e[160];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_cache_begin(w);
    E("float mx = -SN_INF; /* the row's max (NaN ignored, as the reference does) */");
    sn_cu_row_cache_max(w, x, w->C, "mx");
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_NONE);
    E("mx = fmaxf(mx, %s);", x);
    sn_cu_row_close_pass(w);
    E("mx = %s(mx);", w->bmax);
    sn_cu_row_exp_base(w, "mx");
    E("float se = 0.0f;");
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_NONE);
    E("se += %s;", sn_cu_row_exp_sub(w, x, "mx", e, sizeof e));
    sn_cu_row_close_pass(w);
    E("const float inv = 1.0f / %s(se);", w->bsum);
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_ALL);
    store_with(w, "%s * inv", sn_cu_row_exp_sub(w, x, "mx", e, sizeof e), "", "");
    sn_cu_row_close_pass(w);
    sn_cu_row_cache_end(w);
}

static void softmax_bwd(row *w) { /* (y, dy) -> y (dy - sum(dy y)) */
    char y[64], dy[64];
    sn_cu_row_opnd(w, 0, y, sizeof y);
    sn_cu_row_opnd(w, 1, dy, sizeof dy);
    sn_cu_row_cache_begin(w);
    E("float sdy = 0.0f;");
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_NONE);
    E("sdy += %s * %s;", y, dy);
    sn_cu_row_close_pass(w);
    E("const float s = %s(sdy);", w->bsum);
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_ALL);
    store_with(w, "%s * (%s - s)", y, dy, "");
    sn_cu_row_close_pass(w);
    sn_cu_row_cache_end(w);
}

/* mean (layernorm) and rstd of the row of operand 0, as the reference: two passes. With
 * `prologue`, the first pass stores the prologue's outputs. */
static void norm_stats(row *w, bool rms, bool prologue_here) {
    char x[64];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    if (!rms) {
        E("float sx = 0.0f;");
        sn_cu_row_open_pass(w, w->first, w->C, w->stride, prologue_here ? STORES_PROLOGUE : STORES_NONE);
        E("sx += %s;", x);
        if (prologue_here) sn_cu_row_store_prologue(w);
        sn_cu_row_close_pass(w);
        E("const float mean = %s(sx) / %lld.0f;", w->bsum, (long long)w->C);
    }
    E("float sq = 0.0f;");
    sn_cu_row_open_pass(w, w->first, w->C, w->stride,
              prologue_here && rms ? STORES_PROLOGUE : STORES_NONE);
    E(rms ? "sq += %s * %s;" : "sq += (%s - mean) * (%s - mean);", x, x);
    if (prologue_here && rms) sn_cu_row_store_prologue(w);
    sn_cu_row_close_pass(w);
    char eps[32];
    E("const float rstd = 1.0f / sqrtf(%s(sq) / %lld.0f + %s);", w->bsum, (long long)w->C,
      sn_cu_float_lit(w->n->a.f, eps, sizeof eps));
}

static void norm(row *w, bool rms) { /* layernorm (x, w, b), rmsnorm (x, w) */
    char x[64], wt[64], b[64];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_opnd(w, 1, wt, sizeof wt);
    sn_cu_row_cache_begin(w);
    norm_stats(w, rms, false);
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_ALL);
    if (rms) store_with(w, "%s * rstd * %s", x, wt, "");
    else store_with(w, "fmaf((%s - mean) * rstd, %s, %s)", x, wt, sn_cu_row_opnd(w, 2, b, sizeof b));
    sn_cu_row_close_pass(w);
    sn_cu_row_cache_end(w);
}

/* (x, w, dy) -> rstd (g - mean g - xhat mean(g xhat)), g = dy w (rmsnorm: no mean g) */
static void norm_bwd(row *w, bool rms) {
    char x[64], wt[64], dy[64], h[160];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_opnd(w, 1, wt, sizeof wt);
    sn_cu_row_opnd(w, 2, dy, sizeof dy);
    snprintf(h, sizeof h, rms ? "%s * rstd" : "(%s - mean) * rstd", x);
    sn_cu_row_cache_begin(w);
    norm_stats(w, rms, false);
    E("float sg = 0.0f, sgx = 0.0f;");
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_NONE);
    E("const float g = %s * %s;", dy, wt);
    if (!rms) E("sg += g;");
    E("sgx += g * (%s);", h);
    sn_cu_row_close_pass(w);
    if (rms) E("const float mg = 0.0f;");
    else E("const float mg = %s(sg) / %lld.0f;", w->bsum, (long long)w->C);
    E("const float mgx = %s(sgx) / %lld.0f;", w->bsum, (long long)w->C);
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_ALL);
    E("const float g = %s * %s;", dy, wt);
    store_with(w, "(g - mg - (%s) * mgx) * rstd", h, "", "");
    if (w->k->row.pair && w->lanes == 1) /* the row's dy xhat into its warp's sums: */
        E("dw[warp][j] += %s * (%s);", dy, h); /* lane's slot of column j (sn_cu_row_pair_open) */
    else if (w->k->row.pair)
        E("dw[warp][(%d * (j0 / %d) + l) * %d + lane] += %s * (%s);", w->lanes, 32 * w->lanes,
          sn_cu_row_pair_pitch(w), dy, h);
    sn_cu_row_close_pass(w);
    sn_cu_row_cache_end(w);
}

/* row r is query i = r % T of a (.., T, S) matrix: key j > i + S - T becomes the fill */
static void causal_mask(row *w) {
    const sn_node *x = w->n->in[0];
    char xs[64], f[32], val[160];
    sn_cu_row_opnd(w, 0, xs, sizeof xs);
    E("const int query = (int)(r %% %lld);", (long long)x->shape[x->rank - 2]);
    sn_cu_row_open_pass(w, w->first, w->C, w->stride, STORES_ALL);
    snprintf(val, sizeof val, "j > query + %lld ? %s : %s", (long long)(w->C - x->shape[x->rank - 2]),
             sn_cu_float_lit(w->n->a.f, f, sizeof f), xs);
    sn_cu_row_store(w, val);
    sn_cu_row_close_pass(w);
}

/* `count`: the rows whose target (arg t, i32) is not ign over the whole batch, every block's
 * threads reading all of them (exact: sums of ones in f32); 4 a load where the rows divide by
 * 4 (the buffers are 16-byte aligned), each thread's loads unrolled so that they issue
 * together (16,384 targets: 4 a thread at 1024 threads). */
static void counted_rows(row *w, const char *t, int ign) {
    int per = w->R % 4 == 0 ? 4 : 1;
    int64_t n = w->R / per, steps = (n + w->threads - 1) / w->threads;
    E("float counted = 0.0f; /* rows whose target is not %d, over the whole batch */", ign);
    E("#pragma unroll %d", steps < 8 ? (int)steps : 8);
    E("for (int u = 0; u < %lld; u++) {", (long long)steps);
    E("const %s q = threadIdx.x + (%s)%u * u;", w->ix, w->ix, w->threads);
    E("if (q < %lld) {", (long long)n);
    if (per == 4) {
        E("const uint4 v = reinterpret_cast<const uint4 *>(%s)[q];", t);
        E("counted += ((int)v.x != %d ? 1.0f : 0.0f) + ((int)v.y != %d ? 1.0f : 0.0f) +", ign, ign);
        E("           ((int)v.z != %d ? 1.0f : 0.0f) + ((int)v.w != %d ? 1.0f : 0.0f);", ign, ign);
    } else {
        E("counted += %s[q] != %d ? 1.0f : 0.0f;", t, ign);
    }
    E("}");
    E("}");
    E("const float count = sn_block_sum(counted);");
}

/* (logits, targets, dloss) -> (softmax - onehot(t)) dloss / count for counted rows, 0 for
 * ignored rows and padded classes, NaN for a bad target. The passes that store cover the
 * whole row, padded classes included (whole vectors); the statistics only the real classes.
 * The classifier (kernel.h: anchor2, the loss too) writes the row's loss and count into its
 * row of the partial sums. Where the row is kept in registers (sn_cu_row_cache_begin: 28 of a
 * 1024-thread block's 64 for GPT-2's 50,304 bf16 logits) the max and the sum are two passes
 * over them, the row read once in all; else the max and the sum of exponentials are one
 * online pass (one read of the row for them, one for the gradient). */
static void cross_entropy_bwd(row *w) {
    char x[64], t[16], dl[64], val[160], e[160];
    bool loss = w->k->anchor2 != NULL;
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_arg_name(w->k, w->buf[1], t, sizeof t);
    sn_cu_row_opnd(w, 2, dl, sizeof dl);
    int ign = w->n->a.ignore_index;
    bool padded = w->Vr < w->C;
    if (w->prefetch) { /* the block's rows in turn, each copied ahead into shared memory */
        counted_rows(w, t, ign);
        E("const float scale = count > 0.0f ? %s / count : 0.0f;", dl);
        E("SN_DYNAMIC_SHARED(uint4, next_row);");
        sn_cu_row_prefetch_issue(w, "blockIdx.x");
        E("for (%s r = blockIdx.x; r < %lld; r += gridDim.x) {", w->ix, (long long)w->R);
        E("const %s row = r * %lld;", w->ix, (long long)w->C);
        sn_cu_row_coords(w);
    }
    sn_cu_row_cache_begin(w);
    if (w->prefetch) {
        sn_cu_row_cache_fill_shared(w);
        E("if (r + gridDim.x < %lld)", (long long)w->R);
        sn_cu_row_prefetch_issue(w, "r + gridDim.x");
    }
    E("const int target = %s[r];", t);
    if (loss) {
        E("double *row_sums = (double *)scratch + 2 * r; /* this row's loss and count */");
        E("if (target == %d && threadIdx.x == 0) row_sums[0] = row_sums[1] = 0.0;", ign);
    }
    E("if (target != %d && target >= 0 && target < %lld) {", ign, (long long)w->Vr);
    sn_cu_row_cache_fill(w); /* the row's loads issued before the targets' */
    if (!w->prefetch) {
        counted_rows(w, t, ign);
        E("const float scale = count > 0.0f ? %s / count : 0.0f;", dl);
    }
    /* the row kept: the gradient's pass writes p at the target too, and the column's owner
     * writes it again after (no test an element with the target live through the pass: 4
     * bytes of spills in the classifier that prefetches, NVRTC sm_90, 2026-11-29); the target's
     * logit loaded first, for the loss and that store (its latency under the passes) */
    bool again = w->cache_steps > 0;
    if (again) { /* thread 0's load, into shared memory after the max (a barrier before its use) */
        E("SN_SHARED(float, target_logit, 1);");
        E("float logit_t = 0.0f;");
        E("if (threadIdx.x == 0) {");
        E("const int j = target;");
        sn_cu_row_element(w);
        E("logit_t = %s;", x);
        E("}");
    }
    bool online = loss && !w->cache_steps; /* the row read once for the max and the sum */
    if (online && w->lanes > 1) { /* a vector at a time: its max, then its exponentials */
        E("float mx = -SN_INF, se = 0.0f; /* online: se is the sum of exp(x - mx) so far */");
        E("float xs[%d];", w->lanes);
        sn_cu_row_open_pass(w, "threadIdx.x", w->Vr, w->threads, STORES_NONE);
        E("xs[l] = %s;", x);
        sn_cu_row_close_lanes(w);
        E("const int nv = %lld - j0 < %d ? (int)(%lld - j0) : %d; /* columns before the end */",
          (long long)w->Vr, w->lanes, (long long)w->Vr, w->lanes);
        E("float vm = -SN_INF;");
        E("#pragma unroll");
        E("for (int l = 0; l < %d; l++) if (l < nv) vm = fmaxf(vm, xs[l]);", w->lanes);
        E("if (vm > mx) {");
        E("se *= %s(mx - vm);", exp_name(w));
        E("mx = vm;");
        E("}");
        E("#pragma unroll");
        E("for (int l = 0; l < %d; l++) if (l < nv) se += %s(xs[l] - mx);", w->lanes, exp_name(w));
        sn_cu_row_close_pass(w);
    } else if (online) { /* a column at a time */
        E("float mx = -SN_INF, se = 0.0f; /* online: se is the sum of exp(x - mx) so far */");
        sn_cu_row_open_pass(w, "threadIdx.x", w->Vr, w->threads, STORES_NONE);
        E("const float xv = %s;", x);
        E("if (xv > mx) {");
        E("se = se * %s(mx - xv) + 1.0f;", exp_name(w));
        E("mx = xv;");
        E("} else {");
        E("se += %s(xv - mx);", exp_name(w));
        E("}");
        sn_cu_row_close_pass(w);
    }
    if (online) {
        E("const float row_mx = sn_block_max(mx);");
        E("se = sn_block_sum(mx == -SN_INF ? 0.0f : se * %s(mx - row_mx));", exp_name(w));
        E("mx = row_mx;");
        sn_cu_row_exp_base(w, "mx");
    } else { /* the max, then the sum (from the registers where the row is kept) */
        E("float mx = -SN_INF;");
        sn_cu_row_cache_max(w, x, w->Vr, "mx");
        sn_cu_row_open_pass(w, "threadIdx.x", w->Vr, w->threads, STORES_NONE);
        E("mx = fmaxf(mx, %s);", x);
        sn_cu_row_close_pass(w);
        E("mx = sn_block_max(mx);");
        if (again) E("if (threadIdx.x == 0) target_logit[0] = logit_t; /* read after the sum's barriers */");
        sn_cu_row_exp_base(w, "mx");
        E("float se = 0.0f;");
        sn_cu_row_open_pass(w, "threadIdx.x", w->Vr, w->threads, STORES_NONE);
        E("se += %s;", sn_cu_row_exp_sub(w, x, "mx", e, sizeof e));
        sn_cu_row_close_pass(w);
        E("se = sn_block_sum(se);");
    }
    if (loss && again) {
        E("if (threadIdx.x == 0) {");
        E("row_sums[0] = (double)(mx + logf(se) - target_logit[0]);");
        E("row_sums[1] = 1.0;");
        E("}");
    } else if (loss) {
        E("if (threadIdx.x == 0) {");
        E("float logit_t;");
        E("{");
        E("const int j = target;");
        sn_cu_row_element(w);
        E("logit_t = %s;", x);
        E("}");
        E("row_sums[0] = (double)(mx + logf(se) - logit_t);");
        E("row_sums[1] = 1.0;");
        E("}");
    }
    E("const float k = scale / se;");
    /* exp_fast: |k| folded into the exponent, its sign copied (an fma, the SFU's 2^x and a
     * sign: where "2^x * k" gave LLaMA's classifier, its 49,152 columns all in whole steps, 12
     * bytes of spills at the 64 registers of 1024 threads, sm_90, 2026-11-29) */
    if (w->exp_fast) E("const float mk_l2 = mx_l2 - log2f(fabsf(k)); /* base 2 */");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    if (w->exp_fast) E("const float p = copysignf(sn_exp2(fmaf(%s, 1.44269504f, -mk_l2)), k);", x);
    else E("const float p = %s * k;", sn_cu_row_exp_sub(w, x, "mx", e, sizeof e));
    if (padded && w->cache_steps) /* the steps wholly before the padded classes: no test */
        snprintf(val, sizeof val, "cs < %lld || j < %lld ? p : 0.0f",
                 (long long)sn_cu_row_whole_steps(w, w->Vr), (long long)w->Vr);
    else if (again)
        snprintf(val, sizeof val, padded ? "j < %lld ? p : 0.0f" : "p", (long long)w->Vr);
    else
        snprintf(val, sizeof val, padded ? "j < %lld ? (j == target ? p - scale : p) : 0.0f"
                                         : "j == target ? p - scale : p", (long long)w->Vr);
    sn_cu_row_store(w, val);
    sn_cu_row_close_pass(w);
    sn_cu_row_cache_end(w);
    if (again) { /* the same thread's later store to the element: it stays */
        E("/* the target's column again, by the thread whose pass stored it */");
        E("if ((target / %d) %% %u == threadIdx.x) {", w->lanes, w->threads);
        E("const int j = target;");
        sn_cu_row_element(w); /* the epilogue's operands at the column (the fp8 pass's scale) */
        E("const float xt = target_logit[0];");
        if (w->exp_fast) E("const float p = copysignf(sn_exp2(fmaf(xt, 1.44269504f, -mk_l2)), k);");
        else E("const float p = %s * k;", sn_cu_row_exp_sub(w, "xt", "mx", e, sizeof e));
        sn_cu_row_store(w, "p - scale");
        E("}");
    }
    E("} else {");
    if (loss) {
        E("/* a bad target: NaN, counted */");
        E("if (target != %d && threadIdx.x == 0) {", ign);
        E("row_sums[0] = (double)(SN_INF - SN_INF);");
        E("row_sums[1] = 1.0;");
        E("}");
    }
    E("const float fill = target == %d ? 0.0f : (SN_INF - SN_INF); /* NaN: a bad target */", ign);
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    snprintf(val, sizeof val, padded ? "j < %lld ? fill : 0.0f" : "fill", (long long)w->Vr);
    sn_cu_row_store(w, val);
    sn_cu_row_close_pass(w);
    E("}");
    if (w->prefetch) E("}");
}

/* ---- the kernel ---- */

/* Fills w from k and its plan (program/kernel_row.c: the contract checked there); what the
 * CUDA backend generates: its dtypes. */
static sn_status setup(row *w, const sn_kernel *k, sn_err *e) {
    sn_row_plan p;
    sn_status st = sn_kernel_row_plan(k, &p, e);
    if (st) return st;
    *w = (row){.k = k, .n = p.op, .y = p.y, .fused = p.fused, .C = p.C, .R = p.R, .Vr = p.Vr,
               .out0 = k->row.pair ? 1 + k->row.n_colsum : 0}; /* the pair: n is its dx */
    memcpy(w->dep, p.dep, sizeof w->dep);
    memcpy(w->buf, p.buf, sizeof w->buf);
    w->ix = sn_cu_index_type(w->R * w->C + 1024 * 1024);
    w->lanes = sn_cu_row_lanes(k);
    /* a 16-bit program's exponentials on the SFU (an fma and ex2 once the max is known,
     * sn_cu_row_exp_sub; sn_exp_approx in the online passes: 2 instructions where expf takes
     * 9, and gpt2's classifier takes 2 an element of 50,304 a row, 2026-11-29 SASS): inputs
     * of 8 or 11 bits; f32 programs keep expf, close to the CPU device's */
    w->exp_fast = sn_cu_reads_16bit(k);
    return sn_kernel_dtypes(k, sn_cu_check_dtype_no_f8, e);
}

sn_status sn_cu_check_row(const sn_kernel *k, sn_err *e) {
    row w;
    return setup(&w, k, e);
}

/* w for kernel k in blocks of `threads` on target tg, before any text (false: k is not one
 * the renderer takes, sn_cu_check_row). */
static bool plan(row *w, const sn_kernel *k, unsigned threads, const sn_target *tg) {
    sn_err e;
    if (setup(w, k, &e)) return false;
    w->threads = threads;
    w->cache_allowed = tg->row_cache;
    w->sm = tg->sm;
    w->shared_max = tg->shared_max;
    w->prefetch_allowed = tg->row_prefetch;
    bool warp_rows = sn_cu_row_warp_per_row(k) || k->row.pair; /* the pair: a warp a row too */
    w->first = warp_rows ? "lane" : "threadIdx.x";
    w->stride = warp_rows ? 32 : w->threads;
    w->bsum = warp_rows ? "sn_warp_sum" : "sn_block_sum";
    w->bmax = warp_rows ? "sn_warp_max" : "sn_block_max";
    sn_cu_row_prefetch_plan(w);
    return true;
}

/* __launch_bounds__' blocks an SM (0: none): a row kept in registers, at least 3 blocks of 256
   threads an SM (85 registers; ptxas took 108 with 2 for GPT-2's layernorm, 76 with none), 2
   for the norm backward pair (127 on sm_90), 1 of more threads (the classifier's 1024: 64) */
static int min_blocks(row *w) {
    return !sn_cu_row_cache_planned(w) ? 0 : w->threads > 256 ? 1 : w->k->row.pair ? 2 : 3;
}

int64_t sn_cu_row_prefetched(const sn_kernel *k, unsigned threads, const sn_target *tg,
                             int *blocks_per_sm) {
    if (k->kind != SN_KER_ROW || k->stage == SN_SUM_FINISH || k->anchor->op != SN_OP_CROSS_ENTROPY_BWD)
        return 0;
    row w;
    if (!plan(&w, k, threads, tg) || !w.prefetch) return 0;
    *blocks_per_sm = min_blocks(&w);
    return 2 * w.C;
}

void sn_cu_emit_row(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const sn_target *tg,
                    const char *fname) {
    row w;
    if (k->stage == SN_SUM_FINISH) {
        sn_cu_row_finish(t, k, d, fname, false);
        return;
    }
    SN_ASSERT(plan(&w, k, d->block[0], tg)); /* the renderer checked it */
    w.t = t;
    bool warp_rows = !strcmp(w.first, "lane");
    SN_ASSERT(!w.prefetch || d->shared_bytes == 2 * w.C); /* as the launch gives it */
    sn_cu_emit_signature_min(t, k, fname, (int)w.threads, min_blocks(&w));
    sn_cu_emitf(t, "/* %s over %lld rows of %lld%s */", sn_op_name(k->anchor->op), (long long)w.R,
                (long long)w.C, k->anchor2 ? ": the classifier, the loss a row into the partial sums"
                                : k->row.pair ? ": dx of each row and the partial sums, a block a "
                                                "chunk of rows, a warp a row"
                                : k->stage ? ": partial sums, a warp per row"
                                : warp_rows ? ": a warp per row" : "");
    if (k->row.pair) {
        sn_cu_row_pair_open(&w);
        norm_bwd(&w, k->anchor->op == SN_OP_RMSNORM_BWD_W);
        sn_cu_row_pair_close(&w);
        sn_cu_emitf(t, "}");
        return;
    }
    if (k->stage == SN_SUM_PARTIAL && !k->anchor2) sn_cu_row_partial_open(&w);
    if (warp_rows) {
        SN_ASSERT(w.threads == 32 * SN_CUDA_ROW_WARPS);
        sn_cu_emitf(t, "const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
        sn_cu_emitf(t, "const %s r = (%s)blockIdx.x * %d + warp; /* this warp's row */", w.ix, w.ix,
                    SN_CUDA_ROW_WARPS);
        sn_cu_emitf(t, "if (r >= %lld) return; /* no barrier follows: the warp is alone */",
                    (long long)w.R);
        sn_cu_emitf(t, "const %s row = r * %lld;", w.ix, (long long)w.C);
        sn_cu_row_coords(&w);
    } else if (w.prefetch) { /* the block's rows in turn: cross_entropy_bwd opens the loop */
    } else if (k->stage == SN_SUM_WHOLE || k->anchor2) { /* a block per row (the classifier too) */
        sn_cu_emitf(t, "const %s r = blockIdx.x; /* this block's row */", w.ix);
        sn_cu_emitf(t, "const %s row = r * %lld;", w.ix, (long long)w.C);
        sn_cu_row_coords(&w);
    }
    switch (k->anchor->op) {
    case SN_OP_SOFTMAX: softmax(&w); break;
    case SN_OP_SOFTMAX_BWD: softmax_bwd(&w); break;
    case SN_OP_LAYERNORM: norm(&w, false); break;
    case SN_OP_RMSNORM: norm(&w, true); break;
    case SN_OP_LAYERNORM_BWD: norm_bwd(&w, false); break;
    case SN_OP_RMSNORM_BWD: norm_bwd(&w, true); break;
    case SN_OP_LAYERNORM_BWD_W: sn_cu_row_norm_bwd_w(&w, false); break;
    case SN_OP_RMSNORM_BWD_W: sn_cu_row_norm_bwd_w(&w, true); break;
    case SN_OP_CAUSAL_MASK: causal_mask(&w); break;
    case SN_OP_CROSS_ENTROPY: sn_cu_row_cross_entropy(&w); break;
    case SN_OP_CROSS_ENTROPY_BWD: cross_entropy_bwd(&w); break;
    default: SN_ASSERT(0);
    }
    sn_cu_emitf(t, "}");
}

/* ---- shared by every row and reduction kernel ---- */

void sn_cu_emit_block_reductions(sn_cu_text *t) {
    static const char *const text[] = {
        "",
        "/* Sums and maxima over a warp, then over a block (every thread gets the result). The",
        " * first barrier lets an earlier call's readers of `partial` finish; the second makes",
        " * every warp's partial visible. Blocks are whole warps. */",
        "SN_DEVICE float sn_warp_sum(float v) {",
        "for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
        "return v;",
        "}",
        "/* NaN ignored, as fmaxf does */",
        "SN_DEVICE float sn_warp_max(float v) {",
        "for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));",
        "return v;",
        "}",
        "SN_DEVICE float sn_block_sum(float v) {",
        "SN_SHARED(float, partial_sum, 32);",
        "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;",
        "v = sn_warp_sum(v);",
        "__syncthreads();",
        "if (lane == 0) partial_sum[warp] = v;",
        "__syncthreads();",
        "return sn_warp_sum(lane < warps ? partial_sum[lane] : 0.0f);",
        "}",
        "SN_DEVICE float sn_block_max(float v) {",
        "SN_SHARED(float, partial_max, 32);",
        "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;",
        "v = sn_warp_max(v);",
        "__syncthreads();",
        "if (lane == 0) partial_max[warp] = v;",
        "__syncthreads();",
        "return sn_warp_max(lane < warps ? partial_max[lane] : -SN_INF);",
        "}",
        "/* max with NaN propagating (the reference's max reduction) */",
        "SN_DEVICE float sn_max_nan(float a, float b) { return a > b || a != a ? a : b; }",
    };
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++) sn_cu_emitf(t, "%s", text[i]);
}
