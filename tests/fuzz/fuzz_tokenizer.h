/* fuzz_tokenizer.h: what the tokenizer harnesses (fuzz_bpe.c, fuzz_tokjson.c) check of a
 * tokenizer that loaded: the text encodes to ids in its vocabulary that decode to the very same
 * bytes (byte-level BPE loses nothing; a lossy one, SentencePiece's, only decodes); then it is
 * freed. */
#ifndef SN_FUZZ_TOKENIZER_H
#define SN_FUZZ_TOKENIZER_H

#include <string.h>

#include "data/data.h"
#include "fuzz_util.h"

static inline void fuzz_tokenizer_roundtrip(sn_tokenizer *tk, const char *text, size_t n_text) {
    sn_tokens ids = {0};
    sn_err e = {0};
    sn_status s = sn_tokenizer_encode(tk, text, n_text, &ids, &e);
    if (!s) {
        for (size_t i = 0; i < ids.n; i++)
            FUZZ_CHECK(sn_tokens_get(&ids, i) >= 0 && sn_tokens_get(&ids, i) < tk->vocab,
                       "id %d outside the vocabulary of %d", sn_tokens_get(&ids, i), tk->vocab);
        char *back = NULL;
        size_t n_back = 0;
        s = sn_tokenizer_decode_all(tk, &ids, 0, ids.n, &back, &n_back, &e);
        FUZZ_CHECK(s == SN_OK, "decoding what was encoded failed: %s", e.msg);
        FUZZ_CHECK(tk->lossy || (n_back == n_text && !memcmp(back, text, n_text)),
                   "decode(encode(text)) is %zu bytes, the text %zu", n_back, n_text);
        free(back);
    }
    sn_tokens_free(&ids);
    sn_tokenizer_free(tk);
}

#endif
