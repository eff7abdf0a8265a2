/* siblings.c: the siblings pass, on the forward graph before autocast: products of one x by
 * several weights in Hugging Face's (out, in) layout, x @ w_i^T (LLaMA's q, k, v and gate, up),
 * become one product x @ [w_0; w_1; ..]^T whose columns are each product (a slice of the last
 * axis). Two kinds of group:
 * - trained weights (full training): where every product is read only by the add of a trained
 *   bias, the biases are concatenated too and each add becomes its columns of the joint sum;
 * - frozen weights each with a LoRA adapter beside it (sn_lora_paths: h = x @ [A_0 A_1 ..]
 *   (scaled), y_i = x @ w_i^T + h_i @ B_i, h_i the columns of h), the base stored in 16 bits
 *   (base16: the product reads the widened 16-bit weight), in f32 or in NF4 (QLoRA: each
 *   weight dequantized, then concatenated): y = x @ [w_0; ..]^T +
 *   h @ D, D the block-diagonal (n r, out) matrix of the B_i (each padded to its columns, then
 *   stacked), so the adapters' n products, their n input gradients and their n weight
 *   gradients are one GEMM each (D's gradient h^T G, each B_i's its block copied out: autodiff's
 *   concat rule), the frozen base's n products too. D's zeros make those GEMMs n times the
 *   FLOPs of the blocks, a few GFLOP at most: they are launches and passes over h and the
 *   output gradient G, not FLOPs. A frozen bias (Qwen2's) after each is concatenated as above.
 * One GEMM where there were n, in the forward and for x's gradient; each trained weight's
 * gradient stays its own GEMM, reading its columns of the joint output gradient in place
 * (autodiff's concat rule).
 * The concatenation is read in place where the parts allow (program.h: a frozen block: frozen
 * weights, or trained ones' 16-bit shadows, which autocast concatenates), else it is a copy of
 * the weights a step (an f32 program's trained weights: recomputed with its block under a
 * checkpoint policy, recompute.c; frozen ones: copied again in the backward, remat.c). Worth
 * it where launches and small GEMMs cost more than any such copy (sn_target.fuse_siblings:
 * CUDA; on a CPU at small batches the joined programs measured slower), in training graphs (the pipeline's choice: generation reads each weight
 * about once a token, so a copy would cost what the products do). Products over few rows and
 * frozen weights without an adapter (IA3's base) are left alone. An NF4 base's concatenation
 * is a copy a step of the dequantized weights (made again in the backward: remat.c, and under
 * a checkpoint policy with its block: recompute.c, so no layer's copy outlives its use).
 * Exact: each output element is the same dot product (the GEMM library may order its sum
 * otherwise at another shape), and D's zeros add exact zeros to each adapter's sum. */
#include <stdlib.h>

#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

/* MIN_ROWS: a product over fewer rows (decoding's few-row products, kernel.h SN_GEMV_MAX_M) reads
 * its weights about once, so a copy of them would cost what the product costs */
enum { MAX_SIBLINGS = 8, MIN_ROWS = 4 * SN_GEMV_MAX_M };

/* Whether p is a trained f32 matrix or vector with `uses` uses, all by one node. */
static bool trained(const sn_node *p, const int *uses, int rank) {
    return p->op == SN_OP_PARAM && !p->a.frozen && p->dtype == SN_F32 && p->rank == rank &&
           uses[p->id] == 1;
}

/* The frozen weight that w reads, or NULL: a frozen f32 matrix, the f32 widening of a frozen
 * 16-bit one (base16), or the dequantized NF4 one (nf4: w itself), each read once. */
static const sn_node *frozen_weight(const sn_node *w, const int *uses) {
    if (w->op == SN_OP_DEQUANT_NF4) return w->rank == 2 && uses[w->id] == 1 ? w : NULL;
    const sn_node *p = w->op == SN_OP_CAST && w->dtype == SN_F32 && uses[w->id] == 1 ? w->in[0] : w;
    bool ok = p->op == SN_OP_PARAM && p->a.frozen && p->rank == 2 && uses[p->id] == 1 &&
              (p == w ? p->dtype == SN_F32 : p->dtype == SN_BF16 || p->dtype == SN_F16);
    return ok ? p : NULL;
}

/* Whether u is x @ w^T over at least MIN_ROWS rows, by a trained weight that u alone reads or
 * (frozen) by a frozen one (frozen_weight). */
static bool sibling(const sn_node *u, const int *uses, bool frozen) {
    if (u->op != SN_OP_MATMUL || u->a.ta || !u->a.tb || u->in[1]->rank != 2 ||
        u->in[0]->dtype != SN_F32)
        return false;
    if (frozen ? !frozen_weight(u->in[1], uses) : !trained(u->in[1], uses, 2)) return false;
    const sn_node *x = u->in[0];
    return sn_numel(x) / x->shape[x->rank - 1] >= MIN_ROWS;
}

/* The first add that reads u (u read once), with its other operand in *other; NULL if none. */
static const sn_node *add_of(const sn_graph *g, const sn_node *u, const int *uses,
                             const sn_node **other) {
    if (uses[u->id] != 1) return NULL;
    for (int i = u->id + 1; i < g->n_nodes; i++) {
        const sn_node *a = g->nodes[i];
        if (a->op != SN_OP_ADD || (a->in[0] != u && a->in[1] != u)) continue;
        *other = a->in[0] == u ? a->in[1] : a->in[0];
        return a;
    }
    return NULL;
}

/* The add of a bias (trained, or with `frozen` either: an f32 vector read once) that is the
 * only reader of u, or NULL. */
static const sn_node *bias_add(const sn_graph *g, const sn_node *u, const int *uses, bool frozen) {
    const sn_node *b, *a = add_of(g, u, uses, &b);
    if (!a) return NULL;
    bool ok = frozen ? b->op == SN_OP_PARAM && b->dtype == SN_F32 && b->rank == 1 && uses[b->id] == 1
                     : trained(b, uses, 1);
    return ok ? a : NULL;
}

/* A LoRA path: p = h_i @ B, h_i columns [lo, hi) of h (the adapters' shared product,
 * sn_lora_paths), B a trained (r, out) matrix; each read once. */
typedef struct {
    const sn_node *lora_add, *p, *cols, *h, *b; /* lora_add: y = base + p */
    int64_t lo;
} path;

/* The LoRA path added to frozen product u (u's only reader adds it), or false. */
static bool path_of(const sn_graph *g, const sn_node *u, const int *uses, path *o) {
    const sn_node *p, *a = add_of(g, u, uses, &p);
    if (!a || p->op != SN_OP_MATMUL || p->a.ta || p->a.tb || uses[p->id] != 1 ||
        !trained(p->in[1], uses, 2) || !sn_same_shape(p, u))
        return false;
    const sn_node *c = p->in[0];
    if (c->op != SN_OP_SLICE || uses[c->id] != 1 || c->a.axis != c->rank - 1) return false;
    *o = (path){a, p, c, c->in[0], p->in[1], c->a.start};
    return c->in[0]->rank == c->rank;
}

typedef struct {
    int n;
    bool frozen; /* the LoRA kind: path[] */
    const sn_node *mm[MAX_SIBLINGS], *add[MAX_SIBLINGS]; /* add: all or none */
    path path[MAX_SIBLINGS];
} group;

/* Whether the frozen group's paths take h's columns in order, each its B's rows, all of them,
 * and h is read by them alone. */
static bool paths_tile(const group *gr, const int *uses) {
    const sn_node *h = gr->path[0].h;
    int64_t at = 0;
    for (int i = 0; i < gr->n; i++) {
        const path *q = &gr->path[i];
        if (q->h != h || q->lo != at || q->cols->shape[q->cols->rank - 1] != q->b->shape[0])
            return false;
        at += q->b->shape[0];
    }
    return at == h->shape[h->rank - 1] && uses[h->id] == gr->n;
}

/* The bias that add a (bias_add's) adds. */
static const sn_node *bias_of(const sn_node *a) {
    return a->in[0]->op == SN_OP_PARAM ? a->in[0] : a->in[1];
}

/* Whether every input the group's joint nodes read was made before node `at`. */
static bool inputs_before(const group *gr, int at) {
    for (int i = 0; i < gr->n; i++) {
        const sn_node *w = gr->mm[i]->in[1];
        int last = w->id;
        if (gr->frozen) last = gr->path[i].h->id > last ? gr->path[i].h->id : last;
        if (gr->frozen && gr->path[i].b->id > last) last = gr->path[i].b->id;
        if (gr->add[i] && bias_of(gr->add[i])->id > last) last = bias_of(gr->add[i])->id;
        if (last >= at) return false;
    }
    return true;
}

/* The group of siblings that u is the first of (products of u's x, in graph order), its
 * weights (and biases, adapters) made before u; n < 2 when none. */
static group group_of(const sn_graph *g, const sn_node *u, const int *uses, const bool *taken) {
    group gr = {0};
    if (taken[u->id]) return gr;
    gr.frozen = sibling(u, uses, true);
    if (!gr.frozen && !sibling(u, uses, false)) return gr;
    for (int i = u->id; i < g->n_nodes && gr.n < MAX_SIBLINGS; i++) {
        const sn_node *v = g->nodes[i];
        if (v->op == SN_OP_MATMUL && v->in[0] == u->in[0] && !taken[i] && sibling(v, uses, gr.frozen))
            gr.mm[gr.n++] = v;
    }
    for (int i = 0; gr.frozen && i < gr.n; i++)
        if (!path_of(g, gr.mm[i], uses, &gr.path[i])) return (group){0};
    if (gr.n >= 2 && gr.frozen && !paths_tile(&gr, uses)) return (group){0};
    bool biased = true;
    for (int i = 0; i < gr.n; i++) {
        const sn_node *y = gr.frozen ? gr.path[i].lora_add : gr.mm[i];
        gr.add[i] = bias_add(g, y, uses, gr.frozen);
        biased &= gr.add[i] != NULL;
    }
    for (int i = 0; !biased && i < gr.n; i++) gr.add[i] = NULL;
    if (gr.n >= 2 && !inputs_before(&gr, u->id)) return (group){0};
    return gr;
}

/* Marks the group's nodes that the joint nodes replace. */
static void take(const group *gr, bool *taken) {
    for (int k = 0; k < gr->n; k++) {
        taken[gr->mm[k]->id] = true;
        if (gr->add[k]) taken[gr->add[k]->id] = true;
        if (!gr->frozen) continue;
        const path *q = &gr->path[k];
        taken[q->lora_add->id] = taken[q->p->id] = taken[q->cols->id] = true;
        if (gr->mm[k]->in[1]->op == SN_OP_CAST) taken[gr->mm[k]->in[1]->id] = true;
    }
}

/* The frozen group's weights [w_0; ..] (16-bit ones concatenated, then widened; NF4 ones
 * dequantized, then concatenated) and its adapters' block-diagonal D (n r, out) in the new
 * graph. */
static sn_node *frozen_weights(sn_rewrite *r, const group *gr) {
    sn_node *w[MAX_SIBLINGS];
    bool low = gr->mm[0]->in[1]->op == SN_OP_CAST; /* the same for all (sn_pass_siblings) */
    for (int i = 0; i < gr->n; i++) {
        const sn_node *v = gr->mm[i]->in[1];
        w[i] = r->map[(low ? v->in[0] : v)->id];
    }
    sn_node *all = sn_concat(r->g, gr->n, w, 0);
    return low ? sn_cast(r->g, all, SN_F32) : all;
}

static sn_node *block_diagonal(sn_rewrite *r, const group *gr, int64_t out) {
    sn_node *d[MAX_SIBLINGS];
    for (int i = 0, at = 0; i < gr->n; i++) {
        d[i] = sn_pad(r->g, r->map[gr->path[i].b->id], 1, at, out);
        at += (int)gr->mm[i]->in[1]->shape[0];
    }
    return sn_concat(r->g, gr->n, d, 0);
}

/* The group's joint product (and bias sum) in the new graph; each member mapped to its
 * columns. */
static void join(sn_rewrite *r, const group *gr) {
    sn_graph *g = r->g;
    sn_node *w[MAX_SIBLINGS], *b[MAX_SIBLINGS];
    int64_t out = 0;
    for (int i = 0; i < gr->n; i++) {
        if (!gr->frozen) w[i] = r->map[gr->mm[i]->in[1]->id];
        if (gr->add[i]) b[i] = r->map[bias_of(gr->add[i])->id];
        out += gr->mm[i]->in[1]->shape[0];
    }
    sn_node *x = r->map[gr->mm[0]->in[0]->id], *all;
    if (gr->frozen) {
        /* the adapters' product first, as sn_lora_paths makes them: the base's GEMM adds it
           as its C (kernel.h accum: C written before the GEMM) */
        sn_node *ad = sn_matmul(g, r->map[gr->path[0].h->id], block_diagonal(r, gr, out));
        all = sn_add(g, sn_matmul_t(g, x, frozen_weights(r, gr), false, true), ad);
    } else {
        all = sn_matmul_t(g, x, sn_concat(g, gr->n, w, 0), false, true);
    }
    if (gr->add[0]) all = sn_add(g, all, sn_concat(g, gr->n, b, 0));
    for (int i = 0, at = 0; i < gr->n; i++) {
        int len = (int)gr->mm[i]->in[1]->shape[0];
        sn_node *cols = sn_slice(g, all, -1, at, at + len);
        r->map[gr->mm[i]->id] = cols; /* read by nothing else when there is a bias or a path */
        if (gr->frozen) r->map[gr->path[i].lora_add->id] = cols;
        if (gr->add[i]) r->map[gr->add[i]->id] = cols;
        at += len;
    }
}

sn_status sn_pass_siblings(const sn_graph *in, sn_graph **out, int *n_joined, sn_err *e) {
    *out = NULL;
    *n_joined = 0;
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "siblings: the graph has a backward; run the pass on "
                       "the forward graph, before autodiff");
    int *uses = sn_graph_use_counts(in, e);
    bool *taken = calloc((size_t)in->n_nodes + 1, sizeof *taken);
    group *at = calloc((size_t)in->n_nodes + 1, sizeof *at); /* by the first member's id */
    if (!uses || !taken || !at) {
        free(taken);
        free(at);
        if (!uses) return SN_ERR_OOM;
        free(uses);
        return sn_fail(e, SN_ERR_OOM, "siblings: out of memory");
    }
    int groups = 0;
    for (int i = 0; i < in->n_nodes; i++) {
        group gr = group_of(in, in->nodes[i], uses, taken);
        if (gr.n < 2) continue;
        if (gr.frozen) { /* the same kind of base throughout */
            for (int k = 1; k < gr.n; k++)
                if (gr.mm[k]->in[1]->op != gr.mm[0]->in[1]->op) gr.n = 0;
            if (gr.n < 2) continue;
        }
        take(&gr, taken);
        *n_joined += gr.n;
        at[i] = gr;
        groups++;
    }
    sn_status st = SN_OK;
    sn_rewrite r;
    if (groups && !(st = sn_rewrite_begin(&r, in, e))) {
        for (int i = 0; i < in->n_nodes; i++) {
            if (at[i].n >= 2) join(&r, &at[i]); /* maps every member */
            else if (!taken[i]) sn_rewrite_copy(&r, in->nodes[i]);
        }
        st = sn_rewrite_end(&r, "siblings", out, e);
    }
    free(uses);
    free(taken);
    free(at);
    return st;
}
