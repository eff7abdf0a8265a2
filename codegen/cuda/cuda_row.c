/* cuda_row.c: row ops as CUDA C (softmax, layernorm, rmsnorm, causal mask, cross-entropy and
 * their backwards) with the pointwise instructions fused around them (kernel.h): a block per row,
 * each pass over the row strided by the block's threads, the row's statistics summed by warp
 * shuffles, then across warps through shared memory (sn_block_sum, written once per unit). The
 * ops that sum over every row (cross-entropy's mean loss, the norm weight gradients) are
 * cuda_row_sums.c's; the passes over a row here serve both. Where the row length divides by 4
 * (f32) or 8 (a 16-bit buffer takes part), a pass takes `lanes` columns a step: each aligned
 * contiguous access one 16-byte load (sn_load8/sn_load4) before an unrolled loop over the
 * lanes, each output one 16-byte store after it; other accesses read one value a lane.
 * Convention: every pass evaluates, per element, the accesses and the prologue (computing again
 * what an earlier pass computed: the compiler drops what a pass does not read); the pass that
 * writes the row op's result also runs the epilogue and stores every output, prologue values
 * included (the LLVM emitter's st(), llvm_row.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_row.h"
#include "program/pointwise.h"


static const char *arg(const row *w, int i, char *b, size_t len) {
    return sn_cu_arg_name(w->k, i, b, len);
}

/* ---- 16-byte vectors ---- */

/* Values of type t in one 16-byte load (f32 4, bf16/f16 8; 0: i32, never a vector). */
static int per_vector(sn_dtype t) { return t == SN_F32 ? 4 : t == SN_BF16 || t == SN_F16 ? 8 : 0; }

static int64_t row_length(const sn_kernel *k) {
    const sn_node *x = k->anchor->in[0];
    return x->rank ? x->shape[x->rank - 1] : 1;
}

int sn_cu_row_lanes(const sn_kernel *k) {
    if (k->stage == SN_SUM_FINISH) return 1;
    int64_t C = row_length(k), elements = sn_numel(k->anchor->in[0]);
    bool half = false, f32 = false; /* f32: a float4 to load or store */
    int f32_streams = 0;            /* f32 buffers read or written element by element */
    for (int i = 0; i < k->n_out + k->n_in; i++) {
        half = half || sn_dtype_bits(k->args[i]->dtype) == 16;
        f32 = f32 || (k->args[i]->dtype == SN_F32 && sn_numel(k->args[i]) > 1);
        f32_streams += k->args[i]->dtype == SN_F32 && sn_numel(k->args[i]) >= elements;
    }
    /* 8 lanes of four f32 streams (layernorm_bwd with its residual add and bf16 copy) need
       more than the 40 registers ptxas gives a 96-thread block on sm_80: they spill; 4 lanes
       (192 threads) do not */
    return half && C % 8 == 0 && f32_streams <= 3 ? 8 : f32 && C % 4 == 0 ? 4 : 1;
}

/* Whether a buffer of type t, read or written at a multiple of `lanes` (row + j0, or j0: rows
 * start at multiples of lanes, buffers 64-byte aligned), takes one vector a step. */
static bool vector_type(const row *w, sn_dtype t) {
    int g = per_vector(t);
    return w->lanes > 1 && g && w->lanes % g == 0;
}

/* Whether access x of a fused kernel can be vector loads: contiguous along the row, each
 * step's first element 16-byte aligned, the mask (if any) on another axis. */
static bool access_vector(const row *w, const sn_access *x) {
    int last = w->k->rank - 1, g = per_vector(w->k->args[x->arg]->dtype);
    if (!vector_type(w, w->k->args[x->arg]->dtype) || x->stride[last] != 1 || x->offset % g)
        return false;
    for (int d = 0; d < last; d++)
        if (x->stride[d] % g) return false;
    return !x->masked || x->mask_axis != last;
}

/* How the row op reads operand i when it comes from a buffer (w->buf[i] >= 0). */
enum { OP_COMPUTED, OP_ELEMENT, OP_COLUMN, OP_ROW, OP_SCALAR };
static int operand_kind(const row *w, int i) {
    if (w->buf[i] < 0) return OP_COMPUTED;
    if (sn_row_operand_per_element(w->n->op, i)) return OP_ELEMENT; /* at row + j */
    if (sn_row_facts_of(w->n->op)->per_row & (1u << i)) return OP_ROW; /* at r */
    return sn_numel(w->n->in[i]) == 1 ? OP_SCALAR : OP_COLUMN;     /* at 0; at j (w, b) */
}

/* Operand i of the row op at element (r, j) of the current pass, as C: op<i> for a buffer
 * read per element or per column (sn_cu_row_element() defines it), else the value itself. */
const char *sn_cu_row_opnd(const row *w, int i, char *b, size_t len) {
    char a[16];
    switch (operand_kind(w, i)) {
    case OP_ELEMENT: case OP_COLUMN: snprintf(b, len, "op%d", i); return b;
    case OP_ROW: snprintf(b, len, "%s[r]", arg(w, w->buf[i], a, sizeof a)); return b;
    case OP_SCALAR: snprintf(b, len, "sn_load(%s[0])", arg(w, w->buf[i], a, sizeof a)); return b;
    }
    return sn_cu_operand(w->k, &w->k->instr[w->k->row_instr].in[i], "", b, len);
}

/* Whether access a is read per element: by an instruction, or as a per-element operand of the
 * row op (w, b and targets are read from their buffers directly). */
static bool access_used(const row *w, int a) {
    const sn_kernel *k = w->k;
    for (int i = 0; i < k->n_instr; i++)
        for (int t = 0; t < k->instr[i].n_in; t++) {
            const sn_ref *r = &k->instr[i].in[t];
            if (r->kind == SN_REF_ACCESS && r->index == a &&
                (i != k->row_instr || sn_row_operand_per_element(w->n->op, t)))
                return true;
        }
    return false;
}

/* Where `r` is defined: the coordinates of row r in the index space that the accesses read. */
void sn_cu_row_coords(row *w) {
    const sn_kernel *k = w->k;
    if (!w->fused) return;
    int last = k->rank - 1;
    bool need[SN_MAX_RANK] = {0};
    for (int a = 0; a < k->n_access; a++) {
        const sn_access *x = &k->access[a];
        for (int d = 0; d < last && access_used(w, a); d++)
            need[d] = need[d] || x->stride[d] || (x->masked && x->mask_axis == d);
    }
    int64_t inner = 1;
    for (int d = last - 1; d >= 0; d--) {
        if (need[d] && inner == 1) E("const %s i%d = r %% %lld;", w->ix, d, (long long)k->shape[d]);
        else if (need[d] && d == 0) E("const %s i0 = r / %lld;", w->ix, (long long)inner);
        else if (need[d]) E("const %s i%d = r / %lld %% %lld;", w->ix, d, (long long)inner, (long long)k->shape[d]);
        inner *= k->shape[d];
    }
}

/* The index access x reads at column `col` of row r (malloc'd; NULL: out of memory, noted). */
static char *access_index(row *w, const sn_access *x, const char *col) {
    int last = w->k->rank - 1;
    sn_cu_text ix = {0};
    for (int d = 0; d < last; d++)
        if (x->stride[d]) sn_cu_appendf(&ix, "%si%d * %lld", ix.len ? " + " : "", d, (long long)x->stride[d]);
    if (x->stride[last])
        sn_cu_appendf(&ix, "%s%s%s", ix.len ? " + " : "", col, x->stride[last] == 1 ? "" : " * ");
    if (x->stride[last] && x->stride[last] != 1) sn_cu_appendf(&ix, "%lld", (long long)x->stride[last]);
    if (!ix.len || x->offset) sn_cu_appendf(&ix, "%s%lld", ix.len ? " + " : "", (long long)x->offset);
    size_t oom = ix.oom;
    char *idx = sn_cu_finish(&ix);
    if (!idx) w->t->oom = oom;
    return idx;
}

/* The condition under which masked access x reads (on another axis than the row's when
 * `vector`), as "cond ? ", or "". */
static void mask_cond(const row *w, const sn_access *x, char *cond, size_t len) {
    cond[0] = '\0';
    if (!x->masked) return;
    char c[16];
    snprintf(c, sizeof c, x->mask_axis == w->k->rank - 1 ? "j" : "i%d", x->mask_axis);
    snprintf(cond, len, "%s >= %lld && %s < %lld ? ", c, (long long)x->mask_lo, c,
             (long long)x->mask_hi);
}

/* "sn_load8" / "sn_store4": the prelude's vector function for `lanes` values. */
static const char *vfn(const row *w, const char *what, char *b, size_t len) {
    snprintf(b, len, "sn_%s%d", what, w->lanes);
    return b;
}

/* Before a vector step's lane loop, with j0 (its first column) defined: the vector loads of
 * the accesses and operand buffers that take them, into <name>_v[lanes]. */
void sn_cu_row_vector_loads(row *w) {
    const sn_kernel *k = w->k;
    char an[16], fn[16], cond[128];
    for (int a = 0; w->fused && a < k->n_access; a++) {
        const sn_access *x = &k->access[a];
        if (!access_used(w, a) || !access_vector(w, x)) continue;
        char *idx = access_index(w, x, "j0");
        if (!idx) return;
        mask_cond(w, x, cond, sizeof cond);
        if (cond[0]) {
            cond[strlen(cond) - 3] = '\0'; /* drop " ? " */
            E("float x%d_v[%d] = {0};", a, w->lanes);
            E("if (%s) %s(&%s[%s], x%d_v);", cond, vfn(w, "load", fn, sizeof fn),
              arg(w, x->arg, an, sizeof an), idx, a);
        } else {
            E("float x%d_v[%d];", a, w->lanes);
            E("%s(&%s[%s], x%d_v);", vfn(w, "load", fn, sizeof fn), arg(w, x->arg, an, sizeof an),
              idx, a);
        }
        free(idx);
    }
    for (int i = 0; i < w->n->n_in; i++) {
        int kind = operand_kind(w, i);
        if ((kind != OP_ELEMENT && kind != OP_COLUMN) || !vector_type(w, w->k->args[w->buf[i]]->dtype))
            continue;
        E("float op%d_v[%d];", i, w->lanes);
        E("%s(&%s[%sj0], op%d_v);", vfn(w, "load", fn, sizeof fn), arg(w, w->buf[i], an, sizeof an),
          kind == OP_ELEMENT ? "row + " : "", i);
    }
}

/* Inside a loop body with `r`, `row` (= r * C), the coordinates and column `j` defined: the
 * accesses, the row op's buffer operands and the prologue at element (r, j) (in a vector
 * step's lane loop, lane l of the vectors loaded). */
void sn_cu_row_element(row *w) {
    const sn_kernel *k = w->k;
    char an[16], cond[128];
    for (int a = 0; w->fused && a < k->n_access; a++) {
        const sn_access *x = &k->access[a];
        if (!access_used(w, a)) continue;
        if (w->vec && access_vector(w, x)) {
            E("const float x%d = x%d_v[l];", a, a);
            continue;
        }
        char *idx = access_index(w, x, "j");
        if (!idx) return;
        mask_cond(w, x, cond, sizeof cond);
        E("const float x%d = %ssn_load(%s[%s])%s;", a, cond, arg(w, x->arg, an, sizeof an), idx,
          cond[0] ? " : 0.0f" : "");
        free(idx);
    }
    for (int i = 0; i < w->n->n_in; i++) {
        int kind = operand_kind(w, i);
        if (kind != OP_ELEMENT && kind != OP_COLUMN) continue;
        if (w->vec && vector_type(w, w->k->args[w->buf[i]]->dtype)) E("const float op%d = op%d_v[l];", i, i);
        else E("const float op%d = sn_load(%s[%sj]);", i, arg(w, w->buf[i], an, sizeof an),
               kind == OP_ELEMENT ? "row + " : "");
    }
    for (int i = 0; w->fused && i < k->n_instr; i++)
        if (!w->dep[i]) sn_cu_emit_instr(w->t, k, i, "");
}

/* Output o at (r, j) is `v`: into out<o>_v[l] in a vector step that collects it, else stored. */
static void put(row *w, int o, const char *v) {
    char a[16];
    arg(w, o, a, sizeof a);
    if (w->vec && (w->declared & (1u << o))) {
        E("%s_v[l] = %s;", a, v);
        w->pending |= 1u << o;
    } else {
        E("sn_store(&%s[row + j], %s);", a, v);
    }
}

/* The outputs a pass stores (STORES_*, cuda_row.h). */
static unsigned stored_outputs(const row *w, int stores) {
    unsigned m = 0;
    for (int o = 0; o < w->k->n_out; o++)
        if (stores == STORES_ALL || (stores == STORES_PROLOGUE && w->fused && !w->dep[w->k->store[o]]))
            m |= 1u << o;
    return stores == STORES_ALL && !w->fused ? 1u : m;
}

/* Stores the outputs that do not depend on the row op at element (r, j). */
void sn_cu_row_store_prologue(row *w) {
    char v[48];
    for (int o = 0; w->fused && o < w->k->n_out; o++)
        if (!w->dep[w->k->store[o]]) put(w, o, sn_cu_var_name(w->k, w->k->store[o], "", v, sizeof v));
}

/* In an element block: the row op's result at (r, j) is `val`; the epilogue follows it and
 * every output is stored. */
static void store(row *w, const char *val) {
    const sn_kernel *k = w->k;
    char v[48];
    const char *name = w->fused ? sn_cu_var_name(k, k->row_instr, "", v, sizeof v) : "y";
    E(w->n->dtype == SN_BF16 ? "const float %s = sn_round_bf16(%s);"
      : w->n->dtype == SN_F16 ? "const float %s = sn_round_f16(%s);" : "const float %s = %s;", name, val);
    if (!w->fused) {
        put(w, 0, "y");
        return;
    }
    for (int i = 0; i < k->n_instr; i++)
        if (w->dep[i] && i != k->row_instr) sn_cu_emit_instr(w->t, k, i, "");
    for (int o = 0; o < k->n_out; o++) put(w, o, sn_cu_var_name(k, k->store[o], "", v, sizeof v));
}

/* A pass over columns [0, end) of row r by `threads` threads, this one `first`, storing
 * `stores` (STORES_*): one column a step, for (int j = first; j < end; j += threads)
 * { element ...; or `lanes` columns a step: vector loads at j0 = lanes * first + lanes *
 * threads * step, then an unrolled loop over the lanes, each `const int j = j0 + l;` and
 * element, lanes past `end` skipped (a pass that stores covers whole vectors). */
void sn_cu_row_open_pass(row *w, const char *first, int64_t end, unsigned threads, int stores) {
    if (w->lanes == 1) {
        E("for (int j = %s; j < %lld; j += %u) {", first, (long long)end, threads);
        sn_cu_row_element(w);
        return;
    }
    char a[16];
    SN_ASSERT(!w->vec && (stores == STORES_NONE || end % w->lanes == 0));
    E("/* %d columns a step */", w->lanes);
    E("for (int j0 = %d * %s; j0 < %lld; j0 += %u) {", w->lanes, first, (long long)end,
      w->lanes * threads);
    sn_cu_row_vector_loads(w);
    w->declared = w->pending = 0;
    unsigned out = stored_outputs(w, stores);
    for (int o = 0; o < w->k->n_out; o++)
        if ((out & (1u << o)) && vector_type(w, w->k->args[o]->dtype)) {
            E("float %s_v[%d];", arg(w, o, a, sizeof a), w->lanes);
            w->declared |= 1u << o;
        }
    E("#pragma unroll");
    E("for (int l = 0; l < %d; l++) {", w->lanes);
    E("const int j = j0 + l;");
    if (end % w->lanes) E("if (j >= %lld) break;", (long long)end);
    w->vec = true;
    sn_cu_row_element(w);
}

void sn_cu_row_close_pass(row *w) {
    E("}");
    if (!w->vec) return;
    char a[16], fn[16];
    SN_ASSERT(w->pending == w->declared); /* open_pass was told what the pass stores */
    for (int o = 0; o < w->k->n_out; o++)
        if (w->declared & (1u << o))
            E("%s(&%s[row + j0], %s_v);", vfn(w, "store", fn, sizeof fn), arg(w, o, a, sizeof a), a);
    E("}");
    w->vec = false;
    w->declared = w->pending = 0;
}

/* ---- a block per row ---- */

/* store() of a value written from a format and up to three operands. */
static void store_with(row *w, const char *fmt, const char *x0, const char *x1, const char *x2) {
    char val[512];
    snprintf(val, sizeof val, fmt, x0, x1, x2);
    store(w, val);
}

static void softmax(row *w) {
    char x[64];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    E("float mx = -SN_INF; /* the row's max (NaN ignored, as the reference does) */");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_NONE);
    E("mx = fmaxf(mx, %s);", x);
    sn_cu_row_close_pass(w);
    E("mx = sn_block_max(mx);");
    E("float se = 0.0f;");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_NONE);
    E("se += expf(%s - mx);", x);
    sn_cu_row_close_pass(w);
    E("const float inv = 1.0f / sn_block_sum(se);");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    store_with(w, "expf(%s - mx) * inv", x, "", "");
    sn_cu_row_close_pass(w);
}

static void softmax_bwd(row *w) { /* (y, dy) -> y (dy - sum(dy y)) */
    char y[64], dy[64];
    sn_cu_row_opnd(w, 0, y, sizeof y);
    sn_cu_row_opnd(w, 1, dy, sizeof dy);
    E("float sdy = 0.0f;");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_NONE);
    E("sdy += %s * %s;", y, dy);
    sn_cu_row_close_pass(w);
    E("const float s = sn_block_sum(sdy);");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    store_with(w, "%s * (%s - s)", y, dy, "");
    sn_cu_row_close_pass(w);
}

/* mean (layernorm) and rstd of the row of operand 0, as the reference: two passes. With
 * `prologue`, the first pass stores the prologue's outputs. */
static void norm_stats(row *w, bool rms, bool prologue_here) {
    char x[64];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    if (!rms) {
        E("float sx = 0.0f;");
        sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, prologue_here ? STORES_PROLOGUE : STORES_NONE);
        E("sx += %s;", x);
        if (prologue_here) sn_cu_row_store_prologue(w);
        sn_cu_row_close_pass(w);
        E("const float mean = sn_block_sum(sx) / %lld.0f;", (long long)w->C);
    }
    E("float sq = 0.0f;");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads,
              prologue_here && rms ? STORES_PROLOGUE : STORES_NONE);
    E(rms ? "sq += %s * %s;" : "sq += (%s - mean) * (%s - mean);", x, x);
    if (prologue_here && rms) sn_cu_row_store_prologue(w);
    sn_cu_row_close_pass(w);
    char eps[32];
    E("const float rstd = 1.0f / sqrtf(sn_block_sum(sq) / %lld.0f + %s);", (long long)w->C,
      sn_cu_float_lit(w->n->a.f, eps, sizeof eps));
}

static void norm(row *w, bool rms) { /* layernorm (x, w, b), rmsnorm (x, w) */
    char x[64], wt[64], b[64];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_opnd(w, 1, wt, sizeof wt);
    norm_stats(w, rms, false);
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    if (rms) store_with(w, "%s * rstd * %s", x, wt, "");
    else store_with(w, "fmaf((%s - mean) * rstd, %s, %s)", x, wt, sn_cu_row_opnd(w, 2, b, sizeof b));
    sn_cu_row_close_pass(w);
}

/* (x, w, dy) -> rstd (g - mean g - xhat mean(g xhat)), g = dy w (rmsnorm: no mean g) */
static void norm_bwd(row *w, bool rms) {
    char x[64], wt[64], dy[64], h[160];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    sn_cu_row_opnd(w, 1, wt, sizeof wt);
    sn_cu_row_opnd(w, 2, dy, sizeof dy);
    snprintf(h, sizeof h, rms ? "%s * rstd" : "(%s - mean) * rstd", x);
    norm_stats(w, rms, false);
    E("float sg = 0.0f, sgx = 0.0f;");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_NONE);
    E("const float g = %s * %s;", dy, wt);
    if (!rms) E("sg += g;");
    E("sgx += g * (%s);", h);
    sn_cu_row_close_pass(w);
    if (rms) E("const float mg = 0.0f;");
    else E("const float mg = sn_block_sum(sg) / %lld.0f;", (long long)w->C);
    E("const float mgx = sn_block_sum(sgx) / %lld.0f;", (long long)w->C);
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    E("const float g = %s * %s;", dy, wt);
    store_with(w, "(g - mg - (%s) * mgx) * rstd", h, "", "");
    sn_cu_row_close_pass(w);
}

/* row r is query i = r % T of a (.., T, S) matrix: key j > i + S - T becomes the fill */
static void causal_mask(row *w) {
    const sn_node *x = w->n->in[0];
    char xs[64], f[32], val[160];
    sn_cu_row_opnd(w, 0, xs, sizeof xs);
    E("const int query = (int)(r %% %lld);", (long long)x->shape[x->rank - 2]);
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    snprintf(val, sizeof val, "j > query + %lld ? %s : %s", (long long)(w->C - x->shape[x->rank - 2]),
             sn_cu_float_lit(w->n->a.f, f, sizeof f), xs);
    store(w, val);
    sn_cu_row_close_pass(w);
}

/* (logits, targets, dloss) -> (softmax - onehot(t)) dloss / count for counted rows, 0 for
 * ignored rows and padded classes, NaN for a bad target. The passes that store cover the
 * whole row, padded classes included (whole vectors); the statistics only the real classes. */
static void cross_entropy_bwd(row *w) {
    char x[64], t[16], dl[64], val[160];
    sn_cu_row_opnd(w, 0, x, sizeof x);
    arg(w, w->buf[1], t, sizeof t);
    sn_cu_row_opnd(w, 2, dl, sizeof dl);
    int ign = w->n->a.ignore_index;
    bool padded = w->Vr < w->C;
    E("float counted = 0.0f; /* rows whose target is not %d, over the whole batch */", ign);
    E("for (%s q = threadIdx.x; q < %lld; q += %u) counted += %s[q] != %d ? 1.0f : 0.0f;", w->ix,
      (long long)w->R, w->threads, t, ign);
    E("const float count = sn_block_sum(counted);");
    E("const float scale = count > 0.0f ? %s / count : 0.0f;", dl);
    E("const int target = %s[r];", t);
    E("if (target != %d && target >= 0 && target < %lld) {", ign, (long long)w->Vr);
    E("float mx = -SN_INF;");
    sn_cu_row_open_pass(w, "threadIdx.x", w->Vr, w->threads, STORES_NONE);
    E("mx = fmaxf(mx, %s);", x);
    sn_cu_row_close_pass(w);
    E("mx = sn_block_max(mx);");
    E("float se = 0.0f;");
    sn_cu_row_open_pass(w, "threadIdx.x", w->Vr, w->threads, STORES_NONE);
    E("se += expf(%s - mx);", x);
    sn_cu_row_close_pass(w);
    E("const float k = scale / sn_block_sum(se);");
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    E("const float p = expf(%s - mx) * k;", x);
    snprintf(val, sizeof val, padded ? "j < %lld ? (j == target ? p - scale : p) : 0.0f"
                                     : "j == target ? p - scale : p", (long long)w->Vr);
    store(w, val);
    sn_cu_row_close_pass(w);
    E("} else {");
    E("const float fill = target == %d ? 0.0f : (SN_INF - SN_INF); /* NaN: a bad target */", ign);
    sn_cu_row_open_pass(w, "threadIdx.x", w->C, w->threads, STORES_ALL);
    snprintf(val, sizeof val, padded ? "j < %lld ? fill : 0.0f" : "fill", (long long)w->Vr);
    store(w, val);
    sn_cu_row_close_pass(w);
    E("}");
}

/* ---- the kernel ---- */

static sn_status not_pointwise(const sn_kernel *k, int i, sn_err *e) {
    const sn_node *n = k->instr[i].node;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: instruction %d is %s (%%%d), which "
                   "is not a pointwise op", k->name, i, sn_op_name(n->op), n->id);
}

/* Fills w from k; the checks of sn_cu_check_row. */
static sn_status setup(row *w, const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor, *x = n->in[0];
    *w = (row){.k = k, .n = n, .y = -1, .fused = k->n_instr > 0};
    if (!sn_row_facts_of(n->op))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: %s is not a row op the CUDA "
                       "backend knows", k->name, sn_op_name(n->op));
    w->C = x->rank ? x->shape[x->rank - 1] : 1;
    w->R = x->rank ? sn_numel(x) / w->C : 1;
    w->Vr = n->a.end > 0 && n->a.end < w->C ? n->a.end : w->C;
    w->ix = sn_cu_index_type(w->R * w->C + 1024 * 1024);
    w->lanes = sn_cu_row_lanes(k);
    sn_status st = sn_cu_check_dtype(k, n, e);
    if (st) return st;
    bool ce = n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_CROSS_ENTROPY_BWD;
    if (ce && n->in[1]->dtype != SN_I32)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: targets %%%d are %s; the CUDA "
                       "backend reads i32 targets", k->name, n->in[1]->id, sn_dtype_name(n->in[1]->dtype));
    if (n->op == SN_OP_CAUSAL_MASK && x->rank < 2)
        return sn_fail(e, SN_ERR_INVALID, "cuda: kernel %s: causal_mask needs a (.., T, S) input", k->name);
    for (int i = 0; i < 3; i++) w->buf[i] = -1;
    bool sums = sn_row_facts_of(n->op)->serial; /* over every row */
    if (sums != (k->stage == SN_SUM_PARTIAL))
        return sn_fail(e, SN_ERR_INVALID, "cuda: kernel %s: a row op that sums over every row, "
                       "and only it, runs as the PARTIAL and FINISH kernels of kernel.h", k->name);
    if (k->n_colsum && (!sums || ce || w->fused || k->n_colsum + 1 != k->n_out))
        return sn_fail(e, SN_ERR_INVALID, "cuda: kernel %s: column sums join only a norm weight "
                       "gradient without fused neighbours, as its outputs 1 .. n_out - 1", k->name);
    for (int o = 1; o <= k->n_colsum; o++) {
        const sn_node *src = k->args[k->colsum_src[o]];
        if (k->colsum_src[o] < k->n_out || k->colsum_src[o] >= k->n_out + k->n_in ||
            src->dtype != SN_F32 || k->args[o]->dtype != SN_F32 ||
            sn_numel(src) != w->R * sn_numel(k->args[o]))
            return sn_fail(e, SN_ERR_INVALID, "cuda: kernel %s: column sum %d must read an f32 "
                           "input of %lld rows of its %lld columns", k->name, o, (long long)w->R,
                           (long long)sn_numel(k->args[o]));
    }
    if (!w->fused) {
        for (int i = 0; i < n->n_in; i++)
            for (int a = k->n_out; a < k->n_out + k->n_in && w->buf[i] < 0; a++)
                if (k->args[a] == n->in[i]) w->buf[i] = a;
        for (int i = 0; i < n->n_in; i++) SN_ASSERT(w->buf[i] >= 0);
        w->y = 0;
        return SN_OK;
    }
    if (k->n_instr > (int)(sizeof w->dep / sizeof w->dep[0]))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: %d fused instructions; the CUDA "
                       "backend takes at most 64 around a row op", k->name, k->n_instr);
    SN_ASSERT(k->row_instr >= 0 && k->row_instr < k->n_instr && k->instr[k->row_instr].node == n);
    for (int i = 0; i < k->n_instr; i++) {
        const sn_pw_instr *in = &k->instr[i];
        if (i != k->row_instr) {
            if ((st = sn_cu_check_dtype(k, in->node, e))) return st;
            if (sn_op_kind(in->node->op) != SN_K_POINTWISE && !sn_pw_is_identity(in->node->op))
                return not_pointwise(k, i, e);
        }
        w->dep[i] = i == k->row_instr;
        for (int t = 0; t < in->n_in; t++)
            if (in->in[t].kind == SN_REF_INSTR) w->dep[i] = w->dep[i] || w->dep[in->in[t].index];
    }
    const sn_pw_instr *ri = &k->instr[k->row_instr];
    for (int t = 0; t < ri->n_in; t++)
        if (!sn_row_operand_per_element(n->op, t)) {
            SN_ASSERT(ri->in[t].kind == SN_REF_ACCESS); /* w, b, targets: their buffers */
            w->buf[t] = k->access[ri->in[t].index].arg;
        }
    for (int o = 0; o < k->n_out; o++) {
        int i = k->store[o];
        if (i == k->row_instr) w->y = o;
        if (w->dep[i] && i != k->row_instr && !sn_row_result_per_element(n->op))
            return sn_fail(e, SN_ERR_INVALID, "cuda: kernel %s: an epilogue after %s, whose result "
                           "is not one element per element of its input", k->name, sn_op_name(n->op));
        if (!w->dep[i] && n->op == SN_OP_CROSS_ENTROPY)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: cross_entropy reads only the "
                           "counted rows, so it cannot store the values of its prologue (%%%d)",
                           k->name, k->args[o]->id);
    }
    if (w->y < 0 && !sn_row_result_per_element(n->op))
        return sn_fail(e, SN_ERR_INVALID, "cuda: kernel %s: %s's result is not stored", k->name,
                       sn_op_name(n->op));
    return SN_OK;
}

sn_status sn_cu_check_row(const sn_kernel *k, sn_err *e) {
    row w;
    return k->stage == SN_SUM_FINISH ? sn_cu_row_check_finish(k, e) : setup(&w, k, e);
}

void sn_cu_emit_row(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    row w;
    sn_err e;
    if (k->stage == SN_SUM_FINISH) {
        sn_cu_row_finish(t, k, d, fname);
        return;
    }
    SN_ASSERT(setup(&w, k, &e) == SN_OK); /* the renderer checked it */
    w.t = t;
    w.threads = d->block[0];
    sn_cu_emit_signature(t, k, fname, (int)w.threads);
    sn_cu_emitf(t, "/* %s over %lld rows of %lld%s */", sn_op_name(k->anchor->op), (long long)w.R,
                (long long)w.C, k->stage ? ": partial sums, a warp per row" : "");
    if (k->stage == SN_SUM_PARTIAL) sn_cu_row_partial_open(&w);
    if (k->stage == SN_SUM_WHOLE) {
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
