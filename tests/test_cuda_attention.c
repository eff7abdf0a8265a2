/* test_cuda_attention.c: the CUDA flash-attention kernels (codegen/cuda/cuda_attention*.c), made
 * from the kernels of the real fuse pass, run by the SIMT simulator in three thread orders and
 * compared with the reference interpreter (fp32 storage: 1e-5; bf16 and f16 operands on tensor
 * cores: a few units of the dtype's rounding); planted bugs must be caught; NVRTC compiles them
 * for sm_75, sm_80 and sm_90 without spills (the harness: att_check.c; the sm_90 wgmma kernels:
 * test_attention_wgmma.c). Convention: outputs start poisoned (bytes 0x7f). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "sim/sim.h"
#include "train/train.h"
#include "tiny_gpt2.h"
#include "att_check.h"
#include "harness.h"

/* ---- forward and backward against the interpreter ---- */

/* Head sizes 64 and 128 at sequence lengths no tile divides; odd head sizes and S > T (fp32
 * path); each storage type on the path its target takes: f32 FMA tiles, bf16 mma (sm_80), f16
 * as two m16n8k8 (sm_75) and as m16n8k16 (sm_80), bf16 on sm_75 (no bf16 mma: FMA tiles);
 * grouped-query k and v (the last column, cases 10 ..) on each path. */
static const att_case cases[] = {
    {2, 2, 37, 37, 64, 64, SN_F32, 80, 0},     {1, 2, 100, 100, 128, 128, SN_F32, 80, 0},
    {1, 2, 20, 29, 24, 40, SN_F32, 80, 0},     {2, 2, 37, 37, 64, 64, SN_BF16, 80, 0},
    {1, 2, 100, 100, 128, 128, SN_BF16, 80, 0}, {1, 2, 45, 61, 32, 64, SN_BF16, 90, 0},
    {2, 2, 37, 37, 64, 64, SN_F16, 75, 0},     {1, 2, 100, 100, 128, 128, SN_F16, 75, 0},
    {1, 2, 37, 37, 64, 64, SN_F16, 80, 0},     {1, 2, 37, 37, 64, 64, SN_BF16, 75, 0},
    /* grouped-query attention: 2 and 4 query heads per kv head, 1 or 2 kv heads, two batches */
    {2, 4, 37, 37, 64, 64, SN_F32, 80, 2},  {1, 4, 20, 29, 24, 40, SN_F32, 80, 1},
    {2, 4, 37, 37, 64, 64, SN_BF16, 80, 2}, {1, 4, 45, 61, 32, 64, SN_BF16, 90, 1},
    {2, 4, 37, 37, 32, 32, SN_F16, 75, 2},
    /* several double-buffered tiles in every pass (sm_90, D = 64: forward key tiles of 64, dq's
     * of 32, dk/dv's query tiles of 32) and a sequence no tile divides */
    {1, 2, 200, 200, 64, 64, SN_BF16, 90, 0},
    /* head sizes real models use besides 64 and 128 (issue 22): 80 (5 k-steps of 16) and 96,
     * on each tensor-core path, one with grouped-query k and v */
    {1, 2, 45, 61, 80, 80, SN_BF16, 80, 0},    {1, 4, 77, 77, 96, 96, SN_BF16, 90, 2},
    {1, 2, 37, 37, 80, 80, SN_F16, 75, 0},     {1, 2, 45, 45, 96, 96, SN_F16, 80, 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

START_TEST(forward_and_backward) {
    run_result r = check_case(&cases[_i], false, NULL, NULL);
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
}
END_TEST

/* The tensor-core kernels at the other tile configurations SN_ATT_TILES selects for tuning on a
 * GPU: 8 warps (128 rows a block), tiles of 128 and 64 carved from dynamic shared memory (over
 * 48 KiB), single-buffered tiles, 2 warps: each against the interpreter, bf16 on sm_90 at
 * T = 200 (several tiles, the last cut short) and with grouped-query k and v. */
static const char *const tile_configs[] = {
    "fwd=8x64x2,dq=8x64x2,dkv=8x64x2", "fwd=4x128x2,dq=4x64x2,dkv=4x64x2",
    "fwd=4x64x1,dq=2x16x2,dkv=2x64x1", "fwd=8x128x2,dq=8x128x1,dkv=8x128x2",
    "fwd=4x64x2x2", "fwd=2x32x1x2",
};
enum { N_TILE_CONFIGS = sizeof tile_configs / sizeof tile_configs[0] };

START_TEST(tile_configs_agree) {
    static const att_case forms[] = {{1, 2, 200, 200, 64, 64, SN_BF16, 90, 0},
                                     {1, 4, 77, 77, 64, 64, SN_BF16, 80, 2}};
    setenv("SN_ATT_TILES", tile_configs[_i / 2], 1);
    run_result r = check_case(&forms[_i % 2], false, NULL, NULL);
    unsetenv("SN_ATT_TILES");
    ck_assert_msg(r.worst <= 1.0, "%s: error %.2f x the tolerance; %s", tile_configs[_i / 2],
                  r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
}
END_TEST

START_TEST(unfused_forward) {
    static const int which[] = {0, 3, 6};
    run_result r = check_case(&cases[which[_i]], true, NULL, NULL);
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 2 * SN_SIM_ORDER_COUNT);
}
END_TEST

/* q, k, v as GPT-2 makes them, heads of the (B, T, 3C) QKV output, and dout from a (B, T, C)
 * gradient: the kernels read them in place (strided), no copies; dq, dk, dv concatenated into
 * the (B, T, 3C) gradient as autodiff makes it (an add of pads): the kernels write their
 * slices of it (strided), no copies either. */
static void check_qkv_layout(sn_dtype dt, int sm, int64_t hs) {
    enum { B = 2, H = 2, T = 37 };
    int64_t C = H * hs;
    float scale = 1.0f / sqrtf((float)hs);
    sn_graph *g = sn_graph_new();
    sn_node *qkv = sn_input(g, "qkv", dt, SN_SHAPE(B, T, 3 * C));
    sn_node *dy = sn_input(g, "dy", dt, SN_SHAPE(B, T, C));
    sn_node *part[3], *head[4];
    ck_assert_int_eq(sn_split(g, qkv, 2, 3, part), 0);
    static const int perm[] = {0, 2, 1, 3};
    for (int i = 0; i < 4; i++)
        head[i] = sn_permute(g, sn_reshape(g, i < 3 ? part[i] : dy, SN_SHAPE(B, T, H, hs)), perm);
    sn_node *q = head[0], *k = head[1], *v = head[2], *dout = head[3];
    sn_node *lse = sn_attention_lse(g, q, k, scale);
    sn_node *o = sn_attention(g, q, k, v, lse, scale);
    sn_node *grads[] = {sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale),
                        sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale),
                        sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale)};
    sn_node *dqkv = NULL;
    for (int i = 2; i >= 0; i--) { /* dv, dk, dq: autodiff's order */
        sn_node *back = sn_reshape(g, sn_permute(g, grads[i], perm), SN_SHAPE(B, T, C));
        sn_node *padded = sn_pad(g, back, 2, i * C, 3 * C);
        dqkv = dqkv ? sn_add(g, dqkv, padded) : padded;
    }
    sn_node *outs[] = {o, lse, dqkv};
    for (int i = 0; i < 3; i++) sn_graph_add_output(g, outs[i]);
    ck_assert_msg(!sn_graph_error(g), "%s", sn_graph_error(g));
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    set_random(it, qkv, 2);
    set_random(it, dy, 1);
    sn_err e;
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    sn_program *p = fuse(g);
    for (int i = 0; i < p->n_kernels; i++) /* attention only: no copies of q, k, v, dout, and
                                              dq, dk, dv written into the gradient */
        ck_assert_msg(p->kernels[i]->kind == SN_KER_ATTENTION, "%s", p->kernels[i]->name);
    ck_assert_int_eq(p->kernels[2]->n_access, 6 + 2); /* dk and dv through their accesses */
    sn_target tg = sn_target_cuda(sm);
    char label[96];
    snprintf(label, sizeof label, "%s sm_%d qkv layout (B %d, H %d, T %d, hs %lld)",
             sn_dtype_name(dt), sm, B, H, T, (long long)hs);
    run_result r = {0};
    run_attention(p, it, &tg, 3, label, &r);
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
    sn_program_free(p);
    sn_interp_free(it);
    sn_graph_free(g);
}

START_TEST(qkv_layout_in_place) {
    static const struct {
        sn_dtype dt;
        int sm;
        int64_t hs;
    } c[] = {{SN_F32, 80, 24}, {SN_BF16, 80, 64}, {SN_F16, 75, 32}};
    check_qkv_layout(c[_i].dt, c[_i].sm, c[_i].hs);
}
END_TEST

/* ---- planted bugs: each must make the comparison (or the launch) fail ---- */


static const plant_case plants[] = {
    /* off-by-one tile bounds: the last key row of a tile load dropped, in both paths */
    {0, 0, "k0 + r < SEQ_K ?", "k0 + r < SEQ_K - 1 ?", "fp32: last key row of the tile dropped"},
    {3, 0, "const bool in = kn + r < SEQ_K;", "const bool in = kn + r < SEQ_K - 1;",
     "bf16: last key row dropped"},
    /* the causal block bound one short: it matters where the block's last query is the first
     * key of a tile (fp32: tiles of 32 keys, T = 33; f16 mma: 64 keys, T = 65) */
    {0, 33, "q_last + SEQ_K - SEQ_Q + 1)", "q_last + SEQ_K - SEQ_Q)", "fp32: causal key bound"},
    {6, 65, "q_last + SEQ_K - SEQ_Q + 1)", "q_last + SEQ_K - SEQ_Q)",
     "f16 sm_75: causal key bound"},
    /* a wrong fragment index: P's A operand with a register's two halves swapped */
    {3, 0, "sn_pack_bf16x2(s[2 * kk][2], s[2 * kk][3])", "sn_pack_bf16x2(s[2 * kk][3], s[2 * kk][2])",
     "bf16 m16n8k16: P fragment register 1 halves swapped"},
    {6, 0, "sn_pack_f16x2(s[2 * kk][2], s[2 * kk][3])", "sn_pack_f16x2(s[2 * kk][3], s[2 * kk][2])",
     "f16 m16n8k8: P fragment register 1 halves swapped"},
    /* a wrong fragment index in the m16n8k8 split: b's first register used twice */
    {6, 0, "sn_mma_f16_1688(d, a_hi, b + 1, d);", "sn_mma_f16_1688(d, a_hi, b, d);",
     "f16 m16n8k8: second k half multiplied by the first half of b"},
    /* the B operand of Q K^T read from the wrong 8 columns (ldmatrix row address) */
    {3, 0, "kd * 16 + lane / 8 % 2 * 8]);", "kd * 16 + lane / 16 * 8]);",
     "bf16: ldmatrix B row addresses of the wrong k half"},
    /* the fp32 path's shuffle of a probability from the wrong lane */
    {0, 0, "__shfl_sync(0xffffffffu, pr[r], jj)", "__shfl_sync(0xffffffffu, pr[r], (jj + 1) % 32)",
     "fp32: probability shuffled from the next lane"},
    /* grouped-query attention (4 query heads, 2 kv heads): the forward's k read at kv head
     * h % 2 instead of h / 2; dk and dv summing only the first query head of each group */
    {10, 0, "% 4 / 2) *", "% 4 % 2) *", "fp32 gqa: kv head h % Hkv"},
    {10, 0, "g < 2; g++", "g < 1; g++", "fp32 gqa: dk, dv from one head of the group"},
    {12, 0, "n_tiles = 2 * per_head", "n_tiles = 1 * per_head",
     "bf16 mma gqa: dk, dv from one head of the group"},
    /* the double-buffered tensor-core kernels (sm_80): the barrier that hands out a tile
     * missing; a warp's diagonal tile taken for a full one (T = 128: no tile is cut short by
     * the sequence's end) in the forward and in dk/dv; lse written or read in the wrong base */
    {3, 0, "__syncthreads(); /* the tile is in", "/* no barrier */ /* the tile is in",
     "bf16 mma: the barrier after the tile's copies missing"},
    {3, 128, "k0 + BK - 1 > warp_keys ||", "k0 + BK - 1 > warp_keys + 16 ||",
     "bf16 mma: forward's causal mask skipped on a warp's diagonal tile"},
    {3, 128, "if (qs < warp_queries ||", "if (qs + 16 < warp_queries ||",
     "bf16 mma: dk/dv's causal mask skipped on a warp's diagonal tile"},
    {3, 0, "log2f(sum)) * 0.693147181f", "log2f(sum)) * 0.69f",
     "bf16 mma: forward's lse out of base 2 with a wrong ln 2"},
    {3, 128, "sn_load(lse[qn + r]) * 1.44269504f", "sn_load(lse[qn + r])",
     "bf16 mma: dk/dv read lse without the base-2 factor"},
};
enum { N_PLANTS = sizeof plants / sizeof plants[0] };

START_TEST(planted_bugs_are_caught) {
    const plant_case *pc = &plants[_i];
    att_case c = cases[pc->which];
    c.b0 = 1; /* one slice is enough (one group of query heads for grouped-query attention) */
    if (!c.hkv) c.b1 = 1;
    if (pc->T) c.T = c.S = pc->T;
    run_result r = check_case(&c, false, pc->needle, pc->plant);
    printf("planted (%s): %s\n", pc->what, r.failure[0] ? r.failure : "");
    printf("planted (%s): worst error %.3g x the tolerance: %s\n", pc->what, r.worst,
           r.worst > 1.0 ? "caught" : "MISSED");
    ck_assert_msg(!(r.worst <= 1.0), "planted bug not caught: %s", pc->what);
}
END_TEST

/* ---- the atomic dq (sn_target.att_dq_atomic; kernel.h) ---- */

/* The tensor-core cases above (bf16 on sm_80 and sm_90, f16 as m16n8k8 on sm_75 and as
 * m16n8k16 on sm_80; head sizes 32, 64 and 128; S > T; grouped-query k and v; several
 * double-buffered tiles), with dq from the dk/dv kernel's atomic adds. */
static const int atomic_cases[] = {3, 4, 5, 6, 7, 8, 12, 13, 14, 15};
enum { N_ATOMIC_CASES = sizeof atomic_cases / sizeof atomic_cases[0] };

START_TEST(atomic_dq_agrees) {
    atomic_dq = true;
    run_result r = check_case(&cases[atomic_cases[_i]], false, NULL, NULL);
    atomic_dq = false;
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
}
END_TEST

/* At the tile configurations SN_ATT_TILES selects: dk/dv over query tiles of 64 (dS in o_tile's
 * stage, dynamic shared memory), 32 (a tile of its own, static), 128 over 8 warps (two query
 * m-tiles a warp), single-buffered over 2 warps; "dq=atomic" itself turning it on. */
static const char *const atomic_tiles[] = {
    "dq=atomic,dkv=4x64x2", "dq=atomic,dkv=4x32x2", "fwd=8x64x2,dq=atomic,dkv=8x128x2",
    "dkv=2x64x1,dq=atomic",
};
enum { N_ATOMIC_TILES = sizeof atomic_tiles / sizeof atomic_tiles[0] };

START_TEST(atomic_dq_tile_configs) {
    static const att_case forms[] = {{1, 2, 200, 200, 64, 64, SN_BF16, 90, 0},
                                     {1, 4, 77, 77, 64, 64, SN_BF16, 80, 2}};
    setenv("SN_ATT_TILES", atomic_tiles[_i / 2], 1);
    ck_assert(sn_target_att_dq_atomic_asked());
    atomic_dq = true;
    run_result r = check_case(&forms[_i % 2], false, NULL, NULL);
    atomic_dq = false;
    unsetenv("SN_ATT_TILES");
    ck_assert_msg(r.worst <= 1.0, "%s: error %.2f x the tolerance; %s", atomic_tiles[_i / 2],
                  r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
}
END_TEST

/* Only the entry "dq=atomic" asks for it; the pipeline turns it on for CUDA targets alone. */
START_TEST(atomic_dq_asked) {
    static const struct {
        const char *env;
        bool asked;
    } c[] = {{"dq=atomic", true},        {"fwd=4x64x2,dq=atomic", true}, {"dq=atomic,dkv=4x64x2", true},
             {"dq=4x64x2", false},       {"xdq=atomic", false},          {"dq=atomically", false},
             {"dkv=4x64x2", false}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        setenv("SN_ATT_TILES", c[i].env, 1);
        ck_assert_msg(sn_target_att_dq_atomic_asked() == c[i].asked, "%s", c[i].env);
    }
    unsetenv("SN_ATT_TILES");
    ck_assert(!sn_target_att_dq_atomic_asked());
    att_case ac = {1, 2, 37, 37, 64, 64, SN_BF16, 80, 0};
    for (int cuda = 0; cuda < 2; cuda++) {
        setenv("SN_ATT_TILES", "dq=atomic", 1);
        sn_graph *g;
        sn_program *p;
        sn_err e;
        sn_target tg = cuda ? sn_target_cuda(80) : sn_target_cpu();
        {
            g = sn_graph_new();
            float scale = 0.125f;
            sn_node *q = sn_input(g, "q", SN_BF16, SN_SHAPE(1, 2, ac.T, 64));
            sn_node *k = sn_input(g, "k", SN_BF16, SN_SHAPE(1, 2, ac.T, 64));
            sn_node *v = sn_input(g, "v", SN_BF16, SN_SHAPE(1, 2, ac.T, 64));
            sn_node *dout = sn_input(g, "dout", SN_BF16, SN_SHAPE(1, 2, ac.T, 64));
            sn_node *lse = sn_attention_lse(g, q, k, scale);
            sn_node *o = sn_attention(g, q, k, v, lse, scale);
            sn_graph_add_output(g, sn_attention_bwd_q(g, q, k, v, o, dout, lse, scale));
            sn_graph_add_output(g, sn_attention_bwd_k(g, q, k, v, o, dout, lse, scale));
            sn_graph_add_output(g, sn_attention_bwd_v(g, q, k, v, o, dout, lse, scale));
        }
        sn_pipeline_opts po = {.target = &tg};
        ck_assert_msg(sn_pipeline_kernels(g, &po, &p, NULL, &e) == SN_OK, "%s", e.msg);
        unsetenv("SN_ATT_TILES");
        int staged = 0;
        for (int i = 0; i < p->n_kernels; i++) staged += p->kernels[i]->stage != SN_SUM_WHOLE;
        ck_assert_int_eq(staged, cuda ? 3 : 0);
        ck_assert(p->target.att_dq_atomic == (cuda == 1));
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* Planted bugs in the atomic dq, each caught: the scale left out, the last 16 keys of the
 * block's dS dropped from the product, the barrier after dS's stores missing, dS^T's
 * ldmatrix addresses of the wrong query half, the group's query head g ignored, a column
 * taken for its neighbour, the pairs traded with the wrong thread, the dots the zero kernel
 * takes read for the wrong queries (single-buffered on sm_75, double-buffered). */
static const plant_case atomic_plants[] = {
    {3, 0, "v0 = acc_q[dt][0] * scale,", "v0 = acc_q[dt][0],", "bf16: dq's scale left out"},
    {3, 128, "kk < BK / 16; kk++) {\n", "kk < BK / 16 - 1; kk++) {\n",
     "bf16: the block's last 16 keys dropped from dq"},
    {3, 0, "__syncthreads(); /* every warp's keys of dS are in */", "/* no barrier */",
     "bf16: the barrier after dS's stores missing"},
    {3, 0, "[mt * 16 + lane / 8 % 2 * 8]);", "[mt * 16]);", "bf16: dS^T fragments of one query half"},
    {12, 0, "(long long)item * 2 + g) * SEQ_Q * HEAD_D;", "(long long)item * 2) * SEQ_Q * HEAD_D;",
     "bf16 gqa: every query head's dq into the first's"},
    {6, 0, "v1 = acc_q[dt][1] * scale;", "v1 = acc_q[dt][0] * scale;",
     "f16 sm_75: dq's odd columns from the even"},
    {3, 0, "odd ? v0 : v2, 1);", "odd ? v0 : v2, 2);", "bf16: a row's pair traded with the wrong thread"},
    {6, 0, "? dots_group[qs + r] : 0.0f", "? dots_group[qs] : 0.0f",
     "f16 sm_75 (one stage): every query's dot the tile's first"},
    {3, 200, "? dots_group[qn + r] : 0.0f", "? dots_group[qn + (r ^ 1)] : 0.0f",
     "bf16: the next tiles' dots of the neighbouring queries"},
};
enum { N_ATOMIC_PLANTS = sizeof atomic_plants / sizeof atomic_plants[0] };

START_TEST(atomic_dq_planted_bugs_are_caught) {
    const plant_case *pc = &atomic_plants[_i];
    att_case c = cases[pc->which];
    c.b0 = 1;
    if (!c.hkv) c.b1 = 1;
    if (pc->T) c.T = c.S = pc->T;
    atomic_dq = true;
    run_result r = check_case(&c, false, pc->needle, pc->plant);
    atomic_dq = false;
    printf("planted (%s): %s\n", pc->what, r.failure[0] ? r.failure : "");
    printf("planted (%s): worst error %.3g x the tolerance: %s\n", pc->what, r.worst,
           r.worst > 1.0 ? "caught" : "MISSED");
    ck_assert_msg(!(r.worst <= 1.0), "planted bug not caught: %s", pc->what);
}
END_TEST

/* ---- grouped-query dk and dv in parts (sn_target.att_dkv_parts; kernel.h) ---- */

/* The grouped-query tensor-core cases (bf16 on sm_80 and sm_90, f16 as m16n8k8 on sm_75, S > T,
 * head sizes 32, 64 and 96), the wgmma dk/dv kernel (sm_90, D = 64: 3 query heads a kv head
 * over several query tiles) and f16 at D = 128 with 4 a kv head: the parts kernel and the sum
 * against the interpreter, every output, every thread order. */
static const att_case parts_cases[] = {
    {2, 4, 37, 37, 64, 64, SN_BF16, 80, 2},     {1, 4, 45, 61, 32, 64, SN_BF16, 90, 1},
    {2, 4, 37, 37, 32, 32, SN_F16, 75, 2},      {1, 4, 77, 77, 96, 96, SN_BF16, 90, 2},
    {1, 6, 200, 200, 64, 64, SN_BF16, 90, 2},   {1, 4, 100, 100, 128, 128, SN_F16, 80, 1},
};
enum { N_PARTS_CASES = sizeof parts_cases / sizeof parts_cases[0] };

START_TEST(dkv_parts_agree) {
    dkv_parts = true;
    run_result r = check_case(&parts_cases[_i], false, NULL, NULL);
    dkv_parts = false;
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
}
END_TEST

/* dk alone and dv alone in parts (a dk/dv kernel of one output: its scratch holds that one's
 * parts), on mma.sync (sm_80) and wgmma (sm_90): o, lse and the one gradient against the
 * interpreter in every thread order, the program with a parts kernel and its sum. */
START_TEST(dkv_parts_one_output) {
    const att_case *c = &parts_cases[_i / 2 ? 4 : 0];
    int outs = ATT_OUT_O | ATT_OUT_LSE | (_i % 2 ? ATT_OUT_DV : ATT_OUT_DK);
    dkv_parts = true;
    run_result r = check_outputs(c, outs, NULL, NULL);
    sn_node *in[5];
    sn_graph *g = case_graph(c, outs, in);
    sn_program *p = fuse(g);
    dkv_parts = false;
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 3 * SN_SIM_ORDER_COUNT);
    int parts = 0;
    for (int i = 0; i < p->n_kernels; i++)
        parts += p->kernels[i]->dkv_parts && !p->kernels[i]->anchor2;
    ck_assert_int_eq(parts, 2);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* The rule (kernel_split.c): parts only for grouped-query k and v, under SN_DKV_PARTS_BLOCKS
 * blocks of 64 keys; SN_ATT_PARTS=0 turns them off for a CUDA target; the CPU has none. */
START_TEST(dkv_parts_rule) {
    static const struct {
        int b, h, hkv;
        int64_t t;
        int parts;
    } c[] = {
        {8, 9, 3, 1024, 3},  /* smollm2-135m B=8: 384 blocks */
        {4, 32, 4, 2048, 8}, /* tinyllama-1.1b B=4 T=2048: 512 */
        {16, 9, 3, 1024, 1}, /* 768 blocks: even shares are longer */
        {4, 12, 12, 1024, 1}, /* no group */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        att_case ac = {c[i].b, c[i].h, c[i].t, c[i].t, 64, 64, SN_BF16, 90, c[i].hkv};
        sn_graph *g;
        sn_program *p = case_program(&ac, &g); /* for the CPU: no parts made */
        int n = 0;
        for (int k = 0; k < p->n_kernels; k++) {
            const sn_kernel *ker = p->kernels[k];
            ck_assert(!ker->dkv_parts);
            if (ker->kind == SN_KER_ATTENTION && ker->anchor->op == SN_OP_ATTENTION_BWD_K) {
                ck_assert_int_eq(sn_att_dkv_parts(ker), c[i].parts);
                n++;
            }
        }
        ck_assert_int_eq(n, 1);
        sn_program_free(p);
        sn_graph_free(g);
    }
    att_case ac = {1, 4, 37, 37, 64, 64, SN_BF16, 80, 2};
    for (int off = 0; off < 2; off++) {
        if (off) setenv("SN_ATT_PARTS", "0", 1);
        dkv_parts = true;
        sn_graph *g;
        sn_program *p = case_program(&ac, &g);
        dkv_parts = false;
        unsetenv("SN_ATT_PARTS");
        int n = 0;
        for (int k = 0; k < p->n_kernels; k++) n += p->kernels[k]->dkv_parts;
        ck_assert_int_eq(n, off ? 0 : 2);
        ck_assert(p->target.att_dkv_parts == !off);
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* Planted bugs in the parts, each caught: the sum leaving out the last query head, every head
 * of a group into the first's part, dk's scale left out of its even columns. */
static const plant_case parts_plants[] = {
    {0, 0, "for (int g = 0; g < G; g++) {", "for (int g = 0; g < G - 1; g++) {",
     "bf16: the sum without the last query head"},
    {0, 0, "(long long)item * SEQ_K * HEAD_D; /* its part */",
     "(long long)(item / 2 * 2) * SEQ_K * HEAD_D; /* its part */",
     "bf16: every query head's dk into the group's first part"},
    {4, 0, "make_float2(acc_k[dt][2 * h] * scale,", "make_float2(acc_k[dt][2 * h],",
     "bf16 wgmma: dk's scale left out of its even columns"},
};
enum { N_PARTS_PLANTS = sizeof parts_plants / sizeof parts_plants[0] };

START_TEST(dkv_parts_planted_bugs_are_caught) {
    const plant_case *pc = &parts_plants[_i];
    dkv_parts = true;
    run_result r = check_case(&parts_cases[pc->which], false, pc->needle, pc->plant);
    dkv_parts = false;
    printf("planted (%s): %s\n", pc->what, r.failure[0] ? r.failure : "");
    printf("planted (%s): worst error %.3g x the tolerance: %s\n", pc->what, r.worst,
           r.worst > 1.0 ? "caught" : "MISSED");
    ck_assert_msg(!(r.worst <= 1.0), "planted bug not caught: %s", pc->what);
}
END_TEST

/* ---- the tiny GPT-2's attention kernels, from the real pipeline ---- */

START_TEST(tiny_gpt2_kernels) {
    sn_graph *g = tiny_training_graph(true);
    sn_interp *it = sn_interp_new(g, false);
    sn_interp_keep_all(it, true);
    sn_err e;
    int32_t ids[TINY_B * TINY_T], tgt[TINY_B * TINY_T];
    tiny_tokens(ids, tgt, 3);
    ck_assert(!sn_interp_set_i32(it, tiny_input(g, "idx"), ids, &e));
    ck_assert(!sn_interp_set_i32(it, tiny_input(g, "targets"), tgt, &e));
    sn_node *params[64];
    int np = sn_graph_params(g, params, 64);
    for (int i = 0; i < np; i++) {
        float *w = malloc(sizeof(float) * (size_t)sn_numel(params[i]));
        ck_assert(w);
        sn_param_init(params[i], w, 3);
        ck_assert(sn_interp_set(it, params[i], w, &e) == SN_OK);
        free(w);
    }
    ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
    sn_program *p = fuse(g);
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++) n += p->kernels[i]->kind == SN_KER_ATTENTION;
    sn_target tg = sn_target_cuda(80);
    run_result r = {0};
    run_attention(p, it, &tg, n, "tiny gpt2", &r);
    printf("tiny gpt2: %d attention kernels, %d outputs compared\n", n, r.checked);
    ck_assert_int_eq(n, 6); /* two layers: forward, dq, dk and dv each */
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    sn_program_free(p);
    sn_interp_free(it);
    sn_graph_free(g);
}
END_TEST

/* ---- decoding over a KV cache (attention_cache; codegen/cuda/cuda_attention_cache.c) ---- */

static const int cache_cases[][7] = { /* B, H, Hkv, T, S, D, Dv: as test_attention_kernels' */
    {2, 4, 2, 1, 37, 40, 24}, {2, 3, 3, 3, 70, 64, 64}, {3, 8, 1, 1, 129, 128, 128},
};

/* The case's kernels: for the CPU target (one attention_cache kernel), or with split for the
 * CUDA target (sn_target_cuda(80): the decode split's PARTIAL and FINISH, kernel.h, where the
 * rule makes parts: every case here). */
static sn_program *cache_program(sn_graph *g, bool split) {
    if (!split) return fuse(g);
    sn_target tg = sn_target_cuda(80);
    sn_program *p;
    sn_err e;
    ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){.target = &tg}, &p, NULL, &e) == SN_OK,
                  "%s", e.msg);
    const sn_kernel *ks[2];
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ATTENTION) {
            ck_assert_int_lt(n, 2);
            ks[n++] = p->kernels[i];
        }
    ck_assert_int_eq(n, 2);
    ck_assert(ks[0]->stage == SN_SUM_PARTIAL && ks[1]->stage == SN_SUM_FINISH &&
              ks[0]->scratch == ks[1]->scratch && sn_split_parts(ks[0]) > 1);
    ck_assert_int_eq(ks[0]->n_items, ks[1]->n_items * sn_split_parts(ks[0]));
    return p;
}

static run_result check_cache(const int *c, sn_dtype dt, int sm, bool split, const char *needle,
                              const char *plant) {
    sn_interp *it;
    const sn_node *y, *w;
    sn_graph *g = sn_test_cache_attention(c[0], c[1], c[2], c[3], c[4], c[5], c[6], dt, &it, &y, &w);
    char label[128];
    snprintf(label, sizeof label, "attention_cache %s sm_%d B=%d H=%d Hkv=%d T=%d S=%d D=%d Dv=%d%s",
             sn_dtype_name(dt), sm, c[0], c[1], c[2], c[3], c[4], c[5], c[6], split ? " split" : "");
    sn_program *p = cache_program(g, split);
    sn_target tg = sn_target_cuda(sm);
    run_result r = {.needle = needle, .plant = plant};
    run_attention(p, it, &tg, split ? 2 : 1, label, &r);
    sn_program_free(p);
    sn_interp_free(it);
    sn_graph_free(g);
    return r;
}

/* Every case in f32 and bf16 (_i 0 .. 5), then split (6 .. 11: the decode split, kernel.h:
 * every case's keys in parts, 2 .. 5 here, batch 0's cached keys all masked, so some parts hold
 * none; the PARTIAL and FINISH kernels), in every thread order against the interpreter. */
START_TEST(cache_decode) {
    run_result r = check_cache(cache_cases[_i % 3], _i % 6 < 3 ? SN_F32 : SN_BF16, 80, _i >= 6,
                               NULL, NULL);
    ck_assert_msg(r.checked > 0 && r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
}
END_TEST

static const plant_case cache_plants[] = { /* which: a cache case; T unused */
    {0, 0, "hk = h / ", "hk = h % ", "kv head h % G instead of h / G"},
    {0, 0, "const float add = cached ? mask[r] : 0.0f;", "const float add = cached ? 0.0f : 0.0f;",
     "the mask not added"},
    {1, 0, "const bool cached = j > t;", "const bool cached = j > t + 1;", "a new key from the future"},
    {2, 0, "__syncthreads(); /* every warp's state is in */", "", "the barrier before the warps' states meet"},
    {1, 0, "for (int v = 0; v < 4; v++) {", "for (int v = 0; v < 3; v++) {", "the last warp's share left out"},
};

static const plant_case split_plants[] = { /* which: a cache case; T unused */
    {0, 0, "for (int j = kp * ", "for (int j = 1 + kp * ", "a part's first key skipped"},
    {2, 0, "__syncthreads(); /* every warp's state is in */", "", "the barrier before the warps' states meet"},
    {1, 0, "f = big == -SN_INF ? 0.0f : expf(st[0] - big)", "f = expf(st[0] - big)",
     "a part without keys not written as (-inf, 0, 0)"},
    {1, 0, "f = expf(ps[0] - big)", "f = expf(st[0] - big)", "every part weighed by part 0's max"},
    {2, 0, "sum = fmaf(ps[1], f, sum);", "sum = fmaf(ps[1], f, sum); if (p == 0) continue;",
     "the combine leaving a part's output out"},
};

/* The one kernel's planted bugs (_i 0 .. 4), then the split's (5 .. 9), each caught. */
START_TEST(cache_planted_bugs_are_caught) {
    bool split = _i >= 5;
    const plant_case *pc = split ? &split_plants[_i - 5] : &cache_plants[_i];
    run_result r = check_cache(cache_cases[pc->which], SN_F32, 80, split, pc->needle, pc->plant);
    printf("planted%s (%s): worst error %.3g x the tolerance: %s %s\n", split ? " in the split" : "",
           pc->what, r.worst, r.worst > 1.0 ? "caught" : "MISSED", r.failure);
    ck_assert_msg(!(r.worst <= 1.0), "planted bug not caught: %s", pc->what);
}
END_TEST

/* The split's FINISH combines the parts in part order (kernel.h), bit for bit: cache case 2 (24
 * slices, 5 parts) in f32 on the simulator, then y recomputed on the host from the scratch the
 * PARTIAL wrote, in that order with the kernel's operations (fmaxf, expf, fmaf; the simulator's
 * are the host's). A FINISH adding the parts in reverse order stays within the tolerance of
 * the interpreter; this check catches it (planted: rev). */
static bool combine_in_order(bool rev) {
    const int *c = cache_cases[2];
    sn_interp *it;
    const sn_node *y, *w;
    sn_graph *g = sn_test_cache_attention(c[0], c[1], c[2], c[3], c[4], c[5], c[6], SN_F32, &it, &y, &w);
    sn_program *p = cache_program(g, true);
    const sn_kernel *ks[2];
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i]->kind == SN_KER_ATTENTION) ks[n++] = p->kernels[i];
    sn_target tg = sn_target_cuda(80);
    sn_cuda_source cs;
    sn_err e;
    ck_assert_msg(sn_cuda_render(ks, 2, &tg, &cs, &e) == SN_OK, "%s", e.msg);
    int64_t P = sn_split_parts(ks[0]), T = c[3], Dv = c[6], items = ks[1]->n_items;
    if (rev) {
        char needle[64], plant[64];
        snprintf(needle, sizeof needle, "for (int p = 0; p < %lld; p++) {", (long long)P);
        snprintf(plant, sizeof plant, "for (int p = %lld; p >= 0; p--) {", (long long)(P - 1));
        char *src = sn_test_replace_first(cs.src, needle, plant);
        free(cs.src);
        cs.src = src;
    }
    sn_sim_module *m;
    ck_assert_msg(sn_sim_module_load(cs.src, &m, &e) == SN_OK, "%s", e.msg);
    const sn_kernel *k = ks[0];
    void *bufs[SN_KER_MAX_ARGS + 1], *params[SN_KER_MAX_ARGS + 1];
    for (int a = 0; a < k->n_out + k->n_in; a++) {
        int64_t len = sn_numel(k->args[a]);
        float *b = malloc(sizeof(float) * (size_t)len);
        const double *v = a < k->n_out ? NULL : sn_interp_value(it, k->args[a]);
        for (int64_t i = 0; i < len; i++) b[i] = v ? (float)v[i] : NAN;
        bufs[a] = b;
    }
    int64_t sb = p->values[k->scratch].bytes;
    bufs[k->n_out + k->n_in] = malloc((size_t)sb);
    memset(bufs[k->n_out + k->n_in], 0x7f, (size_t)sb);
    for (int a = 0; a <= k->n_out + k->n_in; a++) params[a] = &bufs[a];
    for (int i = 0; i < 2; i++) {
        sn_cuda_dims d = sn_cuda_launch_dims(ks[i], &tg);
        sn_sim_opts o = sn_sim_defaults();
        ck_assert_msg(sn_sim_launch(m, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &o, &e) ==
                      SN_OK, "%s", e.msg);
    }
    const float *st = bufs[k->n_out + k->n_in], *out = bufs[0];
    bool same = true;
    for (int64_t b = 0; b < items; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < Dv; d++) {
                const float *s0 = st + (b * P * T + t) * (Dv + 2);
                float big = -INFINITY, sum = 0.0f, o = 0.0f;
                for (int64_t q = 0; q < P; q++) big = fmaxf(big, s0[q * T * (Dv + 2)]);
                for (int64_t q = 0; q < P; q++) {
                    const float *ps = s0 + q * T * (Dv + 2), f = expf(ps[0] - big);
                    sum = fmaf(ps[1], f, sum);
                    o = fmaf(ps[2 + d], f, o);
                }
                float want = o / sum, got = out[(b * T + t) * Dv + d];
                same &= !memcmp(&want, &got, sizeof want);
            }
    for (int a = 0; a <= k->n_out + k->n_in; a++) free(bufs[a]);
    sn_sim_module_free(m);
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_interp_free(it);
    sn_graph_free(g);
    return same;
}

START_TEST(cache_split_combines_in_order) {
    ck_assert_msg(combine_in_order(false), "the FINISH's y is not the parts combined in order");
    bool caught = !combine_in_order(true);
    printf("planted in the split (the parts combined in reverse order): %s\n",
           caught ? "caught" : "MISSED");
    ck_assert_msg(caught, "planted bug not caught: the parts combined in reverse order");
}
END_TEST

/* Every cache case in f32 and bf16 for sm_75, sm_80 and sm_90, one kernel and split (its PARTIAL
 * and FINISH): compiled, no spills, no stack. */
START_TEST(nvrtc_cache_no_spills) {
    static const int arch[] = {75, 80, 90};
    for (int i = 0; i < 12; i++)
        for (int a = 0; a < 3; a++) {
            const int *c = cache_cases[i % 3];
            sn_interp *it;
            const sn_node *y, *w;
            sn_graph *g = sn_test_cache_attention(c[0], c[1], c[2], c[3], c[4], c[5], c[6],
                                                  i % 6 < 3 ? SN_F32 : SN_BF16, &it, &y, &w);
            sn_program *p = cache_program(g, i >= 6);
            const sn_kernel *ks[2];
            int n = 0;
            for (int j = 0; j < p->n_kernels; j++)
                if (p->kernels[j]->kind == SN_KER_ATTENTION && n < 2) ks[n++] = p->kernels[j];
            ck_assert(n >= 1 && ks[0]->anchor->op == SN_OP_ATTENTION_CACHE);
            sn_target tg = sn_target_cuda(arch[a]);
            sn_cuda_source cs;
            sn_cuda_module m;
            sn_err e;
            ck_assert_msg(sn_cuda_render(ks, n, &tg, &cs, &e) == SN_OK, "%s", e.msg);
            sn_status st = sn_nvrtc_compile(cs.src, "cache.cu", arch[a], &m, &e);
            if (st == SN_ERR_UNSUPPORTED) { /* no NVRTC here */
                printf("nvrtc_cache_no_spills: %s: skipped\n", e.msg);
                sn_cuda_source_free(&cs), sn_program_free(p), sn_interp_free(it), sn_graph_free(g);
                return;
            }
            ck_assert_msg(st == SN_OK, "%s", e.msg);
            for (int j = 0; j < n; j++) {
                const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[j]);
                ck_assert(in);
                printf("attention_cache case %d sm_%d %s: %d registers, spills %d/%d, stack %d\n", i,
                       arch[a], cs.fn[j], in->registers, in->spill_store_bytes, in->spill_load_bytes,
                       in->stack_bytes);
                ck_assert(in->spill_store_bytes == 0 && in->spill_load_bytes == 0 && in->stack_bytes == 0);
            }
            sn_cuda_module_free(&m);
            sn_cuda_source_free(&cs);
            sn_program_free(p);
            sn_interp_free(it);
            sn_graph_free(g);
        }
}
END_TEST

/* ---- NVRTC: every form for sm_75, sm_80, sm_90, no spills (f32 at D = 32 spilled on sm_90
 * until the forward unrolled its value loop whole there) ---- */

START_TEST(nvrtc_no_spills) {
    static const struct {
        sn_dtype dt;
        int64_t D;
    } forms[] = {{SN_F32, 32}, {SN_F32, 64}, {SN_F32, 128}, {SN_BF16, 64}, {SN_BF16, 128}, {SN_F16, 64},
                 {SN_F16, 128}, {SN_BF16, 80}, {SN_BF16, 96}, {SN_F16, 80}, {SN_F16, 96}};
    static const int archs[] = {75, 80, 90};
    int bad = 0;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
        for (size_t ai = 0; ai < 3; ai++) {
            att_case c = {4, 12, 1024, 1024, forms[f].D, forms[f].D, forms[f].dt, archs[ai], 0};
            int b = nvrtc_check(&c);
            if (b < 0) return;
            bad += b;
        }
    ck_assert_msg(bad == 0, "%d kernels spill, use a stack frame or more than 48 KiB of shared "
                  "memory (the lines above)", bad);
}
END_TEST

/* Grouped-query attention (12 query heads over 4 kv heads: dk and dv loop over 3): the three
 * kernel forms (f32 FMA tiles, bf16 mma on sm_80, f16 as m16n8k8 on sm_75) at D = 64 and 128. */
START_TEST(nvrtc_gqa_no_spills) {
    static const att_case forms[] = {
        {4, 12, 1024, 1024, 64, 64, SN_F32, 80, 4}, {4, 12, 1024, 1024, 128, 128, SN_BF16, 80, 4},
        {4, 12, 1024, 1024, 64, 64, SN_F16, 75, 4},
    };
    int bad = 0;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        int b = nvrtc_check(&forms[f]);
        if (b < 0) return;
        bad += b;
    }
    ck_assert_msg(bad == 0, "%d kernels spill, use a stack frame or more than 48 KiB of shared "
                  "memory (the lines above)", bad);
}
END_TEST

/* The atomic dq's kernels (zero, dk/dv with dq, store) at D = 64 and 128, bf16 on sm_80 and
 * sm_90, f16 on sm_75 (m16n8k8) and sm_80, grouped-query (sm_80 D = 128, sm_90 D = 64): no
 * spills, and the dk/dv
 * kernel's registers within its cap (__launch_bounds__: the same blocks an SM as without). */
START_TEST(nvrtc_atomic_dq_no_spills) {
    static const att_case forms[] = {
        {4, 12, 1024, 1024, 64, 64, SN_BF16, 80, 0},  {4, 12, 1024, 1024, 64, 64, SN_BF16, 90, 0},
        {4, 12, 1024, 1024, 128, 128, SN_BF16, 80, 0}, {4, 12, 1024, 1024, 128, 128, SN_BF16, 90, 0},
        {4, 12, 1024, 1024, 64, 64, SN_F16, 75, 0},   {4, 12, 1024, 1024, 64, 64, SN_F16, 80, 0},
        {4, 12, 1024, 1024, 128, 128, SN_BF16, 80, 4}, {4, 12, 1024, 1024, 64, 64, SN_BF16, 90, 4},
    };
    int bad = 0;
    atomic_dq = true;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        int b = nvrtc_check(&forms[f]);
        if (b < 0) break;
        bad += b;
    }
    atomic_dq = false;
    ck_assert_msg(bad == 0, "%d kernels spill, use a stack frame or more than 48 KiB of shared "
                  "memory (the lines above)", bad);
}
END_TEST

/* dk and dv in parts at smollm2-135m's and tinyllama's groups (3 and 8 query heads a kv head):
 * bf16 on sm_80 (mma.sync) and sm_90 (wgmma), f16 on sm_75 (m16n8k8), no spills. */
START_TEST(nvrtc_dkv_parts_no_spills) {
    static const att_case forms[] = {
        {8, 9, 1024, 1024, 64, 64, SN_BF16, 80, 3}, {8, 9, 1024, 1024, 64, 64, SN_BF16, 90, 3},
        {4, 32, 2048, 2048, 64, 64, SN_F16, 75, 4},
    };
    int bad = 0;
    dkv_parts = true;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        int b = nvrtc_check(&forms[f]);
        if (b < 0) break;
        bad += b;
    }
    dkv_parts = false;
    ck_assert_msg(bad == 0, "%d kernels spill, use a stack frame or more than 48 KiB of shared "
                  "memory (the lines above)", bad);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("cuda_attention");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, forward_and_backward, 0, N_CASES);
    tcase_add_loop_test(tc, unfused_forward, 0, 3);
    tcase_add_loop_test(tc, tile_configs_agree, 0, 2 * N_TILE_CONFIGS);
    tcase_add_loop_test(tc, qkv_layout_in_place, 0, 3);
    tcase_add_loop_test(tc, planted_bugs_are_caught, 0, N_PLANTS);
    tcase_add_test(tc, tiny_gpt2_kernels);
    tcase_add_loop_test(tc, cache_decode, 0, 12);
    tcase_add_loop_test(tc, cache_planted_bugs_are_caught, 0, 10);
    tcase_add_test(tc, cache_split_combines_in_order);
    suite_add_tcase(s, tc);
    TCase *at = tcase_create("atomic_dq");
    tcase_set_timeout(at, 240);
    tcase_add_loop_test(at, atomic_dq_agrees, 0, N_ATOMIC_CASES);
    tcase_add_loop_test(at, atomic_dq_tile_configs, 0, 2 * N_ATOMIC_TILES);
    tcase_add_test(at, atomic_dq_asked);
    tcase_add_loop_test(at, atomic_dq_planted_bugs_are_caught, 0, N_ATOMIC_PLANTS);
    suite_add_tcase(s, at);
    TCase *pt = tcase_create("dkv_parts");
    tcase_set_timeout(pt, 240);
    tcase_add_loop_test(pt, dkv_parts_agree, 0, N_PARTS_CASES);
    tcase_add_loop_test(pt, dkv_parts_one_output, 0, 4);
    tcase_add_test(pt, dkv_parts_rule);
    tcase_add_loop_test(pt, dkv_parts_planted_bugs_are_caught, 0, N_PARTS_PLANTS);
    suite_add_tcase(s, pt);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 240);
    tcase_add_test(nv, nvrtc_no_spills);
    tcase_add_test(nv, nvrtc_gqa_no_spills);
    tcase_add_test(nv, nvrtc_atomic_dq_no_spills);
    tcase_add_test(nv, nvrtc_dkv_parts_no_spills);
    tcase_add_test(nv, nvrtc_cache_no_spills);
    suite_add_tcase(s, nv);
    return s;
}

int main(void) { return sn_test_main(suite()); }
