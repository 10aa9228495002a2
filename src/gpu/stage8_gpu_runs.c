/*
 * stage8_gpu_runs.c -- one case of stage 8's GPU decode kernels run and
 * judged against the CPU stage 8 in fp64 (the checks are
 * src/programs/stage8_gpu_main.c's), shared by ./stage8_gpu (one case from
 * the flags) and its test suite tests/gpu/stage8_gpu_tests.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fa_gpu.h"
#include "stage8_cli.h"
#include "stage8_decode.h"   /* the CPU reference */
#include "fa_decode.h"
#include "stage8_gpu_runs.h"
void build(host_case *c, const decode_params *p, const int *lens_given, int splits, int sms, int dtype,
           rng_t *rng)
{
    memset(c, 0, sizeof *c);
    c->x.p = *p;
    int B = p->B;
    decode_problem_draw(&c->x, rng, 0, 1, NULL);
    /* the values the GPU holds, so that the reference sees the same inputs */
    void *tmp = xmalloc(c->x.pool > c->x.nq ? c->x.pool : c->x.nq, 2, "dtype copy");
    fa_host_from_double(tmp, c->x.Q, c->x.nq, dtype);
    fa_host_to_double(c->x.Q, tmp, c->x.nq, dtype);
    fa_host_from_double(tmp, c->x.K, c->x.pool, dtype);
    fa_host_to_double(c->x.K, tmp, c->x.pool, dtype);
    fa_host_from_double(tmp, c->x.V, c->x.pool, dtype);
    fa_host_to_double(c->x.V, tmp, c->x.pool, dtype);
    free(tmp);
    c->x.lens = xmalloc((size_t)B, sizeof(int), "cache_seqlens");
    int cap = (int)decode_capacity(p);
    if (lens_given) memcpy(c->x.lens, lens_given, (size_t)B * sizeof(int));
    else {
        for (int b = 0; b < B; b++) c->x.lens[b] = rng_int(rng, 0, cap);
        if (B >= 3) c->x.lens[0] = 0;
        if (B >= 2) c->x.lens[B >= 3] = 1;
        c->x.lens[B - 1] = cap;
    }
    c->max_len = 0;
    for (int b = 0; b < B; b++) c->max_len = c->x.lens[b] > c->max_len ? c->x.lens[b] : c->max_len;
    c->splits = splits > 0 ? splits : fa_decode_num_splits(dtype, p, c->max_len, sms);
}

void release(host_case *c) { decode_problem_free(&c->x); }

/* The cache as the device gets it: rows no query of any sequence may read
 * are NaN (a kernel that reads one puts a NaN in some output). */
static void cache_for_device(const host_case *c, const double *src, void *dst, int dtype)
{
    const decode_params *p = &c->x.p;
    size_t row = (size_t)p->H_kv * p->d, rows = (size_t)p->num_pages * p->page_size;
    unsigned char *need = xcalloc(rows, 1, "rows read");
    for (int b = 0; b < p->B; b++) {
        int lo, hi;
        decode_key_range(p, c->x.lens[b], &lo, &hi);
        for (int j = lo; j < hi; j++)
            need[(size_t)c->x.table[(size_t)b * p->pages_per_seq + j / p->page_size] * p->page_size +
                 (size_t)(j % p->page_size)] = 1;
    }
    double *x = xmalloc(rows * row, sizeof(double), "cache copy");
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < row; k++) x[r * row + k] = need[r] ? src[r * row + k] : NAN;
    fa_host_from_double(dst, x, rows * row, dtype);
    free(x);
    free(need);
}

/* One GPU run: O, L back in fp64 (poisoned before the kernels). */
static int gpu_run(const host_case *c, int dtype, int splits, double *O, double *L)
{
    const decode_params *p = &c->x.p;
    size_t es = fa_dtype_bytes(dtype), rows = (size_t)p->B * p->H * p->seqlen_q;
    size_t ws = fa_decode_workspace_bytes(p, splits);
    void *hq = xmalloc(c->x.pool > c->x.nq ? c->x.pool : c->x.nq, es, "host staging");
    void *dq = fa_malloc(c->x.nq * es), *dk = fa_malloc(c->x.pool * es), *dv = fa_malloc(c->x.pool * es);
    void *dout = fa_malloc(c->x.nq * es), *dw = ws ? fa_malloc(ws) : NULL;
    float *dl = fa_malloc(rows * sizeof(float));
    int *dt = fa_malloc((size_t)p->B * p->pages_per_seq * sizeof(int)), *dlens = fa_malloc((size_t)p->B * sizeof(int));
    int rc = FA_ERR_CUDA;
    if (!dq || !dk || !dv || !dout || !dl || !dt || !dlens || (ws && !dw)) {
        fprintf(stderr, "stage8_gpu: device allocation failed\n");
        goto done;
    }
    fa_host_from_double(hq, c->x.Q, c->x.nq, dtype);
    fa_copy_to_device(dq, hq, c->x.nq * es);
    cache_for_device(c, c->x.K, hq, dtype);
    fa_copy_to_device(dk, hq, c->x.pool * es);
    cache_for_device(c, c->x.V, hq, dtype);
    fa_copy_to_device(dv, hq, c->x.pool * es);
    fa_copy_to_device(dt, c->x.table, (size_t)p->B * p->pages_per_seq * sizeof(int));
    fa_copy_to_device(dlens, c->x.lens, (size_t)p->B * sizeof(int));
    fa_poison(dout, c->x.nq * es);
    fa_poison(dl, rows * sizeof(float));
    if (dw) fa_poison(dw, ws);
    fa_decode_ptrs x = {dq, dk, dv, dt, dlens, dout, dl, dw, ws};
    rc = fa_decode(dtype, p, splits, &x, NULL);
    if (rc == FA_OK) rc = fa_synchronize();
    if (rc != FA_OK) {
        fprintf(stderr, "stage8_gpu: %s\n", fa_error_string());
        goto done;
    }
    fa_copy_to_host(hq, dout, c->x.nq * es);
    fa_host_to_double(O, hq, c->x.nq, dtype);
    float *lf = xmalloc(rows, sizeof(float), "L");
    fa_copy_to_host(lf, dl, rows * sizeof(float));
    for (size_t r = 0; r < rows; r++) L[r] = lf[r];
    free(lf);
done:
    fa_free(dq);
    fa_free(dk);
    fa_free(dv);
    fa_free(dout);
    fa_free(dl);
    fa_free(dt);
    fa_free(dlens);
    if (dw) fa_free(dw);
    free(hq);
    return rc;
}

/* max |got - ref| / scale where both are finite; an infinity must match
 * exactly; a NaN is +inf. */
static double err_of(const double *got, const double *ref, size_t n, double scale)
{
    return rel_err(got, ref, n, scale);
}

/* Run one case in one dtype: returns 0 on PASS. */
int run_case(const char *name, host_case *c, int dtype, uint64_t seed)
{
    const decode_params *p = &c->x.p;
    size_t nq = c->x.nq, rows = (size_t)p->B * p->H * p->seqlen_q;
    double *buf = xmalloc(3 * (nq + rows), sizeof(double), "outputs");
    double *rO = buf, *rL = rO + nq, *O = rL + rows, *L = O + nq, *O1 = L + rows, *L1 = O1 + nq;
    sram_arena sram;
    sram_init(&sram, decode_sram_elements(p));
    decode_forward(p, c->x.Q, c->x.K, c->x.V, c->x.table, c->x.lens, 1, rO, rL, &sram, NULL, NULL);
    sram_free(&sram);
    char tag[160];
    snprintf(tag, sizeof tag, "stage8-gpu %s %s d%d splits %d", name, fa_dtype_name(dtype), p->d, c->splits);
    if (gpu_run(c, dtype, c->splits, O, L) != FA_OK || gpu_run(c, dtype, 1, O1, L1) != FA_OK) {
        printf("FAIL %s: the kernels did not run (%s) [seed %llu]\n", tag, fa_error_string(), (unsigned long long)seed);
        free(buf);
        return 1;
    }
    double mV = max_abs_finite(c->x.V, c->x.pool), Ls = fmax(1.0, max_abs_finite(rL, rows));
    double tolO = 2 * fa_unit_roundoff(dtype), tolL = 1e-5;
    double eO = err_of(O, rO, nq, mV), eL = err_of(L, rL, rows, Ls);
    double eO1 = err_of(O1, rO, nq, mV), eL1 = err_of(L1, rL, rows, Ls);
    size_t bad = count_nonfinite(O, nq, false) + count_nonfinite(L, rows, true) + count_nonfinite(O1, nq, false) +
                 count_nonfinite(L1, rows, true);
    size_t bit_rows = 0, bit_bad = 0, Sq = (size_t)p->seqlen_q, d = (size_t)p->d, hq = (size_t)p->H * Sq;
    for (int b = 0; b < p->B; b++) {
        int lo, hi, k0, k1;
        decode_key_range(p, c->x.lens[b], &lo, &hi);
        decode_split_range(hi - lo, c->splits, 0, &k0, &k1);
        if (k1 - k0 != hi - lo) continue;
        bit_rows += hq;
        bit_bad += memcmp(O + b * hq * d, O1 + b * hq * d, hq * d * sizeof(double)) != 0 ||
                   memcmp(L + b * hq, L1 + b * hq, hq * sizeof(double)) != 0;
    }
    bool ok = eO <= tolO && eL <= tolL && eO1 <= tolO && eL1 <= tolL && bad == 0 && bit_bad == 0;
    /* every short sequence lies in split 0, so the bitwise check covers them all */
    bool short_all = true;
    for (int b = 0; b < p->B; b++) short_all &= c->x.lens[b] <= DECODE_BLOCK_N;
    if (short_all && bit_rows != rows) ok = false;
    char seedtxt[48] = "";
    if (!ok) snprintf(seedtxt, sizeof seedtxt, " [seed %llu]", (unsigned long long)seed);
    printf("%s %s: O err %.3g (one split %.3g) <= %.3g of max|V|, L err %.3g (%.3g) <= %.0e, "
           "%zu non-finite, %zu of %zu rows bitwise vs one split checked, %zu differ%s\n",
           ok ? "PASS" : "FAIL", tag, eO, eO1, tolO, eL, eL1, tolL, bad, bit_rows, rows, bit_bad, seedtxt);
    free(buf);
    return ok ? 0 : 1;
}

decode_params params_of(const gcase *g, int d, double scale_given)
{
    decode_params p = {g->B, g->H, g->H_kv, d, g->Sq, g->page, 0, 0, 0, g->wl, g->wr};
    p.pages_per_seq = (g->cap + g->page - 1) / g->page;
    p.num_pages = g->B * p.pages_per_seq + 5;   /* spare pages: NaN, never read */
    p.softmax_scale = scale_given > 0 ? scale_given : 1.0 / sqrt((double)d);
    return p;
}
