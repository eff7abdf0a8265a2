/* program.h: a compiled program: plain data that every device executes the same way.
 * Convention: an ordered list of kernels (the steps) over values; each value a byte range
 * either in one reusable arena (offsets assigned by liveness) or in the persistent block
 * (inputs, parameters, constants, outputs). Nothing after `schedule` decides semantics. */
#ifndef SN_PROGRAM_H
#define SN_PROGRAM_H

#include "kernel.h"
#include "target.h"

typedef struct {
    const sn_node *node; /* the materialised node; NULL for a kernel's scratch (kernel.h: the
                            partial sums between a PARTIAL and its FINISH kernel) */
    int64_t bytes;
    bool persistent;     /* lives in the persistent block for the whole run */
    int64_t offset;      /* bytes into the arena, or into the persistent block */
    int alias;           /* -1, or the value whose buffer this one is (a free reshape) */
    int first, last;     /* steps that write it first and read it last (-1: before the program) */
} sn_value;

typedef struct sn_program {
    const sn_graph *g;   /* the compiled graph: must outlive the program */
    sn_target target;    /* what it was compiled for (sn_pipeline_opts.target): a device whose
                            target is of another kind or architecture does not run it */
    sn_arena arena;      /* kernels and their arrays */
    int n_kernels;
    sn_kernel **kernels; /* in execution order */
    int n_values;
    sn_value *values;
    int *value_of;       /* [g->n_nodes]: node id -> value index, -1 if not materialised */
    /* Weight shadows: the 16-bit copy of a parameter that products read (the autocast pass's
     * cast of it) is a persistent value that no step computes. The trainer's AdamW writes it
     * in the pass that updates the weights (kernel.h: flat_low); the executor runs its cast
     * kernel here before the next step whenever the parameter was written from the host
     * (sn_exec_set, uploads: initialisation, checkpoints, offload's host AdamW). The copies of
     * the trainable parameters lie in one flat range parallel to theirs (memplan.c). */
    int n_shadows;
    sn_kernel **shadows; /* pointwise casts, args[0] the copy and args[1] the parameter; after
                            the step's kernels in `kernels`' array */
    int64_t arena_bytes;      /* the planner's predicted peak of the reusable arena */
    int64_t persistent_bytes; /* the persistent block */
    int64_t sum_bytes;        /* every arena value's size added up (what no reuse would take) */
} sn_program;

void sn_program_free(sn_program *p);

/* Prints the kernels and the memory plan (sinter graph --dump-after memplan). */
void sn_program_print(const sn_program *p, FILE *f);

#endif
