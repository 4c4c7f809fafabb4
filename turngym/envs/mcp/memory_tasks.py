"""MCP-Memory tasks and world: a small knowledge graph from a seed, and how the env reads it.

The world is the JSONL file ``@modelcontextprotocol/server-memory`` keeps (one ``{"type":
"entity", ...}`` or ``{"type": "relation", ...}`` per line; the server re-reads it on every call).
:func:`read_graph` turns the file's bytes into a canonical view -- a sorted tuple of items
(``("e", name, type)``, ``("o", name, observation)``, ``("r", from, to, type)``) -- without the
server, bounded, never raising (the agent writes the file through the server: it is adversarial
input); :func:`graph_distance` counts the items two views do not share.

Requests combine 0-2 changes on distinct people (hire, add a fact, record a second employer,
forget someone, drop a fact) with an optional question about the graph after them; every task
asks for something. Ids ``mcp/memory/SEED`` regenerate the task.
"""

from __future__ import annotations

import json
import random
from typing import Any

from turngym.core.hashing import state_hash
from turngym.envs.mcp.world_env import WorldTask

__all__ = ["generate_memory_task", "read_graph", "graph_distance", "MEMORY_PREFIX", "ANSWER_KINDS"]

MEMORY_PREFIX = "mcp/memory"
_FIRST = ["Ada", "Bruno", "Cleo", "Dario", "Esme", "Femi", "Gia", "Hugo", "Ivy", "Jules", "Kai", "Lena"]
_LAST = ["Abe", "Berg", "Costa", "Diaz", "Eze", "Fox", "Gupta", "Holm", "Ito", "Jovic"]
_ORGS = ["Acme Corp", "Globex", "Initech", "Umbrella Labs", "Hooli", "Vandelay"]
_CITIES = ["Oakridge", "Millbrook", "Harbor City", "Pinecrest", "Eastwick"]
_ROLES = ["engineer", "designer", "analyst", "manager", "nurse", "teacher"]
_LANGS = ["French", "Swahili", "Korean", "Portuguese", "Hindi"]
#: Vocabularies of text answers (the bounded-answer rule's kinds).
ANSWER_KINDS = (frozenset(_CITIES), frozenset(_ROLES), frozenset(_ORGS))
#: The largest world the grader reads (the server's file-size limit is 16 MB; a task's is < 2 KB).
_MAX_BYTES = 1 << 20

Graph = dict[str, Any]  # {"entities": {name: (type, [observations])}, "relations": [(from, to, type)]}


def _serialize(g: Graph) -> str:
    lines = [json.dumps({"type": "entity", "name": n, "entityType": t, "observations": list(obs)})
             for n, (t, obs) in g["entities"].items()]
    lines += [json.dumps({"type": "relation", "from": a, "to": b, "relationType": r}) for a, b, r in g["relations"]]
    return "\n".join(lines)


def read_graph(data: bytes) -> tuple[tuple[str, ...], ...]:
    """The canonical view of a server-memory file (an unreadable file is a view of its own).

    >>> read_graph(b'{"type":"entity","name":"A","entityType":"person","observations":["x"]}')
    (('e', 'A', 'person'), ('o', 'A', 'x'))
    >>> read_graph(b"{oops")[0][0]
    'unreadable'
    """
    items: set[tuple[str, ...]] = set()
    try:
        if len(data) > _MAX_BYTES:
            raise ValueError("too large")
        for line in data.decode("utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            if item.get("type") == "entity":
                items.add(("e", str(item["name"]), str(item["entityType"])))
                items.update(("o", str(item["name"]), str(o)) for o in item["observations"])
            elif item.get("type") == "relation":
                items.add(("r", str(item["from"]), str(item["to"]), str(item["relationType"])))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return (("unreadable", state_hash(data)),)
    return tuple(sorted(items))


def graph_distance(a: tuple[tuple[str, ...], ...], b: tuple[tuple[str, ...], ...]) -> int:
    """Items in one view and not the other (0 exactly when the views are equal).

    >>> graph_distance((("e", "A", "person"),), (("e", "A", "person"), ("o", "A", "x")))
    1
    """
    return len(set(a) ^ set(b))


def generate_memory_task(seed: int) -> WorldTask:
    """A task from a seed: a knowledge graph, 0-2 changes and an optional question (never neither).

    >>> t = generate_memory_task(3)
    >>> t.id, t == generate_memory_task(3), bool(t.gold)
    ('mcp/memory/3', True, True)
    """
    rng = random.Random(seed)
    names = rng.sample([f"{f} {x}" for f in _FIRST for x in _LAST], 7)
    people, newcomer = names[:rng.randint(4, 6)], names[6]
    orgs = rng.sample(_ORGS, 3)
    g: Graph = {"entities": {}, "relations": []}
    for o in orgs:
        g["entities"][o] = ("organization", [f"founded in {rng.randint(1950, 2015)}"])
    for p in people:
        g["entities"][p] = ("person", [f"lives in {rng.choice(_CITIES)}", f"works as {rng.choice(_ROLES)}"])
        g["relations"].append((p, rng.choice(orgs), "works_at"))
    start = _serialize(g)
    changes = _pick_changes(rng, g, people, newcomer, orgs)
    gold = [c[1] for c in changes]
    parts = [c[0] for c in changes]
    question = _question(rng, g, orgs) if not changes or rng.random() < 0.5 else None
    answers: tuple[str, ...] = ()
    request = "Please " + " and ".join(parts) + "." if parts else ""
    if question is not None:
        sentence, read, answer = question
        request += (" After that, tell me " if parts else "Please tell me ") + sentence + "."
        gold.append(read)
        answers = (answer,)
    prompt = ("You keep our team's knowledge graph (people, organizations, works_at relations) through the memory "
              f"tools. {request.strip()} Change nothing else. Reply to me in plain text when you are done.")
    return WorldTask(id=f"{MEMORY_PREFIX}/{seed}", prompt=prompt, world=start, goal=_serialize(g), gold=tuple(gold),
                     answers=answers, meta={"changes": len(changes), "question": question is not None})


def _pick_changes(rng: random.Random, g: Graph, people: list[str], newcomer: str,
                  orgs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """0-2 changes on distinct people, applied to ``g``: (sentence, gold call)."""
    ents, rels = g["entities"], g["relations"]
    out: list[tuple[str, dict[str, Any]]] = []
    targets = rng.sample(people, 2)
    for i in range(rng.choice([0, 1, 1, 2, 2])):
        p, kind = targets[i], rng.randrange(5)
        if kind == 0 and newcomer not in ents:
            city, role = rng.choice(_CITIES), rng.choice(_ROLES)
            obs = [f"lives in {city}", f"works as {role}"]
            ents[newcomer] = ("person", obs)
            out.append((f"add {newcomer}, a {role} who lives in {city}, as a person",
                        {"name": "create_entities", "arguments": {"entities": [
                            {"name": newcomer, "entityType": "person", "observations": obs}]}}))
        elif kind == 1:
            lang = rng.choice(_LANGS)
            ents[p][1].append(f"speaks {lang}")
            out.append((f"note that {p} speaks {lang}", {"name": "add_observations", "arguments": {
                "observations": [{"entityName": p, "contents": [f"speaks {lang}"]}]}}))
        elif kind == 2:
            org = next(o for o in orgs if (p, o, "works_at") not in rels)
            rels.append((p, org, "works_at"))
            out.append((f"record that {p} now also works at {org}", {"name": "create_relations", "arguments": {
                "relations": [{"from": p, "to": org, "relationType": "works_at"}]}}))
        elif kind == 3:
            del ents[p]
            rels[:] = [r for r in rels if p not in (r[0], r[1])]
            out.append((f"forget {p} entirely (they left)", {"name": "delete_entities", "arguments": {
                "entityNames": [p]}}))
        else:
            fact = ents[p][1][0]
            ents[p][1].remove(fact)
            out.append((f"remove the fact '{fact}' from {p}", {"name": "delete_observations", "arguments": {
                "deletions": [{"entityName": p, "observations": [fact]}]}}))
    return out


def _question(rng: random.Random, g: Graph, orgs: list[str]) -> tuple[str, dict[str, Any], str] | None:
    """A question about ``g`` with one answer: (sentence, gold read, answer)."""
    ents = g["entities"]
    people = sorted(n for n, (t, _) in ents.items() if t == "person")
    kind = rng.randrange(3)
    if kind == 2 or not people:
        org = rng.choice(orgs)
        n = sum(1 for a, b, _ in g["relations"] if b == org)
        return f"how many people work at {org}", {"name": "read_graph", "arguments": {}}, str(n)
    p = rng.choice(people)
    prefix = "lives in " if kind == 0 else "works as "
    facts = [o[len(prefix):] for o in ents[p][1] if o.startswith(prefix)]
    if len(facts) != 1:
        return f"how many people work at {orgs[0]}", {"name": "read_graph", "arguments": {}}, str(
            sum(1 for a, b, _ in g["relations"] if b == orgs[0]))
    what = "which city" + f" {p} lives in" if kind == 0 else f"what {p} works as"
    return what, {"name": "open_nodes", "arguments": {"names": [p]}}, facts[0]
