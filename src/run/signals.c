/* signals.c - a flag set by SIGTERM/SIGUSR1/SIGINT, polled at step boundaries. */
#include "pstrain/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop_signal;
static volatile sig_atomic_t g_sigint_count;

static void on_signal(int signo)
{
    if (signo == SIGINT && ++g_sigint_count >= 2) {
        static const char msg[] = "\ninterrupted twice: stopping now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    if (!g_stop_signal) g_stop_signal = signo;
}

void sig_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

bool sig_stop_requested(int *signo)
{
    int s = g_stop_signal;
    if (signo) *signo = s;
    return s != 0;
}

void sig_request_stop(int signo)
{
    if (!g_stop_signal) g_stop_signal = signo;
}
