/* test_kernel_cost.c: the static cost report (codegen/cuda/cuda_occupancy.c) on a machine without a
 * GPU: the occupancy formulas against hand-worked cases (two of them ncu's numbers for the H200's
 * attention kernels), then every generated kernel kind of a tiny GPT-2 training program (f32 and
 * bf16) and the attention kernels at D = 64 and 128 compiled by NVRTC for sm_75, sm_80 and sm_90:
 * no spills, no stack frame, and on sm_90 every attention kernel at least 2 blocks and 8 warps
 * resident per SM (issue 22's register budget). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "frontend/frontend.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "tiny_gpt2.h"
#include "bench/roofline.h"
#include "harness.h"

static const int archs[] = {75, 80, 89, 90, 120}; /* 89, 120: an RTX 4090, 5090 */

/* ---- the formulas ---- */

START_TEST(occupancy_formulas) {
    /* the shared memory a block may opt into, by architecture (program/target.c; the CUDA C
       Programming Guide's table): the consumer parts (RTX 30, 40, 50) have 99 KiB */
    static const int arch_kib[][2] = {{75, 64}, {80, 163}, {86, 99}, {87, 163}, {89, 99},
                                      {90, 227}, {100, 227}, {120, 99}, {121, 99}};
    for (size_t i = 0; i < sizeof arch_kib / sizeof arch_kib[0]; i++)
        ck_assert_msg(sn_target_cuda(arch_kib[i][0]).shared_max == arch_kib[i][1] << 10, "sm_%d: %lld",
                      arch_kib[i][0], (long long)sn_target_cuda(arch_kib[i][0]).shared_max);
    const sn_cuda_sm_limits *h = sn_cuda_sm_limits_of(90), *a = sn_cuda_sm_limits_of(80);
    ck_assert(h && a && sn_cuda_sm_limits_of(75) && !sn_cuda_sm_limits_of(70));
    /* ncu on the H200 (2026-11-27): attention_bwd_kv, 168 registers, 128 threads: 18.75% */
    sn_cuda_occupancy o = sn_cuda_occupancy_of(h, 168, 37376, 0, 128);
    ck_assert_int_eq(o.regs_per_warp, 5376); /* 168 x 32 = 5376, a multiple of 256 */
    ck_assert_int_eq(o.by_regs, 3);          /* 16384 / 5376 = 3 warps a quarter: 12 warps */
    ck_assert_int_eq(o.blocks, 3);
    ck_assert_int_eq(o.warps, 12);
    ck_assert_double_eq_tol(o.occupancy, 0.1875, 1e-9);
    ck_assert_str_eq(o.limiter, "registers");
    /* the grid: cross_entropy on the H200 (ncu: 256 blocks of 256 threads, 28 registers,
       achieved occupancy 24.23%): 8 blocks an SM at 100%, 1056 slots on 132 SMs, 256 filled */
    sn_cuda_occupancy ce = sn_cuda_occupancy_of(h, 28, 384, 0, 256);
    ck_assert_int_eq(ce.blocks, 8);
    ck_assert_double_eq_tol(sn_cuda_grid_fill(&ce, 256, 132), 256.0 / 1056, 1e-12);
    ck_assert_double_eq_tol(sn_cuda_grid_fill(&ce, 16384, 132), 1.0, 1e-12); /* many waves */
    ck_assert_double_eq_tol(sn_cuda_grid_fill(&o, 1e6, 132), 0.1875, 1e-12);
    /* attention_fwd, 105 registers: 3360 -> 3584 a warp, 4 a quarter, 16 warps: 25% */
    o = sn_cuda_occupancy_of(h, 105, 27648, 0, 128);
    ck_assert_int_eq(o.regs_per_warp, 3584);
    ck_assert_int_eq(o.blocks, 4);
    ck_assert_double_eq_tol(o.occupancy, 0.25, 1e-9);
    /* shared memory: 81 KiB + 1 KiB reserved = 82 KiB, 2 in sm_80's 164 KiB; one byte more
     * rounds up to 82 KiB + 128 and leaves 1 */
    o = sn_cuda_occupancy_of(a, 32, 81 << 10, 0, 128);
    ck_assert_int_eq(o.smem_per_block, 82 << 10);
    ck_assert_int_eq(o.blocks, 2);
    ck_assert_str_eq(o.limiter, "shared memory");
    o = sn_cuda_occupancy_of(a, 32, 40 << 10, (41 << 10) + 1, 128); /* static + dynamic */
    ck_assert_int_eq(o.smem_per_block, (82 << 10) + 128);
    ck_assert_int_eq(o.blocks, 1);
    /* the same block on sm_90: 228 / 82 = 2 */
    ck_assert_int_eq(sn_cuda_occupancy_of(h, 32, 81 << 10, 0, 128).blocks, 2);
    /* threads: 1024-thread blocks, 2 of them (16 registers would allow 4); blocks: 32-thread
     * blocks, 32 of them (32 warps) */
    o = sn_cuda_occupancy_of(h, 16, 0, 0, 1024);
    ck_assert_int_eq(o.blocks, 2);
    ck_assert_str_eq(o.limiter, "threads");
    o = sn_cuda_occupancy_of(h, 16, 0, 0, 32);
    ck_assert_int_eq(o.blocks, 32);
    ck_assert_int_eq(o.warps, 32);
    ck_assert_str_eq(o.limiter, "blocks");
    /* 255 registers x 1024 threads needs 256 K registers: cannot launch; more than 227 KiB of
     * shared memory cannot either */
    ck_assert_int_eq(sn_cuda_occupancy_of(h, 255, 0, 0, 1024).blocks, 0);
    o = sn_cuda_occupancy_of(h, 32, 228 << 10, 0, 128);
    ck_assert_int_eq(o.blocks, 0);
    ck_assert_str_eq(o.limiter, "cannot launch: shared memory");
    /* sm_75: 1024 threads and 64 KiB an SM, no reserved block memory */
    o = sn_cuda_occupancy_of(sn_cuda_sm_limits_of(75), 32, 32 << 10, 0, 256);
    ck_assert_int_eq(o.blocks, 2);
    ck_assert_double_eq_tol(o.occupancy, 0.5, 1e-9);
}
END_TEST

/* ---- NVRTC: no spills anywhere; attention's occupancy ---- */

/* Compiles ks for every arch and checks the report: no spill, no stack frame; attention on sm_90
 * at least 2 blocks and 8 warps an SM. Returns how many attention kernels miss the occupancy, or
 * -1 when NVRTC is missing (skipped). */
static int check_kernels(const sn_kernel *const *ks, int n, const char *what) {
    sn_cuda_kernel_report *r = calloc((size_t)n, sizeof *r);
    ck_assert(r);
    int low = 0;
    for (size_t ai = 0; ai < sizeof archs / sizeof archs[0]; ai++) {
        sn_err e;
        sn_status st = sn_cuda_ptxas_report(ks, n, archs[ai], r, &e);
        if (st == SN_ERR_UNSUPPORTED) {
            printf("kernel_cost: %s: skipped: %s\n", what, e.msg);
            free(r);
            return -1;
        }
        ck_assert_msg(st == SN_OK, "%s, sm_%d: %s", what, archs[ai], e.msg);
        int shown = 0;
        for (int i = 0; i < n; i++) {
            const sn_cuda_kernel_report *x = &r[i];
            if (!x->has_info) continue;
            const sn_cuda_kernel_info *in = &x->info;
            ck_assert_msg(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 &&
                          in->stack_bytes == 0, "%s: %s (%s) spills on sm_%d: %d bytes stored, "
                          "%d loaded, %d bytes of stack", what, ks[i]->name, x->fn, archs[ai],
                          in->spill_store_bytes, in->spill_load_bytes, in->stack_bytes);
            ck_assert_msg(x->occ.blocks >= 1, "%s: %s cannot launch on sm_%d (%s)", what,
                          ks[i]->name, archs[ai], x->occ.limiter);
            if (ks[i]->kind != SN_KER_ATTENTION) continue;
            bool first = true; /* one line per distinct function */
            for (int j = 0; j < i && first; j++) first = strcmp(r[j].fn, x->fn) != 0;
            if (!first) continue;
            shown++;
            /* sm_90 (issue 22), and the consumer parts' 100 KiB an SM (cuda_attention.c fit) */
            bool held = archs[ai] == 90 || archs[ai] == 89 || archs[ai] == 120;
            bool ok = !held || (x->occ.blocks >= 2 && x->occ.warps >= 8);
            printf("kernel_cost: %s sm_%d %-24s %3d registers, %5d bytes shared, %d blocks "
                   "(%d warps, %.0f%%) an SM, limited by %s%s\n", what, archs[ai], x->fn,
                   in->registers, in->shared_bytes + (int)x->dims.shared_bytes, x->occ.blocks,
                   x->occ.warps, 100 * x->occ.occupancy, x->occ.limiter,
                   ok ? "" : "  <- under 2 blocks / 8 warps");
            low += !ok;
        }
        printf("kernel_cost: %s sm_%d: %d kernels, no spills, no stack\n", what, archs[ai], n);
        (void)shown;
    }
    fflush(stdout);
    free(r);
    return low;
}

static int program_kernels(const sn_program *p, const sn_kernel **ks) {
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind != SN_KER_GEMM) ks[n++] = p->kernels[i];
    return n;
}

/* Every kernel kind the CUDA renderer generates: the tiny GPT-2's training program (embedding,
 * norms, pointwise, cross-entropy, reductions, attention) plus the trainer's optimizer kernels. */
START_TEST(tiny_gpt2_every_kind) {
    static const sn_precision precs[] = {SN_PRECISION_FP32, SN_PRECISION_BF16};
    for (size_t pi = 0; pi < 2; pi++) {
        sn_graph *g = tiny_training_graph_at(true, precs[pi]);
        sn_program *p;
        sn_err e;
        ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
        const sn_kernel **ks = calloc((size_t)p->n_kernels + 4, sizeof *ks);
        ck_assert(ks);
        int n = program_kernels(p, ks);
        static const sn_kernel_kind opt_kinds[4] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP,
                                                    SN_KER_ADAMW};
        sn_kernel opt[4];
        int64_t params = sn_graph_param_count(g);
        for (int i = 0; i < 4; i++) {
            char name[16];
            snprintf(name, sizeof name, "opt_%d", i);
            opt[i] = sn_optim_kernel(opt_kinds[i], params, params / 2, SN_F32, name);
            ks[n++] = &opt[i];
        }
        bool kinds[SN_KER_KIND_COUNT] = {0};
        for (int i = 0; i < n; i++) kinds[ks[i]->kind] = true;
        for (int k = 0; k < SN_KER_KIND_COUNT; k++)
            ck_assert_msg(kinds[k] || k == SN_KER_GEMM || k == SN_KER_DEQUANT ||
                          k == SN_KER_GEMV || k == SN_KER_THIN, /* NF4: a QLoRA program's
                          (tiny trains none; test_nf4_gemv compiles the NF4 product); the thin
                          product a LoRA program's of 256 rows and more (test_thin compiles it) */
                          "no %s kernel in the tiny program",
                          sn_kernel_kind_name((sn_kernel_kind)k));
        char what[32];
        snprintf(what, sizeof what, "tiny gpt2 %s", sn_precision_name(precs[pi]));
        int low = check_kernels(ks, n, what);
        free(ks);
        sn_program_free(p);
        sn_graph_free(g);
        if (low < 0) return;
    }
}
END_TEST

/* The attention kernels (forward, dq, dk with dv) of B=4, H=12, T=1024 at head size D. */
static sn_program *attention_program(sn_dtype dt, int64_t D, sn_graph **gp) {
    sn_graph *g = sn_graph_new();
    float scale = 1.0f / sqrtf((float)D);
    sn_node *q = sn_input(g, "q", dt, SN_SHAPE(4, 12, 1024, D));
    sn_node *k = sn_input(g, "k", dt, SN_SHAPE(4, 12, 1024, D));
    sn_node *v = sn_input(g, "v", dt, SN_SHAPE(4, 12, 1024, D));
    sn_node *dout = sn_input(g, "dout", dt, SN_SHAPE(4, 12, 1024, D));
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_node *o = sn_attention(g, q, k, v, lse, scale);
    sn_node *outs[] = {o, lse, sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale),
                       sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale),
                       sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale)};
    for (int i = 0; i < 5; i++) sn_graph_add_output(g, outs[i]);
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    *gp = g;
    return p;
}

/* Issue 22: the register budget leaves at least 2 blocks (8+ warps) resident per SM on sm_90.
 * The kernels of 2026-11-27 meet it, bf16 D = 64's dk/dv kernel only just (187 registers here, 2
 * blocks of 4 warps; 168 and 3 blocks in gpt2's program, where q, k and v are views of qkv). A
 * form that misses it is printed and fails the test; while the rework is under way
 * SN_KERNEL_COST_OCCUPANCY_WARN=1 turns the failure into a printed warning (TODO(issue 22):
 * remove it once the new kernels land). */
START_TEST(attention_no_spills_and_occupancy) {
    static const struct {
        sn_dtype dt;
        int64_t D;
    } forms[] = {{SN_BF16, 64}, {SN_BF16, 128}, {SN_F32, 64}, {SN_F32, 128}};
    int low = 0;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        sn_graph *g;
        sn_program *p = attention_program(forms[f].dt, forms[f].D, &g);
        const sn_kernel *ks[8];
        int n = 0;
        for (int i = 0; i < p->n_kernels; i++)
            if (p->kernels[i]->kind == SN_KER_ATTENTION) ks[n++] = p->kernels[i];
        ck_assert_int_ge(n, 3);
        char what[32];
        snprintf(what, sizeof what, "attention %s D=%lld", sn_dtype_name(forms[f].dt),
                 (long long)forms[f].D);
        int b = check_kernels(ks, n, what);
        sn_program_free(p);
        sn_graph_free(g);
        if (b < 0) return;
        low += b;
    }
    const char *warn = getenv("SN_KERNEL_COST_OCCUPANCY_WARN");
    if (low && warn && *warn == '1')
        printf("kernel_cost: WARNING: %d attention kernels under 2 blocks / 8 warps an SM on "
               "sm_90 (issue 22; the lines above)\n", low);
    else
        ck_assert_msg(low == 0, "%d attention kernels leave under 2 blocks / 8 warps an SM on "
                      "sm_90 (issue 22; the lines above)", low);
}
END_TEST

/* bench/roofline_gap.c: GEMM shapes as the library runs them, the skinny class (LoRA's rank-r
 * products), and the kernels furthest above the model, from a measured time per kernel. */
START_TEST(roofline_gaps) {
    sn_graph *g = sn_graph_new();
    sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(2, 64, 128));
    sn_node *w = sn_input(g, "w", SN_F32, SN_SHAPE(128, 96));
    sn_node *a = sn_input(g, "a", SN_F32, SN_SHAPE(128, 8));
    sn_node *q = sn_input(g, "q", SN_F32, SN_SHAPE(6, 80, 72));
    sn_node *k = sn_input(g, "k", SN_F32, SN_SHAPE(6, 72, 80));
    sn_node *outs[] = {sn_matmul(g, x, w), sn_matmul(g, x, a), sn_matmul(g, q, k)};
    for (int i = 0; i < 3; i++) sn_graph_add_output(g, outs[i]);
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    ck_assert_int_eq(p->n_kernels, 3);
    static const int64_t want[3][4] = {{1, 128, 96, 128}, {1, 128, 8, 128}, {6, 80, 80, 72}};
    for (int i = 0; i < 3; i++) {
        const sn_kernel *kk = p->kernels[i];
        int at = kk->anchor == outs[0] ? 0 : kk->anchor == outs[1] ? 1 : 2;
        sn_roofline_gemm_shape sh = sn_roofline_gemm_shape_of(kk);
        ck_assert_msg(sh.batch == want[at][0] && sh.m == want[at][1] && sh.n == want[at][2] &&
                      sh.k == want[at][3], "%s: %lld x %lldx%lldx%lld", kk->name,
                      (long long)sh.batch, (long long)sh.m, (long long)sh.n, (long long)sh.k);
        ck_assert(sn_roofline_gemm_skinny(kk) == (at == 1));
    }
    /* measured: each kernel at its model, the skinny one 10x it, the batched one at half */
    const sn_roofline_machine *m = sn_roofline_machine_find("h100");
    double meas[3], model[3];
    int skinny = -1;
    for (int i = 0; i < 3; i++) {
        model[i] = sn_roofline_kernel_model(p->kernels[i], m, NULL).time_s;
        bool sk = p->kernels[i]->anchor == outs[1], batched = p->kernels[i]->anchor == outs[2];
        meas[i] = model[i] * (sk ? 10 : batched ? 0.5 : 1);
        if (sk) skinny = i;
    }
    sn_roofline_gemm_classes c = sn_roofline_gemm_split(p, m, NULL, meas);
    ck_assert_int_eq(c.n[0], 1);
    ck_assert_int_eq(c.n[1], 2);
    ck_assert_double_eq_tol(c.measured_s[0], 10 * c.modeled_s[0], 1e-15);
    ck_assert_double_eq_tol(c.flops[0], 2.0 * 128 * 8 * 128, 1e-6);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    sn_roofline_print_gaps(f, p, m, NULL, meas, 12);
    fclose(f);
    /* only the skinny kernel is above its model: listed with its shape; the others not */
    const char *list = strstr(text, "furthest above");
    ck_assert_msg(list && strstr(list, p->kernels[skinny]->name) && strstr(list, "128x8x128"), "%s", text);
    for (int i = 0; i < 3; i++)
        if (i != skinny) ck_assert_msg(!strstr(list, p->kernels[i]->name), "%s", text);
    ck_assert_msg(strstr(text, "skinny (a side <= 64)") && strstr(text, "10.0x"), "%s", text);
    free(text);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- the decode split (kernel.h: SN_DECODE_BLOCKS) ---- */

/* gpt2's one-token decode program (B = 1, a cache of 1024, the linear weights NF4, as
 * generate_bench --base nf4 compiles it) for the CUDA target, split or not (split_decode): the
 * roofline model's time of its NF4 products and attention_cache kernels (ms), their launches,
 * and the fewest blocks of one of their (PARTIAL or one-kernel) launches. */
static double decode_model(bool split, int *launches, unsigned *fewest) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("gpt2", &c));
    sn_graph *g = sn_graph_new();
    sn_err e;
    ck_assert_msg(sn_gpt2_build_kv(g, &c, 1, 1, true, NULL, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == SN_OP_PARAM) sn_param_freeze(g->nodes[i]);
    sn_target t = sn_target_cuda(90);
    t.split_decode = split;
    sn_program *p;
    ck_assert_msg(sn_compile(g, &(sn_pipeline_opts){.target = &t, .nf4 = true}, &p, NULL, &e) ==
                      SN_OK, "%s", e.msg);
    /* the machine without its floors (roofline.h): what filling it saves, apart from what the
       launches cost (a GPU measured both: 287 -> 500 tokens/s, docs/gpu.md) */
    sn_roofline_machine floorless = *sn_roofline_machine_find("h200");
    floorless.gemm_floor_us = floorless.kernel_floor_us = floorless.gemm_overhead_us = 0;
    const sn_roofline_machine *m = &floorless;
    double ms = 0;
    *launches = 0, *fewest = ~0u;
    for (int i = 0; i < p->n_kernels; i++) {
        const sn_kernel *k = p->kernels[i];
        if (k->kind != SN_KER_GEMV &&
            !(k->kind == SN_KER_ATTENTION && k->anchor->op == SN_OP_ATTENTION_CACHE))
            continue;
        ms += 1e3 * sn_roofline_kernel_model(k, m, NULL).time_s;
        ++*launches;
        unsigned blocks = sn_cuda_launch_dims(k, &t).grid[0];
        if (k->stage != SN_SUM_FINISH && blocks < *fewest) *fewest = blocks;
    }
    sn_program_free(p);
    sn_graph_free(g);
    return ms;
}

/* Split, every NF4 product and attention_cache of gpt2's decode step launches at least 264
 * blocks (12 .. 48 without), one more launch each (the FINISH), and the model's time of those
 * kernels falls by more than half (the model without its per-kernel floors: docs/generate.md). */
START_TEST(decode_split_fills_the_machine) {
    int n0, n1;
    unsigned few0, few1;
    double before = decode_model(false, &n0, &few0), after = decode_model(true, &n1, &few1);
    printf("gpt2 decode, NF4: %d launches of the NF4 products and attention_cache, at least %u "
           "blocks, modeled %.4f ms; split: %d launches, at least %u blocks, %.4f ms\n", n0,
           few0, before, n1, few1, after);
    ck_assert_int_eq(n0, 12 * 5); /* four products and the attention a layer */
    ck_assert_int_eq(n1, 2 * n0);
    ck_assert_uint_eq(few0, 12);
    ck_assert_uint_ge(few1, SN_DECODE_BLOCKS);
    ck_assert_msg(after < 0.5 * before, "modeled %.4f ms split, %.4f ms not", after, before);
}
END_TEST

/* ---- grouped-query dk and dv in parts (program/kernel.h: dkv_parts) ---- */

/* The backward of causal bf16 attention with B, H query heads on hkv kv heads, T = S, D = 64, for
 * sm_90 with parts or not: its attention kernels' model (h200) into m[] (n of them, in order). */
static int dkv_model(int b, int h, int hkv, int64_t t, bool parts, sn_roofline_kernel m[8],
                     const sn_kernel *ks[8], sn_program **pp, sn_graph **gp) {
    sn_graph *g = *gp = sn_graph_new();
    float scale = 0.125f;
    sn_node *q = sn_input(g, "q", SN_BF16, SN_SHAPE(b, h, t, 64));
    sn_node *k = sn_input(g, "k", SN_BF16, SN_SHAPE(b, hkv, t, 64));
    sn_node *v = sn_input(g, "v", SN_BF16, SN_SHAPE(b, hkv, t, 64));
    sn_node *dout = sn_input(g, "dout", SN_BF16, SN_SHAPE(b, h, t, 64));
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_node *o = sn_attention(g, q, k, v, lse, scale);
    sn_graph_add_output(g, sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale));
    sn_graph_add_output(g, sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale));
    sn_target tg = sn_target_cuda(90);
    tg.att_dkv_parts = parts;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &tg}, pp, NULL, &e) == SN_OK,
                  "%s", e.msg);
    const sn_roofline_machine *mach = sn_roofline_machine_find("h200");
    int n = 0;
    for (int i = 0; i < (*pp)->n_kernels; i++) {
        const sn_kernel *ker = (*pp)->kernels[i];
        if (ker->kind != SN_KER_ATTENTION || ker->anchor->op == SN_OP_ATTENTION) continue;
        ck_assert_int_lt(n, 8);
        ks[n] = ker;
        m[n++] = sn_roofline_kernel_model(ker, mach, NULL);
    }
    return n;
}

/* smollm2-135m's attention at B=8 (9 heads on 3): the one dk/dv kernel's first-keys block (48
 * query tiles) bounds it, about 2x its share; in parts no block does (16 tiles), the parts'
 * kernel takes the one kernel's FLOPs and the sum none, its bytes the scratch and dk, dv; with
 * no group (gpt2's 12 heads) one kernel and no bound. */
START_TEST(dkv_parts_model) {
    sn_roofline_kernel m[2][8];
    const sn_kernel *ks[2][8];
    sn_program *p[2];
    sn_graph *g[2];
    int n[2];
    for (int parts = 0; parts < 2; parts++)
        n[parts] = dkv_model(8, 9, 3, 1024, parts, m[parts], ks[parts], &p[parts], &g[parts]);
    ck_assert_int_eq(n[0], 1);
    ck_assert_int_eq(n[1], 2);
    ck_assert(m[0][0].sm_bound && !m[1][0].sm_bound);
    ck_assert(ks[1][0]->stage == SN_SUM_PARTIAL && ks[1][1]->stage == SN_SUM_FINISH);
    ck_assert_double_eq_tol(m[1][0].flops, m[0][0].flops, 1e-3 * m[0][0].flops);
    ck_assert_double_eq(sn_roofline_kernel_flops(ks[1][1]), 0); /* no products: elementwise work */
    double scratch = 4.0 * 8 * 9 * 1024 * 128, out = 2.0 * 2 * 8 * 3 * 1024 * 64;
    ck_assert_double_eq_tol(m[1][1].bytes, scratch + out, 1);
    double ratio = m[0][0].time_s / m[1][0].time_s;
    printf("smollm2-135m B=8 dk/dv, modeled on the h200: one kernel %.1f us, parts %.1f + %.1f us "
           "(%.2fx the parts' kernel)\n", 1e6 * m[0][0].time_s, 1e6 * m[1][0].time_s,
           1e6 * m[1][1].time_s, ratio);
    ck_assert_msg(ratio > 1.5 && ratio < 2.5, "%.2f", ratio);
    for (int i = 0; i < 2; i++) {
        sn_program_free(p[i]);
        sn_graph_free(g[i]);
    }
    sn_roofline_kernel one[8];
    const sn_kernel *k1[8];
    sn_program *pg;
    sn_graph *gg;
    ck_assert_int_eq(dkv_model(16, 12, 12, 1024, true, one, k1, &pg, &gg), 1);
    ck_assert(!one[0].sm_bound && k1[0]->stage == SN_SUM_WHOLE);
    sn_program_free(pg);
    sn_graph_free(gg);
}
END_TEST

/* The delayed update's model (bench/roofline.h sn_roofline_offload_model) on the tiny GPT-2's
 * training program, chunks of 64 elements, the host's AdamW from far slower than the device to
 * far faster: the weights up during the run never later than up after the update (each chunk is
 * free by max(device, host) and the uploads take up_s in all); never before the device's step,
 * the gradients' last chunk or the host's update end; the kernels scaled to a measured step make
 * exactly that step. */
START_TEST(offload_delay_model) {
    sn_test_tiny_shape sh = {64, 16};
    sn_graph *g;
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_test_tiny_loss_graph(&sh, 2, &g, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, g->loss, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
    const sn_roofline_machine *m = sn_roofline_machine_find("h100");
    int64_t n = p->layout.flat_n;
    ck_assert(n > 0);
    static const double gbs[] = {1e-4, 1e-3, 1e-2, 0.1, 1, 1000};
    for (size_t i = 0; i < sizeof gbs / sizeof *gbs; i++) {
        sn_roofline_offload r = sn_roofline_offload_model(p, n, 64, m, &(sn_roofline_opts){0}, gbs[i],
                                                          NULL, 0);
        double floor = fmax(fmax(r.device_s, r.down_end_s), r.host_s);
        ck_assert_msg(r.delayed_run_s <= r.delayed_s * (1 + 1e-12) && r.delayed_run_s >= floor * (1 - 1e-12),
                      "host %g GB/s: in the run %g s, after the update %g s, floor %g s", gbs[i],
                      r.delayed_run_s, r.delayed_s, floor);
        ck_assert(r.delayed_run_s <= fmax(fmax(r.device_s, r.down_end_s), r.host_s + r.up_s) * (1 + 1e-12));
    }
    sn_roofline_offload r1 = sn_roofline_offload_model(p, n, 64, m, &(sn_roofline_opts){0}, 10, NULL, 0);
    sn_roofline_opts o3 = {.device_step_s = 3 * r1.on_device_s};
    sn_roofline_offload r3 = sn_roofline_offload_model(p, n, 64, m, &o3, 10, NULL, 0);
    ck_assert_double_eq_tol(r3.on_device_s, 3 * r1.on_device_s, 1e-12 * r1.on_device_s);
    ck_assert(r3.kernel_scale > 3 && r1.kernel_scale == 1);
    ck_assert(r3.device_s > r1.device_s && r3.down_end_s > r1.down_end_s);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernel_cost");
    TCase *tc = tcase_create("occupancy");
    tcase_add_test(tc, occupancy_formulas);
    tcase_add_test(tc, roofline_gaps);
    tcase_add_test(tc, decode_split_fills_the_machine);
    tcase_add_test(tc, dkv_parts_model);
    tcase_add_test(tc, offload_delay_model);
    suite_add_tcase(s, tc);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 240);
    tcase_add_test(nv, tiny_gpt2_every_kind);
    tcase_add_test(nv, attention_no_spills_and_occupancy);
    suite_add_tcase(s, nv);
    return s;
}

int main(void) { return sn_test_main(suite()); }
