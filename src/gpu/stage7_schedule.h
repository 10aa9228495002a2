/*
 * stage7_schedule.h -- the ring schedule of stage 7 (src/gpu/stage7_schedule.c),
 * apart from its program (src/programs/stage7_main.c, the checks and the measurement):
 * G ranks with their streams, events and NCCL communicators, every rank's
 * device buffers for one problem, and the forward and backward passes
 * around the ring. The plan they follow (which rows, which shard, which
 * window) is src/cpu/ring.h; the kernels are fa_gpu.h's and stage7_ring.h's.
 *
 * C on the CUDA runtime and NCCL (their headers are system headers here).
 * Every CUDA, NCCL or library failure is fatal: one line, exit 1.
 */
#ifndef FA_STAGE7_SCHEDULE_H
#define FA_STAGE7_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common.h"
#include "fa_gpu.h"
#include "ring.h"

#define MAX_G 8   /* ranks in one ring: the GPUs of one host */

#define CU(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess)                                                                    \
            fatal(EXIT_CHECK_FAILED, "%s (%s:%d): %s", #call, __FILE__, __LINE__,                 \
                  cudaGetErrorString(e_));                                                        \
    } while (0)
#define NC(call)                                                                                  \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess) fatal(EXIT_CHECK_FAILED, "%s: %s", #call, ncclGetErrorString(r_)); \
    } while (0)
#define FA(call)                                                                                  \
    do {                                                                                          \
        if ((call) != FA_OK) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());                   \
    } while (0)

/* The ring: G ranks, their streams, events and communicators. */
typedef struct {
    int G;
    bool virt;                          /* ranks share GPU 0, copies instead of NCCL */
    bool poison;                        /* poison partial outputs before each call (checks) */
    int dev[MAX_G];
    cudaStream_t comp[MAX_G], comm[MAX_G];
    cudaEvent_t comp_done[MAX_G][2];    /* a step's compute finished (by step parity) */
    cudaEvent_t kv_in[MAX_G][2];        /* the next K/V shard arrived */
    cudaEvent_t acc_in[MAX_G];          /* the travelling dK, dV accumulator arrived */
    cudaEvent_t pre[MAX_G], post[MAX_G];   /* --virtual's stand-in for NCCL's rendezvous */
    ncclComm_t nccl[MAX_G];
    double sent[MAX_G];                 /* bytes each rank sent since the last reset */
} ring_ctx;

/* One problem on the ring: the plan and every rank's buffers. */
typedef struct {
    attn_params p;       /* the whole problem */
    ring_layout lay;
    int dtype;
    int fwd, bwd;        /* versions; bwd -1: no backward */
    int deterministic;   /* backward's mode */
} ring_job;

typedef struct {
    size_t pq, pk, pr;           /* elements of a query piece, a K/V piece, an L piece */
    void *q, *dout, *o;          /* np query pieces (dtype) */
    void *kv_home, *kv[2];       /* the rank's own shard, two buffers for visitors: K pieces, then V */
    void *o_part;                /* one call's output (dtype) and L (fp32) */
    float *l_part;
    float *o_acc, *l;            /* merged O (fp32) and L, np pieces: l is the final L */
    void *dq_part, *dk_part, *dv_part;
    float *dq_acc;               /* np pieces */
    float *home, *tacc[2], *sacc;   /* dK then dV of a shard, fp32: own, travelling, this step's */
    void *dq, *dkv;              /* results in the dtype: np query pieces; the shard's dK then dV */
    void *ws;
    size_t ws_bytes;
} rank_bufs;

enum { RUN_ALL, RUN_COMPUTE, RUN_COMM };   /* what the ring runs: for the overlap measurement */

static inline void *at(void *base, size_t elems, size_t es) { return (char *)base + elems * es; }
static inline void dev(const ring_ctx *x, int r) { CU(cudaSetDevice(x->dev[r])); }

/* G ranks on GPUs 0 .. G-1, or all on GPU 0 (virt: copies in place of NCCL). */
void ctx_init(ring_ctx *x, int G, bool virt);
void ctx_free(ring_ctx *x);
/* Wait for every rank's streams; a CUDA error so far is fatal. */
void ctx_sync(const ring_ctx *x);

/* Device memory of rank r for job j; 0, or -1 (nothing kept) when it does
 * not fit. */
int rank_alloc(const ring_ctx *x, const ring_job *j, int r, rank_bufs *b);
void rank_free(const ring_ctx *x, int r, rank_bufs *b);

/* The passes on every rank (mode RUN_ALL, or RUN_COMPUTE / RUN_COMM alone
 * for the overlap measurement), asynchronous: ctx_sync waits for them. The
 * forward leaves the merged O and L in each rank's o, l; the backward, from
 * those, dQ in dq and the shard's dK, dV in dkv; x->sent counts the bytes
 * each rank sent. */
void ring_forward(ring_ctx *x, const ring_job *j, rank_bufs *rb, int mode);
void ring_backward(ring_ctx *x, const ring_job *j, rank_bufs *rb, int mode);

#endif /* FA_STAGE7_SCHEDULE_H */
