/* io_int.h: what the readers and writers of io/ share, one section per file.
 * Convention: an output of io/ is a new file: it appears whole (written to a temporary file,
 * fsync'd, then linked to its name) and never replaces a file that is there. */
#ifndef SN_IO_INT_H
#define SN_IO_INT_H

#include <stdbool.h>

#include "ir/ir.h"
#include "support/half.h" /* the readers' 16-bit floats */
#include "support/savefile.h"
#include "train/checkpoint.h"
#include "safetensors.h"
#include "weights.h"

/* ---- newfile.c ---- */

typedef struct {
    sn_savefile s;
    bool ok;  /* every put so far succeeded */
    int err;  /* errno of the first failed put */
} sn_newfile;

/* Refuses (SN_ERR_IO, naming path) when path exists; else starts its temporary file. */
sn_status sn_newfile_open(sn_newfile *f, const char *path, const char *what, sn_err *e);
void sn_newfile_put(sn_newfile *f, const void *p, size_t n);
/* fsync, then link to path (a file that appeared there meanwhile is not replaced: SN_ERR_IO). */
sn_status sn_newfile_commit(sn_newfile *f, sn_err *e);
void sn_newfile_abort(sn_newfile *f);
/* An export's directory: dir made when missing (its parent must exist), refused (SN_ERR_IO, naming
 * the file) when file a or b is in it already: an export never replaces a file. */
sn_status sn_newfile_dir(const char *dir, const char *a, const char *b, sn_err *e);
struct json_object;
/* A new file holding the JSON object o, pretty-printed, and a newline (json-c builds only; o is
 * not released). */
sn_status sn_newfile_json(const char *path, const char *what, struct json_object *o, sn_err *e);

/* ---- ia3_merge.c: IA3 vectors merged into the weights they scale ---- */

/* Every IA3 vector of checkpoint cw (read from path) merged into out's weights (in_out: GPT-2's
 * (in, out) "P.w" and "P.b"; else LLaMA's (out, in) "P.weight" and "P.bias"); *merged counts
 * them. SN_ERR_INVALID when a vector scales no weight of out. */
sn_status sn_ia3_merge(const char *path, const sn_ckpt_weights *cw, sn_weights *out, bool in_out,
                       int *merged, sn_err *e);

/* ---- peft.c, peft_ia3.c: PEFT adapters ---- */

/* dir (made when missing) with new files adapter_config.json (config) and
 * adapter_model.safetensors (the n tensors t); the config removed again when the tensors fail,
 * so no half-written adapter stays (json-c builds only). */
sn_status sn_peft_write_files(const char *dir, struct json_object *config, const sn_st_out *t, int n,
                              sn_err *e);

/* The IA3 vectors of checkpoint cw (read from path) as PEFT's IA3 adapter in dir, as
 * sn_lora_write_peft writes LoRA's; *n_vectors (may be NULL): the vectors written. */
sn_status sn_ia3_write_peft(const char *path, const sn_ckpt_weights *cw, const char *dir,
                            int *n_vectors, sn_err *e);

/* ---- hf_gpt2.c: JSON files of a Hugging Face directory ---- */

/* ---- hf_index.c: a sharded model's index ---- */

/* Called for each tensor `name` of the index in its order, with its shard's path (checked to be
 * a file of dir) and whether no earlier tensor named that shard. */
typedef sn_status (*sn_hf_shard_fn)(void *ctx, const char *path, const char *name, bool first, sn_err *e);
sn_status sn_hf_index_walk(const char *dir, const char *index, sn_hf_shard_fn fn, void *ctx, sn_err *e);

/* Reads path as a JSON object into *root (json-c builds only; SN_ERR_PARSE naming path). */
sn_status sn_hf_read_json(const char *path, struct json_object **root, sn_err *e);

#endif
