/* io_model.c -- IO counters, the SRAM arena, counted tile copies (io_model.h). */
#define _POSIX_C_SOURCE 200809L
#include "io_model.h"
#include "util.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* IO counters and the SRAM arena                                             */
/* ------------------------------------------------------------------------- */

const char *const tensor_name[T_COUNT] = {
    "Q", "K", "V", "O", "L", "S", "P", "dO", "dQ", "dK", "dV", "dP", "dS", "D",
};

int report_check(const char *what, int width, double err, double tol)
{
    bool ok = err <= tol;
    printf("  %-*s %10.3e   <= %.3g   %s\n", width, what, err, tol, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

void io_reset(io_counter *io) { memset(io, 0, sizeof *io); }

uint64_t io_total(const io_counter *io)
{
    uint64_t t = 0;
    for (int i = 0; i < T_COUNT; i++) t += io->reads[i] + io->writes[i];
    return t;
}

void io_print(const io_counter *io, const char *indent)
{
    printf("%s", indent);
    for (int i = 0; i < T_COUNT; i++) {
        if (io->reads[i]) printf("%s r %llu  ", tensor_name[i], (unsigned long long)io->reads[i]);
        if (io->writes[i]) printf("%s w %llu  ", tensor_name[i], (unsigned long long)io->writes[i]);
    }
    printf("\n");
}

void sram_init(sram_arena *s, size_t M)
{
    s->base = xmalloc(M, sizeof(double), "SRAM scratch");
    s->M = M;
    s->used = 0;
    s->high_water = 0;
}

void sram_free(sram_arena *s)
{
    free(s->base);
    s->base = NULL;
}

double *sram_alloc(sram_arena *s, size_t n, const char *what)
{
    if (n > s->M - s->used)
        fatal(EXIT_CHECK_FAILED, "SRAM overflow: %s needs %zu elements, %zu of %zu in use",
              what, n, s->used, s->M);
    double *p = s->base + s->used;
    s->used += n;
    if (s->used > s->high_water) s->high_water = s->used;
    poison(p, n);  /* a tile read before it is written shows up as NaN */
    return p;
}

void sram_reset(sram_arena *s) { s->used = 0; }

/* rows x cols elements of es bytes from src (leading dimension sld) to dst
 * (dld), counted as read (load) or written (store) elements of tensor t. */
static void hbm_move(void *dst, int dld, const void *src, int sld, int rows, int cols, size_t es,
                     io_counter *io, tensor_id t, bool load)
{
    for (int r = 0; r < rows; r++)
        memcpy((char *)dst + (size_t)r * dld * es, (const char *)src + (size_t)r * sld * es, (size_t)cols * es);
    (load ? io_read : io_write)(io, t, (uint64_t)rows * (uint64_t)cols);
}

void hbm_load(double *tile, const double *src, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(tile, cols, src, ld, rows, cols, sizeof *tile, io, t, true); }
void hbm_store(double *dst, const double *tile, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(dst, ld, tile, cols, rows, cols, sizeof *tile, io, t, false); }
void hbm_load_f32(float *tile, const float *src, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(tile, cols, src, ld, rows, cols, sizeof *tile, io, t, true); }
void hbm_store_f32(float *dst, const float *tile, int rows, int cols, int ld, io_counter *io, tensor_id t) { hbm_move(dst, ld, tile, cols, rows, cols, sizeof *tile, io, t, false); }
