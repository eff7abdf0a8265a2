/* param_layout.c: the parameter layout's lookup and its check against the program (program.h),
 * and which concatenations of parameters are frozen blocks (program.h).
 * Convention: the layout is memplan's to write; this file works nothing out for a reader, it
 * only says whether the table and the program's values agree. Disagreement is a bug in sinter
 * (SN_ERR_INTERNAL), never the user's. */
#include <inttypes.h>

#include "program.h"

enum { F32_BYTES = sizeof(float) }; /* a trained parameter's element */

bool sn_frozen_block(const sn_node *n) {
    if (n->op != SN_OP_CONCAT || n->a.axis != 0 || n->n_in < 2) return false;
    for (int k = 0; k < n->n_in; k++) {
        const sn_node *x = n->in[k];
        bool shadow = x->op == SN_OP_CAST && x->in[0]->op == SN_OP_PARAM && !x->in[0]->a.frozen &&
                      x->in[0]->dtype == SN_F32 && sn_dtype_bits(x->dtype) == 16;
        if (!(shadow || (x->op == SN_OP_PARAM && x->a.frozen)) || x->dtype != n->dtype ||
            x->op != n->in[0]->op || sn_numel(x) * (sn_dtype_bits(x->dtype) / 8) % SN_VALUE_ALIGN)
            return false; /* every part of one kind */
    }
    return true;
}

const sn_param_slot *sn_param_layout_find(const sn_param_layout *l, const sn_node *n) {
    for (int i = 0; i < l->n; i++)
        if (l->slots[i].node == n) return &l->slots[i];
    return NULL;
}

int64_t sn_param_layout_trained(const sn_param_layout *l) {
    int64_t n = 0;
    for (int i = 0; i < l->n; i++) n += l->slots[i].frozen ? 0 : l->slots[i].numel;
    return n;
}

/* The persistent offset of node n's value, or -1. */
static int64_t offset_of(const sn_program *p, const sn_node *n) {
    int v = n ? p->value_of[n->id] : -1;
    return v >= 0 && p->values[v].persistent ? p->values[v].offset : -1;
}

/* The weight shadow of parameter n (its cast kernel's output), or NULL. */
static const sn_node *shadow_of(const sn_program *p, const sn_node *n) {
    for (int k = 0; k < p->n_shadows; k++)
        if (p->shadows[k]->args[1] == n) return p->shadows[k]->args[0];
    return NULL;
}

static sn_status broken(sn_err *e, const sn_param_slot *s, const char *what, int64_t got, int64_t want) {
    return sn_fail(e, SN_ERR_INTERNAL, "the parameter layout is broken: parameter %s: %s is %" PRId64
                   ", the program says %" PRId64 " (a bug in sinter: passes/memplan.c writes the "
                   "layout)", s->node->name ? s->node->name : "?", what, got, want);
}

/* A trained slot's places in the flat ranges. */
static sn_status check_flat(const sn_param_layout *l, const sn_param_slot *s, const sn_node *shadow,
                            sn_err *e) {
    if (s->dtype != SN_F32) return broken(e, s, "a trained parameter's dtype", s->dtype, SN_F32);
    if (s->flat < 0 || s->flat + s->numel > l->flat_n)
        return broken(e, s, "its flat element (beyond the range's end)", s->flat, l->flat_n - s->numel);
    int64_t at = F32_BYTES * s->flat; /* bytes into the parameters' and gradients' ranges */
    if (s->value != l->params + at)
        return broken(e, s, "its weights' offset in the parameters' range", s->value, l->params + at);
    if (s->grad != l->grads + at)
        return broken(e, s, "its gradient's offset in the gradients' range", s->grad, l->grads + at);
    int64_t end = s->flat + s->numel;
    if (s->decay ? end > l->flat_decay : s->flat < l->flat_decay)
        return broken(e, s, s->decay ? "the end of a decayed parameter (past the decayed prefix)"
                                     : "the start of a parameter without decay (in the decayed prefix)",
                      s->decay ? end : s->flat, l->flat_decay);
    if (!shadow) return SN_OK;
    int64_t copy = l->shadows + sn_dtype_bits(l->low) / 8 * s->flat;
    if (l->low == SN_F32 || shadow->dtype != l->low)
        return broken(e, s, "its weight shadow's dtype", shadow->dtype, l->low);
    if (s->shadow != copy)
        return broken(e, s, "its weight shadow's offset in the shadows' range", s->shadow, copy);
    return SN_OK;
}

/* No two trained slots share a flat element. */
static sn_status check_disjoint(const sn_param_layout *l, sn_err *e) {
    for (int i = 0; i < l->n; i++)
        for (int j = i + 1; j < l->n; j++) {
            const sn_param_slot *a = &l->slots[i], *b = &l->slots[j];
            if (a->frozen || b->frozen) continue;
            if (a->flat < b->flat + b->numel && b->flat < a->flat + a->numel)
                return sn_fail(e, SN_ERR_INTERNAL, "the parameter layout is broken: parameters %s "
                               "and %s overlap in the flat range (a bug in sinter: "
                               "passes/memplan.c writes the layout)", a->node->name, b->node->name);
        }
    return SN_OK;
}

sn_status sn_param_layout_check(const sn_program *p, sn_err *e) {
    const sn_param_layout *l = &p->layout;
    const sn_graph *g = p->g;
    int i = 0;
    bool any = false;
    for (int k = 0; k < g->n_nodes; k++) {
        const sn_node *n = g->nodes[k];
        if (n->op != SN_OP_PARAM) continue;
        if (i >= l->n || l->slots[i].node != n)
            return sn_fail(e, SN_ERR_INTERNAL, "the parameter layout is broken: parameter %s is "
                           "not its slot %d (a bug in sinter: passes/memplan.c writes the layout)",
                           n->name, i);
        const sn_param_slot *s = &l->slots[i++];
        const sn_node *shadow = shadow_of(p, n);
        if (s->numel != sn_numel(n)) return broken(e, s, "its element count", s->numel, sn_numel(n));
        if (s->dtype != n->dtype) return broken(e, s, "its dtype", s->dtype, n->dtype);
        if (s->value != offset_of(p, n))
            return broken(e, s, "its weights' offset", s->value, offset_of(p, n));
        if (s->shadow != offset_of(p, shadow))
            return broken(e, s, "its weight shadow's offset", s->shadow, offset_of(p, shadow));
        bool trains = !n->a.frozen && n->grad && s->value >= 0 && offset_of(p, n->grad) >= 0;
        if (s->frozen == trains) return broken(e, s, "its frozen flag", s->frozen, !trains);
        if (s->frozen && (s->grad >= 0 || s->flat >= 0 || s->decay))
            return broken(e, s, "a frozen parameter's gradient, flat element or decay", -1, -1);
        sn_status st = s->frozen ? SN_OK : check_flat(l, s, shadow, e);
        if (st) return st;
        any |= !s->frozen;
    }
    if (l->low == SN_F32 ? l->shadows != -1 : l->shadows < 0 || l->shadows % 64 || !any)
        return sn_fail(e, SN_ERR_INTERNAL, "the parameter layout is broken: the weight shadows' "
                       "range (%s at %" PRId64 ") is misplaced (a bug in sinter: passes/memplan.c)",
                       sn_dtype_name(l->low), l->shadows);
    if (i != l->n)
        return sn_fail(e, SN_ERR_INTERNAL, "the parameter layout is broken: %d slots for the "
                       "graph's %d parameters (a bug in sinter: passes/memplan.c)", l->n, i);
    int64_t range = F32_BYTES * l->flat_n;
    if (!any ? l->flat_n || l->params >= 0 || l->grads >= 0
             : l->flat_decay < 0 || l->flat_decay > l->flat_n || l->params % 64 || l->grads % 64 ||
                   (l->params < l->grads + range && l->grads < l->params + range))
        return sn_fail(e, SN_ERR_INTERNAL, "the parameter layout is broken: its flat ranges "
                       "(parameters at %" PRId64 ", gradients at %" PRId64 ", %" PRId64 " elements, "
                       "%" PRId64 " decayed) are misplaced or overlap (a bug in sinter: "
                       "passes/memplan.c)", l->params, l->grads, l->flat_n, l->flat_decay);
    return check_disjoint(l, e);
}
