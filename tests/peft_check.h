/* peft_check.h: tests/peft_check.c, for tests/test_hf.c. */
#ifndef SN_TEST_PEFT_CHECK_H
#define SN_TEST_PEFT_CHECK_H

#include "io/weights.h"

/* ckpt: a LoRA checkpoint (rank, alpha, layers adapted); merged: its export with the adapters
 * merged; dir: where the adapter goes (new). */
void peft_check(const char *ckpt, const sn_weights *merged, const char *dir, int rank, float alpha,
                int layers);

#endif
