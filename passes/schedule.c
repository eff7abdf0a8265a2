/* schedule.c: reorders a fused program's kernels so that large arena values die earlier (a
 * weight-gradient GEMM and what reads its inputs run as soon as those inputs exist, freeing
 * them), keeping every kernel's inputs what they were.
 * Convention: kernel j must follow kernel i (i before j in fuse's order) when both touch a
 * value (following aliases) and one of them writes it; any order that keeps those pairs runs
 * the same kernels on the same bytes, so results are bit-identical. The greedy choice takes,
 * among kernels whose predecessors have run, the one freeing the most arena bytes net of what
 * it allocates when that is positive, else fuse's next kernel; the new order is kept only when
 * its peak of live arena bytes is lower (SN_SCHEDULE_ON). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
    const sn_program *p;
    int n;          /* kernels */
    int *start;     /* [n + 1]: kernel k's distinct roots are root[start[k] .. start[k+1]) */
    int *root;
    bool *writes;   /* parallel to root: k writes it */
    int *by_start;  /* [n_values + 1]: the kernels touching root v, in order, are */
    int *by_kernel; /*   by_kernel[by_start[v] .. by_start[v+1]), with by_write */
    bool *by_write;
    int *pred;      /* [n]: predecessors not yet scheduled */
    int *succ_start, *succ; /* kernel i's successors: succ[succ_start[i] .. succ_start[i+1]) */
    int *users;     /* [n_values]: kernels touching a root not yet scheduled */
    bool *seen;     /* [n_values]: touched by a scheduled kernel */
} sched;

/* The values a kernel touches: its args, then the scratch a PARTIAL kernel writes and its
 * FINISH kernel reads (no arg links the two). */
static int touched(const sn_kernel *k) { return k->n_out + k->n_in + (k->stage != SN_SUM_WHOLE); }

static void sched_free(sched *s) {
    void *all[] = {s->start, s->root, s->writes, s->by_start, s->by_kernel, s->by_write, s->pred,
                   s->succ_start, s->succ, s->users, s->seen};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void *table(size_t n, size_t size, sn_err *e) {
    return sn_calloc(n + 1, size, "the schedule pass's tables", e);
}

/* Each kernel's distinct roots, whether it writes them, and per root its kernels in order. */
static sn_status collect(sched *s, sn_err *e) {
    const sn_program *p = s->p;
    int total = 0, nv = p->n_values;
    for (int k = 0; k < p->n_kernels; k++) total += touched(p->kernels[k]);
    s->n = p->n_kernels;
    if (!(s->start = table((size_t)s->n, sizeof *s->start, e)) ||
        !(s->root = table((size_t)total, sizeof *s->root, e)) ||
        !(s->writes = table((size_t)total, sizeof *s->writes, e)) ||
        !(s->by_start = table((size_t)nv + 1, sizeof *s->by_start, e)) ||
        !(s->by_kernel = table((size_t)total, sizeof *s->by_kernel, e)) ||
        !(s->by_write = table((size_t)total, sizeof *s->by_write, e)) ||
        !(s->users = table((size_t)nv, sizeof *s->users, e)) ||
        !(s->seen = table((size_t)nv, sizeof *s->seen, e)))
        return SN_ERR_OOM;
    int m = 0;
    for (int k = 0; k < s->n; k++) {
        const sn_kernel *ker = p->kernels[k];
        s->start[k] = m;
        for (int a = 0; a < touched(ker); a++) {
            int v = sn_value_root(p, a < ker->n_out + ker->n_in ? p->value_of[ker->args[a]->id] : ker->scratch),
                j = s->start[k];
            while (j < m && s->root[j] != v) j++;
            if (j == m) s->root[m++] = v, s->users[v]++;
            s->writes[j] |= a < ker->n_out || (a == ker->n_out + ker->n_in && ker->stage == SN_SUM_PARTIAL);
        }
    }
    s->start[s->n] = m;
    for (int v = 0; v < nv; v++) s->by_start[v + 1] = s->by_start[v] + s->users[v];
    int *fill = table((size_t)nv, sizeof *fill, e);
    if (!fill) return SN_ERR_OOM;
    for (int k = 0; k < s->n; k++)
        for (int r = s->start[k]; r < s->start[k + 1]; r++) {
            int v = s->root[r], at = s->by_start[v] + fill[v]++;
            s->by_kernel[at] = k;
            s->by_write[at] = s->writes[r];
        }
    free(fill);
    return SN_OK;
}

/* The order constraints: per root, each pair of its kernels of which one writes. Counted
 * (fill NULL), then stored. */
static void constraints(sched *s, int *count, int *fill) {
    const sn_program *p = s->p;
    for (int v = 0; v < p->n_values; v++)
        for (int b = s->by_start[v]; b < s->by_start[v + 1]; b++)
            for (int a = s->by_start[v]; a < b; a++) {
                if (!s->by_write[a] && !s->by_write[b]) continue;
                int i = s->by_kernel[a], j = s->by_kernel[b];
                if (fill) s->succ[fill[i]++] = j;
                else count[i]++, s->pred[j]++;
            }
}

static sn_status build_edges(sched *s, sn_err *e) {
    int *count = table((size_t)s->n, sizeof *count, e);
    if (!count || !(s->pred = table((size_t)s->n, sizeof *s->pred, e)) ||
        !(s->succ_start = table((size_t)s->n + 1, sizeof *s->succ_start, e))) {
        free(count);
        return SN_ERR_OOM;
    }
    constraints(s, count, NULL);
    for (int k = 0; k < s->n; k++) s->succ_start[k + 1] = s->succ_start[k] + count[k];
    if (!(s->succ = table((size_t)s->succ_start[s->n], sizeof *s->succ, e))) {
        free(count);
        return SN_ERR_OOM;
    }
    for (int k = 0; k < s->n; k++) count[k] = s->succ_start[k];
    constraints(s, NULL, count);
    free(count);
    return SN_OK;
}

/* Arena bytes kernel k frees (roots it is the last user of) minus those it brings to life. */
static int64_t net_freed(const sched *s, int k) {
    int64_t d = 0;
    for (int r = s->start[k]; r < s->start[k + 1]; r++) {
        int v = s->root[r];
        const sn_value *x = &s->p->values[v];
        if (x->persistent) continue;
        if (!s->seen[v]) d -= x->bytes;
        if (s->users[v] == 1) d += x->bytes;
    }
    return d;
}

/* Runs k in the simulation: its roots come to life, those it last uses die. *live: bytes. */
static void run(sched *s, int k, int64_t *live, int64_t *peak) {
    for (int r = s->start[k]; r < s->start[k + 1]; r++) {
        int v = s->root[r];
        if (!s->p->values[v].persistent && !s->seen[v]) *live += s->p->values[v].bytes;
        s->seen[v] = true;
    }
    if (*live > *peak) *peak = *live;
    for (int r = s->start[k]; r < s->start[k + 1]; r++) {
        int v = s->root[r];
        if (--s->users[v] == 0 && !s->p->values[v].persistent) *live -= s->p->values[v].bytes;
    }
}

static void reset_users(sched *s) {
    for (int v = 0; v < s->p->n_values; v++) s->users[v] = s->by_start[v + 1] - s->by_start[v], s->seen[v] = false;
}

/* The peak of live arena bytes of an order. */
static int64_t order_peak(sched *s, const int *order) {
    reset_users(s);
    int64_t live = 0, peak = 0;
    for (int i = 0; i < s->n; i++) run(s, order[i], &live, &peak);
    return peak;
}

/* The greedy order into order[]. */
static void greedy(sched *s, int *order, bool *done) {
    reset_users(s);
    int64_t live = 0, peak = 0;
    int next = 0; /* fuse's first kernel not yet run */
    for (int i = 0; i < s->n; i++) {
        while (done[next]) next++;
        int pick = -1;
        int64_t best = 0;
        for (int k = next; k < s->n; k++) {
            if (done[k] || s->pred[k]) continue;
            int64_t d = net_freed(s, k);
            if (d > best) best = d, pick = k;
        }
        if (pick < 0) pick = next; /* nothing frees memory: fuse's order (next is ready: every
                                      constraint points forward in fuse's order) */
        order[i] = pick;
        done[pick] = true;
        run(s, pick, &live, &peak);
        for (int q = s->succ_start[pick]; q < s->succ_start[pick + 1]; q++) s->pred[s->succ[q]]--;
    }
}

sn_status sn_schedule(sn_program *p, sn_schedule_mode mode, sn_schedule_stats *st, sn_err *e) {
    *st = (sn_schedule_stats){0};
    sched s = {.p = p};
    int *order = NULL, *fuse_order = NULL;
    bool *done = NULL;
    sn_status r = collect(&s, e);
    if (!r) r = build_edges(&s, e);
    if (!r && (!(order = table((size_t)s.n, sizeof *order, e)) ||
               !(fuse_order = table((size_t)s.n, sizeof *fuse_order, e)) ||
               !(done = table((size_t)s.n, sizeof *done, e))))
        r = SN_ERR_OOM;
    if (!r) {
        for (int k = 0; k < s.n; k++) fuse_order[k] = k;
        greedy(&s, order, done);
        st->peak_before = order_peak(&s, fuse_order);
        st->peak_after = order_peak(&s, order);
        if (mode == SN_SCHEDULE_OFF) {
            st->peak_after = st->peak_before;
        } else if (st->peak_after < st->peak_before || mode == SN_SCHEDULE_ALWAYS) {
            sn_kernel **ks = table((size_t)s.n, sizeof *ks, e);
            if (!ks) {
                r = SN_ERR_OOM;
            } else {
                for (int i = 0; i < s.n; i++) ks[i] = p->kernels[order[i]], st->moved += order[i] != i;
                memcpy(p->kernels, ks, sizeof *ks * (size_t)s.n);
                free(ks);
            }
        } else {
            st->peak_after = st->peak_before;
        }
    }
    free(order);
    free(fuse_order);
    free(done);
    sched_free(&s);
    return r;
}
