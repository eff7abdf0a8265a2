/* test_cuda.c: the CUDA backend on a machine without a GPU: every generated kernel of GPT-2
 * (and of the LLaMA example) training (all but GEMMs and attention) compiled by NVRTC for sm_75, sm_80 and sm_90 as one
 * module (no spills, no stack), and the very text NVRTC gets run on the CPU by the SIMT simulator
 * (sim/sim.h) with the launch dims of sn_cuda_launch_dims, against the reference interpreter. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "codegen/cuda/cuda.h"
#include "sim/sim.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "interp/interp.h"
#include "ir/nf4.h"
#include "runtime/gemm_lowp.h"
#include "support/rng.h"
#include "train/train.h"
#include "examples/llama/llama.h"
#include "harness.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static sn_program *fuse(sn_graph *g) {
    sn_err e;
    sn_program *p;
    ck_assert_msg(sn_verify(g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

/* The program's kernels of `kind` into ks (p->n_kernels entries); returns how many.
 * SN_KER_KIND_COUNT: every kind the CUDA C renderer generates (not GEMMs). */
static int kernels_of(const sn_program *p, sn_kernel_kind kind, const sn_kernel **ks) {
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        sn_kernel_kind kk = p->kernels[i]->kind;
        if (kind == SN_KER_KIND_COUNT ? kk != SN_KER_GEMM : kk == kind)
            ks[n++] = p->kernels[i];
    }
    return n;
}

static int pointwise(const sn_program *p, const sn_kernel **ks) {
    return kernels_of(p, SN_KER_POINTWISE, ks);
}

static sn_target sm(int arch) { return sn_target_cuda(arch); }

/* The arch render() renders for: sm_80, or (a test that sets it) another. */
static int render_sm = 80;

/* row_cache: the target's (sn_target row_cache: row kernels keep their rows in registers) */
static sn_cuda_source render_cached(const sn_kernel *const *ks, int n, bool row_cache) {
    sn_cuda_source s;
    sn_err e;
    sn_target t = sm(render_sm);
    t.row_cache = row_cache;
    ck_assert_msg(sn_cuda_render(ks, n, &t, &s, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(s.n_kernels, n);
    return s;
}

static sn_cuda_source render(const sn_kernel *const *ks, int n) { return render_cached(ks, n, true); }

/* GPT-2 `name`'s training graph at B x T; with the LM head in chunks of chunk_rows rows (0:
 * whole); loss_only: the loss its one output, as sinter train compiles it (training reads no
 * logits), else the model's outputs kept (the logits too). */
static sn_graph *gpt2_training_with(const char *name, int B, int T, sn_precision precision,
                                    int64_t chunk_rows, bool loss_only) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(name, &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    if (loss_only) {
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, m.loss);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = precision;
    o.chunk_logits = chunk_rows;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert(!chunk_rows || st.logits_chunks > 1);
    return g;
}

static sn_graph *gpt2_training_at(const char *name, int B, int T, sn_precision precision) {
    return gpt2_training_with(name, B, T, precision, 0, false);
}

static sn_graph *gpt2_training(const char *name, int B, int T) {
    return gpt2_training_at(name, B, T, SN_PRECISION_FP32);
}

/* Whether this build has NVRTC; if not, checks that saying so is what compiling does. */
static bool have_nvrtc(void) {
    sn_cuda_module m;
    sn_err e;
    const char *src = "extern \"C\" __global__ void k() {}\n";
    sn_status st = sn_nvrtc_compile(src, "probe.cu", 80, &m, &e);
    sn_cuda_module_free(&m);
    if (st == SN_ERR_UNSUPPORTED) {
        ck_assert_msg(strstr(e.msg, "built without the CUDA toolkit"), "%s", e.msg);
        printf("test_cuda: %s: skipping the NVRTC checks\n", e.msg);
        return false;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return true;
}

/* ---- the emitter, the renderer, the ptxas report ---- */

START_TEST(emitter_indents_blocks) {
    sn_cu_text t = {0};
    sn_cu_emitf(&t, "void f(int n)");
    sn_cu_emitf(&t, "{");
    sn_cu_emitf(&t, "for (int i = 0; i < %d; i++) {", 3);
    sn_cu_emitf(&t, "g(i);");
    sn_cu_emitf(&t, "}");
    sn_cu_emitf(&t, "%s", "");
    sn_cu_emitf(&t, "}");
    char *s = sn_cu_finish(&t);
    ck_assert_str_eq(s, "void f(int n)\n{\n    for (int i = 0; i < 3; i++) {\n        g(i);\n"
                        "    }\n\n}\n");
    free(s);
}
END_TEST

START_TEST(emitter_asserts_blocks_closed) { /* aborts: a block left open is a generator bug */
    sn_cu_text t = {0};
    sn_cu_emitf(&t, "if (x) {");
    free(sn_cu_finish(&t));
}
END_TEST

START_TEST(ptxas_report_parsed) {
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Function properties for helper\n"
        "ptxas         .     24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Compiling entry function 'k1_add' for 'sm_80'\n"
        "ptxas info    : Function properties for k1_add\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 14 registers, used 0 barriers, 376 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function 'k2_softmax' for 'sm_80'\n"
        "ptxas info    : Function properties for k2_softmax\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]\n"
        "ptxas info    : Compile time = 5.713 ms\n";
    sn_cuda_kernel_info info[4];
    ck_assert_int_eq(sn_ptxas_parse(log, info, 4), 2);
    ck_assert_str_eq(info[0].name, "k1_add");
    ck_assert_int_eq(info[0].registers, 14);
    ck_assert_int_eq(info[0].stack_bytes, 0); /* the helper's 24 bytes are not k1_add's */
    ck_assert_int_eq(info[0].shared_bytes, 0);
    ck_assert_str_eq(info[1].name, "k2_softmax");
    ck_assert_int_eq(info[1].registers, 255);
    ck_assert_int_eq(info[1].spill_store_bytes, 8);
    ck_assert_int_eq(info[1].spill_load_bytes, 12);
    ck_assert_int_eq(info[1].stack_bytes, 16);
    ck_assert_int_eq(info[1].shared_bytes, 4096);
    ck_assert_int_eq(sn_ptxas_parse(log, info, 1), 2); /* counts past cap, writes cap */
}
END_TEST

/* gelu(x + b) with b broadcast along the rows: one kernel whose text reads b at the column. */
static sn_graph *bias_gelu_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 8, 48));
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(48), SN_INIT_NORMAL, 1);
    sn_graph_add_output(g, sn_scale(g, sn_gelu(g, sn_add(g, x, b)), 0.5f));
    return g;
}

START_TEST(render_bias_gelu_text) {
    sn_graph *g = bias_gelu_graph();
    sn_program *p = fuse(g);
    const sn_kernel *ks[8];
    ck_assert_int_eq(pointwise(p, ks), 1);
    sn_cuda_source cs = render(ks, 1);
    const char *src = cs.src;
    printf("test_cuda: the bias + gelu kernel:\n%s", src);
    const char *want[] = {"#include \"" SN_CUDA_PRELUDE_NAME "\"", "extern \"C\" __global__",
                          "const int n = 1536;", "const int i1 = i % 48;",
                          "reinterpret_cast<const float4 *>(&in1[i1])", "sn_gelu(add_0_0)",
                          "0.5f * gelu_", "reinterpret_cast<float4 *>(&out0[i]) = make_float4(",
                          "SN_HOST_STUB("};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(src, want[i]), "missing \"%s\" in\n%s", want[i], src);
    ck_assert_str_eq(cs.fn[0], ks[0]->name);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

START_TEST(render_rejects_what_it_cannot) {
    sn_graph *g = sn_graph_new();
    sn_node *h = sn_input(g, "h", SN_F16, SN_SHAPE(4, 8));
    sn_graph_add_output(g, sn_exp(g, h));
    sn_program *p = fuse(g);
    ck_assert_int_eq(p->n_kernels, 1);
    sn_kernel attn = *p->kernels[0];
    attn.kind = SN_KER_ATTENTION;
    snprintf(attn.name, sizeof attn.name, "k9_attention_fwd");
    const sn_kernel *ks[2] = {p->kernels[0], &attn};
    sn_cuda_source cs;
    sn_err e;
    sn_target t = sm(80);
    /* an f16 pointwise kernel renders (f16 parameters; the value, read by no other
       instruction, rounded to f16 by its store) */
    ck_assert_msg(sn_cuda_render(&ks[0], 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(strstr(cs.src, "const sn_f16 *__restrict__ in0") &&
                  strstr(cs.src, "sn_f16 *__restrict__ out0") &&
                  strstr(cs.src, "rounded to f16 by its stores") && !strstr(cs.src, "sn_round_f16("),
                  "%s", cs.src);
    sn_cuda_source_free(&cs);
    /* an attention kernel without an attention op (tests/test_cuda_attention.c has real ones):
       a broken contract, the maker's bug (program/kernel_check.c) */
    ck_assert_int_eq(sn_cuda_render(&ks[1], 1, &t, &cs, &e), SN_ERR_INTERNAL);
    ck_assert_ptr_null(cs.src);
    ck_assert_msg(strstr(e.msg, ks[1]->name), "%s", e.msg);
    ck_assert_msg(strstr(e.msg, "needs an attention op as anchor"), "%s", e.msg);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Kernels that differ only in names are one function, launched by each kernel's own name
 * through fn[]; kernels that differ in a shape are two. */
START_TEST(render_identical_kernels_once) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 64));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(4, 64));
    sn_node *z = sn_input(g, "z", SN_F32, SN_SHAPE(4, 32));
    sn_graph_add_output(g, sn_gelu(g, x));
    sn_graph_add_output(g, sn_gelu(g, y));
    sn_graph_add_output(g, sn_gelu(g, z));
    sn_graph_add_output(g, sn_layernorm(g, x, sn_input(g, "w", SN_F32, SN_SHAPE(64)),
                                        sn_input(g, "b", SN_F32, SN_SHAPE(64)), 1e-5f));
    sn_graph_add_output(g, sn_layernorm(g, y, sn_input(g, "w2", SN_F32, SN_SHAPE(64)),
                                        sn_input(g, "b2", SN_F32, SN_SHAPE(64)), 1e-5f));
    sn_err e;
    sn_program *p; /* the gelu kernels apart (not joined: join_siblings) */
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.keep_siblings = true}, &p, NULL, &e) ==
                  SN_OK, "%s", e.msg);
    const sn_kernel *ks[16];
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    ck_assert_int_eq(n, 5);
    sn_cuda_source cs = render(ks, n);
    ck_assert_int_eq(cs.n_functions, 3);
    int same_gelu = 0, same_norm = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(strstr(cs.src, cs.fn[i]), "%s not in the text", cs.fn[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(cs.fn[i], cs.fn[j]) == 0)
                ks[i]->kind == SN_KER_ROW ? same_norm++ : same_gelu++;
    }
    ck_assert_int_eq(same_gelu, 1);
    ck_assert_int_eq(same_norm, 1);
    ck_assert_msg(strstr(cs.src, "also launched as"), "%s", cs.src);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- NVRTC ---- */

/* Every generated kernel of the GPT-2 training program (all but GEMMs), in one
 * source per arch, compiled cold; no spills, no stack frame; prints the time, the unique
 * functions and the widest kernel. */
static void nvrtc_program(sn_graph *g, const char *model, int B, int T, const int *arch, int n_arch) {
    sn_program *p = fuse(g);
    sn_err ej; /* the FINISH kernels joined into the next pair's launch, as a CUDA target has them */
    ck_assert_msg(sn_join_finish(p, &ej) == SN_OK, "%s", ej.msg);
    int joined = 0;
    for (int i = 0; i < p->n_kernels; i++) joined += p->kernels[i]->tail != NULL;
    ck_assert_int_gt(joined, 0);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 4));
    const sn_kernel **tmp = malloc(sizeof *ks * (size_t)(p->n_kernels + 4));
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    ck_assert_int_gt(n, 10);
    static const sn_kernel_kind kinds[4] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    sn_kernel opt[4]; /* the trainer's optimizer step over every parameter */
    for (int i = 0; i < 4; i++) {
        int64_t params = sn_graph_param_count(g);
        char name[16];
        snprintf(name, sizeof name, "opt_%d", i); /* AdamW writes the weights' 16-bit copies */
        opt[i] = sn_optim_kernel(kinds[i], params, params / 2,
                                 p->n_shadows ? p->shadows[0]->args[0]->dtype : SN_F32, name);
        ks[n++] = &opt[i];
    }
    for (int a = 0; a < n_arch; a++) {
        sn_target t = sm(arch[a]);
        sn_cuda_source cs;
        sn_err e;
        double t0 = now();
        ck_assert_msg(sn_cuda_render(ks, n, &t, &cs, &e) == SN_OK, "%s", e.msg);
        double t1 = now();
        clock_t c0 = clock();
        sn_cuda_module m;
        ck_assert_msg(sn_nvrtc_compile(cs.src, model, arch[a], &m, &e) == SN_OK, "%s", e.msg);
        double t2 = now(), cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
        ck_assert_int_gt((long)m.cubin_size, 0);
        ck_assert_int_eq(m.n_info, cs.n_functions);
        int max_regs = 0, max_shared = 0;
        const char *widest = "";
        for (int i = 0; i < n; i++) {
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[i]);
            ck_assert_msg(in, "no ptxas report for %s (%s):\n%s", cs.fn[i], ks[i]->name, m.log);
            ck_assert_msg(in->registers > 0 && in->registers <= 255, "%s: %d registers",
                          in->name, in->registers);
            ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 &&
                          in->stack_bytes == 0, "%s spills on sm_%d: %d bytes stored, %d "
                          "loaded, %d bytes of stack", in->name, arch[a], in->spill_store_bytes,
                          in->spill_load_bytes, in->stack_bytes);
            if (in->registers > max_regs) max_regs = in->registers, widest = in->name;
            if (in->shared_bytes > max_shared) max_shared = in->shared_bytes;
        }
        printf("test_cuda: %s training (B=%d, T=%d; %d kernels in all, %d with a joined FINISH) for "
               "sm_%d: %d generated kernels (%d row, %d reduce, %d gather, %d pointwise, %d attention, 4 optimizer) as %d "
               "functions; "
               "rendered in %.3f s, one NVRTC compilation in %.2f s (%.2f s of CPU): no spills, no "
               "stack, at most %d registers (%s), %d bytes of shared memory\n", model, B, T,
               p->n_kernels, joined, arch[a], n,
               kernels_of(p, SN_KER_ROW, tmp), kernels_of(p, SN_KER_REDUCE, tmp),
               kernels_of(p, SN_KER_GATHER, tmp), pointwise(p, tmp),
               kernels_of(p, SN_KER_ATTENTION, tmp), cs.n_functions, t1 - t0, t2 - t1, cpu, max_regs, widest, max_shared);
        sn_cuda_module_free(&m);
        sn_cuda_source_free(&cs);
    }
    free(ks);
    free(tmp);
    sn_program_free(p);
    sn_graph_free(g);
}

static void nvrtc_gpt2(const char *model, int B, int T, const int *arch, int n_arch) {
    if (have_nvrtc()) nvrtc_program(gpt2_training(model, B, T), model, B, T, arch, n_arch);
}

START_TEST(nvrtc_gpt2_124m) { nvrtc_gpt2("gpt2", 4, 1024, (const int[]){75, 80, 90}, 3); }
END_TEST

/* GPT-2 with dropout (its pointwise kernels and their backward: sn_dropout in the prelude),
 * bf16, for sm_75, sm_80 and sm_90. */
START_TEST(nvrtc_gpt2_dropout) {
    if (!have_nvrtc()) return;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("demo", &c));
    c.dropout = 0.1f;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, 2, 64, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.precision = SN_PRECISION_BF16;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    nvrtc_program(g, "demo-dropout", 2, 64, (const int[]){75, 80, 90}, 3);
}
END_TEST

/* The autocast (bf16) program: bf16 loads and stores, casts, bf16 attention (FMA tiles on
 * sm_75, mma.sync on sm_80). */
START_TEST(nvrtc_gpt2_124m_bf16) {
    if (have_nvrtc())
        nvrtc_program(gpt2_training_at("gpt2", 4, 256, SN_PRECISION_BF16), "gpt2-bf16", 4, 256,
                      (const int[]){75, 80}, 2);
}
END_TEST

/* The LM head in chunks (passes/chunk_logits.c): gpt2 bf16 at 4 x 256 in 4 chunks of 256 rows
 * (the chunk's slices, the classifier on a chunk, the count and loss-sum kernels, the dW sums,
 * the dX concatenations) compiles for sm_80 without spills. */
START_TEST(nvrtc_gpt2_chunked_logits) {
    if (have_nvrtc())
        nvrtc_program(gpt2_training_with("gpt2", 4, 256, SN_PRECISION_BF16, 256, true), "gpt2-bf16-chunked",
                      4, 256, (const int[]){80}, 1);
}
END_TEST

/* The fp16 program: f16 loads and stores in every kernel kind, f16 attention (mma.sync m16n8k8
 * on sm_75, m16n8k16 on sm_80 and sm_90), at the training size of the GPU check, B = 16,
 * T = 1024: the norm backward pairs' column sums take chunks of 64 rows there (8 a warp), whose
 * loads, unrolled whole, spilled on sm_80 (session 24). */
START_TEST(nvrtc_gpt2_124m_f16) {
    if (have_nvrtc())
        nvrtc_program(gpt2_training_at("gpt2", 16, 1024, SN_PRECISION_FP16), "gpt2-fp16", 16, 1024,
                      (const int[]){75, 80, 90}, 3);
}
END_TEST

/* The LLaMA example (examples/llama: rmsnorm, rotary, grouped-query attention fused, SwiGLU)
 * at its demo size, B = 16, T = 128. */
static sn_graph *llama_training(const llama_config *c, int B, int T) {
    sn_graph *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(llama_build(g, B, T, 256, (void *)c, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(st.attention_fused, c->n_layer);
    return g;
}

/* sm_90 is left out: there the fp32 attention forward of head size 32 spills (16 bytes; GPT-2
 * 124M's head size 64 does not), a finding for codegen/cuda/cuda_attention.c. */
START_TEST(nvrtc_llama_small) {
    llama_config c = llama_config_small();
    if (have_nvrtc()) nvrtc_program(llama_training(&c, 16, 128), "llama", 16, 128, (const int[]){75, 80}, 2);
}
END_TEST

START_TEST(nvrtc_error_carries_log) {
    if (!have_nvrtc()) return;
    sn_cuda_module m;
    sn_err e;
    const char *bad = "#include \"" SN_CUDA_PRELUDE_NAME "\"\n"
                      "extern \"C\" __global__ void broken(float *out) { out[0] = no_such_var; }\n";
    ck_assert_int_eq(sn_nvrtc_compile(bad, "broken.cu", 90, &m, &e), SN_ERR_DEVICE);
    const char *want[] = {"nvrtc.c:", "nvrtcCompileProgram", "NVRTC_ERROR_COMPILATION",
                          "broken.cu", "sm_90", "NVRTC log", "no_such_var"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(e.msg, want[i]), "missing \"%s\" in: %s", want[i], e.msg);
    ck_assert_msg(m.log && strstr(m.log, "error"), "log: %s", m.log ? m.log : "(none)");
    sn_cuda_module_free(&m);
    ck_assert_int_eq(sn_nvrtc_compile("", "empty.cu", 70, &m, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "sm_75"), "%s", e.msg);
    sn_cuda_module_free(&m);
}
END_TEST

/* ---- the generated CUDA executed on the CPU ---- */

/* Loads src, exactly as NVRTC gets it, into the SIMT simulator; NULL if there is no g++. */
/* The SMs host_check's launches are sized for (0: unknown; a persistent kernel's grid). */
static int host_sm_count = 0;

static sn_sim_module *host_compile(const char *src) {
    sn_sim_module *m;
    sn_err e;
    sn_status st = sn_sim_module_load(src, &m, &e);
    if (st == SN_ERR_UNSUPPORTED) {
        printf("test_cuda: %s: skipping the CPU execution of generated CUDA\n", e.msg);
        return NULL;
    }
    ck_assert_msg(st == SN_OK, "%s", e.msg);
    return m;
}

static size_t dtype_bytes(sn_dtype t) { return (size_t)sn_dtype_bits(t) / 8; }

static void to_buffer(sn_dtype t, const double *v, int64_t n, void *buf) {
    for (int64_t i = 0; i < n; i++) {
        float f = (float)v[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        if (t == SN_F32) ((float *)buf)[i] = f;
        else if (t == SN_I32) ((int32_t *)buf)[i] = (int32_t)v[i];
        else if (t == SN_F16) ((_Float16 *)buf)[i] = (_Float16)f; /* rounds to nearest even */
        else ((uint16_t *)buf)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* bf16 */
    }
}

static void from_buffer(sn_dtype t, const void *buf, int64_t n, double *v) {
    for (int64_t i = 0; i < n; i++) {
        if (t == SN_F32) {
            v[i] = ((const float *)buf)[i];
        } else if (t == SN_I32) {
            v[i] = ((const int32_t *)buf)[i];
        } else if (t == SN_F16) {
            v[i] = (double)((const _Float16 *)buf)[i];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            v[i] = f;
        }
    }
}

/* Runs kernel k (its function fn, compiled into h) on the CPU with the interpreter's values of
 * its inputs and compares its outputs with the interpreter's (tol relative to the tensor's
 * largest value): with the launch sn_cuda_launch_dims gives, and for pointwise kernels also with
 * a small grid that makes the grid-stride loop go round, each in two thread orders (forward,
 * reversed), outputs poisoned (NaN, or a large integer) before every launch. Returns the worst
 * error instead of failing when `caught` is set (a planted bug's test). */
static double host_check(sn_sim_module *h, const sn_kernel *k, const char *fn, const sn_interp *it,
                         double tol, bool caught) {
    void *buf[SN_KER_MAX_ARGS], *params[SN_KER_MAX_ARGS + 1];
    int nargs = k->n_out + k->n_in;
    for (int i = 0; i < nargs; i++) {
        const sn_node *n = k->args[i];
        buf[i] = aligned_alloc(64, (dtype_bytes(n->dtype) * (size_t)sn_numel(n) + 64) / 64 * 64);
        ck_assert(buf[i]);
        params[i] = &buf[i];
        if (i >= k->n_out) {
            const double *v = sn_interp_value(it, n);
            ck_assert_msg(v, "%s: the interpreter kept no value of %%%d", k->name, n->id);
            to_buffer(n->dtype, v, sn_numel(n), buf[i]);
        }
    }
    float *scratch = k->stage != SN_SUM_WHOLE ? sn_test_scratch(k) : NULL; /* partial sums */
    void *first_order = NULL;
    params[nargs] = &scratch;
    sn_target t = sm(80);
    t.sm_count = host_sm_count;
    sn_cuda_dims dims[2] = {sn_cuda_launch_dims(k, &t), {.grid = {3, 1, 1}, .block = {256, 1, 1}}};
    double *got = NULL, worst = 0;
    for (int d = 0; d < (k->kind == SN_KER_POINTWISE ? 2 : 1); d++)
        for (int reversed = 0; reversed < 2; reversed++) {
            for (int o = 0; o < k->n_out; o++) {
                const sn_node *n = k->args[o];
                size_t eb = dtype_bytes(n->dtype);
                memset(buf[o], n->dtype == SN_I32 ? 0x7f : 0xff, eb * (size_t)sn_numel(n));
                bool *part = malloc((size_t)sn_numel(n) + 1);
                char *ref = malloc(eb * (size_t)sn_numel(n) + 1);
                if (sn_kernel_out_part(k, o, part)) { /* the rest of the buffer as it was */
                    to_buffer(n->dtype, sn_interp_value(it, n), sn_numel(n), ref);
                    for (int64_t i = 0; i < sn_numel(n); i++)
                        if (!part[i]) memcpy((char *)buf[o] + eb * (size_t)i, ref + eb * (size_t)i, eb);
                }
                free(part);
                free(ref);
            }
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_err e;
            sn_status st = sn_sim_launch(h, fn, dims[d].grid, dims[d].block, dims[d].shared_bytes,
                                         params, &so, &e);
            if (caught && st) {
                printf("test_cuda: %s: %s\n", k->name, e.msg);
                worst = INFINITY;
                continue;
            }
            ck_assert_msg(st == SN_OK, "%s", e.msg);
            if (scratch) { /* partial sums: the same bits in either thread order */
                size_t bytes = (size_t)sn_kernel_scratch_bytes(k);
                if (!reversed) first_order = realloc(first_order, bytes), memcpy(first_order, scratch, bytes);
                else if (caught && memcmp(first_order, scratch, bytes)) {
                    printf("test_cuda: %s: its scratch differs between thread orders\n", k->name);
                    worst = INFINITY;
                } else ck_assert_msg(!memcmp(first_order, scratch, bytes), "%s: the partial sums differ "
                                     "between thread orders", k->name);
            }
            for (int o = 0; o < k->n_out; o++) {
                const sn_node *n = k->args[o];
                int64_t numel = sn_numel(n);
                if (!sn_kernel_writes(k, o)) continue; /* a PARTIAL kernel's sums: its FINISH's */
                got = realloc(got, sizeof(double) * (size_t)numel);
                from_buffer(n->dtype, buf[o], numel, got);
                char what[200];
                snprintf(what, sizeof what, "%s as %s (grid %u x block %u x %u, %s order) %%%d",
                         k->name, fn, dims[d].grid[0], dims[d].block[0], dims[d].block[1],
                         reversed ? "reversed" : "forward", n->id);
                /* a 16-bit value may round one unit (2^-8, 2^-11 of the largest) away from the
                 * interpreter's where the f32 sums differ in their last bits: two units */
                double tl = n->dtype == SN_BF16 ? 8e-3 : n->dtype == SN_F16 ? 1e-3 : tol;
                if (caught) {
                    const double *want = sn_interp_value(it, n);
                    double scale = 1e-6;
                    for (int64_t i = 0; i < numel; i++) scale = fmax(scale, fabs(want[i]));
                    for (int64_t i = 0; i < numel; i++) {
                        double err = fabs(got[i] - want[i]) / scale;
                        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
                    }
                } else { /* equal infinities (a causal mask's fill) agree */
                    double *want = malloc(sizeof(double) * (size_t)numel);
                    memcpy(want, sn_interp_value(it, n), sizeof(double) * (size_t)numel);
                    for (int64_t i = 0; i < numel; i++)
                        if (isinf(want[i]) && got[i] == want[i]) got[i] = want[i] = 0;
                    sn_check_close(what, got, want, (size_t)numel, tl, 1e-6);
                    free(want);
                }
            }
        }
    free(got);
    free(first_order);
    for (int i = 0; i < nargs; i++) free(buf[i]);
    return worst;
}

/* Gives every INPUT and PARAM of g a value: ids below `vocab`, parameters from their init rule
 * (or normal draws), other floats normal. */
/* The i32 inputs interp_run gives (their numel values; NULL: drawn below vocab). */
static const int32_t *fixed_i32 = NULL;

static sn_interp *interp_run(const sn_graph *g, int vocab, bool init_rule) {
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    sn_rng r = sn_rng_seed(1234);
    sn_err e;
    for (int i = 0; i < g->n_nodes; i++) {
        const sn_node *n = g->nodes[i];
        if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
        int64_t numel = sn_numel(n);
        if (n->dtype == SN_I32) {
            int32_t *v = malloc(sizeof(int32_t) * (size_t)numel);
            for (int64_t j = 0; j < numel; j++)
                v[j] = fixed_i32 ? fixed_i32[j] : (int32_t)sn_rng_below(&r, (uint64_t)vocab);
            ck_assert_msg(sn_interp_set_i32(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        } else {
            float *v = malloc(sizeof(float) * (size_t)numel);
            if (init_rule && n->op == SN_OP_PARAM) sn_param_init(n, v, 7);
            else for (int64_t j = 0; j < numel; j++) v[j] = (float)sn_rng_normal(&r);
            ck_assert_msg(sn_interp_set(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    return it;
}

/* Fuses g, renders its generated kernels (every kind but GEMMs) into one source,
 * runs each on the CPU against the interpreter; returns the number of kernels run (0: no g++).
 * counts (may be NULL) gets the kernels run per kind. */
static int run_on_host(sn_graph *g, int vocab, bool init_rule, double tol, int *counts) {
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    ck_assert_int_gt(n, 0);
    sn_cuda_source cs = render(ks, n);
    sn_sim_module *h = host_compile(cs.src);
    int ran = 0;
    if (h) {
        sn_interp *it = interp_run(g, vocab, init_rule);
        for (int i = 0; i < n; i++) {
            host_check(h, ks[i], cs.fn[i], it, tol, false);
            if (counts) counts[ks[i]->kind]++;
        }
        ran = n;
        sn_interp_free(it);
        sn_sim_module_free(h);
    }
    sn_cuda_source_free(&cs);
    free(ks);
    sn_program_free(p);
    return ran;
}

START_TEST(cpu_bias_gelu) {
    sn_graph *g = bias_gelu_graph();
    run_on_host(g, 1, false, 1e-5, NULL);
    sn_graph_free(g);
}
END_TEST

/* Materialised views: a permuted slice, and a transpose of a reshape (rank 4). */
START_TEST(cpu_view_copies) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 3, 10));
    sn_graph_add_output(g, sn_permute(g, sn_slice(g, x, 2, 4, 8), (const int[]){0, 2, 1}));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(6, 20));
    sn_node *r = sn_reshape(g, y, SN_SHAPE(2, 3, 4, 5));
    sn_graph_add_output(g, sn_permute(g, sn_slice(g, r, 1, 1, 3), (const int[]){0, 2, 1, 3}));
    run_on_host(g, 1, false, 0, NULL);
    sn_graph_free(g);
}
END_TEST

/* Paddings folded into masked accesses, on a middle and on the last axis. */
START_TEST(cpu_padded_sum) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 5, 8));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(2, 3, 8));
    sn_node *z = sn_input(g, "z", SN_F32, SN_SHAPE(2, 5, 6));
    sn_node *w = sn_input(g, "w", SN_F32, SN_SHAPE(2, 2, 8));
    sn_node *s = sn_add(g, sn_add(g, x, sn_pad(g, y, 1, 1, 5)), sn_pad(g, z, 2, 2, 8));
    s = sn_add(g, s, sn_pad(g, w, 1, 0, 5));
    sn_graph_add_output(g, s);
    sn_program *p = fuse(g);
    ck_assert_int_eq(p->n_kernels, 1);
    int masked = 0;
    for (int a = 0; a < p->kernels[0]->n_access; a++) masked += p->kernels[0]->access[a].masked;
    ck_assert_int_eq(masked, 3); /* bounded above, below, and both */
    sn_program_free(p);
    run_on_host(g, 1, false, 1e-6, NULL);
    sn_graph_free(g);
}
END_TEST

/* tanh(x * 1.5 - 0.25): both constants fold into the kernel as literals. */
START_TEST(cpu_chain_with_constants) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 7));
    sn_node *c = sn_full(g, SN_F32, SN_SHAPE(3, 7), 1.5f);
    sn_graph_add_output(g, sn_tanh(g, sn_sub(g, sn_mul(g, x, c), sn_scalar(g, SN_F32, 0.25f))));
    sn_program *p = fuse(g);
    ck_assert_int_eq(p->n_kernels, 1);
    const sn_kernel *k = p->kernels[0];
    ck_assert_int_eq(k->n_instr, 3);
    ck_assert_int_eq(k->n_in, 1);
    sn_cuda_source cs = render(&k, 1);
    ck_assert_msg(strstr(cs.src, "1.5f") && strstr(cs.src, "0.25f"), "%s", cs.src);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    run_on_host(g, 1, false, 1e-6, NULL);
    sn_graph_free(g);
}
END_TEST

/* 16-byte vectors of 16-bit values: over (6, 48) a bf16 and an f16 buffer are read with one
 * load of 8 values, an f32 one as two float4, a broadcast row once a step, a slice starting at
 * column 4 (not 16-byte aligned for 8 values) one value a lane, and outputs stored 8 at a time
 * (16-bit: one 16-byte store); over (5, 12) (12 = 4 + 8: no step of 8 fits) four a step with
 * 16-bit values one a lane. The text says which path each takes; the simulator runs each
 * against the interpreter (two grids, two thread orders, outputs poisoned). */
static sn_graph *vector16_graph(void) {
    sn_graph *g = sn_graph_new();
    sn_node *h = sn_input(g, "h", SN_BF16, SN_SHAPE(6, 48));
    sn_node *f = sn_input(g, "f", SN_F16, SN_SHAPE(6, 48));
    sn_node *z = sn_input(g, "z", SN_F32, SN_SHAPE(6, 48));
    sn_node *row = sn_input(g, "row", SN_BF16, SN_SHAPE(48));
    sn_node *wide = sn_input(g, "wide", SN_BF16, SN_SHAPE(6, 56));
    sn_node *hz = sn_add(g, sn_gelu(g, h), sn_cast(g, z, SN_BF16));
    sn_graph_add_output(g, sn_add(g, sn_mul(g, hz, row), sn_slice(g, wide, 1, 4, 52)));   /* bf16 */
    sn_graph_add_output(g, sn_mul(g, f, sn_cast(g, z, SN_F16)));                          /* f16 */
    sn_graph_add_output(g, sn_add(g, sn_tanh(g, z), sn_cast(g, f, SN_F32)));               /* f32 */
    sn_node *b = sn_input(g, "b", SN_BF16, SN_SHAPE(5, 12));
    sn_graph_add_output(g, sn_exp(g, b)); /* (5, 12): four a step */
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

START_TEST(render_16bit_vectors) {
    sn_graph *g = vector16_graph();
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_POINTWISE, ks);
    sn_cuda_source cs = render(ks, n);
    printf("test_cuda: 16-bit vectors:\n%s", cs.src);
    const char *want[] = {"/* elements; a step does eight */", "sn_load8(&in", "sn_store8(&out",
                          "float x0_v[8];", "reinterpret_cast<const float4 *>(&in",
                          "+ 4]) = make_float4(", "/* elements; a step does four */",
                          "sn_store(&out0[i + 3], exp_"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(cs.src, want[i]), "missing \"%s\" in\n%s", want[i], cs.src);
    sn_cuda_source_free(&cs);
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

START_TEST(cpu_16bit_vectors) {
    sn_graph *g = vector16_graph();
    ck_assert_int_ge(run_on_host(g, 1, false, 1e-6, NULL), 2);
    sn_graph_free(g);
}
END_TEST

/* Every pointwise op of the IR, f32, with bf16, f16 and i32 values on the way. */
START_TEST(cpu_every_op) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 33));
    sn_node *y = sn_input(g, "y", SN_F32, SN_SHAPE(4, 33));
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(33));
    sn_node *pos = sn_exp(g, x);
    sn_node *terms[3][6] = { /* three sums: a kernel reads at most SN_KER_MAX_ARGS accesses */
        {sn_log(g, pos), sn_sqrt(g, pos), sn_rsqrt(g, pos), sn_tanh(g, x), sn_gelu(g, x),
         sn_silu(g, x)},
        {sn_gelu_bwd(g, x, y), sn_silu_bwd(g, x, y), sn_neg(g, y), sn_scale(g, x, 0.3f),
         sn_div(g, y, pos), sn_sub(g, x, y)},
        {sn_mul(g, x, y), sn_eq(g, x, x), sn_eq(g, x, y), sn_cast(g, ids, SN_F32),
         sn_cast(g, sn_cast(g, sn_scale(g, y, 4.0f), SN_I32), SN_F32), sn_exp(g, y)},
    };
    for (int t = 0; t < 3; t++) {
        sn_node *sum = terms[t][0];
        for (int i = 1; i < 6; i++) sum = sn_add(g, sum, terms[t][i]);
        sn_graph_add_output(g, sum);
    }
    sn_node *xb = sn_cast(g, x, SN_BF16), *hb = sn_input(g, "hb", SN_BF16, SN_SHAPE(4, 33));
    sn_graph_add_output(g, sn_add(g, sn_gelu(g, xb), sn_mul(g, hb, hb))); /* bf16 in and out */
    sn_node *xh = sn_cast(g, x, SN_F16), *hh = sn_input(g, "hh", SN_F16, SN_SHAPE(4, 33));
    sn_graph_add_output(g, sn_add(g, sn_tanh(g, xh), sn_mul(g, hh, hh))); /* f16 in and out */
    sn_graph_add_output(g, sn_cast(g, sn_scale(g, x, 10.0f), SN_I32));   /* i32 out */
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    /* six outputs of one shape: kernels of the fuse pass, neighbours joined (join_siblings) */
    ck_assert_int_ge(run_on_host(g, 5, false, 1e-5, NULL), 4);
    sn_graph_free(g);
}
END_TEST

/* Every pointwise kernel of a tiny GPT-2's training step, each from the interpreter's inputs. */
/* Every generated kernel of a tiny GPT-2's training step (forward and backward: rows, column
 * reductions, gathers, pointwise, attention), each from the interpreter's inputs; attention
 * fused (flash attention kernels, tests/test_cuda_attention.c has more) and written out (softmax, causal mask and their
 * backwards as row kernels). */
static void gpt2_tiny_kernels_chunked(bool fuse_attention, sn_precision precision, int64_t chunk_rows) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, 2, 16, &m, &e) == SN_OK, "%s", e.msg);
    if (chunk_rows) { /* the loss alone, as training has it */
        sn_graph_clear_outputs(g);
        sn_graph_add_output(g, m.loss);
    }
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    o.fuse_attention = fuse_attention;
    o.precision = precision;
    o.chunk_logits = chunk_rows;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    double t0 = now();
    int counts[SN_KER_KIND_COUNT] = {0};
    int n = run_on_host(g, 256, true, 1e-5, counts);
    if (n) printf("test_cuda: tiny GPT-2 training step (%s), attention %s: %d kernels (%d pointwise, "
                  "%d row, %d reduce, %d gather, %d attention) ran on the simulator in two thread orders and "
                  "match the interpreter (%.2f s)\n", sn_precision_name(precision),
                  fuse_attention ? "fused" : "written out",
                  n, counts[SN_KER_POINTWISE], counts[SN_KER_ROW], counts[SN_KER_REDUCE],
                  counts[SN_KER_GATHER], counts[SN_KER_ATTENTION], now() - t0);
    /* the bias gradients are column sums in the norm weight-gradient kernels (ROW); the
     * position embedding's gradient (a sum over the batch) is the one reduce left; the
     * embedding and its gradient's BUCKET and ROWS kernels */
    ck_assert(!n || (counts[SN_KER_ROW] > 5 && counts[SN_KER_REDUCE] >= 1 && counts[SN_KER_GATHER] == 3));
    sn_graph_free(g);
}

static void gpt2_tiny_kernels(bool fuse_attention, sn_precision precision) {
    gpt2_tiny_kernels_chunked(fuse_attention, precision, 0);
}

/* The step with the LM head in 4 chunks of 8 rows (passes/chunk_logits.c), bf16 and fp16 (its
 * loss scale times the chunks' loss): every kernel of it on the simulator against the
 * interpreter. */
START_TEST(cpu_gpt2_tiny_chunked_logits) {
    gpt2_tiny_kernels_chunked(true, SN_PRECISION_BF16, 8);
    gpt2_tiny_kernels_chunked(true, SN_PRECISION_FP16, 8);
}
END_TEST

START_TEST(cpu_gpt2_tiny_kernels) { gpt2_tiny_kernels(true, SN_PRECISION_FP32); }
END_TEST

/* Every generated kernel of a tiny LLaMA's training step (2 layers, 4 query heads on 2
 * key/value heads, head size 8: rotary concat kernels, rmsnorm rows, silu, the key/value
 * repeat and its gradient's sum) on the simulator against the interpreter. */
START_TEST(cpu_llama_tiny_kernels) {
    llama_config c = {.ctx = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .dim = 32,
                      .hidden = 48, .rope_theta = 10000.0f, .norm_eps = 1e-5f};
    sn_graph *g = llama_training(&c, 2, 16);
    double t0 = now();
    int counts[SN_KER_KIND_COUNT] = {0};
    int n = run_on_host(g, 256, true, 1e-5, counts);
    if (n) printf("test_cuda: tiny LLaMA training step: %d kernels (%d pointwise, %d row, %d "
                  "reduce, %d gather, %d attention) ran on the simulator in two thread orders and "
                  "match the interpreter (%.2f s)\n", n, counts[SN_KER_POINTWISE],
                  counts[SN_KER_ROW], counts[SN_KER_REDUCE], counts[SN_KER_GATHER],
                  counts[SN_KER_ATTENTION], now() - t0);
    ck_assert(!n || (counts[SN_KER_ATTENTION] >= 4 && counts[SN_KER_ROW] >= 5));
    sn_graph_free(g);
}
END_TEST

START_TEST(cpu_gpt2_tiny_unfused_attention) { gpt2_tiny_kernels(false, SN_PRECISION_FP32); }
END_TEST

/* The autocast (bf16) step: bf16 loads and stores in every kernel kind, attention on bf16 q, k,
 * v (mma paths), against the interpreter's emulated rounding. */
START_TEST(cpu_gpt2_tiny_bf16) { gpt2_tiny_kernels(true, SN_PRECISION_BF16); }
END_TEST

/* The same in fp16 (f16 storage, the loss scaled by the loss_scale input). */
START_TEST(cpu_gpt2_tiny_f16) { gpt2_tiny_kernels(true, SN_PRECISION_FP16); }
END_TEST

/* Row ops over rows of C, cross-entropy with ignored targets (class 3), rmsnorm, a max and a
 * mean reduction, with their backwards. */
static sn_graph *row_ops_graph(int64_t C) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(24, C));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(24));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *h = sn_layernorm(g, sn_add(g, x, b), w, b, 1e-5f);
    sn_node *r = sn_rmsnorm(g, sn_gelu(g, h), v, 1e-5f);
    sn_node *s = sn_softmax(g, sn_scale(g, r, 0.5f));
    sn_node *loss = sn_cross_entropy(g, sn_add(g, sn_scale(g, s, 4.0f), h), y, 3);
    sn_graph_add_output(g, sn_max(g, h, 1, false));
    sn_graph_add_output(g, sn_mean(g, r, 0, false));
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* ... on the simulator against the interpreter; every whole-row kernel (the norms, softmax and
 * their backwards) a warp per row at C = 300 (3 steps of 32 lanes x 4), a block per row (of 9
 * warps) at C = 1100 (too long for a warp: 9 steps). */
static void row_ops(int64_t C, bool warp_rows) {
    sn_graph *g = row_ops_graph(C);
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_ROW, ks), whole = 0;
    for (int i = 0; i < n; i++) {
        if (ks[i]->stage != SN_SUM_WHOLE || ks[i]->anchor->op == SN_OP_CROSS_ENTROPY_BWD) continue;
        sn_cuda_source cs = render(&ks[i], 1);
        ck_assert_msg(!strstr(cs.src, ": a warp per row */") == !warp_rows, "%s at C = %lld: %s "
                      "warp per row expected in\n%s", ks[i]->name, (long long)C,
                      warp_rows ? "a" : "no", cs.src);
        sn_cuda_source_free(&cs);
        whole++;
    }
    ck_assert_int_ge(whole, 4);
    free(ks);
    sn_program_free(p);
    int counts[SN_KER_KIND_COUNT] = {0};
    int ran = run_on_host(g, 8, false, 1e-5, counts);
    if (ran) printf("test_cuda: row ops over rows of %lld (%s): %d kernels (%d row, %d reduce) "
                    "match\n", (long long)C, warp_rows ? "a warp per row" : "a block per row",
                    ran, counts[SN_KER_ROW], counts[SN_KER_REDUCE]);
    sn_graph_free(g);
}

START_TEST(cpu_row_ops_several_warps) { row_ops(1100, false); }
END_TEST

START_TEST(cpu_row_ops_warp_per_row) { row_ops(300, true); }
END_TEST

/* A layernorm over 197 rows after a linear layer with a bias: its weight gradient, dbeta and
 * the bias gradient in a PARTIAL kernel over 25 chunks of 8 rows (the last one 5: kernel.h
 * sn_sum_chunk_rows, few rows) and its FINISH kernel, the cross-entropy loss over 4 chunks of
 * 64 the same way, against the interpreter, the partial sums the same bits in both thread
 * orders. */
enum { CHUNKED_R = 3 * SN_SUM_CHUNK + 5 };
static sn_graph *chunked_sums_graph(void) {
    enum { R = CHUNKED_R };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, 24));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(R));
    sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(24, 40), SN_INIT_NORMAL, 0.3f);
    sn_node *c = sn_param(g, "c", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(40), SN_INIT_NORMAL, 1);
    sn_node *h = sn_layernorm(g, sn_add(g, sn_matmul(g, x, w1), c), w, b, 1e-5f);
    sn_node *loss = sn_cross_entropy(g, h, y, -1);
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

START_TEST(cpu_chunked_weight_gradient) {
    sn_graph *g = chunked_sums_graph();
    sn_program *p = fuse(g);
    int partial = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const sn_kernel *ker = p->kernels[k];
        if (ker->stage != SN_SUM_PARTIAL) continue;
        partial++;
        /* the classifier (the loss with its gradient): a partial a row */
        ck_assert_int_eq(sn_sum_chunks(ker), ker->anchor2 ? CHUNKED_R : (CHUNKED_R + 7) / 8);
        ck_assert_int_eq(sn_sum_chunk_rows(ker), ker->anchor2 ? SN_SUM_CHUNK : 8);
        bool ce = ker->anchor->op == SN_OP_CROSS_ENTROPY || ker->anchor2; /* the loss */
        ck_assert_int_eq(ker->row.n_colsum, ce ? 0 : 2); /* dbeta and the bias gradient */
    }
    ck_assert_int_eq(partial, 2);
    sn_program_free(p);
    int counts[SN_KER_KIND_COUNT] = {0};
    int n = run_on_host(g, 40, false, 1e-5, counts);
    if (n) printf("test_cuda: layernorm weight gradient over 4 chunks of rows: %d kernels match\n", n);
    sn_graph_free(g);
}
END_TEST

/* kernel.h sn_sum_chunk_rows: a norm weight gradient's chunks of rows halve from 64 down to 8
 * while fewer than 128 chunks would share the rows (CUDA blocks for the whole GPU); cross-
 * entropy's stay 64 rows whatever the count. */
START_TEST(sum_chunk_rule) {
    static const struct { int64_t R, rows; } c[] = {{197, 8},   {1024, 8},  {2051, 16},
                                                    {4096, 32}, {8192, 64}, {16384, 64}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(c[i].R, 32));
        sn_node *dy = sn_input(g, "dy", SN_F32, SN_SHAPE(c[i].R, 32));
        sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(c[i].R));
        sn_graph_add_output(g, sn_layernorm_bwd_w(g, x, dy, 1e-5f));
        sn_graph_add_output(g, sn_cross_entropy(g, dy, y, -1));
        sn_program *p = fuse(g);
        int seen = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            if (ker->stage != SN_SUM_PARTIAL) continue;
            bool norm = ker->anchor->op == SN_OP_LAYERNORM_BWD_W;
            int64_t rows = norm ? c[i].rows : SN_SUM_CHUNK;
            ck_assert_int_eq(sn_sum_chunk_rows(ker), rows);
            ck_assert_int_eq(sn_sum_chunks(ker), (c[i].R + rows - 1) / rows);
            seen |= norm ? 1 : 2;
        }
        ck_assert_int_eq(seen, 3);
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* The norm backward pair (kernel.h: a norm weight gradient's PARTIAL kernel computing its dx
 * too) over R rows in chunks of 8 (197 rows: the last chunk 5) or of 16 (2051: the last 3; kernel.h
 * sn_sum_chunk_rows): dx with a prologue (dy, widened from
 * d0's dtype) and an epilogue (a residual add), dw, dbeta (the column sum of dy) and the
 * residual's bias gradient (the column sum of dx, read from the pair's own output after the
 * block's rows are stored), f32 rows of 40 (4 columns a step) and bf16 d0 with rows of 64 (8).
 * Against the interpreter through its FINISH kernel, in both thread orders; then bugs planted
 * in the rendered text are caught: the barrier before the sums deleted, a warp's dy xhat sums
 * read from another lane's slots. */
static sn_graph *norm_pair_graph(sn_dtype dt, int64_t C, int64_t R, bool apart) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, C));
    sn_node *d0 = sn_input(g, "d0", dt, SN_SHAPE(R, C));
    sn_node *gr = sn_input(g, "g", SN_F32, SN_SHAPE(R, C));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    /* f32: dy computed and stored (the column sum reads it); bf16: each reader its own cast
     * of d0, as the upcast pass leaves them (dx's and dw's x and dy are one value) */
    sn_node *dy = dt == SN_F32 ? sn_mul(g, d0, sn_exp(g, x)) : sn_cast(g, d0, SN_F32);
    sn_node *dx = sn_add(g, gr, sn_layernorm_bwd(g, x, w, dy, 1e-5f));
    if (apart) sn_graph_add_output(g, sn_exp(g, gr)); /* a kernel between dx's and dw's */
    if (dt != SN_F32) dy = sn_cast(g, d0, SN_F32);
    sn_node *dw = sn_layernorm_bwd_w(g, x, dy, 1e-5f);
    if (dt != SN_F32) dy = sn_cast(g, d0, SN_F32);
    sn_node *outs[] = {dx, dw, sn_sum(g, dy, 0, false), sn_sum(g, dx, 0, false)};
    for (int i = 0; i < 4; i++) sn_graph_add_output(g, outs[i]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

/* The worst error of the pair ks[0] and its FINISH ks[1] rendered as src (caught mode). */
static double pair_on_host(const char *src, const sn_kernel *const *ks, const sn_cuda_source *cs,
                           const sn_interp *it) {
    sn_sim_module *h = host_compile(src);
    if (!h) return -1;
    double a = host_check(h, ks[0], cs->fn[0], it, 1e-5, true);
    double b = host_check(h, ks[1], cs->fn[1], it, 1e-5, true);
    sn_sim_module_free(h);
    return a > b ? a : b;
}

/* Runs every kernel of p on the simulator (forward order) with the interpreter's values of the
 * graph's inputs, a buffer a node (out[id], malloc'd) and one per scratch value; a joined
 * FINISH's buffers after its host's (kernel.h: tail). edits (NULL: none): pairs of strings, the
 * first occurrence of each `from` in the rendered text replaced by its `to` (a planted bug),
 * ended by a NULL. */
static void program_on_host_with(const sn_program *p, const sn_interp *it, void **out,
                                 const char *const *edits) {
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    ck_assert(ks);
    int n = kernels_of(p, SN_KER_KIND_COUNT, ks);
    sn_cuda_source cs = render(ks, n);
    char *src = strdup(cs.src);
    for (int i = 0; edits && edits[i]; i += 2) {
        const char *from = edits[i], *to = edits[i + 1], *at = strstr(src, from);
        ck_assert_msg(at, "no \"%s\" in the source", from);
        size_t head = (size_t)(at - src);
        char *next = malloc(strlen(src) + strlen(to) + 1);
        ck_assert(next);
        memcpy(next, src, head);
        strcpy(next + head, to);
        strcat(next, at + strlen(from));
        free(src);
        src = next;
    }
    sn_sim_module *h = host_compile(src);
    float *scratch[64] = {0};
    for (int i = 0; h && i < n; i++) {
        void *params[SN_KER_MAX_BUFS], *buf[SN_KER_MAX_BUFS];
        int at = 0;
        for (const sn_kernel *k = ks[i]; k; k = k->tail) {
            for (int a = 0; a < k->n_out + k->n_in; a++, at++) {
                const sn_node *x = k->args[a];
                if (!out[x->id]) {
                    out[x->id] = calloc(1, dtype_bytes(x->dtype) * (size_t)sn_numel(x) + 64);
                    if (x->op == SN_OP_INPUT || x->op == SN_OP_PARAM)
                        to_buffer(x->dtype, sn_interp_value(it, x), sn_numel(x), out[x->id]);
                }
                buf[at] = out[x->id];
                params[at] = &buf[at];
            }
            if (k->stage != SN_SUM_WHOLE) {
                ck_assert(k->scratch >= 0 && k->scratch < 64);
                if (!scratch[k->scratch]) scratch[k->scratch] = calloc(1, (size_t)sn_kernel_scratch_bytes(k));
                buf[at] = scratch[k->scratch];
                params[at] = &buf[at];
                at++;
            }
        }
        ck_assert_int_eq(at, sn_kernel_n_bufs(ks[i]));
        sn_target t = sm(80);
        sn_cuda_dims d = sn_cuda_launch_dims(ks[i], &t);
        sn_sim_opts so = sn_sim_defaults();
        sn_err e;
        ck_assert_msg(sn_sim_launch(h, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &so, &e) == SN_OK,
                      "%s", e.msg);
    }
    for (int i = 0; i < 64; i++) free(scratch[i]);
    if (h) sn_sim_module_free(h);
    free(src);
    sn_cuda_source_free(&cs);
    free(ks);
}

static void program_on_host(const sn_program *p, const sn_interp *it, void **out) {
    program_on_host_with(p, it, out, NULL);
}

/* Each case rendered for sm_80 (_i < 4), where the pair reads its rows in every pass, and for
 * sm_90, where it keeps them in registers (cuda_row.h; C = 320: two steps of 256 columns, the
 * second a quarter full). */
START_TEST(cpu_norm_pair) {
    static const struct { sn_dtype dt; int64_t C, R, chunk; } all[4] = {
        {SN_F32, 40, 3 * SN_SUM_CHUNK + 5, 8}, {SN_BF16, 64, 3 * SN_SUM_CHUNK + 5, 8},
        {SN_BF16, 64, 2051, 16}, {SN_BF16, 320, 3 * SN_SUM_CHUNK + 5, 8}};
    const typeof(all[0]) *c = &all[_i % 4];
    render_sm = _i < 4 ? 80 : 90;
    /* first the same bits as the dx kernel and the PARTIAL kernel apart (the same columns a
     * step: the sums keep their order) */
    sn_graph *ga = norm_pair_graph(c->dt, c->C, c->R, true);
    sn_graph *g = norm_pair_graph(c->dt, c->C, c->R, false);
    sn_program *pa = fuse(ga), *p = fuse(g);
    ck_assert_int_eq(pa->n_kernels, 4); /* dx, exp, dw's PARTIAL and FINISH */
    sn_interp *ita = interp_run(ga, 1, false), *it = interp_run(g, 1, false);
    void **va = calloc((size_t)ga->n_nodes, sizeof *va), **v = calloc((size_t)g->n_nodes, sizeof *v);
    program_on_host(pa, ita, va);
    program_on_host(p, it, v);
    for (int o = 0; o < g->n_outputs; o++) {
        const sn_node *x = g->outputs[o], *xa = ga->outputs[o + 1]; /* after exp */
        ck_assert_int_eq(sn_numel(x), sn_numel(xa));
        if (va[xa->id] && v[x->id]) /* (a build without the simulator runs nothing) */
            ck_assert_msg(!memcmp(va[xa->id], v[x->id], 4 * (size_t)sn_numel(x)),
                          "output %d (%s) differs from the unpaired kernels' bits", o,
                          sn_op_name(x->op));
    }
    for (int i = 0; i < ga->n_nodes; i++) free(va[i]);
    for (int i = 0; i < g->n_nodes; i++) free(v[i]);
    free(va);
    free(v);
    sn_interp_free(ita);
    sn_program_free(pa);
    sn_graph_free(ga);
    /* then the pair and its FINISH against the interpreter, and planted bugs */
    const sn_kernel *ks[2] = {NULL, NULL};
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        if (k->kind == SN_KER_ROW && k->row.pair) ks[0] = k;
        if (ks[0] && k->stage == SN_SUM_FINISH && k->scratch == ks[0]->scratch) ks[1] = k;
    }
    ck_assert_msg(ks[0] && ks[1], "no norm backward pair and its FINISH");
    ck_assert_int_eq(p->n_kernels, 2); /* dx, dw and both column sums: two kernels */
    ck_assert_int_eq(ks[0]->row.n_colsum, 2);
    ck_assert_int_lt(ks[0]->row.colsum_src[2], ks[0]->n_out); /* dx's own output */
    ck_assert_int_eq(sn_sum_chunk_rows(ks[0]), c->chunk);
    sn_cuda_source cs = render(ks, 2);
    char want[32];
    snprintf(want, sizeof want, "/* %d columns a step */", c->dt == SN_BF16 ? 8 : 4);
    ck_assert_msg(strstr(cs.src, want), "%s: no \"%s\" in its source", ks[0]->name, want);
    ck_assert_msg(!strstr(cs.src, "the row's values kept in registers") == (render_sm < 90),
                  "%s on sm_%d: the row %s in registers", ks[0]->name, render_sm,
                  render_sm < 90 ? "kept" : "not kept");
    double ok = pair_on_host(cs.src, ks, &cs, it);
    if (ok >= 0) ck_assert_msg(ok <= 1e-5, "the pair's error %g", ok);
    static const struct { const char *what, *at, *from, *to; } bugs[2] = {
        {"the barrier before the sums deleted", "__syncthreads(); /* the warps' sums",
         "__syncthreads();", "                "},
        {"a warp's sums read from another lane's slots", "float sum = dw[0][s];", "[s]", "[s ^ 1]"},
    };
    for (int b = 0; b < 2 && ok >= 0; b++) {
        const char *at = strstr(cs.src, bugs[b].at);
        ck_assert_msg(at, "%s: no \"%s\" in its source", ks[0]->name, bugs[b].at);
        const char *from = strstr(at, bugs[b].from);
        size_t head = (size_t)(from - cs.src), len = strlen(cs.src);
        char *bad = malloc(len + 16);
        memcpy(bad, cs.src, head);
        strcpy(bad + head, bugs[b].to);
        strcat(bad, from + strlen(bugs[b].from));
        double err = pair_on_host(bad, ks, &cs, it);
        printf("test_cuda: the norm backward pair (%s, C=%lld) with %s: error %.3g (caught)\n",
               sn_dtype_name(c->dt), (long long)c->C, bugs[b].what, err);
        ck_assert_msg(!(err <= 1e-5), "%s went unnoticed (error %g)", bugs[b].what, err);
        free(bad);
    }
    sn_interp_free(it);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
    render_sm = 80;
}
END_TEST

/* A joined FINISH (kernel.h: tail; passes/join_finish.c): two norm backward pairs in a chain
 * (the second's dy is the first's dx), 197 rows of 160 in 25 chunks of 8 (the last 5): the first
 * pair's FINISH (320 columns: dw and dbeta) joins the second pair's launch as 2 blocks of 256
 * threads after its 25. Its dx, sums and the second pair's are the separate kernels' bits on the
 * simulator; then bugs planted in the dispatch are caught: the FINISH's blocks offset by one
 * (its first 256 columns never summed), and the host's last block sent to the FINISH (its
 * last chunk of rows skipped). */
static sn_graph *joined_finish_graph(sn_dtype dt) {
    enum { R = 3 * SN_SUM_CHUNK + 5, C = 160 };
    sn_graph *g = sn_graph_new();
    sn_node *x1 = sn_input(g, "x1", SN_F32, SN_SHAPE(R, C));
    sn_node *x2 = sn_input(g, "x2", SN_F32, SN_SHAPE(R, C));
    sn_node *d0 = sn_input(g, "d0", dt, SN_SHAPE(R, C));
    sn_node *w1 = sn_param(g, "w1", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    sn_node *w2 = sn_param(g, "w2", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
    /* bf16: dy widened by each reader, as the upcast pass leaves it (norm_pair_graph) */
    bool f32 = dt == SN_F32;
    sn_node *dy1 = f32 ? sn_mul(g, d0, sn_exp(g, x1)) : sn_cast(g, d0, SN_F32);
    sn_node *dx1 = sn_layernorm_bwd(g, x1, w1, dy1, 1e-5f);
    sn_node *dw1 = sn_layernorm_bwd_w(g, x1, f32 ? dy1 : sn_cast(g, d0, SN_F32), 1e-5f);
    sn_node *db1 = sn_sum(g, f32 ? dy1 : sn_cast(g, d0, SN_F32), 0, false);
    sn_node *h = f32 ? dx1 : sn_cast(g, dx1, dt); /* the residual gradient, stored in dt */
    sn_node *dy2 = f32 ? sn_mul(g, h, sn_exp(g, x2)) : sn_cast(g, h, SN_F32);
    sn_node *dx2 = sn_layernorm_bwd(g, x2, w2, dy2, 1e-5f);
    sn_node *dw2 = sn_layernorm_bwd_w(g, x2, f32 ? dy2 : sn_cast(g, h, SN_F32), 1e-5f);
    sn_node *outs[] = {dx2, dw1, db1, dw2, sn_sum(g, f32 ? dy2 : sn_cast(g, h, SN_F32), 0, false)};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    return g;
}

/* Whether the outputs of g in v and in w (node buffers) hold the same bits; else names one. */
static void same_outputs(const sn_graph *g, void **v, void **w, const char *what) {
    for (int o = 0; o < g->n_outputs; o++) {
        const sn_node *x = g->outputs[o];
        ck_assert_msg(v[x->id] && w[x->id], "output %d was never written", o);
        ck_assert_msg(!memcmp(v[x->id], w[x->id], 4 * (size_t)sn_numel(x)),
                      "output %d (%s) differs from the separate kernels' bits %s", o,
                      sn_op_name(x->op), what);
    }
}

static void free_values(const sn_graph *g, void **v) {
    for (int i = 0; i < g->n_nodes; i++) free(v[i]);
    free(v);
}

START_TEST(cpu_joined_finish) {
    sn_graph *g = joined_finish_graph(_i ? SN_BF16 : SN_F32);
    sn_program *p = fuse(g);
    ck_assert_int_eq(p->n_kernels, 4); /* the pairs and their FINISH kernels */
    sn_interp *it = interp_run(g, 1, false);
    void **apart = calloc((size_t)g->n_nodes, sizeof *apart);
    program_on_host(p, it, apart);
    sn_err e;
    ck_assert_msg(sn_join_finish(p, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(p->n_kernels, 3); /* the last FINISH has no pair after it */
    const sn_kernel *host = p->kernels[1];
    ck_assert_msg(host->row.pair && host->tail && host->tail->stage == SN_SUM_FINISH &&
                  host->tail->scratch == p->kernels[0]->scratch, "the first FINISH did not join "
                  "the second pair");
    ck_assert_int_eq(p->kernels[2]->stage, SN_SUM_FINISH);
    sn_target t = sm(80);
    sn_cuda_dims d = sn_cuda_launch_dims(host, &t);
    ck_assert_int_eq(host->n_items, 25);
    ck_assert_int_eq(d.grid[0], 25 + 2); /* 320 columns in blocks of 256 */
    void **joined = calloc((size_t)g->n_nodes, sizeof *joined);
    program_on_host(p, it, joined);
    if (apart[g->outputs[0]->id] && joined[g->outputs[0]->id]) { /* (a build without the simulator runs nothing) */
        same_outputs(g, apart, joined, "when joined");
        static const struct { const char *what, *edits[5]; } bugs[2] = {
            {"the FINISH's blocks offset by one", {"(int)blockIdx.x - 25);", "(int)blockIdx.x - 24);"}},
            {"the host's last block sent to the FINISH", {"if (blockIdx.x >= 25) {",
             "if (blockIdx.x >= 24) {", "(int)blockIdx.x - 25);", "(int)blockIdx.x - 24);"}},
        };
        for (int b = 0; b < 2; b++) {
            void **bad = calloc((size_t)g->n_nodes, sizeof *bad);
            program_on_host_with(p, it, bad, bugs[b].edits);
            bool same = true;
            for (int o = 0; o < g->n_outputs; o++) {
                const sn_node *x = g->outputs[o];
                same = same && !memcmp(apart[x->id], bad[x->id], 4 * (size_t)sn_numel(x));
            }
            printf("test_cuda: the joined FINISH with %s: %s\n", bugs[b].what, same ? "unnoticed" : "caught");
            ck_assert_msg(!same, "%s went unnoticed", bugs[b].what);
            free_values(g, bad);
        }
    }
    free_values(g, apart);
    free_values(g, joined);
    sn_interp_free(it);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Row kernels in 16-byte vectors: one graph holding, for each of f32, bf16 and f16 and each
 * row length of 64 (every pass 8 columns a step where a 16-bit buffer takes part, else 4: f32
 * as float4), 60 (4 a step where an f32 buffer takes part: f32 accesses float4, 16-bit ones a
 * value a lane; else one column a thread) and 30 (one column a thread), a layernorm with a fused prologue reading x in its dtype and an epilogue
 * casting to it, rmsnorm, a softmax and a causal mask in the dtype itself, cross-entropy over
 * fewer real classes than columns (the padded classes' gradient is 0), ignored targets
 * (class 3), and their backwards (the norm weight gradients and column sums in PARTIAL and
 * FINISH kernels). */
static const int64_t row_vector_C[3] = {64, 60, 30};
static const sn_dtype row_vector_dt[3] = {SN_F32, SN_BF16, SN_F16};

static sn_node *as_f32(sn_graph *g, sn_node *n) { return n->dtype == SN_F32 ? n : sn_cast(g, n, SN_F32); }
static sn_node *as_dt(sn_graph *g, sn_node *n, sn_dtype t) { return n->dtype == t ? n : sn_cast(g, n, t); }

static sn_graph *row_vector_graph(int lengths) { /* the first `lengths` of row_vector_C */
    enum { R = 24 };
    sn_graph *g = sn_graph_new();
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(R)), *loss = NULL;
    for (int c = 0; c < lengths; c++)
        for (int d = 0; d < 3; d++) {
            int64_t C = row_vector_C[c];
            sn_dtype dt = row_vector_dt[d];
            char name[32];
            snprintf(name, sizeof name, "x%lld_%s", (long long)C, sn_dtype_name(dt));
            sn_node *x = sn_input(g, name, dt, SN_SHAPE(R, C));
            sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
            sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
            sn_node *v = sn_param(g, "v", SN_F32, SN_SHAPE(C), SN_INIT_NORMAL, 1);
            sn_node *h = sn_layernorm(g, sn_add(g, as_f32(g, x), b), w, b, 1e-5f);
            sn_node *hd = as_dt(g, h, dt); /* stored in dt by the layernorm's epilogue */
            sn_node *r = sn_rmsnorm(g, sn_gelu(g, as_f32(g, hd)), v, 1e-5f);
            sn_node *sm = sn_softmax(g, as_dt(g, sn_scale(g, r, 0.5f), dt));
            sn_node *m = sn_causal_mask(g, sn_reshape(g, sm, SN_SHAPE(2, R / 2, C)));
            sn_node *logits = sn_add(g, sn_scale(g, as_f32(g, sn_reshape(g, m, SN_SHAPE(R, C))), 4.0f), h);
            sn_node *l = sn_cross_entropy_padded(g, logits, y, 3, C - 5);
            loss = loss ? sn_add(g, loss, l) : l;
        }
    sn_err e;
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

/* GPT-2's bf16 step keeps its rows in registers (cuda_row.h: sn_cu_row_cache_begin) where the
 * budgets say: on sm_90 the classifier, every layernorm and every norm backward pair; on sm_80
 * the pairs read their rows in every pass (their budget is none there); with the target's
 * row_cache off, nothing is kept. */
START_TEST(render_rows_kept) {
    /* as sinter train compiles it: the loss alone (the logits bf16) */
    sn_graph *g = gpt2_training_with("gpt2", 4, 256, SN_PRECISION_BF16, 0, true);
    sn_err e;
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_ROW, ks);
    static const struct { int arch; bool cache; } cases[3] = {{90, true}, {80, true}, {90, false}};
    for (int c = 0; c < 3; c++) {
        int norms = 0, norms_kept = 0, pairs = 0, pairs_kept = 0, classifier_kept = 0;
        for (int i = 0; i < n; i++) {
            sn_target t = sm(cases[c].arch);
            t.row_cache = cases[c].cache;
            sn_cuda_source cs;
            ck_assert_msg(sn_cuda_render(&ks[i], 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            bool kept = strstr(cs.src, "the row's values kept in registers") != NULL;
            sn_op op = ks[i]->anchor->op;
            if (op == SN_OP_LAYERNORM) norms++, norms_kept += kept;
            if (ks[i]->row.pair) pairs++, pairs_kept += kept;
            if (ks[i]->anchor2 && ks[i]->stage != SN_SUM_FINISH) classifier_kept += kept;
            sn_cuda_source_free(&cs);
        }
        printf("test_cuda: gpt2 bf16 on sm_%d, row_cache %s: layernorms %d of %d kept, norm "
               "backward pairs %d of %d, the classifier %d\n", cases[c].arch,
               cases[c].cache ? "on" : "off", norms_kept, norms, pairs_kept, pairs, classifier_kept);
        ck_assert_int_eq(norms, 25);
        ck_assert_int_gt(pairs, 20);
        ck_assert_int_eq(norms_kept, (cases[c].cache ? norms : 0));
        ck_assert_int_eq(pairs_kept, (cases[c].cache && cases[c].arch == 90 ? pairs : 0));
        ck_assert_int_eq(classifier_kept, (cases[c].cache ? 1 : 0));
    }
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The rendered row kernels take the path their row length and dtypes call for. */
START_TEST(render_row_vectors) {
    sn_graph *g = row_vector_graph(3);
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = kernels_of(p, SN_KER_ROW, ks), seen[3][3] = {{0}};
    for (int i = 0; i < n; i++) {
        const sn_kernel *k = ks[i];
        sn_cuda_source cs = render(&k, 1);
        int64_t C = k->anchor->in[0]->shape[k->anchor->in[0]->rank - 1];
        bool half = false, f32 = false;
        int f32_streams = 0; /* full-size f32 buffers: four or more keep 4 lanes (cuda_row_pass.c) */
        for (int a = 0; a < k->n_out + k->n_in; a++) {
            half = half || sn_dtype_bits(k->args[a]->dtype) == 16;
            f32 = f32 || (k->args[a]->dtype == SN_F32 && sn_numel(k->args[a]) > 1);
            f32_streams += k->args[a]->dtype == SN_F32 &&
                           sn_numel(k->args[a]) >= sn_numel(k->anchor->in[0]);
        }
        const char *body = strstr(cs.src, "_v[l]"), *step = strstr(cs.src, "columns a step");
        if (k->stage == SN_SUM_FINISH || C == 30 || (C == 60 && !f32)) { /* nothing to vector */
            ck_assert_msg(!step && !body, "%s: vectors in\n%s", k->name, cs.src);
        } else {
            int lanes = half && C == 64 && f32_streams <= 3 ? 8 : 4;
            char want[32];
            snprintf(want, sizeof want, "/* %d columns a step */", lanes);
            ck_assert_msg(step && body && strstr(cs.src, want), "%s: no \"%s\" in\n%s", k->name,
                          want, cs.src);
            /* 16-bit vectors only in steps of 8; at 60 columns 16-bit values come a lane each */
            bool vec16 = false;
            for (int a = 0; a < k->n_out + k->n_in; a++) {
                char at[32];
                snprintf(at, sizeof at, a < k->n_out ? "sn_store8(&out%d[" : "sn_load8(&in%d[",
                         a < k->n_out ? a : a - k->n_out);
                vec16 = vec16 || (sn_dtype_bits(k->args[a]->dtype) == 16 && strstr(cs.src, at));
            }
            if (lanes == 4 || k->stage == SN_SUM_WHOLE)
                ck_assert_msg(vec16 == (lanes == 8), "%s: 16-bit vectors %sexpected in\n%s",
                              k->name, vec16 ? "not " : "", cs.src);
            seen[C == 64 ? 0 : 1][half ? 1 : 0]++;
        }
        if (i < 3 || strstr(k->name, "cross_entropy_bwd")) printf("test_cuda: row vectors, %s:\n%s", k->name, cs.src);
        sn_cuda_source_free(&cs);
    }
    printf("test_cuda: row vectors: %d row kernels; vector steps: C=64 %d f32-only, %d with 16-bit "
           "buffers; C=60 %d, %d\n", n, seen[0][0], seen[0][1], seen[1][0], seen[1][1]);
    ck_assert_msg(seen[0][0] >= 10 && seen[0][1] >= 10 && seen[1][0] >= 10 && seen[1][1] >= 5,
                  "vector steps: %d %d %d %d", seen[0][0], seen[0][1], seen[1][0], seen[1][1]);
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ... and each, run on the simulator, matches the interpreter (two thread orders). */
START_TEST(cpu_row_vectors) {
    sn_graph *g = row_vector_graph(3);
    int counts[SN_KER_KIND_COUNT] = {0};
    double t0 = now();
    int n = run_on_host(g, 25, false, 1e-5, counts); /* targets below the fewest classes */
    if (n) printf("test_cuda: row vectors at C = 64, 60, 30 in f32, bf16, f16: %d kernels (%d row) "
                  "match the interpreter (%.2f s)\n", n, counts[SN_KER_ROW], now() - t0);
    ck_assert(!n || counts[SN_KER_ROW] >= 9 * 8);
    sn_graph_free(g);
}
END_TEST

/* Replaces every `from` in src with `to` (malloc'd); *count gets how many. */
static char *replace_all(const char *src, const char *from, const char *to, int *count) {
    size_t lf = strlen(from), lt = strlen(to), n = 0;
    for (const char *at = strstr(src, from); at; at = strstr(at + lf, from)) n++;
    char *out = malloc(strlen(src) + n * lt + 1), *o = out;
    ck_assert(out);
    for (const char *at; (at = strstr(src, from)); src = at + lf) {
        memcpy(o, src, (size_t)(at - src));
        o += at - src;
        memcpy(o, to, lt);
        o += lt;
    }
    strcpy(o, src);
    *count = (int)n;
    return out;
}

/* Row kernel k of g rendered, run on the CPU against the interpreter (targets below `vocab`):
 * as generated within 8e-3, then with each edits[2i] replaced by edits[2i + 1] (each found at
 * least once) beyond it: a planted bug, `what`, caught. */
static void row_bug_caught(sn_graph *g, const sn_kernel *k, bool row_cache, int vocab,
                           const char *const *edits, int n_edits, const char *label, const char *what) {
    sn_cuda_source cs = render_cached(&k, 1, row_cache);
    sn_interp *it = interp_run(g, vocab, false);
    for (int bug = 0; bug < 2; bug++) {
        char *src = strdup(cs.src);
        for (int i = 0; bug && i < n_edits; i++) {
            int n;
            char *next = replace_all(src, edits[2 * i], edits[2 * i + 1], &n);
            ck_assert_msg(n >= 1, "%s: no \"%s\" in its source", k->name, edits[2 * i]);
            free(src);
            src = next;
        }
        sn_sim_module *h = host_compile(src);
        if (h) {
            double err = host_check(h, k, cs.fn[0], it, 1e-5, true);
            printf("test_cuda: %s, %s: error %.3g\n", label, bug ? what : "as generated", err);
            if (bug) ck_assert_msg(!(err <= 8e-3), "%s went unnoticed (%g)", what, err);
            else ck_assert_double_le(err, 8e-3);
            sn_sim_module_free(h);
        }
        free(src);
    }
    sn_interp_free(it);
    sn_cuda_source_free(&cs);
}

/* The lane loop reading lane 0 of every vector (a generator bug, planted in the rendered text)
 * fails the comparison: the vector test can fail. */
START_TEST(cpu_row_vector_lane_bug_caught) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_BF16, SN_SHAPE(24, 64));
    sn_graph_add_output(g, sn_softmax(g, x));
    sn_program *p = fuse(g);
    const sn_kernel *ks[4];
    ck_assert_int_eq(kernels_of(p, SN_KER_ROW, ks), 1);
    static const char *const lane0[] = {"_v[l]", "_v[0]"};
    row_bug_caught(g, ks[0], false, 1, lane0, 1, "bf16 softmax over rows of 64",
                   "every lane reading lane 0");
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier's graph: R rows of C logits rounded to bf16 of which V are real classes,
 * targets below the vocabulary given to the interpreter, class 3 ignored; *k its PARTIAL
 * kernel. The logits: an f32 product rounded to bf16 in the classifier's prologue (bf16
 * false), or the product as autocast makes it in a bf16 program (true: GPT-2's bf16 step). */
static sn_program *classifier_graph(int64_t R, int64_t C, int64_t V, bool bf16, sn_graph **out,
                                    const sn_kernel **k) {
    enum { K = 16 };
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, K));
    sn_node *y = sn_input(g, "y", SN_I32, SN_SHAPE(R));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(K, C), SN_INIT_NORMAL, 1);
    sn_node *mm = sn_matmul(g, x, w);
    sn_node *loss = sn_cross_entropy_padded(g, bf16 ? mm : sn_cast(g, sn_cast(g, mm, SN_BF16), SN_F32),
                                            y, 3, V);
    sn_err e;
    if (bf16) { /* autocast, then the backward */
        sn_graph_set_loss(g, loss);
        sn_pipeline_opts o = sn_pipeline_defaults();
        o.backward = true;
        o.precision = SN_PRECISION_BF16;
        ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    } else {
        ck_assert_msg(sn_backward(g, loss, &e) == SN_OK, "%s", e.msg);
    }
    sn_program *p = fuse(g);
    *k = NULL;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ROW && p->kernels[i]->anchor2 &&
            p->kernels[i]->stage != SN_SUM_FINISH)
            *k = p->kernels[i];
    ck_assert_msg(*k, "no classifier kernel");
    *out = g;
    return p;
}

/* The classifier (kernel.h anchor2: cross-entropy's loss and its gradient in one kernel) over
 * rows of 64 logits of which 59 are real classes (f32: 4 columns a step, every row's last
 * vector cut at column 59), ignored targets (class 3), the row read from memory in every pass
 * (sn_target row_cache off): its online max and sum, a vector at a time (cuda_row.c), give the
 * interpreter's gradient in both thread orders; the cut vector counted whole (planted: the
 * columns past 59 summed) is caught, and so is a wrong count of the rows (the targets read 4
 * at a time). */
START_TEST(cpu_classifier_vectors) {
    sn_graph *g;
    const sn_kernel *k;
    sn_program *p = classifier_graph(24, 64, 59, false, &g, &k);
    sn_cuda_source cs = render_cached(&k, 1, false);
    bool vectors = strstr(cs.src, "/* 4 columns a step */") && strstr(cs.src, "xs[l] =");
    if (!vectors) printf("%s\n", cs.src), fflush(stdout);
    ck_assert_msg(vectors, "the classifier %s is not read a vector at a time", k->name);
    sn_cuda_source_free(&cs);
    static const char *const whole[] = {"if (l < nv) se +=", "se +=", "if (j >= 59) break;", ";"};
    row_bug_caught(g, k, false, 25, whole, 2, "the classifier over rows of 64 logits, 59 classes",
                   "the cut vector summed whole"); /* targets below 25: some the ignored 3 */
    static const char *const count[] = {"counted += ((int)v.x", "counted += 1.0f + ((int)v.x"};
    row_bug_caught(g, k, false, 25, count, 1, "the classifier over rows of 64 logits, 59 classes",
                   "the targets counted one too many a vector");
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier keeping its row in registers (cuda_row_pass.c: sn_cu_row_cache_begin) over
 * rows of 12,288 logits (8 columns a step, 1,024 threads: two steps, the second half the
 * threads') of which 12,283 are real classes (the last vector cut): the logits kept two bf16 to a register,
 * read once, give the interpreter's loss and gradient in both thread orders; planted bugs in
 * the kept registers are caught: every step reading the first step's, the two halves of a
 * word swapped, the last step left out, the max over the first step's pairs (taken two at a
 * time on the kept words) started at +inf. */
START_TEST(cpu_classifier_kept) {
    sn_graph *g;
    const sn_kernel *k;
    sn_program *p = classifier_graph(5, 12288, 12283, true, &g, &k);
    sn_cuda_source cs = render(&k, 1);
    bool kept = strstr(cs.src, "unsigned rc0[8] = {0}; /* ") && strstr(cs.src, "cs < 2;") &&
                strstr(cs.src, "if (cs < 1 || j0 < 12283) {") && !strstr(cs.src, "xs[l] =") &&
                strstr(cs.src, "for (int u = 0; u < 4; u++) m2 = sn_bf16x2_max(m2, rc0[u]);");
    if (!kept) printf("%s\n", cs.src), fflush(stdout);
    ck_assert_msg(kept, "the classifier %s does not keep its row in two steps", k->name);
    sn_cuda_source_free(&cs);
    static const struct { const char *from, *to, *what; } bugs[4] = {
        {"rc0[cs * 4 + l / 2] & 0xffff0000u : rc0[cs * 4 + l / 2] << 16",
         "rc0[l / 2] & 0xffff0000u : rc0[l / 2] << 16", "every step reading the first step's"},
        {"l % 2 ? rc0", "l % 2 == 0 ? rc0", "the two halves of a word swapped"},
        {"cs < 2;", "cs < 1;", "the last step left out"},
        /* the max over the pairs (sn_cu_row_cache_max) from +inf: a max too high; one too low
           changes nothing but the roundings (the softmax does not move with it) */
        {"m2 = 0xff80ff80u;", "m2 = 0x7f807f80u;", "the pairs' max started at +inf"},
    };
    for (int b = 0; b < 4; b++) {
        const char *const edit[2] = {bugs[b].from, bugs[b].to};
        row_bug_caught(g, k, true, 40, edit, 1, "the classifier over rows of 12288 kept", bugs[b].what);
    }
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier taking its rows in turn (cuda_row.h: sn_cu_row_prefetch_plan; sm_80 and up):
 * the next row's bf16 logits copied into shared memory with cp.async while the block works on
 * this one. 7 rows of 12,288 (two steps of 1,024 threads) by the grid of two SMs, a block each
 * (rows 0, 2, 4, 6 and 1, 3, 5), their targets set: ignored rows (class 3) between counted
 * ones in a block's turn, the last real class: the interpreter's gradient in both thread
 * orders; planted bugs
 * caught: the copy of the row after this one instead of the block's next, no wait for the
 * copy, a word of each step taken from the wrong part of the vector, the target's column not
 * written again by its owner (the pass writes p there, not p - scale). sm_75 (no cp.async)
 * reads its rows as before. */
START_TEST(cpu_classifier_prefetched) {
    sn_graph *g;
    const sn_kernel *k;
    sn_program *p = classifier_graph(7, 12288, 12283, true, &g, &k);
    sn_target t = sm(80), t75 = sm(75);
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).shared_bytes, 2 * 12288);
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).grid[0], 7); /* the SMs unknown: a block a row */
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t75).shared_bytes, 0);
    t.sm_count = 2; /* a block an SM at 1024 threads (their registers) */
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).grid[0], 2);
    t.sm_count = 132;
    ck_assert_int_eq(sn_cuda_launch_dims(k, &t).grid[0], 7);
    sn_cuda_source cs = render(&k, 1);
    bool turn = strstr(cs.src, "r += gridDim.x) {") &&
                strstr(cs.src, "sn_cp_async_16(&next_row[j0 / 8], src + j0);");
    if (!turn) printf("%s\n", cs.src), fflush(stdout);
    ck_assert_msg(turn, "the classifier %s does not take its rows in turn", k->name);
    sn_cuda_source_free(&cs);
    static const struct { const char *from, *to, *what; } bugs[4] = {
        {"(r + gridDim.x) *", "(r + 1) *", "the copy of the row after this one"},
        {"sn_cp_async_wait_all();", ";", "no wait for the copy"},
        {"rc0[cs * 4 + 1] = v.y;", "rc0[cs * 4 + 1] = v.z;", "a word from the wrong part of the vector"},
        {"% 1024 == threadIdx.x) {", "% 1024 == threadIdx.x + 1) {", "the target's column not written again"},
    };
    static const int32_t targets[7] = {5, 3, 12282, 3, 0, 12282, 3}; /* 3: ignored */
    host_sm_count = 2;
    fixed_i32 = targets;
    for (int b = 0; b < 4; b++) {
        const char *const edit[2] = {bugs[b].from, bugs[b].to};
        row_bug_caught(g, k, true, 40, edit, 1, "the classifier over rows of 12288 in turn", bugs[b].what);
    }
    fixed_i32 = NULL;
    host_sm_count = 0;
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The classifier at the vocabularies of the models sinter knows (GPT-2's 50,257 padded to
 * 50,304, SmolLM2's 49,152, TinyLlama's 32,000; LLaMA 3's 128,256 and Qwen2.5's 151,936, too
 * long to keep) through NVRTC for sm_80 and sm_90: no spills. Its 1024 threads leave 64
 * registers a thread; where the row is kept in them, how ptxas schedules the unrolled steps
 * decided it (2026-11-29: 12 bytes spilled at 49,152 before the gradient's scale went into
 * the exponent). */
START_TEST(nvrtc_classifier_vocabularies) {
    if (!have_nvrtc()) return;
    static const int64_t vocab[][2] = {{50304, 50257}, {49152, 49152}, {32000, 32000},
                                       {128256, 128256}, {151936, 151936}};
    for (size_t v = 0; v < sizeof vocab / sizeof vocab[0]; v++) {
        sn_graph *g;
        const sn_kernel *k;
        sn_program *p = classifier_graph(4, vocab[v][0], vocab[v][1], true, &g, &k);
        static const int arch[] = {80, 86, 89, 90, 100, 120}; /* the RTX 30, 40, 50, a B200 */
        for (int ai = 0; ai < 6; ai++) {
            int a = arch[ai];
            sn_target t = sm(a);
            sn_cuda_source cs;
            sn_cuda_module m;
            sn_err e;
            ck_assert_msg(sn_cuda_render(&k, 1, &t, &cs, &e) == SN_OK, "%s", e.msg);
            ck_assert_msg(sn_nvrtc_compile(cs.src, "classifier", a, &m, &e) == SN_OK, "%s", e.msg);
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[0]);
            ck_assert(in);
            printf("test_cuda: classifier over %lld classes (%lld columns), sm_%d: %d registers, "
                   "%s%s, spills %d/%d\n", (long long)vocab[v][1], (long long)vocab[v][0], a,
                   in->registers, strstr(cs.src, "unsigned rc0[") ? "kept" : "not kept",
                   strstr(cs.src, "next_row") ? ", rows in turn" : "", in->spill_store_bytes,
                   in->spill_load_bytes);
            ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 && in->stack_bytes == 0,
                          "the classifier over %lld columns spills on sm_%d", (long long)vocab[v][0], a);
            /* its static and dynamic shared memory within what a block may opt into there (the
               rows in turn copy a row of 2 C bytes ahead: 100,608 of the 101,376 of sm_86/89) */
            sn_cuda_dims d = sn_cuda_launch_dims(k, &t);
            ck_assert_msg(in->shared_bytes + (int64_t)d.shared_bytes <= t.shared_max,
                          "the classifier over %lld columns takes %d + %u bytes of shared memory on "
                          "sm_%d, over %lld", (long long)vocab[v][0], in->shared_bytes, d.shared_bytes,
                          a, (long long)t.shared_max);
            sn_cuda_module_free(&m);
            sn_cuda_source_free(&cs);
        }
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* Column reductions over few rows take a thread a column (cuda_reduce.c: d <= 32, its rows'
 * loads together, added in order): a sum over 16 rows of (3, 16, 300) (300 columns: a block
 * and a short one each of 3 outer indices), a max over 5 and a mean over 20, each against the
 * interpreter in both thread orders; the rows summed from the second (planted) is caught; a
 * sum over 40 rows keeps the tiles. */
START_TEST(cpu_reduce_by_column) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(3, 16, 300));
    sn_node *m = sn_input(g, "m", SN_F32, SN_SHAPE(5, 37));
    sn_node *v = sn_input(g, "v", SN_F32, SN_SHAPE(20, 2, 150));
    sn_node *l = sn_input(g, "l", SN_F32, SN_SHAPE(40, 77));
    sn_graph_add_output(g, sn_sum(g, x, 1, false));
    sn_graph_add_output(g, sn_max(g, m, 0, false));
    sn_graph_add_output(g, sn_mean(g, v, 0, false));
    sn_graph_add_output(g, sn_sum(g, l, 0, false));
    sn_program *p = fuse(g);
    const sn_kernel *ks[8];
    int n = kernels_of(p, SN_KER_REDUCE, ks), by_column = 0;
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < n; i++) {
        sn_cuda_source cs = render(&ks[i], 1);
        by_column += strstr(cs.src, "the rows' loads issued together, added in order") != NULL;
        sn_cuda_source_free(&cs);
    }
    ck_assert_int_eq(by_column, 3);
    sn_program_free(p);
    int counts[SN_KER_KIND_COUNT] = {0};
    int ran = run_on_host(g, 1, false, 1e-6, counts);
    if (ran) printf("test_cuda: column reductions: %d kernels match\n", ran);
    p = fuse(g);
    kernels_of(p, SN_KER_REDUCE, ks);
    static const char *const second[] = {"for (int i = 0; i < 16; i++)", "for (int i = 1; i < 16; i++)"};
    row_bug_caught(g, ks[0], true, 1, second, 1, "a sum over 16 rows a thread a column",
                   "the rows summed from the second");
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* embedding_bwd (ids (N), dy (N, C) -> (V, C)) with ids that repeat and ids never used: dtype
 * dt; with `chunks`, N = 5000 over three chunks of 2048 (the last short) whose first chunk is
 * one id alone (a run of 2048), else N = 300 ids, uniform below 40 of V = 50 rows and a
 * few of the last row. Sets *it to the interpreter's values. */
static sn_graph *embedding_bwd_graph(bool chunks, sn_dtype dt, int64_t C, sn_interp **it) {
    int64_t N = chunks ? 5000 : 300, V = chunks ? 300 : 50;
    sn_graph *g = sn_graph_new();
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(N));
    sn_node *dy = sn_input(g, "dy", dt, SN_SHAPE(N, C));
    sn_graph_add_output(g, sn_embedding_bwd(g, ids, dy, V));
    int32_t *id = malloc(sizeof(int32_t) * (size_t)N);
    float *v = malloc(sizeof(float) * (size_t)(N * C));
    sn_rng r = sn_rng_seed(99);
    for (int64_t p = 0; p < N; p++) {
        uint64_t u = sn_rng_below(&r, 10);
        if (chunks) id[p] = p < 2100 ? 7 : u < 3 ? 3 : u < 4 ? 299 : (int32_t)sn_rng_below(&r, 100);
        else id[p] = u < 1 ? (int32_t)V - 1 : (int32_t)sn_rng_below(&r, 40);
    }
    for (int64_t i = 0; i < N * C; i++) v[i] = (float)sn_rng_normal(&r);
    sn_err e;
    *it = sn_interp_new(g, false);
    sn_interp_keep_all(*it, true);
    ck_assert_msg(sn_interp_set_i32(*it, ids, id, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_set(*it, dy, v, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(*it, &e) == SN_OK, "%s", e.msg);
    free(id);
    free(v);
    return g;
}

/* Runs embedding_bwd's two kernels (BUCKET, then ROWS) of g's program on the simulator, source
 * src (the rendering of them, perhaps with a planted bug); returns the worst error of ROWS
 * (host_check's caught mode: INFINITY for a NaN, an unwritten row or a scratch that differs
 * between thread orders). */
static double embedding_bwd_on_host(const char *src, const sn_kernel *const *ks,
                                    const sn_cuda_source *cs, const sn_interp *it) {
    sn_sim_module *h = host_compile(src);
    if (!h) return -1;
    /* in a child: a planted bug may index out of bounds, and a crash is caught too */
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        double bucket = host_check(h, ks[0], cs->fn[0], it, 1e-6, true);
        double rows = host_check(h, ks[1], cs->fn[1], it, 1e-6, true);
        double worst = bucket > rows ? bucket : rows;
        ssize_t w = write(fd[1], &worst, sizeof worst);
        fflush(stdout);
        _exit(w == sizeof worst ? 0 : 1);
    }
    close(fd[1]);
    double worst = INFINITY;
    int status;
    ssize_t got = read(fd[0], &worst, sizeof worst);
    close(fd[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) || got != sizeof worst) {
        printf("test_cuda: embedding_bwd: the simulator's child %s\n",
               WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "failed");
        worst = INFINITY;
    }
    sn_sim_module_free(h);
    return worst;
}

/* The bucketed embedding gradient against the interpreter, many ids repeated and most rows
 * never used (their rows written as zeros over a NaN poison), over several chunks and in one,
 * in f32 and bf16, a column a thread (C not a multiple of 4) and four (teams of 32 threads a
 * row and of 64, the last block's rows past the table); the f32 rows have the bits of an f32
 * sum in position order (the order the interpreter adds in). Then bugs planted in the rendered
 * text are caught: a count one short, a run's first position one off, the chunk offset of the
 * order forgotten, the sort's direction taken from the wrong bit, the table not zeroed, the
 * sort's barrier deleted, the shuffled steps' direction turned, a lane's two keys never
 * exchanged, a team on its neighbour's row, a row's runs read into another's, a team's size
 * wrong, the last columns never stored, a thread's columns read from the next thread's. */
START_TEST(cpu_embedding_bwd_buckets) {
    static const struct {
        bool chunks;
        sn_dtype dt;
        int64_t C;
    } cases[] = {{true, SN_F32, 37}, {false, SN_F32, 300}, {false, SN_BF16, 20}, {true, SN_F32, 1100},
                 {false, SN_BF16, 36}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sn_interp *it;
        sn_graph *g = embedding_bwd_graph(cases[c].chunks, cases[c].dt, cases[c].C, &it);
        sn_program *p = fuse(g);
        const sn_kernel *ks[4];
        ck_assert_int_eq(kernels_of(p, SN_KER_GATHER, ks), 2);
        ck_assert(ks[0]->stage == SN_GATHER_BUCKET && ks[1]->stage == SN_GATHER_ROWS);
        ck_assert_int_eq(sn_gather_chunks(ks[0]), cases[c].chunks ? 3 : 1);
        sn_cuda_source cs = render(ks, 2);
        if (c == 0) printf("test_cuda: the embedding gradient's kernels:\n%s", cs.src);
        double tol = cases[c].dt == SN_BF16 ? 8e-3 : 1e-5;
        double err = embedding_bwd_on_host(cs.src, ks, &cs, it);
        if (err < 0) goto done; /* no g++ */
        printf("test_cuda: embedding_bwd N=%lld V=%lld C=%lld %s: error %.3g\n",
               (long long)sn_numel(ks[0]->anchor->in[0]), (long long)ks[0]->anchor->shape[0],
               (long long)cases[c].C, sn_dtype_name(cases[c].dt), err);
        ck_assert_msg(err <= tol, "embedding_bwd: error %g", err);
        if (cases[c].dt == SN_F32) { /* the bits of an f32 sum in position order */
            const sn_node *n = ks[0]->anchor;
            int64_t N = sn_numel(n->in[0]), V = n->shape[0], C = cases[c].C;
            const double *id = sn_interp_value(it, n->in[0]), *dy = sn_interp_value(it, n->in[1]);
            float *want = calloc((size_t)(V * C), sizeof(float)), *got = malloc(sizeof(float) * (size_t)(V * C));
            int32_t *ib = malloc(sizeof(int32_t) * (size_t)N);
            float *db = malloc(sizeof(float) * (size_t)(N * C));
            for (int64_t q = 0; q < N; q++) {
                ib[q] = (int32_t)id[q];
                for (int64_t j = 0; j < C; j++) {
                    db[q * C + j] = (float)dy[q * C + j];
                    want[ib[q] * C + j] += db[q * C + j];
                }
            }
            sn_sim_module *h = host_compile(cs.src);
            void *bufs[3] = {got, ib, db}, *scratch = sn_test_scratch(ks[0]);
            sn_target t = sm(80);
            for (int k = 0; k < 2; k++) {
                void *params[4] = {&bufs[0], &bufs[1], k ? (void *)&bufs[2] : (void *)&scratch, &scratch};
                sn_cuda_dims d = sn_cuda_launch_dims(ks[k], &t);
                sn_sim_opts so = sn_sim_defaults();
                sn_err e;
                ck_assert_msg(sn_sim_launch(h, cs.fn[k], d.grid, d.block, d.shared_bytes, params, &so,
                                            &e) == SN_OK, "%s", e.msg);
            }
            ck_assert_msg(!memcmp(got, want, sizeof(float) * (size_t)(V * C)),
                          "embedding_bwd: not the bits of an f32 sum in position order");
            sn_sim_module_free(h);
            free(want), free(got), free(ib), free(db);
        }
        if (c == 0 || c == 3) { /* planted bugs (case 3: four columns a thread, teams of 64) */
            static const struct {
                size_t c;
                const char *what, *find, *put;
            } bugs[] = {
                {0, "a count one short", "(unsigned)(lo - i)", "(unsigned)(lo - i - 1)"},
                {0, "a run's first position one off", "first + c]", "first + c + 1]"},
                {0, "the order's chunk offset forgotten", "order[g * 2048 + first", "order[0 * 2048 + first"},
                {0, "the sort's direction from the stride", "((i & size) == 0)", "((i & stride) == 0)"},
                {0, "the table not zeroed", "table[v] = 0u;", "{}"},
                {0, "the sort's barrier deleted", "}\n                __syncthreads();\n            }", "}\n            }"},
                {0, "the shuffled steps' direction turned", "ka = lower == ((pa & size) == 0)",
                 "ka = lower != ((pa & size) == 0)"},
                {0, "the lane's two keys never exchanged", "if ((ka > kb) == ((pa & size) == 0))",
                 "if (false)"},
                {0, "a team on its neighbour's row", "v = blockIdx.x * 8 + r;", "v = blockIdx.x * 8 + (r + 1) % 8;"},
                {0, "a row's runs read into another's", "runs[rr][g] = vv", "runs[(rr + 1) % 8][g] = vv"},
                {3, "a team of 64 taken as 32", "r = threadIdx.x / 64", "r = threadIdx.x / 32 % 4"},
                {3, "the last four columns never stored", "sn_store4(&out0[(int)v * 1100 + j]",
                 "if (j < 1096) sn_store4(&out0[(int)v * 1100 + j]"},
                {3, "a thread's four columns from the next thread's", "src + j]", "src + (j + 4) % 1100]"},
            };
            for (size_t b = 0; b < sizeof bugs / sizeof bugs[0]; b++) {
                if (bugs[b].c != c) continue;
                char *src = sn_test_replace_first(cs.src, bugs[b].find, bugs[b].put);
                double e2 = embedding_bwd_on_host(src, ks, &cs, it);
                printf("test_cuda: embedding_bwd with %s: error %.3g (caught)\n", bugs[b].what, e2);
                ck_assert_msg(!(e2 <= tol), "the planted bug (%s) went unnoticed: error %g", bugs[b].what, e2);
                free(src);
            }
        }
    done:
        sn_cuda_source_free(&cs);
        sn_program_free(p);
        sn_graph_free(g);
        sn_interp_free(it);
    }
}
END_TEST

/* The kernels of the graph above at 64 and 60 columns through NVRTC for sm_75, 80 and 90 (one
 * arch a test: about 80 functions each): no spills. The gpt2 programs above take the same
 * paths at full size (rows of 768: f32 4 a step, 16-bit 8; the 50304 padded classes). */
START_TEST(nvrtc_row_vectors) {
    static const int arch[3] = {75, 80, 90};
    if (have_nvrtc()) nvrtc_program(row_vector_graph(2), "row-vectors", 24, 0, &arch[_i], 1);
}
END_TEST

/* A barrier deleted from the block sum (by editing the rendered text, as a generator bug would
 * leave it) makes the layernorm kernel over rows of 1100 (a block per row: longer than a warp
 * takes) fail the comparison: each of the two. */
START_TEST(cpu_deleted_barrier_caught) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(24, 1100));
    sn_node *w = sn_param(g, "w", SN_F32, SN_SHAPE(1100), SN_INIT_NORMAL, 1);
    sn_node *b = sn_param(g, "b", SN_F32, SN_SHAPE(1100), SN_INIT_NORMAL, 1);
    sn_graph_add_output(g, sn_layernorm(g, x, w, b, 1e-5f));
    sn_program *p = fuse(g);
    const sn_kernel *ks[4];
    ck_assert_int_eq(kernels_of(p, SN_KER_ROW, ks), 1);
    sn_cuda_source cs = render(ks, 1);
    sn_interp *it = interp_run(g, 1, false);
    const char *at[2] = {"v = sn_warp_sum(v);\n    __syncthreads();\n",
                         "partial_sum[warp] = v;\n    __syncthreads();\n"};
    sn_sim_module *h = host_compile(cs.src);
    if (h) { /* the intact text passes */
        ck_assert_double_le(host_check(h, ks[0], cs.fn[0], it, 1e-5, true), 1e-5);
        sn_sim_module_free(h);
    }
    for (int i = 0; i < 2; i++) {
        char *bad = strdup(cs.src), *cut = strstr(bad, at[i]);
        ck_assert_msg(cut, "no \"%s\" in\n%s", at[i], cs.src);
        cut = strstr(cut, "__syncthreads();");
        memmove(cut, cut + strlen("__syncthreads();"), strlen(cut + strlen("__syncthreads();")) + 1);
        h = host_compile(bad);
        if (h) {
            double err = host_check(h, ks[0], cs.fn[0], it, 1e-5, true);
            printf("test_cuda: barrier %d of sn_block_sum deleted: layernorm error %.3g "
                   "(caught)\n", i + 1, err);
            ck_assert_msg(!(err <= 1e-5), "a deleted barrier went unnoticed (error %g)", err);
            sn_sim_module_free(h);
        }
        free(bad);
    }
    sn_interp_free(it);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The optimizer step (kernel.h: GRAD_ACC, SQNORM, CLIP, ADAMW over one flat range) on 10001
 * elements (float4 steps and a tail, three norm blocks, weight decay ending inside a float4),
 * in that order, each launch in two thread orders, against sn_interp_optim on copies. */
START_TEST(cpu_optimizer_step) {
    enum { N = 10001, DECAY = 6001, NB = (N + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK };
    static const sn_kernel_kind kinds[4] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    static const char *const names[4] = {"opt_grad_acc", "opt_sqnorm", "opt_clip", "opt_adamw"};
    sn_kernel k[4];
    const sn_kernel *kp[4];
    for (int i = 0; i < 4; i++) {
        k[i] = sn_optim_kernel(kinds[i], N, DECAY, SN_F32, names[i]);
        kp[i] = &k[i];
    }
    sn_cuda_source cs = render(kp, 4);
    ck_assert_int_eq(cs.n_functions, 4);
    sn_sim_module *h = host_compile(cs.src);
    if (!h) {
        sn_cuda_source_free(&cs);
        return;
    }
    /* buffers: 0 p, 1 m, 2 v, 3 g, 4 sum, 5 partial, 6 scal; [0] the simulator's, [1] the reference's */
    static const size_t len[7] = {N, N, N, N, N, NB, SN_OPT_SCALARS};
    float *buf[2][7];
    sn_rng r = sn_rng_seed(9);
    for (int j = 0; j < 7; j++)
        for (int c = 0; c < 2; c++) buf[c][j] = aligned_alloc(64, 64 * ((len[j] * sizeof(float) + 63) / 64));
    for (size_t i = 0; i < N; i++) {
        buf[0][0][i] = (float)sn_rng_normal(&r);
        buf[0][1][i] = 0.1f * (float)sn_rng_normal(&r);
        buf[0][2][i] = 0.01f * (float)fabs(sn_rng_normal(&r));
        buf[0][3][i] = (float)sn_rng_normal(&r);
        buf[0][4][i] = (float)sn_rng_normal(&r);
    }
    float scal[SN_OPT_SCALARS] = {[SN_OPT_LR] = 3e-3f, [SN_OPT_BETA1] = 0.9f, [SN_OPT_BETA2] = 0.95f,
                                  [SN_OPT_EPS] = 1e-8f, [SN_OPT_WD] = 0.1f, [SN_OPT_BC1] = 0.19f,
                                  [SN_OPT_BC2] = 0.0975f, [SN_OPT_INV_MICRO] = 0.5f,
                                  [SN_OPT_CLIP] = 1.0f};
    memcpy(buf[0][6], scal, sizeof scal);
    for (int j = 0; j < 7; j++) memcpy(buf[1][j], buf[0][j], len[j] * sizeof(float));
    static const int args[4][5] = {{4, 3}, {5, 4, 6}, {6, 5}, {0, 1, 2, 4, 6}}; /* g is the sum */
    sn_target t = sm(80);
    for (int i = 0; i < 4; i++) {
        int nb = sn_kernel_n_bufs(&k[i]), outs[3] = {0}, n_outs = i == 3 ? 3 : 1;
        void *refs[5], *params[5];
        for (int j = 0; j < nb; j++) {
            refs[j] = buf[1][args[i][j]];
            params[j] = &buf[0][args[i][j]];
        }
        for (int o = 0; o < n_outs; o++) outs[o] = args[i][o];
        sn_interp_optim(&k[i], refs, 0, i == 2 ? 1 : i == 1 ? NB : N);
        float *before[3];
        for (int o = 0; o < n_outs; o++) {
            before[o] = malloc(len[outs[o]] * sizeof(float));
            memcpy(before[o], buf[0][outs[o]], len[outs[o]] * sizeof(float));
        }
        sn_cuda_dims d = sn_cuda_launch_dims(&k[i], &t);
        for (int reversed = 0; reversed < 2; reversed++) {
            for (int o = 0; o < n_outs; o++)
                memcpy(buf[0][outs[o]], before[o], len[outs[o]] * sizeof(float));
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_err e;
            ck_assert_msg(sn_sim_launch(h, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &so,
                                        &e) == SN_OK, "%s", e.msg);
            for (int o = 0; o < n_outs; o++) {
                size_t n = outs[o] == 6 ? SN_OPT_NORM + 1 : len[outs[o]];
                double *got = malloc(n * sizeof(double)), *want = malloc(n * sizeof(double));
                for (size_t x = 0; x < n; x++) got[x] = buf[0][outs[o]][x], want[x] = buf[1][outs[o]][x];
                char what[96];
                snprintf(what, sizeof what, "%s (%s order) buffer %d", names[i],
                         reversed ? "reversed" : "forward", outs[o]);
                sn_check_close(what, got, want, n, 1e-5, 1e-6);
                free(got);
                free(want);
            }
        }
        for (int o = 0; o < n_outs; o++) free(before[o]);
    }
    printf("test_cuda: the optimizer step over %d flat elements (grad sum, squared norm in %d "
           "blocks, clip at norm %.3f, AdamW) matches the reference in two thread orders\n", N, NB,
           (double)buf[0][6][SN_OPT_NORM]);
    ck_assert_float_lt(buf[0][6][SN_OPT_SCALE], 1.0f); /* the norm was clipped */
    for (int j = 0; j < 7; j++)
        for (int c = 0; c < 2; c++) free(buf[c][j]);
    sn_sim_module_free(h);
    sn_cuda_source_free(&cs);
}
END_TEST

/* The value of 16-bit dtype t's bits u. */
static double low_value(sn_dtype t, uint16_t u) {
    if (t == SN_BF16) {
        uint32_t w = (uint32_t)u << 16;
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    int ex = u >> 10 & 0x1f, man = u & 0x3ff;
    double a = ex == 0x1f ? (man ? NAN : INFINITY) : ex ? ldexp(1024 + man, ex - 25) : ldexp(man, -24);
    return u & 0x8000 ? -a : a;
}

/* AdamW writing the weights' 16-bit copies (flat_low: bf16, f16) on 1003 elements (float4 steps
 * and a tail of 3), on the simulator in two thread orders: p, m, v to the bit those of AdamW
 * without copies, each copy the new p rounded to nearest even. */
START_TEST(cpu_adamw_low_copies) {
    enum { N = 1003, DECAY = 501 };
    sn_kernel k[3];
    const sn_kernel *kp[3];
    for (int i = 0; i < 3; i++) {
        sn_dtype low = i == 0 ? SN_F32 : i == 1 ? SN_BF16 : SN_F16;
        char name[32];
        snprintf(name, sizeof name, "opt_adamw_%s", sn_dtype_name(low));
        k[i] = sn_optim_kernel(SN_KER_ADAMW, N, DECAY, low, name);
        kp[i] = &k[i];
    }
    sn_cuda_source cs = render(kp, 3);
    ck_assert_int_eq(cs.n_functions, 3);
    ck_assert(strstr(cs.src, "make_uint2(sn_pack_bf16x2(p4.x, p4.y)") &&
              strstr(cs.src, "low[i] = sn_f32_to_f16(p[i]);"));
    sn_sim_module *h = host_compile(cs.src);
    if (!h) {
        sn_cuda_source_free(&cs);
        return;
    }
    float *st[2][3], *g = aligned_alloc(64, 4096 * 2), *scal = aligned_alloc(64, 64 * 2);
    uint16_t *low = aligned_alloc(64, 4096);
    float init[3][N];
    sn_rng r = sn_rng_seed(11);
    for (int i = 0; i < N; i++) {
        init[0][i] = (float)sn_rng_normal(&r);
        init[1][i] = 0.1f * (float)sn_rng_normal(&r);
        init[2][i] = 0.01f * (float)fabs(sn_rng_normal(&r));
        g[i] = (float)sn_rng_normal(&r);
    }
    float h0[SN_OPT_SCALARS] = {[SN_OPT_LR] = 3e-3f, [SN_OPT_BETA1] = 0.9f, [SN_OPT_BETA2] = 0.95f,
                                [SN_OPT_EPS] = 1e-8f, [SN_OPT_WD] = 0.1f, [SN_OPT_BC1] = 0.19f,
                                [SN_OPT_BC2] = 0.0975f, [SN_OPT_INV_MICRO] = 0.5f, [SN_OPT_SCALE] = 0.7f};
    memcpy(scal, h0, sizeof h0);
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 3; j++) st[c][j] = aligned_alloc(64, 4096 * 2);
    sn_target t = sm(80);
    for (int i = 0; i < 3; i++)
        for (int reversed = 0; reversed < 2; reversed++) {
            float **b = st[i > 0];
            for (int j = 0; j < 3; j++) memcpy(b[j], init[j], sizeof init[j]);
            void *params[6] = {&b[0], &b[1], &b[2], &g, &scal, &low};
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_cuda_dims d = sn_cuda_launch_dims(&k[i], &t);
            sn_err e;
            ck_assert_msg(sn_sim_launch(h, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &so,
                                        &e) == SN_OK, "%s", e.msg);
            if (i == 0) continue;
            for (int j = 0; j < 3; j++) ck_assert(!memcmp(st[0][j], st[1][j], sizeof init[j]));
            for (int x = 0; x < N; x++)
                ck_assert_msg(low_value(k[i].opt.flat_low, low[x]) == sn_dtype_round(k[i].opt.flat_low, b[0][x]),
                              "%s copy %d: %g, want %g", k[i].name, x, low_value(k[i].opt.flat_low, low[x]),
                              sn_dtype_round(k[i].opt.flat_low, b[0][x]));
        }
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 3; j++) free(st[c][j]);
    free(g), free(scal), free(low);
    sn_sim_module_free(h);
    sn_cuda_source_free(&cs);
}
END_TEST

/* ---- NF4 weights unpacked (cuda_dequant.c) ---- */

/* The dequantize kernel on the simulator against sn_nf4_dequantize bit for bit, f32 out and
 * rounded once to bf16 and f16 (sn_lowp_round: nearest even), a short last block and several
 * groups of scales, normal weights and random bytes (f16's subnormals and infinities), with its
 * launch and with a grid of 3 blocks (the grid-stride loop goes round), in both thread orders
 * into NaN-poisoned outputs; and NVRTC for sm_75, sm_80 and sm_90 without spills. */
START_TEST(cpu_dequant_nf4) {
    const int64_t sizes[][2] = {{37, 50}, {300, 192}}; /* 29 blocks; 900 blocks in 4 groups */
    const sn_dtype dts[] = {SN_F32, SN_BF16, SN_F16};
    bool nvrtc = have_nvrtc();
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++) {
            sn_dtype dt = dts[di];
            int64_t n = sizes[si][0] * sizes[si][1];
            sn_graph *g = sn_graph_new();
            sn_node *w = sn_param_nf4(g, "w", dt, SN_SHAPE(sizes[si][0], sizes[si][1]));
            ck_assert_msg(w, "%s", sn_graph_error(g));
            sn_kernel k = {.kind = SN_KER_DEQUANT, .id = w->id, .n_out = 1, .n_in = 1, .anchor = w};
            snprintf(k.name, sizeof k.name, "k%d_dequant_nf4", w->id);
            k.args[0] = w;
            k.args[1] = w->in[0];
            sn_kernel_work(&k, &k.n_items, &k.serial);
            const sn_kernel *kp = &k;
            sn_cuda_source cs = render(&kp, 1);
            ck_assert_msg(strstr(cs.src, "fmaf((float)scale_code[b], step[b / 256], mean)"), "%s", cs.src);
            for (int a = 0; nvrtc && a < 3; a++) {
                sn_cuda_module m;
                sn_err e;
                int arch = (int[]){75, 80, 90}[a];
                ck_assert_msg(sn_nvrtc_compile(cs.src, "dequant.cu", arch, &m, &e) == SN_OK, "%s", e.msg);
                const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[0]);
                ck_assert(in && in->spill_store_bytes == 0 && in->stack_bytes == 0);
                sn_cuda_module_free(&m);
            }
            sn_sim_module *h = host_compile(cs.src);
            if (!h) {
                sn_cuda_source_free(&cs);
                sn_graph_free(g);
                return;
            }
            sn_nf4_layout l = sn_nf4_layout_of(n);
            float *v = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
            uint8_t *q = aligned_alloc(64, (size_t)(l.bytes + 63) / 64 * 64);
            void *out = aligned_alloc(64, (size_t)(4 * n + 63) / 64 * 64);
            for (int random = 0; random < 2; random++) {
                sn_err e;
                if (random) {
                    uint8_t *rq = sn_test_nf4_random(n, 50 + (uint64_t)si);
                    memcpy(q, rq, (size_t)l.bytes);
                    free(rq);
                } else {
                    sn_rng r = sn_rng_seed(40 + (uint64_t)si);
                    for (int64_t i = 0; i < n; i++) v[i] = (float)(0.02 * sn_rng_normal(&r));
                    ck_assert_msg(sn_nf4_quantize(v, n, q, &e) == SN_OK, "%s", e.msg);
                }
                sn_nf4_dequantize(q, n, want);
                void *params[2] = {&out, &q};
                sn_target t = sm(80);
                sn_cuda_dims dims[2] = {sn_cuda_launch_dims(&k, &t), {.grid = {3, 1, 1}, .block = {256, 1, 1}}};
                for (int d = 0; d < 2; d++)
                    for (int rev = 0; rev < 2; rev++) {
                        memset(out, 0xff, (size_t)(4 * n)); /* NaN in f32, bf16 and f16 */
                        sn_sim_opts so = sn_sim_defaults();
                        so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
                        ck_assert_msg(sn_sim_launch(h, cs.fn[0], dims[d].grid, dims[d].block,
                                                    dims[d].shared_bytes, params, &so, &e) == SN_OK, "%s", e.msg);
                        for (int64_t i = 0; i < n; i++) {
                            uint32_t rb, got = dt == SN_F32 ? ((uint32_t *)out)[i] : ((uint16_t *)out)[i];
                            memcpy(&rb, &want[i], 4);
                            if (dt != SN_F32) rb = sn_lowp_round(dt, want[i]);
                            ck_assert_msg(got == rb, "%s, %lld weights (%s), grid %u, %s order: weight "
                                          "%lld is 0x%08x, want 0x%08x", sn_dtype_name(dt), (long long)n,
                                          random ? "random bytes" : "normal weights", dims[d].grid[0],
                                          rev ? "reversed" : "forward", (long long)i, got, rb);
                        }
                    }
            }
            free(v), free(want), free(q), free(out);
            sn_sim_module_free(h);
            sn_cuda_source_free(&cs);
            sn_graph_free(g);
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("codegen");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, emitter_indents_blocks);
    tcase_add_test_raise_signal(tc, emitter_asserts_blocks_closed, SIGABRT);
    tcase_add_test(tc, ptxas_report_parsed);
    tcase_add_test(tc, render_bias_gelu_text);
    tcase_add_test(tc, render_rejects_what_it_cannot);
    tcase_add_test(tc, render_identical_kernels_once);
    tcase_add_test(tc, render_16bit_vectors);
    tcase_add_test(tc, render_row_vectors);
    tcase_add_test(tc, render_rows_kept);
    tcase_add_test(tc, sum_chunk_rule);
    suite_add_tcase(s, tc);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 120);
    tcase_add_test(nv, nvrtc_gpt2_124m);
    tcase_add_test(nv, nvrtc_gpt2_124m_bf16);
    tcase_add_test(nv, nvrtc_gpt2_dropout);
    tcase_add_test(nv, nvrtc_gpt2_chunked_logits);
    tcase_add_test(nv, nvrtc_gpt2_124m_f16);
    tcase_add_test(nv, nvrtc_llama_small);
    tcase_add_loop_test(nv, nvrtc_row_vectors, 0, 3);
    tcase_add_test(nv, nvrtc_classifier_vocabularies);
    tcase_add_test(nv, nvrtc_error_carries_log);
    suite_add_tcase(s, nv);
    TCase *cpu = tcase_create("cpu");
    tcase_set_timeout(cpu, 120);
    tcase_add_test(cpu, cpu_bias_gelu);
    tcase_add_test(cpu, cpu_view_copies);
    tcase_add_test(cpu, cpu_padded_sum);
    tcase_add_test(cpu, cpu_chain_with_constants);
    tcase_add_test(cpu, cpu_every_op);
    tcase_add_test(cpu, cpu_dequant_nf4);
    tcase_add_test(cpu, cpu_16bit_vectors);
    tcase_add_test(cpu, cpu_gpt2_tiny_kernels);
    tcase_add_test(cpu, cpu_llama_tiny_kernels);
    tcase_add_test(cpu, cpu_gpt2_tiny_unfused_attention);
    tcase_add_test(cpu, cpu_gpt2_tiny_bf16);
    tcase_add_test(cpu, cpu_gpt2_tiny_chunked_logits);
    tcase_add_test(cpu, cpu_gpt2_tiny_f16);
    tcase_add_test(cpu, cpu_row_ops_several_warps);
    tcase_add_test(cpu, cpu_row_ops_warp_per_row);
    tcase_add_test(cpu, cpu_chunked_weight_gradient);
    tcase_add_test(cpu, cpu_deleted_barrier_caught);
    tcase_add_loop_test(cpu, cpu_norm_pair, 0, 8);
    tcase_add_loop_test(cpu, cpu_joined_finish, 0, 2);
    tcase_add_test(cpu, cpu_row_vectors);
    tcase_add_test(cpu, cpu_classifier_vectors);
    tcase_add_test(cpu, cpu_classifier_kept);
    tcase_add_test(cpu, cpu_classifier_prefetched);
    tcase_add_test(cpu, cpu_reduce_by_column);
    tcase_add_test(cpu, cpu_row_vector_lane_bug_caught);
    tcase_add_test(cpu, cpu_embedding_bwd_buckets);
    tcase_add_test(cpu, cpu_optimizer_step);
    tcase_add_test(cpu, cpu_adamw_low_copies);
    suite_add_tcase(s, cpu);
    return sn_test_main(s);
}
