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
#include "stage3_sweeps.h"
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

/* The problem, the SRAM and the blocks of this run, and why these blocks. */
static void print_setup(const options *opt, const attn_problem *prob, flash_blocks b, long M)
{
    const attn_params *p = &prob->params;
    int d = p->d;
    printf("stage3: tiled FlashAttention (CPU, fp64), %s\n", prob->source);
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
           (opt->given & OPT_BR) ? "--br/--bc" : opt->rule, b.fBr, b.fBc,
           flash_forward_sram_elements(b.fBr, b.fBc, d), b.bBr, b.bBc,
           flash_backward_sram_elements(b.bBr, b.bBc, d));
    if (!(opt->given & OPT_BR)) {   /* the rule's blocks before the cut to the sequence */
        flash_blocks r;
        int (*rule)(long, int, bool, int *, int *) = strcmp(opt->rule, "io") ? derive_blocks : derive_blocks_io;
        rule(M, d, false, &r.fBr, &r.fBc);
        rule(M, d, true, &r.bBr, &r.bBc);
        if (r.fBr != b.fBr || r.fBc != b.fBc || r.bBr != b.bBr || r.bBc != b.bBc)
            printf("  (M alone gives forward Br = %d, Bc = %d, backward Br = %d, Bc = %d; a block is cut\n"
                   "  to the %d query rows and %d key rows there are: longer, it would hold rows that do not exist)\n",
                   r.fBr, r.fBc, r.bBr, r.bBc, p->seqlen_q, p->seqlen_k);
    }
    if (!(opt->given & OPT_BR) && strcmp(opt->rule, "io")) {   /* the paper's blocks, when they overrun M */
        int pBr, pBc;
        paper_blocks(M, d, &pBr, &pBc);
        size_t pf = flash_forward_sram_elements(pBr, pBc, d), pb = flash_backward_sram_elements(pBr, pBc, d);
        if (pf > (size_t)M || pb > (size_t)M)
            printf("  why these tiles (--rule paper): the paper's rule (with floor for its ceil),\n"
                   "  Bc = floor(M / 4d) and Br = min(Bc, d), gives Br = %d, Bc = %d; with the score block\n"
                   "  and the statistics these tiles need %zu elements forward and %zu backward against\n"
                   "  M = %ld; where that is more than M, the larger block shrinks by one until the tile fits\n",
                   pBr, pBc, pf, pb, M);
    }
    if (!(opt->given & OPT_BR) && !strcmp(opt->rule, "io"))
        printf("  why these tiles (--rule io): the forward reads all of K and V once per query block,\n"
               "  so the fewest bytes come from the tallest query block that fits (Br = %d%s)\n"
               "  with one key row at a time (Bc = 1); the backward reads Q, dO, dQ, L and D once per\n"
               "  key block, so there the key block takes the room (Bc = %d%s, Br = 1)\n",
               b.fBr, b.fBr == p->seqlen_q ? ", all the query rows" : "",
               b.bBc, b.bBc == p->seqlen_k ? ", all the key rows" : "");
    printf("\n");
}

/* Slow-memory traffic counted while running against the closed forms, for
 * the naive and the tiled passes, and the tiles the mask skipped against
 * theirs: the table and its notes; the number of counts off their formula. */
static int print_traffic(const options *opt, const attn_params *p, flash_blocks b, uint64_t naive_f,
                         uint64_t naive_b, double t_naive_f, double t_naive_b, const flash_run *run)
{
    int failed = 0, d = p->d;
    io_counter tf = run->io_f, tb = run->io_b;
    tile_stats sf = run->st_f, sb = run->st_b;
    double t_f = run->t_f, t_b = run->t_b;
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
    if (!(opt->given & OPT_BR) && strcmp(opt->rule, "io") && b.fBr == d && p->seqlen_q > b.fBr)
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
    return failed;
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv, OPT_TILED_CPU | OPT_SWEEP | OPT_CSV | OPT_REPEATS, USAGE, &opt);
    if (opt.sweep) {
        if (opt.given & (OPT_MASKS & ~(opt_set)OPT_CAUSAL))
            fatal(EXIT_BAD_INPUT, "--sweep io|blocks|formulas runs square problems (--causal or "
                  "none); masks and lengths are swept by ./stage6 --sweep window");
        return outputs_finish(stage3_sweep(&opt, argc, argv));
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

    print_setup(&opt, &prob, b, M);
    fflush(stdout);   /* the blocks now, before the long run, even through a pipe */

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

    failed += print_traffic(&opt, p, b, naive_f, naive_b, t_naive_f, t_naive_b, &run);

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
