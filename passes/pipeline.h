/* pipeline.h: the compile pipeline, straight-line from the model's forward graph to what a
 * runtime executes, with the verifier between passes and an IR dump after any named pass. */
#ifndef SN_PIPELINE_H
#define SN_PIPELINE_H

#include "ir/ir.h"

/* Zeroed options run the plain pipeline (verify, and autodiff if asked); sn_pipeline_defaults
 * turns the forward rewrites on. */
typedef struct {
    bool backward;          /* append the backward of g->loss (autodiff) */
    bool fuse_attention;    /* the attention pass: written-out attention -> fused ops */
    int64_t pad_vocab;      /* the pad_vocab pass's multiple (0: off; SN_PAD_VOCAB_POW2: the next
                               power of two) */
    const char *dump_after; /* a pass name from sn_pipeline_pass_names(), or NULL */
    FILE *dump;             /* where the dump goes (stdout if NULL) */
} sn_pipeline_opts;

/* What the passes did. */
typedef struct {
    int attention_fused; /* attention blocks the attention pass replaced */
    int vocab_padded;    /* tables the pad_vocab pass padded */
} sn_pipeline_stats;

/* Forward rewrites on: attention fused, vocabulary padded to a multiple of 64; no backward. */
sn_pipeline_opts sn_pipeline_defaults(void);

/* The pass names, in pipeline order, comma-separated. */
const char *sn_pipeline_pass_names(void);

/* Runs the passes over *g. A pass that rewrites the graph replaces *g with its result (the old
 * graph is freed: nodes of it held by the caller are gone; find inputs by name, the loss as
 * g->loss, outputs in g->outputs, which keep their order). On failure *g is still a graph the
 * caller frees. An unknown dump_after name, or one of a pass that is off, is SN_ERR_INVALID and
 * names the passes; a pass that leaves a graph the verifier rejects is reported with its name.
 * stats may be NULL. */
sn_status sn_pipeline_run(sn_graph **g, const sn_pipeline_opts *o, sn_pipeline_stats *stats,
                          sn_err *e);

/* The passes after the graph is final: fuse (kernels) and memplan (arena offsets), dumping the
 * program after either if o->dump_after names it. g must outlive the program. */
struct sn_program;
sn_status sn_pipeline_compile(const sn_graph *g, const sn_pipeline_opts *o, struct sn_program **out,
                              sn_err *e);

#endif
