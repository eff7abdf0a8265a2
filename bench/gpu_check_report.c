/* gpu_check_report.c: the GPU check's records: each step printed when it ends ("PASS name:
 * message") and kept with its numbers, then written as gpu_check_report.md (a table, then the
 * longer text the steps wrote to r->details) and gpu_check.json (every step and number). */
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "gpu_check.h"

static const char *status_name[] = {"PASS", "FAIL", "SKIP"};

gc_step *gc_begin(gc_run *r, const char *name) {
    static gc_step overflow; /* past GC_MAX_STEPS: printed, not kept */
    gc_step *s = r->n_steps < GC_MAX_STEPS ? &r->steps[r->n_steps++] : &overflow;
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

void gc_num(gc_step *s, const char *key, double v) {
    if (s->n_nums >= GC_MAX_NUMS) return;
    snprintf(s->keys[s->n_nums], sizeof s->keys[0], "%s", key);
    s->vals[s->n_nums++] = v;
}

void gc_end(gc_run *r, gc_step *s, gc_status st, const char *fmt, ...) {
    s->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    printf("%s %s: %s\n", status_name[st], s->name, s->msg);
    fflush(stdout);
    (void)r;
}

int gc_failures(const gc_run *r) {
    int n = 0;
    for (int i = 0; i < r->n_steps; i++) n += r->steps[i].status == GC_FAIL;
    return n;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

static bool write_json(gc_run *r, const char *path, const char *date) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "{\n  \"date\": ");
    json_str(f, date);
    fprintf(f, ",\n  \"device\": ");
    json_str(f, r->device_name);
    fprintf(f, ",\n  \"seed\": %llu,\n  \"failures\": %d,\n  \"bf16_tflops_measured\": ",
            (unsigned long long)r->o.seed, gc_failures(r));
    json_num(f, r->bf16_tflops);
    fprintf(f, ",\n  \"copy_tb_per_s_measured\": ");
    json_num(f, r->copy_tb_per_s);
    fprintf(f, ",\n  \"steps\": [\n");
    for (int i = 0; i < r->n_steps; i++) {
        const gc_step *s = &r->steps[i];
        fprintf(f, "    {\"name\": ");
        json_str(f, s->name);
        fprintf(f, ", \"status\": \"%s\", \"message\": ", status_name[s->status]);
        json_str(f, s->msg);
        for (int k = 0; k < s->n_nums; k++) {
            fprintf(f, ", ");
            json_str(f, s->keys[k]);
            fprintf(f, ": ");
            json_num(f, s->vals[k]);
        }
        fprintf(f, "}%s\n", i + 1 < r->n_steps ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f) == 0;
}

static bool write_md(gc_run *r, const char *path, const char *date) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "# GPU check, %s\n\n", date);
    fprintf(f, "Device: %s. Seed of the random inputs: %llu. Steps failed: %d of %d.\n\n",
            r->device_name, (unsigned long long)r->o.seed, gc_failures(r), r->n_steps);
    fprintf(f, "| step | result | numbers |\n| --- | --- | --- |\n");
    for (int i = 0; i < r->n_steps; i++) {
        const gc_step *s = &r->steps[i];
        fprintf(f, "| %s | %s | ", s->name, status_name[s->status]);
        for (const char *c = s->msg; *c; c++) fputs(*c == '|' ? "\\|" : (char[]){*c, 0}, f);
        fprintf(f, " |\n");
    }
    fflush(r->details);
    if (r->details_len) fprintf(f, "\n## Details\n\n```\n%.*s```\n", (int)r->details_len, r->details_buf);
    return fclose(f) == 0;
}

bool gc_write_reports(gc_run *r) {
    char date[64], md[1024], js[1024];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    snprintf(md, sizeof md, "%s/gpu_check_report.md", r->o.out_dir);
    snprintf(js, sizeof js, "%s/gpu_check.json", r->o.out_dir);
    bool ok = write_md(r, md, date) && write_json(r, js, date);
    if (!ok) fprintf(stderr, "gpu_check: cannot write %s and %s\n", md, js);
    else printf("gpu_check: wrote %s and %s\n", md, js);
    return ok;
}
