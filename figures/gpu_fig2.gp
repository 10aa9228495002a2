# figures/gpu_fig2.gp -- the H200 version of the FlashAttention paper's
# Figure 2 (left): DRAM bytes, L2 bytes (requested by the SMs, and all),
# the IO model's count and time of each attention path at
# B = 64, H = 16, N = 1024, d = 64, forward. Input: build/paper/gpu_fig2.dat,
# which paper/gen/paper_gpu.py writes from data/gpu/io_fwd.csv.
if (!exists("dat")) dat = "build/paper/gpu_fig2.dat"
W = 6.5
Hgt = 6.2
load "figures/style.gp"
set datafile separator whitespace
set multiplot layout 2, 1
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
# the path names level, one per group, every other one a line lower, so
# that the long names of neighbours stand apart (slanted, they ran into the
# axis corner); the dtype, the same on every row ("name (fp16)" in the
# data), is in the caption, so each label is the name alone
set xtics norotate center font ",9" nomirror
name(s) = (strstrt(s, " (") > 0 ? s[1:strstrt(s, " (") - 1] : s)
lab(s) = (int(column(0)) % 2 ? "\n" : "") . name(s)
set bmargin 3.5
set termoption noenhanced
set logscale y 10
set ylabel "bytes moved (GB, log scale)"
set yrange [0.1:*]
# one legend above the panels, outside the bars; each byte count a fill of
# its own (solid dark, cross-hatched, solid light, empty) so that the four
# bars of a path part in grey too; the time panel's one series needs none.
# The IO model is stage 1's or 3's count, which exists for our versions only
set tmargin 3.0
set key at screen 0.5, screen 0.995 center top horizontal maxcols 4 font ",9" samplen 2 box opaque
plot dat using 2:xtic(lab(strcol(1))) fs solid 0.9 border -1 lc rgb c_tiled_f title "DRAM read + write", \
     dat using 6 fs pattern 2 border -1 lc rgb "#1b7837" title "L2, requested by the SMs", \
     dat using 3 fs solid 0.45 border -1 lc rgb c_tiled_b title "L2, all traffic", \
     dat using 4 fs empty border -1 lc rgb "#000000" title "IO model (ours only)"
set tmargin 1.0
set ylabel "forward time (ms, log scale)"
set yrange [0.1:*]
unset key
plot dat using 5:xtic(lab(strcol(1))) lc rgb c_naive_f title "forward time"
unset multiplot
