/* harness.c: see harness.h. */
#include "harness.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "ir/nf4.h"
#include "models/gpt2.h"
#include "runtime/device.h"
#include "train/train.h"
#include "support/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sn_test_main(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void sn_check_close(const char *what, const double *got, const double *want, size_t n,
                    double tol, double floor) {
    double scale = floor, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]) / scale;
        if (!(err <= worst)) { /* NaN propagates as a failure */
            worst = err;
            at = i;
            if (isnan(err)) break;
        }
    }
    if (getenv("SN_TEST_WORST")) /* to measure a tolerance: every comparison's worst */
        fprintf(stderr, "SN_TEST_WORST %s %.3g\n", what, worst);
    ck_assert_msg(worst <= tol, "%s: normalized error %.3g > %.3g at [%zu]: got %.9g, want %.9g",
                  what, worst, tol, at, n ? got[at] : 0.0, n ? want[at] : 0.0);
}

void sn_check_param_grad(sn_interp *it, const sn_graph *g, const sn_node *p, double *vals,
                         int points, double min_grad, double tol) {
    sn_err e;
    ck_assert(points >= 4 && points <= 64);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    const double *grad = sn_interp_value(it, p->grad);
    ck_assert_msg(grad, "%s: gradient not kept", p->name);
    int64_t n = sn_numel(p), stride = n / (points * 3 / 4) + 1;
    double an[64], fd[64];
    int k = 0;
    for (int64_t i = 0; i < n && k < points; i += stride, k++) an[k] = grad[i];
    k = 0;
    for (int64_t i = 0; i < n && k < points; i += stride, k++) {
        const double h = 1e-5, keep = vals[i];
        double up, down;
        vals[i] = keep + h;
        ck_assert(!sn_interp_set_f64(it, p, vals, &e) && !sn_interp_run(it, &e));
        up = sn_interp_value(it, g->loss)[0];
        vals[i] = keep - h;
        ck_assert(!sn_interp_set_f64(it, p, vals, &e) && !sn_interp_run(it, &e));
        down = sn_interp_value(it, g->loss)[0];
        vals[i] = keep;
        ck_assert(!sn_interp_set_f64(it, p, vals, &e));
        fd[k] = (up - down) / (2 * h);
    }
    char what[160];
    snprintf(what, sizeof what, "d loss / d %s", p->name);
    double mx = 0;
    for (int j = 0; j < k; j++) mx = fmax(mx, fabs(an[j]));
    ck_assert_msg(mx > min_grad, "%s: gradient %g is about zero: the check would prove nothing", what, mx);
    sn_check_close(what, an, fd, (size_t)k, tol, 1e-3);
}

#ifndef SN_TEST_ASSETS
#define SN_TEST_ASSETS "../assets" /* run by hand from build/; meson test sets SN_ASSETS */
#endif

uint8_t *sn_test_nf4_random(int64_t n, uint64_t seed) {
    sn_nf4_layout l = sn_nf4_layout_of(n);
    uint8_t *q = malloc((size_t)l.bytes);
    ck_assert(q);
    sn_rng r = sn_rng_seed(seed);
    for (int64_t i = 0; i < l.bytes; i++) q[i] = (uint8_t)sn_rng_below(&r, 256);
    if (n % 2) q[l.bytes - 1] &= 0xf0; /* an odd n's last low nibble is 0 (nf4.h) */
    float mean = 2e-5f, steps[4] = {1e-7f, 600, 1e-3f, 1};
    memcpy(q, &mean, 4);
    for (int64_t g = 0; g < l.groups; g++) memcpy(q + l.off_steps + 4 * g, &steps[g % 4], 4);
    return q;
}

const char *sn_test_asset(const char *name) {
    static char buf[4096];
    const char *root = getenv("SN_ASSETS");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : SN_TEST_ASSETS, name);
    return buf;
}

float *sn_test_scratch(const sn_kernel *k) {
    enum { SLOTS = 64 };
    static struct {
        int scratch;
        int64_t n;
        float *buf;
    } slot[SLOTS];
    static int used;
    int at = 0;
    while (at < used && slot[at].scratch != k->scratch) at++;
    int64_t n = sn_kernel_scratch_bytes(k) / 4;
    if (k->stage == SN_SUM_FINISH) {
        ck_assert_msg(at < used && slot[at].n == n, "%s: a FINISH kernel before its PARTIAL kernel",
                      k->name);
        return slot[at].buf;
    }
    ck_assert(k->stage == SN_SUM_PARTIAL);
    if (at == used) {
        ck_assert(used < SLOTS);
        slot[used++] = (typeof(slot[0])){.scratch = k->scratch};
    }
    free(slot[at].buf);
    slot[at].n = n;
    slot[at].buf = malloc(sizeof(float) * (size_t)n + 64);
    ck_assert(slot[at].buf);
    for (int64_t i = 0; i < n; i++) slot[at].buf[i] = NAN;
    if (k->kind == SN_KER_GATHER) /* buckets: an entry left unwritten is a run of one */
        for (int64_t i = 0; i < n; i++) memcpy(&slot[at].buf[i], &(uint32_t){0x00010001u}, 4);
    return slot[at].buf;
}

sn_status sn_test_tiny_loss_graph(void *ctx, int b, sn_graph **out, sn_err *e) {
    const sn_test_tiny_shape *sh = ctx;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = sh->vocab;
    *out = sn_graph_new();
    sn_gpt2 m;
    sn_status s = sn_gpt2_build(*out, &c, b, sh->seq, &m, e);
    sn_graph_clear_outputs((*out));
    sn_graph_add_output(*out, m.loss);
    return s;
}

void sn_test_same_state(const sn_trainer *a, const sn_trainer *b) {
    sn_err e;
    for (int i = 0; i < sn_trainer_param_count(a); i++) {
        size_t n = (size_t)sn_numel(sn_trainer_param_node(a, i));
        float *x = malloc(4 * n), *y = malloc(4 * n);
        ck_assert(x && y);
        for (int w = SN_PARAM_WEIGHTS; w <= SN_PARAM_V; w++) {
            ck_assert(sn_trainer_get_param(a, i, (sn_param_which)w, x, &e) == SN_OK);
            ck_assert(sn_trainer_get_param(b, i, (sn_param_which)w, y, &e) == SN_OK);
            ck_assert_msg(!memcmp(x, y, 4 * n), "%s (%d) differs", sn_trainer_param_node(a, i)->name, w);
        }
        free(x);
        free(y);
    }
}

float **sn_param_snapshot(sn_trainer *t) {
    sn_err e;
    int np = sn_trainer_param_count(t);
    float **w = malloc(sizeof *w * (size_t)np + 1);
    ck_assert(w);
    for (int i = 0; i < np; i++) {
        w[i] = malloc(4 * (size_t)sn_numel(sn_trainer_param_value(t, i))); /* NF4: dequantized */
        ck_assert_msg(w[i] && sn_trainer_get_param(t, i, SN_PARAM_WEIGHTS, w[i], &e) == SN_OK, "%s", e.msg);
    }
    return w;
}

int sn_check_trained_only(sn_trainer *t, float **before, bool (*trained)(const char *name),
                          const char *what) {
    sn_err e;
    int changed = 0;
    for (int i = 0; i < sn_trainer_param_count(t); i++) {
        const sn_node *p = sn_trainer_param_node(t, i);
        size_t n = (size_t)sn_numel(sn_trainer_param_value(t, i));
        float *now = malloc(4 * n);
        ck_assert_msg(now && sn_trainer_get_param(t, i, SN_PARAM_WEIGHTS, now, &e) == SN_OK, "%s", e.msg);
        bool same = !memcmp(now, before[i], 4 * n);
        if (trained(p->name)) changed += !same;
        else ck_assert_msg(same, "base parameter %s changed in %s", p->name, what);
        free(now);
        free(before[i]);
    }
    free(before);
    return changed;
}

/* ---- decoding over a KV cache ---- */

static uint64_t cache_rng = 0x2545f4914f6cdd1dull;
static double cache_uniform(double lo, double hi) {
    cache_rng ^= cache_rng >> 12, cache_rng ^= cache_rng << 25, cache_rng ^= cache_rng >> 27;
    return lo + (hi - lo) * (double)((cache_rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

/* (B, Hkv, N, d) -> (B, Hkv G, N, d), each kv head repeated for its G query heads */
static sn_node *repeat_heads(sn_graph *g, sn_node *x, int G) {
    int64_t B = sn_node_dim(x, 0), Hkv = sn_node_dim(x, 1), N = sn_node_dim(x, 2), d = sn_node_dim(x, 3);
    sn_node *r = sn_broadcast(g, sn_reshape(g, x, SN_SHAPE(B, Hkv, 1, N * d)), SN_SHAPE(B, Hkv, G, N * d));
    return sn_reshape(g, r, SN_SHAPE(B, Hkv * G, N, d));
}

sn_graph *sn_test_cache_attention(int B, int H, int Hkv, int T, int S, int D, int Dv, sn_dtype dt,
                                  struct sn_interp **it, const sn_node **fused, const sn_node **written) {
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_input(g, "q", dt, SN_SHAPE(B, H, T, D));
    sn_node *kc = sn_input(g, "k_cache", dt, SN_SHAPE(B, Hkv, S, D));
    sn_node *vc = sn_input(g, "v_cache", dt, SN_SHAPE(B, Hkv, S, Dv));
    sn_node *mask = sn_input(g, "mask", SN_F32, SN_SHAPE(B, 1, 1, S));
    sn_node *k = sn_input(g, "k", dt, SN_SHAPE(B, Hkv, T, D));
    sn_node *v = sn_input(g, "v", dt, SN_SHAPE(B, Hkv, T, Dv));
    float f = 1.0f / sqrtf((float)D);
    sn_node *y = sn_attention_cache(g, q, kc, vc, mask, k, v, f);
    int G = H / Hkv;
    if (dt != SN_F32) { /* written out in f32 (the mask is f32) */
        q = sn_cast(g, q, SN_F32), kc = sn_cast(g, kc, SN_F32), vc = sn_cast(g, vc, SN_F32);
        k = sn_cast(g, k, SN_F32), v = sn_cast(g, v, SN_F32);
    }
    sn_node *old = sn_add(g, sn_scale(g, sn_matmul_t(g, q, repeat_heads(g, kc, G), false, true), f), mask);
    sn_node *now = sn_causal_mask(g, sn_scale(g, sn_matmul_t(g, q, repeat_heads(g, k, G), false, true), f));
    sn_node *p = sn_softmax(g, sn_concat(g, 2, (sn_node *[]){old, now}, -1));
    sn_node *w = sn_add(g, sn_matmul(g, sn_slice(g, p, -1, 0, S), repeat_heads(g, vc, G)),
                        sn_matmul(g, sn_slice(g, p, -1, S, S + T), repeat_heads(g, v, G)));
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_graph_add_output(g, y);
    sn_graph_add_output(g, w);
    *it = sn_interp_new(g, false);
    sn_interp_keep_all(*it, true);
    sn_err e;
    sn_node *ins[6];
    for (int i = 0; i < 6; i++) ins[i] = y->in[i]; /* the inputs, not their casts */
    for (int i = 0; i < 6; i++) {
        int64_t n = sn_numel(ins[i]);
        double *x = malloc(sizeof(double) * (size_t)n);
        ck_assert(x);
        for (int64_t j = 0; j < n; j++) {
            if (ins[i] != mask) x[j] = sn_dtype_round(dt, cache_uniform(-2, 2));
            else x[j] = j < S || cache_uniform(0, 1) < 0.3 ? -INFINITY : (float)cache_uniform(-1, 0);
        }
        ck_assert_msg(sn_interp_set_f64(*it, ins[i], x, &e) == SN_OK, "%s", e.msg);
        free(x);
    }
    ck_assert_msg(sn_interp_run(*it, &e) == SN_OK, "%s", e.msg);
    *fused = y;
    *written = w;
    return g;
}

int64_t sn_test_eval_bytes(sn_trainer *t) {
    sn_err e;
    ck_assert_msg(sn_trainer_eval_program(t, &e), "%s", e.msg);
    sn_exec_stats st;
    sn_exec_stats_get(sn_trainer_eval_exec(t), &st);
    return st.persistent_bytes + (st.arena_shared ? 0 : st.arena_bytes);
}

void sn_test_rule_batch(int32_t *x, int32_t *y, int n, int vocab, uint64_t seed) {
    sn_rng r = sn_rng_seed(seed);
    for (int i = 0; i < n; i++) {
        x[i] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
        y[i] = (x[i] * 5 + 3) % vocab;
    }
}

void sn_test_lcg_batch(int32_t *x, int32_t *y, int n, int vocab, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
        y[i] = (x[i] * 3 + 1) % vocab;
    }
}

sn_trainer *sn_test_trainer(sn_graph *g, sn_device *d, uint64_t seed, int steps, float lr) {
    sn_train_opts o;
    sn_train_opts_default(&o, steps);
    o.lr = lr;
    o.seed = seed;
    o.device = d;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

char *sn_test_replace_first(const char *src, const char *needle, const char *by) {
    const char *at = strstr(src, needle);
    ck_assert_msg(at, "the planted bug's text \"%s\" is not in the kernel", needle);
    size_t n = strlen(src), a = (size_t)(at - src), nl = strlen(needle), bl = strlen(by);
    char *out = malloc(n - nl + bl + 1);
    ck_assert(out);
    memcpy(out, src, a);
    memcpy(out + a, by, bl);
    memcpy(out + a + bl, at + nl, n - a - nl + 1);
    return out;
}
