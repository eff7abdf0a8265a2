/* cuda_row_pass.c: the passes over a row that every row kernel is written with (cuda_row.h):
 * operands, coordinates, loads, the prologue per element, stores. Where the row length divides by
 * 4 (f32) or 8 (a 16-bit buffer takes part), a pass takes `lanes` columns a step: each aligned
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

/* Short rows (at most 8 steps of 32 lanes: GPT-2's 768 channels take 3 in 16-bit vectors, 6 in
 * f32 ones) take a warp each, their statistics warp shuffles without a barrier: with a block per
 * row (96 threads at C = 768) the norms and their backwards were latency-bound, four block sums
 * of two barriers each a row (ncu, docs/gpu.md). The classifier's rows stay a block each. */
bool sn_cu_row_warp_per_row(const sn_kernel *k) {
    if (k->kind != SN_KER_ROW || k->stage != SN_SUM_WHOLE || k->anchor2 ||
        k->anchor->op == SN_OP_CROSS_ENTROPY_BWD)
        return false;
    return row_length(k) <= 32LL * sn_cu_row_lanes(k) * 8;
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
    return sn_cu_operand(w->k, &w->k->instr[w->k->row.instr].in[i], "", b, len);
}

/* Whether access a is read per element: by an instruction, or as a per-element operand of the
 * row op (w, b and targets are read from their buffers directly). */
static bool access_used(const row *w, int a) {
    const sn_kernel *k = w->k;
    for (int i = 0; i < k->n_instr; i++)
        for (int t = 0; t < k->instr[i].n_in; t++) {
            const sn_ref *r = &k->instr[i].in[t];
            if (r->kind == SN_REF_ACCESS && r->index == a &&
                (i != k->row.instr || sn_row_operand_per_element(w->n->op, t)))
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

/* The outputs a pass stores (STORES_*, cuda_row.h). */
static unsigned stored_outputs(const row *w, int stores) {
    unsigned m = 0;
    for (int o = w->out0; o < w->k->n_out; o++)
        if (stores == STORES_ALL || (stores == STORES_PROLOGUE && w->fused && !w->dep[w->k->store[o]]))
            m |= 1u << o;
    return stores == STORES_ALL && !w->fused ? 1u : m;
}

/* ---- the row kept in registers (cuda_row.h: sn_cu_row_cache_begin) ---- */

/* Whether operand i's value is a bf16 value as loaded: read from a bf16 buffer, directly or
 * through the cast that widens it (kept two to a register: what the row's load brought in;
 * a value rounded to bf16 from an f32 load is kept whole, its loads twice as many registers). */
static bool loaded_bf16(const row *w, int i) {
    const sn_kernel *k = w->k;
    if (w->buf[i] >= 0) return k->args[w->buf[i]]->dtype == SN_BF16;
    const sn_ref *r = &k->instr[k->row.instr].in[i];
    if (r->kind == SN_REF_INSTR) {
        const sn_pw_instr *in = &k->instr[r->index];
        if (in->node->op != SN_OP_CAST || in->node->in[0]->dtype != SN_BF16 ||
            (in->node->dtype != SN_F32 && in->node->dtype != SN_BF16)) /* exact: the bits kept */
            return false;
        r = &in->in[0];
    }
    return r->kind == SN_REF_ACCESS && k->args[k->access[r->index].arg]->dtype == SN_BF16;
}

/* Registers a thread may spend on the cache, from ptxas's reports on the GPT-2 and LLaMA
 * models' steps at sm_75, sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120 (no spills):
 *   1024 threads (the classifier): 64 a thread at most, about 36 for the rest on sm_80 to
 *     sm_90 (GPT-2's keeping 28 takes 61 on sm_90), 44 on sm_75 (it spilled 24 bytes) and
 *     from sm_100 on (GPT-2's 28 spilled 20 bytes on sm_100, 60 on sm_120: its row is not
 *     kept there), and a vector's more for each output after the first (the f32 logits a
 *     program keeps as an output: 12 bytes spilled on sm_80);
 *   the norm backward pair (2 blocks an SM: 128): 36 on sm_90 (GPT-2's x f32 and dy bf16 take
 *     127; Qwen2.5's 48 spilled 24 bytes), none on sm_80 and sm_75 (36 spilled 16 bytes);
 *   other rows (3 blocks of 256 an SM: 85): 48 on sm_90, 32 on sm_80 and sm_75. */
static int cache_budget(const row *w) {
    if (w->threads > 256) {
        int rest = w->sm >= 80 && w->sm < 100 ? 36 : 44;
        int most = 65536 / (int)w->threads - rest - w->lanes * (w->k->n_out - 1);
        return most < 32 ? most : 32;
    }
    if (w->k->row.pair) return w->sm >= 90 ? 36 : 0;
    return w->sm >= 90 ? 48 : 32;
}

/* The cache slot holding `var`, or -1. */
static int kept(const row *w, const char *var) {
    for (int c = 0; c < w->n_cache; c++)
        if (!strcmp(w->cache_var[c], var)) return c;
    return -1;
}

/* The row ops whose passes read their row again, the only ones that call
 * sn_cu_row_cache_begin (the norm backward pair's row op is its dx, a norm backward). */
static bool keeps_row(sn_op op) {
    static const sn_op ops[] = {SN_OP_SOFTMAX, SN_OP_SOFTMAX_BWD, SN_OP_LAYERNORM, SN_OP_RMSNORM,
                                SN_OP_LAYERNORM_BWD, SN_OP_RMSNORM_BWD, SN_OP_CROSS_ENTROPY_BWD};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (op == ops[i]) return true;
    return false;
}

/* What the cache keeps: w->cache_var, cache_half and n_cache; returns the steps and *regs. */
static int64_t cache_plan(row *w, int *regs_out) {
    w->n_cache = 0;
    w->cache_filled = false;
    *regs_out = 0;
    if (!w->cache_allowed || w->lanes == 1) return 0; /* single columns: steps vary by thread */
    int64_t per_step = (int64_t)w->lanes * w->stride, steps = (w->C + per_step - 1) / per_step;
    if (steps > SN_ROW_CACHE_STEPS && w->stride == 32) return 0; /* a warp's row (cuda_row.h) */
    int regs = 0;
    for (int i = 0; i < w->n->n_in && i < 3; i++) {
        int kind = operand_kind(w, i);
        if (!sn_row_operand_per_element(w->n->op, i) || (kind != OP_ELEMENT && kind != OP_COMPUTED))
            continue;
        if (kind == OP_COMPUTED && w->k->instr[w->k->row.instr].in[i].kind == SN_REF_CONST) continue;
        char var[48];
        sn_cu_row_opnd(w, i, var, sizeof var);
        if (kept(w, var) >= 0) continue; /* two operands, one value */
        bool half = loaded_bf16(w, i);
        snprintf(w->cache_var[w->n_cache], sizeof w->cache_var[0], "%s", var);
        w->cache_half[w->n_cache++] = half;
        regs += (int)(steps * w->lanes / (half ? 2 : 1));
    }
    if (regs > cache_budget(w)) w->n_cache = 0; /* all of them or none (see cuda_row.h) */
    *regs_out = regs;
    return steps;
}

bool sn_cu_row_cache_planned(row *w) {
    int regs;
    bool planned = keeps_row(w->n->op) && (cache_plan(w, &regs), w->n_cache > 0);
    w->n_cache = 0;
    return planned;
}

void sn_cu_row_cache_begin(row *w) {
    SN_ASSERT(!w->cache_steps && !w->vec && keeps_row(w->n->op)); /* as planned */
    int regs;
    int64_t steps = cache_plan(w, &regs);
    if (!w->n_cache) return;
    w->cache_steps = (int)steps;
    E("/* the row's values kept in registers: %lld steps of %d columns (%d registers) */",
      (long long)steps, w->lanes, regs);
    for (int c = 0; c < w->n_cache; c++) /* zeros: columns past the filling pass's end */
        E(w->cache_half[c] ? "unsigned rc%d[%lld] = {0}; /* %s, two bf16 a word */"
                           : "float rc%d[%lld] = {0}; /* %s */",
          c, (long long)(steps * w->lanes / (w->cache_half[c] ? 2 : 1)), w->cache_var[c]);
}

void sn_cu_row_cache_end(row *w) {
    SN_ASSERT(!w->vec);
    w->cache_steps = w->n_cache = 0;
    w->cache_filled = false;
}

/* In a pass reading the cache that stores `stores`: the instructions and accesses it still
 * needs (w->live_*): from the outputs it stores and the epilogue, back through the prologue,
 * stopping at kept values and the row op (whose per-element operands are all kept). What
 * feeds only the cache is not emitted: a GPU's compiler drops it, the simulator's might not. */
static void prune(row *w, int stores) {
    const sn_kernel *k = w->k;
    bool want[SN_KER_MAX_INSTR] = {0};
    char var[48];
    memset(w->live_instr, 0, sizeof w->live_instr);
    w->live_access = 0;
    SN_ASSERT(k->n_access <= 64 && k->n_instr <= SN_KER_MAX_INSTR);
    unsigned out = stores == STORES_NONE ? 0 : stored_outputs(w, stores);
    for (int o = 0; w->fused && o < k->n_out; o++)
        if (out & (1u << o)) want[k->store[o]] = true;
    for (int i = 0; w->fused && stores == STORES_ALL && i < k->n_instr; i++) want[i] = want[i] || w->dep[i];
    for (int i = w->fused ? k->n_instr - 1 : -1; i >= 0; i--) { /* operands come before */
        if (!want[i] || i == k->row.instr || (!w->dep[i] && kept(w, sn_cu_var_name(k, i, "", var, sizeof var)) >= 0))
            continue;
        w->live_instr[i] = true;
        for (int t = 0; t < k->instr[i].n_in; t++) {
            const sn_ref *r = &k->instr[i].in[t];
            if (r->kind == SN_REF_INSTR) want[r->index] = true;
            snprintf(var, sizeof var, "x%d", r->index);
            if (r->kind == SN_REF_ACCESS && kept(w, var) < 0) w->live_access |= 1ull << r->index;
        }
    }
}

/* Whether a pass emits access a (in one reading the cache: only what it still needs). */
static bool access_emitted(const row *w, int a) {
    return w->pass_cache != CACHE_USE || (w->live_access >> a & 1);
}

/* In a pass that reads the cache: `var` defined from it if kept (true), else nothing. */
static bool cache_read(row *w, const char *var) {
    int c = w->pass_cache == CACHE_USE ? kept(w, var) : -1;
    if (c < 0) return false;
    if (w->cache_half[c])
        E("const float %s = __uint_as_float(l %% 2 ? rc%d[cs * %d + l / 2] & 0xffff0000u : "
          "rc%d[cs * %d + l / 2] << 16);", var, c, w->lanes / 2, c, w->lanes / 2);
    else
        E("const float %s = rc%d[cs * %d + l];", var, c, w->lanes);
    return true;
}

/* In the pass that fills it: every kept variable into the cache (after the element block). */
static void cache_write(row *w) {
    for (int c = 0; c < w->n_cache; c++) {
        const char *v = w->cache_var[c];
        if (w->cache_half[c]) {
            E("if (l %% 2 == 0) rc%d[cs * %d + l / 2] = __float_as_uint(%s) >> 16;", c, w->lanes / 2, v);
            E("else rc%d[cs * %d + l / 2] |= __float_as_uint(%s) & 0xffff0000u;", c, w->lanes / 2, v);
        } else {
            E("rc%d[cs * %d + l] = %s;", c, w->lanes, v);
        }
    }
}

/* Before a vector step's lane loop, with j0 (its first column) defined: the vector loads of
 * the accesses and operand buffers that take them, into <name>_v[lanes]. */
void sn_cu_row_vector_loads(row *w) {
    const sn_kernel *k = w->k;
    char an[16], fn[16], cond[128];
    for (int a = 0; w->fused && a < k->n_access; a++) {
        const sn_access *x = &k->access[a];
        if (!access_used(w, a) || !access_vector(w, x) || !access_emitted(w, a)) continue;
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
        char var[16];
        snprintf(var, sizeof var, "op%d", i);
        if ((kind != OP_ELEMENT && kind != OP_COLUMN) || !vector_type(w, w->k->args[w->buf[i]]->dtype) ||
            (w->pass_cache == CACHE_USE && kept(w, var) >= 0))
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
    char an[16], cond[128], var[48];
    for (int a = 0; w->fused && a < k->n_access; a++) {
        const sn_access *x = &k->access[a];
        if (!access_used(w, a)) continue;
        snprintf(var, sizeof var, "x%d", a);
        if (cache_read(w, var) || !access_emitted(w, a)) continue;
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
        snprintf(var, sizeof var, "op%d", i);
        if (cache_read(w, var)) continue;
        if (w->vec && vector_type(w, w->k->args[w->buf[i]]->dtype)) E("const float op%d = op%d_v[l];", i, i);
        else E("const float op%d = sn_load(%s[%sj]);", i, arg(w, w->buf[i], an, sizeof an),
               kind == OP_ELEMENT ? "row + " : "");
    }
    for (int i = 0; w->fused && i < k->n_instr; i++)
        if (!w->dep[i] && !cache_read(w, sn_cu_var_name(k, i, "", var, sizeof var)) &&
            (w->pass_cache != CACHE_USE || w->live_instr[i]))
            sn_cu_emit_instr(w->t, k, i, "");
    if (w->pass_cache == CACHE_FILL) cache_write(w);
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

/* Stores the outputs that do not depend on the row op at element (r, j). */
void sn_cu_row_store_prologue(row *w) {
    char v[48];
    for (int o = 0; w->fused && o < w->k->n_out; o++)
        if (!w->dep[w->k->store[o]]) put(w, o, sn_cu_var_name(w->k, w->k->store[o], "", v, sizeof v));
}

/* In an element block: the row op's result at (r, j) is `val`; the epilogue follows it and
 * every output is stored. */
void sn_cu_row_store(row *w, const char *val) {
    const sn_kernel *k = w->k;
    char v[48];
    const char *name = w->fused ? sn_cu_var_name(k, k->row.instr, "", v, sizeof v) : "y";
    E(w->n->dtype == SN_BF16 ? "const float %s = sn_round_bf16(%s);"
      : w->n->dtype == SN_F16 ? "const float %s = sn_round_f16(%s);" : "const float %s = %s;", name, val);
    if (!w->fused) {
        put(w, 0, "y");
        return;
    }
    for (int i = 0; i < k->n_instr; i++)
        if (w->dep[i] && i != k->row.instr) sn_cu_emit_instr(w->t, k, i, "");
    for (int o = w->out0; o < k->n_out; o++) put(w, o, sn_cu_var_name(k, k->store[o], "", v, sizeof v));
}

int64_t sn_cu_row_whole_steps(const row *w, int64_t end) {
    return end / ((int64_t)w->lanes * w->stride);
}

/* The cache's unrolled steps over columns [0, end) from w->first_step: step s's first column
 * j0, tested against the end only in the steps that can pass it (w->pass_guard: a brace to
 * close). */
static void open_steps(row *w, int64_t end) {
    int64_t per_step = (int64_t)w->lanes * w->stride, whole = sn_cu_row_whole_steps(w, end);
    E("#pragma unroll");
    E("for (int cs = %d; cs < %d; cs++) {", w->first_step, w->cache_steps);
    E("const int j0 = %d * %s + %lld * cs;", w->lanes, w->first, (long long)per_step);
    w->pass_guard = whole < w->cache_steps;
    if (w->pass_guard) E("if (cs < %lld || j0 < %lld) {", (long long)whole, (long long)end);
}

/* Before the first pass that reads the cache: the row's accesses loaded, every step's loads
 * before any use of them (one block of straight code), and the kept values into rc<c>[]. The
 * whole row, padded classes included (whole vectors, inside the buffer). */
static void cache_fill(row *w) {
    E("/* the row loaded once, %d steps of %d columns: its values into the registers */",
      w->cache_steps, w->lanes);
    open_steps(w, w->C);
    sn_cu_row_vector_loads(w);
    E("#pragma unroll");
    E("for (int l = 0; l < %d; l++) {", w->lanes);
    E("const int j = j0 + l;");
    w->vec = true;
    w->pass_cache = CACHE_FILL;
    sn_cu_row_element(w);
    w->vec = false;
    w->pass_cache = CACHE_NONE;
    E("}");
    if (w->pass_guard) E("}");
    E("}");
    w->pass_guard = false;
    w->cache_filled = true;
}

void sn_cu_row_cache_fill(row *w) {
    if (w->cache_steps && !w->cache_filled) cache_fill(w);
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
    if (w->cache_steps) { /* the steps unrolled: a step's values in registers of their own */
        SN_ASSERT(!strcmp(first, w->first) && threads == w->stride && end <= w->C);
        if (!w->cache_filled) cache_fill(w);
        w->pass_cache = CACHE_USE;
        prune(w, stores);
        E("/* %d columns a step */", w->lanes);
        E("/* %d steps, the row's values from the registers */", w->cache_steps);
        open_steps(w, end);
    } else {
        E("/* %d columns a step */", w->lanes);
        E("for (int j0 = %d * %s; j0 < %lld; j0 += %u) {", w->lanes, first, (long long)end,
          w->lanes * threads);
    }
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
    /* kept in every step: "cs >= whole && j >= end" let ptxas schedule the classifier's
     * steps into 36 bytes of spills at its 64 registers (sm_90, 2026-11-29) */
    if (end % w->lanes) E("if (j >= %lld) break;", (long long)end);
    w->vec = true;
    sn_cu_row_element(w);
}

void sn_cu_row_close_lanes(row *w) {
    SN_ASSERT(w->vec && !w->lanes_closed && w->declared == 0); /* a pass that stores nothing */
    E("}");
    w->lanes_closed = true;
}

void sn_cu_row_close_pass(row *w) {
    if (!w->lanes_closed) E("}");
    w->lanes_closed = false;
    if (!w->vec) return;
    char a[16], fn[16];
    SN_ASSERT(w->pending == w->declared); /* open_pass was told what the pass stores */
    for (int o = 0; o < w->k->n_out; o++)
        if (w->declared & (1u << o))
            E("%s(&%s[row + j0], %s_v);", vfn(w, "store", fn, sizeof fn), arg(w, o, a, sizeof a), a);
    if (w->pass_guard) E("}");
    E("}");
    w->vec = false;
    w->declared = w->pending = 0;
    w->pass_cache = CACHE_NONE;
    w->pass_guard = false;
    w->first_step = 0;
}

bool sn_cu_row_cache_max(row *w, const char *x, int64_t end, const char *mx) {
    if (!w->cache_steps || w->lanes % 2) return false;
    if (!w->cache_filled) cache_fill(w);
    int c = kept(w, x);
    int64_t whole = sn_cu_row_whole_steps(w, end);
    if (c < 0 || !w->cache_half[c] || whole < 1) return false;
    E("/* the max of the steps before column %lld, two columns at a time on the kept bf16 pairs */",
      (long long)end);
    E("{");
    E("unsigned m2 = 0xff80ff80u; /* -inf, -inf */");
    E("#pragma unroll");
    E("for (int u = 0; u < %lld; u++) m2 = sn_bf16x2_max(m2, rc%d[u]);",
      (long long)(whole * w->lanes / 2), c);
    E("%s = fmaxf(%s, fmaxf(__uint_as_float(m2 << 16), __uint_as_float(m2 & 0xffff0000u)));", mx, mx);
    E("}");
    w->first_step = (int)whole;
    return true;
}

/* ---- the next row prefetched into shared memory (cuda_row.h: sn_cu_row_prefetch_plan) ---- */

/* The buffer whose stored bf16 bits are operand i's values in row order (r * C + j), or -1: a
 * buffer operand read per element, or an access with rows contiguous, unmasked, at offset 0,
 * read directly or through its exact widening to f32. */
static int stored_bits(const row *w, int i) {
    const sn_kernel *k = w->k;
    if (w->buf[i] >= 0)
        return operand_kind(w, i) == OP_ELEMENT && k->args[w->buf[i]]->dtype == SN_BF16 ? w->buf[i] : -1;
    const sn_ref *r = &k->instr[k->row.instr].in[i];
    if (r->kind == SN_REF_INSTR) {
        const sn_pw_instr *in = &k->instr[r->index];
        if (in->node->op != SN_OP_CAST || in->node->in[0]->dtype != SN_BF16 || in->node->dtype != SN_F32)
            return -1;
        r = &in->in[0];
    }
    if (r->kind != SN_REF_ACCESS) return -1;
    const sn_access *x = &k->access[r->index];
    if (k->args[x->arg]->dtype != SN_BF16 || x->masked || x->offset) return -1;
    int64_t inner = 1;
    for (int d = k->rank - 1; d >= 0; d--) { /* strides as a contiguous (.., C) array's */
        if (k->shape[d] > 1 && x->stride[d] != inner) return -1;
        inner *= k->shape[d];
    }
    return x->arg;
}

bool sn_cu_row_prefetch_plan(row *w) {
    w->prefetch = false;
    w->pf_arg = -1;
    if (!w->prefetch_allowed || w->n->op != SN_OP_CROSS_ENTROPY_BWD || w->sm < 80 /* cp.async */ ||
        w->k->tail || w->lanes != 8 || w->stride != w->threads || strcmp(w->first, "threadIdx.x"))
        return false;
    int regs;
    cache_plan(w, &regs);
    bool one = w->n_cache == 1 && w->cache_half[0];
    w->n_cache = 0;
    if (!one) return false;
    for (int i = 0; i < w->n->n_in && i < 3 && w->pf_arg < 0; i++) { /* the kept operand */
        if (!sn_row_operand_per_element(w->n->op, i)) continue;
        w->pf_arg = stored_bits(w, i);
        if (w->pf_arg < 0) return false;
    }
    /* the row, and 512 bytes for the block sums' static arrays (272 at 1024 threads in ptxas's
       report; the driver's 1 KiB a block is outside shared_max, the most a block may opt into):
       gpt2's 50,304 columns fit the 99 KiB of sm_86, sm_89 and sm_120 with 256 bytes to spare */
    if (w->pf_arg < 0 || 2 * w->C + 512 > w->shared_max) return false;
    return w->prefetch = true;
}

/* The unrolled steps of a thread's 16-byte chunks of the row (8 bf16 each, the block's threads
 * side by side), j0 the chunk's first column; *in_row gets the test that the chunk is in the
 * row (folded away in the steps wholly inside it). */
static void open_chunks(row *w, int steps, char *in_row, size_t len) {
    int64_t per_step = 8LL * w->threads;
    E("#pragma unroll");
    E("for (int cs = 0; cs < %d; cs++) {", steps);
    E("const int j0 = 8 * threadIdx.x + %lld * cs;", (long long)per_step);
    snprintf(in_row, len, "cs < %lld || j0 < %lld", (long long)(w->C / per_step), (long long)w->C);
}

void sn_cu_row_prefetch_issue(row *w, const char *r) {
    char a[16], in_row[64];
    int steps = (int)((w->C + 8LL * w->threads - 1) / (8LL * w->threads));
    E("/* row %s's kept values into next_row: %d steps of 16 bytes a thread */", r, steps);
    E("{");
    E("const %s *src = %s + (%s)(%s) * %lld;", sn_cu_ctype(SN_BF16), arg(w, w->pf_arg, a, sizeof a),
      w->ix, r, (long long)w->C);
    open_chunks(w, steps, in_row, sizeof in_row);
    E("if (%s) sn_cp_async_16(&next_row[j0 / 8], src + j0);", in_row);
    E("}");
    E("sn_cp_async_commit();");
    E("}");
}

void sn_cu_row_cache_fill_shared(row *w) {
    SN_ASSERT(w->prefetch && w->cache_steps && w->n_cache == 1 && w->cache_half[0] && !w->cache_filled);
    char in_row[64];
    E("/* the row from next_row (copied there while the last row was worked on); each thread");
    E(" * reads back the chunks it copied itself: its own copies waited for, no barrier */");
    E("sn_cp_async_wait_all();");
    open_chunks(w, w->cache_steps, in_row, sizeof in_row);
    E("const uint4 v = %s ? next_row[j0 / 8] : make_uint4(0u, 0u, 0u, 0u);", in_row);
    E("rc0[cs * 4] = v.x;");
    E("rc0[cs * 4 + 1] = v.y;");
    E("rc0[cs * 4 + 2] = v.z;");
    E("rc0[cs * 4 + 3] = v.w;");
    E("}");
    E("__syncthreads(); /* the reads done before the next copy overwrites them */");
    w->cache_filled = true;
}
