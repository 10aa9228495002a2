"""tests/make_bad_npy.py DIR -- write good and malformed .npy files for tests/cli.sh.

Standard library only (struct), so the bad-input tests need no NumPy. Each
file is named for what is wrong with it.
"""
import struct
import sys
from pathlib import Path


def npy(descr, shape, payload=None, fortran=False, version=1, header=None):
    """Bytes of a .npy file; payload defaults to zeros of the right size."""
    if header is None:
        shp = "(" + "".join(f"{s}, " for s in shape).rstrip(", ") + ("," if len(shape) == 1 else "") + ")"
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shp)
    pre_len = 10 if version == 1 else 12
    header += " " * ((64 - (pre_len + len(header) + 1) % 64) % 64) + "\n"
    hb = header.encode("latin1")
    pre = b"\x93NUMPY" + bytes([version, 0])
    pre += struct.pack("<H", len(hb)) if version == 1 else struct.pack("<I", len(hb))
    if payload is None:
        n = 1
        for s in shape:
            n *= s
        size = {"<f8": 8, "<f4": 4, "<i8": 8, ">f8": 8}.get(descr, 8)
        payload = bytes(n * size)
    return pre + hb + payload


def f64(shape, value=0.5):
    n = 1
    for s in shape:
        n *= s
    return struct.pack("<%dd" % n, *([value] * n))


def ramp(shape, fortran=False):
    """Distinct values 0.01 k in C order; written column-major when fortran,
    so that both files hold the same array."""
    n = 1
    for s in shape:
        n *= s
    vals = [0.01 * k for k in range(n)]
    if fortran:   # element (i, j) of a 2-D array at i + rows * j
        rows, cols = shape
        vals = [vals[i * cols + j] for j in range(cols) for i in range(rows)]
    return struct.pack("<%dd" % n, *vals)


def main(out):
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "good_16x8.npy": npy("<f8", (16, 8), f64((16, 8))),
        "good_1x2x16x8_v2.npy": npy("<f8", (1, 2, 16, 8), f64((1, 2, 16, 8)), version=2),
        "good_20x8.npy": npy("<f8", (20, 8), f64((20, 8))),
        "good_16x4.npy": npy("<f8", (16, 4), f64((16, 4))),
        "int64.npy": npy("<i8", (16, 8)),
        "bigendian.npy": npy(">f8", (16, 8)),
        "rank1.npy": npy("<f8", (16,), f64((16,))),
        "rank5.npy": npy("<f8", (1, 1, 1, 16, 8), f64((1, 1, 1, 16, 8))),
        "empty_dim.npy": npy("<f8", (0, 8), b""),
        "fortran.npy": npy("<f8", (16, 8), f64((16, 8)), fortran=True),
        "ramp_16x8.npy": npy("<f8", (16, 8), ramp((16, 8))),
        "ramp_16x8_fortran.npy": npy("<f8", (16, 8), ramp((16, 8), True), fortran=True),
        "good_16x4.npy": npy("<f8", (16, 4), f64((16, 4))),
        "heads3_1x3x16x8.npy": npy("<f8", (1, 3, 16, 8), f64((1, 3, 16, 8))),
        "heads2_1x2x16x8.npy": npy("<f8", (1, 2, 16, 8), f64((1, 2, 16, 8))),
        "nan.npy": npy("<f8", (16, 8), f64((16, 8), float("nan"))),
        "huge_values.npy": npy("<f8", (16, 8), f64((16, 8), 1e200)),
        # Two keys 1e-12 apart under softmax_scale 1e12: the scores differ by
        # 1, but a step of 1e-5 in a key moves them by 1e7, so the central
        # differences of the gradient check cannot follow the softmax and the
        # check fails (exit 1), as it must: the failed-check run of cli.sh.
        "near_tie_q.npy": npy("<f8", (2, 1), struct.pack("<2d", 1.0, 1.0)),
        "near_tie_k.npy": npy("<f8", (2, 1), struct.pack("<2d", 0.0, 1e-12)),
        "near_tie_v.npy": npy("<f8", (2, 1), struct.pack("<2d", 0.0, 1.0)),
        "long_20000x1.npy": npy("<f8", (20000, 1), f64((20000, 1))),
        "short_data.npy": npy("<f8", (16, 8), f64((16, 8))[:-8]),
        # a header claiming 2^37 elements over 64 bytes: short, not out of memory
        "huge_claim.npy": npy("<f8", (1 << 17, 1 << 20), b"\0" * 64),
        "long_data.npy": npy("<f8", (16, 8), f64((16, 8)) + b"\0" * 8),
        "not_a_dict.npy": npy("<f8", (16, 8), f64((16, 8)), header="['descr', '<f8']"),
        "no_shape.npy": npy("<f8", (16, 8), f64((16, 8)),
                            header="{'descr': '<f8', 'fortran_order': False, }"),
    }
    good = files["good_16x8.npy"]
    files["truncated_header.npy"] = good[:30]
    files["bad_magic.npy"] = b"\x93NUMPZ" + good[6:]
    files["huge_header_len.npy"] = good[:8] + struct.pack("<H", 65000) + good[10:]
    files["version9.npy"] = good[:6] + bytes([9, 0]) + good[8:]
    for name, data in files.items():
        (d / name).write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1])
