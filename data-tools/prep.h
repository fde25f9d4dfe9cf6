/*
 * prep.h - the subcommands of pstrain-prep. Each takes the arguments after
 * its name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 1 failure (message already printed), 2 usage error.
 */
#ifndef PSTRAIN_PREP_H
#define PSTRAIN_PREP_H

#include <stdio.h>

int prep_cmd_idx(int argc, char **argv);
int prep_cmd_images(int argc, char **argv); /* also `png` */
int prep_cmd_info(int argc, char **argv);
int prep_cmd_verify(int argc, char **argv);
int prep_cmd_preview(int argc, char **argv);

/* The arguments of a command that takes one FILE.h5 and only -h/--help
 * (info, verify): returns the exit status when the command is done (help
 * printed: 0; a usage error: 2), or -1 when argv[1] is the file to work on. */
int prep_one_file_args(int argc, char **argv, void (*usage)(FILE *out));

#endif
