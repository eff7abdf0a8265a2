/* stop_signals.h: SIGINT and SIGTERM for the commands that write files (train, prepare), taken
 * by a thread of their own with sigwait, never by a signal handler on a thread that computes.
 *
 * Why not a handler: oneDNN's JIT sgemm kernels (libdnnl 2.x-3.10, Debian 12's 2.6; fixed
 * upstream in oneDNN PR #4855, issue #4845) point rsp at a heap workspace while they run, and a
 * handler's signal frame (kilobytes with the AVX-512 state) is then pushed below it, over the
 * heap chunk before the workspace: "corrupted size vs. prev_size" at a later free, seen when a
 * SIGINT landed in a CPU GEMM (tests/interrupt.sh, about 1 run in 10 under load). With both
 * signals blocked in every thread and taken by sigwait on the signal thread, no frame is ever
 * pushed on a computing thread. */
#ifndef SN_CLI_STOP_SIGNALS_H
#define SN_CLI_STOP_SIGNALS_H

#include <stdbool.h>

/* Blocks SIGINT and SIGTERM in the calling thread (and so in every thread created after it:
 * call before any is) and starts the signal thread. The first signal writes first_msg to
 * stderr; when stop_at_once, or at a second signal (second_msg), the process's temporary
 * files are removed (sn_savefile_unlink_all) and it exits 128 + the signal at once. Returns
 * false, with errno set, when the thread cannot be started (the default dispositions remain:
 * the signals then kill the process, leaving temporary files that the next run removes). */
bool cli_stop_signals_start(const char *first_msg, const char *second_msg, bool stop_at_once);

/* The first stop signal received (SIGINT or SIGTERM), 0 before. */
int cli_stop_signal(void);
/* The same as a flag to read atomically (sn_session_set_stop). */
const int *cli_stop_flag(void);

#endif
