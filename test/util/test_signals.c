/* test_signals.c - the stop-on-signal flag: the first signal is kept, a
 * reset clears it, a second SIGINT exits 130 at once. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "pstrain/signals.h"

static void test_signals(void)
{
    pst_err e;
    CHECK(pst_stop_signals_install(&e) == 0, "%s", e.msg);
    CHECK(pst_stop_requested() == 0, "flag set before a signal");
    raise(SIGUSR1);
    CHECK(pst_stop_requested() == SIGUSR1, "SIGUSR1 -> %d", pst_stop_requested());
    raise(SIGTERM);
    CHECK(pst_stop_requested() == SIGUSR1, "first signal is kept");
    pst_stop_reset();
    raise(SIGTERM);
    CHECK(pst_stop_requested() == SIGTERM, "SIGTERM -> %d", pst_stop_requested());
    pst_stop_reset();

    /* SIGINT once: flag; twice: exit 130 at once */
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        raise(SIGINT);
        if (pst_stop_requested() != SIGINT) _exit(3);
        raise(SIGINT);
        _exit(4);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130, "second SIGINT: status %d", st);
}

static void test_request(void)
{
    pst_stop_reset();
    pst_stop_request(SIGUSR1);
    CHECK(pst_stop_requested() == SIGUSR1, "request -> %d", pst_stop_requested());
    pst_stop_request(SIGTERM);
    CHECK(pst_stop_requested() == SIGUSR1, "first request is kept");
    pst_stop_reset();
    CHECK(pst_stop_requested() == 0, "reset -> %d", pst_stop_requested());
}

int main(void)
{
    test_signals();
    test_request();
    return check_exit();
}
