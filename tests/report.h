/*
 * tests/report.h -- the result line of tests/run.sh's protocol for the C test
 * programs (build/test_cpu, build/test_ring): "PASS name (details)" or
 * "FAIL name: details [seed S]", counted in n_pass and n_fail. A program
 * includes it once and sets seed (printed on every failure, to replay).
 */
#ifndef FA_TESTS_REPORT_H
#define FA_TESTS_REPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

static int n_pass, n_fail;
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
}

#endif /* FA_TESTS_REPORT_H */
