/* hf_gpt2.c: Hugging Face GPT-2 checkpoints (weights.h): config.json, model.safetensors or a
 * sharded model.safetensors.index.json, in and out. GPT-2's Conv1D stores weights (in, out), as
 * sinter does, so names change and layouts do not ("transformer.h.0.attn.c_attn.weight" is
 * "h.0.attn.c_attn.w"); the LM head is tied to wte, so lm_head.weight, when a file has it, must
 * equal wte. Convention: config.json is checked against what models/gpt2.c computes before any
 * tensor is read, and a field it cannot express is named. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "data/data.h"
#include "io_int.h"
#include "safetensors.h"
#include "weights.h"

#ifdef SN_HAVE_JSONC

sn_status sn_hf_read_json(const char *path, json_object **root, sn_err *e) {
    char *text;
    size_t n;
    *root = NULL;
    sn_status s = sn_file_read(path, "a Hugging Face model directory has it", &text, &n, e);
    if (s) return s;
    if (n > INT_MAX / 2) {
        free(text);
        return sn_fail(e, SN_ERR_PARSE, "%s: %zu bytes, too large for a JSON file of a model", path, n);
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        free(text);
        return sn_fail_oom(e, 4096, "a JSON parser");
    }
    json_object *o = json_tokener_parse_ex(tok, text, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    json_tokener_free(tok);
    free(text);
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return sn_fail(e, SN_ERR_PARSE, "%s is not a JSON object (%s): download it again", path,
                       o ? "another JSON value" : err == json_tokener_continue ? "it ends early"
                       : json_tokener_error_desc(err));
    }
    *root = o;
    return SN_OK;
}

/* An integer field in [lo, hi], or def when absent. */
static sn_status int_field(const char *path, json_object *root, const char *key, int64_t def,
                           int64_t lo, int64_t hi, int *out, sn_err *e) {
    json_object *v;
    int64_t x = def;
    if (json_object_object_get_ex(root, key, &v)) {
        errno = 0;
        x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : lo - 1;
        if (errno) x = lo - 1;
    }
    if (x < lo || x > hi)
        return sn_fail(e, SN_ERR_INVALID, "%s: %s is not a whole number from %" PRId64 " to %"
                       PRId64 ": fix the file", path, key, lo, hi);
    *out = (int)x;
    return SN_OK;
}

/* A boolean field that sinter's GPT-2 needs to be want (absent: def). */
static sn_status bool_field(const char *path, json_object *root, const char *key, bool def,
                            bool want, const char *what, sn_err *e) {
    json_object *v;
    bool x = json_object_object_get_ex(root, key, &v) && v ? json_object_get_boolean(v) : def;
    if (x == want) return SN_OK;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: %s is %s; sinter's GPT-2 %s: it cannot import "
                   "this model", path, key, x ? "true" : "false", what);
}

static sn_status parse_config(const char *path, json_object *r, sn_gpt2_config *c, sn_err *e) {
    json_object *v;
    const char *s = NULL;
    /* absent or null: GPT-2 (old files have none); anything but the string "gpt2": refused */
    if (json_object_object_get_ex(r, "model_type", &v) && v &&
        (!json_object_is_type(v, json_type_string) || strcmp(s = json_object_get_string(v), "gpt2")))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: model_type is %s%.40s%s; sinter imports GPT-2 "
                       "(model_type \"gpt2\") only", path, s ? "\"" : "", s ? s : "not a string",
                       s ? "\"" : "");
    sn_status st;
    if ((st = int_field(path, r, "n_embd", 768, 1, 1 << 16, &c->n_embd, e)) ||
        (st = int_field(path, r, "n_layer", 12, 1, 1000, &c->n_layer, e)) ||
        (st = int_field(path, r, "n_head", 12, 1, 1 << 12, &c->n_head, e)) ||
        (st = int_field(path, r, "n_positions", 1024, 1, 1 << 20, &c->ctx, e)) ||
        (st = int_field(path, r, "vocab_size", 50257, 1, 1 << 24, &c->vocab, e)))
        return st;
    if (c->n_embd % c->n_head)
        return sn_fail(e, SN_ERR_INVALID, "%s: n_embd %d is not a multiple of n_head %d: fix the "
                       "file", path, c->n_embd, c->n_head);
    double eps = 1e-5;
    if (json_object_object_get_ex(r, "layer_norm_epsilon", &v)) eps = json_object_get_double(v);
    if (!(fabs(eps - 1e-5) <= 1e-12))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: layer_norm_epsilon is %g; sinter's GPT-2 layer "
                       "norms use 1e-05: it cannot import this model", path, eps);
    s = "gelu_new";
    if (json_object_object_get_ex(r, "activation_function", &v)) s = json_object_get_string(v);
    if (!s || (strcmp(s, "gelu_new") && strcmp(s, "gelu_pytorch_tanh")))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: activation_function is \"%.40s\"; sinter's GPT-2 "
                       "uses the tanh GELU (gelu_new): it cannot import this model", path, s ? s : "null");
    int inner = 4 * c->n_embd;
    if (json_object_object_get_ex(r, "n_inner", &v) && v &&
        (st = int_field(path, r, "n_inner", 0, 1, 1 << 20, &inner, e)))
        return st;
    if (inner != 4 * c->n_embd)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: n_inner is %d; sinter's GPT-2 MLP has 4 x n_embd "
                       "= %d channels: it cannot import this model", path, inner, 4 * c->n_embd);
    if ((st = bool_field(path, r, "scale_attn_weights", true, true, "scales attention by "
                         "1/sqrt(head size)", e)) ||
        (st = bool_field(path, r, "scale_attn_by_inverse_layer_idx", false, false, "does not "
                         "scale attention by layer", e)) ||
        (st = bool_field(path, r, "add_cross_attention", false, false, "has no cross-attention", e)) ||
        (st = bool_field(path, r, "tie_word_embeddings", true, true, "ties the LM head to wte", e)))
        return st;
    return SN_OK;
}
#endif

sn_status sn_hf_gpt2_read_config(const char *dir, sn_gpt2_config *c, sn_err *e) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
#ifndef SN_HAVE_JSONC
    (void)c;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it reads no "
                   "Hugging Face models: install libjson-c-dev and rebuild (./setup)", path);
#else
    json_object *root;
    sn_status s = sn_hf_read_json(path, &root, e);
    if (s) return s;
    sn_gpt2_config got = {0};
    s = parse_config(path, root, &got, e);
    json_object_put(root);
    if (s) return s;
    got.name = sn_gpt2_published_name(&got);
    *c = got;
    return SN_OK;
#endif
}

/* ---- names ---- */

/* sinter's name of a Hugging Face tensor ("transformer." optional); "" for the attention mask
 * buffers old files carry (h.N.attn.bias, h.N.attn.masked_bias); "lm_head" for the tied head. */
static void sinter_name(const char *hf, char *out, size_t len) {
    if (!strncmp(hf, "transformer.", 12)) hf += 12;
    size_t n = strlen(hf);
    const char *rest = ""; /* after "h.N." */
    if (hf[0] == 'h' && hf[1] == '.') {
        size_t k = 2;
        while (hf[k] >= '0' && hf[k] <= '9') k++;
        if (k > 2 && hf[k] == '.') rest = hf + k + 1;
    }
    if (!strcmp(hf, "lm_head.weight")) snprintf(out, len, "lm_head");
    else if (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias")) out[0] = 0;
    else if (!strcmp(hf, "wte.weight") || !strcmp(hf, "wpe.weight")) snprintf(out, len, "%.3s", hf);
    else if (n > 7 && !strcmp(hf + n - 7, ".weight")) snprintf(out, len, "%.*s.w", (int)(n - 7), hf);
    else if (n > 5 && !strcmp(hf + n - 5, ".bias")) snprintf(out, len, "%.*s.b", (int)(n - 5), hf);
    else snprintf(out, len, "?%s", hf); /* matches no parameter */
}

/* "(a, b)" */
static void dims(int rank, const int64_t *shape, char *buf, size_t len) {
    int k = snprintf(buf, len, "(");
    for (int d = 0; d < rank && k < (int)len; d++)
        k += snprintf(buf + k, len - (size_t)k, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (k < (int)len) snprintf(buf + k, len - (size_t)k, ")");
}

/* transformers' name of a sinter parameter. */
static void hf_name(const char *name, char *out, size_t len) {
    size_t n = strlen(name);
    if (!strcmp(name, "wte") || !strcmp(name, "wpe")) snprintf(out, len, "transformer.%s.weight", name);
    else if (n > 2 && !strcmp(name + n - 2, ".w")) snprintf(out, len, "transformer.%.*s.weight", (int)(n - 2), name);
    else snprintf(out, len, "transformer.%.*s.bias", (int)(n - 2), name);
}

/* ---- reading the tensors ---- */

/* Every tensor of shard f into out (checked against out->config by name and shape); the tied
 * head into *head (numel of wte), when the file has one. */
static sn_status read_shard(const sn_st_file *f, sn_weights *out, float **head, sn_err *e) {
    for (int i = 0; i < f->n; i++) {
        const sn_st_tensor *t = &f->t[i];
        char name[160], want[96];
        int64_t shape[2] = {0, 0};
        int rank = 0;
        sinter_name(t->name, name, sizeof name);
        if (!name[0]) continue; /* an attention mask buffer: the model makes its own */
        bool is_head = !strcmp(name, "lm_head");
        for (int k = 0; k < sn_gpt2_param_count(&out->config) && !rank; k++) {
            int r = sn_gpt2_param_at(&out->config, k, want, sizeof want, shape);
            if (!strcmp(want, is_head ? "wte" : name)) rank = r;
        }
        if (!rank)
            return sn_fail(e, SN_ERR_INVALID, "%s: tensor %s is not a parameter of GPT-2 with "
                           "n_layer %d (config.json): is this the model's own config.json?",
                           f->path, t->name, out->config.n_layer);
        if ((is_head && *head) || (!is_head && sn_weights_find(out, name)))
            return sn_fail(e, SN_ERR_INVALID, "%s: tensor %s is given twice (as %s): download "
                           "the model again", f->path, t->name, name);
        if (t->rank != rank || t->shape[0] != shape[0] || (rank > 1 && t->shape[1] != shape[1])) {
            char got[200], need[64];
            dims(t->rank, t->shape, got, sizeof got);
            dims(rank, shape, need, sizeof need);
            return sn_fail(e, SN_ERR_INVALID, "%s: tensor %s is %s; config.json (n_embd %d, "
                           "n_positions %d, vocab_size %d) needs %s: the weights and config.json "
                           "are of different models", f->path, t->name, got, out->config.n_embd,
                           out->config.ctx, out->config.vocab, need);
        }
        size_t numel = (size_t)shape[0] * (size_t)(rank > 1 ? shape[1] : 1);
        float *data = sn_malloc(4 * numel + 4, "a pretrained tensor", e);
        if (!data) return SN_ERR_OOM;
        sn_status s = sn_st_read_f32(f, t, data, e);
        if (s) {
            free(data);
            return s;
        }
        if (is_head) *head = data;
        else if ((s = sn_weights_add(out, name, rank, shape, data, e))) return s;
    }
    return SN_OK;
}

typedef struct {
    const char *index;
    sn_weights *out;
    float **head;
} shard_ctx;

/* sn_hf_index_walk's call: the shard holds the tensor the index says; its tensors read once. */
static sn_status index_shard(void *ctx, const char *path, const char *name, bool first, sn_err *e) {
    shard_ctx *x = ctx;
    sn_st_file f;
    sn_status s = sn_st_open(path, &f, e);
    if (s) return s;
    if (!sn_st_find(&f, name))
        s = sn_fail(e, SN_ERR_PARSE, "%s says shard %s holds tensor %s; it does not: download "
                    "the model again", x->index, strrchr(path, '/') + 1, name);
    if (!s && first) s = read_shard(&f, x->out, x->head, e);
    sn_st_close(&f);
    return s;
}

sn_status sn_hf_gpt2_read(const char *dir, sn_weights *out, sn_err *e) {
    sn_gpt2_config c;
    sn_status s = sn_hf_gpt2_read_config(dir, &c, e);
    if (s) return s;
    sn_weights_init(out, &c);
    char single[4200], index[4200];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    float *head = NULL;
    if (access(single, F_OK) == 0) {
        sn_st_file f;
        if (!(s = sn_st_open(single, &f, e))) s = read_shard(&f, out, &head, e);
        sn_st_close(&f);
    } else if (access(index, F_OK) == 0) {
        s = sn_hf_index_walk(dir, index, index_shard, &(shard_ctx){index, out, &head}, e);
    } else {
        s = sn_fail(e, SN_ERR_IO, "%s has no model.safetensors or model.safetensors.index.json: "
                    "sinter reads safetensors (a pytorch_model.bin is a Python pickle: save the "
                    "model again with transformers' save_pretrained, safe_serialization=True)", dir);
    }
    if (!s) s = sn_weights_check(out, dir, e);
    const sn_weight *wte = s ? NULL : sn_weights_find(out, "wte");
    if (wte && head && memcmp(head, wte->data, 4 * (size_t)(wte->shape[0] * wte->shape[1])))
        s = sn_fail(e, SN_ERR_UNSUPPORTED, "%s: lm_head.weight differs from transformer.wte.weight; "
                    "sinter's GPT-2 ties the LM head to the token embedding: it cannot import this "
                    "model", dir);
    free(head);
    if (s) sn_weights_free(out);
    return s;
}

/* ---- writing ---- */

#ifdef SN_HAVE_JSONC
static sn_status write_config(const sn_weights *w, const char *path, sn_err *e) {
    const sn_gpt2_config *c = &w->config;
    json_object *r = json_object_new_object(), *arch = json_object_new_array();
    json_object_array_add(arch, json_object_new_string("GPT2LMHeadModel"));
    json_object_object_add(r, "architectures", arch);
    json_object_object_add(r, "model_type", json_object_new_string("gpt2"));
    json_object_object_add(r, "activation_function", json_object_new_string("gelu_new"));
    json_object_object_add(r, "layer_norm_epsilon", json_object_new_double(1e-5));
    json_object_object_add(r, "n_embd", json_object_new_int(c->n_embd));
    json_object_object_add(r, "n_head", json_object_new_int(c->n_head));
    json_object_object_add(r, "n_layer", json_object_new_int(c->n_layer));
    json_object_object_add(r, "n_positions", json_object_new_int(c->ctx));
    json_object_object_add(r, "n_ctx", json_object_new_int(c->ctx));
    json_object_object_add(r, "n_inner", NULL);
    json_object_object_add(r, "vocab_size", json_object_new_int(c->vocab));
    if (c->vocab == 50257) { /* GPT-2's tokenizer: <|endoftext|> */
        json_object_object_add(r, "bos_token_id", json_object_new_int(50256));
        json_object_object_add(r, "eos_token_id", json_object_new_int(50256));
    }
    json_object_object_add(r, "tie_word_embeddings", json_object_new_boolean(1));
    json_object_object_add(r, "torch_dtype", json_object_new_string("float32"));
    sn_status s = sn_newfile_json(path, "config.json", r, e);
    json_object_put(r);
    return s;
}
#endif

sn_status sn_weights_write_hf(const sn_weights *w, const char *dir, sn_err *e) {
    sn_status s = sn_weights_check(w, "the weights to export", e);
    if (s) return s;
    char config[4200], model[4200];
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    if ((s = sn_newfile_dir(dir, config, model, e))) return s;
#ifndef SN_HAVE_JSONC
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it writes no "
                   "Hugging Face models: install libjson-c-dev and rebuild (./setup)", dir);
#else
    sn_st_out *t = sn_calloc((size_t)w->n, sizeof *t, "the tensors to export", e);
    char (*names)[160] = sn_calloc((size_t)w->n, sizeof *names, "the tensors' names", e);
    if (!t || !names) s = SN_ERR_OOM;
    for (int i = 0; i < w->n && !s; i++) {
        hf_name(w->w[i].name, names[i], sizeof names[i]);
        t[i] = (sn_st_out){.name = names[i], .rank = w->w[i].rank, .shape = w->w[i].shape,
                           .data = w->w[i].data};
    }
    if (!s && !(s = write_config(w, config, e)) && (s = sn_st_write(model, t, w->n, e)))
        unlink(config); /* this call made it: no half-exported directory stays */
    free(t);
    free(names);
    return s;
#endif
}
