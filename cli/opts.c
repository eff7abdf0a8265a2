/* opts.c: the table-driven option parser and help of every `sinter` command (opts.h), on
 * getopt_long. Convention: the table is the only description of an option: the parse, the
 * range check, its message and the help all read it. */
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"

#define HELP_COL 24  /* where an option's help starts */
#define HELP_WIDTH 100

enum { LONG_ONLY = 256 }; /* getopt_long's val of option i without a letter: LONG_ONLY + i */

int cli_usage_error(const cli_command *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sinter: %s%s", c ? c->name : "", c ? ": " : "");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (c) fprintf(stderr, "\n(run `sinter help %s` for its options)\n", c->name);
    else fprintf(stderr, "\n(run `sinter help` for usage)\n");
    return 2;
}

/* A number as a person writes it: 10, 0.5, 1e6 (not %g's 1e+06). */
static const char *num(double v, char *buf, size_t len) {
    char raw[40], *o = buf;
    snprintf(raw, sizeof raw, "%g", v);
    for (const char *p = raw; *p && (size_t)(o - buf) + 1 < len; p++) {
        *o++ = *p;
        if (*p == 'e') { /* e+06 -> e6, e-06 -> e-6 */
            if (p[1] == '+') p++;
            else if (p[1] == '-') *o++ = *++p;
            while (p[1] == '0' && p[2]) p++;
        }
    }
    *o = 0;
    return buf;
}

/* "a, b, c" as "a, b or c" into buf. */
static const char *or_list(const char *list, char *buf, size_t len) {
    const char *last = strrchr(list, ',');
    if (!last) snprintf(buf, len, "%s", list);
    else snprintf(buf, len, "%.*s or %s", (int)(last - list), list, last + 2);
    return buf;
}

bool cli_bytes(const char *s, long long *out) {
    static const struct { const char *suffix; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KiB", 1024.0}, {"M", 1048576.0}, {"MiB", 1048576.0},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"T", 1099511627776.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].suffix) && v * units[i].scale < 9e18) {
            *out = (long long)(v * units[i].scale);
            return *out > 0;
        }
    return false;
}

bool cli_choice_ok(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; n && (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

static const char *choices(const cli_opt *o) { return o->choices_fn ? o->choices_fn() : o->choices; }

/* The values o takes, as its help and its error say them: "1 to 65536", "> 0 and < 10". */
static const char *range(const cli_opt *o, char *buf, size_t len) {
    char a[40], b[40];
    switch (o->type) {
    case CLI_INT: snprintf(buf, len, "%lld to %lld", (long long)o->lo, (long long)o->hi); break;
    case CLI_REAL:
        snprintf(buf, len, "%s %s and %s %s", o->lo_open ? ">" : ">=", num(o->lo, a, sizeof a),
                 o->hi_closed ? "<=" : "<", num(o->hi, b, sizeof b));
        break;
    case CLI_BYTES:
        snprintf(buf, len, "a size such as 6GiB or 500MiB%s", o->auto_word ? ", or auto" : "");
        break;
    case CLI_CHOICE: or_list(choices(o), buf, len); break;
    default: *buf = 0;
    }
    return buf;
}

/* Checks and stores o's value v (NULL for a flag) in out; a usage error is printed (2). */
static int store(const cli_command *c, const cli_opt *o, const char *v, void *out) {
    char *at = (char *)out + o->offset, r[512];
    char *end;
    switch (o->type) {
    case CLI_FLAG: *(bool *)at = true; return 0;
    case CLI_STR: *(const char **)at = v; return 0;
    case CLI_INT: {
        long x = strtol(v, &end, 10);
        if (*v && !*end && x >= (long)o->lo && x <= (long)o->hi) {
            *(long *)at = x;
            return 0;
        }
        return cli_usage_error(c, "--%s wants a whole number from %s, not '%s'", o->name,
                               range(o, r, sizeof r), v);
    }
    case CLI_REAL: {
        double x = strtod(v, &end);
        if (*v && !*end && (o->lo_open ? x > o->lo : x >= o->lo) &&
            (o->hi_closed ? x <= o->hi : x < o->hi)) {
            *(double *)at = x;
            return 0;
        }
        return cli_usage_error(c, "--%s wants a number %s, not '%s'", o->name, range(o, r, sizeof r), v);
    }
    case CLI_BYTES:
        if (o->auto_word && !strcmp(v, "auto")) {
            *(long long *)at = -1;
            return 0;
        }
        if (cli_bytes(v, (long long *)at)) return 0;
        return cli_usage_error(c, "--%s wants a size such as 6GiB or 500MiB%s, not '%s'", o->name,
                               o->auto_word ? ", or auto" : "", v);
    case CLI_CHOICE:
        if (cli_choice_ok(choices(o), v)) {
            *(const char **)at = v;
            return 0;
        }
        return cli_usage_error(c, "--%s is %s, not '%s'", o->name, range(o, r, sizeof r), v);
    }
    return 0;
}

/* What getopt_long refused in argv[at] ("--bogus=1", "-x"): said as unknown, ambiguous (the
 * options it abbreviates), or a flag given a value. */
static int refused(const cli_command *c, const char *arg, int optopt_) {
    if (arg[0] == '-' && arg[1] == '-') {
        const char *eq = strchr(arg, '=');
        size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        char matches[512] = "";
        int hits = 0, exact = -1;
        for (int i = 0; i < c->n_opts; i++)
            if (!strncmp(c->opts[i].name, arg + 2, n)) {
                if (strlen(c->opts[i].name) == n) exact = i;
                size_t at = strlen(matches);
                snprintf(matches + at, sizeof matches - at, "%s--%s", hits++ ? ", " : "", c->opts[i].name);
            }
        if (exact >= 0 || (hits == 1 && optopt_))
            return cli_usage_error(c, "option '--%.*s' takes no value", (int)n, arg + 2);
        if (hits > 1)
            return cli_usage_error(c, "option '--%.*s' is ambiguous: %s", (int)n, arg + 2, matches);
        return cli_usage_error(c, "unknown option '--%.*s'", (int)n, arg + 2);
    }
    return cli_usage_error(c, "unknown option '-%c'", optopt_ > 0 && optopt_ < 256 ? optopt_ : '?');
}

int cli_parse(const cli_command *c, int argc, char **argv, void *out) {
    struct option lo[c->n_opts + 2];
    char so[3 * c->n_opts + 4], *s = so;
    *s++ = ':'; /* a missing value is ':', not '?' */
    *s++ = 'h';
    for (int i = 0; i < c->n_opts; i++) {
        const cli_opt *o = &c->opts[i];
        int has = o->type == CLI_FLAG ? no_argument : required_argument;
        lo[i] = (struct option){o->name, has, NULL, o->letter ? o->letter : LONG_ONLY + i};
        if (o->letter) {
            *s++ = o->letter;
            if (has) *s++ = ':';
        }
    }
    *s = 0;
    lo[c->n_opts] = (struct option){"help", no_argument, NULL, 'h'};
    lo[c->n_opts + 1] = (struct option){0};
    opterr = 0;
    optind = 0; /* glibc: start afresh */
    for (;;) {
        int k = getopt_long(argc, argv, so, lo, NULL);
        if (k == -1) break;
        if (k == 'h') {
            cli_help(c, stdout);
            return 0;
        }
        if (k == '?') return refused(c, argv[optind - 1], optopt);
        const cli_opt *o = NULL;
        int want = k == ':' ? optopt : k;
        for (int i = 0; i < c->n_opts && !o; i++)
            if (want == (c->opts[i].letter ? c->opts[i].letter : LONG_ONLY + i)) o = &c->opts[i];
        if (!o) return cli_usage_error(c, "unknown option '%s'", argv[optind - 1]);
        if (k == ':')
            return cli_usage_error(c, "option '--%s' needs a value (%s)", o->name, o->arg);
        int rc = store(c, o, optarg, out);
        if (rc) return rc;
    }
    /* a command whose synopsis starts with an operand (export, generate: CHECKPOINT) took it
       before the options */
    const char *operand = c->synopsis && c->synopsis[0] >= 'A' && c->synopsis[0] <= 'Z' ? c->synopsis : NULL;
    if (optind < argc)
        return cli_usage_error(c, "unexpected argument '%s': `sinter %s` takes %.*s%soptions only "
                               "(--name value or --name=value)", argv[optind], c->name,
                               operand ? (int)strcspn(operand, " ") : 0, operand ? operand : "",
                               operand ? " first, then " : "");
    return -1;
}

/* Prints words (space-separated) after column col, wrapping at HELP_WIDTH to HELP_COL. */
static void wrap(FILE *f, const char *words, int col) {
    for (const char *w = words; *w;) {
        const char *end = strchr(w, ' ');
        int n = end ? (int)(end - w) : (int)strlen(w);
        if (col + 1 + n > HELP_WIDTH && col > HELP_COL) {
            fprintf(f, "\n%*s", HELP_COL, "");
            col = HELP_COL;
        } else if (col > HELP_COL) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", n, w);
        col += n;
        w += n;
        while (*w == ' ') w++;
    }
}

void cli_help(const cli_command *c, FILE *f) {
    fprintf(f, "usage: sinter %s%s%s\n", c->name, *c->synopsis ? " " : "", c->synopsis);
    if (c->summary) fprintf(f, "%s\n", c->summary);
    fprintf(f, "options:\n");
    for (int i = 0; i < c->n_opts; i++) {
        const cli_opt *o = &c->opts[i];
        char head[96], r[512];
        int n = snprintf(head, sizeof head, "  %c%c%s--%s%s%s", o->letter ? '-' : ' ',
                         o->letter ? o->letter : ' ', o->letter ? ", " : "  ", o->name,
                         o->type == CLI_FLAG ? "" : " ", o->type == CLI_FLAG ? "" : o->arg);
        fputs(head, f);
        if (n >= HELP_COL - 1) fprintf(f, "\n%*s", HELP_COL, "");
        else fprintf(f, "%*s", HELP_COL - n, "");
        int col = HELP_COL;
        for (const char *p = o->help; *p; p++) {
            if (*p == '\n') {
                fprintf(f, "\n%*s", HELP_COL, "");
                col = HELP_COL;
            } else {
                fputc(*p, f);
                col++;
            }
        }
        if (o->type != CLI_FLAG && o->type != CLI_STR && o->type != CLI_BYTES) {
            const char *what = o->type == CLI_CHOICE ? "one of " : o->type == CLI_INT ? "from " : "";
            snprintf(r, sizeof r, "(%s", what);
            range(o, r + strlen(r), sizeof r - strlen(r) - 1);
            strcat(r, ")");
            wrap(f, r, col);
        }
        fputc('\n', f);
    }
    fprintf(f, "  -h, --help            this help\n");
    if (c->notes) fputs(c->notes, f);
}
