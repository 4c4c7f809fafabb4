"""The turngym CLI, run in-process through main() and once as a real subprocess."""

import json
import subprocess
import sys

from turngym.cli import main


def test_envs_lists_ids(capsys):
    assert main(["envs"]) == 0
    assert "turngym/Math-v0" in capsys.readouterr().out
    assert main(["envs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"id", "family", "max_turns", "description"} <= set(rows[0])


def test_eval_json_and_out_dir(tmp_path, capsys):
    assert main(["eval", "turngym/Math-v0", "--agent", "oracle", "--episodes", "25", "--json", "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 25
    assert summary["success_ci95"][0] > 0.8
    assert (tmp_path / "episodes.jsonl").read_text().count("\n") == 25
    assert "success rate" in (tmp_path / "report.md").read_text()


def test_eval_random_is_worse(capsys):
    assert main(["eval", "turngym/Math-v0", "--agent", "random", "--episodes", "60", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["success_rate"] < 0.3


def test_unknown_env_and_agent_are_clear_errors(capsys):
    assert main(["eval", "turngym/Mth-v0", "--episodes", "1"]) == 2
    assert "Did you mean 'turngym/Math-v0'" in capsys.readouterr().err
    assert main(["eval", "turngym/Math-v0", "--agent", "oracel", "--episodes", "1"]) == 2
    assert "Did you mean oracle" in capsys.readouterr().err


def test_play_by_hand_in_a_subprocess():
    script = ":signals\n:oracle\n:snapshot\nnonsense\n:restore\n" + ":oracle\n" * 10
    res = subprocess.run(
        [sys.executable, "-m", "turngym.cli", "play", "turngym/Math-v0", "--seed", "3"],
        input=script, capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "new_intermediate" in res.stdout
    assert "INVALID" in res.stdout and "restored to turn 1" in res.stdout
    assert "'success': True" in res.stdout and "return +1.000" in res.stdout


def test_transformers_progress_bars_are_quiet_unless_asked_for(tmp_path):
    """`turngym ...` loads and saves models without transformers' own "Loading weights" /
    "Writing model shards" bars (issue 39), and HF_HUB_DISABLE_PROGRESS_BARS=0 brings them back."""
    import os
    import subprocess
    import sys

    code = ("import sys; from turngym.cli import main; sys.exit(main(['eval', 'turngym/Math-v0', '--agent', 'hf:tiny', "
            "'--episodes', '1', '--quiet', '--max-new-tokens', '4']))")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    quiet = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "Loading weights" not in quiet.stderr
    loud = subprocess.run([sys.executable, "-c", code], env={**env, "HF_HUB_DISABLE_PROGRESS_BARS": "0"},
                          capture_output=True, text=True, timeout=600)
    assert loud.returncode == 0 and "Loading weights" in loud.stderr
