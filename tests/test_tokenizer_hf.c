/* tests/test_tokenizer_hf.c: Hugging Face tokenizer.json (data/bpe_hf.c) against the ids that
 * Hugging Face's own `tokenizers` gives (tools/make_tokenizer_fixtures.py: small byte-level BPE
 * models with GPT-2's, SmolLM's (Digits) and Llama 3's pre-tokenizers, a sample text with
 * contractions, digit runs, tabs, CRLF, Latin-1, Greek, CJK, punctuation runs and special
 * tokens); GPT-2's own files rewritten as a tokenizer.json encoding Shakespeare the same as the
 * GPT-2 reader; the files it refuses, each by what it lacks. */
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
        {"{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true}}", "byte-fallback BPE"},
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

int main(void) {
    Suite *s = suite_create("tokenizer_hf");
    TCase *tc = tcase_create("tokenizer_hf");
    tcase_add_test(tc, gpt2_pattern);
    tcase_add_test(tc, digits_then_gpt2_pattern);
    tcase_add_test(tc, llama3_pattern);
    tcase_add_test(tc, gpt2_files_as_tokenizer_json);
    tcase_add_test(tc, refusals_name_what);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
