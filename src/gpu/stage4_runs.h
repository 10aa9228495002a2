/*
 * stage4_runs.h -- stage 4's forward versions run on one problem and judged
 * against the CPU fp64 reference (src/gpu/stage4_runs.c), shared by ./stage4
 * (a table, timings, --csv) and its test suite tests/gpu/stage4_tests.c
 * (PASS/FAIL lines). The checks are those of src/programs/stage4_main.c's
 * header.
 */
#ifndef STAGE4_RUNS_H
#define STAGE4_RUNS_H

#include <stdbool.h>
#include <stdio.h>

#include "common.h"
#include "gpu_host.h"

#define NV_MAX 16     /* versions one run takes at most */

/* How a problem is run: a table or PASS/FAIL lines, which versions. */
typedef struct {
    bool tests;          /* PASS/FAIL lines instead of the table */
    bool cover;          /* also hold the problem's (covering) window bitwise to no mask */
    int repeats;         /* timed runs (0: none) */
    FILE *csv;
    const char *device;
    const options *opt;  /* output files (with one --kernel and --dtype) */
    const int *versions;
    int nv;
    const char *name;    /* the test's name */
} run_mode;

/* The bytes model of every forward version and dtype against stage 1's and
 * stage 3's counted IO (and the tile counts stage 3's) on problems that
 * reach every term, no GPU needed: PASS/FAIL lines; the number of failures. */
int stage4_model_checks(void);
/* Every version of m on in, in every dtype of the list, printed and judged;
 * the number of failed checks. */
int run_problem(const run_mode *m, const gh_inputs *in, const int *dtypes, int nd);

#endif /* STAGE4_RUNS_H */
