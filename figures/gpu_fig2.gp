# figures/gpu_fig2.gp -- the H200 version of the FlashAttention paper's
# Figure 2 (left): DRAM bytes, L2 bytes (requested by the SMs, and all),
# the IO model's count and time of each attention path at
# B = 64, H = 16, N = 1024, d = 64, forward. Input: build/paper/gpu_fig2.dat,
# which paper/gen/paper_gpu.py writes from data/gpu/io_fwd.csv.
if (!exists("dat")) dat = "build/paper/gpu_fig2.dat"
W = 6.5
Hgt = 3.8
load "figures/style.gp"
set datafile separator whitespace
set multiplot layout 1, 2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
# the path names upright, one per group: slanted, neighbours overlapped
set xtics rotate by 90 right font ",8" nomirror
set termoption noenhanced
set logscale y 10
set ylabel "bytes moved (GB, log scale)"
set yrange [0.1:*]
# one legend above both panels, outside the bars; each byte count a fill of
# its own (solid dark, cross-hatched, solid light, empty) so that the four
# bars of a path part in grey too; the time panel's one series needs none
set tmargin 3.5
set key at screen 0.5, screen 0.995 center top horizontal maxcols 4 font ",9" samplen 2 box opaque
plot dat using 2:xtic(1) fs solid 0.9 border -1 lc rgb c_tiled_f title "DRAM read + write", \
     dat using 6 fs pattern 2 border -1 lc rgb "#1b7837" title "L2, requested by the SMs", \
     dat using 3 fs solid 0.45 border -1 lc rgb c_tiled_b title "L2, all traffic", \
     dat using 4 fs empty border -1 lc rgb "#000000" title "IO model"
set ylabel "forward time (ms, log scale)"
set yrange [0.1:*]
unset key
plot dat using 5:xtic(1) lc rgb c_naive_f title "forward time"
unset multiplot
