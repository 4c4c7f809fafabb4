"""The README's set-up block: exactly two one-line commands, the second the one CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_starts_with_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2
    assert "pip install" in lines[0] and "turngym" in lines[0]
    assert "pip install" in lines[1] and "pytest" in lines[1]
    assert "README.md" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_line_one_in_a_fresh_venv():
    """.ci/run proves line 1 too, read from the README the way it reads line 2 (not a copy that can drift)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/ci_readme_line1.sh --run-only" in ci and "scripts/ci_readme_line1.sh --setup-only" in ci
    script = (ROOT / "scripts" / "ci_readme_line1.sh").read_text()
    extract = "awk '/^```bash/{b++; next} /^```/{if(b==1) exit} b==1' README.md"
    assert f'"$({extract} | sed -n 1p)"' in script and f'"$({extract} | sed -n 2p)"' in ci
    assert '-m venv "$DIR/venv"' in script and 'bash -c "$LINE1"' in script


def test_ci_runs_line_one_then_line_two_on_one_fresh_cache():
    """Issue 38: a newcomer runs line 1, then line 2, on one machine: line 1 writes the model cache
    that line 2's suite then reads. CI does the same: an empty cache, line 1 first, the suite after."""
    ci = (ROOT / ".ci" / "run").read_text()
    fresh = ci.index('rm -rf "$TURNGYM_CACHE"')
    line1 = ci.index('TURNGYM_LINE1_CACHE="$TURNGYM_CACHE" scripts/ci_readme_line1.sh --run-only')
    suite = ci.index('bash -c "$TEST_CMD"')
    assert ci.index("export TURNGYM_CACHE=") < fresh < line1 < suite
    assert "scripts/docker_engine.sh up" in ci[:fresh]  # the Docker image keeps its own cache
    script = (ROOT / "scripts" / "ci_readme_line1.sh").read_text()
    assert 'CACHE="${TURNGYM_LINE1_CACHE:-$DIR/cache}"' in script and 'TURNGYM_CACHE="$CACHE"' in script
