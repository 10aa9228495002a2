/*
 * tests/cpu/test_decode.c -- property tests of stage 8 (src/cpu/stage8_decode.c) on
 * fresh random problems, in fp64:
 *
 *   build/test_decode [--seed S] [--quick]
 *
 * Every run draws a fresh seed (printed; replay with --seed S). Output
 * follows tests/run.sh: one PASS/FAIL line per property.
 *
 * Each draw: B 1..5 sequences (one of length 0 and one of length 1 among
 * them when B >= 3), H_kv 1..4 with groups of 1..4 query heads, seqlen_q
 * 1..16, d 1..40, pages of 1 to 64 keys handed out in shuffled order from a
 * pool that may be smaller than the tables (shared pages), lengths up to the
 * capacity, no mask, causal or a random window (so masks cross page
 * borders), split counts 1..9 and the rule's. Held:
 *   - stage 8 against stage 1 on the dense K, V gathered from the pages,
 *     within FLASH_FWD_TOL (core/tolerances.h) of max|V| and max(1, |L|);
 *     sequences of length 0: O = 0 and L = -inf exactly;
 *   - S splits against one split, within the same bound, and bit for bit on
 *     every sequence whose keys all fall in split 0 (the other partials are
 *     empty and the merge must hand split 0 back unchanged);
 *   - the partials merged in reverse order equal the forward order within
 *     the bound (the merge commutes and associates up to rounding);
 *   - the traffic counted while running equals decode_io_formula, term by
 *     term, and the scratch high-water mark stays within
 *     decode_sram_elements;
 *   - decode_num_splits: in [1, DECODE_MAX_SPLITS], 1 when the work units
 *     fill four fifths of a wave (SMs times CTAs per SM), never more than
 *     half the key blocks; at B = 1, H_kv = 8 on 132 SMs it splits, and more
 *     with three CTAs per SM than with one;
 *   - the checks of decode_plan.h refuse what they should (a page size that
 *     is not a power of two, a table entry outside the pool, a length past
 *     the capacity, a split count out of range) and accept the draws.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "merge.h"
#include "stage1_naive.h"
#include "stage8_decode.h"
#include "test_report.h"
#include "tolerances.h"

static void draw(decode_problem *x, rng_t *rng)
{
    decode_params *p = &x->p;
    int G = rng_int(rng, 1, 4);
    p->B = rng_int(rng, 1, 5);
    p->H_kv = rng_int(rng, 1, 4);
    p->H = G * p->H_kv;
    p->d = rng_int(rng, 1, 40);
    p->seqlen_q = rng_int(rng, 1, 16);
    p->page_size = 1 << rng_int(rng, 0, 6);
    int cap = rng_int(rng, 1, 400);
    p->pages_per_seq = ceil_div(cap, p->page_size);
    int slots = p->B * p->pages_per_seq;
    p->num_pages = rng_int(rng, 0, 3) ? slots + rng_int(rng, 0, 5) : rng_int(rng, 1, slots);
    p->softmax_scale = (0.2 + rng_uniform(rng)) / sqrt((double)p->d);
    switch (rng_int(rng, 0, 2)) {
    case 0: p->window_size_left = p->window_size_right = -1; break;
    case 1: p->window_size_left = -1; p->window_size_right = 0; break;
    default:
        p->window_size_left = rng_int(rng, -1, 80);
        p->window_size_right = rng_int(rng, -1, 3);
    }
    decode_problem_draw(x, rng, 0.5, 2, NULL);
    x->lens = xmalloc((size_t)p->B, sizeof(int), "lens");
    for (int b = 0; b < p->B; b++) x->lens[b] = rng_int(rng, 0, cap);
    if (p->B >= 3) {
        x->lens[rng_int(rng, 0, 1)] = 0;
        x->lens[2] = 1;
    }
    /* entries past a sequence's pages are never read: make them garbage */
    for (int b = 0; b < p->B; b++)
        for (int j = ceil_div(x->lens[b], p->page_size); j < p->pages_per_seq; j++)
            x->table[(size_t)b * p->pages_per_seq + j] = -7;
}

static bool same_io(decode_io a, decode_io b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The split-count rule (decode_num_splits) on random shapes: in range, 1 on
 * a full wave, at most half the key blocks; and more splits for one
 * sequence on an H200 with more CTAs per SM. */
static void test_split_rule(rng_t *rng)
{
    int rule_bad = 0;
    for (int n = 0; n < 20000; n++) {
        int B = rng_int(rng, 1, 64), H_kv = rng_int(rng, 1, 64), Sk = rng_int(rng, 0, 1 << 18);
        int sms = rng_int(rng, 1, 264), ctas = rng_int(rng, 1, 8), s = decode_num_splits(B, H_kv, Sk, sms, ctas);
        int blocks = ceil_div(Sk, DECODE_BLOCK_N);
        rule_bad += s < 1 || s > DECODE_MAX_SPLITS || (s > 1 && s > blocks / 2) ||
                    (5L * B * H_kv >= 4L * sms * ctas && s != 1);
    }
    result(rule_bad == 0, "decode_num_splits: in range, 1 on a full wave, <= half the key blocks",
           "20000 draws, %d bad", rule_bad);
    int h200 = decode_num_splits(1, 8, 8192, 132, 1), h200x3 = decode_num_splits(1, 8, 8192, 132, 3);
    result(h200 > 1 && h200x3 > h200, "decode_num_splits splits B = 1, H_kv = 8 on 132 SMs, more with 3 CTAs each",
           "%d and %d splits", h200, h200x3);

}

/* What decode_plan.h's checks refuse (pages not a power of two or too
 * large, too many query rows, a page past the pool, a length past the
 * capacity, split counts out of range) and what they accept. */
static void test_plan_checks(void)
{
    char why[256];
    decode_params p = {2, 4, 2, 8, 1, 16, 4, 8, 0.3, -1, -1};
    int table[8] = {0, 1, 2, 3, 4, 5, 6, 7}, lens[2] = {64, 10};
    int refused = 0, accepted = decode_params_check(&p, why, sizeof why) == 0 &&
                                 decode_tables_check(&p, table, lens, why, sizeof why) == 0;
    decode_params q = p;
    q.page_size = 24;
    refused += decode_params_check(&q, why, sizeof why) != 0;
    q.page_size = 8192;
    refused += decode_params_check(&q, why, sizeof why) != 0;
    q = p;
    q.seqlen_q = DECODE_MAX_SEQLEN_Q + 1;
    refused += decode_params_check(&q, why, sizeof why) != 0;
    table[1] = 8;
    refused += decode_tables_check(&p, table, lens, why, sizeof why) != 0;
    table[1] = 1;
    table[5] = -1;   /* sequence 1 has 10 keys: only its first page is read */
    accepted += decode_tables_check(&p, table, lens, why, sizeof why) == 0;
    lens[1] = 65;
    refused += decode_tables_check(&p, table, lens, why, sizeof why) != 0;
    refused += decode_splits_check(0, why, sizeof why) != 0;
    refused += decode_splits_check(DECODE_MAX_SPLITS + 1, why, sizeof why) != 0;
    result(refused == 7 && accepted == 2, "decode_plan.h checks refuse bad input and accept good",
           "%d of 7 refused, %d of 2 accepted", refused, accepted);
}

int main(int argc, char **argv)
{
    bool quick = test_args(argc, argv, NULL, NULL);   /* --seed S, --quick; prints the seed */
    (void)skipped;   /* every property here runs on the CPU: nothing to skip */
    rng_t rng = test_rng;
    int draws = quick ? 25 : 150;

    double worst_ref = 0, worst_split = 0, worst_order = 0;
    int io_bad = 0, sram_bad = 0, empty_bad = 0, bit_bad = 0, check_bad = 0;
    size_t bit_rows = 0, empty_seqs = 0;
    for (int n = 0; n < draws; n++) {
        decode_problem x;
        draw(&x, &rng);
        decode_params *p = &x.p;
        char why[256];
        check_bad += decode_params_check(p, why, sizeof why) != 0 ||
                     decode_tables_check(p, x.table, x.lens, why, sizeof why) != 0;
        int max_len = 0;
        for (int b = 0; b < p->B; b++) max_len = x.lens[b] > max_len ? x.lens[b] : max_len;
        int S = n % 3 == 0 ? decode_num_splits(p->B, p->H_kv, max_len, rng_int(&rng, 1, 200), rng_int(&rng, 1, 4))
                           : rng_int(&rng, 1, 9);
        int Sq = p->seqlen_q, d = p->d;
        size_t nq = (size_t)p->B * p->H * Sq * d, rows = (size_t)p->B * p->H * Sq;
        double *buf = xmalloc(3 * (nq + rows), sizeof(double), "outputs");
        double *O = buf, *L = O + nq, *O1 = L + rows, *L1 = O1 + nq, *Or = L1 + rows, *Lr = Or + nq;
        poison(buf, 3 * (nq + rows));
        decode_pair run;
        decode_forward_pair(&x, S, O, L, O1, L1, &run);
        io_bad += !same_io(decode_io_counted(&run.io[0], &run.io[1], S), decode_io_formula(p, x.lens, S));
        io_bad += !same_io(decode_io_counted(&run.io[2], &run.io[3], 1), decode_io_formula(p, x.lens, 1));
        sram_bad += run.sram_high > decode_sram_elements(p);
        sram_arena sram;   /* for the passes run one by one below */
        sram_init(&sram, decode_sram_elements(p));

        /* the partials merged last split first */
        if (S > 1) {
            size_t pr = (size_t)S * rows;
            double *Op = xmalloc(pr * (d + 1), sizeof(double), "partials"), *Lp = Op + pr * d;
            double *Orev = xmalloc(pr * (d + 1), sizeof(double), "reversed"), *Lrev = Orev + pr * d;
            decode_split_pass(p, x.Q, x.K, x.V, x.table, x.lens, S, NULL, NULL, Op, Lp, &sram, NULL);
            for (int s = 0; s < S; s++) {
                memcpy(Orev + (size_t)s * rows * d, Op + (size_t)(S - 1 - s) * rows * d, rows * d * sizeof(double));
                memcpy(Lrev + (size_t)s * rows, Lp + (size_t)(S - 1 - s) * rows, rows * sizeof(double));
            }
            decode_combine(p, S, Orev, Lrev, Or, Lr, &sram, NULL);
            free(Op);
            free(Orev);
        } else {
            memcpy(Or, O, nq * sizeof(double));
            memcpy(Lr, L, rows * sizeof(double));
        }

        double mV = max_abs_finite(x.V, x.pool);
        for (int b = 0; b < p->B; b++) {
            int len = x.lens[b], lo, hi, k0, k1;
            size_t qo = (size_t)b * p->H * Sq * d, ro = (size_t)b * p->H * Sq, hq = (size_t)p->H * Sq;
            decode_key_range(p, len, &lo, &hi);
            decode_split_range(hi - lo, S, 0, &k0, &k1);
            if (k1 - k0 == hi - lo) {
                bit_rows += hq;
                bit_bad += memcmp(O + qo, O1 + qo, hq * d * sizeof(double)) != 0 ||
                           memcmp(L + ro, L1 + ro, hq * sizeof(double)) != 0;
            }
            if (len == 0) {
                empty_seqs++;
                for (size_t k = 0; k < hq * d; k++) empty_bad += O[qo + k] != 0.0 || Or[qo + k] != 0.0;
                for (size_t k = 0; k < hq; k++) empty_bad += L[ro + k] != -INFINITY || Lr[ro + k] != -INFINITY;
                continue;
            }
            attn_params ap = {1, p->H, p->H_kv, Sq, len, d, p->softmax_scale, p->window_size_left,
                              p->window_size_right};
            size_t kvn = (size_t)p->H_kv * len * d;
            double *Kd = xmalloc(2 * kvn + hq * (d + 1), sizeof(double), "dense"), *Vd = Kd + kvn;
            double *rO = Vd + kvn, *rL = rO + hq * d;
            decode_gather_dense(p, x.K, x.table, b, len, Kd);
            decode_gather_dense(p, x.V, x.table, b, len, Vd);
            naive_attention_all_heads(&ap, x.Q + qo, Kd, Vd, NULL, rO, rL, NULL, NULL, NULL, NULL, NULL, NULL,
                                      NULL);
            double Ls = fmax(1.0, max_abs_finite(rL, hq));
            worst_ref = nanmax(worst_ref, rel_err(O + qo, rO, hq * d, mV));
            worst_ref = nanmax(worst_ref, rel_err(L + ro, rL, hq, Ls));
            worst_ref = nanmax(worst_ref, rel_err(O1 + qo, rO, hq * d, mV));
            worst_ref = nanmax(worst_ref, rel_err(L1 + ro, rL, hq, Ls));
            worst_split = nanmax(worst_split, rel_err(O + qo, O1 + qo, hq * d, mV));
            worst_split = nanmax(worst_split, rel_err(L + ro, L1 + ro, hq, Ls));
            worst_order = nanmax(worst_order, rel_err(Or + qo, O + qo, hq * d, mV));
            worst_order = nanmax(worst_order, rel_err(Lr + ro, L + ro, hq, Ls));
            free(Kd);
        }
        sram_free(&sram);
        free(buf);
        decode_problem_free(&x);
    }
    result(worst_ref <= FLASH_FWD_TOL, "decode vs stage 1 (paged, split, grouped, masked, fresh shapes)",
           "%d draws, worst %.3e <= %.0e", draws, worst_ref, FLASH_FWD_TOL);
    result(worst_split <= FLASH_FWD_TOL, "decode: S splits vs one split", "worst %.3e <= %.0e", worst_split,
           FLASH_FWD_TOL);
    result(bit_bad == 0 && bit_rows > 0, "decode: splits = 1 bitwise where only split 0 has keys",
           "%zu rows, %d sequences differ", bit_rows, bit_bad);
    result(worst_order <= FLASH_FWD_TOL, "decode: partials merged in reverse order",
           "worst %.3e <= %.0e", worst_order, FLASH_FWD_TOL);
    result(empty_bad == 0 && empty_seqs > 0, "decode: sequences of length 0 give O = 0, L = -inf",
           "%zu sequences, %d entries wrong", empty_seqs, empty_bad);
    result(io_bad == 0, "decode: counted traffic == decode_io_formula, term by term", "%d mismatches", io_bad);
    result(sram_bad == 0, "decode: scratch high-water <= decode_sram_elements", "%d over", sram_bad);
    result(check_bad == 0, "decode: the draws pass decode_params_check and decode_tables_check",
           "%d refused", check_bad);

    test_split_rule(&rng);
    test_plan_checks();
    printf("test_decode: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
