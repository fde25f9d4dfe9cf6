/* test_model_names.c - every list of model names that pstrain shows is the
 * table of models (src/nn/models.c): `pstrain train --help`, the error for
 * an unknown --model, `pstrain plan --help` and plan's error list exactly
 * nn_model_names(), in table order, and plan accepts every name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"
#include "pstrain/model.h"

#define MAXN 64

/* Runs `cmd` (stderr to stdout) into out; returns the exit status or -1. */
static int run(const char *cmd, char *out, size_t len)
{
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Splits "a | b | c" or "a, b or c" (the text up to `end`) into names. */
static int split_names(const char *s, const char *end, char names[][64])
{
    static const char *const seps[] = {" | ", ", ", " or "};
    int n = 0;
    while (s < end && n < MAXN) {
        const char *next = end;
        size_t seplen = 0;
        for (size_t i = 0; i < sizeof seps / sizeof seps[0]; i++) {
            const char *q = strstr(s, seps[i]);
            if (q && q < next) next = q, seplen = strlen(seps[i]);
        }
        snprintf(names[n++], 64, "%.*s", (int)(next - s), s);
        s = next + seplen;
    }
    return n;
}

/* The names listed in `text` between `before` and `after` equal the table. */
static void check_list(const char *what, const char *text, const char *before, const char *after)
{
    const char *a = strstr(text, before);
    CHECK(a != NULL, "%s: no '%s' in:\n%s", what, before, text);
    if (!a) return;
    a += strlen(before);
    while (*a == ' ') a++;
    const char *b = strstr(a, after);
    CHECK(b != NULL, "%s: no '%s' after '%s' in:\n%s", what, after, before, text);
    if (!b) return;
    char names[MAXN][64];
    int n = split_names(a, b, names);
    const char *const *table = nn_model_names();
    int nt = 0;
    while (table[nt]) nt++;
    CHECK(n == nt, "%s lists %d models, the table has %d: '%.*s'", what, n, nt, (int)(b - a), a);
    for (int i = 0; i < n && i < nt; i++)
        CHECK(!strcmp(names[i], table[i]), "%s: model %d is '%s', the table's is '%s'", what, i,
              names[i], table[i]);
}

int main(void)
{
    const char *exe = getenv("PSTRAIN");
    if (!exe) {
        fprintf(stderr, "PSTRAIN is not set (run through meson test)\n");
        return 1;
    }
    static char out[1 << 16];
    char cmd[4096];

    snprintf(cmd, sizeof cmd, "'%s' train --help 2>&1", exe);
    CHECK(run(cmd, out, sizeof out) == 0, "train --help failed:\n%s", out);
    check_list("train --help", out, "--model NAME", " (default ");
    char def[64] = "";
    const char *d = strstr(out, "--model NAME");
    if (d) d = strstr(d, "(default ");
    if (d) sscanf(d, "(default %63[^)])", def);
    CHECK(nn_model_known(def), "the default model '%s' is not in the table", def);

    snprintf(cmd, sizeof cmd, "'%s' train --data none.h5 --model no-such-model 2>&1", exe);
    CHECK(run(cmd, out, sizeof out) == 2, "train --model no-such-model: not a usage error:\n%s",
          out);
    check_list("train --model error", out, "--model: expected", ", got 'no-such-model'");

    snprintf(cmd, sizeof cmd, "'%s' plan --help 2>&1", exe);
    CHECK(run(cmd, out, sizeof out) == 0, "plan --help failed:\n%s", out);
    check_list("plan --help", out, "\nM:", "\n");

    snprintf(cmd, sizeof cmd, "'%s' plan --model no-such-model --ps 1 2>&1", exe);
    CHECK(run(cmd, out, sizeof out) == 2, "plan --model no-such-model: not a usage error:\n%s",
          out);
    check_list("plan --model error", out, "'no-such-model': expected", "\n");

    /* 75x75: the smallest image every model fits (Inception-v3's minimum) */
    for (const char *const *name = nn_model_names(); *name; name++) {
        snprintf(cmd, sizeof cmd, "'%s' plan --model %s --ps 2 --height 75 --width 75 2>&1", exe,
                 *name);
        CHECK(run(cmd, out, sizeof out) == 0, "plan --model %s failed:\n%s", *name, out);
        char head[128];
        snprintf(head, sizeof head, "model %s, input 75x75x1", *name);
        CHECK(strstr(out, head) != NULL, "plan --model %s: no '%s' in:\n%s", *name, head, out);
    }

    /* the join itself: one name per table row, the separators between */
    char buf[NN_MODEL_NAMES_LEN];
    nn_model_names_join(buf, sizeof buf, "/", "+");
    int n = 0;
    for (const char *const *name = nn_model_names(); *name; name++) n++;
    CHECK(n >= 2, "fewer than two models in the table");
    char expect[NN_MODEL_NAMES_LEN] = "";
    for (int i = 0; i < n; i++) {
        strcat(expect, i == 0 ? "" : i == n - 1 ? "+" : "/");
        strcat(expect, nn_model_names()[i]);
    }
    CHECK(!strcmp(buf, expect), "join: '%s', expected '%s'", buf, expect);
    CHECK(!nn_model_known("no-such-model") && !nn_model_known(NULL), "unknown names are known");
    return check_exit();
}
