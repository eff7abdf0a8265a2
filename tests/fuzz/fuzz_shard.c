/* fuzz_shard.c: libFuzzer harness for the llm.c token-shard reader (sn_shard_read). The bytes
 * are the file; a shard that is accepted must hold exactly the ids its header counts, each
 * below the vocabulary. */
#include <string.h>

#include "data/data.h"
#include "fuzz_util.h"

enum { VOCAB = 50257 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_file(data, size, path);
    if (fd < 0) return 0;
    sn_tokens t;
    sn_err e = {0};
    sn_status s = sn_shard_read(path, VOCAB, &t, &e);
    close(fd);
    if (s) {
        FUZZ_CHECK(e.msg[0] && !t.ids && !t.n, "status %d without a message or with tokens", s);
        return 0;
    }
    FUZZ_CHECK(size == SN_SHARD_HEADER_BYTES + 2 * t.n, "%zu tokens from %zu bytes", t.n, size);
    for (size_t i = 0; i < t.n; i++)
        FUZZ_CHECK(sn_tokens_get(&t, i) < VOCAB, "token %zu is %d", i, sn_tokens_get(&t, i));
    FUZZ_CHECK(!memcmp(t.ids, data + SN_SHARD_HEADER_BYTES, 2 * t.n), "ids differ from the file");
    sn_tokens_free(&t);
    return 0;
}
