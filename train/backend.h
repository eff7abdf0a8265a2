/* backend.h: how the trainer executes its graph and its optimizer step: compiled (fuse,
 * memplan) and run by a device's executor, the reference interpreter's included.
 * Convention: the backend owns every parameter's fp32 weights and the optimizer state (device
 * memory, reached only through the executor); trainable parameters,
 * their gradients, gradient sums and moments m, v are flat ranges of one layout (kernel.h,
 * "the optimizer step"), so each piece of the step is one kernel launch. */
#ifndef SN_BACKEND_H
#define SN_BACKEND_H

#include "passes/pipeline.h"
#include "runtime/device.h"
#include "train.h"

typedef struct sn_backend sn_backend;

/* device NULL: the reference interpreter (a device the backend makes and owns). g: loss,
 * backward, i32 inputs idx and targets;
 * params: every PARAM of g (frozen ones included), the order the trainer numbers them.
 * compile: sn_compile's options for the device (NULL: zeroed; a NULL target: the device's).
 * offload (with a device): the
 * moments, the gradient sums and the master weights in host memory, AdamW on the CPU
 * (offload.h); the device keeps the step's scalars and computes the norm. */
sn_status sn_backend_new(sn_graph *g, sn_node *const *params, int n_params, sn_device *device,
                         const sn_pipeline_opts *compile, bool offload, sn_backend **out,
                         sn_err *e);
void sn_backend_free(sn_backend *b);
const char *sn_backend_name(const sn_backend *b);

/* Forward and backward on one batch (B*T ids each); *loss gets the loss. The gradients stay
 * on the backend until the next run. */
sn_status sn_backend_run(sn_backend *b, const sn_node *idx, const sn_node *targets,
                         const int32_t *x, const int32_t *y, double *loss, sn_err *e);

/* Sets an f32 scalar INPUT of g (the loss scale) for the runs that follow. */
sn_status sn_backend_set_scalar(sn_backend *b, const sn_node *input, float v, sn_err *e);

/* Parameter i's weights, moments, or gradient (sums: the gradient sums, else the last run's)
 * to or from the host (numel floats). A frozen parameter has no moments or gradient: they
 * read as zeros and setting them does nothing. */
sn_status sn_backend_get(sn_backend *b, int i, sn_param_which which, bool sums, float *host, sn_err *e);
sn_status sn_backend_set(sn_backend *b, int i, sn_param_which which, const float *host, sn_err *e);

/* The gradient sums: = the last run's gradients (add false), or += them (add true). */
sn_status sn_backend_sum_grads(sn_backend *b, bool add, sn_err *e);

/* Uploads the step's scalars (kernel.h SN_OPT_*), then the global norm of (gradients or sums)
 * * scal[SN_OPT_INV_MICRO] and the clip scale on the device; *norm comes back. */
sn_status sn_backend_norm(sn_backend *b, bool sums, const float scal[SN_OPT_SCALARS], double *norm,
                          sn_err *e);
/* AdamW on every trainable parameter from the gradients or sums, with the scalars of the
 * last sn_backend_norm. */
sn_status sn_backend_adamw(sn_backend *b, bool sums, sn_err *e);

/* The compiled program and its executor, for reports. */
const sn_program *sn_backend_program(const sn_backend *b);
sn_exec *sn_backend_exec(const sn_backend *b);
/* Bytes of optimizer state (moments, gradient sums, scalars) held besides the program's: on
 * the device (the interpreter's memory counts here), and offloaded to the host (masters,
 * moments, sums, one chunk of gradients). */
int64_t sn_backend_state_bytes(const sn_backend *b);
int64_t sn_backend_host_state_bytes(const sn_backend *b);

#endif
