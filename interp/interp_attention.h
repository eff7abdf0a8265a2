/* interp_attention.h: the reference interpreter's fused-attention kernels (interp_attention.c),
 * called by interp.c's eval(). Same value convention as interp.c: contiguous doubles. */
#ifndef SN_INTERP_ATTENTION_H
#define SN_INTERP_ATTENTION_H

#include "ir/ir.h"

/* y (n's shape) = the attention op n (kind SN_K_ATTENTION) of its inputs' values in[];
 * SN_ERR_OOM when its row of scores cannot be allocated. */
sn_status sn_interp_attention(const sn_node *n, double *const *in, double *y, sn_err *e);

#endif
