/*
 * npy.c -- see npy.h. The header is a Python dict literal such as
 *   {'descr': '<f8', 'fortran_order': False, 'shape': (1, 12, 150, 32), }
 * padded with spaces to a multiple of 64 bytes and ended by '\n'. We parse the
 * three keys we need and refuse anything we do not understand.
 */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
/* A header longer than this is not one numpy writes for an array of doubles. */
#define NPY_MAX_HEADER (1u << 20)

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Find the value that follows the key 'key' (or "key") and a colon. */
static const char *dict_value(const char *hdr, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = hdr; (p = strstr(p, key)) != NULL; p += klen) {
        if (p == hdr || (p[-1] != '\'' && p[-1] != '"') || (p[klen] != p[-1]))
            continue;
        const char *q = p + klen + 1;
        while (*q == ' ') q++;
        if (*q != ':') continue;
        q++;
        while (*q == ' ') q++;
        return q;
    }
    return NULL;
}

static int parse_header(const char *hdr, npy_array *a, bool *fortran, char *err, size_t errlen)
{
    if (hdr[0] != '{')
        return fail(err, errlen, "header is not a dict literal");

    const char *descr = dict_value(hdr, "descr");
    if (!descr || (*descr != '\'' && *descr != '"'))
        return fail(err, errlen, "header has no 'descr' string");
    char quote = *descr++;
    const char *end = strchr(descr, quote);
    if (!end || end - descr > 16)
        return fail(err, errlen, "header 'descr' is malformed");
    char dtype[17];
    memcpy(dtype, descr, (size_t)(end - descr));
    dtype[end - descr] = '\0';
    if (strcmp(dtype, "<f8") == 0)
        a->elem_bytes = 8;
    else if (strcmp(dtype, "<f4") == 0)
        a->elem_bytes = 4;
    else
        return fail(err, errlen,
                    "dtype '%s' is not supported (expected float64 '<f8' or float32 '<f4')",
                    dtype);

    const char *fo = dict_value(hdr, "fortran_order");
    if (!fo)
        return fail(err, errlen, "header has no 'fortran_order'");
    if (strncmp(fo, "True", 4) == 0)
        *fortran = true;
    else if (strncmp(fo, "False", 5) == 0)
        *fortran = false;
    else
        return fail(err, errlen, "header 'fortran_order' is neither True nor False");

    const char *sh = dict_value(hdr, "shape");
    if (!sh || *sh != '(')
        return fail(err, errlen, "header has no 'shape' tuple");
    sh++;
    a->ndim = 0;
    a->numel = 1;
    for (;;) {
        while (*sh == ' ') sh++;
        if (*sh == ')') break;
        if (!isdigit((unsigned char)*sh))
            return fail(err, errlen, "header 'shape' is malformed");
        if (a->ndim == NPY_MAX_DIMS)
            return fail(err, errlen, "array has more than %d dimensions", NPY_MAX_DIMS);
        errno = 0;
        char *after;
        long long dim = strtoll(sh, &after, 10);
        if (errno || dim < 0 || dim > (1LL << 40))
            return fail(err, errlen, "header 'shape' has an out-of-range dimension");
        a->shape[a->ndim++] = dim;
        if (dim && a->numel > ((size_t)1 << 40) / (size_t)dim)
            return fail(err, errlen, "array is too large");
        a->numel *= (size_t)dim;
        sh = after;
        while (*sh == ' ') sh++;
        if (*sh == ',') sh++;
        else if (*sh != ')')
            return fail(err, errlen, "header 'shape' is malformed");
    }
    return 0;
}

/* Bring column-major (Fortran-order) data to row-major in place: element
 * (i_0, ..., i_{k-1}) sits at i_0 + s_0 (i_1 + s_1 (i_2 + ...)) in the file.
 * Returns -1 when the scratch copy cannot be allocated. */
static int fortran_to_c(npy_array *a)
{
    if (a->ndim < 2 || a->numel < 2) return 0;
    double *c = malloc(a->numel * sizeof(double));
    if (!c) return -1;
    size_t stride[NPY_MAX_DIMS], idx[NPY_MAX_DIMS] = {0}, f = 0;
    stride[0] = 1;
    for (int k = 1; k < a->ndim; k++) stride[k] = stride[k - 1] * (size_t)a->shape[k - 1];
    for (size_t n = 0; n < a->numel; n++) {   /* walk in C order, the last index fastest */
        c[n] = a->data[f];
        for (int k = a->ndim - 1; k >= 0; k--) {
            if (++idx[k] < (size_t)a->shape[k]) {
                f += stride[k];
                break;
            }
            f -= stride[k] * (idx[k] - 1);
            idx[k] = 0;
        }
    }
    free(a->data);
    a->data = c;
    return 0;
}

int npy_read(const char *path, npy_array *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fail(err, errlen, "is a directory, not a .npy file");
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errlen, "cannot open: %s", strerror(errno));

    unsigned char pre[10];
    int rc = -1;
    char *hdr = NULL;
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, NPY_MAGIC, 6) != 0) {
        fail(err, errlen, "not a .npy file (bad magic string)");
        goto out;
    }
    int major = pre[6];
    size_t hlen;
    if (major == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) {
            fail(err, errlen, "truncated header");
            goto out;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (major == 2 || major == 3) {
        unsigned char b[4];
        if (fread(b, 1, 4, f) != 4) {
            fail(err, errlen, "truncated header");
            goto out;
        }
        hlen = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    } else {
        fail(err, errlen, "unsupported .npy format version %d", major);
        goto out;
    }
    if (hlen == 0 || hlen > NPY_MAX_HEADER) {
        fail(err, errlen, "header length %zu is not plausible", hlen);
        goto out;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        fail(err, errlen, "out of memory reading header");
        goto out;
    }
    if (fread(hdr, 1, hlen, f) != hlen) {
        fail(err, errlen, "truncated header");
        goto out;
    }
    hdr[hlen] = '\0';
    if (strlen(hdr) != hlen || hdr[hlen - 1] != '\n') {
        fail(err, errlen, "corrupt header (not text ending in a newline)");
        goto out;
    }
    bool fortran = false;
    if (parse_header(hdr, a, &fortran, err, errlen) != 0)
        goto out;

    /* A header may claim more than the file holds: checked before the
     * allocation, so that a short file is named as such, not as memory. */
    struct stat fst;
    long at = ftell(f);
    if (at >= 0 && fstat(fileno(f), &fst) == 0 && S_ISREG(fst.st_mode) &&
        (unsigned long long)(fst.st_size - at) / (unsigned)a->elem_bytes < a->numel) {
        fail(err, errlen, "data is shorter than the shape in its header says (%zu elements of %d bytes, "
             "%lld bytes left)", a->numel, a->elem_bytes, (long long)(fst.st_size - at));
        goto out;
    }
    a->data = malloc((a->numel ? a->numel : 1) * sizeof(double));
    if (!a->data) {
        fail(err, errlen, "out of memory for %zu elements", a->numel);
        goto out;
    }
    if (a->elem_bytes == 8) {
        if (fread(a->data, 8, a->numel, f) != a->numel) {
            fail(err, errlen, "data is shorter than the shape in its header says");
            goto out;
        }
    } else {
        /* float32 widens to double exactly; read in chunks to bound memory. */
        float buf[1024];
        for (size_t done = 0; done < a->numel;) {
            size_t want = a->numel - done < 1024 ? a->numel - done : 1024;
            if (fread(buf, 4, want, f) != want) {
                fail(err, errlen, "data is shorter than the shape in its header says");
                goto out;
            }
            for (size_t i = 0; i < want; i++) a->data[done + i] = buf[i];
            done += want;
        }
    }
    if (fgetc(f) != EOF) {
        fail(err, errlen, "file has data beyond what the shape in its header says");
        goto out;
    }
    if (fortran && fortran_to_c(a) != 0) {
        fail(err, errlen, "out of memory reordering a Fortran-order array");
        goto out;
    }
    rc = 0;
out:
    free(hdr);
    fclose(f);
    if (rc != 0) npy_free(a);
    return rc;
}

void npy_free(npy_array *a)
{
    free(a->data);
    a->data = NULL;
}

int npy_write(const char *path, const double *data, int ndim, const int64_t *shape,
              bool as_f32, char *err, size_t errlen)
{
    if (ndim < 0 || ndim > NPY_MAX_DIMS)
        return fail(err, errlen, "cannot write an array of rank %d", ndim);
    char dict[256];
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                       as_f32 ? "<f4" : "<f8");
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld%s", (long long)shape[i],
                        ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        numel *= (size_t)shape[i];
    }
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    /* Pad with spaces so that magic + version + length + header is a multiple
     * of 64 bytes, as numpy does, and end with a newline. */
    size_t total = 10 + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)len + pad + 1;

    FILE *f = fopen(path, "wb");
    if (!f)
        return fail(err, errlen, "cannot create: %s", strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)len, f) == (size_t)len;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    if (as_f32) {
        for (size_t i = 0; ok && i < numel; i++) {
            float x = (float)data[i];
            ok = fwrite(&x, 4, 1, f) == 1;
        }
    } else if (ok) {
        ok = fwrite(data, 8, numel, f) == numel;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok)
        return fail(err, errlen, "write failed: %s", strerror(errno));
    return 0;
}
