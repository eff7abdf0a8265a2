/* run_copies_check.c: a run's own downloads checked (run_copies_check.h). */
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
