/* fuzz_hfconfig.c: libFuzzer harness for a Hugging Face model directory's config.json, as the
 * GPT-2 reader (io/weights.h sn_hf_gpt2_read_config) and the LLaMA-family one (io/hf_llama.h
 * sn_hf_is_llama, sn_hf_llama_read_config) take it: the bytes are the file, in a folder of this
 * process's. A refusal has a message; a GPT-2 accepted has positive sizes within the reader's
 * bounds and n_embd a multiple of n_head; a LLaMA accepted is one sn_hf_is_llama says is, and
 * has the shape sn_llama_config_check accepts. Seeds: tests/fuzz/corpus/hfconfig (transformers'
 * GPT-2 and TinyLlama/SmolLM2 files, a Qwen2 and a llama3 rope). */
#include <string.h>

#include "io/hf_llama.h"
#include "io/weights.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A folder of this process's holding config.json (made once). */
static const char *model_dir(void) {
    static char dir[64];
    if (!dir[0] && !mkdtemp(strcpy(dir, "/tmp/sn_fuzz_hfconfig_XXXXXX"))) dir[0] = 0;
    return dir[0] ? dir : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = model_dir();
    if (!dir) return 0;
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!fuzz_write_file(path, data, size)) return 0;

    sn_gpt2_config g;
    sn_err e = {0};
    sn_status s = sn_hf_gpt2_read_config(dir, &g, &e);
    if (s) FUZZ_CHECK(e.msg[0], "GPT-2: status %d without a message", s);
    else
        FUZZ_CHECK(g.n_embd >= 1 && g.n_embd <= 1 << 16 && g.n_layer >= 1 && g.n_layer <= 1000 &&
                   g.n_head >= 1 && g.n_embd % g.n_head == 0 && g.ctx >= 1 && g.ctx <= 1 << 20 &&
                   g.vocab >= 1 && g.vocab <= 1 << 24 && g.name,
                   "GPT-2 accepted: C %d, L %d, H %d, T %d, V %d", g.n_embd, g.n_layer, g.n_head,
                   g.ctx, g.vocab);

    bool llama = sn_hf_is_llama(dir);
    sn_llama_config c;
    e = (sn_err){0};
    s = sn_hf_llama_read_config(dir, &c, &e);
    if (s) {
        FUZZ_CHECK(e.msg[0], "LLaMA: status %d without a message", s);
        return 0;
    }
    FUZZ_CHECK(llama, "a config read as a LLaMA that sn_hf_is_llama says is not one");
    FUZZ_CHECK(sn_llama_config_check(&c, &e) == SN_OK, "LLaMA accepted but its check refuses: %s",
               e.msg);
    FUZZ_CHECK(c.hidden >= 1 && c.n_layer >= 1 && c.n_head >= 1 && c.n_kv_head >= 1 &&
               c.head_dim >= 2 && c.vocab >= 1 && c.ctx >= 1 && c.intermediate >= 1 && c.name,
               "LLaMA accepted: hidden %d, L %d, H %d/%d, D %d, V %d, T %d", c.hidden, c.n_layer,
               c.n_head, c.n_kv_head, c.head_dim, c.vocab, c.ctx);
    return 0;
}
