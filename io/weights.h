/* weights.h: pretrained GPT-2 weights in and out of sinter: Hugging Face directories (config.json
 * and model.safetensors, or a sharded model.safetensors.index.json; hf_gpt2.c), llm.c's .bin
 * (llmc.c), sinter checkpoints (export.c), and into a trainer or a compiled program by name.
 * Convention: an sn_weights holds every GPT-2 parameter under sinter's name (models/gpt2.h: "wte",
 * "h.0.attn.c_attn.w" ...) as f32 on the host, in sinter's layout (weights (in, out)) with the
 * real vocabulary's rows only (no padding); formats translate names, layouts and dtypes at
 * their edge, and every reader checks the whole file before it returns.
 *
 *     sn_weights w;
 *     if (sn_weights_read("gpt2-hf/", &w, &e)) ...        // or "gpt2_124M.bin"
 *     sn_weights_init_trainer(&w, trainer, V, NULL, &e);   // the model built from w.config
 *     sn_weights_write_hf(&w, "out/", &e);  sn_weights_free(&w);
 */
#ifndef SN_WEIGHTS_H
#define SN_WEIGHTS_H

#include "models/gpt2.h"
#include "train/train.h"

typedef struct {
    char *name;       /* sinter's */
    int rank;         /* 1 or 2 */
    int64_t shape[2];
    float *data;      /* numel floats */
} sn_weight;

typedef struct {
    sn_gpt2_config config; /* config.name points at name */
    char name[64];         /* "gpt2" when the shape is a published one, else "gpt2-custom" */
    int n;
    sn_weight *w;          /* in the model's parameter order */
} sn_weights;

void sn_weights_free(sn_weights *w);
const sn_weight *sn_weights_find(const sn_weights *w, const char *name);

/* The GPT-2 parameters of config c in graph order, with their shapes: name i into buf (len
 * bytes), shape into shape[2], rank returned; 0 past the last (i >= sn_gpt2_param_count). */
int sn_gpt2_param_count(const sn_gpt2_config *c);
int sn_gpt2_param_at(const sn_gpt2_config *c, int i, char *buf, size_t len, int64_t shape[2]);

/* The published configuration's name (models/gpt2.h) when c has its shape, else "gpt2-custom";
 * static storage. */
const char *sn_gpt2_published_name(const sn_gpt2_config *c);
/* An empty set for config c (name: sn_gpt2_published_name). */
void sn_weights_init(sn_weights *w, const sn_gpt2_config *c);
/* Appends a tensor (copies name; takes data, which the set frees, also on failure). */
sn_status sn_weights_add(sn_weights *w, const char *name, int rank, const int64_t *shape,
                         float *data, sn_err *e);
/* Every parameter of w->config is in w with its shape, and nothing else (the first one that
 * is not named, with from, "config.json" or the file, in the message). */
sn_status sn_weights_check(const sn_weights *w, const char *from, sn_err *e);

/* ---- reading (hf_gpt2.c, llmc.c) ---- */

/* Reads path: a directory is a Hugging Face GPT-2 checkpoint, a file llm.c's .bin. The config
 * (config.json or the .bin's header) is checked first: a model sinter's GPT-2 cannot express is
 * SN_ERR_UNSUPPORTED naming the field. Then every tensor: a missing, extra or misshapen one,
 * or a dtype other than F32, BF16, F16, is an error naming it. */
sn_status sn_weights_read(const char *path, sn_weights *out, sn_err *e);
/* The configuration only (config.json, or the .bin's 1 KiB header): c->name points at a
 * static published name or "gpt2-custom". */
sn_status sn_weights_read_config(const char *path, sn_gpt2_config *c, sn_err *e);

sn_status sn_hf_gpt2_read_config(const char *dir, sn_gpt2_config *c, sn_err *e);
sn_status sn_hf_gpt2_read(const char *dir, sn_weights *out, sn_err *e);
/* llm.c's model file: 256 int32 (magic 20240326, version 3: f32 or 5: bf16, maxT, V, L, H, C,
 * Vp), then wte (Vp, C), wpe, and per kind for every layer, Linear weights (out, in). */
sn_status sn_llmc_read_config(const char *path, sn_gpt2_config *c, sn_err *e);
sn_status sn_llmc_read(const char *path, sn_weights *out, sn_err *e);

/* ---- writing: new files only, never replacing one (hf_gpt2.c, llmc.c) ---- */

/* dir/config.json and dir/model.safetensors (F32, "transformer." names, Conv1D (in, out)
 * weights, no lm_head: transformers ties it), for transformers' GPT2LMHeadModel. dir is made
 * when missing; existing files in it are never replaced (SN_ERR_IO naming the file). */
sn_status sn_weights_write_hf(const sn_weights *w, const char *dir, sn_err *e);
/* llm.c's version 3 (f32), the vocabulary padded to a multiple of 128 with zero rows. */
sn_status sn_weights_write_llmc(const sn_weights *w, const char *path, sn_err *e);

/* ---- into a model (export.c) ---- */

/* Fills dst (numel(p) floats) with the weights of parameter p, matched by name: p's shape, or,
 * when w's table has vocab rows (the model's real vocabulary), p's with more (the pad_vocab
 * pass's padding), whose extra rows are zeros. A parameter w lacks or holds with another shape:
 * SN_ERR_INVALID naming it. */
sn_status sn_weights_fill(const sn_weights *w, const sn_node *p, int64_t vocab, float *dst, sn_err *e);

/* A new run from pretrained weights: every parameter of t is set from w (sn_weights_fill),
 * except LoRA adapters (frontend/lora.h), which keep their initialisation (their count in
 * *fresh, may be NULL); w may hold nothing t lacks. Checked whole before the first copy. An
 * NF4 parameter (QLoRA's base: train.h) gets the weights quantized. */
sn_status sn_weights_init_trainer(const sn_weights *w, sn_trainer *t, int64_t vocab, int *fresh,
                                  sn_err *e);

/* ---- from a checkpoint (export.c) ---- */

typedef struct {
    int vocab;        /* the real vocabulary (0: from the checkpoint's tokenizer) */
    float lora_alpha; /* LoRA's alpha when merging (0: from the checkpoint's model.shape) */
} sn_export_opts;

/* A GPT-2 checkpoint's weights (sinter train --checkpoint): the configuration from its
 * metadata and shapes, the padded vocabulary rows dropped, LoRA adapters merged into the
 * weights they adapt (W += A @ B * alpha / r), IA3 vectors into the weights they scale (io_int.h,
 * sn_ia3_merge); *merged (may be NULL): adapters and vectors merged. */
sn_status sn_weights_from_checkpoint(const char *path, const sn_export_opts *o, sn_weights *out,
                                     int *merged, sn_err *e);

/* A LoRA checkpoint's adapters, not merged, as a PEFT LoRA adapter in dir (made when missing;
 * files never replaced): adapter_config.json (r, lora_alpha, the adapted modules by name,
 * fan_in_fan_out for GPT-2's Conv1D) and adapter_model.safetensors (f32); *n_adapted (may be
 * NULL): the layers adapted. A checkpoint of IA3 vectors (frontend/ia3.h) is written as PEFT's
 * IA3 adapter (peft_type "IA3", the vectors "...M.ia3_l"); *n_adapted: the vectors. */
sn_status sn_lora_write_peft(const char *path, const char *dir, const sn_export_opts *o,
                             int *n_adapted, sn_err *e);

#endif
