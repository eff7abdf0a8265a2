/* host.c: device memory that is host memory (host.h), shared by the CPU device and the
 * reference interpreter's: 64-byte aligned blocks, plain copies, and events that are the host
 * clock (work is done when a call returns).
 * Convention: a block larger than RAM and swap is refused before any page is touched. */
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "support/clock.h"
#include "support/memfree.h"
#include "host.h"

/* RAM + swap, with the RAM no more than the memory cgroup's limit (a container's): Linux
 * overcommits, so a malloc larger than this can succeed and the process dies (or the cgroup's
 * OOM killer takes it) when it touches the pages; the device refuses such a block first. */
static uint64_t host_memory_bytes(void) {
    static uint64_t known; /* read once (files under /proc and /sys); 0: not yet */
    uint64_t have = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (have) return have;
    struct sysinfo si;
    if (sysinfo(&si)) return UINT64_MAX;
    uint64_t ram = (uint64_t)si.totalram * si.mem_unit;
    int64_t avail, limit;
    if (sn_host_memory("", &avail, &limit) && limit > 0 && (uint64_t)limit < ram) ram = (uint64_t)limit;
    have = ram + (uint64_t)si.totalswap * si.mem_unit;
    __atomic_store_n(&known, have, __ATOMIC_RELAXED);
    return have;
}

static void *host_alloc(sn_device *d, size_t bytes, sn_err *e) {
    (void)d;
    uint64_t have = host_memory_bytes();
    void *p = bytes <= have && bytes <= SIZE_MAX - 63 ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
    if (!p) {
        char need[32], h[32];
        sn_fail(e, SN_ERR_OOM, "out of memory: the CPU device cannot allocate %s (%zu bytes); this "
                "machine has %s of RAM and swap: use a smaller --batch or --seq, --mem auto (the "
                "planner fits the run in the RAM available), or a smaller model",
                sn_bytes_str((int64_t)bytes, need, sizeof need), bytes,
                sn_bytes_str((int64_t)(have > INT64_MAX ? INT64_MAX : have), h, sizeof h));
    }
    return p;
}

static void host_free(sn_device *d, void *p) {
    (void)d;
    free(p);
}

/* The host memory this process may still take (support/memfree.h: MemAvailable, within its
 * memory cgroup's limit), and the RAM. */
static sn_status host_mem_info(sn_device *d, int64_t *free_bytes, int64_t *total_bytes, sn_err *e) {
    (void)d;
    if (!sn_host_memory("", free_bytes, total_bytes))
        return sn_fail(e, SN_ERR_IO, "/proc/meminfo: cannot read it, so the free memory is not "
                       "known: give --mem as bytes");
    return SN_OK;
}

static sn_status host_copy(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e) {
    (void)d;
    (void)e;
    memcpy(dst, src, bytes);
    return SN_OK;
}

static sn_status host_memset(sn_device *d, void *dst, int value, size_t bytes, sn_err *e) {
    (void)d;
    (void)e;
    memset(dst, value, bytes);
    return SN_OK;
}

/* An event is the host clock when it is recorded. */
static void *host_event_new(sn_device *d, sn_err *e) {
    (void)d;
    double *t = calloc(1, sizeof *t);
    if (!t) sn_fail(e, SN_ERR_OOM, "out of host memory for a timing event");
    return t;
}

static sn_status host_event_record(sn_device *d, void *ev, sn_err *e) {
    (void)d;
    (void)e;
    *(double *)ev = sn_clock_s();
    return SN_OK;
}

static sn_status host_event_elapsed(sn_device *d, void *from, void *to, double *seconds, sn_err *e) {
    (void)d;
    (void)e;
    *seconds = *(double *)to - *(double *)from;
    return SN_OK;
}

static void host_event_free(sn_device *d, void *ev) {
    (void)d;
    free(ev);
}

static sn_status host_sync(sn_device *d, sn_err *e) {
    (void)d;
    (void)e;
    return SN_OK;
}

void sn_host_device_hooks(sn_device *d) {
    d->alloc = host_alloc;
    d->free = host_free;
    d->upload = d->download = d->copy = host_copy;
    d->memset = host_memset;
    d->sync = host_sync;
    d->event_new = host_event_new;
    d->event_record = host_event_record;
    d->event_elapsed = host_event_elapsed;
    d->event_free = host_event_free;
    d->mem_info = host_mem_info;
}
