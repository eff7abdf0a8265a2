/* train_cmd.c: `sinter train`: a GPT trained on a text corpus or llm.c token shards, with
 * gradient accumulation, periodic validation, samples, exact checkpoints, a CSV log and a loss
 * plot. The steps run compiled on a CUDA GPU or the CPU (--device auto, the default, picks the
 * GPU when there is one), or on the reference interpreter (--device interp). */
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "train/checkpoint.h"
#include "support/clock.h"
#include "data/data.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "support/plot.h"
#include "train/sample.h"
#include "train/train.h"
#include "cli.h"
#include "train_cli.h"

static const char train_usage[] =
    "usage: sinter train [options]\n"
    "  --model NAME          demo (default), tiny, gpt2 ... (sinter help lists them)\n"
    "  --device D            auto (default): the CUDA GPU when there is one, else cpu;\n"
    "                        cuda: CUDA GPU 0 (an error without one); cpu: compiled kernels on\n"
    "                        the CPU; interp: the reference interpreter\n"
    "  --no-cache            CUDA: compile every kernel, read and write no kernel cache\n"
    "                        ($XDG_CACHE_HOME/sinter or ~/.cache/sinter)\n"
    "  --tf32                CUDA: TF32 tensor-core GEMMs (sm_80 and newer)\n"
    "  --data PATH           text file or directory (default " SN_DEFAULT_CORPUS ")\n"
    "  --train-bin FILE      llm.c token shard to train on (with --val-bin; see sinter prepare)\n"
    "  --val-bin FILE        llm.c token shard to validate on\n"
    "  --bpe DIR             GPT-2 BPE tokenizer from DIR/encoder.json and DIR/vocab.bpe\n"
    "                        (default: byte-level, vocabulary 256)\n"
    "  --steps N             optimizer steps (default 600)\n"
    "  --batch B             sequences per micro-batch (default 16)\n"
    "  --seq T               tokens per sequence (default: the model's context)\n"
    "  --tokens-per-step N   tokens per optimizer step, a multiple of B*T: gradients of N/(B*T)\n"
    "                        micro-batches are averaged (default B*T)\n"
    "  --lr X                peak learning rate (default 3e-3)\n"
    "  --grad-clip X         clip the gradient's global norm to X (default 1; 0: no clipping)\n"
    "  --diverge-nats X      stop when a step's loss is more than X nats above the median of\n"
    "                        the last 50 steps' (default 4; 0: never; from the second step).\n"
    "                        A NaN or infinite loss or gradient norm always stops the run\n"
    "  --seed N              initialisation, data and sampling seed (default 1337)\n"
    "  --eval-every N        validation every N steps (default 100; 0: only at the end)\n"
    "  --log FILE            write step,loss,val_loss,lr,grad_norm,tokens_per_s as CSV\n"
    "  --plot FILE.png       draw the train and validation loss curves (at each validation)\n"
    "  --checkpoint FILE     save the whole run every --save-every steps and at the end\n"
    "  --save-every N        (default 100; 0: only at the end)\n"
    "  --resume FILE         continue the run saved in FILE exactly (same model, data and\n"
    "                        options); saves go on to FILE unless --checkpoint says otherwise\n"
    "  --sample-len N        tokens to generate after training (default 200; 0: no samples)\n"
    "  --sample-every N      also sample every N steps (default 0: only at the end)\n"
    "  --prompt TEXT         the samples' prompt (default: the validation text's first token)\n"
    "  --temperature X       sampling temperature (default 1.0; 0: greedy)\n"
    "  --top-k K             sample among the K most likely tokens (default 40; 0: all)\n"
    "  --dump-after PASS     print the IR (or, after fuse and memplan, the program) the trainer\n"
    "                        runs, after PASS (%s)\n"
    "Every output path is checked writable before training and every file is replaced whole.\n"
    "SIGINT or SIGTERM: the current step finishes, a checkpoint is saved when --checkpoint (or\n"
    "--resume) is given, and sinter exits with status 130 (SIGINT) or 143 (SIGTERM); a second\n"
    "signal stops at once without saving. Exit status 1: an error (the message says which).\n";

static bool parse_real(const char *v, double lo, double hi, double *out) {
    char *end;
    *out = strtod(v, &end);
    return *v && !*end && *out >= lo && *out < hi;
}

/* The integer options: name, valid range and where the value goes. */
typedef struct {
    const char *name;
    long lo, hi;
    size_t offset; /* of a long in train_args */
} int_opt;

#define INT_OPT(NAME, LO, HI, FIELD) {NAME, LO, HI, offsetof(train_args, FIELD)}
static const int_opt int_opts[] = {
    INT_OPT("--steps", 1, 100000000, steps),         INT_OPT("--batch", 1, 1 << 16, batch),
    INT_OPT("--seq", 1, 1 << 20, seq),               INT_OPT("--tokens-per-step", 1, 1L << 40, tokens_per_step),
    INT_OPT("--seed", 0, 0x7fffffff, seed),          INT_OPT("--eval-every", 0, 100000000, eval_every),
    INT_OPT("--save-every", 0, 100000000, save_every), INT_OPT("--sample-every", 0, 100000000, sample_every),
    INT_OPT("--sample-len", 0, 1 << 20, sample_len), INT_OPT("--top-k", 0, 1 << 24, top_k),
};

static int parse_args(int argc, char **argv, train_args *a) {
    *a = (train_args){.model = "demo", .device = "auto", .data = SN_DEFAULT_CORPUS, .steps = 600, .batch = 16,
                      .seq = -1, .seed = 1337, .eval_every = 100, .lr = 3e-3, .save_every = 100,
                      .sample_len = 200, .top_k = 40, .temperature = 1.0, .grad_clip = 1.0,
                      .diverge_nats = 4};
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            printf(train_usage, sn_pipeline_pass_names());
            return 0;
        }
        if (!strcmp(k, "--no-cache") || !strcmp(k, "--tf32")) {
            *(!strcmp(k, "--tf32") ? &a->tf32 : &a->no_cache) = true;
            continue;
        }
        if (!v) return cli_fail("train: option '%s' needs a value (see sinter train --help)", k);
        i++;
        if (!strcmp(k, "--model")) a->model = v;
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cuda") && strcmp(v, "cpu") && strcmp(v, "interp"))
                return cli_fail("train: --device is auto, cuda, cpu or interp, not '%s'", v);
            a->device = v;
        }
        else if (!strcmp(k, "--bpe")) a->bpe = v;
        else if (!strcmp(k, "--train-bin")) a->train_bin = v;
        else if (!strcmp(k, "--val-bin")) a->val_bin = v;
        else if (!strcmp(k, "--log")) a->log = v;
        else if (!strcmp(k, "--plot")) a->plot = v;
        else if (!strcmp(k, "--checkpoint")) a->checkpoint = v;
        else if (!strcmp(k, "--resume")) a->resume = v;
        else if (!strcmp(k, "--prompt")) a->prompt = v;
        else if (!strcmp(k, "--dump-after")) a->dump_after = v;
        else if (!strcmp(k, "--lr")) {
            if (!parse_real(v, 1e-30, 10, &a->lr))
                return cli_fail("train: --lr wants a number > 0 and < 10, not '%s'", v);
        } else if (!strcmp(k, "--temperature")) {
            if (!parse_real(v, 0, 100, &a->temperature))
                return cli_fail("train: --temperature wants a number >= 0 and < 100, not '%s'", v);
        } else if (!strcmp(k, "--grad-clip")) {
            if (!parse_real(v, 0, 1e6, &a->grad_clip))
                return cli_fail("train: --grad-clip wants a number >= 0 and < 1e6, not '%s'", v);
        } else if (!strcmp(k, "--diverge-nats")) {
            if (!parse_real(v, 0, 1e6, &a->diverge_nats))
                return cli_fail("train: --diverge-nats wants a number >= 0 and < 1e6, not '%s'", v);
        } else {
            const int_opt *o = NULL;
            for (size_t j = 0; j < sizeof int_opts / sizeof int_opts[0] && !o; j++)
                if (!strcmp(k, int_opts[j].name)) o = &int_opts[j];
            if (!o) return cli_fail("train: unknown option '%s' (see sinter train --help)", k);
            if (!cli_int(v, o->lo, o->hi, (long *)((char *)a + o->offset))) {
                char fmt[160];
                snprintf(fmt, sizeof fmt, "train: %s wants a whole number from %ld to %ld, not '%%s'",
                         k, o->lo, o->hi);
                return cli_fail(fmt, v);
            }
        }
    }
    if (!a->train_bin != !a->val_bin)
        return cli_fail("train: token shards come in pairs: give both --train-bin and --val-bin%s", "");
    if (a->resume && !a->checkpoint) a->checkpoint = a->resume;
    if (a->dump_after && !strcmp(a->device, "interp") &&
        (!strcmp(a->dump_after, "fuse") || !strcmp(a->dump_after, "memplan")))
        return cli_fail("train: --dump-after %s shows the compiled program, and --device interp "
                        "compiles none (use --device cpu)", a->dump_after);
    return -1; /* go on */
}

/* The device --device names: cuda (an error without a GPU), cpu, auto (cuda when the driver
 * reports a device, else cpu, saying why in one line); NULL for interp. */
static sn_status open_device(const train_args *a, sn_device **dev, sn_err *e) {
    *dev = NULL;
    sn_cuda_opts co = {.tf32 = a->tf32, .no_cache = a->no_cache};
    if (!strcmp(a->device, "cuda")) return sn_cuda_device_new_opts(0, &co, dev, e);
    if (!strcmp(a->device, "auto")) {
        char why[512];
        if (sn_cuda_device_count(why, sizeof why) > 0) return sn_cuda_device_new_opts(0, &co, dev, e);
        printf("no CUDA device (%s): using cpu\n", why);
    }
    if (!strcmp(a->device, "interp")) return SN_OK;
    return sn_cpu_device_new(0, dev, e);
}

/* Everything one `sinter train` holds; run_free releases it. */
typedef struct {
    sn_gpt2_config c;
    int B, T, micro;         /* micro-batches of (B, T) per optimizer step */
    sn_text text;
    sn_tokenizer *tk;
    sn_tokens toks, bin_val; /* what owns the ids: the encoded text, or the two shards */
    sn_tokens train, val;
    sn_val_iter vi;
    sn_graph *g, *sg;        /* training graph; sampling graph (1, T) */
    sn_device *dev;          /* NULL: the reference interpreter */
    sn_trainer *t;
    sn_sampler *sampler;
    sn_run_state run;        /* metadata, data RNG, loss curves: what a checkpoint carries */
    int32_t *x, *y, *prompt, *gen;
    int n_prompt;
    train_log log;           /* --log; log.open when there is one */
    progress prog;
    long saved_step;         /* the step of the last checkpoint written or read; -1: none */
    int stopped_by;          /* the signal that stopped the run (exit 128 + it); 0: none */
} session;

static void run_free(session *r) {
    free(r->x);
    free(r->y);
    free(r->prompt);
    free(r->gen);
    sn_run_state_free(&r->run);
    sn_sampler_free(r->sampler);
    sn_trainer_free(r->t);
    sn_device_free(r->dev);
    sn_graph_free(r->sg);
    sn_graph_free(r->g);
    sn_tokens_free(&r->toks);
    sn_tokens_free(&r->bin_val);
    if (r->tk) sn_tokenizer_free(r->tk);
    sn_text_free(&r->text);
}

/* The tokenizer and the train / validation streams: a text split 90/10, or two shards. */
static sn_status load_data(const train_args *a, session *r, sn_err *e) {
    sn_status s;
    if (a->bpe) {
        char enc[4096], merges[4096];
        snprintf(enc, sizeof enc, "%s/encoder.json", a->bpe);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", a->bpe);
        if ((s = sn_tokenizer_gpt2_load(enc, merges, &r->tk, e))) return s;
    } else {
        if (!(r->tk = sn_tokenizer_bytes_new())) return sn_fail_oom(e, 512, "the byte tokenizer");
    }
    if (a->train_bin) {
        if ((s = sn_shard_read(a->train_bin, r->tk->vocab, &r->toks, e)) ||
            (s = sn_shard_read(a->val_bin, r->tk->vocab, &r->bin_val, e))) {
            if (!a->bpe && s == SN_ERR_PARSE && strstr(e->msg, "vocab"))
                snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                         " (shards of GPT-2 tokens need --bpe DIR)");
            return s;
        }
        r->train = r->toks;
        r->train.cap = 0; /* views: toks and bin_val own the ids */
        r->val = r->bin_val;
        r->val.cap = 0;
        return SN_OK;
    }
    if ((s = sn_text_load(a->data, &r->text, e))) return s;
    if ((s = sn_tokenizer_encode(r->tk, r->text.bytes, r->text.len, &r->toks, e))) return s;
    return sn_tokens_split(&r->toks, 0.1, &r->train, &r->val, e);
}

static uint64_t tokens_hash(const sn_tokens *t) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < t->n; i++) h = (h ^ (uint64_t)sn_tokens_get(t, i)) * 0x100000001b3ull;
    return h;
}

/* What a checkpoint of this run must agree with to be resumed (the trainer adds its options). */
static void set_meta(session *r) {
    sn_run_state *m = &r->run;
    sn_run_meta_set(m, "model", "%s", r->c.name);
    sn_run_meta_set(m, "model.shape", "vocab %d, ctx %d, %d layers, %d heads, %d channels",
                    r->c.vocab, r->c.ctx, r->c.n_layer, r->c.n_head, r->c.n_embd);
    sn_run_meta_set(m, "tokenizer", "%s", r->tk->name);
    sn_run_meta_set(m, "batch", "%d", r->B);
    sn_run_meta_set(m, "seq", "%d", r->T);
    sn_run_meta_set(m, "tokens_per_step", "%ld", (long)r->micro * r->B * r->T);
    sn_run_meta_set(m, "train_data", "%zu tokens, hash %016" PRIx64, r->train.n, tokens_hash(&r->train));
    sn_run_meta_set(m, "val_data", "%zu tokens, hash %016" PRIx64, r->val.n, tokens_hash(&r->val));
}

/* The forward graph for samples: the same model with one sequence of the training length,
 * through the same forward passes so that its parameters have the trainer's names and shapes. */
static sn_status build_sampler(const train_args *a, session *r, sn_err *e) {
    if (!(r->sg = sn_graph_new())) return sn_fail_oom(e, sizeof(sn_graph), "the sampling graph");
    sn_gpt2 m;
    sn_status s = sn_gpt2_build(r->sg, &r->c, 1, r->T, &m, e);
    sn_pipeline_opts po = sn_pipeline_defaults(); /* the trainer's forward rewrites, no dump */
    if (s || (s = sn_compile(r->sg, &po, NULL, NULL, e))) return s;
    const sn_node *idx = NULL, *logits = NULL;
    for (int i = 0; i < r->sg->n_nodes; i++) {
        const sn_node *n = r->sg->nodes[i];
        if (n->op == SN_OP_INPUT && !strcmp(n->name, "idx")) idx = n;
    }
    for (int i = 0; i < r->sg->n_outputs && !logits; i++)
        if (r->sg->outputs[i]->rank == 3) logits = r->sg->outputs[i];
    if (!(r->sampler = sn_sampler_new(r->sg, idx, logits, r->dev, e))) return e->code;
    sn_tokens p = {0};
    if (a->prompt && (s = sn_tokenizer_encode(r->tk, a->prompt, strlen(a->prompt), &p, e))) return s;
    if (!a->prompt || !p.n) /* the validation text's first token, else a newline */
        s = r->val.n ? sn_tokens_push(&p, sn_tokens_get(&r->val, 0), e) : sn_tokenizer_encode(r->tk, "\n", 1, &p, e);
    r->n_prompt = (int)p.n;
    r->prompt = sn_malloc(sizeof(int32_t) * (p.n + 1), "the prompt", e);
    r->gen = sn_malloc(sizeof(int32_t) * (size_t)(a->sample_len + 1), "the samples", e);
    if (!r->prompt || !r->gen) s = SN_ERR_OOM;
    for (size_t i = 0; !s && i < p.n; i++) r->prompt[i] = sn_tokens_get(&p, i);
    sn_tokens_free(&p);
    return s;
}

static sn_status build(const train_args *a, session *r, sn_err *e) {
    sn_status s;
    if (!sn_gpt2_config_find(a->model, &r->c))
        return sn_fail(e, SN_ERR_INVALID, "unknown model '%s' (models: %s)", a->model, sn_gpt2_config_names());
    if ((s = load_data(a, r, e))) return s;
    r->c.vocab = r->tk->vocab;
    r->B = (int)a->batch;
    r->T = a->seq > 0 ? (int)a->seq : r->c.ctx;
    long bt = (long)r->B * r->T;
    if (a->tokens_per_step && a->tokens_per_step % bt)
        return sn_fail(e, SN_ERR_INVALID, "--tokens-per-step %ld is not a multiple of batch x seq "
                       "= %d x %d = %ld: use %ld or %ld", a->tokens_per_step, r->B, r->T, bt,
                       a->tokens_per_step / bt * bt > 0 ? a->tokens_per_step / bt * bt : bt,
                       (a->tokens_per_step / bt + 1) * bt);
    r->micro = a->tokens_per_step ? (int)(a->tokens_per_step / bt) : 1;

    if (!(r->g = sn_graph_new())) return sn_fail_oom(e, sizeof(sn_graph), "the training graph");
    sn_gpt2 m;
    if ((s = sn_gpt2_build(r->g, &r->c, r->B, r->T, &m, e))) return s;
    /* the graph passes here; the trainer compiles the rest (fuse, memplan) with the same options */
    sn_pipeline_opts po = sn_pipeline_defaults();
    po.backward = true;
    po.dump_after = a->dump_after;
    if ((s = sn_compile(r->g, &po, NULL, NULL, e))) return s;
    sn_train_opts o;
    sn_train_opts_default(&o, (int)a->steps);
    o.lr = (float)a->lr;
    o.grad_clip = (float)a->grad_clip;
    o.seed = (uint64_t)a->seed;
    if ((s = open_device(a, &r->dev, e))) return s;
    o.device = r->dev;
    o.compile = &po;
    if (!(r->t = sn_trainer_new(r->g, &o, e))) return e->code;
    if ((s = sn_val_iter_init(&r->vi, &r->val, r->B, r->T, e))) return s;
    if (a->sample_len && (s = build_sampler(a, r, e))) return s;
    r->x = sn_malloc(sizeof(int32_t) * (size_t)bt, "a batch of token ids", e);
    r->y = sn_malloc(sizeof(int32_t) * (size_t)bt, "a batch of token ids", e);
    if (!r->x || !r->y) return SN_ERR_OOM;
    set_meta(r);
    r->run.data_rng = sn_rng_seed((uint64_t)a->seed ^ 0x5eedull);
    r->saved_step = -1;
    if (a->resume) {
        if ((s = sn_checkpoint_load(a->resume, r->t, &r->run, e))) return s;
        r->saved_step = sn_trainer_step_count(r->t);
    }
    return a->log ? train_log_open(&r->log, a->log, sn_trainer_step_count(r->t), e) : SN_OK;
}

/* Mean loss over up to 8 validation batches. */
static sn_status validate(session *r, double *out, sn_err *e) {
    double sum = 0;
    int n = 0;
    sn_val_iter_reset(&r->vi);
    while (n < 8 && sn_val_iter_next(&r->vi, r->x, r->y)) {
        sn_status s;
        double l;
        if ((s = sn_trainer_eval(r->t, r->x, r->y, &l, e))) return s;
        sum += l;
        n++;
    }
    *out = n ? sum / n : 0;
    return SN_OK;
}

static sn_status sample(const train_args *a, session *r, long step, sn_err *e) {
    sn_sample_opts so = {.n_new = (int)a->sample_len, .temperature = (float)a->temperature,
                         .top_k = (int)a->top_k, .vocab = r->tk->vocab,
                         .seed = sn_hash_str("sample", (uint64_t)a->seed + 1) + (uint64_t)step};
    sn_status s = sn_sampler_load(r->sampler, r->t, e);
    if (s || (s = sn_sampler_generate(r->sampler, r->prompt, r->n_prompt, &so, r->gen, e))) return s;
    char heading[160];
    snprintf(heading, sizeof heading, "sample at step %ld (temperature %g, top-k %ld)", step,
             a->temperature, a->top_k);
    progress_break(&r->prog);
    train_print_sample(stdout, r->tk, r->prompt, r->n_prompt, r->gen, (int)a->sample_len, heading);
    return SN_OK;
}

static sn_status save(const train_args *a, session *r, long step, sn_err *e) {
    sn_status s = sn_checkpoint_save(a->checkpoint, r->t, &r->run, e);
    if (!s) r->saved_step = step;
    return s;
}

static sn_status plot(const train_args *a, session *r, sn_err *e) {
    char title[128];
    snprintf(title, sizeof title, "sinter train: %s, %ld tokens per step", r->c.name, (long)r->micro * r->B * r->T);
    return sn_plot_losses(a->plot, title, &r->run.train_loss, &r->run.val_loss, e);
}

/* One optimizer step: r->micro micro-batches drawn from the data RNG, then the update. */
static sn_status step_once(session *r, sn_step_stats *st, sn_err *e) {
    sn_status s = SN_OK;
    for (int k = 0; k < r->micro && !s; k++)
        if (!(s = sn_batch_sample(&r->train, r->B, r->T, &r->run.data_rng, r->x, r->y, e)))
            s = sn_trainer_accumulate(r->t, r->x, r->y, NULL, e);
    return s ? s : sn_trainer_update(r->t, st, e);
}

/* ---- divergence: the rule of --diverge-nats ---- */

enum { DIVERGE_WINDOW = 50, DIVERGE_MIN = 1 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Whether loss is more than a->diverge_nats above the median of the last DIVERGE_WINDOW losses
 * in curve (from the second step on); the median in *median. The curve is the run's, so a
 * resumed run applies the rule exactly as the uninterrupted one would. */
static bool diverged(const train_args *a, const sn_series *curve, double loss, double *median) {
    int n = curve->n < DIVERGE_WINDOW ? curve->n : DIVERGE_WINDOW;
    if (a->diverge_nats <= 0 || n < DIVERGE_MIN) return false;
    double w[DIVERGE_WINDOW];
    memcpy(w, curve->y + curve->n - n, sizeof(double) * (size_t)n);
    qsort(w, (size_t)n, sizeof *w, cmp_double);
    *median = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
    return loss > *median + a->diverge_nats;
}

/* ---- signals: SIGINT and SIGTERM finish the step; a second one stops at once ---- */

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    if (stop_signal) {
        static const char msg[] = "\nsinter train: second interrupt: stopping now; nothing more "
                                  "is saved (temporary files removed)\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        sn_savefile_unlink_all();
        _exit(128 + sig);
    }
    stop_signal = sig;
    static const char msg[] = "\nsinter train: interrupted: finishing the current step, then "
                              "saving and stopping (interrupt again to stop at once)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

static void catch_stop_signals(void) {
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* After a signal: the checkpoint saved (unless this step's was), the log synced, a message. */
static sn_status stop_now(const train_args *a, session *r, long step, sn_err *e) {
    progress_break(&r->prog);
    sn_status s = a->checkpoint && r->saved_step != step ? save(a, r, step, e) : SN_OK;
    if (!s) s = train_log_sync(&r->log, e);
    if (s) return s;
    r->stopped_by = stop_signal;
    const char *name = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (a->checkpoint)
        printf("stopped by %s after step %ld of %ld: checkpoint %s saved; continue with the same "
               "options and --resume %s\n", name, step, a->steps, a->checkpoint, a->checkpoint);
    else
        printf("stopped by %s after step %ld of %ld; nothing saved (no --checkpoint)\n", name,
               step, a->steps);
    fflush(stdout);
    return SN_OK;
}

/* Every output path writable, before any work: a bad path found at the first save or at the end
 * wastes the run. */
static sn_status check_outputs(const train_args *a, sn_err *e) {
    sn_status s = SN_OK;
    if (a->checkpoint) s = sn_savefile_check(a->checkpoint, "checkpoint", e);
    if (!s && a->log) s = sn_savefile_check(a->log, "log", e);
    if (!s && a->plot) s = sn_savefile_check(a->plot, "plot", e);
    return s;
}

static sn_status train(const train_args *a, session *r, sn_err *e) {
    sn_status s = check_outputs(a, e);
    if (!s) s = build(a, r, e);
    if (s) return s;
    long start = sn_trainer_step_count(r->t), steps = a->steps, tps = (long)r->micro * r->B * r->T;
    if (stop_signal) {
        r->stopped_by = stop_signal;
        printf("stopped by a signal before the first step: nothing to save\n");
        return SN_OK;
    }
    printf("sinter train: model %s (%lld parameters), %s tokenizer (vocab %d), %zu training / "
           "%zu validation tokens from %s\n", r->c.name, (long long)sn_graph_param_count(r->g),
           r->tk->name, r->c.vocab, r->train.n, r->val.n, a->train_bin ? a->train_bin : a->data);
    printf("batch %d x %d tokens, %d micro-batch%s per step (%ld tokens)\n", r->B, r->T, r->micro,
           r->micro > 1 ? "es" : "", tps);
    if (a->resume) printf("resumed from %s at step %ld\n", a->resume, start);
    printf("device: %s\n", sn_trainer_backend(r->t));
    progress_init(&r->prog);
    double t0 = sn_clock_s();
    for (long step = start; step < steps; step++) {
        sn_step_stats st;
        /* A failed step leaves the trainer as it was and nothing is saved after it. */
        if ((s = step_once(r, &st, e))) {
            if (s == SN_ERR_NUMERIC)
                snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                         " (step %ld: the run diverged)", step + 1);
            return s;
        }
        double median = 0;
        bool spike = diverged(a, &r->run.train_loss, st.loss, &median);
        if ((s = sn_series_push(&r->run.train_loss, (double)(step + 1), st.loss, e))) return s;
        double el = sn_clock_s() - t0, tok_s = (double)(step + 1 - start) * (double)tps / el, val = -1;
        bool last = step + 1 == steps;
        if (!spike && ((a->eval_every && (step + 1) % a->eval_every == 0) || last)) {
            if ((s = validate(r, &val, e))) return s;
            if ((s = sn_series_push(&r->run.val_loss, (double)(step + 1), val, e))) return s;
            if (a->plot && (s = plot(a, r, e))) return s;
        }
        double eta = el / (double)(step + 1 - start) * (double)(steps - step - 1);
        progress_show(&r->prog, step + 1, steps, st.loss, st.lr, st.grad_norm, tok_s, eta, val,
                      val >= 0 || last || spike);
        if (r->log.open && (s = train_log_row(&r->log, step + 1, st.loss, val, st.lr, st.grad_norm, tok_s, e)))
            return s;
        if (spike) {
            int n = r->run.train_loss.n - 1 < DIVERGE_WINDOW ? r->run.train_loss.n - 1 : DIVERGE_WINDOW;
            return sn_fail(e, SN_ERR_NUMERIC, "step %ld: the loss %.4f is %.1f nats above the median "
                           "%.4f of the %d step%s before (more than --diverge-nats %g): the run "
                           "diverged", step + 1, st.loss, st.loss - median, median, n,
                           n > 1 ? "s" : "", a->diverge_nats);
        }
        if (a->checkpoint && (last || (a->save_every && (step + 1) % a->save_every == 0)) &&
            (s = save(a, r, step + 1, e)))
            return s;
        if (r->saved_step == step + 1 && (s = train_log_sync(&r->log, e))) return s;
        if (stop_signal) return stop_now(a, r, step + 1, e);
        if (a->sample_len && a->sample_every && (step + 1) % a->sample_every == 0 && !last &&
            (s = sample(a, r, step + 1, e)))
            return s;
    }
    progress_break(&r->prog);
    if ((s = train_log_sync(&r->log, e))) return s;
    if (start == steps) printf("the run in %s is already complete (%ld steps)\n", a->resume, steps);
    else printf("done: %ld steps in %.1fs\n", steps - start, sn_clock_s() - t0);
    if (a->checkpoint && r->saved_step == steps) printf("checkpoint: %s\n", a->checkpoint);
    if (a->plot && start == steps && (s = plot(a, r, e))) return s;
    if (a->plot) printf("plot: %s\n", a->plot);
    return a->sample_len ? sample(a, r, steps, e) : SN_OK;
}

int cli_train(int argc, char **argv) {
    train_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    session r = {0};
    sn_err e = {0};
    catch_stop_signals();
    sn_status s = train(&a, &r, &e);
    if (s) {
        progress_break(&r.prog);
        fflush(stdout);
        fprintf(stderr, "sinter train: %s\n", e.msg);
        if (s == SN_ERR_NUMERIC) {
            if (a.checkpoint && r.saved_step >= 0)
                fprintf(stderr, "sinter train: nothing was saved after it; the last good checkpoint "
                        "is %s (step %ld). Resuming it with the same options repeats the same steps: "
                        "start afresh with a lower --lr (this run: %g) or a smaller --grad-clip "
                        "(this run: %g)\n", a.checkpoint, r.saved_step, a.lr, a.grad_clip);
            else
                fprintf(stderr, "sinter train: %s; start afresh with a lower --lr (this run: %g) "
                        "or a smaller --grad-clip (this run: %g)\n",
                        a.checkpoint ? "no checkpoint was written (none was due yet)"
                                     : "no --checkpoint was given", a.lr, a.grad_clip);
        }
    }
    const char *kept = train_log_close(&r.log, s != SN_OK);
    if (kept)
        fprintf(stderr, "sinter train: the log %s was not replaced; this run's rows are in %s\n", a.log, kept);
    run_free(&r);
    if (s) return 1;
    return r.stopped_by ? 128 + r.stopped_by : 0;
}
