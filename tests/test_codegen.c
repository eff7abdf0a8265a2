/* test_codegen.c: the LLVM code generator: every kernel kind and op JIT-compiled, run over the
 * whole item range and over uneven splits (as threads run them), and compared with the reference
 * interpreter; the inline math against libm; errors; and (printed, never asserted) speed.
 * Convention: kernels are made by hand from one node, or a chain of pointwise nodes, the way
 * passes/fuse.c makes them; outputs are poisoned with NaN before every run. */
#if __has_include(<llvm-c/Core.h>) && !defined(SN_HAVE_LLVM)
#define SN_HAVE_LLVM 1 /* the library is built with LLVM when its headers are on our path */
#endif

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codegen/llvm.h"
#include "../codegen/llvm_util.h"
#include "../frontend/sinter.h"
#include "../models/gpt2.h"
#include "../passes/pipeline.h"
#include "../passes/program.h"
#include "../runtime/interp.h"
#include "harness.h"

#define TOL 2e-6
#define MAX_NODES 1024

/* ---- a graph, its reference values, and host copies of values as kernels read them ---- */

typedef struct {
    sn_graph *g;
    sn_interp *it;
    void *host[MAX_NODES]; /* by node id: float* or int32_t* */
    unsigned seed;
    int lanes;             /* vector width of the JIT (0: the host's) */
} tcase;

/* Loop tests run at the host's vector width, then at 8 and 4 lanes (AVX2, SSE). */
#define LANES (_i == 1 ? 8 : _i == 2 ? 4 : 0)

static void tc_init(tcase *t, int lanes) {
    memset(t, 0, sizeof *t);
    t->g = sn_graph_new();
    t->seed = 12345;
    t->lanes = lanes;
}

static void tc_free(tcase *t) {
    for (int i = 0; i < MAX_NODES; i++) free(t->host[i]);
    sn_interp_free(t->it);
    sn_graph_free(t->g);
}

static float rnd(unsigned *s) { /* uniform in [0, 1) */
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f;
}

static sn_node *in_f32(tcase *t, const char *name, sn_shape s, float lo, float hi) {
    sn_node *n = sn_input(t->g, name, SN_F32, s);
    ck_assert_msg(n && n->id < MAX_NODES, "input %s: %s", name, sn_graph_error(t->g));
    int64_t count = sn_numel(n);
    float *v = malloc(sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count; i++) v[i] = lo + (hi - lo) * rnd(&t->seed);
    t->host[n->id] = v;
    return n;
}

static sn_node *in_i32(tcase *t, const char *name, sn_shape s, const int32_t *vals) {
    sn_node *n = sn_input(t->g, name, SN_I32, s);
    ck_assert_msg(n && n->id < MAX_NODES, "input %s: %s", name, sn_graph_error(t->g));
    size_t bytes = sizeof(int32_t) * (size_t)sn_numel(n);
    t->host[n->id] = malloc(bytes);
    memcpy(t->host[n->id], vals, bytes);
    return n;
}

/* Runs the reference interpreter over the whole graph (every value kept). */
static void tc_run(tcase *t) {
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
static void *host_of(tcase *t, const sn_node *n) {
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

static sn_jit *new_jit(int lanes) {
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

/* A kernel computing node n alone (ROW, REDUCE, GATHER) with the item split llvm.h asks for. */
static void node_kernel(sn_kernel *k, sn_kernel_kind kind, const sn_node *n) {
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
    case SN_KER_ROW:
        k->n_items = sn_numel(x) / (x->rank ? x->shape[x->rank - 1] : 1);
        k->serial = n->op == SN_OP_CROSS_ENTROPY || n->op == SN_OP_LAYERNORM_BWD_W ||
                    n->op == SN_OP_RMSNORM_BWD_W;
        break;
    case SN_KER_REDUCE: k->n_items = sn_numel(n); break;
    case SN_KER_GATHER: k->n_items = n->op == SN_OP_EMBEDDING ? sn_numel(n->in[1]) : 1; break;
    default: ck_abort_msg("node_kernel: kind %d", kind);
    }
}

/* A pointwise kernel under construction: instructions and accesses as fuse makes them. */
typedef struct {
    sn_kernel k;
    sn_pw_instr instr[32];
    sn_access acc[16];
} pwk;

static void pw_init(pwk *p, const sn_node *space, int n_out, const sn_node *const *outs) {
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
static sn_ref pw_access(pwk *p, const sn_node *x, int64_t offset, const int64_t *stride, int axis,
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

static int pw_op(pwk *p, const sn_node *n, int nin, const sn_ref *in) {
    sn_pw_instr *ins = &p->instr[p->k.n_instr];
    ins->node = n;
    ins->n_in = nin;
    for (int i = 0; i < nin; i++) ins->in[i] = in[i];
    return p->k.n_instr++;
}

/* n and the pointwise nodes under it as instructions; other nodes are accesses, FULLs constants */
static sn_ref pw_chain(pwk *p, const sn_node *n) {
    for (int i = 0; i < p->k.n_instr; i++)
        if (p->instr[i].node == n) return (sn_ref){.kind = SN_REF_INSTR, .index = i};
    if (n->op == SN_OP_FULL) return (sn_ref){.kind = SN_REF_CONST, .value = n->a.f};
    if (sn_op_kind(n->op) != SN_K_POINTWISE) return pw_bcast(p, n);
    sn_ref in[3];
    for (int i = 0; i < n->n_in; i++) in[i] = pw_chain(p, n->in[i]);
    return (sn_ref){.kind = SN_REF_INSTR, .index = pw_op(p, n, n->n_in, in)};
}

static void pw_store(pwk *p, int o, const sn_node *n) {
    for (int i = p->k.n_instr - 1; i >= 0; i--)
        if (p->instr[i].node == n) {
            p->k.store[o] = i;
            return;
        }
    ck_abort_msg("pw_store: %%%d is not an instruction", n->id);
}

/* one-output pointwise kernel of the chain under n */
static void pw_of(pwk *p, const sn_node *n) {
    pw_init(p, n, 1, &n);
    pw_chain(p, n);
    pw_store(p, 0, n);
}

/* ---- running and comparing ---- */

static sn_cpu_kernel_fn compile_one(sn_jit *j, sn_kernel *k) {
    sn_cpu_kernel_fn fn = NULL;
    sn_err e;
    ck_assert_msg(sn_jit_compile(j, &k, 1, &fn, &e) == SN_OK, "compile %s: %s", k->name, e.msg);
    ck_assert(fn);
    return fn;
}

/* Output o of k (in buf) against the interpreter; equal values (infinities too) agree. */
static void compare_out(sn_interp *it, const sn_kernel *k, int o, const void *buf, double tol, const char *how) {
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
 * only), each time into NaN-poisoned outputs, and compares with the interpreter. */
static void check_kernel(tcase *t, sn_kernel *k, double tol) {
    sn_jit *j = new_jit(t->lanes);
    sn_cpu_kernel_fn fn = compile_one(j, k);
    void *bufs[SN_KER_MAX_ARGS];
    for (int i = k->n_out; i < k->n_out + k->n_in; i++) bufs[i] = host_of(t, k->args[i]);
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
        for (int c = 0; c < 3; c++) {
            int64_t a = cuts[s][c] < n ? cuts[s][c] : n, b = cuts[s][c + 1] < n ? cuts[s][c + 1] : n;
            if (s == 0 && c > 0) break;
            fn(bufs, a, b);
        }
        fn(bufs, n, n); /* empty calls change nothing, serial kernels' sums included */
        fn(bufs, 0, 0);
        for (int o = 0; o < k->n_out; o++) {
            compare_out(t->it, k, o, bufs[o], tol, how[s]);
            free(bufs[o]);
        }
    }
    sn_jit_free(j);
}

static void check_node(tcase *t, sn_kernel_kind kind, const sn_node *n, double tol) {
    sn_kernel k;
    node_kernel(&k, kind, n);
    check_kernel(t, &k, tol);
}

/* ---- pointwise ---- */

typedef sn_node *(*unary_fn)(sn_graph *, sn_node *);

START_TEST(test_pw_unary) {
    static const struct { unary_fn f; float lo, hi; } ops[] = {
        {sn_neg, -4, 4}, {sn_exp, -20, 20}, {sn_log, 1e-3f, 50}, {sn_tanh, -6, 6},
        {sn_sqrt, 0, 9}, {sn_rsqrt, 0.01f, 9}, {sn_gelu, -8, 8}, {sn_silu, -12, 12},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        tcase t;
        tc_init(&t, LANES);
        sn_node *x = in_f32(&t, "x", SN_SHAPE(3, 37), ops[i].lo, ops[i].hi);
        sn_node *y = ops[i].f(t.g, x);
        tc_run(&t);
        pwk p;
        pw_of(&p, y);
        check_kernel(&t, &p.k, TOL);
        tc_free(&t);
    }
    tcase t;
    tc_init(&t, LANES);
    sn_node *y = sn_scale(t.g, in_f32(&t, "x", SN_SHAPE(101), -3, 3), -0.75f);
    tc_run(&t);
    pwk p;
    pw_of(&p, y);
    check_kernel(&t, &p.k, TOL);
    tc_free(&t);
}
END_TEST

typedef sn_node *(*binary_fn)(sn_graph *, sn_node *, sn_node *);

/* every binary op with b broadcast from several shapes into a (4, 5, 37) */
START_TEST(test_pw_binary_broadcast) {
    static const binary_fn ops[] = {sn_add, sn_sub, sn_mul, sn_div, sn_gelu_bwd, sn_silu_bwd};
    static const sn_shape bs[] = {SN_SHAPE(37), SN_SHAPE(5, 1), SN_SHAPE(4, 1, 37), SN_SCALAR,
                                  SN_SHAPE(4, 5, 37)};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t s = 0; s < sizeof bs / sizeof bs[0]; s++) {
            tcase t;
            tc_init(&t, LANES);
            sn_node *a = in_f32(&t, "a", SN_SHAPE(4, 5, 37), -3, 3);
            sn_node *b = in_f32(&t, "b", bs[s], 0.5f, 2);
            sn_node *y = ops[o](t.g, a, b);
            sn_node *y2 = ops[o](t.g, b, a); /* broadcast on the other side */
            tc_run(&t);
            pwk p;
            pw_of(&p, y);
            check_kernel(&t, &p.k, TOL);
            pw_of(&p, y2);
            check_kernel(&t, &p.k, TOL);
            tc_free(&t);
        }
}
END_TEST

/* eq on small integers (exact hits), and casts between i32 and f32 with truncation */
START_TEST(test_pw_eq_cast) {
    tcase t;
    tc_init(&t, LANES);
    int32_t ids[5 * 19];
    for (int i = 0; i < 5 * 19; i++) ids[i] = (i * 7) % 5 - 2;
    sn_node *x = in_i32(&t, "x", SN_SHAPE(5, 19), ids);
    sn_node *f = in_f32(&t, "f", SN_SHAPE(19), -2, 2);
    sn_node *xf = sn_cast(t.g, x, SN_F32);
    sn_node *eq = sn_eq(t.g, xf, sn_cast(t.g, sn_cast(t.g, f, SN_I32), SN_F32));
    sn_node *back = sn_cast(t.g, sn_scale(t.g, xf, 0.75f), SN_I32); /* -1.5 -> -1 */
    tc_run(&t);
    pwk p;
    pw_of(&p, eq);
    check_kernel(&t, &p.k, 0);
    pw_of(&p, back);
    check_kernel(&t, &p.k, 0);
    tc_free(&t);
}
END_TEST

/* a permuted access: the last dim strided (a gather), and a permutation keeping it */
START_TEST(test_pw_permute) {
    for (int keep = 0; keep <= 1; keep++) {
        tcase t;
        tc_init(&t, LANES);
        sn_node *x = in_f32(&t, "x", SN_SHAPE(3, 4, 37), -2, 2);
        static const int perms[2][3] = {{2, 0, 1}, {1, 0, 2}};
        sn_node *v = sn_permute(t.g, x, perms[keep]);
        sn_node *y = sn_exp(t.g, v);
        tc_run(&t);
        pwk p;
        pw_init(&p, y, 1, (const sn_node *[]){y});
        int64_t xs[3] = {4 * 37, 37, 1}, st[3];
        for (int d = 0; d < 3; d++) st[d] = xs[perms[keep][d]];
        sn_ref a = pw_access(&p, x, 0, st, -1, 0, 0);
        sn_ref in = {.kind = SN_REF_INSTR, .index = pw_op(&p, v, 1, &a)}; /* the view's copy */
        pw_op(&p, y, 1, &in);
        pw_store(&p, 0, y);
        check_kernel(&t, &p.k, TOL);
        tc_free(&t);
    }
}
END_TEST

/* slices on the last and the first axis fold into offsets */
START_TEST(test_pw_slice) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(6, 40), -2, 2);
    sn_node *s1 = sn_slice(t.g, x, 1, 3, 38), *y1 = sn_tanh(t.g, s1);
    sn_node *s0 = sn_slice(t.g, x, 0, 2, 5), *y0 = sn_neg(t.g, s0);
    tc_run(&t);
    pwk p;
    pw_init(&p, y1, 1, (const sn_node *[]){y1});
    sn_ref a = pw_access(&p, x, 3, (int64_t[]){40, 1}, -1, 0, 0);
    pw_op(&p, y1, 1, &a);
    pw_store(&p, 0, y1);
    check_kernel(&t, &p.k, TOL);
    pw_init(&p, y0, 1, (const sn_node *[]){y0});
    a = pw_access(&p, x, 2 * 40, (int64_t[]){40, 1}, -1, 0, 0);
    pw_op(&p, y0, 1, &a);
    pw_store(&p, 0, y0);
    check_kernel(&t, &p.k, 0);
    tc_free(&t);
}
END_TEST

/* pads are masked accesses: on the last axis (lane masks) and on an outer axis (row masks) */
START_TEST(test_pw_pad) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(6, 30), -2, 2);
    sn_node *p1 = sn_pad(t.g, x, 1, 3, 37), *y1 = sn_exp(t.g, p1);
    sn_node *p0 = sn_pad(t.g, x, 0, 2, 9), *y0 = sn_scale(t.g, p0, 3);
    tc_run(&t);
    pwk p;
    pw_init(&p, y1, 1, (const sn_node *[]){y1});
    sn_ref a = pw_access(&p, x, -3, (int64_t[]){30, 1}, 1, 3, 33);
    pw_op(&p, y1, 1, &a);
    pw_store(&p, 0, y1);
    check_kernel(&t, &p.k, TOL);
    pw_init(&p, y0, 1, (const sn_node *[]){y0});
    a = pw_access(&p, x, -2 * 30, (int64_t[]){30, 1}, 0, 2, 8);
    pw_op(&p, y0, 1, &a);
    pw_store(&p, 0, y0);
    check_kernel(&t, &p.k, 0);
    tc_free(&t);
}
END_TEST

/* concat as masked accesses that add up, on the last and on the first axis */
START_TEST(test_pw_concat) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *a = in_f32(&t, "a", SN_SHAPE(5, 10), -2, 2), *b = in_f32(&t, "b", SN_SHAPE(5, 27), -2, 2);
    sn_node *c = sn_concat(t.g, 2, (sn_node *[]){a, b}, 1), *y = sn_scale(t.g, c, 2);
    sn_node *d = in_f32(&t, "d", SN_SHAPE(3, 37), -2, 2);
    sn_node *c0 = sn_concat(t.g, 2, (sn_node *[]){y, d}, 0); /* (8, 37) copy */
    tc_run(&t);
    pwk p;
    pw_init(&p, y, 1, (const sn_node *[]){y});
    sn_ref parts[2] = {pw_access(&p, a, 0, (int64_t[]){10, 1}, 1, 0, 10),
                       pw_access(&p, b, -10, (int64_t[]){27, 1}, 1, 10, 37)};
    sn_ref cat = {.kind = SN_REF_INSTR, .index = pw_op(&p, c, 2, parts)};
    pw_op(&p, y, 1, &cat);
    pw_store(&p, 0, y);
    check_kernel(&t, &p.k, 0);
    pw_init(&p, c0, 1, (const sn_node *[]){c0});
    parts[0] = pw_access(&p, y, 0, (int64_t[]){37, 1}, 0, 0, 5);
    parts[1] = pw_access(&p, d, -5 * 37, (int64_t[]){37, 1}, 0, 5, 8);
    pw_op(&p, c0, 2, parts);
    pw_store(&p, 0, c0);
    check_kernel(&t, &p.k, 0);
    tc_free(&t);
}
END_TEST

/* y = gelu(x * 0.5 + b): three instructions, a folded constant, the middle value stored too */
START_TEST(test_pw_chain_const) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(7, 3, 37), -4, 4), *b = in_f32(&t, "b", SN_SHAPE(37), -1, 1);
    sn_node *m = sn_mul(t.g, x, sn_scalar(t.g, SN_F32, 0.5f));
    sn_node *s = sn_add(t.g, m, b), *y = sn_gelu(t.g, s);
    tc_run(&t);
    pwk p;
    pw_init(&p, y, 2, (const sn_node *[]){y, s});
    pw_chain(&p, y);
    pw_store(&p, 0, y);
    pw_store(&p, 1, s);
    ck_assert_int_eq(p.k.n_instr, 3);
    ck_assert_int_eq(p.instr[0].in[1].kind, SN_REF_CONST);
    check_kernel(&t, &p.k, TOL);
    tc_free(&t);
}
END_TEST

/* a rank-0 index space, a space of size-1 dims, a constant */
START_TEST(test_pw_scalar) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *s = in_f32(&t, "s", SN_SCALAR, 0.5f, 1);
    sn_node *y = sn_exp(t.g, s);
    sn_node *u = in_f32(&t, "u", SN_SHAPE(1, 1, 37), -1, 1);
    sn_node *z = sn_add(t.g, u, s);
    sn_node *f = sn_full(t.g, SN_F32, SN_SHAPE(3, 37), 2.5f); /* a materialised FULL: no inputs */
    tc_run(&t);
    pwk p;
    pw_of(&p, y);
    check_kernel(&t, &p.k, TOL);
    pw_of(&p, z);
    check_kernel(&t, &p.k, TOL);
    pw_init(&p, f, 1, (const sn_node *[]){f});
    pw_op(&p, f, 0, NULL);
    check_kernel(&t, &p.k, 0);
    tc_free(&t);
}
END_TEST

/* exp, log and tanh against libm over wide ranges and at the special values */
START_TEST(test_pw_math_accuracy) {
    enum { N = 4099 };
    static const sn_op ops[3] = {SN_OP_EXP, SN_OP_LOG, SN_OP_TANH};
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (int o = 0; o < 3; o++) {
        tcase t;
        tc_init(&t, LANES);
        sn_node *in = sn_input(t.g, "x", SN_F32, SN_SHAPE(N));
        sn_node *f = ops[o] == SN_OP_EXP ? sn_exp(t.g, in) : ops[o] == SN_OP_LOG ? sn_log(t.g, in) : sn_tanh(t.g, in);
        pwk p;
        pw_of(&p, f);
        sn_jit *j = new_jit(LANES);
        sn_cpu_kernel_fn fn = compile_one(j, &p.k);
        static const float special[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1.0f, -1.0f, 100.0f,
                                        -100.0f, 88.7f, 89.0f, -103.0f, -110.0f, 1e-40f, 3e-45f,
                                        1e-30f, 0.625f, -0.625f, 0.62499f, 9.5f, -9.5f, 1e-8f, -1e-8f};
        int ns = (int)(sizeof special / sizeof special[0]);
        for (int i = 0; i < N; i++) {
            double u = (double)i / (N - 1);
            x[i] = i < ns ? special[i]
                 : ops[o] == SN_OP_EXP ? (float)(-104 + 193 * u)
                 : ops[o] == SN_OP_LOG ? (float)exp(-95 + 190 * u)
                                       : (float)(-10 + 20 * u);
        }
        void *bufs[2] = {y, x};
        fn(bufs, 0, N);
        double worst = 0;
        int at = 0;
        for (int i = 0; i < N; i++) {
            double want = ops[o] == SN_OP_EXP ? exp((double)x[i]) : ops[o] == SN_OP_LOG ? log((double)x[i]) : tanh((double)x[i]);
            want = (double)(float)want;
            bool ok;
            double err = 0;
            if (isnan(want)) ok = isnan(y[i]);
            else if (isinf(want) || want == 0) ok = y[i] == want && !signbit(y[i]) == !signbit(want);
            else {
                double scale = fabs(want) < 1.17549435e-38 ? 1.4e-45 : fabs(want); /* subnormals: in ulps */
                err = fabs(y[i] - want) / scale;
                ok = err <= (ops[o] == SN_OP_TANH ? 4e-7 : 3e-7) || (fabs(want) < 1.2e-38 && fabs(y[i] - want) <= 2e-45);
            }
            ck_assert_msg(ok, "%s(%.9g) = %.9g, want %.9g", sn_op_name(ops[o]), (double)x[i], (double)y[i], want);
            if (err > worst && fabs(want) > 1.2e-38) worst = err, at = i;
        }
        printf("math: %-4s worst relative error %.2g at x = %.9g\n", sn_op_name(ops[o]), worst, (double)x[at]);
        sn_jit_free(j);
        tc_free(&t);
    }
    free(x);
    free(y);
}
END_TEST

/* ---- row ops ---- */

START_TEST(test_row_ops) {
    static const int64_t Cs[] = {37, 64, 5, 1};
    for (size_t c = 0; c < sizeof Cs / sizeof Cs[0]; c++) {
        int64_t C = Cs[c];
        tcase t;
        tc_init(&t, LANES);
        sn_node *x = in_f32(&t, "x", SN_SHAPE(3, 5, C), -3, 3);
        sn_node *w = in_f32(&t, "w", SN_SHAPE(C), 0.5f, 1.5f), *b = in_f32(&t, "b", SN_SHAPE(C), -1, 1);
        sn_node *dy = in_f32(&t, "dy", SN_SHAPE(3, 5, C), -1, 1);
        sn_node *sm = sn_softmax(t.g, x);
        sn_node *nodes[] = {
            sm, sn_softmax_bwd(t.g, sm, dy),
            sn_layernorm(t.g, x, w, b, 1e-5f), sn_layernorm_bwd(t.g, x, w, dy, 1e-5f),
            sn_layernorm_bwd_w(t.g, x, dy, 1e-5f),
            sn_rmsnorm(t.g, x, w, 1e-5f), sn_rmsnorm_bwd(t.g, x, w, dy, 1e-5f),
            sn_rmsnorm_bwd_w(t.g, x, dy, 1e-5f),
        };
        tc_run(&t);
        for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
            /* C = 1: the norms' gradients cancel (1 - xhat^2 ~ 0): what is left is rounding noise */
            double tol = C == 1 && (i == 3 || i == 4 || i == 6) ? 1e-3 : 1e-5;
            check_node(&t, SN_KER_ROW, nodes[i], tol);
        }
        tc_free(&t);
    }
}
END_TEST

START_TEST(test_causal_mask) {
    static const sn_shape shapes[] = {SN_SHAPE(2, 5, 37), SN_SHAPE(2, 19, 19), SN_SHAPE(3, 2, 7, 40)};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        tcase t;
        tc_init(&t, LANES);
        sn_node *y = sn_causal_mask_fill(t.g, in_f32(&t, "x", shapes[s], -2, 2), -1e4f);
        tc_run(&t);
        check_node(&t, SN_KER_ROW, y, 0);
        tc_free(&t);
    }
}
END_TEST

START_TEST(test_cross_entropy) {
    for (int big = 0; big <= 1; big++) {
        tcase t;
        tc_init(&t, LANES);
        int32_t tg[15];
        for (int i = 0; i < 15; i++) tg[i] = i % 4 == 1 ? -1 : (i * 11) % 37; /* some ignored */
        sn_node *lg = in_f32(&t, "logits", SN_SHAPE(3, 5, 37), big ? -60 : -3, big ? 60 : 3);
        sn_node *tn = in_i32(&t, "targets", SN_SHAPE(3, 5), tg);
        sn_node *dl = in_f32(&t, "dloss", SN_SCALAR, 0.5f, 2);
        sn_node *loss = sn_cross_entropy(t.g, lg, tn, -1);
        sn_node *grad = sn_cross_entropy_bwd(t.g, lg, tn, dl, -1);
        tc_run(&t);
        check_node(&t, SN_KER_ROW, loss, 1e-6);
        check_node(&t, SN_KER_ROW, grad, TOL);
        tc_free(&t);
    }
}
END_TEST

/* attribute end > 0: only the first `end` classes are real; the same as slicing them off */
START_TEST(test_cross_entropy_padded) {
    tcase t;
    tc_init(&t, LANES);
    int32_t tg[6] = {0, 29, -1, 5, 17, 3};
    sn_node *lg = in_f32(&t, "logits", SN_SHAPE(6, 37), -3, 3);
    sn_node *tn = in_i32(&t, "targets", SN_SHAPE(6), tg);
    sn_node *dl = in_f32(&t, "dloss", SN_SCALAR, 1, 1);
    sn_node *real = sn_slice(t.g, lg, 1, 0, 30);
    sn_node *ref_loss = sn_cross_entropy(t.g, real, tn, -1);
    sn_node *ref_grad = sn_pad(t.g, sn_cross_entropy_bwd(t.g, real, tn, dl, -1), 1, 0, 37);
    sn_node *loss = sn_cross_entropy(t.g, lg, tn, -1), *grad = sn_cross_entropy_bwd(t.g, lg, tn, dl, -1);
    tc_run(&t);
    loss->a.end = grad->a.end = 30; /* the interpreter ran without it: only the kernels see it */
    sn_kernel k;
    sn_jit *j = new_jit(LANES);
    void *bufs[4] = {NULL, host_of(&t, lg), host_of(&t, tn), host_of(&t, dl)};
    float lv = NAN, *gv = malloc(sizeof(float) * 6 * 37);
    node_kernel(&k, SN_KER_ROW, loss);
    bufs[0] = &lv;
    compile_one(j, &k)(bufs, 0, 6);
    node_kernel(&k, SN_KER_ROW, grad);
    bufs[0] = gv;
    compile_one(j, &k)(bufs, 0, 6);
    double got_loss = lv, *got_grad = malloc(sizeof(double) * 6 * 37);
    for (int i = 0; i < 6 * 37; i++) got_grad[i] = gv[i];
    sn_check_close("padded loss", &got_loss, sn_interp_value(t.it, ref_loss), 1, 1e-6, 1e-6);
    sn_check_close("padded grad", got_grad, sn_interp_value(t.it, ref_grad), 6 * 37, TOL, 1e-6);
    free(gv);
    free(got_grad);
    sn_jit_free(j);
    tc_free(&t);
}
END_TEST

/* ---- reductions ---- */

START_TEST(test_reduce) {
    typedef sn_node *(*red_fn)(sn_graph *, sn_node *, int, bool);
    static const red_fn ops[] = {sn_sum, sn_mean, sn_max};
    static const sn_shape shapes[] = {SN_SHAPE(4, 5, 37), SN_SHAPE(40, 3), SN_SHAPE(70)};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int axis = 0; axis < shapes[s].rank; axis++) {
            tcase t;
            tc_init(&t, LANES);
            sn_node *x = in_f32(&t, "x", shapes[s], -3, 3);
            sn_node *ys[3];
            for (int o = 0; o < 3; o++) ys[o] = ops[o](t.g, x, axis, (axis + o) % 2);
            tc_run(&t);
            for (int o = 0; o < 3; o++) check_node(&t, SN_KER_REDUCE, ys[o], 1e-6);
            tc_free(&t);
        }
}
END_TEST

/* ---- gather ---- */

START_TEST(test_embedding) {
    static const int64_t Cs[] = {37, 100, 16};
    for (size_t c = 0; c < sizeof Cs / sizeof Cs[0]; c++) {
        int64_t C = Cs[c];
        tcase t;
        tc_init(&t, LANES);
        int32_t ids[21];
        for (int i = 0; i < 21; i++) ids[i] = (i * 5) % 7; /* repeats; rows 7..10 never used */
        sn_node *table = in_f32(&t, "table", SN_SHAPE(11, C), -1, 1);
        sn_node *idn = in_i32(&t, "ids", SN_SHAPE(3, 7), ids);
        sn_node *dy = in_f32(&t, "dy", SN_SHAPE(3, 7, C), -1, 1);
        sn_node *y = sn_embedding(t.g, table, idn), *dt = sn_embedding_bwd(t.g, idn, dy, 11);
        tc_run(&t);
        check_node(&t, SN_KER_GATHER, y, 0);
        static const int64_t blocks[] = {1, 2, 3, 7};
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
            sn_kernel k;
            node_kernel(&k, SN_KER_GATHER, dt);
            k.n_items = blocks[b];
            check_kernel(&t, &k, 1e-6);
        }
        tc_free(&t);
    }
}
END_TEST

/* a bad id reads nothing out of bounds: its row is NaN, and it adds nothing to the scatter */
START_TEST(test_embedding_bad_id) {
    tcase t;
    tc_init(&t, LANES);
    int32_t ids[4] = {1, 99, -5, 1};
    sn_node *table = in_f32(&t, "table", SN_SHAPE(3, 20), -1, 1);
    sn_node *idn = in_i32(&t, "ids", SN_SHAPE(4), ids);
    sn_node *dy = in_f32(&t, "dy", SN_SHAPE(4, 20), -1, 1);
    sn_node *y = sn_embedding(t.g, table, idn), *dt = sn_embedding_bwd(t.g, idn, dy, 3);
    sn_kernel k;
    sn_jit *j = new_jit(LANES);
    float out[4 * 20], grad[3 * 20];
    float *tb = t.host[table->id], *d = t.host[dy->id];
    node_kernel(&k, SN_KER_GATHER, y);
    compile_one(j, &k)((void *[]){out, tb, t.host[idn->id]}, 0, 4);
    node_kernel(&k, SN_KER_GATHER, dt);
    compile_one(j, &k)((void *[]){grad, t.host[idn->id], d}, 0, 1);
    for (int c = 0; c < 20; c++) {
        ck_assert(out[c] == tb[20 + c] && isnan(out[20 + c]) && isnan(out[40 + c]));
        ck_assert(grad[c] == 0 && grad[40 + c] == 0);
        ck_assert_float_eq_tol(grad[20 + c], d[c] + d[60 + c], 1e-6);
    }
    sn_jit_free(j);
    tc_free(&t);
}
END_TEST

/* ---- adamw ---- */

START_TEST(test_adamw) {
    enum { N = 1003 };
    float p[N], m[N], v[N], g[N], p2[N], m2[N], v2[N];
    float h[SN_ADAMW_HYPER] = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.9f * 0.9f * 0.9f,
                               1 - 0.95f * 0.95f * 0.95f, 0.5f};
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        p[i] = rnd(&seed) - 0.5f;
        m[i] = 0.1f * (rnd(&seed) - 0.5f);
        v[i] = 0.01f * rnd(&seed);
        g[i] = rnd(&seed) - 0.5f;
    }
    memcpy(p2, p, sizeof p);
    memcpy(m2, m, sizeof m);
    memcpy(v2, v, sizeof v);
    for (int i = 0; i < N; i++) { /* the plain loop */
        float gs = g[i] * h[7];
        m2[i] = h[1] * m2[i] + (1 - h[1]) * gs;
        v2[i] = h[2] * v2[i] + (1 - h[2]) * gs * gs;
        p2[i] -= h[0] * ((m2[i] / h[5]) / (sqrtf(v2[i] / h[6]) + h[3]) + h[4] * p2[i]);
    }
    sn_kernel k = {.kind = SN_KER_ADAMW, .name = "k0_adamw", .n_items = N};
    sn_jit *j = new_jit(LANES);
    sn_cpu_kernel_fn fn = compile_one(j, &k);
    void *bufs[SN_ADAMW_BUFS] = {p, m, v, g, h};
    fn(bufs, 0, 400);
    fn(bufs, 400, 401);
    fn(bufs, 401, N);
    double got[N], want[N];
    float *pairs[3][2] = {{p, p2}, {m, m2}, {v, v2}};
    static const char *const names[3] = {"adamw p", "adamw m", "adamw v"};
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < N; i++) got[i] = pairs[b][0][i], want[i] = pairs[b][1][i];
        sn_check_close(names[b], got, want, N, 1e-6, 1e-6);
    }
    sn_jit_free(j);
}
END_TEST

/* ---- errors, IR text, batches, threads ---- */

#ifdef SN_HAVE_LLVM
START_TEST(test_verifier) {
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("bad", ctx);
    sn_ll L;
    sn_ll_init(&L, mod, 16, NULL, NULL);
    sn_ll_fn_begin(&L, "k0_no_return");
    sn_ll_buf(&L, 0, SN_F32, "x"); /* and no terminator */
    sn_err e;
    sn_status st = sn_ll_verify(mod, &e);
    ck_assert_int_ne(st, SN_OK);
    ck_assert_msg(strstr(e.msg, "does not have terminator") && strstr(e.msg, "llvm_jit.c:"),
                  "message: %s", e.msg);
    sn_ll_fn_end(&L); /* mended, it passes */
    ck_assert_msg(sn_ll_verify(mod, &e) == SN_OK, "%s", e.msg);
    sn_ll_done(&L);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
}
END_TEST
#endif

static void expect_fail(sn_jit *j, sn_kernel *k, sn_status code, const char *part) {
    sn_err e;
    sn_cpu_kernel_fn fn = (sn_cpu_kernel_fn)1;
    sn_status st = sn_jit_compile(j, &k, 1, &fn, &e);
    ck_assert_msg(st == code, "%s: status %s, expected %s (%s)", k->name, sn_status_name(st),
                  sn_status_name(code), st ? e.msg : "");
    ck_assert_msg(strstr(e.msg, part), "message \"%s\" lacks \"%s\"", e.msg, part);
    ck_assert(fn == NULL);
}

START_TEST(test_errors) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *a = in_f32(&t, "a", SN_SHAPE(4, 8), -1, 1), *b = in_f32(&t, "b", SN_SHAPE(8, 3), -1, 1);
    sn_node *mm = sn_matmul(t.g, a, b), *lse = sn_softmax(t.g, a);
    int32_t tg[4] = {0, 1, 2, 3};
    sn_node *loss = sn_cross_entropy(t.g, a, in_i32(&t, "t", SN_SHAPE(4), tg), -1);
    sn_node *h = sn_cast(t.g, a, SN_BF16), *hy = sn_exp(t.g, h);
    ck_assert_msg(!sn_graph_error(t.g), "%s", sn_graph_error(t.g));
    sn_jit *j = new_jit(LANES);
    sn_kernel k;
    node_kernel(&k, SN_KER_ROW, mm);
    k.kind = SN_KER_GEMM;
    expect_fail(j, &k, SN_ERR_UNSUPPORTED, "library");
    node_kernel(&k, SN_KER_ROW, lse);
    k.n_items = 3;
    expect_fail(j, &k, SN_ERR_INVALID, "n_items is 3");
    node_kernel(&k, SN_KER_ROW, loss);
    k.serial = false;
    expect_fail(j, &k, SN_ERR_INVALID, "serial");
    pwk p;
    pw_of(&p, hy);
    expect_fail(j, &p.k, SN_ERR_UNSUPPORTED, "bf16");
    sn_kernel k2;
    node_kernel(&k, SN_KER_ROW, lse);
    node_kernel(&k2, SN_KER_ROW, lse);
    sn_kernel *two[2] = {&k, &k2};
    sn_cpu_kernel_fn fns[2];
    sn_err e;
    ck_assert_int_eq(sn_jit_compile(j, two, 2, fns, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "unique"), "%s", e.msg);
    k2.name[1] = '9'; /* renamed, the batch compiles, and the jit is still usable */
    ck_assert_msg(sn_jit_compile(j, two, 2, fns, &e) == SN_OK, "%s", e.msg);
    ck_assert(fns[0] && fns[0] == fns[1]); /* identical kernels share code */
    sn_cpu_kernel_fn again[2];
    ck_assert_msg(sn_jit_compile(j, two, 2, again, &e) == SN_OK, "%s", e.msg); /* nothing new */
    ck_assert_msg(again[0] == fns[0] && again[1] == fns[0], "%p %p %p %p", (void *)fns[0], (void *)fns[1], (void *)again[0], (void *)again[1]);
    ck_assert_int_eq(sn_jit_get_stats(j).shared, 3);
    sn_jit_free(j);
    setenv("SN_JIT_LANES", "12", 1);
    sn_status st = sn_jit_new(&j, &e);
    unsetenv("SN_JIT_LANES");
    ck_assert_int_eq(st, SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "SN_JIT_LANES=12: the vector width must be 4, 8 or 16"), "%s", e.msg);
    tc_free(&t);
}
END_TEST

START_TEST(test_ir_text) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(4, 768), -1, 1), *w = in_f32(&t, "w", SN_SHAPE(768), -1, 1);
    sn_node *y = sn_layernorm(t.g, x, w, in_f32(&t, "b", SN_SHAPE(768), -1, 1), 1e-5f);
    sn_kernel k;
    node_kernel(&k, SN_KER_ROW, y);
    sn_jit *j = new_jit(LANES);
    char *raw, *opt;
    sn_err e;
    ck_assert_msg(sn_jit_kernel_ir(j, &k, false, &raw, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_jit_kernel_ir(j, &k, true, &opt, &e) == SN_OK, "%s", e.msg);
    char want[96];
    snprintf(want, sizeof want, "define void @%s(", k.name);
    ck_assert_msg(strstr(raw, want) && strstr(opt, want), "no %s in:\n%s", want, raw);
    ck_assert_msg(strstr(raw, "%rstd") && strstr(raw, "%mean") && strstr(raw, "r.body"), "names:\n%s", raw);
    ck_assert_msg(strstr(opt, " x float>"), "not vectorised:\n%s", opt);
    printf("ir: %s: %zu bytes raw, %zu optimised, target %s\n", k.name, strlen(raw), strlen(opt), sn_jit_target(j));
    free(raw);
    free(opt);
    sn_jit_free(j);
    tc_free(&t);
}
END_TEST

/* a batch of many kernels: one module, one link */
START_TEST(test_batch) {
    tcase t;
    tc_init(&t, LANES);
    enum { N = 96 };
    sn_node *x = in_f32(&t, "x", SN_SHAPE(8, 37), -2, 2), *w = in_f32(&t, "w", SN_SHAPE(37), 0.5f, 1);
    sn_node *nodes[N];
    sn_node *cur = x;
    for (int i = 0; i < N; i++) {
        sn_node *c = sn_scalar(t.g, SN_F32, 1 + 0.01f * (float)i); /* folded: kernels differ */
        switch (i % 4) {
        case 0: cur = sn_gelu(t.g, sn_add(t.g, sn_mul(t.g, cur, c), w)); break;
        case 1: cur = sn_softmax(t.g, cur); break; /* these share one function */
        case 2: cur = sn_layernorm(t.g, cur, w, w, 1e-5f * (float)(i + 1)); break;
        case 3: cur = sn_mul(t.g, sn_tanh(t.g, cur), sn_mul(t.g, w, c)); break;
        }
        nodes[i] = cur;
    }
    tc_run(&t);
    pwk *pws = calloc(N, sizeof *pws);
    sn_kernel *ks = calloc(N, sizeof *ks), *kp[N];
    for (int i = 0; i < N; i++) {
        if (i % 4 == 1 || i % 4 == 2) node_kernel(&ks[i], SN_KER_ROW, nodes[i]);
        else {
            pw_of(&pws[i], nodes[i]);
            ks[i] = pws[i].k;
        }
        kp[i] = &ks[i];
    }
    sn_jit *j = new_jit(LANES);
    sn_cpu_kernel_fn fns[N];
    sn_err e;
    ck_assert_msg(sn_jit_compile(j, kp, N, fns, &e) == SN_OK, "%s", e.msg);
    sn_jit_stats s = sn_jit_get_stats(j);
    printf("batch: %d kernels (%d distinct) compiled in %.0f ms (build+verify %.0f, O3 %.0f, "
           "codegen+link %.0f)\n", s.kernels, s.kernels - s.shared, s.build_ms + s.opt_ms + s.link_ms,
           s.build_ms, s.opt_ms, s.link_ms);
    ck_assert_int_eq(s.shared, N / 4 - 1);
    for (int i = 0; i < N; i += 7) { /* spot checks */
        void *bufs[SN_KER_MAX_ARGS];
        float out[8 * 37];
        bufs[0] = out;
        for (int a = 1; a < 1 + ks[i].n_in; a++) bufs[a] = host_of(&t, ks[i].args[a]);
        fns[i](bufs, 0, ks[i].n_items);
        compare_out(t.it, &ks[i], 0, out, 1e-5, "batch");
    }
    sn_jit_free(j);
    free(pws);
    free(ks);
    tc_free(&t);
}
END_TEST

typedef struct {
    tcase *t;
    sn_kernel *k;
    int ok;
} thread_job;

static void *compile_and_run(void *arg) {
    thread_job *job = arg;
    sn_jit *j;
    sn_err e;
    if (sn_jit_new(&j, &e)) return NULL;
    for (int round = 0; round < 3; round++) {
        sn_cpu_kernel_fn fn;
        if (sn_jit_compile(j, &job->k, 1, &fn, &e)) break;
        float out[64 * 96];
        const double *want = sn_interp_value(job->t->it, job->k->args[0]);
        fn((void *[]){out, job->t->host[job->k->args[1]->id], job->t->host[job->k->args[2]->id],
                      job->t->host[job->k->args[3]->id]}, 0, job->k->n_items);
        int good = 1;
        for (int i = 0; i < 64 * 96; i++) good &= fabs(out[i] - want[i]) <= 1e-4;
        job->ok += good;
    }
    sn_jit_free(j);
    return NULL;
}

/* two sn_jit objects compiling and running at once on two threads */
START_TEST(test_two_jits) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(64, 96), -2, 2), *w = in_f32(&t, "w", SN_SHAPE(96), -1, 1);
    sn_node *y = sn_layernorm(t.g, x, w, in_f32(&t, "b", SN_SHAPE(96), -1, 1), 1e-5f);
    tc_run(&t);
    sn_kernel k[2];
    thread_job jobs[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        node_kernel(&k[i], SN_KER_ROW, y);
        jobs[i] = (thread_job){&t, &k[i], 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, compile_and_run, &jobs[i]), 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    ck_assert_int_eq(jobs[0].ok, 3);
    ck_assert_int_eq(jobs[1].ok, 3);
    tc_free(&t);
}
END_TEST

/* Every generated kernel of GPT-2 tiny's training graph, as passes/fuse.c makes them (with and
 * without the attention pass), against the interpreter: inputs are the interpreter's values. */
START_TEST(test_gpt2_kernels) {
    for (int fused = 0; fused <= 1; fused++) {
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        sn_graph *g = sn_graph_new();
        sn_gpt2 m;
        sn_err e;
        ck_assert_msg(sn_gpt2_build(g, &c, 2, 16, &m, &e) == SN_OK, "%s", e.msg);
        sn_pipeline_opts o = sn_pipeline_defaults();
        o.backward = true;
        o.fuse_attention = fused;
        ck_assert_msg(sn_pipeline_run(&g, &o, NULL, &e) == SN_OK, "%s", e.msg);
        sn_program *p;
        ck_assert_msg(sn_fuse(g, &p, &e) == SN_OK, "%s", e.msg);
        sn_interp *it = sn_interp_new(g, false);
        sn_interp_keep_all(it, true);
        unsigned seed = 1;
        for (int i = 0; i < g->n_nodes; i++) {
            const sn_node *n = g->nodes[i];
            if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
            int64_t count = sn_numel(n);
            float *v = malloc(sizeof(float) * (size_t)count);
            for (int64_t q = 0; q < count; q++)
                v[q] = n->dtype == SN_I32 ? (float)((int)(rnd(&seed) * (float)c.vocab) % c.vocab)
                                          : (rnd(&seed) - 0.5f) * (n->op == SN_OP_PARAM ? 0.2f : 1);
            ck_assert_msg(sn_interp_set(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
        ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
        sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
        int n = 0;
        for (int i = 0; i < p->n_kernels; i++)
            if (p->kernels[i]->kind != SN_KER_GEMM && p->kernels[i]->kind != SN_KER_ATTENTION) ks[n++] = p->kernels[i];
        sn_cpu_kernel_fn *fns = malloc(sizeof *fns * (size_t)n);
        sn_jit *j = new_jit(LANES);
        ck_assert_msg(sn_jit_compile(j, ks, n, fns, &e) == SN_OK, "%s", e.msg);
        sn_jit_stats st = sn_jit_get_stats(j);
        printf("gpt2 tiny%s: %d of %d kernels generated (%d share code), compiled in %.0f ms\n",
               fused ? " (attention fused)" : "", n, p->n_kernels, st.shared, st.build_ms + st.opt_ms + st.link_ms);
        for (int i = 0; i < n; i++) {
            sn_kernel *k = ks[i];
            void *bufs[SN_KER_MAX_ARGS];
            for (int a = 0; a < k->n_out + k->n_in; a++) {
                const sn_node *x = k->args[a];
                int64_t count = sn_numel(x);
                const double *v = sn_interp_value(it, x);
                bufs[a] = malloc(4 * (size_t)count + 4);
                for (int64_t q = 0; q < count; q++) {
                    if (a < k->n_out) ((float *)bufs[a])[q] = NAN;
                    else if (x->dtype == SN_I32) ((int32_t *)bufs[a])[q] = (int32_t)v[q];
                    else ((float *)bufs[a])[q] = (float)v[q];
                }
            }
            int64_t h = k->serial ? k->n_items : k->n_items / 3;
            fns[i](bufs, 0, h);
            fns[i](bufs, h, k->n_items);
            for (int a = 0; a < k->n_out; a++) compare_out(it, k, a, bufs[a], 1e-4, "gpt2 tiny");
            for (int a = 0; a < k->n_out + k->n_in; a++) free(bufs[a]);
        }
        sn_jit_free(j);
        free(fns);
        free(ks);
        sn_interp_free(it);
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* ---- speed (printed, never asserted) ---- */

typedef void (*range_fn)(void *ctx, int64_t begin, int64_t end);

typedef struct {
    pthread_barrier_t go, done;
    range_fn fn;
    void *ctx;
    int64_t n;
    bool quit;
} duo;

static void *duo_worker(void *arg) {
    duo *d = arg;
    for (;;) {
        pthread_barrier_wait(&d->go);
        if (d->quit) return NULL;
        d->fn(d->ctx, d->n / 2, d->n);
        pthread_barrier_wait(&d->done);
    }
}

/* [0, n) split over this thread and the worker */
static void duo_run(duo *d, range_fn fn, void *ctx, int64_t n) {
    d->fn = fn;
    d->ctx = ctx;
    d->n = n;
    pthread_barrier_wait(&d->go);
    fn(ctx, 0, n / 2);
    pthread_barrier_wait(&d->done);
}

typedef struct {
    sn_cpu_kernel_fn fn;
    void **bufs;
} jit_ctx;
static void run_jit(void *ctx, int64_t b, int64_t e) {
    jit_ctx *c = ctx;
    c->fn(c->bufs, b, e);
}

typedef struct {
    const float *x, *w, *bias;
    float *y;
    int64_t C;
    int mode; /* 0: y = x + bias (same shape), 1: y = gelu(x + bias (C)), 2: layernorm rows */
} plain_ctx;

/* the plain loops the kernels are measured against */
static void run_plain(void *ctx, int64_t b, int64_t e) {
    plain_ctx *c = ctx;
    int64_t C = c->C;
    if (c->mode == 0) {
        for (int64_t i = b; i < e; i++) c->y[i] = c->x[i] + c->bias[i];
    } else if (c->mode == 1) {
        for (int64_t r = b / C; r < (e + C - 1) / C; r++)
            for (int64_t j = r * C < b ? b - r * C : 0; j < C && r * C + j < e; j++) {
                float u = c->x[r * C + j] + c->bias[j];
                c->y[r * C + j] = 0.5f * u * (1 + tanhf(0.7978845608f * (u + 0.044715f * u * u * u)));
            }
    } else {
        for (int64_t r = b; r < e; r++) {
            const float *x = c->x + r * C;
            float *y = c->y + r * C, m = 0, v = 0;
            for (int64_t j = 0; j < C; j++) m += x[j];
            m /= (float)C;
            for (int64_t j = 0; j < C; j++) v += (x[j] - m) * (x[j] - m);
            float rs = 1 / sqrtf(v / (float)C + 1e-5f);
            for (int64_t j = 0; j < C; j++) y[j] = (x[j] - m) * rs * c->w[j] + c->bias[j];
        }
    }
}

static double time_ms(duo *d, int threads, range_fn fn, void *ctx, int64_t n, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (threads == 2) duo_run(d, fn, ctx, n);
        else fn(ctx, 0, n);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6;
        if (ms < best) best = ms;
    }
    return best;
}

START_TEST(test_speed) {
    duo d = {0};
    pthread_barrier_init(&d.go, NULL, 2);
    pthread_barrier_init(&d.done, NULL, 2);
    pthread_t worker;
    ck_assert_int_eq(pthread_create(&worker, NULL, duo_worker, &d), 0);
    sn_jit *j = new_jit(LANES);
    for (int which = 0; which < 3; which++) {
        /* 0: y = x + b over 16M (3 x 64 MB moved); 1: gelu(x + bias) over (4096, 3072);
         * 2: layernorm over (1024, 768) */
        int64_t R = which == 0 ? 1 << 14 : which == 1 ? 4096 : 1024, C = which == 0 ? 1024 : which == 1 ? 3072 : 768;
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, C));
        sn_node *bias = sn_input(g, "b", SN_F32, which == 0 ? SN_SHAPE(R, C) : SN_SHAPE(C));
        sn_node *w = sn_input(g, "w", SN_F32, SN_SHAPE(C));
        sn_node *y = which == 0 ? sn_add(g, x, bias) : which == 1 ? sn_gelu(g, sn_add(g, x, bias))
                                                                 : sn_layernorm(g, x, w, bias, 1e-5f);
        sn_kernel k;
        pwk p;
        if (which < 2) {
            pw_of(&p, y);
            k = p.k;
        } else node_kernel(&k, SN_KER_ROW, y);
        sn_cpu_kernel_fn fn = compile_one(j, &k);
        int64_t n = R * C;
        float *xb = malloc(4 * (size_t)n), *yb = malloc(4 * (size_t)n), *bb = malloc(4 * (size_t)n), *wb = malloc(4 * (size_t)C);
        unsigned seed = 3;
        for (int64_t i = 0; i < n; i++) xb[i] = rnd(&seed) * 4 - 2, bb[i] = rnd(&seed) - 0.5f, yb[i] = 0;
        for (int64_t i = 0; i < C; i++) wb[i] = rnd(&seed) + 0.5f;
        void *bufs[4] = {yb, xb, bb, wb};
        if (which == 2) bufs[2] = wb, bufs[3] = bb; /* layernorm args: y, x, w, b */
        jit_ctx jc = {fn, bufs};
        plain_ctx pc = {xb, wb, bb, yb, C, which};
        double bytes = which == 0 ? 3.0 * 4 * (double)n : 2.0 * 4 * (double)n;
        int reps = which == 2 ? 200 : 5;
        const char *name = which == 0 ? "add 16M" : which == 1 ? "gelu(x+b) 4096x3072" : "layernorm 1024x768";
        double t1 = time_ms(&d, 1, run_jit, &jc, k.n_items, reps), t2 = time_ms(&d, 2, run_jit, &jc, k.n_items, reps);
        int64_t items = which == 2 ? R : n;
        double c1 = time_ms(&d, 1, run_plain, &pc, items, reps), c2 = time_ms(&d, 2, run_plain, &pc, items, reps);
        printf("speed: %-22s JIT %6.2f ms (%5.1f GB/s) 1 thread, %6.2f ms (%5.1f GB/s) 2 threads | "
               "plain C -O2 %6.2f ms (%5.1f GB/s) 1 thread, %6.2f ms (%5.1f GB/s) 2 threads\n",
               name, t1, bytes / t1 / 1e6, t2, bytes / t2 / 1e6, c1, bytes / c1 / 1e6, c2, bytes / c2 / 1e6);
        free(xb);
        free(yb);
        free(bb);
        free(wb);
        sn_graph_free(g);
    }
    sn_jit_free(j);
    d.quit = true;
    pthread_barrier_wait(&d.go);
    pthread_join(worker, NULL);
    pthread_barrier_destroy(&d.go);
    pthread_barrier_destroy(&d.done);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("codegen");
    TCase *tc = tcase_create("llvm");
    tcase_set_timeout(tc, 120);
    sn_jit *j;
    sn_err e;
    if (sn_jit_new(&j, &e) != SN_OK) { /* built without LLVM: say so, test nothing */
        printf("codegen: %s\n", e.msg);
        suite_add_tcase(s, tc);
        return s;
    }
    sn_jit_free(j);
    tcase_add_loop_test(tc, test_pw_unary, 0, 3);
    tcase_add_loop_test(tc, test_pw_binary_broadcast, 0, 3);
    tcase_add_loop_test(tc, test_pw_eq_cast, 0, 3);
    tcase_add_loop_test(tc, test_pw_permute, 0, 3);
    tcase_add_loop_test(tc, test_pw_slice, 0, 3);
    tcase_add_loop_test(tc, test_pw_pad, 0, 3);
    tcase_add_loop_test(tc, test_pw_concat, 0, 3);
    tcase_add_loop_test(tc, test_pw_chain_const, 0, 3);
    tcase_add_loop_test(tc, test_pw_scalar, 0, 3);
    tcase_add_loop_test(tc, test_pw_math_accuracy, 0, 3);
    tcase_add_loop_test(tc, test_row_ops, 0, 3);
    tcase_add_loop_test(tc, test_causal_mask, 0, 3);
    tcase_add_loop_test(tc, test_cross_entropy, 0, 3);
    tcase_add_loop_test(tc, test_cross_entropy_padded, 0, 3);
    tcase_add_loop_test(tc, test_reduce, 0, 3);
    tcase_add_loop_test(tc, test_embedding, 0, 3);
    tcase_add_loop_test(tc, test_embedding_bad_id, 0, 3);
    tcase_add_loop_test(tc, test_adamw, 0, 3);
#ifdef SN_HAVE_LLVM
    tcase_add_test(tc, test_verifier);
#endif
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_ir_text);
    tcase_add_test(tc, test_batch);
    tcase_add_test(tc, test_two_jits);
    tcase_add_test(tc, test_gpt2_kernels);
    suite_add_tcase(s, tc);
    TCase *speed = tcase_create("speed"); /* CK_RUN_CASE=speed runs it alone */
    tcase_set_timeout(speed, 120);
    tcase_add_test(speed, test_speed);
    suite_add_tcase(s, speed);
    return s;
}

int main(void) { return sn_test_main(suite()); }
