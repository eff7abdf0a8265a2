/* checkpoint.h: saving a training run and resuming it exactly, bit for bit.
 * Convention: a checkpoint is replaced whole or not at all (savefile.h), and is read whole and
 * checked (size, CRC-32, metadata, names and shapes) before anything in the trainer changes. */
#ifndef SN_CHECKPOINT_H
#define SN_CHECKPOINT_H

#include "ir/ir.h"
#include "support/plot.h"
#include "support/rng.h"
#include "sample.h"
#include "train.h"

/* The file (little-endian): a 32-byte header (magic "SNCKPT\x1a\n", u32 version, u32 header
 * size, u64 payload size, u32 CRC-32 of the payload, u32 0), then records, each u32 kind, u32
 * name length, name, u64 body size, body:
 *   META   value text                   the run's and the optimizer's settings ("train.lr" ...)
 *   STEP   i64                          optimizer steps taken
 *   RNG    u64[4]                       xoshiro256** state of the batch sampler ("data")
 *   STEP   u64 ("data_pos")             the in-order reader's next token (0 in older files)
 *   SERIES u64 n, f64 x[n], f64 y[n]    a loss curve ("train_loss", "val_loss")
 *   PARAM  u32 rank, i64 shape[rank], f32 w[numel], f32 m[numel], f32 v[numel]
 *   NF4    u32 rank, i64 shape[rank], u8 packed[sn_nf4_layout_of(numel).bytes]: a frozen
 *          weight stored as NF4 (QLoRA's base, ir/nf4.h), its bytes exactly, no moments
 * Readers skip kinds they do not know. */
enum { SN_CKPT_VERSION = 1, SN_CKPT_MAX_META = 48 };

typedef struct {
    char key[32];
    char value[512]; /* a LLaMA configuration (model.config) is the longest, ~330 */
} sn_ckpt_kv;

/* A run's state beside the trainer. */
typedef struct {
    int n_meta;
    sn_ckpt_kv meta[SN_CKPT_MAX_META]; /* what must be equal to resume: model, data, batch ... */
    sn_rng data_rng;                   /* the batch sampler's state after the last step */
    uint64_t data_pos;                 /* the in-order reader's next token (sn_batch_next) */
    sn_series train_loss, val_loss;    /* x: the step, y: the loss */
} sn_run_state;

/* Sets (or replaces) a metadata entry; the key must fit 31 bytes, the value 95 (asserted). */
void sn_run_meta_set(sn_run_state *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *sn_run_meta_get(const sn_run_state *r, const char *key);
/* The alpha of the LoRA adapters the run's "model.shape" names ("..., LoRA rank R alpha A on T");
 * 0 when it names none. */
double sn_run_lora_alpha(const sn_run_state *r);
void sn_run_state_free(sn_run_state *r); /* frees the curves */

/* Writes t (between optimizer steps: nothing accumulated) and r to path atomically; the old
 * file stays as it was when anything fails. A NaN or infinite weight or moment is
 * SN_ERR_NUMERIC and writes nothing: every checkpoint written is one a run can go on from. */
sn_status sn_checkpoint_save(const char *path, const sn_trainer *t, const sn_run_state *r, sn_err *e);

/* Restores t and r from path. On entry r->meta holds this run's metadata: it must equal the
 * file's key for key, as must t's optimizer options, parameter names and shapes; then the
 * weights, moments, step, RNG and curves are loaded. On any failure (unreadable, truncated,
 * corrupt, another version, or a mismatch, which the message names with both values) neither
 * t nor r is changed. */
sn_status sn_checkpoint_load(const char *path, sn_trainer *t, sn_run_state *r, sn_err *e);
/* The same from the bytes of a file already read (path only names it in messages). Safe on any
 * bytes: a checkpoint is a file people download and share. A NaN or infinite weight or moment
 * is SN_ERR_NUMERIC: such a file was saved from a run that diverged. */
sn_status sn_checkpoint_load_bytes(const char *path, const void *bytes, size_t len, sn_trainer *t,
                                   sn_run_state *r, sn_err *e);

/* A new run from a checkpoint's model (fine-tuning): only the weights are read; t's optimizer
 * state, step and options and the run's data stay this run's own. Every parameter of t must be
 * in the file with its shape, except LoRA adapters (frontend/lora.h), which keep their
 * initialisation when the file has none; the file must have no parameter t lacks (an adapter
 * the model would drop). Any other file: the same checks and messages as loading, the first
 * missing or mismatched parameter named; a file that fails a check leaves t unchanged (every
 * check runs before the first weight is copied). *fresh (may be NULL): the adapters left at
 * their initialisation. run (may be NULL: not compared): this run's metadata; when the file's
 * LoRA adapters are read, its "model.shape" (which holds the adapters' rank, alpha and targets)
 * must be the run's: adapters trained at scale alpha/R start another model at another scale. */
sn_status sn_checkpoint_init(const char *path, sn_trainer *t, const sn_run_state *run, int *fresh,
                             sn_err *e);
sn_status sn_checkpoint_init_bytes(const char *path, const void *bytes, size_t len, sn_trainer *t,
                                   const sn_run_state *run, int *fresh, sn_err *e);

/* A checkpoint's weights without a trainer (sinter export): the file checked whole (size,
 * CRC-32, records), then its metadata and each parameter's name, shape and weights (the moments
 * are not read). A NaN or infinite weight is SN_ERR_NUMERIC naming the parameter. */
typedef struct {
    char name[128];
    int rank;
    int64_t shape[SN_MAX_RANK];
    float *w; /* numel floats */
} sn_ckpt_param;
typedef struct {
    sn_run_state run; /* the file's metadata (keys and values that fit sn_ckpt_kv; others cut) */
    int n;
    sn_ckpt_param *params; /* in the file's order */
} sn_ckpt_weights;
sn_status sn_checkpoint_read_weights(const char *path, sn_ckpt_weights *out, sn_err *e);
sn_status sn_checkpoint_read_weights_bytes(const char *path, const void *bytes, size_t len,
                                           sn_ckpt_weights *out, sn_err *e);
void sn_ckpt_weights_free(sn_ckpt_weights *w);

/* A metadata value of the checkpoint at path (NUL-terminated in buf, if it fits len - 1 bytes),
 * read from the records before the first that is not metadata, without reading or checking the
 * rest (no CRC): a hint for what comes before a load (the plan of a resumed run), which checks
 * the whole file. NULL when the file, the key or room for it is not there. */
const char *sn_checkpoint_peek_meta(const char *path, const char *key, char *buf, size_t len);

/* ---- a checkpoint's model without a trainer (checkpoint_read.c: generation) ---- */

typedef struct sn_ckpt_model sn_ckpt_model;
/* Reads path whole and checks it (size, CRC, records); the weights are checked when read. */
sn_status sn_ckpt_model_read(const char *path, sn_ckpt_model **out, sn_err *e);
void sn_ckpt_model_free(sn_ckpt_model *m);
/* A metadata value ("model", "model.shape", "tokenizer", "seq" ...), NUL-terminated in buf
 * (cut to len - 1 bytes); NULL when the file has none. */
const char *sn_ckpt_model_meta(const sn_ckpt_model *m, const char *key, char *buf, size_t len);
/* The rank of the parameter called name with its shape in shape; -1 when there is none (or
 * its record is malformed). */
int sn_ckpt_model_shape(const sn_ckpt_model *m, const char *name, int64_t shape[SN_MAX_RANK]);
/* The name of the file's i-th parameter, NULL past the last. */
const char *sn_ckpt_model_param_name(const sn_ckpt_model *m, int i);
/* The weights as a source (sample.h; m must outlive its uses): a parameter the file lacks or
 * holds with another shape is SN_ERR_INVALID naming it and the file's model; a malformed
 * record SN_ERR_PARSE; a NaN or infinite weight SN_ERR_NUMERIC. */
sn_weight_source sn_ckpt_model_weights(const sn_ckpt_model *m);
/* Every parameter of the file is one of g's (by name), else SN_ERR_INVALID naming the first
 * that is not: a model built without some part of the file's (LoRA adapters) is refused. */
sn_status sn_ckpt_model_covers(const sn_ckpt_model *m, const sn_graph *g, sn_err *e);

#endif
