#!/bin/sh
# tests/fa_suite/fetch.sh -- obtain FlashAttention's own test file at its
# pinned release into third_party/flash-attention/ (ignored by git: it is
# FlashAttention's code, never committed here).
#
#   sh tests/fa_suite/fetch.sh [SOURCE]
#
# SOURCE: a local git repository or mirror of Dao-AILab/flash-attention (a
# work tree or a bare one); without it, $FA_MIRROR, else a clone of
# https://github.com/Dao-AILab/flash-attention at the tag (network). Writes
# third_party/flash-attention/tests/test_flash_attn.py as it is at FA_TAG
# (v2.8.3 unless set) and third_party/flash-attention/PROVENANCE (tag,
# commit, source, sha256), which the suite's log repeats. The GPU machine
# reaches no network: run this beforehand and send the folder along.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TAG=${FA_TAG:-v2.8.3}
FILE=tests/test_flash_attn.py
DEST=$ROOT/third_party/flash-attention
SRC=${1:-${FA_MIRROR:-}}
tmp=
cleanup() { [ -n "$tmp" ] && rm -rf "$tmp"; return 0; }
trap cleanup EXIT
if [ -z "$SRC" ]; then
    tmp=$(mktemp -d)
    SRC=https://github.com/Dao-AILab/flash-attention
    git clone --quiet --bare --filter=blob:none --branch "$TAG" "$SRC" "$tmp/repo" 2>/dev/null ||
        git clone --quiet --bare --branch "$TAG" "$SRC" "$tmp/repo" ||
        { echo "fetch.sh: cannot clone $SRC at $TAG (no network? give a local mirror: sh $0 PATH)" >&2; exit 1; }
    GIT_DIR=$tmp/repo
elif [ -d "$SRC/.git" ]; then
    GIT_DIR=$SRC/.git
elif [ -d "$SRC" ] && git --git-dir="$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    GIT_DIR=$SRC
else
    echo "fetch.sh: $SRC is not a git repository of flash-attention" >&2
    exit 1
fi
export GIT_DIR
commit=$(git rev-parse --verify --quiet "$TAG^{commit}") ||
    { echo "fetch.sh: $SRC has no tag $TAG" >&2; exit 1; }
mkdir -p "$DEST/tests"
git show "$commit:$FILE" > "$DEST/$FILE.tmp"
mv "$DEST/$FILE.tmp" "$DEST/$FILE"
sum=$(sha256sum "$DEST/$FILE" | cut -d' ' -f1)
case $SRC in http*) where=$SRC ;; *) where="a local mirror" ;; esac
printf 'repository Dao-AILab/flash-attention\ntag %s\ncommit %s\nfile %s\nsha256 %s\nsource %s\n' \
    "$TAG" "$commit" "$FILE" "$sum" "$where" > "$DEST/PROVENANCE"
echo "fetch.sh: $DEST/$FILE ($TAG, commit $commit, sha256 $sum)"
