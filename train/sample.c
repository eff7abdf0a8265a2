/* sample.c: generation (sample.h): one full forward per new token over a window of the last T
 * ids, padded with zeros after the last (causal attention keeps the padding from reaching the
 * position read), run compiled on a device (the reference interpreter is one). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/nf4.h"
#include "passes/pipeline.h"
#include "runtime/device.h"
#include "support/half.h"

struct sn_sampler {
    const sn_graph *g;
    const sn_node *idx, *logits;
    int T, V;
    sn_device *own;    /* the reference interpreter, made here when no device was given */
    sn_program *prog;  /* the compiled forward and its executor */
    sn_exec *x;
    int32_t *window;   /* (T,) */
    double *row64;     /* (V,) the logits at the position read */
    float *row32;      /* (V,) the same, as they come down */
};

void sn_sampler_free(sn_sampler *s) {
    if (!s) return;
    sn_exec_free(s->x);
    sn_program_free(s->prog);
    sn_device_free(s->own);
    free(s->window);
    free(s->row64);
    free(s->row32);
    free(s);
}

/* Sets an INPUT or PARAM of the graph. */
static sn_status set(sn_sampler *s, const sn_node *n, const void *data, sn_err *e) {
    return sn_exec_set(s->x, n, data, e);
}

sn_sampler *sn_sampler_new(sn_graph *g, const sn_node *idx, const sn_node *logits,
                           sn_device *device, sn_err *e) {
    if (!idx || idx->op != SN_OP_INPUT || idx->dtype != SN_I32 || idx->rank != 2 || idx->shape[0] != 1 ||
        !logits || logits->rank != 3 || logits->shape[0] != 1 || logits->shape[1] != idx->shape[1]) {
        sn_fail(e, SN_ERR_INVALID, "sampler: the graph needs an i32 input idx (1, T) and logits "
                "(1, T, V): build the model with batch 1");
        return NULL;
    }
    if (sn_verify(g, e)) return NULL;
    sn_sampler *s = sn_calloc(1, sizeof *s, "the sampler", e);
    if (!s) return NULL;
    *s = (sn_sampler){.g = g, .idx = idx, .logits = logits, .T = (int)idx->shape[1],
                      .V = (int)logits->shape[2]};
    s->window = sn_calloc((size_t)s->T, sizeof(int32_t), "the sampler's window", e);
    s->row64 = sn_malloc(sizeof(double) * (size_t)s->V, "the sampler's logits", e);
    s->row32 = sn_malloc(sizeof(float) * (size_t)s->V, "the sampler's logits", e);
    bool ok = s->window && s->row64 && s->row32;
    if (ok && !device && (ok = !sn_interp_device_new(&s->own, e))) device = s->own;
    /* the caller ran the forward rewrites: only the kernel passes, for the device */
    if (!ok || sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &device->target}, &s->prog, NULL, e) ||
        sn_exec_new(device, s->prog, &s->x, e)) {
        sn_sampler_free(s);
        return NULL;
    }
    for (int i = 0; i < g->n_nodes; i++) { /* targets of a loss: zeros, never read */
        const sn_node *n = g->nodes[i];
        if (n != idx && n->op == SN_OP_INPUT && n->dtype == SN_I32 && sn_numel(n) == s->T &&
            set(s, n, s->window, e)) {
            sn_sampler_free(s);
            return NULL;
        }
    }
    return s;
}

static sn_status trainer_get(void *src, const sn_node *p, float *data, sn_err *e) {
    const sn_trainer *t = src;
    int k = sn_trainer_find_param(t, p->name);
    if (k < 0)
        return sn_fail(e, SN_ERR_INVALID, "parameter %s of the model to run is not in the "
                       "trainer: build both graphs from the same model", p->name);
    if (p->dtype == SN_U8) { /* NF4 storage: the trainer's packed bytes, if it has them */
        const sn_node *w = sn_trainer_param_nf4(t, k) ? sn_trainer_param_value(t, k) : NULL;
        if (!w || sn_nf4_layout_of(sn_numel(w)).bytes != sn_numel(p))
            return sn_fail(e, SN_ERR_INVALID, "parameter %s is NF4 storage in the model to run but "
                           "not of that size in the trainer: build both graphs from the same model "
                           "with the same nf4 pass", p->name);
        return sn_trainer_get_nf4(t, k, (uint8_t *)data, e);
    }
    const sn_node *tp = sn_trainer_param_value(t, k); /* NF4: its weights, dequantized */
    if (tp->rank != p->rank || memcmp(tp->shape, p->shape, sizeof(int64_t) * (size_t)p->rank)) {
        char a[96], b[96];
        return sn_fail(e, SN_ERR_INVALID, "parameter %s is %s in the model to run but %s in "
                       "the trainer: build both graphs from the same model", p->name,
                       sn_type_str(p, a, sizeof a), sn_type_str(tp, b, sizeof b));
    }
    return sn_trainer_get_param(t, k, SN_PARAM_WEIGHTS, data, e);
}

sn_weight_source sn_trainer_weights(const sn_trainer *t) { return (sn_weight_source){trainer_get, (void *)t}; }

sn_status sn_sampler_load_weights(sn_sampler *s, sn_weight_source w, sn_err *e) {
    for (int i = 0; i < s->g->n_nodes; i++) {
        const sn_node *p = s->g->nodes[i];
        if (p->op != SN_OP_PARAM) continue;
        float *data = malloc(sizeof(float) * (size_t)sn_numel(p) + 4);
        if (!data) return sn_fail(e, SN_ERR_OOM, "sampler: out of host memory for parameter %s", p->name);
        sn_status st = w.get(w.src, p, data, e);
        uint16_t *h = NULL; /* a 16-bit parameter (the base16 pass): the floats rounded */
        if (!st && (p->dtype == SN_BF16 || p->dtype == SN_F16)) {
            if (!(h = malloc(2 * (size_t)sn_numel(p) + 2))) st = sn_fail(e, SN_ERR_OOM, "sampler: "
                "out of host memory for parameter %s", p->name);
            else sn_half_from_f32(p->dtype == SN_BF16, data, h, sn_numel(p));
        }
        if (!st) st = set(s, p, h ? (const void *)h : data, e);
        free(h);
        free(data);
        if (st) return st;
    }
    return SN_OK;
}

sn_status sn_sampler_load(sn_sampler *s, const sn_trainer *t, sn_err *e) {
    return sn_sampler_load_weights(s, sn_trainer_weights(t), e);
}

typedef struct {
    double v;
    int32_t id;
} scored;

static int by_score(const void *pa, const void *pb) {
    const scored *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? 1 : -1; /* descending */
    return (a->id > b->id) - (a->id < b->id);
}

int32_t sn_sample_logits(const double *logits, int V, float temperature, int top_k, float top_p,
                         sn_rng *rng) {
    if (temperature <= 0 || top_k == 1) { /* greedy: the first of the largest */
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    scored *c = malloc(sizeof *c * (size_t)V);
    if (!c) return -1;
    for (int i = 0; i < V; i++) c[i] = (scored){logits[i], i};
    qsort(c, (size_t)V, sizeof *c, by_score);
    int k = top_k > 0 && top_k < V ? top_k : V;
    double sum = 0, top = c[0].v;
    for (int i = 0; i < k; i++) sum += c[i].v = exp((c[i].v - top) / temperature);
    if (top_p > 0 && top_p < 1) { /* the nucleus: the fewest first ids holding top_p of the mass */
        double mass = 0;
        for (int i = 0; i < k; i++)
            if ((mass += c[i].v) >= top_p * sum) {
                k = i + 1;
                break;
            }
        sum = mass;
    }
    double u = sn_rng_uniform(rng) * sum;
    int32_t pick = c[k - 1].id;
    for (int i = 0; i < k; i++) {
        if (u < c[i].v) {
            pick = c[i].id;
            break;
        }
        u -= c[i].v;
    }
    free(c);
    return pick;
}

sn_status sn_sampler_generate(sn_sampler *s, const int32_t *prompt, int n_prompt,
                              const sn_sample_opts *o, int32_t *out, sn_err *e) {
    if (n_prompt < 1)
        return sn_fail(e, SN_ERR_INVALID, "sampler: the prompt is empty: give at least one token");
    sn_rng rng = sn_rng_seed(o->seed);
    int V = o->vocab > 0 && o->vocab < s->V ? o->vocab : s->V;
    for (int k = 0; k < o->n_new; k++) {
        int len = n_prompt + k, start = len > s->T ? len - s->T : 0, n = len - start;
        for (int i = 0; i < s->T; i++) {
            int p = start + i;
            s->window[i] = i >= n ? 0 : p < n_prompt ? prompt[p] : out[p - n_prompt];
        }
        sn_status st = set(s, s->idx, s->window, e);
        if (st || (st = sn_exec_run(s->x, e))) return st;
        size_t at = (size_t)(n - 1) * (size_t)s->V;
        /* the one row read comes down from the device's logits */
        st = sn_exec_download(s->x, s->row32, sn_exec_node_ref(s->logits, 4 * (int64_t)at),
                              4 * (int64_t)s->V, e);
        if (st) return st;
        for (int i = 0; i < s->V; i++) s->row64[i] = s->row32[i];
        out[k] = sn_sample_logits(s->row64, V, o->temperature, o->top_k, o->top_p, &rng);
        if (out[k] < 0) return sn_fail_oom(e, sizeof(double) * 2 * (size_t)V, "the sampler's sorted logits");
    }
    return SN_OK;
}
