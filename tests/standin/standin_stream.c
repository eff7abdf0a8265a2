/* standin_stream.c: the stand-in libcuda's streams, stream capture and CUDA Graphs. Streams are
 * synchronous: an operation runs before its call returns, except a host copy on a stream, which
 * is deferred (as a GPU's asynchronous copy may be) until something orders it: the stream's next
 * operation, its synchronisation, an event recorded after it and then synchronised or waited on
 * by a stream, cuMemFree or cuMemFreeHost; so a host that reads a copy's destination, or a
 * kernel that reads it on another stream, before that order sees the old bytes. A download
 * (device to host) reads the device at its call, the earliest moment it may run: the work it
 * waited for is done then and later work is not, so a download queued before the last kernel
 * that writes its source reads the bytes before that kernel. And one on a stream not ordered
 * after all the device work another stream ran (kernels, GEMMs, device copies, memsets: by an
 * event it waited on, or by the host having synchronised that stream) races with that work: it
 * lands as 0xff bytes (NaN), said on stderr. Capture records operations (kernel
 * parameters and host-op data copied at the call, as the driver does) and a graph replays them
 * in order. Convention: what the driver refuses during capture is refused here (allocation,
 * host copies, synchronisation), and a refused call invalidates the capture. */
#include <stdlib.h>
#include <string.h>

#include "standin_driver.h"

typedef struct {
    void *dst;
    const void *src;
    size_t n;
    bool up;             /* to the device: it reads src when it runs */
    unsigned char *snap; /* a download: its source as read at the call (owned) */
    bool race;           /* a download unordered after another stream's work: 0xff bytes */
} si_pending;

typedef struct {
    uint64_t id, work; /* another stream's work this one is ordered after */
} si_seen;

struct CUstream_st {
    si_pending *pend; /* deferred host copies, in order; pend[done - base ...] not yet run */
    size_t n_pend, cap_pend;
    uint64_t issued, done; /* host copies deferred and run so far */
    uint64_t id;           /* a serial number, never reused */
    uint64_t work;         /* device work run on it so far (kernels, GEMMs, copies, memsets) */
    uint64_t synced;       /* its work the host has synchronised with */
    si_seen *seen;         /* other streams' work it waited for (events) */
    size_t n_seen;
    bool capturing, invalidated;
    int mode;
    si_op *ops; /* recorded during capture */
    size_t n, cap;
    struct CUstream_st *next; /* live streams */
};
struct CUgraph_st {
    si_op *ops;
    size_t n;
};
struct CUgraphExec_st {
    si_op *ops;
    size_t n;
};

static struct CUstream_st *streams;
static int n_capturing;
static uint64_t next_id = 1;

bool si_capturing(void) { return n_capturing > 0; }

CUresult si_stream_check(CUstream s, const char *call) {
    if (!s) return CUDA_SUCCESS;
    for (struct CUstream_st *t = streams; t; t = t->next)
        if (t == s) return CUDA_SUCCESS;
    sn_standin_say("%s: %p is not a live stream", call, (void *)s);
    return SI_INVALID_HANDLE;
}

static void op_free(si_op *op) { free(op->args); }

static void ops_free(si_op *ops, size_t n) {
    for (size_t i = 0; i < n; i++) op_free(&ops[i]);
    free(ops);
}

/* A deep copy of op (its args). */
static CUresult op_copy(si_op *to, const si_op *op) {
    *to = *op;
    to->args = NULL;
    if (op->n_args) {
        if (!(to->args = malloc(op->n_args))) return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(to->args, op->args, op->n_args);
    }
    return CUDA_SUCCESS;
}

static CUresult run(const si_op *op) {
    switch (op->kind) {
    case SI_KERNEL: {
        size_t offsets[64], total;
        int n = si_function_params(op->f, offsets, &total);
        void *params[64];
        for (int i = 0; i < n; i++) params[i] = op->args + offsets[i];
        return si_launch_now(op->f, op->grid, op->block, op->shared, params);
    }
    case SI_COPY: {
        void *d = si_host(op->dst, op->bytes, "a device copy"), *s = si_host(op->src, op->bytes, "a device copy");
        if (!d || !s) return SI_ILLEGAL_ADDRESS;
        memmove(d, s, op->bytes);
        return CUDA_SUCCESS;
    }
    case SI_MEMSET: {
        void *d = si_host(op->dst, op->bytes, "a memset");
        if (!d) return SI_ILLEGAL_ADDRESS;
        memset(d, op->value, op->bytes);
        return CUDA_SUCCESS;
    }
    case SI_EVENT:
        si_event_stamp(op->event);
        return CUDA_SUCCESS;
    case SI_HOST:
        return op->fn(op->args);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static bool live(CUstream s) {
    for (struct CUstream_st *t = streams; t; t = t->next)
        if (t == s) return true;
    return false;
}

void si_stream_drain(CUstream s, uint64_t upto) {
    if (!s || !live(s)) return;
    while (s->done < upto && s->done < s->issued) {
        si_pending *p = &s->pend[s->n_pend - (size_t)(s->issued - s->done)];
        if (p->race) memset(p->dst, 0xff, p->n);
        else memcpy(p->dst, p->snap ? p->snap : p->src, p->n);
        free(p->snap);
        p->snap = NULL;
        s->done++;
    }
    if (s->done == s->issued) s->n_pend = 0;
}

void si_drain_all(void) {
    for (struct CUstream_st *t = streams; t; t = t->next) si_stream_drain(t, t->issued);
}

uint64_t si_stream_issued(CUstream s) { return s ? s->issued : 0; }

/* Where s records how much of stream id's work it is ordered after. */
static uint64_t *seen_of(CUstream s, uint64_t id) {
    for (size_t i = 0; i < s->n_seen; i++)
        if (s->seen[i].id == id) return &s->seen[i].work;
    si_seen *t = realloc(s->seen, (s->n_seen + 1) * sizeof *t);
    if (!t) return NULL;
    s->seen = t;
    s->seen[s->n_seen] = (si_seen){id, 0};
    return &s->seen[s->n_seen++].work;
}

uint64_t si_stream_work(CUstream s) { return s ? s->work : 0; }

void si_stream_waited(CUstream s, CUstream on, uint64_t work) {
    uint64_t *w = s && on && live(s) && live(on) ? seen_of(s, on->id) : NULL;
    if (w && *w < work) *w = work;
}

void si_stream_synced(CUstream s, uint64_t work) {
    if (s && live(s) && s->synced < work) s->synced = work;
}

void si_synced_all(void) {
    for (struct CUstream_st *t = streams; t; t = t->next) t->synced = t->work;
}

/* Whether a download on s now would race with another stream's work: s is not ordered after
 * all of it. */
static bool unordered(CUstream s) {
    for (struct CUstream_st *t = streams; t; t = t->next) {
        if (t == s || t->work <= t->synced) continue;
        uint64_t *w = seen_of(s, t->id);
        if (!w || *w < t->work) return true;
    }
    return false;
}

CUresult si_stream_defer(CUstream s, void *dst, const void *src, size_t n, bool up) {
    if (!s) {
        memcpy(dst, src, n);
        return CUDA_SUCCESS;
    }
    if (s->n_pend == s->cap_pend) {
        size_t cap = s->cap_pend ? 2 * s->cap_pend : 16;
        si_pending *t = realloc(s->pend, cap * sizeof *t);
        if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
        s->pend = t;
        s->cap_pend = cap;
    }
    si_pending p = {dst, src, n, up, NULL, false};
    if (!up) { /* read now, after the uploads queued before it on s (stream order) */
        for (uint64_t k = s->issued; k > s->done; k--)
            if (s->pend[s->n_pend - (size_t)(s->issued - k) - 1].up) {
                si_stream_drain(s, k);
                break;
            }
        if (!(p.snap = malloc(n ? n : 1))) return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(p.snap, src, n);
        if ((p.race = unordered(s)))
            sn_standin_say("a download of %zu bytes on a stream that waited for no event after "
                           "another stream's work: it races with that work (0xff bytes land)", n);
    }
    s->pend[s->n_pend++] = p;
    s->issued++;
    return CUDA_SUCCESS;
}

CUresult si_stream_do(CUstream s, const si_op *op, const char *call) {
    CUresult r = si_stream_check(s, call);
    if (r) return r;
    if (s && !s->capturing) si_stream_drain(s, s->issued); /* in stream order */
    if (s && !s->capturing && op->kind != SI_EVENT) s->work++;
    if (!s || !s->capturing) return run(op);
    if (s->invalidated) return SI_CAPTURE_INVALIDATED;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        si_op *t = realloc(s->ops, cap * sizeof *t);
        if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
        s->ops = t;
        s->cap = cap;
    }
    if ((r = op_copy(&s->ops[s->n], op))) return r;
    s->n++;
    return CUDA_SUCCESS;
}

int sn_standin_enqueue(CUstream s, sn_standin_op_fn fn, const void *data, size_t bytes) {
    si_op op = {.kind = SI_HOST, .fn = fn, .args = (unsigned char *)data, .n_args = bytes};
    return si_stream_do(s, &op, "cublasLtMatmul");
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    CUresult r = si_need_ctx("cuStreamCreate");
    if (r) return r;
    if (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->id = next_id++;
    s->next = streams;
    streams = s;
    *phStream = s;
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream) {
    if (!hStream || si_stream_check(hStream, "cuStreamDestroy")) return SI_INVALID_HANDLE;
    si_stream_drain(hStream, hStream->issued); /* its deferred copies, before it goes */
    for (struct CUstream_st **p = &streams; *p; p = &(*p)->next)
        if (*p == hStream) {
            *p = hStream->next;
            break;
        }
    if (hStream->capturing) n_capturing--;
    free(hStream->pend);
    free(hStream->seen);
    ops_free(hStream->ops, hStream->n);
    free(hStream);
    return CUDA_SUCCESS;
}

/* Marks every capturing stream invalid: the driver does so after a prohibited call. */
static void invalidate_captures(void) {
    for (struct CUstream_st *t = streams; t; t = t->next)
        if (t->capturing) t->invalidated = true;
}

CUresult cuStreamSynchronize(CUstream hStream) {
    CUresult r = si_need_ctx("cuStreamSynchronize");
    if (!r) r = si_stream_check(hStream, "cuStreamSynchronize");
    if (r) return r;
    if (si_capturing()) {
        sn_standin_say("cuStreamSynchronize while a stream is capturing");
        invalidate_captures();
        return SI_CAPTURE_UNSUPPORTED;
    }
    si_stream_drain(hStream, si_stream_issued(hStream)); /* the rest is done already */
    si_stream_synced(hStream, si_stream_work(hStream));
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
    CUresult r = si_need_ctx("cuStreamBeginCapture");
    if (!r) r = si_stream_check(hStream, "cuStreamBeginCapture");
    if (r) return r;
    if (!hStream) {
        sn_standin_say("cuStreamBeginCapture: the legacy default stream cannot be captured");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (hStream->capturing) return SI_CAPTURE_UNSUPPORTED;
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    hStream->capturing = true;
    hStream->invalidated = false;
    hStream->mode = mode;
    hStream->n = 0;
    n_capturing++;
    return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    CUresult r = si_need_ctx("cuStreamEndCapture");
    if (!r) r = si_stream_check(hStream, "cuStreamEndCapture");
    if (r) return r;
    *phGraph = NULL;
    if (!hStream || !hStream->capturing) return SI_CAPTURE_UNMATCHED;
    hStream->capturing = false;
    n_capturing--;
    si_op *ops = hStream->ops;
    size_t n = hStream->n;
    hStream->ops = NULL;
    hStream->n = hStream->cap = 0;
    if (hStream->invalidated) {
        ops_free(ops, n);
        return SI_CAPTURE_INVALIDATED;
    }
    struct CUgraph_st *g = malloc(sizeof *g);
    if (!g) {
        ops_free(ops, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *g = (struct CUgraph_st){ops, n};
    *phGraph = g;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    CUresult r = si_need_ctx("cuGraphInstantiate");
    if (r) return r;
    if (!hGraph) return SI_INVALID_HANDLE;
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x || !(x->ops = calloc(hGraph->n + 1, sizeof *x->ops))) {
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < hGraph->n; i++, x->n++)
        if ((r = op_copy(&x->ops[i], &hGraph->ops[i]))) {
            ops_free(x->ops, x->n);
            free(x);
            return r;
        }
    *phGraphExec = x;
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    CUresult r = si_need_ctx("cuGraphLaunch");
    if (!r) r = si_stream_check(hStream, "cuGraphLaunch");
    if (r) return r;
    if (!hGraphExec) return SI_INVALID_HANDLE;
    if (hStream && hStream->capturing) {
        sn_standin_say("cuGraphLaunch into a capturing stream is not supported by the stand-in");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    si_stream_drain(hStream, si_stream_issued(hStream));
    if (hStream) hStream->work++;
    for (size_t i = 0; i < hGraphExec->n; i++)
        if ((r = run(&hGraphExec->ops[i]))) {
            sn_standin_say("cuGraphLaunch: node %zu of %zu failed", i, hGraphExec->n);
            return r;
        }
    return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    if (!hGraphExec) return SI_INVALID_HANDLE;
    ops_free(hGraphExec->ops, hGraphExec->n);
    free(hGraphExec);
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
    if (!hGraph) return SI_INVALID_HANDLE;
    ops_free(hGraph->ops, hGraph->n);
    free(hGraph);
    return CUDA_SUCCESS;
}
