/*
 * stage5_runs.c -- running the backward's versions on one problem and
 * judging them against the CPU fp64 backward: what ./stage5 prints as a
 * table and its test suite (tests/gpu/stage5_tests.c) as PASS/FAIL lines.
 * The checks are stage5_runs.h's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu_host.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"
#include "stage5_runs.h"

int bwd_run_flags;

/* ------------------------------------------------------------------------- */
/* Running a version and judging it                                          */
/* ------------------------------------------------------------------------- */


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
        if (gh_run(g, FA_BACKWARD, version, FA_BWD_DETERMINISTIC | bwd_run_flags) != 0) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
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

vres run_version(gh_problem *g, int version, const gh_ref *ref, bool deterministic, int repeats)
{
    vres r;
    memset(&r, 0, sizeof r);
    r.version = version;
    if (gh_run(g, FA_BACKWARD, version, (deterministic ? FA_BWD_DETERMINISTIC : 0) | bwd_run_flags) != 0) return r;
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
        r.ms = gh_time(g, FA_BACKWARD, version, (deterministic ? FA_BWD_DETERMINISTIC : 0) | bwd_run_flags, repeats);
    return r;
}

void vres_free(vres *r)
{
    for (int t = 0; t < 3; t++) free(r->got[t]);
}


/* ------------------------------------------------------------------------- */
/* One problem in one dtype                                                   */

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


/* Run every version of the job on pr in g's dtype, print and judge.
 * Returns the number of failed checks. */
int run_dtype(void *ctx, const gh_inputs *pr, gh_problem *g, const gh_ref *ref)
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
int run_problem(const run_mode *m, const gh_inputs *pr, const int *dtypes, int nd,
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


/* The dQ pass's own limits for p in any of the dtypes (the library's rule,
 * fa_bwd_dq_pass_supported; its line in fa_error_string()), 0 when none. */
int dq_pass_refused(const int *dtypes, int nd, const attn_params *p)
{
    for (int t = 0; t < nd; t++)
        if (fa_bwd_dq_pass_supported(dtypes[t], p)) return 1;
    return 0;
}

/* Takes --accurate-dq (FA_BWD_CENTER_K) or --accurate-dq=full
 * (FA_BWD_DQ_PASS) out of argv into bwd_run_flags, before the shared parser
 * (which does not know the flag) reads the rest. Any other value, or the
 * flag twice, is one line and exit 2. */
void bwd_take_accurate_dq(int *argc_io, char **argv)
{
    int argc = *argc_io;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--accurate-dq=", 14) && strcmp(argv[i] + 14, "full"))
            fatal(EXIT_BAD_INPUT, "%s: --accurate-dq takes no value or =full", argv[i]);
        if (!strcmp(argv[i], "--accurate-dq") || !strcmp(argv[i], "--accurate-dq=full")) {
            if (bwd_run_flags) fatal(EXIT_BAD_INPUT, "--accurate-dq: given twice");
            bwd_run_flags = argv[i][13] ? FA_BWD_DQ_PASS : FA_BWD_CENTER_K;
            memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof *argv);
            argc--;
            i--;
        }
    }
    *argc_io = argc;
}
