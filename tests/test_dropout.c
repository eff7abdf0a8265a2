/* test_dropout.c: the dropout op (ir/dropout.h): its mask in the interpreter (the fraction
 * dropped, the scale, p = 0, sites and seeds apart), its kernels against the interpreter bit
 * for bit (the CPU device; the stand-in CUDA driver in test_standin), the backward's mask the
 * forward's, where fuse puts it, and GPT-2 with dropout: identity in evaluation and generation.
 * Convention: values are compared as bits (memcmp), never within a tolerance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "ir/dropout.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "train/train.h"
#include "harness.h"

enum { N = 1 << 16 };

/* dropout(x, seed) of N values at probability p, site `site`, by the interpreter. */
static void interp_dropout(const float *x, float seed, float p, int site, float *y) {
    sn_graph *g = sn_graph_new();
    sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(N));
    sn_node *s = sn_input_dropout_seed(g);
    sn_node *d = sn_dropout(g, in, s, p, site);
    sn_graph_add_output(g, d);
    ck_assert(!sn_graph_error(g));
    sn_interp *it = sn_interp_new(g, false);
    sn_err e;
    ck_assert(sn_interp_set(it, in, x, &e) == SN_OK && sn_interp_set(it, s, &seed, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    const double *v = sn_interp_value(it, d);
    for (int i = 0; i < N; i++) y[i] = (float)v[i];
    sn_interp_free(it);
    sn_graph_free(g);
}

/* The fraction dropped is p within 5 standard deviations; kept values are x * 1/(1-p) rounded
 * once; p = 0 is x bit for bit; another site or seed draws another mask (overlap near p^2). */
START_TEST(mask_in_the_interpreter) {
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *z = malloc(sizeof(float) * N);
    sn_rng r = sn_rng_seed(3);
    for (int i = 0; i < N; i++) x[i] = (float)sn_rng_normal(&r) + 3.0f; /* never 0 */
    static const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        float p = ps[k], s = sn_dropout_scale(p);
        interp_dropout(x, 77, p, 5, y);
        int dropped = 0;
        for (int i = 0; i < N; i++) {
            dropped += y[i] == 0;
            ck_assert_msg(y[i] == 0 || y[i] == x[i] * s, "p %g element %d: %.9g from %.9g", p, i, y[i], x[i]);
        }
        double frac = (double)dropped / N, sd = sqrt(p * (1 - p) / N);
        ck_assert_msg(fabs(frac - p) < 5 * sd, "p %g: %.5f dropped", p, frac);
        for (int other = 0; other < 2; other++) { /* site 6, or seed 78 */
            interp_dropout(x, other ? 78 : 77, p, other ? 5 : 6, z);
            int both = 0;
            for (int i = 0; i < N; i++) both += y[i] == 0 && z[i] == 0;
            double f2 = (double)both / N, sd2 = sqrt(p * p * (1 - p * p) / N);
            ck_assert_msg(fabs(f2 - p * p) < 5 * sd2, "p %g: masks of another %s overlap %.5f",
                          p, other ? "seed" : "site", f2);
        }
    }
    interp_dropout(x, 77, 0, 5, y);
    ck_assert(!memcmp(x, y, sizeof(float) * N));
    free(x);
    free(y);
    free(z);
}
END_TEST

/* A graph with dropouts in f32 and bf16 and its backward, compiled by the kernel passes for
 * the CPU device: the dropouts' values and the gradient they pass back equal the
 * interpreter's bit for bit (the same masks, the backward's the forward's), each dropout roots
 * a pointwise kernel, and p = 0 keeps every value as it is. */
START_TEST(kernels_are_the_interpreter) {
    sn_graph *g = sn_graph_new();
    enum { R = 6, C = 40 }; /* a row length that is no multiple of a vector */
    float p0 = _i ? 0.0f : 0.25f, p1 = _i ? 0.0f : 0.5f;
    sn_node *x = sn_param(g, "x", SN_F32, SN_SHAPE(R, C), SN_INIT_NORMAL, 1.0f);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1.0f);
    sn_node *s = sn_input_dropout_seed(g);
    sn_node *d = sn_dropout(g, sn_add(g, x, b), s, p0, 1);            /* f32 */
    sn_node *h = sn_dropout(g, sn_cast(g, d, SN_BF16), s, p1, 2);    /* bf16 */
    sn_node *y = sn_add(g, sn_cast(g, h, SN_F32), x);                 /* a residual add */
    float w[R * C];
    for (int i = 0; i < R * C; i++) w[i] = (float)((i * 7) % 11) - 5.0f;
    sn_node *loss = sn_sum(g, sn_sum(g, sn_mul(g, y, sn_const(g, SN_F32, SN_SHAPE(R, C), w)), 1, false), 0, false);
    sn_graph_add_output(g, d);
    sn_graph_add_output(g, h);
    sn_graph_set_loss(g, loss);
    sn_err e;
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    sn_device *dev;
    ck_assert(sn_cpu_device_new(2, &dev, &e) == SN_OK);
    sn_pipeline_opts po = {.target = &dev->target};
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &po, &p, NULL, &e) == SN_OK, "%s", e.msg);
    int in_kernels = 0;
    for (int k = 0; k < p->n_kernels; k++)
        for (int i = 0; i < p->kernels[k]->n_instr; i++)
            if (p->kernels[k]->instr[i].node->op == SN_OP_DROPOUT) {
                ck_assert_msg(p->kernels[k]->kind == SN_KER_POINTWISE, "a dropout in kernel %s",
                              p->kernels[k]->name);
                in_kernels++;
            }
    ck_assert_int_eq(in_kernels, 4); /* two forward, two backward */
    sn_exec *ex;
    ck_assert_msg(sn_exec_new(dev, p, &ex, &e) == SN_OK, "%s", e.msg);
    sn_interp *it = sn_interp_new(g, false); /* rounding each value to its dtype, as kernels do */
    float xs[R * C], bs[C], seed = 4242;
    sn_param_init(x, xs, 1);
    sn_param_init(b, bs, 2);
    ck_assert(sn_exec_set(ex, x, xs, &e) == SN_OK && sn_exec_set(ex, b, bs, &e) == SN_OK &&
              sn_exec_set(ex, s, &seed, &e) == SN_OK);
    ck_assert(sn_interp_set(it, x, xs, &e) == SN_OK && sn_interp_set(it, b, bs, &e) == SN_OK &&
              sn_interp_set(it, s, &seed, &e) == SN_OK);
    ck_assert_msg(sn_exec_run(ex, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    float got[R * C], want[R * C];
    uint16_t hb[R * C], hw[R * C];
    const double *v;
    ck_assert(sn_exec_get(ex, d, got, &e) == SN_OK);
    v = sn_interp_value(it, d);
    int zeros = 0;
    for (int i = 0; i < R * C; i++) want[i] = (float)v[i], zeros += want[i] == 0;
    for (int i = 0; i < R * C; i++)
        ck_assert_msg(!memcmp(&got[i], &want[i], 4), "the f32 dropout's element %d: %.9g, the "
                      "interpreter's %.9g", i, got[i], want[i]);
    ck_assert_msg(_i ? zeros == 0 : zeros > R * C / 8, "%d of %d dropped", zeros, R * C);
    for (int i = 0; _i && i < R * C; i++) /* p = 0: x + b, unscaled */
        ck_assert(got[i] == xs[i] + bs[i % C]);
    ck_assert(sn_exec_get(ex, h, hb, &e) == SN_OK);
    v = sn_interp_value(it, h);
    for (int i = 0; i < R * C; i++) {
        float f = (float)v[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        hw[i] = (uint16_t)(u >> 16); /* exact: the interpreter rounded it to bf16 */
    }
    for (int i = 0; i < R * C; i++)
        ck_assert_msg(hb[i] == hw[i], "the bf16 dropout's element %d: %04x, the interpreter's %04x",
                      i, hb[i], hw[i]);
    ck_assert(sn_exec_get(ex, x->grad, got, &e) == SN_OK);
    v = sn_interp_value(it, x->grad);
    for (int i = 0; i < R * C; i++) want[i] = (float)v[i];
    ck_assert_msg(!memcmp(got, want, sizeof got), "dx (the masks backward) differs from the interpreter");
    sn_exec_free(ex);
    sn_interp_free(it);
    sn_program_free(p);
    sn_device_free(dev);
    sn_graph_free(g);
}
END_TEST

/* tiny GPT-2 with dropout: its graph has the three kinds of site and the seed input; the
 * evaluation graph and a compile without a backward have none (identity), and the trainer
 * reports the probability. */
START_TEST(gpt2_dropout_training_only) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.dropout = 0.2f;
    sn_graph *g = sn_graph_new(), *f = sn_graph_new(), *eg;
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, 2, 8, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_gpt2_build(f, &c, 2, 8, &m, &e) == SN_OK, "%s", e.msg);
    int sites = 0;
    for (int i = 0; i < g->n_nodes; i++) sites += g->nodes[i]->op == SN_OP_DROPOUT;
    ck_assert_int_eq(sites, 1 + 2 * c.n_layer);
    ck_assert(sn_graph_input(g, SN_ROLE_DROPOUT_SEED));
    sn_pipeline_opts po = sn_pipeline_defaults();
    ck_assert_msg(sn_compile(f, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg); /* no backward */
    po.backward = true;
    ck_assert_msg(sn_compile(g, &po, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pass_eval_graph(g, &eg, &e) == SN_OK, "%s", e.msg);
    const sn_graph *none[] = {f, eg};
    for (int k = 0; k < 2; k++) {
        ck_assert(!sn_graph_input(none[k], SN_ROLE_DROPOUT_SEED));
        for (int i = 0; i < none[k]->n_nodes; i++) ck_assert(none[k]->nodes[i]->op != SN_OP_DROPOUT);
    }
    sites = 0; /* the backward has one per forward dropout */
    for (int i = 0; i < g->n_nodes; i++) sites += g->nodes[i]->op == SN_OP_DROPOUT;
    ck_assert_int_eq(sites, 2 * (1 + 2 * c.n_layer));
    sn_train_opts o;
    sn_train_opts_default(&o, 2);
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    ck_assert(sn_trainer_dropout(t) == 0.2f);
    sn_trainer_free(t);
    c.dropout = 1.0f; /* refused, saying what to give */
    sn_graph *bad = sn_graph_new();
    ck_assert(sn_gpt2_build(bad, &c, 2, 8, &m, &e) == SN_ERR_INVALID && strstr(e.msg, "[0, 1)"));
    sn_graph_free(bad);
    sn_graph_free(eg);
    sn_graph_free(f);
    sn_graph_free(g);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("dropout");
    TCase *tc = tcase_create("op");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, mask_in_the_interpreter);
    tcase_add_loop_test(tc, kernels_are_the_interpreter, 0, 2);
    tcase_add_test(tc, gpt2_dropout_training_only);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
