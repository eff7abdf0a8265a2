/* hf_llama.h: Hugging Face LLaMA-family checkpoints (LlamaForCausalLM, Qwen2ForCausalLM) into
 * sinter and back: config.json into models/llama.h's configuration, model.safetensors or a
 * sharded model.safetensors.index.json into a weight set (weights.h) under the model's parameter
 * names; and the same files written from a configuration and a weight set.
 * Convention: the model's parameters carry transformers' names and layouts, so the import
 * renames and transposes nothing; every name and shape is checked against the model built from
 * config.json, and anything missing, extra or misshapen is refused naming the tensor.
 *
 *     sn_llama_config c;  sn_weights w;
 *     if (sn_hf_llama_read("SmolLM2-135M/", &c, &w, &e)) ...
 *     sn_llama_build(g, &c, B, T, &m, &e);   // then sn_weights_fill each parameter
 */
#ifndef SN_HF_LLAMA_H
#define SN_HF_LLAMA_H

#include "models/llama.h"
#include "weights.h"

/* Whether dir/config.json names a LLaMA-family model (model_type "llama" or "qwen2", or such an
 * architecture); false also when it cannot be read (the GPT-2 reader then says why). */
bool sn_hf_is_llama(const char *dir);

/* dir/config.json into *c (c->name: a built-in name of llama.h with that shape, else
 * "llama-custom"; static storage). An architecture or a field value the model cannot express
 * (rope scaling other than llama3, biases, another activation, sliding windows ...) is
 * SN_ERR_UNSUPPORTED naming the field. */
sn_status sn_hf_llama_read_config(const char *dir, sn_llama_config *c, sn_err *e);

/* The configuration and every tensor, checked whole; out's GPT-2 config is unused (zero). A tied
 * model's file may hold lm_head.weight only equal to embed_tokens. */
sn_status sn_hf_llama_read(const char *dir, sn_llama_config *c, sn_weights *out, sn_err *e);

/* dir/config.json (transformers 4's fields: rope_theta and rope_scaling, which transformers 5
 * reads too) and dir/model.safetensors (F32, the model's parameters in its order, no lm_head
 * when tied) for transformers' LlamaForCausalLM or Qwen2ForCausalLM. w must hold exactly the
 * parameters of c's model with their shapes (the real vocabulary, no padding). dir is made when
 * missing; files in it are never replaced (SN_ERR_IO naming the file). */
sn_status sn_hf_llama_write(const sn_llama_config *c, const sn_weights *w, const char *dir, sn_err *e);

/* A checkpoint of `sinter train` (hf_llama_ckpt.c): when its metadata names a built-in
 * LLaMA-family shape, *is_llama is set and *c, *out are that model (vocab: the real vocabulary,
 * 0: its tokenizer's) with the padding rows dropped; else *is_llama is false and nothing is
 * read into out. */
sn_status sn_hf_llama_from_checkpoint(const char *path, int vocab, bool *is_llama, sn_llama_config *c,
                                      sn_weights *out, sn_err *e);

#endif
