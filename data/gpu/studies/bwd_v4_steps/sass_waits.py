#!/usr/bin/env python3
"""Question it answered: which instruction the stalls ncu charges to backward
version 3's REDG and HMMA instructions wait for; the answer:
data/gpu/studies/bwd_v4_steps/steps.md, third round (the wait table).

sass_waits.py SASS [FROM TO] -- the scheduling control bits of each
instruction of a `cuobjdump -sass` listing (sm_70 and later), so that a
stall that ncu charges to one instruction can be traced to the instruction
it waits for.

Each sm_70+ instruction is 128 bits; bits 105-125 (bits 41-61 of the second
64-bit word that cuobjdump prints) are set by ptxas:
  stall  4 bits  cycles before the next instruction may issue   -> Sn
  yield  1 bit
  wbar   3 bits  scoreboard set when the result is written      -> Wb
                 (variable latency: LDS, LDSM, SHFL, LDG, ...)
  rbar   3 bits  scoreboard set when the source registers have  -> Rb
                 been read (stores, REDG: until then they may
                 not be overwritten)
  wait   6 bits  scoreboards this instruction waits for          -> wait[...]
  reuse  4 bits  operand reuse cache
(7 in a barrier field means none.) An instruction with wait[b] stalls until
every instruction that set scoreboard b is done: a long_scoreboard stall on
an instruction that reads no memory result, with a wait on the Rb of a REDG,
is a write to a register that REDG has not yet read.

FROM TO: hexadecimal addresses (as cuobjdump prints them) to print only
that range. Needs python3 only.
"""
import re
import sys


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(sys.argv) not in (2, 4):
        sys.stderr.write("usage: sass_waits.py SASS [FROM TO]\n")
        return 2
    try:
        lo = int(sys.argv[2], 16) if len(sys.argv) == 4 else 0
        hi = int(sys.argv[3], 16) if len(sys.argv) == 4 else 1 << 62
        lines = open(sys.argv[1]).read().split('\n')
    except (OSError, ValueError) as e:
        sys.stderr.write(f"sass_waits.py: {e}\n")
        return 2
    for i, l in enumerate(lines[:-1]):
        m = re.match(r'^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x[0-9a-f]+ \*/', l)
        m2 = re.match(r'^\s+/\* (0x[0-9a-f]+) \*/', lines[i + 1])
        if not m or not m2:
            continue
        addr = int(m.group(1), 16)
        if not lo <= addr <= hi:
            continue
        ctl = int(m2.group(1), 16) >> 41
        stall, wbar, rbar, wait = ctl & 0xf, (ctl >> 5) & 7, (ctl >> 8) & 7, (ctl >> 11) & 0x3f
        w = [b for b in range(6) if wait >> b & 1]
        print('%05x %-64s S%02d %s%s%s' % (addr, m.group(2)[:64], stall, 'W%d ' % wbar if wbar != 7 else '',
                                           'R%d ' % rbar if rbar != 7 else '', 'wait%s' % w if w else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
