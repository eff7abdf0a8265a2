/* interp_rows.c: the reference interpreter's row ops (softmax, the norms and their backwards,
 * the causal mask), cross-entropy and the embedding gather, called by interp.c's eval(). Same
 * value convention as interp.c: contiguous doubles, a row the last axis. */
#include <math.h>
#include <string.h>

#include "interp_int.h"

/* ---- row ops: a row is the last axis, C elements ---- */

static double row_max(const double *x, int64_t C) {
    double m = -INFINITY;
    for (int64_t j = 0; j < C; j++)
        if (x[j] > m) m = x[j];
    return m;
}

/* y (C) = softmax(x (C)), max-subtracted */
static void softmax_row(const double *x, double *y, int64_t C) {
    double m = row_max(x, C), s = 0;
    for (int64_t j = 0; j < C; j++) s += y[j] = exp(x[j] - m);
    for (int64_t j = 0; j < C; j++) y[j] /= s;
}

static double logsumexp_row(const double *x, int64_t C) {
    double m = row_max(x, C), s = 0;
    for (int64_t j = 0; j < C; j++) s += exp(x[j] - m);
    return m + log(s);
}

/* mean and 1/sqrt(biased variance + eps) of x (C) */
static void ln_stats(const double *x, int64_t C, double eps, double *mean, double *rstd) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; j++) m += x[j];
    m /= (double)C;
    for (int64_t j = 0; j < C; j++) v += (x[j] - m) * (x[j] - m);
    *mean = m;
    *rstd = 1 / sqrt(v / (double)C + eps);
}

/* 1/sqrt(mean(x^2) + eps) of x (C) */
static double rms_rstd(const double *x, int64_t C, double eps) {
    double s = 0;
    for (int64_t j = 0; j < C; j++) s += x[j] * x[j];
    return 1 / sqrt(s / (double)C + eps);
}

/* The row ops with one output row per input row. in: (x (R, C), then w (C) / b (C) / dy (R, C)
 * as the op takes them); the _BWD_W ops accumulate into y (C). */
void sn_interp_rows(const sn_node *n, double *const *in, double *y) {
    const sn_node *xn = n->in[0];
    int64_t C = sn_interp_last_dim(xn), R = sn_numel(xn) / C;
    double eps = n->a.f;
    if (n->op == SN_OP_LAYERNORM_BWD_W || n->op == SN_OP_RMSNORM_BWD_W)
        memset(y, 0, sizeof(double) * (size_t)C);
    for (int64_t r = 0; r < R; r++) {
        const double *x = in[0] + r * C;
        double *yr = y + r * C, mean, rstd;
        switch (n->op) {
        case SN_OP_SOFTMAX: softmax_row(x, yr, C); break;
        case SN_OP_SOFTMAX_BWD: { /* (y, dy) */
            const double *dy = in[1] + r * C;
            double s = 0;
            for (int64_t j = 0; j < C; j++) s += dy[j] * x[j];
            for (int64_t j = 0; j < C; j++) yr[j] = x[j] * (dy[j] - s);
            break;
        }
        case SN_OP_LAYERNORM: { /* (x, w, b) */
            ln_stats(x, C, eps, &mean, &rstd);
            for (int64_t j = 0; j < C; j++) yr[j] = (x[j] - mean) * rstd * in[1][j] + in[2][j];
            break;
        }
        case SN_OP_LAYERNORM_BWD: { /* (x, w, dy): dx = rstd (g - mean g - xhat mean(g xhat)) */
            const double *w = in[1], *dy = in[2] + r * C;
            ln_stats(x, C, eps, &mean, &rstd);
            double mg = 0, mgx = 0;
            for (int64_t j = 0; j < C; j++) {
                mg += dy[j] * w[j];
                mgx += dy[j] * w[j] * (x[j] - mean) * rstd;
            }
            mg /= (double)C;
            mgx /= (double)C;
            for (int64_t j = 0; j < C; j++)
                yr[j] = rstd * (dy[j] * w[j] - mg - (x[j] - mean) * rstd * mgx);
            break;
        }
        case SN_OP_LAYERNORM_BWD_W: { /* (x, dy) -> y (C) += dy xhat */
            const double *dy = in[1] + r * C;
            ln_stats(x, C, eps, &mean, &rstd);
            for (int64_t j = 0; j < C; j++) y[j] += dy[j] * (x[j] - mean) * rstd;
            break;
        }
        case SN_OP_RMSNORM: { /* (x, w) */
            rstd = rms_rstd(x, C, eps);
            for (int64_t j = 0; j < C; j++) yr[j] = x[j] * rstd * in[1][j];
            break;
        }
        case SN_OP_RMSNORM_BWD: { /* (x, w, dy): dx = rstd (g - x rstd^2 mean(g x)) */
            const double *w = in[1], *dy = in[2] + r * C;
            rstd = rms_rstd(x, C, eps);
            double mgx = 0;
            for (int64_t j = 0; j < C; j++) mgx += dy[j] * w[j] * x[j];
            mgx /= (double)C;
            for (int64_t j = 0; j < C; j++)
                yr[j] = rstd * (dy[j] * w[j] - x[j] * rstd * rstd * mgx);
            break;
        }
        case SN_OP_RMSNORM_BWD_W: { /* (x, dy) -> y (C) += dy x rstd */
            const double *dy = in[1] + r * C;
            rstd = rms_rstd(x, C, eps);
            for (int64_t j = 0; j < C; j++) y[j] += dy[j] * x[j] * rstd;
            break;
        }
        case SN_OP_CAUSAL_MASK: { /* row r is query i of a (T, S) matrix */
            int64_t T = xn->shape[xn->rank - 2], i = r % T;
            for (int64_t j = 0; j < C; j++) yr[j] = j > i + (C - T) ? (double)n->a.f : x[j];
            break;
        }
        default: SN_ASSERT(0);
        }
    }
}

/* ---- ids and targets ---- */

/* Checks every id of `ids` (values v) is in [0, limit) or equals `ignore` (when has_ignore). */
static sn_status check_ids(const sn_node *n, const sn_node *ids, const double *v, int64_t limit,
                           bool has_ignore, int ignore, sn_err *e) {
    int64_t count = sn_numel(ids);
    for (int64_t p = 0; p < count; p++) {
        if ((has_ignore && v[p] == ignore) || (v[p] >= 0 && v[p] < (double)limit)) continue;
        char at[64], ty[96];
        sn_interp_index_str(p, ids->rank, ids->shape, at, sizeof at);
        sn_type_str(ids, ty, sizeof ty);
        if (n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_CROSS_ENTROPY_BWD)
            return sn_fail(e, SN_ERR_INVALID,
                           "%s %%%d: target %.0f at %s of targets %s is outside the vocabulary "
                           "[0, %lld) and is not the ignore index %d",
                           sn_op_name(n->op), n->id, v[p], at, ty, (long long)limit, ignore);
        return sn_fail(e, SN_ERR_INVALID,
                       "%s %%%d: id %.0f at %s of ids %s is outside [0, %lld), the table's rows",
                       sn_op_name(n->op), n->id, v[p], at, ty, (long long)limit);
    }
    return SN_OK;
}

/* logits (R, V), targets (R) -> scalar mean loss, or (R, V) gradient (with dloss); only the
 * first Vr = a.end classes take part when a.end > 0 (padded vocabulary) */
sn_status sn_interp_cross_entropy(const sn_node *n, double *const *in, double *y, sn_err *e) {
    const sn_node *lg = n->in[0];
    int64_t V = sn_interp_last_dim(lg), R = sn_numel(lg) / V, Vr = n->a.end > 0 ? n->a.end : V;
    const double *logits = in[0], *tg = in[1];
    int ign = n->a.ignore_index;
    sn_status st = check_ids(n, n->in[1], tg, Vr, true, ign, e);
    if (st) return st;
    int64_t count = 0;
    for (int64_t r = 0; r < R; r++) count += tg[r] != ign;
    if (n->op == SN_OP_CROSS_ENTROPY) {
        double loss = 0;
        for (int64_t r = 0; r < R; r++)
            if (tg[r] != ign)
                loss += logsumexp_row(logits + r * V, Vr) - logits[r * V + (int64_t)tg[r]];
        y[0] = count ? loss / (double)count : 0;
        return SN_OK;
    }
    double k = count ? in[2][0] / (double)count : 0;
    for (int64_t r = 0; r < R; r++) {
        double *yr = y + r * V;
        memset(yr, 0, sizeof(double) * (size_t)V);
        if (tg[r] == ign) continue;
        softmax_row(logits + r * V, yr, Vr);
        yr[(int64_t)tg[r]] -= 1;
        for (int64_t j = 0; j < Vr; j++) yr[j] *= k;
    }
    return SN_OK;
}

/* EMBEDDING: table (V, C), ids (..) -> (.., C); EMBEDDING_BWD: ids (..), dy (.., C) -> (V, C) */
sn_status sn_interp_embedding(const sn_node *n, double *const *in, double *y, sn_err *e) {
    bool fwd = n->op == SN_OP_EMBEDDING;
    const sn_node *ids = n->in[fwd ? 1 : 0];
    const double *id = in[fwd ? 1 : 0];
    int64_t V = fwd ? n->in[0]->shape[0] : n->shape[0], C = sn_interp_last_dim(n);
    int64_t count = sn_numel(ids);
    sn_status st = check_ids(n, ids, id, V, false, 0, e);
    if (st) return st;
    if (fwd) {
        for (int64_t p = 0; p < count; p++)
            memcpy(y + p * C, in[0] + (int64_t)id[p] * C, sizeof(double) * (size_t)C);
        return SN_OK;
    }
    memset(y, 0, sizeof(double) * (size_t)(V * C));
    for (int64_t p = 0; p < count; p++) {
        double *row = y + (int64_t)id[p] * C;
        const double *dy = in[1] + p * C;
        for (int64_t j = 0; j < C; j++) row[j] += dy[j];
    }
    return SN_OK;
}
