/* chunk_logits.c: the chunk_logits pass: the LM head's product, the cross-entropy and their
 * backward run over row chunks, so that the (R, V) logits and their gradient (R = B T tokens,
 * V the vocabulary: 3.3 GB in f32 for gpt2 at 16 x 1024) never exist whole, only one chunk's.
 * Convention: the region is found from the graph's loss, not from names: the product M whose
 * rows reach the loss's cross_entropy through casts and reshapes, and every value that reads
 * those rows one row at a time (the casts, cross_entropy_bwd, the dlogits' reshapes), up to the
 * products that leave the rows: dX = dlogits W (row-wise: its chunks are concatenated) and
 * dW = dlogits^T X (a sum over rows: the chunks' products are added in chunk order). */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

enum { NOT, ROW, SINK, DW, LOSS }; /* a node's part in the region */
enum { MAX_SINKS = 8, MAX_CHUNKS = SN_MAX_INPUTS };

typedef struct {
    const sn_graph *old;
    sn_rewrite r;
    unsigned char *role; /* [old->n_nodes] */
    const sn_node *head, *loss, *tg;
    int64_t R, rows, n_chunks;
    sn_node **cur;     /* [old->n_nodes]: the node's value in the chunk being built */
    sn_node **flat;    /* [old->n_nodes]: a row-wise input outside the region as (R, last) */
    sn_node **part[MAX_SINKS]; /* each dX sink's chunks */
    const sn_node *sink[MAX_SINKS], *dw[MAX_SINKS];
    int n_sink, n_dw;
    bool emitted;
} chunker;

static sn_status unsupported(const sn_node *n, const char *what, sn_err *e) {
    return sn_fail(e, SN_ERR_UNSUPPORTED, "chunk_logits: %%%d (%s) %s: not supported yet (run "
                   "without --chunk-logits)", n->id, sn_op_name(n->op), what);
}

static int64_t last_dim(const sn_node *n) { return n->rank ? n->shape[n->rank - 1] : 1; }
static int64_t rows_of(const sn_node *n) { return last_dim(n) ? sn_numel(n) / last_dim(n) : 0; }

/* Is u a row-wise reshape, cast or unary pointwise op of its one input (the same rows)? */
static bool same_rows(const sn_node *u) {
    if (u->op == SN_OP_RESHAPE) return last_dim(u) == last_dim(u->in[0]) && u->rank >= 1;
    return sn_op_kind(u->op) == SN_K_POINTWISE && u->n_in == 1 && sn_numel(u) == sn_numel(u->in[0]) &&
           last_dim(u) == last_dim(u->in[0]);
}

/* The head: the product whose rows reach the loss through row-wise ops. */
static const sn_node *find_head(const sn_node *x) {
    while (x->n_in == 1 && same_rows(x)) x = x->in[0];
    if (x->op != SN_OP_MATMUL || x->a.ta || x->in[1]->rank != 2 || x->in[0]->rank < 2) return NULL;
    return x;
}

/* Is n read as a whole by anything but the region (an output, the loss, a gradient)? */
static bool kept(const sn_graph *g, const sn_node *n) {
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == n) return true;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->grad == n) return true;
    return false;
}

/* The region: every node's role, from the head forward through its row-wise readers. */
static sn_status find_region(chunker *s, sn_err *e) {
    const sn_graph *g = s->old;
    s->role[s->head->id] = ROW;
    for (int m = s->head->id; m < g->n_nodes; m++) {
        const sn_node *x = g->nodes[m];
        if (s->role[x->id] != ROW) continue;
        if (rows_of(x) != s->R) return unsupported(x, "has other rows than the logits", e);
        if (kept(g, x)) return unsupported(x, "is an output of the graph (the logits are whole there)", e);
        for (int i = m + 1; i < g->n_nodes; i++) {
            const sn_node *u = g->nodes[i];
            int j = 0;
            while (j < u->n_in && u->in[j] != x) j++;
            if (j == u->n_in || s->role[u->id]) continue;
            bool ok = true;
            if (u->op == SN_OP_CROSS_ENTROPY || u->op == SN_OP_CROSS_ENTROPY_BWD) {
                ok = j == 0 && u->in[1] == s->tg && u->a.ignore_index == s->loss->a.ignore_index &&
                     u->a.end == s->loss->a.end && (u->op == SN_OP_CROSS_ENTROPY_BWD || u == s->loss);
                s->role[u->id] = u->op == SN_OP_CROSS_ENTROPY ? LOSS : ROW;
            } else if (same_rows(u)) {
                s->role[u->id] = ROW;
            } else if (u->op == SN_OP_MATMUL && !u->a.ta && j == 0 && u->in[1]->rank == 2 &&
                       !s->role[u->in[1]->id]) {
                ok = s->n_sink < MAX_SINKS;
                s->role[u->id] = SINK;
                if (ok) s->sink[s->n_sink++] = u;
            } else if (u->op == SN_OP_MATMUL && u->a.ta && !u->a.tb && j == 0 && x->rank == 2 &&
                       u->in[1]->rank == 2 && u->in[1]->shape[0] == s->R) {
                ok = s->n_dw < MAX_SINKS;
                s->role[u->id] = DW;
                if (ok) s->dw[s->n_dw++] = u;
            } else {
                ok = false;
            }
            if (!ok) return unsupported(u, "reads the logits' rows in a way the pass does not split", e);
        }
    }
    for (int i = 0; i < s->n_sink; i++) /* the dX sinks' matmul (n, V) W (V, C): rows stay rows */
        if (s->role[s->sink[i]->in[0]->id] != ROW) return unsupported(s->sink[i], "reads no logits", e);
    return SN_OK;
}

/* ---- the new graph ---- */

static sn_node *emit_needed(chunker *s, const sn_node *n);

/* A node of the region with inputs ins, built as the old one (its attributes, its shape rule). */
static sn_node *again(chunker *s, const sn_node *n, int n_in, sn_node **ins) {
    sn_node p = *n;
    p.id = -1;
    p.grad = NULL;
    p.n_in = n_in;
    p.in = ins;
    return sn_graph_append(s->r.g, &p);
}

/* Row-wise value n outside the region as (R, last), or (R) for the targets. */
static sn_node *flat_of(chunker *s, const sn_node *n) {
    sn_graph *g = s->r.g;
    if (!s->flat[n->id]) {
        sn_node *x = s->r.map[n->id];
        s->flat[n->id] = n == s->tg                             ? sn_reshape(g, x, SN_SHAPE(s->R))
                         : n->rank == 2 && n->shape[0] == s->R ? x
                                                               : sn_reshape(g, x, SN_SHAPE(s->R, last_dim(n)));
    }
    return s->flat[n->id];
}

/* Row-wise value n outside the region in the chunk [r0, r1) of its rows. */
static sn_node *rows_outside(chunker *s, const sn_node *n, int64_t r0, int64_t r1) {
    return sn_slice(s->r.g, flat_of(s, n), 0, r0, r1);
}

/* n's value over the chunk's rows: a (rows, last) matrix for the region's values, the chunk's
 * rows of the row-wise values it reads. */
static sn_node *chunk_of(chunker *s, const sn_node *n, int64_t r0, int64_t r1) {
    if (s->cur[n->id]) return s->cur[n->id];
    sn_graph *g = s->r.g;
    sn_node *y, *ins[3];
    if (n->op == SN_OP_RESHAPE) {
        y = chunk_of(s, n->in[0], r0, r1);
    } else if (n == s->head) {
        ins[0] = rows_outside(s, n->in[0], r0, r1);
        ins[1] = s->r.map[n->in[1]->id];
        y = again(s, n, 2, ins);
    } else if (n->op == SN_OP_CAST) {
        y = sn_cast(g, chunk_of(s, n->in[0], r0, r1), n->dtype);
    } else if (s->role[n->id] == ROW && n->n_in == 1) {
        ins[0] = chunk_of(s, n->in[0], r0, r1);
        y = again(s, n, 1, ins);
    } else if (s->role[n->id] == SINK) {
        ins[0] = chunk_of(s, n->in[0], r0, r1);
        ins[1] = s->r.map[n->in[1]->id];
        y = again(s, n, 2, ins);
    } else if (s->role[n->id] == DW) {
        ins[0] = chunk_of(s, n->in[0], r0, r1);
        ins[1] = s->role[n->in[1]->id] ? chunk_of(s, n->in[1], r0, r1) : rows_outside(s, n->in[1], r0, r1);
        y = again(s, n, 2, ins);
    } else {
        return NULL; /* cross-entropy and its backward: built by emit_chunk */
    }
    return s->cur[n->id] = y;
}

/* The targets' rows that count (not the ignore index), as an f32 scalar. */
static sn_node *counted(sn_graph *g, sn_node *tg, int ignore) {
    if (!tg) return NULL; /* g has the error */
    sn_node *t = sn_cast(g, tg, SN_F32), *ign = sn_full(g, SN_F32, SN_SCALAR, (float)ignore);
    sn_node *n = sn_full(g, SN_F32, SN_SCALAR, (float)tg->shape[0]);
    return sn_sub(g, n, sn_sum(g, sn_eq(g, t, ign), 0, false));
}

/* Chunk [r0, r1): its logits, its loss (the mean over its counted rows) times its count, its
 * dlogits with dloss scaled by count_c / count (so that dloss / count_c, the kernel's scale, is
 * dloss / count: exact when both counts are powers of two), and the products that read them.
 * *loss_sum: the running sum of the chunks' loss sums. */
static void emit_chunk(chunker *s, int64_t r0, int64_t r1, sn_node *count, sn_node **loss_sum) {
    const sn_graph *old = s->old;
    sn_graph *g = s->r.g;
    memset(s->cur, 0, sizeof *s->cur * (size_t)old->n_nodes);
    sn_node *ins[3];
    ins[0] = chunk_of(s, s->loss->in[0], r0, r1);
    ins[1] = rows_outside(s, s->tg, r0, r1);
    sn_node *n_c = counted(g, ins[1], s->loss->a.ignore_index);
    sn_node *loss_c = again(s, s->loss, 2, ins);
    for (int i = s->head->id; i < old->n_nodes; i++) { /* cross_entropy_bwd, in the old order */
        const sn_node *n = old->nodes[i];
        if (s->role[i] != ROW || n->op != SN_OP_CROSS_ENTROPY_BWD) continue;
        sn_node *dl_c = sn_div(g, sn_mul(g, s->r.map[n->in[2]->id], n_c), count);
        sn_node *b[3] = {chunk_of(s, n->in[0], r0, r1), ins[1], dl_c};
        s->cur[i] = again(s, n, 3, b);
    }
    for (int i = 0; i < s->n_sink; i++) {
        int64_t c = r0 / s->rows;
        s->part[i][c] = chunk_of(s, s->sink[i], r0, r1);
    }
    for (int i = 0; i < s->n_dw; i++) {
        sn_node *d = chunk_of(s, s->dw[i], r0, r1);
        sn_node *acc = s->r.map[s->dw[i]->id];
        /* in chunk order, each partial sum read through a reshape to its own shape: fuse stores
           a value a view reads, so each sum is its own kernel right after its chunk (else the
           adds join one kernel after the last chunk, which keeps every chunk's product alive),
           and memplan writes it over the previous one (in place, down to the gradient) */
        s->r.map[s->dw[i]->id] = acc ? sn_add(g, sn_reshape(g, acc, sn_shape_of(acc)), d) : d;
    }
    /* last, so that nothing reads the chunk's loss before the kernel of its
       cross_entropy_bwd, which computes it too (fuse's classifier: one pass over the logits);
       through a reshape as dW's sums (above): one small kernel a chunk, not one kernel reading
       every chunk's loss and count (fuse's kernels read at most 16 buffers) */
    sn_node *l = sn_mul(g, loss_c, n_c);
    *loss_sum = *loss_sum ? sn_add(g, sn_reshape(g, *loss_sum, SN_SCALAR), l) : l;
}

/* Every old node the region reads from outside, in the new graph. */
static void emit_inputs(chunker *s) {
    const sn_graph *old = s->old;
    for (int i = s->head->id; i < old->n_nodes; i++) {
        const sn_node *n = old->nodes[i];
        if (!s->role[i]) continue;
        for (int j = 0; j < n->n_in; j++)
            if (!s->role[n->in[j]->id]) emit_needed(s, n->in[j]);
    }
}

/* The n parts concatenated along rows, in threes (fuse's concat kernels read at most three
 * parts): a tree of ceil(log3 n) levels of copies of the (R, C) result. */
static sn_node *concat_rows(sn_graph *g, int n, sn_node **parts) {
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += 3) parts[m++] = n - i == 1 ? parts[i] : sn_concat(g, n - i < 3 ? n - i : 3, parts + i, 0);
        n = m;
    }
    return parts[0];
}

/* The region, chunk after chunk, then the values the rest of the graph reads: each dX sink's
 * chunks concatenated, the dW sums, the loss. */
static void emit_region(chunker *s) {
    s->emitted = true;
    emit_inputs(s);
    sn_graph *g = s->r.g;
    if (s->old->has_backward) g->has_backward = true; /* the region is mostly backward work */
    sn_node *count = counted(g, flat_of(s, s->tg), s->loss->a.ignore_index);
    count = sn_add(g, count, sn_eq(g, count, sn_full(g, SN_F32, SN_SCALAR, 0))); /* 0 -> 1 */
    sn_node *loss_sum = NULL;
    for (int64_t r0 = 0; r0 < s->R; r0 += s->rows)
        emit_chunk(s, r0, r0 + s->rows < s->R ? r0 + s->rows : s->R, count, &loss_sum);
    for (int i = 0; i < s->n_sink; i++) {
        sn_node *x = concat_rows(g, (int)s->n_chunks, s->part[i]);
        s->r.map[s->sink[i]->id] = sn_reshape(g, x, sn_shape_of(s->sink[i]));
    }
    s->r.map[s->loss->id] = sn_div(g, loss_sum, count);
}

/* Old node n in the new graph: emitted (its inputs first) if it is not yet; a value of the
 * region's emits the whole region. */
static sn_node *emit_needed(chunker *s, const sn_node *n) {
    if (s->r.map[n->id]) return s->r.map[n->id];
    if (s->role[n->id]) {
        if (!s->emitted) emit_region(s);
        return s->r.map[n->id];
    }
    for (int j = 0; j < n->n_in; j++) emit_needed(s, n->in[j]);
    return sn_rewrite_copy(&s->r, n);
}

static void chunker_free(chunker *s) {
    free(s->role);
    free(s->cur);
    free(s->flat);
    for (int i = 0; i < MAX_SINKS; i++) free(s->part[i]);
}

int64_t sn_chunk_logits_rows(int64_t rows, int64_t R) {
    if (rows != SN_CHUNK_LOGITS_AUTO) return rows;
    int64_t n = (R + SN_CHUNK_LOGITS_PARTS - 1) / SN_CHUNK_LOGITS_PARTS;
    return (n + SN_SUM_CHUNK - 1) / SN_SUM_CHUNK * SN_SUM_CHUNK;
}

/* The graph's one cross_entropy: its loss, or what fp16's loss scale multiplies; NULL when
 * there is none or more than one. */
static const sn_node *cross_entropy_of(const sn_graph *g) {
    if (g->loss && g->loss->op == SN_OP_CROSS_ENTROPY) return g->loss;
    const sn_node *ce = NULL;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_CROSS_ENTROPY) {
            if (ce) return NULL;
            ce = g->nodes[i];
        }
    return ce;
}

sn_status sn_pass_chunk_logits(const sn_graph *in, int64_t rows, sn_graph **out, int *n_chunks,
                               sn_err *e) {
    *out = NULL;
    *n_chunks = 0;
    if (rows < 1 && rows != SN_CHUNK_LOGITS_AUTO) return sn_fail(e, SN_ERR_INVALID, "chunk_logits: %lld rows a chunk: give at least 1",
                                 (long long)rows);
    const sn_node *ce = cross_entropy_of(in);
    if (!in->has_backward || !ce)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "chunk_logits: the graph needs its backward and one "
                       "cross_entropy (the loss, or scaled into it): not supported yet for other graphs");
    chunker s = {.old = in, .loss = ce, .tg = ce->in[1], .rows = rows};
    if (!(s.head = find_head(ce->in[0])))
        return unsupported(ce, "reads no matmul through row-wise ops (the LM head)", e);
    s.R = rows_of(s.head);
    s.rows = rows = sn_chunk_logits_rows(rows, s.R);
    if (rows >= s.R) return SN_OK; /* one chunk: nothing to do */
    s.n_chunks = (s.R + rows - 1) / rows;
    if (s.n_chunks > MAX_CHUNKS)
        return sn_fail(e, SN_ERR_INVALID, "chunk_logits: %lld rows a chunk make %lld chunks of the "
                       "%lld rows, more than %d: give at least %lld rows", (long long)rows,
                       (long long)s.n_chunks, (long long)s.R, MAX_CHUNKS,
                       (long long)((s.R + MAX_CHUNKS - 1) / MAX_CHUNKS));
    size_t n = (size_t)in->n_nodes;
    s.role = sn_calloc(n, 1, "the chunk_logits pass", e);
    s.cur = s.role ? sn_calloc(n, sizeof *s.cur, "the chunk_logits pass", e) : NULL;
    s.flat = s.cur ? sn_calloc(n, sizeof *s.flat, "the chunk_logits pass", e) : NULL;
    for (int i = 0; s.flat && i < MAX_SINKS; i++)
        if (!(s.part[i] = sn_calloc((size_t)s.n_chunks, sizeof **s.part, "the chunk_logits pass", e)))
            break;
    sn_status st = s.part[MAX_SINKS - 1] ? find_region(&s, e) : SN_ERR_OOM;
    if (!st && !s.role[s.loss->id]) st = unsupported(s.loss, "is not the head's loss", e);
    if (!st) st = sn_rewrite_begin(&s.r, in, e);
    if (st) {
        chunker_free(&s);
        return st;
    }
    for (int i = 0; i < in->n_nodes; i++)
        if (!s.role[i]) emit_needed(&s, in->nodes[i]);
    if (!s.emitted) emit_region(&s);
    chunker_free(&s);
    *n_chunks = (int)s.n_chunks;
    return sn_rewrite_end(&s.r, "chunk_logits", out, e);
}
