"""Resume that cannot be wrong: a run stopped at any save or evaluation boundary, or whose files
were damaged, resumes to exactly the run an uninterrupted one is — or refuses, naming the file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_run import metric_rows, tiny_config  # noqa: E402

from turngym.core.errors import ConfigError, TurngymError  # noqa: E402
from turngym.trainers import ArtifactError, TrainConfig, Trainer  # noqa: E402
from turngym.trainers.atomic import MANIFEST_NAME, append_line, complete_lines, save_dir, verify_dir  # noqa: E402


def _cfg(**kw) -> TrainConfig:
    return tiny_config(**{"steps": 2, "eval_every": 1, "micro_batch_size": 4, **kw})


class _Killed(BaseException):
    """A kill: BaseException, so no ``except Exception`` in the trainer can swallow it."""


def _final_weights(out: Path) -> dict:
    state = json.loads((out / "state.json").read_text())
    assert state["phase"] == "finished"
    return torch.load(out / state["checkpoint"] / "trainable.pt")


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _run(out: Path, cfg: TrainConfig | None = None, *, resume: bool = False, hook: Callable[[str], None] | None = None,
         log: list[str] | None = None) -> None:
    Trainer(cfg or TrainConfig(), out, resume=resume, progress=False, hook=hook, log=None if log is None else log.append).run()


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The uninterrupted run, and every boundary it passed, in order."""
    out = tmp_path_factory.mktemp("straight")
    events: list[str] = []
    _run(out, _cfg(), hook=events.append)
    return out, events


def test_every_boundary_is_named_once(straight: tuple[Path, list[str]]) -> None:
    _, events = straight
    assert len(events) == len(set(events))
    for name in ("warm_start@0", "warm_start@0 written", "warm_start saved@0", "eval@0", "eval logged@0", "checkpoint@0 written",
                 "checkpoint saved@0", "checkpoint committed@0", "rl@1", "rl logged@1", "eval@1", "checkpoint@2 written", "eval@2",
                 "eval logged@2", "finished@2", "summary@2"):
        assert name in events, name


def test_a_kill_at_every_boundary_resumes_to_the_uninterrupted_run(tmp_path: Path, straight: tuple[Path, list[str]]) -> None:
    """One run, killed at every boundary in turn (each resume is killed at the next boundary it
    has not been killed at yet), ends with the uninterrupted run's metrics rows and weights."""
    ref, events = straight
    out = tmp_path / "run"
    killed: list[str] = []

    def kill_at_new(name: str) -> None:
        if name not in killed:
            killed.append(name)
            raise _Killed(name)

    seen: list[list[str]] = []
    for attempt in range(len(events) + 1):
        seen.append([])

        def hook(name: str) -> None:
            seen[-1].append(name)
            kill_at_new(name)

        try:
            _run(out, None if attempt else _cfg(), resume=attempt > 0, hook=hook)
            break
        except _Killed:
            pass
    # every boundary was a kill point, except those that a resume rightly skips: the "committed"
    # step after a checkpoint saved just before a kill (resume continues from that checkpoint),
    # and the summary of a run killed once finished (resume only restores the summary)
    assert set(killed) <= set(events)
    assert set(events) - set(killed) <= {e for e in events if e.startswith(("checkpoint committed@", "summary@"))}
    assert json.loads((out / "summary.json").read_text())["steps"] == 2 and (out / "learning_curve.png").exists()
    assert metric_rows(out) == metric_rows(ref)  # the same rows, in order: none lost, none repeated
    assert _same_weights(_final_weights(out), _final_weights(ref))
    # never warm-started twice: once the warm start is saved, no resumed attempt redoes it
    saved = next(i for i, ev in enumerate(seen) if "warm_start saved@0" in ev)
    assert not any("warm_start@0" in ev for ev in seen[saved + 1:])


def test_a_kill_while_the_warm_start_is_saved_is_never_trusted(tmp_path: Path, straight: tuple[Path, list[str]]) -> None:
    out = tmp_path / "run"

    def hook(name: str) -> None:
        if name == "warm_start@0 written":  # model files written, manifest not yet: a kill here
            raise _Killed

    with pytest.raises(_Killed):
        _run(out, _cfg(), hook=hook)
    assert not (out / "warm_start").exists()  # the partial directory never had the final name
    (out / "warm_start").mkdir()  # even a half directory under the final name (as a copy tool would leave) ...
    shutil.copy(out / "warm_start.tmp" / "config.json", out / "warm_start" / "config.json")
    log: list[str] = []
    _run(out, resume=True, log=log)  # ... is not loaded (no misleading tokenizer error): redone from the start
    assert any("warm start" in m and "incomplete" in m for m in log), log
    assert metric_rows(out) == metric_rows(straight[0])


def test_a_kill_during_the_warm_start_evaluation_does_not_warm_start_again(tmp_path: Path, straight: tuple[Path, list[str]]) -> None:
    out = tmp_path / "run"

    def hook(name: str) -> None:
        if name == "eval@0":
            raise _Killed

    with pytest.raises(_Killed):
        _run(out, _cfg(), hook=hook)
    events: list[str] = []
    _run(out, resume=True, hook=events.append)
    assert "warm_start@0" not in events and events[0] == "eval@0"
    assert metric_rows(out) == metric_rows(straight[0])
    assert _same_weights(_final_weights(out), _final_weights(straight[0]))


def test_a_lora_run_killed_before_its_adapters_exist_resumes_exactly(tmp_path: Path) -> None:
    """The adapters and the KL reference are created after the warm-start evaluation: a LoRA run
    killed just before must resume to the uninterrupted run, adapters included."""
    pytest.importorskip("peft")
    cfg = _cfg(steps=1, eval_every=0, lora=True, lora_rank=4, kl_coef=0.05)
    _run(tmp_path / "straight", cfg)

    def hook(name: str) -> None:
        if name == "eval logged@0":
            raise _Killed

    with pytest.raises(_Killed):
        _run(tmp_path / "killed", cfg, hook=hook)
    _run(tmp_path / "killed", resume=True)
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "straight")
    assert _same_weights(_final_weights(tmp_path / "killed"), _final_weights(tmp_path / "straight"))


def test_a_finished_run_resumes_as_a_no_op(tmp_path: Path, straight: tuple[Path, list[str]]) -> None:
    out = tmp_path / "run"
    shutil.copytree(straight[0], out)
    before = (out / "metrics.jsonl").read_bytes()
    (out / "summary.json").unlink()
    events: list[str] = []
    log: list[str] = []
    Trainer(TrainConfig(), out, resume=True, progress=False, hook=events.append, log=log.append).run()
    assert events == []  # nothing trained, nothing evaluated
    assert (out / "metrics.jsonl").read_bytes() == before  # no second final evaluation
    assert any("already finished" in m for m in log)
    assert json.loads((out / "summary.json").read_text())["steps"] == 2  # a lost summary is restored


# ---------------------------------------------------------------------------------- damaged files
@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run killed as RL step 2 starts: checkpoints of steps 0 and 1 on disk."""
    out = tmp_path_factory.mktemp("stopped") / "run"

    def hook(name: str) -> None:
        if name == "rl@2":
            raise _Killed

    with pytest.raises(_Killed):
        _run(out, _cfg(), hook=hook)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000000", "step-000001"]
    return out


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


_RECOVERABLE: dict[str, tuple[Callable[[Path], None], str]] = {
    "newest trainable.pt flipped": (lambda o: _flip(o / "checkpoints/step-000001/trainable.pt"), "trainable.pt is damaged"),
    "newest optimizer.pt truncated": (lambda o: _truncate(o / "checkpoints/step-000001/optimizer.pt"), "optimizer.pt is damaged"),
    "newest trainable.pt deleted": (lambda o: (o / "checkpoints/step-000001/trainable.pt").unlink(), "trainable.pt is missing"),
    "newest manifest deleted": (lambda o: (o / f"checkpoints/step-000001/{MANIFEST_NAME}").unlink(), "incomplete"),
    "newest manifest garbage": (lambda o: (o / f"checkpoints/step-000001/{MANIFEST_NAME}").write_text("{not json"), "unreadable"),
    "every checkpoint damaged": (lambda o: [_flip(o / f"checkpoints/step-00000{i}/trainable.pt") for i in (0, 1)], "trainable.pt is damaged"),
    "state.json deleted": (lambda o: (o / "state.json").unlink(), "state.json is missing"),
    "state.json garbage": (lambda o: (o / "state.json").write_text('{"phase": "rl", "st'), "state.json is damaged"),
    "metrics.jsonl torn last line": (lambda o: (o / "metrics.jsonl").open("a").write('{"phase": "rl", "ste'), ""),
    "metrics.jsonl deleted": (lambda o: (o / "metrics.jsonl").unlink(), "metrics.jsonl was missing"),
    "metrics.jsonl rows lost": (lambda o: (o / "metrics.jsonl").write_text(""), "restored"),
}


@pytest.mark.parametrize("case", list(_RECOVERABLE))
def test_damage_falls_back_to_the_newest_valid_save_and_says_so(tmp_path: Path, stopped: Path, straight: tuple[Path, list[str]], case: str) -> None:
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    damage, says = _RECOVERABLE[case]
    damage(out)
    log: list[str] = []
    _run(out, resume=True, log=log)
    assert any(says in m for m in log if m.startswith("warning:")) or not says, log
    assert metric_rows(out) == metric_rows(straight[0])
    assert _same_weights(_final_weights(out), _final_weights(straight[0]))


_FATAL: dict[str, tuple[Callable[[Path], None], str]] = {
    "warm start weights flipped": (lambda o: _flip(o / "warm_start/model.safetensors"), "model.safetensors is damaged"),
    "warm start tokenizer deleted": (lambda o: (o / "warm_start/tokenizer.json").unlink(), "tokenizer.json is missing"),
    "config.json deleted": (lambda o: (o / "config.json").unlink(), "config.json is missing"),
    "config.json garbage": (lambda o: (o / "config.json").write_text("{"), "config.json is damaged"),
}


@pytest.mark.parametrize("case", list(_FATAL))
def test_damage_beyond_repair_is_a_clear_error_naming_the_file_and_the_fix(tmp_path: Path, stopped: Path, case: str) -> None:
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    damage, says = _FATAL[case]
    damage(out)
    rows = (out / "metrics.jsonl").read_bytes()
    with pytest.raises(ArtifactError) as err:
        _run(out, resume=True)
    assert says in str(err.value) and "--overwrite" in str(err.value)
    assert (out / "metrics.jsonl").read_bytes() == rows  # nothing was overwritten


def test_the_cli_prints_the_error_not_a_traceback(tmp_path: Path, stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from turngym.cli import main

    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    _flip(out / "warm_start/model.safetensors")
    assert main(["train", "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "model.safetensors" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------- no silent restart
def test_a_fresh_run_refuses_a_directory_with_results(tmp_path: Path, stopped: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    (out / "state.json").unlink()  # results but no valid state: still not silently replaced
    rows = (out / "metrics.jsonl").read_bytes()
    with pytest.raises(ConfigError, match="--resume.*--overwrite"):
        _run(out, _cfg())
    from turngym.cli import main

    assert main(["train", "--out", str(out), "--quiet"]) == 2  # the CLI says so too, and touches nothing
    assert (out / "metrics.jsonl").read_bytes() == rows
    (out / "notes.txt").write_text("mine")
    Trainer(_cfg(steps=1, eval_every=0), out, overwrite=True, progress=False, log=None).run()
    assert json.loads((out / "state.json").read_text())["phase"] == "finished"
    assert [r["step"] for r in metric_rows(out) if r["phase"] == "rl"] == [1]  # the old run's rows are gone ...
    assert (out / "notes.txt").read_text() == "mine"  # ... files that are not the run's are kept


def test_resume_and_overwrite_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Trainer(_cfg(), tmp_path, resume=True, overwrite=True)
    with pytest.raises(ConfigError, match="nothing to resume"):
        Trainer(_cfg(), tmp_path / "empty", resume=True)


# ---------------------------------------------------------------------------------- the primitives
def test_a_torn_line_is_not_a_line(tmp_path: Path) -> None:
    log = tmp_path / "m.jsonl"
    append_line(log, "a")
    append_line(log, "b")
    with open(log, "a") as fh:
        fh.write('{"torn')
    assert complete_lines(log) == ["a", "b"]
    assert complete_lines(tmp_path / "absent") == []


def test_save_dir_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    final = tmp_path / "d"
    save_dir(final, lambda d: (d / "x.bin").write_bytes(b"old"), {"v": 1})
    assert verify_dir(final)["v"] == 1

    def die(what: str) -> None:
        raise _Killed

    with pytest.raises(_Killed):
        save_dir(final, lambda d: (d / "x.bin").write_bytes(b"new!"), {"v": 2}, hook=die)
    assert verify_dir(final)["v"] == 1 and (final / "x.bin").read_bytes() == b"old"
    save_dir(final, lambda d: (d / "sub").mkdir() or (d / "sub" / "y").write_text("y"), {"v": 3})
    assert verify_dir(final)["v"] == 3 and not (final / "x.bin").exists()
    (final / "sub" / "y").write_text("z")  # same size, other bytes
    with pytest.raises(TurngymError, match="y is damaged"):
        verify_dir(final)
