/* cuda_attention_cache.c: decoding over a KV cache as CUDA C (attention_cache, ir/ops.h): a
 * block of CACHE_WARPS warps per (batch, query head) slice of q. For each of its T queries, warp
 * w takes the new keys u = w, w + W, .. <= t, then the cached keys j = w, w + W, .. < S whose
 * mask is not -inf (a masked position is never loaded: a step costs the row's length, not the
 * cache's); a key's score is a warp-wide dot product (lane c holds elements c, c + 32, .. of q,
 * the key and the value: 128-byte rows read whole), and each warp keeps an online softmax (max
 * m, sum l, its share of the f32 accumulator). The warps' states meet in shared memory and are
 * combined in warp order, the same order every run. Split (kernel.h: the decode split, flash-
 * decoding: too few slices to fill a GPU), a block takes one part of the keys of its slice and
 * stores the combined state (m, l, unnormalised output) into the scratch; the FINISH combines
 * the parts' states in part order as the warps' are combined.
 * Convention: f32 inside; 16-bit inputs converted on load, the output rounded on store. */
#include <stdio.h>

#include "cuda_int.h"

enum { CACHE_WARPS = 4, CACHE_MAX_PER_LANE = 8 }; /* head sizes up to 256 */

static void dims_of(const sn_kernel *k, int64_t *T, int64_t *S, int64_t *D, int64_t *Dv) {
    const sn_node *n = k->anchor;
    *T = n->in[0]->shape[2], *S = n->in[1]->shape[2], *D = n->in[0]->shape[3], *Dv = n->in[2]->shape[3];
}

sn_status sn_cu_check_attention_cache(const sn_kernel *k, sn_err *e) {
    sn_status st = sn_kernel_check_attention(k, e); /* the contract (program/kernel_check.c) */
    if (st) return st;
    int64_t T, S, D, Dv;
    dims_of(k, &T, &S, &D, &Dv);
    if (D > 32 * CACHE_MAX_PER_LANE || Dv > 32 * CACHE_MAX_PER_LANE)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: head sizes D = %lld, Dv = %lld: the "
                       "KV-cache attention kernel takes head sizes up to %d", k->name, (long long)D,
                       (long long)Dv, 32 * CACHE_MAX_PER_LANE);
    return SN_OK;
}

sn_cuda_dims sn_cu_attention_cache_dims(const sn_kernel *k) {
    return (sn_cuda_dims){.grid = {(unsigned)k->n_items, 1, 1}, .block = {32 * CACHE_WARPS, 1, 1}};
}

/* "in3 + off": the element pointer of anchor input i's slice of batch `b`, head `h` (NULL: the
 * mask, whose head axis has size 1) through its access. */
static void emit_slice(sn_cu_text *t, const sn_kernel *k, int i, const char *name, const char *h) {
    const sn_access *x = &k->access[i];
    char arg[16], head[64] = "";
    if (h) snprintf(head, sizeof head, " + %s * %lldLL", h, (long long)x->stride[1]);
    sn_cu_emitf(t, "const %s *%s = %s + %lldLL + b * %lldLL%s;", sn_cu_ctype(k->anchor->in[i]->dtype),
                name, sn_cu_arg_name(k, x->arg, arg, sizeof arg), (long long)x->offset,
                (long long)x->stride[0], head);
}

/* The decode split's FINISH (kernel.h): item b's parts' states combined for each query t, in
 * part order: y = sum_p o_p f_p / sum_p l_p f_p, f_p = e^(m_p - max m). */
static void emit_finish(sn_cu_text *t, const sn_kernel *k, const char *fname) {
    const sn_node *n = k->anchor;
    int64_t T, S, D, Dv, P = sn_split_parts(k);
    dims_of(k, &T, &S, &D, &Dv);
    char arg[16];
    sn_cu_emit_signature(t, k, fname, 32 * CACHE_WARPS);
    sn_cu_emitf(t, "/* y (.., %lld, %lld) from %lld parts' states (m, l, o) a query */",
                (long long)T, (long long)Dv, (long long)P);
    sn_cu_emitf(t, "const long long item = blockIdx.x;");
    sn_cu_emitf(t, "%s *y = %s + item * %lldLL;", sn_cu_ctype(n->dtype),
                sn_cu_arg_name(k, 0, arg, sizeof arg), (long long)(T * Dv));
    sn_cu_emitf(t, "const float *st = scratch + item * %lldLL; /* [part][t][m, l, o] */",
                (long long)(P * T * (Dv + 2)));
    sn_cu_emitf(t, "for (int t = 0; t < %lld; t++) {", (long long)T);
    sn_cu_emitf(t, "float big = -SN_INF;");
    sn_cu_emitf(t, "for (int p = 0; p < %lld; p++) big = fmaxf(big, st[(p * %lld + t) * %lld]);",
                (long long)P, (long long)T, (long long)(Dv + 2));
    sn_cu_emitf(t, "for (long long d = threadIdx.x; d < %lld; d += %d) {", (long long)Dv,
                32 * CACHE_WARPS);
    sn_cu_emitf(t, "float sum = 0.0f, o = 0.0f;");
    sn_cu_emitf(t, "/* the parts in order */");
    sn_cu_emitf(t, "for (int p = 0; p < %lld; p++) {", (long long)P);
    sn_cu_emitf(t, "const float *ps = st + (p * %lld + t) * %lld, f = expf(ps[0] - big); /* a part "
                   "without keys: 0 */", (long long)T, (long long)(Dv + 2));
    sn_cu_emitf(t, "sum = fmaf(ps[1], f, sum);");
    sn_cu_emitf(t, "o = fmaf(ps[2 + d], f, o);");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "sn_store(&y[t * %lldLL + d], o / sum);", (long long)Dv);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}

void sn_cu_emit_attention_cache(sn_cu_text *t, const sn_kernel *k, const char *fname) {
    if (k->stage == SN_SUM_FINISH) {
        emit_finish(t, k, fname);
        return;
    }
    const sn_node *n = k->anchor;
    int64_t T, S, D, Dv;
    dims_of(k, &T, &S, &D, &Dv);
    bool part = k->stage == SN_SUM_PARTIAL; /* keys [p L, p L + L) into scratch[item][p] */
    int64_t P = part ? sn_split_parts(k) : 1, L = part ? sn_split_len(k) : S + T;
    int64_t H = n->in[0]->shape[1], G = sn_attention_group(n);
    int nq = (int)((D + 31) / 32), nv = (int)((Dv + 31) / 32);
    char lit[32], arg[16];
    sn_cu_emit_signature(t, k, fname, 32 * CACHE_WARPS);
    sn_cu_emitf(t, "/* q (.., %lld, %lld) over %lld cached and %lld new keys, %lld query heads a "
                "kv head; %d warps */", (long long)T, (long long)D, (long long)S, (long long)T,
                (long long)G, CACHE_WARPS);
    sn_cu_emitf(t, "SN_SHARED(float, part, %lld);", (long long)CACHE_WARPS * (Dv + 2));
    sn_cu_emitf(t, "const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;");
    if (part) {
        sn_cu_emitf(t, "const long long item = blockIdx.x / %lld; /* its slice, */", (long long)P);
        sn_cu_emitf(t, "const int kp = blockIdx.x %% %lld; /* its part of the keys */",
                    (long long)P);
    } else {
        sn_cu_emitf(t, "const long long item = blockIdx.x;");
        sn_cu_emitf(t, "const int kp = 0;");
    }
    sn_cu_emitf(t, "const long long b = item / %lld, h = item %% %lld, hk = h / %lld;",
                (long long)H, (long long)H, (long long)G);
    emit_slice(t, k, 0, "q", "h");
    emit_slice(t, k, 1, "kc", "hk");
    emit_slice(t, k, 2, "vc", "hk");
    emit_slice(t, k, 3, "mask", NULL);
    emit_slice(t, k, 4, "kn", "hk");
    emit_slice(t, k, 5, "vn", "hk");
    sn_cu_emitf(t, "%s *y = %s + item * %lldLL;", sn_cu_ctype(n->dtype), sn_cu_arg_name(k, 0, arg, sizeof arg),
                (long long)(T * Dv));
    sn_cu_emitf(t, "const float scale = %s;", sn_cu_float_lit(n->a.f, lit, sizeof lit));
    sn_cu_emitf(t, "for (int t = 0; t < %lld; t++) {", (long long)T);
    sn_cu_emitf(t, "float qv[%d], acc[%d], m = -SN_INF, l = 0.0f;", nq, nv);
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int c = 0; c < %d; c++) {", nq);
    sn_cu_emitf(t, "const int d = lane + 32 * c;");
    sn_cu_emitf(t, "qv[c] = d < %lld ? sn_load(q[t * %lldLL + d]) : 0.0f;", (long long)D,
                (long long)k->access[0].stride[2]);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int c = 0; c < %d; c++) acc[c] = 0.0f;", nv);
    /* the new keys (u <= t), then the cached ones; a key: its row pointers and the score's add */
    sn_cu_emitf(t, "const int j_end = %lld + t + 1 < kp * %lld + %lld ? %lld + t + 1 : kp * "
                   "%lld + %lld; /* new keys j <= t, then the cached */", (long long)S,
                (long long)L, (long long)L, (long long)S, (long long)L, (long long)L);
    /* j, r in 32 bits (positions): 64-bit ones spilled the PARTIAL at sm_80 (32 registers) */
    sn_cu_emitf(t, "for (int j = kp * %lld + w; j < j_end; j += %d) {", (long long)L, CACHE_WARPS);
    sn_cu_emitf(t, "const bool cached = j > t;");
    sn_cu_emitf(t, "const int r = cached ? j - t - 1 : j; /* its row in the cache, or new */");
    sn_cu_emitf(t, "const float add = cached ? mask[r] : 0.0f;");
    sn_cu_emitf(t, "if (add == -SN_INF) continue; /* a position this row does not hold */");
    sn_cu_emitf(t, "const %s *kr = cached ? kc + r * %lldLL : kn + r * %lldLL;",
                sn_cu_ctype(n->in[1]->dtype), (long long)k->access[1].stride[2],
                (long long)k->access[4].stride[2]);
    sn_cu_emitf(t, "const %s *vr = cached ? vc + r * %lldLL : vn + r * %lldLL;",
                sn_cu_ctype(n->in[2]->dtype), (long long)k->access[2].stride[2],
                (long long)k->access[5].stride[2]);
    sn_cu_emitf(t, "float s = 0.0f;");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int c = 0; c < %d; c++) {", nq);
    sn_cu_emitf(t, "const int d = lane + 32 * c;");
    sn_cu_emitf(t, "if (d < %lld) s = fmaf(qv[c], sn_load(kr[d]), s);", (long long)D);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);");
    sn_cu_emitf(t, "s = fmaf(s, scale, add);");
    sn_cu_emitf(t, "const float mn = fmaxf(m, s), alpha = expf(m - mn), p = expf(s - mn);");
    sn_cu_emitf(t, "l = fmaf(l, alpha, p);");
    sn_cu_emitf(t, "m = mn;");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int c = 0; c < %d; c++) {", nv);
    sn_cu_emitf(t, "const int d = lane + 32 * c;");
    sn_cu_emitf(t, "acc[c] = fmaf(p, d < %lld ? sn_load(vr[d]) : 0.0f, acc[c] * alpha);", (long long)Dv);
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
    /* the warps' states side by side: m, l, then the accumulator */
    sn_cu_emitf(t, "float *mine = part + w * %lld;", (long long)(Dv + 2));
    sn_cu_emitf(t, "if (lane == 0) mine[0] = m, mine[1] = l;");
    sn_cu_emitf(t, "#pragma unroll");
    sn_cu_emitf(t, "for (int c = 0; c < %d; c++)", nv);
    sn_cu_emitf(t, "if (lane + 32 * c < %lld) mine[2 + lane + 32 * c] = acc[c];", (long long)Dv);
    sn_cu_emitf(t, "__syncthreads(); /* every warp's state is in */");
    sn_cu_emitf(t, "float big = -SN_INF;");
    sn_cu_emitf(t, "for (int v = 0; v < %d; v++) big = fmaxf(big, part[v * %lld]);", CACHE_WARPS,
                (long long)(Dv + 2));
    sn_cu_emitf(t, "for (long long d = threadIdx.x; d < %lld; d += %d) {", (long long)Dv, 32 * CACHE_WARPS);
    sn_cu_emitf(t, "float sum = 0.0f, o = 0.0f;");
    sn_cu_emitf(t, "/* the warps in order */");
    sn_cu_emitf(t, "for (int v = 0; v < %d; v++) {", CACHE_WARPS);
    sn_cu_emitf(t, "const float *st = part + v * %lld, f = big == -SN_INF ? 0.0f : expf(st[0] - "
                   "big); /* an idle warp: 0 */", (long long)(Dv + 2));
    sn_cu_emitf(t, "sum = fmaf(st[1], f, sum);");
    sn_cu_emitf(t, "o = fmaf(st[2 + d], f, o);");
    sn_cu_emitf(t, "}");
    if (part) { /* the part's state: m, l, the output; (-inf, 0, 0 ..) where it had no key */
        sn_cu_emitf(t, "float *mine_out = scratch + ((item * %lld + kp) * %lld + t) * %lld;",
                    (long long)P, (long long)T, (long long)(Dv + 2));
        sn_cu_emitf(t, "if (d == 0) mine_out[0] = big, mine_out[1] = sum;");
        sn_cu_emitf(t, "mine_out[2 + d] = o;");
    } else {
        sn_cu_emitf(t, "sn_store(&y[t * %lldLL + d], o / sum);", (long long)Dv);
    }
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "__syncthreads(); /* part is the next query's */");
    sn_cu_emitf(t, "}");
    sn_cu_emitf(t, "}");
}
