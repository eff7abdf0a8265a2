/* stop_signals.c: the signal thread of stop_signals.h. */
#include "stop_signals.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "support/savefile.h"

static int first_signal; /* atomic */
static const char *msg_first, *msg_second;
static bool at_once;

static void say(const char *msg) {
    if (!msg) return;
    ssize_t w = write(STDERR_FILENO, msg, strlen(msg));
    (void)w;
}

static void *signal_thread(void *arg) {
    const sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig)) continue;
        bool second = __atomic_exchange_n(&first_signal, sig, __ATOMIC_ACQ_REL) != 0;
        say(second ? msg_second : msg_first);
        if (second || at_once) {
            sn_savefile_unlink_all();
            _exit(128 + sig);
        }
    }
    return NULL;
}

bool cli_stop_signals_start(const char *first_msg, const char *second_msg, bool stop_at_once) {
    static sigset_t set;
    msg_first = first_msg;
    msg_second = second_msg;
    at_once = stop_at_once;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigset_t old;
    int rc = pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_t t;
    if (!rc && (rc = pthread_create(&t, NULL, signal_thread, &set)) != 0)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rc) pthread_detach(t);
    errno = rc;
    return rc == 0;
}

int cli_stop_signal(void) { return __atomic_load_n(&first_signal, __ATOMIC_ACQUIRE); }

const int *cli_stop_flag(void) { return &first_signal; }
