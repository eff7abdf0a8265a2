/* cuda_attention_simt.c: flash attention as fp32 FMA tiles (any dtype, any head size up to 128;
 * the path where tensor cores do not apply): a lane owns one key (or query) of a 32-wide tile for
 * the scores and a 32-wide slice of the head for the products. Convention: values are f32 in
 * shared memory and registers whatever the buffers hold (sn_load widens, sn_store rounds); a
 * warp owns ROWS rows (queries in FWD and DQ, keys in DKV), the block WARPS * ROWS of them. */
#include <stdio.h>

#include "cuda_attention.h"

/* rows [row0, row0 + count) of src (cols wide, `limit` rows in all) into tile (rows past limit:
 * 0), by every thread of the block. */
static void load_tile(sn_cu_text *t, const char *tile, const char *src, const char *row0,
                      const char *count, const char *cols, const char *limit) {
    sn_cu_emitf(t, "for (int e = threadIdx.x; e < %s * %s; e += THREADS) {", count, cols);
    sn_cu_emitf(t, "const int r = e / %s, c = e %% %s;", cols, cols);
    sn_cu_emitf(t, "%s[r][c] = %s + r < %s ? sn_load(%s[(%s + r) * %s_row + c]) : 0.0f;",
                tile, row0, limit, src, row0, src);
    sn_cu_emitf(t, "}");
}

/* Loops over the 32-wide slices of a head of `n` (a constant's name) that this lane owns. */
static void for_slice(sn_cu_text *t, const char *n, const char *cc) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int %s = 0; %s < (%s + 31) / 32; %s++) {", cc, cc, n, cc);
}

/* FWD: a warp owns ROWS queries; lane j scores key k0 + j against them, then every lane
 * accumulates its slices of o from the tile's 32 probabilities (shuffled out one by one). */
static void emit_fwd(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "enum { ROWS = %d, BQ = WARPS * ROWS, BK = 32, DVC = (HEAD_DV + 31) / 32 };",
                p->rows);
    sn_cu_emitf(t, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* the longest rows first */");
    sn_cu_emitf(t, "SN_SHARED2(float, q_tile, BQ, HEAD_D);");
    sn_cu_emitf(t, "SN_SHARED2(float, k_tile, BK, HEAD_D + 1); /* + 1: lane j reads row j "
                "without bank conflicts */");
    if (p->out_o) sn_cu_emitf(t, "SN_SHARED2(float, v_tile, BK, HEAD_DV);");
    load_tile(t, "q_tile", "q", "q0", "BQ", "HEAD_D", "SEQ_Q");
    sn_cu_emitf(t, "float row_max[ROWS], row_sum[ROWS]%s;", p->out_o ? ", acc[ROWS][DVC]" : "");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    if (p->in_lse) sn_cu_emitf(t, "const int i = q0 + warp * ROWS + r;");
    sn_att_emit_row_max_init(t, p, "r", "i");
    sn_cu_emitf(t, "row_sum[r] = 0.0f;");
    if (p->out_o) {
        for_slice(t, "HEAD_DV", "cc");
        sn_cu_emitf(t, "acc[r][cc] = 0.0f;");
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "}");
    sn_att_open_key_tiles(t);
    load_tile(t, "k_tile", "k", "k0", "BK", "HEAD_D", "SEQ_K");
    if (p->out_o) load_tile(t, "v_tile", "v", "k0", "BK", "HEAD_DV", "SEQ_K");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "float s[ROWS];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) s[r] = 0.0f;");
    sn_cu_emitf(t, "#pragma unroll 4 /* ptxas spilled at D = 64 (sm_80, sm_90) with these loops unrolled by its own choice */");
    sn_cu_emitf(t, "for (int c = 0; c < HEAD_D; c++) {");
    sn_cu_emitf(t, "const float kc = k_tile[lane][c];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) s[r] += q_tile[warp * ROWS + r][c] * kc;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "float pr[ROWS]; /* this lane's key's probability for each row */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int i = q0 + warp * ROWS + r, j = k0 + lane;");
    sn_att_emit_seen(t, false);
    if (p->in_lse) {
        sn_cu_emitf(t, "pr[r] = seen ? expf(s[r] * scale - row_max[r]) : 0.0f;");
    } else {
        sn_cu_emitf(t, "const float sc = seen ? s[r] * scale : -SN_INF;");
        sn_att_emit_online(t, "r", "sn_att_warp_max(sc)", "const float m_ref", "m_ref");
        sn_cu_emitf(t, "pr[r] = expf(sc - m_ref);");
        sn_cu_emitf(t, "row_sum[r] = row_sum[r] * alpha + sn_att_warp_sum(pr[r]);");
        if (p->out_o) {
            for_slice(t, "HEAD_DV", "cc");
            sn_cu_emitf(t, "acc[r][cc] *= alpha;");
            sn_cu_emitf(t, "}");
        }
    }
    sn_cu_emitf(t, "}");
    if (p->out_o) {
        if (p->Dv <= 32) /* by 4, ptxas (sm_90) left an 8-byte stack frame and spilled to it */
            sn_cu_emitf(t, "#pragma unroll /* whole at Dv <= 32: by 4, ptxas spilled at Dv = 32 (sm_90) */");
        else
            sn_cu_emitf(t, "#pragma unroll 4");
    sn_cu_emitf(t, "for (int jj = 0; jj < BK; jj++) {");
        sn_cu_emitf(t, "float vj[DVC];");
        for_slice(t, "HEAD_DV", "cc");
        sn_cu_emitf(t, "vj[cc] = cc * 32 + lane < HEAD_DV ? v_tile[jj][cc * 32 + lane] : 0.0f;");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
        sn_cu_emitf(t, "const float pj = __shfl_sync(0xffffffffu, pr[r], jj);");
        for_slice(t, "HEAD_DV", "cc");
        sn_cu_emitf(t, "acc[r][cc] += pj * vj[cc];");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int i = q0 + warp * ROWS + r;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    if (p->out_o) {
        sn_att_emit_fwd_inv(t, p, "r");
        for_slice(t, "HEAD_DV", "cc");
        sn_cu_emitf(t, "const int c = cc * 32 + lane;");
        sn_cu_emitf(t, "if (c < HEAD_DV) sn_store(&o_out[(long long)i * o_out_row + c], acc[r][cc] * inv);");
        sn_cu_emitf(t, "}");
    }
    sn_att_emit_lse_out(t, p, "r", "lane == 0");
    sn_cu_emitf(t, "}");
}

/* DQ: a warp owns ROWS queries; lane j scores key k0 + j (s and dp = dout_i . v_j), then every
 * lane accumulates its slices of dq from the tile's 32 ds values. */
static void emit_dq(sn_cu_text *t, const sn_att_plan *p) {
    sn_cu_emitf(t, "enum { ROWS = %d, BQ = WARPS * ROWS, BK = 32, DC = (HEAD_D + 31) / 32 };",
                p->rows);
    sn_cu_emitf(t, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* the longest rows first */");
    sn_cu_emitf(t, "SN_SHARED2(float, q_tile, BQ, HEAD_D);");
    sn_cu_emitf(t, "SN_SHARED2(float, do_tile, BQ, HEAD_DV);");
    sn_cu_emitf(t, "SN_SHARED2(float, k_tile, BK, HEAD_D + 1); /* + 1: lane j reads row j */");
    sn_cu_emitf(t, "SN_SHARED2(float, v_tile, BK, HEAD_DV + 1);");
    load_tile(t, "q_tile", "q", "q0", "BQ", "HEAD_D", "SEQ_Q");
    load_tile(t, "do_tile", "dout", "q0", "BQ", "HEAD_DV", "SEQ_Q");
    sn_cu_emitf(t, "float row_lse[ROWS], row_dot[ROWS], acc[ROWS][DC];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int i = q0 + warp * ROWS + r;");
    sn_cu_emitf(t, "row_lse[r] = i < SEQ_Q ? sn_load(lse[i]) : 0.0f;");
    sn_att_emit_row_dot(t, "row_dot[r]");
    for_slice(t, "HEAD_D", "cc");
    sn_cu_emitf(t, "acc[r][cc] = 0.0f;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_att_open_key_tiles(t);
    load_tile(t, "k_tile", "k", "k0", "BK", "HEAD_D", "SEQ_K");
    load_tile(t, "v_tile", "v", "k0", "BK", "HEAD_DV", "SEQ_K");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "float s[ROWS], dp[ROWS];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) s[r] = dp[r] = 0.0f;");
    sn_cu_emitf(t, "#pragma unroll 4 /* ptxas spilled at D = 64 (sm_80, sm_90) with these loops unrolled by its own choice */");
    sn_cu_emitf(t, "for (int c = 0; c < HEAD_D; c++) {");
    sn_cu_emitf(t, "const float kc = k_tile[lane][c];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) s[r] += q_tile[warp * ROWS + r][c] * kc;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll 4 /* ptxas spilled at D = 64 (sm_80, sm_90) with these loops unrolled by its own choice */");
    sn_cu_emitf(t, "for (int c = 0; c < HEAD_DV; c++) {");
    sn_cu_emitf(t, "const float vc = v_tile[lane][c];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) dp[r] += do_tile[warp * ROWS + r][c] * vc;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "float ds[ROWS]; /* P_ij (dp_ij - dout_i . o_i) of this lane's key */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int i = q0 + warp * ROWS + r, j = k0 + lane;");
    sn_att_emit_seen(t, true);
    sn_att_emit_dq_ds(t, "ds[r]", "s[r]", "r", "dp[r]");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll 4");
    sn_cu_emitf(t, "for (int jj = 0; jj < BK; jj++) {");
    sn_cu_emitf(t, "float kj[DC];");
    for_slice(t, "HEAD_D", "cc");
    sn_cu_emitf(t, "kj[cc] = cc * 32 + lane < HEAD_D ? k_tile[jj][cc * 32 + lane] : 0.0f;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const float dsj = __shfl_sync(0xffffffffu, ds[r], jj);");
    for_slice(t, "HEAD_D", "cc");
    sn_cu_emitf(t, "acc[r][cc] += dsj * kj[cc];");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int i = q0 + warp * ROWS + r;");
    sn_cu_emitf(t, "if (i >= SEQ_Q) continue;");
    for_slice(t, "HEAD_D", "cc");
    sn_cu_emitf(t, "const int c = cc * 32 + lane;");
    sn_cu_emitf(t, "if (c < HEAD_D) sn_store(&dq[(long long)i * dq_row + c], acc[r][cc] * scale);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

/* One output of DKV, dk or dv: acc[r] += sum over the tile's queries i of w_i x_i, x_i a row
 * of the query tile, stored times `scale`. dv: w = P, x = dout; dk: w = dS, x = q, times the
 * softmax scale. The two differ only in these names, so one writer emits both. */
typedef struct {
    const char *acc, *n, *chunks; /* accumulators [ROWS][chunks], the head size's constant */
    const char *x, *tile;         /* this lane's slices of x_i (registers), the tile it is from */
    const char *w, *wi;           /* the per-lane weights (w[r]: query lane, key r), w_i's name */
    const char *out, *scale;      /* the output pointer (and <out>_row), the store's factor */
} dkv_out;

static const dkv_out dkv_dk = {"acc_k", "HEAD_D", "DC", "qi", "q_tile", "ds", "dsi", "dk",
                               " * scale"};
static const dkv_out dkv_dv = {"acc_v", "HEAD_DV", "DVC", "doi", "do_tile", "pr", "pi", "dv", ""};

/* acc[r][cc] = 0, inside the loop over r. */
static void dkv_zero(sn_cu_text *t, const dkv_out *o) {
    for_slice(t, o->n, "cc");
    sn_cu_emitf(t, "%s[r][cc] = 0.0f;", o->acc);
    sn_cu_emitf(t, "}");
}

/* This lane's slices of query ii's row of the tile, inside the loop over ii. */
static void dkv_load_x(sn_cu_text *t, const dkv_out *o) {
    sn_cu_emitf(t, "float %s[%s];", o->x, o->chunks);
    for_slice(t, o->n, "cc");
    sn_cu_emitf(t, "%s[cc] = cc * 32 + lane < %s ? %s[ii][cc * 32 + lane] : 0.0f;", o->x, o->n,
                o->tile);
    sn_cu_emitf(t, "}");
}

/* acc[r] += w_ii x_ii, w_ii shuffled from query ii's lane, inside the loops over ii and r. */
static void dkv_accumulate(sn_cu_text *t, const dkv_out *o) {
    sn_cu_emitf(t, "const float %s = __shfl_sync(0xffffffffu, %s[r], ii);", o->wi, o->w);
    for_slice(t, o->n, "cc");
    sn_cu_emitf(t, "%s[r][cc] += %s * %s[cc];", o->acc, o->wi, o->x);
    sn_cu_emitf(t, "}");
}

/* Key j's row of the output, inside the loop over r. */
static void dkv_store(sn_cu_text *t, const dkv_out *o) {
    for_slice(t, o->n, "cc");
    sn_cu_emitf(t, "const int c = cc * 32 + lane;");
    sn_cu_emitf(t, "if (c < %s) sn_store(&%s[(long long)j * %s_row + c], %s[r][cc]%s);", o->n,
                o->out, o->out, o->acc, o->scale);
    sn_cu_emitf(t, "}");
}

/* DKV: a warp owns ROWS keys; lane i scores query qs + i of the tile against them (s, and
 * dp = dout_i . v_j for dk), then every lane accumulates its slices of dk and dv from the
 * tile's 32 queries. */
static void emit_dkv(sn_cu_text *t, const sn_att_plan *p) {
    bool dk = p->out_dk, dv = p->out_dv;
    sn_cu_emitf(t, "enum { ROWS = %d, BK = WARPS * ROWS, BQ = 32, DC = (HEAD_D + 31) / 32, "
                "DVC = (HEAD_DV + 31) / 32 };", p->rows);
    sn_cu_emitf(t, "const int k0 = blockIdx.x * BK; /* the first keys have the most queries */");
    sn_cu_emitf(t, "SN_SHARED2(float, k_tile, BK, HEAD_D); /* rows read whole by a warp */");
    if (dk) sn_cu_emitf(t, "SN_SHARED2(float, v_tile, BK, HEAD_DV);");
    sn_cu_emitf(t, "SN_SHARED2(float, q_tile, BQ, HEAD_D + 1); /* + 1: lane i reads row i */");
    sn_cu_emitf(t, "SN_SHARED2(float, do_tile, BQ, HEAD_DV + 1);");
    sn_cu_emitf(t, "SN_SHARED(float, lse_tile, BQ);");
    if (dk) sn_cu_emitf(t, "SN_SHARED(float, dot_tile, BQ); /* dout_i . o_i */");
    load_tile(t, "k_tile", "k", "k0", "BK", "HEAD_D", "SEQ_K");
    if (dk) load_tile(t, "v_tile", "v", "k0", "BK", "HEAD_DV", "SEQ_K");
    sn_cu_emitf(t, "float %s%s%s;", dk ? "acc_k[ROWS][DC]" : "", dk && dv ? ", " : "",
                dv ? "acc_v[ROWS][DVC]" : "");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    if (dk) dkv_zero(t, &dkv_dk);
    if (dv) dkv_zero(t, &dkv_dv);
    sn_cu_emitf(t, "}");
    sn_att_open_query_tiles(t, p);
    load_tile(t, "q_tile", "q", "qs", "BQ", "HEAD_D", "SEQ_Q");
    load_tile(t, "do_tile", "dout", "qs", "BQ", "HEAD_DV", "SEQ_Q");
    sn_att_emit_query_stats(t, p);
    sn_cu_emitf(t, "float s[ROWS]%s;", dk ? ", dp[ROWS]" : "");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) s[r] = %s0.0f;", dk ? "dp[r] = " : "");
    sn_cu_emitf(t, "#pragma unroll 4 /* ptxas spilled at D = 64 (sm_80, sm_90) with these loops unrolled by its own choice */");
    sn_cu_emitf(t, "for (int c = 0; c < HEAD_D; c++) {");
    sn_cu_emitf(t, "const float qc = q_tile[lane][c];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) s[r] += k_tile[warp * ROWS + r][c] * qc;");
    sn_cu_emitf(t, "}");
    if (dk) {
        sn_cu_emitf(t, "#pragma unroll 4 /* ptxas spilled at D = 64 (sm_80, sm_90) with these loops unrolled by its own choice */");
        sn_cu_emitf(t, "for (int c = 0; c < HEAD_DV; c++) {");
        sn_cu_emitf(t, "const float dc = do_tile[lane][c];");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) dp[r] += v_tile[warp * ROWS + r][c] * dc;");
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "float pr[ROWS]%s; /* P_ij of this lane's query i for each key j */",
                dk ? ", ds[ROWS]" : "");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int i = qs + lane, j = k0 + warp * ROWS + r;");
    sn_att_emit_seen(t, true);
    sn_att_emit_dkv_p(t, p, "pr[r]", "s[r]", "lane", "ds[r]", "dp[r]");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll 4");
    sn_cu_emitf(t, "for (int ii = 0; ii < BQ; ii++) {");
    if (dv) dkv_load_x(t, &dkv_dv);
    if (dk) dkv_load_x(t, &dkv_dk);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    if (dv) dkv_accumulate(t, &dkv_dv);
    if (dk) dkv_accumulate(t, &dkv_dk);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_att_close_query_tiles(t, p);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < ROWS; r++) {");
    sn_cu_emitf(t, "const int j = k0 + warp * ROWS + r;");
    sn_cu_emitf(t, "if (j >= SEQ_K) continue;");
    if (dk) dkv_store(t, &dkv_dk);
    if (dv) dkv_store(t, &dkv_dv);
    sn_cu_emitf(t, "}");
}

void sn_att_emit_simt(sn_cu_text *t, const sn_att_plan *p, const char *fname) {
    sn_cu_emit_att_warp_helpers(t);
    sn_att_emit_head(t, p, "fp32 FMA tiles", fname);
    switch (p->pass) {
    case SN_ATT_FWD: emit_fwd(t, p); break;
    case SN_ATT_DQ: emit_dq(t, p); break;
    case SN_ATT_DKV: emit_dkv(t, p); break;
    }
    sn_cu_emitf(t, "}");
}
