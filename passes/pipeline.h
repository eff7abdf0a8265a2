/* pipeline.h: the one compile entry, straight-line from a model's forward graph to the program a
 * device runs: forward rewrites, autodiff, fuse, memplan, with the verifier after every graph
 * pass and a dump after any named pass. The CLI, the trainer, the sampler, the bench and the
 * tests all compile through sn_compile.
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
    sn_precision precision;  /* bf16/fp16: the autocast pass (mixed precision); fp32 (0, the
                                default) and tf32: none */
    bool backward;           /* append the backward of g->loss (autodiff) */
    int checkpoint;          /* an sn_recompute_policy (passes.h) applied right after autodiff (so
                                with the call that differentiates); 0: none */
    int64_t checkpoint_budget; /* arena bytes for the budget policy */
    int schedule;            /* an sn_schedule_mode: the schedule pass, kernels reordered so
                                that large values die earlier (off by default: it saves nothing
                                on GPT-2, docs/memory.md) */
    bool weight_casts_per_step; /* fuse: the parameters' 16-bit casts run as kernels of every
                                   step instead of as weight shadows written with the weights
                                   (program.h); off by default, on for comparison */
    const char *dump_after;  /* a pass name from sn_pipeline_pass_names(), or NULL */
    FILE *dump;              /* where the dump goes (stdout if NULL) */
} sn_pipeline_opts;

/* What the passes did. */
typedef struct {
    int attention_fused; /* attention blocks the attention pass replaced */
    int kv_unrepeated;   /* of those, how many read k and v unrepeated (grouped-query) */
    int vocab_padded;    /* tables the pad_vocab pass padded */
    int checkpoint_recomputed; /* forward nodes the checkpoint pass recomputes */
    double checkpoint_extra_flops, step_flops; /* its extra FLOPs, the step's without them */
    int64_t checkpoint_min_arena; /* budget policy: the smallest arena it found (also on failure) */
    int casts;           /* cast nodes the autocast pass added */
    int upcasts_split;   /* f32 casts of 16-bit values the upcast pass made one per reader */
    int64_t schedule_peak_before, schedule_peak_after; /* live arena bytes at most (no packing) */
    int schedule_moved;  /* kernels the schedule pass moved */
} sn_pipeline_stats;

/* Forward rewrites on: attention fused, vocabulary padded to a multiple of 64; no backward. */
sn_pipeline_opts sn_pipeline_defaults(void);

/* The pass names, in pipeline order, comma-separated. */
const char *sn_pipeline_pass_names(void);

/* Compiles g for o->target. The graph passes (pad_vocab, attention, autocast, autodiff) run on a graph
 * without a backward only (their precondition); a graph that already has one (its author called
 * sn_backward, or an earlier sn_compile with prog NULL ran autodiff) goes straight to fuse, so
 * the trainer compiles the graph its caller differentiated, with the caller's options, through
 * this same call. A forward rewrite replaces g's contents in place: nodes of the old graph held
 * by the caller are gone (find inputs by name, the loss as g->loss, outputs in g->outputs,
 * which keep their order). prog NULL: stop after the graph passes (the reference interpreter
 * runs the graph itself); otherwise *prog gets the fused, planned program (g must outlive it).
 * An unknown dump_after name, or one of a pass that is off, is SN_ERR_INVALID and names the
 * passes; a pass that leaves a graph the verifier rejects is reported with its name; a program
 * larger than the target's memory is SN_ERR_OOM. stats may be NULL. On failure g is still a
 * graph the caller frees. */
sn_status sn_compile(sn_graph *g, const sn_pipeline_opts *o, sn_program **prog,
                     sn_pipeline_stats *stats, sn_err *e);

#endif
