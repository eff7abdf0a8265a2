/* pad_vocab.c: the pad_vocab pass: a tied embedding / LM-head table (V, C) grows to (Vp, C),
 * Vp a size GEMMs and kernels like, and the loss counts only the first V classes (passes.h).
 * Convention: the padded graph computes what the unpadded one does; padding is never a class. */
#include <stdlib.h>

#include "ir/rewrite.h"
#include "passes.h"

int64_t sn_pad_vocab_size(int64_t V, int64_t multiple) {
    if (multiple == SN_PAD_VOCAB_POW2) {
        int64_t p = 1;
        while (p < V) p *= 2;
        return p;
    }
    SN_ASSERT(multiple > 0);
    return (V + multiple - 1) / multiple * multiple;
}

/* What each node is to the pass. */
enum { NONE, TABLE, HEAD, LOSS }; /* padded param, its logits matmul, their cross-entropy */

/* Marks the tables to pad, their heads and losses in role[]; returns how many tables, or -1
 * (SN_ERR_OOM in e) when out of memory. */
static int find(const sn_graph *g, int64_t multiple, unsigned char *role, sn_err *e) {
    int nn = g->n_nodes, *uses = sn_graph_use_counts(g, e);
    size_t cnt = (size_t)nn + 1;
    const char *what = "the pad_vocab pass's per-node tables";
    int *readers = sn_calloc(cnt, sizeof *readers, what, e), *as_logits = sn_calloc(cnt, sizeof *as_logits, what, e);
    bool *bad = sn_calloc(cnt, sizeof *bad, what, e), *head_of = sn_calloc(cnt, sizeof *head_of, what, e);
    int count = 0;
    if (!uses || !readers || !as_logits || !bad || !head_of) {
        nn = 0;
        count = -1;
    }
    for (int i = 0; i < nn; i++) { /* who reads what, and how */
        const sn_node *n = g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            readers[n->in[k]->id]++;
            if (n->op == SN_OP_CROSS_ENTROPY && k == 0 && n->a.end == 0) as_logits[n->in[k]->id]++;
        }
    }
    for (int i = 0; i < nn; i++) { /* tables: read only by embeddings and logits heads */
        const sn_node *n = g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            const sn_node *w = n->in[k];
            if (w->op != SN_OP_PARAM || w->rank != 2) continue;
            bool head = n->op == SN_OP_MATMUL && k == 1 && !n->a.ta && n->a.tb && n->in[0] != w;
            bool logits_only = readers[i] > 0 && readers[i] == as_logits[i];
            if (head && logits_only) head_of[w->id] = true;
            else if (!(n->op == SN_OP_EMBEDDING && k == 0)) bad[w->id] = true;
        }
    }
    for (int i = 0; i < nn; i++) {
        const sn_node *w = g->nodes[i];
        bool pad = head_of[i] && !bad[i] && uses[i] == readers[i] && /* not an output */
                   sn_pad_vocab_size(w->shape[0], multiple) != w->shape[0];
        if (!pad) continue;
        role[i] = TABLE;
        count++;
        for (int j = i + 1; j < nn; j++) {
            const sn_node *n = g->nodes[j];
            if (n->op == SN_OP_MATMUL && n->in[1] == w) role[j] = HEAD;
            if (n->op == SN_OP_CROSS_ENTROPY && role[n->in[0]->id] == HEAD) role[j] = LOSS;
        }
    }
    free(uses);
    free(readers);
    free(as_logits);
    free(bad);
    free(head_of);
    return count;
}

sn_status sn_pass_pad_vocab(const sn_graph *in, int64_t multiple, sn_graph **out, int *n_padded,
                            sn_err *e) {
    *out = NULL;
    *n_padded = 0;
    if (multiple <= 0 && multiple != SN_PAD_VOCAB_POW2)
        return sn_fail(e, SN_ERR_INVALID, "pad_vocab: multiple %lld: use a positive multiple or "
                       "SN_PAD_VOCAB_POW2 (to turn padding off, do not run the pass)",
                       (long long)multiple);
    sn_status st = sn_verify(in, e);
    if (st) return st;
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "pad_vocab: the graph already has a backward part; run "
                       "the pass before autodiff");
    unsigned char *role = sn_calloc((size_t)in->n_nodes + 1, 1, "the pad_vocab pass's roles", e);
    sn_rewrite r;
    if (!role || (*n_padded = find(in, multiple, role, e)) < 0 || (st = sn_rewrite_begin(&r, in, e))) {
        *n_padded = 0;
        free(role);
        return SN_ERR_OOM;
    }
    for (int i = 0; i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&r, n, ins);
        if (role[i] == TABLE) p.shape[0] = sn_pad_vocab_size(n->shape[0], multiple);
        if (role[i] == LOSS) p.a.end = n->in[0]->shape[n->in[0]->rank - 1]; /* the real V */
        sn_rewrite_emit(&r, n, &p); /* a HEAD's shape follows its padded table */
    }
    free(role);
    return sn_rewrite_end(&r, "pad_vocab", out, e);
}
