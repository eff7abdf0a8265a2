/* offload_job.c: a host AdamW on a thread of its own (offload.h sn_offload_job), for the
 * delayed parameter update: the runner starts it after a step's norm and finishes it at the
 * next step's update or at a drain (runner.c), while the calling thread runs the device. */
#include "offload.h"

#include <string.h>

#include "support/clock.h"

static void run_job(sn_offload_job *j) {
    double t0 = sn_clock_s();
    sn_offload_adamw(j->pool, j->h, j->p, j->m, j->v, j->g, j->low, j->low_dtype, j->n, j->n_decay);
    j->run_s = sn_clock_s() - t0;
}

static void *job_main(void *arg) {
    run_job(arg);
    return NULL;
}

void sn_offload_job_start(sn_offload_job *j, const float *h, float *p, float *m, float *v,
                          const float *g, void *low, sn_dtype low_dtype, int64_t n,
                          int64_t n_decay) {
    SN_ASSERT(!j->pending);
    memcpy(j->h, h, sizeof j->h);
    j->p = p, j->m = m, j->v = v, j->g = g, j->n = n, j->n_decay = n_decay;
    j->low = low, j->low_dtype = low_dtype;
    j->pending = true;
    j->on_thread = j->threaded && !pthread_create(&j->thread, NULL, job_main, j);
    if (j->threaded && !j->on_thread) { /* no thread: now, on this one */
        run_job(j);
        j->pending = false;
    }
}

void sn_offload_job_finish(sn_offload_job *j) {
    if (!j->pending) return;
    if (j->on_thread) pthread_join(j->thread, NULL);
    else run_job(j);
    j->pending = j->on_thread = false;
}
