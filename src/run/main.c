/* main.c - the pstrain command: dispatches to the subcommands in src/run. */
#include <stdio.h>
#include <string.h>

#include "pstrain/common.h"
#include "pstrain/version.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: pstrain COMMAND [options]\n"
                 "\n"
                 "commands:\n"
                 "  train   train a model (single process, or under mpirun with --ps P)\n"
                 "  eval    evaluate a checkpoint on a data set split\n"
                 "  plan    print the placement of a model's variables on P parameter servers\n"
                 "\n"
                 "  pstrain --version    versions of pstrain, MPI, HDF5, BLIS and libpng\n"
                 "  pstrain CMD --help   options of a command\n");
}

int main(int argc, char **argv)
{
    pst_set_progname("pstrain");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        pst_version_print(stdout, "pstrain");
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "pstrain: unknown command '%s' (try pstrain --help)\n", cmd);
    return 2;
}
