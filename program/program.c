/* program.c: the compiled program's printout (its parameter layout's too) and its release, and
 * what kernel.h says of row ops (one table pinned to the op count) and of a kernel's work split
 * (sn_kernel_work, shared by fuse and the code generators); the program's passes are
 * passes/fuse.c and memplan.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"

int sn_value_root(const sn_program *p, int v) {
    while (p->values[v].alias >= 0) v = p->values[v].alias;
    return v;
}

const char *sn_epilogue_name(sn_epilogue e) {
    static const char *names[] = {"none", "bias", "gelu_bias", "gelu_aux_bias", "dgelu"};
    _Static_assert(sizeof names / sizeof *names == SN_EPI_COUNT, "a name per epilogue");
    return e >= 0 && e < SN_EPI_COUNT ? names[e] : "?";
}

const char *sn_kernel_kind_name(sn_kernel_kind k) {
    static const char *names[] = {"pointwise", "row", "reduce", "gemm", "attention", "gather", "dequant", "gemv",
                                  "thin", "grad_acc", "sqnorm", "clip", "adamw"};
    _Static_assert(sizeof names / sizeof names[0] == SN_KER_KIND_COUNT, "a kernel kind without a name");
    SN_ASSERT((unsigned)k < SN_KER_KIND_COUNT);
    return names[k];
}

sn_gemv sn_gemv_of(const sn_kernel *k) {
    SN_ASSERT(k->kind == SN_KER_GEMV);
    const sn_node *mm = k->anchor, *w = mm->in[1];
    sn_gemv g = {.tb = mm->a.tb, .source = w->op == SN_OP_DEQUANT_NF4 ? SN_GEMV_NF4 : SN_GEMV_W16};
    g.K = w->shape[g.tb ? 1 : 0];
    g.N = w->shape[g.tb ? 0 : 1];
    g.M = sn_numel(mm->in[0]) / g.K;
    g.wt = g.source == SN_GEMV_NF4 ? w->dtype : w->in[0]->dtype;
    return g;
}

const char *sn_gemv_name(const sn_kernel *k) {
    sn_gemv g = sn_gemv_of(k);
    return g.source == SN_GEMV_NF4 ? (g.tb ? "nf4_gemv_t" : "nf4_gemv")
                                   : (g.tb ? "w16_gemv_t" : "w16_gemv");
}

static int64_t cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The sum form's plan (kernel.h): x stored (M, K), W (M, N), y (K, N). */
static sn_thin sum_plan(const sn_node *mm) {
    const sn_node *x = mm->in[0];
    sn_thin t = {.sum = true, .P = 1, .groups = 1, .cblocks = 1, .parts = 1};
    t.M = x->shape[0];
    t.K = x->rank == 2 ? x->shape[1] : 0;
    t.N = mm->shape[mm->rank - 1];
    t.left = t.K <= SN_THIN_MAX && t.K <= t.N;
    int64_t few = t.left ? t.K : t.N, wide = t.left ? t.N : t.K;
    while (t.P < few && t.P < 128) t.P *= 2;
    t.kpl = t.P <= 8 ? 8 : t.P <= 64 ? 64 / t.P : 1;
    int64_t total = cdiv64(wide, 32 * (int64_t)t.kpl); /* warps over the wide columns */
    t.cblocks = total > 0 ? cdiv64(total, SN_THIN_SUM_WARPS) : 1;
    t.warps = (int)(total > 0 ? cdiv64(total, t.cblocks) : 1);
    t.groups = t.warps <= SN_THIN_SUM_WARPS / 2 ? SN_THIN_SUM_WARPS / t.warps : 1;
    int64_t S = cdiv64(SN_THIN_SUM_BLOCKS, t.cblocks);
    int64_t most = cdiv64(t.M, (int64_t)t.groups * SN_THIN_SUM_MIN_ROWS); /* 16 rows a group */
    if (S > most) S = most;
    if (S < 1) S = 1;
    t.rows = cdiv64(t.M, S);
    t.parts = t.rows > 0 ? cdiv64(t.M, t.rows) : 1;
    return t;
}

sn_thin sn_thin_plan(const sn_node *mm) {
    SN_ASSERT(mm->op == SN_OP_MATMUL);
    if (mm->a.ta) return sum_plan(mm);
    const sn_node *x = mm->in[0];
    sn_thin t = {.tb = mm->a.tb, .P = 1, .groups = 1, .cblocks = 1, .parts = 1};
    t.K = x->shape[x->rank - 1];
    t.N = mm->shape[mm->rank - 1];
    t.M = t.K > 0 ? sn_numel(x) / t.K : 0;
    t.rank = t.N > SN_THIN_MAX; /* the few is K */
    int64_t few = t.rank ? t.K : t.N, wide = t.rank ? t.N : t.K;
    while (t.P < few && t.P < 128) t.P *= 2;
    t.kpl = t.P <= 8 ? 8 : t.P <= 64 ? 64 / t.P : 1; /* W's kpl P weights a lane in registers */
    int64_t per_warp = 32 * (int64_t)t.kpl;
    t.warps = (int)((wide + per_warp - 1) / per_warp);
    t.rows = 32; /* a block's rows: at least 1024 blocks where 4 rows a block allow */
    while (t.rows > 4 && (t.M + t.rows - 1) / t.rows < 1024) t.rows /= 2;
    return t;
}

sn_thin sn_thin_of(const sn_kernel *k) {
    SN_ASSERT(k->kind == SN_KER_THIN);
    return sn_thin_plan(k->anchor);
}

bool sn_thin_shape_fits(const sn_node *mm) {
    if (mm->op != SN_OP_MATMUL || mm->dtype != SN_F32) return false;
    const sn_node *x = mm->in[0], *w = mm->in[1];
    if (w->rank != 2 || x->rank < 2 || x == w || x->dtype != w->dtype ||
        (x->dtype != SN_F32 && x->dtype != SN_BF16 && x->dtype != SN_F16))
        return false;
    sn_thin t = sn_thin_plan(mm);
    if (mm->a.ta) { /* the sum form: x (M, K), W (M, N), y (K, N), K or N few */
        int64_t few = t.left ? t.K : t.N, wide = t.left ? t.N : t.K;
        return x->rank == 2 && !mm->a.tb && w->shape[0] == t.M && w->shape[1] == t.N &&
               mm->rank == 2 && mm->shape[0] == t.K && few >= 1 && few <= SN_THIN_MAX &&
               wide % t.kpl == 0 && t.M >= SN_THIN_MIN_M && t.parts >= 2;
    }
    int64_t few = t.rank ? t.K : t.N, wide = t.rank ? t.N : t.K;
    return few >= 1 && few <= SN_THIN_MAX && wide % t.kpl == 0 && t.warps <= SN_THIN_MAX_WARPS &&
           t.M >= SN_THIN_MIN_M && w->shape[t.tb ? 1 : 0] == t.K && w->shape[t.tb ? 0 : 1] == t.N;
}

/* The row ops (ops.h kind SN_K_ROW), their facts (kernel.h). A new op: if it is a row op, give
 * it a line here (row_facts_complete checks that every SN_K_ROW op has one), then move the
 * count below. */
_Static_assert(SN_OP_COUNT == 54, "a new op: if it is a row op, add its row facts to this table");
enum { EL0 = 1 << 0, EL1 = 1 << 1, EL2 = 1 << 2 };
static const sn_row_facts row_facts[SN_OP_COUNT] = {
    /*                      per_element  per_row  result/el  serial  whole rows */
    [SN_OP_SOFTMAX]           = {EL0,        0,       true,      false,  true},
    [SN_OP_SOFTMAX_BWD]       = {EL0 | EL1,  0,       true,      false,  true},  /* (y, dy) */
    [SN_OP_LAYERNORM]         = {EL0,        0,       true,      false,  true},  /* (x, w, b) */
    [SN_OP_LAYERNORM_BWD]     = {EL0 | EL2,  0,       true,      false,  true},  /* (x, w, dy) */
    [SN_OP_LAYERNORM_BWD_W]   = {EL0 | EL1,  0,       false,     true,   true},  /* (x, dy) */
    [SN_OP_RMSNORM]           = {EL0,        0,       true,      false,  true},  /* (x, w) */
    [SN_OP_RMSNORM_BWD]       = {EL0 | EL2,  0,       true,      false,  true},
    [SN_OP_RMSNORM_BWD_W]     = {EL0 | EL1,  0,       false,     true,   true},
    [SN_OP_CAUSAL_MASK]       = {EL0,        0,       true,      false,  true},
    [SN_OP_CROSS_ENTROPY]     = {EL0,        EL1,     false,     true,   false}, /* (logits, targets) */
    [SN_OP_CROSS_ENTROPY_BWD] = {EL0,        EL1,     true,      false,  false}, /* (.., dloss) */
};

const sn_row_facts *sn_row_facts_of(sn_op op) {
    SN_ASSERT((unsigned)op < SN_OP_COUNT);
    if (sn_op_kind(op) != SN_K_ROW) return NULL;
    const sn_row_facts *f = &row_facts[op];
    SN_ASSERT(f->per_element); /* a row op without its line in row_facts */
    return f;
}

sn_kernel sn_optim_kernel(sn_kernel_kind kind, int64_t flat_n, int64_t flat_decay, sn_dtype low,
                          const char *name) {
    sn_kernel k = {.kind = kind, .opt = {.flat_n = flat_n, .flat_decay = flat_decay,
                                         .flat_low = kind == SN_KER_ADAMW ? low : SN_F32}};
    snprintf(k.name, sizeof k.name, "%s", name);
    sn_kernel_work(&k, &k.n_items, &k.serial);
    return k;
}

int sn_kernel_n_bufs(const sn_kernel *k) {
    switch (k->kind) {
    case SN_KER_GRAD_ACC: case SN_KER_CLIP: return 2;
    case SN_KER_SQNORM: return 3;
    case SN_KER_ADAMW: return k->opt.flat_low == SN_F32 ? 5 : 6;
    default: /* a joined FINISH's buffers follow (kernel.h: tail) */
        return k->n_out + k->n_in + (k->stage != SN_SUM_WHOLE) + (k->tail ? sn_kernel_n_bufs(k->tail) : 0);
    }
}

bool sn_row_operand_per_element(sn_op op, int i) {
    const sn_row_facts *f = sn_row_facts_of(op);
    return f && (f->per_element >> i & 1);
}

bool sn_row_result_per_element(sn_op op) {
    const sn_row_facts *f = sn_row_facts_of(op);
    return f && f->result_per_element;
}

/* The column sums of k (a ROW kernel's part; none for the other kinds). */
static int colsums(const sn_kernel *k) { return k->kind == SN_KER_ROW ? k->row.n_colsum : 0; }

static int64_t rows_of(const sn_node *x) { return x->rank ? sn_numel(x) / x->shape[x->rank - 1] : 1; }

void sn_kernel_work(const sn_kernel *k, int64_t *n_items, bool *serial) {
    const sn_node *a = k->anchor;
    *serial = false;
    switch (k->kind) {
    case SN_KER_POINTWISE: *n_items = sn_shape_numel(k->rank, k->shape); return;
    case SN_KER_ROW:
        if (k->stage == SN_SUM_PARTIAL) { /* per chunk: the anchor, then the column sums' tiles
                                             (the norm backward pair: all in one item) */
            *n_items = sn_sum_chunks(k) * (k->row.pair ? 1 : 1 + sn_colsum_tiles(k));
            return;
        }
        if (k->stage == SN_SUM_FINISH) {
            *n_items = (sn_sum_width(k) + SN_SUM_FINISH_COLS - 1) / SN_SUM_FINISH_COLS;
            return;
        }
        if (colsums(k) > 0) { /* the anchor, then the column sums' tiles */
            *n_items = 1 + sn_colsum_tiles(k);
            return;
        }
        *n_items = rows_of(a->in[0]);
        *serial = sn_row_facts_of(a->op) && sn_row_facts_of(a->op)->serial;
        return;
    case SN_KER_REDUCE: *n_items = sn_numel(a); return;
    case SN_KER_GATHER: /* embedding: one item per id; its backward: column blocks of 64, its
                           BUCKET stage chunks of ids */
        *n_items = a->op == SN_OP_EMBEDDING ? sn_numel(a->in[1])
                   : k->stage == SN_GATHER_BUCKET ? sn_gather_chunks(k)
                   : (a->shape[a->rank - 1] + 63) / 64;
        return;
    case SN_KER_ATTENTION: { /* q's (batch x head) slices; dk and dv: k's (grouped-query
                                attention: fewer), each summing its group of query heads, or
                                in parts q's (kernel.h) */
        bool by_kv = (a->op == SN_OP_ATTENTION_BWD_K || a->op == SN_OP_ATTENTION_BWD_V) &&
                     !(k->dkv_parts && k->stage == SN_SUM_PARTIAL);
        const sn_node *x = by_kv ? a->in[1] : a->in[0];
        *n_items = x->rank >= 2 ? sn_shape_numel(x->rank - 2, x->shape) : 1;
        if (k->stage == SN_SUM_WHOLE && a->op != SN_OP_ATTENTION_CACHE && x->rank >= 2)
            *n_items *= (x->shape[x->rank - 2] + SN_ATT_ROW_CHUNK - 1) / SN_ATT_ROW_CHUNK; /* rows */
        if (a->op == SN_OP_ATTENTION_CACHE && k->stage == SN_SUM_PARTIAL) /* key ranges */
            *n_items *= sn_split_parts(k);
        return;
    }
    case SN_KER_DEQUANT: *n_items = (sn_numel(a) + 63) / 64; return; /* NF4 blocks */
    case SN_KER_GEMV: /* 64 columns of y (of a part of W's rows); FINISH: y's elements */
        if (k->stage == SN_SUM_FINISH) {
            *n_items = (sn_numel(a) + SN_SPLIT_FINISH_ELEMS - 1) / SN_SPLIT_FINISH_ELEMS;
            return;
        }
        *n_items = (a->shape[a->rank - 1] + SN_GEMV_COLS - 1) / SN_GEMV_COLS *
                   (k->stage == SN_SUM_PARTIAL ? sn_split_parts(k) : 1);
        return;
    case SN_KER_THIN: { /* a block's rows; the sum form: (part, column block), FINISH: y's elements */
        sn_thin t = sn_thin_of(k);
        if (k->stage == SN_SUM_FINISH)
            *n_items = (sn_numel(a) + SN_SPLIT_FINISH_ELEMS - 1) / SN_SPLIT_FINISH_ELEMS;
        else if (t.sum)
            *n_items = t.parts * t.cblocks;
        else
            *n_items = (t.M + t.rows - 1) / t.rows;
        return;
    }
    case SN_KER_GRAD_ACC: case SN_KER_ADAMW: *n_items = k->opt.flat_n; return; /* the optimizer's flat range */
    case SN_KER_SQNORM: *n_items = (k->opt.flat_n + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK; return;
    case SN_KER_CLIP: *n_items = 1; return;
    case SN_KER_GEMM: case SN_KER_KIND_COUNT: break;
    }
    *n_items = 1; /* a library call */
    *serial = true;
}

int64_t sn_att_row_chunk(int64_t c, int64_t C) {
    SN_ASSERT(c >= 0 && c < C);
    return c % 2 ? C - 1 - c / 2 : c / 2;
}

int64_t sn_sum_chunk_rows(const sn_kernel *k) {
    SN_ASSERT(k->stage != SN_SUM_WHOLE);
    int op = k->anchor->op;
    if (op != SN_OP_LAYERNORM_BWD_W && op != SN_OP_RMSNORM_BWD_W) return SN_SUM_CHUNK;
    int64_t rows = rows_of(k->anchor->in[0]), c = SN_SUM_CHUNK;
    while (c > SN_SUM_CHUNK_MIN && (rows + c - 1) / c < SN_SUM_MIN_CHUNKS) c /= 2;
    return c;
}

int64_t sn_sum_chunks(const sn_kernel *k) {
    SN_ASSERT(k->stage != SN_SUM_WHOLE);
    if (k->anchor2) return rows_of(k->anchor->in[0]); /* the classifier: a partial a row */
    int64_t c = sn_sum_chunk_rows(k);
    return (rows_of(k->anchor->in[0]) + c - 1) / c;
}

int64_t sn_sum_width(const sn_kernel *k) {
    SN_ASSERT(k->stage != SN_SUM_WHOLE);
    if (k->anchor->op == SN_OP_CROSS_ENTROPY || k->anchor2) return 4; /* loss sum, count: two f64 */
    int64_t w = 0;
    if (k->stage == SN_SUM_FINISH)
        for (int o = 0; o < k->n_out; o++) w += sn_numel(k->args[o]);
    else
        for (int o = 0; o <= colsums(k); o++) w += sn_numel(o ? k->args[o] : k->anchor);
    return w;
}

int64_t sn_gather_chunk(const sn_kernel *k) {
    SN_ASSERT(k->kind == SN_KER_GATHER && k->anchor->op == SN_OP_EMBEDDING_BWD);
    int64_t N = sn_numel(k->anchor->in[0]), S = 64;
    while (S < N && S < SN_GATHER_CHUNK_MAX) S *= 2;
    return S;
}

int64_t sn_gather_chunks(const sn_kernel *k) {
    int64_t N = sn_numel(k->anchor->in[0]), S = sn_gather_chunk(k);
    return N > 0 ? (N + S - 1) / S : 1;
}

int64_t sn_kernel_scratch_bytes(const sn_kernel *k) {
    if (k->stage == SN_SUM_WHOLE) return 0;
    if (k->kind == SN_KER_GEMV || k->kind == SN_KER_THIN) /* the parts' products (S, M, N) */
        return 4 * sn_split_parts(k) * sn_numel(k->anchor);
    if (k->kind == SN_KER_ATTENTION && k->anchor->op == SN_OP_ATTENTION_CACHE) {
        const sn_node *a = k->anchor; /* (B H, P, T, Dv + 2): m, l, the output */
        return 4 * sn_split_parts(k) * (sn_numel(a) / a->shape[3]) * (a->shape[3] + 2);
    }
    if (k->kind == SN_KER_ATTENTION && k->dkv_parts) { /* f32 parts of dk, dv: (q's slices, S, D) */
        const sn_node *a = k->anchor, *q = a->in[0], *kk = a->in[1];
        int64_t slices = sn_shape_numel(q->rank - 2, q->shape), S = kk->shape[kk->rank - 2];
        bool dk = a->op == SN_OP_ATTENTION_BWD_K, dv = a->op == SN_OP_ATTENTION_BWD_V || k->anchor2;
        return 4 * slices * S * ((dk ? kk->shape[kk->rank - 1] : 0) +
                                 (dv ? a->in[2]->shape[kk->rank - 1] : 0));
    }
    if (k->kind == SN_KER_ATTENTION) { /* the atomic dq: f32 dq (q's slices, T, D), then the dots */
        const sn_node *q = k->anchor->in[0]; /* (q's slices, T) */
        return 4 * (sn_numel(q) + sn_numel(q) / q->shape[q->rank - 1]);
    }
    if (k->kind == SN_KER_GATHER) /* the table (G, V) and the order (G, S), 4 bytes each */
        return 4 * sn_gather_chunks(k) * (k->anchor->shape[0] + sn_gather_chunk(k));
    return 4 * sn_sum_chunks(k) * sn_sum_width(k);
}

void sn_sum_finish_fill(const sn_kernel *k, sn_kernel *f) {
    SN_ASSERT(k->stage == SN_SUM_PARTIAL);
    f->kind = SN_KER_ROW;
    f->anchor = k->anchor2 ? k->anchor2 : k->anchor; /* the classifier's: its cross_entropy */
    f->anchor2 = k->anchor2 ? k->anchor : NULL;
    f->stage = SN_SUM_FINISH;
    f->scratch = k->scratch;
    f->n_out = 1 + colsums(k);
    f->n_in = 0;
    f->args[0] = f->anchor;
    for (int o = 1; o <= colsums(k); o++) f->args[o] = k->args[o];
    snprintf(f->name, sizeof f->name, "k%d_%s_finish", f->id, sn_op_name(f->anchor->op));
    sn_kernel_work(f, &f->n_items, &f->serial);
}

bool sn_kernel_writes(const sn_kernel *k, int o) {
    if (k->kind == SN_KER_ATTENTION) /* the atomic dq's zeroing kernel writes its scratch
                                        alone, a split attention_cache's PARTIAL and dk/dv's
                                        parts too */
        return !(k->stage == SN_ATT_DQ_ZERO && (k->anchor->op == SN_OP_ATTENTION_BWD_Q ||
                                                k->anchor->op == SN_OP_ATTENTION_CACHE ||
                                                k->dkv_parts));
    return k->stage != SN_SUM_PARTIAL || k->anchor2 ||
           (k->args[o] != k->anchor && (o < 1 || o > colsums(k)));
}

int64_t sn_colsum_tiles(const sn_kernel *k) {
    int64_t n = 0;
    for (int o = 1; o <= colsums(k); o++)
        n += (sn_numel(k->args[o]) + SN_COLSUM_TILE - 1) / SN_COLSUM_TILE;
    return n;
}

bool sn_kernel_out_part(const sn_kernel *k, int o, bool *mask) {
    const sn_node *a = k->anchor;
    if (k->kind != SN_KER_ATTENTION || o >= k->n_access - a->n_in) return false;
    const sn_node *y = o ? k->anchor2 : a;
    const sn_access *x = &k->access[a->n_in + o];
    memset(mask, 0, (size_t)sn_numel(k->args[o]));
    int64_t idx[SN_MAX_RANK] = {0};
    for (int64_t i = 0; i < sn_numel(y); i++) {
        int64_t off = x->offset, rest = i;
        for (int d = y->rank - 1; d >= 0; d--) {
            idx[d] = rest % y->shape[d];
            rest /= y->shape[d];
            off += idx[d] * x->stride[d];
        }
        SN_ASSERT(off >= 0 && off < sn_numel(k->args[o]));
        mask[off] = true;
    }
    return true;
}

void sn_kernel_describe(const sn_kernel *k, char *buf, size_t len) {
    char t[96];
    size_t at = (size_t)snprintf(buf, len, "%-40s %-9s %s <-", k->name, sn_kernel_kind_name(k->kind),
                                 k->args[0] ? sn_type_str(k->args[0], t, sizeof t) : "?");
    for (int i = k->n_out; i < k->n_out + k->n_in && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, " %%%d", k->args[i]->id);
    if (at < len) at += (size_t)snprintf(buf + at, len - at, " ->");
    for (int i = 0; i < k->n_out && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, " %%%d", k->args[i]->id);
    if (k->tail && at < len) /* a joined FINISH (kernel.h) */
        at += (size_t)snprintf(buf + at, len - at, " + %s ->", k->tail->name);
    for (int i = 0; k->tail && i < k->tail->n_out && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, " %%%d", k->tail->args[i]->id);
}

static void print_bytes(FILE *f, const char *what, int64_t b) {
    fprintf(f, "# %s %.2f MiB (%lld bytes)\n", what, (double)b / (1 << 20), (long long)b);
}

/* The parameter layout (program.h), one line a parameter. */
static void print_layout(const sn_param_layout *l, FILE *f) {
    if (!l->slots) return;
    fprintf(f, "# parameter layout: %lld flat elements (%lld decayed), parameters at %lld, "
            "gradients at %lld, weight shadows %s at %lld\n", (long long)l->flat_n,
            (long long)l->flat_decay, (long long)l->params, (long long)l->grads,
            sn_dtype_name(l->low), (long long)l->shadows);
    for (int i = 0; i < l->n; i++) {
        const sn_param_slot *s = &l->slots[i];
        fprintf(f, "#   %-32s %s %10lld: weights %lld, gradient %lld, shadow %lld, flat %lld%s\n",
                s->node->name ? s->node->name : "?", sn_dtype_name(s->dtype), (long long)s->numel,
                (long long)s->value, (long long)s->grad, (long long)s->shadow, (long long)s->flat,
                s->frozen ? ", frozen" : s->decay ? ", decay" : "");
    }
}

void sn_program_print(const sn_program *p, FILE *f) {
    int count[SN_KER_KIND_COUNT] = {0};
    char line[512];
    for (int k = 0; k < p->n_kernels; k++) {
        sn_kernel_describe(p->kernels[k], line, sizeof line);
        fprintf(f, "%s\n", line);
        count[p->kernels[k]->kind]++;
    }
    fprintf(f, "# %d kernels:", p->n_kernels);
    for (int i = 0; i < SN_KER_KIND_COUNT; i++)
        if (count[i]) fprintf(f, " %d %s", count[i], sn_kernel_kind_name((sn_kernel_kind)i));
    fprintf(f, "\n");
    for (int k = 0; k < p->n_shadows; k++) { /* run when their parameters are set, not per step */
        sn_kernel_describe(p->shadows[k], line, sizeof line);
        fprintf(f, "# weight copy: %s\n", line);
    }
    if (!p->sum_bytes && !p->persistent_bytes) return; /* not planned yet */
    print_bytes(f, "arena (planned peak)", p->arena_bytes);
    print_bytes(f, "arena values without reuse", p->sum_bytes);
    print_bytes(f, "persistent (inputs, parameters, outputs)", p->persistent_bytes);
    print_layout(&p->layout, f);
}

void sn_program_free(sn_program *p) {
    if (!p) return;
    sn_arena_free(&p->arena);
    free(p->kernels);
    free(p->values);
    free(p->value_of);
    free(p);
}
