#!/bin/sh
# scripts/ncu_io.sh OUT.csv -- DRAM and L2 bytes of stage 4's versions (and
# PyTorch SDPA flash/cuDNN for reference) measured with Nsight Compute,
# beside the IO model (make io-gpu writes data/gpu/io_fwd.csv).
#
# How: scripts/bench_gpu.py --profile-io runs each (shape, implementation)
# once between cudaProfilerStart/Stop, after a marker kernel whose grid size
# is the row's tag; ncu (--profile-from-start off, --clock-control none, so
# the card's clocks are left alone; default --cache-control all, so every
# kernel starts with cold caches) records per kernel
#   dram__bytes_read.sum, dram__bytes_write.sum   bytes through HBM
#   lts__t_bytes.sum                              bytes through the L2 slices
#   gpu__time_duration.sum                        kernel time
# and scripts/ncu_io.py sums the kernels of each tag into one row.
# Cost: a minute or two on an H200 (one replay pass per kernel).
set -e
out=${1:-data/gpu/io_fwd.csv}
tmp=${TMPDIR:-/tmp}/ncu_io.$$
mkdir -p "$tmp"
raw=${out%.csv}_ncu_raw.csv   # kept: the per-kernel rows behind every sum
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
"$NCU" --profile-from-start off --clock-control none --csv --page raw --print-units base \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,launch__grid_size \
    --log-file "$raw" \
    python3 scripts/bench_gpu.py --profile-io "${out%.csv}_map.json"
python3 scripts/ncu_io.py "$raw" "${out%.csv}_map.json" "$out" "$NCU --profile-from-start off --clock-control none --csv --page raw --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,launch__grid_size python3 scripts/bench_gpu.py --profile-io MAP.json"
rm -rf "$tmp"
