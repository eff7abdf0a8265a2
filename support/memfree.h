/* memfree.h: the host memory this process may still take: Linux's MemAvailable, and no more than
 * its memory cgroup's limit less its usage (v2's memory.max and memory.current, v1's
 * memory.limit_in_bytes and memory.usage_in_bytes: a container's or a systemd unit's limit,
 * which MemAvailable, the whole machine's, does not see). The host devices' free memory
 * (runtime/host.c), so that --mem auto on the CPU plans inside a container's limit. */
#ifndef SN_MEMFREE_H
#define SN_MEMFREE_H

#include <stdbool.h>
#include <stdint.h>

/* The bytes free as above and the RAM in all (*total: MemTotal, or the cgroup's limit when it is
 * lower), read under root ("" for the real /proc and /sys: tests pass a folder holding
 * proc/meminfo, proc/self/cgroup and sys/fs/cgroup/...); false when /proc/meminfo cannot be
 * read. */
bool sn_host_memory(const char *root, int64_t *free_bytes, int64_t *total);

#endif
