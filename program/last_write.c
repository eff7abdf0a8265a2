/* last_write.c: which step of a program writes a range of its persistent block last, so that a
 * copy of that range may start as soon as that step has run (offload's gradients coming down
 * while the backward runs: runtime/exec.c sn_exec_run_copies, train/runner.c).
 * Convention: conservative. A step writes every byte of each of its outputs' buffers (the
 * root value's, where memplan made an output an alias of a persistent value: a sum written in
 * place into a gradient), whether or not it writes all of them (sn_kernel_writes,
 * sn_kernel_out_part), and a joined FINISH (kernel.h: tail) writes its outputs in its host's
 * step; inputs are never written. */
#include "program.h"

/* Whether step k writes any byte of the persistent block's [at, at + bytes). */
static bool writes(const sn_program *p, const sn_kernel *k, int64_t at, int64_t bytes) {
    for (const sn_kernel *q = k; q; q = q->tail)
        for (int o = 0; o < q->n_out; o++) {
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
        if (writes(p, p->kernels[k], at, bytes)) return k;
    return -1;
}
