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
enum { REC_META = 1, REC_STEP, REC_RNG, REC_SERIES, REC_PARAM };

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

/* Checks the header, the size and the CRC, and splits the payload into records. out->recs is
 * the caller's to free, whatever this returns. */
sn_status sn_ckpt_parse(const char *path, const uint8_t *b, size_t len, sn_ckpt_file *out, sn_err *e);
/* The record of that kind and name, or NULL. */
const sn_ckpt_rec *sn_ckpt_find(const sn_ckpt_file *f, uint32_t kind, const char *name);

#endif
