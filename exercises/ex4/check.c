/*
 * ex4/check.c -- checker of exercise 4: the learner's swa_forward (sliding-
 * window causal attention, tiled) against a materialized reference, on fixed
 * edge cases, on random shapes drawn from a fresh seed, and on the real input.
 *
 * Marked parts, each over every case:
 *   filled      O and L have no NaN left (they are poisoned before the call)
 *   O, L        within 1e-13 (abs) + 1e-13 (rel) of the reference
 *   tiles       tiles_visited equals the number of (query block, key block)
 *               pairs that hold at least one visible (query, key) pair,
 *               counted here by marking every visible pair
 *   traffic     slow-memory reads and writes: Q once, O and L written once,
 *               K and V only for the visited tiles, nothing else
 *   own_loop    swa_forward calls none of the project's finished forwards
 *               that take a window (flash_forward, naive_forward, and their
 *               all-heads drivers), which would make the rest a formality
 * and one number from DIR/answers.txt:
 *   window_saving  the statement's closing question: the fraction of the
 *               causal tiles the window skips at N = 4096, W = 256,
 *               Br = Bc = 64, computed here with band_tiles
 * An untouched stub gets every part as todo, so the count of parts is the
 * same for the stub and for a real attempt.
 * The reference builds each row's masked score row in full, then a two-pass
 * softmax: nothing of the tiled algorithm is shared with it. The mask is
 * mask.h's, the one definition every stage uses: i - W < j <= i is the
 * window (W - 1, 0), and both the reference and the tile count ask
 * mask_visible about each (query, key) pair.
 *
 * Usage: check [DIR] [--seed S] [--cases K]
 * DIR only names what is marked: the checker is built with DIR/swa_forward.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checklib.h"
#include "common.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"
#include "swa_forward.h"

static const double ATOL = 1e-13, RTOL = 1e-13;

typedef struct {
    int N, d, W, Br, Bc;
    const double *Q, *K, *V;   /* NULL: draw random ones */
    const char *what;
} swa_case;

/* The first failure of each part, kept to report. */
typedef struct {
    bool failed;
    char msg[512];
} part;

static part p_filled, p_O, p_L, p_tiles, p_traffic, p_own;
static int cases_run, untouched;

/* The finished forwards that already take a window (stage 1's and stage 3's,
 * through attn_params' mask): the checker is linked with
 * -Wl,--wrap=NAME for each (exercises/exercises.mk), so that a call of one
 * from swa_forward lands here first and is counted. */
static int finished_calls;
static const char *finished_name = "";
/* WRAP(ret, name, params, args): declare __real_name, define __wrap_name
 * counting the call and passing it on. */
#define WRAP(name, where, params, args)                                        \
    void __real_##name params;                                                 \
    void __wrap_##name params;                                                 \
    void __wrap_##name params                                                  \
    {                                                                          \
        finished_calls++, finished_name = #name " (" where ")";                \
        __real_##name args;                                                    \
    }
WRAP(flash_forward, "src/cpu/stage3_tiled.c",
     (const attn_params *p, const double *Q, const double *K, const double *V, int Br, int Bc,
      double *O, double *L, sram_arena *sram, io_counter *io, tile_stats *stats),
     (p, Q, K, V, Br, Bc, O, L, sram, io, stats))
WRAP(flash_attention_all_heads, "src/cpu/stage3_tiled.c",
     (const attn_params *p, const double *Q, const double *K, const double *V, const double *dO,
      flash_blocks b, double *O, double *L, double *dQ, double *dK, double *dV, sram_arena *sram,
      io_counter *io_f, io_counter *io_b, tile_stats *st_f, tile_stats *st_b, double *t_f,
      double *t_b),
     (p, Q, K, V, dO, b, O, L, dQ, dK, dV, sram, io_f, io_b, st_f, st_b, t_f, t_b))
WRAP(naive_forward, "src/cpu/stage1_naive.c",
     (const attn_params *p, const double *Q, const double *K, const double *V, double *S,
      double *P, double *O, double *L, io_counter *io),
     (p, Q, K, V, S, P, O, L, io))
WRAP(naive_attention_all_heads, "src/cpu/stage1_naive.c",
     (const attn_params *p, const double *Q, const double *K, const double *V, const double *dO,
      double *O, double *L, double *dQ, double *dK, double *dV, io_counter *io_f,
      io_counter *io_b, double *t_f, double *t_b),
     (p, Q, K, V, dO, O, L, dQ, dK, dV, io_f, io_b, t_f, t_b))

static void fail(part *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(part *p, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
}

/* The exercise's window of W keys as a mask: query i sees i - W < j <= i. */
static attn_mask window_mask(int N, int W) { return mask_make(N, N, W - 1, 0); }

/* Materialized reference: for each row, the full masked score row, then the
 * softmax over it. */
static void reference(const double *Q, const double *K, const double *V, int N, int d,
                      double scale, int W, double *O, double *L)
{
    double *s = xmalloc((size_t)N, sizeof(double), "score row");
    attn_mask mask = window_mask(N, W);
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY;
        for (int j = 0; j < N; j++) {
            bool visible = mask_visible(mask, i, j);
            double v = 0.0;
            for (int k = 0; k < d; k++) v += Q[(size_t)i * d + k] * K[(size_t)j * d + k];
            s[j] = visible ? v * scale : -INFINITY;
            mx = fmax(mx, s[j]);
        }
        double sum = 0.0;
        for (int j = 0; j < N; j++) sum += exp(s[j] - mx);   /* exp(-inf) = 0 */
        for (int c = 0; c < d; c++) O[(size_t)i * d + c] = 0.0;
        for (int j = 0; j < N; j++) {
            double p = exp(s[j] - mx) / sum;
            for (int c = 0; c < d; c++) O[(size_t)i * d + c] += p * V[(size_t)j * d + c];
        }
        L[i] = mx + log(sum);
    }
    free(s);
}

/* Tiles that hold a visible pair, and the key rows those tiles load, found by
 * marking every visible (query, key) pair's tile (as tests/cpu/test_masks.c
 * does, deliberately: a checker stands alone beside the learner's code). */
static void band_tiles(int N, int W, int Br, int Bc, uint64_t *tiles, uint64_t *key_rows)
{
    int Tr = (N + Br - 1) / Br, Tc = (N + Bc - 1) / Bc;
    /* Deliberately the brute force of tests/cpu/test_masks.c again: the checker
     * is the exercise's own and builds on nothing under tests/. */
    unsigned char *hit = xcalloc((size_t)Tr * Tc, 1, "tile marks");
    attn_mask mask = window_mask(N, W);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (mask_visible(mask, i, j)) hit[(size_t)(i / Br) * Tc + j / Bc] = 1;
    *tiles = *key_rows = 0;
    for (int a = 0; a < Tr; a++)
        for (int b = 0; b < Tc; b++)
            if (hit[(size_t)a * Tc + b]) {
                (*tiles)++;
                *key_rows += (uint64_t)(N - b * Bc < Bc ? N - b * Bc : Bc);
            }
    free(hit);
}

static void run_case(swa_case c, rng_t *rng)
{
    int N = c.N, d = c.d;
    size_t nd = (size_t)N * d;
    double *Qb = NULL, *Kb = NULL, *Vb = NULL;
    const double *Q = c.Q, *K = c.K, *V = c.V;
    if (!Q) {
        double sd = rng_uniform(rng) < 0.5 ? 1.0 : 3.0;   /* mild and peaked softmaxes */
        Qb = xmalloc(nd, sizeof(double), "Q");
        Kb = xmalloc(nd, sizeof(double), "K");
        Vb = xmalloc(nd, sizeof(double), "V");
        fill_normal(Qb, nd, 0, sd, rng);
        fill_normal(Kb, nd, 0, 1, rng);
        fill_normal(Vb, nd, 0, 1, rng);
        Q = Qb, K = Kb, V = Vb;
    }
    double scale = 1.0 / sqrt((double)d);
    double *O = xmalloc(nd, sizeof(double), "O"), *L = xmalloc((size_t)N, sizeof(double), "L");
    double *Or = xmalloc(nd, sizeof(double), "O ref"), *Lr = xmalloc((size_t)N, sizeof(double), "L ref");
    poison(O, nd);
    poison(L, (size_t)N);
    sram_arena sram;
    sram_init(&sram, flash_forward_sram_elements(c.Br, c.Bc, d));
    io_counter io;
    io_reset(&io);
    tile_stats st = {0, 0};
    char where[160];
    snprintf(where, sizeof where, "%s N=%d d=%d W=%d Br=%d Bc=%d", c.what, N, d, c.W, c.Br, c.Bc);

    check_case("swa_forward, %s", where);
    finished_calls = 0;
    swa_forward(Q, K, V, N, d, scale, c.W, c.Br, c.Bc, O, L, &sram, &io, &st);
    if (finished_calls)
        fail(&p_own, "%s: swa_forward called %s, the project's finished masked forward; "
             "the exercise is to write the window's tile loop (its mask, the key blocks it "
             "visits, the count) yourself", where, finished_name);
    check_case("the checker's reference, after swa_forward returned (%s)", where);
    reference(Q, K, V, N, d, scale, c.W, Or, Lr);
    cases_run++;

    size_t nan_o = count_nonfinite(O, nd, false), nan_l = count_nonfinite(L, (size_t)N, false);
    if (nan_o == nd && nan_l == (size_t)N) untouched++;
    if (nan_o || nan_l)
        fail(&p_filled, "%s: %zu of %zu entries of O and %zu of %d of L are NaN or infinite "
             "(every row sees at least itself, so none should be)", where, nan_o, nd, nan_l, N);

    for (int i = 0; i < N && !p_O.failed; i++)
        for (int k = 0; k < d; k++) {
            double g = O[(size_t)i * d + k], r = Or[(size_t)i * d + k];
            if (!(fabs(g - r) <= ATOL + RTOL * fabs(r))) {
                attn_mask mask = window_mask(N, c.W);
                fail(&p_O, "%s: row %d (sees keys %d..%d) differs from the reference "
                     "by %.3g at column %d", where, i, mask_key_first(mask, i),
                     mask_key_last(mask, i), fabs(g - r), k);
                break;
            }
        }
    for (int i = 0; i < N && !p_L.failed; i++)
        if (!(fabs(L[i] - Lr[i]) <= ATOL + RTOL * fabs(Lr[i]))) {
            attn_mask mask = window_mask(N, c.W);
            fail(&p_L, "%s: L[%d] (keys %d..%d) differs from the reference by %.3g",
                 where, i, mask_key_first(mask, i), mask_key_last(mask, i), fabs(L[i] - Lr[i]));
        }

    uint64_t tiles, key_rows;
    band_tiles(N, c.W, c.Br, c.Bc, &tiles, &key_rows);
    if (st.tiles_visited != tiles)
        fail(&p_tiles, "%s: %" PRIu64 " tiles visited, but %" PRIu64 " (query block, key block) "
             "pairs hold a visible key; %s", where, st.tiles_visited, tiles,
             st.tiles_visited > tiles
                 ? "skip the key blocks that lie wholly after the query block's last row "
                   "or wholly before the window of its first row"
                 : "a key block you skipped (or did not count) holds a key some row of the "
                   "query block can see");

    uint64_t want[T_COUNT][2] = {{0}};
    want[T_Q][0] = nd;
    want[T_K][0] = want[T_V][0] = key_rows * (uint64_t)d;
    want[T_O][1] = nd;
    want[T_L][1] = (uint64_t)N;
    for (int t = 0; t < T_COUNT && !p_traffic.failed; t++)
        for (int rw = 0; rw < 2; rw++) {
            uint64_t got = rw ? io.writes[t] : io.reads[t];
            if (got != want[t][rw]) {
                fail(&p_traffic, "%s: %s %s %" PRIu64 " elements, expected %" PRIu64 " "
                     "(Q read once; K and V read only for the tiles you compute; O and L "
                     "written once, through hbm_load / hbm_store)", where, tensor_name[t],
                     rw ? "written" : "read", got, want[t][rw]);
                break;
            }
        }

    sram_free(&sram);
    free(O), free(L), free(Or), free(Lr), free(Qb), free(Kb), free(Vb);
}

static void mark_part(tally *t, const char *key, const part *p, bool stub)
{
    if (stub)
        mark_todo(t, key, "swa_forward still does nothing (O and L unwritten in every case)");
    else
        mark(t, key, !p->failed, "%s", p->msg);
}

/* The closing question of the statement, from answers.txt. */
static void mark_window_saving(tally *t, const char *dir)
{
    enum { N = 4096, W = 256, B = 64 };
    const char *key = "window_saving";
    uint64_t window, causal, key_rows;
    band_tiles(N, W, B, B, &window, &key_rows);
    band_tiles(N, N, B, B, &causal, &key_rows);      /* W >= N: causal only */
    double all = (double)(N / B) * (N / B);
    double saved = 1.0 - (double)window / (double)causal;
    answers *a = answers_load(dir, "answers.txt");
    if (!a) {
        mark_todo(t, key, "no answers.txt to read it from");
        return;
    }
    double x;
    if (take_answer(t, a, key, &x)) {
        const char *hint = "count the tiles each query block computes with the window and "
                           "with the causal mask alone, over all query blocks, and compare";
        if (close_to(x, 1.0 - saved, 0.01, 0))
            hint = "that is the fraction the window keeps; the question asks what it saves";
        else if (close_to(x, 1.0 - window / all, 0.01, 0))
            hint = "compare with the causal tiles (the lower triangle, diagonal included), "
                   "not with all of them";
        else if (x > 1 && close_to(x / 100, saved, 0.01, 0))
            hint = "a fraction between 0 and 1, not a percentage";
        mark_number(t, a, key, x, same_sig(x, saved, 2), saved, "2 significant figures",
                    "%s", hint);
    }
    answers_done(t, a);
}

int main(int argc, char **argv)
{
    const char *dir = check_begin_with_options(argc, argv, 4, "sliding-window causal attention, tiled");
    set_prog_name(argv[0]);
    int n_random = 300;
    uint64_t seed = check_seed_flags(argc, argv, dir, "random cases", &n_random);
    rng_t rng;
    rng_seed(&rng, seed);

    /* Edge cases first: one key per row, the plain causal limit, single
     * blocks, unit blocks, short tails on both sides. */
    static const swa_case fixed[] = {
        {1, 1, 1, 1, 1, NULL, NULL, NULL, "edge case:"},
        {7, 3, 1, 2, 3, NULL, NULL, NULL, "edge case:"},
        {50, 8, 50, 8, 8, NULL, NULL, NULL, "edge case:"},
        {50, 8, 500, 16, 7, NULL, NULL, NULL, "edge case:"},
        {37, 5, 4, 5, 3, NULL, NULL, NULL, "edge case:"},
        {64, 16, 16, 16, 16, NULL, NULL, NULL, "edge case:"},
        {33, 4, 10, 40, 40, NULL, NULL, NULL, "edge case:"},
        {40, 6, 9, 1, 1, NULL, NULL, NULL, "edge case:"},
        {100, 16, 24, 32, 32, NULL, NULL, NULL, "edge case:"},
        {129, 7, 30, 13, 48, NULL, NULL, NULL, "edge case:"},
    };
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) run_case(fixed[k], &rng);

    for (int k = 0; k < n_random; k++) {
        swa_case c = {0};
        c.N = rng_int(&rng, 1, 160);
        c.d = rng_int(&rng, 1, 40);
        int kind = rng_int(&rng, 0, 4);
        c.W = kind == 0 ? 1 : kind == 1 ? c.N + rng_int(&rng, 0, 5) : rng_int(&rng, 1, c.N);
        c.Br = rng_int(&rng, 1, 48);
        c.Bc = rng_int(&rng, 1, 48);
        c.what = "random case:";
        run_case(c, &rng);
    }

    /* The real input: 12 heads of (148, 32), a window of 24, 16 x 16 tiles. */
    options opt;
    char *fake_argv[] = {argv[0], NULL};
    parse_options(1, fake_argv, 0, "", &opt);
    attn_problem prob;
    load_problem(&opt, &prob);
    int heads = prob.params.B * prob.params.H;
    size_t head = (size_t)prob.params.seqlen_q * prob.params.d;
    for (int h = 0; h < heads; h++) {
        char what[64];
        snprintf(what, sizeof what, "real input, head %d:", h);
        swa_case c = {prob.params.seqlen_q, prob.params.d, 24, 16, 16, prob.Q + h * head,
                      prob.K + h * head, prob.V + h * head, what};
        run_case(c, &rng);
    }
    free_problem(&prob);

    printf("  %d cases run (edge cases, random shapes, real input)\n", cases_run);
    tally t = {0};
    bool stub = untouched == cases_run;
    mark_part(&t, "filled", &p_filled, stub);
    mark_part(&t, "O", &p_O, stub);
    mark_part(&t, "L", &p_L, stub);
    mark_part(&t, "tiles", &p_tiles, stub);
    mark_part(&t, "traffic", &p_traffic, stub);
    mark_part(&t, "own_loop", &p_own, stub);
    mark_window_saving(&t, dir);
    return check_end(&t, 4);
}
