/*
 * stage1_naive_body.h -- the body of stage 1's naive attention, written once
 * over an element type. stage1_naive.c includes it twice:
 *   T = double, FN(x) = x         (the fp64 reference)
 *   T = float,  FN(x) = x##_f32   (every operation rounded to single precision)
 * EXP and LOG are the matching exp/expf and log/logf. Not a public header.
 */

//> naive-forward
void FN(naive_forward)(const T *Q, const T *K, const T *V, int N, int d, T softmax_scale,
                       bool causal, T *S, T *P, T *O, T *L, io_counter *io)
{
    /* 1. S = softmax_scale * Q K^T, the whole N x N score matrix, to slow memory. */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            T s = 0;
            for (int c = 0; c < d; c++) s += Q[(size_t)i * d + c] * K[(size_t)j * d + c];
            S[(size_t)i * N + j] = (causal && j > i) ? -(T)INFINITY : s * softmax_scale;
        }
    io_read(io, T_Q, (uint64_t)N * d);
    io_read(io, T_K, (uint64_t)N * d);
    io_write(io, T_S, (uint64_t)N * N);

    /* 2. P = softmax of each row of S, read back from slow memory. Subtracting
     * the row max keeps every exponent <= 0, so nothing overflows. */
    for (int i = 0; i < N; i++) {
        const T *s = S + (size_t)i * N;
        T *p = P + (size_t)i * N;
        T m = -(T)INFINITY;
        for (int j = 0; j < N; j++) m = s[j] > m ? s[j] : m;
        T l = 0;
        for (int j = 0; j < N; j++) {
            p[j] = EXP(s[j] - m);
            l += p[j];
        }
        for (int j = 0; j < N; j++) p[j] /= l;
        L[i] = m + LOG(l);  /* logsumexp of the row, kept for stage 3 */
    }
    io_read(io, T_S, (uint64_t)N * N);
    io_write(io, T_P, (uint64_t)N * N);
    io_write(io, T_L, (uint64_t)N);

    /* 3. O = P V, reading P back once more. */
    for (int i = 0; i < N; i++) {
        T *o = O + (size_t)i * d;
        for (int c = 0; c < d; c++) o[c] = 0;
        for (int j = 0; j < N; j++) {
            T p = P[(size_t)i * N + j];
            for (int c = 0; c < d; c++) o[c] += p * V[(size_t)j * d + c];
        }
    }
    io_read(io, T_P, (uint64_t)N * N);
    io_read(io, T_V, (uint64_t)N * d);
    io_write(io, T_O, (uint64_t)N * d);
}
//< naive-forward

//> naive-backward
void FN(naive_backward)(const T *Q, const T *K, const T *V, const T *O, const T *P,
                        const T *dO, int N, int d, T softmax_scale,
                        T *dP, T *dS, T *dQ, T *dK, T *dV, io_counter *io)
{
    size_t nd = (size_t)N * d;
    for (size_t x = 0; x < nd; x++) dQ[x] = dK[x] = dV[x] = 0;

    /* dV = P^T dO   (from O = P V) */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            T p = P[(size_t)i * N + j];
            for (int c = 0; c < d; c++) dV[(size_t)j * d + c] += p * dO[(size_t)i * d + c];
        }
    io_read(io, T_P, (uint64_t)N * N);
    io_read(io, T_dO, nd);
    io_write(io, T_dV, nd);

    /* dP = dO V^T   (from O = P V) */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            T s = 0;
            for (int c = 0; c < d; c++) s += dO[(size_t)i * d + c] * V[(size_t)j * d + c];
            dP[(size_t)i * N + j] = s;
        }
    io_read(io, T_dO, nd);
    io_read(io, T_V, nd);
    io_write(io, T_dP, (uint64_t)N * N);

    /* dS = P * (dP - D) with D_i = dO_i . O_i   (from P = softmax(S); the
     * softmax Jacobian's row sum sum_k P_ik dP_ik equals dO_i . O_i) */
    for (int i = 0; i < N; i++) {
        T D = 0;
        for (int c = 0; c < d; c++) D += dO[(size_t)i * d + c] * O[(size_t)i * d + c];
        for (int j = 0; j < N; j++)
            dS[(size_t)i * N + j] = P[(size_t)i * N + j] * (dP[(size_t)i * N + j] - D);
    }
    io_read(io, T_dO, nd);
    io_read(io, T_O, nd);
    io_read(io, T_P, (uint64_t)N * N);
    io_read(io, T_dP, (uint64_t)N * N);
    io_write(io, T_dS, (uint64_t)N * N);

    /* dQ = scale * dS K   (from S = scale * Q K^T) */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            T g = dS[(size_t)i * N + j] * softmax_scale;
            for (int c = 0; c < d; c++) dQ[(size_t)i * d + c] += g * K[(size_t)j * d + c];
        }
    io_read(io, T_dS, (uint64_t)N * N);
    io_read(io, T_K, nd);
    io_write(io, T_dQ, nd);

    /* dK = scale * dS^T Q   (from S = scale * Q K^T) */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            T g = dS[(size_t)i * N + j] * softmax_scale;
            for (int c = 0; c < d; c++) dK[(size_t)j * d + c] += g * Q[(size_t)i * d + c];
        }
    io_read(io, T_dS, (uint64_t)N * N);
    io_read(io, T_Q, nd);
    io_write(io, T_dK, nd);
}
//< naive-backward
