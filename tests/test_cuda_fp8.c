/* test_cuda_fp8.c: the CUDA path of the 8-bit floats (OCP FP8, ir.h): the generated kernels'
 * f32 -> f8 stores, f8 -> f32 loads, pow2_scale and amax, compiled by NVRTC for sm_75, sm_80,
 * sm_89 and sm_90 and run on the SIMT simulator against the interpreter bit for bit over every
 * edge value (zeros, f32 and f8 subnormals, every midpoint between adjacent codes and its
 * neighbours, the saturation points, infinities, NaN) and a large sample of bit patterns; the
 * stand-in cuBLASLt's FP8 GEMMs against a host reference and its (cuBLASLt's) refusals; sinter's
 * own refusals of the forms cuBLASLt does not take; and the fp8 pass's scaled product end to
 * end on the stand-in device against the interpreter.
 * Convention: a value compared "bit for bit" is an f8 code or an f32's bits, NaN with any NaN
 * for f32 (f8 stores write the canonical 0x7f). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin_check.h"
#include "fp8_ref.h"
#include "codegen/cuda/cuda.h"
#include "interp/interp.h"
#include "program/program.h"
#include "runtime/cuda/cuda_rt.h"
#include "sim/sim.h"
#include "support/rng.h"

/* ---- the formats, from their bit layouts (independent of the code under test) ---- */

/* Code c's value (NAN, +-INFINITY for e5m2's): fp8_ref.h. */
static double f8_decode(sn_dtype t, unsigned c) { return fp8_decode(fp8_fmt_of(t), (int)c); }

/* The code of a value the format holds exactly (NaN: 0x7f, the canonical one). */
static unsigned f8_encode(sn_dtype t, double v) {
    if (isnan(v)) return 0x7f;
    unsigned s = signbit(v) ? 0x80 : 0;
    for (unsigned c = 0; c < 128; c++)
        if (f8_decode(t, c) == fabs(v)) return s | c;
    ck_abort_msg("%g is no %s value", v, sn_dtype_name(t));
    return 0;
}

/* ---- the inputs: every edge value, then bit patterns ---- */

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x with its neighbours in f32 (one ulp down and up) and the negatives of all three. */
static int64_t push3(float *x, int64_t n, float v) {
    const float vs[3] = {v, nextafterf(v, -INFINITY), nextafterf(v, INFINITY)};
    for (int i = 0; i < 3; i++) x[n++] = vs[i], x[n++] = -vs[i];
    return n;
}

/* The sample: zeros, infinities, NaNs, f32 subnormals and FLT_MAX; for both formats every code's
 * value and every midpoint between adjacent codes (the ties) with their neighbours, the
 * saturation points (448, 464, 480; 57344, 61440, 65536); then `random` f32 bit patterns and as
 * many values of exponents between 2^-30 and 2^20 (where the codes are). Returns the count. */
static int64_t sample(float *x, int64_t random) {
    int64_t n = 0;
    const float special[] = {0.0f, INFINITY, NAN, FLT_MIN, FLT_MAX, 0x1p-149f, 0x1p-127f,
                             float_of(0x007fffffu), float_of(0x00400001u), 448, 464, 480, 57344,
                             61440, 65536, 0x1p-6f, 0x1p-9f, 0x1p-10f, 0x1p-14f, 0x1p-16f, 0x1p-17f};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) n = push3(x, n, special[i]);
    x[n++] = float_of(0x7fc00001u), x[n++] = float_of(0xffc00000u); /* NaNs of other bits */
    const sn_dtype ts[2] = {SN_F8E4M3, SN_F8E5M2};
    for (int k = 0; k < 2; k++)
        for (unsigned c = 0; c < 127; c++) {
            double v = f8_decode(ts[k], c), w = f8_decode(ts[k], c + 1);
            if (!isfinite(v)) continue;
            n = push3(x, n, (float)v);
            if (isfinite(w)) n = push3(x, n, (float)((v + w) / 2)); /* exact in f32 */
        }
    sn_rng r = sn_rng_seed(8);
    for (int64_t i = 0; i < random; i++) x[n++] = float_of((uint32_t)sn_rng_next(&r));
    for (int64_t i = 0; i < random; i++)
        x[n++] = (float)ldexp(2 * sn_rng_uniform(&r) - 1, (int)sn_rng_below(&r, 51) - 30);
    return n;
}

/* ---- kernels on the simulator, bit for bit against the interpreter ---- */

static sn_program *fuse_for(sn_graph *g, int arch) {
    sn_err e;
    sn_program *p;
    sn_target t = sn_target_cuda(arch);
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    return p;
}

/* n's value as the interpreter has it, stored in n's dtype (f32, f8) into buf. */
static void store_as(const sn_node *n, const double *v, void *buf) {
    for (int64_t i = 0; i < sn_numel(n); i++) {
        if (sn_dtype_is_f8(n->dtype)) ((uint8_t *)buf)[i] = (uint8_t)f8_encode(n->dtype, v[i]);
        else if (n->dtype == SN_F32) ((float *)buf)[i] = (float)v[i];
        else ck_abort_msg("%%%d is %s", n->id, sn_dtype_name(n->dtype));
    }
}

/* Output n's bytes got against the interpreter's value: f8 codes equal, f32 bits equal or both
 * NaN. Returns the mismatches (the first few printed). */
static int64_t compare_bits(const char *what, const sn_node *n, const void *got, const double *want) {
    int64_t bad = 0;
    for (int64_t i = 0; i < sn_numel(n); i++) {
        bool ok;
        unsigned g8 = 0, w8 = 0;
        uint32_t gu = 0, wu = 0;
        if (sn_dtype_is_f8(n->dtype)) {
            g8 = ((const uint8_t *)got)[i], w8 = f8_encode(n->dtype, want[i]);
            ok = g8 == w8;
        } else {
            float g = ((const float *)got)[i], w = (float)want[i];
            gu = bits_of(g), wu = bits_of(w);
            ok = gu == wu || (isnan(g) && isnan(w));
        }
        if (!ok && bad++ < 8)
            printf("test_cuda_fp8: %s: %%%d (%s) element %lld: got 0x%x, want 0x%x (%.9g)\n", what,
                   n->id, sn_dtype_name(n->dtype), (long long)i, sn_dtype_is_f8(n->dtype) ? g8 : gu,
                   sn_dtype_is_f8(n->dtype) ? w8 : wu, want[i]);
    }
    return bad;
}

/* Values that replace the interpreter's for a test that feeds a kernel bytes no program makes
 * (an f8 input holding every code, infinities and NaNs included): an input's raw bytes, an
 * output's expected values. */
static struct {
    const sn_node *node;
    const uint8_t *raw;
    const double *values;
} given[6];
static int n_given;

static const double *value_of(const sn_interp *it, const sn_node *n) {
    for (int i = 0; i < n_given; i++)
        if (given[i].node == n && given[i].values) return given[i].values;
    return sn_interp_value(it, n);
}

static const uint8_t *raw_of(const sn_node *n) {
    for (int i = 0; i < n_given; i++)
        if (given[i].node == n) return given[i].raw;
    return NULL;
}

/* Runs kernel k (function fn of h) with the interpreter's values of its inputs, with the launch
 * of sm_89 and with a 3-block grid (its loop goes round), each in three thread orders on
 * poisoned outputs; returns the outputs' mismatches with the interpreter. */
static int64_t run_kernel(sn_sim_module *h, const sn_kernel *k, const char *fn, const sn_interp *it) {
    void *buf[SN_KER_MAX_ARGS], *params[SN_KER_MAX_ARGS + 1];
    sn_sim_buf outs[SN_KER_MAX_ARGS];
    int nargs = k->n_out + k->n_in;
    ck_assert(k->stage == SN_SUM_WHOLE);
    for (int i = 0; i < nargs; i++) {
        const sn_node *n = k->args[i];
        size_t bytes = (size_t)sn_numel(n) * (size_t)sn_dtype_bits(n->dtype) / 8;
        buf[i] = aligned_alloc(64, (bytes + 64) / 64 * 64);
        params[i] = &buf[i];
        if (i < k->n_out) outs[i] = (sn_sim_buf){buf[i], bytes};
        else if (raw_of(n)) memcpy(buf[i], raw_of(n), bytes);
        else store_as(n, value_of(it, n), buf[i]);
    }
    sn_target t = sn_target_cuda(89);
    sn_cuda_dims dims[2] = {sn_cuda_launch_dims(k, &t), {.grid = {3, 1, 1}, .block = {256, 1, 1}}};
    int64_t bad = 0;
    for (int d = 0; d < (k->kind == SN_KER_POINTWISE ? 2 : 1); d++) {
        for (int o = 0; o < k->n_out; o++) memset(outs[o].ptr, 0x7e, outs[o].bytes); /* 448, a
                                                            large finite f32: a poison both ways */
        sn_sim_opts so = sn_sim_defaults();
        sn_err e;
        ck_assert_msg(sn_sim_launch_orders(h, fn, dims[d].grid, dims[d].block, dims[d].shared_bytes,
                                           params, outs, k->n_out, &so, &e) == SN_OK, "%s", e.msg);
        for (int o = 0; o < k->n_out; o++) {
            char what[96];
            snprintf(what, sizeof what, "%s (grid %u)", k->name, dims[d].grid[0]);
            bad += compare_bits(what, k->args[o], buf[o], value_of(it, k->args[o]));
        }
    }
    for (int i = 0; i < nargs; i++) free(buf[i]);
    return bad;
}

/* The kernels ks (all generated) rendered for `arch`; compiled by NVRTC for sm_75, 80, 89 and 90
 * where NVRTC is here (no spills); run on the simulator against it with every value kept.
 * Returns the mismatches over all kernels (0: no g++). */
static int64_t check_kernels(const sn_kernel *const *ks, int n, const sn_interp *it, bool nvrtc) {
    static const int archs[] = {75, 80, 89, 90};
    sn_err e;
    int64_t bad = 0;
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        sn_target t = sn_target_cuda(archs[a]);
        sn_cuda_source cs;
        ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
        if (nvrtc) {
            sn_cuda_module m;
            ck_assert_msg(sn_nvrtc_compile(cs.src, "fp8.cu", archs[a], &m, &e) == SN_OK,
                          "sm_%d: %s", archs[a], e.msg);
            for (int i = 0; i < n; i++) {
                const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[i]);
                ck_assert_msg(in && in->spill_store_bytes == 0 && in->stack_bytes == 0,
                              "sm_%d: %s spills or has no report", archs[a], cs.fn[i]);
            }
            sn_cuda_module_free(&m);
        }
        if (archs[a] == 89) { /* one text runs on the simulator (the prelude's CPU side) */
            sn_sim_module *h;
            sn_status st = sn_sim_module_load(cs.src, &h, &e);
            if (st == SN_ERR_UNSUPPORTED) {
                printf("test_cuda_fp8: %s: no simulator runs\n", e.msg);
            } else {
                ck_assert_msg(st == SN_OK, "%s", e.msg);
                for (int i = 0; i < n; i++) bad += run_kernel(h, ks[i], cs.fn[i], it);
                sn_sim_module_free(h);
            }
        }
        sn_cuda_source_free(&cs);
    }
    return bad;
}

static bool nvrtc_here(void) {
    sn_cuda_module m;
    sn_err e;
    sn_status st = sn_nvrtc_compile("extern \"C\" __global__ void k() {}\n", "probe.cu", 80, &m, &e);
    sn_cuda_module_free(&m);
    if (st) printf("test_cuda_fp8: %s: no NVRTC checks\n", e.msg);
    return st == SN_OK;
}

/* Casts to both formats (stored as codes, and widened again in the same kernel), pow2_scale
 * for four bounds (448, 57344; 3 and 1: significands above and at 0.5, the comparison's two
 * sides; 1e-30 and 3e38: the clamps), over the sample laid out as (rows, cols): cols a multiple
 * of 4 (four elements a step) or 7 (one). */
static void pointwise_case(int64_t cols, int64_t random) {
    int64_t cap = 16000 + 2 * random;
    float *x = malloc(sizeof *x * (size_t)cap);
    int64_t n = sample(x, random), rows = (n + cols - 1) / cols;
    ck_assert_int_le(rows * cols, cap);
    for (int64_t i = n; i < rows * cols; i++) x[i] = (float)i; /* the last row's rest */
    sn_graph *g = sn_graph_new();
    sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(rows, cols));
    sn_node *e4 = sn_cast(g, in, SN_F8E4M3), *e5 = sn_cast(g, in, SN_F8E5M2);
    sn_graph_add_output(g, e4);
    sn_graph_add_output(g, e5);
    sn_graph_add_output(g, sn_cast(g, e4, SN_F32));
    sn_graph_add_output(g, sn_cast(g, e5, SN_F32));
    const float bounds[] = {448, 57344, 3, 1, 1e-30f, 3e38f};
    for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++)
        sn_graph_add_output(g, sn_pow2_scale(g, in, bounds[i]));
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    sn_err e;
    ck_assert_msg(sn_interp_set(it, in, x, &e) == SN_OK && sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    sn_program *p = fuse_for(g, 89);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
    int nk = 0, stores8 = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        ck_assert_int_eq(p->kernels[i]->kind, SN_KER_POINTWISE);
        ks[nk++] = p->kernels[i];
        for (int o = 0; o < p->kernels[i]->n_out; o++) stores8 += sn_dtype_is_f8(p->kernels[i]->args[o]->dtype);
    }
    ck_assert_int_eq(stores8, 2);
    int64_t bad = check_kernels(ks, nk, it, nvrtc_here());
    ck_assert_msg(bad == 0, "%lld values differ from the interpreter (%lld x %lld)", (long long)bad,
                  (long long)rows, (long long)cols);
    printf("test_cuda_fp8: %lld values (%lld x %lld) cast to both formats and scaled by six bounds "
           "on the simulator: the interpreter's bits\n", (long long)n, (long long)rows, (long long)cols);
    free(ks);
    sn_program_free(p);
    sn_interp_free(it);
    sn_graph_free(g);
    free(x);
}

START_TEST(pointwise_stores_and_scales_are_the_interpreters) {
    pointwise_case(_i == 0 ? 64 : 7, _i == 0 ? 200000 : 3000);
}
END_TEST

/* A pointwise kernel reading 8-bit floats, made by hand (the fuse pass keeps a cast of an f8
 * value in the kernel that makes it: no program loads one today; the GEMM reads them): z =
 * cast(y8, f32) and w = cast(z * z, f8e5m2) from the f8e4m3 y8, and the same from an f8e5m2. */
static void f8_reader(sn_kernel *k, sn_pw_instr *ins, sn_access *acc, sn_node *y8, sn_node *z,
                      sn_node *zz, sn_node *w) {
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "k%d_f8_reader", z->id);
    k->kind = SN_KER_POINTWISE;
    k->id = z->id;
    k->rank = z->rank;
    memcpy(k->shape, z->shape, sizeof k->shape);
    k->n_items = sn_numel(z);
    k->n_out = 2, k->n_in = 1;
    k->args[0] = z, k->args[1] = w, k->args[2] = y8;
    acc[0] = (sn_access){.arg = 2};
    for (int d = z->rank - 1, s = 1; d >= 0; s *= (int)z->shape[d], d--) acc[0].stride[d] = s;
    k->access = acc, k->n_access = 1;
    ins[0] = (sn_pw_instr){.node = z, .n_in = 1, .in = {{.kind = SN_REF_ACCESS, .index = 0}}};
    ins[1] = (sn_pw_instr){.node = zz, .n_in = 2,
                           .in = {{.kind = SN_REF_INSTR, .index = 0}, {.kind = SN_REF_INSTR, .index = 0}}};
    ins[2] = (sn_pw_instr){.node = w, .n_in = 1, .in = {{.kind = SN_REF_INSTR, .index = 1}}};
    k->instr = ins, k->n_instr = 3;
    k->store[0] = 0, k->store[1] = 2;
}

START_TEST(pointwise_loads_are_the_interpreters) {
    /* every code of both formats, twice over (rows of 64: four a step) */
    float x[2 * 4 * 64];
    sn_graph *g = sn_graph_new();
    sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(8, 64));
    sn_node *y[2] = {sn_cast(g, in, SN_F8E4M3), sn_cast(g, in, SN_F8E5M2)}, *z[2], *zz[2], *w[2];
    for (int f = 0; f < 2; f++) {
        z[f] = sn_cast(g, y[f], SN_F32);
        zz[f] = sn_mul(g, z[f], z[f]);
        w[f] = sn_cast(g, zz[f], SN_F8E5M2);
        sn_graph_add_output(g, w[f]);
    }
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    for (int i = 0; i < 512; i++) { /* code i % 256 of e4m3 in the first half, e5m2 after */
        double v = f8_decode(i < 256 ? SN_F8E4M3 : SN_F8E5M2, (unsigned)(i % 256));
        x[i] = (float)v;
    }
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    sn_err e;
    ck_assert_msg(sn_interp_set(it, in, x, &e) == SN_OK && sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    sn_kernel k[2];
    sn_pw_instr ins[2][3];
    sn_access acc[2][1];
    const sn_kernel *ks[2];
    for (int f = 0; f < 2; f++) f8_reader(&k[f], ins[f], acc[f], y[f], z[f], zz[f], w[f]), ks[f] = &k[f];
    ck_assert_int_eq(check_kernels(ks, 2, it, nvrtc_here()), 0);
    /* then every code as the input's bytes, infinities and every NaN included (no cast makes
     * them: they saturate), against the formats' decoding here */
    uint8_t codes[512];
    static double zv[2][512], wv[2][512];
    for (int i = 0; i < 512; i++) codes[i] = (uint8_t)i;
    for (int f = 0; f < 2; f++) {
        for (int i = 0; i < 512; i++) {
            zv[f][i] = f8_decode(y[f]->dtype, codes[i]);
            wv[f][i] = sn_dtype_round(SN_F8E5M2, (float)(zv[f][i] * zv[f][i]));
        }
        given[3 * f] = (typeof(given[0])){y[f], codes, NULL};
        given[3 * f + 1] = (typeof(given[0])){z[f], NULL, zv[f]};
    }
    given[2] = (typeof(given[0])){w[0], NULL, wv[0]};
    n_given = 3;
    ck_assert_int_eq(check_kernels(ks, 1, it, false), 0);
    given[0] = given[3], given[1] = given[4], given[2] = (typeof(given[0])){w[1], NULL, wv[1]};
    ck_assert_int_eq(check_kernels(ks + 1, 1, it, false), 0);
    n_given = 0;
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* amax over each axis, through the reduce kernel's three forms (a warp a row; a thread a column
 * of few rows; tiles of columns), NaN propagating, zeros of both signs, infinities, subnormals. */
START_TEST(amax_is_the_interpreters) {
    const int64_t shapes[][2] = {{37, 300}, {16, 70}, {300, 45}};
    for (size_t s = 0; s < 3; s++) {
        int64_t R = shapes[s][0], C = shapes[s][1];
        float *x = malloc(sizeof *x * (size_t)(R * C));
        sn_rng r = sn_rng_seed(3 + s);
        for (int64_t i = 0; i < R * C; i++) {
            uint64_t u = sn_rng_below(&r, 100);
            x[i] = u == 0 ? NAN : u == 1 ? -INFINITY : u == 2 ? -0.0f : u == 3 ? 0x1p-140f
                   : (float)ldexp(2 * sn_rng_uniform(&r) - 1, (int)sn_rng_below(&r, 20) - 10);
        }
        for (int64_t i = 0; i < C; i++) x[i] = -0.0f; /* a column of zeros but row 1's */
        sn_graph *g = sn_graph_new();
        sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(R, C));
        sn_graph_add_output(g, sn_amax(g, in, 0, false));
        sn_graph_add_output(g, sn_amax(g, in, 1, false));
        sn_graph_add_output(g, sn_pow2_scale(g, sn_amax(g, sn_amax(g, in, 1, false), 0, false), 448));
        ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
        sn_interp *it = sn_interp_new(g, false);
        sn_interp_keep_all(it, true);
        sn_err e;
        ck_assert_msg(sn_interp_set(it, in, x, &e) == SN_OK && sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
        sn_program *p = fuse_for(g, 89);
        const sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
        int nk = 0, reduces = 0;
        for (int i = 0; i < p->n_kernels; i++) {
            ks[nk++] = p->kernels[i];
            reduces += p->kernels[i]->kind == SN_KER_REDUCE;
        }
        ck_assert_int_ge(reduces, 3);
        ck_assert_int_eq(check_kernels(ks, nk, it, s == 0 && nvrtc_here()), 0);
        free(ks);
        sn_program_free(p);
        sn_interp_free(it);
        sn_graph_free(g);
        free(x);
    }
}
END_TEST

/* Row and gather kernels refuse 8-bit floats by name (not supported yet; a row kernel stores its
 * output in 8 bits, test_fp8_cpu and standin_cli), as does a reduction
 * of 8-bit values would not be made (the IR reads them only by casts). */
START_TEST(row_kernels_refuse_f8) {
    sn_graph *g = sn_graph_new();
    sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(4, 32));
    sn_node *y8 = sn_cast(g, in, SN_F8E4M3);
    sn_node *s = sn_softmax(g, sn_cast(g, y8, SN_F32));
    sn_graph_add_output(g, s);
    sn_program *p = fuse_for(g, 89);
    const sn_kernel *row = NULL;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ROW) row = p->kernels[i];
    ck_assert_ptr_nonnull(row);
    /* the row kernel reads the cast's f32 (fuse keeps the f8 in the pointwise kernel); a row
     * kernel that read the f8 itself is refused: the same kernel with its input's dtype f8 */
    sn_kernel k = *row;
    sn_node fake = *k.args[k.n_out];
    fake.dtype = SN_F8E4M3;
    k.args[k.n_out] = &fake;
    sn_target t = sn_target_cuda(89);
    sn_cuda_source cs;
    sn_err e;
    const sn_kernel *ks[1] = {&k};
    ck_assert_int_eq(sn_cuda_render(ks, 1, &t, &cs, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "not yet elsewhere in row kernels") && strstr(e.msg, "f8e4m3"), "%s", e.msg);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

START_TEST(targets_say_which_multiply_fp8) {
    ck_assert(!sn_target_cuda(75).mma_fp8 && !sn_target_cuda(80).mma_fp8 && !sn_target_cuda(86).mma_fp8);
    ck_assert(sn_target_cuda(89).mma_fp8 && sn_target_cuda(90).mma_fp8 && sn_target_cuda(120).mma_fp8);
    ck_assert(!sn_target_cpu().mma_fp8);
}
END_TEST

/* ---- FP8 GEMMs: sinter's plans on the stand-in cuBLASLt ---- */

#define CK(call) ck_assert_msg((call) == SN_OK, "%s", e.msg)

/* lt_setup (standin_check.h) on a stand-in GPU of architecture sm. */
static void lt_open_sm(lt_setup *L, const char *sm) {
    setenv("SN_STANDIN_SM", sm, 1);
    lt_open(L);
}

/* A random finite code of format t (subnormals and the largest included). */
static uint8_t code(sn_rng *r, sn_dtype t) {
    for (;;) {
        uint8_t c = (uint8_t)sn_rng_next(r);
        if (isfinite(f8_decode(t, c))) return c;
    }
}

/* D (batch, M, N) f32 = A (M, K) B (N, K)^T of 8-bit A and B, in sinter's K-major form (ta = 0,
 * tb = 1), batched with strides, against a double reference over the exact values; each pair
 * of formats cuBLASLt multiplies. */
START_TEST(fp8_gemm_matches_a_reference) {
    lt_setup L;
    lt_open_sm(&L, "89");
    sn_cuda_api *a = &L.a;
    sn_err e;
    enum { M = 6, N = 8, K = 48, NB = 2, WS = 1 << 20 };
    const sn_dtype pairs[3][2] = {{SN_F8E4M3, SN_F8E4M3}, {SN_F8E4M3, SN_F8E5M2}, {SN_F8E5M2, SN_F8E4M3}};
    CUdeviceptr dA, dB, dD, ws;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, NB * M * K));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dB, NB * N * K));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * NB * M * N));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &ws, WS));
    sn_rng r = sn_rng_seed(5);
    for (int pi = 0; pi < 3; pi++)
        for (int batched = 0; batched < 2; batched++) {
            sn_gemm_shape s = {.tb = true, .M = M, .N = N, .K = K, .batch = batched ? NB : 1,
                               .lda = K, .ldb = K, .ldd = N, .stride_a = batched ? M * K : 0,
                               .stride_b = batched ? N * K : 0, .stride_d = M * N,
                               .ab = pairs[pi][0], .b_t = pairs[pi][1]};
            uint8_t hA[NB * M * K], hB[NB * N * K];
            float hD[NB * M * N];
            double want[NB * M * N], got[NB * M * N];
            for (int i = 0; i < NB * M * K; i++) hA[i] = code(&r, s.ab);
            for (int i = 0; i < NB * N * K; i++) hB[i] = code(&r, s.b_t);
            int64_t nd = s.batch * M * N;
            for (int64_t b = 0; b < s.batch; b++)
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double v = 0;
                        for (int q = 0; q < K; q++)
                            v += f8_decode(s.ab, hA[b * M * K + i * K + q]) * f8_decode(s.b_t, hB[b * N * K + j * K + q]);
                        want[b * M * N + i * N + j] = v;
                    }
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, hA, sizeof hA, L.stream));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dB, hB, sizeof hB, L.stream));
            sn_gemm_plan *p;
            CK(sn_gemm_plan_new(a, L.lt, &s, false, WS, &p, &e));
            CK(sn_gemm_plan_run(a, L.lt, p, dD, dA, dB, 0, 0, 0, ws, WS, L.stream, &e));
            CK(SN_CUDA_CHECK(a, &e, cuMemcpyDtoHAsync, hD, dD, 4 * (size_t)nd, L.stream));
            CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
            for (int64_t i = 0; i < nd; i++) got[i] = hD[i];
            char what[96];
            snprintf(what, sizeof what, "FP8 GEMM %s by %s, batch %lld", sn_dtype_name(s.ab),
                     sn_dtype_name(s.b_t), (long long)s.batch);
            /* f32 sums of 48 exact products: a few f32 roundings of the partial sums */
            sn_check_close(what, got, want, (size_t)nd, 1e-5, 1);
            sn_gemm_plan_free(a, p);
        }
    lt_close(&L);
}
END_TEST

/* sinter refuses, by name, the FP8 forms cuBLASLt does not take: an operand not K-major (each
 * of the three other transposes), e5m2 by e5m2, an unaligned leading dimension or offset, a
 * 16-bit D, an epilogue. */
START_TEST(fp8_plans_refuse_what_cublaslt_refuses) {
    lt_setup L;
    lt_open_sm(&L, "89");
    sn_err e;
    const sn_gemm_shape ok = {.tb = true, .M = 16, .N = 16, .K = 32, .batch = 1, .lda = 32,
                              .ldb = 32, .ldd = 16, .stride_d = 256, .ab = SN_F8E4M3, .b_t = SN_F8E4M3};
    struct {
        sn_gemm_shape s;
        const char *says;
    } bad[] = {
        {ok, "K-major"}, {ok, "K-major"}, {ok, "K-major"}, {ok, "e5m2 by f8e5m2"},
        {ok, "16-byte aligned"}, {ok, "16-byte aligned"}, {ok, "f32 D"}, {ok, "no epilogue"},
    };
    bad[0].s.tb = false;                       /* NN */
    bad[1].s.ta = true;                        /* TT */
    bad[2].s.ta = true, bad[2].s.tb = false;   /* TN in sinter's terms: NT in cuBLASLt's */
    bad[3].s.ab = bad[3].s.b_t = SN_F8E5M2;
    bad[4].s.lda = 40;
    bad[5].s.off_b = 8;
    bad[6].s.d = SN_BF16;
    bad[7].s.epi = SN_EPI_BIAS;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sn_gemm_plan *p = NULL;
        ck_assert_int_eq(sn_gemm_plan_new(&L.a, L.lt, &bad[i].s, false, 1 << 20, &p, &e), SN_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(e.msg, bad[i].says), "case %zu: '%s' lacks '%s'", i, e.msg, bad[i].says);
        ck_assert_ptr_null(p);
    }
    sn_gemm_plan *p;
    CK(sn_gemm_plan_new(&L.a, L.lt, &ok, false, 1 << 20, &p, &e));
    sn_gemm_plan_free(&L.a, p);
    lt_close(&L);
}
END_TEST

/* The stand-in cuBLASLt enforces cuBLASLt's FP8 rules itself (sinter's checks bypassed: its
 * layouts made here): the TN form, no e5m2 x e5m2, sm_89 and up, 16-byte aligned matrices. */
START_TEST(standin_refuses_fp8_as_cublaslt_does) {
    int sm = _i == 0 ? 89 : 80;
    lt_setup L;
    lt_open_sm(&L, sm == 89 ? "89" : "80");
    sn_cuda_api *a = &L.a;
    sn_err e;
    enum { S = 16 };
    CUdeviceptr dA, dD;
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dA, 4 * S * S + 64));
    CK(SN_CUDA_CHECK(a, &e, cuMemAlloc, &dD, 4 * S * S));
    uint8_t zeros[4 * S * S + 64] = {0};
    CK(SN_CUDA_CHECK(a, &e, cuMemcpyHtoDAsync, dA, zeros, sizeof zeros, L.stream));
    CK(SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream));
    /* transa, transb, A's type, B's type, A's offset in bytes; and whether cuBLASLt takes it */
    const struct {
        int ta, tb, at, bt, off;
        bool ok;
    } cases[] = {
        {CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, 0, true},
        {CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, 0, true},
        {CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, 0, false},
        {CUBLAS_OP_T, CUBLAS_OP_T, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, 0, false},
        {CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, 0, false},
        {CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, 0, false},
        {CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, 8, false}, /* at the matmul */
    };
    const float one = 1, zero = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescCreate, &desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSA,
                         &cases[i].ta, sizeof cases[i].ta));
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSB,
                         &cases[i].tb, sizeof cases[i].tb));
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &la, cases[i].at, S, S, S));
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &lb, cases[i].bt, S, S, S));
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatrixLayoutCreate, &ld, CUDA_R_32F, S, S, S));
        CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulPreferenceCreate, &pref));
        uint32_t align = 1; /* the heuristic told nothing: the matmul's own FP8 check decides */
        for (int m = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; m <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; m++)
            CK(SN_CUDA_CHECK(a, &e, cublasLtMatmulPreferenceSetAttribute, pref,
                             (cublasLtMatmulPreferenceAttributes_t)m, &align, sizeof align));
        sn_status st = SN_CUDA_CHECK(a, &e, cublasLtMatmulAlgoGetHeuristic, L.lt, desc, la, lb, ld, ld,
                                     pref, 1, &heur, &found);
        if (!st)
            st = SN_CUDA_CHECK(a, &e, cublasLtMatmul, L.lt, desc, &one,
                               (void *)(uintptr_t)(dA + (CUdeviceptr)cases[i].off), la,
                               (void *)(uintptr_t)dA, lb, &zero, (void *)(uintptr_t)dD, ld,
                               (void *)(uintptr_t)dD, ld, &heur.algo, NULL, 0, L.stream);
        if (!st) st = SN_CUDA_CHECK(a, &e, cuStreamSynchronize, L.stream);
        bool want_ok = cases[i].ok && sm >= 89;
        ck_assert_msg(want_ok ? st == SN_OK : st != SN_OK, "sm_%d case %zu: %s", sm, i,
                      st ? e.msg : "taken");
        if (!want_ok) ck_assert_msg(strstr(e.msg, "CUBLAS_STATUS_NOT_SUPPORTED"), "%s", e.msg);
        a->cublasLtMatmulPreferenceDestroy(pref);
        a->cublasLtMatrixLayoutDestroy(la);
        a->cublasLtMatrixLayoutDestroy(lb);
        a->cublasLtMatrixLayoutDestroy(ld);
        a->cublasLtMatmulDescDestroy(desc);
    }
    lt_close(&L);
}
END_TEST

/* ---- the fp8 pass's scaled product, end to end on the stand-in device ---- */

/* y = (a8 b8^T) / sa / sb with a8 = f8e4m3(a sa), b8 = f8e4m3(b sb) (f8e5m2 for b when
 * grad), sa = pow2_scale(amax(amax(a, 1), 0), 448) (57344 for e5m2): passes/fp8.c's form. */
static sn_graph *scaled_product(sn_node **a, sn_node **b, sn_node **y, bool grad) {
    sn_graph *g = sn_graph_new();
    *a = sn_input(g, "a", SN_F32, SN_SHAPE(2, 16, 32));
    *b = sn_input(g, "b", SN_F32, SN_SHAPE(48, 32));
    sn_dtype tb = grad ? SN_F8E5M2 : SN_F8E4M3;
    sn_node *ra = sn_reshape(g, *a, SN_SHAPE(32, 32));
    sn_node *sa = sn_pow2_scale(g, sn_amax(g, sn_amax(g, ra, 1, false), 0, false), 448);
    sn_node *sb = sn_pow2_scale(g, sn_amax(g, sn_amax(g, *b, 1, false), 0, false),
                                grad ? 57344 : 448);
    sn_node *a8 = sn_cast(g, sn_mul(g, ra, sa), SN_F8E4M3);
    sn_node *b8 = sn_cast(g, sn_mul(g, *b, sb), tb);
    sn_node *mm = sn_matmul_t(g, a8, b8, false, true);
    *y = sn_div(g, sn_div(g, mm, sa), sb);
    sn_graph_add_output(g, *y);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

START_TEST(scaled_product_runs_on_the_standin) {
    if (!have_nvrtc()) return;
    bool grad = _i == 1;
    setenv("SN_STANDIN_SM", "89", 1);
    sn_node *a, *b, *y;
    sn_graph *ref = scaled_product(&a, &b, &y, grad);
    float av[1024], bv[1536];
    sn_rng r = sn_rng_seed(11);
    for (int i = 0; i < 1024; i++) av[i] = (float)(3 * sn_rng_normal(&r));
    for (int i = 0; i < 1536; i++) bv[i] = (float)(0.01 * sn_rng_normal(&r));
    sn_err e;
    sn_interp *it = sn_interp_new(ref, false);
    ck_assert(!sn_interp_set(it, a, av, &e) && !sn_interp_set(it, b, bv, &e));
    ck_assert_msg(!sn_interp_run(it, &e), "%s", e.msg);
    const double *want = sn_interp_value(it, y);
    sn_device *dev = cuda(NULL);
    ck_assert(dev->target.mma_fp8);
    sn_graph *g = scaled_product(&a, &b, &y, grad);
    sn_program *p;
    ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &dev->target}, &p, NULL, &e),
                  "%s", e.msg);
    int gemms = 0, stores8 = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        gemms += ker->kind == SN_KER_GEMM;
        for (int o = 0; o < ker->n_out; o++) stores8 += sn_dtype_is_f8(ker->args[o]->dtype);
    }
    ck_assert_int_eq(gemms, 1);
    ck_assert_int_eq(stores8, 2);
    sn_exec *ex;
    ck_assert_msg(!sn_exec_new(dev, p, &ex, &e), "%s", e.msg);
    ck_assert(!sn_exec_set(ex, a, av, &e) && !sn_exec_set(ex, b, bv, &e));
    ck_assert_msg(!sn_exec_run(ex, &e), "%s", e.msg);
    float got[32 * 48];
    double gd[32 * 48];
    ck_assert_msg(!sn_exec_get(ex, y, got, &e), "%s", e.msg);
    for (int i = 0; i < 32 * 48; i++) gd[i] = got[i];
    /* the same 8-bit operands (the kernels' codes are the interpreter's: above); the sums in
     * f32 on the stand-in, in double in the interpreter */
    sn_check_close(grad ? "scaled product e4m3 x e5m2" : "scaled product e4m3 x e4m3", gd, want,
                   32 * 48, 1e-5, 1e-5);
    sn_exec_free(ex);
    sn_program_free(p);
    sn_graph_free(g);
    sn_device_free(dev);
    sn_interp_free(it);
    sn_graph_free(ref);
}
END_TEST

/* On an sm_80 device the GEMM is refused at compile, naming the architecture. */
START_TEST(scaled_product_is_refused_below_sm89) {
    if (!have_nvrtc()) return;
    setenv("SN_STANDIN_SM", "80", 1);
    sn_node *a, *b, *y;
    sn_graph *g = scaled_product(&a, &b, &y, false);
    sn_device *dev = cuda(NULL);
    ck_assert(!dev->target.mma_fp8);
    sn_program *p;
    sn_err e;
    ck_assert_msg(!sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &dev->target}, &p, NULL, &e),
                  "%s", e.msg);
    sn_exec *ex = NULL;
    ck_assert_int_eq(sn_exec_new(dev, p, &ex, &e), SN_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "need sm_89 or newer") && strstr(e.msg, "sm_80"), "%s", e.msg);
    sn_program_free(p);
    sn_graph_free(g);
    sn_device_free(dev);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("cuda_fp8");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 280);
    tcase_add_loop_test(tc, pointwise_stores_and_scales_are_the_interpreters, 0, 2);
    tcase_add_test(tc, pointwise_loads_are_the_interpreters);
    tcase_add_test(tc, amax_is_the_interpreters);
    tcase_add_test(tc, row_kernels_refuse_f8);
    tcase_add_test(tc, targets_say_which_multiply_fp8);
    tcase_add_test(tc, fp8_gemm_matches_a_reference);
    tcase_add_test(tc, fp8_plans_refuse_what_cublaslt_refuses);
    tcase_add_loop_test(tc, standin_refuses_fp8_as_cublaslt_does, 0, 2);
    tcase_add_loop_test(tc, scaled_product_runs_on_the_standin, 0, 2);
    tcase_add_test(tc, scaled_product_is_refused_below_sm89);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
