/* safetensors.c: the safetensors reader and writer of safetensors.h. The header is parsed by
 * json-c; sizes read from it go through checked arithmetic (ir/checked.h) before any use.
 * Convention: messages name the file and the tensor, and say what to do. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "ir/checked.h"
#include "io_int.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian tensors into host-order floats"
#endif

static const struct {
    const char *name;
    int bytes;
} dtypes[] = {
#define SN_X(name, bytes) {#name, bytes},
    SN_ST_DTYPES(SN_X)
#undef SN_X
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == SN_ST_DTYPE_COUNT, "one entry per dtype");

static const char HINT[] = "the file is damaged or not a safetensors file: download it again";

const char *sn_st_dtype_name(sn_st_dtype d) { return d < SN_ST_DTYPE_COUNT ? dtypes[d].name : "?"; }

bool sn_st_supported(void) {
#ifdef SN_HAVE_JSONC
    return true;
#else
    return false;
#endif
}

int64_t sn_st_numel(const sn_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->shape[d]; /* checked at parse */
    return n;
}

void sn_st_close(sn_st_file *f) {
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    *f = (sn_st_file){.fd = -1};
}

const sn_st_tensor *sn_st_find(const sn_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

#ifdef SN_HAVE_JSONC

/* A non-negative JSON integer below limit into *out. */
static bool get_count(json_object *o, uint64_t limit, uint64_t *out) {
    if (!o || !json_object_is_type(o, json_type_int)) return false;
    errno = 0;
    int64_t v = json_object_get_int64(o);
    if (errno || v < 0 || (uint64_t)v >= limit) return false;
    *out = (uint64_t)v;
    return true;
}

/* One entry of the header: name -> {dtype, shape, data_offsets}, checked against the data
 * part's size (data bytes). */
static sn_status parse_tensor(const char *path, const char *name, json_object *v, uint64_t data,
                              sn_st_tensor *t, sn_err *e) {
    json_object *dt, *shape, *off;
    if (!json_object_is_type(v, json_type_object) || !json_object_object_get_ex(v, "dtype", &dt) ||
        !json_object_object_get_ex(v, "shape", &shape) ||
        !json_object_object_get_ex(v, "data_offsets", &off) || !json_object_is_type(dt, json_type_string) ||
        !json_object_is_type(shape, json_type_array) || !json_object_is_type(off, json_type_array))
        return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s: its header entry is not {\"dtype\": ..., "
                       "\"shape\": [...], \"data_offsets\": [begin, end]}: %s", path, name, HINT);
    const char *d = json_object_get_string(dt);
    int k = 0;
    while (k < SN_ST_DTYPE_COUNT && strcmp(dtypes[k].name, d)) k++;
    if (k == SN_ST_DTYPE_COUNT)
        return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s has dtype \"%.32s\", which is not a "
                       "safetensors dtype (F32, BF16, F16, ...): %s", path, name, d, HINT);
    t->dtype = (sn_st_dtype)k;
    size_t rank = json_object_array_length(shape);
    if (rank > SN_ST_MAX_RANK)
        return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s has %zu dimensions, more than %d: %s", path,
                       name, rank, SN_ST_MAX_RANK, HINT);
    t->rank = (int)rank;
    uint64_t numel = 1, bytes, begin, end;
    for (size_t i = 0; i < rank; i++) {
        uint64_t n;
        if (!get_count(json_object_array_get_idx(shape, i), (uint64_t)1 << 48, &n) ||
            !sn_mul_u64(numel, n, &numel) || numel > ((uint64_t)1 << 48))
            return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s: dimension %zu of its shape is not a "
                           "size (a whole number >= 0 whose product with the others fits): %s",
                           path, name, i, HINT);
        t->shape[i] = (int64_t)n;
    }
    if (json_object_array_length(off) != 2 ||
        !get_count(json_object_array_get_idx(off, 0), UINT64_MAX, &begin) ||
        !get_count(json_object_array_get_idx(off, 1), UINT64_MAX, &end))
        return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s: data_offsets is not two whole numbers "
                       "[begin, end]: %s", path, name, HINT);
    bytes = numel * (uint64_t)dtypes[k].bytes;
    if (begin > end || end > data)
        return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] "
                       "%s: the file is truncated or damaged: download it again", path, name,
                       begin, end, begin > end ? "run backwards" : "reach past the end of the file");
    if (end - begin != bytes)
        return sn_fail(e, SN_ERR_PARSE, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] "
                       "hold %" PRIu64 " bytes; its shape and dtype %s need %" PRIu64 ": %s", path,
                       name, begin, end, end - begin, dtypes[k].name, bytes, HINT);
    t->begin = begin;
    t->end = end;
    return SN_OK;
}

static int by_begin(const void *a, const void *b) {
    const sn_st_tensor *x = *(const sn_st_tensor *const *)a, *y = *(const sn_st_tensor *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* No two tensors share bytes (the format forbids it; a writer that did is broken). */
static sn_status check_overlap(const char *path, sn_st_file *f, sn_err *e) {
    const sn_st_tensor **o = sn_malloc(sizeof *o * ((size_t)f->n + 1), "the safetensors tensor list", e);
    if (!o) return SN_ERR_OOM;
    for (int i = 0; i < f->n; i++) o[i] = &f->t[i];
    qsort(o, (size_t)f->n, sizeof *o, by_begin);
    sn_status s = SN_OK;
    for (int i = 1; i < f->n && !s; i++)
        if (o[i]->begin < o[i - 1]->end)
            s = sn_fail(e, SN_ERR_PARSE, "%s: tensors %s and %s overlap in the file: %s", path,
                        o[i - 1]->name, o[i]->name, HINT);
    free(o);
    return s;
}

static sn_status parse_json(const char *path, const char *text, size_t n, uint64_t data,
                            sn_st_file *f, sn_err *e) {
    json_tokener *tok = json_tokener_new();
    if (!tok) return sn_fail_oom(e, 4096, "the safetensors header's parser");
    json_object *root = json_tokener_parse_ex(tok, text, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (root && end < n && text[end] && strchr(" \t\r\n", text[end])) end++;
    sn_status s = SN_OK;
    if (!root)
        s = sn_fail(e, SN_ERR_PARSE, "%s: the JSON header %s: %s", path, err == json_tokener_continue
                    ? "ends early" : json_tokener_error_desc(err), HINT);
    else if (end < n)
        s = sn_fail(e, SN_ERR_PARSE, "%s: byte %zu of the JSON header: text after the object: %s",
                    path, 8 + end, HINT);
    else if (!json_object_is_type(root, json_type_object))
        s = sn_fail(e, SN_ERR_PARSE, "%s: the header is a JSON %s, not an object of tensors: %s",
                    path, json_type_to_name(json_object_get_type(root)), HINT);
    int cap = s ? 0 : json_object_object_length(root);
    if (!s && !(f->t = sn_calloc((size_t)cap + 1, sizeof *f->t, "the safetensors tensor list", e)))
        s = SN_ERR_OOM;
    if (!s) {
        json_object_object_foreach(root, key, val) {
            if (!strcmp(key, "__metadata__")) continue;
            sn_st_tensor *t = &f->t[f->n];
            if (!(t->name = strdup(key))) s = sn_fail_oom(e, strlen(key) + 1, "a tensor's name");
            else f->n++;
            if (s || (s = parse_tensor(path, key, val, data, t, e))) break;
        }
    }
    if (!s) s = check_overlap(path, f, e);
    json_object_put(root);
    return s;
}
#endif

sn_status sn_st_parse_header(const char *path, const void *bytes, size_t len, uint64_t file_size,
                             sn_st_file *out, sn_err *e) {
    *out = (sn_st_file){.path = path, .fd = -1};
#ifndef SN_HAVE_JSONC
    (void)bytes, (void)len, (void)file_size;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it reads no "
                   "safetensors: install libjson-c-dev and rebuild (./setup)", path);
#else
    const uint8_t *b = bytes;
    uint64_t n;
    if (len < 8 || file_size < 8)
        return sn_fail(e, SN_ERR_PARSE, "%s is truncated: %" PRIu64 " bytes, less than the 8 of "
                       "a safetensors header's length: download it again", path, file_size);
    memcpy(&n, b, 8);
    if (n > SN_ST_MAX_HEADER || n < 2)
        return sn_fail(e, SN_ERR_PARSE, "%s: a header of %" PRIu64 " bytes (the first 8 bytes): "
                       "not a safetensors file (its header is 2 bytes to 100 MB): check the path", path, n);
    if (n > file_size - 8 || n > len - 8)
        return sn_fail(e, SN_ERR_PARSE, "%s is truncated: its header says %" PRIu64 " bytes of "
                       "JSON, the file has %" PRIu64 " after the length: download it again", path,
                       n, file_size - 8);
    if (b[8] != '{')
        return sn_fail(e, SN_ERR_PARSE, "%s: the header does not start with '{': %s", path, HINT);
    out->data_at = 8 + n;
    sn_status s = parse_json(path, (const char *)b + 8, (size_t)n, file_size - 8 - n, out, e);
    if (s) sn_st_close(out);
    return s;
#endif
}

sn_status sn_st_open(const char *path, sn_st_file *out, sn_err *e) {
    *out = (sn_st_file){.path = path, .fd = -1};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        if (fd >= 0) close(fd);
        return sn_fail(e, SN_ERR_IO, "cannot read %s: %s: check the path", path,
                       fd >= 0 ? "not a regular file" : strerror(err));
    }
    uint64_t size = (uint64_t)st.st_size, n = 0;
    uint8_t len8[8];
    if (size >= 8 && pread(fd, len8, 8, 0) == 8) memcpy(&n, len8, 8);
    size_t want = size < 8 ? (size_t)size : n <= SN_ST_MAX_HEADER && n <= size - 8 ? (size_t)(8 + n) : 8;
    char *head = sn_malloc(want + 1, "a safetensors header", e);
    if (!head) {
        close(fd);
        return SN_ERR_OOM;
    }
    ssize_t got = want ? pread(fd, head, want, 0) : 0;
    sn_status s = got == (ssize_t)want ? sn_st_parse_header(path, head, want, size, out, e)
                  : sn_fail(e, SN_ERR_IO, "cannot read %s: %s", path, got < 0 ? strerror(errno) : "short read");
    free(head);
    if (s) {
        close(fd);
        return s;
    }
    out->fd = fd;
    return SN_OK;
}

sn_status sn_st_read_f32(const sn_st_file *f, const sn_st_tensor *t, float *dst, sn_err *e) {
    if (t->dtype != SN_ST_F32 && t->dtype != SN_ST_BF16 && t->dtype != SN_ST_F16)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: tensor %s is %s; sinter reads F32, BF16 and F16 "
                       "weights: convert the checkpoint to one of those", f->path, t->name,
                       dtypes[t->dtype].name);
    size_t bytes = (size_t)(t->end - t->begin), done = 0;
    char *buf = t->dtype == SN_ST_F32 ? (char *)dst : sn_malloc(bytes + 1, "a 16-bit tensor", e);
    if (!buf) return SN_ERR_OOM;
    while (done < bytes) {
        ssize_t got = pread(f->fd, buf + done, bytes - done, (off_t)(f->data_at + t->begin + done));
        if (got <= 0) {
            if (buf != (char *)dst) free(buf);
            return sn_fail(e, SN_ERR_IO, "cannot read tensor %s of %s: %s", t->name, f->path,
                           got < 0 ? strerror(errno) : "the file ends early (it shrank while read)");
        }
        done += (size_t)got;
    }
    if (buf == (char *)dst) return SN_OK;
    int64_t n = sn_st_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        dst[i] = t->dtype == SN_ST_BF16 ? sn_bf16_to_f32(h) : sn_f16_to_f32(h);
    }
    free(buf);
    return SN_OK;
}

/* ---- writing ---- */

static int by_name(const void *a, const void *b) {
    return strcmp((*(const sn_st_out *const *)a)->name, (*(const sn_st_out *const *)b)->name);
}

sn_status sn_st_write(const char *path, const sn_st_out *t, int n, sn_err *e) {
#ifndef SN_HAVE_JSONC
    (void)t, (void)n;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter has no json-c, so it writes no "
                   "safetensors: install libjson-c-dev and rebuild (./setup)", path);
#else
    /* the header in name order, as the safetensors library writes tensors of one dtype */
    const sn_st_out **o = sn_malloc(sizeof *o * ((size_t)n + 1), "the safetensors tensor list", e);
    json_object *root = json_object_new_object(), *meta = json_object_new_object();
    if (!o || !root || !meta) {
        free(o);
        json_object_put(root);
        json_object_put(meta);
        return o ? sn_fail_oom(e, 4096, "the safetensors header") : SN_ERR_OOM;
    }
    for (int i = 0; i < n; i++) o[i] = &t[i];
    qsort(o, (size_t)n, sizeof *o, by_name);
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    json_object_object_add(root, "__metadata__", meta);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        json_object *d = json_object_new_object(), *shape = json_object_new_array(), *off = json_object_new_array();
        int64_t numel = 1;
        for (int k = 0; k < o[i]->rank; k++) {
            json_object_array_add(shape, json_object_new_int64(o[i]->shape[k]));
            numel *= o[i]->shape[k];
        }
        json_object_array_add(off, json_object_new_int64((int64_t)at));
        at += 4 * (uint64_t)numel;
        json_object_array_add(off, json_object_new_int64((int64_t)at));
        json_object_object_add(d, "dtype", json_object_new_string("F32"));
        json_object_object_add(d, "shape", shape);
        json_object_object_add(d, "data_offsets", off);
        json_object_object_add(root, o[i]->name, d);
    }
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    sn_newfile f;
    sn_status s = text ? sn_newfile_open(&f, path, "safetensors file", e)
                       : sn_fail_oom(e, 4096, "the safetensors header");
    if (!s) {
        uint64_t len = strlen(text), padded = (len + 7) / 8 * 8;
        sn_newfile_put(&f, &padded, 8);
        sn_newfile_put(&f, text, (size_t)len);
        for (uint64_t k = len; k < padded; k++) sn_newfile_put(&f, " ", 1);
        for (int i = 0; i < n; i++) {
            int64_t numel = 1;
            for (int k = 0; k < o[i]->rank; k++) numel *= o[i]->shape[k];
            sn_newfile_put(&f, o[i]->data, 4 * (size_t)numel);
        }
        s = sn_newfile_commit(&f, e);
    }
    json_object_put(root);
    free(o);
    return s;
#endif
}
