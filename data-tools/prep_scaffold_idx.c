/* TEMPORARY scaffolding while the subcommands are being written: each helper
 * deletes its function from here when its real implementation lands, and this
 * file is removed once empty. */
#include <stdio.h>

#include "prep.h"

int prep_cmd_idx(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "pstrain-prep: idx: not built yet\n");
    return 1;
}

int prep_cmd_info(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "pstrain-prep: info: not built yet\n");
    return 1;
}

int prep_cmd_verify(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "pstrain-prep: verify: not built yet\n");
    return 1;
}
