/* weights.c: the weight set of weights.h: GPT-2's parameter list, checks by name and shape, the
 * reader chosen by what the path is, and copies into a program's or a trainer's parameters.
 * Convention: a name missing or extra is reported before anything is copied. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/ia3.h"
#include "weights.h"

void sn_weights_free(sn_weights *w) {
    for (int i = 0; i < w->n; i++) {
        free(w->w[i].name);
        free(w->w[i].data);
    }
    free(w->w);
    w->w = NULL;
    w->n = 0;
}

const sn_weight *sn_weights_find(const sn_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->w[i].name, name)) return &w->w[i];
    return NULL;
}

int sn_gpt2_param_count(const sn_gpt2_config *c) { return 4 + 12 * c->n_layer; }

int sn_gpt2_param_at(const sn_gpt2_config *c, int i, char *buf, size_t len, int64_t shape[2]) {
    int64_t C = c->n_embd;
    if (i < 0 || i >= sn_gpt2_param_count(c)) return 0;
    if (i < 2) {
        snprintf(buf, len, "%s", i ? "wpe" : "wte");
        shape[0] = i ? c->ctx : c->vocab;
        shape[1] = C;
        return 2;
    }
    int last = sn_gpt2_param_count(c) - 2;
    if (i >= last) {
        snprintf(buf, len, "ln_f.%s", i == last ? "w" : "b");
        shape[0] = C;
        return 1;
    }
    /* per layer: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj (mlp), each w then b */
    static const struct {
        const char *name;
        int in, out; /* in units of C; in 0: a layer norm (rank 1) */
    } kinds[6] = {{"ln_1", 0, 1}, {"attn.c_attn", 1, 3}, {"attn.c_proj", 1, 1},
                  {"ln_2", 0, 1}, {"mlp.c_fc", 1, 4},    {"mlp.c_proj", 4, 1}};
    int k = i - 2, layer = k / 12, kind = k % 12 / 2;
    bool bias = k % 2;
    snprintf(buf, len, "h.%d.%s.%s", layer, kinds[kind].name, bias ? "b" : "w");
    if (!kinds[kind].in || bias) {
        shape[0] = kinds[kind].out * C;
        return 1;
    }
    shape[0] = kinds[kind].in * C;
    shape[1] = kinds[kind].out * C;
    return 2;
}

const char *sn_gpt2_published_name(const sn_gpt2_config *c) {
    static const char *const names[] = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "demo", "tiny"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        sn_gpt2_config p;
        if (sn_gpt2_config_find(names[i], &p) && p.vocab == c->vocab && p.ctx == c->ctx &&
            p.n_layer == c->n_layer && p.n_head == c->n_head && p.n_embd == c->n_embd)
            return names[i];
    }
    return "gpt2-custom";
}

void sn_weights_init(sn_weights *w, const sn_gpt2_config *c) {
    *w = (sn_weights){.config = *c};
    snprintf(w->name, sizeof w->name, "%s", sn_gpt2_published_name(c));
    w->config.name = w->name;
}

sn_status sn_weights_add(sn_weights *w, const char *name, int rank, const int64_t *shape,
                         float *data, sn_err *e) {
    SN_ASSERT(rank == 1 || rank == 2);
    sn_weight *grown = sn_realloc(w->w, sizeof *w->w * (size_t)(w->n + 1), "the weight list", e);
    char *copy = grown ? strdup(name) : NULL;
    if (!copy) {
        free(data);
        if (grown) w->w = grown;
        return grown ? sn_fail_oom(e, strlen(name) + 1, "a weight's name") : SN_ERR_OOM;
    }
    w->w = grown;
    w->w[w->n++] = (sn_weight){.name = copy, .rank = rank, .shape = {shape[0], rank > 1 ? shape[1] : 1},
                               .data = data};
    return SN_OK;
}

static void shape_str(int rank, const int64_t *shape, char *buf, size_t len) {
    if (rank == 1) snprintf(buf, len, "(%" PRId64 ")", shape[0]);
    else snprintf(buf, len, "(%" PRId64 ", %" PRId64 ")", shape[0], shape[1]);
}

sn_status sn_weights_check(const sn_weights *w, const char *from, sn_err *e) {
    char name[96], a[64], b[64];
    int64_t shape[2];
    for (int i = 0; i < sn_gpt2_param_count(&w->config); i++) {
        int rank = sn_gpt2_param_at(&w->config, i, name, sizeof name, shape);
        const sn_weight *x = sn_weights_find(w, name);
        if (!x)
            return sn_fail(e, SN_ERR_INVALID, "%s: no weights for %s %s: a GPT-2 of %d layers has one",
                           from, name, (shape_str(rank, shape, a, sizeof a), a), w->config.n_layer);
        if (x->rank != rank || x->shape[0] != shape[0] || (rank > 1 && x->shape[1] != shape[1])) {
            shape_str(x->rank, x->shape, a, sizeof a);
            shape_str(rank, shape, b, sizeof b);
            return sn_fail(e, SN_ERR_INVALID, "%s: %s is %s, the configuration needs %s", from,
                           name, a, b);
        }
    }
    if (w->n != sn_gpt2_param_count(&w->config))
        for (int i = 0; i < w->n; i++) {
            bool known = false;
            for (int k = 0; k < sn_gpt2_param_count(&w->config) && !known; k++) {
                sn_gpt2_param_at(&w->config, k, name, sizeof name, shape);
                known = !strcmp(name, w->w[i].name);
            }
            if (!known)
                return sn_fail(e, SN_ERR_INVALID, "%s: %s is not a parameter of a GPT-2 of %d "
                               "layers", from, w->w[i].name, w->config.n_layer);
        }
    return SN_OK;
}

/* ---- reading: the format from the path ---- */

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

sn_status sn_weights_read(const char *path, sn_weights *out, sn_err *e) {
    return is_dir(path) ? sn_hf_gpt2_read(path, out, e) : sn_llmc_read(path, out, e);
}

sn_status sn_weights_read_config(const char *path, sn_gpt2_config *c, sn_err *e) {
    return is_dir(path) ? sn_hf_gpt2_read_config(path, c, e) : sn_llmc_read_config(path, c, e);
}

/* ---- into a model ---- */

sn_status sn_weights_fill(const sn_weights *w, const sn_node *p, int64_t vocab, float *dst, sn_err *e) {
    const sn_weight *x = sn_weights_find(w, p->name);
    if (!x)
        return sn_fail(e, SN_ERR_INVALID, "the pretrained weights have no %s: the model is not "
                       "the GPT-2 they were read for", p->name);
    bool same = p->rank == x->rank && p->shape[0] == x->shape[0] && (x->rank < 2 || p->shape[1] == x->shape[1]);
    bool padded = p->rank == 2 && x->rank == 2 && p->shape[1] == x->shape[1] && p->shape[0] > x->shape[0] &&
                  x->shape[0] == vocab;
    if (!same && !padded) {
        char a[64], b[64];
        shape_str(x->rank, x->shape, a, sizeof a);
        sn_shape_str(p->rank, p->shape, b, sizeof b);
        return sn_fail(e, SN_ERR_INVALID, "the pretrained %s is %s, the model's %s: %s", p->name, a,
                       b, !strcmp(p->name, "wte") ? "the model's vocabulary is its tokenizer's: "
                       "give the tokenizer the weights were trained with (--bpe DIR for GPT-2's)"
                       : "the model is not the GPT-2 the weights were read for");
    }
    size_t n = (size_t)x->shape[0] * (size_t)(x->rank > 1 ? x->shape[1] : 1);
    memcpy(dst, x->data, 4 * n);
    memset(dst + n, 0, 4 * ((size_t)sn_numel(p) - n)); /* the vocabulary's padding rows */
    return SN_OK;
}

/* Parameter i of t as sn_weights_fill wants it: its name with its weights' shape (an NF4
 * parameter's are its dequantize's: the file's floats are quantized when set). */
static sn_node weights_of(const sn_trainer *t, int i) {
    sn_node v = *sn_trainer_param_value(t, i);
    v.name = sn_trainer_param_node(t, i)->name;
    return v;
}

sn_status sn_weights_init_trainer(const sn_weights *w, sn_trainer *t, int64_t vocab, int *fresh,
                                  sn_err *e) {
    if (sn_trainer_pending(t) || sn_trainer_step_count(t))
        return sn_fail(e, SN_ERR_INVALID, "pretrained weights start a run before its first step");
    int n_fresh = 0, np = sn_trainer_param_count(t);
    int64_t most = 1;
    sn_status s = SN_OK;
    for (int i = 0; i < np; i++) /* checked whole first: shapes by filling a scratch copy */
        if (sn_numel(sn_trainer_param_value(t, i)) > most) most = sn_numel(sn_trainer_param_value(t, i));
    float *buf = sn_malloc(4 * (size_t)most, "a pretrained parameter", e);
    if (!buf) return SN_ERR_OOM;
    for (int i = 0; i < np && !s; i++) {
        sn_node p = weights_of(t, i);
        if (!sn_weights_find(w, p.name) && sn_is_adapter(p.name)) n_fresh++;
        else s = sn_weights_fill(w, &p, vocab, buf, e);
    }
    for (int i = 0; i < w->n && !s; i++)
        if (sn_trainer_find_param(t, w->w[i].name) < 0)
            s = sn_fail(e, SN_ERR_INVALID, "the pretrained weights have %s, which the model lacks: "
                        "the model is not the GPT-2 they were read for", w->w[i].name);
    for (int i = 0; i < np && !s; i++) {
        sn_node p = weights_of(t, i);
        if (sn_weights_find(w, p.name) && !(s = sn_weights_fill(w, &p, vocab, buf, e)))
            s = sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, buf, e); /* NF4: quantized */
    }
    free(buf);
    if (!s && fresh) *fresh = n_fresh;
    return s;
}
