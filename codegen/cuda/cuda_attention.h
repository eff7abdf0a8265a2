/* cuda_attention.h: what the flash-attention renderers share (cuda_attention.c: the plan, the
 * kernel's head and the pieces both paths write alike; cuda_attention_simt.c: the fp32 FMA
 * kernels; cuda_attention_mma.c: the tensor-core kernels).
 * Convention: every size is a compile-time constant of the kernel text; a plan fixes them. */
#ifndef SN_CUDA_ATTENTION_H
#define SN_CUDA_ATTENTION_H

#include "cuda_int.h"

/* Which pass over the scores a kernel makes. */
typedef enum {
    SN_ATT_FWD, /* query blocks over key tiles: o and lse (online softmax), or lse, or o from lse */
    SN_ATT_DQ,  /* query blocks over key tiles: dq */
    SN_ATT_DKV, /* key blocks over query tiles: dk and/or dv */
} sn_att_pass;

typedef struct {
    const sn_kernel *k;
    const sn_node *n;      /* the anchor */
    sn_att_pass pass;
    bool out_o, out_lse, in_lse;  /* forward: what it writes, whether lse is read instead */
    bool out_dk, out_dv;          /* DKV */
    /* args index of each role, -1: not used (outputs: o, lse, dq, dk, dv) */
    int a_q, a_k, a_v, a_o, a_do, a_lse, a_out_o, a_out_lse, a_dq, a_dk, a_dv;
    /* the anchor's input index of each input role (k->access[i] says where it is), -1 */
    int i_q, i_k, i_v, i_o, i_do, i_lse;
    int64_t batch, T, S, D, Dv;   /* batch: q's (batch x head) slices */
    int64_t G;                    /* query heads per k/v head (grouped-query attention) */
    int64_t items;                /* blockIdx.y's range: batch, or k's slices (batch / G) for DKV */
    float scale;
    sn_dtype dt;   /* q's dtype (k, v, o, dout and the outputs share it) */
    bool mma;      /* tensor cores: 16-bit operands the target multiplies */
    bool k8;       /* mma as two m16n8k8 (f16 on sm_75) */
    int warps;
    int rows;      /* fp32: query rows (FWD, DQ) or keys (DKV) per warp; mma: 16 */
    int tile;      /* the other side's tile: keys (FWD, DQ) or queries (DKV) */
    int stages;    /* mma: 2 when the streamed tiles are double-buffered (cp.async, sm_80+) */
    int min_blocks; /* __launch_bounds__'s blocks an SM (a register cap), 0: none */
    bool dynamic;   /* mma: the tiles carved from dynamic shared memory (over 48 KiB) */
    bool wgmma;     /* FWD or DKV on sm_90's warpgroup MMA (cuda_attention_wgmma*.c; opt-in) */
    bool overlap;   /* wgmma FWD (o and lse) with each tile's softmax overlapped by the products
                       (cuda_attention_wgmma_fwd.c; opt-in, "fwd=wgmma-overlap") */
    /* The atomic dq (program/kernel.h): DKV also adds scale dS K into dq's f32 sums (the
     * scratch, the arg after the others) with atomic adds; dS goes through a shared tile of
     * keys x queries, ds_tile; the dots dout_i . o_i are read from the scratch (the zero kernel
     * takes them), so o is not copied. */
    bool dq_atomic;
    int dq_stage;   /* the atomic dq's zero (SN_ATT_DQ_ZERO) or store (SN_ATT_DQ_STORE) kernel,
                       a pass of its own over the scratch; SN_SUM_WHOLE: any other kernel */
    /* Grouped-query dk and dv in parts (program/kernel.h): `parts`, DKV for one query head an
     * item (q's slice; k and v at item / G, no loop over the group) storing dk (times the
     * scale) and dv in f32 into the scratch (the arg after the others), dk's parts then dv's;
     * `parts_sum`, the pass of its own over the scratch adding the G parts into dk and dv. */
    bool parts, parts_sum;
    int64_t shared_bytes; /* shared memory: static, or dynamic where `dynamic` says */
} sn_att_plan;

/* cuda_attention.c */
sn_status sn_att_plan_make(const sn_kernel *k, const sn_target *tg, sn_att_plan *p, sn_err *e);
/* The comment naming the pass and the tiles, the signature of function fname and the role
 * pointers of the item (blockIdx.y: q's slice, whose k and v are slice item / G; DKV: k's
 * slice, whose query heads are items G item .. G item + G - 1). No node ids: kernels alike in all but names share a text. */
void sn_att_emit_head(sn_cu_text *t, const sn_att_plan *p, const char *path, const char *fname);
const char *sn_att_ctype(sn_dtype dt);
/* An output's pointer <name> (args[a]): moved to the item's slice of `per` elements, or through
 * its access when it is written into a wider or permuted buffer (kernel.h); with `row` (the
 * rows' length when contiguous) its row stride as the constant <name>_row. */
void sn_att_out_role(sn_cu_text *t, const sn_att_plan *p, const char *name, int a, const char *per,
                     const char *row);
/* Input i's pointer <name>: its arg plus its access's offset and the item's coordinates over the
 * leading dims times their strides (the group's first head as <name>_group in DKV's group loop);
 * its row stride as the constant <name>_row. */
void sn_att_in_role(sn_cu_text *t, const sn_att_plan *p, const char *name, int i);

/* cuda_attention_sums.c: the passes over a scratch (the atomic dq's zero and store, dq_stage;
 * the sum of dk's and dv's parts, parts_sum): their launch and their text. */
sn_cuda_dims sn_att_scratch_dims(const sn_att_plan *p);
void sn_att_emit_scratch_pass(sn_cu_text *t, const sn_att_plan *p, const char *fname);

/* What the paths write alike (since the tensor-core rework of 2026-11-27, whose base-2
 * exponents, per-warp masking and streamed loops are its own, the fp32 path uses all of these
 * and the tensor-core path sn_att_emit_seen alone), in the names both use: i (a query), j (a
 * key), q0/BQ (FWD, DQ) or k0/BK (DKV), qs (DKV's query tile), row_max, row_sum, row_lse,
 * row_dot, lse_tile, dot_tile. A path names its own element of the scores (s[r], s[nt][e]) and of the per-row
 * state (x: "r" in the SIMT path, "h" or "e / 2" on tensor cores). */
/* Whether DKV loops over the G query heads of its k/v slice (grouped-query, not in parts). */
bool sn_att_group_loop(const sn_att_plan *p);
/* The loop over the key tiles (FWD, DQ) or query tiles (DKV) the block's rows see (causal),
 * its body opened with the barrier that lets the previous tiles go. DKV with G > 1: inside a
 * loop over the group's query heads g, in order, which points q, o, dout and lse at head g;
 * sn_att_close_query_tiles closes both. */
void sn_att_open_key_tiles(sn_cu_text *t);
void sn_att_open_query_tiles(sn_cu_text *t, const sn_att_plan *p);
void sn_att_close_query_tiles(sn_cu_text *t, const sn_att_plan *p);
/* `seen`: key j is inside the sequence and query i sees it (with query_checked: i too). */
void sn_att_emit_seen(sn_cu_text *t, bool query_checked);
/* dst (a declaration or an lvalue) = dout_i . o_i of row i (< SEQ_Q), every lane of the warp. */
void sn_att_emit_row_dot(sn_cu_text *t, const char *dst);
/* DKV: lse_i (and dout_i . o_i when dk is written) of the query tile's rows into lse_tile and
 * dot_tile, a warp a row, then a barrier. */
void sn_att_emit_query_stats(sn_cu_text *t, const sn_att_plan *p);
/* FWD: row_max[x] before the first tile: -inf, or the given lse of row i. */
void sn_att_emit_row_max_init(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *i);
/* FWD's online softmax: row x's max grows to m_new (with the tile's max), m_ref (declared or
 * assigned by m_ref_def) is what exponents subtract (0 while no key was seen), alpha rescales
 * what was summed before; the path rescales row_sum and its accumulators by alpha. */
void sn_att_emit_online(sn_cu_text *t, const char *x, const char *tile_max, const char *m_ref_def,
                        const char *m_ref);
/* DQ: ds = P (dp - dout_i . o_i), P = exp(s scale - lse_i), 0 where not seen. */
void sn_att_emit_dq_ds(sn_cu_text *t, const char *ds, const char *s, const char *x, const char *dp);
/* DKV: pr = P of query q of the tile (0 where not seen); with dk, ds = P (dp - dout . o). */
void sn_att_emit_dkv_p(sn_cu_text *t, const sn_att_plan *p, const char *pr, const char *s,
                       const char *q, const char *ds, const char *dp);
/* FWD's end, row i: inv, o's divisor (1 with a given lse); lse_out[i] stored by `who`. */
void sn_att_emit_fwd_inv(sn_cu_text *t, const sn_att_plan *p, const char *x);
void sn_att_emit_lse_out(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *who);

/* cuda_attention_simt.c: the kernel of plan p (p->mma false) as fp32 FMA tiles. */
void sn_att_emit_simt(sn_cu_text *t, const sn_att_plan *p, const char *fname);

/* cuda_attention_mma.c: shared memory of p's tiles (with the atomic dq's tile for dS) */
int64_t sn_att_mma_shared(const sn_att_plan *p);
void sn_att_emit_mma(sn_cu_text *t, const sn_att_plan *p, const char *fname);

/* cuda_attention_wgmma.c: whether SN_ATT_TILES names "fwd=wgmma" (FWD), "dkv=wgmma" (DKV) or
 * "dq=wgmma" (DQ);
 * the pass's wgmma plan then (SN_ERR_UNSUPPORTED where the kernel is not written: not sm_90,
 * not bf16/f16, head size not 64, the atomic dq with dv alone). */
bool sn_att_wgmma_asked(sn_att_pass pass);
/* Whether p (FWD or DKV) takes the wgmma kernel unasked: sm_90, bf16 or f16 on the tensor cores,
 * head size 64 (the atomic dq's dk/dv kernel too, since session 24), and SN_ATT_TILES names no
 * other entry for the pass (a tile, or
 * "fwd=mma" / "dkv=mma"). On an H200 (2026-11-28, gpt2 B=16 H=12 T=1024 bf16) the forward took
 * 0.144 ms a layer against mma.sync's 0.158 and the dk/dv kernel 0.253 against 0.292. */
bool sn_att_wgmma_default(const sn_att_plan *p, const sn_target *tg);
sn_status sn_att_wgmma_plan(sn_att_plan *p, const sn_target *tg, sn_err *e);

#endif
