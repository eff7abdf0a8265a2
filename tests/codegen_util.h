/* codegen_util.h: what the LLVM code generator's suites share (test_codegen.c: kernels against
 * the interpreter; test_codegen_driver.c: the JIT driver, errors, threads, speed): a graph with
 * its reference values, kernels made by hand, and running them over uneven splits.
 * Convention: kernels are made by hand from one node, or a chain of pointwise nodes, the way
 * passes/fuse.c makes them; outputs are poisoned with NaN before every run. */
#ifndef SN_TEST_CODEGEN_UTIL_H
#define SN_TEST_CODEGEN_UTIL_H

#include <stdint.h>

#include "codegen/llvm/llvm.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "harness.h"

#define TOL 2e-6
#define MAX_NODES 1024

/* ---- a graph, its reference values, and host copies of values as kernels read them ---- */

typedef struct {
    sn_graph *g;
    sn_interp *it;
    void *host[MAX_NODES]; /* by node id: float* or int32_t* */
    unsigned seed;
    int lanes;             /* vector width of the JIT (0: the host's) */
} tcase;

/* Loop tests run at the host's vector width, then at 8 and 4 lanes (AVX2, SSE). */
#define LANES (_i == 1 ? 8 : _i == 2 ? 4 : 0)

void tc_init(tcase *t, int lanes);
void tc_free(tcase *t);
float rnd(unsigned *s); /* uniform in [0, 1) */
sn_node *in_f32(tcase *t, const char *name, sn_shape s, float lo, float hi);
sn_node *in_i32(tcase *t, const char *name, sn_shape s, const int32_t *vals);
/* Runs the reference interpreter over the whole graph (every value kept). */
void tc_run(tcase *t);
/* The host copy of n's value: an input's data, else the interpreter's value as f32/i32. */
void *host_of(tcase *t, const sn_node *n);

/* ---- kernels made by hand ---- */

/* A JIT of `lanes` f32 lanes (0: the host's). */
sn_jit *new_jit(int lanes);
/* Whether this build has the JIT; if not, prints "<suite>: <why>" (the suites then test nothing). */
bool have_jit(const char *suite);

/* A kernel computing node n alone (ROW, REDUCE, GATHER) with the item split llvm.h asks for. */
void node_kernel(sn_kernel *k, sn_kernel_kind kind, const sn_node *n);

/* A pointwise kernel under construction: instructions and accesses as fuse makes them. */
typedef struct {
    sn_kernel k;
    sn_pw_instr instr[32];
    sn_access acc[16];
} pwk;

/* An empty pointwise kernel over space's shape storing n_out outputs. */
void pw_init(pwk *p, const sn_node *space, int n_out, const sn_node *const *outs);
/* access of x at offset + sum i_d stride[d], optionally masked to [lo, hi) on axis */
sn_ref pw_access(pwk *p, const sn_node *x, int64_t offset, const int64_t *stride, int axis,
                 int64_t lo, int64_t hi);
/* instruction node n over in[0, nin); returns its index */
int pw_op(pwk *p, const sn_node *n, int nin, const sn_ref *in);
/* n and the pointwise nodes under it as instructions; other nodes are accesses, FULLs constants */
sn_ref pw_chain(pwk *p, const sn_node *n);
/* output o stores n's instruction */
void pw_store(pwk *p, int o, const sn_node *n);
/* one-output pointwise kernel of the chain under n */
void pw_of(pwk *p, const sn_node *n);

/* ---- running and comparing ---- */

sn_cpu_kernel_fn compile_one(sn_jit *j, sn_kernel *k);
/* Output o of k (in buf) against the interpreter; equal values (infinities too) agree. */
void compare_out(sn_interp *it, const sn_kernel *k, int o, const void *buf, double tol, const char *how);
/* Runs k over [0, n_items) whole, in two and in three uneven parts (serial kernels: whole
 * only), each time into NaN-poisoned outputs, and compares with the interpreter. */
void check_kernel(tcase *t, sn_kernel *k, double tol);
void check_node(tcase *t, sn_kernel_kind kind, const sn_node *n, double tol);

#endif
