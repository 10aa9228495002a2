/*
 * stage5_main.c -- Stage 5's host program: the CUDA backward kernels of
 * kernels/stage5_bwd_*.cu, checked against the CPU fp64 backward and timed.
 *
 * What it adds over stage 4: the backward pass on the GPU (version 0
 * materialized with cuBLAS, 1 tiled on the CUDA cores, 2 and 4 tiled on the
 * tensor cores: 4 on blocks of twice the keys; 3 on Hopper's own hardware,
 * TMA and wgmma), masks, seqlen_q != seqlen_k and grouped heads, and a deterministic
 * mode. Plain C over core/fa_gpu.h and the shared GPU host code
 * src/gpu_host.[ch].
 *
 * Build and run:   make stage5 && ./stage5
 *   ./stage5                      real input (all-MiniLM-L6-v2 Q, K, V and its dO,
 *                                 (1,12,148,32)) and two random problems (one
 *                                 causal with grouped heads); every version, fp32,
 *                                 fp16 and bf16
 *   ./stage5 --kernel 2 --dtype bf16 --random --n 4096 --d 128 --heads 4 --causal --repeats 20
 *   ./stage5 --deterministic      also run each version 30 times in its deterministic
 *                                 mode and check dQ, dK, dV bitwise equal
 *   ./stage5 --sweep tests        the GPU test suite: PASS/FAIL lines (make gpu-test);
 *                                 --kernel K narrows it to versions K and 0
 *   ./stage5 --sweep accuracy     the far-logit tests of --sweep tests alone (dQ accuracy)
 *   ./stage5 --sweep small        a few small problems reaching every code path (for
 *                                 compute-sanitizer); --kernel, --dtype narrow it
 *   ./stage5 --sweep model        the IO models against stage 1's and stage 3's
 *                                 counts (no GPU needed)
 *   ./stage5 --kernel 1 --dtype fp32 --q q.npy --k k.npy --v v.npy --do do.npy \
 *            --dq dq.npy --dk dk.npy --dv dv.npy --out o.npy --lse l.npy
 * Without a GPU it prints one line saying so and exits 0 (bad input is still
 * refused first, with exit 2).
 *
 * What the backward is given: Q, K, V, dO rounded to the dtype, and O, L of
 * the fp64 reference on those inputs (O rounded to the dtype, L to fp32), so
 * the errors are the backward's own. --out and --lse write that O and L.
 *
 * What it prints, per (problem, dtype, version): err = max |X - X_ref| /
 * max |X_ref| for X = dQ, dK, dV (when X_ref is all zero, e.g. N = 1 where
 * dQ = dK = 0 exactly, the denominator is the size of the terms that cancel:
 * softmax_scale max|dO| max|V| max|K| for dQ, the same with Q for dK, max|dO|
 * for dV); unwritten = NaN or infinity left in an output (outputs are
 * poisoned with NaN before every launch); time, TFLOP/s (fa_flops), model
 * bytes (fa_model_bytes). Then the checks:
 *   fp32        err <= 1e-5 for dQ, dK and dV
 *   fp16, bf16  versions 1 to 4: err <= 2 x version 0's err on the same
 *               inputs + u, the dtype's unit roundoff, so that two correctly
 *               rounded results never fail (version 0 is the materialized computation in
 *               the dtype: P rounded to it, as PyTorch's materialized
 *               attention keeps it), and every version within a sanity bound
 *               (fp16 1e-2, bf16 5e-2) so that a broken version 0 cannot
 *               loosen the rule
 *   every dtype no unwritten output; rows that see no key have dQ rows of
 *               exactly 0 and keys nobody sees dK, dV rows of exactly 0
 *   far logits  q = (1, 0.1 z), k = (-120 sqrt(d), 0.1 z) (every logit near
 *               -120, a common part of K of size 960): for fp16, bf16 also
 *               err dQ <= 2 e_round + u, e_round the error of the fp64 dQ
 *               rounded to the dtype (what PyTorch's math backend attains),
 *               which the backward meets with K centered over the keys
 *               (FA_BWD_CENTER_K, --accurate-dq; kernels/stage5_bwd_center.cu,
 *               bwd-center); without it each version must fail that rule,
 *               so that the inputs test it (src/stage3_accuracy.c models why);
 *               with FA_BWD_DQ_PASS (--accurate-dq=full) err dQ <= 2 e_round,
 *               the rule without the + u (kernels/stage5_bwd_dq.cu)
 *   fault inputs (huge or very negative logits): every output finite
 *               (the errors are printed; P = exp(S - L) cannot be accurate
 *               when the rounding of S and L in fp32, |L| 2^-24, is not small)
 * A failed check prints, on lines starting with '#', which tensor, the
 * entries off by more than the allowed error (count, the worst, the first
 * few with (b, h, row, col), got and reference), and the ranges of heads and
 * rows, and of columns, they fall in, so a wrong tile, row or fragment shows
 * as a pattern (rows repeating every 64: a tile edge; columns in groups of 8
 * or 16: an mma fragment). Exit 0 only when every check passes; 2 on bad
 * input (one line).
 *
 * Cost: the CPU reference is about 12 B H Sq Sk d fp64 FLOPs per problem
 * (seconds for 4096 keys on one head); version 0 needs (4 + es) B H Sq Sk
 * bytes of GPU memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu_host.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"

static const char USAGE[] =
    "stage5: the attention backward on a CUDA GPU (version 0 materialized, 1 tiled on the CUDA\n"
    "cores, 2 and 4 tiled on the tensor cores), checked against the CPU fp64 backward\n"
    "usage: ./stage5 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2, every head, its dO) and two random\n"
    "problems, every version, fp32, fp16 and bf16. --sweep tests runs the GPU test suite (with\n"
    "--kernel K, versions K and 0 alone),\n"
    "--sweep small a few small problems (for compute-sanitizer), --sweep accuracy the dQ accuracy\n"
    "tests alone, --sweep model checks the IO\n"
    "models (no GPU needed).\n"
    "--accurate-dq runs the backward on K centered over the keys (fa_gpu.h, FA_BWD_CENTER_K),\n"
    "which keeps dQ accurate when every logit is far from zero, at the cost of a pre-pass.\n"
    "--accurate-dq=full adds a pass that forms D and dQ without 16-bit roundings\n"
    "(FA_BWD_DQ_PASS): dQ as an fp32 backward's, at up to six more N^2 d products.\n"
    "Without a GPU: one line saying so, exit 0.";

#define NV_MAX 16
#define DET_RUNS 30

/* FA_BWD_CENTER_K when --accurate-dq is given (the backward on K centered
 * over the keys; fa_gpu.h), FA_BWD_DQ_PASS for --accurate-dq=full, else 0:
 * added to every run's flags. */
static int g_flags;

/* ------------------------------------------------------------------------- */
/* Running a version and judging it                                          */
/* ------------------------------------------------------------------------- */
static const gh_tensor GRADS[3] = {GH_DQ, GH_DK, GH_DV};

typedef struct {
    int version, ran;
    gh_err e[3];             /* dQ, dK, dV against the reference */
    size_t nonzero;          /* entries that must be exactly 0 and are not */
    double ms;
    int det_differ;          /* deterministic runs (of DET_RUNS - 1) that differ from the first */
    char det_what[160];
    double *got[3];          /* dQ, dK, dV of the (first) run, fp64 */
} vres;

/* Entries of dQ rows that see no key, and of dK, dV rows of keys no query
 * sees, that are not exactly 0 (mask.h decides which). */
static size_t nonzero_where_empty(const attn_params *p, double *const got[3])
{
    attn_mask m = attn_mask_of(p);
    size_t bad = 0, d = (size_t)p->d;
    for (int bh = 0; bh < p->B * p->H; bh++)
        for (int i = 0; i < p->seqlen_q; i++)
            if (mask_row_empty(m, i))
                for (size_t c = 0; c < d; c++) bad += got[0][((size_t)bh * p->seqlen_q + i) * d + c] != 0;
    for (int bh = 0; bh < p->B * p->H_kv; bh++)
        for (int j = 0; j < p->seqlen_k; j++)
            if (mask_query_first(m, j) > mask_query_last(m, j))   /* mask.h: nobody sees key j */
                for (size_t c = 0; c < d; c++) {
                    size_t at = ((size_t)bh * p->seqlen_k + j) * d + c;
                    bad += (got[1][at] != 0) + (got[2][at] != 0);
                }
    return bad;
}

/* Bitwise comparison of DET_RUNS deterministic runs with the first. */
static void check_deterministic(gh_problem *g, int version, vres *r)
{
    size_t bytes[3], total = 0;
    for (int t = 0; t < 3; t++) total += bytes[t] = gh_bytes(g, GRADS[t]);
    char *first = xmalloc(total, 1, "first run"), *again = xmalloc(total, 1, "next run");
    for (int t = 0, at = 0; t < 3; at += (int)bytes[t], t++) gh_fetch_raw(g, GRADS[t], first + at);
    r->det_differ = 0;
    r->det_what[0] = '\0';
    for (int run = 1; run < DET_RUNS; run++) {
        if (gh_run(g, FA_BACKWARD, version, FA_BWD_DETERMINISTIC | g_flags) != 0) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
        size_t at = 0;
        bool differ = false;
        for (int t = 0; t < 3; t++) {
            gh_fetch_raw(g, GRADS[t], again + at);
            if (memcmp(first + at, again + at, bytes[t]) && !r->det_what[0]) {
                size_t n = 0, es = bytes[t] / gh_numel(&g->p, GRADS[t]);
                for (size_t i = 0; i < bytes[t]; i += es) n += memcmp(first + at + i, again + at + i, es) != 0;
                snprintf(r->det_what, sizeof r->det_what, "%s of run %d differs from run 0 in %zu entries",
                         gh_tensor_name[GRADS[t]], run, n);
            }
            differ |= memcmp(first + at, again + at, bytes[t]) != 0;
            at += bytes[t];
        }
        r->det_differ += differ;
    }
    free(first);
    free(again);
}

static vres run_version(gh_problem *g, int version, const gh_ref *ref, bool deterministic, int repeats)
{
    vres r;
    memset(&r, 0, sizeof r);
    r.version = version;
    if (gh_run(g, FA_BACKWARD, version, (deterministic ? FA_BWD_DETERMINISTIC : 0) | g_flags) != 0) return r;
    r.ran = 1;
    const double *refs[3] = {ref->dQ, ref->dK, ref->dV};
    for (int t = 0; t < 3; t++) {
        size_t n = gh_numel(&g->p, GRADS[t]);
        r.got[t] = xmalloc(n, sizeof(double), "gradient from the GPU");
        gh_fetch(g, GRADS[t], r.got[t]);
        r.e[t] = gh_compare(r.got[t], refs[t], n, ref->fallback[GRADS[t]]);
    }
    r.nonzero = nonzero_where_empty(&g->p, r.got);
    if (deterministic) check_deterministic(g, version, &r);
    if (repeats > 0)
        r.ms = gh_time(g, FA_BACKWARD, version, (deterministic ? FA_BWD_DETERMINISTIC : 0) | g_flags, repeats);
    return r;
}

static void vres_free(vres *r)
{
    for (int t = 0; t < 3; t++) free(r->got[t]);
}


/* ------------------------------------------------------------------------- */
/* One problem in one dtype                                                   */
/* ------------------------------------------------------------------------- */
typedef struct {
    bool tests;          /* PASS/FAIL lines instead of the table */
    bool deterministic;  /* run the deterministic mode DET_RUNS times */
    int repeats;         /* timed runs (0: none) */
    FILE *csv;
    const char *device;
    const options *opt;  /* output files (with one --kernel and --dtype) */
} run_mode;

static void csv_row(const run_mode *m, const gh_inputs *pr, int dtype, const vres *r)
{
    const attn_params *p = &pr->params;
    double fl = fa_flops(FA_BACKWARD, p);
    fprintf(m->csv, "\"%s\",\"%s\",%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%d,%.6e,%.6e,%.6e,%zu,%.6f,%.4f,%.0f\n",
            m->device, pr->source, p->B, p->H, p->H_kv, p->seqlen_q, p->seqlen_k, p->d,
            p->window_size_left, p->window_size_right, r->version, fa_dtype_name(dtype),
            m->deterministic, r->e[0].err, r->e[1].err, r->e[2].err,
            r->e[0].nonfinite + r->e[1].nonfinite + r->e[2].nonfinite, r->ms,
            r->ms > 0 ? fl / (r->ms * 1e-3) / 1e12 : 0.0, fa_model_bytes(FA_BACKWARD, r->version, dtype, p));
}

static void save_outputs(const options *opt, const gh_problem *g, const vres *r)
{
    const attn_params *p = &g->p;
    if (opt->out) gh_save(opt->out, g->host[GH_O], p, GH_O);
    if (opt->lse) gh_save(opt->lse, g->host[GH_L], p, GH_L);
    if (opt->dq) gh_save(opt->dq, r->got[0], p, GH_DQ);
    if (opt->dk) gh_save(opt->dk, r->got[1], p, GH_DK);
    if (opt->dv) gh_save(opt->dv, r->got[2], p, GH_DV);
}

/* What run_dtype is given besides the problem in one dtype (gh_each_dtype). */
typedef struct {
    const run_mode *m;
    const int *versions;
    int nv;
    const char *name;
} run_job;

/* Run every version of the job on pr in g's dtype, print and judge.
 * Returns the number of failed checks. */
static int run_dtype(void *ctx, const gh_inputs *pr, gh_problem *g, const gh_ref *ref)
{
    const run_job *job = ctx;
    const run_mode *m = job->m;
    const int *versions = job->versions;
    const int nv = job->nv, dtype = g->dtype;
    const char *name = job->name;
    const attn_params *p = &pr->params;
    gh_set_forward(g, ref->O, ref->L);
    vres r[NV_MAX];
    const vres *v0 = NULL;
    for (int i = 0; i < nv; i++) {
        r[i] = run_version(g, versions[i], ref, m->deterministic, m->repeats);
        if (versions[i] == 0 && r[i].ran) v0 = &r[i];
    }

    const double *refs[3] = {ref->dQ, ref->dK, ref->dV};
    char who[64], why[256] = "";
    bool twice_v0;
    int bad = 0;
    const bool fault = pr->kind != GH_IN_NORMAL;
    for (const vres *x = r; x < r + nv; x++) {
        if (!x->ran) continue;
        snprintf(who, sizeof who, "v%d %s", x->version, fa_dtype_name(dtype));
        for (int t = 0; t < 3; t++) {
            /* the rule of the header comment; fault inputs: finite only */
            double allowed = gh_allowed(dtype, x->version, v0 ? v0->e[t].err : -1, fa_unit_roundoff(dtype), fault,
                                        &twice_v0);
            bad += gh_judge(who, p, GRADS[t], &x->e[t], allowed, twice_v0, x->got[t], refs[t], why, sizeof why);
        }
        if (x->nonzero) {
            bad++;
            snprintf(why, sizeof why, "%s: %zu entries of rows that see no key (dQ) or keys nobody "
                     "sees (dK, dV) are not 0", who, x->nonzero);
        }
        if (m->deterministic && x->det_differ) {
            bad++;
            snprintf(why, sizeof why, "%s deterministic: %d of %d runs differ (%s)", who, x->det_differ,
                     DET_RUNS - 1, x->det_what);
        }
    }

    if (m->tests) {
        char errs[400] = "";
        size_t at = 0;
        for (int i = 0; i < nv && at < sizeof errs - 64; i++)
            if (r[i].ran)
                at += (size_t)snprintf(errs + at, sizeof errs - at, "%sv%d %.1e/%.1e/%.1e", at ? ", " : "",
                                       r[i].version, r[i].e[0].err, r[i].e[1].err, r[i].e[2].err);
        if (bad) printf("FAIL %s %s: %s [%s]\n", name, fa_dtype_name(dtype), why, errs);
        else printf("PASS %s %s (err dQ/dK/dV: %s%s)\n", name, fa_dtype_name(dtype), errs,
                    fault ? "; fault input: finite is the check" : "");
    } else {
        for (int i = 0; i < nv; i++) {
            const vres *x = &r[i];
            if (!x->ran) {
                printf("  v%d  %-5s  (not run: %s)\n", versions[i], fa_dtype_name(dtype), fa_error_string());
                continue;
            }
            int64_t vis, skip;
            fa_tiles(FA_BACKWARD, x->version, p, &vis, &skip);
            double fl = fa_flops(FA_BACKWARD, p);
            printf("  v%d  %-5s  %9.2e  %9.2e  %9.2e  %9zu  %9.4f  %7.2f  %11.4g  %7lld/%lld", x->version,
                   fa_dtype_name(dtype), x->e[0].err, x->e[1].err, x->e[2].err,
                   x->e[0].nonfinite + x->e[1].nonfinite + x->e[2].nonfinite, x->ms,
                   x->ms > 0 ? fl / (x->ms * 1e-3) / 1e12 : 0.0,
                   fa_model_bytes(FA_BACKWARD, x->version, dtype, p), (long long)vis, (long long)skip);
            if (m->deterministic) printf("  %s", x->det_differ ? "DIFFER" : "bitwise");
            printf("\n");
            if (m->csv) csv_row(m, pr, dtype, x);
        }
        if (bad) printf("  check failed: %s\n", why);
        const options *o = m->opt;
        if (o && (o->out || o->lse || o->dq || o->dk || o->dv) && nv == 1 && r[0].ran) save_outputs(o, g, &r[0]);
    }
    for (int i = 0; i < nv; i++) vres_free(&r[i]);
    fflush(stdout);
    return bad;
}

/* Every dtype of the list on one problem; the reference is computed once
 * when the inputs are exact in every dtype. */
static int run_problem(const run_mode *m, const gh_inputs *pr, const int *dtypes, int nd,
                       const int *versions, int nv, const char *name)
{
    const attn_params *p = &pr->params;
    if (!m->tests) {
        char shape[128];
        gh_describe(p, shape, sizeof shape);
        printf("\n%s: %s, softmax_scale = %.6g\n"
               "  ver dtype     err dQ     err dK     err dV  unwritten  time [ms]  TFLOP/s  model bytes"
               "  tiles vis/skip\n",
               pr->source, shape, p->softmax_scale);
    }
    run_job job = {m, versions, nv, name};
    return gh_each_dtype(pr, dtypes, nd, true, run_dtype, &job);
}

/* ------------------------------------------------------------------------- */
/* The test suite (--sweep tests)                                             */
/* ------------------------------------------------------------------------- */
/* The key blocks of a longer sequence, as stage 7 calls the backward: keys
 * [0, Sk) split in two at `cut`, each half run with the full rows' O and L;
 * the halves' dQ must sum to the whole dQ and their dK, dV be the whole's
 * rows. */
static int test_key_split(const run_mode *m, const gh_inputs *pr, int cut, const int *versions, int nv)
{
    const attn_params *p = &pr->params;
    gh_ref ref;
    gh_ref_compute(&ref, p, pr->Q, pr->K, pr->V, pr->dO);
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    const size_t nq = attn_q_numel(p), nk = attn_kv_numel(p), d = (size_t)p->d;
    int bad = 0;
    for (int t = 0; t < 3; t++) {
        double err[NV_MAX][3];
        int ran[NV_MAX] = {0};
        double *dQ = xmalloc(nq, sizeof(double), "dQ sum"), *dK = xmalloc(nk, sizeof(double), "dK");
        double *dV = xmalloc(nk, sizeof(double), "dV"), *part = xmalloc(nk > nq ? nk : nq, sizeof(double), "part");
        for (int i = 0; i < nv; i++) {
            memset(dQ, 0, nq * sizeof(double));
            ran[i] = 1;
            for (int half = 0; half < 2 && ran[i]; half++) {
                int k0 = half ? cut : 0, k1 = half ? p->seqlen_k : cut;
                attn_params ph = *p;
                ph.seqlen_k = k1 - k0;
                size_t nh = attn_kv_numel(&ph);
                double *Kh = xmalloc(nh, sizeof(double), "K half"), *Vh = xmalloc(nh, sizeof(double), "V half");
                for (int bh = 0; bh < p->B * p->H_kv; bh++) {
                    memcpy(Kh + (size_t)bh * ph.seqlen_k * d, pr->K + ((size_t)bh * p->seqlen_k + k0) * d,
                           (size_t)ph.seqlen_k * d * sizeof(double));
                    memcpy(Vh + (size_t)bh * ph.seqlen_k * d, pr->V + ((size_t)bh * p->seqlen_k + k0) * d,
                           (size_t)ph.seqlen_k * d * sizeof(double));
                }
                gh_problem g;
                gh_upload(&g, &ph, dtypes[t], pr->Q, Kh, Vh, pr->dO);
                gh_set_forward(&g, ref.O, ref.L);
                if (gh_run(&g, FA_BACKWARD, versions[i], 0) != 0) {
                    ran[i] = 0;
                } else {
                    gh_fetch(&g, GH_DQ, part);
                    for (size_t e = 0; e < nq; e++) dQ[e] += part[e];
                    double *dst[2] = {dK, dV};
                    for (int w = 0; w < 2; w++) {
                        gh_fetch(&g, w ? GH_DV : GH_DK, part);
                        for (int bh = 0; bh < p->B * p->H_kv; bh++)
                            memcpy(dst[w] + ((size_t)bh * p->seqlen_k + k0) * d, part + (size_t)bh * ph.seqlen_k * d,
                                   (size_t)ph.seqlen_k * d * sizeof(double));
                    }
                }
                gh_free(&g);
                free(Kh);
                free(Vh);
            }
            if (!ran[i]) continue;
            err[i][0] = gh_compare(dQ, ref.dQ, nq, ref.fallback[GH_DQ]).err;
            err[i][1] = gh_compare(dK, ref.dK, nk, ref.fallback[GH_DK]).err;
            err[i][2] = gh_compare(dV, ref.dV, nk, ref.fallback[GH_DV]).err;
        }
        int v0 = -1, fails = 0;
        char why[200] = "", errs[300] = "";
        size_t at = 0;
        for (int i = 0; i < nv; i++)
            if (ran[i] && versions[i] == 0) v0 = i;
        for (int i = 0; i < nv; i++) {
            if (!ran[i]) continue;
            at += (size_t)snprintf(errs + at, sizeof errs - at, "%sv%d %.1e/%.1e/%.1e", at ? ", " : "",
                                   versions[i], err[i][0], err[i][1], err[i][2]);
            for (int w = 0; w < 3; w++) {
                bool twice_v0;
                double allowed = gh_allowed(dtypes[t], versions[i], v0 >= 0 && i != v0 ? err[v0][w] : -1,
                                            fa_unit_roundoff(dtypes[t]), false, &twice_v0);
                if (!(err[i][w] <= allowed)) {
                    fails++;
                    snprintf(why, sizeof why, "v%d %s err %.3g > %.3g", versions[i],
                             gh_tensor_name[GRADS[w]], err[i][w], allowed);
                }
            }
        }
        char shape[128];
        gh_describe(p, shape, sizeof shape);
        if (fails) printf("FAIL stage5 key blocks %s %s, keys cut at %d: %s [%s]\n", fa_dtype_name(dtypes[t]), shape, cut, why, errs);
        else printf("PASS stage5 key blocks %s %s, keys cut at %d: the halves' dQ sums to the whole, "
                    "dK, dV are its rows (err dQ/dK/dV: %s)\n", fa_dtype_name(dtypes[t]), shape, cut, errs);
        bad += fails;
        free(dQ); free(dK); free(dV); free(part);
    }
    (void)m;
    gh_ref_free(&ref);
    return bad;
}

/* The default mode's run-to-run spread of dQ, and the deterministic mode's
 * bitwise equality (30 runs, checked by run_dtype). */
static int test_determinism(const run_mode *m, const gh_inputs *pr, const int *versions, int nv)
{
    run_mode det = *m;
    det.deterministic = true;
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    char shape[128];
    gh_describe(&pr->params, shape, sizeof shape);
    char name[200];
    snprintf(name, sizeof name, "stage5 deterministic (%d runs bitwise equal) %s", DET_RUNS, shape);
    int bad = run_problem(&det, pr, dtypes, 3, versions, nv, name);
    /* the default mode: how far apart do runs land? (reported, not checked) */
    for (int t = 0; t < 3; t++) {
        gh_problem g;
        gh_upload(&g, &pr->params, dtypes[t], pr->Q, pr->K, pr->V, pr->dO);
        gh_ref ref;
        gh_ref_compute(&ref, &pr->params, g.host[GH_Q], g.host[GH_K], g.host[GH_V], g.host[GH_DO]);
        gh_set_forward(&g, ref.O, ref.L);
        size_t n = gh_numel(&pr->params, GH_DQ);
        double *first = xmalloc(n, sizeof(double), "dQ"), *again = xmalloc(n, sizeof(double), "dQ");
        double scale = max_abs_finite(ref.dQ, n);
        for (int i = 0; i < nv; i++) {
            if (gh_run(&g, FA_BACKWARD, versions[i], g_flags) != 0) continue;
            gh_fetch(&g, GH_DQ, first);
            int differ = 0;
            double spread = 0;
            for (int run = 1; run < DET_RUNS; run++) {
                if (gh_run(&g, FA_BACKWARD, versions[i], g_flags) != 0) break;
                gh_fetch(&g, GH_DQ, again);
                bool any = false;
                for (size_t e = 0; e < n; e++) {
                    spread = fmax(spread, fabs(again[e] - first[e]));
                    any |= again[e] != first[e];
                }
                differ += any;
            }
            printf("# default mode, v%d %s: dQ of %d of %d reruns differs from the first run; spread "
                   "max|dQ_run - dQ_first| / max|dQ_ref| = %.3g\n", versions[i], fa_dtype_name(dtypes[t]),
                   differ, DET_RUNS - 1, spread / (scale > 0 ? scale : 1));
        }
        free(first);
        free(again);
        gh_ref_free(&ref);
        gh_free(&g);
    }
    return bad;
}

/* Logits far below zero with a common part of K (the dQ accuracy model's
 * inputs, src/stage3_accuracy.c): q_i = (1, 0.1 z), k_j = (-a_g sqrt(d),
 * 0.1 z) with a_g = 120 for the first key/value head of each batch and 60
 * for the others (so that c differs between heads), V, dO ~ N(0, 1); every
 * value rounded to bf16. P is nearly uniform and dQ small; max|K| = 960. */
static void inputs_far_logits(gh_inputs *in, const attn_params *p, uint64_t seed)
{
    gh_inputs_random(in, p, GH_IN_NORMAL, seed);
    const size_t d = (size_t)p->d, nq = attn_q_numel(p), nk = attn_kv_numel(p);
    for (size_t x = 0; x < nq; x++) in->Q[x] = x % d ? 0.1 * in->Q[x] : 1.0;
    for (size_t x = 0; x < nk; x++) {
        size_t head = x / ((size_t)p->seqlen_k * d) % (size_t)p->H_kv;
        in->K[x] = x % d ? 0.1 * in->K[x] : -(head == 0 ? 120.0 : 60.0) * sqrt((double)p->d);
    }
    gh_round(in->Q, nq, FA_BF16);
    gh_round(in->K, nk, FA_BF16);
    /* exact in fp16 too (no fp16 subnormals), so one reference serves every dtype */
    for (size_t x = 0; x < nq; x++) in->Q[x] = fabs(in->Q[x]) < 0x1p-14 ? 0 : in->Q[x];
    for (size_t x = 0; x < nk; x++) in->K[x] = fabs(in->K[x]) < 0x1p-14 ? 0 : in->K[x];
    snprintf(in->source, sizeof in->source, "q = (1, 0.1 z), k = (-120 sqrt(d) or -60 sqrt(d), 0.1 z), "
             "seed %llu", (unsigned long long)seed);
}

/* Version `version` with FA_BWD_DQ_PASS (accurate_dq="full") on the
 * far-logit inputs: dQ within twice e_round, the error of the fp64 dQ
 * rounded to the dtype (the rule against PyTorch's math backend,
 * without the + u the centered mode is allowed), dK and dV by the usual
 * rules, rows that see no key 0. Returns dQ's error (-1: it did not run,
 * a failure), adds the failures to *bad with the last reason in why. */
static double full_pass(gh_problem *g, int version, const gh_ref *ref, int dtype, double e_round,
                        const double v0_err[3], char *why, size_t why_len, int *bad)
{
    const int saved = g_flags;
    g_flags |= FA_BWD_DQ_PASS;
    vres y = run_version(g, version, ref, false, 0);
    g_flags = saved;
    if (!y.ran) {
        (*bad)++;
        snprintf(why, why_len, "v%d with FA_BWD_DQ_PASS: %s", version, fa_error_string());
        return -1;
    }
    const double u = fa_unit_roundoff(dtype);
    for (int t = 0; t < 3; t++) {
        bool twice_v0;
        const double allowed = t == 0 ? 2 * e_round : gh_allowed(dtype, version, v0_err[t], u, false, &twice_v0);
        if (y.e[t].nonfinite == 0 && y.e[t].err <= allowed) continue;
        (*bad)++;
        snprintf(why, why_len, "v%d with FA_BWD_DQ_PASS: err %s %.3g > %.3g", version, gh_tensor_name[GRADS[t]],
                 y.e[t].err, allowed);
    }
    if (y.nonzero) {
        (*bad)++;
        snprintf(why, why_len, "v%d with FA_BWD_DQ_PASS: %zu entries that must be 0 are not", version, y.nonzero);
    }
    const double err = y.e[0].err;
    vres_free(&y);
    return err;
}

/* Every version on the far-logit inputs in one dtype, with K centered
 * (FA_BWD_CENTER_K). The rules: the usual ones (gh_allowed) for dQ, dK, dV,
 * and for dQ in fp16/bf16 the twice-math rule, err dQ <= 2 e_round + u,
 * where e_round is the error of the fp64 dQ rounded to the dtype (what a
 * materialized backward in fp32, as PyTorch's math backend, returns) and u
 * the dtype's unit roundoff, the stages' floor. And the inputs must
 * exercise the effect: without the centering each version's dQ in
 * fp16/bf16 must break that rule. */
static int far_dtype(void *ctx, const gh_inputs *pr, gh_problem *g, const gh_ref *ref)
{
    const run_job *job = ctx;
    const attn_params *p = &pr->params;
    const int dtype = g->dtype;
    const double u = fa_unit_roundoff(dtype);
    const size_t n = gh_numel(p, GH_DQ);
    gh_set_forward(g, ref->O, ref->L);
    double *rounded = xmalloc(n, sizeof(double), "dQ_ref rounded");
    memcpy(rounded, ref->dQ, n * sizeof(double));
    gh_round(rounded, n, dtype);
    const double e_round = gh_compare(rounded, ref->dQ, n, ref->fallback[GH_DQ]).err;
    const double math_rule = 2 * e_round + u;
    int bad = 0;
    char why[300] = "", errs[600] = "";
    size_t at = 0;
    double v0_err[3] = {-1, -1, -1};
    const double *refs[3] = {ref->dQ, ref->dK, ref->dV};
    for (int i = 0; i < job->nv; i++) {
        const int saved = g_flags;
        g_flags |= FA_BWD_CENTER_K;
        vres x = run_version(g, job->versions[i], ref, false, 0);
        g_flags = saved;
        if (!x.ran) continue;
        if (x.version == 0)
            for (int t = 0; t < 3; t++) v0_err[t] = x.e[t].err;
        double keep = -1;
        if (dtype != FA_FP32 && gh_run(g, FA_BACKWARD, x.version, 0) == 0) {
            gh_fetch(g, GH_DQ, rounded);
            keep = gh_compare(rounded, ref->dQ, n, ref->fallback[GH_DQ]).err;
        }
        for (int t = 0; t < 3; t++) {
            bool twice_v0;
            double allowed = gh_allowed(dtype, x.version, v0_err[t], u, false, &twice_v0);
            if (t == 0 && dtype != FA_FP32 && math_rule < allowed) allowed = math_rule;
            if (x.e[t].nonfinite == 0 && x.e[t].err <= allowed) continue;
            bad++;
            snprintf(why, sizeof why, "v%d err %s %.3g > %.3g", x.version, gh_tensor_name[GRADS[t]],
                     x.e[t].err, allowed);
            char who[64];
            snprintf(who, sizeof who, "v%d %s", x.version, fa_dtype_name(dtype));
            gh_diagnose(who, p, GRADS[t], x.got[t], refs[t], allowed * x.e[t].scale);
        }
        if (x.nonzero) {
            bad++;
            snprintf(why, sizeof why, "v%d: %zu entries of rows that see no key (dQ) or keys nobody sees "
                     "(dK, dV) are not 0", x.version, x.nonzero);
        }
        if (keep >= 0 && !(keep > math_rule)) {
            bad++;
            snprintf(why, sizeof why, "v%d without centering: err dQ %.3g is within the twice-math rule %.3g, "
                     "so these inputs do not test it", x.version, keep, math_rule);
        }
        at += (size_t)snprintf(errs + at, sizeof errs - at, "%sv%d %.1e/%.1e/%.1e", at ? ", " : "", x.version,
                               x.e[0].err, x.e[1].err, x.e[2].err);
        if (keep >= 0) at += (size_t)snprintf(errs + at, sizeof errs - at, " (uncentered dQ %.2g)", keep);
        if (dtype != FA_FP32) {
            double full = full_pass(g, x.version, ref, dtype, e_round, v0_err, why, sizeof why, &bad);
            if (full >= 0) at += (size_t)snprintf(errs + at, sizeof errs - at, " (full dQ %.2g)", full);
        }
        vres_free(&x);
    }
    free(rounded);
    if (bad) printf("FAIL %s %s: %s [%s]\n", job->name, fa_dtype_name(dtype), why, errs);
    else printf("PASS %s %s (dQ rule 2 x %.2e + u = %.2e; err dQ/dK/dV: %s)\n", job->name, fa_dtype_name(dtype),
                e_round, math_rule, errs);
    fflush(stdout);
    return bad;
}

static int test_far_logits(const int *versions, int nv, uint64_t seed)
{
    static const int NS[] = {64, 192, 704, 1024};
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    int bad = 0, k = 0;
    for (int n = 0; n < 6; n++)
        for (int causal = 0; causal < 2; causal++) {
            /* the shapes, one head at d = 64; then batches and grouped heads; then
             * rows that see no key (causal, Sq > Sk) and a window */
            attn_params p = n < 4 ? (attn_params){1, 1, 1, NS[n], NS[n], 64, 0.125, -1, causal ? 0 : -1}
                          : n == 4 ? (attn_params){2, 4, 2, 192, 192, 64, 0.125, -1, causal ? 0 : -1}
                                   : causal ? (attn_params){1, 2, 2, 200, 130, 64, 0.125, -1, 0}
                                            : (attn_params){1, 2, 1, 300, 300, 64, 0.125, 32, 0};
            gh_inputs pr;
            inputs_far_logits(&pr, &p, seed + (uint64_t)k++);
            char shape[128], name[700];
            gh_describe(&p, shape, sizeof shape);
            snprintf(name, sizeof name, "stage5 dQ accuracy, logits near -120 (%s) %s", pr.source, shape);
            run_job job = {NULL, versions, nv, name};
            bad += gh_each_dtype(&pr, dtypes, 3, true, far_dtype, &job);
            gh_inputs_free(&pr);
        }
    return bad;
}

/* One test of the table: every version and dtype (gh_run_cases). */
static int run_case(void *ctx, const gh_inputs *pr, const char *name)
{
    const run_job *job = ctx;
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    return run_problem(job->m, pr, dtypes, 3, job->versions, job->nv, name);
}

static int run_tests(const options *opt, int sm_count, const char *device)
{
    uint64_t seed = gh_tests_seed("stage5", opt, device);
    const int big = sm_count + 18 + (sm_count % 2);   /* B H above the SM count, even */
    /* Besides gh_size_cases and gh_shared_cases: keys nobody sees, a
     * covering window, multi-query attention, causal GQA beyond the SMs. */
    const gh_tcase own[] = {
        {"window (64,0)", 1, 2, 2, 500, 500, 64, 64, 0, GH_IN_NORMAL},
        {"window (10,0) Sq<Sk (keys nobody sees)", 1, 2, 2, 100, 300, 64, 10, 0, GH_IN_NORMAL},
        {"window covering everything", 1, 2, 2, 150, 150, 64, 1000, 1000, GH_IN_NORMAL},
        {"MQA causal Sq<Sk", 2, 4, 1, 150, 230, 128, -1, 0, GH_IN_NORMAL},
        {"B H > SMs, GQA, causal", 1, big, big / 2, 70, 70, 128, -1, 0, GH_IN_NORMAL},
    };
    gh_tcase cases[GH_SHARED_CASES + sizeof own / sizeof own[0]];
    size_t nc = gh_shared_cases(sm_count, cases);
    memcpy(cases + nc, own, sizeof own);
    nc += sizeof own / sizeof own[0];
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    int versions[NV_MAX], nv = 0, bad = 0;
    nv = gh_versions(FA_BACKWARD, versions, NV_MAX);
    if (opt->kernel >= 0) {   /* --kernel K: version K and version 0, the measure of the twice-v0 rule */
        int keep = 0;
        for (int i = 0; i < nv; i++)
            if (versions[i] == 0 || versions[i] == opt->kernel) versions[keep++] = versions[i];
        nv = keep;
    }
    run_mode m = {true, false, 0, NULL, device, NULL};
    run_job job = {&m, versions, nv, NULL};

    /* the real input, every head, its own dO */
    {
        gh_inputs pr;
        gh_inputs_real(&pr, opt, -1, -1, 0);
        char name[256];
        gh_test_name("stage5", "real input", &pr.params, name, sizeof name);
        bad += run_problem(&m, &pr, dtypes, 3, versions, nv, name);
        gh_inputs_free(&pr);
    }
    /* case i draws from seed + i, the sizes first */
    bad += gh_run_cases("stage5", gh_size_cases, GH_SIZE_CASES, seed, run_case, &job);
    bad += gh_run_cases("stage5", cases, nc, seed + GH_SIZE_CASES, run_case, &job);
    {
        attn_params p = {1, 4, 2, 700, 700, 64, 0.125, -1, 0};
        gh_inputs pr;
        gh_inputs_random(&pr, &p, GH_IN_NORMAL, seed + 100);
        bad += test_determinism(&m, &pr, versions, nv);
        gh_inputs_free(&pr);
    }
    {
        attn_params p = {1, 4, 2, 300, 300, 64, 0.125, -1, -1};
        gh_inputs pr;
        gh_inputs_random(&pr, &p, GH_IN_NORMAL, seed + 101);
        bad += test_key_split(&m, &pr, 100, versions, nv);
        gh_inputs_free(&pr);
    }
    bad += test_far_logits(versions, nv, seed + 200);
    return bad;
}

/* The dQ pass's own limits for p in any of the dtypes (the library's rule,
 * fa_bwd_dq_pass_supported; its line in fa_error_string()), 0 when none. */
static int dq_pass_refused(const int *dtypes, int nd, const attn_params *p)
{
    for (int t = 0; t < nd; t++)
        if (fa_bwd_dq_pass_supported(dtypes[t], p)) return 1;
    return 0;
}

/* --sweep small: a few small problems that reach every code path (masks,
 * grouped heads, seqlen_q != seqlen_k, rows that see no key, keys nobody
 * sees, partial tiles, the deterministic mode), cheap enough to run under
 * compute-sanitizer. --kernel and --dtype narrow it. */
static int run_small(const options *opt, const char *device, const int *versions, int nv,
                     const int *dtypes, int nd)
{
    const gh_tcase cases[] = {
        {"small GQA causal Sq>Sk", 1, 4, 2, 70, 50, 64, -1, 0, GH_IN_NORMAL},
        {"small window Sq<Sk (keys nobody sees)", 1, 2, 1, 40, 150, 32, 10, 0, GH_IN_NORMAL},
        {"small d=128 window (20,3)", 1, 2, 2, 70, 70, 128, 20, 3, GH_IN_NORMAL},
        {"small d=20", 1, 1, 1, 33, 33, 20, -1, -1, GH_IN_NORMAL},
    };
    uint64_t seed = (opt->given & OPT_SEED) ? opt->seed : 1234;
    printf("stage5 small sweep on %s; seed %llu\n", device, (unsigned long long)seed);
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_mode m = {true, i == 0, 0, NULL, device, NULL};
        attn_params p = gh_tcase_params(&cases[i]);
        if ((g_flags & FA_BWD_DQ_PASS) && dq_pass_refused(dtypes, nd, &p)) {
            printf("SKIP stage5 %s: %s\n", cases[i].what, fa_error_string());
            continue;
        }
        gh_inputs pr;
        gh_inputs_random(&pr, &p, cases[i].kind, seed + i);
        char shape[128], name[240];
        gh_describe(&p, shape, sizeof shape);
        snprintf(name, sizeof name, "stage5 %s %s%s", cases[i].what, shape, m.deterministic ? " deterministic" : "");
        bad += run_problem(&m, &pr, dtypes, nd, versions, nv, name);
        gh_inputs_free(&pr);
    }
    return bad;
}

/* ------------------------------------------------------------------------- */
/* The IO models against the CPU stages' counts (--sweep model; no GPU)       */
/* ------------------------------------------------------------------------- */
//> stage5-model-check
/* In fp32 every tensor has 4-byte elements, so the GPU models must equal
 * 4 bytes times the element counts of stage 1 and stage 3 (both over the
 * whole problem), up to what the GPU versions do differently
 * (stage5_backward.cuh's header):
 *   v0 = 4 (naive_backward + B H (3 Sq Sk + Sq d + Sk d + 3 Sq)): S written
 *        and read and P written (stage 1's backward starts from a stored P),
 *        Q, K read for S, L read, D written and read
 *   tiled (v1, v2, v4) = 4 flash_backward(Br, Bc) + 8 R d B H, with the
 *        version's own Br, Bc: the dQ accumulator zeroed, and the first key
 *        block's dQ read, for the R rows some key block adds to
 * with and without masks; the tiled versions also with grouped heads
 * (stage 1 sums grouped heads in a pass of its own, version 0 inside its
 * products). Versions 2 and 3 run fp16/bf16 only; their model in fp32 is the
 * same formula with 4-byte elements and no post-pass, which is what pins
 * their tile sizes against stage 3's count. */
static int model_checks(void)
{
    int bad = 0;
    const int shapes[][7] = {   /* Sq, Sk, d, H, H_kv, left, right */
        {300, 300, 64, 3, 3, -1, -1}, {300, 300, 64, 3, 3, -1, 0}, {1023, 1023, 128, 2, 2, -1, -1},
        {1023, 1023, 128, 2, 2, -1, 0}, {17, 17, 16, 2, 2, -1, 0}, {4097, 4097, 80, 1, 1, -1, -1},
        {200, 130, 64, 2, 2, -1, 0}, {100, 300, 32, 4, 4, 10, 0}, {500, 500, 64, 4, 2, 64, 0},
        {150, 230, 128, 4, 1, -1, 0},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *c = shapes[s];
        attn_params p = {2, c[3], c[4], c[0], c[1], c[2], 1.0 / sqrt((double)c[2]), c[5], c[6]};
        double bh = (double)p.B * p.H, Sq = p.seqlen_q, Sk = p.seqlen_k, d = p.d;
        bool ok = true;
        char tiled[400] = "", fails[400] = "";
        size_t at = 0, fat = 0;
        for (int v = 0; v < fa_version_limit(FA_BACKWARD); v++) {
            if (!fa_version(FA_BACKWARD, v)) continue;
            int Br = fa_block_rows(FA_BACKWARD, v, p.d), Bc = fa_block_cols(FA_BACKWARD, v, p.d);
            if (Br == 0 || Bc == 0) continue;   /* materialized */
            double R = (double)mask_query_rows_active(attn_mask_of(&p), Br);
            double want = 4 * (double)flash_backward_io_formula(&p, Br, Bc) + 8 * R * d * bh;
            double got = fa_model_bytes(FA_BACKWARD, v, FA_FP32, &p);
            int64_t vis, skip;
            fa_tiles(FA_BACKWARD, v, &p, &vis, &skip);
            int64_t all = (int64_t)ceil_div(p.seqlen_q, Br) * ceil_div(p.seqlen_k, Bc);
            bool vok = got == want && vis + skip == all && (uint64_t)vis * p.B * p.H == flash_tiles_formula(&p, Br, Bc);
            ok = ok && vok;
            if (at < sizeof tiled)
                at += (size_t)snprintf(tiled + at, sizeof tiled - at, ", v%d %.6g bytes (Br %d, Bc %d; tiles %lld "
                                       "visited, %lld skipped per head)", v, got, Br, Bc, (long long)vis, (long long)skip);
            if (!vok && fat < sizeof fails)
                fat += (size_t)snprintf(fails + fat, sizeof fails - fat, ", v%d %.6g vs %.6g, tiles %lld + %lld vs %lld",
                                        v, got, want, (long long)vis, (long long)skip, (long long)all);
        }
        double v0 = 0, m0 = 0;
        if (p.H == p.H_kv) {
            v0 = 4 * ((double)naive_backward_io_formula(&p) + bh * (3 * Sq * Sk + Sq * d + Sk * d + 3 * Sq));
            m0 = fa_model_bytes(FA_BACKWARD, 0, FA_FP32, &p);
            ok = ok && m0 == v0;
        }
        /* the dQ pass (fa_bwd_dq_pass_bytes): each phase reads what stage 3's
         * forward with 64 x 64 tiles reads, Q twice (Q and dO), and the L and
         * D rows; phase 1 writes dQ. Counted by running that forward here on
         * one head's rows (flash_forward is one head's pass) for every head. */
        char passs[96] = "";
        if (Sq * Sk <= 1100.0 * 1100.0) {
            const size_t nq = (size_t)p.seqlen_q * p.d, nk = (size_t)p.seqlen_k * p.d;
            double *Q = xcalloc(nq, sizeof(double), "Q"), *K = xcalloc(nk, sizeof(double), "K");
            double *V = xcalloc(nk, sizeof(double), "V"), *O = xcalloc(nq, sizeof(double), "O");
            double *L = xcalloc((size_t)p.seqlen_q, sizeof(double), "L");
            sram_arena sram;
            sram_init(&sram, flash_forward_sram_elements(64, 64, p.d));
            io_counter io;
            io_reset(&io);
            flash_forward(&p, Q, K, V, 64, 64, O, L, &sram, &io, NULL);
            const double es = 2, want = bh * (2 * es * (2.0 * io.reads[T_Q] + io.reads[T_K] + io.reads[T_V]) +
                                              16 * Sq + es * Sq * d);
            const double got = fa_bwd_dq_pass_bytes(FA_BF16, &p);
            ok = ok && got == want;
            snprintf(passs, sizeof passs, ", dQ pass %.6g bytes (counted %.6g)", got, want);
            sram_free(&sram);
            free(Q); free(K); free(V); free(O); free(L);
        }
        char shape[128];
        gh_describe(&p, shape, sizeof shape);
        char v0s[64] = "v0 not compared (grouped heads)";
        if (p.H == p.H_kv) snprintf(v0s, sizeof v0s, "v0 %.6g bytes", m0);
        if (ok)
            printf("PASS stage5 IO model %s: %s%s%s == stage 1/3 counts\n", shape, v0s, tiled, passs);
        else
            printf("FAIL stage5 IO model %s: v0 %.6g vs %.6g%s%s\n", shape, m0, v0, fails, passs);
        bad += !ok;
    }
    return bad;
}
//< stage5-model-check

/* The deterministic mode's turns (stage5_backward.cuh, bwd-dq-order) rely on
 * one property of mask.h: the key blocks that count query block i among
 * theirs (mask_query_blocks) are exactly the key blocks i counts
 * (mask_key_blocks), a contiguous range; otherwise a turn would never come
 * and the kernel would hang. Checked here on random masks (no GPU). */
static int turn_checks(uint64_t seed)
{
    rng_t rng;
    rng_seed(&rng, seed);
    int bad = 0, draws = 2000;
    for (int n = 0; n < draws && !bad; n++) {
        const int key_blocks[3] = {32, 64, 128};   /* the tiled versions' Bc */
        int Sq = rng_int(&rng, 1, 300), Sk = rng_int(&rng, 1, 300), Br = 64, Bc = key_blocks[rng_int(&rng, 0, 2)];
        int left = rng_int(&rng, -1, 80), right = rng_int(&rng, -1, 80);
        attn_mask m = mask_make(Sq, Sk, left, right);
        for (int i0 = 0; i0 < Sq && !bad; i0 += Br) {
            int jb, je;
            mask_key_blocks(m, i0, imin(i0 + Br, Sq), Bc, &jb, &je);
            for (int j0 = 0; j0 < Sk; j0 += Bc) {
                int ib, ie;
                mask_query_blocks(m, j0, imin(j0 + Bc, Sk), Br, &ib, &ie);
                bool j_counts_i = ib <= i0 / Br && i0 / Br < ie, i_counts_j = jb <= j0 / Bc && j0 / Bc < je;
                if (j_counts_i != i_counts_j) {
                    printf("FAIL stage5 turn order: Sq %d Sk %d window (%d,%d) Bc %d: query block %d, key "
                           "block %d: the key block %s it, the query block %s it\n", Sq, Sk, left, right, Bc,
                           i0 / Br, j0 / Bc, j_counts_i ? "visits" : "skips", i_counts_j ? "waits for" : "does not wait for");
                    bad = 1;
                    break;
                }
            }
        }
    }
    if (!bad)
        printf("PASS stage5 turn order: on %d random masks (seed %llu) the key blocks a query block waits for "
               "are those that visit it\n", draws, (unsigned long long)seed);
    return bad;
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */
int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    /* --accurate-dq is stage 5's own flag (the shared parser does not know it) */
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--accurate-dq=", 14) && strcmp(argv[i] + 14, "full"))
            fatal(EXIT_BAD_INPUT, "%s: --accurate-dq takes no value or =full", argv[i]);
        if (!strcmp(argv[i], "--accurate-dq") || !strcmp(argv[i], "--accurate-dq=full")) {
            if (g_flags) fatal(EXIT_BAD_INPUT, "--accurate-dq: given twice");
            g_flags = argv[i][13] ? FA_BWD_DQ_PASS : FA_BWD_CENTER_K;
            memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof *argv);
            argc--;
            i--;
        }
    }
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS |
                      OPT_SCALE | OPT_INPUTS | OPT_OUTPUTS | OPT_CSV | OPT_DTYPE | OPT_KERNEL |
                      OPT_REPEATS | OPT_SWEEP | OPT_DETERMINISTIC,
                  USAGE, &opt);
    if (opt.sweep && strcmp(opt.sweep, "tests") && strcmp(opt.sweep, "model") && strcmp(opt.sweep, "small") &&
        strcmp(opt.sweep, "accuracy"))
        fatal(EXIT_BAD_INPUT, "--sweep %s: stage 5 knows --sweep tests, small, accuracy and model", opt.sweep);
    if (opt.sweep && !strcmp(opt.sweep, "model")) {
        int bad = model_checks() + turn_checks((opt.given & OPT_SEED) ? opt.seed : fresh_seed());
        return bad ? EXIT_CHECK_FAILED : 0;
    }
    int dtypes[3], nd, versions[16], nv;
    gh_select(FA_BACKWARD, (opt.given & OPT_DTYPE) ? opt.dtype : NULL, opt.kernel, dtypes, &nd, versions, &nv);
    bool outputs = opt.out || opt.lse || opt.dq || opt.dk || opt.dv;
    if (outputs && (nv != 1 || nd != 1))
        fatal(EXIT_BAD_INPUT, "--out/--lse/--dq/--dk/--dv write one run: give --kernel K and --dtype T");
    if (opt.sweep && (outputs || (opt.given & (OPT_CSV | OPT_INPUTS | OPT_N | OPT_D | OPT_BATCH |
                                                OPT_HEADS | OPT_RANDOM | OPT_MASKS | OPT_SCALE |
                                                OPT_REPEATS | OPT_DETERMINISTIC))))
        fatal(EXIT_BAD_INPUT, "--sweep %s takes only --seed (and --kernel for tests, --kernel and --dtype for small)", opt.sweep);
    if (opt.sweep && strcmp(opt.sweep, "small") &&
        (opt.given & (strcmp(opt.sweep, "tests") ? OPT_KERNEL | OPT_DTYPE : OPT_DTYPE)))
        fatal(EXIT_BAD_INPUT, "--sweep %s runs every dtype%s; --dtype goes with --sweep small", opt.sweep,
              strcmp(opt.sweep, "tests") ? " and version (--kernel: --sweep small, tests)" : "");
    if (g_flags & FA_BWD_DQ_PASS) {   /* the pass's own limits (kernels/stage5_bwd_dq.cu) */
        if (opt.sweep && strcmp(opt.sweep, "small"))
            fatal(EXIT_BAD_INPUT, "--accurate-dq=full goes with --sweep small only (--sweep %s runs every dtype; "
                  "--sweep accuracy runs the dQ pass itself)", opt.sweep);
    }
    /* Bad input is refused before looking for a GPU: files are read, the
     * shape and dtype checked against the chosen version. */
    gh_inputs pr;
    memset(&pr, 0, sizeof pr);
    if (!opt.sweep) {
        gh_inputs_of_options(&pr, &opt);
        gh_check_problem(FA_BACKWARD, &pr.params, dtypes, nd, versions, nv, opt.kernel >= 0);
        if ((g_flags & FA_BWD_DQ_PASS) && dq_pass_refused(dtypes, nd, &pr.params))
            fatal(EXIT_BAD_INPUT, "--accurate-dq=full: %s", fa_error_string());
        if (opt.deterministic && opt.kernel >= 0 && !fa_version(FA_BACKWARD, opt.kernel)->deterministic)
            fatal(EXIT_BAD_INPUT, "--deterministic: backward v%d has no deterministic mode", opt.kernel);
    }

    char device[256];
    int sm_count = 0;
    if (!gh_device("stage5", device, sizeof device, &sm_count)) {
        gh_inputs_free(&pr);
        return 0;
    }
    if (opt.sweep && !strcmp(opt.sweep, "small"))
        return run_small(&opt, device, versions, nv, dtypes, nd) ? EXIT_CHECK_FAILED : 0;
    if (opt.sweep && !strcmp(opt.sweep, "accuracy")) {
        int all[NV_MAX], n_all = 0;
        for (int v = 0; v < fa_num_versions(FA_BACKWARD) && n_all < NV_MAX; v++) all[n_all++] = v;
        return test_far_logits(all, n_all, gh_tests_seed("stage5", &opt, device) + 200) ? EXIT_CHECK_FAILED : 0;
    }
    if (opt.sweep) return run_tests(&opt, sm_count, device) ? EXIT_CHECK_FAILED : 0;

    printf("stage5: CUDA backward on %s\n", device);
    run_mode m = {false, opt.deterministic, (opt.given & OPT_REPEATS) ? opt.repeats : 10, NULL, device, &opt};
    if (opt.csv)
        m.csv = gh_csv_open(opt.csv, argc, argv,
                            "device,input,B,H,H_kv,seqlen_q,seqlen_k,d,window_left,window_right,kernel,dtype,"
                            "deterministic,err_dQ,err_dK,err_dV,unwritten,median_ms,tflops,model_bytes");
    printf("  errors against the CPU fp64 backward on the inputs rounded to the dtype (O, L given from it):\n"
           "    err X = max|X - X_ref| / max|X_ref| for X = dQ, dK, dV; unwritten = NaN/inf left in an output\n"
           "  time: median of %d launches (CUDA events, L2 flushed); TFLOP/s counts 2.5 x the forward's\n"
           "  4 B H Sq Sk d times the visible share of the scores (the papers' convention); model bytes: the\n"
           "  version's IO model (kernels/stage5_backward.cuh)%s\n", m.repeats,
           m.deterministic ? "; deterministic mode, 30 runs compared bitwise" : "");
    int bad = 0;
    bool given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS | OPT_MASKS);
    bad += run_problem(&m, &pr, dtypes, nd, versions, nv, pr.source);
    gh_inputs_free(&pr);
    if (!given) {
        for (int i = 0; i < 2; i++) {
            attn_params p = gh_tcase_params(&gh_default_cases[i]);
            gh_inputs_random(&pr, &p, GH_IN_NORMAL, opt.seed + (uint64_t)i);
            bad += run_problem(&m, &pr, dtypes, nd, versions, nv, pr.source);
            gh_inputs_free(&pr);
        }
    }
    if (m.csv) csv_close(m.csv);
    printf("\nchecks: fp32 err <= 1e-5; fp16/bf16 err of the tiled versions <= 2 x v0's + u and every version <= "
           "1e-2 (fp16), 5e-2 (bf16); every output written; zero rows where the mask leaves nothing\n");
    printf("stage5: %s\n", bad ? "FAILED" : "all checks passed");
    return outputs_finish(bad ? EXIT_CHECK_FAILED : 0);
}
