/* llvm_attention_cache.c: decoding over a KV cache on the CPU (attention_cache, ir/ops.h): an
 * item per (batch, query head) slice of q; each of its T queries held in registers walks its own
 * new keys 0..t, then the S cached keys whose mask is not -inf (the others add nothing and are
 * not read), with an online softmax (running max m, sum l, f32 accumulator over Dv). A cached
 * key of a short context is never loaded, so a step costs the row's length, not the cache's.
 * Convention: f32 inside; 16-bit inputs converted on load (sn_ll_vload). */
#ifdef SN_HAVE_LLVM

#include <math.h>

#include "llvm_attention.h"

#define B (L->b)

typedef struct {
    sn_ll *L;
    int nd, ndv;               /* vectors per row of D and of Dv */
    int64_t D, Dv;
    LLVMValueRef scale;        /* f32 */
    LLVMValueRef qv[MAX_CHUNKS];
    LLVMValueRef m, l, acc[MAX_CHUNKS]; /* variables */
} dec;

/* The lanes of a row's vector c (NULL: all) for a row of n elements. */
static LLVMValueRef row_mask(sn_ll *L, int64_t n, int c) {
    int64_t left = n - (int64_t)c * L->lanes;
    return left >= L->lanes ? NULL : sn_ll_const_first_lanes(L, (int)left);
}

/* Element pointer of input i of the anchor, of the item's (batch b, head h) slice through its
 * access: offset + b stride[0] + h stride[1] (the mask's head axis has size 1: h is 0 there). */
static LLVMValueRef slice_at(sn_ll *L, const sn_kernel *k, int i, LLVMValueRef buf,
                             LLVMValueRef b, LLVMValueRef h, const char *name) {
    const sn_access *x = &k->access[i];
    LLVMValueRef off = sn_ll_add(L, sn_ll_i64(L, x->offset), sn_ll_mul(L, b, sn_ll_i64(L, x->stride[0])));
    if (h) off = sn_ll_add(L, off, sn_ll_mul(L, h, sn_ll_i64(L, x->stride[1])));
    return sn_ll_att_at(L, buf, off, name);
}

/* One key row kp (D) and its value row vp (Dv) into the query's softmax, with `add` added to
 * its score (the mask's value, or 0). */
static void key(dec *d, LLVMValueRef kp, LLVMValueRef vp, LLVMValueRef add) {
    sn_ll *L = d->L;
    LLVMValueRef dot = sn_ll_vf32(L, 0);
    for (int c = 0; c < d->nd; c++) {
        LLVMValueRef kv = sn_ll_vload(L, kp, sn_ll_i64(L, (int64_t)c * L->lanes), row_mask(L, d->D, c), "k");
        dot = sn_ll_fma(L, d->qv[c], kv, dot);
    }
    LLVMValueRef s = sn_ll_fma(L, sn_ll_hsum(L, dot, "qk"), d->scale, add);
    LLVMValueRef m = sn_ll_get(L, d->m, "m");
    LLVMValueRef mn = sn_ll_maxnum(L, m, s, "m_new");
    LLVMValueRef alpha = sn_ll_exp(L, LLVMBuildFSub(B, m, mn, ""), "alpha"); /* m = -inf first: 0 */
    LLVMValueRef p = sn_ll_exp(L, LLVMBuildFSub(B, s, mn, ""), "p");
    sn_ll_set(L, d->l, sn_ll_fma(L, sn_ll_get(L, d->l, "l"), alpha, p));
    sn_ll_set(L, d->m, mn);
    LLVMValueRef av = sn_ll_splat(L, alpha, ""), pv = sn_ll_splat(L, p, "");
    for (int c = 0; c < d->ndv; c++) {
        LLVMValueRef vv = sn_ll_vload(L, vp, sn_ll_i64(L, (int64_t)c * L->lanes), row_mask(L, d->Dv, c), "v");
        LLVMValueRef a = LLVMBuildFMul(B, sn_ll_get(L, d->acc[c], "acc"), av, "");
        sn_ll_set(L, d->acc[c], sn_ll_fma(L, pv, vv, a));
    }
}

sn_status sn_ll_emit_attention_cache(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    const sn_node *n = k->anchor, *q = n->in[0], *kc = n->in[1];
    int64_t H = q->shape[1], T = q->shape[2], S = kc->shape[2], G = sn_attention_group(n);
    dec d = {.L = L, .D = q->shape[3], .Dv = n->in[2]->shape[3], .scale = sn_ll_f32(L, n->a.f)};
    d.nd = sn_ll_att_chunks(L, d.D);
    d.ndv = sn_ll_att_chunks(L, d.Dv);
    if (d.nd > MAX_CHUNKS || d.ndv > MAX_CHUNKS) {
        char kn[96];
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s: head sizes D = %lld, Dv = %lld exceed the %d "
                       "the LLVM attention kernels hold in registers", sn_ll_kname(k, kn, sizeof kn),
                       (long long)d.D, (long long)d.Dv, MAX_CHUNKS * L->lanes);
    }
    sn_ll_fn_begin(L, fname);
    LLVMValueRef buf[6], y = sn_ll_buf(L, 0, n->dtype, "y");
    for (int i = 0; i < 6; i++) buf[i] = sn_ll_buf(L, k->access[i].arg, n->in[i]->dtype, "in");
    int64_t rs[6];
    for (int i = 0; i < 6; i++) rs[i] = k->access[i].stride[2]; /* row strides (the mask: unused) */
    d.m = sn_ll_var(L, L->t_f32, NULL, "m");
    d.l = sn_ll_var(L, L->t_f32, NULL, "l");
    for (int c = 0; c < d.ndv; c++) d.acc[c] = sn_ll_var(L, L->t_vf, NULL, "acc");

    sn_ll_loop items, queries, news, keys;
    LLVMValueRef it = sn_ll_for(L, &items, L->begin, L->end, sn_ll_i64(L, 1), "item");
    LLVMValueRef b = LLVMBuildUDiv(B, it, sn_ll_i64(L, H), "b");
    LLVMValueRef h = LLVMBuildURem(B, it, sn_ll_i64(L, H), "h");
    LLVMValueRef hk = LLVMBuildUDiv(B, h, sn_ll_i64(L, G), "kv_head");
    LLVMValueRef qp = slice_at(L, k, 0, buf[0], b, h, "q"), mp = slice_at(L, k, 3, buf[3], b, NULL, "mask");
    LLVMValueRef kcp = slice_at(L, k, 1, buf[1], b, hk, "kc"), vcp = slice_at(L, k, 2, buf[2], b, hk, "vc");
    LLVMValueRef knp = slice_at(L, k, 4, buf[4], b, hk, "kn"), vnp = slice_at(L, k, 5, buf[5], b, hk, "vn");
    LLVMValueRef yp = sn_ll_att_at(L, y, sn_ll_mul(L, it, sn_ll_i64(L, T * d.Dv)), "y");

    LLVMValueRef t = sn_ll_for(L, &queries, sn_ll_i64(L, 0), sn_ll_i64(L, T), sn_ll_i64(L, 1), "t");
    LLVMValueRef qrow = sn_ll_att_at(L, qp, sn_ll_mul(L, t, sn_ll_i64(L, rs[0])), "qrow");
    for (int c = 0; c < d.nd; c++)
        d.qv[c] = sn_ll_vload(L, qrow, sn_ll_i64(L, (int64_t)c * L->lanes), row_mask(L, d.D, c), "q");
    sn_ll_set(L, d.m, sn_ll_f32(L, -INFINITY));
    sn_ll_set(L, d.l, sn_ll_f32(L, 0));
    for (int c = 0; c < d.ndv; c++) sn_ll_set(L, d.acc[c], sn_ll_vf32(L, 0));
    /* the new keys first (their scores are finite: m is from the first key on) */
    LLVMValueRef u = sn_ll_for(L, &news, sn_ll_i64(L, 0), sn_ll_add(L, t, sn_ll_i64(L, 1)),
                               sn_ll_i64(L, 1), "u");
    key(&d, sn_ll_att_at(L, knp, sn_ll_mul(L, u, sn_ll_i64(L, rs[4])), "krow"),
        sn_ll_att_at(L, vnp, sn_ll_mul(L, u, sn_ll_i64(L, rs[5])), "vrow"), sn_ll_f32(L, 0));
    sn_ll_for_end(L, &news);
    /* then the cache: a masked-out position (-inf) is skipped */
    LLVMValueRef j = sn_ll_for(L, &keys, sn_ll_i64(L, 0), sn_ll_i64(L, S), sn_ll_i64(L, 1), "j");
    LLVMValueRef mv = sn_ll_load(L, mp, j, "mask");
    sn_ll_if live;
    sn_ll_if_begin(L, &live, LLVMBuildFCmp(B, LLVMRealONE, mv, sn_ll_f32(L, -INFINITY), ""), "live");
    key(&d, sn_ll_att_at(L, kcp, sn_ll_mul(L, j, sn_ll_i64(L, rs[1])), "krow"),
        sn_ll_att_at(L, vcp, sn_ll_mul(L, j, sn_ll_i64(L, rs[2])), "vrow"), mv);
    sn_ll_if_end(L, &live);
    sn_ll_for_end(L, &keys);
    LLVMValueRef inv = sn_ll_splat(L, LLVMBuildFDiv(B, sn_ll_f32(L, 1), sn_ll_get(L, d.l, "l"), "inv"), "");
    LLVMValueRef orow = sn_ll_att_at(L, yp, sn_ll_mul(L, t, sn_ll_i64(L, d.Dv)), "orow");
    for (int c = 0; c < d.ndv; c++)
        sn_ll_vstore(L, orow, sn_ll_i64(L, (int64_t)c * L->lanes),
                     LLVMBuildFMul(B, sn_ll_get(L, d.acc[c], "acc"), inv, ""), row_mask(L, d.Dv, c));
    sn_ll_for_end(L, &queries);
    sn_ll_for_end(L, &items);
    sn_ll_fn_end(L);
    return SN_OK;
}

#undef B

#endif /* SN_HAVE_LLVM */
