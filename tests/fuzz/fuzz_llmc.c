/* fuzz_llmc.c: libFuzzer harness for llm.c's GPT-2 model file (io/weights.h sn_llmc_read): the
 * bytes are the file. The header alone (sn_llmc_read_config) is accepted whenever the whole
 * file is, with the same shape; a model that reads holds every GPT-2 parameter of its header's
 * shape (sn_weights_check), and written again (version 3) it reads back the same weights bit
 * for bit. Seeds: tests/fuzz/corpus/llmc (f32 and bf16 files of a 4-channel model, one whose
 * position table is its largest tensor: the reader's buffer once overflowed there). */
#include <string.h>

#include "fuzz_util.h"
#include "fuzz_weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A folder of this process's for the written copies (made once). */
static const char *scratch_dir(void) {
    static char dir[64];
    if (!dir[0] && !mkdtemp(strcpy(dir, "/tmp/sn_fuzz_llmc_XXXXXX"))) dir[0] = 0;
    return dir[0] ? dir : NULL;
}

static bool same_config(const sn_gpt2_config *a, const sn_gpt2_config *b) {
    return a->vocab == b->vocab && a->ctx == b->ctx && a->n_layer == b->n_layer &&
           a->n_head == b->n_head && a->n_embd == b->n_embd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_file(data, size, path);
    if (fd < 0) return 0;
    sn_gpt2_config c;
    sn_weights w = {0};
    sn_err e = {0}, ec = {0};
    sn_status sc = sn_llmc_read_config(path, &c, &ec), s = sn_llmc_read(path, &w, &e);
    close(fd);
    if (sc) FUZZ_CHECK(ec.msg[0], "header refused (%d) without a message", sc);
    if (s) {
        FUZZ_CHECK(e.msg[0] && !w.n && !w.w, "status %d without a message, or with tensors", s);
        return 0;
    }
    FUZZ_CHECK(!sc, "the file reads but its header alone is refused: %s", ec.msg);
    FUZZ_CHECK(same_config(&c, &w.config), "the header's shape differs from the read model's");
    FUZZ_CHECK(sn_weights_check(&w, "the read model", &e) == SN_OK, "%s", e.msg);
    const char *dir = scratch_dir();
    char copy[128];
    if (dir) {
        snprintf(copy, sizeof copy, "%s/copy.bin", dir);
        unlink(copy);
        FUZZ_CHECK(sn_weights_write_llmc(&w, copy, &e) == SN_OK, "written again: %s", e.msg);
        sn_weights r = {0};
        FUZZ_CHECK(sn_llmc_read(copy, &r, &e) == SN_OK, "the written copy: %s", e.msg);
        const char *differs = fuzz_weights_differ(&w, &r);
        FUZZ_CHECK(!differs && same_config(&r.config, &w.config), "the copy's %s differs",
                   differs ? differs : "shape");
        sn_weights_free(&r);
        unlink(copy);
    }
    sn_weights_free(&w);
    return 0;
}
