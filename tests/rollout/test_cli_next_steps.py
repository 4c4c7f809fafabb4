"""`turngym train`'s closing advice must name commands that actually parse (flags get renamed)."""

from __future__ import annotations

import shlex

from turngym.cli import _NEXT_STEPS, build_parser


def test_every_suggested_turngym_command_parses() -> None:
    commands = [line.split("#")[0].strip() for line in _NEXT_STEPS.splitlines() if line.strip().startswith("turngym ")]
    assert len(commands) >= 2  # an eval of the starting point and a real-model training run
    parser = build_parser()
    for cmd in commands:
        args = parser.parse_args(shlex.split(cmd)[1:])
        assert args.command in ("eval", "train")
    trains = [parser.parse_args(shlex.split(c)[1:]) for c in commands if c.startswith("turngym train")]
    assert trains and all(t.model == "smollm2" for t in trains)
