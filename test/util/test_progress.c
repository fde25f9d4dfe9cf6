/* test_progress.c - the progress lines as text: the training line
 * (metrics_format_progress) and pstrain-prep's (pst_progress_format) fit a
 * terminal of a given width, dropping the least important fields first and
 * the bar when narrow; log lines (no terminal) carry every field. */
#include <string.h>

#include "check.h"
#include "pstrain/metrics.h"
#include "pstrain/progress.h"

static const metrics_step_rec wide_rec = {.step = 123456,
                                          .total_steps = 937500,
                                          .start_step = 0,
                                          .epoch = 132,
                                          .total_epochs = 1000,
                                          .loss = 0.41234,
                                          .accuracy = 0.853,
                                          .lr = 0.000123456,
                                          .images_per_sec = 123456};

int main(void)
{
    char buf[512];
    /* a terminal of 80 columns: under 80 characters (a full line wraps and
     * every redraw stacks a new one); step, epoch, loss and ETA stay */
    for (int w = 20; w <= 200; w++) {
        metrics_format_progress(&wide_rec, 3725, true, w, buf, sizeof buf);
        CHECK((int)strlen(buf) < w, "width %d: %zu characters: '%s'", w, strlen(buf), buf);
    }
    metrics_format_progress(&wide_rec, 3725, true, 80, buf, sizeof buf);
    CHECK(strstr(buf, "step 123456/937500") && strstr(buf, "epoch 132/1000") &&
              strstr(buf, "loss 0.4123") && strstr(buf, "ETA "),
          "80 columns keep step, epoch, loss, ETA: '%s'", buf);
    CHECK(!strstr(buf, "[#"), "80 columns: no room for the bar: '%s'", buf);
    /* wide: everything, the bar included */
    metrics_format_progress(&wide_rec, 3725, true, 200, buf, sizeof buf);
    CHECK(strstr(buf, "[##") && strstr(buf, "acc 0.853") && strstr(buf, "lr 0.000123") &&
              strstr(buf, "123456 img/s") && strstr(buf, "1h02m"),
          "200 columns: every field: '%s'", buf);
    /* narrow: step and loss survive the longest */
    metrics_format_progress(&wide_rec, 3725, true, 40, buf, sizeof buf);
    CHECK(strstr(buf, "step 123456/937500") && strstr(buf, "loss 0.4123") && !strstr(buf, "lr "),
          "40 columns: '%s'", buf);
    /* the fields dropped first: elapsed, lr, bar, accuracy */
    metrics_format_progress(&wide_rec, 3725, true, 95, buf, sizeof buf);
    CHECK(!strstr(buf, "1h02m") && strstr(buf, "img/s"), "95 columns: '%s'", buf);
    /* a log line: every field but the bar and the elapsed time (the line's
     * prefix has it), whatever its length */
    metrics_format_progress(&wide_rec, 3725, false, 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "step 123456/937500  epoch 132/1000  loss 0.4123  acc 0.853  lr 0.000123  "
                       "123456 img/s  ETA 6h49m"),
          "log line: '%s'", buf);
    /* the ETA of a resumed run counts this run's steps only */
    metrics_step_rec r = wide_rec;
    r.start_step = 123456 - 100, r.step = 123456;
    metrics_format_progress(&r, 10, false, 0, buf, sizeof buf);
    CHECK(strstr(buf, "ETA 22h36m"), "resumed: 100 steps in 10 s, 814044 to go: '%s'", buf);
    /* unknown totals: no "/0", no ETA */
    r = (metrics_step_rec){.step = 5, .epoch = 1, .loss = 1, .images_per_sec = 10};
    metrics_format_progress(&r, 1, false, 0, buf, sizeof buf);
    CHECK(!strncmp(buf, "step 5  epoch 1  loss", 21) && !strstr(buf, "ETA") && !strstr(buf, "/0"),
          "no totals: '%s'", buf);

    /* pstrain-prep's line: the bar shrinks, then goes */
    pst_progress p = {.tty = true, .label = "png", .unit = "images", .total = 1234567};
    pst_progress_format(&p, 617283, "train", 125, false, true, 120, buf, sizeof buf);
    CHECK(strstr(buf, "png [##############................]") && strstr(buf, "617283/1234567"),
          "120 columns, a 30-character bar: '%s'", buf);
    for (int w = 20; w <= 200; w++) {
        pst_progress_format(&p, 617283, "train", 125, false, true, w, buf, sizeof buf);
        CHECK((int)strlen(buf) < w, "width %d: %zu characters: '%s'", w, strlen(buf), buf);
    }
    pst_progress_format(&p, 617283, "train", 125, false, true, 80, buf, sizeof buf);
    CHECK(strstr(buf, "[#") && strstr(buf, "ETA"), "80 columns: a shorter bar: '%s'", buf);
    pst_progress_format(&p, 617283, "train", 125, false, true, 60, buf, sizeof buf);
    CHECK(!strstr(buf, "[") && strstr(buf, "617283/1234567 images"), "60 columns, no bar: '%s'",
          buf);
    pst_progress_format(&p, 617283, "train", 125, false, false, 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "png: 617283/1234567 images, 4938 images/s, 2m05s, ETA 2m05s, train"),
          "log line: '%s'", buf);
    pst_progress_format(&p, 1234567, NULL, 250, true, false, 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "png: 1234567/1234567 images, 4938 images/s, 4m10s"), "final: '%s'", buf);
    return check_exit();
}
