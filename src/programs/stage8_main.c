/*
 * src/programs/stage8_main.c -- ./stage8, the program: decoding against a
 * paged KV cache, the keys split and merged by the online softmax's rule,
 * against stage 1, and --sweep io. The algorithm is library code
 * (src/cpu/stage8_decode.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage8_decode.h"
#include "merge.h"
#include "stage1_naive.h"
#include "stage8_cli.h"
#include "stage2_online_softmax.h"
#include "tolerances.h"

static const char USAGE[] =
    "stage8: decoding on the CPU (fp64): a few query rows per sequence against a paged KV cache,\n"
    "the keys split into ranges merged by the online softmax's rule, against stage 1\n"
    "usage: ./stage8 [options]\n"
    "With no options: 4 sequences of 0, 1, a random number and 1000 keys, 8 query heads on 2\n"
    "key/value heads, d = 64, one query row each, pages of 16 keys in shuffled order, the\n"
    "split count of the rule for 132 SMs. Exit 0 only if every check passes.\n"
    "Stage 8's own flags:\n"
    "  --page-size P        keys per page, a power of two in [1, 4096] (default 16)\n"
    "  --splits S|auto      split count, 1 to 128, or the rule's (default auto)\n"
    "  --sms N              SMs the rule plans for (default 132, an H200's)\n"
    "  --ctas-per-sm C      CTAs one SM runs at once, for the rule (default 1)\n"
    "  --lens a,b,...       cache_seqlens, one per sequence (default: see above)\n"
    "  --num-pages N        pages in the pool (default: the block tables' pages, plus 3)\n"
    "  --block-table i,...  B x pages_per_seq page numbers, row-major (default: shuffled)\n"
    "--sweep io --csv FILE writes counted and closed-form traffic over a grid (make sweep).";

static int report(const char *what, double err, double tol) { return report_check(what, 56, err, tol); }

/* Counted terms of the IO model from the two passes' counters. */
/* Bytes the GPU kernels move for these terms: the cache, Q and O in a
 * 2-byte dtype, L and the partials in fp32 (kernels/stage8_decode.cu). */
static double gpu_bytes(decode_io t, int d)
{
    double out_rows = (double)t.out / (d + 1);
    return 2.0 * (double)(t.cache + t.q) + 4.0 * (double)(t.partials_written + t.partials_read) +
           out_rows * (2.0 * d + 4.0);
}

/* --sweep io: counted against closed-form traffic over a grid of batch,
 * heads, query rows, lengths, page sizes and split counts (the rule's
 * count for --sms among them), every sequence at the full length. */
static int run_sweep(const char *csv_path, int sms, int ctas, uint64_t seed, int argc, char **argv)
{
    static const int Bs[] = {1, 4}, Hkvs[] = {2, 8}, Sqs[] = {1, 4}, Ls[] = {256, 1024, 4096};
    static const int pages[] = {16, 64}, splits[] = {1, 2, 4, 8, 16};
    FILE *csv = csv_open(csv_path, argc, argv,
                         "B,H,H_kv,seqlen_q,d,page_size,seqlen_k,num_splits,rule_splits,sms,"
                         "cache,q,partials_written,partials_read,out,counted_elements,formula_elements,"
                         "gpu_bytes,partials_share_of_gpu_bytes");
    rng_t rng;
    rng_seed(&rng, seed);
    int bad = 0, n = 0;
    for (size_t a = 0; a < 2; a++)
        for (size_t c = 0; c < 2; c++)
            for (size_t e = 0; e < 2; e++)
                for (size_t f = 0; f < 3; f++)
                    for (size_t g = 0; g < 2; g++) {
                        decode_problem x;
                        decode_params *p = &x.p;
                        *p = (decode_params){Bs[a], 8, Hkvs[c], 64, Sqs[e], pages[g], 0, 0, 0.125, -1, 0};
                        p->pages_per_seq = ceil_div(Ls[f], p->page_size);
                        p->num_pages = p->B * p->pages_per_seq;
                        decode_problem_draw(&x, &rng, 0, 1, NULL);
                        x.lens = xmalloc((size_t)p->B, sizeof(int), "cache_seqlens");
                        for (int b = 0; b < p->B; b++) x.lens[b] = Ls[f];
                        int rule = decode_num_splits(p->B, p->H_kv, Ls[f], sms, ctas);
                        size_t rows = (size_t)p->B * p->H * p->seqlen_q;
                        double *O = xmalloc(rows * (p->d + 1), sizeof(double), "O, L"), *L = O + rows * p->d;
                        sram_arena sram;
                        sram_init(&sram, decode_sram_elements(p));
                        for (int k = 0; k <= 5; k++) {
                            int S = k < 5 ? splits[k] : rule;
                            if (k == 5 && (rule == 1 || rule == 2 || rule == 4 || rule == 8 || rule == 16))
                                continue;   /* already a row */
                            io_counter sp, cb;
                            io_reset(&sp);
                            io_reset(&cb);
                            decode_forward(p, x.Q, x.K, x.V, x.table, x.lens, S, O, L, &sram, &sp, &cb);
                            decode_io t = decode_io_counted(&sp, &cb, S), fm = decode_io_formula(p, x.lens, S);
                            uint64_t tc = decode_io_total(t), tf = decode_io_total(fm);
                            bad += tc != tf || memcmp(&t, &fm, sizeof t) != 0;
                            double gb = gpu_bytes(t, p->d);
                            fprintf(csv, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,%.6f\n",
                                    p->B, p->H, p->H_kv, p->seqlen_q, p->d, p->page_size, Ls[f], S, rule, sms,
                                    (unsigned long long)t.cache, (unsigned long long)t.q,
                                    (unsigned long long)t.partials_written, (unsigned long long)t.partials_read,
                                    (unsigned long long)t.out, (unsigned long long)tc, (unsigned long long)tf, gb,
                                    4.0 * (double)(t.partials_written + t.partials_read) / gb);
                            n++;
                        }
                        sram_free(&sram);
                        free(O);
                        decode_problem_free(&x);
                    }
    csv_close(csv);
    printf("stage8 --sweep io: wrote %s (%d rows); counted == formula: %s\n", csv_path, n, bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}

/* The problem, the cache's pages and tables, and the split count of this run. */
static void print_problem(const decode_problem *x, int S, int rule, int max_len, int sms, int ctas, uint64_t seed)
{
    const decode_params *p = &x->p;
    int G = p->H / p->H_kv, Sq = p->seqlen_q, d = p->d;
    printf("stage8: decoding against a paged KV cache (CPU, fp64), seed %llu\n", (unsigned long long)seed);
    printf("  B = %d sequences, H = %d query heads on H_kv = %d (groups of %d), seqlen_q = %d, d = %d, "
           "softmax_scale = %.6g, window = (%d, %d)\n", p->B, p->H, p->H_kv, G, Sq, d, p->softmax_scale,
           p->window_size_left, p->window_size_right);
    printf("  pages of %d keys, %d per block table (capacity %lld), pool of %d pages; cache_seqlens =",
           p->page_size, p->pages_per_seq, (long long)decode_capacity(p), p->num_pages);
    for (int b = 0; b < p->B && b < 16; b++) printf(" %d", x->lens[b]);
    printf("%s\n", p->B > 16 ? " ..." : "");
    printf("  block table of sequence %d:", p->B - 1);
    for (int j = 0; j < p->pages_per_seq && j < 12; j++) printf(" %d", x->table[(size_t)(p->B - 1) * p->pages_per_seq + j]);
    printf("%s\n", p->pages_per_seq > 12 ? " ..." : "");
    printf("  splits: %d%s; the rule (decode_num_splits) for B H_kv = %d work units, %d keys, %d SMs of %d CTAs "
           "gives %d\n", S, S == rule ? " (the rule's)" : " (--splits)", p->B * p->H_kv, max_len, sms, ctas, rule);
    printf("\n");
}

/* The errors of a run's outputs against stage 1 on each sequence's dense
 * K, V (O, L with S splits; O1, L1 with one), relative to max|V| and
 * max(1, max|L|); the entries of empty sequences other than O = 0,
 * L = -inf; the rows where only split 0 holds keys and the merge must hand
 * it back bit for bit, and how many sequences of those differ. */
typedef struct {
    double O, L, O1, L1, empty_bad;
    size_t bitwise_rows, bitwise_bad;
} decode_errors;

static decode_errors against_stage1(const decode_problem *x, int S, const double *O, const double *L,
                                    const double *O1, const double *L1)
{
    const decode_params *p = &x->p;
    int Sq = p->seqlen_q, d = p->d;
    size_t pool = (size_t)p->num_pages * p->page_size * p->H_kv * p->d;
    double eO = 0, eL = 0, eO1 = 0, eL1 = 0, empty_bad = 0;
    double mV = max_abs_finite(x->V, pool);
    size_t bitwise_rows = 0, bitwise_bad = 0;
    for (int b = 0; b < p->B; b++) {
        int len = x->lens[b], lo, hi, k0, k1;
        size_t qo = (size_t)b * p->H * Sq * d, ro = (size_t)b * p->H * Sq;
        decode_key_range(p, len, &lo, &hi);
        /* Only split 0 holds keys: every other partial is empty, so the
         * merge must hand split 0's result back bit for bit. */
        decode_split_range(hi - lo, S, 0, &k0, &k1);
        if (k1 - k0 == hi - lo) {
            bitwise_rows += (size_t)p->H * Sq;
            bitwise_bad += memcmp(O + qo, O1 + qo, (size_t)p->H * Sq * d * sizeof(double)) != 0 ||
                           memcmp(L + ro, L1 + ro, (size_t)p->H * Sq * sizeof(double)) != 0;
        }
        if (len == 0) {   /* nothing to see: O = 0, L = -inf exactly */
            for (size_t k = 0; k < (size_t)p->H * Sq * d; k++) empty_bad += O[qo + k] != 0.0;
            for (size_t k = 0; k < (size_t)p->H * Sq; k++) empty_bad += L[ro + k] != -INFINITY;
            continue;
        }
        attn_params ap = {1, p->H, p->H_kv, Sq, len, d, p->softmax_scale, p->window_size_left,
                          p->window_size_right};
        size_t kvn = (size_t)p->H_kv * len * d;
        double *Kd = xmalloc(2 * kvn + (size_t)p->H * Sq * (d + 1), sizeof(double), "dense K, V"), *Vd = Kd + kvn;
        double *rO = Vd + kvn, *rL = rO + (size_t)p->H * Sq * d;
        decode_gather_dense(p, x->K, x->table, b, len, Kd);
        decode_gather_dense(p, x->V, x->table, b, len, Vd);
        naive_attention_all_heads(&ap, x->Q + qo, Kd, Vd, NULL, rO, rL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        double Ls = fmax(1.0, max_abs_finite(rL, (size_t)p->H * Sq));
        eO = nanmax(eO, rel_err(O + qo, rO, (size_t)p->H * Sq * d, mV));
        eL = nanmax(eL, rel_err(L + ro, rL, (size_t)p->H * Sq, Ls));
        eO1 = nanmax(eO1, rel_err(O1 + qo, rO, (size_t)p->H * Sq * d, mV));
        eL1 = nanmax(eL1, rel_err(L1 + ro, rL, (size_t)p->H * Sq, Ls));
        free(Kd);
    }
    decode_errors er = {eO, eL, eO1, eL1, empty_bad, bitwise_rows, bitwise_bad};
    return er;
}

/* Slow-memory traffic counted while running against stage8_decode.h's
 * closed forms, with S splits and with one, and the bytes a GPU would move;
 * the number of counts off their formula. */
static int print_traffic(const decode_problem *x, const decode_pair *run, int S)
{
    const decode_params *p = &x->p;
    int failed = 0, d = p->d;
    decode_io c = decode_io_counted(&run->io[0], &run->io[1], S), fm = decode_io_formula(p, x->lens, S);
    decode_io c1 = decode_io_counted(&run->io[2], &run->io[3], 1), fm1 = decode_io_formula(p, x->lens, 1);
    printf("\nslow-memory traffic, counted while running (elements; the closed form of stage8_decode.h)\n");
    printf("  %-34s %13s %13s %6s   %s\n", "", "counted", "formula", "equal", "formula");
#define ROW(name, a, b, text)                                                                           \
    do {                                                                                                 \
        printf("  %-34s %13llu %13llu %6s   %s\n", name, (unsigned long long)(a), (unsigned long long)(b), \
               (a) == (b) ? "yes" : "NO", text);                                                         \
        failed += (a) != (b);                                                                            \
    } while (0)
    ROW("cache K, V (each row once)", c.cache, fm.cache, "2 d H_kv sum_b (hi_b - lo_b)");
    ROW("Q (once per split with a key)", c.q, fm.q, "H seqlen_q d sum_b nonempty_b");
    ROW("partials written", c.partials_written, fm.partials_written, "B H seqlen_q (d + 1) num_splits");
    ROW("partials read by the merge", c.partials_read, fm.partials_read, "the same");
    ROW("O, L written", c.out, fm.out, "B H seqlen_q (d + 1)");
    ROW("total", decode_io_total(c), decode_io_total(fm), "");
    ROW("total with one split", decode_io_total(c1), decode_io_total(fm1), "no partials");
#undef ROW
    double gb = gpu_bytes(c, d), gb1 = gpu_bytes(c1, d);
    printf("  on the GPU (cache, Q, O in 2 bytes; L, partials in 4): %.6g bytes with %d splits, %.6g with one;\n"
           "  the cache is %.1f%% of them, the partials %.2f%%; wall time %.4f s\n",
           gb, S, gb1, 100.0 * 2.0 * (double)c.cache / gb,
           100.0 * 4.0 * (double)(c.partials_written + c.partials_read) / gb, run->seconds);
    return failed;
}

/* The sequences' lengths (B of them): --lens a,b,... when given; else an
 * empty sequence, a one-key one, the full capacity cap, random between. */
static void lens_of_flags(const char *lens_flag, int B, int cap, rng_t *rng, int *lens)
{
    if (lens_flag) {
        parse_list("--lens", lens_flag, lens, (size_t)B, -(1L << 31) + 1, (1L << 31) - 1);
        return;
    }
    for (int b = 0; b < B; b++) lens[b] = rng_int(rng, cap >= 2 ? 2 : 0, cap);
    if (B >= 3) lens[0] = 0;
    if (B >= 2) lens[B >= 3] = 1;
    lens[B - 1] = cap;
}

/* the shared flags as stage 8 reads them (--help) */
static const flag_help HELP[] = {
    {OPT_N, "query rows per sequence, seqlen_q, 1 to 16 (default 1)"},
    {OPT_D, "head dimension (default 64)"},
    {OPT_BATCH, "sequences B (default 4)"},
    {OPT_HEADS, "query heads H (default 8)"},
    {OPT_KV_HEADS, "key/value heads H_kv, H a multiple of it (default 2; H when --heads is given)"},
    {OPT_SEQLEN_K, "keys each block table holds, the cache's capacity (default 1000)"},
};

int main(int argc, char **argv)
{
    stage8_flags f;
    options opt;
    options_help(HELP, sizeof HELP / sizeof HELP[0]);
    stage8_command_line(&argc, argv,
                        OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_SEED | OPT_MASKS |
                            OPT_SCALE | OPT_SWEEP | OPT_CSV,
                        USAGE, &f, &opt);
    int sms = f.sms ? (int)parse_long("--sms", f.sms, 1, 100000) : 132;
    int ctas = f.ctas ? (int)parse_long("--ctas-per-sm", f.ctas, 1, 64) : 1;
    if (opt.sweep) {
        if (strcmp(opt.sweep, "io")) fatal(EXIT_BAD_INPUT, "--sweep: expected 'io', got '%s'", opt.sweep);
        if (!opt.csv) fatal(EXIT_BAD_INPUT, "--sweep needs --csv FILE");
        if (opt.given & ~(opt_set)(OPT_SWEEP | OPT_CSV | OPT_SEED) || f.page_size || f.splits || f.lens ||
            f.num_pages || f.block_table)
            fatal(EXIT_BAD_INPUT, "--sweep io runs its own grid; it takes only --csv, --seed, --sms and --ctas-per-sm");
        return outputs_finish(run_sweep(opt.csv, sms, ctas, opt.seed, argc, argv));
    }
    if (opt.csv) fatal(EXIT_BAD_INPUT, "--csv is written by --sweep io");

    decode_problem x;
    decode_params *p = &x.p;
    p->B = (opt.given & OPT_BATCH) ? opt.batch : 4;
    p->H = (opt.given & OPT_HEADS) ? opt.heads : 8;
    p->H_kv = (opt.given & OPT_KV_HEADS) ? opt.kv_heads : (opt.given & OPT_HEADS) ? p->H : 2;
    p->d = opt.d;
    p->seqlen_q = (opt.given & OPT_N) ? opt.N : 1;
    p->page_size = f.page_size ? (int)parse_long("--page-size", f.page_size, -1000000, 1000000) : 16;
    int cap = (opt.given & OPT_SEQLEN_K) ? opt.seqlen_k : 1000;
    p->pages_per_seq = p->page_size > 0 ? ceil_div(cap, p->page_size) : 1;
    p->num_pages = f.num_pages ? (int)parse_long("--num-pages", f.num_pages, 1, 1 << 30)
                               : p->B * p->pages_per_seq + 3;
    p->softmax_scale = effective_scale(&opt, p->d);
    if ((opt.given & OPT_CAUSAL) && (opt.given & OPT_WINDOW))
        fatal(EXIT_BAD_INPUT, "--causal and --window %d,%d: causal is --window -1,0; give one of them",
              opt.window_left, opt.window_right);
    p->window_size_left = (opt.given & OPT_WINDOW) ? opt.window_left : -1;
    p->window_size_right = (opt.given & OPT_WINDOW) ? opt.window_right : opt.causal ? 0 : -1;
    char why[256];
    if (decode_params_check(p, why, sizeof why)) decode_fatal(why);
    size_t pool = (size_t)p->num_pages * p->page_size * p->H_kv * p->d;
    if (pool > (1u << 27)) fatal(EXIT_BAD_INPUT, "the cache pool would hold %zu elements (at most 2^27)", pool);

    int *table = NULL;
    if (f.block_table) {
        table = xmalloc((size_t)p->B * p->pages_per_seq, sizeof(int), "--block-table");
        parse_list("--block-table", f.block_table, table, (size_t)p->B * p->pages_per_seq, -(1L << 31) + 1,
                   (1L << 31) - 1);
    }
    x.lens = xmalloc((size_t)p->B, sizeof(int), "cache_seqlens");
    rng_t rng;
    rng_seed(&rng, opt.seed);
    lens_of_flags(f.lens, p->B, cap, &rng, x.lens);
    {
        /* validate against what the table would hold before drawing it */
        int *probe = table;
        if (!probe) {
            probe = xcalloc((size_t)p->B * p->pages_per_seq, sizeof(int), "block_table probe");
        }
        int bad = decode_tables_check(p, probe, x.lens, why, sizeof why);
        if (probe != table) free(probe);
        if (bad) fatal(EXIT_BAD_INPUT, "%s", why);
    }
    int max_len = 0;
    for (int b = 0; b < p->B; b++) max_len = x.lens[b] > max_len ? x.lens[b] : max_len;
    int rule = decode_num_splits(p->B, p->H_kv, max_len, sms, ctas), S = rule;
    if (f.splits && strcmp(f.splits, "auto")) {
        S = (int)parse_long("--splits", f.splits, -1000000, 1000000);
        if (decode_splits_check(S, why, sizeof why)) decode_fatal(why);
    }
    decode_problem_draw(&x, &rng, 0, 1, table);
    free(table);

    int Sq = p->seqlen_q, d = p->d;
    print_problem(&x, S, rule, max_len, sms, ctas, opt.seed);

    size_t nq = (size_t)p->B * p->H * Sq * d, rows = (size_t)p->B * p->H * Sq;
    double *out = xmalloc(2 * (nq + rows), sizeof(double), "outputs");
    double *O = out, *L = O + nq, *O1 = L + rows, *L1 = O1 + nq;
    poison(out, 2 * (nq + rows));
    decode_pair run;
    decode_forward_pair(&x, S, O, L, O1, L1, &run);

    /* The reference: stage 1 on each sequence's dense K, V. */
    int failed = 0;
    decode_errors er = against_stage1(&x, S, O, L, O1, L1);
    double eO = er.O, eL = er.L, eO1 = er.O1, eL1 = er.L1, empty_bad = er.empty_bad;
    size_t bitwise_rows = er.bitwise_rows, bitwise_bad = er.bitwise_bad;
    char what[96];
    printf("checks (against stage 1 on the dense K, V of each sequence; errors relative to max|V| "
           "and max(1, max|L|))\n");
    snprintf(what, sizeof what, "O, %d splits: max|O - O_ref| / max|V|", S);
    failed += report(what, eO, FLASH_FWD_TOL);
    snprintf(what, sizeof what, "L, %d splits: max|L - L_ref| / max(1, max|L_ref|)", S);
    failed += report(what, eL, FLASH_FWD_TOL);
    failed += report("O, one split", eO1, FLASH_FWD_TOL);
    failed += report("L, one split", eL1, FLASH_FWD_TOL);
    failed += report("sequences of 0 keys: entries other than O = 0, L = -inf", empty_bad, 0);
    failed += report("non-finite outputs other than L = -inf (poisoned first)",
                     (double)(count_nonfinite(O, nq, false) + count_nonfinite(L, rows, true)), 0);
    printf("  %-56s %10zu rows  %s\n", "splits = 1 bitwise where only split 0 has keys", bitwise_rows,
           bitwise_bad ? "FAIL" : "ok");
    failed += bitwise_bad != 0;
    printf("  %-56s %10zu   <= %zu   %s\n", "SRAM high-water mark (elements)", run.sram_high,
           decode_sram_elements(p), run.sram_high <= decode_sram_elements(p) ? "ok" : "FAIL");
    failed += run.sram_high > decode_sram_elements(p);

    failed += print_traffic(&x, &run, S);

    printf("\nstage8: %s\n", failed ? "FAILED" : "all checks passed");
    free(out);
    decode_problem_free(&x);
    return outputs_finish(failed ? EXIT_CHECK_FAILED : 0);
}
