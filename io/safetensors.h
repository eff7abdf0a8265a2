/* safetensors.h: the safetensors format (Hugging Face): an 8-byte little-endian header length,
 * a JSON header {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {..}} and the tensors' raw little-endian bytes, offsets counted from the end
 * of the header. Convention: a header is checked whole (every offset, shape and dtype against
 * the file's size) before any tensor is read, and tensors are read with pread into the caller's
 * f32 buffer, so a file that lies about itself is an error message, never a read past its end.
 *
 *     sn_st_file f;
 *     if (sn_st_open("model.safetensors", &f, &e)) ...
 *     const sn_st_tensor *t = sn_st_find(&f, "transformer.wte.weight");
 *     sn_st_read_f32(&f, t, dst, &e);       // F32, BF16 or F16 -> f32
 *     sn_st_close(&f);
 */
#ifndef SN_SAFETENSORS_H
#define SN_SAFETENSORS_H

#include "ir/ir.h"

enum { SN_ST_MAX_RANK = 8 };
#define SN_ST_MAX_HEADER (100u << 20) /* the format's own limit on the JSON header: 100 MB */

/*   X(NAME, bytes per element): every dtype the format names; sinter reads F32, BF16, F16 */
#define SN_ST_DTYPES(X)                                                                            \
    X(F64, 8) X(F32, 4) X(F16, 2) X(BF16, 2) X(I64, 8) X(I32, 4) X(I16, 2) X(I8, 1) X(U64, 8)     \
    X(U32, 4) X(U16, 2) X(U8, 1) X(BOOL, 1) X(F8_E4M3, 1) X(F8_E5M2, 1)

typedef enum {
#define SN_X(name, bytes) SN_ST_##name,
    SN_ST_DTYPES(SN_X)
#undef SN_X
        SN_ST_DTYPE_COUNT
} sn_st_dtype;

const char *sn_st_dtype_name(sn_st_dtype d);

typedef struct {
    char *name;
    sn_st_dtype dtype;
    int rank;
    int64_t shape[SN_ST_MAX_RANK];
    uint64_t begin, end; /* byte offsets in the data part (after the header) */
} sn_st_tensor;

typedef struct {
    const char *path;   /* for messages (not owned) */
    int fd;             /* -1: parsed from bytes only (sn_st_parse_header) */
    uint64_t data_at;   /* the data part's offset in the file: 8 + header length */
    int n;
    sn_st_tensor *t;    /* in the header's order */
} sn_st_file;

/* Whether this build reads and writes safetensors (it needs json-c). */
bool sn_st_supported(void);

/* Parses and checks a header: bytes[0, len) are the file's first bytes (at least the 8 of the
 * length and the header, else SN_ERR_PARSE "truncated"), file_size the whole file's size (the
 * data part must hold every tensor). path only names the file in messages. Safe on any bytes.
 * On failure *out is empty; on success free it with sn_st_close. */
sn_status sn_st_parse_header(const char *path, const void *bytes, size_t len, uint64_t file_size,
                             sn_st_file *out, sn_err *e);

/* Opens path, reads and checks its header (sn_st_parse_header); the file stays open for reads. */
sn_status sn_st_open(const char *path, sn_st_file *out, sn_err *e);
void sn_st_close(sn_st_file *f);

/* The tensor named name, or NULL. */
const sn_st_tensor *sn_st_find(const sn_st_file *f, const char *name);
int64_t sn_st_numel(const sn_st_tensor *t);

/* Reads t's elements into dst (numel floats) converted to f32: F32, BF16 and F16 exactly;
 * any other dtype is SN_ERR_UNSUPPORTED naming the tensor. A short read (the file shrank) is
 * SN_ERR_IO. */
sn_status sn_st_read_f32(const sn_st_file *f, const sn_st_tensor *t, float *dst, sn_err *e);

/* One tensor to write: f32, row-major. */
typedef struct {
    const char *name;
    int rank;
    const int64_t *shape;
    const float *data;
} sn_st_out;

/* Writes the tensors as F32 in the order given, with "__metadata__": {"format": "pt"} (what
 * transformers' save_pretrained writes), the header padded with spaces to a multiple of 8 bytes.
 * The file appears whole or not at all, and never replaces one that exists (SN_ERR_IO naming
 * it). */
sn_status sn_st_write(const char *path, const sn_st_out *t, int n, sn_err *e);

#endif
