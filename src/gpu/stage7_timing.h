/*
 * stage7_timing.h -- stage 7's measurement (src/gpu/stage7_timing.c): G GPUs
 * against one, and how much of the ring's traffic the computation hid.
 */
#ifndef STAGE7_TIMING_H
#define STAGE7_TIMING_H

#include <stdio.h>

#include "common.h"
#include "stage7_schedule.h"

#define MAX_REPEATS 64   /* timed runs of one point at most (--repeats) */

/* What a row of the CSV says about where it was measured. */
/* ------------------------------------------------------------------------- */
typedef struct {
    char gpu[256], driver[64], cuda[32], nccl[32], commit[64], date[32], command[1024];
} provenance;

/* The provenance of this run on CUDA device `device` (argv: the command). */
void provenance_of(provenance *pv, int argc, char **argv, int device);
/* --sweep scale on ring context x: N doubling until budget seconds or the
 * memory run out, each N on G GPUs against one; rows to csv. */
void scale_sweep(ring_ctx *x, const options *opt, int dtype, int kernel, double budget,
                 const provenance *pv, FILE *csv);

#endif /* STAGE7_TIMING_H */
