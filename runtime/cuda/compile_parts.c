/* compile_parts.c: a program's generated kernels as a few CUDA translation units ("parts") of about
 * equal NVRTC cost, each its own cache entry and module, the parts the cache lacks compiled by
 * NVRTC children running at once. Convention: the split depends only on the program (its
 * functions and their text sizes), never on the machine, so a program has the same parts and
 * cache keys on every host and every run; the CPU count only limits how many children run. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/clock.h"
#include "support/cores.h"
#include "cuda_rt.h"

void sn_cuda_parts_free(sn_cuda_parts *p) {
    for (int i = 0; i < SN_CUDA_MAX_PARTS; i++) sn_cuda_module_free(&p->mod[i]);
    free(p->part);
    free(p->fn);
    *p = (sn_cuda_parts){0};
}

int sn_cuda_parts_count(size_t cost, int n_functions) {
    size_t p = (cost + SN_CUDA_PART_COST - 1) / SN_CUDA_PART_COST;
    if (p > SN_CUDA_MAX_PARTS) p = SN_CUDA_MAX_PARTS;
    if (p > (size_t)n_functions) p = (size_t)n_functions;
    return p < 1 ? 1 : (int)p;
}

int sn_cuda_compile_jobs(void) { return sn_cores(); }

/* ---- the split: functions to parts, the largest first onto the lightest part ---- */

typedef struct {
    int kernel;  /* the kernel that leads the function */
    size_t cost; /* sn_cuda_function_cost */
} function;

size_t sn_cuda_function_cost(const sn_kernel *k, size_t text_bytes) {
    switch (k->kind) { /* NVRTC's CPU per KiB of text, sm_80, measured: docs/gpu.md */
    case SN_KER_ROW: case SN_KER_REDUCE: case SN_KER_SQNORM: /* ~0.075 s: block reductions */
        return text_bytes * 17 / 10;
    case SN_KER_POINTWISE: case SN_KER_GRAD_ACC: case SN_KER_CLIP: case SN_KER_ADAMW:
        return text_bytes / 2; /* ~0.02 s: straight-line code */
    case SN_KER_ATTENTION: /* ~0.045 s in f32; in 16 bits (mma.sync fragments) ~0.07 s */
        return sn_dtype_bits(k->anchor->in[0]->dtype) == 16 ? text_bytes * 16 / 10 : text_bytes;
    default: return text_bytes; /* gathers: ~0.045 s */
    }
}

static int by_cost(const void *a, const void *b) { /* larger first; then program order */
    const function *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->kernel - y->kernel;
}

/* part[i] for every kernel (-1 for a GEMM), from the whole program's rendering. */
static int split(const sn_kernel *const *ks, const sn_cuda_source *all, int n, int *part,
                 sn_cuda_parts *out, sn_err *e) {
    function *fs = sn_calloc((size_t)all->n_functions + 1, sizeof *fs, "the CUDA parts", e);
    if (!fs) return -1;
    int nf = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (all->leader[i] == i) {
            fs[nf] = (function){i, sn_cuda_function_cost(ks[i], all->fn_bytes[i])};
            total += fs[nf++].cost;
        }
    int parts = nf ? sn_cuda_parts_count(total, nf) : 0;
    qsort(fs, (size_t)nf, sizeof *fs, by_cost);
    for (int f = 0; f < nf; f++) {
        int best = 0;
        for (int p = 1; p < parts; p++)
            if (out->part_st[p].cost < out->part_st[best].cost) best = p;
        part[fs[f].kernel] = best;
        out->part_st[best].cost += fs[f].cost;
        out->part_st[best].functions++;
    }
    for (int i = 0; i < n; i++) {
        if (all->leader[i] < 0) {
            part[i] = -1;
            continue;
        }
        part[i] = part[all->leader[i]];
        out->part_st[part[i]].kernels++;
    }
    free(fs);
    return parts;
}

/* ---- the children ---- */

/* "part 3 of 8 (functions k3_attention_fwd, k7_gelu_add and 5 more): " */
static void part_prefix(const sn_cuda_parts *p, int part, const sn_kernel *const *ks, int n,
                        char *buf, size_t len) {
    int at = snprintf(buf, len, "part %d of %d (functions", part + 1, p->n_parts), named = 0;
    for (int i = 0; i < n && (size_t)at < len; i++) {
        if (p->part[i] != part || strcmp(p->fn[i], ks[i]->name) != 0) continue; /* functions */
        if (named == 3) {
            at += snprintf(buf + at, len - (size_t)at, " and %d more",
                           p->part_st[part].functions - named);
            break;
        }
        at += snprintf(buf + at, len - (size_t)at, "%s %s", named ? "," : "", ks[i]->name);
        named++;
    }
    if ((size_t)at < len) snprintf(buf + at, len - (size_t)at, "): ");
}

/* Compiles the parts listed in miss[0..n_miss) in children, at most jobs at once; each result is
 * stored in the cache as it arrives. On a failure no child is started and the running ones are
 * killed and reaped; the failure, naming its part, is returned. */
static sn_status run_children(sn_cuda_cache *c, sn_cuda_api *a, char **src, const int *miss,
                              int n_miss, const sn_cuda_cache_slot *slots, int arch, int jobs,
                              const char *name, const sn_kernel *const *ks, int n,
                              sn_cuda_parts *out, sn_err *e) {
    sn_nvrtc_child ch[SN_CUDA_MAX_PARTS];
    struct pollfd pfd[SN_CUDA_MAX_PARTS];
    int who[SN_CUDA_MAX_PARTS], started = 0, running = 0, done = 0;
    double t0 = sn_clock_s();
    sn_status st = SN_OK;
    while (!st && done < n_miss) {
        while (!st && running < jobs && started < n_miss) {
            int p = miss[started];
            char part_name[96];
            snprintf(part_name, sizeof part_name, "%s_part%dof%d.cu", name, p + 1, out->n_parts);
            if (!(st = sn_cuda_nvrtc_start(a, src[p], part_name, arch, &ch[started], e))) {
                started++;
                running++;
            }
        }
        int np = 0;
        for (int i = 0; i < started && !st; i++)
            if (ch[i].fd >= 0) {
                pfd[np] = (struct pollfd){.fd = ch[i].fd, .events = POLLIN};
                who[np++] = i;
            }
        if (st || np == 0) break;
        if (poll(pfd, (nfds_t)np, -1) < 0) {
            if (errno == EINTR) continue;
            st = sn_fail(e, SN_ERR_IO, "compiling %s: poll: %s", name, strerror(errno));
            break;
        }
        for (int k = 0; k < np && !st; k++) {
            if (!pfd[k].revents) continue;
            sn_nvrtc_child *x = &ch[who[k]];
            int p = miss[who[k]];
            bool eof = false;
            if ((st = sn_cuda_nvrtc_read(x, &eof, e)) || !eof) continue;
            running--;
            done++;
            if ((st = sn_cuda_nvrtc_finish(x, &out->mod[p], e))) {
                char prefix[256], why[sizeof e->msg];
                part_prefix(out, p, ks, n, prefix, sizeof prefix);
                snprintf(why, sizeof why, "%s", e->msg);
                sn_fail(e, st, "%s%s", prefix, why);
                break;
            }
            out->part_st[p].compiled = true;
            out->part_st[p].cpu_s = x->cpu_s;
            out->part_st[p].wall_s = x->wall_s;
            double s0 = sn_clock_s();
            sn_cuda_cache_store(c, &slots[p], arch, &out->mod[p]);
            out->cache_s += sn_clock_s() - s0;
        }
    }
    for (int i = 0; i < started; i++) sn_cuda_nvrtc_abandon(&ch[i]); /* no-ops once finished */
    out->nvrtc_s += sn_clock_s() - t0;
    return st;
}

sn_status sn_cuda_parts_compile(sn_cuda_cache *c, sn_cuda_api *a, const sn_kernel *const *ks,
                                int n, const sn_target *tg, int arch, int jobs, const char *name,
                                sn_cuda_parts *out, sn_err *e) {
    *out = (sn_cuda_parts){0};
    double t0 = sn_clock_s();
    sn_cuda_source all = {0};
    char *src[SN_CUDA_MAX_PARTS] = {0};
    out->part = sn_calloc((size_t)n + 1, sizeof *out->part, "the CUDA parts", e);
    out->fn = sn_calloc((size_t)n + 1, sizeof *out->fn, "the CUDA parts", e);
    sn_status st = !out->part || !out->fn ? SN_ERR_OOM : SN_OK;
    if (!st) st = sn_cuda_render(ks, n, tg, &all, e);
    if (!st && (out->n_parts = split(ks, &all, n, out->part, out, e)) < 0) st = SN_ERR_OOM;
    for (int i = 0; i < n && !st; i++) memcpy(out->fn[i], all.fn[i], sizeof out->fn[i]);
    for (int p = 0; p < out->n_parts && !st; p++) /* its functions as one rendering has them */
        if (!(st = sn_cuda_render_part(ks, &all, tg, out->part, p, &src[p], e)))
            out->part_st[p].src_bytes = strlen(src[p]);
    out->render_s = sn_clock_s() - t0;
    /* the cache, part by part; the misses compiled at once */
    sn_cuda_cache_slot slots[SN_CUDA_MAX_PARTS];
    int miss[SN_CUDA_MAX_PARTS], n_miss = 0;
    double c0 = sn_clock_s();
    for (int p = 0; p < out->n_parts && !st; p++) {
        bool hit = false;
        st = sn_cuda_cache_lookup(c, a, src[p], arch, &slots[p], &out->mod[p], &hit, e);
        if (!st && !hit) miss[n_miss++] = p;
    }
    out->cache_s = sn_clock_s() - c0;
    if (jobs < 1) jobs = sn_cuda_compile_jobs();
    if (jobs > n_miss) jobs = n_miss;
    if (!st && n_miss)
        st = run_children(c, a, src, miss, n_miss, slots, arch, jobs, name, ks, n, out, e);
    for (int p = 0; p < SN_CUDA_MAX_PARTS; p++) free(src[p]);
    sn_cuda_source_free(&all);
    if (st) sn_cuda_parts_free(out);
    return st;
}
