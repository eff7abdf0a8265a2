/* interp_device.c: the reference interpreter behind the device interface (device.h), so that
 * the trainer and the sampler run on it as on any device. Its memory is host memory (host.h);
 * the program's kernels are never launched: a run hands the whole graph to the interpreter
 * (run_graph), and the optimizer kernels run as their references (sn_interp_optim).
 * Convention: the persistent block is the truth between runs: a run reads every INPUT and
 * PARAM from it and writes back every persistent value the interpreter computed. */
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"
#include "support/half.h"
#include "device.h"
#include "host.h"

static sn_status interp_compile(sn_device *d, sn_kernel *const *ks, int n, void **handles,
                                sn_err *e) {
    (void)d;
    (void)ks;
    (void)e;
    memset(handles, 0, sizeof *handles * (size_t)n); /* nothing to compile */
    return SN_OK;
}

static sn_status interp_launch(sn_device *d, const sn_kernel *k, void *handle, void *const *bufs,
                               sn_err *e) {
    if (k->kind == SN_KER_GRAD_ACC || k->kind == SN_KER_SQNORM || k->kind == SN_KER_CLIP ||
        k->kind == SN_KER_ADAMW) {
        sn_interp_optim(k, bufs, 0, k->n_items);
        return SN_OK;
    }
    return sn_fail(e, SN_ERR_UNSUPPORTED, "the reference interpreter launches only optimizer "
                   "kernels: it runs a program's graph whole (sn_exec_run)");
}

static sn_status interp_gemm(sn_device *d, const sn_kernel *k, void *const *bufs, sn_err *e) {
    return interp_launch(d, k, NULL, bufs, e);
}

/* Values of node n (numel of them) between the interpreter's doubles and the block's layout. */
static sn_status value_in(sn_interp *it, const sn_node *n, const void *src, sn_err *e) {
    if (n->dtype == SN_I32) return sn_interp_set_i32(it, n, src, e);
    if (n->dtype == SN_F32) return sn_interp_set(it, n, src, e);
    if (n->dtype == SN_U8) { /* an NF4 parameter's packed bytes (ir/nf4.h) */
        int64_t m = sn_numel(n);
        double *v = sn_malloc(sizeof(double) * (size_t)m, "an NF4 parameter's bytes", e);
        if (!v) return SN_ERR_OOM;
        for (int64_t i = 0; i < m; i++) v[i] = ((const uint8_t *)src)[i];
        sn_status s = sn_interp_set_f64(it, n, v, e);
        free(v);
        return s;
    }
    if (n->dtype == SN_BF16 || n->dtype == SN_F16) { /* a 16-bit parameter (the base16 pass) */
        int64_t m = sn_numel(n);
        double *v = sn_malloc(sizeof(double) * (size_t)m + 1, "a 16-bit parameter's values", e);
        if (!v) return SN_ERR_OOM;
        const uint16_t *h = src;
        for (int64_t i = 0; i < m; i++)
            v[i] = n->dtype == SN_BF16 ? sn_bf16_to_f32(h[i]) : sn_f16_to_f32(h[i]);
        sn_status s = sn_interp_set_f64(it, n, v, e);
        free(v);
        return s;
    }
    return sn_fail(e, SN_ERR_UNSUPPORTED, "the reference interpreter device takes f32, i32, u8, "
                   "bf16 and f16 inputs and parameters, not %s (%%%d)", sn_dtype_name(n->dtype),
                   n->id);
}

static void value_out(const sn_node *n, const double *v, void *dst) {
    int64_t m = sn_numel(n);
    if (n->dtype == SN_I32)
        for (int64_t i = 0; i < m; i++) ((int32_t *)dst)[i] = (int32_t)v[i];
    else if (n->dtype == SN_F32)
        for (int64_t i = 0; i < m; i++) ((float *)dst)[i] = (float)v[i];
    /* 16-bit values stay unwritten: nothing reads them back (the trainer and the sampler read
       f32 losses, gradients and logits) */
}

/* The interpreter for p, its INPUT and PARAM nodes that p never reads set to zeros (the
 * interpreter wants every leaf set; they reach nothing the program keeps). */
static sn_interp *interp_for(const sn_program *p, sn_err *e) {
    sn_interp *it = sn_interp_new(p->g, false);
    if (!it) {
        sn_fail_oom(e, sizeof(double) * (size_t)p->g->n_nodes, "the reference interpreter");
        return NULL;
    }
    sn_status s = SN_OK;
    for (int i = 0; i < p->g->n_nodes && !s; i++) {
        const sn_node *n = p->g->nodes[i];
        if ((n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) || p->value_of[i] >= 0) continue;
        double *zeros = sn_calloc((size_t)sn_numel(n) + 1, sizeof *zeros, "an unread input", e);
        s = zeros ? sn_interp_set_f64(it, n, zeros, e) : SN_ERR_OOM;
        free(zeros);
    }
    if (s) {
        sn_interp_free(it);
        return NULL;
    }
    return it;
}

static sn_status interp_run_graph(sn_device *d, const sn_program *p, char *const *at,
                                  void **state, sn_err *e) {
    (void)d;
    sn_interp *it = *state;
    if (!it && !(it = *state = interp_for(p, e))) return e->code;
    sn_status s = SN_OK;
    for (int i = 0; i < p->n_values && !s; i++) {
        const sn_value *v = &p->values[i];
        if (v->persistent && v->node && (v->node->op == SN_OP_INPUT || v->node->op == SN_OP_PARAM))
            s = value_in(it, v->node, at[i], e);
    }
    if (s || (s = sn_interp_run(it, e))) return s;
    for (int i = 0; i < p->n_values; i++) {
        const sn_value *v = &p->values[i];
        if (!v->persistent || !v->node || v->alias >= 0 || sn_op_kind(v->node->op) == SN_K_LEAF)
            continue;
        const double *x = sn_interp_value(it, v->node);
        if (x) value_out(v->node, x, at[i]); /* NULL: not kept, so never read */
    }
    return SN_OK;
}

static void interp_run_free(sn_device *d, void *state) {
    (void)d;
    sn_interp_free(state);
}

static void interp_destroy(sn_device *d) { free(d); }

sn_status sn_interp_device_new(sn_device **out, sn_err *e) {
    *out = NULL;
    sn_device *d = sn_calloc(1, sizeof *d, "the reference interpreter device", e);
    if (!d) return SN_ERR_OOM;
    *d = (sn_device){.name = "reference interpreter", .target = sn_target_cpu(),
                     .compile = interp_compile, .launch = interp_launch, .gemm = interp_gemm,
                     .run_graph = interp_run_graph, .run_free = interp_run_free,
                     .destroy = interp_destroy};
    sn_host_device_hooks(d);
    *out = d;
    return SN_OK;
}
