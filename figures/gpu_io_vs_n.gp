# figures/gpu_io_vs_n.gp -- bytes through DRAM and requested from L2 on the H200
# (Nsight Compute), beside the IO model's count, for each forward path, by
# sequence length (fp16, d = 64, B N = 16384 tokens, H = 32). Input:
# build/paper/gpu_io_sweep.dat, which paper/gen/paper_gpu.py writes from the
# sweep rows of data/gpu/io_fwd.csv.
if (!exists("dat")) dat = "build/paper/gpu_io_sweep.dat"
W = 6.5
Hgt = 4.0
load "figures/style.gp"
set datafile separator whitespace
set datafile missing NaN
set termoption noenhanced
impls = system("awk '!/^#/ {gsub(/\"/, \"\", $1); print $1}' " . dat . " | sort -u | tr '\\n' ' '")
# the paths the IO model covers (column 5 not nan): the SDPA kernels have no
# model line, and plotting an all-NaN series would only warn
models = system("awk '!/^#/ && $5 != \"nan\" {gsub(/\"/, \"\", $1); print $1}' " . dat . " | sort -u | tr '\\n' ' '")
# a path's colour and shape: impl_lc and impl_lt of figures/style.gp (its
# model line the same colour)
# their dashed model lines, as plot clauses expanded at the end of each plot
# (none at all when no path has a model: an empty iteration still warns),
# each a dash pattern of its own, so that the legend tells them apart in
# grey too, and each in the legend as "IO model, vN" (left panel only)
model_dts = "(8,4) (3,3) (8,3,2,3) (12,3,2,3,2,3) (2,2,8,2)"
model_curves = ""
model_keyed = ""
j = 0
do for [m in models] {
    j = j + 1
    mdt = word(model_dts, (j - 1) % words(model_dts) + 1)
    mv = (strstrt(m, "ours_v") == 1 ? m[6:7] : m)
    clause = sprintf(", dat using ((strcol(1) eq '%s') ? $2 : NaN):5 smooth unique with lines dt %s lc rgb '%s'", \
                     m, mdt, impl_lc(m))
    model_curves = model_curves . clause . " notitle"
    model_keyed = model_keyed . clause . sprintf(" title 'IO model, %s'", mv)
}
set logscale x 2
set logscale y 10
set xlabel "sequence length N (tokens)"
# one legend for both panels, below them, at the text's size: the left
# panel draws it (it has the compulsory line too), the right one none. Its
# columns are as wide as its longest title: with short titles and five rows
# all fourteen entries fit the page's width (three rows of long ones showed
# six and dropped the rest)
set bmargin 9.5
set key at screen 0.5, screen 0.01 center bottom maxrows 5 width 1 font ",9" spacing 1.1 box opaque
set multiplot layout 1, 2
set ylabel "bytes through DRAM (GB)"
set title "DRAM (points) and IO model (dashed)"
plot for [k=1:words(impls)] dat using ((strcol(1) eq word(impls, k)) ? $2 : NaN):3 \
         smooth unique with linespoints pt impl_lt(word(impls, k)) ps 0.6 lc rgb impl_lc(word(impls, k)) title word(impls, k), \
     dat using 2:6 smooth unique with lines lw 2 lc rgb "#000000" dt 3 title "compulsory bytes" \
     @model_keyed
# L2 bytes the SMs requested (column 7) where the data has them, else all L2 traffic
l2(c7, c4) = (c7 == c7 ? c7 : c4)
unset key
set ylabel "bytes requested from L2 (GB)"
set title "L2 (points) and IO model (dashed)"
plot for [k=1:words(impls)] dat using ((strcol(1) eq word(impls, k)) ? $2 : NaN):(l2($7, $4)) \
         smooth unique with linespoints pt impl_lt(word(impls, k)) ps 0.6 lc rgb impl_lc(word(impls, k)) title word(impls, k) \
     @model_curves
unset multiplot
