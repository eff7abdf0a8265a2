/* export_cmd.c: `sinter export`: a GPT-2 checkpoint of `sinter train` (or pretrained weights:
 * a Hugging Face directory, an llm.c .bin) written as a Hugging Face model directory that
 * transformers' GPT2LMHeadModel loads, or as llm.c's model file. The library does the work
 * (io/weights.h); this file parses the options. Outputs are new files: nothing is replaced. */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/hf_llama.h"
#include "io/weights.h"
#include "cli.h"

typedef struct {
    const char *to, *to_llmc, *adapter;
    bool merge_lora;
    double lora_alpha;
    long vocab;
} export_args;

#define O(field) offsetof(export_args, field)

static const cli_opt export_opts[] = {
    {"to", 't', CLI_STR, "DIR", O(to),
     .help = "write DIR/config.json and DIR/model.safetensors (f32) for\n"
             "transformers' GPT2LMHeadModel.from_pretrained(DIR); DIR is made\n"
             "when missing, and files in it are never replaced"},
    {"to-llmc", 0, CLI_STR, "FILE", O(to_llmc),
     .help = "write llm.c's model file (version 3, f32; FILE must not exist)"},
    {"adapter", 0, CLI_STR, "DIR", O(adapter),
     .help = "a LoRA or IA3 checkpoint's adapters alone, not merged, as PEFT's\n"
             "DIR/adapter_config.json and DIR/adapter_model.safetensors (for\n"
             "peft's PeftModel.from_pretrained on the base GPT-2)"},
    {"merge-lora", 0, CLI_FLAG, NULL, O(merge_lora),
     .help = "merge LoRA adapters into the weights they adapt, W + A @ B *\n"
             "alpha/r, and IA3 vectors into the weights they scale (the\n"
             "default of --to and --to-llmc)"},
    {"lora-alpha", 0, CLI_REAL, "A", O(lora_alpha), 0, 1e6, .lo_open = true,
     .help = "LoRA's alpha when the checkpoint does not say it"},
    {"vocab", 0, CLI_INT, "N", O(vocab), 1, 1 << 24,
     .help = "the real vocabulary size when the checkpoint's tokenizer does not\n"
             "say it (the padding rows of wte past N are dropped)"},
};

static int cli_export(int argc, char **argv);

const cli_command cli_export_cmd = {
    .name = "export",
    .synopsis = "CHECKPOINT (--to DIR | --to-llmc FILE) [options]",
    .summary = "Writes a GPT-2 checkpoint as a Hugging Face model or llm.c's .bin.",
    .opts = CLI_OPTS(export_opts),
    .notes = "CHECKPOINT (first) is a checkpoint of sinter train --checkpoint, or a Hugging Face\n"
             "model directory or llm.c's .bin (converted). Nothing is replaced.\n",
    .run = cli_export,
};

/* A checkpoint, or pretrained weights converted (a directory, or a file with llm.c's magic). */
static sn_status load(const char *path, const sn_export_opts *o, sn_weights *w, int *merged,
                      sn_err *e) {
    struct stat st;
    int32_t magic = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &magic, 4) != 4) magic = 0;
        close(fd);
    }
    *merged = 0;
    if ((stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || magic == 20240326)
        return sn_weights_read(path, w, e);
    return sn_weights_from_checkpoint(path, o, w, merged, e);
}

/* A file that is not llm.c's model file: a checkpoint (its reader says when it is not). */
static bool checkpoint_file(const char *path) {
    int32_t magic = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    if (read(fd, &magic, 4) != 4) magic = 0;
    close(fd);
    return magic != 20240326;
}

static int cli_export(int argc, char **argv) {
    const char *in = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
    if (in) { /* the operand, first: the rest are options */
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    export_args a = {0};
    int rc = cli_parse(&cli_export_cmd, argc, argv, &a);
    if (rc >= 0) return rc;
    if (!in) return cli_usage_error(&cli_export_cmd, "give the CHECKPOINT to export, first");
    if ((a.to != NULL) + (a.to_llmc != NULL) + (a.adapter != NULL) != 1)
        return cli_usage_error(&cli_export_cmd, "give one of --to DIR, --to-llmc FILE and --adapter DIR");
    if (a.adapter && a.merge_lora)
        return cli_usage_error(&cli_export_cmd, "--adapter writes the adapters unmerged: leave out --merge-lora");
    sn_export_opts o = {.vocab = (int)a.vocab, .lora_alpha = (float)a.lora_alpha};
    const char *to = a.to, *to_llmc = a.to_llmc;
    const cli_path paths[] = {
        {"CHECKPOINT", in, "checkpoint", false, NULL},
        {"--to", to, "model directory", true, NULL},
        {"--to-llmc", to_llmc, "llm.c model file", true, NULL},
        {"--adapter", a.adapter, "adapter directory", true, NULL},
    };
    rc = cli_check_paths("export", paths, 4);
    if (rc) return rc;
    sn_err e = {0};
    if (a.adapter) {
        int n = 0;
        if (sn_lora_write_peft(in, a.adapter, &o, &n, &e)) {
            fprintf(stderr, "sinter export: %s\n", e.msg);
            return 1;
        }
        printf("exported the adapters of %s (%d modules) to %s (PEFT)\n", in, n, a.adapter);
        return 0;
    }
    sn_weights w;
    int merged;
    struct stat st;
    bool llama = false;
    sn_llama_config lc;
    sn_status s = stat(in, &st) == 0 && S_ISREG(st.st_mode) && checkpoint_file(in)
                  ? sn_hf_llama_from_checkpoint(in, o.vocab, &llama, &lc, &w, &e) : SN_OK;
    if (!s && llama) { /* a LLaMA-family checkpoint: Hugging Face only */
        s = to ? sn_hf_llama_write(&lc, &w, to, &e)
               : sn_fail(&e, SN_ERR_UNSUPPORTED, "%s is a %s checkpoint: llm.c's file holds GPT-2 "
                         "only: export it with --to DIR", in, lc.name);
        if (!s)
            printf("exported %s (%s: %d layers, %d/%d heads, hidden %d, context %d, vocabulary %d) to "
                   "%s\n", in, lc.name, lc.n_layer, lc.n_head, lc.n_kv_head, lc.hidden, lc.ctx, lc.vocab, to);
        sn_weights_free(&w);
        if (s) fprintf(stderr, "sinter export: %s\n", e.msg);
        return s ? 1 : 0;
    }
    if (!s) s = load(in, &o, &w, &merged, &e);
    if (!s) {
        s = to ? sn_weights_write_hf(&w, to, &e) : sn_weights_write_llmc(&w, to_llmc, &e);
        if (!s)
            printf("exported %s (%s: %d layers, %d heads, %d channels, context %d, vocabulary %d%s) "
                   "to %s\n", in, w.name, w.config.n_layer, w.config.n_head, w.config.n_embd,
                   w.config.ctx, w.config.vocab, merged ? ", adapters merged" : "",
                   to ? to : to_llmc);
        sn_weights_free(&w);
    }
    if (s) {
        fprintf(stderr, "sinter export: %s\n", e.msg);
        return 1;
    }
    return 0;
}
