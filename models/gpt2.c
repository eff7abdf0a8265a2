/* gpt2.c: GPT-2 (Radford et al. 2019) built with the frontend API.
 * Convention: attention is written the plain way (matmul, scale, causal mask, softmax, matmul);
 * recognising it as flash attention is the attention pass's job, not the model's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt2.h"

static const sn_gpt2_config configs[] = {
    /* name           V      ctx   L   H   C     dropout */
    {"gpt2", 50257, 1024, 12, 12, 768, 0},
    {"gpt2-medium", 50257, 1024, 24, 16, 1024, 0},
    {"gpt2-large", 50257, 1024, 36, 20, 1280, 0},
    {"gpt2-xl", 50257, 1024, 48, 25, 1600, 0},
    {"demo", 256, 128, 4, 4, 128, 0}, /* byte-level, trains on a CPU in minutes */
    {"tiny", 256, 32, 2, 2, 32, 0},   /* tests; the interpreter runs a step in milliseconds */
};

bool sn_gpt2_config_find(const char *name, sn_gpt2_config *out) {
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
        if (!strcmp(configs[i].name, name)) {
            *out = configs[i];
            return true;
        }
    return false;
}

const char *sn_gpt2_config_names(void) { return "gpt2, gpt2-medium, gpt2-large, gpt2-xl, demo, tiny"; }

bool sn_gpt2_lora_targets_parse(const char *s, unsigned *targets) {
    static const struct {
        const char *name;
        unsigned bits;
    } names[] = {{"attn", SN_GPT2_LORA_ATTN}, {"mlp", SN_GPT2_LORA_MLP}, {"all", SN_GPT2_LORA_ALL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *targets = names[i].bits;
            return true;
        }
    return false;
}

const char *sn_gpt2_lora_targets_name(unsigned targets) {
    return targets == SN_GPT2_LORA_ALL ? "all" : targets == SN_GPT2_LORA_ATTN ? "attn"
           : targets == SN_GPT2_LORA_MLP ? "mlp" : "none";
}

typedef struct {
    sn_graph *g;
    const sn_gpt2_config *c;
    int B, T;
    const sn_gpt2_lora *lora; /* NULL: no adapters */
    int kv;                   /* 0: training; KV_PREFILL, KV_DECODE: generation (gpt2.h) */
    sn_node *mask;            /* KV_DECODE: (B, 1, 1, ctx), added to the scores over the cache */
    sn_node *seed;            /* the dropout seed input, or NULL: no dropout */
} builder;

/* Dropout at `site` (0: the embeddings, 1 + 2 l and 2 + 2 l: layer l's attention and MLP
 * outputs), when the model has it. */
static sn_node *drop(builder *m, sn_node *x, int site) {
    return m->seed ? sn_dropout(m->g, x, m->seed, m->c->dropout, site) : x;
}

enum { KV_PREFILL = 1, KV_DECODE };

static sn_node *weight(builder *m, const char *name, int64_t rows, int64_t cols, float std) {
    return sn_param(m->g, name, SN_F32, SN_SHAPE(rows, cols), SN_INIT_NORMAL, std);
}

static sn_node *vec(builder *m, const char *name, int64_t n, sn_init init) {
    return sn_param(m->g, name, SN_F32, SN_SHAPE(n), init, 0);
}

/* x (B, T, in) @ w (in, out) + b (out), plus the LoRA path when the layer is a target (bit) */
static sn_node *linear(builder *m, sn_node *x, const char *prefix, int64_t in, int64_t out,
                       float std, unsigned bit) {
    char w[96], b[96];
    snprintf(w, sizeof w, "%s.w", prefix);
    snprintf(b, sizeof b, "%s.b", prefix);
    sn_node *y = sn_add(m->g, sn_matmul(m->g, x, weight(m, w, in, out, std)), vec(m, b, out, SN_INIT_ZEROS));
    if (m->lora && (m->lora->targets & bit))
        y = sn_add(m->g, y, sn_lora_path(m->g, x, prefix, in, out, &m->lora->lora));
    return y;
}

static sn_node *layernorm(builder *m, sn_node *x, const char *prefix) {
    char w[96], b[96];
    snprintf(w, sizeof w, "%s.w", prefix);
    snprintf(b, sizeof b, "%s.b", prefix);
    int64_t C = m->c->n_embd;
    return sn_layernorm(m->g, x, vec(m, w, C, SN_INIT_ONES), vec(m, b, C, SN_INIT_ZEROS), 1e-5f);
}

/* (B, T, C) -> (B, H, T, D); with one token (decode) a reshape, which moves nothing */
static sn_node *heads(builder *m, sn_node *x) {
    int64_t H = m->c->n_head, D = m->c->n_embd / m->c->n_head;
    if (m->kv == KV_DECODE && m->T == 1) return sn_reshape(m->g, x, SN_SHAPE(m->B, H, 1, D));
    sn_node *r = sn_reshape(m->g, x, SN_SHAPE(m->B, m->T, H, D));
    return sn_permute(m->g, r, (const int[]){0, 2, 1, 3});
}

/* Decode: T new queries q (B, H, T, D) over the cached keys and values of this layer (INPUTs
 * k_cache.N, v_cache.N, (B, H, ctx, D): positions before the row's first new token are
 * valid, the rest masked by m->mask) and over their own keys k and values v (B, H, T, D),
 * causally: one softmax over both (sn_attention_cache: one kernel, no scores in memory). */
static sn_node *attend_cache(builder *m, sn_node *q, sn_node *k, sn_node *v, int layer) {
    sn_graph *g = m->g;
    int64_t H = m->c->n_head, D = m->c->n_embd / H, S = m->c->ctx;
    char name[64];
    snprintf(name, sizeof name, "k_cache.%d", layer);
    sn_node *kc = sn_input(g, name, SN_F32, SN_SHAPE(m->B, H, S, D));
    snprintf(name, sizeof name, "v_cache.%d", layer);
    sn_node *vc = sn_input(g, name, SN_F32, SN_SHAPE(m->B, H, S, D));
    return sn_attention_cache(g, q, kc, vc, m->mask, k, v, 1.0f / sqrtf((float)D));
}

static sn_node *attention(builder *m, sn_node *x, int layer, float proj_std) {
    sn_graph *g = m->g;
    int64_t C = m->c->n_embd, D = C / m->c->n_head;
    char p[64];
    snprintf(p, sizeof p, "h.%d.attn.c_attn", layer);
    sn_node *qkv = linear(m, x, p, C, 3 * C, 0.02f, SN_GPT2_LORA_ATTN); /* (B, T, 3C) */
    sn_node *part[3];
    sn_split(g, qkv, -1, 3, part);
    if (m->lora && m->lora->ia3) { /* IA3: l_k and l_v, one vector beside c_attn (gpt2.h) */
        sn_node *l = sn_ia3_vector(g, p, 2 * C);
        part[1] = sn_ia3_scale(g, part[1], sn_slice(g, l, 0, 0, C));
        part[2] = sn_ia3_scale(g, part[2], sn_slice(g, l, 0, C, 2 * C));
    }
    sn_node *q = heads(m, part[0]), *k = heads(m, part[1]), *v = heads(m, part[2]);
    sn_node *y;
    if (m->kv == KV_DECODE) {
        y = attend_cache(m, q, k, v, layer);
    } else {
        sn_node *att = sn_matmul_t(g, q, k, false, true); /* (B, H, T, T) */
        att = sn_scale(g, att, 1.0f / sqrtf((float)D));
        att = sn_softmax(g, sn_causal_mask(g, att));
        y = sn_matmul(g, att, v); /* (B, H, T, D) */
    }
    if (m->kv) { /* this layer's keys and values go to the cache */
        sn_graph_add_output(g, k);
        sn_graph_add_output(g, v);
    }
    if (m->kv != KV_DECODE || m->T != 1) y = sn_permute(g, y, (const int[]){0, 2, 1, 3});
    y = sn_reshape(g, y, SN_SHAPE(m->B, m->T, C));
    snprintf(p, sizeof p, "h.%d.attn.c_proj", layer);
    return linear(m, y, p, C, C, proj_std, SN_GPT2_LORA_ATTN);
}

static sn_node *mlp(builder *m, sn_node *x, int layer, float proj_std) {
    int64_t C = m->c->n_embd;
    char p[64];
    snprintf(p, sizeof p, "h.%d.mlp.c_fc", layer);
    sn_node *h = sn_gelu(m->g, linear(m, x, p, C, 4 * C, 0.02f, SN_GPT2_LORA_MLP)); /* (B, T, 4C) */
    snprintf(p, sizeof p, "h.%d.mlp.c_proj", layer);
    if (m->lora && m->lora->ia3) h = sn_ia3_scale(m->g, h, sn_ia3_vector(m->g, p, 4 * C)); /* l_ff */
    return linear(m, h, p, 4 * C, C, proj_std, SN_GPT2_LORA_MLP);
}

sn_status sn_gpt2_build(sn_graph *g, const sn_gpt2_config *c, int B, int T, sn_gpt2 *out, sn_err *e) {
    return sn_gpt2_build_lora(g, c, B, T, NULL, out, e);
}

static sn_status check(const sn_gpt2_config *c, int B, int T, const sn_gpt2_lora *lora, sn_err *e) {
    if (lora && lora->ia3 && (lora->lora.rank || lora->targets))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "gpt2 %s: IA3 vectors together with LoRA adapters "
                       "(rank %d) are not supported: choose one", c->name, lora->lora.rank);
    if (lora && !lora->ia3 && (lora->lora.rank < 1 || !(lora->lora.alpha > 0) || !lora->targets ||
                 lora->targets & ~(unsigned)SN_GPT2_LORA_ALL))
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: LoRA rank %d, alpha %g, targets %u: need a "
                       "rank >= 1, alpha > 0 and targets attn, mlp or all", c->name,
                       lora->lora.rank, (double)lora->lora.alpha, lora->targets);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: dropout %g: give a probability in [0, 1)",
                       c->name, (double)c->dropout);
    if (B < 1 || T < 1 || T > c->ctx)
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: batch %d x sequence %d: need B >= 1 and "
                       "1 <= T <= ctx = %d", c->name, B, T, c->ctx);
    if (c->n_embd % c->n_head)
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: n_embd %d is not a multiple of n_head %d",
                       c->name, c->n_embd, c->n_head);
    return SN_OK;
}

/* The blocks and the tied head over the embedded tokens x (B, T, C): the logits (B, T, V). */
static sn_node *body(builder *m, sn_node *x, sn_node *wte) {
    sn_graph *g = m->g;
    /* residual projections scaled by 1/sqrt(2 L) (GPT-2 paper, section 2.3) */
    float proj_std = 0.02f / sqrtf(2.0f * (float)m->c->n_layer);
    for (int l = 0; l < m->c->n_layer; l++) {
        char p[64];
        snprintf(p, sizeof p, "h.%d.ln_1", l);
        x = sn_add(g, x, drop(m, attention(m, layernorm(m, x, p), l, proj_std), 1 + 2 * l));
        snprintf(p, sizeof p, "h.%d.ln_2", l);
        x = sn_add(g, x, drop(m, mlp(m, layernorm(m, x, p), l, proj_std), 2 + 2 * l));
    }
    x = layernorm(m, x, "ln_f");
    return sn_matmul_t(g, x, wte, false, true); /* (B, T, V), tied head */
}

sn_status sn_gpt2_build_lora(sn_graph *g, const sn_gpt2_config *c, int B, int T,
                             const sn_gpt2_lora *lora, sn_gpt2 *out, sn_err *e) {
    sn_status s = check(c, B, T, lora, e);
    if (s) return s;
    builder m = {g, c, B, T, lora, 0, NULL, NULL};
    int64_t V = c->vocab, C = c->n_embd;
    out->idx = sn_input_tokens(g, "idx", SN_SHAPE(B, T));
    out->targets = sn_input_targets(g, "targets", SN_SHAPE(B, T));
    if (c->dropout > 0) m.seed = sn_input_dropout_seed(g);
    sn_node *wte = weight(&m, "wte", V, C, 0.02f);
    sn_node *wpe = weight(&m, "wpe", c->ctx, C, 0.02f);
    sn_node *x = drop(&m, sn_add(g, sn_embedding(g, wte, out->idx), sn_slice(g, wpe, 0, 0, T)), 0); /* (B,T,C) */
    out->logits = body(&m, x, wte);
    out->loss = sn_cross_entropy(g, out->logits, out->targets, -1);
    sn_graph_set_logits(g, out->logits);
    sn_graph_set_loss(g, out->loss);
    if (lora && !sn_graph_error(g)) lora->ia3 ? sn_ia3_freeze_base(g) : sn_lora_freeze_base(g);
    if (sn_graph_error(g))
        return sn_fail(e, sn_graph_status(g), "gpt2 %s: %s", c->name, sn_graph_error(g));
    return SN_OK;
}

sn_status sn_gpt2_build_kv(sn_graph *g, const sn_gpt2_config *c, int B, int T, bool decode,
                           const sn_gpt2_lora *lora, sn_err *e) {
    sn_status s = check(c, B, T, lora, e);
    if (s) return s;
    builder m = {g, c, B, T, lora, decode ? KV_DECODE : KV_PREFILL, NULL, NULL}; /* no dropout */
    int64_t V = c->vocab, C = c->n_embd;
    sn_node *idx = sn_input_tokens(g, "idx", SN_SHAPE(B, T));
    sn_node *pos = decode ? sn_input_role(g, "pos", SN_ROLE_POSITIONS, SN_I32, SN_SHAPE(B, T)) : NULL;
    if (decode) m.mask = sn_input_role(g, "mask", SN_ROLE_MASK, SN_F32, SN_SHAPE(B, 1, 1, c->ctx));
    sn_node *wte = weight(&m, "wte", V, C, 0.02f);
    sn_node *wpe = weight(&m, "wpe", c->ctx, C, 0.02f);
    sn_node *x = sn_add(g, sn_embedding(g, wte, idx), /* (B, T, C) */
                        decode ? sn_embedding(g, wpe, pos) : sn_slice(g, wpe, 0, 0, T));
    sn_graph_set_logits(g, body(&m, x, wte)); /* an output after each layer's k and v */
    if (lora && !sn_graph_error(g)) lora->ia3 ? sn_ia3_freeze_base(g) : sn_lora_freeze_base(g);
    if (sn_graph_error(g))
        return sn_fail(e, sn_graph_status(g), "gpt2 %s: %s", c->name, sn_graph_error(g));
    return SN_OK;
}
