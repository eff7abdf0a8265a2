/* bpe_hf.c: Hugging Face's tokenizer.json for the BPE engine (bpe_int.h), read by json-c: the
 * byte-level BPE models of GPT-2, SmolLM and Llama 3, and SentencePiece's byte-fallback BPE as
 * converted for TinyLlama and Llama 2 (model.vocab, model.merges as "a b" strings or [a, b]
 * pairs, added_tokens; the byte-fallback kind's normalizer or Metaspace, unk_token, fuse_unk and
 * decoder). What the engine cannot reproduce exactly is refused by name: other normalizers,
 * pre-tokenizers, patterns and decoders. The post-processor's BOS (a special token before each
 * text) is read for sinter generate, which puts it before each prompt; training text is a stream
 * and gets none. */
#include "bpe_int.h"

#include <stdlib.h>
#include <string.h>
#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "support/hash.h"

#define HF_HINT "expected a Hugging Face tokenizer.json of a BPE model, byte-level (GPT-2, " \
                "SmolLM, Llama 3) or byte-fallback (TinyLlama, Llama 2)"

#ifdef SN_HAVE_JSONC
/* Llama 3's pre-tokenizer pattern, as its tokenizer.json spells it */
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_object *field(json_object *o, const char *key) {
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static const char *str_field(json_object *o, const char *key) {
    json_object *v = field(o, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static bool bool_field(json_object *o, const char *key, bool dflt) {
    json_object *v = field(o, key);
    return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* A ByteLevel pre-tokenizer without a prefix space; *regex: whether it splits by GPT-2's
 * pattern itself. */
static sn_status byte_level(const char *path, json_object *p, bool *regex, sn_err *e) {
    const char *type = str_field(p, "type");
    if (!type || strcmp(type, "ByteLevel"))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: pre-tokenizer %s is not supported yet (a "
                       "byte-level BPE ends with ByteLevel): " HF_HINT, path, type ? type : "(none)");
    if (bool_field(p, "add_prefix_space", false))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: ByteLevel with add_prefix_space is not "
                       "supported yet: " HF_HINT, path);
    *regex = bool_field(p, "use_regex", true);
    return SN_OK;
}

/* The pre-tokenizer: ByteLevel (GPT-2's pattern), Digits (individual) then ByteLevel (SmolLM),
 * or Llama 3's Split then ByteLevel without its pattern. */
static sn_status pre_tokenizer(const char *path, json_object *root, sn_pretok *out, sn_err *e) {
    json_object *p = field(root, "pre_tokenizer");
    const char *type = str_field(p, "type");
    bool regex;
    sn_status st;
    if (type && !strcmp(type, "ByteLevel")) {
        if ((st = byte_level(path, p, &regex, e))) return st;
        *out = SN_PRETOK_GPT2;
        if (regex) return SN_OK;
    } else if (type && !strcmp(type, "Sequence")) {
        json_object *seq = field(p, "pretokenizers");
        if (seq && json_object_is_type(seq, json_type_array) && json_object_array_length(seq) == 2) {
            json_object *a = json_object_array_get_idx(seq, 0), *b = json_object_array_get_idx(seq, 1);
            const char *ta = str_field(a, "type");
            if ((st = byte_level(path, b, &regex, e))) return st;
            if (ta && !strcmp(ta, "Digits") && bool_field(a, "individual_digits", false) && regex) {
                *out = SN_PRETOK_DIGITS;
                return SN_OK;
            }
            const char *pat = str_field(field(a, "pattern"), "Regex"), *beh = str_field(a, "behavior");
            if (ta && !strcmp(ta, "Split") && !regex && pat && !strcmp(pat, llama3_pattern) && beh &&
                !strcmp(beh, "Isolated") && !bool_field(a, "invert", false)) {
                *out = SN_PRETOK_LLAMA3;
                return SN_OK;
            }
            if (ta && !strcmp(ta, "Split") && pat)
                return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: the pre-tokenizer's pattern \"%.200s\" "
                               "is not supported yet (GPT-2's and Llama 3's are): " HF_HINT, path, pat);
        }
    }
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: pre-tokenizer %s is not supported yet (ByteLevel, "
                   "Digits + ByteLevel, or Llama 3's Split + ByteLevel are): " HF_HINT, path,
                   type ? type : "(none)");
}

/* Adds every token of model.vocab and added_tokens (spelled in bytes), indexes them. */
static sn_status tokens(sn_bpe *g, const char *path, json_object *root, sn_err *e) {
    json_object *vocab = field(field(root, "model"), "vocab");
    if (!vocab || !json_object_is_type(vocab, json_type_object))
        return sn_fail(e, SN_ERR_PARSE, "%s: no model.vocab object: " HF_HINT, path);
    sn_status st = SN_OK;
    json_object_object_foreach(vocab, key, val) {
        size_t klen = strlen(key);
        int64_t id = json_object_is_type(val, json_type_int) ? json_object_get_int64(val) : -1;
        if (id < 0 || id >= 10000000 || klen == 0) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: model.vocab: token \"%.40s\" has no id in "
                         "0..9999999 or is empty: " HF_HINT, path, key);
            break;
        }
        bool spelled = true; /* a byte-fallback model's tokens are as they are */
        if (sn_bpe_is_sp(g)) st = sn_bpe_add_token(g, (int32_t)id, key, klen, e);
        else st = sn_bpe_add_spelled(g, (int32_t)id, key, klen, &spelled, e);
        if (st) break;
        if (!spelled) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: model.vocab: token %lld (\"%.40s\") is not spelled "
                         "in the byte-level alphabet: " HF_HINT, path, (long long)id, key);
            break;
        }
    }
    if (st) return st;
    /* added tokens outside model.vocab (Llama 3's specials): their content as it is */
    json_object *added = field(root, "added_tokens");
    size_t n_added = added && json_object_is_type(added, json_type_array) ? json_object_array_length(added) : 0;
    for (size_t k = 0; k < n_added && !st; k++) {
        json_object *t = json_object_array_get_idx(added, k), *idv = field(t, "id");
        const char *content = str_field(t, "content");
        bool in_vocab = content && field(vocab, content);
        if (!content || !*content || !idv || !json_object_is_type(idv, json_type_int))
            st = sn_fail(e, SN_ERR_PARSE, "%s: added_tokens[%zu]: no id or content: " HF_HINT, path, k);
        else if (!in_vocab)
            st = sn_bpe_add_token(g, (int32_t)json_object_get_int64(idv), content, strlen(content), e);
    }
    if (!st) st = sn_bpe_index(g, path, HF_HINT, e);
    for (size_t k = 0; k < n_added && !st; k++) { /* then each is matched as a whole */
        json_object *t = json_object_array_get_idx(added, k);
        const char *content = str_field(t, "content");
        int32_t id = (int32_t)json_object_get_int64(field(t, "id"));
        int32_t at = sn_bpe_find(g, content, strlen(content));
        const char *flag = bool_field(t, "lstrip", false) ? "lstrip" : bool_field(t, "rstrip", false)
                         ? "rstrip" : bool_field(t, "single_word", false) ? "single_word" : NULL;
        if (at != id)
            st = sn_fail(e, SN_ERR_PARSE, "%s: added token \"%.40s\" has id %d, but its text is "
                         "token %d: " HF_HINT, path, content, id, at);
        else if (flag) /* they change where the token matches */
            st = sn_fail(e, SN_ERR_UNSUPPORTED, "%s: added token \"%.40s\" with %s: not supported "
                         "yet (it is matched as its text alone): " HF_HINT, path, content, flag);
        else if (bool_field(t, "normalized", false) && field(root, "normalizer") &&
                 !json_object_is_type(field(root, "normalizer"), json_type_null))
            st = sn_fail(e, SN_ERR_UNSUPPORTED, "%s: added token \"%.40s\" is normalized: not "
                         "supported yet: " HF_HINT, path, content);
        else st = sn_bpe_add_special(g, id, e);
    }
    return st;
}

/* One merge's two tokens, from "a b" or ["a", "b"], in the byte-level spelling. */
static bool merge_pair(json_object *m, const char **a, size_t *la, const char **b, size_t *lb) {
    if (json_object_is_type(m, json_type_string)) {
        const char *s = json_object_get_string(m), *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return false;
        *a = s, *la = (size_t)(sp - s), *b = sp + 1, *lb = strlen(sp + 1);
        return *la && *lb;
    }
    if (!json_object_is_type(m, json_type_array) || json_object_array_length(m) != 2) return false;
    json_object *x = json_object_array_get_idx(m, 0), *y = json_object_array_get_idx(m, 1);
    if (!json_object_is_type(x, json_type_string) || !json_object_is_type(y, json_type_string)) return false;
    *a = json_object_get_string(x), *la = strlen(*a), *b = json_object_get_string(y), *lb = strlen(*b);
    return *la && *lb;
}

static sn_status merges(sn_bpe *g, const char *path, json_object *root, sn_err *e) {
    json_object *list = field(field(root, "model"), "merges");
    if (!list || !json_object_is_type(list, json_type_array))
        return sn_fail(e, SN_ERR_PARSE, "%s: no model.merges list: " HF_HINT, path);
    size_t n = json_object_array_length(list);
    sn_status st = sn_bpe_merges_reserve(g, n, e);
    uint32_t b2u[256];
    int16_t u2b[324];
    sn_bpe_unicode_maps(b2u, u2b);
    char *buf = NULL;
    size_t cap = 0;
    for (size_t r = 0; r < n && !st; r++) {
        const char *a, *b;
        size_t la, lb, ba, bb;
        if (!merge_pair(json_object_array_get_idx(list, r), &a, &la, &b, &lb)) {
            st = sn_fail(e, SN_ERR_PARSE, "%s: model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]: "
                         HF_HINT, path, r);
            break;
        }
        if (la + lb > cap) {
            char *nb = realloc(buf, la + lb);
            if (!nb) {
                st = sn_fail_oom(e, la + lb, "the BPE tokenizer's tables");
                break;
            }
            buf = nb;
            cap = la + lb;
        }
        bool ok = true;
        if (sn_bpe_is_sp(g)) { /* spelled as they are */
            memcpy(buf, a, la), memcpy(buf + la, b, lb);
            ba = la, bb = lb;
        } else {
            ok = sn_bpe_unspell(u2b, a, la, buf, &ba) && sn_bpe_unspell(u2b, b, lb, buf + ba, &bb);
        }
        int32_t x = ok ? sn_bpe_find(g, buf, ba) : -1, y = ok ? sn_bpe_find(g, buf + ba, bb) : -1;
        int32_t m = ok ? sn_bpe_find(g, buf, ba + bb) : -1;
        if (x < 0 || y < 0 || m < 0)
            st = sn_fail(e, SN_ERR_PARSE, "%s: model.merges[%zu] (\"%.*s\" + \"%.*s\") names a "
                         "token model.vocab lacks: " HF_HINT, path, r, (int)(la > 40 ? 40 : la), a,
                         (int)(lb > 40 ? 40 : lb), b);
        else sn_bpe_add_merge(g, x, y, m, (int32_t)r);
    }
    free(buf);
    return st;
}

/* ---- SentencePiece's byte-fallback kind (TinyLlama, Llama 2) -------------------------------- */

#define SP_HINT "expected a Hugging Face tokenizer.json of SentencePiece's BPE as TinyLlama's or " \
                "Llama 2's: a normalizer Prepend(\"\\u2581\") + Replace(\" \" -> \"\\u2581\") or a " \
                "Metaspace pre-tokenizer, the decoder Replace, ByteFallback, Fuse, Strip"
#define SP_UTF8 "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* Whether o is Replace of the string `from` by `to`. */
static bool is_replace(json_object *o, const char *from, const char *to) {
    const char *type = str_field(o, "type"), *pat = str_field(field(o, "pattern"), "String");
    const char *content = str_field(o, "content");
    return type && !strcmp(type, "Replace") && pat && !strcmp(pat, from) && content && !strcmp(content, to);
}

/* Whether this file is of the SentencePiece kind: byte fallback, a normalizer, or Metaspace. */
static bool is_sp_kind(json_object *root) {
    json_object *norm = field(root, "normalizer");
    const char *pre = str_field(field(root, "pre_tokenizer"), "type");
    return bool_field(field(root, "model"), "byte_fallback", false) ||
           (norm && !json_object_is_type(norm, json_type_null)) || (pre && !strcmp(pre, "Metaspace"));
}

/* The normalizer: Sequence [Prepend(SP), Replace(" " -> SP)], or Replace alone. */
static sn_status sp_normalizer(const char *path, json_object *norm, sn_bpe_sp *sp, sn_err *e) {
    const char *type = str_field(norm, "type");
    json_object *seq = field(norm, "normalizers");
    size_t n = seq && json_object_is_type(seq, json_type_array) ? json_object_array_length(seq) : 0;
    json_object *first = n ? json_object_array_get_idx(seq, 0) : NULL;
    json_object *last = n ? json_object_array_get_idx(seq, n - 1) : NULL;
    const char *ft = str_field(first, "type"), *prep = str_field(first, "prepend");
    if (type && !strcmp(type, "Replace") && is_replace(norm, " ", SP_UTF8)) {
        sp->prepend = SN_SP_PREPEND_NEVER;
        return SN_OK;
    }
    if (type && !strcmp(type, "Sequence") && (n == 1 || n == 2) && is_replace(last, " ", SP_UTF8) &&
        (n == 1 || (ft && !strcmp(ft, "Prepend") && prep && !strcmp(prep, SP_UTF8)))) {
        sp->prepend = n == 2 ? SN_SP_PREPEND_EACH : SN_SP_PREPEND_NEVER;
        return SN_OK;
    }
    const char *what = type ? type : "(no type)";
    if (type && !strcmp(type, "Sequence")) /* name the first step that is not one of these */
        for (size_t k = 0; k < n; k++) {
            json_object *s = json_object_array_get_idx(seq, k);
            const char *st = str_field(s, "type");
            if (!st || (strcmp(st, "Prepend") && strcmp(st, "Replace"))) {
                what = st ? st : "(no type)";
                break;
            }
        }
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: normalizer %s is not supported yet (Sequence of "
                   "Prepend(\"\\u2581\") and Replace(\" \" -> \"\\u2581\") is, or none): " SP_HINT,
                   path, what);
}

/* The Metaspace pre-tokenizer: replacement SP, prepend_scheme (or the older add_prefix_space),
 * split. */
static sn_status sp_metaspace(const char *path, json_object *p, sn_bpe_sp *sp, sn_err *e) {
    const char *rep = str_field(p, "replacement"), *scheme = str_field(p, "prepend_scheme");
    if (!rep || strcmp(rep, SP_UTF8))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: Metaspace with replacement \"%.20s\" is not "
                       "supported yet (\"\\u2581\" is): " SP_HINT, path, rep ? rep : "(none)");
    if (!scheme) scheme = bool_field(p, "add_prefix_space", true) ? "always" : "never";
    if (!strcmp(scheme, "first")) sp->prepend = SN_SP_PREPEND_FIRST;
    else if (!strcmp(scheme, "always")) sp->prepend = SN_SP_PREPEND_MISSING;
    else if (!strcmp(scheme, "never")) sp->prepend = SN_SP_PREPEND_NEVER;
    else return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: Metaspace prepend_scheme \"%.20s\" is not "
                        "supported yet (first, always, never are): " SP_HINT, path, scheme);
    sp->split = bool_field(p, "split", true);
    return SN_OK;
}

static bool small_int(json_object *v) {
    return v && json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0 &&
           json_object_get_int64(v) <= 1000;
}

/* The decoder: Replace(SP -> " "), then ByteFallback, Fuse and Strip(" ", start, stop) as
 * Hugging Face's conversions write them (Strip only after Fuse: before it, it would strip every
 * token); or Metaspace's (no byte fallback: <0xXX> stays as it is spelled). */
static sn_status sp_decoder(const char *path, json_object *d, sn_bpe_sp *sp, sn_err *e) {
    const char *type = str_field(d, "type");
    json_object *seq = field(d, "decoders");
    size_t n = seq && json_object_is_type(seq, json_type_array) ? json_object_array_length(seq) : 0;
    bool fuse = false;
    const char *bad = type ? type : "(none)";
    if (type && !strcmp(type, "Metaspace")) { /* SP to a space, but dropped from the first token */
        sn_bpe_sp m = *sp;
        sn_status st = sp_metaspace(path, d, &m, e);
        if (st) return st;
        sp->dec_replace = true;
        sp->dec_first_sp = m.prepend != SN_SP_PREPEND_NEVER;
        return SN_OK;
    }
    if (type && !strcmp(type, "Sequence") && n) {
        bad = NULL;
        for (size_t k = 0; k < n && !bad; k++) {
            json_object *s = json_object_array_get_idx(seq, k), *a = field(s, "start"), *b = field(s, "stop");
            const char *st = str_field(s, "type"), *content = str_field(s, "content");
            if (k == 0 && is_replace(s, SP_UTF8, " ")) sp->dec_replace = true;
            else if (st && !strcmp(st, "ByteFallback") && !sp->dec_bytes) sp->dec_bytes = true;
            else if (st && !strcmp(st, "Fuse") && !fuse) fuse = true;
            else if (st && !strcmp(st, "Strip") && fuse && k == n - 1 && content &&
                     !strcmp(content, " ") && small_int(a) && small_int(b)) {
                sp->strip_start = (int)json_object_get_int64(a);
                sp->strip_stop = (int)json_object_get_int64(b);
            } else bad = st ? st : "(no type)";
        }
        if (!bad && !sp->dec_replace) bad = "Sequence without Replace(\"\\u2581\" -> \" \") first";
    }
    if (!bad) return SN_OK;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: decoder %s is not supported yet (a Sequence of "
                   "Replace(\"\\u2581\" -> \" \"), ByteFallback, Fuse, Strip(\" \") is, or "
                   "Metaspace): " SP_HINT, path, bad);
}

/* The BOS id of the post-processor, a TemplateProcessing (alone, or in a Sequence beside
 * ByteLevel): the special token its "single" template puts before the text ($A), or -1 when
 * there is none (no post-processor, another kind, or a template that starts with the text).
 * Tokens after the text (an EOS) are not added: sinter generate continues a prompt. */
static sn_status post_processor(const char *path, json_object *root, int *bos, sn_err *e) {
    *bos = -1;
    json_object *p = field(root, "post_processor"), *tp = NULL;
    const char *type = str_field(p, "type");
    if (type && !strcmp(type, "TemplateProcessing")) tp = p;
    json_object *seq = type && !strcmp(type, "Sequence") ? field(p, "processors") : NULL;
    for (size_t k = 0; seq && json_object_is_type(seq, json_type_array) &&
                       k < json_object_array_length(seq); k++) {
        json_object *q = json_object_array_get_idx(seq, k);
        const char *qt = str_field(q, "type");
        if (qt && !strcmp(qt, "TemplateProcessing")) tp = q;
    }
    json_object *single = field(tp, "single");
    if (!single || !json_object_is_type(single, json_type_array)) return SN_OK;
    const char *name = NULL;
    for (size_t k = 0; k < json_object_array_length(single); k++) {
        json_object *it = json_object_array_get_idx(single, k);
        if (field(it, "Sequence")) break; /* the text: what follows it is not added */
        const char *id = str_field(field(it, "SpecialToken"), "id");
        if (!id || name)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: post_processor: a template with %s before "
                           "the text is not supported yet (one special token, a BOS, is): " HF_HINT,
                           path, id ? "two special tokens" : "something other than a special token");
        name = id;
    }
    if (!name) return SN_OK;
    json_object *ids = field(field(field(tp, "special_tokens"), name), "ids");
    if (!ids || !json_object_is_type(ids, json_type_array) || json_object_array_length(ids) != 1 ||
        !json_object_is_type(json_object_array_get_idx(ids, 0), json_type_int))
        return sn_fail(e, SN_ERR_PARSE, "%s: post_processor: special token \"%.40s\" needs one id "
                       "in special_tokens: " HF_HINT, path, name);
    int64_t id = json_object_get_int64(json_object_array_get_idx(ids, 0));
    if (id < 0 || id > INT32_MAX)
        return sn_fail(e, SN_ERR_PARSE, "%s: post_processor: special token \"%.40s\" has id %lld: "
                       HF_HINT, path, name, (long long)id);
    *bos = (int)id;
    return SN_OK;
}

/* The SentencePiece kind's settings: model, normalizer, pre-tokenizer, decoder. */
static sn_status sp_settings(const char *path, json_object *root, sn_bpe_sp *sp, sn_err *e) {
    json_object *model = field(root, "model"), *norm = field(root, "normalizer");
    json_object *pre = field(root, "pre_tokenizer"), *unk = field(model, "unk_token");
    const char *pt = str_field(pre, "type");
    bool has_norm = norm && !json_object_is_type(norm, json_type_null);
    sn_status st;
    *sp = (sn_bpe_sp){.byte_fallback = bool_field(model, "byte_fallback", false), .unk = -1,
                      .fuse_unk = bool_field(model, "fuse_unk", false)};
    if (unk && !json_object_is_type(unk, json_type_null)) {
        json_object *id = json_object_is_type(unk, json_type_string)
                        ? field(field(model, "vocab"), json_object_get_string(unk)) : NULL;
        if (!id || !json_object_is_type(id, json_type_int))
            return sn_fail(e, SN_ERR_PARSE, "%s: model.unk_token \"%.40s\" is not a token of model.vocab: "
                           SP_HINT, path, json_object_get_string(unk));
        int64_t v = json_object_get_int64(id);
        sp->unk = v >= 0 && v < 10000000 ? (int32_t)v : 10000000;
    }
    if (has_norm && pre && !json_object_is_type(pre, json_type_null))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: a normalizer with pre-tokenizer %s is not "
                       "supported yet (one or the other is): " SP_HINT, path, pt ? pt : "(?)");
    if (has_norm) st = sp_normalizer(path, norm, sp, e);
    else if (pt && !strcmp(pt, "Metaspace")) st = sp_metaspace(path, pre, sp, e);
    else st = sn_fail(e, SN_ERR_UNSUPPORTED, "%s: a byte-fallback BPE with pre-tokenizer %s and "
                      "no normalizer is not supported yet (spaces must become \"\\u2581\"): "
                      SP_HINT, path, pt ? pt : "(none)");
    return st ? st : sp_decoder(path, field(root, "decoder"), sp, e);
}

static sn_status load(sn_bpe *g, const char *path, json_object *root, sn_err *e) {
    json_object *model = field(root, "model"), *drop = field(model, "dropout");
    const char *type = str_field(model, "type");
    if (!type || strcmp(type, "BPE"))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: model type %s is not supported yet (BPE is): "
                       HF_HINT, path, type ? type : "(none)");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++)
        if (str_field(model, affixes[k]) && *str_field(model, affixes[k]))
            return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: model.%s \"%.20s\" is not supported yet "
                           "(null is): " HF_HINT, path, affixes[k], str_field(model, affixes[k]));
    if (drop && (json_object_is_type(drop, json_type_double) || json_object_is_type(drop, json_type_int)) &&
        json_object_get_double(drop) > 0)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: model.dropout %g is not supported yet (null "
                       "is: encoding must not be random): " HF_HINT, path, json_object_get_double(drop));
    sn_pretok pt = SN_PRETOK_GPT2;
    sn_status st;
    if (is_sp_kind(root)) {
        sn_bpe_sp sp;
        if ((st = sp_settings(path, root, &sp, e))) return st;
        sn_bpe_set_sp(g, &sp);
    } else if ((st = pre_tokenizer(path, root, &pt, e))) {
        return st;
    }
    sn_bpe_set_ignore_merges(g, bool_field(model, "ignore_merges", false));
    if ((st = tokens(g, path, root, e)) || (st = merges(g, path, root, e)) ||
        (st = post_processor(path, root, &sn_bpe_tokenizer(g)->bos, e)))
        return st;
    /* the pre-tokenizer was read before the engine existed: set it now */
    return sn_bpe_set_pretok(g, pt), sn_bpe_finish(g, e);
}
#endif

sn_status sn_tokenizer_hf_load(const char *tokenizer_json, sn_tokenizer **out, sn_err *e) {
    *out = NULL;
#ifdef SN_HAVE_JSONC
    char *text;
    size_t n;
    sn_status st = sn_file_read(tokenizer_json, HF_HINT, &text, &n, e);
    if (st) return st;
    uint64_t file_hash = sn_hash_bytes(SN_HASH_INIT, text, n);
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        free(text);
        return sn_fail_oom(e, 4096, "the JSON parser");
    }
    json_object *root = json_tokener_parse_ex(tok, text, n > INT32_MAX ? INT32_MAX : (int)n);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    free(text);
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return sn_fail(e, SN_ERR_PARSE, "%s: not a JSON object (%s): " HF_HINT, tokenizer_json,
                       root ? "another JSON value" : jerr == json_tokener_continue
                       ? "the JSON ends early" : json_tokener_error_desc(jerr));
    }
    sn_bpe *g = sn_bpe_new("hf", SN_PRETOK_GPT2, e);
    if (!g) st = SN_ERR_OOM;
    if (!st) st = load(g, tokenizer_json, root, e);
    json_object_put(root);
    if (st) {
        if (g) sn_tokenizer_free(sn_bpe_tokenizer(g));
        return st;
    }
    sn_tokenizer *tk = sn_bpe_tokenizer(g);
    tk->source_hash = file_hash;
    static const char *const eots[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    for (size_t k = 0; k < 3 && tk->eot < 0; k++) tk->eot = sn_bpe_find(g, eots[k], strlen(eots[k]));
    *out = tk;
    return SN_OK;
#else
    (void)out;
    return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: this build of sinter reads no JSON, so no "
                   "tokenizer.json: install libjson-c-dev and rebuild (./setup)", tokenizer_json);
#endif
}
