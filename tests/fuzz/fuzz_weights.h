/* fuzz_weights.h: what the model-file harnesses (fuzz_llmc, fuzz_hfindex, fuzz_hfllama) compare:
 * two weight sets (io/weights.h) with the same tensors, shapes and bits. */
#ifndef SN_FUZZ_WEIGHTS_H
#define SN_FUZZ_WEIGHTS_H

#include <string.h>

#include "io/weights.h"

/* NULL when b holds exactly a's tensors (by name) with their shapes and bits; else the name of
 * the first of a's that differs, or "the tensor count". */
static inline const char *fuzz_weights_differ(const sn_weights *a, const sn_weights *b) {
    if (a->n != b->n) return "the tensor count";
    for (int i = 0; i < a->n; i++) {
        const sn_weight *x = &a->w[i], *y = sn_weights_find(b, x->name);
        size_t n = (size_t)x->shape[0] * (size_t)(x->rank > 1 ? x->shape[1] : 1);
        if (!y || x->rank != y->rank || x->shape[0] != y->shape[0] ||
            (x->rank > 1 && x->shape[1] != y->shape[1]) || memcmp(x->data, y->data, 4 * n))
            return x->name;
    }
    return NULL;
}

#endif
