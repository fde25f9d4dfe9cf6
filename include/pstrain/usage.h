/*
 * pstrain/usage.h - one style for command-line errors in both programs.
 *
 * Every message starts with the command's name as the user typed it
 * ("pstrain train: ", "pstrain-prep png: ": pst_set_progname), warnings
 * with "NAME: warning: ". A usage error (unknown flag, bad or missing value,
 * stray argument) is one line on stderr and exit status 2; an unknown flag
 * names the nearest known one ("did you mean --batch?") and points to
 * --help.
 */
#ifndef PSTRAIN_USAGE_H
#define PSTRAIN_USAGE_H

#include <getopt.h>
#include <stddef.h>

/* The exit status of a usage error. */
#define PST_EXIT_USAGE 2

/* "NAME: message" on stderr (one line). */
void pst_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "NAME: message (see NAME --help)" on stderr; returns PST_EXIT_USAGE. */
int pst_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The known flag (a name without dashes, from `names`, NULL-terminated)
 * nearest to `arg` ("--batch-size", "--learning_rate=0.1", "-batch"), or
 * NULL when none is close: a known name that `arg` extends ("batch" for
 * "batch-size"), the usual name in other frameworks ("lr" for
 * "learning-rate", "epochs" for "num-epochs"), or one within a small edit
 * distance ("optimiser" -> "optimizer"). */
const char *pst_nearest_flag(const char *arg, const char *const *names);

/* The usage error for an unknown flag `arg`: "NAME: unknown option
 * '--batch-size' (did you mean --batch?); see NAME --help". Returns
 * PST_EXIT_USAGE. */
int pst_unknown_option(const char *arg, const char *const *names);

/* After getopt_long (optstring starting with "+:" and opterr = 0) returned
 * '?' or ':': the one-line usage error for argv[optind - 1] (unknown,
 * ambiguous, or a missing value), suggesting the nearest of `opts`.
 * Returns PST_EXIT_USAGE. */
int pst_getopt_error(int c, char **argv, const struct option *opts);

#endif
