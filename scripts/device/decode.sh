#!/bin/sh
# scripts/device/decode.sh -- stage 8's GPU side on the lent H200 (nvidia-h200,
# one GPU), in about eight minutes. Run from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/decode.sh
#
# FA_PREBUILT=1 skips step 2 when ./stage8_gpu and build/libfa_gpu.so were
# built elsewhere and carried (the kernels take minutes to compile);
# DECODE_BENCH_BUDGET=<s> passes --budget-s to the benchmark (default 180).
#
# What it does, in order (each step's exit status is printed; one failing
# step does not stop the others):
#   1. the machine: GPU, driver, nvcc, torch;
#   2. make stage8_gpu build/libfa_gpu.so (ptxas's report in build/decode_ptxas.txt,
#      copied to $OUT);
#   3. sh tests/gpu/stage8.sh: bad input, build/tests/gpu/stage8_gpu_tests --sweep tests (every
#      case, bf16 and fp16, d 64 and 128, against the CPU stage 8 in fp64),
#      compute-sanitizer memcheck, racecheck, synccheck, initcheck;
#   4. python3 tests/gpu/test_decode_op.py: the PyTorch entry against SDPA
#      (the twice-PyTorch rule);
#   5. scripts/gpu/bench_decode.py (make gpu-data-apps's first command): the bandwidth
#      measurement (data/gpu/decode.csv to be), at most about four minutes.
# Files under ${OUT:-/tmp}: decode.log (every command's whole output),
# decode.csv, decode_ptxas.txt, env.txt. Standard output: FAIL and SKIP lines
# whole, PASS lines shortened, the benchmark's table.
set -u
OUT=${OUT:-/tmp}
mkdir -p "$OUT" || exit 2
if [ -z "${FA_COMMIT:-}" ]; then
    FA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export FA_COMMIT
log="$OUT/decode.log"
: > "$log"
t_start=$(date +%s)
say() { echo "$*" | tee -a "$log"; }
run() {
    name=$1; shift
    say "== $name: $* ($(( $(date +%s) - t_start )) s)"
    tmp=$OUT/.step.out
    "$@" > "$tmp" 2>&1
    rc=$?
    cat "$tmp" >> "$log"
    grep -E '^(FAIL|SKIP) |error|Error|passed|^stage8' "$tmp" | grep -v '^PASS' | cut -c1-400
    grep -E '^PASS ' "$tmp" | cut -c1-160
    say "   [exit $rc]"
    rm -f "$tmp"
    return $rc
}
sh scripts/device/env.sh "sh scripts/device/decode.sh" > "$OUT/env.txt"
cat "$OUT/env.txt" >> "$log"
if [ "${FA_PREBUILT:-0}" = 1 ] && [ -x ./stage8_gpu ] && [ -f build/libfa_gpu.so ]; then
    say "== build: skipped (FA_PREBUILT=1: the carried ./stage8_gpu and build/libfa_gpu.so)"
else
    run build make -j16 stage8_gpu build/libfa_gpu.so
fi
cp build/decode_ptxas.txt "$OUT/decode_ptxas.txt" 2>/dev/null
run gpu-suite sh tests/run.sh "sh tests/gpu/stage8.sh"
run decode-op sh tests/run.sh "python3 tests/gpu/test_decode_op.py"
run bench timeout 240 python3 scripts/gpu/bench_decode.py --csv "$OUT/decode.csv" --budget-s "${DECODE_BENCH_BUDGET:-180}"
grep -E '^(copy|ours|sdpa)' "$log" | cut -c1-160
say "scripts/device/decode.sh: done in $(( $(date +%s) - t_start )) s"
