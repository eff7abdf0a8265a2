/* delay_ref.c: the delayed parameter update written out by hand (delay_ref.h). */
#include "delay_ref.h"

#include <stdlib.h>

#include "harness.h"

static void set_all(sn_trainer *t, float *const *w) {
    sn_err e;
    for (int i = 0; i < sn_trainer_param_count(t); i++)
        ck_assert_msg(sn_trainer_set_param(t, i, SN_PARAM_WEIGHTS, w[i], &e) == SN_OK, "%s", e.msg);
}

static void free_all(const sn_trainer *t, float **w) {
    for (int i = 0; w && i < sn_trainer_param_count(t); i++) free(w[i]);
    free(w);
}

void sn_test_delay_new(sn_test_delay *d, sn_trainer *r) {
    d->r = r;
    d->w = sn_param_snapshot(r);
}

void sn_test_delay_free(sn_test_delay *d) { free_all(d->r, d->w); }

void sn_test_delay_update(sn_test_delay *d, sn_step_stats *st) {
    sn_err e;
    set_all(d->r, d->w); /* AdamW applies them to the newest weights */
    ck_assert_msg(sn_trainer_update(d->r, st, &e) == SN_OK, "%s", e.msg);
    float **next = sn_param_snapshot(d->r);
    set_all(d->r, d->w); /* the device now holds the weights before this update */
    free_all(d->r, d->w);
    d->w = next;
}

void sn_test_delay_drain(sn_test_delay *d) { set_all(d->r, d->w); }

void sn_test_delay_run(sn_trainer *t, sn_test_delay *ref, int steps, int n, int vocab,
                       int eval_step, double *loss, double *norm, double *eval_loss) {
    int32_t *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
    ck_assert(x && y);
    sn_err e;
    for (int s = 0; s < steps; s++) {
        int micro = s % 3 == 2 || s == eval_step ? 2 : 1;
        for (int k = 0; k < micro; k++) {
            if (k == 1 && s == eval_step) {
                sn_test_lcg_batch(x, y, n, vocab, 5000 + (uint64_t)s);
                if (ref) sn_test_delay_drain(ref);
                ck_assert_msg(sn_trainer_eval(t, x, y, eval_loss, &e) == SN_OK, "%s", e.msg);
            }
            sn_test_lcg_batch(x, y, n, vocab, 10 * (uint64_t)s + (uint64_t)k);
            sn_status st = k + 1 < micro ? sn_trainer_accumulate(t, x, y, NULL, &e) /* the step's */
                                         : sn_trainer_accumulate_last(t, x, y, NULL, &e); /* last */
            ck_assert_msg(st == SN_OK, "%s", e.msg);
        }
        sn_step_stats st;
        if (ref) sn_test_delay_update(ref, &st);
        else ck_assert_msg(sn_trainer_update(t, &st, &e) == SN_OK, "%s", e.msg);
        loss[s] = st.loss;
        norm[s] = st.grad_norm;
    }
    free(x);
    free(y);
}
