/* test_standin.c: runtime/cuda end to end on the stand-in driver (tests/standin: libcuda over host
 * memory and the SIMT simulator, NVRTC wrapping the real one, cuBLASLt on the CPU): tiny GPT-2
 * trains 20 steps with the CPU device's losses, the kernel cache goes cold, warm and corrupt, each
 * injected failure says what failed, device pointers fault on the host. Convention: the stand-in's
 * settings are environment variables read at its first cuInit, so each test (a forked process)
 * sets its own before it opens the device. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/sinter.h"
#include "models/gpt2.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"
#include "support/clock.h"
#include "train/train.h"
#include "harness.h"

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

enum { B = 2, T = 16, V = 64, STEPS = 20 };

/* The stand-in's three libraries (paths from meson) and a kernel cache shared by the tests that
 * do not test the cache, so the real NVRTC runs once per program text. */
static void use_standin(void) {
    setenv("SN_LIBCUDA", SN_TEST_STANDIN_CUDA, 1);
    setenv("SN_LIBNVRTC", SN_TEST_STANDIN_NVRTC, 1);
    setenv("SN_LIBCUBLASLT", SN_TEST_STANDIN_CUBLASLT, 1);
}

static const char *shared_cache(void) {
    static char dir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sinter_standin_cache_%ld", tmp && *tmp ? tmp : "/tmp", (long)getuid());
    return dir;
}

static sn_device *cuda(const char *cache_dir) {
    use_standin();
    sn_cuda_opts o = {.cache_dir = cache_dir ? cache_dir : shared_cache()};
    sn_device *d = NULL;
    sn_err e;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    return d;
}

/* tiny GPT-2 (vocabulary 64) with its backward */
static sn_graph *tiny(void) {
    sn_gpt2_config c;
    ck_assert(sn_gpt2_config_find("tiny", &c));
    c.vocab = V;
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &c, B, T, &m, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_backward(g, m.loss, &e) == SN_OK, "%s", e.msg);
    return g;
}

static void batch(int32_t *x, int32_t *y, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % V);
        y[i] = (x[i] * 3 + 1) % V; /* a rule the model can learn */
    }
}

static sn_trainer *trainer_on(sn_graph *g, sn_device *d, sn_err *e) {
    sn_train_opts o;
    sn_train_opts_default(&o, STEPS);
    o.lr = 1e-2f;
    o.device = d;
    return sn_trainer_new(g, &o, e);
}

/* steps steps (every third with an evaluation and a second micro-batch); SN_OK or the failure */
static sn_status train(sn_trainer *t, int steps, double *loss, double *norm, sn_err *e) {
    int32_t x[B * T], y[B * T];
    sn_status st = SN_OK;
    for (int s = 0; s < steps && !st; s++) {
        batch(x, y, (uint64_t)s);
        st = sn_trainer_accumulate(t, x, y, NULL, e);
        if (!st && s % 3 == 2) {
            double l;
            batch(x, y, 1000 + (uint64_t)s);
            st = sn_trainer_eval(t, x, y, &l, e);
            if (!st) st = sn_trainer_accumulate(t, x, y, NULL, e);
        }
        sn_step_stats ss;
        if (!st) st = sn_trainer_update(t, &ss, e);
        if (!st) {
            loss[s] = ss.loss;
            norm[s] = ss.grad_norm;
        }
    }
    return st;
}

/* ---- training ---- */

START_TEST(tiny_gpt2_trains_like_the_cpu_device) {
    sn_err e;
    sn_device *cpu, *gpu = cuda(NULL);
    ck_assert_msg(sn_cpu_device_new(2, &cpu, &e) == SN_OK, "%s", e.msg);
    sn_graph *g1 = tiny(), *g2 = tiny();
    sn_trainer *a = trainer_on(g1, cpu, &e);
    ck_assert_msg(a, "%s", e.msg);
    sn_trainer *b = trainer_on(g2, gpu, &e);
    ck_assert_msg(b, "%s", e.msg);
    double la[STEPS], lb[STEPS], na[STEPS], nb[STEPS];
    ck_assert_msg(train(a, STEPS, la, na, &e) == SN_OK, "%s", e.msg);
    double t0 = sn_clock_s();
    ck_assert_msg(train(b, STEPS, lb, nb, &e) == SN_OK, "%s", e.msg);
    double secs = sn_clock_s() - t0;
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        ck_assert_msg(fabs(la[s] - lb[s]) <= 1e-5 && fabs(na[s] - nb[s]) <= 1e-4 * fmax(1, na[s]),
                      "step %d: loss %.9g (cpu) vs %.9g (cuda), norm %.9g vs %.9g", s, la[s], lb[s],
                      na[s], nb[s]);
        worst = fmax(worst, fabs(la[s] - lb[s]));
    }
    ck_assert_msg(la[STEPS - 1] < la[0] - 0.5, "loss %g -> %g: not learning", la[0], la[STEPS - 1]);
    sn_cuda_stats st;
    sn_cuda_stats_get(gpu, &st);
    ck_assert_int_eq(st.sm, 80);
    ck_assert_int_gt(st.gemm_plans, 0);
    ck_assert_int_ge(st.graphs_captured, 2); /* the training and the evaluation sequences */
    ck_assert_int_gt(st.graph_launches, STEPS);
    printf("test_standin: 20 steps of tiny GPT-2 on the stand-in in %.1f s: loss %.4f -> %.4f, "
           "largest difference from the cpu device %.2g; %d GEMM plans, %d graphs captured, %d "
           "replays, %d eager flushes\n", secs, lb[0], lb[STEPS - 1], worst, st.gemm_plans,
           st.graphs_captured, st.graph_launches, st.eager_steps);
    /* events time the stream */
    void *e0 = gpu->event_new(gpu, &e), *e1 = gpu->event_new(gpu, &e);
    double secs_ev = -1;
    ck_assert(e0 && e1);
    ck_assert_msg(gpu->event_record(gpu, e0, &e) == SN_OK && gpu->event_record(gpu, e1, &e) == SN_OK &&
                  gpu->sync(gpu, &e) == SN_OK && gpu->event_elapsed(gpu, e0, e1, &secs_ev, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert(secs_ev >= 0 && secs_ev < 10);
    gpu->event_free(gpu, e0);
    gpu->event_free(gpu, e1);
    sn_trainer_free(a);
    sn_trainer_free(b);
    sn_graph_free(g1);
    sn_graph_free(g2);
    sn_device_free(cpu);
    sn_device_free(gpu);
}
END_TEST

/* ---- device memory ---- */

/* A device pointer is no host address: writing through one faults (SIGSEGV, or SIGBUS when
 * the compiler addresses it through the stack pointer's register: x86's stack-segment fault). */
START_TEST(device_pointers_fault_on_the_host) {
    sn_device *d = cuda(NULL);
    sn_err e;
    volatile float *p = d->alloc(d, 64, &e);
    ck_assert_msg(p, "%s", e.msg);
    float one = 1, back = 0;
    ck_assert(d->upload(d, (void *)p, &one, 4, &e) == SN_OK);
    ck_assert(d->download(d, &back, (void *)p, 4, &e) == SN_OK && back == 1);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        p[0] = 2; /* faults here */
        _exit(0);
    }
    int wst = 0;
    ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
    ck_assert_msg(WIFSIGNALED(wst) && (WTERMSIG(wst) == SIGSEGV || WTERMSIG(wst) == SIGBUS),
                  "a host write to device pointer %p did not fault (status 0x%x)", (void *)p, wst);
    sn_device_free(d);
}
END_TEST

/* ---- the kernel cache ---- */

typedef struct {
    sn_cuda_stats st;
    double loss[2];
    int files;
} cache_round;

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *f; d && (f = readdir(d));) n += f->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* Opens a device on cache dir, builds a trainer (every kernel compiled), trains two steps. */
static cache_round cache_run(const char *dir) {
    cache_round r = {0};
    sn_device *d = cuda(dir);
    sn_graph *g = tiny();
    sn_err e;
    sn_trainer *t = trainer_on(g, d, &e);
    ck_assert_msg(t, "%s", e.msg);
    double norm[2];
    ck_assert_msg(train(t, 2, r.loss, norm, &e) == SN_OK, "%s", e.msg);
    sn_cuda_stats_get(d, &r.st);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
    r.files = count_files(dir);
    return r;
}

/* Flips a byte in the middle of every entry. */
static void corrupt_all(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *f; (f = readdir(d));) {
        if (f->d_name[0] == '.') continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
        FILE *fp = fopen(path, "r+b");
        ck_assert_ptr_nonnull(fp);
        fseek(fp, 0, SEEK_END);
        long mid = ftell(fp) / 2;
        fseek(fp, mid, SEEK_SET);
        int c = fgetc(fp);
        fseek(fp, mid, SEEK_SET);
        fputc(c ^ 0x5a, fp);
        fclose(fp);
    }
    closedir(d);
}

START_TEST(kernel_cache_cold_warm_corrupt) {
    char dir[] = "/tmp/sn_standin_cache_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    cache_round cold = cache_run(dir);
    ck_assert_int_gt(cold.st.nvrtc_runs, 0);
    ck_assert_int_eq(cold.st.cache_hits, 0);
    ck_assert_int_eq(cold.files, cold.st.nvrtc_runs); /* one entry per compiled module */
    cache_round warm = cache_run(dir);
    ck_assert_int_eq(warm.st.nvrtc_runs, 0); /* NVRTC never ran */
    ck_assert_int_eq(warm.st.cache_hits, cold.st.nvrtc_runs);
    ck_assert_int_eq(warm.st.cache_rejected, 0);
    corrupt_all(dir);
    cache_round bad = cache_run(dir);
    ck_assert_int_eq(bad.st.cache_rejected, cold.files); /* every damaged entry refused ... */
    ck_assert_int_eq(bad.st.nvrtc_runs, cold.st.nvrtc_runs); /* ... and compiled again */
    ck_assert_int_eq(bad.st.cache_hits, 0);
    cache_round again = cache_run(dir); /* the rewritten entries are good */
    ck_assert_int_eq(again.st.nvrtc_runs, 0);
    ck_assert_int_eq(again.st.cache_rejected, 0);
    for (int s = 0; s < 2; s++)
        ck_assert_msg(cold.loss[s] == warm.loss[s] && cold.loss[s] == bad.loss[s] &&
                      cold.loss[s] == again.loss[s], "step %d: losses %.9g %.9g %.9g %.9g", s,
                      cold.loss[s], warm.loss[s], bad.loss[s], again.loss[s]);
    printf("test_standin: kernel cache: cold %d NVRTC runs in %.2f s, warm %d hits in %.3f s, "
           "%d corrupt entries rejected and recompiled\n", cold.st.nvrtc_runs, cold.st.compile_s,
           warm.st.cache_hits, warm.st.compile_s, bad.st.cache_rejected);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- injected failures: each a status whose message names what failed ---- */

static const struct {
    const char *env, *value; /* the stand-in's setting */
    sn_status status;
    const char *says[3];     /* what the message must contain */
} failures[] = {
    {"SN_STANDIN_FAIL_ALLOC", "2", SN_ERR_OOM,
     {"cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", NULL}},
    {"SN_STANDIN_MEM", "64K", SN_ERR_OOM,
     {"cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY", "the GPU has", "use a smaller --batch or --seq"}},
    {"SN_STANDIN_NO_BINARY", "1", SN_ERR_DEVICE,
     {"cuModuleLoadData: CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available", NULL}},
    {"SN_STANDIN_FAIL_LAUNCH", "7", SN_ERR_DEVICE,
     {"cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)", "(kernel k", NULL}},
    {"SN_STANDIN_FAIL_CUBLASLT", "1", SN_ERR_DEVICE,
     {"cublasLtCreate: CUBLAS_STATUS_NOT_INITIALIZED", NULL}},
    {"SN_STANDIN_SM", "70", SN_ERR_UNSUPPORTED, {"is sm_70: sinter needs sm_75", "--device cpu"}},
};

START_TEST(injected_failure_says_what_failed) {
    setenv(failures[_i].env, failures[_i].value, 1);
    use_standin();
    sn_cuda_opts o = {.cache_dir = shared_cache()};
    sn_device *d = NULL;
    sn_err e = {0};
    sn_status st = sn_cuda_device_new_opts(0, &o, &d, &e);
    sn_graph *g = tiny();
    sn_trainer *t = NULL;
    if (!st && !(t = trainer_on(g, d, &e))) st = e.code;
    double loss[3], norm[3];
    if (!st) st = train(t, 3, loss, norm, &e);
    ck_assert_msg(st == failures[_i].status, "%s=%s: status %d, want %d: %s", failures[_i].env,
                  failures[_i].value, st, failures[_i].status, st ? e.msg : "no failure");
    for (int i = 0; i < 3 && failures[_i].says[i]; i++) ck_assert_has(e.msg, failures[_i].says[i]);
    printf("test_standin: %s=%s: %s\n", failures[_i].env, failures[_i].value, e.msg);
    sn_trainer_free(t);
    sn_graph_free(g);
    sn_device_free(d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("standin");
    TCase *tc = tcase_create("standin");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, tiny_gpt2_trains_like_the_cpu_device);
    tcase_add_test(tc, device_pointers_fault_on_the_host);
    tcase_add_test(tc, kernel_cache_cold_warm_corrupt);
    tcase_add_loop_test(tc, injected_failure_says_what_failed, 0,
                        (int)(sizeof failures / sizeof *failures));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
