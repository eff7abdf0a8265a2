/* checked.c: a device that checks the memory contract (device.h): it wraps another device and
 * hands out pointers that are not host addresses, translating them back at every call.
 * Convention: a handle is TAG | slot << 40 | byte offset; TAG makes it non-canonical on x86-64
 * (and far outside any mapping elsewhere), so a host dereference faults at once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "device.h"

#define TAG 0x5a00000000000000ull
#define SLOT_SHIFT 40
#define OFFSET_MASK ((1ull << SLOT_SHIFT) - 1)

typedef struct {
    sn_device *inner;
    int n, cap;
    char **real;   /* by slot; NULL once freed */
    size_t *bytes; /* by slot */
    char name[160];
} checked_impl;

/* The inner pointer a handle stands for; a pointer that is not a live handle is a bug above. */
static void *real_of(const sn_device *d, const void *h) {
    const checked_impl *c = d->impl;
    uint64_t u = (uint64_t)(uintptr_t)h;
    SN_ASSERT((u & ~((uint64_t)0xffff << SLOT_SHIFT) & ~OFFSET_MASK) == TAG);
    int slot = (int)((u - TAG) >> SLOT_SHIFT);
    uint64_t off = u & OFFSET_MASK;
    SN_ASSERT(slot >= 0 && slot < c->n && c->real[slot] && off <= c->bytes[slot]);
    return c->real[slot] + off;
}

static void *checked_alloc(sn_device *d, size_t bytes, sn_err *e) {
    checked_impl *c = d->impl;
    SN_ASSERT(bytes <= OFFSET_MASK);
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        SN_ASSERT(cap < 0xffff);
        char **real = sn_realloc(c->real, sizeof *real * (size_t)cap, "the checked device's table", e);
        if (!real) return NULL;
        c->real = real;
        size_t *bytes_of = sn_realloc(c->bytes, sizeof *bytes_of * (size_t)cap, "the checked device's table", e);
        if (!bytes_of) return NULL;
        c->bytes = bytes_of;
        c->cap = cap;
    }
    char *p = c->inner->alloc(c->inner, bytes, e);
    if (!p) return NULL;
    c->real[c->n] = p;
    c->bytes[c->n] = bytes;
    return (void *)(uintptr_t)(TAG | (uint64_t)c->n++ << SLOT_SHIFT);
}

static void checked_free(sn_device *d, void *h) {
    checked_impl *c = d->impl;
    void *p = real_of(d, h);
    int slot = (int)(((uint64_t)(uintptr_t)h - TAG) >> SLOT_SHIFT);
    SN_ASSERT(p == c->real[slot]); /* freed by the pointer alloc returned */
    c->inner->free(c->inner, p);
    c->real[slot] = NULL;
}

static sn_status checked_upload(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->upload(c->inner, real_of(d, dst), src, bytes, e);
}

static sn_status checked_download(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->download(c->inner, dst, real_of(d, src), bytes, e);
}

static sn_status checked_copy(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->copy(c->inner, real_of(d, dst), real_of(d, src), bytes, e);
}

static sn_status checked_memset(sn_device *d, void *dst, int value, size_t bytes, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->memset(c->inner, real_of(d, dst), value, bytes, e);
}

static sn_status checked_compile(sn_device *d, sn_kernel *const *ks, int n, void **handles, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->compile(c->inner, ks, n, handles, e);
}

static sn_status checked_launch(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs,
                                sn_err *e) {
    checked_impl *c = d->impl;
    void *real[SN_KER_MAX_BUFS];
    for (int i = 0; i < sn_kernel_n_bufs(k); i++) real[i] = real_of(d, bufs[i]);
    return c->inner->launch(c->inner, k, handle, real, e);
}

static sn_status checked_gemm(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e) {
    checked_impl *c = d->impl;
    void *real[SN_KER_MAX_BUFS];
    for (int i = 0; i < sn_kernel_n_bufs(k); i++) real[i] = real_of(d, bufs[i]);
    return c->inner->gemm(c->inner, k, real, e);
}

static sn_status checked_sync(sn_device *d, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->sync(c->inner, e);
}

static void *checked_event_new(sn_device *d, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->event_new(c->inner, e);
}

static sn_status checked_event_record(sn_device *d, void *ev, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->event_record(c->inner, ev, e);
}

static sn_status checked_event_elapsed(sn_device *d, void *from, void *to, double *s, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->event_elapsed(c->inner, from, to, s, e);
}

static void checked_event_free(sn_device *d, void *ev) {
    checked_impl *c = d->impl;
    c->inner->event_free(c->inner, ev);
}

/* The asynchronous copies (where inner has them): host memory is inner's, device memory
 * translated. */
static void *checked_host_alloc(sn_device *d, size_t bytes, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->host_alloc(c->inner, bytes, e);
}

static void checked_host_free(sn_device *d, void *p) {
    checked_impl *c = d->impl;
    c->inner->host_free(c->inner, p);
}

static sn_status checked_copy_async(sn_device *d, void *dst, const void *src, size_t bytes, bool up,
                                    void *after, void *done, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->copy_async(c->inner, up ? real_of(d, dst) : dst, up ? src : real_of(d, src),
                                bytes, up, after, done, e);
}

static sn_status checked_flush(sn_device *d, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->flush(c->inner, e);
}

static sn_status checked_mem_info(sn_device *d, int64_t *free_bytes, int64_t *total_bytes,
                                  sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->mem_info(c->inner, free_bytes, total_bytes, e);
}

static sn_status checked_event_wait(sn_device *d, void *done, sn_err *e) {
    checked_impl *c = d->impl;
    return c->inner->event_wait(c->inner, done, e);
}

static void checked_destroy(sn_device *d) {
    checked_impl *c = d->impl;
    for (int i = 0; i < c->n; i++) SN_ASSERT(!c->real[i]); /* every block freed */
    sn_device_free(c->inner);
    free(c->real);
    free(c->bytes);
    free(c);
    free(d);
}

sn_status sn_checked_device_new(sn_device *inner, sn_device **out, sn_err *e) {
    checked_impl *c = sn_calloc(1, sizeof *c, "the checked device", e);
    sn_device *d = c ? sn_calloc(1, sizeof *d, "the checked device", e) : NULL;
    if (!d) {
        free(c);
        return SN_ERR_OOM;
    }
    c->inner = inner;
    snprintf(c->name, sizeof c->name, "checked %s", inner->name);
    *d = (sn_device){.name = c->name, .alloc = checked_alloc, .free = checked_free,
                     .upload = checked_upload, .download = checked_download, .copy = checked_copy,
                     .memset = checked_memset, .compile = checked_compile, .launch = checked_launch,
                     .gemm = checked_gemm, .sync = checked_sync, .event_new = checked_event_new,
                     .event_record = checked_event_record, .event_elapsed = checked_event_elapsed,
                     .event_free = checked_event_free, .destroy = checked_destroy, .impl = c,
                     .target = inner->target};
    if (inner->copy_async) {
        d->host_alloc = checked_host_alloc, d->host_free = checked_host_free;
        d->copy_async = checked_copy_async, d->event_wait = checked_event_wait;
    }
    if (inner->flush) d->flush = checked_flush;
    if (inner->mem_info) d->mem_info = checked_mem_info;
    *out = d;
    return SN_OK;
}
