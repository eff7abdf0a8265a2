/* cuda_gemv_t.c: the few-row product as CUDA C with W stored (N, K) (kernel.h: SN_KER_GEMV, tb:
 * LLaMA's (out, in) projections): y[m][n] = sum over k of x[m][k] W[n][k], W read from its
 * source (NF4 bytes, or a 16-bit value widened) as the block goes, never stored.
 * Convention: a block of 8 warps per 64 outputs n (an item), warp w the 8 outputs 64 item +
 * 8 w + r (r < 8), all 8 at each step; lane l takes the k with (k - k_lo) mod 256 in [8 l, 8 l +
 * 8), so a warp reads 256 consecutive weights of each of its rows a step (128 bytes of codes, 4
 * NF4 blocks; W16: 512 bytes) and the block each of its rows' K weights once. x goes to shared
 * memory in tiles of KT columns (M KT floats, at most 16 KiB, and a word of padding after every
 * 32, so that the 32 lanes' reads, 8 words apart, fall in 32 banks; KT a multiple of 256),
 * widened to f32. The order of each y[m][n] (f32): a lane's k ascending, one fmaf a term; then the 32
 * lanes' sums added by __shfl_xor_sync over 16, 8, 4, 2, 1 lanes (every lane ends with the
 * same bits); fixed for every launch and thread order, not the CPU's (llvm_gemv_t.c: 16 sums).
 * Where 8 divides K a lane's 8 weights lie in one NF4 block, 4 bytes (one word where the codes
 * start at a multiple of 4 bytes; W16: 16 bytes, one load); elsewhere each weight finds its
 * nibble and scale alone (blocks straddle rows). Split (kernel.h: the decode split), block i
 * takes the item i % C over the k of part i / C alone (k_lo its first) and stores its sums into
 * the scratch; cuda_gemv.c's FINISH adds the parts in order. */
#include <stdio.h>

#include "cuda_int.h"
#include "ir/nf4.h"

enum { WARPS = 8, THREADS = 32 * WARPS, X_TILE_FLOATS = 4096, ROWS = SN_GEMV_COLS / WARPS };

/* The columns of x a shared tile holds: all K, or a multiple of 256 (a warp's step). */
static int64_t x_tile(int64_t M, int64_t K) {
    int64_t kt = X_TILE_FLOATS / M / 256 * 256;
    return K <= kt ? K : kt;
}

/* Row n's 8 weights at k0 + k (8 dividing K: one NF4 block, 4 bytes; W16 16 bytes) into
 * wv[8]. */
static void emit_weights(sn_cu_text *t, const sn_gemv *g, const sn_nf4_layout *l,
                         const char *rnd, const char *ix) {
    sn_cu_emitf(t, "const %s f = n * %lld + k0 + k; /* W's flat index of W[n][k0 + k] */", ix,
                (long long)g->K);
    if (g->source == SN_GEMV_W16) {
        sn_cu_emitf(t, "sn_load8(in1 + f, wv);");
        return;
    }
    sn_cu_emitf(t, "const %s b = f / %d; /* the block: all 8 weights */", ix, SN_NF4_BLOCK);
    sn_cu_emitf(t, "const float scale = fmaf((float)scale_code[b], step[b / %d], mean);",
                SN_NF4_SCALE_GROUP);
    if (l->off_codes % 4 == 0)
        sn_cu_emitf(t, "const unsigned word = *reinterpret_cast<const unsigned *>(code + f / 2);");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int j = 0; j < 4; j++) {");
    if (l->off_codes % 4 == 0)
        sn_cu_emitf(t, "const unsigned byte = word >> 8 * j & 255u; /* little-endian */");
    else
        sn_cu_emitf(t, "const unsigned byte = code[f / 2 + j];");
    sn_cu_emitf(t, "wv[2 * j] = %s(level[byte >> 4] * scale);", rnd);
    sn_cu_emitf(t, "wv[2 * j + 1] = %s(level[byte & 15u] * scale);", rnd);
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_gemv_t(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d,
                       const char *fname) {
    sn_gemv g = sn_gemv_of(k);
    bool nf4 = g.source == SN_GEMV_NF4, part = k->stage == SN_SUM_PARTIAL;
    int64_t K = g.K, N = g.N, M = g.M;
    int64_t L = part ? sn_split_len(k) : K, KT = x_tile(M, L);
    int64_t R = KT + (KT + 31) / 32; /* a row of xs: a word of padding after every 32 */
    int64_t C = (N + SN_GEMV_COLS - 1) / SN_GEMV_COLS; /* output items */
    sn_nf4_layout l = sn_nf4_layout_of(K * N);
    const char *ix = sn_cu_index_type(2 * l.bytes + 2 * K * N + 64 +
                                      (part ? sn_split_parts(k) * M * N : 0));
    const char *rnd = !nf4 ? "" : g.wt == SN_BF16 ? "sn_round_bf16"
                                : g.wt == SN_F16  ? "sn_round_f16" : "";
    bool vec = K % 8 == 0; /* a lane's 8 weights: one NF4 block, 16 aligned bytes of W16 */
    SN_ASSERT(d->block[0] == THREADS && (!part || L % 8 == 0 || !vec));
    sn_cu_emit_signature(t, k, fname, THREADS);
    sn_cu_emitf(t, "/* y (%lld, %lld) = x (%lld, %lld) @ W^T, W (%lld, %lld) %s%s%s */",
                (long long)M, (long long)N, (long long)M, (long long)K, (long long)N,
                (long long)K, nf4 ? "NF4 in " : "", sn_dtype_name(g.wt),
                nf4 ? " (ir/nf4.h)" : " widened");
    if (nf4) sn_cu_emitf(t, "SN_SHARED(float, level, 16);");
    sn_cu_emitf(t, "SN_SHARED(float, xs, %lld); /* x[m][k0 + i] in f32 at [m %lld + i + i / 32]: "
                   "a lane's 8 k in other banks than the next 31 lanes' */",
                (long long)(M * R), (long long)R);
    if (nf4) {
        sn_cu_emit_nf4_levels(t);
        sn_cu_emit_nf4_pointers(t, &l);
    }
    sn_cu_emitf(t, "const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
    if (part) {
        sn_cu_emitf(t, "const %s item = blockIdx.x %% %lld, part = blockIdx.x / %lld;", ix,
                    (long long)C, (long long)C);
        sn_cu_emitf(t, "const %s k_lo = part * %lld, k_hi = k_lo + %lld < %lld ? k_lo + %lld : "
                       "%lld; /* this part's k */", ix, (long long)L, (long long)L, (long long)K,
                    (long long)L, (long long)K);
    } else {
        sn_cu_emitf(t, "const %s item = blockIdx.x, k_lo = 0, k_hi = %lld;", ix, (long long)K);
    }
    sn_cu_emitf(t, "const %s n0 = item * %d + %d * warp; /* this warp's %d outputs */", ix,
                SN_GEMV_COLS, ROWS, ROWS);
    sn_cu_emitf(t, "float acc[%d][%lld];", ROWS, (long long)M);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++)", ROWS);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < %lld; m++) acc[r][m] = 0.0f;", (long long)M);
    if (part && KT == L) { /* the part's k one tile: no loop */
        sn_cu_emitf(t, "/* the part's k: one tile */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const %s k0 = k_lo;", ix);
    } else {
        sn_cu_emitf(t, "for (%s k0 = k_lo; k0 < k_hi; k0 += %lld) {", ix, (long long)KT);
    }
    sn_cu_emitf(t, "__syncthreads(); /* the last tile's readers are done (and the levels are in) */");
    sn_cu_emitf(t, "const %s kn = k_hi - k0 < %lld ? k_hi - k0 : %lld;", ix, (long long)KT,
                (long long)KT);
    sn_cu_emitf(t, "for (%s i = threadIdx.x; i < %lld * kn; i += %d)", ix, (long long)M, THREADS);
    sn_cu_emitf(t, "xs[i / kn * %lld + i %% kn + i %% kn / 32] = sn_load(in0[i / kn * %lld + k0 + "
                   "i %% kn]);", (long long)R, (long long)K);
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "/* this lane's 8 k a step, the warp's 8 rows each */");
    sn_cu_emitf(t, "for (%s k = 8 * lane; k < kn; k += 256) {", ix);
    sn_cu_emitf(t, "const %s kx = k + k / 32; /* xs's column of k (k + j: kx + j, j < 8) */", ix);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++) {", ROWS);
    sn_cu_emitf(t, "const %s n = n0 + r;", ix);
    if (N % SN_GEMV_COLS) /* past the last output: rows of the last block's last warps */
        sn_cu_emitf(t, "if (n >= %lld) continue;", (long long)N);
    if (vec) {
        sn_cu_emitf(t, "float wv[8];");
        emit_weights(t, &g, &l, rnd, ix);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < %lld; m++) {", (long long)M);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < 8; j++) acc[r][m] = fmaf(xs[m * %lld + kx + j], wv[j], "
                       "acc[r][m]);", (long long)R);
        sn_cu_emitf(t, "}");
    } else { /* a weight at a time (fewer registers live), those at k_hi or after skipped */
        sn_cu_emitf(t, "const %s f = n * %lld + k0 + k; /* W's flat index of W[n][k0 + k] */",
                    ix, (long long)K);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < 8; j++) {");
        sn_cu_emitf(t, "if (k + j < kn) {");
        if (nf4) {
            sn_cu_emitf(t, "const %s b = (f + j) / %d;", ix, SN_NF4_BLOCK);
            sn_cu_emitf(t, "const unsigned byte = code[(f + j) / 2];");
            sn_cu_emitf(t, "const float scale = fmaf((float)scale_code[b], step[b / %d], mean);",
                        SN_NF4_SCALE_GROUP);
            sn_cu_emitf(t, "const float w = %s(level[(f + j) %% 2 ? byte & 15u : byte >> 4] * "
                           "scale);", rnd);
        } else {
            sn_cu_emitf(t, "const float w = sn_load(in1[f + j]);");
        }
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int m = 0; m < %lld; m++) acc[r][m] = fmaf(xs[m * %lld + kx + j], w, "
                       "acc[r][m]);", (long long)M, (long long)R);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* the 32 lanes' sums: a butterfly over 16, 8, 4, 2, 1 lanes */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++)", ROWS);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < %lld; m++) {", (long long)M);
    sn_cu_emitf(t, "float v = acc[r][m];");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);");
    sn_cu_emitf(t, "const %s n = n0 + r;", ix);
    sn_cu_emitf(t, "if (lane == r && n < %lld)", (long long)N);
    if (part) /* this part's product: FINISH adds the parts */
        sn_cu_emitf(t, "scratch[(part * %lld + m) * %lld + n] = v;", (long long)M, (long long)N);
    else
        sn_cu_emitf(t, "out0[(%s)m * %lld + n] = v;", ix, (long long)N);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
