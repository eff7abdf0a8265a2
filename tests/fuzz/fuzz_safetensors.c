/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader (io/safetensors.h). The bytes
 * are the file: a header that parses must describe tensors whose bytes lie inside the file, with
 * sizes equal to shape x dtype and no two overlapping, and every F32, BF16 and F16 tensor of it
 * must read; a file that does not parse has a message. The same bytes parsed from memory
 * (sn_st_parse_header) give the same verdict as the file (sn_st_open). */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_file(data, size, path);
    if (fd < 0) return 0;
    sn_st_file f, m;
    sn_err e = {0}, em = {0};
    sn_status s = sn_st_open(path, &f, &e), sm = sn_st_parse_header(path, data, size, size, &m, &em);
    close(fd);
    FUZZ_CHECK((s == SN_OK) == (sm == SN_OK), "the file gives %d (%s), the bytes %d (%s)", s, e.msg, sm, em.msg);
    sn_st_close(&m);
    if (s) {
        FUZZ_CHECK(e.msg[0] && !f.t && !f.n, "status %d without a message or with tensors", s);
        return 0;
    }
    uint64_t data_bytes = size - f.data_at;
    for (int i = 0; i < f.n; i++) {
        const sn_st_tensor *t = &f.t[i];
        int64_t n = sn_st_numel(t);
        int es = t->dtype == SN_ST_F32 ? 4 : t->dtype == SN_ST_BF16 || t->dtype == SN_ST_F16 ? 2 : 0;
        FUZZ_CHECK(t->begin <= t->end && t->end <= data_bytes, "tensor %s at [%llu, %llu) of %llu bytes",
                   t->name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_bytes);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(f.t[j].end <= t->begin || t->end <= f.t[j].begin || t->begin == t->end ||
                       f.t[j].begin == f.t[j].end, "tensors %s and %s overlap", f.t[j].name, t->name);
        if (!es) continue;
        FUZZ_CHECK(t->end - t->begin == (uint64_t)n * (uint64_t)es, "tensor %s: %lld elements in %llu bytes",
                   t->name, (long long)n, (unsigned long long)(t->end - t->begin));
        float *dst = malloc(4 * (size_t)n + 4);
        if (!dst) continue;
        sn_status r = sn_st_read_f32(&f, t, dst, &e);
        FUZZ_CHECK(r == SN_OK, "tensor %s does not read: %s", t->name, e.msg);
        if (t->dtype == SN_ST_F32) FUZZ_CHECK(!memcmp(dst, data + f.data_at + t->begin, 4 * (size_t)n), "tensor %s", t->name);
        free(dst);
    }
    sn_st_close(&f);
    return 0;
}
