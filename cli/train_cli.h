/* train_cli.h: what the files of `sinter train` share: the parsed options (train_cmd.c) and
 * the output helpers (train_out.c: progress line, CSV log, printed samples). */
#ifndef SN_TRAIN_CLI_H
#define SN_TRAIN_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "data/data.h"

typedef struct {
    const char *model, *device, *data, *bpe, *train_bin, *val_bin; /* model, device and data */
    bool no_cache, tf32;     /* CUDA: compile without the kernel cache; TF32 GEMMs */
    const char *dump_after; /* a pass whose IR or program to print (sinter train --dump-after) */
    const char *log, *plot, *checkpoint, *resume, *prompt; /* files and the sampling prompt */
    long steps, batch, seq, seed, eval_every, tokens_per_step, save_every;
    long sample_every, sample_len, top_k;
    double lr, temperature;
} train_args;

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

/* ---- the CSV log (train_out.c) ---- */

/* Opens path for appending rows "step,loss,val_loss,lr,grad_norm,tokens_per_s". A fresh run
 * (resume_step 0) starts it with the header; a resumed one keeps the rows of steps up to
 * resume_step and drops the later ones (written after the checkpoint by the run that stopped). */
sn_status train_log_open(const char *path, long resume_step, FILE **out, sn_err *e);

/* ---- samples (train_out.c) ---- */

/* Prints a sample's text between two rules; bytes that are not printable (other than newline
 * and tab) are shown as \xNN. */
void train_print_sample(FILE *f, const char *text, size_t len, const char *heading);

#endif
