/* train.c: the trainer of train.h.
 * Convention: a step either applies its whole update or, on a bad number, none of it. How the
 * graph runs (interpreter or compiled program) is the backend's business (backend.h). */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/sinter.h"
#include "backend.h"
#include "support/rng.h"

struct sn_trainer {
    sn_graph *g;
    sn_train_opts o;
    sn_backend *be;
    sn_node *idx, *targets;
    int n_params;
    sn_node **params;
    float **w;           /* master weights, owned by the backend */
    float **m, **v;      /* AdamW moments, one array per parameter */
    float **gsum;        /* gradients summed over the pending micro-batches */
    int pending;         /* micro-batches accumulated */
    bool in_backend;     /* the one pending micro-batch's gradients are still only the
                            backend's (no copy is made for steps of one micro-batch) */
    double loss_sum;     /* their losses */
    int step;
};

void sn_train_opts_default(sn_train_opts *o, int steps) {
    *o = (sn_train_opts){.steps = steps, .lr = 1e-3f, .min_lr_frac = 0.1f, .warmup = steps / 10,
                         .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .grad_clip = 1.0f, .seed = 1337};
}

float sn_train_lr(const sn_train_opts *o, int step) {
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    int decay = o->steps - o->warmup;
    if (decay <= 0) return o->lr;
    double t = (double)(step - o->warmup) / decay;
    if (t > 1) t = 1;
    double min_lr = o->lr * o->min_lr_frac;
    return (float)(min_lr + 0.5 * (o->lr - min_lr) * (1 + cos(M_PI * t)));
}

void sn_param_init(const sn_node *p, float *dst, uint64_t seed) {
    int64_t n = sn_numel(p);
    switch (p->a.init) {
    case SN_INIT_ZEROS: memset(dst, 0, sizeof(float) * (size_t)n); return;
    case SN_INIT_ONES:
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    case SN_INIT_NORMAL: {
        sn_rng r = sn_rng_seed(sn_hash_str(p->name ? p->name : "", seed));
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(p->a.f * sn_rng_normal(&r));
        return;
    }
    case SN_INIT_COUNT: break;
    }
    SN_ASSERT(0);
}

static sn_node *find_input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    return NULL;
}

/* ---- the trainer ---------------------------------------------------------------------------- */

void sn_trainer_free(sn_trainer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_params; i++) {
        free(t->m[i]);
        free(t->v[i]);
        free(t->gsum[i]);
    }
    free(t->w);
    free(t->m);
    free(t->v);
    free(t->gsum);
    free(t->params);
    sn_backend_free(t->be);
    free(t);
}

sn_trainer *sn_trainer_new(sn_graph *g, const sn_train_opts *o, sn_err *e) {
    if (!g->loss || !g->has_backward) {
        sn_fail(e, SN_ERR_INVALID, "trainer: the graph needs a loss and its backward (call sn_backward)");
        return NULL;
    }
    sn_node *idx = find_input(g, "idx"), *targets = find_input(g, "targets");
    if (!idx || !targets || idx->dtype != SN_I32 || targets->dtype != SN_I32 ||
        sn_numel(idx) != sn_numel(targets)) {
        sn_fail(e, SN_ERR_INVALID, "trainer: the graph needs i32 inputs \"idx\" and \"targets\" "
                "of the same shape");
        return NULL;
    }
    if (sn_verify(g, e) != SN_OK) return NULL;
    sn_trainer *t = sn_calloc(1, sizeof *t, "the trainer", e);
    if (!t) return NULL;
    t->g = g;
    t->o = *o;
    t->idx = idx;
    t->targets = targets;
    t->n_params = sn_graph_params(g, NULL, 0);
    size_t np = (size_t)t->n_params;
    const char *what = "the trainer's parameter lists";
    t->params = sn_calloc(np, sizeof *t->params, what, e);
    t->w = sn_calloc(np, sizeof *t->w, what, e);
    t->m = sn_calloc(np, sizeof *t->m, what, e);
    t->v = sn_calloc(np, sizeof *t->v, what, e);
    t->gsum = sn_calloc(np, sizeof *t->gsum, what, e);
    if (!t->params || !t->w || !t->m || !t->v || !t->gsum) t->n_params = 0; /* for sn_trainer_free */
    else sn_graph_params(g, t->params, t->n_params);
    if (!t->n_params && np) {
        sn_trainer_free(t);
        return NULL;
    }
    if (sn_backend_new(g, t->params, t->n_params, o->device, o->compile, &t->be, e)) {
        sn_trainer_free(t);
        return NULL;
    }
    for (int i = 0; i < t->n_params; i++) {
        size_t n = (size_t)sn_numel(t->params[i]);
        t->w[i] = sn_backend_weights(t->be, i);
        t->m[i] = calloc(n, sizeof(float));
        t->v[i] = calloc(n, sizeof(float));
        t->gsum[i] = calloc(n, sizeof(float));
        if (!t->m[i] || !t->v[i] || !t->gsum[i]) {
            sn_trainer_free(t);
            sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for parameters and moments");
            return NULL;
        }
        sn_param_init(t->params[i], t->w[i], o->seed);
    }
    return t;
}

/* The gradient sums of parameter i. */
static float *grad_sums(sn_trainer *t, int i) {
    return t->in_backend ? (float *)sn_backend_grad(t->be, i) : t->gsum[i];
}

/* Before the backend runs again: the pending gradients move to the trainer's sums. */
static void keep_pending(sn_trainer *t) {
    if (!t->in_backend) return;
    for (int i = 0; i < t->n_params; i++)
        memcpy(t->gsum[i], sn_backend_grad(t->be, i), sizeof(float) * (size_t)sn_numel(t->params[i]));
    t->in_backend = false;
}

sn_status sn_trainer_eval(sn_trainer *t, const int32_t *idx, const int32_t *targets, double *loss,
                          sn_err *e) {
    keep_pending(t);
    return sn_backend_run(t->be, t->idx, t->targets, idx, targets, loss, e);
}

/* Forgets the pending micro-batches (the next one starts the sums afresh). */
static void drop_pending(sn_trainer *t) {
    t->pending = 0;
    t->in_backend = false;
    t->loss_sum = 0;
}

sn_status sn_trainer_accumulate(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                                double *loss, sn_err *e) {
    double l;
    keep_pending(t);
    sn_status s = sn_backend_run(t->be, t->idx, t->targets, idx, targets, &l, e);
    if (s) return s;
    if (!isfinite(l)) {
        int k = t->pending;
        drop_pending(t);
        return sn_fail(e, SN_ERR_NUMERIC, "step %d: loss %g on micro-batch %d: the run diverged; "
                       "the parameters are unchanged (lower the learning rate or raise warm-up)",
                       t->step + 1, l, k + 1);
    }
    if (t->pending == 0) {
        t->in_backend = true;
    } else {
        for (int i = 0; i < t->n_params; i++) {
            const float *g = sn_backend_grad(t->be, i);
            float *sum = t->gsum[i];
            int64_t n = sn_numel(t->params[i]);
#pragma omp simd
            for (int64_t j = 0; j < n; j++) sum[j] += g[j];
        }
    }
    t->pending++;
    t->loss_sum += l;
    if (loss) *loss = l;
    return SN_OK;
}

sn_status sn_trainer_update(sn_trainer *t, sn_step_stats *st, sn_err *e) {
    if (!t->pending)
        return sn_fail(e, SN_ERR_INVALID, "trainer: update without gradients: call "
                       "sn_trainer_accumulate on at least one micro-batch first");
    float inv = 1.0f / (float)t->pending;
    double loss = t->loss_sum / t->pending, sq = 0;
    for (int i = 0; i < t->n_params; i++) {
        float *gm = grad_sums(t, i);
        int64_t n = sn_numel(t->params[i]);
        if (t->pending > 1) /* the mean; exact for one micro-batch */
            for (int64_t j = 0; j < n; j++) gm[j] *= inv;
        for (int64_t j0 = 0; j0 < n; j0 += 4096) { /* f32 partial sums, vectorised; blocks in f64 */
            float part = 0;
            int64_t j1 = j0 + 4096 < n ? j0 + 4096 : n;
#pragma omp simd reduction(+ : part)
            for (int64_t j = j0; j < j1; j++) part += gm[j] * gm[j];
            sq += part;
        }
    }
    double norm = sqrt(sq);
    if (!isfinite(norm)) {
        drop_pending(t);
        return sn_fail(e, SN_ERR_NUMERIC, "step %d: loss %g, gradient norm %g: the run diverged; "
                       "the parameters are unchanged (lower the learning rate or raise warm-up)",
                       t->step + 1, loss, norm);
    }
    const sn_train_opts *o = &t->o;
    float lr = sn_train_lr(o, t->step);
    double clip = o->grad_clip > 0 && norm > o->grad_clip ? o->grad_clip / norm : 1.0;
    t->step++;
    float hyper[SN_ADAMW_HYPER] = {lr, o->beta1, o->beta2, o->eps, 0,
                                   (float)(1 - pow(o->beta1, t->step)),
                                   (float)(1 - pow(o->beta2, t->step)), (float)clip};
    for (int i = 0; i < t->n_params; i++) {
        hyper[4] = t->params[i]->rank >= 2 ? o->weight_decay : 0.0f;
        sn_status s = sn_backend_adamw(t->be, i, t->m[i], t->v[i], grad_sums(t, i), hyper, e);
        if (s) return s;
    }
    drop_pending(t);
    if (st) *st = (sn_step_stats){.loss = loss, .grad_norm = norm, .lr = lr};
    return SN_OK;
}

sn_status sn_trainer_step(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                          sn_step_stats *st, sn_err *e) {
    sn_status s = sn_trainer_accumulate(t, idx, targets, NULL, e);
    return s ? s : sn_trainer_update(t, st, e);
}

int sn_trainer_pending(const sn_trainer *t) { return t->pending; }
int sn_trainer_step_count(const sn_trainer *t) { return t->step; }
void sn_trainer_set_step_count(sn_trainer *t, int step) { t->step = step; }
const sn_train_opts *sn_trainer_opts(const sn_trainer *t) { return &t->o; }
int sn_trainer_param_count(const sn_trainer *t) { return t->n_params; }
const char *sn_trainer_backend(const sn_trainer *t) { return sn_backend_name(t->be); }
const sn_program *sn_trainer_program(const sn_trainer *t) { return sn_backend_program(t->be); }
sn_exec *sn_trainer_exec(const sn_trainer *t) { return sn_backend_exec(t->be); }

sn_param_state sn_trainer_param(const sn_trainer *t, int i) {
    SN_ASSERT(i >= 0 && i < t->n_params);
    return (sn_param_state){t->params[i], t->w[i], t->m[i], t->v[i], grad_sums((sn_trainer *)t, i)};
}

int sn_trainer_find_param(const sn_trainer *t, const char *name) {
    for (int i = 0; i < t->n_params; i++)
        if (!strcmp(t->params[i]->name, name)) return i;
    return -1;
}
