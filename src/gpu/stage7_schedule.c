/*
 * stage7_schedule.c -- the ring schedule of stage 7 (src/gpu/stage7_schedule.h):
 * the ranks' streams and events, one hop of the ring on NCCL (or on one GPU
 * with copies), the ranks' buffers, and the forward and backward passes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stage7_ring.h"
#include "stage7_schedule.h"

/* ------------------------------------------------------------------------- */
/* The ring: G ranks, their streams, events and communicators                 */
/* ------------------------------------------------------------------------- */
void ctx_init(ring_ctx *x, int G, bool virt)
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

void ctx_free(ring_ctx *x)
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

void ctx_sync(const ring_ctx *x)
{
    for (int r = 0; r < x->G; r++) {
        CU(cudaSetDevice(x->dev[r]));
        CU(cudaStreamSynchronize(x->comp[r]));
        CU(cudaStreamSynchronize(x->comm[r]));
    }
    CU(cudaGetLastError());
}

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
        //> ring-hop
        NC(ncclGroupStart());
        for (int r = 0; r < G; r++) {
            NC(ncclSend(send[r], bytes, ncclUint8, (r + 1) % G, x->nccl[r], x->comm[r]));
            NC(ncclRecv(recv[r], bytes, ncclUint8, (r + G - 1) % G, x->nccl[r], x->comm[r]));
        }
        NC(ncclGroupEnd());
        //< ring-hop
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

/* Device memory of rank r; 0, or -1 (nothing kept) when it does not fit. */
int rank_alloc(const ring_ctx *x, const ring_job *j, int r, rank_bufs *b)
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

void rank_free(const ring_ctx *x, int r, rank_bufs *b)
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
void ring_forward(ring_ctx *x, const ring_job *j, rank_bufs *rb, int mode)
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
void ring_backward(ring_ctx *x, const ring_job *j, rank_bufs *rb, int mode)
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
