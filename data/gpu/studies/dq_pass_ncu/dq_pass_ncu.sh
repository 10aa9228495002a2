#!/bin/sh
# data/gpu/studies/dq_pass_ncu/dq_pass_ncu.sh -- Nsight Compute on the dQ pass's two
# kernels (bwd_dq_pass_kernel, phases 0 and 1) inside one backward of the
# op with accurate_dq="full" (version 3, bf16, B N = 16384, H d = 2048),
# at d 128 N 8192 without a mask and d 64 N 2048 causal: their time, DRAM
# bytes and L2 read bytes, against fa_bwd_dq_pass_bytes (chapter 4b). Run
# from the repository root with build/libfa_gpu.so built:
#
#     FA_COMMIT=<commit> OUT=<dir> sh data/gpu/studies/dq_pass_ncu/dq_pass_ncu.sh
#
# Files: $OUT/dq_pass_ncu/ncu_d<d>_n<N>_c<causal>.csv, env.txt, and
# model.csv (fa_bwd_dq_pass_bytes at each shape; host code, any machine:
# sh data/gpu/studies/dq_pass_ncu/dq_pass_ncu.sh --model-only DIR writes that file alone).
set -u
OUT=${OUT:-/tmp}
D=$OUT/dq_pass_ncu
[ "${1:-}" = "--model-only" ] && D=$2
mkdir -p "$D"
SHAPES="128 8192 0
64 2048 1"
echo "$SHAPES" | python3 -c '
import ctypes, subprocess, sys
from flashattn_stages import fa
lib = fa.load()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# fa_bwd_dq_pass_bytes at commit {commit}; bf16, B N = 16384, H d = 2048")
print("d,seqlen,causal,B,H,model_bytes")
for line in sys.stdin:
    d, n, c = map(int, line.split())
    p = fa.params(16384 // n, 2048 // d, n, d, window=(-1, 0) if c else (-1, -1))
    print(f"{d},{n},{c},{16384 // n},{2048 // d},{lib.fa_bwd_dq_pass_bytes(fa.BF16, ctypes.byref(p)):.0f}")
' > "$D/model.csv"
[ "${1:-}" = "--model-only" ] && exit 0
sh scripts/device/env.sh "sh data/gpu/studies/dq_pass_ncu/dq_pass_ncu.sh" > "$D/env.txt"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
echo "$SHAPES" | while read -r sd sn sc; do
    set -- $sd $sn $sc
    timeout 150 "$NCU" --profile-from-start off --clock-control none --csv --page raw \
        --kernel-name regex:bwd_dq_pass \
        --metrics gpu__time_duration.sum,dram__bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
        python3 scripts/gpu/hopper_ncu.py --impl ours --pass bwd --d $1 --n $2 --causal $3 \
        --accurate-dq full > "$D/ncu_d$1_n$2_c$3.csv" 2>&1 < /dev/null
    echo "ncu d $1 N $2 causal $3: exit $?" | tee -a "$D/env.txt"
done
