/* test_autocast.c: the autocast pass (mixed precision): text in, text out; the tiny GPT-2 in
 * bf16 and fp16 on the reference interpreter (rounding emulated) against fp32; gradients of the
 * cast graph against finite differences; a bf16 tiny GPT-2 that trains.
 * Tolerances: bf16 keeps 8 bits of mantissa (unit roundoff 2^-9 = 2e-3), fp16 11 (2^-12). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"
#include "models/gpt2.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "runtime/device.h"
#include "support/rng.h"
#include "train/train.h"
#include "train/offload.h"
#include "harness.h"
#include "tiny_gpt2.h"

/* ---- text in, text out ---- */

static char *autocast_text(const char *in, sn_precision p, int expect_casts) {
    sn_graph *g, *out;
    sn_err e;
    ck_assert_msg(sn_graph_parse(in, &g, &e) == SN_OK, "%s", e.msg);
    int n;
    ck_assert_msg(sn_pass_autocast(g, p, &out, &n, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(n, expect_casts);
    ck_assert_msg(sn_verify(out, &e) == SN_OK, "%s", e.msg);
    char *text = sn_graph_to_string(out);
    sn_graph_free(g);
    sn_graph_free(out);
    return text;
}

/* A weight read by two products is cast once; layernorm, gelu and the loss stay f32; the
 * products return f32; the loss reads the logits rounded to bf16 (torch.autocast's). */
START_TEST(text_mlp) {
    char *got = autocast_text("graph {\n"
                              "  %0 = input \"x\" : f32[2,3,4]\n"
                              "  %1 = input \"targets\" : i32[2,3]\n"
                              "  %2 = param \"w\" init=normal f=0.02 : f32[4,4]\n"
                              "  %3 = param \"g\" init=ones f=0 : f32[4]\n"
                              "  %4 = param \"b\" init=zeros f=0 : f32[4]\n"
                              "  %5 = layernorm %0, %3, %4 f=1e-05 : f32[2,3,4]\n"
                              "  %6 = matmul %5, %2 ta=0 tb=0 : f32[2,3,4]\n"
                              "  %7 = gelu %6 : f32[2,3,4]\n"
                              "  %8 = matmul %7, %2 ta=0 tb=1 : f32[2,3,4]\n"
                              "  %9 = cross_entropy %8, %1 ignore_index=-1 : f32[]\n"
                              "  output %8\n"
                              "  loss %9\n"
                              "}\n",
                              SN_PRECISION_BF16, 5);
    ck_assert_str_eq(got, "graph {\n"
                          "  %0 = input \"x\" : f32[2,3,4]\n"
                          "  %1 = input \"targets\" : i32[2,3]\n"
                          "  %2 = param \"w\" init=normal f=0.02 : f32[4,4]\n"
                          "  %3 = param \"g\" init=ones f=0 : f32[4]\n"
                          "  %4 = param \"b\" init=zeros f=0 : f32[4]\n"
                          "  %5 = layernorm %0, %3, %4 f=1e-05 : f32[2,3,4]\n"
                          "  %6 = cast %5 : bf16[2,3,4]\n"
                          "  %7 = cast %2 : bf16[4,4]\n"
                          "  %8 = matmul %6, %7 ta=0 tb=0 : f32[2,3,4]\n"
                          "  %9 = gelu %8 : f32[2,3,4]\n"
                          "  %10 = cast %9 : bf16[2,3,4]\n"
                          "  %11 = matmul %10, %7 ta=0 tb=1 : f32[2,3,4]\n"
                          "  %12 = cast %11 : bf16[2,3,4]\n"
                          "  %13 = cast %12 : f32[2,3,4]\n"
                          "  %14 = cross_entropy %13, %1 start=0 end=0 ignore_index=-1 : f32[]\n"
                          "  output %11\n"
                          "  loss %14\n"
                          "}\n");
    free(got);
}
END_TEST

/* q, k, v viewed from one QKV value: one cast of it (f16 here), the views re-made in f16 (the
 * f32 ones, now unread, dropped), the attention output f16 read by the projection directly; an
 * output keeps its f32 dtype. */
START_TEST(text_attention) {
    char *got = autocast_text("graph {\n"
                              "  %0 = input \"qkv\" : f32[1,4,48]\n"
                              "  %1 = param \"w\" init=normal f=0.02 : f32[16,16]\n"
                              "  %2 = slice %0 axis=2 start=0 end=16 : f32[1,4,16]\n"
                              "  %3 = slice %0 axis=2 start=16 end=32 : f32[1,4,16]\n"
                              "  %4 = slice %0 axis=2 start=32 end=48 : f32[1,4,16]\n"
                              "  %5 = attention_lse %2, %3 f=0.25 : f32[1,4]\n"
                              "  %6 = attention %2, %3, %4, %5 f=0.25 : f32[1,4,16]\n"
                              "  %7 = matmul %6, %1 ta=0 tb=0 : f32[1,4,16]\n"
                              "  output %6\n"
                              "  output %7\n"
                              "}\n",
                              SN_PRECISION_FP16, 3);
    ck_assert_str_eq(got, "graph {\n"
                          "  %0 = input \"qkv\" : f32[1,4,48]\n"
                          "  %1 = param \"w\" init=normal f=0.02 : f32[16,16]\n"
                          "  %2 = cast %0 : f16[1,4,48]\n"
                          "  %3 = slice %2 axis=2 start=0 end=16 : f16[1,4,16]\n"
                          "  %4 = slice %2 axis=2 start=16 end=32 : f16[1,4,16]\n"
                          "  %5 = attention_lse %3, %4 f=0.25 : f32[1,4]\n"
                          "  %6 = slice %2 axis=2 start=32 end=48 : f16[1,4,16]\n"
                          "  %7 = attention %3, %4, %6, %5 f=0.25 : f16[1,4,16]\n"
                          "  %8 = cast %1 : f16[16,16]\n"
                          "  %9 = matmul %7, %8 ta=0 tb=0 : f32[1,4,16]\n"
                          "  %10 = cast %7 : f32[1,4,16]\n"
                          "  output %10\n"
                          "  output %9\n"
                          "}\n");
    free(got);
}
END_TEST

/* A LoRA adapter's sum (frontend/lora.h): the adapter's product read through its bf16 copy
 * (PEFT's), added to the base's f32 sum (product + the bias in bf16). Read by a GELU: the sum
 * rounded (the base's GEMM stores it: its BIAS and GELU epilogues with accum, the copy as
 * cuBLASLt's C, program/kernel.h); read by a residual add (an f32 reader): kept in f32. */
START_TEST(text_lora) {
    char *got = autocast_text("graph {\n"
                              "  %0 = input \"x\" : f32[2,3,4]\n"
                              "  %1 = param \"fc.w\" init=normal f=0.02 : f32[4,8]\n"
                              "  %2 = param \"fc.b\" init=zeros f=0 : f32[8]\n"
                              "  %3 = param \"fc.lora_a\" init=normal f=0.5 : f32[4,2]\n"
                              "  %4 = param \"fc.lora_b\" init=zeros f=0 : f32[2,8]\n"
                              "  %5 = matmul %0, %1 ta=0 tb=0 : f32[2,3,8]\n"
                              "  %6 = add %5, %2 : f32[2,3,8]\n"
                              "  %7 = matmul %0, %3 ta=0 tb=0 : f32[2,3,2]\n"
                              "  %8 = matmul %7, %4 ta=0 tb=0 : f32[2,3,8]\n"
                              "  %9 = add %6, %8 : f32[2,3,8]\n"
                              "  %10 = gelu %9 : f32[2,3,8]\n"
                              "  %11 = param \"proj.w\" init=normal f=0.02 : f32[8,4]\n"
                              "  %12 = param \"proj.lora_a\" init=normal f=0.5 : f32[8,2]\n"
                              "  %13 = param \"proj.lora_b\" init=zeros f=0 : f32[2,4]\n"
                              "  %14 = matmul %10, %11 ta=0 tb=0 : f32[2,3,4]\n"
                              "  %15 = matmul %10, %12 ta=0 tb=0 : f32[2,3,2]\n"
                              "  %16 = matmul %15, %13 ta=0 tb=0 : f32[2,3,4]\n"
                              "  %17 = add %14, %16 : f32[2,3,4]\n"
                              "  %18 = add %0, %17 : f32[2,3,4]\n"
                              "  output %18\n"
                              "}\n",
                              SN_PRECISION_BF16, 18);
    ck_assert_str_eq(got, "graph {\n"
                          "  %0 = input \"x\" : f32[2,3,4]\n"
                          "  %1 = param \"fc.w\" init=normal f=0.02 : f32[4,8]\n"
                          "  %2 = param \"fc.b\" init=zeros f=0 : f32[8]\n"
                          "  %3 = param \"fc.lora_a\" init=normal f=0.5 : f32[4,2]\n"
                          "  %4 = param \"fc.lora_b\" init=zeros f=0 : f32[2,8]\n"
                          "  %5 = cast %0 : bf16[2,3,4]\n"
                          "  %6 = cast %1 : bf16[4,8]\n"
                          "  %7 = matmul %5, %6 ta=0 tb=0 : f32[2,3,8]\n"
                          "  %8 = cast %2 : bf16[8]\n"
                          "  %9 = cast %8 : f32[8]\n"
                          "  %10 = add %7, %9 : f32[2,3,8]\n"
                          "  %11 = cast %3 : bf16[4,2]\n"
                          "  %12 = matmul %5, %11 ta=0 tb=0 : f32[2,3,2]\n"
                          "  %13 = cast %12 : bf16[2,3,2]\n"
                          "  %14 = cast %4 : bf16[2,8]\n"
                          "  %15 = matmul %13, %14 ta=0 tb=0 : f32[2,3,8]\n"
                          "  %16 = cast %15 : bf16[2,3,8]\n"
                          "  %17 = cast %16 : f32[2,3,8]\n"
                          "  %18 = add %10, %17 : f32[2,3,8]\n"
                          "  %19 = cast %18 : bf16[2,3,8]\n"
                          "  %20 = cast %19 : f32[2,3,8]\n"
                          "  %21 = gelu %20 : f32[2,3,8]\n"
                          "  %22 = param \"proj.w\" init=normal f=0.02 : f32[8,4]\n"
                          "  %23 = param \"proj.lora_a\" init=normal f=0.5 : f32[8,2]\n"
                          "  %24 = param \"proj.lora_b\" init=zeros f=0 : f32[2,4]\n"
                          "  %25 = cast %21 : bf16[2,3,8]\n"
                          "  %26 = cast %22 : bf16[8,4]\n"
                          "  %27 = matmul %25, %26 ta=0 tb=0 : f32[2,3,4]\n"
                          "  %28 = cast %23 : bf16[8,2]\n"
                          "  %29 = matmul %25, %28 ta=0 tb=0 : f32[2,3,2]\n"
                          "  %30 = cast %29 : bf16[2,3,2]\n"
                          "  %31 = cast %24 : bf16[2,4]\n"
                          "  %32 = matmul %30, %31 ta=0 tb=0 : f32[2,3,4]\n"
                          "  %33 = cast %32 : bf16[2,3,4]\n"
                          "  %34 = cast %33 : f32[2,3,4]\n"
                          "  %35 = add %27, %34 : f32[2,3,4]\n"
                          "  %36 = add %0, %35 : f32[2,3,4]\n"
                          "  output %36\n"
                          "}\n");
    free(got);
}
END_TEST

/* SwiGLU (LLaMA's MLP): silu(gate) * up reads both products rounded to bf16, as torch.autocast's
 * linear layers return them, in either order of the mul; a SiLU of something else (here x) and
 * the mul by it stay f32. */
START_TEST(text_swiglu) {
    char *got = autocast_text("graph {\n"
                              "  %0 = input \"x\" : f32[2,3,4]\n"
                              "  %1 = param \"wg\" init=normal f=0.02 : f32[4,6]\n"
                              "  %2 = param \"wu\" init=normal f=0.02 : f32[4,6]\n"
                              "  %3 = param \"wd\" init=normal f=0.02 : f32[6,4]\n"
                              "  %4 = matmul %0, %1 ta=0 tb=0 : f32[2,3,6]\n"
                              "  %5 = matmul %0, %2 ta=0 tb=0 : f32[2,3,6]\n"
                              "  %6 = silu %4 : f32[2,3,6]\n"
                              "  %7 = mul %5, %6 : f32[2,3,6]\n"
                              "  %8 = matmul %7, %3 ta=0 tb=0 : f32[2,3,4]\n"
                              "  %9 = silu %0 : f32[2,3,4]\n"
                              "  %10 = mul %9, %8 : f32[2,3,4]\n"
                              "  output %10\n"
                              "}\n",
                              SN_PRECISION_BF16, 9);
    ck_assert_str_eq(got, "graph {\n"
                          "  %0 = input \"x\" : f32[2,3,4]\n"
                          "  %1 = param \"wg\" init=normal f=0.02 : f32[4,6]\n"
                          "  %2 = param \"wu\" init=normal f=0.02 : f32[4,6]\n"
                          "  %3 = param \"wd\" init=normal f=0.02 : f32[6,4]\n"
                          "  %4 = cast %0 : bf16[2,3,4]\n"
                          "  %5 = cast %1 : bf16[4,6]\n"
                          "  %6 = matmul %4, %5 ta=0 tb=0 : f32[2,3,6]\n"
                          "  %7 = cast %2 : bf16[4,6]\n"
                          "  %8 = matmul %4, %7 ta=0 tb=0 : f32[2,3,6]\n"
                          "  %9 = cast %6 : bf16[2,3,6]\n"
                          "  %10 = cast %9 : f32[2,3,6]\n"
                          "  %11 = silu %10 : f32[2,3,6]\n"
                          "  %12 = cast %8 : bf16[2,3,6]\n"
                          "  %13 = cast %12 : f32[2,3,6]\n"
                          "  %14 = mul %13, %11 : f32[2,3,6]\n"
                          "  %15 = cast %14 : bf16[2,3,6]\n"
                          "  %16 = cast %3 : bf16[6,4]\n"
                          "  %17 = matmul %15, %16 ta=0 tb=0 : f32[2,3,4]\n"
                          "  %18 = silu %0 : f32[2,3,4]\n"
                          "  %19 = mul %18, %17 : f32[2,3,4]\n"
                          "  output %19\n"
                          "}\n");
    free(got);
}
END_TEST

/* Rotary embeddings (LLaMA's q and k): a product split into heads and read only by pointwise
 * ops (and rotate_half's concat) is read rounded to bf16, as torch.autocast's projection
 * returns it: one cast of the product under its views, the halves concatenated in bf16; a
 * product that a reduction also reads (a view of it summed) stays f32. */
START_TEST(text_rotary) {
    char *got = autocast_text("graph {\n"
                              "  %0 = input \"x\" : f32[2,3,8]\n"
                              "  %1 = input \"cos\" : f32[3,4]\n"
                              "  %2 = input \"sin\" : f32[3,4]\n"
                              "  %3 = param \"wq\" init=normal f=0.02 : f32[8,8]\n"
                              "  %4 = matmul %0, %3 ta=0 tb=0 : f32[2,3,8]\n"
                              "  %5 = reshape %4 : f32[2,3,2,4]\n"
                              "  %6 = permute %5 perm=[0,2,1,3] : f32[2,2,3,4]\n"
                              "  %7 = slice %6 axis=3 start=2 end=4 : f32[2,2,3,2]\n"
                              "  %8 = slice %6 axis=3 start=0 end=2 : f32[2,2,3,2]\n"
                              "  %9 = concat %7, %8 axis=3 : f32[2,2,3,4]\n"
                              "  %10 = mul %9, %2 : f32[2,2,3,4]\n"
                              "  %11 = mul %6, %1 : f32[2,2,3,4]\n"
                              "  %12 = add %11, %10 : f32[2,2,3,4]\n"
                              "  %13 = matmul %0, %3 ta=0 tb=0 : f32[2,3,8]\n"
                              "  %14 = reshape %13 : f32[2,3,2,4]\n"
                              "  %15 = permute %14 perm=[0,2,1,3] : f32[2,2,3,4]\n"
                              "  %16 = mul %15, %1 : f32[2,2,3,4]\n"
                              "  %17 = sum %15 axis=3 : f32[2,2,3]\n"
                              "  output %12\n"
                              "  output %16\n"
                              "  output %17\n"
                              "}\n",
                              SN_PRECISION_BF16, 5);
    ck_assert_str_eq(got, "graph {\n"
                          "  %0 = input \"x\" : f32[2,3,8]\n"
                          "  %1 = input \"cos\" : f32[3,4]\n"
                          "  %2 = input \"sin\" : f32[3,4]\n"
                          "  %3 = param \"wq\" init=normal f=0.02 : f32[8,8]\n"
                          "  %4 = cast %0 : bf16[2,3,8]\n"
                          "  %5 = cast %3 : bf16[8,8]\n"
                          "  %6 = matmul %4, %5 ta=0 tb=0 : f32[2,3,8]\n"
                          "  %7 = cast %6 : bf16[2,3,8]\n"
                          "  %8 = reshape %7 : bf16[2,3,2,4]\n"
                          "  %9 = permute %8 perm=[0,2,1,3] : bf16[2,2,3,4]\n"
                          "  %10 = slice %9 axis=3 start=2 end=4 : bf16[2,2,3,2]\n"
                          "  %11 = slice %9 axis=3 start=0 end=2 : bf16[2,2,3,2]\n"
                          "  %12 = concat %10, %11 axis=3 : bf16[2,2,3,4]\n"
                          "  %13 = cast %12 : f32[2,2,3,4]\n"
                          "  %14 = mul %13, %2 : f32[2,2,3,4]\n"
                          "  %15 = cast %9 : f32[2,2,3,4]\n"
                          "  %16 = mul %15, %1 : f32[2,2,3,4]\n"
                          "  %17 = add %16, %14 : f32[2,2,3,4]\n"
                          "  %18 = matmul %4, %5 ta=0 tb=0 : f32[2,3,8]\n"
                          "  %19 = reshape %18 : f32[2,3,2,4]\n"
                          "  %20 = permute %19 perm=[0,2,1,3] : f32[2,2,3,4]\n"
                          "  %21 = mul %20, %1 : f32[2,2,3,4]\n"
                          "  %22 = sum %20 axis=3 keepdim=0 : f32[2,2,3]\n"
                          "  output %17\n"
                          "  output %21\n"
                          "  output %22\n"
                          "}\n");
    free(got);
}
END_TEST

START_TEST(errors_say_what_to_do) {
    sn_graph *g = sn_graph_new(), *out;
    sn_node *x = sn_param(g, "x", SN_F32, SN_SHAPE(2, 2), SN_INIT_NORMAL, 1);
    sn_node *loss = sn_sum(g, sn_reshape(g, sn_matmul(g, x, x), SN_SHAPE(-1)), 0, false);
    sn_err e;
    int n;
    ck_assert(sn_pass_autocast(g, SN_PRECISION_FP32, &out, &n, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "use bf16 or fp16"), "%s", e.msg);
    ck_assert(sn_backward(g, loss, &e) == SN_OK);
    ck_assert(sn_pass_autocast(g, SN_PRECISION_BF16, &out, &n, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "before autodiff"), "%s", e.msg);
    ck_assert(out == NULL);
    sn_pipeline_opts o = {.dump_after = "autocast"};
    ck_assert(sn_compile(g, &o, NULL, NULL, &e) == SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "precision is fp32"), "%s", e.msg);
    ck_assert_int_eq(sn_precision_parse("bf16"), SN_PRECISION_BF16);
    ck_assert_int_eq(sn_precision_parse("fp8"), -1);
    sn_graph_free(g);
}
END_TEST

/* ---- the tiny GPT-2 on the interpreter: bf16 / fp16 against fp32 ---- */

enum { B = 2, T = 16, V = 64 };

static sn_graph *tiny(sn_precision p, bool backward) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.precision = p;
    o.backward = backward;
    sn_pipeline_stats st;
    ck_assert_msg(sn_compile(g, &o, NULL, &st, &e) == SN_OK, "%s", e.msg);
    ck_assert(p == SN_PRECISION_FP32 ? st.casts == 0 : st.casts > 0);
    return g;
}

static const sn_node *input(const sn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_INPUT && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
    ck_abort_msg("no input %s", name);
    return NULL;
}

/* An interpreter of g with the init weights (seed 5) and one batch of tokens. */
static sn_interp *start(const sn_graph *g, bool exact) {
    sn_interp *it = sn_interp_new(g, exact);
    sn_interp_keep_all(it, true);
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    sn_err e;
    for (int i = 0; i < np; i++) {
        float *v = malloc(sizeof(float) * (size_t)sn_numel(params[i]));
        sn_param_init(params[i], v, 5);
        ck_assert_msg(sn_interp_set(it, params[i], v, &e) == SN_OK, "%s", e.msg);
        free(v);
    }
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(9);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, V), y[i] = (int32_t)sn_rng_below(&r, V);
    ck_assert(sn_interp_set_i32(it, input(g, "idx"), x, &e) == SN_OK);
    ck_assert(sn_interp_set_i32(it, input(g, "targets"), y, &e) == SN_OK);
    const sn_node *scale = sn_graph_input(g, SN_ROLE_LOSS_SCALE); /* fp16's: 1 (the loss as fp32's) */
    if (scale) {
        ck_assert_str_eq(scale->name, SN_LOSS_SCALE_INPUT);
        ck_assert(sn_interp_set(it, scale, (const float[]){1}, &e) == SN_OK);
    }
    return it;
}

/* The loss within a few units of roundoff of fp32's (a sum of many rounded products: errors
 * mostly cancel), every parameter gradient within 10 units by normalized max error. The same
 * graph in exact mode (no rounding) equals fp32 to 1e-9: the casts change nothing else. */
START_TEST(tiny_gpt2_tracks_fp32) {
    sn_precision p = _i ? SN_PRECISION_FP16 : SN_PRECISION_BF16;
    double u = _i ? 0x1p-12 : 0x1p-9;
    sn_graph *g0 = tiny(SN_PRECISION_FP32, true), *g1 = tiny(p, true);
    for (int exact = 0; exact <= 1; exact++) {
        sn_interp *i0 = start(g0, exact), *i1 = start(g1, exact);
        sn_err e;
        ck_assert_msg(sn_interp_run(i0, &e) == SN_OK, "%s", e.msg);
        ck_assert_msg(sn_interp_run(i1, &e) == SN_OK, "%s", e.msg);
        double l0 = *sn_interp_value(i0, g0->loss), l1 = *sn_interp_value(i1, g1->loss);
        double tol_loss = exact ? 1e-9 : 4 * u, tol_grad = exact ? 1e-9 : 10 * u;
        ck_assert_msg(exact || l1 != l0, "%s: no rounding happened", sn_precision_name(p));
        ck_assert_msg(fabs(l1 - l0) <= tol_loss * fabs(l0), "%s%s loss %.8f vs fp32 %.8f",
                      sn_precision_name(p), exact ? " (exact)" : "", l1, l0);
        sn_node *p0[64], *p1[64];
        int np = sn_graph_params(g0, p0, 64);
        ck_assert_int_eq(sn_graph_params(g1, p1, 64), np);
        for (int k = 0; k < np; k++) {
            ck_assert_int_eq(p1[k]->grad->dtype, SN_F32); /* parameter gradients are f32 */
            char what[96];
            snprintf(what, sizeof what, "%s%s: d loss / d %s", sn_precision_name(p),
                     exact ? " (exact)" : "", p1[k]->name);
            sn_check_close(what, sn_interp_value(i1, p1[k]->grad), sn_interp_value(i0, p0[k]->grad),
                           (size_t)sn_numel(p0[k]), tol_grad, 1e-6);
        }
        sn_interp_free(i0);
        sn_interp_free(i1);
    }
    sn_graph_free(g0);
    sn_graph_free(g1);
}
END_TEST

/* The cast graph's gradients (cast rules, products' rounded dC, bf16 adjoints) against central
 * finite differences of its own loss, in exact mode (the rounding would make the loss a step
 * function): a few elements of every parameter. */
START_TEST(gradients_of_cast_graph) {
    sn_graph *g = tiny(SN_PRECISION_BF16, true);
    sn_interp *it = start(g, true);
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    const double h = 1e-5;
    for (int k = 0; k < np; k++) {
        int64_t n = sn_numel(params[k]);
        double *w = malloc(sizeof(double) * (size_t)n), *grad = malloc(sizeof(double) * (size_t)n);
        memcpy(w, sn_interp_value(it, params[k]), sizeof(double) * (size_t)n);
        memcpy(grad, sn_interp_value(it, params[k]->grad), sizeof(double) * (size_t)n);
        for (int64_t j = 0; j < n; j += n / 3 + 1) {
            double save = w[j], l[2];
            for (int s = 0; s < 2; s++) {
                w[j] = save + (s ? -h : h);
                ck_assert(sn_interp_set_f64(it, params[k], w, &e) == SN_OK);
                ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
                l[s] = *sn_interp_value(it, g->loss);
            }
            w[j] = save;
            ck_assert(sn_interp_set_f64(it, params[k], w, &e) == SN_OK);
            double fd = (l[0] - l[1]) / (2 * h);
            ck_assert_msg(fabs(fd - grad[j]) <= 1e-5 + 1e-4 * fabs(fd), "d loss / d %s[%lld]: "
                          "autodiff %.9g, finite differences %.9g", params[k]->name, (long long)j,
                          grad[j], fd);
        }
        free(w);
        free(grad);
    }
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* The bf16 tiny GPT-2 memorises one batch on the interpreter: the loss falls from log V. */
START_TEST(tiny_gpt2_trains_in_bf16) {
    sn_graph *g = tiny(SN_PRECISION_BF16, true);
    sn_train_opts o;
    sn_train_opts_default(&o, 60);
    o.lr = 1e-2f;
    o.weight_decay = 0;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(42);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, V), y[i] = (int32_t)sn_rng_below(&r, V);
    sn_step_stats st = {0};
    double first = 0;
    for (int step = 0; step < 60; step++) {
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        if (step == 0) first = st.loss;
    }
    ck_assert_msg(fabs(first - log((double)V)) < 0.1, "first loss %.4f", first);
    ck_assert_msg(st.loss < 0.5 * first, "loss %.4f after 60 steps (first %.4f)", st.loss, first);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

/* ---- fp16 with dynamic loss scaling ---- */

/* A scale of 2^40 overflows fp16 gradients: the step is skipped (weights untouched, the scale
 * halved, the skip counted) until the scale fits; then steps update, the scale doubles after
 * scale_interval clean steps, and the (unscaled) loss falls. */
START_TEST(fp16_scaler_skips_and_recovers) {
    sn_graph *g = tiny(SN_PRECISION_FP16, true);
    sn_train_opts o;
    sn_train_opts_default(&o, 40);
    o.lr = 1e-2f;
    o.weight_decay = 0;
    o.init_scale = 0x1p40f;
    o.scale_interval = 3;
    sn_err e;
    sn_trainer *t = sn_trainer_new(g, &o, &e);
    ck_assert_msg(t, "%s", e.msg);
    ck_assert(sn_trainer_loss_scaling(t));
    int wi = sn_trainer_find_param(t, "h.0.mlp.c_fc.w");
    int64_t n = sn_numel(sn_trainer_param_node(t, wi));
    float *w0 = malloc(sizeof(float) * (size_t)n), *w1 = malloc(sizeof(float) * (size_t)n);
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(42);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, V), y[i] = (int32_t)sn_rng_below(&r, V);
    sn_step_stats st;
    double first = 0;
    int skipped = 0, doubled = 0;
    float prev = o.init_scale;
    for (int step = 0; step < 40; step++) {
        ck_assert(sn_trainer_get_param(t, wi, SN_PARAM_WEIGHTS, w0, &e) == SN_OK);
        ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
        ck_assert(sn_trainer_get_param(t, wi, SN_PARAM_WEIGHTS, w1, &e) == SN_OK);
        sn_loss_scaler sc = sn_trainer_scaler(t);
        ck_assert(st.loss_scale == prev);
        if (step == 0) {
            first = st.loss; /* unscaled */
            ck_assert_msg(st.skipped, "2^40 should overflow fp16 gradients");
        }
        if (st.skipped) {
            skipped++;
            ck_assert(!memcmp(w0, w1, sizeof(float) * (size_t)n)); /* no update */
            ck_assert(sc.scale == prev / 2);
        } else {
            ck_assert(memcmp(w0, w1, sizeof(float) * (size_t)n)); /* an update */
            ck_assert(isfinite(st.grad_norm));
            if (sc.scale == prev * 2) doubled++;
            else ck_assert(sc.scale == prev);
        }
        ck_assert_int_eq(sc.skipped, skipped);
        prev = sc.scale;
    }
    ck_assert_msg(skipped >= 10 && skipped < 30, "skipped %d steps", skipped); /* 2^40 -> below 2^30 */
    ck_assert_msg(doubled >= 1, "the scale never grew back");
    ck_assert_msg(fabs(first - log((double)V)) < 0.1, "first loss %.4f (unscaled?)", first);
    ck_assert_msg(st.loss < 0.8 * first, "loss %.4f after 40 steps (first %.4f)", st.loss, first);
    free(w0);
    free(w1);
    sn_trainer_free(t);
    sn_graph_free(g);
}
END_TEST

/* ---- the compiled CPU program against the interpreter on the same cast graph ---- */

/* The interpreter rounds exactly what the program stores in bf16 / f16; the products differ in
 * their f32 (program) vs f64 (interpreter) accumulation, which flips an occasional cast result
 * by one unit: the loss and gradients agree within 4 units of bf16 roundoff (2^-9; the first
 * tensor checked, wte, at 0.2 units), and 16 of f16's (2^-12; measured 4.2 units on a
 * layernorm weight's gradient, a sum with cancellation). Stores that truncate instead of rounding (a planted bug) miss by 8
 * bf16 units. Attention fused and written out. */
START_TEST(compiled_matches_interpreter) {
    sn_precision p = _i / 2 ? SN_PRECISION_FP16 : SN_PRECISION_BF16;
    bool fuse = _i % 2;
    double u = p == SN_PRECISION_FP16 ? 0x1p-12 : 0x1p-9;
    sn_graph *g = tiny_training_graph_at(fuse, p);
    char label[64];
    snprintf(label, sizeof label, "%s, attention %s", sn_precision_name(p), fuse ? "fused" : "written out");
    tiny_check_compiled_tol(g, 3, label, (p == SN_PRECISION_FP16 ? 16 : 4) * u);
    sn_graph_free(g);
}
END_TEST

/* A bf16 and fp16 LoRA training program (adapters on every linear layer, the base in f32): each
 * adapter's product read through its 16-bit copy, which the base's GEMM adds as cuBLASLt's C
 * (program/kernel.h accum) keeping its epilogues: c_attn's BIAS, c_fc's GELU_AUX_BIAS, and in
 * the backward mlp.c_proj's DGELU, whose gradient sum lowrank_sum rounded (dh' A^T's copy as
 * C), as are the other adapted layers' dx (accum alone); the forward's attn.c_proj and
 * mlp.c_proj sums are read in f32 by the residual adds, which add the copy themselves. No
 * pointwise kernel adds two products. Compiled on the CPU device against the interpreter, the
 * adapters' B not zero: with the GELU kept in pointwise kernels (target gelu_unfused) bf16 is
 * the interpreter's to 1e-5 (measured 1e-7: accum adds in the graph's order and rounds once);
 * with the GELU epilogues, which skip a rounding (kernel.h), within 16 units of roundoff (bf16
 * measured 9.8 units of 2^-9, on layer 1's d c_fc.lora_a, a sum with cancellation; fp16 7 of
 * 2^-12, and 4.6 with the GELU unfused). Target accum_plain (SN_GEMM_ACCUM=plain) keeps C
 * beside no epilogue: the adapters' sums with a bias or GELU are kernels of their own. Target
 * dgelu_accum_unfused (CUDA's) keeps the DGELU away from C alone: mlp.c_proj's dx GEMM stores
 * its sum and a pointwise kernel takes the GELU's gradient of it. */
START_TEST(lora_accum_matches_interpreter) {
    sn_precision p = _i == 2 ? SN_PRECISION_FP16 : SN_PRECISION_BF16;
    bool unfused = _i == 0, plain = _i == 3, dgelu_apart = _i == 4;
    double u = p == SN_PRECISION_FP16 ? 0x1p-12 : 0x1p-9;
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    sn_pipeline_stats st;
    sn_graph *g = tiny_lora_graph(p, &st);
    sn_err e;
    /* each adapted layer's dx but layer 0's c_attn's (the frozen embeddings want none) */
    ck_assert_int_eq(st.lowrank_rounded, 4 * c.n_layer - 1);
    sn_target t = sn_target_cpu();
    t.gelu_unfused = unfused;
    t.accum_plain = plain;
    t.dgelu_accum_unfused = dgelu_apart;
    sn_program *prog;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &t}, &prog, NULL, &e) == SN_OK,
                  "%s", e.msg);
    int accum[SN_EPI_COUNT] = {0}, adds = 0, dgelu = 0, gelu_bwd = 0;
    for (int k = 0; k < prog->n_kernels; k++) {
        const sn_kernel *ker = prog->kernels[k];
        if (ker->kind == SN_KER_GEMM) accum[ker->gemm.epilogue] += ker->gemm.accum;
        if (ker->kind == SN_KER_GEMM) dgelu += ker->gemm.epilogue == SN_EPI_DGELU;
        adds += ker->kind == SN_KER_POINTWISE && ker->n_instr == 1 && ker->instr[0].node->op == SN_OP_ADD;
        for (int i = 0; ker->kind == SN_KER_POINTWISE && i < ker->n_instr; i++)
            gelu_bwd += ker->instr[i].node->op == SN_OP_GELU_BWD;
    }
    ck_assert_int_eq(dgelu, unfused || plain || dgelu_apart ? 0 : c.n_layer);
    ck_assert_int_eq(gelu_bwd, unfused || plain || dgelu_apart ? c.n_layer : 0);
    ck_assert_int_eq(accum[SN_EPI_BIAS], plain ? 0 : c.n_layer * (1 + unfused)); /* c_attn (c_fc) */
    ck_assert_int_eq(accum[SN_EPI_GELU_AUX_BIAS], unfused || plain ? 0 : c.n_layer); /* c_fc */
    ck_assert_int_eq(accum[SN_EPI_DGELU], unfused || plain || dgelu_apart ? 0 : c.n_layer); /* mlp.c_proj's dx */
    /* c_attn's, c_fc's, attn.c_proj's dx (and mlp.c_proj's) */
    ck_assert_int_eq(accum[SN_EPI_NONE], 3 * c.n_layer - 1 + (unfused || plain || dgelu_apart) * c.n_layer);
    ck_assert_int_eq(adds, 0);
    sn_program_free(prog);
    char label[64];
    snprintf(label, sizeof label, "%s LoRA%s", sn_precision_name(p),
             unfused ? ", GELU unfused" : plain ? ", accum plain" : dgelu_apart ? ", DGELU apart" : "");
    tiny_check_compiled_for(g, 3, label, unfused ? 1e-5 : 16 * u, &t);
    sn_graph_free(g);
}
END_TEST

/* ---- weight shadows: the 16-bit copies AdamW writes ---- */

/* On the CPU device (through the checked device, whose pointers fault on the host), the
 * parameters' 16-bit copies written by AdamW in its pass, and made again after the weights are
 * set from the host, give the losses and weights of casts run every step to the bit: bf16 and
 * fp16 (loss scaling from 2^22: the first steps are skipped), AdamW on the device and offloaded
 * to the host. The program has one kernel fewer per weight product operand; the copies' cast
 * kernels run at the first step, for the one parameter the host wrote, and (offload: the
 * weights come up from the host) after every update for the parameters that go up in f32 (the
 * others go up as their copies' bits: train/offload.h sn_offload_segments), never after a step
 * on the device. */
START_TEST(weight_copies_keep_losses) {
    enum { STEPS = 8, SET_AT = 4 };
    sn_precision p = _i % 2 ? SN_PRECISION_FP16 : SN_PRECISION_BF16;
    bool offload = _i / 2;
    sn_err e;
    sn_device *cpu, *dev;
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    ck_assert(sn_checked_device_new(cpu, &dev, &e) == SN_OK);
    double loss[2][STEPS];
    int n_kernels[2], n_shadows[2], skipped = 0;
    float *final[2];
    int32_t x[B * T], y[B * T];
    sn_rng r = sn_rng_seed(42);
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)sn_rng_below(&r, V), y[i] = (int32_t)sn_rng_below(&r, V);
    for (int run = 0; run < 2; run++) {
        sn_graph *g = tiny(p, true);
        sn_pipeline_opts co = {.weight_casts_per_step = run == 1};
        sn_train_opts o;
        sn_train_opts_default(&o, STEPS);
        o.lr = 1e-2f;
        o.device = dev;
        o.compile = &co;
        o.offload = offload;
        o.init_scale = 0x1p22f;
        sn_trainer *t = sn_trainer_new(g, &o, &e);
        ck_assert_msg(t, "%s", e.msg);
        const sn_program *prog = sn_trainer_program(t);
        n_kernels[run] = prog->n_kernels;
        n_shadows[run] = prog->n_shadows;
        int wi = sn_trainer_find_param(t, "h.0.mlp.c_fc.w"), np = sn_trainer_param_count(t);
        int f32_up = prog->n_shadows; /* offload: the copies of what goes up in f32 */
        bool wi_low = false;          /* the host-written one goes up as its copy */
        sn_offload_seg *seg;
        int n_seg;
        ck_assert(sn_offload_segments(prog, NULL, &seg, &n_seg, &e) == SN_OK);
        for (int k = 0; seg && k < prog->n_shadows; k++) {
            const sn_param_slot *s = sn_param_layout_find(&prog->layout, prog->shadows[k]->args[1]);
            for (int j = 0; s && !s->frozen && j < n_seg; j++) {
                if (!seg[j].low || s->flat < seg[j].lo || s->flat >= seg[j].lo + seg[j].n) continue;
                f32_up--;
                wi_low |= s == &prog->layout.slots[wi];
            }
        }
        free(seg);
        ck_assert_msg(!offload || !prog->n_shadows || f32_up < prog->n_shadows,
                      "no weight goes up as its copy");
        int64_t n = sn_numel(sn_trainer_param_node(t, wi)), total = 0;
        float *w = malloc(sizeof(float) * (size_t)n);
        bool updated = false;
        for (int step = 0; step < STEPS; step++) {
            if (step == SET_AT) { /* a host write: the copy is made again before the step */
                ck_assert(sn_trainer_get_param(t, wi, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
                for (int64_t k = 0; k < n; k++) w[k] = -1.5f * w[k];
                ck_assert(sn_trainer_set_param(t, wi, SN_PARAM_WEIGHTS, w, &e) == SN_OK);
            }
            sn_step_stats st;
            sn_exec_stats xs0, xs1;
            sn_exec_stats_get(sn_trainer_exec(t), &xs0);
            ck_assert_msg(sn_trainer_step(t, x, y, &st, &e) == SN_OK, "%s", e.msg);
            sn_exec_stats_get(sn_trainer_exec(t), &xs1);
            loss[run][step] = st.loss;
            skipped += st.skipped;
            /* copies made by their casts: all at first, and after each offloaded update; the
               host write's one; none after a step on the device */
            int64_t want = step == 0                 ? prog->n_shadows
                         : offload && updated       ? f32_up + (step == SET_AT && wi_low)
                         : step == SET_AT && prog->n_shadows ? 1 : 0;
            ck_assert_msg(xs1.shadow_casts - xs0.shadow_casts == want, "step %d: %lld copies made "
                          "by their casts, want %lld", step, (long long)(xs1.shadow_casts -
                          xs0.shadow_casts), (long long)want);
            updated = !st.skipped;
        }
        for (int i = 0; i < np; i++) total += sn_numel(sn_trainer_param_node(t, i));
        float *all = final[run] = malloc(sizeof(float) * (size_t)total);
        for (int i = 0; i < np; i++) {
            ck_assert(sn_trainer_get_param(t, i, SN_PARAM_WEIGHTS, all, &e) == SN_OK);
            all += sn_numel(sn_trainer_param_node(t, i));
        }
        if (run == 1) ck_assert(!memcmp(final[0], final[1], sizeof(float) * (size_t)total));
        free(w);
        sn_trainer_free(t);
        sn_graph_free(g);
    }
    for (int step = 0; step < STEPS; step++)
        ck_assert_msg(loss[0][step] == loss[1][step], "%s%s step %d: loss %.9g with the copies, "
                      "%.9g with casts every step", sn_precision_name(p), offload ? " offload" : "",
                      step, loss[0][step], loss[1][step]);
    ck_assert_msg(loss[0][SET_AT] != loss[0][SET_AT - 1], "the host write changed nothing");
    if (p == SN_PRECISION_FP16) /* steps skipped, and then AdamW's copies read */
        ck_assert_msg(skipped > 0 && skipped <= 2 * (STEPS - 3), "%d of %d steps skipped", skipped, 2 * STEPS);
    ck_assert_int_eq(n_shadows[1], 0);
    /* 6 a layer (4 weights, the qkv and fc biases the BIAS epilogue reads in 16 bits) and the
     * tied LM head */
    ck_assert_int_eq(n_shadows[0], 13);
    /* the 13 copies' casts are kernels of every step, or none (the BIAS epilogue reads the
     * biases' copies: no f32 reading of them stays; see test_fuse); those of a step read the
     * parameters alone, so join_siblings hoists them to its start and joins those of one shape:
     * 7 kernels for the 13 (a layer's four weights and two biases, one shape each across the
     * layers, and the tied table) */
    ck_assert_int_eq(n_kernels[1], n_kernels[0] + 7);
    free(final[0]);
    free(final[1]);
    sn_device_free(dev);
}
END_TEST

int main(void) {
    Suite *s = suite_create("autocast");
    TCase *tc = tcase_create("autocast");
    tcase_add_test(tc, text_mlp);
    tcase_add_test(tc, text_attention);
    tcase_add_test(tc, text_lora);
    tcase_add_test(tc, text_swiglu);
    tcase_add_test(tc, text_rotary);
    tcase_add_test(tc, errors_say_what_to_do);
    tcase_add_loop_test(tc, tiny_gpt2_tracks_fp32, 0, 2);
    tcase_add_test(tc, gradients_of_cast_graph);
    tcase_add_test(tc, tiny_gpt2_trains_in_bf16);
    tcase_add_loop_test(tc, compiled_matches_interpreter, 0, 4);
    tcase_add_loop_test(tc, lora_accum_matches_interpreter, 0, 5);
    tcase_add_test(tc, fp16_scaler_skips_and_recovers);
    TCase *copies = tcase_create("weight copies"); /* trainers on the CPU device */
    tcase_set_timeout(copies, 120);
    suite_add_tcase(s, copies);
    tcase_add_loop_test(copies, weight_copies_keep_losses, 0, 4);
    suite_add_tcase(s, tc);
    return sn_test_main(s);
}
