/* codegen_util.c: see codegen_util.h. */
#include "codegen_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a graph, its reference values, and host copies of values as kernels read them ---- */

void tc_init(tcase *t, int lanes) {
    memset(t, 0, sizeof *t);
    t->g = sn_graph_new();
    t->seed = 12345;
    t->lanes = lanes;
}

void tc_free(tcase *t) {
    for (int i = 0; i < MAX_NODES; i++) free(t->host[i]);
    sn_interp_free(t->it);
    sn_graph_free(t->g);
}

float rnd(unsigned *s) { /* uniform in [0, 1) */
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f;
}

sn_node *in_f32(tcase *t, const char *name, sn_shape s, float lo, float hi) {
    sn_node *n = sn_input(t->g, name, SN_F32, s);
    ck_assert_msg(n && n->id < MAX_NODES, "input %s: %s", name, sn_graph_error(t->g));
    int64_t count = sn_numel(n);
    float *v = malloc(sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count; i++) v[i] = lo + (hi - lo) * rnd(&t->seed);
    t->host[n->id] = v;
    return n;
}

sn_node *in_i32(tcase *t, const char *name, sn_shape s, const int32_t *vals) {
    sn_node *n = sn_input(t->g, name, SN_I32, s);
    ck_assert_msg(n && n->id < MAX_NODES, "input %s: %s", name, sn_graph_error(t->g));
    size_t bytes = sizeof(int32_t) * (size_t)sn_numel(n);
    t->host[n->id] = malloc(bytes);
    memcpy(t->host[n->id], vals, bytes);
    return n;
}

/* Runs the reference interpreter over the whole graph (every value kept). */
void tc_run(tcase *t) {
    ck_assert_msg(!sn_graph_error(t->g), "graph: %s", sn_graph_error(t->g));
    sn_err e;
    t->it = sn_interp_new(t->g, false);
    sn_interp_keep_all(t->it, true);
    for (int i = 0; i < t->g->n_nodes; i++) {
        const sn_node *n = t->g->nodes[i];
        if (n->op != SN_OP_INPUT) continue;
        sn_status st = n->dtype == SN_I32 ? sn_interp_set_i32(t->it, n, t->host[i], &e)
                                          : sn_interp_set(t->it, n, t->host[i], &e);
        ck_assert_msg(st == SN_OK, "set: %s", e.msg);
    }
    ck_assert_msg(sn_interp_run(t->it, &e) == SN_OK, "interp: %s", e.msg);
}

/* The host copy of n's value: an input's data, else the interpreter's value as f32/i32. */
void *host_of(tcase *t, const sn_node *n) {
    ck_assert_int_lt(n->id, MAX_NODES);
    if (t->host[n->id]) return t->host[n->id];
    const double *v = sn_interp_value(t->it, n);
    ck_assert(v);
    int64_t count = sn_numel(n);
    if (n->dtype == SN_I32) {
        int32_t *h = malloc(sizeof(int32_t) * (size_t)count);
        for (int64_t i = 0; i < count; i++) h[i] = (int32_t)v[i];
        return t->host[n->id] = h;
    }
    float *h = malloc(sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count; i++) h[i] = (float)v[i];
    return t->host[n->id] = h;
}

/* ---- kernels made by hand ---- */

sn_jit *new_jit(int lanes) {
    sn_jit *j;
    sn_err e;
    char w[8];
    snprintf(w, sizeof w, "%d", lanes);
    if (lanes) setenv("SN_JIT_LANES", w, 1);
    sn_status st = sn_jit_new(&j, &e);
    unsetenv("SN_JIT_LANES");
    ck_assert_msg(st == SN_OK, "sn_jit_new: %s", e.msg);
    return j;
}

bool have_jit(const char *suite) {
    sn_jit *j;
    sn_err e;
    if (sn_jit_new(&j, &e) != SN_OK) {
        printf("%s: %s\n", suite, e.msg);
        return false;
    }
    sn_jit_free(j);
    return true;
}

/* A kernel computing node n alone (ROW, REDUCE, GATHER) with the item split llvm.h asks for. */
void node_kernel(sn_kernel *k, sn_kernel_kind kind, const sn_node *n) {
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->id = n->id;
    snprintf(k->name, sizeof k->name, "k%d_%s", n->id, sn_op_name(n->op));
    k->n_out = 1;
    k->args[0] = n;
    k->anchor = n;
    for (int i = 0; i < n->n_in; i++) {
        bool seen = false;
        for (int a = 1; a < 1 + k->n_in; a++) seen |= k->args[a] == n->in[i];
        if (!seen) k->args[1 + k->n_in++] = n->in[i];
    }
    const sn_node *x = n->in[0];
    switch (kind) {
    case SN_KER_ROW: /* a sum over every row: the PARTIAL kernel (check_kernel adds FINISH) */
        if (sn_row_facts_of(n->op) && sn_row_facts_of(n->op)->serial) k->stage = SN_SUM_PARTIAL;
        sn_kernel_work(k, &k->n_items, &k->serial);
        (void)x;
        break;
    case SN_KER_REDUCE: k->n_items = sn_numel(n); break;
    case SN_KER_GATHER: k->n_items = n->op == SN_OP_EMBEDDING ? sn_numel(n->in[1]) : 1; break;
    default: ck_abort_msg("node_kernel: kind %d", kind);
    }
}

void pw_init(pwk *p, const sn_node *space, int n_out, const sn_node *const *outs) {
    memset(p, 0, sizeof *p);
    sn_kernel *k = &p->k;
    k->kind = SN_KER_POINTWISE;
    snprintf(k->name, sizeof k->name, "k%d_pointwise", outs[0]->id);
    k->id = outs[0]->id;
    k->rank = space->rank;
    memcpy(k->shape, space->shape, sizeof k->shape);
    k->n_out = n_out;
    for (int o = 0; o < n_out; o++) k->args[o] = outs[o];
    k->instr = p->instr;
    k->access = p->acc;
    k->n_items = sn_numel(space);
}

static int pw_arg(pwk *p, const sn_node *x) {
    sn_kernel *k = &p->k;
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i] == x) return i;
    k->args[k->n_out + k->n_in] = x;
    return k->n_out + k->n_in++;
}

/* access of x at offset + sum i_d stride[d], optionally masked to [lo, hi) on axis */
sn_ref pw_access(pwk *p, const sn_node *x, int64_t offset, const int64_t *stride, int axis,
                        int64_t lo, int64_t hi) {
    sn_access a = {.arg = pw_arg(p, x), .offset = offset, .masked = axis >= 0, .mask_axis = axis,
                   .mask_lo = lo, .mask_hi = hi};
    memcpy(a.stride, stride, sizeof(int64_t) * (size_t)p->k.rank);
    p->acc[p->k.n_access] = a;
    return (sn_ref){.kind = SN_REF_ACCESS, .index = p->k.n_access++};
}

/* x read with numpy broadcasting into the index space */
static sn_ref pw_bcast(pwk *p, const sn_node *x) {
    int64_t st[SN_MAX_RANK] = {0}, s = 1;
    int r = p->k.rank, shift = r - x->rank;
    for (int d = r - 1; d >= 0; d--) {
        int dx = d - shift;
        st[d] = dx >= 0 && x->shape[dx] != 1 ? s : 0;
        if (dx >= 0) s *= x->shape[dx];
    }
    return pw_access(p, x, 0, st, -1, 0, 0);
}

int pw_op(pwk *p, const sn_node *n, int nin, const sn_ref *in) {
    sn_pw_instr *ins = &p->instr[p->k.n_instr];
    ins->node = n;
    ins->n_in = nin;
    for (int i = 0; i < nin; i++) ins->in[i] = in[i];
    return p->k.n_instr++;
}

/* n and the pointwise nodes under it as instructions; other nodes are accesses, FULLs constants */
sn_ref pw_chain(pwk *p, const sn_node *n) {
    for (int i = 0; i < p->k.n_instr; i++)
        if (p->instr[i].node == n) return (sn_ref){.kind = SN_REF_INSTR, .index = i};
    if (n->op == SN_OP_FULL) return (sn_ref){.kind = SN_REF_CONST, .value = n->a.f};
    if (sn_op_kind(n->op) != SN_K_POINTWISE) return pw_bcast(p, n);
    sn_ref in[3];
    for (int i = 0; i < n->n_in; i++) in[i] = pw_chain(p, n->in[i]);
    return (sn_ref){.kind = SN_REF_INSTR, .index = pw_op(p, n, n->n_in, in)};
}

void pw_store(pwk *p, int o, const sn_node *n) {
    for (int i = p->k.n_instr - 1; i >= 0; i--)
        if (p->instr[i].node == n) {
            p->k.store[o] = i;
            return;
        }
    ck_abort_msg("pw_store: %%%d is not an instruction", n->id);
}

/* one-output pointwise kernel of the chain under n */
void pw_of(pwk *p, const sn_node *n) {
    pw_init(p, n, 1, &n);
    pw_chain(p, n);
    pw_store(p, 0, n);
}

/* ---- running and comparing ---- */

sn_cpu_kernel_fn compile_one(sn_jit *j, sn_kernel *k) {
    sn_cpu_kernel_fn fn = NULL;
    sn_err e;
    ck_assert_msg(sn_jit_compile(j, &k, 1, &fn, &e) == SN_OK, "compile %s: %s", k->name, e.msg);
    ck_assert(fn);
    return fn;
}

/* Output o of k (in buf) against the interpreter; equal values (infinities too) agree. */
void compare_out(sn_interp *it, const sn_kernel *k, int o, const void *buf, double tol, const char *how) {
    const sn_node *n = k->args[o];
    int64_t count = sn_numel(n);
    const double *ref = sn_interp_value(it, n);
    double *got = malloc(sizeof(double) * (size_t)count), *want = malloc(sizeof(double) * (size_t)count);
    for (int64_t i = 0; i < count; i++) {
        got[i] = n->dtype == SN_I32 ? (double)((const int32_t *)buf)[i] : (double)((const float *)buf)[i];
        want[i] = ref[i];
        if (got[i] == want[i]) got[i] = want[i] = 0; /* -inf masks */
    }
    char what[160];
    snprintf(what, sizeof what, "%s out %d (%s, %s)", k->name, o, sn_op_name(n->op), how);
    sn_check_close(what, got, want, (size_t)count, tol, 1e-6);
    free(got);
    free(want);
}

/* Runs k over [0, n_items) whole, in two and in three uneven parts (serial kernels: whole
 * only), each time into NaN-poisoned outputs, and compares with the interpreter; a PARTIAL
 * kernel (kernel.h), each time followed by its FINISH kernel the same way. */
void check_kernel(tcase *t, sn_kernel *k, double tol) {
    sn_jit *j = new_jit(t->lanes);
    sn_cpu_kernel_fn fn = compile_one(j, k);
    void *bufs[SN_KER_MAX_ARGS + 1];
    for (int i = k->n_out; i < k->n_out + k->n_in; i++) bufs[i] = host_of(t, k->args[i]);
    sn_kernel fin = {.id = k->id};
    sn_cpu_kernel_fn finish = NULL;
    if (k->stage == SN_SUM_PARTIAL) {
        sn_sum_finish_fill(k, &fin);
        finish = compile_one(j, &fin);
    }
    int64_t n = k->n_items;
    int64_t cuts[3][4] = {{0, n, n, n}, {0, n * 2 / 5 + 1, n, n}, {0, n / 7, n / 7 + (n + 1) / 2, n}};
    static const char *const how[3] = {"whole", "2 parts", "3 parts"};
    for (int s = 0; s < (k->serial ? 1 : 3); s++) {
        for (int o = 0; o < k->n_out; o++) {
            size_t count = (size_t)sn_numel(k->args[o]);
            float *b = malloc(4 * count);
            for (size_t i = 0; i < count; i++) b[i] = NAN; /* i32 outputs: 0x7fc00000 */
            bufs[o] = b;
        }
        if (finish) bufs[k->n_out + k->n_in] = sn_test_scratch(k);
        for (int c = 0; c < 3; c++) {
            int64_t a = cuts[s][c] < n ? cuts[s][c] : n, b = cuts[s][c + 1] < n ? cuts[s][c + 1] : n;
            if (s == 0 && c > 0) break;
            fn(bufs, a, b);
        }
        fn(bufs, n, n); /* empty calls change nothing, serial kernels' sums included */
        fn(bufs, 0, 0);
        if (finish) { /* its outputs are the PARTIAL kernel's sums, in the same buffers */
            void *fb[SN_KER_MAX_ARGS + 1];
            for (int o = 0; o < fin.n_out; o++)
                for (int a = 0; a < k->n_out; a++)
                    if (k->args[a] == fin.args[o]) fb[o] = bufs[a];
            fb[fin.n_out] = sn_test_scratch(&fin);
            int64_t m = fin.n_items;
            finish(fb, m / 3, m); /* the last items first */
            finish(fb, 0, m / 3);
            finish(fb, m, m);
        }
        for (int o = 0; o < k->n_out; o++) {
            compare_out(t->it, k, o, bufs[o], tol, how[s]);
            free(bufs[o]);
        }
    }
    sn_jit_free(j);
}

void check_node(tcase *t, sn_kernel_kind kind, const sn_node *n, double tol) {
    sn_kernel k;
    node_kernel(&k, kind, n);
    check_kernel(t, &k, tol);
}
