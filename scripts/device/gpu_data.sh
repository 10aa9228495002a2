#!/bin/sh
# scripts/device/gpu_data.sh -- make gpu-data (or some of its parts, and
# studies) on a lent GPU machine whose call returns few files and ends at a
# time limit. Run from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> PARTS="env tests bench-fwd" LIMIT_S=560 sh scripts/device/gpu_data.sh
#
# PARTS: gpu-data's parts (kernels/gpu_data.mk GPU_DATA_PARTS, the default:
# all of them, in that order) and any other make target (a study such as
# study-host-path), run one after another; each under `timeout` with what is
# left of LIMIT_S seconds (default 560), so a part that runs out is stopped
# and the ones before it are kept. FA_PREBUILT=1 skips the build (make gpu
# cpu, about half a minute on 16 cores).
#
# The parts write into GPU_DATA=build/gpu_data_run (not data/gpu/, so a part
# that fails leaves nothing half-written in the tree; a study writes into its
# studies/ folder); after each part the whole of it and the log are packed
# again into ONE file, $OUT/gpu_data.tgz (a machine that returns at most a
# few files returns it whole), with $OUT/gpu_data.log, every command's output.
# Unpack it at the repository root and move build/gpu_data_run/* into
# data/gpu/. Exit status: 0 when every part passed.
#
# How long the parts take on an H200 (one whole make gpu-data, 16 cores):
# build 27 s, env 7, tests 436, bench-fwd 28, bench-bwd 181, ncu 36, apps 101,
# op 261; 1077 s in all. So two calls of under ten minutes hold it:
# PARTS="env tests bench-fwd ncu" (about 535 s with the build), then
# FA_PREBUILT=1 PARTS="bench-bwd apps op" (about 545 s); the machine stays
# warm between them only if the second call follows at once.
set -u
OUT=${OUT:-/tmp/gpu_data_out}
LIMIT_S=${LIMIT_S:-560}
RUN=build/gpu_data_run
mkdir -p "$OUT" "$RUN" || exit 2
[ -n "${FA_COMMIT:-}" ] || FA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo "")
if [ -z "$FA_COMMIT" ]; then
    echo "gpu_data.sh: no commit to name: give FA_COMMIT=<commit> (the copy of the tree has no .git)" >&2
    exit 2
fi
export FA_COMMIT
ALL=$(make -pqrR --no-print-directory 2>/dev/null | sed -n 's/^GPU_DATA_PARTS := //p')
PARTS=${PARTS:-$ALL}
LOG="$OUT/gpu_data.log"
start=$(date +%s)
left() { echo $(( LIMIT_S - ($(date +%s) - start) )); }
pack() { tar czf "$OUT/gpu_data.tgz.tmp" "$RUN" "$LOG" 2>/dev/null && mv "$OUT/gpu_data.tgz.tmp" "$OUT/gpu_data.tgz"; }
echo "gpu_data.sh: commit $FA_COMMIT; parts: $PARTS; limit ${LIMIT_S} s" | tee "$LOG"
if [ "${FA_PREBUILT:-0}" != 1 ]; then
    t0=$(date +%s)
    timeout "$(left)" make -j"$(nproc)" gpu cpu >> "$LOG" 2>&1
    echo "build: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
fi
rc=0
for p in $PARTS; do
    s=$(left)
    if [ "$s" -le 10 ]; then
        echo "$p: not started: ${s} s left" | tee -a "$LOG"
        rc=1
        continue
    fi
    case " $ALL " in
        *" $p "*) target=gpu-data-$p ;;
        *) target=$p ;;
    esac
    t0=$(date +%s)
    timeout "$s" make --no-print-directory GPU_DATA="$RUN" "$target" >> "$LOG" 2>&1
    r=$?
    [ "$r" -eq 0 ] || rc=1
    echo "$target: exit $r in $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
    pack
done
pack
exit $rc
