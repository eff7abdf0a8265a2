/* export_cmd.c: `sinter export`: a GPT-2 checkpoint of `sinter train` (or pretrained weights:
 * a Hugging Face directory, an llm.c .bin) written as a Hugging Face model directory that
 * transformers' GPT2LMHeadModel loads, or as llm.c's model file. The library does the work
 * (io/weights.h); this file parses the options. Outputs are new files: nothing is replaced. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/weights.h"
#include "cli.h"

static const char export_usage[] =
    "usage: sinter export CHECKPOINT (--to DIR | --to-llmc FILE) [options]\n"
    "  CHECKPOINT        a GPT-2 checkpoint of sinter train --checkpoint (or a Hugging Face\n"
    "                    model directory, or llm.c's .bin: converted)\n"
    "  --to DIR          write DIR/config.json and DIR/model.safetensors (f32) for\n"
    "                    transformers' GPT2LMHeadModel.from_pretrained(DIR); DIR is made when\n"
    "                    missing, and files in it are never replaced\n"
    "  --to-llmc FILE    write llm.c's model file (version 3, f32; FILE must not exist)\n"
    "  --merge-lora      merge LoRA adapters into the weights they adapt, W + A @ B * alpha/r\n"
    "                    (the default, and the only way: the formats have no adapters)\n"
    "  --lora-alpha A    LoRA's alpha when the checkpoint does not say it\n"
    "  --vocab N         the real vocabulary size when the checkpoint's tokenizer does not say\n"
    "                    it (the padding rows of wte past N are dropped)\n";

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

int cli_export(int argc, char **argv) {
    const char *in = NULL, *to = NULL, *to_llmc = NULL;
    sn_export_opts o = {0};
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            fputs(export_usage, stdout);
            return 0;
        }
        if (!strcmp(k, "--merge-lora")) continue;
        if (k[0] != '-') {
            if (in) return cli_fail("export: one CHECKPOINT, not also '%s'", k);
            in = k;
            continue;
        }
        if (i + 1 == argc) return cli_fail("export: %s needs a value", k);
        const char *v = argv[++i];
        long n;
        double x;
        if (!strcmp(k, "--to")) to = v;
        else if (!strcmp(k, "--to-llmc")) to_llmc = v;
        else if (!strcmp(k, "--vocab")) {
            if (!cli_int(v, 1, 1 << 24, &n)) return cli_fail("export: --vocab wants a whole number from 1 to 16777216, not '%s'", v);
            o.vocab = (int)n;
        } else if (!strcmp(k, "--lora-alpha")) {
            if (!cli_real(v, 1e-6, 1e6, &x)) return cli_fail("export: --lora-alpha wants a number > 0 and < 1e6, not '%s'", v);
            o.lora_alpha = (float)x;
        } else return cli_fail("export: unknown option '%s' (see sinter export --help)", k);
    }
    if (!in) return cli_fail("export: give the CHECKPOINT to export%s", "");
    if (!to == !to_llmc) return cli_fail("export: give one of --to DIR and --to-llmc FILE%s", "");
    const cli_path paths[] = {
        {"CHECKPOINT", in, "checkpoint", false, NULL},
        {"--to", to, "model directory", true, NULL},
        {"--to-llmc", to_llmc, "llm.c model file", true, NULL},
    };
    int rc = cli_check_paths("export", paths, 3);
    if (rc) return rc;
    sn_err e = {0};
    sn_weights w;
    int merged;
    sn_status s = load(in, &o, &w, &merged, &e);
    if (!s) {
        s = to ? sn_weights_write_hf(&w, to, &e) : sn_weights_write_llmc(&w, to_llmc, &e);
        if (!s)
            printf("exported %s (%s: %d layers, %d heads, %d channels, context %d, vocabulary %d%s) "
                   "to %s\n", in, w.name, w.config.n_layer, w.config.n_head, w.config.n_embd,
                   w.config.ctx, w.config.vocab, merged ? ", LoRA adapters merged" : "",
                   to ? to : to_llmc);
        sn_weights_free(&w);
    }
    if (s) {
        fprintf(stderr, "sinter export: %s\n", e.msg);
        return 1;
    }
    return 0;
}
