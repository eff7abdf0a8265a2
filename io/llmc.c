/* llmc.c: llm.c's GPT-2 model file (weights.h): a header of 256 int32 (magic 20240326, version
 * 3 for f32 or 5 for bf16, maxT, V, L, NH, C, Vp), then the tensors kind by kind, each kind for
 * every layer: wte (Vp, C) with Vp - V zero rows, wpe (maxT, C), ln1 w and b, qkv w (3C, C) and
 * b, attention projection w (C, C) and b, ln2 w and b, fc w (4C, C) and b, fc projection w (C,
 * 4C) and b, lnf w and b. Convention: llm.c's Linear weights are (out, in) (PyTorch's nn.Linear);
 * sinter's are (in, out), so they are transposed at this edge and nowhere else. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_int.h"
#include "weights.h"

enum { MAGIC = 20240326, HEADER_INTS = 256, V_F32 = 3, V_BF16 = 5, PAD = 128 };

/* The kinds after wte and wpe, in file order: sinter's name after "h.N.", rows and columns of
 * one layer's tensor in the file (in units of C; 0 columns: a vector), transposed or not. */
static const struct {
    const char *name;
    int rows, cols;
} kinds[12] = {
    {"ln_1.w", 1, 0},        {"ln_1.b", 1, 0},      {"attn.c_attn.w", 3, 1}, {"attn.c_attn.b", 3, 0},
    {"attn.c_proj.w", 1, 1}, {"attn.c_proj.b", 1, 0}, {"ln_2.w", 1, 0},      {"ln_2.b", 1, 0},
    {"mlp.c_fc.w", 4, 1},    {"mlp.c_fc.b", 4, 0},  {"mlp.c_proj.w", 1, 4},  {"mlp.c_proj.b", 1, 0},
};

typedef struct {
    sn_gpt2_config c;
    int version, vp;
} header;

static sn_status read_header(const char *path, int fd, uint64_t size, header *h, sn_err *e) {
    int32_t hd[HEADER_INTS];
    if (size < sizeof hd || pread(fd, hd, sizeof hd, 0) != (ssize_t)sizeof hd)
        return sn_fail(e, SN_ERR_PARSE, "%s: %" PRIu64 " bytes, less than llm.c's 1024-byte header: "
                       "give a Hugging Face model directory or llm.c's gpt2_124M.bin", path, size);
    if (hd[0] != MAGIC)
        return sn_fail(e, SN_ERR_PARSE, "%s is not an llm.c model file (magic %d, not %d): give a "
                       "Hugging Face model directory or llm.c's gpt2_124M.bin", path, hd[0], MAGIC);
    if (hd[1] != V_F32 && hd[1] != V_BF16)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: llm.c model version %d; sinter reads versions 3 "
                       "(fp32) and 5 (bf16): write it again with llm.c's train_gpt2.py", path, hd[1]);
    h->version = hd[1];
    h->c = (sn_gpt2_config){.name = "gpt2-custom", .ctx = hd[2], .vocab = hd[3], .n_layer = hd[4],
                            .n_head = hd[5], .n_embd = hd[6]};
    h->vp = hd[7];
    const sn_gpt2_config *c = &h->c;
    if (c->ctx < 1 || c->ctx > 1 << 20 || c->vocab < 1 || c->vocab > 1 << 24 || c->n_layer < 1 ||
        c->n_layer > 1000 || c->n_head < 1 || c->n_embd < 1 || c->n_embd > 1 << 16 ||
        c->n_embd % c->n_head || h->vp < c->vocab || h->vp > 1 << 24)
        return sn_fail(e, SN_ERR_PARSE, "%s: its header (maxT %d, V %d, L %d, NH %d, C %d, Vp %d) "
                       "is not a GPT-2 (C a multiple of NH, V <= Vp): the file is damaged", path,
                       c->ctx, c->vocab, c->n_layer, c->n_head, c->n_embd, h->vp);
    return SN_OK;
}

static sn_status open_file(const char *path, int *fd, uint64_t *size, sn_err *e) {
    struct stat st;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0 || fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        if (*fd >= 0) close(*fd);
        return sn_fail(e, SN_ERR_IO, "cannot read %s: %s: give a Hugging Face model directory or "
                       "llm.c's gpt2_124M.bin", path, *fd >= 0 ? "not a regular file" : strerror(err));
    }
    *size = (uint64_t)st.st_size;
    return SN_OK;
}

sn_status sn_llmc_read_config(const char *path, sn_gpt2_config *c, sn_err *e) {
    int fd;
    uint64_t size;
    header h;
    sn_status s = open_file(path, &fd, &size, e);
    if (s) return s;
    s = read_header(path, fd, size, &h, e);
    close(fd);
    if (!s) {
        *c = h.c;
        c->name = sn_gpt2_published_name(c);
    }
    return s;
}

/* Elements of one layer's tensor of kind k. */
static int64_t kind_numel(const sn_gpt2_config *c, int k) {
    return (int64_t)kinds[k].rows * c->n_embd * (kinds[k].cols ? (int64_t)kinds[k].cols * c->n_embd : 1);
}

/* n elements at element offset `at` of the data part, as f32. */
static sn_status read_floats(const char *path, int fd, const header *h, uint64_t at, size_t n,
                             float *dst, const char *what, sn_err *e) {
    size_t es = h->version == V_F32 ? 4 : 2, bytes = n * es, done = 0;
    char *buf = es == 4 ? (char *)dst : sn_malloc(bytes + 1, "a bf16 tensor", e);
    if (!buf) return SN_ERR_OOM;
    while (done < bytes) {
        ssize_t got = pread(fd, buf + done, bytes - done, (off_t)(4 * HEADER_INTS + at * es + done));
        if (got <= 0) {
            if (es == 2) free(buf);
            return sn_fail(e, SN_ERR_IO, "cannot read %s of %s: %s", what, path,
                           got < 0 ? strerror(errno) : "the file ends early (it shrank while read)");
        }
        done += (size_t)got;
    }
    if (es == 2) {
        for (size_t i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, buf + 2 * i, 2);
            dst[i] = sn_bf16_to_f32(b);
        }
        free(buf);
    }
    return SN_OK;
}

/* A new tensor of rows x cols (cols 0: a vector) from src, transposed when asked. */
static sn_status add(sn_weights *w, const char *name, int64_t rows, int64_t cols, const float *src,
                     bool transpose, sn_err *e) {
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    float *d = sn_malloc(4 * n + 4, "a pretrained tensor", e);
    if (!d) return SN_ERR_OOM;
    if (transpose) /* src (cols, rows): llm.c's (out, in) into sinter's (in, out) */
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) d[i * cols + j] = src[j * rows + i];
    else memcpy(d, src, 4 * n);
    return sn_weights_add(w, name, cols ? 2 : 1, (int64_t[]){rows, cols}, d, e);
}

sn_status sn_llmc_read(const char *path, sn_weights *out, sn_err *e) {
    int fd;
    uint64_t size;
    header h;
    sn_status s = open_file(path, &fd, &size, e);
    if (s) return s;
    if ((s = read_header(path, fd, size, &h, e))) {
        close(fd);
        return s;
    }
    const sn_gpt2_config *c = &h.c;
    /* most: the largest tensor read into buf, wte's and wpe's rows among them (a byte-level
       model with a long context has more positions than padded ids) */
    int64_t C = c->n_embd, L = c->n_layer, total = ((int64_t)h.vp + c->ctx + 2) * C,
            most = ((int64_t)h.vp > c->ctx ? h.vp : c->ctx) * C;
    for (int k = 0; k < 12; k++) {
        total += L * kind_numel(c, k);
        if (L * kind_numel(c, k) > most) most = L * kind_numel(c, k);
    }
    uint64_t want = 4 * HEADER_INTS + (uint64_t)total * (h.version == V_F32 ? 4 : 2);
    if (size != want) {
        close(fd);
        return sn_fail(e, SN_ERR_PARSE, "%s is %s: %" PRIu64 " bytes; its header (version %d, V %d "
                       "padded to %d, %d layers, %d channels, maxT %d) needs %" PRIu64 ": download "
                       "it again", path, size < want ? "truncated" : "longer than its header says",
                       size, h.version, c->vocab, h.vp, c->n_layer, c->n_embd, c->ctx, want);
    }
    sn_weights_init(out, c);
    float *buf = sn_malloc(4 * (size_t)most + 4, "a block of llm.c weights", e);
    if (!buf) s = SN_ERR_OOM;
    uint64_t at = 0;
    if (!s && !(s = read_floats(path, fd, &h, at, (size_t)(c->vocab * C), buf, "wte", e)))
        s = add(out, "wte", c->vocab, C, buf, false, e); /* the padding rows are not read */
    at += (uint64_t)h.vp * (uint64_t)C;
    if (!s && !(s = read_floats(path, fd, &h, at, (size_t)(c->ctx * C), buf, "wpe", e)))
        s = add(out, "wpe", c->ctx, C, buf, false, e);
    at += (uint64_t)c->ctx * (uint64_t)C;
    for (int k = 0; k < 12 && !s; k++) {
        int64_t per = kind_numel(c, k);
        if ((s = read_floats(path, fd, &h, at, (size_t)(L * per), buf, kinds[k].name, e))) break;
        at += (uint64_t)(L * per);
        for (int l = 0; l < L && !s; l++) {
            char name[96];
            snprintf(name, sizeof name, "h.%d.%s", l, kinds[k].name);
            bool w = kinds[k].cols != 0;
            s = add(out, name, w ? kinds[k].cols * C : kinds[k].rows * C, w ? kinds[k].rows * C : 0,
                    buf + l * per, w, e);
        }
    }
    for (int k = 0; k < 2 && !s; k++) {
        const char *name = k ? "ln_f.b" : "ln_f.w";
        if (!(s = read_floats(path, fd, &h, at, (size_t)C, buf, name, e))) s = add(out, name, C, 0, buf, false, e);
        at += (uint64_t)C;
    }
    close(fd);
    free(buf);
    if (!s) s = sn_weights_check(out, path, e);
    if (s) sn_weights_free(out);
    return s;
}

/* ---- writing: version 3 ---- */

/* Writes w's tensor name (rows x cols, (in, out)) as llm.c's (out, in) when transpose. */
static void put_tensor(sn_newfile *f, const sn_weight *x, bool transpose, float *scratch) {
    if (!transpose) {
        sn_newfile_put(f, x->data, 4 * (size_t)(x->shape[0] * (x->rank > 1 ? x->shape[1] : 1)));
        return;
    }
    int64_t in = x->shape[0], out = x->shape[1];
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) scratch[o * in + i] = x->data[i * out + o];
    sn_newfile_put(f, scratch, 4 * (size_t)(in * out));
}

sn_status sn_weights_write_llmc(const sn_weights *w, const char *path, sn_err *e) {
    sn_status s = sn_weights_check(w, "the weights to export", e);
    if (s) return s;
    const sn_gpt2_config *c = &w->config;
    int64_t C = c->n_embd, vp = (c->vocab + PAD - 1) / PAD * PAD;
    float *scratch = sn_calloc((size_t)(16 * C * C + (vp - c->vocab) * C + 1), 4, "llm.c's export", e);
    if (!scratch) return SN_ERR_OOM;
    sn_newfile f;
    if ((s = sn_newfile_open(&f, path, "llm.c model file", e))) {
        free(scratch);
        return s;
    }
    int32_t hd[HEADER_INTS] = {MAGIC, V_F32, c->ctx, c->vocab, c->n_layer, c->n_head, c->n_embd, (int32_t)vp};
    sn_newfile_put(&f, hd, sizeof hd);
    put_tensor(&f, sn_weights_find(w, "wte"), false, NULL);
    sn_newfile_put(&f, scratch, 4 * (size_t)((vp - c->vocab) * C)); /* zeros: the padding rows */
    put_tensor(&f, sn_weights_find(w, "wpe"), false, NULL);
    for (int k = 0; k < 12; k++)
        for (int l = 0; l < c->n_layer; l++) {
            char name[96];
            snprintf(name, sizeof name, "h.%d.%s", l, kinds[k].name);
            put_tensor(&f, sn_weights_find(w, name), kinds[k].cols != 0, scratch);
        }
    put_tensor(&f, sn_weights_find(w, "ln_f.w"), false, NULL);
    put_tensor(&f, sn_weights_find(w, "ln_f.b"), false, NULL);
    free(scratch);
    return sn_newfile_commit(&f, e);
}
