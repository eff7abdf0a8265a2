// sim_module.cc: CUDA C text to a loaded shared object: the prelude and sinter_sim.h written
// beside the text, g++ -O1 -shared, the result cached under a hash of everything that went in
// (text, headers, flags), so a test run compiles each distinct kernel text once.
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "sim_internal.h" /* first: it makes ir.h readable as C++ */
extern "C" {
#include "codegen/cuda/cuda.h"
#include "support/hash.h"
}

static const char *flags = "-std=gnu++17 -O1 -fPIC -shared -w -fstack-clash-protection "
                           "-fsanitize=alignment -fsanitize-undefined-trap-on-error -x c++"; /*
    * -fstack-clash-protection: a large frame probes its pages in order, so it faults on the guard
    * page below a fiber's stack instead of jumping over it; -fsanitize=alignment with the trap: a
    * load or store not aligned to its type (a float4 at an address not a multiple of 16) executes
    * ud2, as a GPU faults with "misaligned address" (sim_run.cc says which on SIGILL) */
/* A profiled module: compiled with ThreadSanitizer's instrumentation (every load and store a
 * call to __tsan_readN / __tsan_writeN, which sinter_sim.h defines as calls into the simulator),
 * linked without its runtime. */
static const char *flags_profiled = "-std=gnu++17 -O1 -fPIC -w -fstack-clash-protection "
                                    "-fsanitize=thread -fsanitize=alignment "
                                    "-fsanitize-undefined-trap-on-error -c -x c++";

static unsigned long long fnv1a(unsigned long long h, const char *s) {
    return sn_hash_word(sn_hash_str(s, h), 0xff); /* a separator between the parts */
}

static bool write_file(const std::string &path, const char *text) {
    FILE *f = fopen(path.c_str(), "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static std::string read_file(const std::string &path) {
    std::string s;
    FILE *f = fopen(path.c_str(), "r");
    if (!f) return s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

static void remove_dir(const std::string &dir) {
    const char *files[] = {SN_CUDA_PRELUDE_NAME, "sinter_sim.h", "kernel.cu", "kernel.o",
                           "kernel.so", "log"};
    for (const char *f : files) unlink((dir + "/" + f).c_str());
    rmdir(dir.c_str());
}

/* Compiles src into so_path (atomically: a concurrent compile of the same text is harmless). */
static sn_status compile(const std::string &cache, const char *src, const std::string &so_path,
                         bool profiled, sn_err *e) {
    std::string tmpl = cache + "/build_XXXXXX";
    std::vector<char> dir(tmpl.begin(), tmpl.end());
    dir.push_back('\0');
    if (!mkdtemp(dir.data()))
        return sn_fail(e, SN_ERR_IO, "sn_sim_module_load: cannot make a directory in %s",
                       cache.c_str());
    std::string d = dir.data();
    if (!write_file(d + "/" SN_CUDA_PRELUDE_NAME, sn_cuda_prelude()) ||
        !write_file(d + "/sinter_sim.h", sn_sim_header()) || !write_file(d + "/kernel.cu", src)) {
        remove_dir(d);
        return sn_fail(e, SN_ERR_IO, "sn_sim_module_load: cannot write in %s", d.c_str());
    }
    std::string cmd = "cd '" + d + "' && g++ " + flags + " kernel.cu -o kernel.so > log 2>&1";
    if (profiled)
        cmd = "cd '" + d + "' && g++ " + flags_profiled + " kernel.cu -o kernel.o > log 2>&1 && "
              "g++ -shared kernel.o -o kernel.so >> log 2>&1";
    if (system(cmd.c_str()) != 0) {
        std::string log = read_file(d + "/log");
        remove_dir(d);
        return sn_fail(e, SN_ERR_DEVICE, "sn_sim_module_load: g++ rejected the kernel text:\n%s",
                       log.c_str());
    }
    if (rename((d + "/kernel.so").c_str(), so_path.c_str()) != 0) {
        remove_dir(d);
        return sn_fail(e, SN_ERR_IO, "sn_sim_module_load: cannot move the module to %s",
                       so_path.c_str());
    }
    remove_dir(d);
    return SN_OK;
}

/* The address range of the loaded object at `path` (its PT_LOAD segments). */
struct object_range {
    const char *path;
    uintptr_t lo, hi;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *ctx) {
    object_range *r = (object_range *)ctx;
    if (!info->dlpi_name || strcmp(info->dlpi_name, r->path)) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
        if (!r->lo || lo < r->lo) r->lo = lo;
        if (hi > r->hi) r->hi = hi;
    }
    return 1;
}

static sn_status load(const char *src, bool profiled, sn_sim_module **out, sn_err *e) {
    *out = NULL;
    static int have_gxx = -1; /* the same answer for every thread */
    if (have_gxx < 0) have_gxx = system("g++ --version > /dev/null 2>&1") == 0;
    if (!have_gxx)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "sn_sim_module_load: no g++ on this machine: the "
                       "simulator compiles kernels with the host C++ compiler");
    const char *tmp = getenv("TMPDIR");
    std::string cache = std::string(tmp && *tmp ? tmp : "/tmp") + "/sinter_sim_" +
                        std::to_string((long)getuid());
    mkdir(cache.c_str(), 0700);
    unsigned long long h = SN_HASH_INIT;
    h = fnv1a(fnv1a(fnv1a(fnv1a(h, profiled ? flags_profiled : flags), sn_cuda_prelude()),
                      sn_sim_header()), src);
    char name[40];
    snprintf(name, sizeof name, "/%016llx.so", h);
    std::string so_path = cache + name;
    const char *use_cache = getenv("SN_SIM_CACHE");
    bool cached = !(use_cache && strcmp(use_cache, "0") == 0) && access(so_path.c_str(), R_OK) == 0;
    if (!cached) {
        sn_status st = compile(cache, src, so_path, profiled, e);
        if (st != SN_OK) return st;
    }
    void *so = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!so) return sn_fail(e, SN_ERR_DEVICE, "sn_sim_module_load: %s", dlerror());
    unsigned (*bind)(const sn_sim_api *);
    *(void **)&bind = dlsym(so, "sn_sim_bind");
    sn_sim_module *m = new sn_sim_module{so, NULL, profiled, 0, 0};
    if (profiled) { /* its own data: not global memory (sim_profile.cc) */
        object_range r = {so_path.c_str(), 0, 0};
        dl_iterate_phdr(find_object, &r);
        m->lo = r.lo;
        m->hi = r.hi;
    }
    *(void **)&m->enter = dlsym(so, "sn_sim_enter");
    if (!bind || !m->enter) {
        sn_sim_module_free(m);
        return sn_fail(e, SN_ERR_INVALID, "sn_sim_module_load: the text does not include the "
                       "prelude (#include \"" SN_CUDA_PRELUDE_NAME "\")");
    }
    unsigned abi = bind(&sim_api);
    SN_ASSERT(abi == SN_SIM_ABI); /* sinter_sim.h and sim_internal.h drifted apart */
    *out = m;
    return SN_OK;
}

sn_status sn_sim_module_load(const char *src, sn_sim_module **out, sn_err *e) {
    return load(src, false, out, e);
}

sn_status sn_sim_module_load_profiled(const char *src, sn_sim_module **out, sn_err *e) {
    return load(src, true, out, e);
}

void *sim_module_symbol(sn_sim_module *m, const char *name) { return dlsym(m->so, name); }

int sn_sim_has_kernel(const sn_sim_module *m, const char *name) {
    std::string s = std::string(name) + "_host";
    return dlsym(m->so, s.c_str()) != NULL;
}

void sn_sim_module_free(sn_sim_module *m) {
    if (!m) return;
    if (m->so) dlclose(m->so);
    delete m;
}
