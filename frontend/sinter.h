/* sinter.h: the API a model author writes against (installed; the graph and its nodes are
 * opaque handles, base/graph.h).
 *
 * A model is a graph of nodes built by the constructors below. Constructors check shapes and
 * dtypes and record the node; they compute nothing. The first mistake is recorded in the graph
 * with both shapes and the op (sn_graph_error), and every later constructor returns NULL, so a
 * model can be built without checking each call and checked once at the end.
 *
 *     sn_graph *g = sn_graph_new();
 *     sn_node *x = sn_input_tokens(g, "x", SN_SHAPE(8, 16));           // (B, T) token ids
 *     sn_node *y = sn_input_targets(g, "y", SN_SHAPE(8, 16));          // (B, T) the next ids
 *     sn_node *wte = sn_param(g, "wte", SN_F32, SN_SHAPE(256, 32), SN_INIT_NORMAL, 0.02f);
 *     sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(32, 256), SN_INIT_NORMAL, 0.02f);
 *     sn_node *logits = sn_matmul(g, sn_embedding(g, wte, x), w);      // (B, T, 256)
 *     sn_graph_add_output(g, logits);
 *     sn_graph_set_loss(g, sn_cross_entropy(g, logits, y, -1));        // scalar
 *     if (sn_graph_error(g)) { fprintf(stderr, "%s\n", sn_graph_error(g)); ... }
 *     // train it with session.h (installed through sinter.h): the session differentiates it
 *
 * The trainer feeds inputs by their role (sn_input_tokens, sn_input_targets), not their name;
 * names are for messages. Axes may be negative (-1 is the last). Binary pointwise ops broadcast
 * like numpy. */
#ifndef SINTER_H
#define SINTER_H

#include "base/graph.h"

/* A shape literal: SN_SHAPE(B, T, C); SN_SCALAR for rank 0. */
typedef struct {
    int rank;
    int64_t d[SN_MAX_RANK];
} sn_shape;
#define SN_NARGS_(a, b, c, d, n, ...) n
#define SN_NARGS(...) SN_NARGS_(__VA_ARGS__, 4, 3, 2, 1, 0)
#define SN_SHAPE(...) ((sn_shape){.rank = SN_NARGS(__VA_ARGS__), .d = {__VA_ARGS__}})
#define SN_SCALAR ((sn_shape){.rank = 0})

/* ---- what a node is ---- */
sn_shape sn_shape_of(const sn_node *n);
sn_dtype sn_node_dtype(const sn_node *n);
/* The size of axis (negative from the end: -1 is the last); 0 when n has no such axis. */
int64_t sn_node_dim(const sn_node *n, int axis);
const char *sn_node_name(const sn_node *n); /* an input's or parameter's; NULL for the others */
sn_role sn_node_role(const sn_node *n);

/* ---- the graph's roles ---- */
/* Makes loss (a float scalar, usually sn_cross_entropy's) the value the session minimises and
 * keeps it as an output. A NULL loss after an earlier error leaves that error; a NULL or
 * non-scalar loss otherwise is recorded as the graph's error. */
void sn_graph_set_loss(sn_graph *g, sn_node *loss);
/* Marks logits (float, (.., V): a language model's next-token scores) as what sampling and
 * generation read, and keeps them as an output. NULL or a non-float value of rank < 2 is
 * recorded as the graph's error (after an earlier error: nothing). */
void sn_graph_set_logits(sn_graph *g, sn_node *logits);
/* Records a failure of the model's own making (printf-style message) as g's error, unless g
 * already has one; returns g's status. For helpers built from the constructors, so that their
 * callers check the graph once. */
sn_status sn_graph_fail(sn_graph *g, sn_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- leaves ---- */
/* An input fed each step; sn_input_role gives it a role (SN_ROLE_TOKENS ...: what the trainer
 * feeds it), which at most one input of g may have (a second is recorded as the graph's error). */
sn_node *sn_input(sn_graph *g, const char *name, sn_dtype t, sn_shape s);
sn_node *sn_input_role(sn_graph *g, const char *name, sn_role r, sn_dtype t, sn_shape s);
/* The token ids a language model reads and the ids it should predict: i32, (B, T). */
sn_node *sn_input_tokens(sn_graph *g, const char *name, sn_shape s);
sn_node *sn_input_targets(sn_graph *g, const char *name, sn_shape s);
sn_node *sn_param(sn_graph *g, const char *name, sn_dtype t, sn_shape s, sn_init init, float std);
/* Marks parameter p frozen (before training): it gets no gradient and no optimizer state,
 * and keeps its values through training (checkpoints still save it). Returns p. */
sn_node *sn_param_freeze(sn_node *p);
/* A frozen weight of shape s stored as NF4 with double quantization (QLoRA's storage: 0.5 +
 * 1/64 + 1/4096 bytes a weight): a u8 parameter named name holding the packed bytes, and the
 * returned node, its weights dequantized to t (bf16 for a bf16 product, or f32). The storage's
 * init rule is the weights' (zeros here; the nf4 pass gives it the weight's own): a trainer
 * draws the weights by it and quantizes them, or quantizes a weight file's. No gradient
 * reaches it. sn_dequant_nf4 reads such storage (packed: u8 of the size the layout gives). */
sn_node *sn_param_nf4(sn_graph *g, const char *name, sn_dtype t, sn_shape s);
sn_node *sn_dequant_nf4(sn_graph *g, sn_node *packed, sn_dtype t, sn_shape s);
/* The first dequant_nf4 of g reading the NF4 storage packed: its shape and count are the
 * weights'; NULL when none reads it. */
const sn_node *sn_nf4_weights(const sn_graph *g, const sn_node *packed);
sn_node *sn_const(sn_graph *g, sn_dtype t, sn_shape s, const float *data); /* data copied */
sn_node *sn_full(sn_graph *g, sn_dtype t, sn_shape s, float value);
sn_node *sn_scalar(sn_graph *g, sn_dtype t, float value); /* rank-0 full */

/* pointwise */
sn_node *sn_add(sn_graph *g, sn_node *a, sn_node *b);
sn_node *sn_sub(sn_graph *g, sn_node *a, sn_node *b);
sn_node *sn_mul(sn_graph *g, sn_node *a, sn_node *b);
sn_node *sn_div(sn_graph *g, sn_node *a, sn_node *b);
sn_node *sn_eq(sn_graph *g, sn_node *a, sn_node *b);
sn_node *sn_neg(sn_graph *g, sn_node *x);
sn_node *sn_scale(sn_graph *g, sn_node *x, float f);
sn_node *sn_exp(sn_graph *g, sn_node *x);
sn_node *sn_log(sn_graph *g, sn_node *x);
sn_node *sn_tanh(sn_graph *g, sn_node *x);
sn_node *sn_sqrt(sn_graph *g, sn_node *x);
sn_node *sn_rsqrt(sn_graph *g, sn_node *x);
sn_node *sn_gelu(sn_graph *g, sn_node *x);
sn_node *sn_silu(sn_graph *g, sn_node *x);
sn_node *sn_cast(sn_graph *g, sn_node *x, sn_dtype t);
/* Dropout with probability p at site `site` (distinct per dropout of a model): x's elements
 * kept and scaled by 1/(1-p), or zeroed, by a mask hashed from (seed, site, element) (ir/
 * dropout.h); seed is the graph's f32 scalar input of the role SN_ROLE_DROPOUT_SEED (made by
 * sn_input_dropout_seed), set by the trainer each micro-batch. Identity in evaluation and
 * generation (a compile without a backward removes it). */
sn_node *sn_dropout(sn_graph *g, sn_node *x, sn_node *seed, float p, int site);
sn_node *sn_input_dropout_seed(sn_graph *g);

/* reductions over one axis */
sn_node *sn_sum(sn_graph *g, sn_node *x, int axis, bool keepdim);
sn_node *sn_mean(sn_graph *g, sn_node *x, int axis, bool keepdim);
sn_node *sn_max(sn_graph *g, sn_node *x, int axis, bool keepdim);

/* row ops, over the last axis */
sn_node *sn_softmax(sn_graph *g, sn_node *x);
sn_node *sn_layernorm(sn_graph *g, sn_node *x, sn_node *w, sn_node *b, float eps);
sn_node *sn_rmsnorm(sn_graph *g, sn_node *x, sn_node *w, float eps);
/* x (.., T, S): entries with key j > query i + (S - T) become -inf (attention scores). */
sn_node *sn_causal_mask(sn_graph *g, sn_node *x);
sn_node *sn_causal_mask_fill(sn_graph *g, sn_node *x, float fill);
/* logits (.., V) float, targets (..) i32 -> f32 scalar: mean over targets != ignore_index. */
sn_node *sn_cross_entropy(sn_graph *g, sn_node *logits, sn_node *targets, int ignore_index);
/* The same over a padded vocabulary: only the first `classes` entries of the last axis are
 * classes; the others take no part in the softmax and get zero gradient (0: all are classes). */
sn_node *sn_cross_entropy_padded(sn_graph *g, sn_node *logits, sn_node *targets, int ignore_index,
                                 int64_t classes);

/* a (.., M, K) @ b (.., K, N) -> (.., M, N); batch dims equal, or b of rank 2 (a shared
 * weight). ta/tb: use the transpose of a/b's last two axes. */
sn_node *sn_matmul(sn_graph *g, sn_node *a, sn_node *b);
sn_node *sn_matmul_t(sn_graph *g, sn_node *a, sn_node *b, bool ta, bool tb);

/* Causal attention without a (T, S) matrix, scale = f (usually 1/sqrt(D)): q (.., T, D),
 * k (.., S, D), v (.., S, Dv) -> (.., T, Dv); query i sees keys j <= i + S - T. It is
 * softmax(causal_mask(f q k^T)) v, built as lse = sn_attention_lse(q, k) (f32 (.., T), the
 * softmax's log-sum-exp, saved for the backward) and sn_attention(q, k, v, lse). */
sn_node *sn_causal_attention(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, float scale);
sn_node *sn_attention_lse(sn_graph *g, sn_node *q, sn_node *k, float scale);
/* lse must be sn_attention_lse(q, k, scale): the gradient rule assumes it. */
sn_node *sn_attention(sn_graph *g, sn_node *q, sn_node *k, sn_node *v, sn_node *lse, float scale);

/* Decoding over a KV cache (inference only: no gradient), scale = f: q (B, H, T, D) the new
 * tokens' queries, k_cache and v_cache (B, Hkv, S, D|Dv) the keys and values cached so far,
 * mask (B, 1, 1, S) f32 added to the scores over the cache (0 where a position holds a cached
 * token of that row, -inf where not), k and v (B, Hkv, T, D|Dv) the new tokens' own. Query t
 * sees every cached key and the new keys 0..t, one softmax over both -> (B, H, T, Dv). Hkv
 * divides H (grouped-query: query head h reads kv head h / (H / Hkv)). It is
 * softmax(concat(f q k_cache^T + mask, causal_mask(f q k^T))) concat(v_cache, v), without the
 * scores in memory; the whole cache is one kernel's read. */
sn_node *sn_attention_cache(sn_graph *g, sn_node *q, sn_node *k_cache, sn_node *v_cache,
                            sn_node *mask, sn_node *k, sn_node *v, float scale);

/* layout */
sn_node *sn_reshape(sn_graph *g, sn_node *x, sn_shape s); /* one dim may be -1 */
sn_node *sn_permute(sn_graph *g, sn_node *x, const int *perm); /* x's rank entries */
sn_node *sn_transpose(sn_graph *g, sn_node *x, int axis0, int axis1);
sn_node *sn_broadcast(sn_graph *g, sn_node *x, sn_shape s);
sn_node *sn_slice(sn_graph *g, sn_node *x, int axis, int64_t start, int64_t end);
/* n equal parts along axis into out[0..n-1]; returns 0, or -1 (error recorded in g). */
int sn_split(sn_graph *g, sn_node *x, int axis, int n, sn_node **out);
sn_node *sn_pad(sn_graph *g, sn_node *x, int axis, int64_t start, int64_t size);
sn_node *sn_concat(sn_graph *g, int n, sn_node *const *xs, int axis);

/* table (V, C) float, ids (..) i32 -> (.., C) */
sn_node *sn_embedding(sn_graph *g, sn_node *table, sn_node *ids);

/* ---- parameters ---- */

/* Parameters of g in graph order; returns their count (out may be NULL to count only). */
int sn_graph_params(const sn_graph *g, sn_node **out, int cap);
int64_t sn_graph_param_count(const sn_graph *g); /* elements (NF4 storage: its weights) */

#endif
