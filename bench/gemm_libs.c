/* gemm_libs.c: which CPU GEMM library should sinter call? Times oneDNN, BLIS and OpenBLAS on the
 * GEMMs of one GPT-2 training step and measures this machine's FMA peak (bench/peak.h) in the same
 * run. This file is the driver: it spawns one worker per (library, environment setting)
 * (gemm_libs_worker.c), interleaves their calls shape by shape and prints the results.
 * stdout: one JSON object per line, each with bench, scope, device, model, batch, seq, ms_per_step,
 * tokens_per_s and mfu; stderr: a summary table. Results and the choice they led to: docs/gemm.md.
 *
 *     bench/gemm_libs --model gpt2 --batch 4 --seq 256 --steps 9 > run.jsonl
 *     bench/gemm_libs --quick --model gpt2 --batch 4 --seq 256 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "models/gpt2.h"
#include "gemm_libs.h"
#include "peak.h"

/* ---- small helpers and the JSON record head -------------------------------------------------- */

double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void sleep_ms(double ms) {
    struct timespec t = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

static void loadavg(char *buf, size_t len) { /* "1.23 0.80 0.50": other work competing for the cores */
    snprintf(buf, len, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, (int)len, f)) snprintf(buf, len, "?");
        fclose(f);
        int spaces = 0;
        for (char *p = buf; *p; p++)
            if (*p == '\n' || (*p == ' ' && ++spaces == 3)) *p = 0;
    }
}

bj *record_open(const Run *r, const char *scope, double ms, double flop, double peak_gflops) {
    bj *o = bj_new();
    bj_str(o, "bench", "gemm_libs");
    bj_str(o, "scope", scope);
    bj_str(o, "device", "cpu");
    bj_str(o, "model", r->model);
    bj_int(o, "batch", r->batch);
    bj_int(o, "seq", r->seq);
    if (ms > 0) {
        bj_num(o, "ms_per_step", "%.3f", ms);
        bj_num(o, "tokens_per_s", "%.1f", (double)r->batch * r->seq / (ms * 1e-3));
    } else {
        bj_null(o, "ms_per_step");
        bj_null(o, "tokens_per_s");
    }
    if (ms > 0 && peak_gflops > 0) bj_num(o, "mfu", "%.4f", flop / (ms * 1e6) / peak_gflops);
    else bj_null(o, "mfu");
    return o;
}

/* ---- the peak ---------------------------------------------------------------------------------- */

/* Prints one "peak" record per dtype and thread count (1 and r->threads) and raises pk[0] (f32)
 * and pk[1] (bf16) to this run's peak: the larger of the concurrent total and threads x one core
 * alone (a neighbour on a shared machine depresses the concurrent run more often than the lone one). */
static void measure_peaks(const Run *r, const char *when, double pk[2]) {
    for (int d = 0; d < 2; d++) {
        sn_bench_peak_dtype dt = d ? SN_PEAK_BF16 : SN_PEAK_F32;
        if (!sn_bench_peak_supported(dt)) continue;
        for (int nt = 1; nt <= r->threads; nt += r->threads > 1 ? r->threads - 1 : 1) {
            sn_bench_peak p;
            sn_bench_peak_measure(dt, nt, 5, &p);
            bj *o = record_open(r, "peak", 0, 0, 0);
            bj_str(o, "when", when);
            bj_str(o, "dtype", d ? "bf16" : "f32");
            bj_str(o, "instr", p.instr);
            bj_int(o, "threads", p.threads);
            bj_int(o, "reps", 5);
            bj_num(o, "gflops_per_core", "%.1f", p.gflops_per_core);
            bj_num(o, "gflops", "%.1f", p.gflops);
            bj_print(o, stdout);
            if (nt == 1 && p.gflops * r->threads > pk[d]) pk[d] = p.gflops * r->threads;
            if (nt == r->threads && p.gflops > pk[d]) pk[d] = p.gflops;
        }
    }
}

/* ---- measuring --------------------------------------------------------------------------------- */

static const double SLOW_FACTOR = 8; /* see --slow-ms */

typedef struct { double ms, share; } Sample; /* share: CPU time / (wall time x threads) */

static int cmp_sample(const void *a, const void *b) {
    double x = ((const Sample *)a)->ms, y = ((const Sample *)b)->ms;
    return (x > y) - (x < y);
}

typedef struct { /* one (worker, variant) column of the results */
    Worker *w;
    int var, ok;
    double best[NSHAPE], median[NSHAPE], err[NSHAPE], share[NSHAPE];
    int reps[NSHAPE], measured[NSHAPE];
    char impl[NSHAPE][96];
} Slot;

/* A "gemm" record's fields up to impl (the caller adds the rest and prints it). */
static bj *gemm_record(const Run *r, const Slot *s, const Shape *sh, double ms, double peak, const char *impl) {
    const Variant *v = &variants[s->var];
    bj *o = record_open(r, "gemm", ms, 2.0 * sh->m * sh->n * sh->k, peak);
    bj_str(o, "pass", sh->pass);
    bj_str(o, "op", sh->op);
    bj_str(o, "lib", s->w->spec->group);
    bj_str(o, "api", v->api);
    bj_str(o, "env", env_label(s->w->spec));
    bj_str(o, "impl", impl);
    return o;
}

/* Times shape si on every active slot: a warm-up call that is also checked, then r->reps rounds
 * over the slots in rotating order, each call after a pause of gap ms. */
static void measure_shape(const Run *r, int si, Slot *slots, int nslot, double gap, double slow, Sample *samples) {
    const Shape *sh = &r->shape[si];
    int act[NVAR * NSPEC], nact = 0, slow_once[NVAR * NSPEC] = {0};
    for (int j = 0; j < nslot; j++) {
        const Variant *v = &variants[slots[j].var];
        if (slots[j].ok && slots[j].w->alive && (!v->epilogue || takes_epilogue(sh))) act[nact++] = j;
    }
    double prev_gap = gap, warm[NVAR * NSPEC] = {0};
    for (int round = -1; round < r->reps; round++) {
        if (round == 0) { /* far slower than the best on its warm-up: timed once more, not `reps` times */
            double fastest = 0;
            for (int q = 0; q < nact; q++)
                if (slots[act[q]].measured[si] && (fastest == 0 || warm[act[q]] < fastest)) fastest = warm[act[q]];
            for (int q = 0; q < nact; q++)
                slow_once[act[q]] = warm[act[q]] > slow || warm[act[q]] > SLOW_FACTOR * fastest;
        }
        for (int q = 0; q < nact; q++) {
            int j = act[(q + (round < 0 ? 0 : round)) % nact];
            Slot *s = &slots[j];
            if (!s->w->alive || (round >= 0 && (!s->measured[si] || (slow_once[j] && round > 0)))) continue;
            Req rq = {s->var, si, round < 0};
            Resp rs;
            sleep_ms(prev_gap);
            write_all(s->w->wfd, &rq, sizeof rq);
            if (read_all(s->w->rfd, &rs, sizeof rs) != 0) {
                fprintf(stderr, "gemm_libs: worker %s [%s] died on %s %s; its remaining results are lost\n",
                        s->w->spec->group, env_label(s->w->spec), sh->pass, sh->op);
                s->w->alive = 0;
                continue;
            }
            prev_gap = gap + (strcmp(s->w->spec->group, "openblas") == 0 ? 120 : 0);
            snprintf(s->impl[si], sizeof s->impl[si], "%s", rs.impl);
            if (round >= 0) {
                samples[(size_t)j * r->reps + (size_t)round] = (Sample){rs.ms, rs.cpu_ms / (rs.ms * r->threads)};
                continue;
            }
            s->err[si] = rs.err, s->measured[si] = rs.ok, warm[j] = rs.ms;
            if (!rs.ok) {
                const Variant *v = &variants[s->var];
                bj *o = gemm_record(r, s, sh, 0, 0, rs.impl);
                bj_str(o, "dtype", v->bf16 ? "bf16" : "f32");
                bj_int(o, "m", sh->m);
                bj_int(o, "n", sh->n);
                bj_int(o, "k", sh->k);
                bj_char(o, "transa", sh->ta);
                bj_char(o, "transb", sh->tb);
                bj_bool(o, "ok", false);
                bj_str(o, "error", rs.msg);
                bj_print(o, stdout);
            }
        }
    }
    for (int q = 0; q < nact; q++) {
        Slot *s = &slots[act[q]];
        if (!s->measured[si]) continue;
        int nr = slow_once[act[q]] ? 1 : r->reps;
        Sample *x = &samples[(size_t)act[q] * r->reps];
        qsort(x, (size_t)nr, sizeof *x, cmp_sample);
        s->best[si] = x[0].ms, s->share[si] = x[0].share, s->reps[si] = nr;
        s->median[si] = nr % 2 ? x[nr / 2].ms : 0.5 * (x[nr / 2 - 1].ms + x[nr / 2].ms);
    }
}

/* ---- results ----------------------------------------------------------------------------------- */

/* One "gemm" record per measured (shape, slot): ms_per_step is the best call, mfu against the
 * peak of the variant's input dtype. */
static void print_gemms(const Run *r, const Slot *slots, int nslot, const double pk[2]) {
    for (int si = 0; si < NSHAPE; si++) {
        const Shape *sh = &r->shape[si];
        for (int j = 0; j < nslot; j++) {
            const Slot *s = &slots[j];
            if (!s->measured[si]) continue;
            const Variant *v = &variants[s->var];
            double peak = pk[v->bf16];
            bj *o = gemm_record(r, s, sh, s->best[si], peak, s->impl[si]);
            bj_str(o, "dtype", v->bf16 ? "bf16" : "f32");
            bj_str(o, "out", "f32");
            bj_str(o, "epilogue", v->epilogue ? "bias+gelu_tanh" : "none");
            bj_int(o, "m", sh->m);
            bj_int(o, "n", sh->n);
            bj_int(o, "k", sh->k);
            bj_char(o, "transa", sh->ta);
            bj_char(o, "transb", sh->tb);
            bj_int(o, "threads", r->threads);
            bj_int(o, "reps", s->reps[si]);
            bj_num(o, "median_ms", "%.3f", s->median[si]);
            bj_num(o, "gflops", "%.1f", 2.0 * sh->m * sh->n * sh->k / (s->best[si] * 1e6));
            if (peak > 0) bj_num(o, "peak_gflops", "%.1f", peak);
            else bj_null(o, "peak_gflops");
            bj_num(o, "cpu_share", "%.2f", s->share[si]);
            bj_num(o, "max_err", "%.2g", s->err[si]);
            bj_bool(o, "ok", true);
            bj_print(o, stdout);
        }
    }
}

/* Per slot: the sum over the shapes of count x best ms. scope "step" when that is every GEMM of a
 * training step; "step_part" for --quick (no LM head) and the fused-epilogue variants (forward
 * layer GEMMs only). step_ms[j] gets the sum, or -1 where a shape is missing; returns the
 * fastest full fp32 step. */
static double print_steps(const Run *r, const Slot *slots, int nslot, const double pk[2], double *step_ms) {
    double best_step = 0;
    for (int j = 0; j < nslot; j++) {
        const Slot *s = &slots[j];
        const Variant *v = &variants[s->var];
        double ms = 0, flop = 0;
        int complete = s->ok;
        for (int si = 0; si < NSHAPE; si++) {
            const Shape *sh = &r->shape[si];
            if ((r->quick && is_lm_head(sh)) || (v->epilogue && !takes_epilogue(sh))) continue;
            if (!s->measured[si]) complete = 0;
            ms += sh->per_step * s->best[si], flop += sh->per_step * 2.0 * sh->m * sh->n * sh->k;
        }
        step_ms[j] = complete ? ms : -1;
        if (!complete) continue;
        if (!v->epilogue && !v->bf16 && (best_step == 0 || ms < best_step)) best_step = ms;
        char covers[96];
        if (v->epilogue) snprintf(covers, sizeof covers, "forward layer GEMMs x%d", r->layers);
        else if (r->quick) snprintf(covers, sizeof covers, "all layer GEMMs x%d (no LM head)", r->layers);
        else snprintf(covers, sizeof covers, "all GEMMs of one step (%d layers + LM head)", r->layers);
        bj *o = record_open(r, v->epilogue || r->quick ? "step_part" : "step", ms, flop, pk[v->bf16]);
        bj_str(o, "lib", s->w->spec->group);
        bj_str(o, "api", v->api);
        bj_str(o, "env", env_label(s->w->spec));
        bj_str(o, "dtype", v->bf16 ? "bf16" : "f32");
        bj_str(o, "epilogue", v->epilogue ? "bias+gelu_tanh" : "none");
        bj_str(o, "covers", covers);
        bj_int(o, "threads", r->threads);
        bj_num(o, "gflop", "%.4g", flop / 1e9);
        bj_num(o, "gflops", "%.1f", flop / (ms * 1e6));
        bj_print(o, stdout);
    }
    return best_step;
}

/* stderr: GFLOP/s, one column per slot. */
static void print_table(const Run *r, const Slot *slots, int nslot, const double pk[2], const double *step_ms,
                        double best_step) {
    fprintf(stderr, "\n%s B=%d T=%d: GFLOP/s (best of %d, %d threads; peak f32 %.0f, bf16 %.0f GFLOP/s)\n",
            r->model, r->batch, r->seq, r->reps, r->threads, pk[0], pk[1]);
    fprintf(stderr, "%-18s %-18s", "shape", "m n k ta tb");
    for (int j = 0; j < nslot; j++) fprintf(stderr, " %6s%d", "col", j);
    fprintf(stderr, "\n");
    for (int si = 0; si < NSHAPE; si++) {
        const Shape *sh = &r->shape[si];
        if (r->quick && is_lm_head(sh)) continue;
        char name[40], dims[48];
        snprintf(name, sizeof name, "%s.%s", sh->pass, sh->op);
        snprintf(dims, sizeof dims, "%d %d %d %c%c", sh->m, sh->n, sh->k, sh->ta, sh->tb);
        fprintf(stderr, "%-18s %-18s", name, dims);
        for (int j = 0; j < nslot; j++) {
            if (!slots[j].measured[si]) fprintf(stderr, " %7s", "-");
            else fprintf(stderr, " %7.1f", 2.0 * sh->m * sh->n * sh->k / (slots[j].best[si] * 1e6));
        }
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "%-37s", "ms per step (sum count x best)");
    for (int j = 0; j < nslot; j++) {
        if (step_ms[j] > 0) fprintf(stderr, " %7.0f", step_ms[j]);
        else fprintf(stderr, " %7s", "-");
    }
    fprintf(stderr, "\ncolumns:\n");
    for (int j = 0; j < nslot; j++) {
        const Variant *v = &variants[slots[j].var];
        fprintf(stderr, "  col%d %s %s %s%s [%s]", j, slots[j].w->spec->group, v->api, v->bf16 ? "bf16" : "f32",
                v->epilogue ? " (fwd layers only)" : "", env_label(slots[j].w->spec));
        if (step_ms[j] > 0 && best_step > 0 && !v->epilogue)
            fprintf(stderr, "  %.2fx the fastest f32", step_ms[j] / best_step);
        fprintf(stderr, "\n");
    }
}

/* ---- main -------------------------------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr,
            "usage: gemm_libs [--model NAME] [--batch B] [--seq T] [--steps N] [--quick] [--threads N]\n"
            "                 [--gap-ms MS] [--slow-ms MS] [--no-peak] [--only onednn,blis,openblas] [--measure-ref]\n"
            "  --model NAME  whose training-step GEMMs to time: %s (gpt2)\n"
            "  --batch B, --seq T  tokens per step; every GEMM has B*T rows, columns or depth (4, 256)\n"
            "  --steps N     timed repetitions per (shape, library), interleaved; best and median printed\n"
            "                (5; --reps is the same flag)\n"
            "  --quick       2 steps, no LM-head shapes, no autodetect or AVX2 settings of BLIS/OpenBLAS\n"
            "  --threads N   threads each library is set to use (2)\n"
            "  --gap-ms MS   pause before each timed call so idle pool threads stop spinning (30;\n"
            "                OpenBLAS gets 120 more: its idle threads spin ~2^28 cycles)\n"
            "  --slow-ms MS  a call slower than this on its warm-up (or 8x slower than the fastest\n"
            "                library's warm-up on that shape) is timed only once (3000)\n",
            sn_gpt2_config_names());
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "--worker") == 0) return worker_main(argc - 2, argv + 2);

    Run run = {.model = "gpt2", .batch = 4, .seq = 256, .threads = 2, .reps = 5};
    Run *r = &run;
    int peak = 1, reps_set = 0;
    double gap = 30, slow = 3000;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if ((!strcmp(a, "--steps") || !strcmp(a, "--reps")) && more) r->reps = atoi(argv[++i]), reps_set = 1;
        else if (!strcmp(a, "--model") && more) r->model = argv[++i];
        else if (!strcmp(a, "--batch") && more) r->batch = atoi(argv[++i]);
        else if (!strcmp(a, "--seq") && more) r->seq = atoi(argv[++i]);
        else if (!strcmp(a, "--quick")) r->quick = 1;
        else if (!strcmp(a, "--threads") && more) r->threads = atoi(argv[++i]);
        else if (!strcmp(a, "--gap-ms") && more) gap = atof(argv[++i]);
        else if (!strcmp(a, "--slow-ms") && more) slow = atof(argv[++i]);
        else if (!strcmp(a, "--only") && more) only = argv[++i];
        else if (!strcmp(a, "--no-peak")) peak = 0;
        else if (!strcmp(a, "--measure-ref")) r->measure_ref = 1;
        else usage();
    }
    if (r->quick && !reps_set) r->reps = 2;
    if (r->reps < 1 || r->threads < 1) usage();
    char msg[256];
    if (run_shapes(r, msg, sizeof msg) != 0) DIE("%s", msg);
    signal(SIGPIPE, SIG_IGN);

    /* machine */
    char cpu[128] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f"), hasbf16 = sn_bench_peak_supported(SN_PEAK_BF16);
    char load[64];
    loadavg(load, sizeof load);
    bj *o = record_open(r, "machine", 0, 0, 0);
    bj_str(o, "cpu", cpu);
    bj_str(o, "loadavg", load);
    bj_int(o, "online_cpus", sysconf(_SC_NPROCESSORS_ONLN));
    bj_bool(o, "avx512f", has512);
    bj_bool(o, "avx512_bf16", hasbf16);
    bj_int(o, "threads", r->threads);
    bj_int(o, "reps", r->reps);
    bj_bool(o, "quick", r->quick);
    bj_int(o, "n_embd", r->c);
    bj_int(o, "n_layer", r->layers);
    bj_int(o, "vocab_padded", r->vp);
    bj_print(o, stdout);

    /* peak: measured before the workers start and again after they finish (they sleep in read()
     * by then); the larger counts, since neighbours on a shared machine only ever lower it */
    double pk[2] = {0, 0}; /* f32, bf16 GFLOP/s */
    if (peak) measure_peaks(r, "start", pk);

    /* workers */
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) DIE("cannot find my own executable: %s", strerror(errno));
    self[sl] = 0;
    static Worker workers[NSPEC];
    static Slot slots[NVAR * NSPEC];
    int nworker = 0, nslot = 0;
    for (int i = 0; i < NSPEC; i++) {
        const WorkerSpec *ws = &worker_specs[i];
        if (!group_compiled(ws->group) || (r->quick && !ws->in_quick) || (only && !strstr(only, ws->group))) continue;
        Worker *w = &workers[nworker];
        memset(w, 0, sizeof *w);
        w->spec = ws;
        if (spawn_worker(w, self, r) != 0) {
            close(w->wfd), close(w->rfd), waitpid(w->pid, NULL, 0);
            fprintf(stderr, "gemm_libs: worker %s [%s] died during start-up; skipped\n", ws->group, env_label(ws));
            continue;
        }
        nworker++;
        o = record_open(r, "lib", 0, 0, 0);
        bj_str(o, "lib", ws->group);
        bj_str(o, "env", env_label(ws));
        bj_str(o, "info", w->hello.info);
        bj_print(o, stdout);
        for (int j = 0; j < w->hello.nvar; j++) {
            Slot *s = &slots[nslot++];
            memset(s, 0, sizeof *s);
            s->w = w, s->var = w->hello.var[j], s->ok = w->hello.ok[j];
            if (!s->ok)
                fprintf(stderr, "gemm_libs: %s %s [%s] FAILED the small-shape check; not timed\n", ws->group,
                        variants[s->var].api, env_label(ws));
        }
    }
    if (nworker == 0)
        fprintf(stderr, "gemm_libs: no GEMM library to measure (none compiled in, or all failed to start)\n");

    Sample *samples = malloc(sizeof(Sample) * (size_t)r->reps * NVAR * NSPEC);
    if (!samples) DIE("out of memory");
    for (int si = 0; si < NSHAPE && nslot; si++)
        if (!(r->quick && is_lm_head(&r->shape[si]))) measure_shape(r, si, slots, nslot, gap, slow, samples);
    free(samples);

    if (peak && nslot) sleep_ms(gap + 200), measure_peaks(r, "end", pk);
    if (peak) {
        o = record_open(r, "peak_used", 0, 0, 0);
        bj_int(o, "threads", r->threads);
        bj_num(o, "f32_gflops", "%.1f", pk[0]);
        bj_num(o, "bf16_gflops", "%.1f", pk[1]);
        bj_str(o, "note", "denominator of mfu (f32 or bf16 by the GEMM's input dtype): max over start and "
               "end of max(concurrent total, threads x one core alone)");
        bj_print(o, stdout);
    }
    print_gemms(r, slots, nslot, pk);
    double step_ms[NVAR * NSPEC];
    double best_step = print_steps(r, slots, nslot, pk, step_ms);
    if (nslot) print_table(r, slots, nslot, pk, step_ms, best_step);

    loadavg(load, sizeof load);
    o = record_open(r, "end", 0, 0, 0);
    bj_str(o, "loadavg", load);
    bj_print(o, stdout);
    for (int i = 0; i < nworker; i++) {
        Req quit = {-1, 0, 0};
        if (workers[i].alive) write_all(workers[i].wfd, &quit, sizeof quit);
        close(workers[i].wfd), close(workers[i].rfd);
        waitpid(workers[i].pid, NULL, 0);
    }
    return 0;
}
