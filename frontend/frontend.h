/* frontend.h: the frontend as sinter's own code sees it: the model API (sinter.h) over the full
 * IR (ir/ir.h), plus what only sinter calls: the backward ops' constructors (autodiff's gradient
 * rules, and tests of the kernels that compute them) and autodiff itself.
 * Convention: not installed; a model outside the tree is written against sinter.h alone. */
#ifndef SN_FRONTEND_H
#define SN_FRONTEND_H

#include "ir/ir.h"
#include "sinter.h"

/* ---- the fp8 pass's scales (api.c; ops.h amax, pow2_scale): no gradient ---- */
sn_node *sn_amax(sn_graph *g, sn_node *x, int axis, bool keepdim);
sn_node *sn_pow2_scale(sn_graph *g, sn_node *x, float bound);

/* ---- the backward ops (api.c): what autodiff's gradient rules build ---- */

sn_node *sn_gelu_bwd(sn_graph *g, sn_node *x, sn_node *dy);
sn_node *sn_silu_bwd(sn_graph *g, sn_node *x, sn_node *dy);
sn_node *sn_softmax_bwd(sn_graph *g, sn_node *y, sn_node *dy);
sn_node *sn_layernorm_bwd(sn_graph *g, sn_node *x, sn_node *w, sn_node *dy, float eps);
sn_node *sn_layernorm_bwd_w(sn_graph *g, sn_node *x, sn_node *dy, float eps);
sn_node *sn_rmsnorm_bwd(sn_graph *g, sn_node *x, sn_node *w, sn_node *dy, float eps);
sn_node *sn_rmsnorm_bwd_w(sn_graph *g, sn_node *x, sn_node *dy, float eps);
sn_node *sn_cross_entropy_bwd(sn_graph *g, sn_node *logits, sn_node *targets, sn_node *dloss,
                              int ignore_index);
sn_node *sn_cross_entropy_bwd_padded(sn_graph *g, sn_node *logits, sn_node *targets,
                                     sn_node *dloss, int ignore_index, int64_t classes);
/* The backward: o = sn_attention(q, k, v, lse), dout = d loss / d o (.., T, Dv) -> d loss / d q,
 * k or v. dv reads only q, k, dout and lse. */
sn_node *sn_attention_bwd_q(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *o,
                            sn_node *dout, sn_node *lse, float scale);
sn_node *sn_attention_bwd_k(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *o,
                            sn_node *dout, sn_node *lse, float scale);
sn_node *sn_attention_bwd_v(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *o,
                            sn_node *dout, sn_node *lse, float scale);
sn_node *sn_embedding_bwd(sn_graph *g, sn_node *ids, sn_node *dy, int64_t vocab);

/* ---- autodiff (autodiff.c) ---- */

/* Appends the backward graph of the scalar `loss` to g: afterwards every PARAM p that loss
 * depends on has p->grad (same shape and dtype as p); the others get a zero gradient; a
 * frozen parameter (sn_param_freeze) gets none (grad NULL, and nothing is computed for it).
 * Marks loss and the gradients as outputs. */
sn_status sn_backward(sn_graph *g, sn_node *loss, sn_err *e);

/* ---- fine-tuning (lora.c, ia3.c) ---- */

/* Freezes (sn_param_freeze) every PARAM of g whose name trained() refuses; returns the elements of
 * those it accepts (what is left to train). */
int64_t sn_freeze_unless(sn_graph *g, bool (*trained)(const char *name));

#endif
