/*
 * test_report.h -- the PASS/FAIL/SKIP lines of the C test programs
 * (tests/run.sh protocol), shared by tests/cpu/test_cpu.c, test_masks.c,
 * test_ring.c and stage 7's GPU suite. Each program sets `seed` (printed
 * with every failure, for --seed replay) and reads n_pass, n_fail, n_skip at
 * the end. Not a library header: included once per program.
 */
#ifndef FA_TEST_REPORT_H
#define FA_TEST_REPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static int n_pass, n_fail, n_skip;
static uint64_t seed;

static void result(bool ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void result(bool ok, const char *name, const char *fmt, ...)
{
    char why[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (ok) {
        printf("PASS %s (%s)\n", name, why);
        n_pass++;
    } else {
        printf("FAIL %s: %s [seed %llu]\n", name, why, (unsigned long long)seed);
        n_fail++;
    }
    fflush(stdout);
}

static rng_t test_rng;   /* seeded with `seed` by test_args */

/* The flags every C test program takes: --quick (fewer draws), --seed S
 * (replay; default a fresh seed) and, where csv is not NULL, --csv FILE
 * (opened with provenance and csv_header). Sets the program name, `seed`
 * and test_rng, and prints the seed line; anything else is one line and
 * exit 2. Returns whether --quick was given. */
static inline bool test_args(int argc, char **argv, const char *csv_header, FILE **csv)
{
    set_prog_name(argv[0]);
    bool quick = false;
    const char *csv_path = NULL;
    seed = fresh_seed();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (csv && !strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
        else fatal(EXIT_BAD_INPUT, "usage: %s [--seed S] [--quick]%s", g_prog, csv ? " [--csv FILE]" : "");
    }
    printf("%s: seed %llu (replay with --seed %llu)\n", g_prog, (unsigned long long)seed,
           (unsigned long long)seed);
    if (csv_path) *csv = csv_open(csv_path, argc, argv, csv_header);
    rng_seed(&test_rng, seed);
    return quick;
}

/* SKIP: what could not run here (no GPU, a version that does not take the
 * problem), never counted as passed. */
static inline void skipped(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
    n_skip++;
}

#endif /* FA_TEST_REPORT_H */
