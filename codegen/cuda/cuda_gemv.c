/* cuda_gemv.c: the few-row product as CUDA C (kernel.h: SN_KER_GEMV) for W (K, N): y (M, N) f32
 * = x (M, K) @ W, W read from its source as the block goes, never stored: packed NF4 bytes
 * (ir/nf4.h) or a 16-bit value (W16) widened. The transposed layout is cuda_gemv_t.c's (reached
 * from here); the split's FINISH, the same for both, is here.
 * Convention: a block of 8 warps per 64 columns of y (an item); lane l of warp w takes
 * the 8 columns 8 (l % 8) .. + 7 of the item and the rows k = 4 w + l / 8 + 32 j of W, so a
 * warp reads 4 rows' 32 bytes a step (4 whole 32-byte sectors; W16: 4 rows' 128 bytes) and the
 * block all K rows once.
 * x goes to shared memory in tiles of KT columns (M KT floats, at most 16 KiB), widened to
 * f32; each NF4 weight is the dequantize kernel's, rnd_w(level[code] * scale), scale =
 * fmaf(scale_code, step, mean). The order of each y[m][n] (f32): a lane's rows in increasing k,
 * one fmaf a term; the 4 lanes of a column in a warp added by __shfl_xor_sync over 8 then 16
 * lanes ((r0 + r1) + (r2 + r3)); the 8 warps' sums added in warp order through shared memory.
 * Fixed for every launch and thread order, but not the CPU's order (k ascending, one fma a
 * term: llvm_gemv.c), so the two agree within f32 rounding, not bit for bit. Where 64 divides
 * N a lane's 8 weights of row k are 4 consecutive bytes under one scale (W16: 16 bytes, one
 * load); elsewhere a block straddles rows and each weight finds its nibble and scale alone. Where
 * the codes start at a multiple of 4 bytes a lane reads its 4 bytes as one word. Split (kernel.h:
 * the decode split, too few column items to fill a GPU), block i takes the item i % C over the
 * rows of part i / C alone and stores its sum (the same order over those rows) into the
 * scratch; the FINISH adds the parts in part order, a thread an element of y (so the sum's
 * order is: each part's as above, then the parts in order). */
#include <stdio.h>

#include "cuda_int.h"
#include "ir/nf4.h"

enum { WARPS = 8, THREADS = 32 * WARPS, X_TILE_FLOATS = 4096 };
enum { RED_ROW = SN_GEMV_COLS + SN_GEMV_COLS / 8 }; /* a row of the warps' sums */
_Static_assert((int)THREADS == (int)SN_SPLIT_FINISH_ELEMS, "the FINISH: a thread an element");

sn_cuda_dims sn_cu_gemv_dims(const sn_kernel *k) {
    return (sn_cuda_dims){.grid = {(unsigned)k->n_items, 1, 1}, .block = {THREADS, 1, 1}};
}

/* The columns of x a shared tile holds: all K, or a multiple of 32 (a lane's rows step by 32,
 * so each tile starts where the lane's sequence continues). */
static int64_t x_tile(int64_t M, int64_t K) {
    int64_t kt = X_TILE_FLOATS / M / 32 * 32;
    return K <= kt ? K : kt;
}

void sn_cu_emit_parts_finish(sn_cu_text *t, const sn_kernel *k, const char *fname, unsigned tail) {
    int64_t MN = sn_numel(k->anchor), S = sn_split_parts(k);
    const char *ix = sn_cu_index_type(S * MN);
    if (tail) sn_cu_tail_signature(t, k, fname); /* a device function of `block` (cuda_tail.c) */
    else sn_cu_emit_signature(t, k, fname, THREADS);
    sn_cu_emitf(t, "/* y (%lld elements) = the %lld parts' products added in part order */",
                (long long)MN, (long long)S);
    sn_cu_emitf(t, "const %s i = (%s)%s * %u + threadIdx.x;", ix, ix, tail ? "block" : "blockIdx.x",
                tail ? tail : (unsigned)THREADS);
    sn_cu_emitf(t, "if (i >= %lld) return;", (long long)MN);
    sn_cu_emitf(t, "float s = scratch[i];");
    sn_cu_emitf(t, "#pragma unroll 16 /* the parts' loads issued 16 at a time, added in order (the "
                   "classifier's FINISH, a load waited for at a time, took 33 us on an H200) */");
    sn_cu_emitf(t, "for (int p = 1; p < %lld; p++) s += scratch[p * %lld + i];", (long long)S,
                (long long)MN);
    sn_cu_emitf(t, "out0[i] = s;");
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_nf4_pointers(sn_cu_text *t, const sn_nf4_layout *l) {
    sn_cu_emitf(t, "const float mean = *reinterpret_cast<const float *>(in1);");
    sn_cu_emitf(t, "const float *step = reinterpret_cast<const float *>(in1 + %lld);",
                (long long)l->off_steps);
    sn_cu_emitf(
        t, "const signed char *scale_code = reinterpret_cast<const signed char *>(in1 + %lld);",
        (long long)l->off_scale_codes);
    sn_cu_emitf(t, "const unsigned char *code = in1 + %lld;", (long long)l->off_codes);
}

void sn_cu_emit_gemv(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d,
                         const char *fname) {
    if (k->stage == SN_SUM_FINISH) {
        sn_cu_emit_parts_finish(t, k, fname, 0);
        return;
    }
    sn_gemv g = sn_gemv_of(k);
    if (g.tb) {
        sn_cu_emit_gemv_t(t, k, d, fname);
        return;
    }
    bool nf4 = g.source == SN_GEMV_NF4;
    bool part = k->stage == SN_SUM_PARTIAL; /* rows [p L, p L + L) of W into scratch[p] */
    int64_t K = g.K, N = g.N, M = g.M;
    int64_t L = part ? sn_split_len(k) : K, KT = x_tile(M, L);
    int64_t C = (N + SN_GEMV_COLS - 1) / SN_GEMV_COLS; /* column items */
    sn_nf4_layout l = sn_nf4_layout_of(K * N);
    const char *ix = sn_cu_index_type(2 * l.bytes + 2 * K * N + 64 +
                                      (part ? sn_split_parts(k) * M * N : 0));
    const char *rnd = g.wt == SN_BF16  ? "sn_round_bf16"
                      : g.wt == SN_F16 ? "sn_round_f16"
                                       : "";
    bool aligned = N % SN_GEMV_COLS == 0; /* row k of the item: one block */
    SN_ASSERT(d->block[0] == THREADS);
    sn_cu_emit_signature(t, k, fname, THREADS);
    if (nf4)
        sn_cu_emitf(t,
                    "/* y (%lld, %lld) = x (%lld, %lld) @ NF4 W (%lld, %lld) in %s: %lld blocks of "
                    "%d weights, %lld groups of %d scales (ir/nf4.h) */",
                    (long long)M, (long long)N, (long long)M, (long long)K, (long long)K,
                    (long long)N, sn_dtype_name(g.wt), (long long)l.blocks, SN_NF4_BLOCK,
                    (long long)l.groups, SN_NF4_SCALE_GROUP);
    else
        sn_cu_emitf(t, "/* y (%lld, %lld) = x (%lld, %lld) @ W (%lld, %lld), W %s widened */",
                    (long long)M, (long long)N, (long long)M, (long long)K, (long long)K,
                    (long long)N, sn_dtype_name(g.wt));
    if (nf4) sn_cu_emitf(t, "SN_SHARED(float, level, 16);");
    sn_cu_emitf(t, "SN_SHARED(float, xs, %lld); /* x[:, k0 .. k0 + %lld) in f32 */",
                (long long)(M * KT), (long long)KT);
    sn_cu_emitf(t, "SN_SHARED(float, red, %lld); /* [warp][m][c + c / 8]: the warps' sums, a "
                   "word after every 8 columns (a lane's 8 in other banks than the next's) */",
                (long long)(WARPS * M * RED_ROW));
    if (nf4) {
        sn_cu_emit_nf4_levels(t);
        sn_cu_emit_nf4_pointers(t, &l);
    }
    sn_cu_emitf(t, "const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
    sn_cu_emitf(t, "const int r = lane / 8; /* this lane's rows: k = 4 warp + r + 32 j */");
    if (part) {
        sn_cu_emitf(t, "const %s item = blockIdx.x %% %lld, part = blockIdx.x / %lld;", ix,
                    (long long)C, (long long)C);
        sn_cu_emitf(t, "const %s k_lo = part * %lld, k_hi = k_lo + %lld < %lld ? k_lo + %lld : "
                       "%lld; /* this part's rows of W */", ix, (long long)L, (long long)L,
                    (long long)K, (long long)L, (long long)K);
    } else {
        sn_cu_emitf(t, "const %s item = blockIdx.x, k_lo = 0, k_hi = %lld;", ix, (long long)K);
    }
    sn_cu_emitf(t, "const %s col = item * %d + 8 * (lane %% 8); /* its 8 columns */", ix,
                SN_GEMV_COLS);
    sn_cu_emitf(t, "float acc[%lld][8];", (long long)M);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < %lld; m++)", (long long)M);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int j = 0; j < 8; j++) acc[m][j] = 0.0f;");
    if (part && KT == L) { /* the part's rows one tile: no loop (ptxas spilled one over k_lo) */
        sn_cu_emitf(t, "/* the part's rows: one tile */");
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "const %s k0 = k_lo;", ix);
    } else {
        sn_cu_emitf(t, "for (%s k0 = k_lo; k0 < k_hi; k0 += %lld) {", ix, (long long)KT);
    }
    sn_cu_emitf(t,
                "__syncthreads(); /* the last tile's readers are done (and the levels are in) */");
    sn_cu_emitf(t, "const %s kn = k_hi - k0 < %lld ? k_hi - k0 : %lld;", ix, (long long)KT,
                (long long)KT);
    sn_cu_emitf(t, "for (%s i = threadIdx.x; i < %lld * kn; i += %d)", ix, (long long)M, THREADS);
    sn_cu_emitf(t, "xs[i / kn * %lld + i %% kn] = sn_load(in0[i / kn * %lld + k0 + i %% kn]);",
                (long long)KT, (long long)K);
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "for (%s k = 4 * warp + r; k < kn; k += 32) {", ix);
    sn_cu_emitf(t, "const %s row = (k0 + k) * %lld; /* W's flat index of row k0 + k */", ix,
                (long long)N);
    sn_cu_emitf(t, "float wv[8];");
    if (!nf4 && aligned) { /* 8 weights, 16 bytes: one load */
        sn_cu_emitf(t, "sn_load8(in1 + row + col, wv);");
    } else if (!nf4) {
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < 8; j++) wv[j] = col + j < %lld ? sn_load(in1[row + "
                       "col + j]) : 0.0f;", (long long)N);
    } else if (aligned) {
        sn_cu_emitf(t, "const %s b = (row + col) / %d; /* the block: all 8 weights */", ix,
                    SN_NF4_BLOCK);
        sn_cu_emitf(t, "const float scale = fmaf((float)scale_code[b], step[b / %d], mean);",
                    SN_NF4_SCALE_GROUP);
        if (l.off_codes % 4 == 0) /* the 4 bytes as one word (the buffer 64-byte aligned):
                                     a warp's request reads 4 rows' 32 bytes, whole sectors */
            sn_cu_emitf(t, "const unsigned word = *reinterpret_cast<const unsigned *>(code + "
                           "(row + col) / 2);");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < 4; j++) {");
        if (l.off_codes % 4 == 0)
            sn_cu_emitf(t, "const unsigned byte = word >> 8 * j & 255u; /* little-endian */");
        else
            sn_cu_emitf(t, "const unsigned byte = code[(row + col) / 2 + j];");
        sn_cu_emitf(t, "wv[2 * j] = %s(level[byte >> 4] * scale);", rnd);
        sn_cu_emitf(t, "wv[2 * j + 1] = %s(level[byte & 15u] * scale);", rnd);
        sn_cu_emitf(t, "}");
    } else {
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < 8; j++) {");
        sn_cu_emitf(t, "const %s f = row + col + j, b = f / %d;", ix, SN_NF4_BLOCK);
        sn_cu_emitf(t, "const unsigned byte = col + j < %lld ? code[f / 2] : 0u;", (long long)N);
        sn_cu_emitf(t,
                    "const float scale = col + j < %lld ? fmaf((float)scale_code[b], step[b / %d], "
                    "mean) : 0.0f;",
                    (long long)N, SN_NF4_SCALE_GROUP);
        sn_cu_emitf(t, "wv[j] = %s(level[f %% 2 ? byte & 15u : byte >> 4] * scale);", rnd);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < %lld; m++) {", (long long)M);
    sn_cu_emitf(t, "const float xv = xs[m * %lld + k];", (long long)KT);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int j = 0; j < 8; j++) acc[m][j] = fmaf(xv, wv[j], acc[m][j]);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* the 4 lanes of each column, then the warps in order */");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int m = 0; m < %lld; m++)", (long long)M);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int j = 0; j < 8; j++) {");
    sn_cu_emitf(t, "float v = acc[m][j];");
    sn_cu_emitf(t, "v += __shfl_xor_sync(0xffffffffu, v, 8);");
    sn_cu_emitf(t, "v += __shfl_xor_sync(0xffffffffu, v, 16);");
    sn_cu_emitf(t, "if (r == 0) red[(warp * %lld + m) * %d + 9 * lane + j] = v;", (long long)M,
                RED_ROW);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "for (int i = threadIdx.x; i < %lld; i += %d) {",
                (long long)(M * SN_GEMV_COLS), THREADS);
    sn_cu_emitf(t, "const int m = i / %d, c = i %% %d;", SN_GEMV_COLS, SN_GEMV_COLS);
    sn_cu_emitf(t, "const %s n = item * %d + c;", ix, SN_GEMV_COLS);
    sn_cu_emitf(t, "if (n >= %lld) continue;", (long long)N);
    sn_cu_emitf(t, "float s = red[m * %d + c + c / 8];", RED_ROW);
    sn_cu_emitf(t, "for (int w = 1; w < %d; w++) s += red[(w * %lld + m) * %d + c + c / 8];",
                WARPS, (long long)M, RED_ROW);
    if (part) /* this part's product: FINISH adds the parts */
        sn_cu_emitf(t, "scratch[(part * %lld + m) * %lld + n] = s;", (long long)M, (long long)N);
    else
        sn_cu_emitf(t, "out0[(%s)m * %lld + n] = s;", ix, (long long)N);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
