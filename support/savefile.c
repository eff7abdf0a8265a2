/* savefile.c: atomic replacement of a file (savefile.h): mkstemp next to the target (locked with
 * flock while open, with the old file's mode), fsync, rename, fsync of the directory. Convention: every failure path unlinks the temporary file, and
 * every temporary file is in the process-wide list `open_tmp` from creation to rename or unlink. */
#include "savefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The temporary files open now, for sn_savefile_unlink_all: the one piece of process-wide state
 * here, because a signal handler has no other way to find them. A full list only means a file
 * the handler cannot remove.
 *
 * A signal handler may run on any thread (a process-directed signal goes to any thread that does
 * not block it: the CPU device's pool threads too), at any moment. So a file's creation and its
 * entry in the list, and its rename or unlink and the entry's removal, are each one critical
 * section: the calling thread blocks every signal (no handler can interrupt it halfway) and holds
 * `list_lock`, a spin lock the handler takes too (it waits for another thread's short section to
 * end, then keeps the lock until _exit, so no file is created after it looked). */
enum { MAX_OPEN_TMP = 16 };
static char *open_tmp[MAX_OPEN_TMP];
static int list_lock;
/* Set by the handler before it waits for the lock: the spin lock is not fair, and a thread that
 * ends one section and starts the next (creation, then the rename a few milliseconds later) could
 * otherwise take it again first and publish a file the handler was stopping. */
static int stopping;

/* Spins until the lock is ours; nanosleep: async-signal-safe, for the handler. */
static void take_lock(void) {
    while (__atomic_exchange_n(&list_lock, 1, __ATOMIC_ACQUIRE))
        nanosleep(&(struct timespec){0, 100000}, NULL);
}

/* A section starts only while no handler is stopping the process: once one is, this thread
 * waits (its signals blocked) for the _exit that follows. */
static void lock_list(sigset_t *old) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);
    for (;;) {
        take_lock();
        if (!__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) return;
        __atomic_store_n(&list_lock, 0, __ATOMIC_RELEASE);
        nanosleep(&(struct timespec){1, 0}, NULL);
    }
}

static void unlock_list(const sigset_t *old) {
    __atomic_store_n(&list_lock, 0, __ATOMIC_RELEASE);
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static void list_add(char *tmp) {
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (!open_tmp[i]) {
            open_tmp[i] = tmp;
            return;
        }
}

static void list_remove(char *tmp) {
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (open_tmp[i] == tmp) {
            open_tmp[i] = NULL;
            return;
        }
}

/* Tests only: SN_SAVEFILE_STOP_DELAY_MS=N holds the handler N ms after it said it is stopping,
 * as a thread the scheduler leaves waiting would be (read by sn_savefile_open, not the handler). */
static long stop_delay_ms;

void sn_savefile_unlink_all(void) {
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    long ms = __atomic_load_n(&stop_delay_ms, __ATOMIC_RELAXED);
    if (ms > 0) nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000}, NULL);
    take_lock();
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (open_tmp[i]) unlink(open_tmp[i]);
    /* the lock stays taken: the caller exits now */
}

static void test_delay(const char *var) {
    const char *v = getenv(var);
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms > 0) nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000}, NULL);
}

/* The mode a new file gets: 0666 less the umask, read from /proc (umask(2) would set it, and
 * another thread may be creating a file at that moment). */
static mode_t new_file_mode(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned mask = 022;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &mask) == 1) break;
    if (f) fclose(f);
    return (mode_t)(0666 & ~mask);
}

/* The temporary files of target are "<dir>/<base>.tmp.XXXXXX", with base cut so that the name
 * fits NAME_MAX (a 250-byte file name is valid; its temporary's must be too). Writes the
 * "<dir>/<base>.tmp." prefix into out (n bytes: strlen(target) + TMP_EXTRA). */
enum { TMP_SUFFIX = 11, TMP_EXTRA = 16 }; /* ".tmp.XXXXXX" */
static void tmp_prefix(const char *target, char *out, size_t n) {
    const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
    size_t dir = (size_t)(base - target), len = strlen(base);
    if (len > NAME_MAX - TMP_SUFFIX) len = NAME_MAX - TMP_SUFFIX;
    snprintf(out, n, "%.*s%.*s.tmp.", (int)dir, target, (int)len, base);
}

/* The file a symbolic link at path names (malloc'ed): resolved whole when it exists, else the
 * link's text (relative to the link's folder) for a file to be created; NULL with errno. */
static char *link_target(const char *path) {
    char *real = realpath(path, NULL);
    if (real || errno != ENOENT) return real;
    char to[PATH_MAX];
    ssize_t n = readlink(path, to, sizeof to - 1);
    if (n < 0) return NULL;
    to[n] = '\0';
    const char *slash = strrchr(path, '/');
    int dir = to[0] == '/' || !slash ? 0 : (int)(slash - path) + 1;
    size_t len = (size_t)dir + (size_t)n + 1;
    char *out = malloc(len);
    if (out) snprintf(out, len, "%.*s%s", dir, path, to);
    return out;
}

sn_status sn_savefile_open(sn_savefile *s, const char *path, const char *what, sn_err *e) {
    *s = (sn_savefile){.path = path, .what = what};
    /* A symbolic link is written through: its target is replaced, the link stays a link. */
    struct stat st;
    bool link = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
    if (link && !(s->target = link_target(path)))
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: it is a symbolic link that cannot "
                       "be followed (%s): fix or remove the link", what, path, strerror(errno));
    if (!link && !(s->target = strdup(path))) return sn_fail_oom(e, strlen(path), "a file name");
    size_t n = strlen(s->target) + TMP_EXTRA;
    if (!(s->tmp = sn_malloc(n, "a file name", e))) {
        free(s->target);
        s->target = NULL;
        return SN_ERR_OOM;
    }
    tmp_prefix(s->target, s->tmp, n);
    strcat(s->tmp, "XXXXXX");
    /* the old file's mode is kept (a private 0600 log stays private); a new file's follows the
     * umask, as open(2)'s would */
    mode_t mode = stat(s->target, &st) == 0 && S_ISREG(st.st_mode) ? st.st_mode & 07777 : new_file_mode();
    const char *stop_delay = getenv("SN_SAVEFILE_STOP_DELAY_MS");
    __atomic_store_n(&stop_delay_ms, stop_delay ? strtol(stop_delay, NULL, 10) : 0, __ATOMIC_RELAXED);
    sigset_t old;
    lock_list(&old);
    int fd = mkstemp(s->tmp);
    int err = errno;
    if (fd >= 0) {
        test_delay("SN_SAVEFILE_OPEN_DELAY_MS");
        list_add(s->tmp);
    }
    unlock_list(&old);
    if (fd < 0) {
        sn_status r = sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s: check that the "
                              "directory exists and is writable", what, path, strerror(err));
        free(s->tmp);
        free(s->target);
        s->tmp = s->target = NULL;
        return r;
    }
    /* locked while this process may write it: a later run removes only temporaries nobody holds
     * (sn_savefile_remove_stale) */
    flock(fd, LOCK_EX | LOCK_NB);
    fchmod(fd, mode);
    if (!(s->f = fdopen(fd, "w+b"))) {
        err = errno;
        close(fd);
        sn_savefile_abort(s);
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: %s", what, path, strerror(err));
    }
    return SN_OK;
}

int sn_savefile_remove_stale(const char *path, time_t before) {
    struct stat st;
    char *target = lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? link_target(path) : strdup(path);
    if (!target) return 0;
    size_t n = strlen(target) + TMP_EXTRA;
    char *prefix = malloc(n), *dir = strdup(target);
    int removed = 0;
    if (prefix && dir) {
        tmp_prefix(target, prefix, n);
        char *slash = strrchr(dir, '/');
        const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
        if (slash) slash[slash == dir] = '\0';
        DIR *d = opendir(slash ? dir : ".");
        size_t blen = strlen(base);
        for (struct dirent *f; d && (f = readdir(d));) {
            const char *x = f->d_name + blen;
            if (strncmp(f->d_name, base, blen) || strlen(x) != 6) continue;
            char name[PATH_MAX];
            snprintf(name, sizeof name, "%s/%s", slash ? dir : ".", f->d_name);
            int fd = open(name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
            if (fd < 0) continue;
            /* a regular file older than this run that no process holds locked */
            if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime < before &&
                flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(name) == 0)
                removed++;
            close(fd);
        }
        if (d) closedir(d);
    }
    free(prefix);
    free(dir);
    free(target);
    return removed;
}

void sn_savefile_abort(sn_savefile *s) {
    if (s->f) fclose(s->f);
    if (s->tmp) {
        sigset_t old;
        lock_list(&old);
        unlink(s->tmp);
        list_remove(s->tmp);
        unlock_list(&old);
    }
    free(s->tmp);
    free(s->target);
    s->f = NULL;
    s->tmp = s->target = NULL;
}

int sn_savefile_keep_as(sn_savefile *s, const char *other) {
    if (!s->tmp) return EINVAL;
    if (s->f && fflush(s->f) != 0) return errno ? errno : EIO;
    sigset_t old;
    lock_list(&old);
    /* link(2) refuses an existing name, where rename(2) would replace it */
    int rc = link(s->tmp, other), err = errno;
    if (rc == 0) {
        unlink(s->tmp);
        list_remove(s->tmp);
    }
    unlock_list(&old);
    if (rc != 0) return err;
    free(s->tmp);
    s->tmp = NULL;
    return 0;
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

/* Flush and fsync; rename over path unless already done. 0, or errno with *step naming what failed. */
static int publish(sn_savefile *s, const char **step) {
    *step = "write";
    if (fflush(s->f) != 0 || ferror(s->f)) return errno ? errno : EIO;
    *step = "fsync";
    if (fsync(fileno(s->f)) != 0) return errno;
    if (!s->tmp) return 0;
    test_delay("SN_SAVEFILE_DELAY_MS");
    *step = "rename";
    sigset_t old;
    lock_list(&old);
    int rc = rename(s->tmp, s->target), err = errno;
    if (rc == 0) list_remove(s->tmp);
    unlock_list(&old);
    if (rc != 0) return err;
    free(s->tmp);
    s->tmp = NULL;
    sync_dir(s->target);
    return 0;
}

static sn_status failed(sn_savefile *s, const char *step, int err, sn_err *e) {
    bool published = !s->tmp;
    sn_savefile_abort(s);
    return sn_fail(e, SN_ERR_IO, "cannot %s the %s %s: %s: check free disk space and "
                   "permissions%s", step, s->what, s->path, strerror(err),
                   published ? "" : "; the previous file, if any, is unchanged");
}

sn_status sn_savefile_sync(sn_savefile *s, sn_err *e) {
    const char *step;
    int err = publish(s, &step);
    return err ? failed(s, step, err, e) : SN_OK;
}

sn_status sn_savefile_commit(sn_savefile *s, sn_err *e) {
    const char *step;
    int err = publish(s, &step);
    if (err) return failed(s, step, err, e);
    int rc = fclose(s->f);
    s->f = NULL;
    if (rc != 0) return failed(s, "close", errno, e);
    free(s->target);
    s->target = NULL;
    return SN_OK;
}

/* Flush and fsync without the rename. 0 or errno, *step naming what failed. */
static int make_durable(sn_savefile *s, const char **step) {
    *step = "write";
    if (fflush(s->f) != 0 || ferror(s->f)) return errno ? errno : EIO;
    *step = "fsync";
    return fsync(fileno(s->f)) != 0 ? errno : 0;
}

sn_status sn_savefile_commit_pair(sn_savefile *a, sn_savefile *b, sn_err *e) {
    const char *step;
    int err = make_durable(a, &step);
    if (err) {
        sn_savefile_abort(b);
        return failed(a, step, err, e);
    }
    if ((err = make_durable(b, &step))) {
        sn_savefile_abort(a);
        return failed(b, step, err, e);
    }
    test_delay("SN_SAVEFILE_DELAY_MS");
    /* a's old file kept under a temporary name until b is in place: a failed second rename puts
     * it back. The renames are one section no signal handler splits. */
    size_t n = strlen(a->target) + TMP_EXTRA;
    char *backup = sn_malloc(n, "a file name", e);
    if (!backup) {
        sn_savefile_abort(a);
        sn_savefile_abort(b);
        return SN_ERR_OOM;
    }
    tmp_prefix(a->target, backup, n);
    strcat(backup, "XXXXXX");
    sn_savefile *bad = NULL;
    sigset_t old;
    lock_list(&old);
    int fd = mkstemp(backup);
    bool had_old = false;
    if (fd >= 0) {
        close(fd);
        had_old = unlink(backup) == 0 && link(a->target, backup) == 0;
    }
    if (rename(a->tmp, a->target) != 0) bad = a;
    else if (rename(b->tmp, b->target) != 0) {
        bad = b;
        err = errno;
        if (had_old) rename(backup, a->target); /* a's old file back */
        else unlink(a->target);
        had_old = false;
    }
    if (bad == a) err = errno;
    if (!bad || bad == b) list_remove(a->tmp);
    if (!bad) list_remove(b->tmp);
    if (had_old) unlink(backup);
    unlock_list(&old);
    free(backup);
    if (bad) {
        if (bad == b) { /* a's temporary is gone (renamed, then replaced by the old file) */
            free(a->tmp);
            a->tmp = NULL;
        }
        sn_savefile_abort(bad == a ? b : a);
        return failed(bad, "rename", err, e);
    }
    for (sn_savefile *s = a;; s = b) {
        free(s->tmp);
        s->tmp = NULL;
        sync_dir(s->target);
        int rc = fclose(s->f);
        s->f = NULL;
        free(s->target);
        s->target = NULL;
        if (rc != 0 && !err) err = errno;
        if (s == b) break;
    }
    return err ? sn_fail(e, SN_ERR_IO, "cannot close the %s %s: %s", a->what, a->path, strerror(err))
               : SN_OK;
}

sn_status sn_savefile_check(const char *path, const char *what, sn_err *e) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return sn_fail(e, SN_ERR_IO, "cannot write the %s %s: it is %s, not a regular file: "
                       "give a file name", what, path, S_ISDIR(st.st_mode) ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
    sn_savefile s;
    sn_status r = sn_savefile_open(&s, path, what, e);
    if (!r) sn_savefile_abort(&s);
    return r;
}
