/* savefile.h: writing a file so that it is replaced whole or not at all: the bytes go to a
 * temporary file in the same directory, which is fsync'd and then renamed over the target.
 * Convention: a failure removes the temporary file and leaves any old file untouched. */
#ifndef SN_SAVEFILE_H
#define SN_SAVEFILE_H

#include <stdio.h>

#include "ir/ir.h"

typedef struct {
    FILE *f;        /* write here (stdio; seeking is allowed) */
    char *tmp;      /* the temporary file's name */
    const char *path;
    const char *what; /* "checkpoint", "plot" ... for messages */
} sn_savefile;

/* Creates the temporary file next to path. what names the file's kind in messages. */
sn_status sn_savefile_open(sn_savefile *s, const char *path, const char *what, sn_err *e);
/* Flushes, fsyncs, closes and renames over path, then syncs the directory. On failure the
 * temporary file is removed and the message names path and the system's reason. */
sn_status sn_savefile_commit(sn_savefile *s, sn_err *e);
/* Gives up: closes and removes the temporary file. */
void sn_savefile_abort(sn_savefile *s);

#endif
