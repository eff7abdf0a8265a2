/* clock.h: the one wall clock of the project: monotonic seconds, for timings and ETAs. */
#ifndef SN_CLOCK_H
#define SN_CLOCK_H

#include <time.h>

static inline double sn_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
