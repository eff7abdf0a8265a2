/* program.h: a compiled program: plain data that every device executes the same way.
 * Convention: an ordered list of kernels (the steps) over values; each value a byte range
 * either in one reusable arena (offsets assigned by liveness) or in the persistent block
 * (inputs, parameters, constants, outputs). Nothing after `schedule` decides semantics. */
#ifndef SN_PROGRAM_H
#define SN_PROGRAM_H

#include "kernel.h"

typedef struct {
    const sn_node *node; /* the materialised node */
    int64_t bytes;
    bool persistent;     /* lives in the persistent block for the whole run */
    int64_t offset;      /* bytes into the arena, or into the persistent block */
    int alias;           /* -1, or the value whose buffer this one is (a free reshape) */
    int first, last;     /* steps that write it first and read it last (-1: before the program) */
} sn_value;

typedef struct sn_program {
    const sn_graph *g;   /* the compiled graph: must outlive the program */
    sn_arena arena;      /* kernels and their arrays */
    int n_kernels;
    sn_kernel **kernels; /* in execution order */
    int n_values;
    sn_value *values;
    int *value_of;       /* [g->n_nodes]: node id -> value index, -1 if not materialised */
    int64_t arena_bytes;      /* the planner's predicted peak of the reusable arena */
    int64_t persistent_bytes; /* the persistent block */
    int64_t sum_bytes;        /* every arena value's size added up (what no reuse would take) */
} sn_program;

void sn_program_free(sn_program *p);

/* ---- the passes after autodiff, in order (one file each) ---- */

/* fuse.c: requires a verified graph (after autodiff). Decides which nodes are materialised and
 * which nodes each kernel computes: pointwise chains (with the views they read folded into
 * strided accesses) in one kernel each, a row op with the pointwise chains that compute its
 * operands and consume its result (residual + layernorm, layernorm_bwd + residual gradient),
 * one kernel per reduction, matmul, attention op and gather. A node that other kernels also
 * read is computed by the kernel of its earliest reader when that reader can compute it (a
 * pointwise op over the same elements, or the row op's per-element operand) and stored there
 * as an extra output; every other reader runs after that kernel. Produces p->kernels in
 * graph order (each at the last node it computes) and p->values with sizes and aliases. */
sn_status sn_fuse(const sn_graph *g, sn_program **out, sn_err *e);

/* memplan.c: requires fuse. Computes each value's live range over the kernel order and
 * assigns arena offsets (best fit, never two overlapping live ranges in the same bytes);
 * sets arena_bytes, persistent_bytes and sum_bytes. */
sn_status sn_memplan(sn_program *p, sn_err *e);

/* Prints the kernels and the memory plan (sinter graph --dump-after memplan). */
void sn_program_print(const sn_program *p, FILE *f);

#endif
