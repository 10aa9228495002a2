#!/bin/sh
# scripts/gpu/ncu_io.sh OUT.csv [PASSES] -- DRAM and L2 bytes of the library's
# versions (and PyTorch SDPA flash/cuDNN for reference) measured with Nsight
# Compute, beside the IO model: every pass by default (make gpu-data-ncu writes
# data/gpu/io_fwd.csv), or PASSES alone (bwd: data/gpu/io_bwd.csv).
#
# How: scripts/gpu/bench_gpu.py --profile-io runs each (shape, implementation)
# once between cudaProfilerStart/Stop, after a marker kernel whose grid size
# is the row's tag; ncu (--profile-from-start off, --clock-control none, so
# the card's clocks are left alone; default --cache-control all, so every
# kernel starts with cold caches) records per kernel
#   dram__bytes_read.sum, dram__bytes_write.sum   bytes through HBM
#   lts__t_bytes.sum                              bytes through the L2 slices
#   lts__t_sectors_srcunit_tex_op_{read,write}.sum  32-byte sectors the SMs
#                                                 read/wrote in L2
#   gpu__time_duration.sum                        kernel time
# and scripts/gpu/ncu_io.py sums the kernels of each tag into one row.
# Cost: a minute or two on an H200 (one replay pass per kernel).
set -e
out=${1:-data/gpu/io_fwd.csv}
sel=${2:+--passes $2}
raw=${out%.csv}_ncu_raw.csv   # kept: the per-kernel rows behind every sum
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
command -v "$NCU" >/dev/null 2>&1 || { echo "ncu_io.sh: skipped: ncu (Nsight Compute) not found ($NCU)"; exit 0; }
BASE=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,launch__grid_size
# L2 sectors requested by the SMs (reads and writes through L1/TEX): the
# traffic the tiled model predicts, without the L2's own fills/evictions
EXTRA=lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum
FLAGS="--profile-from-start off --clock-control none --csv --page raw --print-units base"
map=${out%.csv}_map.json
metrics=$BASE,$EXTRA
if ! "$NCU" $FLAGS --metrics $metrics --log-file "$raw" \
        python3 scripts/gpu/bench_gpu.py --profile-io "$map" $sel; then
    echo "ncu_io.sh: retrying without $EXTRA" >&2
    metrics=$BASE
    "$NCU" $FLAGS --metrics $metrics --log-file "$raw" python3 scripts/gpu/bench_gpu.py --profile-io "$map" $sel
fi
python3 scripts/gpu/ncu_io.py "$raw" "$map" "$out" "ncu $FLAGS --metrics $metrics python3 scripts/gpu/bench_gpu.py --profile-io MAP.json${sel:+ $sel}"
