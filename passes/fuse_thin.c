/* fuse_thin.c: the thin product (kernel.h: SN_KER_THIN): a GEMM kernel of many rows and few
 * columns (LoRA's x A and dy B^T), a short contraction (the expansions h B, dh A^T) or a sum
 * over many rows into few rows or columns (the weight gradients h^T dy, x^T dh: split in two by
 * fuse.c, sn_fuse_split_decode; sn_target.thin_sums) becomes a generated kernel that moves x or
 * y once at the memory's speed, where the target makes them (sn_target.thin_products: CUDA).
 * Convention: decided on the GEMM kernel as fuse made it (its epilogue and args settled), so the
 * thin product is exactly the GEMM kernels that store the product or its 16-bit cast (the sum
 * form: the f32 product) and nothing else. */
#include <stdio.h>

#include "fuse_int.h"

void sn_fuse_thin(fuse_state *s, sn_kernel *k) {
    if (!s->t || !s->t->thin_products || k->kind != SN_KER_GEMM || k->stage != SN_SUM_WHOLE)
        return;
    const sn_node *mm = k->anchor;
    if (k->gemm.epilogue != SN_EPI_NONE || k->gemm.accum || k->gemm.view[0].ld ||
        k->gemm.view[1].ld || k->gemm.view[0].off || k->gemm.view[1].off || k->n_out != 1 ||
        k->n_in != 2 || k->args[1] != mm->in[0] || k->args[2] != mm->in[1] ||
        !sn_thin_shape_fits(mm))
        return;
    if (mm->a.ta && (k->args[0] != mm || !s->t->thin_sums)) return; /* the sum form stores
                                                                        the f32 matmul */
    sn_thin t = sn_thin_plan(mm);
    k->kind = SN_KER_THIN;
    snprintf(k->name, sizeof k->name, "k%d_%s%s", k->id,
             t.sum ? "thin_sum" : t.rank ? "expand" : "thin", mm->a.tb ? "_t" : "");
    sn_kernel_work(k, &k->n_items, &k->serial);
}
