"""SWE-smith-style bug injection: small AST mutations of one function at a time.

Each operator proposes edits to a function as *source spans* (exact character ranges from the
AST positions, replaced by new text), so the injected bug — and its inverse, the gold patch —
is a minimal diff that keeps the file's comments and formatting.

Operators: flip a comparison, off-by-one on an integer constant, drop a branch (an ``else`` or
a whole ``if``), swap two call arguments, change a default, remove a guard (an ``if`` that
raises or returns early), and swap an arithmetic or boolean operator.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Mutation", "propose_mutations", "OPERATORS"]

_FLIP = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_BINSWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div}
_BOOLSWAP = {ast.And: ast.Or, ast.Or: ast.And}

OPERATORS = ("flip_comparison", "off_by_one", "drop_branch", "swap_arguments", "wrong_default", "remove_guard", "swap_operator")


@dataclass(frozen=True)
class Mutation:
    """One injected bug in one file.

    Attributes:
        path: file path in the repo.
        function: qualified name of the mutated function (``Class.method`` or ``func``).
        operator: which operator made it (one of :data:`OPERATORS`).
        start, end: character offsets of the replaced span in the original text.
        replacement: the buggy text put there.
        func_lines: (first, last) 1-based lines of the function in the *buggy* file.
    """

    path: str
    function: str
    operator: str
    start: int
    end: int
    replacement: str
    func_lines: tuple[int, int]

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]


def _offsets(text: str) -> list[int]:
    offs, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        offs.append(total)
    return offs


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.offs = _offsets(text)

    def pos(self, lineno: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets; convert within the line
        line = self.lines[lineno - 1]
        return self.offs[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.pos(node.lineno, node.col_offset), self.pos(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def stmt_lines(self, node: ast.stmt) -> tuple[int, int]:
        """Whole-line span of a statement (it must start its line)."""
        return self.offs[node.lineno - 1], self.offs[node.end_lineno]  # type: ignore[attr-defined]

    def indent_of(self, node: ast.stmt) -> str:
        line = self.lines[node.lineno - 1]
        return line[: len(line) - len(line.lstrip())]


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    yield f"{node.name}.{sub.name}", sub


def _starts_line(src: _Source, node: ast.stmt) -> bool:
    line = src.lines[node.lineno - 1]
    return line[: node.col_offset].strip() == ""


def _block_of(func: ast.FunctionDef, target: ast.stmt) -> list[ast.stmt] | None:
    for node in ast.walk(func):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(s is target for s in block):
                return block
    return None


def _delete_stmt(src: _Source, func: ast.FunctionDef, stmt: ast.stmt) -> tuple[int, int, str] | None:
    if not _starts_line(src, stmt):
        return None
    block = _block_of(func, stmt)
    if block is None:
        return None
    start, end = src.stmt_lines(stmt)
    # keep the block non-empty
    replacement = f"{src.indent_of(stmt)}pass\n" if len(block) == 1 else ""
    return start, end, replacement


def _mutations_in(src: _Source, path: str, qual: str, func: ast.FunctionDef) -> Iterator[tuple[str, int, int, str]]:
    body_nodes = [n for stmt in func.body for n in ast.walk(stmt)]
    # docstrings are not code: skip the first statement if it is a string
    for node in body_nodes:
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
            new = ast.Compare(left=node.left, ops=[_FLIP[type(node.ops[0])]()], comparators=node.comparators)
            s, e = src.span(node)
            yield "flip_comparison", s, e, ast.unparse(new)
        elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 1000 and hasattr(node, "end_col_offset"):
            s, e = src.span(node)
            if src.text[s:e].isdigit():
                yield "off_by_one", s, e, str(node.value + 1)
                if node.value > 0:
                    yield "off_by_one", s, e, str(node.value - 1)
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
            a, b = node.args[0], node.args[1]
            if ast.dump(a) != ast.dump(b):
                (sa, ea), (sb, eb) = src.span(a), src.span(b)
                if ea <= sb:
                    yield "swap_arguments", sa, eb, src.text[sb:eb] + src.text[ea:sb] + src.text[sa:ea]
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINSWAP:
            new = ast.BinOp(left=node.left, op=_BINSWAP[type(node.op)](), right=node.right)
            s, e = src.span(node)
            yield "swap_operator", s, e, ast.unparse(new)
        elif isinstance(node, ast.BoolOp) and type(node.op) in _BOOLSWAP:
            new = ast.BoolOp(op=_BOOLSWAP[type(node.op)](), values=node.values)
            s, e = src.span(node)
            yield "swap_operator", s, e, ast.unparse(new)
        elif isinstance(node, ast.If):
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                # drop the else block: delete from the 'else:' line to the end of the orelse
                first, last = node.orelse[0], node.orelse[-1]
                else_line = first.lineno - 1
                while else_line > node.lineno and src.lines[else_line - 1].strip() != "else:":
                    else_line -= 1
                if src.lines[else_line - 1].strip() == "else:":
                    yield "drop_branch", src.offs[else_line - 1], src.offs[last.end_lineno], ""  # type: ignore[attr-defined]
            is_guard = not node.orelse and isinstance(node.body[-1], (ast.Raise, ast.Return, ast.Continue, ast.Break))
            deleted = _delete_stmt(src, func, node)
            if deleted is not None:
                yield ("remove_guard" if is_guard else "drop_branch"), *deleted
    for default in func.args.defaults + [d for d in func.args.kw_defaults if d is not None]:
        if isinstance(default, ast.Constant):
            v = default.value
            new_v: object
            if isinstance(v, bool):
                new_v = not v
            elif isinstance(v, int):
                new_v = v + 1
            elif isinstance(v, float):
                new_v = v * 2 if v else 1.0
            elif v is None:
                continue
            else:
                continue
            s, e = src.span(default)
            yield "wrong_default", s, e, repr(new_v)


def propose_mutations(path: str, text: str) -> list[Mutation]:
    """Every candidate mutation of every function in one Python file (deterministic order)."""
    tree = ast.parse(text)
    src = _Source(text)
    out: list[Mutation] = []
    seen: set[tuple[int, int, str]] = set()
    for qual, func in _functions(tree):
        doc = ast.get_docstring(func, clean=False)
        doc_node = func.body[0] if doc is not None else None
        for op, s, e, repl in _mutations_in(src, path, qual, func):
            if doc_node is not None and src.span(doc_node)[0] <= s < src.span(doc_node)[1]:
                continue
            if (s, e, repl) in seen or src.text[s:e] == repl:
                continue
            seen.add((s, e, repl))
            buggy = text[:s] + repl + text[e:]
            try:
                ast.parse(buggy)
            except SyntaxError:
                continue
            first = func.lineno
            last = func.end_lineno + repl.count("\n") - text[s:e].count("\n")  # type: ignore[operator]
            if func.decorator_list:
                first = func.decorator_list[0].lineno
            out.append(Mutation(path, qual, op, s, e, repl, (first, last)))
    return out
