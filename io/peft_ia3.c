/* peft_ia3.c: an IA3 checkpoint's vectors as a PEFT IA3 adapter (weights.h, sn_lora_write_peft
 * calls it for a checkpoint of --ia3): adapter_config.json (peft_type "IA3", target_modules,
 * feedforward_modules) and adapter_model.safetensors. Convention: PEFT's vector of a module M is
 * "base_model.model.M.ia3_l", (out, 1) scaling M's output, or (1, in) scaling the input of a
 * feedforward module; GPT-2's fused c_attn scales q too in PEFT, so its (3C, 1) vector is ones
 * for q and then sinter's (2C) keys' and values' vector. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "frontend/ia3.h"
#include "io_int.h"
#include "safetensors.h"

#ifdef SN_HAVE_JSONC
enum { MAX_VECTORS = 1024 };

typedef struct {
    char module[160]; /* transformers' name: "transformer.h.0.attn.c_attn" */
    char name[192];   /* the tensor's */
    int64_t shape[2];
    bool ff;          /* scales the module's input */
} vec;

/* IA3's adapter_config.json */
static json_object *ia3_config(const vec *v, int n, bool conv1d) {
    json_object *c = json_object_new_object(), *t = json_object_new_array(), *f = json_object_new_array();
    for (int i = 0; i < n; i++) {
        json_object_array_add(t, json_object_new_string(v[i].module));
        if (v[i].ff) json_object_array_add(f, json_object_new_string(v[i].module));
    }
    json_object_object_add(c, "peft_type", json_object_new_string("IA3"));
    json_object_object_add(c, "task_type", json_object_new_string("CAUSAL_LM"));
    json_object_object_add(c, "base_model_name_or_path", NULL);
    json_object_object_add(c, "target_modules", t);
    json_object_object_add(c, "feedforward_modules", f);
    json_object_object_add(c, "fan_in_fan_out", json_object_new_boolean(conv1d)); /* GPT-2's Conv1D */
    json_object_object_add(c, "init_ia3_weights", json_object_new_boolean(1));
    json_object_object_add(c, "inference_mode", json_object_new_boolean(1));
    return c;
}

/* The vectors of cw in PEFT's layout into v and t (data allocated); *n of them. */
static sn_status vectors(const char *path, const sn_ckpt_weights *cw, vec *v, sn_st_out *t, int *n,
                         sn_err *e) {
    *n = 0;
    for (int i = 0; i < cw->n; i++) {
        const sn_ckpt_param *p = &cw->params[i];
        if (!sn_ia3_is_vector(p->name)) continue;
        size_t len = strlen(p->name) - strlen(".ia3_l");
        if (*n == MAX_VECTORS || len > 120 || p->rank != 1)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the IA3 vector %s is not one of a "
                           "module sinter knows (or more than %d): the file is damaged", path,
                           p->name, MAX_VECTORS);
        vec *x = &v[*n];
        bool gpt2 = strncmp(p->name, "model.", 6) != 0;
        snprintf(x->module, sizeof x->module, "%s%.*s", gpt2 ? "transformer." : "", (int)len, p->name);
        snprintf(x->name, sizeof x->name, "base_model.model.%s.ia3_l", x->module);
        len = strlen(x->module);
        x->ff = (len >= 10 && !strcmp(x->module + len - 10, "mlp.c_proj")) ||
                (len >= 13 && !strcmp(x->module + len - 13, "mlp.down_proj"));
        int64_t m = p->shape[0], pad = 0; /* pad: GPT-2 c_attn's q channels, ones */
        if (gpt2 && !x->ff) {
            if (m % 2)
                return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the IA3 vector %s has %lld "
                               "channels, not the keys' and values' 2C: the file is damaged", path,
                               p->name, (long long)m);
            pad = m / 2;
        }
        x->shape[0] = x->ff ? 1 : pad + m;
        x->shape[1] = x->ff ? pad + m : 1;
        float *d = malloc(sizeof(float) * (size_t)(pad + m) + 4);
        if (!d) return sn_fail_oom(e, sizeof(float) * (size_t)(pad + m), "an IA3 vector");
        for (int64_t k = 0; k < pad; k++) d[k] = 1.0f;
        memcpy(d + pad, p->w, sizeof(float) * (size_t)m);
        t[(*n)++] = (sn_st_out){.name = x->name, .rank = 2, .shape = x->shape, .data = d};
    }
    return SN_OK;
}
#endif

sn_status sn_ia3_write_peft(const char *path, const sn_ckpt_weights *cw, const char *dir,
                            int *n_vectors, sn_err *e) {
#ifndef SN_HAVE_JSONC
    (void)path, (void)cw, (void)n_vectors;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it writes no "
                   "PEFT adapters: install libjson-c-dev and rebuild (./setup)", dir);
#else
    vec *v = sn_calloc(MAX_VECTORS, sizeof *v, "the IA3 vectors", e);
    sn_st_out *t = sn_calloc(MAX_VECTORS, sizeof *t, "the IA3 vectors", e);
    int n = 0;
    sn_status s = v && t ? vectors(path, cw, v, t, &n, e) : SN_ERR_OOM;
    if (!s) {
        bool conv1d = !strncmp(v[0].module, "transformer.", 12); /* GPT-2's; LLaMA's are Linear */
        json_object *config = ia3_config(v, n, conv1d);
        s = sn_peft_write_files(dir, config, t, n, e);
        json_object_put(config);
    }
    for (int j = 0; t && j < n; j++) free((void *)t[j].data);
    free(t);
    free(v);
    if (!s && n_vectors) *n_vectors = n;
    return s;
#endif
}
