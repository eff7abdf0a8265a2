/* tests/test_data.c: training data: GPT-2 BPE against encodings made by GPT-2's own encoder.py,
 * the byte tokenizer, llm.c .bin shards and their corruptions (checked by message), corpora from
 * a directory, batch sampling, validation windows, and the `sinter info` report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "data/data.h"
#include "runtime/info.h"
#include "runtime/cuda/cuda_device.h"
#include "support/hash.h"

#define ck_assert_has(msg, sub)                                                                    \
    ck_assert_msg(strstr((msg), (sub)), "message\n  \"%s\"\nlacks\n  \"%s\"", (msg), (sub))

static sn_tokenizer *load_gpt2(void) {
    char enc[4096];
    snprintf(enc, sizeof enc, "%s", sn_test_asset("gpt2/encoder.json"));
    sn_tokenizer *tk = NULL;
    sn_err e = {0};
    sn_status st = sn_tokenizer_gpt2_load(enc, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_msg(st == SN_OK, "loading GPT-2's tokenizer: %s", e.msg);
    return tk;
}

static sn_tokens encode(sn_tokenizer *tk, const char *s, size_t len) {
    sn_tokens t = {0};
    sn_err e = {0};
    ck_assert_msg(sn_tokenizer_encode(tk, s, len, &t, &e) == SN_OK, "encode: %s", e.msg);
    return t;
}

static void check_ids(const char *what, const sn_tokens *t, const int *want, size_t n) {
    char got[2048] = "";
    for (size_t i = 0; i < t->n && strlen(got) < sizeof got - 16; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", sn_tokens_get(t, i));
    ck_assert_msg(t->n == n, "%s: %zu ids, want %zu: got %s", what, t->n, n, got);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(sn_tokens_get(t, i) == want[i], "%s: id %zu is %d, want %d: got %s", what, i,
                      sn_tokens_get(t, i), want[i], got);
}

/* ---- GPT-2 BPE ---- */

START_TEST(test_bpe_known) {
    sn_tokenizer *tk = load_gpt2();
    ck_assert_int_eq(tk->vocab, 50257);
    ck_assert_int_eq(tk->eot, 50256);
    sn_tokens t = encode(tk, "Hello world", 11);
    check_ids("Hello world", &t, (int[]){15496, 995}, 2);
    sn_tokens_free(&t);
    t = encode(tk, " the", 4);
    check_ids("\" the\"", &t, (int[]){262}, 1);
    sn_tokens_free(&t);
    t = encode(tk, "<|endoftext|>", 13);
    check_ids("<|endoftext|>", &t, (int[]){50256}, 1);
    sn_tokens_free(&t);
    sn_tokenizer_free(tk);
}
END_TEST

/* Made by GPT-2's encoder.py (openai/gpt-2, Python regex module) from the same files:
 * contractions, runs of spaces before words and at line ends, digits, punctuation runs, Latin-1
 * letters and symbols, general punctuation, Unicode spaces, control bytes. */
static const struct {
    const char *text;
    size_t len;
    int ids[32];
    size_t n;
} bpe_cases[] = {
    {"I don't think they'll've   gone.\012\012  Really\077! 123,456.78 times", 61, {40, 836, 470, 892, 484, 1183, 1053, 220, 220, 3750, 13, 628, 220, 16123, 12248, 17031, 11, 29228, 13, 3695, 1661}, 21},
    {"na\303\257ve caf\303\251 \342\200\224 \342\200\234quoted\342\200\235 \302\275 \302\265s\342\200\246 \303\206ON", 44, {2616, 38776, 40304, 851, 564, 250, 421, 5191, 447, 251, 25208, 31324, 82, 1399, 6184, 228, 1340}, 17},
    {"tab\011here\015\012end  \012", 16, {8658, 197, 1456, 201, 198, 437, 220, 220, 198}, 9},
    {"''s 'S x'", 9, {7061, 82, 705, 50, 2124, 6}, 6},
    {"a<|endoftext|>b", 15, {64, 50256, 65}, 3},
    {" \302\240x\343\200\200y", 8, {220, 1849, 87, 5099, 222, 88}, 6},
    {"\000\001\177\303\277", 5, {188, 189, 221, 127, 123}, 5},
    {"x\302\275y \302\265m \302\2611 \302\2522 a\303\227b\302\277c\302\263", 26, {87, 23141, 88, 31324, 76, 6354, 16, 1587, 103, 17, 257, 12906, 65, 126, 123, 66, 126, 111}, 18},
    {"\302\256, wait.\342\200\224 \042\342\200\246) \302\205the", 24, {45088, 4043, 13402, 29368, 8, 220, 126, 227, 1169}, 9},
};

START_TEST(test_bpe_reference) {
    sn_tokenizer *tk = load_gpt2();
    sn_tokens t = encode(tk, bpe_cases[_i].text, bpe_cases[_i].len);
    check_ids(bpe_cases[_i].text, &t, bpe_cases[_i].ids, bpe_cases[_i].n);
    sn_tokens_free(&t);
    sn_tokenizer_free(tk);
}
END_TEST

/* All of tinyshakespeare: the ids' count and FNV-1a hash from GPT-2's encoder.py, a round trip,
 * and the time it takes. */
START_TEST(test_bpe_shakespeare) {
    size_t len;
    char *text = NULL;
    sn_err e = {0};
    ck_assert_msg(sn_file_read(sn_test_asset("tinyshakespeare.txt"), "see assets/README.md",
                               &text, &len, &e) == SN_OK, "%s", e.msg);
    sn_tokenizer *tk = load_gpt2();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sn_tokens t = encode(tk, text, len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("test_data: GPT-2 BPE encoded tinyshakespeare (%zu bytes -> %zu tokens) in %.3f s\n",
           len, t.n, secs);
    uint64_t h = SN_HASH_INIT;
    for (size_t i = 0; i < t.n; i++) h = sn_hash_word(h, (uint64_t)sn_tokens_get(&t, i));
    ck_assert_uint_eq(t.n, 338025);
    ck_assert_msg(h == 0xb547ad363c19676eull, "ids differ from GPT-2's encoder.py (hash %llx)",
                  (unsigned long long)h);
    char *back;
    size_t blen;
    ck_assert_msg(sn_tokenizer_decode_all(tk, &t, 0, t.n, &back, &blen, &e) == SN_OK, "%s", e.msg);
    ck_assert_uint_eq(blen, len);
    ck_assert_msg(memcmp(back, text, len) == 0, "decode(encode(tinyshakespeare)) differs");
    free(back);
    /* a paragraph on its own, as the brief states it */
    sn_tokens_free(&t);
    const char *para = strstr(text, "First Citizen:\nBefore we proceed");
    ck_assert_ptr_nonnull(para);
    t = encode(tk, para, 600);
    ck_assert_msg(t.n > 100 && t.n < 300, "%zu tokens for 600 bytes of English", t.n);
    ck_assert(sn_tokenizer_decode_all(tk, &t, 0, t.n, &back, &blen, &e) == SN_OK);
    ck_assert_uint_eq(blen, 600);
    ck_assert_msg(memcmp(back, para, 600) == 0, "paragraph round trip: %.*s", (int)blen, back);
    free(back);
    sn_tokens_free(&t);
    sn_tokenizer_free(tk);
    free(text);
}
END_TEST

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    fclose(f);
}

START_TEST(test_bpe_load_errors) {
    sn_tokenizer *tk = (sn_tokenizer *)1;
    sn_err e = {0};
    sn_status st = sn_tokenizer_gpt2_load("/nonexistent/encoder.json",
                                          sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_IO);
    ck_assert_ptr_null(tk);
    ck_assert_has(e.msg, "/nonexistent/encoder.json");
    ck_assert_has(e.msg, "GPT-2's encoder.json");
    char path[] = "/tmp/sn_test_encXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_file(path, "{\"a\": 0, \"b\": }", 15);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, "byte 14: unexpected character"); /* json-c's words */
    write_file(path, "{\"a\": 0, \"b\"", 12);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, "the JSON ends early (truncated file?)");
    write_file(path, "{\"a\": 0, \"b\": \"1\"}", 18);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, "token \"b\": its id is a JSON string, not an integer");
    write_file(path, "{\"a\": 0, \"b\": 2}", 16);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, "2 tokens but ids go up to 2");
    /* an empty key (undefined behaviour on a NULL buffer, found by tests/fuzz/fuzz_bpe) */
    write_file(path, "{\"a\": 0, \"\": 1}", 15);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, "token 1 is the empty string");
    /* a NUL escape in a key: json-c's C-string key was cut short at it, silently (issue 19);
     * an escaped backslash before "u0000" is no escape */
    write_file(path, "{\"a\": 0, \"b\\u0000c\": 1}", 23);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, "byte 11: a \\u0000 (NUL) escape");
    write_file(path, "{\"a\": 0, \"b\\\\u0000\": 2}", 23);
    st = sn_tokenizer_gpt2_load(path, sn_test_asset("gpt2/vocab.bpe"), &tk, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_msg(!strstr(e.msg, "NUL"), "%s", e.msg);
    unlink(path);
}
END_TEST

/* A copy of GPT-2's vocab.bpe cut or changed by edit, loaded with the real encoder.json:
 * refused with a message holding want (a truncated file was accepted, tokenizing differently). */
static void merges_refused(const char *what, size_t cut, bool swap, const char *want) {
    char *text;
    size_t len;
    sn_err e = {0};
    ck_assert_msg(sn_file_read(sn_test_asset("gpt2/vocab.bpe"), "", &text, &len, &e) == SN_OK, "%s", e.msg);
    if (cut) len = cut;
    if (swap) { /* exchange the 3rd and 4th merges (lines 4 and 5) */
        char *l3 = strchr(strchr(strchr(text, '\n') + 1, '\n') + 1, '\n') + 1;
        char *l4 = strchr(l3, '\n') + 1, *l5 = strchr(l4, '\n') + 1;
        char tmp[64];
        size_t n3 = (size_t)(l4 - l3), n4 = (size_t)(l5 - l4);
        memcpy(tmp, l3, n3);
        memmove(l3, l4, n4);
        memcpy(l3 + n4, tmp, n3);
    }
    char path[] = "/tmp/sn_test_bpeXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_file(path, text, len);
    free(text);
    sn_tokenizer *tk = (sn_tokenizer *)1;
    sn_status st = sn_tokenizer_gpt2_load(sn_test_asset("gpt2/encoder.json"), path, &tk, &e);
    unlink(path);
    ck_assert_msg(st == SN_ERR_PARSE, "%s vocab.bpe: status %d, want SN_ERR_PARSE", what, st);
    ck_assert_ptr_null(tk);
    ck_assert_has(e.msg, want);
}

START_TEST(test_bpe_merges_checked) {
    /* cut at a line end (every line is a valid merge), mid-file, and just before the last line */
    merges_refused("half", 228002, false, "25837 merges, but encoder.json's 50257 tokens need 50000");
    merges_refused("all but the last line", 456318 - 9, false, "49999 merges, but encoder.json's "
                   "50257 tokens need 50000 (256 bytes + <|endoftext|> + one token per merge): "
                   "the file is truncated");
    merges_refused("reordered", 0, true, ":4: merge 2 makes token 259, but in GPT-2's files merge "
                   "r makes token 256 + r = 258");
}
END_TEST

/* ---- bytes ---- */

START_TEST(test_bytes_roundtrip) {
    sn_tokenizer *tk = sn_tokenizer_bytes_new();
    ck_assert_int_eq(tk->vocab, 256);
    char all[256];
    for (int i = 0; i < 256; i++) all[i] = (char)(255 - i);
    sn_tokens t = encode(tk, all, 256);
    ck_assert_uint_eq(t.n, 256);
    for (int i = 0; i < 256; i++) ck_assert_int_eq(sn_tokens_get(&t, (size_t)i), 255 - i);
    char *back;
    size_t len;
    sn_err e = {0};
    ck_assert(sn_tokenizer_decode_all(tk, &t, 0, 256, &back, &len, &e) == SN_OK);
    ck_assert_uint_eq(len, 256);
    ck_assert(memcmp(back, all, 256) == 0);
    free(back);
    size_t k;
    ck_assert_ptr_null(sn_tokenizer_decode(tk, 256, &k));
    sn_tokens_free(&t);
    sn_tokens_push(&t, 300, &e);
    ck_assert_int_eq(sn_tokenizer_decode_all(tk, &t, 0, 1, &back, &len, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "token 0 has id 300, not in the bytes tokenizer's vocabulary of 256");
    sn_tokens_free(&t);
    sn_tokenizer_free(tk);
}
END_TEST

START_TEST(test_tokens_widen_split) {
    sn_tokens t = {0};
    sn_err e = {0};
    for (int i = 0; i < 2000; i++) ck_assert(sn_tokens_push(&t, i * 7, &e) == SN_OK);
    ck_assert_int_eq(t.width, 2);
    ck_assert(sn_tokens_push(&t, 70000, &e) == SN_OK);
    ck_assert_int_eq(t.width, 4);
    ck_assert_uint_eq(t.n, 2001);
    for (int i = 0; i < 2000; i++) ck_assert_int_eq(sn_tokens_get(&t, (size_t)i), i * 7);
    ck_assert_int_eq(sn_tokens_get(&t, 2000), 70000);
    ck_assert_int_eq(sn_tokens_max(&t), 70000);
    sn_tokens tr, va;
    ck_assert(sn_tokens_split(&t, 0.1, &tr, &va, &e) == SN_OK);
    ck_assert_uint_eq(va.n, 200);
    ck_assert_uint_eq(tr.n, 1801);
    ck_assert_int_eq(sn_tokens_get(&tr, 1800), 1800 * 7);
    ck_assert_int_eq(sn_tokens_get(&va, 0), 1801 * 7);
    ck_assert_int_eq(sn_tokens_get(&va, 199), 70000);
    ck_assert_int_eq(sn_tokens_split(&t, 1.0, &tr, &va, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "validation fraction 1 is not in [0, 1)");
    sn_tokens_free(&t);
}
END_TEST

/* ---- shards ---- */

static void tmp_shard(char *path, size_t n, int modulo) {
    strcpy(path, "/tmp/sn_test_shardXXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    sn_tokens t = {0};
    sn_err e = {0};
    for (size_t i = 0; i < n; i++) sn_tokens_push(&t, (int32_t)((i * 7919) % (size_t)modulo), &e);
    ck_assert_msg(sn_shard_write(path, &t, &e) == SN_OK, "%s", e.msg);
    sn_tokens_free(&t);
}

/* Overwrites 4 bytes at off with v, or truncates the file to off bytes when v < 0. */
static void corrupt(const char *path, long off, int32_t v) {
    if (v < 0) {
        ck_assert_int_eq(truncate(path, off), 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, off, SEEK_SET);
    fwrite(&v, 4, 1, f);
    fclose(f);
}

START_TEST(test_shard_roundtrip) {
    char path[64];
    tmp_shard(path, 5000, 50257);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_size, 1024 + 2 * 5000);
    FILE *f = fopen(path, "rb");
    int32_t h[3];
    ck_assert_uint_eq(fread(h, 4, 3, f), 3);
    fclose(f);
    ck_assert_int_eq(h[0], 20240520);
    ck_assert_int_eq(h[1], 1);
    ck_assert_int_eq(h[2], 5000);
    sn_tokens t;
    sn_err e = {0};
    ck_assert_msg(sn_shard_read(path, 50257, &t, &e) == SN_OK, "%s", e.msg);
    ck_assert_uint_eq(t.n, 5000);
    for (size_t i = 0; i < 5000; i++)
        ck_assert_int_eq(sn_tokens_get(&t, i), (int)((i * 7919) % 50257));
    sn_tokens_free(&t);
    unlink(path);
}
END_TEST

static const struct {
    long off;
    int32_t value; /* -1: truncate to off */
    int vocab;
    const char *msg;
} shard_faults[] = {
    {0, 1234, 0, "bad magic: expected 20240520, found 1234"},
    {4, 2, 0, "unsupported version: expected 1, found 2"},
    {1024 + 2 * 99, -1, 0, "file size: expected 1224 bytes (1024-byte header + 2 x 100 tokens), found 1222"},
    {8, 101, 0, "file size: expected 1226 bytes (1024-byte header + 2 x 101 tokens), found 1224"},
    {100, -1, 0, "header: expected 1024 bytes, found 100"},
    {0, 0, 256, "token 1: expected an id < vocab 256, found 7919"},
};

START_TEST(test_shard_corrupt) {
    char path[64];
    tmp_shard(path, 100, 50257);
    if (!shard_faults[_i].vocab) /* else the file is fine and its ids are checked */
        corrupt(path, shard_faults[_i].off, shard_faults[_i].value);
    sn_tokens t;
    sn_err e = {0};
    sn_status st = sn_shard_read(path, shard_faults[_i].vocab, &t, &e);
    ck_assert_int_eq(st, SN_ERR_PARSE);
    ck_assert_has(e.msg, path);
    ck_assert_has(e.msg, shard_faults[_i].msg);
    ck_assert_ptr_null(t.ids);
    unlink(path);
}
END_TEST

/* ---- corpora ---- */

START_TEST(test_corpus_dir) {
    char dir[] = "/tmp/sn_test_corpusXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *names[] = {"b", "a.txt", "a.dat", ".hidden", "c.u8", "sub/x"};
    const char *texts[] = {"second", "first\n", "DAT", "HIDDEN", "U8", "SUB"};
    char p[256];
    snprintf(p, sizeof p, "%s/sub", dir);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        write_file(p, texts[i], strlen(texts[i]));
    }
    sn_text t;
    sn_err e = {0};
    ck_assert_msg(sn_text_load(dir, &t, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(t.n_files, 2);
    ck_assert_str_eq(t.bytes, "first\nsecond");
    sn_text_free(&t);
    /* one file read alone */
    snprintf(p, sizeof p, "%s/b", dir);
    ck_assert(sn_text_load(p, &t, &e) == SN_OK);
    ck_assert_str_eq(t.bytes, "second");
    sn_text_free(&t);
    for (int i = 5; i >= 0; i--) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    /* only skipped files left: empty */
    snprintf(p, sizeof p, "%s/x.dat", dir);
    write_file(p, "DAT", 3);
    ck_assert_int_eq(sn_text_load(dir, &t, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "is empty");
    ck_assert_has(e.msg, "install Debian's fortunes package or pass --data FILE");
    unlink(p);
    snprintf(p, sizeof p, "%s/sub", dir);
    rmdir(p);
    rmdir(dir);
}
END_TEST

START_TEST(test_corpus_missing) {
    sn_text t;
    sn_err e = {0};
    ck_assert_int_eq(sn_text_load("/nonexistent/fortunes", &t, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "/nonexistent/fortunes");
    ck_assert_has(e.msg, "install Debian's fortunes package or pass --data FILE");
    ck_assert_ptr_null(t.bytes);
}
END_TEST

/* The default corpus, where installed: text only (the binary .dat indexes hold NUL bytes). */
START_TEST(test_corpus_fortunes) {
    struct stat sb;
    if (stat(SN_DEFAULT_CORPUS, &sb) != 0) return; /* not installed here */
    sn_text t;
    sn_err e = {0};
    ck_assert_msg(sn_text_load(SN_DEFAULT_CORPUS, &t, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_ge(t.n_files, 5);
    ck_assert_uint_gt(t.len, 100000);
    ck_assert_msg(memchr(t.bytes, 0, t.len) == NULL, "a NUL byte: a .dat file was read");
    sn_text_free(&t);
}
END_TEST

/* ---- batches ---- */

static sn_tokens ramp(size_t n) {
    sn_tokens t = {0};
    sn_err e = {0};
    for (size_t i = 0; i < n; i++) sn_tokens_push(&t, (int32_t)i, &e);
    return t;
}

START_TEST(test_batch_sample) {
    enum { B = 4, T = 16 };
    sn_tokens t = ramp(5000);
    int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T], in3[B * T], tg3[B * T];
    sn_err e = {0};
    sn_rng r1 = sn_rng_seed(42), r2 = sn_rng_seed(42), r3 = sn_rng_seed(43);
    ck_assert(sn_batch_sample(&t, B, T, &r1, in, tg, &e) == SN_OK);
    ck_assert(sn_batch_sample(&t, B, T, &r2, in2, tg2, &e) == SN_OK);
    ck_assert(sn_batch_sample(&t, B, T, &r3, in3, tg3, &e) == SN_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            int32_t x = in[b * T + i];
            ck_assert_int_eq(x, in[b * T] + i);    /* a contiguous window */
            ck_assert_int_eq(tg[b * T + i], x + 1); /* shifted by one */
            ck_assert_int_lt(tg[b * T + i], 5000);
        }
    ck_assert(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
    ck_assert_msg(memcmp(in, in3, sizeof in) != 0, "seeds 42 and 43 gave the same batch");
    ck_assert_msg(in[0] != in[T] || in[T] != in[2 * T], "rows start at the same place");
    sn_tokens_free(&t);
    /* every start is reachable, the last one included: T+1 tokens have exactly one window */
    t = ramp(T + 1);
    ck_assert(sn_batch_sample(&t, B, T, &r1, in, tg, &e) == SN_OK);
    ck_assert_int_eq(in[3 * T], 0);
    ck_assert_int_eq(tg[4 * T - 1], T);
    sn_tokens_free(&t);
}
END_TEST

START_TEST(test_batch_too_short) {
    sn_tokens t = ramp(16);
    int32_t in[64], tg[64];
    sn_err e = {0};
    sn_rng r = sn_rng_seed(1);
    ck_assert_int_eq(sn_batch_sample(&t, 4, 16, &r, in, tg, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "too little data: 16 tokens, but one window needs T+1 = 17");
    sn_val_iter it;
    ck_assert_int_eq(sn_val_iter_init(&it, &t, 1, 16, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "too little validation data: 16 tokens");
    sn_tokens_free(&t);
}
END_TEST

START_TEST(test_val_iter) {
    enum { B = 2, T = 8 };
    sn_tokens t = ramp(3 * B * T + 5); /* 3 full batches, then a partial one left out */
    sn_val_iter it;
    sn_err e = {0};
    ck_assert_msg(sn_val_iter_init(&it, &t, B, T, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(it.n_batches, 3);
    int32_t in[B * T], tg[B * T];
    for (int pass = 0; pass < 2; pass++) {
        int k = 0;
        while (sn_val_iter_next(&it, in, tg)) {
            for (int i = 0; i < B * T; i++) {
                ck_assert_int_eq(in[i], k * B * T + i); /* windows in order, not overlapping */
                ck_assert_int_eq(tg[i], in[i] + 1);
            }
            k++;
        }
        ck_assert_int_eq(k, 3);
        sn_val_iter_reset(&it);
    }
    sn_tokens_free(&t);
}
END_TEST

/* ---- info ---- */

START_TEST(test_info_report) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sn_info_print(f);
    fclose(f);
    ck_assert_has(buf, "sinter " SN_VERSION "\n");
    ck_assert_has(buf, "compiler:");
    ck_assert_has(buf, "cpu:");
    ck_assert_has(buf, "AVX2 ");
    char why[512];
    int n = sn_cuda_device_count(why, sizeof why);
    if (n == 0) {
        ck_assert_has(buf, "no CUDA device (");
        ck_assert_msg(why[0], "no device and no reason given");
        ck_assert_has(buf, why);
    } else {
        ck_assert_has(buf, "  device 0: ");
    }
    printf("%s", buf);
    free(buf);
}
END_TEST

/* In order: row b is the window at pos + b T, the position moves B T on, and a batch that
 * would run past the end starts again at 0; too little data for one batch is refused. */
START_TEST(batches_in_order) {
    sn_tokens t = {0};
    sn_err e;
    for (int i = 0; i < 50; i++) ck_assert(sn_tokens_push(&t, 100 + i, &e) == SN_OK);
    enum { B = 2, T = 8 };
    int32_t in[B * T], tg[B * T];
    uint64_t pos = 0;
    int starts[] = {0, 16, 32, 0}; /* 50 tokens: three batches of 16 + 1, then the epoch ends */
    for (int k = 0; k < 4; k++) {
        ck_assert(sn_batch_next(&t, B, T, &pos, in, tg, &e) == SN_OK);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) {
                ck_assert_int_eq(in[b * T + i], 100 + starts[k] + b * T + i);
                ck_assert_int_eq(tg[b * T + i], 100 + starts[k] + b * T + i + 1);
            }
        ck_assert_int_eq(pos, (uint64_t)(starts[k] + B * T));
    }
    pos = 0;
    ck_assert_int_eq(sn_batch_next(&t, 4, 16, &pos, in, tg, &e), SN_ERR_INVALID);
    ck_assert_has(e.msg, "B*T+1 = 65");
    sn_tokens_free(&t);
}
END_TEST

int main(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bpe_known);
    tcase_add_loop_test(tc, test_bpe_reference, 0, (int)(sizeof bpe_cases / sizeof bpe_cases[0]));
    tcase_add_test(tc, test_bpe_shakespeare);
    tcase_add_test(tc, test_bpe_load_errors);
    tcase_add_test(tc, test_bpe_merges_checked);
    tcase_add_test(tc, test_bytes_roundtrip);
    tcase_add_test(tc, test_tokens_widen_split);
    tcase_add_test(tc, test_shard_roundtrip);
    tcase_add_loop_test(tc, test_shard_corrupt, 0,
                        (int)(sizeof shard_faults / sizeof shard_faults[0]));
    tcase_add_test(tc, test_corpus_dir);
    tcase_add_test(tc, test_corpus_missing);
    tcase_add_test(tc, test_corpus_fortunes);
    tcase_add_test(tc, test_batch_sample);
    tcase_add_test(tc, test_batch_too_short);
    tcase_add_test(tc, batches_in_order);
    tcase_add_test(tc, test_val_iter);
    tcase_add_test(tc, test_info_report);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
