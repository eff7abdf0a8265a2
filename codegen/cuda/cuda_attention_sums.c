/* cuda_attention_sums.c: the attention kernels that make a pass of their own over a scratch
 * (program/kernel.h): the atomic dq's zero and store, and the sum of grouped-query dk's and dv's
 * parts. Two elements a thread, 256 threads a block, blockIdx.y the item (q's slice for dq, k's
 * for the sum). */
#include "cuda_attention.h"

enum { PASS_THREADS = 256 };

/* ---- the atomic dq's zero and store kernels (kernel.h) ---- */

/* Item blockIdx.y's dq sums (SEQ_Q x HEAD_D f32, contiguous), two elements a thread: set to 0
 * (SN_ATT_DQ_ZERO), or rounded into dq (SN_ATT_DQ_STORE, through its access where it has one).
 * The zero also sets the item's dots (after every item's sums): the item's first blocks take
 * each query's dout_i . o_i, a few threads a row (whole rows a warp), 8 columns a load. */
static void emit_dq_scratch(sn_cu_text *t, const sn_att_plan *p, const char *fname) {
    const sn_kernel *k = p->k;
    bool zero = p->dq_stage == SN_ATT_DQ_ZERO;
    int nargs = k->n_out + k->n_in;
    sn_cu_emitf(t, "/* attention backward, the atomic dq (%s): %s dq's f32 sums, which the dk/dv "
                "kernel adds to; q (%lld, T %lld, D %lld), dq %s */", sn_op_name(p->n->op),
                zero ? "zeroes" : "stores, rounded,", (long long)p->batch, (long long)p->T,
                (long long)p->D, sn_dtype_name(k->args[p->a_dq]->dtype));
    sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", PASS_THREADS, fname);
    for (int i = 0; i < nargs; i++)
        sn_cu_emitf(t, "    %s%s *__restrict__ a%d,%s", i < k->n_out ? "" : "const ",
                    sn_att_ctype(k->args[i]->dtype), i,
                    i == p->a_dq ? zero ? " /* dq: not written */" : " /* dq */" : " /* not read */");
    sn_cu_emitf(t, "    float *__restrict__ a%d) { /* dq's f32 sums (q's slices, SEQ_Q, HEAD_D), "
                "then the dots (q's slices, SEQ_Q) */", nargs);
    t->depth++;
    sn_cu_emitf(t, "enum { SEQ_Q = %lld, HEAD_D = %lld, HEAD_DV = %lld, ITEMS = %lld };",
                (long long)p->T, (long long)p->D, (long long)p->Dv, (long long)p->batch);
    sn_cu_emitf(t, "const int item = blockIdx.y; /* q's (batch x head) slice */");
    sn_cu_emitf(t, "float *sums = a%d + (long long)item * SEQ_Q * HEAD_D;", nargs);
    if (!zero) sn_att_out_role(t, p, "dq", p->a_dq, "SEQ_Q * HEAD_D", "HEAD_D");
    if (zero) {
        sn_att_in_role(t, p, "o", p->i_o);
        sn_att_in_role(t, p, "dout", p->i_do);
        int64_t chunks = p->Dv / 8, parts = chunks % 8 == 0 ? 8 : chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
        sn_cu_emitf(t, "/* the dot of query i, as the dk/dv kernel takes it: PARTS threads a row, "
                    "each 8 columns of every PARTS-th 16 bytes, added across them by shuffles "
                    "(a warp reads whole rows) */");
        sn_cu_emitf(t, "enum { PARTS = %lld };", (long long)parts);
        sn_cu_emitf(t, "const int j = blockIdx.x * blockDim.x + threadIdx.x, i = j / PARTS;");
        sn_cu_emitf(t, "/* the item's first blocks (every thread of a warp at the shuffles) */");
        sn_cu_emitf(t, "if (blockIdx.x * blockDim.x < SEQ_Q * PARTS) {");
        sn_cu_emitf(t, "float dot = 0.0f;");
        sn_cu_emitf(t, "if (i < SEQ_Q) {");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int c = j %% PARTS * 8; c < HEAD_DV; c += PARTS * 8) {");
        sn_cu_emitf(t, "float dv8[8], ov8[8];");
        sn_cu_emitf(t, "sn_load8(dout + (long long)i * dout_row + c, dv8);");
        sn_cu_emitf(t, "sn_load8(o + (long long)i * o_row + c, ov8);");
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int u = 0; u < 8; u++) dot += dv8[u] * ov8[u];");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "for (int d = PARTS / 2; d > 0; d /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, d);");
        sn_cu_emitf(t, "if (i < SEQ_Q && j %% PARTS == 0)");
        sn_cu_emitf(t, "    a%d[(long long)ITEMS * SEQ_Q * HEAD_D + (long long)item * SEQ_Q + i] = dot;",
                    nargs);
        sn_cu_emitf(t, "}");
    }
    sn_cu_emitf(t, "const int e = 2 * (blockIdx.x * blockDim.x + threadIdx.x); /* HEAD_D is even */");
    sn_cu_emitf(t, "if (e >= SEQ_Q * HEAD_D) return;");
    if (zero) {
        sn_cu_emitf(t, "*reinterpret_cast<float2 *>(sums + e) = make_float2(0.0f, 0.0f);");
    } else {
        sn_cu_emitf(t, "const float2 x = *reinterpret_cast<const float2 *>(sums + e);");
        sn_cu_emitf(t, "const int i = e / HEAD_D, d = e %% HEAD_D;");
        sn_cu_emitf(t, "sn_store(&dq[i * dq_row + d], x.x);");
        sn_cu_emitf(t, "sn_store(&dq[i * dq_row + d + 1], x.y);");
    }
    sn_cu_emitf(t, "}");
}

/* ---- dk and dv in parts: the sum (kernel.h) ---- */

/* k's slice blockIdx.y: dk = the G query heads' f32 parts added in order, two elements a
 * thread, stored through dk's access where it has one; dv alike. */
static void emit_parts_sum(sn_cu_text *t, const sn_att_plan *p, const char *fname) {
    const sn_kernel *k = p->k;
    int nargs = k->n_out + k->n_in;
    sn_cu_emitf(t, "/* attention backward, dk and dv in parts (%s): adds the %lld query heads' f32 "
                "parts of each k/v slice in order; k (%lld slices, S %lld, D %lld), Dv %lld, %s */",
                sn_op_name(p->n->op), (long long)p->G, (long long)p->items, (long long)p->S,
                (long long)p->D, (long long)p->Dv, sn_dtype_name(p->dt));
    sn_cu_emitf(t, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", PASS_THREADS, fname);
    for (int i = 0; i < nargs; i++)
        sn_cu_emitf(t, "    %s%s *__restrict__ a%d,%s", i < k->n_out ? "" : "const ",
                    sn_att_ctype(k->args[i]->dtype), i,
                    i == p->a_dk ? " /* dk */" : i == p->a_dv ? " /* dv */" : " /* not read */");
    sn_cu_emitf(t, "    const float *__restrict__ a%d) { /* dk's, then dv's f32 parts (q's "
                "slices, SEQ_K, HEAD_D or HEAD_DV) */", nargs);
    t->depth++;
    sn_cu_emitf(t, "enum { SEQ_K = %lld, HEAD_D = %lld, HEAD_DV = %lld, G = %lld };", (long long)p->S,
                (long long)p->D, (long long)p->Dv, (long long)p->G);
    sn_cu_emitf(t, "const int item = blockIdx.y; /* k's (batch x head) slice */");
    sn_cu_emitf(t, "const int e = 2 * (blockIdx.x * blockDim.x + threadIdx.x); /* head sizes are even */");
    const char *names[] = {"dk", "dv"}, *cols[] = {"HEAD_D", "HEAD_DV"};
    const int at[] = {p->a_dk, p->a_dv};
    int64_t before = 0;
    for (int r = 0; r < 2; r++) {
        if (at[r] < 0) continue;
        sn_att_out_role(t, p, names[r], at[r], r ? "SEQ_K * HEAD_DV" : "SEQ_K * HEAD_D", cols[r]);
        sn_cu_emitf(t, "if (e < SEQ_K * %s) {", cols[r]);
        sn_cu_emitf(t, "const float *part = a%d + %lldll + (long long)item * G * SEQ_K * %s + e;",
                    nargs, (long long)before, cols[r]);
        sn_cu_emitf(t, "float2 x = make_float2(0.0f, 0.0f);");
        sn_cu_emitf(t, "/* the heads in order */");
        sn_cu_emitf(t, "for (int g = 0; g < G; g++) {");
        sn_cu_emitf(t, "const float2 y = *reinterpret_cast<const float2 *>(part + (long long)g * SEQ_K * %s);",
                    cols[r]);
        sn_cu_emitf(t, "x.x += y.x, x.y += y.y;");
        sn_cu_emitf(t, "}");
        sn_cu_emitf(t, "const int i = e / %s, d = e %% %s;", cols[r], cols[r]);
        sn_cu_emitf(t, "sn_store(&%s[i * %s_row + d], x.x);", names[r], names[r]);
        sn_cu_emitf(t, "sn_store(&%s[i * %s_row + d + 1], x.y);", names[r], names[r]);
        sn_cu_emitf(t, "}");
        before = p->batch * p->S * p->D;
    }
    sn_cu_emitf(t, "}");
}

sn_cuda_dims sn_att_scratch_dims(const sn_att_plan *p) {
    int64_t cols = p->parts_sum && p->Dv > p->D ? p->Dv : p->D, rows = p->parts_sum ? p->S : p->T;
    return (sn_cuda_dims){.grid = {(unsigned)((rows * cols / 2 + PASS_THREADS - 1) / PASS_THREADS),
                                   (unsigned)p->items, 1},
                          .block = {PASS_THREADS, 1, 1}};
}

void sn_att_emit_scratch_pass(sn_cu_text *t, const sn_att_plan *p, const char *fname) {
    if (p->parts_sum) emit_parts_sum(t, p, fname);
    else emit_dq_scratch(t, p, fname);
}
