/*
 * stage7_ring.c -- Stage 7: one sequence across several GPUs (ring
 * attention, also called context parallelism), on NCCL.
 *
 * What it adds over stages 4-6: nothing inside a kernel. Each GPU keeps its
 * own rows of Q (and of O, L, dO, dQ) and the K/V shards travel around a
 * ring of GPUs; at every step a GPU runs the project's own forward kernel
 * (fa_forward) on its query rows against the shard it holds, while it passes
 * that shard on; the partial results (O_i, L_i) are joined by the merge rule
 * of core/merge.h, the online softmax's rescaling applied to whole results.
 * The backward runs the same ring with the merged O and L: dQ sums where it
 * is, the dK, dV sums travel with their shard and come home after the last
 * step. Under the causal mask each GPU holds two mirrored chunks (src/cpu/ring.h,
 * "zigzag") so that all do the same work, and shard pairs the mask hides
 * entirely are never launched. The plan (which rows, which shard, which
 * window) is src/cpu/ring.c, tested on the CPU in fp64 first (tests/cpu/test_ring.c).
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

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common.h"
#include "fa_gpu.h"
#include "gpu_host.h"
#include "ring.h"
#include "stage7_ring.h"
#include "stage7_schedule.h"
#include "test_report.h"

static const char USAGE[] =
    "stage7: one sequence across G GPUs (ring attention on NCCL): each GPU keeps its query\n"
    "rows, the K/V shards travel around the ring, partial results are merged with the online\n"
    "softmax's rule; forward and backward, checked against the single-GPU kernels.\n"
    "usage: ./stage7 [--gpus G] [--virtual] [options]\n"
    "  --sweep tests   the GPU test suite;  --sweep scale  the measurement (--csv FILE)\n"
    "  --kernel K      forward version (default 2; 1 for fp32), backward the same number\n"
    "With no problem flags: the real input and two random problems, causal and not.\n"
    "Without a GPU: one line saying so, exit 0.";

/* ------------------------------------------------------------------------- */
/* Checks: the ring against the single-GPU kernels and the fp64 reference     */
/* ------------------------------------------------------------------------- */

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

/* What a path (single GPU or ring) returned, whole tensors. */
typedef struct {
    void *O, *dQ, *dK, *dV;              /* dtype */
    float *L;
    double sent_fwd, sent_bwd;           /* the most any rank sent */
    int ran_bwd;
} host_out;

/* One sequence is what the ring shards: the same rows of queries and keys,
 * every head its own key/value head. Exit 2 with one line otherwise. */
static void ring_shape_check(const attn_params *sp)
{
    if (sp->seqlen_q != sp->seqlen_k || sp->H_kv != sp->H)
        fatal(EXIT_BAD_INPUT, "stage 7 shards one sequence: it takes seqlen_k = seqlen_q and H_kv = H "
              "(got %d keys, %d kv heads for %d rows, %d heads)", sp->seqlen_k, sp->H_kv,
              sp->seqlen_q, sp->H);
}

static void host_problem_make(host_problem *h, const attn_problem *src, const char *name, int dtype,
                              bool causal)
{
    memset(h, 0, sizeof *h);
    const attn_params *sp = &src->params;
    ring_shape_check(sp);
    h->p = attn_params_make(sp->B, sp->H, sp->seqlen_q, sp->d, 1.0 / sqrt((double)sp->d));
    attn_params_causal(&h->p, causal);
    h->dtype = dtype;
    snprintf(h->name, sizeof h->name, "%s (%d,%d,%d,%d)%s %s", name, sp->B, sp->H, sp->seqlen_q, sp->d,
             causal ? " causal" : "", fa_dtype_name(dtype));
    size_t n = attn_q_numel(&h->p), es = fa_dtype_bytes(dtype);
    const double *in[4] = {src->Q, src->K, src->V, src->dO};
    void **out[4] = {&h->q, &h->k, &h->v, &h->dout};
    double *r = xmalloc(4 * n, sizeof(double), "rounded inputs");
    for (int t = 0; t < 4; t++) {
        *out[t] = xmalloc(n, es, "input in the dtype");
        fa_host_from_double(*out[t], in[t], n, dtype);
        fa_host_to_double(r + t * n, *out[t], n, dtype);   /* what the GPU sees, exactly */
    }
    gh_ref_compute(&h->ref, &h->p, r, r + n, r + 2 * n, r + 3 * n);
    h->maxV = h->ref.fallback[GH_O];
    free(r);
}

static void host_problem_free(host_problem *h)
{
    free(h->q); free(h->k); free(h->v); free(h->dout);
    gh_ref_free(&h->ref);
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

typedef struct { double O, L, dQ, dK, dV; size_t uf, ub; } errs;   /* uf, ub: unwritten, per pass */

static errs errors_of(const host_problem *h, const host_out *o)
{
    const attn_params *p = &h->p;
    size_t nq = attn_q_numel(p), nk = attn_kv_numel(p), rows = attn_rows(p);
    errs e = {0};
    double *x = xmalloc(nq, sizeof(double), "output as fp64");
    fa_host_to_double(x, o->O, nq, h->dtype);
    e.uf += count_nonfinite(x, nq, false);
    e.O = rel_err(x, h->ref.O, nq, h->maxV);
    double *l = xmalloc(rows, sizeof(double), "L as fp64");
    for (size_t i = 0; i < rows; i++) l[i] = o->L[i];
    e.uf += count_nonfinite(l, rows, true);
    e.L = rel_err(l, h->ref.L, rows, fmax(1, max_abs_finite(h->ref.L, rows)));
    free(l);
    if (o->ran_bwd) {
        fa_host_to_double(x, o->dQ, nq, h->dtype);
        e.ub += count_nonfinite(x, nq, false);
        e.dQ = rel_err(x, h->ref.dQ, nq, max_abs_finite(h->ref.dQ, nq));
        double *y = xmalloc(nk, sizeof(double), "dK as fp64");
        fa_host_to_double(y, o->dK, nk, h->dtype);
        e.ub += count_nonfinite(y, nk, false);
        e.dK = rel_err(y, h->ref.dK, nk, max_abs_finite(h->ref.dK, nk));
        fa_host_to_double(y, o->dV, nk, h->dtype);
        e.ub += count_nonfinite(y, nk, false);
        e.dV = rel_err(y, h->ref.dV, nk, max_abs_finite(h->ref.dV, nk));
        free(y);
    }
    free(x);
    return e;
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
            snprintf(bwhy, n, "the table has no backward version %d (a number names one technique "
                     "in both passes; this one has no backward)", kernel);
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
        skipped(nm, why);
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
    double direct = rel_err(a, a + nq, nq, h->maxV);
    free(a);

    //> ring-checks
    double bO = 2 * es.O + u, bL = 2 * es.L + 4 * 0x1p-24;
    double fb = ring_forward_bytes_formula(&j.p, G, eb);
    bool bitwise = !memcmp(r.O, s.O, nq * eb) && !memcmp(r.L, s.L, rows * sizeof(float));
    bool ok = er.O <= bO && er.L <= bL && er.uf == 0 && r.sent_fwd == fb && (G > 1 || bitwise);
    //< ring-checks
    char nm[260];
    snprintf(nm, sizeof nm, "forward %s", name);
    result(ok, nm, "err O %.2e (single GPU %.2e, bound %.2e), err L %.2e (single %.2e, bound %.2e), "
         "|ring - single| %.2e of max|V|%s, unwritten %zu, bytes sent per GPU %.0f (formula %.0f)",
         er.O, es.O, bO, er.L, es.L, bL, direct, G == 1 ? (bitwise ? ", bitwise equal" : ", NOT bitwise equal") : "",
         er.uf, r.sent_fwd, fb);

    snprintf(nm, sizeof nm, "backward %s", name);
    if (j.bwd < 0) {
        skipped(nm, bwhy);
    } else {
        double bq = 2 * es.dQ + G * u, bk = 2 * es.dK + G * u, bv = 2 * es.dV + G * u;
        double bb = ring_backward_bytes_formula(&j.p, G, eb);
        bool bit = !memcmp(r.dQ, s.dQ, nq * eb) && !memcmp(r.dK, s.dK, nk * eb) && !memcmp(r.dV, s.dV, nk * eb);
        bool need_bit = G == 1 && j.deterministic;
        ok = er.dQ <= bq && er.dK <= bk && er.dV <= bv && er.ub == 0 && r.sent_bwd == bb && (!need_bit || bit);
        result(ok, nm, "err dQ %.2e (single %.2e, bound %.2e), dK %.2e (%.2e, %.2e), dV %.2e (%.2e, %.2e)%s, "
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

static void provenance_of(provenance *pv, int argc, char **argv, int device)
{
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, device));
    snprintf(pv->gpu, sizeof pv->gpu, "%s", prop.name);
    command_line_of("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", pv->driver,
              sizeof pv->driver);
    if (!pv->driver[0]) snprintf(pv->driver, sizeof pv->driver, "unknown");
    int rt = 0, nv = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(pv->cuda, sizeof pv->cuda, "%d.%d", rt / 1000, (rt % 1000) / 10);
    ncclGetVersion(&nv);
    /* NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after */
    if (nv >= 10000) snprintf(pv->nccl, sizeof pv->nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
    else snprintf(pv->nccl, sizeof pv->nccl, "%d.%d.%d", nv / 1000, (nv / 100) % 10, nv % 100);
    source_commit(pv->commit, sizeof pv->commit);
    utc_date(pv->date, sizeof pv->date);
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
            attn_params_causal(&p, causal);
            ring_job j;
            char why[256], bwhy[256];
            if (job_make(&j, &p, x->G, dtype, kernel, true, why, bwhy, sizeof why))
                fatal(EXIT_BAD_INPUT, "%s", why);
            /* Timed in the default mode, as the single-GPU baseline is: the
             * deterministic mode (used by the checks for G = 1's bitwise
             * equality) orders the dQ additions and costs about half the
             * backward's speed, which would be charged to the ring. */
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

static void random_problem(const options *opt, attn_problem *p, int B, int H, int N, int d, uint64_t seed_of_case)
{
    options o = *opt;
    o.batch = B; o.heads = H; o.N = N; o.d = d; o.seed = seed_of_case;
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
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_CAUSAL |
                      OPT_INPUTS | OPT_CSV | OPT_DTYPE | OPT_FP32 | OPT_FP16 | OPT_BF16 | OPT_KERNEL |
                      OPT_REPEATS | OPT_SWEEP | OPT_GPUS | OPT_VIRTUAL | OPT_BUDGET,
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
              fa_version_limit(FA_FORWARD) - 1);
    attn_params probe = attn_params_make(1, 1, 64, 64, 0.125);
    if (fa_check_problem(FA_FORWARD, kernel, dtype, &probe)) fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    bool problem_given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS);
    if (scale && (opt.given & OPT_INPUTS))
        fatal(EXIT_BAD_INPUT, "--sweep scale makes its own inputs on the GPUs; --q --k --v --do are for the checks");
    if (opt.gpus > 1 && kernel == 0 && !opt.virt)
        fatal(EXIT_BAD_INPUT, "--kernel 0: version 0 keeps one cuBLAS handle for one GPU; use --kernel 1 "
              "or 2, or --virtual");
    /* A problem that the flags or files describe is read and checked before
     * any GPU is looked for: a bad file is a bad input whether or not there
     * is a GPU to run it on. */
    attn_problem given = {0};
    if (opt.given & OPT_INPUTS) {
        load_problem(&opt, &given);
        ring_shape_check(&given.params);
        if ((double)given.params.seqlen_q * given.params.seqlen_q > 64e6)
            fatal(EXIT_BAD_INPUT, "--q %s: the CPU reference builds N x N matrices; use N <= 8000",
                  opt.q);
        attn_params p = given.params;
        p.window_size_left = -1;
        p.window_size_right = opt.causal ? 0 : -1;
        ring_job j;
        char why[256], bwhy[256];
        if (job_make(&j, &p, opt.gpus ? opt.gpus : 1, dtype, kernel, false, why, bwhy, sizeof why))
            fatal(EXIT_BAD_INPUT, "%s", why);
    } else if (problem_given && !scale) {
        attn_params p = attn_params_make(opt.batch, opt.heads, opt.N, opt.d, 1.0);
        attn_params_causal(&p, opt.causal);
        ring_job j;
        char why[256], bwhy[256];
        if (job_make(&j, &p, opt.gpus ? opt.gpus : 1, dtype, kernel, false, why, bwhy, sizeof why))
            fatal(EXIT_BAD_INPUT, "%s", why);
    }
    if (scale && opt.gpus == 1) fatal(EXIT_BAD_INPUT, "--sweep scale: needs --gpus 2 or more (it sets G GPUs against one)");
    if (scale) {   /* the first N of the sweep; the others are its doublings */
        int d = opt.given & OPT_D ? opt.d : 128, N = opt.given & OPT_N ? opt.N : 4096;
        attn_params p = attn_params_make(opt.given & OPT_BATCH ? opt.batch : 1, opt.given & OPT_HEADS ? opt.heads : 16,
                                         N, d, 1.0);
        attn_params_causal(&p, true);   /* the stricter layout: 2G chunks */
        ring_job j;
        char why[256], bwhy[256];
        if (job_make(&j, &p, opt.gpus ? opt.gpus : 2, dtype, kernel, false, why, bwhy, sizeof why))
            fatal(EXIT_BAD_INPUT, "%s", why);
    }

    int have = fa_device_count();
    if (have == 0) {
        if (tests) printf("SKIP stage7 GPU tests: no CUDA GPU here\n");
        else printf("stage7: no CUDA GPU here; nothing to run (SKIP: stage 7 needs one GPU, or two for NCCL)\n");
        return 0;
    }
    int G = opt.gpus ? opt.gpus : (have < MAX_G ? have : MAX_G);
    if (!opt.virt && G > have)
        fatal(EXIT_BAD_INPUT, "--gpus %d: only %d GPU%s here (--virtual runs %d shards on one GPU)", G, have,
              have == 1 ? "" : "s", G);
    if (scale && G < 2) fatal(EXIT_BAD_INPUT, "--sweep scale: one GPU here; give --gpus 2 --virtual to run the ring on it");

    char info[256];
    int nv = 0;
    FA(fa_set_device(0));
    FA(fa_device_info(info, sizeof info, NULL));
    ncclGetVersion(&nv);
    printf("stage7: ring attention, G = %d %s; GPU 0: %s; NCCL version code %d\n", G,
           opt.virt ? "virtual ranks on GPU 0 (copies, no NCCL)" : "GPUs (NCCL)", info, nv);
    ring_ctx *ctx[MAX_G + 1] = {0};

    if (scale) {
        ctx[G] = xmalloc(1, sizeof(ring_ctx), "ring context");
        ctx_init(ctx[G], G, opt.virt);
        provenance pv;
        provenance_of(&pv, argc, argv, 0);
        FILE *csv = csv_open(opt.csv, argc, argv,
                             "gpu,driver,cuda,nccl,commit,date,command,transport,gpus,causal,dtype,kernel,"
                             "pass,B,H,N,d,repeats,single_ms,ring_ms,compute_only_ms,comm_only_ms,"
                             "hidden_share,single_tflops,ring_tflops,efficiency,bytes_sent_per_gpu,bytes_formula");
        scale_sweep(ctx[G], &opt, dtype, kernel, opt.budget, &pv, csv);
        csv_close(csv);
        ctx_free(ctx[G]);
        free(ctx[G]);
        return outputs_finish(0);
    }

    seed = (opt.given & OPT_SEED) ? opt.seed : fresh_seed();
    printf("stage7: seed %llu (replay with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    printf("  errors against the CPU fp64 reference on the inputs rounded to the dtype: O / max|V|,\n"
           "  L / max(1, max|L|), dQ dK dV / max|ref|; bounds: 2 x the single-GPU kernel's error + u (O),\n"
           "  + 4 x 2^-24 (L), + G u (gradients), u = the dtype's unit roundoff; G = 1 bitwise\n");
    int gs[2] = {1, G}, ng = G > 1 ? 2 : 1;
    if (opt.given & OPT_INPUTS) {
        check_all(ctx, opt.virt, gs, ng, &given, "input", dtype, kernel, opt.causal);
        free_problem(&given);
    } else if (problem_given) {
        attn_problem p;
        load_problem(&opt, &p);
        if ((double)p.params.seqlen_q * p.params.seqlen_q > 64e6)
            fatal(EXIT_BAD_INPUT, "--n %d: the CPU reference builds N x N matrices; use N <= 8000",
                  p.params.seqlen_q);
        check_all(ctx, opt.virt, gs, ng, &p, "random", dtype, kernel, opt.causal);
        free_problem(&p);
    } else {
        attn_problem p;
        options o = opt;
        o.given &= ~OPT_RANDOM;
        load_problem(&o, &p);   /* the real input */
        for (int causal = 0; causal <= 1; causal++)
            check_all(ctx, opt.virt, gs, ng, &p, "real input", dtype, kernel, causal);
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
            if (cases[i].kernel == 0 && G > 1 && !opt.virt) continue;
            random_problem(&opt, &p, cases[i].B, cases[i].H, cases[i].N, cases[i].d, seed + i);
            check_all(ctx, opt.virt, gs, ng, &p, "random", cases[i].dtype, cases[i].kernel, cases[i].causal);
            free_problem(&p);
        }
    }
    for (int g = 0; g <= MAX_G; g++)
        if (ctx[g]) {
            ctx_free(ctx[g]);
            free(ctx[g]);
        }
    printf("stage7: %d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? EXIT_CHECK_FAILED : 0;
}
