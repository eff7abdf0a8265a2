/* sample.h: text generation from a forward-only graph of a language model (one sequence of T
 * tokens in, logits out) whose weights are the trainer's, matched by parameter name.
 * Convention: sampling is reproducible from opts.seed and never touches the training RNG.
 *
 *     sn_gpt2_build(g, &config, 1, config.ctx, &m, &e);           // the same model, B = 1
 *     sn_sampler *s = sn_sampler_new(g, m.idx, m.logits, sn_trainer_device(trainer), &e);
 *     sn_sampler_load(s, trainer, &e);             // the weights by name (sn_trainer_get_param)
 *     sn_sampler_generate(s, prompt, n_prompt, &opts, out, &e);    // out: opts.n_new ids
 */
#ifndef SN_SAMPLE_H
#define SN_SAMPLE_H

#include "ir/ir.h"
#include "support/rng.h"
#include "train.h"

typedef struct {
    int n_new;         /* tokens to generate */
    float temperature; /* logits are divided by it; <= 0 is greedy (the most likely id) */
    int top_k;         /* draw among the k most likely ids; 0: all of them; 1: greedy */
    float top_p;       /* then among the fewest most likely ids whose probabilities sum to at
                          least top_p (nucleus sampling); 0 or >= 1: all of them */
    int vocab;         /* draw only ids < vocab (leaves out vocabulary padding); 0: all */
    uint64_t seed;
} sn_sample_opts;

typedef struct sn_sampler sn_sampler;

/* g holds one sequence: idx an i32 INPUT (1, T), logits (1, T, V), a graph output. Any other
 * i32 INPUT of idx's shape (a loss's targets) is fed zeros. g must outlive the sampler. The
 * forward runs compiled on `device`, or on the reference interpreter when device is NULL. */
struct sn_device;
sn_sampler *sn_sampler_new(sn_graph *g, const sn_node *idx, const sn_node *logits,
                           struct sn_device *device, sn_err *e);
void sn_sampler_free(sn_sampler *s);

/* Where a model's weights come from: get fills numel(p) floats of the parameter named p->name,
 * whose shape must be p's (a name it lacks or a mismatched shape: SN_ERR_INVALID naming it). */
typedef struct {
    sn_status (*get)(void *src, const sn_node *p, float *data, sn_err *e);
    void *src;
} sn_weight_source;
/* A trainer's current weights (sn_trainer_get_param); t must outlive the uses of the result. */
sn_weight_source sn_trainer_weights(const sn_trainer *t);

/* Copies every PARAM of the sampling graph from the trainer's weights by name, through
 * sn_trainer_get_param (the batch-1 forward is its own program on the trainer's device); a
 * parameter the trainer lacks or holds with another shape is SN_ERR_INVALID naming it. */
sn_status sn_sampler_load(sn_sampler *s, const sn_trainer *t, sn_err *e);
/* The same from any source of weights. */
sn_status sn_sampler_load_weights(sn_sampler *s, sn_weight_source w, sn_err *e);

/* Generates o->n_new ids after prompt[0, n_prompt) (n_prompt >= 1) into out. The model sees
 * the last T ids of prompt and output so far; each new id is drawn from the softmax of the
 * last position's logits / temperature over the top_k ids (ties: the lower id first), then
 * over the nucleus of top_p of them. */
sn_status sn_sampler_generate(sn_sampler *s, const int32_t *prompt, int n_prompt,
                              const sn_sample_opts *o, int32_t *out, sn_err *e);

/* Picks one id from logits (V,) as sn_sampler_generate does (exposed for tests); -1 when out
 * of memory for the sorted copy. */
int32_t sn_sample_logits(const double *logits, int V, float temperature, int top_k, float top_p,
                         sn_rng *rng);

#endif
