/*
 * stage4_main.c -- Stage 4's host program: the CUDA forward kernels of
 * kernels/stage4_fwd_v0.cu .. stage4_fwd_v2.cu and kernels/stage4_fwd_v3_hopper.cu,
 * checked against the CPU fp64 reference of stage 1 and timed.
 *
 * What it adds over stage 3: nothing new in the algorithm; the tiled forward
 * now runs on a GPU, on the CUDA cores in fp32 arithmetic (version 1), on the
 * tensor cores (version 2, fp16/bf16) and with Hopper's copy engine and
 * wgmma (version 3, H100/H200), beside a materialized GPU baseline
 * (version 0). Every version takes the problems of stage 6: causal and
 * sliding-window masks, seqlen_q != seqlen_k and grouped key/value heads
 * (core/mask.h, attn_params). Plain C over core/fa_gpu.h and the GPU host
 * code the GPU stages share (src/gpu_host.[ch]).
 *
 * Build and run:   make stage4 && ./stage4
 *   ./stage4                          real input (all-MiniLM-L6-v2, (1,12,148,32)) and two
 *                                     random problems (one causal with grouped heads);
 *                                     every version, fp32, fp16 and bf16
 *   ./stage4 --kernel 2 --dtype bf16 --random --n 4096 --d 128 --heads 4 --causal --repeats 20
 *   ./stage4 --random --n 1000 --seqlen-k 700 --heads 8 --kv-heads 2 --window 64,0
 *   ./stage4 --kernel 1 --dtype fp32 --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy
 *                                     (K, V may have fewer heads or another length than Q)
 *   ./stage4 --sweep tests            the GPU test suite: PASS/FAIL lines (make gpu-test)
 *   ./stage4 --sweep model            the IO models against stage 1's and stage 3's counts
 *                                     (no GPU needed)
 *   ./stage4 --csv FILE               also write every row as CSV (with provenance)
 * Without a GPU it prints one line saying so and exits 0 (bad input is still
 * refused first, with exit 2). --out and --lse write the O and L the GPU
 * computed (.npy, float64) for one --kernel and --dtype.
 *
 * What it prints, per (problem, dtype, version): the error of O and L
 * against the fp64 reference computed on the same inputs rounded to the
 * dtype, err O = max |O - O_ref| / max |O_ref| (max |V| where O_ref is all
 * zero), err L = max |L - L_ref| / max(1, max |L_ref|) over rows that see a
 * key; unwritten = NaN or infinity left where the reference is finite
 * (outputs are poisoned with NaN before every launch); the median time over
 * --repeats launches; TFLOP/s (fa_flops); modeled bytes (fa_model_bytes);
 * the tiles the version visits and those the mask lets it skip (fa_tiles).
 * Then the checks:
 *   fp32        err O and err L <= 1e-5
 *   fp16, bf16  versions 1, 2, 3: err O <= 2 x version 0's err O on the same
 *               inputs + u (the dtype's unit roundoff, so that two correctly
 *               rounded results never fail), and every version's err O and
 *               err L within a sanity bound (fp16 1e-2, bf16 5e-2), so that a
 *               broken version 0 cannot loosen the rule
 *   every dtype no unwritten output; rows that see no key have O = 0 exactly
 *               and L = -inf; the bytes model equals stage 1's and stage 3's
 *               counts and the tile counts stage 3's (model_matches)
 *   fault inputs (huge or very negative logits): every output
 *               finite, and each O row within the value rows of the keys
 *               whose logits are the row's best up to fp32 rounding
 *               (best_key_check)
 * A failed check prints '#' lines (gh_diagnose): the entries off, the worst,
 * and the ranges of heads, rows and columns they fall in. Exit 0 only when
 * every check passes; 2 on bad input (one line).
 *
 * Cost: the CPU reference is 4 B H Sq Sk d fp64 FLOPs per problem (seconds
 * for 4096 keys on one head); version 0 needs (4 + es) B H Sq Sk bytes of
 * GPU memory.
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
    "stage4: the attention forward on a CUDA GPU (version 0 materialized, 1 tiled on the CUDA\n"
    "cores, 2 tiled on the tensor cores, 3 Hopper's wgmma and copy engine), checked against the\n"
    "CPU fp64 reference (stage 1); causal and window masks, seqlen_q != seqlen_k, grouped heads\n"
    "usage: ./stage4 [options]     --dtype: fp32, fp16 or bf16 (default: each a version takes)\n"
    "With no options: the real input (all-MiniLM-L6-v2, every head) and two random problems,\n"
    "every version, fp32, fp16 and bf16. --sweep tests runs the GPU test suite, --sweep model\n"
    "checks the IO models (no GPU needed). --out and --lse (with one --kernel and --dtype)\n"
    "write the O and L the GPU computed.\n"
    "Without a GPU: one line saying so, exit 0.";

#define NV_MAX 16

/* ------------------------------------------------------------------------- */
/* The checks of one run beyond the error measure                             */
/* ------------------------------------------------------------------------- */

/* Entries of rows that see no key (mask.h) with O != 0 or L != -inf. */
static size_t empty_rows_wrong(const attn_params *p, const double *O, const double *L)
{
    attn_mask m = attn_mask_of(p);
    size_t bad = 0, d = (size_t)p->d;
    for (size_t bh = 0; bh < (size_t)p->B * p->H; bh++)
        for (int i = 0; i < p->seqlen_q; i++) {
            if (!mask_row_empty(m, i)) continue;
            size_t row = bh * p->seqlen_q + i;
            bad += L[row] != -INFINITY;
            for (size_t c = 0; c < d; c++) bad += O[row * d + c] != 0;
        }
    return bad;
}

//> stage4-best-key
/* Fault inputs: scaled logits of 1e6 to 2e10, where the softmax
 * is (nearly) one-hot and O is the value row of each query's best key. What
 * a correct kernel may return is bounded by the fp32 rounding of the logits:
 * a logit s_j = softmax_scale q.k_j summed in fp32 is off by at most
 * tol = 4 (d + 8) 2^-24 softmax_scale max_j sum |q||k_j| (d additions, the
 * scaling, the base-2 conversion; four times the textbook bound, for tensor
 * cores' accumulation), so keys whose exact logits lie within 2 tol of the
 * best may swap places, and keys another 24 below (e^-24 weight each) may
 * still count. O must lie in the box of those keys' value rows, widened by
 * the rounding of P and O: (4 u + (seqlen_k + 8) 2^-24) max |V|. Counts the
 * entries of O outside; Q, K, V are the rounded values the GPU holds. */
static size_t best_key_check(const gh_problem *g, const double *O)
{
    const attn_params *p = &g->p;
    const double *Q = g->host[GH_Q], *K = g->host[GH_K], *V = g->host[GH_V];
    const int Sk = p->seqlen_k, d = p->d;
    attn_mask m = attn_mask_of(p);
    double slack = (4 * fa_unit_roundoff(g->dtype) + (Sk + 8) * 0x1p-24) * max_abs_finite(V, attn_kv_numel(p));
    double *s = xmalloc((size_t)Sk, sizeof(double), "logits"), *lo = xmalloc((size_t)d, sizeof(double), "lo");
    double *hi = xmalloc((size_t)d, sizeof(double), "hi");
    size_t outside = 0;
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->H; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                int first = mask_key_first(m, i), last = mask_key_last(m, i);
                if (first > last) continue;   /* empty rows: empty_rows_wrong */
                const double *q = Q + attn_q_offset(p, b, h) + (size_t)i * d;
                const double *Kh = K + attn_kv_offset(p, b, h), *Vh = V + attn_kv_offset(p, b, h);
                double best = -INFINITY, mag = 0;
                for (int j = first; j <= last; j++) {
                    double dot = 0, absdot = 0;
                    for (int c = 0; c < d; c++) {
                        dot += q[c] * Kh[(size_t)j * d + c];
                        absdot += fabs(q[c] * Kh[(size_t)j * d + c]);
                    }
                    s[j] = p->softmax_scale * dot;
                    best = fmax(best, s[j]);
                    mag = fmax(mag, p->softmax_scale * absdot);
                }
                double reach = 2 * (4 * (d + 8) * 0x1p-24 * mag) + 24;
                for (int c = 0; c < d; c++) lo[c] = INFINITY, hi[c] = -INFINITY;
                for (int j = first; j <= last; j++)
                    if (s[j] >= best - reach)
                        for (int c = 0; c < d; c++) {
                            lo[c] = fmin(lo[c], Vh[(size_t)j * d + c]);
                            hi[c] = fmax(hi[c], Vh[(size_t)j * d + c]);
                        }
                const double *o = O + attn_q_offset(p, b, h) + (size_t)i * d;
                for (int c = 0; c < d; c++) outside += !(o[c] >= lo[c] - slack && o[c] <= hi[c] + slack);
            }
    free(s);
    free(lo);
    free(hi);
    return outside;
}
//< stage4-best-key

/* ------------------------------------------------------------------------- */
/* The IO model against the CPU stages' counts                                */
/* ------------------------------------------------------------------------- */

//> stage4-model-check
/* The bytes model of every forward version that takes dtype
 * (fa_model_bytes), against the element counts of stage 1 and stage 3 over
 * the whole problem, in bytes (L in fp32, the rest in the dtype's es bytes):
 *   v0 = es (naive_forward - B H (4 Sq Sk + Sq) - 2 B (H - H_kv) Sk d)
 *        + B H (2 (4 + es) Sq Sk + 4 Sq)
 *        stage 1's count with S in fp32 and P in the dtype (each written and
 *        read once) and L in fp32; K and V read once per key/value head (one
 *        strided product covers a group's query heads), not per query head;
 *   tiled = es (flash_forward(Br, Bc) - B H Sq) + 4 B H Sq
 *        stage 3's count with the version's tiles, L in fp32;
 * and the tiles fa_tiles counts: visited + skipped = Tr Tc, and visited B H
 * = stage 3's flash_tiles_formula. With masks and grouped heads. Returns 1
 * when all agree, else 0 with the first disagreement in why. */
static int model_matches(const attn_params *p, int dtype, char *why, size_t n)
{
    double es = (double)fa_dtype_bytes(dtype), bh = (double)p->B * p->H;
    double Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    for (int k = 0; k < fa_version_limit(FA_FORWARD); k++) {
        if (!fa_version(FA_FORWARD, k) || !(fa_version(FA_FORWARD, k)->dtypes & FA_DT(dtype))) continue;
        int Br = fa_block_rows(FA_FORWARD, k, p->d), Bc = fa_block_cols(FA_FORWARD, k, p->d);
        double want;
        if (!Br) {
            want = es * ((double)naive_forward_io_formula(p) - bh * (4 * Sq * Sk + Sq) -
                         2.0 * p->B * (p->H - p->H_kv) * Sk * d) +
                   bh * (2 * (4 + es) * Sq * Sk + 4 * Sq);
        } else {
            want = es * ((double)flash_forward_io_formula(p, Br, Bc) - bh * Sq) + 4 * bh * Sq;
        }
        double got = fa_model_bytes(FA_FORWARD, k, dtype, p);
        if (got != want) {
            snprintf(why, n, "v%d %s model %.6g bytes, stage %d's count %.6g", k, fa_dtype_name(dtype), got,
                     Br ? 3 : 1, want);
            return 0;
        }
        if (!Br) continue;
        int64_t vis, skip, all = (int64_t)ceil_div(p->seqlen_q, Br) * ceil_div(p->seqlen_k, Bc);
        fa_tiles(FA_FORWARD, k, p, &vis, &skip);
        if (vis + skip != all || (uint64_t)vis * p->B * p->H != flash_tiles_formula(p, Br, Bc)) {
            snprintf(why, n, "v%d tiles %lld visited + %lld skipped, of %lld; stage 3 visits %llu", k,
                     (long long)vis, (long long)skip, (long long)all,
                     (unsigned long long)flash_tiles_formula(p, Br, Bc));
            return 0;
        }
    }
    return 1;
}
//< stage4-model-check

/* --sweep model: model_matches on problems that reach every term (no GPU). */
static int model_checks(void)
{
    const gh_tcase shapes[] = {
        {"", 2, 3, 3, 300, 300, 64, -1, -1, GH_IN_NORMAL},     {"", 2, 3, 3, 300, 300, 64, -1, 0, GH_IN_NORMAL},
        {"", 1, 2, 2, 1023, 1023, 128, -1, -1, GH_IN_NORMAL},  {"", 1, 2, 2, 4097, 4097, 80, -1, 0, GH_IN_NORMAL},
        {"", 1, 2, 2, 17, 17, 16, -1, 0, GH_IN_NORMAL},        {"", 2, 2, 2, 200, 130, 64, -1, 0, GH_IN_NORMAL},
        {"", 1, 2, 2, 400, 200, 128, -1, 0, GH_IN_NORMAL},     {"", 1, 4, 4, 100, 300, 32, 10, 0, GH_IN_NORMAL},
        {"", 2, 4, 2, 500, 450, 64, 64, 0, GH_IN_NORMAL},      {"", 1, 2, 2, 300, 400, 64, 32, 32, GH_IN_NORMAL},
        {"", 1, 2, 2, 300, 200, 48, 10, 5, GH_IN_NORMAL},      {"", 2, 4, 1, 150, 230, 128, -1, 0, GH_IN_NORMAL},
        {"", 1, 8, 2, 200, 200, 64, -1, -1, GH_IN_NORMAL},     {"", 1, 4, 2, 160, 256, 64, 255, 159, GH_IN_NORMAL},
    };
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        attn_params p = gh_tcase_params(&shapes[s]);
        char shape[128], why[256] = "";
        gh_describe(&p, shape, sizeof shape);
        int ok = 1;
        for (int t = FA_FP32; t <= FA_BF16 && ok; t++) ok = model_matches(&p, t, why, sizeof why);
        if (!ok) {
            printf("FAIL stage4 IO model %s: %s\n", shape, why);
            bad++;
            continue;
        }
        printf("PASS stage4 IO model %s: every version and dtype == stage 1/3 counts; tiles visited/skipped "
               "per head:", shape);
        for (int k = 1; k < fa_version_limit(FA_FORWARD); k++) {
            if (!fa_version(FA_FORWARD, k)) continue;
            int64_t vis, skip;
            fa_tiles(FA_FORWARD, k, &p, &vis, &skip);
            printf(" v%d %lld/%lld", k, (long long)vis, (long long)skip);
        }
        printf("\n");
    }
    return bad;
}

/* ------------------------------------------------------------------------- */
/* Running a version                                                          */
/* ------------------------------------------------------------------------- */
typedef struct {
    int version, ran;
    gh_err e[2];          /* O, L against the reference */
    size_t empty_wrong;   /* entries of rows that see no key with O != 0 or L != -inf */
    size_t off_best;      /* fault inputs: entries of O outside best_key_check's box */
    int cover_differ;     /* the covering window's bits differ from the unmasked run's */
    char why_not[200];    /* when not run: the library's reason */
    double ms;
    double *got[2];       /* O, L of the run, fp64 */
} vres;

/* gh_compare for L, with the scale max(1, max |L_ref|): L is a logarithm,
 * whose rounding is absolute below 1. */
static gh_err lse_compare(const double *L, const double *ref, size_t n)
{
    gh_err e = gh_compare(L, ref, n, 1);
    if (e.scale < 1) {
        e.err *= e.scale;
        e.scale = 1;
    }
    return e;
}

static vres run_version(gh_problem *g, int version, const gh_ref *ref, bool fault, int repeats)
{
    vres r;
    memset(&r, 0, sizeof r);
    r.version = version;
    if (gh_run(g, FA_FORWARD, version, 0) != 0) {
        snprintf(r.why_not, sizeof r.why_not, "%s", fa_error_string());
        return r;
    }
    r.ran = 1;
    const attn_params *p = &g->p;
    size_t nq = gh_numel(p, GH_O), rows = gh_numel(p, GH_L);
    r.got[0] = xmalloc(nq, sizeof(double), "O from the GPU");
    r.got[1] = xmalloc(rows, sizeof(double), "L from the GPU");
    gh_fetch(g, GH_O, r.got[0]);
    gh_fetch(g, GH_L, r.got[1]);
    r.e[0] = gh_compare(r.got[0], ref->O, nq, ref->fallback[GH_O]);
    r.e[1] = lse_compare(r.got[1], ref->L, rows);
    r.empty_wrong = empty_rows_wrong(p, r.got[0], r.got[1]);
    if (fault) r.off_best = best_key_check(g, r.got[0]);
    if (repeats > 0) r.ms = gh_time(g, FA_FORWARD, version, 0, repeats);
    return r;
}

static void vres_free(vres *r)
{
    free(r->got[0]);
    free(r->got[1]);
}

/* O and L of one run, as raw bytes. */
static char *run_raw(gh_problem *g, int version, size_t *bytes)
{
    size_t bo = gh_bytes(g, GH_O), bl = gh_bytes(g, GH_L);
    char *raw = xmalloc(bo + bl, 1, "O and L bytes");
    if (gh_run(g, FA_FORWARD, version, 0) != 0) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    gh_fetch_raw(g, GH_O, raw);
    gh_fetch_raw(g, GH_L, raw + bo);
    *bytes = bo + bl;
    return raw;
}

/* A window that covers every key is the unmasked problem: the same bits
 * from every version. g holds the covering window; the unmasked run is made
 * on the same uploaded inputs. */
static int cover_differs(gh_problem *g, int version)
{
    size_t n1, n2;
    char *masked = run_raw(g, version, &n1);
    attn_params covering = g->p;
    g->p.window_size_left = g->p.window_size_right = -1;
    char *plain = run_raw(g, version, &n2);
    g->p = covering;
    int differ = n1 != n2 || memcmp(masked, plain, n1) != 0;
    free(masked);
    free(plain);
    return differ;
}

/* ------------------------------------------------------------------------- */
/* One problem in one dtype                                                   */
/* ------------------------------------------------------------------------- */
typedef struct {
    bool tests;          /* PASS/FAIL lines instead of the table */
    bool cover;          /* also hold the problem's (covering) window bitwise to no mask */
    int repeats;         /* timed runs (0: none) */
    FILE *csv;
    const char *device;
    const options *opt;  /* output files (with one --kernel and --dtype) */
    const int *versions;
    int nv;
    const char *name;    /* the test's name */
} run_mode;

static void print_row(const run_mode *m, const gh_inputs *in, int dtype, const vres *x)
{
    const attn_params *p = &in->params;
    int64_t vis, skip;
    fa_tiles(FA_FORWARD, x->version, p, &vis, &skip);
    double fl = fa_flops(FA_FORWARD, p), tf = x->ms > 0 ? fl / (x->ms * 1e-3) / 1e12 : 0.0;
    double mb = fa_model_bytes(FA_FORWARD, x->version, dtype, p);
    size_t unwritten = x->e[0].nonfinite + x->e[1].nonfinite;
    printf("  v%d  %-5s  %11.3e  %11.3e  %11.3e  %9zu  %9.4f  %7.2f  %11.4g  %7lld/%lld\n", x->version,
           fa_dtype_name(dtype), x->e[0].err, x->e[0].norm, x->e[1].err, unwritten, x->ms, tf, mb,
           (long long)vis, (long long)skip);
    if (m->csv)
        fprintf(m->csv, "\"%s\",\"%s\",%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%.6e,%.6e,%.6e,%zu,%.6f,%.4f,%.0f\n",
                m->device, in->source, p->B, p->H, p->H_kv, p->seqlen_q, p->seqlen_k, p->d,
                p->window_size_left, p->window_size_right, x->version, fa_dtype_name(dtype), x->e[0].err,
                x->e[0].norm, x->e[1].err, unwritten, x->ms, tf, mb);
}

/* Run every version of m on in, uploaded in g's dtype; print and judge
 * (the rules of the header comment). Returns the number of failed checks. */
static int run_dtype(void *ctx, const gh_inputs *in, gh_problem *g, const gh_ref *ref)
{
    const run_mode *m = ctx;
    const attn_params *p = &in->params;
    const int dtype = g->dtype, nv = m->nv;
    const bool fault = in->kind != GH_IN_NORMAL;
    vres r[NV_MAX];
    const vres *v0 = NULL;
    for (int i = 0; i < nv; i++) {
        r[i] = run_version(g, m->versions[i], ref, fault, m->repeats);
        if (r[i].ran && m->cover) r[i].cover_differ = cover_differs(g, m->versions[i]);
        if (r[i].version == 0 && r[i].ran) v0 = &r[i];
    }

    int bad = 0;
    char why[256] = "";
    const gh_tensor outs[2] = {GH_O, GH_L};
    const double *refs[2] = {ref->O, ref->L};
    char who[64];
    bool twice_v0;
    for (const vres *x = r; x < r + nv; x++) {
        if (!x->ran) continue;
        snprintf(who, sizeof who, "v%d %s", x->version, fa_dtype_name(dtype));
        for (int t = 0; t < 2; t++) {
            /* O: the 2 x v0 rule; L: 1e-5 in fp32, the sanity bound otherwise */
            double allowed = t == 0 ? gh_allowed(dtype, x->version, v0 ? v0->e[0].err : -1,
                                                 fa_unit_roundoff(dtype), fault, &twice_v0)
                                    : gh_allowed(dtype, 0, -1, 0, fault, &twice_v0);
            bad += gh_judge(who, p, outs[t], &x->e[t], allowed, twice_v0, x->got[t], refs[t], why, sizeof why);
        }
        if (x->empty_wrong) {
            bad++;
            snprintf(why, sizeof why, "%s: %zu entries of rows that see no key are not O = 0, L = -inf", who,
                     x->empty_wrong);
        }
        if (x->off_best) {
            bad++;
            snprintf(why, sizeof why, "%s: %zu entries of O outside the value rows of the best keys", who,
                     x->off_best);
        }
        if (x->cover_differ) {
            bad++;
            snprintf(why, sizeof why, "%s: the covering window's O, L differ from the unmasked run's bits", who);
        }
    }
    char mwhy[200];
    if (!model_matches(p, dtype, mwhy, sizeof mwhy)) {
        bad++;
        snprintf(why, sizeof why, "bytes model: %s", mwhy);
    }

    if (m->tests) {
        char errs[400] = "", tiles[200] = "";
        size_t at = 0, tat = 0;
        for (int i = 0; i < nv && at < sizeof errs - 64; i++) {
            if (!r[i].ran) continue;
            at += (size_t)snprintf(errs + at, sizeof errs - at, "%sv%d %.1e/%.1e", at ? ", " : "", r[i].version,
                                   r[i].e[0].err, r[i].e[1].err);
            int64_t vis, skip;
            fa_tiles(FA_FORWARD, r[i].version, p, &vis, &skip);
            if (vis && tat < sizeof tiles - 40)
                tat += (size_t)snprintf(tiles + tat, sizeof tiles - tat, " v%d %lld/%lld", r[i].version,
                                        (long long)vis, (long long)skip);
        }
        const char *extra = fault ? "; fault input: finite, O within the best keys' V rows"
                            : m->cover ? "; covering window == unmasked, bitwise" : "";
        if (bad) printf("FAIL %s %s: %s [%s]\n", m->name, fa_dtype_name(dtype), why, errs);
        else printf("PASS %s %s (err O/L: %s; tiles visited/skipped per head:%s%s)\n", m->name,
                    fa_dtype_name(dtype), errs, tiles, extra);
    } else {
        for (int i = 0; i < nv; i++) {
            if (r[i].ran) print_row(m, in, dtype, &r[i]);
            else printf("  v%d  %-5s  (not run: %s)\n", m->versions[i], fa_dtype_name(dtype), r[i].why_not);
        }
        if (bad) printf("  check failed: %s\n", why);
        const options *o = m->opt;
        if (o && nv == 1 && r[0].ran) {
            if (o->out) gh_save(o->out, r[0].got[0], p, GH_O);
            if (o->lse) gh_save(o->lse, r[0].got[1], p, GH_L);
        }
    }
    for (int i = 0; i < nv; i++) vres_free(&r[i]);
    fflush(stdout);
    return bad;
}

/* Every dtype of the list on one problem. */
static int run_problem(const run_mode *m, const gh_inputs *in, const int *dtypes, int nd)
{
    if (!m->tests) {
        char shape[128];
        gh_describe(&in->params, shape, sizeof shape);
        printf("\n%s: %s, softmax_scale = %.6g\n"
               "  ver dtype   err O (max)  err O (norm)       err L  unwritten  time [ms]  TFLOP/s  model bytes"
               "  tiles vis/skip\n",
               in->source, shape, in->params.softmax_scale);
    }
    return gh_each_dtype(in, dtypes, nd, false, run_dtype, (void *)m);
}

/* ------------------------------------------------------------------------- */
/* The test suite (--sweep tests)                                             */
/* ------------------------------------------------------------------------- */

/* One test: every version and dtype (gh_run_cases; ctx: the run_mode). */
static int run_case(void *ctx, const gh_inputs *in, const char *name)
{
    const int dtypes[3] = {FA_FP32, FA_FP16, FA_BF16};
    run_mode m = *(const run_mode *)ctx;
    m.name = name;
    return run_problem(&m, in, dtypes, 3);
}

static int run_tests(const options *opt, int sm_count, const char *device)
{
    uint64_t seed = gh_tests_seed("stage4", opt, device);
    const int big = sm_count + 18 + (sm_count % 2);   /* B H above the SM count, even */
    /* Besides gh_size_cases and gh_shared_cases: d = 24 and 72 (v1's tiles
     * of 32 and 80 columns part empty; v2 and v3 refuse them), masks and
     * grouped heads at d = 128 and where a whole query block sees no key. */
    const gh_tcase own[] = {
        {"d=24", 1, 1, 1, 65, 65, 24, -1, -1, GH_IN_NORMAL},
        {"d=72", 1, 2, 2, 150, 150, 72, -1, -1, GH_IN_NORMAL},
        {"B H > SMs d=128", 1, big, big, 70, 70, 128, -1, -1, GH_IN_NORMAL},
        {"B H > SMs, GQA, causal", 1, big, big / 2, 70, 70, 64, -1, 0, GH_IN_NORMAL},
        {"causal d=128 N=1023", 1, 1, 1, 1023, 1023, 128, -1, 0, GH_IN_NORMAL},
        {"causal Sq>Sk (a 128-row block that sees no key)", 1, 2, 2, 400, 200, 128, -1, 0, GH_IN_NORMAL},
        {"window (64,0) Sq>Sk", 2, 2, 2, 500, 450, 64, 64, 0, GH_IN_NORMAL},
        {"window (10,5) Sq<Sk d=128", 1, 2, 2, 200, 333, 128, 10, 5, GH_IN_NORMAL},
        {"GQA causal Sq>Sk", 2, 8, 2, 190, 150, 128, -1, 0, GH_IN_NORMAL},
        {"MQA Sq<Sk", 2, 4, 1, 150, 230, 128, -1, -1, GH_IN_NORMAL},
        {"MQA window (31,0)", 1, 8, 1, 260, 260, 64, 31, 0, GH_IN_NORMAL},
    };
    gh_tcase cases[GH_SHARED_CASES + sizeof own / sizeof own[0]];
    size_t nc = gh_shared_cases(sm_count, cases);
    memcpy(cases + nc, own, sizeof own);
    nc += sizeof own / sizeof own[0];
    /* A window that just covers every key (left = Sq - 1 + delta, right =
     * Sk - 1 - delta): the unmasked problem, bit for bit. seqlen_k a
     * multiple of 8 takes version 0's vector path. */
    const gh_tcase covering[] = {
        {"window covering everything", 1, 4, 2, 160, 256, 64, 255, 159, GH_IN_NORMAL},
        {"window covering everything", 1, 2, 2, 200, 200, 128, 1000, 1000, GH_IN_NORMAL},
    };
    int versions[NV_MAX], nv = 0, bad = 0;
    nv = gh_versions(FA_FORWARD, versions, NV_MAX);
    run_mode m = {true, false, 0, NULL, device, NULL, versions, nv, NULL};

    /* the real input, every head: unmasked, with a window, keys cut (Sq != Sk) */
    const int real[3][3] = {{-1, -1, 0}, {24, 8, 0}, {-1, -1, 100}};
    const char *real_what[3] = {"real input", "real input, window", "real input, keys cut"};
    for (int i = 0; i < 3; i++) {
        gh_inputs in;
        gh_inputs_real(&in, opt, real[i][0], real[i][1], real[i][2]);
        char name[256];
        gh_test_name("stage4", real_what[i], &in.params, name, sizeof name);
        bad += run_case(&m, &in, name);
        gh_inputs_free(&in);
    }
    /* case i draws from seed + i */
    bad += gh_run_cases("stage4", gh_size_cases, GH_SIZE_CASES, seed, run_case, &m);
    bad += gh_run_cases("stage4", cases, nc, seed + GH_SIZE_CASES, run_case, &m);
    m.cover = true;
    bad += gh_run_cases("stage4", covering, sizeof covering / sizeof covering[0], seed + GH_SIZE_CASES + nc,
                        run_case, &m);
    return bad;
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */
int main(int argc, char **argv)
{
    set_prog_name(argv[0]);
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS | OPT_SCALE |
                      OPT_INPUTS | OPT_FWD_OUTPUTS | OPT_CSV | OPT_DTYPE | OPT_FP32 | OPT_FP16 | OPT_BF16 | OPT_KERNEL | OPT_REPEATS | OPT_SWEEP,
                  USAGE, &opt);
    if (opt.sweep && strcmp(opt.sweep, "tests") && strcmp(opt.sweep, "model"))
        fatal(EXIT_BAD_INPUT, "--sweep %s: stage 4 knows --sweep tests and model", opt.sweep);
    bool outputs = opt.out || opt.lse;
    if (opt.sweep && (outputs || (opt.given & ~(opt_set)(OPT_SWEEP | OPT_SEED))))
        fatal(EXIT_BAD_INPUT, "--sweep %s takes only --seed", opt.sweep);
    if (opt.sweep && !strcmp(opt.sweep, "model")) return model_checks() ? EXIT_CHECK_FAILED : 0;
    int dtypes[3], nd, versions[NV_MAX], nv;
    gh_select(FA_FORWARD, (opt.given & OPT_DTYPE) ? opt.dtype : NULL, opt.kernel, dtypes, &nd, versions, &nv);
    if (outputs && (nv != 1 || nd != 1))
        fatal(EXIT_BAD_INPUT, "--out/--lse write one run: give --kernel K and --dtype T");
    /* Bad input is refused before looking for a GPU: files are read, the
     * problem checked against the chosen version. */
    gh_inputs in;
    memset(&in, 0, sizeof in);
    if (!opt.sweep) {
        gh_inputs_of_options(&in, &opt);
        gh_check_problem(FA_FORWARD, &in.params, dtypes, nd, versions, nv, opt.kernel >= 0);
    }

    char device[256];
    int sm_count = 0;
    if (!gh_device("stage4", device, sizeof device, &sm_count)) {
        gh_inputs_free(&in);
        return 0;
    }
    if (opt.sweep) return run_tests(&opt, sm_count, device) ? EXIT_CHECK_FAILED : 0;

    run_mode m = {false, false, (opt.given & OPT_REPEATS) ? opt.repeats : 10, NULL, device, &opt,
                  versions, nv, NULL};
    if (opt.csv)
        m.csv = gh_csv_open(opt.csv, argc, argv,
                            "device,input,B,H,H_kv,seqlen_q,seqlen_k,d,window_left,window_right,kernel,dtype,"
                            "err_O_maxabs_over_maxref,err_O_norm,err_L,unwritten,median_ms,tflops,model_bytes");
    printf("stage4: CUDA forward on %s\n", device);
    printf("  errors against the CPU fp64 reference on the inputs rounded to the dtype:\n"
           "    err O (max) = max|O - O_ref| / max|O_ref|, err O (norm) = ||O - O_ref|| / ||O_ref||,\n"
           "    err L = max|L - L_ref| / max(1, max|L_ref|); unwritten = NaN/inf left in an output\n"
           "  time: median of %d launches (CUDA events, L2 flushed); TFLOP/s counts 4 B H Sq Sk d times the\n"
           "  visible share of the scores (the papers' convention); model bytes: the version's IO model;\n"
           "  tiles: visited/skipped per head\n", m.repeats);
    int bad = run_problem(&m, &in, dtypes, nd);
    gh_inputs_free(&in);
    bool given = opt.given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_INPUTS | OPT_MASKS);
    for (int i = 0; i < 2 && !given; i++) {
        attn_params p = gh_tcase_params(&gh_default_cases[i]);
        gh_inputs_random(&in, &p, GH_IN_NORMAL, opt.seed + (uint64_t)i);
        bad += run_problem(&m, &in, dtypes, nd);
        gh_inputs_free(&in);
    }
    if (m.csv) csv_close(m.csv);
    printf("\nchecks: fp32 err O, err L <= 1e-5; fp16/bf16 err O of v1, v2, v3 <= 2 x v0's + u and every "
           "version's err O, err L <= 1e-2 (fp16), 5e-2 (bf16); every output written; O = 0, L = -inf where "
           "the mask leaves nothing; bytes model == stage 1/3 counts\n");
    printf("stage4: %s\n", bad ? "FAILED" : "all checks passed");
    return outputs_finish(bad ? EXIT_CHECK_FAILED : 0);
}
