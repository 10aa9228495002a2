/*
 * ex2/check.c -- checker of exercise 2: the online-softmax recurrence by hand
 * for the logits [3, 1, 6, 2] in blocks of 2.
 *
 * The right values come from running the project's own recurrence
 * (online_softmax_update, stage 2) block by block. A value is also accepted
 * when it matches the hand path, the same recurrence with every exponential
 * rounded to 6 decimals as the statement's table gives them; the tolerance
 * (TOL) covers rounding the intermediate results to 6 decimals, and no more.
 *
 * Usage: check [DIR]   (DIR holds answers.txt; default exercises/ex2)
 */
#include <math.h>
#include <stdio.h>

#include "checklib.h"
#include "stage2_online_softmax.h"

static const double X[] = {3, 1, 6, 2};
enum { NX = 4, BLOCK = 2, NB = NX / BLOCK };
static const double TOL = 1.5e-6;

/* The trace: state after each block, and the final L. */
typedef struct {
    double m[NB], alpha[NB], l[NB];
    double two_pass_l, L;
} trace;

/* The exact path: the project's update, d = 0 (no values, only m and l). */
static trace exact_trace(void)
{
    trace t;
    double m = -INFINITY, l = 0.0;
    for (int b = 0; b < NB; b++) {
        double m_old = m, alpha;
        online_softmax_update(&m, &l, NULL, X + b * BLOCK, NULL, BLOCK, 0, 0, &alpha);
        /* The update reports 1 for a block that adds nothing; here every
         * block is finite, so alpha is exp(m_old - m), 0 on the first. */
        t.m[b] = m;
        t.alpha[b] = exp(m_old - m);
        (void)alpha;
        t.l[b] = l;
    }
    double mx = -INFINITY, s = 0.0;
    for (int j = 0; j < NX; j++) mx = fmax(mx, X[j]);
    for (int j = 0; j < NX; j++) s += exp(X[j] - mx);
    t.two_pass_l = s;
    double o_unused, L;
    online_softmax_finalize(m, l, &o_unused, 0, &L);
    t.L = L;
    return t;
}

/* exp as the statement's table gives it: rounded to 6 decimals. */
static double hexp(double x) { return round(exp(x) * 1e6) / 1e6; }

/* The hand path: the same recurrence, written out, with hexp. */
static trace hand_trace(void)
{
    trace t;
    double m = -INFINITY, l = 0.0;
    for (int b = 0; b < NB; b++) {
        const double *x = X + b * BLOCK;
        double m_new = m;
        for (int j = 0; j < BLOCK; j++) m_new = fmax(m_new, x[j]);
        double alpha = m == -INFINITY ? 0.0 : hexp(m - m_new);
        l = alpha * l;
        for (int j = 0; j < BLOCK; j++) l += hexp(x[j] - m_new);
        m = m_new;
        t.m[b] = m, t.alpha[b] = alpha, t.l[b] = l;
    }
    double mx = -INFINITY, s = 0.0;
    for (int j = 0; j < NX; j++) mx = fmax(mx, X[j]);
    for (int j = 0; j < NX; j++) s += hexp(X[j] - mx);
    t.two_pass_l = s;
    t.L = m + log(l);
    return t;
}

static bool ok(double x, double exact, double hand)
{
    return close_to(x, exact, TOL, 0) || close_to(x, hand, TOL, 0);
}

int main(int argc, char **argv)
{
    const char *dir = check_begin(argc, argv, 2, "the online softmax by hand");
    tally t = {0};
    answers *a = answers_load(dir, "answers.txt");
    if (!a) return check_end(&(tally){.todo = 1}, 2);
    trace e = exact_trace(), h = hand_trace();
    double x;
    char key[32];

    for (int b = 0; b < NB; b++) {
        snprintf(key, sizeof key, "block%d_m", b + 1);
        if (take_answer(&t, a, key, &x))
            mark_number(&t, a, key, x, x == e.m[b], e.m[b], "6 decimals", "m is the largest logit seen so far, this block included");

        snprintf(key, sizeof key, "block%d_alpha", b + 1);
        if (take_answer(&t, a, key, &x)) {
            const char *hint = "alpha = exp(m_old - m_new), the factor that moves the old "
                               "sum onto the new maximum";
            if (b == 0 && x == 1)
                hint = "before the first block nothing has been seen: m_old = -inf, "
                       "so what is exp(m_old - m_new)?";
            else if (x > 1)
                hint = "alpha never exceeds 1: it is exp(m_old - m_new), and m_new >= m_old";
            mark_number(&t, a, key, x, ok(x, e.alpha[b], h.alpha[b]), e.alpha[b], "6 decimals", "%s", hint);
        }

        snprintf(key, sizeof key, "block%d_l", b + 1);
        if (take_answer(&t, a, key, &x)) {
            const char *hint = "l = alpha * l_old + the sum over this block of exp(x - m_new)";
            double no_rescale = b == 0 ? NAN : e.l[b - 1] + (e.l[b] - e.alpha[b] * e.l[b - 1]);
            if (b > 0 && close_to(x, no_rescale, TOL, 0))
                hint = "the old l was summed against the old maximum: rescale it by alpha first";
            mark_number(&t, a, key, x, ok(x, e.l[b], h.l[b]), e.l[b], "6 decimals", "%s", hint);
        }
    }
    if (take_answer(&t, a, "two_pass_l", &x))
        mark_number(&t, a, "two_pass_l", x, ok(x, e.two_pass_l, h.two_pass_l), e.two_pass_l, "6 decimals",
             "take the maximum of all four logits first, then sum exp(x_i - max) "
             "over all four");
    if (take_answer(&t, a, "L", &x)) {
        double m = e.m[NB - 1], l = e.l[NB - 1];
        const char *hint = "L = m + ln(l) with the final m and l; keep 7 digits of ln(l) "
                           "and round only at the end";
        if (close_to(x, log(l), 1e-5, 0)) hint = "add the running maximum back: L = m + ln(l)";
        else if (close_to(x, m + log10(l), 1e-5, 0)) hint = "natural logarithm, not base 10";
        mark_number(&t, a, "L", x, ok(x, e.L, h.L), e.L, "6 decimals", "%s", hint);
    }
    answers_done(&t, a);
    return check_end(&t, 2);
}
