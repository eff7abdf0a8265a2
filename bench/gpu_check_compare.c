/* gpu_check_compare.c: how the GPU check compares: outputs poisoned before a run (a device whose
 * allocations are filled with 0xff bytes, NaN as f32, so an element no kernel wrote reads back
 * as NaN), and the normalized error max |got - want| / max(max |want|, floor), which is NaN
 * when anything is (compare with !(err <= tol), never err > tol). */
#include <math.h>
#include <stdlib.h>

#include "gpu_check.h"

typedef struct {
    sn_device base; /* inner's functions and impl; alloc replaced */
    sn_device *inner;
} poison_dev;

static void *poison_alloc(sn_device *d, size_t bytes, sn_err *e) {
    sn_device *in = ((poison_dev *)d)->inner;
    void *p = in->alloc(in, bytes, e);
    if (p && in->memset(in, p, 0xff, bytes, e)) {
        in->free(in, p);
        return NULL;
    }
    return p;
}

sn_device *gc_poison_device_new(sn_device *inner, sn_err *e) {
    poison_dev *p = sn_calloc(1, sizeof *p, "the poisoning device", e);
    if (!p) return NULL;
    p->base = *inner; /* the inner device's functions read d->impl: the same impl */
    p->base.alloc = poison_alloc;
    p->inner = inner;
    return &p->base;
}

void gc_poison_device_free(sn_device *d) { free(d); /* the inner device stays */ }

double gc_rel_err(const float *got, const double *want, int64_t n, double floor) {
    double scale = floor, worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d; /* NaN sticks */
        if (isnan(worst)) return NAN;
    }
    return worst / scale;
}
