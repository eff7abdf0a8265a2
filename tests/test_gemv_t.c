/* test_gemv_t.c: the few-row product (kernel.h: SN_KER_GEMV) with W stored (N, K) (LLaMA's
 * x @ W^T: codegen/llvm/llvm_gemv_t.c, codegen/cuda/cuda_gemv_t.c) in NF4, and with 16-bit
 * weights (W16: an f32 cast of a bf16 or f16 value) in both layouts: the fuse rule that makes
 * it, the CPU kernel at 16, 8 and 4 lanes split over uneven parts, the CUDA kernels (one, and
 * the decode split's PARTIAL and FINISH) on the SIMT simulator in both thread orders, against
 * the reference interpreter within the bound (gemv_check.c) and, transposed, bit for bit
 * against the order kernel.h states; NVRTC for sm_75, sm_80 and sm_90 without spills; bugs
 * planted in the CUDA text caught. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "codegen/llvm/llvm.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "sim/sim.h"
#include "train/generate.h"
#include "train/train.h"
#include "codegen_util.h"
#include "gemv_check.h"
#include "harness.h"

/* M 1 .. 8; K odd, K a multiple of 8 but not of 64 (96, 600, 40), of 64 (64, 576, 1024), K
 * longer than CUDA's shared tile at M = 8 (600); N below, at and past multiples of 64. */
static const int64_t shapes[][3] = {{1, 37, 192}, {3, 300, 192}, {8, 64, 128}, {7, 96, 320},
                                    {5, 37, 50},  {2, 33, 77},   {1, 130, 30}, {8, 600, 64},
                                    {4, 70, 64},  {6, 45, 128},  {1, 576, 192}, {2, 1024, 70}};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* The variants: NF4 transposed (x f32, bf16, f16), W16 (K, N) and transposed (bf16, f16). */
typedef struct {
    bool tb, w16;
    sn_dtype dt;
} variant;
static const variant variants[] = {
    {true, false, SN_F32}, {true, false, SN_BF16}, {true, false, SN_F16},
    {false, true, SN_BF16}, {false, true, SN_F16}, {true, true, SN_BF16}, {true, true, SN_F16},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

static void new_variant(prod *p, int s, int v, uint64_t seed) {
    prod_new_as(p, shapes[s][0], shapes[s][1], shapes[s][2], variants[v].dt, s == 2, seed,
                variants[v].tb, variants[v].w16);
}

/* ---- the fuse rule ---- */

/* x (M, 96) @ W^T (NF4 W (128, 96)), x (M, 96) @ f32(W16) in both layouts, each + b, compiled
 * for the CPU: at M <= 8 one gemv kernel reads the source (no dequantize or cast kernel, no
 * GEMM, the f32 weight without a value), at M = 9 the dequantize or cast kernel and the GEMM.
 * Run on the CPU device: within the bound of the interpreter. */
START_TEST(fuse_rule) {
    if (!have_jit("gemv_t")) return;
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    const int64_t Ms[] = {1, 8, 9};
    const variant vs[] = {{true, false, SN_F32}, {false, true, SN_BF16}, {true, true, SN_F16}};
    for (int v = 0; v < 3; v++)
        for (int i = 0; i < 3; i++)
            check_fuse_rule(d, Ms[i], vs[v].dt, vs[v].tb, vs[v].w16, 80 + (uint64_t)i);
    sn_device_free(d);
}
END_TEST

/* ---- the CPU kernel ---- */

/* Every shape and variant at 16, 8 and 4 lanes, whole and in three uneven parts into
 * NaN-poisoned outputs: within the bound, the bits of 16 lanes whole everywhere, and
 * transposed the bits of kernel.h's order (16 sums added pairwise). */
START_TEST(llvm_gemv) {
    if (!have_jit("gemv_t")) return;
    const int lanes[] = {16, 8, 4};
    sn_jit *j[3];
    for (int l = 0; l < 3; l++) j[l] = new_jit(lanes[l]);
    for (int s = 0; s < N_SHAPES; s++)
        for (int v = 0; v < N_VARIANTS; v++) {
            prod p;
            new_variant(&p, s, v, 60 + (uint64_t)s);
            sn_kernel k = prod_kernel(&p);
            cpu_lanes_and_parts(&p, &k, j, lanes, 3);
            prod_free(&p);
        }
    for (int l = 0; l < 3; l++) sn_jit_free(j[l]);
}
END_TEST

/* ---- the CUDA kernels ---- */

/* Every shape and variant as one kernel on the simulator, forward and reversed thread order
 * (shared memory poisoned), into NaN-poisoned outputs: within the bound, the same bits in both
 * orders, transposed the stated order's bits; NVRTC for sm_75, sm_80 and sm_90 (the bf16
 * variants) without spills or stack; two transposed shapes profiled (sim.h's counts printed):
 * at least 40% of the bytes of the sectors the loads move used, shared memory at most 2
 * wavefronts a request. */
START_TEST(cuda_gemv) {
    bool nvrtc = have_nvrtc();
    sn_target t = sn_target_cuda(80);
    for (int s = 0; s < N_SHAPES; s++)
        for (int v = 0; v < N_VARIANTS; v++) {
            prod p;
            new_variant(&p, s, v, 70 + (uint64_t)s);
            sn_kernel k = prod_kernel(&p);
            const sn_kernel *kp = &k;
            sn_cuda_source cs;
            sn_err e;
            ck_assert_msg(sn_cuda_render(&kp, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            if (nvrtc && variants[v].dt == SN_BF16) nvrtc_no_spills(&cs, 1, p.M, p.K, p.N);
            sn_sim_module *h = sim_both_orders(&p, &k, &t, &cs, "test_gemv_t");
            if (h && (s == 3 || s == 10) && (v == 0 || v == 5)) { /* 8 divides K, transposed, NF4 and W16: profiled */
                char what[64], flags[256];
                prod_what(&p, what, sizeof what);
                sn_sim_profile prof;
                double used = profile_run(&p, &k, &t, &cs, &prof, flags, sizeof flags);
                double sh = (double)prof.sh_wavefronts / (double)prof.sh_ideal;
                printf("%s %lld x %lld x %lld: %lld load requests, %lld sectors, %.0f%% of their "
                       "bytes used; shared %lld wavefronts for %lld ideal (%.2fx); %s\n", what,
                       (long long)p.M, (long long)p.K, (long long)p.N, prof.ld_requests,
                       prof.ld_sectors, 100 * used, prof.sh_wavefronts, prof.sh_ideal, sh,
                       flags[0] ? flags : "no verdicts");
                /* measured: 51-100% of the sectors' bytes; shared 1.00-1.07x, NF4 at M = 1
                   1.88x (the levels' reads; 4.6-5.9x before xs's padding word every 32) */
                ck_assert_msg(used >= 0.4 && sh <= 2.0, "%s: %.0f%% of the sectors' bytes used, "
                              "shared %.2fx the ideal wavefronts", what, 100 * used, sh);
            }
            if (h) sn_sim_module_free(h);
            sn_cuda_source_free(&cs);
            prod_free(&p);
            if (!h) return;
        }
}
END_TEST

/* ---- the decode split ---- */

/* Every shape and variant split as the CUDA target splits it (run_split: the parts in order,
 * the stated order's bits, both thread orders; NVRTC for the bf16 variants). */
START_TEST(cuda_gemv_split) {
    bool nvrtc = have_nvrtc();
    int split = 0;
    for (int s = 0; s < N_SHAPES; s++)
        for (int v = 0; v < N_VARIANTS; v++) {
            prod p;
            new_variant(&p, s, v, 90 + (uint64_t)s);
            int64_t parts;
            run_split(&p, nvrtc && variants[v].dt == SN_BF16, NULL, &parts);
            split += parts > 1;
            char what[64];
            if (variants[v].dt != SN_F16)
                printf("gemv split %s %lld x %lld x %lld: %lld parts\n",
                       prod_what(&p, what, sizeof what), (long long)p.M, (long long)p.K,
                       (long long)p.N, (long long)parts);
            prod_free(&p);
        }
    ck_assert_int_ge(split, 40); /* most shapes split */
}
END_TEST

/* The LLaMA decode products transposed (TinyLlama 1.1B: 2048, MLP 5632, 4 kv heads of 64;
 * SmolLM2-135M: 576, MLP 1536, 3 kv heads of 64), NF4 and W16: at least 264 blocks (two waves
 * of 132 SMs) or parts of the fewest k (32: a short K), at M = 8 compiled for sm_75, sm_80 and sm_90 without spills. */
START_TEST(split_rule) {
    bool nvrtc = have_nvrtc();
    static const int64_t kn[][2] = {
        {2048, 2048}, {2048, 256}, {2048, 5632}, {5632, 2048}, /* TinyLlama: (K, N) */
        {576, 576},   {576, 192},  {576, 1536},  {1536, 576},  /* SmolLM2-135M */
    };
    sn_target t = sn_target_cuda(90);
    for (size_t i = 0; i < sizeof kn / sizeof kn[0]; i++)
        for (int w16 = 0; w16 < 2; w16++)
            for (int M = 1; M <= 8; M += 7) {
                sn_graph *g = sn_graph_new();
                sn_node *x = sn_input(g, "x", w16 ? SN_F32 : SN_BF16, SN_SHAPE(M, kn[i][0]));
                sn_shape ws = SN_SHAPE(kn[i][1], kn[i][0]);
                sn_node *w = w16 ? sn_cast(g, sn_param(g, "w", SN_BF16, ws, SN_INIT_NORMAL, 0.02f),
                                           SN_F32)
                                 : sn_param_nf4(g, "w", SN_BF16, ws);
                sn_node *y = sn_matmul_t(g, x, w, false, true);
                ck_assert_msg(y, "%s", sn_graph_error(g));
                sn_graph_add_output(g, y);
                sn_program *prog;
                sn_err e;
                ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &prog,
                                                  NULL, &e) == SN_OK, "%s", e.msg);
                const sn_kernel *ks[2];
                int n = 0;
                for (int k = 0; k < prog->n_kernels && n < 2; k++)
                    if (prog->kernels[k]->kind == SN_KER_GEMV) ks[n++] = prog->kernels[k];
                ck_assert_int_ge(n, 1);
                int64_t parts = sn_split_parts(ks[0]), blocks = sn_cuda_launch_dims(ks[0], &t).grid[0];
                if (M == 1)
                    printf("%s 1 x %lld x %lld: %lld parts of %lld, %lld blocks (one kernel: "
                           "%lld)\n", ks[0]->name, (long long)kn[i][0], (long long)kn[i][1],
                           (long long)parts, (long long)sn_split_len(ks[0]), (long long)blocks,
                           (long long)(kn[i][1] + 63) / 64);
                ck_assert_msg(blocks >= SN_DECODE_BLOCKS || sn_split_len(ks[0]) == 32,
                              "K %lld N %lld: %lld blocks, parts of %lld", (long long)kn[i][0],
                              (long long)kn[i][1], (long long)blocks,
                              (long long)sn_split_len(ks[0]));
                if (nvrtc && M == 8) {
                    sn_cuda_source cs;
                    ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
                    nvrtc_no_spills(&cs, n, M, kn[i][0], kn[i][1]);
                    sn_cuda_source_free(&cs);
                }
                sn_program_free(prog);
                sn_graph_free(g);
            }
}
END_TEST

/* Bugs planted in the transposed split's text, each caught: a wrong block scale (the next
 * block's), the lanes' butterfly in the other order (within the bound: only the stated
 * order's bits catch it), the barrier after x's tile is loaded, the barrier before the next
 * tile overwrites it (K longer than a tile), a part's first k one lane off. */
START_TEST(planted_bugs_are_caught) {
    static const struct {
        gemv_plant pl;
        int64_t M, K, N;
    } plants[] = {
        {{"b = f / 64; /* the block", "b = f / 64 + 1; /* the block", "the next block's scale"},
         3, 512, 192},
        {{"for (int o = 16; o >= 1; o /= 2)", "for (int o = 1; o <= 16; o *= 2)",
          "the butterfly's order reversed"}, 3, 512, 192},
        {{"__syncthreads();\n        /* this lane", "\n        /* this lane", "the barrier after x's tile"}, 3, 512,
         192},
        {{"__syncthreads(); /* the last tile", "/* the last tile",
          "the barrier before x's next tile"}, 8, 8192, 2112}, /* parts of 2 tiles */
        {{"k_lo = part * ", "k_lo = 8 + part * ", "a part's first k one lane off"}, 3, 512, 192},
    };
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        prod p;
        prod_new_as(&p, plants[i].M, plants[i].K, plants[i].N, SN_F32, false, 95, true, false);
        int64_t parts;
        bool ok = run_split(&p, false, &plants[i].pl, &parts);
        printf("planted (%s): %s (%lld parts)\n", plants[i].pl.what, ok ? "MISSED" : "caught",
               (long long)parts);
        ck_assert_msg(parts >= 2 && !ok, "planted bug not caught: %s", plants[i].pl.what);
        prod_free(&p);
    }
}
END_TEST

/* ---- the decode programs ---- */

enum { DV = 64, DRANK = 4 };

typedef struct {
    bool llama;
} kv_model;

static sn_status kv_build(sn_graph *g, int b, int t, bool decode, void *user, sn_err *e) {
    const kv_model *m = user;
    sn_gpt2_lora l = {.lora = {.rank = DRANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    if (m->llama) {
        sn_llama_config c;
        ck_assert(sn_llama_config_find("llama-tiny", &c));
        c.vocab = DV;
        return sn_llama_build_kv_lora(g, &c, b, t, decode, &l, e);
    }
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = DV;
    return sn_gpt2_build_kv(g, &c, b, t, decode, &l, e);
}

/* A LoRA trainer of the tiny model (2 by 16 tokens), its base NF4 (QLoRA) or bf16, 3 steps on
 * the CPU device d. */
static sn_trainer *lora_trainer(sn_graph *g, const kv_model *m, bool nf4, sn_device *d) {
    sn_err e;
    sn_gpt2_lora l = {.lora = {.rank = DRANK, .alpha = 8}, .targets = SN_GPT2_LORA_ALL};
    sn_status st;
    if (m->llama) {
        sn_llama_config c;
        ck_assert(sn_llama_config_find("llama-tiny", &c));
        c.vocab = DV;
        sn_llama lm;
        st = sn_llama_build_lora(g, &c, 2, 16, &l, &lm, &e);
    } else {
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        c.vocab = DV;
        sn_gpt2 gm;
        st = sn_gpt2_build_lora(g, &c, 2, 16, &l, &gm, &e);
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.nf4 = nf4;
    o.precision = nf4 ? SN_PRECISION_FP32 : SN_PRECISION_BF16;
    o.base16 = !nf4;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_trainer *t = sn_test_trainer(g, d, 5, 8, 1e-2f);
    int32_t x[32], y[32];
    for (int s = 0; s < 3; s++) {
        sn_test_rule_batch(x, y, 32, DV, 100 + (uint64_t)s);
        sn_step_stats ss;
        ck_assert_msg(sn_trainer_step(t, x, y, &ss, &e) == SN_OK, "%s", e.msg);
    }
    return t;
}

/* Batch-1 decoding of a LoRA model over an NF4 (QLoRA) or bf16 base on the CPU device: every
 * frozen linear weight is read by a few-row product (LLaMA's transposed, GPT-2's not; NF4 bytes
 * or the bf16 value), with no dequantize kernel, no kernel writing a widened weight, and no
 * value for the unpacked or widened weight. Its logits (teacher-forced, every token through a
 * decode step) are those of a 12-token prefill (16 rows: the dequantize or cast kernel and the
 * GEMM) within f32 rounding (2e-5 of |logit| + 1, as test_qlora's), and the greedy tokens the
 * same. */
START_TEST(decode_programs) {
    if (!have_jit("gemv_t")) return;
    sn_err e;
    sn_device *d;
    ck_assert_msg(sn_cpu_device_new(2, &d, &e) == SN_OK, "%s", e.msg);
    static const int32_t toks[16] = {3, 17, 42, 5, 63, 0, 9, 9, 30, 11, 8, 2, 60, 33, 1, 7};
    for (int c = 0; c < 4; c++) {
        kv_model m = {.llama = c % 2 == 0};
        bool nf4 = c < 2;
        sn_graph *g = sn_graph_new();
        sn_trainer *t = lora_trainer(g, &m, nf4, d);
        sn_llama_config lc;
        ck_assert(sn_llama_config_find("llama-tiny", &lc));
        sn_generator_opts go = {.build = kv_build, .user = &m, .ctx = m.llama ? lc.ctx : 32,
                                .n_layer = 2,
                                .batch = 1, .nf4 = nf4, .base16 = nf4 ? (sn_dtype)0 : SN_BF16};
        sn_generator *gen;
        ck_assert_msg(sn_generator_new(&go, d, &gen, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_generator_load(gen, sn_trainer_weights(t), &e) == SN_OK, "%s", e.msg);
        const sn_program *p = sn_generator_decode_program(gen);
        int stored = 0, gemv = 0, tb = 0, unpack = 0, kept = 0;
        for (int i = 0; i < p->g->n_nodes; i++) {
            const sn_node *n = p->g->nodes[i];
            stored += n->op == SN_OP_PARAM && n->dtype == (nf4 ? SN_U8 : SN_BF16);
            bool widened = n->op == SN_OP_CAST && n->in[0]->op == SN_OP_PARAM &&
                           n->in[0]->dtype == SN_BF16;
            kept += (n->op == SN_OP_DEQUANT_NF4 || widened) && p->value_of[n->id] >= 0;
        }
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->kind == SN_KER_GEMV) {
                sn_gemv gv = sn_gemv_of(ker);
                gemv += gv.source == (nf4 ? SN_GEMV_NF4 : SN_GEMV_W16);
                tb += gv.tb;
            }
            unpack += ker->kind == SN_KER_DEQUANT;
            for (int o = 0; o < ker->n_out; o++)
                unpack += ker->args[o]->op == SN_OP_CAST && ker->args[o]->in[0]->op == SN_OP_PARAM &&
                          ker->args[o]->in[0]->dtype == SN_BF16;
        }
        const char *what = c == 0 ? "LLaMA QLoRA" : c == 1 ? "GPT-2 QLoRA" : c == 2 ? "LLaMA bf16 base" : "GPT-2 bf16 base";
        printf("%s decode program: %d %s weights, %d few-row products reading them (%d "
               "transposed), %d kernels unpacking or widening a weight, %d kept\n", what, stored,
               nf4 ? "NF4" : "bf16", gemv, tb, unpack, kept);
        ck_assert_msg(stored > 0 && gemv == stored && unpack == 0 && kept == 0,
                      "%s: %d weights, %d products, %d unpacking kernels, %d kept", what, stored,
                      gemv, unpack, kept);
        ck_assert_msg(m.llama ? tb >= stored - 1 : tb == 0, "%s: %d transposed", what, tb);
        enum { ROWS1 = 16, ROWS12 = 5 };
        float a[ROWS1 * DV], b[ROWS12 * DV];
        ck_assert_msg(sn_generator_forced(gen, toks, 16, 1, a, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_generator_forced(gen, toks, 16, 12, b, &e) == SN_OK, "%s", e.msg);
        double worst = 0;
        for (int r = 0; r < ROWS12; r++)
            for (int v = 0; v < DV; v++) {
                double x = a[(11 + r) * DV + v], want = b[r * DV + v];
                double err = fabs(x - want), tol = 2e-5 * (fabs(want) + 1);
                ck_assert_msg(err <= tol, "%s: logit %d after token %d: %.9g decoding, %.9g after "
                              "the prefill", what, v, 11 + r, x, want);
                worst = fmax(worst, err / tol);
            }
        int argmax_ok = 0;
        for (int r = 0; r < ROWS12; r++) {
            int ia = 0, ib = 0;
            for (int v = 1; v < DV; v++) {
                if (a[(11 + r) * DV + v] > a[(11 + r) * DV + ia]) ia = v;
                if (b[r * DV + v] > b[r * DV + ib]) ib = v;
            }
            argmax_ok += ia == ib;
        }
        ck_assert_int_eq(argmax_ok, ROWS12); /* the greedy tokens */
        printf("%s: decoded logits within %.2g of the tolerance of the prefill's\n", what, worst);
        sn_generator_free(gen);
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    sn_device_free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemv_t");
    TCase *t = tcase_create("gemv_t");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, fuse_rule);
    tcase_add_test(t, decode_programs);
    tcase_add_test(t, llvm_gemv);
    tcase_add_test(t, cuda_gemv);
    tcase_add_test(t, split_rule);
    tcase_add_test(t, cuda_gemv_split);
    tcase_add_test(t, planted_bugs_are_caught);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
