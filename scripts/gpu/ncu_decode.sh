#!/bin/sh
# scripts/gpu/ncu_decode.sh DIR -- Nsight Compute on one decoding step, ours
# (the rule's splits) and cuDNN's, B 1, H 32, H_kv 8, d 128, bf16, at 8k and
# 32k keys: each kernel of the step with its duration, DRAM bytes, grid,
# occupancy and the main stall reasons (make study-decode-fixed-cost; an
# H200 whose ncu reads counters). One call each, between cudaProfilerStart
# and Stop (scripts/gpu/decode_fixed_cost.py --one). Writes DIR/ncu_IMPL_L.csv;
# a profile that fails leaves its file as it was and makes the exit status 1.
set -u
D=${1:?usage: sh scripts/gpu/ncu_decode.sh DIR}
mkdir -p "$D" || exit 2
MET=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,sm__warps_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__inst_executed.sum
rc=0
. scripts/gpu/ncu_prof.sh
for L in 8192 32768; do
    for impl in ours_rule sdpa_cudnn; do
        ncu_prof "$D" "${impl}_$L" "$MET" python3 scripts/gpu/decode_fixed_cost.py --one "$impl" --seqlen-k "$L"
    done
done
exit $rc
