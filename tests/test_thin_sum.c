/* test_thin_sum.c: the thin product's sum form (kernel.h: SN_KER_THIN, sum; codegen/cuda/
 * cuda_thin_sum.c): y (K, N) f32 = x^T W, x (M, K), W (M, N), K or N few (LoRA's weight
 * gradients h^T dy and x^T dh), which fuse makes of such a GEMM for CUDA targets as a PARTIAL
 * kernel over parts of the rows and a FINISH adding the parts.
 * The fuse rule (which GEMMs become one; the CPU, SN_THIN=0, W transposed, a 16-bit y and too
 * few rows keep the GEMM); the two kernels on the SIMT simulator in both thread orders, bit for
 * bit against the order kernel.h states and within the f32 bound of the reference interpreter,
 * with guards after y and after the scratch, over shapes that take every path of the text (the
 * few K or N; 1 to 32 of them, a power of two or not; 8, 4 or 2 columns a lane; 1 to 12 warp
 * groups; two column blocks; vector or scalar loads of the few; f32, bf16, f16; parts cut
 * short); NVRTC for sm_75, sm_80 and sm_90 without spills; bugs planted in the text caught;
 * a FINISH run in the next thin product's launch (passes/join_finish.c) on the simulator; the
 * simulator's profile of gpt2's two sums at 768 without a verdict (coalescing, bank conflicts). */
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
    int64_t M, K, N; /* x (M, K), W (M, N), y (K, N) */
    sn_dtype dt;     /* x's and W's */
} shape;

static const shape shapes[] = {
    {512, 8, 768, SN_BF16},   /* h^T dy at gpt2's width: 3 warps, 4 groups */
    {512, 768, 8, SN_BF16},   /* x^T dh: y (768, 8) */
    {300, 8, 2304, SN_BF16},  /* 9 warps, one group; the last part short */
    {520, 3072, 8, SN_BF16},  /* 12 warps */
    {400, 16, 640, SN_F16},   /* 4 columns a lane, 5 warps, 2 groups */
    {260, 96, 32, SN_F32},    /* 2 columns a lane, 2 warps (16 lanes idle), 6 groups */
    {333, 5, 104, SN_F32},    /* the few odd: scalar loads of it; 13 lanes, 12 groups */
    {257, 200, 12, SN_BF16},  /* 12 few: two chunks, scalar; 50 lanes */
    {256, 8, 3328, SN_BF16},  /* 13 warps: two column blocks of 7 */
    {280, 24, 24, SN_BF16},   /* both few: K taken (y's rows) */
    {300, 1, 512, SN_F16},    /* one row of y: the few one element, loaded alone */
    {270, 136, 2, SN_BF16},   /* two columns of y: the few's 4 bytes one load; 17 lanes */
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* One product with its data (x and W rounded to dt), the interpreter's y and the bound. */
typedef struct {
    shape s;
    sn_graph *g;
    sn_node *x, *w, *y;
    void *xb, *wb; /* in dt */
    float *xf, *wf;
    double *want, *bound;
} prod;

static void prod_new(prod *p, const shape *s, bool tb, bool out16, uint64_t seed) {
    *p = (prod){.s = *s, .g = sn_graph_new()};
    sn_graph *g = p->g;
    p->x = sn_input(g, "x", s->dt, SN_SHAPE(s->M, s->K));
    p->w = sn_input(g, "w", s->dt, tb ? SN_SHAPE(s->N, s->M) : SN_SHAPE(s->M, s->N));
    sn_node *mm = sn_matmul_t(g, p->x, p->w, true, tb);
    p->y = out16 ? sn_cast(g, mm, s->dt) : mm;
    ck_assert_msg(p->y, "%s", sn_graph_error(g));
    sn_graph_add_output(g, p->y);
    sn_rng r = sn_rng_seed(seed);
    int64_t nx = s->M * s->K, nw = s->M * s->N;
    p->xf = malloc(sizeof(float) * (size_t)nx);
    p->wf = malloc(sizeof(float) * (size_t)nw);
    double *xd = malloc(sizeof(double) * (size_t)nx), *wd = malloc(sizeof(double) * (size_t)nw);
    for (int64_t i = 0; i < nx; i++) xd[i] = p->xf[i] = (float)sn_dtype_round(s->dt, 2 * sn_rng_uniform(&r) - 1);
    for (int64_t i = 0; i < nw; i++) wd[i] = p->wf[i] = (float)sn_dtype_round(s->dt, 0.1 * sn_rng_normal(&r));
    p->xb = thin_to_dt(s->dt, p->xf, nx);
    p->wb = thin_to_dt(s->dt, p->wf, nw);
    sn_err e;
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    ck_assert(sn_interp_set_f64(it, p->x, xd, &e) == SN_OK);
    ck_assert(sn_interp_set_f64(it, p->w, wd, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    int64_t ny = s->K * s->N;
    p->want = malloc(sizeof(double) * (size_t)ny);
    p->bound = malloc(sizeof(double) * (size_t)ny);
    memcpy(p->want, sn_interp_value(it, mm), sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < s->K; i++)
        for (int64_t j = 0; j < s->N; j++) {
            double a = 0;
            for (int64_t m = 0; m < s->M && !tb; m++)
                a += fabs((double)p->xf[m * s->K + i] * p->wf[m * s->N + j]);
            p->bound[i * s->N + j] = (double)(s->M + 1) * 0x1p-24 * a + 1e-30;
        }
    sn_interp_free(it);
    free(xd), free(wd);
}

static void prod_free(prod *p) {
    free(p->xb), free(p->wb), free(p->xf), free(p->wf), free(p->want), free(p->bound);
    sn_graph_free(p->g);
}

/* y[i][j] in the order kernel.h states: each part's groups' fmaf chains over their rows, added
 * in group order, then the parts in part order. */
static float stated(const prod *p, const sn_thin *t, int64_t i, int64_t j) {
    float total = 0;
    for (int64_t part = 0; part < t->parts; part++) {
        int64_t lo = part * t->rows, hi = lo + t->rows < p->s.M ? lo + t->rows : p->s.M;
        float sum = 0;
        for (int g = 0; g < t->groups; g++) {
            float s = 0;
            for (int64_t m = lo + g; m < hi; m += t->groups)
                s = fmaf(p->xf[m * p->s.K + i], p->wf[m * p->s.N + j], s);
            sum = g ? sum + s : s;
        }
        total = part ? total + sum : sum;
    }
    return total;
}

/* The program for target t and its PARTIAL and FINISH thin kernels (false where it has none). */
static bool thin_sum_of(const prod *p, const sn_target *t, sn_program **prog, const sn_kernel *ks[2]) {
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(p->g, &(sn_pipeline_opts){.target = t}, prog, NULL, &e) ==
                      SN_OK, "%s", e.msg);
    ks[0] = ks[1] = NULL;
    for (int i = 0; i < (*prog)->n_kernels; i++) {
        const sn_kernel *k = (*prog)->kernels[i];
        if (k->kind != SN_KER_THIN) continue;
        ck_assert_msg(sn_thin_of(k).sum, "a sum's thin kernels are of the sum form");
        ck_assert_msg(k->stage == SN_SUM_PARTIAL || k->stage == SN_SUM_FINISH, "two stages");
        int at = k->stage == SN_SUM_FINISH;
        ck_assert_msg(!ks[at], "one PARTIAL and one FINISH for one product");
        ks[at] = k;
    }
    ck_assert_msg(!ks[0] == !ks[1], "a PARTIAL with its FINISH");
    return ks[0] != NULL;
}

enum { GUARD = 64 }; /* floats after y and after the scratch that no store may touch */

/* Runs the PARTIAL and the FINISH (functions fn[0], fn[1] of src) on the simulator in both
 * orders; false (with the reason in why) when y is not the stated order's bits or not within
 * the interpreter's bound, or a store lands past y or the scratch. */
static bool run_sim(const prod *p, const sn_kernel *ks[2], const sn_target *t, const char *src,
                    char (*fn)[64], char *why, size_t len) {
    sn_sim_module *h;
    sn_err e;
    if (!thin_sim_load(src, false, &h, why, len)) return true;
    sn_thin th = sn_thin_of(ks[0]);
    int64_t ny = p->s.K * p->s.N, ns = sn_kernel_scratch_bytes(ks[0]) / 4;
    ck_assert_int_eq(ns, th.parts * ny);
    float *y = malloc(sizeof(float) * (size_t)(ny + GUARD));
    float *scratch = malloc(sizeof(float) * (size_t)(ns + GUARD));
    void *yp = y, *xp = p->xb, *wp = p->wb, *sp = scratch;
    void *params[2][4] = {{&yp, &xp, &wp, &sp}, {&yp, &sp}}; /* the FINISH: y, its scratch */
    bool ok = true;
    for (int rev = 0; rev < 2 && ok; rev++) {
        memset(y, 0xff, sizeof(float) * (size_t)(ny + GUARD));
        memset(scratch, 0xff, sizeof(float) * (size_t)(ns + GUARD));
        sn_sim_opts so = sn_sim_defaults();
        so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
        for (int s = 0; s < 2 && ok; s++) {
            sn_cuda_dims dims = sn_cuda_launch_dims(ks[s], t);
            if (sn_sim_launch(h, fn[s], dims.grid, dims.block, dims.shared_bytes, params[s], &so, &e)) {
                snprintf(why, len, "%s: %s", s ? "FINISH" : "PARTIAL", e.msg);
                ok = false;
            }
        }
        const unsigned char *gy = (const unsigned char *)(y + ny), *gs = (const unsigned char *)(scratch + ns);
        for (int b = 0; b < 4 * GUARD && ok; b++)
            if (gy[b] != 0xff || gs[b] != 0xff) {
                snprintf(why, len, "%s order: a store past %s's end", rev ? "reversed" : "forward",
                         gy[b] != 0xff ? "y" : "the scratch");
                ok = false;
            }
        for (int64_t i = 0; i < ny && ok; i++) {
            float s = stated(p, &th, i / p->s.N, i % p->s.N), got = y[i];
            if (memcmp(&got, &s, 4)) {
                snprintf(why, len, "%s order: y[%lld][%lld] = %.9g, the stated order's %.9g",
                         rev ? "reversed" : "forward", (long long)(i / p->s.N),
                         (long long)(i % p->s.N), (double)got, (double)s);
                ok = false;
            } else if (!(fabs((double)got - p->want[i]) <= p->bound[i])) {
                snprintf(why, len, "%s order: y[%lld][%lld] = %.9g, the interpreter's %.9g (bound %.3g)",
                         rev ? "reversed" : "forward", (long long)(i / p->s.N),
                         (long long)(i % p->s.N), (double)got, p->want[i], p->bound[i]);
                ok = false;
            }
        }
    }
    free(y), free(scratch);
    sn_sim_module_free(h);
    return ok;
}

/* ---- the fuse rule ---- */

START_TEST(fuse_rule) {
    prod p;
    sn_program *prog;
    const sn_kernel *ks[2];
    sn_target cu = sn_target_cuda(80), off = cu, nosum = cu, cpu = sn_target_cpu();
    off.thin_products = false;
    nosum.thin_sums = false; /* SN_THIN=nosum */
    prod_new(&p, &shapes[0], false, false, 1);
    ck_assert_msg(thin_sum_of(&p, &cu, &prog, ks), "CUDA makes the sum of x (512, 8)^T W (512, 768)");
    ck_assert_int_eq(prog->n_kernels, 2);
    ck_assert(prog->kernels[0] == ks[0] && prog->kernels[1] == ks[1]);
    ck_assert(ks[0]->scratch == ks[1]->scratch && ks[0]->args[0] == p.y && ks[0]->args[1] == p.x &&
              ks[0]->args[2] == p.w && ks[0]->n_in == 2);
    ck_assert(ks[1]->args[0] == p.y && ks[1]->n_out == 1 && ks[1]->n_in == 0); /* its sums alone */
    sn_thin t = sn_thin_of(ks[0]);
    ck_assert(t.sum && t.left && t.M == 512 && t.K == 8 && t.N == 768 && t.kpl == 8 &&
              t.warps == 3 && t.groups == 4 && t.cblocks == 1);
    /* 132 parts at most, each group 16 rows or more: 512 / 64 = 8 parts of 64 rows */
    ck_assert(t.parts == 8 && t.rows == 64 && ks[0]->n_items == 8 && ks[1]->n_items == 24);
    ck_assert(sn_split_parts(ks[0]) == 8 && sn_kernel_scratch_bytes(ks[0]) == 4 * 8 * 8 * 768);
    sn_program_free(prog);
    ck_assert_msg(!thin_sum_of(&p, &off, &prog, ks), "thin_products off keeps the GEMM");
    ck_assert_int_eq(prog->kernels[0]->kind, SN_KER_GEMM);
    sn_program_free(prog);
    ck_assert_msg(!thin_sum_of(&p, &nosum, &prog, ks), "thin_sums off keeps the GEMM");
    ck_assert_int_eq(prog->kernels[0]->kind, SN_KER_GEMM);
    sn_program_free(prog);
    ck_assert_msg(!thin_sum_of(&p, &cpu, &prog, ks), "the CPU keeps the GEMM");
    sn_program_free(prog);
    prod_free(&p);
    prod_new(&p, &shapes[8], false, false, 1); /* two column blocks */
    ck_assert(thin_sum_of(&p, &cu, &prog, ks));
    t = sn_thin_of(ks[0]);
    ck_assert(t.cblocks == 2 && t.warps == 7 && t.groups == 1 && t.parts * 2 == ks[0]->n_items);
    sn_program_free(prog);
    prod_free(&p);
    /* W transposed, a 16-bit y, too few rows, neither few, the wide not a lane's multiple */
    struct { shape s; bool tb, out16; } no[] = {
        {{512, 8, 768, SN_BF16}, true, false}, {{512, 8, 768, SN_BF16}, false, true},
        {{255, 8, 768, SN_BF16}, false, false}, {{512, 33, 768, SN_BF16}, false, false},
        {{512, 8, 36, SN_BF16}, false, false}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        prod_new(&p, &no[i].s, no[i].tb, no[i].out16, 2);
        ck_assert_msg(!thin_sum_of(&p, &cu, &prog, ks), "case %zu: no thin sum", i);
        sn_program_free(prog);
        prod_free(&p);
    }
}
END_TEST

/* ---- the kernels ---- */

/* The PARTIAL and FINISH of shape i, rendered for t into cs. */
static void render(const prod *p, const sn_target *t, sn_program **prog, const sn_kernel *ks[2],
                   sn_cuda_source *cs) {
    ck_assert_msg(thin_sum_of(p, t, prog, ks), "a thin sum");
    sn_err e;
    ck_assert_msg(sn_cuda_render(ks, 2, t, cs, &e) == SN_OK, "%s", e.msg);
}

START_TEST(cuda_thin_sum) {
    bool nvrtc = thin_have_nvrtc("test_thin_sum");
    sn_target t = sn_target_cuda(90);
    for (int i = 0; i < N_SHAPES; i++) {
        prod p;
        prod_new(&p, &shapes[i], false, false, 10 + (uint64_t)i);
        sn_program *prog;
        const sn_kernel *ks[2];
        sn_cuda_source cs;
        render(&p, &t, &prog, ks, &cs);
        sn_err e;
        for (int a = 0; nvrtc && a < 3; a++) {
            sn_cuda_module m;
            int arch = (int[]){75, 80, 90}[a];
            ck_assert_msg(sn_nvrtc_compile(cs.src, "thin_sum.cu", arch, &m, &e) == SN_OK, "%s", e.msg);
            for (int s = 0; s < 2; s++) {
                const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[s]);
                ck_assert_msg(in && in->spill_store_bytes == 0 && in->stack_bytes == 0,
                              "sm_%d shape %d %s: %d bytes spilled, %d of stack", arch, i, cs.fn[s],
                              in ? in->spill_store_bytes : -1, in ? in->stack_bytes : -1);
            }
            sn_cuda_module_free(&m);
        }
        char why[1024] = "";
        ck_assert_msg(run_sim(&p, ks, &t, cs.src, cs.fn, why, sizeof why),
                      "shape %d (M %lld K %lld N %lld %s): %s", i, (long long)p.s.M,
                      (long long)p.s.K, (long long)p.s.N, sn_dtype_name(p.s.dt), why);
        sn_cuda_source_free(&cs);
        sn_program_free(prog);
        prod_free(&p);
    }
}
END_TEST

/* ---- the simulator's profile (sim/sim.h): the design's loads and shared memory ---- */

/* gpt2's two sums at 768 (h^T dy: 4 groups of 3 warps; x^T dh: y (768, 8)) profiled on the
 * simulator: the wide operand's loads use every byte of their sectors, the groups' sums go
 * through shared memory without bank conflicts: no verdict (sn_sim_profile_flags). */
START_TEST(profile_has_no_verdict) {
    sn_target t = sn_target_cuda(90);
    for (int i = 0; i < 2; i++) {
        prod p;
        prod_new(&p, &shapes[i], false, false, 70 + (uint64_t)i);
        sn_program *prog;
        const sn_kernel *ks[2];
        sn_cuda_source cs;
        render(&p, &t, &prog, ks, &cs);
        sn_sim_module *h;
        sn_err e;
        char why[256];
        if (!thin_sim_load(cs.src, true, &h, why, sizeof why)) {
            printf("test_thin_sum: %s\n", why);
        } else {
            int64_t ny = p.s.K * p.s.N;
            float *y = malloc(4 * (size_t)ny), *scratch = malloc((size_t)sn_kernel_scratch_bytes(ks[0]));
            void *yp = y, *sp = scratch;
            void *params[4] = {&yp, &p.xb, &p.wb, &sp};
            sn_sim_profile prof = {0};
            sn_sim_opts so = sn_sim_defaults();
            so.profile = &prof;
            sn_cuda_dims d = sn_cuda_launch_dims(ks[0], &t);
            ck_assert_msg(sn_sim_launch(h, cs.fn[0], d.grid, d.block, d.shared_bytes, params, &so,
                                        &e) == SN_OK, "%s", e.msg);
            char flags[256];
            sn_sim_profile_flags(&prof, flags, sizeof flags);
            printf("test_thin_sum: PARTIAL of x (%lld, %lld)^T W (%lld, %lld): %lld load requests, "
                   "%lld sectors, %.0f%% of their bytes used; %lld store sectors, %.0f%% used; "
                   "shared %lld wavefronts for %lld ideal; %s\n", (long long)p.s.M,
                   (long long)p.s.K, (long long)p.s.M, (long long)p.s.N, prof.ld_requests,
                   prof.ld_sectors, 100.0 * (double)prof.ld_bytes / (32.0 * (double)prof.ld_sectors),
                   prof.st_sectors, 100.0 * (double)prof.st_bytes / (32.0 * (double)prof.st_sectors),
                   prof.sh_wavefronts, prof.sh_ideal, flags[0] ? flags : "no verdict");
            ck_assert_msg(!flags[0], "the PARTIAL's profile: %s", flags);
            free(y), free(scratch);
            sn_sim_module_free(h);
        }
        sn_cuda_source_free(&cs);
        sn_program_free(prog);
        prod_free(&p);
    }
}
END_TEST

/* ---- the FINISH in the next thin product's launch (passes/join_finish.c) ---- */

/* Whether y (K, N) holds p's stated sums bit for bit; the first difference in why. */
static bool equals_stated(const prod *p, const sn_thin *t, const float *y, const char *what,
                          char *why, size_t len) {
    for (int64_t i = 0; i < p->s.K * p->s.N; i++) {
        float s = stated(p, t, i / p->s.N, i % p->s.N);
        if (memcmp(&y[i], &s, 4)) {
            snprintf(why, len, "%s[%lld] = %.9g, the stated order's %.9g", what, (long long)i,
                     (double)y[i], (double)s);
            return false;
        }
    }
    return true;
}

/* Runs the two PARTIALs (the second carrying the first's FINISH) and the second's FINISH of
 * text src on the simulator in both orders; false (the reason in why) where a y is not the
 * stated order's bits. */
static bool run_joined(const prod *a, const prod *b, const sn_kernel *const *ks, const sn_target *t,
                       const char *src, char (*fn)[64], char *why, size_t len) {
    sn_sim_module *h;
    sn_err e;
    if (!thin_sim_load(src, false, &h, why, len)) return true;
    sn_thin ta = sn_thin_of(ks[0]), tb = sn_thin_of(ks[1]);
    int64_t n1 = a->s.K * a->s.N, n2 = b->s.K * b->s.N;
    float *o1 = malloc(4 * (size_t)n1), *o2 = malloc(4 * (size_t)n2);
    float *s1 = malloc((size_t)sn_kernel_scratch_bytes(ks[0]));
    float *s2 = malloc((size_t)sn_kernel_scratch_bytes(ks[1]));
    void *pp[] = {&o1, (void *)&a->xb, (void *)&a->wb, &s1, &o2, (void *)&b->xb, (void *)&b->wb, &s2};
    void **params[3] = {(void *[]){pp[0], pp[1], pp[2], pp[3]},
                        (void *[]){pp[4], pp[5], pp[6], pp[7], pp[0], pp[3]}, /* + the tail's */
                        (void *[]){pp[4], pp[7]}}; /* a FINISH: y, its scratch */
    bool ok = true;
    for (int rev = 0; rev < 2 && ok; rev++) {
        memset(o1, 0xff, 4 * (size_t)n1), memset(o2, 0xff, 4 * (size_t)n2);
        sn_sim_opts so = sn_sim_defaults();
        so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
        for (int i = 0; i < 3 && ok; i++) {
            sn_cuda_dims d = sn_cuda_launch_dims(ks[i], t);
            if (sn_sim_launch(h, fn[i], d.grid, d.block, d.shared_bytes, params[i], &so, &e)) {
                snprintf(why, len, "%s", e.msg);
                ok = false;
            }
        }
        char w[512] = "";
        if (ok && !(equals_stated(a, &ta, o1, "the joined FINISH's y", w, sizeof w) &&
                    equals_stated(b, &tb, o2, "the host's y", w, sizeof w))) {
            snprintf(why, len, "%s order: %s", rev ? "reversed" : "forward", w);
            ok = false;
        }
    }
    free(o1), free(o2), free(s1), free(s2);
    sn_sim_module_free(h);
    return ok;
}

/* Two sums in one program (x1^T W1 of shape 0, x2^T W2 of shape 1): the first's FINISH rides in
 * the second's PARTIAL's launch, as blocks after its own, and both results are the stated
 * order's bits in both thread orders. */
START_TEST(finish_joined_into_the_next_thin_product) {
    prod a, b;
    prod_new(&a, &shapes[0], false, false, 3);
    prod_new(&b, &shapes[1], false, false, 4);
    sn_graph *g = sn_graph_new();
    sn_node *x1 = sn_input(g, "x1", SN_BF16, SN_SHAPE(a.s.M, a.s.K));
    sn_node *w1 = sn_input(g, "w1", SN_BF16, SN_SHAPE(a.s.M, a.s.N));
    sn_node *x2 = sn_input(g, "x2", SN_BF16, SN_SHAPE(b.s.M, b.s.K));
    sn_node *w2 = sn_input(g, "w2", SN_BF16, SN_SHAPE(b.s.M, b.s.N));
    sn_node *y1 = sn_matmul_t(g, x1, w1, true, false), *y2 = sn_matmul_t(g, x2, w2, true, false);
    sn_graph_add_output(g, y1);
    sn_graph_add_output(g, y2);
    sn_target t = sn_target_cuda(90), apart = t;
    apart.join_finish = false;
    sn_program *prog;
    sn_err e;
    ck_assert(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &apart}, &prog, NULL, &e) == SN_OK);
    ck_assert_int_eq(prog->n_kernels, 4); /* without the join: two PARTIALs, two FINISHes */
    sn_program_free(prog);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &prog, NULL, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_int_eq(prog->n_kernels, 3);
    const sn_kernel *const *ks = (const sn_kernel *const *)prog->kernels;
    ck_assert(ks[0]->args[0] == y1 && ks[0]->stage == SN_SUM_PARTIAL && !ks[0]->tail);
    ck_assert(ks[1]->args[0] == y2 && ks[1]->stage == SN_SUM_PARTIAL && ks[1]->tail);
    ck_assert(ks[1]->tail->args[0] == y1 && ks[1]->tail->stage == SN_SUM_FINISH);
    ck_assert_int_eq(sn_kernel_n_bufs(ks[1]), 6); /* the host's 4, the tail's y1 and scratch */
    ck_assert(ks[2]->args[0] == y2 && ks[2]->stage == SN_SUM_FINISH && !ks[2]->tail);
    sn_cuda_source cs;
    ck_assert_msg(sn_cuda_render(ks, 3, &t, &cs, &e) == SN_OK, "%s", e.msg);
    if (thin_have_nvrtc("test_thin_sum")) {
        sn_cuda_module m;
        ck_assert_msg(sn_nvrtc_compile(cs.src, "joined.cu", 90, &m, &e) == SN_OK, "%s", e.msg);
        sn_cuda_module_free(&m);
    }
    char why[1024] = "";
    ck_assert_msg(run_joined(&a, &b, ks, &t, cs.src, cs.fn, why, sizeof why), "%s", why);
    /* the tail's blocks numbered from 1 (its first block's elements never written): caught */
    char off[64];
    snprintf(off, sizeof off, "(int)blockIdx.x - %lld)", (long long)ks[1]->n_items);
    ck_assert_msg(strstr(cs.src, off), "the dispatch \"%s\" is in the text", off);
    char early[64];
    snprintf(early, sizeof early, "(int)blockIdx.x - %lld)", (long long)ks[1]->n_items - 1);
    char *src = sn_test_replace_first(cs.src, off, early);
    why[0] = 0;
    if (!run_joined(&a, &b, ks, &t, src, cs.fn, why, sizeof why)) {
        printf("test_thin_sum: planted the tail's blocks numbered from 1: %s\n", why);
    } else {
        ck_assert_msg(!strncmp(why, "no simulator", 12), "planted the tail's blocks numbered from 1: not "
                      "caught");
    }
    free(src);
    sn_cuda_source_free(&cs);
    sn_program_free(prog);
    sn_graph_free(g);
    prod_free(&a);
    prod_free(&b);
}
END_TEST

/* ---- planted bugs ---- */

typedef struct {
    int shape;
    const char *needle, *plant, *what;
} plant;

static const plant plants[] = {
    {0, "__syncthreads(); /* group q's sums are in */", "/* */", "no barrier between the groups"},
    {0, "*slot = q ? *slot + acc", "*slot = q ? acc[0][0] + acc", "a group's sums replace the earlier groups'"},
    {0, "for (int p = 1; p < 8; p++)", "for (int p = 2; p < 8; p++)", "the FINISH leaves part 1 out"},
    {0, "r0 += 16) {", "r0 += 20) {", "a group skips rows"},
    {1, "o[j * 8 + c] = acc[c][j];", "o[c * 8 + j] = acc[c][j];", "y (768, 8) stored transposed"},
    {2, "hi = min(lo + 16,", "hi = min(lo + 17,", "a part takes the next part's first row"},
    {8, "cb = (blockIdx.x % 2)", "cb = (blockIdx.x / 2 % 2)", "the column blocks taken by part"},
    {6, "sv[q] = sn_load((in0 + r * 5 + 0)[q]);", "sv[q] = sn_load((in0 + r * 5 + 0)[q ^ 1]);",
     "the few's elements swapped in pairs"},
    {4, "acc[0 + q][j] = fmaf(bv[u][j], sv[q], acc[0 + q][j]);",
     "acc[0 + q][j] = fmaf(bv[u][j ^ 1], sv[q], acc[0 + q][j]);", "a lane's columns swapped in pairs"},
    {0, "if (g != 3) return;", "if (g != 3 || tin == 5) return;", "a lane's sums not stored"},
};

START_TEST(planted_bugs_are_caught) {
    sn_target t = sn_target_cuda(90);
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        const plant *pl = &plants[i];
        prod p;
        prod_new(&p, &shapes[pl->shape], false, false, 40 + i);
        sn_program *prog;
        const sn_kernel *ks[2];
        sn_cuda_source cs;
        render(&p, &t, &prog, ks, &cs);
        ck_assert_msg(strstr(cs.src, pl->needle), "\"%s\" is not in the text", pl->needle);
        char *src = sn_test_replace_first(cs.src, pl->needle, pl->plant);
        char why[1024] = "";
        bool ok = run_sim(&p, ks, &t, src, cs.fn, why, sizeof why);
        if (strncmp(why, "no simulator", 12)) {
            ck_assert_msg(!ok, "planted \"%s\" was not caught", pl->what);
            printf("test_thin_sum: planted %s: %s\n", pl->what, why);
        }
        free(src);
        sn_cuda_source_free(&cs);
        sn_program_free(prog);
        prod_free(&p);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("thin_sum");
    TCase *t = tcase_create("thin_sum");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, fuse_rule);
    tcase_add_test(t, cuda_thin_sum);
    tcase_add_test(t, finish_joined_into_the_next_thin_product);
    tcase_add_test(t, profile_has_no_verdict);
    tcase_add_test(t, planted_bugs_are_caught);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
