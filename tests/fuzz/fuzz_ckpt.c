/* fuzz_ckpt.c: libFuzzer harness for the checkpoint reader (sn_checkpoint_load_bytes) of a small
 * model trained on the reference interpreter. The header's payload size and CRC-32 are rewritten
 * to agree with the bytes (else nearly every input would stop at the CRC), so the records
 * themselves are what the fuzzer explores. A checkpoint that loads must save, and that file load. SN_FUZZ_WRITE_SEED=FILE writes a seed (the model after two steps) and exits. */
#include <string.h>

#include "data/data.h"
#include "frontend/sinter.h"
#include "support/crc.h"
#include "train/checkpoint.h"
#include "fuzz_util.h"

enum { B = 2, T = 3, V = 7, C = 4, HDR = 32 };

static sn_graph *graph;
static sn_trainer *trainer;

/* idx (B, T) -> embedding (V, C) -> matmul (C, V) + bias -> cross-entropy with targets */
static sn_status build(sn_err *e) {
    graph = sn_graph_new();
    if (!graph) return SN_ERR_OOM;
    sn_node *idx = sn_input(graph, "idx", SN_I32, SN_SHAPE(B, T));
    sn_node *tg = sn_input(graph, "targets", SN_I32, SN_SHAPE(B, T));
    sn_node *wte = sn_param(graph, "wte", SN_F32, SN_SHAPE(V, C), SN_INIT_NORMAL, 0.5f);
    sn_node *w = sn_param(graph, "w", SN_F32, SN_SHAPE(C, V), SN_INIT_NORMAL, 0.5f);
    sn_node *b = sn_param(graph, "b", SN_F32, SN_SHAPE(V), SN_INIT_ZEROS, 0);
    sn_node *loss = sn_cross_entropy(graph, sn_add(graph, sn_matmul(graph, sn_embedding(graph, wte, idx), w), b), tg, -1);
    if (sn_graph_error(graph)) return sn_fail(e, SN_ERR_SHAPE, "%s", sn_graph_error(graph));
    sn_status s = sn_backward(graph, loss, e);
    if (s) return s;
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    trainer = sn_trainer_new(graph, &o, e);
    return trainer ? SN_OK : e->code;
}

static void run_meta(sn_run_state *r) {
    *r = (sn_run_state){0};
    sn_run_meta_set(r, "model", "fuzz");
    r->data_rng = sn_rng_seed(3);
}

static int write_seed(const char *path) {
    sn_err e = {0};
    sn_run_state r;
    run_meta(&r);
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = i % V, y[i] = (i * 3 + 1) % V;
    sn_step_stats st;
    sn_status s = SN_OK;
    for (int k = 0; k < 2 && !s; k++)
        if (!(s = sn_trainer_step(trainer, x, y, &st, &e))) s = sn_series_push(&r.train_loss, k + 1, st.loss, &e);
    if (!s) s = sn_series_push(&r.val_loss, 2, st.loss, &e);
    if (!s) s = sn_checkpoint_save(path, trainer, &r, &e);
    sn_run_state_free(&r);
    if (s) fprintf(stderr, "fuzz_ckpt: %s\n", e.msg);
    return s ? 1 : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    sn_err e = {0};
    if (build(&e)) {
        fprintf(stderr, "fuzz_ckpt: cannot build the model: %s\n", e.msg);
        exit(1);
    }
    const char *seed = getenv("SN_FUZZ_WRITE_SEED");
    if (seed) exit(write_seed(seed));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    if (size >= HDR) { /* make the header's size and CRC agree with the payload */
        uint64_t payload = size - HDR;
        sn_crc32 c;
        sn_crc32_init(&c);
        sn_crc32_update(&c, b + HDR, payload);
        uint32_t crc = sn_crc32_value(&c);
        memcpy(b + 16, &payload, 8);
        memcpy(b + 24, &crc, 4);
    }
    sn_run_state r;
    run_meta(&r);
    sn_err e = {0};
    sn_status s = sn_checkpoint_load_bytes("fuzz.ckpt", b, size, trainer, &r, &e);
    FUZZ_CHECK(s == SN_OK || e.msg[0], "status %d without a message", s);
    if (!s) { /* what loaded saves, and what was saved loads */
        char path[] = "/tmp/sn_fuzz_ckpt_XXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) {
            close(fd);
            s = sn_checkpoint_save(path, trainer, &r, &e);
            FUZZ_CHECK(s == SN_OK, "a loaded checkpoint does not save: %s", e.msg);
            sn_run_state r2;
            run_meta(&r2);
            s = sn_checkpoint_load(path, trainer, &r2, &e);
            FUZZ_CHECK(s == SN_OK, "a saved checkpoint does not load: %s", e.msg);
            FUZZ_CHECK(r2.train_loss.n == r.train_loss.n && r2.val_loss.n == r.val_loss.n,
                       "the loss curves changed length");
            sn_run_state_free(&r2);
            unlink(path);
        }
    }
    sn_run_state_free(&r);
    free(b);
    return 0;
}
