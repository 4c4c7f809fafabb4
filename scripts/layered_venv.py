"""Make a thin venv layered over the environment of the interpreter that runs this script.

    python scripts/layered_venv.py VENV

The thin venv holds only what is installed into it (scripts/ci_verl.sh: verl and the versions
it pins); everything else comes from the main environment, whose site directories follow the
venv's own on ``sys.path``, so the venv's packages shadow the main ones.

``python -m venv --system-site-packages`` is not that when the main interpreter is itself a venv
(the usual case for a contributor): a venv is always made over the *base* interpreter, so it would
see the base's packages and not the main venv's. Here the venv is made without system site
packages, and a ``.pth`` file in its site-packages adds the main environment's site directories
(``site.getsitepackages()``: a venv's own and, when it inherits them, its base's; then the user
site if enabled) with :func:`site.addsitedir`, which also runs their ``.pth`` files (editable
installs such as turngym's own).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
from pathlib import Path

__all__ = ["PTH_NAME", "main_site_dirs", "make_layered_venv"]

PTH_NAME = "_layered_over_main_env.pth"


def main_site_dirs() -> list[str]:
    """The running interpreter's site directories, in its own ``sys.path`` order."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    order = {p: i for i, p in enumerate(sys.path)}
    present = [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]
    return sorted(present, key=lambda d: order.get(d, len(order)))


def make_layered_venv(path: Path) -> Path:
    """Create the venv at ``path`` (no pip: install with the main pip's ``--python``); return its ``.pth`` file."""
    path = Path(path)
    venv.EnvBuilder(system_site_packages=False, with_pip=False, clear=True, symlinks=os.name != "nt").create(path)
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})" for d in main_site_dirs()]
    pth = Path(purelib) / PTH_NAME
    pth.write_text("# the main environment's site directories, after this venv's own (scripts/layered_venv.py)\n"
                   + "\n".join(lines) + "\n")
    return pth


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} VENV")
    print(make_layered_venv(Path(sys.argv[1])))
