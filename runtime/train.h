/* train.h: training a graph's parameters: initialisation from the graph's init rules, AdamW
 * with decoupled weight decay, global gradient-norm clipping and a cosine learning rate with
 * linear warm-up. Convention: the trainer owns fp32 master copies of the parameters and the
 * optimizer moments on the host; the graph it runs (today: on the reference interpreter)
 * computes the loss and the gradients. */
#ifndef SN_TRAIN_H
#define SN_TRAIN_H

#include "../ir/ir.h"

typedef struct {
    int steps;          /* optimizer steps in the run (for the schedule) */
    float lr;           /* peak learning rate */
    float min_lr_frac;  /* the cosine ends at lr * min_lr_frac */
    int warmup;         /* linear warm-up steps */
    float weight_decay; /* decoupled; applied only to parameters of rank >= 2 */
    float beta1, beta2, eps;
    float grad_clip;    /* global L2 norm; 0 disables */
    uint64_t seed;      /* parameter initialisation */
} sn_train_opts;

/* AdamW (0.9, 0.95, 1e-8), weight decay 0.1, clip 1.0, lr 1e-3, warm-up 10% of steps. */
void sn_train_opts_default(sn_train_opts *o, int steps);

/* The learning rate of step (0-based). */
float sn_train_lr(const sn_train_opts *o, int step);

/* Fills dst (numel) from p's init rule; the stream depends on seed and p's name only. */
void sn_param_init(const sn_node *p, float *dst, uint64_t seed);

typedef struct {
    double loss;      /* before the update */
    double grad_norm; /* before clipping */
    float lr;
} sn_step_stats;

typedef struct sn_trainer sn_trainer;

/* g must have a loss and a backward (sn_backward), and two i32 INPUTs named "idx" and
 * "targets" of the same shape (B, T). */
sn_trainer *sn_trainer_new(sn_graph *g, const sn_train_opts *o, sn_err *e);
void sn_trainer_free(sn_trainer *t);

/* One step on a batch (B*T ids each). A NaN or infinite loss or gradient is reported as
 * SN_ERR_NUMERIC and the parameters are left as they were. */
sn_status sn_trainer_step(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                          sn_step_stats *st, sn_err *e);
/* The loss on a batch without updating anything. */
sn_status sn_trainer_eval(sn_trainer *t, const int32_t *idx, const int32_t *targets, double *loss,
                          sn_err *e);
/* Optimizer steps taken so far. */
int sn_trainer_step_count(const sn_trainer *t);

#endif
