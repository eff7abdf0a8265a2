/* pointwise.h: what the pointwise emitters of every device share (llvm_pointwise.c,
 * cuda_pointwise.c): the dtype check and the simplified index space.
 * Convention: the simplified space walks the elements in the kernel's own row-major order, so
 * element i stays element i; only the coordinates the accesses are written in change. */
#ifndef SN_POINTWISE_H
#define SN_POINTWISE_H

#include "kernel.h"

/* Whether op, as a pointwise instruction, passes its operand through or is a constant: a view
 * folded into an access (reshape, permute, ...), concat's sum of masked parts, full, const. */
bool sn_pw_is_identity(sn_op op);

/* A device's dtype rule: SN_OK, or SN_ERR_UNSUPPORTED with a message naming kernel k and node n. */
typedef sn_status (*sn_pw_dtype_check)(const sn_kernel *k, const sn_node *n, sn_err *e);

/* Whether the anchor and every arg and instruction node of k pass a device's dtype rule (the kernel's
 * contract is sn_kernel_check's). */
sn_status sn_kernel_dtypes(const sn_kernel *k, sn_pw_dtype_check dtype_ok, sn_err *e);

/* The index space after simplification, with the kernel's accesses rewritten over it. */
typedef struct {
    int rank;                       /* >= 1: a scalar space is one dim of size 1 */
    int64_t shape[SN_MAX_RANK];
    int n_access;                   /* the kernel's n_access */
    sn_access acc[SN_KER_MAX_ARGS]; /* [n_access] the kernel's accesses over this space */
    bool zero[SN_KER_MAX_ARGS];     /* [n_access] the mask excludes every element: reads 0 */
} sn_pw_space;

/* Fills s from pointwise kernel k: size-1 dims dropped (a mask on one either keeps its one
 * coordinate and goes, or excludes it and the access reads 0), then neighbouring dims merged
 * where every access walks them contiguously and none is masked on either; rank 0 becomes one
 * dim of size 1. Masks that survive are left as they are.
 * requires: sn_kernel_check passed; k->n_access <= SN_KER_MAX_ARGS (as fuse makes them). */
void sn_pw_space_fill(sn_pw_space *s, const sn_kernel *k);

#endif
