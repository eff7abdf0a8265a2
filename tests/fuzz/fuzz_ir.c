/* fuzz_ir.c: libFuzzer harness for the IR text parser (sn_graph_parse). Any bytes are parsed;
 * a graph that parses must print, parse again and print the same text (print-parse-print), and
 * must verify; anything refused must come with a message. */
#include <string.h>

#include "ir/ir.h"
#include "fuzz_util.h"

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
