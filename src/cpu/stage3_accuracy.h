/*
 * stage3_accuracy.h -- the dQ accuracy model on the CPU
 * (src/cpu/stage3_accuracy.c): stage 3's fp64 backward with O, dS, P
 * rounded to bf16 or fp16 where a GPU kernel rounds them. Called by
 * build/stage3_accuracy's command line (src/programs/stage3_accuracy_main.c).
 */
#ifndef STAGE3_ACCURACY_H
#define STAGE3_ACCURACY_H

#include <stdint.h>

/* PASS/FAIL lines (tests/run.sh) on fresh inputs drawn from seed0; returns
 * 0 when every check passes, EXIT_CHECK_FAILED otherwise. */
int dq_accuracy_tests(uint64_t seed0);
/* Many draws of one shape (N = 192, d = 64, bf16, a = 120, both masks),
 * every variant's error, written as CSV to path (argv: its provenance). */
void dq_accuracy_draws(const char *path, int argc, char **argv, uint64_t seed0);
/* The sweep over a, N, masks and dtypes, written as CSV to path. */
void dq_accuracy_sweep(const char *path, int argc, char **argv, uint64_t seed0);

#endif
