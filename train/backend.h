/* backend.h: how the trainer executes its graph: on the reference interpreter, or compiled
 * (fuse, memplan) and run by a device's executor. Convention: the backend owns the parameters'
 * fp32 master weights (on the CPU device they are the program's own parameter buffers, so a
 * step copies no weights); the trainer owns the optimizer state and the gradient sums. */
#ifndef SN_BACKEND_H
#define SN_BACKEND_H

#include "passes/pipeline.h"
#include "runtime/device.h"

typedef struct sn_backend sn_backend;

/* device NULL: the reference interpreter. g: loss, backward, i32 inputs idx and targets.
 * compile: sn_compile's options for the device (NULL: zeroed). */
sn_status sn_backend_new(sn_graph *g, sn_node *const *params, int n_params, sn_device *device,
                         const sn_pipeline_opts *compile, sn_backend **out, sn_err *e);
void sn_backend_free(sn_backend *b);
const char *sn_backend_name(const sn_backend *b);

/* Parameter i's master weights: numel floats, read before each run, updated in place. */
float *sn_backend_weights(sn_backend *b, int i);

/* Forward and backward on one batch (B*T ids each); *loss gets the loss. */
sn_status sn_backend_run(sn_backend *b, const sn_node *idx, const sn_node *targets,
                         const int32_t *x, const int32_t *y, double *loss, sn_err *e);

/* d loss / d parameter i of the last run (numel floats, valid until the next run). */
const float *sn_backend_grad(sn_backend *b, int i);

/* The AdamW update of parameter i from gradient g (kernel.h lists hyper[8]). */
sn_status sn_backend_adamw(sn_backend *b, int i, float *m, float *v, const float *g,
                           const float *hyper, sn_err *e);

/* The compiled program and its executor (NULL on the interpreter), for reports. */
const sn_program *sn_backend_program(const sn_backend *b);
sn_exec *sn_backend_exec(const sn_backend *b);

#endif
