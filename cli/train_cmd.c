/* train_cmd.c: `sinter train`: a GPT trained on a text corpus, with a live progress line,
 * periodic validation and an optional CSV log. Today the steps run on the reference
 * interpreter (small models only); the compiled backends will take its place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../models/gpt2.h"
#include "../passes/pipeline.h"
#include "../runtime/data.h"
#include "../runtime/train.h"
#include "cli.h"

static const char train_usage[] =
    "usage: sinter train [options]\n"
    "  --model NAME        tiny (default), demo, gpt2 ... (sinter help lists them)\n"
    "  --data PATH         text file or directory (default " SN_DEFAULT_CORPUS ")\n"
    "  --bpe DIR           GPT-2 BPE tokenizer from DIR/encoder.json and DIR/vocab.bpe\n"
    "                      (default: byte-level, vocabulary 256)\n"
    "  --steps N           optimizer steps (default 300)\n"
    "  --batch B           sequences per step (default 8)\n"
    "  --seq T             tokens per sequence (default: the model's context)\n"
    "  --lr X              peak learning rate (default 1e-3)\n"
    "  --seed N            initialisation and sampling seed (default 1337)\n"
    "  --eval-every N      validation every N steps (default 50; 0: only at the end)\n"
    "  --log FILE          write step,loss,val_loss,lr,grad_norm,tokens_per_s as CSV\n";

typedef struct {
    const char *model, *data, *bpe, *log;
    long steps, batch, seq, seed, eval_every;
    double lr;
} train_args;

static int parse_args(int argc, char **argv, train_args *a) {
    *a = (train_args){.model = "tiny", .data = SN_DEFAULT_CORPUS, .steps = 300, .batch = 8,
                      .seq = -1, .seed = 1337, .eval_every = 50, .lr = 1e-3};
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            fputs(train_usage, stdout);
            return 0;
        }
        if (!v) return cli_fail("train: option '%s' needs a value (see sinter train --help)", k);
        i++;
        bool ok = true;
        if (!strcmp(k, "--model")) a->model = v;
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--bpe")) a->bpe = v;
        else if (!strcmp(k, "--log")) a->log = v;
        else if (!strcmp(k, "--steps")) ok = cli_int(v, 1, 100000000, &a->steps);
        else if (!strcmp(k, "--batch")) ok = cli_int(v, 1, 1 << 16, &a->batch);
        else if (!strcmp(k, "--seq")) ok = cli_int(v, 1, 1 << 20, &a->seq);
        else if (!strcmp(k, "--seed")) ok = cli_int(v, 0, 0x7fffffff, &a->seed);
        else if (!strcmp(k, "--eval-every")) ok = cli_int(v, 0, 100000000, &a->eval_every);
        else if (!strcmp(k, "--lr")) {
            char *end;
            a->lr = strtod(v, &end);
            ok = *v && !*end && a->lr > 0 && a->lr < 10;
        } else return cli_fail("train: unknown option '%s' (see sinter train --help)", k);
        if (!ok) return cli_fail("train: bad value '%s' (see sinter train --help)", v);
    }
    return -1; /* go on */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mean loss over up to 8 validation batches. */
static sn_status validate(sn_trainer *t, sn_val_iter *vi, int32_t *x, int32_t *y, double *out, sn_err *e) {
    double sum = 0;
    int n = 0;
    sn_val_iter_reset(vi);
    while (n < 8 && sn_val_iter_next(vi, x, y)) {
        double l;
        sn_status s = sn_trainer_eval(t, x, y, &l, e);
        if (s) return s;
        sum += l;
        n++;
    }
    *out = n ? sum / n : 0;
    return SN_OK;
}

typedef struct {
    sn_text text;
    sn_tokenizer *tk;
    sn_tokens toks, train, val;
    sn_graph *g;
    sn_trainer *t;
    int32_t *x, *y;
    FILE *log;
} run_state;

static void run_free(run_state *r) {
    if (r->log) fclose(r->log);
    free(r->x);
    free(r->y);
    sn_trainer_free(r->t);
    sn_graph_free(r->g);
    sn_tokens_free(&r->toks);
    if (r->tk) sn_tokenizer_free(r->tk);
    sn_text_free(&r->text);
}

static sn_status train(const train_args *a, run_state *r, sn_err *e) {
    sn_gpt2_config c;
    if (!sn_gpt2_config_find(a->model, &c))
        return sn_fail(e, SN_ERR_INVALID, "unknown model '%s' (models: %s)", a->model, sn_gpt2_config_names());
    sn_status s = sn_text_load(a->data, &r->text, e);
    if (s) return s;
    if (a->bpe) {
        char enc[4096], merges[4096];
        snprintf(enc, sizeof enc, "%s/encoder.json", a->bpe);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", a->bpe);
        if ((s = sn_tokenizer_gpt2_load(enc, merges, &r->tk, e))) return s;
    } else {
        r->tk = sn_tokenizer_bytes_new();
    }
    if ((s = sn_tokenizer_encode(r->tk, r->text.bytes, r->text.len, &r->toks, e))) return s;
    if ((s = sn_tokens_split(&r->toks, 0.1, &r->train, &r->val, e))) return s;
    c.vocab = r->tk->vocab;
    int B = (int)a->batch, T = a->seq > 0 ? (int)a->seq : c.ctx;

    r->g = sn_graph_new();
    sn_gpt2 m;
    if ((s = sn_gpt2_build(r->g, &c, B, T, &m, e))) return s;
    sn_pipeline_opts po = {.backward = true};
    if ((s = sn_pipeline_run(r->g, &po, e))) return s;
    sn_train_opts o;
    sn_train_opts_default(&o, (int)a->steps);
    o.lr = (float)a->lr;
    o.seed = (uint64_t)a->seed;
    if (!(r->t = sn_trainer_new(r->g, &o, e))) return e->code;
    sn_val_iter vi;
    if ((s = sn_val_iter_init(&vi, &r->val, B, T, e))) return s;
    r->x = malloc(sizeof(int32_t) * (size_t)B * (size_t)T);
    r->y = malloc(sizeof(int32_t) * (size_t)B * (size_t)T);
    SN_ASSERT(r->x && r->y);
    if (a->log) {
        if (!(r->log = fopen(a->log, "w")))
            return sn_fail(e, SN_ERR_IO, "cannot write the log %s: check the directory exists", a->log);
        fprintf(r->log, "step,loss,val_loss,lr,grad_norm,tokens_per_s\n");
    }

    printf("sinter train: model %s (%lld parameters), %s tokenizer (vocab %d), %zu training / "
           "%zu validation tokens from %s\n", c.name, (long long)sn_graph_param_count(r->g),
           r->tk->name, c.vocab, r->train.n, r->val.n, a->data);
    printf("device: reference interpreter (the compiled CPU and CUDA backends are not built yet)\n");
    sn_rng rng = sn_rng_seed((uint64_t)a->seed ^ 0x5eedull);
    double t0 = now_s();
    for (long step = 0; step < a->steps; step++) {
        if ((s = sn_batch_sample(&r->train, B, T, &rng, r->x, r->y, e))) return s;
        sn_step_stats st;
        if ((s = sn_trainer_step(r->t, r->x, r->y, &st, e))) return s;
        double el = now_s() - t0, tps = (double)(step + 1) * B * T / el;
        double val = -1;
        bool last = step + 1 == a->steps;
        if ((a->eval_every && (step + 1) % a->eval_every == 0) || last)
            if ((s = validate(r->t, &vi, r->x, r->y, &val, e))) return s;
        double eta = el / (double)(step + 1) * (double)(a->steps - step - 1);
        if (val >= 0 || step % 10 == 0 || last) {
            printf("step %5ld/%ld | loss %.4f | lr %.2e | grad norm %6.3f | %7.0f tok/s | ETA %.0fs",
                   step + 1, a->steps, st.loss, st.lr, st.grad_norm, tps, eta);
            if (val >= 0) printf(" | val loss %.4f", val);
            printf("\n");
            fflush(stdout);
        }
        if (r->log) {
            fprintf(r->log, "%ld,%.6f,", step + 1, st.loss);
            if (val >= 0) fprintf(r->log, "%.6f", val);
            fprintf(r->log, ",%.6g,%.6f,%.1f\n", st.lr, st.grad_norm, tps);
        }
    }
    printf("done: %ld steps in %.1fs\n", a->steps, now_s() - t0);
    return SN_OK;
}

int cli_train(int argc, char **argv) {
    train_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    run_state r = {0};
    sn_err e = {0};
    sn_status s = train(&a, &r, &e);
    run_free(&r);
    if (s) {
        fprintf(stderr, "sinter train: %s\n", e.msg);
        return 1;
    }
    return 0;
}
