"""The acceptance run: ``turngym train`` with no arguments raises success by ≥ 20 points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")


@pytest.mark.slow
def test_default_run_raises_success_by_20_points(tmp_path: Path) -> None:
    from turngym.cli import main

    assert main(["train", "--out", str(tmp_path), "--quiet"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["success_after"] - summary["success_before"] >= 0.20, summary
    assert (tmp_path / "learning_curve.png").exists()
