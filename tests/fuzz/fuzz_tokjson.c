/* fuzz_tokjson.c: libFuzzer harness for Hugging Face's tokenizer.json (sn_tokenizer_hf_load). The
 * input is the file, and optionally a NUL byte and a text; without a text a fixed one is used. A
 * tokenizer that loads must encode the text to ids in its vocabulary that decode to the very
 * same bytes (byte-level BPE loses nothing; a byte-fallback one only decodes). Seeds:
 * tests/fixtures/tokenizers' byte-level models and TinyLlama's layout. */
#include <string.h>

#include "fuzz_tokenizer.h"

static const char sample[] = "Hello world, the <|endoftext|> 12345 don't YOU'LL\r\n\tcaf\xc3\xa9 \xff\xfe!"
                             "  <s>x</s> \xe4\xb8\xad \xf0\x9f\x98\x80";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *sep = memchr(data, 0, size);
    size_t n_json = sep ? (size_t)(sep - data) : size;
    const char *text = sep ? (const char *)sep + 1 : sample;
    size_t n_text = sep ? (size_t)(data + size - (const uint8_t *)text) : sizeof sample - 1;
    char path[64];
    int fd = fuzz_file(data, n_json, path);
    sn_tokenizer *tk = NULL;
    sn_err e = {0};
    sn_status s = fd >= 0 ? sn_tokenizer_hf_load(path, &tk, &e) : SN_ERR_IO;
    if (fd >= 0) close(fd);
    if (s) {
        FUZZ_CHECK(!tk && (e.msg[0] || s == SN_ERR_IO), "status %d, tokenizer %p", s, (void *)tk);
        return 0;
    }
    fuzz_tokenizer_roundtrip(tk, text, n_text);
    return 0;
}
