/* prepare_cmd.c: `sinter prepare`: tokenizes a text corpus once into llm.c token shards,
 * PREFIX_train.bin and PREFIX_val.bin (the last --val-frac of the tokens), for
 * `sinter train --train-bin PREFIX_train.bin --val-bin PREFIX_val.bin`. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "support/savefile.h"
#include "cli.h"
#include "stop_signals.h"

typedef struct {
    const char *data, *tokenizer, *bpe, *tokenizer_file, *out;
    double val_frac;
    bool overwrite;
} prepare_args;

#define O(field) offsetof(prepare_args, field)

static const cli_opt prepare_opts[] = {
    {"data", 'd', CLI_STR, "PATH", O(data), .help = "text file or directory (default " SN_DEFAULT_CORPUS ")"},
    {"tokenizer", 0, CLI_CHOICE, "T", O(tokenizer), .choices = "bytes, gpt2",
     .help = "bytes (default: one token a byte, for demo and tiny) or gpt2\n"
             "(GPT-2's BPE from the assets installed with sinter, for the gpt2 models)"},
    {"bpe", 0, CLI_STR, "DIR", O(bpe),
     .help = "GPT-2 BPE from DIR/encoder.json and DIR/vocab.bpe"},
    {"tokenizer-file", 0, CLI_STR, "FILE", O(tokenizer_file),
     .help = "a Hugging Face tokenizer.json (a BPE: GPT-2's, SmolLM's,\n"
             "Llama 3's, TinyLlama's byte fallback); train with the same --tokenizer-file"},
    {"val-frac", 0, CLI_REAL, "X", O(val_frac), 0, 1, .lo_open = true,
     .help = "the share of tokens (at the end) for validation (default 0.1)"},
    {"out", 'o', CLI_STR, "PREFIX", O(out),
     .help = "writes PREFIX_train.bin and PREFIX_val.bin (both replaced, or neither)"},
    {"overwrite", 0, CLI_FLAG, NULL, O(overwrite),
     .help = "let them replace existing files that are not token shards"},
};

static int cli_prepare(int argc, char **argv);

const cli_command cli_prepare_cmd = {
    .name = "prepare",
    .synopsis = "--out PREFIX [options]",
    .summary = "Tokenizes a corpus once into llm.c token shards (sinter train --train-bin).",
    .opts = CLI_OPTS(prepare_opts),
    .notes = "An output may not be an input (compared as files). SIGINT or SIGTERM stops at once, the\n"
             "old shards unchanged and no temporary files left.\n",
    .run = cli_prepare,
};

/* Fewer validation tokens than this draws a warning: `sinter train` needs batch x seq + 1 of them
 * (1025 for --batch 4 --seq 256). */
#define FEW_VAL_TOKENS 1025

/* SIGINT or SIGTERM (stop_signals.h): the temporary files removed, exit 128 + the signal (a
 * prepare is short: nothing is worth finishing). */
static void catch_stop_signals(void) {
    if (!cli_stop_signals_start("\nsinter prepare: interrupted: stopping; the shards are "
                                "unchanged (temporary files removed)\n", NULL, true))
        fprintf(stderr, "sinter prepare: warning: cannot start the signal thread (%s): SIGINT and "
                "SIGTERM may leave temporary files (the next prepare removes them)\n",
                strerror(errno));
}

/* Both shards are written to temporary files opened before the corpus is read (an unwritable
 * --out fails at once) and renamed over PREFIX_*.bin only when both are complete (the second
 * rename failing puts the first shard back): a failure leaves the old shards as they were. */
static sn_status prepare(const char *data, const char *bpe, const char *tokfile, double val_frac,
                         char path[2][4096], bool overwrite, sn_err *e) {
    sn_savefile f[2] = {{0}, {0}};
    int32_t magic = SN_SHARD_MAGIC; /* the shards are little-endian, as is every host sinter runs on */
    for (int i = 0; i < 2; i++) {
        sn_status s = cli_check_kind("--out", path[i], "token shard", &magic, 4, overwrite, e);
        if (s) return s;
    }
    sn_status s = sn_savefile_open(&f[0], path[0], "shard", e);
    if (!s && (s = sn_savefile_open(&f[1], path[1], "shard", e))) sn_savefile_abort(&f[0]);
    if (s) return s;
    sn_text text = {0};
    sn_tokenizer *tk = NULL;
    sn_tokens toks = {0}, train = {0}, val = {0};
    s = sn_text_load(data, &text, e);
    if (!s && tokfile) {
        s = sn_tokenizer_hf_load(tokfile, &tk, e);
    } else if (!s && bpe) {
        char enc[4096], merges[4096];
        snprintf(enc, sizeof enc, "%s/encoder.json", bpe);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", bpe);
        s = sn_tokenizer_gpt2_load(enc, merges, &tk, e);
    } else if (!s) {
        if (!(tk = sn_tokenizer_bytes_new())) s = sn_fail_oom(e, 512, "the byte tokenizer");
    }
    if (!s) s = sn_tokenizer_encode(tk, text.bytes, text.len, &toks, e);
    if (!s) s = sn_tokens_split(&toks, val_frac, &train, &val, e);
    if (!s && (train.n < 2 || val.n < 2))
        s = sn_fail(e, SN_ERR_INVALID, "%s gives %zu tokens: --val-frac %g leaves %zu for training "
                    "and %zu for validation, and each shard needs at least 2 (a token and the next "
                    "to predict): use a larger corpus%s", data, toks.n, val_frac, train.n, val.n,
                    train.n < 2 ? " or a smaller --val-frac" : " or a larger --val-frac");
    if (!s) s = sn_shard_put(f[0].f, path[0], &train, e);
    if (!s) s = sn_shard_put(f[1].f, path[1], &val, e);
    if (!s) s = sn_savefile_commit_pair(&f[0], &f[1], e); /* both replaced, or neither */
    sn_savefile_abort(&f[0]); /* no-ops after a commit */
    sn_savefile_abort(&f[1]);
    if (!s) {
        printf("sinter prepare: %zu bytes of %s -> %zu tokens (%s tokenizer): %zu in %s, %zu in %s\n",
               text.len, data, toks.n, tk->name, train.n, path[0], val.n, path[1]);
        if (val.n < FEW_VAL_TOKENS)
            fprintf(stderr, "sinter prepare: warning: only %zu validation tokens: `sinter train` needs "
                    "more than batch x seq of them (%d for --batch 4 --seq 256); use a larger corpus "
                    "or --val-frac\n", val.n, FEW_VAL_TOKENS);
    }
    sn_tokens_free(&toks);
    if (tk) sn_tokenizer_free(tk);
    sn_text_free(&text);
    return s;
}

static int cli_prepare(int argc, char **argv) {
    const cli_command *cmd = &cli_prepare_cmd;
    prepare_args a = {.data = SN_DEFAULT_CORPUS, .val_frac = 0.1};
    int rc = cli_parse(cmd, argc, argv, &a);
    if (rc >= 0) return rc;
    if (!a.out) return cli_usage_error(cmd, "where to? add --out PREFIX");
    char bpe_dir[4096];
    const char *data = a.data, *out = a.out, *bpe;
    if (a.tokenizer_file && (a.tokenizer || a.bpe))
        return cli_usage_error(cmd, "--tokenizer-file is the tokenizer: leave out %s",
                               a.tokenizer ? "--tokenizer" : "--bpe");
    bpe = NULL;
    if (!a.tokenizer_file && (rc = cli_tokenizer(cmd, NULL, a.tokenizer, a.bpe, bpe_dir, &bpe)))
        return rc;
    char path[2][4096], enc[4200] = "", merges[4200] = "";
    snprintf(path[0], sizeof path[0], "%s_train.bin", out);
    snprintf(path[1], sizeof path[1], "%s_val.bin", out);
    if (bpe) {
        snprintf(enc, sizeof enc, "%s/encoder.json", bpe);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", bpe);
    }
    const cli_path paths[] = {
        {"--out", path[0], "training shard", true, NULL},
        {"--out", path[1], "validation shard", true, NULL},
        {"--data", data, "corpus", false, NULL},
        {"--bpe", bpe ? enc : NULL, "tokenizer's encoder.json", false, NULL},
        {"--bpe", bpe ? merges : NULL, "tokenizer's vocab.bpe", false, NULL},
        {"--tokenizer-file", a.tokenizer_file, "tokenizer", false, NULL},
    };
    if ((rc = cli_check_paths("prepare", paths, (int)(sizeof paths / sizeof paths[0])))) return rc;
    catch_stop_signals();
    sn_err e = {0};
    if (prepare(data, bpe, a.tokenizer_file, a.val_frac, path, a.overwrite, &e)) {
        fprintf(stderr, "sinter prepare: %s\n", e.msg);
        return 1;
    }
    return 0;
}
