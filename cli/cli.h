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
/* Parses a size: "6GiB", "6G", "512MiB", "100000000" (bytes), "1.5GiB"; > 0. */
bool cli_bytes(const char *s, long long *out);

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
struct sn_program;
/* Writes p's CUDA C (DIR/program.cu) and, NVRTC permitting, its ptxas report for sm_arch
 * (DIR/ptxas.txt); returns the exit code. */
int cli_emit_cuda(const struct sn_program *p, const char *dir, int arch);

#endif
