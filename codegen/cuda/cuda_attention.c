/* cuda_attention.c: flash attention as CUDA C: the plan (which pass, which path, tile sizes that
 * fit the target's shared memory), launch dimensions, the kernel's head, and the pieces both
 * paths write alike; the paths themselves are cuda_attention_simt.c (fp32 FMA tiles) and
 * cuda_attention_mma.c (tensor cores). Convention: a block is one tile of queries (FWD, DQ) or
 * keys (DKV) of one (batch x head) item, blockIdx.y; tiles past the causal boundary are never
 * loaded. Grouped-query attention (G query heads per k/v head): FWD and DQ items are q's slices,
 * reading k and v at head / G; DKV items are k's slices, looping over their G query heads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"

/* ---- the plan ---- */

const char *sn_att_ctype(sn_dtype dt) {
    switch (dt) {
    case SN_F32: return "float";
    case SN_BF16: return "sn_bf16";
    case SN_F16: return "sn_f16";
    default: return NULL;
    }
}


static int64_t fp32_shared(const sn_att_plan *p) {
    int64_t R = (int64_t)p->warps * p->rows, W = p->tile, D = p->D, Dv = p->Dv, f = 4;
    switch (p->pass) {
    case SN_ATT_FWD: return f * (R * D + W * (D + 1) + (p->out_o ? W * Dv : 0));
    case SN_ATT_DQ: return f * (R * (D + Dv) + W * (D + 1) + W * (Dv + 1));
    case SN_ATT_DKV:
        return f * (R * D + (p->out_dk ? R * Dv : 0) + W * (D + 1) + W * (Dv + 1) + 2 * W);
    }
    return 0;
}

/* Blocks of p's shared memory an SM holds (the most a block may opt into, plus 1 KiB). */
static int64_t blocks_by_shared(const sn_att_plan *p, const sn_target *tg) {
    return (tg->shared_max + 1024) / (p->shared_bytes + 1024);
}

/* Blocks an SM for a double-buffered tensor-core kernel: 16 warps (dq 12) where the SM's shared
 * memory (the most a block may opt into, plus 1 KiB) holds them; __launch_bounds__ then caps its
 * registers at 64K / (blocks x threads): 128 at 16 warps, 170 at 12; dk/dv 8 warps (255) before
 * sm_90, no cap (0) on sm_90: measured on an H200 (docs/gpu.md, 2026-11-27 16:30, bf16 B=16
 * H=12 T=1024 D=64, tiles of 64), its kernel took 0.293 ms uncapped, 0.294 at 3 blocks (170
 * registers, which spilled 24 bytes in gpt2's f16 program on sm_90) and 0.337 at 2 blocks
 * (255); uncapped it spills 16 bytes on sm_80 (not measured there). dq at 3 blocks 0.186 ms,
 * at 2 blocks 0.212. The tests read ptxas's report: no spills. */
static int min_blocks(const sn_att_plan *p, const sn_target *tg) {
    /* The atomic dq's dk/dv kernel on sm_90 keeps the 3 blocks of 4 warps an SM that the
     * two-kernel one has uncapped (167 registers at D = 64, 166 at 128): 170 registers (12
     * warps' worth); uncapped it took 226 and 255 (2 blocks). Before sm_90 the cap below
     * holds for both. */
    if (p->dq_atomic && tg->sm >= 90) {
        int64_t by_shared = blocks_by_shared(p, tg), by_warps = 12 / p->warps > 1 ? 12 / p->warps : 1;
        return (int)(by_shared < by_warps ? by_shared : by_warps);
    }
    if (!p->mma || p->stages != 2 || (p->pass == SN_ATT_DKV && tg->sm >= 90)) return 0;
    /* a warp of MT m-tiles holds MT times the accumulators: counted as MT warps */
    int64_t by_warps = (p->pass == SN_ATT_FWD ? 16 : p->pass == SN_ATT_DQ ? 12 : 8) /
                       (p->warps * (p->rows / 16));
    int64_t by_shared = blocks_by_shared(p, tg);
    if (by_warps < 1) by_warps = 1;
    return (int)(by_warps < by_shared ? by_warps : by_shared);
}

/* A tensor-core configuration "WxTxS" (warps, tile, stages; the forward also "WxTxSxM": M
 * m-tiles of 16 query rows a warp) for pass `pass` from SN_ATT_TILES
 * ("fwd=4x64x2x2,dq=4x32x2,dkv=4x32x2", any of the three), each optionally followed by "@N":
 * __launch_bounds__' blocks an SM (the register cap; "@0" none), else min_blocks decides: a
 * tuning knob for benchmarks on a GPU (bench/gpu_check --att-tiles), not a user option; false
 * when it names none. c[4] is the blocks asked for, or -1. The entry "dq=atomic" names no dq
 * tile: it asks for the atomic dq (sn_target_att_dq_atomic_asked, read by sn_pipeline_kernels;
 * kernel.h), whose dk/dv kernel "dkv=" still tiles. */
static bool tiles_override(sn_att_pass pass, int c[5]) {
    const char *env = getenv("SN_ATT_TILES");
    static const char *const names[] = {"fwd=", "dq=", "dkv="};
    const char *at = env ? strstr(env, names[pass]) : NULL;
    while (at && at != env && at[-1] != ',') at = strstr(at + 1, names[pass]);
    c[3] = 1;
    int n = at ? sscanf(at + strlen(names[pass]), "%dx%dx%dx%d", &c[0], &c[1], &c[2], &c[3]) : 0;
    c[4] = -1;
    const char *blocks = at ? at + strcspn(at, "@,") : NULL;
    if (blocks && *blocks == '@' && (sscanf(blocks + 1, "%d", &c[4]) != 1 || c[4] < 0 || c[4] > 32))
        return false;
    return n >= 3 && (c[0] == 1 || c[0] == 2 || c[0] == 4 || c[0] == 8) &&
           (c[1] == 16 || c[1] == 32 || c[1] == 64 || c[1] == 128) && (c[2] == 1 || c[2] == 2) &&
           (c[3] == 1 || (c[3] == 2 && pass == SN_ATT_FWD));
}

/* The first candidate whose shared memory fits: the target's default 48 KiB as static shared
 * memory, or up to what a block may opt into (sm_80 and later) as dynamic shared memory when
 * SN_ATT_TILES asks for such a tile. fp32: (warps, rows per warp, tile). mma: (warps, 16 rows a
 * warp, tile, stages): 4 warps before 2, double-buffered tiles of 64 or 32 (sm_80 and later:
 * cp.async) before single-buffered ones, tiles of 16 last. At D = 64 on sm_80 and later the
 * forward takes 64 queries over key tiles of 64, two stages (45 KiB, static); dq and dk/dv the
 * measured tiles of 64 (below: dynamic shared memory). */
/* Sets p to a tensor-core configuration; true when its shared memory fits `limit`. */
static bool try_mma(sn_att_plan *p, const sn_target *tg, int warps, int rows, int tile, int stages,
                    int64_t limit) {
    p->warps = warps;
    p->rows = rows;
    p->tile = tile;
    p->stages = stages;
    p->shared_bytes = sn_att_mma_shared(p);
    p->dynamic = p->shared_bytes > tg->shared_default;
    p->min_blocks = min_blocks(p, tg);
    return p->shared_bytes <= limit;
}

static bool fit(sn_att_plan *p, const sn_target *tg) {
    static const int fp32[][3] = {{4, 4, 32}, {4, 2, 32}, {4, 1, 32}, {2, 1, 32}, {1, 1, 32}};
    static const int mma[][4] = {{4, 16, 64, 2}, {4, 16, 32, 2}, {4, 16, 64, 1}, {4, 16, 32, 1},
                                 {4, 16, 16, 2}, {4, 16, 16, 1}, {2, 16, 64, 2}, {2, 16, 32, 2},
                                 {2, 16, 64, 1}, {2, 16, 32, 1}, {2, 16, 16, 2}, {2, 16, 16, 1},
                                 {1, 16, 16, 1}};
    int64_t opt_in = tg->sm >= 80 ? tg->shared_max : tg->shared_default;
    int o[5];
    if (p->mma && tiles_override(p->pass, o) && (o[2] == 1 || tg->sm >= 80) &&
        (p->pass != SN_ATT_DKV || o[1] <= 32 * o[0]) &&
        try_mma(p, tg, o[0], 16 * o[3], o[1], o[2], opt_in)) {
        if (o[4] >= 0) p->min_blocks = o[4];
        return true;
    }
    /* Measured on an H200 (docs/gpu.md, 2026-11-27 15:31, bf16 B=16 H=12 T=1024 D=64): dq over
     * key tiles of 64 and dk/dv over query tiles of 64, 4 warps, double-buffered in dynamic
     * shared memory (55 and 73 KiB), took 0.186 and 0.290 ms a layer against 0.206 and 0.362
     * for the static tiles of 32 below; the forward's static 64-key tiles were as fast as any.
     * Head sizes up to 64 on sm_80 and later take them where two blocks fit an SM; larger heads
     * keep the static list (not measured there), and so do the parts with 100 KiB of shared
     * memory an SM (sm_86, sm_89, sm_120: the RTX 30, 40 and 50 series), where those tiles fit
     * one block of 4 warps (8% occupancy at sm_89: a warp a scheduler, nothing to hide a load
     * behind) and the static tiles of 32 fit two. Not measured on such a GPU. */
    if (p->mma && tg->sm >= 80 && p->pass != SN_ATT_FWD && p->D <= 64 && p->Dv <= 64 &&
        try_mma(p, tg, 4, 16, 64, 2, opt_in) && blocks_by_shared(p, tg) >= 2)
        return true;
    int n = p->mma ? (int)(sizeof mma / sizeof mma[0]) : (int)(sizeof fp32 / sizeof fp32[0]);
    for (int i = 0; i < n; i++) {
        if (p->mma) {
            const int *c = mma[i];
            if (c[3] == 2 && tg->sm < 80) continue; /* cp.async is sm_80's */
            if (try_mma(p, tg, c[0], c[1], c[2], c[3], tg->shared_default)) return true;
            continue;
        }
        p->warps = fp32[i][0];
        p->rows = fp32[i][1];
        p->tile = fp32[i][2];
        p->stages = 1;
        p->dynamic = false;
        p->min_blocks = 0;
        p->shared_bytes = fp32_shared(p);
        if (p->shared_bytes <= tg->shared_default) return true;
    }
    return false;
}

sn_status sn_att_plan_make(const sn_kernel *k, const sn_target *tg, sn_att_plan *p, sn_err *e) {
    memset(p, 0, sizeof *p);
    sn_status st = sn_kernel_check_attention(k, e); /* the contract (program/kernel_check.c) */
    if (st) return st;
    const sn_node *n = k->anchor;
    p->k = k;
    p->n = n;
    p->a_q = p->a_k = p->a_v = p->a_o = p->a_do = p->a_lse = -1;
    p->a_out_o = p->a_out_lse = p->a_dq = p->a_dk = p->a_dv = -1;
    const sn_node *a2 = k->anchor2;
    switch (n->op) {
    case SN_OP_ATTENTION_LSE:
        p->pass = SN_ATT_FWD;
        p->out_lse = true;
        p->a_out_lse = 0;
        break;
    case SN_OP_ATTENTION:
        p->pass = SN_ATT_FWD;
        p->out_o = true;
        p->a_out_o = 0;
        if (a2) { /* the attention_lse it reads (checked) */
            p->out_lse = true;
            p->a_out_lse = 1;
        } else {
            p->in_lse = true;
        }
        break;
    case SN_OP_ATTENTION_BWD_Q:
        p->pass = SN_ATT_DQ;
        p->a_dq = 0;
        break;
    case SN_OP_ATTENTION_BWD_K:
    case SN_OP_ATTENTION_BWD_V:
        p->pass = SN_ATT_DKV;
        p->out_dk = n->op == SN_OP_ATTENTION_BWD_K;
        p->out_dv = !p->out_dk;
        *(p->out_dk ? &p->a_dk : &p->a_dv) = 0;
        if (a2) { /* dk and dv in one pass: the same six inputs (checked) */
            p->out_dv = true;
            p->a_dv = 1;
        }
        break;
    default: SN_ASSERT(0);
    }
    int *role[] = {&p->a_q, &p->a_k, &p->a_v, p->in_lse ? &p->a_lse : &p->a_o, &p->a_do,
                   &p->a_lse};
    int *index[] = {&p->i_q, &p->i_k, &p->i_v, p->in_lse ? &p->i_lse : &p->i_o, &p->i_do,
                    &p->i_lse};
    p->i_q = p->i_k = p->i_v = p->i_o = p->i_do = p->i_lse = -1;
    for (int i = 0; i < n->n_in; i++) { /* each read from an input arg (checked) */
        if (n->in[i] == a2) continue;
        *role[i] = k->access[i].arg;
        *index[i] = i;
    }
    const sn_node *q = n->in[0], *kk = n->in[1];
    int r = q->rank;
    p->batch = sn_shape_numel(r - 2, q->shape);
    p->T = q->shape[r - 2];
    p->S = kk->shape[r - 2];
    p->D = q->shape[r - 1];
    p->Dv = n->n_in > 2 ? n->in[2]->shape[r - 1] : p->D;
    p->scale = n->a.f;
    p->dt = q->dtype;
    p->G = sn_attention_group(n);
    p->items = p->pass == SN_ATT_DKV ? sn_shape_numel(r - 2, kk->shape) : p->batch;
    for (int i = 0; i < k->n_out + k->n_in; i++) {
        const sn_node *x = k->args[i];
        bool lse = i == p->a_lse || i == p->a_out_lse; /* f32 where the others are 16-bit */
        if (!sn_att_ctype(x->dtype) || (!lse && x->dtype != p->dt))
            return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: %%%d is %s; attention "
                           "kernels take f32, bf16 or f16 with q, k, v, o, dout alike", k->name,
                           x->id, sn_dtype_name(x->dtype));
    }
    if (p->D > 128 || p->Dv > 128)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: head sizes D = %lld, Dv = %lld; "
                       "the CUDA attention kernels take head sizes up to 128", k->name,
                       (long long)p->D, (long long)p->Dv);
    if (p->batch > 65535)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: %lld (batch x head) slices "
                       "exceed the 65535 of grid.y", k->name, (long long)p->batch);
    p->mma = sn_kernel_att_tensor_cores(k, tg); /* program/kernel_check.c */
    p->k8 = p->mma && p->dt == SN_F16 && tg->sm < 80;
    p->parts = p->pass == SN_ATT_DKV && k->dkv_parts && k->stage == SN_SUM_PARTIAL;
    p->parts_sum = p->pass == SN_ATT_DKV && k->dkv_parts && k->stage == SN_SUM_FINISH;
    if (p->parts) p->items = p->batch; /* a query head an item */
    p->dq_atomic = p->pass == SN_ATT_DKV && k->stage == SN_SUM_PARTIAL && !k->dkv_parts;
    p->dq_stage = p->pass == SN_ATT_DQ ? k->stage : SN_SUM_WHOLE;
    if ((p->parts || p->parts_sum) && !p->mma)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: dk and dv in parts (SN_ATT_PARTS) "
                       "are written for the tensor-core kernels (bf16 or f16, head sizes and "
                       "strides multiples of 16 and 8); set SN_ATT_PARTS=0 for this graph", k->name);
    if (p->parts_sum) return SN_OK; /* a pass over the scratch, no tiles */
    if (p->dq_atomic && !p->mma)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: the atomic dq (SN_ATT_TILES "
                       "\"dq=atomic\") is written for the tensor-core kernels (bf16 or f16, head "
                       "sizes and strides multiples of 16 and 8); leave it out for this graph",
                       k->name);
    bool products = p->dq_stage == SN_SUM_WHOLE; /* not the atomic dq's zero or store */
    if (products && (sn_att_wgmma_asked(p->pass) || sn_att_wgmma_default(p, tg)))
        return sn_att_wgmma_plan(p, tg, e);
    if (!fit(p, tg))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: no tile of D = %lld, Dv = %lld "
                       "fits %lld bytes of shared memory", k->name, (long long)p->D,
                       (long long)p->Dv, (long long)tg->shared_default);
    return SN_OK;
}

/* ---- the head every attention kernel starts with ---- */

static const char *pass_text(const sn_att_plan *p) {
    switch (p->pass) {
    case SN_ATT_FWD:
        return p->in_lse ? "forward: o from a given lse" : p->out_o ? "forward: o and lse"
                                                                    : "forward: lse only";
    case SN_ATT_DQ: return "backward: dq";
    case SN_ATT_DKV:
        return p->out_dk && p->out_dv ? "backward: dk and dv" : p->out_dk ? "backward: dk"
                                                                          : "backward: dv";
    }
    return "";
}

/* The item's slice through access x (of a q-side or, kv_side, a k-side tensor): its arg plus
 * the offset and the item's coordinates over the leading dims times their strides. The item
 * counts q's slices, or k's for DKV (not in parts); the head coordinate (the last leading dim)
 * of the other side's tensors is divided by G (k, v read by a query head) or multiplied by it
 * (DKV: the group's first query head). */
static void item_slice(const sn_att_plan *p, const sn_access *x, bool kv_side, char *expr,
                       size_t len) {
    bool by_q = p->pass != SN_ATT_DKV || p->parts; /* items are q's slices */
    const sn_node *q = p->n->in[0], *by = by_q ? q : p->n->in[1];
    bool div = p->G > 1 && kv_side && by_q;
    bool mul = p->G > 1 && !kv_side && !by_q;
    size_t n = (size_t)snprintf(expr, len, "a%d + %lld", x->arg, (long long)x->offset);
    int64_t inner = 1;
    for (int d = q->rank - 3; d >= 0; d--) { /* item = sum_d idx_d * (product of the dims after d) */
        char group[32] = "";
        if (d == q->rank - 3 && (div || mul))
            snprintf(group, sizeof group, " %s %lld", div ? "/" : "*", (long long)p->G);
        if (x->stride[d] && by->shape[d] > 1 && n < len)
            n += (size_t)snprintf(expr + n, len - n, " + (long long)(item / %lld %% %lld%s) * %lld",
                                  (long long)inner, (long long)by->shape[d], group,
                                  (long long)x->stride[d]);
        inner *= by->shape[d];
    }
}

void sn_att_out_role(sn_cu_text *t, const sn_att_plan *p, const char *name, int a, const char *per,
                     const char *row) {
    if (a < 0) return;
    const sn_kernel *k = p->k;
    const char *ty = sn_att_ctype(k->args[a]->dtype);
    if (row && p->n->n_in + a < k->n_access) {
        const sn_access *x = &k->access[p->n->n_in + a];
        char expr[256];
        item_slice(p, x, p->pass == SN_ATT_DKV, expr, sizeof expr);
        sn_cu_emitf(t, "%s *%s = %s;", ty, name, expr);
        sn_cu_emitf(t, "const long long %s_row = %lld; /* into a wider buffer */", name,
                    (long long)x->stride[p->n->in[0]->rank - 2]);
        return;
    }
    sn_cu_emitf(t, "%s *%s = a%d + (long long)item * %s;", ty, name, a, per);
    if (row) sn_cu_emitf(t, "const long long %s_row = %s;", name, row);
}

/* dk's or dv's f32 parts in the scratch (kernel.h): q's slices x SEQ_K x cols, after `before`
 * columns of the other's (dk's D where both are written). */
static void parts_role(sn_cu_text *t, const sn_att_plan *p, const char *name, int a,
                       int64_t before, const char *cols) {
    if (a < 0) return;
    sn_cu_emitf(t, "float *%s = a%d + %lldll + (long long)item * SEQ_K * %s; /* its part */", name,
                p->k->n_out + p->k->n_in, (long long)(p->batch * p->S * before), cols);
    sn_cu_emitf(t, "const long long %s_row = %s;", name, cols);
}

/* DKV's loop over G query heads: q, o, dout and lse then point at the group's first as
 * <name>_group, <name>_head elements apart; sn_att_open_query_tiles points <name> at head g. */
bool sn_att_group_loop(const sn_att_plan *p) {
    return p->pass == SN_ATT_DKV && p->G > 1 && !p->parts;
}

void sn_att_in_role(sn_cu_text *t, const sn_att_plan *p, const char *name, int i) {
    if (i < 0) return;
    const sn_access *x = &p->k->access[i];
    const sn_node *in = p->n->in[i];
    bool kv_side = i == 1 || i == 2;
    char expr[256];
    item_slice(p, x, kv_side, expr, sizeof expr);
    if (sn_att_group_loop(p) && !kv_side) {
        sn_cu_emitf(t, "const %s *%s_group = %s; /* the group's first query head */",
                    sn_att_ctype(p->k->args[x->arg]->dtype), name, expr);
        sn_cu_emitf(t, "const long long %s_head = %lld; /* elements from one head to the next */",
                    name, (long long)x->stride[p->n->in[0]->rank - 3]);
    } else {
        sn_cu_emitf(t, "const %s *%s = %s;", sn_att_ctype(p->k->args[x->arg]->dtype), name, expr);
    }
    if (in->rank >= 2 && i != p->i_lse)
        sn_cu_emitf(t, "const long long %s_row = %lld; /* elements from one row to the next */",
                    name, (long long)x->stride[in->rank - 2]);
}

/* What args[i] is to the kernel: "q", "k, v" (one node in two roles), "o_out" ... */
static void arg_roles(const sn_att_plan *p, int i, char *buf, size_t len) {
    static const char *names[] = {"q", "k", "v", "o", "dout", "lse", "o_out", "lse_out", "dq",
                                  "dk", "dv"};
    const int at[] = {p->a_q, p->a_k, p->a_v, p->a_o, p->a_do, p->a_lse, p->a_out_o,
                      p->a_out_lse, p->a_dq, p->a_dk, p->a_dv};
    size_t n = 0;
    buf[0] = 0;
    for (int r = 0; r < (int)(sizeof at / sizeof at[0]); r++)
        if (at[r] == i && n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", names[r]);
}

void sn_att_emit_head(sn_cu_text *t, const sn_att_plan *p, const char *path, const char *fname) {
    const sn_kernel *k = p->k;
    int threads = p->warps * 32;
    sn_cu_emitf(t, "/* causal attention, %s (%s, scale %g):", pass_text(p), sn_op_name(p->n->op),
                (double)p->scale);
    sn_cu_emitf(t, " * q (%lld, T %lld, D %lld), k (.., S %lld, D), v (.., S, Dv %lld), %s;",
                (long long)p->batch, (long long)p->T, (long long)p->D, (long long)p->S,
                (long long)p->Dv, sn_dtype_name(p->dt));
    if (p->G > 1)
        sn_cu_emitf(t, " * grouped-query: %lld query heads per k/v head; q's slice b reads k's "
                    "and v's slice b / %lld;", (long long)p->G, (long long)p->G);
    sn_cu_emitf(t, " * %s: %d warps, %d %s per block, tiles of %d %s; %lld bytes of shared "
                "memory */", path, p->warps, p->warps * p->rows,
                p->pass == SN_ATT_DKV ? "keys" : "queries", p->tile,
                p->pass == SN_ATT_DKV ? "queries" : "keys", (long long)p->shared_bytes);
    if (p->min_blocks) /* a register cap: 64K registers / (min_blocks x threads) */
        sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d, %d) %s(", threads,
                    p->min_blocks, fname);
    else
        sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", threads, fname);
    int nargs = k->n_out + k->n_in, all = nargs + (k->stage != SN_SUM_WHOLE);
    for (int i = 0; i < nargs; i++) {
        char roles[64];
        arg_roles(p, i, roles, sizeof roles);
        sn_cu_emitf(t, "    %s%s *__restrict__ a%d%s /* %s */", i < k->n_out ? "" : "const ",
                    sn_att_ctype(k->args[i]->dtype), i, i + 1 < all ? "," : ") {", roles);
    }
    if (all > nargs && p->parts) /* dk's and dv's parts (kernel.h) */
        sn_cu_emitf(t, "    float *__restrict__ a%d) { /* dk's, then dv's f32 parts (q's slices, "
                    "SEQ_K, HEAD_D or HEAD_DV) */", nargs);
    else if (all > nargs) /* the atomic dq's scratch (kernel.h) */
        sn_cu_emitf(t, "    float *__restrict__ a%d) { /* dq's f32 sums (q's slices, SEQ_Q, "
                    "HEAD_D), added to atomically; then the dots dout_i . o_i (q's slices, "
                    "SEQ_Q) */", nargs);
    t->depth++; /* the signature's last line opened the body */
    sn_cu_emitf(t, "enum { SEQ_Q = %lld, SEQ_K = %lld, HEAD_D = %lld, HEAD_DV = %lld, "
                "WARPS = %d, THREADS = %d };", (long long)p->T, (long long)p->S, (long long)p->D,
                (long long)p->Dv, p->warps, threads);
    sn_cu_emitf(t, "const float scale = %.9gf;", (double)p->scale);
    sn_cu_emitf(t, "const int item = blockIdx.y; /* the (batch x head) slice%s */",
                sn_att_group_loop(p) ? " of k and v" : p->parts ? " of q: its dk and dv parts" : "");
    sn_cu_emitf(t, "const int warp = threadIdx.x / 32, lane = threadIdx.x %% 32;");
    sn_att_in_role(t, p, "q", p->i_q);
    sn_att_in_role(t, p, "k", p->i_k);
    sn_att_in_role(t, p, "v", p->i_v);
    sn_att_in_role(t, p, "o", p->dq_atomic ? -1 : p->i_o); /* the atomic dq's dots are given */
    sn_att_in_role(t, p, "dout", p->i_do);
    sn_att_in_role(t, p, "lse", p->i_lse);
    sn_att_out_role(t, p, "o_out", p->a_out_o, "SEQ_Q * HEAD_DV", "HEAD_DV");
    sn_att_out_role(t, p, "lse_out", p->a_out_lse, "SEQ_Q", NULL);
    sn_att_out_role(t, p, "dq", p->a_dq, "SEQ_Q * HEAD_D", "HEAD_D");
    if (p->parts) {
        parts_role(t, p, "dk", p->a_dk, 0, "HEAD_D");
        parts_role(t, p, "dv", p->a_dv, p->out_dk ? p->D : 0, "HEAD_DV");
        return;
    }
    sn_att_out_role(t, p, "dk", p->a_dk, "SEQ_K * HEAD_D", "HEAD_D");
    sn_att_out_role(t, p, "dv", p->a_dv, "SEQ_K * HEAD_DV", "HEAD_DV");
}

/* ---- what both paths write alike ---- */

void sn_cu_emit_att_warp_helpers(sn_cu_text *t) {
    sn_cu_emitf(t, "#ifndef SN_ATT_WARP_HELPERS");
    sn_cu_emitf(t, "#define SN_ATT_WARP_HELPERS");
    sn_cu_emitf(t, "SN_DEVICE float sn_att_warp_max(float x) {");
    sn_cu_emitf(t, "for (int d = 16; d > 0; d /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, d));");
    sn_cu_emitf(t, "return x;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "SN_DEVICE float sn_att_warp_sum(float x) {");
    sn_cu_emitf(t, "for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);");
    sn_cu_emitf(t, "return x;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#endif");
    sn_cu_emitf(t, "%s", "");
}

/* FWD and DQ, after the query block's q0 and BQ: the key tiles its queries see, causal (the
 * tiles past its last query's last key are never loaded); opens the loop's body. */
void sn_att_open_key_tiles(sn_cu_text *t) {
    sn_cu_emitf(t, "/* causal: the block's last query sees keys up to q_last + SEQ_K - SEQ_Q */");
    sn_cu_emitf(t, "const int q_last = min(q0 + BQ, (int)SEQ_Q) - 1;");
    sn_cu_emitf(t, "const int key_end = min((int)SEQ_K, q_last + SEQ_K - SEQ_Q + 1);");
    sn_cu_emitf(t, "for (int k0 = 0; k0 < key_end; k0 += BK) {");
    sn_cu_emitf(t, "__syncthreads(); /* the previous tiles are used up; the query tiles are in */");
}

/* DKV, after the key block's k0 and BK: the query tiles that see its keys (of each query head
 * of the group, in order); opens the body. */
void sn_att_open_query_tiles(sn_cu_text *t, const sn_att_plan *p) {
    if (sn_att_group_loop(p)) {
        const char *names[] = {"q", "o", "dout", "lse"};
        const int at[] = {p->i_q, p->i_o, p->i_do, p->i_lse};
        sn_cu_emitf(t, "/* grouped-query attention: the group's query heads, in order */");
        sn_cu_emitf(t, "for (int g = 0; g < %lld; g++) {", (long long)p->G);
        for (int r = 0; r < 4; r++)
            if (at[r] >= 0)
                sn_cu_emitf(t, "const %s *%s = %s_group + g * %s_head;",
                            sn_att_ctype(p->k->args[p->k->access[at[r]].arg]->dtype), names[r],
                            names[r], names[r]);
    }
    sn_cu_emitf(t, "/* causal: query i sees key j when i >= j - (SEQ_K - SEQ_Q) */");
    sn_cu_emitf(t, "const int q_begin = max(0, k0 - (SEQ_K - SEQ_Q)) / BQ * BQ;");
    sn_cu_emitf(t, "for (int qs = q_begin; qs < SEQ_Q; qs += BQ) {");
    sn_cu_emitf(t, "__syncthreads(); /* the previous query tile is used up */");
}

void sn_att_close_query_tiles(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "}");
    if (sn_att_group_loop(p)) sn_cu_emitf(t, "}");
}

void sn_att_emit_seen(sn_cu_text *t, bool query_checked) {
    sn_cu_emitf(t, "const bool seen = %sj < SEQ_K && j <= i + SEQ_K - SEQ_Q;",
                query_checked ? "i < SEQ_Q && " : "");
}

void sn_att_emit_row_dot(sn_cu_text *t, const char *dst) {
    sn_cu_emitf(t, "float part = 0.0f;");
    sn_cu_emitf(t, "for (int c = lane; c < HEAD_DV && i < SEQ_Q; c += 32)");
    sn_cu_emitf(t, "    part += sn_load(dout[i * dout_row + c]) * sn_load(o[i * o_row + c]);");
    sn_cu_emitf(t, "%s = sn_att_warp_sum(part);", dst);
}

void sn_att_emit_query_stats(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "for (int r = warp; r < BQ; r += WARPS) {");
    sn_cu_emitf(t, "const int i = qs + r;");
    if (p->out_dk) sn_att_emit_row_dot(t, "const float dot");
    sn_cu_emitf(t, "if (lane == 0) {");
    sn_cu_emitf(t, "lse_tile[r] = i < SEQ_Q ? sn_load(lse[i]) : 0.0f;");
    if (p->out_dk) sn_cu_emitf(t, "dot_tile[r] = dot;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads();");
}

void sn_att_emit_row_max_init(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *i) {
    if (p->in_lse)
        sn_cu_emitf(t, "row_max[%s] = %s < SEQ_Q ? sn_load(lse[%s]) : 0.0f; /* given: p = exp(s - lse) */",
                    x, i, i);
    else
        sn_cu_emitf(t, "row_max[%s] = -SN_INF;", x);
}

void sn_att_emit_online(sn_cu_text *t, const char *x, const char *tile_max, const char *m_ref_def,
                        const char *m_ref) {
    sn_cu_emitf(t, "const float m_new = fmaxf(row_max[%s], %s);", x, tile_max);
    sn_cu_emitf(t, "%s = m_new == -SN_INF ? 0.0f : m_new; /* no key seen yet */", m_ref_def);
    sn_cu_emitf(t, "const float alpha = expf(row_max[%s] - %s);", x, m_ref);
    sn_cu_emitf(t, "row_max[%s] = m_new;", x);
}

void sn_att_emit_dq_ds(sn_cu_text *t, const char *ds, const char *s, const char *x, const char *dp) {
    sn_cu_emitf(t, "%s = seen ? expf(%s * scale - row_lse[%s]) * (%s - row_dot[%s]) : 0.0f;", ds, s,
                x, dp, x);
}

void sn_att_emit_dkv_p(sn_cu_text *t, const sn_att_plan *p, const char *pr, const char *s,
                       const char *q, const char *ds, const char *dp) {
    sn_cu_emitf(t, "%s = seen ? expf(%s * scale - lse_tile[%s]) : 0.0f;", pr, s, q);
    if (p->out_dk) sn_cu_emitf(t, "%s = %s * (%s - dot_tile[%s]);", ds, pr, dp, q);
}

void sn_att_emit_fwd_inv(sn_cu_text *t, const sn_att_plan *p, const char *x) {
    if (p->in_lse) sn_cu_emitf(t, "const float inv = 1.0f;");
    else sn_cu_emitf(t, "const float inv = row_sum[%s] > 0.0f ? 1.0f / row_sum[%s] : 0.0f;", x, x);
}

void sn_att_emit_lse_out(sn_cu_text *t, const sn_att_plan *p, const char *x, const char *who) {
    if (p->out_lse)
        sn_cu_emitf(t, "if (%s) sn_store(&lse_out[i], row_sum[%s] > 0.0f ? row_max[%s] + "
                    "logf(row_sum[%s]) : -SN_INF);", who, x, x, x);
}

/* ---- the entries (cuda_int.h) ---- */

sn_status sn_cu_check_attention(const sn_kernel *k, const sn_target *t, sn_err *e) {
    if (k->anchor && k->anchor->op == SN_OP_ATTENTION_CACHE) return sn_cu_check_attention_cache(k, e);
    sn_att_plan p;
    return sn_att_plan_make(k, t, &p, e);
}

sn_cuda_dims sn_cu_attention_dims(const sn_kernel *k, const sn_target *t) {
    if (k->anchor->op == SN_OP_ATTENTION_CACHE) return sn_cu_attention_cache_dims(k);
    sn_att_plan p;
    sn_err e;
    if (sn_att_plan_make(k, t, &p, &e)) return (sn_cuda_dims){0}; /* the renderer says why */
    if (p.dq_stage != SN_SUM_WHOLE || p.parts_sum) return sn_att_scratch_dims(&p);
    int64_t per = (int64_t)p.warps * p.rows, n = p.pass == SN_ATT_DKV ? p.S : p.T;
    return (sn_cuda_dims){.grid = {(unsigned)((n + per - 1) / per), (unsigned)p.items, 1},
                          .block = {(unsigned)p.warps * 32, 1, 1},
                          .shared_bytes = p.dynamic ? (unsigned)p.shared_bytes : 0};
}

void sn_cu_emit_attention(sn_cu_text *t, const sn_kernel *k, const sn_target *tg,
                          const char *fname) {
    if (k->anchor->op == SN_OP_ATTENTION_CACHE) {
        sn_cu_emit_attention_cache(t, k, fname);
        return;
    }
    sn_att_plan p;
    sn_err e;
    sn_status st = sn_att_plan_make(k, tg, &p, &e);
    SN_ASSERT(st == SN_OK); /* the renderer checked the kernel first */
    if (p.dq_stage != SN_SUM_WHOLE || p.parts_sum) sn_att_emit_scratch_pass(t, &p, fname);
    else if (p.mma) sn_att_emit_mma(t, &p, fname);
    else sn_att_emit_simt(t, &p, fname);
}
