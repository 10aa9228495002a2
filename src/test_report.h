/*
 * test_report.h -- the PASS/FAIL/SKIP lines of the C test programs
 * (tests/run.sh protocol), shared by tests/test_cpu.c, test_masks.c,
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

/* SKIP: what could not run here (no GPU, a version that does not take the
 * problem), never counted as passed. */
static void skipped(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
    n_skip++;
}

#endif /* FA_TEST_REPORT_H */
