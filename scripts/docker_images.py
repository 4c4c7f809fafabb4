"""Build turngym's images (``docker/*.Dockerfile``) with no network inside the build.

The host fills a wheelhouse (``pip download`` for the image's Python, ``pip wheel`` of this
checkout, and for the bubblewrap image ``apt-get download bubblewrap``); the build context is
staged in a temporary directory holding only what the Dockerfiles copy; every ``RUN`` step
runs with ``--network none`` and ``PIP_ARGS=--no-index``. The base image is a build argument:
``turngym-base:bookworm`` from ``scripts/docker_engine.sh base`` (Debian from the host's apt
mirror, no registry), or a public ``python:3.11-slim`` where a registry is reachable.

    python scripts/docker_images.py                      # sandbox, server, server-bwrap
    python scripts/docker_images.py sandbox --json       # build times as JSON
    python scripts/docker_images.py --if-missing sandbox # skip images already built from the same recipe

Used by the container tests (``tests/docker``) and by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = os.environ.get("TURNGYM_BASE_IMAGE", "turngym-base:bookworm")
#: Dockerfile and tag of each image.
IMAGES: dict[str, tuple[str, str]] = {
    "sandbox": ("docker/sandbox.Dockerfile", "turngym-sandbox:latest"),
    "server": ("docker/server.Dockerfile", "turngym-server:0.1.0"),
    "server-bwrap": ("docker/server-bwrap.Dockerfile", "turngym-server-bwrap:0.1.0"),
}
#: Files each image is made from besides the checkout's code: a change to one rebuilds it under ``--if-missing``.
RECIPES: dict[str, tuple[str, ...]] = {
    "sandbox": ("docker/sandbox.Dockerfile", "docker/requirements-sandbox.txt"),
    "server": ("docker/server.Dockerfile", "docker/requirements-server.txt"),
    "server-bwrap": ("docker/server-bwrap.Dockerfile", "docker/server.Dockerfile", "docker/requirements-server.txt"),
}
_RECIPE_LABEL = "turngym.recipe"
#: The platforms pip may pick wheels for (the images are Debian bookworm, glibc 2.36, x86_64).
_PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_5_x86_64", "linux_x86_64")


def cache_dir() -> Path:
    """Where wheels are kept between runs (the same cache as the base image's)."""
    for d in (os.environ.get("TURNGYM_CACHE"), "/var/cache/turngym", os.path.expanduser("~/.cache/turngym")):
        if not d:
            continue
        try:
            Path(d).mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return Path(d)
    return Path(tempfile.mkdtemp(prefix="turngym-cache-"))


def _run(cmd: list[str], **kw: Any) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")


_FILLED: set[tuple[str, bool]] = set()


def wheelhouse(python_version: str = "3.11", *, debs: bool = False) -> Path:
    """Wheels for every pinned server dependency and for this checkout (once per process)."""
    wh = cache_dir() / f"wheelhouse-py{python_version}"
    if (python_version, debs) in _FILLED or (python_version, True) in _FILLED:
        return wh
    wh.mkdir(parents=True, exist_ok=True)
    abi = "cp" + python_version.replace(".", "")
    plat = [a for p in _PLATFORMS for a in ("--platform", p)]
    _run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(wh), "--only-binary=:all:",
          "--python-version", python_version, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
          *plat, "-r", str(ROOT / "docker/requirements-server.txt"), "-r", str(ROOT / "docker/requirements-sandbox.txt")])
    for old in wh.glob("turngym-*.whl"):
        old.unlink()
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "--no-build-isolation",
          "-w", str(wh), str(ROOT)], cwd=tempfile.gettempdir())
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' scratch dir in the checkout
    if debs and not list(wh.glob("bubblewrap_*.deb")):
        _run(["apt-get", "download", "bubblewrap", "libcap2"], cwd=wh)
    _FILLED.add((python_version, debs))
    return wh


def stage_context(dockerfile: str, wheels: Path) -> Path:
    """A build context with only what the Dockerfiles copy (no .git, no caches)."""
    ctx = Path(tempfile.mkdtemp(prefix="turngym-build-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "turngym", ctx / "turngym", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, ctx / name)
    (ctx / "docker").mkdir()
    for req in ("requirements-server.txt", "requirements-sandbox.txt"):
        shutil.copy2(ROOT / "docker" / req, ctx / "docker" / req)
    shutil.copy2(ROOT / dockerfile, ctx / dockerfile)
    shutil.copytree(wheels, ctx / "docker/wheelhouse")
    return ctx


def sandbox_packages() -> str:
    """The sandbox image's ``PACKAGES`` build argument: the pins of ``docker/requirements-sandbox.txt``."""
    lines = (ROOT / "docker/requirements-sandbox.txt").read_text().splitlines()
    return " ".join(ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip())


def recipe_digest(name: str) -> str:
    """A digest of the files image ``name`` is built from (its label; a stale image is rebuilt)."""
    h = hashlib.sha256()
    for path in RECIPES[name]:
        h.update(path.encode() + b"\0" + (ROOT / path).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build(name: str, *, base: str = BASE_IMAGE, client: Any = None, if_missing: bool = False) -> dict[str, Any]:
    """Build image ``name`` (a key of :data:`IMAGES`) offline; returns its tag and timings."""
    import docker

    client = client or docker.from_env(timeout=600)
    dockerfile, tag = IMAGES[name]
    digest = recipe_digest(name)
    if if_missing:
        try:
            labels = client.images.get(tag).labels or {}
            if labels.get(_RECIPE_LABEL) == digest:
                return {"image": name, "tag": tag, "built": False}
        except docker.errors.ImageNotFound:
            pass
    t0 = time.monotonic()
    wheels = wheelhouse(debs=name == "server-bwrap")
    t_wheels = time.monotonic() - t0
    ctx = stage_context(dockerfile, wheels)
    try:
        t1 = time.monotonic()
        try:
            args = {"BASE_IMAGE": base, "PIP_ARGS": "--no-index", "SERVER_IMAGE": IMAGES["server"][1],
                    "PACKAGES": sandbox_packages()}
            image, _logs = client.images.build(
                path=str(ctx), dockerfile=dockerfile, tag=tag, network_mode="none", pull=False, rm=True, forcerm=True,
                labels={_RECIPE_LABEL: digest},
                buildargs={k: v for k, v in args.items() if f"ARG {k}" in (ROOT / dockerfile).read_text()},
            )
        except docker.errors.BuildError as exc:
            log = "".join(str(c.get("stream", c.get("error", ""))) for c in exc.build_log)
            raise RuntimeError(f"building {tag} failed: {exc}\n{log[-4000:]}") from None
        t_build = time.monotonic() - t1
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    size = int(image.attrs.get("Size") or 0)
    return {"image": name, "tag": tag, "built": True, "wheels_s": round(t_wheels, 1), "build_s": round(t_build, 1),
            "size_mb": round(size / 1e6)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("images", nargs="*", metavar="IMAGE", help=f"some of {', '.join(IMAGES)} (default: all, in that order)")
    p.add_argument("--base", default=BASE_IMAGE, help="base image (default: %(default)s)")
    p.add_argument("--if-missing", action="store_true", help="skip images that exist and were built from the same recipe")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    unknown = set(args.images) - set(IMAGES)
    if unknown:
        p.error(f"unknown image(s) {sorted(unknown)}; choose from {list(IMAGES)}")
    results = [build(n, base=args.base, if_missing=args.if_missing) for n in args.images or list(IMAGES)]
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
