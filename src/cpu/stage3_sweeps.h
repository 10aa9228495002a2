/*
 * stage3_sweeps.h -- stage 3's sweeps (src/cpu/stage3_sweeps.c), for
 * ./stage3 --sweep io|blocks|formulas --csv FILE (make sweep).
 */
#ifndef STAGE3_SWEEPS_H
#define STAGE3_SWEEPS_H

#include "common.h"

/* The sweep opt->sweep names, written as CSV with provenance to opt->csv
 * (argv: the command); 0, or EXIT_CHECK_FAILED when a counted IO is off its
 * formula. Bad input (an unknown sweep, no --csv) is fatal(EXIT_BAD_INPUT). */
int stage3_sweep(const options *opt, int argc, char **argv);

#endif /* STAGE3_SWEEPS_H */
