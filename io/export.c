/* export.c: a sinter GPT-2 checkpoint as a weight set (weights.h, sn_weights_from_checkpoint),
 * for `sinter export`: the configuration from the checkpoint's metadata and shapes, the padded
 * vocabulary rows dropped, LoRA adapters and IA3 vectors (ia3_merge.c) merged. Convention: LoRA's path (x @ A) @ B * alpha/r
 * beside x @ W is the same map as x @ (W + A @ B * alpha/r), so merging changes no logit beyond
 * rounding; the merge is summed in double. */
#include <stdlib.h>
#include <string.h>

#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "io_int.h"
#include "train/checkpoint.h"
#include "weights.h"

static const sn_ckpt_param *find(const sn_ckpt_weights *cw, const char *name) {
    for (int i = 0; i < cw->n; i++)
        if (!strcmp(cw->params[i].name, name)) return &cw->params[i];
    return NULL;
}

/* The GPT-2 configuration: layers counted, C and ctx from wte and wpe, heads from the run's
 * "model.shape" ("ctx 32, 2 layers, 2 heads, 32 channels[, LoRA rank R alpha A on T]"). */
static sn_status config_of(const char *path, const sn_ckpt_weights *cw, const sn_export_opts *o,
                           sn_gpt2_config *c, float *alpha, sn_err *e) {
    const sn_ckpt_param *wte = find(cw, "wte"), *wpe = find(cw, "wpe");
    const char *shape = sn_run_meta_get(&cw->run, "model.shape"), *tok = sn_run_meta_get(&cw->run, "tokenizer");
    int ctx, layers, heads, channels;
    if (!wte || !wpe || wte->rank != 2 || wpe->rank != 2 || !shape ||
        sscanf(shape, "ctx %d, %d layers, %d heads, %d channels", &ctx, &layers, &heads, &channels) != 4)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "checkpoint %s is not of sinter's GPT-2 (no wte and "
                       "wpe, or no \"model.shape\" naming its heads): sinter exports GPT-2 "
                       "checkpoints of sinter train", path);
    *alpha = o->lora_alpha > 0 ? o->lora_alpha : (float)sn_run_lora_alpha(&cw->run);
    int64_t rows = wte->shape[0];
    int vocab = o->vocab ? o->vocab : tok && !strcmp(tok, "bytes") ? 256
                : tok && !strcmp(tok, "gpt2") ? 50257
                : tok && !strncmp(tok, "hf ", 3) ? atoi(tok + 3) /* "hf VOCAB HASH" */
                : rows % 64 ? (int)rows : 0;
    if (!vocab || vocab > rows)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the vocabulary of its tokenizer (\"%s\") "
                       "is not known and wte has %lld rows: give the vocabulary size (sinter "
                       "export --vocab N)%s", path, tok ? tok : "none", (long long)rows,
                       vocab > rows ? ", at most wte's rows" : "");
    *c = (sn_gpt2_config){.vocab = vocab, .ctx = (int)wpe->shape[0], .n_layer = layers,
                          .n_head = heads, .n_embd = (int)wte->shape[1]};
    if (c->n_embd != channels || c->ctx != ctx || c->n_head < 1 || c->n_embd % c->n_head)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s: its model.shape (%s) does not match wte "
                       "and wpe: the file is damaged", path, shape);
    return SN_OK;
}

/* W (in, out) += A (in, r) @ B (r, out) * scale, each sum in double. */
static void merge(float *w, const float *a, const float *b, int64_t in, int64_t out, int64_t r,
                  double scale) {
    for (int64_t i = 0; i < in; i++)
        for (int64_t j = 0; j < out; j++) {
            double s = 0;
            for (int64_t k = 0; k < r; k++) s += (double)a[i * r + k] * b[k * out + j];
            w[i * out + j] = (float)(w[i * out + j] + s * scale);
        }
}

/* The adapters of layer prefix ("h.0.attn.c_attn"), merged into out's weight when there. */
static sn_status merge_adapters(const char *path, const sn_ckpt_weights *cw, const char *prefix,
                                sn_weight *w, float alpha, int *merged, sn_err *e) {
    char an[160], bn[160];
    snprintf(an, sizeof an, "%s.lora_a", prefix);
    snprintf(bn, sizeof bn, "%s.lora_b", prefix);
    const sn_ckpt_param *a = find(cw, an), *b = find(cw, bn);
    if (!a && !b) return SN_OK;
    int64_t in = w->shape[0], out = w->shape[1];
    if (!a || !b || a->rank != 2 || b->rank != 2 || a->shape[0] != in || b->shape[1] != out ||
        a->shape[1] != b->shape[0])
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the LoRA adapter of %s is not an A (%lld, "
                       "r) and a B (r, %lld): the file is damaged", path, prefix, (long long)in,
                       (long long)out);
    if (!(alpha > 0))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds LoRA adapters and does not say their "
                       "alpha: give it (sinter export --lora-alpha ALPHA, as given to --lora-alpha "
                       "in training; R when it was not)", path);
    merge(w->data, a->w, b->w, in, out, a->shape[1], (double)alpha / (double)a->shape[1]);
    (*merged)++;
    return SN_OK;
}

sn_status sn_weights_from_checkpoint(const char *path, const sn_export_opts *o, sn_weights *out,
                                     int *merged, sn_err *e) {
    static const sn_export_opts none = {0};
    sn_ckpt_weights cw;
    sn_status s = sn_checkpoint_read_weights(path, &cw, e);
    if (s) return s;
    sn_gpt2_config c;
    float alpha = 0;
    int n_merged = 0;
    if ((s = config_of(path, &cw, o ? o : &none, &c, &alpha, e))) {
        sn_ckpt_weights_free(&cw);
        return s;
    }
    sn_weights_init(out, &c);
    const char *model = sn_run_meta_get(&cw.run, "model");
    if (model && strlen(model) < sizeof out->name) snprintf(out->name, sizeof out->name, "%s", model);
    for (int i = 0; i < cw.n && !s; i++) { /* nothing the model does not have */
        char name[96];
        int64_t shape[2];
        bool known = sn_is_adapter(cw.params[i].name);
        for (int k = 0; k < sn_gpt2_param_count(&c) && !known; k++) {
            sn_gpt2_param_at(&c, k, name, sizeof name, shape);
            known = !strcmp(name, cw.params[i].name);
        }
        if (!known)
            s = sn_fail(e, SN_ERR_INVALID, "checkpoint %s has a parameter %s, which sinter's GPT-2 "
                        "of %d layers lacks: sinter exports GPT-2 checkpoints only", path,
                        cw.params[i].name, c.n_layer);
    }
    for (int k = 0; k < sn_gpt2_param_count(&c) && !s; k++) {
        char name[96];
        int64_t shape[2];
        int rank = sn_gpt2_param_at(&c, k, name, sizeof name, shape);
        const sn_ckpt_param *p = find(&cw, name);
        /* wte keeps its first V rows: the rest is the pad_vocab pass's padding */
        if (!p || p->rank != rank || (strcmp(name, "wte") ? p->shape[0] != shape[0] : p->shape[0] < shape[0]) ||
            (rank > 1 && p->shape[1] != shape[1])) {
            s = sn_fail(e, SN_ERR_INVALID, "checkpoint %s: parameter %s is %s: the file does not "
                        "hold the GPT-2 its metadata describes", path, name, p ? "misshapen" : "missing");
            break;
        }
        size_t n = (size_t)shape[0] * (size_t)(rank > 1 ? shape[1] : 1);
        float *d = sn_malloc(4 * n + 4, "an exported parameter", e);
        if (!d) {
            s = SN_ERR_OOM;
            break;
        }
        memcpy(d, p->w, 4 * n);
        if ((s = sn_weights_add(out, name, rank, shape, d, e))) break;
        size_t len = strlen(name);
        if (rank == 2 && len > 2 && !strcmp(name + len - 2, ".w")) {
            name[len - 2] = 0;
            s = merge_adapters(path, &cw, name, &out->w[out->n - 1], alpha, &n_merged, e);
        }
    }
    int n_ia3 = 0;
    if (!s) s = sn_ia3_merge(path, &cw, out, true, &n_ia3, e);
    int adapters = 0;
    for (int i = 0; i < cw.n; i++) adapters += sn_lora_is_adapter(cw.params[i].name);
    if (!s && adapters != 2 * n_merged)
        s = sn_fail(e, SN_ERR_INVALID, "checkpoint %s: %d LoRA adapter parameters, of which %d "
                    "adapt a layer's weight: the file is damaged", path, adapters, 2 * n_merged);
    sn_ckpt_weights_free(&cw);
    if (!s) s = sn_weights_check(out, path, e);
    if (s) sn_weights_free(out);
    else if (merged) *merged = n_merged + n_ia3;
    return s;
}
