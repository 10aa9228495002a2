#!/bin/sh
# scripts/device/final1.sh -- the closing measurements and checks on ONE H200
# (the nvidia-h200 kind) in one device call of under ten minutes, for when the
# two-GPU machine of final.sh is not lent. Run from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/final1.sh
#
# It builds nothing: the binaries (./stage1..8, ./stage8_gpu, build/) must be
# built from the same commit in the same absolute path (they bake DATA_DIR),
# e.g. built here in a clone at /tmp/devbuild, carried as a tarball, and
# unpacked there beside a link /tmp/devbuild -> the carried tree.
#
#   1. timings, one after another, nothing else on the GPU:
#      the backward at the Hopper backward's shapes (bwd, fwd + bwd; bf16 and
#      fp16; version 3, its deterministic mode, version 4, SDPA flash, cuDNN)
#      -> bwd_hopper_bench.csv; packed sequences -> varlen.csv; the centering
#      pre-pass's cost and the dQ accuracy table -> dq_accuracy.csv; the
#      step 3 of backward version 3 beside step 2 (scripts/device/bwd_step3.sh);
#      the training comparison (make train-compare-gpu's, a 100 s budget)
#   2. the suites of make gpu-test, in four lanes at once (they time
#      nothing): tests/gpu/run_gpu_tests.sh (FA_SAN_RUNS runs of each
#      compute-sanitizer tool); the op's suites; stage 8's and varlen's;
#      varlen again with backward 3's step 1 and its poison test under
#      memcheck, racecheck and synccheck.
#      build/tests/gpu/stage5_tests --sweep accuracy. Each lane ends with tests/run.sh's counts line; the summary adds them.
# Every file lands under $OUT/final/, packed as $OUT/final.tgz.
set -u
OUT=${OUT:-/tmp}
D=$OUT/final
mkdir -p "$D"
export PYTHONUNBUFFERED=1 FA_COMMIT=${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
run() { tag=$1; lim=$2; shift 2; timeout "$lim" "$@" > "$D/$tag.log" 2>&1; say "$tag exit $?"; }
sh scripts/device/env.sh "sh scripts/device/final1.sh" > "$D/env.txt"
cat "$D/env.txt" >> "$D/summary.txt"

# 1. timings (each under a limit, so that the suites keep their share of the call)
run bench_bwd 140 python3 scripts/bench_gpu.py --bwd-csv "$D/bwd_hopper_bench.csv" --dtypes bf16 \
    --ns 2048,4096,8192,16384 --passes bwd,fwdbwd --dims 64,128 --causal 0,1 --repeats 8 \
    --impls ours_v3_hopper,ours_v3_hopper_det,ours_v4_mma8,sdpa_flash,sdpa_cudnn
run bench_bwd_fp16 50 python3 scripts/bench_gpu.py --bwd-csv "$D/.fp16.csv" --dtypes fp16 \
    --ns 2048,8192 --passes bwd,fwdbwd --dims 64,128 --causal 0,1 --repeats 8 \
    --impls ours_v3_hopper,ours_v4_mma8,sdpa_flash,sdpa_cudnn
[ -s "$D/.fp16.csv" ] && tail -n +2 "$D/.fp16.csv" | grep -v '^#' >> "$D/bwd_hopper_bench.csv"; rm -f "$D/.fp16.csv"
run varlen_bench 40 python3 scripts/bench_varlen.py --csv "$D/varlen.csv"
run dq_accuracy 80 python3 scripts/dq_accuracy.py --csv "$D/dq_accuracy.csv" --repeats 10
( OUT=$D/step3 timeout 105 sh scripts/device/bwd_step3.sh > /dev/null 2>&1; say "bwd_step3 exit $?"; cat "$D/step3/bwd_step3.log" >> "$D/summary.txt" 2>/dev/null )

NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for sh in "64 2048 1" "128 8192 0"; do
    set -- $sh
    timeout 60 "$NCU" --profile-from-start off --clock-control none --csv --page raw \
        --metrics gpu__time_duration.sum,dram__bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
        python3 scripts/investigations/hopper_ncu.py --impl ours --pass bwd --d $1 --n $2 --causal $3 > "$D/ncu_bwd_d$1_n$2_c$3.csv" 2>&1
    say "ncu bwd d $1 N $2 causal $3: exit $?"
done
run train_compare 150 python3 scripts/train_compare.py --compare --steps 200 --seeds 3 --budget 100 \
    --csv "$D/train_compare.csv"

# 2. the suites of make gpu-test, four lanes, in what is left of 570 s
left=$(( 570 - ($(date +%s) - t0) ))
D=$D LEFT=$left sh scripts/device/suites.sh
cd "$OUT" && tar czf final.tgz final && rm -rf final
echo "== summary"
tar xzf final.tgz final/summary.txt -O
