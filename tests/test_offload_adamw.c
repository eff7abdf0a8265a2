/* test_offload_adamw.c: the host AdamW of offloaded training (train/offload.c: threads and
 * vectors) against the plain scalar loop it replaced and the CPU device's generated ADAMW kernel
 * (kernel.h), bit for bit: p, m, v and the 16-bit weight shadows (bf16, f16), on random inputs
 * over decayed and undecayed ranges, at sizes that are not multiples of any vector width or of
 * the pool's parts, on 1 to 3 threads. Convention: "the same" is memcmp, never a tolerance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device.h"
#include "train/offload.h"
#include "harness.h"

/* The scalar loop before threads and vectors (offload.c's former body): the oracle. */
static void scalar_adamw(const float *h, float *p, float *m, float *v, const float *g, int64_t n,
                         int64_t n_decay) {
    float b1 = h[SN_OPT_BETA1], b2 = h[SN_OPT_BETA2], c1 = 1.0f - b1, c2 = 1.0f - b2;
    for (int64_t i = 0; i < n; i++) {
        float wd = i < n_decay ? h[SN_OPT_WD] : 0.0f;
        float gi = g[i] * h[SN_OPT_INV_MICRO];
        gi = gi * h[SN_OPT_SCALE];
        float ma = b1 * m[i], mb = c1 * gi;
        float mi = ma + mb;
        float g2 = gi * gi;
        float va = b2 * v[i], vb = c2 * g2;
        float vi = va + vb;
        float mhat = mi / h[SN_OPT_BC1];
        float den = sqrtf(vi / h[SN_OPT_BC2]);
        den = den + h[SN_OPT_EPS];
        float q = mhat / den, d = wd * p[i];
        float upd = q + d;
        float step = h[SN_OPT_LR] * upd;
        p[i] = p[i] - step;
        m[i] = mi;
        v[i] = vi;
    }
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void) { /* [0, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
/* magnitudes over many binades, either sign, some zeros */
static float wide(double lo_exp, double hi_exp) {
    double u = uniform();
    if (u < 0.02) return 0.0f;
    float x = (float)exp2(lo_exp + (hi_exp - lo_exp) * uniform());
    return uniform() < 0.5 ? -x : x;
}

typedef struct {
    float h[SN_OPT_SCALARS];
    float *p, *m, *v, *g;
    int64_t n, n_decay;
} inputs;

static void make(inputs *in, int64_t n, int64_t n_decay, int t) {
    *in = (inputs){.n = n, .n_decay = n_decay};
    float *h = in->h;
    h[SN_OPT_LR] = 3e-4f * (float)(1 + uniform()), h[SN_OPT_BETA1] = 0.9f, h[SN_OPT_BETA2] = 0.95f;
    h[SN_OPT_EPS] = 1e-8f, h[SN_OPT_WD] = 0.1f * (float)(1 + uniform());
    h[SN_OPT_BC1] = 1.0f - powf(0.9f, (float)t), h[SN_OPT_BC2] = 1.0f - powf(0.95f, (float)t);
    h[SN_OPT_SCALE] = uniform() < 0.5 ? 1.0f : (float)uniform(), h[SN_OPT_INV_MICRO] = 1.0f / 3;
    in->p = malloc(4 * (size_t)n), in->m = malloc(4 * (size_t)n);
    in->v = malloc(4 * (size_t)n), in->g = malloc(4 * (size_t)n);
    ck_assert(in->p && in->m && in->v && in->g);
    for (int64_t i = 0; i < n; i++) {
        in->p[i] = wide(-12, 3), in->g[i] = wide(-30, 4), in->m[i] = wide(-30, 0);
        in->v[i] = fabsf(wide(-60, 2));
    }
}

static void drop(inputs *in) { free(in->p), free(in->m), free(in->v), free(in->g); }

typedef struct {
    float *p, *m, *v;
    uint16_t *low;
} state;

static state copy(const inputs *in) {
    size_t b = 4 * (size_t)in->n;
    state s = {malloc(b), malloc(b), malloc(b), calloc((size_t)in->n, 2)};
    ck_assert(s.p && s.m && s.v && s.low);
    memcpy(s.p, in->p, b), memcpy(s.m, in->m, b), memcpy(s.v, in->v, b);
    return s;
}

static void free_state(state *s) { free(s->p), free(s->m), free(s->v), free(s->low); }

static void same(const state *a, const state *b, int64_t n, bool low, const char *what) {
    const float *x[3] = {a->p, a->m, a->v}, *y[3] = {b->p, b->m, b->v};
    static const char *names[3] = {"p", "m", "v"};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(!memcmp(&x[k][i], &y[k][i], 4), "%s, n %lld: %s[%lld] %a vs %a", what,
                          (long long)n, names[k], (long long)i, x[k][i], y[k][i]);
    for (int64_t i = 0; low && i < n; i++)
        ck_assert_msg(a->low[i] == b->low[i], "%s, n %lld: low[%lld] %#x vs %#x", what,
                      (long long)n, (long long)i, a->low[i], b->low[i]);
}

/* The CPU device's generated ADAMW kernel (flat_low: low_t) on the inputs. */
static state device_adamw(sn_device *d, const inputs *in, sn_dtype low_t) {
    sn_err e;
    sn_kernel k = sn_optim_kernel(SN_KER_ADAMW, in->n, in->n_decay, low_t, "opt_adamw");
    sn_kernel *ks[1] = {&k};
    void *handle;
    ck_assert_msg(d->compile(d, ks, 1, &handle, &e) == SN_OK, "%s", e.msg);
    size_t b = 4 * (size_t)in->n;
    const void *src[6] = {in->p, in->m, in->v, in->g, in->h, NULL};
    size_t bytes[6] = {b, b, b, b, 4 * SN_OPT_SCALARS, 2 * (size_t)in->n};
    void *buf[6];
    for (int i = 0; i < 6; i++) {
        ck_assert_msg((buf[i] = d->alloc(d, bytes[i], &e)), "%s", e.msg);
        if (src[i]) ck_assert(d->upload(d, buf[i], src[i], bytes[i], &e) == SN_OK);
    }
    ck_assert_msg(d->launch(d, &k, handle, buf, &e) == SN_OK, "%s", e.msg);
    ck_assert(d->sync(d, &e) == SN_OK);
    state s = copy(in);
    float *dst[3] = {s.p, s.m, s.v};
    for (int i = 0; i < 3; i++) ck_assert(d->download(d, dst[i], buf[i], b, &e) == SN_OK);
    if (low_t != SN_F32) ck_assert(d->download(d, s.low, buf[5], bytes[5], &e) == SN_OK);
    for (int i = 0; i < 6; i++) d->free(d, buf[i]);
    return s;
}

static const int64_t sizes[] = {1, 7, 15, 17, 63, 65, 129, 1000, 4099, 65537 + 30};

/* threads and vectors against the scalar loop, with and without the bf16 and f16 shadows */
START_TEST(host_adamw_is_the_scalar_loop) {
    sn_pool *pools[3] = {NULL, sn_pool_new(2), sn_pool_new(3)};
    ck_assert(pools[1] && pools[2]);
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        int64_t n = sizes[z], splits[4] = {0, n / 3, n - 1, n};
        for (int c = 0; c < 4; c++) {
            inputs in;
            make(&in, n, splits[c], 1 + (int)(z + c) % 40);
            state want = copy(&in);
            scalar_adamw(in.h, want.p, want.m, want.v, in.g, n, in.n_decay);
            for (int t = 0; t < 3; t++) {
                sn_dtype low = t == 0 ? SN_F32 : t == 1 ? SN_BF16 : SN_F16;
                state got = copy(&in);
                sn_offload_adamw(pools[t], in.h, got.p, got.m, got.v, in.g,
                                 low == SN_F32 ? NULL : got.low, low, n, in.n_decay);
                same(&want, &got, n, false, "host AdamW against the scalar loop");
                free_state(&got);
            }
            free_state(&want);
            drop(&in);
        }
    }
    for (int t = 1; t < 3; t++) sn_pool_free(pools[t]);
}
END_TEST

/* ... and against the device's generated kernel, p, m, v and the shadows' bits */
START_TEST(host_adamw_is_the_device_kernel) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(1, &d, &e) == SN_OK, "%s", e.msg);
    sn_pool *pool = sn_pool_new(3);
    ck_assert(pool);
    static const sn_dtype lows[3] = {SN_F32, SN_BF16, SN_F16};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        int64_t n = sizes[z];
        for (int t = 0; t < 3; t++) {
            inputs in;
            make(&in, n, (n * (t + 1)) / 4, 2 + (int)z);
            state want = device_adamw(d, &in, lows[t]), got = copy(&in);
            sn_offload_adamw(pool, in.h, got.p, got.m, got.v, in.g,
                             lows[t] == SN_F32 ? NULL : got.low, lows[t], n, in.n_decay);
            same(&want, &got, n, lows[t] != SN_F32, sn_dtype_name(lows[t]));
            free_state(&want), free_state(&got);
            drop(&in);
        }
    }
    sn_pool_free(pool);
    sn_device_free(d);
}
END_TEST

/* The accumulation of micro-batches' gradients: sum += g, exactly, on any number of threads. */
START_TEST(host_acc_adds) {
    sn_pool *pool = sn_pool_new(3);
    ck_assert(pool);
    int64_t n = 65537 + 30;
    float *sum = malloc(4 * (size_t)n), *want = malloc(4 * (size_t)n), *g = malloc(4 * (size_t)n);
    ck_assert(sum && want && g);
    for (int64_t i = 0; i < n; i++) sum[i] = want[i] = wide(-20, 2), g[i] = wide(-20, 2);
    for (int64_t i = 0; i < n; i++) want[i] += g[i];
    sn_offload_acc(pool, sum, g, n);
    ck_assert(!memcmp(sum, want, 4 * (size_t)n));
    free(sum), free(want), free(g);
    sn_pool_free(pool);
}
END_TEST

/* The delayed update's job (offload.h sn_offload_job) doing its parts in a given order on a
 * thread of its own, as the runner orders them (the last layers' first): the result that of one
 * host AdamW over the whole range, bit for bit (p, m, v and the bf16 shadows, the decayed prefix
 * cut by the parts); after sn_offload_job_wait(k) the first k parts already final, at every k,
 * while the job goes on with the rest. (A job that says a part is done before it is, planted,
 * passed: the waiting thread wakes after the part's few microseconds; a timing, not a check.) */
START_TEST(job_parts_in_order) {
    enum { PARTS = 6 };
    int64_t n = 3 * 65537 + 11, cut[PARTS + 1] = {0, 5, 4099, 65537, 70000, 2 * 65537 + 3, n};
    inputs in;
    make(&in, n, 70001, 7);
    state want = copy(&in), got = copy(&in);
    sn_pool *pool = sn_pool_new(3);
    ck_assert(pool);
    sn_offload_adamw(pool, in.h, want.p, want.m, want.v, in.g, want.low, SN_BF16, n, in.n_decay);
    sn_offload_range order[PARTS];
    for (int i = 0; i < PARTS; i++) /* back to front, as the backward frees the weights */
        order[i] = (sn_offload_range){cut[PARTS - 1 - i], cut[PARTS - i] - cut[PARTS - 1 - i]};
    sn_offload_job job = {.pool = pool, .threaded = true};
    sn_offload_job_start(&job, in.h, got.p, got.m, got.v, in.g, got.low, SN_BF16, n, in.n_decay,
                         order, PARTS);
    for (int k = 1; k <= PARTS; k++) {
        sn_offload_job_wait(&job, k);
        const sn_offload_range *r = &order[k - 1];
        state a = {want.p + r->lo, want.m + r->lo, want.v + r->lo, want.low + r->lo};
        state b = {got.p + r->lo, got.m + r->lo, got.v + r->lo, got.low + r->lo};
        same(&a, &b, r->n, true, "a part the job said was done");
    }
    sn_offload_job_free(&job);
    same(&want, &got, n, true, "the job's parts against one AdamW");
    sn_pool_free(pool);
    free_state(&want);
    free_state(&got);
    drop(&in);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("offload_adamw");
    TCase *tc = tcase_create("offload_adamw");
    tcase_add_test(tc, host_adamw_is_the_scalar_loop);
    tcase_add_test(tc, host_adamw_is_the_device_kernel);
    tcase_add_test(tc, host_acc_adds);
    tcase_add_test(tc, job_parts_in_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
