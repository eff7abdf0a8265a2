/* exec.c: the executor: runs a compiled program's kernels in order on one device.
 * Convention: buffers are carved from two device blocks by the memory plan; the measured
 * arena peak is the highest arena byte a kernel was handed, which must equal the plan's. */
#include <stdlib.h>
#include <string.h>

#include "support/clock.h"
#include "device.h"

struct sn_exec {
    sn_device *d;
    const sn_program *p;
    char *arena, *persistent;
    void **handles;    /* per kernel, from the device's compile */
    double *kernel_s;  /* per kernel: time of the last run */
    sn_exec_stats st;
};

static const sn_value *value_of(const sn_exec *x, const sn_node *n) {
    if (!n || n->id < 0 || n->id >= x->p->g->n_nodes || x->p->g->nodes[n->id] != n) return NULL;
    int v = x->p->value_of[n->id];
    return v < 0 ? NULL : &x->p->values[v];
}

static void *ptr_of(const sn_exec *x, const sn_value *v) {
    return (v->persistent ? x->persistent : x->arena) + v->offset;
}

/* CONST and FULL values, converted to their dtype's layout. */
static sn_status fill_constants(sn_exec *x, sn_err *e) {
    const sn_program *p = x->p;
    for (int i = 0; i < p->n_values; i++) {
        const sn_value *v = &p->values[i];
        const sn_node *n = v->node;
        if (n->op != SN_OP_CONST && n->op != SN_OP_FULL) continue;
        if (n->dtype != SN_F32 && n->dtype != SN_I32)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "constant %%%d is %s: only f32 and i32 constants "
                           "are supported by the compiled backends yet", n->id, sn_dtype_name(n->dtype));
        int64_t m = sn_numel(n);
        void *host = sn_malloc((size_t)v->bytes + 1, "a constant's staging copy", e);
        if (!host) return SN_ERR_OOM;
        for (int64_t k = 0; k < m; k++) {
            float f = n->op == SN_OP_CONST ? n->data[k] : n->a.f;
            if (n->dtype == SN_I32) ((int32_t *)host)[k] = (int32_t)f;
            else ((float *)host)[k] = f;
        }
        sn_status s = x->d->upload(x->d, ptr_of(x, v), host, (size_t)v->bytes, e);
        free(host);
        if (s) return s;
    }
    return SN_OK;
}

void sn_exec_free(sn_exec *x) {
    if (!x) return;
    if (x->arena) x->d->free(x->d, x->arena);
    if (x->persistent) x->d->free(x->d, x->persistent);
    free(x->handles);
    free(x->kernel_s);
    free(x);
}

sn_status sn_exec_new(sn_device *d, const sn_program *p, sn_exec **out, sn_err *e) {
    *out = NULL;
    sn_exec *x = sn_calloc(1, sizeof *x, "the executor", e);
    if (!x) return SN_ERR_OOM;
    x->d = d;
    x->p = p;
    x->handles = sn_calloc((size_t)p->n_kernels + 1, sizeof *x->handles, "the executor's kernels", e);
    x->kernel_s = sn_calloc((size_t)p->n_kernels + 1, sizeof *x->kernel_s, "the executor's kernels", e);
    if (!x->handles || !x->kernel_s) {
        sn_exec_free(x);
        return SN_ERR_OOM;
    }
    sn_status s = SN_OK;
    sn_err de = {0};
    const char *block = "arena (the activations and gradients one step reuses)";
    if ((x->arena = d->alloc(d, (size_t)p->arena_bytes + 64, &de)))
        block = "persistent block (parameters, inputs, outputs)";
    if (!x->arena || !(x->persistent = d->alloc(d, (size_t)p->persistent_bytes + 64, &de))) {
        sn_exec_free(x);
        return sn_fail(e, de.code ? de.code : SN_ERR_OOM, "the program's %s does not fit on the device: %s", block, de.msg);
    }
    x->st.arena_bytes = p->arena_bytes;
    double t0 = sn_clock_s();
    if (!s) s = d->compile(d, p->kernels, p->n_kernels, x->handles, e);
    x->st.compile_s = sn_clock_s() - t0;
    if (!s) s = fill_constants(x, e);
    if (s) {
        sn_exec_free(x);
        return s;
    }
    *out = x;
    return SN_OK;
}

sn_status sn_exec_set(sn_exec *x, const sn_node *n, const void *data, sn_err *e) {
    const sn_value *v = value_of(x, n);
    if (!v || (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM))
        return sn_fail(e, SN_ERR_INVALID, "sn_exec_set: node %%%d is not an input or parameter "
                       "of the compiled program", n ? n->id : -1);
    if (n->dtype != SN_F32 && n->dtype != SN_I32)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "sn_exec_set: %s values are not supported yet",
                       sn_dtype_name(n->dtype));
    return x->d->upload(x->d, ptr_of(x, v), data, (size_t)v->bytes, e);
}

sn_status sn_exec_get(sn_exec *x, const sn_node *n, void *data, sn_err *e) {
    const sn_value *v = value_of(x, n);
    if (!v || !v->persistent)
        return sn_fail(e, SN_ERR_INVALID, "sn_exec_get: node %%%d is not kept by the program "
                       "(mark it as a graph output)", n ? n->id : -1);
    return x->d->download(x->d, data, ptr_of(x, v), (size_t)v->bytes, e);
}

void *sn_exec_ptr(sn_exec *x, const sn_node *n) {
    const sn_value *v = value_of(x, n);
    return v && v->persistent ? ptr_of(x, v) : NULL;
}

sn_status sn_exec_run(sn_exec *x, sn_err *e) {
    const sn_program *p = x->p;
    memset(x->st.kind_s, 0, sizeof x->st.kind_s);
    double t_run = sn_clock_s();
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        void *bufs[SN_KER_MAX_ARGS];
        for (int a = 0; a < ker->n_out + ker->n_in; a++) {
            const sn_value *v = value_of(x, ker->args[a]);
            SN_ASSERT(v);
            bufs[a] = ptr_of(x, v);
            if (!v->persistent && v->offset + v->bytes > x->st.arena_peak_bytes)
                x->st.arena_peak_bytes = v->offset + v->bytes;
        }
        double t0 = sn_clock_s();
        sn_status s = ker->kind == SN_KER_GEMM ? x->d->gemm(x->d, ker, bufs, e)
                                               : x->d->launch(x->d, ker, x->handles[k], bufs, e);
        if (s) return s;
        x->kernel_s[k] = sn_clock_s() - t0;
        x->st.kind_s[ker->kind] += x->kernel_s[k];
    }
    sn_status s = x->d->sync(x->d, e);
    x->st.run_s = sn_clock_s() - t_run;
    return s;
}

void sn_exec_stats_get(const sn_exec *x, sn_exec_stats *s) { *s = x->st; }
