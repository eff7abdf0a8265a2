/* peft.c: a LoRA checkpoint's adapters as a PEFT LoRA adapter (weights.h, sn_lora_write_peft):
 * adapter_config.json and adapter_model.safetensors, for peft's PeftModel.from_pretrained on
 * transformers' model of the base weights (GPT2LMHeadModel, LlamaForCausalLM: the model the run
 * started from with --init-hf). Convention: sinter's adapter of a layer is A (in, r) and
 * B (r, out), the layer's output gaining x A B alpha/r. PEFT's is lora_A.weight (r, in) and
 * lora_B.weight (out, r), Linear layouts: A and B transposed; GPT-2's Conv1D weights (in, out)
 * take fan_in_fan_out (W + (lora_B lora_A)^T alpha/r), LLaMA's Linear (out, in) do not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "train/checkpoint.h"
#include "io_int.h"
#include "safetensors.h"
#include "weights.h"

enum { MAX_ADAPTED = 1024 };

static const sn_ckpt_param *find(const sn_ckpt_weights *cw, const char *name) {
    for (int i = 0; i < cw->n; i++)
        if (!strcmp(cw->params[i].name, name)) return &cw->params[i];
    return NULL;
}

/* m (rows, cols) transposed into a new array (cols, rows); NULL when out of memory */
static float *transposed(const float *m, int64_t rows, int64_t cols) {
    float *t = malloc(sizeof(float) * (size_t)(rows * cols) + 4);
    for (int64_t i = 0; t && i < rows; i++)
        for (int64_t j = 0; j < cols; j++) t[j * rows + i] = m[i * cols + j];
    return t;
}

#ifdef SN_HAVE_JSONC
sn_status sn_peft_write_files(const char *dir, struct json_object *config, const sn_st_out *t, int n,
                              sn_err *e) {
    char cpath[4200], mpath[4200];
    snprintf(cpath, sizeof cpath, "%s/adapter_config.json", dir);
    snprintf(mpath, sizeof mpath, "%s/adapter_model.safetensors", dir);
    sn_status s = sn_newfile_dir(dir, cpath, mpath, e);
    if (!s && !(s = sn_newfile_json(cpath, "adapter_config.json", config, e)) && (s = sn_st_write(mpath, t, n, e)))
        unlink(cpath); /* this call made it: no half-written adapter stays */
    return s;
}

/* LoRA's adapter_config.json */
static json_object *lora_config(int r, float alpha, char (*modules)[160], int n, bool conv1d) {
    json_object *c = json_object_new_object(), *t = json_object_new_array();
    for (int i = 0; i < n; i++) json_object_array_add(t, json_object_new_string(modules[i]));
    json_object_object_add(c, "peft_type", json_object_new_string("LORA"));
    json_object_object_add(c, "task_type", json_object_new_string("CAUSAL_LM"));
    json_object_object_add(c, "base_model_name_or_path", NULL);
    json_object_object_add(c, "r", json_object_new_int(r));
    json_object_object_add(c, "lora_alpha", json_object_new_double(alpha));
    json_object_object_add(c, "lora_dropout", json_object_new_double(0.0));
    json_object_object_add(c, "fan_in_fan_out", json_object_new_boolean(conv1d)); /* GPT-2's Conv1D */
    json_object_object_add(c, "bias", json_object_new_string("none"));
    json_object_object_add(c, "target_modules", t);
    json_object_object_add(c, "inference_mode", json_object_new_boolean(1));
    return c;
}
#endif

/* The adapters of cw, transposed, named as PEFT names them; their modules; the rank. */
static sn_status adapters(const char *path, const sn_ckpt_weights *cw, sn_st_out *t, char (*names)[192],
                          int64_t (*shapes)[2], char (*modules)[160], int *n, int *rank, sn_err *e) {
    *n = 0;
    for (int i = 0; i < cw->n; i++) {
        const char *an = cw->params[i].name;
        size_t len = strlen(an);
        if (len < 8 || len > 120 || strcmp(an + len - 7, ".lora_a")) continue;
        char prefix[128], bn[136];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 7), an);
        snprintf(bn, sizeof bn, "%s.lora_b", prefix);
        const sn_ckpt_param *a = &cw->params[i], *b = find(cw, bn);
        if (!b || a->rank != 2 || b->rank != 2 || a->shape[1] != b->shape[0] ||
            (*rank && a->shape[1] != *rank))
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the LoRA adapter of %s is not an A "
                           "(in, r) and a B (r, out) of the run's one rank: the file is damaged",
                           path, prefix);
        if (*n == MAX_ADAPTED)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "checkpoint %s: more than %d adapted layers",
                           path, MAX_ADAPTED);
        *rank = (int)a->shape[1];
        int k = *n;
        /* GPT-2's names are the transformer's ("h.0.attn.c_attn"); the LLaMA family's are
           transformers' own ("model.layers.0.self_attn.q_proj") */
        const char *under = strncmp(prefix, "model.", 6) ? "transformer." : "";
        snprintf(modules[k], sizeof modules[k], "%s%s", under, prefix);
        const sn_ckpt_param *ab[2] = {a, b};
        for (int h = 0; h < 2; h++) { /* lora_A (r, in) = A^T; lora_B (out, r) = B^T */
            int j = 2 * k + h;
            snprintf(names[j], sizeof names[j], "base_model.model.%s.lora_%c.weight", modules[k],
                     h ? 'B' : 'A');
            shapes[j][0] = ab[h]->shape[1];
            shapes[j][1] = ab[h]->shape[0];
            float *d = transposed(ab[h]->w, ab[h]->shape[0], ab[h]->shape[1]);
            if (!d) return sn_fail_oom(e, sizeof(float) * (size_t)(shapes[j][0] * shapes[j][1]), "an adapter");
            t[j] = (sn_st_out){.name = names[j], .rank = 2, .shape = shapes[j], .data = d};
        }
        (*n)++;
    }
    return *n ? SN_OK : sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds no LoRA adapters: export "
                                "its model with --to DIR", path);
}

sn_status sn_lora_write_peft(const char *path, const char *dir, const sn_export_opts *o,
                             int *n_adapted, sn_err *e) {
#ifndef SN_HAVE_JSONC
    (void)path, (void)o, (void)n_adapted;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it writes no "
                   "PEFT adapters: install libjson-c-dev and rebuild (./setup)", dir);
#else
    sn_ckpt_weights cw;
    sn_status s = sn_checkpoint_read_weights(path, &cw, e);
    if (s) return s;
    for (int i = 0; i < cw.n; i++)
        if (sn_ia3_is_vector(cw.params[i].name)) { /* a run of --ia3: PEFT's IA3 adapter */
            s = sn_ia3_write_peft(path, &cw, dir, n_adapted, e);
            sn_ckpt_weights_free(&cw);
            return s;
        }
    float alpha = o && o->lora_alpha > 0 ? o->lora_alpha : (float)sn_run_lora_alpha(&cw.run);
    sn_st_out *t = sn_calloc(2 * MAX_ADAPTED, sizeof *t, "the adapters", e);
    char (*names)[192] = sn_calloc(2 * MAX_ADAPTED, sizeof *names, "the adapters' names", e);
    int64_t (*shapes)[2] = sn_calloc(2 * MAX_ADAPTED, sizeof *shapes, "the adapters' shapes", e);
    char (*modules)[160] = sn_calloc(MAX_ADAPTED, sizeof *modules, "the adapted modules", e);
    int n = 0, rank = 0;
    if (!t || !names || !shapes || !modules) s = SN_ERR_OOM;
    if (!s) s = adapters(path, &cw, t, names, shapes, modules, &n, &rank, e);
    if (!s && !(alpha > 0))
        s = sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds LoRA adapters and does not say their "
                    "alpha: give it (sinter export --lora-alpha ALPHA, as given to --lora-alpha in "
                    "training; R when it was not)", path);
    bool conv1d = n && !strncmp(modules[0], "transformer.", 12); /* GPT-2's; LLaMA's are Linear */
    if (!s) {
        json_object *config = lora_config(rank, alpha, modules, n, conv1d);
        s = sn_peft_write_files(dir, config, t, 2 * n, e);
        json_object_put(config);
    }
    for (int j = 0; t && j < 2 * n; j++) free((void *)t[j].data);
    free(t);
    free(names);
    free(shapes);
    free(modules);
    sn_ckpt_weights_free(&cw);
    if (!s && n_adapted) *n_adapted = n;
    return s;
#endif
}
