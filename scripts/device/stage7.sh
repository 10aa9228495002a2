#!/bin/sh
# scripts/device/stage7.sh -- stage 7 on the lent two-GPU machine (nvidia-h200-x2),
# in about five minutes. Run from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/stage7.sh
#
# What it does, in order (each step's exit status is printed; one failing
# step does not stop the others):
#   1. the machine: GPUs, how they are linked, driver, nvcc, where NCCL is;
#   2. make stage7 and build/test_ring (the CPU tests of the merge rule and
#      the plan, run once more here);
#   3. ./stage7 --gpus 2: the real input and two random problems, G = 1 and 2;
#   4. ./stage7 --sweep tests: the GPU test suite on both GPUs (NCCL), then
#      with four virtual shards on GPU 0 (the accumulators' middle hops);
#   5. ./stage7 --gpus 3: one line, exit 2 (fewer GPUs than asked);
#   6. ./stage7 --sweep scale --gpus 2: the measurement, into $OUT/ring.csv
#      (falls back to --virtual, into $OUT/ring_virtual.csv, if NCCL fails).
# Files under ${OUT:-/tmp}: stage7.log (every command's whole output),
# ring.csv (data/gpu/ring.csv to be), env.txt. Standard output carries the
# verdicts: FAIL and SKIP lines whole, PASS lines shortened, the summaries,
# the scale table, and the NCCL log of a failing run.
#
# NVLink multicast stays off (the device notes: a program that uses it can
# take the shared GPUs out of service): the three variables below are
# exported for every command, and nothing here calls cuMulticastCreate.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
OUT=${OUT:-/tmp}
mkdir -p "$OUT" || exit 2
if [ -z "${FA_COMMIT:-}" ]; then
    FA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export FA_COMMIT
log="$OUT/stage7.log"
: > "$log"
t_start=$(date +%s)

say() { echo "$*" | tee -a "$log"; }
# run NAME CMD...: the command's whole output into the log; its verdict lines
# on standard output; the exit status returned.
run() {
    name=$1; shift
    say "== $name: $* ($(( $(date +%s) - t_start )) s)"
    tmp=$OUT/.step.out
    "$@" > "$tmp" 2>&1
    rc=$?
    cat "$tmp" >> "$log"
    grep -E '^(FAIL|SKIP) |error|Error|NCCL WARN|passed|largest N|^stage7:|^  (pass|fwd |bwd )|^ *(fwd|bwd) ' "$tmp" \
        | grep -v '^PASS' | cut -c1-400
    grep -E '^PASS ' "$tmp" | cut -c1-150
    say "   [exit $rc]"
    rm -f "$tmp"
    return $rc
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit: $FA_COMMIT"
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvidia-smi topo -m
    nvcc --version | tail -n 2
    echo "NCCL found: $(sh scripts/find_nccl.sh "$(command -v nvcc)")"
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1
    python3 -c 'import nvidia, glob, os; [print(p) for b in nvidia.__path__ for p in glob.glob(os.path.join(b, "*nccl*", "*", "*"))]' 2>&1 | head -n 8
    env | grep -E '^(NCCL|NVSHMEM|TORCH_SYMM)' | sort
} > "$OUT/env.txt" 2>&1
say "== machine"
cat "$OUT/env.txt" | tee -a "$log"

run build make -j16 stage7 build/test_ring
if [ ! -x ./stage7 ]; then
    say "stage7 was not built; the build's last lines:"
    tail -n 30 "$log"
    exit 1
fi
run cpu-tests build/test_ring --quick
run checks ./stage7 --gpus 2
checks=$?
if [ "$checks" -ne 0 ]; then
    say "== a small NCCL run with NCCL_DEBUG=INFO (last 40 lines)"
    NCCL_DEBUG=INFO ./stage7 --gpus 2 --random --n 256 --d 64 --heads 1 > "$OUT/.nccl.out" 2>&1
    cat "$OUT/.nccl.out" >> "$log"
    tail -n 40 "$OUT/.nccl.out"
    rm -f "$OUT/.nccl.out"
fi
run tests-nccl ./stage7 --sweep tests --gpus 2
run tests-virtual4 ./stage7 --sweep tests --gpus 4 --virtual
./stage7 --gpus 3 > "$OUT/.cli.out" 2>&1
rc=$?
say "== fewer GPUs than asked: ./stage7 --gpus 3 gave exit $rc (want 2): $(head -c 200 "$OUT/.cli.out")"
rm -f "$OUT/.cli.out"

left=$(( 285 - ($(date +%s) - t_start) ))
[ "$left" -lt 30 ] && left=30
[ "$left" -gt 110 ] && left=110
if ! run scale ./stage7 --sweep scale --gpus 2 --csv "$OUT/ring.csv" --budget "$left"; then
    run scale-virtual ./stage7 --sweep scale --gpus 2 --virtual --csv "$OUT/ring_virtual.csv" --budget 40
fi
say "== done in $(( $(date +%s) - t_start )) s; files: $(ls "$OUT" | tr '\n' ' ')"
