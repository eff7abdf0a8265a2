/* fuzz_bpe.c: libFuzzer harness for GPT-2's BPE files (sn_tokenizer_gpt2_load). The input is
 * encoder.json, a NUL byte, vocab.bpe, and optionally a NUL byte and a text; without a text a
 * fixed one is used. A tokenizer that loads must encode the text to ids in its vocabulary that
 * decode to the very same bytes (byte-level BPE loses nothing). */
#include <string.h>

#include "fuzz_tokenizer.h"

static const char sample[] = "Hello world, the <|endoftext|> 123 don't\n\tcaf\xc3\xa9 \xff\xfe!";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *sep = memchr(data, 0, size);
    size_t n_enc = sep ? (size_t)(sep - data) : size;
    const uint8_t *merges = sep ? sep + 1 : data + size;
    size_t n_merges = (size_t)(data + size - merges);
    const uint8_t *sep2 = memchr(merges, 0, n_merges);
    const char *text = sample;
    size_t n_text = sizeof sample - 1;
    if (sep2) {
        text = (const char *)sep2 + 1;
        n_text = (size_t)(data + size - (const uint8_t *)text);
        n_merges = (size_t)(sep2 - merges);
    }
    char enc_path[64], merges_path[64];
    int fd1 = fuzz_file(data, n_enc, enc_path), fd2 = fuzz_file(merges, n_merges, merges_path);
    sn_tokenizer *tk = NULL;
    sn_err e = {0};
    sn_status s = fd1 >= 0 && fd2 >= 0 ? sn_tokenizer_gpt2_load(enc_path, merges_path, &tk, &e) : SN_ERR_IO;
    if (fd1 >= 0) close(fd1);
    if (fd2 >= 0) close(fd2);
    if (s) {
        FUZZ_CHECK(!tk && (e.msg[0] || s == SN_ERR_IO), "status %d, tokenizer %p", s, (void *)tk);
        return 0;
    }
    fuzz_tokenizer_roundtrip(tk, text, n_text);
    return 0;
}
