/* hf_llama.c: Hugging Face LLaMA-family checkpoints into sinter (hf_llama.h). config.json is read
 * field by field into sn_llama_config; the tensors are checked against the parameters of the
 * model that configuration builds (one graph of one token: the model is its own parameter list).
 * Convention: refusals name the field or the tensor, and the file it is in. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "hf_llama.h"
#include "io_int.h"
#include "safetensors.h"

#ifdef SN_HAVE_JSONC

static bool has(json_object *r, const char *key, json_object **v) {
    return json_object_object_get_ex(r, key, v) && *v && !json_object_is_type(*v, json_type_null);
}

/* An integer field in [lo, hi]; def when absent or null (def < 0: required). */
static sn_status int_field(const char *path, json_object *r, const char *key, int64_t def,
                           int64_t lo, int64_t hi, int *out, sn_err *e) {
    json_object *v;
    int64_t x = def;
    if (has(r, key, &v)) {
        errno = 0;
        x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : lo - 1;
        if (errno) x = lo - 1;
    } else if (def < 0) {
        return sn_fail(e, SN_ERR_INVALID, "%s has no %s: a LLaMA config.json needs it", path, key);
    }
    if (x < lo || x > hi)
        return sn_fail(e, SN_ERR_INVALID, "%s: %s is not a whole number from %" PRId64 " to %"
                       PRId64 ": fix the file", path, key, lo, hi);
    *out = (int)x;
    return SN_OK;
}

/* A number field, def when absent or null. */
static sn_status num_field(const char *path, json_object *r, const char *key, double def,
                           double *out, sn_err *e) {
    json_object *v;
    *out = def;
    if (!has(r, key, &v)) return SN_OK;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return sn_fail(e, SN_ERR_INVALID, "%s: %s is not a number: fix the file", path, key);
    *out = json_object_get_double(v);
    return SN_OK;
}

static bool boolean(json_object *r, const char *key, bool def) {
    json_object *v;
    return has(r, key, &v) ? json_object_get_boolean(v) : def;
}

static const char *string(json_object *r, const char *key) {
    json_object *v;
    return has(r, key, &v) && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* "llama", "qwen2", or NULL: the family config.json names (model_type, else architectures) */
static const char *family(json_object *r) {
    const char *t = string(r, "model_type");
    if (t) return !strcmp(t, "llama") ? "llama" : !strcmp(t, "qwen2") ? "qwen2" : NULL;
    json_object *a;
    if (!has(r, "architectures", &a) || !json_object_is_type(a, json_type_array)) return NULL;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(a, i));
        if (s && !strcmp(s, "LlamaForCausalLM")) return "llama";
        if (s && !strcmp(s, "Qwen2ForCausalLM")) return "qwen2";
    }
    return NULL;
}

static sn_status unsupported(const char *path, const char *field, const char *value, const char *why,
                             sn_err *e) {
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: %s is %s; sinter's LLaMA %s: it cannot import this "
                   "model", path, field, value, why);
}

/* The rotary embedding: transformers 4's rope_theta and rope_scaling, or transformers 5's
 * rope_parameters (rope_theta inside); rope types "default" and "llama3" only. */
static sn_status parse_rope(const char *path, json_object *r, sn_llama_config *c, sn_err *e) {
    json_object *rs = NULL;
    const char *field = has(r, "rope_parameters", &rs) ? "rope_parameters"
                        : has(r, "rope_scaling", &rs) ? "rope_scaling" : NULL;
    if (rs && !json_object_is_type(rs, json_type_object))
        return sn_fail(e, SN_ERR_INVALID, "%s: %s is not an object: fix the file", path, field);
    double theta;
    sn_status s = num_field(path, rs && has(rs, "rope_theta", &(json_object *){0}) ? rs : r,
                            "rope_theta", 10000, &theta, e);
    if (s) return s;
    c->rope_theta = (float)theta;
    if (!rs) return SN_OK;
    const char *type = string(rs, "rope_type");
    if (!type) type = string(rs, "type");
    if (!type || !strcmp(type, "default")) return SN_OK;
    if (strcmp(type, "llama3")) {
        char what[64];
        snprintf(what, sizeof what, "%s.rope_type", field);
        return unsupported(path, what, type, "has the default and the llama3 rotary embeddings only", e);
    }
    double f, lo, hi;
    if ((s = num_field(path, rs, "factor", 0, &f, e)) || (s = num_field(path, rs, "low_freq_factor", 0, &lo, e)) ||
        (s = num_field(path, rs, "high_freq_factor", 0, &hi, e)) ||
        (s = int_field(path, rs, "original_max_position_embeddings", -1, 1, 1 << 24, &c->rope_original_ctx, e)))
        return s;
    c->rope_factor = (float)f;
    c->rope_low_freq_factor = (float)lo;
    c->rope_high_freq_factor = (float)hi;
    return SN_OK;
}

static sn_status parse_config(const char *path, json_object *r, sn_llama_config *c, sn_err *e) {
    const char *fam = family(r), *t = string(r, "model_type");
    if (!fam)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: model_type is \"%.40s\"; sinter imports LLaMA "
                       "(\"llama\", LlamaForCausalLM) and Qwen2 (\"qwen2\") models here", path,
                       t ? t : "missing");
    json_object *a;
    if (has(r, "architectures", &a) && json_object_is_type(a, json_type_array))
        for (size_t i = 0; i < json_object_array_length(a); i++) {
            const char *s = json_object_get_string(json_object_array_get_idx(a, i));
            if (!s || (strcmp(s, "LlamaForCausalLM") && strcmp(s, "Qwen2ForCausalLM")))
                return unsupported(path, "architectures", s ? s : "null", "is LlamaForCausalLM or "
                                   "Qwen2ForCausalLM", e);
        }
    bool qwen = !strcmp(fam, "qwen2");
    sn_status s;
    if ((s = int_field(path, r, "hidden_size", -1, 1, 1 << 16, &c->hidden, e)) ||
        (s = int_field(path, r, "intermediate_size", -1, 1, 1 << 20, &c->intermediate, e)) ||
        (s = int_field(path, r, "num_hidden_layers", -1, 1, 1000, &c->n_layer, e)) ||
        (s = int_field(path, r, "num_attention_heads", -1, 1, 1 << 12, &c->n_head, e)) ||
        (s = int_field(path, r, "num_key_value_heads", c->n_head, 1, 1 << 12, &c->n_kv_head, e)) ||
        (s = int_field(path, r, "head_dim", c->hidden / c->n_head, 2, 1 << 12, &c->head_dim, e)) ||
        (s = int_field(path, r, "vocab_size", -1, 1, 1 << 24, &c->vocab, e)) ||
        (s = int_field(path, r, "max_position_embeddings", 2048, 1, 1 << 24, &c->ctx, e)))
        return s;
    double eps;
    if ((s = num_field(path, r, "rms_norm_eps", 1e-6, &eps, e))) return s;
    c->rms_norm_eps = (float)eps;
    c->tie_word_embeddings = boolean(r, "tie_word_embeddings", false);
    c->qkv_bias = qwen;
    const char *act = string(r, "hidden_act");
    if (act && strcmp(act, "silu"))
        return unsupported(path, "hidden_act", act, "has a SwiGLU MLP (silu)", e);
    if (!qwen && boolean(r, "attention_bias", false))
        return unsupported(path, "attention_bias", "true", "has no attention biases", e);
    if (boolean(r, "mlp_bias", false))
        return unsupported(path, "mlp_bias", "true", "has no MLP biases", e);
    if (qwen && boolean(r, "use_sliding_window", false))
        return unsupported(path, "use_sliding_window", "true", "attends to the whole context", e);
    int tp = 1;
    if ((s = int_field(path, r, "pretraining_tp", 1, 1, 1 << 10, &tp, e))) return s;
    if (tp != 1) return unsupported(path, "pretraining_tp", "not 1", "computes each Linear whole", e);
    if ((s = parse_rope(path, r, c, e))) return s;
    return sn_llama_config_check(c, e);
}
#endif

static bool same_shape(const sn_llama_config *a, const sn_llama_config *b) {
    return a->vocab == b->vocab && a->ctx == b->ctx && a->n_layer == b->n_layer &&
           a->n_head == b->n_head && a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim &&
           a->hidden == b->hidden && a->intermediate == b->intermediate &&
           a->rms_norm_eps == b->rms_norm_eps && a->rope_theta == b->rope_theta &&
           a->rope_factor == b->rope_factor && a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_ctx == b->rope_original_ctx &&
           a->tie_word_embeddings == b->tie_word_embeddings && a->qkv_bias == b->qkv_bias;
}

/* The built-in name with c's shape, else "llama-custom" */
static const char *builtin_name(const sn_llama_config *c) {
    sn_llama_config p;
    for (int i = 0; sn_llama_config_at(i, &p); i++)
        if (same_shape(&p, c)) return p.name;
    return "llama-custom";
}

bool sn_hf_is_llama(const char *dir) {
#ifndef SN_HAVE_JSONC
    (void)dir;
    return false;
#else
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_object *root;
    sn_err e;
    if (sn_hf_read_json(path, &root, &e)) return false;
    bool yes = family(root) != NULL;
    json_object_put(root);
    return yes;
#endif
}

sn_status sn_hf_llama_read_config(const char *dir, sn_llama_config *c, sn_err *e) {
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
    sn_llama_config got = {0};
    got.name = "llama-custom";
    s = parse_config(path, root, &got, e);
    json_object_put(root);
    if (s) return s;
    got.name = builtin_name(&got);
    *c = got;
    return SN_OK;
#endif
}

/* ---- the tensors ---- */

static const sn_node *find_param(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    return NULL;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* Every tensor of file f into out, checked by name and shape against g's parameters; a tied
 * model's lm_head.weight into *head. */
static sn_status read_shard(const sn_st_file *f, const sn_graph *g, const sn_llama_config *c,
                            sn_weights *out, float **head, sn_err *e) {
    for (int i = 0; i < f->n; i++) {
        const sn_st_tensor *t = &f->t[i];
        if (ends_with(t->name, ".rotary_emb.inv_freq")) continue; /* a buffer old files carry */
        bool is_head = c->tie_word_embeddings && !strcmp(t->name, "lm_head.weight");
        const sn_node *p = find_param(g, is_head ? "model.embed_tokens.weight" : t->name);
        if (!p)
            return sn_fail(e, SN_ERR_INVALID, "%s: tensor %s is not a parameter of %s with %d "
                           "layers%s (config.json): is this the model's own config.json?", f->path,
                           t->name, c->name, c->n_layer, c->tie_word_embeddings ? ", tied" : "");
        if ((is_head && *head) || (!is_head && sn_weights_find(out, t->name)))
            return sn_fail(e, SN_ERR_INVALID, "%s: tensor %s is given twice: download the model "
                           "again", f->path, t->name);
        bool same = t->rank == p->rank;
        for (int d = 0; same && d < p->rank; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            char got[200], need[200];
            sn_shape_str(t->rank, t->shape, got, sizeof got);
            sn_shape_str(p->rank, p->shape, need, sizeof need);
            return sn_fail(e, SN_ERR_INVALID, "%s: tensor %s is %s; config.json (hidden_size %d, "
                           "intermediate_size %d, %d/%d heads of %d, vocab_size %d) needs %s: the "
                           "weights and config.json are of different models", f->path, t->name,
                           got, c->hidden, c->intermediate, c->n_head, c->n_kv_head, c->head_dim,
                           c->vocab, need);
        }
        float *data = sn_malloc(4 * (size_t)sn_numel(p) + 4, "a pretrained tensor", e);
        if (!data) return SN_ERR_OOM;
        sn_status s = sn_st_read_f32(f, t, data, e);
        if (s) {
            free(data);
            return s;
        }
        if (is_head) *head = data;
        else if ((s = sn_weights_add(out, t->name, p->rank, p->shape, data, e))) return s;
    }
    return SN_OK;
}

static sn_status read_path(const char *path, const sn_graph *g, const sn_llama_config *c,
                           sn_weights *out, float **head, sn_err *e) {
    sn_st_file f;
    sn_status s = sn_st_open(path, &f, e);
    if (!s) s = read_shard(&f, g, c, out, head, e);
    sn_st_close(&f);
    return s;
}

typedef struct {
    const sn_graph *g;
    const sn_llama_config *c;
    sn_weights *out;
    float **head;
} shard_ctx;

/* sn_hf_index_walk's call: every shard read once, in the order first named. */
static sn_status index_shard(void *ctx, const char *path, const char *name, bool first, sn_err *e) {
    (void)name;
    shard_ctx *x = ctx;
    return first ? read_path(path, x->g, x->c, x->out, x->head, e) : SN_OK;
}

sn_status sn_hf_llama_read(const char *dir, sn_llama_config *c, sn_weights *out, sn_err *e) {
    sn_status s = sn_hf_llama_read_config(dir, c, e);
    if (s) return s;
    *out = (sn_weights){0};
    snprintf(out->name, sizeof out->name, "%s", c->name);
    sn_graph *g = sn_graph_new();
    sn_llama m;
    if (!g) return sn_fail_oom(e, sizeof(sn_graph), "the model's graph");
    if ((s = sn_llama_build(g, c, 1, 1, &m, e))) {
        sn_graph_free(g);
        return s;
    }
    char single[4200], index[4200];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    float *head = NULL;
    if (access(single, F_OK) == 0) {
        s = read_path(single, g, c, out, &head, e);
    } else if (access(index, F_OK) == 0) {
        s = sn_hf_index_walk(dir, index, index_shard, &(shard_ctx){g, c, out, &head}, e);
    } else {
        s = sn_fail(e, SN_ERR_IO, "%s has no model.safetensors or model.safetensors.index.json: "
                    "sinter reads safetensors (a pytorch_model.bin is a Python pickle: save the "
                    "model again with transformers' save_pretrained, safe_serialization=True)", dir);
    }
    for (int i = 0; i < g->n_nodes && !s; i++) { /* every parameter given */
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM || sn_weights_find(out, p->name)) continue;
        char need[200];
        sn_shape_str(p->rank, p->shape, need, sizeof need);
        s = sn_fail(e, SN_ERR_INVALID, "%s: no tensor %s %s: %s with %d layers (config.json) has "
                    "one: download the model again", dir, p->name, need, c->name, c->n_layer);
    }
    const sn_weight *emb = s ? NULL : sn_weights_find(out, "model.embed_tokens.weight");
    if (emb && head && memcmp(head, emb->data, 4 * (size_t)(emb->shape[0] * emb->shape[1])))
        s = sn_fail(e, SN_ERR_UNSUPPORTED, "%s: lm_head.weight differs from model.embed_tokens.weight "
                    "while config.json has tie_word_embeddings true: fix config.json", dir);
    free(head);
    sn_graph_free(g);
    if (s) sn_weights_free(out);
    return s;
}
