/* checkpoint_params.c: a parameter's record in a checkpoint (checkpoint_int.h), checked against
 * a trainer's parameter and copied into it, and an NF4 record read as floats by the readers
 * without a trainer. Convention: a PARAM record holds f32 weights, m and v; an NF4 record (QLoRA's
 * frozen base) the packed bytes exactly (ir/nf4.h), so a resume is bit for bit; both begin with
 * the weights' rank and shape. A new run (--init) may cross kinds: f32 weights are quantized
 * into an NF4 parameter, NF4 bytes dequantized into an f32 one. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "checkpoint_int.h"
#include "ir/nf4.h"

const sn_ckpt_rec *sn_ckpt_find_weights(const sn_ckpt_file *f, const char *name) {
    const sn_ckpt_rec *r = sn_ckpt_find(f, REC_PARAM, name);
    return r ? r : sn_ckpt_find(f, REC_NF4, name);
}

/* The product of the dimensions, or -1 when one is not positive or the product passes 2^40. */
static int64_t count(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] <= 0 || shape[d] > ((int64_t)1 << 40) / n) return -1;
        n *= shape[d];
    }
    return n;
}

int64_t sn_ckpt_nf4_numel(const sn_ckpt_rec *r, int64_t shape[SN_MAX_RANK]) {
    int rank = sn_ckpt_param_rank(r, shape);
    int64_t n = rank >= 0 ? count(rank, shape) : -1;
    if (n < 1 || r->size != 4 + 8 * (uint64_t)rank + (uint64_t)sn_nf4_layout_of(n).bytes) return -1;
    const uint8_t *q = r->body + 4 + 8 * (size_t)rank;
    sn_nf4_layout l = sn_nf4_layout_of(n);
    for (int64_t k = 0; k < 1 + l.groups; k++) { /* the mean and the steps: finite floats */
        float v;
        memcpy(&v, q + 4 * k, 4);
        if (!isfinite(v)) return -1;
    }
    return n;
}

void sn_ckpt_nf4_dequantize(const sn_ckpt_rec *r, int64_t n, float *out) {
    int64_t shape[SN_MAX_RANK];
    int rank = sn_ckpt_param_rank(r, shape);
    size_t bytes = (size_t)sn_nf4_layout_of(n).bytes;
    uint8_t *q = malloc(bytes); /* aligned for the floats it starts with */
    if (q) {
        memcpy(q, r->body + 4 + 8 * (size_t)rank, bytes);
        sn_nf4_dequantize(q, n, out);
    } else { /* out of memory: read in place (the host reads unaligned floats) */
        sn_nf4_dequantize(r->body + 4 + 8 * (size_t)rank, n, out);
    }
    free(q);
}

int64_t sn_ckpt_first_non_finite(const sn_ckpt_rec *r, uint32_t rank, int64_t numel) {
    const uint8_t *data = r->body + 4 + 8 * (size_t)rank;
    for (int64_t i = 0; i < 3 * numel; i++) {
        float v;
        memcpy(&v, data + 4 * i, 4);
        if (!isfinite(v)) return i;
    }
    return -1;
}

static void shape_text(char *buf, size_t len, uint32_t rank, const uint8_t *shape) {
    int k = snprintf(buf, len, "[");
    for (uint32_t d = 0; d < rank && k < (int)len; d++)
        k += snprintf(buf + k, len - (size_t)k, "%s%" PRId64, d ? "," : "", (int64_t)sn_ckpt_u64(shape + 8 * d));
    if (k < (int)len) snprintf(buf + k, len - (size_t)k, "]");
}

sn_status sn_ckpt_check_param(const sn_ckpt_file *f, const sn_ckpt_rec *r, const sn_trainer *t, int i,
                              bool exact, const char *verb, const char *hint, uint32_t *rank_out,
                              sn_err *e) {
    const sn_node *p = sn_trainer_param_node(t, i), *w = sn_trainer_param_value(t, i);
    bool nf4 = sn_trainer_param_nf4(t, i);
    uint32_t rank = r->size >= 4 ? sn_ckpt_u32(r->body) : UINT32_MAX;
    if (rank > SN_MAX_RANK || r->size < 4 + 8 * (uint64_t)rank)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: parameter %s has a bad "
                       "shape record: use an older checkpoint", f->path, p->name);
    char there[128], here[128];
    shape_text(there, sizeof there, rank, r->body + 4);
    sn_shape_str(w->rank, w->shape, here, sizeof here);
    if (strcmp(there, here))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not %s this model: parameter "
                       "%s is %s there, %s here: %s", f->path, verb, p->name, there, here, hint);
    if (exact && nf4 != (r->kind == REC_NF4))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this run: parameter %s "
                       "is %s there and %s here: resume with the --qlora or --lora it was saved "
                       "with, or start a new run from its weights with --init", f->path, p->name,
                       r->kind == REC_NF4 ? "NF4" : "full precision", nf4 ? "NF4" : "full precision");
    int64_t shape[SN_MAX_RANK];
    if (r->kind == REC_NF4 && sn_ckpt_nf4_numel(r, shape) != sn_numel(w))
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: the NF4 weights of parameter "
                       "%s are not the %" PRId64 " bytes of %s packed, or their scales are not "
                       "finite: use an older checkpoint", f->path, p->name,
                       sn_nf4_layout_of(sn_numel(w)).bytes, here);
    if (r->kind == REC_PARAM && r->size != 4 + 8 * (uint64_t)rank + 12 * (uint64_t)sn_numel(w))
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: parameter %s holds %" PRIu64
                       " bytes, not 3 x %" PRId64 " floats: use an older checkpoint", f->path,
                       p->name, r->size, sn_numel(w));
    *rank_out = rank;
    return SN_OK;
}

sn_status sn_ckpt_set_param(const sn_ckpt_rec *r, sn_trainer *t, int i, sn_param_which last, sn_err *e) {
    const sn_node *w = sn_trainer_param_value(t, i);
    size_t n = (size_t)sn_numel(w);
    const uint8_t *data = r->body + 4 + 8 * (size_t)w->rank;
    if (r->kind == REC_NF4 && sn_trainer_param_nf4(t, i)) { /* the bytes exactly */
        uint8_t *q = sn_malloc((size_t)sn_nf4_layout_of((int64_t)n).bytes, "a checkpoint's NF4 weights", e);
        if (!q) return SN_ERR_OOM;
        memcpy(q, data, (size_t)sn_nf4_layout_of((int64_t)n).bytes);
        sn_status s = sn_trainer_set_nf4(t, i, q, e);
        free(q);
        return s;
    }
    float *host = sn_malloc(4 * n + 4, "a checkpoint's parameter", e); /* the floats may be unaligned */
    if (!host) return SN_ERR_OOM;
    sn_status s = SN_OK;
    if (r->kind == REC_NF4) { /* into full precision: the weights the bytes stand for */
        sn_ckpt_nf4_dequantize(r, (int64_t)n, host);
        last = SN_PARAM_WEIGHTS;
    }
    for (int which = SN_PARAM_WEIGHTS; which <= (int)last && !s; which++) {
        if (r->kind == REC_PARAM) memcpy(host, data + 4 * n * (size_t)which, 4 * n);
        s = sn_trainer_set_param(t, i, (sn_param_which)which, host, e); /* NF4: quantized */
    }
    free(host);
    return s;
}
