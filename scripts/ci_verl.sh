#!/usr/bin/env bash
# verl integration tests against the real verl, in a thin venv layered over the main environment.
#
# verl 0.9.1 pins transformers>=5.5.3,<5.11 (and with it huggingface-hub<2, tokenizers<=0.23) while
# the main environment has transformers 5.19. Instead of a second full environment (torch, ray,
# pandas... reinstalled), the venv is layered over the environment of the interpreter that runs
# the main suite (scripts/layered_venv.py: a .pth names that environment's site directories, so
# it works when that interpreter is itself a venv, where --system-site-packages would see only
# the base interpreter's packages): it reuses everything there and installs, without dependency
# resolution, only verl and the packages whose versions must differ or that the main environment
# lacks (the list below). The venv's site-packages come first on sys.path, so its transformers
# shadows the main one; nothing is installed into the main environment (the setup checks both).
#
# The venv is reused while its stamp (the pinned list, this interpreter and its torch) matches;
# edits to pyproject.toml do not rebuild it (turngym itself is imported from this checkout).
#
#   scripts/ci_verl.sh               # build/reuse the venv, run the verl tests
#   scripts/ci_verl.sh --setup-only  # build/reuse the venv only
#   TURNGYM_VERL_VENV=/path ...      # where the venv lives (default /opt/verlenv)
#   TURNGYM_VERL_PYTHON=python3 ...  # the main environment's interpreter (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

VENV="${TURNGYM_VERL_VENV:-/opt/verlenv}"
PY="${TURNGYM_VERL_PYTHON:-python3}"
# verl and what it needs that the main environment lacks or holds at another version. Installed
# with --no-deps: everything else (torch, ray, accelerate, peft, datasets, pandas, pyarrow, wandb,
# tensorboard, hf-xet, httpx, ...) comes from the main environment.
PINS=(
  verl==0.9.1
  transformers==5.10.4 tokenizers==0.22.2 huggingface-hub==1.33.0
  tensordict==0.10.0 pyvers==0.1.0 importlib-metadata==10.2.0 zipp==4.1.2 lazy-importer==0.1.0
  torchdata==0.11.0 codetiming==1.4.0 pylatexenc==2.11 pybind11==3.1.0
  hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3
)
# (package metadata, not imports: the reuse check stays well under a second)
MAIN_INFO="$("$PY" -c 'import sys, importlib.metadata as m; print(sys.executable, sys.version.split()[0], "torch", m.version("torch"))')"
STAMP="$(printf '%s\n' "${PINS[@]}" "$MAIN_INFO" | sha256sum | cut -c1-16)"

venv_ok() {
  [ -f "$VENV/.turngym-stamp" ] && [ "$(cat "$VENV/.turngym-stamp")" = "$STAMP" ] \
    && "$VENV/bin/python" -c 'import importlib.metadata as m, importlib.util as u
assert all(u.find_spec(p) for p in ("verl", "turngym", "transformers")) and m.version("verl") == "0.9.1"' 2>/dev/null
}

t0=$SECONDS
if venv_ok; then
  echo "verl venv reused ($VENV) in $((SECONDS - t0)) s"
else
  echo "building the verl venv at $VENV over $MAIN_INFO"
  main_before="$("$PY" -m pip freeze 2>/dev/null | sha256sum)"
  rm -rf "$VENV"
  "$PY" scripts/layered_venv.py "$VENV" >/dev/null
  # the main environment's pip, pointed at the venv's interpreter: installs land in the venv
  "$PY" -m pip --python "$VENV/bin/python" install -q --no-deps "${PINS[@]}"
  "$VENV/bin/python" - <<'EOF'
import sys, transformers, verl, torch, turngym
site = next(p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages"))
assert transformers.__file__.startswith(site), f"the venv's transformers must shadow the main one: {transformers.__file__}"
assert transformers.__version__ < "5.11", transformers.__version__
assert not torch.__file__.startswith(sys.prefix), "torch must come from the main environment"
print("verl", verl.__version__, "transformers", transformers.__version__, "torch", torch.__version__, "(main env)")
EOF
  [ "$main_before" = "$("$PY" -m pip freeze 2>/dev/null | sha256sum)" ] || { echo "the main environment changed" >&2; exit 1; }
  echo "$STAMP" > "$VENV/.turngym-stamp"
  echo "verl venv built in $((SECONDS - t0)) s"
fi
[ "${1:-}" = "--setup-only" ] && exit 0

export TURNGYM_REQUIRE_VERL=1
t1=$SECONDS
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=5 tests/integrations/test_verl.py tests/integrations/test_agree.py
echo "verl tests ran in $((SECONDS - t1)) s (total $((SECONDS - t0)) s)"
