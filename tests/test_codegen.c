/* test_codegen.c: the LLVM code generator's kernels: every kernel kind and op JIT-compiled, run
 * over the whole item range and over uneven splits (as threads run them), and compared with the
 * reference interpreter; the inline math against libm. The JIT driver, errors, threads and speed
 * are in test_codegen_driver.c; the helpers in codegen_util.h (kernels made by hand the way
 * passes/fuse.c makes them, outputs poisoned with NaN before every run). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen_util.h"

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
    node_kernel(&k, SN_KER_ROW, loss); /* the chunk's sums, then their mean (kernel.h) */
    double sums[2] = {NAN, NAN};
    void *pb[4] = {&lv, host_of(&t, lg), host_of(&t, tn), sums}, *fb[2] = {&lv, sums};
    compile_one(j, &k)(pb, 0, k.n_items);
    sn_kernel fin = {.id = k.id};
    sn_sum_finish_fill(&k, &fin);
    compile_one(j, &fin)(fb, 0, fin.n_items);
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

/* ---- the optimizer step (kernel.h) against the reference of interp_optim.c ---- */

static void check_floats(const char *what, const float *got, const float *want, int n, double tol) {
    double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) a[i] = got[i], b[i] = want[i];
    sn_check_close(what, a, b, n, tol, tol);
    free(a);
    free(b);
}

/* The value of 16-bit dtype t's bits u. */
static double low_value(sn_dtype t, uint16_t u) {
    if (t == SN_BF16) {
        uint32_t w = (uint32_t)u << 16;
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    int ex = u >> 10 & 0x1f, man = u & 0x3ff;
    double a = ex == 0x1f ? (man ? NAN : INFINITY) : ex ? ldexp(1024 + man, ex - 25) : ldexp(man, -24);
    return u & 0x8000 ? -a : a;
}

/* AdamW k writing the weights' bf16 and f16 copies (flat_low) from (p, m, v): its p, m, v are
 * those of k to the bit, each copy is its p rounded to nearest even (a cast kernel's bits), in
 * the generated kernel (over three ranges) and in sn_interp_optim. */
static void adamw_low(sn_jit *j, const sn_kernel *k, const float *p, const float *m, const float *v,
                      const float *g, const float *h) {
    int64_t n = k->opt.flat_n;
    size_t bytes = sizeof(float) * (size_t)n;
    float *b[2][3];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++) memcpy(b[c][i] = malloc(bytes), i == 0 ? p : i == 1 ? m : v, bytes);
    uint16_t *low = malloc(2 * (size_t)n);
    compile_one(j, (sn_kernel *)k)((void *[]){b[0][0], b[0][1], b[0][2], (void *)g, (void *)h}, 0, n);
    for (int t = 0; t < 2; t++) {
        sn_dtype dt = t ? SN_F16 : SN_BF16;
        sn_kernel kl = *k;
        kl.opt.flat_low = dt;
        snprintf(kl.name, sizeof kl.name, "k9_adamw_%s", sn_dtype_name(dt));
        ck_assert_int_eq(sn_kernel_n_bufs(&kl), 6);
        sn_cpu_kernel_fn fn = compile_one(j, &kl);
        for (int i = 0; i < 3; i++) memcpy(b[1][i], i == 0 ? p : i == 1 ? m : v, bytes);
        void *bufs[6] = {b[1][0], b[1][1], b[1][2], (void *)g, (void *)h, low};
        fn(bufs, 0, 401);
        fn(bufs, 401, k->opt.flat_decay + 3);
        fn(bufs, k->opt.flat_decay + 3, n);
        for (int i = 0; i < 3; i++) ck_assert(!memcmp(b[0][i], b[1][i], bytes));
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(low_value(dt, low[i]) == sn_dtype_round(dt, b[1][0][i]),
                          "adamw %s copy %lld: %g, want %g", sn_dtype_name(dt), (long long)i,
                          low_value(dt, low[i]), sn_dtype_round(dt, b[1][0][i]));
        for (int i = 0; i < 3; i++) memcpy(b[1][i], i == 0 ? p : i == 1 ? m : v, bytes);
        sn_interp_optim(&kl, bufs, 0, n);
        for (int64_t i = 0; i < n; i++)
            ck_assert(low_value(dt, low[i]) == sn_dtype_round(dt, b[1][0][i]));
    }
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++) free(b[c][i]);
    free(low);
}

START_TEST(test_optim) {
    /* three norm blocks, the last partial; the decay split not on a vector boundary */
    enum { N = 2 * SN_SQNORM_BLOCK + 1003, DECAY = 5003, NB = 3, BYTES = sizeof(float) * N };
    float *p = malloc(BYTES), *m = malloc(BYTES), *v = malloc(BYTES), *g = malloc(BYTES);
    float *sum = malloc(BYTES), *ref[4];
    for (int i = 0; i < 4; i++) ref[i] = malloc(BYTES);
    float h[SN_OPT_SCALARS] = {[SN_OPT_LR] = 1e-3f, [SN_OPT_BETA1] = 0.9f, [SN_OPT_BETA2] = 0.95f,
                               [SN_OPT_EPS] = 1e-8f, [SN_OPT_WD] = 0.1f,
                               [SN_OPT_BC1] = 1 - 0.9f * 0.9f * 0.9f, [SN_OPT_BC2] = 1 - 0.95f * 0.95f * 0.95f,
                               [SN_OPT_INV_MICRO] = 0.5f, [SN_OPT_CLIP] = 1.0f};
    float h2[SN_OPT_SCALARS], part[NB], part2[NB];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        p[i] = rnd(&seed) - 0.5f;
        m[i] = 0.1f * (rnd(&seed) - 0.5f);
        v[i] = 0.01f * rnd(&seed);
        g[i] = rnd(&seed) - 0.5f;
        sum[i] = rnd(&seed) - 0.5f;
    }
    sn_kernel ks[4];
    sn_kernel_kind kinds[4] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    int64_t items[4] = {N, NB, 1, N};
    sn_jit *j = new_jit(LANES);
    sn_cpu_kernel_fn fn[4];
    for (int i = 0; i < 4; i++) {
        ks[i] = (sn_kernel){.kind = kinds[i], .n_items = items[i], .opt = {.flat_n = N, .flat_decay = DECAY}};
        snprintf(ks[i].name, sizeof ks[i].name, "k%d_%s", i, sn_kernel_kind_name(kinds[i]));
        fn[i] = compile_one(j, &ks[i]);
    }
    /* accumulate, in two ranges */
    memcpy(ref[0], sum, BYTES);
    sn_interp_optim(&ks[0], (void *[]){ref[0], g}, 0, N);
    fn[0]((void *[]){sum, g}, 0, 777);
    fn[0]((void *[]){sum, g}, 777, N);
    ck_assert(!memcmp(sum, ref[0], BYTES)); /* one f32 add each: exact */
    /* the norm of sum * inv_micro, and a clip scale below 1 */
    fn[1]((void *[]){part, sum, h}, 0, 2);
    fn[1]((void *[]){part, sum, h}, 2, NB);
    sn_interp_optim(&ks[1], (void *[]){part2, sum, h}, 0, NB);
    check_floats("sqnorm partials", part, part2, NB, 1e-5); /* f32 sums of 4096 terms, two orders */
    memcpy(h2, h, sizeof h);
    fn[2]((void *[]){h, part}, 0, 1);
    sn_interp_optim(&ks[2], (void *[]){h2, part}, 0, 1);
    double want = 0;
    for (int i = 0; i < N; i++) want += (double)(sum[i] * 0.5f) * (sum[i] * 0.5f);
    want = sqrt(want);
    ck_assert_msg(fabs(h[SN_OPT_NORM] - want) <= 1e-5 * want, "norm %g, want %g", h[SN_OPT_NORM], want);
    ck_assert(h[SN_OPT_NORM] == h2[SN_OPT_NORM] || fabs(h[SN_OPT_NORM] - h2[SN_OPT_NORM]) <= 1e-6 * want);
    ck_assert(want > 1 && fabsf(h[SN_OPT_SCALE] - (float)(1 / want)) <= 1e-6f);
    /* AdamW with decay on [0, DECAY) only */
    memcpy(ref[1], p, BYTES);
    memcpy(ref[2], m, BYTES);
    memcpy(ref[3], v, BYTES);
    adamw_low(j, &ks[3], p, m, v, sum, h);
    sn_interp_optim(&ks[3], (void *[]){ref[1], ref[2], ref[3], sum, h}, 0, N);
    fn[3]((void *[]){p, m, v, sum, h}, 0, 400);
    fn[3]((void *[]){p, m, v, sum, h}, 400, DECAY + 1);
    fn[3]((void *[]){p, m, v, sum, h}, DECAY + 1, N);
    check_floats("adamw p", p, ref[1], N, 1e-6);
    check_floats("adamw m", m, ref[2], N, 1e-6);
    check_floats("adamw v", v, ref[3], N, 1e-6);
    sn_jit_free(j);
    free(p), free(m), free(v), free(g), free(sum);
    for (int i = 0; i < 4; i++) free(ref[i]);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("codegen");
    TCase *tc = tcase_create("llvm");
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    if (!have_jit("codegen")) return s; /* built without LLVM: say so, test nothing */
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
    tcase_add_loop_test(tc, test_optim, 0, 3);
    return s;
}

int main(void) { return sn_test_main(suite()); }
