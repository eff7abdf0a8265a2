/* runner.c: how the trainer runs its graph and its optimizer step on a device (runner.h); the
 * reference interpreter is one (sn_interp_device_new).
 * Convention: the optimizer's buffers are named by FB_*, each an executor ref (the program's
 * parameters, gradients and weight shadows where its parameter layout says, or an extra device
 * buffer); its kernels are launched through the executor. Where a parameter lies, whether it
 * trains and which part of the range decays are read from the layout, never worked out here.
 * With offload, the moments, the gradient sums and a copy of the weights (the masters) are
 * host arrays instead, and AdamW runs on the CPU (offload.h) in chunks: gradients down,
 * weights up, chunk k+1's gradients coming down while the CPU updates chunk k and chunk k-1's
 * weights go up (sn_exec_copy_async; in turn where the device has no asynchronous copies);
 * with the delayed update the run itself brings the gradients down while the backward runs
 * (sn_exec_run_copies). */
#include "runner.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "passes/pipeline.h"
#include "support/clock.h"
#include "support/cores.h"
#include "offload.h"

/* the flat buffers of the optimizer step */
enum { FB_PARAMS, FB_GRADS, FB_SUMS, FB_M, FB_V, FB_SCAL, FB_PART, FB_LOW, FB_JOB, FB_COUNT };
/* its kernels */
enum { OK_ACC, OK_SQNORM, OK_CLIP, OK_ADAMW, OK_COUNT };

enum { F32_BYTES = sizeof(float) }; /* the flat ranges' elements */

struct sn_runner {
    sn_graph *g;
    const sn_param_layout *lay; /* the program's (program.h): where everything below lies */
    int64_t n_blocks; /* SQNORM blocks */
    sn_kernel k[OK_COUNT];
    void *handle[OK_COUNT];
    int64_t state_bytes;
    sn_device *d;
    sn_device *own;   /* the reference interpreter, made here when no device was given */
    sn_program *prog;
    sn_exec *x;
    /* the evaluation program, made at the first sn_runner_eval: g's loss alone (passes.h
     * sn_pass_eval_graph), compiled with the same options, its parameters and arena x's */
    sn_pipeline_opts compile;
    sn_graph *eg;
    sn_program *eprog;
    sn_exec *ex;
    struct { const sn_node *n; float v; } scal[SN_RUNNER_SCALARS]; /* set by sn_runner_set_scalar */
    int n_scal;
    sn_exec_ref ref[FB_COUNT];
    bool has_sums;
    /* offload: host[FB_PARAMS] the masters, host[FB_M], host[FB_V], host[FB_SUMS] the state,
     * host[FB_SCAL] the step's scalars after CLIP, host[FB_GRADS] the staging chunks (RING),
     * or with the delay the whole range the run's gradients come down into;
     * those the device copies from or to asynchronously are its page-locked memory (pinned) */
    bool offload;
    float *host[FB_COUNT];
    int64_t host_bytes; /* what those hold */
    sn_pool *pool;      /* the host AdamW's threads (one per CPU) */
    int64_t chunk;      /* elements a copy moves (sn_offload_chunk) */
    /* the delayed parameter update (sn_runner_delay): host[FB_JOB] the gradients of the update
     * in flight (the job's), upload_due: the masters hold an update the device lacks; down[]
     * the run's copies of the gradients, chunk by chunk, into down_to (host[FB_GRADS] when
     * they were set) */
    bool delay, upload_due;
    sn_offload_job job;
    sn_exec_run_copy *down;
    int n_down;
    float *down_to;
    sn_exec_run_copy *up; /* the update in flight's weights going up during a step's last run,
                             chunk by chunk after the last kernel that reads them, in that order
                             (up_new, with the update's first start where it is threaded) */
    int n_up;
    int *up_part;             /* [n_up]: the part of the update's order upload i waits for */
    sn_offload_range *parts;  /* the update's order: the uploads' flat ranges, joined */
    int n_parts;
    /* what goes up in f32 and what as its weight shadows' bits, host[FB_LOW] (offload.h
     * sn_offload_segments; NULL: all in f32) */
    sn_offload_seg *seg;
    int n_seg;
    char name[160];
    double kernels_s, exec_s, optimizer_s; /* sn_runner_startup's */
    sn_offload_times times;                 /* sn_runner_offload_times */
};

static sn_status drain(sn_runner *b, sn_err *e);
static void up_free(sn_runner *b);

/* The host arrays the copies read or write: page-locked memory. */
static bool pinned(int f) {
    return f == FB_PARAMS || f == FB_GRADS || f == FB_SUMS || f == FB_JOB || f == FB_LOW;
}

void sn_runner_free(sn_runner *b) {
    if (!b) return;
    sn_offload_job_free(&b->job); /* it reads and writes the host arrays */
    if (b->job.pool != b->pool) sn_pool_free(b->job.pool); /* its own where threaded */
    free(b->seg);
    free(b->down);
    free(b->up);
    free(b->up_part);
    free(b->parts);
    for (int i = 0; i < FB_COUNT; i++) {
        if (pinned(i) && b->host[i]) sn_exec_host_free(b->x, b->host[i]);
        else free(b->host[i]);
    }
    sn_pool_free(b->pool);
    sn_exec_free(b->ex); /* before x, whose memory it reads */
    sn_program_free(b->eprog);
    sn_graph_free(b->eg);
    sn_exec_free(b->x);
    sn_program_free(b->prog);
    sn_device_free(b->own);
    free(b);
}

/* The kernels of the step over the layout's flat range. */
static void make_kernels(sn_runner *b) {
    static const sn_kernel_kind kinds[OK_COUNT] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    static const char *const names[OK_COUNT] = {"opt_grad_acc", "opt_sqnorm", "opt_clip", "opt_adamw"};
    const sn_param_layout *l = b->lay;
    for (int i = 0; i < OK_COUNT; i++) {
        b->k[i] = sn_optim_kernel(kinds[i], l->flat_n, l->flat_decay, l->low, names[i]);
        b->k[i].id = i;
    }
    b->n_blocks = b->k[OK_SQNORM].n_items;
}

/* The flat ranges of the program's parameter layout (memplan.c wrote it, sn_param_layout_check
 * checked it): the parameters, their gradients and their 16-bit copies. */
static sn_status flat_layout(sn_runner *b, sn_err *e) {
    const sn_param_layout *l = b->lay = &b->prog->layout;
    if (!l->flat_n) return sn_fail(e, SN_ERR_INVALID, "trainer: the graph has no trainable parameter");
    b->ref[FB_PARAMS] = sn_exec_block_ref(l->params);
    b->ref[FB_GRADS] = sn_exec_block_ref(l->grads);
    if (l->low != SN_F32) b->ref[FB_LOW] = sn_exec_block_ref(l->shadows);
    return SN_OK;
}

/* Offload's host arrays (zeroed; the masters are set with the weights) and threads. */
static sn_status offload_new(sn_runner *b, sn_err *e) {
    b->chunk = sn_offload_chunk(b->lay->flat_n);
    if (!(b->pool = sn_pool_new(0)))
        return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the offloaded optimizer's "
                       "threads");
    static const int fb[] = {FB_PARAMS, FB_M, FB_V, FB_SCAL, FB_GRADS};
    for (int i = 0; i < 5; i++) {
        int64_t all = b->lay->flat_n;
        int64_t n = fb[i] == FB_SCAL    ? SN_OPT_SCALARS
                    : fb[i] == FB_GRADS ? sn_offload_staging(all) : all;
        if (!(b->host[fb[i]] = pinned(fb[i]) ? sn_exec_host_alloc(b->x, F32_BYTES * n, e)
                                             : calloc((size_t)n, sizeof(float))))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the offloaded optimizer "
                           "state (%.1f MiB for the %s): free host memory or train without "
                           "--offload", (double)F32_BYTES * (double)n / (1 << 20),
                           fb[i] == FB_PARAMS ? "master weights" : "moments");
        b->host_bytes += F32_BYTES * n;
    }
    return SN_OK;
}

/* Offload: the segments that go up as weight shadows, and the host's bits of those. */
static sn_status low_new(sn_runner *b, sn_err *e) {
    sn_status s = sn_offload_segments(b->prog, NULL, &b->seg, &b->n_seg, e);
    if (s || !b->seg) return s;
    int64_t bytes = 2 * b->lay->flat_n + 4;
    if (!(b->host[FB_LOW] = sn_exec_host_alloc(b->x, bytes, e)))
        return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the offloaded weight "
                       "shadows (%.1f MiB)", (double)bytes / (1 << 20));
    b->host_bytes += bytes;
    return SN_OK;
}

static sn_status runner_init(sn_runner *b, const sn_pipeline_opts *compile, sn_err *e) {
    sn_status s;
    sn_pipeline_opts o = compile ? *compile : (sn_pipeline_opts){0};
    if (!o.target) o.target = &b->d->target; /* the device's, unless the caller named one */
    b->compile = o;
    b->compile.dump_after = NULL; /* the dump is the training program's */
    double t0 = sn_clock_s();
    if ((s = sn_pipeline_kernels(b->g, &o, &b->prog, NULL, e))) return s;
    double t1 = sn_clock_s();
    b->kernels_s = t1 - t0;
    s = sn_exec_new(b->d, b->prog, &b->x, e);
    t0 = sn_clock_s();
    b->exec_s = t0 - t1;
    if (s || (s = flat_layout(b, e))) return s;
    make_kernels(b);
    int id[3];
    int64_t n = b->lay->flat_n;
    int64_t bytes[3] = {F32_BYTES * n, F32_BYTES * n, F32_BYTES * (SN_OPT_SCALARS + b->n_blocks)};
    for (int i = b->offload ? 2 : 0; i < 3; i++)
        if ((s = sn_exec_buffer_new(b->x, bytes[i], &id[i], e))) return s;
    if (b->offload) { /* the moments and the masters on the host; the scalars stay */
        if ((s = offload_new(b, e)) || (s = low_new(b, e))) return s;
    } else {
        b->ref[FB_M] = sn_exec_buffer_ref(id[0], 0);
        b->ref[FB_V] = sn_exec_buffer_ref(id[1], 0);
        b->state_bytes = bytes[0] + bytes[1];
    }
    b->ref[FB_SCAL] = sn_exec_buffer_ref(id[2], 0);
    b->ref[FB_PART] = sn_exec_buffer_ref(id[2], F32_BYTES * SN_OPT_SCALARS);
    b->state_bytes += bytes[2];
    sn_kernel *ks[OK_COUNT];
    for (int i = 0; i < OK_COUNT; i++) ks[i] = &b->k[i];
    if ((s = sn_exec_compile(b->x, ks, OK_COUNT, b->handle, e))) return s;
    b->optimizer_s = sn_clock_s() - t0;
    if (b->d->run_graph) /* it runs the graph, not the program's kernels */
        snprintf(b->name, sizeof b->name, "%s", b->d->name);
    else
        snprintf(b->name, sizeof b->name, "%s, %d kernels%s", b->d->name, b->prog->n_kernels,
                 b->offload ? ", optimizer state on the host" : "");
    return SN_OK;
}

sn_status sn_runner_new(sn_graph *g, sn_device *device, const sn_pipeline_opts *compile,
                        bool offload, sn_runner **out, sn_err *e) {
    *out = NULL;
    sn_runner *b = sn_calloc(1, sizeof *b, "the trainer's runner", e);
    if (!b) return SN_ERR_OOM;
    *b = (sn_runner){.g = g, .d = device, .offload = offload && device};
    sn_status s = device ? SN_OK : sn_interp_device_new(&b->own, e);
    if (!device) b->d = b->own;
    if (!s) s = runner_init(b, compile, e);
    if (s) {
        sn_runner_free(b);
        return s;
    }
    *out = b;
    return SN_OK;
}

const char *sn_runner_name(const sn_runner *b) { return b->name; }
const sn_program *sn_runner_program(const sn_runner *b) { return b->prog; }
const sn_param_layout *sn_runner_layout(const sn_runner *b) { return b->lay; }
sn_exec *sn_runner_exec(const sn_runner *b) { return b->x; }
int64_t sn_runner_state_bytes(const sn_runner *b) { return b->state_bytes; }
int64_t sn_runner_host_state_bytes(const sn_runner *b) { return b->host_bytes; }
void sn_runner_offload_times(const sn_runner *b, sn_offload_times *s) { *s = b->times; }

void sn_runner_startup(const sn_runner *b, double *kernels_s, double *exec_s, double *optimizer_s) {
    *kernels_s = b->kernels_s, *exec_s = b->exec_s, *optimizer_s = b->optimizer_s;
}

static sn_status run_copies(sn_runner *b, sn_err *e);
static sn_status run_uploads(sn_runner *b, bool last, bool *set, sn_err *e);

sn_status sn_runner_run(sn_runner *b, bool last, const sn_node *idx, const sn_node *targets,
                        const int32_t *x, const int32_t *y, double *loss, sn_err *e) {
    sn_status s;
    float l;
    bool up = false;
    if ((s = sn_exec_set(b->x, idx, x, e)) || (s = sn_exec_set(b->x, targets, y, e)) ||
        (s = run_copies(b, e)) || (s = run_uploads(b, last, &up, e)) ||
        (s = sn_exec_run(b->x, e)) || (s = sn_exec_get(b->x, b->g->loss, &l, e)))
        return s;
    if (up) b->upload_due = false, b->times.ups_in_run++; /* the device has the newest weights */
    *loss = l;
    return SN_OK;
}

/* The evaluation graph's INPUT standing for the training graph's input n (its role, else its
 * name), or NULL: the loss does not read it. */
static const sn_node *eval_input(const sn_runner *b, const sn_node *n) {
    if (n->role != SN_ROLE_NONE) return sn_graph_input(b->eg, n->role);
    for (int i = 0; i < b->eg->n_nodes; i++) {
        const sn_node *m = b->eg->nodes[i];
        if (m->op == SN_OP_INPUT && m->name && n->name && !strcmp(m->name, n->name)) return m;
    }
    return NULL;
}

static sn_status eval_set(sn_runner *b, const sn_node *n, const void *data, sn_err *e) {
    const sn_node *m = eval_input(b, n);
    return m ? sn_exec_set(b->ex, m, data, e) : SN_OK;
}

/* Offload with weights going up as shadows: those the evaluation program reads in f32 go up in
 * f32 from now on. Every segment that went up as shadows goes up in f32 now (the device's f32
 * there may be older; the shadows cast from it are the bits that went up). */
static sn_status eval_segments(sn_runner *b, sn_err *e) {
    sn_offload_seg *seg;
    int n;
    sn_status s = drain(b, e);
    if (!s) s = sn_offload_segments(b->prog, b->eprog, &seg, &n, e);
    for (int i = 0; !s && i < b->n_seg; i++) {
        if (!b->seg[i].low) continue;
        sn_exec_ref r = b->ref[FB_PARAMS];
        r.offset += F32_BYTES * b->seg[i].lo;
        s = sn_exec_upload(b->x, r, b->host[FB_PARAMS] + b->seg[i].lo, F32_BYTES * b->seg[i].n, e);
    }
    if (s) return s;
    free(b->seg);
    b->seg = seg, b->n_seg = n; /* NULL: none left */
    up_free(b); /* the uploads cut by the old segments (the update was drained): made again */
    return SN_OK;
}

/* The evaluation program and its executor, sharing x's parameters (sn_exec_new_sharing), with
 * the scalars set so far. */
static sn_status eval_new(sn_runner *b, sn_err *e) {
    sn_status s = sn_pass_eval_graph(b->g, &b->eg, e);
    if (!s) s = sn_pipeline_kernels(b->eg, &b->compile, &b->eprog, NULL, e);
    if (!s) s = sn_exec_new_sharing(b->d, b->eprog, b->x, &b->ex, e);
    if (!s && b->seg) s = eval_segments(b, e);
    for (int i = 0; !s && i < b->n_scal; i++) s = eval_set(b, b->scal[i].n, &b->scal[i].v, e);
    return s;
}

sn_status sn_runner_eval(sn_runner *b, const sn_node *idx, const sn_node *targets,
                         const int32_t *x, const int32_t *y, double *loss, sn_err *e) {
    sn_status s = drain(b, e);
    if (!s && !b->ex) s = eval_new(b, e);
    float l;
    if (s || (s = eval_set(b, idx, x, e)) || (s = eval_set(b, targets, y, e)) ||
        (s = sn_exec_run(b->ex, e)) || (s = sn_exec_get(b->ex, b->eg->loss, &l, e)))
        return s;
    *loss = l;
    return SN_OK;
}

const sn_program *sn_runner_eval_program(sn_runner *b, sn_err *e) {
    return b->ex || !eval_new(b, e) ? b->eprog : NULL;
}

sn_exec *sn_runner_eval_exec(const sn_runner *b) { return b->ex; }

sn_status sn_runner_set_scalar(sn_runner *b, const sn_node *input, float v, sn_err *e) {
    int i = 0;
    while (i < b->n_scal && b->scal[i].n != input) i++;
    SN_ASSERT(i < SN_RUNNER_SCALARS);
    b->scal[i].n = input;
    b->scal[i].v = v;
    if (i == b->n_scal) b->n_scal++;
    sn_status s = sn_exec_set(b->x, input, &v, e);
    return s || !b->ex ? s : eval_set(b, input, &v, e);
}

/* The gradient sums exist from their first use on (one micro-batch a step needs none). */
static sn_status need_sums(sn_runner *b, sn_err *e) {
    if (!b->offload ? b->has_sums : b->host[FB_SUMS] != NULL) return SN_OK;
    if (b->offload) {
        if (!(b->host[FB_SUMS] = sn_exec_host_alloc(b->x, F32_BYTES * b->lay->flat_n, e)))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the offloaded gradient "
                           "sums (%.1f MiB)", (double)F32_BYTES * (double)b->lay->flat_n / (1 << 20));
        b->host_bytes += F32_BYTES * b->lay->flat_n;
        return SN_OK;
    }
    int id;
    sn_status s = sn_exec_buffer_new(b->x, F32_BYTES * b->lay->flat_n, &id, e);
    if (s) return s;
    b->ref[FB_SUMS] = sn_exec_buffer_ref(id, 0);
    b->has_sums = true;
    b->state_bytes += F32_BYTES * b->lay->flat_n;
    return SN_OK;
}

/* Flat buffer f of the optimizer, element `at`, `n` elements, to or from the host. */
static sn_status move(sn_runner *b, int f, int64_t at, int64_t n, float *host, bool up, sn_err *e) {
    if (!(b->offload && (f == FB_M || f == FB_V || f == FB_SUMS))) {
        sn_exec_ref r = b->ref[f];
        r.offset += F32_BYTES * at;
        int64_t bytes = F32_BYTES * n;
        return up ? sn_exec_upload(b->x, r, host, bytes, e) : sn_exec_download(b->x, host, r, bytes, e);
    }
    if (up) memcpy(b->host[f] + at, host, F32_BYTES * (size_t)n);
    else memcpy(host, b->host[f] + at, F32_BYTES * (size_t)n);
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

sn_status sn_runner_get(sn_runner *b, int i, sn_param_which which, bool sums, float *host, sn_err *e) {
    SN_ASSERT(i >= 0 && i < b->lay->n);
    const sn_param_slot *p = &b->lay->slots[i];
    sn_status s = drain(b, e);
    if (s) return s;
    if (which == SN_PARAM_WEIGHTS && b->offload && !p->frozen) { /* the masters: the device's
                                                                   f32 may be older (low) */
        memcpy(host, b->host[FB_PARAMS] + p->flat, F32_BYTES * (size_t)p->numel);
        return SN_OK;
    }
    if (which == SN_PARAM_WEIGHTS) return sn_exec_get(b->x, p->node, host, e);
    if (p->frozen) { /* no state */
        memset(host, 0, F32_BYTES * (size_t)p->numel);
        return SN_OK;
    }
    if (which == SN_PARAM_GRAD && sums && (s = need_sums(b, e))) return s;
    return move(b, buffer_of(which, sums), p->flat, p->numel, host, false, e);
}

sn_status sn_runner_set(sn_runner *b, int i, sn_param_which which, const float *host, sn_err *e) {
    SN_ASSERT(i >= 0 && i < b->lay->n && which != SN_PARAM_GRAD);
    const sn_param_slot *p = &b->lay->slots[i];
    sn_status s = drain(b, e);
    if (s) return s;
    if (which == SN_PARAM_WEIGHTS && b->offload && !p->frozen) /* the master too */
        memcpy(b->host[FB_PARAMS] + p->flat, host, F32_BYTES * (size_t)p->numel);
    if (which == SN_PARAM_WEIGHTS) return sn_exec_set(b->x, p->node, host, e);
    if (p->frozen) return SN_OK; /* no moments */
    return move(b, buffer_of(which, false), p->flat, p->numel, (float *)host, true, e);
}

/* Launches optimizer kernel `which` on the flat buffers fb[]. */
static sn_status launch(sn_runner *b, int which, const int *fb, sn_err *e) {
    const sn_kernel *k = &b->k[which];
    int n = sn_kernel_n_bufs(k);
    sn_exec_ref r[SN_KER_MAX_BUFS];
    for (int i = 0; i < n; i++) r[i] = b->ref[fb[i]];
    return sn_exec_launch(b->x, k, b->handle[which], r, e);
}

/* Offload's copies: the slots (device.h) of the staging chunks' downloads and of the uploads. */
enum { SLOT_UP = SN_OFFLOAD_RING };
static_assert((int)SLOT_UP < (int)SN_EXEC_COPY_SLOTS,
              "a copy slot for each staging chunk and one for the uploads");

/* What the host does with chunk [lo, lo + n) once its gradients g (NULL: none came down) are on
 * the host. */
typedef void (*chunk_fn)(sn_runner *b, int64_t lo, int64_t n, const float *g);

static int64_t chunk_len(const sn_runner *b, int64_t k) {
    int64_t rest = b->lay->flat_n - k * b->chunk;
    return rest < b->chunk ? rest : b->chunk;
}

static sn_status grads_down(sn_runner *b, int64_t k, sn_err *e) {
    sn_exec_ref r = b->ref[FB_GRADS];
    r.offset += F32_BYTES * k * b->chunk;
    float *stage = b->host[FB_GRADS] + (k % SN_OFFLOAD_RING) * b->chunk;
    return sn_exec_copy_async(b->x, false, r, stage, F32_BYTES * chunk_len(b, k),
                              (int)(k % SN_OFFLOAD_RING), e);
}

/* The masters [lo, lo + n) up (copy slot SLOT_UP): in f32, or where the segments say so their
 * weight shadows' bits (the host AdamW wrote them with the masters). */
static sn_status weights_up(sn_runner *b, int64_t lo, int64_t n, sn_err *e) {
    sn_status s = SN_OK;
    sn_offload_seg all = {lo, n, false};
    const sn_offload_seg *seg = b->seg ? b->seg : &all;
    for (int i = 0; i < (b->seg ? b->n_seg : 1) && !s; i++) {
        int64_t a = seg[i].lo > lo ? seg[i].lo : lo, z = seg[i].lo + seg[i].n;
        if (z > lo + n) z = lo + n;
        if (a >= z) continue;
        int w = seg[i].low ? 2 : F32_BYTES;
        sn_exec_ref r = b->ref[seg[i].low ? FB_LOW : FB_PARAMS];
        r.offset += w * a;
        s = sn_exec_copy_async(b->x, true, r, (char *)b->host[seg[i].low ? FB_LOW : FB_PARAMS] + w * a,
                               w * (z - a), SLOT_UP, e);
    }
    return s;
}

/* The flat range chunk by chunk: chunk k's gradients (down) come into staging chunk k % RING,
 * fn works on it, its masters go up (up) into the device's weights, and chunk k + RING's
 * gradients come into the staging chunk fn has finished with; so while the host works on one
 * chunk the next comes down and the one before goes up. Returns when every copy is done. */
static sn_status pipeline(sn_runner *b, bool down, bool up, chunk_fn fn, sn_err *e) {
    int64_t chunks = (b->lay->flat_n + b->chunk - 1) / b->chunk;
    sn_status s = SN_OK;
    for (int64_t k = 0; down && k < SN_OFFLOAD_RING && k < chunks && !s; k++)
        s = grads_down(b, k, e);
    for (int64_t k = 0; k < chunks && !s; k++) {
        int64_t lo = k * b->chunk, n = chunk_len(b, k);
        if (down && (s = sn_exec_copy_wait(b->x, (int)(k % SN_OFFLOAD_RING), e))) break;
        fn(b, lo, n, down ? b->host[FB_GRADS] + (k % SN_OFFLOAD_RING) * b->chunk : NULL);
        if (up) s = weights_up(b, lo, n, e);
        if (!s && down && k + SN_OFFLOAD_RING < chunks) s = grads_down(b, k + SN_OFFLOAD_RING, e);
    }
    /* the last upload done is every upload done: the masters may change again, the device's
       next work reads the weights (after a failure, what is in flight is let finish) */
    sn_status w = up ? sn_exec_copy_wait(b->x, SLOT_UP, e) : SN_OK;
    for (int i = 0; down && i < SN_OFFLOAD_RING; i++) {
        sn_err ignored;
        sn_exec_copy_wait(b->x, i, s || w ? &ignored : e);
    }
    return s ? s : w;
}

static void acc_chunk(sn_runner *b, int64_t lo, int64_t n, const float *g) {
    sn_offload_acc(b->pool, b->host[FB_SUMS] + lo, g, n);
}

static void set_chunk(sn_runner *b, int64_t lo, int64_t n, const float *g) {
    memcpy(b->host[FB_SUMS] + lo, g, F32_BYTES * (size_t)n);
}

sn_status sn_runner_sum_grads(sn_runner *b, bool add, sn_err *e) {
    sn_status s = need_sums(b, e);
    if (!s && b->delay) s = sn_exec_run_copies_wait(b->x, e); /* the run's gradients on the host */
    if (s) return s;
    float **h = b->host;
    if (b->delay && add) sn_offload_acc(b->pool, h[FB_SUMS], h[FB_GRADS], b->lay->flat_n);
    if (b->delay && !add) { /* the run's gradients are the sums: the buffers trade places */
        float *t = h[FB_SUMS];
        h[FB_SUMS] = h[FB_GRADS], h[FB_GRADS] = t;
    }
    if (b->delay) return SN_OK; /* the run brought its gradients down (run_copies) */
    if (b->offload) return pipeline(b, true, false, add ? acc_chunk : set_chunk, e);
    if (add) return launch(b, OK_ACC, (const int[]){FB_SUMS, FB_GRADS}, e);
    return sn_exec_copy(b->x, b->ref[FB_SUMS], b->ref[FB_GRADS], F32_BYTES * b->lay->flat_n, e);
}

sn_status sn_runner_norm(sn_runner *b, bool sums, const float scal[SN_OPT_SCALARS], double *norm,
                         sn_err *e) {
    int g = sums ? FB_SUMS : FB_GRADS;
    float got;
    sn_status s = move(b, FB_SCAL, 0, SN_OPT_SCALARS, (float *)scal, true, e);
    if (!s && b->offload && sums) { /* the sums go up into the gradients' (spent) buffer, so that
                                       the norm is the device's own reduction, bit for bit */
        s = sn_exec_upload(b->x, b->ref[FB_GRADS], b->host[FB_SUMS], F32_BYTES * b->lay->flat_n, e);
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

/* Offload: AdamW by the CPU on a chunk of the masters, with its gradients (NULL: the sums). */
static void adamw_chunk(sn_runner *b, int64_t lo, int64_t n, const float *g) {
    float **h = b->host;
    double t0 = sn_clock_s();
    sn_offload_adamw(b->pool, h[FB_SCAL], h[FB_PARAMS] + lo, h[FB_M] + lo, h[FB_V] + lo,
                     g ? g : h[FB_SUMS] + lo, b->seg ? (uint16_t *)h[FB_LOW] + lo : NULL,
                     b->seg ? b->lay->low : SN_F32, n, b->lay->flat_decay - lo);
    b->times.adamw_s += sn_clock_s() - t0;
}

/* ---- the delayed parameter update (runner.h sn_runner_delay) ----
 * Update k (the AdamW of step k's gradients g_k, on the host) runs while the device runs step
 * k+1, which therefore reads the weights before update k, and brings g_{k+1} down while its
 * backward runs: each chunk of the gradients as soon as the last kernel that writes it has run
 * (run_copies), into host[FB_GRADS], which update k does not read. At update k+1, in this order:
 *   1. update k finishes (its thread joined; on a device without asynchronous copies it runs
 *      now, the latest point the order allows: the same numbers);
 *   2. its weights go up: the device's stream is idle (sn_exec_run returned after its sync,
 *      the norm's scalars came down through its stream), so the upload races no step's read
 *      of the weights; the run's last chunks of gradients may still be coming down, the
 *      other way over PCIe (the executor orders nothing that writes them before they land);
 *   3. the upload done before returning: the next run reads the weights;
 *   4. the run's copies done, update k+1 starts on the host, on its own copy of the scalars
 *      and its own gradients: host[FB_JOB] trades places with the step's gradients (without
 *      accumulation the run's download, with it the host sums, which the micro-batches'
 *      downloads were added to), so that the next run's download, and the next step's sums,
 *      go to the buffer update k read.
 * A drain (evaluation, a parameter read or written, a checkpoint through those, the end of a
 * run: sn_runner_drain) does 1 to 3, so the next run reads the newest weights. The step's last
 * run (sn_runner_run's last) does 1 to 3 itself where the update has a thread of its own and the
 * device copies asynchronously, while its kernels run (run_uploads below): the weights go up
 * during the backward, each chunk after the last kernel that uses it, and update k+1 then
 * finds nothing to send. The same numbers: no kernel of the step reads a chunk after it went
 * up, and the step's earlier runs read the weights before it. */

static void keep_chunk(sn_runner *b, int64_t lo, int64_t n, const float *g) {
    (void)b, (void)lo, (void)n, (void)g; /* the masters are final: they only go up */
}

/* Step 1: the update in flight finished (its thread joined). */
static void join(sn_runner *b) {
    double t0 = sn_clock_s();
    bool pending = b->job.pending;
    sn_offload_job_finish(&b->job);
    b->times.join_s += sn_clock_s() - t0;
    if (pending) b->times.adamw_s += b->job.run_s;
}

static sn_status drain(sn_runner *b, sn_err *e) {
    if (!b->delay) return SN_OK;
    join(b);
    double t1 = sn_clock_s();
    if (!b->upload_due) return SN_OK;
    b->upload_due = false;
    sn_status s = pipeline(b, false, true, keep_chunk, e);
    b->times.up_s += sn_clock_s() - t1;
    return s;
}

sn_status sn_runner_drain(sn_runner *b, sn_err *e) { return drain(b, e); }

/* The run's copies into host[FB_GRADS], set again when that is another buffer than last time. */
static sn_status run_copies(sn_runner *b, sn_err *e) {
    if (!b->delay || b->down_to == b->host[FB_GRADS]) return SN_OK;
    for (int k = 0; k < b->n_down; k++) b->down[k].host = b->host[FB_GRADS] + k * b->chunk;
    sn_status s = sn_exec_run_copies(b->x, b->down, b->n_down, e);
    b->down_to = s ? NULL : b->host[FB_GRADS];
    return s;
}

/* Steps 1 to 3 during a step's last run (sn_runner_run's last, where the update runs on its own
 * thread and the device copies asynchronously). The weights' chunks (host[FB_PARAMS] or, where
 * the segments say so, the shadows' bits host[FB_LOW], cut as weights_up cuts them) go up each
 * after the last kernel that reads or writes any of its bytes, in that order (the last layers'
 * first: the backward frees them first), and the update does its parts in the same order
 * (up_new, offload.h sn_offload_pieces: the uploads' flat ranges joined where they touch), so
 * that the run, once it has queued its kernels, waits for each chunk's part of the update
 * (up_ready) and queues its upload: the weights go up during the backward as the update and the
 * kernels free them, and the run returns with them on the device. The next run reads them, as
 * it would after a drain. */
static sn_status up_ready(void *arg, int i, sn_err *e) {
    (void)e;
    sn_runner *b = arg;
    double t0 = sn_clock_s();
    sn_offload_job_wait(&b->job, b->up_part[i] + 1);
    b->times.join_s += sn_clock_s() - t0;
    return SN_OK;
}

static void up_free(sn_runner *b) {
    free(b->up), free(b->up_part), free(b->parts);
    b->up = NULL, b->up_part = NULL, b->parts = NULL;
    b->n_up = b->n_parts = 0;
}

static sn_status up_new(sn_runner *b, sn_err *e) {
    sn_offload_piece *pc;
    int n;
    sn_status s = sn_offload_pieces(b->prog, b->seg, b->n_seg, b->chunk, &pc, &n, &b->parts,
                                    &b->n_parts, e);
    if (s) return s;
    b->up = sn_calloc((size_t)n + 1, sizeof *b->up, "the run's uploads", e);
    b->up_part = b->up ? sn_calloc((size_t)n + 1, sizeof *b->up_part, "the run's uploads", e) : NULL;
    for (int i = 0; b->up_part && i < n; i++) { /* each piece as weights_up sends it */
        int w = pc[i].low ? 2 : F32_BYTES, f = pc[i].low ? FB_LOW : FB_PARAMS;
        sn_exec_ref r = b->ref[f];
        r.offset += w * pc[i].lo;
        b->up[i] = (sn_exec_run_copy){pc[i].after, r, (char *)b->host[f] + w * pc[i].lo, w * pc[i].n};
        b->up_part[i] = pc[i].part;
    }
    free(pc);
    if (!b->up_part) {
        up_free(b);
        return SN_ERR_OOM;
    }
    b->n_up = n;
    return SN_OK;
}

static sn_status run_uploads(sn_runner *b, bool last, bool *set, sn_err *e) {
    *set = false;
    if (!b->delay || !last || !b->upload_due || !b->job.threaded || !b->up) return SN_OK;
    sn_status s = sn_exec_run_uploads(b->x, b->up, b->n_up, up_ready, b, e);
    *set = !s;
    return s;
}

/* The gradients' chunks, each after the last kernel that writes it: the run's copies. */
static sn_status down_new(sn_runner *b, sn_err *e) {
    int64_t chunks = (b->lay->flat_n + b->chunk - 1) / b->chunk;
    if (!(b->down = sn_calloc((size_t)chunks, sizeof *b->down, "the run's copies", e))) return SN_ERR_OOM;
    for (int64_t k = 0; k < chunks; k++) {
        sn_exec_ref r = b->ref[FB_GRADS];
        r.offset += F32_BYTES * k * b->chunk;
        int64_t bytes = F32_BYTES * chunk_len(b, k);
        b->down[k] = (sn_exec_run_copy){sn_exec_ready_after(b->x, r, bytes), r, NULL, bytes};
    }
    b->n_down = (int)chunks;
    return SN_OK;
}

sn_status sn_runner_delay(sn_runner *b, int threads, sn_err *e) {
    if (!b->offload)
        return sn_fail(e, SN_ERR_INVALID, "trainer: the delayed parameter update overlaps the host's "
                       "AdamW with the device's next step: it needs the optimizer state offloaded "
                       "(offload) and a device");
    b->delay = true;
    b->job.threaded = b->d->copy_async != NULL; /* where the device runs apart from the host */
    /* the update's threads leave a core to this one, which drives the device meanwhile */
    int cores = sn_cores();
    if (threads <= 0) threads = cores > 1 ? cores - 1 : 1;
    b->job.pool = b->job.threaded ? sn_pool_new(threads) : b->pool; /* the caller's accumulates meanwhile */
    if (!b->job.pool)
        return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the delayed update's threads");
    b->times.threads = sn_pool_threads(b->job.pool);
    int64_t n = b->lay->flat_n;
    sn_exec_host_free(b->x, b->host[FB_GRADS]); /* the staging chunks: the whole range instead */
    b->host[FB_GRADS] = NULL;
    b->host_bytes -= F32_BYTES * sn_offload_staging(n);
    static const int fb[] = {FB_GRADS, FB_JOB}; /* the run's gradients, the update's */
    for (int i = 0; i < 2; i++) {
        if (!(b->host[fb[i]] = sn_exec_host_alloc(b->x, F32_BYTES * n, e)))
            return sn_fail(e, SN_ERR_OOM, "trainer: out of host memory for the delayed update's "
                           "gradients (%.1f MiB)", (double)F32_BYTES * (double)n / (1 << 20));
        b->host_bytes += F32_BYTES * n;
    }
    return down_new(b, e);
}

static sn_status delayed_adamw(sn_runner *b, bool sums, sn_err *e) {
    float **h = b->host;
    sn_status s = drain(b, e); /* 1, 2, 3 */
    if (!s && b->job.threaded && !b->up) s = up_new(b, e); /* the order of the update's parts */
    double t0 = sn_clock_s();
    if (!s) s = sn_exec_run_copies_wait(b->x, e); /* 4 */
    b->times.copies_s += sn_clock_s() - t0;
    if (s) return s;
    int f = sums ? FB_SUMS : FB_GRADS; /* 4 */
    float *t = h[f];
    h[f] = h[FB_JOB], h[FB_JOB] = t;
    sn_offload_job_start(&b->job, h[FB_SCAL], h[FB_PARAMS], h[FB_M], h[FB_V], h[FB_JOB],
                         b->seg ? h[FB_LOW] : NULL, b->seg ? b->lay->low : SN_F32,
                         b->lay->flat_n, b->lay->flat_decay, b->parts, b->n_parts);
    b->upload_due = true;
    return SN_OK;
}

sn_status sn_runner_adamw(sn_runner *b, bool sums, sn_err *e) {
    if (b->offload) {
        double t0 = sn_clock_s();
        sn_status s = b->delay ? delayed_adamw(b, sums, e) : pipeline(b, !sums, true, adamw_chunk, e);
        b->times.optimizer_s += sn_clock_s() - t0;
        b->times.updates += !s;
        return s;
    }
    int g = sums ? FB_SUMS : FB_GRADS;
    return launch(b, OK_ADAMW, (const int[]){FB_PARAMS, FB_M, FB_V, g, FB_SCAL, FB_LOW}, e);
}
