"""Experiment tracking: what a tiny run writes to TensorBoard and W&B equals its metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainers.tiny_run import tiny_config
from turngym.core.errors import ConfigError
from turngym.trainers.tracking import metric_scalars, parse_backends


def _expected(out: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of every numeric field of metrics.jsonl (later rows of a step win)."""
    expected: dict[str, dict[int, float]] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        _, step, scalars = metric_scalars(json.loads(line))
        for tag, value in scalars.items():
            expected.setdefault(tag, {})[step] = value
    return expected


def test_parse_backends_validates_names() -> None:
    assert parse_backends("tensorboard, wandb,tensorboard") == ("tensorboard", "wandb")
    assert parse_backends(["wandb"]) == ("wandb",)
    with pytest.raises(ConfigError, match="tensorboard"):
        parse_backends("tensorbord")
    with pytest.raises(ConfigError, match="unknown report_to"):
        tiny_config(report_to=("mlflow",))


def test_metric_scalars_prefixes_phase_and_skips_text() -> None:
    phase, step, scalars = metric_scalars({"phase": "eval", "step": 3, "success": 0.5, "label": "after RL", "x": float("nan")})
    assert (phase, step, scalars) == ("eval", 3, {"eval/success": 0.5})


def test_missing_backend_names_the_pip_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    from turngym.trainers import Trainer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'turngym\[track\]'"):
        Trainer(tiny_config(report_to=("wandb",)), tmp_path / "run", progress=False, log=None).run()
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_wandb_without_login_or_offline_mode_is_refused_up_front(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from turngym.trainers import Trainer

    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(ConfigError, match="WANDB_MODE=offline"):
        Trainer(tiny_config(report_to=("wandb",)), tmp_path / "run", progress=False, log=None).run()
    assert not (tmp_path / "run").exists()


def test_tensorboard_events_hold_every_metric(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from turngym.trainers import Trainer

    out = tmp_path / "run"
    Trainer(tiny_config(steps=2, report_to=("tensorboard",)), out, progress=False, log=None).run()
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    expected = _expected(out)
    assert {"rl/success", "rl/loss", "rl/zero_adv_frac", "eval/success", "warmup/nll"} <= set(expected)
    assert set(acc.Tags()["scalars"]) == set(expected)
    for tag, by_step in expected.items():
        got = {e.step: e.value for e in acc.Scalars(tag)}
        assert got == pytest.approx(by_step, rel=1e-6), tag
    # sample episodes: a Markdown table per logged RL step, with the turns' actions and advantages
    assert "rl/sample_episodes/text_summary" in acc.Tags()["tensors"]
    texts = [e.tensor_proto.string_val[0].decode() for e in acc.Tensors("rl/sample_episodes/text_summary")]
    assert [e.step for e in acc.Tensors("rl/sample_episodes/text_summary")] == [1, 2]
    assert all(t.splitlines()[0].startswith("| episode | group |") and "| advantage |" in t.splitlines()[0] for t in texts)
    assert len(texts[0].splitlines()) > 2  # header, rule and at least one turn


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a ``.wandb`` transaction log (LevelDB log format, W&B header).

    wandb no longer ships a Python reader (its core is in Go), so the test reads the format:
    a 7-byte header, then 32 KiB blocks of chunks with a (crc32, length, type) header, where
    type 1 is a whole record and 2/3/4 are its first/middle/last pieces.
    """
    import struct

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    records: list[bytes] = []
    pending = b""
    pos, block = 7, 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    return records


def _wandb_history(run_dir: Path) -> list[dict]:
    """The history rows of an offline W&B run, read from its ``.wandb`` transaction log."""
    import time

    from wandb.proto import wandb_internal_pb2

    (log,) = run_dir.glob("*.wandb")
    deadline = time.monotonic() + 30  # wandb's service writes the log asynchronously: wait for it
    while True:
        rows = []
        for data in _wandb_records(log):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            if rec.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item})
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rows, f"no history records in {log}"
    return rows


def test_wandb_offline_run_holds_every_metric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    from turngym.trainers import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "run"
    Trainer(tiny_config(steps=2, report_to=("wandb",)), out, progress=False, log=None).run()
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    history = _wandb_history(run_dir)
    expected = _expected(out)
    for tag, by_step in expected.items():
        phase = tag.split("/")[0]
        got = {int(r[f"{phase}/step"]): r[tag] for r in history if tag in r}
        assert got == pytest.approx(by_step, rel=1e-6), tag
    tables = [r for r in history if r.get("rl/sample_episodes/_type") == "table-file"]
    assert [int(r["rl/step"]) for r in tables] == [1, 2]
    table = json.loads((run_dir / "files" / tables[0]["rl/sample_episodes/path"]).read_text())
    assert "advantage" in table["columns"] and "action" in table["columns"]
    assert len(table["data"]) == int(tables[0]["rl/sample_episodes/nrows"]) > 0


def test_study_passes_report_to_to_every_training_run() -> None:
    import argparse

    from turngym.study.credit import StudyConfig, config_from_args, plan_runs, setup_parser
    from turngym.study.plan import train_config

    parser = argparse.ArgumentParser()
    setup_parser(parser)
    args = parser.parse_args(["credit", "--quick", "--report-to", "tensorboard,wandb"])
    cfg = config_from_args(args)
    assert cfg.report_to == ("tensorboard", "wandb")
    assert StudyConfig(**{**cfg.to_dict(), "out": cfg.out}).report_to == cfg.report_to  # study_config.json round trip
    spec = plan_runs(cfg)[0]
    assert train_config(cfg, spec, 2).report_to == ("tensorboard", "wandb")
