/*
 * check.h - the minimal test harness: CHECK records a failure with file:line
 * and goes on; check_exit() returns the exit status for meson (0 pass, 1 fail,
 * 77 skip). One executable per test; each checks many things.
 */
#ifndef PSTRAIN_TEST_CHECK_H
#define PSTRAIN_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures_;
static int check_count_;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        check_count_++;                                                                            \
        if (!(cond)) {                                                                             \
            check_failures_++;                                                                     \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, atol, rtol, ...)                                                         \
    CHECK(fabs((double)(a) - (double)(b)) <= (atol) + (rtol)*fabs((double)(b)), __VA_ARGS__)

static inline int check_exit(void)
{
    fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#define CHECK_SKIP(...)                                                                            \
    do {                                                                                           \
        fprintf(stderr, "SKIP: " __VA_ARGS__);                                                     \
        fputc('\n', stderr);                                                                       \
        exit(77);                                                                                  \
    } while (0)

#endif
