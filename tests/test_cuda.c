/* test_cuda.c: the CUDA backend on a machine without a GPU: the emitter, the renderer and ptxas's
 * report; every generated kernel of GPT-2 (and of the LLaMA example) training (all but GEMMs and
 * attention) compiled by NVRTC for sm_75, sm_80 and sm_90 as one module (no spills, no stack);
 * and the very text NVRTC gets run on the CPU by the SIMT simulator (sim/sim.h) with the launch
 * dims of sn_cuda_launch_dims, against the reference interpreter: pointwise kernels and every
 * kernel of tiny models' steps. Row kernels: test_cuda_rows.c; the weights' kernels:
 * test_cuda_weights.c; attention: test_cuda_attention.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "examples/llama/llama.h"

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
    suite_add_tcase(s, tc);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 120);
    tcase_add_test(nv, nvrtc_gpt2_124m);
    tcase_add_test(nv, nvrtc_gpt2_124m_bf16);
    tcase_add_test(nv, nvrtc_gpt2_dropout);
    tcase_add_test(nv, nvrtc_gpt2_chunked_logits);
    tcase_add_test(nv, nvrtc_gpt2_124m_f16);
    tcase_add_test(nv, nvrtc_llama_small);
    tcase_add_test(nv, nvrtc_error_carries_log);
    suite_add_tcase(s, nv);
    TCase *cpu = tcase_create("cpu");
    tcase_set_timeout(cpu, 120);
    tcase_add_test(cpu, cpu_bias_gelu);
    tcase_add_test(cpu, cpu_view_copies);
    tcase_add_test(cpu, cpu_padded_sum);
    tcase_add_test(cpu, cpu_chain_with_constants);
    tcase_add_test(cpu, cpu_every_op);
    tcase_add_test(cpu, cpu_16bit_vectors);
    tcase_add_test(cpu, cpu_gpt2_tiny_kernels);
    tcase_add_test(cpu, cpu_llama_tiny_kernels);
    tcase_add_test(cpu, cpu_gpt2_tiny_unfused_attention);
    tcase_add_test(cpu, cpu_gpt2_tiny_bf16);
    tcase_add_test(cpu, cpu_gpt2_tiny_chunked_logits);
    tcase_add_test(cpu, cpu_gpt2_tiny_f16);
    suite_add_tcase(s, cpu);
    return sn_test_main(s);
}
