/*
 * tests/cpu/test_varlen.c -- the host half of variable lengths (core/varlen.h),
 * on fresh random batches, no GPU:
 *
 *   build/test_varlen [--seed S] [--quick]
 *
 * Every run draws a fresh seed (printed; replay with --seed S). One
 * PASS/FAIL line per property (tests/run.sh):
 *   - the block map: for B 1..40 sequences of lengths 0..700 (zeros and
 *     ones among them, and runs of zeros) and Br in {1, 7, 64, 128, 176, 192},
 *     the varlen_slots(total, B, Br) slots hold every block of every
 *     sequence exactly once, each slot varlen_block calls used names a
 *     block of its sequence (qb Br < len), and at most two slots per
 *     sequence are unused;
 *   - varlen_seq_of gives each sequence's rows, and on arrays the check
 *     refuses (decreasing, past the total, negative) stays inside
 *     [0, total] with lengths >= 0;
 *   - varlen_check accepts the draws and refuses, with one line naming the
 *     array, a first entry other than 0, a decreasing entry, a last entry
 *     other than the total, a sequence longer than max_seqlen, B < 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "test_report.h"
#include "varlen.h"

static int draw_lengths(int32_t *cu, int B, rng_t *rng)
{
    cu[0] = 0;
    for (int b = 0; b < B; b++) {
        int kind = rng_int(rng, 0, 5), len;
        if (kind == 0) len = 0;
        else if (kind == 1) len = 1;
        else if (kind == 2) len = rng_int(rng, 2, 70);
        else len = rng_int(rng, 0, 700);
        cu[b + 1] = cu[b] + len;
    }
    return cu[B];
}

static const int BRS[] = {1, 7, 64, 128, 176, 192};

/* The block map against a direct enumeration; returns 0 or a line in why. */
static int check_map(const int32_t *cu, int B, int Br, char *why, size_t n)
{
    const int total = cu[B], slots = varlen_slots(total, B, Br);
    int *seen = calloc((size_t)B * (total / (Br > 0 ? Br : 1) + 2) + 1, sizeof(int));
    int *first = calloc((size_t)B + 1, sizeof(int));
    if (!seen || !first) fatal(EXIT_CHECK_FAILED, "out of memory");
    for (int b = 0; b <= B; b++) first[b] = b == 0 ? 0 : first[b - 1] + (cu[b] - cu[b - 1] + Br - 1) / Br;
    int used = 0, rc = 0;
    for (int u = 0; u < slots && !rc; u++) {
        int b = -1, qb = -1;
        const int ok = varlen_block(cu, B, total, Br, u, &b, &qb);
        if (b < 0 || b >= B || qb < 0) {
            snprintf(why, n, "slot %d: sequence %d, block %d out of range", u, b, qb);
            rc = -1;
        } else if (ok != (qb * Br < cu[b + 1] - cu[b])) {
            snprintf(why, n, "slot %d: says %s, block %d of sequence %d (length %d)", u, ok ? "used" : "unused",
                     qb, b, cu[b + 1] - cu[b]);
            rc = -1;
        } else if (ok) {
            if (seen[first[b] + qb]++) {
                snprintf(why, n, "block %d of sequence %d given twice (slot %d)", qb, b, u);
                rc = -1;
            }
            used++;
        }
    }
    if (!rc && used != first[B]) {
        snprintf(why, n, "%d blocks reached of %d (slots %d)", used, first[B], slots);
        rc = -1;
    }
    if (!rc && slots - used > 2 * B) {
        snprintf(why, n, "%d unused slots for %d sequences", slots - used, B);
        rc = -1;
    }
    free(seen);
    free(first);
    return rc;
}

int main(int argc, char **argv)
{
    const bool quick = test_args(argc, argv, NULL, NULL);
    const int draws = quick ? 60 : 400;
    char why[512] = "";
    int32_t cu[41], ck[41];

    /* the block map */
    int bad = 0, maps = 0;
    for (int r = 0; r < draws && !bad; r++) {
        const int B = rng_int(&test_rng, 1, 40);
        draw_lengths(cu, B, &test_rng);
        if (r % 7 == 0)   /* a run of empty sequences at the start, the end, or all */
            for (int b = 0; b <= B; b++) cu[b] = (r % 3 == 0 && b < B / 2) ? 0 : cu[b];
        for (size_t i = 0; i < sizeof BRS / sizeof BRS[0] && !bad; i++, maps++)
            if (check_map(cu, B, BRS[i], why, sizeof why)) bad = 1;
    }
    if (bad) result(false, "varlen_block: every block of every sequence in exactly one slot", "%s", why);
    else result(true, "varlen_block: every block of every sequence in exactly one slot", "%d maps", maps);

    /* the rows of each sequence, and clamping of arrays the check refuses */
    bad = 0;
    for (int r = 0; r < draws && !bad; r++) {
        const int B = rng_int(&test_rng, 1, 40);
        const int tq = draw_lengths(cu, B, &test_rng), tk = draw_lengths(ck, B, &test_rng);
        for (int b = 0; b < B && !bad; b++) {
            varlen_seq s = varlen_seq_of(cu, ck, tq, tk, b);
            if (s.q0 != cu[b] || s.len_q != cu[b + 1] - cu[b] || s.k0 != ck[b] || s.len_k != ck[b + 1] - ck[b]) {
                snprintf(why, sizeof why, "sequence %d of %d: rows %d+%d, %d+%d", b, B, s.q0, s.len_q, s.k0, s.len_k);
                bad = 1;
            }
        }
        int32_t m[41];   /* malformed: random entries, some negative, some past the total */
        for (int b = 0; b <= B; b++) m[b] = rng_int(&test_rng, -50, tq + 50);
        for (int b = 0; b < B && !bad; b++) {
            varlen_seq s = varlen_seq_of(m, m, tq, tq, b);
            if (s.q0 < 0 || s.len_q < 0 || s.q0 + s.len_q > tq || s.k0 < 0 || s.len_k < 0 || s.k0 + s.len_k > tq) {
                snprintf(why, sizeof why, "malformed entry %d: rows %d+%d outside [0, %d]", b, s.q0, s.len_q, tq);
                bad = 1;
            }
            int sb, qb;
            varlen_block(m, B, tq, 64, rng_int(&test_rng, 0, varlen_slots(tq, B, 64) - 1), &sb, &qb);
            if (sb < 0 || sb >= B) {
                snprintf(why, sizeof why, "malformed array: block map gave sequence %d of %d", sb, B);
                bad = 1;
            }
        }
    }
    result(!bad, "varlen_seq_of: each sequence's rows; malformed arrays stay inside the tensors", "%s",
           bad ? why : "ok");

    /* the host check */
    bad = 0;
    int refused = 0;
    for (int r = 0; r < draws && !bad; r++) {
        const int B = rng_int(&test_rng, 1, 40);
        const int tq = draw_lengths(cu, B, &test_rng), tk = draw_lengths(ck, B, &test_rng);
        int mq = 0, mk = 0;
        for (int b = 0; b < B; b++) {
            if (cu[b + 1] - cu[b] > mq) mq = cu[b + 1] - cu[b];
            if (ck[b + 1] - ck[b] > mk) mk = ck[b + 1] - ck[b];
        }
        if (varlen_check(cu, ck, B, tq, tk, mq, mk, why, sizeof why)) {
            bad = 1;
            break;
        }
        int32_t w[41];
        const int b = rng_int(&test_rng, 1, B);
        struct { const char *what; int kind; } cases[] = {
            {"first entry", 0}, {"decreasing", 1}, {"last entry", 2}, {"max_seqlen", 3}};
        for (int c = 0; c < 4 && !bad; c++) {
            memcpy(w, cu, sizeof(int32_t) * (size_t)(B + 1));
            int mq2 = mq;
            if (cases[c].kind == 0) w[0] = 1;
            else if (cases[c].kind == 1) w[b] = w[b - 1] - 1;
            else if (cases[c].kind == 2) w[B] = tq + 1;
            else mq2 = mq - 1;
            if (cases[c].kind == 3 && mq == 0) continue;   /* nothing shorter than 0 */
            char line[256] = "";
            if (!varlen_check(w, ck, B, tq, tk, mq2, mk, line, sizeof line) ||
                !strstr(line, cases[c].kind == 3 ? "max_seqlen_q" : "cu_seqlens_q") || strchr(line, '\n')) {
                snprintf(why, sizeof why, "%s not refused in one line naming it: \"%s\"", cases[c].what, line);
                bad = 1;
            } else {
                refused++;
            }
        }
    }
    if (!bad && !varlen_check(cu, ck, 0, 0, 0, 0, 0, why, sizeof why)) {
        snprintf(why, sizeof why, "B = 0 accepted");
        bad = 1;
    }
    if (bad) result(false, "varlen_check: accepts the draws, refuses bad arrays in one line", "%s", why);
    else result(true, "varlen_check: accepts the draws, refuses bad arrays in one line", "%d refused", refused);

    printf("test_varlen: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
