"""Reading a SQLite world the way the grader must: from bytes, bounded, outside the server.

The agent writes the database through the server, so the file is adversarial input to the
grader. :func:`read_world` never opens a path the server can write: it loads the file's bytes
(read on the host by the sandbox session's link-safe reader) into a private in-memory
database, with SQLite's size limits lowered and a budget of virtual-machine steps, and dumps
a canonical view: the schema and every table's rows as a sorted multiset. A database the
grader cannot read within those bounds (corrupt, or built to be expensive to read, e.g. a
generated column of ``zeroblob(2e9)``) is an *unreadable world*: the agent's doing, so it
never matches a goal, but it is not an error of the environment.

:func:`diff_count` and :func:`progress` are the DB-diff potential of Tools-v0 on this view:
rows are compared as multisets per table, a table present on one side only counts all its
rows plus one, a table whose columns changed counts all rows of both sides plus one.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass

from turngym.core.hashing import state_hash

__all__ = ["World", "read_world", "diff_count", "progress", "MAX_READ_STEPS"]

#: SQLite VM instructions the grader may spend reading one world (a few ms; ~100x what a
#: task's database needs).
MAX_READ_STEPS = 2_000_000
_STEP_CHUNK = 1000
#: The largest string or blob a grader read may build (SQLITE_LIMIT_LENGTH).
_MAX_VALUE_BYTES = 1 << 20

Row = tuple[object, ...]


@dataclass(frozen=True)
class Table:
    """One table's content: its column names and its rows, sorted (a canonical multiset)."""

    columns: tuple[str, ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class World:
    """The canonical view of a database.

    Attributes:
        schema: ``(type, name, sql)`` of every schema object, sorted (tables, indexes, views,
            triggers): a changed schema is a changed world.
        tables: every user table's content by name.
        error: why the world could not be read (then ``schema`` and ``tables`` are empty).
        key: a hash of all of the above (equal keys ⇔ equal views).
    """

    schema: tuple[tuple[str, str, str], ...]
    tables: dict[str, Table]
    error: str | None
    key: str


def _sort_key(row: Row) -> tuple[tuple[int, str], ...]:
    # Mixed types (SQLite columns are dynamically typed): order by type name, then repr.
    return tuple((0 if v is None else 1, type(v).__name__ + ":" + repr(v)) for v in row)


def read_world(data: bytes) -> World:
    """The canonical view of the SQLite database in ``data`` (bounded; never raises on bad data).

    >>> con = sqlite3.connect(":memory:")
    >>> _ = con.execute("CREATE TABLE t(a INTEGER, b TEXT)")
    >>> _ = con.executemany("INSERT INTO t VALUES (?, ?)", [(2, "y"), (1, "x")])
    >>> con.commit()
    >>> w = read_world(con.serialize())
    >>> w.tables["t"]
    Table(columns=('a', 'b'), rows=((1, 'x'), (2, 'y')))
    >>> read_world(b"not a database").error
    'file is not a database'
    """
    if not data:
        return World((), {}, None, state_hash(("sqlite", (), ())))
    steps = [0]

    def budget() -> int:
        steps[0] += _STEP_CHUNK
        return 1 if steps[0] > MAX_READ_STEPS else 0

    con = sqlite3.connect(":memory:")
    try:
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
        con.set_progress_handler(budget, _STEP_CHUNK)
        con.deserialize(data)
        con.execute("PRAGMA query_only = 1")
        schema = tuple(
            (str(t), str(n), str(s or ""))
            for t, n, s in con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name, sql")
        )
        tables: dict[str, Table] = {}
        for typ, name, _sql in schema:
            if typ != "table" or name.startswith("sqlite_"):
                continue
            quoted = '"' + name.replace('"', '""') + '"'
            cur = con.execute(f"SELECT * FROM {quoted}")  # noqa: S608 - a name read from the schema, quoted
            columns = tuple(d[0] for d in cur.description or ())
            rows = sorted(cur.fetchall(), key=_sort_key)
            tables[name] = Table(columns, tuple(rows))
    except (sqlite3.Error, OverflowError, MemoryError, ValueError) as exc:
        why = "reading it took too long" if steps[0] > MAX_READ_STEPS else str(exc).split("\n")[0]
        return World((), {}, why, state_hash(("unreadable", data)))
    finally:
        con.close()
    key = state_hash(repr(("sqlite", schema, sorted((n, t.columns, t.rows) for n, t in tables.items()))))
    return World(schema, tables, None, key)


def diff_count(a: World, b: World) -> int:
    """How many rows differ between two worlds (multisets per table; see the module doc).

    >>> w1 = World((), {"t": Table(("a",), ((1,), (2,)))}, None, "k1")
    >>> w2 = World((), {"t": Table(("a",), ((2,), (3,))), "u": Table(("b",), ())}, None, "k2")
    >>> diff_count(w1, w2)
    3
    """
    if a.error is not None or b.error is not None:
        return (a.key != b.key) * (1 + sum(len(t.rows) for t in (b if a.error else a).tables.values()))
    n = 0
    for name in a.tables.keys() | b.tables.keys():
        ta, tb = a.tables.get(name), b.tables.get(name)
        if ta is None or tb is None:
            n += 1 + len((ta or tb).rows)  # type: ignore[union-attr]
        elif ta.columns != tb.columns:
            n += 1 + len(ta.rows) + len(tb.rows)
        else:
            ca, cb = Counter(ta.rows), Counter(tb.rows)
            n += sum((ca - cb).values()) + sum((cb - ca).values())
    return n


def progress(current: World, initial: World, goal: World) -> float:
    """DB-diff potential ``1 - d(current, goal) / d(initial, goal)``, clipped to [0, 1].

    With nothing to change (a question-only task) it is 1 while the world equals the goal.
    """
    base = diff_count(initial, goal)
    d = 0 if current.key == goal.key else max(1, diff_count(current, goal))  # a schema-only change counts 1
    if base == 0:
        return 1.0 if d == 0 else 0.0
    return max(0.0, 1.0 - d / base)
