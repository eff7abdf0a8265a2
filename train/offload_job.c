/* offload_job.c: a host AdamW on a thread of its own (offload.h sn_offload_job), for the
 * delayed parameter update: the runner starts it after a step's norm and finishes it at the
 * next step's update or at a drain (runner.c), while the calling thread runs the device. With an
 * order it does the range in those parts, one after another, and says after each that it is
 * done (a mutex and a condition), so the step's last run sends each part's weights up as soon
 * as it is (sn_offload_job_wait). */
#include "offload.h"

#include <string.h>

#include "support/clock.h"

/* The first `parts` parts are done. */
static void publish(sn_offload_job *j, int parts) {
    pthread_mutex_lock(&j->mu);
    j->done = parts;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void run_job(sn_offload_job *j) {
    double t0 = sn_clock_s();
    if (!j->order)
        sn_offload_adamw(j->pool, j->h, j->p, j->m, j->v, j->g, j->low, j->low_dtype, j->n, j->n_decay);
    for (int i = 0; j->order && i < j->n_order; i++) {
        const sn_offload_range *r = &j->order[i];
        sn_offload_adamw(j->pool, j->h, j->p + r->lo, j->m + r->lo, j->v + r->lo, j->g + r->lo,
                         j->low ? (uint16_t *)j->low + r->lo : NULL, j->low_dtype, r->n,
                         j->n_decay - r->lo);
        publish(j, i + 1);
    }
    j->run_s = sn_clock_s() - t0;
}

static void *job_main(void *arg) {
    run_job(arg);
    return NULL;
}

void sn_offload_job_start(sn_offload_job *j, const float *h, float *p, float *m, float *v,
                          const float *g, void *low, sn_dtype low_dtype, int64_t n,
                          int64_t n_decay, const sn_offload_range *order, int n_order) {
    SN_ASSERT(!j->pending);
    if (!j->sync_made) {
        pthread_mutex_init(&j->mu, NULL);
        pthread_cond_init(&j->cv, NULL);
        j->sync_made = true;
    }
    memcpy(j->h, h, sizeof j->h);
    j->p = p, j->m = m, j->v = v, j->g = g, j->n = n, j->n_decay = n_decay;
    j->low = low, j->low_dtype = low_dtype;
    j->order = order, j->n_order = order ? n_order : 0;
    j->done = 0;
    j->pending = true;
    j->on_thread = j->threaded && !pthread_create(&j->thread, NULL, job_main, j);
    if (j->threaded && !j->on_thread) { /* no thread: now, on this one */
        run_job(j);
        j->pending = false;
    }
}

void sn_offload_job_wait(sn_offload_job *j, int parts) {
    if (!j->pending) return;
    if (!j->order || !j->on_thread) { /* no parts to wait for, or no thread to wait on */
        sn_offload_job_finish(j);
        return;
    }
    pthread_mutex_lock(&j->mu);
    while (j->done < parts && j->done < j->n_order) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

void sn_offload_job_free(sn_offload_job *j) {
    sn_offload_job_finish(j);
    if (j->sync_made) {
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
        j->sync_made = false;
    }
}

void sn_offload_job_finish(sn_offload_job *j) {
    if (!j->pending) return;
    if (j->on_thread) pthread_join(j->thread, NULL);
    else run_job(j);
    j->pending = j->on_thread = false;
}
