/* test_ckpt_reader.c: the checkpoint reader on crafted files whose header and CRC are
 * consistent (a file people download and share): records that overrun the file, curves whose
 * point count overflows the size arithmetic, NaN and infinite weights, an fp16 run's loss scaler
 * that is not a positive float, two records of one name or a name holding a NUL byte (every
 * reader); and the writer, which never writes a diverged (non-finite) state. Each is refused
 * with a message, nothing crashes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <unistd.h>

#include "data/data.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "train/checkpoint.h"
#include "harness.h"

enum { B = 2, T = 8, HDR = 32 };

typedef struct {
    sn_graph *g;
    sn_trainer *t;
    sn_run_state run;
    bool fp16; /* the fp16 autocast graph: a trainer with dynamic loss scaling */
} rig;

static void rig_init_at(rig *r, bool fp16) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    r->g = sn_graph_new();
    r->fp16 = fp16;
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(r->g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    if (fp16) {
        sn_pipeline_opts po = sn_pipeline_defaults();
        po.backward = true;
        po.precision = SN_PRECISION_FP16;
        ck_assert_msg(sn_compile(r->g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    } else {
        ck_assert_msg(sn_backward(r->g, m.loss, &e) == SN_OK, "%s", e.msg);
    }
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    r->t = sn_trainer_new(r->g, &o, &e);
    ck_assert_msg(r->t, "%s", e.msg);
    r->run = (sn_run_state){0};
    sn_run_meta_set(&r->run, "model", "tiny");
    r->run.data_rng = sn_rng_seed(7);
    ck_assert(sn_series_push(&r->run.train_loss, 1, 4.0, &e) == SN_OK);
    ck_assert(sn_series_push(&r->run.train_loss, 2, 3.5, &e) == SN_OK);
    ck_assert(!fp16 || sn_trainer_loss_scaling(r->t));
}

static void rig_init(rig *r) { rig_init_at(r, false); }

static void rig_free(rig *r) {
    sn_run_state_free(&r->run);
    sn_trainer_free(r->t);
    sn_graph_free(r->g);
}

/* A valid checkpoint of a fresh tiny model, in memory (malloc'd; *len bytes). */
static uint8_t *good_bytes(rig *r, size_t *len) {
    char path[] = "/tmp/sn_ckr_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    sn_err e;
    ck_assert_msg(sn_checkpoint_save(path, r->t, &r->run, &e) == SN_OK, "%s", e.msg);
    char *b;
    ck_assert_msg(sn_file_read(path, "", &b, len, &e) == SN_OK, "%s", e.msg);
    unlink(path);
    return (uint8_t *)b;
}

/* Rewrites the header's payload size and CRC-32 so that they agree with the bytes. */
static void fix_header(uint8_t *b, size_t len) {
    uint64_t payload = len - HDR;
    uint32_t crc = (uint32_t)crc32_z(0, b + HDR, payload);
    memcpy(b + 16, &payload, 8);
    memcpy(b + 24, &crc, 4);
}

/* The offset of the body of the record (kind, name), or 0; *size its size. */
static size_t find_body(const uint8_t *b, size_t len, uint32_t kind, const char *name, uint64_t *size) {
    for (size_t p = HDR; p + 16 <= len;) {
        uint32_t k, nl;
        memcpy(&k, b + p, 4);
        memcpy(&nl, b + p + 4, 4);
        memcpy(size, b + p + 8 + nl, 8);
        if (k == kind && nl == strlen(name) && !memcmp(b + p + 8, name, nl)) return p + 16 + nl;
        p += 16 + nl + *size;
    }
    return 0;
}

/* Loading b must fail with needle in the message, leaving the trainer at step 0. */
static void expect_refused(rig *r, const uint8_t *b, size_t len, sn_status code, const char *needle) {
    rig fresh;
    rig_init_at(&fresh, r->fp16);
    sn_err e = {0};
    sn_status s = sn_checkpoint_load_bytes("crafted.ckpt", b, len, fresh.t, &fresh.run, &e);
    ck_assert_msg(s == code && strstr(e.msg, needle) && strstr(e.msg, "crafted.ckpt"),
                  "status %d, message: %s", s, e.msg);
    ck_assert_int_eq(sn_trainer_step_count(fresh.t), 0);
    ck_assert_int_eq(fresh.run.train_loss.n, 2);
    rig_free(&fresh);
}

/* A record whose body runs past the end: refused (it was freed twice). */
START_TEST(overrunning_record) {
    rig r;
    rig_init(&r);
    size_t len;
    uint8_t *good = good_bytes(&r, &len);
    sn_err e;
    rig fresh;
    rig_init(&fresh);
    ck_assert_msg(sn_checkpoint_load_bytes("good", good, len, fresh.t, &fresh.run, &e) == SN_OK, "%s", e.msg);
    rig_free(&fresh);

    uint8_t *b = malloc(len + 24);
    memcpy(b, good, len);
    uint32_t kind = 99, nl = 3;
    uint64_t body = 1u << 20; /* far past the end */
    memcpy(b + len, &kind, 4);
    memcpy(b + len + 4, &nl, 4);
    memcpy(b + len + 8, "xyz", 3);
    memcpy(b + len + 11, &body, 8);
    memset(b + len + 19, 0, 5);
    fix_header(b, len + 24);
    expect_refused(&r, b, len + 24, SN_ERR_PARSE, "overruns the file");
    /* cut inside a record's header, and inside its name */
    fix_header(b, len + 6);
    expect_refused(&r, b, len + 6, SN_ERR_PARSE, "overruns the file");
    fix_header(b, len + 10);
    expect_refused(&r, b, len + 10, SN_ERR_PARSE, "overruns the file");
    free(b);
    free(good);
    rig_free(&r);
}
END_TEST

/* A loss curve claiming 2^60 + n points: 16 x count wraps to the true size; refused (it read
 * far out of bounds). */
START_TEST(series_count_overflow) {
    rig r;
    rig_init(&r);
    size_t len;
    uint8_t *b = good_bytes(&r, &len);
    uint64_t size, n;
    size_t at = find_body(b, len, 4 /* SERIES */, "train_loss", &size);
    ck_assert(at && size == 8 + 16 * 2);
    memcpy(&n, b + at, 8);
    ck_assert(n == 2);
    n += 1ull << 60;
    memcpy(b + at, &n, 8);
    fix_header(b, len);
    expect_refused(&r, b, len, SN_ERR_PARSE, "train_loss curve is malformed");
    free(b);
    rig_free(&r);
}
END_TEST

/* NaN or infinite weights and moments: refused, naming the parameter. */
START_TEST(non_finite_weights) {
    rig r;
    rig_init(&r);
    size_t len;
    uint8_t *good = good_bytes(&r, &len), *b = malloc(len);
    uint64_t size;
    size_t at = find_body(good, len, 5 /* PARAM */, "wte", &size);
    ck_assert(at);
    uint32_t rank;
    memcpy(&rank, good + at, 4);
    size_t w = at + 4 + 8 * rank, numel = (size - 4 - 8 * rank) / 12;
    const float bad[2] = {NAN, INFINITY};
    const char *part[3] = {"weights of parameter wte (element 3)",
                           "first moments of parameter wte (element 3)",
                           "second moments of parameter wte (element 3)"};
    for (int k = 0; k < 3; k++)
        for (int v = 0; v < 2; v++) {
            memcpy(b, good, len);
            memcpy(b + w + 4 * (k * numel + 3), &bad[v], 4);
            fix_header(b, len);
            expect_refused(&r, b, len, SN_ERR_NUMERIC, part[k]);
        }
    free(b);
    free(good);
    rig_free(&r);
}
END_TEST

/* An fp16 run's loss scaler: saved and restored; a scale that is 0, negative, NaN, infinite or
 * past FLT_MAX, counts past the step, or no scaler record at all: refused (each loaded, and the
 * run would have skipped every step from there on, or converted a double no float holds). */
START_TEST(loss_scaler_checked) {
    rig r;
    rig_init_at(&r, true);
    sn_trainer_set_step_count(r.t, 5);
    sn_trainer_set_scaler(r.t, (sn_loss_scaler){.scale = 512, .skipped = 2, .clean = 3});
    size_t len;
    uint8_t *good = good_bytes(&r, &len), *b = malloc(len);
    sn_err e;
    rig fresh;
    rig_init_at(&fresh, true);
    ck_assert_msg(sn_checkpoint_load_bytes("good", good, len, fresh.t, &fresh.run, &e) == SN_OK, "%s", e.msg);
    sn_loss_scaler sc = sn_trainer_scaler(fresh.t);
    ck_assert(sc.scale == 512 && sc.skipped == 2 && sc.clean == 3);
    ck_assert_int_eq(sn_trainer_step_count(fresh.t), 5);
    rig_free(&fresh);

    uint64_t size;
    size_t at = find_body(good, len, 2 /* STEP */, "loss_scaler", &size);
    ck_assert(at && size == 24);
    const double scales[] = {0, -512, NAN, INFINITY, 1e300, 1e-300};
    for (int i = 0; i < 6; i++) {
        memcpy(b, good, len);
        memcpy(b + at, &scales[i], 8);
        fix_header(b, len);
        expect_refused(&r, b, len, SN_ERR_PARSE, "loss scaler");
    }
    for (int k = 1; k <= 2; k++) { /* skipped, clean: 6 > step 5 */
        memcpy(b, good, len);
        uint64_t six = 6;
        memcpy(b + at + 8 * k, &six, 8);
        fix_header(b, len);
        expect_refused(&r, b, len, SN_ERR_PARSE, "loss scaler");
    }
    memcpy(b, good, len); /* renamed: the scaler is missing */
    memcpy(b + at - 8 - 1, "X", 1);
    fix_header(b, len);
    expect_refused(&r, b, len, SN_ERR_PARSE, "loss scaler record is missing");
    free(b);
    free(good);
    rig_free(&r);
}
END_TEST

/* The writer refuses a state with a NaN or infinite weight and keeps the old file. */
START_TEST(diverged_state_not_saved) {
    rig r;
    rig_init(&r);
    char path[] = "/tmp/sn_ckw_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_err e;
    ck_assert_msg(sn_checkpoint_save(path, r.t, &r.run, &e) == SN_OK, "%s", e.msg);
    char *before, *after;
    size_t n0, n1;
    ck_assert(sn_file_read(path, "", &before, &n0, &e) == SN_OK);
    const sn_node *p = sn_trainer_param_node(r.t, 0);
    float *w = calloc((size_t)sn_numel(p), sizeof *w);
    ck_assert(w && sn_trainer_get_param(r.t, 0, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
    float keep = w[1];
    w[1] = INFINITY;
    ck_assert(sn_trainer_set_param(r.t, 0, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
    ck_assert_int_eq(sn_checkpoint_save(path, r.t, &r.run, &e), SN_ERR_NUMERIC);
    ck_assert_msg(strstr(e.msg, path) && strstr(e.msg, "NaN or infinite") &&
                  strstr(e.msg, p->name) && strstr(e.msg, "unchanged"), "%s", e.msg);
    w[1] = keep;
    ck_assert(sn_trainer_set_param(r.t, 0, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
    free(w);
    ck_assert(sn_file_read(path, "", &after, &n1, &e) == SN_OK);
    ck_assert(n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
    unlink(path);
    rig_free(&r);
}
END_TEST

/* The first record of kind in b: its offset and its whole length (header, name, body). */
static size_t first_record(const uint8_t *b, size_t len, uint32_t kind, size_t *rec_len) {
    for (size_t p = HDR; p + 16 <= len;) {
        uint32_t k, nl;
        uint64_t size;
        memcpy(&k, b + p, 4);
        memcpy(&nl, b + p + 4, 4);
        memcpy(&size, b + p + 8 + nl, 8);
        if (k == kind) return *rec_len = 16 + nl + (size_t)size, p;
        p += 16 + nl + size;
    }
    return 0;
}

/* b with its record at off (rec_len bytes) appended again, its kind set to kind and, when
 * nul_at > 0, a NUL byte put into its name at that index; the header fixed. */
static uint8_t *with_copy(const uint8_t *b, size_t len, size_t off, size_t rec_len, uint32_t kind,
                          int nul_at, size_t *out_len) {
    uint8_t *c = malloc(len + rec_len);
    memcpy(c, b, len);
    memcpy(c + len, b + off, rec_len);
    memcpy(c + len, &kind, 4);
    if (nul_at > 0) c[len + 8 + nul_at] = 0;
    fix_header(c, len + rec_len);
    *out_len = len + rec_len;
    return c;
}

/* Every reader: a load, sinter export's and sinter generate's readers refuse b with needle. */
static void every_reader_refuses(rig *r, const uint8_t *b, size_t len, const char *needle) {
    expect_refused(r, b, len, SN_ERR_PARSE, needle);
    sn_ckpt_weights w;
    sn_err e = {0};
    ck_assert_int_eq(sn_checkpoint_read_weights_bytes("crafted.ckpt", b, len, &w, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, needle), "%s", e.msg);
    char path[] = "/tmp/sn_ckr_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0 && write(fd, b, len) == (ssize_t)len);
    close(fd);
    sn_ckpt_model *m = NULL;
    e = (sn_err){0};
    ck_assert_int_eq(sn_ckpt_model_read(path, &m, &e), SN_ERR_PARSE);
    ck_assert_msg(strstr(e.msg, needle), "%s", e.msg);
    unlink(path);
}

/* Two records a reader would take for one (fuzz_ckpt found it: an NF4 record of parameter w and
 * an f32 one named "w\0lora_b", whose C string is "w", read as different weights by export's
 * reader and generate's): a parameter's weights twice, as f32 and as NF4 bytes, a metadata key
 * twice, and a name holding a NUL byte, each refused by every reader. */
START_TEST(one_record_a_name) {
    rig r;
    rig_init(&r);
    size_t len, plen = 0, mlen = 0, n;
    uint8_t *good = good_bytes(&r, &len);
    size_t param = first_record(good, len, 5, &plen), meta = first_record(good, len, 1, &mlen);
    ck_assert(param && meta);
    uint8_t *b = with_copy(good, len, param, plen, 5, 0, &n);
    every_reader_refuses(&r, b, n, "are both the weights of");
    free(b);
    b = with_copy(good, len, param, plen, 6, 0, &n); /* the same name as NF4 bytes */
    every_reader_refuses(&r, b, n, "are both the weights of");
    free(b);
    b = with_copy(good, len, meta, mlen, 1, 0, &n);
    every_reader_refuses(&r, b, n, "are both named");
    free(b);
    b = with_copy(good, len, param, plen, 5, 1, &n); /* "w" -> "w\0.." */
    every_reader_refuses(&r, b, n, "name holds a NUL byte");
    free(b);
    free(good);
    rig_free(&r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ckpt_reader");
    TCase *tc = tcase_create("ckpt_reader");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, overrunning_record);
    tcase_add_test(tc, series_count_overflow);
    tcase_add_test(tc, non_finite_weights);
    tcase_add_test(tc, diverged_state_not_saved);
    tcase_add_test(tc, loss_scaler_checked);
    tcase_add_test(tc, one_record_a_name);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
