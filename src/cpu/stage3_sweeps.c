/*
 * stage3_sweeps.c -- stage 3's sweeps, the data of make sweep: counted IO
 * against N and M (--sweep io), wall time against the block sizes (--sweep
 * blocks, medians of --repeats runs), and the closed forms' rows (--sweep
 * formulas). Called by ./stage3's command line (src/programs/stage3_main.c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage1_naive.h"
#include "stage2_online_softmax.h"
#include "stage3_tiled.h"
#include "stage3_sweeps.h"
#include "tolerances.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* One naive and one tiled run of a random (1, 1, N, d) problem, forward and
 * backward, written as CSV rows. Timed --repeats times (default 1): wall_s is
 * the median, since one timing on a shared machine can be off by a factor;
 * the counts must be the same every time. With `paired` (the causal block
 * sweep) the non-causal run of the same problem and tiles is timed too, the
 * two alternating, so that a causal/non-causal time ratio compares runs made
 * under the same load; both get rows. Returns the number of counted !=
 * formula (and high-water > M). */
static int sweep_point(FILE *csv, const options *opt, int N, int d, flash_blocks b, long M,
                       bool with_naive, const char *label, bool paired)
{
    options o = *opt;
    o.N = N;
    o.d = d;
    o.batch = o.heads = 1;
    o.given |= OPT_N | OPT_D;
    o.random = true;   /* a sweep's points are random by design: no note */
    int R = opt->repeats > 0 ? opt->repeats : 1;
    attn_problem prob;
    load_problem(&o, &prob);
    /* The variants timed: the problem as given, or (paired) its non-causal
     * twin first and then the causal problem, on the same Q, K, V, dO. */
    attn_params var[2] = {prob.params, prob.params};
    int nv = paired ? 2 : 1;
    if (paired) {
        var[0].window_size_left = var[0].window_size_right = -1;
        var[1].window_size_left = -1;
        var[1].window_size_right = 0;
    }
    size_t n = attn_q_numel(&prob.params);
    double *buf = xmalloc(5 * n + (size_t)N, sizeof(double), "sweep buffers");
    double *O = buf, *dQ = buf + n, *dK = buf + 2 * n, *dV = buf + 3 * n, *L = buf + 4 * n;
    double *t = xmalloc(8 * (size_t)R, sizeof(double), "sweep times");  /* [variant][4][R] */
    int bad = 0;
    if (with_naive) {
        uint64_t fwd[2] = {0, 0}, bwd[2] = {0, 0};
        for (int r = 0; r < R; r++)
            for (int v = 0; v < nv; v++) {
                io_counter nf, nb;
                io_reset(&nf);
                io_reset(&nb);
                naive_attention_all_heads(&var[v], prob.Q, prob.K, prob.V, prob.dO, O, L, dQ, dK,
                                          dV, &nf, &nb, &t[(v * 4 + 0) * R + r],
                                          &t[(v * 4 + 1) * R + r]);
                fwd[v] = io_total(&nf);
                bwd[v] = io_total(&nb);
                bad += (fwd[v] != naive_forward_io_formula(&var[v])) +
                       (bwd[v] != naive_backward_io_formula(&var[v]));
            }
        for (int v = 0; v < nv; v++) {
            int causal = attn_is_causal(&var[v]);
            uint64_t ff = naive_forward_io_formula(&var[v]), bf = naive_backward_io_formula(&var[v]);
            fprintf(csv, "naive,forward,%d,%d,%d,,,,%llu,%llu,%llu,,%.6f,%d,\n", causal, N, d,
                    (unsigned long long)fwd[v], (unsigned long long)ff, 8ull * fwd[v],
                    median(&t[(v * 4 + 0) * R], R), R);
            fprintf(csv, "naive,backward,%d,%d,%d,,,,%llu,%llu,%llu,,%.6f,%d,\n", causal, N, d,
                    (unsigned long long)bwd[v], (unsigned long long)bf, 8ull * bwd[v],
                    median(&t[(v * 4 + 1) * R], R), R);
        }
    }
    sram_arena sram;
    sram_init(&sram, (size_t)M);
    io_counter tf[2], tb[2];
    tile_stats sf[2], sb[2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < nv; v++) {
            io_reset(&tf[v]);
            io_reset(&tb[v]);
            sf[v] = sb[v] = (tile_stats){0, 0};
            flash_attention_all_heads(&var[v], prob.Q, prob.K, prob.V, prob.dO, b, O, L, dQ, dK,
                                      dV, &sram, &tf[v], &tb[v], &sf[v], &sb[v],
                                      &t[(v * 4 + 2) * R + r], &t[(v * 4 + 3) * R + r]);
            bad += io_total(&tf[v]) != flash_forward_io_formula(&var[v], b.fBr, b.fBc);
            bad += io_total(&tb[v]) != flash_backward_io_formula(&var[v], b.bBr, b.bBc);
            bad += sf[v].tiles_visited != flash_tiles_formula(&var[v], b.fBr, b.fBc);
            bad += sb[v].tiles_visited != flash_tiles_formula(&var[v], b.bBr, b.bBc);
        }
    for (int v = 0; v < nv; v++) {
        int causal = attn_is_causal(&var[v]);
        uint64_t ff = flash_forward_io_formula(&var[v], b.fBr, b.fBc);
        uint64_t bf = flash_backward_io_formula(&var[v], b.bBr, b.bBc);
        fprintf(csv, "%s,forward,%d,%d,%d,%ld,%d,%d,%llu,%llu,%llu,%zu,%.6f,%d,%llu\n", label,
                causal, N, d, M, b.fBr, b.fBc, (unsigned long long)io_total(&tf[v]),
                (unsigned long long)ff, 8ull * io_total(&tf[v]), sram.high_water,
                median(&t[(v * 4 + 2) * R], R), R, (unsigned long long)sf[v].tiles_visited);
        fprintf(csv, "%s,backward,%d,%d,%d,%ld,%d,%d,%llu,%llu,%llu,%zu,%.6f,%d,%llu\n", label,
                causal, N, d, M, b.bBr, b.bBc, (unsigned long long)io_total(&tb[v]),
                (unsigned long long)bf, 8ull * io_total(&tb[v]), sram.high_water,
                median(&t[(v * 4 + 3) * R], R), R, (unsigned long long)sb[v].tiles_visited);
    }
    fflush(csv);
    bad += sram.high_water > (size_t)M;
    sram_free(&sram);
    free(t);
    free(buf);
    free_problem(&prob);
    return bad;
}

#define SWEEP_HEADER \
    "algorithm,pass,causal,N,d,M,Br,Bc,counted_elements,formula_elements,bytes_fp64," \
    "sram_high_water,wall_s,repeats,tiles_visited"

/* --sweep formulas: the closed forms the paper sets beside the measurements,
 * evaluated here by the same C functions the tests check, so that no script
 * re-derives them. Rows: quantity, rule, pass, N, d, M, Br, Bc, value.
 *   footprint    SRAM elements of one pass's tiles under a block rule:
 *                "paper" (FlashAttention Algorithm 1 as printed: Bc =
 *                ceil(M/4d), Br = min(ceil(M/4d), d)), "derive_blocks"
 *                (stage 3's fit of it), "derive_blocks_io" (--rule io)
 *   io_elements  the IO formula of that pass at those tiles (N as given)
 *   footprint_over_M_max  the paper's rule's largest forward footprint / M
 *                over every M from 4d to 2^18 (the M where it is reached)
 *   causal_tiles (query block, key block) tiles a causal forward with
 *                Br = Bc = B computes: "all" (no skipping), "code" (the
 *                tiles core/mask.h's causal mask visits: a key block is
 *                skipped when it starts at or past the query block's
 *                exclusive end i1), "chapter" (the textbook's test, skip only
 *                when the key block starts past i1, which also keeps the
 *                block starting at i1: the tiles of the window (-1, 1)),
 *                beside the code's count the sweeps measure in their
 *                tiles_visited column. */
static void formula_rows(FILE *csv, int N, int d)
{
    static const long Ms[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
    attn_params p = attn_params_make(1, 1, N, d, 1.0 / sqrt((double)d));
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
        long M = Ms[a];
        for (int pass = 0; pass < 2; pass++) {
            bool bwd = pass == 1;
            const char *pname = bwd ? "backward" : "forward";
            int br[3], bc[3];
            const char *rule[3] = {"paper", "derive_blocks", "derive_blocks_io"};
            int c = (int)((M + 4L * d - 1) / (4L * d));
            br[0] = imin(c, d);
            bc[0] = c;
            if (derive_blocks(M, d, bwd, &br[1], &bc[1]) != 0) br[1] = bc[1] = 0;
            if (derive_blocks_io(M, d, bwd, &br[2], &bc[2]) != 0) br[2] = bc[2] = 0;
            for (int r = 0; r < 3; r++) {
                if (br[r] == 0) continue;
                size_t fp = bwd ? flash_backward_sram_elements(br[r], bc[r], d)
                                : flash_forward_sram_elements(br[r], bc[r], d);
                uint64_t io = bwd ? flash_backward_io_formula(&p, br[r], bc[r])
                                  : flash_forward_io_formula(&p, br[r], bc[r]);
                fprintf(csv, "footprint,%s,%s,,%d,%ld,%d,%d,%zu\n", rule[r], pname, d, M, br[r],
                        bc[r], fp);
                fprintf(csv, "io_elements,%s,%s,%d,%d,%ld,%d,%d,%llu\n", rule[r], pname, N, d, M,
                        br[r], bc[r], (unsigned long long)io);
            }
        }
    }
    double worst = 0;
    long worst_M = 0;
    for (long M = 4L * d; M < (1L << 18); M++) {
        int c = (int)((M + 4L * d - 1) / (4L * d));
        double r = (double)flash_forward_sram_elements(imin(c, d), c, d) / (double)M;
        if (r > worst) { worst = r; worst_M = M; }
    }
    int wc = (int)((worst_M + 4L * d - 1) / (4L * d));
    fprintf(csv, "footprint_over_M_max,paper,forward,,%d,%ld,%d,%d,%.6f\n", d, worst_M,
            imin(wc, d), wc, worst);
    for (int B = 4; B <= 512 && B <= N; B *= 2) {
        int64_t T = ceil_div(N, B);
        int64_t code = mask_tiles_visited(mask_causal(N, N), B, B);
        int64_t chapter = mask_tiles_visited(mask_make(N, N, -1, 1), B, B);
        fprintf(csv, "causal_tiles,all,forward,%d,%d,,%d,%d,%lld\n", N, d, B, B, (long long)(T * T));
        fprintf(csv, "causal_tiles,code,forward,%d,%d,,%d,%d,%lld\n", N, d, B, B, (long long)code);
        fprintf(csv, "causal_tiles,chapter,forward,%d,%d,,%d,%d,%lld\n", N, d, B, B,
                (long long)chapter);
    }
}

/* Blocks for a sweep point of length N: --br/--bc or --sram as options say. */
static flash_blocks sweep_blocks(const options *o, int d, int N, long *M)
{
    attn_params p = attn_params_make(1, 1, N, d, 1.0);
    return flash_blocks_from_options(o, &p, M);
}

/* --sweep io: traffic over N (M fixed) and over M (N fixed). --sweep blocks:
 * Br = Bc over powers of two at one N, with wall time (with --causal, each
 * point also non-causal, timed in alternation). --sweep formulas: the closed
 * forms above. d is --d or 64. */
int stage3_sweep(const options *opt, int argc, char **argv)
{
    if (!opt->csv) fatal(EXIT_BAD_INPUT, "--sweep needs --csv FILE");
    if (strcmp(opt->sweep, "io") && strcmp(opt->sweep, "blocks") && strcmp(opt->sweep, "formulas"))
        fatal(EXIT_BAD_INPUT, "--sweep: expected 'io', 'blocks' or 'formulas', got '%s'", opt->sweep);
    int d = (opt->given & OPT_D) ? opt->d : 64, bad = 0;
    long M;
    if (!strcmp(opt->sweep, "formulas")) {
        FILE *f = csv_open(opt->csv, argc, argv, "quantity,rule,pass,N,d,M,Br,Bc,value");
        formula_rows(f, (opt->given & OPT_N) ? opt->N : 2048, d);
        csv_close(f);
        printf("stage3 --sweep formulas: wrote %s\n", opt->csv);
        return 0;
    }
    FILE *csv = csv_open(opt->csv, argc, argv, SWEEP_HEADER);
    if (!strcmp(opt->sweep, "io")) {
        static const int Ns[] = {128, 256, 512, 1024, 2048, 4096};
        static const long Ms[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
        int N_fixed = (opt->given & OPT_N) ? opt->N : 2048;
        for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++) {
            options o = *opt;
            o.given = (o.given & ~(opt_set)(OPT_BR | OPT_BC)) | OPT_SRAM;
            o.M = FLASH_DEFAULT_M;
            fprintf(stderr, "sweep io: N = %d, M = %ld\n", Ns[a], o.M);
            flash_blocks b = sweep_blocks(&o, d, Ns[a], &M);
            bad += sweep_point(csv, &o, Ns[a], d, b, M, true, "tiled", false);
        }
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
            options o = *opt;
            o.given = (o.given & ~(opt_set)(OPT_BR | OPT_BC)) | OPT_SRAM;
            o.M = Ms[a];
            if (derive_blocks(o.M, d, true, &(int){0}, &(int){0}) != 0) continue;
            fprintf(stderr, "sweep io: N = %d, M = %ld\n", N_fixed, o.M);
            flash_blocks b = sweep_blocks(&o, d, N_fixed, &M);
            bad += sweep_point(csv, &o, N_fixed, d, b, M, a == 0, "tiled", false);
            /* the same M with the blocks that minimize the model's count */
            flash_blocks io = {0, 0, 0, 0};
            derive_blocks_io(o.M, d, false, &io.fBr, &io.fBc);
            derive_blocks_io(o.M, d, true, &io.bBr, &io.bBc);
            bad += sweep_point(csv, &o, N_fixed, d, io, o.M, false, "tiled-io", false);
        }
    } else if (!strcmp(opt->sweep, "blocks")) {
        int N = (opt->given & OPT_N) ? opt->N : 2048;
        for (int B = 4; B <= 512 && B <= N; B *= 2) {
            options o = *opt;
            o.given = (o.given & ~(opt_set)OPT_SRAM) | OPT_BR | OPT_BC;
            o.Br = o.Bc = B;
            fprintf(stderr, "sweep blocks: N = %d, Br = Bc = %d\n", N, B);
            flash_blocks b = sweep_blocks(&o, d, N, &M);
            bad += sweep_point(csv, &o, N, d, b, M, B == 4, "tiled", o.causal);
        }
    }
    csv_close(csv);
    printf("stage3 --sweep %s: wrote %s; counted == formula and high-water <= M: %s\n",
           opt->sweep, opt->csv, bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}
