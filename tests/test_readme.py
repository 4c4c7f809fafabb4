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
