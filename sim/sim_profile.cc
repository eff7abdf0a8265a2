// sim_profile.cc: what a profiled launch counts (sim.h: sn_sim_profile), a performance instrument
// for machines without a GPU: how well a kernel's global accesses coalesce into 32-byte sectors,
// how often the same data goes through the memory system, shared memory's bank conflicts, and its
// warp-wide instructions by class. Convention: the k-th execution of one access site by each lane
// of a warp is one warp-wide request (as the hardware issues it); a block's records are counted
// when the block ends. The accesses come from the module's ThreadSanitizer instrumentation
// (sim_prelude.cc), cp.async and ldmatrix from the simulator's own entry points.
#include <algorithm>
#include <new>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "sim_internal.h"

enum { SPACE_GLOBAL, SPACE_SHARED };

struct access_rec {
    uint64_t site;
    uint32_t warp, occ;
    uint64_t addr;
    uint32_t bytes;
    uint8_t lane, space, write, copy; /* copy: a cp.async's global read */
};

struct sim_prof {
    sn_sim_profile n = {}; /* this launch's */
    std::vector<access_rec> recs;                              /* this block's */
    std::vector<std::unordered_map<uint64_t, uint32_t>> seen;  /* per thread: site -> executions */
    std::vector<long long> last; /* per thread: its latest record in recs, or -1 */
    std::unordered_set<uint64_t> footprint;                    /* the launch's distinct sectors */
    const char *tls = NULL; /* the module's thread-local thread pointer (sinter_sim.h) */
};

/* Sites of the simulator's own entry points, apart from code addresses: the top bits, the line. */
static const uint64_t SITE_COPY = 1ull << 63, SITE_LDMATRIX = 1ull << 62;

bool sim_profile_begin(launch *l) {
    sim_prof *p = new (std::nothrow) sim_prof;
    if (!p) return false;
    p->seen.resize(l->nthreads);
    p->last.assign(l->nthreads, -1);
    const void *(*tls)(void);
    *(void **)&tls = sim_module_symbol(l->m, "sn_sim_tls");
    if (tls) p->tls = (const char *)tls();
    l->prof = p;
    return true;
}

/* Whether an access of the thread's at `site` continues its latest record r as the parts of one
 * vector access do: the host compiler splits a float4 or uint4 copy into its fields, each an
 * access at its own site, where a GPU issues one 16-byte load. The same aligned 16 bytes, the
 * same direction, another site, nothing between. (An unrolled scalar loop over consecutive
 * elements is taken as one vector too; a loop's repeated access, at one site, never.) */
static bool continues(const access_rec &r, int space, uint64_t a, unsigned bytes, int write,
                      uint64_t site) {
    return r.space == space && r.write == write && !r.copy && r.site != site && bytes < 16 &&
           (r.addr & ~15ull) == (a & ~15ull) && ((a + bytes - 1) & ~15ull) == (a & ~15ull) &&
           r.addr + r.bytes <= (a & ~15ull) + 16;
}

static void record(launch *l, int space, const void *p, unsigned bytes, int write, uint64_t site,
                   bool copy) {
    sim_prof *pr = l->prof;
    const fiber *f = l->running;
    uint64_t a = (uint64_t)(uintptr_t)p;
    long long at = pr->last[f->linear];
    if (!copy && at >= 0 && continues(pr->recs[(size_t)at], space, a, bytes, write, site)) {
        access_rec &r = pr->recs[(size_t)at];
        uint64_t lo = std::min(r.addr, a), hi = std::max(r.addr + r.bytes, a + bytes);
        r.addr = lo, r.bytes = (uint32_t)(hi - lo);
        return;
    }
    uint32_t occ = pr->seen[f->linear][site]++;
    pr->last[f->linear] = (long long)pr->recs.size();
    pr->recs.push_back(access_rec{site, f->linear / 32, occ, a, bytes, (uint8_t)(f->linear % 32),
                                  (uint8_t)space, (uint8_t)write, (uint8_t)copy});
}

static bool in_shared(const launch *l, const void *p) {
    const unsigned char *a = (const unsigned char *)p;
    return a >= l->shared && a < l->shared + l->shared_cap;
}

void sim_profile_access(const void *p, unsigned bytes, int write, const void *site) {
    launch *l = sim_current();
    if (!l || !l->prof || !l->running || !bytes) return; /* not a kernel's thread */
    const char *a = (const char *)p;
    uintptr_t u = (uintptr_t)p;
    const char *f0 = (const char *)l->fibers.data(), *f1 = (const char *)(l->fibers.data() +
                                                                          l->fibers.size());
    const char *api = (const char *)&sim_api;
    if ((a >= l->stacks_lo && a < l->stacks_hi) || (u >= l->m->lo && u < l->m->hi) ||
        (a >= f0 && a < f1) || (l->prof->tls && a >= l->prof->tls && a < l->prof->tls + 8) ||
        (a >= api && a < api + sizeof sim_api))
        return; /* a thread's locals, the module's data, the thread's coordinates, the table of
                   the simulator's entry points */
    record(l, in_shared(l, p) ? SPACE_SHARED : SPACE_GLOBAL, p, bytes, write,
           (uint64_t)(uintptr_t)site, false);
}

void sim_profile_copy(const void *src, unsigned src_bytes, const void *dst, int line) {
    launch *l = sim_current();
    uint64_t site = SITE_COPY | (uint64_t)line << 1;
    if (src_bytes) record(l, SPACE_GLOBAL, src, src_bytes, 0, site, true);
    record(l, SPACE_SHARED, dst, 16, 1, site | 1, false);
}

void sim_profile_ldmatrix(const void *row, int n, int line) {
    record(sim_current(), SPACE_SHARED, row, 16, 0, SITE_LDMATRIX | (uint64_t)line << 4 | n,
           false);
}

void sim_profile_collective(launch *l, int kind) {
    sn_sim_profile &n = l->prof->n;
    if (kind == 0) n.barriers++;
    else if (kind == 100) n.wgmma++; /* sim_wgmma.cc's KIND_WGMMA (no ldmatrix form's) */
    else switch (kind % 16) {       /* sim_warp.cc's KIND_*, plus 16 x the form */
    case 1: n.shfl++; break;
    case 2: n.vote++; break;
    case 3: n.mma++; break;
    case 4: n.ldmatrix++; break;
    }
}

/* The distinct bytes of the group's accesses. */
static uint64_t distinct_bytes(const access_rec *r, size_t k) {
    std::vector<std::pair<uint64_t, uint64_t>> iv(k);
    for (size_t i = 0; i < k; i++) iv[i] = {r[i].addr, r[i].addr + r[i].bytes};
    std::sort(iv.begin(), iv.end());
    uint64_t total = 0, lo = iv[0].first, hi = iv[0].second;
    for (size_t i = 1; i < k; i++) {
        if (iv[i].first > hi) total += hi - lo, lo = iv[i].first;
        hi = std::max(hi, iv[i].second);
    }
    return total + hi - lo;
}

static void global_request(sim_prof *p, const access_rec *r, size_t k) {
    std::vector<uint64_t> sec;
    for (size_t i = 0; i < k; i++)
        for (uint64_t s = r[i].addr >> 5; s <= (r[i].addr + r[i].bytes - 1) >> 5; s++)
            sec.push_back(s);
    std::sort(sec.begin(), sec.end());
    sec.erase(std::unique(sec.begin(), sec.end()), sec.end());
    for (uint64_t s : sec) p->footprint.insert(s);
    long long bytes = (long long)distinct_bytes(r, k), n = (long long)sec.size();
    if (r[0].write) {
        p->n.st_requests++, p->n.st_sectors += n, p->n.st_bytes += bytes;
    } else {
        p->n.ld_requests++, p->n.ld_sectors += n, p->n.ld_bytes += bytes;
        p->n.cp_async += r[0].copy;
    }
}

/* The wavefronts of a shared request: lanes in phases (32 for accesses up to 4 bytes, 16 for 8,
 * 8 for 16), each phase as many as the distinct 4-byte words its busiest bank holds. */
static void shared_request(sim_prof *p, const access_rec *r, size_t k) {
    uint32_t size = 0;
    for (size_t i = 0; i < k; i++) size = std::max(size, r[i].bytes);
    unsigned per_phase = size <= 4 ? 32 : size <= 8 ? 16 : 8;
    long long waves = 0;
    for (unsigned phase = 0; phase < 32 / per_phase; phase++) {
        std::vector<uint64_t> words; /* distinct words of the phase, each knows its bank */
        for (size_t i = 0; i < k; i++)
            if (r[i].lane / per_phase == phase)
                for (uint64_t w = r[i].addr >> 2; w <= (r[i].addr + r[i].bytes - 1) >> 2; w++)
                    words.push_back(w);
        std::sort(words.begin(), words.end());
        words.erase(std::unique(words.begin(), words.end()), words.end());
        unsigned in_bank[32] = {0}, most = 0;
        for (uint64_t w : words) most = std::max(most, ++in_bank[w % 32]);
        waves += most;
    }
    long long ideal = ((long long)distinct_bytes(r, k) + 127) / 128;
    p->n.sh_requests++;
    p->n.sh_wavefronts += waves;
    p->n.sh_ideal += ideal > 0 ? ideal : 1;
}

void sim_profile_block(launch *l) {
    sim_prof *p = l->prof;
    std::vector<access_rec> &r = p->recs;
    auto key = [](const access_rec &a) { return std::tie(a.space, a.warp, a.site, a.occ, a.lane); };
    std::sort(r.begin(), r.end(), [&](const access_rec &a, const access_rec &b) {
        return key(a) < key(b);
    });
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j < r.size() && r[j].space == r[i].space && r[j].warp == r[i].warp &&
               r[j].site == r[i].site && r[j].occ == r[i].occ)
            j++;
        if (r[i].space == SPACE_GLOBAL) global_request(p, &r[i], j - i);
        else shared_request(p, &r[i], j - i);
        i = j;
    }
    r.clear();
    for (auto &m : p->seen) m.clear();
    std::fill(p->last.begin(), p->last.end(), -1);
    p->n.blocks++;
}

void sim_profile_end(launch *l, bool ok) {
    sim_prof *p = l->prof;
    if (ok) {
        sn_sim_profile &o = *l->o.profile, &n = p->n;
        n.launches = 1;
        n.footprint_sectors = (long long)p->footprint.size();
        long long *dst = &o.launches, *src = &n.launches; /* every field a long long */
        for (size_t i = 0; i < sizeof o / sizeof o.launches; i++) dst[i] += src[i];
    }
    delete p;
    l->prof = NULL;
}

void sn_sim_profile_flags(const sn_sim_profile *p, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = '\0';
    auto say = [&](const char *fmt, double v, double w) {
        if (at < n) at += (size_t)snprintf(buf + at, n - at, "%s", at ? "; " : "");
        if (at < n) at += (size_t)snprintf(buf + at, n - at, fmt, v, w);
    };
    long long moved = p->ld_sectors + p->st_sectors;
    if (moved < 64 && p->sh_requests < 64) return; /* too little to judge */
    if (p->ld_sectors && p->ld_bytes < 16 * p->ld_sectors && 10 * p->ld_sectors >= moved)
        say("uncoalesced loads: %.0f%% of the sector bytes used (%.1f sectors a request)",
            100.0 * p->ld_bytes / (32.0 * p->ld_sectors), (double)p->ld_sectors / p->ld_requests);
    if (p->st_sectors && p->st_bytes < 16 * p->st_sectors && 10 * p->st_sectors >= moved)
        say("uncoalesced stores: %.0f%% of the sector bytes used (%.1f sectors a request)",
            100.0 * p->st_bytes / (32.0 * p->st_sectors), (double)p->st_sectors / p->st_requests);
    if (p->footprint_sectors && moved > 8 * p->footprint_sectors)
        say("the same data again and again: %.1f sectors moved a distinct one (%.0f distinct)",
            (double)moved / p->footprint_sectors, (double)p->footprint_sectors);
    if (p->sh_ideal && 2 * p->sh_wavefronts > 3 * p->sh_ideal)
        say("shared bank conflicts: %.2f wavefronts where %.2f would do, a request",
            (double)p->sh_wavefronts / p->sh_requests, (double)p->sh_ideal / p->sh_requests);
}
