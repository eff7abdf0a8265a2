/* cuda_optim.c: the optimizer update (AdamW with fp32 master weights) as CUDA C. */
#include <stdio.h>

#include "cuda_int.h"

sn_status sn_cu_check_optim(const sn_kernel *k, sn_err *e) {
    return sn_fail(e, SN_ERR_UNSUPPORTED, "cuda: kernel %s: the optimizer update is not "
                   "generated as CUDA yet", k->name);
}

void sn_cu_emit_optim(sn_cu_text *t, const sn_kernel *k, const sn_cuda_dims *d, const char *fname) {
    (void)t, (void)k, (void)d, (void)fname;
    SN_ASSERT(0);
}
