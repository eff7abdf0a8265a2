/* cuda_thin_sum.c: the thin product's sum form as CUDA C (kernel.h: SN_KER_THIN, sum): y (K, N)
 * f32 = x^T W over many rows M, x stored (M, K), W (M, N), K or N few: LoRA's weight gradients
 * h^T dy (dB: K the rank, `left`) and x^T dh (dA: N the rank). A library GEMM reads the wide
 * operand of these at a fraction of the memory's bandwidth (docs/finetune.md); here each of its
 * rows is read once, 16 bytes a lane, and the few operand's row (the same for every lane) is a
 * broadcast. The FINISH, adding the parts, is the decode split's (cuda_gemv.c).
 * Convention (the order is kernel.h's): lane l of warp w of group g in the block of part p and
 * column block b holds kpl columns of the wide operand from cb = b 32 kpl warps + kpl (32 w + l)
 * and few x kpl f32 sums, one a y element; U rows of the group's at a time (p L + g + G j, j
 * ascending), their wide loads issued together, then each row's fmaf into every sum. The
 * groups' sums meet in shared memory, in group order, one barrier a group (each lane's slots
 * its own: word i of the lane is at i 32 warps + its index in the group, so a warp's stores
 * take 32 banks); the last group adds its own and stores the part's sums into the scratch. */
#include <stdio.h>

#include "cuda_int.h"

enum { U = 4, CHUNK = 8 }; /* rows a step; the few operand's elements a load */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void sn_cu_emit_thin_sum(sn_cu_text *t, const sn_kernel *k, const sn_thin *p, const char *fname) {
    if (k->stage == SN_SUM_FINISH) {
        sn_cu_emit_parts_finish(t, k, fname, 0);
        return;
    }
    SN_ASSERT(p->sum && k->stage == SN_SUM_PARTIAL && p->P <= 32 && p->kpl * p->P <= 64);
    const sn_node *x = k->args[1];
    const char *ct = sn_cu_ctype(x->dtype);
    int eb = sn_dtype_bits(x->dtype) / 8, KPL = p->kpl, W = p->warps, G = p->groups;
    int few = (int)(p->left ? p->K : p->N), F = few * KPL;
    int64_t wide = p->left ? p->N : p->K, cols = 32 * (int64_t)KPL * W, L = p->rows, M = p->M;
    int64_t KN = p->K * p->N, C = p->cblocks;
    const char *big = p->left ? "in1" : "in0", *small = p->left ? "in0" : "in1";
    const char *ix = sn_cu_index_type(M * (wide > few ? wide : few) + p->parts * KN + 64);
    int threads = 32 * W * G;
    sn_cu_emit_signature_min(t, k, fname, threads, 1);
    sn_cu_emitf(t, "/* part of y (%lld, %lld) f32 = x^T W over rows [%lld part, %lld part + %lld) of "
                "%lld: x (%lld, %lld), W (%lld, %lld), %s; the wide operand %s, %d columns a lane, "
                "%d warps a group, %d groups, %lld column blocks */",
                (long long)p->K, (long long)p->N, (long long)L, (long long)L, (long long)L, (long long)M,
                (long long)M, (long long)p->K, (long long)M, (long long)p->N,
                sn_dtype_name(x->dtype), p->left ? "W" : "x", KPL, W, G, (long long)C);
    if (G > 1)
        sn_cu_emitf(t, "SN_SHARED(float, red, %d); /* [i][lane in the group]: the groups' sums */",
                    F * 32 * W);
    sn_cu_emitf(t, "const int tin = threadIdx.x %% %d, g = threadIdx.x / %d; /* in the group; the "
                "group */", 32 * W, 32 * W);
    sn_cu_emitf(t, "const %s part = blockIdx.x / %lld;", ix, (long long)C);
    sn_cu_emitf(t, "const %s cb = (blockIdx.x %% %lld) * %lld + %d * tin; /* this lane's first "
                "column of %s */", ix, (long long)C, (long long)cols, KPL, p->left ? "W" : "x");
    sn_cu_emitf(t, "const bool on = cb < %lld;", (long long)wide);
    sn_cu_emitf(t, "const %s lo = part * %lld, hi = min(lo + %lld, (%s)%lld);", ix, (long long)L,
                (long long)L, ix, (long long)M);
    sn_cu_emitf(t, "float acc[%d][%d]; /* acc[c][j]: the few's c, the lane's column cb + j */", few, KPL);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int c = 0; c < %d; c++)", few);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int j = 0; j < %d; j++) acc[c][j] = 0.0f;", KPL);
    sn_cu_emitf(t, "for (%s r0 = lo + g; r0 < hi; r0 += %d) {", ix, U * G);
    sn_cu_emitf(t, "float bv[%d][%d]; /* rows r0, r0 + %d, ..: their loads issued together */", U,
                KPL, G);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int u = 0; u < %d; u++) {", U);
    sn_cu_emitf(t, "const %s r = r0 + u * %d;", ix, G);
    {
        char src[96];
        snprintf(src, sizeof src, "%s + r * %lld + cb", big, (long long)wide);
        sn_cu_emitf(t, "if (on && r < hi) {");
        sn_cu_load_n(t, ct, eb, KPL, "bv[u]", src);
        sn_cu_emitf(t, "} else {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < %d; j++) bv[u][j] = 0.0f;", KPL);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int u = 0; u < %d; u++) {", U);
    sn_cu_emitf(t, "const %s r = r0 + u * %d;", ix, G);
    sn_cu_emitf(t, "if (r >= hi) break;");
    /* the few operand's row: vector loads where its rows keep their alignment (few <= 8: one
       load of the row; a multiple of 8: 8 at a time), else one element at a time */
    bool vec = few <= CHUNK || few % CHUNK == 0;
    for (int c0 = 0; c0 < few; c0 += CHUNK) {
        int n = (int)min64(CHUNK, few - c0);
        sn_cu_emitf(t, "{");
        sn_cu_emitf(t, "float sv[%d]; /* the few's %d .. %d of row r */", n, c0, c0 + n - 1);
        char src[96];
        snprintf(src, sizeof src, "%s + r * %d + %d", small, few, c0);
        if (vec) {
            sn_cu_load_n(t, ct, eb, n, "sv", src);
        } else {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int q = 0; q < %d; q++) sv[q] = sn_load((%s)[q]);", n, src);
        }
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int q = 0; q < %d; q++)", n);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < %d; j++) acc[%d + q][j] = fmaf(bv[u][j], sv[q], "
                    "acc[%d + q][j]);", KPL, c0, c0);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    if (G > 1) {
        sn_cu_emitf(t, "/* the groups' sums in group order: red = s_0, then red + s_g, .. */");
        sn_cu_emitf(t, "for (int q = 0; q < %d; q++) {", G - 1);
        sn_cu_emitf(t, "if (g == q) {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int i = 0; i < %d; i++) {", F);
        sn_cu_emitf(t, "float *slot = red + i * %d + tin;", 32 * W);
        sn_cu_emitf(t, "*slot = q ? *slot + acc[i / %d][i %% %d] : acc[i / %d][i %% %d];", KPL, KPL,
                    KPL, KPL);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "__syncthreads(); /* group q's sums are in */");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "if (g != %d) return; /* the last group stores */", G - 1);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int i = 0; i < %d; i++) acc[i / %d][i %% %d] = red[i * %d + tin] + "
                    "acc[i / %d][i %% %d];", F, KPL, KPL, 32 * W, KPL, KPL);
    }
    sn_cu_emitf(t, "if (!on) return;");
    sn_cu_emitf(t, "float *dst = scratch + part * %lld; /* part's y */", (long long)KN);
    if (p->left) { /* y[c][col]: for each c the lane's kpl consecutive columns */
        bool v4 = KPL % 4 == 0 && p->N % 4 == 0;
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int c = 0; c < %d; c++) {", few);
        if (v4) {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int j = 0; j < %d; j += 4) sn_store4(dst + c * %lld + cb + j, "
                        "acc[c] + j);", KPL, (long long)p->N);
        } else {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int j = 0; j < %d; j++) dst[c * %lld + cb + j] = acc[c][j];", KPL,
                        (long long)p->N);
        }
        sn_cu_emitf(t, "}");
    } else { /* y[col][c]: the lane's kpl rows of y, few each, are F consecutive floats */
        sn_cu_emitf(t, "float o[%d]; /* y[cb + j][c] at j %d + c */", F, few);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < %d; j++)", KPL);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int c = 0; c < %d; c++) o[j * %d + c] = acc[c][j];", few, few);
        if (F % 4 == 0 && few % 4 == 0) {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int i = 0; i < %d; i += 4) sn_store4(dst + cb * %d + i, o + i);", F, few);
        } else {
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int i = 0; i < %d; i++) dst[cb * %d + i] = o[i];", F, few);
        }
    }
    sn_cu_emitf(t, "}");
}
