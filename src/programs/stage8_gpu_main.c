/*
 * stage8_gpu.c -- the host program of stage 8's GPU kernels
 * (kernels/stage8_decode.cu): decoding against a paged KV cache, checked
 * against the CPU stage 8 in fp64 (src/cpu/stage8_decode.c, itself checked
 * against stage 1).
 *
 *   make stage8_gpu
 *   ./stage8_gpu --sweep tests     every case below, bf16 and fp16, d = 64
 *                                  and 128, fresh random inputs (seed printed)
 *   ./stage8_gpu --sweep small     two small cases (for compute-sanitizer)
 *   ./stage8_gpu [flags]           one case from stage 8's flags (--batch,
 *                                  --heads, --kv-heads, --n, --seqlen-k, --d,
 *                                  --page-size, --splits, --lens, --causal,
 *                                  --window, --dtype bf16|fp16, --seed)
 *
 * Each case: Q, K, V drawn N(0, 1) and rounded to the dtype; the CPU stage 8
 * runs in fp64 on the rounded values (so the reference sees what the GPU
 * sees); the cache's rows that no query may read (past a sequence's length,
 * outside its window, spare pages of the pool) are NaN on the device, and
 * the outputs and the workspace are poisoned (all bytes 0xFF, NaN) before the
 * kernels run, so a row read that should not be or an element left unwritten
 * shows. Held:
 *   - O within 2 unit roundoffs of the dtype of max|V| (the fp32 arithmetic
 *     adds far less than the one rounding of the output), L within 1e-5 of
 *     max(1, max|L|) (fp32); O = 0 and L = -inf exactly on rows that see no
 *     key (sequences of length 0, rows before the first key under causal);
 *   - the rule's split count and others against one split: within the same
 *     bound, and bit for bit on every sequence whose keys all fall in split 0;
 *   - no non-finite output other than L = -inf.
 * One PASS/FAIL line per case and dtype (tests/run.sh); without a GPU, SKIP.
 * Bad input (the kernels' limits, fa_decode_check) is one line and exit 2,
 * with or without a GPU.
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

static const char USAGE[] =
    "stage8_gpu: stage 8's GPU decode kernels against the CPU stage 8 (fp64)\n"
    "usage: ./stage8_gpu --sweep tests|small [--seed S]   or   ./stage8_gpu [one case's flags]\n"
    "One case takes stage 8's flags (see ./stage8 --help): --page-size P (16 to 256), --splits S|auto,\n"
    "--lens a,b,..., --sms N (default: this GPU's), and --dtype bf16|fp16 (default bf16), --d 64|128.";

typedef struct {
    const char *name;
    int B, H, H_kv, Sq, d, page, cap, wl, wr, splits;   /* splits 0: the rule's */
    bool short_seqs;                                    /* every length <= 64: splits all in split 0 */
} gcase;

static const gcase CASES[] = {
    {"gqa-4:1-pages16-rule", 4, 32, 8, 1, 0, 16, 4096, -1, -1, 0, false},
    {"mha-1:1-pages64-7splits", 3, 32, 32, 1, 0, 64, 3000, -1, -1, 7, false},
    {"gqa-8:1-causal-4rows-pages32-3splits", 2, 16, 2, 4, 0, 32, 2000, -1, 0, 3, false},
    {"window-across-pages-16rows-pages64", 4, 8, 2, 16, 0, 64, 1500, 100, 0, 5, false},
    {"mqa-8:1-16rows-two-chunks-pages16", 2, 8, 1, 16, 0, 16, 700, -1, 0, 4, false},
    {"one-sequence-20000-keys-pages256-rule", 1, 32, 8, 1, 0, 256, 20000, -1, -1, 0, false},
    {"batch-70-short-keys-rule", 70, 4, 1, 2, 0, 16, 100, -1, 0, 0, false},
    {"short-sequences-6splits-bitwise", 3, 8, 2, 3, 0, 16, 60, -1, -1, 6, true},
};
static const gcase SMALL[] = {
    {"small-gqa-causal", 3, 4, 2, 2, 0, 16, 150, -1, 0, 3, false},
    {"small-window", 2, 4, 1, 4, 0, 32, 90, 20, 0, 2, false},
};

typedef struct {
    decode_problem x;     /* fp64, the dtype's values */
    int splits, max_len;
} host_case;

static void build(host_case *c, const decode_params *p, const int *lens_given, int splits, int sms, int dtype,
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

static void release(host_case *c) { decode_problem_free(&c->x); }

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
static int run_case(const char *name, host_case *c, int dtype, uint64_t seed)
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

static decode_params params_of(const gcase *g, int d, double scale_given)
{
    decode_params p = {g->B, g->H, g->H_kv, d, g->Sq, g->page, 0, 0, 0, g->wl, g->wr};
    p.pages_per_seq = (g->cap + g->page - 1) / g->page;
    p.num_pages = g->B * p.pages_per_seq + 5;   /* spare pages: NaN, never read */
    p.softmax_scale = scale_given > 0 ? scale_given : 1.0 / sqrt((double)d);
    return p;
}

int main(int argc, char **argv)
{
    stage8_flags f;
    options opt;
    stage8_command_line(&argc, argv,
                        OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_SEED | OPT_MASKS |
                            OPT_SCALE | OPT_SWEEP | OPT_DTYPE | OPT_FP16 | OPT_BF16,
                        USAGE, &f, &opt);
    uint64_t seed = (opt.given & OPT_SEED) ? opt.seed : fresh_seed();
    rng_t rng;
    rng_seed(&rng, seed);
    char why[256];

    if (opt.sweep) {
        if (strcmp(opt.sweep, "tests") && strcmp(opt.sweep, "small"))
            fatal(EXIT_BAD_INPUT, "--sweep: expected 'tests' or 'small', got '%s'", opt.sweep);
        if (opt.given & ~(opt_set)(OPT_SWEEP | OPT_SEED) || f.page_size || f.splits || f.lens || f.sms ||
            f.num_pages || f.block_table)
            fatal(EXIT_BAD_INPUT, "--sweep %s runs its own cases; it takes only --seed", opt.sweep);
        bool small = !strcmp(opt.sweep, "small");
        const gcase *cs = small ? SMALL : CASES;
        int nc = small ? (int)(sizeof SMALL / sizeof SMALL[0]) : (int)(sizeof CASES / sizeof CASES[0]);
        static const int dtypes[] = {FA_BF16, FA_FP16}, ds[] = {64, 128};
        if (fa_device_count() < 1) {
            for (int i = 0; i < nc; i++) printf("SKIP stage8-gpu %s: no GPU here\n", cs[i].name);
            return 0;
        }
        char info[256];
        int sms = 0;
        fa_device_info(info, sizeof info, &sms);
        printf("stage8_gpu --sweep %s: %s; seed %llu\n", opt.sweep, info, (unsigned long long)seed);
        int failed = 0;
        for (int i = 0; i < nc; i++)
            for (int a = 0; a < 2; a++)
                for (int k = 0; k < 2; k++) {
                    decode_params p = params_of(&cs[i], ds[k], 0);
                    if (fa_decode_check(dtypes[a], &p, cs[i].splits ? cs[i].splits : 1) != FA_OK) {
                        printf("FAIL stage8-gpu %s: %s\n", cs[i].name, fa_error_string());
                        failed++;
                        continue;
                    }
                    host_case c;
                    int lens_short[3] = {0, 1, 0};
                    if (cs[i].short_seqs) lens_short[2] = rng_int(&rng, 2, DECODE_BLOCK_N);
                    build(&c, &p, cs[i].short_seqs ? lens_short : NULL, cs[i].splits, sms, dtypes[a], &rng);
                    failed += run_case(cs[i].name, &c, dtypes[a], seed);
                    release(&c);
                }
        printf("stage8_gpu: %s\n", failed ? "FAILED" : "all cases passed");
        return failed ? EXIT_CHECK_FAILED : 0;
    }

    /* one case from the flags */
    const char *dt = (opt.given & OPT_DTYPE) ? opt.dtype : "bf16";
    int dtype = !strcmp(dt, "fp16") ? FA_FP16 : FA_BF16;
    if ((opt.given & OPT_CAUSAL) && (opt.given & OPT_WINDOW))
        fatal(EXIT_BAD_INPUT, "--causal and --window %d,%d: causal is --window -1,0; give one of them",
              opt.window_left, opt.window_right);
    gcase g = {"flags", (opt.given & OPT_BATCH) ? opt.batch : 4, (opt.given & OPT_HEADS) ? opt.heads : 32,
               (opt.given & OPT_KV_HEADS) ? opt.kv_heads : 8, (opt.given & OPT_N) ? opt.N : 1, 0,
               f.page_size ? (int)parse_long("--page-size", f.page_size, -1000000, 1000000) : 16,
               (opt.given & OPT_SEQLEN_K) ? opt.seqlen_k : 4096,
               (opt.given & OPT_WINDOW) ? opt.window_left : -1,
               (opt.given & OPT_WINDOW) ? opt.window_right : opt.causal ? 0 : -1, 0, false};
    if (g.page < 1) g.page = 1;   /* the check below names the flag */
    decode_params p = params_of(&g, (opt.given & OPT_D) ? opt.d : 128, opt.softmax_scale);
    if (f.page_size) p.page_size = (int)parse_long("--page-size", f.page_size, -1000000, 1000000);
    if (f.num_pages) fatal(EXIT_BAD_INPUT, "--num-pages: ./stage8_gpu sizes its pool itself (see ./stage8)");
    if (f.block_table) fatal(EXIT_BAD_INPUT, "--block-table: ./stage8_gpu draws its own (see ./stage8)");
    if (decode_params_check(&p, why, sizeof why)) fatal(EXIT_BAD_INPUT, "%s", why);
    int splits = 0;
    if (f.splits && strcmp(f.splits, "auto")) {
        splits = (int)parse_long("--splits", f.splits, -1000000, 1000000);
        if (decode_splits_check(splits, why, sizeof why)) fatal(EXIT_BAD_INPUT, "%s", why);
    }
    if (fa_decode_check(dtype, &p, splits ? splits : 1) != FA_OK) fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    int *lens = NULL;
    if (f.lens) {
        lens = xmalloc((size_t)p.B, sizeof(int), "--lens");
        parse_list("--lens", f.lens, lens, (size_t)p.B, -(1L << 31) + 1, (1L << 31) - 1);
        int *probe = xcalloc((size_t)p.B * p.pages_per_seq, sizeof(int), "probe");
        if (decode_tables_check(&p, probe, lens, why, sizeof why)) fatal(EXIT_BAD_INPUT, "%s", why);
        free(probe);
    }
    if ((size_t)p.num_pages * p.page_size * p.H_kv * p.d > (1u << 28))
        fatal(EXIT_BAD_INPUT, "the cache pool would hold more than 2^28 elements (the fp64 reference holds it)");
    if (fa_device_count() < 1) {
        printf("SKIP stage8-gpu flags: no GPU here\n");
        free(lens);
        return 0;
    }
    char info[256];
    int sms = 0;
    fa_device_info(info, sizeof info, &sms);
    if (f.sms) sms = (int)parse_long("--sms", f.sms, 1, 100000);
    printf("stage8_gpu: %s; seed %llu\n", info, (unsigned long long)seed);
    host_case c;
    build(&c, &p, lens, splits, sms, dtype, &rng);
    printf("  B = %d, H = %d, H_kv = %d, seqlen_q = %d, d = %d, pages of %d, %d splits (%s), window (%d, %d)\n",
           p.B, p.H, p.H_kv, p.seqlen_q, p.d, p.page_size, c.splits, splits ? "--splits" : "the rule's",
           p.window_size_left, p.window_size_right);
    int failed = run_case("flags", &c, dtype, seed);
    release(&c);
    free(lens);
    return failed ? EXIT_CHECK_FAILED : 0;
}
