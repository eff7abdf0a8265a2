/* cuda_gather.c: embedding (rows of a table picked by ids) and its backward, the rows of dy
 * summed into a (V, C) gradient in two kernels (program/kernel.h), deterministic, with no
 * atomics: BUCKET sorts each chunk of ids by (id, position) in shared
 * memory and writes, per chunk and id, where its positions start in the sorted chunk and how
 * many there are; ROWS gives every table row a team of threads (a warp for gpt2, 8 a block)
 * that adds its id's dy rows, chunk after chunk, so in increasing position (the interpreter's
 * order, in f32), and stores the row once.
 * No global scan: the (chunk, id) table is the histogram, read in chunk order. Replaced a
 * block a row that scanned all N ids (N x V compares: 2.8 ms for gpt2 at B=16 T=1024 on an
 * H200, 1.3% of its DRAM bandwidth). */
#include <stdio.h>

#include "cuda_int.h"

sn_status sn_cu_check_gather(const sn_kernel *k, sn_err *e) {
    const sn_node *n = k->anchor;
    if (n->op == SN_OP_EMBEDDING_BWD && k->stage == SN_SUM_WHOLE)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: embedding_bwd in one kernel; the "
                       "CUDA backend runs it as its BUCKET and ROWS kernels (program/kernel.h), "
                       "which the fuse pass makes", k->name);
    return sn_kernel_dtypes(k, sn_cu_check_dtype_no_f8, e);
}

/* The name of the arg holding node x. */
static const char *arg_of(const sn_kernel *k, const sn_node *x, char *buf, size_t len) {
    for (int i = k->n_out; i < k->n_out + k->n_in; i++)
        if (k->args[i] == x) return sn_cu_arg_name(k, i, buf, len);
    SN_ASSERT(0);
}

/* A team of threads a table row, for the embedding (a row of ids) and its gradient's ROWS kernel
 * (a row of the table): 32 to 256 threads, at most about 32 columns a thread (a warp for gpt2's
 * 768), 256 / team rows a block. A block a row (the first forms: 16,384 blocks for gpt2's
 * B=16 T=1024 forward, 50,304 for the gradient, of three columns a thread) spent its time
 * starting blocks: the gradient's took 94.6 us on the H200 for 206 MB (2.2 TB/s), most of its
 * blocks storing a row of zeros, the forward 41.5 us for 100 MB. */
static int64_t rows_team(const sn_kernel *k) {
    int64_t C = k->anchor->shape[k->anchor->rank - 1], team = ((C + 31) / 32 + 31) / 32 * 32;
    return team < 32 ? 32 : team > 256 ? 256 : team;
}

sn_cuda_dims sn_cu_gather_rows_dims(const sn_kernel *k) {
    const sn_node *n = k->anchor;
    int64_t team = rows_team(k), rows = 256 / team;
    int64_t R = n->op == SN_OP_EMBEDDING ? sn_numel(n->in[1]) : n->shape[0]; /* ids, or table rows */
    return (sn_cuda_dims){.grid = {(unsigned)((R + rows - 1) / rows), 1, 1}, .block = {256, 1, 1}};
}

/* The embedding: team r of the block copies id p = blockIdx.x R + r's table row, four columns a
 * thread a step (float4) where C is a multiple of 4 and both are f32, else one; a bad id (< 0
 * or >= V) gives a row of NaN and reads nothing. */
static void embedding(sn_cu_text *t, const sn_kernel *k, unsigned threads, const char *ix) {
    const sn_node *n = k->anchor, *table = n->in[0];
    int64_t V = table->shape[0], C = n->shape[n->rank - 1], N = sn_numel(n->in[1]);
    int64_t team = rows_team(k), R = threads / team;
    SN_ASSERT(threads == 256 && R * team == 256);
    char tb[16], ids[16];
    arg_of(k, table, tb, sizeof tb);
    arg_of(k, n->in[1], ids, sizeof ids);
    bool vec = C % 4 == 0 && table->dtype == SN_F32 && n->dtype == SN_F32;
    int w = vec ? 4 : 1;
    sn_cu_emitf(t, "const int r = threadIdx.x / %lld, tt = threadIdx.x %% %lld; /* team, thread in it */",
                (long long)team, (long long)team);
    sn_cu_emitf(t, "const %s p = (%s)blockIdx.x * %lld + r; /* this team's id */", ix, ix, (long long)R);
    sn_cu_emitf(t, "if (p >= %lld) return;", (long long)N);
    sn_cu_emitf(t, "const int id = %s[p];", ids);
    sn_cu_emitf(t, "const bool ok = id >= 0 && id < %lld; /* a bad id gives a row of NaN */", (long long)V);
    sn_cu_emitf(t, "const %s src = (%s)(ok ? id : 0) * %lld, dst = p * %lld;", ix, ix, (long long)C,
                (long long)C);
    sn_cu_emitf(t, "const float nan = SN_INF - SN_INF;");
    sn_cu_emitf(t, "for (int j = %d * tt; j < %lld; j += %lld) {", w, (long long)C, (long long)(w * team));
    if (vec) {
        sn_cu_emitf(t, "const float4 v = ok ? *reinterpret_cast<const float4 *>(&%s[src + j]) "
                    ": make_float4(nan, nan, nan, nan);", tb);
        sn_cu_emitf(t, "*reinterpret_cast<float4 *>(&out0[dst + j]) = v;");
    } else {
        sn_cu_emitf(t, "sn_store(&out0[dst + j], ok ? sn_load(%s[src + j]) : nan);", tb);
    }
    sn_cu_emitf(t, "}");
}

/* BUCKET: block g sorts chunk g's S positions by (id, position) (a bitonic sort of u64 keys
 * id << 32 | position in the chunk) and writes its order row and its table row: every entry
 * zeroed, then (first << 16) | count at each id of the chunk, written by the thread holding the
 * id's first position. A bad id (or a position past N) sorts last as id 0xffffffff and is
 * counted nowhere. Warp w's lane holds keys 64 w + lane and 64 w + 32 + lane in registers: a
 * step of stride 32 compares its two, strides 1 to 16 take the partner's key by shuffle, and
 * only strides of 64 and more go through shared memory, a compare-exchange a thread, 32
 * consecutive keys a warp (the form that did every step there read keys 16 to 128 bytes apart
 * at strides 1 to 16: the simulator's profile, 3.3-3.6 shared wavefronts a request where 2 would
 * do, 2026-11-29). The same sorted keys either way (they are distinct). */
static void embedding_bwd_bucket(sn_cu_text *t, const sn_kernel *k, unsigned threads, const char *ix) {
    const sn_node *n = k->anchor, *idn = n->in[0];
    int64_t V = n->shape[0], N = sn_numel(idn), S = sn_gather_chunk(k), G = sn_gather_chunks(k);
    SN_ASSERT(threads * 2 == S && S <= 1 << 15);
    char ids[16];
    arg_of(k, idn, ids, sizeof ids);
    sn_cu_emitf(t, "const int g = blockIdx.x; /* this block's chunk of %lld positions */", (long long)S);
    sn_cu_emitf(t, "unsigned *table = (unsigned *)scratch + (%s)g * %lld; /* this chunk's row of "
                "(first << 16) | count */", ix, (long long)V);
    sn_cu_emitf(t, "int *order = (int *)scratch + %lld + g * %lld; /* its positions by (id, "
                "position) */", (long long)(G * V), (long long)S);
    sn_cu_emitf(t, "SN_SHARED(unsigned long long, key, %lld);", (long long)S);
    sn_cu_emitf(t, "for (int i = threadIdx.x; i < %lld; i += %u) {", (long long)S, threads);
    sn_cu_emitf(t, "const %s p = (%s)g * %lld + i;", ix, ix, (long long)S);
    sn_cu_emitf(t, "const int id = p < %lld ? %s[p] : -1;", (long long)N, ids);
    sn_cu_emitf(t, "const unsigned u = id >= 0 && id < %lld ? (unsigned)id : 0xffffffffu; /* a bad "
                "id: last, counted nowhere */", (long long)V);
    sn_cu_emitf(t, "key[i] = (unsigned long long)u << 32 | (unsigned)i;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "for (int v = threadIdx.x; v < %lld; v += %u) table[v] = 0u;", (long long)V, threads);
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "/* bitonic sort, ascending: a step orders the keys i and i + stride (i with bit "
                "stride 0) up in blocks of size where i & size is 0 */");
    sn_cu_emitf(t, "const int lane = threadIdx.x %% 32, pa = 64 * (threadIdx.x / 32) + lane, pb = pa + 32;");
    sn_cu_emitf(t, "unsigned long long ka = key[pa], kb = key[pb]; /* this lane's two keys */");
    sn_cu_emitf(t, "for (int size = 2; size <= %lld; size <<= 1) {", (long long)S);
    sn_cu_emitf(t, "int stride = size >> 1;");
    sn_cu_emitf(t, "/* strides of 64 and more through shared memory: a pair a thread */");
    sn_cu_emitf(t, "if (stride >= 64) {");
    sn_cu_emitf(t, "key[pa] = ka;");
    sn_cu_emitf(t, "key[pb] = kb;");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "for (; stride >= 64; stride >>= 1) {");
    sn_cu_emitf(t, "const int i = 2 * threadIdx.x - (threadIdx.x & (stride - 1)), j = i + stride;");
    sn_cu_emitf(t, "const unsigned long long a = key[i], b = key[j];");
    sn_cu_emitf(t, "if ((a > b) == ((i & size) == 0)) {");
    sn_cu_emitf(t, "key[i] = b;");
    sn_cu_emitf(t, "key[j] = a;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "ka = key[pa]; /* read before this thread writes them again: no barrier */");
    sn_cu_emitf(t, "kb = key[pb];");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "/* stride 32: the lane's two keys; below it, the partner lane's (the lower "
                "keeps the min where ascending) */");
    sn_cu_emitf(t, "if (stride == 32) {");
    sn_cu_emitf(t, "if ((ka > kb) == ((pa & size) == 0)) {");
    sn_cu_emitf(t, "const unsigned long long c = ka;");
    sn_cu_emitf(t, "ka = kb;");
    sn_cu_emitf(t, "kb = c;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "stride = 16;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "for (; stride > 0; stride >>= 1) {");
    sn_cu_emitf(t, "const unsigned long long qa = __shfl_xor_sync(0xffffffffu, ka, stride), "
                "qb = __shfl_xor_sync(0xffffffffu, kb, stride);");
    sn_cu_emitf(t, "const bool lower = (lane & stride) == 0;");
    sn_cu_emitf(t, "ka = lower == ((pa & size) == 0) ? (qa < ka ? qa : ka) : (qa > ka ? qa : ka);");
    sn_cu_emitf(t, "kb = lower == ((pb & size) == 0) ? (qb < kb ? qb : kb) : (qb > kb ? qb : kb);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "key[pa] = ka;");
    sn_cu_emitf(t, "key[pb] = kb;");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "for (int i = threadIdx.x; i < %lld; i += %u) {", (long long)S, threads);
    sn_cu_emitf(t, "const unsigned id = (unsigned)(key[i] >> 32);");
    sn_cu_emitf(t, "if (id == 0xffffffffu) continue;");
    sn_cu_emitf(t, "order[i] = g * %lld + (int)(unsigned)key[i];", (long long)S);
    sn_cu_emitf(t, "if (i > 0 && (unsigned)(key[i - 1] >> 32) == id) continue;");
    sn_cu_emitf(t, "int lo = i + 1, hi = %lld; /* the id's end: the first key of a larger id */", (long long)S);
    sn_cu_emitf(t, "while (lo < hi) {");
    sn_cu_emitf(t, "const int m = (lo + hi) / 2;");
    sn_cu_emitf(t, "if ((unsigned)(key[m] >> 32) > id) hi = m;");
    sn_cu_emitf(t, "else lo = m + 1;");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "table[id] = (unsigned)i << 16 | (unsigned)(lo - i);");
    sn_cu_emitf(t, "}");
}

/* ROWS: team r of the block owns table row v = blockIdx.x R + r: it reads its G (first, count)
 * words (the block's rows' words for one chunk side by side: one sector), sums dy's rows at
 * its positions chunk by chunk (so in increasing position, the interpreter's order) into
 * registers, and stores the row once (zeros for an id without positions). With C a multiple
 * of 4 a thread takes 4 adjacent columns a step (one 16-byte load of f32 dy, 8 of 16-bit, one
 * float4 store of an f32 row), else one. */
static void embedding_bwd_rows(sn_cu_text *t, const sn_kernel *k, unsigned threads, const char *ix) {
    const sn_node *n = k->anchor;
    int64_t V = n->shape[0], C = n->shape[n->rank - 1], S = sn_gather_chunk(k), G = sn_gather_chunks(k);
    int64_t team = rows_team(k), R = threads / team;
    SN_ASSERT(threads == 256 && R * team == 256);
    int w = C % 4 == 0 ? 4 : 1;                 /* columns a thread a step */
    int64_t nq = (C + w * team - 1) / (w * team); /* steps */
    const sn_node *dyn = n->in[1];
    char dy[16];
    arg_of(k, dyn, dy, sizeof dy);
    sn_cu_emitf(t, "const int r = threadIdx.x / %lld, tt = threadIdx.x %% %lld; /* team, thread in it */",
                (long long)team, (long long)team);
    sn_cu_emitf(t, "const int v = blockIdx.x * %lld + r; /* the table row this team owns */", (long long)R);
    sn_cu_emitf(t, "const unsigned *table = (const unsigned *)scratch;");
    sn_cu_emitf(t, "const int *order = (const int *)scratch + %lld;", (long long)(G * V));
    sn_cu_emitf(t, "SN_SHARED2(unsigned, runs, %lld, %lld); /* (first << 16) | count in each chunk */",
                (long long)R, (long long)G);
    sn_cu_emitf(t, "for (int i = threadIdx.x; i < %lld; i += %u) {", (long long)(R * G), threads);
    sn_cu_emitf(t, "const int g = i / %lld, rr = i %% %lld, vv = blockIdx.x * %lld + rr;", (long long)R,
                (long long)R, (long long)R);
    sn_cu_emitf(t, "runs[rr][g] = vv < %lld ? table[(%s)g * %lld + vv] : 0u;", (long long)V, ix, (long long)V);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads();");
    sn_cu_emitf(t, "if (v >= %lld) return; /* past the table: no barrier below */", (long long)V);
    sn_cu_emitf(t, "float acc[%lld][%d]; /* columns %d (tt + %lld q) + u */", (long long)nq, w, w,
                (long long)team);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %lld; q++)", (long long)nq);
    sn_cu_emitf(t, "    for (int u = 0; u < %d; u++) acc[q][u] = 0.0f; /* unrolled too */", w);
    sn_cu_emitf(t, "for (int g = 0; g < %lld; g++) {", (long long)G);
    sn_cu_emitf(t, "const int first = (int)(runs[r][g] >> 16), count = (int)(runs[r][g] & 0xffffu);");
    sn_cu_emitf(t, "for (int c = 0; c < count; c++) {");
    sn_cu_emitf(t, "const %s src = (%s)order[g * %lld + first + c] * %lld;", ix, ix, (long long)S,
                (long long)C);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %lld; q++) {", (long long)nq);
    sn_cu_emitf(t, "const int j = %d * (tt + %lld * q);", w, (long long)team);
    sn_cu_emitf(t, "if (j < %lld) {", (long long)C);
    if (w == 1) {
        sn_cu_emitf(t, "acc[q][0] += sn_load(%s[src + j]);", dy);
    } else {
        sn_cu_emitf(t, "float d[%d];", w);
        char at[64];
        snprintf(at, sizeof at, "&%s[src + j]", dy);
        sn_cu_load_n(t, sn_cu_ctype(dyn->dtype), sn_dtype_bits(dyn->dtype) / 8, w, "d", at);
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int u = 0; u < %d; u++) acc[q][u] += d[u];", w);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int q = 0; q < %lld; q++) {", (long long)nq);
    sn_cu_emitf(t, "const int j = %d * (tt + %lld * q);", w, (long long)team);
    sn_cu_emitf(t, "if (j < %lld) {", (long long)C);
    if (w == 4 && n->dtype == SN_F32) {
        sn_cu_emitf(t, "sn_store4(&out0[(%s)v * %lld + j], acc[q]);", ix, (long long)C);
    } else {
        sn_cu_emitf(t, "#pragma unroll");
        sn_cu_emitf(t, "for (int u = 0; u < %d; u++) sn_store(&out0[(%s)v * %lld + j + u], acc[q][u]);",
                    w, ix, (long long)C);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_gather(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    const sn_node *n = k->anchor;
    const char *ix = sn_cu_index_type(sn_numel(n) + sn_numel(n->in[0]) + sn_numel(n->in[1]) + 1024 * 1024);
    sn_cu_emit_signature(t, k, fname, (int)d->block[0]);
    if (n->op == SN_OP_EMBEDDING) embedding(t, k, d->block[0], ix);
    else if (k->stage == SN_GATHER_BUCKET) embedding_bwd_bucket(t, k, d->block[0], ix);
    else embedding_bwd_rows(t, k, d->block[0], ix);
    sn_cu_emitf(t, "}");
}
