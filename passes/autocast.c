/* autocast.c: the autocast pass: mixed precision as a forward rewrite, driven by one policy
 * table (torch.autocast's op lists): products take bf16 (or f16) operands, everything else f32.
 * Convention: a value is cast at most once per dtype (a parameter's low-precision copy is made
 * once per step however many products read it); casts to the low dtype move above views.
 * Linear layers store what a GEMM epilogue stores (cuBLASLt: bias and GELU input of the
 * output's type): a bias added to a product is read through its low-precision copy, a GELU
 * of a biased product reads its input rounded to the low dtype (the saved activation), a
 * cross-entropy of a product (the LM head) its logits rounded so (torch.autocast's bf16
 * logits), and LLaMA's products without a bias where torch.autocast returns them in 16 bits
 * and only pointwise ops read them: SwiGLU's gate and up, the rotary embeddings' q and k. A LoRA adapter's sum (frontend/lora.h: base + (x @ A) @ B) reads the adapter's
 * product through its low-precision copy (PEFT's lora_B under torch.autocast returns bf16) and
 * adds it to the base linear's f32 sum (product + bias), rounded where the sum's readers would
 * round the base: so the base's GEMM adds the adapter's 16-bit product as its C (cuBLASLt's
 * D = epilogue(A B + C + bias): program/kernel.h accum) and keeps its bias and GELU epilogues,
 * and the adapter's GEMM writes 2 bytes an element. PEFT rounds the base first too (the bf16
 * linear's output, then the bf16 add): this skips that rounding, rnd(v + b + rnd(hB)) against
 * rnd(rnd(v + b) + rnd(hB)). Where the readers read the sum in f32 (a residual add), the
 * reader's kernel adds the copy to the base's f32 sum. An IA3 scaling
 * (frontend/ia3.h) is read through as a view is, so a model at ones rounds as its base does. */
#include <stdlib.h>

#include "frontend/frontend.h"
#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "ir/rewrite.h"
#include "passes.h"

_Static_assert(SN_OP_COUNT == 54, "a new op needs its autocast policy in policy()");

/* What autocast does with an op's float inputs. */
typedef enum {
    POL_LOW,    /* products: inputs cast to the low dtype; matmul returns f32 (f32 accumulation),
                   attention returns the low dtype (its readers are products: the projection) */
    POL_F32,    /* computed in f32: pointwise, reductions, norms, softmax, cross-entropy, gathers */
    POL_FOLLOW, /* views and explicit casts: keep their input's dtype (a view of a bf16 value is
                   a bf16 view) */
    POL_LEAF,   /* inputs, parameters (f32 masters), constants: unchanged */
    POL_REFUSE, /* backward ops: the pass runs before autodiff */
    POL_DEQUANT, /* quantized weights: unpacked straight to the low dtype when only products read
                    them (no f32 copy, no cast), else to f32 */
} policy;

static policy policy_of(sn_op op) {
    switch (op) {
    case SN_OP_MATMUL: case SN_OP_ATTENTION_LSE: case SN_OP_ATTENTION: return POL_LOW;
    case SN_OP_ATTENTION_BWD_Q: case SN_OP_ATTENTION_BWD_K: case SN_OP_ATTENTION_BWD_V:
    case SN_OP_SOFTMAX_BWD: case SN_OP_LAYERNORM_BWD: case SN_OP_LAYERNORM_BWD_W:
    case SN_OP_RMSNORM_BWD: case SN_OP_RMSNORM_BWD_W: case SN_OP_CROSS_ENTROPY_BWD:
    case SN_OP_EMBEDDING_BWD: case SN_OP_GELU_BWD: case SN_OP_SILU_BWD:
        return POL_REFUSE;
    case SN_OP_CAST: return POL_FOLLOW;
    case SN_OP_ATTENTION_CACHE: return POL_F32; /* the f32 cache is read where it is, not copied */
    case SN_OP_DEQUANT_NF4: return POL_DEQUANT;
    default: break;
    }
    switch (sn_op_kind(op)) {
    case SN_K_LEAF: return POL_LEAF;
    case SN_K_LAYOUT: return POL_FOLLOW;
    default: return POL_F32;
    }
}

/* The pass's state: the rewrite and, per node of the new graph, its casts made so far. */
typedef struct {
    sn_rewrite r;
    sn_dtype low;
    sn_node **to_low, **to_f32; /* [cap], by new node id */
    int cap;
    int n_casts;
    sn_err *e;
} ac_state;

/* Makes room in the cast memo for every node of the new graph; false when out of memory. */
static bool grow(ac_state *s) {
    int need = s->r.g->n_nodes + 1;
    if (need <= s->cap) return true;
    int cap = need * 2;
    sn_node **a = sn_realloc(s->to_low, sizeof *a * (size_t)cap, "the autocast pass's casts", s->e);
    if (!a) return false;
    s->to_low = a;
    sn_node **b = sn_realloc(s->to_f32, sizeof *b * (size_t)cap, "the autocast pass's casts", s->e);
    if (!b) return false;
    s->to_f32 = b;
    for (int i = s->cap; i < cap; i++) a[i] = b[i] = NULL;
    s->cap = cap;
    return true;
}

/* Whether x is trained f32 matrices concatenated along the rows (passes/siblings.c). */
static bool trained_rows(const sn_node *x) {
    if (x->op != SN_OP_CONCAT || x->a.axis != 0) return false;
    for (int k = 0; k < x->n_in; k++)
        if (x->in[k]->op != SN_OP_PARAM || x->in[k]->a.frozen || x->in[k]->dtype != SN_F32)
            return false;
    return true;
}

/* x (a node of the new graph) in dtype t, cast once. Trained matrices concatenated (the
 * siblings pass's weights) are the concatenation of their casts. A single-input view (reshape, permute,
 * slice, broadcast) of an f32 value is cast below the view, so that q, k and v sliced from one
 * QKV product share one cast of it and attention reads them in place. */
static sn_node *cast(ac_state *s, sn_node *x, sn_dtype t) {
    if (!x || x->dtype == t || !sn_dtype_is_float(x->dtype) || !grow(s)) return x;
    if (x->op == SN_OP_CAST && x->dtype == SN_F32 && x->in[0]->dtype == t)
        return x->in[0]; /* a 16-bit value widened (the base16 pass's weights): exactly itself */
    sn_node **memo = t == SN_F32 ? s->to_f32 : s->to_low;
    if (memo[x->id]) return memo[x->id];
    sn_node *y;
    bool view = x->op == SN_OP_RESHAPE || x->op == SN_OP_PERMUTE || x->op == SN_OP_SLICE ||
                x->op == SN_OP_BROADCAST;
    if (t != SN_F32 && trained_rows(x)) { /* each part's cast a weight shadow: the parts read
                                             where AdamW writes them (program.h: a block) */
        sn_node *parts[SN_MAX_INPUTS];
        for (int k = 0; k < x->n_in; k++) parts[k] = cast(s, x->in[k], t);
        y = sn_concat(s->r.g, x->n_in, parts, 0);
    } else if (t != SN_F32 && view) {
        sn_node *in[1] = {cast(s, x->in[0], t)}, p = *x;
        p.id = -1;
        p.grad = NULL;
        p.name = NULL;
        p.in = in;
        p.dtype = t;
        y = sn_graph_append(s->r.g, &p);
    } else {
        y = sn_cast(s->r.g, x, t);
        s->n_casts++;
    }
    if (!y || !grow(s)) return y;
    memo = t == SN_F32 ? s->to_f32 : s->to_low;
    memo[x->id] = y;
    return y;
}

/* Whether x (new graph) is a product: a matmul, or a vector added to one (a linear layer). */
static bool is_product(const sn_node *x) { return x->op == SN_OP_MATMUL && x->dtype == SN_F32; }
static bool is_linear(const sn_node *x) {
    return x->op == SN_OP_ADD && (is_product(x->in[0]) || is_product(x->in[1]));
}

/* Whether x is a PARAM "P.lora_b", or such matrices padded and stacked into a block-diagonal
 * one (passes/siblings.c: the adapters of several projections of one x). */
static bool adapter_b(const sn_node *x) {
    if (x->op == SN_OP_PARAM) return sn_lora_is_adapter(x->name);
    if (x->op == SN_OP_PAD) return adapter_b(x->in[0]);
    if (x->op != SN_OP_CONCAT) return false;
    for (int i = 0; i < x->n_in; i++)
        if (x->in[i]->op != SN_OP_PAD || !adapter_b(x->in[i])) return false;
    return true;
}

/* Whether old node x is a LoRA adapter's product (..., r) @ B (adapter_b). */
static bool adapter_product(const sn_node *x) {
    return x->op == SN_OP_MATMUL && adapter_b(x->in[1]);
}

/* The base operand of an adapted layer's sum u (old graph): u = base + adapter product; NULL
 * when u is something else. */
static const sn_node *adapter_base(const sn_node *u) {
    if (u->op != SN_OP_ADD) return NULL;
    if (adapter_product(u->in[1]) && !adapter_product(u->in[0])) return u->in[0];
    if (adapter_product(u->in[0]) && !adapter_product(u->in[1])) return u->in[1];
    return NULL;
}

/* Whether old node u is x scaled by an IA3 vector (frontend/ia3.h: x * l, l a "P.ia3_l" PARAM or
 * a view of one): read as x is, so that at l = 1 the model rounds where the base model does. */
static bool ia3_scaling(const sn_node *u, const sn_node *x) {
    if (u->op != SN_OP_MUL) return false;
    const sn_node *l = u->in[0] == x ? u->in[1] : u->in[0];
    while (l->op == SN_OP_SLICE || l->op == SN_OP_RESHAPE || l->op == SN_OP_BROADCAST) l = l->in[0];
    return l->op == SN_OP_PARAM && sn_ia3_is_vector(l->name);
}

/* Whether old node x is an output or the loss. */
static bool kept(const sn_graph *in, const sn_node *x) {
    for (int k = 0; k < in->n_outputs; k++)
        if (in->outputs[k] == x) return true;
    return in->loss == x;
}

/* Whether every reader of old node x rounds it to the low dtype anyway: products, GELU (read
 * rounded, below) and views read so; not an output. Then a bias added into x may be rounded. */
static bool read_low(const sn_graph *in, const sn_node *x) {
    int readers = 0;
    if (kept(in, x)) return false;
    for (int i = x->id + 1; i < in->n_nodes; i++) {
        const sn_node *u = in->nodes[i];
        for (int j = 0; j < u->n_in; j++) {
            if (u->in[j] != x) continue;
            readers++;
            bool view = u->op == SN_OP_RESHAPE || u->op == SN_OP_PERMUTE ||
                        u->op == SN_OP_SLICE || u->op == SN_OP_BROADCAST;
            /* an adapter's sum is read as its base, an IA3 scaling as what it scales, a
               concatenation (siblings.c's dequantized NF4 weights) as its readers read it */
            bool through = view || adapter_base(u) == x || ia3_scaling(u, x) || u->op == SN_OP_CONCAT;
            if (policy_of(u->op) != POL_LOW && u->op != SN_OP_GELU && !(through && read_low(in, u)))
                return false;
        }
    }
    return readers > 0;
}

/* Whether old node x is a product (no bias: LLaMA's projections), an adapted one's sum, or a
 * product's columns of several made one (passes/siblings.c: q, k, v and gate, up of one x: a
 * slice along the product's last axis), as SwiGLU's gate and up and the rotary embeddings' q
 * and k are. */
static bool plain_product(const sn_node *x) {
    if (x->op == SN_OP_SLICE && x->a.axis == x->rank - 1) x = x->in[0];
    const sn_node *base = adapter_base(x);
    return x->op == SN_OP_MATMUL || (base && base->op == SN_OP_MATMUL);
}

/* The product (plain_product) old node x views through a head split (reshapes, permutes and
 * slices, a permute among them; an IA3 scaling read through as a view is), or NULL. */
static const sn_node *head_product(const sn_node *x) {
    bool permuted = false;
    for (;;) {
        if (permuted && plain_product(x)) break; /* a projection's columns: its own product */
        if (x->op == SN_OP_RESHAPE || x->op == SN_OP_PERMUTE || x->op == SN_OP_SLICE) {
            permuted |= x->op == SN_OP_PERMUTE;
            x = x->in[0];
        } else if (x->op == SN_OP_MUL && (ia3_scaling(x, x->in[0]) || ia3_scaling(x, x->in[1]))) {
            x = ia3_scaling(x, x->in[0]) ? x->in[0] : x->in[1];
        } else {
            break;
        }
    }
    return permuted && plain_product(x) ? x : NULL;
}

/* Whether every reader of old node x, through views, is a pointwise op or a concat (the rotary
 * embeddings' reads of q and k), x no output. */
static bool read_pointwise(const sn_graph *in, const sn_node *x) {
    if (kept(in, x)) return false;
    for (int i = x->id + 1; i < in->n_nodes; i++) {
        const sn_node *u = in->nodes[i];
        for (int j = 0; j < u->n_in; j++) {
            if (u->in[j] != x) continue;
            bool view = u->op == SN_OP_RESHAPE || u->op == SN_OP_PERMUTE || u->op == SN_OP_SLICE;
            if (view ? !read_pointwise(in, u)
                     : u->op != SN_OP_CONCAT && sn_op_kind(u->op) != SN_K_POINTWISE)
                return false;
        }
    }
    return true;
}

/* Whether old node n reads its operand i as a product split into heads that only pointwise ops
 * read (LLaMA's q and k, rotated): torch.autocast's projection returns it in the low dtype. */
static bool head_read(const sn_graph *in, const sn_node *n, int i) {
    const sn_node *m = head_product(n->in[i]);
    return m && read_pointwise(in, m);
}

/* x (new graph, f32) as the low dtype read back in f32: what an epilogue of the low output
 * type stores (a bias, a GELU's input) and a reader then computes with. */
static sn_node *rounded(ac_state *s, sn_node *x) { return cast(s, cast(s, x, s->low), SN_F32); }

/* Copies old node n with its float inputs in the dtypes its policy asks for. */
static sn_status rewrite_node(ac_state *s, const sn_graph *in, const sn_node *n) {
    sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&s->r, n, ins);
    switch (policy_of(n->op)) {
    case POL_REFUSE:
        return sn_fail(s->e, SN_ERR_INVALID, "autocast: node %%%d (%s) is a backward op; run the "
                       "pass on the forward graph, before autodiff", n->id, sn_op_name(n->op));
    case POL_LEAF: break;
    case POL_DEQUANT:
        p.dtype = read_low(in, n) ? s->low : SN_F32;
        break;
    case POL_LOW:
        for (int i = 0; i < n->n_in; i++) /* attention's lse (input 3) stays f32 */
            if (!(n->op == SN_OP_ATTENTION && i == 3)) ins[i] = cast(s, ins[i], s->low);
        break;
    case POL_F32:
        for (int i = 0; i < n->n_in; i++) ins[i] = cast(s, ins[i], SN_F32);
        if (n->op == SN_OP_ADD && read_low(in, n)) /* a linear layer's bias, a vector (N) */
            for (int i = 0; i < 2; i++) {
                const sn_node *b = ins[i];
                if (is_product(ins[1 - i]) && b->op == SN_OP_PARAM && b->rank == 1 &&
                    b->shape[0] == ins[1 - i]->shape[ins[1 - i]->rank - 1])
                    ins[i] = rounded(s, ins[i]);
            }
        const sn_node *base = adapter_base(n);
        if (base) { /* the adapter's product read rounded, the base's sum not (the base's
                       GEMM adds the copy as its C, kernel.h accum; or the reader's kernel) */
            int a = n->in[0] == base; /* the product's operand */
            ins[a] = rounded(s, ins[a]);
        }
        if (n->op == SN_OP_GELU && (is_linear(ins[0]) || adapter_base(n->in[0])))
            ins[0] = rounded(s, ins[0]);
        /* SwiGLU's silu(gate) * up reads both products rounded, as torch.autocast's linear
           layers leave them: their GEMMs store 16 bits, the MLP saves half the bytes */
        if (n->op == SN_OP_SILU && plain_product(n->in[0])) ins[0] = rounded(s, ins[0]);
        for (int i = 0; n->op == SN_OP_MUL && i < 2; i++)
            if (n->in[1 - i]->op == SN_OP_SILU && plain_product(n->in[1 - i]->in[0]) &&
                plain_product(n->in[i]))
                ins[i] = rounded(s, ins[i]);
        /* q and k split into heads and rotated read rounded, as torch.autocast's projections
           return them: their GEMMs store 16 bits, the rotation reads half the bytes */
        for (int i = 0; sn_op_kind(n->op) == SN_K_POINTWISE && i < n->n_in; i++)
            if (head_read(in, n, i)) ins[i] = rounded(s, ins[i]);
        /* a product's logits in the low dtype, as torch.autocast's linear layer leaves them
           (cross-entropy widens them): the LM head stores them in 16 bits, the classifier
           reads half the bytes */
        if (n->op == SN_OP_CROSS_ENTROPY && is_product(ins[0])) ins[0] = rounded(s, ins[0]);
        break;
    case POL_FOLLOW: {
        /* rotate_half's halves of q or k concatenated in the low dtype (a cast's value made
           for the concat would need a buffer; views of the product's copy fold into reads) */
        bool halves = n->op == SN_OP_CONCAT;
        for (int i = 0; halves && i < n->n_in; i++) halves = head_read(in, n, i);
        for (int i = 0; halves && i < n->n_in; i++) ins[i] = cast(s, ins[i], s->low);
        if (n->op == SN_OP_CONCAT || n->op == SN_OP_PAD) { /* mixed inputs meet in f32 */
            bool mixed = false;
            for (int i = 1; i < n->n_in; i++) mixed |= ins[i]->dtype != ins[0]->dtype;
            for (int i = 0; mixed && i < n->n_in; i++) ins[i] = cast(s, ins[i], SN_F32);
        }
        if (n->op != SN_OP_CAST) p.dtype = ins[0]->dtype; /* a view follows its input */
        break;
    }
    }
    sn_rewrite_emit(&s->r, n, &p); /* a shape error stays in r.g for sn_rewrite_end */
    return SN_OK;
}

/* g without the computing nodes nothing reads (the f32 views whose low-precision copies replaced
 * them): a copy through the rewrite keeping leaves, and nodes outputs and the loss depend on. */
static sn_status drop_dead(sn_graph **g, sn_err *e) {
    const sn_graph *in = *g;
    bool *live = sn_calloc((size_t)in->n_nodes + 1, sizeof *live, "the autocast pass's liveness", e);
    sn_rewrite r;
    if (!live || sn_rewrite_begin(&r, in, e)) {
        free(live);
        return SN_ERR_OOM;
    }
    for (int i = in->n_nodes - 1; i >= 0; i--) { /* readers come after what they read */
        const sn_node *n = in->nodes[i];
        bool kept = live[i] || sn_op_kind(n->op) == SN_K_LEAF;
        for (int k = 0; k < in->n_outputs; k++) kept |= in->outputs[k] == n;
        kept |= in->loss == n;
        live[i] = kept;
        for (int k = 0; kept && k < n->n_in; k++) live[n->in[k]->id] = true;
    }
    for (int i = 0; i < in->n_nodes; i++)
        if (live[i]) sn_rewrite_copy(&r, in->nodes[i]);
    free(live);
    sn_graph *out;
    sn_status st = sn_rewrite_end(&r, "autocast", &out, e);
    if (st) return st;
    sn_graph_free(*g);
    *g = out;
    return SN_OK;
}

sn_status sn_pass_autocast(const sn_graph *in, sn_precision prec, sn_graph **out,
                           int *n_casts, sn_err *e) {
    *out = NULL;
    *n_casts = 0;
    if (prec != SN_PRECISION_BF16 && prec != SN_PRECISION_FP16)
        return sn_fail(e, SN_ERR_INVALID, "autocast: precision %s has no low-precision storage "
                       "(use bf16 or fp16; fp32 and tf32 do not run the pass)",
                       sn_precision_name(prec));
    sn_status st = sn_verify(in, e);
    if (st) return st;
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "autocast: the graph already has a backward part; run "
                       "the pass before autodiff so the gradients come from the cast graph");
    ac_state s = {.low = prec == SN_PRECISION_BF16 ? SN_BF16 : SN_F16, .e = e};
    if ((st = sn_rewrite_begin(&s.r, in, e))) return st;
    for (int i = 0; !st && i < in->n_nodes; i++) st = rewrite_node(&s, in, in->nodes[i]);
    /* outputs and the loss keep the dtypes the model gave them */
    for (int i = 0; !st && i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        if (s.r.map[i] && s.r.map[i]->dtype != n->dtype) {
            bool kept = n == in->loss;
            for (int k = 0; k < in->n_outputs; k++) kept |= in->outputs[k] == n;
            if (kept) s.r.map[i] = cast(&s, s.r.map[i], n->dtype);
        }
    }
    free(s.to_low);
    free(s.to_f32);
    if (st) {
        free(s.r.map);
        sn_graph_free(s.r.g);
        return st;
    }
    *n_casts = s.n_casts;
    if ((st = sn_rewrite_end(&s.r, "autocast", out, e)) || (st = drop_dead(out, e))) {
        if (*out) sn_graph_free(*out);
        *out = NULL;
        return st;
    }
    if (prec == SN_PRECISION_FP16 && (*out)->loss) { /* dynamic loss scaling (train.h) */
        sn_graph *g = *out;
        sn_node *scale = sn_input_role(g, SN_LOSS_SCALE_INPUT, SN_ROLE_LOSS_SCALE, SN_F32, SN_SCALAR);
        g->loss = sn_mul(g, g->loss, scale);
        if (sn_graph_error(g)) {
            st = sn_fail(e, g->err.code, "autocast: scaling the loss: %s", sn_graph_error(g));
            sn_graph_free(g);
            *out = NULL;
        }
    }
    return st;
}
