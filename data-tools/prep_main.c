/* prep_main.c - pstrain-prep: prepare, inspect and verify HDF5 data sets. */
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "prep.h"
#include "pstrain/common.h"
#include "pstrain/usage.h"
#include "pstrain/version.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: pstrain-prep COMMAND [options]\n"
            "\n"
            "  idx     --train-images F --train-labels F [--test-images F --test-labels F]\n"
            "          [--classes NAME,...] [--chunk-images N] [--compression 0-9] [--force] -o "
            "OUT.h5\n"
            "          [--threads N]\n"
            "  images  DIR [--val-dir DIR [--val-labels FILE]] [--test-dir DIR] [--synsets FILE]\n"
            "          [--store pixels|encoded] [--size HxW] [--max-side S] [--quality Q]\n"
            "          [--channels 1|3] [--val-fraction F] [--seed S] [--strict]\n"
            "          [--allow-truncated] [--max-pixels N] [--alpha black|drop]\n"
            "          [--compression 0-9] [--chunk-images N] [--threads N] [--force] -o OUT.h5\n"
            "  png     the same as images (JPEG and PNG files, chosen by content)\n"
            "  info    FILE.h5\n"
            "  verify  FILE.h5          exit 0 only if the file is a sound data set\n"
            "  preview FILE.h5 [--split train] [--count 64] [--seed S | --first]\n"
            "          [--scale N | --tile PX] -o GRID.png\n"
            "\n"
            "  pstrain-prep --version, pstrain-prep COMMAND --help\n");
}

int prep_one_file_args(int argc, char **argv, void (*print_usage)(FILE *out))
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        print_usage(stdout);
        return 0;
    }
    static const char *const names[] = {"help", "h", NULL};
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1]) return pst_unknown_option(argv[i], names);
    if (argc != 2)
        return pst_usage_error(argc < 2 ? "FILE.h5 is required" : "one FILE.h5 expected, got %d",
                               argc - 1);
    return -1;
}

int main(int argc, char **argv)
{
    pst_set_progname("pstrain-prep");
    /* HDF5 closes the files still open at exit. After a failed close (a
     * full disk while the last metadata is written), that file is left
     * half-closed inside the library, and its exit-time close crashed
     * (H5F__close_cb). Every output is closed or abandoned (its temporary
     * removed) explicitly; nothing is left for an exit handler to do. */
    H5dont_atexit();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    static const struct {
        const char *name, *prog; /* prog: the prefix of its messages */
        int (*fn)(int, char **);
    } cmds[] = {
        {"idx", "pstrain-prep idx", prep_cmd_idx},
        {"images", "pstrain-prep images", prep_cmd_images},
        {"png", "pstrain-prep png", prep_cmd_images},
        {"info", "pstrain-prep info", prep_cmd_info},
        {"verify", "pstrain-prep verify", prep_cmd_verify},
        {"preview", "pstrain-prep preview", prep_cmd_preview},
    };
    if (!strcmp(cmd, "--version")) {
        pst_version_print(stdout, "pstrain-prep");
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < PST_ARRAY_LEN(cmds); i++)
        if (!strcmp(cmd, cmds[i].name)) {
            pst_set_progname(cmds[i].prog); /* "pstrain-prep png: message" */
            return cmds[i].fn(argc - 1, argv + 1);
        }
    static const char *const names[] = {"idx", "images", "png", "info", "verify", "preview", NULL};
    const char *near = pst_nearest_flag(cmd, names);
    if (near)
        fprintf(stderr,
                "pstrain-prep: unknown command '%s' (did you mean %s?); see pstrain-prep --help\n",
                cmd, near);
    else
        fprintf(stderr, "pstrain-prep: unknown command '%s'; see pstrain-prep --help\n", cmd);
    return PST_EXIT_USAGE;
}
