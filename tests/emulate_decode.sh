#!/bin/sh
# tests/emulate_decode.sh -- stage 8's GPU kernels run on the CPU
# (tests/emulate_decode.cpp says how and what is held): their bodies are cut
# from kernels/stage8_decode.cu by the regions decode-split-kernel and
# decode-combine-kernel into build/emulate/, compiled with g++ (C++20: one
# std::thread per CUDA thread, std::barrier for __syncthreads) and run. SKIP
# where g++ cannot build it. The GPU itself is tested by tests/gpu/stage8.sh.
cd "$(dirname "$0")/.." || exit 2
dir=build/emulate
mkdir -p "$dir" || exit 2
for r in decode-split-kernel decode-combine-kernel; do
    awk -v r="$r" '$0 == "//> " r {f = 1; next} $0 == "//< " r {f = 0} f' kernels/stage8_decode.cu \
        > "$dir/$(echo "$r" | tr - _).inc"
    [ -s "$dir/$(echo "$r" | tr - _).inc" ] || { echo "FAIL emulated decode kernels: region $r not found"; exit 0; }
done
CXX=${CXX:-g++}
# a compiler without C++20's <barrier> or _Float16 is a SKIP; the emulation
# failing to build with one that has them is a FAIL (the kernels' source changed)
printf '#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); _Float16 h = 1; return (int)h - 1; }\n' \
    > "$dir/probe.cpp"
if ! "$CXX" -std=c++20 "$dir/probe.cpp" -o "$dir/probe" -lpthread 2>/dev/null; then
    echo "SKIP emulated decode kernels: $CXX lacks C++20's std::barrier or _Float16"
    exit 0
fi
if ! "$CXX" -std=c++20 -O1 -Icore -Isrc -I"$dir" -Wall -Wno-unknown-pragmas -Wno-unused-function \
        tests/emulate_decode.cpp -o "$dir/emulate_decode" -lpthread 2>"$dir/build.log"; then
    echo "FAIL emulated decode kernels: the emulation does not build: $(grep -m1 error "$dir/build.log")"
    exit 0
fi
"$dir/emulate_decode"
