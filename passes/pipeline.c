/* pipeline.c: the passes in the order they run. Read top to bottom: each step is one pass,
 * followed by the verifier and, if asked for, a dump of the IR. */
#include "pipeline.h"

#include <string.h>

#include "../frontend/sinter.h"

static const char *const pass_names[] = {"frontend", "autodiff"};
enum { N_PASSES = sizeof pass_names / sizeof pass_names[0] };

const char *sn_pipeline_pass_names(void) { return "frontend, autodiff"; }

/* Verifies g after `pass` and dumps it if that pass was asked for. */
static sn_status after(sn_graph *g, const char *pass, const sn_pipeline_opts *o, sn_err *e) {
    sn_err ve;
    if (sn_verify(g, &ve) != SN_OK)
        return sn_fail(e, ve.code, "after pass %s: the graph does not verify: %s", pass, ve.msg);
    if (o->dump_after && !strcmp(o->dump_after, pass)) {
        FILE *f = o->dump ? o->dump : stdout;
        fprintf(f, "# after pass %s\n", pass);
        sn_graph_print(g, f);
    }
    return SN_OK;
}

sn_status sn_pipeline_run(sn_graph *g, const sn_pipeline_opts *o, sn_err *e) {
    if (o->dump_after) {
        bool known = false;
        for (int i = 0; i < N_PASSES; i++) known |= !strcmp(o->dump_after, pass_names[i]);
        if (!known)
            return sn_fail(e, SN_ERR_INVALID, "unknown pass '%s' (passes: %s)", o->dump_after,
                           sn_pipeline_pass_names());
        if (!strcmp(o->dump_after, "autodiff") && !o->backward)
            return sn_fail(e, SN_ERR_INVALID, "--dump-after autodiff needs the backward "
                           "(add --backward)");
    }
    if (sn_graph_error(g))
        return sn_fail(e, g->err.code, "the model graph has an error: %s", sn_graph_error(g));
    sn_status s = after(g, "frontend", o, e);
    if (s || !o->backward) return s;

    if (!g->loss) return sn_fail(e, SN_ERR_INVALID, "autodiff: the graph has no loss");
    if ((s = sn_backward(g, g->loss, e))) return s;
    return after(g, "autodiff", o, e);
}
