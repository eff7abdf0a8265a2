/* exec.c: the executor: runs a compiled program's kernels in order on one device.
 * Convention: buffers are carved from two device blocks by the memory plan; the measured
 * arena peak is the highest arena byte a kernel was handed, which must equal the plan's.
 * Device pointers stay in here and in the device: callers name memory by sn_exec_ref. A weight
 * shadow (program.h) whose parameter was written from outside the program is made again by its
 * cast kernel before the next run. Every value's pointer is worked out once (at[]): a sharing
 * executor (sn_exec_new_sharing) points its parameters and their shadows into its owner's
 * persistent block, lays out the rest of its persistent values in a block of its own, and runs
 * in its owner's arena when that is large enough. A run's own downloads (sn_exec_run_copies)
 * are queued between its kernels where the device copies asynchronously (after them elsewhere)
 * and may still be in flight when the run returns: whatever here writes bytes they read, runs
 * again or frees memory waits for them first. A run's own uploads (sn_exec_run_uploads, set
 * for one run) are queued once its kernels are, each after an event recorded right after the
 * last kernel using its bytes, and are done when the run returns. */
#include <stdlib.h>
#include <string.h>

#include "support/clock.h"
#include "device.h"

struct sn_exec {
    sn_device *d;
    const sn_program *p;
    char *arena, *persistent;
    char **at;         /* per value: its device pointer (aliases their root's) */
    sn_exec *owner;    /* a sharing executor's: whose parameters it reads; NULL: none */
    int *bound;        /* [n_values] with an owner: the owner's value a value is, or -1 */
    bool arena_borrowed; /* the arena is the owner's (not freed here) */
    int64_t own_persistent; /* bytes of the persistent block allocated here */
    void **handles;    /* per kernel, from the device's compile, then per weight shadow */
    bool *stale;       /* per weight shadow (program.h): its parameter was written since its
                          copy was made; the copy is made again before the next run */
    bool *foreign;     /* per weight shadow: its copy is the owner's (the owner makes it again);
                          a shadow of an owner's parameter that is not is made before every run */
    double *kernel_s;  /* per kernel: time of the last run */
    void **events;     /* n_kernels + 1: before the first kernel and after each */
    int n_buffers;     /* extra buffers (sn_exec_buffer_new) */
    char **buffers;
    int64_t *buffer_bytes;
    bool whole_run_only; /* sn_exec_time_kernels(x, false): events around the run only */
    void *graph_state;   /* a device that runs the graph whole (run_graph): its state */
    void *copy_done[SN_EXEC_COPY_SLOTS]; /* the asynchronous copies' events, made at first use */
    sn_exec_run_copy *run_copy; /* a run's own downloads, by `after` */
    int n_run_copy;
    void *run_copy_done;        /* recorded after each (one stream: the last is all of them) */
    bool copies_pending;        /* the last run's may still be in flight */
    sn_exec_run_copy *run_up;   /* the next run's uploads (sn_exec_run_uploads), by `after` */
    int n_run_up, cap_run_up;
    void **up_after;            /* [cap_run_up]: the event recorded after upload i's kernel (the
                                   first upload of each `after` records it, the rest share it) */
    int *up_event;              /* [cap_run_up]: the upload whose event upload i waits for */
    int *up_index;              /* [cap_run_up]: upload i's index in the caller's list */
    sn_exec_ready_fn up_ready;
    void *up_arg;
    void *run_up_done;          /* recorded after each upload (one stream) */
    sn_exec_stats st;
};

static bool in_graph(const sn_exec *x, const sn_node *n);

static const sn_value *value_of(const sn_exec *x, const sn_node *n) {
    if (!in_graph(x, n)) return NULL;
    int v = x->p->value_of[n->id];
    return v < 0 ? NULL : &x->p->values[v];
}

static void *ptr_of(const sn_exec *x, const sn_value *v) { return x->at[v - x->p->values]; }

/* CONST and FULL values, converted to their dtype's layout. */
static sn_status fill_constants(sn_exec *x, sn_err *e) {
    const sn_program *p = x->p;
    for (int i = 0; i < p->n_values; i++) {
        const sn_value *v = &p->values[i];
        const sn_node *n = v->node;
        if (!n || (n->op != SN_OP_CONST && n->op != SN_OP_FULL)) continue; /* !n: a scratch */
        if (n->dtype != SN_F32 && n->dtype != SN_I32)
            return sn_fail(e, SN_ERR_UNSUPPORTED, "constant %%%d is %s: only f32 and i32 constants "
                           "are supported by the compiled backends yet", n->id, sn_dtype_name(n->dtype));
        int64_t m = sn_numel(n);
        void *host = sn_malloc((size_t)v->bytes + 1, "a constant's staging copy", e);
        if (!host) return SN_ERR_OOM;
        for (int64_t k = 0; k < m; k++) {
            float f = n->op == SN_OP_CONST ? n->data[k] : n->a.f;
            if (n->dtype == SN_I32) ((int32_t *)host)[k] = (int32_t)f;
            else ((float *)host)[k] = f;
        }
        sn_status s = x->d->upload(x->d, ptr_of(x, v), host, (size_t)v->bytes, e);
        free(host);
        if (s) return s;
    }
    return SN_OK;
}

static sn_status wait_run_copies(sn_exec *x, sn_err *e);

void sn_exec_free(sn_exec *x) {
    if (!x) return;
    sn_err ignored;
    wait_run_copies(x, &ignored); /* nothing lands in freed memory */
    if (x->arena && !x->arena_borrowed) x->d->free(x->d, x->arena);
    if (x->persistent) x->d->free(x->d, x->persistent);
    if (x->graph_state) x->d->run_free(x->d, x->graph_state);
    for (int i = 0; i < SN_EXEC_COPY_SLOTS; i++)
        if (x->copy_done[i]) x->d->event_free(x->d, x->copy_done[i]);
    if (x->run_copy_done) x->d->event_free(x->d, x->run_copy_done);
    free(x->run_copy);
    for (int i = 0; i < x->cap_run_up; i++)
        if (x->up_after[i]) x->d->event_free(x->d, x->up_after[i]);
    if (x->run_up_done) x->d->event_free(x->d, x->run_up_done);
    free(x->run_up);
    free(x->up_after);
    free(x->up_event);
    free(x->up_index);
    for (int i = 0; i < x->n_buffers; i++) x->d->free(x->d, x->buffers[i]);
    for (int k = 0; x->events && k <= x->p->n_kernels; k++)
        if (x->events[k]) x->d->event_free(x->d, x->events[k]);
    free(x->events);
    free(x->buffers);
    free(x->buffer_bytes);
    free(x->handles);
    free(x->stale);
    free(x->foreign);
    free(x->at);
    free(x->bound);
    free(x->kernel_s);
    free(x);
}

/* The owner's value of the parameter named as n, of n's dtype and size, or -1. */
static int owner_param(const sn_exec *o, const sn_node *n) {
    const sn_param_layout *l = &o->p->layout;
    for (int i = 0; i < l->n && n->name; i++) {
        const sn_param_slot *s = &l->slots[i];
        int v = o->p->value_of[s->node->id];
        if (v >= 0 && s->node->name && !strcmp(s->node->name, n->name) && s->dtype == n->dtype &&
            s->numel == sn_numel(n))
            return sn_value_root(o->p, v);
    }
    return -1;
}

/* Which of x's values are its owner's: its parameters, by name, dtype and size, and the weight
 * shadow of such a parameter where the owner has one of the same dtype. */
static void bind(sn_exec *x) {
    const sn_program *p = x->p, *op = x->owner->p;
    for (int v = 0; v < p->n_values; v++) {
        const sn_node *n = p->values[v].node;
        x->bound[v] = n && n->op == SN_OP_PARAM && p->values[v].alias < 0 ? owner_param(x->owner, n) : -1;
    }
    for (int k = 0; k < p->n_shadows; k++) {
        const sn_node *c = p->shadows[k]->args[0], *w = p->shadows[k]->args[1];
        int ow = x->bound[p->value_of[w->id]];
        for (int j = 0; ow >= 0 && j < op->n_shadows && !x->foreign[k]; j++) {
            const sn_node *oc = op->shadows[j]->args[0];
            if (op->value_of[op->shadows[j]->args[1]->id] != ow || oc->dtype != c->dtype) continue;
            x->bound[p->value_of[c->id]] = sn_value_root(op, op->value_of[oc->id]);
            x->foreign[k] = true;
        }
    }
}

/* A frozen block (program.h) of a sharing program reads its parts where its first part is:
 * the owner's parameters, which must lie one after the other there too (the training
 * program's own blocks of the same parts lay them out so: its evaluation program shares them). */
static sn_status shared_blocks(const sn_exec *x, sn_err *e) {
    const sn_program *p = x->p, *op = x->owner->p;
    for (int v = 0; v < p->n_values; v++) {
        const sn_node *n = p->values[v].node;
        if (!n || p->values[v].alias < 0 || !sn_frozen_block(n)) continue;
        int64_t at = -1;
        for (int k = 0; k < n->n_in; k++) {
            int ov = x->bound[p->value_of[n->in[k]->id]];
            if (ov < 0 || (at >= 0 && op->values[ov].offset != at))
                return sn_fail(e, SN_ERR_UNSUPPORTED, "executor: the program reads parameters %s "
                               "and %s as one (a concatenation of frozen parameters read in "
                               "place), but its owner keeps them apart: sharing them so is not "
                               "supported yet", n->in[0]->name, n->in[k]->name);
            at = op->values[ov].offset + op->values[ov].bytes;
        }
    }
    return SN_OK;
}

static int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

/* The blocks and every value's pointer: an arena value at its planned offset; a persistent one
 * at its planned offset in the persistent block, or with an owner the owner's or packed anew in
 * a block of those that are not the owner's. Aliases point where their root does. */
static sn_status place(sn_exec *x, sn_err *e) {
    const sn_program *p = x->p;
    sn_device *d = x->d;
    int64_t *off = sn_calloc((size_t)p->n_values + 1, sizeof *off, "the executor's values", e);
    if (!off) return SN_ERR_OOM;
    int64_t own = x->owner ? 0 : p->persistent_bytes;
    for (int v = 0; v < p->n_values; v++) {
        const sn_value *val = &p->values[v];
        if (!val->persistent || val->alias >= 0 || (x->owner && x->bound[v] >= 0)) continue;
        off[v] = x->owner ? own : val->offset;
        if (x->owner) own += align64(val->bytes);
    }
    x->own_persistent = own;
    sn_err de = {0};
    const char *block = "arena (the activations and gradients one step reuses)";
    x->arena_borrowed = x->owner && p->arena_bytes <= x->owner->p->arena_bytes;
    if (x->arena_borrowed) x->arena = x->owner->arena;
    if (x->arena || (x->arena = d->alloc(d, (size_t)p->arena_bytes + 64, &de)))
        block = "persistent block (parameters, inputs, outputs)";
    if (!x->arena || !(x->persistent = d->alloc(d, (size_t)own + 64, &de))) {
        free(off);
        return sn_fail(e, de.code ? de.code : SN_ERR_OOM, "the program's %s does not fit on the "
                       "device: %s", block, de.msg);
    }
    for (int v = 0; v < p->n_values; v++) {
        int r = sn_value_root(p, v);
        const sn_value *val = &p->values[r];
        x->at[v] = !val->persistent               ? x->arena + val->offset
                   : x->owner && x->bound[r] >= 0 ? x->owner->at[x->bound[r]]
                                                  : x->persistent + off[r];
    }
    free(off);
    /* zeroed: the padding between values stays zero, so a kernel over a range of several
     * values (the optimizer's flat range) reads zeros there */
    return d->memset(d, x->persistent, 0, (size_t)own + 64, e);
}

sn_status sn_exec_new_sharing(sn_device *d, const sn_program *p, sn_exec *owner, sn_exec **out,
                              sn_err *e) {
    *out = NULL;
    if (p->target.kind != d->target.kind || p->target.sm != d->target.sm)
        return sn_fail(e, SN_ERR_INVALID, "executor: the program was compiled for %s, but the "
                       "device is %s (%s): compile it with sn_pipeline_opts.target = "
                       "&device->target", p->target.name, d->target.name, d->name);
    if (owner && owner->d != d)
        return sn_fail(e, SN_ERR_INVALID, "executor: a program shares parameters with an executor "
                       "of the same device only (%s, %s)", owner->d->name, d->name);
    sn_exec *x = sn_calloc(1, sizeof *x, "the executor", e);
    if (!x) return SN_ERR_OOM;
    x->d = d;
    x->p = p;
    x->owner = owner;
    int n_all = p->n_kernels + p->n_shadows; /* the shadows' kernels follow the step's */
    x->handles = sn_calloc((size_t)n_all + 1, sizeof *x->handles, "the executor's kernels", e);
    x->stale = sn_calloc((size_t)p->n_shadows + 1, sizeof *x->stale, "the executor's kernels", e);
    x->foreign = sn_calloc((size_t)p->n_shadows + 1, sizeof *x->foreign, "the executor's kernels", e);
    x->kernel_s = sn_calloc((size_t)p->n_kernels + 1, sizeof *x->kernel_s, "the executor's kernels", e);
    x->events = sn_calloc((size_t)p->n_kernels + 1, sizeof *x->events, "the executor's events", e);
    x->at = sn_calloc((size_t)p->n_values + 1, sizeof *x->at, "the executor's values", e);
    x->bound = sn_calloc((size_t)p->n_values + 1, sizeof *x->bound, "the executor's values", e);
    if (!x->handles || !x->stale || !x->foreign || !x->kernel_s || !x->events || !x->at || !x->bound) {
        sn_exec_free(x);
        return SN_ERR_OOM;
    }
    sn_status s = SN_OK;
    if (owner) bind(x);
    for (int v = 0; owner && v < p->n_values && !s; v++) { /* its own would be zeros: refused */
        const sn_node *n = p->values[v].node;
        if (n && n->op == SN_OP_PARAM && p->values[v].alias < 0 && x->bound[v] < 0)
            s = sn_fail(e, SN_ERR_INVALID, "executor: parameter %s (%s, %lld elements) of the "
                        "program is not one of the owner's (by name, dtype and size): share "
                        "parameters between programs of one model", n->name ? n->name : "?",
                        sn_dtype_name(n->dtype), (long long)sn_numel(n));
    }
    if (!s && owner) s = shared_blocks(x, e);
    if (!s) s = place(x, e);
    x->st.arena_bytes = p->arena_bytes;
    x->st.arena_shared = x->arena_borrowed;
    x->st.persistent_bytes = x->own_persistent;
    for (int k = 0; !s && k <= p->n_kernels; k++)
        if (!(x->events[k] = d->event_new(d, e))) s = e->code ? e->code : SN_ERR_DEVICE;
    double t0 = sn_clock_s();
    if (!s) s = d->compile(d, p->kernels, n_all, x->handles, e); /* one array (program.h) */
    for (int k = 0; k < p->n_shadows; k++) x->stale[k] = !x->foreign[k];
    x->st.compile_s = sn_clock_s() - t0;
    if (!s && !d->run_graph) s = fill_constants(x, e); /* a graph run fills its own */
    if (s) {
        sn_exec_free(x);
        return s;
    }
    *out = x;
    return SN_OK;
}

sn_status sn_exec_new(sn_device *d, const sn_program *p, sn_exec **out, sn_err *e) {
    return sn_exec_new_sharing(d, p, NULL, out, e);
}

/* Whether n is a node of x's graph. */
static bool in_graph(const sn_exec *x, const sn_node *n) {
    return n && n->id >= 0 && n->id < x->p->g->n_nodes && x->p->g->nodes[n->id] == n;
}

/* Bytes [at, at + bytes) of the persistent block are being written from outside the program:
 * the weight shadows of the parameters there are stale. */
static void written(sn_exec *x, int64_t at, int64_t bytes) {
    const sn_program *p = x->p;
    for (int k = 0; k < p->n_shadows; k++) {
        const sn_value *v = value_of(x, p->shadows[k]->args[1]);
        if (v && v->persistent && v->offset < at + bytes && at < v->offset + v->bytes) x->stale[k] = true;
    }
}

/* The same for what a ref names in the persistent block (other buffers hold no parameter). */
static void written_ref(sn_exec *x, sn_exec_ref r, int64_t bytes) {
    const sn_value *v = r.node ? value_of(x, r.node) : NULL;
    if (v && v->persistent) written(x, v->offset + r.offset, bytes);
    else if (!r.node && r.buffer == SN_EXEC_BLOCK) written(x, r.offset, bytes);
}

/* The offset in the persistent block, laid out as the program's, of what r names (-1: an extra
 * buffer, or a sharing executor's block, which is not). */
static int64_t block_at(const sn_exec *x, sn_exec_ref r) {
    const sn_value *v = r.node ? value_of(x, r.node) : NULL;
    if (x->owner) return -1;
    if (v && v->persistent) return v->offset + r.offset;
    return !r.node && r.buffer == SN_EXEC_BLOCK ? r.offset : -1;
}

static sn_status wait_run_copies(sn_exec *x, sn_err *e) {
    if (!x->copies_pending) return SN_OK;
    x->copies_pending = false;
    return x->d->event_wait(x->d, x->run_copy_done, e);
}

/* Before the persistent block's [at, at + bytes) is written: the last run's copies that read
 * any of it done (bytes < 0: to the block's end). */
static sn_status before_write(sn_exec *x, int64_t at, int64_t bytes, sn_err *e) {
    for (int i = 0; x->copies_pending && i < x->n_run_copy; i++) {
        int64_t a = block_at(x, x->run_copy[i].src);
        if ((bytes < 0 || a < at + bytes) && at < a + x->run_copy[i].bytes) return wait_run_copies(x, e);
    }
    return SN_OK;
}

/* The same for what a ref names (an extra buffer: nothing to wait for). */
static sn_status before_write_ref(sn_exec *x, sn_exec_ref r, int64_t bytes, sn_err *e) {
    int64_t at = block_at(x, r);
    return at < 0 ? SN_OK : before_write(x, at, bytes, e);
}

/* Makes the stale weight shadows again from their parameters, with their cast kernels. */
static sn_status refresh_shadows(sn_exec *x, sn_err *e) {
    const sn_program *p = x->p;
    for (int k = 0; k < p->n_shadows; k++) {
        if (!x->stale[k] || x->foreign[k]) continue;
        const sn_kernel *c = p->shadows[k];
        void *bufs[2] = {ptr_of(x, value_of(x, c->args[0])), ptr_of(x, value_of(x, c->args[1]))};
        SN_ASSERT(sn_kernel_n_bufs(c) == 2);
        sn_status s = x->d->launch(x->d, c, x->handles[p->n_kernels + k], bufs, e);
        if (s) return s;
        x->stale[k] = false;
        x->st.shadow_casts++;
    }
    return SN_OK;
}

sn_status sn_exec_set(sn_exec *x, const sn_node *n, const void *data, sn_err *e) {
    const sn_value *v = value_of(x, n);
    if (!v && in_graph(x, n) && (n->op == SN_OP_INPUT || n->op == SN_OP_PARAM))
        return SN_OK; /* a leaf the program never reads (the targets of a loss without them) */
    if (!v || (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM))
        return sn_fail(e, SN_ERR_INVALID, "sn_exec_set: node %%%d is not an input or parameter "
                       "of the compiled program", n ? n->id : -1);
    int b = x->owner ? x->bound[v - x->p->values] : -1;
    if (b >= 0) return sn_exec_set(x->owner, x->owner->p->values[b].node, data, e);
    sn_status s = before_write(x, v->offset, v->bytes, e);
    if (s) return s;
    written(x, v->offset, v->bytes);
    return x->d->upload(x->d, ptr_of(x, v), data, (size_t)v->bytes, e);
}

sn_status sn_exec_get(sn_exec *x, const sn_node *n, void *data, sn_err *e) {
    const sn_value *v = value_of(x, n);
    if (!v || !v->persistent)
        return sn_fail(e, SN_ERR_INVALID, "sn_exec_get: node %%%d is not kept by the program "
                       "(mark it as a graph output)", n ? n->id : -1);
    int b = x->owner ? x->bound[v - x->p->values] : -1;
    if (b >= 0) return sn_exec_get(x->owner, x->owner->p->values[b].node, data, e);
    return x->d->download(x->d, data, ptr_of(x, v), (size_t)v->bytes, e);
}

/* The device pointer a ref names, after checking it lies inside its block. */
static sn_status resolve(sn_exec *x, sn_exec_ref r, int64_t bytes, char **out, sn_err *e) {
    char *base = NULL;
    int64_t size = 0, at = r.offset;
    if (r.node) {
        const sn_value *v = value_of(x, r.node);
        if (!v || !v->persistent)
            return sn_fail(e, SN_ERR_INVALID, "executor: node %%%d is not a persistent value of "
                           "the program (mark it as a graph output)", r.node->id);
        base = x->persistent;
        size = x->p->persistent_bytes;
        at += v->offset;
        if (x->owner) { /* the block is not the plan's: the value alone */
            base = ptr_of(x, v);
            size = v->bytes;
            at = r.offset;
        }
    } else if (r.buffer == SN_EXEC_BLOCK && x->owner) {
        return sn_fail(e, SN_ERR_INVALID, "executor: a sharing executor's persistent block is "
                       "not laid out as its program's: name a value or an extra buffer");
    } else if (r.buffer == SN_EXEC_BLOCK) {
        base = x->persistent;
        size = x->p->persistent_bytes;
    } else if (r.buffer >= 0 && r.buffer < x->n_buffers) {
        base = x->buffers[r.buffer];
        size = x->buffer_bytes[r.buffer];
    } else {
        return sn_fail(e, SN_ERR_INVALID, "executor: buffer %d was not made by sn_exec_buffer_new",
                       r.buffer);
    }
    if (at < 0 || bytes < 0 || at + bytes > size)
        return sn_fail(e, SN_ERR_INVALID, "executor: bytes [%lld, %lld) are outside their block "
                       "of %lld bytes", (long long)at, (long long)(at + bytes), (long long)size);
    *out = base + at;
    return SN_OK;
}

sn_status sn_exec_buffer_new(sn_exec *x, int64_t bytes, int *id, sn_err *e) {
    char **b = sn_realloc(x->buffers, sizeof *b * (size_t)(x->n_buffers + 1), "the executor's buffers", e);
    if (!b) return SN_ERR_OOM;
    x->buffers = b;
    int64_t *sz = sn_realloc(x->buffer_bytes, sizeof *sz * (size_t)(x->n_buffers + 1), "the executor's buffers", e);
    if (!sz) return SN_ERR_OOM;
    x->buffer_bytes = sz;
    char *p = x->d->alloc(x->d, (size_t)bytes + 64, e);
    if (!p) return e->code ? e->code : SN_ERR_OOM;
    sn_status s = x->d->memset(x->d, p, 0, (size_t)bytes + 64, e);
    if (s) {
        x->d->free(x->d, p);
        return s;
    }
    x->buffers[x->n_buffers] = p;
    x->buffer_bytes[x->n_buffers] = bytes;
    x->st.buffer_bytes += bytes;
    *id = x->n_buffers++;
    return SN_OK;
}

int64_t sn_exec_persistent_offset(const sn_exec *x, const sn_node *n) {
    const sn_value *v = value_of(x, n);
    return v && v->persistent ? v->offset : -1;
}

sn_status sn_exec_upload(sn_exec *x, sn_exec_ref dst, const void *src, int64_t bytes, sn_err *e) {
    char *p;
    sn_status s = resolve(x, dst, bytes, &p, e);
    if (!s) s = before_write_ref(x, dst, bytes, e);
    if (!s) written_ref(x, dst, bytes);
    return s ? s : x->d->upload(x->d, p, src, (size_t)bytes, e);
}

sn_status sn_exec_download(sn_exec *x, void *dst, sn_exec_ref src, int64_t bytes, sn_err *e) {
    char *p;
    sn_status s = resolve(x, src, bytes, &p, e);
    return s ? s : x->d->download(x->d, dst, p, (size_t)bytes, e);
}

void *sn_exec_host_alloc(sn_exec *x, int64_t bytes, sn_err *e) {
    if (!x->d->host_alloc) return sn_calloc((size_t)bytes, 1, "host memory", e);
    void *p = x->d->host_alloc(x->d, (size_t)bytes, e);
    if (p) memset(p, 0, (size_t)bytes);
    return p;
}

void sn_exec_host_free(sn_exec *x, void *p) {
    sn_err ignored;
    wait_run_copies(x, &ignored); /* nothing lands in freed memory */
    if (!x->d->host_alloc) free(p);
    else if (p) x->d->host_free(x->d, p);
}

/* A copy through the device's copy_async after the work queued so far (after: NULL) or after
 * that event, *done (made at first use) recorded after it. */
static sn_status queue_copy(sn_exec *x, bool up, sn_exec_ref ref, void *host, int64_t bytes,
                            void *after, void **done, sn_err *e) {
    char *p;
    sn_status s = resolve(x, ref, bytes, &p, e);
    if (s) return s;
    if (!*done && !(*done = x->d->event_new(x->d, e))) return e->code;
    if (up && (s = before_write_ref(x, ref, bytes, e))) return s;
    if (up) written_ref(x, ref, bytes);
    return x->d->copy_async(x->d, up ? p : host, up ? host : p, (size_t)bytes, up, after, *done, e);
}

sn_status sn_exec_copy_async(sn_exec *x, bool up, sn_exec_ref ref, void *host, int64_t bytes,
                             int slot, sn_err *e) {
    SN_ASSERT(slot >= 0 && slot < SN_EXEC_COPY_SLOTS);
    if (!x->d->copy_async) return up ? sn_exec_upload(x, ref, host, bytes, e)
                                     : sn_exec_download(x, host, ref, bytes, e);
    return queue_copy(x, up, ref, host, bytes, NULL, &x->copy_done[slot], e);
}

/* Checks a run's copies (downloads or uploads): each of the persistent block, after a kernel of
 * the program or -1. */
static sn_status check_run_copies(sn_exec *x, const sn_exec_run_copy *c, int n, const char *what,
                                  sn_err *e) {
    for (int i = 0; i < n; i++) {
        char *p;
        sn_status s = resolve(x, c[i].src, c[i].bytes, &p, e);
        if (s) return s;
        if (block_at(x, c[i].src) < 0)
            return sn_fail(e, SN_ERR_INVALID, "executor: a run's %s the persistent block (a node "
                           "or SN_EXEC_BLOCK) of an executor that owns its parameters", what);
        if (c[i].after < -1 || c[i].after >= x->p->n_kernels)
            return sn_fail(e, SN_ERR_INVALID, "executor: a run's copy after kernel %d: the program "
                           "has %d", c[i].after, x->p->n_kernels);
    }
    return SN_OK;
}

sn_status sn_exec_run_copies(sn_exec *x, const sn_exec_run_copy *c, int n, sn_err *e) {
    sn_status s = wait_run_copies(x, e);
    if (!s) s = check_run_copies(x, c, n, "copy reads", e);
    if (s) return s;
    sn_exec_run_copy *t = n ? sn_realloc(x->run_copy, sizeof *t * (size_t)n, "the run's copies", e) : NULL;
    if (n && !t) return SN_ERR_OOM;
    if (!n) free(x->run_copy);
    x->run_copy = t;
    x->n_run_copy = n;
    for (int i = 0; i < n; i++) { /* by `after`, in order otherwise (insertion) */
        int j = i;
        for (; j > 0 && t[j - 1].after > c[i].after; j--) t[j] = t[j - 1];
        t[j] = c[i];
    }
    return SN_OK;
}

sn_status sn_exec_run_copies_wait(sn_exec *x, sn_err *e) { return wait_run_copies(x, e); }

sn_status sn_exec_run_uploads(sn_exec *x, const sn_exec_run_copy *c, int n, sn_exec_ready_fn ready,
                              void *arg, sn_err *e) {
    x->n_run_up = 0;
    sn_status s = check_run_copies(x, c, n, "upload writes", e);
    if (s || !n) return s;
    if (n > x->cap_run_up) {
        const char *what = "the run's uploads";
        sn_exec_run_copy *t = sn_realloc(x->run_up, sizeof *t * (size_t)n, what, e);
        if (t) x->run_up = t;
        void **ev = t ? sn_realloc(x->up_after, sizeof *ev * (size_t)n, what, e) : NULL;
        if (ev) x->up_after = ev;
        int *at = ev ? sn_realloc(x->up_event, sizeof *at * (size_t)n, what, e) : NULL;
        if (at) x->up_event = at;
        int *ix = at ? sn_realloc(x->up_index, sizeof *ix * (size_t)n, what, e) : NULL;
        if (!ix) return SN_ERR_OOM;
        x->up_index = ix;
        for (int i = x->cap_run_up; i < n; i++) x->up_after[i] = NULL;
        x->cap_run_up = n;
    }
    for (int i = 0; i < n; i++) { /* by `after`, in order otherwise (insertion) */
        int j = i;
        for (; j > 0 && x->run_up[j - 1].after > c[i].after; j--) {
            x->run_up[j] = x->run_up[j - 1];
            x->up_index[j] = x->up_index[j - 1];
        }
        x->run_up[j] = c[i];
        x->up_index[j] = i;
    }
    for (int i = 0; i < n; i++)
        x->up_event[i] = i > 0 && x->run_up[i - 1].after == x->run_up[i].after ? x->up_event[i - 1] : i;
    x->n_run_up = n;
    x->up_ready = ready;
    x->up_arg = arg;
    return SN_OK;
}

int sn_exec_ready_after(const sn_exec *x, sn_exec_ref r, int64_t bytes) {
    int64_t at = block_at(x, r);
    if (at >= 0) return sn_program_last_write(x->p, at, bytes);
    return !r.node && r.buffer >= 0 ? -1 : x->p->n_kernels - 1; /* an extra buffer: no kernel's */
}

int sn_exec_free_after(const sn_exec *x, sn_exec_ref r, int64_t bytes) {
    int64_t at = block_at(x, r);
    if (at >= 0) return sn_program_last_use(x->p, at, bytes);
    return !r.node && r.buffer >= 0 ? -1 : x->p->n_kernels - 1;
}

sn_status sn_exec_copy_wait(sn_exec *x, int slot, sn_err *e) {
    SN_ASSERT(slot >= 0 && slot < SN_EXEC_COPY_SLOTS);
    if (!x->d->copy_async || !x->copy_done[slot]) return SN_OK; /* nothing in flight */
    return x->d->event_wait(x->d, x->copy_done[slot], e);
}

sn_status sn_exec_copy(sn_exec *x, sn_exec_ref dst, sn_exec_ref src, int64_t bytes, sn_err *e) {
    char *a, *b;
    sn_status s = resolve(x, dst, bytes, &a, e);
    if (!s) s = resolve(x, src, bytes, &b, e);
    if (!s) s = before_write_ref(x, dst, bytes, e);
    if (!s) written_ref(x, dst, bytes);
    return s ? s : x->d->copy(x->d, a, b, (size_t)bytes, e);
}

sn_status sn_exec_copy_rows(sn_exec *x, sn_exec_ref dst, int64_t dst_pitch, sn_exec_ref src,
                            int64_t src_pitch, int64_t width, int64_t rows, sn_err *e) {
    if (rows < 1 || width < 1) return SN_OK;
    if (dst_pitch < width || src_pitch < width)
        return sn_fail(e, SN_ERR_INVALID, "executor: rows of %lld bytes copied with pitches %lld and "
                       "%lld: a pitch is at least the row", (long long)width, (long long)dst_pitch,
                       (long long)src_pitch);
    int64_t dst_span = (rows - 1) * dst_pitch + width, src_span = (rows - 1) * src_pitch + width;
    char *a, *b;
    sn_status s = resolve(x, dst, dst_span, &a, e);
    if (!s) s = resolve(x, src, src_span, &b, e);
    if (!s) s = before_write_ref(x, dst, dst_span, e);
    if (!s) written_ref(x, dst, dst_span);
    if (s) return s;
    if (x->d->copy_rows)
        return x->d->copy_rows(x->d, a, (size_t)dst_pitch, b, (size_t)src_pitch, (size_t)width,
                               (size_t)rows, e);
    for (int64_t i = 0; i < rows && !s; i++)
        s = x->d->copy(x->d, a + i * dst_pitch, b + i * src_pitch, (size_t)width, e);
    return s;
}

sn_status sn_exec_memset(sn_exec *x, sn_exec_ref dst, int value, int64_t bytes, sn_err *e) {
    char *p;
    sn_status s = resolve(x, dst, bytes, &p, e);
    if (!s) s = before_write_ref(x, dst, bytes, e);
    if (!s) written_ref(x, dst, bytes);
    return s ? s : x->d->memset(x->d, p, value, (size_t)bytes, e);
}

sn_status sn_exec_compile(sn_exec *x, sn_kernel *const *ks, int n, void **handles, sn_err *e) {
    return x->d->compile(x->d, ks, n, handles, e);
}

sn_status sn_exec_launch(sn_exec *x, const sn_kernel *k, void *handle, const sn_exec_ref *bufs,
                         sn_err *e) {
    int n = sn_kernel_n_bufs(k);
    SN_ASSERT(n <= SN_KER_MAX_BUFS);
    void *p[SN_KER_MAX_BUFS];
    for (int i = 0; i < n; i++) {
        char *q;
        sn_status s = resolve(x, bufs[i], 0, &q, e);
        if (!s && i < k->n_out) s = before_write_ref(x, bufs[i], -1, e); /* its bytes unknown */
        if (s) return s;
        p[i] = q;
    }
    if (k->kind == SN_KER_ADAMW && k->opt.flat_low == SN_F32) /* new weights without their copies */
        written_ref(x, bufs[0], 4 * k->opt.flat_n);
    return x->d->launch(x->d, k, handle, p, e);
}

sn_device *sn_exec_device(const sn_exec *x) { return x->d; }

/* The run's copies from *next on up to those after kernel k, queued on the device's download
 * stream. */
static sn_status queue_run_copies(sn_exec *x, int k, int *next, sn_err *e) {
    sn_status s = SN_OK;
    for (; !s && *next < x->n_run_copy && x->run_copy[*next].after <= k; (*next)++) {
        const sn_exec_run_copy *c = &x->run_copy[*next];
        s = queue_copy(x, false, c->src, c->host, c->bytes, NULL, &x->run_copy_done, e);
        if (!s) x->st.copies_in_run++;
    }
    return s;
}

/* The run's copies where none were queued during it: now, in order. */
static sn_status run_copies_after(sn_exec *x, sn_err *e) {
    sn_status s = SN_OK;
    for (int i = 0; !s && i < x->n_run_copy; i++)
        s = sn_exec_download(x, x->run_copy[i].host, x->run_copy[i].src, x->run_copy[i].bytes, e);
    return s;
}

/* The run's uploads whose kernel is k (-1: before the first): their events recorded, each
 * `after` once. */
static sn_status record_up_events(sn_exec *x, int k, int *next, sn_err *e) {
    sn_status s = SN_OK;
    for (; !s && *next < x->n_run_up && x->run_up[*next].after <= k; (*next)++) {
        int i = *next;
        if (x->up_event[i] != i) continue;
        if (!x->up_after[i] && !(x->up_after[i] = x->d->event_new(x->d, e))) return e->code;
        s = x->d->event_record(x->d, x->up_after[i], e);
    }
    return s;
}

/* After the run's kernels are queued: the device starts them, then upload by upload the host
 * readies its bytes (meanwhile the kernels run) and it is queued after its kernel's event. */
static sn_status queue_run_uploads(sn_exec *x, sn_err *e) {
    sn_status s = x->d->flush ? x->d->flush(x->d, e) : SN_OK;
    for (int i = 0; !s && i < x->n_run_up; i++) {
        const sn_exec_run_copy *c = &x->run_up[i];
        s = x->up_ready(x->up_arg, x->up_index[i], e);
        if (!s) s = queue_copy(x, true, c->src, c->host, c->bytes, x->up_after[x->up_event[i]],
                               &x->run_up_done, e);
        if (!s) x->st.uploads_in_run++;
    }
    return s;
}

/* The run's uploads where none were queued during it: after the kernels, in order, each once
 * its bytes are readied. */
static sn_status run_uploads_after(sn_exec *x, sn_err *e) {
    sn_status s = SN_OK;
    for (int i = 0; !s && i < x->n_run_up; i++) {
        const sn_exec_run_copy *c = &x->run_up[i];
        s = x->up_ready(x->up_arg, x->up_index[i], e);
        if (!s) s = sn_exec_upload(x, c->src, c->host, c->bytes, e);
    }
    return s;
}

/* Runs kernels [0, end) (and with all of them the run's uploads). */
static sn_status run_steps(sn_exec *x, int end, sn_err *e) {
    const sn_program *p = x->p;
    sn_device *d = x->d;
    memset(x->st.kind_s, 0, sizeof x->st.kind_s);
    sn_status s = wait_run_copies(x, e); /* the last run's read what this one writes */
    if (s) return s;
    x->st.copies_in_run = x->st.uploads_in_run = 0;
    bool ups = x->n_run_up > 0 && end == p->n_kernels;
    /* the stale weight shadows first, before the step's first event (not its time); a graph
     * run computes the casts itself. A sharing executor's: the owner's, and its own of the
     * owner's parameters, which the owner may have changed since */
    for (int k = 0; x->owner && k < p->n_shadows; k++)
        x->stale[k] |= !x->foreign[k] && x->bound[p->value_of[p->shadows[k]->args[1]->id]] >= 0;
    if (!d->run_graph && x->owner) s = refresh_shadows(x->owner, e);
    if (!s && !d->run_graph) s = refresh_shadows(x, e);
    if (!s) s = d->event_record(d, x->events[0], e);
    if (d->run_graph) { /* the whole graph at once: timed as a whole */
        if (!s) s = d->run_graph(d, p, x->at, &x->graph_state, e);
        if (!s) s = d->event_record(d, x->events[p->n_kernels], e);
        if (!s) s = d->sync(d, e);
        if (!s) s = d->event_elapsed(d, x->events[0], x->events[p->n_kernels], &x->st.run_s, e);
        if (!s) s = run_copies_after(x, e);
        return s || !ups ? s : run_uploads_after(x, e);
    }
    bool during = d->copy_async && end == p->n_kernels; /* the copies between the kernels */
    bool up_during = ups && d->copy_async;             /* the uploads after their kernels */
    int next = 0, next_up = 0;
    if (!s && during) s = queue_run_copies(x, -1, &next, e);
    if (!s && up_during) s = record_up_events(x, -1, &next_up, e);
    for (int k = 0; !s && k < end; k++) {
        const sn_kernel *ker = p->kernels[k];
        void *bufs[SN_KER_MAX_BUFS];
        int at = 0;
        for (const sn_kernel *q = ker; q; q = q->tail) { /* a joined FINISH's after (kernel.h) */
            for (int a = 0; a < q->n_out + q->n_in; a++) {
                const sn_value *v = value_of(x, q->args[a]);
                SN_ASSERT(v);
                bufs[at++] = ptr_of(x, v);
                if (!v->persistent && v->offset + v->bytes > x->st.arena_peak_bytes)
                    x->st.arena_peak_bytes = v->offset + v->bytes;
            }
            if (q->stage != SN_SUM_WHOLE) { /* the partial sums, after the args (kernel.h) */
                const sn_value *v = &p->values[q->scratch];
                bufs[at++] = ptr_of(x, v);
                if (v->offset + v->bytes > x->st.arena_peak_bytes)
                    x->st.arena_peak_bytes = v->offset + v->bytes;
            }
        }
        SN_ASSERT(at == sn_kernel_n_bufs(ker));
        s = ker->kind == SN_KER_GEMM ? d->gemm(d, ker, bufs, e) : d->launch(d, ker, x->handles[k], bufs, e);
        if (!s && (!x->whole_run_only || k + 1 == end))
            s = d->event_record(d, x->events[k + 1], e);
        if (!s && during) s = queue_run_copies(x, k, &next, e);
        if (!s && up_during) s = record_up_events(x, k, &next_up, e);
    }
    if (!s && up_during) s = queue_run_uploads(x, e);
    if (!s) s = d->sync(d, e);
    if (!s && up_during) s = d->event_wait(d, x->run_up_done, e);
    x->copies_pending = x->st.copies_in_run > 0; /* in flight until waited for */
    if (!s && !x->st.copies_in_run) s = run_copies_after(x, e);
    if (!s && ups && !up_during) s = run_uploads_after(x, e);
    for (int k = 0; !s && !x->whole_run_only && k < end; k++) {
        const sn_kernel *ker = p->kernels[k];
        s = d->event_elapsed(d, x->events[k], x->events[k + 1], &x->kernel_s[k], e);
        x->st.kind_s[ker->kind] += x->kernel_s[k];
    }
    if (!s && end > 0) s = d->event_elapsed(d, x->events[0], x->events[end], &x->st.run_s, e);
    return s;
}

/* Runs kernels [0, end); the uploads set for this run are forgotten, run or failed. */
static sn_status run_kernels(sn_exec *x, int end, sn_err *e) {
    sn_status s = run_steps(x, end, e);
    x->n_run_up = 0;
    return s;
}

sn_status sn_exec_run(sn_exec *x, sn_err *e) { return run_kernels(x, x->p->n_kernels, e); }


void sn_exec_stats_get(const sn_exec *x, sn_exec_stats *s) { *s = x->st; }

double sn_exec_kernel_time(const sn_exec *x, int k) {
    return k >= 0 && k < x->p->n_kernels && !x->whole_run_only ? x->kernel_s[k] : 0;
}

void sn_exec_time_kernels(sn_exec *x, bool per_kernel) { x->whole_run_only = !per_kernel; }
