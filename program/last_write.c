/* last_write.c: which step of a program writes a range of its persistent block last, so that a
 * copy of that range may start as soon as that step has run (offload's gradients coming down
 * while the backward runs: runtime/exec.c sn_exec_run_copies, train/runner.c), and which step
 * reads or writes it last, so that a copy into it may start then (the delayed update's weights
 * going up during the backward: sn_exec_run_uploads).
 * Convention: conservative. A step writes every byte of each of its outputs' buffers (the
 * root value's, where memplan made an output an alias of a persistent value: a sum written in
 * place into a gradient), whether or not it writes all of them (sn_kernel_writes,
 * sn_kernel_out_part), and a joined FINISH (kernel.h: tail) writes its outputs in its host's
 * step; inputs are never written. */
#include "program.h"

/* Whether step k writes (uses: reads or writes) any byte of the persistent block's [at, at +
 * bytes). */
static bool touches(const sn_program *p, const sn_kernel *k, int64_t at, int64_t bytes, bool uses) {
    for (const sn_kernel *q = k; q; q = q->tail)
        for (int o = 0; o < (uses ? q->n_out + q->n_in : q->n_out); o++) {
            int v = p->value_of[q->args[o]->id];
            SN_ASSERT(v >= 0); /* every arg is materialised (kernel.h) */
            const sn_value *r = &p->values[sn_value_root(p, v)];
            int64_t n = p->values[v].bytes > r->bytes ? p->values[v].bytes : r->bytes;
            if (r->persistent && r->offset < at + bytes && at < r->offset + n) return true;
        }
    return false;
}

int sn_program_last_write(const sn_program *p, int64_t at, int64_t bytes) {
    for (int k = p->n_kernels - 1; k >= 0; k--)
        if (touches(p, p->kernels[k], at, bytes, false)) return k;
    return -1;
}

int sn_program_last_use(const sn_program *p, int64_t at, int64_t bytes) {
    for (int k = p->n_kernels - 1; k >= 0; k--)
        if (touches(p, p->kernels[k], at, bytes, true)) return k;
    return -1;
}
