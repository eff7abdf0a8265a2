/* bpe_engine.h: what the BPE engine's two files share (bpe.c: the tables, the pre-tokenizers,
 * encoding and decoding; bpe_sp.c: SentencePiece's byte-fallback kind): the engine's state and
 * the helpers both use. The readers of model files see bpe_int.h alone. */
#ifndef SN_BPE_ENGINE_H
#define SN_BPE_ENGINE_H

#include "bpe_int.h"

#define CACHE_MAX_WORDS (1u << 20) /* the word cache is emptied when it grows past this */
#define CACHE_MAX_LEN 1024         /* longer words are not kept (a byte-fallback text is one) */
#define SP "\xe2\x96\x81"          /* U+2581, SentencePiece's space */

typedef struct {
    uint32_t off, len; /* bytes in the pool */
} span;

typedef struct {
    uint64_t key; /* (a << 32) | b; UINT64_MAX when empty */
    int32_t rank, id;
} pair_slot;

typedef struct {
    int32_t id, prev, next; /* neighbours in the word; -1: none */
    bool gone;              /* merged into its left neighbour */
} sp_sym;

typedef struct {
    int32_t rank, pos, id; /* merge the symbol at pos with its right neighbour into id */
} sp_merge;

typedef struct {
    uint32_t hash, klen; /* klen 0: empty */
    size_t koff;         /* key bytes in ckeys */
    size_t voff;         /* ids in cvals */
    uint32_t vlen;
} cache_slot;

struct sn_bpe {
    sn_tokenizer tk;
    sn_pretok pretok;
    bool ignore_merges;
    char *pool;        /* every token's bytes */
    size_t pool_len, pool_cap;
    span *added;       /* sn_bpe_add_token's, in order, with their ids */
    int32_t *added_id;
    size_t n_added, added_cap;
    span *tok;         /* (vocab,) */
    int32_t *vtab;     /* bytes -> id, open addressing; -1 empty */
    uint32_t vmask;
    pair_slot *ptab;   /* merges */
    uint32_t pmask;
    int32_t byte_id[256];
    int32_t *special;  /* special token ids, matched in the text before the words */
    int n_special;
    cache_slot *ctab;  /* word cache: bytes -> ids */
    uint32_t cmask, cn;
    char *ckeys;
    size_t ckeys_len, ckeys_cap;
    int32_t *cvals;
    size_t cvals_len, cvals_cap;
    int32_t *work;     /* scratch for one word */
    size_t work_cap;
    int16_t u2b[324];  /* the files' spelling, unicode -> byte (sn_bpe_add_spelled) */
    /* byte fallback (sn_bpe_set_sp) */
    bool is_sp;
    sn_bpe_sp sp;
    int32_t fallback[256]; /* <0xXX> ids, -1 where the vocabulary lacks one */
    char *dpool;           /* each token's decoded bytes */
    span *dtok;            /* (vocab,) */
    int16_t *dbyte;        /* (vocab,) the byte a <0xXX> token decodes to, or -1 */
    sp_sym *sym;           /* scratch for one word */
    sp_merge *heap;
    size_t sym_cap, heap_cap;
    char *norm;            /* a piece of text with its spaces as SP */
    size_t norm_cap;
    uint32_t *cross;       /* sorted: the last characters of merges' left sides whose right side
                              starts with SP (sp_cuts) */
    size_t n_cross;
};

typedef sn_bpe gpt2; /* the word functions below */

/* Resizes the array at *pp to n bytes; false (*pp kept) when out of memory. */
bool sn_bpe_resize(void *pp, size_t n);
/* SN_ERR_OOM for n bytes of g's tables. */
sn_status sn_bpe_tables_oom(const sn_bpe *g, sn_err *e, size_t n);
/* The merge of (a, b), or NULL. */
const pair_slot *sn_bpe_pair_find(const gpt2 *g, int32_t a, int32_t b);
/* Decodes one UTF-8 code point at s[*i] (advancing *i); -1 if malformed. */
int32_t sn_bpe_utf8_next(const unsigned char *s, size_t n, size_t *i);
/* Word w's ids (*count of them), through the word cache; NULL when out of memory. */
const int32_t *sn_bpe_encode_word(gpt2 *g, const char *w, size_t n, uint32_t *count);

/* ---- bpe_sp.c: byte fallback ---- */

/* Word w's ids by SentencePiece's merges (a heap by rank) into ids, *count of them; false when
 * out of memory. */
bool sn_bpe_sp_merge_word(gpt2 *g, const char *w, size_t n, int32_t *ids, size_t *count);
/* The table of where a piece may be cut (sn_bpe_finish). */
sn_status sn_bpe_sp_cuts(sn_bpe *g, sn_err *e);
/* A piece of text (spaces as SP, the first piece with its prefix space) onto out. */
sn_status sn_bpe_sp_encode_piece(gpt2 *g, const char *s, size_t n, bool first, sn_tokens *out,
                                 sn_err *e);
/* Each token's decoded bytes (sn_bpe_finish). */
sn_status sn_bpe_sp_decoded(sn_bpe *g, sn_err *e);
/* The tokenizer's decode_text for the byte-fallback kind. */
sn_status sn_bpe_sp_decode_text(const sn_tokenizer *tk, const sn_tokens *t, size_t start,
                                size_t n, char **text, size_t *len, sn_err *e);

#endif
