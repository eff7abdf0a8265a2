/* train_cli.h: what the files of `sinter train` share: the parsed options (train_cmd.c) and
 * the output helpers (train_out.c: progress line, CSV log, printed samples). */
#ifndef SN_TRAIN_CLI_H
#define SN_TRAIN_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "data/data.h"
#include "support/savefile.h"
#include "cli.h"

typedef struct {
    const char *model, *device, *data, *bpe, *train_bin, *val_bin; /* model, device and data */
    const char *tokenizer;  /* --tokenizer gpt2 or bytes; NULL: the model's (cli_tokenizer) */
    const char *tokenizer_file; /* --tokenizer-file: a Hugging Face tokenizer.json */
    bool no_cache, tf32;     /* CUDA: compile without the kernel cache; TF32 GEMMs */
    bool in_order;           /* --in-order: the training tokens read in order */
    bool overwrite;          /* --overwrite: an output may replace a file of another kind */
    const char *precision;  /* fp32, bf16, fp16 (the autocast pass), tf32 (CUDA GEMMs) */
    const char *dump_after; /* a pass whose IR or program to print (sinter train --dump-after) */
    const char *log, *plot, *checkpoint, *resume, *prompt; /* files and the sampling prompt */
    const char *init;       /* --init: a new run from this checkpoint's weights */
    const char *init_hf;    /* --init-hf (issue 23): a new run from pretrained GPT-2 weights */
    long lora;              /* --lora R: LoRA adapters of rank R (0: none) */
    long qlora;             /* --qlora R: --lora R (lora is set too) over an NF4 base */
    bool ia3;               /* --ia3: (IA)^3 vectors (frontend/ia3.h) instead */
    bool base_f32;          /* --base-f32: the frozen base's linear weights f32 in bf16/fp16 */
    double lora_alpha;      /* --lora-alpha (0: not given: R) */
    const char *lora_targets; /* --lora-targets attn, mlp or all (NULL: not given: all) */
    long steps, batch, seq, seed, eval_every, tokens_per_step, save_every;
    long sample_every, sample_len, top_k;
    double lr, temperature, top_p;
    long warmup;            /* --warmup N (-1: 10% of the steps) */
    double weight_decay, beta1, beta2, grad_clip, min_lr_frac; /* the optimizer's knobs */
    double dropout;         /* --dropout P: GPT-2's dropout in training (0: none) */
    const char *policy;     /* --checkpoint-policy as given (NULL: not given) */
    int checkpoint_policy;  /* an sn_recompute_policy (passes.h): --checkpoint-policy; -1: not given */
    long long mem;          /* --mem: device bytes to plan the run for (0: no plan) */
    long chunk_logits;      /* --chunk-logits N: rows a chunk of the LM head; 0 whole; -1 not
                               given (with --mem: the plan's choice) */
    const char *fp8;        /* --fp8 P: off, head or linear (NULL: off) */
    const char *offload_what; /* --offload as given (NULL: not given) */
    bool offload_delay;       /* --offload-delay */
    long offload_threads;     /* --offload-threads N (0: not given; CLI_INT stores a long: an
                                 int here took 8 bytes over 4 and the next field's) */
    int offload;            /* --offload: 1 optimizer, 0 none, -1 not given (the plan's) */
    double diverge_nats;     /* a loss this far above the recent median stops the run; 0: off */
} train_args;

/* Parses and checks train's options (train_opts.c) into a; the GPT-2 BPE folder found, when
 * a->bpe comes from the assets, is kept in bpe_dir. Returns -1 to go on, else the exit status
 * (0 after --help, 2 a usage error, 1 a failure), the message printed. */
int train_parse(int argc, char **argv, train_args *a, char bpe_dir[4096]);

/* ---- the progress line (train_out.c) ---- */

typedef struct {
    bool tty;       /* stdout is a terminal: the line is redrawn in place */
    bool open;      /* a redrawn line is on screen without its newline */
    double last_s;  /* when it was last drawn */
} progress;

void progress_init(progress *p);
/* Draws the step's line: on a terminal at most ten times a second (always when keep, which
 * also ends the line), elsewhere only when keep or every tenth step. val < 0: none. */
void progress_show(progress *p, long step, long steps, double loss, float lr, double grad_norm,
                   double tok_s, double eta_s, double val, bool keep);
/* Ends a redrawn line so that other output starts on a fresh one. */
void progress_break(progress *p);

/* ---- the log (train_out.c): CSV, or JSON lines when its name ends in .jsonl ---- */

/* Rows "step,loss,val_loss,lr,grad_norm,tokens_per_s" (or one JSON object a line with those
 * keys, val_loss null where none was measured, made by json-c) written to a temporary file beside the
 * log (savefile.h) and flushed row by row (write errors reported). It replaces the old log at
 * the first train_log_sync (the run's first checkpoint, its end, or a stop by a signal) and is
 * fsync'd at each later one, so a run that fails before then leaves an existing log as it was. */
typedef struct {
    sn_savefile f;
    bool open;
    long rows;               /* rows this run wrote */
    bool jsonl;              /* JSON lines (the name ends in .jsonl), else CSV */
    char failed_path[4200];  /* PATH.failed (or PATH.failed.N): a failed run's unpublished rows */
} train_log;

/* A fresh run (resume_step 0) starts the log with the header; a resumed one keeps the rows of
 * steps up to resume_step and drops the later ones (written after the checkpoint by the run
 * that stopped). */
sn_status train_log_open(train_log *l, const char *path, long resume_step, sn_err *e);
/* Whether the log at path is JSON lines (its name ends in .jsonl), else CSV. */
bool train_log_is_jsonl(const char *path);
/* Appends a row (val < 0: none) and flushes it. */
sn_status train_log_row(train_log *l, long step, double loss, double val, float lr,
                        double grad_norm, double tok_s, sn_err *e);
/* Publishes the log at its path (the first time) and makes its rows durable (fsync). */
sn_status train_log_sync(train_log *l, sn_err *e);
/* Closes the log. One never published is removed, or, when failed and it has rows, renamed to
 * PATH.failed (PATH.failed.2 ... when that exists: no file is replaced), whose name is returned
 * (else NULL); the old log stays as it was. */
const char *train_log_close(train_log *l, bool failed);

/* ---- samples (train_out.c) ---- */

/* Prints a sample's text between two rules; bytes that are not printable (other than newline
 * and tab) are shown as \xNN. */
void train_print_sample(FILE *f, const char *text, size_t len, const char *heading);

#endif
