/* interp_int.h: the reference interpreter's internal header, one section per file: the kernels
 * interp.c's eval() calls. Same value convention as interp.c: contiguous doubles. */
#ifndef SN_INTERP_INT_H
#define SN_INTERP_INT_H

#include "ir/ir.h"

/* ---- interp.c ---- */

/* The last dimension of x (1 for a scalar): a row's length. */
static inline int64_t sn_interp_last_dim(const sn_node *x) {
    return x->rank ? x->shape[x->rank - 1] : 1;
}
/* "[1,2]": the multi-index of flat position i in shape, for messages. */
char *sn_interp_index_str(int64_t i, int rank, const int64_t *shape, char *buf, size_t len);

/* ---- interp_rows.c ---- */

/* The row ops with one output row per input row. in: (x (R, C), then w (C) / b (C) / dy (R, C)
 * as the op takes them); the _BWD_W ops accumulate into y (C). */
void sn_interp_rows(const sn_node *n, double *const *in, double *y);
/* logits (R, V), targets (R) -> scalar mean loss, or (R, V) gradient (with dloss); only the
 * first Vr = a.end classes take part when a.end > 0 (padded vocabulary). SN_ERR_INVALID names
 * a target outside the vocabulary. */
sn_status sn_interp_cross_entropy(const sn_node *n, double *const *in, double *y, sn_err *e);
/* EMBEDDING: table (V, C), ids (..) -> (.., C); EMBEDDING_BWD: ids (..), dy (.., C) -> (V, C).
 * SN_ERR_INVALID names an id outside the table. */
sn_status sn_interp_embedding(const sn_node *n, double *const *in, double *y, sn_err *e);

/* ---- interp_attention.c ---- */

/* y (n's shape) = the attention op n (kind SN_K_ATTENTION) of its inputs' values in[];
 * SN_ERR_OOM when its row of scores cannot be allocated. */
sn_status sn_interp_attention(const sn_node *n, double *const *in, double *y, sn_err *e);

#endif
