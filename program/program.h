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
    int alias;           /* -1, or the value whose buffer this one is (a free reshape), or
                            whose buffer this one starts at (a frozen block, below) */
    int first, last;     /* steps that write it first and read it last (-1: before the program) */
} sn_value;

/* Every value's offset is a multiple of SN_VALUE_ALIGN bytes (memplan). A frozen block: the
 * concatenation along the rows of values no kernel of the step writes, of one dtype, each a
 * whole number of SN_VALUE_ALIGN bytes: frozen parameters (passes/siblings.c: LoRA's base of
 * q, k and v joined) or weight shadows (the 16-bit casts of trained f32 parameters that AdamW
 * writes between steps: full training's q, k and v joined) (sn_frozen_block). Where fuse takes
 * it so (every part a persistent value: a shadow only where the program has weight shadows),
 * it is no copy but a persistent value aliasing its first part: memplan lays the parts out one
 * after the other (trained parameters consecutive in the flat range, so their shadows are), so
 * their bytes are the concatenation's. */
enum { SN_VALUE_ALIGN = 64 };
bool sn_frozen_block(const sn_node *n);

/* ---- the parameter layout ----
 * Where every parameter of the graph and its training state lie: written by memplan, read by
 * the trainer (runner.c), through it by the optimizer kernels (kernel.h: flat_n, flat_decay,
 * flat_low) and the checkpoints (parameters by name in this order), and by the plan (plan.c).
 * Nothing else works out a parameter's place, its decay or whether it trains.
 * Convention: byte offsets are into the persistent block. The trained parameters form one flat
 * f32 range of flat_n elements (padding included) at `params`, their gradients the same range
 * at `grads`, and the trainer's own buffers (moments m, v, gradient sums) the same range from
 * their byte 0: a trained slot's `flat` is its first element in all of them, the decayed ones
 * are [0, flat_decay). Where trained parameters have weight shadows (the 16-bit copies AdamW
 * writes), those are a range of flat_n elements of dtype `low` at `shadows`, element `flat`
 * for each. sn_param_layout_check (param_layout.c) checks all of this against the program. */
typedef struct {
    const sn_node *node; /* the PARAM (its name and shape) */
    sn_dtype dtype;      /* its weights' dtype */
    int64_t numel;
    int64_t value;       /* its weights, or -1: the program does not keep them (never read) */
    int64_t grad;        /* its gradient; -1 when frozen */
    int64_t shadow;      /* its weight shadow (program.h), or -1: none */
    int64_t flat;        /* its first element in the flat ranges; -1 when frozen */
    bool decay;          /* AdamW's weight decay applies (the rule is memplan's: rank >= 2) */
    bool frozen;         /* not trained (sn_param_freeze, or no gradient reaches it): no
                            gradient, moments or decay */
} sn_param_slot;

typedef struct {
    int n;                 /* every PARAM of the graph, in graph order (sn_graph_params') */
    sn_param_slot *slots;  /* [n], in the program's arena */
    int64_t flat_n;        /* elements of the flat range (0: nothing is trained) */
    int64_t flat_decay;    /* its decayed prefix */
    int64_t params, grads; /* element 0 of the parameters' and the gradients' ranges (-1: none) */
    sn_dtype low;          /* the trained parameters' weight shadows' dtype; SN_F32: none */
    int64_t shadows;       /* their element 0 (-1: none) */
} sn_param_layout;

/* The order of the trained parameters within each part (decayed, not) of the flat range:
 * memplan's choice, which readers of the layout never assume (reversed: for the tests). */
typedef enum { SN_PARAM_ORDER_GRAPH, SN_PARAM_ORDER_REVERSED, SN_PARAM_ORDER_COUNT } sn_param_order;

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
     * the trained parameters lie in one flat range parallel to theirs (the layout below). */
    int n_shadows;
    sn_kernel **shadows; /* pointwise casts, args[0] the copy and args[1] the parameter; after
                            the step's kernels in `kernels`' array */
    sn_param_layout layout;   /* the parameters' places (memplan) */
    int64_t arena_bytes;      /* the planner's predicted peak of the reusable arena */
    int64_t persistent_bytes; /* the persistent block */
    int64_t sum_bytes;        /* every arena value's size added up (what no reuse would take) */
} sn_program;

void sn_program_free(sn_program *p);

/* The value whose buffer value v of p uses: v, or the root its aliases (reshapes, frozen
 * blocks, memplan's in-place sums) lead to. */
int sn_value_root(const sn_program *p, int v);

/* kernel_check.c: every kernel of p (the step's and the weight shadows') keeps kernel.h's
 * contract (sn_kernel_check), and a two-stage kernel's scratch is one of p's values; the
 * pipeline checks it after each kernel pass. */
sn_status sn_program_check(const sn_program *p, sn_err *e);

/* kernel_check.c: whether attention kernel k (its contract checked) runs on target t's tensor
 * cores: bf16 or f16 that t multiplies, head sizes multiples of 16, every 16-bit input's and
 * output's offset and strides multiples of 8 elements (16-byte loads). The CUDA kernels take
 * the mma path exactly then; fuse gives the atomic dq only to such dk/dv kernels. */
bool sn_kernel_att_tensor_cores(const sn_kernel *k, const sn_target *t);

/* param_layout.c: the slot of PARAM n in p's layout, or NULL. */
const sn_param_slot *sn_param_layout_find(const sn_param_layout *l, const sn_node *n);
/* The elements of the trained parameters (LoRA trains few of them). */
int64_t sn_param_layout_trained(const sn_param_layout *l);
/* Whether p->layout says what the program's values and graph say: every PARAM once, in graph
 * order, at its value's offset (gradient, shadow too); trained slots at their flat element in
 * the parameters', gradients' and shadows' ranges, without overlap, the decayed ones first.
 * A broken layout is SN_ERR_INTERNAL naming the parameter (a bug in memplan). */
sn_status sn_param_layout_check(const sn_program *p, sn_err *e);

/* last_write.c: the last step of p that writes any byte of the persistent block's [at, at +
 * bytes), or -1 when no step writes there (the bytes stay what they were before the run): a
 * copy of the range that starts after that step reads what the whole run leaves. Conservative:
 * a step writes all of each output's buffer (its root value's: an in-place sum writes the
 * persistent value it aliases), a joined FINISH (tail) in its host's step. */
int sn_program_last_write(const sn_program *p, int64_t at, int64_t bytes);
/* The last step of p that reads or writes any byte of the persistent block's [at, at + bytes)
 * (any of its args' buffers, its root value's, there), or -1: a copy into the range that starts
 * after that step changes nothing the run reads (the delayed update's weights going up during
 * the next step's backward: train/runner.c). Conservative as sn_program_last_write. */
int sn_program_last_use(const sn_program *p, int64_t at, int64_t bytes);

/* Prints the kernels and the memory plan (sinter graph --dump-after memplan). */
void sn_program_print(const sn_program *p, FILE *f);

#endif
