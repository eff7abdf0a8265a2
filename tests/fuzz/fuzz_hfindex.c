/* fuzz_hfindex.c: libFuzzer harness for a sharded Hugging Face model's
 * model.safetensors.index.json (io/io_int.h sn_hf_index_walk) as the GPT-2 reader
 * (sn_weights_read) and the LLaMA-family one (sn_hf_llama_read) walk it: the bytes are the index,
 * written into copies of the test fixtures' sharded models (tests/fixtures/hf/sharded: GPT-2 in
 * 3 shards; tests/fixtures/llama/qwen2: Qwen2 in 3), made once a process. A refusal has a
 * message; an index accepted gives the very weights the fixture's own index gives (a tensor is
 * read by name from the shard the index names, so no index can change one). Seeds:
 * tests/fuzz/corpus/hfindex (the two fixtures' indexes). */
#include <string.h>

#include "io/hf_llama.h"
#include "fuzz_util.h"
#include "fuzz_weights.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dirs[2][64];           /* the copies: GPT-2's, Qwen2's */
static sn_weights want[2];         /* what their own indexes give */
static sn_llama_config want_c;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *src[2] = {SN_SOURCE_ROOT "/tests/fixtures/hf/sharded",
                          SN_SOURCE_ROOT "/tests/fixtures/llama/qwen2"};
    for (int k = 0; k < 2; k++) {
        char cmd[512];
        if (!mkdtemp(strcpy(dirs[k], "/tmp/sn_fuzz_hfindex_XXXXXX"))) exit(1);
        snprintf(cmd, sizeof cmd, "cp -r '%s/.' '%s'", src[k], dirs[k]);
        sn_err e;
        if (system(cmd) != 0 ||
            (k == 0 ? sn_weights_read(dirs[k], &want[k], &e)
                    : sn_hf_llama_read(dirs[k], &want_c, &want[k], &e))) {
            fprintf(stderr, "fuzz_hfindex: cannot read the fixture %s\n", src[k]);
            exit(1);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int k = 0; k < 2; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dirs[k]);
        if (!fuzz_write_file(path, data, size)) return 0;
        sn_weights w = {0};
        sn_llama_config c;
        sn_err e = {0};
        sn_status s = k == 0 ? sn_weights_read(dirs[k], &w, &e) : sn_hf_llama_read(dirs[k], &c, &w, &e);
        if (s) {
            FUZZ_CHECK(e.msg[0] && !w.n, "%s: status %d without a message, or with tensors",
                       k ? "Qwen2" : "GPT-2", s);
            continue;
        }
        const char *differs = fuzz_weights_differ(&w, &want[k]);
        FUZZ_CHECK(!differs, "%s: an index the reader accepted gave another %s",
                   k ? "Qwen2" : "GPT-2", differs);
        sn_weights_free(&w);
    }
    return 0;
}
