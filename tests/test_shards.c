/* tests/test_shards.c: many llm.c shards read as one stream (sn_shards_read): a glob pattern's
 * matches concatenated in name order (not the order they were made), a plain path and a file
 * whose name holds a pattern's characters read as one file, and the refusals checked by message:
 * a pattern matching nothing, a match that is no shard, an id outside the vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "data/data.h"

#define ck_assert_has(msg, sub)                                                                    \
    ck_assert_msg(strstr((msg), (sub)), "message\n  \"%s\"\nlacks\n  \"%s\"", (msg), (sub))

static char dir[64];

/* Writes dir/name: n ids counting up from first (mod 50000). */
static void put_shard(const char *name, size_t n, int first) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    sn_tokens t = {0};
    sn_err e = {0};
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(sn_tokens_push(&t, (int32_t)((first + (int)i) % 50000), &e), SN_OK);
    ck_assert_msg(sn_shard_write(path, &t, &e) == SN_OK, "%s", e.msg);
    sn_tokens_free(&t);
}

static sn_status read_pattern(const char *pattern, int vocab, sn_tokens *t, int *n, sn_err *e) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, pattern);
    return sn_shards_read(path, vocab, t, n, e);
}

static void setup(void) {
    strcpy(dir, "/tmp/sn_test_shardsXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_pattern_in_name_order) {
    put_shard("train_000003.bin", 70, 300); /* made first, read last */
    put_shard("train_000001.bin", 100, 100);
    put_shard("train_000002.bin", 0, 0);   /* an empty shard adds nothing */
    put_shard("train_000010.bin", 5, 1000); /* after 000003 in byte order */
    put_shard("val_000001.bin", 9, 0);
    sn_tokens t;
    sn_err e = {0};
    int n = 0;
    ck_assert_msg(read_pattern("train_*.bin", 50257, &t, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, 4);
    ck_assert_uint_eq(t.n, 175);
    ck_assert_int_eq(t.width, 2);
    for (size_t i = 0; i < 175; i++) {
        int want = i < 100 ? 100 + (int)i : i < 170 ? 300 + (int)i - 100 : 1000 + (int)i - 170;
        ck_assert_int_eq(sn_tokens_get(&t, i), want);
    }
    sn_tokens_free(&t);
    ck_assert_msg(read_pattern("train_00000[12].bin", 0, &t, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(t.n, 100);
    sn_tokens_free(&t);
}
END_TEST

START_TEST(test_plain_paths) {
    put_shard("one.bin", 10, 7);
    put_shard("odd[1].bin", 3, 40); /* a pattern's characters in a name that exists */
    put_shard("odd1.bin", 4, 50);
    sn_tokens t;
    sn_err e = {0};
    int n = 0;
    ck_assert_msg(read_pattern("one.bin", 256, &t, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(t.n, 10);
    ck_assert_int_eq(sn_tokens_get(&t, 0), 7);
    sn_tokens_free(&t);
    ck_assert_msg(read_pattern("odd[1].bin", 256, &t, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_uint_eq(t.n, 3); /* the file of that name, not odd1.bin which the pattern matches */
    sn_tokens_free(&t);
    ck_assert_int_eq(read_pattern("two.bin", 256, &t, &n, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "cannot read shard ");
    ck_assert_has(e.msg, "two.bin: No such file or directory");
    ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(test_refusals) {
    put_shard("train_1.bin", 10, 0);
    put_shard("train_2.bin", 10, 250);
    sn_tokens t;
    sn_err e = {0};
    int n = 0;
    ck_assert_int_eq(read_pattern("nothing_*.bin", 256, &t, &n, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "no file matches the shard pattern /tmp/sn_test_shards");
    ck_assert_has(e.msg, "/nothing_*.bin: check its folder and pattern");
    ck_assert_int_eq(read_pattern("nofolder/train_*.bin", 256, &t, &n, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "no file matches the shard pattern");
    /* an id of the second shard outside the vocabulary: that shard and the token named */
    ck_assert_int_eq(read_pattern("train_*.bin", 256, &t, &n, &e), SN_ERR_PARSE);
    ck_assert_has(e.msg, "train_2.bin: token 6: expected an id < vocab 256, found 256");
    ck_assert_ptr_null(t.ids);
    ck_assert_int_eq(n, 0);
    /* a folder and a file that is no shard among the matches */
    char path[256];
    snprintf(path, sizeof path, "%s/train_3.bin", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(read_pattern("train_*.bin", 0, &t, &n, &e), SN_ERR_IO);
    ck_assert_has(e.msg, "train_3.bin: it is a directory, not a regular file");
    ck_assert_has(e.msg, "it matched the shard pattern /tmp/sn_test_shards");
    ck_assert_int_eq(rmdir(path), 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not a shard", f);
    fclose(f);
    ck_assert_int_eq(read_pattern("train_*.bin", 0, &t, &n, &e), SN_ERR_PARSE);
    ck_assert_has(e.msg, "train_3.bin: header: expected 1024 bytes, found 11: not an llm.c token shard");
    /* a shard of another version (another width of ids) */
    int32_t h[256] = {SN_SHARD_MAGIC, 2, 0};
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(h, sizeof h, 1, f);
    fclose(f);
    ck_assert_int_eq(read_pattern("train_*.bin", 0, &t, &n, &e), SN_ERR_PARSE);
    ck_assert_has(e.msg, "train_3.bin: unsupported version: expected 1, found 2");
}
END_TEST

int main(void) {
    Suite *s = suite_create("shards");
    TCase *tc = tcase_create("shards");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_pattern_in_name_order);
    tcase_add_test(tc, test_plain_paths);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
