/* test_fuse_kernels.c: the kernels the fuse pass groups, run: multi-output pointwise kernels and
 * row ops with a prologue and an epilogue (layernorm, rmsnorm, their backwards, softmax and its
 * backward, causal mask, cross-entropy and its backward), each JIT-compiled and run on the
 * reference interpreter's values of its inputs, whole and in parts, outputs poisoned with NaN
 * first, every output compared with the interpreter's; and tiny GPT-2 training compiled end
 * to end (attention fused or written out, vocabulary padded): the loss and every gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm/llvm.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "train/train.h"
#include "harness.h"
#include "tiny_gpt2.h"

/* ---- running kernels against the interpreter ---- */

static sn_program *fuse(sn_graph *g) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    sn_target t = sn_target_cpu(); /* with the GEMM's GELU epilogues, as CUDA's (the CPU's own
                                      keeps the GELU in pointwise kernels) */
    t.gelu_unfused = false;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    return p;
}

/* Every INPUT and PARAM gets a value: floats uniform in [-2, 2) (parameters from their init
 * rule when `init`), ids below `ids`, every 7th of the input named `ignored` (if any) -1, an
 * ignored target; returns the interpreter after a run that kept every node's value. */
static sn_interp *reference(const sn_graph *g, uint64_t seed, int ids, const char *ignored, bool init) {
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    sn_rng r = sn_rng_seed(seed);
    sn_err e;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
        int64_t m = sn_numel(n);
        if (n->dtype == SN_I32) {
            int32_t *v = malloc(sizeof(int32_t) * (size_t)m + 1);
            bool ign = ignored && !strcmp(n->name, ignored);
            for (int64_t j = 0; j < m; j++)
                v[j] = ign && j % 7 == 3 ? -1 : (int32_t)sn_rng_below(&r, (uint64_t)ids);
            ck_assert_msg(sn_interp_set_i32(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        } else {
            float *v = malloc(sizeof(float) * (size_t)m + 1);
            if (init && n->op == SN_OP_PARAM) sn_param_init(n, v, seed);
            else for (int64_t j = 0; j < m; j++) v[j] = (float)(4 * sn_rng_uniform(&r) - 2);
            ck_assert_msg(sn_interp_set(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    return it;
}

static void *to_buffer(const sn_node *n, const double *v) {
    int64_t m = sn_numel(n);
    void *b = malloc(4 * (size_t)m + 4);
    ck_assert(b && (n->dtype == SN_F32 || n->dtype == SN_I32));
    for (int64_t i = 0; i < m; i++) {
        if (n->dtype == SN_I32) ((int32_t *)b)[i] = (int32_t)v[i];
        else ((float *)b)[i] = (float)v[i];
    }
    return b;
}

typedef struct {
    int kernels, multi_output, row_fused; /* checked; with n_out > 1; ROW with instructions */
    int gemms[SN_EPI_COUNT];              /* GEMM kernels checked, by epilogue */
    int accums;                           /* of them with accum's c */
} kernel_stats;

/* Runs kernel k (fn; a GEMM: the CPU device's gemm on dev) on its inputs' interpreter values,
 * over [0, n_items) in `parts` calls (the last part first: a row's values must not depend on
 * another call), and compares every output with the interpreter's. */
static void run_and_compare(const sn_kernel *k, sn_cpu_kernel_fn fn, sn_device *dev,
                            const sn_interp *it, int parts, double tol) {
    void *bufs[SN_KER_MAX_ARGS];
    int nargs = k->n_out + k->n_in;
    for (int a = 0; a < nargs; a++) {
        const sn_node *n = k->args[a];
        if (a < k->n_out) {
            bufs[a] = malloc(4 * (size_t)sn_numel(n) + 4);
            memset(bufs[a], 0xff, 4 * (size_t)sn_numel(n)); /* NaN, or -1 */
            bool *part = malloc((size_t)sn_numel(n) + 1);
            if (sn_kernel_out_part(k, a, part)) { /* the rest of the buffer as it was */
                const double *v = sn_interp_value(it, n);
                for (int64_t i = 0; i < sn_numel(n); i++)
                    if (!part[i]) ((float *)bufs[a])[i] = (float)v[i];
            }
            free(part);
        } else {
            const double *v = sn_interp_value(it, n);
            ck_assert_msg(v, "%s: the interpreter kept no value of %%%d", k->name, n->id);
            bufs[a] = to_buffer(n, v);
        }
    }
    if (k->stage != SN_SUM_WHOLE) bufs[nargs] = sn_test_scratch(k); /* the partial sums */
    sn_err e;
    if (k->kind == SN_KER_GEMM) ck_assert_msg(dev->gemm(dev, k, bufs, &e) == SN_OK, "%s", e.msg);
    for (int p = parts - 1; p >= 0 && k->kind != SN_KER_GEMM; p--)
        fn(bufs, k->n_items * p / parts, k->n_items * (p + 1) / parts);
    for (int o = 0; o < k->n_out; o++) {
        const sn_node *n = k->args[o];
        if (!sn_kernel_writes(k, o)) continue; /* a PARTIAL kernel's sums: its FINISH's */
        int64_t m = sn_numel(n);
        double *got = malloc(sizeof(double) * (size_t)m + 8);
        for (int64_t i = 0; i < m; i++)
            got[i] = n->dtype == SN_I32 ? ((int32_t *)bufs[o])[i] : ((float *)bufs[o])[i];
        char what[160];
        snprintf(what, sizeof what, "%s, output %d (%%%d %s), %d part%s", k->name, o, n->id,
                 sn_op_name(n->op), parts, parts > 1 ? "s" : "");
        sn_check_close(what, got, sn_interp_value(it, n), (size_t)m, tol, 1e-6);
        free(got);
    }
    for (int a = 0; a < nargs; a++) free(bufs[a]);
}

/* Every kernel of p but the GEMMs, compiled as one batch and checked whole and in 3 parts
 * (serial kernels whole only); the GEMMs (with their epilogues, kernel.h) on the CPU device. */
static kernel_stats check_kernels(const sn_program *p, const sn_interp *it, double tol) {
    sn_err e;
    sn_jit *j;
    sn_device *dev;
    ck_assert_msg(sn_jit_new(&j, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_cpu_device_new(2, &dev, &e) == SN_OK, "%s", e.msg);
    sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    sn_cpu_kernel_fn *fns = calloc((size_t)p->n_kernels + 1, sizeof *fns);
    int n = 0;
    kernel_stats st = {0};
    for (int k = 0; k < p->n_kernels; k++)
        if (p->kernels[k]->kind != SN_KER_GEMM) ks[n++] = p->kernels[k];
    ck_assert_msg(sn_jit_compile(j, ks, n, fns, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        const sn_kernel *k = ks[i];
        run_and_compare(k, fns[i], dev, it, 1, tol);
        if (!k->serial && k->n_items >= 3) run_and_compare(k, fns[i], dev, it, 3, tol);
        st.kernels++;
        st.multi_output += k->n_out > 1 && k->kind == SN_KER_POINTWISE;
        st.row_fused += k->kind == SN_KER_ROW && k->n_instr > 0;
    }
    for (int k = 0; k < p->n_kernels; k++)
        if (p->kernels[k]->kind == SN_KER_GEMM) {
            run_and_compare(p->kernels[k], NULL, dev, it, 1, tol);
            st.gemms[p->kernels[k]->gemm.epilogue]++;
            st.accums += p->kernels[k]->gemm.accum;
        }
    free(ks);
    free(fns);
    sn_jit_free(j);
    sn_device_free(dev);
    return st;
}

/* Fuses g, runs its kernels against the interpreter; the program is returned for the test's
 * own structural checks. */
static sn_program *fuse_and_check(sn_graph *g, int ids, const char *ignored, kernel_stats *st) {
    sn_program *p = fuse(g);
    sn_interp *it = reference(g, 42, ids, ignored, false);
    *st = check_kernels(p, it, 2e-5);
    sn_interp_free(it);
    return p;
}

/* The kernel that stores node n, or NULL. */
static const sn_kernel *kernel_of(const sn_program *p, const sn_node *n) {
    for (int k = 0; k < p->n_kernels; k++)
        for (int o = 0; o < p->kernels[k]->n_out; o++)
            if (p->kernels[k]->args[o] == n) return p->kernels[k];
    return NULL;
}

/* ---- small graphs, one pattern each ---- */

/* h = x @ w + b feeds gelu and, later, gelu_bwd: one kernel stores both h and gelu(h). Rows of
 * 36 (16-lane vectors and a tail; not a multiple of 8, which the GEMM's GELU epilogue would
 * need: bias_gelu_epilogues). */
/* An MLP's h = x @ w + b (rows of N) and y = gelu(h) in a new graph; its output y, or (dh)
 * gelu_bwd(h, y @ w2). */
static sn_graph *bias_gelu(int64_t N, bool dh, sn_node **h, sn_node **y) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 5, 24));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(24, N), SN_INIT_NORMAL, 1);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(N, N), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(N), SN_INIT_NORMAL, 1);
    *h = sn_add(g, sn_matmul(g, x, w), b);
    *y = sn_gelu(g, *h);
    sn_graph_add_output(g, dh ? sn_gelu_bwd(g, *h, sn_matmul(g, *y, w2)) : *y);
    return g;
}

START_TEST(bias_gelu_two_outputs) {
    sn_node *h, *y;
    sn_graph *g = bias_gelu(36, true, &h, &y);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    ck_assert_ptr_eq(kernel_of(p, h), kernel_of(p, y));
    ck_assert_int_eq(st.multi_output, 1);
    ck_assert_int_eq(st.gemms[SN_EPI_NONE], 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The same with rows of 40: the GEMMs carry them (kernel.h): x @ w's stores h and gelu(h)
 * (GELU_AUX_BIAS), y @ w2's multiplies by gelu'(h) (DGELU); no other kernel. And with h read by
 * nothing else, gelu(h) alone (GELU_BIAS, h never stored). Each GEMM on the CPU device against
 * the interpreter. */
START_TEST(bias_gelu_epilogues) {
    for (int aux = 0; aux < 2; aux++) {
        sn_node *h, *y;
        sn_graph *g = bias_gelu(40, aux, &h, &y);
        kernel_stats st;
        sn_program *p = fuse_and_check(g, 1, NULL, &st);
        ck_assert_int_eq(p->n_kernels, aux ? 2 : 1);
        ck_assert_int_eq(st.kernels, 0);
        ck_assert_int_eq(st.gemms[SN_EPI_GELU_AUX_BIAS], aux);
        ck_assert_int_eq(st.gemms[SN_EPI_DGELU], aux);
        ck_assert_int_eq(st.gemms[SN_EPI_GELU_BIAS], !aux);
        ck_assert_int_eq(p->value_of[h->id] >= 0, aux); /* the aux, or no buffer */
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* ACCUM (kernel.h: y = v + c, cuBLASLt's C with beta = 1): a product added to an input (y1),
 * two products summed (y2 = a @ w1 + b @ w2, a gradient's two contributions), and a
 * transposed product added to an earlier sum (y3 = y2^T @ x + c2: a weight gradient
 * accumulated). Each a GEMM kernel alone, no add kernel, checked on the CPU device against the
 * interpreter; then a planted bug (C's values zeros, as beta = 0 would read them) is caught, and
 * y1 is bit for bit the plain GEMM's product plus c in f32 (the add kernel it replaces). */
START_TEST(accum_epilogues) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 5, 24));
    sn_node *c = sn_input(g, "c", SN_F32, SN_SHAPE(3, 5, 40));
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(15, 16));
    sn_node *c2 = sn_input(g, "c2", SN_F32, SN_SHAPE(40, 24));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(24, 40), SN_INIT_NORMAL, 1);
    sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(16, 40), SN_INIT_NORMAL, 1);
    sn_node *y1 = sn_add(g, sn_matmul(g, x, w), c);
    sn_node *x2 = sn_reshape(g, x, SN_SHAPE(15, 24));
    sn_node *y2 = sn_add(g, sn_matmul(g, a, w1), sn_matmul(g, x2, w));
    sn_node *y3 = sn_add(g, c2, sn_matmul_t(g, y2, x2, true, false));
    sn_graph_add_output(g, y1);
    sn_graph_add_output(g, y3);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    ck_assert_int_eq(p->n_kernels, 4);
    ck_assert_int_eq(st.kernels, 0);
    ck_assert_int_eq(st.gemms[SN_EPI_NONE], 4); /* y2's first product plain */
    ck_assert_int_eq(st.accums, 3);
    const sn_kernel *k1 = kernel_of(p, y1), *k3 = kernel_of(p, y3);
    ck_assert(k1->gemm.accum && k1->args[3] == c);
    ck_assert(k3->gemm.accum && k3->args[3] == c2 && k3->anchor->a.ta);
    ck_assert(kernel_of(p, y2)->gemm.accum);
    /* planted: C's buffer holds zeros (beta = 0's result); the comparison must see it */
    sn_interp *it = reference(g, 42, 1, NULL, false);
    void *bufs[SN_KER_MAX_ARGS];
    for (int i = 0; i < 4; i++) {
        const sn_node *n = k1->args[i];
        bufs[i] = i && i < 3 ? to_buffer(n, sn_interp_value(it, n)) : calloc((size_t)sn_numel(n), 4);
    }
    sn_device *dev;
    sn_err e;
    ck_assert_msg(sn_cpu_device_new(1, &dev, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(dev->gemm(dev, k1, bufs, &e) == SN_OK, "%s", e.msg);
    const double *want = sn_interp_value(it, y1);
    int off = 0;
    for (int64_t i = 0; i < sn_numel(y1); i++)
        off += fabs(((float *)bufs[0])[i] - want[i]) > 1e-3 * (1 + fabs(want[i]));
    ck_assert_int_gt(off, 0);
    /* bit for bit what it replaces: the product (epilogue NONE) then the f32 add of c */
    free(bufs[3]);
    bufs[3] = to_buffer(c, sn_interp_value(it, c));
    ck_assert_msg(dev->gemm(dev, k1, bufs, &e) == SN_OK, "%s", e.msg);
    sn_kernel plain = *k1;
    plain.gemm.epilogue = SN_EPI_NONE;
    plain.gemm.accum = false;
    plain.n_in = 2;
    float *v = calloc((size_t)sn_numel(y1), 4);
    void *pbufs[3] = {v, bufs[1], bufs[2]};
    ck_assert_msg(dev->gemm(dev, &plain, pbufs, &e) == SN_OK, "%s", e.msg);
    for (int64_t i = 0; i < sn_numel(y1); i++) {
        float sum = v[i] + ((float *)bufs[3])[i];
        ck_assert_msg(!memcmp(&sum, (float *)bufs[0] + i, 4), "element %lld: %.9g, not %.9g",
                      (long long)i, (double)((float *)bufs[0])[i], (double)sum);
    }
    free(v);
    for (int i = 0; i < 4; i++) free(bufs[i]);
    sn_device_free(dev);
    sn_interp_free(it);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* GEMM operands read in place (kernel.h: operand views): slices of the last axis of h (rows of
 * 12 f32: 48 bytes) at 16-byte offsets are read by their products from h's buffer, as A (its
 * batch dims folded), as A transposed (under a reshape) and, of a weight, as B; a slice at 4
 * bytes is copied. Each GEMM against the interpreter; a wrong view is refused by the check. */
START_TEST(gemm_operand_views) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 5, 24));
    sn_node *c = sn_input(g, "c", SN_F32, SN_SHAPE(15, 16));
    sn_node *z = sn_input(g, "z", SN_F32, SN_SHAPE(15, 4));
    sn_node *wa = sn_param(g, "wa", SN_F32, SN_SHAPE(24, 12), SN_INIT_NORMAL, 1);
    sn_node *b1 = sn_param(g, "b1", SN_F32, SN_SHAPE(4, 40), SN_INIT_NORMAL, 1);
    sn_node *wb = sn_param(g, "wb", SN_F32, SN_SHAPE(4, 48), SN_INIT_NORMAL, 1);
    sn_node *h = sn_matmul(g, x, wa);
    sn_node *y1 = sn_matmul(g, sn_slice(g, h, 2, 0, 4), b1);
    sn_node *h2 = sn_reshape(g, sn_slice(g, h, 2, 4, 8), SN_SHAPE(15, 4));
    sn_node *y2 = sn_matmul_t(g, h2, c, true, false);
    sn_node *y3 = sn_matmul(g, z, sn_slice(g, wb, 1, 16, 40));
    sn_node *y4 = sn_matmul(g, sn_slice(g, h, 2, 1, 5), b1); /* at 4 bytes: a copy */
    sn_graph_add_output(g, y1);
    sn_graph_add_output(g, y2);
    sn_graph_add_output(g, y3);
    sn_graph_add_output(g, y4);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    ck_assert_int_eq(st.gemms[SN_EPI_NONE], 5);
    ck_assert_int_eq(st.kernels, 1); /* the copy of y4's slice */
    const sn_kernel *k1 = kernel_of(p, y1), *k2 = kernel_of(p, y2), *k3 = kernel_of(p, y3);
    const sn_kernel *k4 = kernel_of(p, y4);
    ck_assert(k1->args[1] == h && k1->gemm.view[0].off == 0 && k1->gemm.view[0].ld == 12);
    ck_assert(k2->args[1] == h && k2->gemm.view[0].off == 4 && k2->gemm.view[0].ld == 12);
    ck_assert(k3->args[2] == wb && k3->gemm.view[1].off == 16 && k3->gemm.view[1].ld == 48);
    ck_assert(!k1->gemm.view[1].ld && !k3->gemm.view[0].ld && !k4->gemm.view[0].ld);
    ck_assert(k4->args[1] != h && k4->args[1]->op == SN_OP_SLICE);
    /* planted: the view one row off, one element off, and an offset without a view */
    sn_kernel bad = *k2;
    sn_err e;
    ck_assert_int_eq(sn_kernel_check(&bad, &e), SN_OK);
    bad.gemm.view[0].off += 12;
    ck_assert_int_eq(sn_kernel_check(&bad, &e), SN_ERR_INTERNAL);
    bad.gemm.view[0].off -= 11;
    ck_assert_int_eq(sn_kernel_check(&bad, &e), SN_ERR_INTERNAL);
    bad = *k4;
    bad.gemm.view[0].off = 4;
    ck_assert_int_eq(sn_kernel_check(&bad, &e), SN_ERR_INTERNAL);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Rows of 37 (vectors and a tail at any width). The residual x1 = emb + pos (a slice broadcast
 * over the batch) + proj is layernorm's prologue; tanh and the next residual x2 its epilogue,
 * x2 stored for rmsnorm's kernel (scale its epilogue), which reads it after exp(x2), the
 * kernel's root. x1 needs no buffer: every reader is in the kernel. */
START_TEST(residual_norms) {
    sn_graph *g = sn_graph_new();
    sn_node *emb = sn_input(g, "emb", SN_F32, SN_SHAPE(2, 6, 37));
    sn_node *pos = sn_param(g, "pos", SN_F32, SN_SHAPE(9, 37), SN_INIT_NORMAL, 1);
    sn_node *proj = sn_input(g, "proj", SN_F32, SN_SHAPE(2, 6, 37));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(37), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(37), SN_INIT_NORMAL, 1);
    sn_node *x1 = sn_add(g, sn_add(g, emb, sn_slice(g, pos, 0, 2, 8)), proj);
    sn_node *ln = sn_layernorm(g, x1, w, b, 1e-5f);
    sn_node *x2 = sn_add(g, x1, sn_tanh(g, ln));
    sn_node *rn = sn_rmsnorm(g, x2, w, 1e-5f);
    sn_node *outs[] = {sn_exp(g, x2), sn_scale(g, rn, 2)};
    for (int i = 0; i < 2; i++) sn_graph_add_output(g, outs[i]);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    const sn_kernel *k = kernel_of(p, outs[0]);
    ck_assert(k->anchor == ln && kernel_of(p, x2) == k && k->n_out == 2);
    ck_assert_int_eq(p->value_of[x1->id], -1);
    ck_assert_int_eq(p->value_of[ln->id], -1);
    ck_assert_int_eq(kernel_of(p, outs[1])->anchor->op, SN_OP_RMSNORM);
    ck_assert_int_eq(p->n_kernels, 2);
    ck_assert_int_eq(st.row_fused, 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The backward of a pre-norm block: dx = g + layernorm_bwd(x, w, dy) (an epilogue), with dy
 * computed (a prologue) and stored for layernorm_bwd_w and the bias gradient; rmsnorm_bwd with
 * x computed. 150 rows: the weight gradients sum 19 chunks of 8 rows (kernel.h: PARTIAL, FINISH;
 * sn_sum_chunk_rows). */
START_TEST(norm_backwards) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(5, 30, 40));
    sn_node *d0 = sn_input(g, "d0", SN_F32, SN_SHAPE(5, 30, 40));
    sn_node *gr = sn_input(g, "g", SN_F32, SN_SHAPE(5, 30, 40));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *dy = sn_mul(g, d0, sn_exp(g, x));
    sn_node *dx = sn_add(g, gr, sn_layernorm_bwd(g, x, w, dy, 1e-5f));
    sn_node *dw = sn_layernorm_bwd_w(g, x, dy, 1e-5f);
    sn_node *db = sn_sum(g, sn_reshape(g, dy, SN_SHAPE(150, 40)), 0, false);
    sn_node *rx = sn_rmsnorm_bwd(g, sn_scale(g, x, 3), w, d0, 1e-5f);
    sn_node *rw = sn_rmsnorm_bwd_w(g, sn_neg(g, x), sn_scale(g, d0, 0.5f), 1e-5f);
    sn_node *outs[] = {dx, dw, db, rx, rw};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    ck_assert_ptr_eq(kernel_of(p, dy), kernel_of(p, dx)); /* the earliest reader stores dy */
    /* the norm backward pair (kernel.h): dx, dw's partial sums and db's in one pass over each
     * of 19 chunks of rows, the last one short; outputs dw, db, then dx and dy */
    const sn_kernel *kw = kernel_of(p, dw);
    ck_assert_ptr_eq(kernel_of(p, dx), kw);
    ck_assert(kw->stage == SN_SUM_PARTIAL && kw->row.pair && sn_sum_chunks(kw) == 19 &&
              kw->row.n_colsum == 1 && kw->n_items == 19);
    ck_assert_int_eq(kw->n_out, 4);
    ck_assert_ptr_eq(kw->args[2], dx);
    ck_assert_int_eq(st.row_fused, 3);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Runs every kernel of p but GEMMs on the CPU, in program order, each in 3 calls (the last
 * first), with the interpreter's values of the graph's leaves: a buffer a node (out[id],
 * malloc'd), one a scratch value. */
static void program_on_cpu(const sn_program *p, const sn_interp *it, void **out) {
    sn_err e;
    sn_jit *j;
    ck_assert_msg(sn_jit_new(&j, &e) == SN_OK, "%s", e.msg);
    sn_kernel **ks = calloc((size_t)p->n_kernels + 1, sizeof *ks);
    sn_cpu_kernel_fn *fns = calloc((size_t)p->n_kernels + 1, sizeof *fns);
    float *scratch[64] = {0};
    ck_assert(ks && fns);
    for (int k = 0; k < p->n_kernels; k++) ks[k] = p->kernels[k];
    ck_assert_msg(sn_jit_compile(j, ks, p->n_kernels, fns, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = ks[i];
        void *bufs[SN_KER_MAX_ARGS + 1];
        for (int a = 0; a < k->n_out + k->n_in; a++) {
            const sn_node *x = k->args[a];
            if (!out[x->id])
                out[x->id] = x->op == SN_OP_INPUT || x->op == SN_OP_PARAM
                                 ? to_buffer(x, sn_interp_value(it, x))
                                 : calloc(1, 4 * (size_t)sn_numel(x) + 4);
            bufs[a] = out[x->id];
        }
        if (k->stage != SN_SUM_WHOLE) {
            ck_assert(k->scratch >= 0 && k->scratch < 64);
            if (!scratch[k->scratch]) scratch[k->scratch] = calloc(1, (size_t)sn_kernel_scratch_bytes(k));
            bufs[k->n_out + k->n_in] = scratch[k->scratch];
        }
        int parts = k->serial ? 1 : 3;
        for (int q = parts - 1; q >= 0; q--)
            fns[i](bufs, k->n_items * q / parts, k->n_items * (q + 1) / parts);
    }
    for (int i = 0; i < 64; i++) free(scratch[i]);
    free(ks);
    free(fns);
    sn_jit_free(j);
}

/* The norm backward pair (kernel.h) of a residual block's layernorm: dx (the prologue dy, the
 * residual add), dw, dbeta and the residual's bias gradient (a column sum of dx, the pair's own
 * output), 197 rows in 25 chunks of 8 (the last 5); `apart`: a kernel between dx's and dw's, so
 * that they stay two kernels. */
static sn_graph *norm_pair_graph(bool apart) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(197, 48));
    sn_node *d0 = sn_input(g, "d0", SN_F32, SN_SHAPE(197, 48));
    sn_node *gr = sn_input(g, "g", SN_F32, SN_SHAPE(197, 48));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(48), SN_INIT_NORMAL, 1);
    sn_node *dy = sn_mul(g, d0, sn_tanh(g, x));
    sn_node *dx = sn_add(g, gr, sn_layernorm_bwd(g, x, w, dy, 1e-5f));
    sn_node *other = apart ? sn_exp(g, gr) : NULL;
    sn_node *outs[] = {dx, sn_layernorm_bwd_w(g, x, dy, 1e-5f), sn_sum(g, dy, 0, false),
                       sn_sum(g, dx, 0, false)};
    for (int i = 0; i < 4; i++) sn_graph_add_output(g, outs[i]);
    if (other) sn_graph_add_output(g, other);
    return g;
}

/* On the CPU the pair's results have the bits of the dx and PARTIAL kernels apart (its sums
 * keep their order), and match the interpreter. */
START_TEST(norm_pair_bits) {
    sn_graph *g = norm_pair_graph(false), *ga = norm_pair_graph(true);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st), *pa = fuse(ga);
    ck_assert_int_eq(p->n_kernels, 2);  /* the pair and its FINISH */
    ck_assert_int_eq(pa->n_kernels, 4); /* dx, exp, dw's PARTIAL and FINISH */
    ck_assert(p->kernels[0]->row.pair && p->kernels[0]->n_items == 25);
    sn_interp *it = reference(g, 7, 1, NULL, false), *ita = reference(ga, 7, 1, NULL, false);
    void **v = calloc((size_t)g->n_nodes, sizeof *v), **va = calloc((size_t)ga->n_nodes, sizeof *va);
    program_on_cpu(p, it, v);
    program_on_cpu(pa, ita, va);
    for (int o = 0; o < 4; o++) {
        const sn_node *x = g->outputs[o], *xa = ga->outputs[o];
        ck_assert_msg(v[x->id] && va[xa->id] && !memcmp(v[x->id], va[xa->id], 4 * (size_t)sn_numel(x)),
                      "output %d (%s) differs from the unpaired kernels' bits", o, sn_op_name(x->op));
    }
    for (int i = 0; i < g->n_nodes; i++) free(v[i]);
    for (int i = 0; i < ga->n_nodes; i++) free(va[i]);
    free(v);
    free(va);
    sn_interp_free(it);
    sn_interp_free(ita);
    sn_program_free(p);
    sn_program_free(pa);
    sn_graph_free(g);
    sn_graph_free(ga);
}
END_TEST

/* softmax of a scaled x plus a per-row bias (constant along the row), followed by a product
 * with x, its prologue value z stored for a later reader; a softmax whose only output is an
 * i32 cast (no f32 buffer to keep e in: computed again); softmax_bwd of computed operands; a
 * softmax of a single row. */
START_TEST(softmaxes) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 3, 21));
    sn_node *r = sn_input(g, "r", SN_F32, SN_SHAPE(4, 3, 1));
    sn_node *z = sn_add(g, sn_scale(g, x, 0.5f), r);
    sn_node *y = sn_mul(g, sn_softmax(g, z), x);
    sn_node *c = sn_cast(g, sn_scale(g, sn_softmax(g, x), 1000), SN_I32);
    sn_node *sb = sn_softmax_bwd(g, sn_exp(g, x), sn_neg(g, sn_tanh(g, x)));
    sn_node *v = sn_input(g, "v", SN_F32, SN_SHAPE(37)); /* one row */
    sn_node *outs[] = {y, sn_exp(g, z), c, sb, sn_neg(g, sn_softmax(g, sn_scale(g, v, 2)))};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    ck_assert_ptr_eq(kernel_of(p, z), kernel_of(p, y));
    ck_assert_int_eq(kernel_of(p, c)->kind, SN_KER_ROW);
    ck_assert_int_eq(st.row_fused, 4);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* A value cut into parts by slices, each a kernel of the same shape (LoRA's shared dA cut into
 * the adapters'), and a copy of another shape after them: the parts join one kernel
 * (join_siblings) with three outputs, the other stays apart; every output the interpreter's. */
START_TEST(siblings_join) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(6, 24)), *w = sn_input(g, "w", SN_F32, SN_SHAPE(5, 7));
    sn_node *y = sn_tanh(g, sn_scale(g, x, 0.5f)), *part[3];
    sn_graph_add_output(g, y);
    for (int i = 0; i < 3; i++) sn_graph_add_output(g, part[i] = sn_slice(g, y, -1, 8 * i, 8 * i + 8));
    sn_graph_add_output(g, sn_exp(g, w));
    /* a kernel of the same shape reading a stored value at other elements (a transpose): not
       joined to the kernel that stores it, whose other blocks would not have written it yet */
    sn_node *sq = sn_tanh(g, sn_input(g, "s", SN_F32, SN_SHAPE(12, 12)));
    sn_node *tr = sn_exp(g, sn_permute(g, sq, (const int[]){1, 0}));
    sn_graph_add_output(g, sq);
    sn_graph_add_output(g, tr);
    sn_pipeline_stats ps = {0};
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, &ps, &e) == SN_OK, "%s", e.msg);
    const sn_kernel *k = kernel_of(p, part[0]);
    ck_assert_ptr_nonnull(k);
    ck_assert(kernel_of(p, part[1]) == k && kernel_of(p, part[2]) == k && k->n_out == 3);
    ck_assert_int_eq(ps.siblings_joined, 2);
    ck_assert(kernel_of(p, w) != k);
    ck_assert(kernel_of(p, sq) != kernel_of(p, tr));
    sn_interp *it = reference(g, 7, 1, NULL, false);
    kernel_stats st = check_kernels(p, it, 2e-5);
    ck_assert_int_ge(st.multi_output, 1);
    sn_interp_free(it);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* cross_entropy of computed logits; cross_entropy_bwd over a padded vocabulary (17 of 20
 * classes), ignored targets, computed logits stored for a later reader, and an epilogue that
 * reads the logits again. 150 rows: the loss sums 3 chunks of rows (kernel.h: PARTIAL). */
START_TEST(cross_entropies) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 50, 20));
    sn_node *c = sn_param(g, "c", SN_F32, SN_SHAPE(20), SN_INIT_NORMAL, 1);
    sn_node *t = sn_input(g, "t", SN_I32, SN_SHAPE(3, 50));
    sn_node *loss = sn_cross_entropy_padded(g, sn_scale(g, x, 2), t, -1, 17);
    sn_node *lg = sn_add(g, x, c);
    sn_node *dl = sn_cross_entropy_bwd_padded(g, lg, t, sn_scalar(g, SN_F32, 2), -1, 17);
    sn_node *outs[] = {loss, sn_mul(g, dl, x), sn_exp(g, lg)};
    for (int i = 0; i < 3; i++) sn_graph_add_output(g, outs[i]);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 17, "t", &st);
    ck_assert_int_eq(kernel_of(p, loss)->n_instr, 2);
    ck_assert_int_eq(sn_sum_chunks(kernel_of(p, loss)), 3);
    ck_assert_ptr_eq(kernel_of(p, lg), kernel_of(p, outs[1]));
    ck_assert_int_eq(st.row_fused, 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The written-out attention's mask: scale before causal_mask (forward), after (backward); a
 * finite fill, as -inf - -inf would compare as NaN. */
START_TEST(causal_masks) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 3, 9, 9));
    sn_node *outs[] = {sn_causal_mask_fill(g, sn_scale(g, x, 0.25f), -30),
                       sn_scale(g, sn_causal_mask_fill(g, sn_exp(g, x), 0), 0.25f)};
    for (int i = 0; i < 2; i++) sn_graph_add_output(g, outs[i]);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    ck_assert_int_eq(p->n_kernels, 2);
    ck_assert_int_eq(st.row_fused, 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Prologue accesses that are not plain: a concat along the row (masked lanes), a pad along an
 * outer axis (a per-row mask), a transposed input (a gather along the row). */
START_TEST(masked_and_strided_prologue) {
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(6, 10));
    sn_node *b = sn_input(g, "b", SN_F32, SN_SHAPE(6, 23));
    sn_node *c = sn_input(g, "c", SN_F32, SN_SHAPE(33, 6));
    sn_node *d = sn_input(g, "d", SN_F32, SN_SHAPE(4, 33));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(33), SN_INIT_NORMAL, 1);
    sn_node *parts[2] = {a, b};
    sn_node *x = sn_add(g, sn_concat(g, 2, parts, 1), sn_transpose(g, c, 0, 1)); /* (6, 33) */
    sn_node *y = sn_add(g, sn_pad(g, d, 0, 1, 6), x);
    sn_node *outs[] = {sn_layernorm(g, y, w, w, 1e-5f), sn_softmax(g, sn_transpose(g, c, 0, 1))};
    for (int i = 0; i < 2; i++) sn_graph_add_output(g, outs[i]);
    kernel_stats st;
    sn_program *p = fuse_and_check(g, 1, NULL, &st);
    const sn_kernel *k = kernel_of(p, outs[0]);
    int masked = 0, gathered = 0;
    for (int i = 0; i < k->n_access; i++) {
        masked += k->access[i].masked;
        gathered += k->access[i].stride[1] > 1;
    }
    ck_assert_int_eq(masked, 3);
    ck_assert_int_eq(gathered, 1);
    ck_assert_int_eq(st.row_fused, 1); /* softmax reads a view: a copy kernel, then softmax */
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- tiny GPT-2 training ---- */

/* Every kernel of the training program (GEMMs aside) against the interpreter, with parameters
 * from their init rules. */
START_TEST(gpt2_kernels) {
    sn_graph *g = tiny_training_graph(true);
    sn_program *p = fuse(g);
    sn_interp *it = reference(g, 7, TINY_VOCAB, "targets", true);
    kernel_stats st = check_kernels(p, it, 1e-4);
    sn_interp_free(it);
    printf("test_fuse_kernels: tiny GPT-2 training: %d kernels match the interpreter, %d of them "
           "multi-output pointwise, %d row ops with fused neighbours; %d GELU_AUX_BIAS and %d "
           "DGELU GEMMs too\n", st.kernels, st.multi_output, st.row_fused,
           st.gemms[SN_EPI_GELU_AUX_BIAS], st.gemms[SN_EPI_DGELU]);
    ck_assert_int_ge(st.row_fused, 9); /* 2 x 2 per layer, and ln_1 of layer 0 and ln_f */
    /* the bias and GELU (c_fc's forward, each layer's multi-output kernel before) and its
       gradient are GEMM epilogues */
    ck_assert_int_eq(st.gemms[SN_EPI_GELU_AUX_BIAS], 2);
    ck_assert_int_eq(st.gemms[SN_EPI_DGELU], 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The CPU target keeps each FINISH a kernel (sn_target join_finish); a program made for CUDA,
 * whose norm backward pairs carry joined FINISH kernels (kernel.h: tail), is refused by the LLVM
 * backend with a message naming the kernel and what to do. */
START_TEST(joined_finish_not_on_the_cpu) {
    sn_graph *g = tiny_training_graph(true);
    sn_target cuda = sn_target_cuda(80);
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &cuda}, &p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    sn_kernel *host = NULL;
    for (int k = 0; k < p->n_kernels && !host; k++)
        if (p->kernels[k]->tail) host = p->kernels[k];
    ck_assert_msg(host, "no joined FINISH in the CUDA target's program");
    sn_jit *j;
    ck_assert_msg(sn_jit_new(&j, &e) == SN_OK, "%s", e.msg);
    sn_cpu_kernel_fn fn;
    ck_assert_int_eq(sn_jit_compile(j, &host, 1, &fn, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, host->name) && strstr(e.msg, host->tail->name) &&
                  strstr(e.msg, "does not generate joined kernels yet"), "%s", e.msg);
    sn_jit_free(j);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The whole compiled program (fuse, memplan, executor on the CPU device) against the
 * interpreter: the loss and every gradient within 1e-4. */
static void end_to_end(bool fuse_attention) {
    sn_graph *g = tiny_training_graph(fuse_attention);
    tiny_check_compiled(g, 9, fuse_attention ? "attention fused" : "attention written out");
    sn_graph_free(g);
}

START_TEST(gpt2_training_attention_fused) { end_to_end(true); }
END_TEST

START_TEST(gpt2_training_attention_written_out) { end_to_end(false); }
END_TEST

int main(void) {
    Suite *s = suite_create("fuse_kernels");
    TCase *tc = tcase_create("fuse_kernels");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, bias_gelu_two_outputs);
    tcase_add_test(tc, bias_gelu_epilogues);
    tcase_add_test(tc, accum_epilogues);
    tcase_add_test(tc, gemm_operand_views);
    tcase_add_test(tc, residual_norms);
    tcase_add_test(tc, norm_backwards);
    tcase_add_test(tc, norm_pair_bits);
    tcase_add_test(tc, softmaxes);
    tcase_add_test(tc, siblings_join);
    tcase_add_test(tc, cross_entropies);
    tcase_add_test(tc, causal_masks);
    tcase_add_test(tc, masked_and_strided_prologue);
    tcase_add_test(tc, gpt2_kernels);
    tcase_add_test(tc, joined_finish_not_on_the_cpu);
    tcase_add_test(tc, gpt2_training_attention_fused);
    tcase_add_test(tc, gpt2_training_attention_written_out);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
