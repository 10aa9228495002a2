# figures/gpu_bwd_speed.gp -- backward TFLOP/s (fa_flops: 2.5 times the
# forward's 4 B H N^2 d, halved under the causal mask) of every path measured
# on the H200, by sequence length: one panel per head dimension, the top row
# without a mask, the bottom row causal, bf16 (fp16 rows, where the file has
# them, are left out). Input: data/gpu/bench_bwd.csv (scripts/gpu/bench_gpu.py),
# columns
#   gpu,driver,cuda,torch,cudnn,commit,date,command,impl,pass,dtype,causal,
#   B,H,N,d,median_ms,tflops,repeats,max_abs_diff,note
#   ,graph_ms,how_called
# with '#' provenance lines on top; only rows with pass "bwd" (the backward
# alone, not fwdbwd) are drawn, at TFLOP/s on the graph clock: tflops x
# median_ms / graph_ms (the call replayed from a CUDA graph, host overhead
# out for every path alike); a row without a graph time is left out, and a
# path with no such row in a panel is not plotted there at all (an empty
# series would be a legend entry with nothing behind it, and a gnuplot
# warning: in the measured file, torch_materialized causal at d = 128 has
# no graph time at any N, its graph capture out of memory or the N skipped).
# paper/gen/paper_figures.sh skips this figure when the file is absent; a
# panel with no rows says so instead of failing.
if (!exists("csv")) csv = "data/gpu/bench_bwd.csv"
W = 6.5
Hgt = 6.2
load "figures/style.gp"
set termoption noenhanced
# Python's csv module reads the file (the command column holds commas inside
# quotes): the head dimensions present, and the paths of one panel that
# have a row to draw (a graph time).
py = "import csv,sys\n" . \
     "rows=[r for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith('#'))\n" . \
     "      if r.get('pass') in ('bwd','backward') and r.get('dtype')=='bf16']\n" . \
     "c=lambda r: 1 if r.get('causal') in ('1','True','true') else 0\n" . \
     "def g(r):\n try: return float(r.get('graph_ms') or 0)>0\n except ValueError: return False\n" . \
     "if len(sys.argv)==2: print(' '.join(sorted({r['d'] for r in rows}, key=int)))\n" . \
     "else: print(' '.join(sorted({r['impl'] for r in rows if c(r)==int(sys.argv[2]) and r['d']==sys.argv[3] and g(r)})))"
dims = system(sprintf("python3 -c \"%s\" '%s'", py, csv))
impls(c, dd) = system(sprintf("python3 -c \"%s\" '%s' %d %s", py, csv, c, dd))
# one colour and point shape per path in every panel, and the same as in the
# forward figures: impl_lt of figures/style.gp (thirteen paths: the eight
# colours of line types 1-8 alone repeated, v0's beside v4 det's)
causal(s) = (s eq "1" || s eq "True" || s eq "true") ? 1 : 0
set logscale x 2
set logscale y 10
set xrange [362:23170]
set xtics 512, 4, 8192
set mxtics 2
set yrange [1:1000]
# one legend for all four panels, below them at the text's size, so that no
# panel's lines run under it (the first panel, which has every path, draws it)
# (four rows: in three, the fifth column ran past the box and the page)
set key at screen 0.5, screen 0.01 center bottom maxrows 5 width 1 font ",8" spacing 1.1 box opaque
set ylabel "backward throughput (TFLOP/s)"
if (words(dims) == 0) { dims = "64" }
set multiplot layout 2, words(dims) margins screen 0.10, 0.98, 0.25, 0.94 spacing screen 0.06, 0.10
first = 1
do for [c = 0:1] {
    do for [dd in dims] {
        set title sprintf("d = %s, bf16, %s", dd, c ? "causal" : "no mask")
        set xlabel (c ? "sequence length N (tokens)" : "")
        set ylabel (dd eq word(dims, 1) ? "backward throughput (TFLOP/s)" : "")
        these = impls(c, dd)
        if (!first) { unset key }
        first = 0
        if (words(these) == 0) {
            set label 1 "not measured" at graph 0.5, 0.5 center
            plot 0.01 notitle
            unset label 1
        } else {
            plot for [k = 1:words(these)] csv using \
                 (((strcol(10) eq "bwd" || strcol(10) eq "backward") && strcol(11) eq "bf16" && causal(strcol(12)) == c && \
                   $16 == dd + 0 && strcol(9) eq word(these, k)) ? $15 : NaN):(column(22) > 0 ? $18 * $17 / $22 : NaN) \
                 smooth unique with linespoints pt impl_lt(word(these, k)) ps 0.9 \
                 lc rgb impl_lc(word(these, k)) title word(these, k)
        }
    }
}
unset multiplot
