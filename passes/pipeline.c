/* pipeline.c: the passes in the order they run. Read top to bottom: each step is one pass,
 * followed by the verifier and, if asked for, a dump of the IR. */
#include "pipeline.h"

#include <string.h>

#include "frontend/sinter.h"
#include "passes.h"
#include "program/program.h"

static const char *const pass_names[] = {"frontend", "pad_vocab", "attention", "autodiff", "fuse", "memplan"};
enum { N_PASSES = sizeof pass_names / sizeof pass_names[0] };

const char *sn_pipeline_pass_names(void) {
    return "frontend, pad_vocab, attention, autodiff, fuse, memplan";
}

sn_pipeline_opts sn_pipeline_defaults(void) {
    return (sn_pipeline_opts){.fuse_attention = true, .pad_vocab = 64};
}

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

/* Puts a pass's result in place of *g. */
static void replace(sn_graph **g, sn_graph *next) {
    sn_graph_free(*g);
    *g = next;
}

/* Is the dump_after name a pass, and one that runs? */
static sn_status check_dump(const sn_pipeline_opts *o, sn_err *e) {
    const char *d = o->dump_after;
    bool known = false;
    for (int i = 0; i < N_PASSES; i++) known |= !strcmp(d, pass_names[i]);
    if (!known)
        return sn_fail(e, SN_ERR_INVALID, "unknown pass '%s' (passes: %s)", d, sn_pipeline_pass_names());
    if ((!strcmp(d, "autodiff") || !strcmp(d, "fuse") || !strcmp(d, "memplan")) && !o->backward)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after %s needs the backward (add --backward)", d);
    if (!strcmp(d, "attention") && !o->fuse_attention)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after attention, but the attention pass is off "
                       "(drop --no-fuse-attention)");
    if (!strcmp(d, "pad_vocab") && !o->pad_vocab)
        return sn_fail(e, SN_ERR_INVALID, "--dump-after pad_vocab, but the pad_vocab pass is off "
                       "(give --pad-vocab a multiple, not 0)");
    return SN_OK;
}

sn_status sn_pipeline_run(sn_graph **g, const sn_pipeline_opts *o, sn_pipeline_stats *stats,
                          sn_err *e) {
    sn_pipeline_stats st0;
    if (!stats) stats = &st0;
    *stats = (sn_pipeline_stats){0};
    sn_status s;
    if (o->dump_after && (s = check_dump(o, e))) return s;
    if (sn_graph_error(*g))
        return sn_fail(e, (*g)->err.code, "the model graph has an error: %s", sn_graph_error(*g));
    if ((s = after(*g, "frontend", o, e))) return s;

    sn_graph *next;
    if (o->pad_vocab) {
        if ((s = sn_pass_pad_vocab(*g, o->pad_vocab, &next, &stats->vocab_padded, e))) return s;
        replace(g, next);
        if ((s = after(*g, "pad_vocab", o, e))) return s;
    }

    if (o->fuse_attention) {
        if ((s = sn_pass_attention(*g, &next, &stats->attention_fused, e))) return s;
        replace(g, next);
        if ((s = after(*g, "attention", o, e))) return s;
    }

    if (!o->backward) return SN_OK;
    if (!(*g)->loss) return sn_fail(e, SN_ERR_INVALID, "autodiff: the graph has no loss");
    if ((s = sn_backward(*g, (*g)->loss, e))) return s;
    return after(*g, "autodiff", o, e);
}

/* Dumps the program after `pass` if that pass was asked for. */
static void after_program(const sn_program *p, const char *pass, const sn_pipeline_opts *o) {
    if (!o->dump_after || strcmp(o->dump_after, pass)) return;
    FILE *f = o->dump ? o->dump : stdout;
    fprintf(f, "# after pass %s\n", pass);
    sn_program_print(p, f);
}

sn_status sn_pipeline_compile(const sn_graph *g, const sn_pipeline_opts *o, sn_program **out,
                              sn_err *e) {
    *out = NULL;
    sn_program *p;
    sn_status s = sn_fuse(g, &p, e);
    if (s) return s;
    after_program(p, "fuse", o);
    if ((s = sn_memplan(p, e))) {
        sn_program_free(p);
        return s;
    }
    after_program(p, "memplan", o);
    *out = p;
    return SN_OK;
}
