/* cpu.c: the CPU device: kernels generated as LLVM IR and JIT-compiled (codegen/llvm.h),
 * matrix products through the GEMM library (gemm.h), work split over a thread pool.
 * Convention: device memory is host memory, 64-byte aligned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm/llvm.h"
#include "device.h"
#include "gemm.h"
#include "gemm_epilogue.h"
#include "gemm_f8.h"
#include "gemm_lowp.h"
#include "host.h"
#include "pool.h"

typedef struct {
    sn_pool *pool;
    sn_jit *jit;
    sn_blobcache cache; /* the JIT's object files on disk */
    char name[96];
    /* the f32 product of a GEMM whose epilogue stores it elsewhere (cpu_gemm), kept between
     * calls: the device runs one kernel at a time, and a fresh allocation of a large product
     * (gpt2's 16-bit logits: 206 MB at B=4 T=256) cost its page faults every call (the LM
     * head's GEMM took 176 ms where it took 77 storing f32 straight) */
    float *scratch;
    size_t scratch_n;
} cpu_impl;

static sn_status cpu_compile(sn_device *d, sn_kernel *const *all, int n_all, void **handles, sn_err *e) {
    cpu_impl *c = d->impl;
    const char *what = "the CPU device's list of kernels to compile";
    sn_kernel **ks = sn_malloc(sizeof *ks * (size_t)(n_all + 1), what, e);
    sn_cpu_kernel_fn *fns = sn_calloc((size_t)n_all + 1, sizeof *fns, what, e);
    int *at = sn_malloc(sizeof(int) * (size_t)(n_all + 1), what, e);
    if (!ks || !fns || !at) {
        free(ks);
        free(fns);
        free(at);
        return SN_ERR_OOM;
    }
    int n = 0;
    for (int k = 0; k < n_all; k++)
        if (all[k]->kind != SN_KER_GEMM) {
            at[n] = k;
            ks[n++] = all[k];
        }
    sn_status s = n ? sn_jit_compile(c->jit, ks, n, fns, e) : SN_OK;
    for (int i = 0; !s && i < n; i++) handles[at[i]] = (void *)fns[i];
    free(ks);
    free(fns);
    free(at);
    return s;
}

typedef struct {
    sn_cpu_kernel_fn fn;
    void *const *bufs;
} launch_ctx;

static void run_range(void *ctx, int64_t begin, int64_t end) {
    launch_ctx *l = ctx;
    l->fn(l->bufs, begin, end);
}

static sn_status cpu_launch(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs, sn_err *e) {
    cpu_impl *c = d->impl;
    if (!handle) return sn_fail(e, SN_ERR_DEVICE, "kernel %s was not compiled", k->name);
    launch_ctx l = {(sn_cpu_kernel_fn)handle, bufs};
    /* small pointwise kernels are not worth waking the other threads */
    if (k->serial || k->n_items < 2 || (k->kind == SN_KER_POINTWISE && k->n_items < 4096))
        run_range(&l, 0, k->n_items);
    else sn_pool_run(c->pool, k->n_items, run_range, &l);
    return SN_OK;
}

typedef struct {
    const sn_node *mm;
    const sn_gemm_view *view; /* A's and B's (kernel.h: operand views) */
    void *const *bufs;
    const float *bias; /* the bias epilogue's (N) vector, or NULL */
    int parts;
    sn_status status[64];
    sn_err err[64];
} gemm_ctx;

static void gemm_part(void *ctx, int64_t begin, int64_t end) {
    gemm_ctx *g = ctx;
    sn_gemm_thread_init();
    sn_dtype in = g->mm->in[0]->dtype; /* f32, or bf16 / f16 / 8-bit operands, f32 output */
    for (int64_t p = begin; p < end; p++)
        g->status[p] = sn_dtype_is_f8(in)
            ? sn_gemm_matmul_part_f8(g->mm, g->view, g->bufs[0], g->bufs[1], g->bufs[2], g->bias,
                                     (int)p, g->parts, &g->err[p])
            : in != SN_F32
            ? sn_gemm_matmul_part_lowp(g->mm, g->view, g->bufs[0], g->bufs[1], g->bufs[2], g->bias,
                                       (int)p, g->parts, &g->err[p])
            : sn_gemm_matmul_part(g->mm, g->view, g->bufs[0], g->bufs[1], g->bufs[2], g->bias,
                                  (int)p, g->parts, &g->err[p]);
}

/* The epilogue the product's store does not do (gemm_epilogue.h), rows [begin, end). */
typedef struct {
    const sn_kernel *k;
    void *const *bufs;
    const float *c;
} store_ctx;

static void store_rows(void *ctx, int64_t begin, int64_t end) {
    store_ctx *s = ctx;
    sn_gemm_epilogue_rows(s->k, s->bufs, s->c, begin, end);
}

/* A product of at most this many multiply-adds runs on the calling thread: a LoRA adapter's
 * while decoding ((1, 768) @ (768, 8), then (1, 8) @ (8, 3072): 6k and 25k) takes about 3 us
 * there, and a job through the pool costs 0.07-0.6 us when its cores are free but up to a
 * scheduler's time slice when another process holds one (bench/pool_bench); at load 4-6 on
 * this 2-vCPU machine gpt2's 96 adapter products made a decode step 1.4-2.0x the plain one
 * (docs/generate.md, "Adapters while decoding"). */
enum { TINY_GEMM_MACS = 1 << 18 };

static bool tiny_gemm(const sn_node *mm) {
    const sn_node *a = mm->in[0];
    return sn_numel(mm) * a->shape[a->rank - 1 - mm->a.ta] <= TINY_GEMM_MACS;
}

static sn_status cpu_gemm(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e) {
    cpu_impl *c = d->impl;
    const sn_node *mm = k->anchor;
    sn_dtype in = mm->in[0]->dtype, out = k->args[0]->dtype;
    sn_epilogue epi = k->gemm.epilogue;
    if (mm->dtype != SN_F32 || (in != SN_F32 && in != SN_BF16 && in != SN_F16 && !sn_dtype_is_f8(in)) ||
        (out != SN_F32 && out != in) || epi < 0 || epi >= SN_EPI_COUNT)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "GEMM kernel %s multiplies %s operands into %s "
                       "with epilogue %s: the CPU device multiplies f32, bf16 and f16 operands "
                       "into f32 or their own type, with one of program/kernel.h's epilogues, and "
                       "8-bit float operands into f32",
                       k->name, sn_dtype_name(in), sn_dtype_name(out), sn_epilogue_name(epi));
    /* 8-bit operands (either format each): an f32 product stored as it is or with a bias added;
       the other epilogues would work on the f32 product alike, but nothing makes or tests them */
    if (sn_dtype_is_f8(in) && (out != SN_F32 || k->gemm.accum || (epi != SN_EPI_NONE && epi != SN_EPI_BIAS)))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "GEMM kernel %s multiplies 8-bit operands (%s x %s) "
                       "into %s with epilogue %s%s: the CPU device multiplies 8-bit operands into "
                       "an f32 product, plain or with a bias, only (others not supported yet)",
                       k->name, sn_dtype_name(in), sn_dtype_name(mm->in[1]->dtype),
                       sn_dtype_name(out), sn_epilogue_name(epi), k->gemm.accum ? " and accum" : "");
    int parts = sn_pool_threads(c->pool);
    if (parts > 64) parts = 64;
    int o = k->n_out; /* A, B, then the epilogue's input (kernel.h) */
    /* an f32 y without GELU: the product (and bias) stored straight into it; else the f32
       product into a scratch, then the epilogue as its own loop */
    bool direct = out == SN_F32 && !k->gemm.accum && (epi == SN_EPI_NONE || epi == SN_EPI_BIAS);
    float *scratch = NULL;
    void *prod[3] = {bufs[0], bufs[o], bufs[o + 1]};
    if (!direct) {
        size_t n = (size_t)sn_numel(mm);
        if (c->scratch_n < n) {
            free(c->scratch);
            c->scratch_n = 0;
            if (!(c->scratch = sn_malloc(sizeof(float) * n, "a GEMM's f32 product", e))) return SN_ERR_OOM;
            c->scratch_n = n;
        }
        prod[0] = scratch = c->scratch;
    }
    gemm_ctx g = {.mm = mm, .view = k->gemm.view, .bufs = prod, .parts = parts,
                  .bias = epi == SN_EPI_BIAS && direct ? bufs[o + 2] : NULL};
    bool tiny = tiny_gemm(mm);
    if (tiny) gemm_part(&g, 0, parts); /* the same parts, so the same bits */
    else sn_pool_run(c->pool, parts, gemm_part, &g);
    for (int p = 0; p < parts; p++)
        if (g.status[p]) {
            *e = g.err[p];
            return g.status[p];
        }
    if (scratch) {
        store_ctx st = {.k = k, .bufs = bufs, .c = scratch};
        int64_t rows = sn_numel(mm) / mm->shape[mm->rank - 1];
        if (tiny) store_rows(&st, 0, rows);
        else sn_pool_run(c->pool, rows, store_rows, &st);
    }
    return SN_OK;
}

static void cpu_destroy(sn_device *d) {
    cpu_impl *c = d->impl;
    free(c->scratch);
    sn_jit_free(c->jit);
    sn_pool_free(c->pool);
    free(c);
    free(d);
}

sn_status sn_cpu_device_new(int threads, sn_device **out, sn_err *e) {
    return sn_cpu_device_new_opts(threads, NULL, out, e);
}

sn_status sn_cpu_device_new_opts(int threads, const sn_cpu_opts *o, sn_device **out, sn_err *e) {
    *out = NULL;
    cpu_impl *c = sn_calloc(1, sizeof *c, "the CPU device", e);
    sn_device *d = c ? sn_calloc(1, sizeof *d, "the CPU device", e) : NULL;
    sn_status s = d ? sn_jit_new(&c->jit, e) : SN_ERR_OOM;
    if (!s) {
        sn_blobcache_init(&c->cache, o ? o->cache_dir : NULL, "cpu", o && o->no_cache);
        sn_jit_set_cache(c->jit, &c->cache);
    }
    if (!s && !(c->pool = sn_pool_new(threads))) {
        sn_jit_free(c->jit);
        s = sn_fail_oom(e, 64 * (size_t)(threads > 0 ? threads : 1), "the CPU device's thread pool");
    }
    if (s) {
        free(c);
        free(d);
        return s;
    }
    snprintf(c->name, sizeof c->name, "cpu (LLVM JIT, %d threads, GEMM: %s)", sn_pool_threads(c->pool),
             sn_gemm_library());
    *d = (sn_device){.name = c->name, .compile = cpu_compile, .launch = cpu_launch, .gemm = cpu_gemm,
                     .destroy = cpu_destroy, .impl = c, .target = sn_target_cpu()};
    sn_host_device_hooks(d);
    *out = d;
    return SN_OK;
}

void sn_device_free(sn_device *d) {
    if (d) d->destroy(d);
}
