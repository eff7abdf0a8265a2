/* test_device.c: the memory contract and the optimizer on the device: tiny GPT-2 trained
 * through the checked device (pointers the host cannot dereference) matches the plain CPU
 * device bit for bit; a frozen parameter costs no gradient and no moments, and keeps its values.
 * Convention: both trainers see the same batches, micro-batches and evaluations. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "models/gpt2.h"
#include "runtime/device.h"
#include "runtime/gemm_lowp.h"
#include "support/memfree.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "harness.h"

enum { B = 2, T = 16, V = 64, STEPS = 20 };

/* tiny GPT-2 (vocabulary 64) with its backward; `frozen` names a parameter to freeze or is NULL */
static sn_graph *tiny(const char *frozen) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; frozen && i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM && !strcmp(g->nodes[i]->name, frozen)) sn_param_freeze(g->nodes[i]);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % V);
        y[i] = (x[i] * 3 + 1) % V; /* a rule the model can learn */
    }
}

/* STEPS steps (every third of two micro-batches, with an evaluation between them) */
static void train(sn_trainer *t, double *loss, double *norm) {
    int32_t x[B * T], y[B * T];
    sn_err e;
    for (int s = 0; s < STEPS; s++) {
        batch(x, y, (uint64_t)s);
        ck_assert_msg(sn_trainer_accumulate(t, x, y, NULL, &e) == SN_OK, "%s", e.msg);
        if (s % 3 == 2) {
            double l;
            batch(x, y, 1000 + (uint64_t)s);
            ck_assert_msg(sn_trainer_eval(t, x, y, &l, &e) == SN_OK, "%s", e.msg);
            double la; /* the forward-only evaluation's loss is the full run's, to the bit */
            ck_assert_msg(sn_trainer_accumulate(t, x, y, &la, &e) == SN_OK, "%s", e.msg);
            ck_assert_msg(l == la, "step %d: eval %.9g, the forward and backward %.9g", s, l, la);
        }
        sn_step_stats st;
        ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
        loss[s] = st.loss;
        norm[s] = st.grad_norm;
    }
}

static sn_trainer *trainer(sn_graph *g, sn_device *d) {
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.device = d;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    return t;
}

START_TEST(checked_device_trains_the_same) {
    sn_err e;
    sn_device *plain, *inner, *checked;
    ck_assert_msg(sn_cpu_device_new(2, &plain, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_cpu_device_new(2, &inner, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_checked_device_new(inner, &checked, &e) == SN_OK);
    sn_graph *g1 = tiny(NULL), *g2 = tiny(NULL);
    sn_trainer *a = trainer(g1, plain), *b = trainer(g2, checked);
    double la[STEPS], lb[STEPS], na[STEPS], nb[STEPS];
    train(a, la, na);
    train(b, lb, nb);
    for (int s = 0; s < STEPS; s++) {
        ck_assert_msg(la[s] == lb[s] && na[s] == nb[s], "step %d: loss %.9g vs %.9g, norm %.9g vs %.9g",
                      s, la[s], lb[s], na[s], nb[s]);
        ck_assert(isfinite(la[s]));
    }
    ck_assert_msg(la[STEPS - 1] < la[0] - 0.5, "loss %g -> %g: not learning", la[0], la[STEPS - 1]);
    sn_test_same_state(a, b);
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(plain);
    sn_device_free(checked);
}
END_TEST

/* the checked device's pointers fault when the host dereferences them */
/* ---- the host's free memory (support/memfree.h), on made-up /proc and /sys trees ---- */

static void put(const char *root, const char *path, const char *text) {
    char file[1024], cmd[1200];
    snprintf(file, sizeof file, "%s%s", root, path);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", file);
    ck_assert_int_eq(system(cmd), 0);
    FILE *f = fopen(file, "w");
    ck_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* MemAvailable alone, then within a v1 memory cgroup's limit (its own folder, or the mount's
 * root in a cgroup namespace), within a v2 one, and neither "max" nor v1's unlimited number a
 * limit; a hybrid layout takes v1's memory controller over v2's path. */
START_TEST(host_memory_within_the_cgroup) {
    char root[] = "/tmp/sn_memfree_XXXXXX";
    ck_assert(mkdtemp(root));
    int64_t f = 0, t = 0, G = INT64_C(1) << 30;
    ck_assert(!sn_host_memory(root, &f, &t)); /* no meminfo */
    put(root, "/proc/meminfo", "MemTotal:       16777216 kB\nMemFree: 1 kB\nMemAvailable:   10485760 kB\n");
    ck_assert(sn_host_memory(root, &f, &t) && f == 10 * G && t == 16 * G);
    put(root, "/proc/self/cgroup", "5:cpu,cpuacct:/box\n4:memory:/box\n0::/\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "2147483648\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.usage_in_bytes", "536870912\n");
    ck_assert(sn_host_memory(root, &f, &t));
    ck_assert_msg(f == 3 * G / 2 && t == 2 * G, "v1: %lld free of %lld", (long long)f, (long long)t);
    put(root, "/proc/self/cgroup", "0::/\n4:memory:/elsewhere\n"); /* namespaced: the mount's root */
    put(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n");
    put(root, "/sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
    ck_assert(sn_host_memory(root, &f, &t) && f == 3 * G && t == 4 * G);
    put(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"); /* none */
    ck_assert(sn_host_memory(root, &f, &t) && f == 10 * G && t == 16 * G);
    put(root, "/proc/self/cgroup", "0::/user.slice/run\n");
    put(root, "/sys/fs/cgroup/user.slice/run/memory.max", "max\n");
    put(root, "/sys/fs/cgroup/user.slice/run/memory.current", "1000\n");
    ck_assert(sn_host_memory(root, &f, &t) && f == 10 * G);
    put(root, "/sys/fs/cgroup/user.slice/run/memory.max", "1073741824\n");
    ck_assert(sn_host_memory(root, &f, &t));
    ck_assert_msg(f == G - 1000 && t == G, "v2: %lld free of %lld", (long long)f, (long long)t);
    put(root, "/sys/fs/cgroup/user.slice/run/memory.current", "2147483648\n"); /* over it */
    ck_assert(sn_host_memory(root, &f, &t) && f == 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert(sn_host_memory("", &f, &t) && f > 0 && t >= f); /* this machine's */
}
END_TEST

START_TEST(checked_pointer_faults) {
    sn_err e;
    sn_device *inner, *checked;
    ck_assert(sn_cpu_device_new(1, &inner, &e) == SN_OK);
    ck_assert(sn_checked_device_new(inner, &checked, &e) == SN_OK);
    volatile float *p = checked->alloc(checked, 64, &e);
    ck_assert(p);
    float one = 1, back = 0;
    ck_assert(checked->upload(checked, (void *)p, &one, 4, &e) == SN_OK);
    ck_assert(checked->download(checked, &back, (void *)p, 4, &e) == SN_OK && back == 1);
    p[0] = 2; /* SIGSEGV here */
}
END_TEST

static int64_t align64(int64_t x) { return (x + 63) / 64 * 64; }

/* What the optimizer holds besides the program (train/backend.c): m and v over the flat range,
 * the step's scalars and one norm partial per block. */
static int64_t state_bytes(int64_t flat_bytes) {
    int64_t n = flat_bytes / 4;
    return 2 * flat_bytes + 4 * (SN_OPT_SCALARS + (n + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK);
}

START_TEST(frozen_parameter) {
    bool compiled = _i == 1;
    sn_err e;
    sn_device *d = NULL;
    if (compiled) ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g1 = tiny(NULL), *g2 = tiny("wpe");
    sn_trainer *a = trainer(g1, d), *b = trainer(g2, d);
    int wpe = sn_trainer_find_param(b, "wpe");
    const sn_node *p = sn_trainer_param_node(b, wpe);
    ck_assert(p->a.frozen && !p->grad && sn_trainer_param_node(a, wpe)->grad);
    int64_t bytes = 4 * sn_numel(p), flat = 0;
    for (int i = 0; i < sn_trainer_param_count(a); i++)
        flat += compiled ? align64(4 * sn_numel(sn_trainer_param_node(a, i))) : 4 * sn_numel(sn_trainer_param_node(a, i));
    int64_t one = compiled ? align64(bytes) : bytes;
    /* no moments for it */
    ck_assert_int_eq(sn_trainer_state_bytes(a) - sn_trainer_state_bytes(b), state_bytes(flat) - state_bytes(flat - one));
    if (compiled) { /* no gradient buffer: the persistent block drops by its aligned size */
        const sn_program *pa = sn_trainer_program(a), *pb = sn_trainer_program(b);
        ck_assert_int_eq(pa->persistent_bytes - pb->persistent_bytes, align64(bytes));
        /* its gradient was two kernels: the position gradient summed over the batch, (T, C),
         * an arena value, then padded to wpe's (ctx, C); both are gone, and the arena values
         * with them (the planned peak is elsewhere and does not move) */
        ck_assert_int_eq(pa->n_kernels - pb->n_kernels, 2);
        ck_assert_int_eq(pa->sum_bytes - pb->sum_bytes, 4 * T * p->shape[1]);
        ck_assert_int_le(pb->arena_bytes, pa->arena_bytes);
        printf("frozen wpe: persistent %lld -> %lld, arena %lld -> %lld (no reuse %lld -> %lld), "
               "optimizer state %lld -> %lld bytes\n", (long long)pa->persistent_bytes,
               (long long)pb->persistent_bytes, (long long)pa->arena_bytes, (long long)pb->arena_bytes,
               (long long)pa->sum_bytes, (long long)pb->sum_bytes, (long long)sn_trainer_state_bytes(a),
               (long long)sn_trainer_state_bytes(b));
    }
    size_t n = (size_t)sn_numel(p);
    float *before = malloc(4 * n), *after = malloc(4 * n), *wte0 = malloc(4 * 64 * 64), *wte1 = malloc(4 * 64 * 64);
    int wte = sn_trainer_find_param(b, "wte");
    size_t nw = (size_t)sn_numel(sn_trainer_param_node(b, wte));
    ck_assert(nw <= 64 * 64);
    ck_assert(sn_trainer_get_param(b, wpe, SN_PARAM_WEIGHTS, before, &e) == SN_OK);
    ck_assert(sn_trainer_get_param(b, wte, SN_PARAM_WEIGHTS, wte0, &e) == SN_OK);
    double l[STEPS], nm[STEPS];
    train(b, l, nm);
    ck_assert_msg(l[STEPS - 1] < l[0] - 0.5, "loss %g -> %g: not learning", l[0], l[STEPS - 1]);
    ck_assert(sn_trainer_get_param(b, wpe, SN_PARAM_WEIGHTS, after, &e) == SN_OK);
    ck_assert(sn_trainer_get_param(b, wte, SN_PARAM_WEIGHTS, wte1, &e) == SN_OK);
    ck_assert(!memcmp(before, after, 4 * n)); /* unchanged */
    ck_assert(memcmp(wte0, wte1, 4 * nw));     /* the others trained */
    ck_assert(sn_trainer_get_param(b, wpe, SN_PARAM_M, after, &e) == SN_OK);
    for (size_t i = 0; i < n; i++) ck_assert(after[i] == 0);
    /* the checkpoint keeps it: a fresh trainer resumed from the file has the same weights */
    char path[] = "/tmp/sn_frozen_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    sn_run_state r = {0};
    ck_assert_msg(sn_checkpoint_save(path, b, &r, &e) == SN_OK, "%s", e.msg);
    sn_graph *g3 = tiny("wpe");
    sn_trainer *c = trainer(g3, d);
    sn_run_state r2 = {0};
    ck_assert_msg(sn_checkpoint_load(path, c, &r2, &e) == SN_OK, "%s", e.msg);
    sn_test_same_state(b, c);
    unlink(path);
    sn_run_state_free(&r);
    sn_run_state_free(&r2);
    free(before), free(after), free(wte0), free(wte1);
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_trainer_free(c);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_graph_free(g3);
    sn_device_free(d);
}
END_TEST

/* the flag is part of the IR's text form */
START_TEST(frozen_round_trips) {
    sn_graph *g = sn_graph_new();
    sn_node *w = sn_param_freeze(sn_param(g, "w", SN_F32, SN_SHAPE(4, 3), SN_INIT_NORMAL, 0.5f));
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 4));
    sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(3), SN_INIT_ZEROS, 0);
    sn_err e;
    sn_node *loss = sn_mean(g, sn_sum(g, sn_add(g, sn_matmul(g, x, w), v), 1, false), 0, false);
    ck_assert_msg(loss && sn_backward(g, loss, &e) == SN_OK, "%s", sn_graph_error(g) ? sn_graph_error(g) : e.msg);
    ck_assert(!w->grad && v->grad);
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    sn_graph_print(g, f);
    fclose(f);
    ck_assert_msg(strstr(text, "frozen=1"), "%s", text);
    sn_graph *h;
    ck_assert_msg(sn_graph_parse(text, &h, &e) == SN_OK, "%s", e.msg);
    ck_assert(h->nodes[w->id]->a.frozen && !h->nodes[v->id]->a.frozen);
    free(text);
    sn_graph_free(h);
    sn_graph_free(g);
}
END_TEST

/* The bits sn_dtype_round gives v in t: bf16 the top half of its f32; f16 encoded by frexp,
 * apart from the CPU device's bit arithmetic. */
static uint16_t f16_bits_of(double r) {
    uint16_t sign = signbit(r) ? 0x8000 : 0;
    double a = fabs(r);
    if (isnan(r)) return 0x7e00;
    if (isinf(a)) return sign | 0x7c00;
    if (a < ldexp(1, -14)) return sign | (uint16_t)(a * ldexp(1, 24)); /* subnormal: exact */
    int ex;
    double m = frexp(a, &ex); /* a = m 2^ex, m in [0.5, 1) */
    return sign | (uint16_t)((ex + 14) << 10) | (uint16_t)(m * 2048 - 1024);
}
static uint16_t rounded_bits(sn_dtype t, float v) {
    if (t == SN_F16) return f16_bits_of(sn_dtype_round(SN_F16, v));
    float r = (float)sn_dtype_round(SN_BF16, v);
    uint32_t rb;
    memcpy(&rb, &r, sizeof rb);
    return (uint16_t)(rb >> 16);
}

/* A GEMM's t output on the CPU device (rounded on the bits) is sn_dtype_round's, the
 * interpreter's: the `n_edges` edge patterns first, then f32 patterns at a stride of 4099,
 * prime to 2^16 (every rounding case of the dropped bits, at every exponent); NaN kept only
 * where keep_nan (else 1.0). */
static void store_rounds_as_interpreter(sn_dtype t, const uint32_t *edges, int n_edges, bool keep_nan) {
    enum { N = 4096 };
    float c[N];
    uint16_t y[N];
    int64_t checked = 0;
    uint32_t u = 0;
    for (int round = 0; round < 256; round++) {
        for (int j = 0; j < N; j++, u += 4099u) {
            uint32_t bits = round == 0 && j < n_edges ? edges[j] : u;
            memcpy(&c[j], &bits, sizeof bits);
            if (isnan(c[j]) && !keep_nan) c[j] = 1.0f;
        }
        sn_gemm_store_lowp(t, y, c, NULL, NULL, N, 0, 1);
        for (int j = 0; j < N; j++) {
            uint16_t want = rounded_bits(t, c[j]);
            ck_assert_msg(y[j] == want, "%s %a: stored 0x%04x, sn_dtype_round's 0x%04x",
                          sn_dtype_name(t), (double)c[j], y[j], want);
            checked++;
        }
    }
    ck_assert_int_eq(checked, 256 * N);
}

/* bf16: the edges are ties both ways, the largest finite, overflow to infinity, zeros,
 * subnormals, infinities. */
START_TEST(gemm_bf16_store_rounds_as_interpreter) {
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00018000u,
                                     0x007fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7f7fffu,
                                     0x7f7f8000u, 0x7f7fffffu, 0xff7f8000u, 0x7f800000u, 0xff800000u};
    store_rounds_as_interpreter(SN_BF16, edges, sizeof edges / sizeof edges[0], false);
}
END_TEST

/* f16 (the CPU device's f16 GEMMs, rounded on the bits since session 24): the edges are f16's
 * largest finite (65504) and the ties around it, 65520 (to infinity), the smallest normal and
 * subnormal and the ties beside them, zeros, infinities, NaN; then every f16 value widened
 * (exact, NaN as NaN) against ldexp. */
START_TEST(gemm_f16_store_rounds_as_interpreter) {
    static const float values[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 65512.0f,
                                   0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f, 0x1.8p-25f, 3.0f * 0x1p-25f,
                                   INFINITY, -INFINITY, NAN, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f};
    enum { EDGES = sizeof values / sizeof values[0] };
    uint32_t edges[EDGES];
    memcpy(edges, values, sizeof edges);
    store_rounds_as_interpreter(SN_F16, edges, EDGES, true);
    for (uint32_t h = 0; h < 65536; h++) {
        int ex = (h >> 10) & 31, m = h & 1023;
        double want = ex == 0 ? ldexp(m, -24) : ex == 31 ? (m ? NAN : INFINITY) : ldexp(m | 1024, ex - 25);
        if (h & 0x8000) want = -want;
        float got = sn_lowp_widen(SN_F16, (uint16_t)h);
        ck_assert_msg(isnan(want) ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want),
                      "f16 0x%04x widened to %a, not %a", (unsigned)h, (double)got, want);
    }
}
END_TEST

/* An f16 GEMM on the CPU device widens its operands exactly (by the CPU's F16C where it has it,
 * else on the bits): every finite f16 value times a diagonal of 1s and 2s (alternating every 8
 * columns, so that operands widened out of place cannot cancel) comes out as itself times its
 * column's, subnormals and signed zeros included. */
START_TEST(gemm_f16_operands_widen_exactly) {
    enum { M = 256, K = 256 };
    uint16_t *a = malloc(sizeof(uint16_t) * M * K), *id = calloc((size_t)K * K, sizeof(uint16_t));
    float *c = malloc(sizeof(float) * M * K);
    ck_assert(a && id && c);
    for (int i = 0; i < M * K; i++) /* infinity and NaN (exponent 31) replaced: inf * 0 is NaN */
        a[i] = (i & 0x7c00) == 0x7c00 ? (uint16_t)(i & 0x83ff) : (uint16_t)i;
    for (int k = 0; k < K; k++) id[k * K + k] = k / 8 % 2 ? 0x4000 : 0x3c00; /* 2.0, 1.0 */
    sn_err e;
    ck_assert_msg(sn_gemm_lowp(SN_F16, false, false, M, K, K, a, K, id, K, c, K, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < M * K; i++) {
        float want = sn_lowp_widen(SN_F16, a[i]) * (i % K / 8 % 2 ? 2.0f : 1.0f);
        ck_assert_msg(c[i] == want, "f16 0x%04x: the GEMM gave %a, not %a", (unsigned)a[i],
                      (double)c[i], (double)want);
    }
    free(a);
    free(id);
    free(c);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("contract");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, checked_device_trains_the_same);
    tcase_add_test(tc, host_memory_within_the_cgroup);
    tcase_add_test_raise_signal(tc, checked_pointer_faults, SIGSEGV);
    tcase_add_loop_test(tc, frozen_parameter, 0, 2);
    tcase_add_test(tc, frozen_round_trips);
    tcase_add_test(tc, gemm_bf16_store_rounds_as_interpreter);
    tcase_add_test(tc, gemm_f16_store_rounds_as_interpreter);
    tcase_add_test(tc, gemm_f16_operands_widen_exactly);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
