/* memplan.c: live ranges over the kernel order and arena offsets for the values that are not
 * persistent (and values written in place into the persistent value computed from them).
 * Convention: greedy by size (largest first), each value placed in the lowest gap among the
 * already-placed values whose live ranges overlap its own; 64-byte alignment.
 * The persistent block starts with the trained parameters (the ones weight decay applies to
 * first), then their gradients in the same order, so that an optimizer sees each as one flat
 * range of the same layout (kernel.h, "the optimizer step"), and their 16-bit copies (weight
 * shadows) after them in that layout at half the size; what it placed is written down in the
 * program's parameter layout (program.h), which is how everyone else finds it. The parts of a
 * frozen block (program.h) come next, one after the other; then every other persistent value. */
#include <inttypes.h>
#include <stdlib.h>

#include "passes.h"

enum { ALIGN = SN_VALUE_ALIGN, F32_BYTES = sizeof(float) }; /* F32_BYTES: a trained parameter's element */

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* Whether every access of pointwise kernel k to args[a] reads element i at index i. */
static bool reads_in_step(const sn_kernel *k, int a) {
    bool read = false;
    for (int j = 0; j < k->n_access; j++) {
        const sn_access *x = &k->access[j];
        if (x->arg != a) continue;
        if (x->offset || x->masked) return false;
        int64_t stride = 1;
        for (int d = k->rank - 1; d >= 0; d--) {
            if (k->shape[d] > 1 && x->stride[d] != stride) return false;
            stride *= k->shape[d];
        }
        read = true;
    }
    return read;
}

/* In place: a pointwise kernel that writes a persistent value (a gradient) from an arena value
 * of the same size that no other kernel reads, read element for element, writes over it: the
 * arena value becomes an alias of the output, so its writer writes the output's buffer (the
 * tied LM head's (V, C) weight gradient goes straight into the gradient that the embedding
 * backward's part is added to). Of several such inputs, the one written first. Chains too: a
 * sum added up kernel after kernel into the persistent value (chunk_logits' weight gradient,
 * dW = dW_0 + dW_1 + ...) writes every partial sum over it, so it takes one buffer, not one a
 * chunk (kernels are visited last first, and an output that became an alias counts as its root).
 * A GEMM with accum (kernel.h: its sum + c) counts as such a kernel for its c and y. */
static void share_in_place(sn_program *p, int *readers, int *writer) {
    for (int v = 0; v < p->n_values; v++) readers[v] = 0, writer[v] = -1;
    for (int k = 0; k < p->n_kernels; k++)
        for (const sn_kernel *ker = p->kernels[k]; ker; ker = ker->tail) /* a joined FINISH too */
            for (int a = 0; a < ker->n_out + ker->n_in; a++) {
                int v = sn_value_root(p, p->value_of[ker->args[a]->id]);
                if (a >= ker->n_out) readers[v]++;
                else if (writer[v] < 0) writer[v] = k;
            }
    for (int k = p->n_kernels - 1; k >= 0; k--) { /* last first: a chain ends in the persistent value */
        const sn_kernel *ker = p->kernels[k];
        /* a GEMM adding its product to C (kernel.h accum) reads C element for element, in D's
           layout: cuBLASLt's in-place C == D */
        bool accum = ker->kind == SN_KER_GEMM && ker->gemm.accum;
        if (ker->kind != SN_KER_POINTWISE && !accum) continue;
        for (int o = 0; o < (accum ? 1 : ker->n_out); o++) { /* accum: C == D, y alone */
            int w = sn_value_root(p, p->value_of[ker->args[o]->id]), best = -1;
            const sn_value *out = &p->values[w];
            if (!out->persistent || sn_op_kind(out->node->op) == SN_K_LEAF) continue;
            for (int a = accum ? ker->n_out + ker->n_in - 1 : ker->n_out; a < ker->n_out + ker->n_in; a++) {
                int v = p->value_of[ker->args[a]->id];
                const sn_value *in = &p->values[v];
                if (in->alias >= 0 || in->persistent || in->bytes != out->bytes || readers[v] != 1 ||
                    writer[v] < 0 || writer[v] >= k || (!accum && !reads_in_step(ker, a)))
                    continue;
                if (best < 0 || writer[v] < writer[best]) best = v;
            }
            if (best >= 0) p->values[best].alias = w;
        }
    }
}

/* Kernel ker's values live at k: a joined FINISH's (kernel.h: tail) at its host's launch. */
static void live_at(sn_program *p, const sn_kernel *ker, int k) {
    if (ker->stage != SN_SUM_WHOLE) { /* the partial sums: PARTIAL writes, FINISH reads */
        sn_value *val = &p->values[ker->scratch];
        if (val->first < 0) val->first = k;
        val->last = k;
    }
    for (int a = 0; a < ker->n_out + ker->n_in; a++) {
        int v = sn_value_root(p, p->value_of[ker->args[a]->id]);
        sn_value *val = &p->values[v];
        if (a < ker->n_out && val->first < 0) val->first = k;
        if (k > val->last) val->last = k;
    }
    if (ker->tail) live_at(p, ker->tail, k);
}

static void fill_live_ranges(sn_program *p) {
    for (int k = 0; k < p->n_kernels; k++) live_at(p, p->kernels[k], k);
}

static int by_size_desc(const void *a, const void *b, void *ctx) {
    const sn_program *p = ctx;
    int64_t sa = p->values[*(const int *)a].bytes, sb = p->values[*(const int *)b].bytes;
    if (sa != sb) return sa < sb ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

static int by_offset(const void *a, const void *b, void *ctx) {
    const sn_program *p = ctx;
    int64_t oa = p->values[*(const int *)a].offset, ob = p->values[*(const int *)b].offset;
    return oa < ob ? -1 : oa > ob;
}

static bool overlap(const sn_value *a, const sn_value *b) { return a->first <= b->last && b->first <= a->last; }

/* The value of node n when it is a persistent root not placed yet, else -1. */
static int unplaced(const sn_program *p, const sn_node *n, const bool *placed) {
    int v = n ? p->value_of[n->id] : -1;
    return v >= 0 && p->values[v].alias < 0 && p->values[v].persistent && !placed[v] ? v : -1;
}

/* The weight-decay rule, here only (the layout carries it to the trainer): matrices and
 * embeddings decay, biases and norm gains (rank 1) do not (GPT-2's, llm.c's). */
static bool decays(const sn_node *n) { return n->rank >= 2; }

/* Whether memplan gives PARAM n a place in the flat ranges: it trains (not frozen, a gradient
 * reaches it) and the program keeps it and its gradient. */
static bool trains(const sn_program *p, const sn_node *n) {
    int v = p->value_of[n->id], gv = n->grad ? p->value_of[n->grad->id] : -1;
    return !n->a.frozen && v >= 0 && gv >= 0 && p->values[v].alias < 0 && p->values[gv].alias < 0 &&
           p->values[v].persistent && p->values[gv].persistent;
}

/* The layout's slots, one a PARAM in graph order, frozen until placed. */
static sn_status new_slots(sn_program *p, sn_err *e) {
    const sn_graph *g = p->g;
    sn_param_layout *l = &p->layout;
    *l = (sn_param_layout){.params = -1, .grads = -1, .low = SN_F32, .shadows = -1};
    for (int i = 0; i < g->n_nodes; i++) l->n += g->nodes[i]->op == SN_OP_PARAM;
    l->slots = sn_arena_alloc(&p->arena, sizeof *l->slots * (size_t)(l->n + 1));
    if (!l->slots) return sn_fail(e, SN_ERR_OOM, "out of memory for the parameter layout");
    for (int i = 0, k = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_PARAM) continue;
        l->slots[k++] = (sn_param_slot){.node = n, .dtype = n->dtype, .numel = sn_numel(n),
                                        .value = -1, .grad = -1, .shadow = -1, .flat = -1,
                                        .frozen = !trains(p, n)};
    }
    return SN_OK;
}

/* The persistent order: trained parameters (decayed first; in graph order, or reversed), their
 * gradients in the same order and spacing, then the 16-bit copies of the trained parameters
 * (program.h: weight shadows) in a range of half the parameters' bytes, each at half its
 * parameter's offset, so that AdamW writes copy element i with parameter element i (kernel.h:
 * flat_low). The layout's flat ranges are written here; the rest of its offsets at the end. */
/* The frozen block (program.h) of weight shadows whose part k is PARAM n's shadow, or NULL. */
static const sn_node *shadow_block(const sn_program *p, const sn_node *n, int *k) {
    for (int v = 0; v < p->n_values; v++) {
        const sn_node *b = p->values[v].node;
        if (!b || p->values[v].alias < 0 || !sn_frozen_block(b)) continue;
        for (*k = 0; *k < b->n_in; (*k)++)
            if (b->in[*k]->op == SN_OP_CAST && b->in[*k]->in[0] == n) return b;
    }
    return NULL;
}

/* Trained PARAM n (pass < 2) or its gradient at the end of the persistent block. */
static void place_trained(sn_program *p, sn_param_slot *s, int pass, bool *placed) {
    int v = p->value_of[(pass < 2 ? s->node : s->node->grad)->id];
    placed[v] = true;
    p->values[v].offset = p->persistent_bytes;
    if (pass < 2) s->flat = p->persistent_bytes / F32_BYTES, s->decay = pass == 0;
    p->persistent_bytes += align_up(p->values[v].bytes);
}

static void place_persistent(sn_program *p, sn_param_order order, bool *placed) {
    sn_param_layout *l = &p->layout;
    int64_t params_end = 0;
    for (int pass = 0; pass < 4; pass++) {
        if (pass == 2) params_end = p->persistent_bytes;
        if (pass == 1) l->flat_decay = p->persistent_bytes / F32_BYTES;
        for (int j = 0; j < l->n; j++) {
            sn_param_slot *s = &l->slots[order == SN_PARAM_ORDER_REVERSED ? l->n - 1 - j : j];
            if (s->frozen || (pass % 2 == 0) != decays(s->node)) continue;
            int k;
            const sn_node *b = shadow_block(p, s->node, &k);
            for (int i = 0; b && i < b->n_in; i++) { /* every part trained (else place_blocks
                                                        names the block: a bug in sinter) */
                const sn_param_slot *q = sn_param_layout_find(l, b->in[i]->in[0]);
                if (!q || q->frozen) b = NULL;
            }
            if (!b) {
                place_trained(p, s, pass, placed);
                continue;
            }
            /* a block's parameters one after the other in its order, where its first comes
               (their shadows, at half their offsets, are then too); their gradients likewise */
            if (k) continue;
            for (int i = 0; i < b->n_in; i++)
                place_trained(p, (sn_param_slot *)sn_param_layout_find(l, b->in[i]->in[0]), pass, placed);
        }
    }
    if (params_end) l->params = 0, l->grads = params_end, l->flat_n = params_end / F32_BYTES;
    int64_t copies = p->persistent_bytes;
    bool any = false;
    sn_dtype low = p->n_shadows ? p->shadows[0]->args[0]->dtype : SN_F32; /* one dtype a range */
    for (int k = 0; k < p->n_shadows; k++) {
        const sn_kernel *c = p->shadows[k];
        int v = unplaced(p, c->args[0], placed), pv = p->value_of[c->args[1]->id];
        if (v < 0 || pv < 0 || !placed[pv] || !p->values[pv].persistent ||
            p->values[pv].offset >= params_end || c->args[0]->dtype != low)
            continue; /* not a trained parameter's */
        placed[v] = any = true;
        p->values[v].offset = copies + p->values[pv].offset / 2;
    }
    if (any) {
        p->persistent_bytes = copies + align_up(params_end / 2);
        l->low = low, l->shadows = copies;
    }
}

/* The parts of every frozen block (program.h) one after the other in the persistent block, in
 * their order, where the block's alias (its first part's place) reads them as one; a block
 * over parts placed apart already is a bug in sinter. */
static sn_status place_blocks(sn_program *p, bool *placed, sn_err *e) {
    for (int v = 0; v < p->n_values; v++) {
        const sn_node *n = p->values[v].node;
        if (p->values[v].alias < 0 || !n || !sn_frozen_block(n)) continue;
        int64_t at = -1;
        for (int k = 0; k < n->n_in; k++) {
            int pv = p->value_of[n->in[k]->id];
            sn_value *part = &p->values[pv];
            if (!placed[pv]) {
                placed[pv] = true;
                part->offset = p->persistent_bytes;
                p->persistent_bytes += align_up(part->bytes);
            }
            if (at >= 0 && part->offset != at)
                return sn_fail(e, SN_ERR_INTERNAL, "memplan: the parts of node %%%d (a "
                               "concatenation of frozen parameters read in place) are not one "
                               "after the other (%s at byte %" PRId64 ", not %" PRId64 ")", n->id,
                               n->in[k]->name, part->offset, at);
            at = part->offset + part->bytes;
        }
    }
    return SN_OK;
}

/* The layout's offsets, once every value has its place. */
static void fill_slots(sn_program *p) {
    sn_param_layout *l = &p->layout;
    for (int j = 0; j < l->n; j++) {
        sn_param_slot *s = &l->slots[j];
        int v = p->value_of[s->node->id];
        if (v >= 0 && p->values[v].persistent) s->value = p->values[v].offset;
        if (!s->frozen) s->grad = p->values[p->value_of[s->node->grad->id]].offset;
        for (int k = 0; k < p->n_shadows; k++) { /* its weight shadow: its cast kernel's output */
            const sn_kernel *c = p->shadows[k];
            int cv = c->args[1] == s->node ? p->value_of[c->args[0]->id] : -1;
            if (cv >= 0 && p->values[cv].persistent) s->shadow = p->values[cv].offset;
        }
    }
}

sn_status sn_memplan(sn_program *p, const sn_target *t, sn_param_order param_order, sn_err *e) {
    sn_status s = new_slots(p, e);
    if (s) return s;
    size_t n_bytes = sizeof(int) * (size_t)(p->n_values + 1);
    int *order = sn_malloc(n_bytes, "the memory planner's value order", e);
    int *near = order ? sn_malloc(n_bytes, "the memory planner's value order", e) : NULL;
    if (near) share_in_place(p, order, near);
    fill_live_ranges(p);
    bool *placed = near ? sn_calloc((size_t)p->n_values + 1, sizeof *placed, "the memory planner", e) : NULL;
    if (!placed) {
        free(order);
        free(near);
        return SN_ERR_OOM;
    }
    int n = 0;
    p->persistent_bytes = p->arena_bytes = p->sum_bytes = 0;
    place_persistent(p, param_order, placed);
    if ((s = place_blocks(p, placed, e))) {
        free(order);
        free(near);
        free(placed);
        return s;
    }
    for (int v = 0; v < p->n_values; v++) {
        sn_value *val = &p->values[v];
        if (val->alias >= 0 || placed[v]) continue;
        if (val->persistent) {
            val->offset = p->persistent_bytes;
            p->persistent_bytes += align_up(val->bytes);
        } else {
            order[n++] = v;
            p->sum_bytes += val->bytes;
        }
    }
    qsort_r(order, (size_t)n, sizeof *order, by_size_desc, p);
    for (int i = 0; i < n; i++) {
        sn_value *val = &p->values[order[i]];
        int m = 0;
        for (int j = 0; j < i; j++)
            if (overlap(val, &p->values[order[j]])) near[m++] = order[j];
        qsort_r(near, (size_t)m, sizeof *near, by_offset, p);
        /* the smallest gap that fits, else after the last */
        int64_t at = 0, best = -1, best_gap = INT64_MAX, need = align_up(val->bytes);
        for (int j = 0; j < m; j++) {
            const sn_value *o = &p->values[near[j]];
            if (o->offset - at >= need && o->offset - at < best_gap) {
                best = at;
                best_gap = o->offset - at;
            }
            int64_t end = o->offset + align_up(o->bytes);
            if (end > at) at = end;
        }
        val->offset = best >= 0 ? best : at;
        if (val->offset + val->bytes > p->arena_bytes) p->arena_bytes = val->offset + val->bytes;
    }
    for (int v = 0; v < p->n_values; v++) { /* aliases take their root's place */
        sn_value *val = &p->values[v];
        if (val->alias < 0) continue;
        const sn_value *r = &p->values[sn_value_root(p, v)];
        val->offset = r->offset;
        val->persistent = r->persistent;
        val->first = r->first;
        val->last = r->last;
    }
    free(order);
    free(near);
    free(placed);
    fill_slots(p);
    if ((s = sn_param_layout_check(p, e))) return s;
    int64_t total = p->arena_bytes + p->persistent_bytes;
    if (t->memory_bytes > 0 && total > t->memory_bytes) {
        char need[32], have[32];
        return sn_fail(e, SN_ERR_OOM, "out of memory: the program needs %s (arena %" PRId64
                       " + persistent %" PRId64 " bytes) but %s has %s: use a smaller --batch or "
                       "--seq, or a smaller model", sn_bytes_str(total, need, sizeof need),
                       p->arena_bytes, p->persistent_bytes, t->name,
                       sn_bytes_str(t->memory_bytes, have, sizeof have));
    }
    return SN_OK;
}
