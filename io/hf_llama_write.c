/* hf_llama_write.c: a LLaMA-family model out to Hugging Face (hf_llama.h): config.json and
 * model.safetensors that transformers' LlamaForCausalLM / Qwen2ForCausalLM load. The parameters
 * already carry transformers' names and layouts, so the tensors are written as they are.
 * Convention: the weights are checked whole against the model c builds before any file is made;
 * outputs are new files (io_int.h), never replacing one. */
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
/* a float as the shortest decimal that reads back to it ("1e-05", not 9.99999974737875e-06) */
static json_object *real(float x) {
    char s[32];
    snprintf(s, sizeof s, "%.9g", (double)x);
    for (int p = 1; p <= 9; p++) { /* fewer digits when they still round to x */
        char t[32];
        snprintf(t, sizeof t, "%.*g", p, (double)x);
        if (strtof(t, NULL) == x) {
            memcpy(s, t, sizeof t);
            break;
        }
    }
    if (x == (float)(long long)x && x < 1e15f && x > -1e15f) snprintf(s, sizeof s, "%.1f", (double)x); /* 500000.0 */
    else if (!strpbrk(s, ".eE")) strcat(s, ".0");
    return json_object_new_double_s((double)x, s);
}

static sn_status write_config(const sn_llama_config *c, const char *path, sn_err *e) {
    json_object *r = json_object_new_object(), *arch = json_object_new_array();
    json_object_array_add(arch, json_object_new_string(c->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    json_object_object_add(r, "architectures", arch);
    json_object_object_add(r, "model_type", json_object_new_string(c->qkv_bias ? "qwen2" : "llama"));
    json_object_object_add(r, "hidden_act", json_object_new_string("silu"));
    json_object_object_add(r, "hidden_size", json_object_new_int(c->hidden));
    json_object_object_add(r, "intermediate_size", json_object_new_int(c->intermediate));
    json_object_object_add(r, "num_hidden_layers", json_object_new_int(c->n_layer));
    json_object_object_add(r, "num_attention_heads", json_object_new_int(c->n_head));
    json_object_object_add(r, "num_key_value_heads", json_object_new_int(c->n_kv_head));
    json_object_object_add(r, "head_dim", json_object_new_int(c->head_dim));
    json_object_object_add(r, "vocab_size", json_object_new_int(c->vocab));
    json_object_object_add(r, "max_position_embeddings", json_object_new_int(c->ctx));
    json_object_object_add(r, "rms_norm_eps", real(c->rms_norm_eps));
    json_object_object_add(r, "rope_theta", real(c->rope_theta));
    json_object *rs = NULL;
    if (c->rope_factor != 0) {
        rs = json_object_new_object();
        json_object_object_add(rs, "rope_type", json_object_new_string("llama3"));
        json_object_object_add(rs, "factor", real(c->rope_factor));
        json_object_object_add(rs, "low_freq_factor", real(c->rope_low_freq_factor));
        json_object_object_add(rs, "high_freq_factor", real(c->rope_high_freq_factor));
        json_object_object_add(rs, "original_max_position_embeddings", json_object_new_int(c->rope_original_ctx));
    }
    json_object_object_add(r, "rope_scaling", rs);
    if (!c->qkv_bias) {
        json_object_object_add(r, "attention_bias", json_object_new_boolean(0));
        json_object_object_add(r, "mlp_bias", json_object_new_boolean(0));
    } else {
        json_object_object_add(r, "use_sliding_window", json_object_new_boolean(0));
    }
    json_object_object_add(r, "tie_word_embeddings", json_object_new_boolean(c->tie_word_embeddings));
    json_object_object_add(r, "torch_dtype", json_object_new_string("float32"));
    sn_status s = sn_newfile_json(path, "config.json", r, e);
    json_object_put(r);
    return s;
}
#endif

/* The tensors to write, in the order of c's model's parameters, each checked against w; w holds
 * nothing else. */
static sn_status tensors(const sn_llama_config *c, const sn_weights *w, const sn_graph *g,
                         sn_st_out *t, int *n, sn_err *e) {
    *n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM) continue;
        const sn_weight *x = sn_weights_find(w, p->name);
        bool same = x && x->rank == p->rank && x->shape[0] == p->shape[0] && (p->rank < 2 || x->shape[1] == p->shape[1]);
        if (!same) {
            char need[64];
            sn_shape_str(p->rank, p->shape, need, sizeof need);
            return sn_fail(e, SN_ERR_INVALID, "the weights to export %s %s %s, which %s with %d "
                           "layers has", x ? "hold" : "have no", p->name, x ? "of another shape than"
                           : "", c->name, c->n_layer);
        }
        t[(*n)++] = (sn_st_out){.name = x->name, .rank = x->rank, .shape = x->shape, .data = x->data};
    }
    if (*n != w->n)
        for (int i = 0; i < w->n; i++) {
            bool known = false;
            for (int k = 0; k < *n && !known; k++) known = !strcmp(t[k].name, w->w[i].name);
            if (!known)
                return sn_fail(e, SN_ERR_INVALID, "the weights to export hold %s, which is not a "
                               "parameter of %s with %d layers", w->w[i].name, c->name, c->n_layer);
        }
    return SN_OK;
}

sn_status sn_hf_llama_write(const sn_llama_config *c, const sn_weights *w, const char *dir, sn_err *e) {
    sn_graph *g = sn_graph_new();
    sn_llama m;
    if (!g) return sn_fail_oom(e, sizeof(sn_graph), "the model's graph");
    sn_status s = sn_llama_build(g, c, 1, 1, &m, e);
    sn_st_out *t = s ? NULL : sn_calloc((size_t)w->n + 1, sizeof *t, "the tensors to export", e);
    int n = 0;
    if (!s && !t) s = SN_ERR_OOM;
    if (!s) s = tensors(c, w, g, t, &n, e);
    char config[4200], model[4200];
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    if (!s) s = sn_newfile_dir(dir, config, model, e);
#ifndef SN_HAVE_JSONC
    if (!s)
        s = sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it writes no "
                    "Hugging Face models: install libjson-c-dev and rebuild (./setup)", dir);
#else
    if (!s && !(s = write_config(c, config, e)) && (s = sn_st_write(model, t, n, e)))
        unlink(config); /* this call made it: no half-exported directory stays */
#endif
    free(t);
    sn_graph_free(g);
    return s;
}
