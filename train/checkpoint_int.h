/* checkpoint_int.h: the checkpoint file's records as the readers of train/ share them
 * (checkpoint.c resumes and starts runs; checkpoint_weights.c reads weights for export).
 * Convention: sn_ckpt_parse checks the header, size and CRC-32 and bounds every record before
 * any caller reads one; a record's body is then within the bytes parsed. */
#ifndef SN_CHECKPOINT_INT_H
#define SN_CHECKPOINT_INT_H

#include <stdint.h>
#include <string.h>

#include "ir/ir.h"

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
} sn_ckpt_parsed;

static inline uint32_t get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t get_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Checks the header, the size and the CRC, and splits the payload into records. out->recs is
 * the caller's to free, whatever this returns. */
sn_status sn_ckpt_parse(const char *path, const uint8_t *b, size_t len, sn_ckpt_parsed *out, sn_err *e);
/* The first record of kind named name, or NULL. */
const sn_ckpt_rec *sn_ckpt_find(const sn_ckpt_parsed *f, uint32_t kind, const char *name);

#endif
