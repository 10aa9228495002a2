/*
 * stage5_runs.h -- stage 5's backward versions run on one problem and judged
 * against the CPU fp64 backward (src/gpu/stage5_runs.c), shared by ./stage5
 * (a table, timings, --csv) and its test suite tests/gpu/stage5_tests.c
 * (PASS/FAIL lines). The checks, per dtype: fp32 err <= 1e-5; fp16, bf16
 * err of the tiled versions <= 2 x version 0's + u and every version within
 * 1e-2 (fp16), 5e-2 (bf16); no unwritten output; exact zeros where the mask
 * leaves nothing; the deterministic mode bitwise equal over DET_RUNS runs.
 */
#ifndef STAGE5_RUNS_H
#define STAGE5_RUNS_H

#include <stdbool.h>
#include <stdio.h>

#include "common.h"
#include "gpu_host.h"

#define NV_MAX 16     /* versions one run takes at most */
#define DET_RUNS 30   /* runs of the deterministic mode compared bitwise */

/* FA_BWD_CENTER_K when --accurate-dq is given (the backward on K centered
 * over the keys; fa_gpu.h), FA_BWD_DQ_PASS for --accurate-dq=full, else 0:
 * added to every run's flags. */
extern int bwd_run_flags;
void bwd_take_accurate_dq(int *argc, char **argv);

static const gh_tensor GRADS[3] = {GH_DQ, GH_DK, GH_DV};

/* One version's run on one problem in one dtype. */
typedef struct {
    int version, ran;
    gh_err e[3];             /* dQ, dK, dV against the reference */
    size_t nonzero;          /* entries that must be exactly 0 and are not */
    double ms;
    int det_differ;          /* deterministic runs (of DET_RUNS - 1) that differ from the first */
    char det_what[160];
    double *got[3];          /* dQ, dK, dV of the (first) run, fp64 */
} vres;

typedef struct {
    bool tests;          /* PASS/FAIL lines instead of the table */
    bool deterministic;  /* run the deterministic mode DET_RUNS times */
    int repeats;         /* timed runs (0: none) */
    FILE *csv;
    const char *device;
    const options *opt;  /* output files (with one --kernel and --dtype) */
} run_mode;

/* What run_dtype is given besides the problem in one dtype (gh_each_dtype). */
typedef struct {
    const run_mode *m;
    const int *versions;
    int nv;
    const char *name;
} run_job;

/* Version `version` on g against ref (deterministic: also DET_RUNS runs
 * compared bitwise; repeats: timed launches, 0 for none). Free with vres_free. */
vres run_version(gh_problem *g, int version, const gh_ref *ref, bool deterministic, int repeats);
void vres_free(vres *r);
/* Every version of the job (a run_job) on pr in g's dtype, printed and
 * judged; the number of failed checks (gh_each_dtype's callback). */
int run_dtype(void *ctx, const gh_inputs *pr, gh_problem *g, const gh_ref *ref);
/* Every dtype of the list on one problem; the number of failed checks. */
int run_problem(const run_mode *m, const gh_inputs *pr, const int *dtypes, int nd,
                const int *versions, int nv, const char *name);
/* 1 when the dQ pass refuses p in one of the dtypes (its line in
 * fa_error_string()), 0 when it takes them all. */
int dq_pass_refused(const int *dtypes, int nd, const attn_params *p);

#endif /* STAGE5_RUNS_H */
