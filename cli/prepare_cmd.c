/* prepare_cmd.c: `sinter prepare`: tokenizes a text corpus once into llm.c token shards,
 * PREFIX_train.bin and PREFIX_val.bin (the last --val-frac of the tokens), for
 * `sinter train --train-bin PREFIX_train.bin --val-bin PREFIX_val.bin`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "support/savefile.h"
#include "cli.h"

static const char prepare_usage[] =
    "usage: sinter prepare --out PREFIX [options]\n"
    "  --data PATH       text file or directory (default " SN_DEFAULT_CORPUS ")\n"
    "  --bpe DIR         GPT-2 BPE tokenizer from DIR/encoder.json and DIR/vocab.bpe\n"
    "                    (default: byte-level)\n"
    "  --val-frac X      the share of tokens (at the end) for validation (default 0.1)\n"
    "  --out PREFIX      writes PREFIX_train.bin and PREFIX_val.bin\n";

/* Fewer validation tokens than this draws a warning: `sinter train` needs batch x seq + 1 of them
 * (1025 for --batch 4 --seq 256). */
#define FEW_VAL_TOKENS 1025

/* Both shards are written to temporary files opened before the corpus is read (an unwritable
 * --out fails at once) and renamed over PREFIX_*.bin only when both are complete: a failure
 * leaves the old shards as they were. */
static sn_status prepare(const char *data, const char *bpe, double val_frac, const char *out,
                         sn_err *e) {
    char path[2][4096];
    snprintf(path[0], sizeof path[0], "%s_train.bin", out);
    snprintf(path[1], sizeof path[1], "%s_val.bin", out);
    sn_savefile f[2] = {{0}, {0}};
    sn_status s = sn_savefile_open(&f[0], path[0], "shard", e);
    if (!s && (s = sn_savefile_open(&f[1], path[1], "shard", e))) sn_savefile_abort(&f[0]);
    if (s) return s;
    sn_text text = {0};
    sn_tokenizer *tk = NULL;
    sn_tokens toks = {0}, train = {0}, val = {0};
    s = sn_text_load(data, &text, e);
    if (!s && bpe) {
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
    if (!s) s = sn_savefile_commit(&f[0], e);
    if (!s) s = sn_savefile_commit(&f[1], e);
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

int cli_prepare(int argc, char **argv) {
    const char *data = SN_DEFAULT_CORPUS, *bpe = NULL, *out = NULL;
    double val_frac = 0.1;
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            fputs(prepare_usage, stdout);
            return 0;
        }
        if (!v) return cli_fail("prepare: option '%s' needs a value (see sinter prepare --help)", k);
        i++;
        if (!strcmp(k, "--data")) data = v;
        else if (!strcmp(k, "--bpe")) bpe = v;
        else if (!strcmp(k, "--out")) out = v;
        else if (!strcmp(k, "--val-frac")) {
            char *end;
            val_frac = strtod(v, &end);
            if (!*v || *end || !(val_frac > 0 && val_frac < 1))
                return cli_fail("prepare: --val-frac wants a fraction between 0 and 1, not '%s'", v);
        } else return cli_fail("prepare: unknown option '%s' (see sinter prepare --help)", k);
    }
    if (!out) return cli_fail("prepare: where to? add --out PREFIX%s", "");
    sn_err e = {0};
    if (prepare(data, bpe, val_frac, out, &e)) {
        fprintf(stderr, "sinter prepare: %s\n", e.msg);
        return 1;
    }
    return 0;
}
