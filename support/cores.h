/* cores.h: the CPUs this process may run on: its affinity mask's count (taskset's or a
 * container's cpuset), else the online CPUs; at least 1. The pools' default size, the CUDA
 * compile's jobs, and the cores the delayed update leaves one of. */
#ifndef SN_CORES_H
#define SN_CORES_H

#ifndef _GNU_SOURCE /* the project's builds define it (meson.build, tools/tsan_job) */
#error "support/cores.h needs _GNU_SOURCE before any system header: sched_getaffinity, CPU_COUNT"
#endif
#include <sched.h>
#include <unistd.h>

static inline int sn_cores(void) {
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

#endif
