/* gpt2.h: GPT-2 written against the frontend API, with the published configurations.
 * Convention: parameters are named as in llm.c / Hugging Face ("wte", "h.0.attn.c_attn.w" ...),
 * weights are stored (in, out) so a layer is x @ w, and the LM head is tied to wte. */
#ifndef SN_GPT2_H
#define SN_GPT2_H

#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "frontend/frontend.h"

typedef struct {
    const char *name;
    int vocab;   /* V */
    int ctx;     /* maximum sequence length */
    int n_layer; /* L */
    int n_head;  /* H */
    int n_embd;  /* C */
    float dropout; /* training's dropout probability (nanoGPT's places: the embeddings' sum, the
                      attention's and the MLP's output before each residual add); 0: none. The
                      generation graphs (sn_gpt2_build_kv) have none */
} sn_gpt2_config;

/* Looks up "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "demo" or "tiny"; false if unknown. */
bool sn_gpt2_config_find(const char *name, sn_gpt2_config *out);
/* The known names, comma-separated, for usage messages. */
const char *sn_gpt2_config_names(void);

typedef struct {
    sn_node *idx;     /* (B, T) i32 input tokens */
    sn_node *targets; /* (B, T) i32 next tokens; -1 is ignored */
    sn_node *logits;  /* (B, T, V) */
    sn_node *loss;    /* scalar, mean cross-entropy in nats */
} sn_gpt2;

/* Builds the forward graph for batches of B sequences of T tokens (T <= ctx) into g and marks
 * logits and loss as outputs. */
sn_status sn_gpt2_build(sn_graph *g, const sn_gpt2_config *c, int B, int T, sn_gpt2 *out, sn_err *e);

/* LoRA fine-tuning (frontend/lora.h): which layers get an adapter beside their x @ w. */
enum {
    SN_GPT2_LORA_ATTN = 1, /* h.N.attn.c_attn (q, k, v together) and h.N.attn.c_proj */
    SN_GPT2_LORA_MLP = 2,  /* h.N.mlp.c_fc and h.N.mlp.c_proj */
    SN_GPT2_LORA_ALL = 3,
};
typedef struct {
    sn_lora lora;     /* rank and alpha */
    unsigned targets; /* SN_GPT2_LORA_* bits */
    bool ia3;         /* (IA)^3 vectors (frontend/ia3.h) instead of LoRA: lora and targets zero */
} sn_gpt2_lora;

/* "attn", "mlp" or "all" into *targets; false for anything else. */
bool sn_gpt2_lora_targets_parse(const char *s, unsigned *targets);
const char *sn_gpt2_lora_targets_name(unsigned targets);

/* sn_gpt2_build with LoRA adapters (lora != NULL): each targeted layer's x @ w + b gains
 * (x @ A) @ B * alpha/r, and every other parameter (embeddings, layer norms, weights and
 * biases) is frozen, so only the adapters train and the model starts equal to the base.
 * With lora->ia3, IA3 vectors instead: each layer's keys and values (c_attn's outputs C..3C) are
 * scaled by "h.N.attn.c_attn.ia3_l" (2C: the keys' C, then the values'), the MLP's GELU output by
 * "h.N.mlp.c_proj.ia3_l" (4C), all ones at first; the rest frozen. */
sn_status sn_gpt2_build_lora(sn_graph *g, const sn_gpt2_config *c, int B, int T,
                             const sn_gpt2_lora *lora, sn_gpt2 *out, sn_err *e);

/* The two graphs of generation with a KV cache, as train/generate.h describes them, with the
 * parameters of sn_gpt2_build_lora (lora may be NULL). decode false: the prefill, B sequences of
 * T tokens at positions 0..T-1 (INPUT "idx"); decode true: T new tokens per row (INPUT "idx")
 * at positions "pos" (i32 (B, T)), reading each layer N's cache "k_cache.N" and "v_cache.N"
 * (f32 (B, H, ctx, D), D = C / H) where "mask" (f32 (B, 1, 1, ctx)) is 0, and each other. The
 * outputs: h.0's k and v (B, H, T, D), h.1's ..., then the logits (B, T, V). No loss. */
sn_status sn_gpt2_build_kv(sn_graph *g, const sn_gpt2_config *c, int B, int T, bool decode,
                           const sn_gpt2_lora *lora, sn_err *e);

#endif
