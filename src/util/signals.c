/* signals.c - the stop-on-signal flag. Contract: pstrain/signals.h. */
#include "pstrain/signals.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    if (sig == SIGINT && g_stop) {
        static const char msg[] = "\ninterrupted twice: aborting without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(130);
    }
    if (!g_stop) g_stop = sig;
}

int pst_stop_signals_install(pst_err *e)
{
    static const int sigs[] = {SIGTERM, SIGUSR1, SIGINT};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < PST_ARRAY_LEN(sigs); i++)
        if (sigaction(sigs[i], &sa, NULL) < 0)
            return pst_fail(e, "sigaction(%s): %s", strsignal(sigs[i]), strerror(errno));
    return 0;
}

int pst_stop_requested(void)
{
    return g_stop;
}

void pst_stop_request(int signo)
{
    if (!g_stop) g_stop = signo;
}

void pst_stop_reset(void)
{
    g_stop = 0;
}
