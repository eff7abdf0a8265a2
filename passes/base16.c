/* base16.c: the base16 pass: LoRA's and IA3's frozen base stored in the compute dtype. In a
 * 16-bit program the products read a frozen linear weight only through its 16-bit copy (the
 * autocast pass's cast, a weight shadow made once from the f32 parameter), so the f32 values are
 * never read: the pass makes the parameter itself 16-bit, halving its bytes and dropping the
 * copy. The selection is the nf4 pass's (sn_linear_weight): embeddings, norms, biases and a table
 * tied to the LM head stay f32. */
#include "frontend/frontend.h"
#include "ir/rewrite.h"
#include "passes.h"

sn_status sn_pass_base16(const sn_graph *in, sn_dtype low, sn_graph **out, int *n_stored,
                         sn_err *e) {
    *out = NULL;
    *n_stored = 0;
    if (low != SN_BF16 && low != SN_F16)
        return sn_fail(e, SN_ERR_INVALID, "base16: %s is not a 16-bit float dtype (give bf16 or "
                       "f16, the autocast pass's compute dtype)", sn_dtype_name(low));
    if (in->has_backward)
        return sn_fail(e, SN_ERR_INVALID, "base16: the graph has a backward; run the pass on the "
                       "forward graph, before autodiff");
    sn_rewrite r;
    sn_status st = sn_rewrite_begin(&r, in, e);
    if (st) return st;
    for (int i = 0; i < in->n_nodes; i++) {
        const sn_node *n = in->nodes[i];
        if (n->dtype != SN_F32 || !sn_linear_weight(in, n)) {
            sn_rewrite_copy(&r, n);
            continue;
        }
        sn_node *ins[SN_MAX_INPUTS], p = sn_rewrite_proto(&r, n, ins);
        p.dtype = low; /* its name, shape, init rule and frozen mark */
        sn_node *w = sn_rewrite_emit(&r, n, &p);
        /* the products read it widened (exact) until autocast, which casts their operands to
           low and finds a widened 16-bit value there: the value itself, no cast */
        if (w) r.map[n->id] = sn_cast(r.g, w, SN_F32);
        (*n_stored)++;
    }
    return sn_rewrite_end(&r, "base16", out, e);
}
