/* train_out.c: the output of `sinter train` (train_cli.h): the live progress line, the CSV
 * log (cut back to the checkpoint's step on resume), and printed samples.
 * Convention: only lines on a terminal are redrawn with \r; files and pipes get whole lines. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

sn_status train_log_open(const char *path, long resume_step, FILE **out, sn_err *e) {
    static const char header[] = "step,loss,val_loss,lr,grad_norm,tokens_per_s\n";
    char *old = NULL;
    size_t len = 0;
    if (resume_step > 0 && access(path, F_OK) == 0) {
        sn_status s = sn_file_read(path, "check the --log path", &old, &len, e);
        if (s) return s;
    }
    if (old) { /* keep the header and the rows up to resume_step, atomically */
        sn_savefile f;
        sn_status s = sn_savefile_open(&f, path, "log", e);
        if (s) {
            free(old);
            return s;
        }
        for (char *line = old, *next; line < old + len; line = next) {
            char *nl = memchr(line, '\n', (size_t)(old + len - line));
            next = nl ? nl + 1 : old + len;
            char *end;
            long step = strtol(line, &end, 10);
            bool keep = line == old ? !strncmp(line, "step,", 5) : end != line && *end == ',' && step <= resume_step;
            if (keep) fwrite(line, 1, (size_t)(next - line), f.f);
            if (keep && !nl) fputc('\n', f.f);
        }
        free(old);
        if ((s = sn_savefile_commit(&f, e))) return s;
    }
    FILE *f = fopen(path, old ? "a" : "w");
    if (!f)
        return sn_fail(e, SN_ERR_IO, "cannot write the log %s: check that the directory exists",
                       path);
    if (!old) fputs(header, f);
    *out = f;
    return SN_OK;
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
