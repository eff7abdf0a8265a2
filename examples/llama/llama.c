/* llama.c: the LLaMA-style decoder (Touvron et al. 2023) as a sinter graph, using only <sinter.h>.
 * Convention: attention is written out (matmul, scale, causal mask, softmax, matmul) on rotated
 * q and k, with each key/value head repeated for its group of query heads; sinter's attention
 * pass recognises it and fuses it into flash-attention ops, so no (T, T) matrix is trained. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

llama_config llama_config_small(void) {
    return (llama_config){.ctx = 128, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .dim = 128,
                          .hidden = 376, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
}

void llama_describe(const llama_config *c, char *buf, size_t len) {
    snprintf(buf, len, "%d layers, %d/%d heads, dim %d, hidden %d, ctx %d", c->n_layer, c->n_head,
             c->n_kv_head, c->dim, c->hidden, c->ctx);
}

typedef struct {
    sn_graph *g;
    const llama_config *c;
    int B, T;
    sn_node *cos, *sin; /* (T, D/2) rotary tables */
} builder;

static sn_node *weight(builder *m, const char *name, int64_t in, int64_t out, float std) {
    return sn_param(m->g, name, SN_F32, SN_SHAPE(in, out), SN_INIT_NORMAL, std);
}

static sn_node *rmsnorm(builder *m, sn_node *x, const char *name) {
    sn_node *w = sn_param(m->g, name, SN_F32, SN_SHAPE(m->c->dim), SN_INIT_ONES, 0);
    return sn_rmsnorm(m->g, x, w, m->c->norm_eps);
}

/* cos and sin of t * theta^(-2i/D) for position t and pair i: (T, D/2) constants. */
static sn_status rotary_tables(builder *m, sn_err *e) {
    int T = m->T, half = m->c->dim / m->c->n_head / 2;
    float *c = malloc(sizeof(float) * (size_t)T * (size_t)half);
    float *s = malloc(sizeof(float) * (size_t)T * (size_t)half);
    if (!c || !s) {
        free(c);
        free(s);
        return sn_fail(e, SN_ERR_OOM, "llama: out of memory for the rotary tables (%d x %d)", T, half);
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double f = (double)t * pow((double)m->c->rope_theta, -(double)i / half);
            c[t * half + i] = (float)cos(f);
            s[t * half + i] = (float)sin(f);
        }
    m->cos = sn_const(m->g, SN_F32, SN_SHAPE(T, half), c);
    m->sin = sn_const(m->g, SN_F32, SN_SHAPE(T, half), s);
    free(c);
    free(s);
    return SN_OK;
}

/* Rotates x (B, h, T, D) by position: the pairs (x[i], x[i + D/2]) turn by angle t * theta_i
 * (the "rotate half" layout). */
static sn_node *rotate(builder *m, sn_node *x) {
    sn_graph *g = m->g;
    int64_t D = x->shape[3];
    sn_node *x1 = sn_slice(g, x, -1, 0, D / 2), *x2 = sn_slice(g, x, -1, D / 2, D);
    sn_node *parts[2] = {
        sn_sub(g, sn_mul(g, x1, m->cos), sn_mul(g, x2, m->sin)),
        sn_add(g, sn_mul(g, x1, m->sin), sn_mul(g, x2, m->cos)),
    };
    return sn_concat(g, 2, parts, -1);
}

/* x (B, T, C) @ w (C, h*D) -> (B, h, T, D) */
static sn_node *heads(builder *m, sn_node *x, const char *name, int h) {
    int64_t C = m->c->dim, D = C / m->c->n_head;
    sn_node *y = sn_matmul(m->g, x, weight(m, name, C, h * D, 0.02f));
    y = sn_reshape(m->g, y, SN_SHAPE(m->B, m->T, h, D));
    return sn_permute(m->g, y, (const int[]){0, 2, 1, 3});
}

/* kv (B, Hkv, T, D) -> (B, H, T, D): query head q reads key/value head q / (H / Hkv). */
static sn_node *repeat_kv(builder *m, sn_node *kv) {
    int64_t H = m->c->n_head, Hkv = m->c->n_kv_head, G = H / Hkv, D = m->c->dim / H;
    if (G == 1) return kv;
    sn_node *r = sn_reshape(m->g, kv, SN_SHAPE(m->B, Hkv, 1, m->T * D));
    r = sn_broadcast(m->g, r, SN_SHAPE(m->B, Hkv, G, m->T * D));
    return sn_reshape(m->g, r, SN_SHAPE(m->B, H, m->T, D));
}

static sn_node *attention(builder *m, sn_node *x, int l, float out_std) {
    sn_graph *g = m->g;
    const llama_config *c = m->c;
    int64_t D = c->dim / c->n_head;
    char n[80];
    snprintf(n, sizeof n, "layers.%d.attention.wq", l);
    sn_node *q = rotate(m, heads(m, x, n, c->n_head));
    snprintf(n, sizeof n, "layers.%d.attention.wk", l);
    sn_node *k = repeat_kv(m, rotate(m, heads(m, x, n, c->n_kv_head)));
    snprintf(n, sizeof n, "layers.%d.attention.wv", l);
    sn_node *v = repeat_kv(m, heads(m, x, n, c->n_kv_head));
    sn_node *s = sn_scale(g, sn_matmul_t(g, q, k, false, true), 1.0f / sqrtf((float)D)); /* (B,H,T,T) */
    sn_node *y = sn_matmul(g, sn_softmax(g, sn_causal_mask(g, s)), v);                 /* (B,H,T,D) */
    y = sn_reshape(g, sn_permute(g, y, (const int[]){0, 2, 1, 3}), SN_SHAPE(m->B, m->T, c->dim));
    snprintf(n, sizeof n, "layers.%d.attention.wo", l);
    return sn_matmul(g, y, weight(m, n, c->dim, c->dim, out_std));
}

/* SwiGLU: (silu(x w1) * (x w3)) w2 */
static sn_node *mlp(builder *m, sn_node *x, int l, float out_std) {
    sn_graph *g = m->g;
    int64_t C = m->c->dim, F = m->c->hidden;
    char n1[80], n2[80], n3[80];
    snprintf(n1, sizeof n1, "layers.%d.feed_forward.w1", l);
    snprintf(n2, sizeof n2, "layers.%d.feed_forward.w2", l);
    snprintf(n3, sizeof n3, "layers.%d.feed_forward.w3", l);
    sn_node *gate = sn_silu(g, sn_matmul(g, x, weight(m, n1, C, F, 0.02f)));
    sn_node *up = sn_matmul(g, x, weight(m, n3, C, F, 0.02f));
    return sn_matmul(g, sn_mul(g, gate, up), weight(m, n2, F, C, out_std));
}

sn_status llama_build(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    const llama_config *c = user;
    if (B < 1 || T < 1 || T > c->ctx)
        return sn_fail(e, SN_ERR_INVALID, "llama: batch %d x sequence %d: need B >= 1 and "
                       "1 <= T <= ctx = %d", B, T, c->ctx);
    if (c->n_head < 1 || c->n_kv_head < 1 || c->n_head % c->n_kv_head || c->dim % c->n_head ||
        (c->dim / c->n_head) % 2)
        return sn_fail(e, SN_ERR_INVALID, "llama: %d heads, %d key/value heads, dim %d: the "
                       "key/value heads must divide the heads, and dim / heads must be even",
                       c->n_head, c->n_kv_head, c->dim);
    builder m = {g, c, B, T, NULL, NULL};
    sn_status s = rotary_tables(&m, e);
    if (s) return s;
    float out_std = 0.02f / sqrtf(2.0f * (float)c->n_layer); /* residual projections */
    sn_node *idx = sn_input(g, "idx", SN_I32, SN_SHAPE(B, T));
    sn_node *targets = sn_input(g, "targets", SN_I32, SN_SHAPE(B, T));
    sn_node *emb = sn_param(g, "tok_embeddings", SN_F32, SN_SHAPE(V, c->dim), SN_INIT_NORMAL, 0.02f);
    sn_node *x = sn_embedding(g, emb, idx); /* (B, T, C) */
    for (int l = 0; l < c->n_layer; l++) {
        char n[80];
        snprintf(n, sizeof n, "layers.%d.attention_norm", l);
        x = sn_add(g, x, attention(&m, rmsnorm(&m, x, n), l, out_std));
        snprintf(n, sizeof n, "layers.%d.ffn_norm", l);
        x = sn_add(g, x, mlp(&m, rmsnorm(&m, x, n), l, out_std));
    }
    x = rmsnorm(&m, x, "norm");
    sn_node *logits = sn_matmul(g, x, weight(&m, "output", c->dim, V, 0.02f)); /* untied */
    sn_graph_add_output(g, logits);
    g->loss = sn_cross_entropy(g, logits, targets, -1);
    sn_graph_add_output(g, g->loss);
    if (sn_graph_error(g)) return sn_fail(e, g->err.code, "llama: %s", sn_graph_error(g));
    return SN_OK;
}
