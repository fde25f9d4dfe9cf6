/*
 * commands.h - the subcommands of `pstrain` (internal to src/run): the
 * command layer, on top of every library module. main.c dispatches to
 * these; nothing below src/run may call them. Each takes argv[0] = the
 * command's name and returns the process exit status (2: usage error).
 */
#ifndef PSTRAIN_RUN_COMMANDS_H
#define PSTRAIN_RUN_COMMANDS_H

/* `pstrain eval --data F --checkpoint C [--split S] [--summary-json J]`. */
int eval_main(int argc, char **argv);

/* `pstrain plan --model M --ps P [--placement S] [--partition-bytes N]
 * [--data F | --height H --width W --channels C --classes K]`: builds the
 * model, prints its placement on P parameter servers. */
int plan_main(int argc, char **argv);

#endif
