/*
 * ex1/check.c -- checker of exercise 1: arithmetic intensity of naive and
 * tiled attention, and what a simple roofline model predicts for their
 * speed-up on today's memory system and on one where slow memory is as fast
 * as SRAM. The answers come from the project's own formulas
 * (naive_forward_io_formula, derive_blocks, flash_forward_io_formula); the
 * written part is shown beside the model answer.
 *
 * Usage: check [DIR]   (DIR holds answers.txt and written.md; default exercises/ex1)
 */
#include <math.h>
#include <stdio.h>

#include "checklib.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"

/* The problem of statement.md. */
enum { N = 4096, D = 64 };
static const long M = 131072;          /* SRAM, elements */
static const double BYTES = 2.0;       /* fp16, every tensor (L included) */
static const double PEAK = 300e12;     /* FLOP/s */
static const double BW_TODAY = 2e12;   /* slow memory, bytes/s */
static const double BW_EQUAL = 20e12;  /* slow memory as fast as SRAM */

static double roofline_time(double flops, double bytes, double bw)
{
    return fmax(flops / PEAK, bytes / bw);
}

/* The hint for a ratio that is within 1% of the answer but not to three
 * significant figures (31.6 for 31.506): a slip in the division or the
 * rounding, not the misunderstanding the part's own hint is about. */
static const char *near_miss(double x, double want, double rtol, const char *hint)
{
    if (close_to(x, want, 0, 0.01) && !close_to(x, want, 0, rtol))
        return "close, but not to 3 significant figures: redo the division with the "
               "exact counts and round once, at the end";
    return hint;
}

/* An arithmetic intensity answer (FLOPs per byte), with the two usual
 * slips named: the ratio upside down, elements instead of bytes. */
static void mark_intensity(tally *t, answers *a, const char *key, double want, double rtol)
{
    double x;
    if (!take_answer(t, a, key, &x)) return;
    const char *hint = near_miss(x, want, rtol,
                                 "intensity is FLOPs divided by bytes of slow-memory traffic");
    if (close_to(x, 1 / want, 0, rtol)) hint = "upside down: FLOPs per byte, not bytes per FLOP";
    if (close_to(x, want * BYTES, 0, rtol)) hint = "per byte, not per element";
    mark_number(t, a, key, x, close_to(x, want, 0, rtol), want, "3 significant figures", "%s", hint);
}

int main(int argc, char **argv)
{
    const char *dir = check_begin(argc, argv, 1, "FLOPs, bytes and the roofline");
    tally t = {0};
    answers *a = answers_load(dir, "answers.txt");
    if (!a) return check_end(&(tally){.todo = 1}, 1);

    int Br, Bc;
    if (derive_blocks(M, D, false, &Br, &Bc) != 0) {
        printf("  internal error: derive_blocks refused M = %ld, d = %d\n", M, D);
        return 2;
    }
    int Tr = (N + Br - 1) / Br;
    double flops = 4.0 * N * (double)N * D;
    attn_params head = attn_params_make(1, 1, N, D, 1.0);   /* one head, no mask */
    double naive_bytes = BYTES * (double)naive_forward_io_formula(&head);
    double tiled_bytes = BYTES * (double)flash_forward_io_formula(&head, Br, Bc);
    double naive_int = flops / naive_bytes, tiled_int = flops / tiled_bytes;
    double speedup_today = roofline_time(flops, naive_bytes, BW_TODAY) /
                           roofline_time(flops, tiled_bytes, BW_TODAY);
    double speedup_equal = roofline_time(flops, naive_bytes, BW_EQUAL) /
                           roofline_time(flops, tiled_bytes, BW_EQUAL);
    const double rtol = 2e-3;   /* three significant figures */
    double x;

    if (take_answer(&t, a, "Br", &x)) {
        bool swapped = x == Bc;
        mark_number(&t, a, "Br", x, x == Br, Br, "the exact number", "%s", swapped
             ? "that is Bc, the key block; Br is the query block"
             : "read it from ./stage3's third line (see statement.md) or follow "
               "derive_blocks in src/cpu/stage3_tiled.c with M = 131072, d = 64");
    }
    if (take_answer(&t, a, "Bc", &x))
        mark_number(&t, a, "Bc", x, x == Bc, Bc, "the exact number", "%s", x == Br
             ? "that is Br, the query block; Bc is the key block"
             : "derive_blocks starts from Bc = floor(M / 4d) and only shrinks it "
               "if the forward footprint does not fit in M");
    if (take_answer(&t, a, "Tr", &x))
        mark_number(&t, a, "Tr", x, x == Tr, Tr, "the exact number", "Tr counts query blocks: N / Br, rounded up");

    if (take_answer(&t, a, "flops", &x)) {
        const char *hint = "count both matrix products, Q K^T and P V, at 2 FLOPs "
                           "(multiply, add) per term; leave the softmax out";
        if (close_to(x, flops / 2, 0, 1e-9)) hint = "that is one matrix product; there are two";
        if (close_to(x, flops / 4, 0, 1e-9)) hint = "a multiply-add is two FLOPs, and there are two products";
        mark_number(&t, a, "flops", x, close_to(x, flops, 0.5, 0), flops, "the exact count", "%s", hint);
    }
    if (take_answer(&t, a, "naive_bytes", &x)) {
        const char *hint = "take the naive forward count of src/cpu/stage1_naive.h "
                           "(elements) at 2 bytes each";
        if (close_to(x, naive_bytes / BYTES, 0.5, 0)) hint = "that is elements; bytes are 2 per element";
        if (close_to(x, naive_bytes - BYTES * N, 0.5, 0)) hint = "the N entries of L are traffic too";
        mark_number(&t, a, "naive_bytes", x, close_to(x, naive_bytes, 0.5, 0), naive_bytes,
                    "the exact count", "%s", hint);
    }
    if (take_answer(&t, a, "tiled_bytes", &x)) {
        const char *hint = "take the non-causal tiled forward count of "
                           "src/cpu/stage3_tiled.h (elements) with your Tr, at 2 bytes each";
        if (close_to(x, tiled_bytes / BYTES, 0.5, 0)) hint = "that is elements; bytes are 2 per element";
        mark_number(&t, a, "tiled_bytes", x, close_to(x, tiled_bytes, 0.5, 0), tiled_bytes,
                    "the exact count", "%s", hint);
    }
    mark_intensity(&t, a, "naive_intensity", naive_int, rtol);
    mark_intensity(&t, a, "tiled_intensity", tiled_int, rtol);
    if (take_answer(&t, a, "speedup_today", &x)) {
        const char *hint = near_miss(x, speedup_today, rtol,
                                     "time = max(FLOPs / peak, bytes / bandwidth) for each "
                                     "algorithm at 2 TB/s; the speed-up is naive time over "
                                     "tiled time");
        if (close_to(x, 1 / speedup_today, 0, rtol)) hint = "upside down: naive time over tiled time";
        mark_number(&t, a, "speedup_today", x, close_to(x, speedup_today, 0, rtol), speedup_today,
                    "3 significant figures", "%s", hint);
    }
    if (take_answer(&t, a, "speedup_equal", &x)) {
        const char *hint = near_miss(x, speedup_equal, rtol,
                                     "at 20 TB/s, compare each intensity with peak / "
                                     "bandwidth: which of the two terms of the max wins now?");
        if (close_to(x, BW_EQUAL / BW_TODAY, 0, rtol) || close_to(x, speedup_today, 0, rtol))
            hint = "a faster memory shortens the memory term only; check whether "
                   "it still sets either time";
        mark_number(&t, a, "speedup_equal", x, close_to(x, speedup_equal, 0, rtol), speedup_equal,
                    "3 significant figures", "%s", hint);
    }
    answers_done(&t, a);
    show_written(dir, "written.md", 1, &t);
    return check_end(&t, 1);
}
