"""The household action grammar: the only place its patterns live.

Agents write ALFWorld commands (``go to cabinet 3``, ``take apple 1 from countertop 2``,
``put apple 1 in/on fridge 1``…). :func:`normalize` turns what an agent wrote into the
canonical command the env lists as admissible: it keeps the text inside an
``<action>…</action>`` tag when there is one (the verl-agent prompt format), lower-cases,
collapses whitespace, drops a leading ``>`` and a trailing period, and maps common aliases
(``put X in R``, ``put X on R``, ``move X to R``, ``pick up X from R``, ``turn on X``) to the
canonical form. Whether the command is *possible* is the world's business, not the parser's.
"""

from __future__ import annotations

import re

__all__ = ["normalize", "split_command", "VERBS"]

#: The command words, for error messages.
VERBS = ("go to", "open", "close", "take", "put", "clean", "heat", "cool", "use", "examine", "inventory", "look")

#: ASCII upper to lower case, one character for one: positions in the folded text are positions
#: in the original, which ``str.lower`` does not promise for every Unicode character.
_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ALIASES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), repl)
    for pattern, repl in (
        (r"^(?:put|place|move) (.+?) (?:in/on|in|on|into|onto|inside|to) (?:the )?(.+)$", r"put \1 in/on \2"),
        (r"^(?:take|pick up|get|grab) (.+?) (?:from|off|out of) (?:the )?(.+)$", r"take \1 from \2"),
        (r"^(clean|heat|cool|wash) (.+?) (?:with|in|using) (?:the )?(.+)$", r"\1 \2 with \3"),
        (r"^(?:turn on|switch on|toggle|turn off|switch off) (?:the )?(.+)$", r"use \1"),
        (r"^(?:goto|walk to|go) (?:to )?(?:the )?(.+)$", r"go to \1"),
        (r"^(?:look at|inspect) (?:the )?(.+)$", r"examine \1"),
        (r"^(open|close|use|examine) the (.+)$", r"\1 \2"),
        (r"^(?:i|inv|check inventory)$", "inventory"),
    )
)
_WASH = re.compile(r"^wash ")
#: Canonical commands, split into (verb, first name, second name).
_CANONICAL: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), verb)
    for pattern, verb in (
        (r"^go to (.+)$", "go to"),
        (r"^(open|close) (.+)$", ""),
        (r"^take (.+) from (.+)$", "take"),
        (r"^put (.+) in/on (.+)$", "put"),
        (r"^(clean|heat|cool) (.+) with (.+)$", ""),
        (r"^use (.+)$", "use"),
        (r"^examine (.+)$", "examine"),
        (r"^(inventory|look)$", ""),
    )
)


def _action_tag_body(text: str) -> str:
    """The body of the first complete ``<action>…</action>`` (tag case ignored), else ``text``.

    Two forward ``str.find`` scans: a backtracking ``<action>(.*?)</action>`` would rescan the
    rest of the text from every unclosed opening tag, quadratic in a message of opening tags.
    """
    folded = text.translate(_ASCII_FOLD)
    start = folded.find("<action>")
    if start < 0:
        return text
    end = folded.find("</action>", start + len("<action>"))
    return text[start + len("<action>") : end] if end >= 0 else text


def normalize(action: str, *, aliases: bool = True) -> str:
    """The canonical command for ``action`` (which may still be impossible in the world).

    >>> normalize("  Go to   Cabinet 3. ")
    'go to cabinet 3'
    >>> normalize("I will cool it. <action>cool apple 1 with fridge 1</action>")
    'cool apple 1 with fridge 1'
    >>> normalize("put apple 1 on countertop 2"), normalize("move mug 2 to the coffeemachine 1")
    ('put apple 1 in/on countertop 2', 'put mug 2 in/on coffeemachine 1')
    """
    if "<" in action:
        action = _action_tag_body(action)
    text = " ".join(action.lower().split()).lstrip("> ").rstrip(".!")
    if not aliases:
        return text
    for pattern, repl in _ALIASES:
        new = pattern.sub(repl, text, count=1)
        if new != text:
            return _WASH.sub("clean ", new)
    return text


def split_command(command: str) -> tuple[str, ...] | None:
    """``(verb, *names)`` of a canonical command, or None if it has no known shape.

    >>> split_command("take apple 1 from countertop 2"), split_command("heat egg 1 with microwave 1")
    (('take', 'apple 1', 'countertop 2'), ('heat', 'egg 1', 'microwave 1'))
    >>> split_command("dance") is None
    True
    """
    for pattern, verb in _CANONICAL:
        m = pattern.match(command)
        if m is not None:
            return (verb, *m.groups()) if verb else m.groups()
    return None
