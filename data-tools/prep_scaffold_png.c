/* TEMPORARY scaffolding while the subcommands are being written: each helper
 * deletes its function from here when its real implementation lands, and this
 * file is removed once empty. */
#include <stdio.h>

#include "prep.h"

int prep_cmd_png(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "pstrain-prep: png: not built yet\n");
    return 1;
}

int prep_cmd_preview(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "pstrain-prep: preview: not built yet\n");
    return 1;
}
