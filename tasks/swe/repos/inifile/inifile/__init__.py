"""A small INI file parser and writer.

Sections are ``[name]`` lines; entries are ``key = value`` or ``key: value``. Lines starting
with ``#`` or ``;`` are comments, and `` ;`` / `` #`` start an inline comment. Keys are
case-insensitive (stored lower-case); later duplicates override earlier ones. Entries before
the first section go to the ``DEFAULT`` section, whose values every other section inherits.
"""

from __future__ import annotations

__all__ = ["ParseError", "Config", "parse", "dumps"]

DEFAULT = "DEFAULT"
_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}


class ParseError(ValueError):
    """Raised with the 1-based line number of the offending line."""

    def __init__(self, lineno: int, message: str) -> None:
        self.lineno = lineno
        super().__init__(f"line {lineno}: {message}")


def _strip_inline_comment(value: str) -> str:
    for marker in (" ;", " #"):
        idx = value.find(marker)
        if idx != -1:
            value = value[:idx]
    return value.strip()


class Config:
    """Parsed sections with typed getters."""

    def __init__(self) -> None:
        self._sections: dict[str, dict[str, str]] = {DEFAULT: {}}

    def sections(self) -> list[str]:
        """Section names in file order, without DEFAULT."""
        return [name for name in self._sections if name != DEFAULT]

    def add_section(self, name: str) -> None:
        if not name or name != name.strip():
            raise ValueError(f"bad section name {name!r}")
        self._sections.setdefault(name, {})

    def has_section(self, name: str) -> bool:
        return name in self._sections

    def set(self, section: str, key: str, value: str) -> None:
        if section not in self._sections:
            raise KeyError(f"no section {section!r}")
        self._sections[section][key.strip().lower()] = value

    def items(self, section: str) -> dict[str, str]:
        """All entries visible in ``section``: DEFAULT's, overridden by the section's own."""
        if section not in self._sections:
            raise KeyError(f"no section {section!r}")
        merged = dict(self._sections[DEFAULT])
        merged.update(self._sections[section])
        return merged

    def get(self, section: str, key: str, fallback: str | None = None) -> str | None:
        return self.items(section).get(key.lower(), fallback)

    def get_int(self, section: str, key: str, fallback: int | None = None) -> int | None:
        raw = self.get(section, key)
        if raw is None:
            return fallback
        return int(raw, 0)

    def get_bool(self, section: str, key: str, fallback: bool | None = None) -> bool | None:
        raw = self.get(section, key)
        if raw is None:
            return fallback
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"not a boolean: {raw!r}")

    def get_list(self, section: str, key: str, sep: str = ",") -> list[str]:
        raw = self.get(section, key)
        if raw is None:
            return []
        return [part.strip() for part in raw.split(sep) if part.strip()]


def parse(text: str) -> Config:
    """Parse INI ``text`` into a :class:`Config`."""
    config = Config()
    current = DEFAULT
    last_key: str | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if line[0] in " \t" and last_key is not None:
            # continuation of the previous value
            prev = config._sections[current][last_key]
            config._sections[current][last_key] = (prev + "\n" + stripped).strip()
            continue
        if stripped.startswith("["):
            if not stripped.endswith("]"):
                raise ParseError(lineno, "section header must end with ']'")
            name = stripped[1:-1].strip()
            if not name:
                raise ParseError(lineno, "empty section name")
            config.add_section(name)
            current = name
            last_key = None
            continue
        eq, colon = stripped.find("="), stripped.find(":")
        positions = [p for p in (eq, colon) if p > 0]
        if not positions:
            raise ParseError(lineno, f"expected 'key = value', got {stripped!r}")
        cut = min(positions)
        key = stripped[:cut].strip().lower()
        value = _strip_inline_comment(stripped[cut + 1 :])
        config._sections[current][key] = value
        last_key = key
    return config


def dumps(config: Config) -> str:
    """Serialise ``config`` back to INI text (DEFAULT first, if it has entries)."""
    out: list[str] = []
    order = ([DEFAULT] if config._sections[DEFAULT] else []) + config.sections()
    for name in order:
        if out:
            out.append("")
        out.append(f"[{name}]")
        for key, value in config._sections[name].items():
            lines = value.split("\n")
            out.append(f"{key} = {lines[0]}")
            out.extend(f"    {cont}" for cont in lines[1:])
    return "\n".join(out) + "\n"
