#!/bin/sh
# scripts/device_final.sh -- the measurements the paper and data/gpu/ rest on,
# in one device call on the two-GPU machine (nvidia-h200-x2). Run from the
# repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device_final.sh
#
# Order (each step under its own time limit; logs and data in $OUT/final/):
#   1. build    every GPU target (stage4, stage5, stage7, libfa_gpu.so, v3_check)
#   2. ring     ./stage7 --sweep scale --gpus 2 -> ring.csv (both GPUs, alone)
#   3. two lanes at once, one GPU each, so that the tests never share a GPU
#      with a timing:
#      GPU 0  bench: scripts/bench_gpu.py, every version of the table beside
#             SDPA flash, cuDNN and the materialized expression; forward,
#             backward, forward+backward; bf16 over the papers' grid (d 64,
#             128; N 512 .. 16384; causal and not), fp16 at N 2048, 8192
#             -> bench_fwd.csv, bench_bwd.csv, bench_*_fp16.csv
#             then ncu: DRAM and L2 bytes of the backward -> io_bwd.csv, and
#             the executed instructions by opcode of our backward version 3
#             and FlashAttention-2's -> bwd_opcodes_*.txt
#      GPU 1  tests: ./stage4 --sweep tests, ./stage5 --sweep tests,
#             compute-sanitizer on ./stage5 --sweep small, the PyTorch op's
#             checks (tests/gpu/test_flash_op.py); then the training
#             comparison (scripts/train_compare.py) -> train_loss.csv
# Everything lands in $OUT/final.tgz (the device tool returns at most 8
# files); a summary is printed last. NVLink multicast stays off.
set -u
OUT=${OUT:-/tmp}
D=$OUT/final
mkdir -p "$D"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
{ nvidia-smi; nvidia-smi topo -m; nvcc --version;
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; } \
    > "$D/env.txt" 2>&1

say "build"
timeout 200 make -j"$(nproc)" stage4 stage5 stage7 build/libfa_gpu.so build/v3_check > "$D/build.log" 2>&1
say "build exit $?"

say "ring scale"
timeout 110 ./stage7 --sweep scale --gpus 2 --csv "$D/ring.csv" --budget 70 > "$D/ring_scale.log" 2>&1
say "ring scale exit $?"

lane_bench() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 260 python3 scripts/bench_gpu.py --csv "$D/bench_fwd.csv" --bwd-csv "$D/bench_bwd.csv" \
        --dtypes bf16 --slow-max-n 4096 --repeats 8 > "$D/bench_bf16.log" 2>&1
    echo "bench bf16 exit $?" >> "$D/lane0.txt"
    timeout 70 python3 scripts/bench_gpu.py --csv "$D/bench_fwd_fp16.csv" --bwd-csv "$D/bench_bwd_fp16.csv" \
        --dtypes fp16 --ns 2048,8192 --slow-max-n 2048 --repeats 8 > "$D/bench_fp16.log" 2>&1
    echo "bench fp16 exit $?" >> "$D/lane0.txt"
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,launch__grid_size,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum
    timeout 100 "$NCU" --profile-from-start off --clock-control none --csv --page raw --print-units base \
        --metrics $M --log-file "$D/io_bwd_ncu_raw.csv" \
        python3 scripts/bench_gpu.py --profile-io "$D/io_bwd_map.json" --passes bwd > "$D/ncu.log" 2>&1
    echo "ncu exit $?" >> "$D/lane0.txt"
    python3 scripts/ncu_io.py "$D/io_bwd_ncu_raw.csv" "$D/io_bwd_map.json" "$D/io_bwd.csv" \
        "ncu --profile-from-start off --clock-control none --metrics $M python3 scripts/bench_gpu.py --profile-io MAP.json --passes bwd" \
        >> "$D/ncu.log" 2>&1
    echo "ncu_io.py exit $?" >> "$D/lane0.txt"
    # executed instructions by opcode of our fastest backward and FlashAttention-2's, one
    # launch each, bf16, B 2, H 16, N 8192, d 128, no mask (chapter 4b's instruction count)
    for k in v3_backward flash_bwd_dq_dk_dv; do
        timeout 60 "$NCU" --clock-control none --metrics sass__inst_executed_per_opcode,gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size \
            --print-metric-instances details -k regex:$k -c 1 \
            python3 scripts/bench_gpu.py --passes bwd --dtypes bf16 --ns 8192 --dims 128 --causal 0 --repeats 2 \
            --impls ours_v3_hopper,sdpa_flash > "$D/bwd_opcodes_$k.txt" 2>&1
        echo "opcodes $k exit $?" >> "$D/lane0.txt"
    done
}
lane_tests() {
    export CUDA_VISIBLE_DEVICES=1
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    ( timeout 110 ./stage4 --sweep tests > "$D/stage4_tests.log" 2>&1; echo "stage4 tests exit $?" >> "$D/lane1.txt" ) &
    ( timeout 110 ./stage5 --sweep tests > "$D/stage5_tests.log" 2>&1; echo "stage5 tests exit $?" >> "$D/lane1.txt" ) &
    ( for tool in memcheck racecheck synccheck initcheck; do
          timeout 100 "$SAN" --tool $tool --error-exitcode 9 ./stage5 --sweep small > "$D/san_$tool.log" 2>&1
          echo "stage5 $tool exit $?: $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$D/san_$tool.log")" >> "$D/lane1.txt"
      done ) &
    wait
    # OLD_STAGE5=<a stage5 binary of an earlier commit>: its deterministic
    # dQ, dK, dV beside this build's, bit for bit, for the versions 2 and 3
    # (a change meant to keep the arithmetic must give the same bits)
    if [ -n "${OLD_STAGE5:-}" ] && [ -x "$OLD_STAGE5" ]; then
        for shape in "--n 1000 --d 128 --causal" "--n 777 --d 80 --window 100,20" \
                     "--n 300 --d 48 --seqlen-k 421 --causal" "--n 513 --d 64 --kv-heads 2 --heads 4" \
                     "--n 2048 --d 128"; do
            for k in 2 3; do
                ok=1
                for b in "$OLD_STAGE5" ./stage5; do
                    tag=$(basename "$b")
                    # shellcheck disable=SC2086
                    timeout 60 "$b" --random --seed 7 $shape --kernel $k --dtype bf16 --deterministic \
                        --dq "$D/bit_${tag}_dq.npy" --dk "$D/bit_${tag}_dk.npy" --dv "$D/bit_${tag}_dv.npy" \
                        > "$D/bit_${tag}.log" 2>&1 || ok=0
                done
                for t in dq dk dv; do
                    cmp -s "$D/bit_$(basename "$OLD_STAGE5")_$t.npy" "$D/bit_stage5_$t.npy" || ok=0
                done
                echo "$([ $ok = 1 ] && echo SAME || echo DIFFERENT) v$k bf16 deterministic $shape" >> "$D/bitwise.log"
            done
        done
        rm -f "$D"/bit_*.npy
        echo "bitwise vs $OLD_STAGE5: $(grep -c '^SAME' "$D/bitwise.log") same, $(grep -c '^DIFFERENT' "$D/bitwise.log") different" >> "$D/lane1.txt"
    fi
    timeout 100 python3 tests/gpu/test_flash_op.py > "$D/flash_op.log" 2>&1
    echo "flash_op exit $?" >> "$D/lane1.txt"
    timeout 150 python3 scripts/train_compare.py --csv "$D/train_loss.csv" > "$D/train.log" 2>&1
    echo "train exit $?" >> "$D/lane1.txt"
}
say "lanes: bench on GPU 0, tests and training on GPU 1"
lane_bench &
lane_tests &
wait
say "lanes done"
cat "$D/lane0.txt" "$D/lane1.txt" >> "$D/summary.txt" 2>/dev/null
for f in stage4_tests stage5_tests flash_op; do
    echo "$f: $(grep -c '^PASS' "$D/$f.log" 2>/dev/null) PASS, $(grep -c '^FAIL' "$D/$f.log" 2>/dev/null) FAIL" >> "$D/summary.txt"
    grep '^FAIL' "$D/$f.log" 2>/dev/null | head -n 6 | cut -c1-300 >> "$D/summary.txt"
done
grep -E '^  (pass|fwd|bwd) |largest N' "$D/ring_scale.log" >> "$D/summary.txt"
sed -n '/^TFLOP\/s/,$p' "$D/bench_bf16.log" >> "$D/summary.txt"
tail -n 6 "$D/train.log" >> "$D/summary.txt"
cd "$OUT" && tar czf final.tgz final && rm -rf final
echo "== summary"
tar xzf final.tgz final/summary.txt -O
