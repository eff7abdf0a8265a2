/* pipeline.h: the compile entries, straight-line from a model's forward graph to the program a
 * device runs: the graph passes (forward rewrites, autodiff, checkpoint), then the kernel passes
 * (upcast, fuse, schedule, memplan), with the verifier after every graph pass and a dump after
 * any named pass. sn_compile runs both; the trainer, given a differentiated graph, the second.
 *
 *     sn_pipeline_opts o = sn_pipeline_defaults();   // attention fused, vocabulary padded
 *     o.backward = true;                             // append d loss / d params
 *     sn_program *p;
 *     if (sn_compile(g, &o, &p, NULL, &e)) ...       // g is now the final graph; p its program
 */
#ifndef SN_PIPELINE_H
#define SN_PIPELINE_H

#include "ir/ir.h"
#include "program/program.h"
#include "program/target.h"

/* Zeroed options run no rewrite (only the verifier, fuse and memplan) for the host CPU;
 * sn_pipeline_defaults turns the forward rewrites on. */
typedef struct {
    const sn_target *target; /* what the program is for (NULL: the host CPU, sn_target_cpu) */
    bool fuse_attention;     /* the attention pass: written-out attention -> fused ops */
    bool keep_kv_repeats;    /* the attention pass keeps k and v repeated for grouped-query
                                attention as the model wrote them (default off: the fused ops
                                read them unrepeated; on: for comparison) */
    int64_t pad_vocab;       /* the pad_vocab pass's multiple (0: off; SN_PAD_VOCAB_POW2: the
                                next power of two) */
    bool nf4;                /* the nf4 pass: frozen linear weights stored as NF4 (QLoRA) */
    bool base16;             /* the base16 pass (bf16/fp16 only): frozen linear weights stored
                                in the compute dtype, no f32 copy (LoRA's and IA3's base) */
    sn_dtype base16_fp32;    /* SN_BF16 or SN_F16: the base16 pass in an fp32 program too, the
                                base stored in that dtype and each product reading it widened
                                (the KV generator over a 16-bit trainer's base); 0: off */
    sn_precision precision;  /* bf16/fp16: the autocast pass (mixed precision); fp32 (0, the
                                default) and tf32: none */
    bool backward;           /* append the backward of g->loss (autodiff) */
    int checkpoint;          /* an sn_recompute_policy (passes.h) applied right after autodiff (so
                                with the call that differentiates); 0: none */
    int64_t checkpoint_budget; /* arena bytes for the budget policy */
    int64_t chunk_logits;    /* the chunk_logits pass after autodiff: the LM head and its
                                loss in chunks of this many rows (0: off; SN_CHUNK_LOGITS_AUTO:
                                the pass's choice, passes.h) */
    int fp8;                 /* an sn_fp8_policy (passes.h): the fp8 pass after autodiff and
                                chunk_logits, selected products on 8-bit operands (0: off) */
    bool keep_siblings;      /* no join_siblings pass: the pointwise kernels as fuse made them
                                (tests of the fuse pass) */
    int schedule;            /* an sn_schedule_mode: the schedule pass, kernels reordered so
                                that large values die earlier (off by default: it saves nothing
                                on GPT-2, docs/memory.md) */
    bool weight_casts_per_step; /* fuse: the parameters' 16-bit casts run as kernels of every
                                   step instead of as weight shadows written with the weights
                                   (program.h); off by default, on for comparison */
    int param_order;         /* an sn_param_order (program.h): how memplan orders the trained
                                parameters (0: graph order; reversed for the tests: readers
                                find them through the program's parameter layout) */
    const char *dump_after;  /* a pass name from sn_pipeline_pass_names(), or NULL */
    FILE *dump;              /* where the dump goes (stdout if NULL) */
} sn_pipeline_opts;

/* What the passes did. */
typedef struct {
    int attention_fused; /* attention blocks the attention pass replaced */
    int kv_unrepeated;   /* of those, how many read k and v unrepeated (grouped-query) */
    int vocab_padded;    /* tables the pad_vocab pass padded */
    int checkpoint_recomputed; /* forward nodes the checkpoint pass recomputes */
    int logits_chunks;   /* chunks the chunk_logits pass split the head into (0: none) */
    double checkpoint_extra_flops, step_flops; /* its extra FLOPs, the step's without them */
    int64_t checkpoint_min_arena; /* budget policy: the smallest arena it found (also on failure) */
    int nf4_stored;      /* weights the nf4 pass stored as NF4 */
    int base16_stored;   /* weights the base16 pass stored in 16 bits */
    int nf4_dequants;    /* dequantizes nf4_per_reader made, one per product reading a weight */
    int casts;           /* cast nodes the autocast pass added */
    int lowrank_rounded; /* gradient sums lowrank_sum rounds in a chain of GEMMs */
    int remade;          /* forward values the remat pass makes again for the backward */
    int fp8_products;    /* products the fp8 pass made 8-bit */
    int upcasts_split;   /* f32 casts of 16-bit values the upcast pass made one per reader */
    int views_sunk;      /* pointwise ops the sink_views pass made again over views */
    int64_t schedule_peak_before, schedule_peak_after; /* live arena bytes at most (no packing) */
    int siblings_fused;  /* products the siblings pass made one with others of the same x */
    int siblings_joined; /* pointwise kernels the join_siblings pass joined to the one before */
    int schedule_moved;  /* kernels the schedule pass moved */
} sn_pipeline_stats;

/* Forward rewrites on: attention fused, vocabulary padded to a multiple of 64; no backward. */
sn_pipeline_opts sn_pipeline_defaults(void);

/* The pass names, in pipeline order, comma-separated. */
const char *sn_pipeline_pass_names(void);

/* The two entries, each a straight line of passes (a caller runs both, or the second alone on
 * a graph it differentiated itself). A forward rewrite replaces g's contents in place: nodes of
 * the old graph held by the caller are gone (find inputs by name, the loss as g->loss, outputs
 * in g->outputs, which keep their order). An unknown dump_after name, or one of a pass that is
 * off, is SN_ERR_INVALID and names the passes (a pass of the other entry dumps nothing here); a
 * pass that leaves a graph the verifier rejects is reported with its name. stats may be NULL;
 * each entry sets the fields of its own passes. On failure g is still a graph the caller frees.
 *
 * The graph passes: pad_vocab, attention, nf4, base16, autocast, no_dropout (without o->backward:
 * inference), autodiff (o->backward), nf4_per_reader
 * (a dequantize of two readers), chunk_logits, fp8, checkpoint.
 * requires: a forward graph (no backward yet: the forward rewrites must come before autodiff,
 * so that gradients come from the rewritten ops); a graph with a backward is SN_ERR_INVALID. */
sn_status sn_pipeline_graph(sn_graph *g, const sn_pipeline_opts *o, sn_pipeline_stats *stats,
                            sn_err *e);

/* The kernel passes for o->target: nf4_per_reader (when a dequantize has two readers: a graph
 * its author differentiated), sink_views,
 * upcast, then (prog not NULL) fuse, schedule, memplan; *prog
 * gets the fused, planned program (g must outlive it). prog NULL: upcast only, the graph the
 * reference interpreter runs. Of o it reads target, weight_casts_per_step, schedule,
 * param_order and the dump; the graph passes' options are not its business. A program larger
 * than the target's memory is SN_ERR_OOM.
 * requires: a verified graph, after sn_pipeline_graph or differentiated by its author (the
 * trainer compiles the graph its caller differentiated this way). */
sn_status sn_pipeline_kernels(sn_graph *g, const sn_pipeline_opts *o, sn_program **prog,
                              sn_pipeline_stats *stats, sn_err *e);

/* A forward graph to its program: sn_pipeline_graph, then sn_pipeline_kernels (prog NULL: the
 * graph passes and upcast). */
sn_status sn_compile(sn_graph *g, const sn_pipeline_opts *o, sn_program **prog,
                     sn_pipeline_stats *stats, sn_err *e);

#endif
