/* test_attention_wgmma.c: the sm_90 warpgroup-MMA attention kernels, the default on sm_90 at head
 * size 64 and asked for through SN_ATT_TILES (the forward "fwd=wgmma", the dk/dv kernel
 * "dkv=wgmma"; codegen/cuda/cuda_attention_wgmma*.c): the real pipeline's kernels on the
 * simulator in every thread order against the interpreter (att_check.c), planted bugs caught,
 * refused by name where not written, where they are the default, compiled by NVRTC for sm_90a
 * without spills. An H200 ran them on 2026-11-28 (docs/attention.md, "wgmma on sm_90"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_attention.h"
#include "frontend/frontend.h"
#include "sim/sim.h"
#include "att_check.h"
#include "harness.h"

/* c's kernels rendered for its target under SN_ATT_TILES's entry `entry`: refused as not
 * supported yet (with atomic_dq as the caller set it). */
static void expect_refused(const att_case *c, const char *entry) {
    sn_graph *g;
    sn_program *p = case_program(c, &g);
    const sn_kernel *ks[8];
    int n = 0;
    for (int j = 0; j < p->n_kernels; j++)
        if (p->kernels[j]->kind == SN_KER_ATTENTION) ks[n++] = p->kernels[j];
    sn_target tg = sn_target_cuda(c->sm);
    sn_cuda_source cs;
    sn_err e;
    sn_status st = sn_cuda_render(ks, n, &tg, &cs, &e);
    if (st == SN_OK) sn_cuda_source_free(&cs);
    ck_assert_msg(st == SN_ERR_UNSUPPORTED && strstr(e.msg, "not supported yet") &&
                  strstr(e.msg, entry), "%s: %s", entry, st ? e.msg : "rendered");
    printf("refused: %s\n", e.msg);
    sn_program_free(p);
    sn_graph_free(g);
}

/* ---- the forward ---- */

/* The sm_90 wgmma forward (SN_ATT_TILES "fwd=wgmma"): against the interpreter in every thread
 * order (bf16 at T = 200: tiles cut short; f16 with grouped-query k and v; more keys than
 * queries; the unfused forward: lse alone, and o from a given lse), planted bugs caught (V's
 * descriptor a K step off, the proxy fence deleted), and refused by name where it is not
 * written (sm_80, head size 128). */
/* A forward's form: the case, and whether the forward is unfused (lse, then o from it). */
typedef struct {
    att_case c;
    bool unfused;
} fwd_form;

/* Under SN_ATT_TILES=env (left set): every form's outputs within the tolerance, in every
 * thread order. */
static void forms_agree(const char *env, const fwd_form *forms, size_t n) {
    setenv("SN_ATT_TILES", env, 1);
    for (size_t i = 0; i < n; i++) {
        run_result r = check_case(&forms[i].c, forms[i].unfused, NULL, NULL);
        ck_assert_msg(r.worst <= 1.0, "%s, form %zu: error %.2f x the tolerance; %s", env, i,
                      r.worst, r.failure);
        ck_assert_int_eq(r.checked, (forms[i].unfused ? 2 : 5) * SN_SIM_ORDER_COUNT);
    }
}

START_TEST(wgmma_forward) {
    static const fwd_form forms[] = {{{1, 2, 200, 200, 64, 64, SN_BF16, 90, 0}, false},
                                     {{1, 4, 77, 77, 64, 64, SN_F16, 90, 2}, false},
                                     {{1, 2, 77, 150, 64, 64, SN_BF16, 90, 0}, false},
                                     {{1, 2, 130, 130, 64, 64, SN_BF16, 90, 0}, true}};
    forms_agree("fwd=wgmma", forms, sizeof forms / sizeof forms[0]);
    run_result r = check_case(&forms[0].c, false, "v_at + 2048u * kk", "v_at + 1024u * kk");
    printf("wgmma forward, V's K step planted wrong: %.3g x the tolerance\n", r.worst);
    ck_assert_msg(!(r.worst <= 1.0), "a wrong V descriptor not caught");
    r = check_case(&forms[0].c, false, "sn_fence_proxy_async();", ";");
    ck_assert_msg(strstr(r.failure, "fence.proxy.async"), "no proxy fence not caught: %s",
                  r.failure);
    static const att_case refused[] = {{1, 2, 64, 64, 64, 64, SN_BF16, 80, 0},
                                       {1, 2, 64, 64, 128, 128, SN_BF16, 90, 0}};
    for (int i = 0; i < 2; i++) expect_refused(&refused[i], "fwd=wgmma");
    unsetenv("SN_ATT_TILES");
}
END_TEST

/* The forward with each tile's softmax under the last tile's P V ("fwd=wgmma-overlap",
 * cuda_attention_wgmma_fwd.c): the wgmma forward's forms (T = 200: whole tiles and masked ones;
 * f16 grouped-query; S > T; one tile, T = 64; T = 128) and the unfused forward (its lse-only and
 * o-from-lse kernels keep the loop in turn) against the interpreter in every thread order.
 * Planted, each caught: P V reading the V stage of the tile S reads, S read before its wait,
 * o_acc not rescaled at a step's top, o_acc touched before the wait for P V. */
START_TEST(wgmma_forward_overlap) {
    static const fwd_form forms[] = {{{1, 2, 200, 200, 64, 64, SN_BF16, 90, 0}, false},
                                     {{1, 4, 77, 77, 64, 64, SN_F16, 90, 2}, false},
                                     {{1, 2, 77, 150, 64, 64, SN_BF16, 90, 0}, false},
                                     {{1, 2, 64, 64, 64, 64, SN_BF16, 90, 0}, false},
                                     {{2, 2, 128, 128, 64, 64, SN_BF16, 90, 0}, false},
                                     {{1, 2, 130, 130, 64, 64, SN_BF16, 90, 0}, true}};
    forms_agree("fwd=wgmma-overlap", forms, sizeof forms / sizeof forms[0]);
    static const char *const plants[][3] = {
        {"&v_tile[(j - 1) % 2 * BK][0]", "&v_tile[(j) % 2 * BK][0]", "P V reading S's stage"},
        {"sn_wgmma_wait(1); /* S is in", "/* S is in", "S read before its wait"},
        {"o_acc[0][dt][0] *= alpha[0], o_acc[0][dt][1] *= alpha[0];", ";",
         "o_acc not rescaled"},
        {"sn_wgmma_wait(0); /* P V of tile j - 2", "/* P V of tile j - 2",
         "o_acc touched before the wait for P V"},
    };
    for (int i = 0; i < 4; i++) {
        run_result r = check_case(&forms[0].c, false, plants[i][0], plants[i][1]);
        printf("wgmma overlapped forward, %s: %.3g x the tolerance %s\n", plants[i][2], r.worst,
               r.failure);
        ck_assert_msg(!(r.worst <= 1.0), "planted (%s) not caught", plants[i][2]);
    }
    unsetenv("SN_ATT_TILES");
}
END_TEST

/* ---- the dk/dv kernel ---- */

/* Where the dk/dv kernel is checked, each under "dkv=wgmma" (dq stays mma.sync's): bf16 at
 * T = 200 (four key blocks, the last cut short; query tiles cut short; unmasked tiles between
 * the diagonal and the end), T = 128 (the diagonal tiles full: no tile masked by the sequence's
 * end), f16 with 2 query heads a kv head, more keys than queries (S = 150 > T = 77: key blocks
 * whose first query tile is not the diagonal's), grouped-query with S > T in f16 (4 query heads
 * on 1), and one key block of a head that sees no query tile past its first. */
static const att_case dkv_cases[] = {
    {1, 2, 200, 200, 64, 64, SN_BF16, 90, 0}, {1, 2, 128, 128, 64, 64, SN_BF16, 90, 0},
    {1, 4, 77, 77, 64, 64, SN_F16, 90, 2},    {1, 2, 77, 150, 64, 64, SN_BF16, 90, 0},
    {1, 4, 45, 130, 64, 64, SN_F16, 90, 1},   {2, 2, 20, 20, 64, 64, SN_BF16, 90, 0},
};
enum { N_DKV_CASES = sizeof dkv_cases / sizeof dkv_cases[0] };

/* c's five outputs under SN_ATT_TILES=env within the tolerance, in every thread order. */
static void agrees(const char *env, const att_case *c) {
    setenv("SN_ATT_TILES", env, 1);
    run_result r = check_case(c, false, NULL, NULL);
    unsetenv("SN_ATT_TILES");
    ck_assert_msg(r.worst <= 1.0, "%s: error %.2f x the tolerance; %s", env, r.worst, r.failure);
    ck_assert_int_eq(r.checked, 5 * SN_SIM_ORDER_COUNT);
}

/* Planted bug pc (its case one of dkv_cases) under SN_ATT_TILES=env, caught. */
static void caught(const char *env, const plant_case *pc) {
    setenv("SN_ATT_TILES", env, 1);
    run_result r = check_case(&dkv_cases[pc->which], false, pc->needle, pc->plant);
    unsetenv("SN_ATT_TILES");
    printf("planted (%s: %s): worst error %.3g x the tolerance: %s %s\n", env, pc->what, r.worst,
           r.worst > 1.0 ? "caught" : "MISSED", r.failure);
    ck_assert_msg(!(r.worst <= 1.0), "planted bug not caught: %s", pc->what);
}

START_TEST(wgmma_dkv_agrees) { agrees("dkv=wgmma", &dkv_cases[_i]); }
END_TEST

/* Both wgmma kernels at once ("fwd=wgmma,dkv=wgmma", as the GPU check runs them), beside the
 * other passes' tiles: bf16 at T = 200 and f16 grouped-query with S > T. */
START_TEST(wgmma_fwd_and_dkv_agree) {
    static const char *const env[] = {"fwd=wgmma,dkv=wgmma", "dq=4x64x2,dkv=wgmma,fwd=wgmma"};
    agrees(env[_i], &dkv_cases[_i == 0 ? 0 : 4]);
}
END_TEST

/* The wgmma dq kernel (opt-in: "dq=wgmma"; the forward and dk/dv kernel wgmma's by default) on
 * the dk/dv kernel's shapes: tiles cut short, S > T, grouped-query k and v; then planted bugs:
 * dq's K step 1024 bytes for 2048, dq's product not waited for before the stage is refilled. */
START_TEST(wgmma_dq_agrees) { agrees("dq=wgmma", &dkv_cases[_i]); }
END_TEST

START_TEST(wgmma_dq_planted_bugs_are_caught) {
    static const plant_case plants[] = {
        {0, 0, "k_at + 2048u * kk", "k_at + 1024u * kk", "dq's K step 1024 bytes"},
        {2, 0, "sn_wgmma_wait(0); /* in before", "/* no wait */ /* in before",
         "dq's product not waited for"},
    };
    caught("dq=wgmma", &plants[_i]);
}
END_TEST

/* The unfused backward: dk alone (attention_bwd_k: no v tile, no dp) or dv alone
 * (attention_bwd_v: no dots, no ds), each a kernel of its own, with the forward that makes o
 * and lse, all compared. */
START_TEST(wgmma_dk_or_dv_alone) {
    setenv("SN_ATT_TILES", "dkv=wgmma", 1);
    const att_case *c = &dkv_cases[_i / 2 ? 3 : 0];
    int outs = _i % 2 ? ATT_OUT_DV : ATT_OUT_DK;
    run_result r = check_outputs(c, outs, NULL, NULL);
    unsetenv("SN_ATT_TILES");
    ck_assert_msg(r.worst <= 1.0, "error %.2f x the tolerance; %s", r.worst, r.failure);
    ck_assert_int_eq(r.checked, 3 * SN_SIM_ORDER_COUNT); /* o, lse; dk or dv */
    /* one kernel of dk or dv alone */
    sn_node *in[5];
    sn_graph *g = case_graph(c, outs, in);
    sn_program *p = fuse(g);
    int alone = 0;
    for (int i = 0; i < p->n_kernels; i++)
        alone += p->kernels[i]->kind == SN_KER_ATTENTION && !p->kernels[i]->anchor2 &&
                 p->kernels[i]->anchor->op == (outs == ATT_OUT_DK ? SN_OP_ATTENTION_BWD_K
                                                                  : SN_OP_ATTENTION_BWD_V);
    ck_assert_int_eq(alone, 1);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* Planted bugs in the wgmma dk/dv kernel, each caught (a wrong result or the simulator's error
 * at the line): the swizzle's row XOR on the key tile's copies, S^T's K-major K step of 16
 * bytes for 32, dout's MN-major K step of 1024 bytes for 2048 (dv's B), the dots' chunks read
 * unswizzled, the proxy fence deleted, s read while dp's group is the one waited for (wait 2:
 * nothing waited), the causal start a tile late, lse of the row's even neighbour on unmasked
 * tiles, dk/dv of one query head of the group. */
static const plant_case dkv_plants[] = {
    {0, 0, "const int cs = c ^ (0 + r) % 8 * 8;", "const int cs = c ^ (0 + r) % 4 * 8;",
     "the key tile copied with a wrong swizzle (row mod 4)"},
    {0, 0, "a_at + 32u * ks", "a_at + 16u * ks", "S^T's K-major K step of 16 bytes"},
    {0, 0, "do_at + 2048u * kk", "do_at + 1024u * kk", "dv's MN-major K step of 1024 bytes"},
    {0, 0, "&do_tile[st + r][c ^ r % 8 * 8]", "&do_tile[st + r][c]",
     "the dots read dout unswizzled"},
    {0, 0, "sn_fence_proxy_async();", ";", "no fence.proxy.async after the copies"},
    {0, 0, "sn_wgmma_wait(1); /* s is in", "sn_wgmma_wait(2); /* s is in",
     "s read before its wgmma group is waited for"},
    {3, 0, "/ BQ * BQ;", "/ BQ * BQ + BQ;", "the causal start a query tile late (S > T)"},
    {0, 0, "s[nt][e] = sn_exp2(fmaf(s[nt][e], scale_log2, -lse_tile[r]));",
     "s[nt][e] = sn_exp2(fmaf(s[nt][e], scale_log2, -lse_tile[r & ~1]));",
     "lse of the wrong query on unmasked tiles"},
    {2, 0, "n_tiles = 2 * per_head", "n_tiles = 1 * per_head",
     "f16 gqa: dk, dv from one head of the group"},
};
enum { N_DKV_PLANTS = sizeof dkv_plants / sizeof dkv_plants[0] };

START_TEST(wgmma_dkv_planted_bugs_are_caught) { caught("dkv=wgmma", &dkv_plants[_i]); }
END_TEST

/* The atomic dq in the wgmma dk/dv kernel (SN_ATT_TILES "dq=atomic"; the zero, dk/dv with dq's
 * adds, the store): all five outputs on the dk/dv kernel's shapes, in every thread order. */
START_TEST(wgmma_atomic_dq_agrees) {
    atomic_dq = true;
    agrees("dkv=wgmma", &dkv_cases[_i]);
    atomic_dq = false;
}
END_TEST

/* Planted in its dq, each caught: dS^T stored without the swizzle (read with it), the barrier
 * after dS's stores missing, dS's fragments of one query half, K's MN-major step of 1024 bytes
 * for 2048, the scale left out, the adds before the product's wait, every query head of a group
 * into the first's dq; in the dots dout_i . o_i the zero kernel takes: a tile's read from the
 * neighbouring queries', the last 8 columns left out, a shuffle of their sums left out, every head
 * of a group reading the first's. */
static const plant_case atomic_plants[] = {
    {0, 0, "c0 = (2 * kk ^ r % 8) * 8 + 2 * tig", "c0 = (2 * kk) * 8 + 2 * tig",
     "dS^T's even chunks stored unswizzled"},
    {0, 0, "__syncthreads(); /* every warp's keys of dS are in */", "/* no barrier */",
     "the barrier after dS's stores missing"},
    {0, 0, "c = warp * 2 + lane / 8 % 2;", "c = warp * 2;", "dS's fragments of one query half"},
    {0, 0, "k_at + 2048u * kk", "k_at + 1024u * kk", "K's MN-major K step of 1024 bytes"},
    {0, 0, "v0 = acc_q[dt][0] * scale,", "v0 = acc_q[dt][0],", "dq's scale left out"},
    {0, 0, "sn_wgmma_wait(0); /* the products are in before", "/* no wait */ /* the products are in before",
     "dq added before its product is waited for"},
    {4, 0, "(long long)item * 4 + g) * SEQ_Q", "(long long)item * 4) * SEQ_Q",
     "f16 gqa: every query head's dq into the first's"},
    {0, 0, "dots_group[qn + r]", "dots_group[qn + (r ^ 1)]", "the dots of the next tiles' neighbours"},
    {0, 0, "c < HEAD_DV; c += PARTS * 8) {", "c < HEAD_DV - 8; c += PARTS * 8) {",
     "the zero kernel's dots without the last 8 columns"},
    {0, 0, "for (int d = PARTS / 2; d > 0; d /= 2) dot +=", "for (int d = PARTS / 2; d > 1; d /= 2) dot +=",
     "the zero kernel's dots missing a shuffle"},
    {4, 0, "dots_group[gn * SEQ_Q + qn + r]", "dots_group[qn + r]",
     "f16 gqa: every query head's dots the first's"},
};
enum { N_ATOMIC_PLANTS = sizeof atomic_plants / sizeof atomic_plants[0] };

START_TEST(wgmma_atomic_dq_planted_bugs_are_caught) {
    atomic_dq = true;
    caught("dkv=wgmma", &atomic_plants[_i]);
    atomic_dq = false;
}
END_TEST

/* "dkv=wgmma" only as an entry of its own; refused by name on sm_80 and at head size 128. */
START_TEST(wgmma_dkv_asked_and_refused) {
    static const struct {
        const char *env;
        bool fwd, dkv;
    } c[] = {{"dkv=wgmma", false, true},          {"fwd=wgmma,dkv=wgmma", true, true},
             {"dq=atomic,dkv=wgmma", false, true}, {"dkv=wgmmax", false, false},
             {"xdkv=wgmma", false, false},         {"dkv=4x64x2", false, false},
             {"fwd=wgmma", true, false}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        setenv("SN_ATT_TILES", c[i].env, 1);
        ck_assert_msg(sn_att_wgmma_asked(SN_ATT_FWD) == c[i].fwd, "%s", c[i].env);
        ck_assert_msg(sn_att_wgmma_asked(SN_ATT_DKV) == c[i].dkv, "%s", c[i].env);
        ck_assert_msg(!sn_att_wgmma_asked(SN_ATT_DQ), "%s", c[i].env);
    }
    setenv("SN_ATT_TILES", "dkv=wgmma", 1);
    static const att_case refused[] = {{1, 2, 64, 64, 64, 64, SN_BF16, 80, 0},
                                       {1, 2, 64, 64, 128, 128, SN_BF16, 90, 0},
                                       {1, 2, 64, 64, 64, 64, SN_F16, 75, 0}};
    for (int i = 0; i < 3; i++) expect_refused(&refused[i], "dkv=wgmma");
    unsetenv("SN_ATT_TILES");
}
END_TEST

/* How many of c's attention kernels render as wgmma kernels under SN_ATT_TILES=env (NULL:
 * unset). */
static int wgmma_kernels(const att_case *c, const char *env) {
    if (env) setenv("SN_ATT_TILES", env, 1);
    else unsetenv("SN_ATT_TILES");
    sn_graph *g;
    sn_program *p = case_program(c, &g);
    const sn_kernel *ks[8];
    int n = 0, w = 0;
    for (int j = 0; j < p->n_kernels; j++)
        if (p->kernels[j]->kind == SN_KER_ATTENTION) ks[n++] = p->kernels[j];
    sn_target tg = sn_target_cuda(c->sm);
    sn_cuda_source cs;
    sn_err e;
    ck_assert_msg(sn_cuda_render(ks, n, &tg, &cs, &e) == SN_OK, "%s", e.msg);
    for (int i = 0; i < n; i++) w += cs.text[i] && strstr(cs.text[i], "sn_wgmma_commit()") != NULL;
    sn_cuda_source_free(&cs);
    sn_program_free(p);
    sn_graph_free(g);
    unsetenv("SN_ATT_TILES");
    return w;
}

/* The default (sn_att_wgmma_default): on sm_90 the forward and the dk/dv kernel of bf16 and f16
 * at head size 64 are wgmma's (with the atomic dq too), dq mma.sync's; elsewhere (sm_80, head
 * size 128, f32) the mma.sync or f32 kernels, unrefused; "fwd=mma", "dkv=mma" or a tile of the pass keep
 * mma.sync for that pass alone. */
START_TEST(wgmma_is_the_default_where_written) {
    static const att_case bf16 = {1, 2, 64, 64, 64, 64, SN_BF16, 90, 0},
                          f16 = {1, 4, 77, 77, 64, 64, SN_F16, 90, 2},
                          sm80 = {1, 2, 64, 64, 64, 64, SN_BF16, 80, 0},
                          d128 = {1, 2, 64, 64, 128, 128, SN_BF16, 90, 0},
                          f32 = {1, 2, 64, 64, 64, 64, SN_F32, 90, 0};
    ck_assert_int_eq(wgmma_kernels(&bf16, NULL), 2); /* forward, dk/dv; not dq */
    ck_assert_int_eq(wgmma_kernels(&f16, NULL), 2);
    ck_assert_int_eq(wgmma_kernels(&sm80, NULL), 0);
    ck_assert_int_eq(wgmma_kernels(&d128, NULL), 0);
    ck_assert_int_eq(wgmma_kernels(&f32, NULL), 0);
    ck_assert_int_eq(wgmma_kernels(&bf16, "fwd=mma"), 1);
    ck_assert_int_eq(wgmma_kernels(&bf16, "dkv=4x64x2"), 1);
    ck_assert_int_eq(wgmma_kernels(&bf16, "fwd=mma,dkv=mma"), 0);
    ck_assert_int_eq(wgmma_kernels(&bf16, "fwd=wgmma,dq=4x64x2"), 2);
    atomic_dq = true; /* the atomic dq's dk/dv kernel too; "dkv=mma" keeps mma.sync's */
    ck_assert_int_eq(wgmma_kernels(&bf16, NULL), 2);
    ck_assert_int_eq(wgmma_kernels(&bf16, "dkv=mma"), 1);
    atomic_dq = false;
}
END_TEST

/* ---- NVRTC ---- */

/* The wgmma forward and dk/dv kernel compiled for sm_90a (gpt2's B = 4, H = 12, T = 1024 in bf16;
 * f16 with 3 query heads a kv head), then the overlapped forward, then the dk/dv kernel with the
 * atomic dq: no spills, no stack, no wgmma serialized; registers printed. */
START_TEST(nvrtc_wgmma_no_spills) {
    static const att_case forms[] = {{4, 12, 1024, 1024, 64, 64, SN_BF16, 90, 0},
                                     {4, 12, 1024, 1024, 64, 64, SN_F16, 90, 4}};
    static const char *const tiles[] = {"fwd=wgmma,dkv=wgmma,dq=wgmma", "fwd=wgmma-overlap",
                                        "dq=atomic"};
    for (int v = 0; v < 3; v++) {
        setenv("SN_ATT_TILES", tiles[v], 1);
        for (int f = 0; f < 2; f++) {
            atomic_dq = v == 2; /* the dk/dv kernel with dq's adds, at 3 blocks an SM */
            int b = nvrtc_check(&forms[f]);
            atomic_dq = false;
            if (b < 0) { /* no NVRTC here */
                unsetenv("SN_ATT_TILES");
                return;
            }
            ck_assert_msg(b == 0, "%s: %d kernels spill or exceed the limits", tiles[v], b);
        }
    }
    setenv("SN_ATT_TILES", tiles[0], 1);
    /* planted: s read while its group may be in flight (the wait deleted): ptxas serializes
     * every wgmma of the kernel (C7518), which the check counts */
    int b = nvrtc_check_planted(&forms[0], "sn_wgmma_wait(1); /* s is in", "/* s is in");
    ck_assert_msg(b != 0, "a serialized wgmma not reported");
    unsetenv("SN_ATT_TILES");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("attention_wgmma");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, wgmma_forward);
    tcase_add_test(tc, wgmma_forward_overlap);
    tcase_add_loop_test(tc, wgmma_dkv_agrees, 0, N_DKV_CASES);
    tcase_add_loop_test(tc, wgmma_fwd_and_dkv_agree, 0, 2);
    tcase_add_loop_test(tc, wgmma_dq_agrees, 0, N_DKV_CASES);
    tcase_add_loop_test(tc, wgmma_dq_planted_bugs_are_caught, 0, 2);
    tcase_add_loop_test(tc, wgmma_dk_or_dv_alone, 0, 4);
    tcase_add_loop_test(tc, wgmma_dkv_planted_bugs_are_caught, 0, N_DKV_PLANTS);
    tcase_add_loop_test(tc, wgmma_atomic_dq_agrees, 0, N_DKV_CASES);
    tcase_add_loop_test(tc, wgmma_atomic_dq_planted_bugs_are_caught, 0, N_ATOMIC_PLANTS);
    tcase_add_test(tc, wgmma_dkv_asked_and_refused);
    tcase_add_test(tc, wgmma_is_the_default_where_written);
    suite_add_tcase(s, tc);
    TCase *nv = tcase_create("nvrtc");
    tcase_set_timeout(nv, 240);
    tcase_add_test(nv, nvrtc_wgmma_no_spills);
    suite_add_tcase(s, nv);
    return s;
}

int main(void) { return sn_test_main(suite()); }
