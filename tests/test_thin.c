/* test_thin.c: the thin product (kernel.h: SN_KER_THIN; codegen/cuda/cuda_thin.c): y (M, N) =
 * x (M, K) @ W or @ W^T of few columns N (the columns form) or a short contraction K (the rank
 * form), the kernel fuse makes of such a GEMM for CUDA targets.
 * The fuse rule (which GEMMs become one, and that the CPU and SN_THIN=0 keep the GEMM); the
 * kernel on the SIMT simulator in both thread orders, bit for bit against the order kernel.h
 * states and within the f32 bound of the reference interpreter, over shapes that take every
 * path of the text (N a power of two or not, 1 to 32; k a lane 8, 4, 2; W's loads vector or
 * scalar; a last block and a last step of rows cut short; f32, bf16, f16; y f32 or 16-bit);
 * NVRTC for sm_75, sm_80 and sm_90 without spills; bugs planted in the text caught. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/gemm_lowp.h"
#include "sim/sim.h"
#include "support/rng.h"
#include "harness.h"
#include "thin_check.h"

typedef struct {
    int64_t M, K, N;
    sn_dtype dt;  /* x's and W's */
    bool tb;      /* W stored (N, K) */
    bool out16;   /* y the matmul's cast to dt */
} shape;

static const shape shapes[] = {
    {256, 768, 8, SN_BF16, false, true},   /* LoRA's x A at gpt2's width */
    {301, 768, 8, SN_BF16, true, true},    /* dy B^T; the last block one row */
    {257, 64, 3, SN_F16, true, false},     /* one warp, 8 lanes with k */
    {260, 1024, 16, SN_BF16, true, true},  /* 4 k a lane, 8 warps */
    {256, 512, 32, SN_F32, false, false},  /* 2 k a lane, float2 loads */
    {270, 2304, 1, SN_BF16, true, false},  /* one column, 9 warps */
    {258, 96, 5, SN_F32, false, false},    /* N not a power of two */
    {300, 200, 12, SN_BF16, false, true},  /* 4 k a lane, 2 warps, 50 lanes with k */
    {263, 136, 9, SN_F16, false, true},    /* W's rows not 16-byte aligned: scalar loads */
    /* the rank form: K few */
    {256, 8, 768, SN_BF16, false, true},   /* LoRA's h B at gpt2's width */
    {301, 8, 2304, SN_BF16, false, true},  /* 9 warps; the last block one row */
    {260, 8, 768, SN_BF16, true, true},    /* dh A^T: W stored (768, 8) */
    {257, 16, 640, SN_F16, false, false},  /* 4 columns a lane: 8-byte loads, f32 stores */
    {258, 3, 104, SN_F32, true, false},    /* K odd: W's rows and x's of 12 bytes, scalar */
    {263, 32, 96, SN_BF16, false, false},  /* 2 columns a lane, 2 warps, 16 lanes idle */
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* One product with its data (x and W rounded to dt), the interpreter's y and the bound. */
typedef struct {
    shape s;
    sn_graph *g;
    sn_node *x, *w, *y;
    void *xb, *wb;     /* in dt */
    float *xf, *wf;    /* as f32; wf in W's stored layout */
    double *want, *bound;
} prod;

static void prod_new(prod *p, const shape *s, uint64_t seed) {
    *p = (prod){.s = *s, .g = sn_graph_new()};
    sn_graph *g = p->g;
    p->x = sn_input(g, "x", s->dt, SN_SHAPE(s->M, s->K));
    p->w = sn_input(g, "w", s->dt, s->tb ? SN_SHAPE(s->N, s->K) : SN_SHAPE(s->K, s->N));
    sn_node *mm = sn_matmul_t(g, p->x, p->w, false, s->tb);
    p->y = s->out16 ? sn_cast(g, mm, s->dt) : mm;
    ck_assert_msg(p->y, "%s", sn_graph_error(g));
    sn_graph_add_output(g, p->y);
    sn_rng r = sn_rng_seed(seed);
    int64_t nx = s->M * s->K, nw = s->K * s->N;
    p->xf = malloc(sizeof(float) * (size_t)nx);
    p->wf = malloc(sizeof(float) * (size_t)nw);
    double *xd = malloc(sizeof(double) * (size_t)nx), *wd = malloc(sizeof(double) * (size_t)nw);
    for (int64_t i = 0; i < nx; i++) xd[i] = p->xf[i] = (float)sn_dtype_round(s->dt, 2 * sn_rng_uniform(&r) - 1);
    for (int64_t i = 0; i < nw; i++) wd[i] = p->wf[i] = (float)sn_dtype_round(s->dt, 0.1 * sn_rng_normal(&r));
    p->xb = thin_to_dt(s->dt, p->xf, nx);
    p->wb = thin_to_dt(s->dt, p->wf, nw);
    sn_err e;
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true); /* the matmul too */
    ck_assert(sn_interp_set_f64(it, p->x, xd, &e) == SN_OK);
    ck_assert(sn_interp_set_f64(it, p->w, wd, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    int64_t ny = s->M * s->N;
    p->want = malloc(sizeof(double) * (size_t)ny);
    p->bound = malloc(sizeof(double) * (size_t)ny);
    memcpy(p->want, sn_interp_value(it, mm), sizeof(double) * (size_t)ny); /* the f32 product */
    for (int64_t m = 0; m < s->M; m++)
        for (int64_t n = 0; n < s->N; n++) {
            double a = 0;
            for (int64_t k = 0; k < s->K; k++)
                a += fabs((double)p->xf[m * s->K + k] * p->wf[s->tb ? n * s->K + k : k * s->N + n]);
            p->bound[m * s->N + n] = (double)(s->K + 1) * 0x1p-24 * a + 1e-30;
        }
    sn_interp_free(it);
    free(xd), free(wd);
}

static void prod_free(prod *p) {
    free(p->xb), free(p->wb), free(p->xf), free(p->wf), free(p->want), free(p->bound);
    sn_graph_free(p->g);
}

/* y[m][n] in the order kernel.h states, as f32. */
static float stated(const prod *p, const sn_thin *t, int64_t m, int64_t n) {
    if (t->rank) { /* one chain */
        float s = 0;
        for (int64_t k = 0; k < p->s.K; k++)
            s = fmaf(p->xf[m * p->s.K + k], p->wf[p->s.tb ? n * p->s.K + k : k * p->s.N + n], s);
        return s;
    }
    float total = 0;
    for (int w = 0; w < t->warps; w++) {
        float v[32], nv[32];
        for (int l = 0; l < 32; l++) {
            int64_t kb = (int64_t)t->kpl * (32 * w + l);
            float s = 0;
            for (int i = 0; i < t->kpl && kb < p->s.K; i++) {
                int64_t k = kb + i;
                s = fmaf(p->xf[m * p->s.K + k], p->wf[p->s.tb ? n * p->s.K + k : k * p->s.N + n], s);
            }
            v[l] = s;
        }
        for (int o = 16; o >= 1; o /= 2) {
            for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ o];
            memcpy(v, nv, sizeof v);
        }
        total = w ? total + v[0] : v[0];
    }
    return total;
}

/* The program for t, and its one thin kernel (NULL where it has none). */
static const sn_kernel *thin_of(const prod *p, const sn_target *t, sn_program **prog) {
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(p->g, &(sn_pipeline_opts){.target = t}, prog, NULL, &e) ==
                      SN_OK, "%s", e.msg);
    const sn_kernel *k = NULL;
    for (int i = 0; i < (*prog)->n_kernels; i++)
        if ((*prog)->kernels[i]->kind == SN_KER_THIN) {
            ck_assert_msg(!k, "two thin kernels for one product");
            k = (*prog)->kernels[i];
        }
    return k;
}

/* Runs kernel k of text src on the simulator in both orders; false (with the reason in why)
 * when y is not the stated order's bits or not within the interpreter's bound. */
static bool run_sim(const prod *p, const sn_kernel *k, const sn_target *t, const char *src,
                    const char *fn, char *why, size_t len) {
    sn_sim_module *h;
    sn_err e;
    if (!thin_sim_load(src, false, &h, why, len)) return true;
    sn_thin th = sn_thin_of(k);
    int64_t ny = p->s.M * p->s.N;
    int eb = p->s.out16 ? 2 : 4;
    int64_t guard = 4 * p->s.N; /* four rows past y's end, which no store may touch */
    unsigned char *y = malloc((size_t)(ny + guard) * (size_t)eb);
    void *yp = y, *xp = p->xb, *wp = p->wb;
    void *params[3] = {&yp, &xp, &wp};
    sn_cuda_dims dims = sn_cuda_launch_dims(k, t);
    bool ok = true;
    for (int rev = 0; rev < 2 && ok; rev++) {
        memset(y, 0xff, (size_t)(ny + guard) * (size_t)eb);
        sn_sim_opts so = sn_sim_defaults();
        so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
        if (sn_sim_launch(h, fn, dims.grid, dims.block, dims.shared_bytes, params, &so, &e)) {
            snprintf(why, len, "%s", e.msg);
            ok = false;
            break;
        }
        for (int64_t i = ny * eb; i < (ny + guard) * eb && ok; i++)
            if (y[i] != 0xff) {
                snprintf(why, len, "%s order: a store past y's end (byte %lld of %lld)",
                         rev ? "reversed" : "forward", (long long)i, (long long)(ny * eb));
                ok = false;
            }
        for (int64_t i = 0; i < ny && ok; i++) {
            float s = stated(p, &th, i / p->s.N, i % p->s.N), got;
            double tol = p->bound[i];
            if (p->s.out16) {
                uint16_t bits = ((uint16_t *)y)[i], want = sn_lowp_round(p->s.dt, s);
                got = sn_lowp_widen(p->s.dt, bits);
                ok = bits == want;
                tol += fabs(p->want[i]) * (p->s.dt == SN_BF16 ? 0x1p-8 : 0x1p-11);
            } else {
                memcpy(&got, y + 4 * i, 4);
                ok = !memcmp(&got, &s, 4);
            }
            if (!ok) {
                snprintf(why, len, "%s order: y[%lld][%lld] = %.9g, the stated order's %.9g",
                         rev ? "reversed" : "forward", (long long)(i / p->s.N),
                         (long long)(i % p->s.N), (double)got, (double)s);
                break;
            }
            if (!(fabs((double)got - p->want[i]) <= tol)) {
                snprintf(why, len, "%s order: y[%lld][%lld] = %.9g, the interpreter's %.9g (bound %.3g)",
                         rev ? "reversed" : "forward", (long long)(i / p->s.N),
                         (long long)(i % p->s.N), (double)got, p->want[i], tol);
                ok = false;
            }
        }
    }
    free(y);
    sn_sim_module_free(h);
    return ok;
}

/* ---- the fuse rule ---- */

START_TEST(fuse_rule) {
    prod p;
    prod_new(&p, &shapes[0], 1);
    sn_program *prog;
    sn_target cu = sn_target_cuda(80), off = cu, cpu = sn_target_cpu();
    off.thin_products = false;
    const sn_kernel *k = thin_of(&p, &cu, &prog);
    ck_assert_msg(k, "a CUDA target makes the thin product of x (256, 768) @ W (768, 8)");
    ck_assert_int_eq(prog->n_kernels, 1);
    ck_assert(k->args[0] == p.y && k->args[1] == p.x && k->args[2] == p.w);
    sn_thin t = sn_thin_of(k);
    ck_assert(t.M == 256 && t.K == 768 && t.N == 8 && t.kpl == 8 && t.warps == 3 && t.rows == 4);
    ck_assert_int_eq(k->n_items, 64);
    sn_program_free(prog);
    ck_assert_msg(!thin_of(&p, &off, &prog), "thin_products off keeps the GEMM");
    ck_assert_int_eq(prog->kernels[0]->kind, SN_KER_GEMM);
    sn_program_free(prog);
    ck_assert_msg(!thin_of(&p, &cpu, &prog), "the CPU keeps the GEMM");
    sn_program_free(prog);
    prod_free(&p);
    prod_new(&p, &shapes[9], 1); /* h (256, 8) @ B (8, 768): the rank form */
    k = thin_of(&p, &cu, &prog);
    ck_assert_msg(k && !strcmp(k->name + strlen(k->name) - 7, "_expand"), "the rank form, an expansion");
    t = sn_thin_of(k);
    ck_assert(t.rank && t.kpl == 8 && t.warps == 3 && t.rows == 4);
    sn_program_free(prog);
    prod_free(&p);
    /* too few rows, neither N nor K few, K (or N in the rank form) not a multiple of a lane's
       share: GEMMs */
    const shape no[] = {{255, 768, 8, SN_BF16, false, true}, {256, 768, 33, SN_BF16, false, true},
                        {256, 36, 8, SN_BF16, false, false}, {256, 8, 36, SN_BF16, false, false},
                        {255, 8, 768, SN_BF16, false, true}, {256, 33, 768, SN_BF16, false, true}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        prod_new(&p, &no[i], 2);
        ck_assert_msg(!thin_of(&p, &cu, &prog), "shape %zu: no thin product", i);
        sn_program_free(prog);
        prod_free(&p);
    }
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_BF16, SN_SHAPE(768, 256));
    sn_node *w = sn_input(g, "w", SN_BF16, SN_SHAPE(768, 8));
    sn_graph_add_output(g, sn_matmul_t(g, x, w, true, false));
    sn_err e;
    ck_assert(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &cu}, &prog, NULL, &e) == SN_OK);
    ck_assert_msg(prog->kernels[0]->kind == SN_KER_THIN && sn_thin_of(prog->kernels[0]).sum,
                  "x transposed: the sum form (test_thin_sum.c), not the columns form");
    sn_program_free(prog);
    sn_graph_free(g);
}
END_TEST

/* ---- the kernel ---- */

START_TEST(cuda_thin) {
    bool nvrtc = thin_have_nvrtc("test_thin");
    sn_target t = sn_target_cuda(90);
    for (int i = 0; i < N_SHAPES; i++) {
        prod p;
        prod_new(&p, &shapes[i], 10 + (uint64_t)i);
        sn_program *prog;
        const sn_kernel *k = thin_of(&p, &t, &prog);
        ck_assert_msg(k, "shape %d makes a thin product", i);
        sn_cuda_source cs;
        sn_err e;
        ck_assert_msg(sn_cuda_render(&k, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
        for (int a = 0; nvrtc && a < 3; a++) {
            sn_cuda_module m;
            int arch = (int[]){75, 80, 90}[a];
            ck_assert_msg(sn_nvrtc_compile(cs.src, "thin.cu", arch, &m, &e) == SN_OK, "%s", e.msg);
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[0]);
            ck_assert_msg(in && in->spill_store_bytes == 0 && in->stack_bytes == 0,
                          "sm_%d shape %d: %d bytes spilled, %d of stack", arch, i,
                          in ? in->spill_store_bytes : -1, in ? in->stack_bytes : -1);
            sn_cuda_module_free(&m);
        }
        char why[1024] = "";
        ck_assert_msg(run_sim(&p, k, &t, cs.src, cs.fn[0], why, sizeof why),
                      "shape %d (M %lld K %lld N %lld %s%s): %s", i, (long long)p.s.M,
                      (long long)p.s.K, (long long)p.s.N, sn_dtype_name(p.s.dt), p.s.tb ? " W^T" : "", why);
        sn_cuda_source_free(&cs);
        sn_program_free(prog);
        prod_free(&p);
    }
}
END_TEST

/* ---- planted bugs ---- */

typedef struct {
    int shape;
    const char *needle, *plant, *what;
} plant;

static const plant plants[] = {
    {0, "const float send = hi ? v[j] : v[j + 4]", "const float send = hi ? v[j + 4] : v[j]",
     "a lane sends the half it keeps"},
    {0, "__syncthreads(); /*", "/*", "no barrier before the warps' sums are added"},
    {0, "for (int u = 1; u < 3; u++)", "for (int u = 2; u < 3; u++)", "warp 1's sums left out"},
    {1, "in1 + (int)n * 768 + kb", "in1 + (int)n * 768 + kb + 8", "W^T's row read a chunk late"},
    {0, "const int n = lane >> 2;", "const int n = lane >> 3;", "the wrong column a lane holds"},
    {4, "const int kb = 2 * (32 * warp + lane);", "const int kb = 2 * (32 * (warp ^ 1) + lane);",
     "the warps' k swapped in pairs (the same terms, added in another order)"},
    {1, "if (m0 + r >= end) continue;", "if (m0 + r > end) continue;", "a row past the block's end stored"},
    {9, "s = fmaf(xv[r][kk], w[kk][j], s);", "s = fmaf(xv[r][kk], w[kk][j ^ 1], s);",
     "(rank) a lane's columns' weights swapped in pairs"},
    {13, "for (int kk = 0; kk < 3; kk++) s = fmaf", "for (int kk = 1; kk < 3; kk++) s = fmaf",
     "(rank) the chain without its first k"},
    {10, "const int nb = 8 * threadIdx.x;", "const int nb = 8 * (threadIdx.x ^ 32);",
     "(rank) the warps' columns swapped"},
    {11, "in1 + (int)(nb + j) * 8", "in1 + (int)(nb + (j ^ 1)) * 8", "(rank) W^T's rows of a lane swapped"},
};

START_TEST(planted_bugs_are_caught) {
    sn_target t = sn_target_cuda(90);
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        const plant *pl = &plants[i];
        prod p;
        prod_new(&p, &shapes[pl->shape], 40 + i);
        sn_program *prog;
        const sn_kernel *k = thin_of(&p, &t, &prog);
        sn_cuda_source cs;
        sn_err e;
        ck_assert_msg(sn_cuda_render(&k, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
        char *src = sn_test_replace_first(cs.src, pl->needle, pl->plant);
        char why[1024] = "";
        bool ok = run_sim(&p, k, &t, src, cs.fn[0], why, sizeof why);
        if (strncmp(why, "no simulator", 12)) {
            ck_assert_msg(!ok, "planted \"%s\" was not caught", pl->what);
            printf("test_thin: planted %s: %s\n", pl->what, why);
        }
        free(src);
        sn_cuda_source_free(&cs);
        sn_program_free(prog);
        prod_free(&p);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("thin");
    TCase *t = tcase_create("thin");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, fuse_rule);
    tcase_add_test(t, cuda_thin);
    tcase_add_test(t, planted_bugs_are_caught);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
