/* test_sim.c: the SIMT simulator (sim/sim.h): CUDA C kernels with barriers, shared memory, warp
 * shuffles and tensor-core fragments run on CPU fibers against plain references, and planted
 * bugs (a deleted barrier, an out-of-bounds shared index, a divergent barrier, a wrong mma
 * fragment register) each detected. Each kernel text is compiled once and launched many times. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
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

/* ---- tensor cores: mma.sync and ldmatrix against a plain matrix product ---- */

/* D (16x8 f32) = A (16xK, row-major, 16-bit) B (Kx8, row-major, 16-bit) + C, one warp. The
 * fragments are built from the PTX ISA's per-element formulas (element i of a lane's A fragment:
 * row groupID (+8 for i in 2,3,6,7), column 2 threadID_in_group + i % 2 (+8 for i >= 4)), or with
 * ldmatrix from shared memory (A: x4 or x2; B: x2 or x1 transposed). SWAP plants a bug: two
 * registers of A exchanged. shape 0: m16n8k16 bf16, 1: m16n8k16 f16, 2: m16n8k8 f16. */
static const char mma_src[] =
    "#include \"sinter_prelude.h\"\n"
    "#ifndef SWAP\n"
    "#define SWAP 0\n"
    "#endif\n"
    "extern \"C\" __global__ void mma_test(float *d, const unsigned short *a,\n"
    "                                     const unsigned short *b, const float *c, int shape,\n"
    "                                     int via_ldmatrix) {\n"
    "    SN_SHARED(unsigned short, sa, 16 * 16);\n"
    "    SN_SHARED(unsigned short, sb, 16 * 8);\n"
    "    const int lane = threadIdx.x, group = lane >> 2, tig = lane & 3;\n"
    "    const int K = shape == 2 ? 8 : 16, na = shape == 2 ? 2 : 4, nb = shape == 2 ? 1 : 2;\n"
    "    unsigned ra[4] = {0, 0, 0, 0}, rb[2] = {0, 0};\n"
    "    float rc[4], rd[4];\n"
    "    if (via_ldmatrix) {\n"
    "        for (int i = lane; i < 16 * K; i += 32) sa[i] = a[i];\n"
    "        for (int i = lane; i < K * 8; i += 32) sb[i] = b[i];\n"
    "        __syncwarp();\n"
    "        /* A: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) */\n"
    "        const unsigned short *arow = &sa[(lane % 16) * K + (lane / 16) * 8 % K];\n"
    "        const unsigned short *brow = &sb[(lane % K) * 8];\n"
    "        if (shape == 2) {\n"
    "            sn_ldmatrix_x2(ra, arow);\n"
    "            sn_ldmatrix_x1_trans(rb, brow);\n"
    "        } else {\n"
    "            sn_ldmatrix_x4(ra, arow);\n"
    "            sn_ldmatrix_x2_trans(rb, brow);\n"
    "        }\n"
    "    } else {\n"
    "        for (int i = 0; i < 2 * na; i++) { /* element i of this lane's A fragment */\n"
    "            int row = group + ((i % 4) / 2) * 8, col = 2 * tig + i % 2 + (i / 4) * 8;\n"
    "            ra[i / 2] |= (unsigned)a[row * K + col] << (16 * (i % 2));\n"
    "        }\n"
    "        for (int i = 0; i < 2 * nb; i++) { /* element i of B's: row 2 tig + i % 2 (+8) */\n"
    "            int row = 2 * tig + i % 2 + (i / 2) * 8, col = group;\n"
    "            rb[i / 2] |= (unsigned)b[row * 8 + col] << (16 * (i % 2));\n"
    "        }\n"
    "    }\n"
    "    if (SWAP) { unsigned t = ra[0]; ra[0] = ra[na - 1]; ra[na - 1] = t; }\n"
    "    for (int i = 0; i < 4; i++) rc[i] = c[(group + (i / 2) * 8) * 8 + 2 * tig + i % 2];\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800 /* sm_75: only m16n8k8 f16 */\n"
    "    sn_mma_f16_1688(rd, ra, rb, rc);\n"
    "#else\n"
    "    if (shape == 0) sn_mma_bf16_16816(rd, ra, rb, rc);\n"
    "    else if (shape == 1) sn_mma_f16_16816(rd, ra, rb, rc);\n"
    "    else sn_mma_f16_1688(rd, ra, rb, rc);\n"
    "#endif\n"
    "    for (int i = 0; i < 4; i++) d[(group + (i / 2) * 8) * 8 + 2 * tig + i % 2] = rd[i];\n"
    "}\n"
    "SN_HOST_STUB(mma_test)\n";

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* f16 bits of a value that is exactly a multiple of 2^-10 in [-4, 4) (normal or zero). */
static uint16_t to_f16_exact(double v) {
    if (v == 0) return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    int ex;
    double m = frexp(fabs(v), &ex); /* v = m 2^ex, m in [0.5, 1) */
    return (uint16_t)(sign | (uint16_t)((ex - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}

/* The largest relative error of the simulated mma (shape, path) against a double product. */
static double mma_error(sn_sim_module *m, int shape, int via_ldmatrix, uint64_t seed) {
    const int K = shape == 2 ? 8 : 16;
    uint16_t a[16 * 16], b[16 * 8];
    double A[16 * 16], B[16 * 8];
    float c[16 * 8], d[16 * 8];
    sn_rng r = sn_rng_seed(seed);
    for (int i = 0; i < 16 * K + K * 8; i++) {
        double v = (double)((int)sn_rng_below(&r, 4096) - 2048) / 1024.0; /* exact in f16 */
        uint16_t bits = shape == 0 ? to_bf16((float)v) : to_f16_exact(v);
        double exact = shape == 0 ? from_bf16(bits) : v;
        if (i < 16 * K) a[i] = bits, A[i] = exact;
        else b[i - 16 * K] = bits, B[i - 16 * K] = exact;
    }
    for (int i = 0; i < 16 * 8; i++) c[i] = (float)sn_rng_normal(&r);
    float *pd = d, *pc = c;
    uint16_t *pa = a, *pb = b;
    void *params[] = {&pd, &pa, &pb, &pc, &shape, &via_ldmatrix};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    sn_err e;
    ck_assert_msg(sn_sim_launch(m, "mma_test", grid, block, 0, params, NULL, &e) == SN_OK, "%s",
                  e.msg);
    double worst = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double want = c[i * 8 + j], scale = fabs(c[i * 8 + j]);
            for (int k = 0; k < K; k++) {
                want += A[i * K + k] * B[k * 8 + j];
                scale += fabs(A[i * K + k] * B[k * 8 + j]);
            }
            double err = fabs(d[i * 8 + j] - want) / (scale + 1e-30);
            if (!(err <= worst)) worst = err;
        }
    return worst;
}

static const char *shape_name[] = {"m16n8k16 bf16", "m16n8k16 f16", "m16n8k8 f16"};

START_TEST(mma_matches_product) {
    sn_sim_module *m = load(mma_src);
    if (!m) return;
    for (int shape = 0; shape < 3; shape++)
        for (int via = 0; via < 2; via++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                double err = mma_error(m, shape, via, seed);
                ck_assert_msg(err <= 1e-6, "mma %s (%s): relative error %g", shape_name[shape],
                              via ? "ldmatrix" : "fragments by formula", err);
            }
    sn_sim_module_free(m);
}
END_TEST

/* A planted bug: A's first and last registers exchanged; every form must give a wrong product. */
START_TEST(mma_wrong_fragment_caught) {
    char src[sizeof mma_src + 32];
    snprintf(src, sizeof src, "#define SWAP 1\n%s", mma_src);
    sn_sim_module *m = load(src);
    if (!m) return;
    for (int shape = 0; shape < 3; shape++)
        for (int via = 0; via < 2; via++) {
            double err = mma_error(m, shape, via, 11);
            printf("test_sim: mma %s (%s) with A's registers swapped: relative error %.3g\n",
                   shape_name[shape], via ? "ldmatrix" : "by formula", err);
            ck_assert_msg(!(err <= 1e-3), "a swapped fragment register went unnoticed (%s)",
                          shape_name[shape]);
        }
    sn_sim_module_free(m);
}
END_TEST

/* The prelude's tensor-core functions compile with NVRTC: bf16 and f16 m16n8k16 for sm_80 and
 * sm_90, f16 m16n8k8 and ldmatrix for sm_75. */
START_TEST(mma_compiles_with_nvrtc) {
    const int arch[] = {75, 80, 90};
    for (int i = 0; i < 3; i++) {
        const char *src = mma_src;
        sn_cuda_module cm;
        sn_err e;
        sn_status st = sn_nvrtc_compile(src, "mma_test.cu", arch[i], &cm, &e);
        if (st == SN_ERR_UNSUPPORTED) {
            printf("test_sim: %s: skipping NVRTC\n", e.msg);
            sn_cuda_module_free(&cm);
            return;
        }
        ck_assert_msg(st == SN_OK, "sm_%d: %s", arch[i], e.msg);
        const sn_cuda_kernel_info *in = sn_cuda_module_info(&cm, "mma_test");
        ck_assert_msg(in, "no ptxas report: %s", cm.log);
        ck_assert_msg(in->spill_store_bytes == 0 && in->stack_bytes == 0, "sm_%d: spills",
                      arch[i]);
        ck_assert_msg(cm.cubin && cm.cubin_size > 0, "no cubin");
        printf("test_sim: mma_test for sm_%d: %d registers, %d bytes of shared memory\n", arch[i],
               in->registers, in->shared_bytes);
        sn_cuda_module_free(&cm);
    }
}
END_TEST

/* ---- the rules a launch enforces, each reported with what to fix ---- */

static const char rules_src[] =
    "#include \"sinter_prelude.h\"\n"
    "/* reads buf[threadIdx.x + shift]: out of bounds for shift > 0 in the last thread */\n"
    "extern \"C\" __global__ void shared_index(int *out, int shift) {\n"
    "    SN_SHARED(int, buf, 64);\n"
    "    buf[threadIdx.x] = (int)threadIdx.x;\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = buf[threadIdx.x + shift];\n"
    "}\n"
    "SN_HOST_STUB(shared_index)\n"
    "/* a 2-D array, rows x 8: the column is checked as well as the row */\n"
    "extern \"C\" __global__ void shared_2d(int *out, int col) {\n"
    "    SN_SHARED2(int, tile, 4, 8);\n"
    "    tile[threadIdx.x / 8][threadIdx.x % 8] = (int)threadIdx.x;\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = tile[threadIdx.x / 8][col];\n"
    "}\n"
    "SN_HOST_STUB(shared_2d)\n"
    "/* dynamic shared memory, read before it is written: the poison shows */\n"
    "extern \"C\" __global__ void dynamic_poison(int *out, int n) {\n"
    "    SN_DYNAMIC_SHARED(int, dyn);\n"
    "    out[threadIdx.x] = dyn[threadIdx.x + n];\n"
    "}\n"
    "SN_HOST_STUB(dynamic_poison)\n"
    "/* threads below `half` wait at a barrier the others never reach */\n"
    "extern \"C\" __global__ void divergent_exit(int *out, int half) {\n"
    "    if ((int)threadIdx.x < half) __syncthreads();\n"
    "}\n"
    "SN_HOST_STUB(divergent_exit)\n"
    "/* odd and even threads wait at two different barriers */\n"
    "extern \"C\" __global__ void divergent_sites(int *out) {\n"
    "    if (threadIdx.x % 2) {\n"
    "        __syncthreads();\n"
    "    } else {\n"
    "        __syncthreads();\n"
    "    }\n"
    "    out[threadIdx.x] = 1;\n"
    "}\n"
    "SN_HOST_STUB(divergent_sites)\n"
    "/* lane `gone` exits before a shuffle the others wait at */\n"
    "extern \"C\" __global__ void shuffle_missing_lane(float *out, int gone) {\n"
    "    if ((int)threadIdx.x == gone) return;\n"
    "    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);\n"
    "}\n"
    "SN_HOST_STUB(shuffle_missing_lane)\n"
    "/* floats of static shared memory: over 48 KiB when n > 12288 */\n"
    "extern \"C\" __global__ void big_shared(float *out) {\n"
    "    SN_SHARED(float, big, 16384);\n"
    "    big[threadIdx.x] = 1.0f;\n"
    "    out[threadIdx.x] = big[threadIdx.x];\n"
    "}\n"
    "SN_HOST_STUB(big_shared)\n"
    "/* every thread writes out[0]: the last one wins, which depends on the order */\n"
    "extern \"C\" __global__ void racy(int *out) { out[0] = (int)threadIdx.x; }\n"
    "SN_HOST_STUB(racy)\n"
    "/* n floats through shared memory by cp.async, 4 per thread, zeros past n; without the wait\n"
    " * (wait == 0) the copies have not landed when the tile is read */\n"
    "extern \"C\" __global__ void async_copy(float *out, const float *in, int n, int wait) {\n"
    "    SN_SHARED(float, tile, 128);\n"
    "    int i = 4 * (int)threadIdx.x, left = n - i;\n"
    "    unsigned bytes = left >= 4 ? 16u : left > 0 ? 4u * (unsigned)left : 0u;\n"
    "    sn_cp_async_16_zfill(&tile[i], in + (bytes ? i : 0), bytes);\n"
    "    sn_cp_async_commit();\n"
    "    if (wait) sn_cp_async_wait_group(0);\n"
    "    __syncthreads();\n"
    "    for (int j = 0; j < 4; j++) out[i + j] = tile[(i + 4 * 7 + j) % 128];\n"
    "}\n"
    "SN_HOST_STUB(async_copy)\n"
    "/* mode 0: lanes 0-15 read lane 20 with a mask of lanes 0-15; mode 1: lanes disagree on the\n"
    " * mask; mode 2: ldmatrix from a row address that is not 16-byte aligned */\n"
    "extern \"C\" __global__ void warp_misuse(float *out, int mode) {\n"
    "    SN_SHARED(unsigned short, rows, 8 * 16);\n"
    "    int lane = threadIdx.x % 32;\n"
    "    unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;\n"
    "    if (mode == 0) out[lane] = __shfl_sync(half, 1.0f, 20);\n"
    "    if (mode == 1) out[lane] = __shfl_xor_sync(lane == 3 ? 0xffffffffu : half, 1.0f, 1);\n"
    "    if (mode == 2) {\n"
    "        unsigned r[1];\n"
    "        sn_ldmatrix_x1(r, &rows[(lane % 8) * 16 + 1]);\n"
    "        out[lane] = (float)r[0];\n"
    "    }\n"
    "    if (mode == 3) { /* half the warp multiplies bf16, the other half f16 */\n"
    "        unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};\n"
    "        float c[4] = {0, 0, 0, 0}, d[4];\n"
    "        if (lane < 16) sn_mma_bf16_16816(d, a, b, c);\n"
    "        else sn_mma_f16_16816(d, a, b, c);\n"
    "        out[lane] = d[0];\n"
    "    }\n"
    "}\n"
    "SN_HOST_STUB(warp_misuse)\n"
    "/* lanes exchange through shared memory, with or without __syncwarp */\n"
    "extern \"C\" __global__ void warp_exchange(int *out, int sync) {\n"
    "    SN_SHARED(int, buf, 32);\n"
    "    int lane = threadIdx.x % 32;\n"
    "    buf[lane] = lane;\n"
    "    if (sync) __syncwarp();\n"
    "    out[lane] = buf[31 - lane];\n"
    "}\n"
    "SN_HOST_STUB(warp_exchange)\n"
    "/* 96 KiB of locals: more than a fiber's default stack */\n"
    "extern \"C\" __global__ void deep_stack(int *out, int i) {\n"
    "    volatile int big[24 * 1024];\n"
    "    big[i] = i;\n"
    "    out[threadIdx.x] = big[i];\n"
    "}\n"
    "SN_HOST_STUB(deep_stack)\n"
    "/* a float4 read at out + 32 + offset floats: 16-byte aligned when offset is a multiple of 4 */\n"
    "extern \"C\" __global__ void vector_load(int *out, int offset) {\n"
    "    const float4 v = *reinterpret_cast<const float4 *>(reinterpret_cast<const float *>(out) + 32 + offset);\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = (int)v.y;\n"
    "}\n"
    "SN_HOST_STUB(vector_load)\n";

static sn_sim_module *rules;

static void rules_load(void) { rules = load(rules_src); }
static void rules_free(void) { sn_sim_module_free(rules); }

/* Launches kernel on one block of `threads` with one int parameter after out; the status, the
 * message in e. */
static sn_status launch1(const char *kernel, unsigned threads, void *out, int arg, unsigned dyn,
                         sn_err *e) {
    unsigned grid[3] = {2, 1, 1}, block[3] = {threads, 1, 1};
    void *params[] = {&out, &arg};
    return sn_sim_launch(rules, kernel, grid, block, dyn, params, NULL, e);
}

static void expect_error(sn_status st, const sn_err *e, sn_status code, const char **want, int n) {
    ck_assert_msg(st == code, "expected %s, got %s: %s", sn_status_name(code),
                  sn_status_name(st), st == SN_OK ? "" : e->msg);
    for (int i = 0; i < n; i++)
        ck_assert_msg(strstr(e->msg, want[i]), "missing \"%s\" in: %s", want[i], e->msg);
}

START_TEST(shared_out_of_bounds_reported) {
    if (!rules) return;
    int out[64];
    sn_err e;
    ck_assert_msg(launch1("shared_index", 64, out, 0, 0, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(out[i], i);
    const char *want[] = {"shared_index", "out of bounds", "buf[64] of 64", "thread (63,0,0)",
                          "declared on line 4"};
    expect_error(launch1("shared_index", 64, out, 1, 0, &e), &e, SN_ERR_DEVICE, want, 5);
    const char *neg[] = {"buf[4294967295] of 64", "thread (0,0,0)"}; /* unsigned + -1 */
    expect_error(launch1("shared_index", 64, out, -1, 0, &e), &e, SN_ERR_DEVICE, neg, 2);
    ck_assert_msg(launch1("shared_2d", 32, out, 7, 0, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(out[9], 15);
    const char *col[] = {"tile[8] of 8", "line 12"};
    expect_error(launch1("shared_2d", 32, out, 8, 0, &e), &e, SN_ERR_DEVICE, col, 2);
}
END_TEST

START_TEST(dynamic_shared_poisoned_and_checked) {
    if (!rules) return;
    int out[32];
    sn_err e;
    ck_assert_msg(launch1("dynamic_poison", 32, out, 0, 128, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < 32; i++) ck_assert_int_eq(out[i], 0x7f7f7f7f);
    const char *want[] = {"dyn[32] of 32", "dynamic_poison"};
    expect_error(launch1("dynamic_poison", 32, out, 1, 128, &e), &e, SN_ERR_DEVICE, want, 2);
    const char *limit[] = {"dynamic shared memory", "49153"};
    expect_error(launch1("dynamic_poison", 32, out, 0, 48 * 1024 + 1, &e), &e, SN_ERR_INVALID,
                 limit, 2);
}
END_TEST

START_TEST(divergent_barrier_reported) {
    if (!rules) return;
    sn_err e;
    int out[64];
    const char *want[] = {"divergent __syncthreads", "waits at the barrier on line 26",
                          "has exited"};
    expect_error(launch1("divergent_exit", 64, NULL, 32, 0, &e), &e, SN_ERR_DEVICE, want, 3);
    ck_assert_msg(launch1("divergent_exit", 64, NULL, 64, 0, &e) == SN_OK, "%s", e.msg);
    const char *sites[] = {"divergent __syncthreads", "line 32", "line 34"};
    expect_error(launch1("divergent_sites", 64, out, 0, 0, &e), &e, SN_ERR_DEVICE, sites, 3);
}
END_TEST

START_TEST(shuffle_without_a_lane_reported) {
    if (!rules) return;
    sn_err e;
    float out[64];
    ck_assert_msg(launch1("shuffle_missing_lane", 64, out, 99, 0, &e) == SN_OK, "%s", e.msg);
    const char *want[] = {"warp-synchronous", "line 42", "lane 5 never reaches", "has exited"};
    expect_error(launch1("shuffle_missing_lane", 64, out, 37, 0, &e), &e, SN_ERR_DEVICE, want, 4);
}
END_TEST

START_TEST(warp_misuse_reported) {
    if (!rules) return;
    sn_err e;
    float out[32];
    const char *lane[] = {"reads lane 20", "not in its mask 0x0000ffff", "line 74"};
    expect_error(launch1("warp_misuse", 32, out, 0, 0, &e), &e, SN_ERR_DEVICE, lane, 3);
    const char *mask[] = {"disagree", "mask 0xffffffff", "mask 0x0000ffff", "line 75"};
    expect_error(launch1("warp_misuse", 32, out, 1, 0, &e), &e, SN_ERR_DEVICE, mask, 4);
    const char *align[] = {"ldmatrix", "not 16-byte aligned", "line 78"};
    expect_error(launch1("warp_misuse", 32, out, 2, 0, &e), &e, SN_ERR_DEVICE, align, 3);
    const char *form[] = {"disagree", "in another operation", "line 84", "line 85"};
    expect_error(launch1("warp_misuse", 32, out, 3, 0, &e), &e, SN_ERR_DEVICE, form, 4);
}
END_TEST

/* A missing __syncwarp: in each order some lane reads before its partner wrote. */
START_TEST(missing_syncwarp_caught) {
    if (!rules) return;
    int out[32], sync = 1;
    int *p = out;
    void *params[] = {&p, &sync};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    sn_err e;
    for (int order = 0; order < SN_SIM_ORDER_COUNT; order++)
        for (sync = 1; sync >= 0; sync--) {
            sn_sim_opts o = sn_sim_defaults();
            o.order = (sn_sim_order)order;
            ck_assert_msg(sn_sim_launch(rules, "warp_exchange", grid, block, 0, params, &o, &e) ==
                          SN_OK, "%s", e.msg);
            int wrong = 0;
            for (int i = 0; i < 32; i++) wrong += out[i] != 31 - i;
            ck_assert_msg(sync ? wrong == 0 : wrong > 0, "order %d, sync %d: %d lanes wrong",
                          order, sync, wrong);
        }
}
END_TEST

/* A stack overflow faults on the guard page (with a message), and fits with a larger stack. */
START_TEST(stack_overflow_faults) {
    if (!rules) raise(SIGSEGV); /* what the test expects, when there is no g++ */
    int out[32];
    sn_err e;
    sn_sim_opts o = sn_sim_defaults();
    o.stack_bytes = 256 * 1024;
    int *p = out, i = 5;
    void *params[] = {&p, &i};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    ck_assert_msg(sn_sim_launch(rules, "deep_stack", grid, block, 0, params, &o, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_int_eq(out[31], 5);
    sn_sim_launch(rules, "deep_stack", grid, block, 0, params, NULL, &e); /* 64 KiB: faults */
}
END_TEST

/* A load not aligned to its type traps (the module is compiled with -fsanitize=alignment, and
 * the simulator says so on stderr), as a GPU faults with "misaligned address"; aligned, it reads. */
START_TEST(misaligned_vector_faults) {
    if (!rules) raise(SIGILL); /* what the test expects, when there is no g++ */
    int out[64] __attribute__((aligned(16)));
    for (int i = 0; i < 64; i++) out[i] = 0;
    float f = 7;
    memcpy(&out[37], &f, 4);
    sn_err e;
    ck_assert_msg(launch1("vector_load", 32, out, 4, 0, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(out[0], 7);
    launch1("vector_load", 32, out, 1, 0, &e); /* 4 bytes past a multiple of 16: traps */
}
END_TEST

START_TEST(shared_limit_enforced) {
    if (!rules) return;
    sn_err e;
    float out[32];
    void *params[] = {&(float *){out}};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    const char *want[] = {"shared memory over the limit", "big needs 65536 bytes", "49152"};
    expect_error(sn_sim_launch(rules, "big_shared", grid, block, 0, params, NULL, &e), &e,
                 SN_ERR_DEVICE, want, 3);
    sn_sim_opts o = sn_sim_defaults();
    o.shared_limit = 227 * 1024; /* sm_90's opt-in maximum */
    ck_assert_msg(sn_sim_launch(rules, "big_shared", grid, block, 0, params, &o, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert(out[31] == 1.0f);
}
END_TEST

START_TEST(orders_expose_a_race) {
    if (!rules) return;
    sn_err e;
    int out[64] = {0};
    void *params[] = {&(int *){out}};
    unsigned grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sn_sim_buf buf = {out, sizeof out};
    const char *want[] = {"racy", "output 0 differs at byte 0", "thread order"};
    expect_error(sn_sim_launch_orders(rules, "racy", grid, block, 0, params, &buf, 1, NULL, &e),
                 &e, SN_ERR_NUMERIC, want, 3);
    int shift = 0;
    void *ok_params[] = {&(int *){out}, &shift};
    ck_assert_msg(sn_sim_launch_orders(rules, "shared_index", grid, block, 0, ok_params, &buf, 1,
                                       NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(out[63], 63);
}
END_TEST

START_TEST(load_and_launch_errors) {
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load("#include \"sinter_prelude.h\"\n"
                                      "extern \"C\" __global__ void k(float *o) { o[0] = nope; }\n",
                                      &m, &e);
    if (st == SN_ERR_UNSUPPORTED) return;
    const char *want[] = {"g++ rejected", "nope", "kernel.cu:2"};
    expect_error(st, &e, SN_ERR_DEVICE, want, 3);
    ck_assert_ptr_null(m);
    /* raw __shared__ does not compile on the CPU: the macros are the way */
    st = sn_sim_module_load("#include \"sinter_prelude.h\"\n"
                            "extern \"C\" __global__ void k(float *o) { __shared__ float t[4]; }\n",
                            &m, &e);
    const char *raw[] = {"use_SN_SHARED_not___shared__"};
    expect_error(st, &e, SN_ERR_DEVICE, raw, 1);
    if (!rules) return;
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1}, huge[3] = {2048, 1, 1};
    const char *none[] = {"no kernel no_such", "SN_HOST_STUB(no_such)"};
    expect_error(sn_sim_launch(rules, "no_such", grid, block, 0, NULL, NULL, &e), &e,
                 SN_ERR_INVALID, none, 2);
    const char *dims[] = {"block (2048,1,1)", "1 to 1024 threads"};
    expect_error(sn_sim_launch(rules, "racy", grid, huge, 0, NULL, NULL, &e), &e, SN_ERR_INVALID,
                 dims, 2);
    ck_assert(sn_sim_has_kernel(rules, "racy") && !sn_sim_has_kernel(rules, "no_such"));
}
END_TEST

/* ---- warp primitives, atomics, coordinates: each against what CUDA documents ---- */

static const char warp_src[] =
    "#include \"sinter_prelude.h\"\n"
    "enum { OUTS = 9 };\n"
    "extern \"C\" __global__ void warp_ops(int *out) {\n"
    "    const unsigned full = 0xffffffffu;\n"
    "    const int lane = threadIdx.x % 32, v = lane * 10 + (int)(threadIdx.x / 32) * 1000;\n"
    "    int *o = out + threadIdx.x * OUTS;\n"
    "    o[0] = __shfl_sync(full, v, 3);\n"
    "    o[1] = __shfl_sync(full, v, lane + 1, 8);\n"
    "    o[2] = __shfl_up_sync(full, v, 2);\n"
    "    o[3] = __shfl_down_sync(full, v, 3, 16);\n"
    "    o[4] = __shfl_xor_sync(full, v, 5);\n"
    "    o[5] = (int)__ballot_sync(full, lane % 3 == 0);\n"
    "    o[6] = __any_sync(full, lane == 7) + 2 * __all_sync(full, lane < 32) +\n"
    "           4 * __all_sync(full, lane < 9);\n"
    "    o[7] = (int)(2.0 * __shfl_xor_sync(full, (double)v + 0.25, 1));\n"
    "    unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;\n"
    "    o[8] = __shfl_xor_sync(half, v, 1);\n"
    "    sn_bf16 h = sn_f32_to_bf16((float)v);\n"
    "    o[8] += 100000 * (int)sn_bf16_to_f32(__shfl_sync(full, h, 0));\n"
    "    __syncwarp();\n"
    "}\n"
    "SN_HOST_STUB(warp_ops)\n"
    "extern \"C\" __global__ void atomics(float *sum, int *count, float *red) {\n"
    "    SN_SHARED(int, block_count, 1);\n"
    "    atomicAdd(sum, 0.5f);\n"
    "    sn_red_add_f32x2(red, 0.25f, 0.5f); /* the attention's atomic dq: vector reductions */\n"
    "    sn_red_add_f32x4(red + 4, 1.0f, 2.0f, 3.0f, 4.0f);\n"
    "    atomicAdd(count, 1);\n"
    "    if (threadIdx.x == 0) block_count[0] = 0;\n"
    "    __syncthreads();\n"
    "    atomicAdd(&block_count[0], 1);\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) atomicMax(count + 1, block_count[0]);\n"
    "    int odd = __syncthreads_count(threadIdx.x % 2);\n"
    "    int any = __syncthreads_or(threadIdx.x == 5), all = __syncthreads_and(threadIdx.x < 40);\n"
    "    if (threadIdx.x == 0) atomicAdd(count + 2, odd + 100 * any + 1000 * all);\n"
    "}\n"
    "SN_HOST_STUB(atomics)\n"
    "extern \"C\" __global__ void coords(int *out) {\n"
    "    int b = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));\n"
    "    int t = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));\n"
    "    out[b * (int)(blockDim.x * blockDim.y * blockDim.z) + t] =\n"
    "        (int)(threadIdx.x | threadIdx.y << 4 | threadIdx.z << 8 | blockIdx.x << 12 |\n"
    "              blockIdx.y << 16 | blockIdx.z << 20);\n"
    "}\n"
    "SN_HOST_STUB(coords)\n";

START_TEST(warp_primitives_as_documented) {
    sn_sim_module *m = load(warp_src);
    if (!m) return;
    enum { THREADS = 48, OUTS = 9 }; /* a full warp and a partial one */
    int out[THREADS * OUTS];
    int *p = out;
    void *params[] = {&p};
    unsigned grid[3] = {1, 1, 1}, block[3] = {THREADS, 1, 1};
    sn_err e;
    for (int order = 0; order < SN_SIM_ORDER_COUNT; order++) {
        sn_sim_opts o = sn_sim_defaults();
        o.order = (sn_sim_order)order;
        memset(out, 0, sizeof out);
        ck_assert_msg(sn_sim_launch(m, "warp_ops", grid, block, 0, params, &o, &e) == SN_OK, "%s",
                      e.msg);
        for (int t = 0; t < THREADS; t++) {
            int lane = t % 32, w = t / 32, base = w * 1000, lanes = w == 0 ? 32 : THREADS - 32;
#define V(l) ((l) * 10 + base)
            unsigned ballot = 0;
            for (int l = 0; l < lanes; l++) ballot |= (l % 3 == 0) << l;
            int want[OUTS] = {
                V(3), V(lane / 8 * 8 + (lane + 1) % 8), lane < 2 ? V(lane) : V(lane - 2),
                lane % 16 + 3 < 16 ? V(lane + 3) : V(lane), V(lane ^ 5), (int)ballot,
                (lanes > 7) + 2 + 4 * (lanes <= 9), 2 * V(lane ^ 1) /* (int)(2 (v + 0.25)) */,
                V(lane ^ 1) + 100000 * V(0) /* a 2-byte bf16: 0 and 1000 are exact */};
#undef V
            for (int j = 0; j < OUTS; j++)
                ck_assert_msg(out[t * OUTS + j] == want[j], "thread %d, result %d: %d, want %d "
                              "(order %d)", t, j, out[t * OUTS + j], want[j], order);
        }
    }
    /* atomics from every thread of 3 blocks, in global and shared memory */
    float sum = 0;
    int count[3] = {0, 0, 0};
    _Alignas(16) float red[8] = {0};
    float *ps = &sum, *pr = red;
    int *pc = count;
    void *aparams[] = {&ps, &pc, &pr};
    unsigned agrid[3] = {3, 1, 1}, ablock[3] = {40, 1, 1};
    ck_assert_msg(sn_sim_launch(m, "atomics", agrid, ablock, 0, aparams, NULL, &e) == SN_OK, "%s",
                  e.msg);
    ck_assert(sum == 60.0f);
    static const float red_want[8] = {30, 60, 0, 0, 120, 240, 360, 480};
    for (int i = 0; i < 8; i++) ck_assert_msg(red[i] == red_want[i], "red[%d] %g", i, red[i]);
    ck_assert_int_eq(count[0], 120);
    ck_assert_int_eq(count[1], 40);
    ck_assert_int_eq(count[2], 3 * (20 + 100 + 1000)); /* 20 odd of 40, per block */
    /* every coordinate of a 3-D grid of 3-D blocks */
    unsigned cgrid[3] = {2, 3, 2}, cblock[3] = {4, 2, 3};
    int coords[12 * 24];
    int *pco = coords;
    void *cparams[] = {&pco};
    memset(coords, 0xff, sizeof coords);
    ck_assert_msg(sn_sim_launch(m, "coords", cgrid, cblock, 0, cparams, NULL, &e) == SN_OK, "%s",
                  e.msg);
    for (int b = 0; b < 12; b++)
        for (int t = 0; t < 24; t++) {
            int want = (t % 4) | (t / 4 % 2) << 4 | (t / 8) << 8 | (b % 2) << 12 |
                       (b / 2 % 3) << 16 | (b / 6) << 20;
            ck_assert_int_eq(coords[b * 24 + t], want);
        }
    sn_sim_module_free(m);
    sn_cuda_module cm; /* the same text is CUDA */
    sn_status st = sn_nvrtc_compile(warp_src, "warp.cu", 80, &cm, &e);
    if (st != SN_ERR_UNSUPPORTED) ck_assert_msg(st == SN_OK, "%s", e.msg);
    sn_cuda_module_free(&cm);
}
END_TEST

/* cp.async: copies land at the wait (zeros past the source bytes); reading before the wait
 * sees poison; the GPU form compiles for sm_80 and sm_90. */
START_TEST(async_copies) {
    if (!rules) return;
    float in[128], out[128];
    for (int i = 0; i < 128; i++) in[i] = (float)i + 0.5f;
    float *po = out, *pi = in;
    int n = 101, wait = 1;
    void *params[] = {&po, &pi, &n, &wait};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    sn_err e;
    ck_assert_msg(sn_sim_launch(rules, "async_copy", grid, block, 0, params, NULL, &e) == SN_OK,
                  "%s", e.msg);
    for (int i = 0; i < 128; i++) {
        int src = (i + 28) % 128;
        ck_assert_msg(out[i] == (src < n ? in[src] : 0.0f), "out[%d] = %g", i, out[i]);
    }
    wait = 0;
    ck_assert_msg(sn_sim_launch(rules, "async_copy", grid, block, 0, params, NULL, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_msg(out[0] > 1e38f, "a read before the wait saw %g, not the poison", out[0]);
    const int arch[] = {80, 90};
    char src[sizeof rules_src]; /* the kernel alone: big_shared is too big for a GPU */
    snprintf(src, sizeof src, "#include \"sinter_prelude.h\"\n%s",
             strstr(rules_src, "/* n floats through"));
    for (int a = 0; a < 2; a++) {
        sn_cuda_module cm;
        sn_status st = sn_nvrtc_compile(src, "async_copy.cu", arch[a], &cm, &e);
        if (st != SN_ERR_UNSUPPORTED) ck_assert_msg(st == SN_OK, "sm_%d: %s", arch[a], e.msg);
        sn_cuda_module_free(&cm);
    }
}
END_TEST

/* A stand-in driver's device addresses: pointer parameters go through map_pointer, others not. */
static void *map_fake(void *ctx, const void *device_ptr) {
    return (char *)ctx + ((uintptr_t)device_ptr - 0x10000);
}

START_TEST(pointer_parameters_mapped) {
    if (!rules) return;
    int out[64];
    memset(out, 0, sizeof out);
    void *device_out = (void *)(uintptr_t)0x10000;
    int shift = 0;
    void *params[] = {&device_out, &shift};
    unsigned grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    sn_sim_opts o = sn_sim_defaults();
    o.map_pointer = map_fake;
    o.map_ctx = out;
    sn_err e;
    ck_assert_msg(sn_sim_launch(rules, "shared_index", grid, block, 0, params, &o, &e) == SN_OK,
                  "%s", e.msg);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(out[i], i);
}
END_TEST

/* ---- the primitives together: a tiled bf16 GEMM on tensor cores ---- */

/* C (M x N, f32) = A (M x K) B (K x N), bf16 row-major; M, N multiples of 32, K of 16. Blocks of
 * 4 warps own a 32 x 32 tile of C, each warp 16 x 16 (two m16n8k16 products per k step); the
 * A and B tiles come in by cp.async into padded shared rows and go to fragments by ldmatrix.
 * PLANT 1 deletes the barrier that keeps the next tile's copies from overwriting the one
 * other warps are still reading. */
static const char gemm_src[] =
    "#include \"sinter_prelude.h\"\n"
    "#ifndef PLANT\n"
    "#define PLANT 0\n"
    "#endif\n"
    "extern \"C\" __global__ void __launch_bounds__(128)\n"
    "gemm_bf16(float *c, const unsigned short *a, const unsigned short *b, int M, int N, int K) {\n"
    "    SN_SHARED2(unsigned short, As, 32, 24); /* 16 + 8 padding: rows stay 16-byte aligned */\n"
    "    SN_SHARED2(unsigned short, Bs, 16, 40);\n"
    "    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;\n"
    "    const int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;\n"
    "    const int wr = warp / 2 * 16, wc = warp % 2 * 16, group = lane / 4, tig = lane % 4;\n"
    "    float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};\n"
    "    for (int k0 = 0; k0 < K; k0 += 16) {\n"
    "        if (tid < 64) { /* A: 32 rows x 2 chunks of 8 */\n"
    "            int r = tid / 2, ch = tid % 2;\n"
    "            sn_cp_async_16(&As[r][ch * 8], a + (long long)(row0 + r) * K + k0 + ch * 8);\n"
    "        } else { /* B: 16 rows x 4 chunks of 8 */\n"
    "            int r = (tid - 64) / 4, ch = (tid - 64) % 4;\n"
    "            sn_cp_async_16(&Bs[r][ch * 8], b + (long long)(k0 + r) * N + col0 + ch * 8);\n"
    "        }\n"
    "        sn_cp_async_commit();\n"
    "        sn_cp_async_wait_all();\n"
    "        __syncthreads();\n"
    "        unsigned fa[4], fb[2];\n"
    "        sn_ldmatrix_x4(fa, &As[wr + lane % 16][lane / 16 * 8]);\n"
    "        for (int j = 0; j < 2; j++) {\n"
    "            sn_ldmatrix_x2_trans(fb, &Bs[lane % 16][wc + j * 8]);\n"
    "            sn_mma_bf16_16816(acc[j], fa, fb, acc[j]);\n"
    "        }\n"
    "        if (!PLANT) __syncthreads();\n"
    "    }\n"
    "    for (int j = 0; j < 2; j++)\n"
    "        for (int i = 0; i < 4; i++)\n"
    "            c[(long long)(row0 + wr + group + i / 2 * 8) * N + col0 + wc + j * 8 + 2 * tig + i % 2] =\n"
    "                acc[j][i];\n"
    "}\n"
    "SN_HOST_STUB(gemm_bf16)\n";

/* The largest relative error of gemm_bf16 (M x N x K) over the three orders, or -1 on a failed
 * launch (message in e). */
static double gemm_error(sn_sim_module *m, int M, int N, int K, sn_err *e) {
    uint16_t *a = malloc(sizeof *a * (size_t)(M * K)), *b = malloc(sizeof *b * (size_t)(K * N));
    float *c = malloc(sizeof *c * (size_t)(M * N));
    sn_rng r = sn_rng_seed(21);
    for (int i = 0; i < M * K; i++) a[i] = to_bf16((float)sn_rng_normal(&r));
    for (int i = 0; i < K * N; i++) b[i] = to_bf16((float)sn_rng_normal(&r));
    void *params[] = {&c, &a, &b, &M, &N, &K};
    unsigned grid[3] = {(unsigned)N / 32, (unsigned)M / 32, 1}, block[3] = {128, 1, 1};
    double worst = 0;
    for (int order = 0; order < SN_SIM_ORDER_COUNT && worst >= 0; order++) {
        sn_sim_opts o = sn_sim_defaults();
        o.order = (sn_sim_order)order;
        memset(c, 0xff, sizeof *c * (size_t)(M * N));
        if (sn_sim_launch(m, "gemm_bf16", grid, block, 0, params, &o, e) != SN_OK) {
            worst = -1;
            break;
        }
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double want = 0, scale = 0;
                for (int k = 0; k < K; k++) {
                    double p = (double)from_bf16(a[i * K + k]) * from_bf16(b[k * N + j]);
                    want += p;
                    scale += fabs(p);
                }
                double err = fabs(c[i * N + j] - want) / scale;
                if (!(err <= worst)) worst = err;
            }
    }
    free(a);
    free(b);
    free(c);
    return worst;
}

START_TEST(gemm_on_tensor_cores) {
    sn_sim_module *m = load(gemm_src);
    if (!m) return;
    sn_err e;
    double err = gemm_error(m, 64, 96, 48, &e);
    ck_assert_msg(err >= 0, "%s", e.msg);
    ck_assert_msg(err <= 1e-6, "gemm: relative error %g", err);
    sn_sim_module_free(m);
    char src[sizeof gemm_src + 32];
    snprintf(src, sizeof src, "#define PLANT 1\n%s", gemm_src);
    m = load(src);
    double bad = gemm_error(m, 64, 96, 48, &e);
    printf("test_sim: bf16 GEMM on emulated tensor cores: relative error %.2g; without the "
           "trailing barrier: %s %.3g\n", err, bad < 0 ? e.msg : "error", bad);
    ck_assert_msg(bad < 0 || !(bad <= 1e-3), "the deleted barrier went unnoticed");
    sn_sim_module_free(m);
    const int arch[] = {80, 90};
    for (int a = 0; a < 2; a++) {
        sn_cuda_module cm;
        sn_status st = sn_nvrtc_compile(gemm_src, "gemm.cu", arch[a], &cm, &e);
        if (st != SN_ERR_UNSUPPORTED) {
            ck_assert_msg(st == SN_OK, "sm_%d: %s", arch[a], e.msg);
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&cm, "gemm_bf16");
            ck_assert_msg(in && in->spill_store_bytes == 0 && in->stack_bytes == 0,
                          "sm_%d: spills or no report:\n%s", arch[a], cm.log);
        }
        sn_cuda_module_free(&cm);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, softmax_matches_reference);
    tcase_add_test(tc, softmax_deleted_barrier_caught);
    tcase_add_test(tc, warp_primitives_as_documented);
    tcase_add_test(tc, mma_matches_product);
    tcase_add_test(tc, mma_wrong_fragment_caught);
    tcase_add_test(tc, mma_compiles_with_nvrtc);
    tcase_add_test(tc, gemm_on_tensor_cores);
    suite_add_tcase(s, tc);
    TCase *r = tcase_create("rules");
    tcase_set_timeout(r, 120);
    tcase_add_unchecked_fixture(r, rules_load, rules_free);
    tcase_add_test(r, shared_out_of_bounds_reported);
    tcase_add_test(r, dynamic_shared_poisoned_and_checked);
    tcase_add_test(r, divergent_barrier_reported);
    tcase_add_test(r, shuffle_without_a_lane_reported);
    tcase_add_test(r, warp_misuse_reported);
    tcase_add_test(r, missing_syncwarp_caught);
    tcase_add_test(r, shared_limit_enforced);
    tcase_add_test_raise_signal(r, stack_overflow_faults, SIGSEGV);
    tcase_add_test_raise_signal(r, misaligned_vector_faults, SIGILL);
    tcase_add_test(r, orders_expose_a_race);
    tcase_add_test(r, load_and_launch_errors);
    tcase_add_test(r, async_copies);
    tcase_add_test(r, pointer_parameters_mapped);
    suite_add_tcase(s, r);
    return sn_test_main(s);
}
