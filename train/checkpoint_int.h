/* checkpoint_int.h: the checkpoint file's records, shared by checkpoint.c (a run saved and
 * resumed) and checkpoint_read.c (a model read without a trainer). Internal to train/.
 * Convention: a parsed file is a list of views into the caller's bytes, checked for size and
 * CRC before any record is looked at. */
#ifndef SN_CHECKPOINT_INT_H
#define SN_CHECKPOINT_INT_H

#include <stdint.h>
#include <string.h>

#include "checkpoint.h"

static const char SN_CKPT_MAGIC[8] = "SNCKPT\x1a\n";
enum { HEADER_BYTES = 32 };
enum { REC_META = 1, REC_STEP, REC_RNG, REC_SERIES, REC_PARAM, REC_NF4 };

typedef struct {
    uint32_t kind;
    char name[128];
    const uint8_t *body;
    uint64_t size;
} sn_ckpt_rec;

typedef struct {
    const char *path;
    sn_ckpt_rec *recs;
    int n;
} sn_ckpt_file;

static inline uint32_t sn_ckpt_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t sn_ckpt_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A PARAM record's rank with its shape in shape (u32 rank, i64 shape[rank], then f32 w, m, v),
 * or -1 when the record is too short for them or the rank is past SN_MAX_RANK. The sizes of
 * the floats are the caller's to check against the shape. */
static inline int sn_ckpt_param_rank(const sn_ckpt_rec *r, int64_t shape[SN_MAX_RANK]) {
    uint32_t rank = r->size >= 4 ? sn_ckpt_u32(r->body) : UINT32_MAX;
    if (rank > SN_MAX_RANK || r->size < 4 + 8 * (uint64_t)rank) return -1;
    for (uint32_t d = 0; d < rank; d++) shape[d] = (int64_t)sn_ckpt_u64(r->body + 4 + 8 * d);
    return (int)rank;
}

/* ---- a parameter's record (checkpoint_params.c): PARAM or NF4 ---- */

/* The record of parameter name's weights: its PARAM, else its NF4 record; NULL when neither. */
const sn_ckpt_rec *sn_ckpt_find_weights(const sn_ckpt_file *f, const char *name);
/* An NF4 record's weights (their shape into shape), or -1 when its shape record is bad, its
 * size is not the packed bytes of that shape or its scales (the mean, the steps) are not finite. */
int64_t sn_ckpt_nf4_numel(const sn_ckpt_rec *r, int64_t shape[SN_MAX_RANK]);
/* The n weights of an NF4 record (checked by sn_ckpt_nf4_numel) dequantized into out. */
void sn_ckpt_nf4_dequantize(const sn_ckpt_rec *r, int64_t n, float *out);
/* The first non-finite value among a PARAM record's weights and moments, as an index into its
 * 3 x numel floats; -1 when all are finite. */
int64_t sn_ckpt_first_non_finite(const sn_ckpt_rec *r, uint32_t rank, int64_t numel);
/* Record r (PARAM or NF4) against parameter i of t: the weights' shape (sn_trainer_param_value)
 * and the size its kind has for it. exact (a resume): an NF4 parameter needs an NF4 record and
 * an f32 one a PARAM; else (a new run) either fits either. verb ("match", "fit") and hint word
 * the messages. *rank_out: the record's rank. */
sn_status sn_ckpt_check_param(const sn_ckpt_file *f, const sn_ckpt_rec *r, const sn_trainer *t, int i,
                              bool exact, const char *verb, const char *hint, uint32_t *rank_out,
                              sn_err *e);
/* Parameter i of t from its checked record: the weights, then (to last) m and v of a PARAM
 * record. NF4 into NF4: the bytes exactly; a PARAM's weights into NF4 storage: quantized; an
 * NF4 record into an f32 parameter: dequantized (no moments). */
sn_status sn_ckpt_set_param(const sn_ckpt_rec *r, sn_trainer *t, int i, sn_param_which last, sn_err *e);

/* Checks the header, the size and the CRC, and splits the payload into records. out->recs is
 * the caller's to free, whatever this returns. */
sn_status sn_ckpt_parse(const char *path, const uint8_t *b, size_t len, sn_ckpt_file *out, sn_err *e);
/* The record of that kind and name, or NULL. */
const sn_ckpt_rec *sn_ckpt_find(const sn_ckpt_file *f, uint32_t kind, const char *name);

#endif
