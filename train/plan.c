/* plan.c: the memory plan of a training run (plan.h). Convention: a figure is read off a program
 * compiled for the run's exact shapes; choosing means compiling candidates, largest micro-batch
 * first, and taking the first whose total fits. */
#include "plan.h"

#include <stdlib.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "offload.h"

enum { ALIGN = 64 }; /* memplan's persistent alignment */
enum { F32_BYTES = sizeof(float) }; /* the optimizer state's elements */

/* cuBLASLt's workspace, allocated once by the CUDA device (runtime/cuda/device.c). */
static int64_t workspace_of(const sn_target *t) { return t->kind == SN_TARGET_CUDA ? 32 << 20 : 0; }

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* The step's scalars and the norm's partials (runner.c). */
static int64_t scalar_bytes(int64_t n_flat) {
    return F32_BYTES * (SN_OPT_SCALARS + (n_flat + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK);
}

int64_t sn_train_state_bytes(const sn_program *p, bool sums) {
    int64_t n_flat = p->layout.flat_n;
    /* the trainer's buffers (runner.c): m, v, the scalars with the norm's partials, sums */
    return n_flat ? F32_BYTES * (2 * n_flat + (sums ? n_flat : 0)) + scalar_bytes(n_flat) : 0;
}

/* The weights a parameter slot stands for: its elements, or for NF4 storage (u8 bytes) the
 * weights its dequantize unpacks. */
static int64_t slot_weights(const sn_program *p, const sn_param_slot *s) {
    if (s->dtype != SN_U8) return s->numel;
    const sn_node *w = sn_nf4_weights(p->g, s->node);
    return w ? sn_numel(w) : 0;
}

/* The persistent block split into weights (those in 16 bits among them), weight shadows,
 * gradients and the rest (inputs, outputs). */
static sn_status split_persistent(const sn_program *p, sn_plan *pl, sn_err *e) {
    const sn_graph *g = p->g;
    /* per node: 1 a gradient, 2 a weight shadow */
    uint8_t *grad = sn_calloc((size_t)g->n_nodes + 1, 1, "the plan's table of gradients", e);
    if (!grad) return SN_ERR_OOM;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->grad) grad[g->nodes[i]->grad->id] = true;
    for (int k = 0; k < p->n_shadows; k++) grad[p->shadows[k]->args[0]->id] = 2; /* a copy */
    pl->weights = pl->grads = pl->io = pl->weights16 = pl->shadows = 0;
    pl->nf4_codes = pl->nf4_scales = pl->weights_trained = 0;
    for (int v = 0; v < p->n_values; v++) {
        const sn_value *x = &p->values[v];
        if (!x->persistent || x->alias >= 0) continue;
        int64_t b = align_up(x->bytes);
        bool half = x->node->dtype == SN_BF16 || x->node->dtype == SN_F16;
        if (x->node->op == SN_OP_PARAM) {
            pl->weights += b, pl->weights16 += half ? b : 0;
            const sn_node *w = x->node->dtype == SN_U8 ? sn_nf4_weights(g, x->node) : NULL;
            int64_t codes = w ? (sn_numel(w) + 1) / 2 : 0; /* two a byte (ir/nf4.h) */
            pl->nf4_codes += codes, pl->nf4_scales += w ? b - codes : 0;
            pl->weights_trained += !x->node->a.frozen && x->node->dtype == SN_F32 ? b : 0;
        } else if (grad[x->node->id] == 2) pl->shadows += b;
        else if (grad[x->node->id]) pl->grads += b;
        else pl->io += b;
    }
    free(grad);
    pl->persistent = p->persistent_bytes;
    return SN_OK;
}

/* The evaluation program of training graph g (compiled by the kernel passes with o): its arena,
 * and what it adds (runner.h): the persistent values that are not the parameters nor their
 * weight shadows (the training program's), and the arena beyond the training one's. */
static sn_status measure_eval(const sn_graph *g, const sn_pipeline_opts *o, sn_plan *pl, sn_err *e) {
    sn_graph *eg;
    sn_program *ep = NULL;
    sn_status s = sn_pass_eval_graph(g, &eg, e);
    if (!s) s = sn_pipeline_kernels(eg, o, &ep, NULL, e);
    if (!s) {
        int64_t own = 0;
        for (int v = 0; v < ep->n_values; v++) {
            const sn_value *x = &ep->values[v];
            const sn_node *n = x->node;
            bool shared = n && (n->op == SN_OP_PARAM || (n->op == SN_OP_CAST && n->in[0]->op == SN_OP_PARAM));
            if (x->persistent && x->alias < 0 && !shared) own += align_up(x->bytes);
        }
        pl->eval_arena = ep->arena_bytes;
        pl->eval = own + (ep->arena_bytes > pl->arena ? ep->arena_bytes : 0); /* as the executor counts */
    }
    sn_program_free(ep);
    if (eg) sn_graph_free(eg);
    return s;
}

sn_status sn_plan_measure(sn_graph *g, const sn_pipeline_opts *compile, int policy,
                          int64_t arena_budget, int accum, bool offload, sn_plan *pl,
                          sn_program **prog, sn_err *e) {
    sn_pipeline_opts o = *compile;
    sn_target t = o.target ? *o.target : sn_target_cpu();
    t.memory_bytes = 0; /* the plan compares with its budget itself */
    o.target = &t;
    o.backward = true;
    o.checkpoint = policy;
    o.checkpoint_budget = arena_budget;
    o.dump_after = NULL;
    sn_pipeline_stats st;
    sn_program *p;
    if (prog) *prog = NULL;
    sn_status s = sn_compile(g, &o, &p, &st, e);
    if (s) {
        pl->arena = st.checkpoint_min_arena; /* the budget policy's smallest, when it found none */
        return s;
    }
    pl->accum = accum;
    pl->policy = policy;
    pl->params = 0;
    for (int i = 0; i < p->layout.n; i++) pl->params += slot_weights(p, &p->layout.slots[i]);
    pl->trained = sn_param_layout_trained(&p->layout);
    pl->precision = o.precision;
    pl->recomputed = st.checkpoint_recomputed;
    pl->logits_chunks = st.logits_chunks;
    pl->chunk_logits = st.logits_chunks ? o.chunk_logits : 0;
    pl->extra_flops = st.step_flops > 0 ? st.checkpoint_extra_flops / st.step_flops : 0;
    if ((s = split_persistent(p, pl, e))) {
        sn_program_free(p);
        return s;
    }
    pl->offload = offload;
    pl->opt_device = sn_train_state_bytes(p, accum > 1);
    pl->opt_host = pl->delay_host = 0;
    if (offload) { /* the device keeps the step's scalars; the host the masters, the moments,
                      the sums, the scalars and the gradients' staging chunks (runner.c) */
        int64_t n = p->layout.flat_n;
        pl->opt_device = scalar_bytes(n);
        pl->opt_host = F32_BYTES * (3 * n + (accum > 1 ? n : 0) + SN_OPT_SCALARS +
                                    sn_offload_staging(n));
        sn_offload_seg *seg; /* and the shadows' bits of the weights that go up as those */
        int n_seg;
        if ((s = sn_offload_segments(p, NULL, &seg, &n_seg, e))) {
            sn_program_free(p);
            return s;
        }
        if (seg) pl->opt_host += 2 * n + 4;
        free(seg);
        /* the delayed update's: a gradient range for the run's download instead of the
           staging chunks, and the update in flight's (runner.c) */
        pl->delay_host = F32_BYTES * (2 * n - sn_offload_staging(n));
    }
    pl->arena = p->arena_bytes;
    pl->workspace = workspace_of(&t);
    if ((s = measure_eval(g, &o, pl, e))) {
        sn_program_free(p);
        return s;
    }
    pl->total = pl->persistent + pl->opt_device + pl->arena + pl->workspace + pl->eval;
    if (prog) *prog = p;
    else sn_program_free(p);
    return SN_OK;
}

/* Measures micro-batch m with compile options co (first the policy asked for, or none). */
static sn_status measure_first(const sn_plan_opts *o, const sn_pipeline_opts *co, sn_plan_graph_fn build,
                               void *ctx, int m, bool offload, sn_plan *pl, sn_err *e) {
    sn_graph *g;
    int first = o->policy >= 0 ? o->policy : SN_RECOMPUTE_NONE;
    sn_status s = build(ctx, m, &g, e);
    if (!s) s = sn_plan_measure(g, co, first, o->budget, o->batch / m, offload, pl, NULL, e);
    sn_graph_free(g);
    return s;
}

/* One micro-batch size: without checkpointing, then (chunk_logits auto) with the LM head in
 * chunks, then (policy -1) with the budget policy on what the budget leaves and, with `block`,
 * where that does not fit, the block policy (a checkpoint at each block's input: the budget
 * policy's greedy choice can keep more, as for QLoRA's gpt2-xl, 3.6 against 2.4 GiB; its
 * recompute is larger, so sn_plan_make asks for it only when nothing else fits). *min_total:
 * the smallest total found for it. */
static sn_status try_micro(const sn_plan_opts *o, sn_plan_graph_fn build, void *ctx, int m,
                           bool offload, bool block, sn_plan *pl, int64_t *min_total, sn_err *e) {
    sn_graph *g;
    int accum = o->batch / m;
    sn_pipeline_opts co = *o->compile;
    if (o->chunk_logits > 0) co.chunk_logits = o->chunk_logits;
    sn_status s = measure_first(o, &co, build, ctx, m, offload, pl, e);
    if (s) return s;
    if (o->chunk_logits == SN_CHUNK_LOGITS_AUTO && o->budget && pl->total > o->budget && !co.chunk_logits) {
        sn_plan c;
        co.chunk_logits = SN_CHUNK_LOGITS_AUTO;
        if ((s = measure_first(o, &co, build, ctx, m, offload, &c, e))) return s;
        if (c.logits_chunks && c.total < pl->total) *pl = c; /* else the head stays whole */
        else co.chunk_logits = 0;
    }
    pl->micro_batch = m;
    pl->total_without = pl->total;
    *min_total = pl->total;
    if (!o->budget || pl->total <= o->budget || o->policy >= 0) return SN_OK;
    int64_t fixed = pl->total - pl->arena, without = pl->total;
    sn_plan c = *pl;
    if ((s = build(ctx, m, &g, e))) return s;
    int64_t left = o->budget - fixed > 0 ? o->budget - fixed : 1;
    s = sn_plan_measure(g, &co, SN_RECOMPUTE_BUDGET, left, accum, offload, &c, NULL, e);
    sn_graph_free(g);
    if (s == SN_ERR_OOM && c.arena > 0) {
        *min_total = fixed + c.arena;
        if (!block) return SN_OK; /* does not fit: the caller compares */
        sn_plan b = *pl;
        if ((s = build(ctx, m, &g, e))) return s;
        s = sn_plan_measure(g, &co, SN_RECOMPUTE_BLOCK, 0, accum, offload, &b, NULL, e);
        sn_graph_free(g);
        if (s) return s;
        if (b.total < *min_total) *min_total = b.total;
        if (b.total > o->budget) return SN_OK; /* does not fit: the caller compares */
        c = b;
    } else if (s) {
        return s;
    }
    *pl = c;
    pl->arena_budget = c.policy == SN_RECOMPUTE_BUDGET ? left : 0;
    pl->micro_batch = m;
    pl->total_without = without;
    *min_total = pl->total;
    return SN_OK;
}

sn_status sn_plan_make(const sn_plan_opts *o, sn_plan_graph_fn build, void *ctx, sn_plan *out,
                       sn_err *e) {
    *out = (sn_plan){0};
    if (o->batch < 1 || (o->micro_batch && o->batch % o->micro_batch))
        return sn_fail(e, SN_ERR_INVALID, "plan: the batch %d is not a multiple of the micro-batch "
                       "%d: give a micro-batch that divides it", o->batch, o->micro_batch);
    int64_t min_budget = INT64_MAX;
    int max_micro = 0;
    sn_plan best = {0};
    bool fitted = false;
    for (int block = 0; block <= 1 && !fitted; block++) /* the block policy: a last resort */
    for (int off = o->offload == SN_PLAN_OFFLOAD_ALWAYS; off <= (o->offload != 0) && !fitted; off++)
        for (int m = o->batch; m >= 1; m--) {
            if (o->batch % m) continue;
            bool wanted = !o->micro_batch || m == o->micro_batch;
            sn_plan pl = {0};
            int64_t min_total;
            sn_status s = try_micro(o, build, ctx, m, off, block, &pl, &min_total, e);
            if (s) return s;
            bool fits = !o->budget || pl.total <= o->budget;
            if (fits && !max_micro) max_micro = m;
            if (wanted && min_total < min_budget) min_budget = min_total;
            if (wanted && fits) {
                best = pl;
                fitted = true;
                break;
            }
            if (o->micro_batch && m < o->micro_batch && max_micro) break; /* for the message */
        }
    if (fitted) {
        *out = best;
        if (o->offload_delay && out->offload) out->opt_host += out->delay_host;
        out->max_micro_batch = max_micro;
        out->min_budget = min_budget;
        return SN_OK;
    }
    out->min_budget = min_budget;
    out->max_micro_batch = max_micro;
    char have[32], need[32];
    sn_bytes_str(o->budget, have, sizeof have);
    sn_bytes_str(min_budget, need, sizeof need);
    if (o->micro_batch && max_micro)
        return sn_fail(e, SN_ERR_OOM, "plan: micro-batch %d does not fit in %s: it needs at least "
                       "%s; the largest micro-batch that fits is %d (%d accumulation steps)",
                       o->micro_batch, have, need, max_micro, o->batch / max_micro);
    return sn_fail(e, SN_ERR_OOM, "plan: nothing fits in %s: the smallest budget that would fit "
                   "is %s (micro-batch %d, %s%s); no micro-batch fits the budget given: give more "
                   "memory, a shorter --seq or a smaller model", have, need,
                   o->micro_batch ? o->micro_batch : 1,
                   o->policy >= 0 ? sn_recompute_policy_name((sn_recompute_policy)o->policy) : "checkpointing as needed",
                   o->offload ? ", optimizer state offloaded" : "");
}

static void row(FILE *f, const char *what, int64_t b, const char *note) {
    char s[32];
    fprintf(f, "  %-26s %10s %14lld  %s\n", what, sn_bytes_str(b, s, sizeof s), (long long)b,
            note ? note : "");
}

void sn_plan_print(const sn_plan *pl, int64_t budget, FILE *f) {
    char n[96];
    fprintf(f, "parameters: %lld, trained %lld (%.2f%%)%s\n", (long long)pl->params,
            (long long)pl->trained, pl->params ? 100.0 * (double)pl->trained / (double)pl->params : 0.0,
            pl->trained < pl->params ? ": frozen ones have no gradient and no optimizer state" : "");
    fprintf(f, "  %-26s %10s %14s\n", "", "", "bytes");
    bool half = pl->precision == SN_PRECISION_BF16 || pl->precision == SN_PRECISION_FP16;
    char w16[32];
    snprintf(n, sizeof n, "parameters (%s in 16 bits: the frozen base; the rest fp32)",
             sn_bytes_str(pl->weights16, w16, sizeof w16));
    row(f, "weights", pl->weights, pl->nf4_codes ? "parameters, of them:" : pl->weights16 ? n
                                   : half ? "parameters (fp32 masters; products cast to 16 bits)"
                                          : "parameters (fp32)");
    if (pl->nf4_codes) { /* QLoRA: what the weights are made of */
        row(f, "  NF4 base: codes", pl->nf4_codes, "4 bits a frozen weight");
        row(f, "  NF4 base: scales", pl->nf4_scales,
            "an 8-bit absmax a block of 64, an f32 step a group of 256 blocks, the mean");
        row(f, "  trained (fp32 masters)", pl->weights_trained, "the adapters");
        row(f, "  frozen, not NF4", pl->weights - pl->nf4_codes - pl->nf4_scales -
            pl->weights_trained, "embeddings, norms, biases, a tied LM head");
    }
    if (pl->shadows) row(f, "weight shadows", pl->shadows, "16-bit copies of fp32 parameters");
    row(f, "gradients", pl->grads, NULL);
    const char *sums = pl->accum > 1 ? ", gradient sums" : "";
    snprintf(n, sizeof n, "AdamW m and v%s, step scalars", sums);
    row(f, "optimizer state (device)", pl->opt_device, pl->offload ? "step scalars" : n);
    snprintf(n, sizeof n, "fp32 masters, AdamW m and v%s (not in the total)", sums);
    row(f, "optimizer state (host)", pl->opt_host, pl->offload ? n : NULL);
    row(f, "inputs and outputs", pl->io, "token ids, targets, loss");
    int at = 0;
    if (pl->recomputed)
        at = snprintf(n, sizeof n, "recompute +%.1f%% FLOPs, %d forward nodes again%s",
                      100 * pl->extra_flops, pl->recomputed, pl->logits_chunks ? "; " : "");
    else if (!pl->logits_chunks)
        at = snprintf(n, sizeof n, "no recompute");
    if (pl->logits_chunks && at >= 0 && (size_t)at < sizeof n)
        at += snprintf(n + at, sizeof n - (size_t)at, "LM head in %d chunks", pl->logits_chunks);
    if (pl->policy == SN_RECOMPUTE_BUDGET && at > 0 && (size_t)at < sizeof n)
        snprintf(n + at, sizeof n - (size_t)at, " (arena budget %lld)", (long long)pl->arena_budget);
    row(f, "activations (arena)", pl->arena, n);
    row(f, "workspace", pl->workspace, pl->workspace ? "cuBLASLt" : NULL);
    char ea[32];
    snprintf(n, sizeof n, "validation: forward only, arena %s %s", sn_bytes_str(pl->eval_arena, ea, sizeof ea),
             pl->eval_arena <= pl->arena ? "(in the training arena)" : "(its own)");
    row(f, "evaluation", pl->eval, n);
    row(f, "total (device)", pl->total, NULL);
    if (budget) row(f, "budget", budget, pl->total <= budget ? "fits" : "does not fit");
    if (pl->recomputed) row(f, "without checkpointing", pl->total_without, NULL);
    fprintf(f, "choice: micro-batch %d x %d accumulation step%s, checkpoint policy %s, precision "
            "%s, offload %s", pl->micro_batch, pl->accum, pl->accum > 1 ? "s" : "",
            sn_recompute_policy_name((sn_recompute_policy)pl->policy), sn_precision_name(pl->precision),
            pl->offload ? "optimizer state to the host" : "none");
    if (pl->logits_chunks) fprintf(f, ", LM head in %d chunks", pl->logits_chunks);
    fputc('\n', f);
}
