/* gemv_check.c: what the few-row product's suites share (gemv_check.h). The bound: each backend
 * sums K products in f32 in its own order, each partial sum rounded once (fma), so |y - exact|
 * <= K 2^-24 sum_k |x w| (the standard bound, gamma_K), plus y's own rounding; the interpreter
 * sums in f64. A wrong nibble, scale or offset moves y by about a weight's size times |x|: far
 * outside. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemv_check.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "ir/nf4.h"
#include "passes/pipeline.h"
#include "runtime/gemm_lowp.h"
#include "sim/sim.h"
#include "support/rng.h"
#include "harness.h"

void prod_new_as(prod *p, int64_t M, int64_t K, int64_t N, sn_dtype dt, bool batched,
                 uint64_t seed, bool tb, bool w16) {
    sn_dtype xdt = w16 ? SN_F32 : dt;
    *p = (prod){.M = M, .K = K, .N = N, .dt = xdt, .wdt = dt, .tb = tb, .w16 = w16,
                .g = sn_graph_new()};
    sn_graph *g = p->g;
    p->x = batched ? sn_input(g, "x", xdt, SN_SHAPE(2, M / 2, K))
                   : sn_input(g, "x", xdt, SN_SHAPE(M, K));
    sn_shape ws = tb ? SN_SHAPE(N, K) : SN_SHAPE(K, N);
    sn_node *param = w16 ? sn_param(g, "w", dt, ws, SN_INIT_NORMAL, 0.05f) : NULL;
    p->w = w16 ? sn_cast(g, param, SN_F32) : sn_param_nf4(g, "w", dt, ws);
    ck_assert_msg(p->x && p->w, "%s", sn_graph_error(g));
    p->y = sn_matmul_t(g, p->x, p->w, false, tb);
    ck_assert_msg(p->y, "%s", sn_graph_error(g));
    sn_graph_add_output(g, p->y);
    sn_err e;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    int64_t n = K * N;
    p->wf = malloc(sizeof(float) * (size_t)n);
    sn_rng r = sn_rng_seed(seed);
    for (int64_t i = 0; i < n; i++) p->wf[i] = (float)(0.05 * sn_rng_normal(&r));
    if (w16) { /* the 16-bit bits */
        uint16_t *h = malloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            h[i] = (uint16_t)sn_lowp_round(dt, p->wf[i]);
            p->wf[i] = (float)sn_dtype_round(dt, p->wf[i]);
        }
        p->src = h;
    } else {
        p->src = malloc((size_t)sn_nf4_layout_of(n).bytes);
        ck_assert(sn_nf4_quantize(p->wf, n, p->src, &e) == SN_OK);
        sn_nf4_dequantize(p->src, n, p->wf);
        for (int64_t i = 0; i < n; i++) p->wf[i] = (float)sn_dtype_round(dt, p->wf[i]);
    }
    double *xd = malloc(sizeof(double) * (size_t)(M * K));
    p->xb = malloc(4 * (size_t)(M * K));
    p->xf = malloc(sizeof(float) * (size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) {
        xd[i] = sn_dtype_round(xdt, (float)(2 * sn_rng_uniform(&r) - 1));
        float f = (float)xd[i];
        p->xf[i] = f;
        if (xdt == SN_F32)
            ((float *)p->xb)[i] = f;
        else
            ((uint16_t *)p->xb)[i] = (uint16_t)sn_lowp_round(xdt, f);
    }
    sn_interp *it = sn_interp_new(g, false);
    const sn_node *sn = p->w->in[0];
    double *qd = malloc(sizeof(double) * (size_t)sn_numel(sn));
    for (int64_t i = 0; i < sn_numel(sn); i++)
        qd[i] = w16 ? (double)p->wf[i] : (double)((uint8_t *)p->src)[i];
    ck_assert(sn_interp_set_f64(it, sn, qd, &e) == SN_OK);
    ck_assert(sn_interp_set_f64(it, p->x, xd, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    p->want = malloc(sizeof(double) * (size_t)(M * N));
    p->bound = malloc(sizeof(double) * (size_t)(M * N));
    memcpy(p->want, sn_interp_value(it, p->y), sizeof(double) * (size_t)(M * N));
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < N; c++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += fabs(xd[m * K + k] * p->wf[tb ? c * K + k : k * N + c]);
            p->bound[m * N + c] = (double)(K + 1) * 0x1p-24 * s + 1e-30;
        }
    sn_interp_free(it);
    free(qd), free(xd);
}

void prod_new(prod *p, int64_t M, int64_t K, int64_t N, sn_dtype dt, bool batched, uint64_t seed) {
    prod_new_as(p, M, K, N, dt, batched, seed, false, false);
}

void prod_free(prod *p) {
    free(p->xb), free(p->src), free(p->xf), free(p->wf), free(p->want), free(p->bound);
    sn_graph_free(p->g);
}

const char *prod_what(const prod *p, char *buf, size_t len) {
    snprintf(buf, len, "%s W%s %s%s", p->w16 ? "16-bit" : "NF4", p->tb ? "^T" : "",
             sn_dtype_name(p->wdt), p->w16 ? " (x f32)" : "");
    return buf;
}

sn_kernel prod_kernel(const prod *p) {
    sn_kernel k = {.kind = SN_KER_GEMV, .id = p->y->id, .n_out = 1, .n_in = 2, .anchor = p->y};
    snprintf(k.name, sizeof k.name, "k%d_%s", p->y->id, sn_gemv_name(&k));
    k.args[0] = p->y;
    k.args[1] = p->x;
    k.args[2] = p->w->in[0];
    sn_kernel_work(&k, &k.n_items, &k.serial);
    sn_err e;
    ck_assert_msg(sn_kernel_check(&k, &e) == SN_OK, "%s", e.msg);
    return k;
}

/* w[k][n] as the kernels make it */
static float wkn(const prod *p, int64_t n, int64_t k) {
    return p->wf[p->tb ? n * p->K + k : k * p->N + n];
}

float order_cpu(const prod *p, int64_t m, int64_t n) {
    float s = 0;
    for (int64_t k = 0; k < p->K; k++) s = fmaf(p->xf[m * p->K + k], wkn(p, n, k), s);
    return s;
}

float order_cpu_t(const prod *p, int64_t m, int64_t n) {
    float s[16] = {0};
    for (int64_t k = 0; k < p->K; k++)
        s[k % 16] = fmaf(p->xf[m * p->K + k], wkn(p, n, k), s[k % 16]);
    for (int h = 8; h >= 1; h /= 2)
        for (int j = 0; j < h; j++) s[j] += s[j + h];
    return s[0];
}

float order_cuda_t(const prod *p, int64_t m, int64_t n, int64_t k_lo, int64_t k_hi) {
    float v[32] = {0}, nv[32];
    for (int64_t k = k_lo; k < k_hi; k++) {
        int l = (int)((k - k_lo) % 256 / 8);
        v[l] = fmaf(p->xf[m * p->K + k], wkn(p, n, k), v[l]);
    }
    for (int o = 16; o >= 1; o /= 2) {
        for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ o];
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

void check_y(const prod *p, const float *y, const char *how) {
    double worst = 0;
    char what[64];
    for (int64_t i = 0; i < p->M * p->N; i++) {
        double err = fabs((double)y[i] - p->want[i]);
        ck_assert_msg(err <= p->bound[i],
                      "%s: %s M=%lld K=%lld N=%lld: y[%lld][%lld] = %.9g, the "
                      "interpreter's %.9g (error %.3g, bound %.3g)",
                      how, prod_what(p, what, sizeof what), (long long)p->M, (long long)p->K, (long long)p->N,
                      (long long)(i / p->N), (long long)(i % p->N), (double)y[i], p->want[i], err,
                      p->bound[i]);
        if (err / p->bound[i] > worst) worst = err / p->bound[i];
    }
    (void)worst;
}

bool have_nvrtc(void) {
    sn_cuda_module m;
    sn_err e;
    sn_status st =
        sn_nvrtc_compile("extern \"C\" __global__ void k() {}\n", "probe.cu", 80, &m, &e);
    sn_cuda_module_free(&m);
    if (st == SN_ERR_UNSUPPORTED)
        printf("test_nf4_gemv: %s: skipping the NVRTC checks\n", e.msg);
    else
        ck_assert_msg(st == SN_OK, "%s", e.msg);
    return st == SN_OK;
}

void nvrtc_no_spills(const sn_cuda_source *cs, int n, int64_t M, int64_t K, int64_t N) {
    sn_err e;
    for (int a = 0; a < 3; a++) {
        sn_cuda_module m;
        int arch = (int[]){75, 80, 90}[a];
        ck_assert_msg(sn_nvrtc_compile(cs->src, "gemv_split.cu", arch, &m, &e) == SN_OK, "%s",
                      e.msg);
        for (int i = 0; i < n; i++) {
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs->fn[i]);
            ck_assert_msg(in && in->spill_store_bytes == 0 && in->stack_bytes == 0,
                          "sm_%d %s (M %lld K %lld N %lld): %d bytes spilled, %d of stack", arch,
                          cs->fn[i], (long long)M, (long long)K, (long long)N,
                          in ? in->spill_store_bytes : -1, in ? in->stack_bytes : -1);
        }
        sn_cuda_module_free(&m);
    }
}

void cpu_lanes_and_parts(const prod *p, sn_kernel *k, sn_jit *const *j, const int *lanes,
                         int n) {
    int64_t ny = p->M * p->N;
    float *y = malloc(sizeof(float) * (size_t)ny), *first = malloc(sizeof(float) * (size_t)ny);
    void *bufs[3] = {y, p->xb, p->src};
    char what[64];
    prod_what(p, what, sizeof what);
    for (int l = 0; l < n; l++) {
        sn_cpu_kernel_fn fn = compile_one(j[l], k);
        int64_t cuts[][2] = {{k->n_items, k->n_items}, {k->n_items / 3, k->n_items - 1}};
        for (int c = 0; c < 2; c++) {
            memset(y, 0xff, sizeof(float) * (size_t)ny);
            fn(bufs, 0, cuts[c][0]);
            fn(bufs, cuts[c][0], cuts[c][1]);
            fn(bufs, cuts[c][1], k->n_items);
            char how[64];
            snprintf(how, sizeof how, "CPU, %d lanes, split %d", lanes[l], c);
            check_y(p, y, how);
            if (l == 0 && c == 0) memcpy(first, y, sizeof(float) * (size_t)ny);
            ck_assert_msg(!memcmp(first, y, sizeof(float) * (size_t)ny),
                          "%s %s: not the bits of %d lanes whole", what, how, lanes[0]);
            for (int64_t i = 0; i < ny; i++) {
                float want = p->tb ? order_cpu_t(p, i / p->N, i % p->N) : order_cpu(p, i / p->N, i % p->N);
                ck_assert_msg(!memcmp(&want, &y[i], sizeof want),
                              "%s %s M=%lld K=%lld N=%lld: y[%lld] = %.9g, the stated order's "
                              "%.9g", what, how, (long long)p->M, (long long)p->K,
                              (long long)p->N, (long long)i, (double)y[i], (double)want);
            }
        }
    }
    free(y), free(first);
}

sn_sim_module *sim_both_orders(const prod *p, const sn_kernel *k, const sn_target *t,
                               const sn_cuda_source *cs, const char *suite) {
    sn_sim_module *h;
    sn_err e;
    sn_status st = sn_sim_module_load(cs->src, &h, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("%s: %s: skipping the simulator\n", suite, e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    int64_t ny = p->M * p->N;
    float *y = malloc(sizeof(float) * (size_t)ny), *first = malloc(sizeof(float) * (size_t)ny);
    void *yp = y, *xp = p->xb, *qp = p->src;
    void *params[3] = {&yp, &xp, &qp};
    sn_cuda_dims dims = sn_cuda_launch_dims(k, t);
    ck_assert_int_eq(dims.grid[0], (p->N + 63) / 64);
    char what[64];
    prod_what(p, what, sizeof what);
    for (int rev = 0; rev < 2; rev++) {
        memset(y, 0xff, sizeof(float) * (size_t)ny);
        sn_sim_opts so = sn_sim_defaults();
        so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
        ck_assert_msg(sn_sim_launch(h, cs->fn[0], dims.grid, dims.block, dims.shared_bytes, params,
                                    &so, &e) == SN_OK, "%s", e.msg);
        check_y(p, y, rev ? "CUDA, reversed" : "CUDA, forward");
        if (!rev) memcpy(first, y, sizeof(float) * (size_t)ny);
        ck_assert_msg(!memcmp(first, y, sizeof(float) * (size_t)ny), "%s: the two orders differ",
                      what);
        for (int64_t i = 0; p->tb && i < ny; i++) {
            float want = order_cuda_t(p, i / p->N, i % p->N, 0, p->K);
            ck_assert_msg(!memcmp(&want, &y[i], sizeof want),
                          "CUDA %s M=%lld K=%lld N=%lld: y[%lld] = %.9g, the stated order's %.9g",
                          what, (long long)p->M, (long long)p->K, (long long)p->N, (long long)i,
                          (double)y[i], (double)want);
        }
    }
    free(y), free(first);
    return h;
}

double profile_run(const prod *p, const sn_kernel *k, const sn_target *t,
                   const sn_cuda_source *cs, sn_sim_profile *prof, char *flags, size_t len) {
    sn_sim_module *hp;
    sn_err e;
    ck_assert_msg(sn_sim_module_load_profiled(cs->src, &hp, &e) == SN_OK, "%s", e.msg);
    float *y = malloc(sizeof(float) * (size_t)(p->M * p->N));
    void *yp = y, *xp = p->xb, *qp = p->src;
    void *params[3] = {&yp, &xp, &qp};
    sn_cuda_dims dims = sn_cuda_launch_dims(k, t);
    *prof = (sn_sim_profile){0};
    sn_sim_opts so = sn_sim_defaults();
    so.profile = prof;
    ck_assert_msg(sn_sim_launch(hp, cs->fn[0], dims.grid, dims.block, dims.shared_bytes, params,
                                &so, &e) == SN_OK, "%s", e.msg);
    sn_sim_profile_flags(prof, flags, len);
    sn_sim_module_free(hp);
    free(y);
    return (double)prof->ld_bytes / (32.0 * (double)prof->ld_sectors);
}

bool run_split(prod *p, bool nvrtc, const gemv_plant *pl, int64_t *parts_out) {
    sn_target t = sn_target_cuda(80);
    sn_program *prog;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(p->g, &(sn_pipeline_opts){.target = &t}, &prog, NULL, &e) ==
                      SN_OK, "%s", e.msg);
    const sn_kernel *ks[2];
    int n = 0;
    for (int k = 0; k < prog->n_kernels; k++)
        if (prog->kernels[k]->kind == SN_KER_GEMV) {
            ck_assert_int_lt(n, 2);
            ks[n++] = prog->kernels[k];
        }
    int64_t S = sn_split_parts(ks[0]), MN = p->M * p->N;
    *parts_out = S;
    ck_assert_int_eq(n, S > 1 ? 2 : 1);
    if (S > 1) { /* PARTIAL then FINISH around one scratch of S M N floats */
        ck_assert(ks[0]->stage == SN_SUM_PARTIAL && ks[1]->stage == SN_SUM_FINISH &&
                  ks[0]->scratch == ks[1]->scratch);
        ck_assert_int_eq(prog->values[ks[0]->scratch].bytes, 4 * S * MN);
        ck_assert_int_eq(ks[0]->n_items, (p->N + 63) / 64 * S);
    }
    sn_cuda_source cs;
    ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
    if (pl) {
        char needle[256], plant[256];
        snprintf(needle, sizeof needle, pl->needle, (long long)S, (long long)MN);
        snprintf(plant, sizeof plant, pl->plant, (long long)S, (long long)MN, (long long)S,
                 (long long)MN);
        char *src = sn_test_replace_first(cs.src, needle, plant);
        free(cs.src);
        cs.src = src;
    }
    if (nvrtc) nvrtc_no_spills(&cs, n, p->M, p->K, p->N);
    sn_sim_module *h;
    ck_assert_msg(sn_sim_module_load(cs.src, &h, &e) == SN_OK, "%s", e.msg);
    float *y = malloc(sizeof(float) * (size_t)MN), *first = malloc(sizeof(float) * (size_t)MN);
    float *scratch = malloc(sizeof(float) * (size_t)(S * MN));
    void *yp = y, *xp = p->xb, *qp = p->src, *sp = scratch;
    void *params[4] = {&yp, &xp, &qp, &sp};
    bool ok = true;
    char what[64];
    for (int rev = 0; rev < 2 && ok; rev++) {
        memset(y, 0xff, sizeof(float) * (size_t)MN);
        memset(scratch, 0x7f, sizeof(float) * (size_t)(S * MN));
        for (int i = 0; i < n; i++) {
            sn_cuda_dims dims = sn_cuda_launch_dims(ks[i], &t);
            sn_sim_opts so = sn_sim_defaults();
            so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            ck_assert_msg(sn_sim_launch(h, cs.fn[i], dims.grid, dims.block, dims.shared_bytes,
                                        params, &so, &e) == SN_OK, "%s", e.msg);
        }
        for (int64_t i = 0; i < MN && ok; i++) {
            double err = fabs((double)y[i] - p->want[i]);
            float inorder = scratch[i];
            for (int64_t s = 1; s < S; s++) inorder += scratch[s * MN + i];
            float stated = inorder;
            if (p->tb) { /* kernel.h's order: each part's lanes and butterfly, parts in order */
                int64_t L = S > 1 ? sn_split_len(ks[0]) : p->K;
                stated = order_cuda_t(p, i / p->N, i % p->N, 0, L < p->K ? L : p->K);
                for (int64_t s = 1; s < S; s++)
                    stated += order_cuda_t(p, i / p->N, i % p->N, s * L,
                                           (s + 1) * L < p->K ? (s + 1) * L : p->K);
            }
            ok = err <= p->bound[i] && (S == 1 || !memcmp(&inorder, &y[i], sizeof inorder)) &&
                 !memcmp(&stated, &y[i], sizeof stated) &&
                 (!rev || !memcmp(&first[i], &y[i], sizeof y[i]));
            if (!ok && !pl)
                ck_abort_msg("CUDA split, %s %s M=%lld K=%lld N=%lld (%lld parts): y[%lld] = %.9g, "
                             "the interpreter's %.9g (bound %.3g), the parts in order %.9g, the "
                             "stated order %.9g%s",
                             rev ? "reversed" : "forward", prod_what(p, what, sizeof what),
                             (long long)p->M, (long long)p->K, (long long)p->N, (long long)S,
                             (long long)i, (double)y[i], p->want[i], p->bound[i], (double)inorder,
                             (double)stated, rev ? " (or the forward order's bits differ)" : "");
        }
        if (!rev) memcpy(first, y, sizeof(float) * (size_t)MN);
    }
    free(y), free(first), free(scratch);
    sn_sim_module_free(h);
    sn_cuda_source_free(&cs);
    sn_program_free(prog);
    return ok;
}

void check_fuse_rule(sn_device *d, int64_t M, sn_dtype dt, bool tb, bool w16, uint64_t seed) {
    enum { K = 96, N = 128 };
    sn_err e;
    prod p;
    prod_new_as(&p, M, K, N, dt, false, seed, tb, w16);
    sn_node *b = sn_param(p.g, "b", SN_F32, SN_SHAPE(N), SN_INIT_NORMAL, 0.5f);
    sn_node *out = sn_add(p.g, p.y, b);
    ck_assert_msg(b && out, "%s", sn_graph_error(p.g));
    sn_graph_clear_outputs(p.g);
    sn_graph_add_output(p.g, out);
    sn_program *prog;
    ck_assert_msg(sn_compile(p.g, &(sn_pipeline_opts){0}, &prog, NULL, &e) == SN_OK, "%s", e.msg);
    int kinds[SN_KER_KIND_COUNT] = {0}, casts = 0;
    for (int k = 0; k < prog->n_kernels; k++) {
        const sn_kernel *ker = prog->kernels[k];
        kinds[ker->kind]++;
        if (ker->kind == SN_KER_GEMV)
            ck_assert(ker->args[0] == p.y && ker->args[1] == p.x && ker->args[2] == p.w->in[0]);
        if (ker->kind == SN_KER_DEQUANT)
            ck_assert(k + 1 < prog->n_kernels && prog->kernels[k + 1]->kind == SN_KER_GEMM);
        for (int o = 0; o < ker->n_out; o++) casts += ker->args[o] == p.w;
    }
    bool fused = M <= SN_GEMV_MAX_M;
    char what[64];
    ck_assert_msg(kinds[SN_KER_GEMV] == fused && kinds[SN_KER_GEMM] == !fused &&
                      kinds[SN_KER_DEQUANT] == (!fused && !w16) && casts == !fused,
                  "%s M=%lld: %d gemv, %d dequant, %d gemm kernels, %d write the f32 weight",
                  prod_what(&p, what, sizeof what), (long long)M, kinds[SN_KER_GEMV],
                  kinds[SN_KER_DEQUANT], kinds[SN_KER_GEMM], casts);
    ck_assert_msg((prog->value_of[p.w->id] < 0) == fused, "M=%lld: the f32 weight %s a value",
                  (long long)M, fused ? "has" : "lacks");
    sn_exec *x;
    ck_assert_msg(sn_exec_new(d, prog, &x, &e) == SN_OK, "%s", e.msg);
    float *bv = malloc(sizeof(float) * (size_t)N), *y = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t c = 0; c < N; c++) bv[c] = 0.25f * (float)(c % 7) - 0.75f;
    ck_assert(sn_exec_set(x, p.x, p.xb, &e) == SN_OK &&
              sn_exec_set(x, p.w->in[0], p.src, &e) == SN_OK && sn_exec_set(x, b, bv, &e) == SN_OK);
    ck_assert_msg(sn_exec_run(x, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_exec_get(x, out, y, &e) == SN_OK);
    for (int64_t j = 0; j < M * N; j++) { /* the sum, then b added once (one more rounding) */
        y[j] -= bv[j % N];
        p.bound[j] += 0x1p-23 * (fabs(p.want[j]) + fabs(bv[j % N]));
    }
    check_y(&p, y, fused ? "CPU device, gemv" : "CPU device, unpacked and GEMM");
    free(bv), free(y);
    sn_exec_free(x);
    sn_program_free(prog);
    prod_free(&p);
}
