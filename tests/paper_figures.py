#!/usr/bin/env python3
"""tests/paper_figures.py -- every figure plots the rows its data file has, no others.

    python3 tests/paper_figures.py [build/figures/MANIFEST]

Each figure drawn in this build (MANIFEST: NAME, script, data file) is drawn
again with term = "table" (figures/style.gp then writes every plotted point
as text instead of a picture), twice: once as it stands, and once with
every "smooth unique" taken out. Without the smoothing gnuplot plots each
selected row as it is; with it, rows that share an x are averaged into one
point. So the figure shows data rows exactly when, curve by curve, the two
drawings have the same points and no x occurs twice with different y's:
a filter that lets two runs through (causal and non-causal rows at the same
N) fails here, whatever the figure.

Then the forward-speed figure is re-derived from data/gpu/bench_fwd.csv
itself, not from the .dat file paper/gen/paper_gpu.py writes for it: in
each panel (d) each implementation's curve is its bf16, non-causal rows,
(N, TFLOP/s), as the caption says: TFLOP/s on the time of a call replayed
from a CUDA graph (tflops x median_ms / graph_ms) where the file has the
graph_ms column, a row without a graph time left out.

Last, each figure is drawn as the build draws it (pdf and svg, with the
data variable its script names, as paper/gen/paper_figures.sh does) and
must draw without a word from gnuplot on stderr: a warning such as
"Skipping data file with no valid points" (a curve in the legend with
nothing behind it) scrolls past in `make paper` and is a figure bug.

The forward traffic figures (gpu_fig2, gpu_io_vs_n) name forward paths
only: no deterministic row and no ours_vN_* whose N has no forward in
core/versions.def (the profiler runs version 2's forward under such a
name).

Also, from the scripts themselves (figures/*.gp) and the chapters that
include them: every legend stands outside the data -- each `set key` says
where (at screen, below, above, outside, a margin) or turns it off, none is
left at gnuplot's place inside the plot (`set key top left`, `at graph`) --
and no text is smaller than 7 pt at print size: each font a script sets
(",N", else the terminal's 9 pt) times pdfcairo's factor from nominal size
to points (96/72 times the terminal's fontscale: 0.67 at gnuplot's default
0.5) times the scale at which its chapter includes the figure ({width=P%}
of the text width, over the script's W); and, where the figure is drawn,
every text size in its PDF times that scale (sub- and superscripts too).

And every legend's entries can be told apart printed in grey: in each
panel of each figure drawn (its SVG, build/figures/NAME.svg), no two
entries of a legend look the same without their colours -- lines differ in
dash pattern or point shape, bars in fill pattern or in grey level.

Prints PASS/FAIL/SKIP lines (tests/run.sh protocol).
"""
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def table(script_text, data, workdir, tag):
    """Run a figure script with term = "table"; return its curves, a list of
    (title, [(x, y), ...]) in plot order, undefined points dropped."""
    gp = os.path.join(workdir, tag + ".gp")
    out = os.path.join(workdir, tag + ".tab")
    with open(gp, "w") as f:
        f.write(script_text)
    cmd = ["gnuplot", "-e", f"term='table'; out='{out}'; csv='{data}'; dat='{data}'", gp]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"gnuplot failed: {r.stderr.strip()[:300]}")
    curves = []
    with open(out) as f:
        for line in f:
            if line.startswith("# Curve title:"):
                if curves:
                    curves[-1][0] = line.split(":", 1)[1].strip().strip('"')
            elif re.match(r"# Curve \d+ of \d+", line):
                curves.append(["", []])
            elif line.strip() and not line.startswith("#") and curves:
                parts = line.split()
                if len(parts) >= 3 and parts[-1] in ("i", "o"):
                    try:
                        x, y = float(parts[0]), float(parts[1])
                    except ValueError:
                        continue
                    if math.isfinite(x) and math.isfinite(y):
                        curves[-1][1].append((x, y))
    return curves


def as_table(text):
    """The script with every axis format replaced by twelve significant
    digits, so that the table holds the values, not the tick labels."""
    text = re.sub(r"(?m)^(\s*)set format [^\n]*$", r"\1", text)
    return text.replace('load "figures/style.gp"',
                        'load "figures/style.gp"\nset format x "%.12g"; set format y "%.12g"', 1)


def close(a, b):
    return abs(a - b) <= 1e-5 * max(abs(a), abs(b), 1e-300)


def check_rows(name, script, data, workdir):
    """None when the figure's points are its rows, else why not."""
    text = as_table(open(os.path.join(ROOT, script)).read())
    smooth = table(text, data, workdir, name + "_as_drawn")
    raw = table(text.replace("smooth unique", ""), data, workdir, name + "_rows")
    if len(smooth) != len(raw):
        return f"{len(smooth)} curves as drawn, {len(raw)} without smoothing"
    if not any(pts for _, pts in smooth):
        return "plots no point at all"
    for (title, spts), (_, rpts) in zip(smooth, raw):
        key = lambda p: (float(f"{p[0]:.9g}"), float(f"{p[1]:.9g}"))
        got, want = sorted(set(map(key, spts))), sorted(set(map(key, rpts)))
        if got == want:
            continue
        by_x = {}
        for x, y in want:
            by_x.setdefault(x, []).append(y)
        for x, ys in sorted(by_x.items()):
            if len(ys) > 1:
                return (f"curve '{title}' takes {len(ys)} rows at x = {x:g} "
                        f"(y = {', '.join(f'{y:g}' for y in ys)}) and draws their average")
        return f"curve '{title}': the plotted points are not the data's rows"
    return None


def speed_from_csv(rel="data/gpu/bench_fwd.csv"):
    """{(d, impl): sorted [(N, TFLOP/s)]} of bench_fwd.csv's bf16, non-causal
    forward rows: what figure gpu_speed's caption says it shows."""
    with open(os.path.join(ROOT, rel)) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    want = {}
    for r in rows:
        if r.get("pass", "fwd") != "fwd" or r.get("dtype") != "bf16" or r.get("causal") != "0":
            continue
        if not r.get("tflops"):
            continue
        tf = float(r["tflops"])
        if "graph_ms" in r:
            if not r["graph_ms"]:
                continue
            tf *= float(r["median_ms"]) / float(r["graph_ms"])
        want.setdefault((int(r["d"]), r["impl"]), []).append((float(r["N"]), tf))
    return {k: sorted(v) for k, v in want.items()}


def check_speed(workdir):
    script = os.path.join(ROOT, "figures/gpu_speed.gp")
    dat = os.path.join(ROOT, "build/paper/gpu_speed.dat")
    curves = table(as_table(open(script).read()), dat, workdir, "gpu_speed_rederived")
    dims = sorted({d for d, _ in speed_from_csv()})
    want = speed_from_csv()
    # the script plots one panel per d (ascending), one curve per implementation
    impls = sorted({i for _, i in want})
    if len(curves) != len(dims) * len(impls):
        return f"{len(curves)} curves, expected {len(dims)} panels x {len(impls)} implementations"
    k = 0
    for d in dims:
        for impl in impls:
            title, pts = curves[k]
            k += 1
            if title != impl:
                return f"panel d = {d}: curve '{title}' where '{impl}' was expected"
            exp = want.get((d, impl), [])
            got = sorted(pts)
            if len(got) != len(exp) or any(not (close(a[0], b[0]) and close(a[1], b[1]))
                                           for a, b in zip(got, exp)):
                return (f"d = {d}, {impl}: plots {got[:3]}... where bench_fwd.csv's bf16 non-causal "
                        f"rows are {exp[:3]}...")
    return None


def forward_names(root=ROOT):
    """The paths the forward traffic figures name (build/paper/gpu_fig2.dat,
    gpu_io_sweep.dat) that are no forward: a deterministic row (*_det) or
    ours_vN_* with N no forward version of core/versions.def. The profiler
    runs such a row's forward with version 2's kernel, so a figure showing
    it names a kernel version that did not run. None when neither file is
    there (no GPU data)."""
    with open(os.path.join(root, "core", "versions.def")) as f:
        fwd = {int(n) for n in re.findall(r"^FA_ROW\(fwd_v(\d+)\)", f.read(), re.M)}
    seen, bad = False, []
    for name in ("gpu_fig2.dat", "gpu_io_sweep.dat"):
        path = os.path.join(root, "build", "paper", name)
        if not os.path.exists(path):
            continue
        seen = True
        for line in open(path):
            mo = re.match(r'"([^"]+)"', line)
            if not mo:
                continue
            impl = mo.group(1).split(" (")[0]
            v = re.match(r"ours_v(\d+)_", impl)
            if impl.endswith("_det") or (v and int(v.group(1)) not in fwd):
                bad.append(f"{name}: {impl}")
    return sorted(set(bad)) if seen else None


def gnuplot_stderr(name, script, data, workdir):
    """What gnuplot writes on stderr drawing the figure to pdf and to svg,
    as paper/gen/paper_figures.sh runs it; empty when it draws cleanly."""
    text = open(os.path.join(ROOT, script)).read()
    m = re.search(r'^if \(!exists\("([A-Za-z_]+)"\)\) \1 = "', text, re.M)
    var = m.group(1) if m else "csv"
    said = []
    for term in ("pdf", "svg"):
        out = os.path.join(workdir, f"{name}_drawn.{term}")
        r = subprocess.run(["gnuplot", "-e", f"term='{term}'; out='{out}'; {var}='{data}'", script],
                           cwd=ROOT, capture_output=True, text=True)
        said += [f"{term}: {ln}" for ln in r.stderr.splitlines() if ln.strip()]
        if r.returncode != 0:
            said.append(f"{term}: gnuplot exited {r.returncode}")
    return said


# Where a legend may stand: outside every plot. A `set key` without one of
# these (or `set key off`) puts it inside, over the data.
KEY_OUTSIDE = re.compile(r"\b(at\s+screen|below|above|outside|[lrtb]margin|off)\b")
MIN_PT = 7.0


def legends_inside(scripts):
    """['script:line: text'] of each `set key` that leaves the legend inside a plot."""
    bad = []
    for path in scripts:
        with open(path) as f:
            for no, line in enumerate(f, 1):
                code = line.split("#", 1)[0].strip()
                if re.match(r"set\s+key\b", code) and not KEY_OUTSIDE.search(code):
                    bad.append(f"{os.path.relpath(path, ROOT)}:{no}: {code}")
    return bad


def text_width_in(root=ROOT):
    """The PDF's text width in inches: US letter (LaTeX article's default:
    paper/metadata.yaml sets no paper size) less its geometry margins."""
    meta = open(os.path.join(root, "paper/metadata.yaml")).read()
    m = re.search(r"margin=([0-9.]+)(cm|mm|in)", meta)
    margin = float(m.group(1)) / {"cm": 2.54, "mm": 25.4, "in": 1.0}[m.group(2)] if m else 1.0
    return 8.5 - 2 * margin


# pdfcairo lays text out at 96 dpi on a 72 pt page: a font's nominal size N
# prints at N * 96/72 * fontscale points (the text matrix cairo writes for
# font ",10" is 13.33 at fontscale 1, 6.67 at its default 0.5), before
# LaTeX scales the figure to the width its chapter gives it.
PDFCAIRO_PT_PER_NOMINAL = 96 / 72
PDFCAIRO_DEFAULT_FONTSCALE = 0.5


def fontscale(text, default=PDFCAIRO_DEFAULT_FONTSCALE):
    """The pdfcairo fontscale a script sets (`fontscale F` on its terminal
    line or a `set termoption fontscale F`; the last one wins), else default."""
    found = re.findall(r"(?m)^[^#\n]*\bfontscale\s+([0-9.]+)", text)
    return float(found[-1]) if found else default


def pdf_text_sizes(path):
    """The size in points of every run of text drawn in a (cairo) PDF, as
    its content streams give them: the Tf size times the scale of the text
    matrix (Tm) and of the transformations (cm) in effect, sub- and
    superscripts and rotated labels included. Empty when the file holds none."""
    import zlib
    data = open(path, "rb").read()
    sizes = []
    op = re.compile(rb"\s*".join([rb"(-?[0-9.]+)"] * 6) + rb"\s+(cm|Tm)\b|"
                    rb"/[^\s/]+\s+(-?[0-9.]+)\s+Tf\b|\b(q|Q)\b|\b(Tj|TJ)\b")
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            body = zlib.decompress(m.group(1))
        except zlib.error:
            continue
        ctm, stack, tm, tf = 1.0, [], 1.0, 1.0
        for t in op.finditer(body):
            if t.group(7):
                a, b, c, d = (float(t.group(i)) for i in (1, 2, 3, 4))
                det = abs(a * d - b * c) ** 0.5
                if t.group(7) == b"cm":
                    ctm *= det
                else:
                    tm = det
            elif t.group(8):
                tf = abs(float(t.group(8)))
            elif t.group(9) == b"q":
                stack.append(ctm)
            elif t.group(9) == b"Q":
                ctm = stack.pop() if stack else 1.0
            elif t.group(10):
                sizes.append(round(ctm * tm * tf, 3))
    return sizes


def pdf_width_in(path):
    """A PDF's page width in inches (its first MediaBox)."""
    m = re.search(rb"/MediaBox\s*\[\s*(-?[0-9.]+)\s+(-?[0-9.]+)\s+(-?[0-9.]+)",
                  open(path, "rb").read())
    return (float(m.group(3)) - float(m.group(1))) / 72 if m else None


def small_text(root=ROOT, fig_dir=None):
    """['NAME: N pt at print size'] for each figure whose smallest text is under MIN_PT.

    Print size: a font's nominal size (",N", else the terminal's) times the
    terminal's effective factor (96/72 times its fontscale) times the scale
    at which the chapter includes the figure ({width=P%} of the text width,
    over the script's W). Where the figure is drawn (build/figures/NAME.pdf)
    the sizes in the PDF itself, times the inclusion scale over its page
    width, count too: they hold what the scripts do not say (enhanced
    text's sub- and superscripts at 0.8 of their size)."""
    fig_dir = fig_dir or os.path.join(root, "build/figures")
    widths = {}
    for ch in sorted(os.listdir(os.path.join(root, "chapters"))):
        if ch.endswith(".md"):
            text = open(os.path.join(root, "chapters", ch)).read()
            for m in re.finditer(r"\]\(build/figures/(\w+)\)(\{[^}]*\})?", text):
                w = re.search(r"width=([0-9.]+)%", m.group(2) or "")
                widths[m.group(1)] = float(w.group(1)) / 100 if w else None
    style = open(os.path.join(root, "figures/style.gp")).read()
    base = float(re.search(r'pdfcairo[^\n]*font "[^",]*,([0-9.]+)"', style).group(1))
    w_default = float(re.search(r'if \(!exists\("W"\)\) W = ([0-9.]+)', style).group(1))
    style_scale = fontscale(style)
    tw = text_width_in(root)
    bad = []
    for name, frac in sorted(widths.items()):
        gp = os.path.join(root, "figures", name + ".gp")
        if not os.path.exists(gp):
            continue
        text = open(gp).read()
        m = re.search(r"(?m)^W = ([0-9.]+)", text)
        w = float(m.group(1)) if m else w_default
        # without a width LaTeX draws it at its own size, shrunk to the text width
        scale = (frac * tw / w) if frac else min(1.0, tw / w)
        factor = PDFCAIRO_PT_PER_NOMINAL * fontscale(text, style_scale)
        sizes = [base] + [float(x) for x in re.findall(r'font\s+"[^",]*,([0-9.]+)"', text)]
        printed = min(sizes) * factor * scale
        why = (f"{min(sizes):g} pt nominal x {factor:.3g} (pdfcairo) drawn {w:g} in wide at "
               f"{(frac or 1) * 100:.0f}% of {tw:.2f} in = {printed:.1f} pt")
        pdf = os.path.join(fig_dir, name + ".pdf")
        drawn = pdf_text_sizes(pdf) if os.path.exists(pdf) else []
        pw = pdf_width_in(pdf) if drawn else None
        if drawn and pw:
            pscale = (frac * tw / pw) if frac else min(1.0, tw / pw)
            if min(drawn) * pscale < printed:
                printed = min(drawn) * pscale
                why = (f"{min(drawn):.2f} pt text in {os.path.relpath(pdf, root)} ({pw:g} in wide) at "
                       f"{(frac or 1) * 100:.0f}% of {tw:.2f} in = {printed:.1f} pt")
        if printed < MIN_PT:
            bad.append(f"{name}: {why}")
    return bad


SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"
GREY_APART = 0.15   # two fills closer than this in grey level look the same


def grey(colour, opacity=1.0):
    """The grey level (0 black, 1 white) of an SVG colour printed over white."""
    m = re.match(r"rgb\(\s*(\d+),\s*(\d+),\s*(\d+)\)", colour)
    if m:
        r, g, b = (int(x) for x in m.groups())
    elif re.match(r"#[0-9a-fA-F]{6}$", colour):
        r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    else:
        r = g = b = {"black": 0, "white": 255}.get(colour, 128)
    level = (0.299 * r + 0.587 * g + 0.114 * b) / 255
    return opacity * level + (1 - opacity)


def legend_looks(svg_path):
    """{panel: [(title, look)]}: each legend entry of a gnuplot SVG (a plot's
    group that holds text: its title and its sample), per panel of a
    multiplot (gnuplot_plot_<n><panel letter>). look is ("box", fill) for a
    bar's sample, fill a grey level or a pattern's drawing, or ("line",
    dash pattern, point shapes) for a line's or points' sample."""
    root = ET.parse(svg_path).getroot()
    patterns = {pat.get("id"): " ".join(p.get("d", "") for p in pat.iter(SVG + "path"))
                for pat in root.iter(SVG + "pattern")}
    panels = {}
    for g in root.iter(SVG + "g"):
        m = re.match(r"gnuplot_plot_\d+([a-z]*)$", g.get("id") or "")
        texts = list(g.iter(SVG + "text")) if m else []
        if not texts:
            continue
        title = " ".join("".join(t.itertext()).strip() for t in texts).strip()
        fills = [(poly.get("fill", ""), float(poly.get("fill-opacity", "1")))
                 for poly in g.iter(SVG + "polygon")]
        paths = list(g.iter(SVG + "path"))
        if fills or any(p.get("d", "").rstrip().endswith("Z") for p in paths):
            fill = "empty"
            if fills:
                colour, opacity = fills[0]
                pm = re.match(r"url\(#(\w+)\)", colour)
                fill = ("pattern " + patterns.get(pm.group(1), pm.group(1))) if pm else grey(colour, opacity)
            look = ("box", fill)
        else:
            dashes = set()
            for p in paths:
                d = p.get("stroke-dasharray")
                if d:
                    v = [float(x) for x in d.split(",")]
                    dashes.add(tuple(round(x / sum(v), 2) for x in v))
            shapes = {u.get(XLINK) for u in g.iter(SVG + "use")}
            look = ("line", tuple(sorted(dashes)), tuple(sorted(shapes)))
        panels.setdefault(m.group(1), []).append((title, look))
    return panels


def look_alike(a, b):
    """Whether two legend samples look the same in grey."""
    if a[0] != b[0]:
        return False
    if a[0] == "box":
        fa, fb = a[1], b[1]
        if isinstance(fa, float) and isinstance(fb, float):
            return abs(fa - fb) < GREY_APART
        return fa == fb
    return a == b


def alike_in_grey(svg_path):
    """['"A" and "B"'] for each pair of legend entries of one panel that look
    the same printed in grey."""
    bad = []
    for panel, entries in legend_looks(svg_path).items():
        for i, (ta, la) in enumerate(entries):
            for tb, lb in entries[i + 1:]:
                if look_alike(la, lb):
                    bad.append(f'"{ta}" and "{tb}"')
    return bad


def main(argv):
    manifest = argv[1] if len(argv) > 1 else os.path.join(ROOT, "build/figures/MANIFEST")
    try:
        with open(manifest) as f:
            entries = [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]
    except OSError:
        print(f"FAIL paper: figures plot their rows: no {manifest} (make figures)")
        return 0
    scripts = sorted(os.path.join(ROOT, "figures", f) for f in os.listdir(os.path.join(ROOT, "figures"))
                     if f.endswith(".gp"))
    inside = legends_inside(scripts)
    if inside:
        print(f"FAIL paper: figure legends outside the data: {len(inside)} `set key` inside a plot: "
              + "; ".join(inside[:4]))
    else:
        print(f"PASS paper: figure legends outside the data ({len(scripts)} scripts, every `set key` "
              "at screen, below, above, outside or off)")
    small = small_text()
    if small:
        print(f"FAIL paper: figure text at least {MIN_PT:g} pt in print: " + "; ".join(small[:4]))
    else:
        print(f"PASS paper: figure text at least {MIN_PT:g} pt in print (every font of every "
              "included figure, at the width its chapter gives it)")
    alike = []
    for name, _, _ in entries:
        svg = os.path.join(os.path.dirname(manifest), name + ".svg")
        try:
            pairs = alike_in_grey(svg)
        except (OSError, ET.ParseError) as e:
            pairs = [f"unreadable ({e})"]
        if pairs:
            alike.append(f"{name}: " + ", ".join(pairs[:3]))
    if alike:
        print("FAIL paper: figure series told apart in grey (dash, point shape or fill, "
              "not colour alone): " + "; ".join(alike[:4]))
    else:
        print(f"PASS paper: figure series told apart in grey ({len(entries)} figures: no two "
              "legend entries of a panel differ in colour alone)")
    bad = []
    with tempfile.TemporaryDirectory() as work:
        for name, script, data in entries:
            try:
                why = check_rows(name, script, data, work)
            except RuntimeError as e:
                why = str(e)
            if why:
                bad.append(f"{name} ({script} on {data}): {why}")
        if bad:
            print(f"FAIL paper: figures plot their rows: {'; '.join(bad[:4])}")
        else:
            print(f"PASS paper: figures plot their rows ({len(entries)} figures drawn as tables, "
                  "every point one row of its data, none averaged)")
        if not any(e[0] == "gpu_speed" for e in entries):
            print("SKIP paper: forward-speed figure re-derived: not drawn (no data/gpu/bench_fwd.csv)")
        else:
            why = check_speed(work)
            if why:
                print(f"FAIL paper: forward-speed figure re-derived from bench_fwd.csv: {why}")
            else:
                print("PASS paper: forward-speed figure re-derived from bench_fwd.csv "
                      "(each panel's curves are the bf16, non-causal rows)")
        wrong = forward_names()
        if wrong is None:
            print("SKIP paper: forward traffic figures name forward versions: not drawn (no data/gpu/io_fwd.csv)")
        elif wrong:
            print(f"FAIL paper: forward traffic figures name forward versions: {len(wrong)} paths are "
                  f"no forward of core/versions.def: {'; '.join(wrong[:4])}")
        else:
            print("PASS paper: forward traffic figures name forward versions (no backward-only "
                  "version, no deterministic row, in gpu_fig2.dat and gpu_io_sweep.dat)")
        noisy = []
        for name, script, data in entries:
            said = gnuplot_stderr(name, script, data, work)
            if said:
                noisy.append(f"{name} ({script} on {data}): {said[0]}"
                             + (f" (and {len(said) - 1} more lines)" if len(said) > 1 else ""))
        if noisy:
            print(f"FAIL paper: figures draw without gnuplot warnings: {'; '.join(noisy[:4])}")
        else:
            print(f"PASS paper: figures draw without gnuplot warnings ({len(entries)} figures, "
                  "pdf and svg, nothing on stderr)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
