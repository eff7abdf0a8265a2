/* graph.c: the training step as one CUDA Graph. Launches and GEMMs are queued until the next
 * upload, download or sync; a queue seen once before (same kernels on the same buffers: the step
 * is stable, its per-step scalars read from device buffers) is captured with cuStreamBeginCapture
 * once, instantiated, and replayed with one cuGraphLaunch per step. Convention: the first time a
 * sequence appears it runs eagerly (cuBLASLt and the driver warm up outside any capture); one
 * with a copy on a copy stream in it always does (cuda_rt.h). */
#include <stdlib.h>
#include <string.h>

#include "support/hash.h"
#include "cuda_rt.h"

enum { MAX_SEQS = 8 }; /* sequences remembered (train step, eval step, sampling ...) */

typedef struct {
    uint64_t hash;
    int n;
    sn_cuda_op *ops; /* a copy, compared whole: the hash only finds the candidate */
    CUgraphExec exec; /* NULL: seen once, not captured yet */
    unsigned long used;
} seq;

struct sn_cuda_graphs {
    sn_cuda_api *a;
    CUstream stream;
    bool enabled;
    sn_cuda_issue_fn issue;
    void *ctx;
    sn_cuda_op *q;
    int n, cap;
    seq seqs[MAX_SEQS];
    unsigned long clock;
    int captured, launches, eager;
};

sn_cuda_graphs *sn_cuda_graphs_new(sn_cuda_api *a, CUstream stream, bool enabled,
                                   sn_cuda_issue_fn issue, void *ctx, sn_err *e) {
    sn_cuda_graphs *g = sn_calloc(1, sizeof *g, "the CUDA Graph queue", e);
    if (!g) return NULL;
    *g = (sn_cuda_graphs){.a = a, .stream = stream, .enabled = enabled, .issue = issue, .ctx = ctx};
    return g;
}

static void seq_clear(sn_cuda_graphs *g, seq *s) {
    if (s->exec) g->a->cuGraphExecDestroy(s->exec);
    free(s->ops);
    *s = (seq){0};
}

void sn_cuda_graphs_free(sn_cuda_graphs *g) {
    if (!g) return;
    for (int i = 0; i < MAX_SEQS; i++) seq_clear(g, &g->seqs[i]);
    free(g->q);
    free(g);
}

void sn_cuda_graphs_counts(const sn_cuda_graphs *g, int *captured, int *launches, int *eager) {
    *captured = g->captured;
    *launches = g->launches;
    *eager = g->eager;
}

/* Issues one op: an event is recorded here, a launch or GEMM by the device's callback. */
static sn_status issue_one(sn_cuda_graphs *g, const sn_cuda_op *op, sn_err *e) {
    if (!op->what) return SN_CUDA_CHECK(g->a, e, cuEventRecord, op->event, g->stream);
    return g->issue(g->ctx, op, e);
}

sn_status sn_cuda_graphs_add(sn_cuda_graphs *g, const sn_cuda_op *op, sn_err *e) {
    if (!g->enabled || (op->host && g->n == 0)) return issue_one(g, op, e);
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        sn_cuda_op *q = sn_realloc(g->q, (size_t)cap * sizeof *q, "the CUDA Graph queue", e);
        if (!q) return SN_ERR_OOM;
        g->q = q;
        g->cap = cap;
    }
    sn_cuda_op *o = &g->q[g->n++];
    memset(o, 0, sizeof *o); /* padding and unused bufs compare equal */
    o->what = op->what;
    o->event = op->event;
    o->n_bufs = op->n_bufs;
    memcpy(o->bufs, op->bufs, (size_t)op->n_bufs * sizeof *op->bufs);
    o->host = op->host;
    o->bytes = op->bytes;
    o->up = op->up;
    o->after = op->after;
    return SN_OK;
}

static uint64_t queue_hash(const sn_cuda_op *q, int n) {
    return sn_hash_bytes(SN_HASH_INIT, q, (size_t)n * sizeof *q);
}

/* Issues the queue's ops [from, to); launches only (events skipped) when `launches_only`. */
static sn_status issue_range(sn_cuda_graphs *g, int from, int to, bool launches_only, sn_err *e) {
    for (int i = from; i < to; i++) {
        if (launches_only && !g->q[i].what) continue;
        sn_status st = issue_one(g, &g->q[i], e);
        if (st) return st;
    }
    return SN_OK;
}

/* Captures the queue's launches and GEMMs into s->exec (events are recorded around replays). */
static sn_status capture(sn_cuda_graphs *g, seq *s, sn_err *e) {
    sn_cuda_api *a = g->a;
    sn_status st = SN_CUDA_CHECK(a, e, cuStreamBeginCapture, g->stream,
                                 CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (st) return st;
    st = issue_range(g, 0, g->n, true, e);
    CUgraph graph = NULL;
    sn_err end_e;
    sn_status end = SN_CUDA_CHECK(a, &end_e, cuStreamEndCapture, g->stream, &graph);
    if (!st && end) {
        *e = end_e;
        st = end;
    }
    if (!st) st = SN_CUDA_CHECK(a, e, cuGraphInstantiate, &s->exec, graph, 0);
    if (graph) a->cuGraphDestroy(graph);
    if (!st) g->captured++;
    return st;
}

sn_status sn_cuda_graphs_flush(sn_cuda_graphs *g, sn_err *e) {
    if (!g->enabled || g->n == 0) return SN_OK;
    for (int i = 0; i < g->n; i++)
        if (g->q[i].host) { /* a copy in it: eagerly, not remembered (cuda_rt.h) */
            g->eager++;
            sn_status st = issue_range(g, 0, g->n, false, e);
            g->n = 0;
            return st;
        }
    uint64_t h = queue_hash(g->q, g->n);
    seq *s = NULL, *victim = &g->seqs[0];
    for (int i = 0; i < MAX_SEQS; i++) {
        seq *c = &g->seqs[i];
        if (c->ops && c->hash == h && c->n == g->n &&
            memcmp(c->ops, g->q, (size_t)g->n * sizeof *g->q) == 0)
            s = c;
        if (c->used < victim->used) victim = c;
    }
    sn_status st;
    g->clock++;
    if (!s) { /* first sight: run eagerly, remember it */
        seq_clear(g, victim);
        victim->ops = sn_malloc((size_t)g->n * sizeof *g->q, "the CUDA Graph queue", e);
        if (!victim->ops) return SN_ERR_OOM;
        memcpy(victim->ops, g->q, (size_t)g->n * sizeof *g->q);
        victim->n = g->n;
        victim->hash = h;
        victim->used = g->clock;
        g->eager++;
        st = issue_range(g, 0, g->n, false, e);
    } else {
        s->used = g->clock;
        int lead = 0; /* the events before the first launch are recorded ahead of the graph */
        while (lead < g->n && !g->q[lead].what) lead++;
        if (lead == g->n) { /* events only: nothing to capture */
            st = issue_range(g, 0, g->n, false, e);
            g->n = 0;
            return st;
        }
        st = s->exec ? SN_OK : capture(g, s, e);
        if (!st) st = issue_range(g, 0, lead, false, e);
        if (!st) st = SN_CUDA_CHECK(g->a, e, cuGraphLaunch, s->exec, g->stream);
        if (!st) {
            g->launches++;
            for (int i = lead; i < g->n && !st; i++)
                if (!g->q[i].what) st = issue_one(g, &g->q[i], e);
        }
    }
    g->n = 0;
    return st;
}
