#!/bin/sh
# scripts/device/dq_pass_ncu.sh -- Nsight Compute on the dQ pass's two
# kernels (bwd_dq_pass_kernel, phases 0 and 1) inside one backward of the
# op with accurate_dq="full" (version 3, bf16, B N = 16384, H d = 2048),
# at d 128 N 8192 without a mask and d 64 N 2048 causal: their time, DRAM
# bytes and L2 read bytes, against fa_bwd_dq_pass_bytes (chapter 4b). Run
# from the repository root with build/libfa_gpu.so built:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/dq_pass_ncu.sh
#
# Files: $OUT/dq_pass_ncu/ncu_d<d>_n<N>_c<causal>.csv, env.txt.
set -u
OUT=${OUT:-/tmp}
D=$OUT/dq_pass_ncu
mkdir -p "$D"
sh scripts/device/env.sh "sh scripts/device/dq_pass_ncu.sh" > "$D/env.txt"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for sh in "128 8192 0" "64 2048 1"; do
    set -- $sh
    timeout 150 "$NCU" --profile-from-start off --clock-control none --csv --page raw \
        --kernel-name regex:bwd_dq_pass \
        --metrics gpu__time_duration.sum,dram__bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
        python3 scripts/investigations/hopper_ncu.py --impl ours --pass bwd --d $1 --n $2 --causal $3 \
        --accurate-dq full > "$D/ncu_d$1_n$2_c$3.csv" 2>&1
    echo "ncu d $1 N $2 causal $3: exit $?" | tee -a "$D/env.txt"
done
