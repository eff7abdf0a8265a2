/* plan.h: what a training run needs in device memory, and the choice that fits a budget:
 * micro-batch and accumulation steps, checkpoint policy. Convention: every byte figure is the
 * compiled program's (fuse + memplan: the arena and persistent block the device allocates) plus
 * the trainer's optimizer state (sn_train_state_bytes), never a separate estimate.
 *
 *     sn_plan_opts o = {.batch = 16, .budget = 6LL << 30, .policy = -1, .compile = &po};
 *     sn_plan p;
 *     if (sn_plan_make(&o, build_gpt2, &cfg, &p, &e)) ...  // e names the smallest budget
 */
#ifndef SN_PLAN_H
#define SN_PLAN_H

#include "passes/pipeline.h"

/* Builds the forward graph (with its loss) for micro-batch B into *out. */
typedef sn_status (*sn_plan_graph_fn)(void *ctx, int micro_batch, sn_graph **out, sn_err *e);

typedef struct {
    int batch;          /* sequences per optimizer step */
    int64_t budget;     /* device bytes (0: none: plan the batch as one micro-batch) */
    int micro_batch;    /* 0: the largest divisor of batch that fits; else this one */
    int policy;         /* an sn_recompute_policy, or -1: none when it fits, else budget */
    const sn_pipeline_opts *compile; /* target and forward rewrites (backward is implied) */
    int offload;        /* an sn_plan_offload: AdamW's moments, the gradient sums and the
                           master weights in host memory (ZeRO-Offload, sn_train_opts.offload) */
    bool offload_delay; /* with offload: the delayed update's (sn_train_opts.offload_delay) host
                           bytes too */
    int64_t chunk_logits; /* the LM head in chunks (the chunk_logits pass): 0: as compile has it;
                             SN_CHUNK_LOGITS_AUTO: the pass's choice when the plan does not fit
                             with the logits whole (before checkpointing); N > 0: N rows always */
} sn_plan_opts;

typedef enum {
    SN_PLAN_OFFLOAD_NEVER,     /* the optimizer state on the device */
    SN_PLAN_OFFLOAD_AS_NEEDED, /* on the host when nothing fits with it on the device */
    SN_PLAN_OFFLOAD_ALWAYS     /* on the host */
} sn_plan_offload;

typedef struct {
    int micro_batch, accum; /* accum micro-batches of micro_batch sequences per step */
    int policy;             /* the sn_recompute_policy applied */
    sn_precision precision; /* the compile options' (bf16/fp16: the autocast pass ran) */
    int recomputed;         /* forward nodes recomputed */
    int64_t chunk_logits;   /* the compile option that gave the plan's program (0: head whole) */
    int logits_chunks;      /* the chunks it made */
    int64_t params, trained; /* parameter elements; those trained (not frozen: LoRA trains few) */
    double extra_flops;     /* recompute FLOPs over the step's FLOPs without it */
    /* the persistent block, split */
    int64_t weights, grads, io; /* parameters; their gradients; inputs, outputs (loss) */
    int64_t weights16;      /* of weights: parameters stored in 16 bits (the base16 pass) */
    int64_t nf4_codes, nf4_scales; /* of weights: NF4 storage (QLoRA's base, ir/nf4.h): the 4-bit
                                      codes, and the 8-bit block scales, their f32 group steps and
                                      mean */
    int64_t weights_trained; /* of weights: the trained parameters (f32 masters) */
    int64_t shadows;        /* the 16-bit weight shadows of f32 parameters (program.h) */
    int64_t persistent;
    /* optimizer state: AdamW moments, gradient sums (when accum > 1), the step's scalars */
    bool offload;           /* masters, moments and sums in host memory (train with offload) */
    int64_t opt_device, opt_host; /* on the device; offloaded to the host (sn_trainer_host_state_bytes) */
    int64_t delay_host;     /* with offload: what the delayed update (offload_delay) adds to opt_host */
    int64_t arena;          /* the planned arena (activations and temporaries) */
    int64_t workspace;      /* other device allocations (0 on the CPU) */
    /* validation's evaluation program (runner.h sn_runner_eval): it reads the parameters in
     * place and runs in the training arena while no step runs, so what it adds is its own
     * persistent values (ids, targets, loss) and any arena beyond the training one's */
    int64_t eval_arena;     /* its planned arena */
    int64_t eval;           /* what it adds to the device's memory */
    int64_t total;          /* persistent + opt_device + arena + workspace + eval */
    int64_t total_without;  /* the same micro-batch without checkpointing */
    int64_t arena_budget;   /* what the budget policy was given (compile with it again to
                               get this very program) */
    /* when nothing fits (SN_ERR_OOM): */
    int64_t min_budget;     /* the smallest budget for which a plan exists */
    int max_micro_batch;    /* the largest divisor of batch that fits the budget (0: none) */
} sn_plan;

/* The optimizer state the trainer allocates for program p (train.h: moments, the step's
 * scalars, and the gradient sums when sums). */
int64_t sn_train_state_bytes(const sn_program *p, bool sums);

/* Compiles graph g (a forward graph: autodiff and checkpoint run here with o->compile and
 * policy/budget) and fills the figures of *pl for accum micro-batches per step (the optimizer
 * state on the host with offload). *prog gets the program (g must outlive it) when prog is not
 * NULL. */
sn_status sn_plan_measure(sn_graph *g, const sn_pipeline_opts *compile, int policy,
                          int64_t arena_budget, int accum, bool offload, sn_plan *pl,
                          sn_program **prog, sn_err *e);

/* Chooses: micro-batches from the largest divisor of o->batch down, each without checkpointing
 * if it fits, else (o->chunk_logits SN_CHUNK_LOGITS_AUTO) with the LM head in chunks if that
 * fits, else with the budget policy on what the budget leaves for the arena; the first
 * that fits is the plan; when none does and o->offload, the same again with offload (with
 * SN_PLAN_OFFLOAD_ALWAYS only with offload). Nothing fits: SN_ERR_OOM naming the smallest budget that would and
 * the largest micro-batch that fits (with *out's min_budget and max_micro_batch set). */
sn_status sn_plan_make(const sn_plan_opts *o, sn_plan_graph_fn build, void *ctx, sn_plan *out,
                       sn_err *e);

/* Prints the plan as a table (weights ... total) and the choice. */
void sn_plan_print(const sn_plan *pl, int64_t budget, FILE *f);

#endif
