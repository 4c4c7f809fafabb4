"""scripts/layered_venv.py, the thin venv scripts/ci_verl.sh installs verl into, made from a venv.

A contributor runs ci_verl.sh from their own venv: the thin venv must then see that venv's
packages (and what the venv itself inherits from its base), with its own installs first. Real
venvs, no pip: the probe packages are plain modules written into each site-packages.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "layered_venv.py"


def _python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _purelib(env: Path) -> Path:
    out = subprocess.run([str(_python(env)), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return Path(out)


def test_the_thin_venv_sees_the_outer_venv_its_base_and_its_own_installs_first(tmp_path):
    outer = tmp_path / "outer"  # the contributor's venv, inheriting the base's packages (numpy here)
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(outer)
    outer_site = _purelib(outer)
    (outer_site / "outer_only_probe.py").write_text("WHERE = 'outer'\n")
    (outer_site / "shadow_probe.py").write_text("WHERE = 'outer'\n")
    src = tmp_path / "editable_src"  # an editable install: a .pth in the outer site-packages
    src.mkdir()
    (src / "editable_probe.py").write_text("WHERE = 'editable'\n")
    (outer_site / "editable_probe.pth").write_text(f"{src}\n")

    thin = tmp_path / "thin"
    res = subprocess.run([str(_python(outer)), str(SCRIPT), str(thin)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (_purelib(thin) / "shadow_probe.py").write_text("WHERE = 'thin'\n")  # what ci_verl.sh pins over the main env

    code = ("import sys, outer_only_probe, shadow_probe, editable_probe, numpy\n"
            "print(outer_only_probe.WHERE, shadow_probe.WHERE, editable_probe.WHERE, sys.prefix)")
    res = subprocess.run([str(_python(thin)), "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    where_outer, where_shadow, where_editable, prefix = res.stdout.split()
    assert (where_outer, where_shadow, where_editable) == ("outer", "thin", "editable")
    assert Path(prefix) == thin  # it is its own venv (pip --python installs land in it, not in the outer one)



def test_a_sandbox_started_from_the_thin_venv_imports_the_layered_packages(tmp_path):
    """The sandboxed interpreter runs with ``-S`` (no ``.pth``): the site directories the thin venv's
    ``.pth`` added must reach it through ``PYTHONPATH`` (an MCP server in verl's venv failed to import)."""
    import pytest

    from turngym.sandbox import BubblewrapSandbox, SandboxUnavailable

    try:
        BubblewrapSandbox().close()
    except SandboxUnavailable as exc:
        pytest.skip(f"no bubblewrap: {exc}")
    outer = tmp_path / "outer"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(outer)
    (_purelib(outer) / "outer_only_probe.py").write_text("WHERE = 'outer'\n")
    src = tmp_path / "editable_src"  # an editable install's source tree stays out of the sandbox's path
    src.mkdir()
    (_purelib(outer) / "editable_probe.pth").write_text(f"{src}\n")
    thin = tmp_path / "thin"
    res = subprocess.run([str(_python(outer)), str(SCRIPT), str(thin)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    code = ("import json\nfrom turngym.sandbox import BubblewrapSandbox\nfrom turngym.sandbox.base import PythonRuntime\n"
            "sb = BubblewrapSandbox()\n"
            "res = sb.run_python('import outer_only_probe; print(outer_only_probe.WHERE)')\n"
            "print(json.dumps({'path': PythonRuntime().path, 'out': res.stdout, 'err': res.stderr[-500:]}))\nsb.close()\n")
    res = subprocess.run([str(_python(thin)), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["out"] == "outer\n", got
    assert got["path"][0] == str(_purelib(thin)) and str(_purelib(outer)) in got["path"]
    assert str(src) not in got["path"]
