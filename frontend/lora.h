/* lora.h: LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models")
 * beside any x @ W of a model written with sinter.h. Convention: an adapter of the layer named
 * P is two parameters, "P.lora_a" (in, r) and "P.lora_b" (r, out); the layer's output gains
 * (x @ A) @ B * alpha/r, B starts at zeros (so the adapted model starts equal to the base) and
 * every parameter that is not an adapter is frozen by sn_lora_freeze_base. */
#ifndef SN_LORA_H
#define SN_LORA_H

#include "sinter.h"

typedef struct {
    int rank;    /* r >= 1 */
    float alpha; /* the path is scaled by alpha / r (the paper's convention); alpha = r: 1 */
} sn_lora;

/* The low-rank path of the layer named prefix for x (..., in): (x @ A) @ B * alpha/r, (..., out).
 * A is N(0, 1/sqrt(in)) so that x @ A keeps x's scale; B is zeros. The scale is applied to the
 * (..., r) product, the narrowest tensor of the path. NULL (the graph's error set) when the
 * prefix is too long for the names. */
sn_node *sn_lora_path(sn_graph *g, sn_node *x, const char *prefix, int64_t in, int64_t out,
                      const sn_lora *l);

/* The adapter's parameters of the layer named prefix, as sn_lora_path makes them: *a (in, r),
 * N(0, 1/sqrt(in)), and *b (r, out), zeros. false (NULLs, the graph's error set) when the prefix
 * is too long for the names. */
bool sn_lora_params(sn_graph *g, const char *prefix, int64_t in, int64_t out, const sn_lora *l,
                    sn_node **a, sn_node **b);

enum { SN_LORA_MAX_PATHS = 8 };

/* The low-rank paths of n (<= SN_LORA_MAX_PATHS) layers that read the same x (..., in), with
 * adapters a[i] (in, r) and b[i] (r, out_i) from sn_lora_params: out[i] = (x @ a[i]) @ b[i] *
 * alpha/r, (..., out_i). The n products x @ a[i] are one, x @ [a_0 ... a_{n-1}] (..., n r), sliced:
 * one GEMM reads x instead of n, and in the backward one GEMM makes x's gradient from all n
 * adapters (q, k and v of a LLaMA layer; its gate and up). */
void sn_lora_paths(sn_graph *g, sn_node *x, int n, sn_node *const a[], sn_node *const b[],
                   const sn_lora *l, sn_node *out[]);

/* Whether name is an adapter's ("... .lora_a" or "... .lora_b"). */
bool sn_lora_is_adapter(const char *name);

/* Freezes (sn_param_freeze) every PARAM of g that is not an adapter: embeddings, layer norms,
 * biases and weights alike. Returns the number of adapter parameters (elements) left to train. */
int64_t sn_lora_freeze_base(sn_graph *g);

#endif
