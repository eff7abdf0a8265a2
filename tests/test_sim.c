/* test_sim.c: the SIMT simulator (sim/sim.h): CUDA C kernels with barriers, shared memory, warp
 * shuffles and tensor-core fragments run on CPU fibers against plain references, and planted
 * bugs (a deleted barrier, an out-of-bounds shared index, a divergent barrier, a wrong mma
 * fragment register) each detected. Each kernel text is compiled once and launched many times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "support/rng.h"
#include "harness.h"

/* Loads src; NULL (after saying so) when the machine has no g++. */
static sn_sim_module *load(const char *src) {
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load(src, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_sim: %s: skipping\n", e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return m;
}


/* ---- a row softmax: shuffles, then shared memory across warps, then shuffles again ---- */

/* BARRIER(n) is __syncthreads() unless the test deletes barrier n. */
static const char softmax_src[] =
    "#include \"sinter_prelude.h\"\n"
    "#ifndef DELETED\n"
    "#define DELETED 0\n"
    "#endif\n"
    "#define BARRIER(n) if (DELETED != n) __syncthreads()\n"
    "SN_DEVICE float warp_max(float v) {\n"
    "    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "    return v;\n"
    "}\n"
    "SN_DEVICE float warp_sum(float v) {\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n"
    "    return __shfl_sync(0xffffffffu, v, 0);\n"
    "}\n"
    "/* y = softmax(x) along rows of `cols`: one block of whole warps per row */\n"
    "extern \"C\" __global__ void __launch_bounds__(1024)\n"
    "softmax(float *__restrict__ out, const float *__restrict__ in, int cols) {\n"
    "    SN_SHARED(float, partial, 32);\n"
    "    const float *x = in + (long long)blockIdx.x * cols;\n"
    "    float *y = out + (long long)blockIdx.x * cols;\n"
    "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;\n"
    "    float m = -SN_INF;\n"
    "    for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, x[i]);\n"
    "    m = warp_max(m);\n"
    "    if (lane == 0) partial[warp] = m;\n"
    "    BARRIER(1);\n"
    "    m = warp_max(lane < warps ? partial[lane] : -SN_INF);\n"
    "    BARRIER(2); /* every warp has read the maxima before they are overwritten */\n"
    "    float s = 0.0f;\n"
    "    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += expf(x[i] - m);\n"
    "    s = warp_sum(s);\n"
    "    if (lane == 0) partial[warp] = s;\n"
    "    BARRIER(3);\n"
    "    s = warp_sum(lane < warps ? partial[lane] : 0.0f);\n"
    "    for (int i = threadIdx.x; i < cols; i += blockDim.x) y[i] = expf(x[i] - m) / s;\n"
    "}\n"
    "SN_HOST_STUB(softmax)\n";

enum { ROWS = 5, COLS = 300 };

static void softmax_reference(const float *x, double *y) {
    for (int r = 0; r < ROWS; r++) {
        double m = -INFINITY, s = 0;
        for (int c = 0; c < COLS; c++) m = fmax(m, x[r * COLS + c]);
        for (int c = 0; c < COLS; c++) s += exp(x[r * COLS + c] - m);
        for (int c = 0; c < COLS; c++) y[r * COLS + c] = exp(x[r * COLS + c] - m) / s;
    }
}

/* The softmax text with barrier `deleted` (0: none) removed. */
static char *softmax_text(int deleted) {
    char *s = malloc(sizeof softmax_src + 64);
    snprintf(s, sizeof softmax_src + 64, "#define DELETED %d\n%s", deleted, softmax_src);
    return s;
}

/* Runs the softmax in every order and block size; the largest error against the reference
 * over all of them (NaN if any output was NaN), or -1 if a launch failed (message in e). */
static double softmax_error(sn_sim_module *m, sn_err *e) {
    float x[ROWS * COLS], y[ROWS * COLS];
    double want[ROWS * COLS], worst = 0;
    sn_rng r = sn_rng_seed(5);
    for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)(3 * sn_rng_normal(&r) - 8); /* max < the sums */
    softmax_reference(x, want);
    float *out = y, *in = x;
    int cols = COLS;
    void *params[] = {&out, &in, &cols};
    const unsigned blocks[] = {32, 128, 96, 1024};
    for (int b = 0; b < 4; b++)
        for (int order = 0; order < SN_SIM_ORDER_COUNT; order++) {
            sn_sim_opts o = sn_sim_defaults();
            o.order = (sn_sim_order)order;
            o.seed = 7 + (uint64_t)b;
            unsigned grid[3] = {ROWS, 1, 1}, block[3] = {blocks[b], 1, 1};
            memset(y, 0xff, sizeof y);
            if (sn_sim_launch(m, "softmax", grid, block, 0, params, &o, e) != SN_OK) return -1;
            for (int i = 0; i < ROWS * COLS; i++) {
                double err = fabs(y[i] - want[i]);
                if (!(err <= worst)) worst = err; /* NaN sticks */
                if (isnan(worst)) return worst;
            }
        }
    return worst;
}

START_TEST(softmax_matches_reference) {
    char *src = softmax_text(0);
    sn_sim_module *m = load(src);
    free(src);
    if (!m) return;
    sn_err e;
    double err = softmax_error(m, &e);
    ck_assert_msg(err >= 0, "%s", e.msg);
    ck_assert_msg(err <= 1e-6, "softmax: largest error %g", err);
    printf("test_sim: row softmax (shuffles, shared memory, barriers) in 3 orders x 4 block sizes: "
           "largest error %.2g\n", err);
    sn_sim_module_free(m);
}
END_TEST

/* Each barrier deleted in turn: the result must go wrong in some order, or the launch fail. */
START_TEST(softmax_deleted_barrier_caught) {
    for (int deleted = 1; deleted <= 3; deleted++) {
        char *src = softmax_text(deleted);
        sn_sim_module *m = load(src);
        free(src);
        if (!m) return;
        sn_err e;
        double err = softmax_error(m, &e);
        printf("test_sim: softmax without barrier %d: %s %g\n", deleted,
               err < 0 ? e.msg : "largest error", err);
        ck_assert_msg(err < 0 || !(err <= 1e-6), "a deleted __syncthreads (barrier %d) went "
                      "unnoticed: largest error %g", deleted, err);
        sn_sim_module_free(m);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, softmax_matches_reference);
    tcase_add_test(tc, softmax_deleted_barrier_caught);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
