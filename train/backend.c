/* backend.c: the two ways the trainer runs its graph (backend.h). Every difference between
 * interpreting and running compiled code is in this file. */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pipeline.h"
#include "interp/interp.h"

struct sn_backend {
    sn_graph *g;
    sn_node *const *params;
    int n_params;
    /* the reference interpreter */
    sn_interp *it;
    float **w;  /* host master weights, by parameter */
    float **gf; /* the last run's gradients as f32, made on demand */
    /* compiled */
    sn_device *d;
    sn_program *prog;
    sn_exec *x;
    sn_kernel adamw;
    void *adamw_handle;
    char name[160];
};

void sn_backend_free(sn_backend *b) {
    if (!b) return;
    for (int i = 0; i < b->n_params; i++) {
        if (b->w) free(b->w[i]);
        if (b->gf) free(b->gf[i]);
    }
    free(b->w);
    free(b->gf);
    sn_interp_free(b->it);
    sn_exec_free(b->x);
    sn_program_free(b->prog);
    free(b);
}

static sn_status compiled_new(sn_backend *b, const sn_pipeline_opts *compile, sn_err *e) {
    sn_status s;
    sn_pipeline_opts none = {0};
    if ((s = sn_compile(b->g, compile ? compile : &none, &b->prog, NULL, e)) ||
        (s = sn_exec_new(b->d, b->prog, &b->x, e)))
        return s;
    b->adamw = (sn_kernel){.kind = SN_KER_ADAMW, .name = "adamw"};
    sn_kernel *k = &b->adamw;
    if ((s = b->d->compile(b->d, &k, 1, &b->adamw_handle, e))) return s;
    for (int i = 0; i < b->n_params; i++)
        if (!sn_exec_ptr(b->x, b->params[i]) || !sn_exec_ptr(b->x, b->params[i]->grad))
            return sn_fail(e, SN_ERR_INVALID, "backend: parameter %s or its gradient is not kept "
                           "by the compiled program", b->params[i]->name);
    snprintf(b->name, sizeof b->name, "%s, %d kernels", b->d->name, b->prog->n_kernels);
    return SN_OK;
}

sn_status sn_backend_new(sn_graph *g, sn_node *const *params, int n_params, sn_device *device,
                         const sn_pipeline_opts *compile, sn_backend **out, sn_err *e) {
    *out = NULL;
    sn_backend *b = sn_calloc(1, sizeof *b, "the trainer's backend", e);
    if (!b) return SN_ERR_OOM;
    *b = (sn_backend){.g = g, .params = params, .n_params = n_params, .d = device};
    sn_status s = SN_OK;
    if (device) {
        s = compiled_new(b, compile, e);
    } else {
        const char *what = "the interpreter's parameters and gradients";
        if (!(b->it = sn_interp_new(g, false)))
            s = sn_fail_oom(e, sizeof(double) * (size_t)g->n_nodes, "the reference interpreter");
        else if (!(b->w = sn_calloc((size_t)n_params, sizeof *b->w, what, e)) ||
                 !(b->gf = sn_calloc((size_t)n_params, sizeof *b->gf, what, e)))
            s = SN_ERR_OOM;
        for (int i = 0; i < n_params && !s; i++) /* gf: made here, so a step allocates nothing */
            if (!(b->w[i] = sn_malloc(sizeof(float) * (size_t)sn_numel(params[i]), what, e)) ||
                !(b->gf[i] = sn_malloc(sizeof(float) * (size_t)sn_numel(params[i]), what, e)))
                s = SN_ERR_OOM;
        snprintf(b->name, sizeof b->name, "reference interpreter");
    }
    if (s) {
        sn_backend_free(b);
        return s;
    }
    *out = b;
    return SN_OK;
}

const char *sn_backend_name(const sn_backend *b) { return b->name; }
const sn_program *sn_backend_program(const sn_backend *b) { return b->prog; }
sn_exec *sn_backend_exec(const sn_backend *b) { return b->x; }

float *sn_backend_weights(sn_backend *b, int i) {
    return b->x ? sn_exec_ptr(b->x, b->params[i]) : b->w[i];
}

sn_status sn_backend_run(sn_backend *b, const sn_node *idx, const sn_node *targets,
                         const int32_t *x, const int32_t *y, double *loss, sn_err *e) {
    sn_status s;
    if (b->x) {
        float l;
        if ((s = sn_exec_set(b->x, idx, x, e)) || (s = sn_exec_set(b->x, targets, y, e)) ||
            (s = sn_exec_run(b->x, e)) || (s = sn_exec_get(b->x, b->g->loss, &l, e)))
            return s;
        *loss = l;
        return SN_OK;
    }
    if ((s = sn_interp_set_i32(b->it, idx, x, e)) || (s = sn_interp_set_i32(b->it, targets, y, e)))
        return s;
    for (int i = 0; i < b->n_params; i++)
        if ((s = sn_interp_set(b->it, b->params[i], b->w[i], e))) return s;
    if ((s = sn_interp_run(b->it, e))) return s;
    *loss = sn_interp_value(b->it, b->g->loss)[0];
    return SN_OK;
}

const float *sn_backend_grad(sn_backend *b, int i) {
    if (b->x) return sn_exec_ptr(b->x, b->params[i]->grad);
    int64_t n = sn_numel(b->params[i]);
    const double *g = sn_interp_value(b->it, b->params[i]->grad);
    for (int64_t j = 0; j < n; j++) b->gf[i][j] = (float)g[j];
    return b->gf[i];
}

sn_status sn_backend_adamw(sn_backend *b, int i, float *m, float *v, const float *g,
                           const float *hyper, sn_err *e) {
    float *w = sn_backend_weights(b, i);
    int64_t n = sn_numel(b->params[i]);
    if (b->x) {
        void *bufs[SN_ADAMW_BUFS] = {w, m, v, (void *)g, (void *)hyper};
        b->adamw.n_items = n;
        return b->d->launch(b->d, &b->adamw, b->adamw_handle, bufs, e);
    }
    /* the reference: the formula of kernel.h, in double where it divides */
    float lr = hyper[0], b1 = hyper[1], b2 = hyper[2], eps = hyper[3], wd = hyper[4];
    double bc1 = hyper[5], bc2 = hyper[6];
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j] * hyper[7];
        m[j] = b1 * m[j] + (1 - b1) * gj;
        v[j] = b2 * v[j] + (1 - b2) * gj * gj;
        double mhat = m[j] / bc1, vhat = v[j] / bc2;
        w[j] -= (float)(lr * (mhat / (sqrt(vhat) + eps) + wd * w[j]));
    }
    return SN_OK;
}
