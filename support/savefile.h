/* savefile.h: writing a file so that it is replaced whole or not at all: the bytes go to a
 * temporary file in the same directory, which is fsync'd and then renamed over the target.
 * Convention: a failure removes the temporary file and leaves any old file untouched; the
 * temporary files open at any moment are listed so that a signal handler can remove them. */
#ifndef SN_SAVEFILE_H
#define SN_SAVEFILE_H

#include <stdio.h>
#include <time.h>

#include "ir/ir.h"

typedef struct {
    FILE *f;        /* write here (stdio; seeking is allowed) */
    char *tmp;      /* the temporary file's name; NULL once renamed over path */
    const char *path;
    char *target;   /* the file replaced: path, or the file a symbolic link at path names */
    const char *what; /* "checkpoint", "plot" ... for messages */
} sn_savefile;

/* Creates the temporary file next to path: "PATH.tmp.XXXXXX", PATH's last component cut so that
 * the name fits NAME_MAX. It is flock'ed while open. A symbolic link at path is written through
 * (the file it names is replaced; the link stays); the replaced file's mode is kept, and a new
 * file gets 0666 less the umask. what names the file's kind in messages. */
sn_status sn_savefile_open(sn_savefile *s, const char *path, const char *what, sn_err *e);
/* Flushes, fsyncs, closes and renames over path, then syncs the directory. On failure the
 * temporary file is removed and the message names path and the system's reason. */
sn_status sn_savefile_commit(sn_savefile *s, sn_err *e);
/* Commits a and b as a pair: both flushed and fsync'd, then both renamed; when b's rename fails,
 * a's old file is put back (removed when there was none), so either both files are replaced or
 * neither is. On failure both temporary files are removed. */
sn_status sn_savefile_commit_pair(sn_savefile *a, sn_savefile *b, sn_err *e);
/* Gives up: closes and removes the temporary file (a file already published by
 * sn_savefile_sync stays). Safe to call again, and after a commit. */
void sn_savefile_abort(sn_savefile *s);

/* Keeps the unpublished temporary file under the name other instead, which must not exist yet
 * (an existing file is never replaced: EEXIST). Returns 0 or an errno; then finish with
 * sn_savefile_abort (which closes it and removes nothing). */
int sn_savefile_keep_as(sn_savefile *s, const char *other);

/* For a file that grows while it is in use (a log): makes what was written so far durable at
 * path and keeps the stream open for more. The first call renames the temporary file over path;
 * later calls fsync the same file, which path now names. A write error (full disk) is reported
 * here. End with sn_savefile_commit (one last sync) or sn_savefile_abort. */
sn_status sn_savefile_sync(sn_savefile *s, sn_err *e);

/* Checks that path can be written by creating and removing a temporary file beside it, and
 * that path is not a directory or another non-regular file: run before hours of work. */
sn_status sn_savefile_check(const char *path, const char *what, sn_err *e);

/* Removes path's temporary files ("PATH.tmp.XXXXXX") that a process killed during a save left:
 * regular files last modified before `before` that no process holds locked. Returns how many. */
int sn_savefile_remove_stale(const char *path, time_t before);

/* Removes every temporary file still open in this process, for a signal handler that stops the
 * process at once: async-signal-safe, from any thread. It waits for a file being created,
 * renamed or removed by another thread, and returns holding the list's lock, so no file is
 * created after it: the caller must _exit. From the moment it is called, no other thread starts a
 * creation, rename or removal (it waits for the exit). Mask the other stop signals in the handler (a
 * nested call on the same thread would wait for itself). */
void sn_savefile_unlink_all(void);

/* Tests only: SN_SAVEFILE_DELAY_MS=N makes sn_savefile_commit (and _commit_pair) wait N ms after
 * writing and before the rename, so a test can kill the process during a save (tests/resume.sh);
 * SN_SAVEFILE_OPEN_DELAY_MS=N waits between creating the temporary file and listing it, inside
 * the section a handler cannot split (tests/interrupt.sh); SN_SAVEFILE_STOP_DELAY_MS=N holds
 * sn_savefile_unlink_all N ms before it waits for that section, so the section ends first and
 * the saving thread goes on toward its rename (which must then wait for the exit). */

#endif
