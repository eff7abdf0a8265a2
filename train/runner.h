/* runner.h: how the trainer executes its graph and its optimizer step: compiled (fuse,
 * memplan) and run by a device's executor, the reference interpreter's included.
 * Convention: the runner owns every parameter's fp32 weights and the optimizer state (device
 * memory, reached only through the executor); trained parameters, their gradients, gradient
 * sums and moments m, v are flat ranges of one layout (kernel.h, "the optimizer step"), the
 * program's parameter layout (program.h), so each piece of the step is one kernel launch. */
#ifndef SN_RUNNER_H
#define SN_RUNNER_H

#include "passes/pipeline.h"
#include "runtime/device.h"
#include "train.h"

typedef struct sn_runner sn_runner;

/* device NULL: the reference interpreter (a device the runner makes and owns). g: loss,
 * backward, i32 inputs idx and targets; compiled by the kernel passes (sn_pipeline_kernels)
 * with compile's options for the device (NULL: zeroed; a NULL target: the device's). The
 * parameters are the program's parameter layout's (program.h: every PARAM of g, frozen ones
 * included, in graph order): parameter i below is its slot i.
 * offload (with a device): the
 * moments, the gradient sums and the master weights in host memory, AdamW on the CPU
 * (offload.h); the device keeps the step's scalars and computes the norm. */
sn_status sn_runner_new(sn_graph *g, sn_device *device, const sn_pipeline_opts *compile,
                        bool offload, sn_runner **out, sn_err *e);
void sn_runner_free(sn_runner *b);
const char *sn_runner_name(const sn_runner *b);

/* Forward and backward on one batch (B*T ids each); *loss gets the loss. The gradients stay
 * on the device until the next run. last: the step's last run (with the delay, where the
 * device copies asynchronously: the update in flight is finished and its weights go up during
 * this run, each chunk after the last kernel that reads it, so the next update sends nothing
 * up first; a run after it reads those weights). */
sn_status sn_runner_run(sn_runner *b, bool last, const sn_node *idx, const sn_node *targets,
                        const int32_t *x, const int32_t *y, double *loss, sn_err *e);

/* The loss alone (idx, targets: g's inputs), by the evaluation program: g's loss and what it
 * depends on, no backward (passes.h sn_pass_eval_graph), compiled at the first call with the
 * runner's compile options; it reads the training program's parameters and weight shadows in
 * place and runs in its arena (device.h sn_exec_new_sharing), its own memory its inputs and
 * loss (and an arena where the training one is smaller). The gradients on the device are left
 * as they were. */
sn_status sn_runner_eval(sn_runner *b, const sn_node *idx, const sn_node *targets,
                         const int32_t *x, const int32_t *y, double *loss, sn_err *e);
/* The evaluation program (compiled now if it was not yet; NULL on failure) and its executor
 * (NULL before the first evaluation), for reports and tests. */
const sn_program *sn_runner_eval_program(sn_runner *b, sn_err *e);
sn_exec *sn_runner_eval_exec(const sn_runner *b);

/* Sets an f32 scalar INPUT of g (the loss scale) for the runs that follow, evaluations
 * included (SN_RUNNER_SCALARS different inputs at most). */
enum { SN_RUNNER_SCALARS = 4 };
sn_status sn_runner_set_scalar(sn_runner *b, const sn_node *input, float v, sn_err *e);

/* Parameter i's weights, moments, or gradient (sums: the gradient sums, else the last run's)
 * to or from the host (numel floats; an NF4 parameter's weights: its numel packed bytes; with
 * offload a trained parameter's weights are the host's masters, which the device's f32 copy
 * may lag where only its weight shadow goes up). A frozen parameter has no moments or gradient: they
 * read as zeros and setting them does nothing. */
sn_status sn_runner_get(sn_runner *b, int i, sn_param_which which, bool sums, float *host, sn_err *e);
sn_status sn_runner_set(sn_runner *b, int i, sn_param_which which, const float *host, sn_err *e);

/* The gradient sums: = the last run's gradients (add false), or += them (add true). */
sn_status sn_runner_sum_grads(sn_runner *b, bool add, sn_err *e);

/* Uploads the step's scalars (kernel.h SN_OPT_*), then the global norm of (gradients or sums)
 * * scal[SN_OPT_INV_MICRO] and the clip scale on the device; *norm comes back. */
sn_status sn_runner_norm(sn_runner *b, bool sums, const float scal[SN_OPT_SCALARS], double *norm,
                         sn_err *e);
/* AdamW on every trainable parameter from the gradients or sums, with the scalars of the
 * last sn_runner_norm. */
sn_status sn_runner_adamw(sn_runner *b, bool sums, sn_err *e);

/* The delayed parameter update (DeepSpeed's DPU; with offload only, else SN_ERR_INVALID):
 * from here on a run brings its gradients to the host while its backward runs (each chunk
 * after the last kernel that writes it: sn_exec_run_copies), and sn_runner_adamw returns once
 * the previous update's weights are on the device, the host's AdamW of this step running
 * meanwhile (a thread of its own where the device copies asynchronously; on the CPU device at
 * the next update, the same numbers), so the next run reads the weights one update old.
 * Reading or setting a parameter and evaluating drain first (sn_runner_drain). The order:
 * runner.c. threads: the update's own thread and its pool's (0: the host's cores less one). */
sn_status sn_runner_delay(sn_runner *b, int threads, sn_err *e);
/* Finishes the update in flight and puts its weights on the device (nothing without one). */
sn_status sn_runner_drain(sn_runner *b, sn_err *e);

/* The compiled program and its executor, for reports; the program's parameter layout. */
const sn_program *sn_runner_program(const sn_runner *b);
const sn_param_layout *sn_runner_layout(const sn_runner *b);
sn_exec *sn_runner_exec(const sn_runner *b);
/* Bytes of optimizer state (moments, gradient sums, scalars) held besides the program's: on
 * the device (the interpreter's memory counts here), and offloaded to the host (masters,
 * moments, sums, the staging chunks of gradients or, with the delay, two gradient ranges). */
int64_t sn_runner_state_bytes(const sn_runner *b);
int64_t sn_runner_host_state_bytes(const sn_runner *b);
/* Seconds sn_runner_new spent in the kernel passes (sn_pipeline_kernels), the executor
 * (sn_exec_new) and the optimizer's buffers and kernels. */
void sn_runner_startup(const sn_runner *b, double *kernels_s, double *exec_s, double *optimizer_s);
/* With offload: train.h sn_offload_times so far (zeros without). */
void sn_runner_offload_times(const sn_runner *b, sn_offload_times *s);

#endif
