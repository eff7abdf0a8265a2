/* prepare_cmd.c: `sinter prepare`: tokenizes a text corpus once into llm.c token shards,
 * PREFIX_train.bin and PREFIX_val.bin (the last --val-frac of the tokens), for
 * `sinter train --train-bin PREFIX_train.bin --val-bin PREFIX_val.bin`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "cli.h"

static const char prepare_usage[] =
    "usage: sinter prepare --out PREFIX [options]\n"
    "  --data PATH       text file or directory (default " SN_DEFAULT_CORPUS ")\n"
    "  --bpe DIR         GPT-2 BPE tokenizer from DIR/encoder.json and DIR/vocab.bpe\n"
    "                    (default: byte-level)\n"
    "  --val-frac X      the share of tokens (at the end) for validation (default 0.1)\n"
    "  --out PREFIX      writes PREFIX_train.bin and PREFIX_val.bin\n";

static sn_status prepare(const char *data, const char *bpe, double val_frac, const char *out,
                         sn_err *e) {
    sn_text text = {0};
    sn_tokenizer *tk = NULL;
    sn_tokens toks = {0}, train, val;
    sn_status s = sn_text_load(data, &text, e);
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
    char path[2][4096];
    snprintf(path[0], sizeof path[0], "%s_train.bin", out);
    snprintf(path[1], sizeof path[1], "%s_val.bin", out);
    if (!s) s = sn_shard_write(path[0], &train, e);
    if (!s) s = sn_shard_write(path[1], &val, e);
    if (!s)
        printf("sinter prepare: %zu bytes of %s -> %zu tokens (%s tokenizer): %zu in %s, %zu in %s\n",
               text.len, data, toks.n, tk->name, train.n, path[0], val.n, path[1]);
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
