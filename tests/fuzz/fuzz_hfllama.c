/* fuzz_hfllama.c: libFuzzer harness for a Hugging Face LLaMA-family directory's
 * model.safetensors (io/hf_llama.h sn_hf_llama_read: every tensor checked by name and shape
 * against the model config.json builds, a tied head's lm_head.weight against embed_tokens): the
 * bytes are the file, written beside the config.json of a tiny model (vocab 16, hidden 8, one
 * layer, 2 query heads on 1 kv head), untied and tied (Qwen2's biases in the tied one), in
 * folders made once a process. A refusal has a message; a model that reads has every parameter
 * of the model with its shape, and written again (sn_hf_llama_write) reads back bit for bit.
 * SN_FUZZ_WRITE_SEED=DIR writes the two models' own model.safetensors into DIR (the seeds of
 * tests/fuzz/corpus/hfllama) and exits. */
#include <string.h>

#include "frontend/frontend.h"
#include "io/hf_llama.h"
#include "fuzz_util.h"
#include "fuzz_weights.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sn_llama_config configs[2];
static char dirs[2][64];
static int n_params[2];

static sn_llama_config tiny(bool tied) {
    return (sn_llama_config){.name = "llama-custom", .vocab = 16, .ctx = 8, .n_layer = 1, .n_head = 2,
                             .n_kv_head = 1, .head_dim = 4, .hidden = 8, .intermediate = 16,
                             .rms_norm_eps = 1e-6f, .rope_theta = 10000, .tie_word_embeddings = tied,
                             .qkv_bias = tied};
}

/* The model's parameters with made-up weights, written as a Hugging Face directory into dir. */
static void write_model(const sn_llama_config *c, const char *dir, int *count) {
    sn_graph *g = sn_graph_new();
    sn_llama m;
    sn_err e;
    sn_weights w = {0};
    if (sn_llama_build(g, c, 1, 1, &m, &e)) {
        fprintf(stderr, "fuzz_hfllama: %s\n", e.msg);
        exit(1);
    }
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM) continue;
        int64_t n = sn_numel(p);
        float *d = malloc(4 * (size_t)n + 4);
        for (int64_t j = 0; j < n; j++) d[j] = (float)((j * 37 + i) % 101 - 50) / 64.0f;
        if (!d || sn_weights_add(&w, p->name, p->rank, p->shape, d, &e)) exit(1);
        ++*count;
    }
    if (sn_hf_llama_write(c, &w, dir, &e)) {
        fprintf(stderr, "fuzz_hfllama: %s\n", e.msg);
        exit(1);
    }
    sn_weights_free(&w);
    sn_graph_free(g);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seed = getenv("SN_FUZZ_WRITE_SEED");
    for (int k = 0; k < 2; k++) {
        configs[k] = tiny(k == 1);
        if (!mkdtemp(strcpy(dirs[k], "/tmp/sn_fuzz_hfllama_XXXXXX"))) exit(1);
        strcat(dirs[k], "/m"); /* sn_hf_llama_write makes the folder */
        write_model(&configs[k], dirs[k], &n_params[k]);
        if (seed) {
            char cmd[512];
            snprintf(cmd, sizeof cmd, "cp '%s/model.safetensors' '%s/%s.safetensors'", dirs[k], seed,
                     k ? "tied_qwen2" : "untied");
            if (system(cmd) != 0) exit(1);
        }
    }
    if (seed) exit(0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int k = 0; k < 2; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/model.safetensors", dirs[k]);
        if (!fuzz_write_file(path, data, size)) return 0;
        sn_weights w = {0}, r = {0};
        sn_llama_config c, rc;
        sn_err e = {0};
        sn_status s = sn_hf_llama_read(dirs[k], &c, &w, &e);
        if (s) {
            FUZZ_CHECK(e.msg[0] && !w.n, "status %d without a message, or with tensors", s);
            continue;
        }
        FUZZ_CHECK(w.n == n_params[k], "%d tensors read, the model has %d", w.n, n_params[k]);
        char copy[128], cmd[160];
        snprintf(copy, sizeof copy, "%s2", dirs[k]);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", copy);
        if (system(cmd) != 0) return 0;
        FUZZ_CHECK(sn_hf_llama_write(&c, &w, copy, &e) == SN_OK, "written again: %s", e.msg);
        FUZZ_CHECK(sn_hf_llama_read(copy, &rc, &r, &e) == SN_OK, "the copy: %s", e.msg);
        const char *differs = fuzz_weights_differ(&w, &r);
        FUZZ_CHECK(!differs, "the copy's %s differs", differs);
        sn_weights_free(&r);
        sn_weights_free(&w);
    }
    return 0;
}
