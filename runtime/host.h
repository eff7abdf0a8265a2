/* host.h: the hooks of a device whose memory is host memory (host.c): the CPU device and the
 * reference interpreter's. */
#ifndef SN_HOST_H
#define SN_HOST_H

#include "device.h"

/* Sets d's alloc, free, upload, download, copy, memset, sync, event and mem_info hooks to host
 * ones. */
void sn_host_device_hooks(sn_device *d);

#endif
