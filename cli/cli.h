/* cli.h: what the command files of the `sinter` program share: the commands (each a table of
 * options, opts.h), the tokenizer a model uses, the checks of the files a command names.
 * Exit status of every command: 0 done, 1 a failure (the message says which), 2 a usage error.
 *
 * Adding a command: write its options table and a `const cli_command cli_NAME_cmd` (opts.h) in
 * its own file, with a run function that starts with cli_parse; declare it below; add it to
 * `commands` in sinter.c; `sinter help` and `sinter NAME --help` follow from the table. */
#ifndef SN_CLI_H
#define SN_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "opts.h"

/* ---- the commands (sinter.c dispatches; their help and parse come from their tables) ---- */

extern const cli_command cli_info_cmd;    /* sinter.c */
extern const cli_command cli_graph_cmd;   /* graph_cmd.c */
extern const cli_command cli_train_cmd;   /* train_opts.c; runs train_cmd.c's cli_train */
extern const cli_command cli_plan_cmd;    /* plan_cmd.c */
extern const cli_command cli_prepare_cmd; /* prepare_cmd.c */
extern const cli_command cli_export_cmd;  /* export_cmd.c */
extern const cli_command cli_generate_cmd; /* generate_cmd.c */
int cli_train(int argc, char **argv);

/* Parses a size: "6GiB", "6G", "512MiB", "100000000" (bytes), "1.5GiB"; > 0. */
bool cli_bytes(const char *s, long long *out);

/* ---- paths.c: the files a command names, checked before any work ---- */

#include "ir/ir.h"
#include "models/gpt2.h"
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
/* The same for in, an input that may be a glob(3) pattern of several files (sn_shards_read's
 * rule: a name that exists is a file): refused when an output of p is one of its matches. */
int cli_check_pattern(const char *cmd, const cli_path *in, const cli_path *p, int n);
/* An existing non-empty regular file at path must start with magic (len <= 16 bytes: the file
 * is of the output's kind) unless overwrite (--overwrite); otherwise SN_ERR_INVALID. */
sn_status cli_check_kind(const char *opt, const char *path, const char *what, const void *magic,
                         size_t len, bool overwrite, sn_err *e);

/* ---- model.c: the models --model names (sinter graph, plan) ---- */
#include "models/llama.h"
/* The models --model names: GPT-2's configurations, then the LLaMA family's. */
const char *cli_model_names(void);
/* A model by name: GPT-2's configuration or a LLaMA-family shape. */
typedef struct {
    bool llama;
    sn_gpt2_config c;   /* GPT-2's, when not llama */
    sn_llama_config lc; /* the LLaMA family's, when llama */
} cli_model;
/* The model name names (the option table checked it), with the vocabulary --tokenizer gives it
 * (NULL: GPT-2's for the gpt2 models, else bytes; a LLaMA shape's own). */
void cli_model_find(const char *name, const char *tokenizer, cli_model *m);
/* The model a pretrained directory (or llm.c's .bin) describes, as sinter train --init-hf
 * builds it: config.json's shape and vocabulary; m->c.name or m->lc.name its name. */
sn_status cli_model_from_hf(const char *path, cli_model *m, sn_err *e);
int cli_model_ctx(const cli_model *m); /* its longest sequence: the default --seq */
/* Its shape in words: "vocab 256, context 1024, 12 layers, 12 heads, 768 channels". */
void cli_model_describe(const cli_model *m, char *buf, size_t len);
/* m at B x T (LoRA adapters when lora is not NULL) into g; *loss its loss. */
sn_status cli_model_build(const cli_model *m, const sn_gpt2_lora *lora, int B, int T, sn_graph *g,
                          sn_node **loss, sn_err *e);
struct sn_program;
/* Writes p's CUDA C (DIR/program.cu) and, NVRTC permitting, its ptxas report for sm_arch
 * (DIR/ptxas.txt); returns the exit code. */
int cli_emit_cuda(const struct sn_program *p, const char *dir, int arch);


/* ---- tokenizer.c: the tokenizer and vocabulary of a model, GPT-2's files ---- */

/* Whether the run uses GPT-2's BPE: --tokenizer when given, else --bpe given or c (NULL: no
 * model) is one of GPT-2's configurations. */
bool cli_tokenizer_is_gpt2(const sn_gpt2_config *c, const char *tokenizer, const char *bpe);
/* The vocabulary model c has with that --tokenizer (NULL: not given): 50257 or 256. */
int cli_vocab(const sn_gpt2_config *c, const char *tokenizer);
/* The folder of GPT-2's encoder.json and vocab.bpe: $SINTER_ASSETS/gpt2 (only it, when set), the installed
 * share/sinter/gpt2 beside the program's bin/, the source tree's assets/gpt2; false when none
 * holds them, with the folders looked in, ", "-separated, in tried (may be NULL). */
bool cli_gpt2_bpe_dir(char dir[4096], char *tried, size_t len);
/* The BPE folder a command reads into *out (NULL: bytes): --bpe when given, GPT-2's assets
 * (found into dir) when the tokenizer is gpt2. Returns 0, or the exit status after printing
 * why: 2 for --bpe with --tokenizer bytes, 1 when GPT-2's files are nowhere. */
int cli_tokenizer(const cli_command *cmd, const sn_gpt2_config *c, const char *tokenizer,
                  const char *bpe, char dir[4096], const char **out);

#endif
