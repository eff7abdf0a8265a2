/* hf_llama_ckpt.c: a sinter checkpoint of a LLaMA-family model as a weight set (hf_llama.h), for
 * `sinter export --to DIR`. The configuration is the built-in shape the run's metadata names
 * ("model"), the vocabulary its tokenizer's; the vocabulary's padding rows are dropped.
 * Convention: every parameter of the model is in the file with its shape, and nothing else. */
#include <stdlib.h>
#include <string.h>

#include "hf_llama.h"
#include "train/checkpoint.h"

static const sn_ckpt_param *find(const sn_ckpt_weights *cw, const char *name) {
    for (int i = 0; i < cw->n; i++)
        if (!strcmp(cw->params[i].name, name)) return &cw->params[i];
    return NULL;
}

/* The parameters of c's model from cw, the embedding's and head's first c->vocab rows. */
static sn_status copy_params(const char *path, const sn_ckpt_weights *cw, const sn_llama_config *c,
                             const sn_graph *g, sn_weights *out, sn_err *e) {
    int n_params = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM) continue;
        n_params++;
        const sn_ckpt_param *q = find(cw, p->name);
        bool vocab_rows = !strcmp(p->name, "model.embed_tokens.weight") || !strcmp(p->name, "lm_head.weight");
        bool ok = q && q->rank == p->rank && (vocab_rows ? q->shape[0] >= p->shape[0] : q->shape[0] == p->shape[0]) &&
                  (p->rank < 2 || q->shape[1] == p->shape[1]);
        if (!ok)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: parameter %s is %s: the file does not "
                           "hold the %s its metadata names", path, p->name, q ? "misshapen" : "missing", c->name);
        float *data = sn_malloc(4 * (size_t)sn_numel(p), "a checkpoint's tensor", e);
        if (!data) return SN_ERR_OOM;
        memcpy(data, q->w, 4 * (size_t)sn_numel(p)); /* the first rows: the padding is after them */
        sn_status s = sn_weights_add(out, p->name, p->rank, p->shape, data, e);
        if (s) return s;
    }
    if (cw->n != n_params)
        for (int i = 0; i < cw->n; i++)
            if (!sn_weights_find(out, cw->params[i].name))
                return sn_fail(e, SN_ERR_UNSUPPORTED, "checkpoint %s has a parameter %s, which %s "
                               "lacks (LoRA adapters on LLaMA are not exported yet)", path,
                               cw->params[i].name, c->name);
    return SN_OK;
}

sn_status sn_hf_llama_from_checkpoint(const char *path, int vocab, bool *is_llama, sn_llama_config *c,
                                      sn_weights *out, sn_err *e) {
    sn_ckpt_weights cw;
    *is_llama = false;
    sn_status s = sn_checkpoint_read_weights(path, &cw, e);
    if (s) return s;
    const char *model = sn_run_meta_get(&cw.run, "model"), *tok = sn_run_meta_get(&cw.run, "tokenizer");
    if (!model || !sn_llama_config_find(model, c)) {
        sn_ckpt_weights_free(&cw);
        return SN_OK; /* not a LLaMA-family checkpoint */
    }
    *is_llama = true;
    c->vocab = vocab ? vocab : tok && !strcmp(tok, "bytes") ? 256 : tok && !strcmp(tok, "gpt2") ? 50257 : 0;
    if (!c->vocab) s = sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the vocabulary of its tokenizer "
                               "(\"%s\") is not known: give it (sinter export --vocab N)", path, tok ? tok : "none");
    *out = (sn_weights){0};
    snprintf(out->name, sizeof out->name, "%s", c->name);
    sn_graph *g = s ? NULL : sn_graph_new();
    sn_llama m;
    if (!s && !g) s = sn_fail_oom(e, sizeof(sn_graph), "the model's graph");
    if (!s) s = sn_llama_build(g, c, 1, 1, &m, e);
    if (!s) s = copy_params(path, &cw, c, g, out, e);
    if (s) sn_weights_free(out);
    sn_graph_free(g);
    sn_ckpt_weights_free(&cw);
    return s;
}
