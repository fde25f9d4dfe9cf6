/*
 * timeline.c - the --timeline recorder and the Chrome trace-event writer
 * (timeline.h).
 */
#include "pstrain/timeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool tl_recording = false;

static struct {
    tl_event *ev;
    size_t n, cap, max;
    int64_t dropped;
} tl;

void tl_start(size_t cap)
{
    tl_stop();
    if (!cap) {
        const char *env = getenv("PSTRAIN_TIMELINE_MAX_EVENTS");
        long long v = env ? atoll(env) : 0;
        cap = v > 0 ? (size_t)v : (size_t)1 << 20;
    }
    tl.max = cap;
    tl.cap = PST_MIN(cap, (size_t)4096);
    tl.ev = pst_malloc(sizeof *tl.ev * tl.cap);
    tl_recording = true;
}

void tl_stop(void)
{
    tl_recording = false;
    free(tl.ev);
    memset(&tl, 0, sizeof tl);
}

void tl_record(tl_kind kind, double t0, double t1, int64_t arg)
{
    if (tl.n == tl.cap) {
        if (tl.cap >= tl.max) {
            tl.dropped++;
            return;
        }
        tl.cap = PST_MIN(2 * tl.cap, tl.max);
        tl.ev = pst_realloc(tl.ev, sizeof *tl.ev * tl.cap);
    }
    tl.ev[tl.n++] = (tl_event){t0, t1 > t0 ? t1 : t0, arg, (int32_t)kind, 0};
}

const tl_event *tl_events(size_t *n, int64_t *dropped)
{
    *n = tl.n;
    *dropped = tl.dropped;
    return tl.ev;
}

static const char *const kind_names[TL_NKINDS] = {[TL_WAIT_DATA] = "wait_data",
                                                  [TL_PULL] = "pull",
                                                  [TL_COMPUTE] = "compute",
                                                  [TL_PUSH] = "push",
                                                  [TL_WAIT_VERSION] = "wait_version",
                                                  [TL_APPLY] = "apply",
                                                  [TL_IDLE] = "idle",
                                                  [TL_WAIT_INPUT] = "wait_input",
                                                  [TL_PUBLISH] = "publish",
                                                  [TL_CHECKPOINT] = "checkpoint",
                                                  [TL_EVAL] = "eval"};

/* The name of each kind's argument in the trace's "args". */
static const char *const arg_names[TL_NKINDS] = {[TL_WAIT_DATA] = "ticket",
                                                 [TL_PULL] = "ticket",
                                                 [TL_COMPUTE] = "ticket",
                                                 [TL_PUSH] = "ticket",
                                                 [TL_WAIT_VERSION] = "ticket",
                                                 [TL_APPLY] = "version",
                                                 [TL_IDLE] = NULL,
                                                 [TL_WAIT_INPUT] = NULL,
                                                 [TL_PUBLISH] = "ticket",
                                                 [TL_CHECKPOINT] = "step",
                                                 [TL_EVAL] = "step"};

const char *tl_kind_name(tl_kind kind)
{
    return kind >= 0 && kind < TL_NKINDS ? kind_names[kind] : "unknown";
}

int tl_kind_lane(tl_kind kind)
{
    return kind == TL_CHECKPOINT ? 1 : kind == TL_EVAL ? 2 : 0;
}

/* Sort key for one process's events: lane, then start, then end (an
 * enclosing event before what it encloses). */
static int cmp_event(const void *a, const void *b)
{
    const tl_event *x = a, *y = b;
    int lx = tl_kind_lane((tl_kind)x->kind), ly = tl_kind_lane((tl_kind)y->kind);
    if (lx != ly) return lx - ly;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    return (x->t1 < y->t1) - (x->t1 > y->t1);
}

static void write_meta(FILE *f, const tl_proc *p, const char **sep)
{
    fprintf(f, "%s{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":",
            *sep, p->pid);
    pst_json_str(f, p->name);
    fprintf(f,
            "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\","
            "\"args\":{\"sort_index\":%d}}",
            p->pid, p->pid);
    for (int l = 0; l < p->nlanes; l++) {
        fprintf(
            f,
            ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":",
            p->pid, l);
        pst_json_str(f, p->lane_names[l]);
        fputs("}}", f);
    }
    *sep = ",\n";
}

/* Process p's complete events, sorted per lane, times in microseconds from
 * `origin` on the reference clock. */
static void write_events(FILE *f, const tl_proc *p, double origin, const char **sep)
{
    tl_event *ev = pst_malloc(sizeof *ev * (p->n ? p->n : 1));
    if (p->n) memcpy(ev, p->ev, sizeof *ev * p->n);
    qsort(ev, p->n, sizeof *ev, cmp_event);
    for (size_t i = 0; i < p->n; i++) {
        const tl_kind k = (tl_kind)ev[i].kind;
        const double ts = (ev[i].t0 + p->offset - origin) * 1e6;
        const double dur = (ev[i].t1 - ev[i].t0) * 1e6;
        fprintf(f, "%s{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f",
                *sep, p->pid, tl_kind_lane(k), tl_kind_name(k), ts, dur);
        const char *an = k >= 0 && k < TL_NKINDS ? arg_names[k] : NULL;
        if (an) fprintf(f, ",\"args\":{\"%s\":%lld}", an, (long long)ev[i].arg);
        fputc('}', f);
        *sep = ",\n";
    }
    free(ev);
}

int tl_write(const char *path, const tl_proc *procs, int nprocs, double origin, pst_err *e)
{
    char tmp[4200];
    int renamed = 0;
    FILE *f = pst_out_fopen(path, "w", tmp, sizeof tmp, &renamed);
    if (!f) return pst_fail(e, "%s: cannot write the timeline: %s", path, strerror(errno));
    fputs("{\"traceEvents\":[\n", f);
    const char *sep = "";
    for (int i = 0; i < nprocs; i++) write_meta(f, &procs[i], &sep);
    for (int i = 0; i < nprocs; i++) write_events(f, &procs[i], origin, &sep);
    fputs("\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"clock\":\"CLOCK_MONOTONIC of the "
          "first process, offsets measured at the start\",\"dropped_events\":{",
          f);
    for (int i = 0; i < nprocs; i++)
        fprintf(f, "%s\"%d\":%lld", i ? "," : "", procs[i].pid, (long long)procs[i].dropped);
    fputs("}}}\n", f);
    errno = 0;
    bool bad = ferror(f) || fflush(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = true, err = errno;
    if (!bad && renamed && rename(tmp, path) != 0) bad = true, err = errno;
    if (bad) {
        if (renamed) unlink(tmp);
        return pst_fail(e, "%s: write error on the timeline: %s", path,
                        err ? strerror(err) : "short write");
    }
    return 0;
}
