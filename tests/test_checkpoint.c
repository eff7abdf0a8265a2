/* test_checkpoint.c: checkpoints: a resumed run reproduces the uninterrupted one bit for bit
 * (with gradient accumulation); corrupt, truncated, foreign and mismatched files are refused
 * with a message naming the file and the difference, leaving the trainer as it was; a save
 * that fails leaves the previous file intact and no temporary file behind. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "models/gpt2.h"
#include "train/checkpoint.h"
#include "data/data.h"
#include "harness.h"

enum { B = 2, T = 8, MICRO = 2, STEPS = 12 };

typedef struct {
    sn_graph *g;
    sn_trainer *t;
} rig;

static rig rig_new(int n_embd, float lr) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = 64;
    c.n_embd = n_embd;
    rig r = {sn_graph_new(), NULL};
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(r.g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(r.g, m.loss, &e) == SN_OK, "%s", e.msg);
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = lr;
    r.t = sn_trainer_new(r.g, &o, &e);
    ck_assert_msg(r.t, "%s", e.msg);
    return r;
}

static void rig_free(rig *r) {
    sn_trainer_free(r->t);
    sn_graph_free(r->g);
}

/* 3000 ids with some structure to learn. */
static sn_tokens corpus(void) {
    sn_tokens t = {0};
    sn_rng r = sn_rng_seed(5);
    sn_err e;
    for (int i = 0; i < 3000; i++)
        ck_assert(sn_tokens_push(&t, (i % 5 == 0) ? (int32_t)sn_rng_below(&r, 64) : (i * 7) % 64, &e) == SN_OK);
    return t;
}

static bool in_order; /* batches read in order (sn_batch_next) rather than at random */

/* One optimizer step of MICRO micro-batches; records the loss. */
static void step(rig *r, const sn_tokens *data, sn_run_state *run, double *loss) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int k = 0; k < MICRO; k++) {
        ck_assert(in_order ? sn_batch_next(data, B, T, &run->data_pos, x, y, &e) == SN_OK
                           : sn_batch_sample(data, B, T, &run->data_rng, x, y, &e) == SN_OK);
        ck_assert_msg(sn_trainer_accumulate(r->t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
    }
    sn_step_stats st;
    ck_assert_msg(sn_trainer_update(r->t, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_series_push(&run->train_loss, sn_trainer_step_count(r->t), st.loss, NULL) == SN_OK);
    *loss = st.loss;
}

static void run_init(sn_run_state *run, const char *model) {
    *run = (sn_run_state){0};
    sn_run_meta_set(run, "model", "%s", model);
    sn_run_meta_set(run, "batch", "%d", B);
    run->data_rng = sn_rng_seed(99);
}

/* Each test works in its own temporary directory, dir (64 bytes). */
static void make_dir(char *dir) {
    snprintf(dir, 64, "/tmp/sn_ckpt_XXXXXX");
    ck_assert(mkdtemp(dir));
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", dir, de->d_name), unlink(p);
    if (d) closedir(d);
    rmdir(dir);
}

/* out (256 bytes) = dir/name */
static const char *path_in(char *out, const char *dir, const char *name) {
    snprintf(out, 256, "%s/%s", dir, name);
    return out;
}

static bool same_weights(const sn_trainer *a, const sn_trainer *b) {
    for (int i = 0; i < sn_trainer_param_count(a); i++) {
        size_t n = (size_t)sn_numel(sn_trainer_param_node(a, i));
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        sn_err e;
        bool same = true;
        for (int w = SN_PARAM_WEIGHTS; w <= SN_PARAM_V && same; w++) {
            ck_assert(sn_trainer_get_param(a, i, (sn_param_which)w, x, &e) == SN_OK &&
                      sn_trainer_get_param(b, i, (sn_param_which)w, y, &e) == SN_OK);
            same = !memcmp(x, y, sizeof(float) * n);
        }
        free(x);
        free(y);
        if (!same) return false;
    }
    return true;
}

/* STEPS steps straight through, saving at STEPS/2; then a fresh trainer resumed from the file
 * takes the second half: every loss and the final state are bit-identical. _i = 1: the batches
 * read in order, from the position the file keeps. */
START_TEST(resume_is_exact) {
    in_order = _i == 1;
    char dir[64];
    make_dir(dir);
    sn_tokens data = corpus();
    char ck[256];
    path_in(ck, dir, "run.ckpt");
    sn_err e;
    rig a = rig_new(32, 1e-2f);
    sn_run_state run;
    run_init(&run, "tiny");
    double want[STEPS], got[STEPS];
    for (int s = 0; s < STEPS; s++) {
        step(&a, &data, &run, &want[s]);
        if (s + 1 == STEPS / 2) ck_assert_msg(sn_checkpoint_save(ck, a.t, &run, &e) == SN_OK, "%s", e.msg);
    }
    sn_run_state_free(&run);

    rig b = rig_new(32, 1e-2f);
    run_init(&run, "tiny");
    run.data_rng = sn_rng_seed(12345); /* replaced by the file's */
    run.data_pos = 777;                /* likewise */
    ck_assert_msg(sn_checkpoint_load(ck, b.t, &run, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(run.data_pos, in_order ? (uint64_t)(STEPS / 2 * MICRO * B * T) : 0);
    ck_assert_int_eq(sn_trainer_step_count(b.t), STEPS / 2);
    ck_assert_int_eq(run.train_loss.n, STEPS / 2);
    for (int s = 0; s < STEPS / 2; s++) ck_assert(run.train_loss.y[s] == want[s]);
    for (int s = STEPS / 2; s < STEPS; s++) step(&b, &data, &run, &got[s]);
    ck_assert_msg(!memcmp(want + STEPS / 2, got + STEPS / 2, sizeof(double) * (STEPS / 2)),
                  "step %d: %.17g resumed, %.17g straight", STEPS / 2 + 1, got[STEPS / 2], want[STEPS / 2]);
    ck_assert(same_weights(a.t, b.t));
    ck_assert_int_eq(sn_trainer_step_count(b.t), STEPS);
    sn_run_state_free(&run);
    rig_free(&a);
    rig_free(&b);
    sn_tokens_free(&data);
    remove_dir(dir);
}
END_TEST

static char *read_all(const char *path, size_t *len) {
    char *b;
    sn_err e;
    ck_assert_msg(sn_file_read(path, "", &b, len, &e) == SN_OK, "%s", e.msg);
    return b;
}

static void write_all(const char *path, const char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(b, 1, len, f) == len && fclose(f) == 0);
}

/* Loads path into a fresh default rig expecting failure with every needle in the message;
 * the trainer must be untouched. */
static void expect_refused(const char *path, int n_embd, float lr, const char *model,
                           const char *needle1, const char *needle2) {
    rig r = rig_new(n_embd, lr), fresh = rig_new(n_embd, lr);
    sn_run_state run;
    run_init(&run, model);
    sn_rng before = run.data_rng;
    sn_err e = {0};
    ck_assert(sn_checkpoint_load(path, r.t, &run, &e) != SN_OK);
    ck_assert_msg(strstr(e.msg, path) && strstr(e.msg, needle1) && (!needle2 || strstr(e.msg, needle2)),
                  "message: %s", e.msg);
    ck_assert(same_weights(r.t, fresh.t));
    ck_assert_int_eq(sn_trainer_step_count(r.t), 0);
    ck_assert(!memcmp(&before, &run.data_rng, sizeof before) && run.train_loss.n == 0);
    sn_run_state_free(&run);
    rig_free(&r);
    rig_free(&fresh);
}

START_TEST(bad_checkpoints_are_refused) {
    char dir[64];
    make_dir(dir);
    sn_tokens data = corpus();
    sn_err e;
    rig a = rig_new(32, 1e-2f);
    sn_run_state run;
    run_init(&run, "tiny");
    double l;
    step(&a, &data, &run, &l);
    char ck[256];
    path_in(ck, dir, "good.ckpt");
    ck_assert_msg(sn_checkpoint_save(ck, a.t, &run, &e) == SN_OK, "%s", e.msg);
    size_t len;
    char *bytes = read_all(ck, &len);

    char bad[256];
    path_in(bad, dir, "bad.ckpt");
    bytes[len / 2] ^= 0x10; /* one bit flipped in the weights */
    write_all(bad, bytes, len);
    expect_refused(bad, 32, 1e-2f, "tiny", "corrupt", "CRC-32");
    bytes[len / 2] ^= 0x10;

    write_all(bad, bytes, len - 100);
    expect_refused(bad, 32, 1e-2f, "tiny", "truncated", NULL);
    write_all(bad, bytes, 20);
    expect_refused(bad, 32, 1e-2f, "tiny", "truncated", "header");
    write_all(bad, "step,loss\n1,2.5\n", 16);
    expect_refused(bad, 32, 1e-2f, "tiny", "not a sinter checkpoint", NULL);
    bytes[8] = 7; /* version 7 */
    write_all(bad, bytes, len);
    expect_refused(bad, 32, 1e-2f, "tiny", "version 7", NULL);
    char missing[256];
    expect_refused(path_in(missing, dir, "missing.ckpt"), 32, 1e-2f, "tiny", "No such file", NULL);

    /* mismatches: the run's metadata, the optimizer's options, the model's shapes */
    expect_refused(ck, 32, 1e-2f, "demo", "model is tiny there, demo here", NULL);
    expect_refused(ck, 32, 2e-2f, "tiny", "train.lr is 0.00999999978 there, 0.0199999996 here", NULL);
    expect_refused(ck, 16, 1e-2f, "tiny", "parameter wte is [64,32] there, [64,16] here", NULL);
    free(bytes);
    sn_run_state_free(&run);
    rig_free(&a);
    sn_tokens_free(&data);
    remove_dir(dir);
}
END_TEST

static int count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) n += strstr(de->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* A save cut short by the file-size limit (EFBIG) fails and leaves the old checkpoint as it was. */
START_TEST(failed_save_keeps_old_file) {
    char dir[64];
    make_dir(dir);
    sn_tokens data = corpus();
    sn_err e;
    rig a = rig_new(32, 1e-2f);
    sn_run_state run;
    run_init(&run, "tiny");
    double l;
    step(&a, &data, &run, &l);
    char ck[256];
    path_in(ck, dir, "run.ckpt");
    ck_assert_msg(sn_checkpoint_save(ck, a.t, &run, &e) == SN_OK, "%s", e.msg);
    size_t len, len2;
    char *old = read_all(ck, &len);
    step(&a, &data, &run, &l);

    struct rlimit lim, small = {.rlim_cur = 4096};
    ck_assert(getrlimit(RLIMIT_FSIZE, &lim) == 0);
    small.rlim_max = lim.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert(setrlimit(RLIMIT_FSIZE, &small) == 0);
    sn_status s = sn_checkpoint_save(ck, a.t, &run, &e);
    ck_assert(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    signal(SIGXFSZ, prev);
    ck_assert_int_eq(s, SN_ERR_IO);
    ck_assert_msg(strstr(e.msg, ck) && strstr(e.msg, "unchanged"), "%s", e.msg);
    char *now = read_all(ck, &len2);
    ck_assert(len == len2 && !memcmp(old, now, len));
    ck_assert_int_eq(count_tmp_files(dir), 0);

    ck_assert_int_eq(sn_checkpoint_save("/nonexistent-dir/x.ckpt", a.t, &run, &e), SN_ERR_IO);
    ck_assert_msg(strstr(e.msg, "/nonexistent-dir/x.ckpt") && strstr(e.msg, "directory exists"), "%s", e.msg);

    /* a save between micro-batches is refused: the sums would be lost */
    int32_t x[B * T], y[B * T];
    ck_assert(sn_batch_sample(&data, B, T, &run.data_rng, x, y, &e) == SN_OK);
    ck_assert(sn_trainer_accumulate(a.t, x, y, NULL, &e) == SN_OK);
    ck_assert_int_eq(sn_checkpoint_save(ck, a.t, &run, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "between optimizer steps"), "%s", e.msg);
    free(old);
    free(now);
    sn_run_state_free(&run);
    rig_free(&a);
    sn_tokens_free(&data);
    remove_dir(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, resume_is_exact, 0, 2);
    tcase_add_test(tc, bad_checkpoints_are_refused);
    tcase_add_test(tc, failed_save_keeps_old_file);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
