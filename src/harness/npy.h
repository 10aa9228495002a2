/*
 * npy.h -- reading and writing NumPy .npy files (format versions 1.0, 2.0, 3.0).
 *
 * Supported: little-endian float64 ('<f8') and float32 ('<f4'), C or Fortran
 * order (what np.save writes for a transposed array), rank 0 to NPY_MAX_DIMS.
 * Everything is held as double in C (row-major) order in memory: float32
 * widens exactly, Fortran-order data is reordered on reading. Anything else
 * (another dtype, a truncated or corrupt header, data shorter or longer than
 * the shape says) is refused with a one-line reason, never guessed at.
 *
 * Format reference: numpy/lib/format.py ("The .npy format", NEP 1).
 */
#ifndef FA_NPY_H
#define FA_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 8

typedef struct {
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    size_t numel;
    int elem_bytes;    /* 8 for '<f8', 4 for '<f4' as stored in the file */
    double *data;      /* numel entries, owned; free with npy_free */
} npy_array;

/* Read path into a. Returns 0, or -1 with a one-line reason in err (which
 * names neither the program nor the file: the caller adds those). */
int npy_read(const char *path, npy_array *a, char *err, size_t errlen);
void npy_free(npy_array *a);

/* Write data (numel = product of shape) as '<f8', or as '<f4' when as_f32.
 * Returns 0, or -1 with a reason in err. */
int npy_write(const char *path, const double *data, int ndim, const int64_t *shape,
              bool as_f32, char *err, size_t errlen);

#endif /* FA_NPY_H */
