"""The turn table: the one input every advantage estimator reads.

A :class:`TurnTable` is columnar: one row per turn, rows in any order, every column a NumPy
array of the same length. Ids (``episode``, ``group``, ``state_before``, ``node``) may be any
hashable values (ints, strings, uuids); the table turns them into dense integer codes once
(:func:`~turngym.trainers.advantages._ids.factorize`) and caches the few derived arrays the
estimators share (sort order by episode and turn, episode returns, position from the end of
the episode). Validation happens here, at the boundary, so the estimators can be short, pure
and vectorized.

Build it from rollouts with :func:`turngym.rollout.to_turn_table` (or
:meth:`TurnTable.from_episodes`), which writes every column below from the episodes; a table
built by hand needs only the required columns and those its estimator declares
(:func:`turngym.trainers.advantages.estimator_inputs`).

Columns
-------
============ ======== ===================================================================
column       required meaning
============ ======== ===================================================================
episode      yes      episode id
group        yes      group id; the episodes of a group share the task and initial state
turn         yes      0-based turn index within the episode (unique per episode)
reward       yes      the per-turn reward; an episode's return is the sum over its turns
state_before no       the env state *in which the turn's action was taken* (GiGPO's anchor
                      state): ``info["state_key"]`` of the reset or of the previous step,
                      ``Turn.prev_state_key`` in a rollout
state_after  no       the env state the turn led to (``info["state_key"]`` of this step,
                      ``Turn.state_key``); carried along, read by no built-in estimator
node         no       tree node id of the turn (each executed turn is one node)
parent       no       node id of the previous turn; ``None`` or ``-1`` for the first turn
info_gain    no       per-turn information gain (IGPO)
value        no       a learned critic's value of the state the turn acted in (GAE)
process      no       a per-turn process score (PAPO)
correct      no       episode outcome flag (PAPO); constant within an episode
============ ======== ===================================================================

A column named plain ``state_key`` (or ``prev_state_key``) is refused: ``info["state_key"]``
is the state *after* a step, while the estimators group turns by the state *before* it, and
a table that silently took one for the other would give wrong GiGPO anchor states. Other
columns of a rollout table (``episode_id``, ``terminated``, ``signal/<name>``, token spans...)
may ride along and are ignored; a float column an estimator declared with
:func:`~turngym.trainers.advantages.register_estimator` is kept (:meth:`TurnTable.column`);
any other unknown column is an error (a typo such as ``rewards`` must not silently fall back
to a default).

>>> t = TurnTable({"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 0], "reward": [0, 1, 0]})
>>> t.n_rows, t.n_episodes, t.episode_returns.tolist()
(3, 2, [1.0, 0.0])
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.advantages._ids import IdError, factorize

__all__ = [
    "OPTIONAL_COLUMNS",
    "PASSTHROUGH_COLUMNS",
    "REQUIRED_COLUMNS",
    "TurnTable",
    "TurnTableError",
    "as_turn_table",
    "declare_column",
]

REQUIRED_COLUMNS = ("episode", "group", "turn", "reward")
OPTIONAL_COLUMNS = ("state_before", "node", "parent", "info_gain", "value", "process", "correct")
#: Columns written by :func:`turngym.rollout.to_turn_table` that estimators do not read;
#: they (and ``signal/<name>`` columns) may ride along in the mapping.
PASSTHROUGH_COLUMNS = (
    "episode_id", "episode_return", "state_after", "terminated", "truncated", "last", "action_valid",
    "infra_error", "num_tokens", "sample", "token_start", "token_end", "policy_version",
)
_AMBIGUOUS = {
    "state_key": "info['state_key'] is the state *after* a step",
    "prev_state_key": "the table names states by when they hold",
}
_DECLARED: set[str] = set()
"""Float columns that registered estimators declared as inputs (beyond the built-in ones)."""


def declare_column(name: str) -> None:
    """Let turn tables carry the float column ``name`` (an input of a registered estimator)."""
    if name in _AMBIGUOUS or name in PASSTHROUGH_COLUMNS:
        raise ConfigError(f"{name!r} cannot be an estimator input: {_refusal(name)}")
    if name not in REQUIRED_COLUMNS and name not in OPTIONAL_COLUMNS:
        _DECLARED.add(name)


def _refusal(name: str) -> str:
    return (f"the column {name!r} is ambiguous ({_AMBIGUOUS[name]}): name the state the turn's action was taken in "
            "'state_before' (Turn.prev_state_key, the info['state_key'] of the reset or previous step) and the state "
            "it led to 'state_after' (Turn.state_key); turngym.rollout.to_turn_table writes both")


class TurnTableError(ConfigError):
    """A turn table is malformed (missing/unknown column, ragged lengths, duplicate turns...)."""


def _codes(values: Any, column: str) -> np.ndarray:
    try:
        return factorize(values, column, ordered=False)  # grouping only: the numbering does not matter
    except IdError as exc:
        raise TurnTableError(str(exc)) from exc


def _floats(values: Any, column: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TurnTableError(f"column {column!r} must be numeric: {exc}") from exc
    if arr.ndim != 1:
        raise TurnTableError(f"column {column!r} must be 1-D, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise TurnTableError(f"column {column!r} has a non-finite value {arr[bad]!r} at row {bad}")
    return arr


class TurnTable:
    """Validated, columnar turns (see the module docstring for the columns).

    Build it from any mapping of equal-length sequences (a dict of lists, a dict of arrays, a
    pandas DataFrame's ``to_dict("list")``), or from rollout episodes with
    :meth:`from_episodes`. Estimators accept either a table or the raw mapping.

    Attributes:
        episode, group: int64 codes per row (dense, 0-based).
        turn: int64 turn index per row.
        reward: float64 per-row reward.
        state_before: int64 codes of the ``state_before`` column, or None (computed on first use).
        parent_row: for tree tables, the row index of each row's parent turn (-1 for a root
            child), or None (linked and validated on first use).
        info_gain, value, process: float64 columns or None.
        correct: bool per row, or None.
    """

    def __init__(self, columns: Mapping[str, Any]) -> None:
        if isinstance(columns, TurnTable):
            raise TurnTableError("already a TurnTable: use as_turn_table(x) to accept both")
        if not isinstance(columns, Mapping):
            raise TurnTableError(f"a turn table is built from a mapping of columns, got {type(columns).__name__}")
        known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS + tuple(sorted(_DECLARED))
        for name in columns:
            if name in _AMBIGUOUS:
                raise TurnTableError(_refusal(name))
            if name not in known and name not in PASSTHROUGH_COLUMNS and not str(name).startswith("signal/"):
                close = difflib.get_close_matches(str(name), known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise TurnTableError(f"unknown column {name!r}.{hint} Known columns: {', '.join(known)}")
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise TurnTableError(f"missing required column(s) {missing}; a turn table needs {list(REQUIRED_COLUMNS)}")
        lengths = {name: len(col) for name, col in columns.items()}
        if len(set(lengths.values())) > 1:
            raise TurnTableError(f"columns have different lengths: {lengths}; every column needs one value per turn")
        self.n_rows = lengths["episode"]

        self.episode = _codes(columns["episode"], "episode")
        self.group = _codes(columns["group"], "group")
        self.reward = _floats(columns["reward"], "reward")
        turn = np.asarray(columns["turn"])
        if self.n_rows and (turn.dtype.kind not in "iu" or turn.min() < 0):
            raise TurnTableError(f"column 'turn' must hold non-negative ints (0-based turn index), got dtype {turn.dtype}")
        self.turn = turn.astype(np.int64, copy=False)
        self.n_episodes = int(self.episode.max()) + 1 if self.n_rows else 0
        self.n_groups = int(self.group.max()) + 1 if self.n_rows else 0

        self.episode_group = np.zeros(self.n_episodes, np.int64)
        self.episode_group[self.episode] = self.group
        bad = np.flatnonzero(self.episode_group[self.episode] != self.group)
        if bad.size:
            raise TurnTableError(f"episode at row {bad[0]} appears in two groups; every turn of an episode needs the same group id")

        self.order = self._sort_by_episode_and_turn()

        self.info_gain = _floats(columns["info_gain"], "info_gain") if "info_gain" in columns else None
        self.value = _floats(columns["value"], "value") if "value" in columns else None
        self.process = _floats(columns["process"], "process") if "process" in columns else None
        self.extra = {name: _floats(columns[name], name) for name in _DECLARED if name in columns}
        self._lazy = {name: columns[name] for name in ("state_before", "node", "parent") if name in columns}
        self.correct: np.ndarray | None = None
        if "correct" in columns:
            correct = np.asarray(columns["correct"])
            if correct.dtype.kind not in "biuf" or not np.isin(correct, (0, 1)).all():
                raise TurnTableError("column 'correct' must hold booleans (or 0/1)")
            correct = correct.astype(bool)
            per_ep = np.zeros(self.n_episodes, bool)
            per_ep[self.episode] = correct
            if (per_ep[self.episode] != correct).any():
                raise TurnTableError("column 'correct' is an episode outcome flag: it must be constant within an episode")
            self.correct = correct
        if ("node" in columns) != ("parent" in columns):
            raise TurnTableError("tree tables need both 'node' and 'parent' columns (parent None/-1 for a first turn)")

    # -- lazily indexed columns (factorizing strings and linking trees cost more than the
    # -- estimators that do not need them; they are validated on first use) --------------
    @cached_property
    def state_before(self) -> np.ndarray | None:
        """int64 codes of the ``state_before`` column (None if absent)."""
        return _codes(self._lazy["state_before"], "state_before") if "state_before" in self._lazy else None

    @cached_property
    def _tree_links(self) -> tuple[np.ndarray, np.ndarray] | None:
        return self._link_parents(self._lazy["node"], self._lazy["parent"]) if "node" in self._lazy else None

    @property
    def parent_row(self) -> np.ndarray | None:
        """Canonical row of each row's parent node (-1 for a first turn); None without a tree."""
        return None if self._tree_links is None else self._tree_links[0]

    @property
    def node_row(self) -> np.ndarray | None:
        """Canonical (first) row of each row's node; None without a tree."""
        return None if self._tree_links is None else self._tree_links[1]

    def has(self, column: str) -> bool:
        """Whether the table has ``column`` (required columns always)."""
        if column in REQUIRED_COLUMNS or column in self._lazy or column in self.extra:
            return True
        return column in ("info_gain", "value", "process", "correct") and getattr(self, column) is not None

    def column(self, name: str) -> np.ndarray:
        """A float column declared by a registered estimator (see :func:`declare_column`)."""
        if name not in self.extra:
            raise TurnTableError(f"the table has no column {name!r}; add it to the turn table")
        return self.extra[name]

    def _sort_by_episode_and_turn(self) -> np.ndarray:
        """Row indices sorted by (episode, turn); raises on a duplicate (episode, turn).

        O(n) when each episode's turns are consecutive (the usual case: position = episode
        start + turn − first turn), a stable sort otherwise.
        """
        if self.n_rows == 0:
            return np.zeros(0, np.int64)
        lengths = np.bincount(self.episode, minlength=self.n_episodes)
        first_turn = np.full(self.n_episodes, np.iinfo(np.int64).max)
        np.minimum.at(first_turn, self.episode, self.turn)
        slot = (np.cumsum(lengths) - lengths)[self.episode] + self.turn - first_turn[self.episode]
        in_range = (self.turn - first_turn[self.episode]) < lengths[self.episode]
        if in_range.all():
            order = np.full(self.n_rows, -1, np.int64)
            order[slot] = np.arange(self.n_rows)
            if (order >= 0).all():  # a permutation: consecutive, unique turns
                return order
        key = self.episode * (int(self.turn.max()) + 1) + self.turn
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        dup = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
        if dup.size:
            row = int(order[dup[0] + 1])
            raise TurnTableError(f"turn {self.turn[row]} of the episode at row {row} appears twice; (episode, turn) must be unique")
        return order

    # -- trees -------------------------------------------------------------------------
    def _link_parents(self, nodes: Sequence[Any], parents: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(parent_row, node_row): canonical row of each row's parent node and of its own node.

        A node may appear on several rows (a shared prefix repeated on every root-to-leaf
        episode through it, as :func:`turngym.rollout.to_turn_table` writes trees); those rows
        must agree on parent, group, turn and reward. The *canonical* row of a node is its
        first row.
        """
        n = self.n_rows
        node_arr, parent_arr = np.asarray(nodes), np.asarray(parents)
        if node_arr.dtype.kind in "iu" and parent_arr.dtype.kind in "iu":
            has = parent_arr != -1
            codes = _codes(np.concatenate([node_arr, parent_arr[has]]), "node")
        else:
            plist = parent_arr.tolist()
            has = np.fromiter((p is not None and not (isinstance(p, (int, np.integer)) and p == -1) for p in plist), bool, n)
            ids = np.empty(n + int(has.sum()), object)
            ids[:n] = node_arr.tolist()
            ids[n:] = [p for p, h in zip(plist, has) if h]
            codes = _codes(ids, "node")
        node_code, parent_code = codes[:n], codes[n:]
        canon = np.full(int(codes.max()) + 1 if codes.size else 0, n, np.int64)
        np.minimum.at(canon, node_code, np.arange(n))
        node_row = canon[node_code]
        linked = canon[parent_code]
        if (linked == n).any():
            i = int(np.flatnonzero(has)[np.flatnonzero(linked == n)[0]])
            raise TurnTableError(f"row {i}: parent {parent_arr[i]!r} is not a node of the table")
        parent_row = np.full(n, -1, np.int64)
        parent_row[has] = linked
        for what, col in (("parent", parent_row), ("group", self.group), ("turn", self.turn), ("reward", self.reward)):
            clash = np.flatnonzero(col != col[node_row])
            if clash.size:
                i = int(clash[0])
                raise TurnTableError(
                    f"rows {int(node_row[i])} and {i} are the same node {node_arr[i]!r} but differ in {what}; "
                    "node ids must be unique per executed turn (a repeated node is the same turn)"
                )
        if (self.group[linked] != self.group[has]).any():
            raise TurnTableError("a node's parent lies in another group; trees must not cross groups")
        off = self.turn[linked] != self.turn[has] - 1
        if off.any():
            i = int(np.flatnonzero(has)[np.flatnonzero(off)[0]])
            raise TurnTableError(
                f"row {i}: turn {self.turn[i]} but its parent's turn is {self.turn[parent_row[i]]}; "
                "a parent is the previous turn (turn - 1)"
            )
        return parent_row, node_row

    # -- derived arrays (cached) -------------------------------------------------------
    @cached_property
    def episode_lengths(self) -> np.ndarray:
        return np.bincount(self.episode, minlength=self.n_episodes)

    @cached_property
    def episode_returns(self) -> np.ndarray:
        """Σ reward per episode (indexed by episode code)."""
        return np.bincount(self.episode, weights=self.reward, minlength=self.n_episodes)

    @cached_property
    def position(self) -> np.ndarray:
        """0-based position of each row within its episode, in turn order."""
        starts = np.concatenate([[0], np.cumsum(self.episode_lengths)[:-1]])
        pos = np.empty(self.n_rows, np.int64)
        pos[self.order] = np.arange(self.n_rows) - starts[self.episode[self.order]]
        return pos

    @cached_property
    def steps_to_end(self) -> np.ndarray:
        """How many turns follow each row in its episode (0 for the final turn)."""
        return self.episode_lengths[self.episode] - 1 - self.position

    @property
    def is_last(self) -> np.ndarray:
        return self.steps_to_end == 0

    def require(self, estimator: str, *columns: str) -> None:
        """Raise a clear error if an estimator needs a column this table lacks."""
        lacking = [c for c in columns if not self.has(c)]
        if lacking:
            raise TurnTableError(f"estimator {estimator!r} needs column(s) {lacking}; add them to the turn table "
                                 "(turngym.rollout.to_turn_table writes state_before, node, parent and correct from episodes)")

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_episodes(cls, episodes: Sequence[Any], *, rewards: Sequence[Sequence[float]] | None = None, **extra: Sequence[Any]) -> TurnTable:
        """:func:`turngym.rollout.to_turn_table` of rollout episodes, validated.

        ``rewards`` overrides the env rewards (e.g. shaped rewards from :mod:`turngym.rewards`),
        one list per episode; ``extra`` adds per-row columns (``info_gain=[...]``) in the
        table's row order (episode by episode, turns in order).
        """
        from turngym.rollout.table import to_turn_table

        return cls({**to_turn_table(episodes, rewards=rewards), **extra})

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        opt = [c for c in OPTIONAL_COLUMNS if self.has(c)]
        return f"TurnTable({self.n_rows} rows, {self.n_episodes} episodes, {self.n_groups} groups, optional={opt})"


def as_turn_table(turns: TurnTable | Mapping[str, Any]) -> TurnTable:
    """Accept a :class:`TurnTable` or a mapping of columns."""
    return turns if isinstance(turns, TurnTable) else TurnTable(turns)
