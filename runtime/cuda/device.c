/* device.c: the CUDA device behind sn_device: the primary context, one stream, device memory
 * from cuMemAlloc, a module per part of each compiled program (compile_parts.c: NVRTC children
 * through the disk cache), launches with the kernels' launch dimensions, cuBLASLt plans for GEMM
 * kernels (tuned when SN_GEMM_TUNE asks: gemm_tune.c), the step queued for graphs.
 * Convention: a device pointer is a CUdeviceptr cast to void *; nothing here dereferences one. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support/clock.h"
#include "cuda_rt.h"

enum { SHARED_DEFAULT = 48 * 1024, WORKSPACE_BYTES = 32 << 20 };
enum { TAG_FN = 0x5fa11, TAG_GEMM = 0x6e33, TAG_COPY = 0xc0b1 };
static const int copy_tag = TAG_COPY; /* a copy op's `what` (cuda_rt.h) */

/* What launch and gemm receive as a kernel's handle; lives as long as the device. */
typedef struct {
    int tag; /* TAG_FN */
    CUfunction f;
    sn_cuda_dims dims;
    unsigned shared; /* dynamic shared memory, bytes */
    const sn_kernel *k;
} cuda_fn;

typedef struct {
    int tag; /* TAG_GEMM */
    const sn_kernel *k;
    sn_gemm_plan *plan;
} cuda_gemm;

typedef struct {
    sn_device base;
    sn_cuda_api api;
    sn_cuda_opts opts;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUstream copies[2]; /* copy_async's streams, down and up (made at first use) */
    CUevent order;   /* recorded on one stream for the other to wait on */
    int sm;
    int shared_optin;
    int sms; /* multiprocessors: the target's sm_count (persistent launches' grids) */
    char name[256];
    sn_cuda_cache cache;
    cublasLtHandle_t lt;
    CUdeviceptr workspace;
    CUmodule *modules; /* every part of every program compiled */
    int n_modules, n_programs;
    void **owned; /* cuda_fn arrays and cuda_gemm entries, freed at destroy */
    int n_owned;
    cuda_gemm **gemms; /* by kernel, for gemm() (which receives no handle) */
    int n_gemms;
    sn_cuda_graphs *graphs;
    sn_gemm_tuner tune; /* SN_GEMM_TUNE (gemm_tune.c) */
    sn_err deferred; /* a failure of work issued by free(), which returns none: told next */
    bool has_deferred;
    sn_cuda_stats st;
} cuda_dev;

#define API (&c->api)
#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

static sn_status keep(cuda_dev *c, void *p, sn_err *e) {
    void **o = sn_realloc(c->owned, (size_t)(c->n_owned + 1) * sizeof *o, "the CUDA device", e);
    if (!o) {
        free(p);
        return SN_ERR_OOM;
    }
    c->owned = o;
    c->owned[c->n_owned++] = p;
    return SN_OK;
}

/* ---- memory ---- */

static void *cu_alloc(sn_device *d, size_t bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    CUdeviceptr p = 0;
    sn_status st = SN_CUDA_CHECK(API, e, cuMemAlloc, &p, bytes ? bytes : 1);
    if (st == SN_ERR_OOM) {
        size_t free_b = 0, total = 0;
        char want[32], have[32];
        c->api.cuMemGetInfo(&free_b, &total);
        size_t len = strlen(e->msg);
        snprintf(e->msg + len, sizeof e->msg - len, ": the GPU has %s free, %s were asked for "
                 "(use a smaller --batch or --seq, or --mem auto: the planner fits the run in the GPU's "
                 "free memory)", sn_bytes_str((int64_t)free_b, have, sizeof have),
                 sn_bytes_str((int64_t)bytes, want, sizeof want));
    }
    if (!st) st = SN_CUDA_CHECK(API, e, cuMemsetD8Async, p, 0, bytes, c->stream);
    return st ? NULL : (void *)(uintptr_t)p;
}

/* A failure free() could not report, now (SN_OK: none). */
static sn_status told(cuda_dev *c, sn_err *e) {
    if (!c->has_deferred) return SN_OK;
    c->has_deferred = false;
    *e = c->deferred;
    return e->code;
}

/* Issues the queued launches (graph.c), after reporting a failure free() could not. */
static sn_status flush(cuda_dev *c, sn_err *e) {
    sn_status st = told(c, e);
    return st ? st : sn_cuda_graphs_flush(c->graphs, e);
}

/* The queued work may use p (an optimizer step queued last, its executor freed next): it is
 * issued first, so it never runs on freed memory, which a new allocation may reuse. */
static void cu_free(sn_device *d, void *p) {
    cuda_dev *c = d->impl;
    if (!p) return;
    sn_err e;
    if (sn_cuda_graphs_flush(c->graphs, &e) && !c->has_deferred) {
        c->deferred = e;
        c->has_deferred = true;
    }
    c->api.cuMemFree(DP(p)); /* cuMemFree synchronises with the device */
}

static sn_status cu_sync(sn_device *d, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_status st = flush(c, e);
    return st ? st : SN_CUDA_CHECK(API, e, cuStreamSynchronize, c->stream);
}

static sn_status cu_upload(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_status st = flush(c, e);
    if (!st) st = SN_CUDA_CHECK(API, e, cuMemcpyHtoDAsync, DP(dst), src, bytes, c->stream);
    return st ? st : SN_CUDA_CHECK(API, e, cuStreamSynchronize, c->stream); /* src reusable */
}

static sn_status cu_download(sn_device *d, void *dst, const void *src, size_t bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_status st = flush(c, e);
    if (!st) st = SN_CUDA_CHECK(API, e, cuMemcpyDtoHAsync, dst, DP(src), bytes, c->stream);
    return st ? st : SN_CUDA_CHECK(API, e, cuStreamSynchronize, c->stream);
}

/* The device-to-device copy, memset and events of sn_device. A copy or memset flushes the queued
 * launches (graph.c); an event is queued with them. */
static sn_status cu_copy(sn_device *d, void *dst, const void *src,
                                                 size_t bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_status st = flush(c, e);
    return st ? st : SN_CUDA_CHECK(API, e, cuMemcpyDtoDAsync, DP(dst), DP(src), bytes, c->stream);
}

static sn_status cu_copy_rows(sn_device *d, void *dst, size_t dst_pitch, const void *src,
                              size_t src_pitch, size_t width, size_t rows, sn_err *e) {
    cuda_dev *c = d->impl;
    CUDA_MEMCPY2D m = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = DP(src),
                       .srcPitch = src_pitch, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = DP(dst), .dstPitch = dst_pitch, .WidthInBytes = width,
                       .Height = rows};
    sn_status st = flush(c, e);
    return st ? st : SN_CUDA_CHECK(API, e, cuMemcpy2DAsync, &m, c->stream);
}

static sn_status cu_memset(sn_device *d, void *dst, int value,
                                                   size_t bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_status st = flush(c, e);
    return st ? st : SN_CUDA_CHECK(API, e, cuMemsetD8Async, DP(dst), (unsigned char)value, bytes,
                                   c->stream);
}

static void *cu_event_new(sn_device *d, sn_err *e) {
    cuda_dev *c = d->impl;
    CUevent ev = NULL;
    return SN_CUDA_CHECK(API, e, cuEventCreate, &ev, CU_EVENT_DEFAULT) ? NULL : (void *)ev;
}

/* An event joins the queue (graph.c): recording one must not split a step that a graph runs. */
static sn_status cu_event_record(sn_device *d, void *ev, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_cuda_op op = {.event = (CUevent)ev};
    return sn_cuda_graphs_add(c->graphs, &op, e);
}

static sn_status cu_event_elapsed(sn_device *d, void *from, void *to,
                                                          double *seconds, sn_err *e) {
    cuda_dev *c = d->impl;
    float ms = 0;
    sn_status st = SN_CUDA_CHECK(API, e, cuEventElapsedTime, &ms, (CUevent)from, (CUevent)to);
    *seconds = st ? 0 : ms * 1e-3;
    return st;
}

static void cu_event_free(sn_device *d, void *ev) {
    cuda_dev *c = d->impl;
    if (ev) c->api.cuEventDestroy((CUevent)ev);
}

/* ---- copies on a second stream (offload: they overlap the host's AdamW) ---- */

static void *cu_host_alloc(sn_device *d, size_t bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    void *p = NULL;
    return SN_CUDA_CHECK(API, e, cuMemHostAlloc, &p, bytes ? bytes : 1, 0) ? NULL : p;
}

static void cu_host_free(sn_device *d, void *p) {
    cuda_dev *c = d->impl;
    if (p) c->api.cuMemFreeHost(p);
}


/* A copy op (cuda_rt.h) on the copy stream of its direction, after the work issued so far on
 * the device's stream (an event it waits on) or after its own `after` event (recorded earlier in
 * the device's stream); its event recorded after it. */
static sn_status issue_copy(cuda_dev *c, const sn_cuda_op *op, sn_err *e) {
    CUstream *s = &c->copies[op->up];
    sn_status st = SN_OK;
    if (!*s) st = SN_CUDA_CHECK(API, e, cuStreamCreate, s, CU_STREAM_NON_BLOCKING);
    if (!st && !op->after && !c->order)
        st = SN_CUDA_CHECK(API, e, cuEventCreate, &c->order, CU_EVENT_DISABLE_TIMING);
    if (!st && !op->after) st = SN_CUDA_CHECK(API, e, cuEventRecord, c->order, c->stream);
    if (!st) st = SN_CUDA_CHECK(API, e, cuStreamWaitEvent, *s, op->after ? op->after : c->order, 0);
    if (!st) st = op->up ? SN_CUDA_CHECK(API, e, cuMemcpyHtoDAsync, op->bufs[0], op->host, op->bytes, *s)
                         : SN_CUDA_CHECK(API, e, cuMemcpyDtoHAsync, op->host, op->bufs[0], op->bytes, *s);
    return st ? st : SN_CUDA_CHECK(API, e, cuEventRecord, op->event, *s);
}

/* Queued with the launches (graph.c): after them, issued at once when nothing is queued. */
static sn_status cu_copy_async(sn_device *d, void *dst, const void *src, size_t bytes, bool up,
                               void *after, void *done, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_cuda_op op = {.what = &copy_tag, .event = (CUevent)done, .n_bufs = 1,
                     .bufs = {DP(up ? dst : src)}, .host = up ? (void *)src : dst, .bytes = bytes,
                     .up = up, .after = (CUevent)after};
    sn_status st = told(c, e);
    return st ? st : sn_cuda_graphs_add(c->graphs, &op, e);
}

static sn_status cu_flush(sn_device *d, sn_err *e) { return flush(d->impl, e); }

static sn_status cu_mem_info(sn_device *d, int64_t *free_bytes, int64_t *total_bytes, sn_err *e) {
    cuda_dev *c = d->impl;
    size_t f = 0, t = 0;
    sn_status st = SN_CUDA_CHECK(API, e, cuMemGetInfo, &f, &t);
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
    return st;
}

static sn_status cu_event_wait(sn_device *d, void *done, sn_err *e) {
    cuda_dev *c = d->impl;
    sn_status st = flush(c, e); /* a copy still queued records `done` when issued */
    return st ? st : SN_CUDA_CHECK(API, e, cuEventSynchronize, (CUevent)done);
}

/* ---- compiling: GEMM plans, then the program's parts, a module each ---- */

static sn_status gemm_plan(cuda_dev *c, const sn_kernel *k, cuda_gemm **out, sn_err *e) {
    sn_status st = sn_cuda_api_load(API, SN_LIB_CUBLASLT, e);
    if (!st && !c->lt) st = SN_CUDA_CHECK(API, e, cublasLtCreate, &c->lt);
    if (!st && !c->workspace) st = SN_CUDA_CHECK(API, e, cuMemAlloc, &c->workspace, WORKSPACE_BYTES);
    if (st) return st;
    sn_dtype in = k->anchor->in[0]->dtype; /* bf16/f16 operands (autocast): an f32 product */
    if (sn_dtype_is_f8(in) && c->sm < 89) /* FP8 tensor cores: Ada (sm_89), Hopper and newer */
        return sn_fail(e, SN_ERR_UNSUPPORTED, "GEMM kernel %s multiplies 8-bit floats (%s by %s), "
                       "which need sm_89 or newer (Ada, Hopper), and this GPU is sm_%d: compile "
                       "for this device's target without the fp8 pass (--fp8 off)", k->name, sn_dtype_name(in),
                       sn_dtype_name(k->anchor->in[1]->dtype), c->sm);
    /* two 8-bit floats may differ in format (e5m2 by e4m3: cublaslt.c checks the pair) */
    if (k->anchor->in[1]->dtype != in && !(sn_dtype_is_f8(in) && sn_dtype_is_f8(k->anchor->in[1]->dtype)))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "GEMM kernel %s multiplies %s by %s: cuBLASLt takes "
                       "operands of one type (cast one of them)", k->name, sn_dtype_name(in),
                       sn_dtype_name(k->anchor->in[1]->dtype));
    if (in == SN_BF16 && c->sm < 80) /* cuBLASLt has no bf16 kernels before Ampere */
        return sn_fail(e, SN_ERR_UNSUPPORTED, "GEMM kernel %s has bf16 operands, which need sm_80 "
                       "or newer, and this GPU is sm_%d: train with --precision fp16 (or fp32)",
                       k->name, c->sm);
    cuda_gemm *g = sn_calloc(1, sizeof *g, "a GEMM plan", e);
    if (!g) return SN_ERR_OOM;
    g->tag = TAG_GEMM;
    g->k = k;
    sn_gemm_shape s = sn_gemm_shape_of(k);
    st = sn_gemm_plan_new(API, c->lt, &s, c->opts.tf32 && c->sm >= 80, WORKSPACE_BYTES, &g->plan, e);
    if (!st)
        st = sn_gemm_tune(&c->tune, API, c->lt, g->plan, c->stream, c->workspace, WORKSPACE_BYTES,
                          NULL, e);
    if (st) {
        size_t len = strlen(e->msg);
        snprintf(e->msg + len, sizeof e->msg - len, " (GEMM kernel %s)", k->name);
        sn_gemm_plan_free(API, g->plan);
        free(g);
        return st;
    }
    if ((st = keep(c, g, e))) return st;
    cuda_gemm **gs = sn_realloc(c->gemms, (size_t)(c->n_gemms + 1) * sizeof *gs, "GEMM plans", e);
    if (!gs) return SN_ERR_OOM;
    c->gemms = gs;
    c->gemms[c->n_gemms++] = g;
    c->st.gemm_plans++;
    *out = g;
    return SN_OK;
}

/* Loads each part's CUBIN as a module, kept until destroy. */
static sn_status load_parts(cuda_dev *c, const sn_cuda_parts *parts, CUmodule *mods, sn_err *e) {
    CUmodule *ms = sn_realloc(c->modules, (size_t)(c->n_modules + parts->n_parts) * sizeof *ms,
                              "modules", e);
    if (!ms) return SN_ERR_OOM;
    c->modules = ms;
    for (int p = 0; p < parts->n_parts; p++) {
        sn_status st = SN_CUDA_CHECK(API, e, cuModuleLoadData, &mods[p], parts->mod[p].cubin);
        if (st) return st;
        c->modules[c->n_modules++] = mods[p];
    }
    return SN_OK;
}

static sn_status cu_compile(sn_device *d, sn_kernel *const *ks, int n, void **handles, sn_err *e) {
    cuda_dev *c = d->impl;
    double t0 = sn_clock_s();
    const sn_kernel **gen = sn_calloc((size_t)n + 1, sizeof *gen, "the kernels to compile", e);
    cuda_fn *fns = sn_calloc((size_t)n + 1, sizeof *fns, "the kernels to compile", e);
    if (!gen || !fns) {
        free(gen);
        free(fns);
        return SN_ERR_OOM;
    }
    sn_status st = keep(c, fns, e);
    int m = 0;
    for (int i = 0; i < n && !st; i++) {
        if (ks[i]->kind == SN_KER_GEMM) {
            cuda_gemm *g = NULL;
            st = gemm_plan(c, ks[i], &g, e);
            if (!st) handles[i] = g;
        } else {
            gen[m++] = ks[i];
        }
    }
    double t1 = sn_clock_s();
    c->st.gemm_s += t1 - t0;
    sn_target tg = c->base.target; /* sm_count: a persistent kernel's grid (not in its text) */
    sn_cuda_parts parts = {0};
    char name[64];
    snprintf(name, sizeof name, "sinter_program_%d", c->n_programs++);
    if (!st && m) {
        int hits = c->cache.hits, misses = c->cache.misses;
        st = sn_cuda_parts_compile(&c->cache, API, gen, m, &tg, c->sm, c->opts.compile_jobs, name,
                                   &parts, e);
        c->st.nvrtc_runs += c->cache.misses - misses;
        c->st.cache_hits += c->cache.hits - hits;
        c->st.cache_rejected = c->cache.rejected;
        c->st.render_s += parts.render_s;
        c->st.cache_s += parts.cache_s;
        c->st.nvrtc_s += parts.nvrtc_s;
        c->st.programs++;
        c->st.parts += parts.n_parts;
        c->st.last_parts = parts.n_parts;
        memcpy(c->st.part, parts.part_st, sizeof c->st.part);
    }
    double t2 = sn_clock_s();
    CUmodule mods[SN_CUDA_MAX_PARTS] = {0};
    if (!st && m) st = load_parts(c, &parts, mods, e);
    for (int i = 0, j = 0; i < n && !st && m; i++) {
        if (ks[i]->kind == SN_KER_GEMM) continue;
        int at = j++;
        cuda_fn *f = &fns[at];
        *f = (cuda_fn){.tag = TAG_FN, .k = ks[i], .dims = sn_cuda_launch_dims(ks[i], &tg)};
        f->shared = f->dims.shared_bytes;
        st = SN_CUDA_CHECK(API, e, cuModuleGetFunction, &f->f, mods[parts.part[at]], parts.fn[at]);
        if (!st && f->shared > SHARED_DEFAULT) {
            if ((int)f->shared > c->shared_optin)
                st = sn_fail(e, SN_ERR_UNSUPPORTED, "kernel %s needs %u bytes of shared memory; "
                             "this GPU allows %d", ks[i]->name, f->shared, c->shared_optin);
            else
                st = SN_CUDA_CHECK(API, e, cuFuncSetAttribute, f->f,
                                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)f->shared);
        }
        handles[i] = f;
    }
    c->st.load_s += sn_clock_s() - t2;
    sn_cuda_parts_free(&parts);
    free(gen);
    c->st.compile_s += sn_clock_s() - t0;
    return st;
}

/* ---- running ---- */

static sn_status issue(void *ctx, const sn_cuda_op *op, sn_err *e) {
    cuda_dev *c = ctx;
    if (*(const int *)op->what == TAG_COPY) return issue_copy(c, op, e);
    if (*(const int *)op->what == TAG_GEMM) {
        const cuda_gemm *g = op->what;
        /* args (kernel.h): y [, aux], A, B [, bias or DGELU's aux] [, accum's c] */
        const sn_kernel *k = g->k;
        sn_epilogue epi = k->gemm.epilogue;
        int o = k->n_out;
        CUdeviceptr in = o + 2 < op->n_bufs ? op->bufs[o + 2] : 0;
        return sn_gemm_plan_run(API, c->lt, g->plan, op->bufs[0], op->bufs[o], op->bufs[o + 1],
                                sn_gemm_has_bias(epi) ? in : 0,
                                epi == SN_EPI_GELU_AUX_BIAS ? op->bufs[1]
                                : epi == SN_EPI_DGELU ? in : 0,
                                k->gemm.accum ? op->bufs[o + k->n_in - 1] : 0, c->workspace, WORKSPACE_BYTES,
                                c->stream, e);
    }
    const cuda_fn *f = op->what;
    void *params[SN_KER_MAX_BUFS];
    for (int i = 0; i < op->n_bufs; i++) params[i] = (void *)&op->bufs[i];
    sn_status st = SN_CUDA_CHECK(API, e, cuLaunchKernel, f->f, f->dims.grid[0], f->dims.grid[1],
                                 f->dims.grid[2], f->dims.block[0], f->dims.block[1],
                                 f->dims.block[2], f->shared, c->stream, params, NULL);
    if (st) {
        size_t len = strlen(e->msg);
        snprintf(e->msg + len, sizeof e->msg - len, " (kernel %s, grid %u x %u x %u, block %u)",
                 f->k->name, f->dims.grid[0], f->dims.grid[1], f->dims.grid[2], f->dims.block[0]);
    }
    return st;
}

static sn_status queue(cuda_dev *c, const void *what, const sn_kernel *k, void *const *bufs,
                       sn_err *e) {
    sn_cuda_op op = {.what = what, .n_bufs = sn_kernel_n_bufs(k)};
    for (int i = 0; i < op.n_bufs; i++) op.bufs[i] = DP(bufs[i]);
    return sn_cuda_graphs_add(c->graphs, &op, e);
}

static sn_status cu_launch(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs,
                           sn_err *e) {
    cuda_dev *c = d->impl;
    if (!handle || *(const int *)handle != TAG_FN)
        return sn_fail(e, SN_ERR_INVALID, "kernel %s was not compiled by this CUDA device", k->name);
    return queue(c, handle, k, bufs, e);
}

static sn_status cu_gemm(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e) {
    cuda_dev *c = d->impl;
    for (int i = c->n_gemms - 1; i >= 0; i--)
        if (c->gemms[i]->k == k) return queue(c, c->gemms[i], k, bufs, e);
    return sn_fail(e, SN_ERR_INVALID, "GEMM kernel %s has no cuBLASLt plan: it was not compiled "
                   "by this CUDA device", k->name);
}

/* ---- the device ---- */

static void cu_destroy(sn_device *d) {
    cuda_dev *c = d->impl;
    if (c->stream) c->api.cuStreamSynchronize(c->stream);
    sn_cuda_graphs_free(c->graphs);
    for (int i = 0; i < c->n_gemms; i++) sn_gemm_plan_free(API, c->gemms[i]->plan);
    for (int i = 0; i < c->n_owned; i++) free(c->owned[i]);
    for (int i = 0; i < c->n_modules; i++) c->api.cuModuleUnload(c->modules[i]);
    if (c->workspace) c->api.cuMemFree(c->workspace);
    if (c->lt) c->api.cublasLtDestroy(c->lt);
    for (int i = 0; i < 2; i++)
        if (c->copies[i]) {
            c->api.cuStreamSynchronize(c->copies[i]);
            c->api.cuStreamDestroy(c->copies[i]);
        }
    if (c->order) c->api.cuEventDestroy(c->order);
    if (c->stream) c->api.cuStreamDestroy(c->stream);
    if (c->ctx) c->api.cuDevicePrimaryCtxRelease(c->dev);
    free(c->modules);
    free(c->owned);
    free(c->gemms);
    sn_gemm_tuner_free(&c->tune);
    sn_cuda_api_unload(API);
    free(c);
}

void sn_cuda_stats_get(const sn_device *d, sn_cuda_stats *s) {
    *s = (sn_cuda_stats){0};
    if (!d || d->destroy != cu_destroy) return;
    const cuda_dev *c = d->impl;
    *s = c->st;
    s->gemm_tuned = c->tune.timed;
    s->gemm_tune_switched = c->tune.switched;
    s->gemm_tune_s = c->tune.seconds;
    if (c->graphs) sn_cuda_graphs_counts(c->graphs, &s->graphs_captured, &s->graph_launches,
                                         &s->eager_steps);
}

static sn_status open_device(cuda_dev *c, int ordinal, sn_err *e) {
    sn_status st = sn_cuda_api_load(API, SN_LIB_CUDA, e);
    if (st) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return sn_fail(e, SN_ERR_DEVICE, "no CUDA device (%s)", why);
    }
    int n = 0, major = 0, minor = 0, sms = 0;
    size_t mem = 0;
    if ((st = SN_CUDA_CHECK(API, e, cuInit, 0)) || (st = SN_CUDA_CHECK(API, e, cuDeviceGetCount, &n)))
        return st;
    if (ordinal < 0 || ordinal >= n)
        return sn_fail(e, SN_ERR_DEVICE, "no CUDA device %d: the driver reports %d device%s",
                       ordinal, n, n == 1 ? "" : "s");
    char gpu[160] = "?";
    if ((st = SN_CUDA_CHECK(API, e, cuDeviceGet, &c->dev, ordinal)) ||
        (st = SN_CUDA_CHECK(API, e, cuDeviceGetName, gpu, (int)sizeof gpu, c->dev)) ||
        (st = SN_CUDA_CHECK(API, e, cuDeviceGetAttribute, &major,
                            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev)) ||
        (st = SN_CUDA_CHECK(API, e, cuDeviceGetAttribute, &minor,
                            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev)) ||
        (st = SN_CUDA_CHECK(API, e, cuDeviceGetAttribute, &sms,
                            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev)) ||
        (st = SN_CUDA_CHECK(API, e, cuDeviceGetAttribute, &c->shared_optin,
                            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, c->dev)) ||
        (st = SN_CUDA_CHECK(API, e, cuDeviceTotalMem, &mem, c->dev)))
        return st;
    c->sm = c->st.sm = major * 10 + minor;
    c->sms = sms;
    if (c->sm < 75)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "CUDA device %d (%s) is sm_%d: sinter needs sm_75 "
                       "(Turing) or newer; use --device cpu", ordinal, gpu, c->sm);
    if ((st = SN_CUDA_CHECK(API, e, cuDevicePrimaryCtxRetain, &c->ctx, c->dev))) return st;
    if ((st = SN_CUDA_CHECK(API, e, cuCtxSetCurrent, c->ctx)) ||
        (st = SN_CUDA_CHECK(API, e, cuStreamCreate, &c->stream, CU_STREAM_NON_BLOCKING)))
        return st;
    char mem_s[32], tune[48] = "";
    if (c->tune.n) snprintf(tune, sizeof tune, ", GEMMs tuned (SN_GEMM_TUNE=%d)", c->tune.n);
    snprintf(c->name, sizeof c->name, "cuda %d: %s, sm_%d, %s, %d SMs%s%s", ordinal, gpu, c->sm,
             sn_bytes_str((int64_t)mem, mem_s, sizeof mem_s), sms,
             c->opts.tf32 && c->sm >= 80 ? ", TF32 GEMMs" : "", tune);
    c->graphs = sn_cuda_graphs_new(API, c->stream, !c->opts.no_graphs, issue, c, e);
    return c->graphs ? SN_OK : SN_ERR_OOM;
}

sn_status sn_cuda_device_new_opts(int ordinal, const sn_cuda_opts *o, sn_device **out, sn_err *e) {
    *out = NULL;
    cuda_dev *c = sn_calloc(1, sizeof *c, "the CUDA device", e);
    if (!c) return SN_ERR_OOM;
    c->opts = o ? *o : (sn_cuda_opts){0};
    c->opts.cache_dir = NULL; /* copied into the cache below */
    sn_cuda_cache_init(&c->cache, o ? o->cache_dir : NULL, c->opts.no_cache);
    c->base.impl = c;
    sn_status st = sn_gemm_tuner_init(&c->tune, e);
    if (!st) st = open_device(c, ordinal, e);
    if (st) {
        cu_destroy(&c->base);
        return st;
    }
    c->base = (sn_device){.name = c->name, .alloc = cu_alloc, .free = cu_free,
                          .upload = cu_upload, .download = cu_download, .compile = cu_compile,
                          .launch = cu_launch, .gemm = cu_gemm, .sync = cu_sync,
                          .copy = cu_copy, .copy_rows = cu_copy_rows, .memset = cu_memset, .event_new = cu_event_new,
                          .event_record = cu_event_record, .event_elapsed = cu_event_elapsed,
                          .event_free = cu_event_free, .host_alloc = cu_host_alloc,
                          .host_free = cu_host_free, .copy_async = cu_copy_async,
                          .event_wait = cu_event_wait, .flush = cu_flush, .mem_info = cu_mem_info,
                          .destroy = cu_destroy, .impl = c, .target = sn_target_cuda(c->sm)};
    c->base.target.sm_count = c->sms;
    /* the device's own limit, which the table of sn_target_cuda may not know (a newer part) */
    if (c->shared_optin > 0) c->base.target.shared_max = c->shared_optin;
    *out = &c->base;
    return SN_OK;
}

sn_status sn_cuda_device_new(int ordinal, sn_device **out, sn_err *e) {
    return sn_cuda_device_new_opts(ordinal, NULL, out, e);
}
