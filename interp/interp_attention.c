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

sn_status sn_interp_attention(const sn_node *n, double *const *in, double *y, sn_err *e) {
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
