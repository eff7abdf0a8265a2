/* recompute.c: activation checkpointing (sn_pass_recompute): which forward values the backward
 * reads as the forward left them ("available") and which it recomputes, and the rewrite. A
 * recomputed value is a copy of its forward node over available or recomputed inputs, emitted
 * once, just before the first backward node that reads it (kernels run in graph order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/rewrite.h"
#include "support/hash.h"
#include "passes.h"

static bool is_view(sn_op op) { return sn_op_kind(op) == SN_K_LAYOUT && op != SN_OP_CONCAT; }
static bool is_leaf(sn_op op) { return sn_op_kind(op) == SN_K_LEAF; }

typedef struct {
    const sn_graph *g;
    const sn_target *t;
    int nf;           /* forward nodes: ids [0, nf) */
    bool *act;        /* [nf] computed from an INPUT (an activation, not a leaf nor weights only) */
    bool *out;        /* [nf] an output or the loss: kept anyway */
    bool *bwd_read;   /* [nf] read by a backward node */
    int *sep, n_sep;  /* separators: activations no activation edge jumps over, forward order */
    int *bound, n_bound; /* the separators that bound the repeated units' segments (sub-blocks) */
    int period;       /* segments per repeating unit (a transformer block's 2 sub-blocks) */
    bool *keep;       /* [nf] chosen: kept although inside a recomputed stretch */
    bool *avail, *need; /* [nf] scratch of fill_need */
    int *cand;        /* [nf] scratch of rank_candidates: the candidates */
    double *ratio;    /* [nf] and their last ratio (-1: taken) */
    int *order;       /* [nf] scratch of choose_budget */
    int last_kept;    /* the last kept boundary: nodes after it are available */
    double *flops;    /* [g->n_nodes] */
    int *cover;       /* [nf + 1] scratch of fill_structure */
    sn_node **rmap;   /* [nf] the recomputed copy of a forward node (rewrite) */
    sn_err *e;
} rc_state;

/* ---- costs ---- */

/* FLOPs of a node as the kernels run it: GEMMs 2MNK, attention its causal pairs (attention_lse
 * is computed by its attention's kernel), every other op a few per element. */
static double node_flops(const sn_node *n) {
    double numel = (double)sn_numel(n);
    switch (sn_op_kind(n->op)) {
    case SN_K_LEAF: case SN_K_LAYOUT: return 0;
    case SN_K_MATMUL: {
        const sn_node *a = n->in[0];
        return 2.0 * numel * (double)a->shape[a->rank - 1 - n->a.ta];
    }
    case SN_K_ATTENTION: {
        if (n->op == SN_OP_ATTENTION_LSE) return 0;
        const sn_node *q = n->in[0], *k = n->in[1];
        double T = (double)q->shape[q->rank - 2], S = (double)k->shape[k->rank - 2];
        double D = (double)q->shape[q->rank - 1], bh = (double)sn_numel(q) / (T * D);
        double pairs = T * (T + 1) / 2 + T * (S - T);
        int products = n->op == SN_OP_ATTENTION || n->op == SN_OP_ATTENTION_BWD_V ? 2 : 3;
        return bh * pairs * D * 2.0 * products;
    }
    case SN_K_ROW: return 5 * (double)sn_numel(n->in[0]);
    case SN_K_REDUCE: return (double)sn_numel(n->in[0]);
    default: return numel;
    }
}

static int64_t node_bytes(const sn_node *n) { return sn_numel(n) * sn_dtype_bits(n->dtype) / 8; }

/* ---- structure: separators and repeating units ---- */

/* Activations, readers from the backward, separators. */
static void fill_structure(rc_state *s) {
    const sn_graph *g = s->g;
    int nf = s->nf, *cover = s->cover;
    for (int i = 0; i < nf; i++) {
        const sn_node *n = g->nodes[i];
        s->act[i] = n->op == SN_OP_INPUT;
        for (int k = 0; k < n->n_in && !is_leaf(n->op); k++) s->act[i] |= s->act[n->in[k]->id];
    }
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i]->id < nf) s->out[g->outputs[i]->id] = true;
    if (g->loss && g->loss->id < nf) s->out[g->loss->id] = true;
    for (int i = nf; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i]->n_in; k++)
            if (g->nodes[i]->in[k]->id < nf) s->bwd_read[g->nodes[i]->in[k]->id] = true;
    /* an activation edge u -> v covers the positions strictly between them */
    for (int v = 0; v < nf; v++) {
        const sn_node *n = g->nodes[v];
        for (int k = 0; k < n->n_in; k++) {
            int u = n->in[k]->id;
            if (!s->act[u] || is_leaf(g->nodes[u]->op) || v - u < 2) continue;
            cover[u + 1]++;
            cover[v]--;
        }
    }
    int c = 0;
    s->n_sep = 0;
    for (int i = 0; i < nf; i++) {
        c += cover[i];
        const sn_node *n = g->nodes[i];
        if (!c && s->act[i] && !is_leaf(n->op) && !is_view(n->op)) s->sep[s->n_sep++] = i;
    }
}

/* A segment's shape: its nodes' ops and types, in order (names and ids left out). */
static uint64_t segment_sig(const rc_state *s, int from, int to) {
    uint64_t h = SN_HASH_INIT;
    for (int i = from; i <= to; i++) {
        const sn_node *n = s->g->nodes[i];
        if (!s->act[i]) continue;
        uint64_t w[2 + SN_MAX_RANK] = {(uint64_t)n->op, (uint64_t)n->rank};
        for (int d = 0; d < n->rank; d++) w[2 + d] = (uint64_t)n->shape[d];
        for (int k = 0; k < 2 + n->rank; k++) h = sn_hash_word(h, w[k]);
    }
    return h;
}

/* The repeating units: segment k runs from after separator k-1 to separator k. The period is
 * the shift under which most segments look alike (a transformer block: attention and MLP
 * sub-blocks, period 2); the units run from the first segment that repeats for as long as the
 * segments repeat. s->bound gets the separators around the run's segments. */
static void fill_units(rc_state *s, uint64_t *sig) {
    int n = s->n_sep;
    for (int k = 0; k < n; k++) sig[k] = segment_sig(s, k ? s->sep[k - 1] + 1 : 0, s->sep[k]);
    int best = 0, p = 0;
    for (int q = 1; q <= n / 2; q++) {
        int m = 0;
        for (int k = 0; k + q < n; k++) m += sig[k] == sig[k + q];
        if (m > best) best = m, p = q;
    }
    s->n_bound = 0;
    s->period = p;
    if (!p) return;
    int k0 = 0;
    while (sig[k0] != sig[k0 + p]) k0++;
    int units = 1;
    while (k0 + (units + 1) * p <= n) {
        bool same = true;
        for (int j = 0; j < p && same; j++) same = sig[k0 + units * p + j] == sig[k0 + j];
        if (!same) break;
        units++;
    }
    /* the boundaries: the separator before the run (if any), then each segment's end */
    if (k0 > 0) s->bound[s->n_bound++] = s->sep[k0 - 1];
    for (int k = k0; k < k0 + units * p; k++) s->bound[s->n_bound++] = s->sep[k];
}

/* ---- what is available, what must be recomputed ---- */

/* Keeps every `every`-th boundary (counting from the first) and the last; clears the rest. */
static void keep_boundaries(rc_state *s, int every) {
    memset(s->keep, 0, (size_t)s->nf);
    s->last_kept = -1;
    for (int b = 0; b < s->n_bound; b++)
        if (b % every == 0 || b == s->n_bound - 1) {
            s->keep[s->bound[b]] = true;
            s->last_kept = s->bound[b];
        }
}

/* Whether forward node n is a copy of weights: a concatenation of parameters (or of their
 * casts, or of dequantized NF4 weights), or its cast (passes/siblings.c: products of one x made
 * one). Not an activation, but as large as its weights and made again by a copy: recomputed
 * like the stretch around it. */
static bool weights_copy(const sn_node *n) {
    if (n->op == SN_OP_CAST) n = n->in[0];
    if (n->op != SN_OP_CONCAT) return false;
    for (int k = 0; k < n->n_in; k++) {
        const sn_node *x = n->in[k]->op == SN_OP_CAST ? n->in[k]->in[0] : n->in[k];
        if (!is_leaf(x->op) && x->op != SN_OP_DEQUANT_NF4) return false;
    }
    return true;
}

/* avail: what the backward reads from the forward; need: what it recomputes. Returns the
 * recompute FLOPs. */
static double fill_need(rc_state *s) {
    const sn_graph *g = s->g;
    for (int i = 0; i < s->nf; i++) {
        const sn_node *n = g->nodes[i];
        bool a = !s->act[i] || is_leaf(n->op) || s->keep[i] || s->out[i] || i > s->last_kept;
        if (!s->act[i] && !s->out[i] && i <= s->last_kept && weights_copy(n)) a = false;
        if (!a && is_view(n->op)) a = s->avail[n->in[0]->id];
        s->avail[i] = a;
    }
    /* an attention's lse goes with it: recomputed together in one kernel as in the forward (an
     * attention given a kept lse would normalise differently and change the bits) */
    for (int i = 0; i < s->nf; i++) {
        const sn_node *n = g->nodes[i], *lse = n->op == SN_OP_ATTENTION ? n->in[3] : NULL;
        if (lse && lse->op == SN_OP_ATTENTION_LSE && !s->out[lse->id]) s->avail[lse->id] = s->avail[i];
    }
    for (int i = 0; i < s->nf; i++) s->need[i] = !s->avail[i] && s->bwd_read[i];
    double f = 0;
    for (int i = s->nf - 1; i >= 0; i--) {
        if (!s->need[i]) continue;
        const sn_node *n = g->nodes[i];
        f += s->flops[i];
        for (int k = 0; k < n->n_in; k++)
            if (!s->avail[n->in[k]->id]) s->need[n->in[k]->id] = true;
    }
    return f;
}

/* ---- the rewrite ---- */

static sn_node *recompute(rc_state *s, sn_rewrite *r, const sn_node *x);

/* The new node a backward (or recomputed) node reads for forward-or-backward node x. */
static sn_node *operand(rc_state *s, sn_rewrite *r, const sn_node *x) {
    if (x->id >= s->nf || s->avail[x->id]) return r->map[x->id];
    return recompute(s, r, x);
}

static sn_node *recompute(rc_state *s, sn_rewrite *r, const sn_node *x) {
    if (s->rmap[x->id]) return s->rmap[x->id];
    sn_node *in[SN_MAX_INPUTS];
    sn_node p = sn_rewrite_proto(r, x, in);
    for (int k = 0; k < x->n_in; k++)
        if (!(in[k] = operand(s, r, x->in[k]))) return NULL;
    p.name = NULL; /* a copy is not the INPUT or PARAM (never recomputed) */
    return s->rmap[x->id] = sn_rewrite_emit(r, NULL, &p);
}

/* The graph with the current choice applied (fill_need first); *n_recomputed counts copies. */
static sn_status rewrite(rc_state *s, sn_graph **out, int *n_recomputed) {
    const sn_graph *g = s->g;
    sn_rewrite r;
    sn_status st = sn_rewrite_begin(&r, g, s->e);
    if (st) return st;
    memset(s->rmap, 0, sizeof *s->rmap * (size_t)s->nf);
    for (int i = 0; i < s->nf; i++) sn_rewrite_copy(&r, g->nodes[i]);
    r.g->has_backward = true; /* recomputed values belong to the backward */
    for (int i = s->nf; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        sn_node *in[SN_MAX_INPUTS];
        sn_node p = sn_rewrite_proto(&r, n, in);
        for (int k = 0; k < n->n_in; k++) in[k] = operand(s, &r, n->in[k]);
        sn_rewrite_emit(&r, n, &p);
    }
    int c = 0;
    for (int i = 0; i < s->nf; i++) c += s->rmap[i] != NULL;
    if (n_recomputed) *n_recomputed = c;
    return sn_rewrite_end(&r, "checkpoint", out, s->e);
}

/* The planned arena of the current choice (rewrite, fuse, memplan). */
static sn_status plan_arena(rc_state *s, int64_t *arena) {
    sn_graph *h;
    sn_status st = rewrite(s, &h, NULL);
    if (st) return st;
    sn_target t = *s->t;
    t.memory_bytes = 0; /* measuring, not refusing */
    sn_program *p;
    if (!(st = sn_fuse(h, &t, true, &p, s->e))) {
        if (!(st = sn_memplan(p, &t, SN_PARAM_ORDER_GRAPH, s->e))) *arena = p->arena_bytes;
        sn_program_free(p);
    }
    sn_graph_free(h);
    return st;
}

/* ---- the budgeted choice ---- */

/* Every `every`-th boundary, for the spacing whose plan is smallest (the arena falls and then
 * rises with the spacing: fewer kept boundaries, longer recomputed stretches). */
static sn_status smallest_spacing(rc_state *s, int *every, int64_t *arena) {
    int64_t best = INT64_MAX;
    int worse = 0;
    *every = 1;
    for (int k = 1; k <= s->n_bound && worse < 2; k++) {
        keep_boundaries(s, k);
        fill_need(s);
        int64_t a;
        sn_status st = plan_arena(s, &a);
        if (st) return st;
        if (a < best) best = a, *every = k, worse = 0;
        else worse++;
    }
    *arena = best;
    return SN_OK;
}

/* Recompute FLOPs saved per byte by keeping node i as well. */
static double keep_ratio(rc_state *s, int i, double base) {
    s->keep[i] = true;
    double f = fill_need(s);
    s->keep[i] = false;
    return (base - f) / (double)node_bytes(s->g->nodes[i]);
}

/* Candidates in the order they are worth keeping: most recompute FLOPs saved per byte kept,
 * each measured against the ones chosen before it (lazily: a candidate's last ratio is an
 * estimate until it is the best, then it is measured again). Returns how many (order[]). */
static int rank_candidates(rc_state *s, int *order) {
    int n = 0, n_cand = 0;
    double base = fill_need(s);
    for (int i = 0; i < s->nf; i++)
        if (s->need[i] && !is_view(s->g->nodes[i]->op) && s->g->nodes[i]->op != SN_OP_ATTENTION_LSE)
            s->cand[n_cand++] = i; /* an lse is kept with its attention */
    for (int c = 0; c < n_cand; c++) s->ratio[c] = keep_ratio(s, s->cand[c], base);
    while (n < n_cand) {
        int best = -1, second = -1;
        for (int c = 0; c < n_cand; c++) {
            if (s->ratio[c] < 0) continue; /* taken */
            if (best < 0 || s->ratio[c] > s->ratio[best]) second = best, best = c;
            else if (second < 0 || s->ratio[c] > s->ratio[second]) second = c;
        }
        double fresh = keep_ratio(s, s->cand[best], base);
        if (second >= 0 && fresh < s->ratio[second]) {
            s->ratio[best] = fresh > 0 ? fresh : 0;
            continue;
        }
        s->ratio[best] = -1;
        s->keep[s->cand[best]] = true;
        base = fill_need(s);
        order[n++] = s->cand[best];
    }
    return n;
}

/* The budget: no checkpointing if it fits; else the spacing with the smallest plan, then
 * candidates kept in rank order while the plan fits (binary search over how many). */
static sn_status choose_budget(rc_state *s, int64_t budget, sn_recompute_stats *st) {
    sn_status r;
    int64_t a;
    keep_boundaries(s, 1);
    s->last_kept = -1; /* everything available */
    fill_need(s);
    if ((r = plan_arena(s, &a))) return r;
    st->full_arena = a;
    if (a <= budget) {
        st->min_arena = a;
        memset(s->keep, 0, (size_t)s->nf);
        return SN_OK;
    }
    int every;
    if ((r = smallest_spacing(s, &every, &st->min_arena))) return r;
    st->every = every;
    if (st->min_arena > budget) {
        char need[32], have[32];
        return sn_fail(s->e, SN_ERR_OOM, "checkpoint: no choice fits the activation budget of %s: "
                       "the smallest plan (every %d of %d sub-block boundaries kept, the rest "
                       "recomputed) needs an arena of %s: give more memory, or a smaller batch",
                       sn_bytes_str(budget, have, sizeof have), every, s->n_bound,
                       sn_bytes_str(st->min_arena, need, sizeof need));
    }
    keep_boundaries(s, every);
    int *order = s->order, n = rank_candidates(s, order);
    int lo = 0, hi = n; /* the largest prefix that fits: prefix lo fits */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        keep_boundaries(s, every);
        for (int i = 0; i < mid; i++) s->keep[order[i]] = true;
        fill_need(s);
        if ((r = plan_arena(s, &a))) break;
        if (a <= budget) lo = mid;
        else hi = mid - 1;
    }
    keep_boundaries(s, every);
    for (int i = 0; i < lo; i++) s->keep[order[i]] = true;
    st->extra_kept = lo;
    return r;
}

/* ---- the pass ---- */

const char *sn_recompute_policy_name(sn_recompute_policy p) {
    static const char *names[] = {"none", "block", "sqrt", "budget"};
    _Static_assert(sizeof names / sizeof names[0] == SN_RECOMPUTE_COUNT, "a policy without a name");
    return (unsigned)p < SN_RECOMPUTE_COUNT ? names[p] : "?";
}

int sn_recompute_policy_parse(const char *s) {
    for (int i = 0; i < SN_RECOMPUTE_COUNT; i++)
        if (!strcmp(s, sn_recompute_policy_name((sn_recompute_policy)i))) return i;
    return -1;
}

static void state_free(rc_state *s) {
    free(s->act);
    free(s->out);
    free(s->bwd_read);
    free(s->sep);
    free(s->bound);
    free(s->keep);
    free(s->avail);
    free(s->need);
    free(s->flops);
    free(s->rmap);
    free(s->cover);
    free(s->cand);
    free(s->ratio);
    free(s->order);
}

sn_status sn_pass_recompute(const sn_graph *in, sn_recompute_policy policy, int64_t budget,
                            const sn_target *t, sn_graph **out, sn_recompute_stats *st, sn_err *e) {
    *out = NULL;
    *st = (sn_recompute_stats){.policy = policy};
    if (!in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint: the graph has no backward part (it runs "
                       "after autodiff: compile with the backward)");
    if ((unsigned)policy >= SN_RECOMPUTE_COUNT)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint: unknown policy %d", (int)policy);
    if (policy == SN_RECOMPUTE_BUDGET && budget <= 0)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint: the budget policy needs a memory budget "
                       "(give --mem)");
    int nf = in->n_forward, n = in->n_nodes;
    const char *what = "the checkpoint pass's per-node tables";
    rc_state s = {.g = in, .t = t, .nf = nf, .e = e};
    s.act = sn_calloc((size_t)nf + 1, 1, what, e);
    s.out = s.act ? sn_calloc((size_t)nf + 1, 1, what, e) : NULL;
    s.bwd_read = s.out ? sn_calloc((size_t)nf + 1, 1, what, e) : NULL;
    s.sep = s.bwd_read ? sn_calloc((size_t)nf + 1, sizeof(int), what, e) : NULL;
    s.bound = s.sep ? sn_calloc((size_t)nf + 1, sizeof(int), what, e) : NULL;
    s.keep = s.bound ? sn_calloc((size_t)nf + 1, 1, what, e) : NULL;
    s.avail = s.keep ? sn_calloc((size_t)nf + 1, 1, what, e) : NULL;
    s.need = s.avail ? sn_calloc((size_t)nf + 1, 1, what, e) : NULL;
    s.flops = s.need ? sn_calloc((size_t)n + 1, sizeof(double), what, e) : NULL;
    s.rmap = s.flops ? sn_calloc((size_t)nf + 1, sizeof(sn_node *), what, e) : NULL;
    s.cover = s.rmap ? sn_calloc((size_t)nf + 1, sizeof(int), what, e) : NULL;
    s.cand = s.cover ? sn_calloc((size_t)nf + 1, sizeof(int), what, e) : NULL;
    s.ratio = s.cand ? sn_calloc((size_t)nf + 1, sizeof(double), what, e) : NULL;
    s.order = s.ratio ? sn_calloc((size_t)nf + 1, sizeof(int), what, e) : NULL;
    uint64_t *sig = s.order ? sn_calloc((size_t)nf + 1, sizeof *sig, what, e) : NULL;
    if (!sig) {
        state_free(&s);
        return SN_ERR_OOM;
    }
    for (int i = 0; i < n; i++) st->step_flops += s.flops[i] = node_flops(in->nodes[i]);
    fill_structure(&s);
    fill_units(&s, sig);
    free(sig);
    st->blocks = s.period && s.n_bound ? (s.n_bound - 1) / s.period : 0;
    st->sub_blocks = s.n_bound ? s.n_bound - 1 : 0;
    sn_status r = SN_OK;
    switch (policy) {
    case SN_RECOMPUTE_NONE: s.last_kept = -1; break;
    case SN_RECOMPUTE_BLOCK: keep_boundaries(&s, s.period ? s.period : 1); break;
    case SN_RECOMPUTE_SQRT: /* Chen et al. 2016: every sqrt(n)-th of n sub-blocks */
        keep_boundaries(&s, st->sub_blocks ? (int)lround(sqrt((double)st->sub_blocks)) : 1);
        break;
    case SN_RECOMPUTE_BUDGET: r = choose_budget(&s, budget, st); break;
    case SN_RECOMPUTE_COUNT: break;
    }
    if (!r) {
        st->extra_flops = fill_need(&s);
        for (int i = 0; i < nf; i++) st->kept += s.keep[i];
        r = rewrite(&s, out, &st->recomputed);
    }
    state_free(&s);
    return r;
}
