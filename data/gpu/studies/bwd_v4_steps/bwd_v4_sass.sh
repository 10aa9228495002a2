#!/bin/sh
# Question it answered: how many instructions one full-tile step of backward
# version 3 issues per HMMA, before and after its bookkeeping was reworked;
# the answer: data/gpu/studies/bwd_v4_steps/steps.md, second round.
#
# data/gpu/studies/bwd_v4_steps/bwd_v4_sass.sh [REV] -- static SASS of backward version 3's main
# loop (kernels/stage5_bwd_v4.cu at git revision REV, default the working
# tree), bf16, d = 128, on the path a full-tile default-mode step executes:
# the source is compiled with `full`, the block-inside-Sq tests and
# `ordered` pinned (true, true, false), so the loop body holds that path and
# nothing else, and each of its instructions runs once per step and warp.
# Prints the instructions of the loop body by opcode, their total and the
# total per HMMA (ncu's executed count per step and warp is the same
# number: 1609 measured, 1614 counted, for the kernel of commit 92b6a74).
# Needs nvcc, cuobjdump, python3.
set -e
rev=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$rev" ]; then git show "$rev:kernels/stage5_bwd_v4.cu" > "$tmp/in.cu"; else cp kernels/stage5_bwd_v4.cu "$tmp/in.cu"; fi
sed -e 's/const bool full = i1 - i0 == BR.*;/const bool full = true;/' \
    -e 's/const bool full = inside .*;/const bool full = true;/' \
    -e 's/const bool ordered = x.deterministic;/const bool ordered = false;/' \
    -e 's/} else if (i1 - i0 == BR) {/} else if (true) {/' \
    -e 's/if (row0 + ROWS <= row_end) {/if (true) {/' "$tmp/in.cu" > "$tmp/probe.cu"
grep -q 'const bool full = true;' "$tmp/probe.cu" && grep -q 'const bool ordered = false;' "$tmp/probe.cu" ||
    { echo "bwd_v3_sass.sh: the source no longer has the lines this script pins" >&2; exit 2; }
nvcc -w -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Icore -Ikernels -I"$(pwd)/kernels" \
    -c "$tmp/probe.cu" -o "$tmp/probe.o"
cuobjdump -sass -fun _Z13bwd_v4_kernelI13__nv_bfloat16Li128ELb0EEv8bwd_argsIT_E "$tmp/probe.o" > "$tmp/k.sass"
python3 - "$tmp/k.sass" <<'PY'
import re, sys, collections
ins = []
for l in open(sys.argv[1]):
    m = re.match(r'^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', l)
    if m:
        t = m.group(2)
        if t.startswith('@'): t = t.split(None, 1)[1]
        ins.append((int(m.group(1), 16), t.split()[0].split('.')[0], t))
# the main loop: the longest backward branch whose body holds HMMA
loops = [(int(m.group(1), 16), a) for a, op, t in ins if op == 'BRA'
         for m in [re.search(r'0x([0-9a-f]+)', t)] if m and int(m.group(1), 16) <= a]
lo, hi = max((l for l in loops if any(op == 'HMMA' and l[0] <= a <= l[1] for a, op, _ in ins)),
             key=lambda l: l[1] - l[0])
c = collections.Counter(op for a, op, _ in ins if lo <= a <= hi)
n = sum(c.values())
for op, k in sorted(c.items(), key=lambda x: (-x[1], x[0])): print('%-10s %5d' % (op, k))
print('%-10s %5d\n%-10s %5.2f' % ('total', n, 'per HMMA', n / c['HMMA']))
PY
