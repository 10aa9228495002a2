#!/bin/sh
# data/gpu/studies/bwd_v3_steps/bwd_hopper_sanitizers_bench.sh -- backward version 3's (Hopper) last
# checks and measurement in one device call, after bwd_hopper.sh's: a smoke
# run, the PyTorch op's suite (tests/gpu/test_flash_op.py: the op now picks
# version 3 on Hopper, every backward version held to twice PyTorch's own
# error), the four compute-sanitizer tools twice each on fresh seeds (the
# command tests/gpu/run_gpu_tests.sh repeats), and the bench at the issue's
# shapes (bf16 and fp16, d 64 and 128, N 2048 to 16384, causal and not;
# backward and forward + backward; version 3 beside version 4, its
# deterministic mode, SDPA flash and cuDNN). $OUT gets bench_bwd.csv and
# one archive of the logs, bwd_hopper_final.tgz. Run from the repository root:
#     FA_COMMIT=<commit> OUT=<dir> sh data/gpu/studies/bwd_v3_steps/bwd_hopper_sanitizers_bench.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
top=${OUT:-/tmp}
out=$top/bwd_hopper_final
mkdir -p "$out"
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit ${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > "$out/env.txt" 2>&1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for d in 64 128; do
    timeout 15 ./stage5 --kernel 3 --dtype bf16 --random --batch 2 --heads 4 --kv-heads 2 --n 333 --d $d --causal \
        --repeats 3 >> "$out/smoke.log" 2>&1
    echo "# d $d: exit $?" >> "$out/smoke.log"
done
stamp "smoke"; grep '^#\|v3 ' "$out/smoke.log"

# the op's suite and the sanitizers at once (both check, neither times)
( timeout 110 python3 tests/gpu/test_flash_op.py > "$out/flash_op.log" 2>&1; echo "exit $?" >> "$out/flash_op.log" ) &
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
BWD3='build/tests/gpu/stage5_tests --sweep small --kernel 3 --seed $S && ./stage5 --kernel 3 --random --seed $S --heads 2 --kv-heads 1 --n 200 --seqlen-k 330 --d 64 --window 10,0 --repeats 1'
for tool in memcheck racecheck synccheck initcheck; do
    for r in 1 2; do
        S=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
        ( S=$S timeout 100 "$SAN" --tool $tool --error-exitcode 9 sh -c "$BWD3" > "$out/san_${tool}_$r.log" 2>&1
          echo "exit $? seed $S" >> "$out/san_${tool}_$r.log" ) &
    done
done
wait
stamp "op suite: $(tail -n 1 "$out/flash_op.log"), $(grep -c '^PASS' "$out/flash_op.log") PASS, $(grep -c '^FAIL' "$out/flash_op.log") FAIL, $(grep -c '^SKIP' "$out/flash_op.log") SKIP"
grep '^FAIL' "$out/flash_op.log" | cut -c1-300 | head -n 10
for f in "$out"/san_*.log; do
    echo "$(basename "$f" .log): $(tail -n 1 "$f"); $(grep -m1 'SUMMARY' "$f" | sed 's/^=* *//'); $(grep -c '^PASS' "$f") PASS, $(grep -c '^FAIL' "$f") FAIL"
    grep -m2 -i 'hazard\|invalid\|uninit\|^FAIL' "$f" | cut -c1-300
done

timeout 170 python3 scripts/gpu/bench_gpu.py --bwd-csv "$top/bench_bwd.csv" --dtypes bf16,fp16 --ns 2048,4096,8192,16384 \
    --passes bwd,fwdbwd --dims 64,128 --causal 0,1 --repeats 10 \
    --impls ours_v3_hopper,ours_v3_hopper_det,ours_v4_mma8,sdpa_flash,sdpa_cudnn > "$out/bench.log" 2>&1
stamp "bench: exit $?"
grep -v '^#' "$out/bench.log" | grep ' bwd \| fwdbwd \|rror' | head -n 120
tar czf "$top/bwd_hopper_final.tgz" -C "$top" bwd_hopper_final && rm -rf "$out"
