/* pipeline.c: the passes in the order they run: the graph passes (sn_pipeline_graph), then the
 * kernel passes (sn_pipeline_kernels); sn_compile is the two calls. Read top to bottom: each
 * step is one pass, followed by the verifier and, if asked for, a dump of the IR or program. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes.h"

static const char *const pass_names[] = {"frontend", "pad_vocab", "attention", "nf4", "base16",
                                        "siblings", "autocast", "autodiff", "lowrank_sum", "remat", "nf4_per_reader",
                                        "chunk_logits", "fp8",
                                        "checkpoint", "sink_views", "upcast", "fuse", "schedule",
                                        "join_siblings", "join_finish", "memplan"};
enum { N_PASSES = sizeof pass_names / sizeof pass_names[0] };

const char *sn_pipeline_pass_names(void) {
    return "frontend, pad_vocab, attention, nf4, base16, siblings, autocast, autodiff, lowrank_sum, "
           "remat, nf4_per_reader, chunk_logits, fp8, checkpoint, sink_views, upcast, fuse, schedule, "
           "join_siblings, join_finish, memplan";
}

sn_pipeline_opts sn_pipeline_defaults(void) {
    return (sn_pipeline_opts){.fuse_attention = true, .pad_vocab = 64};
}

static bool dumps(const sn_pipeline_opts *o, const char *pass) {
    return o->dump_after && !strcmp(o->dump_after, pass);
}

static FILE *dump_file(const sn_pipeline_opts *o, const char *pass) {
    FILE *f = o->dump ? o->dump : stdout;
    fprintf(f, "# after pass %s\n", pass);
    return f;
}

static sn_status verify(const sn_graph *g, const char *pass, sn_err *e) {
    sn_err ve;
    if (sn_verify(g, &ve) != SN_OK)
        return sn_fail(e, ve.code, "after pass %s: the graph does not verify: %s", pass, ve.msg);
    return SN_OK;
}

/* Verifies g after `pass` and dumps it if that pass was asked for. */
static sn_status after(const sn_graph *g, const char *pass, const sn_pipeline_opts *o, sn_err *e) {
    sn_status s = verify(g, pass, e);
    if (!s && dumps(o, pass)) sn_graph_print(g, dump_file(o, pass));
    return s;
}

/* Checks every kernel of p after `pass` (program/kernel_check.c: a broken contract is the
 * pass's bug) and dumps the program if that pass was asked for. */
static sn_status after_program(const sn_program *p, const char *pass, const sn_pipeline_opts *o,
                               sn_err *e) {
    sn_err ce;
    if (sn_program_check(p, &ce) != SN_OK)
        return sn_fail(e, ce.code, "after pass %s: %s", pass, ce.msg);
    if (dumps(o, pass)) sn_program_print(p, dump_file(o, pass));
    return SN_OK;
}

/* Puts a pass's result in place of g's contents (g itself stays the caller's object) and frees
 * the old contents. */
static void replace(sn_graph *g, sn_graph *next) {
    sn_graph old = *g;
    *g = *next;
    *next = old;
    sn_graph_free(next);
}

/* Does the precision store products' operands in 16 bits (the autocast pass runs)? */
static bool autocasts(const sn_pipeline_opts *o) {
    return o->precision == SN_PRECISION_BF16 || o->precision == SN_PRECISION_FP16;
}

/* Is the dump_after name a pass, and one that runs? */
static sn_status check_dump(const sn_pipeline_opts *o, sn_err *e) {
    const char *d = o->dump_after;
    bool known = false;
    for (int i = 0; i < N_PASSES; i++) known |= !strcmp(d, pass_names[i]);
    if (!known)
        return sn_fail(e, SN_ERR_INVALID, "unknown pass '%s' (passes: %s)", d, sn_pipeline_pass_names());
    if (!strcmp(d, "checkpoint") && !o->checkpoint)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after checkpoint, but no checkpoint policy is on "
                       "(add --checkpoint-policy block)");
    if (!strcmp(d, "schedule") && !o->schedule)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after schedule, but the schedule pass is off "
                       "(add --schedule)");
    if (!strcmp(d, "chunk_logits") && !o->chunk_logits)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after chunk_logits, but the chunk_logits pass is off "
                       "(add --chunk-logits N)");
    if (!strcmp(d, "fp8") && !o->fp8)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after fp8, but the fp8 pass is off (add --fp8 "
                       "head or linear)");
    if (!strcmp(d, "autodiff") && !o->backward)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after autodiff needs the backward (add --backward)");
    if (!strcmp(d, "attention") && !o->fuse_attention)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after attention, but the attention pass is off "
                       "(drop --no-fuse-attention)");
    if (!strcmp(d, "autocast") && !autocasts(o))
        return sn_fail(e, SN_ERR_INVALID, "--dump-after autocast, but the precision is %s (the "
                       "pass runs for bf16 and fp16)", sn_precision_name(o->precision));
    if (!strcmp(d, "nf4") && !o->nf4)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after nf4, but the nf4 pass is off (it runs "
                       "with --qlora)");
    if (!strcmp(d, "base16") && !(o->base16 && autocasts(o)) && !o->base16_fp32)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after base16, but the base16 pass is off (it "
                       "runs with --lora or --ia3 in bf16 or fp16, without --base-f32)");
    if (!strcmp(d, "pad_vocab") && !o->pad_vocab)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after pad_vocab, but the pad_vocab pass is off "
                       "(give --pad-vocab a multiple, not 0)");
    return SN_OK;
}

/* The checkpoint pass (recompute) with its statistics. */
static sn_status checkpoint(sn_graph *g, const sn_pipeline_opts *o, sn_pipeline_stats *st, sn_err *e) {
    sn_graph *next;
    sn_recompute_stats cs;
    sn_target t = o->target ? *o->target : sn_target_cpu();
    sn_status s = sn_pass_recompute(g, (sn_recompute_policy)o->checkpoint, o->checkpoint_budget, &t, &next,
                          &cs, e);
    st->checkpoint_min_arena = cs.min_arena;
    if (s) return s;
    replace(g, next);
    st->checkpoint_recomputed = cs.recomputed;
    st->checkpoint_extra_flops = cs.extra_flops;
    st->step_flops = cs.step_flops;
    return after(g, "checkpoint", o, e);
}

/* Whether a dequant_nf4 node of g has more than one reader. */
static bool shared_dequant(const sn_graph *g) {
    int *uses = calloc((size_t)g->n_nodes, sizeof *uses);
    bool shared = false;
    for (int i = 0; uses && i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            const sn_node *x = g->nodes[i]->in[j];
            if (x->op == SN_OP_DEQUANT_NF4 && (j == 0 || g->nodes[i]->in[j - 1] != x))
                shared |= ++uses[x->id] > 1;
        }
    free(uses);
    return shared || !uses; /* out of memory: the pass reports it */
}

/* NF4 weights unpacked right before each product that reads them: after autodiff (its products
 * read the forward's dequantize), before checkpoint (whose arena model must not see them live
 * from the forward to the backward). */
static sn_status nf4_per_reader(sn_graph *g, const sn_pipeline_opts *o, sn_pipeline_stats *st,
                                sn_err *e) {
    sn_graph *next;
    sn_status s = sn_pass_nf4_per_reader(g, &next, &st->nf4_dequants, e);
    if (s) return s;
    replace(g, next);
    return after(g, "nf4_per_reader", o, e);
}

/* The forward rewrites, then autodiff, lowrank_sum, nf4_per_reader, chunk_logits and
 * checkpoint (each only on a graph without a backward). */
static sn_status graph_passes(sn_graph *g, const sn_pipeline_opts *o, sn_pipeline_stats *st, sn_err *e) {
    sn_status s;
    if ((s = after(g, "frontend", o, e))) return s;

    sn_graph *next;
    if (o->pad_vocab) {
        if ((s = sn_pass_pad_vocab(g, o->pad_vocab, &next, &st->vocab_padded, e))) return s;
        replace(g, next);
        if ((s = after(g, "pad_vocab", o, e))) return s;
    }

    if (o->fuse_attention) {
        if ((s = sn_pass_attention(g, !o->keep_kv_repeats, &next, &st->attention_fused,
                                   &st->kv_unrepeated, e))) return s;
        replace(g, next);
        if ((s = after(g, "attention", o, e))) return s;
    }

    if (o->nf4) { /* before autocast, which makes the dequantized weights bf16 */
        if ((s = sn_pass_nf4(g, &next, &st->nf4_stored, e))) return s;
        replace(g, next);
        if ((s = after(g, "nf4", o, e))) return s;
    }

    if ((o->base16 && autocasts(o)) || (o->base16_fp32 && !autocasts(o))) {
        /* before autocast, whose casts then find it 16-bit; in an fp32 program each product
           reads it widened (a cast kernel right before it: the builders make a weight where
           its product reads it) */
        sn_dtype low = !autocasts(o) ? o->base16_fp32
                       : o->precision == SN_PRECISION_BF16 ? SN_BF16 : SN_F16;
        if ((s = sn_pass_base16(g, low, &next, &st->base16_stored, e))) return s;
        replace(g, next);
        if ((s = after(g, "base16", o, e))) return s;
    }

    if (o->target && o->target->fuse_siblings && o->backward) { /* a training step's (not
            generation's, whose batched decoding would copy the weights every token); after nf4
            and base16, which take frozen weights; before autocast, whose rules see each
            product's columns as a product */
        if ((s = sn_pass_siblings(g, &next, &st->siblings_fused, e))) return s;
        if (next) replace(g, next);
        if ((s = after(g, "siblings", o, e))) return s;
    }

    if (autocasts(o)) { /* before autodiff, so gradients come from the cast graph */
        if ((s = sn_pass_autocast(g, o->precision, &next, &st->casts, e))) return s;
        replace(g, next);
        if ((s = after(g, "autocast", o, e))) return s;
    }

    if (!o->backward) { /* inference: dropout is identity */
        int removed;
        if ((s = sn_pass_no_dropout(g, &next, &removed, e))) return s;
        if (next) replace(g, next);
        return SN_OK;
    }
    if (!g->loss) return sn_fail(e, SN_ERR_INVALID, "autodiff: the graph has no loss");
    if ((s = sn_backward(g, g->loss, e))) return s;
    if ((s = after(g, "autodiff", o, e))) return s;
    if (autocasts(o)) { /* a gradient's low-rank term rounded first (LoRA's dh' A^T) */
        if ((s = sn_pass_lowrank_sum(g, &next, &st->lowrank_rounded, e))) return s;
        if (next) replace(g, next);
        if ((s = after(g, "lowrank_sum", o, e))) return s;
    }
    /* unary ops of values the backward reads made again there (SwiGLU's silu), not kept */
    if ((s = sn_pass_remat(g, &next, &st->remade, e))) return s;
    if (next) replace(g, next);
    if ((s = after(g, "remat", o, e))) return s;
    if (shared_dequant(g) && (s = nf4_per_reader(g, o, st, e))) return s;
    if (o->chunk_logits) { /* before checkpoint, whose budget then plans the chunked arena */
        if ((s = sn_pass_chunk_logits(g, o->chunk_logits, &next, &st->logits_chunks, e))) return s;
        if (next) replace(g, next);
        if ((s = after(g, "chunk_logits", o, e))) return s;
    }
    if (o->fp8 && o->target && o->target->kind == SN_TARGET_CUDA && !o->target->mma_fp8)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "--fp8 %s: products on 8-bit operands need tensor "
                       "cores that multiply them (sm_89 and newer: RTX 40, L4, H100), and the "
                       "target is %s: train without --fp8",
                       sn_fp8_policy_name((sn_fp8_policy)o->fp8), o->target->name);
    if (o->fp8) { /* after chunk_logits, whose pattern is the head's bf16 product; before
                     checkpoint, whose arena model then sees the 8-bit copies; on the CPU
                     emulated (its GEMM widens them: no faster, the same numbers) */
        if ((s = sn_pass_fp8(g, (sn_fp8_policy)o->fp8, &next, &st->fp8_products, e))) return s;
        if (next) replace(g, next);
        if ((s = after(g, "fp8", o, e))) return s;
    }
    return o->checkpoint ? checkpoint(g, o, st, e) : SN_OK;
}

/* What both entries check first: the dump's pass name, the graph's recorded error. */
static sn_status check_entry(const sn_graph *g, const sn_pipeline_opts *o, sn_err *e) {
    sn_status s;
    if (o->dump_after && (s = check_dump(o, e))) return s;
    if (sn_graph_error(g))
        return sn_fail(e, g->err.code, "the model graph has an error: %s", sn_graph_error(g));
    return SN_OK;
}

sn_status sn_pipeline_graph(sn_graph *g, const sn_pipeline_opts *o, sn_pipeline_stats *st,
                            sn_err *e) {
    sn_pipeline_stats st0;
    if (!st) st = &st0;
    sn_status s = check_entry(g, o, e);
    if (s) return s;
    if (g->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "the graph passes run on a forward graph, but this one "
                       "has its backward already (sn_backward, or an earlier sn_pipeline_graph): "
                       "go on with sn_pipeline_kernels");
    st->attention_fused = st->kv_unrepeated = st->vocab_padded = st->casts = 0;
    st->checkpoint_recomputed = st->logits_chunks = 0;
    st->checkpoint_extra_flops = st->step_flops = 0;
    st->checkpoint_min_arena = 0;
    st->nf4_stored = st->nf4_dequants = st->base16_stored = st->lowrank_rounded = st->remade = 0;
    st->fp8_products = 0;
    return graph_passes(g, o, st, e);
}

sn_status sn_pipeline_kernels(sn_graph *g, const sn_pipeline_opts *o, sn_program **prog,
                              sn_pipeline_stats *st, sn_err *e) {
    sn_pipeline_stats st0;
    if (!st) st = &st0;
    if (prog) *prog = NULL;
    sn_status s = check_entry(g, o, e);
    if (s || (s = verify(g, "frontend", e))) return s;
    st->upcasts_split = st->views_sunk = st->schedule_moved = st->siblings_joined = 0;
    st->schedule_peak_before = st->schedule_peak_after = 0;
    sn_target target = o->target ? *o->target : sn_target_cpu();
    if (target.kind == SN_TARGET_CUDA && sn_target_att_dq_atomic_asked()) target.att_dq_atomic = true;
    if (target.kind == SN_TARGET_CUDA && sn_target_accum_plain_asked()) target.accum_plain = true;
    if (target.kind == SN_TARGET_CUDA && sn_target_accum_dgelu_asked()) target.dgelu_accum_unfused = false;
    if (target.kind == SN_TARGET_CUDA && sn_target_decode_split_off()) target.split_decode = false;
    if (target.kind == SN_TARGET_CUDA && sn_target_att_parts_off()) target.att_dkv_parts = false;
    if (sn_target_gemv_nf4_only_asked()) target.gemv_nf4_only = true;
    const sn_target *t = &target;

    sn_graph *next;
    if (shared_dequant(g) && (s = nf4_per_reader(g, o, st, e))) return s; /* differentiated by
                                                                             its author */
    /* views of pointwise values read through by one pointwise kernel */
    if ((s = sn_pass_sink_views(g, &next, &st->views_sunk, e))) return s;
    if (next) replace(g, next);
    if ((s = after(g, "sink_views", o, e))) return s;
    /* 16-bit values widened by each pointwise reader, not stored in f32 */
    if ((s = sn_pass_upcast(g, &next, &st->upcasts_split, e))) return s;
    if (next) replace(g, next);
    if ((s = after(g, "upcast", o, e)) || !prog) return s;

    sn_program *p;
    if ((s = sn_fuse(g, t, !o->weight_casts_per_step, &p, e))) return s;
    s = after_program(p, "fuse", o, e);

    if (!s && o->schedule) {
        sn_schedule_stats ss;
        if (!(s = sn_schedule(p, (sn_schedule_mode)o->schedule, &ss, e))) {
            st->schedule_peak_before = ss.peak_before;
            st->schedule_peak_after = ss.peak_after;
            st->schedule_moved = ss.moved;
            s = after_program(p, "schedule", o, e);
        }
    }

    if (!s && !o->keep_siblings && !(s = sn_join_siblings(p, &st->siblings_joined, e))) /* pointwise neighbours */
        s = after_program(p, "join_siblings", o, e);
    if (!s && t->join_finish && !(s = sn_join_finish(p, e))) /* a FINISH in the next pair's launch */
        s = after_program(p, "join_finish", o, e);
    if (!s && !(s = sn_memplan(p, t, (sn_param_order)o->param_order, e)))
        s = after_program(p, "memplan", o, e);
    if (s) {
        sn_program_free(p);
        return s;
    }
    *prog = p;
    return SN_OK;
}

sn_status sn_compile(sn_graph *g, const sn_pipeline_opts *o, sn_program **prog,
                     sn_pipeline_stats *stats, sn_err *e) {
    sn_pipeline_stats st0;
    if (!stats) stats = &st0;
    *stats = (sn_pipeline_stats){0};
    if (prog) *prog = NULL;
    sn_status s = sn_pipeline_graph(g, o, stats, e);
    return s ? s : sn_pipeline_kernels(g, o, prog, stats, e);
}
