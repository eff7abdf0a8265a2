/* test_cudadev.c: runtime/cuda on a machine without a GPU: the loader's messages when libcuda is
 * missing or wrong, the checking macro's text, cuBLASLt plans built with the real library up to
 * the handle, NVRTC in a child process (a crashing compiler is an error), the CUBIN disk cache:
 * cold, warm (no compile), corrupt, truncated and foreign entries recompiled, --no-cache; gpt2's
 * program split into parts compiled at once.
 * Training through the device runs on the stand-in driver (its own test). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "data/data.h"
#include "runtime/cuda/cuda_rt.h"
#include "support/clock.h"
#include "models/gpt2.h"
#include "passes/pipeline.h"

#define ck_assert_has(s, sub) ck_assert_msg(strstr((s), (sub)), "'%s' lacks '%s'", (s), (sub))

static bool have(sn_cuda_lib lib) {
    sn_cuda_api a = {0};
    sn_err e;
    bool ok = sn_cuda_api_load(&a, lib, &e) == SN_OK;
    if (!ok) printf("test_cudadev: skipped: %s\n", e.msg);
    sn_cuda_api_unload(&a);
    return ok;
}

/* ---- the loader and the checking macro ---- */

START_TEST(missing_driver_is_a_clear_error) {
    setenv(SN_LIBCUDA_ENV, "/nonexistent/libcuda.so.1", 1);
    sn_device *d = (sn_device *)1;
    sn_err e;
    ck_assert_int_eq(sn_cuda_device_new(0, &d, &e), SN_ERR_DEVICE);
    ck_assert_ptr_null(d);
    ck_assert_has(e.msg, "no CUDA device (");
    ck_assert_has(e.msg, "/nonexistent/libcuda.so.1");
    ck_assert_has(e.msg, "--device cpu");
    ck_assert_has(e.msg, "SN_LIBCUDA=PATH");
    char why[512];
    ck_assert_int_eq(sn_cuda_device_count(why, sizeof why), 0);
    ck_assert_str_eq(why, "/nonexistent/libcuda.so.1 not found");
    printf("test_cudadev: %s\n", e.msg);
}
END_TEST

START_TEST(driver_without_symbols_names_the_symbol) {
    setenv(SN_LIBCUDA_ENV, "libm.so.6", 1);
    sn_device *d;
    sn_err e;
    ck_assert_int_eq(sn_cuda_device_new(0, &d, &e), SN_ERR_DEVICE);
    ck_assert_has(e.msg, "libm.so.6 has no symbol cuGetErrorName");
}
END_TEST

START_TEST(check_macro_names_file_line_and_the_library_error) {
    if (!have(SN_LIB_CUBLASLT)) return;
    sn_cuda_api a = {0};
    sn_err e;
    ck_assert_int_eq(sn_cuda_api_load(&a, SN_LIB_CUBLASLT, &e), SN_OK);
    cublasLtHandle_t h = NULL;
    sn_status st = SN_CUDA_CHECK(&a, &e, cublasLtCreate, &h); /* no GPU: not initialized */
    ck_assert_int_eq(st, SN_ERR_DEVICE);
    ck_assert_has(e.msg, "test_cudadev.c:");
    ck_assert_has(e.msg, ": cublasLtCreate: CUBLAS_STATUS_NOT_INITIALIZED (");
    printf("test_cudadev: %s\n", e.msg);
    sn_cuda_api_unload(&a);
}
END_TEST

/* ---- cuBLASLt plans ---- */

START_TEST(gemm_plans_build_up_to_the_handle) {
    if (!have(SN_LIB_CUBLASLT)) return;
    sn_cuda_api a = {0};
    sn_err e;
    /* (B*T, C) @ (C, 3C) folded; a batched attention-like product with B transposed; a bias;
     * c_fc's bias and GELU with the aux; its dX (B transposed) times gelu'(aux) */
    sn_gemm_shape shapes[] = {
        {.M = 1024, .N = 2304, .K = 768, .batch = 1, .lda = 768, .ldb = 2304, .ldd = 2304},
        {.tb = true, .M = 64, .N = 64, .K = 32, .batch = 12, .lda = 32, .ldb = 32, .ldd = 64,
         .stride_a = 64 * 32, .stride_b = 64 * 32, .stride_d = 64 * 64},
        {.ta = true, .M = 768, .N = 3072, .K = 1024, .batch = 1, .lda = 768, .ldb = 3072,
         .ldd = 3072, .epi = SN_EPI_BIAS},
        {.M = 1024, .N = 3072, .K = 768, .batch = 1, .lda = 768, .ldb = 3072, .ldd = 3072,
         .epi = SN_EPI_GELU_AUX_BIAS},
        {.tb = true, .M = 1024, .N = 3072, .K = 768, .batch = 1, .lda = 768, .ldb = 768,
         .ldd = 3072, .epi = SN_EPI_DGELU},
    };
    /* fp32 and TF32; bf16 and f16 operands (autocast) into f32 */
    const sn_dtype types[] = {SN_F32, SN_F32, SN_BF16, SN_F16};
    for (int ti = 0; ti < 4; ti++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            sn_gemm_plan *p = NULL;
            sn_gemm_shape s = shapes[i];
            s.ab = types[ti];
            bool tf32 = ti == 1;
            ck_assert_msg(sn_gemm_plan_new(&a, NULL, &s, tf32, 32 << 20, &p, &e) == SN_OK,
                          "%s", e.msg);
            ck_assert_ptr_nonnull(p);
            ck_assert_int_eq(sn_gemm_plan_run(&a, NULL, p, 0, 0, 0, 0, 0, 0, 0, 0, NULL, &e), SN_ERR_INVALID);
            sn_gemm_plan_free(&a, p);
        }
    sn_cuda_api_unload(&a);
}
END_TEST

/* ---- NVRTC and the cache ---- */

static const char *kernel_src =
    "#include \"sinter_prelude.h\"\n"
    "extern \"C\" __global__ void k_scale(float *out, const float *in, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = 2.0f * in[i];\n"
    "}\n";

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *f; d && (f = readdir(d));) n += f->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void temp_dir(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/sn_cudadev_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void rm_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void compile(sn_cuda_cache *c, sn_cuda_api *a, const char *src, bool want_compiled) {
    sn_cuda_module m;
    sn_err e;
    bool compiled;
    ck_assert_msg(sn_cuda_cache_compile(c, a, src, "k.cu", 80, &m, &compiled, &e) == SN_OK, "%s",
                  e.msg);
    ck_assert_int_eq(compiled, want_compiled);
    ck_assert_int_gt((long)m.cubin_size, 16);
    ck_assert_int_eq(m.n_info, 1);
    ck_assert_str_eq(m.info[0].name, "k_scale");
    ck_assert_int_gt(m.info[0].registers, 0);
    sn_cuda_module_free(&m);
}

static void damage(const char *path, long at, bool truncate) {
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    if (truncate) {
        ck_assert_int_eq(ftruncate(fileno(f), at), 0);
    } else {
        fseek(f, at, at < 0 ? SEEK_END : SEEK_SET);
        int c = fgetc(f);
        fseek(f, -1, SEEK_CUR);
        fputc(c ^ 0x5a, f);
    }
    fclose(f);
}

START_TEST(cache_cold_warm_corrupt_foreign) {
    if (!have(SN_LIB_NVRTC)) return;
    char dir[64], path[700], other[700];
    temp_dir(dir, sizeof dir);
    sn_cuda_api a = {0};
    sn_cuda_cache c;
    sn_cuda_cache_init(&c, dir, false);
    ck_assert(sn_cuda_cache_path(&c, &a, kernel_src, 80, path, sizeof path));
    double t0 = sn_clock_s();
    compile(&c, &a, kernel_src, true); /* cold */
    double cold = sn_clock_s() - t0;
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    t0 = sn_clock_s();
    compile(&c, &a, kernel_src, false); /* warm: no NVRTC */
    double warm = sn_clock_s() - t0;
    ck_assert_int_eq(c.hits, 1);
    printf("test_cudadev: one kernel for sm_80: cold %.3f s, warm %.4f s\n", cold, warm);
    damage(path, -1, false); /* a flipped CUBIN byte: checksum */
    compile(&c, &a, kernel_src, true);
    ck_assert_int_eq(c.rejected, 1);
    compile(&c, &a, kernel_src, false); /* replaced by a good entry */
    damage(path, 40, true); /* truncated */
    compile(&c, &a, kernel_src, true);
    damage(path, 0, false); /* magic */
    compile(&c, &a, kernel_src, true);
    ck_assert_int_eq(c.rejected, 3);
    /* another source's entry under this name: the key inside does not match */
    char *src2 = malloc(strlen(kernel_src) + 32);
    sprintf(src2, "%s// another\n", kernel_src);
    ck_assert(sn_cuda_cache_path(&c, &a, src2, 80, other, sizeof other));
    ck_assert_str_ne(path, other);
    compile(&c, &a, src2, true);
    ck_assert_int_eq(rename(other, path), 0);
    compile(&c, &a, kernel_src, true);
    ck_assert_int_eq(c.rejected, 4);
    /* src2's entry with this key written into its header (its CRC kept): the CRC covers the key,
     * so the swap is refused (it was loaded, and the launch failed with CUDA_ERROR_NOT_FOUND) */
    compile(&c, &a, kernel_src, false); /* path good again */
    ck_assert(sn_cuda_cache_path(&c, &a, src2, 80, other, sizeof other));
    compile(&c, &a, src2, true);
    char *good = NULL, *swapped = NULL;
    size_t good_len, swapped_len;
    sn_err fe;
    ck_assert(sn_file_read(path, "", &good, &good_len, &fe) == SN_OK);
    ck_assert(sn_file_read(other, "", &swapped, &swapped_len, &fe) == SN_OK);
    memcpy(swapped + 16, good + 16, 16); /* entry_head: magic 8, version 4, arch 4, key 16 */
    FILE *w = fopen(path, "wb");
    ck_assert(w && fwrite(swapped, 1, swapped_len, w) == swapped_len && fclose(w) == 0);
    compile(&c, &a, kernel_src, true);
    ck_assert_int_eq(c.rejected, 5);
    free(good);
    free(swapped);
    /* a FIFO under the entry's name: not opened for a blocking read (it hung), recompiled and
     * replaced by a regular file */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    compile(&c, &a, kernel_src, true);
    ck_assert_int_eq(c.rejected, 6);
    ck_assert(stat(path, &st) == 0 && S_ISREG(st.st_mode));
    compile(&c, &a, kernel_src, false);
    /* another arch is another entry */
    ck_assert(sn_cuda_cache_path(&c, &a, kernel_src, 90, other, sizeof other));
    ck_assert_str_ne(path, other);
    /* --no-cache: compiles every time, reads and writes nothing */
    sn_cuda_cache off;
    sn_cuda_cache_init(&off, dir, true);
    compile(&off, &a, kernel_src, true);
    compile(&off, &a, kernel_src, true);
    ck_assert_int_eq(off.hits, 0);
    free(src2);
    sn_cuda_api_unload(&a);
    rm_dir(dir);
}
END_TEST

/* Runs compile() with stderr in a file; returns what it said (malloc'ed). */
static char *stderr_of_compiles(sn_cuda_cache *c, sn_cuda_api *a, const char *const *srcs, int n) {
    char path[] = "/tmp/sn_cudadev_err_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    ck_assert(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    for (int i = 0; i < n; i++) compile(c, a, srcs[i], true);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *text = NULL;
    size_t len;
    sn_err e;
    ck_assert(sn_file_read(path, "", &text, &len, &e) == SN_OK);
    unlink(path);
    return text;
}

/* A cache folder of another user is not used; a cache that cannot be written warns once, naming
 * --no-cache, however many kernels are compiled. */
START_TEST(cache_foreign_and_unwritable) {
    if (!have(SN_LIB_NVRTC)) return;
    char dir[64], sub[128], blocked[128];
    temp_dir(dir, sizeof dir);
    sn_cuda_api a = {0};
    char *src2 = malloc(strlen(kernel_src) + 32);
    sprintf(src2, "%s// another\n", kernel_src);
    const char *srcs[] = {kernel_src, src2};
    /* root can make a folder another user's; anyone else finds one in / */
    snprintf(sub, sizeof sub, "%s/theirs", dir);
    ck_assert_int_eq(mkdir(sub, 0777), 0);
    const char *foreign = geteuid() == 0 && chown(sub, 65534, 65534) == 0 ? sub : "/";
    sn_cuda_cache c;
    sn_cuda_cache_init(&c, foreign, false);
    ck_assert(c.foreign);
    char *said = stderr_of_compiles(&c, &a, srcs, 2);
    ck_assert_int_eq(c.hits, 0);
    ck_assert_int_eq(count_entries(sub), 0);
    free(said);
    /* a cache folder under a regular file cannot be created */
    snprintf(blocked, sizeof blocked, "%s/file", dir);
    FILE *f = fopen(blocked, "w");
    ck_assert(f && fclose(f) == 0);
    snprintf(blocked, sizeof blocked, "%s/file/cache", dir);
    sn_cuda_cache_init(&c, blocked, false);
    said = stderr_of_compiles(&c, &a, srcs, 2);
    ck_assert_has(said, "warning: kernel cache: cannot create");
    ck_assert_has(said, "--no-cache");
    char *again = strstr(said, "warning: kernel cache");
    ck_assert_msg(!strstr(again + 1, "warning: kernel cache"), "warned more than once:\n%s", said);
    free(said);
    free(src2);
    sn_cuda_api_unload(&a);
    rm_dir(dir);
}
END_TEST

START_TEST(compile_error_carries_the_log) {
    if (!have(SN_LIB_NVRTC)) return;
    sn_cuda_api a = {0};
    sn_cuda_module m;
    sn_err e;
    const char *bad = "extern \"C\" __global__ void k_bad(float *o) { o[0] = undefined_name; }\n";
    ck_assert_int_eq(sn_cuda_nvrtc_compile(&a, bad, "bad.cu", 80, &m, &e), SN_ERR_DEVICE);
    ck_assert_has(e.msg, "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION");
    ck_assert_has(e.msg, "compiling bad.cu for sm_80");
    ck_assert_has(e.msg, "undefined_name");
    sn_cuda_module_free(&m);
    sn_cuda_api_unload(&a);
}
END_TEST

START_TEST(compiler_crash_is_an_error_not_a_crash) {
    setenv(SN_LIBNVRTC_ENV, SN_TEST_CRASH_NVRTC, 1);
    sn_cuda_api a = {0};
    sn_cuda_module m;
    sn_err e;
    ck_assert_int_eq(sn_cuda_nvrtc_compile(&a, kernel_src, "k.cu", 90, &m, &e), SN_ERR_DEVICE);
    ck_assert_has(e.msg, "NVRTC crashed (signal 11, Segmentation fault) compiling k.cu for sm_90");
    ck_assert_has(e.msg, "the training process is unharmed");
    printf("test_cudadev: %s\n", e.msg);
    sn_cuda_module_free(&m);
    sn_cuda_api_unload(&a);
}
END_TEST


/* The CUDA program of gpt2 124M (B=4, T=256) as the device compiles it: every generated kernel,
 * split into parts (compile_parts.c), through the cache: cold (a child per part, three at once),
 * warm (a hit per part: the split and its keys do not depend on timing or on the number of
 * children). Each function lies in one part with all its kernels, the parts are balanced as the
 * largest-first split promises (no part above the mean by more than the largest function), and
 * every function's CUBIN has it under the name the kernel is launched by; then --no-cache
 * compiles every part again and writes nothing. */
START_TEST(gpt2_124m_compile_cold_and_warm) {
    if (!have(SN_LIB_NVRTC)) return;
    sn_gpt2_config cfg;
    ck_assert(sn_gpt2_config_find("gpt2", &cfg));
    sn_graph *g = sn_graph_new();
    sn_gpt2 m;
    sn_err e;
    ck_assert_msg(sn_gpt2_build(g, &cfg, 4, 256, &m, &e) == SN_OK, "%s", e.msg);
    sn_pipeline_opts o = sn_pipeline_defaults();
    o.backward = true;
    sn_program *p;
    ck_assert_msg(sn_compile(g, &o, &p, NULL, &e) == SN_OK, "%s", e.msg);
    const sn_kernel **ks = malloc(sizeof *ks * (size_t)p->n_kernels);
    int n = 0, gemms = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        if (p->kernels[i]->kind != SN_KER_GEMM) ks[n++] = p->kernels[i];
        gemms += p->kernels[i]->kind == SN_KER_GEMM;
    }
    sn_target tg = sn_target_cuda(90);
    sn_cuda_source all;
    ck_assert_msg(sn_cuda_render(ks, n, &tg, &all, &e) == SN_OK, "%s", e.msg);
    char dir[64];
    temp_dir(dir, sizeof dir);
    sn_cuda_api a = {0};
    sn_cuda_cache c;
    sn_cuda_cache_init(&c, dir, false);
    double t[2], cpu = 0;
    sn_cuda_parts parts[2];
    for (int pass = 0; pass < 2; pass++) {
        sn_cuda_parts *ps = &parts[pass];
        double t0 = sn_clock_s();
        ck_assert_msg(sn_cuda_parts_compile(&c, &a, ks, n, &tg, 90, pass ? 0 : 3, "gpt2", ps, &e) ==
                      SN_OK, "%s", e.msg);
        t[pass] = sn_clock_s() - t0;
        ck_assert_int_eq(ps->n_parts, SN_CUDA_MAX_PARTS); /* ~70 KB of CUDA C */
        ck_assert_int_eq(c.misses, ps->n_parts);
        ck_assert_int_eq(c.hits, pass ? ps->n_parts : 0);
        size_t total = 0, largest = 0, most = 0;
        int functions = 0;
        for (int q = 0; q < ps->n_parts; q++) {
            const sn_cuda_part_stats *st = &ps->part_st[q];
            ck_assert_int_eq(st->compiled, pass == 0);
            ck_assert_int_gt(st->functions, 0);
            ck_assert_int_eq(ps->mod[q].n_info, st->functions); /* ptxas saw each function */
            total += st->cost;
            most = st->cost > most ? st->cost : most;
            functions += st->functions;
            cpu += st->cpu_s;
        }
        ck_assert_int_eq(functions, all.n_functions);
        for (int i = 0; i < n; i++) {
            ck_assert_str_eq(ps->fn[i], all.fn[i]);
            ck_assert_int_eq(ps->part[i], ps->part[all.leader[i]]);
            ck_assert_int_eq(ps->part[i], parts[0].part[i]); /* the same split both times */
            if (all.leader[i] == i) {
                size_t cost = sn_cuda_function_cost(ks[i], all.fn_bytes[i]);
                largest = cost > largest ? cost : largest;
                ck_assert_msg(sn_cuda_module_info(&ps->mod[ps->part[i]], all.fn[i]),
                              "part %d has no %s", ps->part[i] + 1, all.fn[i]);
            }
        }
        ck_assert_msg(most <= total / (size_t)ps->n_parts + largest, "a part of cost %zu; the "
                      "mean %zu, the largest function %zu", most, total / (size_t)ps->n_parts,
                      largest);
    }
    /* --no-cache: every part compiled again (four children at once), nothing read or written */
    sn_cuda_cache off;
    sn_cuda_cache_init(&off, dir, true);
    sn_cuda_parts again;
    ck_assert_msg(sn_cuda_parts_compile(&off, &a, ks, n, &tg, 90, 4, "gpt2", &again, &e) == SN_OK,
                  "%s", e.msg);
    ck_assert_int_eq(off.hits, 0);
    ck_assert_int_eq(off.misses, again.n_parts);
    for (int q = 0; q < again.n_parts; q++) {
        ck_assert(again.part_st[q].compiled);
        ck_assert_int_eq(again.mod[q].n_info, again.part_st[q].functions);
    }
    ck_assert_int_eq(count_entries(dir), parts[0].n_parts); /* the cold run's entries only */
    sn_cuda_parts_free(&again);
    printf("test_cudadev: gpt2 124M (B=4, T=256): %d kernels as %d functions in %d parts, %d "
           "GEMMs; sm_90 CUBINs cold %.2f s (children %.2f s of CPU), warm %.4f s (cache)\n", n,
           all.n_functions, parts[0].n_parts, gemms, t[0], cpu, t[1]);
    ck_assert_msg(t[1] <= 0.1, "a warm compile took %.3f s", t[1]);
    for (int pass = 0; pass < 2; pass++) sn_cuda_parts_free(&parts[pass]);
    rm_dir(dir);
    sn_cuda_source_free(&all);
    free(ks);
    sn_program_free(p);
    sn_graph_free(g);
}
END_TEST

/* ---- CUDA Graphs of the step (graph.c), with a fake driver's graph calls ---- */

static int n_issued, n_begin, n_end, n_instantiate, n_launch, n_exec_destroy;
static CUresult fake_begin(CUstream s, CUstreamCaptureMode m) { n_begin++; return CUDA_SUCCESS; }
static CUresult fake_end(CUstream s, CUgraph *g) {
    n_end++;
    *g = (CUgraph)0x1;
    return CUDA_SUCCESS;
}
static CUresult fake_instantiate(CUgraphExec *x, CUgraph g, unsigned long long f) {
    n_instantiate++;
    *x = (CUgraphExec)0x2;
    return CUDA_SUCCESS;
}
static CUresult fake_launch(CUgraphExec x, CUstream s) { n_launch++; return CUDA_SUCCESS; }
static CUresult fake_graph_destroy(CUgraph g) { return CUDA_SUCCESS; }
static CUresult fake_exec_destroy(CUgraphExec x) { n_exec_destroy++; return CUDA_SUCCESS; }
static sn_status fake_issue(void *ctx, const sn_cuda_op *op, sn_err *e) {
    n_issued++;
    return SN_OK;
}

static void step(sn_cuda_graphs *g, const int *what, int n, CUdeviceptr buf) {
    sn_err e;
    for (int i = 0; i < n; i++) {
        sn_cuda_op op = {.what = &what[i], .n_bufs = 2, .bufs = {buf, buf + 64}};
        ck_assert_int_eq(sn_cuda_graphs_add(g, &op, &e), SN_OK);
    }
    ck_assert_msg(sn_cuda_graphs_flush(g, &e) == SN_OK, "%s", e.msg);
}

START_TEST(graphs_capture_a_stable_step_once) {
    sn_cuda_api a = {.cuStreamBeginCapture = fake_begin, .cuStreamEndCapture = fake_end,
                     .cuGraphInstantiate = fake_instantiate, .cuGraphLaunch = fake_launch,
                     .cuGraphDestroy = fake_graph_destroy, .cuGraphExecDestroy = fake_exec_destroy};
    sn_err e;
    sn_cuda_graphs *g = sn_cuda_graphs_new(&a, NULL, true, fake_issue, NULL, &e);
    ck_assert_ptr_nonnull(g);
    int kernels[3];
    step(g, kernels, 3, 0x1000); /* first sight: eager */
    ck_assert_int_eq(n_issued, 3);
    ck_assert_int_eq(n_begin, 0);
    step(g, kernels, 3, 0x1000); /* seen before: captured and launched */
    ck_assert_int_eq(n_issued, 6);
    ck_assert_int_eq(n_begin, 1);
    ck_assert_int_eq(n_end, 1);
    ck_assert_int_eq(n_instantiate, 1);
    ck_assert_int_eq(n_launch, 1);
    for (int i = 0; i < 5; i++) step(g, kernels, 3, 0x1000); /* replayed: nothing issued */
    ck_assert_int_eq(n_issued, 6);
    ck_assert_int_eq(n_launch, 6);
    step(g, kernels, 3, 0x2000); /* other buffers: another sequence, eager */
    ck_assert_int_eq(n_issued, 9);
    step(g, kernels, 2, 0x1000); /* a shorter step: eager */
    ck_assert_int_eq(n_issued, 11);
    step(g, kernels, 3, 0x1000); /* the first one is still captured */
    ck_assert_int_eq(n_launch, 7);
    ck_assert_int_eq(n_instantiate, 1);
    int captured, launches, eager;
    sn_cuda_graphs_counts(g, &captured, &launches, &eager);
    ck_assert_int_eq(captured, 1);
    ck_assert_int_eq(launches, 7);
    ck_assert_int_eq(eager, 3);
    sn_cuda_graphs_free(g);
    ck_assert_int_eq(n_exec_destroy, 1);
    /* disabled: every op issued at once, nothing captured */
    g = sn_cuda_graphs_new(&a, NULL, false, fake_issue, NULL, &e);
    step(g, kernels, 3, 0x1000);
    step(g, kernels, 3, 0x1000);
    ck_assert_int_eq(n_issued, 17);
    ck_assert_int_eq(n_begin, 1);
    sn_cuda_graphs_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cudadev");
    TCase *t = tcase_create("cudadev");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, missing_driver_is_a_clear_error);
    tcase_add_test(t, driver_without_symbols_names_the_symbol);
    tcase_add_test(t, check_macro_names_file_line_and_the_library_error);
    tcase_add_test(t, gemm_plans_build_up_to_the_handle);
    tcase_add_test(t, cache_cold_warm_corrupt_foreign);
    tcase_add_test(t, cache_foreign_and_unwritable);
    tcase_add_test(t, compile_error_carries_the_log);
    tcase_add_test(t, compiler_crash_is_an_error_not_a_crash);
    tcase_add_test(t, graphs_capture_a_stable_step_once);
    tcase_add_test(t, gpt2_124m_compile_cold_and_warm);
    suite_add_tcase(s, t);
    return sn_test_main(s);
}
