/* join_siblings.c: horizontal fusion of pointwise kernels: a pointwise kernel right after
 * another of the same index space that reads none of its outputs joins it, one launch where
 * there were two. The cases that matter are a value cut into parts by slices that nothing
 * else reads, each part a copy kernel of the same shape (LoRA's shared A product's gradient
 * cut into the adapters' dA: three kernels for LLaMA's q, k, v, two for gate, up; the slices of
 * a bias gradient): each is a few microseconds of launch on a GPU for a few KiB.
 * Convention: the joined kernel's outputs are the first's then the second's, its inputs the
 * first's then the second's not among them; every element is computed by the same
 * instructions as before (the second's renumbered after the first's), so the results are the
 * separate kernels' bits. Kernels with a tail or a stage (kernel.h) are left alone. Before
 * joining, small kernels are gathered by shape (below); a kernel keeps its name (kN: its place
 * in fuse's order, not the program's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* Whether pointwise kernel b may join a (b right after it): the same index space, no output of
 * a read by b, their args, accesses and instructions together within a kernel's. */
static bool may_join(const sn_kernel *a, const sn_kernel *b) {
    if (a->kind != SN_KER_POINTWISE || b->kind != SN_KER_POINTWISE || a->tail || b->tail ||
        a->stage != SN_SUM_WHOLE || b->stage != SN_SUM_WHOLE || a->rank != b->rank ||
        memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) != 0 ||
        a->n_instr + b->n_instr > SN_KER_MAX_INSTR || a->n_access + b->n_access > SN_KER_MAX_ARGS)
        return false;
    int args = a->n_out + a->n_in + b->n_out;
    for (int j = b->n_out; j < b->n_out + b->n_in; j++) {
        bool shared = false;
        for (int i = 0; i < a->n_out + a->n_in; i++) {
            if (a->args[i] != b->args[j]) continue;
            if (i < a->n_out) return false; /* b reads what a writes */
            shared = true;
        }
        args += !shared;
    }
    return args <= SN_KER_MAX_ARGS;
}

/* a's arg index of node x, appending it as an input when absent. */
static int arg_of(sn_kernel *a, const sn_node *x) {
    for (int i = a->n_out; i < a->n_out + a->n_in; i++)
        if (a->args[i] == x) return i;
    a->args[a->n_out + a->n_in] = x;
    return a->n_out + a->n_in++;
}

/* b joined into a (may_join). */
static sn_status join(sn_program *p, sn_kernel *a, const sn_kernel *b, sn_err *e) {
    sn_pw_instr *instr = sn_arena_alloc(&p->arena, sizeof *instr * (size_t)(a->n_instr + b->n_instr));
    sn_access *access = sn_arena_alloc(&p->arena, sizeof *access * (size_t)(a->n_access + b->n_access + 1));
    if (!instr || !access) return sn_fail_oom(e, sizeof *instr, "the join_siblings pass");
    /* a's inputs move up by b's outputs, which follow a's */
    for (int i = a->n_out + a->n_in - 1; i >= a->n_out; i--) a->args[i + b->n_out] = a->args[i];
    for (int o = 0; o < b->n_out; o++) {
        a->args[a->n_out + o] = b->args[o];
        a->store[a->n_out + o] = b->store[o] + a->n_instr;
    }
    memcpy(access, a->access, sizeof *access * (size_t)a->n_access);
    for (int x = 0; x < a->n_access; x++)
        if (access[x].arg >= a->n_out) access[x].arg += b->n_out;
    a->n_out += b->n_out;
    for (int x = 0; x < b->n_access; x++) {
        sn_access *to = &access[a->n_access + x];
        *to = b->access[x];
        to->arg = to->arg < b->n_out ? a->n_out - b->n_out + to->arg : arg_of(a, b->args[to->arg]);
    }
    memcpy(instr, a->instr, sizeof *instr * (size_t)a->n_instr);
    for (int i = 0; i < b->n_instr; i++) {
        sn_pw_instr *to = &instr[a->n_instr + i];
        *to = b->instr[i];
        for (int j = 0; j < to->n_in; j++)
            to->in[j].index += to->in[j].kind == SN_REF_INSTR ? a->n_instr
                               : to->in[j].kind == SN_REF_ACCESS ? a->n_access : 0;
    }
    a->instr = instr;
    a->access = access;
    a->n_instr += b->n_instr;
    a->n_access += b->n_access;
    const char *rest = strchr(b->name, '_'); /* "k12_slice": "_slice" */
    size_t len = strlen(a->name);
    if (rest && len + strlen(rest) < sizeof a->name) snprintf(a->name + len, sizeof a->name - len, "%s", rest);
    sn_kernel_work(a, &a->n_items, &a->serial);
    return sn_kernel_check(a, e);
}

/* ---- gathering: small kernels moved where kernels of their shape are ----
 * A pointwise kernel that reads only values no kernel of the step writes (parameters and what
 * small kernels make of them alone: LoRA's A side by side, its B padded into the block-
 * diagonal D, passes/siblings.c) is hoisted to the start of the step; one that writes only
 * values no kernel of the step reads (parameters' gradients: each B's block of D's gradient)
 * is sunk to its end. Each group is then ordered by (dependency level, shape), so that kernels
 * of one shape from every layer are neighbours and join (30 launches a kind become a few).
 * Small: every output of a hoisted kernel and every input of a sunk one at most GATHER_BYTES,
 * whose buffers now live the whole step (no weights' copy is held so). */
enum { GATHER_BYTES = 1 << 20 };

typedef struct {
    sn_kernel *k;
    int level; /* hoisted: 1 + the highest level of a hoisted kernel it reads; sunk: 0 */
    int at;    /* its place before */
} gathered;

static int64_t node_bytes(const sn_node *n) { return sn_numel(n) * (sn_dtype_bits(n->dtype) / 8); }

static bool plain_pointwise(const sn_kernel *k) {
    return k->kind == SN_KER_POINTWISE && !k->tail && k->stage == SN_SUM_WHOLE;
}

/* Per root value (a buffer: aliases followed), from one walk over the step before it moves:
 * the first kernel (index) writing it, -1 for none, and whether a kernel reads it. */
typedef struct {
    const sn_program *p;
    int *writer;
    bool *read;
} buffers;

static int root_value(const sn_program *p, const sn_node *n) {
    int v = p->value_of[n->id];
    SN_ASSERT(v >= 0); /* every arg is materialised (kernel.h) */
    return sn_value_root(p, v);
}

static void walk_buffers(buffers *b) {
    const sn_program *p = b->p;
    for (int v = 0; v < p->n_values; v++) b->writer[v] = -1;
    for (int i = 0; i < p->n_kernels; i++)
        for (const sn_kernel *k = p->kernels[i]; k; k = k->tail)
            for (int a = 0; a < k->n_out + k->n_in; a++) {
                int v = root_value(p, k->args[a]);
                if (a >= k->n_out) b->read[v] = true;
                else if (b->writer[v] < 0) b->writer[v] = i;
            }
}

/* The first kernel of the step (index) that writes node n's buffer, or -1. */
static int writer_of(const buffers *b, const sn_node *n) { return b->writer[root_value(b->p, n)]; }

/* Whether a kernel of the step reads node n's buffer. */
static bool read_in_step(const buffers *b, const sn_node *n) { return b->read[root_value(b->p, n)]; }

static int by_level_shape(const void *x, const void *y) {
    const gathered *a = x, *b = y;
    if (a->level != b->level) return a->level - b->level;
    if (a->k->rank != b->k->rank) return a->k->rank - b->k->rank;
    for (int d = 0; d < a->k->rank; d++)
        if (a->k->shape[d] != b->k->shape[d]) return a->k->shape[d] < b->k->shape[d] ? -1 : 1;
    return a->at - b->at;
}

/* The hoisting level of kernel i (0 .. ), or -1 when it stays; level[] of kernels before i set. */
static int hoist_level(const buffers *b, int i, const int *level) {
    const sn_kernel *k = b->p->kernels[i];
    if (!plain_pointwise(k)) return -1;
    for (int o = 0; o < k->n_out; o++)
        if (node_bytes(k->args[o]) > GATHER_BYTES) return -1;
    int lv = 0;
    for (int a = k->n_out; a < k->n_out + k->n_in; a++) {
        int w = writer_of(b, k->args[a]);
        if (w < 0) continue;
        if (w >= i || level[w] < 0) return -1;
        if (level[w] + 1 > lv) lv = level[w] + 1;
    }
    return lv;
}

/* Whether kernel k writes only values no kernel of the step reads, from small inputs. */
static bool sinks(const buffers *b, const sn_kernel *k) {
    if (!plain_pointwise(k)) return false;
    for (int o = 0; o < k->n_out; o++)
        if (read_in_step(b, k->args[o]) || sn_op_kind(k->args[o]->op) == SN_K_LEAF) return false;
    for (int a = k->n_out; a < k->n_out + k->n_in; a++)
        if (node_bytes(k->args[a]) > GATHER_BYTES) return false;
    return true;
}

static sn_status gather(sn_program *p, sn_err *e) {
    int n = p->n_kernels;
    gathered *g = calloc((size_t)n + 1, sizeof *g);
    int *level = calloc((size_t)n + 1, sizeof *level);
    sn_kernel **order = calloc((size_t)n + 1, sizeof *order);
    buffers b = {p, calloc((size_t)p->n_values + 1, sizeof *b.writer),
                 calloc((size_t)p->n_values + 1, sizeof *b.read)};
    if (!g || !level || !order || !b.writer || !b.read) {
        free(g);
        free(level);
        free(order);
        free(b.writer);
        free(b.read);
        return sn_fail(e, SN_ERR_OOM, "the join_siblings pass: out of memory");
    }
    walk_buffers(&b);
    int n_up = 0, n_down = 0, n_mid = 0;
    for (int i = 0; i < n; i++) {
        level[i] = hoist_level(&b, i, level);
        if (level[i] >= 0) g[n_up++] = (gathered){p->kernels[i], level[i], i};
    }
    for (int i = 0; i < n; i++) /* the rest in order, the sunk ones after them */
        if (level[i] < 0 && sinks(&b, p->kernels[i])) g[n_up + n_down++] = (gathered){p->kernels[i], 0, i};
        else if (level[i] < 0) order[n_up + n_mid++] = p->kernels[i];
    qsort(g, (size_t)n_up, sizeof *g, by_level_shape);
    qsort(g + n_up, (size_t)n_down, sizeof *g, by_level_shape);
    for (int i = 0; i < n_up; i++) order[i] = g[i].k;
    for (int i = 0; i < n_down; i++) order[n_up + n_mid + i] = g[n_up + i].k;
    memcpy(p->kernels, order, sizeof *order * (size_t)n);
    free(g);
    free(level);
    free(order);
    free(b.writer);
    free(b.read);
    return SN_OK;
}

sn_status sn_join_siblings(sn_program *p, int *n_joined, sn_err *e) {
    sn_kernel **ks = p->kernels;
    *n_joined = 0;
    sn_status gs = gather(p, e);
    if (gs) return gs;
    for (int i = 0; i + 1 < p->n_kernels; i++) {
        while (i + 1 < p->n_kernels && may_join(ks[i], ks[i + 1])) {
            sn_status st = join(p, ks[i], ks[i + 1], e);
            if (st) return st;
            /* the weight shadows' kernels follow the step's in the one array (program.h) */
            memmove(ks + i + 1, ks + i + 2, sizeof *ks * (size_t)(p->n_kernels + p->n_shadows - i - 2));
            p->n_kernels--;
            p->shadows = ks + p->n_kernels;
            ++*n_joined;
        }
    }
    return SN_OK;
}
