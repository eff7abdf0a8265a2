/* test_attention_kernels.c: the LLVM attention kernels (codegen/llvm_attention.c), made from the
 * kernels of the real fuse pass and JIT-compiled through codegen/llvm.h, against the reference
 * interpreter. Convention: every buffer ends at an inaccessible page, so a kernel that reads or
 * writes one element past a buffer crashes the test; outputs start poisoned; each kernel runs
 * over its whole item range and again split unevenly, and the two must agree bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codegen/llvm/llvm.h"
#include "frontend/frontend.h"
#include "program/program.h"
#include "support/clock.h"
#include "interp/interp.h"
#include "passes/pipeline.h"
#include "harness.h"

/* ---- buffers that end at a guard page ---- */

typedef struct {
    void *map;
    size_t len;
    float *data;
    int64_t n;
} gbuf;

static void gbuf_new(gbuf *b, int64_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = sizeof(float) * (size_t)n;
    b->len = (bytes + page - 1) / page * page + page;
    b->map = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(b->map != MAP_FAILED);
    ck_assert(mprotect((char *)b->map + b->len - page, page, PROT_NONE) == 0);
    b->data = (float *)((char *)b->map + b->len - page - bytes);
    b->n = n;
}

static void gbuf_free(gbuf *b) {
    if (b->map) munmap(b->map, b->len);
    memset(b, 0, sizeof *b);
}

/* A large finite poison (bytes 0x7f): a NaN poison could hide in a max. */
static void poison(gbuf *b) { memset(b->data, 0x7f, sizeof(float) * (size_t)b->n); }

/* ---- inputs ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform(float lo, float hi) { /* xorshift64*, reproducible */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    double u = (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
    return lo + (hi - lo) * (float)u;
}

static void set_random(sn_interp *it, const sn_node *n, float amp) {
    int64_t len = sn_numel(n);
    float *x = malloc(sizeof(float) * (size_t)len);
    ck_assert(x);
    for (int64_t i = 0; i < len; i++) x[i] = uniform(-amp, amp);
    sn_err e;
    ck_assert_msg(sn_interp_set(it, n, x, &e) == SN_OK, "%s", e.msg);
    free(x);
}

/* ---- running the attention kernels of a graph against the interpreter ---- */

/* A JIT, or NULL (with a note) when sinter was built without LLVM: nothing to test then. */
static sn_jit *new_jit(void) {
    sn_jit *j;
    sn_err e;
    sn_status st = sn_jit_new(&j, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("skipped: %s\n", e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return j;
}

typedef struct {
    int b0, b1;          /* leading dims: items = b0 * b1 */
    int64_t T, S, D, Dv;
    float sharp;         /* scale = sharp / sqrt(D) */
    int hkv;             /* k's and v's heads (grouped-query: a divisor of b1); 0: b1 */
} att_case;

static int kv_heads(const att_case *c) { return c->hkv ? c->hkv : c->b1; }

static const char *case_str(const att_case *c, char *buf, size_t len) {
    snprintf(buf, len, "(%d x %d, kv heads %d) T=%lld S=%lld D=%lld Dv=%lld scale %.2f/sqrt(D)",
             c->b0, c->b1, kv_heads(c), (long long)c->T, (long long)c->S, (long long)c->D,
             (long long)c->Dv, c->sharp);
    return buf;
}

static double tolerance(const sn_node *n) {
    return n->op == SN_OP_ATTENTION || n->op == SN_OP_ATTENTION_LSE ? 1e-5 : 1e-5;
}

/* Compiles every attention kernel of g's fused program (expecting `want` of them), runs each on
 * guarded f32 copies of the interpreter's values of its inputs, and compares its outputs with
 * the interpreter's (which must have run with keep_all). Returns how many it checked. */
static int check_kernels(sn_graph *g, const sn_interp *it, int want, const char *what) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    sn_kernel *ks[8];
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ATTENTION) {
            ck_assert_int_lt(n, 8);
            ks[n++] = p->kernels[i];
        }
    ck_assert_int_eq(n, want);
    sn_jit *j = new_jit();
    if (!j) {
        sn_program_free(p);
        return 0;
    }
    sn_cpu_kernel_fn fns[8];
    ck_assert_msg(sn_jit_compile(j, ks, n, fns, &e) == SN_OK, "%s", e.msg);
    for (int ki = 0; ki < n; ki++) {
        const sn_kernel *k = ks[ki];
        int nargs = k->n_out + k->n_in;
        gbuf buf[SN_KER_MAX_ARGS] = {{0}};
        float *full[2] = {NULL, NULL};
        void *bufs[SN_KER_MAX_ARGS];
        for (int a = 0; a < nargs; a++) {
            const sn_node *x = k->args[a];
            gbuf_new(&buf[a], sn_numel(x));
            bufs[a] = buf[a].data;
            if (a < k->n_out) continue;
            const double *v = sn_interp_value(it, x);
            ck_assert_msg(v, "no reference value of %%%d", x->id);
            for (int64_t i = 0; i < buf[a].n; i++) buf[a].data[i] = (float)v[i];
        }
        /* the whole range, then an uneven split: [0, a) [a, n) */
        int64_t items = k->n_items, cut = items > 1 ? items / 3 + 1 : 0;
        for (int run = 0; run < 2; run++) {
            for (int a = 0; a < k->n_out; a++) poison(&buf[a]);
            if (run == 0) {
                fns[ki](bufs, 0, items);
            } else {
                fns[ki](bufs, 0, cut);
                fns[ki](bufs, cut, items);
            }
            for (int a = 0; a < k->n_out; a++) {
                const sn_node *x = k->args[a];
                int64_t len = buf[a].n;
                if (run == 1) {
                    ck_assert_msg(!memcmp(full[a], buf[a].data, sizeof(float) * (size_t)len),
                                  "%s: %s %%%d differs between a whole run and a split run", what,
                                  sn_op_name(x->op), x->id);
                    continue;
                }
                double *got = malloc(sizeof(double) * (size_t)len);
                ck_assert(got);
                for (int64_t i = 0; i < len; i++) got[i] = buf[a].data[i];
                char label[256];
                snprintf(label, sizeof label, "%s: %s (%s)", what, sn_op_name(x->op), k->name);
                sn_check_close(label, got, sn_interp_value(it, x), (size_t)len, tolerance(x), 1e-3);
                free(got);
                full[a] = malloc(sizeof(float) * (size_t)len);
                ck_assert(full[a]);
                memcpy(full[a], buf[a].data, sizeof(float) * (size_t)len);
            }
        }
        for (int a = 0; a < 2; a++) free(full[a]);
        for (int a = 0; a < nargs; a++) gbuf_free(&buf[a]);
    }
    sn_jit_free(j);
    sn_program_free(p);
    return n;
}

/* Forward and backward of one shape: lse and o (one kernel), dq, dk and dv (one kernel). */
static void check_case(const att_case *c) {
    char what[160];
    case_str(c, what, sizeof what);
    float scale = c->sharp / sqrtf((float)c->D);
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_input(g, "q", SN_F32, SN_SHAPE(c->b0, c->b1, c->T, c->D));
    sn_node *k = sn_input(g, "k", SN_F32, SN_SHAPE(c->b0, kv_heads(c), c->S, c->D));
    sn_node *v = sn_input(g, "v", SN_F32, SN_SHAPE(c->b0, kv_heads(c), c->S, c->Dv));
    sn_node *dout = sn_input(g, "dout", SN_F32, SN_SHAPE(c->b0, c->b1, c->T, c->Dv));
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_node *o = sn_attention(g, q, k, v, lse, scale);
    sn_node *dq = sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale);
    sn_node *dk = sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale);
    sn_node *dv = sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_node *outs[] = {o, lse, dq, dk, dv};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    set_random(it, q, 2);
    set_random(it, k, 2);
    set_random(it, v, 1);
    set_random(it, dout, 1);
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    check_kernels(g, it, 3, what); /* o and lse; dq; dk and dv */
    sn_interp_free(it);
    sn_graph_free(g);
}

/* The forward kernels the fuse pass makes when lse and o are not one kernel: attention_lse
 * alone, and attention reading a given lse. */
static void check_unfused(const att_case *c) {
    char what[160];
    case_str(c, what, sizeof what);
    float scale = c->sharp / sqrtf((float)c->D);
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_input(g, "q", SN_F32, SN_SHAPE(c->b0, c->b1, c->T, c->D));
    sn_node *k = sn_input(g, "k", SN_F32, SN_SHAPE(c->b0, kv_heads(c), c->S, c->D));
    sn_node *v = sn_input(g, "v", SN_F32, SN_SHAPE(c->b0, kv_heads(c), c->S, c->Dv));
    sn_node *lse_in = sn_input(g, "lse", SN_F32, SN_SHAPE(c->b0, c->b1, c->T));
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_node *o = sn_attention(g, q, k, v, lse_in, scale);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_graph_add_output(g, lse);
    sn_graph_add_output(g, o);
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    set_random(it, q, 2);
    set_random(it, k, 2);
    set_random(it, v, 1);
    set_random(it, lse_in, 0.5f); /* any lse: o is then sum_j exp(s_ij - lse_i) v_j */
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    check_kernels(g, it, 2, what);
    sn_interp_free(it);
    sn_graph_free(g);
}

/* Head sizes 5 (one masked vector), 16, 24 (a full vector and a tail at 16 lanes), 64, and 160
 * (too wide for two rows per step in registers); Dv unlike D; T = S and T < S; T = 1; T up to
 * 70 (a multiple of no block size, and odd: the last step of two rows repeats the last row),
 * and 131 and 200 keys (dk and dv in several chunks of keys).
 * Grouped-query (the last column): G = 2, 3 and 4 query heads per kv head, one kv head and
 * several, two batches (the kv slice of query slice bq is bq / G across them). */
static const att_case cases[] = {
    {1, 1, 1, 1, 5, 5, 1, 0},      {2, 3, 7, 7, 5, 5, 1, 0},     {1, 2, 1, 9, 5, 5, 1, 0},
    {2, 3, 33, 33, 16, 16, 1, 0},  {1, 3, 17, 40, 16, 16, 2, 0}, {2, 2, 19, 45, 24, 24, 1, 0},
    {1, 2, 70, 70, 64, 64, 1, 0},  {2, 1, 37, 70, 64, 64, 1, 0}, {1, 2, 70, 70, 64, 64, 4, 0},
    {1, 3, 23, 31, 24, 5, 1, 0},   {1, 2, 50, 64, 5, 40, 3, 0},  {1, 2, 20, 29, 160, 136, 1, 0},
    {2, 4, 7, 7, 5, 5, 1, 2},   {2, 6, 19, 45, 24, 24, 1, 2}, {1, 4, 37, 37, 64, 64, 2, 1},
    {2, 4, 33, 40, 16, 5, 1, 2}, {1, 8, 17, 17, 16, 16, 1, 2},
    /* rows in chunks of 64 (kernel.h: SN_ATT_ROW_CHUNK), taken 0, C - 1, 1, ..: three with an
     * odd last chunk (grouped-query), keys in four and queries in two with S > T */
    {1, 4, 131, 131, 16, 16, 1, 2}, {2, 2, 100, 200, 16, 24, 1, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

START_TEST(forward_and_backward) { check_case(&cases[_i]); }
END_TEST

START_TEST(unfused_forward) { check_unfused(&cases[_i]); }
END_TEST

/* A kernel whose item count is not its (batch x head) count is refused, with a message that
 * says what the count must be; its IR can be printed (sinter --dump-llvm). */
START_TEST(bad_items_and_ir_dump) {
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_input(g, "q", SN_F32, SN_SHAPE(2, 3, 8, 16));
    sn_node *o = sn_causal_attention(g, q, q, q, 0.25f);
    sn_graph_add_output(g, o);
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(p->n_kernels, 1);
    sn_kernel *k = p->kernels[0];
    ck_assert_int_eq(k->n_in, 1); /* q, k and v are one node */
    sn_jit *j = new_jit();
    if (!j) {
        sn_program_free(p);
        sn_graph_free(g);
        return;
    }
    char *ir = NULL;
    ck_assert_msg(sn_jit_kernel_ir(j, k, true, &ir, &e) == SN_OK, "%s", e.msg);
    ck_assert_ptr_nonnull(strstr(ir, k->name));
    free(ir);
    k->n_items = 5;
    sn_cpu_kernel_fn fn;
    ck_assert_int_eq(sn_jit_compile(j, &k, 1, &fn, &e), SN_ERR_INTERNAL); /* kernel_check.c */
    ck_assert_msg(strstr(e.msg, "n_items is 5, not the 6"), "%s", e.msg);
    sn_jit_free(j);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- timing (printed, never asserted) ---- */

/* Best of `reps` runs of the kernel over all its items, in seconds. */
static double time_kernel(sn_cpu_kernel_fn fn, void **bufs, int64_t items, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = sn_clock_s();
        fn(bufs, 0, items);
        double t = sn_clock_s() - t0;
        if (t < best) best = t;
    }
    return best;
}

/* Times the attention kernels of g (one thread) and the interpreter on g; prints both. */
static void time_graph(sn_graph *g, sn_node *const *inputs, int n_inputs, const char *what,
                       double flops) {
    sn_jit *j = new_jit();
    if (!j) return;
    sn_err e;
    sn_interp *it = sn_interp_new(g, false);
    for (int i = 0; i < n_inputs; i++) set_random(it, inputs[i], 1);
    double t0 = sn_clock_s();
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    double t_interp = sn_clock_s() - t0;
    sn_interp_free(it);

    sn_program *p;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    double total = 0;
    char line[512];
    int at = 0;
    for (int ki = 0; ki < p->n_kernels; ki++) {
        sn_kernel *k = p->kernels[ki];
        if (k->kind != SN_KER_ATTENTION) continue;
        sn_cpu_kernel_fn fn;
        ck_assert_msg(sn_jit_compile(j, &k, 1, &fn, &e) == SN_OK, "%s", e.msg);
        void *bufs[SN_KER_MAX_ARGS];
        float *mem[SN_KER_MAX_ARGS];
        for (int a = 0; a < k->n_out + k->n_in; a++) {
            int64_t len = sn_numel(k->args[a]);
            mem[a] = malloc(sizeof(float) * (size_t)len);
            ck_assert(mem[a]);
            for (int64_t i = 0; i < len; i++) mem[a][i] = uniform(-1, 1);
            bufs[a] = mem[a];
        }
        double t = time_kernel(fn, bufs, k->n_items, 10);
        total += t;
        at += snprintf(line + at, sizeof line - (size_t)at, " %s %.2f ms", sn_op_name(k->anchor->op),
                       t * 1e3);
        for (int a = 0; a < k->n_out + k->n_in; a++) free(mem[a]);
    }
    printf("attention %s (B*H = 48, T = 256, D = 64, %s): LLVM %.2f ms (%.1f GFLOP/s, one thread;%s), "
           "interpreter %.0f ms: %.0fx\n", what, sn_jit_target(j), total * 1e3, flops / total * 1e-9,
           line, t_interp * 1e3, t_interp / total);
    fflush(stdout);
    sn_jit_free(j);
    sn_program_free(p);
}

START_TEST(timing) {
    enum { BH0 = 4, BH1 = 12, T = 256, D = 64 };
    float scale = 0.125f;
    /* causal: T (T + 1) / 2 (query, key) pairs, 2 D flops per dot or axpy */
    double pairs = (double)BH0 * BH1 * T * (T + 1) / 2, fl = 2.0 * D * pairs;
    sn_graph *g = sn_graph_new();
    sn_node *q = sn_input(g, "q", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    sn_node *k = sn_input(g, "k", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    sn_node *v = sn_input(g, "v", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_graph_add_output(g, lse);
    sn_graph_add_output(g, sn_attention(g, q, k, v, lse, scale));
    sn_node *fin[] = {q, k, v};
    time_graph(g, fin, 3, "forward", 2 * fl); /* q.k, p v */
    sn_graph_free(g);

    g = sn_graph_new();
    q = sn_input(g, "q", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    k = sn_input(g, "k", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    v = sn_input(g, "v", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    sn_node *o = sn_input(g, "o", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    sn_node *dout = sn_input(g, "dout", SN_F32, SN_SHAPE(BH0, BH1, T, D));
    lse = sn_input(g, "lse", SN_F32, SN_SHAPE(BH0, BH1, T));
    sn_graph_add_output(g, sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale));
    sn_graph_add_output(g, sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale));
    sn_graph_add_output(g, sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale));
    sn_node *bin[] = {q, k, v, o, dout, lse};
    time_graph(g, bin, 6, "backward", 8 * fl); /* dq: 3, dk: 3, dv: 2 products per pair */
    sn_graph_free(g);
}
END_TEST

/* ---- decoding over a KV cache (attention_cache) ---- */

/* Shapes: grouped-query (2 and 8 query heads a kv head) and not, one new token and three, head
 * sizes that fill no vector (40, 24) and 128, masked cache positions (row 0 wholly). */
static const int cache_cases[][7] = { /* B, H, Hkv, T, S, D, Dv */
    {2, 4, 2, 1, 37, 40, 24}, {2, 3, 3, 3, 70, 64, 64}, {3, 8, 1, 1, 129, 128, 128},
};

START_TEST(cache_decode) {
    const int *c = cache_cases[_i];
    sn_interp *it;
    const sn_node *y, *w;
    sn_graph *g = sn_test_cache_attention(c[0], c[1], c[2], c[3], c[4], c[5], c[6], SN_F32, &it, &y, &w);
    char what[128];
    snprintf(what, sizeof what, "attention_cache B=%d H=%d Hkv=%d T=%d S=%d D=%d Dv=%d", c[0], c[1],
             c[2], c[3], c[4], c[5], c[6]);
    /* the op is its written-out form (the interpreter, in double precision) */
    sn_check_close(what, sn_interp_value(it, y), sn_interp_value(it, w), (size_t)sn_numel(y), 1e-6, 1e-3);
    check_kernels(g, it, 1, what);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("attention_kernels");
    TCase *tc = tcase_create("llvm");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, forward_and_backward, 0, N_CASES);
    tcase_add_loop_test(tc, unfused_forward, 0, N_CASES);
    tcase_add_loop_test(tc, cache_decode, 0, 3);
    tcase_add_test(tc, bad_items_and_ir_dump);
    tcase_add_test(tc, timing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
