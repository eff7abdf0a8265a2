/* gpt2.c: GPT-2 (Radford et al. 2019) built with the frontend API.
 * Convention: attention is written the plain way (matmul, scale, causal mask, softmax, matmul);
 * recognising it as flash attention is the attention pass's job, not the model's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt2.h"

static const sn_gpt2_config configs[] = {
    /* name           V      ctx   L   H   C */
    {"gpt2", 50257, 1024, 12, 12, 768},
    {"gpt2-medium", 50257, 1024, 24, 16, 1024},
    {"gpt2-large", 50257, 1024, 36, 20, 1280},
    {"gpt2-xl", 50257, 1024, 48, 25, 1600},
    {"demo", 256, 128, 4, 4, 128}, /* byte-level, trains on a CPU in minutes */
    {"tiny", 256, 32, 2, 2, 32},   /* tests; the interpreter runs a step in milliseconds */
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
} builder;

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

/* (B, T, C) -> (B, H, T, D) */
static sn_node *heads(builder *m, sn_node *x) {
    int64_t H = m->c->n_head, D = m->c->n_embd / m->c->n_head;
    sn_node *r = sn_reshape(m->g, x, SN_SHAPE(m->B, m->T, H, D));
    return sn_permute(m->g, r, (const int[]){0, 2, 1, 3});
}

static sn_node *attention(builder *m, sn_node *x, int layer, float proj_std) {
    sn_graph *g = m->g;
    int64_t C = m->c->n_embd, D = C / m->c->n_head;
    char p[64];
    snprintf(p, sizeof p, "h.%d.attn.c_attn", layer);
    sn_node *qkv = linear(m, x, p, C, 3 * C, 0.02f, SN_GPT2_LORA_ATTN); /* (B, T, 3C) */
    sn_node *part[3];
    sn_split(g, qkv, -1, 3, part);
    sn_node *q = heads(m, part[0]), *k = heads(m, part[1]), *v = heads(m, part[2]);
    sn_node *att = sn_matmul_t(g, q, k, false, true); /* (B, H, T, T) */
    att = sn_scale(g, att, 1.0f / sqrtf((float)D));
    att = sn_softmax(g, sn_causal_mask(g, att));
    sn_node *y = sn_matmul(g, att, v); /* (B, H, T, D) */
    y = sn_reshape(g, sn_permute(g, y, (const int[]){0, 2, 1, 3}), SN_SHAPE(m->B, m->T, C));
    snprintf(p, sizeof p, "h.%d.attn.c_proj", layer);
    return linear(m, y, p, C, C, proj_std, SN_GPT2_LORA_ATTN);
}

static sn_node *mlp(builder *m, sn_node *x, int layer, float proj_std) {
    int64_t C = m->c->n_embd;
    char p[64];
    snprintf(p, sizeof p, "h.%d.mlp.c_fc", layer);
    sn_node *h = sn_gelu(m->g, linear(m, x, p, C, 4 * C, 0.02f, SN_GPT2_LORA_MLP)); /* (B, T, 4C) */
    snprintf(p, sizeof p, "h.%d.mlp.c_proj", layer);
    return linear(m, h, p, 4 * C, C, proj_std, SN_GPT2_LORA_MLP);
}

sn_status sn_gpt2_build(sn_graph *g, const sn_gpt2_config *c, int B, int T, sn_gpt2 *out, sn_err *e) {
    return sn_gpt2_build_lora(g, c, B, T, NULL, out, e);
}

sn_status sn_gpt2_build_lora(sn_graph *g, const sn_gpt2_config *c, int B, int T,
                             const sn_gpt2_lora *lora, sn_gpt2 *out, sn_err *e) {
    if (lora && (lora->lora.rank < 1 || !(lora->lora.alpha > 0) || !lora->targets ||
                 lora->targets & ~(unsigned)SN_GPT2_LORA_ALL))
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: LoRA rank %d, alpha %g, targets %u: need a "
                       "rank >= 1, alpha > 0 and targets attn, mlp or all", c->name,
                       lora->lora.rank, (double)lora->lora.alpha, lora->targets);
    if (B < 1 || T < 1 || T > c->ctx)
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: batch %d x sequence %d: need B >= 1 and "
                       "1 <= T <= ctx = %d", c->name, B, T, c->ctx);
    if (c->n_embd % c->n_head)
        return sn_fail(e, SN_ERR_INVALID, "gpt2 %s: n_embd %d is not a multiple of n_head %d",
                       c->name, c->n_embd, c->n_head);
    builder m = {g, c, B, T, lora};
    int64_t V = c->vocab, C = c->n_embd;
    /* residual projections scaled by 1/sqrt(2 L) (GPT-2 paper, section 2.3) */
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);

    out->idx = sn_input(g, "idx", SN_I32, SN_SHAPE(B, T));
    out->targets = sn_input(g, "targets", SN_I32, SN_SHAPE(B, T));
    sn_node *wte = weight(&m, "wte", V, C, 0.02f);
    sn_node *wpe = weight(&m, "wpe", c->ctx, C, 0.02f);
    sn_node *x = sn_add(g, sn_embedding(g, wte, out->idx), sn_slice(g, wpe, 0, 0, T)); /* (B,T,C) */
    for (int l = 0; l < c->n_layer; l++) {
        char p[64];
        snprintf(p, sizeof p, "h.%d.ln_1", l);
        x = sn_add(g, x, attention(&m, layernorm(&m, x, p), l, proj_std));
        snprintf(p, sizeof p, "h.%d.ln_2", l);
        x = sn_add(g, x, mlp(&m, layernorm(&m, x, p), l, proj_std));
    }
    x = layernorm(&m, x, "ln_f");
    out->logits = sn_matmul_t(g, x, wte, false, true); /* (B, T, V), tied head */
    out->loss = sn_cross_entropy(g, out->logits, out->targets, -1);
    sn_graph_add_output(g, out->logits);
    g->loss = out->loss;
    sn_graph_add_output(g, out->loss);
    if (lora && !sn_graph_error(g)) sn_lora_freeze_base(g);
    if (sn_graph_error(g))
        return sn_fail(e, g->err.code, "gpt2 %s: %s", c->name, sn_graph_error(g));
    return SN_OK;
}
