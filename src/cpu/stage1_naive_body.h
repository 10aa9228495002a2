/*
 * stage1_naive_body.h -- the body of stage 1's naive attention, written once
 * over an element type. stage1_naive.c includes it twice:
 *   T = double, FN(x) = x         (the fp64 reference)
 *   T = float,  FN(x) = x##_f32   (every operation rounded to single precision)
 * EXP and LOG are the matching exp/expf and log/logf; LOAD and STORE, the
 * matching hbm_load/hbm_store, follow from FN. The parameters are undefined
 * at the end, ready for the next type. Not a public header.
 *
 * Each pass reads its operands from slow memory once and writes its result
 * once, and counts that as it does it: a K or V that every row needs is
 * brought into fast memory whole (`kv`), the rows of Q, S, P, dO ... stream
 * through row buffers. Only the buffers are new; the arithmetic, in its
 * order, is the textbook's. The passes repeat one loop shape deliberately:
 * each is written as the pass the IO model counts.
 */

#define LOAD FN(hbm_load)
#define STORE FN(hbm_store)

//> naive-forward
void FN(naive_forward)(const attn_params *p, const T *Q, const T *K, const T *V, T *S, T *P,
                       T *O, T *L, io_counter *io)
{
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    T scale = (T)p->softmax_scale;
    attn_mask mask = attn_mask_of(p);
    T *kv = xmalloc((size_t)Sk * d, sizeof(T), "K or V in fast memory");
    T *row = xmalloc((size_t)Sk, sizeof(T), "a row of S or P");
    T *vec = xmalloc((size_t)d, sizeof(T), "a row of Q or O");

    /* 1. S = softmax_scale * Q K^T, the whole Sq x Sk score matrix, to slow
     * memory. A key the mask hides gets -inf: exp(-inf) = 0 exactly, where a
     * finite stand-in such as -1e9 would lose to real scores below it. */
    LOAD(kv, K, Sk, d, d, io, T_K);
    for (int i = 0; i < Sq; i++) {
        LOAD(vec, Q + (size_t)i * d, 1, d, d, io, T_Q);
        for (int j = 0; j < Sk; j++) {
            T s = 0;
            for (int c = 0; c < d; c++) s += vec[c] * kv[(size_t)j * d + c];
            row[j] = mask_visible(mask, i, j) ? s * scale : -(T)INFINITY;
        }
        STORE(S + (size_t)i * Sk, row, 1, Sk, Sk, io, T_S);
    }

    //> naive-softmax
    /* 2. P = softmax of each row of S, read back from slow memory. Subtracting
     * the row max keeps every exponent <= 0, so nothing overflows. A row whose
     * keys are all masked has m = -inf: its softmax is empty (P = 0, L = -inf),
     * where exp(-inf - -inf) would be NaN. */
    for (int i = 0; i < Sq; i++) {
        LOAD(row, S + (size_t)i * Sk, 1, Sk, Sk, io, T_S);
        T m = -(T)INFINITY;
        for (int j = 0; j < Sk; j++) m = row[j] > m ? row[j] : m;
        T l = 0, Li = -(T)INFINITY;
        if (m == -(T)INFINITY) {
            for (int j = 0; j < Sk; j++) row[j] = 0;
        } else {
            for (int j = 0; j < Sk; j++) {
                row[j] = EXP(row[j] - m);
                l += row[j];
            }
            for (int j = 0; j < Sk; j++) row[j] /= l;
            Li = m + LOG(l);  /* logsumexp of the row, kept for stage 3 */
        }
        STORE(P + (size_t)i * Sk, row, 1, Sk, Sk, io, T_P);
        STORE(L + i, &Li, 1, 1, 1, io, T_L);
    }
    //< naive-softmax

    /* 3. O = P V, reading P back once more. */
    LOAD(kv, V, Sk, d, d, io, T_V);
    for (int i = 0; i < Sq; i++) {
        LOAD(row, P + (size_t)i * Sk, 1, Sk, Sk, io, T_P);
        for (int c = 0; c < d; c++) vec[c] = 0;
        for (int j = 0; j < Sk; j++) {
            T pj = row[j];
            for (int c = 0; c < d; c++) vec[c] += pj * kv[(size_t)j * d + c];
        }
        STORE(O + (size_t)i * d, vec, 1, d, d, io, T_O);
    }
    free(kv);
    free(row);
    free(vec);
}
//< naive-forward

//> naive-backward
void FN(naive_backward)(const attn_params *p, const T *Q, const T *K, const T *V, const T *O,
                        const T *P, const T *dO, T *dP, T *dS, T *dQ, T *dK, T *dV,
                        io_counter *io)
{
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    T scale = (T)p->softmax_scale;
    size_t kd = (size_t)Sk * d;
    T *kv = xmalloc(kd, sizeof(T), "K, V, dK or dV in fast memory");
    T *row = xmalloc((size_t)Sk, sizeof(T), "a row of P or dS");
    T *row2 = xmalloc((size_t)Sk, sizeof(T), "a row of dP");
    T *vec = xmalloc((size_t)d, sizeof(T), "a row of dO, Q or dQ");
    T *vec2 = xmalloc((size_t)d, sizeof(T), "a row of O");

    /* dV = P^T dO   (from O = P V): dV adds up in fast memory while the rows
     * of P and dO stream past, and is written once. */
    for (size_t x = 0; x < kd; x++) kv[x] = 0;
    for (int i = 0; i < Sq; i++) {
        LOAD(row, P + (size_t)i * Sk, 1, Sk, Sk, io, T_P);
        LOAD(vec, dO + (size_t)i * d, 1, d, d, io, T_dO);
        for (int j = 0; j < Sk; j++) {
            T pj = row[j];
            for (int c = 0; c < d; c++) kv[(size_t)j * d + c] += pj * vec[c];
        }
    }
    STORE(dV, kv, Sk, d, d, io, T_dV);

    /* The same product loop as S = Q K^T above, written out deliberately:
     * stage 1 spells each line of the algorithm as its own step. */
    /* dP = dO V^T   (from O = P V) */
    LOAD(kv, V, Sk, d, d, io, T_V);
    for (int i = 0; i < Sq; i++) {
        LOAD(vec, dO + (size_t)i * d, 1, d, d, io, T_dO);
        for (int j = 0; j < Sk; j++) {
            T s = 0;
            for (int c = 0; c < d; c++) s += vec[c] * kv[(size_t)j * d + c];
            row[j] = s;
        }
        STORE(dP + (size_t)i * Sk, row, 1, Sk, Sk, io, T_dP);
    }

    /* dS = P * (dP - D) with D_i = dO_i . O_i   (from P = softmax(S); the
     * softmax Jacobian's row sum sum_k P_ik dP_ik equals dO_i . O_i) */
    for (int i = 0; i < Sq; i++) {
        LOAD(vec, dO + (size_t)i * d, 1, d, d, io, T_dO);
        LOAD(vec2, O + (size_t)i * d, 1, d, d, io, T_O);
        T D = 0;
        for (int c = 0; c < d; c++) D += vec[c] * vec2[c];
        LOAD(row, P + (size_t)i * Sk, 1, Sk, Sk, io, T_P);
        LOAD(row2, dP + (size_t)i * Sk, 1, Sk, Sk, io, T_dP);
        for (int j = 0; j < Sk; j++) row[j] = row[j] * (row2[j] - D);
        STORE(dS + (size_t)i * Sk, row, 1, Sk, Sk, io, T_dS);
    }

    /* dQ = scale * dS K   (from S = scale * Q K^T) */
    LOAD(kv, K, Sk, d, d, io, T_K);
    for (int i = 0; i < Sq; i++) {
        LOAD(row, dS + (size_t)i * Sk, 1, Sk, Sk, io, T_dS);
        for (int c = 0; c < d; c++) vec[c] = 0;
        for (int j = 0; j < Sk; j++) {
            T g = row[j] * scale;
            for (int c = 0; c < d; c++) vec[c] += g * kv[(size_t)j * d + c];
        }
        STORE(dQ + (size_t)i * d, vec, 1, d, d, io, T_dQ);
    }

    /* dK = scale * dS^T Q   (from S = scale * Q K^T), added up in fast memory */
    for (size_t x = 0; x < kd; x++) kv[x] = 0;
    for (int i = 0; i < Sq; i++) {
        LOAD(row, dS + (size_t)i * Sk, 1, Sk, Sk, io, T_dS);
        LOAD(vec, Q + (size_t)i * d, 1, d, d, io, T_Q);
        for (int j = 0; j < Sk; j++) {
            T g = row[j] * scale;
            for (int c = 0; c < d; c++) kv[(size_t)j * d + c] += g * vec[c];
        }
    }
    STORE(dK, kv, Sk, d, d, io, T_dK);
    free(kv);
    free(row);
    free(row2);
    free(vec);
    free(vec2);
}
//< naive-backward

#undef T
#undef FN
#undef EXP
#undef LOG
#undef LOAD
#undef STORE
