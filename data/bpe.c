/* bpe.c: the BPE engine of bpe_int.h: the vocabulary and merges in hash tables, the
 * pre-tokenizers' patterns written by hand, merges applied by rank, a word cache, special tokens
 * matched verbatim. SentencePiece's byte-fallback kind (its words from characters, merged by a
 * heap as Hugging Face's do) is bpe_sp.c's; the state both share is bpe_engine.h's. The readers
 * of the model files are bpe_gpt2.c and bpe_hf.c. */
#include "bpe_engine.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Resizes the array at *pp to n bytes; false (*pp kept) when out of memory. */
bool sn_bpe_resize(void *pp, size_t n) {
    void *q = realloc(*(void **)pp, n ? n : 1);
    if (q) *(void **)pp = q;
    return q != NULL;
}

sn_status sn_bpe_tables_oom(const sn_bpe *g, sn_err *e, size_t n) {
    return sn_fail_oom(e, n, g->tk.name && !strcmp(g->tk.name, "gpt2") ? "the GPT-2 tokenizer's tables"
                                                                          : "the BPE tokenizer's tables");
}

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(uint64_t key) { return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32); }

void sn_bpe_unicode_maps(uint32_t b2u[256], int16_t u2b[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

static uint32_t table_size(size_t n) {
    uint32_t s = 1024;
    while (s < 2 * n) s *= 2;
    return s;
}

/* Decodes one UTF-8 code point at s[*i] (advancing *i); -1 if malformed. */
int32_t sn_bpe_utf8_next(const unsigned char *s, size_t n, size_t *i) {
    unsigned c = s[*i];
    int extra = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (extra < 0 || *i + (size_t)extra >= n) return -1;
    int32_t cp = extra ? (int32_t)(c & (0x3f >> extra)) : (int32_t)c;
    for (int k = 1; k <= extra; k++) {
        if ((s[*i + (size_t)k] & 0xc0) != 0x80) return -1;
        cp = cp << 6 | (s[*i + (size_t)k] & 0x3f);
    }
    *i += (size_t)extra + 1;
    return cp;
}

bool sn_bpe_unspell(const int16_t u2b[324], const char *s, size_t n, char *out, size_t *len) {
    *len = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp = sn_bpe_utf8_next((const unsigned char *)s, n, &i);
        if (cp < 0 || cp >= 324 || u2b[cp] < 0) return false;
        out[(*len)++] = (char)u2b[cp];
    }
    return true;
}

/* ---- building: tokens, index, merges, specials ------------------------------------------ */

static sn_status bpe_encode(sn_tokenizer *tk, const char *text, size_t len, sn_tokens *out, sn_err *e);
static const char *bpe_decode(const sn_tokenizer *tk, int id, size_t *len);
static void bpe_destroy(sn_tokenizer *tk);

sn_bpe *sn_bpe_new(const char *name, sn_pretok pretok, sn_err *e) {
    sn_bpe *g = sn_calloc(1, sizeof *g, "the BPE tokenizer", e);
    if (!g) return NULL;
    g->tk = (sn_tokenizer){.name = name, .eot = -1, .bos = -1, .encode = bpe_encode, .decode = bpe_decode,
                           .destroy = bpe_destroy, .impl = g};
    g->pretok = pretok;
    uint32_t b2u[256];
    sn_bpe_unicode_maps(b2u, g->u2b);
    return g;
}

sn_tokenizer *sn_bpe_tokenizer(sn_bpe *g) { return &g->tk; }

void sn_bpe_set_ignore_merges(sn_bpe *g, bool on) { g->ignore_merges = on; }

void sn_bpe_set_pretok(sn_bpe *g, sn_pretok pretok) { g->pretok = pretok; }

void sn_bpe_set_sp(sn_bpe *g, const sn_bpe_sp *sp) {
    g->is_sp = true;
    g->sp = *sp;
    g->tk.lossy = true;
    g->tk.decode_text = sn_bpe_sp_decode_text;
}

bool sn_bpe_is_sp(const sn_bpe *g) { return g->is_sp; }

sn_status sn_bpe_add_token(sn_bpe *g, int32_t id, const char *s, size_t n, sn_err *e) {
    SN_ASSERT(n > 0 && n < UINT32_MAX);
    if (g->pool_len + n > g->pool_cap) {
        size_t cap = (g->pool_len + n) * 2 + 4096;
        if (cap > UINT32_MAX || !sn_bpe_resize(&g->pool, cap)) return sn_bpe_tables_oom(g, e, cap);
        g->pool_cap = cap;
    }
    if (g->n_added == g->added_cap) {
        size_t cap = g->added_cap ? 2 * g->added_cap : 1024;
        if (!sn_bpe_resize(&g->added, cap * sizeof *g->added) || !sn_bpe_resize(&g->added_id, cap * sizeof *g->added_id))
            return sn_bpe_tables_oom(g, e, cap * (sizeof *g->added + sizeof *g->added_id));
        g->added_cap = cap;
    }
    memcpy(g->pool + g->pool_len, s, n);
    g->added[g->n_added] = (span){(uint32_t)g->pool_len, (uint32_t)n};
    g->added_id[g->n_added++] = id;
    g->pool_len += n;
    return SN_OK;
}

sn_status sn_bpe_add_spelled(sn_bpe *g, int32_t id, const char *s, size_t n, bool *spelled, sn_err *e) {
    size_t len;
    char stack[256], *buf = n <= sizeof stack ? stack : malloc(n); /* bytes: at most n */
    if (!buf) return sn_bpe_tables_oom(g, e, n);
    *spelled = n > 0 && sn_bpe_unspell(g->u2b, s, n, buf, &len);
    sn_status st = *spelled ? sn_bpe_add_token(g, id, buf, len, e) : SN_OK;
    if (buf != stack) free(buf);
    return st;
}

int32_t sn_bpe_find(const sn_bpe *g, const char *s, size_t n) {
    for (uint32_t i = hash_bytes(s, n) & g->vmask;; i = (i + 1) & g->vmask) {
        int32_t id = g->vtab[i];
        if (id < 0) return -1;
        if (g->tok[id].len == n && memcmp(g->pool + g->tok[id].off, s, n) == 0) return id;
    }
}

sn_status sn_bpe_index(sn_bpe *g, const char *file, const char *hint, sn_err *e) {
    size_t cnt = g->n_added;
    long max_id = -1;
    for (size_t k = 0; k < cnt; k++)
        if (g->added_id[k] > max_id) max_id = g->added_id[k];
    if ((size_t)(max_id + 1) != cnt)
        return sn_fail(e, SN_ERR_PARSE, "%s: %zu tokens but ids go up to %ld: expected ids 0..%zu "
                       "each once: %s", file, cnt, max_id, cnt ? cnt - 1 : 0, hint);
    if (cnt > INT32_MAX / 2) return sn_fail(e, SN_ERR_PARSE, "%s: %zu tokens: too many: %s", file, cnt, hint);
    g->tk.vocab = (int)cnt;
    if (!sn_bpe_resize(&g->tok, cnt * sizeof *g->tok)) return sn_bpe_tables_oom(g, e, cnt * sizeof *g->tok);
    memset(g->tok, 0xff, cnt * sizeof *g->tok);
    for (size_t k = 0; k < cnt; k++) {
        int32_t id = g->added_id[k];
        if (id < 0 || g->tok[id].off != UINT32_MAX)
            return sn_fail(e, SN_ERR_PARSE, "%s: id %d appears twice: %s", file, id, hint);
        g->tok[id] = g->added[k];
    }
    uint32_t size = table_size(cnt);
    g->vmask = size - 1;
    if (!sn_bpe_resize(&g->vtab, size * sizeof *g->vtab)) return sn_bpe_tables_oom(g, e, size * sizeof *g->vtab);
    memset(g->vtab, 0xff, size * sizeof *g->vtab);
    for (int32_t id = 0; id < (int32_t)cnt; id++) {
        const char *s = g->pool + g->tok[id].off;
        size_t len = g->tok[id].len;
        if (sn_bpe_find(g, s, len) >= 0)
            return sn_fail(e, SN_ERR_PARSE, "%s: token %d is spelled like an earlier one: %s", file,
                           id, hint);
        uint32_t i = hash_bytes(s, len) & g->vmask;
        while (g->vtab[i] >= 0) i = (i + 1) & g->vmask;
        g->vtab[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b, hex[8];
        g->byte_id[b] = sn_bpe_find(g, &c, 1);
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        g->fallback[b] = sn_bpe_find(g, hex, 6);
        if (g->byte_id[b] < 0 && !g->is_sp)
            return sn_fail(e, SN_ERR_PARSE, "%s: no token for byte %d: %s", file, b, hint);
    }
    if (g->is_sp && g->sp.unk >= (int32_t)cnt)
        return sn_fail(e, SN_ERR_PARSE, "%s: the unk token's id %d is not in the vocabulary of %zu: "
                       "%s", file, g->sp.unk, cnt, hint);
    return SN_OK;
}

sn_status sn_bpe_merges_reserve(sn_bpe *g, size_t n, sn_err *e) {
    uint32_t size = table_size(n);
    g->pmask = size - 1;
    if (!sn_bpe_resize(&g->ptab, size * sizeof *g->ptab)) return sn_bpe_tables_oom(g, e, size * sizeof *g->ptab);
    for (uint32_t i = 0; i < size; i++) g->ptab[i].key = UINT64_MAX;
    return SN_OK;
}

void sn_bpe_add_merge(sn_bpe *g, int32_t a, int32_t b, int32_t merged, int32_t rank) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = hash_pair(key) & g->pmask;
    while (g->ptab[i].key != UINT64_MAX && g->ptab[i].key != key) i = (i + 1) & g->pmask;
    if (g->ptab[i].key == UINT64_MAX) g->ptab[i] = (pair_slot){key, rank, merged};
}

const pair_slot *sn_bpe_pair_find(const gpt2 *g, int32_t a, int32_t b) {
    if (!g->ptab) return NULL;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = hash_pair(key) & g->pmask;; i = (i + 1) & g->pmask) {
        if (g->ptab[i].key == key) return &g->ptab[i];
        if (g->ptab[i].key == UINT64_MAX) return NULL;
    }
}

sn_status sn_bpe_add_special(sn_bpe *g, int32_t id, sn_err *e) {
    SN_ASSERT(id >= 0 && id < g->tk.vocab);
    for (int k = 0; k < g->n_special; k++)
        if (g->special[k] == id) return SN_OK;
    if (!sn_bpe_resize(&g->special, (size_t)(g->n_special + 1) * sizeof *g->special))
        return sn_bpe_tables_oom(g, e, (size_t)(g->n_special + 1) * sizeof *g->special);
    g->special[g->n_special++] = id;
    return SN_OK;
}

/* Doubles the word cache; false when out of memory. */
static bool cache_grow(gpt2 *g) {
    uint32_t size = g->ctab ? 2 * (g->cmask + 1) : 4096;
    cache_slot *t = calloc(size, sizeof *t);
    if (!t) return false;
    for (uint32_t k = 0; g->ctab && k <= g->cmask; k++) {
        if (!g->ctab[k].klen) continue;
        uint32_t i = g->ctab[k].hash & (size - 1);
        while (t[i].klen) i = (i + 1) & (size - 1);
        t[i] = g->ctab[k];
    }
    free(g->ctab);
    g->ctab = t;
    g->cmask = size - 1;
    return true;
}

static void cache_clear(gpt2 *g) {
    memset(g->ctab, 0, (g->cmask + 1) * sizeof *g->ctab);
    g->cn = 0;
    g->ckeys_len = g->cvals_len = 0;
}


sn_status sn_bpe_finish(sn_bpe *g, sn_err *e) {
    if (g->is_sp) {
        sn_status st = sn_bpe_sp_decoded(g, e);
        if (!st) st = sn_bpe_sp_cuts(g, e);
        if (st) return st;
    }
    return cache_grow(g) ? SN_OK : sn_bpe_tables_oom(g, e, 4096 * sizeof(cache_slot));
}

/* ---- the pre-tokenizers ---------------------------------------------------------------- */

enum { C_SPACE, C_LETTER, C_DIGIT, C_OTHER };

/* Class of the character at s[i] for GPT-2's regex, its length in *len. ASCII and Latin-1 are
 * exact; general punctuation, symbols (arrows to dingbats), CJK punctuation, format characters
 * and emoji are "other"; any other non-ASCII character (or stray byte) counts as a letter (a
 * table, not Unicode's: a rare script's digits or marks may split differently). */
static int char_class(const unsigned char *s, size_t n, size_t i, size_t *len) {
    unsigned c = s[i];
    *len = 1;
    if (c < 0x80) {
        if (c == ' ' || (c >= 9 && c <= 13)) return C_SPACE;
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_LETTER;
        if (c >= '0' && c <= '9') return C_DIGIT;
        return C_OTHER;
    }
    size_t j = i;
    int32_t cp = sn_bpe_utf8_next(s, n, &j);
    if (cp < 0) return C_LETTER;
    *len = j - i;
    if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
        cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000)
        return C_SPACE;
    if (cp < 0xa0) return C_OTHER; /* C1 controls */
    if (cp < 0xc0) {
        if (cp == 0xaa || cp == 0xb5 || cp == 0xba) return C_LETTER;
        if (cp == 0xb2 || cp == 0xb3 || cp == 0xb9 || (cp >= 0xbc && cp <= 0xbe)) return C_DIGIT;
        return C_OTHER;
    }
    if (cp == 0xd7 || cp == 0xf7) return C_OTHER;
    if ((cp >= 0x2010 && cp <= 0x2027) || (cp >= 0x2030 && cp <= 0x205e)) return C_OTHER;
    /* not letters either: format characters (zero-width joiners), arrows to dingbats and
     * other symbols, CJK punctuation, variation selectors, emoji and pictographs */
    if ((cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2060 && cp <= 0x206f) ||
        (cp >= 0x2190 && cp <= 0x2bff) || (cp >= 0x3001 && cp <= 0x3004) ||
        (cp >= 0x3008 && cp <= 0x3020) || (cp >= 0xfe00 && cp <= 0xfe0f) ||
        (cp >= 0x1f000 && cp <= 0x1faff) || (cp >= 0xe0000 && cp <= 0xe007f))
        return C_OTHER;
    return C_LETTER;
}

/* End of the piece GPT-2's pattern matches at s[i]:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t pretok_gpt2(const unsigned char *s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char c = s[i + 1], d = i + 2 < n ? s[i + 2] : 0;
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l'))
            return i + 3;
    }
    size_t len, j = i;
    int cls = char_class(s, n, i, &len);
    if (s[i] == ' ' && i + 1 < n) { /* " ?X+": the space joins a following non-space run */
        size_t l1;
        int c1 = char_class(s, n, i + 1, &l1);
        if (c1 != C_SPACE) {
            cls = c1;
            j = i + 1;
            len = l1;
        }
    }
    if (cls != C_SPACE) {
        for (j += len; j < n && char_class(s, n, j, &len) == cls; j += len) {}
        return j;
    }
    size_t last = i; /* start of the last whitespace character */
    for (j = i + len; j < n && char_class(s, n, j, &len) == C_SPACE; j += len) last = j;
    if (j == n || last == i) return j; /* to the end, or one character: \s+ */
    return last;                       /* \s+(?!\S): leave the last one for the next piece */
}

/* End of the piece Llama 3's pattern matches at s[i] (bpe_int.h): its alternatives in order,
 * the first that matches wins. */
static size_t pretok_llama3(const unsigned char *s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) { /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        unsigned char c = s[i + 1] | 0x20, d = i + 2 < n ? s[i + 2] | 0x20 : 0;
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
    }
    size_t len, l1, j;
    int cls = char_class(s, n, i, &len);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t at = i;
    if (cls != C_LETTER && cls != C_DIGIT && s[i] != '\r' && s[i] != '\n' && i + len < n &&
        char_class(s, n, i + len, &l1) == C_LETTER)
        at = i + len;
    if (at != i || cls == C_LETTER) {
        for (j = at; j < n && char_class(s, n, j, &l1) == C_LETTER; j += l1) {}
        return j;
    }
    if (cls == C_DIGIT) { /* \p{N}{1,3} */
        j = i + len;
        for (int k = 1; k < 3 && j < n && char_class(s, n, j, &l1) == C_DIGIT; k++) j += l1;
        return j;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    at = s[i] == ' ' && i + 1 < n && char_class(s, n, i + 1, &l1) == C_OTHER ? i + 1 : i;
    if (char_class(s, n, at, &l1) == C_OTHER) {
        for (j = at; j < n && char_class(s, n, j, &l1) == C_OTHER; j += l1) {}
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* whitespace from i: \s*[\r\n]+ (to just after its last newline), \s+(?!\S), \s+ */
    size_t last = i, nl = 0; /* start of the last whitespace character; end of the last newline */
    for (j = i; j < n && char_class(s, n, j, &l1) == C_SPACE; j += l1) {
        last = j;
        if (s[j] == '\r' || s[j] == '\n') nl = j + 1;
    }
    if (nl) return nl;
    if (j == n || last == i) return j;
    return last;
}

/* End of the next word at s[i]. */
static size_t pretok_next(const gpt2 *g, const unsigned char *s, size_t n, size_t i) {
    size_t len;
    switch (g->pretok) {
    case SN_PRETOK_LLAMA3: return pretok_llama3(s, n, i);
    case SN_PRETOK_DIGITS: { /* a digit alone; GPT-2's pattern up to the next digit */
        if (char_class(s, n, i, &len) == C_DIGIT) return i + len;
        size_t end = i;
        while (end < n && char_class(s, n, end, &len) != C_DIGIT) end += len;
        return pretok_gpt2(s, end, i);
    }
    case SN_PRETOK_GPT2: break;
    }
    return pretok_gpt2(s, n, i);
}

/* ---- encoding -------------------------------------------------------------------------- */


/* The ids of one pre-tokenized word, from the cache or by merging its bytes by rank; NULL when
 * out of memory. */
const int32_t *sn_bpe_encode_word(gpt2 *g, const char *w, size_t n, uint32_t *count) {
    uint32_t h = hash_bytes(w, n), i = h & g->cmask;
    for (; n <= CACHE_MAX_LEN && g->ctab[i].klen; i = (i + 1) & g->cmask) {
        cache_slot *c = &g->ctab[i];
        if (c->hash == h && c->klen == n && memcmp(g->ckeys + c->koff, w, n) == 0) {
            *count = c->vlen;
            return g->cvals + c->voff;
        }
    }
    if (n > g->work_cap) {
        if (!sn_bpe_resize(&g->work, 2 * n * sizeof *g->work)) return NULL;
        g->work_cap = 2 * n;
    }
    int32_t *ids = g->work;
    size_t m = n;
    if (g->is_sp && !sn_bpe_sp_merge_word(g, w, n, ids, &m)) return NULL;
    for (size_t k = 0; k < n && !g->is_sp; k++) ids[k] = g->byte_id[(unsigned char)w[k]];
    while (m > 1 && !g->is_sp) { /* byte-level: the best pair merged everywhere, repeatedly */
        const pair_slot *best = NULL;
        for (size_t k = 0; k + 1 < m; k++) {
            const pair_slot *p = sn_bpe_pair_find(g, ids[k], ids[k + 1]);
            if (p && (!best || p->rank < best->rank)) best = p;
        }
        if (!best) break;
        int32_t a = (int32_t)(best->key >> 32), b = (int32_t)(uint32_t)best->key;
        size_t out = 0;
        for (size_t k = 0; k < m;) {
            if (k + 1 < m && ids[k] == a && ids[k + 1] == b) {
                ids[out++] = best->id;
                k += 2;
            } else {
                ids[out++] = ids[k++];
            }
        }
        m = out;
    }
    if (n > CACHE_MAX_LEN) { /* not kept */
        *count = (uint32_t)m;
        return ids;
    }
    if (g->cn >= CACHE_MAX_WORDS) cache_clear(g);
    if (2 * (g->cn + 1) > g->cmask + 1 && !cache_grow(g)) return NULL;
    if (g->ckeys_len + n > g->ckeys_cap) {
        if (!sn_bpe_resize(&g->ckeys, (g->ckeys_len + n) * 2 + 4096)) return NULL;
        g->ckeys_cap = (g->ckeys_len + n) * 2 + 4096;
    }
    if (g->cvals_len + m > g->cvals_cap) {
        if (!sn_bpe_resize(&g->cvals, ((g->cvals_len + m) * 2 + 4096) * sizeof *g->cvals)) return NULL;
        g->cvals_cap = (g->cvals_len + m) * 2 + 4096;
    }
    for (i = h & g->cmask; g->ctab[i].klen; i = (i + 1) & g->cmask) {}
    g->ctab[i] = (cache_slot){h, (uint32_t)n, g->ckeys_len, g->cvals_len, (uint32_t)m};
    memcpy(g->ckeys + g->ckeys_len, w, n);
    memcpy(g->cvals + g->cvals_len, ids, m * sizeof *ids);
    g->ckeys_len += n;
    g->cvals_len += m;
    g->cn++;
    *count = (uint32_t)m;
    return g->cvals + g->cvals_len - m;
}

static sn_status encode_plain(gpt2 *g, const unsigned char *s, size_t n, sn_tokens *out,
                              sn_err *e) {
    for (size_t i = 0; i < n;) {
        size_t j = pretok_next(g, s, n, i);
        uint32_t count;
        int32_t whole = g->ignore_merges ? sn_bpe_find(g, (const char *)s + i, j - i) : -1;
        const int32_t *ids = whole >= 0 ? &whole : sn_bpe_encode_word(g, (const char *)s + i, j - i, &count);
        if (whole >= 0) count = 1;
        if (!ids) return sn_fail_oom(e, 2 * (j - i) * sizeof *ids + 4096, "the BPE tokenizer's word cache");
        for (uint32_t k = 0; k < count; k++) {
            sn_status st = sn_tokens_push(out, ids[k], e);
            if (st) return st;
        }
        i = j;
    }
    return SN_OK;
}

/* The first special token in text[i, len) (the longest of those starting there), or -1;
 * its offset in *at. pos[k]: where special k next occurs at or after an earlier i (len: nowhere;
 * SIZE_MAX: not searched yet), so that each is searched for once along the text. */
static int32_t next_special(const gpt2 *g, const char *text, size_t len, size_t i, size_t *pos,
                            size_t *at) {
    int32_t best = -1;
    size_t best_at = len, best_len = 0;
    for (int k = 0; k < g->n_special; k++) {
        const span *t = &g->tok[g->special[k]];
        if (pos[k] == SIZE_MAX || (pos[k] < i && pos[k] != len)) {
            const char *hit = i < len ? memmem(text + i, len - i, g->pool + t->off, t->len) : NULL;
            pos[k] = hit ? (size_t)(hit - text) : len;
        }
        if (pos[k] == len) continue;
        if (pos[k] < best_at || (pos[k] == best_at && t->len > best_len)) {
            best = g->special[k];
            best_at = pos[k];
            best_len = t->len;
        }
    }
    *at = best_at;
    return best;
}

static sn_status bpe_encode(sn_tokenizer *tk, const char *text, size_t len, sn_tokens *out,
                            sn_err *e) {
    gpt2 *g = tk->impl;
    size_t *pos = sn_calloc((size_t)g->n_special + 1, sizeof *pos, "the BPE tokenizer's special "
                            "tokens", e);
    if (!pos) return SN_ERR_OOM;
    for (int k = 0; k < g->n_special; k++) pos[k] = SIZE_MAX;
    sn_status st = SN_OK;
    for (size_t i = 0; i <= len && !st;) {
        size_t at;
        int32_t sp = next_special(g, text, len, i, pos, &at);
        st = g->is_sp ? sn_bpe_sp_encode_piece(g, text + i, at - i, i == 0, out, e)
                      : encode_plain(g, (const unsigned char *)text + i, at - i, out, e);
        if (st || sp < 0) break;
        st = sn_tokens_push(out, sp, e);
        i = at + g->tok[sp].len;
    }
    free(pos);
    return st;
}

static const char *bpe_decode(const sn_tokenizer *tk, int id, size_t *len) {
    const gpt2 *g = tk->impl;
    if (id < 0 || id >= tk->vocab) return NULL;
    const span *t = g->is_sp ? &g->dtok[id] : &g->tok[id];
    *len = t->len;
    return (g->is_sp ? g->dpool : g->pool) + t->off;
}

static void bpe_destroy(sn_tokenizer *tk) {
    gpt2 *g = tk->impl;
    free(g->pool);
    free(g->added);
    free(g->added_id);
    free(g->tok);
    free(g->vtab);
    free(g->ptab);
    free(g->special);
    free(g->ctab);
    free(g->ckeys);
    free(g->cvals);
    free(g->work);
    free(g->dpool);
    free(g->dtok);
    free(g->dbyte);
    free(g->sym);
    free(g->heap);
    free(g->norm);
    free(g->cross);
    free(g);
}
