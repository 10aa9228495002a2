/*
 * src/programs/stage3_main.c -- ./stage3, the program: tiled FlashAttention
 * on the CPU against naive attention (stage 1), and the sweeps of make sweep
 * (--sweep io|blocks|formulas). The algorithm is library code
 * (src/cpu/stage3_tiled.c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage3_tiled.h"
#include "stage1_naive.h"
#include "stage2_online_softmax.h"
#include "tolerances.h"

static const char USAGE[] =
    "stage3: tiled FlashAttention on the CPU, forward and backward, against naive attention\n"
    "usage: ./stage3 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2 Q, K, V, dO; every head), M = 16384\n"
    "elements of SRAM, Br and Bc derived from M. Exit 0 only if every check passes.\n"
    "--sweep io|blocks|formulas writes --csv (see make sweep); --repeats R times each point R\n"
    "times and writes the median.";

static int report(const char *what, double err, double tol) { return report_check(what, 48, err, tol); }

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
static int run_sweep(const options *opt, int argc, char **argv)
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

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv, OPT_TILED_CPU | OPT_SWEEP | OPT_CSV | OPT_REPEATS, USAGE, &opt);
    if (opt.sweep) {
        if (opt.given & (OPT_MASKS & ~(opt_set)OPT_CAUSAL))
            fatal(EXIT_BAD_INPUT, "--sweep io|blocks|formulas runs square problems (--causal or "
                  "none); masks and lengths are swept by ./stage6 --sweep window");
        return outputs_finish(run_sweep(&opt, argc, argv));
    }
    if (opt.given & OPT_REPEATS) fatal(EXIT_BAD_INPUT, "--repeats times the points of a --sweep");
    if (opt.csv) fatal(EXIT_BAD_INPUT, "--csv is written by --sweep");

    naive_require_size_flags(&opt);   /* the reference is naive */
    attn_problem prob;
    naive_load_problem(&opt, &prob);
    const attn_params *p = &prob.params;
    long M;
    flash_blocks b = flash_blocks_from_options(&opt, p, &M);
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
    int d = p->d;

    printf("stage3: tiled FlashAttention (CPU, fp64), %s\n", prob.source);
    if (p->seqlen_q == p->seqlen_k && p->H_kv == p->H)
        printf("  shape (B, H, N, d) = (%d, %d, %d, %d), softmax_scale = %.6g, causal = %s%s\n",
               p->B, p->H, p->seqlen_q, d, p->softmax_scale, attn_is_causal(p) ? "yes" : "no",
               attn_is_masked(p) && !attn_is_causal(p) ? ", window set (see stage6)" : "");
    else
        printf("  B = %d, H = %d, H_kv = %d, seqlen_q = %d, seqlen_k = %d, d = %d, softmax_scale "
               "= %.6g, window = (%d, %d)\n", p->B, p->H, p->H_kv, p->seqlen_q, p->seqlen_k, d,
               p->softmax_scale, p->window_size_left, p->window_size_right);
    printf("  SRAM M = %ld elements, rule %s; forward Br = %d, Bc = %d (%zu elements); "
           "backward Br = %d, Bc = %d (%zu elements)\n", M,
           (opt.given & OPT_BR) ? "--br/--bc" : opt.rule, b.fBr, b.fBc,
           flash_forward_sram_elements(b.fBr, b.fBc, d), b.bBr, b.bBc,
           flash_backward_sram_elements(b.bBr, b.bBc, d));
    if (!(opt.given & OPT_BR)) {   /* the rule's blocks before the cut to the sequence */
        flash_blocks r;
        int (*rule)(long, int, bool, int *, int *) = strcmp(opt.rule, "io") ? derive_blocks : derive_blocks_io;
        rule(M, d, false, &r.fBr, &r.fBc);
        rule(M, d, true, &r.bBr, &r.bBc);
        if (r.fBr != b.fBr || r.fBc != b.fBc || r.bBr != b.bBr || r.bBc != b.bBc)
            printf("  (M alone gives forward Br = %d, Bc = %d, backward Br = %d, Bc = %d; a block is cut\n"
                   "  to the %d query rows and %d key rows there are: longer, it would hold rows that do not exist)\n",
                   r.fBr, r.fBc, r.bBr, r.bBc, p->seqlen_q, p->seqlen_k);
    }
    if (!(opt.given & OPT_BR) && !strcmp(opt.rule, "io"))
        printf("  why these tiles (--rule io): the forward reads all of K and V once per query block,\n"
               "  so the fewest bytes come from the tallest query block that fits (Br = %d%s)\n"
               "  with one key row at a time (Bc = 1); the backward reads Q, dO, dQ, L and D once per\n"
               "  key block, so there the key block takes the room (Bc = %d%s, Br = 1)\n",
               b.fBr, b.fBr == p->seqlen_q ? ", all the query rows" : "",
               b.bBc, b.bBc == p->seqlen_k ? ", all the key rows" : "");
    printf("\n");

    /* The reference: stage 1, every score matrix materialized. */
    double *ref = xmalloc(2 * nq + 2 * nkv + rows, sizeof(double), "naive outputs");
    double *rO = ref, *rdQ = rO + nq, *rdK = rdQ + nq, *rdV = rdK + nkv, *rL = rdV + nkv;
    io_counter nf, nb;
    io_reset(&nf);
    io_reset(&nb);
    double t_naive_f, t_naive_b;
    naive_attention_all_heads(p, prob.Q, prob.K, prob.V, prob.dO, rO, rL, rdQ, rdK, rdV, &nf, &nb,
                              &t_naive_f, &t_naive_b);
    uint64_t naive_f = io_total(&nf), naive_b = io_total(&nb);
    naive_require_finite_scores(rL, p);

    /* The tiled algorithm, outputs poisoned first. */
    size_t nout = 2 * nq + 2 * nkv + rows;
    double *out = xmalloc(nout, sizeof(double), "tiled outputs");
    double *O = out, *dQ = O + nq, *dK = dQ + nq, *dV = dK + nkv, *L = dV + nkv;
    poison(out, nout);
    flash_run run = flash_run_counted(p, prob.Q, prob.K, prob.V, prob.dO, b, M, O, L, dQ, dK, dV);
    io_counter tf = run.io_f, tb = run.io_b;
    tile_stats sf = run.st_f, sb = run.st_b;
    double t_f = run.t_f, t_b = run.t_b;

    int failed = 0;
    flash_errors e = flash_errors_vs(&prob, O, L, dQ, dK, dV, rO, rL, rdQ, rdK, rdV);
    double btol = flash_backward_tol(rL, rows);
    if (p->B * p->H == 1)
        printf("checks (tiled against naive, fp64, the one head; errors relative to the magnitudes)\n");
    else
        printf("checks (tiled against naive, fp64, all %d heads; errors relative to the magnitudes)\n",
               p->B * p->H);
    failed += report("O: max|O - O_ref| / max|V|", e.O, FLASH_FWD_TOL);
    failed += report("L: max|L - L_ref| / max(1, max|L_ref|)", e.L, FLASH_FWD_TOL);
    failed += report("dQ: max|dQ - dQ_ref| / its scale", e.dQ, btol);
    failed += report("dK: max|dK - dK_ref| / its scale", e.dK, btol);
    failed += report("dV: max|dV - dV_ref| / its scale", e.dV, btol);
    printf("    (a gradient's scale: the larger of max|ref| and the size of its terms, c max|K| for dQ,\n"
           "    c max|Q| for dK with c = softmax_scale max|dO| max|V|, and max|dO| for dV)\n");
    failed += report("non-finite outputs (poisoned before the run)",
                     (double)(count_nonfinite(out, nout, false) - count_nonfinite(L, rows, false) +
                              count_nonfinite(L, rows, true)), 0);

    /* Gradient check of the tiled backward on a slice of head 0, in small
     * tiles (Br = 4, Bc = 3) so that it crosses many tile edges. */
    {
        attn_problem g = problem_slice(&prob, 13, 8);
        char what[96];
        snprintf(what, sizeof what, "tiled backward vs central differences (head 0, %d queries, %d keys, d = %d)",
                 g.params.seqlen_q, g.params.seqlen_k, g.params.d);
        failed += report(what, flash_gradcheck(&g, 4, 3), TOL_GRADCHECK);
        free_problem(&g);
    }
    printf("  %-48s %10zu   <= %ld   %s\n", "SRAM high-water mark (elements)", run.high_water,
           M, run.high_water <= (size_t)M ? "ok" : "FAIL");
    failed += run.high_water > (size_t)M;

    uint64_t ff = flash_forward_io_formula(p, b.fBr, b.fBc);
    uint64_t bf = flash_backward_io_formula(p, b.bBr, b.bBc);
    uint64_t nff = naive_forward_io_formula(p), nbf = naive_backward_io_formula(p);
    printf("\nslow-memory traffic, counted while running (elements; bytes at 8 B each)\n");
    printf("  %-16s %15s %15s %6s %13s %10s\n", "", "counted", "formula", "equal", "bytes",
           "time [s]");
#define ROW(name, c, f, t)                                                                      \
    printf("  %-16s %15llu %15llu %6s %13.4g %10.4f\n", name, (unsigned long long)(c),          \
           (unsigned long long)(f), (c) == (f) ? "yes" : "NO", 8.0 * (double)(c), t)
    ROW("naive forward", naive_f, nff, t_naive_f);
    ROW("tiled forward", io_total(&tf), ff, t_f);
    ROW("naive backward", naive_b, nbf, t_naive_b);
    ROW("tiled backward", io_total(&tb), bf, t_b);
#undef ROW
    failed += (naive_f != nff) + (naive_b != nbf) + (io_total(&tf) != ff) + (io_total(&tb) != bf);
    printf("  naive / tiled bytes: forward %.2fx, backward %.2fx\n",
           (double)naive_f / (double)io_total(&tf), (double)naive_b / (double)io_total(&tb));
    if (!(opt.given & OPT_BR) && strcmp(opt.rule, "io") && b.fBr == d && p->seqlen_q > b.fBr)
        printf("  note: the paper's rule stops Br at d = %d, so the forward re-reads K and V "
               "N/Br = %d times whatever M is;\n        --rule io gives each pass the tiles "
               "that minimize its count (the paper's section on choosing the block sizes)\n",
               d, ceil_div(p->seqlen_q, b.fBr));
    uint64_t tiles_f = flash_tiles_formula(p, b.fBr, b.fBc), tiles_b = flash_tiles_formula(p, b.bBr, b.bBc);
    printf("  tiles computed / skipped by the mask: forward %llu / %llu, backward %llu / %llu "
           "(formula %llu, %llu: %s)\n",
           (unsigned long long)sf.tiles_visited, (unsigned long long)sf.tiles_skipped,
           (unsigned long long)sb.tiles_visited, (unsigned long long)sb.tiles_skipped,
           (unsigned long long)tiles_f, (unsigned long long)tiles_b,
           sf.tiles_visited == tiles_f && sb.tiles_visited == tiles_b ? "equal" : "NOT EQUAL");
    failed += (sf.tiles_visited != tiles_f) + (sb.tiles_visited != tiles_b);
    printf("  extra slow memory: naive S, P, dP, dS = %.4g bytes per head; tiled L, D = %.4g bytes "
           "per head\n", 4.0 * 8 * p->seqlen_q * p->seqlen_k, 2.0 * 8 * p->seqlen_q);

    if (opt.out) save_q_like(opt.out, O, p);
    if (opt.lse) save_rows(opt.lse, L, p);
    if (opt.dq) save_q_like(opt.dq, dQ, p);
    if (opt.dk) save_kv_like(opt.dk, dK, p);
    if (opt.dv) save_kv_like(opt.dv, dV, p);

    printf("\nstage3: %s\n", failed ? "FAILED" : "all checks passed");
    free(ref);
    free(out);
    free_problem(&prob);
    return outputs_finish(failed ? EXIT_CHECK_FAILED : 0);
}
