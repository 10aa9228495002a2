#!/bin/sh
# scripts/gpu/ncu_hopper.sh DIR -- Nsight Compute on the Hopper passes beside
# cuDNN's and FlashAttention-2's, one call of each pass profiled alone
# (scripts/gpu/hopper_ncu.py; bf16, B N = 16384 tokens,
# H d = 2048): the backward at d 128 N 8192 and d 64 N 2048 causal (ours at
# backward 3's steps 2 and 3, cuDNN; flash at the first), the forward at
# N 1024 causal, d 64 and 128 (ours, cuDNN). One raw-page CSV per call in
# DIR (ncu_<pass>_d<d>_n<N>_c<causal>_<impl>.csv, a row per kernel):
# duration, tensor-pipe use, the issue stalls and tensor-pipe metrics this
# ncu has, DRAM bytes, occupancy, launch shape. About 90 s on an H200.
# make study-hopper-ncu runs it into data/gpu/studies/hopper_ncu/.
set -u
D=${1:?usage: sh scripts/gpu/ncu_hopper.sh DIR}
mkdir -p "$D" || exit 2
rc=0 NCU_TIMEOUT=60
. scripts/gpu/ncu_prof.sh
tp=$("$NCU" --query-metrics --chip gh100 2>/dev/null | grep -o '^sm__pipe_tensor_op_[a-z_]*cycles_active' | sort -u | sed 's/$/.avg.pct_of_peak_sustained_active/' | tr '\n' ',')
st=$("$NCU" --query-metrics --chip gh100 2>/dev/null | grep -o '^smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active' | sort -u | sed 's/$/.ratio/' | tr '\n' ',')
MET="${tp}${st}gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,smsp__inst_executed.sum,sm__cycles_active.avg"
# ncu_prof's file per call (ncu_TAG.csv), hopper_ncu.py running the call
prof() { tag=$1; shift; ncu_prof "$D" "$tag" "$MET" python3 scripts/gpu/hopper_ncu.py "$@"; }
for sh in "128 8192 0" "64 2048 1"; do
    set -- $sh
    FA_BWD3_STEP=2 prof "bwd_d$1_n$2_c$3_step2" --impl ours --pass bwd --d $1 --n $2 --causal $3
    FA_BWD3_STEP=3 prof "bwd_d$1_n$2_c$3_step3" --impl ours --pass bwd --d $1 --n $2 --causal $3
    prof "bwd_d$1_n$2_c$3_cudnn" --impl cudnn --pass bwd --d $1 --n $2 --causal $3
done
prof bwd_d128_n8192_c0_flash --impl flash --pass bwd --d 128 --n 8192 --causal 0
for d in 64 128; do
    prof "fwd_d${d}_n1024_c1_ours" --impl ours --pass fwd --d $d --n 1024 --causal 1
    prof "fwd_d${d}_n1024_c1_cudnn" --impl cudnn --pass fwd --d $d --n 1024 --causal 1
done
exit $rc
