/* train_out.c: the output of `sinter train` (train_cli.h): the live progress line, the CSV
 * log or JSON lines (cut back to the checkpoint's step on resume), and printed samples.
 * Convention: only lines on a terminal are redrawn with \r; files and pipes get whole lines. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SN_HAVE_JSONC
#include <json-c/json.h>
#endif

#include "support/clock.h"
#include "support/savefile.h"
#include "train_cli.h"

void progress_init(progress *p) { *p = (progress){.tty = isatty(STDOUT_FILENO) == 1}; }

void progress_show(progress *p, long step, long steps, double loss, float lr, double grad_norm,
                   double tok_s, double eta_s, double val, bool keep) {
    double t = sn_clock_s();
    if (p->tty ? !keep && t - p->last_s < 0.1 : !keep && step % 10 != 1) return;
    p->last_s = t;
    if (p->tty) printf("\r");
    printf("step %5ld/%ld | loss %.4f | lr %.2e | grad norm %6.3f | %7.0f tok/s | ETA %.0fs",
           step, steps, loss, lr, grad_norm, tok_s, eta_s);
    if (val >= 0) printf(" | val loss %.4f", val);
    if (p->tty && !keep) {
        printf("\033[K"); /* clear what a longer line left */
        p->open = true;
    } else {
        printf(p->tty ? "\033[K\n" : "\n");
        p->open = false;
    }
    fflush(stdout);
}

void progress_break(progress *p) {
    if (p->open) printf("\n");
    p->open = false;
}

/* The step of a log line: CSV's first field, or a JSON line's "step" (-1: neither, or a
 * header). */
static long line_step(const char *line, size_t len, bool jsonl) {
    char *end;
    if (!jsonl) {
        long step = strtol(line, &end, 10);
        return end != line && *end == ',' ? step : -1;
    }
    static const char key[] = "{\"step\":"; /* json-c writes the keys in the order added */
    if (len < sizeof key || strncmp(line, key, sizeof key - 1)) return -1;
    long step = strtol(line + sizeof key - 1, &end, 10);
    return end != line + sizeof key - 1 && *end == ',' ? step : -1;
}

bool train_log_is_jsonl(const char *path) {
    size_t n = strlen(path);
    return n >= 6 && !strcmp(path + n - 6, ".jsonl");
}

sn_status train_log_open(train_log *l, const char *path, long resume_step, sn_err *e) {
    static const char header[] = "step,loss,val_loss,lr,grad_norm,tokens_per_s\n";
    *l = (train_log){0};
    l->jsonl = train_log_is_jsonl(path);
#ifndef SN_HAVE_JSONC
    if (l->jsonl)
        return sn_fail(e, SN_ERR_UNSUPPORTED, "--log %s: JSON lines need json-c, which this build "
                       "lacks (apt-get install libjson-c-dev, then build again), or name a .csv "
                       "log", path);
#endif
    char *old = NULL;
    size_t len = 0;
    if (resume_step > 0 && access(path, F_OK) == 0) {
        sn_status s = sn_file_read(path, "check the --log path", &old, &len, e);
        if (s) return s;
    }
    sn_status s = sn_savefile_open(&l->f, path, "log", e);
    if (s) {
        free(old);
        return s;
    }
    if (!old && !l->jsonl) fputs(header, l->f.f);
    for (char *line = old; old && line < old + len;) { /* the header and rows up to resume_step */
        char *nl = memchr(line, '\n', (size_t)(old + len - line)), *next = nl ? nl + 1 : old + len;
        long step = line_step(line, (size_t)(next - line), l->jsonl);
        bool keep = line == old && !l->jsonl ? !strncmp(line, "step,", 5)
                                             : step >= 0 && step <= resume_step;
        if (keep) fwrite(line, 1, (size_t)(next - line), l->f.f);
        if (keep && !nl) fputc('\n', l->f.f);
        line = next;
    }
    free(old);
    l->open = true;
    return SN_OK;
}

sn_status train_log_row(train_log *l, long step, double loss, double val, float lr,
                        double grad_norm, double tok_s, sn_err *e) {
    FILE *f = l->f.f;
    if (l->jsonl) {
#ifdef SN_HAVE_JSONC
        json_object *o = json_object_new_object();
        if (!o) return sn_fail_oom(e, 256, "a log row");
        json_object_object_add(o, "step", json_object_new_int64(step));
        json_object_object_add(o, "loss", json_object_new_double(loss));
        json_object_object_add(o, "val_loss", val >= 0 ? json_object_new_double(val) : NULL);
        json_object_object_add(o, "lr", json_object_new_double(lr));
        json_object_object_add(o, "grad_norm", isfinite(grad_norm) ? json_object_new_double(grad_norm) : NULL);
        json_object_object_add(o, "tokens_per_s", json_object_new_double(tok_s));
        fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
#endif
    } else {
        fprintf(f, "%ld,%.6f,", step, loss);
        if (val >= 0) fprintf(f, "%.6f", val);
        fprintf(f, ",%.6g,%.6f,%.1f\n", lr, grad_norm, tok_s);
    }
    if (fflush(f) != 0 || ferror(f)) {
        int err = errno ? errno : EIO;
        return sn_fail(e, SN_ERR_IO, "cannot write the log %s: %s: free disk space (or give "
                       "another --log); the checkpoint, if any, is unaffected", l->f.path,
                       strerror(err));
    }
    l->rows++;
    return SN_OK;
}

sn_status train_log_sync(train_log *l, sn_err *e) {
    if (!l->open) return SN_OK;
    sn_status s = sn_savefile_sync(&l->f, e);
    if (s) l->open = false; /* sn_savefile_sync closed it */
    return s;
}

const char *train_log_close(train_log *l, bool failed) {
    const char *kept = NULL;
    /* never published: keep the rows aside in PATH.failed, or PATH.failed.N when that file
     * exists (an existing file is never replaced) */
    for (int n = 1; l->open && l->f.tmp && failed && l->rows && !kept && n < 100; n++) {
        if (n == 1) snprintf(l->failed_path, sizeof l->failed_path, "%s.failed", l->f.path);
        else snprintf(l->failed_path, sizeof l->failed_path, "%s.failed.%d", l->f.path, n);
        int err = sn_savefile_keep_as(&l->f, l->failed_path);
        if (!err) kept = l->failed_path;
        else if (err != EEXIST) break;
    }
    if (l->open) sn_savefile_abort(&l->f); /* removes the file only if never published */
    l->open = false;
    return kept;
}

static void put_readable(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f)) fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
}

void train_print_sample(FILE *f, const char *text, size_t len, const char *heading) {
    fprintf(f, "---- %s ----\n", heading);
    put_readable(f, text, len);
    fprintf(f, "\n----\n");
    fflush(f);
}
