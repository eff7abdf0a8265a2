/* nf4.c: the nf4 pass (QLoRA's storage): a frozen linear weight becomes NF4 storage (a u8
 * parameter of the same name, ir/nf4.h's packed bytes) and a dequant_nf4 node that its products
 * read. Convention: only weights every reader multiplies as the right operand of a matmul
 * (x @ W, a linear layer) are stored so; embeddings, norms, biases, a table tied to the LM head
 * and an untied LM head (the product that makes g->logits: lm_head below) keep their dtype, as
 * QLoRA keeps them in 16 bits. After autodiff, each reader of a
 * dequantized weight gets a dequantize of its own right before it (sn_pass_nf4_per_reader), so
 * the unpacked weights live from their dequantize to their product: one scratch at a time, not a
 * 16-bit copy of every layer held from the forward to the backward. */
#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

bool sn_linear_weight(const sn_graph *g, const sn_node *p) {
    if (p->op != SN_OP_PARAM || !p->a.frozen || !sn_dtype_is_float(p->dtype) || p->rank != 2)
        return false;
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == p) return false;
    int readers = 0;
    for (int i = p->id + 1; i < g->n_nodes; i++) {
        const sn_node *u = g->nodes[i];
        for (int j = 0; j < u->n_in; j++) {
            if (u->in[j] != p) continue;
            if (u->op != SN_OP_MATMUL || j != 1) return false;
            readers++;
        }
    }
    return readers > 0;
}

/* The product that makes the logits (g->logits, or what it views or casts): the LM head. */
static const sn_node *logits_product(const sn_graph *g) {
    const sn_node *n = g->logits;
    while (n && n->n_in >= 1 && (sn_op_kind(n->op) == SN_K_LAYOUT || n->op == SN_OP_CAST))
        n = n->in[0];
    return n && n->op == SN_OP_MATMUL ? n : NULL;
}

/* Whether p is the right operand of the LM head's product: an untied head (LLaMA's
 * lm_head.weight) keeps its dtype, as bitsandbytes' QLoRA (transformers' load_in_4bit, which
 * skips lm_head) keeps it in 16 bits: the logits' product is the model's most sensitive, and
 * unpacking the whole head for every product (each chunk of --chunk-logits) costs a scratch
 * as large as it. */
static bool lm_head(const sn_graph *g, const sn_node *p) {
    const sn_node *mm = logits_product(g);
    return mm && mm->in[1] == p;
}

sn_status sn_pass_nf4(const sn_graph *in, sn_graph **out, int *n_stored, sn_err *e) {
    *out = NULL;
    *n_stored = 0;
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "nf4: the graph has a backward; run the pass on the "
                       "forward graph, before autodiff");
    sn_rewrite r;
    sn_status st = sn_rewrite_begin(&r, in, e);
    if (st) return st;
    for (int i = 0; i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        if (!sn_linear_weight(in, n) || lm_head(in, n)) {
            sn_rewrite_copy(&r, n);
            continue;
        }
        /* the storage under the weight's name (the dtype the products read comes from
           autocast: bf16 there, f32 otherwise) */
        sn_node *w = sn_param_nf4(r.g, n->name, n->dtype, sn_shape_of(n));
        if (w) { /* the storage keeps the weights' init rule: the trainer draws them as the
                    full-precision parameter's, then quantizes them (train.h) */
            w->in[0]->a.init = n->a.init;
            w->in[0]->a.f = n->a.f;
            r.map[n->id] = w;
        }
        (*n_stored)++;
    }
    return sn_rewrite_end(&r, "nf4", out, e);
}

sn_status sn_pass_nf4_per_reader(const sn_graph *in, sn_graph **out, int *n_made, sn_err *e) {
    *out = NULL;
    *n_made = 0;
    sn_rewrite r;
    sn_status st = sn_rewrite_begin(&r, in, e);
    if (st) return st;
    for (int i = 0; i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        if (n->op == SN_OP_DEQUANT_NF4) continue; /* made again before each reader */
        for (int j = 0; j < n->n_in; j++) {
            const sn_node *d = n->in[j];
            if (d->op != SN_OP_DEQUANT_NF4 || (j > 0 && n->in[j - 1] == d)) continue;
            /* the last one made stands for d (an output or the loss, had it been one) */
            r.map[d->id] = sn_dequant_nf4(r.g, r.map[d->in[0]->id], d->dtype, sn_shape_of(d));
            (*n_made)++;
        }
        sn_rewrite_copy(&r, n);
    }
    return sn_rewrite_end(&r, "nf4_per_reader", out, e);
}
