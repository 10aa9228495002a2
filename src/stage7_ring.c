/*
 * stage7_ring.c -- Stage 7: one sequence across several GPUs (ring
 * attention, also called context parallelism), on NCCL.
 *
 * What it adds over stages 4-6: nothing inside a kernel. Each GPU keeps its
 * own rows of Q (and of O, L, dO, dQ) and the K/V shards travel around a
 * ring of GPUs; at every step a GPU runs the project's own forward kernel
 * (fa_forward) on its query rows against the shard it holds, while it passes
 * that shard on; the partial results (O_i, L_i) are joined by the merge rule
 * of src/merge.h, the online softmax's rescaling applied to whole results.
 * The backward runs the same ring with the merged O and L: dQ sums where it
 * is, the dK, dV sums travel with their shard and come home after the last
 * step. Under the causal mask each GPU holds two mirrored chunks (src/ring.h,
 * "zigzag") so that all do the same work, and shard pairs the mask hides
 * entirely are never launched. The plan (which rows, which shard, which
 * window) is src/ring.c, tested on the CPU in fp64 first (tests/test_ring.c).
 *
 * One process drives G GPUs: one NCCL communicator (ncclCommInitAll), one
 * compute stream and one communication stream per GPU. --virtual runs G
 * shards on one GPU instead (streams and device-to-device copies in place of
 * NCCL: the same schedule and events), so that the logic runs on one GPU, and
 * with G > 2 (the travelling accumulators' middle hops) on a two-GPU machine.
 *
 * Build and run:   make stage7 && ./stage7 --gpus 2
 *   ./stage7 --gpus 2                 real input and two random problems, causal and
 *                                     not: ring against the single-GPU kernels
 *   ./stage7 --gpus 2 --random --n 4096 --heads 8 --d 128 --causal --dtype bf16
 *   ./stage7 --gpus 4 --virtual       four shards on one GPU
 *   ./stage7 --sweep tests            the GPU test suite (PASS/FAIL/SKIP lines)
 *   ./stage7 --sweep scale --csv data/gpu/ring.csv [--budget 120]
 *                                     throughput of G GPUs against one, N doubling
 *                                     until the time or memory budget ends
 * Without a GPU: one line saying so, exit 0. Fewer GPUs than --gpus: one
 * line, exit 2. Bad flags: one line, exit 2, before any work.
 *
 * The checks, per problem (inputs rounded to the dtype; fp64 reference of
 * stage 1 on the rounded inputs; u = unit roundoff: 2^-8 bf16, 2^-11 fp16,
 * 2^-24 fp32):
 *   forward   err O (max|O - O_ref| / max|V|) of the ring <= 2 x the single-GPU
 *             kernel's + u: the ring rounds each partial O to the dtype once
 *             more, and a partial is a convex combination of V's rows, so that
 *             rounding moves the merged row by at most u max|V|;
 *             err L (/ max(1, max|L_ref|)) <= 2 x single's + 4 x 2^-24 (L is
 *             fp32 on both paths; the merge adds a few roundings);
 *   backward  err dQ, dK, dV (/ max|ref|) <= 2 x single's + G u (each of the
 *             G partials of a sum is rounded to the dtype once);
 *   G = 1     O, L (and dQ, dK, dV where the backward is deterministic) equal
 *             to the single-GPU kernels' bit for bit;
 *   always    no output left unwritten (all are poisoned with NaN first); the
 *             bytes each GPU sent equal the closed forms of src/ring.h.
 * The factor 2 is stage 4's rule for a kernel against the reference kernel.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common.h"
#include "fa_gpu.h"
#include "ring.h"
#include "stage1_naive.h"
#include "stage7_ring.h"

#define MAX_G 8

static const char USAGE[] =
    "stage7: one sequence across G GPUs (ring attention on NCCL): each GPU keeps its query\n"
    "rows, the K/V shards travel around the ring, partial results are merged with the online\n"
    "softmax's rule; forward and backward, checked against the single-GPU kernels.\n"
    "usage: ./stage7 [--gpus G] [--virtual] [options]\n"
    "  --gpus G        GPUs in the ring (default: every GPU here, at most 8)\n"
    "  --virtual       G shards on GPU 0 (streams and copies instead of NCCL)\n"
    "  --budget S      --sweep scale: stop before the sweep would pass S seconds (default 120)\n"
    "  --sweep tests   the GPU test suite;  --sweep scale  the measurement (--csv FILE)\n"
    "  --kernel K      forward version (default 2; 1 for fp32), backward the same number\n"
    "With no problem flags: the real input and two random problems, causal and not.\n"
    "Without a GPU: one line saying so, exit 0.";

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

/* ------------------------------------------------------------------------- */
/* The flags only stage 7 takes                                               */
/* ------------------------------------------------------------------------- */
typedef struct {
    int gpus;          /* 0: every GPU here */
    bool virt;
    double budget;     /* seconds, --sweep scale */
} ring_flags;

static long strict_long(const char *flag, const char *val, long lo, long hi)
{
    char *end;
    long v = strtol(val, &end, 10);
    if (!*val || *end) fatal(EXIT_BAD_INPUT, "%s: expected an integer, got '%s'", flag, val);
    if (v < lo || v > hi) fatal(EXIT_BAD_INPUT, "%s %ld: out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

/* Take --gpus, --virtual and --budget out of argv (the rest goes to the
 * shared parse_options); returns the new argc. */
static int take_ring_flags(int argc, char **argv, ring_flags *rf)
{
    rf->gpus = 0;
    rf->virt = false;
    rf->budget = 120;
    int out = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const char *names[] = {"--gpus", "--budget"};
        int which = -1;
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(names[k]);
            if (!strncmp(a, names[k], n) && (a[n] == '\0' || a[n] == '=')) {
                which = k;
                if (a[n] == '=') val = a + n + 1;
                else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) val = argv[++i];
                else fatal(EXIT_BAD_INPUT, "%s: missing value", names[k]);
            }
        }
        if (which == 0) rf->gpus = (int)strict_long("--gpus", val, 1, MAX_G);
        else if (which == 1) rf->budget = (double)strict_long("--budget", val, 1, 86400);
        else if (!strcmp(a, "--virtual")) rf->virt = true;
        else if (!strncmp(a, "--virtual=", 10)) fatal(EXIT_BAD_INPUT, "--virtual takes no value");
        else argv[out++] = argv[i];
    }
    argv[out] = NULL;
    return out;
}

/* ------------------------------------------------------------------------- */
/* The ring: G ranks, their streams, events and communicators                 */
/* ------------------------------------------------------------------------- */
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

static void ctx_init(ring_ctx *x, int G, bool virt)
{
    memset(x, 0, sizeof *x);
    x->G = G;
    x->virt = virt;
    for (int r = 0; r < G; r++) {
        x->dev[r] = virt ? 0 : r;
        CU(cudaSetDevice(x->dev[r]));
        CU(cudaStreamCreate(&x->comp[r]));
        CU(cudaStreamCreate(&x->comm[r]));
        for (int k = 0; k < 2; k++) {
            CU(cudaEventCreateWithFlags(&x->comp_done[r][k], cudaEventDisableTiming));
            CU(cudaEventCreateWithFlags(&x->kv_in[r][k], cudaEventDisableTiming));
        }
        CU(cudaEventCreateWithFlags(&x->acc_in[r], cudaEventDisableTiming));
        CU(cudaEventCreateWithFlags(&x->pre[r], cudaEventDisableTiming));
        CU(cudaEventCreateWithFlags(&x->post[r], cudaEventDisableTiming));
    }
    /* The ring needs only send and receive; NVLink SHARP (multicast) is kept
     * off, whatever the environment says: on a shared host it can take the
     * GPUs out of service. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (!virt && G > 1) NC(ncclCommInitAll(x->nccl, G, x->dev));
}

static void ctx_free(ring_ctx *x)
{
    for (int r = 0; r < x->G; r++) {
        cudaSetDevice(x->dev[r]);
        if (!x->virt && x->G > 1) ncclCommDestroy(x->nccl[r]);
        cudaStreamDestroy(x->comp[r]);
        cudaStreamDestroy(x->comm[r]);
        for (int k = 0; k < 2; k++) {
            cudaEventDestroy(x->comp_done[r][k]);
            cudaEventDestroy(x->kv_in[r][k]);
        }
        cudaEventDestroy(x->acc_in[r]);
        cudaEventDestroy(x->pre[r]);
        cudaEventDestroy(x->post[r]);
    }
}

static void ctx_sync(const ring_ctx *x)
{
    for (int r = 0; r < x->G; r++) {
        CU(cudaSetDevice(x->dev[r]));
        CU(cudaStreamSynchronize(x->comp[r]));
        CU(cudaStreamSynchronize(x->comm[r]));
    }
    CU(cudaGetLastError());
}

static void dev(const ring_ctx *x, int r) { CU(cudaSetDevice(x->dev[r])); }
static void stream_wait(cudaStream_t s, cudaEvent_t e) { CU(cudaStreamWaitEvent(s, e, 0)); }
static void record(cudaEvent_t e, cudaStream_t s) { CU(cudaEventRecord(e, s)); }

//> ring-exchange
/* One hop of the ring on every rank's communication stream: rank r sends
 * send[r] to rank r + 1 and receives recv[r] from rank r - 1 (bytes each).
 * When a rank's stream passes this point both its buffers are done with:
 * recv[r] is filled and send[r] may be overwritten. */
static void ring_exchange(ring_ctx *x, void *const *send, void *const *recv, size_t bytes)
{
    int G = x->G;
    if (!x->virt) {
        NC(ncclGroupStart());
        for (int r = 0; r < G; r++) {
            NC(ncclSend(send[r], bytes, ncclUint8, (r + 1) % G, x->nccl[r], x->comm[r]));
            NC(ncclRecv(recv[r], bytes, ncclUint8, (r + G - 1) % G, x->nccl[r], x->comm[r]));
        }
        NC(ncclGroupEnd());
    } else {
        /* One GPU: rank r copies from rank r-1's buffer once r-1 has reached
         * this point, and leaves only when rank r+1 has copied from it. */
        for (int r = 0; r < G; r++) {
            dev(x, r);
            record(x->pre[r], x->comm[r]);
        }
        for (int r = 0; r < G; r++) {
            stream_wait(x->comm[r], x->pre[(r + G - 1) % G]);
            CU(cudaMemcpyAsync(recv[r], send[(r + G - 1) % G], bytes, cudaMemcpyDeviceToDevice,
                               x->comm[r]));
            record(x->post[r], x->comm[r]);
        }
        for (int r = 0; r < G; r++) stream_wait(x->comm[r], x->post[(r + 1) % G]);
    }
    for (int r = 0; r < G; r++) x->sent[r] += (double)bytes;
}
//< ring-exchange

/* ------------------------------------------------------------------------- */
/* One problem on the ring: the plan and every rank's buffers                 */
/* ------------------------------------------------------------------------- */
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

static void *at(void *base, size_t elems, size_t es) { return (char *)base + elems * es; }

/* Device memory of rank r; 0, or -1 (nothing kept) when it does not fit. */
static int rank_alloc(const ring_ctx *x, const ring_job *j, int r, rank_bufs *b)
{
    memset(b, 0, sizeof *b);
    int np = j->lay.n_pieces;
    size_t es = fa_dtype_bytes(j->dtype), f4 = sizeof(float);
    b->pq = ring_q_piece_numel(&j->p, &j->lay);
    b->pk = ring_kv_piece_numel(&j->p, &j->lay);
    b->pr = ring_rows_piece_numel(&j->p, &j->lay);
    size_t ws = 0;
    for (int t = 0; t < x->G; t++) {
        ring_call c[RING_MAX_CALLS];
        int n = ring_calls(&j->lay, &j->p, r, t, c);
        for (int i = 0; i < n; i++) {
            size_t w = fa_workspace_bytes(FA_FORWARD, j->fwd, j->dtype, &c[i].sub);
            if (j->bwd >= 0) {
                size_t wb = fa_workspace_bytes(FA_BACKWARD, j->bwd, j->dtype, &c[i].sub);
                w = w > wb ? w : wb;
            }
            ws = ws > w ? ws : w;
        }
    }
    struct { void **p; size_t bytes; } want[] = {
        {&b->q, np * b->pq * es}, {&b->o, np * b->pq * es}, {&b->kv_home, 2 * np * b->pk * es},
        {&b->kv[0], x->G > 2 ? 2 * np * b->pk * es : 0}, {&b->kv[1], x->G > 1 ? 2 * np * b->pk * es : 0},
        {&b->o_part, b->pq * es}, {(void **)&b->l_part, b->pr * f4}, {(void **)&b->o_acc, np * b->pq * f4},
        {(void **)&b->l, np * b->pr * f4}, {&b->ws, ws},
        {&b->dout, j->bwd >= 0 ? np * b->pq * es : 0}, {&b->dq_part, j->bwd >= 0 ? b->pq * es : 0},
        {&b->dk_part, j->bwd >= 0 ? b->pk * es : 0}, {&b->dv_part, j->bwd >= 0 ? b->pk * es : 0},
        {(void **)&b->dq_acc, j->bwd >= 0 ? np * b->pq * f4 : 0},
        {(void **)&b->home, j->bwd >= 0 ? 2 * np * b->pk * f4 : 0},
        {(void **)&b->tacc[0], j->bwd >= 0 && x->G > 1 ? 2 * np * b->pk * f4 : 0},
        {(void **)&b->tacc[1], j->bwd >= 0 && x->G > 1 ? 2 * np * b->pk * f4 : 0},
        {(void **)&b->sacc, j->bwd >= 0 && x->G > 2 ? 2 * np * b->pk * f4 : 0},
        {&b->dq, j->bwd >= 0 ? np * b->pq * es : 0}, {&b->dkv, j->bwd >= 0 ? 2 * np * b->pk * es : 0},
    };
    dev(x, r);
    size_t n = sizeof want / sizeof want[0];
    for (size_t i = 0; i < n; i++) {
        if (!want[i].bytes) continue;
        if (!(*want[i].p = fa_malloc(want[i].bytes))) {
            for (size_t k = 0; k < i; k++) {
                fa_free(*want[k].p);
                *want[k].p = NULL;
            }
            (void)cudaGetLastError();
            return -1;
        }
    }
    b->ws_bytes = ws;
    return 0;
}

static void rank_free(const ring_ctx *x, int r, rank_bufs *b)
{
    dev(x, r);
    void *all[] = {b->q, b->o, b->kv_home, b->kv[0], b->kv[1], b->o_part, b->l_part, b->o_acc,
                   b->l, b->ws, b->dout, b->dq_part, b->dk_part, b->dv_part, b->dq_acc, b->home,
                   b->tacc[0], b->tacc[1], b->sacc, b->dq, b->dkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fa_free(all[i]);
    memset(b, 0, sizeof *b);
}

/* The K/V shard a rank computes on at step t: its own at step 0, then the
 * visitors, in two buffers by parity (one in use, one being received). */
static void *kv_at_step(rank_bufs *b, int t) { return t == 0 ? b->kv_home : b->kv[t & 1]; }

static void poison_async(const ring_ctx *x, int r, void *p, size_t bytes)
{
    if (x->poison && p) CU(cudaMemsetAsync(p, 0xFF, bytes, x->comp[r]));
}

/* Step t's hop of the K/V shards: every rank passes on the shard it computes
 * on at step t and receives the next one into the other visitor buffer
 * (the caller has made the communication streams wait until that buffer is
 * free); kv_in[r][t & 1] marks the arrival. */
static void hop_kv(ring_ctx *x, rank_bufs *rb, int t, size_t bytes)
{
    void *send[MAX_G], *recv[MAX_G];
    for (int r = 0; r < x->G; r++) {
        send[r] = kv_at_step(&rb[r], t);
        recv[r] = rb[r].kv[(t + 1) & 1];
    }
    ring_exchange(x, send, recv, bytes);
    for (int r = 0; r < x->G; r++) {
        dev(x, r);
        record(x->kv_in[r][t & 1], x->comm[r]);
    }
}

/* A hop of the travelling dK, dV accumulators: each rank sends tacc[from]
 * and receives its predecessor's into tacc[to]; acc_in[r] marks the arrival. */
static void hop_acc(ring_ctx *x, rank_bufs *rb, int from, int to, size_t bytes)
{
    void *send[MAX_G], *recv[MAX_G];
    for (int r = 0; r < x->G; r++) {
        send[r] = rb[r].tacc[from];
        recv[r] = rb[r].tacc[to];
    }
    ring_exchange(x, send, recv, bytes);
    for (int r = 0; r < x->G; r++) {
        dev(x, r);
        record(x->acc_in[r], x->comm[r]);
    }
}

/* The inputs every call shares: query piece a of the rank, key piece k of
 * the shard kv, the workspace. */
static fa_ptrs call_inputs(const rank_bufs *b, void *kv, int a, int k, int np, size_t es)
{
    fa_ptrs f = {0};
    f.q = at(b->q, a * b->pq, es);
    f.k = at(kv, k * b->pk, es);
    f.v = at(kv, (np + k) * b->pk, es);
    f.workspace = b->ws;
    f.workspace_bytes = b->ws_bytes;
    return f;
}

//> ring-forward
/* The forward on every rank: G steps; at step t the shard of rank r - t is
 * computed on while the next one comes in. */
static void ring_forward(ring_ctx *x, const ring_job *j, rank_bufs *rb, int mode)
{
    int G = x->G, np = j->lay.n_pieces, d = j->p.d;
    size_t es = fa_dtype_bytes(j->dtype), shard = 2 * np * rb[0].pk * es;
    for (int r = 0; r < G && mode != RUN_COMM; r++) {   /* accumulators: no key seen yet */
        dev(x, r);
        FA(ring_fill_f32(rb[r].l, np * rb[r].pr, -INFINITY, x->comp[r]));
        CU(cudaMemsetAsync(rb[r].o_acc, 0, np * rb[r].pq * sizeof(float), x->comp[r]));
    }
    for (int t = 0; t < G; t++) {
        if (t < G - 1 && mode != RUN_COMPUTE) {
            /* pass the shard on; receive into the buffer step t-1 computed on */
            for (int r = 0; r < G && t >= 1; r++) {
                dev(x, r);
                stream_wait(x->comm[r], x->comp_done[r][(t - 1) & 1]);
            }
            hop_kv(x, rb, t, shard);
        }
        for (int r = 0; r < G && mode != RUN_COMM; r++) {
            rank_bufs *b = &rb[r];
            dev(x, r);
            if (t >= 1 && mode == RUN_ALL) stream_wait(x->comp[r], x->kv_in[r][(t - 1) & 1]);
            void *kv = mode == RUN_COMPUTE ? b->kv_home : kv_at_step(b, t);
            ring_call c[RING_MAX_CALLS];
            int n = ring_calls(&j->lay, &j->p, r, t, c);
            for (int i = 0; i < n; i++) {
                int a = c[i].q_piece, k = c[i].k_piece;
                fa_ptrs f = call_inputs(b, kv, a, k, np, es);
                f.o = b->o_part;
                f.softmax_lse = b->l_part;
                poison_async(x, r, b->o_part, b->pq * es);
                poison_async(x, r, b->l_part, b->pr * sizeof(float));
                FA(fa_forward(j->fwd, j->dtype, &c[i].sub, &f, x->comp[r]));
                FA(ring_merge(j->dtype, b->o_acc + a * b->pq, b->l + a * b->pr, b->o_part, b->l_part,
                              b->pr, d, x->comp[r]));
            }
            record(x->comp_done[r][t & 1], x->comp[r]);
        }
    }
    for (int r = 0; r < G && mode != RUN_COMM; r++) {
        dev(x, r);
        FA(ring_round(j->dtype, rb[r].o, rb[r].o_acc, np * rb[r].pq, x->comp[r]));
    }
}
//< ring-forward

//> ring-backward
/* The backward on every rank, from the merged O and L of the forward. The
 * K/V shards travel as in the forward; so does an fp32 accumulator of each
 * shard's dK, dV: it starts on the rank after the shard's owner (step 1),
 * picks up each rank's share, and reaches home one hop after step G - 1.
 * A rank's share at step t >= 2 is summed apart (sacc) while the
 * accumulator is still on its way, and added once it has arrived. */
static void ring_backward(ring_ctx *x, const ring_job *j, rank_bufs *rb, int mode)
{
    int G = x->G, np = j->lay.n_pieces;
    size_t es = fa_dtype_bytes(j->dtype), pk = rb[0].pk;
    size_t shard = 2 * np * pk * es, accb = 2 * np * pk * sizeof(float);
    int dq_first[MAX_G][RING_MAX_PIECES];
    for (int r = 0; r < G; r++)
        for (int a = 0; a < np; a++) dq_first[r][a] = 1;
    for (int t = 0; t < G; t++) {
        if (mode != RUN_COMPUTE) {
            for (int r = 0; r < G && t >= 1; r++) {
                dev(x, r);
                stream_wait(x->comm[r], x->comp_done[r][(t - 1) & 1]);
            }
            if (t >= 2) hop_acc(x, rb, (t - 1) & 1, t & 1, accb);   /* finished at step t-1: move on */
            if (t < G - 1) hop_kv(x, rb, t, shard);
        }
        for (int r = 0; r < G && mode != RUN_COMM; r++) {
            rank_bufs *b = &rb[r];
            dev(x, r);
            cudaStream_t s = x->comp[r];
            if (t >= 1 && mode == RUN_ALL) stream_wait(s, x->kv_in[r][(t - 1) & 1]);
            void *kv = mode == RUN_COMPUTE ? b->kv_home : kv_at_step(b, t);
            float *dst = t == 0 ? b->home : t == 1 ? b->tacc[1] : b->sacc;
            int touched[RING_MAX_PIECES] = {0};
            ring_call c[RING_MAX_CALLS];
            int n = ring_calls(&j->lay, &j->p, r, t, c);
            for (int i = 0; i < n; i++) {
                int a = c[i].q_piece, k = c[i].k_piece;
                fa_ptrs f = call_inputs(b, kv, a, k, np, es);
                f.o = at(b->o, a * b->pq, es);
                f.softmax_lse = b->l + a * b->pr;
                f.do_ = at(b->dout, a * b->pq, es);
                f.dq = b->dq_part;
                f.dk = b->dk_part;
                f.dv = b->dv_part;
                poison_async(x, r, b->dq_part, b->pq * es);
                poison_async(x, r, b->dk_part, pk * es);
                poison_async(x, r, b->dv_part, pk * es);
                FA(fa_backward(j->bwd, j->dtype, &c[i].sub, &f, j->deterministic, s));
                FA(ring_accumulate(j->dtype, b->dq_acc + a * b->pq, b->dq_part, b->pq, dq_first[r][a], s));
                FA(ring_accumulate(j->dtype, dst + k * pk, b->dk_part, pk, !touched[k], s));
                FA(ring_accumulate(j->dtype, dst + (np + k) * pk, b->dv_part, pk, !touched[k], s));
                dq_first[r][a] = 0;
                touched[k] = 1;
            }
            for (int k = 0; k < np; k++) {
                if (touched[k] || t >= 2) continue;   /* a piece no query here sees: zero */
                CU(cudaMemsetAsync(dst + k * pk, 0, pk * sizeof(float), s));
                CU(cudaMemsetAsync(dst + (np + k) * pk, 0, pk * sizeof(float), s));
            }
            if (t >= 2) {
                if (mode == RUN_ALL) stream_wait(s, x->acc_in[r]);
                for (int k = 0; k < np; k++) {
                    if (!touched[k]) continue;
                    float *acc = b->tacc[t & 1];
                    FA(ring_accumulate(FA_FP32, acc + k * pk, b->sacc + k * pk, pk, 0, s));
                    FA(ring_accumulate(FA_FP32, acc + (np + k) * pk, b->sacc + (np + k) * pk, pk, 0, s));
                }
            }
            record(x->comp_done[r][t & 1], s);
        }
    }
    if (G > 1 && mode != RUN_COMPUTE) {   /* the last hop: every accumulator home */
        for (int r = 0; r < G; r++) {
            dev(x, r);
            stream_wait(x->comm[r], x->comp_done[r][(G - 1) & 1]);
        }
        hop_acc(x, rb, (G - 1) & 1, G & 1, accb);
    }
    for (int r = 0; r < G && mode != RUN_COMM; r++) {
        rank_bufs *b = &rb[r];
        dev(x, r);
        cudaStream_t s = x->comp[r];
        if (G > 1) {
            if (mode == RUN_ALL) stream_wait(s, x->acc_in[r]);
            FA(ring_accumulate(FA_FP32, b->home, b->tacc[G & 1], 2 * np * pk, 0, s));
        }
        for (int a = 0; a < np; a++)
            if (dq_first[r][a]) CU(cudaMemsetAsync(b->dq_acc + a * b->pq, 0, b->pq * sizeof(float), s));
        FA(ring_round(j->dtype, b->dq, b->dq_acc, np * b->pq, s));
        FA(ring_round(j->dtype, b->dkv, b->home, 2 * np * pk, s));
    }
}
//< ring-backward

/* ------------------------------------------------------------------------- */
/* Checks: the ring against the single-GPU kernels and the fp64 reference     */
/* ------------------------------------------------------------------------- */

/* One problem on the host: the inputs in the dtype (whole tensors) and the
 * fp64 reference of stage 1 on exactly those (rounded) inputs. */
typedef struct {
    char name[96];
    attn_params p;
    int dtype;
    void *q, *k, *v, *dout;              /* (B,H,N,d) / (B,H_kv,N,d) in the dtype */
    double *O_ref, *L_ref, *dQ_ref, *dK_ref, *dV_ref;
    double maxV;
} host_problem;

/* What a path (single GPU or ring) returned, whole tensors. */
typedef struct {
    void *O, *dQ, *dK, *dV;              /* dtype */
    float *L;
    double sent_fwd, sent_bwd;           /* the most any rank sent */
    int ran_bwd;
} host_out;

static void host_problem_make(host_problem *h, const attn_problem *src, const char *name, int dtype,
                              bool causal)
{
    memset(h, 0, sizeof *h);
    const attn_params *sp = &src->params;
    if (sp->seqlen_q != sp->seqlen_k || sp->H_kv != sp->H)
        fatal(EXIT_BAD_INPUT, "stage 7 shards one sequence: it takes seqlen_k = seqlen_q and H_kv = H "
              "(got %d keys, %d kv heads for %d rows, %d heads)", sp->seqlen_k, sp->H_kv,
              sp->seqlen_q, sp->H);
    h->p = attn_params_make(sp->B, sp->H, sp->seqlen_q, sp->d, 1.0 / sqrt((double)sp->d));
    if (causal) h->p.window_size_right = 0;
    h->dtype = dtype;
    snprintf(h->name, sizeof h->name, "%s (%d,%d,%d,%d)%s %s", name, sp->B, sp->H, sp->seqlen_q, sp->d,
             causal ? " causal" : "", fa_dtype_name(dtype));
    size_t n = attn_q_numel(&h->p), rows = attn_rows(&h->p), es = fa_dtype_bytes(dtype);
    const double *in[4] = {src->Q, src->K, src->V, src->dO};
    void **out[4] = {&h->q, &h->k, &h->v, &h->dout};
    double *r = xmalloc(4 * n, sizeof(double), "rounded inputs");
    for (int t = 0; t < 4; t++) {
        *out[t] = xmalloc(n, es, "input in the dtype");
        fa_host_from_double(*out[t], in[t], n, dtype);
        fa_host_to_double(r + t * n, *out[t], n, dtype);   /* what the GPU sees, exactly */
    }
    h->O_ref = xmalloc(4 * n + rows, sizeof(double), "reference");
    h->dQ_ref = h->O_ref + n;
    h->dK_ref = h->dQ_ref + n;
    h->dV_ref = h->dK_ref + n;
    h->L_ref = h->dV_ref + n;
    naive_attention_all_heads(&h->p, r, r + n, r + 2 * n, r + 3 * n, h->O_ref, h->L_ref, h->dQ_ref,
                              h->dK_ref, h->dV_ref, NULL, NULL, NULL, NULL);
    h->maxV = 0;
    for (size_t i = 0; i < n; i++) h->maxV = fmax(h->maxV, fabs(r[2 * n + i]));
    free(r);
}

static void host_problem_free(host_problem *h)
{
    free(h->q); free(h->k); free(h->v); free(h->dout); free(h->O_ref);
}

static void host_out_alloc(host_out *o, const attn_params *p, int dtype)
{
    memset(o, 0, sizeof *o);
    size_t es = fa_dtype_bytes(dtype);
    o->O = xmalloc(attn_q_numel(p), es, "O");
    o->dQ = xmalloc(attn_q_numel(p), es, "dQ");
    o->dK = xmalloc(attn_kv_numel(p), es, "dK");
    o->dV = xmalloc(attn_kv_numel(p), es, "dV");
    o->L = xmalloc(attn_rows(p), sizeof(float), "L");
}
static void host_out_free(host_out *o)
{
    free(o->O); free(o->dQ); free(o->dK); free(o->dV); free(o->L);
}

/* The single-GPU path: one fa_forward and one fa_backward on the whole
 * problem, on the ring's first device. */
static void single_run(int device, const ring_job *j, const host_problem *h, host_out *o)
{
    const attn_params *p = &j->p;
    size_t es = fa_dtype_bytes(j->dtype), nq = attn_q_numel(p) * es, nk = attn_kv_numel(p) * es;
    size_t nl = attn_rows(p) * sizeof(float);
    size_t ws = fa_workspace_bytes(FA_FORWARD, j->fwd, j->dtype, p);
    if (j->bwd >= 0) {
        size_t wb = fa_workspace_bytes(FA_BACKWARD, j->bwd, j->dtype, p);
        ws = ws > wb ? ws : wb;
    }
    CU(cudaSetDevice(device));
    fa_ptrs f = {0};
    void *q = fa_malloc(nq), *k = fa_malloc(nk), *v = fa_malloc(nk), *O = fa_malloc(nq);
    void *dout = fa_malloc(nq), *dq = fa_malloc(nq), *dk = fa_malloc(nk), *dv = fa_malloc(nk);
    float *L = fa_malloc(nl);
    void *w = ws ? fa_malloc(ws) : NULL;
    if (!q || !k || !v || !O || !dout || !dq || !dk || !dv || !L || (ws && !w))
        fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    FA(fa_copy_to_device(q, h->q, nq));
    FA(fa_copy_to_device(k, h->k, nk));
    FA(fa_copy_to_device(v, h->v, nk));
    FA(fa_copy_to_device(dout, h->dout, nq));
    FA(fa_poison(O, nq));
    FA(fa_poison(L, nl));
    FA(fa_poison(dq, nq));
    FA(fa_poison(dk, nk));
    FA(fa_poison(dv, nk));
    f.q = q; f.k = k; f.v = v; f.o = O; f.softmax_lse = L; f.do_ = dout;
    f.dq = dq; f.dk = dk; f.dv = dv; f.workspace = w; f.workspace_bytes = ws;
    FA(fa_forward(j->fwd, j->dtype, p, &f, NULL));
    if (j->bwd >= 0) FA(fa_backward(j->bwd, j->dtype, p, &f, j->deterministic, NULL));
    FA(fa_synchronize());
    FA(fa_copy_to_host(o->O, O, nq));
    FA(fa_copy_to_host(o->L, L, nl));
    if (j->bwd >= 0) {
        FA(fa_copy_to_host(o->dQ, dq, nq));
        FA(fa_copy_to_host(o->dK, dk, nk));
        FA(fa_copy_to_host(o->dV, dv, nk));
        o->ran_bwd = 1;
    }
    void *all[] = {q, k, v, O, dout, dq, dk, dv, L, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fa_free(all[i]);
}

/* Copy one rank's pieces of a whole host tensor to the device (or back):
 * width d, or 1 for L; heads H or H_kv. */
static void put_pieces(const ring_job *j, int r, void *dst, const void *whole, int heads, int width,
                       size_t es, size_t piece_numel, int which_half)
{
    int np = j->lay.n_pieces;
    void *stage = xmalloc(piece_numel, es, "piece");
    for (int a = 0; a < np; a++) {
        ring_piece_get(stage, whole, j->p.B, heads, j->p.seqlen_q, width, es, ring_piece_of(&j->lay, r, a));
        FA(fa_copy_to_device(at(dst, (which_half * np + a) * piece_numel, es), stage, piece_numel * es));
    }
    free(stage);
}
static void get_pieces(const ring_job *j, int r, void *whole, const void *src, int heads, int width,
                       size_t es, size_t piece_numel, int which_half)
{
    int np = j->lay.n_pieces;
    void *stage = xmalloc(piece_numel, es, "piece");
    for (int a = 0; a < np; a++) {
        FA(fa_copy_to_host(stage, at((void *)src, (which_half * np + a) * piece_numel, es), piece_numel * es));
        ring_piece_put(whole, stage, j->p.B, heads, j->p.seqlen_q, width, es, ring_piece_of(&j->lay, r, a));
    }
    free(stage);
}

/* The ring path: every rank's pieces up, forward and backward, pieces down;
 * the bytes each rank sent, per pass. */
static void ring_run(ring_ctx *x, const ring_job *j, const host_problem *h, host_out *o)
{
    rank_bufs rb[MAX_G];
    size_t es = fa_dtype_bytes(j->dtype), f4 = sizeof(float);
    int np = j->lay.n_pieces, H = j->p.H, Hkv = j->p.H_kv, d = j->p.d;
    for (int r = 0; r < x->G; r++) {
        if (rank_alloc(x, j, r, &rb[r])) fatal(EXIT_CHECK_FAILED, "GPU %d: %s", x->dev[r], fa_error_string());
        rank_bufs *b = &rb[r];
        put_pieces(j, r, b->q, h->q, H, d, es, b->pq, 0);
        put_pieces(j, r, b->kv_home, h->k, Hkv, d, es, b->pk, 0);
        put_pieces(j, r, b->kv_home, h->v, Hkv, d, es, b->pk, 1);
        FA(fa_poison(b->o, np * b->pq * es));
        FA(fa_poison(b->l, np * b->pr * f4));
        if (j->bwd >= 0) {
            put_pieces(j, r, b->dout, h->dout, H, d, es, b->pq, 0);
            FA(fa_poison(b->dq, np * b->pq * es));
            FA(fa_poison(b->dkv, 2 * np * b->pk * es));
        }
    }
    x->poison = true;
    memset(x->sent, 0, sizeof x->sent);
    ring_forward(x, j, rb, RUN_ALL);
    ctx_sync(x);
    o->sent_fwd = 0;
    for (int r = 0; r < x->G; r++) o->sent_fwd = fmax(o->sent_fwd, x->sent[r]);
    if (j->bwd >= 0) {
        memset(x->sent, 0, sizeof x->sent);
        ring_backward(x, j, rb, RUN_ALL);
        ctx_sync(x);
        o->sent_bwd = 0;
        for (int r = 0; r < x->G; r++) o->sent_bwd = fmax(o->sent_bwd, x->sent[r]);
        o->ran_bwd = 1;
    }
    x->poison = false;
    for (int r = 0; r < x->G; r++) {
        rank_bufs *b = &rb[r];
        dev(x, r);
        get_pieces(j, r, o->O, b->o, H, d, es, b->pq, 0);
        get_pieces(j, r, o->L, b->l, H, 1, f4, b->pr, 0);
        if (j->bwd >= 0) {
            get_pieces(j, r, o->dQ, b->dq, H, d, es, b->pq, 0);
            get_pieces(j, r, o->dK, b->dkv, Hkv, d, es, b->pk, 0);
            get_pieces(j, r, o->dV, b->dkv, Hkv, d, es, b->pk, 1);
        }
        rank_free(x, r, b);
    }
}

/* max |got - ref| / scale; the same infinity on both sides counts 0, a NaN
 * or a one-sided infinity makes it +inf. */
static double err_of(const double *got, const double *ref, size_t n, double scale)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] == ref[i]) continue;
        double e = fabs(got[i] - ref[i]);
        m = e == e ? fmax(m, e) : INFINITY;
    }
    return m / (scale > 0 ? scale : 1.0);
}
static double max_abs_of(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) m = fmax(m, fabs(x[i]));
    return m;
}

typedef struct { double O, L, dQ, dK, dV; size_t uf, ub; } errs;   /* uf, ub: unwritten, per pass */

static errs errors_of(const host_problem *h, const host_out *o)
{
    const attn_params *p = &h->p;
    size_t nq = attn_q_numel(p), nk = attn_kv_numel(p), rows = attn_rows(p);
    errs e = {0};
    double *x = xmalloc(nq, sizeof(double), "output as fp64");
    fa_host_to_double(x, o->O, nq, h->dtype);
    e.uf += count_nonfinite(x, nq, false);
    e.O = err_of(x, h->O_ref, nq, h->maxV);
    double *l = xmalloc(rows, sizeof(double), "L as fp64");
    for (size_t i = 0; i < rows; i++) l[i] = o->L[i];
    e.uf += count_nonfinite(l, rows, true);
    e.L = err_of(l, h->L_ref, rows, fmax(1, max_abs_of(h->L_ref, rows)));
    free(l);
    if (o->ran_bwd) {
        fa_host_to_double(x, o->dQ, nq, h->dtype);
        e.ub += count_nonfinite(x, nq, false);
        e.dQ = err_of(x, h->dQ_ref, nq, max_abs_of(h->dQ_ref, nq));
        double *y = xmalloc(nk, sizeof(double), "dK as fp64");
        fa_host_to_double(y, o->dK, nk, h->dtype);
        e.ub += count_nonfinite(y, nk, false);
        e.dK = err_of(y, h->dK_ref, nk, max_abs_of(h->dK_ref, nk));
        fa_host_to_double(y, o->dV, nk, h->dtype);
        e.ub += count_nonfinite(y, nk, false);
        e.dV = err_of(y, h->dV_ref, nk, max_abs_of(h->dV_ref, nk));
        free(y);
    }
    free(x);
    return e;
}

static int n_pass, n_fail, n_skip;
static void line(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void line(bool ok, const char *name, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    printf("%s %s%s %s\n", ok ? "PASS" : "FAIL", name, ok ? "" : ":", why);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}
static void skip(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
    n_skip++;
}

/* The job of problem p on G ranks: layout, and the versions' support for the
 * whole problem (the single-GPU path) and for every sub-problem of the plan.
 * 0, or -1 with the reason in why (forward); the backward runs (j->bwd >= 0)
 * only where its version exists and takes all of them, else bwhy says why. */
static int job_make(ring_job *j, const attn_params *p, int G, int dtype, int kernel, bool want_bwd,
                    char *why, char *bwhy, size_t n)
{
    memset(j, 0, sizeof *j);
    j->p = *p;
    j->dtype = dtype;
    j->fwd = kernel;
    j->bwd = -1;
    snprintf(bwhy, n, "not asked for");
    if (ring_layout_make(p, G, &j->lay, why, n)) return -1;
    for (int pass = FA_FORWARD; pass <= FA_BACKWARD; pass++) {
        if (pass == FA_BACKWARD && !want_bwd) break;
        char *w = pass == FA_FORWARD ? why : bwhy;
        if (pass == FA_BACKWARD && !fa_version(FA_BACKWARD, kernel)) {
            snprintf(bwhy, n, "this build has no backward version %d (stage 5 not in it)", kernel);
            break;
        }
        int bad = fa_check_supported(pass, kernel, dtype, p) != FA_OK;
        for (int r = 0; r < G && !bad; r++)
            for (int t = 0; t < G && !bad; t++) {
                ring_call c[RING_MAX_CALLS];
                int nc = ring_calls(&j->lay, p, r, t, c);
                for (int i = 0; i < nc && !bad; i++) bad = fa_check_supported(pass, kernel, dtype, &c[i].sub) != FA_OK;
            }
        if (bad) {
            snprintf(w, n, "%s", fa_error_string());
            if (pass == FA_FORWARD) return -1;
            break;
        }
        if (pass == FA_BACKWARD) {
            j->bwd = kernel;
            j->deterministic = fa_version(FA_BACKWARD, kernel)->deterministic;
        }
    }
    return 0;
}

/* The ring against the single-GPU kernels on one problem: PASS/FAIL lines. */
static void check_problem(ring_ctx *x, const host_problem *h, int kernel, const char *transport)
{
    int G = x->G;
    char name[240], why[256], bwhy[256];
    snprintf(name, sizeof name, "%s, G = %d %s", h->name, G, transport);
    ring_job j;
    if (job_make(&j, &h->p, G, h->dtype, kernel, true, why, bwhy, sizeof why)) {
        char nm[260];
        snprintf(nm, sizeof nm, "forward %s", name);
        skip(nm, why);
        return;
    }
    host_out s, r;
    host_out_alloc(&s, &j.p, j.dtype);
    host_out_alloc(&r, &j.p, j.dtype);
    single_run(x->dev[0], &j, h, &s);
    ring_run(x, &j, h, &r);
    errs es = errors_of(h, &s), er = errors_of(h, &r);
    size_t nq = attn_q_numel(&j.p), nk = attn_kv_numel(&j.p), rows = attn_rows(&j.p);
    size_t eb = fa_dtype_bytes(j.dtype);
    double u = fa_unit_roundoff(j.dtype);

    /* ring against single directly, for the record */
    double *a = xmalloc(2 * nq, sizeof(double), "O pair");
    fa_host_to_double(a, r.O, nq, j.dtype);
    fa_host_to_double(a + nq, s.O, nq, j.dtype);
    double direct = err_of(a, a + nq, nq, h->maxV);
    free(a);

    //> ring-checks
    double bO = 2 * es.O + u, bL = 2 * es.L + 4 * 0x1p-24;
    double fb = ring_forward_bytes_formula(&j.p, G, eb);
    bool bitwise = !memcmp(r.O, s.O, nq * eb) && !memcmp(r.L, s.L, rows * sizeof(float));
    bool ok = er.O <= bO && er.L <= bL && er.uf == 0 && r.sent_fwd == fb && (G > 1 || bitwise);
    //< ring-checks
    char nm[260];
    snprintf(nm, sizeof nm, "forward %s", name);
    line(ok, nm, "err O %.2e (single GPU %.2e, bound %.2e), err L %.2e (single %.2e, bound %.2e), "
         "|ring - single| %.2e of max|V|%s, unwritten %zu, bytes sent per GPU %.0f (formula %.0f)",
         er.O, es.O, bO, er.L, es.L, bL, direct, G == 1 ? (bitwise ? ", bitwise equal" : ", NOT bitwise equal") : "",
         er.uf, r.sent_fwd, fb);

    snprintf(nm, sizeof nm, "backward %s", name);
    if (j.bwd < 0) {
        skip(nm, bwhy);
    } else {
        double bq = 2 * es.dQ + G * u, bk = 2 * es.dK + G * u, bv = 2 * es.dV + G * u;
        double bb = ring_backward_bytes_formula(&j.p, G, eb);
        bool bit = !memcmp(r.dQ, s.dQ, nq * eb) && !memcmp(r.dK, s.dK, nk * eb) && !memcmp(r.dV, s.dV, nk * eb);
        bool need_bit = G == 1 && j.deterministic;
        ok = er.dQ <= bq && er.dK <= bk && er.dV <= bv && er.ub == 0 && r.sent_bwd == bb && (!need_bit || bit);
        line(ok, nm, "err dQ %.2e (single %.2e, bound %.2e), dK %.2e (%.2e, %.2e), dV %.2e (%.2e, %.2e)%s, "
             "unwritten %zu, bytes sent per GPU %.0f (formula %.0f)",
             er.dQ, es.dQ, bq, er.dK, es.dK, bk, er.dV, es.dV, bv,
             G == 1 ? (bit ? ", bitwise equal" : need_bit ? ", NOT bitwise equal" : ", not deterministic") : "",
             er.ub, r.sent_bwd, bb);
    }
    host_out_free(&s);
    host_out_free(&r);
}

/* ------------------------------------------------------------------------- */
/* Measurement: G GPUs against one, and how much of the traffic is hidden     */
/* ------------------------------------------------------------------------- */
typedef struct {
    char gpu[256], driver[64], cuda[32], nccl[32], commit[64], date[32], command[1024];
} provenance;

static void read_line(const char *cmd, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(buf, (int)n, p)) buf[strcspn(buf, "\r\n")] = '\0';
    pclose(p);
}

static void provenance_of(provenance *pv, int argc, char **argv, int device)
{
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, device));
    snprintf(pv->gpu, sizeof pv->gpu, "%s", prop.name);
    read_line("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", pv->driver,
              sizeof pv->driver);
    if (!pv->driver[0]) snprintf(pv->driver, sizeof pv->driver, "unknown");
    int rt = 0, nv = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(pv->cuda, sizeof pv->cuda, "%d.%d", rt / 1000, (rt % 1000) / 10);
    ncclGetVersion(&nv);
    /* NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after */
    if (nv >= 10000) snprintf(pv->nccl, sizeof pv->nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
    else snprintf(pv->nccl, sizeof pv->nccl, "%d.%d.%d", nv / 1000, (nv / 100) % 10, nv % 100);
    const char *c = getenv("FA_COMMIT");
    if (c && *c) snprintf(pv->commit, sizeof pv->commit, "%s", c);
    else read_line("git rev-parse --short HEAD 2>/dev/null", pv->commit, sizeof pv->commit);
    if (!pv->commit[0]) snprintf(pv->commit, sizeof pv->commit, "unknown");
    time_t t = time(NULL);
    strftime(pv->date, sizeof pv->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    size_t at_ = 0;
    pv->command[0] = '\0';
    for (int i = 0; i < argc && at_ < sizeof pv->command - 2; i++)
        at_ += (size_t)snprintf(pv->command + at_, sizeof pv->command - at_, "%s%s", i ? " " : "", argv[i]);
    for (char *q = pv->command; *q; q++)
        if (*q == '"' || *q == ',') *q = ' ';   /* one CSV field, no quoting needed */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

#define MAX_REPEATS 64

/* Median wall time (s) of one ring pass in one mode, after a warm-up. */
static double time_ring(ring_ctx *x, const ring_job *j, rank_bufs *rb, int pass, int mode, int repeats)
{
    double t[MAX_REPEATS];
    for (int i = -1; i < repeats; i++) {
        ctx_sync(x);
        double t0 = now_seconds();
        if (pass == FA_FORWARD) ring_forward(x, j, rb, mode);
        else ring_backward(x, j, rb, mode);
        ctx_sync(x);
        if (i >= 0) t[i] = now_seconds() - t0;
    }
    return median_of(t, repeats);
}

/* The single-GPU kernels on the whole problem, random inputs made on the
 * GPU: median wall time (s) of each pass (bwd 0 when there is none); -1
 * when the problem does not fit in the device's memory. */
static int time_single(int device, const ring_job *j, int repeats, double *fwd, double *bwd)
{
    const attn_params *p = &j->p;
    size_t es = fa_dtype_bytes(j->dtype), nq = attn_q_numel(p) * es, nk = attn_kv_numel(p) * es;
    size_t ws = fa_workspace_bytes(FA_FORWARD, j->fwd, j->dtype, p);
    if (j->bwd >= 0) {
        size_t wb = fa_workspace_bytes(FA_BACKWARD, j->bwd, j->dtype, p);
        ws = ws > wb ? ws : wb;
    }
    CU(cudaSetDevice(device));
    size_t sizes[] = {nq, nk, nk, nq, nq, nq, nk, nk, attn_rows(p) * sizeof(float), ws};
    void *b[10] = {0};
    int nb = j->bwd >= 0 ? 10 : 5;
    for (int i = 0; i < 10; i++) {
        if ((i >= 5 && i < 8 && j->bwd < 0) || !sizes[i]) continue;
        if (!(b[i] = fa_malloc(sizes[i]))) {
            for (int k = 0; k < i; k++) fa_free(b[k]);
            (void)cudaGetLastError();
            return -1;
        }
    }
    (void)nb;
    for (int i = 0; i < 5; i++)
        if (i != 3 && b[i]) FA(ring_fill_random(j->dtype, b[i], sizes[i] / es, 1000 + i, NULL));
    fa_ptrs f = {0};
    f.q = b[0]; f.k = b[1]; f.v = b[2]; f.o = b[3]; f.do_ = b[4];
    f.dq = b[5]; f.dk = b[6]; f.dv = b[7]; f.softmax_lse = b[8]; f.workspace = b[9]; f.workspace_bytes = ws;
    double t[MAX_REPEATS];
    for (int pass = FA_FORWARD; pass <= FA_BACKWARD; pass++) {
        double *out = pass == FA_FORWARD ? fwd : bwd;
        *out = 0;
        if (pass == FA_BACKWARD && j->bwd < 0) break;
        for (int i = -1; i < repeats; i++) {
            FA(fa_synchronize());
            double t0 = now_seconds();
            if (pass == FA_FORWARD) FA(fa_forward(j->fwd, j->dtype, p, &f, NULL));
            else FA(fa_backward(j->bwd, j->dtype, p, &f, 0, NULL));
            FA(fa_synchronize());
            if (i >= 0) t[i] = now_seconds() - t0;
        }
        *out = median_of(t, repeats);
    }
    for (int i = 0; i < 10; i++) fa_free(b[i]);
    return 0;
}

typedef struct { double ring, compute, comm; } ring_times;

/* The ring on random inputs made on the GPUs: each pass in the three modes.
 * -1 when a rank's buffers do not fit. */
static int time_ring_modes(ring_ctx *x, const ring_job *j, int repeats, ring_times *tf, ring_times *tb,
                           double *sent_f, double *sent_b)
{
    rank_bufs rb[MAX_G];
    size_t es = fa_dtype_bytes(j->dtype);
    int np = j->lay.n_pieces;
    for (int r = 0; r < x->G; r++) {
        if (rank_alloc(x, j, r, &rb[r])) {
            for (int k = 0; k < r; k++) rank_free(x, k, &rb[k]);
            return -1;
        }
        FA(ring_fill_random(j->dtype, rb[r].q, np * rb[r].pq, 10 * r + 1, x->comp[r]));
        FA(ring_fill_random(j->dtype, rb[r].kv_home, 2 * np * rb[r].pk, 10 * r + 2, x->comp[r]));
        if (j->bwd >= 0) FA(ring_fill_random(j->dtype, rb[r].dout, np * rb[r].pq, 10 * r + 3, x->comp[r]));
    }
    (void)es;
    memset(x->sent, 0, sizeof x->sent);
    ring_forward(x, j, rb, RUN_ALL);   /* O and L for the backward; the bytes of one pass */
    ctx_sync(x);
    *sent_f = x->sent[0];
    tf->ring = time_ring(x, j, rb, FA_FORWARD, RUN_ALL, repeats);
    tf->compute = time_ring(x, j, rb, FA_FORWARD, RUN_COMPUTE, repeats);
    tf->comm = x->G > 1 ? time_ring(x, j, rb, FA_FORWARD, RUN_COMM, repeats) : 0;
    memset(tb, 0, sizeof *tb);
    *sent_b = 0;
    if (j->bwd >= 0) {
        ring_forward(x, j, rb, RUN_ALL);
        memset(x->sent, 0, sizeof x->sent);
        ring_backward(x, j, rb, RUN_ALL);
        ctx_sync(x);
        *sent_b = x->sent[0];
        tb->ring = time_ring(x, j, rb, FA_BACKWARD, RUN_ALL, repeats);
        tb->compute = time_ring(x, j, rb, FA_BACKWARD, RUN_COMPUTE, repeats);
        tb->comm = x->G > 1 ? time_ring(x, j, rb, FA_BACKWARD, RUN_COMM, repeats) : 0;
    }
    for (int r = 0; r < x->G; r++) rank_free(x, r, &rb[r]);
    return 0;
}

//> ring-hidden
/* The share of the communication that overlapped computation: with T the
 * ring's time, C the same schedule with the transfers left out and M the
 * transfers alone, T = C + M - hidden, so hidden / M = (C + M - T) / M.
 * Clipped to [0, 1]: timing noise can push it past either end. */
static double hidden_share(ring_times t)
{
    if (t.comm <= 0) return 0;
    double h = (t.compute + t.comm - t.ring) / t.comm;
    return h < 0 ? 0 : h > 1 ? 1 : h;
}
//< ring-hidden

static void scale_sweep(ring_ctx *x, const options *opt, int dtype, int kernel, double budget,
                        const provenance *pv, FILE *csv)
{
    int B = opt->given & OPT_BATCH ? opt->batch : 1;
    int H = opt->given & OPT_HEADS ? opt->heads : 16;
    int d = opt->given & OPT_D ? opt->d : 128;
    int repeats = opt->given & OPT_REPEATS ? opt->repeats : 3;
    if (repeats > MAX_REPEATS) repeats = MAX_REPEATS;
    int n0 = opt->given & OPT_N ? opt->N : 4096;
    double start = now_seconds(), last_cost = 0;
    int largest = 0;
    const char *stop = "the N list ended";
    printf("\nstage7 --sweep scale: B = %d, H = %d, d = %d, %s, kernel %d, G = %d (%s), %d repeats, "
           "budget %.0f s\n", B, H, d, fa_dtype_name(dtype), kernel, x->G, x->virt ? "virtual" : "nccl",
           repeats, budget);
    printf("  %-4s %7s %6s %10s %10s %10s %10s %7s %9s %9s %6s %12s\n", "pass", "N", "causal", "1 GPU ms",
           "ring ms", "compute ms", "comm ms", "hidden", "1GPU TF/s", "ring TF/s", "eff", "bytes/GPU");
    for (int N = n0; N <= (1 << 22); N *= 2) {
        double elapsed = now_seconds() - start;
        /* a doubling of N quadruples the work */
        if (last_cost > 0 && elapsed + 4.2 * last_cost > budget) {
            stop = "the time budget";
            break;
        }
        double t0 = now_seconds();
        bool fitted = true;
        for (int causal = 0; causal <= 1 && fitted; causal++) {
            if ((opt->given & OPT_CAUSAL) && !causal) continue;
            attn_params p = attn_params_make(B, H, N, d, 1.0 / sqrt((double)d));
            if (causal) p.window_size_right = 0;
            ring_job j;
            char why[256], bwhy[256];
            if (job_make(&j, &p, x->G, dtype, kernel, true, why, bwhy, sizeof why))
                fatal(EXIT_BAD_INPUT, "%s", why);
            /* Timed in the default mode, as the single-GPU baseline is: the
             * deterministic mode (used by the checks for G = 1's bitwise
             * equality) orders the dQ additions and costs about half the
             * backward's speed, which the first H200 run of this sweep
             * mistook for the ring's (efficiency 0.45-0.57). */
            j.deterministic = 0;
            double s_f = 0, s_b = 0, sent_f = 0, sent_b = 0;
            ring_times tf, tb;
            if (time_single(x->dev[0], &j, repeats, &s_f, &s_b) || time_ring_modes(x, &j, repeats, &tf, &tb, &sent_f, &sent_b)) {
                fitted = false;
                stop = "device memory";
                break;
            }
            for (int pass = FA_FORWARD; pass <= FA_BACKWARD; pass++) {
                if (pass == FA_BACKWARD && j.bwd < 0) continue;
                ring_times t = pass == FA_FORWARD ? tf : tb;
                double single = pass == FA_FORWARD ? s_f : s_b, flops = fa_flops(pass, &p);
                double sent = pass == FA_FORWARD ? sent_f : sent_b;
                double formula = pass == FA_FORWARD ? ring_forward_bytes_formula(&p, x->G, fa_dtype_bytes(dtype))
                                                    : ring_backward_bytes_formula(&p, x->G, fa_dtype_bytes(dtype));
                double eff = single / (x->G * t.ring);
                printf("  %-4s %7d %6d %10.3f %10.3f %10.3f %10.3f %7.3f %9.1f %9.1f %6.3f %12.0f%s\n",
                       pass == FA_FORWARD ? "fwd" : "bwd", N, causal, 1e3 * single, 1e3 * t.ring,
                       1e3 * t.compute, 1e3 * t.comm, hidden_share(t), flops / single / 1e12,
                       flops / t.ring / 1e12, eff, sent, sent == formula ? "" : " (!= formula)");
                if (csv)
                    fprintf(csv, "%s,%s,%s,%s,%s,%s,%s,%s,%d,%d,%s,%d,%s,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,"
                            "%.4f,%.2f,%.2f,%.4f,%.0f,%.0f\n",
                            pv->gpu, pv->driver, pv->cuda, pv->nccl, pv->commit, pv->date, pv->command,
                            x->virt ? "virtual" : "nccl", x->G, causal, fa_dtype_name(dtype), kernel,
                            pass == FA_FORWARD ? "fwd" : "bwd", B, H, N, d, repeats, 1e3 * single,
                            1e3 * t.ring, 1e3 * t.compute, 1e3 * t.comm, hidden_share(t),
                            flops / single / 1e12, flops / t.ring / 1e12, eff, sent, formula);
            }
            fflush(stdout);
            if (csv) fflush(csv);
        }
        if (!fitted) break;
        largest = N;
        last_cost = now_seconds() - t0;
    }
    printf("stage7 --sweep scale: largest N run %d (stopped by %s after %.1f s)\n", largest, stop,
           now_seconds() - start);
    if (csv) fprintf(csv, "# largest N run: %d; stopped by %s\n", largest, stop);
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */
static int parse_dtype(const char *s)
{
    if (!strcmp(s, "fp32")) return FA_FP32;
    if (!strcmp(s, "fp16")) return FA_FP16;
    if (!strcmp(s, "bf16")) return FA_BF16;
    fatal(EXIT_BAD_INPUT, "--dtype %s: stage 7 runs fp32, fp16 or bf16", s);
}

static void random_problem(const options *opt, attn_problem *p, int B, int H, int N, int d, uint64_t seed)
{
    options o = *opt;
    o.batch = B; o.heads = H; o.N = N; o.d = d; o.seed = seed;
    o.random = true;
    o.given |= OPT_RANDOM;
    load_problem(&o, p);
}

/* Check problem p (fp64 inputs) in one dtype at every G of gs on ring
 * contexts made on demand (ctx[G], NULL until used). */
static void check_all(ring_ctx **ctx, bool virt, const int *gs, int ng, const attn_problem *p,
                      const char *name, int dtype, int kernel, bool causal)
{
    host_problem h;
    host_problem_make(&h, p, name, dtype, causal);
    for (int i = 0; i < ng; i++) {
        int G = gs[i];
        if (!ctx[G]) {
            ctx[G] = xmalloc(1, sizeof(ring_ctx), "ring context");
            ctx_init(ctx[G], G, virt && G > 1);
        }
        check_problem(ctx[G], &h, kernel, G == 1 ? "(one GPU)" : virt ? "(virtual, one GPU)" : "(NCCL)");
    }
    host_problem_free(&h);
}

int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    int argc0 = argc;
    char **argv0 = xmalloc((size_t)argc + 1, sizeof(char *), "argv");
    memcpy(argv0, argv, ((size_t)argc + 1) * sizeof(char *));
    ring_flags rf;
    argc = take_ring_flags(argc, argv, &rf);
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_CAUSAL |
                      OPT_INPUTS | OPT_CSV | OPT_DTYPE | OPT_KERNEL | OPT_REPEATS | OPT_SWEEP,
                  USAGE, &opt);
    bool tests = opt.sweep && !strcmp(opt.sweep, "tests"), scale = opt.sweep && !strcmp(opt.sweep, "scale");
    if (opt.sweep && !tests && !scale)
        fatal(EXIT_BAD_INPUT, "--sweep %s: stage 7 knows --sweep tests and --sweep scale", opt.sweep);
    if (scale && !opt.csv) fatal(EXIT_BAD_INPUT, "--sweep scale: give --csv FILE for the measurements");
    if (opt.csv && !scale) fatal(EXIT_BAD_INPUT, "--csv: only --sweep scale writes one");
    if ((opt.given & OPT_REPEATS) && (opt.repeats < 1 || opt.repeats > MAX_REPEATS))
        fatal(EXIT_BAD_INPUT, "--repeats %d: out of range [1, %d]", opt.repeats, MAX_REPEATS);
    int dtype = opt.given & OPT_DTYPE ? parse_dtype(opt.dtype) : FA_BF16;
    int kernel = opt.kernel >= 0 ? opt.kernel : dtype == FA_FP32 ? 1 : 2;
    if (!fa_version(FA_FORWARD, kernel))
        fatal(EXIT_BAD_INPUT, "--kernel %d: forward versions 0 to %d exist", kernel,
              fa_num_versions(FA_FORWARD) - 1);
    attn_params probe = attn_params_make(1, 1, 64, 64, 0.125);
    if (fa_check_problem(FA_FORWARD, kernel, dtype, &probe)) fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    bool problem_given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS);
    if (rf.gpus > 1 && kernel == 0 && !rf.virt)
        fatal(EXIT_BAD_INPUT, "--kernel 0: version 0 keeps one cuBLAS handle for one GPU; use --kernel 1 "
              "or 2, or --virtual");
    /* A problem that the flags describe is checked before any GPU is looked for. */
    if (problem_given && !(opt.given & OPT_INPUTS) && !scale) {
        attn_params p = attn_params_make(opt.batch, opt.heads, opt.N, opt.d, 1.0);
        if (opt.causal) p.window_size_right = 0;
        ring_job j;
        char why[256], bwhy[256];
        if (job_make(&j, &p, rf.gpus ? rf.gpus : 1, dtype, kernel, false, why, bwhy, sizeof why))
            fatal(EXIT_BAD_INPUT, "%s", why);
    }
    if (scale && rf.gpus == 1) fatal(EXIT_BAD_INPUT, "--sweep scale: needs --gpus 2 or more (it sets G GPUs against one)");
    if (scale) {   /* the first N of the sweep; the others are its doublings */
        int d = opt.given & OPT_D ? opt.d : 128, N = opt.given & OPT_N ? opt.N : 4096;
        attn_params p = attn_params_make(opt.given & OPT_BATCH ? opt.batch : 1, opt.given & OPT_HEADS ? opt.heads : 16,
                                         N, d, 1.0);
        p.window_size_right = 0;   /* the stricter layout: 2G chunks */
        ring_job j;
        char why[256], bwhy[256];
        if (job_make(&j, &p, rf.gpus ? rf.gpus : 2, dtype, kernel, false, why, bwhy, sizeof why))
            fatal(EXIT_BAD_INPUT, "%s", why);
    }

    int have = fa_device_count();
    if (have == 0) {
        if (tests) printf("SKIP stage7 GPU tests: no CUDA GPU here\n");
        else printf("stage7: no CUDA GPU here; nothing to run (SKIP: stage 7 needs one GPU, or two for NCCL)\n");
        return 0;
    }
    int G = rf.gpus ? rf.gpus : (have < MAX_G ? have : MAX_G);
    if (!rf.virt && G > have)
        fatal(EXIT_BAD_INPUT, "--gpus %d: only %d GPU%s here (--virtual runs %d shards on one GPU)", G, have,
              have == 1 ? "" : "s", G);
    if (scale && G < 2) fatal(EXIT_BAD_INPUT, "--sweep scale: one GPU here; give --gpus 2 --virtual to run the ring on it");

    char info[256];
    int nv = 0;
    FA(fa_set_device(0));
    FA(fa_device_info(info, sizeof info, NULL));
    ncclGetVersion(&nv);
    printf("stage7: ring attention, G = %d %s; GPU 0: %s; NCCL version code %d\n", G,
           rf.virt ? "virtual ranks on GPU 0 (copies, no NCCL)" : "GPUs (NCCL)", info, nv);
    ring_ctx *ctx[MAX_G + 1] = {0};

    if (scale) {
        ctx[G] = xmalloc(1, sizeof(ring_ctx), "ring context");
        ctx_init(ctx[G], G, rf.virt);
        provenance pv;
        provenance_of(&pv, argc0, argv0, 0);
        FILE *csv = csv_open(opt.csv, argc0, argv0,
                             "gpu,driver,cuda,nccl,commit,date,command,transport,gpus,causal,dtype,kernel,"
                             "pass,B,H,N,d,repeats,single_ms,ring_ms,compute_only_ms,comm_only_ms,"
                             "hidden_share,single_tflops,ring_tflops,efficiency,bytes_sent_per_gpu,bytes_formula");
        scale_sweep(ctx[G], &opt, dtype, kernel, rf.budget, &pv, csv);
        csv_close(csv);
        ctx_free(ctx[G]);
        free(ctx[G]);
        free(argv0);
        return outputs_finish(0);
    }

    uint64_t seed = (opt.given & OPT_SEED) ? opt.seed : fresh_seed();
    printf("stage7: seed %llu (replay with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    printf("  errors against the CPU fp64 reference on the inputs rounded to the dtype: O / max|V|,\n"
           "  L / max(1, max|L|), dQ dK dV / max|ref|; bounds: 2 x the single-GPU kernel's error + u (O),\n"
           "  + 4 x 2^-24 (L), + G u (gradients), u = the dtype's unit roundoff; G = 1 bitwise\n");
    int gs[2] = {1, G}, ng = G > 1 ? 2 : 1;
    if (problem_given || (opt.given & OPT_INPUTS)) {
        attn_problem p;
        load_problem(&opt, &p);
        if ((double)p.params.seqlen_q * p.params.seqlen_q > 64e6)
            fatal(EXIT_BAD_INPUT, "--n %d: the CPU reference builds N x N matrices; use N <= 8000",
                  p.params.seqlen_q);
        check_all(ctx, rf.virt, gs, ng, &p, p.source[0] == 'r' ? "random" : "input", dtype, kernel, opt.causal);
        free_problem(&p);
    } else {
        attn_problem p;
        options o = opt;
        o.given &= ~OPT_RANDOM;
        load_problem(&o, &p);   /* the real input */
        for (int causal = 0; causal <= 1; causal++)
            check_all(ctx, rf.virt, gs, ng, &p, "real input", dtype, kernel, causal);
        free_problem(&p);
        /* random problems; under the mask the N must split into 2G chunks */
        struct { int B, H, N, d, dtype, kernel, causal; } cases[] = {
            {2, 4, 1024, 64, dtype, kernel, 1},
            {1, 2, 768, 128, dtype, kernel, 0},
            {1, 3, 8 * MAX_G * 3, 64, FA_FP16, 2, 1},
            {1, 2, 384, 64, FA_FP32, 1, 1},
            {1, 2, 2 * MAX_G * 105, 32, FA_FP32, 1, 0},
            {1, 1, 2 * MAX_G, 16, FA_BF16, 2, 1},   /* one row per chunk at G = 8 */
        };
        int nc = tests ? (int)(sizeof cases / sizeof cases[0]) : 2;
        for (int i = 0; i < nc; i++) {
            if (cases[i].kernel == 0 && G > 1 && !rf.virt) continue;
            random_problem(&opt, &p, cases[i].B, cases[i].H, cases[i].N, cases[i].d, seed + i);
            check_all(ctx, rf.virt, gs, ng, &p, "random", cases[i].dtype, cases[i].kernel, cases[i].causal);
            free_problem(&p);
        }
    }
    for (int g = 0; g <= MAX_G; g++)
        if (ctx[g]) {
            ctx_free(ctx[g]);
            free(ctx[g]);
        }
    printf("stage7: %d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    free(argv0);
    return n_fail ? EXIT_CHECK_FAILED : 0;
}
