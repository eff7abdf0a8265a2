/* ia3.h: (IA)^3 vectors (Liu et al. 2022, "Few-Shot Parameter-Efficient Fine-Tuning is Better and
 * Cheaper than In-Context Learning") that rescale a model's activations channel by channel.
 * Convention: a vector is one parameter "P.ia3_l" (n), f32, initialised to ones (so the adapted
 * model starts equal to the base), named after the module P it belongs to as PEFT names it: beside
 * a key or value projection it scales the last n output channels of P (LLaMA's k_proj: all of
 * them; GPT-2's fused c_attn: its k and v thirds), beside an MLP's down projection it scales P's
 * input (the "feedforward" vectors). Every other parameter is frozen by sn_ia3_freeze_base. */
#ifndef SN_IA3_H
#define SN_IA3_H

#include "sinter.h"

/* The vector "prefix.ia3_l" (n), ones. NULL (the graph's error set) when the prefix is too long. */
sn_node *sn_ia3_vector(sn_graph *g, const char *prefix, int64_t n);

/* x (..., n) * l (n): the activations rescaled per channel. */
sn_node *sn_ia3_scale(sn_graph *g, sn_node *x, sn_node *l);

/* Whether name is an IA3 vector's ("... .ia3_l"). */
bool sn_ia3_is_vector(const char *name);

/* Whether name is a fine-tuning parameter of either kind: an IA3 vector or a LoRA adapter
 * (frontend/lora.h), the parameters a base model's file lacks. */
bool sn_is_adapter(const char *name);

/* Freezes (sn_param_freeze) every PARAM of g that is not an IA3 vector. Returns the number of
 * elements left to train. */
int64_t sn_ia3_freeze_base(sn_graph *g);

#endif
