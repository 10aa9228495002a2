/*
 * tests/gpu/stage5_tests.c -- the GPU test suite of stage 5's backward
 * (make gpu-test, through tests/gpu/run_gpu_tests.sh): PASS/FAIL lines in
 * tests/run.sh's protocol, each version run and judged by
 * src/gpu/stage5_runs.c against the CPU fp64 backward.
 *
 *   build/tests/gpu/stage5_tests --sweep tests      every backward version, fp32, fp16,
 *                                                   bf16, on the shared cases of gpu_host.c,
 *                                                   masks, grouped heads, the fault inputs,
 *                                                   the deterministic mode, the key-block
 *                                                   split of stage 7; --kernel K narrows it
 *                                                   to versions K and 0
 *   build/tests/gpu/stage5_tests --sweep accuracy   the far-logit tests alone (dQ accuracy)
 *   build/tests/gpu/stage5_tests --sweep small      a few small problems reaching every code
 *                                                   path (for compute-sanitizer); --kernel,
 *                                                   --dtype, --accurate-dq[=full] narrow it
 *   build/tests/gpu/stage5_tests --sweep model      the IO models against stage 1's and
 *                                                   stage 3's counts (no GPU needed)
 * --seed S replays. Without a GPU the GPU sweeps print one line and exit 0;
 * bad input is one line and exit 2. The checks are those of
 * src/programs/stage5_main.c's header.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu_host.h"
#include "mask.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"
#include "stage5_runs.h"

static const char USAGE[] =
    "stage5_tests: the GPU test suite of stage 5's backward, PASS/FAIL lines\n"
    "usage: build/tests/gpu/stage5_tests --sweep tests|small|accuracy|model [--seed S]\n"
    "--sweep tests: every version (--kernel K: K and 0); small: a few small problems for\n"
    "compute-sanitizer (--kernel, --dtype, --accurate-dq[=full] narrow it); accuracy: the\n"
    "far-logit dQ tests alone; model: the IO models (no GPU needed).";

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
            if (gh_run(&g, FA_BACKWARD, versions[i], bwd_run_flags) != 0) continue;
            gh_fetch(&g, GH_DQ, first);
            int differ = 0;
            double spread = 0;
            for (int run = 1; run < DET_RUNS; run++) {
                if (gh_run(&g, FA_BACKWARD, versions[i], bwd_run_flags) != 0) break;
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
 * inputs, src/cpu/stage3_accuracy.c): q_i = (1, 0.1 z), k_j = (-a_g sqrt(d),
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
    const int saved = bwd_run_flags;
    bwd_run_flags |= FA_BWD_DQ_PASS;
    vres y = run_version(g, version, ref, false, 0);
    bwd_run_flags = saved;
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
        const int saved = bwd_run_flags;
        bwd_run_flags |= FA_BWD_CENTER_K;
        vres x = run_version(g, job->versions[i], ref, false, 0);
        bwd_run_flags = saved;
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
    uint64_t seed = gh_tests_seed("stage5", "build/tests/gpu/stage5_tests", opt, device);
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
        if ((bwd_run_flags & FA_BWD_DQ_PASS) && dq_pass_refused(dtypes, nd, &p)) {
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
    bwd_take_accurate_dq(&argc, argv);
    options opt;
    parse_options(argc, argv, OPT_SEED | OPT_DTYPE | OPT_KERNEL | OPT_SWEEP, USAGE, &opt);
    if (!opt.sweep || (strcmp(opt.sweep, "tests") && strcmp(opt.sweep, "model") && strcmp(opt.sweep, "small") &&
                       strcmp(opt.sweep, "accuracy")))
        fatal(EXIT_BAD_INPUT, "--sweep %s: expected --sweep tests, small, accuracy or model",
              opt.sweep ? opt.sweep : "missing");
    if (!strcmp(opt.sweep, "model")) {
        if (opt.given & (OPT_KERNEL | OPT_DTYPE) || bwd_run_flags)
            fatal(EXIT_BAD_INPUT, "--sweep model takes only --seed");
        int bad = model_checks() + turn_checks((opt.given & OPT_SEED) ? opt.seed : fresh_seed());
        return bad ? EXIT_CHECK_FAILED : 0;
    }
    int dtypes[3], nd, versions[16], nv;
    gh_select(FA_BACKWARD, (opt.given & OPT_DTYPE) ? opt.dtype : NULL, opt.kernel, dtypes, &nd, versions, &nv);
    if (strcmp(opt.sweep, "small") &&
        (opt.given & (strcmp(opt.sweep, "tests") ? OPT_KERNEL | OPT_DTYPE : OPT_DTYPE)))
        fatal(EXIT_BAD_INPUT, "--sweep %s runs every dtype%s; --dtype goes with --sweep small", opt.sweep,
              strcmp(opt.sweep, "tests") ? " and version (--kernel: --sweep small, tests)" : "");
    if ((bwd_run_flags & FA_BWD_DQ_PASS) && strcmp(opt.sweep, "small"))   /* the pass's own limits */
        fatal(EXIT_BAD_INPUT, "--accurate-dq=full goes with --sweep small only (--sweep %s runs every dtype; "
              "--sweep accuracy runs the dQ pass itself)", opt.sweep);

    char device[256];
    int sm_count = 0;
    if (!gh_device("stage5", device, sizeof device, &sm_count)) return 0;
    if (!strcmp(opt.sweep, "small"))
        return run_small(&opt, device, versions, nv, dtypes, nd) ? EXIT_CHECK_FAILED : 0;
    if (!strcmp(opt.sweep, "accuracy")) {
        int all[NV_MAX], n_all = 0;
        for (int v = 0; v < fa_num_versions(FA_BACKWARD) && n_all < NV_MAX; v++) all[n_all++] = v;
        return test_far_logits(all, n_all, gh_tests_seed("stage5", "build/tests/gpu/stage5_tests", &opt, device) + 200) ? EXIT_CHECK_FAILED : 0;
    }
    return run_tests(&opt, sm_count, device) ? EXIT_CHECK_FAILED : 0;
}
