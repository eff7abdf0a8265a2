/* checkpoint_weights.c: a checkpoint's weights and metadata read without a trainer
 * (checkpoint.h, sn_checkpoint_read_weights), for `sinter export`.
 * Convention: the file is parsed and every parameter record checked before anything is copied. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "checkpoint_int.h"
#include "data/data.h"
#include "ir/checked.h"

void sn_ckpt_weights_free(sn_ckpt_weights *w) {
    for (int i = 0; i < w->n; i++) free(w->params[i].w);
    free(w->params);
    sn_run_state_free(&w->run);
    *w = (sn_ckpt_weights){0};
}

/* A PARAM record: u32 rank, i64 shape[rank], f32 w, m, v [numel]. */
static sn_status check_param(const sn_ckpt_file *f, const sn_ckpt_rec *r, sn_ckpt_param *p, sn_err *e) {
    int rank = sn_ckpt_param_rank(r, p->shape);
    uint64_t numel = 1, bytes;
    bool ok = rank >= 0;
    for (int d = 0; ok && d < rank; d++) /* sizes > 0, their product within reach */
        ok = p->shape[d] > 0 && sn_mul_u64(numel, (uint64_t)p->shape[d], &numel) &&
             numel < ((uint64_t)1 << 40);
    if (!ok || !sn_muladd_u64(numel, 12, 4 + 8 * (uint64_t)rank, &bytes) || bytes != r->size)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: parameter %s has a bad shape "
                       "or size: use an older checkpoint", f->path, r->name);
    snprintf(p->name, sizeof p->name, "%s", r->name);
    p->rank = rank;
    return SN_OK;
}

/* An NF4 record (checkpoint_params.c), dequantized into p. */
static sn_status nf4_param(const sn_ckpt_file *f, const sn_ckpt_rec *r, sn_ckpt_param *p, sn_err *e) {
    int64_t n = sn_ckpt_nf4_numel(r, p->shape);
    if (n < 1)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: the NF4 weights of parameter "
                       "%s have a bad shape, size or scales: use an older checkpoint", f->path, r->name);
    snprintf(p->name, sizeof p->name, "%s", r->name);
    p->rank = (int)sn_ckpt_u32(r->body);
    if (!(p->w = sn_malloc(4 * (size_t)n, "a checkpoint's parameter", e))) return SN_ERR_OOM;
    sn_ckpt_nf4_dequantize(r, n, p->w);
    return SN_OK;
}

sn_status sn_checkpoint_read_weights_bytes(const char *path, const void *bytes, size_t len,
                                           sn_ckpt_weights *out, sn_err *e) {
    *out = (sn_ckpt_weights){0};
    sn_ckpt_file f = {0};
    sn_status s = sn_ckpt_parse(path, bytes, len, &f, e);
    int n = 0;
    for (int i = 0; i < f.n && !s; i++) n += f.recs[i].kind == REC_PARAM || f.recs[i].kind == REC_NF4;
    if (!s && !n)
        s = sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds no parameters: give a checkpoint "
                    "written by sinter train --checkpoint", path);
    if (!s && !(out->params = sn_calloc((size_t)n, sizeof *out->params, "a checkpoint's parameter list", e)))
        s = SN_ERR_OOM;
    for (int i = 0; i < f.n && !s; i++) {
        const sn_ckpt_rec *r = &f.recs[i];
        if (r->kind == REC_META && out->run.n_meta < SN_CKPT_MAX_META) {
            sn_ckpt_kv *kv = &out->run.meta[out->run.n_meta++];
            snprintf(kv->key, sizeof kv->key, "%.31s", r->name);
            size_t most = sizeof kv->value - 1;
            snprintf(kv->value, sizeof kv->value, "%.*s", (int)(r->size < most ? r->size : most),
                     (const char *)r->body);
        }
        if (r->kind == REC_NF4) { /* QLoRA's base: the weights its bytes stand for */
            if ((s = nf4_param(&f, r, &out->params[out->n], e))) break;
            out->n++;
            continue;
        }
        if (r->kind != REC_PARAM) continue;
        sn_ckpt_param *p = &out->params[out->n];
        if ((s = check_param(&f, r, p, e))) break;
        size_t numel = (size_t)((r->size - 4 - 8 * (uint64_t)p->rank) / 12);
        if (!(p->w = sn_malloc(4 * numel + 4, "a checkpoint's parameter", e))) {
            s = SN_ERR_OOM;
            break;
        }
        out->n++;
        memcpy(p->w, r->body + 4 + 8 * (size_t)p->rank, 4 * numel);
        for (size_t k = 0; k < numel && !s; k++)
            if (!isfinite(p->w[k]))
                s = sn_fail(e, SN_ERR_NUMERIC, "checkpoint %s holds a NaN or infinite value in "
                            "the weights of parameter %s (element %zu): it was saved from a run "
                            "that diverged; use an older checkpoint", path, p->name, k);
    }
    free(f.recs);
    if (s) sn_ckpt_weights_free(out);
    return s;
}

sn_status sn_checkpoint_read_weights(const char *path, sn_ckpt_weights *out, sn_err *e) {
    *out = (sn_ckpt_weights){0};
    char *bytes;
    size_t len;
    sn_status s = sn_file_read(path, "check the checkpoint's path", &bytes, &len, e);
    if (s) return s;
    s = sn_checkpoint_read_weights_bytes(path, bytes, len, out, e);
    free(bytes);
    return s;
}
