#!/bin/sh
# tests/emulate.sh -- a GPU kernel's source run on the CPU, for make test:
#
#     sh tests/emulate.sh TITLE KERNEL.cu TEST.cpp REGION...
#
# cuts each region (//> REGION ... //< REGION) of KERNEL.cu (of FILE for a
# REGION written FILE#REGION) into
# build/emulate/REGION.inc (dashes as underscores), compiles TEST.cpp with
# g++ (C++20: tests/emulate_cuda.h's threads and std::barrier) and runs it;
# TEST.cpp prints the PASS/FAIL lines. A compiler without C++20's
# <barrier> or _Float16 is a SKIP; the emulation failing to build with one
# that has them is a FAIL (the kernels' source changed). TITLE names the
# suite in those lines. Used by emulate_decode.sh and emulate_center.sh.
cd "$(dirname "$0")/.." || exit 2
title=$1 src=$2 test=$3
shift 3
dir=build/emulate
mkdir -p "$dir" || exit 2
for r in "$@"; do
    from=$src
    case $r in *#*) from=${r%%#*} r=${r#*#} ;; esac
    awk -v r="$r" '$0 == "//> " r {f = 1; next} $0 == "//< " r {f = 0} f' "$from" \
        > "$dir/$(echo "$r" | tr - _).inc"
    [ -s "$dir/$(echo "$r" | tr - _).inc" ] || { echo "FAIL $title: region $r not found"; exit 0; }
done
name=$(basename "$test" .cpp)
CXX=${CXX:-g++}
printf '#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); _Float16 h = 1; return (int)h - 1; }\n' \
    > "$dir/probe_$name.cpp"
if ! "$CXX" -std=c++20 "$dir/probe_$name.cpp" -o "$dir/probe_$name" -lpthread 2>/dev/null; then
    echo "SKIP $title: $CXX lacks C++20's std::barrier or _Float16"
    exit 0
fi
if ! "$CXX" -std=c++20 -O1 -Icore -Itests -I"$dir" -Wall -Wno-unknown-pragmas -Wno-unused-function \
        "$test" -o "$dir/$name" -lpthread 2>"$dir/build_$name.log"; then
    echo "FAIL $title: the emulation does not build: $(grep -m1 error "$dir/build_$name.log")"
    exit 0
fi
"$dir/$name"
