"""``turngym new-env``: the scaffold is a real package that installs, registers by entry point,
passes its own tests, and that ``turngym envs`` / ``eval`` / ``train`` use like a built-in env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import turngym
from turngym.cli import main
from turngym.core.errors import ConfigError, RegistrationError, UnknownEnvError
from turngym.core.registry import IMPORT_ENV_VAR, unregister
from turngym.scaffold import EnvPackage, new_env

REPO = Path(__file__).resolve().parents[1]


def test_names_derive_from_the_env_name():
    pkg = EnvPackage.from_name("my-reach")
    assert (pkg.dist, pkg.module, pkg.env_id, pkg.cls) == ("turngym-my-reach", "turngym_my_reach", "my_reach/MyReach-v0", "MyReachEnv")
    with pytest.raises(ConfigError, match="letters, digits"):
        EnvPackage.from_name("../evil")


def test_new_env_refuses_to_overwrite(tmp_path):
    new_env("reach", tmp_path)
    with pytest.raises(ConfigError, match="--overwrite"):
        new_env("reach", tmp_path)
    new_env("reach", tmp_path, overwrite=True)


def test_a_module_named_by_import_registers_its_env(tmp_path, monkeypatch, capsys):
    root = new_env("imported", tmp_path)
    (tmp_path / "reg_imported.py").write_text("import turngym_imported\nturngym_imported.register_envs()\n")
    monkeypatch.syspath_prepend(str(root / "src"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(IMPORT_ENV_VAR, "")  # recorded, so what main() sets is undone (a delenv of an unset var is not)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    try:
        with pytest.raises(UnknownEnvError, match="--import MODULE"):
            turngym.env_info("imported/Imported-v0")
        assert main(["envs", "--json", "--import", "reg_imported"]) == 0
        rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
        assert rows["imported/Imported-v0"]["package"] == "reg_imported"
        assert os.environ[IMPORT_ENV_VAR] == "reg_imported"  # what child processes inherit
        assert main(["eval", "imported/Imported-v0", "--agent", "oracle", "--episodes", "3", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["success_rate"] == 1.0
    finally:
        unregister("imported/Imported-v0")


def test_an_import_that_fails_names_the_fix(monkeypatch):
    monkeypatch.setenv(IMPORT_ENV_VAR, "no_such_module_here")
    with pytest.raises(RegistrationError, match="PYTHONPATH"):
        turngym.list_envs()
    with pytest.raises(RegistrationError, match="PYTHONPATH"):  # every later lookup too: its envs must not look missing
        turngym.list_envs()


def test_the_scaffold_installs_as_a_wheel_and_evals_and_trains(tmp_path):
    """Wheel → fresh venv → its own tests, `turngym envs`, `eval`, and one `train` step on it."""
    root = new_env("reach", tmp_path)
    py = sys.executable
    subprocess.run([py, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
                    str(root)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("turngym_reach-*.whl"))
    env_dir = tmp_path / "venv"  # fresh venv; turngym, torch and pytest come from this environment
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    vpy = str(env_dir / "bin" / "python")
    child_env = {**os.environ, "PYTHONPATH": str(REPO), "TURNGYM_CACHE": str(tmp_path / "cache")}
    child_env.pop(IMPORT_ENV_VAR, None)

    def run(*cmd: str, cwd: Path = tmp_path) -> str:
        proc = subprocess.run([vpy, *cmd], cwd=cwd, env=child_env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    run("-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel))
    assert "passed" in run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=root)
    rows = {r["id"]: r for r in json.loads(run("-m", "turngym.cli", "envs", "--json"))}
    assert rows["reach/Reach-v0"]["package"] == "turngym-reach"
    report = json.loads(run("-m", "turngym.cli", "eval", "reach/Reach-v0", "--agent", "oracle", "--episodes", "4", "--json"))
    assert report["success_rate"] == 1.0
    tiny = json.dumps({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "vocab_size": 512,
                       "episodes_per_env": 2})
    out = tmp_path / "run"
    run("-m", "turngym.cli", "train", "--env", "reach/Reach-v0", "--steps", "1", "--out", str(out), "--quiet",
        "--set", f"tiny_model={tiny}", "--set", "groups_per_step=2", "--set", "group_size=2", "--set", "warmup_steps=1",
        "--set", "demo_episodes=4", "--set", "eval_episodes=2", "--set", "max_new_tokens=8")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["phase"] == "rl"]
    assert len(rl) == 1 and rl[0]["episodes"] == 4, rows  # one RL step of 2 groups x 2 on the package's env


def _fake_distribution(where: Path, name: str, module_source: str) -> None:
    """A distribution on ``sys.path`` as pip leaves it (``.dist-info`` with ``entry_points.txt``)."""
    info = where / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[turngym.envs]\n{name} = {name}_mod:register_envs\n")
    (where / f"{name}_mod.py").write_text(module_source)


def test_entry_points_register_and_a_broken_one_names_its_package(tmp_path, monkeypatch):
    from turngym.core import registry

    good = "from turngym.core.registry import register\n" \
           "def register_envs():\n    register('ep/Reach-v0', 'turngym_ep.env:EpEnv', description='d', max_turns=3, family='ep')\n"
    _fake_distribution(tmp_path / "good", "goodenvs", good)
    monkeypatch.syspath_prepend(str(tmp_path / "good"))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    try:
        assert "goodenvs:goodenvs_mod:register_envs" in registry.load_plugins()
        assert turngym.env_info("ep/Reach-v0").package == "goodenvs"
    finally:
        unregister("ep/Reach-v0")
    _fake_distribution(tmp_path / "bad", "badenvs", "def register_envs():\n    raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "bad"))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    with pytest.raises(RegistrationError, match="'badenvs' failed to register.*boom.*pip uninstall badenvs"):
        registry.load_plugins()
    with pytest.raises(RegistrationError, match="'badenvs' failed to register"):  # every later lookup says so too
        turngym.list_envs()
    monkeypatch.setattr(registry, "_plugins_loaded", True)  # leave the process as it was
