#!/bin/sh
# tests/fa_suite/run.sh [--protocol] [PYTEST-ARGS...] -- FlashAttention's own
# test suite (third_party/flash-attention/tests/test_flash_attn.py, obtained
# by tests/fa_suite/fetch.sh) through flashattn_stages: pytest with the
# `flash_attn` shim and the plugin beside this file (fa_plugin.py: the cases
# needing dropout, ALiBi or softcap left out and counted, --fa-sample N
# --fa-seed S, --fa-log PATH). make fa-suite-gpu and fa-suite-full-gpu call
# it. Without a CUDA GPU, torch, pytest, einops or the suite's file it says
# so in one line and exits 0. --protocol: one PASS/FAIL/SKIP line for
# tests/run.sh (make gpu-test): PASS when every case run passed; with
# FA_SUITE_LOG=PATH the log (provenance, counts per test function) is kept
# there, written only once the run is over (make gpu-data-tests).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FILE=third_party/flash-attention/tests/test_flash_attn.py
protocol=
[ "${1:-}" = "--protocol" ] && { protocol=1; shift; }
skip() {
    if [ -n "$protocol" ]; then echo "SKIP fa-suite: $1"; else echo "fa-suite: skipped: $1"; fi
    exit 0
}
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || skip "no CUDA GPU here (nvidia-smi lists none)"
python3 -c 'import torch, pytest, einops; assert torch.cuda.is_available()' 2>/dev/null ||
    skip "it needs torch with CUDA, pytest and einops"
[ -f "$ROOT/$FILE" ] || skip "$FILE is not here (sh tests/fa_suite/fetch.sh, then send third_party/ along)"
[ -f "$ROOT/build/libfa_gpu.so" ] || [ -n "${FA_GPU_LIB:-}" ] || skip "build/libfa_gpu.so is not built"
cd "$ROOT" || exit 2
export PYTHONPATH="$ROOT/tests/fa_suite:$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "$protocol" ]; then
    exec python3 -m pytest -p fa_plugin -p no:cacheprovider -q "$FILE" "$@"
fi
log=$(mktemp) || exit 2
trap 'rm -f "$log"' EXIT
python3 -m pytest -p fa_plugin -p no:cacheprovider -q "$FILE" --fa-log "$log" "$@" > "$log.out" 2>&1
rc=$?
[ -n "${FA_SUITE_LOG:-}" ] && [ -s "$log" ] && cp "$log" "$FA_SUITE_LOG"
tail -n 3 "$log.out"
rm -f "$log.out"
outcome=$(grep '^# outcome:' "$log" 2>/dev/null | sed 's/^# outcome: //')
selection=$(grep '^# selection:' "$log" 2>/dev/null | sed 's/^# selection: //; s/ (a case may need several)//')
if [ "$rc" -eq 0 ]; then
    echo "PASS fa-suite: $outcome; $selection"
else
    echo "FAIL fa-suite: pytest exited $rc: ${outcome:-no log}"
    grep '^# .*::' "$log" 2>/dev/null | head -n 10
fi
