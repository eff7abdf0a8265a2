/* cuda_attention_wgmma.c: the plan of the sm_90 warpgroup-MMA kernels, the default where they
 * are written (sm_90, bf16 or f16, head size 64: sn_att_wgmma_default; measured on an H200,
 * docs/attention.md "wgmma"), asked for by the SN_ATT_TILES entries "fwd=wgmma" and
 * "dkv=wgmma" (refused by name elsewhere) and left by "fwd=mma", "dkv=mma" or a tile; the dq
 * kernel's only when asked, "dq=wgmma"; the overlapped forward's, "fwd=wgmma-overlap":
 * cuda_attention_wgmma_fwd.c), and the forward's pieces (the dk/dv kernel's:
 * cuda_attention_wgmma_dkv.c, dq's: cuda_attention_wgmma_dq.c). One warpgroup (4 warps,
 * 64 queries) a block over key tiles of 64, double-buffered by cp.async; S = Q K^T and O += P V
 * are wgmma m64n64k16 with Q, K and V in shared memory in the 128-byte swizzle (rows of 128
 * bytes: head size 64) and P from registers. Convention: the accumulators of a warp's 16 rows
 * are laid out as the mma.sync kernel's s[1][8][4] and o_acc[1][8][4] (register 4 nt + e is
 * n-tile nt's fragment element e), so the rest of the forward (masking, online softmax, the
 * stores) is cuda_attention_mma_pass.c's, with MT = 1. */
#include <stdlib.h>
#include <string.h>

#include "cuda_attention_mma.h"

/* Whether SN_ATT_TILES names `name` as an entry of its own. */
static bool entry_asked(const char *name) {
    const char *env = getenv("SN_ATT_TILES");
    size_t len = strlen(name);
    for (const char *at = env ? strstr(env, name) : NULL; at; at = strstr(at + 1, name))
        if ((at == env || at[-1] == ',') && (at[len] == 0 || at[len] == ',')) return true;
    return false;
}

/* Whether SN_ATT_TILES names "fwd=wgmma" or "fwd=wgmma-overlap" (FWD), "dkv=wgmma" (DKV) or
 * "dq=wgmma" (DQ) as an entry of its own. */
bool sn_att_wgmma_asked(sn_att_pass pass) {
    if (pass == SN_ATT_FWD) return entry_asked("fwd=wgmma") || entry_asked("fwd=wgmma-overlap");
    return entry_asked(pass == SN_ATT_DKV ? "dkv=wgmma" : "dq=wgmma");
}

/* Whether SN_ATT_TILES names an entry of its own for the pass other than "wgmma": a tile
 * ("fwd=4x64x2", "dkv=4x64x2@3") or "fwd=mma", "dkv=mma" (the mma.sync kernels, as before
 * wgmma was the default). */
static bool other_asked(sn_att_pass pass) {
    const char *env = getenv("SN_ATT_TILES"), *name = pass == SN_ATT_FWD ? "fwd=" : "dkv=";
    for (const char *at = env ? strstr(env, name) : NULL; at; at = strstr(at + 1, name))
        if ((at == env || at[-1] == ',') && strncmp(at + 4, "wgmma", 5) != 0) return true;
    return false;
}

bool sn_att_wgmma_default(const sn_att_plan *p, const sn_target *tg) {
    return (p->pass == SN_ATT_FWD || p->pass == SN_ATT_DKV) && !other_asked(p->pass) &&
           p->mma && !p->k8 && tg->sm == 90 && p->D == 64 && p->Dv == 64;
}

sn_status sn_att_wgmma_plan(sn_att_plan *p, const sn_target *tg, sn_err *e) {
    const char *entry = p->pass == SN_ATT_FWD ? (entry_asked("fwd=wgmma-overlap") ? "fwd=wgmma-overlap"
                                                                                : "fwd=wgmma")
                        : p->pass == SN_ATT_DKV ? "dkv=wgmma"
                                                : "dq=wgmma";
    if (p->dq_atomic && !p->out_dk) /* dS is dk's */
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: the atomic dq (SN_ATT_TILES "
                       "\"dq=atomic\") with a wgmma kernel of dv alone: not supported yet; "
                       "leave one of them out", p->k->name);
    if (!p->mma || p->k8 || tg->sm != 90 || p->D != 64 || p->Dv != 64)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: the wgmma %s (SN_ATT_TILES "
                       "\"%s\") is written for sm_90, bf16 or f16 and head size 64 (here "
                       "sm_%d, %s, D = %lld, Dv = %lld): not supported yet otherwise; leave it "
                       "out", p->k->name, p->pass == SN_ATT_FWD ? "forward"
                                          : p->pass == SN_ATT_DKV ? "dk/dv kernel" : "dq kernel",
                       entry, tg->sm, sn_dtype_name(p->dt), (long long)p->D, (long long)p->Dv);
    p->wgmma = true;
    /* FWD and DQ: 64 queries over key tiles of 64; DKV: 64 keys over query tiles of 64 */
    p->warps = 4, p->rows = 16, p->tile = 64, p->stages = 2;
    p->dynamic = true; /* the swizzled tiles start 1024-byte aligned: carved, 1 KiB to spare */
    /* dk/dv: 3 blocks an SM (168 registers; the shared memory holds 3): 165 uncapped in
     * gpt2's bf16 program since dS reads P from dv's packed A (183 with P in f32, 2 blocks; capped
     * then, it spilled and ptxas serialized its wgmma, C7518), 2026-11-28 */
    p->min_blocks = p->pass == SN_ATT_DKV ? 3 : 0;
    p->shared_bytes = sn_att_mma_shared(p);
    /* the overlapped forward: the training forward's form (o and lse; the scale folded into the
     * exponents needs it positive); the other forwards keep the loop in turn */
    p->overlap = p->pass == SN_ATT_FWD && entry_asked("fwd=wgmma-overlap") && p->out_o &&
                 !p->in_lse && p->scale > 0.0f;
    return SN_OK;
}

void sn_attw_carve_begin(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "SN_DYNAMIC_SHARED(unsigned char, att_raw); /* %lld bytes, opted into */",
                (long long)p->shared_bytes);
    sn_cu_emitf(t, "/* the 128-byte swizzle is a function of the shared address: tiles from a "
                "1024-byte boundary */");
    sn_cu_emitf(t, "const auto att_smem = att_raw + (1024u - sn_smem_addr(att_raw) %% 1024u) %% 1024u;");
}

/* The wgmma of this kernel's type: A from shared memory (ss) or registers with B MN-major. */
const char *sn_attw_name(const sn_att_plan *p, bool regs) {
    if (p->dt == SN_BF16) return regs ? "sn_wgmma_m64n64k16_bf16_rs_tb" : "sn_wgmma_m64n64k16_bf16_ss";
    return regs ? "sn_wgmma_m64n64k16_f16_rs_tb" : "sn_wgmma_m64n64k16_f16_ss";
}

void sn_attw_issue_scores(sn_cu_text *t, const sn_att_plan *p, const char *k_row) {
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const unsigned q_at = sn_smem_addr(&q_tile[0][0]), k_at = sn_smem_addr(&k_tile[%s][0]);",
                k_row);
    sn_cu_emitf(t, "sn_wgmma_fence();");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int ks = 0; ks < HEAD_D / 16; ks++)");
    sn_cu_emitf(t, "%s(&s[0][0][0], sn_wgmma_desc(q_at + 32u * ks, 16, 1024, 1), "
                "sn_wgmma_desc(k_at + 32u * ks, 16, 1024, 1), ks > 0);", sn_attw_name(p, false));
    sn_cu_emitf(t, "sn_wgmma_commit();");
    sn_cu_emitf(t, "}");
}

void sn_attw_scores(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "/* S = Q K^T (64 x 64) by the warpgroup: 4 K steps of 16 along the head */");
    sn_cu_emitf(t, "float s[1][BK / 8][4];");
    sn_attw_issue_scores(t, p, "st");
    sn_cu_emitf(t, "sn_wgmma_wait(0);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&s[0][0][0], BK / 2);");
}

void sn_attw_pack(sn_cu_text *t, sn_attm_ops o, const char *packed, const char *x, const char *kdim) {
    sn_cu_emitf(t, "/* n-tiles 2 kk and 2 kk + 1 of %s: K step kk's A fragment */", x);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < %s / 16; kk++) {", kdim);
    sn_cu_emitf(t, "%s[kk][0] = %s(%s[2 * kk][0], %s[2 * kk][1]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "%s[kk][1] = %s(%s[2 * kk][2], %s[2 * kk][3]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "%s[kk][2] = %s(%s[2 * kk + 1][0], %s[2 * kk + 1][1]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "%s[kk][3] = %s(%s[2 * kk + 1][2], %s[2 * kk + 1][3]);", packed, o.pack, x, x);
    sn_cu_emitf(t, "}");
}

void sn_attw_issue_pv(sn_cu_text *t, const sn_att_plan *p, const char *v_row) {
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "const unsigned v_at = sn_smem_addr(&v_tile[%s][0]);", v_row);
    sn_cu_emitf(t, "sn_wgmma_fence(); /* after o_acc's rescaling and pa's packing */");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&o_acc[0][0][0], HEAD_DV / 2);");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < BK / 16; kk++)");
    sn_cu_emitf(t, "%s(&o_acc[0][0][0], pa[kk], sn_wgmma_desc(v_at + 2048u * kk, 8192, 1024, 1), 1);",
                sn_attw_name(p, true));
    sn_cu_emitf(t, "sn_wgmma_commit();");
    sn_cu_emitf(t, "}");
}

void sn_attw_pv(sn_cu_text *t, const sn_att_plan *p, sn_attm_ops o) {
    sn_cu_emitf(t, "/* O += P V: P from registers (two n-tiles of s are one K step's A "
                "fragment), V's rows of 128 bytes MN-major (16 keys a step, 2048 bytes) */");
    sn_cu_emitf(t, "{");
    sn_cu_emitf(t, "unsigned pa[BK / 16][4];");
    sn_attw_pack(t, o, "pa", "s[0]", "BK");
    sn_attw_issue_pv(t, p, "st");
    sn_cu_emitf(t, "sn_wgmma_wait(0);");
    sn_cu_emitf(t, "sn_wgmma_fence_operands(&o_acc[0][0][0], HEAD_DV / 2);");
    sn_cu_emitf(t, "}");
}
