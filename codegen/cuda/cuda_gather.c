/* cuda_gather.c: embedding (rows of a table picked by ids) and its backward, the rows of dy
 * added into a (V, C) gradient. The backward is deterministic by per-row ownership: a block per
 * table row v zeroes nothing and atomically adds nothing; it scans the ids in order (a chunk of
 * ids per step, matches found by a warp ballot) and sums dy[p] for every p with ids[p] == v
 * into registers, in p order, then stores the row once. Chosen over sorted buckets because it
 * needs no scratch buffer, no sort and no second launch; the price is that every block reads
 * all N ids (N x V compares, cheap next to the V x C row writes for GPT-2's sizes). */
#include <stdio.h>

#include "cuda_int.h"

sn_status sn_cu_check_gather(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    bool fwd = n->op == SN_OP_EMBEDDING;
    if (!fwd && n->op != SN_OP_EMBEDDING_BWD)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: %s is not a gather the CUDA "
                       "backend knows", k->name, sn_op_name(n->op));
    const sn_node *ids = n->in[fwd ? 1 : 0];
    if (ids->dtype != SN_I32)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: ids %%%d are %s; the CUDA backend "
                       "reads i32 ids", k->name, ids->id, sn_dtype_name(ids->dtype));
    return sn_cu_check_dtype(k, n, e);
}

/* The name of the arg holding node x. */
static const char *arg_of(const sn_kernel *k, const sn_node *x, char *buf, size_t len) {
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i] == x) return sn_cu_arg_name(k, i, buf, len);
    SN_ASSERT(0);
}

static void embedding(sn_cu_text *t, const sn_kernel *k, unsigned threads, const char *ix) {
    const sn_node *n = k->anchor, *table = n->in[0];
    int64_t V = table->shape[0], C = n->shape[n->rank - 1];
    char tb[16], ids[16];
    arg_of(k, table, tb, sizeof tb);
    arg_of(k, n->in[1], ids, sizeof ids);
    bool vec = C % 4 == 0 && table->dtype == SN_F32 && n->dtype == SN_F32;
    sn_cu_emitf(t, "const %s p = blockIdx.x; /* this block's id */", ix);
    sn_cu_emitf(t, "const int id = %s[p];", ids);
    sn_cu_emitf(t, "const bool ok = id >= 0 && id < %lld; /* a bad id gives a row of NaN */", (long long)V);
    sn_cu_emitf(t, "const %s src = (%s)(ok ? id : 0) * %lld, dst = p * %lld;", ix, ix, (long long)C,
                (long long)C);
    if (vec) {
        sn_cu_emitf(t, "const float nan = SN_INF - SN_INF;");
        sn_cu_emitf(t, "for (int j = 4 * threadIdx.x; j < %lld; j += %u) {", (long long)C, 4 * threads);
        sn_cu_emitf(t, "const float4 v = *reinterpret_cast<const float4 *>(&%s[src + j]);", tb);
        sn_cu_emitf(t, "*reinterpret_cast<float4 *>(&out0[dst + j]) = ok ? v : make_float4(nan, nan, nan, nan);");
        sn_cu_emitf(t, "}");
    } else {
        sn_cu_emitf(t, "for (int j = threadIdx.x; j < %lld; j += %u)", (long long)C, threads);
        sn_cu_emitf(t, "    sn_store(&out0[dst + j], ok ? sn_load(%s[src + j]) : SN_INF - SN_INF);", tb);
    }
}

static void embedding_bwd(sn_cu_text *t, const sn_kernel *k, unsigned threads, const char *ix) {
    const sn_node *n = k->anchor, *idn = n->in[0];
    int64_t C = n->shape[n->rank - 1], N = sn_numel(idn);
    int64_t nq = (C + threads - 1) / threads;
    char ids[16], dy[16];
    arg_of(k, idn, ids, sizeof ids);
    arg_of(k, n->in[1], dy, sizeof dy);
    sn_cu_emitf(t, "const int v = blockIdx.x; /* the table row this block owns */");
    sn_cu_emitf(t, "float acc[%lld]; /* columns threadIdx.x + %u q */", (long long)nq, threads);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %lld; q++) acc[q] = 0.0f;", (long long)nq);
    sn_cu_emitf(t, "SN_SHARED(unsigned, hits, %u); /* a ballot of matches per warp */", threads / 32);
    sn_cu_emitf(t, "/* the ids in chunks, in order */");
    sn_cu_emitf(t, "for (%s p0 = 0; p0 < %lld; p0 += %u) {", ix,
                (long long)N, threads);
    sn_cu_emitf(t, "const %s p = p0 + threadIdx.x;", ix);
    sn_cu_emitf(t, "const unsigned ballot = __ballot_sync(0xffffffffu, p < %lld && %s[p] == v);",
                (long long)N, ids);
    sn_cu_emitf(t, "if (threadIdx.x %% 32 == 0) hits[threadIdx.x / 32] = ballot;");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "for (int w = 0; w < %u; w++) {", threads / 32);
    sn_cu_emitf(t, "for (unsigned m = hits[w]; m != 0; m &= m - 1) {");
    sn_cu_emitf(t, "const %s src = (p0 + w * 32 + __ffs((int)m) - 1) * %lld;", ix, (long long)C);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %lld; q++) {", (long long)nq);
    sn_cu_emitf(t, "const int j = threadIdx.x + %u * q;", threads);
    sn_cu_emitf(t, "if (j < %lld) acc[q] += sn_load(%s[src + j]);", (long long)C, dy);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads(); /* hits is rewritten by the next chunk */");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %lld; q++) {", (long long)nq);
    sn_cu_emitf(t, "const int j = threadIdx.x + %u * q;", threads);
    sn_cu_emitf(t, "if (j < %lld) sn_store(&out0[(%s)v * %lld + j], acc[q]);", (long long)C, ix,
                (long long)C);
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_gather(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    const sn_node *n = k->anchor;
    const char *ix = sn_cu_index_type(sn_numel(n) + sn_numel(n->in[0]) + sn_numel(n->in[1]) + 1024 * 1024);
    sn_cu_emit_signature(t, k, fname, (int)d->block[0]);
    if (n->op == SN_OP_EMBEDDING) embedding(t, k, d->block[0], ix);
    else embedding_bwd(t, k, d->block[0], ix);
    sn_cu_emitf(t, "}");
}
