/* savefile.c: atomic replacement of a file (savefile.h): mkstemp next to the target, fsync,
 * rename, fsync of the directory. Convention: every failure path unlinks the temporary file. */
#include "savefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sn_status sn_savefile_open(sn_savefile *s, const char *path, const char *what, sn_err *e) {
    *s = (sn_savefile){.path = path, .what = what};
    size_t n = strlen(path) + 16;
    if (!(s->tmp = sn_malloc(n, "a file name", e))) return SN_ERR_OOM;
    snprintf(s->tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(s->tmp);
    if (fd < 0) {
        sn_status st = sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s: check that the "
                               "directory exists and is writable", what, path, strerror(errno));
        free(s->tmp);
        s->tmp = NULL;
        return st;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a checkpoint or plot is an ordinary file */
    if (!(s->f = fdopen(fd, "w+b"))) {
        close(fd);
        sn_savefile_abort(s);
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s", what, path, strerror(errno));
    }
    return SN_OK;
}

void sn_savefile_abort(sn_savefile *s) {
    if (s->f) fclose(s->f);
    if (s->tmp) unlink(s->tmp);
    free(s->tmp);
    s->f = NULL;
    s->tmp = NULL;
}

/* fsync of the directory holding path, so the rename itself survives a crash. */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) + (slash == path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on a directory */
        close(fd);
    }
}

sn_status sn_savefile_commit(sn_savefile *s, sn_err *e) {
    const char *step = "write";
    int err = 0;
    if (fflush(s->f) != 0 || ferror(s->f)) err = errno ? errno : EIO;
    else if (fsync(fileno(s->f)) != 0) err = errno, step = "fsync";
    int rc = fclose(s->f);
    s->f = NULL;
    if (!err && rc != 0) err = errno;
    if (!err && rename(s->tmp, s->path) != 0) err = errno, step = "rename";
    if (err) {
        sn_savefile_abort(s);
        return sn_fail(e, SN_ERR_IO, "cannot %s the %s %s: %s: check free disk space and "
                       "permissions; the previous file, if any, is unchanged", step, s->what,
                       s->path, strerror(err));
    }
    free(s->tmp);
    s->tmp = NULL;
    sync_dir(s->path);
    return SN_OK;
}
