/* test_fp8_cpu.c: the 8-bit floats on the CPU device (LLVM JIT kernels and the CPU GEMM): casts
 * f32 -> f8 -> f32 of every bf16 bit pattern, a million random f32 bit patterns and the formats'
 * edges (ties, subnormals, saturation, NaN, -0) bit for bit against sn_dtype_round, the stored
 * codes against the formats' bit layouts, and every code loaded by kernels made by hand (no
 * pipeline program loads one: GEMMs read them); pow2_scale and amax bit for bit; the fp8 pass's scaled product (scales, casts,
 * products of f8e4m3 / f8e5m2 operands, unscaling) against the interpreter; and the clear
 * refusals of what the backend does not generate yet; and a small GPT-2's whole training program
 * after the fp8 pass (every linear layer's products) against the interpreter.
 * Convention: graphs run through the pipeline's kernels on a 2-thread CPU device, each program
 * checked to hold the kernel kind the test means to exercise; what no pipeline program holds
 * (a kernel loading 8-bit codes, other vector widths) is made by hand (codegen_util.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "interp/interp.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "codegen_util.h"
#include "fp8_model.h"
#include "fp8_ref.h"
#include "harness.h"

/* ---- a graph on the CPU device ---- */

typedef struct {
    sn_device *d;
    sn_program *p;
    sn_exec *x;
} run;

/* g's program on a new CPU device. The pipeline may rewrite g in place (sink_views): nodes held
 * before are gone, so a test finds its inputs by name and its outputs by index afterwards. */
static void run_new(run *r, sn_graph *g) {
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_cpu_device_new(2, &r->d, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &r->d->target}, &r->p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_msg(sn_exec_new(r->d, r->p, &r->x, &e) == SN_OK, "%s", e.msg);
}

static sn_node *input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    ck_abort_msg("no input %s", name);
}

static sn_node *output(const sn_graph *g, int i) {
    ck_assert_int_lt(i, g->n_outputs);
    return g->outputs[i];
}

static void run_free(run *r) {
    sn_exec_free(r->x);
    sn_program_free(r->p);
    sn_device_free(r->d);
}

static void set(run *r, const sn_node *n, const void *data) {
    sn_err e;
    ck_assert_msg(sn_exec_set(r->x, n, data, &e) == SN_OK, "%s", e.msg);
}

static void go(run *r) {
    sn_err e;
    ck_assert_msg(sn_exec_run(r->x, &e) == SN_OK, "%s", e.msg);
}

static void get(run *r, const sn_node *n, void *data) {
    sn_err e;
    ck_assert_msg(sn_exec_get(r->x, n, data, &e) == SN_OK, "%s", e.msg);
}

/* How many of the program's kernels are of kind `kind` and have a node of op `op` (any op: -1)
 * among their anchor and instructions, and an argument of dtype `arg` among their inputs
 * (any: SN_DTYPE_COUNT). */
static int kernels_with(const sn_program *p, sn_kernel_kind kind, int op, sn_dtype arg) {
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        bool has_op = op < 0 || (k->anchor && (int)k->anchor->op == op), has_arg = arg == SN_DTYPE_COUNT;
        for (int j = 0; j < k->n_instr; j++) has_op |= (int)k->instr[j].node->op == op;
        for (int j = k->n_out; j < k->n_out + k->n_in; j++) has_arg |= k->args[j]->dtype == arg;
        n += k->kind == kind && has_op && has_arg;
    }
    return n;
}

/* A check of one element of many: Check's ck_assert writes a checkpoint per call (millions of
 * them took most of the suite's time), so only a failure calls it. */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                    \
    } while (0)

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

static bool same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the formats from their bit layouts (as test_fp8.c reads them) ---- */

static const fp8_fmt *const FORMATS[2] = {&FP8_E4M3, &FP8_E5M2};

/* ---- the sample of f32 values ---- */

enum { RANDOM = 1000000 };

/* every bf16 bit pattern as an f32, RANDOM random bit patterns, then the edges: +-0, f32
 * subnormals, every finite code of both formats, the midpoints between adjacent codes (the ties)
 * and their f32 neighbours, the values around the largest finite ones (448, 464, 480, 57344,
 * 61440, ...), infinities and NaNs; *n of them (malloc'd) */
static float *sample(int64_t *n) {
    int64_t cap = 65536 + RANDOM + 8192, k = 0;
    float *x = malloc(sizeof(float) * (size_t)cap);
    ck_assert(x);
    for (uint32_t u = 0; u < 65536; u++) x[k++] = of_bits(u << 16);
    sn_rng r = sn_rng_seed(8);
    for (int i = 0; i < RANDOM; i++) x[k++] = of_bits((uint32_t)(sn_rng_next(&r) >> 32));
    const float edge[] = {0.0f, 0x1p-149f, 0x1p-140f, 0x1.fffffcp-127f, 0x1p-126f, 0x1p-20f,
                          448, 449, 463.99997f, 464, 464.00003f, 479, 480, 481, 500, 1e4f,
                          57344, 57345, 61439.996f, 61440, 61440.004f, 65536, 1e9f, FLT_MAX,
                          INFINITY, NAN};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) x[k++] = edge[i], x[k++] = -edge[i];
    for (int f = 0; f < 2; f++)
        for (int c = 0; c < 0x80; c++) { /* the codes, and their midpoints with the next code */
            double v = fp8_decode(FORMATS[f], c), w = fp8_decode(FORMATS[f], c + 1);
            if (!isfinite(v)) continue;
            float mid[4] = {(float)v, 0, 0, 0};
            int m = 1;
            if (isfinite(w)) { /* between the largest and saturation there is no next code */
                mid[1] = (float)((v + w) / 2); /* exact: the codes have 4 significant bits */
                mid[2] = nextafterf(mid[1], 0), mid[3] = nextafterf(mid[1], INFINITY), m = 4;
                ck_assert((double)mid[1] == (v + w) / 2);
            }
            for (int i = 0; i < m; i++) x[k++] = mid[i], x[k++] = -mid[i];
        }
    ck_assert(k <= cap);
    *n = k;
    return x;
}

/* ---- casts ---- */

/* x -> f8 (stored: q) -> f32 (r, the in-register cast of the same kernel), for both formats:
 * every stored code is the code of sn_dtype_round(x) (its value's bits, the sign of 0; the
 * format's NaN for a NaN) and every f32 result is sn_dtype_round(x) bit for bit. The sample
 * holds what a wrong rounding gets wrong (counted: ties whose even neighbour is the lower code,
 * which ties away from zero miss; subnormal results; saturation; NaNs); a planted bug of each
 * kind (ties away, truncation in the normal range, FP8_E5M2's bias 16) failed here. */
START_TEST(casts_round_as_the_interpreter) {
    int64_t n;
    float *x = sample(&n);
    for (int f = 0; f < 2; f++) {
        const fp8_fmt *F = FORMATS[f];
        sn_graph *g = sn_graph_new();
        sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(n));
        sn_node *q = sn_cast(g, in, F->t), *r = sn_cast(g, q, SN_F32);
        sn_graph_add_output(g, q);
        sn_graph_add_output(g, r);
        run R;
        run_new(&R, g);
        in = input(g, "x"), q = output(g, 0), r = output(g, 1);
        ck_assert_int_ge(kernels_with(R.p, SN_KER_POINTWISE, SN_OP_CAST, SN_DTYPE_COUNT), 1);
        set(&R, in, x);
        go(&R);
        uint8_t *codes = malloc((size_t)n);
        float *back = malloc(sizeof(float) * (size_t)n);
        ck_assert(codes && back);
        get(&R, q, codes);
        get(&R, r, back);
        int64_t ties_even = 0, subnormal = 0, saturated = 0, nans = 0;
        for (int64_t i = 0; i < n; i++) {
            double want = sn_dtype_round(F->t, x[i]);
            double got = fp8_decode(F, codes[i]);
            if (isnan(want)) {
                EXPECT(codes[i] == (F->nan_code | (signbit(x[i]) ? 0x80 : 0)),
                              "%s(%a [%08x]) stored 0x%02x, not the NaN code", sn_dtype_name(F->t),
                              (double)x[i], bits_of(x[i]), codes[i]);
                EXPECT(isnan(back[i]), "%s(%a) read back %a", sn_dtype_name(F->t), (double)x[i],
                              (double)back[i]);
                nans++;
                continue;
            }
            EXPECT(got == want && signbit(got) == signbit(want),
                          "%s(%a [%08x]) stored 0x%02x (%a), sn_dtype_round says %a",
                          sn_dtype_name(F->t), (double)x[i], bits_of(x[i]), codes[i], got, want);
            EXPECT(same_bits(back[i], (float)want), "%s(%a [%08x]) -> f32 %a, sn_dtype_round %a",
                          sn_dtype_name(F->t), (double)x[i], bits_of(x[i]), (double)back[i], want);
            /* what the sample holds: ties whose even code is the lower one (ties away from 0
               would differ), subnormal results, saturation */
            double lo = fp8_decode(F, codes[i] & 0x7f), up = fp8_decode(F, (codes[i] & 0x7f) + 1);
            if (fabs(x[i]) - lo == (up - lo) / 2 && isfinite(up) && !(codes[i] & 1)) ties_even++;
            if (want != 0 && fabs(want) < ldexp(1, 1 - F->bias)) subnormal++;
            if (fabs(x[i]) > sn_dtype_max(F->t)) saturated++;
        }
        ck_assert_msg(ties_even > 100 && subnormal > 100 && saturated > 1000 && nans > 100,
                      "%s: the sample holds %lld ties to an even lower code, %lld subnormal results, "
                      "%lld saturated, %lld NaNs", sn_dtype_name(F->t), (long long)ties_even,
                      (long long)subnormal, (long long)saturated, (long long)nans);
        free(codes);
        free(back);
        run_free(&R);
        sn_graph_free(g);
    }
    free(x);
}
END_TEST

/* 8-bit codes loaded by a pointwise kernel. The pipeline never makes one (sink_views moves a
 * view of an f8 cast under the cast, and fuse computes a cast where it is read, so f8 buffers
 * are read by GEMMs alone), so the kernels are made by hand as fuse makes them: every code of
 * both formats (the NaNs and FP8_E5M2's infinities too) in q (R, C), read contiguously into z =
 * f32(q), through a permute (a gather) into y = f32(q^T), and copied through the permute into
 * qt = q^T (f8 to f8), at the host's vector width, 8 and 4 lanes (a tail each row), over the
 * whole range and two uneven parts. */
START_TEST(codes_loaded) {
    enum { R = 9, C = 37 }; /* 333 cells: every code, rows no multiple of a vector */
    sn_jit *j = new_jit(LANES);
    for (int f = 0; f < 2; f++) {
        const fp8_fmt *F = FORMATS[f];
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, C));
        sn_node *q = sn_cast(g, x, F->t), *qt = sn_permute(g, q, (int[]){1, 0});
        sn_node *y = sn_cast(g, qt, SN_F32), *z = sn_cast(g, q, SN_F32);
        ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
        const int64_t rows[2] = {C, 1}, cols[2] = {1, C}; /* q's strides: as is, transposed */
        pwk ky, kz, kt;
        pw_init(&ky, y, 1, (const sn_node *[]){y});
        pw_op(&ky, y, 1, (sn_ref[]){pw_access(&ky, q, 0, cols, -1, 0, 0)});
        pw_store(&ky, 0, y);
        pw_init(&kz, z, 1, (const sn_node *[]){z});
        pw_op(&kz, z, 1, (sn_ref[]){pw_access(&kz, q, 0, rows, -1, 0, 0)});
        pw_store(&kz, 0, z);
        pw_init(&kt, qt, 1, (const sn_node *[]){qt});
        pw_op(&kt, qt, 1, (sn_ref[]){pw_access(&kt, q, 0, cols, -1, 0, 0)});
        pw_store(&kt, 0, qt);
        sn_kernel *ks[3] = {&ky.k, &kz.k, &kt.k};
        uint8_t codes[R * C], ct[R * C];
        float yv[R * C], zv[R * C];
        for (int i = 0; i < R * C; i++) codes[i] = (uint8_t)(i * 7 % 256); /* 7 is odd: all 256 */
        for (int k = 0; k < 3; k++) {
            sn_cpu_kernel_fn fn = compile_one(j, ks[k]);
            void *out = k == 0 ? (void *)yv : k == 1 ? (void *)zv : (void *)ct;
            int64_t n = R * C, cuts[3][3] = {{0, n, n}, {0, 5, n}, {0, n - 40, n}};
            for (int c = 0; c < 3; c++) {
                memset(out, 0xa5 + c, k == 2 ? sizeof ct : sizeof yv); /* a poison a run */
                void *bufs[2] = {out, codes};
                fn(bufs, cuts[c][0], cuts[c][1]);
                fn(bufs, cuts[c][1], cuts[c][2]);
                for (int r = 0; r < R; r++)
                    for (int col = 0; col < C; col++) {
                        uint8_t code = codes[r * C + col];
                        double want = fp8_decode(F, code);
                        if (k < 2) {
                            float got = k == 0 ? yv[col * R + r] : zv[r * C + col];
                            EXPECT(isnan(want) ? isnan(got) : same_bits(got, (float)want),
                                          "%s code 0x%02x loaded (%s, %d lanes) as %a", sn_dtype_name(F->t),
                                          code, k ? "contiguous" : "gathered", LANES, (double)got);
                            continue;
                        }
                        /* a copy stores what it loaded: a NaN as the format's NaN, an infinity
                           (no f8 value holds one: casts saturate) saturated */
                        uint8_t w = isnan(want) ? (uint8_t)(F->nan_code | (code & 0x80))
                                  : isinf(want) ? (uint8_t)((code & 0x80) | 0x7b) : code;
                        EXPECT(ct[col * R + r] == w, "%s code 0x%02x copied (%d lanes) as 0x%02x",
                                      sn_dtype_name(F->t), code, LANES, ct[col * R + r]);
                    }
            }
        }
        sn_graph_free(g);
    }
    sn_jit_free(j);
}
END_TEST

/* ---- the scales ---- */

/* pow2_scale of the sample (f32 subnormals, infinities, NaNs included) for bounds with and
 * without mantissa bits and at both ends of the clamp, and of its bf16 roundings (a bf16 value,
 * as the fp8 pass scales a bf16 operand): bit for bit sn_pow2_scale_of's, clamped results at
 * both ends among them. */
START_TEST(pow2_scale_exact) {
    static const float bounds[] = {448, 57344, 1, 0.7f, 3e38f, 1e-30f};
    enum { NB = sizeof bounds / sizeof *bounds };
    int64_t n;
    float *x = sample(&n);
    sn_graph *g = sn_graph_new();
    sn_node *in = sn_input(g, "x", SN_F32, SN_SHAPE(n)), *y[NB];
    for (int b = 0; b < NB; b++) sn_graph_add_output(g, y[b] = sn_pow2_scale(g, in, bounds[b]));
    sn_node *xb = sn_cast(g, in, SN_BF16), *yb = sn_pow2_scale(g, xb, 448);
    sn_graph_add_output(g, yb);
    run R;
    run_new(&R, g);
    in = input(g, "x"), yb = output(g, NB);
    for (int b = 0; b < NB; b++) y[b] = output(g, b);
    ck_assert_int_ge(kernels_with(R.p, SN_KER_POINTWISE, SN_OP_POW2_SCALE, SN_DTYPE_COUNT), 1);
    set(&R, in, x);
    go(&R);
    float *got = malloc(sizeof(float) * (size_t)n);
    uint16_t *gb = malloc(sizeof(uint16_t) * (size_t)n);
    ck_assert(got && gb);
    int64_t low = 0, high = 0, sub = 0;
    for (int b = 0; b < NB; b++) {
        get(&R, y[b], got);
        for (int64_t i = 0; i < n; i++) {
            float want = (float)sn_pow2_scale_of(x[i], bounds[b]);
            EXPECT(same_bits(got[i], want), "pow2_scale(%a [%08x], %a) = %a, sn_pow2_scale_of %a",
                          (double)x[i], bits_of(x[i]), (double)bounds[b], (double)got[i], (double)want);
            low += want == 0x1p-126f, high += want == 0x1p127f;
            sub += x[i] != 0 && fabsf(x[i]) < FLT_MIN;
        }
    }
    ck_assert_msg(low > 1000 && high > 1000 && sub > 1000, "the clamp's ends reached %lld and %lld "
                  "times, %lld subnormal inputs", (long long)low, (long long)high, (long long)sub);
    get(&R, yb, gb);
    for (int64_t i = 0; i < n; i++) {
        float want = (float)sn_pow2_scale_of(sn_dtype_round(SN_BF16, x[i]), 448);
        EXPECT(gb[i] == bits_of(want) >> 16, "pow2_scale(bf16(%a), 448) = bf16 %04x, want %a",
                      (double)x[i], gb[i], (double)want);
    }
    free(got);
    free(gb);
    free(x);
    run_free(&R);
    sn_graph_free(g);
}
END_TEST

/* amax over each axis of x (R, C) (a row kernel's contiguous rows, and the strided walk of
 * adjacent outputs), of x's bf16 rounding, and the fp8 pass's scale of it,
 * pow2_scale(amax(amax(.., 1), 0)): the interpreter's bit for bit. x holds negatives, an
 * infinity, a NaN (its row's and column's amax NaN), a row of -0 (amax +0) and subnormals. */
START_TEST(amax_exact) {
    enum { R = 37, C = 53 };
    float xv[R * C];
    sn_rng r = sn_rng_seed(11);
    for (int i = 0; i < R * C; i++) xv[i] = (float)(sn_rng_normal(&r) * 10);
    for (int j = 0; j < C; j++) xv[9 * C + j] = -0.0f, xv[11 * C + j] = (float)(sn_rng_normal(&r) * 1e-40);
    xv[5 * C + 7] = NAN;
    xv[20 * C + 30] = -INFINITY;
    xv[21 * C + 31] = -1e6f; /* the largest finite magnitude, negative */
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, C)), *xb = sn_cast(g, x, SN_BF16);
    sn_node *out[5] = {sn_amax(g, x, 1, false), sn_amax(g, x, 0, false), sn_amax(g, xb, 1, true),
                       sn_amax(g, xb, 0, false), NULL};
    /* rows 21.. (-1e6 the largest magnitude: the scale 2^-12), as the pass reads a bf16 operand */
    sn_node *a = sn_reshape(g, sn_cast(g, sn_slice(g, x, 0, 21, R), SN_BF16), SN_SHAPE(8, 2 * C));
    out[4] = sn_pow2_scale(g, sn_cast(g, sn_amax(g, sn_amax(g, a, 1, false), 0, false), SN_F32), 448);
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, out[i]);
    run R_;
    run_new(&R_, g);
    x = input(g, "x");
    for (int i = 0; i < 5; i++) out[i] = output(g, i);
    ck_assert_int_ge(kernels_with(R_.p, SN_KER_REDUCE, SN_OP_AMAX, SN_DTYPE_COUNT), 5);
    set(&R_, x, xv);
    go(&R_);
    sn_interp *it = sn_interp_new(g, false);
    sn_err e;
    ck_assert(sn_interp_set(it, x, xv, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    int nans = 0;
    for (int o = 0; o < 5; o++) {
        int64_t n = sn_numel(out[o]);
        float got[R * C];
        uint16_t gb[R * C];
        const double *want = sn_interp_value(it, out[o]);
        if (out[o]->dtype == SN_BF16) {
            get(&R_, out[o], gb);
            for (int64_t i = 0; i < n; i++) got[i] = of_bits((uint32_t)gb[i] << 16);
        } else {
            get(&R_, out[o], got);
        }
        for (int64_t i = 0; i < n; i++) {
            bool ok = isnan(want[i]) ? isnan(got[i]) : same_bits(got[i], (float)want[i]);
            EXPECT(ok, "output %d element %lld: %a, the interpreter's %a", o, (long long)i,
                          (double)got[i], want[i]);
            nans += isnan(got[i]);
        }
    }
    ck_assert_int_eq(nans, 4); /* row 5 and column 7, f32 and bf16 */
    ck_assert(sn_interp_value(it, out[4])[0] == 0x1p-12);
    sn_interp_free(it);
    run_free(&R_);
    sn_graph_free(g);
}
END_TEST

/* The reduce and pointwise kernels made by hand (codegen_util.h) at the host's vector width, 8
 * and 4 lanes, run whole and in uneven parts: amax over every axis of three shapes (contiguous
 * rows, strided walks, masked tails), and pow2_scale of values over 2^-140 .. 2^100, exact. */
START_TEST(scales_at_every_width) {
    static const sn_shape shapes[] = {SN_SHAPE(4, 5, 37), SN_SHAPE(40, 3), SN_SHAPE(70)};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        tcase t;
        tc_init(&t, LANES);
        sn_node *x = in_f32(&t, "x", shapes[s], -3, 3);
        float *xv = t.host[x->id];
        for (int64_t i = 0; i < sn_numel(x); i++) xv[i] = ldexpf(xv[i], (int)(i * 37 % 241) - 140);
        sn_node *ys[SN_MAX_RANK], *sc = sn_pow2_scale(t.g, x, 448);
        for (int axis = 0; axis < shapes[s].rank; axis++) ys[axis] = sn_amax(t.g, x, axis, axis % 2);
        tc_run(&t);
        for (int axis = 0; axis < shapes[s].rank; axis++) check_node(&t, SN_KER_REDUCE, ys[axis], 0);
        pwk p;
        pw_of(&p, sc);
        check_kernel(&t, &p.k, 0);
        tc_free(&t);
    }
}
END_TEST

/* ---- the fp8 pass's products ---- */

/* x's per-tensor scale as the fp8 pass makes it: pow2_scale(amax(amax(x as (rows, cols), 1),
 * 0), bound), an f32 scalar, x bf16 */
static sn_node *scale_of(sn_graph *g, sn_node *x, float bound) {
    int64_t cols = x->shape[x->rank - 1];
    sn_node *m = sn_reshape(g, x, SN_SHAPE(sn_numel(x) / cols, cols));
    return sn_pow2_scale(g, sn_cast(g, sn_amax(g, sn_amax(g, m, 1, false), 0, false), SN_F32), bound);
}

typedef struct {
    bool ta, tb;
    sn_dtype fa, fb;
    int batch;         /* a's batch (0: a of rank 2) */
    bool b_shared;     /* b of rank 2 under a batched a */
    bool permute_b;    /* b stored (K, N) and made K-major by a permute before its cast (tb) */
    bool integers;     /* small integers: every partial sum exact, the result bit for bit */
} product_case;

static const product_case PRODUCTS[] = {
    {false, true, SN_F8E4M3, SN_F8E5M2, 0, false, false, false},
    {false, true, SN_F8E4M3, SN_F8E5M2, 0, false, false, true},
    {false, false, SN_F8E4M3, SN_F8E4M3, 0, false, false, false},
    {false, false, SN_F8E4M3, SN_F8E4M3, 0, false, false, true},
    {true, false, SN_F8E5M2, SN_F8E4M3, 0, false, false, false},
    {true, true, SN_F8E5M2, SN_F8E5M2, 0, false, false, true},
    {false, true, SN_F8E4M3, SN_F8E4M3, 2, false, true, true},
    {false, true, SN_F8E4M3, SN_F8E5M2, 3, true, false, false},
    {false, false, SN_F8E5M2, SN_F8E4M3, 2, false, false, false},
};

static float bound_of(sn_dtype t) { return (float)sn_dtype_max(t); }

/* y = (a8 @ b8) / sa / sb, a8 = f8(f32(a) sa), b8 = f8(f32(b) sb), a and b bf16 (of f32 inputs),
 * on the CPU device against the interpreter. Random operands (a of magnitude 3e-3, b 40: scales
 * far from 1) agree within 1e-5 of the largest |y| (the f32 sums' order differs from the
 * interpreter's one rounding of an exact sum: K 2^-24 relative at worst, as
 * test_compiled.c's sixteen_bit_ops_round allows the CPU's f32 arithmetic); small integers
 * (|a|, |b| <= 8: exact in both formats after their scales 32 / 4096, so every partial sum is an
 * integer times 2^17 below 2^24 of them) bit for bit. Each product one GEMM of 8-bit operands;
 * 70 x 80 x 64 is above the CPU's tiny-product size, so the pool's two parts split it. */
START_TEST(scaled_product) {
    const product_case *c = &PRODUCTS[_i];
    enum { M = 70, K = 80, N = 64 };
    int64_t Bt = c->batch ? c->batch : 1;
    sn_graph *g = sn_graph_new();
    sn_shape as = c->ta ? SN_SHAPE(K, M) : SN_SHAPE(M, K);
    sn_shape bs = c->tb && !c->permute_b ? SN_SHAPE(N, K) : SN_SHAPE(K, N);
    if (c->batch) {
        as = c->ta ? SN_SHAPE(Bt, K, M) : SN_SHAPE(Bt, M, K);
        if (!c->b_shared) bs = c->tb && !c->permute_b ? SN_SHAPE(Bt, N, K) : SN_SHAPE(Bt, K, N);
    }
    sn_node *ain = sn_input(g, "a", SN_F32, as), *bin = sn_input(g, "b", SN_F32, bs);
    sn_node *a = sn_cast(g, ain, SN_BF16), *b = sn_cast(g, bin, SN_BF16);
    sn_node *sa = scale_of(g, a, bound_of(c->fa)), *sb = scale_of(g, b, bound_of(c->fb));
    sn_node *a8 = sn_cast(g, sn_mul(g, sn_cast(g, a, SN_F32), sa), c->fa);
    sn_node *bsc = sn_mul(g, sn_cast(g, b, SN_F32), sb);
    if (c->permute_b) bsc = sn_permute(g, bsc, b->rank == 3 ? (int[]){0, 2, 1} : (int[]){1, 0});
    sn_node *b8 = sn_cast(g, bsc, c->fb);
    sn_node *mm = sn_matmul_t(g, a8, b8, c->ta, c->tb);
    sn_node *y = sn_div(g, sn_div(g, mm, sa), sb);
    sn_graph_add_output(g, y);
    sn_graph_add_output(g, sa);
    run R;
    run_new(&R, g);
    ain = input(g, "a"), bin = input(g, "b"), y = output(g, 0), sa = output(g, 1);
    /* one GEMM, reading both 8-bit operands */
    ck_assert_int_eq(kernels_with(R.p, SN_KER_GEMM, SN_OP_MATMUL, SN_DTYPE_COUNT), 1);
    ck_assert_int_eq(kernels_with(R.p, SN_KER_GEMM, SN_OP_MATMUL, c->fa), 1);
    ck_assert_int_eq(kernels_with(R.p, SN_KER_GEMM, SN_OP_MATMUL, c->fb), 1);

    int64_t na = sn_numel(ain), nb = sn_numel(bin), ny = sn_numel(y);
    float *av = malloc(sizeof(float) * (size_t)na), *bv = malloc(sizeof(float) * (size_t)nb);
    float *got = malloc(sizeof(float) * (size_t)ny);
    double *gd = malloc(sizeof(double) * (size_t)ny);
    ck_assert(av && bv && got && gd);
    sn_rng r = sn_rng_seed(20 + (uint64_t)_i);
    for (int64_t i = 0; i < na; i++)
        av[i] = c->integers ? (float)((int)sn_rng_below(&r, 17) - 8) : (float)(sn_rng_normal(&r) * 3e-3);
    for (int64_t i = 0; i < nb; i++)
        bv[i] = c->integers ? (float)((int)sn_rng_below(&r, 17) - 8) : (float)(sn_rng_normal(&r) * 40);
    set(&R, ain, av);
    set(&R, bin, bv);
    go(&R);
    get(&R, y, got);
    sn_interp *it = sn_interp_new(g, false);
    sn_err e;
    ck_assert(sn_interp_set(it, ain, av, &e) == SN_OK && sn_interp_set(it, bin, bv, &e) == SN_OK);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    const double *want = sn_interp_value(it, y);
    char what[128];
    snprintf(what, sizeof what, "case %d: %s x %s, ta %d tb %d, batch %d%s", _i, sn_dtype_name(c->fa),
             sn_dtype_name(c->fb), c->ta, c->tb, c->batch, c->permute_b ? ", b permuted" : "");
    if (c->integers) {
        ck_assert(sn_interp_value(it, sa)[0] == (c->fa == SN_F8E4M3 ? 32 : 4096));
        for (int64_t i = 0; i < ny; i++)
            EXPECT(same_bits(got[i], (float)want[i]), "%s: y[%lld] = %a, the interpreter's %a", what,
                   (long long)i, (double)got[i], want[i]);
    } else {
        for (int64_t i = 0; i < ny; i++) gd[i] = got[i];
        sn_check_close(what, gd, want, (size_t)ny, 1e-5, 0);
    }
    double top = 0;
    for (int64_t i = 0; i < ny; i++) top = fmax(top, fabs(want[i]));
    ck_assert_msg(top > (c->integers ? 100 : 0.1), "%s: the largest |y| %g: a product of zeros", what, top);
    sn_interp_free(it);
    free(av);
    free(bv);
    free(got);
    free(gd);
    run_free(&R);
    sn_graph_free(g);
}
END_TEST

/* A product with a bias (fuse's BIAS epilogue: the CPU GEMM adds it to the f32 product as
 * it does for f32 operands), small integers: the interpreter's bit for bit. */
START_TEST(product_with_bias) {
    enum { M = 24, K = 32, N = 40 };
    sn_graph *g = sn_graph_new();
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(M, K)), *b = sn_input(g, "b", SN_F32, SN_SHAPE(N, K));
    sn_node *bias = sn_input(g, "bias", SN_F32, SN_SHAPE(N));
    sn_node *mm = sn_matmul_t(g, sn_cast(g, a, SN_F8E4M3), sn_cast(g, b, SN_F8E5M2), false, true);
    sn_graph_add_output(g, sn_add(g, mm, bias));
    run R;
    run_new(&R, g);
    int with_bias = 0;
    for (int i = 0; i < R.p->n_kernels; i++)
        with_bias += R.p->kernels[i]->kind == SN_KER_GEMM && R.p->kernels[i]->gemm.epilogue == SN_EPI_BIAS;
    ck_assert_int_eq(with_bias, 1);
    float av[M * K], bv[N * K], cv[N], got[M * N];
    sn_rng r = sn_rng_seed(5);
    for (int i = 0; i < M * K; i++) av[i] = (float)((int)sn_rng_below(&r, 17) - 8);
    for (int i = 0; i < N * K; i++) bv[i] = (float)((int)sn_rng_below(&r, 17) - 8);
    for (int i = 0; i < N; i++) cv[i] = (float)i - 20.5f;
    const char *names[3] = {"a", "b", "bias"};
    const float *vals[3] = {av, bv, cv};
    sn_interp *it = sn_interp_new(g, false);
    sn_err e;
    for (int i = 0; i < 3; i++) {
        set(&R, input(g, names[i]), vals[i]);
        ck_assert(sn_interp_set(it, input(g, names[i]), vals[i], &e) == SN_OK);
    }
    go(&R);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    get(&R, output(g, 0), got);
    const double *want = sn_interp_value(it, output(g, 0));
    for (int i = 0; i < M * N; i++)
        EXPECT(same_bits(got[i], (float)want[i]), "y[%d] = %a, the interpreter's %a", i, (double)got[i], want[i]);
    sn_interp_free(it);
    run_free(&R);
    sn_graph_free(g);
}
END_TEST

/* ---- what the backend refuses, and says so ---- */

/* An 8-bit value cast back inside a row kernel's prologue (fuse puts softmax(f32(f8(x))) in one
 * row kernel) is refused when the program is compiled, naming the dtype, the kernel kind and
 * "not supported yet"; a GEMM of 8-bit operands with a GELU_BIAS epilogue is refused when it runs. */
START_TEST(refusals_say_not_supported_yet) {
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    for (int k = 0; k < 2; k++) {
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(6, 16)), *w = sn_input(g, "w", SN_F32, SN_SHAPE(16, 8));
        sn_node *y = k == 0 ? sn_softmax(g, sn_cast(g, sn_cast(g, x, SN_F8E4M3), SN_F32))
                            : sn_gelu(g, sn_matmul(g, sn_cast(g, x, SN_F8E4M3), sn_cast(g, w, SN_F8E4M3)));
        sn_graph_add_output(g, y);
        sn_program *p;
        sn_exec *ex = NULL;
        ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &d->target}, &p, NULL, &e) == SN_OK,
                      "%s", e.msg);
        sn_status st = sn_exec_new(d, p, &ex, &e);
        if (k == 0) {
            ck_assert_int_eq(kernels_with(p, SN_KER_ROW, SN_OP_CAST, SN_DTYPE_COUNT), 1);
            ck_assert_int_eq(st, SN_ERR_UNSUPPORTED);
            ck_assert_has(e.msg, "not supported yet");
            ck_assert_has(e.msg, "f8e4m3");
            ck_assert_has(e.msg, "row kernel");
        } else { /* fuse keeps the GELU out of an 8-bit product: the GEMM kernel given one by hand */
            ck_assert_msg(st == SN_OK, "%s", e.msg);
            const sn_kernel *mm = NULL;
            for (int i = 0; i < p->n_kernels; i++)
                if (p->kernels[i]->kind == SN_KER_GEMM) mm = p->kernels[i];
            ck_assert(mm && mm->gemm.epilogue == SN_EPI_NONE);
            sn_kernel hand = *mm;
            hand.gemm.epilogue = SN_EPI_GELU_BIAS;
            float y[6 * 8];
            uint8_t a[6 * 16] = {0}, b[16 * 8] = {0};
            void *bufs[3] = {y, a, b};
            ck_assert_int_eq(d->gemm(d, &hand, bufs, &e), SN_ERR_UNSUPPORTED);
            ck_assert_has(e.msg, "8-bit operands (f8e4m3 x f8e4m3)");
            ck_assert_has(e.msg, "not supported yet");
            ck_assert_int_eq(d->gemm(d, mm, bufs, &e), SN_OK); /* the plain one runs */
            ck_assert(y[0] == 0 && y[6 * 8 - 1] == 0);
        }
        sn_exec_free(ex);
        sn_program_free(p);
        sn_graph_free(g);
    }
    sn_device_free(d);
}
END_TEST

/* The fp8 pass's training program for the small GPT-2 (fp8_model.h), every linear layer's
 * products 8-bit, on the CPU device against the interpreter with the same weights and batch:
 * the loss and every gradient. Not to the bit: the GEMMs add in another order, and a sum that
 * lands on the other side of a rounding boundary of the next 8-bit cast moves by an e4m3 or
 * e5m2 step (2^-4, 2^-3 of it). Measured worst 2.2e-4 (c_fc's bias; 2026-11-30): 2e-3. */
START_TEST(training_program_as_the_interpreter) {
    sn_pipeline_stats st;
    sn_graph *g = fp8_small_graph(SN_FP8_LINEAR, &st);
    ck_assert_int_eq(st.fp8_products, 3 * (4 * FP8_SMALL.n_layer + 1));
    run r;
    run_new(&r, g);
    ck_assert_int_eq(kernels_with(r.p, SN_KER_GEMM, SN_OP_MATMUL, SN_F8E5M2), 2 * (4 * FP8_SMALL.n_layer + 1));
    int row8 = 0; /* the classifier writes dlogits' e5m2 copy itself (its scale a bound: fp8.c) */
    for (int i = 0; i < r.p->n_kernels; i++)
        for (int o = 0; o < r.p->kernels[i]->n_out; o++)
            row8 += r.p->kernels[i]->kind == SN_KER_ROW && r.p->kernels[i]->args[o]->dtype == SN_F8E5M2;
    ck_assert_int_eq(row8, 1);
    sn_interp *it = sn_interp_new(g, false);
    fp8_small_set(it, r.x, g, 11);
    sn_err e;
    go(&r);
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    float loss;
    get(&r, g->loss, &loss);
    double l = loss;
    sn_check_close("loss", &l, sn_interp_value(it, g->loss), 1, 1e-4, 0);
    int checked = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *p = g->nodes[i];
        if (p->op != SN_OP_PARAM || !p->grad) continue;
        int64_t n = sn_numel(p);
        float *gf = malloc(sizeof(float) * (size_t)n);
        double *gd = malloc(sizeof(double) * (size_t)n);
        get(&r, p->grad, gf);
        for (int64_t k = 0; k < n; k++) gd[k] = gf[k];
        char what[96];
        snprintf(what, sizeof what, "d loss / d %s", p->name);
        sn_check_close(what, gd, sn_interp_value(it, p->grad), (size_t)n, 2e-3, 1e-6);
        checked++;
        free(gf);
        free(gd);
    }
    ck_assert_int_gt(checked, 10);
    sn_interp_free(it);
    run_free(&r);
    sn_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fp8_cpu");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, casts_round_as_the_interpreter);
    tcase_add_loop_test(tc, codes_loaded, 0, 3);
    tcase_add_test(tc, pow2_scale_exact);
    tcase_add_test(tc, amax_exact);
    tcase_add_loop_test(tc, scales_at_every_width, 0, 3);
    tcase_add_loop_test(tc, scaled_product, 0, sizeof PRODUCTS / sizeof *PRODUCTS);
    tcase_add_test(tc, product_with_bias);
    tcase_add_test(tc, refusals_say_not_supported_yet);
    tcase_add_test(tc, training_program_as_the_interpreter);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
