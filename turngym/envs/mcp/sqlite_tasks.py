"""SQLite tasks: a small company database from a seed, and a request to change or query it.

A :class:`SQLiteTask` is plain data: the SQL that builds the starting database (``setup``),
the request (``prompt``), the oracle's tool calls (``gold``: MCP calls to
``mcp-server-sqlite``'s ``write_query`` / ``read_query``) and the facts the reply must hold
(``answers``). The *goal database* is not stored: it is the setup plus the gold writes, run by
Python's own ``sqlite3`` (the library the server uses) and cached by the env, so it cannot
drift from the engine's behaviour.

Requests combine 0-2 changes (never two on one table, so their order does not matter) with an
optional question about the database *after* the changes; every task asks for something.
Ids ``mcp/sqlite/SEED`` regenerate the task.
"""

from __future__ import annotations

import random
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from turngym.core.errors import TaskError
from turngym.core.task import Task
from turngym.envs.tools.tasks import Call  # {"name": str, "arguments": {...}}, as in Tools-v0

__all__ = [
    "SQLiteTask", "generate_sqlite_task", "sqlite_task_from_id", "build_database", "SQLITE_ID_PREFIX", "ANSWER_KINDS",
]

SQLITE_ID_PREFIX = "mcp/sqlite/"
_ID = re.compile(r"^mcp/sqlite/(\d+)$")


@dataclass(frozen=True)
class SQLiteTask(Task):
    """A request against a generated SQLite database.

    Attributes:
        setup: SQL statements that build the starting database, in order.
        gold: the oracle's calls, in order (``{"name": ..., "arguments": {...}}``).
        answers: strings the closing reply must contain (numbers compared by value).
    """

    setup: tuple[str, ...] = ()
    gold: tuple[Call, ...] = ()
    answers: tuple[str, ...] = ()

    @property
    def writes(self) -> tuple[str, ...]:
        """The gold SQL statements that change the database."""
        return tuple(c["arguments"]["query"] for c in self.gold if c["name"] == "write_query")


def build_database(statements: tuple[str, ...]) -> bytes:
    """The bytes of a database made by running ``statements`` on an empty one.

    >>> build_database(("CREATE TABLE t(a)", "INSERT INTO t VALUES (1)"))[:16]
    b'SQLite format 3\\x00'
    """
    con = sqlite3.connect(":memory:")
    try:
        for sql in statements:
            con.execute(sql)
        con.commit()
        return con.serialize()
    finally:
        con.close()


# ----------------------------------------------------------------------------- generation
_FIRST = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam", "Mara", "Noor"]
_LAST = ["Nguyen", "Okafor", "Schmidt", "Rossi", "Kim", "Silva", "Haddad", "Novak", "Larsen", "Tanaka"]
_DEPTS = ["Sales", "Research", "Support", "Finance", "Legal", "Design"]
_CITIES = ["Springfield", "Riverton", "Lakeside", "Fairview", "Bayside"]
_TOPICS = ["website", "audit", "launch", "migration", "survey", "hiring", "catalog", "billing"]
_STATUSES = ["active", "active", "paused", "done", "cancelled"]
#: The vocabularies a text answer is drawn from (its kind, for the bounded-answer rule of
#: :mod:`turngym.core.answers`): every name the generator can make, not only the world's.
ANSWER_KINDS = (
    frozenset(f"{f} {last}" for f in _FIRST for last in _LAST),
    frozenset(_DEPTS),
    frozenset(_CITIES),
    frozenset(_TOPICS),
    frozenset(_STATUSES),
)

_SCHEMA = (
    "CREATE TABLE departments (name TEXT PRIMARY KEY, budget INTEGER NOT NULL)",
    "CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept TEXT NOT NULL, "
    "city TEXT NOT NULL, salary INTEGER NOT NULL)",
    "CREATE TABLE projects (id INTEGER PRIMARY KEY, title TEXT NOT NULL, dept TEXT NOT NULL, status TEXT NOT NULL)",
)


def _lit(v: Any) -> str:
    return str(v) if isinstance(v, int) else "'" + str(v).replace("'", "''") + "'"


def _insert(table: str, row: tuple[Any, ...]) -> str:
    return f"INSERT INTO {table} VALUES ({', '.join(_lit(v) for v in row)})"


def _write(sql: str) -> Call:
    return {"name": "write_query", "arguments": {"query": sql}}


def _read(sql: str) -> Call:
    return {"name": "read_query", "arguments": {"query": sql}}


Rows = dict[str, list[tuple[Any, ...]]]


def _data(rng: random.Random) -> Rows:
    depts = rng.sample(_DEPTS, rng.randint(3, 4))
    names = rng.sample([f"{f} {last}" for f in _FIRST for last in _LAST], rng.randint(6, 9))
    employees = [
        (100 + i, name, rng.choice(depts), rng.choice(_CITIES), 1000 * rng.randint(40, 95))
        for i, name in enumerate(names)
    ]
    titles = rng.sample(_TOPICS, rng.randint(4, 6))
    projects = [(1 + i, t, rng.choice(depts), rng.choice(_STATUSES)) for i, t in enumerate(titles)]
    return {"departments": [(d, 10_000 * rng.randint(10, 60)) for d in depts], "employees": employees, "projects": projects}


def _changes(rng: random.Random, rows: Rows) -> list[tuple[str, str, Call]]:
    """Candidate changes: (table, sentence, gold call); each changes at least one row."""
    emp, proj, dept = rows["employees"], rows["projects"], rows["departments"]
    depts = [d for d, _ in dept]
    out: list[tuple[str, str, Call]] = []
    new_id = max(e[0] for e in emp) + 1
    name = rng.choice([f"{f} {last}" for f in _FIRST for last in _LAST if f"{f} {last}" not in {e[1] for e in emp}])
    d, c, s = rng.choice(depts), rng.choice(_CITIES), 1000 * rng.randint(40, 95)
    out.append(("employees", f"hire {name} (employee id {new_id}) into {d}, based in {c}, with a salary of {s}",
                _write(_insert("employees", (new_id, name, d, c, s)))))
    victim = rng.choice(emp)
    out.append(("employees", f"remove employee {victim[1]} (id {victim[0]}), who has left the company",
                _write(f"DELETE FROM employees WHERE id = {victim[0]}")))
    staffed = sorted({e[2] for e in emp})
    d = rng.choice(staffed)
    amount = 500 * rng.randint(1, 6)
    out.append(("employees", f"give every employee in {d} a raise of {amount}",
                _write(f"UPDATE employees SET salary = salary + {amount} WHERE dept = {_lit(d)}")))
    cities = sorted({e[3] for e in emp})
    c = rng.choice(cities)
    c2 = rng.choice([x for x in _CITIES if x != c])
    out.append(("employees", f"move every employee based in {c} to {c2}",
                _write(f"UPDATE employees SET city = {_lit(c2)} WHERE city = {_lit(c)}")))
    statuses = sorted({p[3] for p in proj})
    st = rng.choice(statuses)
    out.append(("projects", f"delete every project whose status is '{st}'",
                _write(f"DELETE FROM projects WHERE status = {_lit(st)}")))
    p = rng.choice([p for p in proj if p[3] != "done"] or proj)
    if p[3] != "done":
        out.append(("projects", f"mark the '{p[1]}' project as done",
                    _write(f"UPDATE projects SET status = 'done' WHERE id = {p[0]}")))
    d, b = rng.choice(dept)
    nb = b + 10_000 * rng.choice([-3, -2, -1, 1, 2, 3])
    out.append(("departments", f"set the budget of the {d} department to {nb}",
                _write(f"UPDATE departments SET budget = {nb} WHERE name = {_lit(d)}")))
    return out


def _questions(rng: random.Random, con: sqlite3.Connection) -> list[tuple[str, Call, str]]:
    """Candidate questions on the database ``con`` holds: (sentence, gold read, answer)."""
    depts = [r[0] for r in con.execute("SELECT DISTINCT dept FROM employees ORDER BY dept")]
    cities = [r[0] for r in con.execute("SELECT DISTINCT city FROM employees ORDER BY city")]
    out: list[tuple[str, Call, str]] = []
    if depts:
        d = rng.choice(depts)
        sql = f"SELECT COUNT(*) AS n FROM employees WHERE dept = {_lit(d)}"
        out.append((f"how many employees work in {d}", _read(sql), str(con.execute(sql).fetchone()[0])))
        d = rng.choice(depts)
        sql = f"SELECT SUM(salary) AS total FROM employees WHERE dept = {_lit(d)}"
        out.append((f"the total salary of everyone in {d}", _read(sql), str(con.execute(sql).fetchone()[0])))
    if cities:
        c = rng.choice(cities)
        sql = f"SELECT name, salary FROM employees WHERE city = {_lit(c)} ORDER BY salary DESC LIMIT 2"
        top = con.execute(sql).fetchall()
        if len(top) == 1 or top[0][1] != top[1][1]:
            out.append((f"who is the highest-paid employee based in {c}", _read(sql), str(top[0][0])))
    sql = "SELECT COUNT(*) AS n FROM projects WHERE status = 'active'"
    out.append(("how many projects are active", _read(sql), str(con.execute(sql).fetchone()[0])))
    return out


def generate_sqlite_task(seed: int) -> SQLiteTask:
    """A task from a seed: a fresh database, 0-2 changes and an optional question (never neither).

    >>> t = generate_sqlite_task(3)
    >>> t.id, t == generate_sqlite_task(3), bool(t.writes or t.answers)
    ('mcp/sqlite/3', True, True)
    """
    rng = random.Random(seed)
    rows = _data(rng)
    setup = (*_SCHEMA, *(_insert(table, r) for table, rs in rows.items() for r in rs))
    pool = _changes(rng, rows)
    rng.shuffle(pool)
    n_changes = rng.choice([0, 1, 1, 2, 2])
    changes: list[tuple[str, str, Call]] = []
    for change in pool:
        if len(changes) < n_changes and all(change[0] != c[0] for c in changes):
            changes.append(change)
    con = sqlite3.connect(":memory:")
    try:
        for sql in (*setup, *(c[2]["arguments"]["query"] for c in changes)):
            con.execute(sql)
        ask = not changes or rng.random() < 0.5
        question = rng.choice(_questions(rng, con)) if ask else None
    finally:
        con.close()
    parts = [c[1] for c in changes]
    gold = [c[2] for c in changes]
    answers: tuple[str, ...] = ()
    request = ""
    if parts:
        request = "Please " + " and ".join(parts) + "."
    if question is not None:
        sentence, read, answer = question
        lead = "After that, tell me " if parts else "Please tell me "
        request = (request + " " if request else "") + lead + sentence + "."
        gold.append(read)
        answers = (answer,)
    prompt = (
        "You manage our company's SQLite database (tables: departments, employees, projects) through the tools. "
        f"{request} Do not change the schema or anything else. Reply to me in plain text when you are done."
    )
    return SQLiteTask(
        id=f"{SQLITE_ID_PREFIX}{seed}",
        prompt=prompt,
        setup=setup,
        gold=tuple(gold),
        answers=answers,
        meta={"changes": len(changes), "question": question is not None},
    )


def sqlite_task_from_id(task_id: str) -> SQLiteTask:
    """Regenerate ``mcp/sqlite/SEED``."""
    m = _ID.match(task_id)
    if m is None:
        raise TaskError(f"unknown MCP SQLite task id {task_id!r}; expected '{SQLITE_ID_PREFIX}SEED', e.g. 'mcp/sqlite/7'")
    return generate_sqlite_task(int(m.group(1)))
