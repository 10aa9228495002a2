#!/bin/sh
# data/gpu/studies/bwd_v3_steps/bwd_hopper.sh [quick|full] -- backward version 3 (Hopper,
# kernels/stage5_bwd_v3_hopper.cu) in one device call, logs and CSVs under
# $OUT/bwd_hopper:
#   smoke.log    one small run per step, d and dtype under a short limit (a
#                hung pipeline shows here, not as a sweep that never ends);
#                small_step1.log: step 1 (FA_BWD3_STEP=1) on --sweep small
#   tests.log    build/tests/gpu/stage5_tests --sweep tests (every backward version, so version 3
#                is held to twice version 0's error, the fp64 reference, the
#                masks, GQA, the far logits, the deterministic mode)
#   san_*.log    compute-sanitizer on build/tests/gpu/stage5_tests --sweep small --kernel 3
#                (quick: memcheck, racecheck; full: the four tools, 3 seeds)
#   bench_bwd.csv  scripts/gpu/bench_gpu.py, backward pass: ours v3 and v4,
#                SDPA flash and cuDNN (quick: bf16, N 2048 and 8192; full: bf16
#                and fp16, N 2048 to 16384, forward+backward too);
#                bench_bwd_step1.csv: step 1 at N 8192
# Binaries are used as found (stage5, build/libfa_gpu.so: built before the
# call). Run from the repository root:
#     FA_COMMIT=<commit> OUT=<dir> sh data/gpu/studies/bwd_v3_steps/bwd_hopper.sh quick
set -u
cd "$(dirname "$0")/../.." || exit 2
mode=${1:-quick}
out=${OUT:-/tmp}/bwd_hopper
mkdir -p "$out"
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit ${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi;
  nvcc --version 2>/dev/null | tail -n 2; python3 -c 'import torch; print("torch", torch.__version__)'; } > "$out/env.txt" 2>&1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

# smoke: every step and d once (bf16), then fp16, 15 s each at most (a hang
# shows here as exit 124)
: > "$out/smoke.log"
ok=1
for run in 1:64:bf16 1:128:bf16 2:64:bf16 2:128:bf16 2:64:fp16 2:128:fp16; do
    step=${run%%:*}; rest=${run#*:}; d=${rest%%:*}; dt=${rest#*:}
    FA_BWD3_STEP=$step timeout 15 ./stage5 --kernel 3 --dtype $dt --random --batch 2 --heads 4 --kv-heads 2 \
        --n 333 --d $d --causal --repeats 3 >> "$out/smoke.log" 2>&1
    rc=$?
    echo "# step $step d $d $dt: exit $rc" >> "$out/smoke.log"
    [ $rc -eq 0 ] || ok=0
done
stamp "smoke: ok=$ok"; grep '^#\|v3 \|error' "$out/smoke.log" | head -n 30
if [ $ok -eq 0 ] && [ "$mode" = quick ]; then   # a broken kernel: no sweep, no bench
    tail -n 30 "$out/smoke.log"
    exit 1
fi
FA_BWD3_STEP=1 timeout 60 build/tests/gpu/stage5_tests --sweep small --kernel 3 > "$out/small_step1.log" 2>&1
stamp "step 1 small sweep: exit $?, $(grep -c '^PASS' "$out/small_step1.log") PASS, $(grep -c '^FAIL' "$out/small_step1.log") FAIL"
grep '^FAIL' "$out/small_step1.log" | cut -c1-300 | head -n 8

timeout 150 build/tests/gpu/stage5_tests --sweep tests > "$out/tests.log" 2>&1
stamp "stage5 --sweep tests: exit $?, $(grep -c '^PASS' "$out/tests.log") PASS, $(grep -c '^FAIL' "$out/tests.log") FAIL"
grep '^FAIL' "$out/tests.log" | cut -c1-400 | head -n 20
grep -A6 '^FAIL' "$out/tests.log" | grep '^#' | head -n 20

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "$mode" = quick ]; then tools="memcheck racecheck"; seeds=1; else tools="memcheck racecheck synccheck initcheck"; seeds="1 2 3"; fi
for tool in $tools; do
    for s in $seeds; do
        seed=$(( $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') + s ))
        ( timeout 90 "$SAN" --tool $tool --error-exitcode 9 build/tests/gpu/stage5_tests --sweep small --kernel 3 --seed $seed \
            > "$out/san_${tool}_$s.log" 2>&1; echo "exit $? seed $seed" >> "$out/san_${tool}_$s.log" ) &
    done
done
wait
for f in "$out"/san_*.log; do
    echo "$(basename "$f" .log): $(tail -n 1 "$f"); $(grep -m1 'SUMMARY' "$f" | sed 's/^=* *//'); $(grep -c '^PASS' "$f") PASS, $(grep -c '^FAIL' "$f") FAIL"
    grep -m3 -i 'hazard\|error:\|invalid\|uninit' "$f" | cut -c1-300
done
stamp "sanitizers done"

if [ "$mode" = quick ]; then
    set -- --dtypes bf16 --ns 2048,8192 --passes bwd
else
    set -- --dtypes bf16,fp16 --ns 2048,4096,8192,16384 --passes bwd,fwdbwd
fi
timeout 150 python3 scripts/gpu/bench_gpu.py --bwd-csv "$out/bench_bwd.csv" "$@" --dims 64,128 --causal 0,1 \
    --repeats 10 --impls ours_v3_hopper,ours_v4_mma8,sdpa_flash,sdpa_cudnn > "$out/bench.log" 2>&1
stamp "bench: exit $?"
FA_BWD3_STEP=1 timeout 60 python3 scripts/gpu/bench_gpu.py --bwd-csv "$out/bench_bwd_step1.csv" --dtypes bf16 --ns 8192 \
    --passes bwd --dims 64,128 --causal 0,1 --repeats 10 --impls ours_v3_hopper > "$out/bench_step1.log" 2>&1
stamp "bench step 1: exit $?"
grep -v '^#' "$out/bench_step1.log" | grep 'bwd\|Error\|error' | head -n 8
grep -v '^#' "$out/bench.log" | grep 'bwd\|Error\|error' | head -n 70
