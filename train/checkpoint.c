/* checkpoint.c: the checkpoint file of checkpoint.h. Saving streams records through a CRC
 * into a temporary file and writes the header last; loading checks the whole file first, then
 * the metadata and shapes, and only then copies into the trainer. */
#include "checkpoint.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/data.h"
#include "frontend/ia3.h"
#include "frontend/lora.h"
#include "ir/checked.h"
#include "ir/nf4.h"
#include "support/savefile.h"
#include "checkpoint_int.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes host-order numbers and assumes a little-endian host"
#endif

enum { F32 = sizeof(float) }; /* a weight or moment in the file: f32, whatever the program keeps */


/* ---- metadata ----------------------------------------------------------------------------- */

void sn_run_meta_set(sn_run_state *r, const char *key, const char *fmt, ...) {
    SN_ASSERT(strlen(key) < sizeof r->meta[0].key);
    int i = 0;
    while (i < r->n_meta && strcmp(r->meta[i].key, key)) i++;
    SN_ASSERT(i < SN_CKPT_MAX_META);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->meta[i].value, sizeof r->meta[i].value, fmt, ap);
    va_end(ap);
    SN_ASSERT(n >= 0 && (size_t)n < sizeof r->meta[i].value);
    snprintf(r->meta[i].key, sizeof r->meta[i].key, "%s", key);
    if (i == r->n_meta) r->n_meta++;
}

const char *sn_run_meta_get(const sn_run_state *r, const char *key) {
    for (int i = 0; i < r->n_meta; i++)
        if (!strcmp(r->meta[i].key, key)) return r->meta[i].value;
    return NULL;
}

double sn_run_lora_alpha(const sn_run_state *r) {
    const char *shape = sn_run_meta_get(r, "model.shape"), *lora = shape ? strstr(shape, "LoRA rank ") : NULL;
    int rank;
    double alpha;
    return lora && sscanf(lora, "LoRA rank %d alpha %lg", &rank, &alpha) == 2 && alpha > 0 ? alpha : 0;
}

void sn_run_state_free(sn_run_state *r) {
    sn_series_free(&r->train_loss);
    sn_series_free(&r->val_loss);
}

/* The optimizer options and the graph's dropout (when it has one) as metadata ("%.9g" prints a
 * float so that it reads back exactly). */
static void opts_meta(const sn_trainer *t, sn_run_state *m) {
    const sn_train_opts *o = sn_trainer_opts(t);
    if (sn_trainer_dropout(t) > 0) sn_run_meta_set(m, "train.dropout", "%.9g", sn_trainer_dropout(t));
    sn_run_meta_set(m, "train.steps", "%d", o->steps);
    sn_run_meta_set(m, "train.lr", "%.9g", o->lr);
    sn_run_meta_set(m, "train.min_lr_frac", "%.9g", o->min_lr_frac);
    sn_run_meta_set(m, "train.warmup", "%d", o->warmup);
    sn_run_meta_set(m, "train.weight_decay", "%.9g", o->weight_decay);
    sn_run_meta_set(m, "train.beta1", "%.9g", o->beta1);
    sn_run_meta_set(m, "train.beta2", "%.9g", o->beta2);
    sn_run_meta_set(m, "train.eps", "%.9g", o->eps);
    sn_run_meta_set(m, "train.grad_clip", "%.9g", o->grad_clip);
    sn_run_meta_set(m, "train.seed", "%" PRIu64, o->seed);
}

/* ---- saving ------------------------------------------------------------------------------- */

typedef struct {
    sn_savefile f;
    uint32_t crc;   /* zlib's CRC-32 of the payload written */
    uint64_t bytes; /* payload written */
    bool ok;
    int err; /* errno of the first failed write */
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (!w->ok || !n) return;
    w->ok = fwrite(p, 1, n, w->f.f) == n;
    if (!w->ok) w->err = errno;
    w->crc = (uint32_t)crc32_z(w->crc, p, n);
    w->bytes += n;
}

static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }

static void record(writer *w, uint32_t kind, const char *name, uint64_t body) {
    put_u32(w, kind);
    put_u32(w, (uint32_t)strlen(name));
    put(w, name, strlen(name));
    put_u64(w, body);
}

static void put_series(writer *w, const char *name, const sn_series *s) {
    record(w, REC_SERIES, name, 8 + 16 * (uint64_t)s->n);
    put_u64(w, (uint64_t)s->n);
    put(w, s->x, sizeof(double) * (size_t)s->n);
    put(w, s->y, sizeof(double) * (size_t)s->n);
}

/* An NF4 parameter (QLoRA's base): its weights' shape and packed bytes, exactly. */
static sn_status put_nf4(writer *w, const sn_trainer *t, int i, sn_err *e) {
    const sn_node *p = sn_trainer_param_node(t, i), *v = sn_trainer_param_value(t, i);
    size_t bytes = (size_t)sn_nf4_layout_of(sn_numel(v)).bytes;
    uint8_t *q = sn_malloc(bytes, "a checkpoint's NF4 weights", e);
    if (!q) return SN_ERR_OOM;
    sn_status s = sn_trainer_get_nf4(t, i, q, e);
    if (!s) {
        record(w, REC_NF4, p->name, 4 + 8 * (uint64_t)v->rank + bytes);
        put_u32(w, (uint32_t)v->rank);
        put(w, v->shape, 8 * (size_t)v->rank);
        put(w, q, bytes);
    }
    free(q);
    return s;
}

/* The payload; the parameters are the trainer's layout's (names, counts, in its order), their
 * weights and moments come from the trainer through sn_trainer_get_param. */
static sn_status put_payload(writer *w, const sn_trainer *t, const sn_run_state *r, sn_err *e) {
    sn_run_state all = {.n_meta = r->n_meta};
    memcpy(all.meta, r->meta, sizeof r->meta);
    opts_meta(t, &all);
    for (int i = 0; i < all.n_meta; i++) {
        record(w, REC_META, all.meta[i].key, strlen(all.meta[i].value));
        put(w, all.meta[i].value, strlen(all.meta[i].value));
    }
    record(w, REC_STEP, "step", 8);
    put_u64(w, (uint64_t)sn_trainer_step_count(t));
    if (sn_trainer_loss_scaling(t)) { /* the loss scaler: scale (f64 bits), skipped, clean */
        sn_loss_scaler sc = sn_trainer_scaler(t);
        double scale = sc.scale;
        uint64_t bits;
        memcpy(&bits, &scale, 8);
        record(w, REC_STEP, "loss_scaler", 24);
        put_u64(w, bits);
        put_u64(w, (uint64_t)sc.skipped);
        put_u64(w, (uint64_t)sc.clean);
    }
    record(w, REC_RNG, "data", 32);
    put(w, r->data_rng.s, 32);
    record(w, REC_STEP, "data_pos", 8);
    put_u64(w, r->data_pos);
    put_series(w, "train_loss", &r->train_loss);
    put_series(w, "val_loss", &r->val_loss);
    sn_status s = SN_OK;
    for (int i = 0; i < sn_trainer_layout(t)->n && !s; i++) {
        if (sn_trainer_param_nf4(t, i)) {
            s = put_nf4(w, t, i, e);
            continue;
        }
        const sn_param_slot *ps = &sn_trainer_layout(t)->slots[i];
        const sn_node *p = ps->node;
        size_t n = (size_t)ps->numel;
        float *host = malloc(F32 * n + F32);
        if (!host)
            return sn_fail(e, SN_ERR_OOM, "checkpoint: out of host memory for parameter %s (%.1f "
                           "MiB)", p->name, F32 * (double)n / (1 << 20));
        record(w, REC_PARAM, p->name, 4 + 8 * (uint64_t)p->rank + 3 * F32 * (uint64_t)n);
        put_u32(w, (uint32_t)p->rank);
        put(w, p->shape, 8 * (size_t)p->rank);
        /* weights, m, v (a frozen parameter's moments are zeros) */
        for (int which = SN_PARAM_WEIGHTS; which <= SN_PARAM_V && !s; which++)
            if (!(s = sn_trainer_get_param(t, i, (sn_param_which)which, host, e))) put(w, host, F32 * n);
        free(host);
    }
    return s;
}

static void header(uint8_t h[HEADER_BYTES], uint64_t payload, uint32_t crc) {
    uint32_t version = SN_CKPT_VERSION, size = HEADER_BYTES;
    memset(h, 0, HEADER_BYTES);
    memcpy(h, SN_CKPT_MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &size, 4);
    memcpy(h + 16, &payload, 8);
    memcpy(h + 24, &crc, 4);
}

/* A checkpoint is "good" when its weights and moments are finite: a diverged state is never
 * written, so the last checkpoint saved is one to resume from. */
static sn_status check_state_finite(const char *path, const sn_trainer *t, sn_err *e) {
    for (int i = 0; i < sn_trainer_layout(t)->n; i++) {
        const sn_param_slot *ps = &sn_trainer_layout(t)->slots[i];
        const sn_node *p = ps->node;
        size_t n = (size_t)ps->numel;
        if (sn_trainer_param_nf4(t, i)) continue; /* frozen bytes, quantized from finite weights */
        float *host = sn_malloc(F32 * n, "a checkpoint's finiteness check", e);
        if (!host) return SN_ERR_OOM;
        bool finite = true;
        for (int which = SN_PARAM_WEIGHTS; which <= SN_PARAM_V && finite; which++) {
            sn_status s = sn_trainer_get_param(t, i, (sn_param_which)which, host, e);
            if (s) {
                free(host);
                return s;
            }
            for (size_t k = 0; k < n && finite; k++) finite = isfinite(host[k]);
        }
        free(host);
        if (!finite)
            return sn_fail(e, SN_ERR_NUMERIC, "checkpoint %s not written: parameter %s holds "
                           "a NaN or infinite value after step %d: the run diverged; the "
                           "previous checkpoint, if any, is unchanged", path, p->name,
                           sn_trainer_step_count(t));
    }
    return SN_OK;
}

sn_status sn_checkpoint_save(const char *path, const sn_trainer *t, const sn_run_state *r, sn_err *e) {
    if (sn_trainer_pending(t))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: %d micro-batches are accumulated but "
                       "not applied: save between optimizer steps", path, sn_trainer_pending(t));
    sn_status fs = check_state_finite(path, t, e);
    if (fs) return fs;
    writer w = {.ok = true};
    sn_status s = sn_savefile_open(&w.f, path, "checkpoint", e);
    if (s) return s;
    uint8_t h[HEADER_BYTES];
    header(h, 0, 0); /* a placeholder until the payload's size and CRC are known */
    w.ok = fwrite(h, 1, HEADER_BYTES, w.f.f) == HEADER_BYTES;
    if (!w.ok) w.err = errno;
    if ((s = put_payload(&w, t, r, e))) {
        sn_savefile_abort(&w.f);
        return s;
    }
    header(h, w.bytes, w.crc);
    if (w.ok && (fseek(w.f.f, 0, SEEK_SET) != 0 || fwrite(h, 1, HEADER_BYTES, w.f.f) != HEADER_BYTES))
        w.ok = false, w.err = errno;
    if (!w.ok) {
        sn_savefile_abort(&w.f);
        return sn_fail(e, SN_ERR_IO, "cannot write the checkpoint %s: %s: check free disk space; "
                       "the previous checkpoint, if any, is unchanged", path, strerror(w.err));
    }
    return sn_savefile_commit(&w.f, e);
}

/* ---- loading ------------------------------------------------------------------------------ */

/* Compares this run's metadata (r's and t's options) with the file's, both ways. */
static sn_status check_meta(const sn_ckpt_file *f, const sn_trainer *t, const sn_run_state *r, sn_err *e) {
    sn_run_state want = {.n_meta = r->n_meta};
    memcpy(want.meta, r->meta, sizeof r->meta);
    opts_meta(t, &want);
    static const char hint[] = "resume with the model, data and options it was saved with, or "
                               "start afresh without --resume";
    bool here = sn_run_meta_get(&want, "qlora"), there = sn_ckpt_find(f, REC_META, "qlora");
    if (here != there)
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this run: it was saved by "
                       "a %s run and this one is %s: resume with%s --qlora R, or start a new run "
                       "from its weights with --init %s", f->path,
                       there ? "QLoRA (NF4 base)" : "full-precision", here ? "QLoRA (NF4 base)" : "not",
                       there ? "" : "out", f->path);
    for (int i = 0; i < want.n_meta; i++) {
        const sn_ckpt_rec *m = sn_ckpt_find(f, REC_META, want.meta[i].key);
        if (!m)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this run: it has no "
                           "%s (here %s): %s", f->path, want.meta[i].key, want.meta[i].value, hint);
        if (m->size != strlen(want.meta[i].value) || memcmp(m->body, want.meta[i].value, m->size))
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this run: %s is %.*s "
                           "there, %s here: %s", f->path, want.meta[i].key, (int)(m->size < 400 ? m->size : 400),
                           (const char *)m->body, want.meta[i].value, hint);
    }
    for (int i = 0; i < f->n; i++)
        if (f->recs[i].kind == REC_META && !sn_run_meta_get(&want, f->recs[i].name))
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this run: it has %s "
                           "= %.*s, which this run does not set: %s", f->path, f->recs[i].name,
                           (int)(f->recs[i].size < 96 ? f->recs[i].size : 96),
                           (const char *)f->recs[i].body, hint);
    return SN_OK;
}

/* Every parameter of t is in the file with its shape, and the file has no other. */
static sn_status check_params(const sn_ckpt_file *f, const sn_trainer *t, sn_err *e) {
    static const char hint[] = "it was saved from another model: resume with the same --model";
    for (int i = 0; i < sn_trainer_layout(t)->n; i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        const sn_ckpt_rec *r = sn_ckpt_find_weights(f, p->name);
        if (!r)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this model: it has no "
                           "parameter %s: %s", f->path, p->name, hint);
        uint32_t rank;
        sn_status s = sn_ckpt_check_param(f, r, t, i, true, "match", hint, &rank, e);
        if (s) return s;
    }
    for (int i = 0; i < f->n; i++)
        if ((f->recs[i].kind == REC_PARAM || f->recs[i].kind == REC_NF4) &&
            sn_trainer_find_param(t, f->recs[i].name) < 0)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not match this model: it has a "
                           "parameter %s, which this model lacks: %s", f->path, f->recs[i].name, hint);
    return SN_OK;
}

static sn_status check_series(const sn_ckpt_file *f, const char *name, sn_err *e) {
    const sn_ckpt_rec *r = sn_ckpt_find(f, REC_SERIES, name);
    uint64_t bytes;
    if (!r || r->size < 8 || !sn_muladd_u64(sn_ckpt_u64(r->body), 16, 8, &bytes) || r->size != bytes)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: its %s curve is %s: use an "
                       "older checkpoint", f->path, name, r ? "malformed" : "missing");
    return SN_OK;
}

static sn_status load_series(const sn_ckpt_file *f, const char *name, sn_series *s, sn_err *e) {
    const sn_ckpt_rec *r = sn_ckpt_find(f, REC_SERIES, name);
    uint64_t n = sn_ckpt_u64(r->body);
    sn_series_free(s);
    for (uint64_t i = 0; i < n; i++) {
        double x, y;
        memcpy(&x, r->body + 8 + 8 * i, 8);
        memcpy(&y, r->body + 8 + 8 * n + 8 * i, 8);
        if (sn_series_push(s, x, y, e)) return SN_ERR_OOM;
    }
    return SN_OK;
}

/* A trainer with dynamic loss scaling needs the file's scaler (the writer always saves one): a
 * scale that is a positive float (a 0, NaN or infinite scale would skip every step from here on
 * without a word; a double past FLT_MAX has no float), and counts of skipped and clean steps within the steps run. */
static sn_status check_scaler(const sn_ckpt_file *f, const sn_trainer *t, uint64_t step, sn_err *e) {
    if (!sn_trainer_loss_scaling(t)) return SN_OK;
    const sn_ckpt_rec *ls = sn_ckpt_find(f, REC_STEP, "loss_scaler");
    if (!ls || ls->size != 24)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: its loss scaler record is "
                       "missing or %s: use an older checkpoint", f->path, ls ? "the wrong size" : "absent");
    uint64_t bits = sn_ckpt_u64(ls->body), skipped = sn_ckpt_u64(ls->body + 8), clean = sn_ckpt_u64(ls->body + 16);
    double scale;
    memcpy(&scale, &bits, 8);
    if (!(scale > 0 && scale <= FLT_MAX && (float)scale > 0) || skipped > step || clean > step)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: its loss scaler (scale %g, %" PRIu64
                       " steps skipped, %" PRIu64 " clean) is not a positive float with counts "
                       "within the %" PRIu64 " steps run: use an older checkpoint", f->path, scale,
                       skipped, clean, step);
    return SN_OK;
}

static sn_status check_all(const sn_ckpt_file *f, const sn_trainer *t, const sn_run_state *r, sn_err *e) {
    sn_status s = check_meta(f, t, r, e);
    if (s || (s = check_params(f, t, e))) return s;
    const sn_ckpt_rec *step = sn_ckpt_find(f, REC_STEP, "step"), *rng = sn_ckpt_find(f, REC_RNG, "data");
    const sn_ckpt_rec *pos = sn_ckpt_find(f, REC_STEP, "data_pos");
    if (!step || step->size != 8 || !rng || rng->size != 32 || (pos && pos->size != 8))
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: its step, RNG or data position "
                       "record is missing or damaged: use an older checkpoint", f->path);
    if (sn_ckpt_u64(step->body) > (uint64_t)sn_trainer_opts(t)->steps)
        return sn_fail(e, SN_ERR_PARSE, "checkpoint %s is corrupt: step %" PRIu64 " is past the "
                       "run's %d steps", f->path, sn_ckpt_u64(step->body), sn_trainer_opts(t)->steps);
    if ((s = check_series(f, "train_loss", e)) || (s = check_series(f, "val_loss", e))) return s;
    return check_scaler(f, t, sn_ckpt_u64(step->body), e);
}

static sn_status check_finite(const sn_ckpt_file *f, const sn_trainer *t, sn_err *e) {
    static const char *const part[3] = {"weights", "first moments", "second moments"};
    for (int i = 0; i < sn_trainer_layout(t)->n; i++) {
        const sn_param_slot *ps = &sn_trainer_layout(t)->slots[i];
        const sn_node *p = ps->node;
        if (sn_trainer_param_nf4(t, i)) continue; /* its scales were checked with its size */
        int64_t bad = sn_ckpt_first_non_finite(sn_ckpt_find(f, REC_PARAM, p->name), (uint32_t)p->rank, ps->numel);
        if (bad >= 0)
            return sn_fail(e, SN_ERR_NUMERIC, "checkpoint %s holds a NaN or infinite value in the "
                           "%s of parameter %s (element %" PRId64 "): it was saved from a run that "
                           "diverged; use an older checkpoint", f->path, part[bad / ps->numel],
                           p->name, bad % ps->numel);
    }
    return SN_OK;
}

sn_status sn_checkpoint_load_bytes(const char *path, const void *bytes, size_t len, sn_trainer *t,
                                   sn_run_state *r, sn_err *e) {
    if (sn_trainer_pending(t))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the trainer has accumulated gradients: "
                       "load before the first step", path);
    sn_ckpt_file f = {0};
    sn_status s;
    if (!(s = sn_ckpt_parse(path, bytes, len, &f, e)) && !(s = check_all(&f, t, r, e)) &&
        !(s = check_finite(&f, t, e))) {
        for (int i = 0; i < sn_trainer_layout(t)->n && !s; i++)
            s = sn_ckpt_set_param(sn_ckpt_find_weights(&f, sn_trainer_param_node(t, i)->name), t, i,
                                  SN_PARAM_V, e);
    }
    if (!s) {
        sn_trainer_set_step_count(t, (int)sn_ckpt_u64(sn_ckpt_find(&f, REC_STEP, "step")->body));
        const sn_ckpt_rec *ls = sn_ckpt_find(&f, REC_STEP, "loss_scaler"); /* checked by check_scaler */
        if (sn_trainer_loss_scaling(t)) {
            uint64_t bits = sn_ckpt_u64(ls->body);
            double scale;
            memcpy(&scale, &bits, 8);
            sn_trainer_set_scaler(t, (sn_loss_scaler){.scale = (float)scale,
                                                      .skipped = (int64_t)sn_ckpt_u64(ls->body + 8),
                                                      .clean = (int64_t)sn_ckpt_u64(ls->body + 16)});
        }
        memcpy(r->data_rng.s, sn_ckpt_find(&f, REC_RNG, "data")->body, 32);
        const sn_ckpt_rec *pos = sn_ckpt_find(&f, REC_STEP, "data_pos"); /* checked by check_all */
        r->data_pos = pos ? sn_ckpt_u64(pos->body) : 0;
        if (!(s = load_series(&f, "train_loss", &r->train_loss, e))) s = load_series(&f, "val_loss", &r->val_loss, e);
    }
    free(f.recs);
    return s;
}

sn_status sn_checkpoint_load(const char *path, sn_trainer *t, sn_run_state *r, sn_err *e) {
    if (sn_trainer_pending(t))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: the trainer has accumulated gradients: "
                       "load before the first step", path);
    char *bytes;
    size_t len;
    sn_status s = sn_file_read(path, "check the checkpoint's path", &bytes, &len, e);
    if (s) return s;
    s = sn_checkpoint_load_bytes(path, bytes, len, t, r, e);
    free(bytes);
    return s;
}

/* ---- a new run from a checkpoint's weights ------------------------------------------------- */

/* The file's "model" and "model.shape" metadata as a hint ("model tiny (ctx 32, ...)"). */
static void file_model(const sn_ckpt_file *f, char *buf, size_t len) {
    const sn_ckpt_rec *m = sn_ckpt_find(f, REC_META, "model"), *shape = sn_ckpt_find(f, REC_META, "model.shape");
    if (!m) {
        snprintf(buf, len, "a model this sinter does not name");
        return;
    }
    snprintf(buf, len, "model %.*s%s%.*s%s", (int)(m->size < 64 ? m->size : 64), (const char *)m->body,
             shape ? " (" : "", shape ? (int)(shape->size < 96 ? shape->size : 96) : 0,
             shape ? (const char *)shape->body : "", shape ? ")" : "");
}

/* check_params for a new run: adapters may be absent (counted in *fresh), shapes must match. */
static sn_status check_init_params(const sn_ckpt_file *f, const sn_trainer *t, int *fresh, sn_err *e) {
    char model[200], hint[320];
    file_model(f, model, sizeof model);
    snprintf(hint, sizeof hint, "the checkpoint holds %s: start from it with the same --model "
             "(and the same --lora or --ia3, if it was a fine-tuning run)", model);
    *fresh = 0;
    for (int i = 0; i < sn_trainer_layout(t)->n; i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        const sn_ckpt_rec *r = sn_ckpt_find_weights(f, p->name);
        if (!r && sn_is_adapter(p->name)) {
            (*fresh)++;
            continue;
        }
        if (!r)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not fit this model: it has no "
                           "parameter %s: %s", f->path, p->name, hint);
        uint32_t rank;
        sn_status s = sn_ckpt_check_param(f, r, t, i, false, "fit", hint, &rank, e);
        if (s) return s;
        int64_t numel = sn_numel(sn_trainer_param_value(t, i));
        int64_t bad = r->kind == REC_PARAM ? sn_ckpt_first_non_finite(r, rank, numel) : -1;
        if (bad >= 0 && bad < numel) /* only the weights are read */
            return sn_fail(e, SN_ERR_NUMERIC, "checkpoint %s holds a NaN or infinite value in the "
                           "weights of parameter %s (element %" PRId64 "): it was saved from a run "
                           "that diverged; use an older checkpoint", f->path, p->name, bad);
    }
    for (int i = 0; i < f->n; i++)
        if ((f->recs[i].kind == REC_PARAM || f->recs[i].kind == REC_NF4) &&
            sn_trainer_find_param(t, f->recs[i].name) < 0)
            return sn_fail(e, SN_ERR_INVALID, "checkpoint %s does not fit this model: it has a "
                           "parameter %s, which this model lacks%s: %s", f->path, f->recs[i].name,
                           sn_lora_is_adapter(f->recs[i].name)
                               ? " (a LoRA adapter: merging adapters into the weights is not "
                                 "supported yet; add --lora with the rank and targets it was trained with)"
                           : sn_ia3_is_vector(f->recs[i].name)
                               ? " (an IA3 vector: add --ia3, or start from the weights sinter "
                                 "export merges them into)"
                               : "", hint);
    return SN_OK;
}

/* The file's adapters are read only into a model of the same shape and scale: its "model.shape"
 * is run's (the LoRA rank, alpha and targets are in it). */
static sn_status check_init_adapters(const sn_ckpt_file *f, const sn_trainer *t, const sn_run_state *run,
                                     sn_err *e) {
    const char *want = run ? sn_run_meta_get(run, "model.shape") : NULL;
    if (!want) return SN_OK;
    bool adapters = false;
    for (int i = 0; i < f->n && !adapters; i++)
        adapters = f->recs[i].kind == REC_PARAM && sn_is_adapter(f->recs[i].name) &&
                   sn_trainer_find_param(t, f->recs[i].name) >= 0;
    const sn_ckpt_rec *m = sn_ckpt_find(f, REC_META, "model.shape");
    if (!adapters || (m && m->size == strlen(want) && !memcmp(m->body, want, m->size))) return SN_OK;
    return sn_fail(e, SN_ERR_INVALID, "checkpoint %s holds LoRA adapters trained as %.*s; this run "
                   "is %s: the adapters would start at another scale (alpha/R), so the run would "
                   "not start from the saved model: give the --lora, --lora-alpha and "
                   "--lora-targets it was trained with", f->path, m ? (int)(m->size < 160 ? m->size : 160) : 7,
                   m ? (const char *)m->body : "unknown", want);
}

sn_status sn_checkpoint_init_bytes(const char *path, const void *bytes, size_t len, sn_trainer *t,
                                   const sn_run_state *run, int *fresh, sn_err *e) {
    if (sn_trainer_pending(t) || sn_trainer_step_count(t))
        return sn_fail(e, SN_ERR_INVALID, "checkpoint %s: a run starts from a checkpoint's "
                       "weights before its first step", path);
    sn_ckpt_file f = {0};
    int n_fresh = 0;
    sn_status s;
    if (!(s = sn_ckpt_parse(path, bytes, len, &f, e)) && !(s = check_init_params(&f, t, &n_fresh, e)) &&
        !(s = check_init_adapters(&f, t, run, e))) {
        for (int i = 0; i < sn_trainer_layout(t)->n && !s; i++) {
            const sn_ckpt_rec *rc = sn_ckpt_find_weights(&f, sn_trainer_param_node(t, i)->name);
            if (rc) s = sn_ckpt_set_param(rc, t, i, SN_PARAM_WEIGHTS, e); /* none: an adapter keeps its init */
        }
    }
    free(f.recs);
    if (!s && fresh) *fresh = n_fresh;
    return s;
}

sn_status sn_checkpoint_init(const char *path, sn_trainer *t, const sn_run_state *run, int *fresh,
                             sn_err *e) {
    char *bytes;
    size_t len;
    sn_status s = sn_file_read(path, "check the path given to --init", &bytes, &len, e);
    if (s) return s;
    s = sn_checkpoint_init_bytes(path, bytes, len, t, run, fresh, e);
    free(bytes);
    return s;
}
