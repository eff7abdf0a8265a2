/* train.c: the trainer of train.h.
 * Convention: a step either applies its whole update or, on a bad number, none of it: the
 * norm comes back to the host and is checked before the AdamW launch. How the graph and the
 * optimizer run (interpreter or device) is the runner's business (runner.h). */
#include "train.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/nf4.h"
#include "runner.h"
#include "passes/passes.h"
#include "ir/dropout.h"
#include "support/clock.h"
#include "support/half.h"
#include "support/hash.h"
#include "support/rng.h"

void sn_train_opts_default(sn_train_opts *o, int steps) {
    *o = (sn_train_opts){.steps = steps, .lr = 1e-3f, .min_lr_frac = 0.1f, .warmup = steps / 10,
                         .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .grad_clip = 1.0f, .seed = 1337, .init_scale = 65536, .scale_interval = 2000};
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

/* A normal initialisation is one stream of draws (two sn_rng_next calls each) from a seed of
 * the parameter's name. A pool fills it in chunks of 2^INIT_CHUNK_LOG2 draws at once, each chunk
 * from its own start reached by jumps (rng.h): the same numbers as one by one. */
enum { INIT_CHUNK_LOG2 = 16 };

static sn_rng_jumper init_jump; /* 2 * 2^INIT_CHUNK_LOG2 steps: one chunk */
static pthread_once_t init_jump_once = PTHREAD_ONCE_INIT;
static void init_jump_build(void) { sn_rng_jump_init(&init_jump, INIT_CHUNK_LOG2 + 1); }

typedef struct {
    float *dst;
    int64_t n;
    double std;
    const sn_rng *starts; /* each chunk's */
} init_job;

static void init_chunks(void *ctx, int64_t begin, int64_t end) {
    const init_job *j = ctx;
    for (int64_t c = begin; c < end; c++) {
        sn_rng r = j->starts[c];
        int64_t i = c << INIT_CHUNK_LOG2, last = i + (1 << INIT_CHUNK_LOG2);
        for (; i < last && i < j->n; i++) j->dst[i] = (float)(j->std * sn_rng_normal(&r));
    }
}

/* n values of the rule init (std: a normal's) into dst, from the stream of name and seed. */
static void init_values(const char *name, sn_init init, double std, int64_t n, float *dst,
                        uint64_t seed, sn_pool *pool) {
    switch (init) {
    case SN_INIT_ZEROS: memset(dst, 0, sizeof(float) * (size_t)n); return;
    case SN_INIT_ONES:
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    case SN_INIT_NORMAL: {
        sn_rng r = sn_rng_seed(sn_hash_str(name ? name : "", seed));
        int64_t chunks = (n + (1 << INIT_CHUNK_LOG2) - 1) >> INIT_CHUNK_LOG2;
        sn_rng *starts = pool && chunks > 1 ? malloc(sizeof *starts * (size_t)chunks) : NULL;
        if (!starts) { /* one by one */
            for (int64_t i = 0; i < n; i++) dst[i] = (float)(std * sn_rng_normal(&r));
            return;
        }
        pthread_once(&init_jump_once, init_jump_build);
        for (int64_t c = 0; c < chunks; c++) {
            starts[c] = r;
            sn_rng_jump(&init_jump, &r);
        }
        init_job j = {dst, n, std, starts};
        sn_pool_run(pool, chunks, init_chunks, &j);
        free(starts);
        return;
    }
    case SN_INIT_COUNT: break;
    }
    SN_ASSERT(0);
}

void sn_param_init_pool(const sn_node *p, float *dst, uint64_t seed, sn_pool *pool) {
    init_values(p->name, p->a.init, p->a.f, sn_numel(p), dst, seed, pool);
}

void sn_param_init(const sn_node *p, float *dst, uint64_t seed) { sn_param_init_pool(p, dst, seed, NULL); }

/* ---- the trainer ---------------------------------------------------------------------------- */

struct sn_trainer {
    sn_graph *g;
    sn_train_opts o;
    sn_runner *run;
    const sn_param_layout *lay; /* the parameters: the program's layout (runner.h), graph order */
    const sn_node **value;      /* [lay->n] each one's weights: the PARAM, or the dequantize of
                                   its NF4 storage (QLoRA's base: u8 bytes on the device) */
    sn_node *idx, *targets;
    int pending;         /* micro-batches accumulated */
    bool in_grads;       /* the one pending micro-batch's gradients are still the program's own
                            (no copy is made for steps of one micro-batch) */
    double loss_sum;     /* their losses */
    int step;
    sn_node *loss_scale; /* the loss-scale INPUT (fp16 autocast), or NULL: no loss scaling */
    sn_node *dropout_seed; /* the dropout seed INPUT, or NULL: no dropout */
    sn_loss_scaler sc;
    double init_s;       /* init_params' seconds (sn_trainer_startup) */
    bool *unset;         /* [lay->n] with init_later, until sn_trainer_init_rest (NULL after):
                            not set since sn_trainer_new */
};

/* Refuses what needs the parameters before sn_trainer_init_rest (train.h: init_later). */
static sn_status need_init(const sn_trainer *t, sn_err *e) {
    return t->unset ? sn_fail(e, SN_ERR_INVALID, "trainer: its parameters are not initialised "
                               "yet (init_later): set those you load, then call "
                               "sn_trainer_init_rest") : SN_OK;
}

void sn_trainer_free(sn_trainer *t) {
    if (!t) return;
    sn_runner_free(t->run);
    free(t->value);
    free(t->unset);
    free(t);
}

/* Each parameter's weights node (NF4 storage: its dequantize, whose shape the weights have). */
static sn_status find_values(sn_trainer *t, sn_err *e) {
    if (!(t->value = sn_calloc((size_t)t->lay->n + 1, sizeof *t->value, "the trainer's parameters", e)))
        return SN_ERR_OOM;
    for (int i = 0; i < t->lay->n; i++) {
        const sn_node *p = t->lay->slots[i].node;
        if (!(t->value[i] = p->dtype == SN_U8 ? sn_nf4_weights(t->g, p) : p))
            return sn_fail(e, SN_ERR_INVALID, "trainer: parameter %s is NF4 storage that no "
                           "dequant_nf4 reads, so nothing says how many weights it holds: "
                           "leave it out of the model", p->name);
    }
    return SN_OK;
}

/* Every parameter (or, with init_later, every one not set yet) drawn from its init rule (the
 * same stream whether it is stored in f32, 16 bits or NF4: a 16-bit base starts rounded as the
 * f32 run's shadows are, a QLoRA base as the quantization of the full-precision run's) and set;
 * the one host buffer of weights is freed after. */
static sn_status init_params(sn_trainer *t, sn_err *e) {
    int64_t most = 0;
    for (int i = 0; i < t->lay->n; i++)
        if ((!t->unset || t->unset[i]) && sn_numel(t->value[i]) > most) most = sn_numel(t->value[i]);
    float *w = sn_malloc(sizeof(float) * (size_t)(most + 1), "the parameters' initialisation", e);
    if (!w) return SN_ERR_OOM;
    sn_status s = SN_OK;
    sn_pool *pool = sn_pool_new(0); /* NULL: one by one */
    for (int i = 0; i < t->lay->n && !s; i++) {
        const sn_node *p = t->lay->slots[i].node;
        if (t->unset && !t->unset[i]) continue;
        init_values(p->name, p->a.init, p->a.f, sn_numel(t->value[i]), w, t->o.seed, pool);
        s = sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, w, e);
    }
    sn_pool_free(pool);
    free(w);
    return s;
}

/* init_later (train.h): every parameter unset, the trainer not ready. */
static sn_status init_later(sn_trainer *t, sn_err *e) {
    if (!(t->unset = sn_malloc((size_t)t->lay->n + 1, "the trainer's parameters", e))) return SN_ERR_OOM;
    memset(t->unset, 1, (size_t)t->lay->n + 1);
    return SN_OK;
}

sn_trainer *sn_trainer_new(sn_graph *g, const sn_train_opts *o, sn_err *e) {
    if (!g->loss || !g->has_backward) {
        sn_fail(e, SN_ERR_INVALID, "trainer: the graph needs a loss and its backward (call sn_backward)");
        return NULL;
    }
    sn_node *idx = sn_graph_input(g, SN_ROLE_TOKENS), *targets = sn_graph_input(g, SN_ROLE_TARGETS);
    if (!idx || !targets || idx->dtype != SN_I32 || targets->dtype != SN_I32 ||
        sn_numel(idx) != sn_numel(targets)) {
        sn_fail(e, SN_ERR_INVALID, "trainer: the graph needs i32 inputs of the roles tokens and "
                "targets, of the same shape (sn_input_tokens, sn_input_targets)");
        return NULL;
    }
    if (sn_verify(g, e) != SN_OK) return NULL;
    if (o->offload_delay && !(o->offload && o->device)) {
        sn_fail(e, SN_ERR_INVALID, "trainer: the delayed parameter update (offload_delay) overlaps "
                "the host's AdamW with the device's next step: it needs the optimizer state "
                "offloaded (offload) and a device, not the interpreter");
        return NULL;
    }
    if (o->offload_threads < 0 || (o->offload_threads && !o->offload_delay)) {
        sn_fail(e, SN_ERR_INVALID, "trainer: offload_threads %d: the delayed update's host threads "
                "are a count (0: the host's cores less one) and need offload_delay",
                o->offload_threads);
        return NULL;
    }
    sn_trainer *t = sn_calloc(1, sizeof *t, "the trainer", e);
    if (!t) return NULL;
    t->g = g;
    t->o = *o;
    if (sn_runner_new(g, o->device, o->compile, o->offload, &t->run, e) ||
        (o->offload_delay && sn_runner_delay(t->run, o->offload_threads, e))) {
        sn_trainer_free(t);
        return NULL;
    }
    t->lay = sn_runner_layout(t->run);
    /* found in the compiled graph, by role: the kernel passes may have replaced g's nodes */
    t->idx = sn_graph_input(g, SN_ROLE_TOKENS);
    t->targets = sn_graph_input(g, SN_ROLE_TARGETS);
    t->loss_scale = sn_graph_input(g, SN_ROLE_LOSS_SCALE);
    t->dropout_seed = sn_graph_input(g, SN_ROLE_DROPOUT_SEED);
    t->sc = (sn_loss_scaler){.scale = t->loss_scale ? (o->init_scale > 0 ? o->init_scale : 65536) : 1};
    double t0 = sn_clock_s();
    if (find_values(t, e) || (o->init_later ? init_later(t, e) : init_params(t, e))) {
        sn_trainer_free(t);
        return NULL;
    }
    t->init_s = sn_clock_s() - t0;
    return t;
}

sn_status sn_trainer_init_rest(sn_trainer *t, sn_err *e) {
    if (!t->unset) return SN_OK;
    double t0 = sn_clock_s();
    sn_status s = init_params(t, e);
    if (s) return s;
    free(t->unset);
    t->unset = NULL;
    t->init_s += sn_clock_s() - t0;
    return SN_OK;
}

/* Before the runner runs again: the pending gradients move to the gradient sums. */
static sn_status keep_pending(sn_trainer *t, sn_err *e) {
    if (!t->in_grads) return SN_OK;
    t->in_grads = false;
    return sn_runner_sum_grads(t->run, false, e);
}

/* The dropout seed of micro-batch `micro` of the next step: a hash of (the run's seed, the step,
 * micro) below 2^24 (ir/dropout.h), so a resumed run draws the same masks. */
static float dropout_seed(const sn_trainer *t, int micro) {
    uint64_t h = sn_hash_word(sn_hash_word(sn_hash_word(SN_HASH_INIT, t->o.seed), (uint64_t)t->step),
                              (uint64_t)micro);
    return (float)((h >> 40) % SN_DROPOUT_SEED_MAX);
}

/* One forward and backward; *loss unscaled (the graph's loss is loss * scale with scaling). */
static sn_status run(sn_trainer *t, bool last, const int32_t *idx, const int32_t *targets,
                     double *loss, sn_err *e) {
    sn_status s = need_init(t, e);
    if (!s && t->dropout_seed) s = sn_runner_set_scalar(t->run, t->dropout_seed, dropout_seed(t, t->pending), e);
    if (!s && t->loss_scale) s = sn_runner_set_scalar(t->run, t->loss_scale, t->sc.scale, e);
    if (!s) s = sn_runner_run(t->run, last, t->idx, t->targets, idx, targets, loss, e);
    if (!s) *loss /= t->sc.scale;
    return s;
}

sn_status sn_trainer_eval(sn_trainer *t, const int32_t *idx, const int32_t *targets, double *loss,
                          sn_err *e) {
    /* the evaluation program: the forward alone, the pending gradients untouched */
    sn_status s = need_init(t, e);
    if (!s && t->loss_scale) s = sn_runner_set_scalar(t->run, t->loss_scale, t->sc.scale, e);
    if (!s) s = sn_runner_eval(t->run, t->idx, t->targets, idx, targets, loss, e);
    if (!s) *loss /= t->sc.scale;
    return s;
}

/* Forgets the pending micro-batches (the next one starts the sums afresh). */
static void drop_pending(sn_trainer *t) {
    t->pending = 0;
    t->in_grads = false;
    t->loss_sum = 0;
}

static sn_status accumulate(sn_trainer *t, bool last, const int32_t *idx, const int32_t *targets,
                            double *loss, sn_err *e) {
    double l;
    sn_status s = keep_pending(t, e);
    if (!s) s = run(t, last, idx, targets, &l, e);
    if (s) return s;
    if (!isfinite(l)) {
        int k = t->pending;
        drop_pending(t);
        return sn_fail(e, SN_ERR_NUMERIC, "step %d: loss %g on micro-batch %d: the run diverged; "
                       "the parameters are unchanged (lower the learning rate or raise warm-up)",
                       t->step + 1, l, k + 1);
    }
    if (t->pending == 0) t->in_grads = true;
    else if ((s = sn_runner_sum_grads(t->run, true, e))) return s;
    t->pending++;
    t->loss_sum += l;
    if (loss) *loss = l;
    return SN_OK;
}

sn_status sn_trainer_accumulate(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                                double *loss, sn_err *e) {
    return accumulate(t, false, idx, targets, loss, e);
}

sn_status sn_trainer_accumulate_last(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                                     double *loss, sn_err *e) {
    return accumulate(t, true, idx, targets, loss, e);
}

sn_status sn_trainer_update(sn_trainer *t, sn_step_stats *st, sn_err *e) {
    if (!t->pending)
        return sn_fail(e, SN_ERR_INVALID, "trainer: update without gradients: call "
                       "sn_trainer_accumulate on at least one micro-batch first");
    const sn_train_opts *o = &t->o;
    double loss = t->loss_sum / t->pending, norm;
    float lr = sn_train_lr(o, t->step);
    int step = t->step + 1;
    int64_t updates = step - t->sc.skipped; /* AdamW's bias correction counts real updates */
    float scale = t->sc.scale;
    float scal[SN_OPT_SCALARS] = {
        [SN_OPT_LR] = lr, [SN_OPT_BETA1] = o->beta1, [SN_OPT_BETA2] = o->beta2, [SN_OPT_EPS] = o->eps,
        [SN_OPT_WD] = o->weight_decay, [SN_OPT_BC1] = (float)(1 - pow(o->beta1, (double)updates)),
        [SN_OPT_BC2] = (float)(1 - pow(o->beta2, (double)updates)), [SN_OPT_SCALE] = 1,
        /* the mean over micro-batches, unscaled before the norm and the clip */
        [SN_OPT_INV_MICRO] = 1.0f / ((float)t->pending * scale),
        [SN_OPT_CLIP] = o->grad_clip > 0 ? o->grad_clip : 0};
    bool sums = !t->in_grads;
    sn_status s = sn_runner_norm(t->run, sums, scal, &norm, e);
    if (s) return s;
    if (!isfinite(norm) && t->loss_scale && scale / 2 < SN_MIN_LOSS_SCALE) {
        /* halving again cannot help: the gradients are not finite at any scale. No test reaches
         * this: a NaN or infinite loss fails in sn_trainer_accumulate first, and gradients scale
         * linearly with the loss scale; it bounds the halving, which would otherwise reach zero
         * and skip every later step (a state the checkpoint reader refuses). */
        drop_pending(t);
        return sn_fail(e, SN_ERR_NUMERIC, "step %d: loss %g, gradient norm %g at a loss scale of %g "
                       "(%lld steps skipped in all): the gradients are not finite at any loss scale, "
                       "the run diverged; the parameters are unchanged (lower the learning rate, "
                       "raise warm-up, or train in bf16 or fp32)", step, loss, norm, (double)scale,
                       (long long)t->sc.skipped);
    }
    if (!isfinite(norm) && t->loss_scale) { /* overflow at this scale: skip, halve */
        t->step = step;
        t->sc.skipped++;
        t->sc.clean = 0;
        t->sc.scale = scale / 2;
        drop_pending(t);
        if (st) *st = (sn_step_stats){.loss = loss, .grad_norm = norm, .lr = lr, .loss_scale = scale,
                                      .skipped = true};
        return SN_OK;
    }
    if (!isfinite(norm)) {
        drop_pending(t);
        return sn_fail(e, SN_ERR_NUMERIC, "step %d: loss %g, gradient norm %g: the run diverged; "
                       "the parameters are unchanged (lower the learning rate or raise warm-up)",
                       step, loss, norm);
    }
    if ((s = sn_runner_adamw(t->run, sums, e))) return s;
    t->step = step;
    drop_pending(t);
    if (t->loss_scale && ++t->sc.clean >= (o->scale_interval > 0 ? o->scale_interval : 2000)) {
        t->sc.clean = 0;
        if (scale < 0x1p24f) t->sc.scale = scale * 2; /* fp16's whole range is below 2^16 */
    }
    if (st) *st = (sn_step_stats){.loss = loss, .grad_norm = norm, .lr = lr, .loss_scale = scale};
    return SN_OK;
}

sn_status sn_trainer_step(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                          sn_step_stats *st, sn_err *e) {
    sn_status s = sn_trainer_accumulate_last(t, idx, targets, NULL, e);
    return s ? s : sn_trainer_update(t, st, e);
}

int sn_trainer_pending(const sn_trainer *t) { return t->pending; }
sn_status sn_trainer_drain(sn_trainer *t, sn_err *e) { return sn_runner_drain(t->run, e); }

void sn_trainer_offload_times(const sn_trainer *t, sn_offload_times *s) {
    sn_runner_offload_times(t->run, s);
}

float sn_trainer_dropout(const sn_trainer *t) {
    float p = 0;
    for (int i = 0; i < t->g->n_nodes; i++)
        if (t->g->nodes[i]->op == SN_OP_DROPOUT && t->g->nodes[i]->a.f > p) p = t->g->nodes[i]->a.f;
    return p;
}
int sn_trainer_step_count(const sn_trainer *t) { return t->step; }
void sn_trainer_set_step_count(sn_trainer *t, int step) { t->step = step; }
bool sn_trainer_loss_scaling(const sn_trainer *t) { return t->loss_scale != NULL; }
sn_loss_scaler sn_trainer_scaler(const sn_trainer *t) { return t->sc; }
void sn_trainer_set_scaler(sn_trainer *t, sn_loss_scaler s) { t->sc = s; }
const sn_train_opts *sn_trainer_opts(const sn_trainer *t) { return &t->o; }
int sn_trainer_param_count(const sn_trainer *t) { return t->lay->n; }
const sn_param_layout *sn_trainer_layout(const sn_trainer *t) { return t->lay; }
const char *sn_trainer_device_name(const sn_trainer *t) { return sn_runner_name(t->run); }
const sn_program *sn_trainer_program(const sn_trainer *t) { return sn_runner_program(t->run); }
sn_exec *sn_trainer_exec(const sn_trainer *t) { return sn_runner_exec(t->run); }
const sn_program *sn_trainer_eval_program(sn_trainer *t, sn_err *e) { return sn_runner_eval_program(t->run, e); }
sn_exec *sn_trainer_eval_exec(const sn_trainer *t) { return sn_runner_eval_exec(t->run); }
int64_t sn_trainer_state_bytes(const sn_trainer *t) { return sn_runner_state_bytes(t->run); }
int64_t sn_trainer_host_state_bytes(const sn_trainer *t) { return sn_runner_host_state_bytes(t->run); }
void sn_trainer_startup_get(const sn_trainer *t, sn_trainer_startup *s) {
    sn_runner_startup(t->run, &s->kernels_s, &s->exec_s, &s->optimizer_s);
    s->init_s = t->init_s;
}
struct sn_device *sn_trainer_device(const sn_trainer *t) { return t->o.device; }

const sn_node *sn_trainer_param_node(const sn_trainer *t, int i) {
    SN_ASSERT(i >= 0 && i < t->lay->n);
    return t->lay->slots[i].node;
}

bool sn_trainer_param_nf4(const sn_trainer *t, int i) {
    SN_ASSERT(i >= 0 && i < t->lay->n);
    return t->lay->slots[i].node->dtype == SN_U8;
}

const sn_node *sn_trainer_param_value(const sn_trainer *t, int i) {
    SN_ASSERT(i >= 0 && i < t->lay->n);
    return t->value[i];
}

sn_status sn_trainer_get_nf4(const sn_trainer *t, int i, uint8_t *bytes, sn_err *e) {
    SN_ASSERT(sn_trainer_param_nf4(t, i));
    sn_status s = need_init(t, e);
    return s ? s : sn_runner_get(t->run, i, SN_PARAM_WEIGHTS, false, (float *)bytes, e);
}

sn_status sn_trainer_set_nf4(sn_trainer *t, int i, const uint8_t *bytes, sn_err *e) {
    SN_ASSERT(sn_trainer_param_nf4(t, i));
    sn_status s = sn_runner_set(t->run, i, SN_PARAM_WEIGHTS, (const float *)bytes, e);
    if (!s && t->unset) t->unset[i] = false;
    return s;
}

static void on_pool(void *pool, int64_t n, sn_nf4_range_fn fn, void *ctx) {
    sn_pool_run(pool, n, fn, ctx);
}

/* An NF4 parameter's weights to or from the host as floats: dequantized, or quantized (over a
 * pool of a thread a core from a million weights: gpt2-xl's 1.47 B are 15 s on one thread at
 * 10 ns a weight; the same bytes either way, nf4.h). */
static sn_status nf4_weights(const sn_trainer *t, int i, float *host, bool set, sn_err *e) {
    int64_t n = sn_numel(t->value[i]);
    uint8_t *q = sn_malloc((size_t)sn_nf4_layout_of(n).bytes, "an NF4 parameter's bytes", e);
    if (!q) return SN_ERR_OOM;
    sn_status s;
    sn_pool *pool = set && n >= (1 << 20) ? sn_pool_new(0) : NULL; /* NULL: on this thread */
    if (!set) {
        if (!(s = sn_trainer_get_nf4(t, i, q, e))) sn_nf4_dequantize(q, n, host);
    } else if ((s = sn_nf4_quantize_on(host, n, q, pool ? on_pool : NULL, pool, e))) {
        snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg), " (parameter %s, "
                 "stored as NF4)", t->lay->slots[i].node->name);
    } else {
        s = sn_trainer_set_nf4((sn_trainer *)t, i, q, e);
    }
    sn_pool_free(pool);
    free(q);
    return s;
}

bool sn_trainer_param_16bit(const sn_trainer *t, int i) {
    SN_ASSERT(i >= 0 && i < t->lay->n);
    sn_dtype d = t->lay->slots[i].node->dtype;
    return d == SN_BF16 || d == SN_F16;
}

/* A 16-bit parameter's weights (the base16 pass) to or from the host as floats: widened
 * exactly, or rounded to nearest even as its weight shadow was made from the f32 weights. */
static sn_status half_weights(const sn_trainer *t, int i, float *host, bool set, sn_err *e) {
    const sn_node *p = t->lay->slots[i].node;
    int64_t n = sn_numel(p);
    bool bf16 = p->dtype == SN_BF16;
    uint16_t *h = sn_malloc(2 * (size_t)n + 2, "a 16-bit parameter's weights", e);
    if (!h) return SN_ERR_OOM;
    sn_status s = SN_OK;
    if (!set) {
        if (!(s = sn_runner_get(t->run, i, SN_PARAM_WEIGHTS, false, (float *)h, e)))
            sn_half_to_f32(bf16, h, host, n);
    } else {
        sn_half_from_f32(bf16, host, h, n);
        for (int64_t k = 0; k < n && !s; k++) {
            float w = bf16 ? sn_bf16_to_f32(h[k]) : sn_f16_to_f32(h[k]);
            if (!isfinite(w))
                s = sn_fail(e, SN_ERR_NUMERIC, "parameter %s, stored in %s: weight %lld is %g, "
                            "%s: keep the base in f32 (--base-f32)%s", p->name,
                            sn_dtype_name(p->dtype), (long long)k, (double)host[k],
                            isfinite(host[k]) ? "past the format's range" : "not a number",
                            bf16 ? "" : " or train in bf16");
        }
        if (!s) s = sn_runner_set(t->run, i, SN_PARAM_WEIGHTS, (const float *)h, e);
    }
    free(h);
    return s;
}

sn_status sn_trainer_get_param(const sn_trainer *t, int i, sn_param_which which, float *host, sn_err *e) {
    SN_ASSERT(i >= 0 && i < t->lay->n && (unsigned)which < SN_PARAM_WHICH_COUNT);
    sn_status s = need_init(t, e);
    if (s) return s;
    bool nf4 = sn_trainer_param_nf4(t, i);
    if ((which == SN_PARAM_GRAD && !t->pending) || (nf4 && which != SN_PARAM_WEIGHTS)) {
        memset(host, 0, sizeof(float) * (size_t)sn_numel(t->value[i]));
        return SN_OK;
    }
    if (nf4) return nf4_weights(t, i, host, false, e);
    if (which == SN_PARAM_WEIGHTS && sn_trainer_param_16bit(t, i))
        return half_weights(t, i, host, false, e);
    return sn_runner_get(t->run, i, which, !t->in_grads, host, e);
}

sn_status sn_trainer_set_param(sn_trainer *t, int i, sn_param_which which, const float *host, sn_err *e) {
    SN_ASSERT(i >= 0 && i < t->lay->n && (unsigned)which < SN_PARAM_WHICH_COUNT);
    if (which == SN_PARAM_GRAD)
        return sn_fail(e, SN_ERR_INVALID, "trainer: gradients are computed, not set: set the "
                       "weights or the moments of parameter %s", t->lay->slots[i].node->name);
    sn_status s;
    if (sn_trainer_param_nf4(t, i)) /* frozen: no moments */
        s = which == SN_PARAM_WEIGHTS ? nf4_weights(t, i, (float *)host, true, e) : SN_OK;
    else if (which == SN_PARAM_WEIGHTS && sn_trainer_param_16bit(t, i)) /* frozen: rounded */
        s = half_weights(t, i, (float *)host, true, e);
    else
        s = sn_runner_set(t->run, i, which, host, e);
    if (!s && which == SN_PARAM_WEIGHTS && t->unset) t->unset[i] = false;
    return s;
}

int sn_trainer_find_param(const sn_trainer *t, const char *name) {
    for (int i = 0; i < t->lay->n; i++)
        if (!strcmp(t->lay->slots[i].node->name, name)) return i;
    return -1;
}
