/* usage.c - command-line errors in one style, with the nearest flag. */
#include "pstrain/usage.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/common.h"

void pst_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", pst_progname());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int pst_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", pst_progname());
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s --help)\n", pst_progname());
    va_end(ap);
    return PST_EXIT_USAGE;
}

/* Edit distance of two short strings (names are < 64 chars): insertions,
 * deletions, substitutions and transpositions of neighbours ("modle"). */
static int edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return 1 << 20;
    int d[64][64];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int best = PST_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1);
            best = PST_MIN(best, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]));
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                best = PST_MIN(best, d[i - 2][j - 2] + 1);
            d[i][j] = best;
        }
    return d[na][nb];
}

static bool known(const char *name, const char *const *names)
{
    for (const char *const *n = names; *n; n++)
        if (!strcmp(*n, name)) return true;
    return false;
}

const char *pst_nearest_flag(const char *arg, const char *const *names)
{
    /* the bare name: no dashes, no "=value", '_' read as '-', lower case */
    char w[64];
    while (*arg == '-') arg++;
    size_t n = 0;
    for (; arg[n] && arg[n] != '=' && n < sizeof w - 1; n++) {
        char ch = arg[n] == '_' ? '-' : arg[n];
        w[n] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    }
    w[n] = 0;
    if (!n) return NULL;
    /* what TensorFlow, PyTorch and Horovod scripts call them */
    static const char *const synonyms[][2] = {
        {"batch-size", "batch"},
        {"bs", "batch"},
        {"learning-rate", "lr"},
        {"lr-rate", "lr"},
        {"num-epochs", "epochs"},
        {"epoch", "epochs"},
        {"n-epochs", "epochs"},
        {"max-steps", "steps"},
        {"train-steps", "steps"},
        {"num-steps", "steps"},
        {"optim", "optimizer"},
        {"opt", "optimizer"},
        {"num-ps", "ps"},
        {"ps-hosts", "ps"},
        {"checkpoint", "checkpoint-dir"},
        {"ckpt-dir", "checkpoint-dir"},
        {"train-dir", "checkpoint-dir"},
        {"model-dir", "checkpoint-dir"},
        {"log-interval", "log-every"},
        {"wd", "weight-decay"},
        {"restore", "resume"},
        {"out", "output"},
        {"dataset", "data"},
        {"data-dir", "data"},
        {"num-classes", "classes"},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(synonyms); i++)
        if (!strcmp(w, synonyms[i][0]) && known(synonyms[i][1], names)) {
            for (const char *const *k = names; *k; k++)
                if (!strcmp(*k, synonyms[i][1])) return *k;
        }
    /* a known name that the word extends: batch-size, lr-rate, seed-value */
    const char *best = NULL;
    size_t best_len = 0;
    for (const char *const *k = names; *k; k++) {
        size_t kl = strlen(*k);
        if (kl >= 2 && kl < n && !strncmp(w, *k, kl) && w[kl] == '-' && kl > best_len)
            best = *k, best_len = kl;
    }
    if (best) return best;
    /* a small edit distance: a third of the length, at least 1 */
    int best_d = 1 << 20;
    for (const char *const *k = names; *k; k++) {
        int d = edit_distance(w, *k);
        int limit = PST_MAX(1, (int)PST_MAX(n, strlen(*k)) / 3);
        if (d <= limit && d < best_d) best = *k, best_d = d;
    }
    return best;
}

int pst_unknown_option(const char *arg, const char *const *names)
{
    const char *near = pst_nearest_flag(arg, names);
    /* the flag as typed, without its value */
    int len = (int)strcspn(arg, "=");
    if (near)
        fprintf(stderr, "%s: unknown option '%.*s' (did you mean %s%s?); see %s --help\n",
                pst_progname(), len, arg, strlen(near) == 1 ? "-" : "--", near, pst_progname());
    else
        fprintf(stderr, "%s: unknown option '%.*s'; see %s --help\n", pst_progname(), len, arg,
                pst_progname());
    return PST_EXIT_USAGE;
}

int pst_getopt_error(int c, char **argv, const struct option *opts)
{
    const char *arg = argv[optind - 1];
    if (c == ':') return pst_usage_error("%s needs a value", arg);
    size_t k = 0;
    while (opts[k].name) k++;
    const char **names = pst_malloc(sizeof *names * (k + 1));
    for (size_t i = 0; i < k; i++) names[i] = opts[i].name;
    names[k] = NULL;
    /* a short option glibc did not know: optopt holds it */
    char shortopt[3] = {'-', (char)optopt, 0};
    if (optopt && arg[0] == '-' && arg[1] != '-') arg = shortopt;
    /* a prefix of two long options ("--adam" for --adam-beta1/2): glibc
     * returns '?' as for an unknown one */
    int nmatch = 0;
    const char *bare = arg + strspn(arg, "-");
    size_t bl = strcspn(bare, "=");
    if (arg[0] == '-' && arg[1] == '-' && bl)
        for (size_t i = 0; i < k; i++) nmatch += !strncmp(names[i], bare, bl);
    int rc;
    if (nmatch > 1)
        rc = pst_usage_error("option '%.*s' is ambiguous", (int)(bl + 2), arg);
    else
        rc = pst_unknown_option(arg, names);
    free(names);
    return rc;
}
