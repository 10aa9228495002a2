/*
 * io_model.h -- what the IO accounting counts: element reads and writes of
 * the tensors in slow memory (io_counter), the bounded scratch that stands
 * for on-chip SRAM (sram_arena), the counted copies between them
 * (hbm_load, hbm_store) and the one-line check of a stage's demonstration.
 */
#ifndef FA_IO_MODEL_H
#define FA_IO_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------
 * IO counters. The IO model counts element reads and writes of the tensors
 * that live in slow memory (HBM on a GPU) and nothing else. Algorithms call
 * io_read/io_write where they move data between slow memory and the
 * registers/SRAM; hbm_load/hbm_store below do the copy and the count at once.
 * ------------------------------------------------------------------------- */
typedef enum {
    T_Q, T_K, T_V, T_O, T_L, T_S, T_P,
    T_dO, T_dQ, T_dK, T_dV, T_dP, T_dS, T_D,
    T_COUNT
} tensor_id;

extern const char *const tensor_name[T_COUNT];

typedef struct {
    uint64_t reads[T_COUNT];   /* elements read from slow memory */
    uint64_t writes[T_COUNT];  /* elements written to slow memory */
} io_counter;

void io_reset(io_counter *io);
static inline void io_read(io_counter *io, tensor_id t, uint64_t n)  { if (io) io->reads[t] += n; }
static inline void io_write(io_counter *io, tensor_id t, uint64_t n) { if (io) io->writes[t] += n; }
uint64_t io_total(const io_counter *io);            /* reads + writes, elements */
/* One check of a stage's demonstration: "  what  err  <= tol  ok|FAIL",
 * what padded to width; 0 when err <= tol (a NaN err fails), else 1, so
 * that a program sums the failures. */
int report_check(const char *what, int width, double err, double tol);
/* "Q r 4096  K r 8192 ..." on one line, for learners and test failures. */
void io_print(const io_counter *io, const char *indent);

/* ---------------------------------------------------------------------------
 * The bounded scratch buffer that stands for on-chip SRAM. A tiled algorithm
 * takes all its working tiles from one arena of M elements; the high-water
 * mark is what the tests hold against M.
 * ------------------------------------------------------------------------- */
typedef struct {
    double *base;
    size_t M;           /* capacity, elements */
    size_t used;        /* elements handed out since the last sram_reset */
    size_t high_water;  /* max of used over the arena's life */
} sram_arena;

void sram_init(sram_arena *s, size_t M);
void sram_free(sram_arena *s);
/* n elements from the arena; exceeding M is a bug in the caller's block-size
 * arithmetic, so it is fatal (status 1) rather than silently growing. */
double *sram_alloc(sram_arena *s, size_t n, const char *what);
void sram_reset(sram_arena *s);

/* Copy a rows x cols tile between slow memory (leading dimension ld) and a
 * dense SRAM tile (leading dimension cols), counting rows*cols elements of
 * tensor t as read (load) or written (store). */
void hbm_load(double *tile, const double *src, int rows, int cols, int ld,
              io_counter *io, tensor_id t);
void hbm_store(double *dst, const double *tile, int rows, int cols, int ld,
               io_counter *io, tensor_id t);
/* The same for float tensors (stage 1's fp32 arithmetic). */
void hbm_load_f32(float *tile, const float *src, int rows, int cols, int ld,
                  io_counter *io, tensor_id t);
void hbm_store_f32(float *dst, const float *tile, int rows, int cols, int ld,
                   io_counter *io, tensor_id t);

#endif /* FA_IO_MODEL_H */
