/* bpe_int.h: the BPE engine (bpe.c) that the tokenizer file readers fill: GPT-2's
 * encoder.json + vocab.bpe (bpe_gpt2.c) and Hugging Face's tokenizer.json (bpe_hf.c), byte-level
 * or SentencePiece's byte-fallback kind (sn_bpe_set_sp).
 * Convention: tokens are raw bytes inside (the files' unicode spelling undone by the reader;
 * a byte-fallback model's tokens as the file spells them, "\u2581" for a space);
 * merges are pairs of ids (a, b) -> (rank, merged id); special tokens are matched verbatim in
 * the text before it is split into words. Not installed: data.h is the interface. */
#ifndef SN_BPE_INT_H
#define SN_BPE_INT_H

#include "data.h"

/* How text is split into the words BPE merges within (each a regex of the model's files,
 * written by hand: bpe.c) */
typedef enum {
    SN_PRETOK_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    SN_PRETOK_DIGITS, /* every digit a word of its own, GPT-2's pattern between them (SmolLM) */
    SN_PRETOK_LLAMA3, /* Llama 3's: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
                         \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
} sn_pretok;

typedef struct sn_bpe sn_bpe;

/* A tokenizer named name (kept, not copied) with no tokens yet; NULL when out of memory. Its
 * sn_tokenizer is &bpe->tk (sn_bpe_tokenizer); sn_tokenizer_free frees it. */
sn_bpe *sn_bpe_new(const char *name, sn_pretok pretok, sn_err *e);
sn_tokenizer *sn_bpe_tokenizer(sn_bpe *g);
/* A whole word that is a token is that token, without merges (Llama 3's ignore_merges). */
void sn_bpe_set_ignore_merges(sn_bpe *g, bool on);
void sn_bpe_set_pretok(sn_bpe *g, sn_pretok pretok);

/* SentencePiece's BPE as Hugging Face converts it (TinyLlama's, Llama 2's tokenizer.json):
 * spaces are "\u2581" (U+2581, "SP" below), a word's merges start from its characters, a
 * character outside the vocabulary is its UTF-8 bytes as the tokens <0x00>..<0xFF> (byte
 * fallback) or else unk. Where SP goes before each piece of text (a piece: what lies between
 * special tokens): */
typedef enum {
    SN_SP_PREPEND_NEVER,   /* Metaspace prepend_scheme "never"; a normalizer of Replace alone */
    SN_SP_PREPEND_EACH,    /* the normalizer Prepend(SP): before each nonempty piece */
    SN_SP_PREPEND_MISSING, /* Metaspace "always": before each piece not starting with SP */
    SN_SP_PREPEND_FIRST,   /* Metaspace "first": the same, for a piece at the text's start only */
} sn_sp_prepend;

typedef struct {
    sn_sp_prepend prepend;
    bool split;          /* Metaspace split: each SP starts a word; else a piece is one word */
    bool byte_fallback;  /* model.byte_fallback */
    int32_t unk;         /* model.unk_token's id; -1: characters that have no token are dropped */
    bool fuse_unk;       /* consecutive unknown characters are one unk */
    /* the decoder: SP decodes to a space (Replace); <0xXX> to its byte (ByteFallback), a run of
     * them that is not UTF-8 to one U+FFFD a byte; then up to strip_start leading and
     * strip_stop trailing spaces of the whole text dropped (Fuse, Strip) */
    bool dec_replace, dec_bytes;
    int strip_start, strip_stop;
    bool dec_first_sp; /* Metaspace's decoder (prepend_scheme not never): every SP of the first
                          token dropped, not decoded to a space */
} sn_bpe_sp;

/* Makes g a byte-fallback tokenizer (before its first sn_bpe_add_token). */
void sn_bpe_set_sp(sn_bpe *g, const sn_bpe_sp *sp);
bool sn_bpe_is_sp(const sn_bpe *g);

/* Token id spelled as the bytes s[0, n) (n > 0). */
sn_status sn_bpe_add_token(sn_bpe *g, int32_t id, const char *s, size_t n, sn_err *e);
/* The same from the files' unicode spelling s[0, n) (sn_bpe_unicode_maps); *spelled false (and
 * nothing added) when s is not one. */
sn_status sn_bpe_add_spelled(sn_bpe *g, int32_t id, const char *s, size_t n, bool *spelled, sn_err *e);
/* After the last sn_bpe_add_token: the ids must be 0 .. n-1, each once, each spelling once,
 * and (byte-level) every byte a token of its own; errors name `file` and end with `hint`. */
sn_status sn_bpe_index(sn_bpe *g, const char *file, const char *hint, sn_err *e);
/* The id spelled s[0, n), or -1 (after sn_bpe_index). */
int32_t sn_bpe_find(const sn_bpe *g, const char *s, size_t n);
/* Room for n merges; then each merge (a, b) -> merged of rank `rank` (a pair given twice keeps
 * its first rank). */
sn_status sn_bpe_merges_reserve(sn_bpe *g, size_t n, sn_err *e);
void sn_bpe_add_merge(sn_bpe *g, int32_t a, int32_t b, int32_t merged, int32_t rank);
/* Token id (added by sn_bpe_add_token) is special: its bytes in the text encode to it alone. */
sn_status sn_bpe_add_special(sn_bpe *g, int32_t id, sn_err *e);
/* Ready to encode: the word cache. */
sn_status sn_bpe_finish(sn_bpe *g, sn_err *e);

/* GPT-2's bytes_to_unicode (the files' spelling): printable bytes stand for themselves, the
 * other 68 for 256 + n. */
void sn_bpe_unicode_maps(uint32_t b2u[256], int16_t u2b[324]);
/* Converts the unicode spelling s[0, n) to raw bytes in out (at most n); false if it is not
 * one. */
bool sn_bpe_unspell(const int16_t u2b[324], const char *s, size_t n, char *out, size_t *len);

#endif
