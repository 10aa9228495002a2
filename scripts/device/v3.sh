#!/bin/sh
# scripts/device/v3.sh -- version 3's steps on a Hopper GPU machine in one
# device call: make study-fwd-v3-steps (scripts/gpu/v3_steps.sh: build, pieces, tests,
# timings beside SDPA, sanitizers, Nsight Compute), its files in $OUT.
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/v3.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-build/v3_out}
mkdir -p "$OUT"
exec make GPU_DATA="$OUT" V3_OUT="$OUT/run" study-fwd-v3-steps
