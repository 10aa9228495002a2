#!/bin/sh
# scripts/setup.sh [--if-missing] -- install what the tests and the paper need
# beyond a C compiler and make: NumPy for the reference implementations,
# Pandoc + LaTeX + gnuplot for the woven PDF, poppler for checking it. Runs as
# root (or under sudo) on Debian/Ubuntu.
#
#   sh scripts/setup.sh               (make setup) install, whatever is there
#   sh scripts/setup.sh --if-missing  (make test runs this first) do nothing
#                                     when every tool is there; otherwise say
#                                     what is missing and install it, or stop
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

if [ "${1-}" = "--if-missing" ]; then
    need=$(missing)
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
python3 -c "import numpy; print('setup: numpy', numpy.__version__)"
still=$(missing)
if [ -n "$still" ]; then
    echo "setup: still missing after the install: $still" >&2
    exit 1
fi
