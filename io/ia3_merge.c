/* ia3_merge.c: a checkpoint's IA3 vectors (frontend/ia3.h) merged into the weights they scale,
 * for `sinter export`. Convention: a vector "P.ia3_l" (n) beside a key or value projection
 * scales the last n output channels of P (y * l = x (W diag l) + b * l: W's output columns
 * and the bias), beside an MLP's down projection P's input channels ((h * l) W = h (diag l W):
 * W's input rows); GPT-2's weights are (in, out) ("P.w", "P.b"), LLaMA's (out, in)
 * ("P.weight", "P.bias"). Each product rounds once, as the model's f32 scaling does. */
#include <stdio.h>
#include <string.h>

#include "frontend/ia3.h"
#include "io_int.h"
#include "train/checkpoint.h"
#include "weights.h"

static sn_weight *find(sn_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->w[i].name, name)) return &w->w[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* One vector l (n) of module prefix into out's weight and bias. */
static sn_status merge_one(const char *path, const char *prefix, const float *l, int64_t n,
                           sn_weights *out, bool in_out, sn_err *e) {
    char wn[192], bn[192];
    snprintf(wn, sizeof wn, "%s.%s", prefix, in_out ? "w" : "weight");
    snprintf(bn, sizeof bn, "%s.%s", prefix, in_out ? "b" : "bias");
    sn_weight *w = find(out, wn), *b = find(out, bn);
    bool ff = ends_with(prefix, "mlp.c_proj") || ends_with(prefix, "mlp.down_proj");
    int64_t in = w ? w->shape[in_out ? 0 : 1] : 0, outs = w ? w->shape[in_out ? 1 : 0] : 0;
    if (!w || w->rank != 2 || (ff ? in != n : outs < n) || (b && (b->rank != 1 || b->shape[0] != outs)))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the IA3 vector %s.ia3_l (%lld) scales no "
                       "%s of a weight %s there: the file is damaged", path, prefix, (long long)n,
                       ff ? "input" : "output channels", wn);
    for (int64_t i = 0; i < in; i++)
        for (int64_t o = 0; o < outs; o++) {
            int64_t k = ff ? i : o - (outs - n); /* the channel of l, < 0: not scaled */
            if (k < 0) continue;
            float *x = &w->data[in_out ? i * outs + o : o * in + i];
            *x *= l[k];
        }
    if (b && !ff)
        for (int64_t k = 0; k < n; k++) b->data[outs - n + k] *= l[k];
    return SN_OK;
}

sn_status sn_ia3_merge(const char *path, const sn_ckpt_weights *cw, sn_weights *out, bool in_out,
                       int *merged, sn_err *e) {
    for (int i = 0; i < cw->n; i++) {
        const sn_ckpt_param *p = &cw->params[i];
        if (!sn_ia3_is_vector(p->name)) continue;
        char prefix[176];
        size_t len = strlen(p->name) - strlen(".ia3_l");
        if (p->rank != 1 || len >= sizeof prefix)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the IA3 vector %s is not a vector of a "
                           "module sinter knows: the file is damaged", path, p->name);
        snprintf(prefix, sizeof prefix, "%.*s", (int)len, p->name);
        sn_status s = merge_one(path, prefix, p->w, p->shape[0], out, in_out, e);
        if (s) return s;
        (*merged)++;
    }
    return SN_OK;
}
