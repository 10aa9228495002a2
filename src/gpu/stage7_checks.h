/*
 * stage7_checks.h -- stage 7's checks (src/gpu/stage7_checks.c): the ring
 * against the single-GPU kernels and the fp64 reference, called by ./stage7
 * (src/programs/stage7_main.c). PASS/FAIL lines through test_report.h.
 */
#ifndef STAGE7_CHECKS_H
#define STAGE7_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "gpu_host.h"
#include "stage7_schedule.h"

/* One problem of the harness (attn_problem) as the GPUs see it: the inputs
 * in the dtype (whole tensors) and the harness's fp64 reference (gh_ref, of
 * stage 1) on exactly those rounded inputs. */
typedef struct {
    char name[96];
    attn_params p;
    int dtype;
    void *q, *k, *v, *dout;              /* (B,H,N,d) / (B,H_kv,N,d) in the dtype */
    gh_ref ref;
    double maxV;
} host_problem;

/* One sequence is what the ring shards: the same rows of queries and keys,
 * every head its own key/value head. Exit 2 with one line otherwise. */
void ring_shape_check(const attn_params *sp);
/* The job of problem p on G ranks: layout, and the versions' support for the
 * whole problem and for every sub-problem of the plan. 0, or -1 with the
 * reason in why (forward); the backward runs (j->bwd >= 0) only where its
 * version exists and takes all of them, else bwhy says why (n bytes each). */
int job_make(ring_job *j, const attn_params *p, int G, int dtype, int kernel, bool want_bwd,
             char *why, char *bwhy, size_t n);
/* Check problem p (fp64 inputs) in one dtype at every G of gs (ng of them)
 * on ring contexts made on demand (ctx[G], NULL until used). */
void check_all(ring_ctx **ctx, bool virt, const int *gs, int ng, const attn_problem *p,
               const char *name, int dtype, int kernel, bool causal);

/* The seed every check draws from and prints with a failure (--seed replays). */
void stage7_checks_seed(uint64_t s);
/* "stage7: N passed, N failed, N skipped" over every check so far; returns
 * EXIT_CHECK_FAILED when one failed, else 0. */
int stage7_checks_summary(void);

#endif /* STAGE7_CHECKS_H */
