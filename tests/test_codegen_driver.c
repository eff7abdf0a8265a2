/* test_codegen_driver.c: the LLVM code generator's driver (llvm_jit.c): the verifier, errors
 * and their messages, IR text, batches and code sharing, two JITs on two threads, every kernel
 * of GPT-2 tiny, and (printed, never asserted) speed against plain C loops. The kernels one by
 * one are in test_codegen.c; the helpers in codegen_util.h. */
#if __has_include(<llvm-c/Core.h>) && !defined(SN_HAVE_LLVM)
#define SN_HAVE_LLVM 1 /* the library is built with LLVM when its headers are on our path */
#endif

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/llvm/llvm_util.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"
#include "program/program.h"
#include "codegen_util.h"

/* ---- errors, IR text, batches, threads ---- */

#ifdef SN_HAVE_LLVM
START_TEST(test_verifier) {
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("bad", ctx);
    sn_ll L;
    sn_ll_init(&L, mod, 16, NULL, NULL);
    sn_ll_fn_begin(&L, "k0_no_return");
    sn_ll_buf(&L, 0, SN_F32, "x"); /* and no terminator */
    sn_err e;
    sn_status st = sn_ll_verify(mod, &e);
    ck_assert_int_ne(st, SN_OK);
    ck_assert_msg(strstr(e.msg, "does not have terminator") && strstr(e.msg, "llvm_jit.c:"),
                  "message: %s", e.msg);
    sn_ll_fn_end(&L); /* mended, it passes */
    ck_assert_msg(sn_ll_verify(mod, &e) == SN_OK, "%s", e.msg);
    sn_ll_done(&L);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
}
END_TEST
#endif

static void expect_fail(sn_jit *j, sn_kernel *k, sn_status code, const char *part) {
    sn_err e;
    sn_cpu_kernel_fn fn = (sn_cpu_kernel_fn)1;
    sn_status st = sn_jit_compile(j, &k, 1, &fn, &e);
    ck_assert_msg(st == code, "%s: status %s, expected %s (%s)", k->name, sn_status_name(st),
                  sn_status_name(code), st ? e.msg : "");
    ck_assert_msg(strstr(e.msg, part), "message \"%s\" lacks \"%s\"", e.msg, part);
    ck_assert(fn == NULL);
}

START_TEST(test_errors) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *a = in_f32(&t, "a", SN_SHAPE(4, 8), -1, 1), *b = in_f32(&t, "b", SN_SHAPE(8, 3), -1, 1);
    sn_node *mm = sn_matmul(t.g, a, b), *lse = sn_softmax(t.g, a);
    int32_t tg[4] = {0, 1, 2, 3};
    sn_node *loss = sn_cross_entropy(t.g, a, in_i32(&t, "t", SN_SHAPE(4), tg), -1);
    ck_assert_msg(!sn_graph_error(t.g), "%s", sn_graph_error(t.g));
    sn_jit *j = new_jit(LANES);
    sn_kernel k;
    node_kernel(&k, SN_KER_ROW, mm);
    k.kind = SN_KER_GEMM;
    expect_fail(j, &k, SN_ERR_UNSUPPORTED, "library");
    node_kernel(&k, SN_KER_ROW, lse);
    k.n_items = 3;
    expect_fail(j, &k, SN_ERR_INTERNAL, "n_items is 3"); /* kernel_check.c */
    node_kernel(&k, SN_KER_ROW, loss); /* the loss in one kernel (fuse makes two stages) */
    k.stage = SN_SUM_WHOLE;
    sn_kernel_work(&k, &k.n_items, &k.serial);
    k.serial = false;
    expect_fail(j, &k, SN_ERR_INTERNAL, "serial");
    sn_kernel k2;
    node_kernel(&k, SN_KER_ROW, lse);
    node_kernel(&k2, SN_KER_ROW, lse);
    sn_kernel *two[2] = {&k, &k2};
    sn_cpu_kernel_fn fns[2];
    sn_err e;
    ck_assert_int_eq(sn_jit_compile(j, two, 2, fns, &e), SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "unique"), "%s", e.msg);
    k2.name[1] = '9'; /* renamed, the batch compiles, and the jit is still usable */
    ck_assert_msg(sn_jit_compile(j, two, 2, fns, &e) == SN_OK, "%s", e.msg);
    ck_assert(fns[0] && fns[0] == fns[1]); /* identical kernels share code */
    sn_cpu_kernel_fn again[2];
    ck_assert_msg(sn_jit_compile(j, two, 2, again, &e) == SN_OK, "%s", e.msg); /* nothing new */
    ck_assert_msg(again[0] == fns[0] && again[1] == fns[0], "%p %p %p %p", (void *)fns[0], (void *)fns[1], (void *)again[0], (void *)again[1]);
    ck_assert_int_eq(sn_jit_get_stats(j).shared, 3);
    sn_jit_free(j);
    setenv("SN_JIT_LANES", "12", 1);
    sn_status st = sn_jit_new(&j, &e);
    unsetenv("SN_JIT_LANES");
    ck_assert_int_eq(st, SN_ERR_INVALID);
    ck_assert_msg(strstr(e.msg, "SN_JIT_LANES=12: the vector width must be 4, 8 or 16"), "%s", e.msg);
    tc_free(&t);
}
END_TEST

START_TEST(test_ir_text) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(4, 768), -1, 1), *w = in_f32(&t, "w", SN_SHAPE(768), -1, 1);
    sn_node *y = sn_layernorm(t.g, x, w, in_f32(&t, "b", SN_SHAPE(768), -1, 1), 1e-5f);
    sn_kernel k;
    node_kernel(&k, SN_KER_ROW, y);
    sn_jit *j = new_jit(LANES);
    char *raw, *opt;
    sn_err e;
    ck_assert_msg(sn_jit_kernel_ir(j, &k, false, &raw, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_jit_kernel_ir(j, &k, true, &opt, &e) == SN_OK, "%s", e.msg);
    char want[96];
    snprintf(want, sizeof want, "define void @%s(", k.name);
    ck_assert_msg(strstr(raw, want) && strstr(opt, want), "no %s in:\n%s", want, raw);
    ck_assert_msg(strstr(raw, "%rstd") && strstr(raw, "%mean") && strstr(raw, "r.body"), "names:\n%s", raw);
    ck_assert_msg(strstr(opt, " x float>"), "not vectorised:\n%s", opt);
    printf("ir: %s: %zu bytes raw, %zu optimised, target %s\n", k.name, strlen(raw), strlen(opt), sn_jit_target(j));
    free(raw);
    free(opt);
    sn_jit_free(j);
    tc_free(&t);
}
END_TEST

/* a batch of many kernels: one module, one link */
START_TEST(test_batch) {
    tcase t;
    tc_init(&t, LANES);
    enum { N = 96 };
    sn_node *x = in_f32(&t, "x", SN_SHAPE(8, 37), -2, 2), *w = in_f32(&t, "w", SN_SHAPE(37), 0.5f, 1);
    sn_node *nodes[N];
    sn_node *cur = x;
    for (int i = 0; i < N; i++) {
        sn_node *c = sn_scalar(t.g, SN_F32, 1 + 0.01f * (float)i); /* folded: kernels differ */
        switch (i % 4) {
        case 0: cur = sn_gelu(t.g, sn_add(t.g, sn_mul(t.g, cur, c), w)); break;
        case 1: cur = sn_softmax(t.g, cur); break; /* these share one function */
        case 2: cur = sn_layernorm(t.g, cur, w, w, 1e-5f * (float)(i + 1)); break;
        case 3: cur = sn_mul(t.g, sn_tanh(t.g, cur), sn_mul(t.g, w, c)); break;
        }
        nodes[i] = cur;
    }
    tc_run(&t);
    pwk *pws = calloc(N, sizeof *pws);
    sn_kernel *ks = calloc(N, sizeof *ks), *kp[N];
    for (int i = 0; i < N; i++) {
        if (i % 4 == 1 || i % 4 == 2) node_kernel(&ks[i], SN_KER_ROW, nodes[i]);
        else {
            pw_of(&pws[i], nodes[i]);
            ks[i] = pws[i].k;
        }
        kp[i] = &ks[i];
    }
    sn_jit *j = new_jit(LANES);
    sn_cpu_kernel_fn fns[N];
    sn_err e;
    ck_assert_msg(sn_jit_compile(j, kp, N, fns, &e) == SN_OK, "%s", e.msg);
    sn_jit_stats s = sn_jit_get_stats(j);
    printf("batch: %d kernels (%d distinct) compiled in %.0f ms (build+verify %.0f, O3 %.0f, "
           "codegen+link %.0f)\n", s.kernels, s.kernels - s.shared, s.build_ms + s.opt_ms + s.link_ms,
           s.build_ms, s.opt_ms, s.link_ms);
    ck_assert_int_eq(s.shared, N / 4 - 1);
    for (int i = 0; i < N; i += 7) { /* spot checks */
        void *bufs[SN_KER_MAX_ARGS];
        float out[8 * 37];
        bufs[0] = out;
        for (int a = 1; a < 1 + ks[i].n_in; a++) bufs[a] = host_of(&t, ks[i].args[a]);
        fns[i](bufs, 0, ks[i].n_items);
        compare_out(t.it, &ks[i], 0, out, 1e-5, "batch");
    }
    sn_jit_free(j);
    free(pws);
    free(ks);
    tc_free(&t);
}
END_TEST

/* The object cache (sn_jit_set_cache): a batch compiled once is linked from its object file
 * by a second JIT (no O3, the same results bit for bit); a corrupted entry is refused by its
 * checksum and compiled again; another batch has an entry of its own; a cache turned off
 * writes nothing. */
static void run_cached(sn_blobcache *c, sn_kernel **kp, int n, tcase *t, float *out, int *cached) {
    sn_jit *j = new_jit(0);
    sn_jit_set_cache(j, c);
    sn_cpu_kernel_fn fns[4];
    sn_err e;
    ck_assert_msg(sn_jit_compile(j, kp, n, fns, &e) == SN_OK, "%s", e.msg);
    *cached = sn_jit_get_stats(j).cached;
    for (int i = 0; i < n; i++) {
        void *bufs[SN_KER_MAX_ARGS] = {out + i * 8 * 37};
        for (int a = 1; a < 1 + kp[i]->n_in; a++) bufs[a] = host_of(t, kp[i]->args[a]);
        fns[i](bufs, 0, kp[i]->n_items);
        compare_out(t->it, kp[i], 0, out + i * 8 * 37, 1e-5, "cached batch");
    }
    sn_jit_free(j);
}

static int entries(const char *dir, char *first, size_t len) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s/*.o 2>/dev/null", dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    char line[700];
    while (p && fgets(line, sizeof line, p))
        if (n++ == 0 && first) snprintf(first, len, "%.*s", (int)strcspn(line, "\n"), line);
    if (p) pclose(p);
    return n;
}

START_TEST(test_object_cache) {
    tcase t;
    tc_init(&t, 0);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(8, 37), -2, 2), *w = in_f32(&t, "w", SN_SHAPE(37), 0.5f, 1);
    sn_node *ln = sn_layernorm(t.g, x, w, w, 1e-5f), *g = sn_gelu(t.g, sn_mul(t.g, x, w));
    tc_run(&t);
    sn_kernel k0, k1;
    pwk pw;
    node_kernel(&k0, SN_KER_ROW, ln);
    pw_of(&pw, g);
    k1 = pw.k;
    sn_kernel *both[2] = {&k0, &k1}, *one[1] = {&k0};
    char dir[] = "/tmp/sn_objcache_XXXXXX";
    ck_assert(mkdtemp(dir));
    sn_blobcache c;
    sn_blobcache_init(&c, dir, "cpu", false);
    float a[2 * 8 * 37], b[2 * 8 * 37];
    int cached;
    run_cached(&c, both, 2, &t, a, &cached); /* compiled and stored */
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(c.misses, 1);
    char sub[600], entry[700];
    snprintf(sub, sizeof sub, "%s/cpu", dir);
    ck_assert_int_eq(entries(sub, entry, sizeof entry), 1);
    run_cached(&c, both, 2, &t, b, &cached); /* linked from the object file */
    ck_assert_int_eq(cached, 1);
    ck_assert_int_eq(c.hits, 1);
    ck_assert(!memcmp(a, b, sizeof a));
    /* a flipped byte in the object: refused, compiled again, the entry replaced */
    FILE *f = fopen(entry, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, -100, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -100, SEEK_END);
    fputc(ch ^ 0x40, f);
    fclose(f);
    run_cached(&c, both, 2, &t, b, &cached);
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(c.rejected, 1);
    ck_assert(!memcmp(a, b, sizeof a));
    run_cached(&c, both, 2, &t, b, &cached);
    ck_assert_int_eq(cached, 1);
    /* another batch: its own entry */
    run_cached(&c, one, 1, &t, b, &cached);
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(entries(sub, NULL, 0), 2);
    /* off: nothing read or written */
    sn_blobcache off;
    char dir2[] = "/tmp/sn_objcache_XXXXXX";
    ck_assert(mkdtemp(dir2));
    sn_blobcache_init(&off, dir2, "cpu", true);
    run_cached(&off, both, 2, &t, b, &cached);
    ck_assert_int_eq(cached, 0);
    snprintf(sub, sizeof sub, "%s/cpu", dir2);
    ck_assert_int_eq(entries(sub, NULL, 0), 0);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, dir2);
    ck_assert_int_eq(system(cmd), 0);
    tc_free(&t);
}
END_TEST

typedef struct {
    tcase *t;
    sn_kernel *k;
    int ok;
} thread_job;

static void *compile_and_run(void *arg) {
    thread_job *job = arg;
    sn_jit *j;
    sn_err e;
    if (sn_jit_new(&j, &e)) return NULL;
    for (int round = 0; round < 3; round++) {
        sn_cpu_kernel_fn fn;
        if (sn_jit_compile(j, &job->k, 1, &fn, &e)) break;
        float out[64 * 96];
        const double *want = sn_interp_value(job->t->it, job->k->args[0]);
        fn((void *[]){out, job->t->host[job->k->args[1]->id], job->t->host[job->k->args[2]->id],
                      job->t->host[job->k->args[3]->id]}, 0, job->k->n_items);
        int good = 1;
        for (int i = 0; i < 64 * 96; i++) good &= fabs(out[i] - want[i]) <= 1e-4;
        job->ok += good;
    }
    sn_jit_free(j);
    return NULL;
}

/* two sn_jit objects compiling and running at once on two threads */
START_TEST(test_two_jits) {
    tcase t;
    tc_init(&t, LANES);
    sn_node *x = in_f32(&t, "x", SN_SHAPE(64, 96), -2, 2), *w = in_f32(&t, "w", SN_SHAPE(96), -1, 1);
    sn_node *y = sn_layernorm(t.g, x, w, in_f32(&t, "b", SN_SHAPE(96), -1, 1), 1e-5f);
    tc_run(&t);
    sn_kernel k[2];
    thread_job jobs[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        node_kernel(&k[i], SN_KER_ROW, y);
        jobs[i] = (thread_job){&t, &k[i], 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, compile_and_run, &jobs[i]), 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    ck_assert_int_eq(jobs[0].ok, 3);
    ck_assert_int_eq(jobs[1].ok, 3);
    tc_free(&t);
}
END_TEST

/* Every generated kernel of GPT-2 tiny's training graph, as passes/fuse.c makes them (with and
 * without the attention pass), against the interpreter: inputs are the interpreter's values. */
START_TEST(test_gpt2_kernels) {
    for (int fused = 0; fused <= 1; fused++) {
        sn_gpt2_config c;
        ck_assert(sn_gpt2_config_find("tiny", &c));
        sn_graph *g = sn_graph_new();
        sn_gpt2 m;
        sn_err e;
        ck_assert_msg(sn_gpt2_build(g, &c, 2, 16, &m, &e) == SN_OK, "%s", e.msg);
        sn_pipeline_opts o = sn_pipeline_defaults();
        o.backward = true;
        o.fuse_attention = fused;
        ck_assert_msg(sn_compile(g, &o, NULL, NULL, &e) == SN_OK, "%s", e.msg);
        sn_program *p;
        ck_assert_msg(sn_pipeline_kernels(g, &(sn_pipeline_opts){0}, &p, NULL, &e) == SN_OK, "%s", e.msg);
        sn_interp *it = sn_interp_new(g, false);
        sn_interp_keep_all(it, true);
        unsigned seed = 1;
        for (int i = 0; i < g->n_nodes; i++) {
            const sn_node *n = g->nodes[i];
            if (n->op != SN_OP_INPUT && n->op != SN_OP_PARAM) continue;
            int64_t count = sn_numel(n);
            float *v = malloc(sizeof(float) * (size_t)count);
            for (int64_t q = 0; q < count; q++)
                v[q] = n->dtype == SN_I32 ? (float)((int)(rnd(&seed) * (float)c.vocab) % c.vocab)
                                          : (rnd(&seed) - 0.5f) * (n->op == SN_OP_PARAM ? 0.2f : 1);
            ck_assert_msg(sn_interp_set(it, n, v, &e) == SN_OK, "%s", e.msg);
            free(v);
        }
        ck_assert_msg(sn_interp_run(it, &e) == SN_OK, "%s", e.msg);
        sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
        int n = 0;
        for (int i = 0; i < p->n_kernels; i++)
            if (p->kernels[i]->kind != SN_KER_GEMM && p->kernels[i]->kind != SN_KER_ATTENTION) ks[n++] = p->kernels[i];
        sn_cpu_kernel_fn *fns = malloc(sizeof *fns * (size_t)n);
        sn_jit *j = new_jit(LANES);
        ck_assert_msg(sn_jit_compile(j, ks, n, fns, &e) == SN_OK, "%s", e.msg);
        sn_jit_stats st = sn_jit_get_stats(j);
        printf("gpt2 tiny%s: %d of %d kernels generated (%d share code), compiled in %.0f ms\n",
               fused ? " (attention fused)" : "", n, p->n_kernels, st.shared, st.build_ms + st.opt_ms + st.link_ms);
        for (int i = 0; i < n; i++) {
            sn_kernel *k = ks[i];
            void *bufs[SN_KER_MAX_ARGS + 1];
            if (k->stage != SN_SUM_WHOLE) bufs[k->n_out + k->n_in] = sn_test_scratch(k);
            for (int a = 0; a < k->n_out + k->n_in; a++) {
                const sn_node *x = k->args[a];
                int64_t count = sn_numel(x);
                const double *v = sn_interp_value(it, x);
                bufs[a] = malloc(4 * (size_t)count + 4);
                for (int64_t q = 0; q < count; q++) {
                    if (a < k->n_out) ((float *)bufs[a])[q] = NAN;
                    else if (x->dtype == SN_I32) ((int32_t *)bufs[a])[q] = (int32_t)v[q];
                    else ((float *)bufs[a])[q] = (float)v[q];
                }
            }
            int64_t h = k->serial ? k->n_items : k->n_items / 3;
            fns[i](bufs, 0, h);
            fns[i](bufs, h, k->n_items);
            for (int a = 0; a < k->n_out; a++) /* a PARTIAL kernel's sums: its FINISH's */
                if (sn_kernel_writes(k, a)) compare_out(it, k, a, bufs[a], 1e-4, "gpt2 tiny");
            for (int a = 0; a < k->n_out + k->n_in; a++) free(bufs[a]);
        }
        sn_jit_free(j);
        free(fns);
        free(ks);
        sn_interp_free(it);
        sn_program_free(p);
        sn_graph_free(g);
    }
}
END_TEST

/* ---- speed (printed, never asserted) ---- */

typedef void (*range_fn)(void *ctx, int64_t begin, int64_t end);

typedef struct {
    pthread_barrier_t go, done;
    range_fn fn;
    void *ctx;
    int64_t n;
    bool quit;
} duo;

static void *duo_worker(void *arg) {
    duo *d = arg;
    for (;;) {
        pthread_barrier_wait(&d->go);
        if (d->quit) return NULL;
        d->fn(d->ctx, d->n / 2, d->n);
        pthread_barrier_wait(&d->done);
    }
}

/* [0, n) split over this thread and the worker */
static void duo_run(duo *d, range_fn fn, void *ctx, int64_t n) {
    d->fn = fn;
    d->ctx = ctx;
    d->n = n;
    pthread_barrier_wait(&d->go);
    fn(ctx, 0, n / 2);
    pthread_barrier_wait(&d->done);
}

typedef struct {
    sn_cpu_kernel_fn fn;
    void **bufs;
} jit_ctx;
static void run_jit(void *ctx, int64_t b, int64_t e) {
    jit_ctx *c = ctx;
    c->fn(c->bufs, b, e);
}

typedef struct {
    const float *x, *w, *bias;
    float *y;
    int64_t C;
    int mode; /* 0: y = x + bias (same shape), 1: y = gelu(x + bias (C)), 2: layernorm rows */
} plain_ctx;

/* the plain loops the kernels are measured against */
static void run_plain(void *ctx, int64_t b, int64_t e) {
    plain_ctx *c = ctx;
    int64_t C = c->C;
    if (c->mode == 0) {
        for (int64_t i = b; i < e; i++) c->y[i] = c->x[i] + c->bias[i];
    } else if (c->mode == 1) {
        for (int64_t r = b / C; r < (e + C - 1) / C; r++)
            for (int64_t j = r * C < b ? b - r * C : 0; j < C && r * C + j < e; j++) {
                float u = c->x[r * C + j] + c->bias[j];
                c->y[r * C + j] = 0.5f * u * (1 + tanhf(0.7978845608f * (u + 0.044715f * u * u * u)));
            }
    } else {
        for (int64_t r = b; r < e; r++) {
            const float *x = c->x + r * C;
            float *y = c->y + r * C, m = 0, v = 0;
            for (int64_t j = 0; j < C; j++) m += x[j];
            m /= (float)C;
            for (int64_t j = 0; j < C; j++) v += (x[j] - m) * (x[j] - m);
            float rs = 1 / sqrtf(v / (float)C + 1e-5f);
            for (int64_t j = 0; j < C; j++) y[j] = (x[j] - m) * rs * c->w[j] + c->bias[j];
        }
    }
}

static double time_ms(duo *d, int threads, range_fn fn, void *ctx, int64_t n, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (threads == 2) duo_run(d, fn, ctx, n);
        else fn(ctx, 0, n);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6;
        if (ms < best) best = ms;
    }
    return best;
}

START_TEST(test_speed) {
    duo d = {0};
    pthread_barrier_init(&d.go, NULL, 2);
    pthread_barrier_init(&d.done, NULL, 2);
    pthread_t worker;
    ck_assert_int_eq(pthread_create(&worker, NULL, duo_worker, &d), 0);
    sn_jit *j = new_jit(LANES);
    for (int which = 0; which < 3; which++) {
        /* 0: y = x + b over 16M (3 x 64 MB moved); 1: gelu(x + bias) over (4096, 3072);
         * 2: layernorm over (1024, 768) */
        int64_t R = which == 0 ? 1 << 14 : which == 1 ? 4096 : 1024, C = which == 0 ? 1024 : which == 1 ? 3072 : 768;
        sn_graph *g = sn_graph_new();
        sn_node *x = sn_input(g, "x", SN_F32, SN_SHAPE(R, C));
        sn_node *bias = sn_input(g, "b", SN_F32, which == 0 ? SN_SHAPE(R, C) : SN_SHAPE(C));
        sn_node *w = sn_input(g, "w", SN_F32, SN_SHAPE(C));
        sn_node *y = which == 0 ? sn_add(g, x, bias) : which == 1 ? sn_gelu(g, sn_add(g, x, bias))
                                                                 : sn_layernorm(g, x, w, bias, 1e-5f);
        sn_kernel k;
        pwk p;
        if (which < 2) {
            pw_of(&p, y);
            k = p.k;
        } else node_kernel(&k, SN_KER_ROW, y);
        sn_cpu_kernel_fn fn = compile_one(j, &k);
        int64_t n = R * C;
        float *xb = malloc(4 * (size_t)n), *yb = malloc(4 * (size_t)n), *bb = malloc(4 * (size_t)n), *wb = malloc(4 * (size_t)C);
        unsigned seed = 3;
        for (int64_t i = 0; i < n; i++) xb[i] = rnd(&seed) * 4 - 2, bb[i] = rnd(&seed) - 0.5f, yb[i] = 0;
        for (int64_t i = 0; i < C; i++) wb[i] = rnd(&seed) + 0.5f;
        void *bufs[4] = {yb, xb, bb, wb};
        if (which == 2) bufs[2] = wb, bufs[3] = bb; /* layernorm args: y, x, w, b */
        jit_ctx jc = {fn, bufs};
        plain_ctx pc = {xb, wb, bb, yb, C, which};
        double bytes = which == 0 ? 3.0 * 4 * (double)n : 2.0 * 4 * (double)n;
        int reps = which == 2 ? 200 : 5;
        const char *name = which == 0 ? "add 16M" : which == 1 ? "gelu(x+b) 4096x3072" : "layernorm 1024x768";
        double t1 = time_ms(&d, 1, run_jit, &jc, k.n_items, reps), t2 = time_ms(&d, 2, run_jit, &jc, k.n_items, reps);
        int64_t items = which == 2 ? R : n;
        double c1 = time_ms(&d, 1, run_plain, &pc, items, reps), c2 = time_ms(&d, 2, run_plain, &pc, items, reps);
        printf("speed: %-22s JIT %6.2f ms (%5.1f GB/s) 1 thread, %6.2f ms (%5.1f GB/s) 2 threads | "
               "plain C -O2 %6.2f ms (%5.1f GB/s) 1 thread, %6.2f ms (%5.1f GB/s) 2 threads\n",
               name, t1, bytes / t1 / 1e6, t2, bytes / t2 / 1e6, c1, bytes / c1 / 1e6, c2, bytes / c2 / 1e6);
        free(xb);
        free(yb);
        free(bb);
        free(wb);
        sn_graph_free(g);
    }
    sn_jit_free(j);
    d.quit = true;
    pthread_barrier_wait(&d.go);
    pthread_join(worker, NULL);
    pthread_barrier_destroy(&d.go);
    pthread_barrier_destroy(&d.done);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("codegen_driver");
    TCase *tc = tcase_create("llvm");
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    if (!have_jit("codegen_driver")) return s; /* built without LLVM: say so, test nothing */
#ifdef SN_HAVE_LLVM
    tcase_add_test(tc, test_verifier);
#endif
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_ir_text);
    tcase_add_test(tc, test_batch);
    tcase_add_test(tc, test_object_cache);
    tcase_add_test(tc, test_two_jits);
    tcase_add_test(tc, test_gpt2_kernels);
    TCase *speed = tcase_create("speed"); /* CK_RUN_CASE=speed runs it alone */
    tcase_set_timeout(speed, 120);
    tcase_add_test(speed, test_speed);
    suite_add_tcase(s, speed);
    return s;
}

int main(void) { return sn_test_main(suite()); }
