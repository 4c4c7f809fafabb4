"""Published MCP servers from npm: where a pinned package lives, and installing it there.

A node server runs in the sandbox from a read-only bind of its install (``node_modules``): the
package is installed once, outside any episode, into ``$TURNGYM_CACHE/mcp/npm/NAME@VERSION``
(``~/.cache/turngym`` by default) -- never by the env at reset, and never with the agent's input.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from turngym.core.errors import ConfigError

__all__ = ["npm_package_dir", "npm_entry", "npm_install"]


def npm_package_dir(package: str, version: str) -> Path:
    """The install prefix of ``package@version`` (``node_modules`` is under it)."""
    root = Path(os.environ.get("TURNGYM_CACHE", Path.home() / ".cache" / "turngym")) / "mcp" / "npm"
    return root / f"{package.replace('/', '+')}@{version}"


def npm_entry(package: str, version: str, script: str) -> Path:
    """The path of ``script`` inside the installed package (e.g. ``dist/index.js``)."""
    return npm_package_dir(package, version) / "node_modules" / package / script


def npm_install(package: str, version: str, *, timeout_s: float = 600.0) -> Path:
    """Install ``package@version`` (exact pin, no scripts run) into :func:`npm_package_dir`; the prefix.

    Run it from a setup step (``python -m turngym.envs.mcp.memory_env --install``), not in an episode.
    """
    npm = shutil.which("npm")
    if npm is None:
        raise ConfigError("npm is not installed (apt-get install -y nodejs npm)")
    prefix = npm_package_dir(package, version)
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--ignore-scripts",
                    "--save-exact", f"{package}@{version}"], check=True, timeout=timeout_s,
                   stdout=subprocess.DEVNULL)
    return prefix
