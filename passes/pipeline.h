/* pipeline.h: the compile pipeline, straight-line from the model's forward graph to what a
 * runtime executes, with the verifier between passes and an IR dump after any named pass. */
#ifndef SN_PIPELINE_H
#define SN_PIPELINE_H

#include "../ir/ir.h"

typedef struct {
    bool backward;          /* append the backward of g->loss (autodiff) */
    const char *dump_after; /* a pass name from sn_pipeline_pass_names(), or NULL */
    FILE *dump;             /* where the dump goes (stdout if NULL) */
} sn_pipeline_opts;

/* The pass names, in pipeline order, comma-separated. */
const char *sn_pipeline_pass_names(void);

/* Runs the passes over g in place. An unknown dump_after name is SN_ERR_INVALID and names the
 * known passes; a pass that leaves a graph the verifier rejects is reported with its name. */
sn_status sn_pipeline_run(sn_graph *g, const sn_pipeline_opts *o, sn_err *e);

#endif
