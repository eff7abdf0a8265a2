/* train_cmd.c: `sinter train`: a GPT-2 trained on a text corpus or llm.c token shards through a
 * training session (api/session.h: data, device, gradient accumulation, validation, samples,
 * exact checkpoints); this file runs it and prints the progress, CSV log and plot (its options:
 * train_opts.c). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/session.h"
#include "data/data.h"
#include "io/weights.h"
#include "io/hf_llama.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "program/target.h"
#include "support/clock.h"
#include "support/plot.h"
#include "support/rng.h"
#include "cli.h"
#include "stop_signals.h"
#include "train_cli.h"

/* The model a session builds: a GPT-2 configuration, with LoRA adapters or not. */
typedef struct {
    sn_gpt2_config c;
    bool has_lora;
    sn_gpt2_lora lora;
} gpt2_model;

/* GPT-2 of the configuration in user (a gpt2_model), as a session's model. */
static sn_status build_gpt2(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    const gpt2_model *gm = user;
    sn_gpt2_config c = gm->c;
    c.vocab = V;
    sn_gpt2 m;
    return sn_gpt2_build_lora(g, &c, B, T, gm->has_lora ? &gm->lora : NULL, &m, e);
}

/* Its generation graphs (train/generate.h), the same parameters. */
static sn_status build_gpt2_kv(sn_graph *g, int B, int T, int V, bool decode, void *user, sn_err *e) {
    const gpt2_model *gm = user;
    sn_gpt2_config c = gm->c;
    c.vocab = V;
    return sn_gpt2_build_kv(g, &c, B, T, decode, gm->has_lora ? &gm->lora : NULL, e);
}

/* The model a session builds: a LLaMA-family configuration, with LoRA adapters or not. */
typedef struct {
    sn_llama_config c;
    bool has_lora;
    sn_llama_lora lora;
} llama_model;

/* The LLaMA-family model of the configuration in user (a llama_model), as a session's model. */
static sn_status build_llama(sn_graph *g, int B, int T, int V, void *user, sn_err *e) {
    const llama_model *lm = user;
    sn_llama_config c = lm->c;
    c.vocab = V;
    sn_llama m;
    return sn_llama_build_lora(g, &c, B, T, lm->has_lora ? &lm->lora : NULL, &m, e);
}

/* Its generation graphs (train/generate.h), the same parameters. */
static sn_status build_llama_kv(sn_graph *g, int B, int T, int V, bool decode, void *user, sn_err *e) {
    const llama_model *lm = user;
    sn_llama_config c = lm->c;
    c.vocab = V;
    return sn_llama_build_kv_lora(g, &c, B, T, decode, lm->has_lora ? &lm->lora : NULL, e);
}

/* --lora R (--lora-alpha, --lora-targets) as adapters, or --ia3's vectors, and their words after
 * desc's at: the same for both families, checked on resume with the rest of the shape. */
static void lora_of(const train_args *a, sn_gpt2_lora *l, char *desc, size_t len, int at) {
    if (a->ia3) {
        *l = (sn_gpt2_lora){.ia3 = true};
        snprintf(desc + at, len - (size_t)at, ", IA3");
        return;
    }
    l->lora = (sn_lora){.rank = (int)a->lora, .alpha = a->lora_alpha > 0 ? (float)a->lora_alpha : (float)a->lora};
    sn_gpt2_lora_targets_parse(a->lora_targets ? a->lora_targets : "all", &l->targets);
    snprintf(desc + at, len - (size_t)at, ", LoRA rank %d alpha %.9g on %s", l->lora.rank,
             (double)l->lora.alpha, sn_gpt2_lora_targets_name(l->targets));
}

/* Everything one `sinter train` holds beside the session. */
typedef struct {
    gpt2_model gm;
    llama_model lm;     /* the model when llama */
    bool llama;
    char desc[160];
    char config[512];   /* a config.json's own LLaMA shape as the checkpoint keeps it */
    sn_session *s;
    train_log log;           /* --log; log.open when there is one */
    progress prog;
    long saved_step;         /* the step of the last checkpoint written or read; -1: none */
    int stopped_by;          /* the signal that stopped the run (exit 128 + it); 0: none */
    bool stepped;            /* a training step was tried (a failure after it is the run's) */
    double recent[50];       /* the losses of the last steps of this process, a ring */
    int n_recent;            /* steps in it so far */
} run;

/* The command line's words as the session's enums (the option table has checked the words):
 * --device, --precision (and --tf32), --checkpoint-policy (-1: not given), --offload. */
static void session_enums(const train_args *a, sn_session_opts *o) {
    const char *d = a->device;
    o->device = !strcmp(d, "cuda") ? SN_DEVICE_CUDA : !strcmp(d, "cpu") ? SN_DEVICE_CPU
              : !strcmp(d, "interp") ? SN_DEVICE_INTERP : SN_DEVICE_AUTO;
    o->precision_auto = !strcmp(a->precision, "auto");
    o->precision = o->precision_auto ? SN_PRECISION_FP32 : (sn_precision)sn_precision_parse(a->precision);
    o->tf32 = a->tf32;
    o->checkpoint_policy = a->checkpoint_policy == SN_RECOMPUTE_NONE    ? SN_CHECKPOINT_NONE
                           : a->checkpoint_policy == SN_RECOMPUTE_BLOCK ? SN_CHECKPOINT_BLOCK
                           : a->checkpoint_policy == SN_RECOMPUTE_SQRT  ? SN_CHECKPOINT_SQRT
                                                                        : SN_CHECKPOINT_AUTO;
    o->offload = a->offload < 0 ? SN_OFFLOAD_AUTO : a->offload ? SN_OFFLOAD_OPTIMIZER : SN_OFFLOAD_NONE;
    o->offload_delay = a->offload_delay;
    o->offload_threads = (int)a->offload_threads; /* at most 4096 (the option's range) */
}

/* A LLaMA-family model: --model's built-in shape, or --init-hf's config.json. */
static sn_status build_llama_model(const train_args *a, run *r, sn_model *m, sn_err *e) {
    sn_llama_config *c = &r->lm.c;
    sn_status s;
    if (a->dropout > 0)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "--dropout with a LLaMA-family model is not supported "
                       "yet (GPT-2's models have it); train without --dropout");
    if (a->init_hf && (s = sn_hf_llama_read_config(a->init_hf, c, e))) return s;
    if (!a->init_hf) sn_llama_config_find(a->model, c);
    int at = snprintf(r->desc, sizeof r->desc, "ctx %d, %d layers, %d/%d heads of %d, hidden %d, MLP %d%s",
                      c->ctx, c->n_layer, c->n_head, c->n_kv_head, c->head_dim, c->hidden,
                      c->intermediate, c->tie_word_embeddings ? ", tied" : "");
    if (a->lora || a->ia3) {
        r->lm.has_lora = true;
        lora_of(a, &r->lm.lora, r->desc, sizeof r->desc, at);
    }
    *m = (sn_model){.name = c->name, .desc = r->desc, .ctx = c->ctx, .build = build_llama, .user = &r->lm,
                    .build_kv = build_llama_kv, .n_layer = c->n_layer};
    if (!sn_llama_config_find(c->name, &(sn_llama_config){0})) { /* no built-in name holds it */
        sn_llama_config_format(c, r->config, sizeof r->config);
        m->config = r->config;
    }
    return SN_OK;
}

/* A GPT-2: --model's configuration, or --init-hf's (config.json or llm.c's header). */
static sn_status build_gpt2_model(const train_args *a, run *r, sn_model *m, sn_err *e) {
    sn_status s;
    sn_gpt2_config *c = &r->gm.c;
    /* --init-hf (issue 23): the model is the pretrained file's GPT-2 */
    if (a->init_hf && (s = sn_weights_read_config(a->init_hf, c, e))) return s;
    if (!a->init_hf && !sn_gpt2_config_find(a->model, c))
        return sn_fail(e, SN_ERR_INVALID, "unknown model '%s' (models: %s)", a->model, sn_gpt2_config_names());
    c->dropout = (float)a->dropout; /* in the checkpoint as train.dropout (the trainer's) */
    int at = snprintf(r->desc, sizeof r->desc, "ctx %d, %d layers, %d heads, %d channels", c->ctx,
                      c->n_layer, c->n_head, c->n_embd);
    if (a->lora || a->ia3) { /* the adapters' shape and scale: checked on resume with the rest */
        r->gm.has_lora = true;
        lora_of(a, &r->gm.lora, r->desc, sizeof r->desc, at);
    }
    *m = (sn_model){.name = c->name, .desc = r->desc, .ctx = c->ctx, .build = build_gpt2, .user = &r->gm,
                    .build_kv = build_gpt2_kv, .n_layer = c->n_layer};
    return SN_OK;
}

static sn_status build(const train_args *a, run *r, sn_err *e) {
    sn_status s;
    sn_model m;
    sn_llama_config probe;
    r->llama = a->init_hf ? sn_hf_is_llama(a->init_hf) : sn_llama_config_find(a->model, &probe);
    if ((s = r->llama ? build_llama_model(a, r, &m, e) : build_gpt2_model(a, r, &m, e))) return s;
    sn_session_opts o = sn_session_defaults();
    session_enums(a, &o);
    o.no_cache = a->no_cache;
    o.tokenizer_file = a->tokenizer_file;
    o.data = a->data;
    o.train_bin = a->train_bin;
    o.data_in_order = a->in_order;
    o.val_bin = a->val_bin;
    o.bpe = a->bpe;
    o.batch = (int)a->batch;
    o.seq = a->seq > 0 ? (int)a->seq : 0;
    o.tokens_per_step = a->tokens_per_step;
    o.steps = (int)a->steps;
    o.lr = a->lr;
    o.warmup = (int)a->warmup;
    o.weight_decay = a->weight_decay;
    o.beta1 = a->beta1;
    o.beta2 = a->beta2;
    o.grad_clip = a->grad_clip;
    o.min_lr_frac = a->min_lr_frac;
    o.seed = (uint64_t)a->seed;
    o.resume = a->resume;
    o.init = a->init;
    o.init_pretrained = a->init_hf;
    o.dump_after = a->dump_after;
    o.mem = a->mem;
    o.chunk_logits = a->chunk_logits;
    o.fp8 = a->fp8 ? sn_fp8_policy_parse(a->fp8) : 0;
    o.nf4 = a->qlora > 0;
    o.base_f32 = a->base_f32;
    if ((s = sn_session_new(&m, &o, &r->s, e))) return s;
    sn_session_set_stop(r->s, cli_stop_flag()); /* a signal cuts a validation short */
    sn_session_info in;
    sn_session_info_get(r->s, &in);
    r->saved_step = a->resume ? in.step : -1;
    return a->log ? train_log_open(&r->log, a->log, in.step, e) : SN_OK;
}

static sn_status sample(const train_args *a, run *r, long step, sn_err *e) {
    sn_session_sample_opts so = {.prompt = a->prompt, .n_new = (int)a->sample_len,
                                 .temperature = (float)a->temperature, .top_k = (int)a->top_k,
                                 .top_p = (float)a->top_p,
                                 .seed = sn_hash_str("sample", (uint64_t)a->seed + 1) + (uint64_t)step};
    char *text;
    size_t len;
    sn_status s = sn_session_sample(r->s, &so, &text, &len, e);
    if (s) return s;
    char heading[160];
    int at = snprintf(heading, sizeof heading, "sample at step %ld (temperature %g, top-k %ld", step,
                      a->temperature, a->top_k);
    snprintf(heading + at, sizeof heading - (size_t)at, a->top_p < 1 ? ", top-p %g)" : ")", a->top_p);
    progress_break(&r->prog);
    train_print_sample(stdout, text, len, heading);
    free(text);
    return SN_OK;
}

static sn_status save(const train_args *a, run *r, long step, sn_err *e) {
    sn_status s = sn_session_save(r->s, a->checkpoint, e);
    if (!s) r->saved_step = step;
    return s;
}

static sn_status plot(const train_args *a, run *r, long tps, sn_err *e) {
    char title[128];
    snprintf(title, sizeof title, "sinter train: %s, %ld tokens per step",
             r->llama ? r->lm.c.name : r->gm.c.name, tps);
    return sn_session_plot(r->s, a->plot, title, e);
}

/* ---- divergence: the rule of --diverge-nats ---- */

enum { DIVERGE_WINDOW = 50, DIVERGE_MIN = 1 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Whether loss is more than a->diverge_nats above the median of the last DIVERGE_WINDOW losses
 * this process has seen (from its second step on); the median in *median, the losses it was
 * taken over in *n. Then loss joins the window. */
static bool diverged(const train_args *a, run *r, double loss, double *median, int *n) {
    *n = r->n_recent < DIVERGE_WINDOW ? r->n_recent : DIVERGE_WINDOW;
    double w[DIVERGE_WINDOW];
    memcpy(w, r->recent, sizeof(double) * (size_t)*n);
    r->recent[r->n_recent++ % DIVERGE_WINDOW] = loss;
    if (a->diverge_nats <= 0 || *n < DIVERGE_MIN) return false;
    qsort(w, (size_t)*n, sizeof *w, cmp_double);
    *median = *n % 2 ? w[*n / 2] : (w[*n / 2 - 1] + w[*n / 2]) / 2;
    return loss > *median + a->diverge_nats;
}

/* ---- signals (stop_signals.h): SIGINT and SIGTERM finish the step, save and stop; a second
 * one stops at once, the temporary files removed, so no temporary file outlives the exit and a
 * final file only ever appears by a whole rename. */

static void catch_stop_signals(void) {
    if (!cli_stop_signals_start("\nsinter train: interrupted: finishing the current step, then "
                                "saving and stopping (interrupt again to stop at once)\n",
                                "\nsinter train: second interrupt: stopping now; nothing more is "
                                "saved (temporary files removed)\n", false))
        fprintf(stderr, "sinter train: warning: cannot start the signal thread (%s): SIGINT and "
                "SIGTERM stop the run at once, without a checkpoint\n", strerror(errno));
}

/* Tests only: SN_TRAIN_PAUSE_AFTER=N holds the run after step N (its log row written and
 * flushed, its save done) until it is killed or a stop signal comes (then it stops after step N),
 * so that a test stops it at a known step (tests/resume.sh, lora.sh, qlora.sh: on a quiet
 * machine with warm kernels the whole run could end between two looks at the log). */
static void test_pause(long step) {
    static long after = -1; /* read once: 0 when unset */
    if (after < 0) {
        const char *v = getenv("SN_TRAIN_PAUSE_AFTER");
        after = v ? strtol(v, NULL, 10) : 0;
    }
    if (after <= 0 || after != step) return;
    fflush(stdout);
    while (!cli_stop_signal()) nanosleep(&(struct timespec){0, 10000000}, NULL);
}

/* After a signal: the checkpoint saved (unless this step's was), the log synced, a message. */
static sn_status stop_now(const train_args *a, run *r, long step, sn_err *e) {
    progress_break(&r->prog);
    sn_status s = a->checkpoint && r->saved_step != step ? save(a, r, step, e) : SN_OK;
    if (!s) s = train_log_sync(&r->log, e);
    if (s) return s;
    r->stopped_by = cli_stop_signal();
    const char *name = cli_stop_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    if (a->checkpoint)
        printf("stopped by %s after step %ld of %ld: checkpoint %s saved; continue with the same "
               "options and --resume %s\n", name, step, a->steps, a->checkpoint, a->checkpoint);
    else
        printf("stopped by %s after step %ld of %ld; nothing saved (no --checkpoint)\n", name,
               step, a->steps);
    fflush(stdout);
    return SN_OK;
}

/* A checkpoint to read (--resume, --init) that is there but not a regular file is an input's
 * problem, said as one (--resume is also the default --checkpoint, whose check would call it
 * unwritable). */
static sn_status check_input(const char *opt, const char *path, sn_err *e) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || S_ISREG(st.st_mode)) return SN_OK; /* missing: the reader says */
    return sn_fail(e, SN_ERR_IO, "cannot read %s: it is %s, not a regular file: give %s a "
                   "checkpoint file", path, S_ISDIR(st.st_mode) ? "a directory"
                   : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket", opt);
}

/* Each output's temporaries that a killed run left (savefile.h), removed with a message. */
static void remove_stale(const char *opt, const char *path, time_t started) {
    int n = path ? sn_savefile_remove_stale(path, started) : 0;
    if (n)
        fprintf(stderr, "sinter train: removed %d temporary file%s of %s %s (%s.tmp.*) left by a "
                "run that was killed while saving\n", n, n > 1 ? "s" : "", opt, path, path);
}

/* Every output path writable and of its own kind, before any work: a bad path found at the
 * first save or at the end wastes the run. */
static sn_status check_outputs(const train_args *a, time_t started, sn_err *e) {
    static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    sn_status s = check_input("--resume", a->resume, e);
    if (!s) s = check_input("--init", a->init, e);
    if (!s && a->checkpoint)
        s = cli_check_kind("--checkpoint", a->checkpoint, "checkpoint", "SNCKPT\x1a\n", 8, a->overwrite, e);
    bool jsonl = a->log && train_log_is_jsonl(a->log); /* JSON lines start {"step":... */
    if (!s && a->log)
        s = cli_check_kind("--log", a->log, "log", jsonl ? "{\"step\":" : "step,", jsonl ? 8 : 5,
                           a->overwrite, e);
    if (!s && a->plot) s = cli_check_kind("--plot", a->plot, "PNG plot", png, 8, a->overwrite, e);
    if (s) return s;
    remove_stale("--checkpoint", a->checkpoint, started);
    remove_stale("--log", a->log, started);
    remove_stale("--plot", a->plot, started);
    if (a->checkpoint) s = sn_savefile_check(a->checkpoint, "checkpoint", e);
    if (!s && a->log) s = sn_savefile_check(a->log, "log", e);
    if (!s && a->plot && !sn_png_supported())
        s = sn_fail(e, SN_ERR_UNSUPPORTED, "--plot %s: this build of sinter has no libpng, so no "
                    "plots: install libpng-dev and rebuild (./setup), or leave out --plot", a->plot);
    if (!s && a->plot) s = sn_savefile_check(a->plot, "plot", e);
    return s;
}

/* "precision: P" and why: auto's choice, or what another precision would give here. */
static void print_precision(const train_args *a, const sn_session_info *in) {
    bool on_cpu = !in->cuda_sm, interp = !strncmp(in->device, "reference interpreter", 21);
    sn_target cpu = sn_target_cpu();
    bool cpu_bf16 = on_cpu && !interp && cpu.native_bf16, fp32 = in->precision == SN_PRECISION_FP32;
    const char *name = sn_precision_name(in->precision);
    printf("precision: %s", name);
    if (!strcmp(a->precision, "auto")) { /* a GPU's choice is bf16 or fp16 (sn_target_default_precision) */
        if (a->resume) printf(" (auto: the checkpoint's)\n");
        else if (!on_cpu) printf(" (auto: this GPU's tensor cores multiply %s%s; --precision fp32 "
                                 "for f32 products)\n", name, in->precision == SN_PRECISION_FP16 ?
                                 ", the loss scaled" : "");
        else printf(" (auto%s)\n", cpu_bf16 ? "; this CPU has bf16 dot products: --precision bf16 "
                    "trains about 1.6x faster" : "");
        return;
    }
    printf("%s\n", in->precision == SN_PRECISION_TF32 && on_cpu
                       ? " (TF32 is a CUDA tensor-core mode: on this device it means fp32)"
                   : fp32 && !on_cpu && in->cuda_sm >= 80
                       ? " (this GPU's tensor cores multiply bf16: --precision bf16 trains several times faster)"
                   : fp32 && !on_cpu
                       ? " (this GPU's tensor cores multiply fp16: --precision fp16 trains several times faster)"
                   : fp32 && cpu_bf16 ? " (this CPU has bf16 dot products: --precision bf16 trains about "
                                        "1.6x faster)" : "");
}

/* "fp8: ..." when products take 8-bit operands: how many, and what it means on this device. */
static void print_fp8(const train_args *a, const sn_session_info *in) {
    if (!a->fp8 || !strcmp(a->fp8, "off")) return;
    printf("fp8: %d products on e4m3 operands, their gradients e5m2 (%s; docs/fp8.md)%s\n",
           in->fp8_products, !strcmp(a->fp8, "head") ? "the LM head's" : "every linear layer's",
           in->cuda_sm ? "" : "; emulated here: slower than without, for the numerics only");
    if (!in->fp8_products)
        printf("fp8: no product qualifies (each needs its dimensions above 64, K and N multiples "
               "of 16): the run is the one without --fp8\n");
}

static sn_status train(const train_args *a, run *r, time_t started, sn_err *e) {
    sn_status s = check_outputs(a, started, e);
    if (!s) s = build(a, r, e);
    if (s) return s;
    sn_session_info in;
    sn_session_info_get(r->s, &in);
    long start = in.step, steps = a->steps, tps = in.tokens_per_step;
    if (cli_stop_signal()) {
        r->stopped_by = cli_stop_signal();
        printf("stopped by a signal before the first step: nothing to save\n");
        return SN_OK;
    }
    printf("sinter train: model %s (%lld parameters), %s tokenizer (vocab %d), ", in.model,
           (long long)in.params, in.tokenizer, in.vocab);
    if (a->train_bin)
        printf("%zu training tokens from %d shard%s (%s) / %zu validation tokens from %d shard%s "
               "(%s)\n", in.train_tokens, in.train_shards, in.train_shards == 1 ? "" : "s",
               a->train_bin, in.val_tokens, in.val_shards, in.val_shards == 1 ? "" : "s", a->val_bin);
    else
        printf("%zu training / %zu validation tokens from %s\n", in.train_tokens, in.val_tokens, a->data);
    printf("batch %d x %d tokens, %d micro-batch%s per step (%ld tokens)\n", in.batch, in.seq,
           in.micro, in.micro > 1 ? "es" : "", tps);
    if (a->resume) printf("resumed from %s at step %ld\n", a->resume, start);
    const sn_gpt2_lora *lo = r->llama ? (r->lm.has_lora ? &r->lm.lora : NULL) : (r->gm.has_lora ? &r->gm.lora : NULL);
    bool ia3 = lo && lo->ia3;
    const char *fresh = ia3 ? "IA3 vector" : "LoRA adapter parameter", *as = ia3 ? "ones" : "A random, B zeros";
    if (a->resume && a->init)
        printf("--init %s not read: the resumed checkpoint holds every weight\n", a->init);
    else if (a->init_hf && !a->resume)
        printf("initialised from the pretrained %s (%d %s%s start as usual: %s)\n", a->init_hf,
               in.init_fresh, fresh, in.init_fresh == 1 ? "" : "s", as);
    else if (a->init)
        printf("initialised from %s (its weights; %d %s%s it lacks start as usual: %s)\n", a->init,
               in.init_fresh, fresh, in.init_fresh == 1 ? "" : "s", as);
    if (lo && lo->ia3)
        printf("IA3: keys, values and the MLP's inner activation scaled by learned vectors: %lld "
               "of %lld parameters trained (%.3f%%), the rest frozen\n", (long long)in.trained,
               (long long)in.params, 100.0 * (double)in.trained / (double)in.params);
    else if (lo)
        printf("%s: rank %d, alpha %g (scale %g), on %s: %lld of %lld parameters trained "
               "(%.2f%%), the rest frozen%s\n", a->qlora ? "QLoRA" : "LoRA", lo->lora.rank, (double)lo->lora.alpha,
               (double)(lo->lora.alpha / (float)lo->lora.rank), sn_gpt2_lora_targets_name(lo->targets),
               (long long)in.trained, (long long)in.params, 100.0 * (double)in.trained / (double)in.params,
               a->qlora ? "; the targeted layers' weights stored as NF4" : "");
    bool low = in.precision == SN_PRECISION_BF16 || in.precision == SN_PRECISION_FP16;
    if (lo && low && !a->qlora) /* the base16 pass (passes.h) */
        printf("frozen base: its linear weights %s (%s)\n", a->base_f32 ? "f32, each with a "
               "16-bit copy" : in.precision == SN_PRECISION_FP16 ? "stored in f16" : "stored in bf16",
               a->base_f32 ? "--base-f32" : "--base-f32 keeps them f32");
    /* every targeted layer has the hidden size (n_embd) as its smaller side, or larger */
    int side = r->llama ? r->lm.c.hidden : r->gm.c.n_embd;
    if (lo && lo->lora.rank >= side)
        fprintf(stderr, "sinter train: warning: --lora %d is at least the adapted layers' smaller "
                "side (%d channels): the adapters are as large as the weights they adapt (%.0f%% "
                "of the parameters train): use a rank well below %d\n",
                lo->lora.rank, side, 100.0 * (double)in.trained / (double)in.params, side);
    printf("device: %s\n", in.device);
    print_precision(a, &in);
    print_fp8(a, &in);
    if (in.mem_free) {
        char b[32], f[32];
        printf("memory: --mem auto: %s (%lld bytes), the %s (%lld bytes) the device had free less "
               "a reserve\n", sn_bytes_str(in.mem_budget, b, sizeof b), (long long)in.mem_budget,
               sn_bytes_str(in.mem_free, f, sizeof f), (long long)in.mem_free);
    }
    sn_session_plan_print(r->s, stdout);
    progress_init(&r->prog);
    double t0 = sn_clock_s();
    for (long step = start; step < steps; step++) {
        sn_session_step_stats st;
        r->stepped = true;
        /* A failed step leaves the trainer as it was and nothing is saved after it. */
        if ((s = sn_session_step(r->s, &st, e))) {
            if (s == SN_ERR_NUMERIC)
                snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                         " (step %ld: the run diverged)", step + 1);
            return s;
        }
        double median = 0;
        int n_before = 0;
        /* an fp16 step skipped for overflowed gradients is no sample of the loss curve */
        bool spike = !st.skipped && diverged(a, r, st.loss, &median, &n_before);
        if (a->mem && step == start) { /* the plan's total against the device's own counts */
            sn_session_info mi;
            sn_session_info_get(r->s, &mi);
            char p[32], m[32];
            progress_break(&r->prog);
            printf("memory: planned %s (%lld bytes), measured %s (%lld bytes: arena peak, persistent "
                   "block, optimizer state, workspace, validation's own)\n",
                   sn_bytes_str(mi.mem_planned, p, sizeof p), (long long)mi.mem_planned,
                   sn_bytes_str(mi.mem_measured, m, sizeof m), (long long)mi.mem_measured);
            if (mi.offload)
                printf("host memory: optimizer state planned %s (%lld bytes), measured %s (%lld "
                       "bytes: masters, moments, sums)\n",
                       sn_bytes_str(mi.host_planned, p, sizeof p), (long long)mi.host_planned,
                       sn_bytes_str(mi.host_measured, m, sizeof m), (long long)mi.host_measured);
        }
        if (st.skipped) { /* fp16 loss scaling: gradients overflowed at this scale */
            progress_break(&r->prog);
            sn_session_info_get(r->s, &in);
            printf("step %ld: gradients overflowed at loss scale %g: step skipped (%lld so far), "
                   "scale now %g\n", step + 1, (double)st.loss_scale, (long long)in.steps_skipped,
                   (double)in.loss_scale);
        }
        double el = sn_clock_s() - t0, tok_s = (double)(step + 1 - start) * (double)tps / el, val = -1;
        bool last = step + 1 == steps;
        if (!spike && ((a->eval_every && (step + 1) % a->eval_every == 0) || last)) {
            if ((s = sn_session_validate(r->s, &val, e))) return s;
            if (a->plot && (s = plot(a, r, tps, e))) return s;
        }
        double eta = el / (double)(step + 1 - start) * (double)(steps - step - 1);
        progress_show(&r->prog, step + 1, steps, st.loss, st.lr, st.grad_norm, tok_s, eta, val,
                      val >= 0 || last || spike);
        if (r->log.open && (s = train_log_row(&r->log, step + 1, st.loss, val, st.lr, st.grad_norm, tok_s, e)))
            return s;
        if (spike)
            return sn_fail(e, SN_ERR_NUMERIC, "step %ld: the loss %.4f is %.1f nats above the median "
                           "%.4f of the %d step%s before (more than --diverge-nats %g): the run "
                           "diverged", step + 1, st.loss, st.loss - median, median, n_before,
                           n_before > 1 ? "s" : "", a->diverge_nats);
        if (a->checkpoint && (last || (a->save_every && (step + 1) % a->save_every == 0)) &&
            (s = save(a, r, step + 1, e)))
            return s;
        if (r->saved_step == step + 1 && (s = train_log_sync(&r->log, e))) return s;
        test_pause(step + 1);
        if (cli_stop_signal()) return stop_now(a, r, step + 1, e);
        if (a->sample_len && a->sample_every && (step + 1) % a->sample_every == 0 && !last &&
            (s = sample(a, r, step + 1, e)))
            return s;
    }
    progress_break(&r->prog);
    if ((s = train_log_sync(&r->log, e))) return s;
    if (start == steps) printf("the run in %s is already complete (%ld steps)\n", a->resume, steps);
    else printf("done: %ld steps in %.1fs\n", steps - start, sn_clock_s() - t0);
    sn_session_info_get(r->s, &in);
    if (in.loss_scaling)
        printf("loss scale %g, %lld steps skipped\n", (double)in.loss_scale, (long long)in.steps_skipped);
    if (a->checkpoint && r->saved_step == steps) printf("checkpoint: %s\n", a->checkpoint);
    if (a->plot && start == steps && (s = plot(a, r, tps, e))) return s;
    if (a->plot) printf("plot: %s\n", a->plot);
    return a->sample_len ? sample(a, r, steps, e) : SN_OK;
}

int cli_train(int argc, char **argv) {
    time_t started = time(NULL);
    train_args a;
    char bpe_dir[4096];
    int rc = train_parse(argc, argv, &a, bpe_dir);
    if (rc >= 0) return rc;
    run r = {.saved_step = -1};
    sn_err e = {0};
    catch_stop_signals();
    sn_status s = train(&a, &r, started, &e);
    if (s) {
        progress_break(&r.prog);
        fflush(stdout);
        fprintf(stderr, "sinter train: %s\n", e.msg);
        /* a run that diverged (not a file that failed to load: its message says what to do) */
        if (s == SN_ERR_NUMERIC && r.stepped) {
            char again[600];
            if (a.init)
                snprintf(again, sizeof again, "start again from --init %s with a lower --lr (this "
                         "run: %g)", a.init, a.lr);
            else snprintf(again, sizeof again, "start afresh with a lower --lr (this run: %g)", a.lr);
            sn_session_info in = {0};
            if (r.s) sn_session_info_get(r.s, &in);
            if (in.precision == SN_PRECISION_FP16) /* the forward's values past f16's range */
                snprintf(again + strlen(again), sizeof again - strlen(again), ", or train in fp32 "
                         "(--precision fp32): f16 holds values up to 65504, and the loss scaling "
                         "guards the gradients, not the forward");
            if (a.checkpoint && r.saved_step >= 0)
                fprintf(stderr, "sinter train: nothing was saved after it; the last good checkpoint "
                        "is %s (step %ld). Resuming it with the same options repeats the same steps: "
                        "%s\n", a.checkpoint, r.saved_step, again);
            else
                fprintf(stderr, "sinter train: %s; %s\n",
                        a.checkpoint ? "no checkpoint was written (none was due yet)"
                                     : "no --checkpoint was given", again);
        }
    }
    const char *kept = train_log_close(&r.log, s != SN_OK);
    if (kept)
        fprintf(stderr, "sinter train: the log %s was not replaced; this run's rows are in %s\n", a.log, kept);
    sn_session_free(r.s);
    if (s) return 1;
    return r.stopped_by ? 128 + r.stopped_by : 0;
}
