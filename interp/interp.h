/* interp.h: the reference interpreter, the oracle every backend and kernel is tested against.
 * Convention: every tensor is held as doubles; after each op the result is rounded to the
 * node's dtype (f32, bf16, f16 emulated; i32 exact), unless the interpreter is `exact`, in
 * which case float tensors keep full double precision (for finite-difference gradient checks). */
#ifndef SN_INTERP_H
#define SN_INTERP_H

#include "ir/ir.h"

typedef struct sn_interp sn_interp;

/* g must outlive the interpreter and pass sn_verify. NULL only when out of memory for its
 * per-node tables (a few bytes a node; the values come later, in sn_interp_set and _run, which
 * report SN_ERR_OOM). */
sn_interp *sn_interp_new(const sn_graph *g, bool exact);
void sn_interp_free(sn_interp *it);

/* Values of INPUT and PARAM nodes persist across runs until set again. Integer inputs take
 * integral values (ids); the setters check that and the range of i32. */
sn_status sn_interp_set(sn_interp *it, const sn_node *n, const float *data, sn_err *e);
sn_status sn_interp_set_f64(sn_interp *it, const sn_node *n, const double *data, sn_err *e);
sn_status sn_interp_set_i32(sn_interp *it, const sn_node *n, const int32_t *data, sn_err *e);

/* Keep every node's value after a run (tests); by default only leaves and graph outputs are
 * kept and intermediates are freed after their last use. */
void sn_interp_keep_all(sn_interp *it, bool keep);

/* Evaluates the graph. Fails if an INPUT or PARAM was never set, or an embedding id or target
 * is out of range (message names the node and the bad value). */
sn_status sn_interp_run(sn_interp *it, sn_err *e);

/* The value of n after a run (numel doubles), or NULL if it was not kept. */
const double *sn_interp_value(const sn_interp *it, const sn_node *n);

/* interp_optim.c: the reference of the optimizer kernels (program/kernel.h: GRAD_ACC, SQNORM,
 * CLIP, ADAMW) on host buffers in their documented order, over the items [begin, end). */
struct sn_kernel;
void sn_interp_optim(const struct sn_kernel *k, void *const *bufs, int64_t begin, int64_t end);

#endif
