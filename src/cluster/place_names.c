/*
 * place_names.c - the names of the placement strategies that placement.c
 * implements: what --placement and `pstrain plan` accept, what the plan's
 * summary and the run summary print. The enum itself is train.h's, the
 * lowest header that needs it (train_cfg.placement).
 */
#include <string.h>

#include "pstrain/placement.h"

static const char *const place_names[] = {"round-robin", "greedy", "partition"};

int place_parse(const char *name, place_kind *kind)
{
    for (size_t i = 0; i < PST_ARRAY_LEN(place_names); i++)
        if (name && !strcmp(name, place_names[i])) {
            *kind = (place_kind)i;
            return 0;
        }
    return -1;
}

const char *place_name(place_kind kind)
{
    if ((int)kind < 0 || (size_t)kind >= PST_ARRAY_LEN(place_names)) return "?";
    return place_names[kind];
}
