/*
 * prep_tree.c - the listing of `pstrain-prep images`: which files, which
 * label, which split.
 *
 * Classes are the subdirectories of DIR sorted by strcmp (ids 0..K-1), or,
 * with --synsets FILE, the synset ids of FILE's lines in their order (every
 * class folder of DIR must be one of them). In a class folder, regular files
 * named *.jpeg, *.jpg or *.png (any case) are images, sorted by strcmp; other
 * entries and names starting with '.' are ignored and counted. The decoder
 * is chosen later by content, not by this name.
 *
 * Validation images come from --val-dir (class subfolders like DIR, or a
 * flat folder labelled by --val-labels: class indices or a
 * LOC_val_solution.csv-style CSV), or, without it, from round(F * n_c) files
 * of each train class (--val-fraction F, a Fisher-Yates shuffle seeded by
 * --seed). --test-dir has class subfolders.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data-tools/prep_images.h"
#include "pstrain/common.h"

const char *const img_split_names[NSPLITS] = {"train", "val", "test"};

static char *path_join(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *p = pst_malloc(na + nb + 2);
    memcpy(p, a, na);
    p[na] = '/';
    memcpy(p + na + 1, b, nb + 1);
    return p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

bool img_is_image_name(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && (!strcasecmp(name + n - 4, ".png") || !strcasecmp(name + n - 4, ".jpg"))) ||
           (n > 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

/* The names in `dir` (without . and ..), sorted by strcmp. */
static int list_dir(const char *dir, char ***out, int64_t *n, pst_err *e)
{
    *out = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d) return pst_fail(e, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    int64_t cnt = 0, cap = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (cnt == cap) {
            cap = cap ? 2 * cap : 64;
            names = pst_realloc(names, sizeof(char *) * (size_t)cap);
        }
        names[cnt++] = pst_strdup(de->d_name);
    }
    int err = errno;
    closedir(d);
    if (err) {
        for (int64_t i = 0; i < cnt; i++) free(names[i]);
        free(names);
        return pst_fail(e, "%s: reading directory failed: %s", dir, strerror(err));
    }
    if (cnt) qsort(names, (size_t)cnt, sizeof(char *), cmp_str);
    *out = names, *n = cnt;
    return 0;
}

static void free_names(char **names, int64_t n)
{
    if (!names) return;
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void tree_add(img_tree *t, char *path, int32_t label, int split)
{
    if (t->nitems == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->items = pst_realloc(t->items, sizeof(img_item) * (size_t)t->cap);
    }
    t->items[t->nitems++] = (img_item){path, label, split};
    t->per_split[split]++;
}

void img_tree_free(img_tree *t)
{
    free_names(t->classes, t->nclasses);
    free_names(t->words, t->nclasses);
    for (int64_t i = 0; i < t->nitems; i++) free(t->items[i].path);
    free(t->items);
    memset(t, 0, sizeof *t);
}

/* The subdirectories of `dir` (not hidden), sorted; other entries are
 * counted as ignored when `ignored` is not NULL. *nfiles (may be NULL)
 * receives the number of image files directly in `dir`. */
static int list_subdirs(const char *dir, char ***subdirs, int64_t *n, int64_t *ignored,
                        int64_t *nfiles, pst_err *e)
{
    char **names;
    int64_t cnt, k = 0, files = 0;
    if (list_dir(dir, &names, &cnt, e) < 0) return -1;
    for (int64_t i = 0; i < cnt; i++) {
        char *p = path_join(dir, names[i]);
        struct stat st;
        bool ok = stat(p, &st) == 0;
        bool is_dir = names[i][0] != '.' && ok && S_ISDIR(st.st_mode);
        free(p);
        if (is_dir) {
            names[k++] = names[i];
            continue;
        }
        if (ok && S_ISREG(st.st_mode) && names[i][0] != '.' && img_is_image_name(names[i])) files++;
        if (ignored) (*ignored)++;
        free(names[i]);
    }
    *subdirs = names, *n = k;
    if (nfiles) *nfiles = files;
    return 0;
}

/* The image files of a folder (names only), sorted; the other entries are
 * counted as ignored. */
static int list_images(const char *cdir, char ***files, int64_t *n, int64_t *ignored, pst_err *e)
{
    char **names;
    int64_t cnt;
    if (list_dir(cdir, &names, &cnt, e) < 0) return -1;
    int64_t k = 0;
    for (int64_t i = 0; i < cnt; i++) {
        bool keep = names[i][0] != '.' && img_is_image_name(names[i]);
        if (keep) {
            char *p = path_join(cdir, names[i]);
            struct stat st;
            keep = stat(p, &st) == 0 && S_ISREG(st.st_mode);
            free(p);
        }
        if (keep) {
            names[k++] = names[i];
        } else {
            (*ignored)++;
            free(names[i]);
        }
    }
    *files = names, *n = k;
    return 0;
}

/* ---- text files: --synsets, --val-labels ------------------------------------------ */

/* Lines of a text file: *line (getline's buffer) without the end of line
 * (LF or CRLF) and, on the first line, without a UTF-8 byte order mark. */
typedef struct line_reader {
    FILE *f;
    char *line;
    size_t cap;
    int64_t lineno;
} line_reader;

static int lines_open(line_reader *r, const char *path, pst_err *e)
{
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "r");
    if (!r->f) return pst_fail(e, "%s: cannot open: %s", path, strerror(errno));
    return 0;
}

/* 1: a line in r->line; 0: end of file; -1: a read error (in e). */
static int lines_next(line_reader *r, const char *path, pst_err *e)
{
    errno = 0;
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) {
        if (ferror(r->f)) return pst_fail(e, "%s: read error: %s", path, strerror(errno));
        return 0;
    }
    r->lineno++;
    while (n > 0 && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r')) r->line[--n] = 0;
    if (r->lineno == 1 && !strncmp(r->line, "\xEF\xBB\xBF", 3))
        memmove(r->line, r->line + 3, (size_t)n - 2);
    return 1;
}

static void lines_close(line_reader *r)
{
    if (r->f) fclose(r->f);
    free(r->line);
    memset(r, 0, sizeof *r);
}

static bool blank(const char *s)
{
    return s[strspn(s, " \t")] == 0;
}

/* --synsets FILE: "n01440764 tench, Tinca tinca" per line, in class order.
 * Blank lines are allowed only at the end (a class index counts lines). */
static int read_synsets(img_tree *t, const char *path, pst_err *e)
{
    line_reader r;
    if (lines_open(&r, path, e) < 0) return -1;
    int n = 0, cap = 0, rc = 0;
    int64_t blank_line = 0;
    while ((rc = lines_next(&r, path, e)) == 1) {
        if (blank(r.line)) {
            if (!blank_line) blank_line = r.lineno;
            continue;
        }
        if (blank_line) {
            rc = pst_fail(e,
                          "%s: line %lld: empty, expected 'SYNSET words' (blank lines only at "
                          "the end: class indices count lines)",
                          path, (long long)blank_line);
            break;
        }
        char *s = r.line + strspn(r.line, " \t");
        size_t idlen = strcspn(s, " \t");
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            t->classes = pst_realloc(t->classes, sizeof(char *) * (size_t)cap);
            t->words = pst_realloc(t->words, sizeof(char *) * (size_t)cap);
        }
        t->classes[n] = pst_malloc(idlen + 1);
        memcpy(t->classes[n], s, idlen);
        t->classes[n][idlen] = 0;
        char *w = s + idlen;
        w += strspn(w, " \t");
        size_t wl = strlen(w);
        while (wl && (w[wl - 1] == ' ' || w[wl - 1] == '\t')) wl--;
        t->words[n] = pst_malloc(wl + 1);
        memcpy(t->words[n], w, wl);
        t->words[n][wl] = 0;
        n++;
        t->nclasses = n;
        if (n > INT32_MAX / 4) {
            rc = pst_fail(e, "%s: line %lld: too many synsets", path, (long long)r.lineno);
            break;
        }
    }
    lines_close(&r);
    if (rc < 0) return -1;
    if (n == 0)
        return pst_fail(e, "%s: no synsets (expected lines like 'n01440764 tench, Tinca tinca')",
                        path);
    return 0;
}

/* ---- class names to ids ---------------------------------------------------------- */

typedef struct class_ref {
    const char *name;
    int id;
} class_ref;

static int cmp_ref(const void *a, const void *b)
{
    const class_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

static int cmp_ref_name(const void *a, const void *b)
{
    return strcmp(((const class_ref *)a)->name, ((const class_ref *)b)->name);
}

/* The classes sorted by name; a name given twice (a --synsets file) is an
 * error naming both lines. */
static int index_build(class_ref **out, const img_tree *t, const char *synsets, pst_err *e)
{
    class_ref *v = pst_malloc(sizeof(class_ref) * (size_t)t->nclasses);
    for (int i = 0; i < t->nclasses; i++) v[i] = (class_ref){t->classes[i], i};
    qsort(v, (size_t)t->nclasses, sizeof(class_ref), cmp_ref);
    for (int i = 1; i < t->nclasses; i++)
        if (!strcmp(v[i].name, v[i - 1].name)) {
            /* synset i is on line i + 1 (blank lines only at the end) */
            pst_fail(e, "%s: line %d: synset '%s' again (first on line %d), expected each once",
                     synsets, v[i].id + 1, v[i].name, v[i - 1].id + 1);
            free(v);
            return -1;
        }
    *out = v;
    return 0;
}

/* The id of class `name`, or -1. */
static int index_find(const class_ref *v, int n, const char *name)
{
    class_ref key = {name, 0};
    const class_ref *hit = bsearch(&key, v, (size_t)n, sizeof(class_ref), cmp_ref_name);
    return hit ? hit->id : -1;
}

/* "the folders of DIR" or "FILE (--synsets)": where the class names come from. */
static void classes_origin(const img_cfg *c, char *buf, size_t n)
{
    if (c->synsets)
        snprintf(buf, n, "the synsets of %s", c->synsets);
    else
        snprintf(buf, n, "the class folders of %s", c->dir);
}

/* ---- the splits ------------------------------------------------------------------- */

/* A tree DIR/<class>/<images> for `split` (val or test): every folder must be
 * a class. */
static int list_labelled_subdirs(img_tree *t, const img_cfg *c, const char *dir, int split,
                                 const class_ref *ci, pst_err *e)
{
    char **sub;
    int64_t nsub, nflat;
    if (list_subdirs(dir, &sub, &nsub, &t->ignored, &nflat, e) < 0) return -1;
    int rc = 0;
    if (nsub == 0 && nflat > 0 && split == SPLIT_VAL)
        rc = pst_fail(e,
                      "%s: no class subfolders but %lld image files; a flat validation folder "
                      "needs --val-labels FILE",
                      dir, (long long)nflat);
    for (int64_t i = 0; i < nsub && rc == 0; i++) {
        int label = index_find(ci, t->nclasses, sub[i]);
        if (label < 0) {
            char origin[1100];
            classes_origin(c, origin, sizeof origin);
            rc = pst_fail(e, "%s/%s: class '%s' of the %s tree is not one of %s", dir, sub[i],
                          sub[i], img_split_names[split], origin);
            break;
        }
        char *cdir = path_join(dir, sub[i]);
        char **files;
        int64_t nf;
        if (list_images(cdir, &files, &nf, &t->ignored, e) < 0) {
            free(cdir);
            rc = -1;
            break;
        }
        for (int64_t j = 0; j < nf; j++) tree_add(t, path_join(cdir, files[j]), label, split);
        free_names(files, nf);
        free(cdir);
    }
    free_names(sub, nsub);
    return rc;
}

/* The part of a file name before its last '.': the ImageId of a CSV row. */
static char *name_stem(const char *name)
{
    const char *dot = strrchr(name, '.');
    size_t n = dot ? (size_t)(dot - name) : strlen(name);
    char *s = pst_malloc(n + 1);
    memcpy(s, name, n);
    s[n] = 0;
    return s;
}

typedef struct stem_ref {
    char *stem;
    int64_t file;
} stem_ref;

static int cmp_stem(const void *a, const void *b)
{
    return strcmp(((const stem_ref *)a)->stem, ((const stem_ref *)b)->stem);
}

/* Index file: one 1-based class index per line, for the files in sorted
 * name order (ILSVRC2012_validation_ground_truth.txt). */
static int labels_from_indices(line_reader *r, const img_cfg *c, const char *dir, char **files,
                               int64_t nf, int nclasses, int32_t *labels, pst_err *e)
{
    const char *path = c->val_labels;
    int64_t got = 0, blank_line = 0;
    int rc;
    do {
        if (blank(r->line)) {
            if (!blank_line) blank_line = r->lineno;
            continue;
        }
        if (blank_line)
            return pst_fail(e,
                            "%s: line %lld: empty, expected a class index 1-%d (one line per "
                            "file of %s, blank lines only at the end)",
                            path, (long long)blank_line, nclasses, dir);
        if (got == nf)
            return pst_fail(e,
                            "%s: line %lld: a label beyond the %lld image files of %s (expected "
                            "one label per file, in sorted file-name order)",
                            path, (long long)r->lineno, (long long)nf, dir);
        char *s = r->line + strspn(r->line, " \t");
        size_t l = strlen(s);
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\t')) s[--l] = 0;
        int64_t v;
        if (pst_parse_i64(s, &v) < 0 || v < 1 || v > nclasses)
            return pst_fail(e, "%s: line %lld: '%s', expected a class index 1-%d (a line of %s)",
                            path, (long long)r->lineno, s, nclasses, c->synsets);
        labels[got++] = (int32_t)(v - 1);
    } while ((rc = lines_next(r, path, e)) == 1);
    if (rc < 0) return -1;
    if (got < nf)
        return pst_fail(e,
                        "%s: %lld labels for %lld image files in %s (expected one per file, in "
                        "sorted file-name order; %s has none)",
                        path, (long long)got, (long long)nf, dir, files[got]);
    return 0;
}

/* CSV "ImageId,PredictionString" (LOC_val_solution.csv): the label is the
 * first word of PredictionString, a class name (synset); ImageId is the file
 * name without its extension. Every file needs exactly one row. */
static int labels_from_csv(line_reader *r, const img_cfg *c, const char *dir, char **files,
                           int64_t nf, const class_ref *ci, int nclasses, int32_t *labels,
                           pst_err *e)
{
    const char *path = c->val_labels;
    stem_ref *stems = pst_malloc(sizeof(stem_ref) * (size_t)PST_MAX(nf, (int64_t)1));
    int64_t *row_of = pst_malloc(sizeof(int64_t) * (size_t)PST_MAX(nf, (int64_t)1));
    for (int64_t i = 0; i < nf; i++) {
        stems[i] = (stem_ref){name_stem(files[i]), i};
        row_of[i] = 0;
    }
    qsort(stems, (size_t)nf, sizeof(stem_ref), cmp_stem);
    int rc = 0;
    for (int64_t i = 1; i < nf && rc == 0; i++)
        if (!strcmp(stems[i].stem, stems[i - 1].stem))
            rc = pst_fail(e, "%s: %s and %s have the same ImageId '%s' (expected one file each)",
                          dir, files[stems[i - 1].file], files[stems[i].file], stems[i].stem);
    int more = rc == 0 ? lines_next(r, path, e) : 0;
    for (; more == 1; more = lines_next(r, path, e)) {
        if (blank(r->line)) continue;
        char *comma = strchr(r->line, ',');
        if (!comma || comma == r->line) {
            rc = pst_fail(e, "%s: line %lld: '%.60s', expected ImageId,PredictionString", path,
                          (long long)r->lineno, r->line);
            break;
        }
        *comma = 0;
        const char *id = r->line, *pred = comma + 1;
        pred += strspn(pred, " \t");
        size_t sl = strcspn(pred, " \t");
        if (sl == 0) {
            rc = pst_fail(e,
                          "%s: line %lld: ImageId '%s' has an empty PredictionString, expected "
                          "a synset first",
                          path, (long long)r->lineno, id);
            break;
        }
        char syn[256];
        snprintf(syn, sizeof syn, "%.*s", (int)PST_MIN(sl, sizeof syn - 1), pred);
        int label = index_find(ci, nclasses, syn);
        if (label < 0) {
            char origin[1100];
            classes_origin(c, origin, sizeof origin);
            rc = pst_fail(e, "%s: line %lld: synset '%s' of ImageId '%s' is not one of %s", path,
                          (long long)r->lineno, syn, id, origin);
            break;
        }
        stem_ref key = {(char *)(uintptr_t)id, 0};
        stem_ref *hit = bsearch(&key, stems, (size_t)nf, sizeof(stem_ref), cmp_stem);
        if (!hit) {
            rc = pst_fail(e, "%s: line %lld: ImageId '%s' has no image file in %s", path,
                          (long long)r->lineno, id, dir);
            break;
        }
        if (row_of[hit->file]) {
            rc = pst_fail(e, "%s: line %lld: ImageId '%s' again (first on line %lld)", path,
                          (long long)r->lineno, id, (long long)row_of[hit->file]);
            break;
        }
        row_of[hit->file] = r->lineno;
        labels[hit->file] = label;
    }
    if (more < 0) rc = -1;
    for (int64_t i = 0; i < nf && rc == 0; i++)
        if (!row_of[i]) {
            char *stem = name_stem(files[i]);
            rc = pst_fail(e, "%s/%s: no row for ImageId '%s' in %s", dir, files[i], stem, path);
            free(stem);
        }
    for (int64_t i = 0; i < nf; i++) free(stems[i].stem);
    free(stems);
    free(row_of);
    return rc;
}

/* A flat --val-dir labelled by --val-labels (class indices or a CSV; a
 * first line starting with "ImageId," means CSV). */
static int list_flat_val(img_tree *t, const img_cfg *c, const class_ref *ci, pst_err *e)
{
    const char *dir = c->val_dir;
    char **files;
    int64_t nf;
    if (list_images(dir, &files, &nf, &t->ignored, e) < 0) return -1;
    int rc = 0;
    if (nf == 0) {
        free_names(files, nf);
        return pst_fail(e,
                        "%s: no image files (.JPEG, .jpg, .png) directly in it (--val-labels "
                        "labels a flat folder)",
                        dir);
    }
    int32_t *labels = pst_malloc(sizeof(int32_t) * (size_t)nf);
    line_reader r;
    if (lines_open(&r, c->val_labels, e) < 0) {
        rc = -1;
    } else if ((rc = lines_next(&r, c->val_labels, e)) <= 0) {
        if (rc == 0)
            rc = pst_fail(e, "%s: empty, expected a label for each of the %lld files of %s",
                          c->val_labels, (long long)nf, dir);
    } else if (!strncasecmp(r.line, "ImageId,", 8)) {
        if (strcasecmp(r.line, "ImageId,PredictionString"))
            rc = pst_fail(e, "%s: line 1: '%.60s', expected the header ImageId,PredictionString",
                          c->val_labels, r.line);
        else
            rc = labels_from_csv(&r, c, dir, files, nf, ci, t->nclasses, labels, e);
    } else if (!c->synsets) {
        rc = pst_fail(e,
                      "%s: class indices need --synsets FILE (an index counts the lines of the "
                      "synset list; a CSV starts with the header ImageId,PredictionString)",
                      c->val_labels);
    } else {
        rc = labels_from_indices(&r, c, dir, files, nf, t->nclasses, labels, e);
    }
    lines_close(&r);
    for (int64_t i = 0; i < nf && rc == 0; i++)
        tree_add(t, path_join(dir, files[i]), labels[i], SPLIT_VAL);
    free(labels);
    free_names(files, nf);
    return rc < 0 ? -1 : 0;
}

/* Train folders: each one's files to train, or round(F * n) of them to val. */
static int list_train(img_tree *t, const img_cfg *c, char **folders, const int *folder_label,
                      int64_t nfolders, pst_err *e)
{
    img_item *val = NULL;
    int64_t nval = 0, valcap = 0;
    uint64_t rng = c->seed;
    for (int64_t k = 0; k < nfolders; k++) {
        char *cdir = path_join(c->dir, folders[k]);
        char **files;
        int64_t nf;
        if (list_images(cdir, &files, &nf, &t->ignored, e) < 0) {
            free(cdir);
            for (int64_t i = 0; i < nval; i++) free(val[i].path);
            free(val);
            return -1;
        }
        /* round(F * n) of this class to val: a partial Fisher-Yates shuffle
         * of the indices picks them, then they keep their sorted order. */
        int64_t want = (int64_t)(c->val_fraction * (double)nf + 0.5);
        bool *is_val = pst_calloc((size_t)PST_MAX(nf, (int64_t)1), sizeof(bool));
        if (want > 0) {
            int64_t *perm = pst_malloc(sizeof(int64_t) * (size_t)nf);
            for (int64_t i = 0; i < nf; i++) perm[i] = i;
            for (int64_t i = 0; i < want; i++) {
                int64_t j = i + (int64_t)(pst_splitmix64(&rng) % (uint64_t)(nf - i));
                int64_t tmp = perm[i];
                perm[i] = perm[j], perm[j] = tmp;
                is_val[perm[i]] = true;
            }
            free(perm);
        }
        for (int64_t i = 0; i < nf; i++) {
            char *p = path_join(cdir, files[i]);
            if (!is_val[i]) {
                tree_add(t, p, folder_label[k], SPLIT_TRAIN);
                continue;
            }
            if (nval == valcap) {
                valcap = valcap ? 2 * valcap : 256;
                val = pst_realloc(val, sizeof(img_item) * (size_t)valcap);
            }
            val[nval++] = (img_item){p, folder_label[k], SPLIT_VAL};
        }
        free(is_val);
        free_names(files, nf);
        free(cdir);
    }
    for (int64_t i = 0; i < nval; i++) tree_add(t, val[i].path, val[i].label, SPLIT_VAL);
    free(val);
    return 0;
}

int img_list_tree(img_tree *t, const img_cfg *c, pst_err *e)
{
    memset(t, 0, sizeof *t);
    char **folders = NULL;
    int64_t nfolders = 0;
    int *folder_label = NULL;
    class_ref *ci = NULL;
    int rc = -1;
    if (c->synsets && read_synsets(t, c->synsets, e) < 0) goto out;
    if (list_subdirs(c->dir, &folders, &nfolders, &t->ignored, NULL, e) < 0) goto out;
    if (nfolders == 0) {
        pst_fail(e,
                 "%s: no class subdirectories (expected DIR/<class>/ with .JPEG, .jpg or .png "
                 "files)",
                 c->dir);
        goto out;
    }
    if (!c->synsets) {
        if (nfolders > INT32_MAX / 4) {
            pst_fail(e, "%s: too many classes", c->dir);
            goto out;
        }
        t->classes = pst_malloc(sizeof(char *) * (size_t)nfolders);
        for (int64_t i = 0; i < nfolders; i++) t->classes[i] = pst_strdup(folders[i]);
        t->nclasses = (int)nfolders;
    }
    /* pstrain train refuses a one-class data set: say so now, not after the conversion */
    if (t->nclasses == 1) {
        if (c->synsets)
            pst_fail(e,
                     "%s: one synset ('%s'), expected at least 2 (a classifier needs two "
                     "classes)",
                     c->synsets, t->classes[0]);
        else
            pst_fail(e,
                     "%s: one class subdirectory ('%s'), expected at least 2 (a classifier "
                     "needs two classes)",
                     c->dir, t->classes[0]);
        goto out;
    }
    if (index_build(&ci, t, c->synsets, e) < 0) goto out;
    folder_label = pst_malloc(sizeof(int) * (size_t)nfolders);
    for (int64_t k = 0; k < nfolders; k++) {
        folder_label[k] = index_find(ci, t->nclasses, folders[k]);
        if (folder_label[k] < 0) {
            pst_fail(e, "%s/%s: class folder '%s' is not a synset of %s", c->dir, folders[k],
                     folders[k], c->synsets);
            goto out;
        }
    }
    if (c->synsets && nfolders < t->nclasses)
        pst_warn("%lld of the %d synsets of %s have no folder in %s (classes without train "
                 "images)",
                 (long long)(t->nclasses - nfolders), t->nclasses, c->synsets, c->dir);
    if (list_train(t, c, folders, folder_label, nfolders, e) < 0) goto out;
    if (c->val_dir) {
        int64_t before = t->per_split[SPLIT_VAL];
        if ((c->val_labels ? list_flat_val(t, c, ci, e)
                           : list_labelled_subdirs(t, c, c->val_dir, SPLIT_VAL, ci, e)) < 0)
            goto out;
        if (t->per_split[SPLIT_VAL] == before) {
            pst_fail(e, "%s: no image files for the val split under %s/<class>/", c->val_dir,
                     c->val_dir);
            goto out;
        }
    }
    if (c->test_dir) {
        if (list_labelled_subdirs(t, c, c->test_dir, SPLIT_TEST, ci, e) < 0) goto out;
        /* a mistyped --test-dir must not silently give a set without a test split */
        if (t->per_split[SPLIT_TEST] == 0) {
            pst_fail(e, "%s: no image files for the test split under %s/<class>/", c->test_dir,
                     c->test_dir);
            goto out;
        }
    }
    if (t->per_split[SPLIT_TRAIN] == 0) {
        pst_fail(e, "%s: no image files for the train split under %s/<class>/", c->dir, c->dir);
        goto out;
    }
    rc = 0;
out:
    free(ci);
    free(folder_label);
    free_names(folders, nfolders);
    return rc;
}
