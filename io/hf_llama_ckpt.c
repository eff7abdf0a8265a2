/* hf_llama_ckpt.c: a sinter checkpoint of a LLaMA-family model as a weight set (hf_llama.h), for
 * `sinter export --to DIR`. The configuration is the built-in shape the run's metadata names
 * ("model"), or a config.json's own ("llama-custom": its "model.config"), the vocabulary its
 * tokenizer's; the vocabulary's padding rows are dropped.
 * Convention: every parameter of the model is in the file with its shape, and nothing else but
 * the run's LoRA adapters, merged into the weights they adapt: x W^T + (x A) B alpha/r is
 * x (W + (A B)^T alpha/r)^T, each sum in double; or its IA3 vectors, merged into the weights
 * they scale (ia3_merge.c). */
#include <stdlib.h>
#include <string.h>

#include "hf_llama.h"
#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "io_int.h"
#include "train/checkpoint.h"

static const sn_ckpt_param *find(const sn_ckpt_weights *cw, const char *name) {
    for (int i = 0; i < cw->n; i++)
        if (!strcmp(cw->params[i].name, name)) return &cw->params[i];
    return NULL;
}

/* W (out, in) += (A (in, r) B (r, out))^T * scale, the adapters of prefix when cw has them. */
static sn_status merge(const char *path, const sn_ckpt_weights *cw, const char *prefix, float *w,
                       int64_t out, int64_t in, double alpha, int *merged, sn_err *e) {
    char an[176], bn[176];
    snprintf(an, sizeof an, "%s.lora_a", prefix);
    snprintf(bn, sizeof bn, "%s.lora_b", prefix);
    const sn_ckpt_param *a = find(cw, an), *b = find(cw, bn);
    if (!a && !b) return SN_OK;
    if (!a || !b || a->rank != 2 || b->rank != 2 || a->shape[0] != in || b->shape[1] != out ||
        a->shape[1] != b->shape[0])
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the LoRA adapter of %s is not an A (%lld, "
                       "r) and a B (r, %lld): the file is damaged", path, prefix, (long long)in, (long long)out);
    if (!(alpha > 0))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds LoRA adapters and its metadata does "
                       "not say their alpha: the file is damaged", path);
    int64_t r = a->shape[1];
    double scale = alpha / (double)r;
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double sum = 0;
            for (int64_t k = 0; k < r; k++) sum += (double)a->w[i * r + k] * b->w[k * out + o];
            w[o * in + i] = (float)(w[o * in + i] + sum * scale);
        }
    (*merged)++;
    return SN_OK;
}

/* The parameters of c's model from cw, the embedding's and head's first c->vocab rows, the
 * run's adapters merged. */
static sn_status copy_params(const char *path, const sn_ckpt_weights *cw, const sn_llama_config *c,
                             const sn_graph *g, sn_weights *out, sn_err *e) {
    int n_params = 0, merged = 0, adapters = 0;
    double alpha = sn_run_lora_alpha(&cw->run);
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
        size_t len = strlen(p->name);
        sn_status s = SN_OK;
        if (p->rank == 2 && len > 7 && !strcmp(p->name + len - 7, ".weight") && len < 150) {
            char prefix[160];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 7), p->name);
            s = merge(path, cw, prefix, data, p->shape[0], p->shape[1], alpha, &merged, e);
        }
        if (!s) s = sn_weights_add(out, p->name, p->rank, p->shape, data, e);
        else free(data);
        if (s) return s;
    }
    for (int i = 0; i < cw->n; i++) adapters += sn_lora_is_adapter(cw->params[i].name);
    if (adapters != 2 * merged)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: %d LoRA adapter parameters, of which %d "
                       "adapt a weight of %s: the file is damaged", path, adapters, 2 * merged, c->name);
    int vectors = 0;
    sn_status s = sn_ia3_merge(path, cw, out, false, &vectors, e);
    if (s) return s;
    if (cw->n != n_params + adapters + vectors)
        for (int i = 0; i < cw->n; i++)
            if (!sn_weights_find(out, cw->params[i].name) && !sn_is_adapter(cw->params[i].name))
                return sn_fail(e, SN_ERR_UNSUPPORTED, "checkpoint %s has a parameter %s, which %s "
                               "lacks", path, cw->params[i].name, c->name);
    return SN_OK;
}

sn_status sn_hf_llama_from_checkpoint(const char *path, int vocab, bool *is_llama, sn_llama_config *c,
                                      sn_weights *out, sn_err *e) {
    sn_ckpt_weights cw;
    *is_llama = false;
    sn_status s = sn_checkpoint_read_weights(path, &cw, e);
    if (s) return s;
    const char *model = sn_run_meta_get(&cw.run, "model"), *tok = sn_run_meta_get(&cw.run, "tokenizer");
    if (model && !strcmp(model, "llama-custom")) { /* a config.json's own shape */
        s = sn_llama_config_parse(sn_run_meta_get(&cw.run, "model.config"), c, e);
        if (s) {
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            sn_fail(e, s, "checkpoint %s: %s", path, why);
            sn_ckpt_weights_free(&cw);
            return s;
        }
    } else if (!model || !sn_llama_config_find(model, c)) {
        sn_ckpt_weights_free(&cw);
        return SN_OK; /* not a LLaMA-family checkpoint */
    }
    *is_llama = true;
    c->vocab = vocab ? vocab : tok && !strcmp(tok, "bytes") ? 256 : tok && !strcmp(tok, "gpt2") ? 50257
             : tok && !strncmp(tok, "hf ", 3) ? atoi(tok + 3) /* "hf VOCAB HASH" */ : 0;
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
