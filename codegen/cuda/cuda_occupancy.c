/* cuda_occupancy.c: theoretical occupancy from ptxas's report (registers, static shared memory)
 * and a kernel's launch (threads, dynamic shared memory), and the per-kernel report of a set of
 * kernels compiled for one arch. Convention: the formulas are those of CUDA's occupancy
 * calculator (cuda_occupancy.h), written out below; the limits are NVIDIA's published per-arch
 * numbers (CUDA C Programming Guide, "Compute capabilities"), one row per arch. */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* sm_75: Turing; sm_80: A100; sm_86: RTX 30; sm_89: RTX 40; sm_90: H100/H200; sm_120: RTX 50
 * (the consumer parts: 1536 threads an SM, 100 KiB of shared memory). Shared memory per SM is
 * the largest carveout (the driver picks one at least as large as a launch needs); each block
 * also takes `reserved` bytes the system keeps (sm_80+: 1 KiB); allocations round up to
 * `smem_unit` bytes. */
static const sn_cuda_sm_limits limits[] = {
    /* arch threads blocks warps regs  reg_unit subparts regs/thread smem/SM   smem/block reserved unit */
    {75, 1024, 16, 32, 65536, 256, 4, 255, 64 << 10, 64 << 10, 0, 256},
    {80, 2048, 32, 64, 65536, 256, 4, 255, 164 << 10, 163 << 10, 1 << 10, 128},
    {86, 1536, 16, 48, 65536, 256, 4, 255, 100 << 10, 99 << 10, 1 << 10, 128},
    {89, 1536, 24, 48, 65536, 256, 4, 255, 100 << 10, 99 << 10, 1 << 10, 128},
    {90, 2048, 32, 64, 65536, 256, 4, 255, 228 << 10, 227 << 10, 1 << 10, 128},
    {120, 1536, 32, 48, 65536, 256, 4, 255, 100 << 10, 99 << 10, 1 << 10, 128},
};

const sn_cuda_sm_limits *sn_cuda_sm_limits_of(int arch) {
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        if (limits[i].arch == arch) return &limits[i];
    return NULL;
}

static int div_up(int a, int b) { return (a + b - 1) / b; }
static int round_up(int a, int b) { return div_up(a, b) * b; }

sn_cuda_occupancy sn_cuda_occupancy_of(const sn_cuda_sm_limits *L, int registers, int static_smem,
                                       int dynamic_smem, int threads) {
    sn_cuda_occupancy o = {.limiter = "none"};
    if (!L || threads < 1 || registers > L->max_regs_thread) {
        o.limiter = "cannot launch";
        return o;
    }
    /* warps a block: threads / 32 rounded up */
    int warps = div_up(threads, 32);
    o.warps_per_block = warps;
    /* registers: each warp gets regs x 32 rounded up to 256; a warp's registers live in one of
     * the 4 sub-partitions (a quarter of the register file each), so
     *   blocks_by_regs = floor(floor(regs_SM / 4 / regs_per_warp) x 4 / warps) */
    o.regs_per_warp = round_up((registers > 0 ? registers : 1) * 32, L->reg_unit);
    int warps_by_regs = L->regs_sm / L->subpartitions / o.regs_per_warp * L->subpartitions;
    o.by_regs = o.regs_per_warp * warps > L->regs_sm ? 0 : warps_by_regs / warps;
    /* shared memory: static + dynamic + the reserved 1 KiB, rounded up to the allocation unit;
     *   blocks_by_smem = floor(smem_SM / that), none when static + dynamic > the block's limit,
     *   no limit when that is 0 (sm_75 reserves nothing) */
    int smem = static_smem + dynamic_smem;
    o.smem_per_block = round_up(smem + L->reserved_block, L->smem_unit);
    o.by_smem = smem > L->smem_block ? 0
                : o.smem_per_block  ? L->smem_sm / o.smem_per_block
                                    : L->blocks_sm;
    /* threads and blocks: floor(threads_SM / (warps x 32)), and at most blocks_SM */
    o.by_threads = L->threads_sm / (warps * 32);
    o.by_blocks = L->blocks_sm;
    /* resident blocks: the least of the four; warps = blocks x warps a block;
     * occupancy = warps / warps_SM */
    o.blocks = o.by_regs, o.limiter = "registers";
    if (o.by_smem < o.blocks) o.blocks = o.by_smem, o.limiter = "shared memory";
    if (o.by_threads < o.blocks) o.blocks = o.by_threads, o.limiter = "threads";
    if (o.by_blocks < o.blocks) o.blocks = o.by_blocks, o.limiter = "blocks";
    if (o.blocks == 0) o.limiter = o.by_regs == 0 ? "cannot launch: registers" : "cannot launch: shared memory";
    o.warps = o.blocks * warps;
    o.occupancy = (double)o.warps / L->warps_sm;
    return o;
}

double sn_cuda_grid_fill(const sn_cuda_occupancy *o, double blocks, int sms) {
    double slots = (double)sms * o->blocks;
    return slots > 0 ? o->occupancy * (blocks < slots ? blocks / slots : 1.0) : 0.0;
}

sn_status sn_cuda_ptxas_report(const sn_kernel *const *ks, int n, int arch,
                               sn_cuda_kernel_report *out, sn_err *e) {
    memset(out, 0, sizeof *out * (size_t)n);
    sn_target t = sn_target_cuda(arch);
    const sn_cuda_sm_limits *L = sn_cuda_sm_limits_of(arch);
    if (!L)
        return sn_fail(e, SN_ERR_INVALID, "no occupancy limits for sm_%d (known: sm_75, sm_80, "
                       "sm_86, sm_89, sm_90, sm_120)", arch);
    sn_cuda_source cs;
    sn_status st = sn_cuda_render(ks, n, &t, &cs, e);
    if (st) return st;
    sn_cuda_module m;
    char name[32];
    snprintf(name, sizeof name, "report_sm%d.cu", arch);
    st = sn_nvrtc_compile(cs.src, name, arch, &m, e);
    for (int i = 0; !st && i < n; i++) {
        sn_cuda_kernel_report *r = &out[i];
        r->k = ks[i];
        r->arch = arch;
        if (ks[i]->kind == SN_KER_GEMM) continue; /* a library call: no report */
        snprintf(r->fn, sizeof r->fn, "%s", cs.fn[i]);
        r->dims = sn_cuda_launch_dims(ks[i], &t);
        const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[i]);
        if (!in) {
            st = sn_fail(e, SN_ERR_DEVICE, "ptxas reported nothing of %s (the function of %s) "
                         "for sm_%d: has NVRTC's log format changed? (sn_ptxas_parse)", cs.fn[i],
                         ks[i]->name, arch);
            break;
        }
        r->info = *in;
        r->has_info = true;
        int threads = (int)(r->dims.block[0] * r->dims.block[1] * r->dims.block[2]);
        r->occ = sn_cuda_occupancy_of(L, in->registers, in->shared_bytes,
                                      (int)r->dims.shared_bytes, threads);
    }
    sn_cuda_module_free(&m);
    sn_cuda_source_free(&cs);
    return st;
}
