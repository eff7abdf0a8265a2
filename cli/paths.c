/* paths.c: the files a command names, checked before any work: no output may be the same file
 * as another option's path (an input or another output), and an existing output file is replaced
 * only when it is of the output's own kind (or --overwrite is given).
 * Convention: files are compared by identity (device and inode; the resolved name for a file that
 * does not exist yet), so "a", "./a", "dir/../a" and a link to a are all the same file. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* The canonical name of path: realpath of the file, else of its folder with the last component
 * appended, else path itself (a folder that does not exist: the outputs' own check reports it). */
static void canonical(const char *path, char out[PATH_MAX]) {
    if (realpath(path, out)) return;
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    char real[PATH_MAX];
    if (!realpath(dir, real) || strlen(real) + strlen(slash ? slash : path) + 2 > PATH_MAX) {
        snprintf(out, PATH_MAX, "%s", path);
        return;
    }
    snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", slash ? slash + 1 : path);
}

bool cli_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea != eb) return false;
    char ca[PATH_MAX], cb[PATH_MAX];
    canonical(a, ca);
    canonical(b, cb);
    return !strcmp(ca, cb);
}

/* Says that a and b are the same file (b's match of its pattern, when match) and returns 2. */
static int same_file_refused(const char *cmd, const cli_path *a, const cli_path *b, const char *match) {
    const cli_path *out = a->output ? a : b, *other = out == a ? b : a;
    fprintf(stderr, "sinter: %s: %s %s and %s %s", cmd, a->opt, a->path, b->opt, b->path);
    if (match) fprintf(stderr, " (its match %s)", match);
    fprintf(stderr, " are the same file: ");
    if (other->output)
        fprintf(stderr, "one output would overwrite the other: give each its own path\n");
    else
        fprintf(stderr, "the %s would replace the %s read from it: give %s another "
                "path\n", out->what, other->what, out->opt);
    fprintf(stderr, "(run `sinter help` for usage)\n");
    return 2;
}

int cli_check_paths(const char *cmd, const cli_path *p, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const cli_path *a = &p[i], *b = &p[j];
            if (!a->path || !b->path || (!a->output && !b->output)) continue;
            if ((a->may_equal && !strcmp(a->may_equal, b->opt)) ||
                (b->may_equal && !strcmp(b->may_equal, a->opt)) || !cli_same_file(a->path, b->path))
                continue;
            return same_file_refused(cmd, a, b, NULL);
        }
    return 0;
}

int cli_check_pattern(const char *cmd, const cli_path *in, const cli_path *p, int n) {
    struct stat st;
    if (!in->path || !strpbrk(in->path, "*?[") || stat(in->path, &st) == 0) return 0;
    glob_t g;
    int rc = 0;
    if (glob(in->path, 0, NULL, &g) != 0) return 0; /* no match: the reader says so */
    for (size_t i = 0; i < g.gl_pathc && !rc; i++)
        for (int j = 0; j < n && !rc; j++)
            if (p[j].path && p[j].output && cli_same_file(g.gl_pathv[i], p[j].path))
                rc = same_file_refused(cmd, &p[j], in, g.gl_pathv[i]);
    globfree(&g);
    return rc;
}

sn_status cli_check_kind(const char *opt, const char *path, const char *what, const void *magic,
                         size_t len, bool overwrite, sn_err *e) {
    if (overwrite) return SN_OK;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return SN_OK; /* none yet (or unreadable: the write check reports it) */
    struct stat st;
    unsigned char head[16] = {0};
    ssize_t got = 0;
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (regular && st.st_size > 0) got = read(fd, head, len < sizeof head ? len : sizeof head);
    close(fd);
    if (!regular || st.st_size == 0) return SN_OK; /* an empty file holds nothing to lose */
    if (got == (ssize_t)len && !memcmp(head, magic, len)) return SN_OK;
    return sn_fail(e, SN_ERR_INVALID, "%s %s: the file exists and is not a %s (it does not start "
                   "as one): it is not replaced; give another path, remove the file, or add "
                   "--overwrite", opt, path, what);
}
