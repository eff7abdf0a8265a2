/* llama.h: a LLaMA-style decoder written against the installed sinter API alone: RMSNorm,
 * rotary position embeddings, grouped-query attention, a SwiGLU MLP, no biases, an untied head.
 * Convention: parameters are named as in Meta's checkpoints ("layers.0.attention.wq"), weights
 * are stored (in, out) so a layer is x @ w. */
#ifndef LLAMA_H
#define LLAMA_H

#include <sinter.h>

typedef struct {
    int ctx;        /* longest sequence */
    int n_layer;    /* L */
    int n_head;     /* H: query heads */
    int n_kv_head;  /* key/value heads; divides H (H / n_kv_head query heads share one) */
    int dim;        /* C = H * D, D even (rotary pairs) */
    int hidden;     /* the SwiGLU MLP's width */
    float rope_theta; /* rotary base, 10000 */
    float norm_eps;   /* RMSNorm's epsilon */
} llama_config;

/* A small configuration with about the parameters of sinter's demo GPT-2 (byte-level). */
llama_config llama_config_small(void);

/* sn_model's build: the forward graph of B sequences of T tokens over V ids into g, with inputs
 * the tokens and the targets (B, T), the logits (B, T, V) as output and the loss. user: llama_config. */
sn_status llama_build(sn_graph *g, int B, int T, int V, void *user, sn_err *e);

/* Rotary position embeddings: x (.., T, D), D even, with each pair (x[i], x[i + D/2]) turned
 * by the angle t * theta^(-2i/D) of its position t (the "rotate half" layout). */
sn_node *llama_rope(sn_graph *g, sn_node *x, float theta);
/* Grouped-query attention's keys or values: kv (B, Hkv, T, D) -> (B, Hkv * groups, T, D), query
 * head h reading key/value head h / groups. Written as reshape, broadcast, reshape: sinter's
 * attention pass folds it when attention reads it, so the repeat is never materialised. */
sn_node *llama_repeat_kv(sn_graph *g, sn_node *kv, int groups);

/* "4 layers, 4/2 heads, dim 128, hidden 384, ctx 128": the checkpoint's model.shape. */
void llama_describe(const llama_config *c, char *buf, size_t len);

#endif
