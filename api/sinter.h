/* sinter.h: the installed library's one header (`#include <sinter.h>`, `pkg-config --cflags
 * --libs sinter`): the graph API a model is written against (frontend/sinter.h, with the graph
 * and its nodes as opaque handles, base/graph.h) and the training session that trains it
 * (session.h). Nothing else is installed: the IR, the passes and the devices stay inside.
 *
 * A model is a C function that builds its forward graph; sinter differentiates it, fuses and
 * compiles it for the device (a CUDA GPU, or the CPU through LLVM) and trains it with AdamW.
 * This program trains a one-layer byte-level model on a text file and prints a sample:
 *
 *     #include <stdio.h>
 *     #include <stdlib.h>
 *     #include <sinter.h>
 *
 *     // the next byte from the current one: an embedding, silu, a projection
 *     static sn_status build(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
 *         sn_node *idx = sn_input_tokens(g, "idx", SN_SHAPE(B, T));
 *         sn_node *tgt = sn_input_targets(g, "targets", SN_SHAPE(B, T));
 *         sn_node *wte = sn_param(g, "wte", SN_F32, SN_SHAPE(V, 64), SN_INIT_NORMAL, 0.02f);
 *         sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(64, V), SN_INIT_NORMAL, 0.02f);
 *         sn_node *h = sn_silu(g, sn_embedding(g, wte, idx));          // (B, T, 64)
 *         sn_node *logits = sn_matmul(g, h, w);                          // (B, T, V)
 *         sn_graph_set_logits(g, logits);                               // what sampling reads
 *         sn_graph_set_loss(g, sn_cross_entropy(g, logits, tgt, -1));
 *         return sn_graph_error(g) ? sn_fail(e, sn_graph_status(g), "%s", sn_graph_error(g)) : SN_OK;
 *     }
 *
 *     int main(int argc, char **argv) {
 *         sn_model m = {.name = "bigram", .ctx = 64, .build = build};
 *         sn_session_opts o = sn_session_defaults();       // device auto, lr 3e-3, B 16
 *         o.data = argc > 1 ? argv[1] : "/usr/share/games/fortunes";
 *         o.steps = 200;
 *         sn_session *s;
 *         sn_session_step_stats st;
 *         sn_err e;
 *         if (sn_session_new(&m, &o, &s, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
 *         for (int i = 0; i < o.steps; i++)
 *             if (sn_session_step(s, &st, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
 *         double val;
 *         char *text;
 *         size_t len;
 *         sn_session_sample_opts so = {.n_new = 100, .temperature = 0.8f, .top_k = 40};
 *         if (sn_session_validate(s, &val, &e) || sn_session_save(s, "bigram.ckpt", &e) ||
 *             sn_session_sample(s, &so, &text, &len, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
 *         printf("loss %.3f, val %.3f\n%s\n", st.loss, val, text);
 *         free(text);
 *         sn_session_free(s);
 *     }
 *
 * Convention: every call that can fail returns an sn_status and fills an sn_err whose message
 * says what was wrong and what to do; the library never exits. Shape mistakes in a model are
 * recorded in the graph at the call that made them (sn_graph_error). */
#ifndef SINTER_PUBLIC_H
#define SINTER_PUBLIC_H

#define SINTER_VERSION_MAJOR 0
#define SINTER_VERSION_MINOR 1
#define SINTER_VERSION_PATCH 0
#define SINTER_VERSION "0.1.0" /* the three above; the shared library's soname is libsinter.so.MAJOR */

#include "frontend/sinter.h"
#include "frontend/lora.h"
#include "frontend/ia3.h"
#include "session.h"

/* The version of the library linked at run time ("0.1.0"), to compare with SINTER_VERSION. */
const char *sn_version(void);

#endif
