/* llvm_jit.c: the driver of the CPU code generator: host target machine, one module per batch
 * of kernels, the verifier, the O3 pipeline, ORC LLJIT linking and symbol lookup.
 * Convention: every LLVM call that can fail goes through LLVM_CHECK, which records file:line,
 * the call and LLVM's own message, then jumps to the function's `fail:` cleanup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llvm.h"

#ifdef SN_HAVE_LLVM

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>
#include <pthread.h>
#include <time.h>

#include "support/hash.h"
#include "llvm_util.h"

/* A function this JIT linked, by its IR text from the '(' after its name. */
typedef struct {
    uint64_t hash;
    char *body;
    char symbol[96];
} jit_fn;

struct sn_jit {
    LLVMOrcThreadSafeContextRef tsc; /* the context every batch's module is built in */
    LLVMOrcLLJITRef lljit;
    LLVMTargetMachineRef tm;         /* the host, for the optimisation pipeline */
    char *triple, *cpu, *features;   /* LLVM-allocated strings */
    int lanes;
    char target[192];
    sn_jit_stats stats;
    jit_fn *fns; /* every function linked so far, for sharing identical kernels */
    int n_fns, cap_fns;
    sn_blobcache *cache; /* object files on disk, or NULL */
};

/* The object cache's entries: a description of the target (for a reader), the object file. */
static const sn_blobcache_format object_format = {"SNCPUOBJ", 1, ".o"};

static sn_status llvm_error(sn_err *e, LLVMErrorRef err, const char *file, int line,
                            const char *call) {
    char *msg = LLVMGetErrorMessage(err);
    sn_status st = sn_fail(e, SN_ERR_DEVICE, "%s:%d: %s failed: %s", file, line, call, msg);
    LLVMDisposeErrorMessage(msg);
    return st;
}

/* The one checking macro: needs `sn_status st`, `sn_err *e` and a `fail:` label in scope. */
#define LLVM_CHECK(call)                                                                           \
    do {                                                                                           \
        LLVMErrorRef err_ = (call);                                                                \
        if (err_) {                                                                                \
            st = llvm_error(e, err_, __FILE__, __LINE__, #call);                                   \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* An LLVM API that reports failure as (true, message) turned into an LLVMErrorRef. */
static LLVMErrorRef message_error(char *msg) {
    LLVMErrorRef err = LLVMCreateStringError(msg ? msg : "(no message)");
    if (msg) LLVMDisposeMessage(msg);
    return err;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* ---- the target ---- */

static pthread_once_t targets_once = PTHREAD_ONCE_INIT; /* LLVM's own one-time setup */
static void init_targets(void) {
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
}

/* Is "+name" one of the comma-separated host features? */
static bool has_feature(const char *features, const char *name) {
    size_t n = strlen(name);
    for (const char *p = features; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n + 1 && p[0] == '+' && !strncmp(p + 1, name, n)) return true;
        p = comma ? comma + 1 : NULL;
    }
    return false;
}

static LLVMErrorRef host_machine(sn_jit *j, LLVMTargetMachineRef *tm) {
    LLVMTargetRef t;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(j->triple, &t, &msg)) return message_error(msg);
    *tm = LLVMCreateTargetMachine(t, j->triple, j->cpu, j->features, LLVMCodeGenLevelAggressive,
                                  LLVMRelocDefault, LLVMCodeModelJITDefault);
    return *tm ? NULL : LLVMCreateStringError("LLVMCreateTargetMachine returned NULL");
}

sn_status sn_jit_new(sn_jit **out, sn_err *e) {
    *out = NULL;
    pthread_once(&targets_once, init_targets);
    sn_jit *j = sn_calloc(1, sizeof *j, "the LLVM JIT", e);
    if (!j) return SN_ERR_OOM;
    sn_status st = SN_OK;
    LLVMTargetMachineRef jit_tm = NULL;
    j->triple = LLVMGetDefaultTargetTriple();
    j->cpu = LLVMGetHostCPUName();
    j->features = LLVMGetHostCPUFeatures();
    j->lanes = has_feature(j->features, "avx512f") ? 16 : has_feature(j->features, "avx2") ? 8 : 4;
    const char *lanes = getenv("SN_JIT_LANES"); /* another vector width, to test or compare */
    if (lanes && *lanes) {
        if (strcmp(lanes, "4") && strcmp(lanes, "8") && strcmp(lanes, "16")) {
            st = sn_fail(e, SN_ERR_INVALID, "SN_JIT_LANES=%s: the vector width must be 4, 8 or 16 "
                         "f32 lanes (or unset: %d on this CPU)", lanes, j->lanes);
            goto fail;
        }
        j->lanes = atoi(lanes);
    }
    snprintf(j->target, sizeof j->target, "%s %s, %d f32 lanes", j->triple, j->cpu, j->lanes);
    LLVM_CHECK(host_machine(j, &j->tm));
    LLVM_CHECK(host_machine(j, &jit_tm)); /* code generation: the same machine, owned by LLJIT */
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jit_tm));
    jit_tm = NULL;
    LLVM_CHECK(LLVMOrcCreateLLJIT(&j->lljit, jb)); /* takes jb */
    LLVMOrcDefinitionGeneratorRef gen; /* libm and libc (memset) from the process */
    LLVM_CHECK(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(j->lljit), NULL, NULL));
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(j->lljit), gen);
    j->tsc = LLVMOrcCreateNewThreadSafeContext();
    *out = j;
    return SN_OK;
fail:
    if (jit_tm) LLVMDisposeTargetMachine(jit_tm);
    sn_jit_free(j);
    return st;
}

void sn_jit_free(sn_jit *j) {
    if (!j) return;
    if (j->lljit) {
        LLVMErrorRef err = LLVMOrcDisposeLLJIT(j->lljit);
        if (err) LLVMConsumeError(err);
    }
    if (j->tsc) LLVMOrcDisposeThreadSafeContext(j->tsc);
    if (j->tm) LLVMDisposeTargetMachine(j->tm);
    for (int i = 0; i < j->n_fns; i++) free(j->fns[i].body);
    free(j->fns);
    LLVMDisposeMessage(j->triple);
    LLVMDisposeMessage(j->cpu);
    LLVMDisposeMessage(j->features);
    free(j);
}

const char *sn_jit_target(const sn_jit *j) { return j->target; }
void sn_jit_set_cache(sn_jit *j, sn_blobcache *c) { j->cache = c; }
sn_jit_stats sn_jit_get_stats(const sn_jit *j) { return j->stats; }

/* ---- modules ---- */

static LLVMModuleRef new_module(sn_jit *j, LLVMContextRef ctx, const char *name) {
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(name, ctx);
    LLVMSetTarget(mod, j->triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(j->tm);
    LLVMSetModuleDataLayout(mod, dl);
    LLVMDisposeTargetData(dl);
    return mod;
}

static LLVMErrorRef verify_module(LLVMModuleRef mod) {
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) return message_error(msg);
    LLVMDisposeMessage(msg);
    return NULL;
}

sn_status sn_ll_verify(LLVMModuleRef mod, sn_err *e) {
    sn_status st = SN_OK;
    LLVM_CHECK(verify_module(mod));
fail:
    return st;
}

static sn_status optimise(sn_jit *j, LLVMModuleRef mod, sn_err *e) {
    sn_status st = SN_OK;
    LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(o, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(o, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(o, 1);
    LLVMPassBuilderOptionsSetLoopInterleaving(o, 1);
    LLVM_CHECK(LLVMRunPasses(mod, "default<O3>", j->tm, o));
fail:
    LLVMDisposePassBuilderOptions(o);
    return st;
}

/* ---- kernels ---- */

static sn_status emit(sn_ll *L, const sn_kernel *k, const char *fname, sn_err *e) {
    char kn[96];
    if (k->kind == SN_KER_GEMM)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s is a matrix product: GEMMs are library calls "
                       "(runtime/gemm.h), not generated; leave them out of sn_jit_compile",
                       sn_ll_kname(k, kn, sizeof kn));
    sn_status st = sn_kernel_check(k, e); /* the contract (program/kernel_check.c) */
    if (st) return st;
    if (k->tail) /* the CPU target keeps each FINISH a kernel (sn_target join_finish) */
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s carries a joined FINISH kernel (%s): the LLVM "
                       "backend does not generate joined kernels yet; compile for a target "
                       "without join_finish (the CPU's)", sn_ll_kname(k, kn, sizeof kn), k->tail->name);
    bool cache = k->kind == SN_KER_ATTENTION && k->anchor->op == SN_OP_ATTENTION_CACHE;
    if (k->stage != SN_SUM_WHOLE && (k->kind == SN_KER_GEMV || cache))
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s is a part of a decode split (kernel.h): the LLVM "
                       "backend generates the one-kernel form only; compile for a target without "
                       "split_decode (the CPU's)", sn_ll_kname(k, kn, sizeof kn));
    switch (k->kind) {
    case SN_KER_POINTWISE: return sn_ll_emit_pointwise(L, k, fname, e);
    case SN_KER_ROW: return sn_ll_emit_row(L, k, fname, e);
    case SN_KER_REDUCE: return sn_ll_emit_reduce(L, k, fname, e);
    case SN_KER_GATHER: return sn_ll_emit_gather(L, k, fname, e);
    case SN_KER_GRAD_ACC: case SN_KER_SQNORM: case SN_KER_CLIP: case SN_KER_ADAMW:
        return sn_ll_emit_optim(L, k, fname, e);
    case SN_KER_GEMM: break;
    case SN_KER_ATTENTION: return sn_ll_emit_attention(L, k, fname, e);
    case SN_KER_DEQUANT: return sn_ll_emit_dequant(L, k, fname, e);
    case SN_KER_GEMV: return sn_ll_emit_gemv(L, k, fname, e);
    case SN_KER_THIN:
        return sn_fail(e, SN_ERR_UNSUPPORTED, "%s is a thin product (kernel.h), which only the CUDA "
                       "backend generates; compile for a target without thin_products (the CPU's)",
                       sn_ll_kname(k, kn, sizeof kn));
    case SN_KER_KIND_COUNT: break;
    }
    SN_ASSERT(!"a kernel kind without its emitter");
    return SN_ERR_INTERNAL;
}

/* The symbol of kernel k in batch `batch` (batch < 0: the plain kernel name). */
static void symbol_name(const sn_kernel *k, int batch, char *buf, size_t len) {
    char base[80];
    if (k->name[0]) snprintf(base, sizeof base, "%s", k->name);
    else snprintf(base, sizeof base, "k%d", k->id);
    if (batch < 0) snprintf(buf, len, "%s", base);
    else snprintf(buf, len, "b%d_%s", batch, base);
}

/* ---- sharing identical kernels ---- */

/* If function `name` of mod is identical to one linked before (j->fns[0, n_done)) or added
 * earlier in this batch (j->fns[n_done, n_fns)), deletes it and sets name to that symbol;
 * else records it as pending. Returns true when it was shared. Out of memory only costs the
 * sharing: the function is kept and not recorded. */
static bool share_or_record(sn_jit *j, LLVMModuleRef mod, char *name, size_t len) {
    LLVMValueRef fn = LLVMGetNamedFunction(mod, name);
    SN_ASSERT(fn);
    char *text = LLVMPrintValueToString(fn);
    char head[112];
    snprintf(head, sizeof head, "@%s(", name);
    const char *at = strstr(text, head);
    SN_ASSERT(at);
    /* the body, without attribute group numbers (#3): they depend on what else the module held */
    char *body = malloc(strlen(at) + 1), *o = body;
    if (!body) {
        LLVMDisposeMessage(text);
        return false;
    }
    for (const char *c = at + strlen(head) - 1; *c; c++) {
        if (*c == '#' && c[1] >= '0' && c[1] <= '9') {
            while (c[1] >= '0' && c[1] <= '9') c++;
            continue;
        }
        *o++ = *c;
    }
    *o = 0;
    LLVMDisposeMessage(text);
    uint64_t h = sn_hash_str(body, SN_HASH_INIT);
    for (int i = 0; i < j->n_fns; i++)
        if (j->fns[i].hash == h && !strcmp(j->fns[i].body, body)) {
            free(body);
            LLVMDeleteFunction(fn);
            snprintf(name, len, "%s", j->fns[i].symbol);
            return true;
        }
    if (j->n_fns == j->cap_fns) {
        int cap = j->cap_fns ? 2 * j->cap_fns : 64;
        jit_fn *fns = realloc(j->fns, sizeof *j->fns * (size_t)cap);
        if (!fns) {
            free(body);
            return false;
        }
        j->fns = fns;
        j->cap_fns = cap;
    }
    jit_fn *f = &j->fns[j->n_fns++];
    f->hash = h;
    f->body = body;
    snprintf(f->symbol, sizeof f->symbol, "%s", name);
    return false;
}

sn_status sn_jit_compile(sn_jit *j, sn_kernel *const *ks, int n, sn_cpu_kernel_fn *fns, sn_err *e) {
    if (n <= 0) return SN_OK;
    sn_status st = SN_OK;
    double t0 = now_ms(), t1, t2;
    int batch = j->stats.batches;
    char mname[32];
    snprintf(mname, sizeof mname, "sinter_batch%d", batch);
    LLVMModuleRef mod = new_module(j, LLVMOrcThreadSafeContextGetContext(j->tsc), mname);
    LLVMOrcResourceTrackerRef rt = NULL;
    char (*names)[96] = sn_malloc(sizeof *names * (size_t)n, "the JIT's symbol names", e);
    if (!names) {
        LLVMDisposeModule(mod);
        return SN_ERR_OOM;
    }
    int n_done = j->n_fns, shared = 0;
    for (int i = 0; i < n && !st; i++) {
        /* each kernel in a module of its own first: printing it to compare it with the
         * kernels before costs its size, not the batch's */
        symbol_name(ks[i], batch, names[i], sizeof names[i]);
        for (int q = 0; q < i && !st; q++)
            if (!strcmp(ks[q]->name, ks[i]->name) && ks[i]->name[0]) {
                char kn[96];
                st = sn_fail(e, SN_ERR_INVALID, "%s: two kernels of one batch are named %s "
                             "(kernel names must be unique in a program)",
                             sn_ll_kname(ks[i], kn, sizeof kn), ks[i]->name);
            }
        if (st) break;
        LLVMModuleRef kmod = new_module(j, LLVMGetModuleContext(mod), names[i]);
        sn_ll L;
        sn_ll_init(&L, kmod, j->lanes, j->cpu, j->features);
        st = emit(&L, ks[i], names[i], e);
        sn_ll_done(&L);
        if (!st && share_or_record(j, kmod, names[i], sizeof names[i])) {
            shared++;
            LLVMDisposeModule(kmod);
        } else if (!st) {
            if (LLVMLinkModules2(mod, kmod)) /* takes kmod */
                st = sn_fail(e, SN_ERR_DEVICE, "linking kernel %s into the batch module failed", names[i]);
        } else {
            LLVMDisposeModule(kmod);
        }
    }
    if (!st) st = sn_ll_verify(mod, e);
    /* the cache: the module's text before optimisation names its object file */
    uint8_t key[16];
    char path[600] = "";
    char *desc = NULL;
    void *cached = NULL;
    size_t desc_len = 0, cached_len = 0;
    if (!st && j->cache && sn_blobcache_on(j->cache)) {
        sn_blobcache_hasher h;
        sn_blobcache_hash_begin(&h);
        char head[64];
        snprintf(head, sizeof head, "sinter cpu object %u; LLVM " LLVM_VERSION_STRING, object_format.version);
        sn_blobcache_hash_str(&h, head);
        sn_blobcache_hash_str(&h, j->triple);
        sn_blobcache_hash_str(&h, j->cpu);
        sn_blobcache_hash_str(&h, j->features);
        char *text = LLVMPrintModuleToString(mod);
        sn_blobcache_hash_str(&h, text);
        LLVMDisposeMessage(text);
        sn_blobcache_hash_end(&h, key);
        sn_blobcache_path(j->cache, &object_format, key, path, sizeof path);
        sn_blobcache_read(j->cache, &object_format, path, key, 0, &desc, &desc_len, &cached, &cached_len);
        free(desc);
    }
    t1 = now_ms();
    if (!st && !cached) st = optimise(j, mod, e);
    if (st) goto fail;
    t2 = now_ms();
    /* the object file: from the cache, or made by the host machine (as LLJIT would make it from
       the module: the same target machine) and stored */
    LLVMMemoryBufferRef obj = NULL;
    if (cached) {
        obj = LLVMCreateMemoryBufferWithMemoryRangeCopy(cached, cached_len, mname);
        free(cached);
        j->stats.cached++;
    } else {
        char *msg = NULL;
        if (LLVMTargetMachineEmitToMemoryBuffer(j->tm, mod, LLVMObjectFile, &msg, &obj))
            LLVM_CHECK(message_error(msg));
        if (path[0])
            sn_blobcache_write(j->cache, &object_format, path, key, 0, j->target, strlen(j->target),
                               LLVMGetBufferStart(obj), LLVMGetBufferSize(obj), "CPU kernels");
    }
    LLVMDisposeModule(mod);
    mod = NULL;
    LLVMOrcJITDylibRef dylib = LLVMOrcLLJITGetMainJITDylib(j->lljit);
    rt = LLVMOrcJITDylibCreateResourceTracker(dylib);
    LLVM_CHECK(LLVMOrcLLJITAddObjectFileWithRT(j->lljit, rt, obj)); /* takes obj */
    for (int i = 0; i < n; i++) {
        LLVMOrcExecutorAddress addr = 0;
        LLVM_CHECK(LLVMOrcLLJITLookup(j->lljit, &addr, names[i])); /* the first one links */
        fns[i] = (sn_cpu_kernel_fn)(uintptr_t)addr;
    }
    j->stats.batches++;
    j->stats.kernels += n;
    j->stats.shared += shared;
    j->stats.build_ms += t1 - t0;
    j->stats.opt_ms += t2 - t1;
    j->stats.link_ms += now_ms() - t2;
    LLVMOrcReleaseResourceTracker(rt);
    free(names);
    return SN_OK;
fail:
    if (rt) {
        LLVMErrorRef err = LLVMOrcResourceTrackerRemove(rt); /* nothing of the batch stays */
        if (err) LLVMConsumeError(err);
        LLVMOrcReleaseResourceTracker(rt);
    }
    if (mod) LLVMDisposeModule(mod);
    for (int i = n_done; i < j->n_fns; i++) free(j->fns[i].body); /* not linked after all */
    j->n_fns = n_done;
    for (int i = 0; i < n; i++) fns[i] = NULL;
    free(names);
    return st;
}

sn_status sn_jit_kernel_ir(sn_jit *j, const sn_kernel *k, bool optimized, char **text, sn_err *e) {
    *text = NULL;
    LLVMContextRef ctx = LLVMContextCreate();
    char name[96];
    symbol_name(k, -1, name, sizeof name);
    LLVMModuleRef mod = new_module(j, ctx, name);
    sn_ll L;
    sn_ll_init(&L, mod, j->lanes, j->cpu, j->features);
    sn_status st = emit(&L, k, name, e);
    sn_ll_done(&L);
    if (!st) st = sn_ll_verify(mod, e);
    if (!st && optimized) st = optimise(j, mod, e);
    if (!st) {
        char *s = LLVMPrintModuleToString(mod);
        if (!(*text = strdup(s))) st = sn_fail_oom(e, strlen(s) + 1, "a kernel's LLVM IR text");
        LLVMDisposeMessage(s);
    }
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    return st;
}

#else /* !SN_HAVE_LLVM */

static sn_status no_llvm(sn_err *e) {
    return sn_fail(e, SN_ERR_UNSUPPORTED, "the CPU device is not supported in this build: sinter "
                   "was built without LLVM (-Dllvm=disabled, or LLVM not found), so it has no CPU "
                   "code generator; use --device cuda or --device interp, or install llvm-14-dev "
                   "(or newer) and reconfigure with -Dllvm=enabled");
}

sn_status sn_jit_new(sn_jit **out, sn_err *e) {
    *out = NULL;
    return no_llvm(e);
}
void sn_jit_free(sn_jit *j) { (void)j; }
void sn_jit_set_cache(sn_jit *j, sn_blobcache *c) { (void)j, (void)c; }
sn_status sn_jit_compile(sn_jit *j, sn_kernel *const *ks, int n, sn_cpu_kernel_fn *fns, sn_err *e) {
    (void)j, (void)ks, (void)n, (void)fns;
    return no_llvm(e);
}
sn_status sn_jit_kernel_ir(sn_jit *j, const sn_kernel *k, bool optimized, char **text, sn_err *e) {
    (void)j, (void)k, (void)optimized;
    *text = NULL;
    return no_llvm(e);
}
const char *sn_jit_target(const sn_jit *j) {
    (void)j;
    return "none (built without LLVM)";
}
sn_jit_stats sn_jit_get_stats(const sn_jit *j) {
    (void)j;
    return (sn_jit_stats){0};
}

#endif
