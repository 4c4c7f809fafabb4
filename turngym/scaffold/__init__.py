"""``turngym new-env NAME``: a package holding one working env, registered by entry point.

The package is what a third party ships: ``pyproject.toml`` declares the ``turngym.envs`` entry
point (:data:`turngym.core.registry.ENTRY_POINT_GROUP`), ``src/<module>/env.py`` is a small
complete env (a target to reach with bounded moves: task generation, per-turn signals, an
oracle, a random action), and ``tests/test_env.py`` runs ``turngym.check_env``, the oracle and a
determinism check. As generated it installs, passes its own tests, and ``turngym eval`` and
``turngym train`` run on it (``tests/test_scaffold.py`` builds it as a wheel, installs it in a
fresh venv and does exactly that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from turngym.core.errors import ConfigError

__all__ = ["EnvPackage", "new_env"]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*")

# template file -> where it goes in the package (relative to its root; {module} is substituted)
_FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "__init__.py.tmpl": "src/{module}/__init__.py",
    "env.py.tmpl": "src/{module}/env.py",
    "test_env.py.tmpl": "tests/test_env.py",
}


@dataclass(frozen=True)
class EnvPackage:
    """The names one env package uses, all derived from the ``NAME`` given to ``new-env``."""

    name: str
    dist: str
    """Distribution name: ``turngym-<name>`` (what ``pip install`` and ``EnvInfo.package`` show)."""
    module: str
    """Import name: ``turngym_<name>``; also the env id's namespace and the task ids' prefix."""
    cls: str
    env_id: str
    title: str

    @classmethod
    def from_name(cls, name: str) -> EnvPackage:
        if not _NAME.fullmatch(name):
            raise ConfigError(f"env name {name!r}: use letters, digits and single '-' or '_' (e.g. 'reach' or 'my-reach')")
        words = re.split(r"[-_]", name)
        camel = "".join(w[:1].upper() + w[1:] for w in words)
        snake = "_".join(w.lower() for w in words)
        return cls(name=name, dist=f"turngym-{snake.replace('_', '-')}", module=f"turngym_{snake}", cls=f"{camel}Env",
                   env_id=f"{snake}/{camel}-v0", title=camel)

    def substitutions(self) -> dict[str, str]:
        return {"name": self.name, "dist": self.dist, "module": self.module, "cls": self.cls,
                "cls_task": self.cls.removesuffix("Env") + "Task", "env_id": self.env_id, "title": self.title}


def new_env(name: str, where: str | Path = ".", *, overwrite: bool = False) -> Path:
    """Write the package for env ``name`` into ``where/turngym-<name>`` and return its root.

    Raises:
        ConfigError: a bad name, or the folder exists (``overwrite=True`` replaces its files).
    """
    pkg = EnvPackage.from_name(name)
    root = Path(where) / pkg.dist
    if root.exists() and not overwrite:
        raise ConfigError(f"{root} exists: choose another NAME or --where, or pass --overwrite")
    subs = pkg.substitutions()
    templates = resources.files(__package__) / "templates"
    for template, target in _FILES.items():
        path = root / target.format(module=pkg.module)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(templates.joinpath(template).read_text(encoding="utf-8")).substitute(subs), encoding="utf-8")
    return root
