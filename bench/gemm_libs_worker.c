/* gemm_libs_worker.c: the GEMM shapes of one training step of a GPT-2 model, the check of every
 * library against a double-precision reference, and the worker process that times one library.
 * Convention: a worker is this binary re-executed with --worker; it answers Req with Resp on a pipe. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/gpt2.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "gemm_libs.h"

/* ---- shapes ---------------------------------------------------------------------------------- */

int run_shapes(Run *r, char *msg, size_t msglen) {
    sn_gpt2_config c;
    if (!sn_gpt2_config_find(r->model, &c)) {
        snprintf(msg, msglen, "unknown model '%s': use one of %s", r->model, sn_gpt2_config_names());
        return -1;
    }
    if (r->batch < 1 || r->seq < 1 || r->seq > c.ctx) {
        snprintf(msg, msglen, "--batch %d --seq %d: use batch >= 1 and 1 <= seq <= %d (%s's context)", r->batch,
                 r->seq, c.ctx, c.name);
        return -1;
    }
    /* the LM head's table as the compiler pads it (pad_vocab pass, default multiple) */
    r->c = c.n_embd, r->layers = c.n_layer;
    r->vp = (int)sn_pad_vocab_size(c.vocab, sn_pipeline_defaults().pad_vocab);
    int BT = r->batch * r->seq, C = r->c, VP = r->vp, L = r->layers;
    const Shape s[NSHAPE] = {
        /* forward: y(BT,N) = x(BT,K) @ W(K,N); LM head: logits(BT,Vp) = x(BT,C) @ wte(Vp,C)^T */
        {"fwd", "qkv", BT, 3 * C, C, 'N', 'N', L},
        {"fwd", "attn_proj", BT, C, C, 'N', 'N', L},
        {"fwd", "fc", BT, 4 * C, C, 'N', 'N', L},
        {"fwd", "fc_proj", BT, C, 4 * C, 'N', 'N', L},
        {"fwd", "lm_head", BT, VP, C, 'N', 'T', 1},
        /* backward, data: dx(BT,K) = dy(BT,N) @ W(K,N)^T; LM head: dx(BT,C) = dlogits(BT,Vp) @ wte(Vp,C) */
        {"bwd_dx", "qkv", BT, C, 3 * C, 'N', 'T', L},
        {"bwd_dx", "attn_proj", BT, C, C, 'N', 'T', L},
        {"bwd_dx", "fc", BT, C, 4 * C, 'N', 'T', L},
        {"bwd_dx", "fc_proj", BT, 4 * C, C, 'N', 'T', L},
        {"bwd_dx", "lm_head", BT, C, VP, 'N', 'N', 1},
        /* backward, weights: dW(K,N) = x(BT,K)^T @ dy(BT,N); LM head: dwte(Vp,C) = dlogits^T @ x */
        {"bwd_dw", "qkv", C, 3 * C, BT, 'T', 'N', L},
        {"bwd_dw", "attn_proj", C, C, BT, 'T', 'N', L},
        {"bwd_dw", "fc", C, 4 * C, BT, 'T', 'N', L},
        {"bwd_dw", "fc_proj", 4 * C, C, BT, 'T', 'N', L},
        {"bwd_dw", "lm_head", VP, C, BT, 'T', 'N', 1},
    };
    memcpy(r->shape, s, sizeof s);
    return 0;
}

int is_lm_head(const Shape *s) { return strcmp(s->op, "lm_head") == 0; }
int takes_epilogue(const Shape *s) { return strcmp(s->pass, "fwd") == 0 && !is_lm_head(s); }

/* ---- data and the reference ------------------------------------------------------------------ */

static const double TOL = 1e-4; /* normalized error; a wrong GEMM is > 1e-3 on these shapes */

static double cpu_ms(void) { /* all threads of this process */
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}
static float rng_uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) * (2.0 / (1 << 24)) - 1.0); }

static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(&s);
}

static uint16_t f32_to_bf16(float f) { /* round to nearest even; inputs here are finite */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double gelu_tanh(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static double a_at(const Gemm *g, int bf, int i, int p) {
    size_t x = g->ta == 'N' ? (size_t)i * g->k + p : (size_t)p * g->m + i;
    return bf ? bf16_to_f32(g->abf[x]) : g->a[x];
}
static double b_at(const Gemm *g, int bf, int p, int j) {
    size_t x = g->tb == 'N' ? (size_t)p * g->n + j : (size_t)j * g->k + p;
    return bf ? bf16_to_f32(g->bbf[x]) : g->b[x];
}

/* Error of one entry against a double-precision dot product over the same (bf16-rounded) inputs,
 * normalized by the sum of |products| so it is scale-free; NaN when C is NaN. */
static double entry_err(const Gemm *g, const Variant *v, int i, int j) {
    double dot = 0, mag = 0;
    for (int p = 0; p < g->k; p++) {
        double t = a_at(g, v->bf16, i, p) * b_at(g, v->bf16, p, j);
        dot += t, mag += fabs(t);
    }
    if (v->epilogue) dot = gelu_tanh(dot + g->bias[j]), mag += fabs(g->bias[j]);
    double got = g->c[(size_t)i * g->n + j];
    return fabs(got - dot) / (mag + 1e-30);
}

/* Full comparison with the reference on a small odd shape, for all four transpose pairs; prints
 * one "check" record per pair and returns whether all passed. */
static int small_check(const Run *r, int var, const char *env) {
    enum { SM = 37, SN = 29, SK = 53 };
    static float a[SM * SK], b[SK * SN], bias[SN], c[SM * SN];
    static uint16_t abf[SM * SK], bbf[SK * SN];
    fill(a, SM * SK, 11), fill(b, SK * SN, 12), fill(bias, SN, 13);
    for (int i = 0; i < SM * SK; i++) abf[i] = f32_to_bf16(a[i]);
    for (int i = 0; i < SK * SN; i++) bbf[i] = f32_to_bf16(b[i]);
    const Variant *v = &variants[var];
    int all_ok = 1;
    for (int t = 0; t < 4; t++) {
        Gemm g = {SM, SN, SK, t & 1 ? 'T' : 'N', t & 2 ? 'T' : 'N', a, b, bias, c, abf, bbf};
        Plan p;
        char impl[96], msg[200] = "";
        double err = NAN;
        memset(c, 0xff, sizeof c); /* NaN: a call that writes nothing fails */
        if (plan_new(&p, var, &g, impl, sizeof impl, msg, sizeof msg) == 0) {
            plan_run(&p);
            err = 0;
            for (int i = 0; i < SM; i++)
                for (int j = 0; j < SN; j++) {
                    double e = entry_err(&g, v, i, j);
                    if (!(e <= err)) err = e; /* keeps NaN */
                }
            plan_free(&p);
        }
        int ok = err <= TOL;
        all_ok &= ok;
        bj *o = record_open(r, "check", 0, 0, 0);
        bj_str(o, "lib", v->group);
        bj_str(o, "api", v->api);
        bj_str(o, "env", env);
        bj_str(o, "dtype", v->bf16 ? "bf16" : "f32");
        bj_str(o, "epilogue", v->epilogue ? "bias+gelu_tanh" : "none");
        bj_int(o, "m", SM);
        bj_int(o, "n", SN);
        bj_int(o, "k", SK);
        bj_char(o, "transa", g.ta);
        bj_char(o, "transb", g.tb);
        bj_int(o, "threads", r->threads);
        bj_num(o, "max_err", "%.3g", isnan(err) ? -1.0 : err);
        bj_num(o, "tol", "%g", TOL);
        bj_bool(o, "ok", ok);
        if (msg[0]) bj_str(o, "error", msg);
        bj_print(o, stdout);
    }
    return all_ok;
}

/* ---- the pipe protocol ------------------------------------------------------------------------ */

void write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) exit(1);
        p += w, n -= (size_t)w;
    }
}

int read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

int spawn_worker(Worker *w, const char *self, const Run *r) {
    int to_child[2], to_parent[2];
    if (pipe2(to_child, O_CLOEXEC) || pipe2(to_parent, O_CLOEXEC)) DIE("pipe: %s", strerror(errno));
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) DIE("fork: %s", strerror(errno));
    if (pid == 0) {
        fcntl(to_child[0], F_SETFD, 0), fcntl(to_parent[1], F_SETFD, 0);
        if (w->spec->knob) unsetenv(w->spec->knob);
        if (w->spec->env) putenv((char *)w->spec->env);
        char rfd[16], wfd[16], th[16], batch[16], seq[16];
        snprintf(rfd, sizeof rfd, "%d", to_child[0]), snprintf(wfd, sizeof wfd, "%d", to_parent[1]);
        snprintf(th, sizeof th, "%d", r->threads);
        snprintf(batch, sizeof batch, "%d", r->batch), snprintf(seq, sizeof seq, "%d", r->seq);
        const char *argv[] = {self, "--worker", w->spec->group, env_label(w->spec), rfd, wfd, th,
                              r->measure_ref ? "1" : "0", r->model, batch, seq, NULL};
        execv(self, (char *const *)argv);
        _exit(127);
    }
    close(to_child[0]), close(to_parent[1]);
    w->pid = pid, w->wfd = to_child[1], w->rfd = to_parent[0];
    w->alive = read_all(w->rfd, &w->hello, sizeof w->hello) == 0;
    return w->alive ? 0 : -1;
}

/* ---- the worker process ----------------------------------------------------------------------- */

static size_t max_of(const Run *r, int which) { /* 0: A, 1: B, 2: C elements over all shapes */
    size_t best = 0;
    for (int i = 0; i < NSHAPE; i++) {
        const Shape *s = &r->shape[i];
        size_t e = which == 0 ? (size_t)s->m * s->k : which == 1 ? (size_t)s->k * s->n : (size_t)s->m * s->n;
        if (e > best) best = e;
    }
    return best;
}

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) DIE("out of memory allocating %zu bytes", bytes);
    return p;
}

int worker_main(int argc, char **argv) {
    if (argc != 9) DIE("--worker: expected 9 arguments, got %d (this flag is for gemm_libs itself)", argc);
    const char *group = argv[0], *env = argv[1];
    int rfd = atoi(argv[2]), wfd = atoi(argv[3]);
    Run run = {.model = argv[6], .batch = atoi(argv[7]), .seq = atoi(argv[8]), .threads = atoi(argv[4]),
               .measure_ref = atoi(argv[5])};
    char err[256];
    if (run_shapes(&run, err, sizeof err) != 0) DIE("worker: %s", err);
    const Run *r = &run;

    Hello hello;
    memset(&hello, 0, sizeof hello);
    group_init(group, r->threads, hello.info, sizeof hello.info);
    for (int v = 0; v < NVAR; v++)
        if (strcmp(variants[v].group, group) == 0) {
            hello.var[hello.nvar] = v;
            hello.ok[hello.nvar++] = small_check(r, v, env);
        }

    int any_bf16 = 0;
    for (int i = 0; i < hello.nvar; i++) any_bf16 |= variants[hello.var[i]].bf16;
    size_t na = max_of(r, 0), nb = max_of(r, 1), nc = max_of(r, 2), nbias = 0;
    for (int i = 0; i < NSHAPE; i++)
        if ((size_t)r->shape[i].n > nbias) nbias = (size_t)r->shape[i].n;
    float *a = xalloc(na * 4), *b = xalloc(nb * 4), *c = xalloc(nc * 4), *bias = xalloc(nbias * 4);
    uint16_t *abf = NULL, *bbf = NULL;
    fill(a, na, 1), fill(b, nb, 2), fill(bias, nbias, 3);
    memset(c, 0, nc * 4);
    if (any_bf16) {
        abf = xalloc(na * 2), bbf = xalloc(nb * 2);
        for (size_t i = 0; i < na; i++) abf[i] = f32_to_bf16(a[i]);
        for (size_t i = 0; i < nb; i++) bbf[i] = f32_to_bf16(b[i]);
    }
    write_all(wfd, &hello, sizeof hello);

    static Plan plans[NVAR][NSHAPE];
    static char impls[NVAR][NSHAPE][96];
    static int state[NVAR][NSHAPE]; /* 0: none, 1: planned, -1: failed */
    Req rq;
    while (read_all(rfd, &rq, sizeof rq) == 0 && rq.var >= 0) {
        Resp rs;
        memset(&rs, 0, sizeof rs);
        int v = rq.var, si = rq.shape;
        const Shape *s = &r->shape[si];
        Plan *p = &plans[v][si];
        if (state[v][si] == 0) {
            Gemm g = {s->m, s->n, s->k, s->ta, s->tb, a, b, bias, c, abf, bbf};
            state[v][si] = plan_new(p, v, &g, impls[v][si], sizeof impls[v][si], rs.msg, sizeof rs.msg) == 0 ? 1 : -1;
            if (state[v][si] == 1 && !r->measure_ref && strncmp(impls[v][si], "ref", 3) == 0) {
                snprintf(rs.msg, sizeof rs.msg, "reference (unoptimized) implementation; not timed (--measure-ref)");
                state[v][si] = -1;
            }
        }
        snprintf(rs.impl, sizeof rs.impl, "%s", impls[v][si]);
        if (state[v][si] == 1) {
            if (rq.check) memset(c, 0xff, (size_t)s->m * s->n * 4);
            double t0 = now_ms(), c0 = cpu_ms();
            plan_run(p);
            rs.ms = now_ms() - t0, rs.cpu_ms = cpu_ms() - c0;
            rs.ok = 1;
            if (rq.check) { /* 48 sampled entries against a double-precision dot product */
                uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(si * 131 + v);
                for (int t = 0; t < 48; t++) {
                    int i = (int)(rng_next(&seed) % (uint64_t)s->m), j = (int)(rng_next(&seed) % (uint64_t)s->n);
                    double e = entry_err(&p->g, &variants[v], i, j);
                    if (!(e <= rs.err)) rs.err = e;
                }
                rs.ok = rs.err <= TOL;
                if (!rs.ok) snprintf(rs.msg, sizeof rs.msg, "wrong result: normalized error %.3g > %g", rs.err, TOL);
            }
        }
        write_all(wfd, &rs, sizeof rs);
    }
    return 0;
}
