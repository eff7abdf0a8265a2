/* tests/test_tokenizer_hf.c: Hugging Face tokenizer.json (data/bpe_hf.c) against the ids that
 * Hugging Face's own `tokenizers` gives (tools/make_tokenizer_fixtures.py: small byte-level BPE
 * models with GPT-2's, SmolLM's (Digits) and Llama 3's pre-tokenizers, a sample text with
 * contractions, digit runs, tabs, CRLF, Latin-1, Greek, CJK, punctuation runs and special
 * tokens); GPT-2's own files rewritten as a tokenizer.json encoding Shakespeare the same as the
 * GPT-2 reader; the files it refuses, each by what it lacks. SentencePiece's byte-fallback kind
 * (TinyLlama's layout, the Metaspace forms and decoder, unk without byte fallback, a byte token
 * missing): each case of cases.txt encodes to the library's ids and its ids decode to the
 * library's text; mutants of each file (one setting changed as a wrong reading of it would)
 * fail some case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "data/data.h"

#define ck_assert_has(msg, sub)                                                                    \
    ck_assert_msg(strstr((msg), (sub)), "message\n  \"%s\"\nlacks\n  \"%s\"", (msg), (sub))

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static sn_tokenizer *load(const char *path) {
    sn_tokenizer *tk = NULL;
    sn_err e = {0};
    ck_assert_msg(sn_tokenizer_hf_load(path, &tk, &e) == SN_OK, "%s: %s", path, e.msg);
    return tk;
}

/* The fixture's sample encodes to the library's ids and decodes back to the text. */
static void fixture(const char *name) {
    char path[4096];
    size_t len, idlen;
    snprintf(path, sizeof path, "%s/tokenizers/sample.txt", SN_TEST_FIXTURES);
    char *text = slurp(path, &len);
    snprintf(path, sizeof path, "%s/tokenizers/%s/sample_ids.txt", SN_TEST_FIXTURES, name);
    char *ids = slurp(path, &idlen);
    snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer.json", SN_TEST_FIXTURES, name);
    sn_tokenizer *tk = load(path);
    ck_assert_int_eq(tk->vocab, 700);
    ck_assert_int_eq(tk->eot, 0);
    sn_tokens t = {0};
    sn_err e = {0};
    ck_assert_msg(sn_tokenizer_encode(tk, text, len, &t, &e) == SN_OK, "%s", e.msg);
    size_t n = 0;
    for (char *p = ids, *end; *p && *p != '\n'; p = end, n++) {
        long want = strtol(p, &end, 10);
        ck_assert_msg(end != p, "%s: bad ids file", name);
        ck_assert_msg(n < t.n, "%s: %zu ids, the library gives more", name, t.n);
        if (sn_tokens_get(&t, n) != want) { /* name the word where they part */
            size_t at = 0, l;
            for (size_t k = 0; k < n; k++) {
                sn_tokenizer_decode(tk, sn_tokens_get(&t, k), &l);
                at += l;
            }
            ck_abort_msg("%s: id %zu is %d, the library's %ld, at byte %zu (\"%.20s\")", name, n,
                         sn_tokens_get(&t, n), want, at, text + at);
        }
    }
    ck_assert_msg(n == t.n, "%s: %zu ids, the library gives %zu", name, t.n, n);
    char *back;
    size_t blen;
    ck_assert(sn_tokenizer_decode_all(tk, &t, 0, t.n, &back, &blen, &e) == SN_OK);
    ck_assert(blen == len && !memcmp(back, text, len));
    printf("test_tokenizer_hf: %s: %zu ids, the library's, and back to the %zu bytes\n", name, n, len);
    free(back);
    sn_tokens_free(&t);
    sn_tokenizer_free(tk);
    free(text);
    free(ids);
}

START_TEST(gpt2_pattern) { fixture("gpt2"); }
END_TEST
START_TEST(digits_then_gpt2_pattern) { fixture("digits"); }
END_TEST
START_TEST(llama3_pattern) { fixture("llama3"); }
END_TEST

/* Writes text to a temporary file; its name in path (64 bytes). */
static void temp_file(char *path, const char *text, size_t len) {
    strcpy(path, "/tmp/sn_test_tokXXXXXX");
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    ck_assert(write(fd, text, len) == (ssize_t)len);
    close(fd);
}

/* GPT-2's encoder.json and vocab.bpe as one tokenizer.json: Shakespeare encodes to the same ids
 * as the GPT-2 reader gives. */
START_TEST(gpt2_files_as_tokenizer_json) {
    size_t elen, mlen, slen;
    char *enc = slurp(sn_test_asset("gpt2/encoder.json"), &elen);
    char *mer = slurp(sn_test_asset("gpt2/vocab.bpe"), &mlen);
    size_t cap = elen + 2 * mlen + 4096, n = 0;
    char *json = malloc(cap);
    n += (size_t)snprintf(json + n, cap - n, "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": "
                          "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "
                          "\"added_tokens\": [{\"id\": 50256, \"content\": \"<|endoftext|>\", "
                          "\"special\": true}], \"model\": {\"type\": \"BPE\", \"vocab\": ");
    memcpy(json + n, enc, elen);
    n += elen;
    n += (size_t)snprintf(json + n, cap - n, ", \"merges\": [");
    bool first = true;
    for (char *p = mer; p < mer + mlen;) {
        char *end = memchr(p, '\n', (size_t)(mer + mlen - p));
        if (!end) end = mer + mlen;
        if (end > p && strncmp(p, "#version", 8)) {
            json[n++] = first ? '"' : ',', first = false;
            if (json[n - 1] == ',') json[n++] = '"';
            for (char *c = p; c < end; c++) {
                if (*c == '"' || *c == '\\') json[n++] = '\\';
                json[n++] = *c;
            }
            json[n++] = '"';
        }
        p = end + 1;
    }
    n += (size_t)snprintf(json + n, cap - n, "]}}");
    char path[64];
    temp_file(path, json, n);
    sn_tokenizer *hf = load(path), *g2 = NULL;
    sn_err e = {0};
    char enc_path[4096]; /* sn_test_asset's buffer is reused */
    snprintf(enc_path, sizeof enc_path, "%s", sn_test_asset("gpt2/encoder.json"));
    ck_assert_msg(sn_tokenizer_gpt2_load(enc_path, sn_test_asset("gpt2/vocab.bpe"), &g2, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_int_eq(hf->vocab, 50257);
    ck_assert_int_eq(hf->eot, 50256);
    char *text = slurp(sn_test_asset("tinyshakespeare.txt"), &slen);
    if (slen > 300000) slen = 300000;
    const char *extra = "x<|endoftext|>y 2026 <|endoftext|>";
    sn_tokens a = {0}, b = {0};
    ck_assert(sn_tokenizer_encode(hf, text, slen, &a, &e) == SN_OK);
    ck_assert(sn_tokenizer_encode(g2, text, slen, &b, &e) == SN_OK);
    ck_assert(sn_tokenizer_encode(hf, extra, strlen(extra), &a, &e) == SN_OK);
    ck_assert(sn_tokenizer_encode(g2, extra, strlen(extra), &b, &e) == SN_OK);
    ck_assert_uint_eq(a.n, b.n);
    for (size_t i = 0; i < a.n; i++)
        ck_assert_msg(sn_tokens_get(&a, i) == sn_tokens_get(&b, i), "id %zu: %d vs GPT-2's %d", i,
                      sn_tokens_get(&a, i), sn_tokens_get(&b, i));
    printf("test_tokenizer_hf: GPT-2's files as tokenizer.json: %zu ids of Shakespeare, the same\n", a.n);
    sn_tokens_free(&a);
    sn_tokens_free(&b);
    sn_tokenizer_free(hf);
    sn_tokenizer_free(g2);
    unlink(path);
    free(text);
    free(json);
    free(enc);
    free(mer);
}
END_TEST

/* What the engine cannot reproduce is refused by name. */
START_TEST(refusals_name_what) {
    static const char *const bad[][2] = {
        {"{\"model\": {\"type\": \"Unigram\"}}", "model type Unigram is not supported yet"},
        {"{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true}}", "a byte-fallback BPE with "
         "pre-tokenizer (none) and no normalizer is not supported yet"},
        {"{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\"}}", "normalizer NFC is not supported yet"},
        {"{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\"}}",
         "pre-tokenizer Whitespace is not supported yet"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}, \"model\": "
         "{\"type\": \"BPE\"}}", "add_prefix_space is not supported yet"},
        {"{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", "
         "\"use_regex\": false}]}, \"model\": {\"type\": \"BPE\"}}", "pattern \"\\w+\" is not supported yet"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
         "{\"a\": 0}, \"merges\": []}}", "no token for byte 0"},
        {"[1, 2]", "not a JSON object"},
        {"{\"model\": ", "the JSON ends early"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[64];
        temp_file(path, bad[i][0], strlen(bad[i][0]));
        sn_tokenizer *tk = NULL;
        sn_err e = {0};
        ck_assert_msg(sn_tokenizer_hf_load(path, &tk, &e) != SN_OK, "case %zu loaded", i);
        ck_assert_ptr_null(tk);
        ck_assert_has(e.msg, bad[i][1]);
        ck_assert_has(e.msg, path);
        unlink(path);
    }
    /* a merge naming a token the vocabulary lacks: the fixture with one merge changed */
    size_t len;
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizers/gpt2/tokenizer.json", SN_TEST_FIXTURES);
    char *json = slurp(p, &len), *m;
    json = realloc(json, len + 8); /* room for the 4 bytes inserted */
    ck_assert(json);
    m = strstr(json, "\"merges\": [");
    if (!m) m = strstr(json, "\"merges\":[");
    ck_assert(m);
    char *q = strchr(m, '"');
    q = strchr(q + 1, '[');
    q = strchr(q, '"'); /* the first merge's first token */
    ck_assert(q);
    memmove(q + 5, q + 1, strlen(q + 1) + 1);
    memcpy(q + 1, "zzzz", 4);
    char path[64];
    temp_file(path, json, strlen(json));
    sn_tokenizer *tk = NULL;
    sn_err e = {0};
    ck_assert(sn_tokenizer_hf_load(path, &tk, &e) == SN_ERR_PARSE);
    ck_assert_has(e.msg, "model.merges[0]");
    ck_assert_has(e.msg, "names a token model.vocab lacks");
    unlink(path);
    free(json);
}
END_TEST

/* ---- byte fallback ------------------------------------------------------------------------ */

static size_t unhex(const char *h, char *out) {
    size_t n = 0;
    for (; h[0] && h[0] != '\n' && h[1]; h += 2) {
        unsigned v;
        ck_assert(sscanf(h, "%2x", &v) == 1);
        out[n++] = (char)v;
    }
    return n;
}

/* The cases of fixture `name` run through tk: how many differ from the library's (each printed
 * when loud). */
static int sp_cases(sn_tokenizer *tk, const char *name, bool loud) {
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/tokenizers/%s/cases.txt", SN_TEST_FIXTURES, name);
    char *all = slurp(path, &len), *text = malloc(len + 1), *want = malloc(len + 1);
    ck_assert(text && want);
    int bad = 0, n_cases = 0;
    size_t tlen = 0;
    bool has_text = false;
    sn_tokens ids = {0};
    for (char *line = all; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        sn_err e = {0};
        if (line[0] == 'T') {
            has_text = line[2] != '-';
            tlen = has_text ? unhex(line + 2, text) : 0;
        } else if (line[0] == 'I') {
            sn_tokens_free(&ids);
            ids = (sn_tokens){0};
            for (char *p = line + 1, *end; *p != '\n'; p = end) {
                long v = strtol(p, &end, 10);
                if (end == p) break;
                ck_assert(sn_tokens_push(&ids, (int32_t)v, &e) == SN_OK);
            }
            if (!has_text) continue;
            sn_tokens got = {0};
            ck_assert_msg(sn_tokenizer_encode(tk, text, tlen, &got, &e) == SN_OK, "%s", e.msg);
            bool same = got.n == ids.n;
            for (size_t i = 0; i < got.n && same; i++) same = sn_tokens_get(&got, i) == sn_tokens_get(&ids, i);
            if (!same) {
                bad++;
                if (loud) {
                    printf("%s: \"%.*s\": %zu ids, the library's %zu:", name, (int)tlen, text, got.n, ids.n);
                    for (size_t i = 0; i < got.n && i < 12; i++) printf(" %d", sn_tokens_get(&got, i));
                    printf(" | ");
                    for (size_t i = 0; i < ids.n && i < 12; i++) printf(" %d", sn_tokens_get(&ids, i));
                    printf("\n");
                }
            }
            sn_tokens_free(&got);
        } else if (line[0] == 'D') {
            size_t wlen = unhex(line + 2, want), blen;
            char *back;
            ck_assert_msg(sn_tokenizer_decode_all(tk, &ids, 0, ids.n, &back, &blen, &e) == SN_OK, "%s", e.msg);
            if (blen != wlen || memcmp(back, want, wlen)) {
                bad++;
                if (loud) printf("%s: decoded \"%.*s\", the library's \"%.*s\"\n", name, (int)blen, back, (int)wlen, want);
            }
            free(back);
            n_cases++;
        }
    }
    if (loud) printf("test_tokenizer_hf: %s: %d cases (encode and decode), %d differ from the library's\n",
                     name, n_cases, bad);
    ck_assert(n_cases > 25);
    sn_tokens_free(&ids);
    free(all);
    free(text);
    free(want);
    return bad;
}

/* The fixture's tokenizer.json with `from` (which must occur) replaced by `to`, loaded; NULL and
 * the message in e when it is refused. */
static sn_tokenizer *load_edited(const char *name, const char *from, const char *to, sn_err *e) {
    char p[4096];
    size_t len;
    snprintf(p, sizeof p, "%s/tokenizers/%s/tokenizer.json", SN_TEST_FIXTURES, name);
    char *json = slurp(p, &len), *at = strstr(json, from);
    ck_assert_msg(at, "%s lacks %s", p, from);
    size_t nf = strlen(from), nt = strlen(to);
    char *out = malloc(len + nt + 1);
    ck_assert(out);
    memcpy(out, json, (size_t)(at - json));
    memcpy(out + (at - json), to, nt);
    memcpy(out + (at - json) + nt, at + nf, len - (size_t)(at - json) - nf);
    char path[64];
    temp_file(path, out, len - nf + nt);
    sn_tokenizer *tk = NULL;
    sn_status st = sn_tokenizer_hf_load(path, &tk, e);
    ck_assert(st == SN_OK || !tk);
    unlink(path);
    free(out);
    free(json);
    return tk;
}

/* A fixture passes; each mutant (a setting read wrongly) fails some of its cases. */
static void sp_fixture(const char *name, int vocab, const char *const mutants[][2], size_t n_mutants) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer.json", SN_TEST_FIXTURES, name);
    sn_tokenizer *tk = load(path);
    ck_assert_int_eq(tk->vocab, vocab);
    ck_assert_int_eq(tk->eot, 2); /* </s> */
    ck_assert(tk->lossy);
    ck_assert_int_eq(sp_cases(tk, name, true), 0);
    sn_tokenizer_free(tk);
    for (size_t k = 0; k < n_mutants; k++) {
        sn_err e = {0};
        sn_tokenizer *m = load_edited(name, mutants[k][0], mutants[k][1], &e);
        ck_assert_msg(m, "mutant %s -> %s: %s", mutants[k][0], mutants[k][1], e.msg);
        int bad = sp_cases(m, name, false);
        ck_assert_msg(bad > 0, "%s: the mutant %s -> %s passes every case", name, mutants[k][0], mutants[k][1]);
        printf("test_tokenizer_hf: %s: mutant %s -> %s fails %d cases\n", name, mutants[k][0], mutants[k][1], bad);
        sn_tokenizer_free(m);
    }
}

#define SPC "\u2581"
/* mutants of every byte-fallback file: merges in another order, no byte fallback (fuse_unk
 * changes nothing there: every byte has its token) */
#define COMMON_MUTANTS {"\"merges\":[", "\"merges\":[\"" SPC " t\",\"t h\","}, \
    {"\"byte_fallback\":true", "\"byte_fallback\":false"}

START_TEST(byte_fallback_tinyllama) {
    static const char *const m[][2] = {
        COMMON_MUTANTS,
        {"{\"type\":\"Prepend\",\"prepend\":\"" SPC "\"},", ""}, /* no SP before the text */
        {"{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}", "{\"type\":\"Strip\",\"content\":\" \",\"start\":0,\"stop\":0}"},
        {"{\"type\":\"ByteFallback\"},", ""}, /* byte tokens decode as their names */
    };
    sp_fixture("tinyllama", 880, m, sizeof m / sizeof m[0]);
}
END_TEST

START_TEST(byte_fallback_metaspace) {
    static const char *const m[][2] = {
        COMMON_MUTANTS,
        {"\"prepend_scheme\":\"first\"", "\"prepend_scheme\":\"always\""},
        {"\"prepend_scheme\":\"first\"", "\"prepend_scheme\":\"never\""},
        {"\"split\":false", "\"split\":true"},
    };
    sp_fixture("metaspace", 880, m, sizeof m / sizeof m[0]);
}
END_TEST

START_TEST(byte_fallback_metaspace_split) {
    static const char *const m[][2] = {
        COMMON_MUTANTS,
        {"\"prepend_scheme\":\"always\"", "\"prepend_scheme\":\"first\""},
        {"\"split\":true", "\"split\":false"},
        {"{\"type\":\"Fuse\"}", "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}"},
    };
    sp_fixture("metaspace_split", 880, m, sizeof m / sizeof m[0]);
}
END_TEST

START_TEST(unk_without_byte_fallback) {
    static const char *const m[][2] = {
        {"\"fuse_unk\":true", "\"fuse_unk\":false"},
        {"\"byte_fallback\":false", "\"byte_fallback\":true"},
        {"\"unk_token\":\"<unk>\"", "\"unk_token\":null"},
        {"\"prepend_scheme\":\"never\"", "\"prepend_scheme\":\"always\""},
    };
    sp_fixture("unk", 880, m, sizeof m / sizeof m[0]);
}
END_TEST

/* Metaspace's own decoder: every SP of the first token dropped (as prepend_scheme is not never),
 * <0xXX> left as spelled. */
START_TEST(byte_fallback_metaspace_decoder) {
    static const char *const m[][2] = {
        {"\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"" SPC "\",\"prepend_scheme\":\"first\"",
         "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"" SPC "\",\"prepend_scheme\":\"never\""},
    };
    sp_fixture("metaspace_decoder", 880, m, sizeof m / sizeof m[0]);
}
END_TEST

/* Byte fallback with a byte token missing (<0xF0>: emoji are unk): as in Hugging Face's, the
 * byte tokens of a character between two unknown ones do not end the fused unk. */
START_TEST(byte_fallback_with_gaps) {
    static const char *const m[][2] = {{"\"fuse_unk\":true", "\"fuse_unk\":false"}};
    sp_fixture("gaps", 879, m, sizeof m / sizeof m[0]);
}
END_TEST

/* What the byte-fallback reader cannot reproduce is refused by name. */
START_TEST(byte_fallback_refusals) {
    static const char *const bad[][3] = {
        {"\"type\":\"Prepend\"", "\"type\":\"NFKC\"", "normalizer NFKC is not supported yet"},
        {"\"type\":\"ByteFallback\"", "\"type\":\"CTC\"", "decoder CTC is not supported yet"},
        {"\"decoder\":{\"type\":\"Sequence\"", "\"decoder\":{\"type\":\"WordPiece\"", "decoder WordPiece is not supported yet"},
        {"\"pre_tokenizer\":null", "\"pre_tokenizer\":{\"type\":\"Whitespace\"}", "pre-tokenizer Whitespace is not supported yet"},
        {"\"unk_token\":\"<unk>\"", "\"unk_token\":\"<nope>\"", "model.unk_token \"<nope>\" is not a token of model.vocab"},
        {"\"end_of_word_suffix\":null", "\"end_of_word_suffix\":\"</w>\"", "model.end_of_word_suffix \"</w>\" is not supported yet"},
        {"\"dropout\":null", "\"dropout\":0.1", "model.dropout 0.1 is not supported yet"},
        {"\"normalized\":false", "\"normalized\":true", "is normalized: not supported yet"},
        {"\"lstrip\":false", "\"lstrip\":true", "added token \"<unk>\" with lstrip: not supported yet"},
        {"\"content\":\" \",\"start\":1", "\"content\":\"x\",\"start\":1", "decoder Strip is not supported yet"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sn_err e = {0};
        sn_tokenizer *tk = load_edited("tinyllama", bad[i][0], bad[i][1], &e);
        ck_assert_msg(!tk, "case %zu loaded", i);
        ck_assert_has(e.msg, bad[i][2]);
        ck_assert_has(e.msg, "/tmp/sn_test_tok");
    }
    sn_err e = {0};
    sn_tokenizer *tk = load_edited("metaspace", "\"prepend_scheme\":\"first\"", "\"prepend_scheme\":\"sometimes\"", &e);
    ck_assert(!tk);
    ck_assert_has(e.msg, "Metaspace prepend_scheme \"sometimes\" is not supported yet");
    tk = load_edited("metaspace", "\"normalizer\":null", "\"normalizer\":{\"type\":\"Replace\",\"pattern\":"
                     "{\"String\":\" \"},\"content\":\"" SPC "\"}", &e);
    ck_assert(!tk);
    ck_assert_has(e.msg, "a normalizer with pre-tokenizer Metaspace is not supported yet");
}
END_TEST

/* The post-processor's BOS, which sinter generate puts before each prompt: TinyLlama's template
 * (<s>, id 1), none where there is no post-processor, a TemplateProcessing inside a Sequence
 * (Llama 3's form), and templates it cannot follow refused by name. */
START_TEST(post_processor_bos) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/tinyllama/tokenizer.json", SN_TEST_FIXTURES);
    sn_tokenizer *tk = load(path);
    ck_assert_int_eq(tk->bos, 1);
    sn_tokenizer_free(tk);
    snprintf(path, sizeof path, "%s/tokenizers/gpt2/tokenizer.json", SN_TEST_FIXTURES);
    tk = load(path);
    ck_assert_int_eq(tk->bos, -1);
    sn_tokenizer_free(tk);
    sn_err e = {0};
    tk = load_edited("tinyllama", "\"post_processor\":",
                     "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
                     "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"</s>\"}},"
                     "{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":"
                     "{\"</s>\":{\"id\":\"</s>\",\"ids\":[2],\"tokens\":[\"</s>\"]}}}]},\"unused\":", &e);
    ck_assert_msg(tk, "%s", e.msg);
    ck_assert_int_eq(tk->bos, 2); /* before the text; the token after it is not a BOS */
    sn_tokenizer_free(tk);
    tk = load_edited("tinyllama", "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},",
                     "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                     "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},", &e);
    ck_assert(!tk);
    ck_assert_has(e.msg, "a template with two special tokens before the text is not supported yet");
    tk = load_edited("tinyllama", "\"ids\":[1],\"tokens\":[\"<s>\"]", "\"ids\":[],\"tokens\":[]", &e);
    ck_assert(!tk);
    ck_assert_has(e.msg, "special token \"<s>\" needs one id in special_tokens");
}
END_TEST

/* A long text is one word to the normalizer form: all of Shakespeare (1 MB) encodes to the ids
 * Hugging Face's gives (their count and the FNV-1a of their decimal text, shakespeare.txt) and
 * decodes back (every character has a token or bytes). */
START_TEST(byte_fallback_long_text) {
    char path[4096];
    size_t slen;
    snprintf(path, sizeof path, "%s/tokenizers/tinyllama/tokenizer.json", SN_TEST_FIXTURES);
    sn_tokenizer *tk = load(path);
    char *text = slurp(sn_test_asset("tinyshakespeare.txt"), &slen);
    sn_tokens t = {0};
    sn_err e = {0};
    ck_assert_msg(sn_tokenizer_encode(tk, text, slen, &t, &e) == SN_OK, "%s", e.msg);
    size_t wlen, want_n;
    snprintf(path, sizeof path, "%s/tokenizers/tinyllama/shakespeare.txt", SN_TEST_FIXTURES);
    char *want = slurp(path, &wlen), digits[16];
    unsigned long long want_hash, h = 0xcbf29ce484222325ull;
    ck_assert(sscanf(want, "%zu %llx", &want_n, &want_hash) == 2);
    for (size_t i = 0; i < t.n; i++) {
        int k = snprintf(digits, sizeof digits, i ? " %d" : "%d", sn_tokens_get(&t, i));
        for (int c = 0; c < k; c++) h = (h ^ (unsigned char)digits[c]) * 0x100000001b3ull;
    }
    ck_assert_uint_eq(t.n, want_n);
    ck_assert_msg(h == want_hash, "the ids' hash %016llx, the library's %016llx", h, want_hash);
    free(want);
    char *back;
    size_t blen;
    ck_assert(sn_tokenizer_decode_all(tk, &t, 0, t.n, &back, &blen, &e) == SN_OK);
    ck_assert(blen == slen && !memcmp(back, text, slen));
    printf("test_tokenizer_hf: tinyllama: Shakespeare's %zu bytes are the library's %zu ids and back\n",
           slen, t.n);
    free(back);
    sn_tokens_free(&t);
    sn_tokenizer_free(tk);
    free(text);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokenizer_hf");
    TCase *tc = tcase_create("tokenizer_hf");
    tcase_add_test(tc, gpt2_pattern);
    tcase_add_test(tc, digits_then_gpt2_pattern);
    tcase_add_test(tc, llama3_pattern);
    tcase_add_test(tc, gpt2_files_as_tokenizer_json);
    tcase_add_test(tc, refusals_name_what);
    tcase_add_test(tc, byte_fallback_tinyllama);
    tcase_add_test(tc, byte_fallback_metaspace);
    tcase_add_test(tc, byte_fallback_metaspace_split);
    tcase_add_test(tc, unk_without_byte_fallback);
    tcase_add_test(tc, byte_fallback_with_gaps);
    tcase_add_test(tc, byte_fallback_metaspace_decoder);
    tcase_add_test(tc, byte_fallback_refusals);
    tcase_add_test(tc, post_processor_bos);
    tcase_add_test(tc, byte_fallback_long_text);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
