"""Crash-safe files and directories: what a run saves is either whole or absent, never half.

A training run can be killed at any instruction (OOM killer, pre-emption, Ctrl-C twice). What
it had saved must then be trustworthy, or resume picks up garbage: a model directory whose
``config.json`` exists but whose tokenizer does not, a checkpoint with a truncated tensor file.
The rules here:

* A file is written to a temporary name in the same directory, flushed to disk (``fsync``),
  then renamed over the final name (``os.replace`` is atomic on POSIX), and the directory
  entry itself is synced — a reader sees the old file or the new one.
* A directory is filled under a temporary name, then a manifest listing every file's size and
  SHA-256 is written *last*, then the directory is renamed into place. A directory without a
  valid manifest, or whose files disagree with it, is incomplete or damaged and never loaded
  (:func:`verify_dir` says which file is wrong) — this also catches files damaged or deleted
  after they were written.
* A log line is appended with one ``write`` of the whole line; a reader keeps only complete
  lines (:func:`complete_lines`), so a torn last line left by a kill is simply not there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from turngym.core.errors import TurngymError

__all__ = [
    "MANIFEST_NAME",
    "ArtifactError",
    "append_line",
    "complete_lines",
    "fsync_dir",
    "is_complete_dir",
    "save_dir",
    "sha256_file",
    "verify_dir",
    "write_bytes",
    "write_json",
    "write_text",
]

MANIFEST_NAME = "turngym_manifest.json"
_FORMAT = 1


class ArtifactError(TurngymError):
    """A saved file or directory is missing, incomplete or damaged (the message names it and says
    how to recover)."""


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (no-op where directories cannot be synced)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    tmp = _tmp_name(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """:func:`write_bytes` of UTF-8 text."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any, *, indent: int | None = 2) -> None:
    """:func:`write_bytes` of a JSON document."""
    write_text(path, json.dumps(obj, indent=indent) + "\n")


def append_line(path: Path, line: str) -> None:
    """Append one line (no newline inside) with a single ``write`` and sync it, so that a kill
    leaves at most one torn *last* line, which :func:`complete_lines` ignores."""
    if "\n" in line:
        raise ValueError("append_line takes a single line")
    data = (line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def complete_lines(path: Path) -> list[str]:
    """The newline-terminated lines of ``path`` (a torn last line is dropped; [] if absent)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    parts = data.split(b"\n")[:-1]  # whatever follows the last newline is torn or empty
    return [p.decode("utf-8", errors="replace") for p in parts]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != MANIFEST_NAME:
            yield path


def save_dir(final: Path, write: Callable[[Path], None], meta: dict[str, Any] | None = None, *, hook: Callable[[str], None] | None = None) -> Path:
    """Create directory ``final`` atomically: ``write(tmp)`` fills a temporary sibling, every file
    is synced, the manifest (sizes, SHA-256, ``meta``) is written last, then the directory is
    renamed into place (an existing ``final`` is replaced).

    A kill at any point leaves either the previous ``final`` or the new one; the temporary
    sibling that may remain is removed by the next save. ``hook("written")`` is called after
    ``write`` and before the manifest (for fault-injection tests).
    """
    final = Path(final)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    if hook is not None:
        hook("written")
    files: dict[str, dict[str, Any]] = {}
    written = list(_files(tmp))
    for path in written:
        with open(path, "rb") as fh:  # fsync needs no write access on POSIX
            os.fsync(fh.fileno())
        files[path.relative_to(tmp).as_posix()] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    for sub in sorted({p.parent for p in written}, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(sub)
    manifest = {"format": _FORMAT, "files": files, **(meta or {})}
    write_json(tmp / MANIFEST_NAME, manifest)
    trash = final.with_name(final.name + ".trash")
    shutil.rmtree(trash, ignore_errors=True)
    if final.exists():
        os.replace(final, trash)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    shutil.rmtree(trash, ignore_errors=True)
    return final


def verify_dir(path: Path, *, what: str = "directory") -> dict[str, Any]:
    """The manifest of a directory written by :func:`save_dir`, after checking every file it lists
    (presence, size, SHA-256). Raises :class:`ArtifactError` naming the first bad file."""
    path = Path(path)
    if not path.is_dir():
        raise ArtifactError(f"{what} {path} is missing")
    mpath = path / MANIFEST_NAME
    if not mpath.exists():
        raise ArtifactError(f"{what} {path} is incomplete: it has no {MANIFEST_NAME} (it was being written when the run stopped, "
                            "or an older turngym wrote it)")
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
        if manifest.get("format") != _FORMAT or not isinstance(files, dict):
            raise ValueError(f"unknown manifest format {manifest.get('format')!r}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{what} {path}: {mpath.name} is unreadable ({exc})") from exc
    for name, info in files.items():
        file = path / name
        if not file.is_file():
            raise ArtifactError(f"{what} {path}: {file} is missing")
        if file.stat().st_size != info.get("size"):
            raise ArtifactError(f"{what} {path}: {file} is damaged ({file.stat().st_size} bytes, {info.get('size')} were saved)")
        if sha256_file(file) != info.get("sha256"):
            raise ArtifactError(f"{what} {path}: {file} is damaged (its SHA-256 differs from the one saved)")
    return manifest


def is_complete_dir(path: Path) -> bool:
    """Whether :func:`verify_dir` accepts ``path``."""
    try:
        verify_dir(path)
    except ArtifactError:
        return False
    return True
