/* passes.h: the passes sn_compile (pipeline.h) runs, one section per file, in pipeline order.
 * Convention: a graph pass reads a verified graph and returns a new one (the input is
 * unchanged; the caller frees both); fuse makes the program, memplan places its values; each
 * entry has its preconditions written above it. */
#ifndef SN_PASSES_H
#define SN_PASSES_H

#include "ir/ir.h"
#include "program/program.h"
#include "program/target.h"

/* ---- pad_vocab.c ---- */

#define SN_PAD_VOCAB_POW2 (-1) /* a pad_vocab multiple: the next power of two */

/* V rounded up to a multiple of `multiple` (> 0), or to a power of two (SN_PAD_VOCAB_POW2). */
int64_t sn_pad_vocab_size(int64_t V, int64_t multiple);

/* Pads the vocabulary of a tied embedding / LM-head table: a PARAM w (V, C) read only as the
 * table of embeddings and as the b of matmul(x, w, tb=1) whose result (the logits) is read only
 * as the logits of cross-entropy, becomes (Vp, C), Vp = sn_pad_vocab_size(V, multiple). The
 * cross-entropies count only the first V classes (attribute end = V), so the loss and every
 * gradient equal the unpadded model's; w's padded rows get zero gradient. w keeps its name and
 * init rule (a row-major init stream gives its first V rows the unpadded values). The logits
 * output becomes (.., Vp): its first V columns are the model's logits, the rest padding.
 * requires: a verified forward graph (before autodiff).
 * *n_padded: how many tables were padded (0: the graph is copied unchanged). */
sn_status sn_pass_pad_vocab(const sn_graph *in, int64_t multiple, sn_graph **out, int *n_padded,
                            sn_err *e);

/* ---- lowrank_sum.c ---- */

/* The largest contraction a product of low rank has (LoRA's rank r). */
#define SN_LOWRANK_K 64

/* In an autocast program's backward: each rnd(p_1 + .. + p_n) of f32 products of that dtype's
 * operands read only by the sum becomes the chain rnd(p_n + f32(rnd(... + f32(rnd(p_1))))),
 * contraction ascending (LoRA's dh' A^T before dy W^T; LLaMA's dx from v, k, then q); and each
 * 16-bit rnd(p) + rnd(q), q of contraction at most SN_LOWRANK_K and p of a larger one, becomes
 * rnd(p + f32(rnd(q))): every GEMM after the first then adds the one before's 16-bit copy as
 * its C (program/kernel.h accum). Changes the rounding (each partial sum's, at most half an ulp
 * of it). requires: a verified graph with its backward. *n_rounded: how many sums; none: *out
 * is NULL (the graph stays as it is). */
sn_status sn_pass_lowrank_sum(const sn_graph *in, sn_graph **out, int *n_rounded, sn_err *e);

/* ---- remat.c ---- */

/* After autodiff: each forward value made by a unary pointwise op (not a cast or a dropout) of
 * a value the backward reads, itself read in the backward by pointwise ops alone (SwiGLU's
 * silu(gate); not GPT-2's f32 GELU, which a product reads), is made again
 * right before its first backward reader, which reads the copy: the forward stores nothing for
 * it. Exact. *n_remade: how many; none: *out is NULL (the graph stays as it is). */
sn_status sn_pass_remat(const sn_graph *in, sn_graph **out, int *n_remade, sn_err *e);

/* ---- upcast.c ---- */

/* Each f32 cast of a bf16 or f16 value read two or more times, only by ops that widen it as
 * they load it (pointwise ops, the norms and their backward ops, column sums through reshapes),
 * and that is no output, loss or gradient, becomes one cast per reader (fuse then widens the
 * 16-bit value inside each reader's kernel instead of storing an f32 copy). Exact. requires: a verified graph
 * (forward, or with its backward). *n_split: how many casts were split; none: *out is NULL (the
 * graph and its nodes stay as they are). */
sn_status sn_pass_upcast(const sn_graph *in, sn_graph **out, int *n_split, sn_err *e);

/* sink_views.c: a slice, pad or permute of a pointwise value read by pointwise ops moves onto
 * the value's operands, down to values with buffers (a pad only onto cast, add, sub and mul
 * whose operands all have the padded axis), so that one pointwise kernel reads those buffers
 * through the views: rotary embeddings' backward. *out is NULL when nothing moves (the graph
 * stays as it is); *n_sunk counts the pointwise ops made again over views. */
sn_status sn_pass_sink_views(const sn_graph *in, sn_graph **out, int *n_sunk, sn_err *e);

/* ---- attention.c ---- */

/* Replaces each causal self-attention written out as
 *     p = softmax(causal_mask(scale(matmul(q, k, tb=1), f)))      (scale optional: f = 1)
 *     y = matmul(p, v)
 * by lse = attention_lse(q, k, f), y = attention(q, k, v, lse, f), so neither the forward
 * nor (after autodiff) the backward holds a (T, S) matrix. A chain is fused only when its mask
 * fills -inf, q, k, v have the same leading dimensions (k's and v's heads may divide q's), and
 * p and the nodes before it have no other reader (nor are an output). Grouped-query attention:
 * when k and v are both repeats of kv tensors (.., Hkv, S, D) for groups of G query heads,
 * written reshape (.., Hkv, 1, S D) -> broadcast (.., Hkv, G, S D) -> reshape (.., Hkv G, S, D)
 * (head h reads kv head h / G) with no other reader, the fused ops read the kv tensors and the
 * repeats are dropped: no copies, and no sum over the broadcast in the backward.
 * requires: a verified forward graph (before autodiff).
 * unrepeat_kv false: k and v stay as written (repeated).
 * *n_fused: how many attention blocks were replaced; *n_unrepeated: how many of them read k
 * and v unrepeated (may be NULL). */
sn_status sn_pass_attention(const sn_graph *in, bool unrepeat_kv, sn_graph **out, int *n_fused,
                            int *n_unrepeated, sn_err *e);

/* ---- nf4.c ---- */

/* QLoRA's storage: each frozen float matrix read only as the right operand of matmuls (a linear
 * layer's weight: x @ W) becomes a u8 parameter of the same name holding its NF4 bytes (ir/nf4.h:
 * 0.5 + 1/64 + 1/4096 bytes a weight, starting as zeros: the base's values come quantized from
 * a weight file) and a dequant_nf4 node (the weight's shape and dtype) that the products read.
 * Trained parameters, embeddings, norms, biases, a table that is also an embedding (GPT-2's
 * tied LM head) and an untied LM head (the right operand of the product that makes g->logits,
 * LLaMA's lm_head.weight, as bitsandbytes keeps it in 16 bits) stay as they are. requires: a verified forward graph (before autodiff; before
 * autocast, which makes a dequantize read only by products bf16). *n_stored: weights stored so. */
sn_status sn_pass_nf4(const sn_graph *in, sn_graph **out, int *n_stored, sn_err *e);

/* Whether PARAM p of g is a frozen float matrix read only as the right operand of matmuls (x @
 * W), and not an output: the weights the nf4 and base16 passes store otherwise. */
bool sn_linear_weight(const sn_graph *g, const sn_node *p);

/* Each reader of a dequant_nf4 node (its product in the forward, the product making x's
 * gradient in the backward) gets a dequantize of its own, made right before it, so that the
 * planner keeps each unpacked weight only from its dequantize to its product (one scratch
 * reused across layers, not every layer's 16-bit copy live until its backward). requires: a
 * verified graph, after autodiff and checkpoint. *n_made: the dequantizes made. */
sn_status sn_pass_nf4_per_reader(const sn_graph *in, sn_graph **out, int *n_made, sn_err *e);

/* ---- siblings.c ---- */

/* requires a graph without a backward (after nf4 and base16, before autocast).
 * Products x @ w_i^T of one x by trained weights that only they read (over at least 32 rows)
 * become one product of the weights concatenated, each its columns; the trained biases added
 * to all of them, concatenated too. *out is NULL when nothing changed; *n_joined counts the
 * products joined. The pipeline runs it on a graph it differentiates (training), for a target
 * with sn_target.fuse_siblings. */
sn_status sn_pass_siblings(const sn_graph *in, sn_graph **out, int *n_joined, sn_err *e);

/* ---- base16.c ---- */

/* The frozen base in the compute dtype (low: bf16 or f16): each weight sn_linear_weight selects
 * becomes a PARAM of dtype low with the same name, shape, init rule and frozen mark, so that the
 * products read it as it is stored: no f32 parameter, no weight shadow, no cast. The values are
 * the trainer's (train.h: drawn in f32 and rounded to nearest even on the host, as the shadow
 * was made), so a run's losses are those of the f32 base's bit for bit. requires: a verified
 * forward graph, before autocast (whose casts then find the low dtype already). *n_stored:
 * the weights stored so. Until autocast the products read the weight widened to f32 (a cast,
 * exact), which autocast's cast back to the low dtype folds into the 16-bit value itself. */
sn_status sn_pass_base16(const sn_graph *in, sn_dtype low, sn_graph **out, int *n_stored,
                         sn_err *e);

/* ---- autocast.c ---- */

/* Mixed precision (prec bf16 or fp16, target.h): by the policy table in autocast.c, matmul and
 * attention read their float inputs cast to the low dtype (matmul accumulates and returns f32;
 * attention returns the low dtype, its lse f32); every other computing op reads f32; views
 * follow their input. Each value is cast at most once per dtype: a parameter (an f32 master)
 * gets one low-precision copy however many products read it, and a cast to the low dtype is
 * moved above the views that read it (q, k, v sliced from one QKV product share one cast).
 * Outputs and the loss keep their dtypes. Autodiff of the result is mixed precision by
 * construction: a cast's gradient is the cast back, a product's dC is rounded to its operands'
 * dtype, parameter gradients are f32.
 * requires: a verified forward graph (before autodiff; after the attention pass, so the fused
 * attention reads bf16). *n_casts: the cast nodes added.
 * fp16 (5 exponent bits: small gradients flush to zero) also scales the loss for dynamic loss
 * scaling: g->loss becomes loss * s, s a new f32 scalar INPUT of the role SN_ROLE_LOSS_SCALE (named
 * SN_LOSS_SCALE_INPUT in messages) that the trainer finds by its role and sets each step (a power
 * of two: the scaled loss and gradients are exact multiples). */
#define SN_LOSS_SCALE_INPUT "loss_scale"
sn_status sn_pass_autocast(const sn_graph *in, sn_precision prec, sn_graph **out, int *n_casts,
                           sn_err *e);

/* ---- eval_graph.c ---- */

/* The evaluation graph of g: the nodes g's loss depends on, in g's order (its forward, with any
 * rewrite made after autodiff such as the LM head in chunks; no backward, no recompute), with
 * the loss as its one output and no logits mark, every dropout identity (evaluation mode);
 * parameters keep their names, so an executor
 * can share them with g's program (sn_exec_new_sharing). requires: a verified graph with a
 * loss, differentiated or not. */
sn_status sn_pass_eval_graph(const sn_graph *in, sn_graph **out, sn_err *e);

/* Every dropout of a forward graph replaced by its input (identity: evaluation, generation),
 * the dropout seed input gone with them. requires: a verified forward graph (before autodiff;
 * the pipeline runs it when it compiles without a backward). *n_removed: the dropouts; none:
 * *out is NULL (the graph stays as it is). */
sn_status sn_pass_no_dropout(const sn_graph *in, sn_graph **out, int *n_removed, sn_err *e);

/* ---- recompute.c ---- */

/* What the backward keeps of the forward. Sub-blocks are the segments between the separators
 * of the forward (activations no other activation's edge jumps over: GPT-2's residual stream);
 * blocks are their repeating units (attention + MLP), both found from the graph's structure. */
typedef enum {
    SN_RECOMPUTE_NONE,   /* keep everything the backward reads */
    SN_RECOMPUTE_BLOCK,  /* keep block inputs, recompute the rest of each block */
    SN_RECOMPUTE_SQRT,   /* Chen et al.: keep every round(sqrt(n))-th of n sub-block boundaries */
    SN_RECOMPUTE_BUDGET, /* nothing if the plan fits the budget; else the boundary spacing with
                            the smallest plan, then the values that save most recompute per byte
                            kept, as many as the planned arena allows */
    SN_RECOMPUTE_COUNT
} sn_recompute_policy;

const char *sn_recompute_policy_name(sn_recompute_policy p); /* "none", "block", "sqrt", "budget" */
int sn_recompute_policy_parse(const char *s);                /* -1 if unknown */

typedef struct {
    sn_recompute_policy policy;
    int blocks, sub_blocks; /* repeating units found, and their segments */
    int every;              /* budget: the boundary spacing chosen (0: no checkpointing) */
    int extra_kept;         /* budget: values kept besides the boundaries */
    int kept;               /* forward values kept inside recomputed stretches */
    int recomputed;         /* forward nodes copied into the backward */
    double step_flops;      /* the forward and backward without recompute */
    double extra_flops;     /* the recomputed nodes' */
    int64_t full_arena;     /* budget: the planned arena without checkpointing */
    int64_t min_arena;      /* budget: the smallest planned arena it found */
} sn_recompute_stats;

/* requires: a verified graph with its backward (after autodiff). Rewrites it so that forward
 * values the policy drops are recomputed: each is copied (with the dropped values it reads)
 * just before its first backward reader, which then reads the copy. Values after the last kept
 * boundary, outputs, leaves and what depends only on weights are never recomputed. The loss
 * and every gradient are unchanged to the bit (the same ops on the same values). budget: the
 * arena bytes SN_RECOMPUTE_BUDGET must fit (the planner's arena, through fuse and memplan for t);
 * when no choice fits, SN_ERR_OOM names the smallest arena found. */
sn_status sn_pass_recompute(const sn_graph *in, sn_recompute_policy policy, int64_t budget,
                            const sn_target *t, sn_graph **out, sn_recompute_stats *st, sn_err *e);

/* ---- chunk_logits.c ---- */

/* requires: a verified graph with its backward whose loss is a cross_entropy of a product
 * (the LM head, through casts and reshapes), or fp16's loss scale times it. Rewrites the head, the loss and their backward
 * into chunks of `rows` rows of the R = B T tokens, one after the other: per chunk the head's
 * product, its loss (the chunk's mean times its counted rows), its dlogits (dloss times
 * count_c / count) and the products reading them, dX_c = dlogits_c W (concatenated after the
 * last chunk) and dW += dlogits_c^T X_c (added in chunk order), so that no chunk's logits
 * outlive it. Not bit-exact: the loss adds the chunks' means (about 1e-7 relative); the dW
 * sum adds each chunk's product in f32 (the GEMM's own order within a chunk); dlogits are
 * exact where count and the chunk's counted rows are powers of two. An LM head read in another
 * way (the logits an output, another reader) is SN_ERR_UNSUPPORTED; more than 64 chunks is
 * SN_ERR_INVALID. *n_chunks: 0 when rows >= R (*out NULL: the graph stays as it is). */
sn_status sn_pass_chunk_logits(const sn_graph *in, int64_t rows, sn_graph **out, int *n_chunks,
                               sn_err *e);
/* rows = SN_CHUNK_LOGITS_AUTO: the pass's choice, R / SN_CHUNK_LOGITS_PARTS rounded up to a
 * multiple of SN_SUM_CHUNK (the classifier's loss chunks; 4096 of gpt2's 16 x 1024 rows: docs/memory.md). */
enum { SN_CHUNK_LOGITS_AUTO = -1, SN_CHUNK_LOGITS_PARTS = 4 };
/* The rows a chunk for `rows` (a count, or SN_CHUNK_LOGITS_AUTO) of R rows. */
int64_t sn_chunk_logits_rows(int64_t rows, int64_t R);

/* ---- fp8.c ---- */

/* Which products the fp8 pass makes 8-bit (fp8.c has the rules). */
typedef enum {
    SN_FP8_OFF,
    SN_FP8_HEAD,   /* the LM head's: the logits' product and the two reading their gradient */
    SN_FP8_LINEAR, /* every linear layer's (a parameter operand), forward and backward */
} sn_fp8_policy;

/* requires: a verified graph with its backward. Each selected product of a and b becomes
 * (a8 @ b8) / s_a / s_b: a8 = e4m3(a s_a) (e5m2 for a gradient), s_a the largest power of two
 * that keeps a's amax within the format's range, both 8-bit operands K-major (ta 0, tb 1).
 * Not exact (3 or 2 mantissa bits an operand). *n_products: how many; none: *out is NULL (the
 * graph stays as it is). */
sn_status sn_pass_fp8(const sn_graph *in, sn_fp8_policy pol, sn_graph **out, int *n_products,
                      sn_err *e);
/* "off", "head", "linear"; sn_fp8_policy_parse: -1 if unknown */
const char *sn_fp8_policy_name(sn_fp8_policy p);
int sn_fp8_policy_parse(const char *s);

/* ---- fuse.c ---- */

/* requires: a verified graph (after autodiff, or a forward graph for inference). Decides which
 * nodes are materialised and which nodes each kernel computes: pointwise chains (with the views
 * they read folded into strided accesses) in one kernel each, a row op with the pointwise chains
 * that compute its operands and consume its result (residual + layernorm, layernorm_bwd +
 * residual gradient), one kernel per reduction, matmul, attention op and gather. A node that
 * other kernels also read is computed by the kernel of its earliest reader when that reader can
 * compute it (a pointwise op over the same elements, or the row op's per-element operand) and
 * stored there as an extra output; every other reader runs after that kernel. Produces
 * p->kernels in graph order (each at the last node it computes) and p->values with sizes and
 * aliases. t: the target (the same kernels for every target, but for the atomic dq of the
 * attention backward where t->att_dq_atomic: kernel.h). shadows: a 16-bit cast of
 * a parameter is a weight shadow (program.h), computed when the parameter is written instead
 * of every step; false: a kernel of the step like any cast. */
sn_status sn_fuse(const sn_graph *g, const sn_target *t, bool shadows, sn_program **out, sn_err *e);

/* ---- schedule.c ---- */

typedef struct {
    int64_t peak_before, peak_after; /* the most arena bytes live at once (no packing), fuse's
                                        order and the one kept */
    int moved;                       /* kernels not at their fuse position */
} sn_schedule_stats;

typedef enum {
    SN_SCHEDULE_OFF,
    SN_SCHEDULE_ON,    /* the new order when its peak of live arena bytes is lower */
    SN_SCHEDULE_ALWAYS /* the new order even when it is not (tests: every move is checked) */
} sn_schedule_mode;

/* requires: fuse (before memplan). Reorders p->kernels so that large arena values die earlier:
 * among the kernels whose inputs exist, the one that frees the most arena bytes net of what it
 * allocates, when that is positive, else fuse's next one. Kernels touching a common value, one
 * writing it, keep their order, so every kernel reads what it read before (bit-identical
 * results). mode ON keeps the new order only when its peak of live arena bytes is lower. */
sn_status sn_schedule(sn_program *p, sn_schedule_mode mode, sn_schedule_stats *st, sn_err *e);

/* ---- join_finish.c ---- */

/* requires: fuse (and schedule), before memplan; for a target with join_finish. Each norm
 * weight gradient's FINISH kernel joins the launch of the next norm backward pair when no
 * kernel up to that pair touches its sums or writes its scratch (kernel.h: tail): the FINISH
 * leaves p->kernels. SN_ERR_INTERNAL when a joined kernel breaks the contract. */
sn_status sn_join_finish(sn_program *p, sn_err *e);

/* requires: fuse (and schedule), before join_finish and memplan; every target. Small pointwise
 * kernels that read only what no kernel of the step writes move to the step's start, small
 * ones that write only what no kernel of the step reads to its end, each group ordered by
 * shape; then a pointwise kernel right after another of the same index space that reads none
 * of its outputs joins it (join_siblings.c; both leave p->kernels as one, the results the
 * separate kernels' bits); *n_joined counts the kernels that joined. SN_ERR_INTERNAL when a
 * joined kernel breaks the contract. */
sn_status sn_join_siblings(sn_program *p, int *n_joined, sn_err *e);

/* ---- memplan.c ---- */

/* requires: fuse. Computes each value's live range over the kernel order and assigns arena
 * offsets (best fit, never two overlapping live ranges in the same bytes). A pointwise kernel
 * writing a persistent value (a gradient) from an arena value of the same size that nothing
 * else reads, element for element, writes over it: that value becomes an alias of the output
 * (the tied LM head's gradient GEMM writes into wte's gradient). Sets arena_bytes,
 * persistent_bytes and sum_bytes, and writes the parameter layout (program.h; the trained
 * parameters in param_order), checked (sn_param_layout_check: SN_ERR_INTERNAL when broken).
 * A plan larger than t->memory_bytes (when known) is SN_ERR_OOM, naming both sizes and what
 * to do. */
sn_status sn_memplan(sn_program *p, const sn_target *t, sn_param_order param_order, sn_err *e);

#endif
