/* test_nf4_gemv.c: the NF4 product of few rows (kernel.h: SN_KER_GEMV): the fuse rule that
 * makes it (and leaves larger products to the dequantize kernel and the GEMM), the CPU kernel
 * (codegen/llvm/llvm_gemv.c) at every vector width and the CUDA kernel (codegen/cuda/
 * cuda_gemv.c) on the SIMT simulator in both thread orders, against the reference interpreter;
 * the CUDA text compiled by NVRTC for sm_75, sm_80 and sm_90 without spills.
 * The tolerance: each backend sums K products in f32 in its own order, each partial sum rounded
 * once (fma), so |y - exact| <= K 2^-24 sum_k |x w| (the standard bound, gamma_K), plus y's own
 * rounding; the interpreter sums in f64. A wrong nibble, scale or offset moves y by about a
 * weight's size times |x|: far outside (the planted bugs, docs/finetune.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "codegen/llvm/llvm.h"
#include "interp/interp.h"
#include "ir/nf4.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "runtime/gemm_lowp.h"
#include "sim/sim.h"
#include "support/rng.h"
#include "codegen_util.h"
#include "gemv_check.h"
#include "harness.h"

/* Shapes: 64 | N (the vector path; K odd; 4 groups of scales; M at the bound; row tiles of 4
 * and 3; K longer than CUDA's shared tile of x at M = 8, 512; every M from 1 to 8; the CPU's
 * groups of 4 and 2 items and the items after them), and N that no vector width
 * divides (blocks straddle rows; an odd count: a short last block with an unused low nibble). */
static const int64_t shapes[][3] = {{1, 37, 192}, {3, 300, 192}, {8, 64, 128}, {7, 96, 320},
                                    {5, 37, 50},  {2, 33, 77},   {1, 130, 30}, {8, 600, 64},
                                    {4, 70, 64},  {6, 45, 128},  /* M: 1 .. 8, each */
                                    {1, 40, 448}, {2, 50, 320}}; /* CPU: groups of 4, 2 items */
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
static const sn_dtype dts[] = {SN_F32, SN_BF16, SN_F16};

/* ---- the fuse rule ---- */

/* x (M, 96) @ W (96, 128) + b compiled for the CPU: at M <= 8 one nf4_gemv kernel reads the
 * packed bytes (no dequantize kernel, no GEMM, and the unpacked weight has no value: no
 * scratch), the bias add a kernel of its own; at M = 9 the dequantize kernel right before the
 * GEMM, as before. Run on the CPU device, y + b within the bound of the interpreter. */
START_TEST(fuse_rule) {
    if (!have_jit("nf4_gemv")) return;
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    const int64_t Ms[] = {1, 8, 9};
    for (int i = 0; i < 3; i++) check_fuse_rule(d, Ms[i], SN_F32, false, false, 80 + (uint64_t)i);
    sn_device_free(d);
}
END_TEST

/* ---- the CPU kernel ---- */

/* At 16 lanes (AVX-512: vpermps over 16 entries), 8 (AVX2: two vpermps and a select) and 4
 * (compares and selects), every shape and dtype, run whole and in three uneven parts into
 * NaN-poisoned outputs: within the bound of the interpreter, and each vector width's bits the
 * same (one order: k ascending, one fma a term). */
START_TEST(llvm_gemv) {
    if (!have_jit("nf4_gemv")) return;
    const int lanes[] = {16, 8, 4};
    sn_jit *j[3];
    for (int l = 0; l < 3; l++) j[l] = new_jit(lanes[l]);
    for (int s = 0; s < N_SHAPES; s++)
        for (int d = 0; d < 3; d++) {
            prod p;
            prod_new(&p, shapes[s][0], shapes[s][1], shapes[s][2], dts[d], s == 2,
                     60 + (uint64_t)s);
            sn_kernel k = prod_kernel(&p);
            cpu_lanes_and_parts(&p, &k, j, lanes, 3);
            prod_free(&p);
        }
    for (int l = 0; l < 3; l++) sn_jit_free(j[l]);
}
END_TEST

/* Every shape and dtype on the simulator with its launch, forward and reversed thread order
 * (shared memory poisoned), into NaN-poisoned outputs: within the bound, the same bits in both
 * orders; NVRTC for sm_75, sm_80 and sm_90 without spills or stack; two shapes profiled (the
 * codes read as bytes and as words, sim.h's counts printed): the words use at least 40% of the
 * bytes of the sectors the loads move. */
START_TEST(cuda_gemv) {
    bool nvrtc = have_nvrtc();
    sn_target t = sn_target_cuda(80);
    for (int s = 0; s < N_SHAPES; s++)
        for (int d = 0; d < 3; d++) {
            prod p;
            prod_new(&p, shapes[s][0], shapes[s][1], shapes[s][2], dts[d], s == 2,
                     70 + (uint64_t)s);
            sn_kernel k = prod_kernel(&p);
            const sn_kernel *kp = &k;
            sn_cuda_source cs;
            sn_err e;
            ck_assert_msg(sn_cuda_render(&kp, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            if (nvrtc && d == 1) nvrtc_no_spills(&cs, 1, p.M, p.K, p.N);
            sn_sim_module *h = sim_both_orders(&p, &k, &t, &cs, "test_nf4_gemv");
            if (h && d == 0 && s < 2) { /* the codes as bytes (s 0) and as words (s 1): profiled */
                char flags[256];
                sn_sim_profile prof;
                double used = profile_run(&p, &k, &t, &cs, &prof, flags, sizeof flags);
                printf("nf4_gemv %lld x %lld x %lld (codes as %s): %lld load requests, %lld "
                       "sectors, %.0f%% of their bytes used; shared %lld wavefronts for %lld "
                       "ideal; %s\n",
                       (long long)p.M, (long long)p.K, (long long)p.N, s ? "words" : "bytes",
                       prof.ld_requests, prof.ld_sectors, 100 * used, prof.sh_wavefronts,
                       prof.sh_ideal, flags[0] ? flags : "no verdicts");
                /* the words: at least 40% of the sectors' bytes used (measured 49%: the
                   codes' requests whole sectors, the scales' 4 bytes a request not; 14% with
                   the codes as bytes) */
                ck_assert_msg(s == 0 || used >= 0.4, "the codes read as words use %.0f%% of "
                              "the sectors' bytes", 100 * used);
            }
            if (h) sn_sim_module_free(h);
            sn_cuda_source_free(&cs);
            prod_free(&p);
            if (!h) return;
        }
}
END_TEST

/* ---- the decode split (kernel.h: SN_DECODE_BLOCKS) ---- */

/* The parts the rule gives x (M, K) @ NF4 W (K, N): the kernel as fuse makes it for the CUDA
 * target (PARTIAL, or the one kernel), its blocks in *blocks; with nvrtc, the program's NF4
 * kernels compiled for sm_75, sm_80 and sm_90: no spills, no stack. */
static int64_t split_of(int64_t M, int64_t K, int64_t N, bool nvrtc, int64_t *blocks) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_BF16, SN_SHAPE(M, K));
    sn_node *w = sn_param_nf4(g, "w", SN_BF16, SN_SHAPE(K, N));
    sn_node *y = sn_matmul(g, x, w);
    ck_assert_msg(y, "%s", sn_graph_error(g));
    sn_graph_add_output(g, y);
    sn_target t = sn_target_cuda(90);
    sn_program *prog;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &prog, NULL, &e) ==
                      SN_OK, "%s", e.msg);
    int64_t parts = 0;
    *blocks = 0;
    for (int k = 0; k < prog->n_kernels; k++) {
        const sn_kernel *ker = prog->kernels[k];
        if (ker->kind != SN_KER_GEMV || ker->stage == SN_SUM_FINISH) continue;
        parts = ker->stage == SN_SUM_PARTIAL ? sn_split_parts(ker) : 1;
        *blocks = sn_cuda_launch_dims(ker, &t).grid[0];
        ck_assert((ker->stage == SN_SUM_PARTIAL) == (parts > 1));
    }
    const sn_kernel *ks[2];
    int n = 0;
    for (int k = 0; k < prog->n_kernels && n < 2; k++)
        if (prog->kernels[k]->kind == SN_KER_GEMV) ks[n++] = prog->kernels[k];
    sn_cuda_source cs;
    ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
    if (nvrtc) nvrtc_no_spills(&cs, n, M, K, N);
    sn_cuda_source_free(&cs);
    sn_program_free(prog);
    sn_graph_free(g);
    return parts;
}

/* Every decode product of gpt2 (C 768), gpt2-xl (1600) and a LLaMA 1B (TinyLlama: 2048, MLP
 * 5632, 4 kv heads of 64) launches at least 264 blocks (two waves of 132 SMs), and at M = 8
 * compiles for sm_75, sm_80 and sm_90 without spills; a product with 264 or more column items
 * (N = 32000: an LM head) stays one kernel. */
START_TEST(split_rule) {
    bool nvrtc = have_nvrtc();
    static const int64_t kn[][2] = {
        {768, 2304}, {768, 768}, {768, 3072}, {3072, 768},          /* gpt2 */
        {1600, 4800}, {1600, 1600}, {1600, 6400}, {6400, 1600},     /* gpt2-xl */
        {2048, 2048}, {2048, 256}, {2048, 5632}, {5632, 2048},      /* LLaMA 1B */
    };
    for (size_t i = 0; i < sizeof kn / sizeof kn[0]; i++) {
        int64_t blocks, parts = split_of(1, kn[i][0], kn[i][1], false, &blocks), b8;
        ck_assert_int_eq(split_of(8, kn[i][0], kn[i][1], nvrtc, &b8), parts);
        printf("nf4_gemv 1 x %lld x %lld: %lld parts, %lld blocks (one kernel: %lld)\n",
               (long long)kn[i][0], (long long)kn[i][1], (long long)parts, (long long)blocks,
               (long long)(kn[i][1] + 63) / 64);
        ck_assert_msg(blocks >= SN_DECODE_BLOCKS, "K %lld N %lld: %lld blocks",
                      (long long)kn[i][0], (long long)kn[i][1], (long long)blocks);
    }
    int64_t blocks;
    ck_assert_int_eq(split_of(1, 2048, 32000, false, &blocks), 1);
    ck_assert_int_eq(blocks, 500);
}
END_TEST

/* Every shape and dtype split as the CUDA target splits it (the shapes' K make 1 .. 19 parts,
 * a short last part where 32 does not divide K). */
START_TEST(cuda_gemv_split) {
    bool nvrtc = have_nvrtc();
    int split = 0;
    for (int s = 0; s < N_SHAPES; s++)
        for (int d = 0; d < 3; d++) {
            prod p;
            prod_new(&p, shapes[s][0], shapes[s][1], shapes[s][2], dts[d], s == 2,
                     90 + (uint64_t)s);
            int64_t parts;
            run_split(&p, nvrtc && d == 1, NULL, &parts);
            split += parts > 1;
            if (d == 0)
                printf("nf4_gemv split %lld x %lld x %lld: %lld parts\n", (long long)p.M,
                       (long long)p.K, (long long)p.N, (long long)parts);
            prod_free(&p);
        }
    ck_assert_int_ge(split, 20); /* most shapes split */
}
END_TEST

/* Bugs planted in the split's text, each caught: a part's rows one off, the barrier before the
 * warps' sums are read, the parts added in the reverse order (within the bound, not the
 * stated order's bits). */
START_TEST(split_planted_bugs_are_caught) {
    static const gemv_plant plants[] = {
        {"k_lo = part * ", "k_lo = 1 + part * ", "a part's first row one off"},
        {"__syncthreads();\n    for (int i = threadIdx.x;", "\n    for (int i = threadIdx.x;",
         "the barrier before the warps' sums are read"},
        {"for (int p = 1; p < %lld; p++) s += scratch[p * %lld + i];",
         "for (int p = %lld - 1; p >= 1; p--) s += scratch[p * %lld + i]; (void)%lld; (void)%lld;",
         "the parts added in reverse order"},
    };
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        prod p;
        prod_new(&p, 3, 300, 192, SN_F32, false, 95);
        int64_t parts;
        bool ok = run_split(&p, false, &plants[i], &parts);
        printf("planted (%s): %s\n", plants[i].what, ok ? "MISSED" : "caught");
        ck_assert_msg(parts > 2 && !ok, "planted bug not caught: %s", plants[i].what);
        prod_free(&p);
    }
}
END_TEST

/* The CPU keeps one kernel (its target has no split_decode: the bits of llvm_gemv above), and
 * the LLVM backend refuses the CUDA target's parts with a message naming the cause. */
START_TEST(cpu_keeps_one_kernel) {
    if (!have_jit("nf4_gemv")) return;
    prod p;
    prod_new(&p, 1, 96, 128, SN_F32, false, 97);
    sn_target ts[2] = {sn_target_cpu(), sn_target_cuda(80)};
    sn_jit *j = new_jit(0);
    for (int i = 0; i < 2; i++) {
        sn_program *prog;
        sn_err e;
        ck_assert_msg(sn_pipeline_kernels(p.g, &(sn_pipeline_opts){.target = &ts[i]}, &prog, NULL,
                                          &e) == SN_OK, "%s", e.msg);
        sn_kernel *k = NULL;
        for (int q = 0; q < prog->n_kernels && !k; q++)
            if (prog->kernels[q]->kind == SN_KER_GEMV) k = prog->kernels[q];
        ck_assert(k && k->stage == (i ? SN_SUM_PARTIAL : SN_SUM_WHOLE));
        sn_cpu_kernel_fn fn;
        sn_status st = sn_jit_compile(j, &k, 1, &fn, &e);
        if (i) /* a part */
            ck_assert_msg(st == SN_ERR_UNSUPPORTED && strstr(e.msg, "decode split") &&
                              strstr(e.msg, "split_decode"), "%d: %s", st, e.msg);
        else
            ck_assert_msg(st == SN_OK, "%s", e.msg);
        sn_program_free(prog);
    }
    sn_jit_free(j);
    prod_free(&p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("nf4_gemv");
    TCase *t = tcase_create("nf4_gemv");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, fuse_rule);
    tcase_add_test(t, llvm_gemv);
    tcase_add_test(t, cuda_gemv);
    tcase_add_test(t, split_rule);
    tcase_add_test(t, cpu_keeps_one_kernel);
    tcase_add_test(t, cuda_gemv_split);
    tcase_add_test(t, split_planted_bugs_are_caught);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
