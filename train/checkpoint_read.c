/* checkpoint_read.c: the checkpoint's records (checkpoint_int.h), and a checkpoint's model read
 * without a trainer (checkpoint.h): its metadata and its weights by name, for `sinter generate`.
 * Convention: a file is checked whole (size, CRC) when read; each parameter's record (shape,
 * size, finite weights) when it is asked for, with a message that names it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "data/data.h"
#include "checkpoint_int.h"
#include "ir/nf4.h"

/* Checks the header, the size and the CRC, and splits the payload into records. out->recs is
 * the caller's to free, whatever this returns. */
sn_status sn_ckpt_parse(const char *path, const uint8_t *b, size_t len, sn_ckpt_file *out, sn_err *e) {
    if (len < HEADER_BYTES || memcmp(b, SN_CKPT_MAGIC, 8))
        return sn_fail(e, SN_ERR_PARSE, len >= 8 && !memcmp(b, SN_CKPT_MAGIC, 8)
                       ? "checkpoint %s is truncated: %zu bytes, less than its header: the save was interrupted; use an older checkpoint"
                       : "%s is not a sinter checkpoint (%zu bytes, no magic number \"SNCKPT\"): check the path", path, len);
    uint32_t version = sn_ckpt_u32(b + 8), hsize = sn_ckpt_u32(b + 12), crc = sn_ckpt_u32(b + 24);
    uint64_t payload = sn_ckpt_u64(b + 16);
    if (version != SN_CKPT_VERSION || hsize != HEADER_BYTES)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s has version %u; this sinter reads version %d: "
                       "resume with the sinter that wrote it", path, version, SN_CKPT_VERSION);
    if (len - HEADER_BYTES != payload)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is %s: %zu bytes, its header says %" PRIu64
                       ": use an older checkpoint", path, len - HEADER_BYTES < payload ? "truncated"
                       : "longer than written", len, payload + HEADER_BYTES);
    uint32_t sum = (uint32_t)crc32_z(0, b + HEADER_BYTES, payload);
    if (sum != crc)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: the CRC-32 of its contents is "
                       "%08x, its header says %08x: use an older checkpoint", path,
                       sum, crc);
    const uint8_t *p = b + HEADER_BYTES, *end = b + len;
    int cap = 0;
    *out = (sn_ckpt_file){.path = path};
    while (p < end) {
        uint64_t name_len = end - p >= 8 ? sn_ckpt_u32(p + 4) : UINT64_MAX;
        if (name_len >= sizeof out->recs[0].name || (uint64_t)(end - p) < 16 + name_len ||
            sn_ckpt_u64(p + 8 + name_len) > (uint64_t)(end - p) - 16 - name_len)
            return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: record %d overruns the "
                           "file: use an older checkpoint", path, out->n + 1);
        if (memchr(p + 8, 0, name_len)) /* names are C strings: two could read alike */
            return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: record %d's name holds a "
                           "NUL byte: use an older checkpoint", path, out->n + 1);
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            sn_ckpt_rec *recs = sn_realloc(out->recs, sizeof(sn_ckpt_rec) * (size_t)cap, "a checkpoint's record list", e);
            if (!recs) return SN_ERR_OOM; /* out->recs is the caller's to free */
            out->recs = recs;
        }
        sn_ckpt_rec *r = &out->recs[out->n++];
        r->kind = sn_ckpt_u32(p);
        memcpy(r->name, p + 8, name_len);
        r->name[name_len] = 0;
        r->size = sn_ckpt_u64(p + 8 + name_len);
        r->body = p + 16 + name_len;
        p = r->body + r->size;
    }
    /* one record a name and kind, and one a parameter (its f32 weights or its NF4 bytes): the
       readers look records up by name, and each must find the one the writer meant */
    for (int i = 0; i < out->n; i++)
        for (int j = 0; j < i; j++) {
            const sn_ckpt_rec *a = &out->recs[i], *b2 = &out->recs[j];
            bool weights = (a->kind == REC_PARAM || a->kind == REC_NF4) &&
                           (b2->kind == REC_PARAM || b2->kind == REC_NF4);
            if ((a->kind == b2->kind || weights) && !strcmp(a->name, b2->name))
                return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: records %d and %d are "
                               "both %s %s: use an older checkpoint", path, j + 1, i + 1,
                               weights ? "the weights of" : "named", a->name);
        }
    return SN_OK;
}

const sn_ckpt_rec *sn_ckpt_find(const sn_ckpt_file *f, uint32_t kind, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (f->recs[i].kind == kind && !strcmp(f->recs[i].name, name)) return &f->recs[i];
    return NULL;
}

/* ---- a checkpoint's model ---------------------------------------------------------------------- */

struct sn_ckpt_model {
    char *bytes; /* the whole file */
    size_t len;
    sn_ckpt_file f;
    char path[512];
};

void sn_ckpt_model_free(sn_ckpt_model *m) {
    if (!m) return;
    free(m->bytes);
    free(m->f.recs);
    free(m);
}

sn_status sn_ckpt_model_read(const char *path, sn_ckpt_model **out, sn_err *e) {
    *out = NULL;
    sn_ckpt_model *m = sn_calloc(1, sizeof *m, "a checkpoint's model", e);
    if (!m) return SN_ERR_OOM;
    snprintf(m->path, sizeof m->path, "%s", path);
    sn_status s = sn_file_read(path, "check the checkpoint's path", &m->bytes, &m->len, e);
    if (!s) s = sn_ckpt_parse(m->path, (const uint8_t *)m->bytes, m->len, &m->f, e);
    if (s) {
        sn_ckpt_model_free(m);
        return s;
    }
    *out = m;
    return SN_OK;
}

const char *sn_checkpoint_peek_meta(const char *path, const char *key, char *buf, size_t len) {
    FILE *f = fopen(path, "rb");
    uint8_t h[HEADER_BYTES + 16];
    const char *found = NULL;
    size_t klen = strlen(key);
    if (!f || !len || fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES || memcmp(h, SN_CKPT_MAGIC, 8) ||
        sn_ckpt_u32(h + 8) != SN_CKPT_VERSION) {
        if (f) fclose(f);
        return NULL;
    }
    /* records: u32 kind, u32 name length, the name, u64 size, the body; the metadata first */
    char name[128];
    while (!found && fread(h, 1, 8, f) == 8) {
        uint32_t kind = sn_ckpt_u32(h), nl = sn_ckpt_u32(h + 4);
        if (kind != REC_META || nl >= sizeof name || fread(name, 1, nl, f) != nl || fread(h, 1, 8, f) != 8)
            break;
        uint64_t size = sn_ckpt_u64(h);
        if (nl == klen && !memcmp(name, key, klen) && size < len) {
            if (fread(buf, 1, (size_t)size, f) == size) buf[size] = 0, found = buf;
            break;
        }
        if (size > (1u << 20) || fseek(f, (long)size, SEEK_CUR)) break;
    }
    fclose(f);
    return found;
}

const char *sn_ckpt_model_meta(const sn_ckpt_model *m, const char *key, char *buf, size_t len) {
    const sn_ckpt_rec *r = sn_ckpt_find(&m->f, REC_META, key);
    if (!r || !len) return NULL;
    size_t n = r->size < len - 1 ? (size_t)r->size : len - 1;
    memcpy(buf, r->body, n);
    buf[n] = 0;
    return buf;
}

int sn_ckpt_model_shape(const sn_ckpt_model *m, const char *name, int64_t shape[SN_MAX_RANK]) {
    const sn_ckpt_rec *r = sn_ckpt_find_weights(&m->f, name);
    return r ? sn_ckpt_param_rank(r, shape) : -1;
}

const char *sn_ckpt_model_param_name(const sn_ckpt_model *m, int i) {
    for (int k = 0; k < m->f.n; k++)
        if ((m->f.recs[k].kind == REC_PARAM || m->f.recs[k].kind == REC_NF4) && i-- == 0)
            return m->f.recs[k].name;
    return NULL;
}

/* The file's model in words for messages: "model tiny (ctx 32, 2 layers, ...)". */
static void model_words(const sn_ckpt_model *m, char *buf, size_t len) {
    char name[100], shape[100];
    if (!sn_ckpt_model_meta(m, "model", name, sizeof name)) snprintf(name, sizeof name, "of no name");
    snprintf(buf, len, "model %s%s%s%s", name, sn_ckpt_model_meta(m, "model.shape", shape, sizeof shape) ? " (" : "",
             sn_ckpt_model_meta(m, "model.shape", shape, sizeof shape) ? shape : "",
             sn_ckpt_model_meta(m, "model.shape", shape, sizeof shape) ? ")" : "");
}

/* NF4 storage p (the nf4 pass's u8 parameter, passes/nf4.c) from record r of the weights of
 * that shape: an NF4 record's packed bytes exactly (QLoRA's base as trained), an f32 record's
 * weights quantized here. */
static sn_status nf4_get(const sn_ckpt_model *m, const sn_ckpt_rec *r, int rank,
                         int64_t *shape, const sn_node *p, uint8_t *out, sn_err *e) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    if (sn_nf4_layout_of(n).bytes != sn_numel(p))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not fit the model asked for: its "
                       "parameter %s holds %lld weights, and the model's NF4 storage for it %lld "
                       "bytes", m->path, p->name, (long long)n, (long long)sn_numel(p));
    if (r->kind == REC_NF4) {
        if (sn_ckpt_nf4_numel(r, shape) != n)
            return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: the NF4 weights of "
                           "parameter %s have a bad size or scales: use an older checkpoint",
                           m->path, p->name);
        memcpy(out, r->body + 4 + 8 * (size_t)rank, (size_t)sn_numel(p));
        return SN_OK;
    }
    if (r->size != 4 + 8 * (uint64_t)rank + 12 * (uint64_t)n)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: parameter %s holds %" PRIu64
                       " bytes, not 3 x %lld floats: use an older checkpoint", m->path, p->name,
                       r->size, (long long)n);
    float *w = sn_malloc(sizeof(float) * (size_t)n, "a weight to quantize", e);
    if (!w) return SN_ERR_OOM;
    memcpy(w, r->body + 4 + 8 * (size_t)rank, sizeof(float) * (size_t)n);
    sn_status s = sn_nf4_quantize(w, n, out, e);
    free(w);
    return s;
}

static sn_status model_get(void *src, const sn_node *p, float *data, sn_err *e) {
    const sn_ckpt_model *m = src;
    const sn_ckpt_rec *r = sn_ckpt_find_weights(&m->f, p->name);
    char model[240];
    model_words(m, model, sizeof model);
    if (!r)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s has no parameter %s: it holds %s, not "
                       "the model asked for", m->path, p->name, model);
    int64_t shape[SN_MAX_RANK] = {0};
    int rank = sn_ckpt_param_rank(r, shape);
    if (rank < 0)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: parameter %s has a bad shape "
                       "record: use an older checkpoint", m->path, p->name);
    if (p->dtype == SN_U8) return nf4_get(m, r, rank, shape, p, (uint8_t *)data, e);
    if (rank != p->rank || memcmp(shape, p->shape, sizeof(int64_t) * (size_t)rank)) {
        char there[96], here[96];
        sn_shape_str(rank, shape, there, sizeof there);
        sn_shape_str(p->rank, p->shape, here, sizeof here);
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not fit the model asked for: "
                       "parameter %s is %s there, %s here; the file holds %s", m->path, p->name,
                       there, here, model);
    }
    uint64_t n = (uint64_t)sn_numel(p);
    if (r->kind == REC_NF4) { /* QLoRA's base: the weights its bytes stand for */
        if (sn_ckpt_nf4_numel(r, shape) != (int64_t)n)
            return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: the NF4 weights of "
                           "parameter %s have a bad size or scales: use an older checkpoint",
                           m->path, p->name);
        sn_ckpt_nf4_dequantize(r, (int64_t)n, data);
        return SN_OK;
    }
    if (r->size != 4 + 8 * (uint64_t)rank + 12 * n)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: parameter %s holds %" PRIu64
                       " bytes, not 3 x %" PRIu64 " floats: use an older checkpoint", m->path,
                       p->name, r->size, n);
    memcpy(data, r->body + 4 + 8 * (size_t)rank, 4 * (size_t)n);
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(data[i]))
            return sn_fail(e, SN_ERR_NUMERIC, "checkpoint %s holds a NaN or infinite value in the "
                           "weights of parameter %s (element %" PRIu64 "): it was saved from a run "
                           "that diverged; use an older checkpoint", m->path, p->name, i);
    return SN_OK;
}

sn_weight_source sn_ckpt_model_weights(const sn_ckpt_model *m) { return (sn_weight_source){model_get, (void *)m}; }

sn_status sn_ckpt_model_covers(const sn_ckpt_model *m, const sn_graph *g, sn_err *e) {
    for (int k = 0; k < m->f.n; k++) {
        if (m->f.recs[k].kind != REC_PARAM && m->f.recs[k].kind != REC_NF4) continue;
        bool found = false;
        for (int i = 0; i < g->n_nodes && !found; i++)
            found = g->nodes[i]->op == SN_OP_PARAM && !strcmp(g->nodes[i]->name, m->f.recs[k].name);
        if (!found) {
            char model[240];
            model_words(m, model, sizeof model);
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s has a parameter %s, which the model "
                           "asked for lacks: the file holds %s", m->path, m->f.recs[k].name, model);
        }
    }
    return SN_OK;
}
