/*
 * stage8_gpu_runs.h -- one case of stage 8's GPU decode kernels against the
 * CPU stage 8 (src/gpu/stage8_gpu_runs.c), for ./stage8_gpu and its test
 * suite tests/gpu/stage8_gpu_tests.c.
 */
#ifndef STAGE8_GPU_RUNS_H
#define STAGE8_GPU_RUNS_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "stage8_decode.h"

/* A case's shape: the decode problem, its cache capacity and window. */
typedef struct {
    const char *name;
    int B, H, H_kv, Sq, d, page, cap, wl, wr, splits;   /* splits 0: the rule's */
    bool short_seqs;                                    /* every length <= 64: splits all in split 0 */
} gcase;

/* A case drawn: the problem in fp64 holding the dtype's values. */
typedef struct {
    decode_problem x;     /* fp64, the dtype's values */
    int splits, max_len;
} host_case;

/* Draw case c of shape p: Q, K, V N(0, 1) rounded to dtype, the sequences'
 * lengths (lens_given, or drawn: 0, 1, random, the capacity), the split
 * count (splits, or the rule's for sms SMs). Free with release. */
void build(host_case *c, const decode_params *p, const int *lens_given, int splits, int sms, int dtype,
           rng_t *rng);
void release(host_case *c);
/* Run case c on the GPU in dtype against the CPU stage 8: one PASS/FAIL
 * line (name, seed printed); 1 when it failed, else 0. */
int run_case(const char *name, host_case *c, int dtype, uint64_t seed);
/* The decode_params of shape g at head dimension d (softmax_scale
 * scale_given when > 0, else 1/sqrt(d)), with spare pages in the pool. */
decode_params params_of(const gcase *g, int d, double scale_given);

#endif /* STAGE8_GPU_RUNS_H */
