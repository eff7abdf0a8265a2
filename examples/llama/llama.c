/* llama.c: the LLaMA-style decoder (Touvron et al. 2023) as a sinter graph, using only <sinter.h>.
 * Convention: attention is written out (matmul, scale, causal mask, softmax, matmul) on rotated
 * q and k, with each key/value head repeated for its group of query heads; sinter's attention
 * pass recognises it and fuses it into flash-attention ops that read the key/value heads
 * unrepeated (grouped-query), so no (T, T) matrix is trained and no k/v copy is made. */
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
} builder;

static sn_node *weight(builder *m, const char *name, int64_t in, int64_t out, float std) {
    return sn_param(m->g, name, SN_F32, SN_SHAPE(in, out), SN_INIT_NORMAL, std);
}

static sn_node *rmsnorm(builder *m, sn_node *x, const char *name) {
    sn_node *w = sn_param(m->g, name, SN_F32, SN_SHAPE(m->c->dim), SN_INIT_ONES, 0);
    return sn_rmsnorm(m->g, x, w, m->c->norm_eps);
}

/* cos2 = [cos a, cos a] and sin2 = [-sin a, sin a], (T, D) constants, for position t and pair
 * i < D/2 at angle a = t * theta^(-2i/D). */
sn_node *llama_rope(sn_graph *g, sn_node *x, float theta) {
    if (!x || sn_graph_error(g)) return NULL;
    int64_t T = sn_node_dim(x, -2), D = sn_node_dim(x, -1), half = D / 2;
    float *c = malloc(sizeof(float) * (size_t)(T * D)), *s = malloc(sizeof(float) * (size_t)(T * D));
    if (!c || !s) {
        free(c);
        free(s);
        sn_graph_fail(g, SN_ERR_OOM, "llama: out of memory for the rotary tables (%lld x %lld)",
                (long long)T, (long long)D);
        return NULL;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double a = (double)t * pow((double)theta, -(double)i / (double)half);
            c[t * D + i] = c[t * D + half + i] = (float)cos(a);
            s[t * D + i] = (float)-sin(a);
            s[t * D + half + i] = (float)sin(a);
        }
    sn_node *cos2 = sn_const(g, SN_F32, SN_SHAPE(T, D), c), *sin2 = sn_const(g, SN_F32, SN_SHAPE(T, D), s);
    free(c);
    free(s);
    /* x cos2 + [x[D/2:], x[:D/2]] sin2, written with views of x only, so that the whole
     * rotation is one pointwise kernel reading x where it lies */
    sn_node *halves[2] = {sn_slice(g, x, -1, half, D), sn_slice(g, x, -1, 0, half)};
    return sn_add(g, sn_mul(g, x, cos2), sn_mul(g, sn_concat(g, 2, halves, -1), sin2));
}

/* x (B, T, C) @ w (C, h*D) -> (B, h, T, D) */
static sn_node *heads(builder *m, sn_node *x, const char *name, int h) {
    int64_t C = m->c->dim, D = C / m->c->n_head;
    sn_node *y = sn_matmul(m->g, x, weight(m, name, C, h * D, 0.02f));
    y = sn_reshape(m->g, y, SN_SHAPE(m->B, m->T, h, D));
    return sn_permute(m->g, y, (const int[]){0, 2, 1, 3});
}

sn_node *llama_repeat_kv(sn_graph *g, sn_node *kv, int groups) {
    if (!kv || groups == 1) return kv;
    int64_t B = sn_node_dim(kv, 0), Hkv = sn_node_dim(kv, 1), T = sn_node_dim(kv, 2), D = sn_node_dim(kv, 3);
    sn_node *r = sn_reshape(g, kv, SN_SHAPE(B, Hkv, 1, T * D));
    r = sn_broadcast(g, r, SN_SHAPE(B, Hkv, groups, T * D));
    return sn_reshape(g, r, SN_SHAPE(B, Hkv * groups, T, D));
}

static sn_node *attention(builder *m, sn_node *x, int l, float out_std) {
    sn_graph *g = m->g;
    const llama_config *c = m->c;
    int64_t D = c->dim / c->n_head;
    char n[80];
    snprintf(n, sizeof n, "layers.%d.attention.wq", l);
    int groups = c->n_head / c->n_kv_head;
    sn_node *q = llama_rope(g, heads(m, x, n, c->n_head), c->rope_theta);
    snprintf(n, sizeof n, "layers.%d.attention.wk", l);
    sn_node *k = llama_repeat_kv(g, llama_rope(g, heads(m, x, n, c->n_kv_head), c->rope_theta), groups);
    snprintf(n, sizeof n, "layers.%d.attention.wv", l);
    sn_node *v = llama_repeat_kv(g, heads(m, x, n, c->n_kv_head), groups);
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
    builder m = {g, c, B, T};
    float out_std = 0.02f / sqrtf(2.0f * (float)c->n_layer); /* residual projections */
    sn_node *idx = sn_input_tokens(g, "idx", SN_SHAPE(B, T));
    sn_node *targets = sn_input_targets(g, "targets", SN_SHAPE(B, T));
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
    sn_graph_set_logits(g, logits); /* what sampling reads */
    sn_graph_set_loss(g, sn_cross_entropy(g, logits, targets, -1));
    if (sn_graph_error(g)) return sn_fail(e, sn_graph_status(g), "llama: %s", sn_graph_error(g));
    return SN_OK;
}
