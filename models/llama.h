/* llama.h: a LLaMA-family decoder (LlamaForCausalLM; Qwen2's q/k/v biases as a switch) written
 * against the frontend API, built from a configuration that mirrors Hugging Face's config.json.
 * Convention: parameters carry transformers' own names ("model.layers.0.self_attn.q_proj.weight")
 * and layouts (Linear weights (out, in), a layer is x @ w^T), so an import renames nothing and
 * transposes nothing; rotary embeddings use the half-split ("rotate_half") layout. */
#ifndef SN_LLAMA_H
#define SN_LLAMA_H

#include "frontend/sinter.h"
#include "gpt2.h" /* sn_gpt2_lora: LoRA's shape and targets, shared */

typedef struct {
    const char *name;
    int vocab;        /* V */
    int ctx;          /* longest sequence (max_position_embeddings) */
    int n_layer;      /* L */
    int n_head;       /* H: query heads */
    int n_kv_head;    /* key/value heads, dividing H (grouped-query attention) */
    int head_dim;     /* D, even (rotary pairs); usually hidden / H */
    int hidden;       /* C */
    int intermediate; /* F: the SwiGLU MLP's width */
    float rms_norm_eps;
    float rope_theta;
    /* llama3 rope scaling (rope_scaling.rope_type "llama3"); rope_factor 0: none */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_ctx;
    bool tie_word_embeddings; /* the LM head is embed_tokens; no lm_head.weight */
    bool qkv_bias;            /* Qwen2: q_proj, k_proj and v_proj have biases */
} sn_llama_config;

/* Looks up a built-in shape: "smollm2-135m", "smollm2-360m", "tinyllama-1.1b", "llama-3.2-1b",
 * "qwen2.5-0.5b", "llama-tiny" (tests); false if unknown. */
bool sn_llama_config_find(const char *name, sn_llama_config *out);
/* The i-th built-in shape (from 0); false past the last. */
bool sn_llama_config_at(int i, sn_llama_config *out);
/* The known names, comma-separated, for usage messages. */
const char *sn_llama_config_names(void);
/* SN_OK when the model can be built from c (heads divide, head_dim even, sizes positive), else
 * SN_ERR_INVALID naming the field. */
sn_status sn_llama_config_check(const sn_llama_config *c, sn_err *e);
/* c as text, every field but the name ("vocab=V ctx=N layers=L ... qkv_bias=0", floats exact
 * in hexadecimal): a checkpoint's "model.config" for a config.json's own shape (no built-in
 * name holds it). Returns snprintf's count. */
int sn_llama_config_format(const sn_llama_config *c, char *buf, size_t len);
/* The configuration of such a text, named "llama-custom" and checked (sn_llama_config_check);
 * SN_ERR_INVALID saying the file is damaged when the text is not one sinter writes. */
sn_status sn_llama_config_parse(const char *text, sn_llama_config *out, sn_err *e);

typedef struct {
    sn_node *idx;     /* (B, T) i32 input tokens */
    sn_node *targets; /* (B, T) i32 next tokens; -1 is ignored */
    sn_node *logits;  /* (B, T, V) */
    sn_node *loss;    /* scalar, mean cross-entropy in nats */
} sn_llama;

/* Builds the forward graph for B sequences of T tokens (T <= ctx) into g, marks logits and loss
 * as outputs and loss as g->loss. */
sn_status sn_llama_build(sn_graph *g, const sn_llama_config *c, int B, int T, sn_llama *out, sn_err *e);

/* LoRA adapters (frontend/lora.h) beside the projections of targets: SN_GPT2_LORA_ATTN (q, k, v,
 * o_proj), SN_GPT2_LORA_MLP (gate, up, down_proj), both (SN_GPT2_LORA_ALL); the words of
 * sn_gpt2_lora_targets_parse. Adapter names: the projection's prefix (".lora_a", ".lora_b"),
 * e.g. model.layers.0.self_attn.q_proj.lora_a (in, r). */
typedef sn_gpt2_lora sn_llama_lora;
/* With lora->ia3, IA3 vectors (frontend/ia3.h) instead of adapters: k_proj's and v_proj's
 * outputs (Hkv D, before the rotation: what merging into their weights gives) scaled by
 * "model.layers.N.self_attn.k_proj.ia3_l" and "...v_proj.ia3_l", down_proj's input
 * act(gate) * up (F) by "model.layers.N.mlp.down_proj.ia3_l", as PEFT's IA3 scales them.
 * sn_llama_build with adapters or vectors (NULL: none); every other parameter frozen. */
sn_status sn_llama_build_lora(sn_graph *g, const sn_llama_config *c, int B, int T,
                              const sn_llama_lora *lora, sn_llama *out, sn_err *e);

/* The two graphs of generation with a KV cache, as train/generate.h describes them. decode
 * false: the prefill, B sequences of T tokens at positions 0..T-1 (INPUT "idx"); decode true: T
 * new tokens per row (INPUT "idx") at positions "pos" (i32 (B, T)), reading each layer N's cache
 * "k_cache.N" and "v_cache.N" (f32 (B, Hkv, ctx, D), keys rotated) where "mask" (f32
 * (B, 1, 1, ctx)) is 0, and each other. The outputs: layer 0's rotated k and v (B, Hkv, T, D),
 * layer 1's ..., then the logits (B, T, V). No loss. */
sn_status sn_llama_build_kv(sn_graph *g, const sn_llama_config *c, int B, int T, bool decode, sn_err *e);
/* The same with a run's LoRA adapters (unmerged) beside the projections they target. */
sn_status sn_llama_build_kv_lora(sn_graph *g, const sn_llama_config *c, int B, int T, bool decode,
                                 const sn_llama_lora *lora, sn_err *e);

/* The rotary angles' frequencies: inv_freq[i] for the pair (i, i + D/2), i < D/2, with the
 * llama3 scaling when c has it (as transformers' rope initialisation computes them). */
void sn_llama_inv_freq(const sn_llama_config *c, double *inv_freq);

#endif
