/* fuzz_ir.c: libFuzzer harness for the IR text parser (sn_graph_parse). Any bytes are parsed;
 * a graph that parses must print, parse again and print the same text (print-parse-print), and
 * must verify; anything refused must come with a message. A small graph that parses is then run
 * on the reference interpreter (ASan sees any read past a buffer that a shape rule let through:
 * issue 19's pad); a refusal must come with a message. */
#include <string.h>

#include "interp/interp.h"
#include "ir/ir.h"
#include "fuzz_util.h"

/* The interpreter's work bound: no node above FUZZ_MAX_NUMEL elements, and the sum over nodes of
 * (output elements x input elements), an upper bound on what any op reads, under FUZZ_MAX_WORK:
 * a few milliseconds an input. */
enum { FUZZ_MAX_NODES = 256, FUZZ_MAX_NUMEL = 4096 };
#define FUZZ_MAX_WORK 4e6

static bool small_enough(const sn_graph *g) {
    if (g->n_nodes > FUZZ_MAX_NODES) return false;
    double work = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        double read = 1;
        if (sn_numel(n) > FUZZ_MAX_NUMEL) return false;
        for (int k = 0; k < n->n_in; k++) read += (double)sn_numel(n->in[k]);
        work += (double)sn_numel(n) * read;
    }
    return work <= FUZZ_MAX_WORK;
}

/* Inputs and parameters set (floats to a few small values, integers to 0: a valid id and
 * target for any table), then one run. */
static void run_interpreter(const sn_graph *g) {
    sn_interp *it = sn_interp_new(g, false);
    if (!it) return; /* out of memory */
    static double v[FUZZ_MAX_NUMEL];
    sn_err e = {0};
    sn_status s = SN_OK;
    for (int i = 0; i < g->n_nodes && !s; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
        for (int64_t k = 0; k < sn_numel(n); k++) v[k] = n->dtype == SN_I32 ? 0 : 0.25 * (double)(k % 5) - 0.5;
        s = sn_interp_set_f64(it, n, v, &e);
    }
    if (!s) s = sn_interp_run(it, &e);
    FUZZ_CHECK(!s || e.msg[0], "the interpreter failed (status %d) with no message", s);
    sn_interp_free(it);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0; /* the parser reads a C string: an embedded NUL ends it */
    sn_graph *g = NULL;
    sn_err e = {0};
    sn_status s = sn_graph_parse(text, &g, &e);
    free(text);
    if (s) {
        FUZZ_CHECK(!g && e.msg[0], "status %d, graph %p, message '%s'", s, (void *)g, e.msg);
        return 0;
    }
    FUZZ_CHECK(sn_verify(g, &e) == SN_OK, "a parsed graph does not verify: %s", e.msg);
    if (small_enough(g)) run_interpreter(g);
    char *once = sn_graph_to_string(g);
    sn_graph_free(g);
    if (!once) return 0; /* out of memory */
    sn_graph *g2 = NULL;
    s = sn_graph_parse(once, &g2, &e);
    FUZZ_CHECK(s == SN_OK, "the printed graph does not parse: %s\n%s", e.msg, once);
    char *twice = sn_graph_to_string(g2);
    sn_graph_free(g2);
    if (twice) FUZZ_CHECK(!strcmp(once, twice), "print-parse-print differs:\n%s\n----\n%s", once, twice);
    free(once);
    free(twice);
    return 0;
}
