/*
 * stage6_masks.h -- stage 6's checks (src/cpu/stage6_masks.c) and sweeps
 * (src/cpu/stage6_sweeps.c), called by ./stage6's command line
 * (src/programs/stage6_main.c). Each returns 0 when every check passes,
 * EXIT_CHECK_FAILED otherwise; bad input is fatal(EXIT_BAD_INPUT) before
 * any work.
 */
#ifndef STAGE6_MASKS_H
#define STAGE6_MASKS_H

#include "common.h"

/* The real input under a tour of masks, then random shapes; one line each. */
int masks_run_tour(const options *opt);
/* The one problem the flags describe, in detail (--check rows: sampled rows
 * against the O(N) row-by-row reference instead of stage 1). */
int masks_run_one(const options *opt);
/* --sweep window: errors and tiles visited against the window size, to --csv. */
int masks_sweep_window(const options *opt, int argc, char **argv);
/* --sweep memory: peak memory of child runs of `self` against N, to --csv. */
int masks_sweep_memory(const options *opt, const char *self, int argc, char **argv);
/* --sweep lse: the error of L against |L| (long double reference), to --csv. */
int masks_sweep_lse(const options *opt, int argc, char **argv);

#endif
