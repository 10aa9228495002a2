#!/bin/sh
# exercises/shipped.sh N OUTDIR -- the files of exercises/exN/ as the project
# ships them (the stubs), written to OUTDIR, whatever a learner has since
# written in exercises/exN/.
#
# `make test` checks that each checker rejects the untouched stubs. Solving
# an exercise in place (as exercises/README.md says to) changes the files in
# exercises/exN/, so the test must not read them there: it reads them from
# git's HEAD instead (`git show HEAD:exercises/exN/FILE`). A file is rewritten
# only when its content differs, so that make does not rebuild a checker for
# nothing. Without git (a tarball), the folder is copied as it is and a note
# on stderr says that the stubs cannot be told from a learner's work.
set -eu
n=$1 out=$2
src=exercises/ex$n
cd "$(dirname "$0")/.."
mkdir -p "$out"
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT

put() {   # put FILE: $tmp becomes $out/FILE unless that already holds the same
    if ! cmp -s "$tmp" "$out/$1"; then cp "$tmp" "$out/$1"; fi
}

if git rev-parse --verify -q HEAD >/dev/null 2>&1 &&
   files=$(git ls-tree --name-only HEAD "$src/") && [ -n "$files" ]; then
    for f in $files; do
        name=${f##*/}
        git show "HEAD:$f" >"$tmp"
        put "$name"
    done
else
    echo "exercises/shipped.sh: no git history here: exercise $n's stubs are taken from $src as they are now" >&2
    for f in "$src"/*; do
        [ -f "$f" ] || continue
        cp "$f" "$tmp"
        put "${f##*/}"
    done
fi
