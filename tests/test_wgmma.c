/* test_wgmma.c: warpgroup MMA on the SIMT simulator (sim/sim_wgmma.cc): the wgmma GEMM kernel
 * (codegen/cuda/cuda_wgmma.c) against a plain double product in each layout it has (128-byte
 * swizzle with B K-major or MN-major, core matrices without a swizzle, A from registers; bf16
 * and f16), its
 * planted bugs each caught (a wrong descriptor stride, no wait_group, no wgmma.fence, no
 * fence.proxy.async, accumulators read before the wait), the warpgroup rules, and the text
 * compiled by NVRTC for sm_90a without spills. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "codegen/cuda/cuda_wgmma.h"
#include "sim/sim.h"
#include "harness.h"

enum { M = 128, N = 128, K = 128 };

/* The kernel text with `defines` before it; NULL when the machine has no g++. */
static sn_sim_module *load_with(const char *defines) {
    const char *src = sn_cuda_wgmma_gemm_source();
    size_t n = strlen(defines) + strlen(src) + 1;
    char *text = malloc(n);
    ck_assert(text);
    snprintf(text, n, "%s%s", defines, src);
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load(text, &m, &e);
    free(text);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_wgmma: %s: skipping\n", e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return m;
}

/* The 16-bit bits of x (bf16: its top half, rounded to nearest even; f16: exact for the small
 * integers and halves drawn below). */
static uint16_t half_bits(float x, int f16) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (!f16) return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
    unsigned sign = u >> 16 & 0x8000u;
    float a = fabsf(x);
    if (a == 0) return (uint16_t)sign;
    int ex;
    float fr = frexpf(a, &ex); /* a = fr 2^ex, fr in [0.5, 1) */
    return (uint16_t)(sign | (unsigned)(ex - 1 + 15) << 10 | ((unsigned)(fr * 2048.0f) & 0x3ffu));
}

/* Runs the GEMM built with `defines` on random inputs (values k / 8, |k| <= 16: exact in both
 * types) and returns the launch's status; *err: the largest error against the double product. */
static sn_status run_gemm(const char *defines, int f16, int trans_b, double *err, sn_err *e) {
    sn_sim_module *m = load_with(defines);
    if (!m) return SN_ERR_UNSUPPORTED;
    uint16_t *a = malloc(sizeof *a * M * K), *b = malloc(sizeof *b * N * K);
    float *af = malloc(sizeof *af * M * K), *bf = malloc(sizeof *bf * N * K);
    float *c = malloc(sizeof *c * M * N);
    ck_assert(a && b && af && bf && c);
    unsigned s = 12345;
    for (int i = 0; i < M * K; i++) {
        s = s * 1103515245u + 12345u;
        af[i] = (float)((int)(s >> 16 & 31) - 16) / 8.0f;
        a[i] = half_bits(af[i], f16);
    }
    for (int i = 0; i < N * K; i++) { /* bf: (N x K); b as the kernel reads it */
        s = s * 1103515245u + 12345u;
        bf[i] = (float)((int)(s >> 16 & 31) - 16) / 8.0f;
    }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            b[trans_b ? k * N + n : n * K + k] = half_bits(bf[n * K + k], f16);
    for (int i = 0; i < M * N; i++) c[i] = NAN;
    int mm = M, nn = N, kk = K;
    void *pc = c, *pa = a, *pb = b;
    void *params[] = {&pc, &pa, &pb, &mm, &nn, &kk};
    unsigned grid[3] = {N / 64, M / 64, 1}, block[3] = {128, 1, 1};
    sn_sim_buf out = {c, sizeof *c * M * N};
    sn_sim_opts o = sn_sim_defaults();
    o.shared_limit = 64 << 10;
    sn_status st = sn_sim_launch_orders(m, "sn_wgmma_gemm", grid, block, SN_WGMMA_GEMM_SHARED,
                                        params, &out, 1, &o, e);
    *err = 0;
    for (int i = 0; st == SN_OK && i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int k = 0; k < K; k++) ref += (double)af[i * K + k] * bf[j * K + k];
            double d = fabs(c[i * N + j] - ref);
            if (!(d <= *err)) *err = d; /* NaN stays */
        }
    free(a), free(b), free(af), free(bf), free(c);
    sn_sim_module_free(m);
    return st;
}

START_TEST(gemm_matches_product) {
    const sn_wgmma_form *forms = sn_wgmma_gemm_forms;
    for (int i = 0; i < sn_wgmma_gemm_n_forms; i++) {
        double err;
        sn_err e;
        sn_status st = run_gemm(forms[i].defines, forms[i].f16, forms[i].trans_b, &err, &e);
        if (st == SN_ERR_UNSUPPORTED) return;
        ck_assert_msg(st == SN_OK, "%s", e.msg);
        /* products of multiples of 1/8 summed in f32 over K = 128: exact */
        ck_assert_msg(err == 0, "%s: largest error %g", forms[i].name, err);
    }
}
END_TEST

/* Each planted bug: the launch fails with the message named, or (NULL) the result is wrong. */
START_TEST(planted_bugs_caught) {
    static const struct {
        int bug;
        const char *message; /* NULL: a wrong result */
    } bugs[] = {
        {1, NULL},                          /* SBO 512 for 1024: rows of other tiles */
        {2, "still in flight"},             /* no wait_group */
        {3, "without a wgmma.fence"},       /* no fence */
        {4, "fence.proxy.async"},           /* cp.async data read unfenced */
        {5, NULL},                          /* a poisoned accumulator read before the wait */
    };
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        char defines[64];
        snprintf(defines, sizeof defines, "#define BUG %d\n", bugs[i].bug);
        double err;
        sn_err e;
        sn_status st = run_gemm(defines, 0, 0, &err, &e);
        if (st == SN_ERR_UNSUPPORTED) return;
        if (bugs[i].message) {
            ck_assert_msg(st == SN_ERR_DEVICE && strstr(e.msg, bugs[i].message),
                          "bug %d: status %d, message: %s", bugs[i].bug, st,
                          st ? e.msg : "(none)");
            ck_assert_msg(strstr(e.msg, "line "), "bug %d: no kernel line in: %s", bugs[i].bug,
                          e.msg);
        } else {
            ck_assert_msg(st == SN_OK, "bug %d: %s", bugs[i].bug, e.msg);
            ck_assert_msg(!(err <= 1e-3), "bug %d not caught: error %g", bugs[i].bug, err);
        }
        printf("test_wgmma: bug %d caught: %s\n", bugs[i].bug,
               bugs[i].message ? e.msg : "wrong result");
    }
}
END_TEST

/* A wgmma in a block of 96 threads: no whole warpgroup. A start address in the middle of a
 * swizzle atom. */
static const char rules_src[] =
    "#include \"sinter_prelude.h\"\n"
    "extern \"C\" __global__ void wg_rules(float *out, int misalign) {\n"
    "    SN_DYNAMIC_SHARED(unsigned char, smem);\n"
    "    unsigned base = sn_smem_addr(smem), at = base + (1024u - base % 1024u) % 1024u;\n"
    "    for (int i = threadIdx.x; i < 16384; i += blockDim.x) smem[i] = 0;\n"
    "    __syncthreads();\n"
    "    float d[32];\n"
    "    for (int i = 0; i < 32; i++) d[i] = 0.0f;\n"
    "    unsigned long long da = sn_wgmma_desc(at + (misalign ? 128u : 0u), 16, 1024, 1);\n"
    "    sn_wgmma_fence();\n"
    "    sn_wgmma_m64n64k16_bf16_ss(d, da, sn_wgmma_desc(at + 8192u, 16, 1024, 1), 0);\n"
    "    sn_wgmma_commit();\n"
    "    sn_wgmma_wait(0);\n"
    "    out[threadIdx.x] = d[0];\n"
    "}\n"
    "SN_HOST_STUB(wg_rules)\n";

START_TEST(warpgroup_rules) {
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load(rules_src, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) return;
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    float out[128];
    void *po = out;
    int misalign = 0;
    void *params[] = {&po, &misalign};
    unsigned grid[3] = {1, 1, 1}, block[3] = {128, 1, 1};
    sn_sim_opts o = sn_sim_defaults();
    ck_assert_msg(sn_sim_launch(m, "wg_rules", grid, block, 17408, params, &o, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert(out[0] == 0.0f && out[127] == 0.0f);
    block[0] = 96;
    st = sn_sim_launch(m, "wg_rules", grid, block, 17408, params, &o, &e);
    ck_assert_msg(st == SN_ERR_DEVICE && strstr(e.msg, "warpgroup operation in a block of 96"),
                  "%s", st ? e.msg : "no error");
    block[0] = 128, misalign = 1;
    st = sn_sim_launch(m, "wg_rules", grid, block, 17408, params, &o, &e);
    ck_assert_msg(st == SN_ERR_DEVICE && strstr(e.msg, "first 128-byte row"), "%s",
                  st ? e.msg : "no error");
    sn_sim_module_free(m);
}
END_TEST

START_TEST(gemm_compiles_for_sm90a) {
    sn_cuda_module cm;
    sn_err e;
    sn_status st = sn_nvrtc_compile(sn_cuda_wgmma_gemm_source(), "wgmma_gemm.cu", 90, &cm, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_wgmma: %s: skipping NVRTC\n", e.msg);
        sn_cuda_module_free(&cm);
        return;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    const sn_cuda_kernel_info *in = sn_cuda_module_info(&cm, "sn_wgmma_gemm");
    ck_assert_msg(in, "no ptxas report: %s", cm.log);
    ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 && in->stack_bytes == 0,
                  "spills: %s", cm.log);
    printf("test_wgmma: sn_wgmma_gemm for sm_90a: %d registers\n", in->registers);
    sn_cuda_module_free(&cm);
}
END_TEST

int main(void) {
    Suite *s = suite_create("wgmma");
    TCase *tc = tcase_create("wgmma");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, gemm_matches_product);
    tcase_add_test(tc, planted_bugs_caught);
    tcase_add_test(tc, warpgroup_rules);
    tcase_add_test(tc, gemm_compiles_for_sm90a);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
