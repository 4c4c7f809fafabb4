#!/usr/bin/env bash
# verl integration tests in a venv of their own: verl 0.9.1 pins transformers>=5.5.3,<5.11, which the
# main environment (transformers 5.19, needed by the vLLM CPU build) cannot share. The venv is built
# once and reused while its stamp (the pins below and this checkout's pyproject.toml) still matches;
# `--setup-only` builds it and stops.
#
#   scripts/ci_verl.sh               # build/reuse the venv, run tests/integrations (verl tests)
#   scripts/ci_verl.sh --setup-only  # build/reuse the venv only
#   TURNGYM_VERL_VENV=/path ...      # where the venv lives (default /opt/verlenv)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

VENV="${TURNGYM_VERL_VENV:-/opt/verlenv}"
PY="${TURNGYM_VERL_PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
VERL_PIN="verl==0.9.1"
EXTRAS="verl,server,dev"
STAMP="$TORCH_PIN $VERL_PIN [$EXTRAS] $(sha256sum pyproject.toml | cut -c1-16) $("$PY" -c 'import sys; print(sys.version.split()[0])')"

t0=$SECONDS
if [ -f "$VENV/.turngym-stamp" ] && [ "$(cat "$VENV/.turngym-stamp")" = "$STAMP" ] \
    && "$VENV/bin/python" -c 'import verl, turngym' 2>/dev/null; then
  # Reused: the package is an editable install, so only its path must still point here.
  "$VENV/bin/pip" install -q --no-deps -e . >/dev/null
  echo "verl venv reused ($VENV) in $((SECONDS - t0)) s"
else
  echo "building the verl venv at $VENV (stamp: $STAMP)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "$TORCH_PIN"
  "$VENV/bin/pip" install -q "$TORCH_PIN" -e ".[$EXTRAS]"
  "$VENV/bin/python" -c 'import verl, turngym, transformers; print("verl", verl.__version__, "transformers", transformers.__version__)'
  echo "$STAMP" > "$VENV/.turngym-stamp"
  echo "verl venv built in $((SECONDS - t0)) s"
fi
[ "${1:-}" = "--setup-only" ] && exit 0

export TURNGYM_REQUIRE_VERL=1
t1=$SECONDS
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/integrations -k "verl or agree"
echo "verl tests ran in $((SECONDS - t1)) s (total $((SECONDS - t0)) s)"
