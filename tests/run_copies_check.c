/* run_copies_check.c: a run's own downloads checked, and its uploads' order (run_copies_check.h). */
#include "run_copies_check.h"

#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* one micro-batch on seed's batch */
static void accumulate(sn_trainer *t, int n, int vocab, uint64_t seed) {
    int32_t *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
    ck_assert(x && y);
    sn_test_lcg_batch(x, y, n, vocab, seed);
    sn_err e;
    ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    free(x);
    free(y);
}

/* Runs a micro-batch with copies c (k of them); want: the gradients after it. */
static void run_with(sn_trainer *t, sn_exec_run_copy *c, int k, int n, int vocab, uint64_t seed,
                     float *want, int64_t flat_n, int *during) {
    sn_exec *x = sn_trainer_exec(t);
    sn_err e;
    ck_assert_msg(sn_exec_run_copies(x, c, k, &e) == SN_OK, "%s", e.msg);
    accumulate(t, n, vocab, seed);
    ck_assert_msg(sn_exec_run_copies_wait(x, &e) == SN_OK, "%s", e.msg);
    sn_exec_stats st;
    sn_exec_stats_get(x, &st);
    *during = st.copies_in_run;
    const sn_param_layout *l = &sn_trainer_program(t)->layout;
    ck_assert_msg(sn_exec_download(x, want, sn_exec_block_ref(l->grads), 4 * flat_n, &e) == SN_OK,
                  "%s", e.msg);
}

void sn_test_run_copies_check(sn_trainer *t, int64_t chunk, int n, int vocab,
                              sn_test_run_copies *out) {
    sn_exec *x = sn_trainer_exec(t);
    const sn_program *p = sn_trainer_program(t);
    int64_t flat_n = p->layout.flat_n;
    int k = (int)((flat_n + chunk - 1) / chunk);
    sn_err e;
    float *host = sn_exec_host_alloc(x, 4 * flat_n, &e), *want = malloc(4 * (size_t)flat_n);
    sn_exec_run_copy *c = calloc((size_t)k, sizeof *c);
    bool *seen = calloc((size_t)p->n_kernels + 1, 1), *written = calloc((size_t)k, 1);
    ck_assert(host && want && c && seen && written);
    *out = (sn_test_run_copies){.chunks = k};
    for (int i = 0; i < k; i++) {
        int64_t lo = i * chunk, len = flat_n - lo < chunk ? flat_n - lo : chunk;
        sn_exec_ref r = sn_exec_block_ref(p->layout.grads + 4 * lo);
        c[i] = (sn_exec_run_copy){sn_exec_ready_after(x, r, 4 * len), r, host + lo, 4 * len};
        ck_assert(c[i].after >= -1 && c[i].after < p->n_kernels);
        out->points += !seen[c[i].after + 1];
        seen[c[i].after + 1] = true;
        out->before_last += c[i].after < p->n_kernels - 1;
        out->written += c[i].after >= 0;
    }
    run_with(t, c, k, n, vocab, 101, want, flat_n, &out->during);
    ck_assert_msg(!memcmp(host, want, 4 * (size_t)flat_n),
                  "the gradients copied during the run are not the run's");
    int during;
    for (int i = 0; i < k; i++) { /* one kernel early */
        written[i] = c[i].after >= 0;
        c[i].after -= written[i];
    }
    memset(host, 0, 4 * (size_t)flat_n);
    run_with(t, c, k, n, vocab, 202, want, flat_n, &during);
    for (int i = 0; i < k; i++)
        out->early_differ += written[i] && memcmp(c[i].host, want + i * chunk, (size_t)c[i].bytes);
    ck_assert(sn_exec_run_copies(x, NULL, 0, &e) == SN_OK);
    sn_exec_host_free(x, host);
    free(want);
    free(c);
    free(seen);
    free(written);
}

typedef struct {
    sn_device base; /* the CPU device's, but for the copies */
    sn_device *inner;
} at_once;

static sn_status copy_now(sn_device *d, void *dst, const void *src, size_t bytes, bool up,
                          void *after, void *done, sn_err *e) {
    sn_device *in = ((at_once *)d)->inner;
    (void)after, (void)done;
    return up ? in->upload(in, dst, src, bytes, e) : in->download(in, dst, src, bytes, e);
}

static sn_status no_wait(sn_device *d, void *done, sn_err *e) {
    (void)d, (void)done, (void)e;
    return SN_OK;
}

static void at_once_destroy(sn_device *d) {
    sn_device_free(((at_once *)d)->inner);
    free(d);
}

sn_device *sn_test_copy_at_once(sn_device *cpu) {
    at_once *a = calloc(1, sizeof *a);
    ck_assert(a && !cpu->copy_async);
    a->base = *cpu;
    a->inner = cpu;
    a->base.copy_async = copy_now;
    a->base.event_wait = no_wait;
    a->base.destroy = at_once_destroy;
    return &a->base;
}

/* ---- the uploads' order ---- */

typedef struct {
    const char *lo, *hi;
    int launch; /* the launch whose buffer it is */
} span;

typedef struct {
    sn_device base; /* the CPU device's, but for what it records */
    sn_device *inner;
    int launches;     /* so far */
    span *spans;      /* every launch's buffers */
    int n_span, cap_span;
    void **ev;        /* events recorded, each with the launches before it */
    int *ev_at, n_ev, cap_ev;
    int uploads, early;
} order_dev;

static void add_span(order_dev *o, const void *p, int64_t bytes) {
    if (o->n_span == o->cap_span) {
        o->cap_span = o->cap_span ? 2 * o->cap_span : 256;
        o->spans = realloc(o->spans, sizeof *o->spans * (size_t)o->cap_span);
        ck_assert(o->spans);
    }
    o->spans[o->n_span++] = (span){p, (const char *)p + bytes, o->launches};
}

/* k's buffers as the executor passes them: each kernel of the chain its args, then its scratch
 * (not the persistent block's: no size needed) */
static void add_spans(order_dev *o, const sn_kernel *k, void *const *bufs) {
    int at = 0;
    for (const sn_kernel *q = k; q; q = q->tail) {
        for (int a = 0; a < q->n_out + q->n_in; a++)
            add_span(o, bufs[at++], sn_numel(q->args[a]) * (sn_dtype_bits(q->args[a]->dtype) / 8));
        at += q->stage != SN_SUM_WHOLE;
    }
    o->launches++;
}

static sn_status order_launch(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs,
                              sn_err *e) {
    order_dev *o = (order_dev *)d;
    add_spans(o, k, bufs);
    return o->inner->launch(o->inner, k, handle, bufs, e);
}

static sn_status order_gemm(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e) {
    order_dev *o = (order_dev *)d;
    add_spans(o, k, bufs);
    return o->inner->gemm(o->inner, k, bufs, e);
}

static sn_status order_event_record(sn_device *d, void *ev, sn_err *e) {
    order_dev *o = (order_dev *)d;
    if (o->n_ev == o->cap_ev) {
        o->cap_ev = o->cap_ev ? 2 * o->cap_ev : 256;
        o->ev = realloc(o->ev, sizeof *o->ev * (size_t)o->cap_ev);
        o->ev_at = realloc(o->ev_at, sizeof *o->ev_at * (size_t)o->cap_ev);
        ck_assert(o->ev && o->ev_at);
    }
    o->ev[o->n_ev] = ev;
    o->ev_at[o->n_ev++] = o->launches;
    return o->inner->event_record(o->inner, ev, e);
}

static sn_status order_copy(sn_device *d, void *dst, const void *src, size_t bytes, bool up,
                            void *after, void *done, sn_err *e) {
    order_dev *o = (order_dev *)d;
    if (up) {
        int from = o->launches, i = o->n_ev - 1;
        while (after && i >= 0 && o->ev[i] != after) i--; /* its latest recording */
        ck_assert_msg(!after || i >= 0, "an upload waits for an event never recorded");
        if (after) from = o->ev_at[i];
        bool early = false;
        for (int i = o->n_span - 1; i >= 0 && o->spans[i].launch >= from; i--)
            early |= o->spans[i].lo < (const char *)dst + bytes && (const char *)dst < o->spans[i].hi;
        o->uploads++;
        o->early += early;
    }
    return copy_now(d, dst, src, bytes, up, after, done, e);
}

static void order_destroy(sn_device *d) {
    order_dev *o = (order_dev *)d;
    sn_device_free(o->inner);
    free(o->spans);
    free(o->ev);
    free(o->ev_at);
    free(o);
}

sn_device *sn_test_upload_order(sn_device *cpu) {
    order_dev *o = calloc(1, sizeof *o);
    ck_assert(o && !cpu->copy_async && sizeof(at_once) <= sizeof *o);
    o->base = *cpu;
    o->inner = cpu;
    o->base.launch = order_launch;
    o->base.gemm = order_gemm;
    o->base.event_record = order_event_record;
    o->base.copy_async = order_copy;
    o->base.event_wait = no_wait;
    o->base.destroy = order_destroy;
    return &o->base;
}

void sn_test_upload_order_count(sn_device *d, int *uploads, int *early) {
    order_dev *o = (order_dev *)d;
    *uploads = o->uploads, *early = o->early;
    o->uploads = o->early = 0;
}

int sn_test_upload_order_launches(const sn_device *d) { return ((const order_dev *)d)->launches; }
