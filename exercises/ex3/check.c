/*
 * ex3/check.c -- checker of exercise 3: how many bytes the naive score matrix
 * takes at N = 16384, d = 128, how many FlashAttention keeps instead (O in
 * fp16, L in fp32), their ratio, and the M / d^2 traffic factor.
 *
 * Usage: check [DIR]   (DIR holds answers.txt; default exercises/ex3)
 */
#include <stdio.h>

#include "checklib.h"

/* The problem of statement.md. */
static const double N = 16384, D = 128, M = 131072;   /* M in elements */
static const double FP16 = 2, FP32 = 4;                 /* bytes per element */

int main(int argc, char **argv)
{
    const char *dir = check_begin(argc, argv, 3, "what S costs, what FlashAttention keeps");
    tally t = {0};
    answers *a = answers_load(dir, "answers.txt");
    if (!a) return check_end(&(tally){.todo = 1}, 3);

    double s_bytes = N * N * FP16;
    double ol_bytes = N * D * FP16 + N * FP32;
    double ratio = s_bytes / ol_bytes;
    double factor = M / (D * D);
    const double rtol = 2e-3;
    double x;

    if (take_answer(&t, a, "s_bytes", &x)) {
        const char *hint = "S holds one score per (query, key) pair, in fp16";
        if (x == N * N) hint = "that counts elements; give bytes";
        else if (x == N * N * FP32) hint = "S is fp16 here, not fp32";
        else if (x == N * N * D * FP16) hint = "S is N x N: the head dimension is summed away";
        mark_number(&t, a, "s_bytes", x, x == s_bytes, s_bytes, "the exact number of bytes", "%s", hint);
    }
    if (take_answer(&t, a, "ol_bytes", &x)) {
        const char *hint = "O is N x d in fp16; L has one fp32 entry per row";
        if (x == N * D * FP16 + N * FP16) hint = "L is kept in fp32, 4 bytes per entry";
        else if (x == N * D * FP16) hint = "L counts too: one entry per query row";
        else if (x == N * FP32) hint = "O counts too: it is N x d";
        else if (x == N * D * FP32 + N * FP32) hint = "O is fp16; only L is fp32";
        mark_number(&t, a, "ol_bytes", x, x == ol_bytes, ol_bytes, "the exact number of bytes", "%s", hint);
    }
    if (take_answer(&t, a, "ratio", &x)) {
        const char *hint = "divide the bytes of S by the bytes of O and L together";
        if (close_to(x, 1 / ratio, 0, rtol)) hint = "upside down: S over O plus L";
        mark_number(&t, a, "ratio", x, close_to(x, ratio, 0, rtol), ratio, "3 significant figures", "%s", hint);
    }
    if (take_answer(&t, a, "reduction_factor", &x)) {
        const char *hint = "the factor is M / d^2, M counted in elements";
        if (close_to(x, M / D, 0, rtol)) hint = "d enters squared";
        else if (close_to(x, M * FP16 / (D * D), 0, rtol) || close_to(x, M / FP16 / (D * D), 0, rtol))
            hint = "M is already in elements: no bytes in this ratio";
        mark_number(&t, a, "reduction_factor", x, close_to(x, factor, 0, rtol), factor,
                    "3 significant figures", "%s", hint);
    }
    answers_done(&t, a);
    return check_end(&t, 3);
}
