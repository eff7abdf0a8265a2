/* pointwise.h: what the pointwise emitters of every device share (llvm_pointwise.c,
 * cuda_pointwise.c): the kernel's check and its simplified index space.
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

/* Checks pointwise kernel k before it is generated: every arg and instruction node passes
 * dtype_ok, and every instruction is a pointwise op or an identity (else SN_ERR_UNSUPPORTED,
 * "<who>: instruction 2 is matmul (%5), which is not a pointwise op"); what fuse guarantees
 * (instructions refer back only, accesses read inputs, outputs have the space's numel) is
 * asserted. `who` names the kernel in messages: "kernel k3_pointwise". */
sn_status sn_pw_check(const sn_kernel *k, const char *who, sn_pw_dtype_check dtype_ok, sn_err *e);

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
 * requires: sn_pw_check passed; k->n_access <= SN_KER_MAX_ARGS (as fuse makes them). */
void sn_pw_space_fill(sn_pw_space *s, const sn_kernel *k);

#endif
