/* test_cuda_gather.c: the embedding's CUDA kernel (codegen/cuda/cuda_gather.c: a team of
 * threads an id, 256 / team ids a block) on the SIMT simulator in both thread orders: each
 * id's table row bit for bit, a bad id's (negative, or the table's size and past) a row of NaN;
 * a column a thread (C not a multiple of 4, or a 16-bit table) and four in float4s, teams of
 * 32 and 64 threads, the last block's teams past the ids; bugs planted in the text caught;
 * NVRTC for sm_75, sm_80 and sm_90 without spills. (The gradient's two kernels are test_cuda_weights's
 * `cpu_embedding_bwd_buckets`.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "frontend/frontend.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "sim/sim.h"
#include "support/half.h"
#include "support/rng.h"
#include "harness.h"
#include "thin_check.h"

enum { N = 301, V = 50 }; /* 301 ids: the last block holds one team's id and teams past them */

typedef struct {
    sn_dtype dt;
    int64_t C;
    int team; /* threads an id, as cuda_gather.c chooses them */
} shape;

static const shape shapes[] = {
    {SN_F32, 37, 32},   /* a column a thread, two steps */
    {SN_F32, 300, 32},  /* four columns a thread, three steps, the last short */
    {SN_F32, 1100, 64}, /* four columns, teams of 64 (4 ids a block) */
    {SN_BF16, 36, 32},  /* a 16-bit table: a column a thread */
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* One embedding: its program's kernel, the table (in dt) and the ids (some bad). */
typedef struct {
    shape s;
    sn_graph *g;
    sn_program *p;
    const sn_kernel *k;
    void *table;
    int32_t ids[N];
} emb;

static void emb_new(emb *m, const shape *s) {
    memset(m, 0, sizeof *m);
    m->s = *s;
    m->g = sn_graph_new();
    sn_node *table = sn_input(m->g, "table", s->dt, SN_SHAPE(V, s->C));
    sn_node *ids = sn_input(m->g, "ids", SN_I32, SN_SHAPE(N));
    sn_graph_add_output(m->g, sn_embedding(m->g, table, ids));
    sn_err e;
    ck_assert_msg(sn_verify(m->g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(m->g, &(sn_pipeline_opts){0}, &m->p, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(m->p->n_kernels, 1);
    m->k = m->p->kernels[0];
    ck_assert(m->k->kind == SN_KER_GATHER);
    sn_rng r = sn_rng_seed(7);
    float *f = malloc(sizeof(float) * (size_t)(V * s->C));
    for (int64_t i = 0; i < V * s->C; i++) f[i] = (float)sn_rng_normal(&r);
    m->table = thin_to_dt(s->dt, f, V * s->C);
    free(f);
    for (int p = 0; p < N; p++) { /* ids repeat; bad ones: -1, V, a large one */
        uint64_t u = sn_rng_below(&r, 20);
        m->ids[p] = u == 0 ? -1 : u == 1 ? V : u == 2 ? 1 << 30 : (int32_t)sn_rng_below(&r, V);
    }
    m->ids[N - 1] = V - 1; /* the last id: the last block's one team with an id */
}

static void emb_free(emb *m) {
    free(m->table);
    sn_program_free(m->p);
    sn_graph_free(m->g);
}

/* The bytes of the embedding's output (N rows of C). */
static size_t out_bytes(const emb *m) { return (size_t)sn_dtype_bits(m->s.dt) / 8 * N * (size_t)m->s.C; }

/* Kernel fn of module h on the simulator, in the thread order `order`, into out (poisoned
 * with 0xff bytes first: a NaN in f32 and bf16 alike, so the test below reads a bad id's row
 * of NaN as written only through its bits, below). */
static void run(const emb *m, sn_sim_module *h, const char *fn, sn_sim_order order, void *out) {
    memset(out, 0xff, out_bytes(m));
    void *bufs[3] = {out, NULL, NULL};
    for (int i = 0; i < m->k->n_in; i++) {
        const sn_node *a = m->k->args[m->k->n_out + i];
        bufs[1 + i] = a->dtype == SN_I32 ? (void *)m->ids : m->table;
    }
    void *params[3] = {&bufs[0], &bufs[1], &bufs[2]};
    sn_target t = sn_target_cuda(80);
    sn_cuda_dims d = sn_cuda_launch_dims(m->k, &t);
    ck_assert_int_eq(d.block[0], 256);
    ck_assert_int_eq(d.grid[0], (N + 256 / m->s.team - 1) / (256 / m->s.team));
    sn_sim_opts so = sn_sim_defaults();
    so.order = order;
    sn_err e;
    ck_assert_msg(sn_sim_launch(h, fn, d.grid, d.block, d.shared_bytes, params, &so, &e) == SN_OK,
                  "%s", e.msg);
}

/* The rows of out that are not what they should be: an id's table row, bit for bit, or for a
 * bad id every element NaN. */
static int wrong_rows(const emb *m, const void *out) {
    size_t eb = (size_t)sn_dtype_bits(m->s.dt) / 8, row = eb * (size_t)m->s.C;
    int wrong = 0;
    for (int p = 0; p < N; p++) {
        const unsigned char *o = (const unsigned char *)out + row * (size_t)p;
        int32_t id = m->ids[p];
        if (id >= 0 && id < V) {
            wrong += memcmp(o, (const unsigned char *)m->table + row * (size_t)id, row) != 0;
            continue;
        }
        bool nan = true;
        for (int64_t j = 0; j < m->s.C && nan; j++) {
            float x;
            if (eb == 4) memcpy(&x, o + 4 * j, 4);
            else x = sn_bf16_to_f32((uint16_t)(o[2 * j] | o[2 * j + 1] << 8));
            nan = isnan(x);
        }
        wrong += !nan;
    }
    return wrong;
}

static sn_cuda_source render(const emb *m) {
    sn_cuda_source cs;
    sn_err e;
    sn_target t = sn_target_cuda(80);
    ck_assert_msg(sn_cuda_render(&m->k, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
    return cs;
}

START_TEST(rows_are_the_ids_rows) {
    emb m;
    emb_new(&m, &shapes[_i]);
    sn_cuda_source cs = render(&m);
    if (_i == 2) printf("test_cuda_gather: the embedding's kernel at C = 1100:\n%s", cs.src);
    void *out = malloc(out_bytes(&m));
    sn_sim_module *h;
    char why[256];
    if (!thin_sim_load(cs.src, false, &h, why, sizeof why)) {
        printf("test_cuda_gather: %s\n", why);
    } else {
        int bad = 0;
        for (int p = 0; p < N; p++) bad += m.ids[p] < 0 || m.ids[p] >= V;
        static const sn_sim_order orders[] = {SN_SIM_FORWARD, SN_SIM_REVERSE};
        for (int o = 0; o < 2; o++) {
            run(&m, h, cs.fn[0], orders[o], out);
            int w = wrong_rows(&m, out);
            ck_assert_msg(w == 0, "C=%lld %s: %d of %d rows wrong", (long long)m.s.C,
                          sn_dtype_name(m.s.dt), w, N);
        }
        printf("test_cuda_gather: C=%lld %s, teams of %d: %d ids (%d bad: rows of NaN) bit for bit\n",
               (long long)m.s.C, sn_dtype_name(m.s.dt), m.s.team, N, bad);
        sn_sim_module_free(h);
    }
    free(out);
    sn_cuda_source_free(&cs);
    emb_free(&m);
}
END_TEST

/* Bugs planted in the text: each makes some row wrong. */
START_TEST(planted_bugs_caught) {
    static const struct {
        int shape;
        const char *find, *put, *what;
    } plants[] = {
        {0, "const int id = in1[p];", "const int id = in1[p > 0 ? p - 1 : 0];", "a team reading the id before its own"},
        {0, "dst = p * 37;", "dst = (p > 0 ? p - 1 : 0) * 37;", "a team storing at the row before its own"},
        {0, "if (p >= 301) return;", "if (p >= 300) return;", "the last id left out"},
        {0, "id >= 0 && id < 50", "id >= 0 && id <= 50", "the table's size taken for an id"},
        {2, "r = threadIdx.x / 64", "r = threadIdx.x / 32 % 4", "a team of 64 taken as 32"},
        {2, "j < 1100; j += 256", "j < 1096; j += 256", "the last four columns never stored"},
        {1, "ok ? *reinterpret_cast", "true ? *reinterpret_cast", "a bad id's row read from row 0"},
        {3, "ok ? sn_load(", "id >= 0 ? sn_load(", "an id past the table read"},
    };
    for (size_t b = 0; b < sizeof plants / sizeof plants[0]; b++) {
        emb m;
        emb_new(&m, &shapes[plants[b].shape]);
        sn_cuda_source cs = render(&m);
        char *src = sn_test_replace_first(cs.src, plants[b].find, plants[b].put);
        sn_sim_module *h;
        char why[256];
        if (!thin_sim_load(src, false, &h, why, sizeof why)) {
            printf("test_cuda_gather: %s\n", why);
            free(src);
            sn_cuda_source_free(&cs);
            emb_free(&m);
            return;
        }
        void *out = malloc(out_bytes(&m));
        run(&m, h, cs.fn[0], SN_SIM_FORWARD, out);
        sn_sim_module_free(h);
        int w = wrong_rows(&m, out);
        printf("test_cuda_gather: planted, %s: %d rows wrong (caught)\n", plants[b].what, w);
        ck_assert_msg(w > 0, "the planted bug (%s) went unnoticed", plants[b].what);
        free(out);
        free(src);
        sn_cuda_source_free(&cs);
        emb_free(&m);
    }
}
END_TEST

/* The kernels through NVRTC for sm_75, 80 and 90: no spills. */
START_TEST(nvrtc_without_spills) {
    if (!thin_have_nvrtc("test_cuda_gather")) return;
    for (int s = 0; s < N_SHAPES; s++) {
        emb m;
        emb_new(&m, &shapes[s]);
        static const int arch[] = {75, 80, 90};
        for (int a = 0; a < 3; a++) {
            sn_cuda_source cs;
            sn_err e;
            sn_target t = sn_target_cuda(arch[a]);
            ck_assert_msg(sn_cuda_render(&m.k, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            sn_cuda_module mod;
            ck_assert_msg(sn_nvrtc_compile(cs.src, "gather.cu", arch[a], &mod, &e) == SN_OK, "%s", e.msg);
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&mod, cs.fn[0]);
            ck_assert_msg(in && in->spill_store_bytes == 0 && in->stack_bytes == 0,
                          "sm_%d C=%lld: %d bytes spilled, %d of stack", arch[a], (long long)m.s.C,
                          in ? in->spill_store_bytes : -1, in ? in->stack_bytes : -1);
            sn_cuda_module_free(&mod);
            sn_cuda_source_free(&cs);
        }
        emb_free(&m);
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("cuda_gather");
    TCase *tc = tcase_create("cuda_gather");
    tcase_add_loop_test(tc, rows_are_the_ids_rows, 0, N_SHAPES);
    tcase_add_test(tc, planted_bugs_caught);
    tcase_add_test(tc, nvrtc_without_spills);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
