/* backend.c: the two ways the trainer runs its graph and its optimizer step (backend.h). Every
 * difference between interpreting and running compiled code is in this file.
 * Convention: the optimizer's buffers are named by FB_*; compiled, each is an executor ref (the
 * program's parameters and gradients, or an extra device buffer), interpreted, a host array;
 * the same kernel descriptions run on either (sn_exec_launch or sn_interp_optim). Compiled with
 * offload, the moments, the gradient sums and a copy of the weights (the masters) are host
 * arrays instead, and AdamW runs on the CPU (offload.h) in chunks: gradients down, weights up. */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pipeline.h"
#include "interp/interp.h"
#include "offload.h"

/* the flat buffers of the optimizer step */
enum { FB_PARAMS, FB_GRADS, FB_SUMS, FB_M, FB_V, FB_SCAL, FB_PART, FB_LOW, FB_COUNT };
/* its kernels */
enum { OK_ACC, OK_SQNORM, OK_CLIP, OK_ADAMW, OK_COUNT };

struct sn_backend {
    sn_graph *g;
    sn_node *const *params;
    int n_params;
    int64_t *off;     /* [n_params] element offset of a trainable parameter in the flat range */
    int64_t n_flat;   /* N: the flat range (with the layout's padding) */
    int64_t n_decay;  /* its first n_decay elements get weight decay */
    int64_t n_blocks; /* SQNORM blocks */
    sn_dtype low;     /* compiled: the dtype of the weights' 16-bit copies that AdamW writes
                         into FB_LOW (program.h: weight shadows), or SN_F32: none */
    sn_kernel k[OK_COUNT];
    void *handle[OK_COUNT];
    int64_t state_bytes;
    /* the reference interpreter: host arrays */
    sn_interp *it;
    float *host[FB_COUNT];
    float **frozen;   /* [n_params] host weights of a frozen parameter */
    /* compiled */
    sn_device *d;
    sn_program *prog;
    sn_exec *x;
    sn_exec_ref ref[FB_COUNT];
    bool has_sums;
    /* compiled with offload: host[FB_PARAMS] the masters, host[FB_M], host[FB_V], host[FB_SUMS]
     * the state, host[FB_SCAL] the step's scalars after CLIP, host[FB_GRADS] one chunk */
    bool offload;
    int64_t host_bytes; /* what those hold */
    char name[160];
};

void sn_backend_free(sn_backend *b) {
    if (!b) return;
    for (int i = 0; i < FB_COUNT; i++) free(b->host[i]);
    for (int i = 0; b->frozen && i < b->n_params; i++) free(b->frozen[i]);
    free(b->frozen);
    free(b->off);
    sn_interp_free(b->it);
    sn_exec_free(b->x);
    sn_program_free(b->prog);
    free(b);
}

static bool trainable(const sn_node *p) { return !p->a.frozen && p->grad; }

/* The kernels of the step over [0, n_flat). */
static void make_kernels(sn_backend *b) {
    static const sn_kernel_kind kinds[OK_COUNT] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    static const char *const names[OK_COUNT] = {"opt_grad_acc", "opt_sqnorm", "opt_clip", "opt_adamw"};
    b->n_blocks = (b->n_flat + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK;
    int64_t items[OK_COUNT] = {b->n_flat, b->n_blocks, 1, b->n_flat};
    for (int i = 0; i < OK_COUNT; i++) {
        b->k[i] = (sn_kernel){.kind = kinds[i], .id = i, .n_items = items[i], .flat_n = b->n_flat,
                              .flat_decay = b->n_decay, .flat_low = i == OK_ADAMW ? b->low : SN_F32};
        snprintf(b->k[i].name, sizeof b->k[i].name, "%s", names[i]);
    }
}

/* The trainable parameters' 16-bit copies (program.h: weight shadows), which AdamW writes: one
 * range at half the parameters' spacing (memplan.c), b->low their dtype; none: SN_F32. */
static sn_status shadow_layout(sn_backend *b, sn_err *e) {
    const sn_program *p = b->prog;
    int64_t base = -1;
    b->low = SN_F32;
    for (int k = 0; k < p->n_shadows; k++) {
        const sn_node *c = p->shadows[k]->args[0], *w = p->shadows[k]->args[1];
        int i = 0;
        while (i < b->n_params && b->params[i] != w) i++;
        if (i == b->n_params || b->off[i] < 0) continue; /* frozen: its kernel makes it */
        int64_t at = sn_exec_persistent_offset(b->x, c) - 2 * b->off[i];
        if (b->low == SN_F32) base = at, b->low = c->dtype;
        if (at != base || c->dtype != b->low || at % 64)
            return sn_fail(e, SN_ERR_INVALID, "backend: the 16-bit copies of the parameters are "
                           "not one range at half their layout (copy of %s): the memory plan must "
                           "place them so (passes/memplan.c)", w->name);
        b->ref[FB_LOW] = sn_exec_node_ref(c, -2 * b->off[i]);
    }
    return SN_OK;
}

/* The flat layout the planner gave the program (memplan.c): parameters then gradients, in the
 * same order and spacing; then the parameters' 16-bit copies. */
static sn_status compiled_layout(sn_backend *b, sn_err *e) {
    int64_t p0 = -1, g0 = -1, first_plain = -1;
    for (int i = 0; i < b->n_params; i++) {
        const sn_node *p = b->params[i];
        if (!trainable(p)) continue;
        int64_t po = sn_exec_persistent_offset(b->x, p), go = sn_exec_persistent_offset(b->x, p->grad);
        if (po < 0 || go < 0)
            return sn_fail(e, SN_ERR_INVALID, "backend: parameter %s or its gradient is not kept "
                           "by the compiled program", p->name);
        if (p0 < 0 || po < p0) p0 = po, g0 = go;
        if (p->rank < 2 && (first_plain < 0 || po < first_plain)) first_plain = po;
    }
    if (p0 < 0) return sn_fail(e, SN_ERR_INVALID, "backend: the graph has no trainable parameter");
    int64_t span = g0 - p0;
    for (int i = 0; i < b->n_params; i++) {
        const sn_node *p = b->params[i];
        if (!trainable(p)) continue;
        int64_t po = sn_exec_persistent_offset(b->x, p), go = sn_exec_persistent_offset(b->x, p->grad);
        if (go - po != span || po < p0 || po + 4 * sn_numel(p) > p0 + span || (po - p0) % 4)
            return sn_fail(e, SN_ERR_INVALID, "backend: the program's parameters and gradients are "
                           "not two flat ranges of one layout (parameter %s): the memory plan must "
                           "place them so (passes/memplan.c)", p->name);
        b->off[i] = (po - p0) / 4;
    }
    b->n_flat = span / 4;
    b->n_decay = first_plain < 0 ? b->n_flat : (first_plain - p0) / 4;
    const sn_node *first = NULL;
    for (int i = 0; i < b->n_params && !first; i++)
        if (trainable(b->params[i]) && b->off[i] == 0) first = b->params[i];
    SN_ASSERT(first);
    b->ref[FB_PARAMS] = sn_exec_node_ref(first, 0);
    b->ref[FB_GRADS] = sn_exec_node_ref(first->grad, 0);
    return shadow_layout(b, e);
}

/* Offload's host arrays (zeroed; the masters are set with the weights). */
static sn_status offload_new(sn_backend *b, sn_err *e) {
    static const int fb[] = {FB_PARAMS, FB_M, FB_V, FB_SCAL, FB_GRADS};
    for (int i = 0; i < 5; i++) {
        int64_t n = fb[i] == FB_SCAL ? SN_OPT_SCALARS : fb[i] == FB_GRADS ? SN_OFFLOAD_CHUNK : b->n_flat;
        if (fb[i] == FB_GRADS && n > b->n_flat) n = b->n_flat;
        if (!(b->host[fb[i]] = calloc((size_t)n, sizeof(float))))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the offloaded optimizer "
                           "state (%.1f MiB for the %s): free host memory or train without "
                           "--offload", 4.0 * (double)n / (1 << 20),
                           fb[i] == FB_PARAMS ? "master weights" : "moments");
        b->host_bytes += 4 * n;
    }
    return SN_OK;
}

static sn_status compiled_new(sn_backend *b, const sn_pipeline_opts *compile, sn_err *e) {
    sn_status s;
    sn_pipeline_opts none = {0};
    if ((s = sn_compile(b->g, compile ? compile : &none, &b->prog, NULL, e)) ||
        (s = sn_exec_new(b->d, b->prog, &b->x, e)) ||
        (s = compiled_layout(b, e)))
        return s;
    make_kernels(b);
    int id[3];
    int64_t bytes[3] = {4 * b->n_flat, 4 * b->n_flat, 4 * (SN_OPT_SCALARS + b->n_blocks)};
    for (int i = b->offload ? 2 : 0; i < 3; i++)
        if ((s = sn_exec_buffer_new(b->x, bytes[i], &id[i], e))) return s;
    if (b->offload) { /* the moments and the masters on the host; the scalars stay */
        if ((s = offload_new(b, e))) return s;
    } else {
        b->ref[FB_M] = sn_exec_buffer_ref(id[0], 0);
        b->ref[FB_V] = sn_exec_buffer_ref(id[1], 0);
        b->state_bytes = bytes[0] + bytes[1];
    }
    b->ref[FB_SCAL] = sn_exec_buffer_ref(id[2], 0);
    b->ref[FB_PART] = sn_exec_buffer_ref(id[2], 4 * SN_OPT_SCALARS);
    b->state_bytes += bytes[2];
    sn_kernel *ks[OK_COUNT];
    for (int i = 0; i < OK_COUNT; i++) ks[i] = &b->k[i];
    if ((s = sn_exec_compile(b->x, ks, OK_COUNT, b->handle, e))) return s;
    snprintf(b->name, sizeof b->name, "%s, %d kernels%s", sn_exec_device(b->x)->name,
             b->prog->n_kernels, b->offload ? ", optimizer state on the host" : "");
    return SN_OK;
}

/* Host arrays in the same layout, packed: decayed parameters, then the others. */
static sn_status interp_new(sn_backend *b, sn_err *e) {
    if (!(b->it = sn_interp_new(b->g, false)))
        return sn_fail_oom(e, sizeof(double) * (size_t)b->g->n_nodes, "the reference interpreter");
    b->frozen = sn_calloc((size_t)b->n_params, sizeof *b->frozen, "the trainer's frozen parameters", e);
    if (!b->frozen) return SN_ERR_OOM;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < b->n_params; i++) {
            const sn_node *p = b->params[i];
            if (!trainable(p) || (pass == 0) != (p->rank >= 2)) continue;
            b->off[i] = b->n_flat;
            b->n_flat += sn_numel(p);
            if (pass == 0) b->n_decay = b->n_flat;
        }
    if (!b->n_flat) return sn_fail(e, SN_ERR_INVALID, "backend: the graph has no trainable parameter");
    make_kernels(b);
    int64_t n[FB_COUNT] = {b->n_flat, b->n_flat, 0, b->n_flat, b->n_flat, SN_OPT_SCALARS, b->n_blocks};
    for (int i = 0; i < FB_COUNT; i++)
        if (n[i] && !(b->host[i] = calloc((size_t)n[i], sizeof(float))))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the parameters and "
                           "their optimizer state (%.1f MiB)", 4.0 * (double)n[i] / (1 << 20));
    for (int i = 0; i < b->n_params; i++)
        if (!trainable(b->params[i]) &&
            !(b->frozen[i] = calloc((size_t)sn_numel(b->params[i]), sizeof(float))))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the parameters");
    b->state_bytes = 4 * (2 * b->n_flat + SN_OPT_SCALARS + b->n_blocks);
    snprintf(b->name, sizeof b->name, "reference interpreter");
    return SN_OK;
}

sn_status sn_backend_new(sn_graph *g, sn_node *const *params, int n_params, sn_device *device,
                         const sn_pipeline_opts *compile, bool offload, sn_backend **out,
                         sn_err *e) {
    *out = NULL;
    sn_backend *b = sn_calloc(1, sizeof *b, "the trainer's backend", e);
    if (!b) return SN_ERR_OOM;
    *b = (sn_backend){.g = g, .params = params, .n_params = n_params, .d = device,
                      .offload = offload && device};
    b->off = sn_calloc((size_t)n_params + 1, sizeof *b->off, "the trainer's parameter offsets", e);
    if (!b->off) {
        free(b);
        return SN_ERR_OOM;
    }
    for (int i = 0; i < n_params; i++) b->off[i] = -1;
    sn_status s = device ? compiled_new(b, compile, e) : interp_new(b, e);
    if (s) {
        sn_backend_free(b);
        return s;
    }
    *out = b;
    return SN_OK;
}

const char *sn_backend_name(const sn_backend *b) { return b->name; }
const sn_program *sn_backend_program(const sn_backend *b) { return b->prog; }
sn_exec *sn_backend_exec(const sn_backend *b) { return b->x; }
int64_t sn_backend_state_bytes(const sn_backend *b) { return b->state_bytes; }
int64_t sn_backend_host_state_bytes(const sn_backend *b) { return b->host_bytes; }
bool sn_backend_offloaded(const sn_backend *b) { return b->offload; }

/* The host weights of parameter i (interpreter). */
static float *host_weights(sn_backend *b, int i) {
    return b->off[i] >= 0 ? b->host[FB_PARAMS] + b->off[i] : b->frozen[i];
}

sn_status sn_backend_run(sn_backend *b, const sn_node *idx, const sn_node *targets,
                         const int32_t *x, const int32_t *y, double *loss, sn_err *e) {
    sn_status s;
    if (b->x) {
        float l;
        if ((s = sn_exec_set(b->x, idx, x, e)) || (s = sn_exec_set(b->x, targets, y, e)) ||
            (s = sn_exec_run(b->x, e)) || (s = sn_exec_get(b->x, b->g->loss, &l, e)))
            return s;
        *loss = l;
        return SN_OK;
    }
    if ((s = sn_interp_set_i32(b->it, idx, x, e)) || (s = sn_interp_set_i32(b->it, targets, y, e)))
        return s;
    for (int i = 0; i < b->n_params; i++)
        if ((s = sn_interp_set(b->it, b->params[i], host_weights(b, i), e))) return s;
    if ((s = sn_interp_run(b->it, e))) return s;
    *loss = sn_interp_value(b->it, b->g->loss)[0];
    for (int i = 0; i < b->n_params; i++) { /* the gradients as f32, in the flat layout */
        if (b->off[i] < 0) continue;
        const double *gd = sn_interp_value(b->it, b->params[i]->grad);
        float *gf = b->host[FB_GRADS] + b->off[i];
        for (int64_t j = 0, n = sn_numel(b->params[i]); j < n; j++) gf[j] = (float)gd[j];
    }
    return SN_OK;
}

sn_status sn_backend_set_scalar(sn_backend *b, const sn_node *input, float v, sn_err *e) {
    return b->x ? sn_exec_set(b->x, input, &v, e) : sn_interp_set(b->it, input, &v, e);
}

/* The gradient sums exist from their first use on (one micro-batch a step needs none). */
static sn_status need_sums(sn_backend *b, sn_err *e) {
    if (b->x && !b->offload ? b->has_sums : b->host[FB_SUMS] != NULL) return SN_OK;
    if (b->offload) {
        if (!(b->host[FB_SUMS] = calloc((size_t)b->n_flat, sizeof(float))))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the offloaded gradient "
                           "sums (%.1f MiB)", 4.0 * (double)b->n_flat / (1 << 20));
        b->host_bytes += 4 * b->n_flat;
        return SN_OK;
    } else if (b->x) {
        int id;
        sn_status s = sn_exec_buffer_new(b->x, 4 * b->n_flat, &id, e);
        if (s) return s;
        b->ref[FB_SUMS] = sn_exec_buffer_ref(id, 0);
        b->has_sums = true;
    } else if (!(b->host[FB_SUMS] = calloc((size_t)b->n_flat, sizeof(float)))) {
        return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the gradient sums");
    }
    b->state_bytes += 4 * b->n_flat;
    return SN_OK;
}

/* Flat buffer f of the optimizer, element `at`, `n` elements, to or from the host. */
static sn_status move(sn_backend *b, int f, int64_t at, int64_t n, float *host, bool up, sn_err *e) {
    if (b->x && !(b->offload && (f == FB_M || f == FB_V || f == FB_SUMS))) {
        sn_exec_ref r = b->ref[f];
        r.offset += 4 * at;
        return up ? sn_exec_upload(b->x, r, host, 4 * n, e) : sn_exec_download(b->x, host, r, 4 * n, e);
    }
    if (up) memcpy(b->host[f] + at, host, 4 * (size_t)n);
    else memcpy(host, b->host[f] + at, 4 * (size_t)n);
    return SN_OK;
}

static int buffer_of(sn_param_which which, bool sums) {
    switch (which) {
    case SN_PARAM_WEIGHTS: return FB_PARAMS;
    case SN_PARAM_M: return FB_M;
    case SN_PARAM_V: return FB_V;
    case SN_PARAM_GRAD: return sums ? FB_SUMS : FB_GRADS;
    case SN_PARAM_WHICH_COUNT: break;
    }
    SN_ASSERT(0);
    return -1;
}

sn_status sn_backend_get(sn_backend *b, int i, sn_param_which which, bool sums, float *host, sn_err *e) {
    SN_ASSERT(i >= 0 && i < b->n_params);
    int64_t n = sn_numel(b->params[i]);
    if (which == SN_PARAM_WEIGHTS && (b->x || b->off[i] < 0)) {
        if (b->x) return sn_exec_get(b->x, b->params[i], host, e);
        memcpy(host, b->frozen[i], 4 * (size_t)n);
        return SN_OK;
    }
    if (b->off[i] < 0) { /* frozen: no state */
        memset(host, 0, 4 * (size_t)n);
        return SN_OK;
    }
    if (which == SN_PARAM_GRAD && sums) {
        sn_status s = need_sums(b, e);
        if (s) return s;
    }
    return move(b, buffer_of(which, sums), b->off[i], n, host, false, e);
}

sn_status sn_backend_set(sn_backend *b, int i, sn_param_which which, const float *host, sn_err *e) {
    SN_ASSERT(i >= 0 && i < b->n_params && which != SN_PARAM_GRAD);
    int64_t n = sn_numel(b->params[i]);
    if (which == SN_PARAM_WEIGHTS && b->offload && b->off[i] >= 0) /* the master too */
        memcpy(b->host[FB_PARAMS] + b->off[i], host, 4 * (size_t)n);
    if (which == SN_PARAM_WEIGHTS && (b->x || b->off[i] < 0)) {
        if (b->x) return sn_exec_set(b->x, b->params[i], host, e);
        memcpy(b->frozen[i], host, 4 * (size_t)n);
        return SN_OK;
    }
    if (b->off[i] < 0) return SN_OK; /* frozen: no moments */
    return move(b, buffer_of(which, false), b->off[i], n, (float *)host, true, e);
}

/* Launches optimizer kernel `which` on the flat buffers fb[]. */
static sn_status launch(sn_backend *b, int which, const int *fb, sn_err *e) {
    const sn_kernel *k = &b->k[which];
    int n = sn_kernel_n_bufs(k);
    if (b->x) {
        sn_exec_ref r[SN_KER_MAX_ARGS];
        for (int i = 0; i < n; i++) r[i] = b->ref[fb[i]];
        return sn_exec_launch(b->x, k, b->handle[which], r, e);
    }
    void *p[SN_KER_MAX_ARGS];
    for (int i = 0; i < n; i++) p[i] = b->host[fb[i]];
    sn_interp_optim(k, p, 0, k->n_items);
    return SN_OK;
}

/* Offload: the device's gradients [lo, lo + n) to the host, into the sums (add: added). */
static sn_status offload_grads(sn_backend *b, int64_t lo, int64_t n, bool add, float *dst, sn_err *e) {
    sn_exec_ref r = b->ref[FB_GRADS];
    r.offset += 4 * lo;
    if (!add) return sn_exec_download(b->x, dst, r, 4 * n, e);
    sn_status s = sn_exec_download(b->x, b->host[FB_GRADS], r, 4 * n, e);
    if (!s) sn_offload_acc(dst, b->host[FB_GRADS], n);
    return s;
}

sn_status sn_backend_sum_grads(sn_backend *b, bool add, sn_err *e) {
    sn_status s = need_sums(b, e);
    if (s) return s;
    for (int64_t lo = 0; b->offload && lo < b->n_flat && !s; lo += SN_OFFLOAD_CHUNK) {
        int64_t n = b->n_flat - lo < SN_OFFLOAD_CHUNK ? b->n_flat - lo : SN_OFFLOAD_CHUNK;
        s = offload_grads(b, lo, n, add, b->host[FB_SUMS] + lo, e);
    }
    if (b->offload) return s;
    if (add) return launch(b, OK_ACC, (const int[]){FB_SUMS, FB_GRADS}, e);
    if (b->x) return sn_exec_copy(b->x, b->ref[FB_SUMS], b->ref[FB_GRADS], 4 * b->n_flat, e);
    memcpy(b->host[FB_SUMS], b->host[FB_GRADS], 4 * (size_t)b->n_flat);
    return SN_OK;
}

sn_status sn_backend_norm(sn_backend *b, bool sums, const float scal[SN_OPT_SCALARS], double *norm,
                          sn_err *e) {
    int g = sums ? FB_SUMS : FB_GRADS;
    float got;
    sn_status s = move(b, FB_SCAL, 0, SN_OPT_SCALARS, (float *)scal, true, e);
    if (!s && b->offload && sums) { /* the sums go up into the gradients' (spent) buffer, so that
                                       the norm is the device's own reduction, bit for bit */
        s = sn_exec_upload(b->x, b->ref[FB_GRADS], b->host[FB_SUMS], 4 * b->n_flat, e);
        g = FB_GRADS;
    }
    if (!s) s = launch(b, OK_SQNORM, (const int[]){FB_PART, g, FB_SCAL}, e);
    if (!s) s = launch(b, OK_CLIP, (const int[]){FB_SCAL, FB_PART}, e);
    if (b->offload) { /* AdamW on the host needs the clip scale: all the scalars come down */
        if (!s) s = move(b, FB_SCAL, 0, SN_OPT_SCALARS, b->host[FB_SCAL], false, e);
        if (!s) *norm = b->host[FB_SCAL][SN_OPT_NORM];
        return s;
    }
    if (!s) s = move(b, FB_SCAL, SN_OPT_NORM, 1, &got, false, e);
    if (!s) *norm = got;
    return s;
}

/* Offload: AdamW by the CPU on the masters, chunk by chunk: the gradients of a chunk come down
 * (unless the sums, already on the host, are used), the updated weights go up. */
static sn_status offload_adamw(sn_backend *b, bool sums, sn_err *e) {
    sn_status s = SN_OK;
    float **h = b->host;
    for (int64_t lo = 0; lo < b->n_flat && !s; lo += SN_OFFLOAD_CHUNK) {
        int64_t n = b->n_flat - lo < SN_OFFLOAD_CHUNK ? b->n_flat - lo : SN_OFFLOAD_CHUNK;
        const float *g = sums ? h[FB_SUMS] + lo : h[FB_GRADS];
        if (!sums) s = offload_grads(b, lo, n, false, h[FB_GRADS], e);
        if (s) break;
        sn_offload_adamw(h[FB_SCAL], h[FB_PARAMS] + lo, h[FB_M] + lo, h[FB_V] + lo, g, n,
                         b->n_decay - lo);
        sn_exec_ref r = b->ref[FB_PARAMS];
        r.offset += 4 * lo;
        s = sn_exec_upload(b->x, r, h[FB_PARAMS] + lo, 4 * n, e);
    }
    return s;
}

sn_status sn_backend_adamw(sn_backend *b, bool sums, sn_err *e) {
    if (b->offload) return offload_adamw(b, sums, e);
    int g = sums ? FB_SUMS : FB_GRADS;
    return launch(b, OK_ADAMW, (const int[]){FB_PARAMS, FB_M, FB_V, g, FB_SCAL, FB_LOW}, e);
}
