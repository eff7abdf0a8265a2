/* cuda_thin.c: the thin product as CUDA C (kernel.h: SN_KER_THIN): y (M, N) = x (M, K) @ W
 * (K, N), or @ W^T with W stored (N, K), N few (LoRA's rank: the columns form) or K few (the
 * rank form: the expansions), M many (the sum form, x^T W: cuda_thin_sum.c). A library GEMM
 * moves x or y at a fraction of the memory's bandwidth there; these kernels read each row of x
 * once, 16 bytes a lane, W in registers.
 * Convention (the order is kernel.h's), the columns form: a block of `warps` warps takes `rows` rows of y; lane l
 * of warp w holds W's rows kb .. kb + kpl - 1 (kb = kpl (32 w + l)), kpl N weights widened to
 * f32, loaded once. R rows at a time: the lanes load their kpl elements of each of the R rows
 * (issued together), then for each row the fmaf chain over the lane's k ascending into P
 * partial sums (P the least power of two >= N, the ones past N zero), which the warp adds over
 * its lanes as a butterfly xor 16, 8, .., 1 that halves the values a lane keeps at each step
 * while more than one is left (P - 1 + 5 - log2 P shuffles, not 5 P): after it lane l holds the
 * warp's sum of column l >> (5 - log2 P). Those go to shared memory (two buffers, so one
 * barrier a step of R rows), where the first R N threads add the warps' sums in warp order and
 * store y, rounded once to its dtype. */
#include <stdio.h>

#include "cuda_int.h"

enum { R = 4, RR = 2 }; /* rows a step: the columns form, the rank form */

sn_cuda_dims sn_cu_thin_dims(const sn_kernel *k) {
    sn_thin t = sn_thin_of(k);
    unsigned threads = k->stage == SN_SUM_FINISH ? SN_SPLIT_FINISH_ELEMS /* a thread an element */
                                                 : 32u * (unsigned)(t.warps * t.groups);
    return (sn_cuda_dims){.grid = {(unsigned)k->n_items, 1, 1}, .block = {threads, 1, 1}};
}

static int log2i(int p) {
    int b = 0;
    while ((1 << b) < p) b++;
    return b;
}

void sn_cu_load_n(sn_cu_text *t, const char *ct, int eb, int n, const char *v, const char *src) {
    int bytes = n * eb;
    if (eb == 2 && (bytes == 8 || bytes == 4)) {
        sn_cu_emitf(t, "sn_load%d((const %s *)(%s), %s);", n, ct, src, v);
        return;
    }
    if (eb == 2 && bytes % 16 == 0) {
        for (int j = 0; j < n; j += 8) sn_cu_emitf(t, "sn_load8((const %s *)(%s) + %d, %s + %d);", ct, src, j, v, j);
        return;
    }
    if (eb == 4 && bytes % 16 == 0) {
        for (int j = 0; j < n; j += 4) sn_cu_emitf(t, "sn_load4((const float *)(%s) + %d, %s + %d);", src, j, v, j);
        return;
    }
    if (eb == 4 && bytes == 8) {
        sn_cu_emitf(t, "sn_load2((const float *)(%s), %s);", src, v);
        return;
    }
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %d; q++) %s[q] = sn_load((%s)[q]);", n, v, src);
}

/* dst[j] for j < n: row r's fmaf chain over k < kn ascending from 0, xv[r][k] w[k][j] a term
 * (both forms' sums a lane: kernel.h). */
static void emit_chains(sn_cu_text *t, const char *dst, int n, int kn) {
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int j = 0; j < %d; j++) {", n);
    sn_cu_emitf(t, "float s = 0.0f;");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int kk = 0; kk < %d; kk++) s = fmaf(xv[r][kk], w[kk][j], s);", kn);
    sn_cu_emitf(t, "%s[j] = s;", dst);
    sn_cu_emitf(t, "}");
}

/* The index type of the product's buffers. */
static const char *index_type(const sn_thin *p) {
    return sn_cu_index_type(p->M * (p->K > p->N ? p->K : p->N) + p->K * p->N + 64);
}

/* load_n where `cond` holds, else v[0 .. n) = 0. */
static void load_or_zero(sn_cu_text *t, const char *cond, const char *ct, int eb, int n,
                         const char *v, const char *src) {
    sn_cu_emitf(t, "if (%s) {", cond);
    sn_cu_load_n(t, ct, eb, n, v, src);
    sn_cu_emitf(t, "} else {");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %d; q++) %s[q] = 0.0f;", n, v);
    sn_cu_emitf(t, "}");
}

/* The rank form (kernel.h): lane l of warp w the kpl columns nb = kpl (32 w + l) .., W's K x kpl
 * in registers; each row's K elements of x (the same for every lane: one transaction a warp)
 * loaded RR rows ahead, then each column the fmaf chain over k, stored kpl at a time. RR = 2,
 * not 4: the kernel is bound by its stores, not by x's loads, and 4 rows took gpt2's 9-warp
 * expansion to 155 registers (124 with 2; the 3-warp ones 96-109 -> 78-80; NVRTC sm_90). */
static void emit_rank(sn_cu_text *t, const sn_kernel *k, const sn_thin *p, const char *fname) {
    const sn_node *x = k->args[1], *y = k->args[0];
    const char *xt = sn_cu_ctype(x->dtype), *yt = sn_cu_ctype(y->dtype);
    int eb = sn_dtype_bits(x->dtype) / 8, yb = sn_dtype_bits(y->dtype) / 8, K = (int)p->K, C = p->kpl;
    const char *ix = index_type(p);
    sn_cu_emit_signature(t, k, fname, 32 * p->warps);
    sn_cu_emitf(t, "/* y (%lld, %lld) %s = x (%lld, %d) @ W%s (%d, %lld), %s: lane l of warp w the "
                "%d columns from %d (32 w + l), W's %d x %d in registers; %lld rows a block, %d at a time */",
                (long long)p->M, (long long)p->N, sn_dtype_name(y->dtype), (long long)p->M, K,
                p->tb ? "^T" : "", K, (long long)p->N, sn_dtype_name(x->dtype), C, C, K, C,
                (long long)p->rows, RR);
    sn_cu_emitf(t, "const int nb = %d * threadIdx.x; /* this lane's first column */", C);
    sn_cu_emitf(t, "if (nb >= %lld) return; /* no barrier below */", (long long)p->N);
    sn_cu_emitf(t, "float w[%d][%d]; /* W[k][nb + j] */", K, C);
    if (!p->tb) { /* W (K, N): row k's kpl columns from nb, consecutive */
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int kk = 0; kk < %d; kk++) {", K);
        char src[96];
        snprintf(src, sizeof src, "in1 + (%s)kk * %lld + nb", ix, (long long)p->N);
        sn_cu_load_n(t, xt, eb, C, "w[kk]", src);
        sn_cu_emitf(t, "}");
    } else { /* W stored (N, K): column nb + j's K weights, consecutive */
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < %d; j++) {", C);
        sn_cu_emitf(t, "float v[%d];", K);
        char src[96];
        snprintf(src, sizeof src, "in1 + (%s)(nb + j) * %d", ix, K);
        sn_cu_load_n(t, xt, eb, K, "v", src);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int kk = 0; kk < %d; kk++) w[kk][j] = v[kk];", K);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "const int first = blockIdx.x * %lld, end = min(first + %lld, %lld);",
                (long long)p->rows, (long long)p->rows, (long long)p->M);
    sn_cu_emitf(t, "for (int m0 = first; m0 < end; m0 += %d) {", RR);
    sn_cu_emitf(t, "float xv[%d][%d]; /* rows m0 .. m0 + %d: their loads issued together */", RR, K, RR - 1);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++) {", RR);
    sn_cu_emitf(t, "if (m0 + r >= end) break;");
    {
        char src[96];
        snprintf(src, sizeof src, "in0 + (%s)(m0 + r) * %d", ix, K);
        sn_cu_load_n(t, xt, eb, K, "xv[r]", src);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++) {", RR);
    sn_cu_emitf(t, "if (m0 + r >= end) break;");
    sn_cu_emitf(t, "float o[%d];", C);
    emit_chains(t, "o", C, K);
    sn_cu_emitf(t, "%s *yr = out0 + (%s)(m0 + r) * %lld + nb;", yt, ix, (long long)p->N);
    if (C * yb == 32 || C * yb == 16) /* f32 8 or 4, 16-bit 8 */
        sn_cu_emitf(t, "sn_store%d(yr, o);", C);
    else {
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < %d; j++) sn_store(&yr[j], o[j]);", C);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_thin(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    sn_thin p = sn_thin_of(k);
    if (p.sum) { /* cuda_thin_sum.c */
        sn_cu_emit_thin_sum(t, k, &p, fname);
        return;
    }
    SN_ASSERT((int)d->block[0] == 32 * p.warps);
    if (p.rank) {
        emit_rank(t, k, &p, fname);
        return;
    }
    const sn_node *x = k->args[1], *y = k->args[0];
    const char *xt = sn_cu_ctype(x->dtype);
    int eb = sn_dtype_bits(x->dtype) / 8, N = (int)p.N, P = p.P, KPL = p.kpl, W = p.warps;
    int b = log2i(P);
    const char *ix = index_type(&p);
    SN_ASSERT(P <= 32 && KPL * P <= 64); /* the plan: at most 64 weights a lane */
    sn_cu_emit_signature(t, k, fname, 32 * W);
    sn_cu_emitf(t, "/* y (%lld, %d) %s = x (%lld, %lld) @ W%s (%lld, %d), %s: lane l of warp w the "
                "%d k from %d (32 w + l), W's %d x %d in registers; %lld rows a block, %d at a time */",
                (long long)p.M, N, sn_dtype_name(y->dtype), (long long)p.M, (long long)p.K,
                p.tb ? "^T" : "", (long long)p.K, N, sn_dtype_name(x->dtype), KPL, KPL, KPL, N,
                (long long)p.rows, R);
    sn_cu_emitf(t, "SN_SHARED(float, red, %d); /* [step %% 2][row][warp][n]: the warps' sums */",
                2 * R * W * N);
    sn_cu_emitf(t, "const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
    sn_cu_emitf(t, "const int kb = %d * (32 * warp + lane); /* this lane's first k */", KPL);
    sn_cu_emitf(t, "const bool on = kb < %lld;", (long long)p.K);
    sn_cu_emitf(t, "float w[%d][%d]; /* W[kb + i][n] */", KPL, N);
    sn_cu_emitf(t, "{");
    if (!p.tb) { /* W (K, N): the lane's kpl rows are kpl N consecutive weights */
        bool vec = (KPL * N * eb) % 16 == 0;
        sn_cu_emitf(t, "float v[%d];", KPL * N);
        sn_cu_emitf(t, "if (on) {");
        if (vec) {
            for (int j = 0; j < KPL * N; j += 16 / eb) {
                char src[96], dst[16];
                snprintf(src, sizeof src, "in1 + (%s)kb * %d + %d", ix, N, j);
                snprintf(dst, sizeof dst, "v + %d", j);
                sn_cu_load_n(t, xt, eb, 16 / eb, dst, src);
            }
        } else {
            char src[96];
            snprintf(src, sizeof src, "in1 + (%s)kb * %d", ix, N);
            sn_cu_load_n(t, xt, eb, KPL * N, "v", src);
        }
        sn_cu_emitf(t, "} else {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int j = 0; j < %d; j++) v[j] = 0.0f;", KPL * N);
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int i = 0; i < %d; i++)", KPL);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int n = 0; n < %d; n++) w[i][n] = v[i * %d + n];", N, N);
    } else { /* W stored (N, K): row n's kpl weights from kb, consecutive */
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int n = 0; n < %d; n++) {", N);
        sn_cu_emitf(t, "float v[%d];", KPL);
        char src[96];
        snprintf(src, sizeof src, "in1 + (%s)n * %lld + kb", ix, (long long)p.K);
        load_or_zero(t, "on", xt, eb, KPL, "v", src);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int i = 0; i < %d; i++) w[i][n] = v[i];", KPL);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "const int first = blockIdx.x * %lld, end = min(first + %lld, %lld);",
                (long long)p.rows, (long long)p.rows, (long long)p.M);
    sn_cu_emitf(t, "for (int m0 = first, step = 0; m0 < end; m0 += %d, step ^= 1) {", R);
    sn_cu_emitf(t, "float xv[%d][%d]; /* rows m0 .. m0 + %d: their loads issued together */", R, KPL, R - 1);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++) {", R);
    {
        char src[96];
        snprintf(src, sizeof src, "in0 + (%s)(m0 + r) * %lld + kb", ix, (long long)p.K);
        load_or_zero(t, "on && m0 + r < end", xt, eb, KPL, "xv[r]", src);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int r = 0; r < %d; r++) {", R);
    sn_cu_emitf(t, "float v[%d]; /* the lane's sums of columns 0 .. %d */", P, P - 1);
    emit_chains(t, "v", N, KPL);
    if (P > N) {
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int n = %d; n < %d; n++) v[n] = 0.0f;", N, P);
    }
    /* the butterfly, halving while more than one value is left */
    int held = P;
    for (int o = 16; o >= 1; o /= 2) {
        if (held > 1) {
            int half = held / 2;
            sn_cu_emitf(t, "/* xor %d: the lower lanes keep columns 0 .. %d of the %d, the upper the rest */", o, half - 1, held);
            sn_cu_emitf(t, "{");
            sn_cu_emitf(t, "const bool hi = lane & %d;", o);
            sn_cu_emitf(t, "#pragma unroll");
            sn_cu_emitf(t, "for (int j = 0; j < %d; j++) {", half);
            sn_cu_emitf(t, "const float send = hi ? v[j] : v[j + %d], keep = hi ? v[j + %d] : v[j];", half, half);
            sn_cu_emitf(t, "v[j] = keep + __shfl_xor_sync(0xffffffffu, send, %d);", o);
            sn_cu_emitf(t, "}");
            sn_cu_emitf(t, "}");
            held = half;
        } else {
            sn_cu_emitf(t, "v[0] += __shfl_xor_sync(0xffffffffu, v[0], %d);", o);
        }
    }
    if (b > 0) {
        sn_cu_emitf(t, "const int n = lane >> %d; /* the column this lane now holds */", 5 - b);
        sn_cu_emitf(t, "if ((lane & %d) == 0 && n < %d) red[((step * %d + r) * %d + warp) * %d + n] = v[0];",
                    (32 >> b) - 1, N, R, W, N);
    } else {
        sn_cu_emitf(t, "if (lane == 0) red[((step * %d + r) * %d + warp) * %d] = v[0];", R, W, N);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads(); /* the warps' sums of these rows are in (the other buffer "
                "was read before the last barrier) */");
    sn_cu_emitf(t, "for (int e = threadIdx.x; e < %d; e += %d) {", R * N, 32 * W);
    sn_cu_emitf(t, "const int r = e / %d, n = e %% %d;", N, N);
    sn_cu_emitf(t, "if (m0 + r >= end) continue;");
    sn_cu_emitf(t, "const float *ws = red + (step * %d + r) * %d * %d + n;", R, W, N);
    sn_cu_emitf(t, "float s = ws[0];");
    if (W > 1) {
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int u = 1; u < %d; u++) s += ws[u * %d]; /* warp order */", W, N);
    }
    sn_cu_emitf(t, "sn_store(&out0[(%s)(m0 + r) * %d + n], s);", ix, N);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
