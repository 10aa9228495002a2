/*
 * tests/cpu/test_io.c -- stage 1's traffic, counted where it moves, against the
 * model of stage1_naive.h, tensor by tensor.
 *
 * Stage 1 counts each pass's reads and writes as the pass makes them (through
 * hbm_load/hbm_store), so the count can disagree with the formula: a pass that
 * re-reads K for every row, or moves a row without counting it, shows up
 * here. tests/io_mutants.sh builds this test against such broken copies of
 * stage 1 (the sed scripts of tests/mutants/) and requires that every one of them fails.
 *
 *   build/test_io        PASS/FAIL lines (tests/run.sh protocol)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage1_naive.h"

/* What each tensor should see in one head's forward and backward passes:
 * {reads, writes}, from the pass list of stage1_naive.h. */
static void expected(const attn_params *p, uint64_t f[T_COUNT][2], uint64_t b[T_COUNT][2])
{
    uint64_t SS = (uint64_t)p->seqlen_q * p->seqlen_k, qd = (uint64_t)p->seqlen_q * p->d;
    uint64_t kd = (uint64_t)p->seqlen_k * p->d;
    memset(f, 0, sizeof(uint64_t) * T_COUNT * 2);
    memset(b, 0, sizeof(uint64_t) * T_COUNT * 2);
    f[T_Q][0] = qd, f[T_K][0] = kd, f[T_S][1] = SS;                      /* S = scale Q K^T */
    f[T_S][0] = SS, f[T_P][1] = SS, f[T_L][1] = p->seqlen_q;             /* P, L = softmax(S) */
    f[T_P][0] = SS, f[T_V][0] = kd, f[T_O][1] = qd;                      /* O = P V */
    b[T_P][0] = 2 * SS, b[T_dO][0] = 3 * qd, b[T_dV][1] = kd;            /* dV = P^T dO; dS */
    b[T_V][0] = kd, b[T_dP][1] = SS;                                     /* dP = dO V^T */
    b[T_O][0] = qd, b[T_dP][0] = SS, b[T_dS][1] = SS;                    /* dS = P (dP - D) */
    b[T_dS][0] = 2 * SS, b[T_K][0] = kd, b[T_dQ][1] = qd;                /* dQ = scale dS K */
    b[T_Q][0] = qd, b[T_dK][1] = kd;                                     /* dK = scale dS^T Q */
}

int main(void)
{
    set_prog_name("test_io");
    const attn_params cases[] = {
        {1, 1, 1, 37, 37, 8, 0.3, -1, -1},
        {1, 1, 1, 40, 25, 5, 0.3, -1, 0},
        {1, 1, 1, 13, 51, 16, 0.3, 6, 2},
        {1, 1, 1, 1, 1, 1, 1.0, -1, -1},
    };
    int failed = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const attn_params *p = &cases[k];
        size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), SS = (size_t)p->seqlen_q * p->seqlen_k;
        rng_t rng;
        rng_seed(&rng, 7 + k);
        double *x = xmalloc(4 * nq + 4 * nkv + 4 * SS + p->seqlen_q, sizeof(double), "buffers");
        double *Q = x, *dO = Q + nq, *O = dO + nq, *dQ = O + nq, *K = dQ + nq, *V = K + nkv;
        double *dK = V + nkv, *dV = dK + nkv, *S = dV + nkv, *P = S + SS, *dP = P + SS, *dS = dP + SS;
        double *L = dS + SS;
        fill_normal(x, 4 * nq + 4 * nkv, 0, 1, &rng);
        io_counter f, b;
        io_reset(&f);
        io_reset(&b);
        naive_forward(p, Q, K, V, S, P, O, L, &f);
        naive_backward(p, Q, K, V, O, P, dO, dP, dS, dQ, dK, dV, &b);
        uint64_t want_f[T_COUNT][2], want_b[T_COUNT][2];
        expected(p, want_f, want_b);
        char why[256] = "";
        for (int t = 0; t < T_COUNT && !why[0]; t++)
            for (int rw = 0; rw < 2 && !why[0]; rw++) {
                uint64_t gf = rw ? f.writes[t] : f.reads[t], gb = rw ? b.writes[t] : b.reads[t];
                if (gf != want_f[t][rw] || gb != want_b[t][rw])
                    snprintf(why, sizeof why, "%s %s: forward %llu (model %llu), backward %llu "
                             "(model %llu)", tensor_name[t], rw ? "written" : "read",
                             (unsigned long long)gf, (unsigned long long)want_f[t][rw],
                             (unsigned long long)gb, (unsigned long long)want_b[t][rw]);
            }
        bool totals = io_total(&f) == naive_forward_io_formula(p) && io_total(&b) == naive_backward_io_formula(p);
        char name[160];
        snprintf(name, sizeof name, "stage 1 counts every tensor as the model says (Sq %d, Sk %d, d %d, "
                 "window (%d, %d))", p->seqlen_q, p->seqlen_k, p->d, p->window_size_left,
                 p->window_size_right);
        if (!why[0] && totals) {
            printf("PASS %s (forward %llu, backward %llu elements == formula)\n", name,
                   (unsigned long long)io_total(&f), (unsigned long long)io_total(&b));
        } else {
            printf("FAIL %s: %s\n", name, why[0] ? why : "per tensor right, totals differ from the formula");
            failed++;
        }
        free(x);
    }
    return failed ? 1 : 0;
}
