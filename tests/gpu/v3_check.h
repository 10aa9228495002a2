/*
 * v3_check.h -- what the problems of build/v3_check
 * (tests/gpu/v3_check_problem.c) offer its runs (tests/gpu/v3_check.c): a
 * test case, its inputs and fp64 reference, one launch of version 3 checked
 * against them, and the launch helpers.
 */
#ifndef FA_V3_CHECK_H
#define FA_V3_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "fa_gpu.h"

/* One test case: the shape, the window and the inputs' distribution. */
typedef struct {
    const char *name;
    int B, H, H_kv, Sq, Sk, d;
    int wl, wr;        /* window_size_left, right (-1 unbounded) */
    int kind;          /* 0: N(0,1); 1: Q, K in U[4e4, 6.5e4]; 2: S near -7.5e4; 3: Q = -900 U, K = U */
} tcase;

/* A case's inputs and references on the host, its buffers on the GPU. */
typedef struct {
    attn_params p;
    int dtype;
    size_t nq, nk, rows;
    double *Q, *K, *V;        /* inputs rounded to the dtype, as doubles */
    double *O_ref, *L_ref;    /* fp64 attention */
    double *O_emu;            /* materialized in the dtype (PyTorch's math path) */
    void *dq, *dk, *dv, *dO;
    float *dL;
} problem;

/* One checked launch: the relative errors and the counts of wrong entries. */
typedef struct {
    double errO, errL, errE;   /* v3 O, v3 L, emulated O (inf when not finite) */
    size_t nan, bad;           /* NaN/+inf entries; O entries over the bound */
} verdict;

/* Wait at most 20 s for the work queued on the GPU; a launch still running
 * then (a deadlock) or one that failed prints "FAIL what: error" and ends
 * the program with exit status 3. */
void v3_wait_or_die(const char *what);

/* Launches of version 3 from here on run step k (FA_V3_STEP, read at each
 * launch). */
void v3_use_step(int k);

/* The library's pointers of one forward call: Q (B, H, Sq, d), K, V
 * (B, H_kv, Sk, d), O (B, H, Sq, d) in the dtype and L (B, H, Sq) fp32,
 * device pointers, contiguous (the strides zero, the rest NULL). */
fa_ptrs v3_ptrs(const void *q, const void *k, const void *v, void *o, float *L);

/* Draw case tc's inputs in dtype from seed (rounded to the dtype, kept as
 * doubles), compute O_ref, L_ref in fp64 and O_emu materialized in the
 * dtype (S and P rounded to it, as PyTorch's math path does; threads over
 * rows), and copy Q, K, V to new GPU buffers. An allocation or copy that
 * fails ends the program (EXIT_CHECK_FAILED). */
void v3_problem_init(problem *g, const tcase *tc, int dtype, uint64_t seed);

/* Free the host arrays and GPU buffers of v3_problem_init. */
void v3_problem_free(problem *g);

/* Run step `step` of version 3 once on g (outputs poisoned first) and check
 * O and L against the references: the bounds are those of v3_check.c's
 * header. Prints a FAIL line (and with verbose_fail, where O is wrong) on
 * a failure, nothing on a pass; fills v; returns 1 on a failure, else 0. */
int v3_run_case(const problem *g, int step, verdict *v, int verbose_fail, const char *name);

#endif /* FA_V3_CHECK_H */
