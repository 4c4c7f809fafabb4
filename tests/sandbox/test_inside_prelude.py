"""The toolkit as shipped: :func:`turngym.sandbox.inline.inside_prelude` defines it in a bare interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from turngym.sandbox import inline
from turngym.sandbox.inside import hardening

INSIDE = Path(inline.__file__).with_name("inside")

PROBE = """
import json, sys
import _turngym_inside_codec as codec, _turngym_inside_framing as framing, _turngym_inside_hardening as hardening
value = [1 << 70, float("nan"), b"\\x00", {(1, 2): {"a"}}, 1j, "\\ud800"]
back = codec.decode(codec.encode(value, 1 << 20), 1 << 20)
out = {
    "same": repr(back) == repr(value),
    "framed": framing.pack_frame(b"ab", 2).hex(),
    "uid_env": hardening.UNTRUSTED_UID_ENV,
    "dumpable": hardening.set_dumpable(0),
    "turngym": [m for m in sys.modules if m.startswith("turngym")],
    "json": "json" in sys.modules,
}
print(json.dumps(out))
"""


def test_the_prelude_defines_the_toolkit_inside_a_bare_interpreter():
    source = inline.inside_prelude("codec", "framing", "hardening") + PROBE
    run = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", source], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    import json

    out = json.loads(run.stdout)
    assert out == {"same": True, "framed": "000000026162", "uid_env": "TURNGYM_UNTRUSTED_UID",
                   "dumpable": sys.platform == "linux", "turngym": [], "json": True}


def test_a_traceback_through_the_toolkit_never_reads_the_working_dir(tmp_path: Path):
    """The working dir is the code under test's: a file named like a shipped module must not
    show in (or, as a FIFO, hang) a traceback through that module."""
    import os

    (tmp_path / "codec.py").write_text("PLANTED = 'the agent wrote this line'\n" * 400)
    os.mkfifo(tmp_path / "framing.py")
    source = inline.inside_prelude("codec", "framing") + (
        "import traceback, _turngym_inside_codec as c, _turngym_inside_framing as f\n"
        "for call in (lambda: c.decode_obj({'?': 1}), lambda: f.pack_frame(b'abc', 1)):\n"
        "    try:\n        call()\n    except ValueError:\n        print(traceback.format_exc())\n")
    run = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", source], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert '"<codec.py>"' in run.stdout and '"<framing.py>"' in run.stdout and "PLANTED" not in run.stdout


def test_only_the_modules_asked_for_ship_and_each_once():
    one = inline.inside_prelude("framing")
    assert "_turngym_inside_framing" in one and "_turngym_inside_codec" not in one
    both = inline.inside_prelude("codec", "framing", "codec")
    assert both.count("_s.modules['_turngym_inside_codec']") == 1
    assert inline.inside_prelude("codec", "framing") is inline.inside_prelude("codec", "framing")  # cached
    with pytest.raises(ValueError, match="no toolkit module"):
        inline.inside_prelude("os")


def test_the_codec_alone_starts_without_json():
    """A fresh solution process must start fast: encoding imports neither json nor re."""
    source = inline.inside_prelude("codec", "framing") + (
        "import sys, _turngym_inside_codec as c\n"
        "c.dumps(c.encode_obj([1, 2.5, 'x', (None,)]))\n"
        "print(sorted(m for m in ('json', 're', 'base64', 'socket', 'selectors') if m in sys.modules))\n")
    run = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", source], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "[]", (run.stdout, run.stderr)


def test_every_toolkit_module_is_stdlib_only_and_declared():
    files = {p.stem for p in INSIDE.glob("*.py") if p.stem != "__init__"}
    assert files == set(inline.INSIDE_MODULES)
    stdlib = set(sys.stdlib_module_names)
    for name in files:
        tree = ast.parse((INSIDE / f"{name}.py").read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for mod in names:
                assert mod.split(".")[0] in stdlib, f"{name}.py imports {mod}"


def test_pop_untrusted_uid_takes_it_out_of_the_environment(monkeypatch):
    monkeypatch.setenv(hardening.UNTRUSTED_UID_ENV, "1234")
    assert hardening.pop_untrusted_uid() == 1234
    import os

    assert hardening.UNTRUSTED_UID_ENV not in os.environ and hardening.pop_untrusted_uid() is None


def test_set_dumpable_reports_and_can_require(monkeypatch):
    import ctypes

    assert hardening.set_dumpable(1) is (sys.platform == "linux")

    def no_libc(*a, **k):  # test double: a platform without libc
        raise OSError("no libc")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert hardening.set_dumpable(0) is False
    with pytest.raises(OSError, match="not available"):
        hardening.set_dumpable(0, required=True)


def test_path_outside_drops_the_working_dir_and_below_and_appends_site_dirs(monkeypatch, tmp_path):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", ["", str(work), str(work / "sub"), "sub", str(tmp_path / "workshop"), "/usr/lib/x"])
    kept = hardening.path_outside(str(work), ["/site", "/usr/lib/x"])
    assert sys.path == [str(tmp_path / "workshop"), "/usr/lib/x", "/site"] and kept == 2
    monkeypatch.setattr(sys, "path", ["", "/usr/lib/x"])
    assert hardening.path_outside("/") == 1 and sys.path == ["/usr/lib/x"]  # from "/": only '' goes


def test_a_toolkit_module_already_loaded_is_kept_and_inline_module_replaces():
    """A grader forked from the warm worker finds the toolkit loaded: the prelude keeps it (no
    second compile); :func:`inline_module` itself always (re)defines its module."""
    source = ("import sys\nsys.modules['_turngym_inside_framing'] = marker = type(sys)('mine')\n"
              + inline.inside_prelude("codec", "framing")
              + "assert sys.modules['_turngym_inside_framing'] is marker\n"
              + "import _turngym_inside_codec\n"
              + inline.inline_module("_turngym_inside_framing", "X = 1\n", "f.py")
              + "assert sys.modules['_turngym_inside_framing'].X == 1\nprint('ok')\n")
    run = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", source], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "ok", run.stderr
