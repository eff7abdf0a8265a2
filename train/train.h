/* train.h: training a graph's parameters: initialisation from the graph's init rules, AdamW
 * with decoupled weight decay, global gradient-norm clipping and a cosine learning rate with
 * linear warm-up. Convention: parameters, gradients and the optimizer state live where the
 * graph runs (a device, or the reference interpreter's host memory) and the whole step runs
 * there (runner.h); per step only token ids go up, the step's few scalars go up, and the loss
 * and the gradient norm come down. The host reaches weights and moments only through
 * sn_trainer_get_param / sn_trainer_set_param. Frozen parameters (sn_param_freeze) keep their
 * values and have no gradient or optimizer state.
 *
 *     sn_trainer *t = sn_trainer_new(g, &opts, &e);           // g: loss + backward, idx/targets
 *     for (k = 0; k < micro; k++) sn_trainer_accumulate(t, x[k], y[k], NULL, &e);
 *     sn_trainer_update(t, &stats, &e);                        // one optimizer step
 */
#ifndef SN_TRAIN_H
#define SN_TRAIN_H

#include "passes/pipeline.h"
#include "runtime/pool.h"

typedef struct {
    int steps;          /* optimizer steps in the run (for the schedule) */
    float lr;           /* peak learning rate */
    float min_lr_frac;  /* the cosine ends at lr * min_lr_frac */
    int warmup;         /* linear warm-up steps */
    float weight_decay; /* decoupled; applied to the parameters the program's layout says
                           decay (program.h: memplan's rule, rank >= 2) */
    float beta1, beta2, eps;
    float grad_clip;    /* global L2 norm; 0 disables */
    uint64_t seed;      /* parameter initialisation */
    /* true: sn_trainer_new draws no parameter; the caller sets those it has (a checkpoint,
     * pretrained weights: sn_trainer_set_param, sn_trainer_set_nf4), then sn_trainer_init_rest
     * draws the others, each from the stream sn_trainer_new would have drawn it from (its
     * name's), so the run is the same bit for bit. Until then steps, evaluations and reads of
     * the parameters refuse (SN_ERR_INVALID). Fine-tuning skips drawing what it loads: gpt2-xl's
     * 1.56 B normal draws were most of its startup. */
    bool init_later;
    struct sn_device *device; /* runs the compiled program; NULL: the reference interpreter */
    const sn_pipeline_opts *compile; /* how sn_trainer_new compiles for the device (sn_compile:
                                        target, dump_after); NULL: zeroed options */
    /* dynamic loss scaling (a graph from the fp16 autocast pass, which has the loss-scale input;
     * PyTorch's GradScaler): the loss is multiplied by the scale, the gradients divided by it
     * before the norm, clipping and AdamW; a step whose gradients are not finite is skipped and
     * the scale halved; after scale_interval clean steps in a row it doubles. A step that is not
     * finite at SN_MIN_LOSS_SCALE fails (SN_ERR_NUMERIC): the run diverged, halving cannot help. */
    float init_scale;   /* 65536 */
    int scale_interval; /* 2000 */
    /* ZeRO-Offload's idea for one device (with a device): AdamW's moments, the gradient sums
     * and fp32 master weights live in host memory; after the backward the gradients come down
     * in chunks, the CPU updates masters and moments, the weights go back up. The device keeps
     * the step's scalars and computes the global norm; the losses are the device's own (bit
     * for bit on the CPU device, offload.h). */
    bool offload;
    /* With offload: the delayed parameter update (DeepSpeed's DPU). The host's AdamW of step k
     * runs while the device runs step k+1's forward and backward, which read the weights
     * before update k (one update stale; update k still applies step k's gradients to the
     * weights after update k-1, and its norm, clip, learning rate and bias correction are step
     * k's). So step 1 and step 2 read the initial weights, step k > 2 the weights after update
     * k-2. Evaluation, sn_trainer_get_param/set_param (checkpoints) and sn_trainer_drain finish
     * the update in flight first; the step after such a drain reads the newest weights. Other
     * numbers than a run without it, hence never the default. false without offload; true
     * without it is refused (SN_ERR_INVALID). */
    bool offload_delay;
    /* With offload_delay, where the update runs beside the device (CUDA): the host AdamW's
     * threads. 0: the host's cores less one, which the thread driving the device keeps (it
     * launches the step's kernels and queues the weights' uploads while the update runs; with
     * every core busy it waits for a time slice, and the device for it). No effect on the CPU
     * device, whose update runs at the next update on its own pool. Set without offload_delay,
     * or negative: refused (SN_ERR_INVALID). */
    int offload_threads;
} sn_train_opts;

#define SN_MIN_LOSS_SCALE 0x1p-24f /* fp16's smallest subnormal: no overflow is left to avoid */

/* AdamW (0.9, 0.95, 1e-8), weight decay 0.1, clip 1.0, lr 1e-3, warm-up 10% of steps. */
void sn_train_opts_default(sn_train_opts *o, int steps);

/* The learning rate of step (0-based). */
float sn_train_lr(const sn_train_opts *o, int step);

/* Fills dst (numel) from p's init rule; the stream depends on seed and p's name only. */
void sn_param_init(const sn_node *p, float *dst, uint64_t seed);
/* The same numbers, drawn by the pool's threads at once (NULL: one by one). */
void sn_param_init_pool(const sn_node *p, float *dst, uint64_t seed, sn_pool *pool);

typedef struct {
    double loss;      /* before the update */
    double grad_norm; /* before clipping (inf or NaN on a skipped step) */
    float lr;
    float loss_scale; /* the scale the step ran with (1 without loss scaling) */
    bool skipped;     /* loss scaling found inf/NaN gradients: no update, the scale halved */
} sn_step_stats;

typedef struct sn_trainer sn_trainer;

/* g must have a loss and a backward (sn_backward), and two i32 INPUTs of the same shape (B, T)
 * with the roles SN_ROLE_TOKENS and SN_ROLE_TARGETS (their names do not matter). */
sn_trainer *sn_trainer_new(sn_graph *g, const sn_train_opts *o, sn_err *e);
void sn_trainer_free(sn_trainer *t);

/* One optimizer step on one batch (B*T ids each): sn_trainer_accumulate then sn_trainer_update.
 * A NaN or infinite loss or gradient is reported as SN_ERR_NUMERIC and the parameters are left
 * as they were. */
sn_status sn_trainer_step(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                          sn_step_stats *st, sn_err *e);

/* Gradient accumulation: each call runs forward and backward on one micro-batch and adds its
 * gradients to the step's sums (loss: this micro-batch's, may be NULL); sn_trainer_update then
 * applies their mean, so k micro-batches of B rows make the step one batch of k*B rows would.
 * A non-finite micro-batch loss is SN_ERR_NUMERIC and drops the whole step's sums. */
sn_status sn_trainer_accumulate(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                                double *loss, sn_err *e);
/* The same for the step's last micro-batch (sn_trainer_update next; sn_trainer_step calls it):
 * with the delayed update (offload_delay) on a device that copies asynchronously, the update in
 * flight finishes and its weights go up during this run, each part after the last kernel that
 * reads it, instead of in sn_trainer_update before the next update starts (docs/memory.md). The
 * same numbers as sn_trainer_accumulate: the step's runs all read the weights one update old;
 * a micro-batch accumulated after this one in the same step would read the newer weights, as
 * after a drain. Without the delay it is sn_trainer_accumulate. */
sn_status sn_trainer_accumulate_last(sn_trainer *t, const int32_t *idx, const int32_t *targets,
                                     double *loss, sn_err *e);
/* Applies the mean of the accumulated gradients (clip, AdamW, the schedule's lr) and clears
 * the sums; st->loss is the micro-batches' mean loss. SN_ERR_NUMERIC (parameters unchanged,
 * sums dropped) on a non-finite gradient norm; SN_ERR_INVALID when nothing was accumulated. */
sn_status sn_trainer_update(sn_trainer *t, sn_step_stats *st, sn_err *e);
/* Micro-batches accumulated since the last update. */
int sn_trainer_pending(const sn_trainer *t);

/* The loss on a batch without updating anything (nor touching accumulated gradients): a
 * forward by the evaluation program (runner.h sn_runner_eval), compiled at the first call. */
sn_status sn_trainer_eval(sn_trainer *t, const int32_t *idx, const int32_t *targets, double *loss,
                          sn_err *e);
/* The evaluation program (compiled now if not yet; NULL with e set on failure) and its executor
 * (NULL before the first evaluation). */
const struct sn_program *sn_trainer_eval_program(sn_trainer *t, sn_err *e);
struct sn_exec *sn_trainer_eval_exec(const sn_trainer *t);

/* The graph's dropout probability (the largest of its dropouts'; 0: none). The trainer sets
 * the dropout seed input (SN_ROLE_DROPOUT_SEED) before each micro-batch from the run's seed,
 * the step and the micro-batch (so a resumed run draws the same masks); checkpoints record
 * the probability and a resume checks it. */
float sn_trainer_dropout(const sn_trainer *t);

/* Optimizer steps taken so far. */
int sn_trainer_step_count(const sn_trainer *t);
const sn_train_opts *sn_trainer_opts(const sn_trainer *t);
/* "reference interpreter" or the device and program that run the steps. */
const char *sn_trainer_device_name(const sn_trainer *t);
/* The compiled program and its executor, or NULL on the interpreter (benchmarks, reports). */
const struct sn_program *sn_trainer_program(const sn_trainer *t);
struct sn_exec *sn_trainer_exec(const sn_trainer *t);

/* Parameters are numbered 0 .. count-1 in graph order (frozen ones included): parameter i is
 * slot i of the compiled program's parameter layout (program.h), which says where its weights,
 * gradient and moments lie, whether it trains and whether it decays. */
int sn_trainer_param_count(const sn_trainer *t);
const sn_param_layout *sn_trainer_layout(const sn_trainer *t);
const sn_node *sn_trainer_param_node(const sn_trainer *t, int i); /* the PARAM (name, shape) */
/* The index of the parameter named name, or -1. */
int sn_trainer_find_param(const sn_trainer *t, const char *name);

/* What of a parameter moves to or from the host: numel(sn_trainer_param_value) floats,
 * row-major. GRAD is the sum of the pending micro-batches' gradients (read only). A frozen
 * parameter's M, V and GRAD read as zeros, and setting its M or V does nothing. An NF4
 * parameter's weights are dequantized when read and quantized when set (a NaN or infinite
 * weight is SN_ERR_NUMERIC naming it). */
typedef enum { SN_PARAM_WEIGHTS, SN_PARAM_M, SN_PARAM_V, SN_PARAM_GRAD, SN_PARAM_WHICH_COUNT } sn_param_which;
sn_status sn_trainer_get_param(const sn_trainer *t, int i, sn_param_which which, float *host, sn_err *e);
sn_status sn_trainer_set_param(sn_trainer *t, int i, sn_param_which which, const float *host, sn_err *e);

/* QLoRA's base (the nf4 pass): a frozen weight stored as NF4 (ir/nf4.h) is a u8 parameter of
 * the weight's name whose init rule is the weight's. The trainer draws its weights by that rule
 * from the stream a full-precision run draws them from (so a QLoRA run starts from the
 * quantization of the LoRA run's base), quantizes them on the host and keeps only the packed
 * bytes. sn_trainer_param_value is the node whose shape the weights have: the PARAM, or for NF4
 * storage its dequant_nf4. sn_trainer_get_nf4 / set_nf4 move the packed bytes exactly
 * (sn_nf4_layout_of(numel(value)).bytes; checkpoints). */
bool sn_trainer_param_nf4(const sn_trainer *t, int i);
const sn_node *sn_trainer_param_value(const sn_trainer *t, int i);
sn_status sn_trainer_get_nf4(const sn_trainer *t, int i, uint8_t *bytes, sn_err *e);
sn_status sn_trainer_set_nf4(sn_trainer *t, int i, const uint8_t *bytes, sn_err *e);
/* LoRA's and IA3's base in 16 bits (the base16 pass): a frozen weight whose PARAM is bf16 or f16.
 * The trainer draws it from the f32 stream a full-precision run draws it from and rounds it on
 * the host to nearest even (so it holds the f32 run's weight shadow exactly);
 * sn_trainer_get_param widens it exactly, sn_trainer_set_param rounds (a weight past the
 * format's range, or not a number, is SN_ERR_NUMERIC naming it). */
bool sn_trainer_param_16bit(const sn_trainer *t, int i);
/* Bytes of optimizer state (moments, gradient sums, the step's scalars) besides the program. */
int64_t sn_trainer_state_bytes(const sn_trainer *t);
/* With offload_delay: finishes the update in flight and puts its weights on the device, so
 * that what reads the trainer next sees every update taken (the end of a run); nothing
 * otherwise. */
sn_status sn_trainer_drain(sn_trainer *t, sn_err *e);
/* With offload: the optimizer state in host memory (masters, moments, sums, the staging
 * chunks or, with offload_delay, two gradient ranges); 0 else. */
int64_t sn_trainer_host_state_bytes(const sn_trainer *t);
/* Where sn_trainer_new's seconds went (issue 21's startup), in its order. */
typedef struct {
    double kernels_s;   /* the kernel passes: fuse, schedule, memplan (sn_pipeline_kernels) */
    double exec_s;      /* the executor: memory, constants, the kernels compiled or read from
                           the device's cache, the GEMMs' plans (sn_exec_new) */
    double optimizer_s; /* the optimizer's state buffers and kernels */
    double init_s;      /* every parameter drawn on the host and set on the device */
} sn_trainer_startup;
void sn_trainer_startup_get(const sn_trainer *t, sn_trainer_startup *s);

/* Where the offloaded optimizer's seconds went since sn_trainer_new, summed over its updates
 * (wall-clock on the host; what a GPU run of train_bench --offload reports, so that the part of
 * the step the host's work leaves exposed can be named). */
typedef struct {
    int updates;       /* optimizer steps taken on the host */
    double adamw_s;    /* the host AdamW itself (with the delay: on its own thread, overlapped) */
    double optimizer_s; /* the caller's time in the update (sn_trainer's optimizer phase: the
                          pipeline's copies and AdamW without the delay; with it the wait for
                          the update in flight, its weights up, the run's copies waited for) */
    double join_s;     /* delay: waiting for the update in flight to finish */
    double up_s;       /* delay: its weights up (queued and waited for) */
    double copies_s;   /* delay: waiting for the run's gradients to land on the host */
    int ups_in_run;    /* delay: updates whose weights went up during a step's last run
                          (sn_trainer_accumulate_last), their join in join_s, their upload in
                          the run (not in up_s) */
    int threads;       /* delay: the host AdamW's threads (sn_train_opts.offload_threads); on
                          the CPU device, where the update runs at the next update on the
                          caller's pool, that pool's (offload_threads has no effect there) */
} sn_offload_times;
void sn_trainer_offload_times(const sn_trainer *t, sn_offload_times *s);

/* With init_later: draws every parameter not set since sn_trainer_new (and nothing else); the
 * trainer is then ready. Without it (or called again): nothing to do. */
sn_status sn_trainer_init_rest(sn_trainer *t, sn_err *e);
/* The device the trainer runs on (NULL: the reference interpreter). */
struct sn_device *sn_trainer_device(const sn_trainer *t);
/* Sets the optimizer step count (checkpoints restore it with the moments). */
void sn_trainer_set_step_count(sn_trainer *t, int step);

/* Dynamic loss scaling (sn_train_opts): whether the graph has it, and its state (checkpoints
 * save and restore it): the scale, the steps skipped so far, clean steps since the last change. */
typedef struct {
    float scale;
    int64_t skipped;
    int64_t clean;
} sn_loss_scaler;
bool sn_trainer_loss_scaling(const sn_trainer *t);
sn_loss_scaler sn_trainer_scaler(const sn_trainer *t);
void sn_trainer_set_scaler(sn_trainer *t, sn_loss_scaler s);

#endif
