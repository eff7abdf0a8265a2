/* test_cuda_weights.c: the CUDA kernels around the weights on a machine without a GPU: the
 * embedding's gradient (a BUCKET kernel sorting positions by id, then ROWS summing each id's
 * rows in position order), the optimizer step (GRAD_ACC, SQNORM, CLIP, ADAMW and the weights'
 * 16-bit copies it writes) and NF4 unpacking (cuda_dequant.c), each run on the SIMT simulator
 * in both thread orders against the interpreter or a reference, bit for bit where the order is
 * the same, with bugs planted in the text caught; NVRTC without spills. (The embedding's
 * forward kernel: test_cuda_gather.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "cuda_check.h"
#include "ir/nf4.h"
#include "runtime/gemm_lowp.h"
#include "support/rng.h"
#include "train/train.h"

/* embedding_bwd (ids (N), dy (N, C) -> (V, C)) with ids that repeat and ids never used: dtype
 * dt; with `chunks`, N = 5000 over three chunks of 2048 (the last short) whose first chunk is
 * one id alone (a run of 2048), else N = 300 ids, uniform below 40 of V = 50 rows and a
 * few of the last row. Sets *it to the interpreter's values. */
static sn_graph *embedding_bwd_graph(bool chunks, sn_dtype dt, int64_t C, sn_interp **it) {
    int64_t N = chunks ? 5000 : 300, V = chunks ? 300 : 50;
    sn_graph *g = sn_graph_new();
    sn_node *ids = sn_input(g, "ids", SN_I32, SN_SHAPE(N));
    sn_node *dy = sn_input(g, "dy", dt, SN_SHAPE(N, C));
    sn_graph_add_output(g, sn_embedding_bwd(g, ids, dy, V));
    int32_t *id = malloc(sizeof(int32_t) * (size_t)N);
    float *v = malloc(sizeof(float) * (size_t)(N * C));
    sn_rng r = sn_rng_seed(99);
    for (int64_t p = 0; p < N; p++) {
        uint64_t u = sn_rng_below(&r, 10);
        if (chunks) id[p] = p < 2100 ? 7 : u < 3 ? 3 : u < 4 ? 299 : (int32_t)sn_rng_below(&r, 100);
        else id[p] = u < 1 ? (int32_t)V - 1 : (int32_t)sn_rng_below(&r, 40);
    }
    for (int64_t i = 0; i < N * C; i++) v[i] = (float)sn_rng_normal(&r);
    sn_err e;
    *it = sn_interp_new(g, false);
    sn_interp_keep_all(*it, true);
    ck_assert_msg(sn_interp_set_i32(*it, ids, id, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_set(*it, dy, v, &e) == SN_OK, "%s", e.msg);
    ck_assert_msg(sn_interp_run(*it, &e) == SN_OK, "%s", e.msg);
    free(id);
    free(v);
    return g;
}

/* Runs embedding_bwd's two kernels (BUCKET, then ROWS) of g's program on the simulator, source
 * src (the rendering of them, perhaps with a planted bug); returns the worst error of ROWS
 * (host_check's caught mode: INFINITY for a NaN, an unwritten row or a scratch that differs
 * between thread orders). */
static double embedding_bwd_on_host(const char *src, const sn_kernel *const *ks,
                                    const sn_cuda_source *cs, const sn_interp *it) {
    sn_sim_module *h = host_compile(src);
    if (!h) return -1;
    /* in a child: a planted bug may index out of bounds, and a crash is caught too */
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        double bucket = host_check(h, ks[0], cs->fn[0], it, 1e-6, true);
        double rows = host_check(h, ks[1], cs->fn[1], it, 1e-6, true);
        double worst = bucket > rows ? bucket : rows;
        ssize_t w = write(fd[1], &worst, sizeof worst);
        fflush(stdout);
        _exit(w == sizeof worst ? 0 : 1);
    }
    close(fd[1]);
    double worst = INFINITY;
    int status;
    ssize_t got = read(fd[0], &worst, sizeof worst);
    close(fd[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) || got != sizeof worst) {
        printf("test_cuda_weights: embedding_bwd: the simulator's child %s\n",
               WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "failed");
        worst = INFINITY;
    }
    sn_sim_module_free(h);
    return worst;
}

/* The bucketed embedding gradient against the interpreter, many ids repeated and most rows
 * never used (their rows written as zeros over a NaN poison), over several chunks and in one,
 * in f32 and bf16, a column a thread (C not a multiple of 4) and four (teams of 32 threads a
 * row and of 64, the last block's rows past the table); the f32 rows have the bits of an f32
 * sum in position order (the order the interpreter adds in). Then bugs planted in the rendered
 * text are caught: a count one short, a run's first position one off, the chunk offset of the
 * order forgotten, the sort's direction taken from the wrong bit, the table not zeroed, the
 * sort's barrier deleted, the shuffled steps' direction turned, a lane's two keys never
 * exchanged, a team on its neighbour's row, a row's runs read into another's, a team's size
 * wrong, the last columns never stored, a thread's columns read from the next thread's. */
START_TEST(cpu_embedding_bwd_buckets) {
    static const struct {
        bool chunks;
        sn_dtype dt;
        int64_t C;
    } cases[] = {{true, SN_F32, 37}, {false, SN_F32, 300}, {false, SN_BF16, 20}, {true, SN_F32, 1100},
                 {false, SN_BF16, 36}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sn_interp *it;
        sn_graph *g = embedding_bwd_graph(cases[c].chunks, cases[c].dt, cases[c].C, &it);
        sn_program *p = fuse(g);
        const sn_kernel *ks[4];
        ck_assert_int_eq(kernels_of(p, SN_KER_GATHER, ks), 2);
        ck_assert(ks[0]->stage == SN_GATHER_BUCKET && ks[1]->stage == SN_GATHER_ROWS);
        ck_assert_int_eq(sn_gather_chunks(ks[0]), cases[c].chunks ? 3 : 1);
        sn_cuda_source cs = render(ks, 2);
        if (c == 0) printf("test_cuda_weights: the embedding gradient's kernels:\n%s", cs.src);
        double tol = cases[c].dt == SN_BF16 ? 8e-3 : 1e-5;
        double err = embedding_bwd_on_host(cs.src, ks, &cs, it);
        if (err < 0) goto done; /* no g++ */
        printf("test_cuda_weights: embedding_bwd N=%lld V=%lld C=%lld %s: error %.3g\n",
               (long long)sn_numel(ks[0]->anchor->in[0]), (long long)ks[0]->anchor->shape[0],
               (long long)cases[c].C, sn_dtype_name(cases[c].dt), err);
        ck_assert_msg(err <= tol, "embedding_bwd: error %g", err);
        if (cases[c].dt == SN_F32) { /* the bits of an f32 sum in position order */
            const sn_node *n = ks[0]->anchor;
            int64_t N = sn_numel(n->in[0]), V = n->shape[0], C = cases[c].C;
            const double *id = sn_interp_value(it, n->in[0]), *dy = sn_interp_value(it, n->in[1]);
            float *want = calloc((size_t)(V * C), sizeof(float)), *got = malloc(sizeof(float) * (size_t)(V * C));
            int32_t *ib = malloc(sizeof(int32_t) * (size_t)N);
            float *db = malloc(sizeof(float) * (size_t)(N * C));
            for (int64_t q = 0; q < N; q++) {
                ib[q] = (int32_t)id[q];
                for (int64_t j = 0; j < C; j++) {
                    db[q * C + j] = (float)dy[q * C + j];
                    want[ib[q] * C + j] += db[q * C + j];
                }
            }
            sn_sim_module *h = host_compile(cs.src);
            void *bufs[3] = {got, ib, db}, *scratch = sn_test_scratch(ks[0]);
            sn_target t = sm(80);
            for (int k = 0; k < 2; k++) {
                void *params[4] = {&bufs[0], &bufs[1], k ? (void *)&bufs[2] : (void *)&scratch, &scratch};
                sn_cuda_dims d = sn_cuda_launch_dims(ks[k], &t);
                sn_sim_opts so = sn_sim_defaults();
                sn_err e;
                ck_assert_msg(sn_sim_launch(h, cs.fn[k], d.grid, d.block, d.shared_bytes, params, &so,
                                            &e) == SN_OK, "%s", e.msg);
            }
            ck_assert_msg(!memcmp(got, want, sizeof(float) * (size_t)(V * C)),
                          "embedding_bwd: not the bits of an f32 sum in position order");
            sn_sim_module_free(h);
            free(want), free(got), free(ib), free(db);
        }
        if (c == 0 || c == 3) { /* planted bugs (case 3: four columns a thread, teams of 64) */
            static const struct {
                size_t c;
                const char *what, *find, *put;
            } bugs[] = {
                {0, "a count one short", "(unsigned)(lo - i)", "(unsigned)(lo - i - 1)"},
                {0, "a run's first position one off", "first + c]", "first + c + 1]"},
                {0, "the order's chunk offset forgotten", "order[g * 2048 + first", "order[0 * 2048 + first"},
                {0, "the sort's direction from the stride", "((i & size) == 0)", "((i & stride) == 0)"},
                {0, "the table not zeroed", "table[v] = 0u;", "{}"},
                {0, "the sort's barrier deleted", "}\n                __syncthreads();\n            }", "}\n            }"},
                {0, "the shuffled steps' direction turned", "ka = lower == ((pa & size) == 0)",
                 "ka = lower != ((pa & size) == 0)"},
                {0, "the lane's two keys never exchanged", "if ((ka > kb) == ((pa & size) == 0))",
                 "if (false)"},
                {0, "a team on its neighbour's row", "v = blockIdx.x * 8 + r;", "v = blockIdx.x * 8 + (r + 1) % 8;"},
                {0, "a row's runs read into another's", "runs[rr][g] = vv", "runs[(rr + 1) % 8][g] = vv"},
                {3, "a team of 64 taken as 32", "r = threadIdx.x / 64", "r = threadIdx.x / 32 % 4"},
                {3, "the last four columns never stored", "sn_store4(&out0[(int)v * 1100 + j]",
                 "if (j < 1096) sn_store4(&out0[(int)v * 1100 + j]"},
                {3, "a thread's four columns from the next thread's", "src + j]", "src + (j + 4) % 1100]"},
            };
            for (size_t b = 0; b < sizeof bugs / sizeof bugs[0]; b++) {
                if (bugs[b].c != c) continue;
                char *src = sn_test_replace_first(cs.src, bugs[b].find, bugs[b].put);
                double e2 = embedding_bwd_on_host(src, ks, &cs, it);
                printf("test_cuda_weights: embedding_bwd with %s: error %.3g (caught)\n", bugs[b].what, e2);
                ck_assert_msg(!(e2 <= tol), "the planted bug (%s) went unnoticed: error %g", bugs[b].what, e2);
                free(src);
            }
        }
    done:
        sn_cuda_source_free(&cs);
        sn_program_free(p);
        sn_graph_free(g);
        sn_interp_free(it);
    }
}
END_TEST

/* The optimizer step (kernel.h: GRAD_ACC, SQNORM, CLIP, ADAMW over one flat range) on 10001
 * elements (float4 steps and a tail, three norm blocks, weight decay ending inside a float4),
 * in that order, each launch in two thread orders, against sn_interp_optim on copies. */
START_TEST(cpu_optimizer_step) {
    enum { N = 10001, DECAY = 6001, NB = (N + SN_SQNORM_BLOCK - 1) / SN_SQNORM_BLOCK };
    static const sn_kernel_kind kinds[4] = {SN_KER_GRAD_ACC, SN_KER_SQNORM, SN_KER_CLIP, SN_KER_ADAMW};
    static const char *const names[4] = {"opt_grad_acc", "opt_sqnorm", "opt_clip", "opt_adamw"};
    sn_kernel k[4];
    const sn_kernel *kp[4];
    for (int i = 0; i < 4; i++) {
        k[i] = sn_optim_kernel(kinds[i], N, DECAY, SN_F32, names[i]);
        kp[i] = &k[i];
    }
    sn_cuda_source cs = render(kp, 4);
    ck_assert_int_eq(cs.n_functions, 4);
    sn_sim_module *h = host_compile(cs.src);
    if (!h) {
        sn_cuda_source_free(&cs);
        return;
    }
    /* buffers: 0 p, 1 m, 2 v, 3 g, 4 sum, 5 partial, 6 scal; [0] the simulator's, [1] the reference's */
    static const size_t len[7] = {N, N, N, N, N, NB, SN_OPT_SCALARS};
    float *buf[2][7];
    sn_rng r = sn_rng_seed(9);
    for (int j = 0; j < 7; j++)
        for (int c = 0; c < 2; c++) buf[c][j] = aligned_alloc(64, 64 * ((len[j] * sizeof(float) + 63) / 64));
    for (size_t i = 0; i < N; i++) {
        buf[0][0][i] = (float)sn_rng_normal(&r);
        buf[0][1][i] = 0.1f * (float)sn_rng_normal(&r);
        buf[0][2][i] = 0.01f * (float)fabs(sn_rng_normal(&r));
        buf[0][3][i] = (float)sn_rng_normal(&r);
        buf[0][4][i] = (float)sn_rng_normal(&r);
    }
    float scal[SN_OPT_SCALARS] = {[SN_OPT_LR] = 3e-3f, [SN_OPT_BETA1] = 0.9f, [SN_OPT_BETA2] = 0.95f,
                                  [SN_OPT_EPS] = 1e-8f, [SN_OPT_WD] = 0.1f, [SN_OPT_BC1] = 0.19f,
                                  [SN_OPT_BC2] = 0.0975f, [SN_OPT_INV_MICRO] = 0.5f,
                                  [SN_OPT_CLIP] = 1.0f};
    memcpy(buf[0][6], scal, sizeof scal);
    for (int j = 0; j < 7; j++) memcpy(buf[1][j], buf[0][j], len[j] * sizeof(float));
    static const int args[4][5] = {{4, 3}, {5, 4, 6}, {6, 5}, {0, 1, 2, 4, 6}}; /* g is the sum */
    sn_target t = sm(80);
    for (int i = 0; i < 4; i++) {
        int nb = sn_kernel_n_bufs(&k[i]), outs[3] = {0}, n_outs = i == 3 ? 3 : 1;
        void *refs[5], *params[5];
        for (int j = 0; j < nb; j++) {
            refs[j] = buf[1][args[i][j]];
            params[j] = &buf[0][args[i][j]];
        }
        for (int o = 0; o < n_outs; o++) outs[o] = args[i][o];
        sn_interp_optim(&k[i], refs, 0, i == 2 ? 1 : i == 1 ? NB : N);
        float *before[3];
        for (int o = 0; o < n_outs; o++) {
            before[o] = malloc(len[outs[o]] * sizeof(float));
            memcpy(before[o], buf[0][outs[o]], len[outs[o]] * sizeof(float));
        }
        sn_cuda_dims d = sn_cuda_launch_dims(&k[i], &t);
        for (int reversed = 0; reversed < 2; reversed++) {
            for (int o = 0; o < n_outs; o++)
                memcpy(buf[0][outs[o]], before[o], len[outs[o]] * sizeof(float));
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_err e;
            ck_assert_msg(sn_sim_launch(h, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &so,
                                        &e) == SN_OK, "%s", e.msg);
            for (int o = 0; o < n_outs; o++) {
                size_t n = outs[o] == 6 ? SN_OPT_NORM + 1 : len[outs[o]];
                double *got = malloc(n * sizeof(double)), *want = malloc(n * sizeof(double));
                for (size_t x = 0; x < n; x++) got[x] = buf[0][outs[o]][x], want[x] = buf[1][outs[o]][x];
                char what[96];
                snprintf(what, sizeof what, "%s (%s order) buffer %d", names[i],
                         reversed ? "reversed" : "forward", outs[o]);
                sn_check_close(what, got, want, n, 1e-5, 1e-6);
                free(got);
                free(want);
            }
        }
        for (int o = 0; o < n_outs; o++) free(before[o]);
    }
    printf("test_cuda_weights: the optimizer step over %d flat elements (grad sum, squared norm in %d "
           "blocks, clip at norm %.3f, AdamW) matches the reference in two thread orders\n", N, NB,
           (double)buf[0][6][SN_OPT_NORM]);
    ck_assert_float_lt(buf[0][6][SN_OPT_SCALE], 1.0f); /* the norm was clipped */
    for (int j = 0; j < 7; j++)
        for (int c = 0; c < 2; c++) free(buf[c][j]);
    sn_sim_module_free(h);
    sn_cuda_source_free(&cs);
}
END_TEST

/* The value of 16-bit dtype t's bits u. */
static double low_value(sn_dtype t, uint16_t u) {
    if (t == SN_BF16) {
        uint32_t w = (uint32_t)u << 16;
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    int ex = u >> 10 & 0x1f, man = u & 0x3ff;
    double a = ex == 0x1f ? (man ? NAN : INFINITY) : ex ? ldexp(1024 + man, ex - 25) : ldexp(man, -24);
    return u & 0x8000 ? -a : a;
}

/* AdamW writing the weights' 16-bit copies (flat_low: bf16, f16) on 1003 elements (float4 steps
 * and a tail of 3), on the simulator in two thread orders: p, m, v to the bit those of AdamW
 * without copies, each copy the new p rounded to nearest even. */
START_TEST(cpu_adamw_low_copies) {
    enum { N = 1003, DECAY = 501 };
    sn_kernel k[3];
    const sn_kernel *kp[3];
    for (int i = 0; i < 3; i++) {
        sn_dtype low = i == 0 ? SN_F32 : i == 1 ? SN_BF16 : SN_F16;
        char name[32];
        snprintf(name, sizeof name, "opt_adamw_%s", sn_dtype_name(low));
        k[i] = sn_optim_kernel(SN_KER_ADAMW, N, DECAY, low, name);
        kp[i] = &k[i];
    }
    sn_cuda_source cs = render(kp, 3);
    ck_assert_int_eq(cs.n_functions, 3);
    ck_assert(strstr(cs.src, "make_uint2(sn_pack_bf16x2(p4.x, p4.y)") &&
              strstr(cs.src, "low[i] = sn_f32_to_f16(p[i]);"));
    sn_sim_module *h = host_compile(cs.src);
    if (!h) {
        sn_cuda_source_free(&cs);
        return;
    }
    float *st[2][3], *g = aligned_alloc(64, 4096 * 2), *scal = aligned_alloc(64, 64 * 2);
    uint16_t *low = aligned_alloc(64, 4096);
    float init[3][N];
    sn_rng r = sn_rng_seed(11);
    for (int i = 0; i < N; i++) {
        init[0][i] = (float)sn_rng_normal(&r);
        init[1][i] = 0.1f * (float)sn_rng_normal(&r);
        init[2][i] = 0.01f * (float)fabs(sn_rng_normal(&r));
        g[i] = (float)sn_rng_normal(&r);
    }
    float h0[SN_OPT_SCALARS] = {[SN_OPT_LR] = 3e-3f, [SN_OPT_BETA1] = 0.9f, [SN_OPT_BETA2] = 0.95f,
                                [SN_OPT_EPS] = 1e-8f, [SN_OPT_WD] = 0.1f, [SN_OPT_BC1] = 0.19f,
                                [SN_OPT_BC2] = 0.0975f, [SN_OPT_INV_MICRO] = 0.5f, [SN_OPT_SCALE] = 0.7f};
    memcpy(scal, h0, sizeof h0);
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 3; j++) st[c][j] = aligned_alloc(64, 4096 * 2);
    sn_target t = sm(80);
    for (int i = 0; i < 3; i++)
        for (int reversed = 0; reversed < 2; reversed++) {
            float **b = st[i > 0];
            for (int j = 0; j < 3; j++) memcpy(b[j], init[j], sizeof init[j]);
            void *params[6] = {&b[0], &b[1], &b[2], &g, &scal, &low};
            sn_sim_opts so = sn_sim_defaults();
            so.order = reversed ? SN_SIM_REVERSE : SN_SIM_FORWARD;
            sn_cuda_dims d = sn_cuda_launch_dims(&k[i], &t);
            sn_err e;
            ck_assert_msg(sn_sim_launch(h, cs.fn[i], d.grid, d.block, d.shared_bytes, params, &so,
                                        &e) == SN_OK, "%s", e.msg);
            if (i == 0) continue;
            for (int j = 0; j < 3; j++) ck_assert(!memcmp(st[0][j], st[1][j], sizeof init[j]));
            for (int x = 0; x < N; x++)
                ck_assert_msg(low_value(k[i].opt.flat_low, low[x]) == sn_dtype_round(k[i].opt.flat_low, b[0][x]),
                              "%s copy %d: %g, want %g", k[i].name, x, low_value(k[i].opt.flat_low, low[x]),
                              sn_dtype_round(k[i].opt.flat_low, b[0][x]));
        }
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 3; j++) free(st[c][j]);
    free(g), free(scal), free(low);
    sn_sim_module_free(h);
    sn_cuda_source_free(&cs);
}
END_TEST

/* ---- NF4 weights unpacked (cuda_dequant.c) ---- */

/* The dequantize kernel on the simulator against sn_nf4_dequantize bit for bit, f32 out and
 * rounded once to bf16 and f16 (sn_lowp_round: nearest even), a short last block and several
 * groups of scales, normal weights and random bytes (f16's subnormals and infinities), with its
 * launch and with a grid of 3 blocks (the grid-stride loop goes round), in both thread orders
 * into NaN-poisoned outputs; and NVRTC for sm_75, sm_80 and sm_90 without spills. */
START_TEST(cpu_dequant_nf4) {
    const int64_t sizes[][2] = {{37, 50}, {300, 192}}; /* 29 blocks; 900 blocks in 4 groups */
    const sn_dtype dts[] = {SN_F32, SN_BF16, SN_F16};
    bool nvrtc = have_nvrtc();
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++) {
            sn_dtype dt = dts[di];
            int64_t n = sizes[si][0] * sizes[si][1];
            sn_graph *g = sn_graph_new();
            sn_node *w = sn_param_nf4(g, "w", dt, SN_SHAPE(sizes[si][0], sizes[si][1]));
            ck_assert_msg(w, "%s", sn_graph_error(g));
            sn_kernel k = {.kind = SN_KER_DEQUANT, .id = w->id, .n_out = 1, .n_in = 1, .anchor = w};
            snprintf(k.name, sizeof k.name, "k%d_dequant_nf4", w->id);
            k.args[0] = w;
            k.args[1] = w->in[0];
            sn_kernel_work(&k, &k.n_items, &k.serial);
            const sn_kernel *kp = &k;
            sn_cuda_source cs = render(&kp, 1);
            ck_assert_msg(strstr(cs.src, "fmaf((float)scale_code[b], step[b / 256], mean)"), "%s", cs.src);
            for (int a = 0; nvrtc && a < 3; a++) {
                sn_cuda_module m;
                sn_err e;
                int arch = (int[]){75, 80, 90}[a];
                ck_assert_msg(sn_nvrtc_compile(cs.src, "dequant.cu", arch, &m, &e) == SN_OK, "%s", e.msg);
                const sn_cuda_kernel_info *in = sn_cuda_module_info(&m, cs.fn[0]);
                ck_assert(in && in->spill_store_bytes == 0 && in->stack_bytes == 0);
                sn_cuda_module_free(&m);
            }
            sn_sim_module *h = host_compile(cs.src);
            if (!h) {
                sn_cuda_source_free(&cs);
                sn_graph_free(g);
                return;
            }
            sn_nf4_layout l = sn_nf4_layout_of(n);
            float *v = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
            uint8_t *q = aligned_alloc(64, (size_t)(l.bytes + 63) / 64 * 64);
            void *out = aligned_alloc(64, (size_t)(4 * n + 63) / 64 * 64);
            for (int random = 0; random < 2; random++) {
                sn_err e;
                if (random) {
                    uint8_t *rq = sn_test_nf4_random(n, 50 + (uint64_t)si);
                    memcpy(q, rq, (size_t)l.bytes);
                    free(rq);
                } else {
                    sn_rng r = sn_rng_seed(40 + (uint64_t)si);
                    for (int64_t i = 0; i < n; i++) v[i] = (float)(0.02 * sn_rng_normal(&r));
                    ck_assert_msg(sn_nf4_quantize(v, n, q, &e) == SN_OK, "%s", e.msg);
                }
                sn_nf4_dequantize(q, n, want);
                void *params[2] = {&out, &q};
                sn_target t = sm(80);
                sn_cuda_dims dims[2] = {sn_cuda_launch_dims(&k, &t), {.grid = {3, 1, 1}, .block = {256, 1, 1}}};
                for (int d = 0; d < 2; d++)
                    for (int rev = 0; rev < 2; rev++) {
                        memset(out, 0xff, (size_t)(4 * n)); /* NaN in f32, bf16 and f16 */
                        sn_sim_opts so = sn_sim_defaults();
                        so.order = rev ? SN_SIM_REVERSE : SN_SIM_FORWARD;
                        ck_assert_msg(sn_sim_launch(h, cs.fn[0], dims[d].grid, dims[d].block,
                                                    dims[d].shared_bytes, params, &so, &e) == SN_OK, "%s", e.msg);
                        for (int64_t i = 0; i < n; i++) {
                            uint32_t rb, got = dt == SN_F32 ? ((uint32_t *)out)[i] : ((uint16_t *)out)[i];
                            memcpy(&rb, &want[i], 4);
                            if (dt != SN_F32) rb = sn_lowp_round(dt, want[i]);
                            ck_assert_msg(got == rb, "%s, %lld weights (%s), grid %u, %s order: weight "
                                          "%lld is 0x%08x, want 0x%08x", sn_dtype_name(dt), (long long)n,
                                          random ? "random bytes" : "normal weights", dims[d].grid[0],
                                          rev ? "reversed" : "forward", (long long)i, got, rb);
                        }
                    }
            }
            free(v), free(want), free(q), free(out);
            sn_sim_module_free(h);
            sn_cuda_source_free(&cs);
            sn_graph_free(g);
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("cuda_weights");
    TCase *cpu = tcase_create("cpu");
    tcase_set_timeout(cpu, 120);
    tcase_add_test(cpu, cpu_embedding_bwd_buckets);
    tcase_add_test(cpu, cpu_optimizer_step);
    tcase_add_test(cpu, cpu_adamw_low_copies);
    tcase_add_test(cpu, cpu_dequant_nf4);
    suite_add_tcase(s, cpu);
    return sn_test_main(s);
}
