/* offload_up.c: which trained weights an offloaded step sends up as their 16-bit weight shadows
 * (offload.h sn_offload_segments), and in which pieces and order the delayed update sends them
 * during a step's last run (sn_offload_pieces). A parameter whose f32 weights no kernel reads but its own
 * shadow's cast needs only the shadow's bits on the device (the host AdamW writes them, the
 * device kernel's bits: test_offload_adamw); one that a kernel reads in f32 (the embedding's
 * gather of wte, the norms, the biases) goes up in f32 and the executor casts its shadow. */
#include "offload.h"

#include <stdlib.h>
#include <string.h>

/* The trained slot of the layout named as n, or -1. */
static int slot_named(const sn_param_layout *l, const sn_node *n) {
    for (int i = 0; n->name && i < l->n; i++)
        if (!l->slots[i].frozen && l->slots[i].node->name && !strcmp(l->slots[i].node->name, n->name))
            return i;
    return -1;
}

/* Whether training program t has a weight shadow of dtype d for the parameter named as w. */
static bool has_shadow(const sn_program *t, const sn_node *w, sn_dtype d) {
    for (int k = 0; k < t->n_shadows; k++) {
        const sn_node *c = t->shadows[k]->args[0], *tw = t->shadows[k]->args[1];
        if (c->dtype == d && tw->name && w->name && !strcmp(tw->name, w->name)) return true;
    }
    return false;
}

/* Marks in f32[] the trained slots of t's layout whose f32 weights p reads: an argument of one
 * of its step's kernels, or (p another program on t's parameters) of a shadow cast of its own,
 * which the executor makes only where t has no shadow of that dtype (device.h). */
static void mark_f32(const sn_program *t, const sn_program *p, bool *f32) {
    const sn_param_layout *l = &t->layout;
    for (int k = 0; k < p->n_kernels; k++)
        for (const sn_kernel *q = p->kernels[k]; q; q = q->tail)
            for (int a = 0; a < q->n_out + q->n_in; a++) {
                const sn_node *n = q->args[a];
                int i = n->op == SN_OP_PARAM ? slot_named(l, n) : -1;
                if (i >= 0) f32[i] = true;
            }
    for (int k = 0; p != t && k < p->n_shadows; k++) {
        const sn_node *c = p->shadows[k]->args[0], *w = p->shadows[k]->args[1];
        int i = slot_named(l, w);
        if (i >= 0 && !has_shadow(t, w, c->dtype)) f32[i] = true;
    }
}

sn_status sn_offload_segments(const sn_program *t, const sn_program *eval, sn_offload_seg **out,
                              int *n_out, sn_err *e) {
    const sn_param_layout *l = &t->layout;
    *out = NULL, *n_out = 0;
    if (l->low == SN_F32) return SN_OK;
    bool *f32 = sn_calloc((size_t)l->n + 1, sizeof *f32, "the offloaded weights' segments", e);
    char *low = f32 ? sn_calloc((size_t)l->flat_n + 1, 1, "the offloaded weights' segments", e) : NULL;
    sn_offload_seg *seg = low ? sn_calloc(2 * (size_t)l->n + 2, sizeof *seg, "the offloaded "
                                          "weights' segments", e) : NULL;
    if (!seg) {
        free(f32), free(low);
        return SN_ERR_OOM;
    }
    mark_f32(t, t, f32);
    if (eval) mark_f32(t, eval, f32);
    for (int i = 0; i < l->n; i++) {
        const sn_param_slot *s = &l->slots[i];
        if (!s->frozen && s->shadow >= 0 && !f32[i]) memset(low + s->flat, 1, (size_t)s->numel);
    }
    int n = 0; /* runs of the same kind; padding between slots goes with the run before it */
    for (int64_t at = 0; at < l->flat_n;) {
        int64_t end = at;
        while (end < l->flat_n && low[end] == low[at]) end++;
        if (n && seg[n - 1].low == (bool)low[at]) seg[n - 1].n = end - seg[n - 1].lo;
        else seg[n++] = (sn_offload_seg){at, end - at, low[at]};
        at = end;
    }
    bool any = false;
    for (int i = 0; i < n; i++) any |= seg[i].low;
    free(f32), free(low);
    if (!any) {
        free(seg);
        return SN_OK;
    }
    *out = seg, *n_out = n;
    return SN_OK;
}

sn_status sn_offload_pieces(const sn_program *t, const sn_offload_seg *seg, int n_seg,
                            int64_t chunk, sn_offload_piece **pieces, int *n,
                            sn_offload_range **parts, int *n_parts, sn_err *e) {
    const sn_param_layout *l = &t->layout;
    int64_t chunks = chunk > 0 ? (l->flat_n + chunk - 1) / chunk : 0;
    int most = (int)chunks * (seg ? n_seg : 1);
    const char *what = "the delayed update's pieces";
    sn_offload_piece *pc = sn_calloc((size_t)most + 1, sizeof *pc, what, e);
    sn_offload_range *pt = pc ? sn_calloc((size_t)most + 1, sizeof *pt, what, e) : NULL;
    *pieces = NULL, *parts = NULL, *n = *n_parts = 0;
    if (!pt) {
        free(pc);
        return SN_ERR_OOM;
    }
    sn_offload_seg all = {0, l->flat_n, false};
    int np = 0;
    for (int64_t k = 0; k < chunks; k++) {
        int64_t lo = k * chunk, hi = lo + chunk < l->flat_n ? lo + chunk : l->flat_n;
        for (int i = 0; i < (seg ? n_seg : 1); i++) {
            const sn_offload_seg *g = seg ? &seg[i] : &all;
            int64_t a = g->lo > lo ? g->lo : lo, z = g->lo + g->n < hi ? g->lo + g->n : hi;
            if (a >= z) continue;
            int w = g->low ? 2 : 4;
            sn_offload_piece q = {a, z - a, g->low,
                                  sn_program_last_use(t, (g->low ? l->shadows : l->params) + w * a,
                                                      w * (z - a)), 0};
            int j = np++; /* by `after`, in the flat order among equals (insertion) */
            for (; j > 0 && pc[j - 1].after > q.after; j--) pc[j] = pc[j - 1];
            pc[j] = q;
        }
    }
    int parts_n = 0;
    for (int i = 0; i < np; i++) { /* each piece joins the part before where their ranges touch */
        sn_offload_range *p = parts_n ? &pt[parts_n - 1] : NULL;
        if (p && pc[i].lo == p->lo + p->n) p->n += pc[i].n;
        else if (p && pc[i].lo + pc[i].n == p->lo) p->lo = pc[i].lo, p->n += pc[i].n;
        else pt[parts_n++] = (sn_offload_range){pc[i].lo, pc[i].n};
        pc[i].part = parts_n - 1;
    }
    *pieces = pc, *n = np, *parts = pt, *n_parts = parts_n;
    return SN_OK;
}
