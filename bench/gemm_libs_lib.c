/* gemm_libs_lib.c: the GEMM libraries gemm_libs compares (oneDNN, BLIS, OpenBLAS, each compiled
 * in only where meson found it), behind one plan_new / plan_run / plan_free interface.
 * Convention: a Plan reads and writes only its Gemm's buffers, so every library sees the same data. */
#include <dlfcn.h>
#include <string.h>

#include "gemm_libs.h"

#ifdef SN_HAVE_DNNL
#include <dnnl_debug.h>
#endif
#ifdef SN_HAVE_BLIS
#include <blis.h>
#endif
#ifdef SN_HAVE_OPENMP
#include <omp.h>
#endif
#ifdef SN_HAVE_OPENBLAS
/* Declared here, not through OpenBLAS's cblas.h: blis.h declares the same cblas_* names. */
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int n);
extern int openblas_get_parallel(void);
#endif

/* A definition whose initializer count differs from NVAR (NSPEC) does not compile against the
 * header's declaration. */
const Variant variants[] = {
    {"onednn", "sgemm", 0, 0},            /* dnnl_sgemm */
    {"onednn", "matmul", 0, 0},           /* matmul primitive, plain strided layouts */
    {"onednn", "matmul+bias+gelu", 0, 1}, /* same, with bias and an eltwise gelu_tanh post-op */
    {"onednn", "matmul", 1, 0},
    {"onednn", "matmul+bias+gelu", 1, 1},
    {"blis", "bli_sgemm", 0, 0},
    {"openblas", "cblas_sgemm", 0, 0},
};

const WorkerSpec worker_specs[] = {
    {"onednn", NULL, NULL, 1},
    {"blis", "BLIS_ARCH_TYPE", "BLIS_ARCH_TYPE=skx", 1},
    {"blis", "BLIS_ARCH_TYPE", "BLIS_ARCH_TYPE=zen3", 0}, /* AVX2 kernels */
    {"blis", "BLIS_ARCH_TYPE", NULL, 0},
    {"openblas", "OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE=SKYLAKEX", 1},
    {"openblas", "OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE=COOPERLAKE", 1},
    {"openblas", "OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE=HASWELL", 0}, /* AVX2 kernels */
    {"openblas", "OPENBLAS_CORETYPE", NULL, 0},
};

int group_compiled(const char *group) {
#ifdef SN_HAVE_DNNL
    if (strcmp(group, "onednn") == 0) return 1;
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(group, "blis") == 0) return 1;
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(group, "openblas") == 0) return 1;
#endif
    (void)group;
    return 0;
}

const char *env_label(const WorkerSpec *w) { return w->env ? w->env : w->knob ? "autodetect" : "default"; }

#ifdef SN_HAVE_DNNL
static dnnl_engine_t dnnl_eng; /* one per worker process */
static dnnl_stream_t dnnl_str;
#endif

void group_init(const char *group, int threads, char *info, size_t len) {
    snprintf(info, len, "?");
#ifdef SN_HAVE_OPENMP
    omp_set_num_threads(threads);
#endif
#ifdef SN_HAVE_DNNL
    if (strcmp(group, "onednn") == 0) {
        const dnnl_version_t *ver = dnnl_version();
        if (dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) != dnnl_success) DIE("oneDNN: no CPU engine");
        if (dnnl_stream_create(&dnnl_str, dnnl_eng, dnnl_stream_default_flags) != dnnl_success)
            DIE("oneDNN: cannot create a stream");
        snprintf(info, len, "oneDNN %d.%d.%d (%s), cpu_runtime=%s, omp_set_num_threads(%d), max isa %s", ver->major,
                 ver->minor, ver->patch, ver->hash, ver->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "not OpenMP",
                 threads, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    }
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(group, "blis") == 0) {
        /* BLIS 0.9 reads BLIS_ARCH_TYPE as a number at bli_init(); accept a sub-config name too. */
        const char *want = getenv("BLIS_ARCH_TYPE");
        if (want && (*want < '0' || *want > '9')) {
            for (int id = 0; id < BLIS_NUM_ARCHS; id++)
                if (strcmp(bli_arch_string((arch_t)id), want) == 0) {
                    char num[16];
                    snprintf(num, sizeof num, "%d", id);
                    setenv("BLIS_ARCH_TYPE", num, 1);
                }
        }
        bli_init();
        bli_thread_set_num_threads(threads);
        snprintf(info, len, "BLIS %s, sub-config %s, threading %s, bli_thread_set_num_threads(%d)",
                 bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()),
                 bli_info_get_enable_openmp() ? "OpenMP" : bli_info_get_enable_pthreads() ? "pthreads" : "none",
                 threads);
    }
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(group, "openblas") == 0) {
        openblas_set_num_threads(threads);
        int par = openblas_get_parallel();
        snprintf(info, len, "%s; core %s; threading %s, openblas_set_num_threads(%d)", openblas_get_config(),
                 openblas_get_corename(), par == 1 ? "pthreads" : par == 2 ? "OpenMP" : "sequential", threads);
    }
#endif
    (void)group, (void)threads;
}

#ifdef SN_HAVE_DNNL
#define DNNL_TRY(call)                                                                               \
    do {                                                                                             \
        dnnl_status_t st_ = (call);                                                                  \
        if (st_ != dnnl_success) {                                                                   \
            snprintf(msg, msglen, "%s:%d: %s: %s", __FILE__, __LINE__, #call, dnnl_status2str(st_)); \
            return -1;                                                                               \
        }                                                                                            \
    } while (0)

/* dnnl_sgemm needs no plan; the matmul primitive (oneDNN 2.x C API) is created here, once. */
static int dnnl_plan(Plan *p, const Variant *v, char *impl, size_t impllen, char *msg, size_t msglen) {
    const Gemm *g = &p->g;
    if (strcmp(v->api, "sgemm") == 0) {
        snprintf(impl, impllen, "dnnl_sgemm isa=%s", dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
        return 0;
    }
    dnnl_data_type_t dt = v->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t ad = {g->m, g->k}, as = {g->ta == 'N' ? g->k : 1, g->ta == 'N' ? 1 : g->m};
    dnnl_dims_t bd = {g->k, g->n}, bs = {g->tb == 'N' ? g->n : 1, g->tb == 'N' ? 1 : g->k};
    dnnl_dims_t cd = {g->m, g->n}, cs = {g->n, 1}, biasd = {1, g->n}, biass = {g->n, 1};
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt, as));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt, bs));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs));
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&biasmd, 2, biasd, dnnl_f32, biass));
    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init(&desc, &amd, &bmd, v->epilogue ? &biasmd : NULL, &cmd));
    dnnl_primitive_attr_t attr;
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    if (v->epilogue) {
        dnnl_post_ops_t po;
        DNNL_TRY(dnnl_post_ops_create(&po));
        DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f));
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, dnnl_eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    DNNL_TRY(st);
    const char *info = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &info);
    snprintf(impl, impllen, "%s", info);
    st = dnnl_primitive_create(&p->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    DNNL_TRY(st);
    DNNL_TRY(dnnl_memory_create(&p->mem[0], &amd, dnnl_eng, v->bf16 ? (void *)g->abf : (void *)g->a));
    DNNL_TRY(dnnl_memory_create(&p->mem[1], &bmd, dnnl_eng, v->bf16 ? (void *)g->bbf : (void *)g->b));
    DNNL_TRY(dnnl_memory_create(&p->mem[2], &biasmd, dnnl_eng, g->bias));
    DNNL_TRY(dnnl_memory_create(&p->mem[3], &cmd, dnnl_eng, g->c));
    return 0;
}
#endif

int plan_new(Plan *p, int var, const Gemm *g, char *impl, size_t impllen, char *msg, size_t msglen) {
    const Variant *v = &variants[var];
    memset(p, 0, sizeof *p);
    p->var = var, p->g = *g;
    snprintf(impl, impllen, "?");
#ifdef SN_HAVE_DNNL
    if (strcmp(v->group, "onednn") == 0) return dnnl_plan(p, v, impl, impllen, msg, msglen);
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(v->group, "blis") == 0) {
        snprintf(impl, impllen, "%s", bli_arch_string(bli_arch_query_id()));
        return 0;
    }
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(v->group, "openblas") == 0) {
        /* Look cblas_sgemm up inside libopenblas itself: BLIS exports the same name. */
        Dl_info di;
        void *h = NULL;
        if (dladdr((void *)openblas_get_config, &di) && di.dli_fname) h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (h) *(void **)&p->cblas_sgemm = dlsym(h, "cblas_sgemm");
        if (!p->cblas_sgemm) {
            snprintf(msg, msglen, "cblas_sgemm not found in libopenblas (%s)", dlerror());
            return -1;
        }
        snprintf(impl, impllen, "%s", openblas_get_corename());
        return 0;
    }
#endif
    (void)v;
    snprintf(msg, msglen, "library not compiled in");
    return -1;
}

void plan_run(Plan *p) {
    const Variant *v = &variants[p->var];
    Gemm *g = &p->g;
#ifdef SN_HAVE_DNNL
    if (strcmp(v->group, "onednn") == 0) {
        if (!p->prim) {
            int lda = g->ta == 'N' ? g->k : g->m, ldb = g->tb == 'N' ? g->n : g->k;
            dnnl_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, lda, g->b, ldb, 0.0f, g->c, g->n);
            return;
        }
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->mem[0]}, {DNNL_ARG_WEIGHTS, p->mem[1]},
                                   {DNNL_ARG_DST, p->mem[3]}, {DNNL_ARG_BIAS, p->mem[2]}};
        dnnl_primitive_execute(p->prim, dnnl_str, v->epilogue ? 4 : 3, args);
        dnnl_stream_wait(dnnl_str);
        return;
    }
#endif
#ifdef SN_HAVE_BLIS
    if (strcmp(v->group, "blis") == 0) {
        float one = 1, zero = 0;
        inc_t rsa = g->ta == 'N' ? g->k : 1, csa = g->ta == 'N' ? 1 : g->m;
        inc_t rsb = g->tb == 'N' ? g->n : 1, csb = g->tb == 'N' ? 1 : g->k;
        bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, g->m, g->n, g->k, &one, g->a, rsa, csa, g->b, rsb, csb,
                  &zero, g->c, g->n, 1);
        return;
    }
#endif
#ifdef SN_HAVE_OPENBLAS
    if (strcmp(v->group, "openblas") == 0) {
        enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* the CBLAS enum values */
        int lda = g->ta == 'N' ? g->k : g->m, ldb = g->tb == 'N' ? g->n : g->k;
        p->cblas_sgemm(ROW_MAJOR, g->ta == 'N' ? NO_TRANS : TRANS, g->tb == 'N' ? NO_TRANS : TRANS, g->m, g->n, g->k,
                       1.0f, g->a, lda, g->b, ldb, 0.0f, g->c, g->n);
        return;
    }
#endif
    (void)v, (void)g;
}

void plan_free(Plan *p) {
#ifdef SN_HAVE_DNNL
    if (p->prim) dnnl_primitive_destroy(p->prim);
    for (int i = 0; i < 4; i++)
        if (p->mem[i]) dnnl_memory_destroy(p->mem[i]);
#endif
    memset(p, 0, sizeof *p);
}
