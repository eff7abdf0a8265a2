/* test_generate_cuda.c: generation's programs through the CUDA path without a GPU: GPT-2
 * 124M's decode and prefill programs (train/generate.h) rendered to CUDA C and compiled by
 * NVRTC for sm_75, sm_80 and sm_90 without spills; and tiny GPT-2 generating on the stand-in
 * driver (tests/standin: runtime/cuda over host memory, kernels on the SIMT simulator) with the
 * CPU device's logits at every position (1e-5) and its greedy tokens. A machine without the
 * CUDA toolkit skips both, saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cuda/cuda.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/device.h"
#include "train/generate.h"
#include "harness.h"

static bool have_nvrtc(void) {
    sn_cuda_module m;
    sn_err e;
    sn_status st = sn_nvrtc_compile("extern \"C\" __global__ void k() {}\n", "probe.cu", 80, &m, &e);
    sn_cuda_module_free(&m);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_generate_cuda: %s: skipped\n", e.msg);
        return false;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return true;
}

/* GPT-2 124M's prefill (B = 1, T = 64) or decode graph compiled as the generator compiles it. */
static sn_program *gpt2_program(bool decode, const sn_target *t, sn_graph **g) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("gpt2", &c));
    *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(sn_gpt2_build_kv(*g, &c, 1, decode ? 1 : 64, decode, NULL, &e) == SN_OK, "%s", e.msg);
    sn_program *p;
    sn_pipeline_opts o = {.target = t, .fuse_attention = !decode};
    ck_assert_msg(sn_compile(*g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

/* Every generated kernel of each program (not GEMMs) in one source per arch: compiled, no
 * spills, no stack. */
START_TEST(nvrtc_gpt2_generation_programs) {
    if (!have_nvrtc()) return;
    static const int arch[] = {75, 80, 90};
    for (int a = 0; a < 3; a++)
        for (int decode = 0; decode < 2; decode++) {
            sn_target t = sn_target_cuda(arch[a]);
            sn_graph *g;
            sn_program *p = gpt2_program(decode, &t, &g);
            const sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
            int n = 0, attention = 0;
            for (int i = 0; i < p->n_kernels; i++)
                if (p->kernels[i]->kind != SN_KER_GEMM) {
                    attention += p->kernels[i]->kind == SN_KER_ATTENTION;
                    ks[n++] = p->kernels[i];
                }
            /* the prefill's flash attention; the decode's attention over the cache, a kernel a
               layer split in two (kernel.h: the decode split: 12 slices at B = 1) */
            ck_assert_int_gt(attention, 0);
            int cache = 0;
            for (int i = 0; i < n; i++) cache += ks[i]->kind == SN_KER_ATTENTION && ks[i]->anchor->op == SN_OP_ATTENTION_CACHE;
            ck_assert_int_eq(cache, decode ? 24 : 0);
            if (decode) ck_assert_int_eq(attention, 24);
            sn_cuda_source cs;
            sn_cuda_module m;
            sn_err e;
            ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
            sn_status st = sn_nvrtc_compile(cs.src, decode ? "decode.cu" : "prefill.cu", arch[a], &m, &e);
            if (st) printf("%s\n", m.log ? m.log : "");
            ck_assert_msg(st == SN_OK, "%s\n%s", e.msg, m.log ? m.log : "");
            ck_assert_int_eq(m.n_info, cs.n_functions);
            for (int i = 0; i < n; i++) {
                const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[i]);
                ck_assert_msg(in, "no ptxas report for %s", cs.fn[i]);
                ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 && in->stack_bytes == 0,
                              "%s spills on sm_%d", in->name, arch[a]);
            }
            printf("test_generate_cuda: gpt2 %s program for sm_%d: %d generated kernels (%d "
                   "kernels in all) as %d functions, compiled by NVRTC without spills\n",
                   decode ? "decode" : "prefill (T=64)", arch[a], n, p->n_kernels, cs.n_functions);
            sn_cuda_module_free(&m);
            sn_cuda_source_free(&cs);
            free(ks);
            sn_program_free(p);
            sn_graph_free(g);
        }
}
END_TEST

/* ---- on the stand-in driver ---- */

static sn_status init_weights(void *src, const sn_node *p, float *data, sn_err *e) {
    (void)src, (void)e;
    sn_param_init(p, data, 7);
    for (int64_t i = 0; p->rank == 2 && i < sn_numel(p); i++) data[i] *= 20; /* distinct logits */
    return SN_OK;
}

static sn_status build_kv(sn_graph *g, int B, int T, bool decode, void *user, sn_err *e) {
    return sn_gpt2_build_kv(g, user, B, T, decode, NULL, e);
}

static void run_on(sn_device *d, sn_gpt2_config *c, const int32_t *tok, int n, int n_prompt,
                   float *logits, int32_t *greedy, int n_new) {
    sn_generator *gen;
    sn_err e;
    sn_generator_opts o = {.build = build_kv, .user = c, .ctx = c->ctx, .n_layer = c->n_layer, .batch = 1};
    ck_assert_msg(sn_generator_new(&o, d, &gen, &e) == SN_OK, "%s", e.msg);
    const sn_program *dp = sn_generator_decode_program(gen);
    int parts = 0; /* the decode split's attention kernels (kernel.h): on the CUDA device only */
    for (int i = 0; i < dp->n_kernels; i++)
        parts += dp->kernels[i]->kind == SN_KER_ATTENTION && dp->kernels[i]->stage != SN_SUM_WHOLE;
    ck_assert_int_eq(parts, d->target.kind == SN_TARGET_CUDA ? 2 * c->n_layer : 0);
    ck_assert_msg(sn_generator_load(gen, (sn_weight_source){init_weights, NULL}, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_generator_forced(gen, tok, n, n_prompt, logits, &e) == SN_OK, "%s", e.msg);
    sn_sample_opts so = {.n_new = n_new};
    ck_assert_msg(sn_generator_generate(gen, &tok, &n_prompt, &so, greedy, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    sn_generator_free(gen);
}

START_TEST(standin_generation_is_the_cpu_device) {
    setenv("SN_LIBCUDA", SN_TEST_STANDIN_CUDA, 1);
    setenv("SN_LIBNVRTC", SN_TEST_STANDIN_NVRTC, 1);
    setenv("SN_LIBCUBLASLT", SN_TEST_STANDIN_CUBLASLT, 1);
    sn_cuda_api api = {0};
    sn_err e;
    int major = 0, minor = 0;
    bool ok = sn_nvrtc_version(&api.nvrtc, &major, &minor, &e) == SN_OK;
    sn_cuda_api_unload(&api);
    if (!ok) {
        printf("test_generate_cuda: no NVRTC for the stand-in to wrap: skipped\n");
        return;
    }
    enum { N = 20, P = 4, NEW = 12, V = 64 };
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    int32_t tok[N], ga[NEW], gb[NEW];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 11 + 3) % V);
    float la[(N - P + 1) * V], lb[(N - P + 1) * V];
    sn_device *cpu, *gpu;
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    char cache[256];
    snprintf(cache, sizeof cache, "%s/sinter_generate_cuda_%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    sn_cuda_opts co = {.cache_dir = cache};
    ck_assert_msg(sn_cuda_device_new_opts(0, &co, &gpu, &e) == SN_OK, "%s", e.msg);
    run_on(cpu, &c, tok, N, P, la, ga, NEW);
    run_on(gpu, &c, tok, N, P, lb, gb, NEW);
    double a[(N - P + 1) * V], b[(N - P + 1) * V];
    for (int i = 0; i < (N - P + 1) * V; i++) a[i] = la[i], b[i] = lb[i];
    for (int i = 0; i <= N - P; i++) {
        char what[64];
        snprintf(what, sizeof what, "stand-in logits at position %d", P - 1 + i);
        sn_check_close(what, b + i * V, a + i * V, V, 1e-5, 1e-3);
    }
    for (int i = 0; i < NEW; i++)
        ck_assert_msg(ga[i] == gb[i], "greedy token %d: %d on the cpu, %d on the stand-in", i, ga[i], gb[i]);
    printf("test_generate_cuda: tiny GPT-2 on the stand-in CUDA driver: %d positions' logits "
           "and %d greedy tokens as on the CPU device\n", N - P + 1, NEW);
    sn_device_free(cpu);
    sn_device_free(gpu);
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", cache);
    ck_assert_int_eq(system(rm), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("generate_cuda");
    TCase *tc = tcase_create("generate_cuda");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, nvrtc_gpt2_generation_programs);
    tcase_add_test(tc, standin_generation_is_the_cpu_device);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
