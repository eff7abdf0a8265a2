/* test_cuda.c: the CUDA backend on a machine without a GPU: every pointwise kernel of GPT-2
 * training compiled by NVRTC for sm_80 and sm_90 (no spills), and the very text NVRTC gets run on
 * the CPU by the SIMT simulator (sim/sim.h), against the reference interpreter. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/cuda/cuda.h"
#include "sim/sim.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "interp/interp.h"
#include "support/rng.h"
#include "train/train.h"
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
    ck_assert_msg(sn_compile(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    return p;
}

/* The program's pointwise kernels into ks (p->n_kernels entries); returns how many. */
static int pointwise(const sn_program *p, const sn_kernel **ks) {
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_POINTWISE) ks[n++] = p->kernels[i];
    return n;
}

static char *render(const sn_kernel *const *ks, int n) {
    char *src;
    sn_err e;
    ck_assert_msg(sn_cuda_render(ks, n, &src, &e) == SN_OK, "%s", e.msg);
    return src;
}

static sn_graph *gpt2_training(const char *name, int B, int T) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find(name, &c));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
    return g;
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
    char *src = render(ks, 1);
    printf("test_cuda: the bias + gelu kernel:\n%s", src);
    const char *want[] = {"#include \"" SN_CUDA_PRELUDE_NAME "\"", "extern \"C\" __global__",
                          "const int n = 1536;", "const int i1 = i % 48;",
                          "sn_load(in1[i1])", "sn_gelu(", "0.5f * gelu_", "sn_store(&out0[i], ",
                          "SN_HOST_STUB("};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(src, want[i]), "missing \"%s\" in\n%s", want[i], src);
    free(src);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

START_TEST(render_rejects_what_it_cannot) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(4, 8));
    sn_graph_add_output(g, sn_softmax(g, x));
    sn_node *h = sn_input(g, "h", SN_F16, SN_SHAPE(4, 8));
    sn_graph_add_output(g, sn_exp(g, h));
    sn_program *p = fuse(g);
    ck_assert_int_eq(p->n_kernels, 2);
    char *src;
    sn_err e;
    for (int i = 0; i < 2; i++) {
        const sn_kernel *k = p->kernels[i];
        ck_assert_int_eq(sn_cuda_render(&k, 1, &src, &e), SN_ERR_UNSUPPORTED);
        ck_assert_ptr_null(src);
        ck_assert_msg(strstr(e.msg, k->name), "%s", e.msg);
        ck_assert_msg(strstr(e.msg, k->kind == SN_KER_ROW ? "pointwise kernels only" : "f16"),
                      "%s", e.msg);
    }
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- NVRTC ---- */

/* Every pointwise kernel of the GPT-2 training program, in one source per arch. */
static void nvrtc_gpt2(const char *model, int B, int T) {
    if (!have_nvrtc()) return;
    sn_graph *g = gpt2_training(model, B, T);
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
    int n = pointwise(p, ks);
    ck_assert_int_gt(n, 10);
    char *src = render(ks, n);
    const int arch[] = {80, 90};
    for (int a = 0; a < 2; a++) {
        double t0 = now();
        sn_cuda_module m;
        sn_err e;
        ck_assert_msg(sn_nvrtc_compile(src, model, arch[a], &m, &e) == SN_OK, "%s", e.msg);
        ck_assert_int_gt((long)m.cubin_size, 0);
        ck_assert_int_eq(m.n_info, n);
        int max_regs = 0;
        const char *widest = "";
        for (int i = 0; i < n; i++) {
            const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, ks[i]->name);
            ck_assert_msg(in, "no ptxas report for %s:\n%s", ks[i]->name, m.log);
            ck_assert_msg(in->registers > 0 && in->registers <= 255, "%s: %d registers",
                          in->name, in->registers);
            ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 &&
                          in->stack_bytes == 0, "%s spills on sm_%d: %d bytes stored, %d "
                          "loaded, %d bytes of stack", in->name, arch[a], in->spill_store_bytes,
                          in->spill_load_bytes, in->stack_bytes);
            if (in->registers > max_regs) max_regs = in->registers, widest = in->name;
        }
        printf("test_cuda: %s training (B=%d, T=%d): %d pointwise kernels for sm_%d in %.2f s: "
               "no spills, at most %d registers (%s)\n", model, B, T, n, arch[a], now() - t0,
               max_regs, widest);
        sn_cuda_module_free(&m);
    }
    free(src);
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}

START_TEST(nvrtc_gpt2_tiny) { nvrtc_gpt2("tiny", 4, 32); }
END_TEST

START_TEST(nvrtc_gpt2_124m) { nvrtc_gpt2("gpt2", 4, 64); }
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
        else ((uint16_t *)buf)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* bf16 */
    }
}

static void from_buffer(sn_dtype t, const void *buf, int64_t n, double *v) {
    for (int64_t i = 0; i < n; i++) {
        if (t == SN_F32) {
            v[i] = ((const float *)buf)[i];
        } else if (t == SN_I32) {
            v[i] = ((const int32_t *)buf)[i];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            v[i] = f;
        }
    }
}

/* Runs pointwise kernel k (compiled into h) on the CPU with the interpreter's values of its
 * inputs, and compares its outputs with the interpreter's: with the launch the CUDA driver would
 * get and with a small grid that makes the grid-stride loop go round, each in both thread
 * orders, outputs poisoned (NaN, or a large integer) before every launch. */
static void host_check(sn_sim_module *h, const sn_kernel *k, const sn_interp *it, double tol) {
    void *buf[SN_KER_MAX_ARGS], *params[SN_KER_MAX_ARGS];
    int nargs = k->n_out + k->n_in;
    for (int i = 0; i < nargs; i++) {
        const sn_node *n = k->args[i];
        buf[i] = malloc(dtype_bytes(n->dtype) * (size_t)sn_numel(n) + 1);
        ck_assert(buf[i]);
        params[i] = &buf[i];
        if (i >= k->n_out) {
            const double *v = sn_interp_value(it, n);
            ck_assert_msg(v, "%s: the interpreter kept no value of %%%d", k->name, n->id);
            to_buffer(n->dtype, v, sn_numel(n), buf[i]);
        }
    }
    sn_cuda_dims dims[2] = {sn_cuda_pointwise_dims(k), {.grid = {3, 1, 1}, .block = {32, 1, 1}}};
    double *got = NULL;
    for (int d = 0; d < 2; d++)
        for (int reversed = 0; reversed < 2; reversed++) {
            for (int o = 0; o < k->n_out; o++)
                memset(buf[o], k->args[o]->dtype == SN_I32 ? 0x7f : 0xff,
                       dtype_bytes(k->args[o]->dtype) * (size_t)sn_numel(k->args[o]));
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_err e;
            ck_assert_msg(sn_sim_launch(h, k->name, dims[d].grid, dims[d].block, 0, params, &so,
                                        &e) == SN_OK, "%s", e.msg);
            for (int o = 0; o < k->n_out; o++) {
                const sn_node *n = k->args[o];
                int64_t numel = sn_numel(n);
                got = realloc(got, sizeof(double) * (size_t)numel);
                from_buffer(n->dtype, buf[o], numel, got);
                char what[160];
                snprintf(what, sizeof what, "%s (grid %u x block %u, %s order) %%%d", k->name,
                         dims[d].grid[0], dims[d].block[0], reversed ? "reversed" : "forward",
                         n->id);
                sn_check_close(what, got, sn_interp_value(it, n), (size_t)numel,
                               n->dtype == SN_BF16 ? 8e-3 : tol, 1e-6);
            }
        }
    free(got);
    for (int i = 0; i < nargs; i++) free(buf[i]);
}

/* Gives every INPUT and PARAM of g a value: ids below `vocab`, parameters from their init rule
 * (or normal draws), other floats normal. */
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
            for (int64_t j = 0; j < numel; j++) v[j] = (int32_t)sn_rng_below(&r, (uint64_t)vocab);
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

/* Fuses g, renders its pointwise kernels into one source, runs each on the CPU against the
 * interpreter; returns the number of kernels run (0: no g++). */
static int run_on_host(sn_graph *g, int vocab, bool init_rule, double tol) {
    sn_program *p = fuse(g);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)(p->n_kernels + 1));
    int n = pointwise(p, ks);
    ck_assert_int_gt(n, 0);
    char *src = render(ks, n);
    sn_sim_module *h = host_compile(src);
    int ran = 0;
    if (h) {
        sn_interp *it = interp_run(g, vocab, init_rule);
        for (int i = 0; i < n; i++) host_check(h, ks[i], it, tol);
        ran = n;
        sn_interp_free(it);
        sn_sim_module_free(h);
    }
    free(src);
    free(ks);
    sn_program_free(p);
    return ran;
}

START_TEST(cpu_bias_gelu) {
    sn_graph *g = bias_gelu_graph();
    run_on_host(g, 1, false, 1e-5);
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
    run_on_host(g, 1, false, 0);
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
    run_on_host(g, 1, false, 1e-6);
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
    char *src = render(&k, 1);
    ck_assert_msg(strstr(src, "1.5f") && strstr(src, "0.25f"), "%s", src);
    free(src);
    sn_program_free(p);
    run_on_host(g, 1, false, 1e-6);
    sn_graph_free(g);
}
END_TEST

/* Every pointwise op of the IR, f32, with bf16 and i32 values on the way. */
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
    sn_graph_add_output(g, sn_cast(g, sn_scale(g, x, 10.0f), SN_I32));   /* i32 out */
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    ck_assert_int_ge(run_on_host(g, 5, false, 1e-5), 5);
    sn_graph_free(g);
}
END_TEST

/* Every pointwise kernel of a tiny GPT-2's training step, each from the interpreter's inputs. */
START_TEST(cpu_gpt2_tiny_kernels) {
    sn_graph *g = gpt2_training("tiny", 2, 16);
    double t0 = now();
    int n = run_on_host(g, 256, true, 1e-5);
    if (n) printf("test_cuda: tiny GPT-2 training: %d pointwise kernels ran on the CPU and match "
                  "the interpreter (%.2f s)\n", n, now() - t0);
    sn_graph_free(g);
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
    suite_add_tcase(s, tc);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 120);
    tcase_add_test(nv, nvrtc_gpt2_tiny);
    tcase_add_test(nv, nvrtc_gpt2_124m);
    tcase_add_test(nv, nvrtc_error_carries_log);
    suite_add_tcase(s, nv);
    TCase *cpu = tcase_create("cpu");
    tcase_set_timeout(cpu, 120);
    tcase_add_test(cpu, cpu_bias_gelu);
    tcase_add_test(cpu, cpu_view_copies);
    tcase_add_test(cpu, cpu_padded_sum);
    tcase_add_test(cpu, cpu_chain_with_constants);
    tcase_add_test(cpu, cpu_every_op);
    tcase_add_test(cpu, cpu_gpt2_tiny_kernels);
    suite_add_tcase(s, cpu);
    return sn_test_main(s);
}
