/* llama.c: the LLaMA-family decoder (Touvron et al. 2023) of llama.h built with the frontend API:
 * RMSNorm, rotary embeddings, grouped-query attention, a SwiGLU MLP, no biases but Qwen2's.
 * Convention: attention is written out (matmul, scale, causal mask, softmax, matmul) on rotated
 * q and k, each key/value head repeated for its query heads by reshape and broadcast; the
 * attention pass fuses it and reads the key/value heads unrepeated. Decoding over a KV cache is
 * sn_attention_cache, which reads the key/value heads unrepeated too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static const sn_llama_config configs[] = {
    /* name V ctx L H Hkv D C F eps theta (llama3 scaling) tied qkv_bias */
    {"smollm2-135m", 49152, 8192, 30, 9, 3, 64, 576, 1536, 1e-5f, 100000.0f, 0, 0, 0, 0, true, false},
    {"smollm2-360m", 49152, 8192, 32, 15, 5, 64, 960, 2560, 1e-5f, 100000.0f, 0, 0, 0, 0, true, false},
    {"tinyllama-1.1b", 32000, 2048, 22, 32, 4, 64, 2048, 5632, 1e-5f, 10000.0f, 0, 0, 0, 0, false, false},
    {"llama-3.2-1b", 128256, 131072, 16, 32, 8, 64, 2048, 8192, 1e-5f, 500000.0f, 32.0f, 1.0f, 4.0f,
     8192, true, false},
    {"qwen2.5-0.5b", 151936, 32768, 24, 14, 2, 64, 896, 4864, 1e-6f, 1000000.0f, 0, 0, 0, 0, true, true},
    {"llama-tiny", 256, 64, 2, 4, 2, 8, 32, 64, 1e-5f, 10000.0f, 0, 0, 0, 0, false, false}, /* tests */
};

bool sn_llama_config_find(const char *name, sn_llama_config *out) {
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
        if (!strcmp(configs[i].name, name)) {
            *out = configs[i];
            return true;
        }
    return false;
}

bool sn_llama_config_at(int i, sn_llama_config *out) {
    if (i < 0 || (size_t)i >= sizeof configs / sizeof configs[0]) return false;
    *out = configs[i];
    return true;
}

const char *sn_llama_config_names(void) {
    static char names[256];
    if (names[0]) return names;
    for (size_t i = 0, at = 0; i < sizeof configs / sizeof configs[0]; i++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", configs[i].name);
    return names;
}

sn_status sn_llama_config_check(const sn_llama_config *c, sn_err *e) {
    const char *n = c->name ? c->name : "llama";
    if (c->vocab < 1 || c->ctx < 1 || c->n_layer < 1 || c->hidden < 1 || c->intermediate < 1)
        return sn_fail(e, SN_ERR_INVALID, "%s: vocab %d, ctx %d, %d layers, hidden %d, intermediate "
                       "%d: each must be at least 1", n, c->vocab, c->ctx, c->n_layer, c->hidden,
                       c->intermediate);
    if (c->n_head < 1 || c->n_kv_head < 1 || c->n_head % c->n_kv_head)
        return sn_fail(e, SN_ERR_INVALID, "%s: %d heads, %d key/value heads: the key/value heads "
                       "must divide the heads", n, c->n_head, c->n_kv_head);
    if (c->head_dim < 2 || c->head_dim % 2)
        return sn_fail(e, SN_ERR_INVALID, "%s: head_dim %d: rotary embeddings turn pairs, so it "
                       "must be even", n, c->head_dim);
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 1))
        return sn_fail(e, SN_ERR_INVALID, "%s: rms_norm_eps %g, rope_theta %g: need eps > 0 and "
                       "theta > 1", n, (double)c->rms_norm_eps, (double)c->rope_theta);
    if (c->rope_factor != 0 && !(c->rope_factor >= 1 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
                                 c->rope_low_freq_factor > 0 && c->rope_original_ctx > 0))
        return sn_fail(e, SN_ERR_INVALID, "%s: llama3 rope scaling factor %g, low_freq_factor %g, "
                       "high_freq_factor %g, original_max_position_embeddings %d: need factor >= 1, "
                       "0 < low < high and a positive length", n, (double)c->rope_factor,
                       (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
                       c->rope_original_ctx);
    return SN_OK;
}

/* ---- a configuration as text: a checkpoint's "model.config" ---- */

/* F: the floats' conversion, "a" to print and "la" to read (doubles) */
#define CONFIG_FMT(F) "vocab=%d ctx=%d layers=%d heads=%d kv_heads=%d head_dim=%d hidden=%d " \
                      "intermediate=%d rms_norm_eps=%" F " rope_theta=%" F " rope_factor=%" F " " \
                      "rope_low_freq_factor=%" F " rope_high_freq_factor=%" F " " \
                      "rope_original_ctx=%d tied=%d qkv_bias=%d"

int sn_llama_config_format(const sn_llama_config *c, char *buf, size_t len) {
    return snprintf(buf, len, CONFIG_FMT("a"), c->vocab, c->ctx, c->n_layer, c->n_head, c->n_kv_head,
                    c->head_dim, c->hidden, c->intermediate, (double)c->rms_norm_eps,
                    (double)c->rope_theta, (double)c->rope_factor, (double)c->rope_low_freq_factor,
                    (double)c->rope_high_freq_factor, c->rope_original_ctx, c->tie_word_embeddings,
                    c->qkv_bias);
}

sn_status sn_llama_config_parse(const char *text, sn_llama_config *out, sn_err *e) {
    sn_llama_config c = {.name = "llama-custom"};
    double eps, theta, factor, low, high;
    int tied, bias, end = 0;
    int got = text ? sscanf(text, CONFIG_FMT("la") "%n", &c.vocab, &c.ctx, &c.n_layer, &c.n_head,
                            &c.n_kv_head, &c.head_dim, &c.hidden, &c.intermediate, &eps, &theta,
                            &factor, &low, &high, &c.rope_original_ctx, &tied, &bias, &end) : 0;
    if (got != 16 || text[end] || (tied != 0 && tied != 1) || (bias != 0 && bias != 1))
        return sn_fail(e, SN_ERR_INVALID, "a LLaMA-family configuration \"%.200s\" is not the text "
                       "sinter writes (\"vocab=V ctx=N layers=L ...\"): the file is damaged",
                       text ? text : "(none)");
    c.rms_norm_eps = (float)eps;
    c.rope_theta = (float)theta;
    c.rope_factor = (float)factor;
    c.rope_low_freq_factor = (float)low;
    c.rope_high_freq_factor = (float)high;
    c.tie_word_embeddings = tied;
    c.qkv_bias = bias;
    sn_status s = sn_llama_config_check(&c, e);
    if (!s) *out = c;
    return s;
}

void sn_llama_inv_freq(const sn_llama_config *c, double *inv_freq) {
    int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* transformers computes these in f32: keep its rounding */
        float f = (float)(1.0 / pow((double)c->rope_theta, (double)(2 * i) / (double)c->head_dim));
        double x = f;
        if (c->rope_factor != 0) { /* llama3: long wavelengths slowed by factor, a ramp between */
            double pi = 3.14159265358979323846, wavelen = 2 * pi / x;
            double low = c->rope_original_ctx / (double)c->rope_low_freq_factor;
            double high = c->rope_original_ctx / (double)c->rope_high_freq_factor;
            if (wavelen > low) x = x / c->rope_factor;
            else if (wavelen >= high) {
                double smooth = (c->rope_original_ctx / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                x = (1 - smooth) * x / c->rope_factor + smooth * x;
            }
        }
        inv_freq[i] = x;
    }
}

enum { KV_PREFILL = 1, KV_DECODE };

typedef struct {
    sn_graph *g;
    const sn_llama_config *c;
    int B, T;
    int kv;               /* 0: training; KV_PREFILL, KV_DECODE: generation (llama.h) */
    sn_node *pos;         /* KV_DECODE: (B, T) i32 positions */
    sn_node *mask;        /* KV_DECODE: (B, 1, 1, ctx), added to the scores over the cache */
    sn_node *cos2, *sin2; /* [cos a, cos a] and [-sin a, sin a] of each position: (T, D), or
                             (B, 1, T, D) gathered at pos when decoding */
    const sn_llama_lora *lora; /* adapters beside the targeted projections; NULL: none */
} builder;

static sn_node *param(builder *m, const char *name, sn_shape s, sn_init init, float std) {
    return sn_param(m->g, name, SN_F32, s, init, std);
}

/* A projection's parameters: prefix.weight w (out, in), LoRA's prefix.lora_a (in, r) and
 * prefix.lora_b (r, out) when the adapters target it (SN_GPT2_LORA_ATTN: q, k, v, o;
 * SN_GPT2_LORA_MLP: gate, up, down; frontend/lora.h), prefix.bias (out) when it has one, IA3's
 * prefix.ia3_l (out) when ia3 (frontend/ia3.h: k_proj, v_proj); made in that order. */
typedef struct {
    sn_node *w, *a, *b, *bias, *l; /* a, b, bias, l: NULL when none */
} proj;

static proj proj_params(builder *m, const char *prefix, int64_t in, int64_t out, bool bias,
                        unsigned target, bool ia3) {
    char n[112];
    proj pr = {0};
    snprintf(n, sizeof n, "%s.weight", prefix);
    pr.w = param(m, n, SN_SHAPE(out, in), SN_INIT_NORMAL, 0.02f);
    if (m->lora && (m->lora->targets & target))
        sn_lora_params(m->g, prefix, in, out, &m->lora->lora, &pr.a, &pr.b);
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", prefix);
        pr.bias = param(m, n, SN_SHAPE(out), SN_INIT_ZEROS, 0);
    }
    if (ia3 && m->lora && m->lora->ia3) pr.l = sn_ia3_vector(m->g, prefix, out);
    return pr;
}

/* The n projections pr[i] of the same x (B, T, in): y[i] = (x @ w^T (+ LoRA's path) (+ bias)) (* l). The
 * adapted ones share one product x @ [A ...] (sn_lora_paths). */
static void projections(builder *m, sn_node *x, int n, const proj *pr, sn_node **y) {
    sn_node *a[SN_LORA_MAX_PATHS], *b[SN_LORA_MAX_PATHS], *path[SN_LORA_MAX_PATHS];
    int adapted = 0;
    for (int i = 0; i < n; i++)
        if (pr[i].a && pr[i].b) a[adapted] = pr[i].a, b[adapted++] = pr[i].b;
    if (adapted) sn_lora_paths(m->g, x, adapted, a, b, &m->lora->lora, path);
    for (int i = 0, k = 0; i < n; i++) {
        y[i] = sn_matmul_t(m->g, x, pr[i].w, false, true);
        if (pr[i].a && pr[i].b) y[i] = sn_add(m->g, y[i], path[k++]);
        if (pr[i].bias) y[i] = sn_add(m->g, y[i], pr[i].bias);
        if (pr[i].l) y[i] = sn_ia3_scale(m->g, y[i], pr[i].l);
    }
}

/* One projection of x (B, T, in) to (B, T, out), named prefix (proj_params). */
static sn_node *linear(builder *m, sn_node *x, const char *prefix, int64_t in, int64_t out, bool bias,
                       unsigned target) {
    proj pr = proj_params(m, prefix, in, out, bias, target, false);
    sn_node *y;
    projections(m, x, 1, &pr, &y);
    return y;
}

static sn_node *rmsnorm(builder *m, sn_node *x, const char *name) {
    sn_node *w = param(m, name, SN_SHAPE(m->c->hidden), SN_INIT_ONES, 0);
    return sn_rmsnorm(m->g, x, w, m->c->rms_norm_eps);
}

/* The rotary tables for positions 0..T-1, as sn_const nodes (made once, read by every layer). */
static sn_status rope_tables(builder *m, sn_err *e) {
    int64_t T = m->kv == KV_DECODE ? m->c->ctx : m->T, D = m->c->head_dim, half = D / 2;
    double *inv = malloc(sizeof(double) * (size_t)half);
    float *c = malloc(sizeof(float) * (size_t)(T * D)), *s = malloc(sizeof(float) * (size_t)(T * D));
    if (!inv || !c || !s) {
        free(inv);
        free(c);
        free(s);
        return sn_fail(e, SN_ERR_OOM, "llama: out of memory for the rotary tables (%lld x %lld)",
                       (long long)T, (long long)D);
    }
    sn_llama_inv_freq(m->c, inv);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            float a = (float)t * (float)inv[i]; /* transformers' f32 angle */
            c[t * D + i] = c[t * D + half + i] = cosf(a);
            s[t * D + i] = -sinf(a);
            s[t * D + half + i] = sinf(a);
        }
    m->cos2 = sn_const(m->g, SN_F32, SN_SHAPE(T, D), c);
    m->sin2 = sn_const(m->g, SN_F32, SN_SHAPE(T, D), s);
    if (m->kv == KV_DECODE) { /* the rows of each token's position, over every head */
        sn_shape rows = SN_SHAPE(m->B, 1, m->T, D);
        m->cos2 = sn_reshape(m->g, sn_embedding(m->g, m->cos2, m->pos), rows);
        m->sin2 = sn_reshape(m->g, sn_embedding(m->g, m->sin2, m->pos), rows);
    }
    free(inv);
    free(c);
    free(s);
    return SN_OK;
}

/* x (B, h, T, D) rotated: x cos2 + [x[D/2:], x[:D/2]] sin2 (rotate_half), written with views of
 * x only so the rotation is one pointwise kernel reading x where it lies */
static sn_node *rope(builder *m, sn_node *x) {
    sn_graph *g = m->g;
    int64_t D = m->c->head_dim, half = D / 2;
    sn_node *halves[2] = {sn_slice(g, x, -1, half, D), sn_slice(g, x, -1, 0, half)};
    return sn_add(g, sn_mul(g, x, m->cos2), sn_mul(g, sn_concat(g, 2, halves, -1), m->sin2));
}

/* (B, T, h * D) -> (B, h, T, D); with one token (decode) a reshape, which moves nothing */
static sn_node *heads(builder *m, sn_node *x, int h) {
    if (m->kv == KV_DECODE && m->T == 1) return sn_reshape(m->g, x, SN_SHAPE(m->B, h, 1, m->c->head_dim));
    sn_node *y = sn_reshape(m->g, x, SN_SHAPE(m->B, m->T, h, m->c->head_dim));
    return sn_permute(m->g, y, (const int[]){0, 2, 1, 3});
}

/* kv (B, Hkv, T, D) -> (B, Hkv * groups, T, D), query head h reading kv head h / groups */
static sn_node *repeat_kv(sn_graph *g, sn_node *kv, int groups) {
    if (!kv || groups == 1) return kv;
    int64_t B = sn_node_dim(kv, 0), Hkv = sn_node_dim(kv, 1), T = sn_node_dim(kv, 2), D = sn_node_dim(kv, 3);
    sn_node *r = sn_reshape(g, kv, SN_SHAPE(B, Hkv, 1, T * D));
    r = sn_broadcast(g, r, SN_SHAPE(B, Hkv, groups, T * D));
    return sn_reshape(g, r, SN_SHAPE(B, Hkv * groups, T, D));
}

/* Decode: T new queries q (B, H, T, D) over layer l's cached keys and values (INPUTs
 * k_cache.l, v_cache.l, (B, Hkv, ctx, D), rotated keys; positions masked by m->mask) and over
 * their own k and v (B, Hkv, T, D), causally: one softmax over both (sn_attention_cache: one
 * kernel, grouped-query, so no key or value is repeated). */
static sn_node *attend_cache(builder *m, sn_node *q, sn_node *k, sn_node *v, int l) {
    sn_graph *g = m->g;
    const sn_llama_config *c = m->c;
    int64_t D = c->head_dim, S = c->ctx, Hkv = c->n_kv_head;
    char name[64];
    snprintf(name, sizeof name, "k_cache.%d", l);
    sn_node *kc = sn_input(g, name, SN_F32, SN_SHAPE(m->B, Hkv, S, D));
    snprintf(name, sizeof name, "v_cache.%d", l);
    sn_node *vc = sn_input(g, name, SN_F32, SN_SHAPE(m->B, Hkv, S, D));
    return sn_attention_cache(g, q, kc, vc, m->mask, k, v, 1.0f / sqrtf((float)D));
}

static sn_node *attention(builder *m, sn_node *x, int l) {
    sn_graph *g = m->g;
    const sn_llama_config *c = m->c;
    int64_t C = c->hidden, D = c->head_dim, H = c->n_head, Hkv = c->n_kv_head;
    char p[96];
    static const char *const names[3] = {"q_proj", "k_proj", "v_proj"};
    proj pr[3];
    sn_node *qkv[3];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "model.layers.%d.self_attn.%s", l, names[i]);
        pr[i] = proj_params(m, p, C, (i ? Hkv : H) * D, c->qkv_bias, SN_GPT2_LORA_ATTN, i > 0);
    }
    projections(m, x, 3, pr, qkv); /* (B, T, H D), (B, T, Hkv D) twice */
    sn_node *q = rope(m, heads(m, qkv[0], (int)H));
    sn_node *k = rope(m, heads(m, qkv[1], (int)Hkv));
    sn_node *v = heads(m, qkv[2], (int)Hkv);
    if (m->kv) { /* this layer's rotated keys and values go to the cache, unrepeated */
        sn_graph_add_output(g, k);
        sn_graph_add_output(g, v);
    }
    sn_node *y;
    if (m->kv == KV_DECODE) {
        y = attend_cache(m, q, k, v, l); /* k and v unrepeated */
    } else {
        int groups = (int)(H / Hkv);
        k = repeat_kv(g, k, groups);
        v = repeat_kv(g, v, groups);
        sn_node *s = sn_scale(g, sn_matmul_t(g, q, k, false, true), 1.0f / sqrtf((float)D)); /* (B,H,T,T) */
        y = sn_matmul(g, sn_softmax(g, sn_causal_mask(g, s)), v);                          /* (B,H,T,D) */
    }
    if (m->kv != KV_DECODE || m->T != 1) y = sn_permute(g, y, (const int[]){0, 2, 1, 3});
    y = sn_reshape(g, y, SN_SHAPE(m->B, m->T, H * D));
    snprintf(p, sizeof p, "model.layers.%d.self_attn.o_proj", l);
    return linear(m, y, p, H * D, C, false, SN_GPT2_LORA_ATTN);
}

/* SwiGLU: down(silu(gate(x)) * up(x)) */
static sn_node *mlp(builder *m, sn_node *x, int l) {
    sn_graph *g = m->g;
    int64_t C = m->c->hidden, F = m->c->intermediate;
    char p[96];
    proj pr[2];
    sn_node *gu[2];
    snprintf(p, sizeof p, "model.layers.%d.mlp.gate_proj", l);
    pr[0] = proj_params(m, p, C, F, false, SN_GPT2_LORA_MLP, false);
    snprintf(p, sizeof p, "model.layers.%d.mlp.up_proj", l);
    pr[1] = proj_params(m, p, C, F, false, SN_GPT2_LORA_MLP, false);
    projections(m, x, 2, pr, gu); /* (B, T, F) each */
    sn_node *gate = sn_silu(g, gu[0]), *up = gu[1];
    sn_node *h = sn_mul(g, gate, up); /* (B, T, F) */
    snprintf(p, sizeof p, "model.layers.%d.mlp.down_proj", l);
    if (m->lora && m->lora->ia3) h = sn_ia3_scale(g, h, sn_ia3_vector(g, p, F)); /* l_ff: down's input */
    return linear(m, h, p, F, C, false, SN_GPT2_LORA_MLP);
}

static sn_status check(const sn_llama_config *c, int B, int T, const sn_llama_lora *lora, sn_err *e) {
    sn_status s = sn_llama_config_check(c, e);
    if (s) return s;
    if (lora && lora->ia3 && (lora->lora.rank || lora->targets))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: IA3 vectors together with LoRA adapters (rank %d) "
                       "are not supported: choose one", c->name ? c->name : "llama", lora->lora.rank);
    if (B < 1 || T < 1 || T > c->ctx)
        return sn_fail(e, SN_ERR_INVALID, "%s: batch %d x sequence %d: need B >= 1 and 1 <= T <= "
                       "ctx = %d", c->name ? c->name : "llama", B, T, c->ctx);
    return SN_OK;
}

/* The embedding, the blocks, the norm and the head over tokens idx (B, T): the logits (B, T, V). */
static sn_node *body(builder *m, sn_node *idx) {
    sn_graph *g = m->g;
    const sn_llama_config *c = m->c;
    int64_t V = c->vocab, C = c->hidden;
    sn_node *emb = param(m, "model.embed_tokens.weight", SN_SHAPE(V, C), SN_INIT_NORMAL, 0.02f);
    sn_node *x = sn_embedding(g, emb, idx); /* (B, T, C) */
    for (int l = 0; l < c->n_layer; l++) {
        char p[96];
        snprintf(p, sizeof p, "model.layers.%d.input_layernorm.weight", l);
        x = sn_add(g, x, attention(m, rmsnorm(m, x, p), l));
        snprintf(p, sizeof p, "model.layers.%d.post_attention_layernorm.weight", l);
        x = sn_add(g, x, mlp(m, rmsnorm(m, x, p), l));
    }
    x = rmsnorm(m, x, "model.norm.weight");
    sn_node *head = c->tie_word_embeddings ? emb
                    : param(m, "lm_head.weight", SN_SHAPE(V, C), SN_INIT_NORMAL, 0.02f);
    return sn_matmul_t(g, x, head, false, true); /* (B, T, V) */
}

sn_status sn_llama_build(sn_graph *g, const sn_llama_config *c, int B, int T, sn_llama *out, sn_err *e) {
    return sn_llama_build_lora(g, c, B, T, NULL, out, e);
}

sn_status sn_llama_build_lora(sn_graph *g, const sn_llama_config *c, int B, int T,
                              const sn_llama_lora *lora, sn_llama *out, sn_err *e) {
    sn_status s = check(c, B, T, lora, e);
    if (s) return s;
    builder m = {.g = g, .c = c, .B = B, .T = T, .lora = lora};
    if ((s = rope_tables(&m, e))) return s;
    out->idx = sn_input_tokens(g, "idx", SN_SHAPE(B, T));
    out->targets = sn_input_targets(g, "targets", SN_SHAPE(B, T));
    out->logits = body(&m, out->idx);
    out->loss = sn_cross_entropy(g, out->logits, out->targets, -1);
    sn_graph_set_logits(g, out->logits);
    sn_graph_set_loss(g, out->loss);
    if (lora && !sn_graph_error(g)) lora->ia3 ? sn_ia3_freeze_base(g) : sn_lora_freeze_base(g);
    if (sn_graph_error(g))
        return sn_fail(e, sn_graph_status(g), "%s: %s", c->name ? c->name : "llama", sn_graph_error(g));
    return SN_OK;
}

sn_status sn_llama_build_kv(sn_graph *g, const sn_llama_config *c, int B, int T, bool decode, sn_err *e) {
    return sn_llama_build_kv_lora(g, c, B, T, decode, NULL, e);
}

sn_status sn_llama_build_kv_lora(sn_graph *g, const sn_llama_config *c, int B, int T, bool decode,
                                 const sn_llama_lora *lora, sn_err *e) {
    sn_status s = check(c, B, T, lora, e);
    if (s) return s;
    builder m = {.g = g, .c = c, .B = B, .T = T, .kv = decode ? KV_DECODE : KV_PREFILL, .lora = lora};
    sn_node *idx = sn_input_tokens(g, "idx", SN_SHAPE(B, T));
    if (decode) {
        m.pos = sn_input_role(g, "pos", SN_ROLE_POSITIONS, SN_I32, SN_SHAPE(B, T));
        m.mask = sn_input_role(g, "mask", SN_ROLE_MASK, SN_F32, SN_SHAPE(B, 1, 1, c->ctx));
    }
    if ((s = rope_tables(&m, e))) return s;
    sn_graph_set_logits(g, body(&m, idx)); /* an output after each layer's k and v */
    /* the base frozen as in training (the nf4 and base16 passes store what is frozen) */
    if (lora && !sn_graph_error(g)) lora->ia3 ? sn_ia3_freeze_base(g) : sn_lora_freeze_base(g);
    if (sn_graph_error(g))
        return sn_fail(e, sn_graph_status(g), "%s: %s", c->name ? c->name : "llama", sn_graph_error(g));
    return SN_OK;
}
