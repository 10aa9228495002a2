/*
 * stage7_checks.c -- stage 7's checks: the ring against the single-GPU
 * kernels and the fp64 reference of stage 1, on one problem at every ring
 * size (PASS/FAIL lines; the bounds are src/programs/stage7_main.c's).
 * The host side of the ring: C on the CUDA runtime and NCCL.
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
#include "stage7_checks.h"
/* ------------------------------------------------------------------------- */
/* Checks: the ring against the single-GPU kernels and the fp64 reference     */
/* ------------------------------------------------------------------------- */


/* What a path (single GPU or ring) returned, whole tensors. */
typedef struct {
    void *O, *dQ, *dK, *dV;              /* dtype */
    float *L;
    double sent_fwd, sent_bwd;           /* the most any rank sent */
    int ran_bwd;
} host_out;

/* One sequence is what the ring shards: the same rows of queries and keys,
 * every head its own key/value head. Exit 2 with one line otherwise. */
void ring_shape_check(const attn_params *sp)
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
    int np = j->lay.n_pieces, H = j->p.H, H_kv = j->p.H_kv, d = j->p.d;
    for (int r = 0; r < x->G; r++) {
        if (rank_alloc(x, j, r, &rb[r])) fatal(EXIT_CHECK_FAILED, "GPU %d: %s", x->dev[r], fa_error_string());
        rank_bufs *b = &rb[r];
        put_pieces(j, r, b->q, h->q, H, d, es, b->pq, 0);
        put_pieces(j, r, b->kv_home, h->k, H_kv, d, es, b->pk, 0);
        put_pieces(j, r, b->kv_home, h->v, H_kv, d, es, b->pk, 1);
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
            get_pieces(j, r, o->dK, b->dkv, H_kv, d, es, b->pk, 0);
            get_pieces(j, r, o->dV, b->dkv, H_kv, d, es, b->pk, 1);
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
int job_make(ring_job *j, const attn_params *p, int G, int dtype, int kernel, bool want_bwd,
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



/* Check problem p (fp64 inputs) in one dtype at every G of gs on ring
 * contexts made on demand (ctx[G], NULL until used). */
void check_all(ring_ctx **ctx, bool virt, const int *gs, int ng, const attn_problem *p,
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

void stage7_checks_seed(uint64_t s)
{
    seed = s;   /* test_report.h's, printed with every failure */
}

int stage7_checks_summary(void)
{
    printf("stage7: %d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail ? EXIT_CHECK_FAILED : 0;
}
