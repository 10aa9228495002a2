#!/bin/sh
# scripts/device_final.sh PHASE... -- the measurements the paper and
# data/gpu/ rest on, in as few device calls as the lease allows. Run from the
# repository root on the lent machine (nvidia-h200-x2 for the ring phase; the
# others use GPU 0):
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device_final.sh build bench train ring
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device_final.sh build tests ncu
#
# Phases (each under its own time limit, its log and data in $OUT/final/):
#   build   make every GPU target (stage4, stage5, stage7, libfa_gpu.so, v3_check)
#   bench   scripts/bench_gpu.py: every version of the table beside SDPA flash,
#           cuDNN and the materialized expression, forward, backward and
#           forward+backward, bf16 over the papers' grid (d 64, 128; N 512 ..
#           16384; causal and not), fp16 at N 2048 and 8192
#           -> bench_fwd.csv, bench_bwd.csv (+ _fp16 files, merged later)
#   train   scripts/train_compare.py -> train_loss.csv
#   ring    ./stage7 --gpus 2 (the checks) and --sweep scale -> ring.csv
#   tests   make gpu-test's suites: stage 4, 5 and v3 test sweeps, sanitizers,
#           the PyTorch comparisons (tests/gpu/*.py)
#   ncu     DRAM and L2 bytes of the backward at two shapes -> io_bwd.csv
# Everything lands in $OUT/final.tgz (the device tool returns at most 8
# files); a summary is printed last.
set -u
OUT=${OUT:-/tmp}
D=$OUT/final
mkdir -p "$D"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
{ nvidia-smi; nvidia-smi topo -m; nvcc --version; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; } > "$D/env.txt" 2>&1

for phase in "$@"; do
    case $phase in
    build)
        say "build"
        timeout 300 make -j"$(nproc)" stage4 stage5 stage7 build/libfa_gpu.so build/v3_check > "$D/build.log" 2>&1
        say "build exit $?"
        ;;
    bench)
        say "bench bf16"
        timeout 330 python3 scripts/bench_gpu.py --csv "$D/bench_fwd.csv" --bwd-csv "$D/bench_bwd.csv" \
            --dtypes bf16 --slow-max-n 4096 --repeats 10 > "$D/bench_bf16.log" 2>&1
        say "bench bf16 exit $?"
        timeout 90 python3 scripts/bench_gpu.py --csv "$D/bench_fwd_fp16.csv" --bwd-csv "$D/bench_bwd_fp16.csv" \
            --dtypes fp16 --ns 2048,8192 --slow-max-n 2048 --repeats 10 > "$D/bench_fp16.log" 2>&1
        say "bench fp16 exit $?"
        sed -n '/^TFLOP\/s/,$p' "$D/bench_bf16.log" | tee -a "$D/summary.txt"
        ;;
    train)
        say "train"
        timeout 150 python3 scripts/train_compare.py --csv "$D/train_loss.csv" > "$D/train.log" 2>&1
        say "train exit $?"
        tail -n 8 "$D/train.log" | tee -a "$D/summary.txt"
        ;;
    ring)
        say "ring checks"
        timeout 100 ./stage7 --gpus 2 > "$D/ring_check.log" 2>&1
        say "ring checks exit $?: $(grep -c '^PASS' "$D/ring_check.log") PASS, $(grep -c '^FAIL' "$D/ring_check.log") FAIL"
        grep '^FAIL' "$D/ring_check.log" | head -n 5 | tee -a "$D/summary.txt"
        timeout 130 ./stage7 --sweep scale --gpus 2 --csv "$D/ring.csv" --budget 90 > "$D/ring_scale.log" 2>&1
        say "ring scale exit $?"
        grep -E '^  (pass|fwd|bwd) |largest N' "$D/ring_scale.log" | tee -a "$D/summary.txt"
        ;;
    tests)
        say "tests"
        timeout 330 sh tests/run.sh "sh tests/gpu/run_gpu_tests.sh" "python3 tests/gpu/test_flash_op.py" \
            "python3 tests/gpu/test_fwd_torch.py --cases 25" > "$D/gpu_test.log" 2>&1
        say "tests exit $?: $(tail -n 1 "$D/gpu_test.log")"
        grep '^FAIL' "$D/gpu_test.log" | head -n 20 | cut -c1-300 | tee -a "$D/summary.txt"
        ;;
    ncu)
        say "ncu backward"
        NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,launch__grid_size,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum
        timeout 200 "$NCU" --profile-from-start off --clock-control none --csv --page raw --print-units base \
            --metrics $M --log-file "$D/io_bwd_ncu_raw.csv" \
            python3 scripts/bench_gpu.py --profile-io "$D/io_bwd_map.json" --passes bwd > "$D/ncu.log" 2>&1
        say "ncu exit $?"
        python3 scripts/ncu_io.py "$D/io_bwd_ncu_raw.csv" "$D/io_bwd_map.json" "$D/io_bwd.csv" \
            "ncu --profile-from-start off --clock-control none --metrics $M python3 scripts/bench_gpu.py --profile-io MAP.json --passes bwd" \
            >> "$D/ncu.log" 2>&1
        say "ncu_io.py exit $?"
        ;;
    *) say "unknown phase $phase" ;;
    esac
done
cd "$OUT" && tar czf final.tgz final && rm -rf final
echo "== summary"
tar xzf final.tgz final/summary.txt -O
