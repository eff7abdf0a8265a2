/* test_standin_cache.c: runtime/cuda's kernel cache on the stand-in driver (cold, warm, and
 * corrupt part by part; a part NVRTC fails on named) and each failure injected into the
 * stand-in (allocation, memory size, no binary, a launch failing or faulting, cuBLASLt, an old
 * GPU) returned as a status whose message says what failed and what to do. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "standin_check.h"
#include "interp/interp.h"
#include "models/gpt2.h"
#include "program/program.h"
#include "runtime/cuda/cuda_rt.h"
#include "support/cores.h"
#include "support/clock.h"
#include "train/plan.h"

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

/* Opens a device on cache dir (jobs NVRTC children at once, 0: the CPUs), builds a trainer
 * (every kernel compiled), trains two steps. */
static cache_round cache_run(const char *dir, int jobs) {
    cache_round r = {0};
    use_standin();
    sn_cuda_opts o = {.cache_dir = dir, .compile_jobs = jobs};
    sn_device *d = NULL;
    sn_err e;
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = tiny();
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

/* Flips a byte in the middle of the entry whose name sorts first; returns its name. */
static void corrupt_one(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    char first[256] = "";
    for (struct dirent *f; (f = readdir(d));)
        if (f->d_name[0] != '.' && (!first[0] || strcmp(f->d_name, first) < 0))
            snprintf(first, sizeof first, "%s", f->d_name);
    closedir(d);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, first);
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

/* The program compiles as several parts, an entry each: cold (three children at once, fewer than
 * the parts), warm with the default number of children (every part a hit: the split and the keys
 * depend on the program only), one damaged entry (that part alone recompiled), warm again; the
 * losses equal every time. */
START_TEST(kernel_cache_cold_warm_corrupt) {
    if (!have_nvrtc()) return;
    char dir[] = "/tmp/sn_standin_cache_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    cache_round cold = cache_run(dir, 3);
    ck_assert_int_gt(cold.st.parts, cold.st.programs + 3); /* the training program split */
    ck_assert_int_eq(cold.st.nvrtc_runs, cold.st.parts); /* a child per part */
    ck_assert_int_eq(cold.st.cache_hits, 0);
    ck_assert_int_eq(cold.files, cold.st.nvrtc_runs); /* one entry per compiled part */
    for (int q = 0; q < cold.st.last_parts; q++) {
        ck_assert(cold.st.part[q].compiled);
        ck_assert_double_gt(cold.st.part[q].cpu_s, 0);
    }
    cache_round warm = cache_run(dir, 0);
    ck_assert_int_eq(warm.st.nvrtc_runs, 0); /* NVRTC never ran */
    ck_assert_int_eq(warm.st.cache_hits, cold.st.nvrtc_runs);
    ck_assert_int_eq(warm.st.cache_rejected, 0);
    corrupt_one(dir);
    cache_round bad = cache_run(dir, 0);
    ck_assert_int_eq(bad.st.cache_rejected, 1); /* the damaged entry refused ... */
    ck_assert_int_eq(bad.st.nvrtc_runs, 1);     /* ... its part alone compiled again */
    ck_assert_int_eq(bad.st.cache_hits, cold.st.nvrtc_runs - 1);
    cache_round again = cache_run(dir, 0); /* the rewritten entry is good */
    ck_assert_int_eq(again.st.nvrtc_runs, 0);
    ck_assert_int_eq(again.st.cache_rejected, 0);
    ck_assert_int_eq(again.files, cold.files);
    for (int s = 0; s < 2; s++)
        ck_assert_msg(cold.loss[s] == warm.loss[s] && cold.loss[s] == bad.loss[s] &&
                      cold.loss[s] == again.loss[s], "step %d: losses %.9g %.9g %.9g %.9g", s,
                      cold.loss[s], warm.loss[s], bad.loss[s], again.loss[s]);
    printf("test_standin: kernel cache: cold %d programs in %d parts, %d NVRTC runs in %.2f s, "
           "warm %d hits in %.3f s, one corrupt entry rejected and recompiled\n",
           cold.st.programs, cold.st.parts, cold.st.nvrtc_runs, cold.st.compile_s,
           warm.st.cache_hits, warm.st.compile_s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static int count_fds(void) { return count_files("/proc/self/fd"); }

/* NVRTC failing, or crashing, on one part of the program (the one with the cross-entropy
 * backward) while the others compile: the error names that part and its kernels and carries
 * NVRTC's words; every child is reaped (no zombie) and no pipe is left open. */
START_TEST(part_failure_names_the_part) {
    if (!have_nvrtc()) return;
    const char *var = _i ? "SN_STANDIN_CRASH_NVRTC" : "SN_STANDIN_FAIL_NVRTC";
    char dir[] = "/tmp/sn_standin_fail_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    use_standin();
    sn_cuda_opts o = {.cache_dir = dir, .compile_jobs = 2};
    sn_device *d = NULL;
    sn_err e = {0};
    ck_assert_msg(sn_cuda_device_new_opts(0, &o, &d, &e) == SN_OK, "%s", e.msg);
    sn_graph *g = tiny();
    int fds = count_fds();
    setenv(var, "cross_entropy_bwd", 1);
    sn_trainer *t = trainer_on(g, d, &e);
    unsetenv(var);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(e.code, SN_ERR_DEVICE);
    int part = 0, parts = 0, file_part = 0, file_parts = 0;
    ck_assert_msg(sscanf(e.msg, "part %d of %d (functions k", &part, &parts) == 2, "%s", e.msg);
    const char *file = strstr(e.msg, "sinter_program_0_part");
    ck_assert_msg(file && sscanf(file, "sinter_program_0_part%dof%d.cu", &file_part,
                                 &file_parts) == 2, "%s", e.msg);
    ck_assert_int_gt(parts, 3);
    ck_assert_int_eq(file_part, part); /* the part named is the one compiled */
    ck_assert_int_eq(file_parts, parts);
    if (_i) {
        ck_assert_has(e.msg, "NVRTC crashed (signal 11, Segmentation fault) compiling");
    } else {
        ck_assert_has(e.msg, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION");
        ck_assert_has(e.msg, "the source contains \"cross_entropy_bwd\"");
    }
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* no child left, ended or not */
    ck_assert_int_eq(count_fds(), fds);
    printf("test_standin: %s: %s\n", var, e.msg);
    sn_graph_free(g);
    sn_device_free(d);
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
    {"SN_STANDIN_FAULT_LAUNCH", "7", SN_ERR_DEVICE,
     {"CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered): a kernel failed on "
      "the GPU", "CUDA_LAUNCH_BLOCKING=1", NULL}},
    {"SN_STANDIN_FAIL_CUBLASLT", "1", SN_ERR_DEVICE,
     {"cublasLtCreate: CUBLAS_STATUS_NOT_INITIALIZED", NULL}},
    {"SN_STANDIN_SM", "70", SN_ERR_UNSUPPORTED, {"is sm_70: sinter needs sm_75", "--device cpu"}},
};

START_TEST(injected_failure_says_what_failed) {
    if (!have_nvrtc()) return;
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
    Suite *s = suite_create("standin_cache");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, kernel_cache_cold_warm_corrupt);
    tcase_add_loop_test(tc, part_failure_names_the_part, 0, 2);
    tcase_add_loop_test(tc, injected_failure_says_what_failed, 0,
                        (int)(sizeof failures / sizeof *failures));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return sn_test_main(suite()); }
