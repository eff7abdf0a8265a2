/* run_copies_check.h: a run's own downloads (device.h sn_exec_run_copies: the delayed update's
 * gradients coming down while the backward runs) checked on a trainer's executor, for the CPU
 * device (wrapped so that it copies at once) and the stand-in driver alike. */
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

#endif
