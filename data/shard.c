/* shard.c: llm.c token shards (data.h): one written whole or read and checked, and the shards a
 * glob(3) pattern names read in name order into one stream.
 * Convention: every message names the shard's file, and the pattern when a pattern found it. */
#include "data.h"

#include "support/savefile.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SHARD_HINT "check the path, or make it with `sinter prepare`"

/* ---- writing ----------------------------------------------------------------------------- */

sn_status sn_shard_put(FILE *f, const char *path, const sn_tokens *t, sn_err *e) {
    if (t->n > INT32_MAX)
        return sn_fail(e, SN_ERR_INVALID, "%s: %zu tokens do not fit one shard (at most %d): "
                       "split the data into several shards", path, t->n, INT32_MAX);
    int32_t top = sn_tokens_max(t);
    if (top > 65535)
        return sn_fail(e, SN_ERR_INVALID, "%s: token id %d does not fit a shard's uint16 ids: "
                       "use a tokenizer with at most 65536 ids", path, top);
    int32_t header[256] = {SN_SHARD_MAGIC, SN_SHARD_VERSION, (int32_t)t->n};
    bool ok = fwrite(header, sizeof header, 1, f) == 1;
    uint16_t chunk[4096];
    for (size_t i = 0; ok && i < t->n; i += 4096) {
        size_t k = t->n - i < 4096 ? t->n - i : 4096;
        for (size_t j = 0; j < k; j++) chunk[j] = (uint16_t)sn_tokens_get(t, i + j);
        ok = fwrite(chunk, sizeof *chunk, k, f) == k;
    }
    if (!ok) return sn_fail(e, SN_ERR_IO, "cannot write shard %s: %s: check free disk space",
                            path, strerror(errno));
    return SN_OK;
}

sn_status sn_shard_write(const char *path, const sn_tokens *t, sn_err *e) {
    sn_savefile f;
    sn_status s = sn_savefile_open(&f, path, "shard", e);
    if (s) return s;
    if ((s = sn_shard_put(f.f, path, t, e))) {
        sn_savefile_abort(&f);
        return s;
    }
    return sn_savefile_commit(&f, e);
}

/* ---- reading ----------------------------------------------------------------------------- */

/* Opens the shard at path and checks its header and size; *n: its token count. The version
 * fixes the width of its ids (1: uint16). NULL with a message (hint: what the user should do
 * when the file cannot be opened). */
static FILE *shard_open(const char *path, const char *hint, size_t *n, sn_err *e) {
    FILE *f = sn_file_open(path, "shard ", hint, e);
    if (!f) return NULL;
    struct stat sb;
    int32_t h[256];
    sn_status st = SN_OK;
    long long size = fstat(fileno(f), &sb) == 0 ? (long long)sb.st_size : -1;
    if (size < SN_SHARD_HEADER_BYTES || fread(h, sizeof h, 1, f) != 1) {
        st = sn_fail(e, SN_ERR_PARSE, "%s: header: expected %d bytes, found %lld: not an llm.c "
                     "token shard", path, SN_SHARD_HEADER_BYTES, size);
    } else if (h[0] != SN_SHARD_MAGIC) {
        st = sn_fail(e, SN_ERR_PARSE, "%s: bad magic: expected %d, found %d: not an llm.c token "
                     "shard (make one with `sinter prepare`)", path, SN_SHARD_MAGIC, h[0]);
    } else if (h[1] != SN_SHARD_VERSION) {
        st = sn_fail(e, SN_ERR_PARSE, "%s: unsupported version: expected %d, found %d: "
                     "regenerate the shard with `sinter prepare`", path, SN_SHARD_VERSION, h[1]);
    } else if (h[2] < 0 || size != SN_SHARD_HEADER_BYTES + 2LL * h[2]) {
        st = sn_fail(e, SN_ERR_PARSE, "%s: file size: expected %lld bytes (%d-byte header + 2 x "
                     "%d tokens), found %lld: the file is truncated or corrupt; regenerate it",
                     path, SN_SHARD_HEADER_BYTES + 2LL * h[2], SN_SHARD_HEADER_BYTES, h[2], size);
    }
    if (st) {
        fclose(f);
        return NULL;
    }
    *n = (size_t)h[2];
    return f;
}

/* Reads the n ids after f's header into ids, each checked < vocab when vocab > 0; closes f. */
static sn_status shard_fill(FILE *f, const char *path, size_t n, int vocab, uint16_t *ids,
                            sn_err *e) {
    sn_status st = SN_OK;
    if (fread(ids, 2, n, f) != n)
        st = sn_fail(e, SN_ERR_IO, "cannot read shard %s: %s", path,
                     ferror(f) ? strerror(errno) : "it became shorter while read");
    fclose(f);
    for (size_t i = 0; st == SN_OK && vocab > 0 && i < n; i++)
        if (ids[i] >= vocab)
            st = sn_fail(e, SN_ERR_PARSE, "%s: token %zu: expected an id < vocab %d, found %u: "
                         "the shard was made with another tokenizer", path, i, vocab, ids[i]);
    return st;
}

/* An empty stream of width 2 with room for n ids (at least one byte allocated). */
static sn_status tokens_alloc(sn_tokens *out, size_t n, const char *what, sn_err *e) {
    *out = (sn_tokens){.width = 2, .ids = malloc(n ? n * 2 : 1), .cap = n ? n : 1};
    if (!out->ids) {
        *out = (sn_tokens){0};
        return sn_fail(e, SN_ERR_OOM, "%s: out of memory for %zu tokens (%zu bytes)", what, n, 2 * n);
    }
    return SN_OK;
}

sn_status sn_shard_read(const char *path, int vocab, sn_tokens *out, sn_err *e) {
    memset(out, 0, sizeof *out);
    size_t n;
    FILE *f = shard_open(path, SHARD_HINT, &n, e);
    if (!f) return e->code;
    sn_status st = tokens_alloc(out, n, path, e);
    if (st) {
        fclose(f);
        return st;
    }
    if ((st = shard_fill(f, path, n, vocab, out->ids, e))) sn_tokens_free(out);
    else out->n = n;
    return st;
}

/* glob's question on a folder it cannot read: a missing one is no match, others stop it. */
static int glob_error(const char *path, int err) {
    (void)path;
    return err != ENOENT && err != ENOTDIR;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the shards in names[0, count) into out: their headers first, for the total, then each
 * into its place, so the ids are allocated once. */
static sn_status read_all(char **names, size_t count, const char *pattern, int vocab,
                          sn_tokens *out, sn_err *e) {
    char hint[256];
    snprintf(hint, sizeof hint, "it matched the shard pattern %.160s: make the pattern match "
             "shards only", pattern);
    size_t total = 0, n, at = 0;
    sn_status st = SN_OK;
    for (size_t i = 0; i < count && !st; i++) {
        FILE *f = shard_open(names[i], hint, &n, e);
        if (!f) return e->code;
        fclose(f);
        total += n;
    }
    if ((st = tokens_alloc(out, total, pattern, e))) return st;
    for (size_t i = 0; i < count && !st; i++) {
        FILE *f = shard_open(names[i], hint, &n, e);
        if (!f) st = e->code;
        else if (at + n > total) {
            fclose(f);
            st = sn_fail(e, SN_ERR_IO, "shard %s grew while the shards of %s were read: read "
                         "them again when nothing writes them", names[i], pattern);
        } else if (!(st = shard_fill(f, names[i], n, vocab, (uint16_t *)out->ids + at, e))) {
            at += n;
        }
    }
    if (!st && at != total)
        st = sn_fail(e, SN_ERR_IO, "the shards of %s shrank while read (%zu tokens, then %zu): "
                     "read them again when nothing writes them", pattern, total, at);
    if (st) sn_tokens_free(out);
    else out->n = total;
    return st;
}

sn_status sn_shards_read(const char *path, int vocab, sn_tokens *out, int *n_shards, sn_err *e) {
    memset(out, 0, sizeof *out);
    *n_shards = 0;
    struct stat sb;
    if (!strpbrk(path, "*?[") || stat(path, &sb) == 0) { /* a plain path */
        sn_status st = sn_shard_read(path, vocab, out, e);
        if (!st) *n_shards = 1;
        return st;
    }
    glob_t g;
    int rc = glob(path, GLOB_NOSORT, glob_error, &g);
    if (rc == GLOB_NOMATCH)
        return sn_fail(e, SN_ERR_IO, "no file matches the shard pattern %s: check its folder and "
                       "pattern (quoted, so that the shell passes it whole), or make shards with "
                       "`sinter prepare`", path);
    if (rc == GLOB_NOSPACE) return sn_fail(e, SN_ERR_OOM, "out of memory matching the shard pattern %s", path);
    if (rc != 0)
        return sn_fail(e, SN_ERR_IO, "cannot list the folder of the shard pattern %s: %s: check "
                       "that it exists and can be read", path, strerror(errno));
    if (g.gl_pathc > INT_MAX) {
        globfree(&g);
        return sn_fail(e, SN_ERR_INVALID, "the shard pattern %s matches %zu files, more than %d: "
                       "merge shards", path, (size_t)g.gl_pathc, INT_MAX);
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_names); /* bytes, not the locale's order */
    sn_status st = read_all(g.gl_pathv, g.gl_pathc, path, vocab, out, e);
    if (!st) *n_shards = (int)g.gl_pathc;
    globfree(&g);
    return st;
}
