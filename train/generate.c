/* generate.c: generation with a KV cache (generate.h): the decode program and its cache live as
 * long as the generator; the prefill program of the last padded prompt length is compiled on
 * demand and kept, allocated, for the next call. Positions are per row: row b's token i sits at
 * lens[b] + i. */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pipeline.h"
#include "runtime/device.h"
#include "support/clock.h"
#include "support/half.h"

enum { PREFILL_KEPT = 3 }; /* the prompt's size, the window's when it slides, one more */

/* A prefill program (B, T): its graph, compiled, its program and executor (reading the decode
 * program's parameters: sn_exec_new_sharing). */
typedef struct {
    sn_graph *g;
    sn_program *p;
    sn_exec *x;
    int T; /* 0: none */
} prefill_prog;

struct sn_generator {
    sn_generator_opts o;
    sn_device *dev, *own;      /* own: the reference interpreter, made here when none was given */
    sn_graph *dg;              /* the decode graph (B, 1), compiled */
    sn_program *dp;
    sn_exec *dx;
    const sn_node *idx, *pos, *mask, *logits; /* of the decode graph */
    const sn_node **kc, **vc;  /* n_layer each: the cache INPUTs (B, Hkv, S, D) */
    const sn_node **k, **v;    /* n_layer each: the new token's outputs (B, Hkv, 1, D) */
    int64_t H, D, V;           /* Hkv, head size, the logits' width */
    prefill_prog pre[PREFILL_KEPT]; /* kept, the last used first */
    bool loaded;
    float *mask_h;             /* (B, S) */
    float *row32;              /* (B, V) */
    double *row64;             /* (V) */
    int32_t *ids, *at;         /* (B): the tokens fed and their positions */
    double prefill_s, decode_s, *step_s;
    int n_steps, n_step_s, n_slides; /* n_step_s: step_s's room */
};

/* ---- weights --------------------------------------------------------------------------------- */

/* Every PARAM of g into x, from w; a 16-bit one (sn_generator_opts.base16) rounded from its
 * floats (exact for a 16-bit trainer's widened values). */
static sn_status load_params(const sn_graph *g, sn_exec *x, sn_weight_source w, sn_err *e) {
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM) continue;
        float *data = sn_malloc(sizeof(float) * (size_t)sn_numel(p) + 4, "a parameter's host copy", e);
        if (!data) return SN_ERR_OOM;
        sn_status s = w.get(w.src, p, data, e);
        uint16_t *h = NULL;
        if (!s && (p->dtype == SN_BF16 || p->dtype == SN_F16)) {
            if ((h = sn_malloc(2 * (size_t)sn_numel(p) + 2, "a 16-bit parameter's host copy", e)))
                sn_half_from_f32(p->dtype == SN_BF16, data, h, sn_numel(p));
            else s = SN_ERR_OOM;
        }
        if (!s) s = sn_exec_set(x, p, h ? (const void *)h : data, e);
        free(h);
        free(data);
        if (s) return s;
    }
    return SN_OK;
}

/* ---- the graphs ------------------------------------------------------------------------------ */

/* The cache input of that name ("k_cache.3"); the tokens, positions and mask are found by role. */
static const sn_node *input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    return NULL;
}

/* Builds and compiles the model's graph for (B, T) into *g and *p, and checks its outputs: L
 * pairs of (B, Hkv, T, D) then the logits (B, T, V), marked as such (sn_graph_set_logits). */
static sn_status compile(sn_generator *gen, int T, bool decode, sn_graph **g, sn_program **p, sn_err *e) {
    const sn_generator_opts *o = &gen->o;
    if (!(*g = sn_graph_new())) return sn_fail_oom(e, sizeof(sn_graph), "the generation graph");
    sn_status s = o->build(*g, o->batch, T, decode, o->user, e);
    if (s) return s;
    sn_graph *G = *g;
    int L = o->n_layer;
    const sn_node *lg = G->n_outputs == 2 * L + 1 && G->outputs[2 * L] == G->logits ? G->logits : NULL;
    bool ok = lg && lg->rank == 3 && lg->shape[0] == o->batch && lg->shape[1] == T;
    for (int i = 0; ok && i < 2 * L; i++) {
        const sn_node *kv = G->outputs[i], *k0 = G->outputs[0];
        ok = kv->rank == 4 && kv->dtype == SN_F32 && kv->shape[0] == o->batch && kv->shape[2] == T &&
             kv->shape[1] == k0->shape[1] && kv->shape[3] == k0->shape[3];
    }
    if (!ok)
        return sn_fail(e, SN_ERR_INVALID, "generate: the model's %s graph has %d outputs, not %d "
                       "layers' keys and values (B, Hkv, T, D) then the logits (B, T, V, marked by "
                       "sn_graph_set_logits): build it "
                       "as train/generate.h describes", decode ? "decode" : "prefill",
                       G->n_outputs, L);
    /* fp32, no rewrite but flash attention in the prefill (the decode's matches nothing) and,
       when asked, the NF4 base */
    sn_pipeline_opts po = {.target = &gen->dev->target, .fuse_attention = !decode, .nf4 = o->nf4,
                           .base16_fp32 = o->base16};
    return sn_compile(G, &po, p, NULL, e);
}

void sn_generator_free(sn_generator *g) {
    if (!g) return;
    for (int i = 0; i < PREFILL_KEPT; i++) { /* before the decode executor they share */
        sn_exec_free(g->pre[i].x);
        sn_program_free(g->pre[i].p);
        sn_graph_free(g->pre[i].g);
    }
    sn_exec_free(g->dx);
    sn_program_free(g->dp);
    sn_graph_free(g->dg);
    sn_device_free(g->own);
    free(g->kc);
    free(g->mask_h);
    free(g->row32);
    free(g->row64);
    free(g->ids);
    free(g->step_s);
    free(g);
}

sn_status sn_generator_new(const sn_generator_opts *o, sn_device *device, sn_generator **out,
                           sn_err *e) {
    *out = NULL;
    if (o->batch < 1 || o->ctx < 1 || o->n_layer < 1 || !o->build || o->window < 0 || o->window > o->ctx)
        return sn_fail(e, SN_ERR_INVALID, "generate: batch %d, context %d, %d layers, window %d: need "
                       "a model builder, each at least 1 and the window at most the context",
                       o->batch, o->ctx, o->n_layer, o->window);
    sn_generator *g = sn_calloc(1, sizeof *g, "the generator", e);
    if (!g) return SN_ERR_OOM;
    g->o = *o;
    if (!g->o.window) g->o.window = o->ctx;
    int L = o->n_layer, B = o->batch, S = o->ctx;
    sn_status s = SN_OK;
    if (!device && !(s = sn_interp_device_new(&g->own, e))) device = g->own;
    g->dev = device;
    if (!s) s = compile(g, 1, true, &g->dg, &g->dp, e);
    if (!s && !(g->kc = sn_calloc(4 * (size_t)L, sizeof *g->kc, "the generator's cache nodes", e)))
        s = SN_ERR_OOM;
    if (!s) {
        g->vc = g->kc + L, g->k = g->kc + 2 * L, g->v = g->kc + 3 * L;
        g->idx = sn_graph_input(g->dg, SN_ROLE_TOKENS), g->pos = sn_graph_input(g->dg, SN_ROLE_POSITIONS);
        g->mask = sn_graph_input(g->dg, SN_ROLE_MASK);
        g->logits = g->dg->logits;
        g->H = g->dg->outputs[0]->shape[1], g->D = g->dg->outputs[0]->shape[3];
        g->V = g->logits->shape[2];
        bool ok = g->idx && g->pos && g->mask && g->mask->dtype == SN_F32 &&
                  sn_numel(g->mask) == (int64_t)B * S;
        for (int l = 0; ok && l < L; l++) {
            char name[32];
            snprintf(name, sizeof name, "k_cache.%d", l);
            g->kc[l] = input(g->dg, name);
            snprintf(name, sizeof name, "v_cache.%d", l);
            g->vc[l] = input(g->dg, name);
            g->k[l] = g->dg->outputs[2 * l], g->v[l] = g->dg->outputs[2 * l + 1];
            ok = g->kc[l] && g->vc[l] && sn_numel(g->kc[l]) == B * g->H * S * g->D &&
                 sn_numel(g->vc[l]) == B * g->H * S * g->D;
        }
        if (!ok)
            s = sn_fail(e, SN_ERR_INVALID, "generate: the model's decode graph lacks the inputs "
                        "idx, pos, mask (B, 1, 1, %d) or a layer's k_cache.N / v_cache.N "
                        "(B, Hkv, %d, D): build it as train/generate.h describes", S, S);
    }
    if (!s) {
        g->mask_h = sn_malloc(sizeof(float) * (size_t)B * (size_t)S, "the attention mask", e);
        g->row32 = sn_malloc(sizeof(float) * (size_t)B * (size_t)g->V, "the generator's logits", e);
        g->row64 = sn_malloc(sizeof(double) * (size_t)g->V, "the generator's logits", e);
        g->ids = sn_malloc(sizeof(int32_t) * 2 * (size_t)B, "the generator's ids", e);
        if (!g->mask_h || !g->row32 || !g->row64 || !g->ids) s = SN_ERR_OOM;
        else g->at = g->ids + B;
    }
    if (!s) s = sn_exec_new(device, g->dp, &g->dx, e);
    if (!s) sn_exec_time_kernels(g->dx, false); /* events around the run only: a step is short */
    if (s) {
        sn_generator_free(g);
        return s;
    }
    *out = g;
    return SN_OK;
}

sn_status sn_generator_load(sn_generator *g, sn_weight_source w, sn_err *e) {
    g->loaded = false;
    sn_status s = load_params(g->dg, g->dx, w, e); /* the prefill programs read these */
    if (s) return s;
    g->loaded = true;
    return SN_OK;
}

/* ---- generating ------------------------------------------------------------------------------ */

/* Row b's draw from its logits row (float, V of them) into out. */
static sn_status draw(sn_generator *g, const float *row, const sn_sample_opts *o, sn_rng *rng,
                      int32_t *out, sn_err *e) {
    int V = o->vocab > 0 && o->vocab < g->V ? o->vocab : (int)g->V;
    for (int i = 0; i < g->V; i++) g->row64[i] = row[i];
    *out = sn_sample_logits(g->row64, V, o->temperature, o->top_k, o->top_p, rng);
    return *out < 0 ? sn_fail_oom(e, sizeof(double) * 2 * (size_t)V, "the sampler's sorted logits") : SN_OK;
}

/* The prefill program of T tokens a row, compiled and allocated unless kept: kept ones move to
 * the front, a new one takes the last place (its predecessor freed). */
static sn_status prefill_program(sn_generator *g, int T, sn_err *e) {
    int k = 0;
    while (k < PREFILL_KEPT - 1 && g->pre[k].T != T) k++;
    if (g->pre[k].T != T) { /* not kept: the last place's, made anew */
        sn_exec_free(g->pre[k].x);
        sn_program_free(g->pre[k].p);
        sn_graph_free(g->pre[k].g);
        g->pre[k].x = NULL, g->pre[k].p = NULL, g->pre[k].g = NULL, g->pre[k].T = 0;
        sn_status s = compile(g, T, false, &g->pre[k].g, &g->pre[k].p, e);
        if (!s) s = sn_exec_new_sharing(g->dev, g->pre[k].p, g->dx, &g->pre[k].x, e);
        if (s) return s;
        sn_exec_time_kernels(g->pre[k].x, false);
        g->pre[k].T = T;
    }
    for (; k > 0; k--) { /* to the front */
        prefill_prog t = g->pre[k];
        g->pre[k] = g->pre[k - 1];
        g->pre[k - 1] = t;
    }
    return SN_OK;
}

/* The prompts through the prefill program (of the longest prompt rounded up to a power of two):
 * each row's logits at its last prompt token into g->row32 (B, V), the prompts' keys and values
 * into the decode program's cache, at[b] = lens[b]: the next position. */
static sn_status prefill(sn_generator *g, const int32_t *const *prompts, const int *lens, sn_err *e) {
    int B = g->o.batch, S = g->o.ctx, L = g->o.n_layer, longest = 0;
    for (int b = 0; b < B; b++) longest = lens[b] > longest ? lens[b] : longest;
    int T = 1;
    while (T < longest) T *= 2;
    T = T < S ? T : S;
    sn_status s = prefill_program(g, T, e);
    if (s) return s;
    const sn_graph *pg = g->pre[0].g;
    int64_t HD = g->H * g->D, per = HD * T; /* one row's k (or v) of one layer */
    int32_t *idx = sn_calloc((size_t)B * (size_t)T, sizeof *idx, "the prefill's tokens", e);
    float *host = sn_malloc(sizeof(float) * (size_t)(B * per), "the prompt's keys and values", e);
    sn_exec *x = g->pre[0].x;
    if (!idx || !host) s = SN_ERR_OOM;
    for (int b = 0; !s && b < B; b++) memcpy(idx + (size_t)b * T, prompts[b], sizeof *idx * (size_t)lens[b]);
    if (!s) s = sn_exec_set(x, sn_graph_input(pg, SN_ROLE_TOKENS), idx, e);
    if (!s) s = sn_exec_run(x, e);
    const sn_node *logits = s ? NULL : pg->logits;
    for (int b = 0; !s && b < B; b++) { /* row b's logits at its last prompt token */
        int64_t at = ((int64_t)b * T + lens[b] - 1) * g->V;
        s = sn_exec_download(x, g->row32 + b * g->V, sn_exec_node_ref(logits, 4 * at), 4 * g->V, e);
    }
    for (int i = 0; !s && i < 2 * L; i++) { /* (B, Hkv, T, D) -> the cache's (B, Hkv, S, D) */
        const sn_node *cache = i % 2 ? g->vc[i / 2] : g->kc[i / 2];
        s = sn_exec_get(x, pg->outputs[i], host, e);
        for (int64_t r = 0; !s && r < B * g->H; r++) {
            int n = lens[r / g->H];
            s = sn_exec_upload(g->dx, sn_exec_node_ref(cache, 4 * r * S * g->D),
                               host + r * T * g->D, 4 * n * g->D, e);
        }
    }
    for (int b = 0; b < B; b++) g->at[b] = lens[b];
    free(idx);
    free(host);
    return s;
}

/* A row has used the window: every row's window slides. Row b's last window/2 tokens (its prompt's and
 * the ones drawn, out[0, i), the one about to be fed the last) run through the prefill again at
 * positions 0, 1, ...; their logits are the next draw's, as a decode step's would be. */
static sn_status slide(sn_generator *g, const int32_t *const *prompts, const int *lens,
                       const int32_t *out, int n_new, int i, sn_err *e) {
    int B = g->o.batch, K = g->o.window / 2 > 0 ? g->o.window / 2 : 1;
    int32_t *win = sn_malloc(sizeof *win * (size_t)B * (size_t)K, "the slid windows", e);
    const int32_t **wp = sn_malloc(sizeof *wp * (size_t)B, "the slid windows", e);
    int *wl = sn_malloc(sizeof *wl * (size_t)B, "the slid windows", e);
    sn_status s = win && wp && wl ? SN_OK : SN_ERR_OOM;
    for (int b = 0; !s && b < B; b++) {
        int total = lens[b] + i, n = total < K ? total : K;
        for (int j = 0; j < n; j++) {
            int t = total - n + j;
            win[(size_t)b * K + j] = t < lens[b] ? prompts[b][t] : out[(size_t)b * (size_t)n_new + t - lens[b]];
        }
        wp[b] = win + (size_t)b * K, wl[b] = n;
    }
    if (!s) s = prefill(g, wp, wl, e);
    free(win);
    free(wp);
    free(wl);
    return s;
}

/* Row b reads cache positions [0, at[b]): 0 there, -inf from there on. */
static void mask_rows(sn_generator *g) {
    int S = g->o.ctx;
    for (int b = 0; b < g->o.batch; b++)
        for (int j = 0; j < S; j++) g->mask_h[(size_t)b * S + j] = j < g->at[b] ? 0.0f : -INFINITY;
}

/* One decode step: ids[b] at positions at[b] in, their logits into g->row32 (B, V); then the
 * step's keys and values into the cache at at[b]. */
static sn_status decode(sn_generator *g, sn_err *e) {
    int B = g->o.batch, S = g->o.ctx, L = g->o.n_layer;
    mask_rows(g);
    sn_status s = sn_exec_set(g->dx, g->idx, g->ids, e);
    if (!s) s = sn_exec_set(g->dx, g->pos, g->at, e);
    if (!s) s = sn_exec_set(g->dx, g->mask, g->mask_h, e);
    if (!s) s = sn_exec_run(g->dx, e);
    if (!s) s = sn_exec_get(g->dx, g->logits, g->row32, e);
    int64_t D = g->D, H = g->H, row = 4 * D; /* a head's key: D floats */
    for (int l = 0; !s && l < L; l++) /* row b's H heads, slot at[b] of each head's cache */
        for (int b = 0; !s && b < B; b++) {
            int64_t to = row * (b * H * S + g->at[b]), from = row * b * H;
            s = sn_exec_copy_rows(g->dx, sn_exec_node_ref(g->kc[l], to), row * S,
                                  sn_exec_node_ref(g->k[l], from), row, row, H, e);
            if (!s) s = sn_exec_copy_rows(g->dx, sn_exec_node_ref(g->vc[l], to), row * S,
                                          sn_exec_node_ref(g->v[l], from), row, row, H, e);
        }
    return s;
}

sn_status sn_generator_generate(sn_generator *g, const int32_t *const *prompts, const int *lens,
                                const sn_sample_opts *o, int32_t *out, sn_generate_cb on_step,
                                void *user, sn_err *e) {
    int B = g->o.batch, S = g->o.window;
    if (!g->loaded)
        return sn_fail(e, SN_ERR_INVALID, "generate: no weights: call sn_generator_load first");
    for (int b = 0; b < B; b++) {
        if (lens[b] < 1)
            return sn_fail(e, SN_ERR_INVALID, "generate: prompt %d is empty: give at least one token", b + 1);
        if (lens[b] > S)
            return sn_fail(e, SN_ERR_INVALID, "generate: prompt %d has %d tokens: the model's context "
                           "is %d tokens%s, so shorten the prompt", b + 1, lens[b], S,
                           S < g->o.ctx ? " (the length it was trained on)" : "");
    }
    g->n_steps = g->n_slides = 0;
    g->prefill_s = g->decode_s = 0;
    if (o->n_new < 1) return SN_OK;
    if (g->n_step_s < o->n_new) {
        double *t = realloc(g->step_s, sizeof *t * (size_t)o->n_new);
        if (!t) return sn_fail_oom(e, sizeof *t * (size_t)o->n_new, "the generator's timings");
        g->step_s = t, g->n_step_s = o->n_new;
    }
    sn_rng *rngs = sn_malloc(sizeof *rngs * (size_t)B, "the generator's random streams", e);
    if (!rngs) return SN_ERR_OOM;
    for (int b = 0; b < B; b++) rngs[b] = sn_rng_seed(o->seed + (uint64_t)b);
    double t0 = sn_clock_s();
    sn_status s = prefill(g, prompts, lens, e);
    g->prefill_s = sn_clock_s() - t0;
    for (int i = 0; !s && i < o->n_new; i++) {
        if (i > 0) { /* out[i - 1] fed at positions at[b], or the windows slid past a full row */
            double t = sn_clock_s();
            bool full = false;
            for (int b = 0; b < B; b++) {
                g->ids[b] = out[(size_t)b * (size_t)o->n_new + i - 1];
                full = full || g->at[b] >= S;
            }
            if (full) {
                s = slide(g, prompts, lens, out, o->n_new, i, e);
                g->n_slides++;
            } else if (!(s = decode(g, e))) {
                for (int b = 0; b < B; b++) g->at[b]++;
            }
            g->step_s[g->n_steps++] = sn_clock_s() - t;
            g->decode_s += g->step_s[g->n_steps - 1];
        }
        for (int b = 0; !s && b < B; b++)
            s = draw(g, g->row32 + (size_t)b * (size_t)g->V, o, &rngs[b], &out[(size_t)b * (size_t)o->n_new + i], e);
        if (!s && on_step) {
            for (int b = 0; b < B; b++) g->ids[b] = out[(size_t)b * (size_t)o->n_new + i];
            if (!on_step(user, i, g->ids)) break;
        }
    }
    free(rngs);
    return s;
}

sn_status sn_generator_forced(sn_generator *g, const int32_t *tokens, int n, int n_prompt,
                              float *logits, sn_err *e) {
    if (g->o.batch != 1 || !g->loaded || n_prompt < 1 || n_prompt > n || n > g->o.ctx)
        return sn_fail(e, SN_ERR_INVALID, "generate: forced decoding takes batch 1, loaded weights "
                       "and 1 <= prompt <= %d tokens <= the context %d", n, g->o.ctx);
    sn_status s = prefill(g, &tokens, &n_prompt, e);
    if (!s) memcpy(logits, g->row32, sizeof(float) * (size_t)g->V);
    for (int i = n_prompt; !s && i < n; i++) {
        g->ids[0] = tokens[i], g->at[0] = i;
        if (!(s = decode(g, e))) memcpy(logits + (i - n_prompt + 1) * g->V, g->row32, sizeof(float) * (size_t)g->V);
    }
    return s;
}

void sn_generator_stats(const sn_generator *g, sn_generate_stats *s) {
    *s = (sn_generate_stats){.prefill_s = g->prefill_s, .decode_s = g->decode_s,
                             .n_steps = g->n_steps, .step_s = g->n_steps ? g->step_s : NULL,
                             .n_slides = g->n_slides};
}

const sn_graph *sn_generator_decode_graph(const sn_generator *g) { return g->dg; }
const sn_program *sn_generator_decode_program(const sn_generator *g) { return g->dp; }
sn_exec *sn_generator_decode_exec(const sn_generator *g) { return g->dx; }
