/* run_copies_check.h: a run's own downloads (device.h sn_exec_run_copies: the delayed update's
 * gradients coming down while the backward runs) checked on a trainer's executor, for the CPU
 * device (wrapped so that it copies at once) and the stand-in driver alike; and a device that
 * checks the order of a run's uploads (sn_exec_run_uploads: the weights going up during it). */
#ifndef SN_TEST_RUN_COPIES_CHECK_H
#define SN_TEST_RUN_COPIES_CHECK_H

#include "runtime/device.h"
#include "train/train.h"

typedef struct {
    int chunks;       /* of the gradients' range */
    int during;       /* of them, queued during the run (sn_exec_stats.copies_in_run) */
    int points;       /* distinct kernels they follow */
    int before_last;  /* chunks ready before the program's last kernel */
    int written;      /* chunks some kernel writes */
    int early_differ; /* of those, copied one kernel early, the ones that land other bytes */
} sn_test_run_copies;

/* On trainer t (without offload; micro-batches of n tokens below vocab): the gradients' range in chunks of `chunk` elements, each copied after the kernel
 * sn_exec_ready_after names, lands the run's gradients bit for bit (asserted); then each one
 * kernel earlier, on another batch, counted in *out. The run's copies are unset after. */
void sn_test_run_copies_check(sn_trainer *t, int64_t chunk, int n, int vocab,
                              sn_test_run_copies *out);

/* A device over cpu (owned: freed with it) whose asynchronous copies are done at once, as a
 * copy that starts right after the kernel it follows would read; waits do nothing. */
sn_device *sn_test_copy_at_once(sn_device *cpu);

/* The same, recording the order of what it is given: each launch's and GEMM's buffers (the
 * kernel's args and its joined FINISHes', their nodes' sizes), each event recorded, and for each
 * upload (copy_async up) the launches after the event it waits for (after NULL: after all so far)
 * and before it was queued. sn_test_upload_order_count: since the last count, the uploads and
 * of them the early ones, which a buffer of such a launch overlaps (the launch may read or write
 * bytes the upload replaces: on a GPU it could run after the upload landed). An upload that waits
 * for the last kernel using its bytes is never early. */
sn_device *sn_test_upload_order(sn_device *cpu);
void sn_test_upload_order_count(sn_device *d, int *uploads, int *early);
/* The launches and GEMMs it was given so far. */
int sn_test_upload_order_launches(const sn_device *d);

#endif
