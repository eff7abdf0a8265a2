/* data.c: corpora read from a file or a directory, token streams, batch sampling and the
 * byte-level tokenizer (llm.c .bin shards are in shard.c, GPT-2's BPE in bpe.c).
 * Convention: buffers sized by the data (corpus, streams, shards) report SN_ERR_OOM; every
 * file error names the path and the fix. */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CORPUS_HINT "install Debian's fortunes package or pass --data FILE"

/* ---- files and corpora ----------------------------------------------------------------- */

static const char *file_kind(mode_t m) {
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Opened without blocking (a FIFO with no writer would hang fopen) and checked with fstat before
 * a byte is read. */
FILE *sn_file_open(const char *path, const char *what, const char *hint, sn_err *e) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        sn_fail(e, SN_ERR_IO, "cannot read %s%s: %s: %s", what, path, strerror(errno), hint);
        return NULL;
    }
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sn_fail(e, SN_ERR_IO, "cannot read %s%s: it is %s, not a regular file: give a file "
                "(a pipe or device cannot be read whole); %s", what, path, file_kind(st.st_mode), hint);
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        sn_fail(e, SN_ERR_IO, "cannot read %s%s: %s", what, path, strerror(errno));
        close(fd);
    }
    return f;
}

/* Appends the whole file at path to *buf (length *len, capacity *cap), keeping a NUL after it. */
static sn_status append_file(const char *path, char **buf, size_t *len, size_t *cap,
                             const char *hint, sn_err *e) {
    FILE *f = sn_file_open(path, "", hint, e);
    if (!f) return e->code;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return sn_fail(e, SN_ERR_IO, "cannot read %s: %s: %s", path, strerror(errno), hint);
    }
    size_t size = (size_t)st.st_size;
    if (*len + size + 2 > *cap) {
        size_t nc = (*len + size + 2) * 3 / 2;
        char *nb = realloc(*buf, nc);
        if (!nb) {
            fclose(f);
            return sn_fail(e, SN_ERR_OOM, "out of memory reading %s (%zu bytes)", path, size);
        }
        *buf = nb;
        *cap = nc;
    }
    size_t got = fread(*buf + *len, 1, size, f);
    int err = ferror(f);
    fclose(f);
    if (err || got != size)
        return sn_fail(e, SN_ERR_IO, "cannot read %s: read %zu of %zu bytes: %s", path, got, size,
                       hint);
    *len += got;
    (*buf)[*len] = 0;
    return SN_OK;
}

sn_status sn_file_read(const char *path, const char *hint, char **bytes, size_t *len, sn_err *e) {
    size_t cap = 0;
    *bytes = NULL;
    *len = 0;
    sn_status st = append_file(path, bytes, len, &cap, hint, e);
    if (st) {
        free(*bytes);
        *bytes = NULL;
        *len = 0;
    }
    return st;
}

static bool corpus_name_ok(const char *name) {
    size_t n = strlen(name);
    if (name[0] == '.') return false;
    if (n >= 4 && strcmp(name + n - 4, ".dat") == 0) return false;
    if (n >= 3 && strcmp(name + n - 3, ".u8") == 0) return false;
    return true;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static sn_status load_dir(const char *path, sn_text *out, size_t *cap, sn_err *e) {
    DIR *d = opendir(path);
    if (!d) return sn_fail(e, SN_ERR_IO, "cannot read corpus %s: %s: " CORPUS_HINT, path,
                           strerror(errno));
    char **names = NULL;
    size_t n = 0, ncap = 0;
    sn_status st = SN_OK;
    for (struct dirent *de; (de = readdir(d));) {
        if (!corpus_name_ok(de->d_name)) continue;
        if (n == ncap) {
            ncap = ncap ? 2 * ncap : 64;
            char **nn = realloc(names, ncap * sizeof *names);
            if (!nn) { st = sn_fail(e, SN_ERR_OOM, "out of memory listing %s", path); break; }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) {
            st = sn_fail(e, SN_ERR_OOM, "out of memory listing %s", path);
            break;
        }
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n && st == SN_OK; i++) {
        char file[PATH_MAX];
        struct stat sb;
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        if (stat(file, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (out->len && out->bytes[out->len - 1] != '\n') {
            /* room for the NUL and this newline is kept by append_file */
            out->bytes[out->len++] = '\n';
            out->bytes[out->len] = 0;
        }
        st = append_file(file, &out->bytes, &out->len, cap, CORPUS_HINT, e);
        if (st == SN_OK) out->n_files++;
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

sn_status sn_text_load(const char *path, sn_text *out, sn_err *e) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sn_fail(e, SN_ERR_IO, "cannot read corpus %s: %s: " CORPUS_HINT, path,
                       strerror(errno));
    size_t cap = 0;
    sn_status st;
    if (S_ISDIR(sb.st_mode)) {
        st = load_dir(path, out, &cap, e);
    } else {
        st = append_file(path, &out->bytes, &out->len, &cap, CORPUS_HINT, e);
        if (st == SN_OK) out->n_files = 1;
    }
    if (st == SN_OK && out->len == 0)
        st = sn_fail(e, SN_ERR_IO, "corpus %s is empty (%s): " CORPUS_HINT, path,
                     S_ISDIR(sb.st_mode) ? "no readable text files in the directory; .dat, .u8 "
                                           "and hidden files are skipped"
                                         : "0 bytes");
    if (st != SN_OK) sn_text_free(out);
    return st;
}

void sn_text_free(sn_text *t) {
    free(t->bytes);
    memset(t, 0, sizeof *t);
}

/* ---- token streams --------------------------------------------------------------------- */

sn_status sn_tokens_push(sn_tokens *t, int32_t id, sn_err *e) {
    SN_ASSERT(id >= 0);
    SN_ASSERT(t->cap || !t->ids); /* a view cannot grow */
    if (t->width == 0) t->width = 2;
    if (t->width == 2 && id > 65535) { /* widen to int32 */
        size_t cap = t->cap ? t->cap : 1024;
        int32_t *w = malloc(cap * sizeof *w);
        if (!w) return sn_fail(e, SN_ERR_OOM, "out of memory for %zu token ids", cap);
        for (size_t i = 0; i < t->n; i++) w[i] = ((uint16_t *)t->ids)[i];
        free(t->ids);
        t->ids = w;
        t->cap = cap;
        t->width = 4;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        void *p = realloc(t->ids, cap * (size_t)t->width);
        if (!p) return sn_fail(e, SN_ERR_OOM, "out of memory for %zu token ids", cap);
        t->ids = p;
        t->cap = cap;
    }
    if (t->width == 4)
        ((int32_t *)t->ids)[t->n++] = id;
    else
        ((uint16_t *)t->ids)[t->n++] = (uint16_t)id;
    return SN_OK;
}

void sn_tokens_free(sn_tokens *t) {
    if (t->cap) free(t->ids);
    memset(t, 0, sizeof *t);
}

static sn_tokens tokens_view(const sn_tokens *t, size_t start, size_t n) {
    int w = t->width ? t->width : 2;
    sn_tokens v = {.width = w, .n = n, .cap = 0, .ids = NULL};
    if (t->ids) v.ids = (char *)t->ids + start * (size_t)w;
    return v;
}

sn_status sn_tokens_split(const sn_tokens *t, double val_frac, sn_tokens *train, sn_tokens *val,
                          sn_err *e) {
    if (!(val_frac >= 0 && val_frac < 1))
        return sn_fail(e, SN_ERR_INVALID,
                       "validation fraction %g is not in [0, 1): pass a value such as 0.1",
                       val_frac);
    size_t n_val = (size_t)((double)t->n * val_frac);
    *train = tokens_view(t, 0, t->n - n_val);
    *val = tokens_view(t, t->n - n_val, n_val);
    return SN_OK;
}

int32_t sn_tokens_max(const sn_tokens *t) {
    int32_t m = -1;
    for (size_t i = 0; i < t->n; i++) {
        int32_t v = sn_tokens_get(t, i);
        if (v > m) m = v;
    }
    return m;
}

/* ---- batches --------------------------------------------------------------------------- */

static void fill_row(const sn_tokens *t, size_t start, int T, int32_t *in, int32_t *tg) {
    for (int i = 0; i < T; i++) {
        in[i] = sn_tokens_get(t, start + (size_t)i);
        tg[i] = sn_tokens_get(t, start + (size_t)i + 1);
    }
}

sn_status sn_batch_sample(const sn_tokens *t, int B, int T, sn_rng *rng, int32_t *inputs,
                          int32_t *targets, sn_err *e) {
    if (B <= 0 || T <= 0)
        return sn_fail(e, SN_ERR_INVALID, "batch size B=%d and sequence length T=%d must be "
                       "positive", B, T);
    if (t->n < (size_t)T + 1)
        return sn_fail(e, SN_ERR_INVALID, "too little data: %zu tokens, but one window needs "
                       "T+1 = %d: use a larger corpus or a shorter sequence length T", t->n,
                       T + 1);
    for (int b = 0; b < B; b++) {
        size_t start = (size_t)sn_rng_below(rng, t->n - (size_t)T);
        fill_row(t, start, T, inputs + (size_t)b * T, targets + (size_t)b * T);
    }
    return SN_OK;
}

sn_status sn_batch_next(const sn_tokens *t, int B, int T, uint64_t *pos, int32_t *inputs,
                        int32_t *targets, sn_err *e) {
    if (B <= 0 || T <= 0)
        return sn_fail(e, SN_ERR_INVALID, "batch size B=%d and sequence length T=%d must be "
                       "positive", B, T);
    size_t need = (size_t)B * (size_t)T + 1;
    if (t->n < need)
        return sn_fail(e, SN_ERR_INVALID, "too little data to read in order: %zu tokens, but a "
                       "batch needs B*T+1 = %zu: use a larger corpus, a smaller batch or the "
                       "random order", t->n, need);
    if (*pos > t->n - need) *pos = 0; /* the epoch's end */
    for (int b = 0; b < B; b++)
        fill_row(t, (size_t)*pos + (size_t)b * (size_t)T, T, inputs + (size_t)b * T, targets + (size_t)b * T);
    *pos += (uint64_t)B * (uint64_t)T;
    return SN_OK;
}

sn_status sn_val_iter_init(sn_val_iter *it, const sn_tokens *t, int B, int T, sn_err *e) {
    memset(it, 0, sizeof *it);
    if (B <= 0 || T <= 0)
        return sn_fail(e, SN_ERR_INVALID, "batch size B=%d and sequence length T=%d must be "
                       "positive", B, T);
    size_t windows = t->n ? (t->n - 1) / (size_t)T : 0;
    if (windows < (size_t)B)
        return sn_fail(e, SN_ERR_INVALID, "too little validation data: %zu tokens, but one "
                       "batch of B=%d windows of T=%d needs %lld: use a larger corpus, a larger "
                       "validation fraction, or smaller B or T", t->n, B, T,
                       (long long)B * T + 1);
    *it = (sn_val_iter){.t = t, .B = B, .T = T, .n_batches = (int64_t)(windows / (size_t)B)};
    return SN_OK;
}

bool sn_val_iter_next(sn_val_iter *it, int32_t *inputs, int32_t *targets) {
    if (it->next >= it->n_batches) return false;
    for (int b = 0; b < it->B; b++) {
        size_t w = (size_t)it->next * (size_t)it->B + (size_t)b;
        fill_row(it->t, w * (size_t)it->T, it->T, inputs + (size_t)b * it->T,
                 targets + (size_t)b * it->T);
    }
    it->next++;
    return true;
}

/* ---- tokenizers ------------------------------------------------------------------------ */

typedef struct {
    sn_tokenizer tk;
    char bytes[256]; /* bytes[i] == i: what decode points into */
} byte_tokenizer;

static sn_status bytes_encode(sn_tokenizer *tk, const char *text, size_t len, sn_tokens *out,
                              sn_err *e) {
    for (size_t i = 0; i < len; i++) {
        sn_status st = sn_tokens_push(out, (unsigned char)text[i], e);
        if (st) return st;
    }
    return SN_OK;
}

static const char *bytes_decode(const sn_tokenizer *tk, int id, size_t *len) {
    if (id < 0 || id > 255) return NULL;
    *len = 1;
    return &((const byte_tokenizer *)tk)->bytes[id];
}

static void bytes_destroy(sn_tokenizer *tk) { free(tk); }

sn_tokenizer *sn_tokenizer_bytes_new(void) {
    byte_tokenizer *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    for (int i = 0; i < 256; i++) b->bytes[i] = (char)i;
    b->tk = (sn_tokenizer){.name = "bytes", .vocab = 256, .eot = -1, .bos = -1, .encode = bytes_encode,
                           .decode = bytes_decode, .destroy = bytes_destroy, .impl = b};
    return &b->tk;
}

void sn_tokenizer_free(sn_tokenizer *tk) {
    if (tk) tk->destroy(tk);
}

sn_status sn_tokenizer_decode_all(const sn_tokenizer *tk, const sn_tokens *t, size_t start,
                                  size_t n, char **text, size_t *len, sn_err *e) {
    SN_ASSERT(start + n <= t->n);
    for (size_t i = 0; i < n && tk->decode_text; i++) {
        int id = sn_tokens_get(t, start + i);
        size_t k;
        if (!sn_tokenizer_decode(tk, id, &k))
            return sn_fail(e, SN_ERR_INVALID, "token %zu has id %d, not in the %s tokenizer's "
                           "vocabulary of %d: were these ids made by another tokenizer?",
                           start + i, id, tk->name, tk->vocab);
    }
    if (tk->decode_text) {
        size_t used;
        sn_status st = tk->decode_text(tk, t, start, n, text, &used, e);
        if (!st && len) *len = used;
        return st;
    }
    size_t cap = n * 2 + 16, used = 0;
    char *buf = malloc(cap);
    if (!buf) return sn_fail(e, SN_ERR_OOM, "out of memory decoding %zu tokens", n);
    for (size_t i = 0; i < n; i++) {
        int id = sn_tokens_get(t, start + i);
        size_t k;
        const char *s = sn_tokenizer_decode(tk, id, &k);
        if (!s) {
            free(buf);
            return sn_fail(e, SN_ERR_INVALID, "token %zu has id %d, not in the %s tokenizer's "
                           "vocabulary of %d: were these ids made by another tokenizer?",
                           start + i, id, tk->name, tk->vocab);
        }
        if (used + k + 1 > cap) {
            cap = (used + k + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return sn_fail(e, SN_ERR_OOM, "out of memory decoding %zu tokens", n);
            }
            buf = nb;
        }
        memcpy(buf + used, s, k);
        used += k;
    }
    buf[used] = 0;
    *text = buf;
    if (len) *len = used;
    return SN_OK;
}
