/* delay_ref.h: the delayed parameter update (sn_train_opts.offload_delay) written out with a
 * trainer that does not have it, for the tests that check the real one against it bit for
 * bit: the weights each step reads, set by hand. */
#ifndef SN_TEST_DELAY_REF_H
#define SN_TEST_DELAY_REF_H

#include "train/train.h"

/* r: a trainer without the delay (whose weights are the device's, the ones a run reads); w: the
 * newest weights (the delayed run's host masters). */
typedef struct {
    sn_trainer *r;
    float **w;
} sn_test_delay;

void sn_test_delay_new(sn_test_delay *d, sn_trainer *r);
void sn_test_delay_free(sn_test_delay *d);
/* The update of the gradients r holds (read at the weights r has): AdamW from the newest
 * weights and r's moments; after it r holds the weights before it (what the delayed run's
 * device holds until the next update), d->w the new ones. */
void sn_test_delay_update(sn_test_delay *d, sn_step_stats *st);
/* A drain: r gets the newest weights. */
void sn_test_delay_drain(sn_test_delay *d);

/* A schedule both run: `steps` steps of tiny GPT-2's batches (n tokens below vocab, harness.h's
 * sn_test_lcg_batch), every third of two micro-batches, an evaluation (a drain) between the two micro-batches of step
 * eval_step (-1: none); ref NULL: t has the delay itself, else ref emulates it on ref->r (t is
 * ref->r). Losses, norms and the evaluation's loss out. */
void sn_test_delay_run(sn_trainer *t, sn_test_delay *ref, int steps, int n, int vocab,
                       int eval_step, double *loss, double *norm, double *eval_loss);

#endif
