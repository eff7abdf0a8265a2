// sim_wgmma.cc: warpgroup MMA (sm_90's wgmma.mma_async m64nNk16, f32 += bf16 or f16) on top of
// sim_exchange_group. Convention: a wgmma is checked when the 128 threads meet at it and computed
// when the thread waits for its group (the latest the hardware may read shared memory); until
// then its accumulators hold the poison, so a read before wgmma.wait_group is a wrong result.
//
// What it models, from the PTX ISA ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
// - the shared-memory matrix descriptor: bits 0-13 start address >> 4, 16-29 leading-dimension
//   byte offset (LBO) >> 4, 32-45 stride-dimension byte offset (SBO) >> 4, 49-51 base offset
//   (must be 0 here), 62-63 swizzle (0 none, 1 128-byte; 64- and 32-byte: not supported yet);
// - the layouts, for 16-bit elements of an (MN x K) operand, byte offsets from the start:
//   no swizzle, K-major: core matrices of 8 rows x 16 bytes, each contiguous:
//     (mn / 8) SBO + (k / 8) LBO + (mn % 8) 16 + (k % 8) 2
//   128-byte swizzle, K-major (rows of 128 bytes, LBO unused):
//     (mn / 8) SBO + (mn % 8) 128 + 2 k
//   128-byte swizzle, MN-major (the transposed B; 64 elements of MN in a 128-byte row):
//     (mn / 64) LBO + 2 (mn % 64) + (k / 8) SBO + (k % 8) 128
//   and the 128-byte swizzle on the resulting shared address a: a ^ (((a >> 7) & 7) << 4)
//   (the 16-byte chunk index XOR the row within a 1024-byte atom);
// - the accumulator fragment: warp w of the group holds rows 16 w .. 16 w + 15; register i of
//   lane 4 g + t is row 16 w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t + (i & 1) (the
//   m16n8 C fragment of mma.sync repeated over N / 8); A from registers is the m16n8k16 A
//   fragment of mma.sync for the warp's 16 rows.
// What it checks: all 128 threads meet with the same form and descriptors; a wgmma.fence since
// the thread last waited; a fence.proxy.async after cp.async data landed; aligned descriptors;
// every element read inside the block's shared memory; nothing in flight at exit.
#include <math.h>
#include <string.h>

#include "sim_internal.h"

/* form: N (8 .. 256, a multiple of 8) | the flags below (the prelude's sinter_sim.h agrees) */
enum {
    WGMMA_F16 = 1 << 9,     /* f16 inputs, else bf16 */
    WGMMA_A_REGS = 1 << 10, /* A from registers, else from a descriptor */
    WGMMA_TRANS_B = 1 << 11 /* B MN-major (imm-trans-b 1), else K-major */
};
enum { KIND_WGMMA = 100 };

/* What each thread brings to the meeting. */
struct wgmma_offer {
    int form, scale_d;
    unsigned long long desc_a, desc_b;
    unsigned a[4];
    bool fenced, proxy_dirty;
};

struct smem_desc {
    unsigned start, lbo, sbo, base_offset, swizzle;
};

static smem_desc decode(unsigned long long d) {
    return smem_desc{(unsigned)(d & 0x3fff) << 4, (unsigned)(d >> 16 & 0x3fff) << 4,
                     (unsigned)(d >> 32 & 0x3fff) << 4, (unsigned)(d >> 49 & 7),
                     (unsigned)(d >> 62 & 3)};
}

static void check_desc(const char *which, unsigned long long raw, bool mn_major, int line) {
    smem_desc d = decode(raw);
    if (d.swizzle > 1)
        sim_fail(line, "wgmma: %s's descriptor asks for the %s-byte swizzle: not supported by "
                 "the simulator yet (use the 128-byte swizzle or none)", which,
                 d.swizzle == 2 ? "64" : "32");
    if (d.base_offset)
        sim_fail(line, "wgmma: %s's descriptor has matrix base offset %u: not supported by the "
                 "simulator yet (start swizzled tiles on 1024-byte boundaries, base offset 0)",
                 which, d.base_offset);
    if (d.swizzle == 0 && mn_major)
        sim_fail(line, "wgmma: %s is MN-major without a swizzle: not supported by the "
                 "simulator yet (use the 128-byte swizzle)", which);
    if (d.swizzle == 1 && (d.start >> 7 & 7))
        sim_fail(line, "wgmma: %s's descriptor starts at shared address 0x%x, not in the first "
                 "128-byte row of a 1024-byte swizzle atom (the 128-byte swizzle is a function "
                 "of the address: a tile starts 1024-byte aligned, and a K step moves the start "
                 "within the row)", which, d.start);
    if (d.swizzle == 1 && !mn_major && (d.start & 127) + 32 > 128)
        sim_fail(line, "wgmma: %s's descriptor starts %u bytes into a 128-byte row: the 16 "
                 "K-elements (32 bytes) of a K-major step must lie in one row", which,
                 d.start & 127);
}

/* The shared address of element (mn, k) of the operand described by d. */
static unsigned element_address(const smem_desc &d, bool mn_major, int mn, int k) {
    unsigned off;
    if (d.swizzle == 0)
        off = (unsigned)(mn / 8) * d.sbo + (unsigned)(k / 8) * d.lbo + (unsigned)(mn % 8) * 16 +
              (unsigned)(k % 8) * 2;
    else if (!mn_major)
        off = (unsigned)(mn / 8) * d.sbo + (unsigned)(mn % 8) * 128 + (unsigned)k * 2;
    else
        off = (unsigned)(mn / 64) * d.lbo + (unsigned)(mn % 64) * 2 + (unsigned)(k / 8) * d.sbo +
              (unsigned)(k % 8) * 128;
    unsigned a = d.start + off;
    if (d.swizzle == 1) a ^= (a >> 7 & 7) << 4;
    return a;
}

static float half_value(unsigned short bits, bool f16) {
    if (!f16) {
        unsigned u = (unsigned)bits << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    unsigned sign = bits >> 15, exp = bits >> 10 & 31, man = bits & 1023;
    float v = exp == 0 ? ldexpf((float)man, -24)
            : exp == 31 ? (man ? NAN : INFINITY)
            : ldexpf((float)(man | 1024), (int)exp - 25);
    return sign ? -v : v;
}

/* Element (mn, k) of a shared-memory operand, its address checked. */
static float shared_element(launch *l, const char *which, unsigned long long raw, bool mn_major,
                            bool f16, int mn, int k, int line) {
    unsigned a = element_address(decode(raw), mn_major, mn, k);
    if ((size_t)a + 2 > l->shared_cap)
        sim_fail(line, "wgmma: %s's element (%d, %d) is at shared address 0x%x, outside the "
                 "block's %zu bytes of shared memory (a wrong descriptor stride?)", which, mn, k,
                 a, l->shared_cap);
    unsigned short bits;
    memcpy(&bits, l->shared + a, 2);
    return half_value(bits, f16);
}

void sim_wgmma(int form, float *d, const unsigned *a, unsigned long long desc_a,
               unsigned long long desc_b, int scale_d, int line) {
    launch *l = sim_current();
    fiber *f = l->running;
    const int n = form & 511;
    if (n < 8 || n > 256 || n % 8)
        sim_fail(line, "wgmma: N = %d, not a multiple of 8 from 8 to 256", n);
    wgmma_offer mine = {form, scale_d, desc_a, desc_b, {0, 0, 0, 0}, f->wgmma_fenced,
                        f->proxy_dirty};
    if (form & WGMMA_A_REGS) memcpy(mine.a, a, sizeof mine.a);
    wgmma_offer all[128];
    sim_exchange_group(KIND_WGMMA, &mine, all, sizeof mine, line);
    for (int j = 0; j < 128; j++) {
        const wgmma_offer &o = all[j];
        if (o.form != form || o.scale_d != scale_d || o.desc_b != desc_b ||
            (!(form & WGMMA_A_REGS) && o.desc_a != desc_a))
            sim_fail(line, "wgmma: thread %d of the warpgroup gives another shape, scale-d or "
                     "descriptor (B 0x%llx against 0x%llx): all 128 threads must give the same",
                     j, o.desc_b, desc_b);
        if (!o.fenced)
            sim_fail(line, "wgmma.mma_async without a wgmma.fence before it in thread %d of the "
                     "warpgroup (the PTX ISA requires one before the first wgmma and after the "
                     "accumulator or A registers were touched, e.g. after a wait_group)", j);
        if (o.proxy_dirty)
            sim_fail(line, "wgmma reads shared memory that thread %d of the warpgroup wrote "
                     "with cp.async and did not order with fence.proxy.async (wgmma reads "
                     "through the async proxy: fence, then __syncthreads, then the wgmma)", j);
    }
    if (!(form & WGMMA_A_REGS)) check_desc("A", desc_a, false, line);
    check_desc("B", desc_b, (form & WGMMA_TRANS_B) != 0, line);

    pending_wgmma p;
    p.form = form, p.line = line, p.d = d, p.desc_a = desc_a, p.desc_b = desc_b;
    p.scale_d = scale_d, p.group = f->wgmma_groups, p.chained = false;
    unsigned warp0 = f->linear % 128 / 32 * 32;
    for (int j = 0; j < 32; j++) memcpy(p.a[j], all[warp0 + j].a, sizeof p.a[j]);
    for (const pending_wgmma &q : f->wgmmas)
        if (q.d == d) p.chained = true; /* its accumulators are an earlier wgmma's output */
    if (!p.chained && scale_d) p.c.assign(d, d + n / 2); /* scale-d 0: d is not read */
    memset(d, 0x7f, sizeof(float) * (size_t)(n / 2)); /* undefined until the wait */
    f->wgmmas.push_back(std::move(p));
}

/* d = A B (+ d) for the running thread's N / 2 accumulators. */
static void complete(launch *l, fiber *f, const pending_wgmma &p) {
    const int n = p.form & 511, warp = (int)(f->linear % 128 / 32);
    const int lane = (int)(f->linear % 32), g = lane >> 2, t = lane & 3;
    const bool f16 = (p.form & WGMMA_F16) != 0, trans_b = (p.form & WGMMA_TRANS_B) != 0;
    float arow[2][16]; /* the thread's two rows of A: g and g + 8 of the warp's 16 */
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 16; k++) {
            if (p.form & WGMMA_A_REGS) { /* a[i]: row g (+8 if i odd), cols 2t (+8 if i >= 2) */
                const unsigned *r = p.a[4 * g + (k % 8) / 2];
                unsigned w = r[h + 2 * (k / 8)];
                arow[h][k] = half_value((unsigned short)(k & 1 ? w >> 16 : w & 0xffff), f16);
            } else {
                arow[h][k] = shared_element(l, "A", p.desc_a, false, f16, 16 * warp + g + 8 * h,
                                            k, p.line);
            }
        }
    }
    for (int i = 0; i < n / 2; i++) {
        int h = (i >> 1) & 1, col = 8 * (i >> 2) + 2 * t + (i & 1);
        float acc = !p.scale_d ? 0.0f : p.chained ? p.d[i] : p.c[(size_t)i];
        for (int k = 0; k < 16; k++)
            acc += arow[h][k] * shared_element(l, "B", p.desc_b, trans_b, f16, col, k, p.line);
        p.d[i] = acc; /* products of 16-bit values are exact in f32 */
    }
}

void sim_wgmma_fence(int line) { sim_current()->running->wgmma_fenced = true; }

void sim_wgmma_commit(int line) { sim_current()->running->wgmma_groups++; }

void sim_wgmma_wait(int newest_pending, int line) {
    launch *l = sim_current();
    fiber *f = l->running;
    unsigned long long c = f->wgmma_groups, keep = (unsigned long long)newest_pending;
    unsigned long long upto = c > keep ? c - keep : 0; /* groups below this one complete */
    size_t kept = 0;
    std::vector<pending_wgmma> &q = f->wgmmas;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group < upto) complete(l, f, q[i]);
        else q[kept++] = std::move(q[i]);
    }
    q.resize(kept);
    /* the thread reads its accumulators now: the next wgmma needs a fence first */
    f->wgmma_fenced = false;
}

void sim_fence_proxy_async(int line) { sim_current()->running->proxy_dirty = false; }

void sim_wgmma_exit(fiber *f) {
    if (f->wgmmas.empty()) return;
    sim_fail(f->wgmmas[0].line, "a wgmma issued here is still in flight when the thread exits "
             "(wgmma.commit_group, then wgmma.wait_group, before its accumulators are read)");
}
