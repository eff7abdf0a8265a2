/* gpu_check_anchors.c: sinter beside PyTorch on the same GPU in the same run. tools/gpu_check
 * runs bench/torch_sdpa.py and bench/torch_gpt2.py (when python3 imports torch with CUDA) into
 * the anchors folder as JSON lines, one flat object a line (json.dumps: `"key": value`); this
 * file reads them and reports, per timed size, sinter's bf16 gpt2 step and its attention alone
 * as ratios sinter / torch (above 1: sinter slower). Convention: the anchors are measurements,
 * not checks: a step is a PASS when it has numbers and a SKIP saying why when it has none ("no
 * torch"); it never fails the check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"

enum { MAX_ROWS = 64 };

typedef struct {
    char mode[24];  /* gpt2: eager, compile, reduce-overhead; sdpa: flash, cudnn, efficient, math */
    char pass[12];  /* sdpa: fwd, fwd+bwd */
    char model[32]; /* gpt2: the script's --model (gpt2, tiny) */
    int B, H, T, D;
    int KV;         /* sdpa: k's and v's heads ("Hkv"; H when the line has none) */
    double ms;      /* the median; NAN with err set */
    char err[200];
} row;

typedef struct {
    row rows[MAX_ROWS];
    int n;
    char why[300]; /* why there are none (n == 0), else "" */
} table;

/* The value after `"key": ` in a flat JSON object line, or NULL. */
static const char *jfind(const char *line, const char *key) {
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

static double jnum(const char *line, const char *key) {
    const char *p = jfind(line, key);
    char *end;
    double v = p ? strtod(p, &end) : NAN;
    return p && end != p ? v : NAN;
}

static int jint(const char *line, const char *key) { /* -1 when missing */
    double v = jnum(line, key);
    return v >= 0 && v < 1e9 ? (int)v : -1;
}

static bool jstr(const char *line, const char *key, char *out, size_t len) {
    const char *p = jfind(line, key);
    size_t n = 0;
    if (!p || *p != '"') return false;
    for (p++; *p && *p != '"' && n + 1 < len; p++) {
        if (*p == '\\' && p[1]) p++; /* an escape: keep the character after it */
        out[n++] = *p;
    }
    out[n] = 0;
    return true;
}

static void read_table(const char *dir, const char *file, table *t) {
    char path[700], line[4096];
    memset(t, 0, sizeof *t);
    snprintf(path, sizeof path, "%s/torch_skip.txt", dir);
    FILE *f = fopen(path, "r");
    if (f) { /* tools/gpu_check's reason: "no torch: ..." */
        if (!fgets(t->why, sizeof t->why, f)) snprintf(t->why, sizeof t->why, "no torch");
        t->why[strcspn(t->why, "\n")] = 0;
        fclose(f);
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (!(f = fopen(path, "r"))) {
        snprintf(t->why, sizeof t->why, "no torch (no %.200s)", path);
        return;
    }
    char top_err[200] = "";
    while (fgets(line, sizeof line, f) && t->n < MAX_ROWS) {
        row *r = &t->rows[t->n];
        memset(r, 0, sizeof *r);
        bool named = jstr(line, "mode", r->mode, sizeof r->mode) || jstr(line, "backend", r->mode, sizeof r->mode);
        if (!named) { /* a line of the script's own: {"error": "no torch: ..."} */
            jstr(line, "error", top_err, sizeof top_err);
            continue;
        }
        jstr(line, "pass", r->pass, sizeof r->pass);
        jstr(line, "model", r->model, sizeof r->model);
        r->B = jint(line, "B");
        r->H = jint(line, "H");
        r->T = jint(line, "T");
        r->D = jint(line, "D");
        r->KV = jint(line, "Hkv") > 0 ? jint(line, "Hkv") : r->H;
        r->ms = jnum(line, "ms_median");
        if (!jstr(line, "error", r->err, sizeof r->err) && !(r->ms > 0))
            snprintf(r->err, sizeof r->err, "no ms_median");
        if (r->err[0]) r->ms = NAN;
        t->n++;
    }
    fclose(f);
    if (!t->n)
        snprintf(t->why, sizeof t->why, "%s", top_err[0] ? top_err : "no torch (its output has no measurement)");
}

/* A number of a step of this run by name, NAN when the step is missing, not a PASS or lacks it. */
static double step_num(const gc_run *r, const char *name, const char *key) {
    for (int i = 0; i < r->n_steps; i++) {
        const gc_step *s = &r->steps[i];
        if (strcmp(s->name, name) || s->status != GC_PASS) continue;
        for (int k = 0; k < s->n_nums; k++)
            if (!strcmp(s->keys[k], key)) return s->vals[k];
    }
    return NAN;
}

static const row *find(const table *t, const char *mode, const char *pass, const char *model, int B,
                       int H, int T, int D, int KV) {
    for (int i = 0; i < t->n; i++) {
        const row *x = &t->rows[i];
        if (!strcmp(x->mode, mode) && !strcmp(x->pass, pass) && !strcmp(x->model, model) && x->B == B && x->T == T &&
            (H < 0 || (x->H == H && x->D == D && x->KV == KV)))
            return x;
    }
    return NULL;
}

/* "eager 48.300 ms (sinter 1.29x)" or "eager failed: ..." or "eager not measured" */
static void cell(char *buf, size_t len, const char *what, const row *x, double sinter_ms) {
    if (!x) snprintf(buf, len, "%s not measured", what);
    else if (x->err[0]) snprintf(buf, len, "%s failed (%.80s)", what, x->err);
    else if (isfinite(sinter_ms)) snprintf(buf, len, "%s %.4g ms (sinter %.2fx)", what, x->ms, sinter_ms / x->ms);
    else snprintf(buf, len, "%s %.4g ms", what, x->ms);
}

static void gpt2_anchor(gc_run *r, const table *t, int B, int T) {
    static const char *modes[] = {"eager", "compile", "reduce-overhead"};
    char name[96], sname[128], msg[600], c[3][128];
    snprintf(name, sizeof name, "anchors: torch gpt2 B=%d T=%d bf16", B, T);
    gc_step *s = gc_begin(r, name);
    if (!t->n) {
        gc_end(r, s, GC_SKIP, "skipped: %s", t->why);
        return;
    }
    snprintf(sname, sizeof sname, "time: %s B=%d T=%d bf16", r->o.time_model, B, T);
    double me = step_num(r, sname, "step_ms_median"), best = NAN;
    int measured = 0;
    gc_num(s, "sinter_ms", me);
    for (int m = 0; m < 3; m++) {
        const row *x = find(t, modes[m], "", r->o.time_model, B, -1, T, -1, -1);
        cell(c[m], sizeof c[m], modes[m], x, me);
        char key[40];
        snprintf(key, sizeof key, "torch_%s_ms", modes[m]);
        gc_num(s, key, x && !x->err[0] ? x->ms : NAN);
        snprintf(key, sizeof key, "ratio_%s", modes[m]);
        gc_num(s, key, x && !x->err[0] ? me / x->ms : NAN);
        if (x && !x->err[0]) {
            measured++;
            if (m > 0 && !(x->ms >= best)) best = x->ms;
        }
    }
    gc_num(s, "ratio_best_compile", me / best);
    if (!measured) {
        gc_end(r, s, GC_SKIP, "torch measured no step of %s at this size: %s; %s; %s", r->o.time_model,
               c[0], c[1], c[2]);
        return;
    }
    snprintf(msg, sizeof msg, "sinter %.4g ms a step%s; torch %s; %s; %s", me,
             isfinite(me) ? "" : " (not measured: its step did not pass)", c[0], c[1], c[2]);
    if (isfinite(me) && isfinite(best))
        gc_end(r, s, GC_PASS, "%s; sinter / the faster torch.compile = %.2fx (issue 21: at most 0.85x)",
               msg, me / best);
    else
        gc_end(r, s, GC_PASS, "%s", msg);
    fprintf(r->details, "%s (ms a step; sinter / torch): sinter %.4g", name, me);
    for (int m = 0; m < 3; m++) {
        const row *x = find(t, modes[m], "", r->o.time_model, B, -1, T, -1, -1);
        if (x && !x->err[0]) fprintf(r->details, "; %s %.4g (%.2fx)", modes[m], x->ms, me / x->ms);
        else fprintf(r->details, "; %s %s", modes[m], x ? "failed" : "-");
    }
    fprintf(r->details, "\n");
}

static void sdpa_anchor(gc_run *r, const table *t, const int *sh) {
    static const char *backends[] = {"flash", "cudnn", "efficient"};
    static const char *passes[] = {"fwd", "fwd+bwd"};
    int B = sh[0], H = sh[1], T = sh[2], D = sh[3];
    char name[96], sname[96], c[3][2][128];
    gc_att_name(name, sizeof name, "anchors: torch SDPA", sh, " bf16");
    gc_step *s = gc_begin(r, name);
    if (!t->n) {
        gc_end(r, s, GC_SKIP, "skipped: %s", t->why);
        return;
    }
    gc_att_name(sname, sizeof sname, "time: attention", sh, " bf16");
    double me[2] = {step_num(r, sname, "fwd_ms"), step_num(r, sname, "fwd_bwd_ms")};
    int measured = 0;
    gc_num(s, "sinter_fwd_ms", me[0]);
    gc_num(s, "sinter_fwd_bwd_ms", me[1]);
    for (int b = 0; b < 3; b++)
        for (int p = 0; p < 2; p++) {
            const row *x = find(t, backends[b], passes[p], "", B, H, T, D, sh[4]);
            cell(c[b][p], sizeof c[b][p], passes[p], x, me[p]);
            char key[40];
            snprintf(key, sizeof key, "%s_%s_ms", backends[b], p ? "fwd_bwd" : "fwd");
            gc_num(s, key, x && !x->err[0] ? x->ms : NAN);
            snprintf(key, sizeof key, "ratio_%s_%s", backends[b], p ? "fwd_bwd" : "fwd");
            gc_num(s, key, x && !x->err[0] ? me[p] / x->ms : NAN);
            measured += x && !x->err[0];
        }
    char msg[1024];
    snprintf(msg, sizeof msg, "sinter fwd %.4g ms, fwd+bwd %.4g ms%s; flash: %s, %s; cudnn: %s, %s; "
             "efficient: %s, %s", me[0], me[1], isfinite(me[1]) ? "" : " (not measured)", c[0][0],
             c[0][1], c[1][0], c[1][1], c[2][0], c[2][1]);
    gc_end(r, s, measured ? GC_PASS : GC_SKIP, "%s%s", measured ? "" : "torch measured nothing here: ", msg);
    fprintf(r->details, "%s (ms a layer; sinter / torch):\n", name);
    fprintf(r->details, "  %-10s %10s %8s %10s %8s\n", "", "fwd", "ratio", "fwd+bwd", "ratio");
    fprintf(r->details, "  %-10s %10.4f %8s %10.4f %8s\n", "sinter", me[0], "", me[1], "");
    for (int b = 0; b < 3; b++) {
        fprintf(r->details, "  %-10s", backends[b]);
        for (int p = 0; p < 2; p++) {
            const row *x = find(t, backends[b], passes[p], "", B, H, T, D, sh[4]);
            if (x && !x->err[0] && isfinite(me[p])) fprintf(r->details, " %10.4f %7.2fx", x->ms, me[p] / x->ms);
            else if (x && !x->err[0]) fprintf(r->details, " %10.4f %8s", x->ms, "-");
            else fprintf(r->details, " %10s %8s", x ? "failed" : "-", "-");
        }
        fprintf(r->details, "\n");
    }
}

void gc_compare_anchors(gc_run *r) {
    static table gpt2, sdpa; /* large: off the stack */
    const char *dir = r->o.anchors_dir;
    if (dir) {
        read_table(dir, "torch_gpt2.jsonl", &gpt2);
        read_table(dir, "torch_sdpa.jsonl", &sdpa);
    } else {
        memset(&gpt2, 0, sizeof gpt2);
        snprintf(gpt2.why, sizeof gpt2.why, "no torch (no --anchors folder: tools/gpu_check runs "
                 "bench/torch_gpt2.py and bench/torch_sdpa.py when python3 imports torch with CUDA)");
        sdpa = gpt2;
    }
    for (int i = 0; i < r->o.n_time_sizes && !r->o.only_attention; i++) /* no step timed then */
        gpt2_anchor(r, &gpt2, r->o.time_sizes[i][0], r->o.time_sizes[i][1]);
    for (int i = 0; i < r->o.n_att_shapes; i++) sdpa_anchor(r, &sdpa, r->o.att_shapes[i]);
}
