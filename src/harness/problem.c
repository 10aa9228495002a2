/* problem.c -- problems from the real input, files or random draws (problem.h). */
#define _POSIX_C_SOURCE 200809L
#include "problem.h"
#include "npy.h"

#ifndef DATA_DIR
#define DATA_DIR "data"
#endif

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* Problems: real input, files, or random                                     */
/* ------------------------------------------------------------------------- */

/* The CPU stages hold four (B,H,N,d) tensors in fp64; past this many
 * elements per tensor (1 GiB each) a run is refused rather than swapped. */
#define MAX_TENSOR_ELEMENTS (1ull << 27)

/* The four dimensions of a tensor file, brought to (B, H, rows, d). */
typedef struct { int B, H, N, d; } dims4;

static void dims_str(dims4 s, char *buf, size_t n)
{
    snprintf(buf, n, "(%d, %d, %d, %d)", s.B, s.H, s.N, s.d);
}

static bool same_dims(dims4 a, dims4 b)
{
    return a.B == b.B && a.H == b.H && a.N == b.N && a.d == b.d;
}

/* Read one tensor file and bring it to (B, H, N, d). */
static double *load_tensor(const char *flag, const char *path, dims4 *s)
{
    npy_array a;
    char err[256];
    if (npy_read(path, &a, err, sizeof err) != 0)
        fatal(EXIT_BAD_INPUT, "%s %s: %s", flag, path, err);
    int64_t B = 1, H = 1, N, d;
    switch (a.ndim) {
    case 2: N = a.shape[0]; d = a.shape[1]; break;
    case 3: H = a.shape[0]; N = a.shape[1]; d = a.shape[2]; break;
    case 4: B = a.shape[0]; H = a.shape[1]; N = a.shape[2]; d = a.shape[3]; break;
    default:
        npy_free(&a);
        fatal(EXIT_BAD_INPUT, "%s %s: rank %d array; expected (N,d), (H,N,d) or (B,H,N,d)",
              flag, path, a.ndim);
    }
    if (B < 1 || H < 1 || N < 1 || d < 1 || B > INT_MAX || H > INT_MAX || N > (1 << 20) ||
        d > 4096 || a.numel > MAX_TENSOR_ELEMENTS) {
        npy_free(&a);
        fatal(EXIT_BAD_INPUT, "%s %s: shape has an empty or too large dimension", flag, path);
    }
    if (count_nonfinite(a.data, a.numel, false)) {
        npy_free(&a);
        fatal(EXIT_BAD_INPUT, "%s %s: contains NaN or infinity", flag, path);
    }
    *s = (dims4){(int)B, (int)H, (int)N, (int)d};
    return a.data;
}

/* The mask the options give: --causal is the window (-1, 0). */
static void mask_of_options(const options *opt, int *left, int *right)
{
    if ((opt->given & OPT_CAUSAL) && (opt->given & OPT_WINDOW))
        fatal(EXIT_BAD_INPUT, "--causal and --window %d,%d: causal is --window -1,0; give one of them",
              opt->window_left, opt->window_right);
    *left = -1;
    *right = opt->causal ? 0 : -1;
    if (opt->given & OPT_WINDOW) {
        *left = opt->window_left;
        *right = opt->window_right;
    }
}

static void require_valid(const attn_params *ap)
{
    char why[256];
    if (attn_params_check(ap, why, sizeof why) != 0) fatal(EXIT_BAD_INPUT, "%s", why);
}

/* The real input's K or V thinned to H_kv heads (every (H/H_kv)-th) and cut
 * to its first seqlen_k rows; frees x. */
static double *cut_kv(double *x, dims4 s, int H_kv, int seqlen_k)
{
    if (H_kv == s.H && seqlen_k == s.N) return x;
    double *y = xmalloc((size_t)s.B * H_kv * seqlen_k * s.d, sizeof(double), "K or V, cut");
    for (int b = 0; b < s.B; b++)
        for (int g = 0; g < H_kv; g++)
            memcpy(y + ((size_t)b * H_kv + g) * seqlen_k * s.d,
                   x + ((size_t)b * s.H + (size_t)g * (s.H / H_kv)) * s.N * s.d,
                   (size_t)seqlen_k * s.d * sizeof(double));
    free(x);
    return y;
}

void problem_fill_normal(attn_problem *p, rng_t *rng)
{
    size_t nq = attn_q_numel(&p->params), nkv = attn_kv_numel(&p->params);
    p->Q = xmalloc(nq, sizeof(double), "Q");
    p->K = xmalloc(nkv, sizeof(double), "K");
    p->V = xmalloc(nkv, sizeof(double), "V");
    p->dO = xmalloc(nq, sizeof(double), "dO");
    fill_normal(p->Q, nq, 0, 1, rng);
    fill_normal(p->K, nkv, 0, 1, rng);
    fill_normal(p->V, nkv, 0, 1, rng);
    fill_normal(p->dO, nq, 0, 1, rng);
}

/* A shape flag without --random cannot shape the real input, whose shape is
 * its own, so it means random input: said once per run, on stdout, naming the
 * flags, so that a run meant for the real input is not silently another. */
static void note_implied_random(const options *opt)
{
    static bool said = false;
    static const struct { opt_set flag; const char *name; } shape[] = {
        {OPT_N, "--n"}, {OPT_D, "--d"}, {OPT_BATCH, "--batch"}, {OPT_HEADS, "--heads"}};
    if (said) return;
    said = true;
    char names[64] = "";
    int k = 0;
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        if (!(opt->given & shape[i].flag)) continue;
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", k++ ? ", " : "", shape[i].name);
    }
    printf("%s: note: %s %s --random: random N(0,1) input (seed %llu), not the real model input\n",
           g_prog, names, k > 1 ? "imply" : "implies", (unsigned long long)opt->seed);
}

void load_problem(const options *opt, attn_problem *p)
{
    memset(p, 0, sizeof *p);
    rng_t rng;
    rng_seed(&rng, opt->seed);
    bool files = opt->q || opt->k || opt->v;
    bool random = opt->random || (opt->given & (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS));
    if (files && random)
        fatal(EXIT_BAD_INPUT, "--q/--k/--v cannot be combined with --random, --n, --d, --batch or --heads");
    if (random && !opt->random) note_implied_random(opt);
    if (files && (opt->given & OPT_SEQLEN_K))
        fatal(EXIT_BAD_INPUT, "--seqlen-k %d: the --k file gives seqlen_k; drop the flag", opt->seqlen_k);
    int left, right;
    mask_of_options(opt, &left, &right);
    attn_params *ap = &p->params;

    if (!files && random) {
        int H_kv = (opt->given & OPT_KV_HEADS) ? opt->kv_heads : opt->heads;
        int Sk = (opt->given & OPT_SEQLEN_K) ? opt->seqlen_k : opt->N;
        *ap = (attn_params){opt->batch, opt->heads, H_kv, opt->N, Sk, opt->d,
                            effective_scale(opt, opt->d), left, right};
        require_valid(ap);
        double big = (double)opt->batch * opt->heads * fmax(opt->N, (double)Sk) * opt->d;
        if (big > (double)MAX_TENSOR_ELEMENTS)
            fatal(EXIT_BAD_INPUT, "--batch %d --heads %d --n %d --seqlen-k %d --d %d: %.3g elements "
                  "per tensor; the CPU stages take at most %llu", opt->batch, opt->heads, opt->N,
                  Sk, opt->d, big, MAX_TENSOR_ELEMENTS);
        problem_fill_normal(p, &rng);
        snprintf(p->source, sizeof p->source, "random N(0,1), seed %llu", (unsigned long long)opt->seed);
        return;
    }

    const char *qp, *kp, *vp, *dp;
    char qb[512], kb[512], vb[512], db[512];
    if (files) {
        if (!opt->q || !opt->k || !opt->v)
            fatal(EXIT_BAD_INPUT, "--q, --k and --v must be given together (missing %s)",
                  !opt->q ? "--q" : !opt->k ? "--k" : "--v");
        qp = opt->q; kp = opt->k; vp = opt->v; dp = opt->dO;
        snprintf(p->source, sizeof p->source, "files %s, %s, %s", qp, kp, vp);
    } else {
        snprintf(qb, sizeof qb, "%s/q.npy", DEFAULT_INPUT_DIR);
        snprintf(kb, sizeof kb, "%s/k.npy", DEFAULT_INPUT_DIR);
        snprintf(vb, sizeof vb, "%s/v.npy", DEFAULT_INPUT_DIR);
        snprintf(db, sizeof db, "%s/do.npy", DEFAULT_INPUT_DIR);
        qp = qb; kp = kb; vp = vb; dp = opt->dO ? opt->dO : db;
        snprintf(p->source, sizeof p->source, "all-MiniLM-L6-v2 on a real passage (%s)",
                 DEFAULT_INPUT_DIR);
    }
    dims4 sq, sk, sv, sd;
    p->Q = load_tensor("--q", qp, &sq);
    p->K = load_tensor("--k", kp, &sk);
    p->V = load_tensor("--v", vp, &sv);
    char a[80], b[80];
    if (!same_dims(sk, sv)) {
        dims_str(sk, a, sizeof a);
        dims_str(sv, b, sizeof b);
        fatal(EXIT_BAD_INPUT, "shape mismatch: K is %s but V is %s (K and V share one shape "
              "(B, H_kv, seqlen_k, d))", a, b);
    }
    if (sq.B != sk.B || sq.d != sk.d || sq.H % sk.H != 0) {
        dims_str(sq, a, sizeof a);
        dims_str(sk, b, sizeof b);
        fatal(EXIT_BAD_INPUT, "shape mismatch: Q is %s but K is %s (same B and d; Q's heads a "
              "multiple of K's)", a, b);
    }
    int H_kv = sk.H, Sk = sk.N;
    if (files && (opt->given & OPT_KV_HEADS) && opt->kv_heads != sk.H)
        fatal(EXIT_BAD_INPUT, "--kv-heads %d: the --k file has %d heads", opt->kv_heads, sk.H);
    if (!files) {   /* the real input: fewer key/value heads, fewer keys */
        if (opt->given & OPT_SEQLEN_K) {
            if (opt->seqlen_k > sk.N)
                fatal(EXIT_BAD_INPUT, "--seqlen-k %d: the real input has %d keys", opt->seqlen_k, sk.N);
            Sk = opt->seqlen_k;
        }
        if (opt->given & OPT_KV_HEADS) {
            if (sk.H % opt->kv_heads != 0)
                fatal(EXIT_BAD_INPUT, "--kv-heads %d: the %d query heads must be a multiple of the "
                      "key/value heads", opt->kv_heads, sq.H);
            H_kv = opt->kv_heads;
        }
        p->K = cut_kv(p->K, sk, H_kv, Sk);
        p->V = cut_kv(p->V, sv, H_kv, Sk);
        if (H_kv != sk.H || Sk != sk.N) {
            size_t len = strlen(p->source);
            snprintf(p->source + len, sizeof p->source - len, "; keys cut to %d of %d, %d of %d "
                     "key/value heads", Sk, sk.N, H_kv, sk.H);
        }
    }
    *ap = (attn_params){sq.B, sq.H, H_kv, sq.N, Sk, sq.d, effective_scale(opt, sq.d), left, right};
    require_valid(ap);
    if (dp) {
        p->dO = load_tensor("--do", dp, &sd);
        if (!same_dims(sq, sd)) {
            dims_str(sq, a, sizeof a);
            dims_str(sd, b, sizeof b);
            fatal(EXIT_BAD_INPUT, "shape mismatch: Q is %s but dO is %s", a, b);
        }
    } else {
        /* Gradients need a dO; without --do it is drawn at random, and the
         * source line says so, since dQ, dK, dV then depend on --seed. */
        size_t n = attn_q_numel(ap);
        p->dO = xmalloc(n, sizeof(double), "dO");
        fill_normal(p->dO, n, 0, 1, &rng);
        size_t len = strlen(p->source);
        snprintf(p->source + len, sizeof p->source - len, "; no --do: dO random N(0,1), seed %llu",
                 (unsigned long long)opt->seed);
    }
}

void free_problem(attn_problem *p)
{
    free(p->Q);
    free(p->K);
    free(p->V);
    free(p->dO);
    memset(p, 0, sizeof *p);
}

attn_problem problem_slice(const attn_problem *p, int n, int dn)
{
    const attn_params *ap = &p->params;
    attn_problem sl;
    memset(&sl, 0, sizeof sl);
    int nq = n < ap->seqlen_q ? n : ap->seqlen_q;
    int nk = nq + (ap->seqlen_k - ap->seqlen_q);
    nk = nk < 1 ? 1 : (nk > ap->seqlen_k ? ap->seqlen_k : nk);
    dn = dn < ap->d ? dn : ap->d;
    sl.params = (attn_params){1, 1, 1, nq, nk, dn, ap->softmax_scale, ap->window_size_left,
                              ap->window_size_right};
    const double *src[4] = {p->Q, p->K, p->V, p->dO};
    double **dst[4] = {&sl.Q, &sl.K, &sl.V, &sl.dO};
    for (int t = 0; t < 4; t++) {
        int rows = (t == 1 || t == 2) ? nk : nq;
        *dst[t] = xmalloc((size_t)rows * dn, sizeof(double), "problem slice");
        for (int i = 0; i < rows; i++)
            memcpy(*dst[t] + (size_t)i * dn, src[t] + (size_t)i * ap->d, (size_t)dn * sizeof(double));
    }
    snprintf(sl.source, sizeof sl.source, "slice of head 0: %d queries, %d keys, d = %d", nq, nk, dn);
    return sl;
}
