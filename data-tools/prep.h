/*
 * prep.h - the subcommands of pstrain-prep. Each takes the arguments after
 * its name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 1 failure (message already printed), 2 usage error.
 */
#ifndef PSTRAIN_PREP_H
#define PSTRAIN_PREP_H

int prep_cmd_idx(int argc, char **argv);
int prep_cmd_png(int argc, char **argv);
int prep_cmd_info(int argc, char **argv);
int prep_cmd_verify(int argc, char **argv);
int prep_cmd_preview(int argc, char **argv);

#endif
