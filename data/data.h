/* data.h: training data for the GPT trainer: text corpora, tokenizers (bytes and GPT-2 BPE),
 * llm.c .bin token shards, token streams split into train/validation, and batch sampling.
 * Convention: objects come in _load/_new and _free pairs; a failure the user can cause returns
 * an sn_status with a message in sn_err that names the file and what to do.
 *
 *     sn_text text; sn_tokens toks = {0}, train, val; sn_err e;
 *     if (sn_text_load(SN_DEFAULT_CORPUS, &text, &e)) { puts(e.msg); return 1; }
 *     sn_tokenizer *tk = sn_tokenizer_bytes_new();
 *     sn_tokenizer_encode(tk, text.bytes, text.len, &toks, &e);
 *     sn_tokens_split(&toks, 0.1, &train, &val, &e);
 *     sn_rng rng = sn_rng_seed(1);
 *     sn_batch_sample(&train, B, T, &rng, inputs, targets, &e);   // inputs, targets: (B, T)
 */
#ifndef SN_DATA_H
#define SN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "support/rng.h"

/* Debian's fortunes: the corpus used when none is given. */
#define SN_DEFAULT_CORPUS "/usr/share/games/fortunes"

/* ---- corpus (data.c) ------------------------------------------------------------------- */

typedef struct {
    char *bytes;  /* len bytes, NUL-terminated for convenience */
    size_t len;
    int n_files;  /* files read */
} sn_text;

/* Reads a file, or a directory's regular files concatenated in name order (hidden files and
 * names ending in .dat or .u8 are skipped; a newline is put between two files when the first
 * does not end in one). Missing, unreadable or empty input is SN_ERR_IO. */
sn_status sn_text_load(const char *path, sn_text *out, sn_err *e);
void sn_text_free(sn_text *t);
/* Reads one whole file into a malloc'd, NUL-terminated buffer; SN_ERR_IO names the path, the
 * system's reason and then hint (what the user should do). */
sn_status sn_file_read(const char *path, const char *hint, char **bytes, size_t *len, sn_err *e);
/* Opens path for reading only when it is a regular file; NULL with SN_ERR_IO in e, naming what
 * (e.g. "shard "), path, the reason (a FIFO, a directory ...) and hint. */
FILE *sn_file_open(const char *path, const char *what, const char *hint, sn_err *e);

/* ---- token streams (data.c) ------------------------------------------------------------ */

/* A stream of token ids, stored as uint16 (width 2) while every id fits, as int32 (width 4)
 * otherwise. A zeroed sn_tokens is an empty, owning, width-2 stream. */
typedef struct {
    int width;   /* bytes per id: 2 (uint16_t) or 4 (int32_t); 0 is read as 2 */
    size_t n;    /* ids in the stream */
    size_t cap;  /* ids allocated; 0 for a view into another stream, which is not freed */
    void *ids;   /* (n,) uint16_t or int32_t */
} sn_tokens;

static inline int32_t sn_tokens_get(const sn_tokens *t, size_t i) {
    return t->width == 4 ? ((const int32_t *)t->ids)[i] : ((const uint16_t *)t->ids)[i];
}
/* Appends one id (>= 0), widening the stream to int32 when id > 65535. */
sn_status sn_tokens_push(sn_tokens *t, int32_t id, sn_err *e);
void sn_tokens_free(sn_tokens *t);
/* Views of the first (1 - val_frac) and the last val_frac of t; t keeps the ids.
 * val_frac in [0, 1). */
sn_status sn_tokens_split(const sn_tokens *t, double val_frac, sn_tokens *train, sn_tokens *val,
                          sn_err *e);
/* The largest id in t, or -1 when t is empty. */
int32_t sn_tokens_max(const sn_tokens *t);

/* ---- llm.c token shards (shard.c) ------------------------------------------------------- */

/* A header of 256 int32 (magic, version, token count, zeros) then count uint16 ids. */
#define SN_SHARD_MAGIC 20240520
#define SN_SHARD_VERSION 1
#define SN_SHARD_HEADER_BYTES 1024

/* Every id of t must be < 65536. The file is replaced whole or not at all (savefile.h). */
sn_status sn_shard_write(const char *path, const sn_tokens *t, sn_err *e);
/* Writes the shard's bytes to f, an open file (e.g. a savefile's); path names it in messages. */
sn_status sn_shard_put(FILE *f, const char *path, const sn_tokens *t, sn_err *e);
/* Reads a shard into out (width 2), checking the magic, the version, that the file holds
 * exactly the count of ids the header says, and, when vocab > 0, that every id < vocab. */
sn_status sn_shard_read(const char *path, int vocab, sn_tokens *out, sn_err *e);
/* Reads the shards path names into out (width 2), concatenated in order, each checked as
 * sn_shard_read checks one; *n_shards: how many. path is one file when it exists or holds none
 * of glob(3)'s * ? [; else a pattern, and every file it matches is read, in strcmp order of the
 * names (data/train_000001.bin before data/train_000002.bin). A pattern that matches nothing is
 * SN_ERR_IO naming it; a match that is not a shard (a directory, another file) fails as
 * sn_shard_read does, naming the file and the pattern. The whole stream is held in memory (two
 * bytes a token; mapping the files instead is a later step). */
sn_status sn_shards_read(const char *path, int vocab, sn_tokens *out, int *n_shards, sn_err *e);

/* ---- batches (data.c) ------------------------------------------------------------------ */

/* Fills B rows from windows of T+1 tokens at random starts drawn from rng:
 * inputs[b][i] = t[s_b + i] and targets[b][i] = t[s_b + i + 1]. inputs, targets: (B, T).
 * Fewer than T+1 tokens is SN_ERR_INVALID. */
sn_status sn_batch_sample(const sn_tokens *t, int B, int T, sn_rng *rng, int32_t *inputs,
                          int32_t *targets, sn_err *e);
/* The next B rows of the token stream read in order, as llm.c's loader reads its shards: row b
 * is the window of T+1 tokens at *pos + b T (inputs[b][i] = t[*pos + b T + i], targets one
 * later), then *pos += B T; when fewer than B T + 1 tokens are left at *pos the stream starts
 * again at 0 (the rest is skipped: an epoch ends). Fewer than B T + 1 tokens in all is
 * SN_ERR_INVALID. */
sn_status sn_batch_next(const sn_tokens *t, int B, int T, uint64_t *pos, int32_t *inputs,
                        int32_t *targets, sn_err *e);

/* Validation in order over non-overlapping windows: window w holds t[w*T, w*T + T] (targets
 * read one past the inputs), B windows a batch; a last partial batch is left out. */
typedef struct {
    const sn_tokens *t;
    int B, T;
    int64_t n_batches;  /* full batches in t */
    int64_t next;       /* the batch the next call fills */
} sn_val_iter;

/* Fails (SN_ERR_INVALID) when t holds fewer than B*T + 1 tokens. */
sn_status sn_val_iter_init(sn_val_iter *it, const sn_tokens *t, int B, int T, sn_err *e);
/* Fills inputs and targets (B, T) with the next batch; false once every batch was given. */
bool sn_val_iter_next(sn_val_iter *it, int32_t *inputs, int32_t *targets);
static inline void sn_val_iter_reset(sn_val_iter *it) { it->next = 0; }

/* ---- tokenizers (data.c: bytes; bpe*.c: BPE) ------------------------------------------- */

typedef struct sn_tokenizer sn_tokenizer;
struct sn_tokenizer {
    const char *name;  /* "bytes" | "gpt2" | "hf" */
    int vocab;         /* ids are in [0, vocab) */
    int eot;           /* the <|endoftext|> id, or -1 when the tokenizer has none */
    int bos;           /* the id a tokenizer.json's post-processor puts before each text (<s>,
                          <|begin_of_text|>), or -1: generate puts it before each prompt */
    uint64_t source_hash; /* the file it was read from (a tokenizer.json), FNV-1a of its bytes;
                             0: built in (bytes, GPT-2's) */
    /* Appends the ids of text[0, len) to out. May update caches inside tk: one thread at a time. */
    sn_status (*encode)(sn_tokenizer *tk, const char *text, size_t len, sn_tokens *out, sn_err *e);
    /* The bytes of one id (not NUL-terminated), their count in *len; NULL for an unknown id. */
    const char *(*decode)(const sn_tokenizer *tk, int id, size_t *len);
    /* NULL, or the text of ids t[start, start+n) (all known) when it is not their bytes one
     * after another (SentencePiece's: the leading space dropped, a broken UTF-8 byte as U+FFFD):
     * sn_tokenizer_decode_all's. */
    sn_status (*decode_text)(const sn_tokenizer *tk, const sn_tokens *t, size_t start,
                             size_t n, char **text, size_t *len, sn_err *e);
    bool lossy; /* decode(encode(text)) may differ from text (SentencePiece's spaces, unk) */
    void (*destroy)(sn_tokenizer *tk);
    void *impl;
};

/* Byte-level: vocab 256, id = byte. NULL only when out of memory (a few hundred bytes). */
sn_tokenizer *sn_tokenizer_bytes_new(void);
/* GPT-2 byte-level BPE from its encoder.json (token -> id) and vocab.bpe (merges by rank).
 * The text "<|endoftext|>" encodes to the special id (50256). */
sn_status sn_tokenizer_gpt2_load(const char *encoder_json, const char *vocab_bpe,
                                 sn_tokenizer **out, sn_err *e);
/* A Hugging Face tokenizer.json of a BPE model, byte-level (GPT-2, SmolLM, Llama 3) or
 * SentencePiece's byte-fallback kind (TinyLlama, Llama 2; bpe_hf.c says what else is refused);
 * its added tokens encode from their text. eot: <|endoftext|>, <|end_of_text|> or </s>. */
sn_status sn_tokenizer_hf_load(const char *tokenizer_json, sn_tokenizer **out, sn_err *e);
void sn_tokenizer_free(sn_tokenizer *tk);

static inline sn_status sn_tokenizer_encode(sn_tokenizer *tk, const char *text, size_t len,
                                            sn_tokens *out, sn_err *e) {
    return tk->encode(tk, text, len, out, e);
}
static inline const char *sn_tokenizer_decode(const sn_tokenizer *tk, int id, size_t *len) {
    return tk->decode(tk, id, len);
}
/* Decodes t[start, start+n) into a malloc'd, NUL-terminated string (caller frees); an unknown
 * id is SN_ERR_INVALID. */
sn_status sn_tokenizer_decode_all(const sn_tokenizer *tk, const sn_tokens *t, size_t start,
                                  size_t n, char **text, size_t *len, sn_err *e);

#endif
