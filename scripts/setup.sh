#!/bin/sh
# scripts/setup.sh [--if-missing] -- install what the tests and the paper need
# beyond a C compiler and make: NumPy for the reference implementations,
# Pandoc + LaTeX + gnuplot for the woven PDF, poppler for checking it. Runs as
# root (or under sudo) on Debian/Ubuntu.
#
#   sh scripts/setup.sh               (make setup) install, whatever is there,
#                                     then say in three lines what is here now
#                                     (and what this run added), whether the
#                                     GPU programs will build, and what to run
#                                     next
#   sh scripts/setup.sh --if-missing  (make test runs this first) do nothing
#                                     when every tool is there; otherwise say
#                                     what is missing and install it (one line
#                                     after: what was installed), or stop
#                                     with one line saying why it cannot
set -eu
# python3-numpy serves Debian's own python3, where pip refuses to install
# (PEP 668); pip below covers a python3 of its own (pyenv, a venv).
APT_PACKAGES="pandoc gnuplot-nox texlive-latex-recommended texlive-latex-extra \
texlive-fonts-recommended lmodern poppler-utils python3-numpy"

# What is missing, as the names a reader knows; empty when nothing is.
missing() {
    m=""
    for tool in pandoc gnuplot pdflatex pdftotext pdftoppm; do
        command -v "$tool" >/dev/null 2>&1 || m="$m $tool"
    done
    if command -v kpsewhich >/dev/null 2>&1; then
        for sty in fvextra.sty lmodern.sty; do
            [ -n "$(kpsewhich "$sty" 2>/dev/null)" ] || m="$m $sty"
        done
    fi
    python3 -c "import numpy" 2>/dev/null || m="$m numpy"
    echo "${m# }"
}

# What is missing before anything is installed: the summary names what this
# run added.
before=$(missing)
mode=full
if [ "${1-}" = "--if-missing" ]; then
    mode=if-missing
    need=$before
    [ -z "$need" ] && exit 0
    why=""
    if ! command -v apt-get >/dev/null 2>&1; then
        why="there is no apt-get here"
    elif [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
        why="installing needs root, and sudo asks for a password"
    fi
    if [ -n "$why" ]; then
        echo "make test: missing $need, and $why: install them (the list is in scripts/setup.sh) or run 'make setup' as root, then make test again" >&2
        exit 1
    fi
    echo "make test: missing $need; installing them first (scripts/setup.sh: apt-get install $APT_PACKAGES; NumPy by pip where apt's does not serve this python3)"
elif [ $# -gt 0 ]; then
    echo "usage: sh scripts/setup.sh [--if-missing]" >&2
    exit 2
fi

if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $APT_PACKAGES >/dev/null
else
    echo "setup: no apt-get here; install by hand: $APT_PACKAGES" >&2
fi
if ! python3 -c "import numpy" 2>/dev/null; then
    python3 -m pip install -q numpy 2>/dev/null || python3 -m pip install -q --user numpy \
        || { echo "setup: could not install numpy with pip" >&2; exit 1; }
fi
still=$(missing)
if [ -n "$still" ]; then
    echo "setup: still missing after the install: $still" >&2
    exit 1
fi

# The summary: what is here (and what this run added), whether the GPU
# programs will build, and what to run next; a few short lines.
if [ "$mode" = if-missing ]; then
    echo "make test: installed $before; now the tests"
    exit 0
fi
numpy=$(python3 -c "import numpy; print(numpy.__version__)")
echo "setup: done. Checked: pandoc, gnuplot, pdflatex (fvextra, lmodern), pdftotext, pdftoppm, numpy $numpy"
echo "setup: installed by this run: ${before:-nothing (all of it was here already)}"
# (times measured on two cores from a clean build: README.md)
if command -v nvcc >/dev/null 2>&1; then
    echo "setup: nvcc found: the GPU programs build too (make stage4: about 4 minutes on 2 cores)"
    first="about 8 minutes the first time on 2 cores, most of it nvcc"
else
    echo "setup: no nvcc: CPU stages only (the GPU programs are not built; their tests print SKIP)"
    first="about 3 minutes the first time on 2 cores"
fi
echo "setup: next: make stage3 && ./stage3   (then make test: $first)"
