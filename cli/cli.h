/* cli.h: helpers shared by the command files of the `sinter` program. */
#ifndef SN_CLI_H
#define SN_CLI_H

#include <stdbool.h>
#include <stdio.h>

void cli_usage(FILE *f);
/* Prints "sinter: <fmt with arg>" and a usage hint to stderr; returns the exit code 2. */
int cli_fail(const char *fmt, const char *arg);
/* Parses a whole decimal integer in [lo, hi]. */
bool cli_int(const char *s, long lo, long hi, long *out);
/* Parses a whole decimal real number in [lo, hi). */
bool cli_real(const char *s, double lo, double hi, double *out);
/* Parses a size: "6GiB", "6G", "512MiB", "100000000" (bytes), "1.5GiB"; > 0. */
bool cli_bytes(const char *s, long long *out);

/* ---- paths.c: the files a command names, checked before any work ---- */

#include "ir/ir.h"
typedef struct {
    const char *opt;       /* "--checkpoint" */
    const char *path;      /* NULL: not given */
    const char *what;      /* "checkpoint", "training corpus" */
    bool output;           /* written by the command */
    const char *may_equal; /* the option this one may share its file with (NULL: none) */
} cli_path;
/* Whether a and b are the same file: device and inode, or for a file not there yet the same
 * resolved name. */
bool cli_same_file(const char *a, const char *b);
/* Refuses (message naming both options, exit code 2) when an output is the same file as another
 * path of p; 0 when none is. */
int cli_check_paths(const char *cmd, const cli_path *p, int n);
/* An existing non-empty regular file at path must start with magic (len <= 16 bytes: the file
 * is of the output's kind) unless overwrite (--overwrite); otherwise SN_ERR_INVALID. */
sn_status cli_check_kind(const char *opt, const char *path, const char *what, const void *magic,
                         size_t len, bool overwrite, sn_err *e);

int cli_train(int argc, char **argv);
int cli_plan(int argc, char **argv);
/* plan_cmd.c: the training graph `sinter plan` and `sinter train` compile: the model at B x T
 * with the loss as its one output (training reads no logits). */
#include "models/gpt2.h"
#include "train/plan.h"
sn_status cli_training_graph(const sn_gpt2_config *c, const sn_gpt2_lora *lora, int B, int T,
                             sn_graph **out, sn_err *e);
/* Plans (sn_plan_make) and prints the table to f, or the reason nothing fits to stderr;
 * returns the exit code (1: nothing fits). */
int cli_plan_run(const sn_gpt2_config *c, const sn_gpt2_lora *lora, int T, const sn_plan_opts *o,
                 sn_plan *pl, FILE *f);
int cli_prepare(int argc, char **argv);
/* export_cmd.c (issue 23): sinter export CHECKPOINT --to DIR | --to-llmc FILE */
int cli_export(int argc, char **argv);
struct sn_program;
/* Writes p's CUDA C (DIR/program.cu) and, NVRTC permitting, its ptxas report for sm_arch
 * (DIR/ptxas.txt); returns the exit code. */
int cli_emit_cuda(const struct sn_program *p, const char *dir, int arch);

#endif
