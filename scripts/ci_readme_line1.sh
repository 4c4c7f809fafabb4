#!/usr/bin/env bash
# README line 1, as a new user runs it: in a fresh venv that holds only what line 1 installs.
#
# The main suite runs in an environment with every extra, so it cannot see line 1 break when a
# module `turngym train` imports needs an extra (it did: uvicorn). Here line 1 runs verbatim (read
# from the README, as .ci/run reads line 2) in a copy of this checkout (its run directory lands in
# the copy, never in a developer's runs/), on a cold model cache of its own (a fresh machine's), or
# on TURNGYM_LINE1_CACHE: .ci/run passes the cache the suite then runs on, a newcomer's order.
#
#   scripts/ci_readme_line1.sh               # copy the checkout, make the venv, run line 1
#   scripts/ci_readme_line1.sh --setup-only  # copy the checkout and pre-install line 1's packages
#   scripts/ci_readme_line1.sh --run-only    # run line 1 in what --setup-only made (.ci/run
#                                            # sets up while the main suite runs, then runs this)
#   TURNGYM_LINE1_DIR=/path ...              # scratch directory (default /tmp/turngym-ci-line1)
#   TURNGYM_LINE1_CACHE=/path ...            # the model cache line 1 writes (default: a cold one in the scratch directory)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

DIR="${TURNGYM_LINE1_DIR:-/tmp/turngym-ci-line1}"
PY="${TURNGYM_LINE1_PYTHON:-python3}"
# The first ```bash block of the README, first line (.ci/run takes its second).
LINE1="$(awk '/^```bash/{b++; next} /^```/{if(b==1) exit} b==1' README.md | sed -n 1p)"
case "$LINE1" in
  *"pip install"*turngym*) ;;
  *) echo "README line 1 is not an install-and-run line: '$LINE1'" >&2; exit 1 ;;
esac

MODE="${1:-}"
t0=$SECONDS
if [ "$MODE" = "--run-only" ]; then
  [ -f "$DIR/.setup-done" ] || { echo "no README line 1 venv at $DIR: run $0 --setup-only first" >&2; exit 1; }
else  # always from scratch: a venv left by an earlier run holds an older copy of the checkout
  rm -rf "$DIR"
  mkdir -p "$DIR/src"
  # this checkout's files (tracked and new, not ignored): what a clone holds, uncommitted edits included
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$DIR/src"
  "$PY" -m venv "$DIR/venv"
  # the packages line 1 installs, ahead of time (line 1 below installs again: then a no-op for them)
  (cd "$DIR/src" && "$DIR/venv/bin/pip" install -q -e ".[train]")
  touch "$DIR/.setup-done"
  echo "README line 1 venv ready in $((SECONDS - t0)) s: $("$DIR/venv/bin/pip" list 2>/dev/null | tail -n +3 | wc -l) packages"
fi
[ "$MODE" = "--setup-only" ] && exit 0

echo "+ $LINE1    (in a fresh venv: $DIR/venv)"
t1=$SECONDS
CACHE="${TURNGYM_LINE1_CACHE:-$DIR/cache}"
mkdir -p "$CACHE"
set +e
(cd "$DIR/src" && PATH="$DIR/venv/bin:$PATH" VIRTUAL_ENV="$DIR/venv" TURNGYM_CACHE="$CACHE" \
  timeout 1200 bash -c "$LINE1") 2>&1 | tee "$DIR/line1.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "README line 1 failed (exit $rc) in a fresh venv" >&2; exit 1; }
grep -q "success rate after RL:" "$DIR/line1.log" || { echo "README line 1 printed no final success rate" >&2; exit 1; }
echo "README line 1 ran in $((SECONDS - t1)) s in a fresh venv (total $((SECONDS - t0)) s)"
rm -rf "$DIR"
