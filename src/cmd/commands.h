/*
 * commands.h - the command layer (src/cmd): the subcommands of `pstrain` and
 * what they share, on top of every library layer. main.c dispatches to
 * these; no library layer may call them. Each *_main takes argv[0] = the
 * command's name and returns the process exit status (2: usage error).
 */
#ifndef PSTRAIN_CMD_COMMANDS_H
#define PSTRAIN_CMD_COMMANDS_H

#include <stdbool.h>

#include "pstrain/common.h"
#include "pstrain/train.h"

/* Parses `pstrain train` flags (argv[0] is "train") into cfg (cli.c).
 * Returns 0, or 2 after printing a usage error / 1 for --help (printed) so
 * main can exit; prints nothing unless print_errors. */
int train_parse_args(int argc, char **argv, train_cfg *cfg, bool print_errors);

/* Writes the --summary-json object of docs/design.md §6 (summary.c). */
int train_write_summary(const char *path, const train_cfg *cfg, const train_result *r, pst_err *e);

/* `pstrain eval --data F --checkpoint C [--split S] [--summary-json J]`. */
int eval_main(int argc, char **argv);

/* `pstrain plan --model M --ps P [--placement S] [--partition-bytes N]
 * [--data F | --height H --width W --channels C --classes K]`: builds the
 * model, prints its placement on P parameter servers. */
int plan_main(int argc, char **argv);

#endif
