/* tokenizer.c: which tokenizer a command uses, and so the model's vocabulary, the same way for
 * `train`, `plan`, `graph` and `prepare`; and where GPT-2's BPE files are found: --bpe DIR, else
 * the assets installed beside the program or those of the source tree it was built from.
 * Convention: GPT-2's configurations default to GPT-2's tokenizer; bytes only when asked for. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifndef SN_SOURCE_ASSETS
#define SN_SOURCE_ASSETS "assets" /* meson passes the source tree's assets/ */
#endif
#ifndef SN_INSTALL_ASSETS
#define SN_INSTALL_ASSETS "/usr/local/share/sinter" /* meson passes DATADIR/sinter */
#endif

enum { GPT2_VOCAB = 50257, BYTES_VOCAB = 256 };

/* Whether dir holds GPT-2's two files. */
static bool has_bpe(const char *dir) {
    char p[2 * PATH_MAX];
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    if (access(p, R_OK)) return false;
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    return access(p, R_OK) == 0;
}

/* The folder of the running program, "" when /proc does not say. */
static void exe_dir(char out[PATH_MAX]) {
    ssize_t n = readlink("/proc/self/exe", out, PATH_MAX - 1);
    out[n > 0 ? n : 0] = 0;
    char *slash = strrchr(out, '/');
    if (slash) *slash = 0;
    else out[0] = 0;
}

bool cli_gpt2_bpe_dir(char dir[4096], char *tried, size_t len) {
    char exe[PATH_MAX], up[2][PATH_MAX + 32];
    exe_dir(exe);
    snprintf(up[0], sizeof up[0], "%s/../share/sinter", exe); /* installed: PREFIX/bin/sinter */
    snprintf(up[1], sizeof up[1], "%s/../assets", exe);       /* built in SOURCE/build */
    const char *env = getenv("SINTER_ASSETS");
    bool only_env = env && *env; /* set: the one place */
    const char *roots[] = {only_env ? env : NULL, !only_env && exe[0] ? up[0] : NULL,
                           !only_env && exe[0] ? up[1] : NULL, only_env ? NULL : SN_INSTALL_ASSETS,
                           only_env ? NULL : SN_SOURCE_ASSETS};
    if (tried) *tried = 0;
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        if (!roots[i]) continue;
        char d[PATH_MAX + 64];
        snprintf(d, sizeof d, "%s/gpt2", roots[i]);
        if (has_bpe(d)) {
            char real[PATH_MAX];
            const char *best = realpath(d, real) ? real : d;
            if (strlen(best) >= 4096) continue;
            memcpy(dir, best, strlen(best) + 1);
            return true;
        }
        if (tried) {
            size_t at = strlen(tried);
            snprintf(tried + at, len - at, "%s%s", at ? ", " : "", d);
        }
    }
    return false;
}

bool cli_tokenizer_is_gpt2(const sn_gpt2_config *c, const char *tokenizer, const char *bpe) {
    if (tokenizer) return !strcmp(tokenizer, "gpt2");
    return bpe || (c && c->vocab == GPT2_VOCAB);
}

int cli_vocab(const sn_gpt2_config *c, const char *tokenizer) {
    return cli_tokenizer_is_gpt2(c, tokenizer, NULL) ? GPT2_VOCAB : BYTES_VOCAB;
}

int cli_tokenizer(const cli_command *cmd, const sn_gpt2_config *c, const char *tokenizer,
                  const char *bpe, char dir[4096], const char **out) {
    *out = NULL;
    if (bpe && tokenizer && strcmp(tokenizer, "gpt2"))
        return cli_usage_error(cmd, "--bpe DIR is a GPT-2 tokenizer and --tokenizer %s asks for "
                               "another: leave out one of them", tokenizer);
    if (!cli_tokenizer_is_gpt2(c, tokenizer, bpe)) return 0;
    if (bpe) {
        *out = bpe;
        return 0;
    }
    char tried[4096];
    if (cli_gpt2_bpe_dir(dir, tried, sizeof tried)) {
        *out = dir;
        return 0;
    }
    fprintf(stderr, "sinter %s: GPT-2's tokenizer%s%s%s needs encoder.json and vocab.bpe, and "
            "none were found in %s: give --bpe DIR (a folder holding both), set SINTER_ASSETS to "
            "a folder with gpt2/ in it (the repository's assets/), or use --tokenizer bytes (a "
            "vocabulary of 256)\n", cmd->name, c && !tokenizer ? " (the default of --model " : "",
            c && !tokenizer ? c->name : "", c && !tokenizer ? ")" : "", tried);
    return 1;
}
