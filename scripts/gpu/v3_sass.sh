#!/bin/sh
# scripts/gpu/v3_sass.sh OBJ -- per kernel of version 3, the instructions that
# show it runs on Hopper's own units: HGMMA (wgmma), UTMALDG (the tensor copy
# engine), SYNCS (mbarrier operations), USETMAXREG (setmaxnreg), and the ones
# that must be absent: LDL/STL (local memory: a spilled or dynamically
# indexed register array). Needs cuobjdump and nvdisasm on the PATH.
# (default: the first build/stage4*_v3_hopper.o, forward version 3's object)
obj=${1:-$(ls build/stage4*_v3_hopper.o 2>/dev/null | head -n 1)}
cuobjdump --dump-sass "$obj" | awk '
# names: fwd_v3_kernel<T, D, STEP> as "v3 bf16 d128 step5", the test kernels shortened
function pretty(f,    t, m, parts) {
    sub(/^_Z[0-9]+/, "", f)
    t = f ~ /bfloat16/ ? "bf16" : f ~ /half/ ? "fp16" : ""
    # the piece test of the products: v3_test_gemms<T, D, BC, LEAN>
    if (f ~ /^v3_test_gemms/ && match(f, /Li[0-9]+ELi[0-9]+ELb[01]E/)) {
        m = substr(f, RSTART + 2, RLENGTH - 3); gsub(/ELb/, "ELi", m); split(m, parts, "ELi")
        return "v3_test_gemms " t " d" parts[1] " bc" parts[2] (parts[3] == "1" ? " lean" : "")
    }
    if (match(f, /Li[0-9]+ELi[0-9]+E/)) {
        m = substr(f, RSTART + 2, RLENGTH - 3); split(m, parts, "ELi")
        return "v3 " t " d" parts[1] " step" parts[2]
    }
    if (match(f, /Li[0-9]+E/)) return substr(f, 1, index(f, "I") - 1) " " t " d" substr(f, RSTART + 2, RLENGTH - 3)
    return substr(f, 1, index(f, "1") > 0 ? index(f, "1") - 1 : length(f))
}
/Function : / { f = pretty($3); names[++nf] = f; next }
/\/\*[0-9a-f]+\*\// {
    line = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line); sub(/^@!?U?P[T0-9]+[ \t]+/, "", line)
    split(line, w, /[ \t;]/); op = w[1]; split(op, p, "."); base = p[1]
    if (base == "HGMMA" || base == "UTMALDG" || base == "SYNCS" || base == "USETMAXREG" || base == "LDL" || base == "STL" || base == "BAR") c[f, base]++
    if (op ~ /^MUFU.EX2/) c[f, "MUFU.EX2"]++
}
END {
    printf "%-34s %6s %7s %6s %10s %8s %4s %4s %4s\n", "kernel", "HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "MUFU.EX2", "BAR", "LDL", "STL"
    for (i = 1; i <= nf; i++) { f = names[i]
        printf "%-34s %6d %7d %6d %10d %8d %4d %4d %4d\n", f, c[f,"HGMMA"], c[f,"UTMALDG"], c[f,"SYNCS"], c[f,"USETMAXREG"], c[f,"MUFU.EX2"], c[f,"BAR"], c[f,"LDL"], c[f,"STL"] }
}'
