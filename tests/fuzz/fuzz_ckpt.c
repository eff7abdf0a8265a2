/* fuzz_ckpt.c: libFuzzer harness for the checkpoint reader (sn_checkpoint_load_bytes) of a small
 * model trained on the reference interpreter, at fp32, bf16 and fp16 (the fp16 trainer's dynamic
 * loss scaler is a record of its own), and QLoRA's (w frozen and stored as NF4 by the nf4 pass,
 * a LoRA adapter beside it: the NF4 record); every input is offered to all four. The header's payload
 * size and CRC-32 are rewritten to agree with the bytes (else nearly every input would stop at the
 * CRC), so the records themselves are what the fuzzer explores. A checkpoint that loads must save,
 * and that file load. Every input is also offered to sn_checkpoint_init_bytes (a new run from the
 * weights) of the fp32 model with a LoRA adapter beside w, which the seeds lack: what starts a
 * run saves, and starts one again; and to the readers without a trainer (export's and
 * generate's: the same names, shapes and bits from both). SN_FUZZ_WRITE_SEED=FILE writes a seed (the model after two
 * steps; at SN_FUZZ_SEED_PRECISION: fp32 (the default), bf16, fp16 or qlora) and exits. */
#include <string.h>
#include <zlib.h>

#include "data/data.h"
#include "frontend/lora.h"
#include "frontend/frontend.h"
#include "passes/pipeline.h"
#include "train/checkpoint.h"
#include "fuzz_util.h"

enum { B = 2, T = 3, V = 7, C = 4, HDR = 32 };

/* fp32 sets no precision in the run's metadata (the seeds and corpora from before bf16 and fp16
 * load there); bf16 and fp16 set it as the session does, so an input loads into at most one. */
static const char *const precision_names[] = {"fp32", "bf16", "fp16"};
static const sn_precision precisions[] = {SN_PRECISION_FP32, SN_PRECISION_BF16, SN_PRECISION_FP16};
enum { NPREC = 3, QLORA = NPREC + 1 };
static sn_graph *graphs[NPREC + 2];
static sn_trainer *trainers[NPREC + 2]; /* [NPREC]: fp32 with a LoRA adapter, for --init;
                                           [QLORA]: the same with w frozen and stored as NF4 */

/* idx (B, T) -> embedding (V, C) -> matmul (C, V) + bias -> cross-entropy with targets, with its
 * backward (and the autocast pass at bf16 and fp16); k = NPREC: fp32 with w's LoRA path; k =
 * QLORA: that with w frozen and stored as NF4 (the nf4 pass: QLoRA's base) */
static sn_status build(int k, sn_err *e) {
    sn_graph *graph = graphs[k] = sn_graph_new();
    if (!graph) return SN_ERR_OOM;
    sn_node *idx = sn_input_tokens(graph, "idx", SN_SHAPE(B, T));
    sn_node *tg = sn_input_targets(graph, "targets", SN_SHAPE(B, T));
    sn_node *wte = sn_param(graph, "wte", SN_F32, SN_SHAPE(V, C), SN_INIT_NORMAL, 0.5f);
    sn_node *w = sn_param(graph, "w", SN_F32, SN_SHAPE(C, V), SN_INIT_NORMAL, 0.5f);
    sn_node *b = sn_param(graph, "b", SN_F32, SN_SHAPE(V), SN_INIT_ZEROS, 0);
    sn_node *x = sn_embedding(graph, wte, idx), *y = sn_add(graph, sn_matmul(graph, x, w), b);
    if (k >= NPREC) y = sn_add(graph, y, sn_lora_path(graph, x, "w", C, V, &(sn_lora){.rank = 2, .alpha = 2}));
    if (k == QLORA) sn_param_freeze(w);
    sn_node *loss = sn_cross_entropy(graph, y, tg, -1);
    if (sn_graph_error(graph)) return sn_fail(e, SN_ERR_SHAPE, "%s", sn_graph_error(graph));
    graph->loss = loss; /* what the pipeline's autodiff differentiates */
    sn_status s;
    if (k == NPREC || (k < NPREC && precisions[k] == SN_PRECISION_FP32)) {
        s = sn_backward(graph, loss, e);
    } else {
        sn_pipeline_opts po = sn_pipeline_defaults();
        po.backward = true;
        po.precision = k < NPREC ? precisions[k] : SN_PRECISION_FP32;
        po.nf4 = k == QLORA;
        sn_pipeline_stats st;
        s = sn_compile(graph, &po, NULL, &st, e);
        if (!s && k == QLORA && st.nf4_stored != 1)
            return sn_fail(e, SN_ERR_INVALID, "the nf4 pass stored %d weights, not w", st.nf4_stored);
    }
    if (s) return s;
    sn_train_opts o;
    sn_train_opts_default(&o, 10);
    trainers[k] = sn_trainer_new(graph, &o, e);
    if (!trainers[k]) return e->code;
    if (k < NPREC && (precisions[k] == SN_PRECISION_FP16) != sn_trainer_loss_scaling(trainers[k]))
        return sn_fail(e, SN_ERR_INVALID, "the %s trainer %s dynamic loss scaling", precision_names[k],
                       sn_trainer_loss_scaling(trainers[k]) ? "has" : "lacks");
    return SN_OK;
}

static void run_meta(int k, sn_run_state *r) {
    *r = (sn_run_state){0};
    sn_run_meta_set(r, "model", "fuzz");
    if (k > 0 && k < NPREC) sn_run_meta_set(r, "precision", "%s", precision_names[k]);
    if (k == QLORA) sn_run_meta_set(r, "qlora", "NF4 base");
    r->data_rng = sn_rng_seed(3);
}

static int write_seed(int k, const char *path) {
    sn_trainer *trainer = trainers[k];
    sn_err e = {0};
    sn_run_state r;
    run_meta(k, &r);
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
    (void)argc, (void)argv;
    sn_err e = {0};
    for (int k = 0; k <= QLORA; k++)
        if (build(k, &e)) {
            fprintf(stderr, "fuzz_ckpt: cannot build the %s model: %s\n", k < NPREC ? precision_names[k] : k == NPREC ? "LoRA" : "QLoRA", e.msg);
            exit(1);
        }
    const char *seed = getenv("SN_FUZZ_WRITE_SEED"), *prec = getenv("SN_FUZZ_SEED_PRECISION");
    if (seed) {
        int k = 0;
        while (prec && k < NPREC && strcmp(prec, precision_names[k])) k++;
        if (k == NPREC && !strcmp(prec, "qlora")) k = QLORA;
        if (k == NPREC) {
            fprintf(stderr, "fuzz_ckpt: SN_FUZZ_SEED_PRECISION=%s: use fp32, bf16, fp16 or qlora\n", prec);
            exit(1);
        }
        exit(write_seed(k, seed));
    }
    return 0;
}

/* b (the input, its header made to agree) offered to trainer k. */
static void try_load(int k, const uint8_t *b, size_t size) {
    sn_trainer *trainer = trainers[k];
    sn_run_state r;
    run_meta(k, &r);
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
            run_meta(k, &r2);
            s = sn_checkpoint_load(path, trainer, &r2, &e);
            FUZZ_CHECK(s == SN_OK, "a saved checkpoint does not load: %s", e.msg);
            FUZZ_CHECK(r2.train_loss.n == r.train_loss.n && r2.val_loss.n == r.val_loss.n,
                       "the loss curves changed length");
            sn_run_state_free(&r2);
            unlink(path);
        }
    }
    sn_run_state_free(&r);
}

/* b offered to sn_checkpoint_init_bytes of the LoRA model: a run that starts saves, and the
 * file saved starts one again. */
static void try_init(const uint8_t *b, size_t size) {
    sn_trainer *trainer = trainers[NPREC];
    sn_err e = {0};
    int fresh = -1;
    sn_status s = sn_checkpoint_init_bytes("fuzz.ckpt", b, size, trainer, NULL, &fresh, &e);
    FUZZ_CHECK(s == SN_OK || e.msg[0], "status %d without a message", s);
    if (s) return;
    FUZZ_CHECK(fresh >= 0 && fresh <= 2 && sn_trainer_step_count(trainer) == 0,
               "init: %d adapters fresh, step %d", fresh, sn_trainer_step_count(trainer));
    char path[] = "/tmp/sn_fuzz_init_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    sn_run_state r = {0};
    sn_run_meta_set(&r, "model", "fuzz");
    s = sn_checkpoint_save(path, trainer, &r, &e);
    FUZZ_CHECK(s == SN_OK, "a model started from a checkpoint does not save: %s", e.msg);
    s = sn_checkpoint_init(path, trainer, &r, &fresh, &e);
    FUZZ_CHECK(s == SN_OK && fresh == 0, "a saved model does not start a run: %s", s ? e.msg : "adapters fresh");
    sn_run_state_free(&r);
    unlink(path);
}

/* b offered to the readers without a trainer: sinter export's (sn_checkpoint_read_weights_bytes)
 * and sinter generate's (sn_ckpt_model_read: a file it reads whole, then the metadata, the
 * names, shapes and weights as a source), and the peek at the metadata before a resumed run's
 * plan. What export reads, generate reads too, with the same names, shapes and bits; what the
 * peek finds is the reader's. */
static void try_readers(const uint8_t *b, size_t size) {
    sn_ckpt_weights w = {0};
    sn_err e = {0}, em = {0};
    sn_status s = sn_checkpoint_read_weights_bytes("fuzz.ckpt", b, size, &w, &e);
    FUZZ_CHECK(s == SN_OK || e.msg[0], "export's reader: status %d without a message", s);
    char path[64], buf[96];
    int fd = fuzz_file(b, size, path);
    if (fd < 0) {
        if (!s) sn_ckpt_weights_free(&w);
        return;
    }
    sn_ckpt_model *m = NULL;
    sn_status sm = sn_ckpt_model_read(path, &m, &em);
    char peek[96], *peeked = (char *)sn_checkpoint_peek_meta(path, "model", peek, sizeof peek);
    close(fd);
    if (!sm && peeked) /* the peek reads the metadata records the reader reads */
        FUZZ_CHECK(!strcmp(peeked, sn_ckpt_model_meta(m, "model", buf, sizeof buf) ? buf : ""),
                   "the peek's model \"%s\", the reader's \"%s\"", peeked, buf);
    FUZZ_CHECK(sm == SN_OK || em.msg[0], "generate's reader: status %d without a message", sm);
    if (!sm) {
        sn_ckpt_model_meta(m, "model", buf, sizeof buf);
        sn_ckpt_model_meta(m, "batch", buf, sizeof buf);
        sn_weight_source src = sn_ckpt_model_weights(m);
        const char *name;
        for (int i = 0; (name = sn_ckpt_model_param_name(m, i)); i++) {
            sn_node p = {.name = (char *)name, .dtype = SN_F32};
            p.rank = sn_ckpt_model_shape(m, name, p.shape);
            if (p.rank < 0) continue;
            int64_t n = 0;
            if (!sn_shape_numel_checked(p.rank, p.shape, &n) || n > (1 << 24)) continue;
            float *x = malloc(4 * (size_t)n + 4);
            if (!x) continue;
            em = (sn_err){0};
            sn_status g = src.get(src.src, &p, x, &em);
            FUZZ_CHECK(g == SN_OK || em.msg[0], "generate's reader: %s: status %d without a message", name, g);
            const sn_ckpt_param *q = NULL;
            for (int j = 0; !s && j < w.n && !q; j++)
                if (!strcmp(w.params[j].name, name)) q = &w.params[j];
            if (!s && !g) /* both read it: the same bits */
                FUZZ_CHECK(q && q->rank == p.rank && !memcmp(q->shape, p.shape, sizeof(int64_t) * (size_t)p.rank) &&
                           !memcmp(q->w, x, 4 * (size_t)n), "%s differs between the readers", name);
            free(x);
        }
        sn_ckpt_model_free(m);
    }
    if (!s) {
        FUZZ_CHECK(!sm, "export reads the file, generate refuses it: %s", em.msg);
        sn_ckpt_weights_free(&w);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    if (size >= HDR) { /* make the header's size and CRC agree with the payload */
        uint64_t payload = size - HDR;
        uint32_t crc = (uint32_t)crc32_z(0, b + HDR, payload);
        memcpy(b + 16, &payload, 8);
        memcpy(b + 24, &crc, 4);
    }
    for (int k = 0; k < NPREC; k++) try_load(k, b, size);
    try_load(QLORA, b, size);
    try_init(b, size);
    try_readers(b, size);
    free(b);
    return 0;
}
