/* interp_attention.c: the reference kernels of the fused causal attention ops, one query row
 * at a time. Convention: no (T, S) matrix is ever formed; a row's scores live in one buffer of S
 * and are recomputed from q, k and the saved log-sum-exp wherever the backward needs them. */
#include "interp_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An attention node's sizes: q (batch, T, D), k (batch / G, S, D), v (batch / G, S, Dv):
 * q's slice b reads k's and v's slice b / G (grouped-query attention, G = 1 without). */
typedef struct {
    int64_t batch, G, T, S, D, Dv;
    double scale;
} dims;

static dims dims_of(const sn_node *n) {
    const sn_node *q = n->in[0], *k = n->in[1];
    int r = q->rank;
    dims d = {.batch = sn_shape_numel(r - 2, q->shape), .T = q->shape[r - 2],
              .S = k->shape[r - 2], .D = q->shape[r - 1], .scale = (double)n->a.f,
              .G = sn_attention_group(n)};
    d.Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : 0;
    return d;
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* s[j] = scale q_i . k_j for the keys query i sees, j < i + S - T + 1; returns their count.
 * q: the query row (D); k: the batch's keys (S, D). */
static int64_t scores(const dims *d, const double *qi, const double *k, int64_t i, double *s) {
    int64_t n = i + d->S - d->T + 1;
    for (int64_t j = 0; j < n; j++) s[j] = d->scale * dot(qi, k + j * d->D, d->D);
    return n;
}

static double logsumexp(const double *s, int64_t n) {
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > m) m = s[j];
    for (int64_t j = 0; j < n; j++) sum += exp(s[j] - m);
    return m + log(sum);
}

/* in: q, k, v, o, dout, lse. Accumulates the one gradient the op asks for into y (zeroed);
 * dk and dv of kv slice b / G sum q's slices b in ascending order (a fixed order):
 * P_ij = exp(s_ij - lse_i), D_i = dout_i . o_i, dS_ij = P_ij (dout_i . v_j - D_i),
 * dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dout_i. */
static void backward(const sn_node *n, const dims *d, double *const *in, double *s, double *y) {
    memset(y, 0, sizeof(double) * (size_t)sn_numel(n));
    for (int64_t b = 0; b < d->batch; b++) {
        int64_t bkv = b / d->G; /* the kv slice */
        const double *q = in[0] + b * d->T * d->D, *k = in[1] + bkv * d->S * d->D;
        const double *v = in[2] + bkv * d->S * d->Dv, *o = in[3] + b * d->T * d->Dv;
        const double *dout = in[4] + b * d->T * d->Dv, *lse = in[5] + b * d->T;
        double *yb = y + (n->op == SN_OP_ATTENTION_BWD_Q ? b : bkv) * (n->op == SN_OP_ATTENTION_BWD_Q ? d->T : d->S) *
                             (n->op == SN_OP_ATTENTION_BWD_V ? d->Dv : d->D);
        for (int64_t i = 0; i < d->T; i++) {
            const double *qi = q + i * d->D, *doi = dout + i * d->Dv;
            int64_t cnt = scores(d, qi, k, i, s);
            double Di = dot(doi, o + i * d->Dv, d->Dv);
            for (int64_t j = 0; j < cnt; j++) {
                double p = exp(s[j] - lse[i]);
                if (n->op == SN_OP_ATTENTION_BWD_V) {
                    for (int64_t c = 0; c < d->Dv; c++) yb[j * d->Dv + c] += p * doi[c];
                    continue;
                }
                double ds = d->scale * p * (dot(doi, v + j * d->Dv, d->Dv) - Di);
                if (n->op == SN_OP_ATTENTION_BWD_Q)
                    for (int64_t c = 0; c < d->D; c++) yb[i * d->D + c] += ds * k[j * d->D + c];
                else
                    for (int64_t c = 0; c < d->D; c++) yb[j * d->D + c] += ds * qi[c];
            }
        }
    }
}

/* attention_cache (ops.h): in q, kc, vc, mask, k, v; y (B, H, T, Dv). Query t of slice b h
 * scores the S cached keys (plus the row's mask) and the new keys 0..t, in that order. */
static sn_status cache_attention(const sn_node *n, double *const *in, double *y, sn_err *e) {
    const sn_node *q = n->in[0], *kc = n->in[1];
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = kc->shape[1], S = kc->shape[2], Dv = n->in[2]->shape[3], G = H / Hkv;
    double *s = sn_malloc(sizeof(double) * (size_t)(S + T), "the interpreter's attention scores", e);
    if (!s) return SN_ERR_OOM;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t kv = b * Hkv + h / G;
            const double *kcb = in[1] + kv * S * D, *vcb = in[2] + kv * S * Dv;
            const double *kb = in[4] + kv * T * D, *vb = in[5] + kv * T * Dv, *mask = in[3] + b * S;
            for (int64_t t = 0; t < T; t++) {
                const double *qt = in[0] + ((b * H + h) * T + t) * D;
                double *o = y + ((b * H + h) * T + t) * Dv, m = -INFINITY, sum = 0;
                int64_t n_s = S + t + 1;
                for (int64_t j = 0; j < S; j++) s[j] = (double)n->a.f * dot(qt, kcb + j * D, D) + mask[j];
                for (int64_t u = 0; u <= t; u++) s[S + u] = (double)n->a.f * dot(qt, kb + u * D, D);
                for (int64_t j = 0; j < n_s; j++) m = s[j] > m ? s[j] : m;
                for (int64_t j = 0; j < n_s; j++) sum += (s[j] = exp(s[j] - m));
                memset(o, 0, sizeof(double) * (size_t)Dv);
                for (int64_t j = 0; j < n_s; j++) {
                    const double *vj = j < S ? vcb + j * Dv : vb + (j - S) * Dv;
                    for (int64_t c = 0; c < Dv; c++) o[c] += s[j] / sum * vj[c];
                }
            }
        }
    free(s);
    return SN_OK;
}

sn_status sn_interp_attention(const sn_node *n, double *const *in, double *y, sn_err *e) {
    if (n->op == SN_OP_ATTENTION_CACHE) return cache_attention(n, in, y, e);
    dims d = dims_of(n);
    double *s = sn_malloc(sizeof(double) * (size_t)d.S, "the interpreter's attention scores", e); /* one row */
    if (!s) return SN_ERR_OOM;
    switch (n->op) {
    case SN_OP_ATTENTION_LSE: /* (q, k) -> lse (batch, T) */
        for (int64_t b = 0; b < d.batch; b++)
            for (int64_t i = 0; i < d.T; i++) {
                const double *qi = in[0] + (b * d.T + i) * d.D, *k = in[1] + b / d.G * d.S * d.D;
                y[b * d.T + i] = logsumexp(s, scores(&d, qi, k, i, s));
            }
        break;
    case SN_OP_ATTENTION: /* (q, k, v, lse) -> o (batch, T, Dv) */
        for (int64_t b = 0; b < d.batch; b++)
            for (int64_t i = 0; i < d.T; i++) {
                const double *qi = in[0] + (b * d.T + i) * d.D, *k = in[1] + b / d.G * d.S * d.D;
                const double *v = in[2] + b / d.G * d.S * d.Dv, lse = in[3][b * d.T + i];
                double *oi = y + (b * d.T + i) * d.Dv;
                int64_t cnt = scores(&d, qi, k, i, s);
                memset(oi, 0, sizeof(double) * (size_t)d.Dv);
                for (int64_t j = 0; j < cnt; j++) {
                    double p = exp(s[j] - lse);
                    for (int64_t c = 0; c < d.Dv; c++) oi[c] += p * v[j * d.Dv + c];
                }
            }
        break;
    case SN_OP_ATTENTION_BWD_Q: case SN_OP_ATTENTION_BWD_K: case SN_OP_ATTENTION_BWD_V:
        backward(n, &d, in, s, y);
        break;
    default: SN_ASSERT(0);
    }
    free(s);
    return SN_OK;
}
