#!/bin/sh
# scripts/device/torchop.sh -- the PyTorch op's whole GPU run, in one command:
# build build/libfa_gpu.so, run the op's checks against SDPA
# (tests/gpu/test_flash_op.py), train the small transformer with our op and
# with SDPA (scripts/train_compare.py). Run from the repository root on the
# GPU machine; the commit is taken from FA_COMMIT where the copy has no .git:
#
#     FA_COMMIT=<sha> OUT=/some/dir sh scripts/device/torchop.sh
#
# Writes under ${OUT:-/tmp} (five files):
#     torchop.log          environment, then the summary of each step
#     torchop_build.log    make's output
#     torchop_tests.log    every PASS/FAIL/SKIP line of the checks, and the count
#     torchop_train.log    the training log and the comparison (PASS/FAIL)
#     train_loss.csv       the loss of every step of every run, with provenance
#                          (commit it as data/gpu/train_loss.csv)
# Prints the same summary on stdout. Exit status: 0 when the checks and the
# training comparison both pass, 1 otherwise. Cost on an H200: about a minute
# to build, half a minute of checks, under a minute of training.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
log=$OUT/torchop.log
say() { echo "$*" | tee -a "$log"; }

: > "$log"
say "# scripts/device/torchop.sh, commit ${FA_COMMIT:-(git) $(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "# $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n1)"
say "# $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -n1)"
say "# $(nvcc --version 2>&1 | tail -n1)"

t0=$(date +%s)
if ! make -j16 build/libfa_gpu.so > "$OUT/torchop_build.log" 2>&1; then
    say "build: FAILED (make build/libfa_gpu.so); last lines:"
    tail -n 20 "$OUT/torchop_build.log" | tee -a "$log"
    exit 1
fi
say "build: build/libfa_gpu.so in $(( $(date +%s) - t0 )) s"
python3 -c 'import sys; sys.path.insert(0, "scripts"); import fa
lib = fa.load()
for p in (fa.FORWARD, fa.BACKWARD):
    for v in fa.versions(lib, p):
        print("# table:", ("forward", "backward")[p], v.name.decode(), "-", v.what.decode(),
              "| masks", v.masks, "| deterministic", v.deterministic)' 2>&1 | tee -a "$log"

t0=$(date +%s)
timeout 300 sh tests/run.sh "python3 tests/gpu/test_flash_op.py" > "$OUT/torchop_tests.log" 2>&1
tests_rc=$?
say "checks: $(tail -n 1 "$OUT/torchop_tests.log") in $(( $(date +%s) - t0 )) s (exit $tests_rc)"
grep -E '^(FAIL|SKIP) |^# seed' "$OUT/torchop_tests.log" | head -n 40 | tee -a "$log"

t0=$(date +%s)
timeout 300 python3 scripts/train_compare.py --csv "$OUT/train_loss.csv" > "$OUT/torchop_train.log" 2>&1
train_rc=$?
say "training: exit $train_rc in $(( $(date +%s) - t0 )) s"
grep -vE '^(wrote) ' "$OUT/torchop_train.log" | tail -n 25 | tee -a "$log"

[ "$tests_rc" -eq 0 ] && [ "$train_rc" -eq 0 ]
