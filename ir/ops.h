/* ops.h: the op table, the one place every op of the IR is defined.
 * Expanded (X-macro) into the op enum, the name table, the property tables and, through
 * `switch` statements pinned by static_assert(SN_OP_COUNT == N), the shape rules, the
 * interpreter and the gradient rules (and the pointwise formulas of the code generators by
 * static_assert(SN_OP_POINTWISE_COUNT == N)). Add an op here first; the asserts name what else to touch. */
#ifndef SN_OPS_H
#define SN_OPS_H

/* Kinds: what a pass needs to know about an op without looking at it. */
typedef enum {
    SN_K_LEAF,      /* no inputs: fed, trained or constant */
    SN_K_POINTWISE, /* out[i] depends on in[i] only (inputs broadcast to the output shape) */
    SN_K_REDUCE,    /* reduction over one axis */
    SN_K_ROW,       /* works on whole rows (last axis): softmax, norms, loss */
    SN_K_MATMUL,    /* batched matrix product */
    SN_K_LAYOUT,    /* moves data, computes nothing: reshape, permute, slice, pad, concat, broadcast */
    SN_K_GATHER,    /* indexed reads and their scatter-add backward */
    SN_K_ATTENTION, /* fused causal attention and its backward: no (T, S) matrix in memory */
    SN_K_DEQUANT,   /* unpacks quantized storage into floats */
} sn_kind;

/* Attribute columns: which fields of sn_attrs an op uses (printed and parsed). */
enum {
    SN_A_F = 1 << 0,      /* f: a float (scale factor, eps, fill value) */
    SN_A_AXIS = 1 << 1,   /* axis */
    SN_A_KEEP = 1 << 2,   /* keepdim */
    SN_A_TRANS = 1 << 3,  /* ta, tb */
    SN_A_PERM = 1 << 4,   /* perm[rank] */
    SN_A_RANGE = 1 << 5,  /* start, end */
    SN_A_IGNORE = 1 << 6, /* ignore_index */
    SN_A_NAME = 1 << 7,   /* name */
    SN_A_INIT = 1 << 8,   /* init, f = init scale */
    SN_A_DATA = 1 << 9,   /* data[numel] */
    SN_A_ROLE = 1 << 10,  /* role (an sn_node field; printed when not none) */
    SN_A_SITE = 1 << 11,  /* site: which dropout (its mask's stream) */
};

#define SN_MAX_INPUTS 64 /* concat's limit; every other op takes at most 6 */

/*   X(NAME,         "text",          in_min, in_max, kind,          grad, attrs)
 * grad: 1 if the op has a gradient rule (0: integer or constant valued, gradient is zero). */
#define SN_OPS(X)                                                                                  \
    /* leaves */                                                                                   \
    X(INPUT, "input", 0, 0, SN_K_LEAF, 0, SN_A_NAME | SN_A_ROLE) /* fed each step: tokens, targets */ \
    X(PARAM, "param", 0, 0, SN_K_LEAF, 0, SN_A_NAME | SN_A_INIT) /* trained weight, init rule */   \
    X(CONST, "const", 0, 0, SN_K_LEAF, 0, SN_A_DATA)            /* literal tensor */               \
    X(FULL, "full", 0, 0, SN_K_LEAF, 0, SN_A_F)                 /* every element = f */            \
    /* pointwise, numpy broadcasting */                                                            \
    X(ADD, "add", 2, 2, SN_K_POINTWISE, 1, 0)                   /* a + b */                        \
    X(SUB, "sub", 2, 2, SN_K_POINTWISE, 1, 0)                   /* a - b */                        \
    X(MUL, "mul", 2, 2, SN_K_POINTWISE, 1, 0)                   /* a * b */                        \
    X(DIV, "div", 2, 2, SN_K_POINTWISE, 1, 0)                   /* a / b */                        \
    X(EQ, "eq", 2, 2, SN_K_POINTWISE, 0, 0)                     /* 1 where a == b, else 0 */       \
    X(NEG, "neg", 1, 1, SN_K_POINTWISE, 1, 0)                   /* -x */                           \
    X(SCALE, "scale", 1, 1, SN_K_POINTWISE, 1, SN_A_F)          /* f * x */                        \
    X(EXP, "exp", 1, 1, SN_K_POINTWISE, 1, 0)                   /* e^x */                          \
    X(LOG, "log", 1, 1, SN_K_POINTWISE, 1, 0)                   /* ln x */                         \
    X(TANH, "tanh", 1, 1, SN_K_POINTWISE, 1, 0)                 /* tanh x */                       \
    X(SQRT, "sqrt", 1, 1, SN_K_POINTWISE, 1, 0)                 /* sqrt x */                       \
    X(RSQRT, "rsqrt", 1, 1, SN_K_POINTWISE, 1, 0)               /* 1 / sqrt x */                   \
    X(GELU, "gelu", 1, 1, SN_K_POINTWISE, 1, 0)                 /* GELU, tanh approximation */     \
    X(SILU, "silu", 1, 1, SN_K_POINTWISE, 1, 0)                 /* x * sigmoid x */                \
    X(GELU_BWD, "gelu_bwd", 2, 2, SN_K_POINTWISE, 0, 0)         /* (x, dy) -> dy * gelu'(x) */     \
    X(SILU_BWD, "silu_bwd", 2, 2, SN_K_POINTWISE, 0, 0)         /* (x, dy) -> dy * silu'(x) */     \
    X(CAST, "cast", 1, 1, SN_K_POINTWISE, 1, 0)                 /* to the node's dtype */          \
    /* the largest power of two s with |x| s <= f, for x finite and not 0 (1 otherwise), s within \
     * f32's normal range: the fp8 pass's per-tensor scale from an amax; no gradient */            \
    X(POW2_SCALE, "pow2_scale", 1, 1, SN_K_POINTWISE, 0, SN_A_F)                                   \
    /* (x, seed) -> x * 1/(1-f) where element i is kept, else 0: ir/dropout.h's mask of (the f32  \
     * scalar seed, an integer below 2^24, site, i row-major in x's shape); its gradient is the   \
     * same mask of dy */                                                                          \
    X(DROPOUT, "dropout", 2, 2, SN_K_POINTWISE, 1, SN_A_F | SN_A_SITE)                             \
    /* reductions over one axis */                                                                 \
    X(SUM, "sum", 1, 1, SN_K_REDUCE, 1, SN_A_AXIS | SN_A_KEEP)  /* sum over axis */                \
    X(MEAN, "mean", 1, 1, SN_K_REDUCE, 1, SN_A_AXIS | SN_A_KEEP) /* mean over axis */              \
    X(MAX, "max", 1, 1, SN_K_REDUCE, 1, SN_A_AXIS | SN_A_KEEP)  /* max over axis */                \
    X(AMAX, "amax", 1, 1, SN_K_REDUCE, 0, SN_A_AXIS | SN_A_KEEP) /* max |x| over axis (NaN if any); \
                                                                     no gradient: scales only */ \
    /* row ops (last axis) */                                                                      \
    X(SOFTMAX, "softmax", 1, 1, SN_K_ROW, 1, 0)                 /* softmax over the last axis */   \
    X(SOFTMAX_BWD, "softmax_bwd", 2, 2, SN_K_ROW, 0, 0)         /* (y, dy) -> y*(dy - sum(dy*y)) */ \
    X(LAYERNORM, "layernorm", 3, 3, SN_K_ROW, 1, SN_A_F)        /* (x, w, b), eps = f */           \
    X(LAYERNORM_BWD, "layernorm_bwd", 3, 3, SN_K_ROW, 0, SN_A_F) /* (x, w, dy) -> dx */            \
    X(LAYERNORM_BWD_W, "layernorm_bwd_w", 2, 2, SN_K_ROW, 0, SN_A_F) /* (x, dy) -> sum dy*xhat */  \
    X(RMSNORM, "rmsnorm", 2, 2, SN_K_ROW, 1, SN_A_F)            /* (x, w), eps = f */              \
    X(RMSNORM_BWD, "rmsnorm_bwd", 3, 3, SN_K_ROW, 0, SN_A_F)    /* (x, w, dy) -> dx */             \
    X(RMSNORM_BWD_W, "rmsnorm_bwd_w", 2, 2, SN_K_ROW, 0, SN_A_F) /* (x, dy) -> sum dy*xhat */      \
    X(CAUSAL_MASK, "causal_mask", 1, 1, SN_K_ROW, 1, SN_A_F)    /* (..,T,S): j > i + S-T -> f */   \
    /* cross-entropy: end > 0 says only classes [0, end) are real (a padded vocabulary): the     \
     * others take no part in the softmax and get zero gradient; start = 0 */                     \
    X(CROSS_ENTROPY, "cross_entropy", 2, 2, SN_K_ROW, 1, SN_A_RANGE | SN_A_IGNORE) /* mean */      \
    X(CROSS_ENTROPY_BWD, "cross_entropy_bwd", 3, 3, SN_K_ROW, 0, SN_A_RANGE | SN_A_IGNORE) /* lg,tg,dl */\
    /* matrix product */                                                                           \
    X(MATMUL, "matmul", 2, 2, SN_K_MATMUL, 1, SN_A_TRANS)       /* op(a) @ op(b), batched */       \
    /* layout */                                                                                   \
    X(RESHAPE, "reshape", 1, 1, SN_K_LAYOUT, 1, 0)              /* same elements, node's shape */  \
    X(PERMUTE, "permute", 1, 1, SN_K_LAYOUT, 1, SN_A_PERM)      /* out dim i = in dim perm[i] */   \
    X(BROADCAST, "broadcast", 1, 1, SN_K_LAYOUT, 1, 0)          /* expand to the node's shape */   \
    X(SLICE, "slice", 1, 1, SN_K_LAYOUT, 1, SN_A_AXIS | SN_A_RANGE) /* [start, end) on axis */     \
    X(PAD, "pad", 1, 1, SN_K_LAYOUT, 1, SN_A_AXIS | SN_A_RANGE) /* zeros, x placed at start */     \
    X(CONCAT, "concat", 1, SN_MAX_INPUTS, SN_K_LAYOUT, 1, SN_A_AXIS) /* along axis */              \
    /* gather */                                                                                   \
    X(EMBEDDING, "embedding", 2, 2, SN_K_GATHER, 1, 0)          /* (table (V,C), ids) -> (.., C) */ \
    X(EMBEDDING_BWD, "embedding_bwd", 2, 2, SN_K_GATHER, 0, 0)  /* (ids, dy) -> (V,C) scatter-add */ \
    /* causal attention, scale = f: q (..,T,D), k (..,S,D), v (..,S,Dv); query i sees keys        \
     * j <= i + S-T; s_ij = f q_i.k_j, P_ij = exp(s_ij - lse_i), O_i = sum_j P_ij v_j. ATTENTION's  \
     * rule differentiates through lse (which must be attention_lse(q, k)) and gives it nothing. \
     * Grouped-query: k and v may have Hkv heads (their last leading dim) where q has H, Hkv      \
     * dividing H: with the flat batch index bq = b H + h, q's slice bq reads kv slice bq / G,    \
     * G = H / Hkv; dk and dv (shaped like k and v) sum the G query heads of their group. */      \
    X(ATTENTION_LSE, "attention_lse", 2, 2, SN_K_ATTENTION, 1, SN_A_F) /* (q,k) -> f32 lse (..,T) */ \
    X(ATTENTION, "attention", 4, 4, SN_K_ATTENTION, 1, SN_A_F)  /* (q,k,v,lse) -> O (..,T,Dv) */    \
    X(ATTENTION_BWD_Q, "attention_bwd_q", 6, 6, SN_K_ATTENTION, 0, SN_A_F) /* (q,k,v,o,do,lse) -> dq */ \
    X(ATTENTION_BWD_K, "attention_bwd_k", 6, 6, SN_K_ATTENTION, 0, SN_A_F) /* same inputs -> dk */  \
    X(ATTENTION_BWD_V, "attention_bwd_v", 6, 6, SN_K_ATTENTION, 0, SN_A_F) /* -> dv (q,k,do,lse) */ \
    /* decode over a KV cache, scale f: q (B, H, T, D), kc and vc (B, Hkv, S, D|Dv) the cached    \
     * keys and values, mask (B, 1, 1, S) f32 added to the scores over the cache (0 or -inf: the  \
     * valid positions of each row), k and v (B, Hkv, T, D|Dv) the new tokens' own; query t sees \
     * every cached key (masked) and the new keys u <= t: one softmax over both, O (B, H, T, Dv). \
     * Grouped-query as above. Inference only: no gradient. */                                    \
    X(ATTENTION_CACHE, "attention_cache", 6, 6, SN_K_ATTENTION, 0, SN_A_F)                         \
    /* quantized storage: packed u8 (ir/nf4.h's layout for the node's numel) -> the node's shape  \
     * and float dtype; no gradient (the packed base is frozen) */                                 \
    X(DEQUANT_NF4, "dequant_nf4", 1, 1, SN_K_DEQUANT, 0, 0)     /* NF4 bytes -> weights */

typedef enum {
#define SN_X(name, text, lo, hi, kind, grad, attrs) SN_OP_##name,
    SN_OPS(SN_X)
#undef SN_X
        SN_OP_COUNT
} sn_op;

/* How many ops are SN_K_POINTWISE: it pins the code generators' formula switches (cuda_expr.c,
 * llvm_fused.c), so that a new pointwise op fails to compile there until it has its formula. */
enum {
#define SN_X(name, text, lo, hi, kind, grad, attrs) +((kind) == SN_K_POINTWISE)
    SN_OP_POINTWISE_COUNT = 0 SN_OPS(SN_X)
#undef SN_X
};



#endif
