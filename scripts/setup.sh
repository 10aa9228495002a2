#!/bin/sh
# The one set-up command (README: `make setup`). Installs what the tests and the
# paper need beyond a C compiler and make: NumPy for the reference
# implementations, Pandoc + LaTeX + gnuplot for the woven PDF, poppler for
# checking it. Runs as root (or under sudo) on Debian/Ubuntu.
set -eu
# python3-numpy serves Debian's own python3, where pip refuses to install
# (PEP 668); pip below covers a python3 of its own (pyenv, a venv).
APT_PACKAGES="pandoc gnuplot-nox texlive-latex-recommended texlive-latex-extra \
texlive-fonts-recommended lmodern poppler-utils python3-numpy"
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
